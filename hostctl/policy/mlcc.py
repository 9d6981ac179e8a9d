"""Policy ``mlcc``: the daemon's I/O around MLCC's decision (docs/mlcc.md), one call per slot.

Each slot, for this host's DL flows (the host is their sender):
  1. fetch (switch mode): per flow, the switches' rows for the links on its path: the load of the
     *other* jobs (under a job order, those ranked up to the flow's job) and the flow's own job's load and
     flows from other hosts; the peers' progress and this host's notifications (Algorithm 2);
  2. build each local job's view of its links (core.mlccplan.FabricView: the switch's rows, which leave
     out the jobs that arrived after the job and this host's own flows, or under a job order the jobs
     ranked after it, this host's own load being subtracted here) and û of the NIC from the measured
     cross traffic, and call core.mlccplan.plan_slot, the whole decision (it is pure);
  3. publish the K-slot schedules (update_schedule), the progress and the notifications, and return the
     rates to write to the pacer.

Modes: ``switch`` (``--switch`` given and answering) and ``local`` (no ``--switch``, or the switches
silent for ``SILENT_SLOTS`` slots in a row: only the NIC link is planned). In local mode the daemon keeps
trying the switches every slot and goes back to switch mode at the first answer; both changes are logged
once. A late reply does not hold up the slot: the fetch waits at most ``fetch_timeout_s`` (default a sixth
of the slot), the publish at most ``publish_timeout_s``; a slot whose fetch did not answer plans with the
last feedback received (if no older than K slots), else the NIC link alone. Slots are absolute,
``floor(unix time / slot)``: hosts and switches must be NTP-synchronised.

Dependencies (Algorithm 2, switch mode, ``deps=True``): roles follow from the job's ``comm`` and the side
of the connection (hostctl/core/deps.py); progress is counted per iteration and reported under names both
sides compute (core.mlccplan.progress_bytes); received notifications hold the paced rate. Job order
(``job_order="fixed"``, ``"rotate"`` or ``"smallest"``, switch mode): every host ranks the jobs alike
(``core.joborder.fabric_rank``), sends each flow's rank with its schedules and queries, and plans its own jobs as
waves of one plan in that order. ``"none"`` (the default) orders the jobs by arrival: the switch's order of
their first schedules, and this host's jobs in the order they became busy; ``"smallest"`` ranks them by
model size and orders the jobs of one size by arrival. ``"flat"`` has no order: every
job plans around the load of all the others, this host's included, in one wave.
"""

from __future__ import annotations

import logging
import math
import os
import time
from collections import deque
from collections.abc import Callable, Mapping, Sequence
from typing import Any, NamedTuple

import numpy as np

from hostctl.core import deps as dep_rules
from hostctl.core import wire
from hostctl.core.bands import rr_epoch
from hostctl.core.joborder import ARRIVAL_ORDERS, JOB_ORDERS, RANKED_ORDERS, fabric_rank
from hostctl.core.deps import Dep, JobComm
from hostctl.core.hist import Histogram
from hostctl.core.mlcc import MlccParams, Role
from hostctl.core.mlcchost import HostSlot, wait_floor_Bps
from hostctl.core.mlccplan import FabricView, SlotDecision, avail_from_cross, plan_slot
from hostctl.core.types import FlowKey

log = logging.getLogger("hostctl")

SILENT_SLOTS = 3  # switches silent this many slots in a row -> local mode
REFUSAL_LOG_S = 60.0  # a switch that keeps refusing this host's slots is logged at most this often
RATE_DEADBAND = 0.03  # a new rate within 3% of the applied one is not written
PATH_REFRESH_SLOTS = 100  # a fetch asks for every flow's whole path at least this often (6 s at 60 ms)
PROGRESS_MAX_AGE = 2  # a peer's progress or notification older than this many slots is ignored
NIC = "nic"  # this host's own egress link (the local table's link)


class FlowIn(NamedTuple):
    """One flow of this host for the slot (from the monitor). A NamedTuple: a hundred are made
    every slot."""

    key: FlowKey
    job: str
    G_bytes: float  # bytes left this iteration; nan = unknown
    B_Bps: float  # max rate over the last 4 slots
    sent_bytes: float  # bytes of this iteration so far
    moving: bool = True  # progress in the last slot
    rate_Bps: float = math.nan  # measured over the last slot (nan: not measured)
    cum_bytes: float = math.nan  # bytes the connection has carried (pacer bytes_sent): Algorithm 2's F base


def _F_base(f: FlowIn) -> float:
    """Algorithm 2's F base of a flow: the connection's cumulative bytes (the same measure on every
    host), 0 while unknown."""
    return f.cum_bytes if f.cum_bytes == f.cum_bytes else 0.0


def _code_name(code: int) -> str:
    """A wire status code as the errors counter names it (unknown codes by number)."""
    try:
        return wire.Code(code).name.lower()
    except ValueError:
        return str(code)


flow_id = dep_rules.flow_name  # a flow's id on the wire: its 4-tuple (unique in the fabric)
NAMES_GENERATION_S = 30.0  # flow_id keeps the names used in the last 30-60 s (core.gencache)


