"""Per-slot flow monitor of the MLCC pacer (pure: numpy and stdlib, no clock, no I/O).

Every slot the daemon reads the cumulative bytes acked of every selected flow
(hc_pace.c's hc_pace_flows) and drains the burst records (hc_bursts), then calls
``bursts()`` and ``observe()`` (in that order preferably; the other order works,
decisions just come one slot later). Times are the kernel's CLOCK_MONOTONIC in
seconds; ``observe()``'s t_s must be the time of the counter read itself (the
bounds below trust that the counters were read then). Give ``kernel_gap_s`` the
pacer's gap_s: every record then proves its gap, which decides most phases at once.

Per flow it gives bytes and rate this slot, B_i = max rate over the last
``window_slots`` slots (BBR-like max filter), bytes of the current iteration,
completed iterations and the bytes/iteration estimate E; per job the same summed.

Positions. Everything is kept as positions on the flow's cumulative counter: a
burst record of b bytes covers [p, p + b) where p is where the previous record
ended (the kernel's bursts tile its counter), and an iteration boundary is a
position. ``iter_bytes`` is always ``counter - boundary``, so it stays exact when
a record arrives a slot after its bytes were counted, or when an iteration ends
and the next one starts between two reads. A record is placed where the previous
one ended, but not below the last read before it started, and its end is clamped
between the reads around it: after a lost record (ring buffer full) or on a flow
first seen mid-burst, the positions are re-anchored on the counter.

Junctions, phases, iterations (per flow):

1. A *junction* is the end of a burst: from a burst record (its end time is
   exact) or from the counter not moving between two reads (end time known to
   one slot). What matters is the idle gap from the junction to the flow's next
   progress; the monitor keeps bounds [L, U] on it from the counter samples
   (progress seen or not at each read) and makes it exact when the next record
   gives the next burst's start. A record also proves a gap of at least
   ``kernel_gap_s`` (it is only emitted after such a gap).
2. A junction is a *phase end* when its gap is >= ``phase_gap_s``; records closer
   than that merge into one phase.
3. A phase end is an *iteration end*, except when
   a. E is known and the iteration so far holds < ``min_fraction`` * E bytes
      (volume rule: gaps between gradient buckets), or
   b. its gap is *short* in the flow's gap pattern (gap rule, below).
   Before E is known (the first phase end of a flow), every phase end that the
   gap rule does not call short is an iteration end.
4. The gap rule. Volume alone cannot recover from buckets separated by more than
   ``phase_gap_s``: before E is known every bucket is an iteration, so E is
   learnt as one bucket and the volume rule then keeps it so. The gap rule uses
   only gap lengths (not the classification, so it cannot lock itself in): the
   exact gaps >= phase_gap_s between consecutive records of the flow (the last
   ``gap_memory``) are sorted; if there is a jump by a factor >= ``gap_ratio``
   with at least 2 gaps above it (one pause is not a pattern), gaps below the jump
   are short. Example (4 buckets 30 ms apart, 200 ms compute): the first two
   iterations count one iteration per bucket, from the third on one per
   iteration; E (median of ``history``) is right from the fifth on.
   Known limits: gaps between iterations that vary by more than gap_ratio, or
   long pauses that recur within ``gap_memory`` phases (a checkpoint every few
   iterations), make some compute gaps "short"; use a hint (or tune) then.
5. Junctions are decided in order. One whose gap bounds straddle a threshold
   blocks the later ones, unless the outcome is the same either way (the volume
   rule says "continue" anyway). A blocked junction is resolved at its proven
   lower bound L (i.e. "no phase end" unless proven) once a later junction is a
   certain phase end and one more ``observe()`` has passed. That is for
   hc_pace.c, which only reports a burst when the flow next makes progress: the
   last burst before an idle period is reported when the flow sends again.
6. An iteration end counts one iteration, records its bytes (the last
   ``history`` ones give E by median) and moves the boundary. The first
   iteration of a flow goes into the history only if it was seen whole (the
   counter was <= 1 at first sight, or the first record started after it).

Hints (from a framework hook) override: ``bytes_per_iter`` replaces E for the
job's flows (split in proportion to their own estimates, equally when some are
unknown); ``iteration_start_s`` closes every flow's iteration at that time and
from then on the job's iterations are counted by hints only (auto-detection
would double count). Bursts that ended by that time belong to the old iteration.
"""

from __future__ import annotations

import math
import numbers
import operator
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field

import numpy as np

_RING = 16  # counter reads kept per flow: bounds for records that arrive late
_MIN_LONG = 2  # gaps needed above a jump before they count as a pattern
_ENDS = 8  # recent (position, end time) of records, to place hinted boundaries

INF = math.inf
NAN = math.nan
EPS = 1e-9  # seconds: gaps compared to a threshold within float rounding count as equal


@dataclass(frozen=True)
class MonitorParams:
    slot_s: float = 0.060  # nominal slot (informational: rates use the actual elapsed time)
    window_slots: int = 4  # B_i = max rate over the last window_slots slots (current included)
    phase_gap_s: float = 0.020  # an idle gap at least this long may end a phase (iteration)
    min_fraction: float = 0.5  # once E is known, an iteration holding < min_fraction*E bytes goes on
    history: int = 5  # completed iterations kept; E = median of them
    gap_ratio: float = 4.0  # gap rule: a jump by this factor separates short (bucket) gaps from long ones
    gap_memory: int = 32  # gap rule: exact phase gaps kept per flow
    kernel_gap_s: float = 0.0  # hc_pace.c's gap_ns in seconds (0 = unknown): a record proves such a gap

    def __post_init__(self) -> None:
        def positive(name: str) -> None:
            v = getattr(self, name)
            if isinstance(v, bool) or not isinstance(v, numbers.Real) or not math.isfinite(v) or v <= 0:
                raise ValueError(f"MonitorParams.{name} must be a positive finite number, got {v!r}")

        def count(name: str, low: int) -> None:
            v = getattr(self, name)
            if isinstance(v, bool) or not isinstance(v, numbers.Integral) or v < low:
                raise ValueError(f"MonitorParams.{name} must be an integer >= {low}, got {v!r}")

        positive("slot_s")
        positive("phase_gap_s")
        count("window_slots", 1)
        count("history", 1)
        count("gap_memory", _MIN_LONG + 1)
        mf = self.min_fraction
        if isinstance(mf, bool) or not isinstance(mf, numbers.Real) or not 0 < mf <= 1:
            raise ValueError(f"MonitorParams.min_fraction must be within (0, 1], got {mf!r}")
        gr = self.gap_ratio
        if isinstance(gr, bool) or not isinstance(gr, numbers.Real) or not (math.isfinite(gr) and gr > 1):
            raise ValueError(f"MonitorParams.gap_ratio must be a finite number > 1, got {gr!r}")
        kg = self.kernel_gap_s
        if isinstance(kg, bool) or not isinstance(kg, numbers.Real) or not (math.isfinite(kg) and kg >= 0):
            raise ValueError(f"MonitorParams.kernel_gap_s must be a finite number >= 0, got {kg!r}")


