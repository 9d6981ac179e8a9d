"""The cluster simulator on cases small enough to compute by hand."""

from __future__ import annotations

import numpy as np
import pytest

from hostctl.errors import ConfigError
from hostctl_lab.sim.cluster import ClusterSim, place, simulate
from hostctl_lab.sim.topo import mlcc_tree, single_switch
from hostctl_lab.sim.workload import JobSpec

GB = 10**9
C = 10 * GB / 8  # a 10 Gbit/s NIC in bytes/s


def job(name, gpus, size=1e9, compute=0.1, iters=1, arrival=0.0, kind="ring"):
    return JobSpec(name, arrival, gpus, "m", int(size), compute, iters, kind)


def test_a_job_on_one_server_never_touches_the_network():
    r = simulate(single_switch(2), [job("a", 8, iters=50)], gpus_per_server=8)
    assert r["jct_s"]["a"] == pytest.approx(50 * 0.1)
    assert r["stats"]["solves"] == 0


def test_ring_on_two_servers_alone_takes_size_over_capacity():
    # 2 servers: each sends 2(S-1)/S x size = size bytes to the other, at the full NIC rate
    r = simulate(single_switch(2), [job("a", 16, size=1e9, iters=3)], gpus_per_server=8)
    assert r["jct_s"]["a"] == pytest.approx(3 * (0.1 + 1e9 / C), rel=1e-9)


def test_ring_on_four_servers():
    r = simulate(single_switch(4), [job("a", 4, size=1e9, iters=2)], gpus_per_server=1)
    assert r["jct_s"]["a"] == pytest.approx(2 * (0.1 + 2 * 3 / 4 * 1e9 / C), rel=1e-9)


def test_parameter_server_pushes_then_pulls():
    # PS on the first of 3 servers: push 2 x size into its NIC (C/2 each), then pull 2 x size out of it
    r = simulate(single_switch(3), [job("a", 3, size=1e9, kind="ps")], gpus_per_server=1)
    assert r["jct_s"]["a"] == pytest.approx(0.1 + 2e9 / C + 2e9 / C, rel=1e-9)


def test_two_jobs_on_the_same_servers_share_fairly_under_fifo():
    jobs = [job("a", 2, iters=2), job("b", 2, iters=2)]
    r = simulate(single_switch(2), jobs, gpus_per_server=2, placement="ls")  # ls spreads each job over 2 servers
    for name in "ab":
        assert r["jct_s"][name] == pytest.approx(2 * (0.1 + 2e9 / C), rel=1e-9)


def test_one_gives_the_smaller_job_the_nic_first():
    jobs = [job("a", 2, size=1e9), job("b", 2, size=2e9)]
    r = simulate(single_switch(2), jobs, gpus_per_server=2, placement="ls", network="one")
    assert r["jct_s"]["a"] == pytest.approx(0.1 + 1e9 / C, rel=1e-9)
    assert r["jct_s"]["b"] == pytest.approx(0.1 + 3e9 / C, rel=1e-9)  # work-conserving: no gap


def test_rr_rotates_and_conserves_work():
    jobs = [job("a", 2, size=4e9, iters=1), job("b", 2, size=4e9, iters=1)]
    fifo = simulate(single_switch(2), jobs, gpus_per_server=2, placement="ls", network="fifo")
    assert sorted(fifo["jct_s"].values()) == pytest.approx([0.1 + 8e9 / C] * 2, rel=1e-9)  # 6.5 s
    # rotation every 0.5 s: the jobs alternate from t = 0.1 on, 0.4 s then 0.5 s slices; each needs
    # 3.2 s of the NIC: one ends at 6.3 s, the other at 6.5 s (work-conserving: as late as fifo)
    rr = simulate(single_switch(2), jobs, gpus_per_server=2, placement="ls", network="rr", rr_interval_s=0.5)
    assert sorted(rr["jct_s"].values()) == pytest.approx([6.3, 6.5], rel=1e-9)
    assert rr["stats"]["ticks"] >= 12
    # rotation every 5 s: the first band-0 job has the NIC alone until it is done
    rr = simulate(single_switch(2), jobs, gpus_per_server=2, placement="ls", network="rr", rr_interval_s=5)
    assert sorted(rr["jct_s"].values()) == pytest.approx([0.1 + 4e9 / C, 0.1 + 8e9 / C], rel=1e-9)


