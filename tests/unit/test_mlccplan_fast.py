"""Shortcuts of the per-slot MLCC decision (core/mlcc.py, core/mlcchost.py) against the general paths
they skip: on random inputs both give the same plan, bit for bit, and bad input the same error."""

from __future__ import annotations

import re
from dataclasses import fields

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import hostctl.core.mlcchost as mlcchost
from hostctl.core.mlcc import (
    MlccParams, Role, _notifications, _path_min, _tol, allocate, apply_reductions, schedule_cost,
)

C = 62.5e6  # 500 Mbit/s in bytes/s
SETTINGS = settings(max_examples=150, deadline=None)


def _same(a, b, where: str) -> None:
    if a is None or b is None or np.isscalar(a):
        assert a == b, where
        return
    a, b = np.asarray(a), np.asarray(b)
    assert a.shape == b.shape and a.dtype == b.dtype, where
    np.testing.assert_array_equal(a, b, err_msg=where)  # (NaN == NaN here)


def _same_plan(got, want) -> None:
    for f in fields(want):
        _same(getattr(got, f.name), getattr(want, f.name), f.name)


@SETTINGS
@given(st.integers(1, 6), st.integers(1, 12), st.integers(1, 4), st.integers(1, 5), st.data())
def test_path_min_equals_the_min_over_gathered_rows(L, n, P, K, data):
    """_path_min (one gather per path position, min over them) gives ext[pidx].min(axis=1)."""
    vals = st.sampled_from([0.0, -0.0, 1e-9, 0.5, 1.0, 3.0, np.inf])
    ext = np.array(data.draw(st.lists(vals, min_size=(L + 1) * K, max_size=(L + 1) * K))).reshape(L + 1, K)
    ext[L] = np.inf
    pidx = np.array(data.draw(st.lists(st.integers(0, L), min_size=n * P, max_size=n * P))).reshape(n, P)
    np.testing.assert_array_equal(_path_min(ext, pidx.T), ext[pidx].min(axis=1))
    np.testing.assert_array_equal(_path_min(ext[:, 0], pidx.T), ext[:, 0][pidx].min(axis=1))


@st.composite
def host_rows(draw, roles: bool):
    """host_slot's arguments to the allocator for its planned flows (core/mlcchost._allocate): sizes,
    paths over a few links (some shared), loads and headroom from small sets (ties, full and empty
    links), waves, and with roles the references host_slot builds (NaN -> 0, succ for aggregation)."""
    n, L = draw(st.integers(1, 9)), draw(st.integers(1, 4))
    K = draw(st.sampled_from([1, 3, 10]))
    rng = np.random.default_rng(draw(st.integers(0, 2**32 - 1)))
    frac = np.array([0.0, 0.25, 0.5, 1.0])
    cap = rng.choice([C / 2, C], L)
    load = rng.choice(frac, (L, K)) * cap[:, None]
    avail = cap * rng.choice([0.7, 1.0], L) if draw(st.booleans()) else cap[:, None] * rng.choice(frac + 0.5, (L, K))
    path = np.full((n, 3), -1, dtype=np.int64)
    for i in range(n):
        links = rng.choice(L, size=rng.integers(1, min(L, 3) + 1), replace=False)
        path[i, :links.size] = links
    G = rng.choice([1e3, 0.3, 2.0, 6.0, 30.0], n) * C * 0.06
    B = rng.choice([0.1, 0.5, 1.0], n) * C
    sent = rng.choice([0.0, 1e5, 1e7], n)
    prio = rng.integers(0, draw(st.integers(1, 3)), n) if draw(st.booleans()) else None
    dep = {}
    if roles:
        rl = rng.integers(0, 4, n)
        rl[0] = Role.RING  # (host_slot passes roles only when some flow has one)
        ref = np.where(rng.random(n) < 0.2, 0.0, sent + rng.choice([0.0, 1e5, 1e7], n))
        dep = {"role": rl, "ref_bytes": ref,
               "succ_bytes": np.where((rl == Role.AGGREGATION.value) & (rng.random(n) < 0.8), ref, np.nan)}
        if draw(st.booleans()):
            dep["slack_bytes"] = np.where(rl == Role.RING.value, G / 4, 0.0)
    params = MlccParams(K=K, delta_within_avail=draw(st.booleans()), literal_b_cap=draw(st.booleans()))
    return G, path, load, avail, cap, B, sent, prio, params, dep


def _checked(G, path, load, avail, cap, B, sent, prio, params, dep):
    return allocate(G, path, load, avail, cap, B, sent_bytes=sent, priority=prio, params=params, **dep)


@SETTINGS
@given(st.booleans().flatmap(host_rows))
def test_host_slot_plans_through_allocate_prepared_as_allocate_would(args):
    """host_slot hands arrays that allocate() would accept straight to allocate_prepared: the same plan
    as allocate() itself, with and without dependency roles."""
    _same_plan(mlcchost._allocate(*args), _checked(*args))


@settings(max_examples=20, deadline=None)
@given(st.booleans().flatmap(host_rows))
def test_host_slot_skips_the_checks_on_good_arrays(args):
    def refuse(*a, **k):
        raise AssertionError("allocate() called on arrays it would accept")

    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(mlcchost, "allocate", refuse)
        mlcchost._allocate(*args)


@settings(max_examples=10, deadline=None)
@pytest.mark.parametrize("bad", ["role", "ref_negative", "ref_inf", "load_nan", "load_negative", "load_shape",
                                 "avail_inf", "sent_negative", "slack_negative", "cap_zero"])
