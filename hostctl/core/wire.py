"""The switchemu wire protocol, versions 1 and 2: msgpack messages over ZeroMQ (spec 2.4.4; pure).

Transport
---------
A client (``hostctl.policy.switchclient``) talks to one emulated switch through a DEALER socket; the switch
(``switchemu``) is a ROUTER. One ZeroMQ message carries **one or more request frames** (at most
``MAX_PARTS``); the reply message carries exactly one reply frame per request frame, in order. So a
host makes one round trip per switch per slot: typically [update_schedule, fetch_feedback] in one
message, each frame batching all of the host's flows that cross that switch. A REQ-style empty
delimiter frame in front is allowed and echoed.

Every frame is one msgpack map (string keys, at most ``MAX_FRAME_BYTES``). Units: rates in bytes/s
(``_Bps``), volumes in bytes, slots are absolute ints ``floor(unix_time / slot_s)`` (hosts are
NTP-synchronised; the switch rejects slots outside its clock +- max skew).

Versions: a request carries ``v`` = 1 or 2, and its reply the same ``v``. The two differ only in the
fetch_feedback reply, whose loads version 2 sends as one packed array (below) instead of a msgpack int
per value: a daemon with 100 flows decodes it several times faster. An ``error`` reply has the same
form in every version and always carries ``v`` = 1, so a client of any version reads it. A switch
speaks both versions; a client speaks 2 and, told ``unknown_version`` by an older switch, speaks 1 to
it from then on.

Requests (common keys: ``v``, ``type``, ``id`` = uint request id echoed in the reply, ``slot`` =
the sender's current slot = the first slot of the K-slot window, ``host`` = sender host name or address,
optional except to receive notifications)::

    update_schedule  flows: [{flow, job, src, dst, seq, rates_Bps: [K numbers >= 0], links?: [link ids],
                              rank?: uint}]
                     replace each flow's schedule over [slot, slot+K); all-zero rates withdraw the flow;
                     ``rank`` (optional) is the job's place in a fabric-wide job order (lower first)
    fetch_feedback   flows: [{flow, src, dst, links?, job?, rank?, arrival?}]
                     per-link loads over [slot, slot+K) on the links of the path this switch owns,
                     EXCLUDING the flow's own schedule (with ``job``: the job's whole load); with
                     ``rank``: also EXCLUDING the jobs whose last update gave a higher rank (jobs
                     without a rank are always counted); with ``job`` and ``arrival: true``: also
                     EXCLUDING the jobs that arrived in the table after the job (with ``rank``: only
                     those of the same rank or none; a job ranked before counts) and every flow ``src``
                     sends; with ``job``, also the job's view (job_Bps, job_flows: its flows from other
                     hosts than ``src``); plus queued notifications for ``host``
    report_progress  flows: [{flow, job, cum_bytes, rate_Bps}]    F values (cum bytes by the end of
                     this slot) and the rate planned for it (spec 2.8.2); the switch is a rendezvous
    get_progress     flows: [flow ids]                             latest reported progress of those flows
    notify           items: [{to, flow, job, F_bytes}]             receiver notification (Alg. 2 l. 13-16):
                     "reduce the flows that depend on ``flow`` to ``F_bytes`` cumulative bytes";
                     queued at the switch for host ``to`` and returned once in its next fetch_feedback

``src``/``dst``/``to`` are host names or addresses from the switch's topology; ``links`` (optional)
overrides the topology path. ``flow`` ids must be unique in the cluster (e.g. ``"10.0.0.1:4711>10.0.0.2:9000"``).

Replies (common keys: ``v``, ``type`` (the request's, or ``"error"``), ``id``, ``status`` (0 = ok or an
error code below), ``slot_now`` = the switch's current slot, ``t`` = the switch's clock when it read the
request, unix seconds as a float (optional: switches before it leave it out; a client measures its clock
offset from it))::

    error            msg: str                      the whole frame was rejected
    update_schedule  flow_status?: [code per flow] present when a flow failed; the others were applied
    report_progress  flow_status?
    notify           flow_status?
    fetch_feedback   slot, slot_s, K, caps: {link: capacity_Bps},
                     v1: flows: [{flow, status, links: [ids], load_Bps: [[K ints] per link], path_Bps: [K ints]}],
                     v2: flows: [[flow, status, [link ids]] per queried flow, in request order],
                         loads_Bps: bin, little-endian int64, for each flow in order and each of its links
                                    in order, that link's K loads (a row per link; no path sums: the
                                    client adds a flow's rows; a refused flow names no links)
                     notify: [{to, from, flow, job, F_bytes, slot}]
    get_progress     progress: [{flow, job, cum_bytes, rate_Bps, slot, host}]   (unknown flows left out)

Error codes: see ``Code``. Every decode error is one ``WireError(code, message)``.
"""

from __future__ import annotations

import functools
import math
import sys
from array import array
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from enum import IntEnum
from itertools import accumulate, chain, islice, repeat
from typing import Any, NamedTuple

import msgpack
import numpy as np

from hostctl.errors import HostctlError

