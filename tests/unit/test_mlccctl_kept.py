"""MlccControl in switch mode publishes a flow's schedule scaled by the share of its reservations
it has been using (the kept fraction), so that a flow that waits (a ring step, a worker at its
barrier) does not hold other hosts' flows back; the flow is still paced at its planned rate."""

from __future__ import annotations

import math

import numpy as np
import pytest

from hostctl.core import wire
from hostctl.core.mlcchost import KEPT_WEIGHT
from hostctl.core.types import FlowKey
from hostctl.mlccctl import FlowIn, MlccControl, flow_id
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


def _exposition(ml: dict, pc: dict) -> str:
    """The Prometheus text of the mlcc metrics for a status's mlcc and pacing parts."""
    from prometheus_client.core import CollectorRegistry
    from prometheus_client.exposition import generate_latest

    from hostctl.metrics import _mlcc_metrics

    class One:
        def collect(self):
            return list(_mlcc_metrics(ml, pc))

    reg = CollectorRegistry()
    reg.register(One())
    return generate_latest(reg).decode()


def test_kept_is_exported_per_job():
    ml = {"mode": "switch", "fallbacks": 0, "recoveries": 0, "errors": {}}
    pc = {"flows": [{"flow": "a", "job": "j", "plan": {"schedule_Bps": [1, 2], "kept": 0.25}},
                    {"flow": "b", "job": None, "plan": None}]}

    text = _exposition(ml, pc)
    assert 'hostctl_mlcc_job_kept_ratio{job="j"} 0.25' in text
    assert 'hostctl_mlcc_job_kept_ratio{job=""}' not in text  # a flow without a plan has no kept share
    assert 'hostctl_mlcc_job_planned_bytes_per_second{job="j"} 1.0' in text
    assert "flow=" not in text  # no per-flow series (ephemeral ports would churn them)
    assert "hostctl_mlcc_job_delta_bytes_per_second{" not in text and "hostctl_mlcc_dep_flows" not in text  # no roles
    assert "hostctl_mlcc_switch_wire_version" not in text


def test_wire_version_per_switch_is_exported():
    ml = {"mode": "switch", "fallbacks": 0, "recoveries": 0, "errors": {},
          "wire_versions": {"tcp://sw1:5555": 1, "tcp://sw2:5555": 2}}
    text = _exposition(ml, {"flows": []})
    assert 'hostctl_mlcc_switch_wire_version{endpoint="tcp://sw1:5555"} 1.0' in text
    assert 'hostctl_mlcc_switch_wire_version{endpoint="tcp://sw2:5555"} 2.0' in text


def test_algorithm2_counters_and_deltas_are_exported():
    ml = {"mode": "switch", "fallbacks": 0, "recoveries": 0, "errors": {},
          "deps": {"enabled": True, "flows": 2, "notifications_sent": 7, "notifications_received": 3,
                   "delta_flows": 5, "reduced_flows": 1, "progress_missing": 4}}
    pc = {"flows": [{"flow": "a", "job": "r", "plan": {"schedule_Bps": [1], "kept": 1.0, "role": "ring",
                                                       "delta_Bps": 1000, "reduced_bytes": 0}}]}

    text = _exposition(ml, pc)
    assert 'hostctl_mlcc_job_delta_bytes_per_second{job="r"} 1000.0' in text
    assert "hostctl_mlcc_dep_flows 2.0" in text and "hostctl_mlcc_notifications_sent_total 7.0" in text
    assert "hostctl_mlcc_progress_missing_total 4.0" in text


@pytest.mark.parametrize("mode", ["switch", "local"])
def test_human_status_shows_kept_in_switch_mode(mode):
    import io

    from rich.console import Console

    from hostctl.cli import _print_pacing

    flow = {"flow": "10.0.0.1:5000->10.0.0.2:9000", "job": "j", "target_bps": 8e6, "applied_bps": 8e6,
            "rate_bps": 4e6, "max_rate_bps": 8e6, "iter_bytes": 1000, "iterations": 3, "bytes_per_iter": 5000.0,
            "bytes_left": 4000.0, "srtt_us": 150,
            "plan": {"schedule_Bps": [1e6, 5e5], "kind": "active", "wave": 0, "links": ["nic"], "kept": 0.25}}
    ml = {"mode": mode, "switch": True, "K": 2, "negotiation_ms_p50": 0.3, "negotiation_ms_p90": 0.5,
          "fallbacks": 0, "recoveries": 0, "silent_slots": 0, "errors": {}, "nic_load_Bps": [1e6, 5e5]}
    pc = {"flows": [flow], "mlcc": ml, "jobs": {}, "slot_s": 0.06, "kernel": {}, "tick_ms_p90": 1.0}
    out = io.StringIO()
    _print_pacing(Console(file=out, width=250), pc, {"slots": 10, "slot_overruns": 0})
    text = out.getvalue()
    assert "8 4  active w0" in text
    assert ("kept 0.25" in text) == (mode == "switch")
    assert "older wire version" not in text


def test_human_status_names_switches_on_an_older_wire_version():
    import io

    from rich.console import Console

    from hostctl.cli import _print_pacing

    ml = {"mode": "switch", "switch": True, "K": 2, "negotiation_ms_p50": 0.3, "negotiation_ms_p90": 0.5,
          "fallbacks": 0, "recoveries": 0, "silent_slots": 0, "errors": {}, "nic_load_Bps": [0, 0],
          "wire_versions": {"tcp://sw1:5555": 1, "tcp://sw2:5555": wire.WIRE_VERSION}}
    pc = {"flows": [], "mlcc": ml, "jobs": {}, "slot_s": 0.06, "kernel": {}, "tick_ms_p90": 1.0}
    out = io.StringIO()
    _print_pacing(Console(file=out, width=250), pc, {"slots": 10, "slot_overruns": 0})
    assert "older wire version (upgrade switchemu): tcp://sw1:5555\n" in out.getvalue()


def test_human_status_shows_roles_and_algorithm2_counters():
    import io

    from rich.console import Console

    from hostctl.cli import _print_pacing

    flow = {"flow": "10.0.0.1:7000->10.0.0.2:40000", "job": "r", "target_bps": 8e6, "applied_bps": 8e6,
            "rate_bps": 4e6, "max_rate_bps": 8e6, "iter_bytes": 1000, "iterations": 3, "bytes_per_iter": 5000.0,
            "bytes_left": 4000.0, "srtt_us": 150,
            "plan": {"schedule_Bps": [3e6, 0], "kind": "active", "wave": 0, "links": ["nic"], "kept": 1.0,
                     "role": "ring", "delta_Bps": 1e6, "reduced_bytes": 0}}
    ml = {"mode": "switch", "switch": True, "K": 2, "negotiation_ms_p50": 0.3, "negotiation_ms_p90": 0.5,
          "fallbacks": 0, "recoveries": 0, "silent_slots": 0, "errors": {}, "nic_load_Bps": [3e6, 0],
          "deps": {"enabled": True, "flows": 1, "notifications_sent": 4, "notifications_received": 2,
                   "delta_flows": 3, "reduced_flows": 0, "progress_missing": 1}}
    pc = {"flows": [flow], "mlcc": ml, "jobs": {}, "slot_s": 0.06, "kernel": {}, "tick_ms_p90": 1.0}
    out = io.StringIO()
    _print_pacing(Console(file=out, width=250), pc, {"slots": 10, "slot_overruns": 0})
    text = out.getvalue()
    assert "active w0 kept 1.00 ring +8" in text
    assert "Algorithm 2: 1 flow(s) with a role; slots raised 3, held 0, without a peer's progress 1" in text
