"""10,000 random command lines each for `hostctl` and `switchemu` (tests/cli_fuzz.py): every
one ends in a result or one `...: error:` line, never a traceback or a hang, and afterwards a good
command still works (a dry-run plan; an answer from the real switchemu that took every probe and
status). Seeded: a failure prints the command line to replay (python -m tests.cli_fuzz CLI
--replay FILE). Regression tests for what it found are in test_cli_errors.py and
test_switchemu.py (test_cli_errors_are_one_line and the two after it)."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
CASES = 10_000
pytestmark = pytest.mark.slow  # about 20 s each

# how many cases at least got past the parser and the checks into the code behind them (exit 0):
# the generator must keep reaching the plan, discovery, the switch and the key files (about half
# of what seed 1 reaches; a change that makes nearly every case fail early is caught here)
DEPTH = {"hostctl": {"start": 200, "flows": 400},
         "switchemu": {"(group)": 80, "probe": 70, "status": 120, "keygen": 300}}


@pytest.mark.parametrize("cli", ["hostctl", "switchemu"])
def test_10k_command_lines_end_in_a_result_or_one_error_line(cli, tmp_path):
    out = tmp_path / "fuzz.json"
    r = subprocess.run([sys.executable, "-m", "tests.cli_fuzz", cli, "--cases", str(CASES), "--seed", "1",
                        "--workdir", str(tmp_path / "work"), "--out", str(out)],
                       cwd=ROOT, capture_output=True, text=True, timeout=900)
    assert r.returncode == 0, r.stderr[-3000:]
    res = json.loads(out.read_text())
    shown = "\n".join(f"{f['why']}: {f['shell'][:300]}\n  exit {f['exit']}: "
                      f"{(f['exception'] or f['stderr']).strip().splitlines()[-1:]}" for f in res["failures"][:10])
    assert res["cases"] == CASES
    assert not res["failures"], f"{len(res['failures'])} of {CASES} failed, e.g.:\n{shown}"
    assert res["answers_after"], res["answers_after_output"]
    for cmd, least in DEPTH[cli].items():
        assert res["by_command"].get(cmd, {}).get("exit 0", 0) >= least, (cmd, res["by_command"])
    print(cli, res["seconds"], "s", res["outcomes"])