def test_queue_waits_for_gpus():
    jobs = [job("a", 16, iters=2), job("b", 16, iters=2)]
    r = simulate(single_switch(2), jobs, gpus_per_server=8)
    t = 2 * (0.1 + 1e9 / C)
    assert r["jct_s"]["a"] == pytest.approx(t, rel=1e-9)
    assert r["jct_s"]["b"] == pytest.approx(2 * t, rel=1e-9)


def test_cap_paces_each_job():
    r = simulate(single_switch(2), [job("a", 2)], gpus_per_server=1, network="cap", cap_bps=5 * GB)
    assert r["jct_s"]["a"] == pytest.approx(0.1 + 1e9 / (C / 2), rel=1e-9)


def test_oversubscribed_uplink_is_the_bottleneck():
    fab = mlcc_tree(20, per_tor=10, tors_per_edge=10, oversub=10)  # ToR uplink = 10 x 10G / 10 = 10G
    # one GPU on h0 (rack 0) and one on h10 (rack 1): the ring crosses the ToR uplinks, which are
    # 10 Gbit/s, like the NICs: the same time as alone on a switch
    jobs = [job("a", 2)]
    st = ClusterSim(fab, jobs, gpus_per_server=1, placement="ff")
    st.free[1:10] = 0  # h1..h9 busy: ff puts the job on h0 and h10
    r = st.run()
    assert r["jct_s"]["a"] == pytest.approx(0.1 + 1e9 / C, rel=1e-9)


def test_placements():
    import numpy as np

    free = np.array([2, 8, 8, 3])
    rng = np.random.default_rng(0)
    assert place("ff", free, 5, rng) == [(0, 2), (1, 3)]
    assert place("pack", free, 3, rng) == [(3, 3)]
    assert place("pack", free, 12, rng) == [(1, 8), (2, 4)]
    assert sorted(place("ls", free, 4, rng)) == [(1, 2), (2, 2)]
    got = place("rand", free, 21, rng)
    assert sum(k for _, k in got) == 21 and all(k <= free[s] for s, k in got)
    assert place("ff", free, 22, rng) is None


def test_bad_choices_say_one_line():
    with pytest.raises(ConfigError, match="unknown network"):
        ClusterSim(single_switch(2), [job("a", 2)], network="tcp")
    with pytest.raises(ConfigError, match="needs a cap"):
        ClusterSim(single_switch(2), [job("a", 2)], network="cap")
    with pytest.raises(ConfigError, match="more GPUs"):
        ClusterSim(single_switch(2), [job("a", 64)], gpus_per_server=8)


@pytest.mark.parametrize("network", ["fifo", "one", "rr", "cap", "prio-every-link"])
@pytest.mark.parametrize("seed", [0, 1])
def test_fast_forward_changes_no_result(network, seed):
    """Jobs alone on their links are fast-forwarded and resumed when others arrive: the same JCTs as
    simulating every iteration, on a random mix of ring and PS jobs on two racks."""
    import numpy as np

    rng = np.random.default_rng(seed)
    jobs = [job(f"j{k}", int(rng.choice([2, 3, 4, 6])), size=float(rng.uniform(2e8, 2e9)),
                compute=float(rng.uniform(0.05, 0.3)), iters=int(rng.integers(3, 30)),
                arrival=float(rng.uniform(0, 10)), kind=str(rng.choice(["ring", "ps"]))) for k in range(12)]
    fab = mlcc_tree(8, per_tor=4, tors_per_edge=2)
    kw = dict(gpus_per_server=2, placement=str(rng.choice(["ff", "ls", "rand"])), network=network, seed=seed,
              cap_bps=3 * GB, rr_interval_s=0.7)
    fast = simulate(fab, jobs, **kw)
    slow = simulate(fab, jobs, fast_forward=False, **kw)
    assert fast["stats"]["fast_forwards"] > 0 and slow["stats"]["fast_forwards"] == 0
    assert fast["jct_s"] == pytest.approx(slow["jct_s"], rel=1e-7)
    assert fast["events"] < slow["events"]


