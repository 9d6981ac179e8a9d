"""hostctl.core.mlcchost: one host's slot (which flows are planned, waves, floors, idle rates)."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from hostctl.core.mlcc import MlccParams
from hostctl.core.mlcchost import _fill_slot0, host_slot, job_waves, wait_floor_Bps

C = 62.5e6  # 500 Mbit/s in bytes/s
P = MlccParams()
T = P.slot_s


def nic_only(n):
    return np.zeros((n, 1), dtype=np.int64)


def run(G, job, *, path=None, cap=(C,), load=None, B=None, by_job=True):
    n = len(G)
    L = len(cap)
    return host_slot(np.asarray(G, float), np.zeros(n) if B is None else B, np.zeros(n), np.array(job, dtype=object),
                     nic_only(n) if path is None else path, np.asarray(cap, float), np.asarray(cap, float),
                     np.zeros((L, P.K)) if load is None else load, params=P, by_job=by_job)


def test_smaller_job_goes_first_and_the_other_is_deferred():
    # job a: 2 flows x 0.6 MB (1.2 MB), job b: 2 flows x 1.2 MB; the link carries 3.75 MB per slot
    r = run([0.6e6, 0.6e6, 1.2e6, 1.2e6], ["b2", "b2", "a1", "a1"])
    assert list(r.wave) == [0, 0, 1, 1]  # b2 has fewer bytes left: wave 0 despite its name
    assert r.rates_Bps[:2, 0] == pytest.approx([0.6e6 / T] * 2)  # slot 0's volume: all of it
    assert r.applied_Bps[:2] == pytest.approx([C] * 2)  # sent at up to the headroom
    # every slot: this host's plan fits the link (the floor aside)
    assert (r.rates_Bps.sum(axis=0) <= C * (1 + 1e-9) + 4 * wait_floor_Bps(T)).all()
    sent = r.rates_Bps.sum(axis=1) * T
    assert sent == pytest.approx([0.6e6, 0.6e6, 1.2e6, 1.2e6], rel=1e-6)


def test_waiting_flows_get_the_floor_and_idle_flows_an_equal_share():
    load = np.zeros((1, P.K))
    load[0, :3] = C  # other hosts fill the link for 3 slots
    r = run([1e6, 0.0, 0.0, 0.0], ["a", "b", "b", "c"], load=load)
    assert list(r.kind) == ["active", "idle", "idle", "idle"]
    assert r.applied_Bps[0] == pytest.approx(wait_floor_Bps(T))  # planned 0 now, but not stuck
    assert r.rates_Bps[0, 1:3].max() == 0 and r.rates_Bps[0, 3] > 0
    assert r.applied_Bps[1:] == pytest.approx([C / 4] * 3)  # the link is full: an equal share
    free = run([1e6, 0.0, 0.0], ["a", "b", "c"])
    assert free.applied_Bps[1:] == pytest.approx([C] * 2)  # a free link: as without hostctl
    assert (r.rates_Bps[1:] == 0).all()  # idle flows publish no load
    assert list(r.wave) == [0, -1, -1, -1]


def test_unknown_size_flows_take_what_the_known_ones_leave():
    r = run([1.2e6, np.nan], ["a", "z"])
    assert list(r.kind) == ["active", "unknown"] and list(r.wave) == [0, 1]
    assert r.rates_Bps[0, 0] == pytest.approx(1.2e6 / T)
    assert r.rates_Bps[1, 0] == pytest.approx(C - 1.2e6 / T)
    assert (r.rates_Bps[1, 1:] == 0).all()  # reserves nothing ahead
    # the known flow ends in slot 0: paced at the headroom, published at its volume
    assert r.applied_Bps[0] == pytest.approx(C)


def test_paths_over_two_links_respect_the_tighter_one():
    # link 0: NIC (C), link 1: a switch port at C/2; flow 0 crosses both, flow 1 only the NIC
    path = np.array([[0, 1], [0, -1]])
    r = run([3e6, 3e6], ["a", "b"], path=path, cap=(C, C / 2))
    assert r.rates_Bps[0].max() <= C / 2 * (1 + 1e-9)
    assert r.applied_Bps.max() <= C


def test_no_flows():
    r = run([], [])
    assert r.rates_Bps.shape == (0, P.K) and r.plan is None


def test_one_wave_by_default_shares_the_link():
    r = run([C * T, C * T], ["a", "b"], by_job=False)
    assert list(r.wave) == [0, 0]
    assert r.rates_Bps[:, 0] == pytest.approx([C / 2] * 2)


def test_job_waves_ties_by_name():
    assert list(job_waves(np.array(["b", "a", "b"], dtype=object), {"a": 5.0, "b": 5.0})) == [1, 0, 1]


@settings(max_examples=60, deadline=None)
@given(st.lists(st.tuples(st.sampled_from([0.0, float("nan"), 1e4, 3e5, 2e6, 2e7]), st.sampled_from("abc")),
                min_size=1, max_size=12),
       st.floats(0.0, 1.0))
def test_applied_rates_are_positive_and_within_the_path(flows, busy):
    G = [g for g, _ in flows]
    load = np.full((1, P.K), busy * C)
    r = run(G, [j for _, j in flows], load=load)
    assert (r.applied_Bps > 0).all() and (r.applied_Bps <= C * (1 + 1e-9)).all()
    assert (r.rates_Bps >= -1e-6).all()
    planned = r.kind != "idle"
    if r.plan is not None:  # the starvation floor (Q-M4) is the documented exception
        planned[np.flatnonzero(planned)[r.plan.floored]] = False
    # the host's planned load beyond slot 0 stays within the headroom (property 8 for sums)
    assert (r.rates_Bps[planned, 1:].sum(axis=0) <= (1 - busy) * C * (1 + 1e-9) + 1e-3).all()


def test_slot0_is_work_conserving():
    # job a needs half of slot 0; job b (bigger, next wave) would start in slot 1 on Alg. 1 alone
    half = C * T / 2
    plain = host_slot(np.array([half, 4 * C * T]), np.zeros(2), np.zeros(2), np.array(["a", "b"], dtype=object),
                      nic_only(2), np.array([C]), np.array([C]), np.zeros((1, P.K)), params=P, fill=False,
                      by_job=True)
    r = run([half, 4 * C * T], ["a", "b"])
    assert plain.rates_Bps[1, 0] < 0.5 * C  # Alg. 1 leaves slot 0 half empty
    assert r.rates_Bps[:, 0].sum() == pytest.approx(C)  # filled
    assert r.rates_Bps[1].sum() * T == pytest.approx(4 * C * T)  # the same volume, moved earlier
    assert r.rates_Bps[0, 0] == pytest.approx(C / 2)  # the first wave's plan is untouched


def _fill(rates, paths, cap, load0, wave=None):
    rates = np.array(rates, dtype=float)
    n = rates.shape[0]
    before = rates.copy()
    _fill_slot0(rates, np.arange(n), np.zeros(n, np.int64) if wave is None else np.asarray(wave), np.asarray(paths),
                np.maximum(np.asarray(cap, float) - np.asarray(load0, float), 0.0), T)
    return before, rates


def test_slot0_fill_is_fair_within_a_wave():
    # two flows of one wave on one link, each with 2 slots of C/2 planned later; slot 0 has C/2 free:
    # each gets C/4 (a greedy fill in row order gave all of it to the first, in every slot)
    before, after = _fill([[C / 4, C / 2, C / 2, 0, 0, 0, 0, 0, 0, 0]] * 2, [[0], [0]], [C], [0.0])
    assert after[:, 0] == pytest.approx([C / 2, C / 2])
    assert after.sum(axis=1) == pytest.approx(before.sum(axis=1))  # volume moved, not made
    # max-min: flow 1 also crosses link 1 with C/10 free, so flow 0 gets the rest of link 0
    _, after = _fill([[0, C, 0, 0, 0, 0, 0, 0, 0, 0]] * 2, [[0, -1], [0, 1]], [C, C], [0.0, 0.9 * C])
    assert after[1, 0] == pytest.approx(C / 10) and after[0, 0] == pytest.approx(0.9 * C)
    # an earlier wave is served first
    _, after = _fill([[0, C, 0, 0, 0, 0, 0, 0, 0, 0]] * 2, [[0], [0]], [C], [0.5 * C], wave=[1, 0])
    assert after[:, 0] == pytest.approx([0.0, C / 2])


@settings(max_examples=200, deadline=None)
@given(st.data())
def test_slot0_fill_properties(data):
    n = data.draw(st.integers(1, 6))
    L = data.draw(st.integers(1, 3))
    rates = np.array(data.draw(st.lists(st.lists(st.floats(0, C), min_size=P.K, max_size=P.K), min_size=n, max_size=n)))
    paths = np.array(data.draw(st.lists(st.lists(st.integers(-1, L - 1), min_size=2, max_size=2), min_size=n, max_size=n)))
    cap = np.full(L, C)
    load0 = np.array(data.draw(st.lists(st.floats(0, C), min_size=L, max_size=L)))
    wave = np.array(data.draw(st.lists(st.integers(0, 2), min_size=n, max_size=n)))
    before, after = _fill(rates, paths, cap, load0, wave)
    assert after.sum(axis=1) == pytest.approx(before.sum(axis=1), rel=1e-9, abs=1e-3)  # volume is only moved
    assert (after[:, 0] >= before[:, 0] - 1e-6).all() and (after >= -1e-6).all()
    # no link gets more than the fill found free there (what the plans had on it may already be over)
    for x in range(L):
        on = np.array([x in p for p in paths.tolist()])
        added = (after[on, 0] - before[on, 0]).sum()
        free = max(cap[x] - load0[x] - before[on, 0].sum() * 1.0, 0.0)
        assert added <= free * (1 + 1e-9) + 1e-3
    # identical flows of one wave are filled alike
    for i in range(n):
        for j in range(i + 1, n):
            if (wave[i] == wave[j] and sorted(set(paths[i].tolist())) == sorted(set(paths[j].tolist()))
                    and before[i, 1:].sum() == pytest.approx(before[j, 1:].sum())):
                assert after[i, 0] - before[i, 0] == pytest.approx(after[j, 0] - before[j, 0], rel=1e-6, abs=1e-3)


@settings(max_examples=300, deadline=None)
@given(st.data())
def test_slot0_fill_matches_the_loop_it_replaced(data):
    n = data.draw(st.integers(1, 8))
    L = data.draw(st.integers(1, 4))
    rates = np.array(data.draw(st.lists(st.lists(st.sampled_from([0.0, 1e3, C / 7, C / 2, C]), min_size=P.K,
                                                 max_size=P.K), min_size=n, max_size=n)))
    paths = np.array(data.draw(st.lists(st.lists(st.integers(-1, L - 1), min_size=3, max_size=3), min_size=n,
                                        max_size=n)))
    cap = np.array(data.draw(st.lists(st.sampled_from([C / 2, C]), min_size=L, max_size=L)))
    load0 = np.array(data.draw(st.lists(st.sampled_from([0.0, C / 3, C]), min_size=L, max_size=L)))
    wave = np.array(data.draw(st.lists(st.integers(0, 2), min_size=n, max_size=n)))
    planned = np.array(sorted(data.draw(st.sets(st.integers(0, n - 1), min_size=1))), dtype=np.int64)
    got, want = rates.copy(), rates.copy()
    _fill_slot0(got, planned, wave, paths, np.maximum(cap - load0, 0.0), T)
    _fill_reference(want, planned, wave, paths, cap, load0, T)
    assert got == pytest.approx(want, rel=1e-9, abs=1e-6)


def _fill_reference(rates, planned, wave, pidx, cap, load0, t) -> None:
    """The slot-0 fill as first written (a loop per flow and link, session 15), with session 18's
    rule that a wave leaves out the flows whose path is already full: the model the array version
    must match."""
    L = cap.shape[0]
    rows = pidx[planned]
    # slot-0 volume per link (padding -> bin L); bincount adds in the same order as np.add.at did
    use = np.bincount(np.where(rows >= 0, rows, L).ravel(), weights=np.repeat(rates[planned, 0], rows.shape[1]),
                      minlength=L + 1)
    free = np.maximum(cap - load0 - use[:L], 0.0).tolist()
    later = rates[planned, 1:].sum(axis=1)
    cand = planned[later > 0]
    if cand.size == 0 or max(free, default=0.0) <= 0:
        return
    links_of = {r: [x for x in path if 0 <= x < L] for r, path in zip(cand.tolist(), pidx[cand].tolist())}
    for w in np.unique(wave[cand]).tolist():
        # a flow whose path is full when its wave starts is left out (it would get at most 1e-9 B/s, yet
        # count as sharing its other links in the first round; session 18)
        need = {r: float(rates[r, 1:].sum()) for r in cand[wave[cand] == w].tolist()
                if links_of[r] and min(free[x] for x in links_of[r]) > 1e-9}
        given = dict.fromkeys(need, 0.0)
        for _round in range(len(need) + L + 1):  # each round ends a flow or fills a link
            if not need:
                break
            on = [0] * L  # flows of the wave still filling, per link
            for r in need:
                for x in links_of[r]:
                    on[x] += 1
            offer = {r: max(0.0, min(need[r], *(free[x] / on[x] for x in links_of[r]))) for r in need}
            for r, g in offer.items():
                given[r] += g
                need[r] -= g
                for x in links_of[r]:
                    free[x] -= g
            # done: flows with nothing left to move, or on a link that is full now
            need = {r: v for r, v in need.items()
                    if v > 1e-9 * max(1.0, given[r]) and min(free[x] for x in links_of[r]) > 1e-9}
        for r, extra in given.items():
            if extra <= 0:
                continue
            rates[r, 0] += extra
            # take the same volume off its last planned slots
            tail = rates[r, :0:-1]  # slots K-1 .. 1
            taken = np.minimum(tail, np.maximum(extra - (np.cumsum(tail) - tail), 0.0))
            rates[r, :0:-1] = tail - taken
        if max(free) <= 0:
            break  # every link is full: the later waves would get nothing


def _roles(G, *, role, ref, cum, ceiling=None, slack=None):
    n = len(G)
    return host_slot(np.asarray(G, float), np.full(n, C), np.asarray(cum, float), np.array(["r"] * n, dtype=object),
                     nic_only(n), np.array([C]), np.array([C]), np.zeros((1, P.K)), params=P, role=role,
                     ref_bytes=ref, slack_bytes=slack, ceiling_bytes=ceiling)


@settings(max_examples=40, deadline=None)
@given(st.lists(st.sampled_from([0.0, 1e5, 2e6, 2e7]), min_size=1, max_size=6), st.sampled_from([0, 1, 2, 3]))
def test_algorithm2_without_references_or_notifications_changes_nothing(G, role):
    """A role whose peers are not heard from (ref NaN) and no notification: the same rates and
    schedules as without Algorithm 2 (it may only add a Delta or hold a published schedule)."""
    n = len(G)
    plain = run(G, ["r"] * n, by_job=False, B=np.full(n, C))
    r = _roles(G, role=[role] * n, ref=[np.nan] * n, cum=[1e6] * n, ceiling=[np.inf] * n, slack=[0.0] * n)
    assert r.applied_Bps == pytest.approx(plain.applied_Bps) and r.rates_Bps == pytest.approx(plain.rates_Bps)
    assert (r.delta_Bps == 0).all() and (r.reduced_bytes == 0).all()


def test_delta_raises_a_lagging_flow_only_into_headroom_and_a_notification_lowers_its_published_plan():
    G = [3 * C * T, 3 * C * T]  # two flows share the NIC: half each on Alg. 1 alone, 6 slots
    ring = 3
    lag = _roles(G, role=[ring, 0], ref=[5e7, np.nan], cum=[1e6, 0.0])
    # the link is fully planned: Delta may not book it beyond capacity (delta_within_avail)
    assert lag.delta_Bps[0] > 0 and lag.applied_Bps == pytest.approx([C / 2, C / 2])
    assert (lag.rates_Bps.sum(axis=0) <= C * (1 + 1e-9)).all()
    alone = _roles([3 * C * T, 0.0], role=[ring, 0], ref=[5e7, np.nan], cum=[1e6, 0.0])
    assert alone.applied_Bps[0] == pytest.approx(C)  # (alone, Alg. 1 plans the whole link anyway)
    held = _roles(G, role=[ring, 0], ref=[np.nan, np.nan], cum=[1e6, 0.0], ceiling=[1e6, np.inf])
    assert held.reduced_bytes[0] > 0 and held.rates_Bps[0, 0] < 0.05 * C  # published: held
    # (host_slot leaves the paced rate to core.mlccplan.plan_slot, which holds it: tests/unit/test_mlccplan.py)
    assert held.rates_Bps[0].sum() * T == pytest.approx(G[0])  # its bytes moved later, not dropped


def test_under_a_job_order_an_idle_flow_starts_in_what_the_earlier_jobs_leave():
    # job 0 (wave 0) plans the whole NIC this slot; job 1's idle flow (a new burst may start) gets the
    # wait floor, not the link's headroom: it must not run over job 0's plan on this host
    G = np.array([20 * C * T, 0.0])
    kw = dict(params=P, idle_share=False)
    hs = host_slot(G, np.full(2, C), np.zeros(2), np.array(["a", "b"], dtype=object), nic_only(2), np.array([C]),
                   np.array([C]), np.zeros((1, P.K)), moving=np.array([True, False]), waves=np.array([0, 1]), **kw)
    assert hs.applied_Bps[0] == pytest.approx(C) and hs.applied_Bps[1] == pytest.approx(wait_floor_Bps(T))
    # the other way round: the idle flow's job is first, it may start at the whole headroom
    hs = host_slot(G, np.full(2, C), np.zeros(2), np.array(["a", "b"], dtype=object), nic_only(2), np.array([C]),
                   np.array([C]), np.zeros((1, P.K)), moving=np.array([True, False]), waves=np.array([1, 0]), **kw)
    assert hs.applied_Bps[1] == pytest.approx(C)


def test_flows_of_unknown_size_keep_their_jobs_order():
    # two jobs' flows of unknown size under a job order (waves 0 and 1): the first job's flow takes the link
    G = np.array([np.nan, np.nan])
    hs = host_slot(G, np.full(2, C), np.zeros(2), np.array(["a", "b"], dtype=object), nic_only(2), np.array([C]),
                   np.array([C]), np.zeros((1, P.K)), params=P, idle_share=False, waves=np.array([1, 0]))
    assert hs.applied_Bps[1] == pytest.approx(C) and hs.applied_Bps[0] <= wait_floor_Bps(T) * 1.001


@pytest.mark.parametrize("first", [0, 1])
def test_under_a_job_order_a_later_jobs_known_size_does_not_go_before_an_earlier_jobs_unknown_one(first):
    # the switches plan the jobs in their order whatever the sizes: the host must agree, or both jobs
    # book the link (job a of unknown size first: it takes the link; the later job b waits at the floor)
    G = np.array([np.nan, 20 * C * T])
    waves = np.array([0, 1]) if first == 0 else np.array([1, 0])
    hs = host_slot(G, np.full(2, C), np.zeros(2), np.array(["a", "b"], dtype=object), nic_only(2), np.array([C]),
                   np.array([C]), np.zeros((1, P.K)), params=P, idle_share=False, waves=waves)
    assert list(hs.kind) == ["unknown", "active"]
    assert hs.applied_Bps[first] == pytest.approx(C) and hs.applied_Bps[1 - first] <= wait_floor_Bps(T) * 1.001


def test_under_a_job_order_a_jobs_unknown_sizes_go_after_its_known_ones():
    G = np.array([np.nan, 1.2e6, np.nan])
    hs = host_slot(G, np.full(3, C), np.zeros(3), np.array(["a", "a", "b"], dtype=object), nic_only(3),
                   np.array([C]), np.array([C]), np.zeros((1, P.K)), params=P, idle_share=False,
                   waves=np.array([0, 0, 1]))
    w = hs.wave.tolist()
    assert w[1] < w[0] < w[2]
    assert hs.rates_Bps[1, 0] == pytest.approx(1.2e6 / T) and hs.rates_Bps[0, 0] == pytest.approx(C - 1.2e6 / T)
