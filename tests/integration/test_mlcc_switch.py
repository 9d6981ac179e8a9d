"""MlccControl (the daemon's mlcc policy) against real switchemu processes over real ZeroMQ:
two hosts' schedules meet in the switch's table and stagger; killing the switch sends the
daemon to local mode after 3 silent slots; restarting it brings switch mode back.

No root: the flows are described to the controller (the datapath side is in test_mlcc_daemon).
Every switchemu started here is killed by its PID in a finalizer."""

from __future__ import annotations

import logging
import os
import signal
import time

import numpy as np
import pytest

from hostctl.core import wire
from hostctl.core.deps import JobComm
from hostctl.core.mlcchost import wait_floor_Bps
from hostctl.core.types import FlowKey
from hostctl.policy.mlcc import SILENT_SLOTS, FlowIn, MlccControl
from hostctl.policy.switchclient import SwitchClient
from tests.integration.test_switchemu import TOPO as SWITCHEMU_TOPO
from tests.integration.test_switchemu import SLOT_S, OldSwitch, procs, wait_up  # noqa: F401 (procs: a fixture)

C = 125_000_000 // 8  # 125 Mbit/s host links, bytes/s

TOPO = """
[[switch]]
name = "sw0"
hosts = {count = 4, prefix = "h", first_addr = "10.77.0.1"}
host_rate = "125mbit"
"""


class Clock:
    """The real wall clock; step() sleeps to 2 ms into the next slot (as the daemon ticks)."""

    def __init__(self, _t0: float = 0.0):
        self.step()

    def __call__(self) -> float:
        return time.time()

    def step(self) -> None:
        now = time.time()
        time.sleep(SLOT_S - now % SLOT_S + 0.002)


@pytest.fixture
def switch(procs, tmp_path):
    topo = tmp_path / "topo.toml"
    topo.write_text(TOPO)
    ep = f"ipc://{tmp_path}/sw.sock"
    args = ("--bind", ep, "--topology", str(topo), "--log-level", "WARNING")
    p = procs.start(*args)
    wait_up(ep, p)
    return ep, p, args


def ctl(ep, clock, **kw) -> MlccControl:
    c = MlccControl(C, SLOT_S, switch=SwitchClient([ep]), wall=clock, fetch_timeout_s=0.5,
                    publish_timeout_s=0.5, **kw)
    assert c.switch.probe(SLOT_S, timeout_s=5).error is None  # connected (sockets connect in the background)
    return c


def held(rate_Bps: float) -> bool:
    """A slot-0 rate that holds the flow back: at most the wait floor (one 64 KiB packet per slot,
    7% of this port) or Algorithm 1's 1% minimum (Q-M4), whichever is higher."""
    return rate_Bps <= max(0.0101 * C, wait_floor_Bps(SLOT_S) * 1.001)


def flow(src, dst, job, G, port=5000):
    return FlowIn(FlowKey(src, port, dst, 9000), job, G, 0.0, 0.0)


def test_two_hosts_stagger_on_the_receivers_port(switch):
    ep, _, _ = switch
    clock = Clock()
    a, b = ctl(ep, clock), ctl(ep, clock)
    try:
        # h1 and h2 both send 2 slots' worth of the h0 port's capacity to h0
        G = 2 * C * SLOT_S
        fa = [flow("10.77.0.2", "10.77.0.1", "ja", G)]
        fb = [flow("10.77.0.3", "10.77.0.1", "jb", G)]
        for _ in range(5):  # both hosts must plan in the same slot: retry if a boundary fell between them
            clock.step()
            ra = a.tick(fa)
            b.tick(fb)
            if a.last_slot == b.last_slot:
                break
            b.tick([])  # withdraw b's schedule before trying again: a must plan alone
        assert a.last_slot == b.last_slot, "no two ticks within one 60 ms slot in 5 tries"
        assert a.mode == "switch"
        assert ra[fa[0].key] == pytest.approx(C, rel=1e-3)  # alone: the full port from slot 0
        plan_b = b.schedule_of(fb[0].key)["schedule_Bps"]
        # b saw a's schedule on sw0>h0 and planned around it: nothing (but the floor) in a's slots
        assert held(plan_b[0]) and plan_b[1] < 0.01 * C
        assert sum(plan_b) * SLOT_S >= G * 0.999
        assert b.schedule_of(fb[0].key)["links"] == ["nic", "sw0>h0"]
        assert b.status()["negotiation_ms_p90"] is not None
        assert b.status()["wire_versions"] == {ep: wire.WIRE_VERSION}
    finally:
        a.close()
        b.close()


