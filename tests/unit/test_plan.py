import pytest

from hostctl.core.plan import (
    BAND_MIN_RATE_BPS, CONTROL_CLASSID, DEFAULT_CLASSID, DEFAULT_PRIO, ROOT_CLASSID, allocate_slots, band_classid,
    build_classifier, build_tc_plan, burst_bytes, fmt_handle,
)
from hostctl.core.types import FlowKey, Job


def test_tc_plan_layout():
    p = build_tc_plan("eth0", 10**9, 6, 10**8, True)
    by = {c.classid: c for c in p.classes}
    assert by[ROOT_CLASSID].rate_bps == by[ROOT_CLASSID].ceil_bps == 10**9
    assert by[DEFAULT_CLASSID].prio == DEFAULT_PRIO and by[DEFAULT_CLASSID].rate_bps == 10**8
    for b in range(6):
        c = by[band_classid(b)]
        assert (c.prio, c.rate_bps, c.ceil_bps, c.parent) == (b, BAND_MIN_RATE_BPS, 10**9, ROOT_CLASSID)
    assert all(c.prio < DEFAULT_PRIO for c in p.classes if c.name.startswith("band"))
    assert fmt_handle(band_classid(0)) == "6863:20"
    d = p.to_dict()
    assert d["qdisc_handle"] == "6863:0" and len(d["classes"]) == 9
    ctl = by[CONTROL_CLASSID]
    assert (ctl.prio, ctl.rate_bps, ctl.ceil_bps, ctl.name) == (0, BAND_MIN_RATE_BPS, 10**9, "control")
    assert fmt_handle(CONTROL_CLASSID) == "6863:11"


def test_fifo_plan_has_no_bands_and_guarantees_fit():
    p = build_tc_plan("eth0", 10**8, 6, 10**7, False)
    assert [c.name for c in p.classes] == ["root", "default"] and not p.classify
    with pytest.raises(ValueError):
        build_tc_plan("eth0", 10**6, 6, 10**6, True)


def test_burst_covers_gso_and_one_ms():
    assert burst_bytes(100_000) >= 65536
    assert burst_bytes(10**10) == 10**10 // 8 // 1000


def _job(jid, port=None, flows=()):
    return Job(jid, "port", listen_ports=(port,) if port else (), flows=tuple(flows))


def test_classifier_entries_and_stable_slots():
    f = FlowKey("10.0.0.1", 40000, "10.0.0.2", 9000)
    jobs = [_job("a", 9000), _job("b", flows=[f])]
    t1 = build_classifier(jobs, {"a": 1, "b": 0})
    assert t1.ports == {9000: t1.slots["a"]} and t1.flows == {f: t1.slots["b"]}
    assert t1.slot_classid[t1.slots["a"]] == band_classid(1)
    # a new job does not move existing slots; a rotation only changes classids
    t2 = build_classifier(jobs + [_job("0first", 9100)], {"a": 0, "b": 1, "0first": 2}, t1.slots)
    assert t2.slots["a"] == t1.slots["a"] and t2.slots["b"] == t1.slots["b"]
    assert t2.ports[9000] == t1.ports[9000]


def test_unassigned_jobs_point_to_default_and_limits():
    t = build_classifier([_job("a", 9000)], {})
    assert t.slot_classid == {0: 0}
    flows = [FlowKey("10.0.0.1", 40000 + i, "10.0.0.2", 1) for i in range(5)]
    t = build_classifier([_job("a", flows=flows)], {"a": 0}, max_flows=3)
    assert len(t.flows) == 3 and t.dropped_flows == 2
    slots, dropped = allocate_slots(["a", "b", "c"], {}, 2)
    assert len(slots) == 2 and dropped == 1


def test_ingress_tree_mirrors_egress_at_the_ingress_rate():
    p = build_tc_plan("eth0", 10**9, 6, 10**8, True, ingress_rate_bps=9 * 10**8)
    assert p.ingress_rate_bps == 9 * 10**8
    eg, ing = {c.classid: c for c in p.classes}, {c.classid: c for c in p.ingress_classes}
    assert eg.keys() == ing.keys()
    for cid, c in ing.items():
        assert c.ceil_bps == 9 * 10**8 and (c.prio, c.parent, c.name) == (eg[cid].prio, eg[cid].parent, eg[cid].name)
    assert [c["name"] for c in p.to_dict()["ingress_classes"]] == [c.name for c in p.ingress_classes]
    assert build_tc_plan("eth0", 10**9, 6, 10**8, True).ingress_classes == ()


