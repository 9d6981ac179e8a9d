"""The resource-limits benchmark, small (benchmarks/bench_limits.py; the full run is in docs/benchmarks.md,
"Resource limits"): short connections arriving at 100/s, a job of 200 connections, one of 300, against a
real daemon under mlcc with the pacer, over real TCP. Every connection is made, the pacing maps hold each
job's flows and are empty again once they close, nothing is left behind after `hostctl stop`."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

pytestmark = [pytest.mark.root, pytest.mark.netns, pytest.mark.bpf, pytest.mark.slow]
ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def test_many_flows_short_and_long_are_tracked_and_forgotten(tmp_path):
    r = subprocess.run([sys.executable, os.path.join(ROOT, "benchmarks", "bench_limits.py"), "--seconds", "4",
                        "--churn-rate", "100", "--big", "200", "--full", "300", "--sample-s", "1",
                        "--out", str(tmp_path)], capture_output=True, text=True, timeout=600, cwd=ROOT)
    assert r.returncode == 0, (r.stdout[-3000:], r.stderr[-3000:])
    rep = json.loads((tmp_path / "limits.json").read_text())
    assert rep["stop"] == {"hostctl_stop_rc": 0, "daemon_rc": 0, "restored": True}
    assert rep["tracebacks"] == 0 and rep["log_errors"] == 0
    rows = {r["phase"]: r for r in rep["rows"]}
    assert rows["churn"]["client"]["connected"] >= 300 and rows["churn"]["client"]["connect_errors"] == 0
    assert rows["big"]["client"]["connected"] == 200 and rows["full"]["client"]["connected"] == 300
    assert rows["big"]["maps_max"]["hc_pace_flows"] == 200 and rows["full"]["maps_max"]["hc_pace_flows"] == 300
    assert all(r["drained_s"] is not None and r["flows_full"] == 0 and r["errors"] == 0 for r in rows.values())
