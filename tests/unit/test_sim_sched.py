"""The papers' schedulers in the cluster engine: --placement lwf<k> / sjfbco, --order ada-srsf,
--network adadual / srsf<n>, on cases small enough to compute by hand."""

from __future__ import annotations

import numpy as np
import pytest

from hostctl.core.adadual import threshold
from hostctl.errors import ConfigError
from hostctl_lab.sim import placement as P
from hostctl_lab.sim import workload
from hostctl_lab.sim.cluster import ClusterSim, place, simulate
from hostctl_lab.sim.topo import mlcc_tree, single_switch
from hostctl_lab.sim.workload import JobSpec

C = 10e9 / 8  # a 10 Gbit/s NIC, bytes/s


def job(name, gpus, size=1e6, compute=1.0, iters=1, arrival=0.0, kind="ring"):
    return JobSpec(name, arrival, gpus, "m", int(size), compute, iters, kind)


# ---------------------------------------------------------------- one placement module
def _old_place(name, free, n, rng):
    """The engine's ff and rand before they were delegated to sim/placement.py (frozen copy)."""
    if free.sum() < n:
        return None
    if name == "ff":
        out, need = [], n
        for s in np.flatnonzero(free):
            k = min(int(free[s]), need)
            out.append((int(s), k))
            need -= k
            if need == 0:
                return out
    slots = np.repeat(np.arange(len(free)), free.astype(np.int64))
    pick = rng.choice(slots, size=n, replace=False)
    s, c = np.unique(pick, return_counts=True)
    return [(int(a), int(b)) for a, b in zip(s, c)]


@pytest.mark.parametrize("name", ["ff", "rand"])
def test_delegated_ff_and_rand_give_the_old_answers(name):
    rng = np.random.default_rng(3)
    for case in range(300):
        gps = int(rng.integers(1, 9))
        free = rng.integers(0, gps + 1, size=int(rng.integers(1, 12)))
        n = int(rng.integers(1, gps * len(free) + 2))
        a, b = np.random.default_rng(case), np.random.default_rng(case)
        assert place(name, free, n, a, None, gps) == _old_place(name, free, n, b)
        assert a.random() == b.random()  # the same draws consumed: later rand placements stay the same


def test_paper_ls_on_exclusive_gpus_is_ff():
    """Why the engine's ls is its own rule: with exclusive GPUs every free GPU has L_g = 0, and paper
    000's GPU-level LS (ties by id) picks exactly ff's GPUs."""
    rng = np.random.default_rng(0)
    for _ in range(200):
        free = rng.integers(0, 5, size=6)
        n = int(rng.integers(1, free.sum() + 1)) if free.sum() else 1
        st = P.exclusive_view(free, 4)
        got = P.ls(st, n, 1.0, 0.0, None)
        want = place("ff", free, n, rng, None, 4)
        assert (got is None) == (want is None)
        if got is not None:
            s, c = np.unique(st.server[got], return_counts=True)
            assert list(zip(s.tolist(), c.tolist())) == want


def test_lwf_on_exclusive_gpus_by_hand():
    free = np.array([3, 3, 3])
    load = np.array([100.0, 10.0, 50.0])  # L_S
    rng = np.random.default_rng(0)
    # n = 5 > kappa = 1: the least-loaded servers first (s1, then s2), free GPUs in order
    assert place("lwf1", free, 5, rng, load, 4) == [(1, 3), (2, 2)]
    # n = 5 <= kappa = 8: the least-loaded GPUs, all free ones at L_g = 0, ties by id: ff's answer
    assert place("lwf8", free, 5, rng, load, 4) == [(0, 3), (1, 2)] == place("ff", free, 5, rng)
    assert place("lwf1", free, 10, rng, load, 4) is None
    with pytest.raises(ConfigError, match="lwf<k>"):
        place("lwf0", free, 1, rng)
    with pytest.raises(ConfigError, match="unknown placement 'best'"):
        ClusterSim(single_switch(2), [job("a", 2)], placement="best")