WIRE_VERSION = 2  # what a client speaks
WIRE_VERSIONS = (1, 2)  # what a switch answers
ERROR_VERSION = 1  # the v of every error reply (its form is the same in every version)
MAX_FRAME_BYTES = 512 * 1024  # one request or reply frame
MAX_PARTS = 16  # request frames in one ZeroMQ message
MAX_ITEMS = 2048  # flows / items in one frame
MAX_LINKS = 16  # explicit links of one flow
MAX_STR = 128  # flow, job, host and link ids
MAX_RATE_Bps = 10**12  # 8 Tbit/s
MAX_BYTES = 2**62
MAX_LOAD_Bps = 2**58  # a link's load in a v2 reply (so the sum over MAX_LINKS links fits an int64)
_BIG_ENDIAN = sys.byteorder == "big"  # version 2's loads are little-endian
MAX_U64 = 2**64 - 1


class Code(IntEnum):
    OK = 0
    MALFORMED = 1  # not msgpack, or a field of the wrong type/length/range
    OVERSIZED = 2  # frame > MAX_FRAME_BYTES, too many parts, items or links
    UNKNOWN_VERSION = 3
    UNKNOWN_TYPE = 4
    STALE_SLOT = 5  # slot older than the switch's clock - max skew
    FUTURE_SLOT = 6  # slot newer than the switch's clock + max skew
    UNKNOWN_HOST = 7
    UNKNOWN_LINK = 8
    REFUSED = 9  # the switch will not serve it (table full, shutting down)
    REORDERED = 10  # per flow: seq older than the applied one; ignored
    INTERNAL = 11  # a bug in the switch; logged there


class WireError(HostctlError):
    """A frame that cannot be accepted; ``code`` is a ``Code``."""

    def __init__(self, code: Code | int, message: str, req_id: int | None = None):
        super().__init__(message)
        self.code = Code(code)
        self.message = message
        self.req_id = req_id  # the frame's request id when it could be read

    def __str__(self) -> str:
        return f"{self.code.name.lower()}: {self.message}"


REQUEST_TYPES = ("update_schedule", "fetch_feedback", "report_progress", "get_progress", "notify")


# ---------------------------------------------------------------------- data


class FlowSchedule(NamedTuple):
    """One flow's K-slot schedule (update_schedule). A NamedTuple, not a dataclass: a daemon makes
    one per flow every slot and a switch one per flow it reads (a frozen dataclass took 2.2x as long
    to build: 57 against 26 us for 100)."""

    flow_id: str
    job_id: str
    src: str
    dst: str
    seq: int
    rates_Bps: tuple[float, ...]  # K rates, bytes/s, from the message's slot on
    links: tuple[str, ...] | None = None  # explicit path (link ids); None = from the topology
    rank: int | None = None  # the job's place in a fabric-wide job order (lower = first); None: unordered


@dataclass(frozen=True, slots=True)
class FlowQuery:
    flow_id: str
    src: str
    dst: str
    links: tuple[str, ...] | None = None
    job_id: str | None = None  # given: the job's other flows are left out too (b_l = other jobs' load)
    rank: int | None = None  # given: jobs ranked after it are left out too (a fabric-wide job order)
    arrival: bool = False  # with job: the job's view in arrival order (jobs that arrived later and src's flows out)


@dataclass(frozen=True, slots=True)
class FlowProgress:
    flow_id: str
    job_id: str
    cum_bytes: int  # F·t̂: bytes sent by the end of the reported slot
    rate_Bps: float  # rate planned for that slot
    slot: int = 0  # filled in by the switch (the request's slot)
    host: str = ""  # filled in by the switch (the reporting host)


@dataclass(frozen=True, slots=True)
class Notification:
    to_host: str  # the receiver host whose subsequent flows should slow down
    flow_id: str  # the predecessor flow f_i
    job_id: str
    f_pred_bytes: int  # F_pred: cumulative bytes of f_i after this slot's adjustment
    slot: int = 0  # filled in by the switch
    from_host: str = ""  # filled in by the switch


@dataclass(frozen=True, slots=True)
class Request:
    type: str  # one of REQUEST_TYPES
    req_id: int
    slot: int
    host: str | None = None
    flows: tuple = ()  # FlowSchedule | FlowQuery | FlowProgress | str (get_progress) | Notification (notify)
    version: int = WIRE_VERSION


class FlowFeedback(NamedTuple):
    """A switch's feedback for one flow (fetch_feedback). A NamedTuple: a daemon reads one per flow
    and slot."""

    flow_id: str
    status: int
    links: tuple[str, ...] = ()  # the links of the path this switch owns
    load_Bps: tuple[tuple[int, ...], ...] = ()  # per link, K values, own schedule excluded
    path_load_Bps: tuple[int, ...] = ()  # sum over those links (K zeros if none; () if refused)
    # the asking job's view (queries with a job; () from a switch that does not send it): per link, K values
    job_Bps: tuple[tuple[int, ...], ...] = ()  # load of the job's flows from other hosts than the query's src
    job_flows: tuple[tuple[int, ...], ...] = ()  # how many of those flows have a rate > 0 in each slot
    all_Bps: tuple[tuple[int, ...], ...] = ()  # the load of every flow other hosts than src send (any job)


