"""The daemon's MLCC control (MlccControl) against the real switchemu in process (tests/switchlocal.py):
several hosts' controllers publish to and fetch from one switch state, which labels every schedule by
job and sending host. These are the review's five cases (docs/mlcc.md): list order, incast, a PS whose
update precedes its gradient, notifications on the paced rate, cross traffic."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest

from hostctl.core.deps import JobComm
from hostctl.core.mlcchost import wait_floor_Bps
from hostctl.core.types import FlowKey
from hostctl.policy.mlcc import FlowIn, MlccControl, flow_id
from tests.switchlocal import CAP_Bps as C
from tests.switchlocal import Fabric, addr, two_racks

SLOT = 0.06
FLOOR = wait_floor_Bps(SLOT)
BIG = 40 * C * SLOT  # bytes left: 40 slots of the whole link (planned over the whole horizon)


def ctl(fab: Fabric, host: int, slot0_within_free: bool = False, slot0_job_booked: bool = False,
        **kw) -> MlccControl:
    kw.setdefault("deps", False)
    c = MlccControl(C, SLOT, switch=fab.client(addr(host)), wall=fab.wall, **kw)
    # (MlccParams: both off by default)
    c.params = replace(c.params, slot0_within_free=slot0_within_free, slot0_job_booked=slot0_job_booked)
    return c


def flow(src: int, sport: int, dst: int, job: str, *, G: float = BIG, sent: float = 0.0, moving: bool = True,
         dport: int = 9000) -> FlowIn:
    return FlowIn(FlowKey(addr(src), sport, addr(dst), dport), job, G, C, sent, moving)


def booked(fab: Fabric, link: str) -> np.ndarray:
    """The switch's load table for a link over the K slots from now (every host's schedules)."""
    st = fab.state
    i = st._local[st.topo.link_index[link]]
    slot = int(fab.now // SLOT)
    return st.table.loads([i], slot, slot)[0].astype(float)


@pytest.mark.parametrize("rule", ["default", "slot0_within_free", "slot0_job_booked"])
def test_the_plan_does_not_depend_on_the_order_of_the_flows(rule):
    # h4 sends job A into h0 at the whole link; then h3 sends one flow of A and one of B into h0
    got = []
    slot0 = rule != "default"
    kw = {rule: True} if slot0 else {}
    for order in ("AB", "BA"):
        fab = Fabric(two_racks())
        remote = ctl(fab, 4, **kw)
        remote.tick([flow(4, 4000, 0, "A")])
        host = ctl(fab, 3, **kw)
        flows = {"A": flow(3, 5000, 0, "A"), "B": flow(3, 5001, 0, "B")}
        rates = host.tick([flows[j] for j in order])
        plan = {j: tuple(host.schedule_of(flows[j].key)["schedule_Bps"]) for j in "AB"}
        got.append((plan, {j: rates[flows[j].key] for j in "AB"}))
        assert max(plan["B"]) <= FLOOR * 1.01  # B waits behind job A
        if slot0:
            # h3's A flow claims its job's share of the links that job A shares from the next slot on (in
            # this slot the link is booked: it waits)
            assert rates[flows["A"].key] <= FLOOR * 1.01
            assert plan["A"][1] == pytest.approx(C / 2, rel=0.03)
            assert booked(fab, "tor0>h0")[0] <= C + 2 * FLOOR + 2  # now: within capacity (and the floors)
        else:
            # h3's A flow takes its job's share at once (this slot is booked 1.5 x until h4 re-plans)
            assert rates[flows["A"].key] == pytest.approx(C / 2, rel=0.03)
        # the remote flow of A gives up half before the next slot's plans: nothing is booked beyond capacity
        fab.step()
        remote.tick([flow(4, 4000, 0, "A")])
        rates = host.tick([flows[j] for j in order])
        assert rates[flows["A"].key] == pytest.approx(C / 2, rel=0.05)
        assert booked(fab, "tor0>h0").max() <= C + 2 * FLOOR
        assert booked(fab, "agg>tor0").max() <= C + 2 * FLOOR
    assert got[0] == got[1]


@pytest.mark.parametrize("job_booked", [False, True], ids=["default", "slot0_job_booked"])
def test_an_incast_of_three_workers_books_the_ps_downlink_once(job_booked):
    fab = Fabric(two_racks())
    workers = {h: ctl(fab, h, slot0_job_booked=job_booked) for h in (3, 4, 5)}
    peak, now = [], []
    for s in range(6):
        rates = {h: c.tick([flow(h, 5000 + h, 0, "A")]) for h, c in workers.items()}
        now.append(booked(fab, "tor0>h0")[0])
        peak.append(booked(fab, "tor0>h0").max())
        fab.step()
    if job_booked:  # each worker planned the current slot within what the job's earlier planners booked
        assert max(now) <= C + 3 * FLOOR
    else:  # each worker takes its share of the first slot at once: booked up to 1 + 1/2 + 1/3 x
        assert now[0] > 1.5 * C
    # the first slot's plans are made before any other worker published: each takes what it sees
    # from then on the three workers' schedules share the PS downlink
    assert max(peak[1:]) <= C + 3 * FLOOR
    for h, r in rates.items():
        assert list(r.values())[0] == pytest.approx(C / 3, rel=0.05)


def test_a_ps_whose_update_precedes_its_gradient_does_not_speed_up_the_upload():
    # PS h0 of job A (port 9000) has sent update i (idle); worker h3 uploads gradient i into a PS
    # downlink where another job (h4 -> h0, job B) books 80% of the link
    fab = Fabric(two_racks())
    comms = {"A": JobComm("ps", frozenset({9000}))}
    other = ctl(fab, 4)
    ps = ctl(fab, 0, deps=True)
    worker = ctl(fab, 3, deps=True)
    upd = 4e6
    for s in range(3):
        other_rates = list(other.tick([flow(4, 4000, 0, "B")]).values())
        # the PS's broadcast flow: update i sent (lifetime 5 updates), idle
        ps.tick([FlowIn(FlowKey(addr(0), 9000, addr(3), 5000), "A", 0.0, C, upd, False, 0.0, 5 * upd)], comms)
        # the worker: 1 MB of gradient i sent (lifetime 4 gradients + 1 MB), 3 MB left
        rates = worker.tick([FlowIn(FlowKey(addr(3), 5000, addr(0), 9000), "A", 3e6, C, 1e6, True, C / 5,
                                    4 * upd + 1e6)], comms)
        fab.step()
    assert other_rates[0] == pytest.approx(C, rel=0.02)  # job B came first and keeps the link
    r = list(rates.values())[0]
    assert r <= FLOOR * 1.01  # held to the headroom the other job leaves (none): not paced at B
    assert worker.last.delta_Bps[0] == 0  # the PS reported no broadcast sending: nothing to catch up
    assert worker.status()["deps"]["delta_flows"] == 0


def test_a_notification_lowers_the_rate_written_to_the_pacer():
    # ring job R on h3 -> h4 -> h5 -> h3; h3's flow into h4 crawls (job B from h5 holds h4's downlink),
    # so h3 tells h4 (its successor) that by the end of the slot it will have sent about 0.2 MB of
    # this iteration: h4's ring flow, 1.6 MB into the iteration, may lead it by one chunk (1.5 MB) only
    fab = Fabric(two_racks())
    comms = {"R": JobComm("ring", frozenset({9100}), ring_size=3)}
    blocker = ctl(fab, 5)
    blocker.tick([flow(5, 4000, 4, "B")])
    pred = ctl(fab, 3, deps=True)
    succ = ctl(fab, 4, deps=True)
    it = 6e6  # bytes per iteration per ring flow; one chunk = it / (2 (N - 1)) = 1.5 MB
    # (ring flows leave the port the successor connected to: the accepted connection's local port)
    pf = FlowIn(FlowKey(addr(3), 9100, addr(4), 6000), "R", it - 0.1e6, C, 0.1e6, True, 0.0, 0.1e6)
    sf = FlowIn(FlowKey(addr(4), 9100, addr(5), 6001), "R", it - 1.6e6, C, 1.6e6, True, C, 1.6e6)
    free = list(succ.tick([sf], comms).values())[0]  # before its predecessor said anything
    fab.step()
    for _ in range(3):
        blocker.tick([flow(5, 4000, 4, "B")])
        pred.tick([pf], comms)
        rates = succ.tick([sf], comms)
        fab.step()
    r = list(rates.values())[0]
    assert succ.status()["deps"]["notifications_received"] > 0
    assert r < free / 2  # held: the successor is a chunk ahead of its predecessor already
    assert r >= FLOOR * 0.99
    assert succ.status()["deps"]["held_flows"] > 0


def test_cross_traffic_on_the_nic_lowers_the_plan():
    fab = Fabric(two_racks())
    c = ctl(fab, 3)
    r0 = list(c.tick([flow(3, 5000, 0, "A")]).values())[0]
    c.observe_nic(0.9 * C, 0.3 * C)  # 0.6 C of the NIC's traffic was not DL
    fab.step()
    r1 = list(c.tick([flow(3, 5000, 0, "A")]).values())[0]
    assert r0 == pytest.approx(C, rel=0.01)
    assert r1 == pytest.approx(C - (0.9 - 0.3 * 1.05) * C, rel=0.02)
    assert c.last.rates_Bps[0].max() <= r1 * 1.001  # the whole plan, not only slot 0


def test_the_views_rows_come_from_the_flows_own_job():
    # regression for the per-host view: a host's two jobs into one downlink read different rows
    fab = Fabric(two_racks())
    ctl(fab, 4).tick([flow(4, 4000, 0, "A")])
    host = ctl(fab, 3)
    host.tick([flow(3, 5000, 0, "A"), flow(3, 5001, 0, "B")])
    ids = [flow_id(flow(3, 5000, 0, "A").key), flow_id(flow(3, 5001, 0, "B").key)]
    fa, fb = host.feedback[ids[0]], host.feedback[ids[1]]
    # job A's row leaves job A out (h4's flow is in job_Bps), job B's row counts it
    assert max(fa.load_Bps["tor0>h0"]) == 0 and max(fa.job_Bps["tor0>h0"]) == pytest.approx(C, rel=0.01)
    assert max(fb.load_Bps["tor0>h0"]) == pytest.approx(C, rel=0.01) and max(fb.job_flows["tor0>h0"]) == 0


@pytest.mark.parametrize("slot0", [False, True], ids=["default", "slot0-within-free"])
def test_two_jobs_that_start_together_do_not_book_a_link_twice(slot0):
    """Two PS jobs' workers start their gradients into one PS host's downlink in the same slot (the hosts
    plan one after another within the slot, as their planning offsets make them): the job whose schedules
    reached the switch first keeps the link, the other plans around it, in every slot (arrival order), and
    the two jobs do not swap the link back and forth. From the second slot on the link is never booked
    beyond capacity; with the slot-0 rule not even in the first."""
    fab = Fabric(two_racks())
    hosts = {3: ctl(fab, 3, slot0), 4: ctl(fab, 4, slot0), 5: ctl(fab, 5, slot0)}
    jobs = {3: ["A", "B"], 4: ["A", "B"], 5: ["B"]}  # A: h3, h4 -> h0; B: h3, h4, h5 -> h0
    first = {}
    for s in range(6):
        rates = {}
        for h, c in hosts.items():
            rates.update(c.tick([flow(h, 5000 + 10 * h + i, 0, j) for i, j in enumerate(jobs[h])]))
        got = {j: sum(r for k, r in rates.items() if k.lport % 10 == i) for i, j in enumerate("AB")}
        if slot0:  # the slot's booking once every host planned it (what the switch samples as final)
            assert booked(fab, "tor0>h0")[0] <= C + 6 * FLOOR, s
        if s > 0:  # (in the first slot a host that plans later takes its job's share at once, or with the
            # slot-0 rule claims later slots before the others know: the others give way in their next slot)
            assert booked(fab, "tor0>h0").max() <= C + 6 * FLOOR, s
        first[s] = max(got, key=got.get)
        fab.step()
    # the job that got the link keeps it (no swap from slot to slot)
    assert len(set(first.values())) == 1


def test_an_idle_flow_paced_at_the_floor_books_nothing():
    """Under a job order, a flow with nothing to send (no progress) whose path has no headroom is paced
    at the wait floor (without an order an idle flow gets at least its share of the NIC: never the floor);
    in the next slot it is still idle: it books nothing, so the jobs behind it do not wait for a flow
    that does not send. A flow that its plan held at the floor is still planned without progress (its
    bytes may just not have been ACKed yet)."""
    fab = Fabric(two_racks())
    remote = ctl(fab, 4, job_order="fixed")  # job A's other worker: h0's downlink whole (A before B)
    host = ctl(fab, 3, job_order="fixed")
    idle = flow(3, 5000, 0, "A", moving=False)  # job A, between bursts (the next iteration's bytes known)
    waiting = flow(3, 5001, 0, "B")  # job B, sending, behind job A
    for s in range(4):
        remote.tick([flow(4, 4000, 0, "A")])
        rates = host.tick([idle, waiting if s == 0 else waiting._replace(moving=False)])
        assert host.schedule_of(idle.key)["kind"] == "idle", s
        assert max(host.schedule_of(idle.key)["schedule_Bps"]) == 0, s
        assert rates[idle.key] <= FLOOR * 1.01 and rates[waiting.key] <= FLOOR * 1.01, s
        # B's flow stays planned (held at the floor: no progress is no evidence it has nothing to send)
        assert host.schedule_of(waiting.key)["kind"] == "active", s
        if s:
            assert booked(fab, "tor0>h0").max() <= C + 2 * FLOOR, s
        fab.step()
