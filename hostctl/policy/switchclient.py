"""Client of the emulated switches (``switchemu``), for the daemon's per-slot exchange.

One DEALER socket per switch endpoint. ``exchange()`` sends one ZeroMQ message per switch carrying
all of this host's requests for the slot (update_schedule, fetch_feedback, and optionally
report_progress / get_progress / notify, each batching every flow), then waits for the replies until
a deadline, and returns whatever arrived. It never blocks past ``timeout_s``: sends are non-blocking
(a switch that is down or still connecting is reported as an error for this slot, not waited for),
replies are matched by request id and late replies of earlier slots are dropped. Reconnection after a
switch restart is ZeroMQ's (no REQ lockstep to break).

Routing: with a ``topology`` and endpoints keyed by switch name, each flow's update / fetch goes to
the switches owning a link on its path, and a notification to the switch owning the last link towards
its receiver (the receiver's ToR). Otherwise every request goes to every endpoint (one switch, or
``switchemu --name all``). Progress reports go to every endpoint (the switches are rendezvous points).
"""

from __future__ import annotations

import itertools
import logging
import math
import operator
import os
import random
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import msgpack
import zmq

from hostctl.core import wire
from hostctl.core.topology import Topology, path_order
from hostctl.core.wire import Code, Reply, Request, WireError
from hostctl.errors import ConfigError, HostctlError

log = logging.getLogger("hostctl")


@dataclass(frozen=True)
class CurveClientKeys:
    public: bytes
    secret: bytes
    server_public: bytes

    @classmethod
    def from_dir(cls, d: str, client: str | None = None) -> CurveClientKeys:
        """A host's CURVE keys: ``d`` is a folder holding the switch's ``server.key`` and this host's
        ``NAME.key_secret`` (``client.key_secret``, else the only ``*.key_secret`` there but the
        server's; ``client`` names it), or the path of that ``NAME.key_secret``, with ``server.key``
        beside it (``switchemu keygen DIR --client NAME --client-only`` writes the pair)."""
        import zmq.auth

        if d.endswith(".key_secret") and os.path.isfile(d):
            d, client = os.path.dirname(d) or ".", os.path.basename(d)[:-len(".key_secret")]
        if not os.path.isdir(d):
            raise ConfigError(f"--curve-keys {d}: no such folder (the folder with server.key and this host's "
                              "NAME.key_secret, or that file's path)")
        if client is None:
            mine = sorted(f[:-len(".key_secret")] for f in os.listdir(d)
                          if f.endswith(".key_secret") and f != "server.key_secret")
            if "client" in mine or len(mine) == 1:
                client = "client" if "client" in mine else mine[0]
            elif not mine:
                raise ConfigError(f"--curve-keys {d}: no client key (NAME.key_secret) there: run switchemu keygen {d} "
                                  "--client NAME --client-only on this host, then authorize NAME.key on the switch")
            else:
                raise ConfigError(f"--curve-keys {d}: several client keys ({', '.join(mine)}): give the file, "
                                  f"--curve-keys {d}/NAME.key_secret")
        try:
            pub, sec = zmq.auth.load_certificate(os.path.join(d, f"{client}.key_secret"))
            spub, _ = zmq.auth.load_certificate(os.path.join(d, "server.key"))
        except (OSError, ValueError) as e:
            raise ConfigError(f"--curve-keys {d}: needs {client}.key_secret and the switch's server.key ({e}): "
                              f"see switchemu keygen") from None
        if sec is None:
            raise ConfigError(f"{d}/{client}.key_secret holds no secret key: see switchemu keygen")
        return cls(pub, sec, spub)


