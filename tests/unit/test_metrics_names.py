"""Prometheus names follow the conventions, checked on the exposition text parsed with
prometheus_client's own parser, for a status that exercises every metric family."""

from __future__ import annotations

import re

from prometheus_client.core import CollectorRegistry
from prometheus_client.exposition import generate_latest
from prometheus_client.parser import text_string_to_metric_families

from hostctl.core.hist import Histogram
from hostctl.metrics import StatusCollector

BAD_NAME = re.compile(r"(_bps|_ms|_p\d\d|_us)(_|$)")
EXPLODING_LABELS = {"flow", "slot", "pid", "port"}


def assert_conventions(text: str) -> dict:
    """Parse the exposition and check hostctl's naming rules; returns the families by name."""
    families = {f.name: f for f in text_string_to_metric_families(text)}
    assert families, "no metrics"
    for name, fam in families.items():
        assert name.startswith("hostctl_"), name
        assert not BAD_NAME.search(name), f"{name}: use base units (_seconds, _bytes, _bytes_per_second)"
        for s in fam.samples:
            assert not EXPLODING_LABELS & set(s.labels), f"{s.name}{s.labels}: per-flow/slot labels churn"
            if fam.type == "counter":
                assert s.name.endswith(("_total", "_created")), f"counter sample {s.name} must end in _total"
            if fam.type == "histogram":
                assert s.name.endswith(("_bucket", "_sum", "_count", "_created")), s.name
        if fam.type == "histogram":
            assert name.endswith("_seconds") or name.endswith("_bytes"), name
    info = families["hostctl_build_info"]
    assert [s.value for s in info.samples] == [1.0] and info.samples[0].labels["version"]
    return families


def _hist(*values: float) -> dict:
    h = Histogram()
    for v in values:
        h.observe(v)
    return h.to_dict()


def full_status() -> dict:
    flow = {"flow": "10.0.0.1:9000->10.0.0.2:40000", "job": "a", "target_bps": 8e7, "rate_bps": 7e7,
            "iterations": 3, "plan": {"schedule_Bps": [1e7, 2e7], "kept": 0.5, "role": "ps", "delta_Bps": 1000}}
    return {
        "version": "9.9.9",
        "jobs": [{"job_id": "a", "band": 0, "tx_bytes": 10, "rx_bytes": 5, "rate_bps": 1.0, "last_burst_bytes": 3},
                 {"job_id": "b", "band": None, "tx_bytes": 0, "rx_bytes": None, "rate_bps": 0.0,
                  "last_burst_bytes": 0}],
        "classes": [{"classid": "6863:20", "name": "band0", "bytes": 10, "drops": 0, "rate_bps": 1.0}],
        "ingress_classes": [{"classid": "6863:20", "name": "band0", "bytes": 5, "drops": 1, "rate_bps": 1.0}],
        "failopen_pkts": 0, "stats": {"rotations": 1, "reassignments": 2, "errors": 0, "slots": 4, "slot_overruns": 0,
                                           "mem_trimmed_kib": 3, "gc_max_ms": 12.5},
        "reloads": {"ok": 1, "refused": 2},
        "slot_decision_seconds": _hist(0.0004, 0.003, 0.2),
        "pacing": {
            "flows": [flow, {**flow, "flow": "10.0.0.1:9000->10.0.0.3:40001", "target_bps": None, "plan": None}],
            "jobs": {"a": {"flows": 2, "iterations": 3, "bytes_per_iter": 1e6, "iter_bytes": 0, "bytes_left": None,
                           "source": "estimate", "cap_bps": 8e8}},
            "burst_records": 7, "tick_ms_p90": 1.2, "kernel": {"flows_full": 0},
            "mlcc": {"mode": "switch", "fallbacks": 0, "recoveries": 0, "late_publishes": 0, "errors": {"busy": 1},
                     "negotiation_ms_p50": 1.0, "negotiation_ms_p90": 2.0,
                     "negotiation_seconds": _hist(0.001, 0.002),
                     "wire_versions": {"tcp://sw:5555": 2},
                     "deps": {"flows": 1, "notifications_sent": 1}},
        },
    }


def exposition(status: dict) -> str:
    reg = CollectorRegistry()
    reg.register(StatusCollector(lambda: status))
    return generate_latest(reg).decode()