@dataclass(frozen=True)
class FlowStats:
    """Arrays aligned on flow_id (sorted); a snapshot, read-only."""

    flow_id: np.ndarray  # int64
    job: np.ndarray  # object (str job ids)
    bytes_slot: np.ndarray  # int64, acked bytes since the previous observe() (0 on first sight)
    rate_Bps: np.ndarray  # float64, bytes_slot / elapsed (0 on first sight)
    max_rate_Bps: np.ndarray  # float64, B_i: max rate_Bps over the last window_slots observations
    iter_bytes: np.ndarray  # int64, acked bytes of the current iteration
    iterations: np.ndarray  # int64, completed iterations
    bytes_per_iter: np.ndarray  # float64, E of this flow (hint share or median), nan if unknown
    bytes_left: np.ndarray  # float64, max(bytes_per_iter - iter_bytes, 0), nan if unknown
    active: np.ndarray  # bool, bytes_slot > 0
    done_bytes: np.ndarray  # int64, bytes of all completed iterations (done + iter = acked since first sight)

    def __len__(self) -> int:
        return len(self.flow_id)


@dataclass(frozen=True)
class JobStats:
    job: str
    flows: int
    iterations: int  # max over its flows (a PS's broadcast flows each see one phase per iteration)
    bytes_per_iter: float  # hint if given, else sum of its flows' estimates (nan if any unknown)
    iter_bytes: int  # sum of its flows' iter_bytes
    bytes_left: float  # max(bytes_per_iter - iter_bytes, 0), nan if unknown
    iter_start_s: float  # start of the current iteration (earliest of its flows, or the hint), nan if none
    source: str  # where bytes_per_iter comes from: "estimate" or "hint"


def gap_threshold(gaps: Iterable[float], ratio: float, min_long: int = _MIN_LONG) -> float:
    """The gap rule's split: gaps below the returned value are short (nan: no split).

    Sorted gaps are cut at the largest jump by a factor >= ratio that leaves at
    least min_long gaps above it; the threshold is the geometric mean at the cut.
    """
    return _threshold_sorted(sorted(gaps), ratio, min_long)


def ring_thresholds(gaps: np.ndarray, count: np.ndarray, ratio: float, min_long: int = _MIN_LONG) -> np.ndarray:
    """gap_threshold of each row of gaps [n, M] (a ring: the last min(count, M) gaps of a flow,
    in any order, nan where unused), with arrays: the same cut, on the same floats."""
    g = np.sort(gaps, axis=1)  # nan (unused) last
    n, M = g.shape
    m = np.minimum(count, M)
    at = np.arange(n)
    out = np.full(n, NAN)
    ok = (m > min_long) & (g[:, 0] > 0)
    ok[ok] = g[at[ok], m[ok] - min_long] >= ratio * g[ok, 0]  # else no jump can reach the ratio
    if not ok.any():
        return out
    # jumps at the cuts k = 0 .. m - min_long - 1; the largest, the last one on ties
    jump = g[:, 1:M - min_long + 1] / g[:, :M - min_long]
    jump[np.arange(M - min_long) >= (m - min_long)[:, None]] = -INF
    k = (M - min_long - 1) - np.argmax(jump[:, ::-1], axis=1)
    cut = ok & (jump[at, k] >= ratio)
    out[cut] = np.sqrt(g[at[cut], k[cut]] * g[at[cut], k[cut] + 1])
    return out


def _threshold_sorted(g: list, ratio: float, min_long: int = _MIN_LONG) -> float:
    """gap_threshold of gaps already sorted (the monitor's flows use ring_thresholds)."""
    if len(g) <= min_long or g[0] <= 0 or g[-min_long] < ratio * g[0]:
        return NAN  # no jump can reach the ratio
    # the largest jump, the last one on ties (cuts k = 0 .. len - min_long - 1)
    r, k = max(zip([b / a for a, b in zip(g, g[1:len(g) - min_long + 1])], range(len(g))))
    return math.sqrt(g[k] * g[k + 1]) if r >= ratio else NAN


_POS = operator.attrgetter("pos")  # a junction's sort key


class _Junction:
    """End of a burst at counter position pos. e: when the burst ended, s: when the
    flow next made progress; each as bounds, equal once exact. (A plain class with
    slots: one is made per burst record.)"""

    __slots__ = ("pos", "e_lo", "e_hi", "s_lo", "s_hi", "blocked_at")

    def __init__(self, pos: int, e_lo: float, e_hi: float, s_lo: float, s_hi: float) -> None:
        self.pos, self.e_lo, self.e_hi, self.s_lo, self.s_hi = pos, e_lo, e_hi, s_lo, s_hi
        self.blocked_at = -1  # observe() count when first blocked behind a certain phase end

    def bounds(self) -> tuple[float, float]:
        """[L, U] on the idle gap, widened by EPS against float rounding."""
        return self.s_lo - self.e_hi + EPS, self.s_hi - self.e_lo + EPS

    def __repr__(self) -> str:
        return f"_Junction({self.pos}, {self.e_lo}, {self.e_hi}, {self.s_lo}, {self.s_hi}, {self.blocked_at})"


@dataclass
class _Track:
    """The undecided junctions of one flow (its other record state is in the per-flow arrays:
    rec_pos, last_e, rec_t0, the gap and end rings)."""

    junctions: list = field(default_factory=list)


