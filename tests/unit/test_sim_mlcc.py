"""MLCC, MCS and CCML as network policies of the cluster simulator (hostctl_lab.sim.mlccnet), on cases
small enough to compute by hand. Expected values are closed forms written here, not the simulator's."""

from __future__ import annotations

import math

import numpy as np
import pytest

from hostctl.errors import ConfigError
from hostctl_lab.sim import mlccnet
from hostctl_lab.sim.cluster import ClusterSim, simulate
from hostctl_lab.sim.topo import mlcc_tree, single_switch
from hostctl_lab.sim.workload import JobSpec

GB = 10**9
C = 10 * GB / 8  # a 10 Gbit/s NIC in bytes/s
SLOT = 0.06


def job(name, gpus, size=1e9, compute=0.1, iters=1, arrival=0.0, kind="ring"):
    return JobSpec(name, arrival, gpus, "m", int(size), compute, iters, kind)


@pytest.mark.parametrize("net", ["mlcc", "mlcc-switch"])
def test_a_lone_ring_under_mlcc_takes_size_over_capacity_plus_at_most_a_slot(net):
    # 2 servers, each sends size to the other; no fast-forward, so the planner caps every iteration
    # after the first (the first: the connections were never planned, no pacer rate yet)
    exact = 3 * (0.1 + 1e9 / C)
    r = simulate(single_switch(2), [job("a", 16, iters=3)], network=net, fast_forward=False)
    assert exact * (1 - 1e-9) <= r["jct_s"]["a"] <= exact + SLOT
    assert r["stats"]["ticks"] > 0


def _checked(sim: ClusterSim) -> dict:
    """Wrap sim.solved (after every solve, compiled or not): check the kernel's rates against the caps
    and the links' capacities with sums computed here (numpy.bincount, not the kernel)."""
    seen = {"solves": 0, "worst_link": 0.0, "worst_cap": 0.0}
    solved = sim.solved

    def checked(c, n, first, job0):
        solved(c, n, first, job0)
        rows = sim.comp_rows(c)
        assert len(rows) == n
        seen["solves"] += 1
        fl = [sim.flows[int(x)] for x in sim.ft.fid[rows]]
        rate = np.array([f.rate for f in fl])
        links = np.concatenate([f.path for f in fl])
        per = np.bincount(links, weights=np.repeat(rate, [len(f.path) for f in fl]), minlength=sim.fab.n_links)
        seen["worst_link"] = max(seen["worst_link"], float((per / sim.fab.capacity).max()))
        seen["worst_cap"] = max(seen["worst_cap"], max(f.rate / f.cap for f in fl if f.cap > 0) if fl else 0.0)

    sim.solved = checked
    return seen


@pytest.mark.parametrize("net", ["mlcc", "mlcc-switch"])
def test_mlcc_caps_hold_and_never_book_a_nic_beyond_capacity(net):
    # 6 ring jobs of different sizes on 6 servers of a small tree (2 per rack: racks share uplinks),
    # arriving apart: hosts carry several jobs, links several flows
    fab = mlcc_tree(6, per_tor=2, tors_per_edge=2)
    jobs = [job(f"j{k}", 3 + k % 3, size=(0.3 + 0.2 * k) * 1e9, compute=0.05 + 0.03 * k, iters=3,
                arrival=0.1 * k) for k in range(6)]
    sim = ClusterSim(fab, jobs, network=net, placement="ls", gpus_per_server=4)
    seen = _checked(sim)
    r = sim.run()
    assert r["finished"] == 6
    assert seen["solves"] > 50
    assert seen["worst_link"] <= 1 + 1e-9  # the kernel never gives a link more than its capacity
    assert seen["worst_cap"] <= 1 + 1e-9  # nor a flow more than its planned cap
    pol = sim.netpol
    assert pol.stats["plans"] > 50 and pol.stats["cap_writes"] > 0
    # the slot-0 rates the hosts publish for the flows they plan (what they book of their NIC) stay
    # within the NIC's capacity, plus the daemon's wait floor per flow; with the other hosts' load in
    # view (switch), plus the planner's starvation floor (MlccParams.min_rate_frac of the link, Q-M4),
    # which a host whose links the others booked full still gives its flows
    slack = pol.params.min_rate_frac if net == "mlcc-switch" else 0.0
    assert pol.stats["max_nic_overbook"] <= slack + 1e-9