def test_jitter_is_seeded_and_off_by_default():
    jobs = [job("a", 2, iters=20), job("b", 2, iters=20)]
    kw = dict(gpus_per_server=2, placement="ls")
    base = simulate(single_switch(2), jobs, **kw)
    assert base["jct_s"] == pytest.approx(simulate(single_switch(2), jobs, jitter=0.0, **kw)["jct_s"])
    a = simulate(single_switch(2), jobs, jitter=0.2, seed=1, **kw)
    assert a["jct_s"] == simulate(single_switch(2), jobs, jitter=0.2, seed=1, **kw)["jct_s"]
    assert a["jct_s"] != simulate(single_switch(2), jobs, jitter=0.2, seed=2, **kw)["jct_s"]
    assert a["stats"]["fast_forwards"] == 0
    with pytest.raises(ConfigError, match="jitter"):
        ClusterSim(single_switch(2), jobs, jitter=1.5)


def _mix(seed, n=8, iters=(200, 600)):
    import numpy as np

    rng = np.random.default_rng(seed)
    return [job(f"j{k}", int(rng.choice([2, 3, 4])), size=float(rng.uniform(2e8, 2e9)),
                compute=float(rng.uniform(0.05, 0.3)), iters=int(rng.integers(*iters)),
                arrival=float(rng.uniform(0, 10)), kind=str(rng.choice(["ring", "ps"]))) for k in range(n)]


@pytest.mark.parametrize("network", ["fifo", "one", "cap"])
def test_parking_a_repeating_component_changes_no_result(network):
    """Identical jobs on the same servers iterate in lock-step: their component's state repeats, so
    it is parked for whole periods (taken off the fabric, its jobs moved on); a third job arriving
    later brings it back. The same JCTs as simulating every flow."""
    # ls spreads each 2-GPU job over both servers: a and b ring between the same two NICs
    jobs = [job("a", 2, iters=400), job("b", 2, iters=500), job("c", 2, size=3e8, iters=60, arrival=30.0)]
    kw = dict(gpus_per_server=3, placement="ls", network=network, cap_bps=6 * GB)
    fab = single_switch(2)
    parked = simulate(fab, jobs, **kw)
    exact = simulate(fab, jobs, park=False, **kw)
    assert parked["stats"]["parks"] > 0 and parked["stats"]["steady_parks"] == 0
    assert exact["stats"]["parks"] == 0
    assert parked["jct_s"] == pytest.approx(exact["jct_s"], rel=1e-9)
    assert parked["events"] < exact["events"] / 3


@pytest.mark.parametrize("seed", [0, 1])
def test_steady_extrapolation_is_close_to_exact(seed):
    """--steady N: components whose state does not repeat are extrapolated at each job's mean
    iteration time over N iterations. Checked against the exact run (every flow simulated): average
    JCT within 1%, every job within 3%."""
    jobs = _mix(seed)
    fab = mlcc_tree(8, per_tor=4, tors_per_edge=2)
    kw = dict(gpus_per_server=2, placement="ls", network="fifo", seed=seed)
    approx = simulate(fab, jobs, steady=20, **kw)
    exact = simulate(fab, jobs, park=False, **kw)
    assert approx["stats"]["steady_parks"] > 0
    assert approx["events"] < exact["events"]
    assert approx["avg_jct_s"] == pytest.approx(exact["avg_jct_s"], rel=0.01)
    for name, t in exact["jct_s"].items():
        assert approx["jct_s"][name] == pytest.approx(t, rel=0.03)