def test_every_family_follows_the_conventions():
    fams = assert_conventions(exposition(full_status()))
    assert fams["hostctl_build_info"].samples[0].labels == {"version": "9.9.9"}
    for name in ("hostctl_job_tx_bytes", "hostctl_class_bytes", "hostctl_rotations", "hostctl_job_iterations",
                 "hostctl_config_reloads", "hostctl_mlcc_switch_errors"):
        assert fams[name].type == "counter", name
    assert fams["hostctl_slot_decision_seconds"].type == "histogram"
    assert fams["hostctl_mlcc_negotiation_seconds"].type == "histogram"
    assert fams["hostctl_memory_trimmed_bytes"].samples[0].value == 3 * 1024
    assert fams["hostctl_gc_pause_max_seconds"].samples[0].value == 0.0125


def test_slot_decision_histogram_buckets():
    fams = assert_conventions(exposition(full_status()))
    s = {(x.name, x.labels.get("le")): x.value for x in fams["hostctl_slot_decision_seconds"].samples}
    assert s[("hostctl_slot_decision_seconds_bucket", "0.0005")] == 1
    assert s[("hostctl_slot_decision_seconds_bucket", "0.005")] == 2
    assert s[("hostctl_slot_decision_seconds_bucket", "+Inf")] == 3
    assert s[("hostctl_slot_decision_seconds_count", None)] == 3
    assert abs(s[("hostctl_slot_decision_seconds_sum", None)] - 0.2034) < 1e-9


def test_flow_numbers_are_summed_per_job():
    fams = assert_conventions(exposition(full_status()))
    target = {s.labels["job"]: s.value for s in fams["hostctl_job_pacing_target_bytes_per_second"].samples}
    assert target == {"a": 1e7}  # the flow without a target adds nothing
    planned = {s.labels["job"]: s.value for s in fams["hostctl_mlcc_job_planned_bytes_per_second"].samples}
    assert planned == {"a": 1e7}
    cap = {s.labels["job"]: s.value for s in fams["hostctl_job_cap_bytes_per_second"].samples}
    assert cap == {"a": 1e8}


def test_build_info_without_a_daemon_version():
    st = full_status()
    del st["version"]
    fams = assert_conventions(exposition(st))
    assert fams["hostctl_build_info"].samples[0].labels == {"version": "unknown"}


def test_switchemu_families_follow_the_conventions():
    """switchemu's collector (its own prefix), with a booked link so the per-link booking families are there."""
    import msgpack

    from hostctl.core.topology import Topology
    from switchemu.server import StatsCollector, SwitchState

    topo = Topology.from_toml('[[switch]]\nname = "sw0"\nhosts = {count = 2, prefix = "h", first_addr = "10.9.0.1"}\n'
                              'host_rate = "8mbit"\n')
    s = SwitchState(topo, None, slot_s=0.06, horizon=4)
    now = 1.7e9
    frame = {"v": 2, "type": "update_schedule", "id": 1, "slot": int(now // 0.06),
             "flows": [{"flow": "a", "job": "j", "src": "h0", "dst": "h1", "seq": 1, "rates_Bps": [2e6] * 4}]}
    s.handle_frame(msgpack.packb(frame), now)
    s.handle_frame(msgpack.packb({"v": 1, "type": "status", "id": 2}), now + 0.2)
    reg = CollectorRegistry()
    reg.register(StatsCollector(s))
    families = {f.name: f for f in text_string_to_metric_families(generate_latest(reg).decode())}
    for name, fam in families.items():
        assert name.startswith("switchemu_"), name
        assert not BAD_NAME.search(name), name
        for smp in fam.samples:
            assert not EXPLODING_LABELS & set(smp.labels), smp
            if fam.type == "counter":
                assert smp.name.endswith(("_total", "_created")), smp.name
    peak = families["switchemu_link_booking_peak_ratio"]
    assert [(x.labels, x.value) for x in peak.samples] == [({"link": "sw0>h1"}, 2.0)]
    over = families["switchemu_link_overbooked_slots"]
    assert [(x.name, x.value) for x in over.samples] == [("switchemu_link_overbooked_slots_total", 3.0)]
