"""benchmarks/ps_phases.py and benchmarks/fluid_placement1.py: known answers on small inputs."""

from __future__ import annotations

import importlib.util
import json
import os

import pytest

_ROOT = os.path.join(os.path.dirname(__file__), "..", "..", "benchmarks")


def _load(name: str):
    spec = importlib.util.spec_from_file_location(name, os.path.join(_ROOT, f"{name}.py"))
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


phases = _load("ps_phases")
fluid = _load("fluid_placement1")


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
