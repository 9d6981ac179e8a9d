"""hostctl.core.mlccplan: one host's whole MLCC decision (per-job fabric views, û from cross traffic,
Algorithm 2 per iteration, notifications enforced on the paced rate)."""

from __future__ import annotations

import itertools

from dataclasses import replace

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from hostctl.core.mlcc import MlccParams, Role, initial_schedule
from hostctl.core.mlcchost import wait_floor_Bps
from hostctl.core.mlccplan import FabricView, avail_from_cross, plan_slot, progress_bytes

C = 62.5e6  # 500 Mbit/s in bytes/s
P = MlccParams()
PJ = replace(P, slot0_job_booked=True)  # slot 0 within the job's own booking (off by default)
T, K = P.slot_s, P.K
FLOOR = wait_floor_Bps(T)


def view(J, L=1, other=None, same=None, nsame=None, avail=None):
    z = np.zeros((J, L, K))
    v = lambda x: z.copy() if x is None else np.broadcast_to(np.asarray(x, float), (J, L, K)).copy()  # noqa: E731
    cap = np.full(L, C)
    return FabricView(cap, cap.copy() if avail is None else np.asarray(avail, float), v(other), v(same), v(nsame))


def test_the_issue_example_does_not_depend_on_the_order_of_the_flows():
    # a host sends one flow of job A (index 0) and one of job B (1) into a link that a remote job-A flow
    # already books at 1.0 x capacity: A's view has no other job and one remote flow of its own job;
    # B's view has job A's remote flow as other load
    other = np.zeros((2, 1, K))
    other[1] = C
    same = np.zeros((2, 1, K))
    same[0] = C
    nsame = np.zeros((2, 1, K))
    nsame[0] = 1
    v = FabricView(np.array([C]), np.array([C]), other, same, nsame)
    G = 20 * C * T
    got = {}
    for params in (P, PJ):
        for order in ([0, 1], [1, 0]):
            d = plan_slot([G, G], [C, C], [0.0, 0.0], order, np.zeros((2, 1), np.int64), v, params=params)
            got[params, tuple(order)] = {j: (d.applied_Bps[i], tuple(d.slot.rates_Bps[i]))
                                         for i, j in enumerate(order)}
        assert got[params, (0, 1)] == got[params, (1, 0)]
    (a_rate, a_plan), (b_rate, b_plan) = got[P, (0, 1)][0], got[P, (0, 1)][1]
    assert a_rate == pytest.approx(C / 2, rel=0.02)  # A's flows share the link: half each
    assert b_rate <= FLOOR * 1.001  # B waits (the floor)
    # slot0_job_booked: the share from the next slot on; in this slot the remote flow of A has booked the
    # link, A's flow here waits at the floor
    (a_rate, a_plan), (b_rate, b_plan) = got[PJ, (0, 1)][0], got[PJ, (0, 1)][1]
    assert a_rate <= FLOOR * 1.001 and a_plan[1:] == pytest.approx([C / 2] * (K - 1), rel=0.02)
    assert b_rate <= FLOOR * 1.001
    # this host books at most what A's share leaves plus B's floor
    d = plan_slot([G, G], [C, C], [0.0, 0.0], [0, 1], np.zeros((2, 1), np.int64), v, params=P)
    assert (d.slot.rates_Bps.sum(axis=0) <= C / 2 + 2 * FLOOR + 1).all()


@settings(max_examples=60, deadline=None)
@given(st.data())
def test_any_order_of_the_flows_gives_the_same_decision(data):
    n = data.draw(st.integers(1, 6))
    J, L = 3, 3
    fj = np.array([data.draw(st.integers(0, J - 1)) for _ in range(n)])
    paths = np.array([([0] + data.draw(st.lists(st.sampled_from([1, 2]), max_size=2, unique=True)) + [-1] * 2)[:3]
                      for _ in range(n)])
    vals = st.sampled_from([0.0, C / 4, C / 2, C])
    other = np.array(data.draw(st.lists(vals, min_size=J * L, max_size=J * L))).reshape(J, L, 1) * np.ones(K)
    same = np.array(data.draw(st.lists(vals, min_size=J * L, max_size=J * L))).reshape(J, L, 1) * np.ones(K)
    nsame = (same > 0) * np.array(data.draw(st.lists(st.integers(1, 3), min_size=J * L, max_size=J * L))).reshape(
        J, L, 1)
    v = FabricView(np.full(L, C), np.full(L, C), other, same, nsame.astype(float))
    G = np.array([data.draw(st.sampled_from([np.nan, 0.0, 2e5, 3 * C * T, 20 * C * T])) for _ in range(n)])
    base = plan_slot(G, np.full(n, C), np.zeros(n), fj, paths, v, params=P)
    perm = np.array(data.draw(st.permutations(list(range(n)))))
    d = plan_slot(G[perm], np.full(n, C), np.zeros(n), fj[perm], paths[perm], v, params=P)
    np.testing.assert_allclose(d.applied_Bps, base.applied_Bps[perm], rtol=1e-6, atol=1.0)
    np.testing.assert_allclose(d.slot.rates_Bps, base.slot.rates_Bps[perm], rtol=1e-6, atol=1.0)