def test_mcs_starts_a_ring_stage_after_the_one_before_has_ended():
    fab = single_switch(4)
    sim = ClusterSim(fab, [job("a", 3, iters=2), job("b", 2, size=2e9, iters=2)], network="mcs",
                     gpus_per_server=1, placement="ls", fast_forward=False)
    log = []
    add, remove = sim.add_flows, sim.remove_flow

    def add_flows(i, pairs):
        log.append(("start", sim.now, i, sim.jobs[i].phase, len(pairs)))
        add(i, pairs)

    def remove_flow(f):
        log.append(("end", sim.now, f.job, sim.jobs[f.job].phase, 1))
        remove(f)

    sim.add_flows, sim.remove_flow = add_flows, remove_flow
    r = sim.run()
    assert r["finished"] == 2
    a = [e for e in log if e[2] == 0]
    starts = [e for e in a if e[0] == "start"]
    assert len(starts) == 2 * 2 * (3 - 1)  # 2 iterations of 2(S-1) stages
    assert all(e[4] == 3 for e in starts)  # every stage: one flow per server
    for k, e in enumerate(a):  # a stage starts only once all flows of the one before have ended
        if e[0] == "start" and k:
            assert sum(1 for x in a[:k] if x[0] == "start") * 3 == sum(1 for x in a[:k] if x[0] == "end")


def test_mcs_lone_ring_takes_its_stages_back_to_back():
    # alone, the 2(S-1) stages of size/S at the NIC rate take what the pipelined ring takes
    r = simulate(single_switch(4), [job("a", 4, iters=2)], network="mcs", gpus_per_server=1)
    assert r["jct_s"]["a"] == pytest.approx(2 * (0.1 + 6 * (1e9 / 4) / C), rel=1e-9)


def test_madd_rates_order_then_fill():
    # coflow 1: 0->1 1 GB; coflow 2: 0->2 2 GB and 3->1 1 GB (all ports C). In the order (1, 2):
    # coflow 1 takes port 0 out and port 1 in at C; coflow 2 gets nothing on them, so nothing
    eg = {h: C for h in range(4)}
    cf1, cf2 = [(0, 1, 1e9)], [(0, 2, 2e9), (3, 1, 1e9)]
    assert mlccnet.madd_rates([cf1, cf2], eg, eg) == [[C], [0.0, 0.0]]
    # in the order (2, 1): coflow 2's bottleneck is port 0 out (2 GB): 2 GB / C, so both its flows
    # run at bytes / (2 GB / C): C and C/2; then coflow 1 has nothing at port 0; fill: 3->1 takes
    # what port 1 in has left (C/2)
    assert mlccnet.madd_rates([cf2, cf1], eg, eg) == [[C, C], [0.0]]
    # smallest effective bottleneck first: coflow 1 (1 GB / C) before coflow 2 (2 GB / C)
    assert mlccnet.sebf_order([cf2, cf1], eg, eg) == [1, 0]


def test_ccml_interleaves_two_jobs_of_equal_period():
    # two identical ring jobs on the same two servers, compute 1 s, exchange alone T = 0.8 s:
    # fifo keeps them in lock-step (each iteration 1 + 2 x 0.8 s); ccml lets the first go and makes the
    # second wait for the end of its window once, then their exchanges alternate: 5 x 1.8 s, + 0.8 s
    jobs = [job("a", 2, compute=1.0, iters=5), job("b", 2, compute=1.0, iters=5)]
    T = 1e9 / C
    kw = dict(gpus_per_server=2, placement="ls")
    fifo = simulate(single_switch(2), jobs, network="fifo", **kw)["jct_s"]
    assert fifo["a"] == pytest.approx(5 * (1.0 + 2 * T), rel=1e-9)
    r = simulate(single_switch(2), jobs, network="ccml", **kw)
    assert r["jct_s"]["a"] == pytest.approx(5 * (1.0 + T), rel=1e-9)
    assert r["jct_s"]["b"] == pytest.approx(5 * (1.0 + T) + T, rel=1e-9)


def test_mlcc_local_keeps_the_lock_step_and_switch_mode_staggers():
    # the same two jobs: planning the NIC alone, both hosts split it between the two jobs every slot,
    # as fair sharing does (lock-step, closed form above); with the switches' table the job that
    # arrived first plans first and the other around it, which staggers them
    jobs = [job("a", 2, compute=1.0, iters=5), job("b", 2, compute=1.0, iters=5)]
    T = 1e9 / C
    kw = dict(gpus_per_server=2, placement="ls")
    lock = 5 * (1.0 + 2 * T)
    local = simulate(single_switch(2), jobs, network="mlcc", **kw)["jct_s"]
    assert np.mean(list(local.values())) == pytest.approx(lock, rel=0.05)
    switch = simulate(single_switch(2), jobs, network="mlcc-switch", **kw)["jct_s"]
    assert np.mean(list(switch.values())) < 0.9 * lock


