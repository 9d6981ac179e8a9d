"""A lower bound on the average job completion time (JCT) of a set of jobs (pure).

Each job j is (r_j, S_j, {link: w_jl}): its arrival, its standalone time (the JCT
it would have alone, ``traffic.standalone_s``) and the seconds each link must
spend on its bytes (``traffic.link_work_s``). JCT_j = C_j - r_j.

Derivation, per link l (a link serves at most its rate, so it does at most one
second of work per second, shared or not):

* All arrivals equal (r): let p_j = w_jl and L_k = the sum of the k smallest p.
  Whatever the schedule, when the k-th job finishes its l-work the link has done
  the whole l-work of k jobs, at least L_k, so that job's l-completion is >= r + L_k.
  Every job also needs JCT_j >= S_j, so with pi(j) the rank in which j finishes
  its l-work, sum_j JCT_j >= sum_j max(S_j, L_pi(j)) >= min over permutations
  sigma of sum_j max(S_j, L_sigma(j)). max(a, b) = (a + b + |a - b|) / 2 and
  |a - b| is convex in a - b, so for a <= a', b <= b':
  max(a, b) + max(a', b') <= max(a, b') + max(a', b) (a Monge array); hence the
  minimum is attained by pairing S sorted ascending with L sorted ascending
  (any crossing pair can be uncrossed without increasing the sum).
* Arrivals not all equal: the weaker bound max(sum_j S_j, sum_j (C_j^SRPT - r_j)),
  where C^SRPT are the completion times of preemptive shortest-remaining-
  processing-time on the link with release dates r_j: SRPT minimises sum C_j for
  1|r_j,pmtn|sum C_j, and the link's work on j cannot start before r_j.

The bound is the largest of the per-link averages and the mean of S_j (the
bottleneck is the link that gives it, or None when the standalone times dominate).
"""

from __future__ import annotations

import heapq
import math
from collections.abc import Mapping, Sequence

JobBoundInput = tuple[float, float, Mapping[str, float]]  # (arrival_s, standalone_s, {link: work_s})

_REL = 1e-9


def prefix_sums_sorted(works: Sequence[float]) -> list[float]:
    """L_k for k = 1..n: the sum of the k smallest works."""
    out, acc = [], 0.0
    for w in sorted(works):
        acc += w
        out.append(acc)
    return out


def sorted_pairing_sum(standalone: Sequence[float], works: Sequence[float]) -> float:
    """min over assignments of sum_j max(S_j, L_sigma(j)), by pairing sorted S with sorted L."""
    if len(standalone) != len(works):
        raise ValueError("standalone and works differ in length")
    return sum(max(s, lk) for s, lk in zip(sorted(standalone), prefix_sums_sorted(works)))


def srpt_completions(release: Sequence[float], works: Sequence[float]) -> list[float]:
    """Completion times of preemptive SRPT on one machine of unit speed with release dates."""
    n = len(release)
    if len(works) != n:
        raise ValueError("release and works differ in length")
    order = sorted(range(n), key=lambda j: release[j])
    done = [0.0] * n
    heap: list[tuple[float, int]] = []
    t, i = -math.inf, 0
    while i < n or heap:
        if not heap:
            t = max(t, release[order[i]])
        while i < n and release[order[i]] <= t:
            j = order[i]
            heapq.heappush(heap, (works[j], j))
            i += 1
        rem, j = heapq.heappop(heap)
        nxt = release[order[i]] if i < n else math.inf
        if t + rem <= nxt:
            t += rem
            done[j] = t
        else:
            heapq.heappush(heap, (rem - (nxt - t), j))
            t = nxt
    return done


def _all_equal(xs: Sequence[float]) -> bool:
    return not xs or max(xs) - min(xs) <= _REL * max(1.0, abs(max(xs)))


def link_bound_sum(arrivals: Sequence[float], standalone: Sequence[float], works: Sequence[float]) -> float:
    """A lower bound on sum_j JCT_j from one link (see the module docstring)."""
    if _all_equal(arrivals):
        return sorted_pairing_sum(standalone, works)
    flow = sum(c - r for c, r in zip(srpt_completions(arrivals, works), arrivals))
    return max(sum(standalone), flow)


def avg_jct_lower_bound(jobs: Sequence[JobBoundInput]) -> dict:
    """A lower bound on the average JCT of the jobs under any schedule of the same transfers.

    ``jobs``: (arrival_s, standalone_s, {link: work_s}) per job. A link missing from a
    job's dict carries none of its bytes. Returns {"avg_jct_s", "bottleneck" (link or
    None), "per_link" {link: average bound from that link}, "standalone_s" [S_j in
    input order], "method" ("sorted-pairing" if all arrivals are equal, else "srpt")}.

    Per link l with p_j = work of j on l and L_k = sum of the k smallest p:
    equal arrivals: sum JCT >= sum_j max(S_(j), L_j) (S sorted ascending; the k-th job to
    finish its l-work ends >= L_k after the start, max(a, b) is Monge so sorted pairing is
    the minimising assignment); otherwise sum JCT >= max(sum S_j, sum_j (C_j^SRPT - r_j)).
    The bound is the max over links of these averages, and at least the mean of S_j.
    """
    n = len(jobs)
    arrivals = [float(a) for a, _, _ in jobs]
    stand = [float(s) for _, s, _ in jobs]
    for a, s, work in jobs:
        if s < 0 or any(w < 0 for w in work.values()) or not math.isfinite(a):
            raise ValueError("standalone and work times must be >= 0 and arrivals finite")
    if n == 0:
        return {"avg_jct_s": 0.0, "bottleneck": None, "per_link": {}, "standalone_s": [],
                "method": "sorted-pairing"}
    names = sorted({link for _, _, work in jobs for link, w in work.items() if w > 0})
    per_link = {}
    for link in names:
        works = [float(work.get(link, 0.0)) for _, _, work in jobs]
        per_link[link] = link_bound_sum(arrivals, stand, works) / n
    mean_s = sum(stand) / n
    best = min(per_link, key=lambda k: (-per_link[k], k), default=None)
    bottleneck = None
    if best is not None and per_link[best] > mean_s * (1 + _REL) + 1e-12:
        bottleneck = best
    avg = max([mean_s, *per_link.values()])
    return {"avg_jct_s": avg, "bottleneck": bottleneck, "per_link": per_link, "standalone_s": stand,
            "method": "sorted-pairing" if _all_equal(arrivals) else "srpt"}