class _NoMemo(dict):
    def get(self, key, default=None):
        return default


@pytest.mark.parametrize("network", ["one", "rr"])
def test_the_solve_memo_changes_no_result(network, monkeypatch):
    """The NumPy path keeps its rates by the solve's inputs (paths, caps, classes), which recur every
    iteration (the compiled path solves every time). The same events and JCTs, bit for bit, as solving
    every time. (Cold solves: a solve from the last rates, kernel.WARM_START, takes no memo.)"""
    from hostctl_lab.sim import kernel

    monkeypatch.setattr(kernel, "COMPILED", False)
    monkeypatch.setattr(kernel, "WARM_START", False)
    jobs = _mix(2, n=10, iters=(40, 120))
    fab = mlcc_tree(8, per_tor=4, tors_per_edge=2)
    kw = dict(gpus_per_server=2, placement="ls", network=network, rr_interval_s=0.5)
    memo = ClusterSim(fab, jobs, **kw)
    r1 = memo.run()
    plain = ClusterSim(fab, jobs, **kw)
    plain._memo = _NoMemo()
    r2 = plain.run()
    assert r1["stats"]["memo_hits"] > r1["stats"]["solves"] / 4
    assert r2["stats"]["memo_hits"] == 0
    assert r1["events"] == r2["events"] and r1["jct_s"] == r2["jct_s"]


@pytest.mark.parametrize("network", ["one", "rr"])
def test_solves_from_the_last_rates_are_the_cold_solves_on_these_mixes(network, monkeypatch):
    """Under bands every solve starts from the flows' last rates (kernel.WARM_START, kernel._repair):
    on these random ring/PS mixes each such answer is the solve from nothing up to rounding (1e-12 of
    the largest capacity), and the repair ends most of them. (Where the definition has several
    equilibria the two may differ: docs/simulator.md counts how often on larger runs.)"""
    from hostctl_lab.sim import kernel

    monkeypatch.setattr(kernel, "solve_comp_prio", lambda *a: None)  # every solve through _host_prio
    solve, seen = kernel._host_prio, []

    def both(ptr, links, cap, caps, prio, plinks, warm=None):
        r = solve(ptr, links, cap, caps, prio, plinks, warm)
        if warm is not None:
            seen.append(float(np.abs(r - solve(ptr, links, cap, caps, prio, plinks)).max() / cap.max()))
        return r

    monkeypatch.setattr(kernel, "_host_prio", both)
    before = kernel.STATS["host_prio_warm"]
    for seed in (0, 1, 2):
        ClusterSim(mlcc_tree(8, per_tor=4, tors_per_edge=2), _mix(seed, n=10, iters=(40, 120)), gpus_per_server=2,
                   placement="ls", network=network, rr_interval_s=0.5).run()
    assert len(seen) > 1000 and max(seen) <= 1e-12
    # (components of a few flows: a change often reaches more than half of them, and the repair leaves
    # those to the rounds)
    assert kernel.STATS["host_prio_warm"] - before > 0.5 * len(seen)


def test_steady_must_be_a_count():
    with pytest.raises(ConfigError, match="--steady"):
        ClusterSim(single_switch(2), [job("a", 2)], steady=-1)


