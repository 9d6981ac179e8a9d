"""What MlccControl exports: the mlcc metrics (per job, no per-flow series) and the human status."""

from __future__ import annotations

import pytest

from hostctl.core import wire

C = 1_000_000_000 // 8  # NIC, bytes/s
SLOT = 0.06


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


def test_planned_and_held_are_exported_per_job():
    ml = {"mode": "switch", "fallbacks": 0, "recoveries": 0, "errors": {}}
    pc = {"flows": [{"flow": "a", "job": "j", "plan": {"schedule_Bps": [1, 2]}},
                    {"flow": "b", "job": None, "plan": None}]}

    text = _exposition(ml, pc)
    assert 'hostctl_mlcc_job_planned_bytes_per_second{job="j"} 1.0' in text
    assert "hostctl_mlcc_job_held_flows{" not in text  # no roles: nothing can be held
    assert "flow=" not in text  # no per-flow series (ephemeral ports would churn them)
    assert "hostctl_mlcc_job_delta_bytes_per_second{" not in text and "hostctl_mlcc_dep_flows" not in text  # no roles
    assert "hostctl_mlcc_switch_wire_version" not in text


def test_wire_version_per_switch_is_exported():
    ml = {"mode": "switch", "fallbacks": 0, "recoveries": 0, "errors": {},
          "wire_versions": {"tcp://sw1:5555": 1, "tcp://sw2:5555": 2}}
    text = _exposition(ml, {"flows": []})
    assert 'hostctl_mlcc_switch_wire_version{endpoint="tcp://sw1:5555"} 1.0' in text
    assert 'hostctl_mlcc_switch_wire_version{endpoint="tcp://sw2:5555"} 2.0' in text


def test_switch_clock_offsets_and_silence_are_exported_per_endpoint():
    ml = {"mode": "switch", "fallbacks": 0, "recoveries": 0, "errors": {"future_slot": 4},
          "switch_clock_offset_ms": {"tcp://sw1:5555": -3000.5, "tcp://sw2:5555": 0.25},
          "switch_silent_slots": {"tcp://sw1:5555": 4, "tcp://sw2:5555": 0}}
    text = _exposition(ml, {"flows": []})
    assert 'hostctl_mlcc_switch_clock_offset_seconds{endpoint="tcp://sw1:5555"} -3.0005' in text
    assert 'hostctl_mlcc_switch_clock_offset_seconds{endpoint="tcp://sw2:5555"} 0.00025' in text
    assert 'hostctl_mlcc_switch_silent_slots{endpoint="tcp://sw1:5555"} 4.0' in text
    assert 'hostctl_mlcc_switch_errors_total{code="future_slot"} 4.0' in text
    assert "clock_offset" not in _exposition({"mode": "local", "fallbacks": 0, "recoveries": 0, "errors": {}},
                                             {"flows": []})


def test_algorithm2_counters_and_deltas_are_exported():
    ml = {"mode": "switch", "fallbacks": 0, "recoveries": 0, "errors": {},
          "deps": {"enabled": True, "flows": 2, "notifications_sent": 7, "notifications_received": 3,
                   "delta_flows": 5, "reduced_flows": 1, "progress_missing": 4}}
    pc = {"flows": [{"flow": "a", "job": "r", "plan": {"schedule_Bps": [1], "role": "ring",
                                                       "delta_Bps": 1000, "reduced_bytes": 0, "held": True}},
                    {"flow": "b", "job": "r", "plan": {"schedule_Bps": [1], "role": "ring",
                                                       "delta_Bps": 0, "reduced_bytes": 0, "held": False}}]}

    text = _exposition(ml, pc)
    assert 'hostctl_mlcc_job_delta_bytes_per_second{job="r"} 1000.0' in text
    assert 'hostctl_mlcc_job_held_flows{job="r"} 1.0' in text
    assert "hostctl_mlcc_dep_flows 2.0" in text and "hostctl_mlcc_notifications_sent_total 7.0" in text
    assert "hostctl_mlcc_progress_missing_total 4.0" in text