def test_bad_slot_is_one_clear_error():
    with pytest.raises(ConfigError, match="--slot"):
        ClusterSim(single_switch(2), [job("a", 16)], network="mlcc", slot_s=0.0)


@pytest.mark.parametrize("size", [1e3, 5e7, 1e9])
@pytest.mark.parametrize("moving", [True, False])
def test_local_one_connection_shortcut_is_what_plan_slot_decides(size, moving):
    # mlcc (local view) skips plan_slot for a host with one connection: its rate is the NIC's capacity.
    # The daemon's decision on such a host, for bytes left below, around and above a slot's worth
    from hostctl.core.mlcc import MlccParams
    from hostctl.core.mlccplan import FabricView, plan_slot

    cap = np.array([C])
    d = plan_slot([size if moving else 0.0], [C], [0.0], [0], np.zeros((1, 1), dtype=np.int64),
                  FabricView.empty(cap, 1, 10), moving=[moving], params=MlccParams(slot_s=SLOT))
    assert d.applied_Bps[0] == pytest.approx(C, rel=1e-12)


@pytest.mark.parametrize("net", ["mlcc", "mcs", "ccml"])
def test_fast_forward_of_lone_jobs_changes_nothing_under_the_new_policies(net):
    # jobs alone on their links are fast-forwarded (one event to their end) also under these policies:
    # alone, MLCC's local plan is the whole NIC, MCS's MADD gives the whole port, CCML has no one to wait
    # for. The same run simulated iteration by iteration gives the same JCTs. (mlcc-switch does not
    # fast-forward: a lone job's exchanges set its place in the table's arrival order.) Racks of 2 on a 10 Gbit/s NIC /
    # 20 Gbit/s uplink tree: a, b alone in their racks; c, d share host 4 and its rack's uplink
    fab = mlcc_tree(8, per_tor=2, tors_per_edge=2)
    jobs = [JobSpec("a", 0.0, 1, "m", int(4e8), 0.05, 6, "ring", hosts=(0, 1)),
            JobSpec("b", 0.2, 1, "m", int(3e8), 0.07, 5, "ring", hosts=(2, 3)),
            JobSpec("c", 0.1, 1, "m", int(5e8), 0.05, 4, "ring", hosts=(4, 6)),
            JobSpec("d", 0.3, 1, "m", int(2e8), 0.08, 6, "ring", hosts=(4, 5, 7))]
    on = simulate(fab, jobs, network=net)
    off = simulate(fab, jobs, network=net, fast_forward=False)
    assert on["stats"]["fast_forwards"] >= 2
    assert off["stats"]["fast_forwards"] == 0
    for k in "abcd":
        assert on["jct_s"][k] == pytest.approx(off["jct_s"][k], rel=1e-9), k


def test_mlcc_switch_does_not_fast_forward():
    r = simulate(single_switch(2), [job("a", 16, iters=3)], network="mlcc-switch")
    assert r["stats"]["fast_forwards"] == 0 and r["stats"]["ticks"] > 0


