"""TensorLights band assignment (spec section 1.3-1.5), pure.

Band rules (each policy of hostctl.policy names one):
- ``fifo``: no job gets a band; everything shares the default class.
- ``one`` (TLs-One): static strict priority, smaller model update first; jobs of
  equal (or unknown) size are ordered by job id, so every host agrees.
- ``rr`` (TLs-RR): like ``one``, but within each group of equal model size the
  ranks are cyclically shifted by the rotation count ``epoch`` (job k of a group of
  n_g gets rank (k + epoch) mod n_g). The daemon passes
  ``epoch = floor(unix_time / interval_s)``, so hosts carrying the same jobs agree
  without talking to each other.
- ``fabric`` (the band rule of policy ``mlcc-bands``): the
  jobs in mlcc's fabric-wide job order (``fabric_order``: ``fabric_rank`` of the job id,
  ``fixed``, ``rotate`` with the rotation count ``epoch``, or ``smallest`` by model size),
  the order in which mlcc plans them with ``--job-order``.

Bands: 0 is the highest priority (htb prio 0). With n jobs and B bands, jobs are
laid out in priority order and cut into bands of ceil(n / B) jobs (Q-T1): all
flows of a job are in one band, band(A) <= band(B) whenever size(A) < size(B)
(property 3), and no band holds more than ceil(n / B) jobs (property 1).
A host with at most one job is left unconfigured (property 1): no contention.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence

from hostctl.core.joborder import fabric_order

FABRIC = "fabric"  # bands in mlcc's fabric job order (policy mlcc-bands)
BAND_RULES = ("fifo", "one", "rr", FABRIC)  # the band rules a policy (hostctl.policy.POLICIES) names
MAX_BANDS = 7  # htb prio 0..6 for jobs; prio 7 is the default class


def _size_key(size: int | None) -> tuple[int, int]:
    # Known sizes first, smallest first; unknown sizes form the last group.
    return (1, 0) if size is None else (0, size)


def priority_order(
    jobs: Mapping[str, int | None], rule: str, epoch: int = 0, job_order: str = "fixed"
) -> list[str]:
    """Job ids from highest to lowest priority.

    jobs: job id -> model-update size in bytes (None when unknown).
    epoch: rotation count; only used by ``rr`` and by ``fabric`` with job_order ``rotate``.
    job_order: ``fixed``, ``rotate`` or ``smallest``, only used by ``fabric``.
    """
    if rule not in BAND_RULES:
        raise ValueError(f"unknown band rule {rule!r}")
    if rule == FABRIC:
        return fabric_order(jobs, job_order, epoch, sizes=jobs)
    rotation = epoch if rule == "rr" else 0
    groups: dict[tuple[int, int], list[str]] = {}
    for job_id in sorted(jobs):
        groups.setdefault(_size_key(jobs[job_id]), []).append(job_id)
    order: list[str] = []
    for key in sorted(groups):
        members = groups[key]  # sorted by id: member k
        n = len(members)
        ranked = sorted(range(n), key=lambda k: (k + rotation) % n)
        order.extend(members[k] for k in ranked)
    return order


def assign_bands(
    jobs: Mapping[str, int | None], rule: str, bands: int, epoch: int = 0, job_order: str = "fixed"
) -> dict[str, int]:
    """job id -> band (0 = highest priority). Empty for fifo or <= 1 job. job_order: the
    fabric order (``fixed`` or ``rotate``) of rule ``fabric``; ignored by the others."""
    if not 1 <= bands <= MAX_BANDS:
        raise ValueError(f"bands must be within 1..{MAX_BANDS}, got {bands}")
    if rule == "fifo" or len(jobs) <= 1:
        if rule not in BAND_RULES:
            raise ValueError(f"unknown band rule {rule!r}")
        return {}
    order = priority_order(jobs, rule, epoch, job_order)
    per_band = math.ceil(len(order) / bands)
    return {job_id: pos // per_band for pos, job_id in enumerate(order)}


def rr_epoch(unix_time_s: float, interval_s: float) -> int:
    """Rotation count at a wall-clock instant: epochs are aligned to multiples of
    the interval, so every host with the same clock rotates at the same moment."""
    return int(math.floor(unix_time_s / interval_s))


def next_rotation_s(unix_time_s: float, interval_s: float) -> float:
    """Wall-clock time of the next rotation boundary after ``unix_time_s``."""
    return (rr_epoch(unix_time_s, interval_s) + 1) * interval_s


def describe(assignment: Mapping[str, int], all_jobs: Sequence[str]) -> str:
    """One log line: 'band0=a,b band1=c default=d'."""
    by_band: dict[int, list[str]] = {}
    for job_id, band in assignment.items():
        by_band.setdefault(band, []).append(job_id)
    parts = [f"band{b}={','.join(sorted(by_band[b]))}" for b in sorted(by_band)]
    rest = sorted(j for j in all_jobs if j not in assignment)
    if rest:
        parts.append(f"default={','.join(rest)}")
    return " ".join(parts) if parts else "(no jobs)"
