"""hostctl.core.mlcc: Algorithms 1 and 2 of MLCC (spec tensorlights-mlcc.md 2.6-2.8).

Property tests for section 4, properties 8-18 (12 is the benchmark's: benchmarks/bench_mlcc.py),
with brute-force optimality over all vertex schedules for small K, and focused examples.
Hypothesis runs derandomized (same examples every run).
"""

import math
from dataclasses import fields

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from hostctl.core.mlcc import (
    MlccParams, Role, _alg1_rates, _tol, allocate, allocate_prepared, apply_reductions, initial_schedule,
    link_load_Bps, path_links, schedule_cost,
)

T = 0.060
GB = 1.25e9  # 10 Gbit/s in bytes/s
SETTINGS = settings(max_examples=120, deadline=None, derandomize=True,
                    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])


def close_le(a, b, scale=GB):
    """a <= b up to float noise (rates in bytes/s around GB)."""
    return np.all(np.asarray(a) <= np.asarray(b) + 1e-9 * scale)


def headroom(load, avail, cap):
    avail = np.asarray(avail, float)
    if avail.ndim == 1:
        avail = avail[:, None]
    return np.maximum(np.minimum(avail, np.asarray(cap, float)[:, None]) - load, 0.0)


# -- independent reference implementations -----------------------------------------------------
def ref_alg1(G, A, price, w=1.0, t=T):
    """Algorithm 1 for one flow, written from the spec's pseudo-code with plain Python loops."""
    K = len(A)
    best = None
    for bh in range(1, K + 1):
        H = sorted(range(bh), key=lambda k: (price[k], k))
        r = [0.0] * K
        rem = G
        bw = 0.0
        for tau in H:
            if rem <= 1e-9 * G + 1e-6:
                break
            r[tau] = min(A[tau], rem / t)
            rem -= r[tau] * t
            bw += r[tau] * t / G * price[tau] if G > 0 else 0.0
        if rem <= 1e-9 * G + 1e-6:
            used = [k for k in range(K) if r[k] * t > 1e-9 * G + 1e-6]
            beta = max(used) + 1 if used else 0
            cost = w * beta + bw
            if best is None or cost < best[2] - 1e-12:
                best = (r, beta, cost)
    return best


def brute_min_cost(G, A, price, w=1.0, t=T):
    """min over all vertex schedules (any set of full slots plus at most one partial slot)
    of w*beta + sum (r t / G) price; None when no schedule carries G."""
    K = len(A)
    tol = 1e-9 * G + 1e-6
    best = None
    for mask in range(1 << K):
        full = [k for k in range(K) if mask >> k & 1]
        base = sum(A[k] * t for k in full)
        for j in [None] + [k for k in range(K) if not mask >> k & 1]:
            part = G - base
            if j is None:
                if abs(part) > tol:
                    continue
                part = 0.0
            elif part < -tol or part > A[j] * t + tol:
                continue
            used = [k for k in full if A[k] > 0] + ([j] if j is not None and part > tol else [])
            beta = max(used) + 1 if used else 0
            bw = sum(A[k] * t * price[k] for k in full) / G + (max(part, 0) * price[j] / G if j is not None else 0)
            c = w * beta + bw
            best = c if best is None else min(best, c)
    return best


# -- strategies --------------------------------------------------------------------------------
@st.composite
def single_flows(draw, max_k=6):
    """(G, A[K], price[K]) with small-integer prices so ties happen."""
    K = draw(st.integers(1, max_k))
    A = np.array(draw(st.lists(st.sampled_from([0.0, 0.1, 0.25, 0.5, 0.8, 1.0]), min_size=K, max_size=K))) * GB
    price = np.array(draw(st.lists(st.integers(0, 4), min_size=K, max_size=K)), float) / 2
    frac = draw(st.sampled_from([0.0, 0.05, 0.3, 0.5, 1.0, 1.7, 3.0, 7.0]))
    G = frac * GB * T
    return G, A, price


@st.composite
def problems(draw, max_n=6, max_l=5, max_k=6, roles=True):
    K = draw(st.integers(1, max_k))
    L = draw(st.integers(1, max_l))
    n = draw(st.integers(1, max_n))
    cap = np.array(draw(st.lists(st.sampled_from([0.5, 1.0, 2.0]), min_size=L, max_size=L))) * GB
    frac = np.array(draw(st.lists(st.sampled_from([0.0, 0.0, 0.2, 0.5, 0.9, 1.0]), min_size=L * K,
                                  max_size=L * K))).reshape(L, K)
    load = frac * cap[:, None]
    avail = cap * np.array(draw(st.lists(st.sampled_from([0.3, 0.8, 1.0, 1.2]), min_size=L, max_size=L)))
    rows = []
    for _ in range(n):
        m = draw(st.lists(st.booleans(), min_size=L, max_size=L))
        m[draw(st.integers(0, L - 1))] = True
        rows.append(m)
    path = np.array(rows, bool)
    G = np.array(draw(st.lists(st.sampled_from([0.0, 0.01, 0.2, 0.5, 1.0, 3.0, 20.0]), min_size=n,
                               max_size=n))) * GB * T
    B = np.array(draw(st.lists(st.sampled_from([0.0, 0.1, 0.5, 1.0, 2.0]), min_size=n, max_size=n))) * GB
    kw = {}
    if roles:
        kw["role"] = np.array(draw(st.lists(st.integers(0, 3), min_size=n, max_size=n)))
        kw["sent_bytes"] = np.array(draw(st.lists(st.sampled_from([0.0, 0.1, 0.5, 2.0]), min_size=n,
                                                  max_size=n))) * GB * T
        kw["ref_bytes"] = np.array(draw(st.lists(st.sampled_from([0.0, 0.3, 1.0, 2.5, 5.0]), min_size=n,
                                                 max_size=n))) * GB * T
        kw["slack_bytes"] = np.array(draw(st.lists(st.sampled_from([0.0, 0.2]), min_size=n, max_size=n))) * GB * T
    if draw(st.booleans()):
        kw["priority"] = np.array(draw(st.lists(st.integers(0, 2), min_size=n, max_size=n)))
    params = MlccParams(K=K, literal_b_cap=draw(st.booleans()), delta_within_avail=draw(st.booleans()))
    return dict(G_bytes=G, path=path, load_Bps=load, avail_Bps=avail, cap_Bps=cap, B_Bps=B, params=params, **kw)


