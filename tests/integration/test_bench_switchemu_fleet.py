"""benchmarks/bench_switchemu.py case c (one switchemu per switch of the Lingjun racks) at a tiny scale:
3 real switchemu processes (two ToRs and their aggregation switch), 30 emulated daemons, 2 s. The report
has its structure, every switch answered, and every process the case started is gone afterwards (the
test kills leftovers by PID even when the case fails). Plus the pure parts: the fleet's racks and flows,
and the search's bisection."""

from __future__ import annotations

import importlib.util
import json
import math
import os
import signal

import pytest

_PATH = os.path.join(os.path.dirname(__file__), "..", "..", "benchmarks", "bench_switchemu.py")
_spec = importlib.util.spec_from_file_location("bench_switchemu", _PATH)
bench = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(bench)

# Lingjun format (ip,DSW,PSW,ASW): pod P1 with racks S1 (4 hosts) and S2 (3), pod P2 with S1 (2)
CSV = "ip,DSW,PSW,ASW\n" + "".join(f"a{i},G1,P1,S{1 + (i >= 4)}\n" for i in range(7)) + "b0,G1,P2,S1\nb1,G1,P2,S1\n"


def _csv(tmp_path) -> str:
    p = tmp_path / "topo.csv"
    p.write_text(CSV)
    return str(p)


def test_fleet_racks_prefix_scaled_and_flows(tmp_path):
    racks = bench.lingjun_racks(_csv(tmp_path))
    assert racks == [("G1", "P1", "P1.S1", 4), ("G1", "P1", "P1.S2", 3), ("G1", "P2", "P2.S1", 2)]
    # fewer daemons than hosts: a prefix in rack order; more: every rack scaled; --racks: those scaled
    assert bench.fleet_racks(racks, 5)[:2] == (racks[:2], [4, 1])
    got, counts, _ = bench.fleet_racks(racks, 18)
    assert got == racks and counts == [8, 6, 4]
    assert bench.fleet_racks(racks, 30, n_racks=2)[1] == [17, 13]
    plan = bench.fleet_plan(racks, [4, 3, 2], job_hosts=9)
    assert [(s["name"], s["layer"]) for s in plan["switches"]] == [
        ("G1", "core"), ("P1", "aggregation"), ("P2", "aggregation"), ("P1.S1", "tor"), ("P1.S2", "tor"), ("P2.S1", "tor")]
    names = [s["name"] for s in plan["switches"]]
    d = {h: (dst, [names[i] for i in sws]) for h, dst, _, sws in plan["daemons"]}
    assert d[0] == (1, ["P1.S1"])  # inside the rack: its ToR only
    assert d[3] == (4, ["P1.S1", "P1", "P1.S2"])  # across racks: ToR, aggregation, ToR
    assert d[6] == (7, ["P1.S2", "P1", "G1", "P2", "P2.S1"])  # across pods: and the core
    assert d[8] == (0, ["P2.S1", "P2", "G1", "P1", "P1.S1"])  # the ring closes
    assert all(s["daemons"] == sum(1 for x in plan["daemons"] if i in x[3]) for i, s in enumerate(plan["switches"]))


def test_the_real_lingjun_topology_scaled_to_1000():
    try:
        racks = bench.lingjun_racks()
    except Exception as e:  # noqa: BLE001  the shared data folder is not there
        pytest.skip(f"no Lingjun topology: {e}")
    assert len(racks) == 119 and sum(r[3] for r in racks) == 847
    got, counts, how = bench.fleet_racks(racks, 1000)
    assert len(got) == 119 and sum(counts) == 1000 and "scaled" in how
    plan = bench.fleet_plan(got, counts)
    assert len(plan["switches"]) == 123 and all(d[3] for d in plan["daemons"])