def test_an_incast_shares_the_link_among_the_jobs_flows():
    # 3 workers of one job on 3 hosts into one PS downlink: each host sees the other two flows
    G = 20 * C * T
    for booked_by_others in (0.0, 2 * C / 3, 2 * C):  # nothing yet, their fair shares, each whole link
        v = view(1, same=booked_by_others, nsame=2 if booked_by_others else 0)
        d = plan_slot([G], [C], [0.0], [0], np.zeros((1, 1), np.int64), v, params=P)
        want = C if booked_by_others == 0 else C / 3
        assert d.applied_Bps[0] == pytest.approx(want, rel=0.02)
        # slot0_job_booked: the share from slot 1 on; now within what the others booked for this slot
        d = plan_slot([G], [C], [0.0], [0], np.zeros((1, 1), np.int64), v, params=PJ)
        assert d.slot.rates_Bps[0, 1] == pytest.approx(want, rel=0.02)
        assert d.applied_Bps[0] == pytest.approx(FLOOR if booked_by_others >= C else want, rel=0.02)
    # when the others book less than their share, this host's flow takes the rest
    v = view(1, same=C / 6, nsame=2)
    d = plan_slot([G], [C], [0.0], [0], np.zeros((1, 1), np.int64), v, params=P)
    assert d.applied_Bps[0] == pytest.approx(5 * C / 6, rel=0.02)


def test_jobs_keep_the_order_the_table_saw_them_in():
    # another job's booking is planned around whole (the paper's b_l), a job's own flows share
    G = 20 * C * T
    d = plan_slot([G], [C], [0.0], [0], np.zeros((1, 1), np.int64), view(1, other=0.75 * C), params=P)
    assert d.applied_Bps[0] == pytest.approx(0.25 * C, rel=0.02)


def test_cross_traffic_lowers_the_available_bandwidth_and_the_plan():
    # the NIC carried 0.6 C of traffic that is not this host's DL flows in one of the last 4 slots
    hist_link = [[0.5 * C, 0.9 * C, 0.4 * C, 0.5 * C]]
    hist_dl = [[0.5 * C, 0.3 * C, 0.4 * C, 0.5 * C]]
    u = avail_from_cross([C], hist_link, hist_dl)
    assert u[0] == pytest.approx(C - (0.9 * C - 0.3 * C * 1.05))
    G = 20 * C * T
    free = plan_slot([G], [C], [0.0], [0], np.zeros((1, 1), np.int64), view(1), params=P)
    busy = plan_slot([G], [C], [0.0], [0], np.zeros((1, 1), np.int64), view(1, avail=u), params=P)
    assert free.applied_Bps[0] == pytest.approx(C)
    assert busy.applied_Bps[0] == pytest.approx(u[0], rel=1e-6)
    assert (busy.slot.rates_Bps[0] <= u[0] * (1 + 1e-9)).all()
    # noise (below 2% of the link) and a link that carried only DL traffic leave û at the capacity
    assert avail_from_cross([C], [[C]], [[C / 1.05]])[0] == pytest.approx(C)
    assert avail_from_cross([C], [[np.nan]], [[0.0]])[0] == C


