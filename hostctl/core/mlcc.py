"""MLCC rate allocator: Algorithms 1 and 2 of paper 004 (pure: numpy and stdlib only).

Spec: ``shared/spec/tensorlights-mlcc.md`` section 2.5-2.8, open questions Q-M1..Q-M16
(section 3), testable properties 8-18 (section 4). Design notes: ``docs/mlcc.md``.

One call of :func:`allocate` is one host's decision for one slot: arrays over the
host's ``n`` flows (the host is their sender) and over the ``L`` links the caller
assembled from its load tables, for the ``K`` slots ``0..K-1`` starting at the
current slot (slot 0 is the slot whose rate is applied now).

Units (Q-M14; the project writes units into names): volumes in bytes (float64),
rates in bytes/s (``*_Bps``), durations in seconds (``*_s``), slots as int indices
from 0. ``beta`` is the 1-based completion slot (the number of slots the plan
spans; 0 for a flow with nothing left, K when it does not finish within the
horizon), because the cost of Q-M3 counts slots from 1 as the paper does.

Steps of :func:`allocate` (each one names its source in the spec):

1. Headroom per link and slot, ``H_l(k) = (min(u_l(k), c_l) - b_l(k))_+`` (spec 2.7,
   Q-M5: the caller chose the reading of ``u``; clamped to ``[0, c_l]``). ``b`` is the
   load of *other* hosts; this host's own flows are accounted for in step 2 (Q-M8).
2. Algorithm 1 per flow (spec 2.6, :func:`initial_schedule`), on a per-flow bound
   ``A_i(k) = min over the path of the flow's share of H``. Own flows that share a
   link must not overbook it (Q-M8): flows are processed in priority *waves* (one
   wave per distinct ``priority`` value, ascending: sequential between waves, the
   paper's "one after another"), and inside a wave by a few rounds of progressive
   filling (equal split of what is left on each link among the wave's flows not yet
   planned, flows that fit or cannot gain are frozen, the rest split what remains).
   Every committed schedule is added to the own-load view that later rounds and
   waves see, in their bound and in their price. So the *sum* of this host's planned
   rates on a link is <= its headroom in every slot (property 8 for sums).
3. Starvation floor (Q-M4): a flow left with nothing in all K slots gets
   ``min_rate_frac * c_l / (own flows on l)`` (minimum over its path) from slot 0 on.
4. Algorithm 2 (spec 2.8): ``Delta_i = (F_ref - F_i)_+ / t`` with ``F_i = sent +
   r(0) t`` (bytes by the end of this slot); the increase is capped with B_i (Q-M10)
   and by the bytes left; the future slots of an adjusted flow are re-planned with
   Algorithm 1 restricted to slots ``1..K-1`` (Alg. 2 lines 10 and 13), inside a
   per-flow limit that keeps the host's sum on every link within its headroom.
5. Notifications (Alg. 2 lines 13-16, Q-M9): for aggregation and ring flows, the
   ceiling the receiver must hold its subsequent flows to by the end of this slot.
   The receiver applies it with :func:`apply_reductions`.

Choices for the open questions (section 3 of the spec), also in ``docs/mlcc.md``:

- Q-M1, Q-M2, Q-M7: not here (load table, clock, RPC order are the switch's and the
  daemon's). The allocator is called once per slot with slot 0 = the current slot.
- Q-M3: ``price(k) = sum_{l in path} load_l(k) / c_l`` with load = other hosts' load
  plus this host's already committed flows; ``bw_cost = sum_k (r(k) t / G) price(k)``;
  ``cost = w_beta * beta + bw_cost``. Slots are filled in ascending price order,
  ties to the earlier slot; deadlines with equal cost go to the earlier deadline.
  The price also orders the slots (it is the capacity-normalised path load; with
  equal capacities on a path it orders exactly as the path load PL of the paper).
- Q-M4: no feasible deadline -> every slot gets its full bound (``beta = K``,
  ``infeasible`` flag; the rest is re-planned as the horizon rolls). A flow whose
  bound is 0 in all slots gets the floor of step 3 (``floored`` flag; the only
  case in which property 8 may be exceeded, by at most ``min_rate_frac`` of a link).
- Q-M5, Q-M6: the caller passes per-link ``avail_Bps`` (û_l) and ``load_Bps`` (b_l);
  the allocator computes the sum (price) and the min (bound) itself.
- Q-M8: own flows see each other through waves + progressive filling (step 2).
  ``load_Bps`` must therefore exclude *all* this host's flows being scheduled (if a
  switch only excludes the requesting flow, subtract the host's previous schedules,
  e.g. with :func:`link_load_Bps`).
- Q-M9: notify when the successor is ahead of the ceiling (``succ_bytes > ceiling``);
  when the caller does not know the successor's bytes (NaN), always notify.
- Q-M10: default ``r' = min(r + Delta, max(r, B_i))`` (the cap never lowers the Alg. 1
  rate); ``literal_b_cap=True``: ``r' = r + Delta if r + Delta < B_i else B_i``.
  The increase is limited to the headroom left in slot 0 (``delta_within_avail=True``, the
  default: Delta never books a link beyond capacity); ``False`` caps with B_i only, as the paper.
- Q-M11: ring flows carry ``slack_bytes`` (one chunk, G_f/N); the ceiling sent to a
  ring successor is ``F_i + slack``; the increase rule uses F_pred without slack
  (property 16).
- Q-M12, Q-M13: sizes and iterations come from the caller (monitor / hints).
- Q-M14: rates in bytes/s here (not bits/s): the pacer takes bytes/s, no conversion.
- Q-M15: T := K (deadlines 1..K).
- Q-M16: enforcement is the pacer's (the daemon applies ``rates_Bps[:, 0]``).
"""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass, replace
from enum import IntEnum
from typing import NamedTuple