def test_fifo_has_no_ingress_bands_and_ingress_guarantees_fit():
    p = build_tc_plan("eth0", 10**9, 6, 10**8, False, ingress_rate_bps=9 * 10**8)
    assert p.ingress_rate_bps == 0 and p.ingress_classes == ()
    with pytest.raises(ValueError):
        build_tc_plan("eth0", 10**9, 6, 10**8, True, ingress_rate_bps=10**8)


def test_port_served_by_several_jobs_classifies_by_4_tuple():
    """Two containers serving port 9000 at their own addresses are two jobs: a port entry
    could not tell them apart, so their flows get 4-tuple entries and the port none."""
    fa, fb = FlowKey("10.1.0.2", 9000, "10.9.0.1", 40000), FlowKey("10.1.0.3", 9000, "10.9.0.1", 40001)
    jobs = [_job("ps:10.1.0.2:9000", 9000, [fa]), _job("ps:10.1.0.3:9000", 9000, [fb]), _job("c", 9100)]
    t = build_classifier(jobs, {"ps:10.1.0.2:9000": 0, "ps:10.1.0.3:9000": 1, "c": 2})
    assert t.ports == {9100: t.slots["c"]}
    assert t.flows == {fa: t.slots["ps:10.1.0.2:9000"], fb: t.slots["ps:10.1.0.3:9000"]}


def test_remote_endpoints_classify_a_workers_flows_new_and_natted():
    """A worker host's two jobs (connecting to PS 10.0.0.1:9400 and 10.0.0.2:9401): one remote-endpoint
    entry each; their flows need no 4-tuple entry, a new connection and a NATed one (other source
    address and port) match the endpoint; a host that is PS for 9400 itself keeps its port entry first."""
    a = Job("ps:10.0.0.1:9400", "port", flows=(FlowKey("10.0.0.5", 40000, "10.0.0.1", 9400),), role="client",
            remote_endpoints=(("10.0.0.1", 9400),))
    b = Job("ps:10.0.0.2:9401", "port", flows=(FlowKey("10.0.0.5", 40001, "10.0.0.2", 9401),), role="client",
            remote_endpoints=(("10.0.0.2", 9401),))
    ps = Job("ps:10.0.0.5:9400", "port", listen_ports=(9400,), flows=(FlowKey("10.0.0.5", 9400, "10.0.0.8", 5000),))
    t = build_classifier([a, b, ps], {a.job_id: 0, b.job_id: 1, ps.job_id: 2})
    sa, sb, sp = (t.slots[j.job_id] for j in (a, b, ps))
    assert t.remotes == {("10.0.0.1", 9400): sa, ("10.0.0.2", 9401): sb}
    assert t.flows == {} and t.ports == {9400: sp}
    assert t.lookup(a.flows[0]) == sa
    assert t.lookup(FlowKey("10.0.0.5", 40999, "10.0.0.1", 9400)) == sa  # a new connection
    assert t.lookup(FlowKey("192.168.1.9", 61000, "10.0.0.2", 9401)) == sb  # source rewritten by NAT
    assert t.lookup(FlowKey("10.0.0.5", 9400, "10.0.0.8", 5000)) == sp  # the local PS: by its port
    assert t.lookup(FlowKey("10.0.0.5", 40002, "10.0.0.3", 9400)) is None  # another PS: no job yet
    d = t.to_dict()
    assert d["remotes"] == {"10.0.0.1:9400": sa, "10.0.0.2:9401": sb} and d["dropped_remotes"] == 0


def test_remote_endpoint_of_an_earlier_job_keeps_4tuple_entries_of_another_job():
    # "a" holds the endpoint; a flow to the same endpoint claimed by "b" needs its 4-tuple entry
    f1, f2 = FlowKey("10.0.0.5", 40000, "10.0.0.1", 9400), FlowKey("10.0.0.5", 40001, "10.0.0.1", 9400)
    a = Job("a", "port", flows=(f1,), role="client", remote_endpoints=(("10.0.0.1", 9400),))
    b = Job("b", "pid", flows=(f2,), role="client")
    t = build_classifier([a, b], {"a": 0, "b": 1})
    assert t.flows == {f2: t.slots["b"]}
    assert t.lookup(f1) == t.slots["a"] and t.lookup(f2) == t.slots["b"]


def test_remote_endpoints_limit():
    jobs = [Job(f"j{i}", "port", remote_endpoints=((f"10.0.0.{i}", 9400),), role="client") for i in range(5)]
    t = build_classifier(jobs, {}, max_remotes=3)
    assert len(t.remotes) == 3 and t.dropped_remotes == 2
