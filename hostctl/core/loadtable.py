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
* **Booking** (hostctl's addition, docs/switchemu.md "Booking"): how far the published schedules book
  each link. ``booked(l, s)`` is the aggregate of link l's column for absolute slot s. The table keeps per
  link the peak of booked(l, s) over all stored slots, sampled at ``settle()`` (the switch calls it after
  every update frame: the moments a reader can see; ``advance()`` and ``booking()`` settle too), and the
  *final* booking of each slot, sampled in ``advance()`` just before its column is zeroed: the largest
  (with the slot and the number of flows booked in it then), how many slots had any booking and how many
  exceeded capacity x (1 + tolerance).
* **Job order** (hostctl's addition, ``--job-order``): a job's updates may carry a *rank*, its place in a
  fabric-wide job order (lower = first). A read with ``below_rank=r`` also leaves out the jobs whose rank
  is greater than ``r``: a flow plans around the jobs ranked before it only, and the jobs ranked after it
  plan around it. A job's rank is the one of its latest update (an update without a rank makes the job
  unordered: always counted); it is forgotten with the job's last flow.

Units: rates are bytes/s, stored as exact integers (rounded on input, half to even like ``np.rint``), so
adding and subtracting schedules never drifts and a withdrawn flow leaves exactly 0 behind. Slots are absolute
integers (``floor(unix_time / slot_s)``); this module never reads a clock: every call gets ``now_slot``.

Cost: the aggregate per link is kept incrementally in a ring of ``ring`` slot columns, so an update is
O(links of the flow x K) and a read O(links x K), independent of the number of flows. Advancing the
clock zeroes the columns that became past (O(links x slots advanced)) and forgets expired flows
(amortised O(1) per flow, from per-slot expiry buckets). Booking: an update marks its links, ``settle()``
takes the max of each marked link's ring (O(marked links x ring)); ``advance()`` reads each column it
zeroes; the flows of a slot are counted (O(flows on the link)) only when its final booking is a new
largest for its link.

Representation: the aggregate is a Python list of ``ring`` ints per link and a schedule a list of K ints,
not numpy arrays: the arrays here are tiny (a flow crosses 1-4 links, K = 10), where numpy's per-call
overhead (~1 us per operation) dominates, while list slices with ``map(operator.add, ...)`` run at C
speed. ``rows()`` and ``update_valid()`` are the allocation-light API the switch uses per frame;
``loads()`` / ``path_load()`` / ``recompute()`` return ``np.int64`` arrays as before (a copy).
"""

from __future__ import annotations

import math
from collections.abc import Hashable, Iterable, Sequence
from dataclasses import dataclass
from operator import add, sub

import numpy as np

MAX_RATE_Bps = 10**12  # 8 Tbit/s per flow: keeps sums of a million flows inside int64 (the numpy views)


@dataclass(slots=True)
class FlowEntry:
    """The latest schedule of one flow, as the table holds it."""

    links: tuple[int, ...]  # link indices (distinct)
    start_slot: int  # absolute slot of rates_Bps[0]
    rates_Bps: list[int]  # K integer rates, bytes/s (slots beyond the ring already zeroed)
    seq: int  # the sender's sequence number of this schedule
    job_id: str
    host: str = ""  # the sending host (the schedule's ``src``): a job's fabric view leaves its own host out

    @property
    def last_slot(self) -> int:
        return self.start_slot + len(self.rates_Bps) - 1


@dataclass(slots=True)
class LinkBooking:
    """How far the schedules in the table booked one link (see the module docstring, "Booking").

    ``peak_Bps``: the largest booked(l, s) seen at any settle, over all stored slots;
    ``slot_peak_Bps``: the largest final booking of a slot (what the hosts last planned for it, sampled as
    the clock moved past it), ``worst_slot`` that slot (absolute; None before any) and ``worst_flows`` the
    flows with a rate in it then; ``over_slots``: slots whose final booking exceeded capacity x
    (1 + tolerance); ``slots``: slots whose final booking was above 0. With a capacity, the ratios are
    booking / capacity and ``worst_excess_Bps`` = max(0, slot_peak_Bps - capacity)."""

    capacity_Bps: int | None
    peak_Bps: int
    slot_peak_Bps: int
    worst_slot: int | None
    worst_flows: int
    over_slots: int
    slots: int

    @property
    def peak_ratio(self) -> float | None:
        return self.peak_Bps / self.capacity_Bps if self.capacity_Bps else None

    @property
    def slot_peak_ratio(self) -> float | None:
        return self.slot_peak_Bps / self.capacity_Bps if self.capacity_Bps else None

    @property
    def worst_excess_Bps(self) -> int | None:
        return max(0, self.slot_peak_Bps - self.capacity_Bps) if self.capacity_Bps else None

    def to_dict(self) -> dict:
        return {"capacity_Bps": self.capacity_Bps, "peak_Bps": self.peak_Bps, "peak_ratio": self.peak_ratio,
                "slot_peak_Bps": self.slot_peak_Bps, "slot_peak_ratio": self.slot_peak_ratio,
                "worst_slot": self.worst_slot, "worst_excess_Bps": self.worst_excess_Bps,
                "worst_flows": self.worst_flows, "over_slots": self.over_slots, "slots": self.slots}


def _index_add(index: dict, k: Hashable, key: Hashable) -> None:
    """Add key to the set index[k] (the expiry buckets by last slot, the flows by job)."""
    b = index.get(k)
    if b is None:
        index[k] = {key}
    else:
        b.add(key)


def _index_discard(index: dict, k: Hashable, key: Hashable) -> None:
    """Remove key from the set index[k]; an emptied set is dropped."""
    b = index.get(k)
    if b is not None:
        b.discard(key)
        if not b:
            del index[k]


class LoadTable:
    """Per-link load over future absolute slots, with per-flow replace semantics.

    ``n_links`` links are numbered 0..n_links-1 (the caller maps its link ids). ``horizon`` is K, the
    length of every schedule and of every read window. ``ring`` (default 2K) is how many slots from
    ``now`` on are stored; slots at or beyond ``now + ring`` are dropped from schedules, so ``ring``
    must cover K plus any start-slot skew the caller accepts.

    ``capacities_Bps`` (one per link, optional) and ``tolerance`` set the booking limit of each link,
    capacity x (1 + tolerance): a slot whose final booking exceeds it counts in ``over_slots``
    (without capacities, none does and the booking ratios are None).
    """

    def __init__(self, n_links: int, horizon: int, ring: int | None = None, *,
                 capacities_Bps: Sequence[int] | None = None, tolerance: float = 0.0):
        if n_links < 0 or horizon < 1:
            raise ValueError("need n_links >= 0 and horizon >= 1")
        self.n_links = n_links
        self.horizon = horizon
        self.ring = ring if ring is not None else 2 * horizon
        if self.ring < horizon:
            raise ValueError("ring must be >= horizon")
        # per link, the aggregate of the ring columns: column c holds the slot s with s % ring == c
        self._rows: list[list[int]] = [[0] * self.ring for _ in range(n_links)]
        self._flows: dict[Hashable, FlowEntry] = {}
        self._by_job: dict[str, set[Hashable]] = {}  # job id -> its flows in the table
        self._job_rank: dict[str, int] = {}  # job id -> rank of its latest update (ordered jobs only)
        # job id -> its place in the order jobs arrived in the table (a job that leaves it and comes back
        # arrives again), and sending host -> its flows: a job's view in arrival order (``rows``)
        self._job_arrival: dict[str, int] = {}
        self._arrivals = 0
        self._by_host: dict[str, set[Hashable]] = {}
        self._expiry: dict[int, set[Hashable]] = {}  # last_slot -> flows whose schedule ends there
        self.now_slot: int | None = None
        self.expired_flows = 0  # counter: flows forgotten because their schedule ran out
        # booking (module docstring): per link
        if capacities_Bps is not None and len(capacities_Bps) != n_links:
            raise ValueError(f"need {n_links} capacities, got {len(capacities_Bps)}")
        if not (math.isfinite(tolerance) and tolerance >= 0):
            raise ValueError("tolerance must be a finite number >= 0")
        self.capacities_Bps = None if capacities_Bps is None else [int(c) for c in capacities_Bps]
        self.tolerance = float(tolerance)
        self._limit = ([math.inf] * n_links if capacities_Bps is None
                       else [c * (1.0 + tolerance) for c in self.capacities_Bps])
        self._on_link: list[set[Hashable]] = [set() for _ in range(n_links)]  # flows crossing each link
        self._dirty: set[int] = set()  # links whose columns grew since the last settle()
        self._reset_booking()

    def _reset_booking(self) -> None:
        n = self.n_links
        self._peak = [0] * n  # largest booked(l, s) at a settle
        self._final = [0] * n  # largest final booking of a slot
        self._final_slot: list[int | None] = [None] * n
        self._final_flows = [0] * n
        self._over = [0] * n  # slots whose final booking exceeded the limit
        self._booked = [0] * n  # slots whose final booking was above 0

    # ------------------------------------------------------------------ clock

    def advance(self, now_slot: int) -> int:
        """Move the table to ``now_slot``: zero the past columns, forget expired flows.

        Returns the number of flows forgotten. ``now_slot`` never goes backwards (an older value is
        ignored: a clock step back cannot resurrect dropped slots)."""
        old = self.now_slot
        if now_slot == old:
            return 0
        now_slot = int(now_slot)
        if old is None:
            self.now_slot = now_slot
            return 0
        if now_slot <= old:
            return 0
        if self._dirty:
            self.settle()
        ring = self.ring
        # each slot passed: read its column's final booking (the booking counters), then zero it
        booked, over, final, limit = self._booked, self._over, self._final, self._limit
        for s in range(old, min(now_slot, old + ring)):
            c = s % ring
            for ln, row in enumerate(self._rows):
                v = row[c]
                if v:
                    row[c] = 0
                    booked[ln] += 1
                    if v > limit[ln]:
                        over[ln] += 1
                    if v > final[ln]:
                        self._new_final(ln, s, v)
        self.now_slot = now_slot
        return self._expire(old, now_slot)

    def _new_final(self, ln: int, s: int, v: int) -> None:
        """Slot ``s`` ends with the largest booking ``v`` of link ``ln`` so far: count its flows."""
        self._final[ln] = v
        self._final_slot[ln] = s
        n = 0
        flows = self._flows
        for key in self._on_link[ln]:
            e = flows[key]
            j = s - e.start_slot
            if 0 <= j < len(e.rates_Bps) and e.rates_Bps[j]:
                n += 1
        self._final_flows[ln] = n

    def settle(self) -> None:
        """Sample the booking peak of the links updated since the last call: a moment readers can see
        (the switch calls it after each update frame, so the order of one frame's flows does not count)."""
        d = self._dirty
        if d:
            rows, peak = self._rows, self._peak
            for ln in d:
                m = max(rows[ln])
                if m > peak[ln]:
                    peak[ln] = m
            d.clear()

    def booking(self, settle: bool = True) -> list[LinkBooking]:
        """Per link, how far the schedules booked it so far (``LinkBooking``). ``settle=False`` reads
        without sampling pending updates first (for a reader in another thread: it then changes nothing)."""
        if settle and self._dirty:
            self.settle()
        caps = self.capacities_Bps or [None] * self.n_links
        return [LinkBooking(caps[i], self._peak[i], self._final[i], self._final_slot[i], self._final_flows[i],
                            self._over[i], self._booked[i]) for i in range(self.n_links)]

    def reset_booking(self) -> None:
        """Start the booking over: the counters and final peaks from 0, the peak from the current booking."""
        self._reset_booking()
        self._dirty = set(range(self.n_links))
        self.settle()

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
                    self._unlink(key, e.links)
                    n += 1
        # a bucket below old - 1 can only exist if the clock was set before the first update
        self.expired_flows += n
        return n

    # ------------------------------------------------------------------ updates

    def update(self, key: Hashable, links: Sequence[int] | np.ndarray, start_slot: int,
               rates_Bps: Sequence[float] | np.ndarray, now_slot: int, *, seq: int = 0,
               job_id: str = "", rank: int | None = None, host: str = "") -> bool:
        """Replace ``key``'s schedule by ``rates_Bps`` (K values, bytes/s) starting at ``start_slot``
        on ``links``. An all-zero schedule withdraws the flow. A ``seq`` older than the stored one is
        ignored (returns False: reordered); an equal ``seq`` is applied again (idempotent).

        Slots before ``now_slot`` and from ``now_slot + ring`` on are dropped. Rates are rounded to
        integer bytes/s; they must be finite and within [0, MAX_RATE_Bps] (ValueError otherwise)."""
        self.advance(now_slot)
        if isinstance(rates_Bps, np.ndarray):
            if rates_Bps.shape != (self.horizon,):
                raise ValueError(f"schedule must have {self.horizon} rates, got shape {rates_Bps.shape}")
            vals = rates_Bps.tolist()
        else:
            vals = list(rates_Bps)
            if len(vals) != self.horizon:
                raise ValueError(f"schedule must have {self.horizon} rates, got {len(vals)}")
        rates = [_int_rate(r) for r in vals]
        if rates and (min(rates) < 0 or max(rates) > MAX_RATE_Bps):
            raise ValueError(f"rates must be within 0..{MAX_RATE_Bps} bytes/s")
        idx = tuple(links.tolist() if isinstance(links, np.ndarray) else map(int, links))
        if idx and (min(idx) < 0 or max(idx) >= self.n_links):
            raise ValueError(f"link index out of range 0..{self.n_links - 1}")
        if len(idx) > 1 and len(set(idx)) != len(idx):
            raise ValueError("links of a flow must be distinct")
        return self._put(key, idx, int(start_slot), rates, int(seq), job_id, rank, host)

    def update_valid(self, key: Hashable, links: tuple[int, ...], start_slot: int, rates_Bps: list[int],
                     now_slot: int, seq: int = 0, job_id: str = "", rank: int | None = None,
                     host: str = "") -> bool:
        """``update`` for input the caller has validated already (the switch's per-frame path): ``links``
        a tuple of distinct indices in range, ``rates_Bps`` a new list of K ints within
        0..MAX_RATE_Bps (the table keeps it and may modify it), ``start_slot`` and ``seq`` ints."""
        if now_slot != self.now_slot:
            self.advance(now_slot)
        return self._put(key, links, start_slot, rates_Bps, seq, job_id, rank, host)

    def _put(self, key: Hashable, idx: tuple[int, ...], start_slot: int, rates: list[int], seq: int,
             job_id: str, rank: int | None = None, host: str = "") -> bool:
        now = self.now_slot
        assert now is not None
        flows = self._flows
        k = self.horizon
        old = flows.get(key)
        if old is not None:
            if seq < old.seq:
                return False
            self._add(old.links, old.start_slot, old.rates_Bps, sub)
        beyond = now + self.ring - start_slot  # offsets from here on are not stored: drop them now
        if beyond < k:
            beyond = max(0, beyond)
            rates[beyond:] = [0] * (k - beyond)
        last = start_slot + k - 1
        if not idx or last < now or not any(rates):  # withdrawn, wholly past, or crosses none of our links
            if old is not None:
                del flows[key]
                self._unbucket(key, old.start_slot + k - 1)
                self._unjob(key, old)
                self._unlink(key, old.links)
            return True
        if old is None:
            flows[key] = FlowEntry(idx, start_slot, rates, seq, job_id, host)
            self._bucket(key, last)
            if job_id:
                self._job(key, job_id)
            if host:
                _index_add(self._by_host, host, key)
            for ln in idx:
                self._on_link[ln].add(key)
        else:  # replace in place (the common case: a flow's schedule for the next slot)
            old_last = old.start_slot + k - 1
            if old_last != last:
                self._unbucket(key, old_last)
                self._bucket(key, last)
            if old.job_id != job_id or old.host != host:
                self._unjob(key, old)
                if job_id:
                    self._job(key, job_id)
                if host:
                    _index_add(self._by_host, host, key)
            if old.links is not idx and old.links != idx:
                self._unlink(key, old.links)
                for ln in idx:
                    self._on_link[ln].add(key)
            old.links, old.start_slot, old.rates_Bps, old.seq, old.job_id, old.host = (idx, start_slot, rates, seq,
                                                                                       job_id, host)
        self._add(idx, start_slot, rates, add)
        self._dirty.update(idx)
        if job_id:
            if rank is None:
                self._job_rank.pop(job_id, None)
            else:
                self._job_rank[job_id] = rank
        return True

    def _bucket(self, key: Hashable, last_slot: int) -> None:
        _index_add(self._expiry, last_slot, key)

    def _job(self, key: Hashable, job_id: str) -> None:
        if job_id not in self._by_job:  # the job arrives (again)
            self._job_arrival[job_id] = self._arrivals
            self._arrivals += 1
        _index_add(self._by_job, job_id, key)

    def withdraw(self, key: Hashable, now_slot: int) -> bool:
        """Remove ``key``'s schedule; True if it was present."""
        self.advance(now_slot)
        e = self._flows.pop(key, None)
        if e is None:
            return False
        self._add(e.links, e.start_slot, e.rates_Bps, sub)
        self._unbucket(key, e.last_slot)
        self._unjob(key, e)
        self._unlink(key, e.links)
        return True

    def _unlink(self, key: Hashable, links: tuple[int, ...]) -> None:
        for ln in links:
            self._on_link[ln].discard(key)

    def _unjob(self, key: Hashable, e: FlowEntry) -> None:
        """Take a flow that leaves the table (or changes job or host) out of the job and host indexes."""
        _index_discard(self._by_job, e.job_id, key)
        if e.job_id not in self._by_job:
            self._job_rank.pop(e.job_id, None)
            self._job_arrival.pop(e.job_id, None)
        if e.host:
            _index_discard(self._by_host, e.host, key)

    def job_rank(self, job_id: str) -> int | None:
        """The rank of ``job_id``'s latest update (None: unordered or not in the table)."""
        return self._job_rank.get(job_id)

    def _unbucket(self, key: Hashable, last_slot: int) -> None:
        _index_discard(self._expiry, last_slot, key)

    def _live(self, start_slot: int, n: int) -> tuple[int, int]:
        """Offsets [a, b) of a window of n slots from start_slot that are stored now."""
        now = self.now_slot
        assert now is not None
        a = max(0, now - start_slot)
        b = min(n, now + self.ring - start_slot)
        return a, max(a, b)

    def _add(self, links: tuple[int, ...], start_slot: int, rates: list[int], op) -> None:
        """Add (``op`` = operator.add) or subtract (operator.sub) a schedule's live part on ``links``."""
        now = self.now_slot
        ring = self.ring
        a = now - start_slot
        if a < 0:
            a = 0
        b = now + ring - start_slot
        k = len(rates)
        if b > k:
            b = k
        if a >= b or not links:
            return
        rows = self._rows
        c0 = (start_slot + a) % ring
        n = b - a
        seg = rates[a:b] if n != k else rates
        if c0 + n <= ring:
            c1 = c0 + n
            for ln in links:
                row = rows[ln]
                row[c0:c1] = map(op, row[c0:c1], seg)
        else:
            k1 = ring - c0
            s1, s2 = seg[:k1], seg[k1:]
            for ln in links:
                row = rows[ln]
                row[c0:] = map(op, row[c0:], s1)
                row[:n - k1] = map(op, row[:n - k1], s2)

    # ------------------------------------------------------------------ reads

    def rows(self, links: Sequence[int], start_slot: int, now_slot: int, exclude: Hashable | None = None,
             exclude_job: str | None = None, below_rank: int | None = None,
             memo: dict | None = None, arrival_host: str | None = None) -> list[list[int]]:
        """``loads()`` as a list of K-int lists, one per link (the switch's per-frame read).

        ``memo``: a dict the caller keeps for a batch of reads at one ``now_slot`` with no update in
        between (one fetch frame). The flows of each excluded job are then indexed by link once per batch,
        so n reads that exclude the same job of n flows cost O(n), not O(n^2) (a PS's fetch for its
        workers). The result is the same with or without it."""
        if now_slot != self.now_slot:
            self.advance(now_slot)
        now = self.now_slot
        assert now is not None
        k = self.horizon
        ring = self.ring
        a = now - start_slot
        if a < 0:
            a = 0
        b = now + ring - start_slot
        if b > k:
            b = k
        rows = self._rows
        if a >= b:
            out = [[0] * k for _ in links]
        else:
            c0 = (start_slot + a) % ring
            n = b - a
            if c0 + n <= ring:
                c1 = c0 + n
                if a == 0 and b == k:
                    out = [rows[ln][c0:c1] for ln in links]
                else:
                    pre, post = [0] * a, [0] * (k - b)
                    out = [pre + rows[ln][c0:c1] + post for ln in links]
            else:
                pre, post = [0] * a, [0] * (k - b)
                n2 = n - (ring - c0)
                out = [pre + rows[ln][c0:] + rows[ln][:n2] + post for ln in links]
        if exclude is not None or exclude_job:
            flows = self._flows
            if exclude is not None:
                e = flows.get(exclude)
                if e is not None:
                    self._subtract(out, links, e, start_slot)
            if exclude_job:
                self._subtract_job(out, links, exclude_job, exclude, start_slot, memo)
        after: set[str] = set()  # the jobs ranked after below_rank, taken off
        if below_rank is not None and self._job_rank:
            for job, r in self._job_rank.items():
                if r > below_rank and job != exclude_job:
                    self._subtract_job(out, links, job, exclude, start_slot, memo)
                    after.add(job)
        if arrival_host is not None and exclude_job:
            self._arrival_view(out, links, exclude_job, exclude, arrival_host, start_slot, memo, below_rank, after)
        return out

    def host_rows(self, links: Sequence[int], start_slot: int, now_slot: int, host: str) -> list[list[int]]:
        """The load of every flow that ``host`` does not send, per link of ``links`` over K slots from
        ``start_slot``: what the other hosts booked, whatever their job (a host plans its slot 0 within it)."""
        out = self.rows(links, start_slot, now_slot)
        flows = self._flows
        for key in self._by_host.get(host, ()):
            e = flows.get(key)
            if e is not None:
                self._subtract(out, links, e, start_slot)
        return out

    def _arrival_view(self, out: list[list[int]], links: Sequence[int], job: str, skip: Hashable | None, host: str,
                      start_slot: int, memo: dict | None, rank: int | None = None, after: set[str] = frozenset()
                      ) -> None:
        """``job``'s view in arrival order (hostctl's daemon with job order none or smallest,
        docs/switchemu.md): the rows of ``out`` (``job``, ``skip`` and the jobs in ``after`` already left
        out) also leave out the jobs that arrived in the table after ``job`` (they plan around it) and every
        flow that ``host`` sends (it plans those itself). With ``rank`` (the asking job's), arrival orders
        only the jobs of the same rank (or none): a job ranked before ``rank`` counts whenever it arrived,
        and the jobs ranked after it are those in ``after``. A job not in the table yet arrives last: it
        sees every other job (of its rank and before)."""
        arrival = self._job_arrival
        mine = arrival.get(job)
        later = set(after)
        if mine is not None:
            ranks = self._job_rank if rank is not None else {}
            for other, a in arrival.items():
                if a > mine and other != job and other not in after:
                    r = ranks.get(other)
                    if r is not None and r < rank:
                        continue  # ranked before the asking job: it plans around it whenever it came
                    later.add(other)
                    self._subtract_job(out, links, other, skip, start_slot, memo)
        flows = self._flows
        for key in self._by_host.get(host, ()):
            if key == skip:
                continue
            e = flows.get(key)
            if e is not None and e.job_id != job and e.job_id not in later:
                self._subtract(out, links, e, start_slot)

    def _job_links(self, job: str, memo: dict | None) -> dict[int, list[tuple[Hashable, FlowEntry]]]:
        """``job``'s flows indexed by link, kept in ``memo`` for the other reads of one batch."""
        on = None if memo is None else memo.get(job)
        if on is None:
            on = {}
            flows = self._flows
            for key in self._by_job.get(job, ()):
                e = flows.get(key)
                if e is not None:
                    for ln in e.links:
                        b = on.get(ln)
                        if b is None:
                            on[ln] = [(key, e)]
                        else:
                            b.append((key, e))
            if memo is not None:
                memo[job] = on
        return on

    def _subtract_job(self, out: list[list[int]], links: Sequence[int], job: str, skip: Hashable | None,
                      start_slot: int, memo: dict | None) -> None:
        """Take the live contribution of ``job``'s flows (but ``skip``) off the rows of ``out``; ``memo``
        keeps the job's flows indexed by link for the other reads of the same batch (see ``rows``)."""
        on = self._job_links(job, memo)
        for i, ln in enumerate(links):
            for key, e in on.get(ln, ()):
                if key != skip:
                    live = self._live(e, start_slot)
                    if live is not None:
                        a, b, seg = live
                        r = out[i]
                        r[a:b] = map(sub, r[a:b], seg)

    def job_rows(self, links: Sequence[int], start_slot: int, now_slot: int, job: str, host: str,
                 memo: dict | None = None) -> tuple[list[list[int]], list[list[int]]]:
        """A job's fabric view from one host (the per-job share of a link, docs/mlcc.md): per link of
        ``links``, over K slots from ``start_slot``, the load of ``job``'s flows sent by hosts other than
        ``host``, and how many of those flows have a rate > 0 in each slot. A schedule that was published
        before the window started and still sends in its last slot counts at that rate to the window's end
        (its sender re-plans those slots next; without it, the window's last slots look free to the job's
        other hosts). ``memo`` as in ``rows``."""
        if now_slot != self.now_slot:
            self.advance(now_slot)
        k = self.horizon
        load = [[0] * k for _ in links]
        count = [[0] * k for _ in links]
        if not job:
            return load, count
        on = self._job_links(job, memo)
        for i, ln in enumerate(links):
            for _key, e in on.get(ln, ()):
                if e.host == host and host:
                    continue
                live = self._live(e, start_slot)
                if live is not None:
                    a, b, seg = live
                    if b < k and b == e.start_slot + k - start_slot and seg[-1] > 0:
                        # a schedule published before this window started ends inside it while still
                        # sending: it goes on at its last rate (its sender will plan those slots next)
                        seg = seg + [seg[-1]] * (k - b)
                        b = k
                    r, c = load[i], count[i]
                    r[a:b] = map(add, r[a:b], seg)
                    c[a:b] = [x + (v > 0) for x, v in zip(c[a:b], seg)]
        return load, count

    def _live(self, e: FlowEntry, start_slot: int) -> tuple[int, int, list[int]] | None:
        """``e``'s live contribution to a window starting at ``start_slot``: (first, end) positions in
        the window and the rates there, or None if it has none (past, or beyond the ring)."""
        es, now = e.start_slot, self.now_slot
        lo = max(start_slot, es, now)
        hi = min(start_slot + self.horizon, es + self.horizon, now + self.ring)
        if lo >= hi:
            return None
        return lo - start_slot, hi - start_slot, e.rates_Bps[lo - es:hi - es]

    def _subtract(self, out: list[list[int]], links: Sequence[int], e: FlowEntry, start_slot: int) -> None:
        """Take ``e``'s live contribution off the rows of ``out`` whose link ``e`` crosses."""
        live = self._live(e, start_slot)
        if live is None:
            return
        a, b, seg = live
        mine = e.links
        for i, ln in enumerate(links):  # a handful of links
            if ln in mine:
                r = out[i]
                r[a:b] = map(sub, r[a:b], seg)

    def loads(self, links: Sequence[int] | np.ndarray, start_slot: int, now_slot: int,
              exclude: Hashable | None = None, exclude_job: str | None = None,
              below_rank: int | None = None, memo: dict | None = None,
              arrival_host: str | None = None) -> np.ndarray:
        """Per-link load (bytes/s, int64) of ``links`` over K slots from ``start_slot``: an array of
        shape (len(links), K). Slots before now or not stored are 0. ``exclude``'s own schedule is
        left out (self-exclusion, Q-M8); with ``exclude_job``, so are all that job's flows (the
        paper's b_l: the load of *other* jobs); with ``below_rank``, so are the jobs ranked after it."""
        self.advance(now_slot)
        idx = links.tolist() if isinstance(links, np.ndarray) else [int(x) for x in links]
        out = self.rows(idx, int(start_slot), self.now_slot, exclude, exclude_job, below_rank, memo, arrival_host)
        return np.array(out, dtype=np.int64).reshape(len(idx), self.horizon)

    def path_load(self, links: Sequence[int] | np.ndarray, start_slot: int, now_slot: int,
                  exclude: Hashable | None = None) -> np.ndarray:
        """Sum over ``links`` of ``loads(...)``: the path load PL_f(t) (spec 2.4.2), shape (K,)."""
        return self.loads(links, start_slot, now_slot, exclude).sum(axis=0)

    def _window(self, e: FlowEntry, start_slot: int) -> list[int] | None:
        """``e``'s live contribution mapped onto the window [start_slot, start_slot + K)."""
        live = self._live(e, start_slot)
        if live is None:
            return None
        a, b, seg = live
        own = [0] * self.horizon
        own[a:b] = seg
        return own

    def schedule(self, key: Hashable) -> FlowEntry | None:
        """The stored entry of ``key`` (None if unknown, withdrawn or expired). It is the table's own
        object, updated in place by the flow's next ``update``: read it, do not keep it."""
        return self._flows.get(key)

    def __len__(self) -> int:
        return len(self._flows)

    def __contains__(self, key: Hashable) -> bool:
        return key in self._flows

    @property
    def _agg(self) -> np.ndarray:
        """The per-link ring aggregate as an (n_links, ring) int64 array (a copy; for tests)."""
        return np.array(self._rows, dtype=np.int64).reshape(self.n_links, self.ring)

    def recompute(self, start_slot: int | None = None) -> np.ndarray:
        """O(flows) reference: per-link load over K slots from ``start_slot`` (default now), summed
        from the stored schedules. For tests and consistency checks, never on the fast path."""
        assert self.now_slot is not None
        s0 = self.now_slot if start_slot is None else int(start_slot)
        out = np.zeros((self.n_links, self.horizon), dtype=np.int64)
        for e in self._flows.values():
            w = self._window(e, s0)
            if w is not None:
                out[list(e.links)] += np.array(w, dtype=np.int64)
        return out


def _int_rate(r) -> int:
    """One rate -> integer bytes/s (round half to even, as np.rint); ValueError if not finite."""
    if type(r) is int:
        return r
    f = float(r)
    if not math.isfinite(f):
        raise ValueError("rates must be finite")
    return round(f)