import numpy as np

__all__ = [
    "Role", "MlccParams", "MlccPlan", "Alg1Result", "initial_schedule", "allocate",
    "apply_reductions", "schedule_cost", "link_load_Bps", "path_links",
]

REL_EPS = 1e-9  # relative byte tolerance: "all bytes planned" means >= G * (1 - REL_EPS) - ABS_EPS_BYTES
ABS_EPS_BYTES = 1e-6


class Role(IntEnum):
    """Dependency role of a flow (spec 2.8.1). Pass as an int array (``Role.RING`` etc.). Compare arrays
    with ``Role.RING.value``: numpy takes several times longer to compare with the enum member itself."""

    NONE = 0  # no dependency: Delta = 0, no notification
    AGGREGATION = 1  # worker -> PS p; reference F_b^max(p); notifies p's broadcast flows
    BROADCAST = 2  # PS p -> worker; reference F_a^min(p); no notification
    RING = 3  # worker -> successor; reference F_pred; notifies the successor's ring flow


@dataclass(frozen=True)
class MlccParams:
    """Allocator parameters (Appendix A of the spec for the defaults).

    K: slots in the horizon (T := K, Q-M15). slot_s: slot length t (s).
    w_beta: weight of the completion slot in the cost (Q-M3).
    min_rate_frac: starvation floor as a fraction of link capacity, shared by this
    host's flows on the link (Q-M4). literal_b_cap: Q-M10 literal reading.
    delta_within_avail: limit Alg. 2 increases to the headroom left in slot 0.
    max_rounds: progressive-filling rounds per wave (Q-M8); the last one commits all.
    slot0_job_booked: within a job, plan the current slot within what the job's flows on other hosts
    booked for it; the job's explicit share of a link counts from the next slot on (those hosts fixed
    their current slot when they planned it and give way only at their next plan). Off by default: it
    keeps an incast's first slot within capacity but made average JCT worse on the testbed.
    slot0_within_free: plan the current slot within everything the other hosts booked for it (the
    view's busy0_Bps), so that a job's share and precedence count from the next slot on. Off by
    default: it removes most overbooking of the current slot but made average JCT worse on the
    testbed (docs/benchmarks.md).
    """

    K: int = 10
    slot_s: float = 0.060
    w_beta: float = 1.0
    min_rate_frac: float = 0.01
    literal_b_cap: bool = False
    delta_within_avail: bool = True
    max_rounds: int = 3
    slot0_job_booked: bool = False
    slot0_within_free: bool = False

    def __post_init__(self) -> None:
        if isinstance(self.K, bool) or not isinstance(self.K, (int, np.integer)) or self.K < 1:
            raise ValueError(f"MlccParams.K={self.K!r}: must be an int >= 1 (slots in the horizon)")
        for name, lo, hi in (("slot_s", 0.0, math.inf), ("w_beta", 0.0, math.inf), ("min_rate_frac", 0.0, 1.0)):
            v = getattr(self, name)
            if isinstance(v, bool) or not isinstance(v, (int, float, np.floating, np.integer)) \
                    or not math.isfinite(v) or v < lo or v > hi or (name == "slot_s" and v <= 0):
                raise ValueError(f"MlccParams.{name}={v!r}: must be a finite number in "
                                 f"{'(' if name == 'slot_s' else '['}{lo}, {hi}]")
        if isinstance(self.max_rounds, bool) or not isinstance(self.max_rounds, (int, np.integer)) \
                or self.max_rounds < 1:
            raise ValueError(f"MlccParams.max_rounds={self.max_rounds!r}: must be an int >= 1")


class Alg1Result(NamedTuple):
    """Result of :func:`initial_schedule` for n independent flows."""

    rates_Bps: np.ndarray  # [n, K] planned rate per slot
    beta: np.ndarray  # [n] int, 1-based completion slot (K when infeasible, 0 when G = 0)
    cost: np.ndarray  # [n] w_beta * beta + bw_cost
    feasible: np.ndarray  # [n] bool, all bytes fit within the horizon