@pytest.mark.parametrize("mode", ["switch", "local"])
def test_human_status_shows_the_plan(mode):
    import io

    from rich.console import Console

    from hostctl.cli import _print_pacing

    flow = {"flow": "10.0.0.1:5000->10.0.0.2:9000", "job": "j", "target_bps": 8e6, "applied_bps": 8e6,
            "rate_bps": 4e6, "max_rate_bps": 8e6, "iter_bytes": 1000, "iterations": 3, "bytes_per_iter": 5000.0,
            "bytes_left": 4000.0, "srtt_us": 150,
            "plan": {"schedule_Bps": [1e6, 5e5], "kind": "active", "wave": 0, "links": ["nic"]}}
    ml = {"mode": mode, "switch": True, "K": 2, "negotiation_ms_p50": 0.3, "negotiation_ms_p90": 0.5,
          "fallbacks": 0, "recoveries": 0, "silent_slots": 0, "errors": {}, "nic_load_Bps": [1e6, 5e5]}
    pc = {"flows": [flow], "mlcc": ml, "jobs": {}, "slot_s": 0.06, "kernel": {}, "tick_ms_p90": 1.0}
    out = io.StringIO()
    _print_pacing(Console(file=out, width=250), pc, {"slots": 10, "slot_overruns": 0})
    text = out.getvalue()
    assert "8 4  active w0" in text
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
    assert "switches:" not in out.getvalue()  # no clock measured, none silent: nothing to say

    ml.update(switch_clock_offset_ms={"tcp://sw1:5555": -3000.04, "tcp://sw2:5555": 0.3},
              switch_silent_slots={"tcp://sw1:5555": 7, "tcp://sw2:5555": 0})
    out = io.StringIO()
    _print_pacing(Console(file=out, width=250), pc, {"slots": 10, "slot_overruns": 0})
    assert "switches: tcp://sw1:5555 clock -3000.0 ms, silent 7 slots; tcp://sw2:5555 clock +0.3 ms\n" in out.getvalue()


def test_human_status_shows_roles_and_algorithm2_counters():
    import io

    from rich.console import Console

    from hostctl.cli import _print_pacing

    flow = {"flow": "10.0.0.1:7000->10.0.0.2:40000", "job": "r", "target_bps": 8e6, "applied_bps": 8e6,
            "rate_bps": 4e6, "max_rate_bps": 8e6, "iter_bytes": 1000, "iterations": 3, "bytes_per_iter": 5000.0,
            "bytes_left": 4000.0, "srtt_us": 150,
            "plan": {"schedule_Bps": [3e6, 0], "kind": "active", "wave": 0, "links": ["nic"],
                     "role": "ring", "delta_Bps": 1e6, "reduced_bytes": 0, "held": True}}
    ml = {"mode": "switch", "switch": True, "K": 2, "negotiation_ms_p50": 0.3, "negotiation_ms_p90": 0.5,
          "fallbacks": 0, "recoveries": 0, "silent_slots": 0, "errors": {}, "nic_load_Bps": [3e6, 0],
          "deps": {"enabled": True, "flows": 1, "notifications_sent": 4, "notifications_received": 2,
                   "delta_flows": 3, "reduced_flows": 0, "progress_missing": 1}}
    pc = {"flows": [flow], "mlcc": ml, "jobs": {}, "slot_s": 0.06, "kernel": {}, "tick_ms_p90": 1.0}
    out = io.StringIO()
    _print_pacing(Console(file=out, width=250), pc, {"slots": 10, "slot_overruns": 0})
    text = out.getvalue()
    assert "active w0 ring +8 held" in text
    assert "Algorithm 2: 1 flow(s) with a role; slots raised 3, held 0, without a peer's progress 1" in text