def ext_bound(pb):
    """A_i(k) = min over the path of the headroom (property 8's bound, own flows excluded)."""
    H = headroom(pb["load_Bps"], pb["avail_Bps"], pb["cap_Bps"])
    return np.array([H[row].min(axis=0) for row in pb["path"]])


# -- Algorithm 1: properties 9, 10, 11 ---------------------------------------------------------
@SETTINGS
@given(single_flows())
def test_alg1_matches_reference_and_brute_force(case):
    """Property 11: the chosen cost is the minimum over all schedules (brute force over vertex
    schedules, K <= 6) and equals the per-deadline enumeration of the spec's pseudo-code."""
    G, A, price = case
    res = initial_schedule(np.array([G]), A[None], price[None], slot_s=T)
    ref = ref_alg1(G, A, price)
    if G == 0:
        assert res.beta[0] == 0 and res.cost[0] == 0 and not res.rates_Bps.any() and res.feasible[0]
        return
    if ref is None:
        assert not res.feasible[0] and res.beta[0] == len(A)
        assert brute_min_cost(G, A, price) is None
        return
    assert res.feasible[0]
    assert res.beta[0] == ref[1]
    assert math.isclose(res.cost[0], ref[2], rel_tol=1e-9, abs_tol=1e-9)
    np.testing.assert_allclose(res.rates_Bps[0], ref[0], rtol=1e-9, atol=1e-3)
    assert math.isclose(res.cost[0], brute_min_cost(G, A, price), rel_tol=1e-9, abs_tol=1e-9)


@SETTINGS
@given(single_flows())
def test_alg1_volume_bound_and_greedy_order(case):
    """Properties 8, 9, 10 on the Alg. 1 plan of one flow."""
    G, A, price = case
    res = initial_schedule(np.array([G]), A[None], price[None], slot_s=T)
    r, beta = res.rates_Bps[0], int(res.beta[0])
    K = len(A)
    assert (r >= 0).all() and close_le(r, A)  # 8
    if res.feasible[0]:  # 9
        assert r.sum() * T >= G * (1 - 1e-9) - 1e-6
        assert not r[beta:].any()
    else:
        np.testing.assert_allclose(r, A)
        assert beta == K
    used = np.flatnonzero(r > 0)  # 10: a cheaper (or equally cheap, earlier) slot is full first
    for a in range(min(beta, K)):
        for b in used:
            if (price[a], a) < (price[b], b):
                assert math.isclose(r[a], A[a], rel_tol=1e-9), (a, b, r, A, price)
    partial = [k for k in range(K) if 1e-6 < r[k] < A[k] * (1 - 1e-9)]
    assert len(partial) <= 1


@SETTINGS
@given(st.integers(1, 8), st.lists(st.sampled_from([0.0, 0.2, 0.5, 1.0]), min_size=8, max_size=8),
       st.sampled_from([0.1, 0.5, 1.0, 2.5, 4.0]), st.sampled_from([0.0, 0.3, 2.0]))
def test_alg1_equal_price_takes_smallest_feasible_deadline(K, a, frac, p):
    """Property 11, second part: with all PL equal the flow sends at full rate from slot 0."""
    A = np.array(a[:K]) * GB
    G = frac * GB * T
    res = initial_schedule(np.array([G]), A[None], np.full((1, K), p), slot_s=T)
    cum = np.cumsum(A * T)
    if cum[-1] < G * (1 - 1e-9):
        assert not res.feasible[0]
        return
    d = int(np.argmax(cum >= G * (1 - 1e-9) - 1e-6)) + 1
    assert res.beta[0] == d
    np.testing.assert_allclose(res.rates_Bps[0, :d - 1], A[:d - 1])


