"""benchmarks/cpu_burn.py: it burns about the CPU it is asked for, then stops; bad flags exit 2."""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
import time

_PATH = os.path.join(os.path.dirname(__file__), "..", "..", "benchmarks", "cpu_burn.py")
_spec = importlib.util.spec_from_file_location("cpu_burn", _PATH)
cb = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(cb)


def test_it_burns_and_stops_on_time():
    t0 = time.monotonic()
    out = subprocess.run([sys.executable, _PATH, "--procs", "1", "--duty", "0.5", "--seconds", "1"],
                         capture_output=True, text=True, timeout=30)
    assert out.returncode == 0, out.stderr
    assert time.monotonic() - t0 < 15
    used = float(out.stdout.split("used ")[1].split(" cores")[0])
    assert 0.05 < used <= 0.8  # about half a core (less on a busy machine), never a whole one


def test_bad_flags_are_one_line_and_exit_2(capsys):
    for argv, what in ((["--duty", "0"], "--duty"), (["--procs", "0"], "--procs"), (["--seconds", "-1"], "--seconds")):
        assert cb.main(argv) == 2
        err = capsys.readouterr().err
        assert what in err and err.count("\n") == 1