def test_engine_lwf1_by_hand():
    """2 GPUs per server, 3 servers. A (1 GPU, 100 s) takes GPU 0 (s0). B and C (2 GPUs each) go to
    the least-loaded servers s1 and s2 (L_S = 0 against A's 100 GPU-s), whole. D (2 GPUs, t = 1)
    fits only when B ends at t = 10, on s1, whole: JCT 10 - 1 + 1 = 10. ff splits B over s0 and s1."""
    jobs = [job("a", 1, iters=100), job("b", 2, iters=10), job("c", 2, iters=20), job("d", 2, arrival=1.0)]
    st = ClusterSim(single_switch(3), jobs, placement="lwf1", gpus_per_server=2)
    r = st.run()
    assert r["jct_s"] == pytest.approx({"a": 100.0, "b": 10.0, "c": 20.0, "d": 10.0}, rel=1e-12)
    assert [j.servers for j in st.jobs] == [[0], [1], [2], [1]]
    ff = ClusterSim(single_switch(3), jobs, placement="ff", gpus_per_server=2)
    ff.run()
    assert ff.jobs[1].servers == [0, 1]


# ---------------------------------------------------------------- SJF-BCO
def test_engine_sjfbco_by_hand():
    """One server of 2 GPUs. X holds both until t = 1; A (2 GPUs, 10 s), B and C (1 GPU, 5 s) arrive
    at 0.5 and wait (a plan made then starts them at 1, not now). At t = 1 SJF-BCO's batch takes the
    smallest jobs first: B and C at 1, A when they end (the re-plan at t = 6): JCTs 15.5, 5.5, 5.5.
    FIFO ff runs A first: 10.5, 15.5, 15.5."""
    jobs = [job("x", 2), job("a", 2, iters=10, arrival=0.5), job("b", 1, iters=5, arrival=0.5),
            job("c", 1, iters=5, arrival=0.5)]
    r = simulate(single_switch(1), jobs, placement="sjfbco", gpus_per_server=2)
    assert r["jct_s"] == pytest.approx({"x": 1.0, "a": 15.5, "b": 5.5, "c": 5.5}, rel=1e-12)
    r = simulate(single_switch(1), jobs, placement="ff", gpus_per_server=2)
    assert r["jct_s"] == pytest.approx({"x": 1.0, "a": 10.5, "b": 15.5, "c": 15.5}, rel=1e-12)


def test_engine_sjfbco_keeps_jobs_whole_where_ff_splits():
    """2 servers x 2 GPUs, A, C (1 GPU) and B (2 GPUs) at t = 0. SJF order A, C, B: with kappa = 1
    FA-FFP puts A and C on the least-booked GPUs 0 and 1 (s0), LBSGF puts B on the least-booked
    server s1: nothing crosses the network. ff (arrival order A, B, C) splits B over s0 and s1."""
    jobs = [job("a", 1, iters=7), job("b", 2, iters=3, size=1e9), job("c", 1, iters=4)]
    st = ClusterSim(single_switch(2), jobs, placement="sjfbco", gpus_per_server=2)
    r = st.run()
    assert r["jct_s"] == pytest.approx({"a": 7.0, "b": 3.0, "c": 4.0}, rel=1e-12)
    assert [j.servers for j in st.jobs] == [[0], [1], [0]]
    r = simulate(single_switch(2), jobs, placement="ff", gpus_per_server=2)
    assert r["jct_s"]["b"] == pytest.approx(3 * (1.0 + 1e9 / C), rel=1e-9)


# ---------------------------------------------------------------- Ada-SRSF
def test_ada_srsf_orders_by_compute_while_queued():
    """2 servers x 1 GPU. X holds both GPUs until 1 + 1e6/C. P (10 iterations of 0.1 s, 10 GB
    exchanges) and Q (10 of 1 s, 1 MB) wait. Paper 000's key leaves the exchange out while queued
    (P: 10 x 0.1 x 2 = 2 < Q: 20): P first. The engine's srsf counts it (P: 10 x 8.1 x 2): Q first."""
    x_end = 1 + 1e6 / C
    p_run, q_run = 10 * (0.1 + 10e9 / C), 10 * (1.0 + 1e6 / C)
    jobs = [job("x", 2), job("p", 2, size=10e9, compute=0.1, iters=10, arrival=0.5),
            job("q", 2, size=1e6, compute=1.0, iters=10, arrival=0.5)]
    r = simulate(single_switch(2), jobs, gpus_per_server=1, order="ada-srsf")
    assert r["jct_s"] == pytest.approx({"x": x_end, "p": x_end + p_run - 0.5, "q": x_end + p_run + q_run - 0.5},
                                       rel=1e-9)
    r = simulate(single_switch(2), jobs, gpus_per_server=1, order="srsf")
    assert r["jct_s"] == pytest.approx({"x": x_end, "q": x_end + q_run - 0.5, "p": x_end + q_run + p_run - 0.5},
                                       rel=1e-9)


