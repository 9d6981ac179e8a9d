"""The pacing side of the daemon (policy cap) with the fake datapath and fake clocks:
selectors, the cap split, the slot loop's bookkeeping, hints and status."""

import pytest

from hostctl.config import Config
from hostctl.core.pace import WATCH_SLOT, cap_rates, selectors
from hostctl.core.plan import build_tc_plan
from hostctl.core.types import FlowKey, Job, JobSpec
from hostctl.daemon import Daemon
from hostctl.datapath import UNLIMITED_BPS_BYTES
from hostctl.datapath.fake import FakeDatapath

from tests.unit.test_daemon import Clock, ScriptedDiscovery

PS = "10.0.0.1"


def flow(lport, rport=40000, raddr="10.0.0.2"):
    return FlowKey(PS, lport, raddr, rport)


def make(caps=None, cap_bps=80_000_000, jobs=None):
    specs = tuple(JobSpec(name=n, ports=(p,), cap_bps=(caps or {}).get(n)) for n, p in (("a", 9000), ("b", 9001)))
    cfg = Config(policy="cap", cap_bps=cap_bps, jobs=specs).validate()
    plan = build_tc_plan("eth0", 10**9, 6, 10**8, False)
    dp = FakeDatapath()
    jobs = jobs or [Job("a", "config", listen_ports=(9000,)), Job("b", "config", listen_ports=(9001,))]
    mono = Clock(100.0)
    d = Daemon(cfg, plan, dp, ScriptedDiscovery(jobs), wall=Clock(1000.0), mono=mono)
    dp.setup(plan)
    d.scan()
    return d, dp, mono


def tick(d, mono, dt=0.06):
    mono.t += dt
    d.pace_tick(mono.t)


def test_selectors_select_served_ports_and_new_flows_get_the_job_share():
    d, dp, mono = make()
    tick(d, mono)
    assert dp.pace_table.ports == {(9000, "local"): d.pace.slots["a"], (9001, "local"): d.pace.slots["b"],
                                   (9000, "remote"): WATCH_SLOT, (9001, "remote"): WATCH_SLOT}
    assert dp.connect(flow(9000))
    assert not dp.connect(FlowKey(PS, 22, "10.0.0.9", 5555))  # not a DL flow: never tracked
    # before the daemon saw the flow, the job-wide rate applies: the whole cap (one flow)
    assert dp.kflows[flow(9000)].rate_Bps == 10_000_000
    tick(d, mono)
    assert dp.pace_table.flow_rates == {flow(9000): 10_000_000}


def test_cap_is_split_over_active_flows_only():
    d, dp, mono = make()
    tick(d, mono)
    f1, f2, f3 = flow(9000, 40001), flow(9000, 40002), flow(9000, 40003)
    for f in (f1, f2, f3):
        dp.connect(f)
    tick(d, mono)  # first sight: the counters' baseline
    ns = int(mono.t * 1e9)
    dp.transfer(f1, 600_000, ns, ns + 50_000_000)
    dp.transfer(f2, 600_000, ns, ns + 50_000_000)
    tick(d, mono)
    rates = dp.pace_table.flow_rates
    assert rates[f1] == rates[f2] == 5_000_000  # 80 Mbit/s over the two active flows
    assert rates[f3] == 5_000_000  # the idle one gets a share too, so waking up is paced at once
    assert dp.kflows[f3].rate_Bps == 5_000_000
    # after the 4-slot window without traffic, f2 no longer counts as active
    ns = int(mono.t * 1e9)
    for _ in range(5):
        ns = int(mono.t * 1e9)
        dp.transfer(f1, 300_000, ns, ns + 50_000_000)
        tick(d, mono)
    assert dp.pace_table.flow_rates[f1] == 10_000_000


def test_per_job_cap_overrides_the_default():
    d, dp, mono = make(caps={"b": 8_000_000})
    tick(d, mono)
    slots = d.pace.slots
    assert dp.pace_table.slot_rates == {slots["a"]: 10_000_000, slots["b"]: 1_000_000}


def test_closed_flows_are_forgotten_after_their_last_read():
    d, dp, mono = make()
    tick(d, mono)
    f = flow(9000)
    dp.connect(f)
    tick(d, mono)
    dp.close_flow(f)
    tick(d, mono)
    assert f not in dp.kflows
    assert f not in dp.pace_table.flow_rates


def test_status_lists_flows_with_target_applied_and_measured_rates():
    d, dp, mono = make()
    tick(d, mono)
    f = flow(9000)
    dp.connect(f)
    tick(d, mono)
    ns = int(mono.t * 1e9)
    dp.transfer(f, 600_000, ns, ns + 60_000_000)
    tick(d, mono)
    d.refresh_status()
    st = d.status(max_age_s=1e9)
    assert st["pacing"]["burst_records"] == 1  # the transfer's record, read in the last slot
    pc = st["pacing"]
    (row,) = pc["flows"]
    assert row["job"] == "a" and row["target_bps"] == 80_000_000 and row["applied_bps"] == 80_000_000
    assert row["max_rate_bps"] == pytest.approx(600_000 * 8 / 0.06)
    assert pc["jobs"]["a"]["cap_bps"] == 80_000_000
    assert st["stats"]["slots"] == 3


def test_hint_validation_and_queueing():
    d, dp, mono = make()
    with pytest.raises(ValueError, match="no job 'zz'"):
        d.hint("zz", bytes_per_iter=10)
    with pytest.raises(ValueError, match="positive integer"):
        d.hint("a", bytes_per_iter=-1)
    with pytest.raises(ValueError, match="clocks"):
        d.hint("a", iteration_start=0.0)
    with pytest.raises(ValueError, match="give bytes_per_iter"):
        d.hint("a")
    d.hint("a", bytes_per_iter=1_000_000, iteration_start=999.5)  # wall 1000 -> 0.5 s ago
    assert d.pace._hints == [("a", 1_000_000, pytest.approx(99.5))]
    tick(d, mono)
    assert d.pace._hints == []
    assert d.pace.monitor.jobs().get("a") is None or d.pace.monitor.jobs()["a"].source == "hint"


