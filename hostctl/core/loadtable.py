"""MLCC per-link load table over K future absolute slots (spec 2.4.1, Q-M1, Q-M8; pure).

A switch (or, in "local mode", the daemon for its own NIC link) keeps for each link it owns the
estimated load in each of the next K slots: the sum of the latest schedules of the flows that cross
the link. Rules (spec section 4, properties 19-21):

* **Replace, not add** (Q-M1): ``update(flow, ...)`` subtracts the flow's previous schedule and adds
  the new one, so re-sending the same schedule is idempotent. An all-zero schedule withdraws the flow.
* **Expiry**: slots before ``now`` are dropped; a flow whose schedule lies wholly in the past (it sent
  nothing for K slots) contributes 0 and is forgotten.
* **Self-exclusion** (Q-M8): ``loads(..., exclude=flow)`` leaves out that flow's own schedule and keeps
  everybody else's, including the same job's other flows.

Units: rates are bytes/s, stored as exact integers (``np.int64``, rounded on input), so adding and
subtracting schedules never drifts and a withdrawn flow leaves exactly 0 behind. Slots are absolute
integers (``floor(unix_time / slot_s)``); this module never reads a clock: every call gets ``now_slot``.

Cost: the aggregate per link is kept incrementally in a ring of ``ring`` slot columns, so an update is
O(links of the flow x K) and a read O(links x K), independent of the number of flows. Advancing the
clock zeroes the columns that became past (O(links x slots advanced)) and forgets expired flows
(amortised O(1) per flow, from per-slot expiry buckets).
"""

from __future__ import annotations

from collections.abc import Hashable, Iterable, Sequence
from dataclasses import dataclass

import numpy as np

MAX_RATE_Bps = 10**12  # 8 Tbit/s per flow: keeps sums of a million flows inside int64


@dataclass(slots=True)
class FlowEntry:
    """The latest schedule of one flow, as the table holds it."""

    links: np.ndarray  # int64 link indices (unique)
    start_slot: int  # absolute slot of rates_Bps[0]
    rates_Bps: np.ndarray  # int64, length K
    seq: int  # the sender's sequence number of this schedule
    job_id: str

    @property
    def last_slot(self) -> int:
        return self.start_slot + len(self.rates_Bps) - 1


