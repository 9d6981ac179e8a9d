"""Algorithm 2's roles and progress names (hostctl/core/deps.py): the name a sender reports its
progress under is the name its dependent peer asks for, on a ring and around a parameter server,
built from each host's own view of its sockets."""

from __future__ import annotations

import math

import pytest

from hostctl.core.deps import (
    NO_DEP, Dep, JobComm, ceilings, flow_deps, flow_name, ps_name, references, reports, ring_name,
)
from hostctl.core.mlcc import Role
from hostctl.core.types import FlowKey

RING = {"r": JobComm("ring", frozenset({7000}), 3)}


def ring_host(i: int, n: int = 3) -> list[tuple[FlowKey, str]]:
    """Rank i of a ring of n on host 10.0.0.(i+1): it listens on 7000, the next rank connected to
    it from port 40000 + i + 1; its own connection to the previous rank is 40000 + i -> prev:7000."""
    me, nxt, prev = f"10.0.0.{i + 1}", f"10.0.0.{(i + 1) % n + 1}", f"10.0.0.{(i - 1) % n + 1}"
    return [(FlowKey(me, 7000, nxt, 40000 + (i + 1) % n), "r"),  # sends to the successor
            (FlowKey(me, 40000 + i, prev, 7000), "r")]  # receives from the predecessor (only ACKs out)


def test_ring_roles_and_names_chain_around_the_ring():
    hosts = [flow_deps(ring_host(i), RING) for i in range(3)]
    for i, deps in enumerate(hosts):
        send, recv = deps
        assert send.role == Role.RING and recv == NO_DEP
        pred = hosts[(i - 1) % 3][0]
        assert send.query == (pred.report,)  # asks for exactly what its predecessor reports
        assert send.report == ring_name("r", f"10.0.0.{(i + 1) % 3 + 1}")
        assert send.notify_to == f"10.0.0.{(i + 1) % 3 + 1}"


def test_ps_roles_and_names_meet_at_the_ps():
    ps, w1, w2 = "10.0.1.1", "10.0.1.2", "10.0.1.3"
    comm = {"p": JobComm("ps", frozenset({9000}), None)}
    at_ps = flow_deps([(FlowKey(ps, 9000, w1, 50001), "p"), (FlowKey(ps, 9000, w2, 50002), "p")], comm)
    at_w1 = flow_deps([(FlowKey(w1, 50001, ps, 9000), "p")], {"p": JobComm("ps", frozenset(), None)})
    at_w2 = flow_deps([(FlowKey(w2, 50002, ps, 9000), "p")], {"p": JobComm("ps", frozenset(), None)})
    assert [d.role for d in at_ps] == [Role.BROADCAST] * 2
    assert at_w1[0].role == at_w2[0].role == Role.AGGREGATION
    # the PS asks for every worker's aggregation flow (F_a^min) and reports F_b^max under one name
    assert at_ps[0].query == at_ps[1].query == tuple(sorted([at_w1[0].report, at_w2[0].report]))
    assert at_ps[0].report == at_ps[1].report == ps_name(ps, 9000) == at_w1[0].query[0] == at_w2[0].query[0]
    assert at_w1[0].notify_to == ps and at_ps[0].notify_to == ""  # broadcasts notify nobody (spec 2.8.3)


def test_no_comm_no_role_and_other_jobs_are_apart():
    k = FlowKey("10.0.0.1", 7000, "10.0.0.2", 40001)
    assert flow_deps([(k, "x")], RING) == [NO_DEP]  # job without a comm entry
    assert flow_deps([(k, "r")], {"r": JobComm(None, frozenset({7000}))}) == [NO_DEP]
    # two PS jobs on one host: each broadcast waits only for its own job's workers
    comm = {"a": JobComm("ps", frozenset({9000})), "b": JobComm("ps", frozenset({9001}))}
    d = flow_deps([(FlowKey("h", 9000, "w1", 1), "a"), (FlowKey("h", 9001, "w1", 2), "b")], comm)
    assert d[0].query == (flow_name(FlowKey("w1", 1, "h", 9000)),)
    assert d[1].query == (flow_name(FlowKey("w1", 2, "h", 9001)),)


def test_references_take_the_minimum_and_need_every_name():
    deps = [Dep(int(Role.BROADCAST), ("a", "b")), Dep(int(Role.RING), ("c",)), NO_DEP, Dep(int(Role.RING), ("z",))]
    ref = references(deps, {"a": 5.0, "b": 3.0, "c": 7.0})
    assert ref[:2] == [3.0, 7.0] and math.isnan(ref[2]) and math.isnan(ref[3])
    assert math.isnan(references(deps[:1], {"a": 5.0})[0])  # a worker not heard from: no reference


def test_ceilings_are_the_smallest_notification_among_the_query_names():
    deps = [Dep(int(Role.BROADCAST), ("a", "b")), Dep(int(Role.RING), ("c",))]
    assert ceilings(deps, {"a": 9.0, "b": 4.0}) == [4.0, math.inf]
    assert ceilings(deps, {}) == [math.inf, math.inf]


def test_reports_carry_the_largest_f_per_name():
    deps = [Dep(int(Role.BROADCAST), (), "ps:h:9000"), Dep(int(Role.BROADCAST), (), "ps:h:9000"),
            Dep(int(Role.AGGREGATION), (), "w>h"), NO_DEP]
    assert reports(deps, [3.0, 8.0, 2.0, 99.0]) == {"ps:h:9000": 8.0, "w>h": 2.0}
    assert reports(deps[2:3], [math.nan]) == {}  # unknown F is not reported


@pytest.mark.parametrize("key", [FlowKey("10.0.0.1", 1, "10.0.0.2", 2), FlowKey("::1", 5, "fe80::1", 6)])
def test_flow_name_is_the_mlcc_wire_id(key):
    from hostctl.policy.mlcc import flow_id

    assert flow_name(key) == flow_id(key) == f"{key.laddr}:{key.lport}>{key.raddr}:{key.rport}"
