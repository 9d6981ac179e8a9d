"""MlccControl against real switchemu processes that misbehave: a host clock the switch refuses, a
switch that stops and answers late, one switch of several lost. Real ZeroMQ over ipc, real processes
(SIGSTOP / SIGKILL by their PIDs, all killed in the fixture's finalizer); no root needed.

The rule under test: only a switch that took the slot's requests counts as an answer. A refused slot
(the host's clock and the switch's differ by more than the switch's --max-skew-ms) or an answer after
the fetch's deadline is silence; SILENT_SLOTS of it and the daemon plans on its own NIC link, with a
log line that names the measured offset and the fix."""

from __future__ import annotations

import logging
import os
import re
import signal
import time

import pytest

from hostctl.policy.mlcc import SILENT_SLOTS, MlccControl
from hostctl.policy.switchclient import SwitchClient
from tests.integration.test_mlcc_switch import C, Clock, ctl, flow
from tests.integration.test_mlcc_switch import TOPO as ONE_SWITCH
from tests.integration.test_switchemu import SLOT_S, procs, wait_up  # noqa: F401 (procs: a fixture)

TWO_RACKS = """
[[switch]]
name = "t0"
parent = "a"
uplink_rate = "125mbit"
hosts = {count = 2, prefix = "h", first_addr = "10.79.0.1"}
host_rate = "125mbit"

[[switch]]
name = "t1"
parent = "a"
uplink_rate = "125mbit"
hosts = {count = 2, prefix = "g", first_addr = "10.79.1.1"}
host_rate = "125mbit"

[[switch]]
name = "a"
"""


class SkewedClock(Clock):
    """The wall clock plus ``skew`` seconds (a host whose NTP is off); step() as Clock's."""

    def __init__(self, skew: float):
        self.skew = skew
        super().__init__()

    def __call__(self) -> float:
        return time.time() + self.skew


@pytest.fixture
def one_switch(procs, tmp_path):  # noqa: F811 (procs: the fixture imported above)
    topo = tmp_path / "topo.toml"
    topo.write_text(ONE_SWITCH)
    ep = f"ipc://{tmp_path}/sw-faults.sock"
    p = procs.start("--bind", ep, "--topology", str(topo), "--log-level", "WARNING")
    wait_up(ep, p)
    return ep, p


def ticks(c: MlccControl, clock: Clock, fl, n: int) -> list[str]:
    modes = []
    for _ in range(n):
        clock.step()
        rates = c.tick(fl)
        assert all(r > 0 for r in rates.values())  # planned every slot, whatever the switch does
        modes.append(c.mode)
    return modes


def test_a_host_clock_the_switch_refuses_is_silence_with_the_offset_logged(one_switch, caplog):
    ep, _ = one_switch
    clock = SkewedClock(3.0)  # 50 slots ahead: every request refused with future_slot
    c = ctl(ep, clock)
    fl = [flow("10.77.0.2", "10.77.0.1", "ja", 1e6)]
    try:
        with caplog.at_level(logging.WARNING, logger="hostctl"):
            modes = ticks(c, clock, fl, SILENT_SLOTS + 2)
        # refused answers are silence: local mode after SILENT_SLOTS, as with a switch that is down
        assert modes == ["switch"] * (SILENT_SLOTS - 1) + ["local"] * 3
        assert c.fallbacks == 1 and c.schedule_of(fl[0].key)["links"] == ["nic"]
        st = c.status()
        assert st["switch_clock_offset_ms"][ep] == pytest.approx(-3000, abs=50)
        assert st["switch_silent_slots"][ep] == SILENT_SLOTS + 2
        assert c.errors["future_slot"] >= SILENT_SLOTS + 2
        said = [r.getMessage() for r in caplog.records if "refuses this host's slots" in r.getMessage()]
        assert len(said) == 1, said  # once, not every slot
        ms = float(re.search(r"clock is ([\d.]+) ms ahead of the switch's", said[0]).group(1))
        assert ms == pytest.approx(3000, abs=50) and "NTP" in said[0]

        clock.skew = 0.0  # NTP fixed it: the next answer brings switch mode back
        modes = ticks(c, clock, fl, 3)
        assert modes[-1] == "switch" and c.recoveries == 1
        assert abs(c.status()["switch_clock_offset_ms"][ep]) < 50
        assert c.status()["switch_silent_slots"][ep] == 0
        assert c.schedule_of(fl[0].key)["links"] == ["nic", "sw0>h0"]
    finally:
        c.close()