class LoadTable:
    """Per-link load over future absolute slots, with per-flow replace semantics.

    ``n_links`` links are numbered 0..n_links-1 (the caller maps its link ids). ``horizon`` is K, the
    length of every schedule and of every read window. ``ring`` (default 2K) is how many slots from
    ``now`` on are stored; slots at or beyond ``now + ring`` are dropped from schedules, so ``ring``
    must cover K plus any start-slot skew the caller accepts.
    """

    def __init__(self, n_links: int, horizon: int, ring: int | None = None):
        if n_links < 0 or horizon < 1:
            raise ValueError("need n_links >= 0 and horizon >= 1")
        self.n_links = n_links
        self.horizon = horizon
        self.ring = ring if ring is not None else 2 * horizon
        if self.ring < horizon:
            raise ValueError("ring must be >= horizon")
        self._agg = np.zeros((n_links, self.ring), dtype=np.int64)
        self._flows: dict[Hashable, FlowEntry] = {}
        self._by_job: dict[str, set[Hashable]] = {}  # job id -> its flows in the table
        self._expiry: dict[int, set[Hashable]] = {}  # last_slot -> flows whose schedule ends there
        self.now_slot: int | None = None
        self.expired_flows = 0  # counter: flows forgotten because their schedule ran out

    # ------------------------------------------------------------------ clock

    def advance(self, now_slot: int) -> int:
        """Move the table to ``now_slot``: zero the past columns, forget expired flows.

        Returns the number of flows forgotten. ``now_slot`` never goes backwards (an older value is
        ignored: a clock step back cannot resurrect dropped slots)."""
        now_slot = int(now_slot)
        old = self.now_slot
        if old is None:
            self.now_slot = now_slot
            return 0
        if now_slot <= old:
            return 0
        gone = now_slot - old
        if gone >= self.ring:
            self._agg[:, :] = 0
        else:
            for s in range(old, now_slot):
                self._agg[:, s % self.ring] = 0
        self.now_slot = now_slot
        return self._expire(old, now_slot)

    def _expire(self, old: int, now_slot: int) -> int:
        # buckets with last_slot in [old - 1, now_slot - 1] are now wholly past
        if now_slot - old <= len(self._expiry):
            slots: Iterable[int] = [s for s in range(old - 1, now_slot) if s in self._expiry]
        else:
            slots = [s for s in self._expiry if s < now_slot]
        n = 0
        for s in slots:
            for key in self._expiry.pop(s):
                e = self._flows.get(key)
                if e is not None and e.last_slot < now_slot:
                    del self._flows[key]
                    self._unjob(key, e)
                    n += 1
        # a bucket below old - 1 can only exist if the clock was set before the first update
        self.expired_flows += n
        return n

    # ------------------------------------------------------------------ updates

    def update(self, key: Hashable, links: Sequence[int] | np.ndarray, start_slot: int,
               rates_Bps: Sequence[float] | np.ndarray, now_slot: int, *, seq: int = 0,
               job_id: str = "") -> bool:
        """Replace ``key``'s schedule by ``rates_Bps`` (K values, bytes/s) starting at ``start_slot``
        on ``links``. An all-zero schedule withdraws the flow. A ``seq`` older than the stored one is
        ignored (returns False: reordered); an equal ``seq`` is applied again (idempotent).

        Slots before ``now_slot`` and from ``now_slot + ring`` on are dropped. Rates are rounded to
        integer bytes/s; they must be finite and within [0, MAX_RATE_Bps] (ValueError otherwise)."""
        self.advance(now_slot)
        now = self.now_slot
        assert now is not None
        rates = np.asarray(rates_Bps)
        if rates.shape != (self.horizon,):
            raise ValueError(f"schedule must have {self.horizon} rates, got shape {rates.shape}")
        if rates.dtype.kind != "i":
            if not np.all(np.isfinite(rates)):
                raise ValueError("rates must be finite")
            rates = np.rint(rates).astype(np.int64)
        else:
            rates = rates.astype(np.int64, copy=False)
        lo, hi = int(rates.min()), int(rates.max())
        if lo < 0 or hi > MAX_RATE_Bps:
            raise ValueError(f"rates must be within 0..{MAX_RATE_Bps} bytes/s")
        idx = np.asarray(links, dtype=np.int64)
        if idx.ndim != 1 or (idx.size and (idx.min() < 0 or idx.max() >= self.n_links)):
            raise ValueError(f"link index out of range 0..{self.n_links - 1}")
        if idx.size > 1 and np.unique(idx).size != idx.size:
            raise ValueError("links of a flow must be distinct")
        old = self._flows.get(key)
        if old is not None and seq < old.seq:
            return False
        start_slot = int(start_slot)
        if old is not None:
            self._add(old.links, old.start_slot, old.rates_Bps, -1)
            self._unbucket(key, old.last_slot)
            self._unjob(key, old)
        beyond = now + self.ring - start_slot  # offsets from here on are not stored: drop them now
        if beyond < self.horizon:
            rates = rates.copy()
            rates[max(0, beyond):] = 0
        if hi == 0 or not rates.any() or start_slot + self.horizon - 1 < now or idx.size == 0:
            self._flows.pop(key, None)  # withdrawn, wholly past, or crosses none of our links
            return True
        entry = FlowEntry(idx.copy(), start_slot, rates, int(seq), job_id)
        self._flows[key] = entry
        if job_id:
            self._by_job.setdefault(job_id, set()).add(key)
        self._add(entry.links, start_slot, rates, +1)
        self._expiry.setdefault(entry.last_slot, set()).add(key)
        return True

    def withdraw(self, key: Hashable, now_slot: int) -> bool:
        """Remove ``key``'s schedule; True if it was present."""
        self.advance(now_slot)
        e = self._flows.pop(key, None)
        if e is None:
            return False
        self._add(e.links, e.start_slot, e.rates_Bps, -1)
        self._unbucket(key, e.last_slot)
        self._unjob(key, e)
        return True

    def _unjob(self, key: Hashable, e: FlowEntry) -> None:
        fl = self._by_job.get(e.job_id)
        if fl is not None:
            fl.discard(key)
            if not fl:
                del self._by_job[e.job_id]

    def _unbucket(self, key: Hashable, last_slot: int) -> None:
        b = self._expiry.get(last_slot)
        if b is not None:
            b.discard(key)
            if not b:
                del self._expiry[last_slot]

    def _live(self, start_slot: int, n: int) -> tuple[int, int]:
        """Offsets [a, b) of a window of n slots from start_slot that are stored now."""
        now = self.now_slot
        assert now is not None
        a = max(0, now - start_slot)
        b = min(n, now + self.ring - start_slot)
        return a, max(a, b)

    def _add(self, links: np.ndarray, start_slot: int, rates: np.ndarray, sign: int) -> None:
        a, b = self._live(start_slot, len(rates))
        if a >= b or links.size == 0:
            return
        c0 = (start_slot + a) % self.ring
        vals = rates[a:b] if sign > 0 else -rates[a:b]
        n = b - a
        if c0 + n <= self.ring:
            if links.size == 1:
                self._agg[links[0], c0:c0 + n] += vals
            else:
                self._agg[links, c0:c0 + n] += vals
        else:
            cols = (np.arange(c0, c0 + n)) % self.ring
            self._agg[np.ix_(links, cols)] += vals

    # ------------------------------------------------------------------ reads

    def loads(self, links: Sequence[int] | np.ndarray, start_slot: int, now_slot: int,
              exclude: Hashable | None = None, exclude_job: str | None = None) -> np.ndarray:
        """Per-link load (bytes/s, int64) of ``links`` over K slots from ``start_slot``: an array of
        shape (len(links), K). Slots before now or not stored are 0. ``exclude``'s own schedule is
        left out (self-exclusion, Q-M8); with ``exclude_job``, so are all that job's flows (the
        paper's b_l: the load of *other* jobs)."""
        self.advance(now_slot)
        idx = np.asarray(links, dtype=np.int64)
        k = self.horizon
        out = np.zeros((idx.size, k), dtype=np.int64)
        a, b = self._live(int(start_slot), k)
        if a < b and idx.size:
            c0 = (start_slot + a) % self.ring
            n = b - a
            if c0 + n <= self.ring:
                out[:, a:b] = self._agg[idx, c0:c0 + n]
            else:
                out[:, a:b] = self._agg[np.ix_(idx, np.arange(c0, c0 + n) % self.ring)]
        left_out = [exclude] if exclude is not None else []
        if exclude_job:
            left_out += [k for k in self._by_job.get(exclude_job, ()) if k != exclude]
        for key in left_out:
            e = self._flows.get(key)
            if e is not None:
                own = self._window(e, int(start_slot))
                if own is not None:
                    mine = set(e.links.tolist()) if e.links.size > 1 else {int(e.links[0])}
                    for i, ln in enumerate(idx.tolist()):  # a handful of links: cheaper than np.isin
                        if ln in mine:
                            out[i] -= own
        return out

    def path_load(self, links: Sequence[int] | np.ndarray, start_slot: int, now_slot: int,
                  exclude: Hashable | None = None) -> np.ndarray:
        """Sum over ``links`` of ``loads(...)``: the path load PL_f(t) (spec 2.4.2), shape (K,)."""
        return self.loads(links, start_slot, now_slot, exclude).sum(axis=0)

    def _window(self, e: FlowEntry, start_slot: int) -> np.ndarray | None:
        """``e``'s live contribution mapped onto the window [start_slot, start_slot + K)."""
        k = self.horizon
        now = self.now_slot
        assert now is not None
        lo = max(start_slot, e.start_slot, now)
        hi = min(start_slot + k, e.start_slot + k, now + self.ring)
        if lo >= hi:
            return None
        own = np.zeros(k, dtype=np.int64)
        own[lo - start_slot:hi - start_slot] = e.rates_Bps[lo - e.start_slot:hi - e.start_slot]
        return own

    def schedule(self, key: Hashable) -> FlowEntry | None:
        """The stored entry of ``key`` (None if unknown, withdrawn or expired)."""
        return self._flows.get(key)

    def __len__(self) -> int:
        return len(self._flows)

    def __contains__(self, key: Hashable) -> bool:
        return key in self._flows

    def recompute(self, start_slot: int | None = None) -> np.ndarray:
        """O(flows) reference: per-link load over K slots from ``start_slot`` (default now), summed
        from the stored schedules. For tests and consistency checks, never on the fast path."""
        assert self.now_slot is not None
        s0 = self.now_slot if start_slot is None else int(start_slot)
        out = np.zeros((self.n_links, self.horizon), dtype=np.int64)
        for e in self._flows.values():
            w = self._window(e, s0)
            if w is not None:
                out[e.links] += w
        return out