@dataclass(frozen=True, slots=True)
class Reply:
    type: str  # the request's type, or "error"
    req_id: int | None
    status: int
    slot_now: int | None = None
    message: str = ""  # error text
    flow_status: tuple[int, ...] = ()  # per request item; empty = all ok
    slot: int | None = None  # fetch_feedback: window start
    slot_s: float | None = None
    horizon: int | None = None
    capacities_Bps: dict[str, int] = field(default_factory=dict)
    feedback: tuple[FlowFeedback, ...] = ()
    notifications: tuple[Notification, ...] = ()
    progress: tuple[FlowProgress, ...] = ()
    version: int = WIRE_VERSION  # the request's (an error reply: ERROR_VERSION)
    t: float | None = None  # the switch's clock (unix s) when it read the request; None: an older switch


# ---------------------------------------------------------------------- encoding


def _pack(obj: Any) -> bytes:
    return msgpack.packb(obj, use_bin_type=True)


def encode_request(req: Request) -> bytes:
    m: dict[str, Any] = {"v": req.version, "type": req.type, "id": req.req_id, "slot": req.slot}
    if req.host is not None:
        m["host"] = req.host
    t = req.type
    if t == "update_schedule":
        m["flows"] = [_flow_sched(f) for f in req.flows]
    elif t == "fetch_feedback":
        m["flows"] = [_flow_query(f) for f in req.flows]
    elif t == "report_progress":
        m["flows"] = [{"flow": p.flow_id, "job": p.job_id, "cum_bytes": p.cum_bytes, "rate_Bps": p.rate_Bps}
                      for p in req.flows]
    elif t == "get_progress":
        m["flows"] = list(req.flows)
    elif t == "notify":
        m["items"] = [{"to": n.to_host, "flow": n.flow_id, "job": n.job_id, "F_bytes": n.f_pred_bytes}
                      for n in req.flows]
    else:
        raise ValueError(f"unknown request type {t!r}")
    return _pack(m)


def _flow_sched(f: FlowSchedule) -> dict[str, Any]:
    d = {"flow": f.flow_id, "job": f.job_id, "src": f.src, "dst": f.dst, "seq": f.seq,
         "rates_Bps": list(f.rates_Bps)}
    if f.links is not None:
        d["links"] = list(f.links)
    if f.rank is not None:
        d["rank"] = f.rank
    return d


def _flow_query(f: FlowQuery) -> dict[str, Any]:
    d = {"flow": f.flow_id, "src": f.src, "dst": f.dst}
    if f.links is not None:
        d["links"] = list(f.links)
    if f.job_id is not None:
        d["job"] = f.job_id
    if f.rank is not None:
        d["rank"] = f.rank
    if f.arrival:
        d["arrival"] = True
    return d


def _notif(n: Notification) -> dict[str, Any]:
    return {"to": n.to_host, "from": n.from_host, "flow": n.flow_id, "job": n.job_id,
            "F_bytes": n.f_pred_bytes, "slot": n.slot}


def pack_rows(rows: Iterable[Sequence[int]]) -> bytes:
    """Load rows (ints) -> version 2's ``loads_Bps``: little-endian int64, row after row."""
    a = array("q")  # 8 bytes on every platform CPython supports
    for r in rows:
        a.extend(r)
    if _BIG_ENDIAN:
        a.byteswap()
    return a.tobytes()


def _job_rows(f: FlowFeedback, rows: tuple, k: int | None) -> tuple:
    """A flow's job-view rows as sent: one K-row per link (zeros when the feedback has none)."""
    if rows or not f.links:
        return rows
    return ((0,) * (k or 0),) * len(f.links)


def encode_reply(r: Reply) -> bytes:
    m: dict[str, Any] = {"v": r.version, "type": r.type, "id": r.req_id, "status": int(r.status),
                         "slot_now": r.slot_now}
    if r.t is not None:
        m["t"] = r.t
    if r.type == "error":
        m["v"] = ERROR_VERSION
        m["msg"] = r.message
        return _pack(m)
    if r.flow_status:
        m["flow_status"] = list(r.flow_status)
    if r.type == "fetch_feedback":
        m["slot"] = r.slot
        m["slot_s"] = r.slot_s
        m["K"] = r.horizon
        m["caps"] = r.capacities_Bps
        view = any(f.job_Bps for f in r.feedback)  # the job view is sent when some flow has one
        if r.version == 1:
            m["flows"] = [{"flow": f.flow_id, "status": f.status, "links": list(f.links),
                           "load_Bps": [list(x) for x in f.load_Bps], "path_Bps": list(f.path_load_Bps),
                           "job_Bps": [list(x) for x in _job_rows(f, f.job_Bps, r.horizon)],
                           "job_flows": [list(x) for x in _job_rows(f, f.job_flows, r.horizon)],
                           "all_Bps": [list(x) for x in _job_rows(f, f.all_Bps, r.horizon)]}
                          if view and f.status == 0 else
                          {"flow": f.flow_id, "status": f.status, "links": list(f.links),
                           "load_Bps": [list(x) for x in f.load_Bps], "path_Bps": list(f.path_load_Bps)}
                          for f in r.feedback]
        else:
            m["flows"] = [[f.flow_id, f.status, list(f.links)] for f in r.feedback]
            m["loads_Bps"] = pack_rows(chain.from_iterable(f.load_Bps for f in r.feedback))
            if view:
                m["job_Bps"] = pack_rows(chain.from_iterable(_job_rows(f, f.job_Bps, r.horizon)
                                                             for f in r.feedback))
                m["job_flows"] = pack_rows(chain.from_iterable(_job_rows(f, f.job_flows, r.horizon)
                                                               for f in r.feedback))
                m["all_Bps"] = pack_rows(chain.from_iterable(_job_rows(f, f.all_Bps, r.horizon)
                                                             for f in r.feedback))
        m["notify"] = [_notif(n) for n in r.notifications]
    elif r.type == "get_progress":
        m["progress"] = [{"flow": p.flow_id, "job": p.job_id, "cum_bytes": p.cum_bytes, "rate_Bps": p.rate_Bps,
                          "slot": p.slot, "host": p.host} for p in r.progress]
    return _pack(m)