def test_fallback_to_local_mode_and_back(switch, procs, caplog):
    ep, p, args = switch
    clock = Clock()
    c = ctl(ep, clock)
    fl = [flow("10.77.0.2", "10.77.0.1", "ja", 1e6)]
    try:
        c.tick(fl)
        assert c.mode == "switch"
        os.kill(p.pid, signal.SIGKILL)
        p.wait(5)
        caplog.set_level(logging.WARNING, logger="hostctl")
        modes = []
        for _ in range(SILENT_SLOTS + 2):
            clock.step()
            c.fetch_timeout_s = 0.05
            rates = c.tick(fl)
            modes.append(c.mode)
            assert rates[fl[0].key] > 0  # still planned every slot
        assert modes[:SILENT_SLOTS - 1] == ["switch"] * (SILENT_SLOTS - 1)
        assert modes[SILENT_SLOTS - 1:] == ["local"] * 3
        assert c.fallbacks == 1
        assert sum("local mode" in r.getMessage() for r in caplog.records) == 1  # logged once
        assert c.schedule_of(fl[0].key)["links"] == ["nic"]

        p2 = procs.start(*args)
        wait_up(ep, p2)
        c.fetch_timeout_s = 0.5
        for _ in range(50):
            clock.step()
            c.tick(fl)
            if c.mode == "switch":
                break
            time.sleep(0.05)
        assert c.mode == "switch" and c.recoveries == 1
        assert c.schedule_of(fl[0].key)["links"] == ["nic", "sw0>h0"]
    finally:
        c.close()


def test_ended_flows_are_withdrawn_from_the_switch(switch):
    ep, _, _ = switch
    clock = Clock()
    a, b = ctl(ep, clock), ctl(ep, clock)
    try:
        fa = [flow("10.77.0.2", "10.77.0.1", "ja", 20 * C * SLOT_S)]  # a long flow: all K slots
        a.tick(fa)
        fb = [flow("10.77.0.3", "10.77.0.1", "jb", C * SLOT_S)]
        b.tick(fb)
        assert held(b.schedule_of(fb[0].key)["schedule_Bps"][0])  # the port is a's
        clock.step()
        a.tick([])  # a's flow closed: withdrawn
        clock.step()
        b.tick(fb)
        assert b.schedule_of(fb[0].key)["schedule_Bps"][0] == pytest.approx(C, rel=1e-3)
    finally:
        a.close()
        b.close()


def test_own_flows_are_not_counted_twice(switch):
    """Two flows of one host to the same receiver: the switch's feedback for each includes the
    other's previous schedule; the controller subtracts it (it plans its own flows jointly)."""
    ep, _, _ = switch
    clock = Clock()
    a = ctl(ep, clock)
    try:
        G = 0.25 * C * SLOT_S
        fl = [flow("10.77.0.2", "10.77.0.1", "ja", G, 5000), flow("10.77.0.2", "10.77.0.1", "jb", G, 5001)]
        for _ in range(3):
            a.tick(fl)
            clock.step()
        plans = [a.schedule_of(f.key)["schedule_Bps"] for f in fl]
        assert all(p[0] == pytest.approx(G / SLOT_S, rel=1e-3) for p in plans)  # both in slot 0
        assert np.isclose(sum(p[0] for p in plans), 0.5 * C, rtol=1e-3)
    finally:
        a.close()


def test_flows_of_one_job_share_instead_of_staggering(switch):
    """b_l is the load of *other* jobs, and a job's own flows share a link explicitly: the second
    worker of a job sending to its PS plans its half of the receiver port at once (the first gives up
    the other half in its next slot), while another job's flow steps aside."""
    ep, _, _ = switch
    clock = Clock()
    a, b, c = ctl(ep, clock), ctl(ep, clock), ctl(ep, clock)
    try:
        G = 2 * C * SLOT_S
        fa = [flow("10.77.0.2", "10.77.0.1", "job1", G)]
        fb = [flow("10.77.0.3", "10.77.0.1", "job1", G)]
        fc = [flow("10.77.0.4", "10.77.0.1", "job2", G)]
        a.tick(fa)
        b.tick(fb)
        c.tick(fc)
        assert b.schedule_of(fb[0].key)["schedule_Bps"][0] == pytest.approx(C / 2, rel=1e-3)  # same job: shares
        assert held(c.schedule_of(fc[0].key)["schedule_Bps"][0])  # other job: waits
        clock.step()
        a.tick(fa)
        assert a.schedule_of(fa[0].key)["schedule_Bps"][0] == pytest.approx(C / 2, rel=1e-3)  # gave up half
    finally:
        for x in (a, b, c):
            x.close()