def test_schedule_table_views_by_arrival_shifted_one_slot():
    from hostctl_lab.mlcctable import ScheduleTable

    t = ScheduleTable(K=3)
    r = lambda *x: np.array(x, dtype=float)  # noqa: E731
    # slot 1: job "a" (host 0) books link 7; job "b" (host 1) publishes nothing yet
    t.publish([("a", 0, [7], r(5, 4, 3)), ("b", 1, [7, 8], r(0, 0, 0))])
    assert t.arrival == {"a": 0}
    # slot 2: b sends too (arrives second); a's second flow, from host 2, shares link 7
    t.publish([("a", 0, [7], r(5, 4, 3)), ("b", 1, [7, 8], r(2, 2, 0)), ("a", 2, [7], r(1, 1, 1))])
    assert t.arrival == {"a": 0, "b": 1}
    assert t.wave(["b", "a", "c"]).tolist() == [1, 0, 2]
    # host 1 plans b around a (arrived first), its own link columns [8, 7]; rows one slot on, the last
    # slot repeated
    v = t.view(1, ["b"], [8, 7], np.array([10.0, 10.0]))
    assert v.other_Bps[0].tolist() == [[0, 0, 0], [4 + 1, 3 + 1, 3 + 1]]
    assert v.same_Bps[0].tolist() == [[0, 0, 0], [0, 0, 0]] and v.busy0_Bps.tolist() == [0, 5]
    # host 0 plans a: b arrived after a, so not around it; a's flow from host 2 is the same job
    v = t.view(0, ["a"], [7], np.array([10.0]))
    assert v.other_Bps[0].tolist() == [[0, 0, 0]]
    assert v.same_Bps[0].tolist() == [[1, 1, 1]] and v.same_flows[0].tolist() == [[1, 1, 1]]
    assert v.busy0_Bps.tolist() == [2 + 1]
    # slot 3: a computes (publishes zeros): it is forgotten, b keeps its place
    t.publish([("a", 0, [7], r(0, 0, 0)), ("b", 1, [7, 8], r(2, 0, 0))])
    assert t.arrival == {"b": 1}


@pytest.mark.parametrize("net", ["mlcc", "mlcc-switch"])
def test_ticks_sleep_while_no_flow_sends_and_change_nothing(net, monkeypatch):
    # computes longer than the exchanges and arrivals apart: many slots with no flow anywhere, in which
    # a tick plans and publishes nothing; sleeping through them gives the same plans, caps and JCTs
    fab = mlcc_tree(6, per_tor=2, tors_per_edge=2)
    jobs = [job(f"j{k}", 3 + k % 3, size=(0.2 + 0.1 * k) * 1e9, compute=1.0 + 0.13 * k, iters=3,
                arrival=2.5 * k, kind="ps" if k % 2 else "ring") for k in range(5)]

    def run(sleep):
        monkeypatch.setattr(mlccnet.Mlcc, "sleep_ticks", sleep)
        sim = ClusterSim(fab, jobs, network=net, placement="ls", gpus_per_server=4)
        return sim.run(), sim.netpol.stats

    (asleep, st_a), (awake, st_w) = run(True), run(False)
    assert asleep["finished"] == awake["finished"] == 5
    assert st_a == st_w  # the same plans, lazy plans and cap writes
    for k in asleep["jct_s"]:
        assert asleep["jct_s"][k] == pytest.approx(awake["jct_s"][k], rel=1e-12), k
    assert asleep["stats"]["ticks"] < 0.7 * awake["stats"]["ticks"]  # the idle slots were skipped


def test_steady_under_mlcc_parks_held_connections_and_stays_close_to_exact():
    """--steady under mlcc (local view): a component whose jobs have steady mean iterations is parked;
    its connections are held out of the slots (not planned while parked: fewer plans), a job that
    starts on its links interrupts it, and the JCTs stay within 2% of the exact run's (every slot)."""
    jobs = [job("a", 2, size=1.03e9, compute=0.1137, iters=120), job("b", 2, size=6.1e8, compute=0.1731, iters=150),
            job("c", 2, size=3e8, compute=0.05, iters=30, arrival=60.0)]
    kw = dict(gpus_per_server=3, placement="ls", network="mlcc")  # ls: the three ring between the 2 NICs
    approx_sim = ClusterSim(single_switch(2), jobs, steady=20, **kw)
    approx = approx_sim.run()
    exact_sim = ClusterSim(single_switch(2), jobs, park=False, **kw)
    exact = exact_sim.run()
    assert approx["stats"]["steady_parks"] >= 1 and approx["stats"]["interrupted_parks"] == 1
    assert exact["stats"]["steady_parks"] == 0
    assert approx_sim.netpol.stats["plans"] < 0.75 * exact_sim.netpol.stats["plans"]
    assert not approx_sim.netpol.held  # every held connection came back
    for name, t in exact["jct_s"].items():
        assert approx["jct_s"][name] == pytest.approx(t, rel=0.02), name


def test_steady_is_off_under_mlcc_switch():
    # the switch view's table and arrival order span components: a park would not save them
    jobs = [job("a", 2, size=1.03e9, compute=0.1137, iters=60), job("b", 2, size=6.1e8, compute=0.1731, iters=60)]
    sim = ClusterSim(single_switch(2), jobs, steady=20, gpus_per_server=3, placement="ls", network="mlcc-switch")
    assert sim.steady == 0 and not sim.parking