def test_load_moves_rates_to_emptier_slots():
    # one link, 40% booked by others in slots 0-1 and free after: the plan is not "fill from now on"
    load = np.array([0.4, 0.4, 0, 0, 0, 0, 0, 0, 0, 0]) * C
    G = 1.5 * C * T  # one and a half slots of the whole link
    res = initial_schedule(np.array([G]), (C - load)[None], (load / C)[None], slot_s=T)
    earliest = np.minimum(np.maximum(G - np.concatenate([[0], np.cumsum(C - load)[:-1]]) * T, 0) / T, C - load)
    assert res.beta[0] == 3  # the same completion slot as filling from now on ...
    assert not np.allclose(res.rates_Bps[0], earliest)  # ... with its bytes moved out of the loaded slots
    assert res.rates_Bps[0, 2] == pytest.approx(C)
    assert res.rates_Bps[0, :2].sum() == pytest.approx(0.5 * C)


def _ps(role, sent, G, ref, ceiling=None, moving=True, B=C):
    """One flow of a PS job on an otherwise busy link: 0.8 C booked by another job."""
    v = view(1, other=0.8 * C)
    return plan_slot([G], [B], [sent], [0], np.zeros((1, 1), np.int64), v, params=P, moving=[moving],
                     role=[role], ref_bytes=[ref], slack_bytes=[0.0],
                     ceiling_bytes=[np.inf if ceiling is None else ceiling])


def test_a_ps_that_sent_its_update_first_does_not_inflate_the_gradient_upload():
    # the PS sent update i before gradient i: its broadcast flows are idle, so it reports 0 for them
    rep = progress_bytes([Role.BROADCAST] * 3, [4e6] * 3, [0.0] * 3, [0.0] * 3, np.array(["idle"] * 3), T)
    assert np.isnan(rep).all()  # (the daemon reports 0 under the PS's name when no broadcast flow sends)
    d = _ps(Role.AGGREGATION, sent=1e6, G=3e6, ref=0.0)
    assert d.slot.delta_Bps[0] == 0
    assert d.applied_Bps[0] == pytest.approx(0.2 * C, rel=0.02)  # the link's headroom, not B = C
    # on the lifetime count the broadcast looked one whole update (4 MB) ahead: Delta, paced at 4x headroom
    old = _ps(Role.AGGREGATION, sent=1e6, G=3e6, ref=5e6)
    assert old.slot.delta_Bps[0] > 0
    assert old.applied_Bps[0] <= 0.2 * C * 1.02  # and even then Delta never books beyond the headroom


def test_a_broadcast_catches_up_with_its_workers_gradients_within_headroom():
    # the gradients are in (idle aggregation flows report their whole iteration): the update may go faster
    rep = progress_bytes([Role.AGGREGATION] * 2, [4e6, 0.0], [0.0, 4e6], [0.0, 0.0], np.array(["idle"] * 2), T)
    assert rep.tolist() == [4e6, 4e6]
    d = _ps(Role.BROADCAST, sent=0.0, G=4e6, ref=4e6)
    assert d.slot.delta_Bps[0] > 0 and not d.held[0]


def test_a_notification_holds_the_paced_rate():
    G = 4e6
    free = _ps(Role.BROADCAST, sent=1e6, G=G, ref=np.nan)
    d = _ps(Role.BROADCAST, sent=1e6, G=G, ref=np.nan, ceiling=1e6 + 0.05 * C * T)
    assert d.held[0] and free.applied_Bps[0] > 0.05 * C
    assert d.applied_Bps[0] == pytest.approx(max(0.05 * C, FLOOR))  # (ceiling - sent) / t
    assert d.slot.rates_Bps[0, 0] <= 0.05 * C * 1.001  # and publishes the held plan
    # never below the wait floor
    d = _ps(Role.BROADCAST, sent=1e6, G=G, ref=np.nan, ceiling=1e6)
    assert d.applied_Bps[0] == pytest.approx(FLOOR)
    # a ceiling below what the flow has sent belongs to another iteration: not applied
    d = _ps(Role.BROADCAST, sent=1e6, G=G, ref=np.nan, ceiling=0.5e6)
    assert not d.held[0] and d.applied_Bps[0] == pytest.approx(free.applied_Bps[0])
    # an idle flow is not held (it has nothing to send)
    d = _ps(Role.BROADCAST, sent=1e6, G=0.0, ref=np.nan, ceiling=1e6, moving=False)
    assert not d.held[0]