def error_reply(code: Code | int, message: str, req_id: int | None = None, slot_now: int | None = None,
                t: float | None = None) -> bytes:
    """The bytes of ``encode_reply(Reply("error", req_id, code, slot_now, message=message[:200], t=t))``,
    without building the Reply (a switch that is behind answers many frames with stale_slot). Version
    ``ERROR_VERSION`` whatever the request's."""
    m = {"v": ERROR_VERSION, "type": "error", "id": req_id, "status": int(code), "slot_now": slot_now}
    if t is not None:
        m["t"] = t
    m["msg"] = message[:200]
    return _pack(m)


# ---------------------------------------------------------------------- decoding


def unpack_frame(frame: bytes, max_bytes: int = MAX_FRAME_BYTES, *, use_list: bool = True) -> dict[str, Any]:
    """msgpack bytes -> a dict with str keys, or WireError (MALFORMED / OVERSIZED). use_list=False:
    arrays come as tuples (replies: the feedback rows are kept as they come)."""
    if not isinstance(frame, (bytes, bytearray, memoryview)):
        raise WireError(Code.MALFORMED, "frame must be bytes")
    if len(frame) > max_bytes:
        raise WireError(Code.OVERSIZED, f"frame of {len(frame)} bytes > {max_bytes}")
    try:
        # the max_*_len limits default to the frame length, which bounds memory already
        obj = msgpack.unpackb(frame, raw=False, strict_map_key=True, use_list=use_list)
    except (ValueError, TypeError, msgpack.UnpackException) as e:
        raise WireError(Code.MALFORMED, f"not a msgpack frame ({type(e).__name__})") from None
    if not isinstance(obj, dict):
        raise WireError(Code.MALFORMED, "frame must be a msgpack map")
    return obj


def _req_id(m: dict[str, Any]) -> int | None:
    """The request id if it is well formed (so even an error reply can be matched)."""
    v = m.get("id")
    return v if type(v) is int and 0 <= v <= MAX_U64 else None


def peek_id(frame: bytes) -> int | None:
    """Best effort: the ``id`` of a frame, for error replies. Never raises."""
    try:
        return _req_id(unpack_frame(frame))
    except WireError:
        return None


def decode_request(frame: bytes, *, horizon: int, max_bytes: int = MAX_FRAME_BYTES) -> Request:
    """Validate one request frame (every field) against the schema with K = ``horizon``.

    Raises only ``WireError``; the error carries the request id if one could be read
    (``e.req_id``, else None)."""
    return request_from_map(unpack_frame(frame, max_bytes), horizon)


def request_from_map(m: dict[str, Any], horizon: int) -> Request:
    """``decode_request`` after ``unpack_frame``: validate an unpacked frame map."""
    try:
        return _decode_request(m, horizon)
    except WireError as e:
        e.req_id = _req_id(m)
        raise


# The switch's per-frame fast path. ``fast_request`` accepts only a plainly valid update_schedule or
# fetch_feedback map and returns it as plain tuples (no dataclasses); anything else, valid or not, gives
# None and the caller falls back to ``request_from_map`` for the verdict. Invariant (tested):
# fast_request(m) is not None  =>  request_from_map(m) succeeds with the same content.
_NUM_TYPES = frozenset({int, float})