def test_alg1_vectorised_equals_per_flow():
    rng = np.random.default_rng(7)
    n, K = 40, 10
    A = rng.choice([0.0, 0.3, 1.0], size=(n, K)) * GB
    price = rng.integers(0, 5, size=(n, K)) / 3
    G = rng.choice([0.0, 0.5, 2.0, 6.0, 30.0], size=n) * GB * T
    res = initial_schedule(G, A, price, slot_s=T)
    for i in range(n):
        one = initial_schedule(G[i:i + 1], A[i:i + 1], price[i:i + 1], slot_s=T)
        np.testing.assert_array_equal(one.rates_Bps[0], res.rates_Bps[i])
        assert one.beta[0] == res.beta[i] and one.cost[0] == res.cost[i]


@SETTINGS
@given(st.integers(1, 12), st.integers(1, 10), st.data())
def test_alg1_shortcut_for_flows_no_deadline_fits_gives_algorithm_1s_rates(n, K, data):
    """allocate's rounds answer flows that cannot fit in K slots, and flows with one price in every
    slot, without the sort (_alg1_rates): the same floats as initial_schedule, for flows that fit,
    that miss by a hair and that cannot fit (a flow of unknown size), around empty slots and slivers
    below the rounding tolerance."""
    A = np.array(data.draw(st.lists(st.sampled_from([0.0, 1e-9, 1e-3, 0.3, 1.0, 1.7]), min_size=n * K,
                                    max_size=n * K))).reshape(n, K) * GB
    price = np.array(data.draw(st.lists(st.sampled_from([0.0, 0.25, 0.5, 1.5]), min_size=n * K,
                                        max_size=n * K))).reshape(n, K)
    flat = np.array(data.draw(st.lists(st.booleans(), min_size=n, max_size=n)))
    price[flat] = price[flat][:, :1]  # one price in every slot (local mode's first round): the time-order fill
    total = (A * T).sum(axis=1)
    scale = np.array(data.draw(st.lists(st.sampled_from([0.0, 0.5, 1.0 - 1e-12, 1.0, 1.0 + 1e-12, 1.001, 3.0]),
                                        min_size=n, max_size=n)))
    G = np.where(total > 0, total * scale, np.array(data.draw(st.lists(st.sampled_from([1.0, 1e6]), min_size=n,
                                                                       max_size=n))))
    G = np.maximum(G, 1.0)  # (allocate plans active flows only: G > its tolerance)
    w = data.draw(st.sampled_from([0.0, 1.0, 2.0]))
    want = initial_schedule(G, A, price, slot_s=T, w_beta=w).rates_Bps
    np.testing.assert_array_equal(_alg1_rates(G, _tol(G), A, price, T, w), want)


def test_allocate_without_roles_equals_allocate_with_role_none():
    """allocate skips Algorithm 2 when no flow has a dependency role: the same plan as running it with
    roles all NONE (which finds nothing to do)."""
    rng = np.random.default_rng(3)
    n, L, K = 30, 4, 10
    path = rng.random((n, L)) < 0.5
    path[:, 0] = True
    kw = dict(G_bytes=rng.choice([0.0, 0.2, 1.0, 5.0], n) * GB * T, path=path,
              load_Bps=rng.random((L, K)) * GB * 0.6, avail_Bps=np.full(L, GB), cap_Bps=np.full(L, GB),
              B_Bps=rng.random(n) * GB, sent_bytes=rng.random(n) * GB * T, params=MlccParams(K=K))
    fast = allocate(**kw)
    inc, pidx = path_links(path, n, L)
    full = allocate_prepared(kw["G_bytes"], inc, pidx, kw["load_Bps"], kw["avail_Bps"][:, None], kw["cap_Bps"],
                             kw["B_Bps"], kw["sent_bytes"], None, kw["params"], rl=np.zeros(n, np.int8),
                             ref=np.zeros(n), slack=np.zeros(n), succ=np.full(n, np.nan))
    for f in fields(fast):
        np.testing.assert_array_equal(getattr(fast, f.name), getattr(full, f.name), err_msg=f.name)


def test_alg1_staggers_around_a_loaded_slot():
    """A loaded slot is skipped when the deadline allows it and the price saved is worth it."""
    A = np.full((1, 4), GB)
    price = np.array([[0.0, 3.0, 0.0, 0.0]])  # using slot 1 costs half the bytes x 3 = 1.5 > one slot
    res = initial_schedule(np.array([2 * GB * T]), A, price, slot_s=T)
    np.testing.assert_allclose(res.rates_Bps[0], [GB, 0, GB, 0])
    assert res.beta[0] == 3 and math.isclose(res.cost[0], 3.0)
    cheap = initial_schedule(np.array([2 * GB * T]), A, price * 0.5, slot_s=T)  # 0.75 < one slot
    np.testing.assert_allclose(cheap.rates_Bps[0], [GB, GB, 0, 0])
    assert math.isclose(cheap.cost[0], 2.75)


def test_alg1_w_beta_zero_prefers_cheapest_slots():
    A = np.full((1, 3), GB)
    res = initial_schedule(np.array([GB * T]), A, np.array([[2.0, 1.0, 0.0]]), slot_s=T, w_beta=0.0)
    np.testing.assert_allclose(res.rates_Bps[0], [0, 0, GB])


