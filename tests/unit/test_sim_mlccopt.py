"""The independent optimum of small cases (hostctl_lab.analysis.opt_cluster) on cases whose optimum is
known by hand, and the invariant it gives the cluster engine: no engine JCT below the lower bound.
Expected values are closed forms written here."""

from __future__ import annotations

from dataclasses import replace

import pytest

from hostctl_lab.analysis import opt_cluster as oc
from hostctl_lab.sim import optcheck

C = 10e9 / 8  # 10 Gbit/s in bytes/s
DT = 0.02


def test_the_model_imports_nothing_of_the_engine():
    import ast
    import inspect

    tree = ast.parse(inspect.getsource(oc))
    names = [a.name for n in ast.walk(tree) if isinstance(n, ast.Import) for a in n.names]
    names += [n.module or "" for n in ast.walk(tree) if isinstance(n, ast.ImportFrom)]
    assert not [m for m in names if m.startswith(("hostctl_lab.sim", "hostctl.core", "hostctl.policy"))]


def test_a_lone_ring_is_compute_plus_size_over_capacity():
    # 2 hosts, each sends 1 GB to the other (opposite links: no sharing): 2 x (0.1 + 0.8) s
    case = oc.Case("one", oc.Net(2, 2, C), (oc.Job("a", 0.0, 1e9, 0.1, 2, (0, 1)),))
    exact = 2 * (0.1 + 1e9 / C)
    assert oc.simulate(case)["avg_jct_s"] == pytest.approx(exact, rel=1e-12)
    lo = oc.milp(case, DT, mode="lower")
    assert lo["optimal"] and exact - DT <= lo["avg_jct_s"] <= exact + 1e-9
    up = oc.milp(case, DT, mode="upper")
    assert up["check"]["feasible"] and exact - 1e-9 <= up["avg_jct_s"] <= exact + 2 * 2 * DT


def test_two_equal_flows_on_one_link_one_after_the_other_beats_sharing():
    # host 0 sends 1 GB to host 1 (job a) and 1 GB to host 2 (job b), no compute: sharing ends both at
    # 2T; one after the other ends them at T and 2T: average 1.5 T, the optimum (T = 0.8 s)
    T = 1e9 / C
    case = oc.Case("two", oc.Net(3, 3, C), (oc.Job("a", 0.0, 1e9, 0.0, 1, (0, 1)),
                                           oc.Job("b", 0.0, 1e9, 0.0, 1, (0, 2))))
    # a ring of 2 also sends back (1 -> 0, 2 -> 0): those use different links, in parallel
    assert oc.simulate(case)["avg_jct_s"] == pytest.approx(2 * T, rel=1e-12)
    assert oc.best_order(case)["avg_jct_s"] == pytest.approx(1.5 * T, rel=1e-12)
    lo = oc.milp(case, DT, mode="lower")
    assert lo["optimal"] and 1.5 * T - DT <= lo["avg_jct_s"] <= 1.5 * T + 1e-9
    assert lo["avg_jct_s"] < 2 * T * 0.9  # the bound proves sharing is not optimal
    up = oc.milp(case, DT, mode="upper")
    assert up["check"]["feasible"] and up["avg_jct_s"] == pytest.approx(1.5 * T, abs=2 * DT)


def test_ps_barrier_against_pipelined_alone():
    # PS on host 0, workers 1 and 2, 0.5 GB each way: the push shares the PS's down link (2 x 0.5 GB),
    # the pull its up link. Barrier: push then pull, 0.8 + 0.8 s; pipelined: both at once, 0.8 s
    case = oc.Case("ps", oc.Net(3, 3, C), (oc.Job("p", 0.0, 5e8, 0.1, 2, (0, 1, 2), "ps"),))
    barrier, pipelined = 2 * (0.1 + 2 * 0.8), 2 * (0.1 + 0.8)
    assert oc.simulate(case)["avg_jct_s"] == pytest.approx(barrier, rel=1e-9)
    assert oc.simulate(case, ps_mode="pipelined")["avg_jct_s"] == pytest.approx(pipelined, rel=1e-9)
    lo = oc.milp(case, 0.05, mode="lower", ps_mode="pipelined")
    assert pipelined - 0.05 <= lo["avg_jct_s"] <= pipelined + 1e-9
    lo_b = oc.milp(case, 0.05, mode="lower", ps_mode="barrier")
    assert barrier - 0.05 <= lo_b["avg_jct_s"] <= barrier + 1e-9
    up = oc.milp(case, 0.05, mode="upper", ps_mode="pipelined")
    assert up["check"]["feasible"] and pipelined - 1e-9 <= up["avg_jct_s"] <= pipelined + 6 * 0.05