def fast_request(m: dict[str, Any], k: int) -> tuple | None:
    """(type, id, slot, host, items, version) of a valid update_schedule / fetch_feedback map, else None.

    update_schedule items: ``(flow, job, src, dst, seq, rates, links, rank)``, ``rates`` the list as sent
    (K ints/floats within 0..MAX_RATE_Bps, finite), ``links`` a tuple or None, ``rank`` an int or None.
    fetch_feedback items: ``(flow, src, dst, links, job, rank, arrival)``, ``job`` and ``rank`` None when
    absent, ``arrival`` False."""
    # Required keys are read by subscript (a missing one: KeyError -> None); once they are all there,
    # "no unknown key" is a length test: len(map) == required + the optional keys present.
    try:
        t = m["type"]
        if t == "update_schedule":
            sched = True
        elif t == "fetch_feedback":
            sched = False
        else:
            return None
        v, rid, slot, flows = m["v"], m["id"], m["slot"], m["flows"]
        host = m.get("host")
        if (len(m) != (5 if "host" not in m else 6) or type(v) is not int or v not in WIRE_VERSIONS
                or type(rid) is not int or not 0 <= rid <= MAX_U64 or type(slot) is not int
                or not 0 <= slot < 2**62 or type(flows) is not list or len(flows) > MAX_ITEMS):
            return None
        if host is not None and (type(host) is not str or not 0 < len(host) <= MAX_STR):
            return None
        out = []
        append = out.append
        if sched:
            for d in flows:
                if type(d) is not dict:
                    return None
                flow, job, src, dst, seq, rates = d["flow"], d["job"], d["src"], d["dst"], d["seq"], d["rates_Bps"]
                links, rank = d.get("links"), d.get("rank")
                if (len(d) != 6 + ("links" in d) + ("rank" in d)
                        or type(flow) is not str or not 0 < len(flow) <= MAX_STR
                        or type(job) is not str or not 0 < len(job) <= MAX_STR
                        or type(src) is not str or not 0 < len(src) <= MAX_STR
                        or type(dst) is not str or not 0 < len(dst) <= MAX_STR
                        or type(seq) is not int or not 0 <= seq <= MAX_U64
                        or type(rates) is not list or len(rates) != k or not set(map(type, rates)) <= _NUM_TYPES):
                    return None
                # NaN or inf anywhere makes the sum NaN or inf (fails the test); without them min/max are exact
                if not (0 <= min(rates) and max(rates) <= MAX_RATE_Bps and sum(rates) <= MAX_RATE_Bps * k):
                    return None
                if links is not None:
                    links = _fast_links(links)
                    if links is None:
                        return None
                if rank is not None and (type(rank) is not int or not 0 <= rank <= MAX_U64):
                    return None
                append((flow, job, src, dst, seq, rates, links, rank))
        else:
            for d in flows:
                if type(d) is not dict:
                    return None
                flow, src, dst = d["flow"], d["src"], d["dst"]
                links, job, rank, arr = d.get("links"), d.get("job"), d.get("rank"), d.get("arrival", False)
                if (len(d) != 3 + ("links" in d) + ("job" in d) + ("rank" in d) + ("arrival" in d)
                        or type(arr) is not bool
                        or type(flow) is not str or not 0 < len(flow) <= MAX_STR
                        or type(src) is not str or not 0 < len(src) <= MAX_STR
                        or type(dst) is not str or not 0 < len(dst) <= MAX_STR):
                    return None
                if job is not None and (type(job) is not str or not 0 < len(job) <= MAX_STR):
                    return None
                if links is not None:
                    links = _fast_links(links)
                    if links is None:
                        return None
                if rank is not None and (type(rank) is not int or not 0 <= rank <= MAX_U64):
                    return None
                append((flow, src, dst, links, job, rank, arr))
    except (KeyError, TypeError):  # a missing field, or an unhashable map key (cannot happen from msgpack)
        return None
    return t, rid, slot, host, out, v


def _fast_links(v: Any) -> tuple[str, ...] | None:
    if type(v) is not list or len(v) > MAX_LINKS:
        return None
    for x in v:
        if type(x) is not str or not 0 < len(x) <= MAX_STR:
            return None
    out = tuple(v)
    return out if len(set(out)) == len(out) else None


def _decode_request(m: dict[str, Any], k: int) -> Request:
    v = m.get("v")
    if type(v) is not int:
        raise WireError(Code.MALFORMED, "field v (version) must be an int")
    if v not in WIRE_VERSIONS:
        raise WireError(Code.UNKNOWN_VERSION, f"wire version {v} is not supported (this switch speaks "
                                              f"{' and '.join(map(str, WIRE_VERSIONS))})")
    t = m.get("type")
    if type(t) is not str:
        raise WireError(Code.MALFORMED, "field type must be a string")
    if t not in REQUEST_TYPES:
        raise WireError(Code.UNKNOWN_TYPE, f"unknown message type {t[:40]!r}")
    rid = _req_id(m)
    if rid is None:
        raise WireError(Code.MALFORMED, "field id must be an unsigned int")
    slot = m.get("slot")
    if type(slot) is not int or not 0 <= slot < 2**62:
        raise WireError(Code.MALFORMED, "field slot must be a non-negative int (absolute slot)")
    host = m.get("host")
    if host is not None:
        host = _str(host, "host")
    if t == "notify":
        allowed = _KEYS_NOTIFY
        items = _list(m.get("items"), "items", MAX_ITEMS)
        flows = tuple(_notify_item(x, i) for i, x in enumerate(items))
    else:
        allowed = _KEYS_FLOWS
        items = _list(m.get("flows"), "flows", MAX_ITEMS)
        if t == "update_schedule":
            flows = tuple(_sched_item(x, i, k) for i, x in enumerate(items))
        elif t == "fetch_feedback":
            flows = tuple(_query_item(x, i) for i, x in enumerate(items))
        elif t == "report_progress":
            flows = tuple(_progress_item(x, i) for i, x in enumerate(items))
        else:
            flows = tuple(_str(x, f"flows[{i}]") for i, x in enumerate(items))
    extra = m.keys() - allowed
    if extra:
        raise WireError(Code.MALFORMED, f"unknown fields {sorted(map(str, extra))[:5]}")
    return Request(t, rid, slot, host, flows, v)