def test_infeasible_fills_all_slots_best_effort():
    K = 5
    A = np.array([[1.0, 0.5, 0.0, 1.0, 0.2]]) * GB
    res = initial_schedule(np.array([100 * GB * T]), A, np.zeros((1, K)), slot_s=T)
    assert not res.feasible[0] and res.beta[0] == K
    np.testing.assert_allclose(res.rates_Bps[0], A[0])
    plan = allocate([100 * GB * T], np.ones((1, 1), bool), np.zeros((1, K)), [GB], [GB], [GB],
                    params=MlccParams(K=K))
    assert plan.infeasible[0] and plan.beta[0] == K and np.allclose(plan.rates_Bps[0], GB)


# -- allocate: property 8 for own flows (Q-M8), 17, 18 ----------------------------------------
@SETTINGS
@given(problems())
def test_allocate_own_flows_never_overbook(pb):
    """Property 8 for the sum of this host's flows on every link, and per flow; property 17's
    'future slots still satisfy property 8'; property 18 (rates >= 0)."""
    plan = allocate(**pb)
    H = headroom(pb["load_Bps"], pb["avail_Bps"], pb["cap_Bps"])
    A = ext_bound(pb)
    ok = ~plan.floored
    assert (plan.rates_Bps >= 0).all() and (plan.alg1_rates_Bps >= 0).all()
    assert close_le(plan.alg1_rates_Bps[ok], A[ok])
    assert close_le(link_load_Bps(pb["path"][ok], plan.alg1_rates_Bps[ok], H.shape[0]), H)
    assert close_le(link_load_Bps(pb["path"][ok], plan.rates_Bps[ok, 1:], H.shape[0]), H[:, 1:])
    if pb["params"].delta_within_avail:
        assert close_le(link_load_Bps(pb["path"][ok], plan.rates_Bps[ok], H.shape[0]), H)
    # floored flows: together at most min_rate_frac of each link
    fl = link_load_Bps(pb["path"][plan.floored], plan.rates_Bps[plan.floored], H.shape[0])
    assert close_le(fl[:, 1:], pb["params"].min_rate_frac * pb["cap_Bps"][:, None])


@SETTINGS
@given(problems())
def test_allocate_volume_and_replan(pb):
    """Properties 9 and 17: the final plan carries G (or is flagged infeasible), zero after beta."""
    plan = allocate(**pb)
    G = pb["G_bytes"]
    K = pb["params"].K
    sent = plan.rates_Bps.sum(axis=1) * T
    for i in range(len(G)):
        if not plan.infeasible[i]:
            assert sent[i] >= G[i] * (1 - 1e-9) - 1e-6
            assert not plan.rates_Bps[i, plan.beta[i]:].any()
        else:
            assert plan.beta[i] == K
        assert sent[i] <= G[i] * (1 + 1e-9) + 1e-6  # never more than the bytes left
    beta, cost, _ = schedule_cost(plan.rates_Bps, plan.price, G, slot_s=T)
    np.testing.assert_array_equal(beta, plan.beta)
    np.testing.assert_allclose(cost, plan.cost)


@SETTINGS
@given(problems())
def test_allocate_delta_rules(pb):
    """Properties 13 and 16 (Q-M10 both readings)."""
    plan = allocate(**pb)
    role = pb["role"]
    r0 = plan.alg1_rates_Bps[:, 0]
    applied = plan.rates_Bps[:, 0]
    F = pb["sent_bytes"] + r0 * T
    behind = (role != Role.NONE) & (pb["ref_bytes"] - F > 1e-9 * np.maximum(pb["ref_bytes"], F) + 1e-6)
    assert (plan.delta_Bps >= 0).all()  # 16
    np.testing.assert_array_equal(plan.delta_Bps > 0, behind)
    np.testing.assert_allclose(plan.delta_Bps[behind], (pb["ref_bytes"] - F)[behind] / T)
    z = plan.delta_Bps == 0  # 13: Delta = 0 -> the Alg. 1 rate is applied
    np.testing.assert_array_equal(applied[z], r0[z])
    d = ~z
    B = pb["B_Bps"]
    if pb["params"].literal_b_cap:
        assert close_le(applied[d], B[d])
    else:
        assert close_le(applied[d], np.maximum(r0, B)[d]) and close_le(r0[d], applied[d])
    assert close_le(applied[d], (r0 + plan.delta_Bps)[d])


@SETTINGS
@given(problems(), st.data())
def test_reductions_nonnegative_and_replanned(pb, data):
    """Properties 17 and 18 after receiver reductions; the freed slot-0 rate is not taken back."""
    plan = allocate(**pb)
    n = len(pb["G_bytes"])
    fr = np.array(data.draw(st.lists(st.sampled_from([-1.0, 0.0, 0.3, 1.0, 5.0]), min_size=n, max_size=n)))
    ceil = np.where(fr < 0, np.inf, pb["sent_bytes"] + fr * GB * T)
    out = apply_reductions(plan, ceil, pb["params"])
    H = headroom(pb["load_Bps"], pb["avail_Bps"], pb["cap_Bps"])
    assert (out.rates_Bps >= 0).all()
    assert (out.rates_Bps[:, 0] <= plan.rates_Bps[:, 0]).all()
    cum = pb["sent_bytes"] + out.rates_Bps[:, 0] * T
    assert np.all(cum <= np.maximum(ceil, pb["sent_bytes"]) * (1 + 1e-12) + 1e-6)
    np.testing.assert_allclose(out.reduction_bytes, (plan.rates_Bps[:, 0] - out.rates_Bps[:, 0]) * T)
    ok = ~out.floored
    assert close_le(link_load_Bps(pb["path"][ok], out.rates_Bps[ok, 1:], H.shape[0]), H[:, 1:])
    G = pb["G_bytes"]
    sent = out.rates_Bps.sum(axis=1) * T
    assert np.all(out.infeasible | (sent >= G * (1 - 1e-9) - 1e-6))