class _Rows:
    """Plain-Python working copies of some flows' per-flow fields, for the per-record
    slow path (a numpy element access costs ~100 ns, a list's ~20 ns): gathered with
    one fancy index per field, written back with one by put(). Index u is the u-th
    of the rows given."""

    __slots__ = ("idx", "base", "jmax", "acked", "iters", "done", "origin", "first_ok", "hist_n", "hist",
                 "est", "eff", "start", "thr", "busy", "job")

    def __init__(self, mon: FlowMonitor, idx: np.ndarray) -> None:
        a = mon._a
        self.idx = idx
        self.base = a["base"][idx].tolist()
        self.jmax = a["jmax"][idx].tolist()
        self.acked = a["acked"][idx].tolist()
        self.iters = a["iters"][idx].tolist()
        self.done = a["done"][idx].tolist()
        self.origin = a["origin"][idx].tolist()
        self.first_ok = a["first_ok"][idx].tolist()
        self.hist_n = a["hist_n"][idx].tolist()
        self.hist = a["hist"][idx].tolist()
        self.est = a["est"][idx].tolist()
        self.eff = mon._e_eff[idx].tolist()
        self.start = a["start"][idx].tolist()
        self.thr = a["thr"][idx].tolist()
        self.busy = a["busy"][idx].tolist()
        self.job = a["job"][idx].tolist() if mon._hints else None  # only hints need it

    def put(self, mon: FlowMonitor) -> None:
        a, idx = mon._a, self.idx
        a["base"][idx] = self.base
        a["jmax"][idx] = self.jmax
        a["iters"][idx] = self.iters
        a["done"][idx] = self.done
        a["first_ok"][idx] = self.first_ok
        a["hist_n"][idx] = self.hist_n
        a["hist"][idx] = self.hist
        a["est"][idx] = self.est
        mon._e_eff[idx] = self.eff
        a["start"][idx] = self.start
        a["thr"][idx] = self.thr
        a["busy"][idx] = self.busy


@dataclass
class _Hint:
    bytes_per_iter: float | None = None
    last_start: float | None = None  # latest iteration_start_s given
    applied: float | None = None  # latest one applied to the flows
    pending: list = field(default_factory=list)

    @property
    def driven(self) -> bool:
        return self.last_start is not None


# per-flow arrays: name -> (dtype, fill for a new row, extra dimension)
_FIELDS: dict[str, tuple[type, object, str | None]] = {
    "ids": (np.int64, 0, None),
    "job": (object, None, None),
    "acked": (np.int64, 0, None),
    "base": (np.int64, 0, None),  # position where the current iteration started
    "jmax": (np.int64, 0, None),  # highest junction position known
    "origin": (np.int64, 0, None),  # position where the flow's accounting started
    "iters": (np.int64, 0, None),
    "done": (np.int64, 0, None),
    "est": (np.float64, NAN, None),  # median of the history
    "start": (np.float64, NAN, None),  # current iteration's start time
    "still": (np.float64, NAN, None),  # first read showing the current counter value
    "still_prev": (np.float64, NAN, None),  # the read before it
    "t0": (np.float64, NAN, None),  # first read
    "thr": (np.float64, NAN, None),  # gap rule threshold (nan: no split)
    "first_ok": (np.int8, -1, None),  # first record started after first sight: 1, before: 0, none yet: -1
    "hist": (np.float64, NAN, "history"),
    "hist_n": (np.int64, 0, None),
    "rates": (np.float64, 0.0, "window"),
    "ring": (np.int64, -1, "ring"),
    "busy": (bool, False, None),  # has undecided junctions
    # burst records
    "rec_pos": (np.int64, 0, None),  # where the next burst record starts (end of the previous one)
    "last_e": (np.float64, -INF, None),  # end of the last record (-inf: none yet)
    "rec_t0": (np.float64, NAN, None),  # records that started before it straddle the baseline (first sight)
    "gaps": (np.float64, NAN, "gaps"),  # ring of the last gap_memory exact phase gaps (gap rule), nan: unused
    "gap_n": (np.int64, 0, None),  # gaps ever added (next ring column: gap_n % gap_memory)
    "end_pos": (np.int64, 0, "ends"),  # ring of the last _ENDS records' (end position, end time),
    "end_t": (np.float64, NAN, "ends"),  # to place hinted boundaries (nan: unused)
    "end_n": (np.int64, 0, None),
}