@dataclass(slots=True)
class FlowLoads:
    """Feedback for one flow, merged over the switches on its path (bytes/s, K slots)."""

    flow_id: str
    load_Bps: dict[str, Sequence[int]] = field(default_factory=dict)  # link id -> K loads, own flow excluded
    path_load_Bps: tuple[int, ...] = ()  # sum over the links above
    complete: bool = True  # False if a switch on the path did not answer or reported an error
    # the asking job's view (a switch that does not send it leaves them empty): link id -> K values
    job_Bps: dict[str, Sequence[int]] = field(default_factory=dict)  # the job's load from other hosts
    job_flows: dict[str, Sequence[int]] = field(default_factory=dict)  # its flows with a rate > 0, per slot
    all_Bps: dict[str, Sequence[int]] = field(default_factory=dict)  # every flow that other hosts send


@dataclass
class ExchangeResult:
    slot: int
    feedback: dict[str, FlowLoads] = field(default_factory=dict)
    capacities_Bps: dict[str, int] = field(default_factory=dict)
    notifications: list[wire.Notification] = field(default_factory=list)
    progress: dict[str, wire.FlowProgress] = field(default_factory=dict)
    flow_status: dict[str, int] = field(default_factory=dict)  # non-zero statuses of updates/fetches by flow
    latency_s: dict[str, float] = field(default_factory=dict)  # endpoint -> round trip
    slot_now: dict[str, int] = field(default_factory=dict)  # endpoint -> the switch's slot
    errors: dict[str, str] = field(default_factory=dict)  # endpoint -> what went wrong
    error_codes: dict[str, int] = field(default_factory=dict)  # endpoint -> wire code of a rejected frame
    # endpoint -> the switch's clock minus this host's (time.time()) at the round trip's midpoint, seconds
    # (within half the round trip); only from switches that send their clock (``t`` in every reply)
    clock_offset_s: dict[str, float] = field(default_factory=dict)

    @property
    def ok(self) -> bool:
        return not self.errors

    @property
    def answered(self) -> list[str]:
        """The endpoints that answered every request frame of this exchange in time and refused none
        (an error reply, such as a refused slot, is an answer that tells nothing: silence)."""
        return [ep for ep in self.latency_s if ep not in self.errors]

    @property
    def max_latency_s(self) -> float | None:
        return max(self.latency_s.values()) if self.latency_s else None


@dataclass
class ProbeResult:
    latency_s: float = 0.0
    slot_now: int | None = None
    slot_s: float | None = None
    horizon: int | None = None
    error: str | None = None
    version: int | None = None  # the wire version the switch answered in
    clock_offset_s: float | None = None  # the switch's clock minus this host's (None: an older switch)


