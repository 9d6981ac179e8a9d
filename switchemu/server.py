"""The emulated switch: MLCC load table behind a ZeroMQ ROUTER (spec 2.4.3; docs/switchemu.md).

``SwitchState`` is the logic (frames in, frames out, the time passed in); ``SwitchServer`` is the
single-threaded poll loop around it: it drains up to ``BATCH`` messages per wake-up, reads the clock
once per batch, and answers every request frame with one reply frame (a batch's replies are sent
together after it). Nothing a peer sends can stop it: each frame either gets a typed reply or an
error reply, and is counted either way.
"""

from __future__ import annotations

import logging
import math
import os
import threading
import time
from bisect import bisect_left
from collections import OrderedDict, deque
from dataclasses import dataclass, field, replace
from time import perf_counter

import msgpack

from hostctl.core import wire
from hostctl.core.loadtable import LoadTable
from hostctl.core.topology import Topology, UnknownNode
from hostctl.core.wire import Code, Reply, WireError
from hostctl.errors import ConfigError

log = logging.getLogger("switchemu")

BATCH = 64  # messages handled per clock read (and per burst of replies)
LATENCY_BUCKETS_S = (10e-6, 25e-6, 50e-6, 100e-6, 250e-6, 500e-6, 1e-3, 2.5e-3, 5e-3, 10e-3, 25e-3, 50e-3, 0.1)
ALL_SWITCHES = "all"
STATUS = "status"  # the status request (switchemu's own, not in wire.REQUEST_TYPES: see SwitchState.status)
STATUS_KEYS = frozenset({"v", "type", "id", "reset_booking"})
BOOKING_TOLERANCE = 0.01  # a slot booked above capacity x (1 + this) counts as overbooked (docs/switchemu.md)
_NAMES = {c: c.name.lower() for c in Code}  # Code -> its counter label (Enum.name is a slow property)


@dataclass
class Stats:
    """Counters (monotonic). Every request frame ends in exactly one of ``replies`` (by type) or
    ``errors`` (by code), so ``frames == sum(replies) + sum(errors)``."""

    messages: int = 0  # ZeroMQ messages received
    frames: int = 0  # request frames received
    replies: dict[str, int] = field(default_factory=lambda: dict.fromkeys((*wire.REQUEST_TYPES, STATUS), 0))
    errors: dict[str, int] = field(default_factory=lambda: {c.name.lower(): 0 for c in Code if c})
    flow_errors: dict[str, int] = field(default_factory=lambda: {c.name.lower(): 0 for c in Code if c})
    bytes_in: int = 0
    bytes_out: int = 0
    auth_failures: int = 0
    revoked_messages: int = 0  # messages of a session whose key was revoked since its handshake (dropped)
    expired_flows: int = 0
    latency_buckets: list[int] = field(default_factory=lambda: [0] * (len(LATENCY_BUCKETS_S) + 1))
    latency_sum_s: float = 0.0
    latency_count: int = 0

    def observe(self, seconds: float) -> None:
        self.latency_buckets[bisect_left(LATENCY_BUCKETS_S, seconds)] += 1
        self.latency_sum_s += seconds
        self.latency_count += 1

    def summary(self) -> str:
        errs = {k: v for k, v in self.errors.items() if v}
        return (f"{self.messages} messages, {self.frames} frames, replies {sum(self.replies.values())}, "
                f"errors {errs or 0}, auth failures {self.auth_failures}"
                + (f", messages of revoked keys {self.revoked_messages}" if self.revoked_messages else ""))