_KEYS_FLOWS = frozenset({"v", "type", "id", "slot", "host", "flows"})
_KEYS_NOTIFY = frozenset({"v", "type", "id", "slot", "host", "items"})
_K_SCHED = frozenset({"flow", "job", "src", "dst", "seq", "rates_Bps", "links", "rank"})
_K_QUERY = frozenset({"flow", "src", "dst", "links", "job", "rank", "arrival"})
_K_PROG = frozenset({"flow", "job", "cum_bytes", "rate_Bps"})
_K_NOTE = frozenset({"to", "flow", "job", "F_bytes"})


def _str(v: Any, what: str) -> str:
    if type(v) is not str or not v or len(v) > MAX_STR:
        raise WireError(Code.MALFORMED, f"{what} must be a non-empty string of at most {MAX_STR} characters")
    return v


def _list(v: Any, what: str, limit: int) -> list:
    if type(v) is not list:
        raise WireError(Code.MALFORMED, f"{what} must be a list")
    if len(v) > limit:
        raise WireError(Code.OVERSIZED, f"{what} has {len(v)} entries > {limit}")
    return v


def _map(v: Any, what: str, keys: frozenset) -> dict:
    if type(v) is not dict:
        raise WireError(Code.MALFORMED, f"{what} must be a map")
    if not v.keys() <= keys:
        raise WireError(Code.MALFORMED, f"{what} has unknown fields {sorted(map(str, v.keys() - keys))[:5]}")
    return v


def _uint(v: Any, what: str, hi: int) -> int:
    if type(v) is not int or not 0 <= v <= hi:
        raise WireError(Code.MALFORMED, f"{what} must be an int within 0..{hi}")
    return v


def _opt_uint(v: Any, what: str) -> int | None:
    return None if v is None else _uint(v, what, MAX_U64)


def _rate(v: Any, what: str) -> float | int:
    tv = type(v)
    if tv is int:
        ok = 0 <= v <= MAX_RATE_Bps
    elif tv is float:
        ok = 0.0 <= v <= MAX_RATE_Bps  # False for NaN; inf is > MAX
    else:
        ok = False
    if not ok:
        raise WireError(Code.MALFORMED, f"{what} must be a finite rate within 0..{MAX_RATE_Bps} bytes/s")
    return v


def _links(v: Any, what: str) -> tuple[str, ...] | None:
    if v is None:
        return None
    lst = _list(v, what, MAX_LINKS)
    out = tuple(_str(x, what) for x in lst)
    if len(set(out)) != len(out):
        raise WireError(Code.MALFORMED, f"{what} repeats a link")
    return out


def _sched_item(x: Any, i: int, k: int) -> FlowSchedule:
    w = f"flows[{i}]"
    d = _map(x, w, _K_SCHED)
    rates = d.get("rates_Bps")
    if type(rates) is not list or len(rates) != k:
        raise WireError(Code.MALFORMED, f"{w}.rates_Bps must be a list of exactly K={k} rates")
    return FlowSchedule(_str(d.get("flow"), w + ".flow"), _str(d.get("job"), w + ".job"),
                        _str(d.get("src"), w + ".src"), _str(d.get("dst"), w + ".dst"),
                        _uint(d.get("seq"), w + ".seq", MAX_U64),
                        tuple(_rate(r, w + ".rates_Bps") for r in rates), _links(d.get("links"), w + ".links"),
                        _opt_uint(d.get("rank"), w + ".rank"))


def _query_item(x: Any, i: int) -> FlowQuery:
    w = f"flows[{i}]"
    d = _map(x, w, _K_QUERY)
    job = d.get("job")
    return FlowQuery(_str(d.get("flow"), w + ".flow"), _str(d.get("src"), w + ".src"),
                     _str(d.get("dst"), w + ".dst"), _links(d.get("links"), w + ".links"),
                     None if job is None else _str(job, w + ".job"), _opt_uint(d.get("rank"), w + ".rank"),
                     _bool(d.get("arrival", False), w + ".arrival"))


def _bool(v: Any, what: str) -> bool:
    if type(v) is not bool:
        raise WireError(Code.MALFORMED, f"{what} must be true or false")
    return v


def _progress_item(x: Any, i: int) -> FlowProgress:
    w = f"flows[{i}]"
    d = _map(x, w, _K_PROG)
    return FlowProgress(_str(d.get("flow"), w + ".flow"), _str(d.get("job"), w + ".job"),
                        _uint(d.get("cum_bytes"), w + ".cum_bytes", MAX_BYTES), _rate(d.get("rate_Bps"), w + ".rate_Bps"))


def _notify_item(x: Any, i: int) -> Notification:
    w = f"items[{i}]"
    d = _map(x, w, _K_NOTE)
    return Notification(_str(d.get("to"), w + ".to"), _str(d.get("flow"), w + ".flow"), _str(d.get("job"), w + ".job"),
                        _uint(d.get("F_bytes"), w + ".F_bytes", MAX_BYTES))


# ---------------------------------------------------------------------- replies (client side)