class SwitchClient:
    """DEALER client for one or several switchemu endpoints (see the module docstring)."""

    def __init__(self, endpoints: Sequence[str] | Mapping[str, str], *, host: str | None = None,
                 topology: Topology | None = None, curve: CurveClientKeys | None = None,
                 horizon: int = 10, context: zmq.Context | None = None):
        if isinstance(endpoints, Mapping):
            self.by_switch = dict(endpoints)
            eps = list(dict.fromkeys(self.by_switch.values()))
        else:
            self.by_switch = {}
            eps = list(dict.fromkeys(endpoints))
        if not eps:
            raise ConfigError("no switch endpoints given")
        if topology is not None and not self.by_switch:
            raise ConfigError("routing by topology needs endpoints keyed by switch name")
        self.host = host
        self.topo = topology
        self.horizon = horizon
        self.endpoints = eps
        self._own_ctx = context is None
        self.ctx = context or zmq.Context()
        self._ids = itertools.count(random.getrandbits(40))
        self.late_replies = 0  # replies that arrived after their exchange gave up
        self._merged: set[str] = set()  # this exchange's flows with links from more than one switch
        # the wire version spoken to each endpoint: the newest, until a switch answers unknown_version
        self.version = dict.fromkeys(eps, wire.WIRE_VERSION)
        self.socks: dict[str, zmq.Socket] = {}
        for ep in eps:
            s = self.ctx.socket(zmq.DEALER)
            s.linger = 0
            s.setsockopt(zmq.IMMEDIATE, 1)  # no queueing towards a switch that is not connected
            s.setsockopt(zmq.SNDHWM, 64)
            s.setsockopt(zmq.RCVHWM, 256)
            s.setsockopt(zmq.RECONNECT_IVL, 50)
            s.setsockopt(zmq.RECONNECT_IVL_MAX, 1000)
            s.setsockopt(zmq.HEARTBEAT_IVL, 1000)
            s.setsockopt(zmq.HEARTBEAT_TIMEOUT, 3000)
            if curve is not None:
                s.curve_publickey = curve.public
                s.curve_secretkey = curve.secret
                s.curve_serverkey = curve.server_public
            self.socks[ep] = s
            try:
                s.connect(ep)
            except (zmq.ZMQError, UnicodeError) as e:  # malformed, not UTF-8, or an ipc path over 107 bytes
                self.close()
                why = e.strerror if isinstance(e, zmq.ZMQError) else "not UTF-8 text"
                raise ConfigError(f"cannot connect to switch endpoint {ep!r}: {why}: give tcp://HOST:PORT "
                                  "or ipc://PATH (at most 107 bytes)") from None
        self.poller = zmq.Poller()
        self._sock_ep = {}
        for ep, s in self.socks.items():
            self.poller.register(s, zmq.POLLIN)
            self._sock_ep[s] = ep

    def close(self) -> None:
        for s in self.socks.values():
            s.close(0)
        self.socks.clear()
        if self._own_ctx:
            self.ctx.term()

    def __enter__(self) -> SwitchClient:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    # ------------------------------------------------------------------ routing

    def _eps_for_path(self, src: str, dst: str, links: tuple[str, ...] | None) -> list[str]:
        if self.topo is None:
            return self.endpoints
        t = self.topo
        idx = [t.link_index[x] for x in links] if links is not None else t.path(src, dst)
        return list(dict.fromkeys(self.by_switch[t.links[i].src] for i in idx if t.links[i].src in self.by_switch))

    def _eps_for_receiver(self, to_host: str) -> list[str]:
        if self.topo is None or self.host is None:
            return self.endpoints
        path = self.topo.path(self.host, to_host)
        if not path:
            return self.endpoints
        owner = self.topo.links[path[-1]].src
        return [self.by_switch[owner]] if owner in self.by_switch else self.endpoints

    # ------------------------------------------------------------------ exchange

    def exchange(self, slot: int, *, updates: Sequence[wire.FlowSchedule] = (),
                 fetches: Sequence[wire.FlowQuery] = (), progress: Sequence[wire.FlowProgress] = (),
                 get_progress: Sequence[str] = (), notify: Sequence[wire.Notification] = (),
                 timeout_s: float = 0.02) -> ExchangeResult:
        """One round trip per switch for this slot; returns by ``timeout_s`` at the latest.

        Request frames per switch, in this order: update_schedule, report_progress, notify,
        fetch_feedback, get_progress (so a fetch already sees this host's own new schedules and the
        others' reported progress)."""
        deadline = time.monotonic() + timeout_s
        per_ep: dict[str, dict[str, list]] = {ep: {} for ep in self.endpoints}
        routed = self.topo is not None  # else every request goes to every endpoint

        def add(kind: str, items: Sequence, eps_of: Callable[[Any], list[str]] | None) -> None:
            if eps_of is None:
                for kinds in per_ep.values():
                    kinds[kind] = list(items)
                return
            for x in items:
                for ep in eps_of(x):
                    per_ep[ep].setdefault(kind, []).append(x)

        if updates:
            add("update_schedule", updates, (lambda u: self._eps_for_path(u.src, u.dst, u.links)) if routed else None)
        if progress:
            add("report_progress", progress, None)
        if notify:
            add("notify", notify, (lambda n: self._eps_for_receiver(n.to_host))
                if routed and self.host is not None else None)
        if fetches:
            add("fetch_feedback", fetches, (lambda f: self._eps_for_path(f.src, f.dst, f.links)) if routed else None)
        elif self.host is not None:  # still pick up notifications
            add("fetch_feedback", (), None)
        if get_progress:
            add("get_progress", get_progress, None)

        res = ExchangeResult(slot)
        self._merged.clear()
        self._drain_late()
        pending: dict[str, dict[int, tuple]] = {}
        sent_at: dict[str, tuple[float, float]] = {}  # endpoint -> (monotonic, wall) when its message went
        for ep, kinds in per_ep.items():
            if not kinds:
                continue
            frames, ids = self._frames(kinds, slot, self.version[ep])
            for i in range(0, len(frames), wire.MAX_PARTS):
                try:
                    self.socks[ep].send_multipart(frames[i:i + wire.MAX_PARTS], zmq.NOBLOCK)
                except zmq.Again:
                    res.errors[ep] = "not connected (switch down or still connecting)"
                    break
            else:
                pending[ep] = ids
                sent_at[ep] = (time.monotonic(), time.time())
        self._collect(res, pending, sent_at, deadline)
        for ep in pending:
            if pending[ep]:
                res.errors.setdefault(ep, f"timeout after {timeout_s * 1000:g} ms")
        self._mark_incomplete(res)
        self._path_order(res)
        return res

    def _path_order(self, res: ExchangeResult) -> None:
        """A flow's links from several switches in the order of its path, not the order the replies
        came in (the same path every slot; `hostctl status` shows it)."""
        for fid in self._merged:
            fl = res.feedback[fid]
            came = list(fl.load_Bps)
            order = path_order(came)
            if order != came:
                for name in ("load_Bps", "job_Bps", "job_flows", "all_Bps"):
                    d = getattr(fl, name)
                    if d:
                        setattr(fl, name, {lid: d[lid] for lid in order if lid in d})

    def _frames(self, kinds: Mapping[str, Sequence], slot: int, v: int) -> tuple[list[bytes], dict[int, tuple]]:
        """One endpoint's request frames for the slot, in the order the switch applies them (update_schedule,
        report_progress, notify, fetch_feedback, get_progress), at most MAX_ITEMS items each; and each
        frame's request id -> its items."""
        frames, ids = [], {}
        for kind in ("update_schedule", "report_progress", "notify", "fetch_feedback", "get_progress"):
            items = kinds.get(kind)
            if items is None:
                continue
            for i in range(0, max(1, len(items)), wire.MAX_ITEMS):
                rid = next(self._ids)
                chunk = tuple(items[i:i + wire.MAX_ITEMS])
                ids[rid] = chunk
                frames.append(wire.encode_request(Request(kind, rid, slot, self.host, chunk, v)))
        return frames, ids

    def _drain_late(self) -> None:
        for s in self.socks.values():
            while True:
                try:
                    s.recv_multipart(zmq.NOBLOCK)
                except zmq.Again:
                    break
                self.late_replies += 1

    def _collect(self, res: ExchangeResult, pending: dict[str, dict[int, tuple]],
                 sent_at: dict[str, tuple[float, float]], deadline: float) -> None:
        while any(pending.values()):
            left_ms = (deadline - time.monotonic()) * 1000.0
            if left_ms <= 0:
                return
            for sock, _ in self.poller.poll(math.ceil(left_ms)):
                ep = self._sock_ep[sock]
                while True:
                    try:
                        parts = sock.recv_multipart(zmq.NOBLOCK)
                    except zmq.Again:
                        break
                    clock = None
                    for frame in parts:
                        clock = self._take(res, ep, frame, pending.get(ep, {})) or clock
                    if clock is not None:  # NTP's estimate: the switch read it halfway through the round trip
                        res.clock_offset_s[ep] = clock - (sent_at[ep][1] + time.time()) / 2
                    if ep in pending and not pending[ep]:
                        res.latency_s[ep] = time.monotonic() - sent_at[ep][0]

    def _take(self, res: ExchangeResult, ep: str, frame: bytes, pend: dict[int, tuple]) -> float | None:
        """Merge one reply frame of ``ep`` into ``res``; the switch's clock if it is a reply to this
        exchange that carries one."""
        try:
            r = wire.decode_reply(frame)
        except WireError as e:
            res.errors[ep] = f"bad reply: {e}"
            return None
        if r.req_id not in pend:
            self.late_replies += 1
            return None
        items = pend.pop(r.req_id)
        if r.slot_now is not None:
            res.slot_now[ep] = r.slot_now
        if r.type == "error":
            self._fall_back(ep, r)
            res.errors[ep] = f"{Code(r.status).name.lower() if r.status in Code._value2member_map_ else r.status}: {r.message}"
            res.error_codes[ep] = r.status
            return r.t
        if r.flow_status and r.type in ("update_schedule", "report_progress", "notify"):
            for item, code in zip(items, r.flow_status):
                if code:
                    res.flow_status[item.flow_id] = code
        self._merge(res, r)
        return r.t

    def _merge(self, res: ExchangeResult, r: Reply) -> None:
        if r.type == "fetch_feedback":
            res.capacities_Bps.update(r.capacities_Bps)
            res.notifications.extend(r.notifications)
            got = res.feedback
            if not got and r.feedback:  # the first switch to answer: if every flow is ok, all of them are new
                ids, sts, links, loads, paths, jl, jn, ja = zip(*r.feedback)
                if not any(sts):
                    got.update(zip(ids, map(FlowLoads, ids, map(dict, map(zip, links, loads)), paths,
                                            itertools.repeat(True), map(dict, map(zip, links, jl)),
                                            map(dict, map(zip, links, jn)), map(dict, map(zip, links, ja)))))
                    return
            for f in r.feedback:
                fl = got.get(f.flow_id)
                if f.status:
                    if fl is None:
                        fl = got[f.flow_id] = FlowLoads(f.flow_id, path_load_Bps=(0,) * self.horizon)
                    fl.complete = False
                    res.flow_status[f.flow_id] = f.status
                elif fl is None:  # the first switch to answer for the flow (with one switch: the only one)
                    got[f.flow_id] = FlowLoads(f.flow_id, dict(zip(f.links, f.load_Bps)), f.path_load_Bps, True,
                                               dict(zip(f.links, f.job_Bps)), dict(zip(f.links, f.job_flows)),
                                               dict(zip(f.links, f.all_Bps)))
                else:  # another switch on the path: its links, and the path sums added
                    self._merged.add(f.flow_id)
                    fl.load_Bps.update(zip(f.links, f.load_Bps))
                    fl.job_Bps.update(zip(f.links, f.job_Bps))
                    fl.job_flows.update(zip(f.links, f.job_flows))
                    fl.all_Bps.update(zip(f.links, f.all_Bps))
                    if len(fl.path_load_Bps) != len(f.path_load_Bps):
                        fl.path_load_Bps = (0,) * len(f.path_load_Bps)
                    fl.path_load_Bps = tuple(map(operator.add, fl.path_load_Bps, f.path_load_Bps))
        elif r.type == "get_progress":
            for p in r.progress:
                old = res.progress.get(p.flow_id)
                if old is None or p.slot >= old.slot:
                    res.progress[p.flow_id] = p

    def _mark_incomplete(self, res: ExchangeResult) -> None:
        if not res.errors:
            return
        for fl in res.feedback.values():
            fl.complete = False

    # ------------------------------------------------------------------ probe

    def _fall_back(self, ep: str, r: Reply) -> bool:
        """On an older switch's unknown_version error, speak version 1 to ``ep`` from now on (logged
        once); True if this reply made the change."""
        if r.type != "error" or r.status != Code.UNKNOWN_VERSION or self.version[ep] == 1:
            return False
        self.version[ep] = 1
        log.warning("switch %s does not speak wire version %d: speaking version 1 to it (upgrade "
                    "switchemu for smaller replies)", ep, wire.WIRE_VERSION)
        return True

    def probe(self, slot_s: float = 0.06, timeout_s: float = 2.0) -> ProbeResult:
        """One fetch_feedback round trip to the first endpoint (waits for the connection within the
        timeout). Retries once with the switch's own slot if the slot was refused (other slot length),
        and once in version 1 if the switch does not speak this client's version."""
        ep = self.endpoints[0]
        sock = self.socks[ep]
        deadline = time.monotonic() + timeout_s
        slot = int(time.time() // slot_s)
        for _ in range(3):
            rid = next(self._ids)
            frame = wire.encode_request(Request("fetch_feedback", rid, slot, None, (), self.version[ep]))
            if not self._send_by(sock, frame, deadline):
                return ProbeResult(error="could not connect")
            t0, w0 = time.monotonic(), time.time()
            r = self._await(sock, rid, deadline)
            if r is None:
                return ProbeResult(error="timeout")
            lat = time.monotonic() - t0
            off = None if r.t is None else r.t - (w0 + time.time()) / 2
            if r.type == "error" and r.status in (Code.STALE_SLOT, Code.FUTURE_SLOT) and r.slot_now is not None:
                slot = r.slot_now
                continue
            if self._fall_back(ep, r):
                continue
            if r.type == "error":
                return ProbeResult(lat, r.slot_now, error=f"error reply {r.status}: {r.message}", clock_offset_s=off)
            return ProbeResult(lat, r.slot_now, r.slot_s, r.horizon, version=r.version, clock_offset_s=off)
        return ProbeResult(error="slot or version refused three times")

    @staticmethod
    def _send_by(sock: zmq.Socket, frame: bytes, deadline: float) -> bool:
        """Send one frame, retrying while the socket is not connected yet; False if the deadline passed."""
        while True:
            try:
                sock.send_multipart([frame], zmq.NOBLOCK)
                return True
            except zmq.Again:
                if time.monotonic() >= deadline:
                    return False
                time.sleep(0.005)

    def status(self, timeout_s: float = 2.0, reset_booking: bool = False) -> dict:
        """The first endpoint's status (``switchemu status``; ``SwitchState.status`` in switchemu/server.py,
        docs/switchemu.md): the switch, its table and the booking of its links. ``reset_booking`` starts
        the booking over after reading it. HostctlError if there is no answer within ``timeout_s`` or an
        error reply (a switchemu that predates status answers unknown_type)."""
        ep = self.endpoints[0]
        sock = self.socks[ep]
        deadline = time.monotonic() + timeout_s
        rid = next(self._ids)
        req: dict[str, Any] = {"v": 1, "type": "status", "id": rid}
        if reset_booking:
            req["reset_booking"] = True
        frame = msgpack.packb(req, use_bin_type=True)
        if not self._send_by(sock, frame, deadline):
            raise HostctlError(f"cannot connect to {ep} within {timeout_s:g} s: is switchemu running "
                               "there, with matching --curve-keys?")
        while True:
            left = deadline - time.monotonic()
            if left <= 0 or not sock.poll(max(1, int(left * 1000))):
                if time.monotonic() >= deadline:
                    raise HostctlError(f"no status from {ep} within {timeout_s:g} s: is switchemu running there, "
                                       "with matching --curve-keys?")
                continue
            for part in sock.recv_multipart():
                try:
                    m = msgpack.unpackb(part, raw=False)
                except (ValueError, msgpack.UnpackException):
                    continue
                if not isinstance(m, dict) or m.get("id") != rid:
                    self.late_replies += 1
                    continue
                if m.get("type") == "status" and isinstance(m.get("switch_status"), dict):
                    return m["switch_status"]
                if m.get("status") == Code.UNKNOWN_TYPE:
                    raise HostctlError(f"{ep} does not answer status requests: it runs a switchemu from before "
                                       "'switchemu status'")
                raise HostctlError(f"{ep} answered the status request with error {m.get('status')}: "
                                   f"{m.get('msg', '')}")

    def _await(self, sock: zmq.Socket, rid: int, deadline: float) -> Reply | None:
        while True:
            left = deadline - time.monotonic()
            if left <= 0:
                return None
            if not sock.poll(max(1, int(left * 1000))):
                continue
            for frame in sock.recv_multipart():
                try:
                    r = wire.decode_reply(frame)
                except WireError:
                    continue
                if r.req_id == rid:
                    return r
                self.late_replies += 1