def test_teardown_releases_every_flow():
    d, dp, mono = make()
    tick(d, mono)
    dp.connect(flow(9000))
    tick(d, mono)
    assert dp.kflows[flow(9000)].rate_Bps != UNLIMITED_BPS_BYTES
    dp.teardown()
    assert dp.kflows[flow(9000)].rate_Bps == UNLIMITED_BPS_BYTES


def test_cap_rates_pure():
    a, b = flow(1), flow(2)
    rates, jobs = cap_rates({"j": 1000}, {"j": [a, b]}, {a})
    assert rates == {a: 1000, b: 1000} and jobs == {"j": 1000}
    rates, jobs = cap_rates({"j": 1000}, {"j": [a, b]}, {a, b})
    assert rates == {a: 500, b: 500}
    assert cap_rates({"j": 1000}, {}, set()) == ({}, {"j": 1000})


def test_cap_policy_needs_a_rate():
    from hostctl.errors import ConfigError

    with pytest.raises(ConfigError, match="--cap"):
        Config(policy="cap", jobs=(JobSpec(ports=(1,)),)).validate()
    with pytest.raises(ConfigError, match="outside what TCP pacing"):
        Config(policy="cap", cap_bps=10, jobs=(JobSpec(ports=(1,)),)).validate()


def test_pacing_metrics_are_exported():
    from prometheus_client.core import CollectorRegistry
    from prometheus_client.exposition import generate_latest

    from hostctl.metrics import StatusCollector

    d, dp, mono = make()
    tick(d, mono)
    dp.connect(flow(9000))
    tick(d, mono)
    d.refresh_status()
    reg = CollectorRegistry()
    reg.register(StatusCollector(lambda: d.status(max_age_s=1e9)))
    text = generate_latest(reg).decode()
    assert 'hostctl_job_pacing_target_bytes_per_second{job="a"} 1e+07' in text and "flow=" not in text
    assert 'hostctl_slot_decision_seconds_count 2.0' in text and 'hostctl_slot_decision_seconds_bucket{le="+Inf"} 2.0' in text
    assert "hostctl_slots_total 2.0" in text and "hostctl_pacing_flows_not_tracked_total 0.0" in text
    assert "hostctl_pacing_burst_records_total 0.0" in text


def test_selectors_never_exceed_the_map_sizes():
    from hostctl.core.pace import selectors

    jobs = [Job(f"j{i}", "pid", flows=tuple(FlowKey(PS, 30000 + k, "10.0.0.2", 9000) for k in range(10 * i, 10 * i + 10)),
                listen_ports=(8000 + i,)) for i in range(5)]
    ports, flows, _ = selectors(jobs, {f"j{i}": i for i in range(5)}, max_flows=25, max_ports=3)
    assert len(flows) == 25 and len(ports) == 3
    assert set(flows.values()) == {0, 1, 2}



def test_selectors_of_a_port_served_by_several_jobs_are_4_tuples():
    from hostctl.core.types import FlowKey, Job

    fa, fb = FlowKey("10.1.0.2", 9000, "10.9.0.1", 40000), FlowKey("10.1.0.3", 9000, "10.9.0.1", 40001)
    jobs = [Job("a", "port", listen_ports=(9000,), flows=(fa,)), Job("b", "port", listen_ports=(9000,), flows=(fb,)),
            Job("c", "port", listen_ports=(9100,))]
    ports, flows, remotes = selectors(jobs, {"a": 0, "b": 1, "c": 2})
    assert ports == {(9100, "local"): 2} and flows == {fa: 0, fb: 1} and remotes == {}


def test_a_worker_jobs_flows_are_selected_by_remote_endpoint_from_connection_time():
    """A worker host under `cap` with --ports 9000,9001: its job (found from its first connection to
    the PS 10.0.0.7:9000) gets a remote-endpoint selector, so a new connection to that PS is paced
    from its ESTABLISHED, with no 4-tuple selector; a connection to another PS's 9000 is only watched
    (no job yet), and one to an unlisted port is left alone."""
    first = FlowKey(PS, 40000, "10.0.0.7", 9000)
    worker = Job("ps:10.0.0.7:9000", "port", flows=(first,), role="client", remote_endpoints=(("10.0.0.7", 9000),))
    d, dp, mono = make(jobs=[worker])
    tick(d, mono)
    slot = d.pace.slots[worker.job_id]
    assert dp.pace_table.remotes == {("10.0.0.7", 9000): slot}
    assert dp.pace_table.flows == {}  # the endpoint selects them
    assert dp.pace_table.ports == {(p, side): WATCH_SLOT for p in (9000, 9001) for side in ("local", "remote")}
    new = FlowKey(PS, 40001, "10.0.0.7", 9000)
    assert dp.connect(new) and dp.kflows[new].slot == slot
    assert dp.kflows[new].rate_Bps == 10_000_000  # the job's cap from the first callback
    assert not dp.connect(FlowKey(PS, 40002, "10.0.0.8", 9000))  # another PS: watched, not selected
    assert not dp.connect(FlowKey(PS, 40003, "10.0.0.7", 22))
    # a local port that happens to be a watched spec port does not hide the endpoint's selector
    odd = FlowKey(PS, 9001, "10.0.0.7", 9000)
    assert dp.connect(odd) and dp.kflows[odd].slot == slot
    assert d.pace.table.to_dict()["remotes"] == [{"remote": "10.0.0.7:9000", "slot": slot}]
