"""Smoke test of the pacing benchmark: ``python -m hostctl_lab.bench.pacing --quick`` (~30-60 s).

It runs as a subprocess whose command line names hostctl: another hostctl's ``clean``
(journal.daemon_alive) then sees its pacer's owner as alive and leaves it alone.
"""

from __future__ import annotations

import json
import os
import subprocess

import pytest

from hostctl_lab.bench.pacing import STEP_TOL, STEP_WIN_S, burst_bytes
from tests.conftest import PY, sh

pytestmark = [pytest.mark.root, pytest.mark.netns, pytest.mark.bpf, pytest.mark.slow]

SECTIONS = ("machine", "unpaced", "accuracy", "step", "flows200", "map_full", "overhead")


def test_quick_pacing_benchmark(tmp_path):
    out = tmp_path / "pacing"
    r = subprocess.run([PY, "-m", "hostctl_lab.bench.pacing", "--quick", "--out", str(out)], capture_output=True,
                       text=True, timeout=400)
    assert r.returncode == 0, (r.stdout[-2000:], r.stderr[-3000:])
    d = json.loads((out / "pacing.json").read_text())

    for key in SECTIONS:
        assert key in d and "error" not in d[key], (key, d.get(key))
    for key in ("accuracy", "step", "flows200", "overhead", "map_full"):
        assert d[key]["pacer_intact"]["ok"], (key, d[key]["pacer_intact"])
    m = d["machine"]
    assert m["nproc"] >= 1 and m["kernel"] and m["date"]
    assert d["unpaced"]["goodput_bps"] > 100e6

    acc = {t["target_bps"]: t for t in d["accuracy"]["targets"]}
    assert abs(acc[50_000_000]["err_mean"]) <= 0.10, acc[50_000_000]
    assert acc[50_000_000]["applied_rate_Bps"] == 50_000_000 // 8
    assert d["accuracy"]["header_model"]["pacing_counts_header_bytes"] in (True, False)

    for run in d["step"]["runs"]:
        assert run["changes"] and run["slots"]
        # a change can be seen to settle only where one TSO burst is a small part of a 20 ms window: at
        # 100-200 Mbit/s a 64 KB burst is 13-26% of it (STEP_TOL 10%), and those changes settle or not by
        # luck of the window's alignment (2 of 5 did not in one CI run); at most one of the others may miss
        tso = run["tcp_tso_rtt_log"]
        seen = [c for c in run["changes"]
                if burst_bytes(c["to_bps"], tso) * 8 / (STEP_WIN_S * c["to_bps"]) <= STEP_TOL]
        assert seen and sum(c["settled"] for c in seen) >= len(seen) - 1, run["changes"]
        assert run["slot_err_mean_abs"] < 0.15, run["slots"]

    fl = d["flows200"]
    assert fl["measured"] == fl["flows"] == 200
    assert fl["rates_applied_in_kernel"] == 200
    assert fl["within_tol"] >= 150 and fl["mean_abs_err"] < 0.10, {k: v for k, v in fl.items() if k != "per_flow"}

    mf = d["map_full"]
    assert mf["flows_full"] == mf["expected_flows_full"] > 0
    assert mf["not_in_map_unpaced"] == mf["streams_not_in_map"] == mf["expected_flows_full"]

    ov = d["overhead"]
    for cfg in ("b", "c"):
        assert 0.2 < ov[f"ratio_{cfg}_a"]["mean"] < 5
        st = ov["prog_stats"][cfg]
        assert st["run_cnt"] > 0 and 0 < st["ns_per_call"] < 100_000 and st["calls_per_s"] > 0

    for png in ("pacing_accuracy.png", "pacing_step.png", "pacing_flows200.png"):
        assert (out / png).stat().st_size > 1000

    # nothing left behind
    listed = sh(["ip", "netns", "list"]).stdout
    assert not any(ns in listed for ns in d["bed"]["namespaces"]), listed
    for pin in [*d["bed"]["pin_dirs"], mf["pin_dir"]]:
        assert not os.path.exists(pin), pin
    for cg in d["bed"]["cgroups_created"]:
        assert not os.path.exists(cg), cg
