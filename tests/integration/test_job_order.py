"""mlcc's fabric-wide job order (``--job-order``) end to end through a real switchemu process: two
hosts' MlccControl, each with one job's flow to the same receiver, share that receiver's switch port.
Without an order they share it; with ``fixed`` the job ranked first plans the whole port and the
other waits at the floor; ``rotate`` swaps them when the order does.

Real sockets and a real switch process (no root); the flows are the monitor's input, made up here.
"""

from __future__ import annotations

import time

import pytest

from hostctl.core.joborder import fabric_rank
from hostctl.core.types import FlowKey
from hostctl.policy.mlcc import FlowIn, MlccControl
from hostctl.policy.switchclient import SwitchClient
from tests.integration.test_switchemu import SLOT_S, procs, topo_file, wait_up  # noqa: F401 (fixtures)

C = 10**9 // 8  # every link: 1 Gbit/s, bytes/s
A = FlowKey("10.100.0.1", 5000, "10.100.0.3", 9000)  # h0 -> h2
B = FlowKey("10.100.0.2", 5001, "10.100.0.3", 9001)  # h1 -> h2: both cross sw0>h2


@pytest.fixture
def switch(procs, topo_file, tmp_path):  # noqa: F811 (pytest fixtures)
    ep = f"ipc://{tmp_path}/sw0.sock"
    p = procs.start("--bind", ep, "--topology", topo_file, "--log-level", "WARNING")
    wait_up(ep, p)
    return ep


def run(ep: str, order: str, jobs: tuple[str, str], slots: int = 6, interval_s: float = 2.0,
        sizes: dict[str, int] | None = None) -> list[tuple]:
    """Both hosts plan every slot (h0 first, then h1, as their offsets in the slot would have it);
    returns per slot (slot, rate of A, rate of B, ranks). sizes: the jobs' model sizes (both hosts)."""
    ca, cb = SwitchClient([ep], host="h0"), SwitchClient([ep], host="h1")
    ha = MlccControl(C, SLOT_S, switch=ca, fetch_timeout_s=0.5, publish_timeout_s=0.5, job_order=order,
                     order_interval_s=interval_s)
    hb = MlccControl(C, SLOT_S, switch=cb, fetch_timeout_s=0.5, publish_timeout_s=0.5, job_order=order,
                     order_interval_s=interval_s)
    G = 50 * C * SLOT_S  # more than the horizon can carry: both stay backlogged
    out = []
    try:
        for _ in range(slots):
            s = ha.slot_now()
            ra = ha.tick([FlowIn(A, jobs[0], G, C, 0.0)], sizes=sizes)[A]
            rb = hb.tick([FlowIn(B, jobs[1], G, C, 0.0)], sizes=sizes)[B]
            # both planned and published within the first half of this slot, with the switch's answer
            # of this slot: on a loaded machine a tick can spill into the next slot, where the switch
            # refuses its publish as stale, and then the next slot misses that reservation too
            if time.time() < (s + 0.5) * SLOT_S and ha.fb_slot == s and hb.fb_slot == s:
                out.append((s, ra, rb, dict(ha.ranks, **hb.ranks)))
            while ha.slot_now() == s:
                time.sleep(0.002)
    finally:
        ha.close()
        hb.close()
    return out


def test_without_an_order_the_first_to_plan_leads(switch):
    """MLCC as published: a flow plans around the reservations it sees, so the host that planned first
    (which one depends on the timing of the first slots) keeps the port; the two never overbook it."""
    got = run(switch, "none", ("ja", "jb"))
    assert all(r == {} for *_, r in got)
    for (s0, *_), (s, ra, rb, _) in zip(got, got[1:]):
        if s0 == s - 1:
            assert max(ra, rb) >= 0.95 * C and ra + rb <= 1.05 * C, (s, ra, rb)


def test_a_restarted_daemon_is_heard_at_once(switch):
    """Schedules carry the slot number as their sequence number at least: a new controller for the
    same flows (a daemon restart) is not refused as reordered while the old schedules live."""
    run(switch, "none", ("ja", "jb"), slots=8)
    got = run(switch, "fixed", ("ja", "jb"), slots=6)
    first = min(("ja", "jb"), key=lambda j: (fabric_rank(j, "fixed"), j))
    pairs = [(a, b) for a, b in zip(got, got[1:]) if a[0] == b[0] - 1 and a[0] > got[0][0]]
    assert pairs
    for _, (s, ra, rb, _) in pairs:
        lead, wait = (ra, rb) if first == "ja" else (rb, ra)
        assert lead >= 0.95 * C and wait <= 0.05 * C, (s, ra, rb)


def test_fixed_order_gives_the_port_to_the_first_job(switch):
    jobs = ("ja", "jb")
    first = min(jobs, key=lambda j: (fabric_rank(j, "fixed"), j))
    got = run(switch, "fixed", jobs, slots=8)
    pairs = [(a, b) for a, b in zip(got, got[1:]) if a[0] == b[0] - 1 and a[0] > got[0][0]]
    assert len(pairs) >= 3
    for _, (s, ra, rb, ranks) in pairs:  # a slot after one in which both published (not the first)
        lead, wait = (ra, rb) if first == "ja" else (rb, ra)
        assert lead >= 0.95 * C, (s, ra, rb)
        assert wait <= 0.05 * C, (s, ra, rb)  # the wait floor
        assert ranks == {j: fabric_rank(j, "fixed") for j in jobs}


def test_rotate_leader_follows_each_slots_order(switch):
    """With a new order every 2 slots, the job ranked first in a slot leads it (except in the first
    slot of an order: the other host's plan of that slot was made under the old one)."""
    jobs = ("ja", "jb")
    got = run(switch, "rotate", jobs, slots=16, interval_s=2 * SLOT_S)
    checked = 0
    for (s0, _, _, ranks0), (s, ra, rb, ranks) in zip(got, got[1:]):
        if s0 != s - 1 or ranks0 != ranks:
            continue
        first = min(jobs, key=lambda j: (ranks[j], j))
        lead, wait = (ra, rb) if first == "ja" else (rb, ra)
        assert lead >= 0.95 * C and wait <= 0.05 * C, (s, ra, rb, ranks)
        checked += 1
    assert checked >= 3


@pytest.mark.parametrize("sizes, lead", [({"ja": 8 << 20, "jb": 2 << 20}, "jb"), ({"ja": 2 << 20, "jb": 8 << 20}, "ja"),
                                         ({"ja": 4 << 20, "jb": 4 << 20}, None)])
def test_smallest_gives_the_port_to_the_smaller_model_and_one_size_to_the_first(switch, sizes, lead):
    """--job-order smallest: the job with the smaller model leads whichever host plans first; with
    one size the ranks tie and the switch's arrival order decides, as without an order: one job keeps
    the port, the two never overbook it."""
    got = run(switch, "smallest", ("ja", "jb"), slots=8, sizes=sizes)
    pairs = [(a, b) for a, b in zip(got, got[1:]) if a[0] == b[0] - 1 and a[0] > got[0][0]]
    assert len(pairs) >= 3
    for _, (s, ra, rb, ranks) in pairs:
        assert ranks == sizes
        if lead is None:
            assert max(ra, rb) >= 0.95 * C and min(ra, rb) <= 0.05 * C, (s, ra, rb)
        else:
            first, wait = (ra, rb) if lead == "ja" else (rb, ra)
            assert first >= 0.95 * C and wait <= 0.05 * C, (s, ra, rb)
