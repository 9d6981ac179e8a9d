"""hostctl_lab.analysis.ps_phases, hostctl_lab.fluid.placement1, .mixed and .mlcc, and benchmarks/bench_mlcc_daemon.py:
known answers on small inputs."""

from __future__ import annotations

import importlib.util
import json
import os
import sys

import pytest

_ROOT = os.path.join(os.path.dirname(__file__), "..", "..", "benchmarks")


def _load(name: str):
    spec = importlib.util.spec_from_file_location(name, os.path.join(_ROOT, f"{name}.py"))
    mod = importlib.util.module_from_spec(spec)
    sys.modules[name] = mod  # dataclasses look their module up there
    spec.loader.exec_module(mod)
    return mod


from hostctl_lab.analysis import ps_phases as phases  # noqa: E402
from hostctl_lab.fluid import mixed  # noqa: E402
from hostctl_lab.fluid import mlcc as fmlcc  # noqa: E402
from hostctl_lab.fluid import placement1 as fluid  # noqa: E402


def _worker(rank: int, grad_at: list[float], starts: list[float], compute: float) -> dict:
    return {"job": "j", "kind": "ps", "role": "worker", "rank": rank, "barrier_enter": grad_at,
            "compute_start": starts, "compute_wall_s": [compute] * len(starts)}


def test_phases_by_hand():
    # iteration 1 is released at 1.0 (the later of the two gradients of iteration 0); worker 0 has its
    # update at 1.02, computes 0.03 s, its gradient arrives at 1.10; worker 1: 1.04, 0.03, 1.15
    w0 = _worker(0, [0.9, 1.10], [0.5, 1.02], 0.03)
    w1 = _worker(1, [1.0, 1.15], [0.5, 1.04], 0.03)
    p = phases.job_phases([w0, w1])
    assert p["iteration"] == pytest.approx(0.15)
    assert p["update"] == pytest.approx((0.02 + 0.04) / 2)
    assert p["compute"] == pytest.approx(0.03)
    assert p["gradient"] == pytest.approx((0.05 + 0.08) / 2)
    assert p["wait"] == pytest.approx((0.05 + 0.0) / 2)
    # the phases of each worker add up to the iteration
    assert p["update"] + p["compute"] + p["gradient"] + p["wait"] == pytest.approx(p["iteration"])


def test_phases_cli_refuses_old_records(tmp_path, capsys):
    rec = _worker(0, [0.9, 1.1], [0.5, 1.0], 0.03)
    del rec["compute_start"]
    (tmp_path / "j.w0.json").write_text(json.dumps(rec))
    assert phases.main([str(tmp_path)]) == 1
    assert "compute_start" in capsys.readouterr().err


def test_fluid_one_job_alone_runs_at_its_standalone_pace():
    # one job: 10 ms update + 20 ms compute + 10 ms gradient = 40 ms an iteration, any policy
    for pol in ("fifo", "one"):
        r = fluid.simulate(1, 0.01, 0.02, 0.01, pol, True, (0,), seconds=4.0, dt=1e-4, jitter=0.0,
                           rr_interval=1.0, seed=0)
        assert r["iterations_per_job"] == pytest.approx(100, abs=1)
        assert r["busy"]["send"] == pytest.approx(0.25, abs=0.01)


def test_fluid_priority_breaks_fifo_lock_step():
    # under fifo two jobs fall into lock-step (both links idle while both compute);
    # strict priority staggers them so one's compute overlaps the other's transfers
    args = dict(seconds=4.0, dt=1e-4, jitter=0.0, rr_interval=1.0, seed=0)
    f = fluid.simulate(2, 0.01, 0.02, 0.01, "fifo", False, (0, 2), **args)
    o = fluid.simulate(2, 0.01, 0.02, 0.01, "one", False, (0, 2), **args)
    assert o["iterations_per_job"] > 1.1 * f["iterations_per_job"]