def test_steady_measures_iterations_done_across_an_exact_park():
    """A job iterates every 1.7 s; an exact park in its window moves it 100 iterations (170 s) on
    with no iteration end recorded in between: the mean is still 1.7 s (counting ends, not iterations
    done, gave 170 s / 1 end)."""
    from hostctl_lab.sim.cluster import mean_iteration

    e = [(1.7 * k, k) for k in range(12)] + [(1.7 * k, k) for k in range(112, 130)]
    assert mean_iteration(e, 2, 20) == pytest.approx(1.7, rel=1e-12)
    assert mean_iteration(e[:20], 2, 20) is None  # too few ends yet
    # from iteration 120 on it slows to 2.0 s: the halves disagree (1.7 vs ~1.85 s): not yet
    slow = [(1.7 * min(k, 120) + 2.0 * max(0, k - 120), k) for _, k in e]
    assert mean_iteration(slow, 2, 20) is None
    assert mean_iteration(slow, 2, 5) == pytest.approx((slow[-1][0] - slow[2][0]) / 127)  # grown to 20 x 5
    assert mean_iteration(e[:4], 2, 1) is None and mean_iteration(e[:5], 2, 1) == pytest.approx(1.7)  # --steady 1


def test_a_changed_components_jobs_confirm_their_mean_in_a_shorter_window():
    """After its component changes, a job measured before confirms its old mean over steady // 5
    iterations (after the warm-up) when they agree to 1%; else it is measured in full."""
    from hostctl_lab.sim.cluster import confirm_iteration

    e = [(1.7 * k, k) for k in range(8)]  # warm-up 2, then 5 iterations
    assert confirm_iteration(e[:7], 2, 5, 1.7) is None  # 4 iterations after the warm-up: not yet
    assert confirm_iteration(e, 2, 5, 1.7) == 1.7
    assert confirm_iteration(e, 2, 5, 1.7 * 1.009) == pytest.approx(1.7 * 1.009)  # within 1%: the old mean
    assert confirm_iteration(e, 2, 5, 1.7 * 1.02) is False  # 2% off: measured in full
    # an exact park inside the window moves iterations and time on together
    parked = e[:4] + [(1.7 * k, k) for k in range(100, 104)]
    assert confirm_iteration(parked, 2, 5, 1.7) == 1.7


@pytest.mark.parametrize("seed", [0, 3])
def test_reconfirming_stays_close_to_exact(seed):
    """--steady with and without reconfirming (the default: a changed component's jobs confirm their
    old means over a shorter window) against the exact run on 12 jobs that join and leave
    components: some means are confirmed, some measured again; averages within 1%, every job 3%."""
    jobs = _mix(seed, n=12)
    fab = mlcc_tree(8, per_tor=4, tors_per_edge=2)
    kw = dict(gpus_per_server=2, placement="ls", network="fifo", seed=seed)
    exact = simulate(fab, jobs, park=False, **kw)
    full = simulate(fab, jobs, steady=20, reconfirm=False, **kw)
    short = simulate(fab, jobs, steady=20, **kw)
    assert full["stats"]["steady_confirmed"] == full["stats"]["steady_remeasured"] == 0
    assert short["stats"]["steady_confirmed"] > 0 and short["stats"]["steady_remeasured"] > 0
    assert short["events"] < full["events"]
    for r in (full, short):
        assert r["avg_jct_s"] == pytest.approx(exact["avg_jct_s"], rel=0.01)
        for name, t in exact["jct_s"].items():
            assert r["jct_s"][name] == pytest.approx(t, rel=0.03)


def _fast_and_slow(seed: int) -> list:
    """Ten jobs iterating every second or so and one that moves 4 GB an iteration (the quorum tests)."""
    rng = np.random.default_rng(seed)
    jobs = [job(f"j{k}", 2, size=float(rng.uniform(1e8, 3e8)), compute=float(rng.uniform(0.2, 0.6)),
                iters=int(rng.integers(1500, 3000)), arrival=float(k) * 0.5) for k in range(10)]
    return jobs + [job("slow", 2, size=4e9, compute=0.5, iters=150, arrival=1.0)]


