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

from hostctl.core.types import FlowKey
from hostctl.mlccctl import SILENT_SLOTS, FlowIn, MlccControl
from hostctl.switchclient import SwitchClient
from tests.integration.test_switchemu import SLOT_S, procs, wait_up  # noqa: F401 (procs: a fixture)

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
        assert plan_b[0] < 0.01 * C and plan_b[1] < 0.01 * C
        assert sum(plan_b) * SLOT_S >= G * 0.999
        assert b.schedule_of(fb[0].key)["links"] == ["nic", "sw0>h0"]
        assert b.status()["negotiation_ms_p90"] is not None
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
        assert b.schedule_of(fb[0].key)["schedule_Bps"][0] <= 0.0101 * C  # the port is a's (1% floor, Q-M4)
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
    """b_l is the load of *other* jobs: two workers of one job sending to its PS both plan the whole
    receiver port (TCP shares it; the barrier needs both), while another job's flow steps aside."""
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
        assert b.schedule_of(fb[0].key)["schedule_Bps"][0] == pytest.approx(C, rel=1e-3)  # same job: no yield
        assert c.schedule_of(fc[0].key)["schedule_Bps"][0] <= 0.0101 * C  # other job: waits
    finally:
        for x in (a, b, c):
            x.close()