def test_two_jobs_on_a_shared_link_get_virtual_links_and_one_plan():
    # jobs 0 and 1 both here on link 1: job 0's one remote flow books half the link (its share), and
    # job 1 plans around a quarter of the link booked by other jobs
    L = 2
    other = np.zeros((2, L, K))
    same = np.zeros((2, L, K))
    nsame = np.zeros((2, L, K))
    same[0, 1], nsame[0, 1] = C / 2, 1
    other[1, 1] = C / 4
    v = FabricView(np.full(L, C), np.full(L, C), other, same, nsame)
    G = 20 * C * T
    path = np.array([[0, 1], [0, 1]])
    for wave in ([0, 1], [1, 0], None):
        d = plan_slot([G, G], [C, C], [0.0, 0.0], [0, 1], path, v, params=P, wave=wave)
        assert d.L_virtual == 2  # one bound per job on link 1
        assert d.applied_Bps[0] <= C / 2 * 1.0001  # job 0: at most its share
        assert d.applied_Bps[1] <= 0.75 * C * 1.0001  # job 1: at most what the others leave
        assert d.slot.rates_Bps.sum(axis=0)[0] <= 0.75 * C * (1 + 1e-9) + 2 * FLOOR  # host: the least view
    first = plan_slot([G, G], [C, C], [0.0, 0.0], [0, 1], path, v, params=P, wave=[0, 1])
    assert first.applied_Bps == pytest.approx([C / 2, C / 4], rel=0.02)
    second = plan_slot([G, G], [C, C], [0.0, 0.0], [0, 1], path, v, params=P, wave=[1, 0])
    assert second.applied_Bps[1] == pytest.approx(0.75 * C, rel=0.02)
    assert second.applied_Bps[0] <= FLOOR * 1.001


def test_local_view_is_the_plain_nic_plan():
    G = np.array([3 * C * T, 1e6, np.nan])
    d = plan_slot(G, np.full(3, C), np.zeros(3), [0, 1, 1], np.zeros((3, 1), np.int64),
                  FabricView.empty([C], 2, K), params=P)
    assert d.L_virtual == 0
    assert (d.slot.rates_Bps.sum(axis=0) <= C * (1 + 1e-9) + 3 * FLOOR).all()
    assert list(itertools.chain(d.slot.kind)) == ["active", "active", "unknown"]


def test_slot_zero_is_planned_within_what_is_free():
    # a remote flow of the same job holds the whole link now: this host's flow claims its half from the
    # next slot on, and takes nothing now but the floor (the remote one gives way before slot 1 begins)
    G = 20 * C * T
    v = view(1, same=C, nsame=1)
    v = FabricView(v.cap_Bps, v.avail_Bps, v.other_Bps, v.same_Bps, v.same_flows, np.array([C]))
    d = plan_slot([G], [C], [0.0], [0], np.zeros((1, 1), np.int64), v, params=replace(P, slot0_within_free=True))
    assert d.applied_Bps[0] <= FLOOR * 1.001
    assert d.slot.rates_Bps[0, 1:] == pytest.approx(C / 2, rel=0.02)
    # without the rule (the default), or without the slot-0 booking (an older switch): its share at once;
    # with slot0_job_booked, it waits for its own job's booking all the same
    for vv in (v, view(1, same=C, nsame=1)):
        d = plan_slot([G], [C], [0.0], [0], np.zeros((1, 1), np.int64), vv, params=P)
        assert d.applied_Bps[0] == pytest.approx(C / 2, rel=0.02)
        d = plan_slot([G], [C], [0.0], [0], np.zeros((1, 1), np.int64), vv, params=PJ)
        assert d.applied_Bps[0] <= FLOOR * 1.001


def test_slot_zero_within_the_jobs_booking_but_not_other_jobs():
    # slot0_job_booked covers the job's own flows only: another job booked before it is planned around
    # whole in every slot anyway, and the busy0 row (jobs after it too) is not counted
    G = 20 * C * T
    v = view(1, other=C / 4, same=C / 2, nsame=1)
    v = FabricView(v.cap_Bps, v.avail_Bps, v.other_Bps, v.same_Bps, v.same_flows, np.array([C]))
    d = plan_slot([G], [C], [0.0], [0], np.zeros((1, 1), np.int64), v, params=PJ)
    assert d.applied_Bps[0] == pytest.approx(C / 4, rel=0.02)  # C - C/4 other - C/2 own job's booking
    assert d.slot.rates_Bps[0, 1] == pytest.approx(3 * C / 8, rel=0.02)  # its half of what is left