@pytest.mark.parametrize("seed", [0, 1])
def test_the_quorum_parks_without_waiting_for_a_slow_job_and_stays_close_to_exact(seed):
    """Ten jobs iterating every second or so and one that moves 4 GB an iteration share two NICs (one
    component). Without the quorum the component waits for the slow job's warm-up and 20 iterations
    after every change; with it (the default) it parks once 10 of 11 jobs have their means and the slow
    one has 4 iterations after its warm-up. Fewer events; against the exact run every job within 3%."""
    from hostctl_lab.sim.cluster import window_mean

    jobs = _fast_and_slow(seed)
    kw = dict(gpus_per_server=24, placement="ls", network="fifo", seed=seed)  # ls: every job on both NICs
    exact = simulate(single_switch(2), jobs, park=False, **kw)
    quorum = simulate(single_switch(2), jobs, steady=20, **kw)
    own = simulate(single_switch(2), jobs, steady=20, quorum=False, **kw)
    assert quorum["stats"]["steady_quorum"] > 0 and own["stats"]["steady_quorum"] == 0
    assert quorum["events"] < 0.85 * own["events"]
    for r in (quorum, own):
        assert r["avg_jct_s"] == pytest.approx(exact["avg_jct_s"], rel=0.01)
        for name, t in exact["jct_s"].items():
            assert r["jct_s"][name] == pytest.approx(t, rel=0.03)
    # the window after the warm-up: 2 s an iteration over 4 iterations (an exact park moves both on)
    e = [(2.0 * k, k) for k in range(5)] + [(2.0 * k, k) for k in range(40, 42)]
    assert window_mean(e[:5], 2, 4) is None and window_mean(e[:6], 2, 4) == pytest.approx(2.0)


@pytest.mark.parametrize("arrival", [300.0, 1500.0])
def test_a_start_interrupts_a_steady_park(arrival):
    """--steady parks a component until its first job's end; a job that starts on its links before
    that brings it back to now (each job moved on at its measured rate) and joins it. Against the
    exact run: every job within 1%."""
    jobs = [job("a", 2, size=1.03e9, compute=0.1137, iters=2000), job("b", 2, size=6.1e8, compute=0.1731, iters=2500),
            job("c", 2, size=3e8, compute=0.05, iters=300, arrival=arrival)]
    kw = dict(gpus_per_server=3, placement="ls", network="fifo")  # ls: all three ring between the 2 NICs
    approx = simulate(single_switch(2), jobs, steady=20, **kw)
    exact = simulate(single_switch(2), jobs, park=False, **kw)
    assert approx["stats"]["interrupted_parks"] == 1
    assert approx["events"] < exact["events"] / 10
    for name, t in exact["jct_s"].items():
        assert approx["jct_s"][name] == pytest.approx(t, rel=0.01)


def test_the_flow_table_rows_follow_open_flows_and_their_components():
    """Every open flow has one row, tagged with its job's component; parked and ended flows have none
    tagged (checked every 20 events of a run that parks, steady-parks and fast-forwards)."""
    import numpy as np

    jobs = _mix(3, n=10) + [job("late", 3, size=4e8, iters=50, arrival=60.0)]
    sim = ClusterSim(mlcc_tree(8, per_tor=4, tors_per_edge=2), jobs, gpus_per_server=2, placement="ls",
                     steady=10)
    checks = []

    def check(s):
        ft = s.ft
        tagged = set(np.flatnonzero(ft.comp >= 0).tolist())
        assert tagged == {f.s for f in s.flows.values()}
        for f in s.flows.values():
            assert ft.comp[f.s] == s.comp_of[f.job] and ft.fid[f.s] == f.fid and ft.job[f.s] == f.job
        checks.append(len(tagged))
        return False

    sim.run(progress=check, every=20)
    assert sim.stats["parks"] > 0 and len(checks) > 20 and max(checks) > 0