class SwitchState:
    """Load table, progress store and notification queues of one emulated switch (no sockets).

    ``switch`` names the switch whose outgoing links this process owns; ``"all"`` owns every
    switch-owned link of the topology (one process emulating the whole fabric).

    Two paths handle a frame. The fast path (``fast=True``, the default) takes the per-slot
    update_schedule / fetch_feedback frames that ``wire.fast_request`` finds plainly valid and works on
    plain tuples, lists and dicts, with cached path resolutions and slot bounds; every other frame (the
    other types, and anything malformed, whose error the generic validator words) goes through the
    reference path: ``wire.request_from_map`` -> dataclasses -> ``wire.encode_reply``. Both give
    byte-identical replies and the same state and counters (tests/unit/test_switchemu_fastpath.py);
    ``fast=False`` uses the reference path for every frame.

    ``booking_tolerance``: a slot whose final booking exceeds a link's capacity x (1 + this) counts as
    overbooked (``status`` and the metrics; see ``booking``)."""

    def __init__(self, topology: Topology, switch: str | None, *, slot_s: float = 0.06, horizon: int = 10,
                 max_skew_s: float = 0.005, max_flows: int = 1_000_000, max_progress: int = 1_000_000,
                 notify_queue: int = 1024, max_frame_bytes: int = wire.MAX_FRAME_BYTES, fast: bool = True,
                 booking_tolerance: float = BOOKING_TOLERANCE):
        self.topo = topology
        self.switch = resolve_switch(topology, switch)
        if self.switch == ALL_SWITCHES:
            owned = [i for i, ln in enumerate(topology.links) if ln.src in topology.switches]
        else:
            owned = list(topology.owned_links(self.switch))
        self.owned = owned
        self._local = [-1] * len(topology.links)  # global link index -> table index (-1: not ours)
        for j, g in enumerate(owned):
            self._local[g] = j
        self.slot_s = slot_s
        self.horizon = horizon
        self.max_skew_s = max_skew_s
        skew_slots = math.ceil(max_skew_s / slot_s) + 1
        self.table = LoadTable(len(owned), horizon, ring=horizon + 2 * skew_slots,
                               capacities_Bps=[topology.links[g].capacity_Bps for g in owned],
                               tolerance=booking_tolerance)
        self.max_flows = max_flows
        self.max_progress = max_progress
        self.notify_queue = notify_queue
        self.max_frame_bytes = max_frame_bytes
        self.fast = fast
        self.progress: OrderedDict[str, wire.FlowProgress] = OrderedDict()
        self.progress_ttl_slots = 10 * horizon
        self.notes: dict[str, deque[wire.Notification]] = {}
        self.stats = Stats()
        # (src, dst, links) -> (table indices, link ids, ((link id, capacity), ...)) of the owned links
        self._paths: dict[tuple, tuple[tuple[int, ...], tuple[str, ...], tuple[tuple[str, int], ...]]] = {}
        self._now_slot = 0
        self._clock = (math.nan, 0, 0, 0)  # (now_s, slot_now, lowest, highest accepted slot) of the last now_s
        self._pack = msgpack.Packer(use_bin_type=True).pack  # same bytes as msgpack.packb(use_bin_type=True)
        self._stale_tail = f"(slot {slot_s * 1000:g} ms, max skew {max_skew_s * 1000:g} ms)"
        self._future_tail = f"than the max skew {max_skew_s * 1000:g} ms: check NTP"

    # ------------------------------------------------------------------ frames

    def handle_message(self, parts: list[bytes], now_s: float) -> list[bytes]:
        """Request frames of one ZeroMQ message (after the routing id) -> reply frames."""
        self.stats.messages += 1
        head: list[bytes] = []
        if len(parts) > 1 and parts[0] == b"":  # REQ-style delimiter: echo it
            head, parts = [b""], parts[1:]
        if not parts or len(parts) > wire.MAX_PARTS:
            self.stats.frames += 1
            code = Code.MALFORMED if not parts else Code.OVERSIZED
            self.stats.errors[code.name.lower()] += 1
            msg = "empty message" if not parts else f"{len(parts)} frames in one message > {wire.MAX_PARTS}"
            return head + [wire.error_reply(code, msg, None, self._slot(now_s), now_s)]
        handle = self.handle_frame
        if head:
            return head + [handle(p, now_s) for p in parts]
        return [handle(p, now_s) for p in parts]

    def handle_frame(self, frame: bytes, now_s: float) -> bytes:
        """One request frame -> one reply frame. Never raises."""
        t0 = perf_counter()
        st = self.stats
        st.frames += 1
        st.bytes_in += len(frame)
        clk = self._clock
        if now_s != clk[0]:
            clk = self._set_clock(now_s)
        slot_now = clk[1]
        try:
            m = wire.unpack_frame(frame, self.max_frame_bytes)
            got = wire.fast_request(m, self.horizon) if self.fast else None
            if got is not None:
                t, rid, slot, host, items, v = got
                if not clk[2] <= slot <= clk[3]:
                    self._slot_error(slot, rid, clk)
                if t == "update_schedule":
                    out = self._fast_update(rid, slot, items, slot_now, v)
                else:
                    out = self._fast_fetch(rid, slot, host, items, slot_now, v)
            elif m.get("type") == STATUS:
                t = STATUS
                out = self._status_frame(m, slot_now)
            else:
                req = wire.request_from_map(m, self.horizon)
                t = req.type
                if not clk[2] <= req.slot <= clk[3]:
                    self._slot_error(req.slot, req.req_id, clk)
                out = self._dispatch(req, slot_now)
            st.replies[t] += 1
        except WireError as e:
            st.errors[_NAMES[e.code]] += 1
            out = wire.error_reply(e.code, e.message, e.req_id, slot_now, clk[0])
        except Exception as e:  # a bug: count it, answer, keep serving
            log.debug("internal error on a frame", exc_info=True)
            st.errors["internal"] += 1
            out = wire.error_reply(Code.INTERNAL, f"internal error ({type(e).__name__})", wire.peek_id(frame), slot_now,
                                   clk[0])
        st.bytes_out += len(out)
        dt = perf_counter() - t0  # Stats.observe, inlined
        st.latency_buckets[bisect_left(LATENCY_BUCKETS_S, dt)] += 1
        st.latency_sum_s += dt
        st.latency_count += 1
        return out

    def _slot(self, now_s: float) -> int:
        s = int(now_s // self.slot_s)
        if s > self._now_slot:
            self._now_slot = s
            self.stats.expired_flows += self.table.advance(s)
            self._prune_progress(s)
        return s

    def _set_clock(self, now_s: float) -> tuple[float, int, int, int]:
        """Advance to ``now_s`` and cache its slot and the accepted slot range (the clock is read once
        per batch of messages, so consecutive frames share ``now_s``)."""
        slot_now = self._slot(now_s)
        lo = int((now_s - self.max_skew_s) // self.slot_s)
        hi = int((now_s + self.max_skew_s) // self.slot_s)
        self._clock = clk = (now_s, slot_now, lo, hi)
        return clk

    def _slot_error(self, slot: int, req_id: int, clk: tuple[float, int, int, int]) -> None:
        slot_now = clk[1]
        if slot < clk[2]:
            raise WireError(Code.STALE_SLOT, f"slot {slot} is stale: the switch is at slot {slot_now} "
                            + self._stale_tail, req_id)
        raise WireError(Code.FUTURE_SLOT, f"slot {slot} is ahead of the switch's slot {slot_now} by more "
                        + self._future_tail, req_id)

    def _dispatch(self, req: wire.Request, slot_now: int) -> bytes:
        t = req.type
        if t == "update_schedule":
            r = self._update(req, slot_now)
        elif t == "fetch_feedback":
            r = self._fetch(req, slot_now)
        elif t == "report_progress":
            r = self._report(req, slot_now)
        elif t == "get_progress":
            got = tuple(p for p in (self.progress.get(f) for f in req.flows) if p is not None)
            r = Reply(t, req.req_id, 0, slot_now, progress=got, version=req.version)
        else:
            r = self._notify(req, slot_now)
        return wire.encode_reply(replace(r, t=self._clock[0]))  # (the clock of the frame's batch)

    # ------------------------------------------------------------------ fast path

    def _fast_update(self, rid: int, slot: int, items: list[tuple], slot_now: int, v: int) -> bytes:
        """update_schedule from ``wire.fast_request`` items; same effects and reply bytes as ``_update``."""
        table, paths = self.table, self._paths
        status = []
        bad = 0
        for flow, job, src, dst, seq, rates, links, rank in items:
            p = paths.get((src, dst, links))
            if p is None:
                try:
                    p = self._owned_path(src, dst, links)
                except WireError as e:
                    status.append(self._flow_error(e.code))
                    bad = bad or status[-1]
                    continue
            if len(table) >= self.max_flows and flow not in table:
                status.append(self._flow_error(Code.REFUSED))
                bad = bad or status[-1]
                continue
            if table.update_valid(flow, p[0], slot, list(map(round, rates)), slot_now, seq, job, rank, src):
                status.append(0)
            else:
                status.append(self._flow_error(Code.REORDERED))
                bad = bad or status[-1]
        table.settle()  # the frame's end: a moment readers can see (the booking peak)
        m = {"v": v, "type": "update_schedule", "id": rid, "status": bad, "slot_now": slot_now, "t": self._clock[0]}
        if bad:
            m["flow_status"] = status
        return self._pack(m)

    def _fast_fetch(self, rid: int, slot: int, host: str | None, items: list[tuple], slot_now: int, v: int) -> bytes:
        """fetch_feedback from ``wire.fast_request`` items; same reply bytes as ``_fetch``."""
        notes = []
        if host is not None:
            for n in self._take_notes(host, slot_now):
                notes.append({"to": n.to_host, "from": n.from_host, "flow": n.flow_id, "job": n.job_id,
                              "F_bytes": n.f_pred_bytes, "slot": n.slot})
        table, paths, k = self.table, self._paths, self.horizon
        caps: dict[str, int] = {}
        fb = []
        bad = 0
        memo: dict = {}  # the excluded jobs' flows by link, for this frame's reads (no update in between)
        v1 = v == 1
        loads: list = []  # version 2: every row, packed at the end
        jloads: list = []  # the asking job's load from other hosts, row for row as loads
        jflows: list = []  # and how many of its flows have a rate > 0 in each slot
        jall: list = []  # and every flow's load that another host sends
        for flow, src, dst, links, job, rank, arrival in items:
            p = paths.get((src, dst, links))
            if p is None:
                try:
                    p = self._owned_path(src, dst, links)
                except WireError as e:
                    code = self._flow_error(e.code)
                    bad = bad or code
                    fb.append({"flow": flow, "status": code, "links": [], "load_Bps": [], "path_Bps": []} if v1
                              else [flow, code, []])
                    continue
            idx, ids, capl = p
            rows = table.rows(idx, slot, slot_now, flow, job, rank, memo, src if arrival else None)
            jl, jn = table.job_rows(idx, slot, slot_now, job, src, memo)  # the job's view (zeros without a job)
            ja = table.host_rows(idx, slot, slot_now, src) if job else [[0] * k for _ in idx]  # other hosts' all
            for lid, cap in capl:
                if lid not in caps:
                    caps[lid] = cap
            if not v1:
                fb.append([flow, 0, ids])
                loads += rows
                jloads += jl
                jflows += jn
                jall += ja
                continue
            if len(rows) == 1:
                path = rows[0]
            elif rows:
                path = list(map(sum, zip(*rows)))
            else:
                path = [0] * k
            fb.append({"flow": flow, "status": 0, "links": ids, "load_Bps": rows, "path_Bps": path})
            if jl:
                jloads.append((fb[-1], jl, jn, ja))
        if v1 and jloads:  # (wire.encode_reply: the job view goes with every answered flow when one has it)
            for d in fb:
                if d["status"] == 0 and "job_Bps" not in d:
                    d["job_Bps"], d["job_flows"], d["all_Bps"] = [], [], []
            for d, jl, jn, ja in jloads:
                d["job_Bps"], d["job_flows"], d["all_Bps"] = jl, jn, ja
        m = {"v": v, "type": "fetch_feedback", "id": rid, "status": bad, "slot_now": slot_now, "t": self._clock[0],
             "slot": slot, "slot_s": self.slot_s, "K": k, "caps": caps, "flows": fb}
        if not v1:
            m["loads_Bps"] = wire.pack_rows(loads)
            if jloads:
                m["job_Bps"] = wire.pack_rows(jloads)
                m["job_flows"] = wire.pack_rows(jflows)
                m["all_Bps"] = wire.pack_rows(jall)
        m["notify"] = notes
        return self._pack(m)

    # ------------------------------------------------------------------ handlers

    def _owned_path(self, src: str, dst: str, links: tuple[str, ...] | None
                    ) -> tuple[tuple[int, ...], tuple[str, ...], tuple[tuple[str, int], ...]]:
        """(local table indices, link ids, (link id, capacity) pairs) of the links on the flow's path
        that this switch owns (cached)."""
        key = (src, dst, links)
        got = self._paths.get(key)
        if got is not None:
            return got
        topo = self.topo
        if links is None:
            try:
                path = topo.path(src, dst)
            except UnknownNode as e:
                raise WireError(Code.UNKNOWN_HOST, str(e)) from None
        else:
            try:
                path = tuple(topo.link_index[x] for x in links)
            except KeyError as e:
                raise WireError(Code.UNKNOWN_LINK, f"unknown link {e.args[0]!r}") from None
        mine = [g for g in path if self._local[g] >= 0]
        ids = tuple(topo.links[g].link_id for g in mine)
        got = (tuple(self._local[g] for g in mine), ids, tuple((topo.links[g].link_id, topo.links[g].capacity_Bps)
                                                                 for g in mine))
        if len(self._paths) > 100_000:
            self._paths.clear()
        self._paths[key] = got
        return got

    def _take_notes(self, host: str, slot_now: int) -> tuple[wire.Notification, ...]:
        """The notifications queued for ``host`` (name or address), removed; those older than K slots
        are dropped. WireError(UNKNOWN_HOST) for a host not in the topology."""
        try:
            name = self.topo.host(host).name
        except UnknownNode as e:
            raise WireError(Code.UNKNOWN_HOST, str(e)) from None
        q = self.notes.pop(name, None)
        if not q:
            return ()
        oldest = slot_now - self.horizon
        return tuple(n for n in q if n.slot >= oldest)

    def _flow_error(self, code: Code) -> int:
        self.stats.flow_errors[_NAMES[code]] += 1
        return int(code)

    def _update(self, req: wire.Request, slot_now: int) -> Reply:
        table = self.table
        status: list[int] = []
        for f in req.flows:
            try:
                idx, _, _ = self._owned_path(f.src, f.dst, f.links)
            except WireError as e:
                status.append(self._flow_error(e.code))
                continue
            if len(table) >= self.max_flows and f.flow_id not in table:
                status.append(self._flow_error(Code.REFUSED))
                continue
            ok = table.update(f.flow_id, idx, req.slot, f.rates_Bps, slot_now, seq=f.seq, job_id=f.job_id,
                              rank=f.rank, host=f.src)
            status.append(0 if ok else self._flow_error(Code.REORDERED))
        table.settle()  # as in _fast_update
        return _status_reply(req, slot_now, status)

    def _fetch(self, req: wire.Request, slot_now: int) -> Reply:
        notes = self._take_notes(req.host, slot_now) if req.host is not None else ()
        caps: dict[str, int] = {}
        fb: list[wire.FlowFeedback] = []
        links_all = self.topo.links
        memo: dict = {}  # as in _fast_fetch
        for f in req.flows:
            try:
                idx, ids, _ = self._owned_path(f.src, f.dst, f.links)
            except WireError as e:
                fb.append(wire.FlowFeedback(f.flow_id, self._flow_error(e.code)))
                continue
            loads = self.table.loads(idx, req.slot, slot_now, exclude=f.flow_id, exclude_job=f.job_id,
                                     below_rank=f.rank, memo=memo, arrival_host=f.src if f.arrival else None)
            jl, jn = self.table.job_rows(idx, req.slot, slot_now, f.job_id or "", f.src, memo)
            ja = self.table.host_rows(idx, req.slot, slot_now, f.src) if f.job_id else [[0] * self.horizon
                                                                                         for _ in idx]
            for lid in ids:
                if lid not in caps:
                    caps[lid] = links_all[self.topo.link_index[lid]].capacity_Bps
            rows = loads.tolist()
            fb.append(wire.FlowFeedback(f.flow_id, 0, ids, tuple(map(tuple, rows)),
                                        tuple(loads.sum(axis=0).tolist()) if rows else (0,) * self.horizon,
                                        tuple(map(tuple, jl)), tuple(map(tuple, jn)), tuple(map(tuple, ja))))
        status = next((x.status for x in fb if x.status), 0)
        return Reply("fetch_feedback", req.req_id, status, slot_now, slot=req.slot, slot_s=self.slot_s,
                     horizon=self.horizon, capacities_Bps=caps, feedback=tuple(fb), notifications=notes,
                     version=req.version)

    # ------------------------------------------------------------------ status

    def booking(self, settle: bool = True) -> dict:
        """How far the hosts' schedules booked this switch's links (docs/switchemu.md, "Booking"):
        ``{"tolerance", "links": {link id: LinkBooking.to_dict()}, "worst": {"link", ...} | None}``, over
        the links that were ever booked; ``worst`` is the link with the largest slot_peak_ratio (then
        peak_ratio). ``settle=False`` for a reader in another thread (the metrics)."""
        links = {}
        topo = self.topo
        for g, b in zip(self.owned, self.table.booking(settle)):
            if b.peak_Bps or b.slots:
                links[topo.links[g].link_id] = b.to_dict()
        worst = None
        if links:
            lid = max(links, key=lambda x: (links[x]["slot_peak_ratio"], links[x]["peak_ratio"]))
            worst = {"link": lid, **links[lid]}
        return {"tolerance": self.table.tolerance, "links": links, "worst": worst}

    def status(self, slot_now: int | None = None) -> dict:
        """What ``switchemu status`` shows: the switch, its table and the booking of its links."""
        st = self.stats
        return {"switch": self.switch, "slot_s": self.slot_s, "K": self.horizon,
                "slot_now": self._now_slot if slot_now is None else slot_now, "links": len(self.owned),
                "flows": len(self.table), "progress_flows": len(self.progress), "frames": st.frames,
                "errors": sum(st.errors.values()), "booking": self.booking()}

    def _status_frame(self, m: dict, slot_now: int) -> bytes:
        """A status request ``{v, type: "status", id, reset_booking?: bool}`` -> its reply: the frame's
        common keys plus ``status()`` under ``"switch_status"``; with ``reset_booking`` the booking is
        read, then started over."""
        rid = m.get("id")
        if type(rid) is not int or not 0 <= rid <= wire.MAX_U64:
            raise WireError(Code.MALFORMED, "status: id must be an unsigned 64-bit int")
        v = m.get("v")
        if v not in wire.WIRE_VERSIONS or type(v) is not int:
            raise WireError(Code.UNKNOWN_VERSION, f"status: unknown version {v!r}", rid)
        extra = set(m) - STATUS_KEYS
        if extra:
            raise WireError(Code.MALFORMED, f"status: unknown keys {sorted(extra)}", rid)
        reset = m.get("reset_booking", False)
        if type(reset) is not bool:
            raise WireError(Code.MALFORMED, "status: reset_booking must be a bool", rid)
        out = self.status(slot_now)
        if reset:
            self.table.reset_booking()
        return self._pack({"v": v, "type": STATUS, "id": rid, "status": 0, "slot_now": slot_now,
                           "t": self._clock[0], "switch_status": out})

    def _report(self, req: wire.Request, slot_now: int) -> Reply:
        host = req.host or ""
        status: list[int] = []
        for p in req.flows:
            if len(self.progress) >= self.max_progress and p.flow_id not in self.progress:
                status.append(self._flow_error(Code.REFUSED))
                continue
            self.progress[p.flow_id] = wire.FlowProgress(p.flow_id, p.job_id, p.cum_bytes, p.rate_Bps, req.slot, host)
            self.progress.move_to_end(p.flow_id)
            status.append(0)
        return _status_reply(req, slot_now, status)

    def _prune_progress(self, slot_now: int) -> None:
        oldest = slot_now - self.progress_ttl_slots
        prog = self.progress
        while prog:
            k, p = next(iter(prog.items()))
            if p.slot >= oldest:
                break
            del prog[k]

    def _notify(self, req: wire.Request, slot_now: int) -> Reply:
        status: list[int] = []
        for n in req.flows:
            try:
                to = self.topo.host(n.to_host).name
            except UnknownNode:
                status.append(self._flow_error(Code.UNKNOWN_HOST))
                continue
            q = self.notes.get(to)
            if q is None:
                if len(self.notes) >= len(self.topo.hosts):
                    status.append(self._flow_error(Code.REFUSED))
                    continue
                q = self.notes[to] = deque(maxlen=self.notify_queue)
            q.append(wire.Notification(to, n.flow_id, n.job_id, n.f_pred_bytes, req.slot, req.host or ""))
            status.append(0)
        return _status_reply(req, slot_now, status)


def _status_reply(req: wire.Request, slot_now: int, status: list[int]) -> Reply:
    bad = any(status)
    return Reply(req.type, req.req_id, next((s for s in status if s), 0), slot_now,
                 flow_status=tuple(status) if bad else (), version=req.version)


def resolve_switch(topology: Topology, switch: str | None) -> str:
    """The switch this process emulates: the given name, or the only switch of the topology."""
    if switch is None:
        if len(topology.switches) == 1:
            return next(iter(topology.switches))
        names = list(topology.switches)
        shown = ", ".join(names[:6]) + (", ..." if len(names) > 6 else "")
        raise ConfigError(f"the topology has {len(names)} switches ({shown}): give --name SWITCH "
                          f"(one switchemu per switch) or --name {ALL_SWITCHES}")
    if switch != ALL_SWITCHES and switch not in topology.switches:
        raise ConfigError(f"switch {switch!r} is not in the topology: give one of its [[switch]] names "
                          f"or --name {ALL_SWITCHES}")
    return switch


# ---------------------------------------------------------------------- sockets


@dataclass(frozen=True)
class ServerConfig:
    bind: str
    slot_s: float = 0.06
    horizon: int = 10
    max_skew_s: float = 0.005
    curve_dir: str | None = None  # DIR with server.key_secret and clients/*.key (switchemu keygen)
    metrics_port: int | None = None
    metrics_addr: str = "127.0.0.1"


class SwitchServer:
    """ROUTER socket + poll loop around a ``SwitchState``. Call ``serve(stop)`` from the main thread."""

    def __init__(self, state: SwitchState, cfg: ServerConfig, clock=time.time):
        import zmq

        self.state = state
        self.cfg = cfg
        self.clock = clock
        self.reload = threading.Event()
        self.ctx = zmq.Context()
        self.auth = None
        self.keys: frozenset[str] | None = None  # with CURVE: the authorized clients' public keys (z85)
        self.sock = self.ctx.socket(zmq.ROUTER)
        self.sock.linger = 0
        self.sock.setsockopt(zmq.MAXMSGSIZE, 16 * state.max_frame_bytes)  # larger frames: peer dropped
        self.sock.setsockopt(zmq.RCVHWM, 100_000)
        self.sock.setsockopt(zmq.SNDHWM, 100_000)
        self.monitor = None
        try:
            if cfg.curve_dir:
                self._setup_curve(cfg.curve_dir)
            try:
                self.sock.bind(cfg.bind)
            except zmq.ZMQError as e:
                raise ConfigError(f"cannot bind {cfg.bind}: {e.strerror}: pick a free port or another --bind") from None
            self.endpoint = self.sock.getsockopt_string(zmq.LAST_ENDPOINT)
        except BaseException:
            self.close()
            raise

    def _setup_curve(self, d: str) -> None:
        import zmq
        import zmq.auth
        from zmq.auth.thread import ThreadAuthenticator

        secret_file = os.path.join(d, "server.key_secret")
        clients = os.path.join(d, "clients")
        if not os.path.isfile(secret_file) or not os.path.isdir(clients):
            raise ConfigError(f"--curve-keys {d}: needs server.key_secret and a clients/ folder: run switchemu keygen {d}")
        try:
            public, secret = zmq.auth.load_certificate(secret_file)
        except (OSError, ValueError) as e:
            raise ConfigError(f"--curve-keys {d}: cannot read server.key_secret ({e}): run switchemu keygen {d}") from None
        self.auth = ThreadAuthenticator(self.ctx, log=logging.getLogger("switchemu.auth"))
        self.auth.start()
        self.auth.configure_curve(domain="*", location=clients)
        self.keys = self._client_keys()
        self.sock.curve_secretkey = secret
        self.sock.curve_publickey = public
        self.sock.curve_server = True
        self.monitor = self.sock.get_monitor_socket(zmq.EVENT_HANDSHAKE_FAILED_AUTH | zmq.EVENT_HANDSHAKE_FAILED_PROTOCOL)

    def _client_keys(self) -> frozenset[str]:
        """The public keys in clients/ (z85, as ZeroMQ's User-Id of a session that has one); a file that
        does not hold a key is logged and left out."""
        import zmq.auth

        d = os.path.join(self.cfg.curve_dir, "clients")
        keys = set()
        for f in sorted(os.listdir(d)):
            if f.endswith(".key"):
                try:
                    keys.add(zmq.auth.load_certificate(os.path.join(d, f))[0].decode("ascii"))
                except (OSError, ValueError) as e:
                    log.warning("clients/%s holds no public key (%s): not authorized", f, e)
        return frozenset(keys)

    def reload_keys(self) -> None:
        """SIGHUP: the authorized keys again from clients/. New handshakes are checked against them (the
        authenticator); sessions of keys that are gone get no more replies (``serve``)."""
        if self.auth is None or not self.cfg.curve_dir:
            return
        self.auth.configure_curve(domain="*", location=os.path.join(self.cfg.curve_dir, "clients"))
        old, self.keys = self.keys or frozenset(), self._client_keys()
        gone = len(old - self.keys)
        log.info("reloaded %d authorized client keys%s", len(self.keys),
                 f"; {gone} revoked: their open sessions get no more replies" if gone else "")

    def authorized_clients(self) -> int:
        return len(self.keys or ())

    def serve(self, stop: threading.Event) -> None:
        import zmq

        sock, state = self.sock, self.state
        recv, send, handle, NOBLOCK = sock.recv_multipart, sock.send_multipart, state.handle_message, zmq.NOBLOCK
        poller = zmq.Poller()
        poller.register(sock, zmq.POLLIN)
        if self.monitor is not None:
            poller.register(self.monitor, zmq.POLLIN)
        while not stop.is_set():
            if self.reload.is_set():
                self.reload.clear()
                self.reload_keys()
            events = dict(poller.poll(100))
            if self.monitor is not None and self.monitor in events:
                self._drain_monitor()
            if sock not in events:
                state._slot(self.clock())  # keep expiring while idle
                continue
            now = self.clock()
            replies = []
            keys = self.keys
            for _ in range(BATCH):
                try:
                    msg = recv(NOBLOCK, copy=keys is None)
                except zmq.Again:
                    break
                if keys is not None:  # CURVE: the session's key must still be authorized (a revoked one is not)
                    if msg[0].get("User-Id") not in keys:
                        state.stats.revoked_messages += 1
                        continue
                    msg = [f.bytes for f in msg]
                if len(msg) < 2:
                    continue  # cannot happen on a ROUTER (the routing id is always there)
                out = handle(msg[1:], now)
                out.insert(0, msg[0])
                replies.append(out)
            # The replies of a batch go out back to back: sends in a row find ZeroMQ's I/O thread
            # awake, where a send after each handled message woke it every time (~7 us more CPU per
            # message in this thread on a 2-core VM, benchmarks/micro_switchemu.py --socket). A batch
            # holds more than one message only when messages were waiting, and delays the first
            # reply by at most BATCH handling times (~1.5 ms at ~25 us per update + fetch message).
            for out in replies:
                try:
                    send(out, NOBLOCK)
                except zmq.Again:
                    pass  # the peer's queue is full or it is gone: the reply is dropped

    def _drain_monitor(self) -> None:
        import zmq
        from zmq.utils.monitor import recv_monitor_message

        while True:
            try:
                recv_monitor_message(self.monitor, zmq.NOBLOCK)
            except zmq.Again:
                return
            self.state.stats.auth_failures += 1

    def close(self) -> None:
        if self.monitor is not None:
            try:
                self.sock.disable_monitor()
            except Exception:  # the socket may already be closed
                log.debug("disable_monitor", exc_info=True)
            self.monitor.close(0)
        self.sock.close(0)
        if self.auth is not None:
            self.auth.stop()
        self.ctx.term()


# ---------------------------------------------------------------------- metrics


class StatsCollector:
    """Prometheus view of ``Stats`` (read from the HTTP thread; all dict keys exist from the start)."""

    def __init__(self, state: SwitchState):
        self.state = state

    def collect(self):
        from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, HistogramMetricFamily

        s = self.state.stats
        req = CounterMetricFamily("switchemu_requests", "Request frames answered, by type", labels=["type"])
        for k, v in list(s.replies.items()):
            req.add_metric([k], v)
        err = CounterMetricFamily("switchemu_errors", "Request frames rejected with an error reply, by code", labels=["code"])
        for k, v in list(s.errors.items()):
            err.add_metric([k], v)
        ferr = CounterMetricFamily("switchemu_flow_errors", "Flows/items rejected inside accepted frames, by code", labels=["code"])
        for k, v in list(s.flow_errors.items()):
            ferr.add_metric([k], v)
        yield from (req, err, ferr)
        yield CounterMetricFamily("switchemu_messages", "ZeroMQ messages received", value=s.messages)
        yield CounterMetricFamily("switchemu_frames", "Request frames received", value=s.frames)
        yield CounterMetricFamily("switchemu_received_bytes", "Request bytes received", value=s.bytes_in)
        yield CounterMetricFamily("switchemu_sent_bytes", "Reply bytes sent", value=s.bytes_out)
        yield CounterMetricFamily("switchemu_auth_failures", "CURVE handshakes refused", value=s.auth_failures)
        yield CounterMetricFamily("switchemu_revoked_messages", "Messages dropped from sessions whose key was revoked "
                                  "(SIGHUP) after their handshake", value=s.revoked_messages)
        yield CounterMetricFamily("switchemu_expired_flows", "Flows forgotten after K silent slots", value=s.expired_flows)
        yield GaugeMetricFamily("switchemu_table_flows", "Flows in the load table", value=len(self.state.table))
        yield GaugeMetricFamily("switchemu_table_links", "Links owned by this switch", value=len(self.state.owned))
        yield GaugeMetricFamily("switchemu_progress_flows", "Flows in the progress store", value=len(self.state.progress))
        yield from self._booking()
        buckets, acc = [], 0
        counts = list(s.latency_buckets)
        for le, c in zip((*map(str, LATENCY_BUCKETS_S), "+Inf"), counts):
            acc += c
            buckets.append((le, acc))
        h = HistogramMetricFamily("switchemu_frame_seconds", "Time to handle one request frame, seconds",
                                  buckets=buckets, sum_value=s.latency_sum_s)
        yield h


    def _booking(self):
        """Per link that was ever booked (docs/switchemu.md, "Booking"); read without settling (this is
        the HTTP thread), so a scrape may miss the last update frame's peak."""
        from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily

        fams = (
            (GaugeMetricFamily, "switchemu_link_booking_peak_ratio",
             "Largest booking of any slot / capacity, at any moment", "peak_ratio"),
            (GaugeMetricFamily, "switchemu_link_slot_booking_peak_ratio",
             "Largest final booking of a slot (when the clock passed it) / capacity", "slot_peak_ratio"),
            (GaugeMetricFamily, "switchemu_link_booking_worst_excess_bytes_per_second",
             "Final booking of the worst slot above capacity, bytes/s (0: within)", "worst_excess_Bps"),
            (GaugeMetricFamily, "switchemu_link_booking_worst_flows",
             "Flows with a rate in the worst slot when the clock passed it", "worst_flows"),
            (CounterMetricFamily, "switchemu_link_overbooked_slots",
             "Slots whose final booking exceeded capacity x (1 + tolerance)", "over_slots"),
            (CounterMetricFamily, "switchemu_link_booked_slots", "Slots whose final booking was above 0", "slots"),
        )
        links = self.state.booking(settle=False)["links"]
        for cls, name, text, key in fams:
            fam = cls(name, text, labels=["link"])
            for lid, b in links.items():
                fam.add_metric([lid], b[key])
            yield fam


def start_metrics(state: SwitchState, port: int, addr: str) -> None:
    from prometheus_client import start_http_server
    from prometheus_client.registry import CollectorRegistry

    reg = CollectorRegistry()
    reg.register(StatsCollector(state))
    try:
        start_http_server(port, addr=addr, registry=reg)
    except OSError as e:
        raise ConfigError(f"cannot serve metrics on {addr}:{port}: {e.strerror}: pick another --metrics-port") from None