@SETTINGS
@given(problems(max_n=5), st.randoms(use_true_random=False))
def test_allocate_is_permutation_equivariant(pb, rnd):
    """Flow order does not matter (deterministic, no hidden sequencing over flows)."""
    plan = allocate(**pb)
    n = len(pb["G_bytes"])
    perm = np.array(rnd.sample(range(n), n))
    q = dict(pb)
    for k in ("G_bytes", "path", "B_Bps", "role", "sent_bytes", "ref_bytes", "slack_bytes", "priority"):
        if k in q:
            q[k] = q[k][perm]
    other = allocate(**q)
    np.testing.assert_allclose(other.rates_Bps, plan.rates_Bps[perm], rtol=1e-9, atol=1e-3)


# -- dependencies: properties 14 and 15 (multi-slot) -------------------------------------------
@settings(max_examples=40, deadline=None, derandomize=True)
@given(st.integers(2, 4), st.integers(1, 3), st.integers(0, 2**31 - 1), st.booleans())
def test_ps_dependency_holds_every_slot(m, n_ps, seed, literal):
    """Property 14: workers' aggregation flows and the PSs' broadcast flows, simulated slot by
    slot (decide, notify, reduce, send); at every slot boundary max_b cum <= min_a cum."""
    rng = np.random.default_rng(seed)
    K = 6
    params = MlccParams(K=K, literal_b_cap=literal)
    M = rng.choice([0.5, 2.0, 6.0]) * GB * T  # model bytes per PS shard
    sent_a = np.zeros((n_ps, m))  # aggregation flow worker w -> PS p
    sent_b = np.zeros((n_ps, m))  # broadcast flow PS p -> worker w
    for _slot in range(8):
        F_b_max = sent_b.max(axis=1)  # progress the peers reported at the start of the slot
        F_a_min = sent_a.min(axis=1)
        a_cum = np.zeros((n_ps, m))
        for w in range(m):  # each worker: its n_ps aggregation flows share its NIC (link 0)
            plan = allocate(M - sent_a[:, w], np.c_[np.zeros(n_ps, int), 1 + np.arange(n_ps)],
                            rng.uniform(0, 0.7, (1 + n_ps, K)) * GB, np.full(1 + n_ps, GB), np.full(1 + n_ps, GB),
                            rng.uniform(0.2, 1.5, n_ps) * GB, role=np.full(n_ps, Role.AGGREGATION),
                            sent_bytes=sent_a[:, w], ref_bytes=F_b_max, params=params)
            a_cum[:, w] = plan.cum_bytes
            assert np.all(plan.notify_ceiling_bytes == plan.cum_bytes)
        b_rates = np.zeros((n_ps, m))
        for p in range(n_ps):  # each PS: its m broadcast flows share its NIC (link 0)
            plan = allocate(M - sent_b[p], np.c_[np.zeros(m, int), 1 + np.arange(m)],
                            rng.uniform(0, 0.7, (1 + m, K)) * GB, np.full(1 + m, GB), np.full(1 + m, GB),
                            rng.uniform(0.2, 1.5, m) * GB, role=np.full(m, Role.BROADCAST),
                            sent_bytes=sent_b[p], ref_bytes=np.full(m, F_a_min[p]), params=params)
            ceiling = np.full(m, a_cum[p].min())  # F_a^min from the aggregation notifications
            plan = apply_reductions(plan, ceiling, params)
            assert (plan.rates_Bps >= 0).all()
            b_rates[p] = plan.rates_Bps[:, 0]
        sent_a = a_cum
        sent_b = sent_b + b_rates * T
        assert np.all(sent_b.max(axis=1) <= sent_a.min(axis=1) * (1 + 1e-12) + 1e-6)
    assert sent_a.min() > 0  # progress