class FlowMonitor:
    """Per-flow and per-job traffic state, updated once per slot (module docstring)."""

    def __init__(self, params: MonitorParams = MonitorParams()) -> None:
        self.p = params
        self._extra = {"history": params.history, "window": params.window_slots, "ring": _RING,
                       "gaps": params.gap_memory, "ends": _ENDS}
        self._a = {name: self._new(name, 0) for name in _FIELDS}
        self._job_list: list = []
        self._e_eff = np.zeros(0)
        self._t: float | None = None
        self._nobs = 0
        self._rw = -1  # last written column of "rates"
        self._kw = -1  # last written column of "ring"
        self._ring_t = np.full(_RING, NAN)
        self._tracks: dict[int, _Track] = {}
        self._pre: dict[int, list[tuple[float, float, int]]] = {}
        self._hints: dict[str, _Hint] = {}
        self._groups: tuple[np.ndarray, np.ndarray] | None = None
        self._stats = _empty_stats()
        self.records_dropped = 0  # out-of-order or unattributable burst records
        self.hints_ignored = 0  # iteration starts not after the job's previous one
        self.fast_paths = True  # array paths for the common cases (tests turn them off to compare)

    # -- per-flow arrays --------------------------------------------------------------------
    def _new(self, name: str, n: int) -> np.ndarray:
        dtype, fill, extra = _FIELDS[name]
        shape = (n,) if extra is None else (n, self._extra[extra])
        arr = np.empty(shape, dtype=dtype)
        arr[...] = fill
        return arr

    def _regather(self, src: np.ndarray, keep: np.ndarray) -> None:
        """Rows for the new flow set: row k copies old row src[k] where keep[k]."""
        n = len(src)
        for name, old in self._a.items():
            new = self._new(name, n)
            if keep.any():
                new[keep] = old[src[keep]]
            self._a[name] = new
        self._groups = None

    # -- inputs ------------------------------------------------------------------------------
    def observe(self, t_s: float, flow_id: np.ndarray, job: Sequence[str], acked_bytes: np.ndarray) -> FlowStats:
        """One slot: every live flow's cumulative bytes acked at t_s.

        A flow missing here is forgotten; a counter that went down (or a new job for
        the id) is a new connection reusing the id. A new flow's counter is its
        baseline (bytes_slot 0), plus the bytes bursts() already reported for it.
        """
        t = float(t_s)
        if not math.isfinite(t):
            raise ValueError(f"t_s must be finite, got {t_s!r}")
        if self._t is not None and not t > self._t:
            raise ValueError(f"t_s must increase: {t!r} after {self._t!r}")
        ids = np.asarray(flow_id, dtype=np.int64).reshape(-1)
        acked = np.asarray(acked_bytes).astype(np.int64).reshape(-1)
        job_list = list(job)
        n = len(ids)
        if not (n == len(acked) == len(job_list)):
            raise ValueError(f"flow_id, job and acked_bytes differ in length: {n}, {len(job_list)}, {len(acked)}")
        if (acked < 0).any():
            raise ValueError("acked_bytes must be >= 0")
        if n > 1 and not (ids[1:] > ids[:-1]).all():
            order = np.argsort(ids, kind="stable")
            ids, acked = ids[order], acked[order]
            if (ids[1:] == ids[:-1]).any():
                raise ValueError("duplicate flow ids")
            job_list = [job_list[k] for k in order.tolist()]

        a = self._a
        old_ids, n_old = a["ids"], len(a["ids"])
        if n == n_old and np.array_equal(ids, old_ids) and job_list == self._job_list:
            src = None
            cont = acked >= a["acked"]
        else:
            jobs = np.empty(n, dtype=object)
            jobs[:] = job_list
            if n_old:
                src = np.minimum(np.searchsorted(old_ids, ids), n_old - 1)
                cont = old_ids[src] == ids
                cont[cont] = (acked[cont] >= a["acked"][src[cont]]) & (jobs[cont] == a["job"][src[cont]])
            else:
                src, cont = np.zeros(n, dtype=np.int64), np.zeros(n, dtype=bool)
        if not cont.all() or src is not None:
            if src is None:
                src = np.arange(n)
                jobs = a["job"]
            kept = np.zeros(n_old, dtype=bool)
            kept[src[cont]] = True
            for fid in old_ids[~kept].tolist():
                self._tracks.pop(fid, None)
            self._regather(src, cont)
            a = self._a
            new = ~cont
            a["ids"][:] = ids
            a["job"][:] = jobs
            a["acked"][new] = acked[new]
            for name in ("base", "jmax", "origin", "rec_pos"):
                a[name][new] = acked[new]
            for name in ("still", "t0", "rec_t0"):
                a[name][new] = t
            self._job_list = job_list
        new = ~cont

        t_prev = self._t
        bytes_slot = acked - a["acked"]
        bytes_slot[new] = 0
        a["acked"][:] = acked
        self._t = t
        self._nobs += 1
        rate = np.zeros(n) if t_prev is None else bytes_slot / (t - t_prev)
        self._rw = (self._rw + 1) % self.p.window_slots
        a["rates"][:, self._rw] = rate
        self._kw = (self._kw + 1) % _RING
        self._ring_t[self._kw] = t
        a["ring"][:, self._kw] = acked
        moved = bytes_slot > 0
        if moved.any():
            a["still_prev"][moved] = a["still"][moved]
            a["still"][moved] = t
            if t_prev is not None:  # progress after the boundary: it started after the previous read
                m = moved & np.isnan(a["start"]) & (acked > a["base"])
                a["start"][m] = t_prev

        self._refresh_e_eff()
        for h_job, h in self._hints.items():
            if h.pending and h.pending[0] <= t:
                self._apply_starts(h_job, h)

        idle_new = cont & ~moved & (acked > a["jmax"])
        if idle_new.any():
            slow_idle = self._idle_fast(np.flatnonzero(idle_new & ~a["busy"]), t)
            idle_new[:] = False
            idle_new[slow_idle] = True
            idle_new |= cont & ~moved & (acked > a["jmax"])  # busy flows
        pre_new = np.zeros(n, dtype=bool)
        if self._pre:
            for fid, recs in self._pre.items():
                k = int(np.searchsorted(ids, fid))
                if k < n and ids[k] == fid and new[k]:
                    pre_new[k] = True
                else:
                    self.records_dropped += len(recs)
        sel = np.flatnonzero(idle_new | a["busy"] | pre_new)
        if len(sel):
            rows = sel.tolist()
            pre_l, idle_l = pre_new[sel].tolist(), idle_new[sel].tolist()
            fids = ids[sel].tolist()
            for i, fid, pre in zip(rows, fids, pre_l):  # first (each touches its own flow only)
                if pre:
                    self._presight(i, self._pre[fid])
            v = _Rows(self, sel)
            acked_l = acked[sel].tolist()
            still_prev, still = a["still_prev"][sel].tolist(), a["still"][sel].tolist()
            for u, i in enumerate(rows):
                tr = self._track(i, fids[u])
                changed = pre_l[u] or idle_l[u]
                c = acked_l[u]
                for j in tr.junctions:  # what this read tells about when each flow resumed
                    if j.s_lo != j.s_hi:
                        if c <= j.pos:
                            j.s_lo, changed = max(j.s_lo, t), True
                        elif j.s_hi == INF:
                            j.s_hi, changed = t, True
                    if j.blocked_at >= 0:
                        changed = True  # may be forced now
                if idle_l[u]:
                    e_lo = still_prev[u]
                    tr.junctions.append(_Junction(c, -INF if math.isnan(e_lo) else e_lo, still[u], t, INF))
                    v.jmax[u] = c
                if changed:
                    self._settle(v, u, tr)
            v.put(self)
        self._pre = {}

        self._stats = self._snapshot(bytes_slot, rate)
        return self._stats

    def _idle_fast(self, rows: np.ndarray, t: float) -> np.ndarray:
        """Flows that stopped moving and have no undecided junction: decide the new
        junction (rules 2-4) with arrays. Returns the rows left undecided."""
        if not len(rows):
            return rows
        a, p = self._a, self.p
        pos = a["acked"][rows]
        lo = t - a["still"][rows] + EPS  # idle since the first read at this value at least; U = inf
        phase = lo >= p.phase_gap_s
        est = self._e_eff[rows]
        volume = np.isnan(est) | (pos - a["base"][rows] >= p.min_fraction * est)
        thr = a["thr"][rows]
        long_ = np.isnan(thr) | (lo >= thr)
        driven = self._job_mask(rows, lambda h: h.driven)
        a["jmax"][rows] = pos
        live = volume & ~driven
        done = live & phase & long_
        if done.any():
            self._commit_rows(rows[done], pos[done], np.full(int(done.sum()), NAN))
        return rows[live & ~done]

    def bursts(self, flow_id: np.ndarray, start_s: np.ndarray, end_s: np.ndarray, nbytes: np.ndarray) -> None:
        """Completed bursts reported by the kernel since the last call, in any order.

        Records of a flow not observed yet are kept for the next observe(); records of
        a flow that is gone (not live, ended before the last observe()) are dropped.
        """
        ids = np.asarray(flow_id, dtype=np.int64).reshape(-1)
        s = np.asarray(start_s, dtype=np.float64).reshape(-1)
        e = np.asarray(end_s, dtype=np.float64).reshape(-1)
        b = np.asarray(nbytes).astype(np.int64).reshape(-1)
        if not (len(ids) == len(s) == len(e) == len(b)):
            raise ValueError("flow_id, start_s, end_s and nbytes differ in length")
        if not (np.isfinite(s).all() and np.isfinite(e).all()) or (e < s).any() or (b < 0).any():
            raise ValueError("burst records need finite start_s <= end_s and nbytes >= 0")
        if len(ids) == 0:
            return
        order = np.lexsort((e, s, ids))
        ids, s, e, b = ids[order], s[order], e[order], b[order]
        live_ids = self._a["ids"]
        if len(live_ids):
            k = np.minimum(np.searchsorted(live_ids, ids), len(live_ids) - 1)
            live = live_ids[k] == ids
        else:
            k, live = np.zeros(len(ids), dtype=np.int64), np.zeros(len(ids), dtype=bool)
        for r in np.flatnonzero(~live).tolist():
            if self._t is None or e[r] > self._t:
                self._pre.setdefault(int(ids[r]), []).append((float(s[r]), float(e[r]), int(b[r])))
            else:
                self.records_dropped += 1
        if live.any():
            self._records(k[live], s[live], e[live], b[live])

    def hint(self, job: str, bytes_per_iter: int | None = None, iteration_start_s: float | None = None) -> None:
        """Exact information from a framework hook about a job.

        bytes_per_iter: the job's bytes per iteration; replaces the estimate for its
        flows (shares in proportion to their own estimates, equal when some are unknown).
        iteration_start_s: a new iteration started then: every flow of the job closes
        its iteration at that time (counted even if empty, except before the flow's
        first bytes and at the first hinted start) and from then on the job's
        iterations are counted by these hints only. A start not after the job's previous one is ignored (counted
        in hints_ignored); a start after the last observe() is applied by the next
        observe() that reaches it. Bad values raise ValueError.
        """
        if not isinstance(job, str) or not job:
            raise ValueError(f"job must be a non-empty string, got {job!r}")
        if bytes_per_iter is None and iteration_start_s is None:
            raise ValueError("hint needs bytes_per_iter and/or iteration_start_s")
        if bytes_per_iter is not None and (
            isinstance(bytes_per_iter, bool) or not isinstance(bytes_per_iter, numbers.Real)
            or not math.isfinite(bytes_per_iter) or bytes_per_iter <= 0
        ):
            raise ValueError(f"bytes_per_iter must be a positive number of bytes, got {bytes_per_iter!r}")
        h = self._hints.get(job) or _Hint()
        if iteration_start_s is not None:
            ts = iteration_start_s
            if isinstance(ts, bool) or not isinstance(ts, numbers.Real) or not math.isfinite(ts):
                raise ValueError(f"iteration_start_s must be a finite time, got {ts!r}")
        self._hints[job] = h
        if bytes_per_iter is not None:
            h.bytes_per_iter = float(bytes_per_iter)
            self._refresh_e_eff()
        if iteration_start_s is not None:
            if h.last_start is not None and not iteration_start_s > h.last_start:
                self.hints_ignored += 1  # a repeat, or late: that iteration is already open
                return
            h.last_start = float(iteration_start_s)
            h.pending.append(h.last_start)
            if self._t is not None and h.last_start <= self._t:
                self._apply_starts(job, h)

    def clear_hint(self, job: str) -> None:
        """Back to estimates for the job (e.g. the framework hook went away)."""
        if self._hints.pop(job, None) is not None:
            self._refresh_e_eff()

    # -- outputs -----------------------------------------------------------------------------
    def flow_stats(self) -> FlowStats:
        """The result of the last observe()."""
        return self._stats

    def jobs(self) -> dict[str, JobStats]:
        """Per-job sums over the live flows (current state, bursts() included)."""
        a = self._a
        if len(a["ids"]) == 0:
            return {}
        uniq, inv = self._job_groups()
        m = len(uniq)
        flows = np.bincount(inv, minlength=m)
        iters = np.zeros(m, dtype=np.int64)
        np.maximum.at(iters, inv, a["iters"])
        ib = np.bincount(inv, weights=np.maximum(a["acked"] - a["base"], 0), minlength=m)
        bpi = np.bincount(inv, weights=self._e_eff, minlength=m)  # nan if any flow's estimate is unknown
        start = np.full(m, INF)
        np.fmin.at(start, inv, a["start"])
        out = {}
        for k, name in enumerate(uniq.tolist()):
            h = self._hints.get(name)
            source = "estimate"
            b = float(bpi[k])
            s = float(start[k]) if start[k] != INF else NAN
            if h is not None and h.bytes_per_iter is not None:
                b, source = h.bytes_per_iter, "hint"
            if h is not None and h.applied is not None:
                s = h.applied
            it_bytes = int(round(ib[k]))
            left = NAN if math.isnan(b) else max(b - it_bytes, 0.0)
            out[name] = JobStats(name, int(flows[k]), int(iters[k]), b, it_bytes, left, s, source)
        return out

    # -- internals ---------------------------------------------------------------------------
    def _snapshot(self, bytes_slot: np.ndarray, rate: np.ndarray) -> FlowStats:
        a = self._a
        iter_bytes = np.maximum(a["acked"] - a["base"], 0)
        bpi = self._e_eff.copy()
        rates = a["rates"]
        max_rate = rates[:, 0].copy()
        for c in range(1, rates.shape[1]):
            np.maximum(max_rate, rates[:, c], out=max_rate)
        arrays = dict(
            flow_id=a["ids"].copy(), job=a["job"].copy(), bytes_slot=bytes_slot, rate_Bps=rate,
            max_rate_Bps=max_rate, iter_bytes=iter_bytes, iterations=a["iters"].copy(), bytes_per_iter=bpi,
            bytes_left=np.maximum(bpi - iter_bytes, 0.0), active=bytes_slot > 0, done_bytes=a["done"].copy(),
        )
        for v in arrays.values():
            v.flags.writeable = False
        return FlowStats(**arrays)

    def _job_groups(self) -> tuple[np.ndarray, np.ndarray]:
        if self._groups is None:
            self._groups = np.unique(self._a["job"], return_inverse=True)
        return self._groups

    def _job_mask(self, rows: np.ndarray, pred) -> np.ndarray:
        """Rows whose job has a hint satisfying pred."""
        names = [j for j, h in self._hints.items() if pred(h)]
        if not names or not len(rows):
            return np.zeros(len(rows), dtype=bool)
        uniq, inv = self._job_groups()
        return np.isin(uniq, names)[inv[rows]]

    def _refresh_e_eff(self) -> None:
        est = self._a["est"]
        eff = est.copy()
        hinted = {j: h.bytes_per_iter for j, h in self._hints.items() if h.bytes_per_iter is not None}
        if hinted and len(est):
            uniq, inv = self._job_groups()
            for k, name in enumerate(uniq.tolist()):
                if name in hinted:
                    rows = inv == k
                    e = est[rows]
                    if np.isfinite(e).all() and e.sum() > 0:
                        eff[rows] = hinted[name] * e / e.sum()
                    else:
                        eff[rows] = hinted[name] / rows.sum()
        self._e_eff = eff

    def _track(self, i: int, fid: int | None = None) -> _Track:
        if fid is None:
            fid = int(self._a["ids"][i])
        tr = self._tracks.get(fid)
        if tr is None:
            tr = _Track()
            self._tracks[fid] = tr
        return tr

    def _reads(self, rows: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Recent reads of the given flows, oldest first: times (R,), counters and validity (n, R)."""
        order = (np.arange(_RING) + self._kw + 1) % _RING
        ts = self._ring_t[order]
        cs = self._a["ring"][rows[:, None], order]
        return ts, cs, (cs >= 0) & np.isfinite(ts)

    def _presight(self, i: int, recs: list) -> None:
        """Records that arrived before the flow's first read: their bytes end at the
        first counter value and count into the current iteration."""
        a = self._a
        origin = int(a["acked"][i]) - sum(r[2] for r in recs)
        for name in ("base", "jmax", "origin", "rec_pos"):
            a[name][i] = origin
        a["rec_t0"][i] = -INF
        recs = sorted(recs)
        self._records(np.full(len(recs), i), *(np.array(x) for x in zip(*recs)), settle=False)

    def _records(self, rows: np.ndarray, s: np.ndarray, e: np.ndarray, b: np.ndarray, settle: bool = True) -> None:
        """Burst records of live flows (rows), sorted by flow then time.

        Places each record on the counter: it starts where the previous one ended (but
        not below the read before its start), its end is clamped between the reads
        around its end time; then updates the junctions and the gap rule."""
        a, p = self._a, self.p
        ts, cs, ok = self._reads(rows)
        c_start = np.where(ok & (ts <= s[:, None]), cs, -1).max(axis=1)  # read before it started
        c_lo = np.where(ok & (ts <= e[:, None]), cs, -1).max(axis=1)
        c_hi = np.where(ok & (ts >= e[:, None]), cs, np.iinfo(np.int64).max).min(axis=1)
        if settle and self.fast_paths and not self._hints:
            rest = ~self._records_simple(rows, s, e, b, ts, cs, ok, c_start, c_lo, c_hi)
            if not rest.any():
                return
            rows, s, e, b, cs, ok, c_start, c_lo, c_hi = (
                x[rest] for x in (rows, s, e, b, cs, ok, c_start, c_lo, c_hi))
        n = len(rows)
        # the flows, in order: u = index of the record's flow among them
        first = np.ones(n, dtype=bool)
        first[1:] = rows[1:] != rows[:-1]
        idx = rows[first]
        ul = (np.cumsum(first) - 1).tolist()
        v = _Rows(self, idx)
        tracks = [self._track(i, fid) for i, fid in zip(idx.tolist(), a["ids"][idx].tolist())]
        rec_pos, last_el, rec_t0 = a["rec_pos"][idx].tolist(), a["last_e"][idx].tolist(), a["rec_t0"][idx].tolist()
        fo_before = list(v.first_ok)
        starts, ends, use = [0] * n, [0] * n, [False] * n
        new_gaps: dict[int, list[float]] = {}
        sl, el, bl = s.tolist(), e.tolist(), b.tolist()
        st_l, lo_l, hi_l = c_start.tolist(), c_lo.tolist(), c_hi.tolist()
        gap = p.phase_gap_s
        for r in range(n):
            u = ul[r]
            si, ei, bi = sl[r], el[r], bl[r]
            last_e = last_el[u]
            if si < last_e:
                self.records_dropped += 1
                continue
            t0 = rec_t0[u]
            if fo_before[u] < 0 and last_e == -INF:
                v.first_ok[u] = 1 if si >= t0 else 0
            if si < t0:  # started before first sight: only the part after it is in our accounting
                part = 1.0 if ei <= t0 else (t0 - si) / (ei - si)
                bi -= int(round(bi * part))
            start = max(rec_pos[u], st_l[r])  # bytes read before it started are not in it
            end = min(max(start + bi, lo_l[r]), hi_l[r])
            starts[r], ends[r], use[r] = min(start, end), end, True
            rec_pos[u] = end
            if last_e > -INF and si - last_e + EPS >= gap:
                new_gaps.setdefault(u, []).append(si - last_e)
            last_el[u] = ei
        a["rec_pos"][idx], a["last_e"][idx] = rec_pos, last_el
        if new_gaps:  # the flows' thresholds change: computed once per flow, from all its new gaps
            ring, count, mem = a["gaps"], a["gap_n"], p.gap_memory
            for u, gs in new_gaps.items():
                i = int(idx[u])
                for g in gs:  # into the ring: the oldest leaves when it is full
                    ring[i, count[i] % mem] = g
                    count[i] += 1
            us = list(new_gaps)
            for u, x in zip(us, self._thresholds(idx[us]).tolist()):
                v.thr[u] = x
        # when each record's flow next moved past its end, from the reads
        past = cs > np.array(ends, dtype=np.int64)[:, None]
        s_lo = np.where(ok & ~past, ts, -INF).max(axis=1).tolist()
        s_hi = np.where(ok & past, ts, INF).min(axis=1).tolist()
        base_l, vstart, jmax = v.base, v.start, v.jmax  # (no commit before the settles: base is the one read)
        kg = p.kernel_gap_s
        e_pos, e_t, e_n = a["end_pos"], a["end_t"], a["end_n"]
        for r in range(n):
            if not use[r]:
                continue
            u, si, ei, start, end = ul[r], sl[r], el[r], starts[r], ends[r]
            tr = tracks[u]
            js = tr.junctions
            for j in js:  # the burst before this one now knows when the flow resumed
                if j.pos == start and j.s_lo != j.s_hi:
                    j.s_lo = j.s_hi = max(si, j.e_lo)
            base = base_l[u]
            if start == base and end > start:
                vstart[u] = si
            if end > base:
                for j in js:
                    if j.pos == end:
                        break
                else:
                    j = _Junction(end, ei, ei, s_lo[r], s_hi[r])
                    js.append(j)
                j.e_lo = j.e_hi = ei
                if j.s_lo != j.s_hi:
                    j.s_lo = max(j.s_lo, ei + kg)
                if end > jmax[u]:
                    jmax[u] = end
            i = int(idx[u])  # the record's end into the ring of recent ends
            e_pos[i, e_n[i] % _ENDS], e_t[i, e_n[i] % _ENDS] = end, ei
            e_n[i] += 1
        if settle:
            for u, tr in enumerate(tracks):
                self._settle(v, u, tr)
        v.put(self)

    def _records_simple(self, rows, s, e, b, ts, cs, ok, c_start, c_lo, c_hi) -> np.ndarray:
        """_records for the common case, with arrays: a flow's only record in the batch, not its
        first record, in order (s >= the previous record's end) and after first sight, the flow
        without undecided junctions (nor hints on the monitor). Its record then makes at most
        one junction, decided at once or kept alone, as the per-record path would: the same
        steps on the same floats. Returns the mask of the records done."""
        a, p = self._a, self.p
        n = len(rows)
        done = np.ones(n, dtype=bool)  # the flow's only record in the batch (rows are sorted)
        if n > 1:
            dup = rows[1:] == rows[:-1]
            done[1:] &= ~dup
            done[:-1] &= ~dup
        last_e = a["last_e"][rows]
        done &= ~a["busy"][rows] & (last_e > -INF) & (s >= last_e) & (s >= a["rec_t0"][rows])
        k = np.flatnonzero(done)
        if not len(k):
            return done
        r, si, ei, last_e = rows[k], s[k], e[k], last_e[k]
        # place the record on the counter
        start = np.maximum(a["rec_pos"][r], c_start[k])
        end = np.minimum(np.maximum(start + b[k], c_lo[k]), c_hi[k])
        start = np.minimum(start, end)
        a["rec_pos"][r], a["last_e"][r] = end, ei
        g = si - last_e
        new_gap = g + EPS >= p.phase_gap_s
        if new_gap.any():  # into the gap ring (the oldest leaves when it is full), a new threshold
            rg = r[new_gap]
            count = a["gap_n"][rg]
            a["gaps"][rg, count % p.gap_memory] = g[new_gap]
            a["gap_n"][rg] = count + 1
            a["thr"][rg] = self._thresholds(rg)
        count = a["end_n"][r]  # into the ring of recent ends
        a["end_pos"][r, count % _ENDS], a["end_t"][r, count % _ENDS] = end, ei
        a["end_n"][r] = count + 1
        # when the flow next moved past the record's end, from the reads
        past = cs[k] > end[:, None]
        s_lo = np.where(ok[k] & ~past, ts, -INF).max(axis=1)
        s_hi = np.where(ok[k] & past, ts, INF).min(axis=1)
        base = a["base"][r]
        began = (start == base) & (end > start)
        a["start"][r[began]] = si[began]
        has_j = end > base  # the record ends a burst inside the current iteration: a junction
        a["jmax"][r] = np.where(has_j, np.maximum(a["jmax"][r], end), a["jmax"][r])
        s_lo = np.where(s_lo != s_hi, np.maximum(s_lo, ei + p.kernel_gap_s), s_lo)  # the record proves its gap
        # _settle of that one junction (rules 2-5)
        lo, hi = s_lo - ei + EPS, s_hi - ei + EPS
        gap, thr = p.phase_gap_s, a["thr"][r]
        phase = lo >= gap
        long_ = np.isnan(thr) | (lo >= thr)
        drop = (~has_j | (~phase & (hi < gap))  # no junction, or certainly no phase end
                | (end - base < p.min_fraction * self._e_eff[r])  # the volume rule says "go on"
                | (~long_ & (hi < thr)))  # a short gap (gap rule)
        commit = ~drop & phase & long_
        kept = ~drop & ~commit  # undecided: kept (alone, so not blocked behind another)
        if commit.any():
            self._commit_rows(r[commit], end[commit], s_lo[commit])
        for u in np.flatnonzero(kept).tolist():
            self._track(int(r[u])).junctions.append(
                _Junction(int(end[u]), float(ei[u]), float(ei[u]), float(s_lo[u]), float(s_hi[u])))
        a["busy"][r] = kept
        return done

    def _thresholds(self, rows: np.ndarray) -> np.ndarray:
        """The gap rule's threshold of each row, from its gap ring (gap_threshold of its gaps)."""
        a = self._a
        return ring_thresholds(a["gaps"][rows], a["gap_n"][rows], self.p.gap_ratio)

    def _settle(self, v: _Rows, u: int, tr: _Track) -> None:
        """Decide the u-th flow of v's junctions in order (module docstring, rules 2-5)."""
        p = self.p
        if v.job is not None:
            h = self._hints.get(v.job[u])
            if h is not None and h.driven:  # hints count this job's iterations
                tr.junctions = []
                v.busy[u] = False
                return
        js = tr.junctions
        if not js:
            v.busy[u] = False
            return
        if len(js) > 1:
            js.sort(key=_POS)
        base = v.base[u]
        thr = v.thr[u]
        gap, mf = p.phase_gap_s, p.min_fraction
        need = mf * v.eff[u]
        keep: list[_Junction] = []
        for n, j in enumerate(js):
            if keep:  # blocked behind an undecided junction
                keep.append(j)
                continue
            if j.pos <= base:
                continue
            lo, hi = j.s_lo - j.e_hi + EPS, j.s_hi - j.e_lo + EPS  # j.bounds()
            phase = True if lo >= gap else (False if hi < gap else None)
            if phase is False or j.pos - base < need:  # (need is nan while E is unknown)
                continue
            long_ = True if (thr != thr or lo >= thr) else (False if hi < thr else None)
            if long_ is False:
                continue
            if not (phase and long_):
                if 0 <= j.blocked_at < self._nobs:  # forced: take the gap at its proven lower bound
                    if not (lo >= gap and (thr != thr or lo >= thr)):
                        continue
                else:
                    if j.blocked_at < 0 and any(x.bounds()[0] >= gap for x in js[n + 1:]):
                        j.blocked_at = self._nobs
                    keep.append(j)
                    continue
            self._commit_one(v, u, j.pos, j.s_lo)
            base, need = j.pos, mf * v.eff[u]
        tr.junctions = keep
        v.busy[u] = bool(keep)

    def _commit_one(self, v: _Rows, u: int, pos: int, next_start: float) -> None:
        """End the u-th flow of v's current iteration at counter position pos (the
        one-flow twin of _commit_rows, on plain Python values); next_start: when the
        next one started."""
        hn = self.p.history
        nbytes = pos - v.base[u]
        first = v.iters[u] == 0
        v.iters[u] += 1
        v.done[u] += nbytes
        if not first or v.origin[u] <= 1 or v.first_ok[u] == 1:
            k = v.hist_n[u]
            hist = v.hist[u]
            hist[k % hn] = float(nbytes)
            v.hist_n[u] = k + 1
            m = min(k + 1, hn)
            w = sorted(hist[:m])
            v.est[u] = est = (w[(m - 1) // 2] + w[m // 2]) / 2
            h = self._hints.get(v.job[u]) if v.job is not None else None
            if h is None or h.bytes_per_iter is None:
                v.eff[u] = est
        v.base[u] = pos
        if pos > v.jmax[u]:
            v.jmax[u] = pos
        v.start[u] = next_start if v.acked[u] > pos else NAN

    def _commit(self, i: int, pos: int, next_start: float) -> None:
        """_commit_one for row i alone."""
        v = _Rows(self, np.array([i]))
        self._commit_one(v, 0, pos, next_start)
        v.put(self)

    def _commit_rows(self, rows: np.ndarray, pos: np.ndarray, next_start: np.ndarray) -> None:
        """End the current iteration of the flows at counter positions pos; next_start:
        when the next iteration started (used if the counter is already past pos)."""
        a, hn = self._a, self.p.history
        nbytes = pos - a["base"][rows]
        first = a["iters"][rows] == 0
        a["iters"][rows] += 1
        a["done"][rows] += nbytes
        seen_whole = ~first | (a["origin"][rows] <= 1) | (a["first_ok"][rows] == 1)
        r = rows[seen_whole]
        if len(r):
            k = a["hist_n"][r]
            a["hist"][r, k % hn] = nbytes[seen_whole]
            a["hist_n"][r] = k + 1
            m = np.minimum(k + 1, hn)
            v = np.sort(a["hist"][r], axis=1)  # nan (unused) last
            at = np.arange(len(r))
            a["est"][r] = (v[at, (m - 1) // 2] + v[at, m // 2]) / 2
            plain = ~self._job_mask(r, lambda h: h.bytes_per_iter is not None)
            self._e_eff[r[plain]] = a["est"][r[plain]]
        a["base"][rows] = pos
        a["jmax"][rows] = np.maximum(a["jmax"][rows], pos)
        a["start"][rows] = np.where(a["acked"][rows] > pos, next_start, NAN)

    def _apply_starts(self, job: str, h: _Hint) -> None:
        a = self._a
        rows = np.flatnonzero(a["job"] == job).tolist() if len(a["job"]) else []
        while h.pending and h.pending[0] <= self._t:
            t = h.pending.pop(0)
            driven_before, h.applied = h.applied is not None, t
            for i in rows:
                tr = self._track(i)
                if t <= a["t0"][i]:  # seen after that start: already in that iteration
                    if math.isnan(a["start"][i]):
                        a["start"][i] = t
                    continue
                pos = min(max(self._pos_at(i, tr, t), int(a["base"][i])), int(a["acked"][i]))
                # an empty iteration counts only between two hinted starts (not before the
                # flow's first bytes, nor right after an iteration the monitor closed itself)
                if pos > a["base"][i] or (driven_before and a["iters"][i] > 0):
                    self._commit(i, pos, t)
                a["start"][i] = t
                tr.junctions = [j for j in tr.junctions if j.pos > pos]
                a["busy"][i] = bool(tr.junctions)

    def _pos_at(self, i: int, tr: _Track, t: float) -> int:
        """Counter position at time t: bytes read by then plus bursts known to have ended by then."""
        ts, cs, ok = self._reads(np.array([i]))
        ts, cs = ts[ok[0]], cs[0][ok[0]]
        k = int(np.searchsorted(ts, t, side="right"))
        if k == 0:
            return int(self._a["base"][i])
        pos, nxt = int(cs[k - 1]), int(cs[k]) if k < len(cs) else int(cs[-1])
        a = self._a
        recent = zip(a["end_pos"][i].tolist(), a["end_t"][i].tolist())  # (unused entries: nan, never <= t)
        for end, e in [*recent, *((j.pos, j.e_hi) for j in tr.junctions)]:
            if e <= t and end <= nxt:
                pos = max(pos, int(end))
        return pos


def _empty_stats() -> FlowStats:
    z = np.zeros(0)
    zi = np.zeros(0, dtype=np.int64)
    return FlowStats(zi, np.zeros(0, dtype=object), zi, z, z, zi, zi, z, z, np.zeros(0, dtype=bool), zi)


def synth_trace(
    bursts: Sequence[tuple[float, int, float]],
    *,
    slot_s: float = 0.060,
    t_end: float | None = None,
    t0: float = 0.0,
    kernel_gap_s: float = 0.002,
    emit: str = "next",
) -> list[tuple[float, int, tuple[tuple[float, float, int], ...]]]:
    """What the daemon would read for one flow sending ``bursts`` [(start_s, bytes, duration_s)].

    Bytes are acked uniformly over each burst (the counter is floor(bytes * elapsed
    fraction), so the kernel sees a burst from its first byte to its end). As in
    hc_pace.c, progress separated by at most kernel_gap_s is one kernel burst. A
    record (start_s, end_s, bytes) is emitted at the flow's next progress
    (``emit="next"``, hc_pace.c: the last burst is never reported) or as soon as the
    gap has passed (``emit="end"``: end_s + kernel_gap_s).
    Returns one (t_s, acked_bytes, records) per read at t0 + k*slot_s <= t_end (default:
    0.5 s after the last burst); records are those emitted in (previous read, t_s].
    """
    if emit not in ("next", "end"):
        raise ValueError(f"emit must be 'next' or 'end', got {emit!r}")
    bs = sorted((float(s), int(b), float(d)) for s, b, d in bursts if b > 0)
    for (s1, _, d1), (s2, _, _) in zip(bs, bs[1:]):
        if s2 < s1 + d1:
            raise ValueError("bursts overlap")
    groups: list[list] = []  # [first progress, last progress, bytes]
    for s, b, d in bs:
        first = s + d / b  # the counter shows the first byte then
        if groups and first - groups[-1][1] <= kernel_gap_s:
            groups[-1][1] = s + d
            groups[-1][2] += b
        else:
            groups.append([first, s + d, b])
    if emit == "end":
        emitted = [(g[1] + kernel_gap_s, g) for g in groups]
    else:
        emitted = [(nxt[0], g) for g, nxt in zip(groups, groups[1:])]
    if t_end is None:
        t_end = (groups[-1][1] if groups else t0) + 0.5
    starts = np.array([x[0] for x in bs])
    sizes = np.array([x[1] for x in bs], dtype=np.int64)
    durs = np.array([x[2] for x in bs])

    def acked(t: float) -> int:
        if not len(bs):
            return 0
        full = t >= starts + durs
        part = ~full & (t > starts)
        frac = (t - starts[part]) / durs[part]
        return int(sizes[full].sum() + np.floor(sizes[part] * frac).astype(np.int64).sum())

    out = []
    prev = -INF
    k = 0
    while (t := t0 + k * slot_s) <= t_end + 1e-12:
        recs = tuple((g[0], g[1], g[2]) for when, g in emitted if prev < when <= t)
        out.append((t, acked(t), recs))
        prev = t
        k += 1
    return out