class MlccControl:
    def __init__(self, link_rate_Bps: int, slot_s: float, *, switch=None, horizon: int = 10,
                 fetch_timeout_s: float | None = None, publish_timeout_s: float | None = None,
                 wall: Callable[[], float] = time.time, deps: bool = True, job_order: str = "none",
                 order_interval_s: float = 2.0) -> None:
        if job_order not in JOB_ORDERS:
            raise ValueError(f"unknown job order {job_order!r} (one of {', '.join(JOB_ORDERS)})")
        self.params = MlccParams(K=horizon, slot_s=slot_s)
        self.K = horizon
        self.slot_s = slot_s
        self.switch = switch  # a SwitchClient (or anything with its exchange()), None = local only
        self.wall = wall
        self._names_turn_slot = 0  # the slot at which flow_id's generation turns next
        self.fetch_timeout_s = fetch_timeout_s if fetch_timeout_s is not None else slot_s / 6
        self.publish_timeout_s = publish_timeout_s if publish_timeout_s is not None else slot_s / 12
        self.caps: dict[str, int] = {NIC: int(link_rate_Bps)}
        # this host's last published schedules (its own load table): K rates per flow, and the flows'
        # links as the columns of their plan: link ids, [flows, P] column indices (-1: none)
        self.prev_rates = np.zeros((0, horizon))
        self.prev_used: list[str] = []
        self.prev_path = np.zeros((0, 1), dtype=np.int64)
        # the plan's link columns for a list of flow links: (links, used, col, path), reused while equal
        self._cols_of: tuple = (None, [], {}, self.prev_path)
        self.paths: dict[str, tuple[str, ...]] = {}  # flow id -> switch links (from the feedback)
        self.mode = "switch" if switch is not None else "local"
        self.silent = 0
        # per switch endpoint: fetches in a row without its answer (refusals count), and the switch's clock
        # minus this host's (the slot clock, ``wall``) as last measured
        self.silent_by_ep: dict[str, int] = {}
        self.clock_offset_s: dict[str, float] = {}
        self._refusals: dict[str, tuple[int, float]] = {}  # endpoint -> (refusals not yet logged, last log)
        self.fallbacks = 0
        self.recoveries = 0
        self.late_publishes = 0  # publishes made after their slot had ended (sent re-labelled, see _publish)
        self.seq = 0
        self.fb_slot: int | None = None
        self.feedback: dict[str, dict[str, list[int]]] = {}  # flow id -> link id -> K loads (at fb_slot)
        self._queries: dict[tuple, wire.FlowQuery] = {}  # (src, dst, job, rank) -> last slot's fetch query
        self._cap_of: tuple = (None, None)  # (plan columns, their capacities), while the caps are unchanged
        self._own_cells: tuple = (None, None, None)  # _own_load's indices, for (prev_path, col, job index)
        self._fetch_key: tuple | None = None  # (ids, jobs, ranks, paths_gen, refresh) of the queries below
        self._fetch_q: tuple = ([], [], {})  # (queries, asking flow per flow, _link_queries' partial)
        self._paths_gen = 0  # counts changes of the asking flows' known paths (the queries depend on them)
        self._full_next: set[str] = set()  # asking flows to ask for their whole path again
        self.rtt_ms: deque[float] = deque(maxlen=200)  # fetch round trips (negotiation latency)
        self.rtt_hist = Histogram()  # every fetch round trip, seconds (Prometheus)
        self.exchange_ms: deque[float] = deque(maxlen=200)  # fetch + publish, wall time in the slot
        self.errors: dict[str, int] = {}
        self.last: HostSlot | None = None
        self.last_flows: dict[str, FlowIn] = {}  # flow id -> flow, in the order of the last plan's rows
        self._rows_of: dict | None = None  # the last_flows that _row indexes (schedule_of)
        self._row: dict[str, int] = {}
        self._sched: list[list[int]] = []  # the last plan's schedules as ints (schedule_of)
        # per row of the last plan: the rate written to the pacer; a new slot finds its flows' rows with
        # _prev_rows (the same flows in the same order, the common case, cost nothing)
        self._written = np.zeros(0, dtype=np.int64)
        self.last_applied = np.zeros(0)
        self.last_held = np.zeros(0, dtype=bool)
        self._arrived: dict[str, int] = {}  # busy jobs -> when they became busy (arrival order, no job order)
        self._arrivals = 0
        self._nic_hist: deque[tuple[float, float]] = deque(maxlen=4)  # (NIC, DL) tx rates of the last slots
        self.nic_avail_min: int | None = None  # the least û of the NIC seen (status: how much cross traffic took)
        self._last_ids: list[str] = []
        self._same_rows: np.ndarray | None = None  # _prev_rows' answer when the flows are the last plan's
        # the flows' jobs, reused while equal: (jobs, job -> index, index per flow, object array)
        self._jobs: tuple = ([], {}, np.zeros(0, dtype=np.int64), np.zeros(0, dtype=object))
        self._last_jobs = self._jobs
        self.last_slot: int | None = None
        self._warned: set[str] = set()
        # Algorithm 2 (switch mode): roles, the peers' progress and the notifications received
        self.use_deps = deps
        # fabric-wide job order (switch mode): this slot's rank per job, and the ranks last published
        self.job_order = job_order
        # none and smallest: the switch builds each job's view in arrival order and leaves this host's own
        # flows out; under the other orders it counts them and _fabric_view subtracts them
        self.arrival_views = job_order in ARRIVAL_ORDERS
        self.order_interval_s = order_interval_s
        self.ranks: dict[str, int] = {}
        self._pub_ranks: dict[str, int] = {}
        self._deps_key: tuple | None = None
        self._deps_cached: list[Dep] | None = None
        self._ring_size: dict[str, int | None] = {}
        self._host_set: str | None = None  # the address this controller gave the switch client
        self._host_refused = False
        self.deps: list[Dep] | None = None  # per flow of the last plan (None: no flow has a role)
        # name -> (F bytes, slot reported, the peer's planned rate in that slot)
        self.progress: dict[str, tuple[float, int, float]] = {}
        self.notified: dict[str, tuple[float, int]] = {}  # name -> (ceiling bytes, slot sent)
        self.dep_counts = {"progress_missing": 0, "notifications_sent": 0, "notifications_received": 0,
                           "delta_flows": 0, "reduced_flows": 0, "held_flows": 0}
        trace = os.environ.get("HOSTCTL_MLCC_TRACE")
        self.trace = open(trace.replace("{pid}", str(os.getpid())), "a", encoding="utf-8") if trace else None

    # ---------------------------------------------------------------- the slot
    def slot_now(self) -> int:
        return int(math.floor(self.wall() / self.slot_s))

    def tick(self, flows: Sequence[FlowIn], comms: Mapping[str, JobComm] | None = None,
             sizes: Mapping[str, int | None] | None = None) -> dict[FlowKey, int]:
        """Plan the current slot; returns the rate to apply per flow (bytes/s, >= 1). comms: the
        communication pattern of the jobs that have one (Algorithm 2's roles, switch mode only). sizes:
        job id -> model-update bytes (None: unknown), for job order ``smallest``."""
        slot = self.slot_now()
        if slot >= self._names_turn_slot:  # the names of flows not planned for 30-60 s are dropped
            if self._names_turn_slot:
                flow_id.turn()
            self._names_turn_slot = slot + max(1, round(NAMES_GENERATION_S / self.slot_s))
        ids = [flow_id(f.key) for f in flows]
        prev = self._prev_rows(ids)
        self._job_index([f.job for f in flows])
        t0 = time.perf_counter()
        deps = self._flow_deps(flows, ids, comms) if self.wants_comms and comms else None
        if self.switch is not None and self.job_order in RANKED_ORDERS:
            epoch = rr_epoch(slot * self.slot_s, self.order_interval_s)
            size = (sizes or {}).get
            self.ranks = {j: fabric_rank(j, self.job_order, epoch, size(j)) for j in {f.job for f in flows}}
        if self.switch is not None:
            self._fetch(slot, flows, ids, deps)
        if self.mode != "switch":
            deps = None  # nobody to exchange progress with
        self.deps = deps
        links = self._all_links(ids)  # after the fetch, which may learn paths or change the mode
        dec = self._plan(slot, flows, ids, links, deps, prev)
        plan = dec.slot
        published = np.maximum(plan.rates_Bps, 0.0)
        if self.switch is not None:
            self._publish(slot, flows, ids, published, deps, dec)
            self.exchange_ms.append((time.perf_counter() - t0) * 1e3)
        self._remember(slot, ids, flows, plan, published, dec)
        if self.trace is not None:
            self._trace(slot, flows, ids, plan)
        return self._hysteresis([f.key for f in flows], dec.applied_Bps, prev)

    def _prev_rows(self, ids: list[str]) -> np.ndarray:
        """Each flow's row in the last plan (-1: a new flow)."""
        if ids == self._last_ids:
            self._same_rows = np.arange(len(ids))
            return self._same_rows
        pos = {fid: r for r, fid in enumerate(self._last_ids)}
        return np.array([pos.get(fid, -1) for fid in ids], dtype=np.int64)

    def _from_last(self, values: np.ndarray, prev: np.ndarray, default: float) -> np.ndarray:
        """A per-row array of the last plan, for this slot's flows (``default`` for new flows); the
        array itself (not to be written) when the flows are those of the last plan."""
        if prev is self._same_rows and len(values) == len(prev):
            return values
        out = np.full(prev.shape, default, dtype=values.dtype)
        old = prev >= 0
        out[old] = values[prev[old]]
        return out

    def _job_index(self, jobs: list[str]) -> None:
        """This slot's (jobs, job -> index in order of first appearance, index per flow, object array)."""
        if jobs != self._jobs[0]:
            jix: dict[str, int] = {}
            idx = np.array([jix.setdefault(j, len(jix)) for j in jobs], dtype=np.int64)
            self._jobs = (jobs, jix, idx, np.array(jobs, dtype=object))

    @property
    def wants_sizes(self) -> bool:
        """Whether tick() uses the jobs' model sizes (job order smallest): callers can skip them otherwise."""
        return self.switch is not None and self.job_order == "smallest"

    @property
    def wants_comms(self) -> bool:
        """Whether tick() uses the jobs' comm patterns (Algorithm 2 needs switches to exchange
        progress with): callers can skip building them otherwise."""
        return self.switch is not None and self.use_deps

    def _flow_deps(self, flows: Sequence[FlowIn], ids: list[str], comms: Mapping[str, JobComm]) -> list[Dep] | None:
        """Each flow's dependency (core/deps.py), recomputed only when the flows or the jobs change;
        None when no flow has a role."""
        key = (tuple(ids), tuple(f.job for f in flows), tuple(sorted(comms.items())))
        if key != self._deps_key:
            self._deps_key = key
            d = dep_rules.flow_deps([(f.key, f.job) for f in flows], comms)
            self._ring_size = {job: jc.ring_size for job, jc in comms.items()}
            self._deps_cached = d if any(x.role != Role.NONE for x in d) else None
        if (self._deps_cached is not None and self.switch is not None and not self._host_refused
                and getattr(self.switch, "host", "") is None):
            # notifications are picked up by this host's address (the sender address of its flows)
            self.switch.host = self._host_set = flows[0].key.laddr
        return self._deps_cached

    def _hysteresis(self, keys: list[FlowKey], rates: np.ndarray, prev: np.ndarray) -> dict[FlowKey, int]:
        """Rates to apply (bytes/s, >= 1), keeping a flow's previous rate when the new one is within
        RATE_DEADBAND of it: a map write per flow and slot costs more than pacing a few percent off
        (the pacer is that precise anyway). prev: each flow's row in the last slot (-1: new)."""
        r = np.maximum(rates.astype(np.int64), 1)  # (truncated, as int() does)
        w = self._from_last(self._written, prev, 0)
        out = np.where((prev >= 0) & (np.abs(r - w) <= RATE_DEADBAND * w), w, r)
        self._written = out
        return dict(zip(keys, out.tolist()))

    def _fetch(self, slot: int, flows: Sequence[FlowIn], ids: list[str], deps: list[Dep] | None = None) -> None:
        if not flows:
            return  # nothing to ask (and no answer is not silence)
        rank = self.ranks.get
        # One query per (source, destination, job, rank): the switch leaves the asking flow's whole job
        # out of its answer, so the flows of a job between the same two hosts (a framework's several
        # connections per peer) get the same rows; the first of them asks for all. Queries are reused
        # from slot to slot while the asking flow is the same.
        # every PATH_REFRESH_SLOTS slots all queries ask for whole paths (a path that changed is learnt)
        refresh = slot % PATH_REFRESH_SLOTS == 0
        key = (ids, self._jobs[0], sorted(self.ranks.items()), self._paths_gen, refresh)
        if key == self._fetch_key:  # the same flows, jobs, ranks and known paths as last slot
            q, asker, partial = self._fetch_q
        else:
            old, q, asker = self._queries, [], []
            groups: dict[tuple, str] = {}
            for i, f in zip(ids, flows):
                g = (f.key.laddr, f.key.raddr, f.job, rank(f.job)) if f.job else (i,)
                a = groups.get(g)
                if a is None:
                    groups[g] = a = i
                    x = old.get(g)
                    if x is None or x.flow_id != i:
                        # job order none (smallest: among the jobs of its rank): the job's view in
                        # arrival order (the switch leaves out the jobs that arrived after it and this
                        # host's own flows)
                        x = wire.FlowQuery(i, f.key.laddr, f.key.raddr, job_id=f.job, rank=rank(f.job),
                                           arrival=self.arrival_views)
                    q.append(x)
                asker.append(a)
            self._queries = dict(zip(groups, q))
            q, partial = (q, {}) if refresh else self._link_queries(q)
            self._fetch_key, self._fetch_q = key, (q, asker, partial)
        names = sorted({n for d in deps for n in d.query}) if deps else ()
        res = self.switch.exchange(slot, fetches=q, get_progress=names, timeout_s=self.fetch_timeout_s)
        if deps:
            self._take_progress(slot, res)
        # a refused or late answer is silence: only a switch that took the slot's requests counts
        good = res.answered
        answered = bool(good)
        skew = self.wall() - time.time()  # this host's slot clock against the clock the client measured with
        for ep, off in res.clock_offset_s.items():
            self.clock_offset_s[ep] = off - skew
        for ep in getattr(self.switch, "endpoints", ()):
            self.silent_by_ep[ep] = 0 if ep in good else self.silent_by_ep.get(ep, 0) + 1
        if res.max_latency_s is not None:
            self.rtt_ms.append(res.max_latency_s * 1e3)
            self.rtt_hist.observe(res.max_latency_s)
        for ep, code in res.error_codes.items():
            name = _code_name(code)
            self.errors[name] = self.errors.get(name, 0) + 1
            if code == wire.Code.UNKNOWN_HOST and self._host_set is not None:
                self.switch.host, self._host_refused = None, True
                log.warning("switch %s does not know this host's address %s: no Algorithm 2 notifications "
                            "for this host (add it to the topology)", ep, self._host_set)
                self._host_set = None
                continue
            if code == wire.Code.UNKNOWN_VERSION:
                continue  # an older switchemu: the client logged it and speaks version 1 to it from now on
            if code in (wire.Code.STALE_SLOT, wire.Code.FUTURE_SLOT):
                self._refused_slot(ep, name, slot, res.slot_now.get(ep))
                continue
            self._warn_once(name, f"switch {ep} refused this host's requests ({name}): "
                                  f"{res.errors.get(ep, '')}; check NTP sync and --slot")
        for fid, code in res.flow_status.items():
            name = _code_name(code)
            self.errors[name] = self.errors.get(name, 0) + 1
            if code == wire.Code.UNKNOWN_HOST:
                self._warn_once("unknown_host", f"the switch does not know a host of flow {fid}: that flow is "
                                                "planned on this host's NIC link only (add it to the topology)")
        if answered:
            self.silent = 0
            if self.mode == "local":
                self.mode = "switch"
                self.recoveries += 1
                log.warning("switches answer again: back to switch mode")
            if res.capacities_Bps and not res.capacities_Bps.items() <= self.caps.items():
                self.caps.update(res.capacities_Bps)
                self._cap_of = (None, None)
            fb, got, paths, full_next = {}, res.feedback, self.paths, self._full_next
            for fid, a in zip(ids, asker):
                fl = got.get(a)
                if fl is not None and fl.load_Bps:
                    fb[fid] = fl
                if fid != a:  # the asking flow's path (known, or just learnt) is this flow's
                    if a in partial or fid in fb:
                        paths[fid] = paths[a]
                elif a in partial:  # it named some of its path's links: the path stays
                    if partial[a] and (fl is None or not fl.load_Bps):
                        # the question went unanswered or was refused (the switch's topology
                        # changed?): ask for the whole path again next slot
                        full_next.add(a)
                        self._paths_gen += 1
                elif fid in fb and (paths.get(a) != (new := tuple(fl.load_Bps)) or a in full_next):
                    paths[a] = new
                    full_next.discard(a)
                    self._paths_gen += 1
            self.feedback, self.fb_slot = fb, slot
        else:
            self.silent += 1
            if self.silent >= SILENT_SLOTS and self.mode == "switch":
                self.mode = "local"
                self.fallbacks += 1
                why = "; ".join(f"{ep}: {e}" for ep, e in res.errors.items()) or "no reply"
                log.warning("switches silent for %d slots (%s): local mode (this host's NIC link only) "
                            "until they answer", self.silent, why)

    def _refused_slot(self, ep: str, name: str, slot: int, slot_now: int | None) -> None:
        """A switch refused this host's slot (its clock and this host's differ by more than it accepts):
        logged with the measured offset, at most every REFUSAL_LOG_S seconds per switch."""
        n, last = self._refusals.get(ep, (0, -math.inf))
        now = time.monotonic()
        if now - last < REFUSAL_LOG_S:
            self._refusals[ep] = (n + 1, last)
            return
        self._refusals[ep] = (0, now)
        off = self.clock_offset_s.get(ep)
        if off is not None:
            by = f"this host's clock is {abs(off) * 1000:.1f} ms {'ahead of' if off < 0 else 'behind'} the switch's"
        else:  # a switch that does not send its clock: the slots tell it to within one
            by = f"this host is at slot {slot}, the switch at {slot_now}"
        more = f" ({n} more refusals since the last report)" if n else ""
        log.warning("switch %s refuses this host's slots (%s): %s%s; its answers count as silence (after %d slots: "
                    "local mode, this host's NIC link only) until the clocks agree: check NTP on both (chronyc "
                    "tracking) and that --slot matches the switch's --slot-ms", ep, name, by, more, SILENT_SLOTS)

    def _link_queries(self, queries: list[wire.FlowQuery]) -> tuple[list[wire.FlowQuery], dict[str, bool]]:
        """The fetch asks for each link's row once per job: only the first row of a job's flow on a link
        enters the job's view (_fabric_view), and that row is the same whichever flow of the job asks (the
        switch leaves the whole job out, and under a job order the jobs ranked after it). So a query
        whose flow's path is known from an earlier answer names the links that no earlier query of
        its scope asked for (its path's other links stay as they were). Returns the queries to
        send and, per asking flow that names links, whether a query was sent for it (False: every
        link of its path was asked for already)."""
        out, partial, asked = [], {}, {}
        for x in queries:
            known = None if x.flow_id in self._full_next else self.paths.get(x.flow_id)
            seen = asked.setdefault((x.job_id, x.rank), set())
            if known is None:  # a new flow: the whole path, to learn it
                out.append(x)
                continue
            need = tuple(lid for lid in known if lid not in seen)
            seen.update(known)
            if len(need) == len(known):
                out.append(x)
                continue
            partial[x.flow_id] = bool(need)
            if need:
                out.append(wire.FlowQuery(x.flow_id, x.src, x.dst, links=need, job_id=x.job_id, rank=x.rank,
                                          arrival=x.arrival))
        return out, partial

    def _take_progress(self, slot: int, res) -> None:
        """Keep the peers' progress and the notifications for this host; forget what is too old."""
        for name, p in res.progress.items():
            self.progress[name] = (float(p.cum_bytes), int(p.slot), float(p.rate_Bps))
        for n in res.notifications:
            self.dep_counts["notifications_received"] += 1
            old = self.notified.get(n.flow_id)
            if old is None or n.slot > old[1] or (n.slot == old[1] and n.f_pred_bytes < old[0]):
                self.notified[n.flow_id] = (float(n.f_pred_bytes), int(n.slot))
        oldest = slot - PROGRESS_MAX_AGE
        for d in (self.progress, self.notified):
            for name in [k for k, v in d.items() if v[1] < oldest]:
                del d[name]

    def _now_F(self, d: dict[str, tuple], slot: int) -> dict[str, float]:
        """A peer's F by the end of this slot: its report (F by the end of the slot it was made in)
        plus its planned rate for each slot since, as far as its progress report (under the same
        name: a notification carries no rate) tells."""
        t, prog = self.slot_s, self.progress
        return {k: v[0] + (prog[k][2] if k in prog else 0.0) * t * max(0, slot - v[1]) for k, v in d.items()}

    def _dep_inputs(self, slot: int, flows: Sequence[FlowIn], deps: list[Dep]) -> dict:
        """plan_slot's Algorithm 2 arguments: roles, references (the peers' F per iteration, as they
        reported it: core.mlccplan.progress_bytes), ring slack (one chunk), ceilings (notifications)."""
        ref = dep_rules.references(deps, self._now_F(self.progress, slot))
        ceil = dep_rules.ceilings(deps, self._now_F(self.notified, slot))
        slack = []
        for f, d in zip(flows, deps):
            it = f.G_bytes + f.sent_bytes  # this iteration's bytes (nan while unknown)
            if d.role == Role.RING and it == it:
                ranks = self._ring_size.get(f.job)  # one chunk; without the ring size a whole iteration (loose)
                slack.append(it / (2 * (ranks - 1)) if ranks else it)
            else:  # (a ring flow of unknown size: _publish sends no notification)
                slack.append(0.0)
        self.dep_counts["progress_missing"] += sum(1 for d, r in zip(deps, ref) if d.role != Role.NONE and r != r)
        return {"role": [d.role for d in deps], "ref_bytes": ref, "slack_bytes": slack, "ceiling_bytes": ceil}

    def _links_of(self, fid: str) -> tuple[str, ...]:
        if self.mode == "local":
            return (NIC,)
        return (NIC, *self.paths.get(fid, ()))

    def _all_links(self, ids: list[str]) -> list[tuple[str, ...]]:
        if self.mode == "local" or not self.paths:
            return [(NIC,)] * len(ids)
        paths = self.paths
        return [(NIC, *paths.get(fid, ())) for fid in ids]

    def _plan(self, slot: int, flows: Sequence[FlowIn], ids: list[str], links: list[tuple[str, ...]],
              deps: list[Dep] | None, prev: np.ndarray) -> SlotDecision:
        """Build this slot's fabric view from the switches' feedback (I/O: what the switches said and
        what this host published) and ask core.mlccplan.plan_slot for the decision."""
        n, K = len(flows), self.K
        if links == self._cols_of[0]:  # the same flows on the same paths as last slot (the common case)
            used, col, path = self._cols_of[1:]
        else:
            used = sorted({lid for ls in links for lid in ls} - {NIC})
            used.insert(0, NIC)  # (every flow crosses this host's NIC link: column 0)
            col = {lid: i for i, lid in enumerate(used)}
            P = max((len(ls) for ls in links), default=1)
            if len(used) == 1:  # local mode, or no switch path known: every flow crosses the NIC link only
                path = np.zeros((n, 1), dtype=np.int64)
            else:
                path = np.array([[col[x] for x in ls] + [-1] * (P - len(ls)) for ls in links],
                                dtype=np.int64).reshape(n, P)
            path.flags.writeable = False  # shared by the slots that reuse it
            self._cols_of = (links, used, col, path)
        if used is not self._cap_of[0]:  # (the capacities of the same columns as last slot otherwise)
            self._cap_of = (used, np.array([float(self.caps.get(lid, self.caps[NIC])) for lid in used]
                                           or [float(self.caps[NIC])]))
        cap = self._cap_of[1]
        avail = cap.copy()
        avail[0] = self.nic_avail_Bps  # û of the NIC: its capacity minus the cross traffic measured on it
        # "no progress" means "nothing to send" only for a flow that was free to send: one that its plan
        # held at the wait floor last slot may just not have been ACKed yet. An idle flow paced at the
        # floor (its path had no headroom) is not one: counting it as sending would book a whole
        # iteration for a flow with nothing to send, and the jobs behind it would wait for nothing
        moving = np.fromiter((f.moving for f in flows), dtype=bool, count=n)
        if self.last is not None:
            last = self._from_last(self.last_applied, prev, math.inf)
            planned = self._from_last(self.last.kind != "idle", prev, False)
            moving |= planned & (last <= wait_floor_Bps(self.slot_s) * 2)
        _, jix, fj, _ = self._jobs
        jobs = list(jix)  # the distinct jobs, in the order of their index
        fresh = self.fb_slot is not None and 0 <= slot - self.fb_slot < K
        if self.mode == "switch" and fresh:
            view = self._fabric_view(slot, ids, fj, jobs, col, cap, avail)
        else:
            view = FabricView.empty(cap, len(jobs), K, avail)
        wave = None
        arrived: dict[str, int] | None = None
        if self.mode == "switch" and self.arrival_views:
            # arrival order (the switch's order of the jobs' first schedules): this host's own jobs too are
            # planned one after another, the job whose flows became busy first first (smallest: within a rank)
            busy = {jobs[j] for j, g, m in zip(fj.tolist(), (f.G_bytes for f in flows), moving.tolist())
                    if m and not g <= 0}
            for j in [j for j in self._arrived if j not in busy]:
                del self._arrived[j]
            for j in sorted(busy - self._arrived.keys()):
                self._arrived[j] = self._arrivals
                self._arrivals += 1
            last = self._arrivals
            arrived = {j: self._arrived.get(j, last) for j in jobs}
        if self.ranks and self.mode == "switch":
            ranks = self.ranks
            key = (lambda j: (ranks[j], j)) if arrived is None else (lambda j: (ranks[j], arrived[j], j))
            order = {j: w for w, j in enumerate(sorted(jobs, key=key))}
            wave = np.array([order[j] for j in jobs], dtype=np.int64)[fj]
        elif arrived is not None:
            wave = np.array([arrived[j] for j in jobs], dtype=np.int64)[fj]
        kw: dict[str, Any] = {}
        if deps is not None:
            kw = self._dep_inputs(slot, flows, deps)
        dec = plan_slot([f.G_bytes for f in flows], [f.B_Bps for f in flows], [f.sent_bytes for f in flows],
                        fj, path, view, moving=moving, params=self.params, wave=wave, idle_share=not self.ranks,
                        **kw)
        if deps is not None:
            self.dep_counts["delta_flows"] += int((dec.slot.delta_Bps > 0).sum())
            self.dep_counts["reduced_flows"] += int((dec.slot.reduced_bytes > 0).sum())
            self.dep_counts["held_flows"] += int(dec.held.sum())
        return dec

    def _fabric_view(self, slot: int, ids: list[str], fj: np.ndarray, jobs: list[str], col: dict[str, int],
                     cap: np.ndarray, avail: np.ndarray) -> FabricView:
        """Each local job's view of its links (core.mlccplan.FabricView) from the last feedback: per job
        and link, the row the switch answered one of the job's flows (it leaves the whole job out, and
        under a job order the jobs ranked after it) minus this host's own published load of the other
        jobs it counted there; and the job's load and flows from other hosts (job_Bps, job_flows)."""
        K, L, J = self.K, len(col), len(jobs)
        shift = slot - self.fb_slot
        other, same, nsame = np.zeros((J, L, K)), np.zeros((J, L, K)), np.zeros((J, L, K))
        # other hosts' whole booking now, any job (all_Bps): read only for MlccParams.slot0_within_free
        want_busy = self.params.slot0_within_free
        busy0 = np.zeros(L)
        busy_known = False
        seen = np.zeros((J, L), dtype=bool)
        fb = self.feedback
        for fid, j in zip(ids, fj.tolist()):
            fl = fb.get(fid)
            if fl is None:
                continue
            for lid, row in fl.load_Bps.items():
                c = col.get(lid)
                if c is None or seen[j, c]:
                    continue
                seen[j, c] = True
                other[j, c] = row
                jr = fl.job_Bps.get(lid)
                if jr is not None:
                    same[j, c] = jr
                    nsame[j, c] = fl.job_flows[lid]
                ar = fl.all_Bps.get(lid) if want_busy else None
                if ar is not None and shift < K:
                    busy0[c] = max(busy0[c], ar[shift])
                    busy_known = True
        # this host's published load that the switch counted in job j's rows: under a ranked order, its
        # other jobs that it ranked up to j's rank when it published; flat, all its other jobs; in arrival
        # order (none, smallest) the switch left this host out
        if not self.arrival_views:
            own_jix, own_job = self._own_load(self.fb_slot, col, L)
            pub = self._pub_ranks
            for j, name in enumerate(jobs):
                rk = self.ranks.get(name)
                for h, i in own_jix.items():
                    if h != name and (pub.get(h) is None or rk is None or pub[h] <= rk):
                        other[j] -= own_job[i]
        other = np.maximum(other, 0.0)
        for a in (other, same, nsame):
            if shift:
                a[:, :, :K - shift] = a[:, :, shift:].copy()
            # the schedules the others published in an earlier slot end before this window does: what they
            # still send in their last slot goes on (they plan those slots next); without it the window's
            # last slots look free and are booked twice
            end = K - 1 - shift  # the last column the feedback covers
            if end >= 1:
                a[:, :, end:] = np.maximum(a[:, :, end - 1:end], a[:, :, end:end + 1])
        return FabricView(cap, avail, other, same, nsame, busy0 if busy_known else None)

    def observe_nic(self, nic_Bps: float, dl_Bps: float) -> None:
        """The NIC's measured transmit rate over the last slot and this host's DL flows' part of it
        (bytes/s; NaN: not measured): û of the NIC link follows the cross traffic (spec 2.7)."""
        self._nic_hist.append((float(nic_Bps), float(dl_Bps)))
        u = int(self.nic_avail_Bps)
        self.nic_avail_min = u if self.nic_avail_min is None else min(self.nic_avail_min, u)

    @property
    def nic_avail_Bps(self) -> float:
        """û of this host's NIC link: capacity minus the largest cross traffic of the last 4 slots."""
        if not self._nic_hist:
            return float(self.caps[NIC])
        hist = np.array(self._nic_hist, dtype=np.float64).T  # [2, S]
        return float(avail_from_cross([self.caps[NIC]], hist[:1], hist[1:])[0])

    def _publish(self, slot: int, flows: Sequence[FlowIn], ids: list[str], published: np.ndarray,
                 deps: list[Dep] | None = None, dec: SlotDecision | None = None) -> None:
        if self.mode != "switch":
            return
        late = self.slot_now() - slot
        if late > 0:
            # the tick ran past its slot (a late start, a slow fetch, a loaded machine): the switches
            # refuse a slot that has ended (stale_slot), so send the same schedules from the current slot
            # on; the progress and notifications describe the ended slot and wait for the next tick
            self.late_publishes += 1
            if late >= self.K:
                return
            published = np.concatenate([published[:, late:], np.zeros((published.shape[0], late))], axis=1)
            slot += late
        progress, notes = (), ()
        if late <= 0 and deps is not None and dec is not None and dec.slot.notify_bytes is not None:
            rep = dec.reports.tolist()
            r0 = published[:, 0].tolist()
            rate_of: dict[str, float] = {}  # the slot-0 rate behind F (the receivers extrapolate F with it)
            job_of: dict[str, str] = {}
            for d, f, F, r in zip(deps, flows, rep, r0):
                if d.report:
                    job_of[d.report] = f.job
                    if F == F:
                        rate_of[d.report] = max(rate_of.get(d.report, 0.0), r)
            vals = dep_rules.reports(deps, rep)
            for d in deps:  # a PS none of whose broadcast flows sends: the next update has not started
                if d.role == Role.BROADCAST and d.report not in vals:
                    vals[d.report] = 0.0
            progress = [wire.FlowProgress(name, job_of[name], int(F), float(rate_of.get(name, 0.0)))
                        for name, F in vals.items()]
            # a ring flow whose iteration size is unknown cannot size the chunk its successor may
            # lead by: it sends no notification
            notes = [wire.Notification(d.notify_to, d.report, f.job, int(c))
                     for d, f, c in zip(deps, flows, dec.slot.notify_bytes.tolist())
                     if c == c and d.notify_to and not (d.role == Role.RING and math.isnan(f.G_bytes + f.sent_bytes))]
            self.dep_counts["notifications_sent"] += len(notes)
        # the slot number, at least: a restarted daemon's schedules are not refused as reordered
        # (older seq) until the old ones expire, K slots later
        self.seq = max(self.seq + 1, slot)
        rank = self.ranks.get
        rows = np.round(published).tolist()  # one conversion for all flows (floats, as on the wire)
        ups = [wire.FlowSchedule(fid, f.job, f.key.laddr, f.key.raddr, self.seq, tuple(row), rank=rank(f.job))
               for fid, f, row in zip(ids, flows, rows)]
        if self._arrived:  # the switch records jobs that arrive together in the order of their schedules
            arrived, last = self._arrived, self._arrivals
            ups.sort(key=lambda u: arrived.get(u.job_id, last))
        self._pub_ranks = {f.job: rank(f.job) for f in flows} if self.ranks else {}  # (read under an order only)
        # flows that ended: withdraw their schedules (all zeros)
        now = set(ids)
        ups += [wire.FlowSchedule(fid, f.job, f.key.laddr, f.key.raddr, self.seq, (0.0,) * self.K)
                for fid, f in sorted((fid, f) for fid, f in self.last_flows.items() if fid not in now)]
        if ups or progress or notes:
            res = self.switch.exchange(slot, updates=ups, progress=progress, notify=notes,
                                       timeout_s=self.publish_timeout_s)
            for ep, code in res.error_codes.items():
                name = _code_name(code)
                self.errors[name] = self.errors.get(name, 0) + 1
                # (an older switchemu: the client logged it; a refused slot: the fetch's log says it, with the offset)
                if code not in (wire.Code.UNKNOWN_VERSION, wire.Code.STALE_SLOT, wire.Code.FUTURE_SLOT):
                    self._warn_once(f"publish{code}", f"switch {ep} refused this host's schedules: "
                                                      f"{res.errors.get(ep)}")

    def _aligned(self, rates: np.ndarray, at_slot: int) -> np.ndarray:
        """Schedules published at last_slot, as K values from at_slot on (later slots are 0)."""
        shift = at_slot - (self.last_slot if self.last_slot is not None else at_slot)
        out = np.zeros((rates.shape[0], self.K))
        if 0 <= shift < self.K:
            out[:, :self.K - shift] = rates[:, shift:]
        return out

    def _own_load(self, at_slot: int, col: dict[str, int], L: int) -> tuple[dict[str, int], np.ndarray]:
        """This host's last schedules as K values from at_slot, on the links of ``col``: (job ->
        index, per job and link [J + 1, L, K] (the last job row stays 0: index -1 is a job this host
        did not publish))."""
        rates = self._aligned(self.prev_rates, at_slot)
        _, jix, job, _ = self._last_jobs
        K = self.K
        ck = self._own_cells
        if not (ck[0] is self.prev_path and ck[1] is col and ck[2] is job):  # else: the same as last slot
            # the last plan's link columns -> this plan's (-1: not used now; the padding -1 stays -1)
            remap = np.array([col.get(lid, -1) for lid in self.prev_used] + [-1], dtype=np.int64)
            cells = remap[self.prev_path]
            r, p = np.nonzero(cells >= 0)  # row-major: flow by flow, each flow's links in path order
            c = cells[r, p]
            k = np.arange(K)
            ck = self._own_cells = (self.prev_path, col, job, r, ((job[r] * L + c)[:, None] * K + k).ravel())
        rows, by_job = ck[3:]
        if not len(rows):
            return jix, np.zeros((len(jix) + 1, L, K))
        # bincount sums in input order (flow by flow): the same floats as adding the rows one by one
        v = rates[rows].ravel()
        return jix, np.bincount(by_job, weights=v, minlength=(len(jix) + 1) * L * K).reshape(len(jix) + 1, L, K)

    def _remember(self, slot: int, ids: list[str], flows: Sequence[FlowIn], plan: HostSlot,
                  published: np.ndarray, dec: SlotDecision) -> None:
        if self.paths:
            for fid in set(self.paths) - set(ids):
                self.paths.pop(fid, None)
        _, self.prev_used, _, self.prev_path = self._cols_of  # this plan's columns: the next _own_load maps them
        self.prev_rates = published  # this host's own load table: what the switches were told
        self.last, self.last_slot, self.last_applied, self.last_held = plan, slot, dec.applied_Bps, dec.held
        self.last_flows = dict(zip(ids, flows))
        self._last_ids, self._last_jobs = ids, self._jobs

    def _trace(self, slot: int, flows: Sequence[FlowIn], ids: list[str], plan: HostSlot) -> None:
        """One JSON line per slot (HOSTCTL_MLCC_TRACE=FILE): what the plan saw and decided."""
        import json

        rec = {"slot": slot, "mode": self.mode, "flows": [
            {"id": fid, "job": f.job, "G": None if f.G_bytes != f.G_bytes else f.G_bytes, "B": f.B_Bps,
             "sent": f.sent_bytes, "kind": str(plan.kind[r]), "wave": int(plan.wave[r]),
             "applied": float(plan.applied_Bps[r]), "plan": [int(x) for x in plan.rates_Bps[r]]}
            for r, (fid, f) in enumerate(zip(ids, flows))]}
        self.trace.write(json.dumps(rec) + "\n")
        self.trace.flush()

    def _warn_once(self, key: str, msg: str) -> None:
        if key not in self._warned:
            self._warned.add(key)
            log.warning(msg)

    # ---------------------------------------------------------------- status
    def schedule_of(self, key: FlowKey) -> dict | None:
        """Planned K-slot schedule (bytes/s), kind and wave of a flow in the last slot."""
        if self.last is None:
            return None
        fid = flow_id(key)
        if self._rows_of is not self.last_flows:  # (status asks for every flow: one index per plan, not per flow)
            self._rows_of, self._row = self.last_flows, {f: i for i, f in enumerate(self.last_flows)}
            self._sched = np.maximum(self.last.rates_Bps, 0).astype(np.int64).tolist()
        r = self._row.get(fid)
        if r is None:
            return None
        out = {"schedule_Bps": self._sched[r],
               "kind": str(self.last.kind[r]), "wave": int(self.last.wave[r]),
               "links": list(self._links_of(fid))}
        if r < len(self.last_applied):
            out["applied_Bps"] = int(self.last_applied[r])
        if self.deps is not None and self.last.delta_Bps is not None and r < len(self.deps):
            out["role"] = Role(self.deps[r].role).name.lower()
            out["delta_Bps"] = int(self.last.delta_Bps[r])
            out["reduced_bytes"] = int(self.last.reduced_bytes[r])
            out["held"] = bool(r < len(self.last_held) and self.last_held[r])
        return out

    def status(self) -> dict:
        def pct(d, q):
            s = sorted(d)
            return s[min(len(s) - 1, int(len(s) * q))] if s else None
        nic = self.prev_rates.sum(axis=0) if self.last_slot is not None else []  # every flow crosses the NIC
        return {
            "mode": self.mode, "switch": self.switch is not None, "slot": self.last_slot, "K": self.K,
            "silent_slots": self.silent, "fallbacks": self.fallbacks, "recoveries": self.recoveries,
            "late_publishes": self.late_publishes,
            "negotiation_ms_p50": pct(self.rtt_ms, 0.5), "negotiation_ms_p90": pct(self.rtt_ms, 0.9),
            "exchange_ms_p90": pct(self.exchange_ms, 0.9), "errors": dict(self.errors),
            "negotiation_seconds": self.rtt_hist.to_dict(),
            "nic_load_Bps": [int(x) for x in nic], "nic_capacity_Bps": self.caps[NIC],
            "nic_avail_Bps": int(self.nic_avail_Bps), "nic_avail_min_Bps": self.nic_avail_min,
            "links": len(self.prev_used) if self.last_flows else 0,
            "deps": {"enabled": self.use_deps, "flows": sum(1 for d in self.deps or () if d.role != Role.NONE),
                     **self.dep_counts},
            "job_order": {"order": self.job_order, "interval_s": self.order_interval_s,
                          "jobs": sorted(self.ranks, key=lambda j: (self.ranks[j], j))},
            # per switch endpoint, the wire version spoken (1: the switch is older than version 2)
            "wire_versions": dict(getattr(self.switch, "version", {})) if self.switch is not None else {},
            # per switch endpoint: fetches in a row it did not answer (refusals count) and its clock minus
            # this host's (a switch that does not send its clock has none)
            "switch_silent_slots": dict(self.silent_by_ep),
            "switch_clock_offset_ms": {ep: round(x * 1000, 3) for ep, x in self.clock_offset_s.items()},
        }

    def close(self) -> None:
        if self.switch is not None:
            self.switch.close()