def decode_reply(frame: bytes, *, max_bytes: int = 16 * MAX_FRAME_BYTES) -> Reply:
    """Validate a reply frame from a switch. Raises only ``WireError``."""
    m = unpack_frame(frame, max_bytes, use_list=False)
    try:
        return _decode_reply(m)
    except (KeyError, TypeError, ValueError, AttributeError, OverflowError) as e:  # shape errors in nested fields
        raise WireError(Code.MALFORMED, f"bad reply ({type(e).__name__}: {str(e)[:80]})") from None


def _opt_int(v: Any, what: str) -> int | None:
    if v is None:
        return None
    if type(v) is not int:
        raise WireError(Code.MALFORMED, f"reply {what} must be an int")
    return v


def _decode_reply(m: dict[str, Any]) -> Reply:
    v = m.get("v")
    if type(v) is not int or v not in WIRE_VERSIONS:
        raise WireError(Code.UNKNOWN_VERSION, f"reply version {v!r} is not one of {WIRE_VERSIONS}")
    t = m.get("type")
    if t != "error" and t not in REQUEST_TYPES:
        raise WireError(Code.UNKNOWN_TYPE, f"unknown reply type {str(t)[:40]!r}")
    rid = _opt_int(m.get("id"), "id")
    status = _opt_int(m.get("status"), "status")
    if status is None:
        raise WireError(Code.MALFORMED, "reply has no status")
    slot_now = _opt_int(m.get("slot_now"), "slot_now")
    clock = m.get("t")
    if clock is not None and (type(clock) not in (float, int) or not math.isfinite(clock)):
        raise WireError(Code.MALFORMED, "reply t must be a finite number (the switch's clock)")
    clock = None if clock is None else float(clock)
    if t == "error":
        return Reply("error", rid, status, slot_now, message=str(m.get("msg", "")), version=v, t=clock)
    fs = tuple(int(x) for x in m.get("flow_status", ()))
    if t == "fetch_feedback":
        k = _opt_int(m.get("K"), "K")
        caps = m["caps"]
        if not (type(caps) is dict and set(map(type, caps)) <= {str} and set(map(type, caps.values())) <= {int}):
            raise WireError(Code.MALFORMED, "reply caps must map link ids to ints")
        fb = _feedback_v1(m["flows"], k) if v == 1 else _feedback_v2(m["flows"], m["loads_Bps"], k)
        if v != 1 and "job_Bps" in m and fb:
            fb = _job_view_v2(fb, m["job_Bps"], m.get("job_flows"), m.get("all_Bps"), k)
        notes = tuple(Notification(str(n["to"]), str(n["flow"]), str(n["job"]), int(n["F_bytes"]), int(n["slot"]),
                                   str(n["from"])) for n in m["notify"])
        return Reply(t, rid, status, slot_now, flow_status=fs, slot=_opt_int(m.get("slot"), "slot"),
                     slot_s=float(m["slot_s"]), horizon=k, capacities_Bps=caps, feedback=fb,
                     notifications=notes, version=v, t=clock)
    if t == "get_progress":
        prog = tuple(FlowProgress(str(p["flow"]), str(p["job"]), int(p["cum_bytes"]), float(p["rate_Bps"]),
                                  int(p["slot"]), str(p["host"])) for p in m["progress"])
        return Reply(t, rid, status, slot_now, flow_status=fs, progress=prog, version=v, t=clock)
    return Reply(t, rid, status, slot_now, flow_status=fs, version=v, t=clock)


def _feedback_v1(flows: Any, k: int | None) -> tuple[FlowFeedback, ...]:
    """Version 1's feedback: a map per flow with its rows as msgpack arrays of ints."""
    fb, heads, names, rows, lens, ints = [], set(), set(), set(), set(), set()
    for f in flows:
        x = FlowFeedback(f["flow"], f["status"], f["links"], f["load_Bps"], f["path_Bps"])
        jb, jn, ja = f.get("job_Bps", ()), f.get("job_flows", ()), f.get("all_Bps", ())
        if jb or jn or ja:  # the job's view (a switch that does not send it leaves them out)
            if not (type(jb) is tuple and type(jn) is tuple and type(ja) is tuple
                    and len(jb) == len(jn) == len(x.links) and len(ja) in (0, len(x.links))):
                raise WireError(Code.MALFORMED, "reply job_Bps, job_flows and all_Bps need a row per link")
            for part in (jb, jn, ja):
                rows.update(map(type, part))
                lens.update(map(len, part))
                ints.update(map(type, chain.from_iterable(part)))
            x = x._replace(job_Bps=jb, job_flows=jn, all_Bps=ja)
        heads.add((*map(type, x[:5]), len(x.links) == len(x.load_Bps)))
        names.update(map(type, x.links))
        rows.update(map(type, x.load_Bps))
        lens.update(map(len, x.load_Bps))
        ints.update(map(type, x.path_load_Bps))
        ints.update(map(type, chain.from_iterable(x.load_Bps)))
        fb.append(x)
    # the types are checked once for all flows (the rows stay the tuples msgpack made)
    if not (heads <= {(str, int, tuple, tuple, tuple, True)} and names <= {str} and rows <= {tuple}):
        raise WireError(Code.MALFORMED, "reply flows need a str flow id, an int status, str links and a row "
                                        "of loads per link")
    if k is not None and not lens <= {k}:
        raise WireError(Code.MALFORMED, "reply load_Bps rows must have K values")
    if not ints <= {int}:
        raise WireError(Code.MALFORMED, "reply load_Bps and path_Bps values must be ints")
    return tuple(fb)