@pytest.mark.parametrize("network", ["fifo", "cap", "one", "rr", "prio-every-link"])
def test_the_compiled_solve_gives_the_numpy_path_results(network, monkeypatch):
    """The compiled solve (one call per component: one class, or bands at the NICs) and the NumPy path
    (kernel.rates, its memo) give the same events, solves and JCTs."""
    from hostctl_lab.sim import kernel

    if kernel._kernel_nb is None:
        pytest.fail("numba is not installed: setup installs it (lab extra)")
    jobs = _mix(5, n=10, iters=(40, 120))
    kw = dict(gpus_per_server=2, placement="ls", network=network, cap_bps=6 * GB, park=False)
    fab = mlcc_tree(8, per_tor=4, tors_per_edge=2)
    compiled = simulate(fab, jobs, **kw)
    monkeypatch.setattr(kernel, "COMPILED", False)
    numpy_path = simulate(fab, jobs, **kw)
    assert compiled["events"] == numpy_path["events"]
    assert compiled["stats"]["solves"] == numpy_path["stats"]["solves"]
    assert compiled["jct_s"] == pytest.approx(numpy_path["jct_s"], rel=1e-12)


@pytest.mark.parametrize("seed", [0, 1])
def test_a_quorum_share_takes_a_slow_job_at_two_iterations_and_stays_close_to_exact(seed):
    """--steady-quorum 0.75 (ClusterSim(quorum=0.75)): the component of the quorum test above parks once
    3/4 of its jobs have their means, the slow job (its iterations over 4x the others' median) taken
    at 2 iterations after a warm-up of 2 ends instead of 10 after 10. Fewer events than the default
    rule; against the exact run the average within 1%, every job within 3%."""
    jobs = _fast_and_slow(seed)
    kw = dict(gpus_per_server=24, placement="ls", network="fifo", seed=seed)
    exact = simulate(single_switch(2), jobs, park=False, **kw)
    default = simulate(single_switch(2), jobs, steady=20, **kw)
    share = simulate(single_switch(2), jobs, steady=20, quorum=0.75, **kw)
    assert share["events"] < 0.9 * default["events"]
    assert share["avg_jct_s"] == pytest.approx(exact["avg_jct_s"], rel=0.01)
    for name, t in exact["jct_s"].items():
        assert share["jct_s"][name] == pytest.approx(t, rel=0.03)


def test_the_slow_window_and_the_quorum_share_check():
    """slow_window_mean: after 2 ends, at least 2 iterations spanning SLOW_SPAN of the time since the
    change; a share outside (0, 1] is one ConfigError line."""
    from hostctl_lab.sim.cluster import SLOW_SPAN, slow_window_mean

    e = [(1.0 + 8.0 * k, k + 1) for k in range(5)]  # ends at 1, 9, 17, 25, 33 s: 8 s an iteration
    assert slow_window_mean(e[:4], 30.0) is None  # one iteration after the warm-up
    assert slow_window_mean(e, 30.0) == pytest.approx(8.0)  # 16 s of window >= 0.5 x 30 s
    assert slow_window_mean(e, 16.0 / SLOW_SPAN + 1.0) is None  # the window is too short a part of it
    for bad in (0, 1.5, -0.2, "0.5"):
        with pytest.raises(ConfigError, match="--steady-quorum"):
            ClusterSim(single_switch(2), [job("a", 2)], steady=20, quorum=bad)


@pytest.mark.parametrize("share, quorum", [(None, True), (0.75, 0.75)])
def test_a_sweep_passes_its_steady_quorum_to_the_engine(share, quorum, monkeypatch):
    """hostctl sim --steady-quorum reaches ClusterSim through run_one (None: the default rule)."""
    from dataclasses import asdict

    from hostctl_lab.sim import cluster
    from hostctl_lab.sim.run import SweepSpec, run_one

    seen = {}
    monkeypatch.setattr(cluster, "simulate", lambda fab, jobs, **kw: seen.update(kw) or {})
    spec = SweepSpec(topology="single-switch", servers=4, synthetic=4, steady=20, steady_quorum=share)
    run_one(asdict(spec), spec.combos()[0])
    assert seen["quorum"] is quorum or seen["quorum"] == quorum