@given(host_rows(True))
def test_host_slot_hands_bad_arrays_to_allocate_for_its_error(bad, args):
    """Arrays allocate() would refuse go to allocate(): the same error naming the argument."""
    G, path, load, avail, cap, B, sent, prio, params, dep = args
    dep = dict(dep, slack_bytes=np.zeros(G.size))
    load, avail, cap, sent = load.copy(), np.array(avail, dtype=float), cap.copy(), sent.copy()
    if bad == "role":
        dep["role"] = np.where(np.arange(G.size) == 0, 7, dep["role"])
    elif bad.startswith("ref"):
        dep["ref_bytes"] = dep["ref_bytes"].copy()
        dep["ref_bytes"][0] = -1.0 if bad == "ref_negative" else np.inf  # (flow 0 is a ring flow)
    elif bad == "load_nan":
        load[0, 0] = np.nan
    elif bad == "load_negative":
        load[0, 0] = -1.0
    elif bad == "load_shape":
        load = load[:, :1].repeat(params.K + 1, axis=1)
    elif bad == "avail_inf":
        avail.flat[0] = np.inf
    elif bad == "sent_negative":
        sent[0] = -1.0
    elif bad == "slack_negative":
        dep["slack_bytes"][0] = -1.0
    elif bad == "cap_zero":
        cap[0] = 0.0
    args = (G, path, load, avail, cap, B, sent, prio, params, dep)
    with pytest.raises(ValueError) as want:
        _checked(*args)
    with pytest.raises(ValueError, match=re.escape(str(want.value))):
        mlcchost._allocate(*args)


@SETTINGS
@given(host_rows(True), st.data())
def test_apply_reductions_without_a_binding_ceiling_is_the_plan_recomputed(args, data):
    """apply_reductions returns at once when no ceiling lowers any slot-0 rate: what its general path
    computes from the unchanged rates (cost, notifications and a reduction of 0)."""
    G, path, load, avail, cap, B, sent, prio, params, dep = args
    plan = _checked(*args)
    t = params.slot_s
    F = plan.sent_bytes + plan.rates_Bps[:, 0] * t
    above = np.array(data.draw(st.lists(st.sampled_from([np.inf, 0.0, 1.0, 1e6]), min_size=G.size,
                                        max_size=G.size)))
    got = apply_reductions(plan, F + above, params)
    beta, cost, complete = schedule_cost(plan.rates_Bps, plan.price, plan.remaining_bytes, slot_s=t,
                                         w_beta=params.w_beta)
    cum = plan.sent_bytes + plan.rates_Bps[:, 0] * t
    notify, ceiling, reduce = _notifications(plan.role, cum, plan.slack_bytes, plan.succ_bytes, _tol(cum))
    want = {"rates_Bps": plan.rates_Bps, "beta": beta, "cost": cost, "infeasible": ~complete, "cum_bytes": cum,
            "notify": notify, "notify_ceiling_bytes": ceiling, "notify_reduce_bytes": reduce,
            "reduction_bytes": plan.reduction_bytes + (plan.rates_Bps[:, 0] - plan.rates_Bps[:, 0]) * t}
    for f in fields(plan):
        _same(getattr(got, f.name), want.get(f.name, getattr(plan, f.name)), f.name)
    assert got.rates_Bps is not plan.rates_Bps


def _left_per_wave(wave, idle, planned, rate0, gidx, head0):
    """host_slot's idle headroom under a job order as first written: one bincount per idle wave."""
    L = head0.shape[0]
    out = np.append(head0, np.inf)[gidx].min(axis=1)
    for w in np.unique(wave[idle]).tolist():
        before = planned[wave[planned] < w]
        if before.size == 0:
            continue
        rb = gidx[before]
        use = np.bincount(rb.ravel(), weights=np.repeat(rate0[before], rb.shape[1]), minlength=L + 1)[:L]
        sel = idle & (wave == w)
        out[sel] = np.append(np.maximum(head0 - use, 0.0), np.inf)[gidx[sel]].min(axis=1)
    return out[idle]


@SETTINGS
@given(st.integers(1, 12), st.integers(1, 5), st.integers(1, 4), st.data())
def test_idle_headroom_under_a_job_order_equals_one_bincount_per_wave(n, L, P, data):
    """What the earlier waves leave an idle flow (mlcchost._left_by_earlier_waves, one bincount for all
    waves): the same floats as a bincount per wave."""
    wave = np.array(data.draw(st.lists(st.integers(0, 3), min_size=n, max_size=n)))
    idle = np.array(data.draw(st.lists(st.booleans(), min_size=n, max_size=n)))
    idle[0] = True
    planned = (~idle & np.array(data.draw(st.lists(st.booleans(), min_size=n, max_size=n)))).nonzero()[0]
    rate0 = np.array(data.draw(st.lists(st.sampled_from([0.0, 1e3, C / 7, C / 3, C]), min_size=n, max_size=n)))
    gidx = np.array(data.draw(st.lists(st.integers(0, L), min_size=n * P, max_size=n * P))).reshape(n, P)
    gidx[:, 0] = np.minimum(gidx[:, 0], L - 1)  # (every flow crosses a link)
    head0 = np.array(data.draw(st.lists(st.sampled_from([0.0, C / 5, C / 2, C]), min_size=L, max_size=L)))
    want = _left_per_wave(wave, idle, planned, rate0, gidx, head0)
    np.testing.assert_array_equal(mlcchost._left_by_earlier_waves(wave, idle, planned, rate0, gidx, head0), want)