def test_fluid_mixed_jobs_alone_take_their_analytic_time():
    # 500 Mbit/s links, 12 iterations, 200 ms compute. PS: the 4 x 2 MiB update leaves the PS's up
    # link and the gradients converge on its down link, 134 ms each. Ring: 6 steps of 2 MiB, 33.6 ms each.
    link = 500e6 / 8
    assert mixed.standalone_s("psa") == pytest.approx(12 * (2 * 8 * mixed.MIB / link + 0.2), rel=1e-6)
    assert mixed.standalone_s("ring") == pytest.approx(12 * (6 * 2 * mixed.MIB / link + 0.2), rel=1e-6)


def test_fluid_mixed_sender_priority_with_one_band_is_max_min_fair():
    """The egress-only allocator (priority at up links, FIFO down links, found as a fixed point) gives
    the max-min fair rates of progressive filling when every flow is in one band."""
    import random

    rnd = random.Random(1)
    hosts = [f"h{i}" for i in range(6)]
    for _ in range(200):
        flows = [mixed.Flow(rnd.randint(0, 5), *rnd.sample(hosts, 2), 1.0) for _ in range(rnd.randint(1, 15))]
        bands = {j: 0 for j in range(-1, 6)}
        mixed.Sim(62.5e6, bands, flows=flows).allocate()
        fair = [f.rate for f in flows]
        mixed.Sim(62.5e6, bands, flows=flows, egress_only=True).allocate()
        assert [f.rate for f in flows] == pytest.approx(fair, abs=1.0)


def test_fluid_mixed_priority_at_the_sender_and_fifo_at_the_port():
    # h0 sends a (band 0) and b (band 1) to h2, which also receives c from h1 (band 0).
    # Every link: a and c split h2's port, b gets nothing. Sender only: h2's port shares fairly among
    # the flows that reach it, so a, b and c get a third each and h0's up link has room for both.
    link = 62.5e6
    flows = [mixed.Flow(0, "h0", "h2", 1.0), mixed.Flow(1, "h0", "h2", 1.0), mixed.Flow(2, "h1", "h2", 1.0)]
    bands = {-1: 9, 0: 0, 1: 1, 2: 0}
    mixed.Sim(link, bands, flows=flows).allocate()
    assert [f.rate for f in flows] == pytest.approx([link / 2, 0.0, link / 2])
    mixed.Sim(link, bands, flows=flows, egress_only=True).allocate()
    assert [f.rate for f in flows] == pytest.approx([link / 3] * 3, rel=1e-6)


def test_decision_benchmark_stand_in_switch_answers_like_a_switch():
    """bench_mlcc_daemon's InstantSwitch gives each fetched flow its 2- or 4-link path with loads, so
    switch mode plans over those links; the benchmark's cases run and report their percentiles."""
    bm = _load("bench_mlcc_daemon")
    rng = __import__("numpy").random.default_rng(0)
    fl = bm.flows(rng, 30, 3, peers=25)
    assert len({f.key.raddr for f in fl}) == 25  # --peers: the flows go to that many hosts
    sw = bm.InstantSwitch()
    ctl = bm.MlccControl(int(bm.NIC_Bps), 0.06, wall=lambda: 1e9, switch=sw)
    ctl.tick(fl)
    paths = {len(p) for p in ctl.paths.values()}
    assert paths <= {2, 4} and 4 in paths  # hosts 20-26 are in another rack
    assert ctl.status()["links"] > 25  # the NIC, this host's uplink, the peers' downlinks, rack links
    for order in (None, "none", "fixed"):
        r = bm.run_case(20, 2, 15, seed=1, order=order, peers=5)
        assert r["mode"] == ("local" if order is None else f"switch, order {order}")
        assert 0 < r["wall_ms"]["median"] <= r["wall_ms"]["p90"] <= r["wall_ms"]["p99"]


def test_fluid_mlcc_caps_then_shares_max_min():
    # one up link: a flow capped at a tenth of it, two uncapped ones share the rest; a cap above the
    # fair share does not bind
    sim = fmlcc.CappedSim(cap_Bps=100.0, prio={})
    a, b, c = (mixed.Flow(j, "h0", f"h{2 + j}", 1e9) for j in range(3))
    sim.flows = [a, b, c]
    sim.caps = {a.conn: 10.0, b.conn: 80.0}
    sim.allocate()
    assert (a.rate, b.rate, c.rate) == pytest.approx((10.0, 45.0, 45.0))