NAN = float("nan")


def _intra_host(key: FlowKey) -> bool:
    """Traffic that stays on this host (loopback, or to its own address): not scheduled."""
    return key.raddr == key.laddr or key.raddr.startswith("127.")


class MlccRates:
    """The Rates of policies mlcc and mlcc-bands (hostctl.policy.pacing): the pacer's flows and the NIC
    counter in, MlccControl's rates out."""

    def __init__(self, config, *, link_rate_bps: int, switch=None, wall: Callable[[], float] = time.time) -> None:
        if not link_rate_bps:
            raise ValueError(f"policy {config.policy} needs the link rate (the NIC link's capacity)")
        self.config = config
        self.link_rate_bps = link_rate_bps
        self.ctl = MlccControl(link_rate_bps // 8, config.slot_s, switch=switch, horizon=config.horizon, wall=wall,
                               deps=config.deps, job_order=config.fabric_order,
                               order_interval_s=config.rr_interval_s)
        # the NIC's tx counter, when it was read, and the DL flows' bytes_sent then
        self._nic_last: tuple[int | None, float, dict[FlowKey, int]] = (None, 0.0, {})

    def observe(self, ctl, readout, t: float) -> None:
        """The NIC's transmit rate since the last read and the DL flows' part of it (their bytes_sent, read
        with it), for MLCC's û."""
        tx_bytes = readout.link_tx_bytes
        sent = {r.key: r.bytes_sent for r in readout.flows}
        last, self._nic_last = self._nic_last, (tx_bytes, t, sent)
        if tx_bytes is None or last[0] is None or t <= last[1] or tx_bytes < last[0]:
            return
        before = last[2]
        dl = sum(max(b - before.get(k, 0), 0) for k, b in sent.items())
        dt = t - last[1]
        self.ctl.observe_nic((tx_bytes - last[0]) / dt, dl / dt)

    def plan(self, ctl, jobs: Mapping[str, Any]) -> tuple[dict[FlowKey, int], dict[int, int]]:
        comms = {jid: JobComm(j.comm, frozenset(j.listen_ports), j.ring_size)
                 for jid, j in jobs.items() if j.comm} if self.ctl.wants_comms else None
        sizes = {jid: j.model_bytes for jid, j in jobs.items()} if self.ctl.wants_sizes else None
        return self.ctl.tick(self.flows(ctl), comms, sizes), {}

    def flows(self, ctl) -> list[FlowIn]:
        """This host's open inter-host DL flows, with the monitor's view of each."""
        stats = ctl.monitor.flow_stats()
        row_of = {fid: i for i, fid in enumerate(stats.flow_id.tolist())}
        # plain lists: indexing numpy arrays element by element costs more than the conversion
        left, max_rate, rate = stats.bytes_left.tolist(), stats.max_rate_Bps.tolist(), stats.rate_Bps.tolist()
        it_bytes, active = stats.iter_bytes.tolist(), stats.active.tolist()
        out = []
        records, ids, flow_job = ctl.records, ctl.flow_ids, ctl.flow_job
        for key in ctl.flows_in_order():
            r = records[key]
            if r.closed or _intra_host(key):
                continue  # intra-host traffic is not scheduled (spec 2.2)
            i = row_of.get(ids.get(key, -1))
            if i is None:
                out.append(FlowIn(key, flow_job[key], NAN, 0.0, 0.0, cum_bytes=r.bytes_sent))
                continue
            # (tolist() gave Python floats and bools already)
            out.append(FlowIn(key, flow_job[key], left[i], max_rate[i], float(it_bytes[i]), active[i], rate[i],
                              r.bytes_sent))
        return out

    def schedule_of(self, key: FlowKey) -> dict | None:
        return self.ctl.schedule_of(key)

    def describe(self, jobs: Mapping[str, Any]) -> dict:
        cfg = self.config
        return {"mlcc": {"switch": list(cfg.switch), "mode": "switch" if cfg.switch else "local",
                         "horizon": cfg.horizon, "nic_capacity_Bps": self.link_rate_bps // 8,
                         "job_order": cfg.fabric_order}}

    def status(self) -> dict:
        return {"mlcc": self.ctl.status()}

    def close(self) -> None:
        self.ctl.close()