# ------------------------------------------------------------------ Algorithm 2 through the switch
RING = {"r": JobComm("ring", frozenset({7000}), 3)}


def ring_flow(me: str, nxt: str, G: float, sent: float) -> FlowIn:
    """The ring flow of job r that host `me` sends to its successor `nxt` (over the connection it
    accepted on port 7000), with `sent` bytes of this iteration carried so far (Algorithm 2 counts
    progress per iteration; the connection's lifetime count is ten iterations more, and plays no part)."""
    return FlowIn(FlowKey(me, 7000, nxt, 40000), "r", G, C, sent, cum_bytes=sent + 10 * (sent + G))


def same_slot(clock, *steps):
    """Run the steps (callables) within one slot, retrying from the next slot if a boundary fell
    between them (progress and notifications are read by the next step in the same slot)."""
    for _ in range(5):
        clock.step()
        slots = [s() for s in steps]
        if len(set(slots)) == 1:
            return
    raise AssertionError("no run of the steps within one 60 ms slot in 5 tries")


def test_a_ring_flow_behind_its_predecessor_is_sped_up_within_its_links_headroom(switch):
    """Rank 1 (h2) has carried less of this iteration than rank 0 (h1) will have sent it: Algorithm 2
    gives its ring flow a Delta, through the progress rank 0 reported to the switch. The raise is
    limited to what h2's NIC has left: with another flow of h2 that needs little this slot, the ring
    flow takes the rest of the NIC; it never books the NIC beyond its capacity."""
    ep, _, _ = switch
    clock = Clock()
    a, b, off = ctl(ep, clock), ctl(ep, clock), ctl(ep, clock, deps=False)
    G = 3 * C * SLOT_S
    fa = [ring_flow("10.77.0.2", "10.77.0.3", G, 4e6)]
    fb = [ring_flow("10.77.0.3", "10.77.0.4", G, 1e6),
          FlowIn(FlowKey("10.77.0.3", 5000, "10.77.0.1", 9000), "x", G, C, 0.0, cum_bytes=0.0)]
    try:
        def tick(c, fl):
            return lambda: (c.tick(fl, RING), c.last_slot)[1]
        same_slot(clock, tick(a, fa), tick(b, fb), tick(off, fb))
        ring, cross = (b.schedule_of(f.key) for f in fb)
        assert ring["role"] == "ring" and ring["delta_Bps"] > 0
        # within the NIC (the job that became busy later waits at the floor)
        assert ring["schedule_Bps"][0] + cross["schedule_Bps"][0] <= C * 1.001 + wait_floor_Bps(SLOT_S)
        assert b.status()["deps"]["flows"] == 1 and b.status()["deps"]["delta_flows"] >= 1
        # the same flows without the dependency rules: the job that became busy first (r) has the NIC,
        # the other (x) waits at the floor (arrival order)
        assert [off.schedule_of(f.key)["schedule_Bps"][0] for f in fb] == pytest.approx(
            [C, wait_floor_Bps(SLOT_S)], rel=1e-3)
        assert "role" not in off.schedule_of(fb[0].key)
    finally:
        for x in (a, b, off):
            x.close()


def test_a_notification_holds_the_successor_to_what_it_can_have_received(switch):
    """Rank 0 (h1) notifies rank 1 (h2) of its F plus one chunk; rank 1's plan says it would carry
    more than that by the end of the slot, so the schedule it publishes is cut in slot 0 and the rate
    it is paced at is held to the ceiling (Alg. 2 lines 13-16)."""
    ep, _, _ = switch
    clock = Clock()
    a, b = ctl(ep, clock), ctl(ep, clock)
    G = 3 * C * SLOT_S
    fa = [ring_flow("10.77.0.2", "10.77.0.3", G, 1e6)]
    chunk = (1e6 + G) / 4  # one chunk of a 3-rank ring: the iteration / (2 (N - 1))
    ceiling = 1e6 + C * SLOT_S + chunk  # rank 0's F by the end of the slot (alone at C) + one chunk
    fb = [ring_flow("10.77.0.3", "10.77.0.4", G, ceiling - 0.2 * C * SLOT_S)]  # 0.2 slot of the port short of it
    try:
        applied = {}

        def tick_b():
            applied.update(b.tick(fb, RING))
            return b.last_slot
        same_slot(clock, lambda: (a.tick(fa, RING), a.last_slot)[1], tick_b)
        assert a.status()["deps"]["notifications_sent"] >= 1
        assert b.status()["deps"]["notifications_received"] >= 1
        s = b.schedule_of(fb[0].key)
        assert s["reduced_bytes"] > 0 and s["held"]
        assert s["schedule_Bps"][0] <= 0.21 * C  # published as held
        assert sum(s["schedule_Bps"]) * SLOT_S >= 0.99 * G  # its bytes moved to later slots, not dropped
        assert applied[fb[0].key] == pytest.approx(max(0.2 * C, wait_floor_Bps(SLOT_S)), rel=0.02)  # paced so
    finally:
        a.close()
        b.close()