@settings(max_examples=40, deadline=None, derandomize=True)
@given(st.integers(2, 5), st.integers(0, 2**31 - 1), st.booleans())
def test_ring_dependency_holds_every_slot(N, seed, literal):
    """Property 15: ring flows f_i = worker i -> i+1, predecessor f_{i-1}; with one chunk of
    slack (Q-M11) cum(f_i) <= cum(f_{i-1}) + chunk at every slot boundary; reductions are
    propagated around the ring until nothing changes."""
    rng = np.random.default_rng(seed)
    K = 6
    params = MlccParams(K=K, literal_b_cap=literal)
    model = rng.choice([1.0, 4.0, 9.0]) * GB * T
    chunk = model / N
    G_tot = 2 * (N - 1) / N * model  # Q-M12
    sent = np.zeros(N)
    path = np.arange(N)[:, None]  # one host per worker: its own NIC link
    for _slot in range(10):
        plan = allocate(G_tot - sent, path, rng.uniform(0, 0.8, (N, K)) * GB, np.full(N, GB), np.full(N, GB),
                        rng.uniform(0.1, 1.5, N) * GB, role=np.full(N, Role.RING), sent_bytes=sent,
                        ref_bytes=np.roll(sent, 1), slack_bytes=np.full(N, chunk),
                        succ_bytes=np.roll(sent, -1), params=params)
        for _ in range(N + 1):
            ceiling = np.roll(plan.notify_ceiling_bytes, 1)  # from the predecessor
            before = plan.rates_Bps[:, 0].copy()
            plan = apply_reductions(plan, ceiling, params)
            if np.array_equal(before, plan.rates_Bps[:, 0]):
                break
        assert (plan.rates_Bps >= 0).all()
        sent = plan.cum_bytes
        assert np.all(sent <= np.roll(sent, 1) + chunk * (1 + 1e-9) + 1e-6)
    assert sent.min() > 0


def test_ring_one_chunk_slack_lets_the_ring_start():
    """Without slack nothing may start from all-zero; one chunk lets every rank send its own."""
    N, chunk = 3, 0.5 * GB * T
    plan = allocate(np.full(N, 4 * chunk), np.arange(N)[:, None], np.zeros((N, 10)), np.full(N, GB),
                    np.full(N, GB), np.full(N, GB), role=np.full(N, Role.RING), sent_bytes=np.zeros(N),
                    ref_bytes=np.zeros(N), slack_bytes=np.full(N, chunk))
    assert (plan.delta_Bps == 0).all()
    out = apply_reductions(plan, np.full(N, chunk))
    np.testing.assert_allclose(out.cum_bytes, chunk)
    np.testing.assert_allclose(out.rates_Bps[:, 0], chunk / T)
    assert not out.infeasible.any()  # the rest moved to later slots
    zero = apply_reductions(plan, np.zeros(N))
    assert (zero.rates_Bps[:, 0] == 0).all() and (zero.rates_Bps >= 0).all()


# -- Algorithm 2 examples ---------------------------------------------------------------------
def one_flow(**kw):
    base = dict(G_bytes=[3 * GB * T], path=np.ones((1, 1), bool), load_Bps=np.zeros((1, 10)),
                avail_Bps=[GB / 2], cap_Bps=[GB], B_Bps=[GB])
    base.update(kw)
    return allocate(**base)


def test_delta_zero_applies_alg1_rate():
    plan = one_flow(role=[Role.BROADCAST], sent_bytes=[GB], ref_bytes=[GB])
    assert plan.delta_Bps[0] == 0 and not plan.capped[0] and not plan.notify[0]
    np.testing.assert_array_equal(plan.rates_Bps, plan.alg1_rates_Bps)


def test_delta_raises_rate_and_replans_future():
    # Alg. 1 gives GB/2 (the available bound); the reference is 0.3 GB*T bytes ahead
    # (the paper's rule: the increase is capped by B_i only, not by the link's headroom)
    plan = one_flow(role=[Role.AGGREGATION], sent_bytes=[0.0], ref_bytes=[0.8 * GB * T],
                    params=MlccParams(delta_within_avail=False))
    r0 = GB / 2
    assert plan.alg1_rates_Bps[0, 0] == r0
    assert math.isclose(plan.delta_Bps[0], 0.3 * GB)
    assert math.isclose(plan.rates_Bps[0, 0], 0.8 * GB) and not plan.capped[0]
    assert math.isclose(plan.rates_Bps[0].sum() * T, 3 * GB * T)
    np.testing.assert_allclose(plan.rates_Bps[0, 1:6], [GB / 2] * 4 + [0.2 * GB])
    assert plan.beta[0] == 6 and not plan.rates_Bps[0, 6:].any()
    assert not plan.notify[0]  # caught up with F_b^max: no reduction needed at the PS


def test_b_cap_default_and_literal():
    kw = dict(role=[Role.AGGREGATION], sent_bytes=[0.0], ref_bytes=[2 * GB * T])
    plan = one_flow(B_Bps=[0.7 * GB], params=MlccParams(delta_within_avail=False), **kw)  # r0 + Delta = 2 GB > B -> B
    assert math.isclose(plan.rates_Bps[0, 0], 0.7 * GB) and plan.capped[0]
    assert plan.notify[0] and math.isclose(plan.notify_ceiling_bytes[0], 0.7 * GB * T)
    assert math.isclose(plan.notify_reduce_bytes[0], 1.3 * GB * T)
    low = one_flow(B_Bps=[0.2 * GB], params=MlccParams(delta_within_avail=False), **kw)  # B < r0: the default keeps r0 (Q-M10)
    assert math.isclose(low.rates_Bps[0, 0], 0.5 * GB)
    lit = one_flow(B_Bps=[0.2 * GB], params=MlccParams(literal_b_cap=True, delta_within_avail=False), **kw)  # the paper: B
    assert math.isclose(lit.rates_Bps[0, 0], 0.2 * GB)
    assert math.isclose(lit.rates_Bps[0].sum() * T, 3 * GB * T)  # re-planned: the rest moved later


