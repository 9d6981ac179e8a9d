"""`hostctl sim --network mlcc,mlcc-switch,mcs,ccml` as a user runs it (a small sweep, a bad --slot)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

HOSTCTL = str(Path(sys.executable).with_name("hostctl"))


def run(args: list[str], cwd: Path) -> subprocess.CompletedProcess:
    env = {**os.environ, "COLUMNS": "100", "NO_COLOR": "1"}
    return subprocess.run([HOSTCTL, *args], capture_output=True, text=True, timeout=120, cwd=cwd, env=env)


def test_the_mlcc_networks_run_from_the_cli(tmp_path):
    out = tmp_path / "o"
    r = run(["sim", "--topology", "mlcc-tree", "--servers", "20", "--jobs", "10", "--max-iterations", "20",
             "--time-scale", "0.0001", "--network", "fifo,mlcc,mlcc-switch,mcs,ccml", "--slot", "0.03",
             "--no-plots", "--out", str(out)], tmp_path)
    assert r.returncode == 0 and "Traceback" not in r.stdout + r.stderr, r.stdout + r.stderr
    doc = json.loads((out / "sim.json").read_text())
    assert [x["network"] for x in doc["runs"]] == ["fifo", "mlcc", "mlcc-switch", "mcs", "ccml"]
    assert doc["spec"]["slot_s"] == 0.03
    assert all(x["finished"] == x["jobs"] == 10 for x in doc["runs"])


def test_a_bad_slot_is_one_line(tmp_path):
    r = run(["sim", "--topology", "single-switch", "--jobs", "2", "--network", "mlcc", "--slot", "-1"], tmp_path)
    assert r.returncode == 2, r.stdout + r.stderr
    assert r.stderr.strip().splitlines() == ["hostctl: error: --slot must be a positive number of seconds, got -1.0"]