def test_search_doubles_then_bisects_and_halves_when_the_start_fails():
    class Result(dict):  # a run_fleet_case result: the keys the search reads, [] for the others
        def __missing__(self, key):
            return []

    def step_keys(n, ok):
        return Result(daemons=n, keeps_up=ok, limits=[] if ok else ["x"], switch_processes=1, switches_cpu_pct=1.0,
                      switch_cpu_pct_max=1.0, generators_cpu_pct=1.0, other_load_cores=0.0)

    for limit in (2900, 140):
        seen = []

        def run(n, limit=limit, seen=seen):
            seen.append(n)
            return step_keys(n, n <= limit)

        s = bench.fleet_search(run, 1000, 1e9, log=lambda m: None)
        lo, hi = s["largest_fleet_kept_up"], s["smallest_fleet_failed"]
        assert lo <= limit < hi and hi - lo <= max(25, lo // 10), (limit, seen)
        assert seen[0] == 1000 and len(seen) == len(set(seen))
        if limit > 1000:
            assert seen[:3] == [1000, 2000, 4000]
        else:
            assert seen[:3] == [1000, 500, 250]
    # the budget: no step starts once the last one would not fit
    s = bench.fleet_search(lambda n: step_keys(n, True), 1000, -1.0, log=lambda m: None)
    assert s["stopped_by_budget"] and not s["steps"]


def test_fleet_case_tiny_every_switch_answers_and_nothing_is_left_running(tmp_path):
    started: list = []
    try:
        r = bench.run_fleet_case("c: tiny", 30, 2, 2.0, n_racks=2, csv_path=_csv(tmp_path), started=started,
                                 idle_s=0.5, log=lambda m: None)
        left = [p.pid for p in started if p.poll() is None]
    finally:
        for p in started:  # by PID, whatever happened
            if p.poll() is None:
                os.kill(p.pid, signal.SIGKILL)
                p.wait()
    assert not left, f"processes still running after the case: {left}"
    assert len(started) == 3 + 2  # 3 switches, 2 generators (no restarts needed on free ports)
    assert r["switch_processes"] == 3 and r["topology"]["layers"] == {"core": 0, "aggregation": 1, "tor": 2}
    assert [s["switch"] for s in r["switches"]] == ["P1", "P1.S1", "P1.S2"]
    assert r["daemons"] == 30 and r["expected_exchanges"] == 1000
    for s in r["switches"]:
        for k in ("rtt_ms_p50", "rtt_ms_p99", "cpu_pct", "frames_per_s", "messages_per_s", "answered_frac",
                  "late_frac", "error_frac", "keeps_up", "idle_cpu_pct", "cpu_pct_run_schedstat"):
            assert k in s, k
        assert s["daemons"] > 0 and s["exchanges"] > 0, s
        assert s["answered_frac"] >= 0.5, s  # every switch answered (a loaded CI machine may be late)
        assert math.isfinite(s["rtt_ms_p99"]) and s["frames_per_s"] > 0 and s["cpu_pct"] >= 0
    assert r["switches"][0]["daemons"] == 2  # the two flows that cross the rack boundary (ring closes)
    assert sum(s["daemons"] for s in r["switches"] if s["layer"] == "tor") == 30 + 2
    assert r["exchanges"] > 0 and r["replies_malformed"] == 0 and r["replies_validated"] > 0
    for k in ("switches_cpu_pct", "generators_cpu_pct", "other_load_cores", "machine_busy_cores", "layers",
              "keeps_up", "limits", "timeline", "exchange_ms_p99"):
        assert k in r, k
    out = tmp_path / "fleet.json"
    bench.write_results(str(out), [r], search={"steps": [bench.fleet_step(r)]})
    back = json.loads(out.read_text())
    assert back["results"][0]["switch_processes"] == 3 and back["meta"]["slot_s"] == bench.SLOT_S
    assert back["search"]["steps"][0]["daemons"] == 30


def test_fleet_case_stops_its_switches_when_a_generator_fails(tmp_path, monkeypatch):
    started: list = []
    monkeypatch.setattr(bench, "__file__", str(tmp_path / "missing.py"))  # the generators cannot start
    try:
        with pytest.raises(RuntimeError, match="load generator"):
            bench.run_fleet_case("c: broken", 10, 1, 1.0, n_racks=2, csv_path=_csv(tmp_path), started=started,
                                 idle_s=0.0, log=lambda m: None)
        left = [p.pid for p in started if p.poll() is None]
    finally:
        for p in started:
            if p.poll() is None:
                os.kill(p.pid, signal.SIGKILL)
                p.wait()
    assert len(started) == 4 and not left  # 3 switches and the generator, all ended