def test_check_schedule_catches_an_overloaded_link():
    case = oc.Case("two", oc.Net(3, 3, C), (oc.Job("a", 0.0, 1e8, 0.0, 1, (0, 1)),
                                           oc.Job("b", 0.0, 1e8, 0.0, 1, (0, 2))))
    import numpy as np

    full = C * DT
    n = int(np.ceil(1e8 / full))
    v = np.full(n, 1e8 / n)  # each flow at just under the link's rate, both at once on host 0's NIC
    sched = {(k, 0, 0): [(0, v), (0, v)] for k in range(2)}
    chk = oc.check_schedule(case, sched, DT)
    assert not chk["feasible"] and chk["max_link_over"] > 0.5


def test_the_engine_fabric_is_the_models():
    for name in ("short-behind-long", "rack-uplink"):
        case = optcheck.CASES[name]
        fab = optcheck.fabric(case.net)
        cap = case.net.cap
        for a in range(case.net.hosts):
            for b in range(case.net.hosts):
                if a != b:
                    mine = sorted(cap[list(case.net.path(a, b))])
                    theirs = sorted(fab.capacity[fab.path(a, b)])
                    assert mine == pytest.approx(theirs), (name, a, b)


def _short(case: oc.Case, iters: int) -> oc.Case:
    return case.with_(jobs=tuple(replace(j, iterations=min(iters, j.iterations)) for j in case.jobs))


@pytest.mark.parametrize("name", ["short-behind-long", "interleave", "rack-uplink"])
def test_no_engine_policy_beats_the_lower_bound(name):
    case = _short(optcheck.CASES[name], 2)
    r = optcheck.compare(case, 0.03, time_limit=8.0, ps_modes=("barrier",), upper_milp=False)
    lo = r["bounds"]["barrier"]["lower_avg_jct_s"]
    assert lo is not None and lo > 0
    # the independent fifo and the engine's fifo are the same fluid model
    assert r["fifo_vs_independent_fifo_max_abs_s"] < 1e-6
    for n, e in r["engine"].items():
        assert e["avg_jct_s"] >= lo * (1 - 1e-9), (n, e["avg_jct_s"], lo)
        assert not e["job_below_critical_path"], n
    # the bound is not vacuous: within 10% of the best feasible schedule found
    assert r["bounds"]["barrier"]["upper_avg_jct_s"] <= 1.10 * lo


def test_engine_ps_jobs_against_the_barrier_bound():
    case = _short(optcheck.CASES["ps-pair"], 2)
    r = optcheck.compare(case, 0.03, networks=("fifo", "mcs"), time_limit=8.0, ps_modes=("barrier",),
                         upper_milp=False)
    assert r["fifo_vs_independent_fifo_max_abs_s"] < 1e-6
    lo = r["bounds"]["barrier"]["lower_avg_jct_s"]
    for n, e in r["engine"].items():
        assert e["avg_jct_s"] >= lo * (1 - 1e-9), n


def test_ps_fraction_makes_ps_jobs_of_the_same_models():
    from hostctl_lab.sim.run import SweepSpec, load_jobs

    ring = load_jobs(SweepSpec(jobs=30, time_scale=0.0001, max_iterations=20), 0)
    ps = load_jobs(SweepSpec(jobs=30, time_scale=0.0001, max_iterations=20, ps_fraction=0.5), 0)
    kinds = [j.kind for j in ps]
    assert 5 <= kinds.count("ps") <= 25 and all(j.kind == "ring" for j in ring)
    assert [(j.model, j.iterations, j.arrival_s) for j in ring] == [(j.model, j.iterations, j.arrival_s) for j in ps]


def test_a_bad_ps_fraction_is_one_line(tmp_path):
    import os
    import subprocess
    import sys
    from pathlib import Path

    hostctl = str(Path(sys.executable).with_name("hostctl"))
    r = subprocess.run([hostctl, "sim", "--topology", "single-switch", "--jobs", "2", "--ps-fraction", "1.5"],
                       capture_output=True, text=True, timeout=60, cwd=tmp_path, env={**os.environ, "NO_COLOR": "1"})
    assert r.returncode == 2, r.stdout + r.stderr
    assert r.stderr.strip().splitlines() == ["hostctl: error: --ps-fraction must be in [0, 1], got 1.5"]
