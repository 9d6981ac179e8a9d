"""MlccControl in switch mode publishes a flow's schedule scaled by the share of its reservations
it has been using (the kept fraction), so that a flow that waits (a ring step, a worker at its
barrier) does not hold other hosts' flows back; the flow is still paced at its planned rate."""

from __future__ import annotations

import math

import numpy as np
import pytest

from hostctl.core.types import FlowKey
from hostctl.mlccctl import KEPT_WEIGHT, FlowIn, MlccControl, flow_id
from hostctl.switchclient import ExchangeResult

C = 1_000_000_000 // 8  # NIC, bytes/s
SLOT = 0.06


class FakeSwitch:
    """Answers every exchange (no load from others) and records the published schedules."""

    def __init__(self) -> None:
        self.published: list[dict[str, tuple[float, ...]]] = []

    def exchange(self, slot, *, updates=(), fetches=(), timeout_s=0.02, **_kw) -> ExchangeResult:
        if updates:
            self.published.append({u.flow_id: u.rates_Bps for u in updates})
        return ExchangeResult(slot=slot, latency_s={"fake": 1e-4})


def _ctl() -> tuple[MlccControl, FakeSwitch, list[float]]:
    t = [1_000_000.0 * SLOT]
    sw = FakeSwitch()
    return MlccControl(C, SLOT, switch=sw, wall=lambda: t[0]), sw, t


def test_a_flow_that_does_not_use_its_reservations_publishes_less():
    ctl, sw, t = _ctl()
    busy, idle = FlowKey("10.0.0.1", 5000, "10.0.0.2", 9000), FlowKey("10.0.0.1", 5001, "10.0.0.3", 9000)
    G = 8 * C * SLOT  # more than one slot each: both plan ahead
    rate = {busy: math.nan, idle: math.nan}
    for _ in range(8):
        ctl.tick([FlowIn(k, j, G, C, 0.0, True, rate[k]) for k, j in ((busy, "ja"), (idle, "jb"))])
        t[0] += SLOT
        rate[busy] = ctl.schedule_of(busy)["schedule_Bps"][0]  # it sends what it was given
        rate[idle] = 0.0  # it waits: nothing measured although the plan gave it a share
    plan = {k: np.array(ctl.schedule_of(k)["schedule_Bps"], dtype=float) for k in (busy, idle)}
    pub = {k: np.array(sw.published[-1][flow_id(k)]) for k in (busy, idle)}
    assert plan[idle][1:].sum() > 0 and plan[busy][1:].sum() > 0
    assert pub[busy] == pytest.approx(plan[busy], rel=1e-6, abs=1.0)  # used: published as planned
    assert plan[idle][0] > 0  # it may still send now (the pacer gets the plan's rate)
    assert pub[idle].sum() <= (1 - KEPT_WEIGHT) ** 6 * plan[idle].sum() + 1.0  # but publishes little
    assert ctl.schedule_of(idle)["kept"] < 0.05 and ctl.schedule_of(busy)["kept"] == pytest.approx(1.0)
    # this host's own load table (subtracted from the switches' feedback) is what it published
    assert ctl.prev_rates.sum() == pytest.approx(sum(p.sum() for p in pub.values()), rel=1e-6)


def test_without_measurements_nothing_is_discounted():
    ctl, sw, t = _ctl()
    k = FlowKey("10.0.0.1", 5000, "10.0.0.2", 9000)
    for _ in range(4):
        ctl.tick([FlowIn(k, "ja", 8 * C * SLOT, C, 0.0)])  # rate_Bps: nan (not measured)
        t[0] += SLOT
    assert ctl.schedule_of(k)["kept"] == 1.0
    assert np.array(sw.published[-1][flow_id(k)]) == pytest.approx(ctl.schedule_of(k)["schedule_Bps"], abs=1.0)


def test_local_mode_plans_are_not_discounted():
    t = [1_000_000.0 * SLOT]
    ctl = MlccControl(C, SLOT, wall=lambda: t[0])  # no switch: local mode
    k = FlowKey("10.0.0.1", 5000, "10.0.0.2", 9000)
    for _ in range(4):
        ctl.tick([FlowIn(k, "ja", 8 * C * SLOT, C, 0.0, True, 0.0)])
        t[0] += SLOT
    assert ctl.schedule_of(k)["kept"] == 1.0  # not tracked in local mode
    assert ctl.prev_rates[0] == pytest.approx(ctl.schedule_of(k)["schedule_Bps"], abs=1.0)
