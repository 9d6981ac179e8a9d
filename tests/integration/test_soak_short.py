"""The soak benchmark, short (benchmarks/soak.py, 30 s per policy; the 30-minute runs are in
docs/benchmarks.md): jobs arrive and leave every few seconds over real TCP while the daemon runs
under rr and under mlcc with a real switchemu. Nothing may keep growing, the daemon logs no error or
traceback, and after `hostctl stop` the interface, the pacer's bpffs pins and the cgroup's programs
are exactly as before."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

pytestmark = [pytest.mark.root, pytest.mark.netns, pytest.mark.bpf, pytest.mark.slow]
ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


@pytest.mark.parametrize("policy", ["rr", "mlcc"])
def test_a_short_soak_leaves_nothing_growing_and_nothing_behind(policy, tmp_path):
    r = subprocess.run([sys.executable, os.path.join(ROOT, "benchmarks", "soak.py"), "--policy", policy,
                        "--minutes", "0.5", "--sample-s", "3", "--arrival-s", "1", "--out", str(tmp_path)],
                       capture_output=True, text=True, timeout=600, cwd=ROOT)
    assert r.returncode == 0, (r.stdout[-3000:], r.stderr[-3000:])
    rep = json.loads((tmp_path / "soak.json").read_text())
    assert rep["stop"]["restored"] and rep["stop"]["daemon_rc"] == 0 and rep["stop"]["hostctl_stop_rc"] == 0
    assert rep["tracebacks"] == 0 and rep["log_errors"] == 0, rep
    assert rep["jobs_started"] >= 15
    sm = rep["summary"]
    # jobs came and went (not all at once): the daemon saw many, and their flows
    assert sm["jobs"]["max"] >= 3 and sm["job_flows"]["max"] >= 3
    # bounded: RSS within 16 MiB of its level after the warm-up, fds and threads within a few, the BPF
    # hash maps within what the live jobs need (plus the port specs' 2 x 1000 watches under mlcc)
    assert sm["rss_kib"]["max"] - sm["rss_kib"]["first"] <= 16 * 1024, sm["rss_kib"]
    assert sm["fds"]["max"] - sm["fds"]["min"] <= 8 and sm["threads"]["max"] - sm["threads"]["min"] <= 4, sm
    static = 2000 if policy == "mlcc" else 0
    assert sm["map_entries"]["max"] <= static + 4 * (sm["job_flows"]["max"] + sm["jobs"]["max"]) + 16, sm
    assert sm["gc_max_ms"] > 0  # the daemon times its garbage collector (status stats.gc_max_ms)
    assert (tmp_path / "soak.png").stat().st_size > 10_000