# ---------------------------------------------------------------- AdaDUAL admission
def _pair(n_size):
    """Two jobs spread over the same two servers (ls, 1 GPU each per server). O computes 0.25 s, then
    exchanges 4 GB (3.2 s alone). N computes 2.25 s; O has 4e9 - 2 x C = 1.5e9 bytes left then."""
    return [job("o", 2, size=4e9, compute=0.25), job("n", 2, size=n_size, compute=2.25)]


@pytest.mark.parametrize("n_size, admitted", [(0.7e9, True), (0.75e9, False), (0.8e9, False)])
def test_adadual_threshold_with_eta_zero(n_size, admitted):
    """eta = 0: threshold 0.5 (this engine's fluid sharing loses nothing). M_new / M_old = n / 1.5e9.
    Start now: both at C/2 until N is done. Wait: N starts when O ends at 0.25 + 3.2 = 3.45."""
    assert threshold(eta=0.0) == 0.5
    r = simulate(single_switch(2), _pair(n_size), gpus_per_server=2, placement="ls", network="adadual",
                 adadual_eta=0.0)
    if admitted:
        n_end = 2.25 + n_size / (C / 2)
        o_end = n_end + (1.5e9 - n_size) / C
    else:
        o_end, n_end = 3.45, 3.45 + n_size / C
    assert r["jct_s"] == pytest.approx({"o": o_end, "n": n_end}, rel=1e-12)
    assert r["stats"]["refused"] == (0 if admitted else 1)


def test_at_the_threshold_start_now_and_wait_tie():
    """The rule's tie in the engine itself: at M_new / M_old = 0.5 (eta = 0), always sharing
    (srsf2) and never sharing (srsf1) give the same total JCT, 7.5 s; off the tie they differ in the
    direction the rule picks."""
    tot = lambda net, n: sum(simulate(single_switch(2), _pair(n), gpus_per_server=2, placement="ls",  # noqa: E731
                                      network=net)["jct_s"].values())
    assert tot("srsf2", 0.75e9) == pytest.approx(7.5, rel=1e-12) == tot("srsf1", 0.75e9)
    assert tot("srsf2", 0.7e9) < tot("srsf1", 0.7e9)
    assert tot("srsf2", 0.8e9) > tot("srsf1", 0.8e9)


def test_adadual_default_threshold_is_the_papers():
    """The default eta (paper 000's reference code): threshold 0.392; 0.7e9 / 1.5e9 = 0.47 waits."""
    r = simulate(single_switch(2), _pair(0.7e9), gpus_per_server=2, placement="ls", network="adadual")
    assert r["jct_s"] == pytest.approx({"o": 3.45, "n": 3.45 + 0.7e9 / C}, rel=1e-12)
    r = simulate(single_switch(2), _pair(0.55e9), gpus_per_server=2, placement="ls", network="adadual")
    assert r["stats"]["refused"] == 0  # 0.367 < 0.392: shares


def _concurrency(log, jobs, n_hosts):
    """Most exchanges at once on one server, from the admission log alone (end before start at ties)."""
    best = 0
    for s in range(n_hosts):
        ev = sorted((t, d) for t, i, d in log if s in jobs[i].servers)
        c = 0
        for _, d in ev:
            c += d
            best = max(best, c)
    return best


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_adadual_never_three_way(seed):
    """Six jobs spread over the same three servers (every exchange on every server): AdaDUAL never
    has three exchanges on a server, srsf1 never two; srsf3 does reach three (the check can fail)."""
    rng = np.random.default_rng(seed)
    jobs = [job(f"j{k}", 3, size=float(rng.uniform(1e8, 2e9)), compute=float(rng.uniform(0.05, 0.5)),
                iters=int(rng.integers(3, 12)), arrival=float(rng.uniform(0, 1))) for k in range(6)]
    most = {}
    for net in ("adadual", "srsf1", "srsf3"):
        st = ClusterSim(single_switch(3), jobs, gpus_per_server=6, placement="ls", network=net)
        st.adm.log = []
        r = st.run()
        assert r["finished"] == 6
        most[net] = _concurrency(st.adm.log, st.jobs, 3)
        assert most[net] == r["stats"]["max_comm_per_server"]
    assert most["adadual"] <= 2 and most["srsf1"] == 1 and most["srsf3"] == 3


