"""mlcc's fabric-wide job order, pure: the rank of a job that every host computes alike without
talking (``hostctl start --policy mlcc --switch ... --job-order``), and the order it gives. The
MLCC planner (hostctl.policy.mlcc, switchemu) plans jobs in it; policy ``mlcc-bands`` puts its
TensorLights bands in it (hostctl.core.bands, band rule ``fabric``).
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable, Mapping

# mlcc's fabric-wide job order (``hostctl start --policy mlcc --switch ... --job-order``)
JOB_ORDERS = ("none", "fixed", "rotate", "smallest", "flat")
# the orders that rank jobs (fabric_rank gives a number): none is the switch's arrival order, flat no order
RANKED_ORDERS = ("fixed", "rotate", "smallest")
# the orders in which jobs (of one rank, for smallest) plan in the order they arrived in the switch's table
ARRIVAL_ORDERS = ("none", "smallest")
UNKNOWN_SIZE_RANK = (1 << 64) - 1  # smallest: the rank of a job whose size is unknown (last)


def _hash(key: str) -> int:
    return int.from_bytes(hashlib.blake2b(key.encode(), digest_size=8).digest(), "big")


def fabric_rank(job_id: str, order: str, epoch: int = 0, size: int | None = None) -> int | None:
    """A job's rank in mlcc's fabric-wide job order (lower = planned first), 0..2**64-1, or None for
    ``none`` (the switch's arrival order) and ``flat`` (no order). Every host computes the same rank
    for the same job without talking, the way ``rr`` bands agree:

    - ``fixed``: a hash of the job id (an arbitrary but agreed order);
    - ``rotate``: a hash of the job id and the rotation count ``epoch`` (``rr_epoch`` of the slot's
      time): a new random order every interval, so that every job leads equally often (BLAKE2b: CRC32,
      being linear, gave few distinct orders and led with some jobs three times as often as others);
    - ``smallest``: the job's model-update ``size`` in bytes (TensorLights ``one``'s order: smaller
      first, unknown last). Jobs of one size share the rank; MlccControl and switchemu order them by
      arrival (``ARRIVAL_ORDERS``), the bands of ``mlcc-bands`` by job id. The hosts agree if each knows
      the job's size (``model_size`` in the config) or none does.
    """
    if order in ("none", "flat"):
        return None
    if order == "fixed":
        return _hash(job_id)
    if order == "rotate":
        return _hash(f"{job_id}/{epoch}")
    if order == "smallest":
        return UNKNOWN_SIZE_RANK if size is None or size < 0 else min(int(size), UNKNOWN_SIZE_RANK)
    raise ValueError(f"unknown job order {order!r} (one of {', '.join(JOB_ORDERS)})")


def fabric_order(job_ids: Iterable[str], order: str, epoch: int = 0,
                 sizes: Mapping[str, int | None] | None = None) -> list[str]:
    """Job ids in mlcc's fabric-wide job order, first (planned first, top band) to last: by
    ``fabric_rank`` (``sizes``: job id -> model-update bytes, for ``smallest``), ties by job id. This
    is the order MlccControl plans this host's jobs in under ``--job-order`` (it sorts by the same key)
    and the band order of policy ``mlcc-bands``, so that the job first on the fabric is the top band
    on every host. ``none`` and ``flat`` rank nothing: an error."""
    if order not in RANKED_ORDERS:
        raise ValueError(f"a fabric order is one of {', '.join(RANKED_ORDERS)}, not {order!r}")
    size = (sizes or {}).get
    return sorted(job_ids, key=lambda j: (fabric_rank(j, order, epoch, size(j)), j))