def test_increase_never_beyond_remaining_bytes():
    plan = one_flow(G_bytes=[0.1 * GB * T], role=[Role.RING], sent_bytes=[0.0], ref_bytes=[5 * GB * T])
    assert math.isclose(plan.rates_Bps[0, 0], 0.1 * GB) and plan.capped[0]
    assert not plan.rates_Bps[0, 1:].any()


def test_notifications_by_role():
    n = 4
    plan = allocate(np.full(n, GB * T), np.arange(n)[:, None], np.zeros((n, 10)), np.full(n, GB),
                    np.full(n, GB), np.full(n, 0.5 * GB),
                    role=[Role.NONE, Role.AGGREGATION, Role.BROADCAST, Role.RING],
                    sent_bytes=np.zeros(n), ref_bytes=[np.nan, 3 * GB * T, 3 * GB * T, 0.0],
                    slack_bytes=[0, 0, 0, 0.25 * GB * T])
    np.testing.assert_array_equal(plan.notify, [False, True, False, True])  # ring succ unknown: notify
    assert np.isnan(plan.notify_ceiling_bytes[[0, 2]]).all()
    assert math.isclose(plan.notify_ceiling_bytes[3], GB * T + 0.25 * GB * T)
    assert np.isnan(plan.notify_reduce_bytes[3])
    known = allocate(np.full(1, GB * T), np.zeros((1, 1), int), np.zeros((1, 10)), [GB], [GB], [GB],
                     role=[Role.RING], sent_bytes=[0.0], ref_bytes=[0.0], slack_bytes=[0.0],
                     succ_bytes=[0.5 * GB * T])
    assert not known.notify[0]  # the successor is not ahead of the ceiling (Q-M9)


# -- Q-M8 waves and sharing, Q-M4 floor --------------------------------------------------------
def nic_host(n, G, **kw):
    """n flows leaving one NIC (link 0) to n different receivers (links 1..n)."""
    path = np.zeros((n, 1 + n), bool)
    path[:, 0] = True
    path[np.arange(n), 1 + np.arange(n)] = True
    return allocate(G, path, np.zeros((1 + n, 10)), np.full(1 + n, GB), np.full(1 + n, GB), np.full(n, GB), **kw)


def test_same_wave_flows_split_the_nic_equally():
    plan = nic_host(4, np.full(4, 2 * GB * T))
    np.testing.assert_allclose(plan.rates_Bps[:, :8], GB / 4)
    np.testing.assert_array_equal(plan.beta, 8)
    assert not plan.rates_Bps[:, 8:].any()


def test_progressive_filling_gives_leftover_to_the_big_flow():
    plan = nic_host(2, np.array([1.0, 8.0]) * GB * T)  # small fits in its half, the big one gets the rest
    assert plan.beta[0] == 2 and not plan.infeasible.any()
    np.testing.assert_allclose(plan.rates_Bps.sum(axis=0)[:plan.beta.max()], GB)


def test_priority_waves_are_sequential():
    plan = nic_host(3, np.full(3, 2 * GB * T), priority=[2, 0, 1])
    np.testing.assert_allclose(plan.rates_Bps[1, :2], GB)
    np.testing.assert_allclose(plan.rates_Bps[2, 2:4], GB)
    np.testing.assert_allclose(plan.rates_Bps[0, 4:6], GB)
    np.testing.assert_array_equal(plan.beta, [6, 2, 4])


def test_later_wave_sees_earlier_waves_in_price():
    # wave 0 takes slots 0-1 of the NIC; wave 1 has another link free in all slots but must
    # avoid the NIC slots wave 0 uses (bound) and prefers slots its price says are free.
    plan = nic_host(2, np.array([2.0, 1.0]) * GB * T, priority=[0, 1])
    assert plan.rates_Bps[1, :2].sum() == 0 and math.isclose(plan.rates_Bps[1, 2], GB)


def test_floor_when_nothing_is_available():
    n = 3
    path = np.zeros((n, 1), bool) | True
    load = np.full((1, 10), GB)  # the NIC is fully booked by other hosts
    plan = allocate(np.full(n, GB * T), path, load, [GB], [GB], np.full(n, GB))
    assert plan.floored.all()
    np.testing.assert_allclose(plan.rates_Bps[:, 0], 0.01 * GB / n)  # the floor is shared
    assert plan.infeasible.all() and (plan.beta == 10).all()
    off = allocate(np.full(n, GB * T), path, load, [GB], [GB], np.full(n, GB), params=MlccParams(min_rate_frac=0))
    assert not off.rates_Bps.any() and not off.floored.any()


def test_path_forms_are_equivalent():
    rng = np.random.default_rng(3)
    n, L = 12, 6
    inc = rng.random((n, L)) < 0.4
    inc[np.arange(n), rng.integers(0, L, n)] = True
    P = inc.sum(1).max()
    idx = np.full((n, P), -1)
    for i in range(n):
        idx[i, :inc[i].sum()] = rng.permutation(np.flatnonzero(inc[i]))
    args = (rng.uniform(0.1, 3, n) * GB * T,)
    rest = (rng.uniform(0, GB, (L, 10)), np.full(L, GB), np.full(L, GB), np.full(n, GB))
    a = allocate(*args, inc, *rest)
    b = allocate(*args, idx, *rest)
    np.testing.assert_allclose(a.rates_Bps, b.rates_Bps)
    i1, p1 = path_links(inc, n, L)
    i2, _ = path_links(idx, n, L)
    np.testing.assert_array_equal(i1, i2)
    assert p1.shape == (n, P)