def test_a_stopped_switch_is_silence_and_its_late_answers_are_dropped(one_switch):
    ep, p = one_switch
    clock = Clock()
    c = ctl(ep, clock)
    fl = [flow("10.77.0.2", "10.77.0.1", "ja", 1e6)]
    try:
        assert ticks(c, clock, fl, 1) == ["switch"]
        os.kill(p.pid, signal.SIGSTOP)  # alive, connected, and answering nothing until SIGCONT
        try:
            c.fetch_timeout_s = c.publish_timeout_s = 0.03
            assert ticks(c, clock, fl, SILENT_SLOTS + 1)[-1] == "local"
        finally:
            os.kill(p.pid, signal.SIGCONT)
        late = c.switch.late_replies
        c.fetch_timeout_s = c.publish_timeout_s = 0.5
        for _ in range(20):
            if ticks(c, clock, fl, 1) == ["switch"]:
                break
        assert c.mode == "switch" and c.recoveries == 1
        # the requests it held while stopped were answered after their exchanges gave up: dropped
        assert c.switch.late_replies > late
    finally:
        c.close()


def test_losing_one_switch_of_several_affects_only_the_paths_through_it(procs, tmp_path):  # noqa: F811
    topo = tmp_path / "racks.toml"
    topo.write_text(TWO_RACKS)
    eps, ps = {}, {}
    for name in ("t0", "t1", "a"):  # one switchemu per switch, as on a fabric (docs/switchemu.md)
        eps[name] = f"ipc://{tmp_path}/{name}.sock"
        ps[name] = procs.start("--bind", eps[name], "--topology", str(topo), "--name", name, "--log-level", "WARNING")
        wait_up(eps[name], ps[name])
    clock = Clock()
    # as `hostctl start --switch A --switch B ...` builds it: every request to every switch
    c = MlccControl(C, SLOT_S, switch=SwitchClient(list(eps.values())), wall=clock, fetch_timeout_s=0.5,
                    publish_timeout_s=0.5)
    near = flow("10.79.0.1", "10.79.0.2", "ja", 1e6)  # h0 -> h1: through t0 only
    far = flow("10.79.0.1", "10.79.1.1", "jb", 1e6, port=5001)  # h0 -> g0: t0, a, t1
    try:
        for _ in range(20):  # (the sockets connect in the background)
            ticks(c, clock, [near, far], 1)
            if len(c.schedule_of(far.key)["links"]) == 4:
                break
        for _ in range(10):  # in path order, whichever switch answers first
            assert c.schedule_of(near.key)["links"] == ["nic", "t0>h1"]
            assert c.schedule_of(far.key)["links"] == ["nic", "t0>a", "a>t1", "t1>g0"]
            ticks(c, clock, [near, far], 1)

        os.kill(ps["t1"].pid, signal.SIGKILL)
        ps["t1"].wait(5)
        c.fetch_timeout_s = c.publish_timeout_s = 0.05
        modes = ticks(c, clock, [near, far], SILENT_SLOTS + 2)
        assert modes == ["switch"] * len(modes)  # t0 and a still answer
        sil = c.status()["switch_silent_slots"]
        assert sil[eps["t1"]] == SILENT_SLOTS + 2 and sil[eps["t0"]] == 0 and sil[eps["a"]] == 0
        assert c.schedule_of(near.key)["links"] == ["nic", "t0>h1"]  # untouched
        # the far flow keeps the links whose switches answer; t1's link is unknown while t1 is gone
        assert c.schedule_of(far.key)["links"] == ["nic", "t0>a", "a>t1"]
    finally:
        c.close()