@pytest.mark.parametrize("mode", ["local", "switch"])
def test_fluid_mlcc_one_job_alone_runs_at_its_standalone_time(mode):
    # the plan of a job alone gives its flows the whole path: it takes exactly what it takes without hostctl
    r = fmlcc.run_mlcc("alone", mode, None, 0.06, 1, 0.0, False, jobs=[("psa", "h0")])
    assert r["avg_jct_s"] == pytest.approx(mixed.standalone_s("psa"), rel=1e-3)
    assert r["plan_ms_per_slot"] > 0


def test_fluid_mlcc_job_order_breaks_the_lock_step_like_priority():
    # two identical PS jobs on one host, no jitter: fair sharing keeps them in lock-step, and so does
    # local mode; the plans with switchemu stagger them about as strict priority does, under a job
    # order and in arrival order
    two = [("psa", "h0"), ("psa", "h0")]
    fair = mixed.scenario({-1: 0, 0: 0, 1: 0}, 0, 0.0, False, jobs=two)["avg_jct_s"]
    prio = mixed.scenario({-1: 0, 0: 0, 1: 1}, 0, 0.0, False, jobs=two)["avg_jct_s"]
    fixed = fmlcc.run_mlcc("fixed", "switch", [0, 1], 0.06, 1, 0.0, False, jobs=two)["avg_jct_s"]
    assert prio < 0.7 * fair
    assert fixed == pytest.approx(prio, rel=0.08)
    local = fmlcc.run_mlcc("local", "local", None, 0.06, 1, 0.0, False, jobs=two)["avg_jct_s"]
    assert local == pytest.approx(fair, rel=0.02)
    # with switchemu and no job order, the jobs plan in the order their schedules arrived at the switch
    # (first come, first served, ties by the order of the schedules): that staggers them as well
    switch = fmlcc.run_mlcc("switch", "switch", None, 0.06, 1, 0.0, False, jobs=two)["avg_jct_s"]
    assert switch == pytest.approx(prio, rel=0.08)


def test_daemon_probe_reads_pymalloc_and_names_garbage():
    probe = _load("_daemon_probe")
    st = probe._pymalloc_stats()
    assert st["py_arenas"] >= 1 and st["py_arenas_highwater"] >= st["py_arenas"], st
    assert 0 < st["py_alloc_bytes"] <= st["py_arenas"] * 2**20, st  # arenas are 1 MiB (CPython 3.10+)
    assert {"py_avail_bytes", "py_unused_pool_bytes", "py_arenas_total", "py_arenas_reclaimed"} <= set(st)

    def f():
        return sys._getframe()

    assert probe._kind(_load) == f"function {__name__}._load"
    assert probe._kind(f()).startswith("frame unit/test_bench_tools.py")
    assert probe._kind({}) == "dict" and probe._kind(pytest.mark) == "_pytest.mark.structures.MarkGenerator"


def test_plot_malloc_draws_two_runs(tmp_path, monkeypatch):
    rows = [{"t_s": 60.0 * i, "RssAnon": 60000 + i, "py_alloc_bytes": 26 << 20, "py_arenas": 27,
             "malloc_in_use_kib": 16800} for i in range(1, 4)]
    for name in ("a", "b"):
        (tmp_path / f"{name}.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    plot = _load("plot_malloc")
    monkeypatch.setattr(sys, "argv", ["plot_malloc.py", str(tmp_path / "m.png"), f"a={tmp_path / 'a.jsonl'}",
                                      f"b={tmp_path / 'b.jsonl'}"])
    assert plot.main() == 0 and (tmp_path / "m.png").stat().st_size > 10_000
    monkeypatch.setattr(sys, "argv", ["plot_malloc.py", str(tmp_path / "m.png"), "no-label"])
    assert plot.main() == 2