def test_avail_per_slot_and_clamped_to_capacity():
    avail = np.array([[2 * GB] * 5 + [0.5 * GB] * 5])  # above capacity -> clamped to c_l
    plan = allocate([20 * GB * T], np.ones((1, 1), bool), np.zeros((1, 10)), avail, [GB], [GB])
    np.testing.assert_allclose(plan.rates_Bps[0], [GB] * 5 + [0.5 * GB] * 5)


def test_empty_and_finished_flows():
    plan = allocate(np.zeros(0), np.zeros((0, 2), bool), np.zeros((2, 10)), [GB, GB], [GB, GB], np.zeros(0))
    assert plan.rates_Bps.shape == (0, 10)
    done = allocate([0.0], np.ones((1, 2), bool), np.zeros((2, 10)), [GB, GB], [GB, GB], [GB])
    assert not done.rates_Bps.any() and done.beta[0] == 0 and done.cost[0] == 0 and not done.floored[0]


def test_deterministic_repeat():
    rng = np.random.default_rng(11)
    n, L = 50, 8
    args = (rng.uniform(0, 5, n) * GB * T, rng.integers(-1, L, (n, 3)), rng.uniform(0, GB, (L, 10)),
            np.full(L, GB), np.full(L, GB), np.full(n, GB))
    args[1][:, 0] = 0
    a, b = allocate(*args), allocate(*args)
    np.testing.assert_array_equal(a.rates_Bps, b.rates_Bps)


# -- validation --------------------------------------------------------------------------------
def base_args():
    return dict(G_bytes=[GB * T], path=np.ones((1, 2), bool), load_Bps=np.zeros((2, 10)),
                avail_Bps=[GB, GB], cap_Bps=[GB, GB], B_Bps=[GB])


@pytest.mark.parametrize("change, match", [
    (dict(G_bytes=[-1.0]), "G_bytes: negative"),
    (dict(G_bytes=[np.nan]), "G_bytes: NaN"),
    (dict(G_bytes=[[1.0]]), "G_bytes: expected 1-D"),
    (dict(load_Bps=np.zeros((2, 9))), r"load_Bps: expected shape \(2, 10\)"),
    (dict(load_Bps=np.full((2, 10), np.inf)), "load_Bps: NaN or inf"),
    (dict(cap_Bps=[GB, 0.0]), "cap_Bps: link 1 has capacity 0"),
    (dict(avail_Bps=[GB]), r"avail_Bps: expected shape \(2,\)"),
    (dict(avail_Bps=[GB, -1.0]), "avail_Bps: negative"),
    (dict(B_Bps=[GB, GB]), r"B_Bps: expected shape \(1,\)"),
    (dict(path=np.zeros((1, 2), bool)), "crosses no link"),
    (dict(path=np.array([[0, 5]])), "link indices must be in"),
    (dict(path=np.ones((1, 3), bool)), "boolean incidence must be"),
    (dict(path=np.ones((1, 2))), "dtype float64 not understood"),
    (dict(role=[7], ref_bytes=[0.0]), "role: values must be"),
    (dict(role=[Role.RING]), "ref_bytes: required"),
    (dict(role=[Role.RING], ref_bytes=[np.nan]), "ref_bytes: flow 0 has a dependency role"),
    (dict(sent_bytes=[-2.0]), "sent_bytes: negative"),
    (dict(succ_bytes=[np.inf]), "succ_bytes: inf"),
    (dict(priority=[0, 1]), r"priority: expected shape \(1,\)"),
])
def test_validation_errors(change, match):
    args = base_args()
    args.update(change)
    with pytest.raises(ValueError, match=match):
        allocate(**args)


@pytest.mark.parametrize("bad", [dict(K=0), dict(slot_s=0), dict(slot_s=math.nan), dict(w_beta=-1),
                                 dict(min_rate_frac=2), dict(max_rounds=0), dict(K=True)])
def test_params_validation(bad):
    with pytest.raises(ValueError, match="MlccParams"):
        MlccParams(**bad)


def test_reduction_validation():
    plan = allocate(**base_args())
    with pytest.raises(ValueError, match="ceiling_bytes: flow 0"):
        apply_reductions(plan, [np.nan])
    with pytest.raises(ValueError, match="ceiling_bytes: expected shape"):
        apply_reductions(plan, [1.0, 2.0])
    assert apply_reductions(plan, [np.inf]).rates_Bps[0, 0] == plan.rates_Bps[0, 0]
    with pytest.raises(ValueError, match="params.K=5"):
        apply_reductions(plan, [np.inf], MlccParams(K=5))


def test_reference_brute_force_agrees_on_a_hand_case():
    """Sanity of the test's own oracle: 3 slots, one loaded slot."""
    A, price = [GB, GB, GB], [0.0, 3.0, 0.0]
    assert math.isclose(brute_min_cost(2 * GB * T, A, price), 3.0)
    assert ref_alg1(2 * GB * T, A, price)[1] == 3