@dataclass(frozen=True)
class MlccPlan:
    """One host's decision for one slot (all arrays over its n flows).

    ``rates_Bps[:, 0]`` is the rate to apply now; ``rates_Bps[:, 1:]`` the plan to
    publish (update_schedule). Notifications: for every flow with ``notify`` set,
    tell the scheduler of the flow's receiver the ceiling ``notify_ceiling_bytes``
    (cumulative bytes of its subsequent flow(s) by the end of this slot); the
    receiver computes its own ceiling per flow (a PS: the min over its aggregation
    flows' ceilings = F_a^min) and calls :func:`apply_reductions`.
    """

    rates_Bps: np.ndarray  # [n, K] final plan (after Alg. 2 and any reductions)
    alg1_rates_Bps: np.ndarray  # [n, K] Algorithm 1 plan (before Alg. 2)
    beta: np.ndarray  # [n] int, 1-based completion slot of the final plan (K: not within the horizon)
    cost: np.ndarray  # [n] w_beta * beta + bw_cost of the final plan (Q-M3)
    delta_Bps: np.ndarray  # [n] Delta_i of Alg. 2 (>= 0), before any cap
    capped: np.ndarray  # [n] bool: Delta_i > 0 and the applied rate < r + Delta_i (B_i or bytes left)
    infeasible: np.ndarray  # [n] bool: the plan does not carry all remaining bytes within K slots
    floored: np.ndarray  # [n] bool: given the starvation floor (Q-M4)
    cum_bytes: np.ndarray  # [n] F_i = sent + rates[:, 0] * slot_s (bytes by the end of this slot)
    notify: np.ndarray  # [n] bool: send a reduce notification to the flow's receiver (Q-M9)
    notify_ceiling_bytes: np.ndarray  # [n] ceiling for the receiver's subsequent flow(s); NaN if none
    notify_reduce_bytes: np.ndarray  # [n] expected reduction (succ - ceiling)_+; NaN if unknown
    reduction_bytes: np.ndarray  # [n] bytes taken off slot 0 by apply_reductions (0 from allocate)
    # Kept for apply_reductions (re-planning and new notifications):
    limit_Bps: np.ndarray  # [n, K] per-flow bound for re-planning slots 1..K-1 (sum-safe per link)
    price: np.ndarray  # [n, K] the Q-M3 price each flow was planned with
    remaining_bytes: np.ndarray  # [n] G at the start of this slot
    sent_bytes: np.ndarray  # [n] bytes sent this iteration before this slot
    role: np.ndarray  # [n] int8 Role
    slack_bytes: np.ndarray  # [n]
    succ_bytes: np.ndarray  # [n] successor's cumulative bytes (NaN: unknown)
    rounds: int = 0  # Alg. 1 batches run (waves x rounds, + 1 for the Alg. 2 re-plan)


# --------------------------------------------------------------------------------------------
# validation helpers


def _arr(x, name: str, ndim: int | tuple[int, ...], *, allow_nan: bool = False, nonneg: bool = True,
         dtype=np.float64) -> np.ndarray:
    try:
        a = np.asarray(x, dtype=dtype)
    except (TypeError, ValueError) as e:
        raise ValueError(f"{name}: cannot be read as a {np.dtype(dtype).name} array ({e})") from None
    dims = (ndim,) if isinstance(ndim, int) else ndim
    if a.ndim not in dims:
        raise ValueError(f"{name}: expected {' or '.join(f'{d}-D' for d in dims)}, got shape {a.shape}")
    if a.size == 0:
        return a
    lo, hi = a.min(), a.max()  # NaN and inf show up here: two reductions on the fast path
    if a.dtype.kind == "f" and not (math.isfinite(lo) and math.isfinite(hi)):
        bad = ~np.isfinite(a)
        if allow_nan:
            bad &= ~np.isnan(a)
        if bad.any():
            what = "inf" if allow_nan else "NaN or inf"
            raise ValueError(f"{name}: {what} at index {tuple(int(i) for i in np.argwhere(bad)[0])}")
        lo = np.nanmin(a) if not np.isnan(a).all() else 0.0
    if nonneg and lo < 0:
        i = tuple(int(v) for v in np.argwhere(a < 0)[0])
        raise ValueError(f"{name}: negative value {a[i]!r} at index {i}")
    return a


def _shape(a: np.ndarray, name: str, shape: tuple[int, ...]) -> None:
    if a.shape != shape:
        raise ValueError(f"{name}: expected shape {shape}, got {a.shape}")


def path_links(path, n: int, L: int) -> tuple[np.ndarray, np.ndarray]:
    """Normalise a path description to (incidence [n, L] float 0/1, padded link index [n, P]).

    ``path`` is either a boolean incidence matrix ``[n, L]`` (True: the flow crosses
    the link) or an integer array ``[n, P]`` of link indices padded with -1. In the
    padded index the padding is ``L`` (it points at an extra +inf row in gathers).
    Every flow must cross at least one link.
    """
    p = np.asarray(path)
    if p.ndim != 2 or p.shape[0] != n:
        raise ValueError(f"path: expected [n={n}, L] bool or [n={n}, P] int (-1 padded), got shape {p.shape}")
    if p.dtype == np.bool_:
        if p.shape[1] != L:
            raise ValueError(f"path: boolean incidence must be [n, L={L}], got {p.shape}")
        counts = p.sum(axis=1)
        P = int(counts.max()) if n else 0
        order = np.argsort(~p, axis=1, kind="stable")[:, :P]
        valid = np.take_along_axis(p, order, axis=1)
        pidx = np.where(valid, order, L)
        inc = p.astype(np.float64)
    elif p.dtype.kind in "iu":
        if p.size and (p.min() < -1 or p.max() >= L):
            raise ValueError(f"path: link indices must be in [0, {L}) or -1 for padding, "
                             f"got range [{p.min()}, {p.max()}]")
        pidx = np.where(p >= 0, p, L).astype(np.intp)
        counts = (p >= 0).sum(axis=1)
        inc1 = np.zeros((n, L + 1))
        inc1[np.arange(n)[:, None], pidx] = 1.0
        inc = inc1[:, :L]
    else:
        raise ValueError(f"path: dtype {p.dtype} not understood (use bool incidence or int link indices)")
    if n and (counts == 0).any():
        raise ValueError(f"path: flow {int(np.argmin(counts))} crosses no link "
                         "(every flow needs its NIC link at least)")
    return inc, pidx