_feedback = functools.partial(tuple.__new__, FlowFeedback)  # FlowFeedback(*fields) without its Python __new__


def _unpack_loads(packed: bytes, what: str) -> tuple[array, list[int]]:
    """A packed int64 array of a reply (little-endian) as an array and a list, each value checked to be in
    0..MAX_LOAD_Bps (a non-empty array)."""
    vals = array("q")
    vals.frombytes(packed)
    if _BIG_ENDIAN:
        vals.byteswap()
    v = vals.tolist()
    if min(v) < 0 or max(v) > MAX_LOAD_Bps:
        raise WireError(Code.MALFORMED, f"reply {what} values must be in 0..{MAX_LOAD_Bps}")
    return vals, v


def _job_view_v2(fb: tuple[FlowFeedback, ...], loads: Any, counts: Any, alls: Any,
                 k: int | None) -> tuple[FlowFeedback, ...]:
    """Version 2's job view: ``job_Bps`` and ``job_flows`` packed as ``loads_Bps`` (a row per link of each
    flow, in order); attached to each flow's feedback."""
    nrows = sum(len(f.links) for f in fb)
    if type(loads) is not bytes or type(counts) is not bytes or k is None \
            or len(loads) != nrows * k * 8 or len(counts) != nrows * k * 8:
        raise WireError(Code.MALFORMED, f"reply job_Bps and job_flows must be bytes of {nrows} rows of K int64 values")
    if not nrows:
        return fb
    if alls is not None and (type(alls) is not bytes or len(alls) != nrows * k * 8):
        raise WireError(Code.MALFORMED, f"reply all_Bps must be bytes of {nrows} rows of K int64 values")
    jl = iter(list(zip(*[iter(_unpack_loads(loads, "job_Bps")[1])] * k)))
    jn = iter(list(zip(*[iter(_unpack_loads(counts, "job_flows")[1])] * k)))
    ja = iter(list(zip(*[iter(_unpack_loads(alls, "all_Bps")[1])] * k))) if alls is not None else None
    return tuple(f._replace(job_Bps=tuple(islice(jl, len(f.links))), job_flows=tuple(islice(jn, len(f.links))),
                            all_Bps=tuple(islice(ja, len(f.links))) if ja is not None else ())
                 if f.links else f for f in fb)


def _feedback_v2(flows: Any, loads: Any, k: int | None) -> tuple[FlowFeedback, ...]:
    """Version 2's feedback: ``[flow, status, links]`` per flow and one packed array of rows. The rows
    become tuples of ints, as in version 1; a flow's path load is the sum of its rows (K zeros when
    the switch owns no link of its path; empty for a refused flow)."""
    if type(flows) is not tuple or type(loads) is not bytes or k is None or k < 1:
        raise WireError(Code.MALFORMED, "reply flows must be an array, loads_Bps bytes and K a positive int")
    if flows and not (set(map(type, flows)) == {tuple} and set(map(len, flows)) == {3}):
        raise WireError(Code.MALFORMED, "reply flows must be [flow, status, links] each")
    fids, sts, lks = zip(*flows) if flows else ((), (), ())
    if not (set(map(type, fids)) <= {str} and set(map(type, sts)) <= {int} and set(map(type, lks)) <= {tuple}
            and set(map(type, chain.from_iterable(lks))) <= {str}):
        raise WireError(Code.MALFORMED, "reply flows need a str flow id, an int status and str links")
    n = list(map(len, lks))
    nrows = sum(n)
    if len(loads) != nrows * k * 8:
        raise WireError(Code.MALFORMED, f"reply loads_Bps has {len(loads)} bytes, not {nrows} rows of K = {k} "
                                        "int64 values")
    if not nrows:
        return tuple(FlowFeedback(f, s, (), (), () if s else (0,) * k) for f, s in zip(fids, sts))
    vals, v = _unpack_loads(loads, "loads_Bps")  # (numpy only for path sums: for a few rows it costs more)
    rows = list(zip(*[iter(v)] * k))
    if n.count(1) == len(n):  # one link per flow (a single switch): the path is the row
        return tuple(map(_feedback, zip(fids, sts, lks, [(r,) for r in rows], rows, repeat(()), repeat(()),
                                        repeat(()))))
    a = np.array(vals, dtype=np.int64).reshape(nrows, k)
    starts = [o for o, c in zip(accumulate(n, initial=0), n) if c]
    sums = iter(map(tuple, np.add.reduceat(a, starts).tolist()))  # one per flow with links, in order
    it, zero = iter(rows), (0,) * k
    per = [tuple(islice(it, c)) for c in n]
    paths = [next(sums) if c else () if st else zero for st, c in zip(sts, n)]
    return tuple(map(_feedback, zip(fids, sts, lks, per, paths, repeat(()), repeat(()), repeat(()))))