@pytest.mark.parametrize("network", ["adadual", "srsf1"])
def test_fast_forward_changes_no_result_under_admission(network):
    rng = np.random.default_rng(5)
    jobs = [job(f"j{k}", int(rng.choice([2, 3, 4, 6])), size=float(rng.uniform(2e8, 2e9)),
                compute=float(rng.uniform(0.05, 0.3)), iters=int(rng.integers(3, 30)),
                arrival=float(rng.uniform(0, 10)), kind=str(rng.choice(["ring", "ps"]))) for k in range(12)]
    kw = dict(gpus_per_server=2, placement="lwf1", order="ada-srsf", network=network)
    fast = simulate(mlcc_tree(8, per_tor=4, tors_per_edge=2), jobs, **kw)
    slow = simulate(mlcc_tree(8, per_tor=4, tors_per_edge=2), jobs, fast_forward=False, **kw)
    assert fast["stats"]["fast_forwards"] > 0
    assert fast["jct_s"] == pytest.approx(slow["jct_s"], rel=1e-7)


def test_bad_names_say_one_line():
    for kw, msg in ((dict(network="srsf0"), "unknown network"), (dict(order="ada"), "unknown order"),
                    (dict(placement="lwf"), "unknown placement")):
        with pytest.raises(ConfigError, match=msg):
            ClusterSim(single_switch(2), [job("a", 2)], **kw)


# ---------------------------------------------------------------- paper 000's setting
def test_paper000_setting_runs_and_is_deterministic():
    """16 servers x 4 GPUs, 160 synthetic jobs (paper 000's mix), iterations and arrival window both
    / 100 (10-60 iterations over 12 s: the same load). Every job ends; the same seed gives the same
    JCTs, another seed other JCTs. (SJF-BCO on this setting: benchmarks/sim_sched.py, ~30 s a run.)"""
    fab = single_switch(16)
    kw = dict(placement="lwf1", order="ada-srsf", network="adadual", gpus_per_server=4)
    got = []
    for seed in (0, 0, 1):
        jobs = workload.synthetic(160, seed=seed, window_s=12.0, iterations=(10, 60))
        r = simulate(fab, jobs, seed=seed, **kw)
        assert r["finished"] == 160 and r["stats"]["max_comm_per_server"] <= 2
        got.append(r["jct_s"])
    assert got[0] == got[1] and got[0] != got[2]


@pytest.mark.parametrize("placement", ["sjfbco", "lwf1", "lwf2"])
def test_capacity_holds_rebuilt_from_the_run(placement):
    """From each job's start, end and GPUs per server alone: every job got exactly its GPUs, no
    server ever holds more than it has, no job starts before it arrives."""
    jobs = workload.synthetic(40, seed=4, window_s=6.0, iterations=(5, 30))
    st = ClusterSim(single_switch(6), jobs, placement=placement, order="ada-srsf", gpus_per_server=4, seed=4)
    r = st.run()
    assert r["finished"] == 40
    ev = []
    for j in st.jobs:
        assert sum(j.gpus_on) == j.spec.gpus and j.start_s >= j.spec.arrival_s - 1e-12
        ev += [(j.end_s, 0, s, -k) for s, k in zip(j.servers, j.gpus_on)]
        ev += [(j.start_s, 1, s, k) for s, k in zip(j.servers, j.gpus_on)]
    used = np.zeros(6, dtype=int)
    for _, _, s, k in sorted(ev):  # at one instant, ends before starts
        used[s] += k
        assert used[s] <= 4
    assert r["multi_server_jobs"] >= 1