def _path_min(ext: np.ndarray, pT: np.ndarray) -> np.ndarray:
    """min over each flow's path of a per-link array with the padding row, ext [L + 1, ...] (row L: +inf),
    for the transposed padded index pT [P, n] -> [n, ...]. (Link-major: one contiguous gather per path
    position and an elementwise min over them; ext[pidx].min(axis=1) gives the same floats, several times
    slower.)"""
    return ext.take(pT, axis=0).min(axis=0)


@functools.lru_cache(maxsize=64)
def _deadlines(K: int, first_slot: int) -> np.ndarray:
    d = np.arange(first_slot + 1, K + 1)[None, :, None]
    d.flags.writeable = False
    return d


def _tol(G: np.ndarray) -> np.ndarray:
    return REL_EPS * G + ABS_EPS_BYTES


def link_load_Bps(path, rates_Bps, n_links: int) -> np.ndarray:
    """Per-link load [L, K] of flows with the given rates [n, K] (e.g. to subtract this
    host's previously published schedules from a switch's feedback, Q-M8)."""
    r = _arr(rates_Bps, "rates_Bps", 2)
    inc, _ = path_links(path, r.shape[0], n_links)
    return inc.T @ r


# --------------------------------------------------------------------------------------------
# Algorithm 1


def schedule_cost(rates_Bps, price, G_bytes, *, slot_s: float, w_beta: float = 1.0,
                  ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(beta, cost, complete) of given plans [n, K] (Q-M3).

    beta = 1 + last slot with a positive rate (0 if none); a plan that does not carry
    G within the horizon gets beta = K (Q-M4). cost = w_beta * beta + sum_k (r(k) t / G)
    price(k); cost 0 for G = 0.
    """
    r = np.asarray(rates_Bps, dtype=np.float64)
    G = np.asarray(G_bytes, dtype=np.float64)
    n, K = r.shape
    sent = r * slot_s
    complete = sent.sum(axis=1) >= G - _tol(G)
    used = r > 0
    beta = np.where(used, np.arange(1, K + 1, dtype=np.int64), 0).max(axis=1, initial=0)  # 1 + last slot used, 0 if none
    beta = np.where(complete, beta, K)
    Gs = np.where(G > 0, G, 1.0)
    cost = w_beta * beta + (sent * price).sum(axis=1) / Gs
    return beta.astype(np.int64), np.where(G > 0, cost, 0.0), complete


def initial_schedule(G_bytes, avail_Bps, price, *, slot_s: float, w_beta: float = 1.0,
                     first_slot: int = 0) -> Alg1Result:
    """Algorithm 1 (spec 2.6) for n independent flows, vectorised: [n] and [n, K] arrays.

    For every deadline beta_hat in first_slot+1..K (line 1; Q-M15: T = K), the slots
    0..beta_hat-1 are taken in ascending ``price`` order, ties to the earlier slot
    (lines 2-3), and each gets ``min(A(k), rest / t)`` until the flow's bytes are
    planned (lines 4-9). A deadline is feasible when all bytes fit (line 10); its cost
    is ``w_beta * beta + sum (r t / G) price`` with beta the last slot actually used
    (lines 11-12, Q-M3). The cheapest feasible deadline wins, the earliest on ties
    (line 13). No feasible deadline: every slot from first_slot on gets A(k) (Q-M4).
    Slots before ``first_slot`` get nothing (used to re-plan the future slots only).

    Vectorisation: one stable argsort per flow gives the price order of all K slots;
    the order restricted to deadline d is the same sequence with slots >= d masked,
    so all (flow, deadline) pairs are one [n, D, K] cumulative sum. O(n K^2) work.
    """
    G = np.asarray(G_bytes, dtype=np.float64)
    A = np.asarray(avail_Bps, dtype=np.float64)
    pr = np.asarray(price, dtype=np.float64)
    n, K = A.shape
    if n == 0:
        z = np.zeros(0)
        return Alg1Result(np.zeros((0, K)), z.astype(np.int64), z, z.astype(bool))
    return _alg1(G, _tol(G), A, pr, slot_s, w_beta, first_slot)


def _alg1(G, tol, A, pr, slot_s, w_beta, first_slot, rates_only=False):
    """initial_schedule for n >= 1 flows (tol = _tol(G)); rates_only: its rates_Bps alone."""
    n, K = A.shape
    rows = np.arange(n)[:, None]
    order = np.argsort(pr, axis=1, kind="stable")  # line 3: H sorted by price, earlier slot on ties
    cap_sorted = A[rows, order] * slot_s  # bytes each slot can carry, in price order
    price_sorted = pr[rows, order]
    deadlines = _deadlines(K, first_slot)  # line 2: beta_hat, as a [1, D, 1] column
    slot1 = order[:, None, :] + 1  # 1-based slot of each sorted position
    c = cap_sorted[:, None, :] * (slot1 <= deadlines)  # [n, D, K] capacity usable under beta_hat
    cum = c.cumsum(axis=2)
    fill = G[:, None, None] - cum  # lines 6-8 in price order: min(c, rest before the slot), rest = G - (cum - c)
    fill += c
    np.minimum(fill, c, out=fill)
    used = fill > tol[:, None, None]  # no slot is opened for rounding dust (also drops fill <= 0)
    fill *= used
    feasible = cum[:, :, -1] >= (G - tol)[:, None]  # line 10
    beta_d = (slot1 * used).max(axis=2)  # line 11: beta = last slot used
    Gs = np.where(G > 0, G, 1.0)[:, None]
    bw_d = np.matmul(fill, price_sorted[:, :, None])[:, :, 0] / Gs
    cost_d = w_beta * beta_d + bw_d  # line 12
    any_feasible = feasible.any(axis=1)
    best = np.where(feasible, cost_d, np.inf).argmin(axis=1)  # line 13, earliest on ties
    best[~any_feasible] = deadlines.size - 1  # Q-M4: the widest deadline = all slots
    r1 = rows[:, 0]
    rates = np.empty((n, K))
    rates[rows, order] = fill[r1, best] / slot_s
    if rates_only:
        return rates
    beta = np.where(any_feasible, beta_d[r1, best], K)
    cost = np.where(any_feasible, cost_d[r1, best], w_beta * K + bw_d[r1, best])
    cost[G <= 0] = 0.0
    return Alg1Result(rates, beta.astype(np.int64), cost, any_feasible)


def _alg1_rates(G: np.ndarray, tol: np.ndarray, A: np.ndarray, price: np.ndarray, slot_s: float,
                w_beta: float) -> np.ndarray:
    """initial_schedule(...).rates_Bps, with two kinds of flows answered without the sort over
    deadlines: those that no deadline can fit, for which Algorithm 1 gives every slot all of A(k)
    (Q-M4), slots of rounding dust excepted, and the same floats come from (A t) / t here (a flow
    of unknown size is always one of them; only clear cases, short by more than 1e-9 of G beyond
    any difference in summation order, skip it); and those with one price in every slot (below)."""
    At = A * slot_s
    short = At.sum(axis=1) < (G - tol) * (1.0 - 1e-9)
    if short.all():
        return np.where(At > tol[:, None], At, 0.0) / slot_s
    # A flow whose price is the same in every slot (local mode's first round: no load yet) is filled
    # slot by slot in time order: Algorithm 1's stable sort keeps that order, every feasible deadline
    # then gives the same fill (the slots after the bytes are covered get only dust, which is
    # dropped) and so the same cost, and the earliest wins; the fill below is the widest deadline's,
    # computed with the same float operations as initial_schedule's.
    flat = (price == price[:, :1]).all(axis=1) & ~short
    hard = ~(short | flat)
    if hard.all():
        return _alg1(G, tol, A, price, slot_s, w_beta, 0, rates_only=True)
    rates = np.where(At > tol[:, None], At, 0.0) / slot_s  # (the short ones' rates)
    if flat.any():
        c = At[flat]
        fill = G[flat][:, None] - c.cumsum(axis=1)  # lines 6-8: min(A t, rest before the slot)
        fill += c
        np.minimum(fill, c, out=fill)
        fill *= fill > tol[flat][:, None]
        rates[flat] = fill / slot_s
    if hard.any():
        rates[hard] = _alg1(G[hard], tol[hard], A[hard], price[hard], slot_s, w_beta, 0, rates_only=True)
    return rates


# --------------------------------------------------------------------------------------------
# Algorithm 2 pieces


def _notifications(role, cum, slack, succ, tol):
    """Alg. 2 lines 13-16 with Q-M9/Q-M11: ceiling for the receiver's subsequent flows."""
    agg = role == Role.AGGREGATION.value
    ring = role == Role.RING.value
    ceiling = np.where(agg, cum, np.where(ring, cum + slack, np.nan))
    reduce = np.maximum(succ - ceiling, 0.0)  # NaN where succ or ceiling unknown
    notify = (agg | ring) & (np.isnan(succ) | (reduce > tol))
    return notify, ceiling, reduce


def _replan_future(G, r0, limit, price, slot_s, w_beta):
    """Alg. 2 lines 10/13: re-plan G - r0 t over slots 1..K-1 within ``limit``."""
    rest = np.maximum(G - r0 * slot_s, 0.0)
    if limit.shape[1] == 1:  # K = 1: there is no future slot
        return r0[:, None].copy(), rest <= _tol(G)
    A = limit.copy()
    A[:, 0] = 0.0
    res = initial_schedule(rest, A, price, slot_s=slot_s, w_beta=w_beta, first_slot=1)
    rates = res.rates_Bps
    rates[:, 0] = r0
    return rates, res.feasible


# --------------------------------------------------------------------------------------------
# the per-slot decision


def allocate(G_bytes, path, load_Bps, avail_Bps, cap_Bps, B_Bps, *, role=None, sent_bytes=None,
             ref_bytes=None, slack_bytes=None, succ_bytes=None, priority=None,
             params: MlccParams = MlccParams()) -> MlccPlan:
    """One host's MLCC decision for the current slot (Alg. 2 around Alg. 1, spec 2.3 steps 2-4).

    Arrays (n flows of this host, L links, K = params.K slots from the current one):
      G_bytes [n]        remaining bytes of each flow this iteration (monitor).
      path               [n, L] bool incidence, or [n, P] int link indices padded with -1.
      load_Bps [L, K]    b_l(k): planned load of *other hosts'* flows (switch feedback,
                         minus this host's own schedules; Q-M8).
      avail_Bps [L] or [L, K]  û_l: capacity available to ML traffic (spec 2.7, Q-M5).
      cap_Bps [L]        c_l, link capacity (> 0).
      B_Bps [n]          B_i, max measured sending rate over the last 4 slots (spec 2.7).
      role [n]           Role per flow (default all NONE).
      sent_bytes [n]     bytes the flow sent this iteration before this slot (default 0).
      ref_bytes [n]      reference cumulative bytes by the end of this slot, as reported by
                         the peers: F_b^max (aggregation), F_a^min (broadcast), F_pred (ring).
                         Ignored (may be NaN) for role NONE.
      slack_bytes [n]    ring slack, one chunk = G_f / N (Q-M11) (default 0).
      succ_bytes [n]     cumulative bytes of the subsequent flow at the receiver, if known
                         (NaN: unknown, always notify). Default: ref_bytes for aggregation
                         flows (the PS's F_b^max), unknown for ring flows.
      priority [n]       int, lower first: one wave per distinct value (Q-M8). Default: one wave.
    Raises ValueError naming the bad argument (shape, NaN/inf, negative value).
    """
    p = params
    K, t = int(p.K), float(p.slot_s)
    G = _arr(G_bytes, "G_bytes", 1)
    n = G.shape[0]
    load = _arr(load_Bps, "load_Bps", 2)
    L = load.shape[0]
    _shape(load, "load_Bps", (L, K))
    cap = _arr(cap_Bps, "cap_Bps", 1)
    _shape(cap, "cap_Bps", (L,))
    if (cap <= 0).any():
        raise ValueError(f"cap_Bps: link {int(np.argmax(cap <= 0))} has capacity 0 (links must have c_l > 0)")
    avail = _arr(avail_Bps, "avail_Bps", (1, 2))
    if avail.ndim == 1:
        _shape(avail, "avail_Bps", (L,))
        avail = avail[:, None]  # (only H reads it: broadcast there)
    else:
        _shape(avail, "avail_Bps", (L, K))
    B = _arr(B_Bps, "B_Bps", 1)
    _shape(B, "B_Bps", (n,))
    rl = np.zeros(n, np.int8) if role is None else _arr(role, "role", 1, dtype=np.int64)
    _shape(rl, "role", (n,))
    if ((rl < 0) | (rl > 3)).any():
        raise ValueError(f"role: values must be Role 0..3 (NONE, AGGREGATION, BROADCAST, RING), got {np.unique(rl)}")
    rl = rl.astype(np.int8)
    sent = np.zeros(n) if sent_bytes is None else _arr(sent_bytes, "sent_bytes", 1)
    _shape(sent, "sent_bytes", (n,))
    dep = rl != Role.NONE.value
    if ref_bytes is None:
        if dep.any():
            raise ValueError("ref_bytes: required when some flow has a dependency role")
        ref = np.zeros(n)
    else:
        ref = _arr(ref_bytes, "ref_bytes", 1, allow_nan=True, nonneg=False)
        _shape(ref, "ref_bytes", (n,))
        bad = dep & (np.isnan(ref) | (ref < 0))
        if bad.any():
            raise ValueError(f"ref_bytes: flow {int(np.argmax(bad))} has a dependency role but ref "
                             f"{ref[np.argmax(bad)]!r} (must be a finite number >= 0)")
        ref = np.where(dep, ref, 0.0)
    slack = np.zeros(n) if slack_bytes is None else _arr(slack_bytes, "slack_bytes", 1)
    _shape(slack, "slack_bytes", (n,))
    if succ_bytes is None:
        succ = np.where(rl == Role.AGGREGATION.value, ref, np.nan)
    else:
        succ = _arr(succ_bytes, "succ_bytes", 1, allow_nan=True)
        _shape(succ, "succ_bytes", (n,))
    prio = None
    if priority is not None:
        prio = _arr(priority, "priority", 1, nonneg=False, dtype=np.int64)
        _shape(prio, "priority", (n,))
    inc, pidx = path_links(path, n, L)
    return allocate_prepared(G, inc, pidx, load, avail, cap, B, sent, prio, p, rl=rl if dep.any() else None,
                             ref=ref, slack=slack, succ=succ)


def allocate_prepared(G, inc, pidx, load, avail, cap, B, sent, prio, p: MlccParams, *, rl=None, ref=None,
                      slack=None, succ=None) -> MlccPlan:
    """allocate() on arrays it has checked (and host_slot, which builds them): G [n], inc [n, L] and
    pidx [n, P] from path_links, load [L, K], avail [L, 1] or [L, K], cap [L], B [n], sent [n],
    prio [n] int64 or None, rl [n] int8 (None: no flow has a dependency role, so Algorithm 2 changes
    nothing and nobody is notified), ref, slack, succ [n] (read only with rl)."""
    n, L = inc.shape
    K, t = int(p.K), float(p.slot_s)

    # step 1: headroom for this host's flows (spec 2.7, Q-M5 clamp to [0, c_l])
    H = np.maximum(np.minimum(avail, cap[:, None]) - load, 0.0)
    inv_cap = (1.0 / cap)[:, None]
    tolG = _tol(G)
    active = G > tolG

    # step 2: Algorithm 1 in waves x progressive-filling rounds (Q-M8)
    R = H.copy()  # what is left for this host's flows not yet planned
    Rx = np.full((L + 1, K), np.inf)  # R plus the +inf row that path padding points at
    cntx = np.ones(L + 1)
    own = np.zeros((L, K))  # this host's committed load
    rates = np.zeros((n, K))
    price_used = np.zeros((n, K))
    batches = 0
    if prio is None:
        waves = [active] if active.any() else []
    else:
        values = sorted(set(prio[active].tolist()))
        waves = [active] if len(values) == 1 else [active & (prio == v) for v in values]
    # Each round is a cheap feasibility test on the shares (a deadline exists iff the
    # widest one, K, holds the bytes); Algorithm 1 runs once per flow, in the round
    # where the flow is frozen, so rounds cost O(n K) and Alg. 1 O(n K^2) once.
    pT = np.ascontiguousarray(pidx.T)  # [P, n] (for _path_min)
    need = G - tolG  # the bytes a bound must carry for the flow to fit
    for wave in waves:
        todo = wave.copy()
        for rnd in range(p.max_rounds):
            idx = todo.nonzero()[0]
            if idx.size == 0:
                break
            pt = pT[:, idx]
            np.maximum(todo @ inc, 1.0, out=cntx[:L])  # the wave's unplanned flows on each link
            Rx[:L] = R  # what is left on each link
            A = _path_min(Rx / cntx[:, None], pt)  # equal split [m, K]
            ci = idx
            if rnd < p.max_rounds - 1:
                # freeze flows that fit, and flows no split limits (more rounds cannot give them more)
                commit = A.sum(axis=1) * t >= need[idx]
                if not commit.all():
                    commit |= (A >= _path_min(Rx, pt) * (1 - 1e-12)).all(axis=1)
                    if commit.any() and not commit.all():  # (none: nothing changes in a later round, commit all now)
                        ci, A = idx[commit], A[commit]
            ic = inc[ci]
            price = ic @ ((load + own) * inv_cap)  # Q-M3, with own committed load (Q-M8)
            rc = _alg1_rates(G[ci], tolG[ci], A, price, t, p.w_beta)
            batches += 1
            rates[ci] = rc
            price_used[ci] = price
            use = ic.T @ rc
            own += use
            R -= use
            np.maximum(R, 0.0, out=R)
            todo[ci] = False

    # step 3: starvation floor (Q-M4), shared by this host's flows on each link
    cnt_all = active.astype(np.float64) @ inc
    floored = active & ~(rates > 0).any(axis=1)
    if floored.any() and p.min_rate_frac > 0:
        fl_link = p.min_rate_frac * cap / np.maximum(cnt_all, 1.0)
        fi = floored.nonzero()[0]
        floor = _path_min(np.append(fl_link, np.inf), pT[:, fi])
        k = np.arange(K)[None, :]
        rf = np.minimum(np.maximum((G[fi, None] - k * floor[:, None] * t) / t, 0.0), floor[:, None])  # (clip)
        rf = np.where(rf * t > tolG[fi, None], rf, 0.0)
        rates[fi] = rf
        use = inc[fi].T @ rf
        own += use
        R = np.maximum(R - use, 0.0)
    else:
        floored[:] = False
    alg1 = rates.copy()

    # per-flow limit for re-planning: own plan + an equal split of what is left (sum-safe)
    Rx[:L] = R / np.maximum(cnt_all, 1.0)[:, None]
    spare = _path_min(Rx, pT) if n else np.zeros((0, K))
    limit = np.where(active[:, None], rates + spare, 0.0)

    if rl is None:  # no dependency roles: no Delta, no notification (what step 4 and 5 give then)
        beta, cost, complete = schedule_cost(rates, price_used, G, slot_s=t, w_beta=p.w_beta)
        nan, no = np.full(n, np.nan), np.zeros(n, dtype=bool)
        return MlccPlan(
            rates_Bps=rates, alg1_rates_Bps=alg1, beta=beta, cost=cost, delta_Bps=np.zeros(n), capped=no,
            infeasible=~complete, floored=floored, cum_bytes=sent + rates[:, 0] * t, notify=no,
            notify_ceiling_bytes=nan, notify_reduce_bytes=nan, reduction_bytes=np.zeros(n), limit_Bps=limit,
            price=price_used, remaining_bytes=G, sent_bytes=sent, role=np.zeros(n, np.int8),
            slack_bytes=np.zeros(n) if slack is None else slack, succ_bytes=nan if succ is None else succ,
            rounds=batches)

    # step 4: Algorithm 2 (spec 2.8.4), vectorised over flows
    dep = rl != Role.NONE.value
    r0 = rates[:, 0]
    F = sent + r0 * t  # line 18: bytes by the end of this slot with the Alg. 1 rate
    delta = np.where(dep, np.maximum(ref - F, 0.0), 0.0) / t  # lines 19-25 (Delta as a rate)
    delta = np.where(delta * t > _tol(np.maximum(ref, F)), delta, 0.0)  # rounding dust is 0
    if p.literal_b_cap:  # Q-M10, paper: r + Delta if it is below B_i, else B_i
        up = np.where(r0 + delta < B, r0 + delta, B)
    else:  # Q-M10 default: the cap never lowers the Alg. 1 rate
        up = np.minimum(r0 + delta, np.maximum(r0, B))
    up = np.minimum(up, G / t)  # never plan more than the bytes left
    if p.delta_within_avail:
        extra = np.maximum(up - r0, 0.0)
        grow = extra > 0
        if grow.any():
            cnt_up = grow.astype(np.float64) @ inc
            room = _path_min(np.append(R[:, 0] / np.maximum(cnt_up, 1.0), np.inf), pT)
            up = np.where(grow, r0 + np.minimum(extra, room), up)
    new0 = np.where(delta > 0, up, r0)
    capped = (delta > 0) & (new0 < r0 + delta - 1e-12 * (r0 + delta))
    changed = np.flatnonzero(np.abs(new0 - r0) > 1e-12 * np.maximum(r0, 1.0))
    if changed.size:  # lines 10 and 13: re-plan the future slots
        rr, _ = _replan_future(G[changed], new0[changed], limit[changed], price_used[changed], t, p.w_beta)
        rates[changed] = rr
        batches += 1
    beta, cost, complete = schedule_cost(rates, price_used, G, slot_s=t, w_beta=p.w_beta)

    # step 5: notifications (lines 13-16, Q-M9, Q-M11)
    cum = sent + rates[:, 0] * t
    notify, ceiling, reduce = _notifications(rl, cum, slack, succ, _tol(cum))
    return MlccPlan(
        rates_Bps=rates, alg1_rates_Bps=alg1, beta=beta, cost=cost, delta_Bps=delta, capped=capped,
        infeasible=~complete, floored=floored, cum_bytes=cum, notify=notify, notify_ceiling_bytes=ceiling,
        notify_reduce_bytes=reduce, reduction_bytes=np.zeros(n), limit_Bps=limit, price=price_used,
        remaining_bytes=G, sent_bytes=sent, role=rl, slack_bytes=slack, succ_bytes=succ, rounds=batches)


def apply_reductions(plan: MlccPlan, ceiling_bytes, params: MlccParams = MlccParams()) -> MlccPlan:
    """Apply received notifications to this host's own flows (Alg. 2 lines 13-16, receiver side).

    ``ceiling_bytes[n]``: for each of this host's flows, the most bytes it may have sent
    by the end of this slot (+inf: no constraint). The receiver assembles it from the
    notifications: a broadcast flow of PS p gets min over p's aggregation flows of their
    ceilings (= F_a^min, rule (i)); a ring flow gets its predecessor's ceiling
    (F_pred + one chunk, rule (ii) with Q-M11).

    Each flow with ``F_j = sent + r(0) t > ceiling`` loses ``(F_j - ceiling)_+`` bytes in
    slot 0 (never below rate 0, property 18: past bytes cannot be unsent), and its
    future slots are re-planned with Algorithm 1 on slots 1..K-1 within ``limit_Bps``,
    which keeps the host's sum on every link within its headroom. The notifications of
    reduced flows are recomputed (a ring reduction propagates to the next successor).
    """
    t = float(params.slot_s)
    n, K = plan.rates_Bps.shape
    if K != params.K:
        raise ValueError(f"apply_reductions: the plan has K={K} slots but params.K={params.K} "
                         "(pass the params the plan was made with)")
    ceil = np.asarray(ceiling_bytes, dtype=np.float64)
    _shape(ceil, "ceiling_bytes", (n,))
    bad = np.isnan(ceil) | (ceil < 0)
    if bad.any():
        i = int(np.argmax(bad))
        raise ValueError(f"ceiling_bytes: flow {i} has {ceil[i]!r} (give a number >= 0, or +inf for no constraint)")
    r0 = plan.rates_Bps[:, 0]
    F = plan.sent_bytes + r0 * t
    red = np.where(np.isfinite(ceil), np.maximum(F - ceil, 0.0), 0.0)
    new0 = np.maximum(r0 - red / t, 0.0)  # property 18
    rates = plan.rates_Bps.copy()
    changed = np.flatnonzero(new0 < r0 - 1e-12 * np.maximum(r0, 1.0))
    if changed.size == 0:  # nothing to reduce: the plan as it was (what the lines below compute then)
        return replace(plan, rates_Bps=rates, reduction_bytes=plan.reduction_bytes + 0.0)
    rr, _ = _replan_future(plan.remaining_bytes[changed], new0[changed], plan.limit_Bps[changed],
                           plan.price[changed], t, params.w_beta)
    rates[changed] = rr
    beta, cost, complete = schedule_cost(rates, plan.price, plan.remaining_bytes, slot_s=t, w_beta=params.w_beta)
    cum = plan.sent_bytes + rates[:, 0] * t
    notify, ceiling, reduce = _notifications(plan.role, cum, plan.slack_bytes, plan.succ_bytes, _tol(cum))
    return replace(plan, rates_Bps=rates, beta=beta, cost=cost, infeasible=~complete, cum_bytes=cum,
                   notify=notify, notify_ceiling_bytes=ceiling, notify_reduce_bytes=reduce,
                   reduction_bytes=plan.reduction_bytes + (r0 - rates[:, 0]) * t)