def test_ps_broadcasts_follow_the_slowest_worker(switch):
    """The PS (h0) raises its broadcast flows towards F_a^min, the least progress of this iteration
    among its workers' aggregation flows, which the workers (h1, h2) report; while one worker has not
    reported, the broadcasts get no Delta (no reference). The raise stays within the PS's NIC."""
    ep, _, _ = switch
    clock = Clock()
    ps, w1, w2 = ctl(ep, clock), ctl(ep, clock), ctl(ep, clock)
    G = 3 * C * SLOT_S
    comm_ps = {"p": JobComm("ps", frozenset({9000}), None)}
    comm_w = {"p": JobComm("ps", frozenset(), None)}
    fps = [FlowIn(FlowKey("10.77.0.1", 9000, w, 50000 + i), "p", G, C, 0.0, cum_bytes=9e6)
           for i, w in enumerate(("10.77.0.2", "10.77.0.3"))]
    fw1 = [FlowIn(FlowKey("10.77.0.2", 50000, "10.77.0.1", 9000), "p", G, C, 3e6, cum_bytes=3e7)]
    fw2 = [FlowIn(FlowKey("10.77.0.3", 50001, "10.77.0.1", 9000), "p", G, C, 2e6, cum_bytes=2e7)]
    try:
        same_slot(clock, lambda: (w1.tick(fw1, comm_w), w1.last_slot)[1],
                  lambda: (ps.tick(fps, comm_ps), ps.last_slot)[1])
        assert all(ps.schedule_of(f.key)["delta_Bps"] == 0 for f in fps)  # w2 has not reported yet
        assert ps.status()["deps"]["progress_missing"] >= 2
        same_slot(clock, lambda: (w1.tick(fw1, comm_w), w1.last_slot)[1],
                  lambda: (w2.tick(fw2, comm_w), w2.last_slot)[1],
                  lambda: (ps.tick(fps, comm_ps), ps.last_slot)[1])
        got = [ps.schedule_of(f.key) for f in fps]
        assert all(g["role"] == "broadcast" and g["delta_Bps"] > 0 for g in got)
        assert sum(g["schedule_Bps"][0] for g in got) <= C * 1.001  # the two share the PS's NIC
        assert w1.schedule_of(fw1[0].key)["role"] == "aggregation"
    finally:
        for x in (ps, w1, w2):
            x.close()


def test_a_daemon_keeps_planning_with_a_switch_of_wire_version_1(tmp_path, caplog):
    """An older switchemu (wire version 1 only) refuses the daemon's first exchange with unknown_version;
    the daemon logs that once, stays in switch mode and is served in version 1 from the next slot on."""
    topo = tmp_path / "topo.toml"
    topo.write_text(SWITCHEMU_TOPO)
    ep = f"ipc://{tmp_path}/old.sock"
    old = OldSwitch(str(topo), ep)
    clock = Clock()
    a = b = None
    try:
        a, b = ctl(ep, clock), ctl(ep, clock)  # (probing already drops a client to version 1)
        a.switch.version[ep] = b.switch.version[ep] = wire.WIRE_VERSION  # as a freshly started daemon
        fa = [flow("10.100.0.2", "10.100.0.1", "ja", 2 * C * SLOT_S)]
        with caplog.at_level("WARNING", logger="hostctl"):
            a.tick(fa)
        assert a.errors == {"unknown_version": 1} and a.mode == "switch"
        assert a.status()["wire_versions"] == {ep: 1}
        assert "does not speak wire version 2" in caplog.text and "check NTP" not in caplog.text
        b.switch.version[ep] = 1
        for _ in range(5):  # the next slots are served: b sees a's schedule on the shared port
            clock.step()
            a.tick(fa)
            b.tick([flow("10.100.0.3", "10.100.0.1", "jb", 2 * C * SLOT_S)])
            if a.last_slot == b.last_slot:
                break
        assert a.errors == {"unknown_version": 1} and b.errors == {} and b.mode == "switch"
        assert b.schedule_of(FlowKey("10.100.0.3", 5000, "10.100.0.1", 9000))["links"] == ["nic", "sw0>h0"]
    finally:
        for c in (a, b):
            if c is not None:
                c.close()
        old.close()
