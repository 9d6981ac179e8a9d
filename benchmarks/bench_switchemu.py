"""switchemu scale benchmark (docs/switchemu.md): one real switchemu process, emulated daemons over TCP.

(a) 64 emulated daemons, each doing one update_schedule + fetch_feedback round trip per 60 ms slot
    (both frames in one ZeroMQ message): p50/p90/p99 round-trip latency.
(b) 1000 emulated daemons, same per-slot exchange, against one switchemu: p99 latency, switchemu CPU %
    (from /proc/PID/stat), request frames per second, whether it keeps up (>= 98% of the exchanges
    answered, <= 1% late or lost, <= 1% answered with an error such as stale_slot, and no latency growth
    from the first to the last third of the run).
(c) ``--only c``: several switch processes, the Lingjun racks (only when asked for). One real switchemu
    process per switch (``--name SWITCH``, each on its own loopback port) of the Alibaba Lingjun 2023
    topology (../shared/data/lingjun-2023/topo.csv, Apache-2.0: 847 hosts, 119 ToRs ``PSW.ASW`` under 3
    aggregation switches under 1 core, read as switchemu reads it). What is modelled:
    * hosts: up to 847 daemons, the first hosts in rack order (racks sorted by core, aggregation switch,
      ASW number; the last rack cut short); above, every rack with its host count scaled by N / 847
      (largest remainder): 1000 daemons are 119 racks of 2-10 hosts (an 8-host rack has 9 or 10);
      ``--racks R``: the first R racks, scaled;
    * traffic: jobs of ``--job-hosts`` (32) consecutive hosts in rack order (a locality-aware placement),
      each host's daemon with one flow to the next host of its job (ring all-reduce; the last closes the
      ring), one update_schedule + fetch_feedback per 60 ms slot as in (b);
    * routing as ``SwitchClient`` with a topology: the exchange goes, the same message back to back, to
      every switch owning a link of the flow's up-down path: the ToR inside a rack; ToR, aggregation switch,
      ToR across racks; and the core switch and both aggregation switches across pods (the daemon's own
      NIC link is its local table). One DEALER connection per daemon and switch. A switch no flow crosses
      gets no process (at 1000 daemons all 123 have one).
    Not modelled: several flows per host, PS jobs, notify / progress frames, real daemons' CPU.
    Per switch process: p50/p99 round trip of its exchanges, CPU % (/proc/PID/stat every 0.25 s, the
    window in which all generators send; the scheduler's own clock as a cross-check), request frames and
    messages per second (its counters), answered / late / error fractions and (b)'s keep-up criteria per
    process; totals: whole exchanges (every switch of the flow answered), the switches', generators' and
    the rest of the machine's CPU, and the idle switches' CPU before the load. ``--one-process`` adds the
    same fleet against one ``switchemu --name all``. ``--search``: the largest fleet that keeps up on this
    machine (every switch process meets the criteria): --daemons, x2, x4 ... until one does not, then
    bisection (halving from --daemons if that one does not), no step started past --search-budget-s; the
    generators run on the same cores, so their CPU is reported per exchange with every step.

Load generator. ``--workers`` processes (default 2) share the daemons h0..h999; each daemon is one
DEALER connection of its own and sends one message [update_schedule, fetch_feedback] per 60 ms slot
at its own random phase, with a real request id, slot, seq and K random rates. The generators are built
to cost as little CPU as possible, because on a small machine they compete with the switch:

* Frames are prepared per daemon at start-up (``DaemonFrames``: the request maps as
  ``wire.encode_request`` builds them and 8 random rate vectors); per exchange only id, slot, seq and
  the rate vector (drawn at random) are patched in and the maps packed with msgpack. The bytes are those
  of the old per-exchange path, ``exchange_frames`` (tests/unit/test_switchemu_gen.py).
* Replies are unpacked with msgpack and only type, status and request id read; in (a) every reply and
  in (b) every ``--validate-every``-th one (default 50) is fully validated with ``wire.decode_reply``.
* ``--transport zmtp`` (default): the DEALER peers speak ZMTP 3.0 (NULL mechanism, as libzmq's DEALER
  does) over plain TCP sockets, all in one thread per process with one epoll, so an exchange costs one
  send() and one recv() system call and no hand-offs to and from a libzmq I/O thread. While sending,
  the generator wakes once per send tick (the sends due within ~1 ms go out together) and collects the
  replies that have arrived; a reply's receive time is the kernel's timestamp of its arrival
  (SO_TIMESTAMPNS), so the round trip does not include the generator's own sleep. ``zmtp-event`` wakes
  for every reply instead; ``pyzmq`` uses pyzmq DEALER sockets (polling only those waiting for a
  reply, receive time taken on wake-up), as this benchmark did before 2026-11-23 21:00 UTC.

The report gives the generators' CPU per exchange (all their threads), the switch's CPU and the frame
rate over the window in which all generators send (sampled every 0.25 s), the CPU the rest of the
(shared) machine used in that window, and a timeline per 0.5 s (exchanges, error replies, p50, p99).

    nice -n 5 .venv/bin/python benchmarks/bench_switchemu.py --out docs/results/switchemu.json [--quick]
    nice -n 5 .venv/bin/python benchmarks/bench_switchemu.py --quick --only b --workers 3 --transport pyzmq
    nice -n 5 .venv/bin/python benchmarks/bench_switchemu.py --only c --search --one-process \
        --out docs/results/switchemu_fleet.json
"""

from __future__ import annotations

import argparse
import gc
import heapq
import ipaddress
import json
import math
import os
import platform
import random
import re
import signal
import socket
import struct
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request

SWITCHEMU = os.path.join(sys.prefix, "bin", "switchemu")
SLOT_S = 0.06
K = 10
CLK_TCK = os.sysconf("SC_CLK_TCK")


def cpu_s(pid: int | str = "self") -> float:
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / CLK_TCK  # utime + stime


def machine_busy_s() -> float:
    """CPU seconds the whole machine has been busy (all cores; /proc/stat, idle and iowait left out)."""
    with open("/proc/stat") as f:
        v = [int(x) for x in f.readline().split()[1:]]
    return (sum(v[:8]) - v[3] - v[4]) / CLK_TCK  # user nice system idle iowait irq softirq steal


def ctx_switches(pid: int) -> int:
    """Context switches (voluntary and not) of all threads of a process so far."""
    n = 0
    for t in os.listdir(f"/proc/{pid}/task"):
        try:
            with open(f"/proc/{pid}/task/{t}/status") as f:
                n += sum(int(line.split()[1]) for line in f if "ctxt_switches:" in line)
        except OSError:  # the thread ended
            pass
    return n


def run_time_s(pid: int) -> float:
    """On-CPU time of all threads of a process so far, from the scheduler's own clock
    (/proc/PID/task/TID/schedstat, first field, ns): a cross-check of ``cpu_s``, whose utime + stime are
    sampled at timer ticks (CONFIG_TICK_CPU_ACCOUNTING) and can be far off for a process that runs in
    short bursts."""
    ns = 0
    for t in os.listdir(f"/proc/{pid}/task"):
        try:
            with open(f"/proc/{pid}/task/{t}/schedstat") as f:
                ns += int(f.read().split()[0])
        except OSError:
            pass
    return ns * 1e-9


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def free_ports(n: int, taken: set[int] | frozenset[int] = frozenset()) -> list[int]:
    """``n`` distinct free loopback ports, none in ``taken``: all held at once while they are picked
    (free_port() twice can give the same port, and two switches on one port is a start race)."""
    held: list[socket.socket] = []
    try:
        while len(held) < n:
            s = socket.socket()
            s.bind(("127.0.0.1", 0))
            if s.getsockname()[1] in taken:
                s.close()  # still free to others, but ours elsewhere: take another
                continue
            held.append(s)
        return [s.getsockname()[1] for s in held]
    finally:
        for s in held:
            s.close()


def metrics(port: int) -> dict[str, float]:
    out = {}
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as r:
        for line in r.read().decode().splitlines():
            if line and not line.startswith("#"):
                k, _, v = line.rpartition(" ")
                out[k] = float(v)
    return out


# ---------------------------------------------------------------------- load generator (a subprocess)


def exchange_frames(rng, seq: int, slot: int, host: int, n_hosts: int) -> tuple[bytes, bytes]:
    """One emulated daemon's per-slot frames: an update_schedule (one flow to the next host, K random
    rates) and a fetch_feedback for the same flow."""
    from hostctl.core import wire

    src, dst = f"h{host}", f"h{(host + 1) % n_hosts}"
    flow = f"{src}>{dst}"
    rates = tuple(float(rng.randrange(10**6, 10**8)) for _ in range(K))
    upd = wire.encode_request(wire.Request("update_schedule", seq * 2, slot, src,
                                           (wire.FlowSchedule(flow, f"j{host % 50}", src, dst, seq, rates),)))
    fet = wire.encode_request(wire.Request("fetch_feedback", seq * 2 + 1, slot, src,
                                           (wire.FlowQuery(flow, src, dst),)))
    return upd, fet


class DaemonFrames:
    """One emulated daemon's per-slot frames, prepared once: the two request maps exactly as
    ``wire.encode_request`` builds them (same keys, same order), and ``VARIANTS`` lists of K random
    rates. ``frames()`` patches request id, slot, seq and the rates list into the maps and packs them
    with one msgpack ``Packer``: the bytes are those ``exchange_frames`` would encode for the same
    rates, ids and slot (tests/unit/test_switchemu_gen.py), at ~1 us instead of ~7 us per pair."""

    __slots__ = ("upd", "fet", "flow", "rates")
    VARIANTS = 8

    def __init__(self, rng, host: int, n_hosts: int, dst: int | None = None, job: str | None = None):
        """The flow goes to host ``dst`` (default: the next host, ``(host + 1) % n_hosts``) in job ``job``
        (default ``j{host % 50}``)."""
        from hostctl.core import wire

        src, dst = f"h{host}", f"h{(host + 1) % n_hosts if dst is None else dst}"
        flow = f"{src}>{dst}"
        self.rates = [[float(rng.randrange(10**6, 10**8)) for _ in range(K)] for _ in range(self.VARIANTS)]
        self.flow = {"flow": flow, "job": f"j{host % 50}" if job is None else job, "src": src, "dst": dst, "seq": 0,
                     "rates_Bps": self.rates[0]}
        self.upd = {"v": wire.WIRE_VERSION, "type": "update_schedule", "id": 0, "slot": 0, "host": src,
                    "flows": [self.flow]}
        self.fet = {"v": wire.WIRE_VERSION, "type": "fetch_feedback", "id": 0, "slot": 0, "host": src,
                    "flows": [{"flow": flow, "src": src, "dst": dst}]}

    def frames(self, pack, seq: int, slot: int, variant: int) -> tuple[bytes, bytes]:
        """(update_schedule, fetch_feedback) with ids ``2*seq`` / ``2*seq + 1`` (as ``exchange_frames``);
        ``pack`` = ``msgpack.Packer(use_bin_type=True).pack``."""
        upd, fet, fl = self.upd, self.fet, self.flow
        upd["id"] = seq * 2
        fet["id"] = seq * 2 + 1
        upd["slot"] = fet["slot"] = slot
        fl["seq"] = seq
        fl["rates_Bps"] = self.rates[variant]
        return pack(upd), pack(fet)


def _endpoints(endpoint, count: int) -> list[str]:
    """``endpoint`` for every one of ``count`` peers, or a list with one endpoint per peer."""
    eps = [endpoint] * count if isinstance(endpoint, str) else list(endpoint)
    if len(eps) != count:
        raise ValueError(f"{len(eps)} endpoints for {count} peers")
    return eps


class PyzmqPeers:
    """``count`` pyzmq DEALER sockets (one connection each) in one process: ``send`` one message,
    ``wait`` for replies. Only the sockets that wait for a reply are polled (zmq_poll is O(sockets)).
    ``endpoint``: one for all, or a list of one per socket."""

    name = "pyzmq"
    clock = staticmethod(time.monotonic)  # send and receive times

    def __init__(self, endpoint: str, count: int):
        import zmq
        from zmq.backend.cython._zmq import Socket as RawSocket

        self.ctx = zmq.Context()
        self.socks = []
        for ep in _endpoints(endpoint, count):
            s = self.ctx.socket(zmq.DEALER)
            s.linger = 0
            s.connect(ep)
            self.socks.append(s)
        self.owner = {s: i for i, s in enumerate(self.socks)}
        # pyzmq's Socket.send_multipart / recv_multipart combine enum flags in Python (~3 us per
        # exchange): the Cython methods with int flags make the same zmq_msg_send / zmq_msg_recv calls
        self._send, self._recv, self._get = RawSocket.send, RawSocket.recv, RawSocket.get
        self.NOBLOCK, self.MORE, self.RCVMORE = int(zmq.NOBLOCK), int(zmq.NOBLOCK | zmq.SNDMORE), int(zmq.RCVMORE)
        self.Again, self.zmq_poll = zmq.Again, zmq.zmq_poll
        self.pollitem = [(s, int(zmq.POLLIN)) for s in self.socks]
        time.sleep(0.5)  # connections up

    def send(self, i: int, upd: bytes, fet: bytes) -> None:
        s = self.socks[i]
        self._send(s, upd, self.MORE)
        self._send(s, fet, self.NOBLOCK)

    def wait(self, timeout_ms: int, waiting, draining: bool) -> list[tuple[int, list[bytes], float]]:
        """Replies on the sockets of ``waiting``, blocking up to ``timeout_ms`` (returns as soon as one
        is there, so the receive time is taken at once): [(daemon, frames, receive time)]."""
        if not waiting:  # zmq_poll returns at once without sockets
            if timeout_ms:
                time.sleep(timeout_ms / 1000.0)
            return []
        pollitem, recv, get, NOBLOCK, RCVMORE = self.pollitem, self._recv, self._get, self.NOBLOCK, self.RCVMORE
        out = []
        for s, _ in self.zmq_poll([pollitem[i] for i in waiting], timeout_ms):
            # one reply message per exchange: one recv, no drain loop that ends in zmq.Again (an older
            # reply still queued keeps the socket polled, and the next poll returns at once for it)
            try:
                parts = [recv(s, NOBLOCK)]
                while get(s, RCVMORE):
                    parts.append(recv(s, NOBLOCK))
            except self.Again:
                continue
            out.append((self.owner[s], parts, time.monotonic()))  # noqa: PERF401
        return out

    def close(self) -> None:
        for s in self.socks:
            s.close(0)
        self.ctx.term()


def zmtp_frames(parts) -> bytes:
    """A ZMTP 3.0 message (RFC 23): each frame is flags (0x01 more, 0x02 long) + size + body."""
    out = []
    last = len(parts) - 1
    for j, p in enumerate(parts):
        more = 0 if j == last else 1
        out.append(bytes((more, len(p))) if len(p) < 256 else bytes((more | 2,)) + len(p).to_bytes(8, "big"))
        out.append(p)
    return b"".join(out)


SO_TIMESTAMPNS = getattr(socket, "SO_TIMESTAMPNS", 35)  # Linux; also the cmsg type (SCM_TIMESTAMPNS)
_TIMESPEC = struct.Struct("@qq")
ZMTP_GREETING = b"\xff" + bytes(8) + b"\x7f" + bytes((3, 0)) + b"NULL".ljust(20, b"\0") + b"\0" + bytes(31)
ZMTP_READY = b"\x05READY" + b"\x0bSocket-Type" + (6).to_bytes(4, "big") + b"DEALER" + b"\x08Identity" + bytes(4)


class ZmtpPeers:
    """``count`` DEALER peers speaking ZMTP 3.0 (NULL mechanism) over plain TCP sockets, all in this
    one thread with one epoll: per exchange one send() and one recv() system call, no libzmq I/O
    thread in between. For the switch each is one more DEALER connection, like a pyzmq one.

    While sending, ``wait`` does not wake up for each reply: it sleeps until the next send is due and
    then collects what has arrived (one wake-up per ~1 ms tick instead of one per reply, ~20-30 us of
    CPU each on the 2-core VM). The receive time of a reply is the kernel's timestamp of its arrival
    at the socket (SO_TIMESTAMPNS, CLOCK_REALTIME), so the round trip does not include that sleep.
    ``endpoint``: one ``tcp://`` endpoint for all peers, or a list of one per peer (several switches)."""

    name = "zmtp"
    clock = staticmethod(time.time)  # send times: the same clock as the kernel's receive timestamps

    def __init__(self, endpoint: str, count: int, tick: bool = True):
        import select

        self.tick = tick

        eps = _endpoints(endpoint, count)
        addr = {}
        for e in set(eps):
            assert e.startswith("tcp://"), e
            host, port = e[6:].rsplit(":", 1)
            addr[e] = (host, int(port))
        self.socks, self.bufs = [], []
        # non-blocking connects, all at once (a blocking connect() took ~4 ms here: the switch accepts
        # in its I/O thread)
        ep = select.epoll()
        for e in eps:
            s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)  # libzmq sets it on its tcp sockets
            s.setsockopt(socket.SOL_SOCKET, SO_TIMESTAMPNS, 1)
            s.setblocking(False)
            s.connect_ex(addr[e])
            ep.register(s.fileno(), select.EPOLLOUT)
            self.socks.append(s)
        pending, deadline = {s.fileno(): (s, e) for s, e in zip(self.socks, eps)}, time.monotonic() + 30
        while pending and time.monotonic() < deadline:
            for fd, _ in ep.poll(1.0):
                s, e = pending.pop(fd)
                ep.unregister(fd)
                err = s.getsockopt(socket.SOL_SOCKET, socket.SO_ERROR)
                if err:
                    raise ConnectionError(f"connect to {e}: {os.strerror(err)}")
                s.settimeout(10)
                s.sendall(ZMTP_GREETING + bytes((4, len(ZMTP_READY))) + ZMTP_READY)
        ep.close()
        if pending:
            raise ConnectionError(f"{len(pending)} connections to {sorted({e for _, e in pending.values()})} "
                                  "not up within 30 s")
        for s in self.socks:  # the switch's greeting (64 bytes) and READY command
            buf = b""
            while len(buf) < 66 or len(buf) < 66 + self._size(buf, 64)[1]:
                got = s.recv(4096)
                if not got:
                    raise ConnectionError("switch closed the connection during the ZMTP handshake")
                buf += got
            hdr, size = self._size(buf, 64)
            if buf[0] != 0xFF or buf[10] != 3 or not buf[64] & 4 or buf[64 + hdr:64 + hdr + 6] != b"\x05READY":
                raise ConnectionError(f"unexpected ZMTP handshake {buf[:80]!r}")
            self.bufs.append(buf[64 + hdr + size:])
            s.setblocking(False)
        self.fd = {s.fileno(): i for i, s in enumerate(self.socks)}
        self.ep = select.epoll()
        for s in self.socks:
            self.ep.register(s.fileno(), select.EPOLLIN)  # level-triggered, once
        self.parts: list[list[bytes]] = [[] for _ in range(count)]
        self.send_blocked = 0
        self.no_timestamp = 0  # replies without a kernel timestamp (then: time.time() after recvmsg)

    @staticmethod
    def _size(buf: bytes, at: int) -> tuple[int, int]:
        """(header length, body size) of the frame at ``at`` (its header must be in ``buf``)."""
        if len(buf) < at + 2:
            return 2, 1 << 30
        if buf[at] & 2:
            if len(buf) < at + 9:
                return 9, 1 << 30
            return 9, int.from_bytes(buf[at + 1:at + 9], "big")
        return 2, buf[at + 1]

    def send(self, i: int, upd: bytes, fet: bytes) -> None:
        data = zmtp_frames((upd, fet))
        s = self.socks[i]
        try:
            n = s.send(data)
        except BlockingIOError:
            n = 0
        if n < len(data):  # the switch does not read (its queue for us is full): wait, as a blocking send would
            self.send_blocked += 1
            s.setblocking(True)
            s.sendall(data[n:])
            s.setblocking(False)

    def wait(self, timeout_ms: int, waiting, draining: bool) -> list[tuple[int, list[bytes], float]]:
        if draining or not self.tick:
            events = self.ep.poll(timeout_ms / 1000.0)
        else:
            if timeout_ms:
                time.sleep(timeout_ms / 1000.0)
            events = self.ep.poll(0)
        out = []
        for fd, _ in events:
            i = self.fd[fd]
            data, anc, _, _ = self.socks[i].recvmsg(65536, 64)
            if not data:
                raise ConnectionError("switch closed a connection")
            for lvl, typ, val in anc:
                if lvl == socket.SOL_SOCKET and typ == SO_TIMESTAMPNS:
                    sec, ns = _TIMESPEC.unpack_from(val)
                    t_rx = sec + ns * 1e-9  # arrival of the last segment read
                    break
            else:
                self.no_timestamp += 1
                t_rx = time.time()
            buf = self.bufs[i] + data if self.bufs[i] else data
            at, parts = 0, self.parts[i]
            while True:
                hdr, size = self._size(buf, at)
                if len(buf) < at + hdr + size:
                    break
                flags = buf[at]
                body = buf[at + hdr:at + hdr + size]
                at += hdr + size
                if flags & 4:  # a command (PING etc.: none with heartbeats off): not part of a message
                    continue
                parts.append(body)
                if not flags & 1:
                    out.append((i, parts, t_rx))
                    self.parts[i] = parts = []
            self.bufs[i] = buf[at:]
        return out

    def close(self) -> None:
        self.ep.close()
        for s in self.socks:
            s.close()


def worker(endpoint: str, first: int, count: int, n_hosts: int, duration_s: float, seed: int,
           validate_every: int = 1, transport: str = "pyzmq", start_at: str | None = None) -> None:
    """Emulate daemons ``first .. first+count-1`` (one DEALER connection each) for ``duration_s``;
    print JSON. Every ``validate_every``-th reply message is fully validated with ``wire.decode_reply``
    (both frames); the others are only unpacked (msgpack) to read type, status and request id."""
    import msgpack

    from hostctl.core import wire

    rng = random.Random(seed)
    if transport.startswith("zmtp"):
        peers = ZmtpPeers(endpoint, count, tick=transport != "zmtp-event")
    else:
        peers = PyzmqPeers(endpoint, count)
    gens = [DaemonFrames(rng, first + i, n_hosts) for i in range(count)]
    pack = msgpack.Packer(use_bin_type=True).pack
    unpack = msgpack.unpackb
    send, wait = peers.send, peers.wait
    getrandbits, clock, wall = rng.getrandbits, peers.clock, time.time
    vbits = DaemonFrames.VARIANTS.bit_length() - 1
    if start_at is None:
        start = wall() + 0.2
    else:  # the driver's common start time, once every generator is connected
        print("ready", flush=True)
        start = float(sys.stdin.readline()) if start_at == "stdin" else float(start_at)
    heap = [(start + rng.random() * SLOT_S, i) for i in range(count)]
    heapq.heapify(heap)
    sent_at: dict[int, tuple[int, float]] = {}  # daemon -> (request id of its fetch, send time)
    rtts, late, errors, seq, sent, validated, malformed, wakeups = [], 0, 0, 0, 0, 0, 0, 0
    t_first = clock() + (start - wall())  # ``start`` on the send clock: send times are relative to it
    end = start + duration_s
    # no cyclic garbage is made here: no collector pauses (a full one took ~3 ms with 170k results)
    # that would hold back this generator's sends and release them as one burst
    gc.collect()
    gc.freeze()
    gc.disable()
    cpu0, tcpu0 = cpu_s(), time.thread_time()
    while True:
        now = wall()
        if now >= end and not sent_at:
            break
        if now >= end + 1.0:
            late += len(sent_at)
            break
        # whole ms, so the sends due within ~1 ms go out together (and no busy loop next to the switch)
        timeout_ms = math.ceil(max(0.0, (heap[0][0] - now) * 1000.0)) if now < end else 50
        wakeups += 1
        for i, parts, t_rx in wait(timeout_ms, sent_at, now >= end):
            full = validated * validate_every <= sent  # a sample (all with validate_every=1) is fully checked
            validated += full
            bad, rid, broken = reply_status(parts, full, unpack)
            malformed += broken
            if bad:
                errors += 1
            got = sent_at.get(i)
            if got is not None and got[0] == rid and len(parts) == 2:
                rtt = t_rx - got[1]
                rtts.append((got[1] - t_first, rtt, bad))
                if rtt > SLOT_S:
                    late += 1
                del sent_at[i]
        now = wall()
        while now < end and heap[0][0] <= now:
            t, i = heapq.heappop(heap)
            if i in sent_at:  # previous exchange never answered within a slot
                late += 1
            seq += 1
            upd, fet = gens[i].frames(pack, seq, int(now // SLOT_S), getrandbits(vbits))
            sent_at[i] = (seq * 2 + 1, clock())
            send(i, upd, fet)
            sent += 1
            heapq.heappush(heap, (t + SLOT_S, i))
    cpu, tcpu = cpu_s() - cpu0, time.thread_time() - tcpu0
    t_done = wall()
    gc.enable()
    peers.close()
    json.dump({"rtts": rtts, "late": late, "errors": errors, "cpu_s": cpu, "main_thread_cpu_s": tcpu,
               "sent": sent, "validated": validated, "malformed": malformed, "wakeups": wakeups,
               "send_blocked": getattr(peers, "send_blocked", 0), "no_timestamp": getattr(peers, "no_timestamp", 0),
               "transport": peers.name, "t_start": start, "t_end": end, "t_done": t_done}, sys.stdout)


def fleet_worker(spec_file: str, w: int, validate_every: int = 50, transport: str = "zmtp",
                 start_at: str | None = None) -> None:
    """Case (c): emulate generator ``w``'s daemons of the spec file (``run_fleet_case``): each daemon has
    one flow and one DEALER connection to every switch on the flow's path, and per 60 ms slot sends the
    same [update_schedule, fetch_feedback] message to each of them back to back (as ``SwitchClient.exchange``
    does). Replies are read as in ``worker``. Prints JSON: per switch (index) the round trips
    ``[send time us, rtt us, error]``, late / error / sent counts; the round trips of whole exchanges
    (every switch of the daemon answered: the slowest one)."""
    import msgpack

    from hostctl.core import wire

    with open(spec_file) as f:
        spec = json.load(f)
    eps, n_hosts = spec["endpoints"], spec["hosts"]
    daemons = spec["workers"][w]  # [[host, dst, job, [switch index, ...]], ...]
    rng = random.Random(1000 + w)
    conn_sw: list[int] = []  # connection -> switch index
    conn_d: list[int] = []  # connection -> daemon (index in this generator)
    dconns: list[tuple[int, ...]] = []  # daemon -> its connections
    for d, (_, _, _, sws) in enumerate(daemons):
        dconns.append(tuple(range(len(conn_sw), len(conn_sw) + len(sws))))
        conn_sw.extend(sws)
        conn_d.extend([d] * len(sws))
    conn_eps = [eps[s] for s in conn_sw]
    if transport.startswith("zmtp"):
        peers = ZmtpPeers(conn_eps, len(conn_eps), tick=transport != "zmtp-event")
    else:
        peers = PyzmqPeers(conn_eps, len(conn_eps))
    gens = [DaemonFrames(rng, host, n_hosts, dst=dst, job=job) for host, dst, job, _ in daemons]
    pack = msgpack.Packer(use_bin_type=True).pack
    unpack = msgpack.unpackb
    send, wait = peers.send, peers.wait
    getrandbits, clock, wall = rng.getrandbits, peers.clock, time.time
    vbits = DaemonFrames.VARIANTS.bit_length() - 1
    print("ready", flush=True)
    start = float(sys.stdin.readline()) if start_at in (None, "stdin") else float(start_at)
    n_sw = len(eps)
    rtts: list[list] = [[] for _ in range(n_sw)]
    late, errors, sent = [0] * n_sw, [0] * n_sw, [0] * n_sw
    pend, slowest, whole = [0] * len(daemons), [0.0] * len(daemons), []
    heap = [(start + rng.random() * SLOT_S, i) for i in range(len(daemons))]
    heapq.heapify(heap)
    sent_at: dict[int, tuple[int, float]] = {}  # connection -> (request id of its fetch, send time)
    seq, n_sent, validated, malformed, wakeups = 0, 0, 0, 0, 0
    t_first = clock() + (start - wall())
    end = start + float(spec["duration_s"])
    gc.collect()
    gc.freeze()
    gc.disable()
    cpu0 = cpu_s()
    while True:
        now = wall()
        if now >= end and not sent_at:
            break
        if now >= end + 1.0:
            for c in sent_at:
                late[conn_sw[c]] += 1
            break
        timeout_ms = math.ceil(max(0.0, (heap[0][0] - now) * 1000.0)) if now < end else 50
        wakeups += 1
        for c, parts, t_rx in wait(timeout_ms, sent_at, now >= end):
            full = validated * validate_every <= n_sent  # a sample (all with validate_every=1) is fully checked
            validated += full
            bad, rid, broken = reply_status(parts, full, unpack)
            malformed += broken
            sw = conn_sw[c]
            if bad:
                errors[sw] += 1
            got = sent_at.get(c)
            if got is not None and got[0] == rid and len(parts) == 2:
                rtt = t_rx - got[1]
                rtts[sw].append((round((got[1] - t_first) * 1e6), round(rtt * 1e6), int(bad)))
                if rtt > SLOT_S:
                    late[sw] += 1
                del sent_at[c]
                d = conn_d[c]
                if rtt > slowest[d]:
                    slowest[d] = rtt
                pend[d] -= 1
                if not pend[d]:
                    whole.append(round(slowest[d] * 1e6))
        now = wall()
        while now < end and heap[0][0] <= now:
            t, i = heapq.heappop(heap)
            seq += 1
            upd, fet = gens[i].frames(pack, seq, int(now // SLOT_S), getrandbits(vbits))
            rid = seq * 2 + 1
            for c in dconns[i]:
                sw = conn_sw[c]
                if c in sent_at:  # previous exchange never answered within a slot
                    late[sw] += 1
                sent_at[c] = (rid, clock())
                send(c, upd, fet)
                sent[sw] += 1
            pend[i], slowest[i] = len(dconns[i]), 0.0
            n_sent += 1
            heapq.heappush(heap, (t + SLOT_S, i))
    cpu = cpu_s() - cpu0
    t_done = wall()
    gc.enable()
    peers.close()
    json.dump({"rtts": {str(s): r for s, r in enumerate(rtts) if r}, "late": late, "errors": errors, "sent": sent,
               "whole_rtts_us": whole, "exchanges_sent": n_sent, "messages_sent": sum(sent), "cpu_s": cpu,
               "validated": validated, "malformed": malformed, "wakeups": wakeups,
               "send_blocked": getattr(peers, "send_blocked", 0), "no_timestamp": getattr(peers, "no_timestamp", 0),
               "transport": peers.name, "t_start": start, "t_end": end, "t_done": t_done}, sys.stdout)


# ---------------------------------------------------------------------- driver


def pct(xs: list[float], p: float) -> float:
    if not xs:
        return float("nan")
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(p / 100.0 * len(xs)))]


def timeline(rtts: list, t_begin: float, step: float = 0.5) -> list:
    buckets: dict[int, list] = {}
    for t, rtt, bad in rtts:
        buckets.setdefault(int((t - t_begin) / step), []).append((rtt * 1000, bad))
    return [[round(b * step, 1), len(v), sum(1 for x in v if x[1]), round(pct([x[0] for x in v], 50), 2),
             round(pct([x[0] for x in v], 99), 2)] for b, v in sorted(buckets.items())]


def run_case(name: str, n_daemons: int, n_workers: int, duration_s: float, topo: str, transport: str,
             validate_every: int) -> dict:
    ep = f"tcp://127.0.0.1:{free_port()}"
    mport = free_port()
    server = subprocess.Popen([SWITCHEMU, "--bind", ep, "--topology", topo, "--metrics-port", str(mport),
                               "--log-level", "WARNING"])
    workers = []
    try:
        for _ in range(100):
            try:
                metrics(mport)
                break
            except OSError:
                time.sleep(0.05)
        m0, c0, t0 = metrics(mport), cpu_s(server.pid), time.monotonic()
        # (wall time, switch CPU s, frames, messages, machine busy s) every 0.25 s: rates over the send window
        samples: list[tuple[float, float, float, float, float]] = []
        done = threading.Event()

        def sample() -> None:
            while not done.wait(0.25):
                try:
                    m = metrics(mport)
                    samples.append((time.time(), cpu_s(server.pid), m["switchemu_frames_total"],
                                    m["switchemu_messages_total"], machine_busy_s()))
                except (OSError, KeyError):
                    pass

        sampler = threading.Thread(target=sample, daemon=True)
        sampler.start()
        per = n_daemons // n_workers
        for w in range(n_workers):
            cnt = per if w < n_workers - 1 else n_daemons - per * (n_workers - 1)
            workers.append(subprocess.Popen(
                [sys.executable, __file__, "--worker", ep, str(w * per), str(cnt), str(n_daemons), str(duration_s), str(w),
                 str(validate_every), transport, "stdin"],
                stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True))
        for p in workers:  # all connected and ready: one start time for all
            if p.stdout.readline().strip() != "ready":
                raise RuntimeError("a load generator failed to start")
        t_go = time.time() + 0.2
        for p in workers:
            p.stdin.write(f"{t_go!r}\n")
            p.stdin.flush()  # communicate() closes it
        outs = [json.loads(p.communicate(timeout=duration_s + 60)[0]) for p in workers]
        done.set()
        sampler.join()
        m1, c1, t1 = metrics(mport), cpu_s(server.pid), time.monotonic()
    finally:
        for p in workers:
            if p.poll() is None:
                os.kill(p.pid, signal.SIGKILL)
                p.wait()
        if server.poll() is None:
            os.kill(server.pid, signal.SIGTERM)
            server.wait(10)
    wall = t1 - t0
    rtts = [r for o in outs for r in o["rtts"]]
    t_begin = min((r[0] for r in rtts), default=0.0)
    lat_ms = [r[1] * 1000 for r in rtts]
    span = max((r[0] for r in rtts), default=0)
    first = [r[1] * 1000 for r in rtts if r[0] < span / 3]
    last = [r[1] * 1000 for r in rtts if r[0] > 2 * span / 3]
    w0, w1 = max(o["t_start"] for o in outs), min(o["t_end"] for o in outs)
    win = [x for x in samples if w0 <= x[0] <= w1]
    if len(win) < 2:  # too short for the sampler: the whole run
        win = [(t0, c0, m0["switchemu_frames_total"], m0["switchemu_messages_total"], math.nan),
               (t1, c1, m1["switchemu_frames_total"], m1["switchemu_messages_total"], math.nan)]
    (wa, ca, fa, ma, ba), (wb, cb, fb, mb, bb) = win[0], win[-1]
    expected = n_daemons * duration_s / SLOT_S
    late = sum(o["late"] for o in outs)
    res = {
        "case": name, "daemons": n_daemons, "generator_processes": n_workers, "duration_s": duration_s,
        "exchanges": len(lat_ms), "expected_exchanges": round(expected),
        "rtt_ms_p50": pct(lat_ms, 50), "rtt_ms_p90": pct(lat_ms, 90), "rtt_ms_p99": pct(lat_ms, 99),
        "rtt_ms_max": max(lat_ms, default=float("nan")),
        "rtt_ms_p99_first_third": pct(first, 99), "rtt_ms_p99_last_third": pct(last, 99),
        # per 0.5 s of send time: [start s, exchanges answered, of them with an error reply, p50 ms, p99 ms]
        "timeline": timeline(rtts, t_begin),
        "late_or_lost": late, "error_replies": sum(o["errors"] for o in outs),
        "server_errors": {k: v - m0.get(k, 0) for k, v in m1.items() if k.startswith("switchemu_errors_total") and v - m0.get(k, 0)},
        # rates while all generators send (sampled every 0.25 s; start-up and drain left out)
        "window_s": wb - wa, "frames_per_s": (fb - fa) / (wb - wa), "messages_per_s": (mb - ma) / (wb - wa),
        "server_cpu_pct": 100.0 * (cb - ca) / (wb - wa),
        # the whole machine's busy CPU in that window (cores), and what neither the switch nor the
        # generators used (other jobs on the shared machine; generators' CPU averaged over their run)
        "machine_busy_cores": (bb - ba) / (wb - wa),
        # the generators' CPU from their first send to their last reply (all threads), over that time
        "generators_cpu_pct": 100.0 * sum(o["cpu_s"] / (o["t_done"] - o["t_start"]) for o in outs),
        "transport": transport, "exchanges_sent": sum(o["sent"] for o in outs),
        # the generators' CPU (all their threads) from the first send to the last reply, per exchange sent
        "generator_cpu_us_per_exchange": 1e6 * sum(o["cpu_s"] for o in outs) / max(1, sum(o["sent"] for o in outs)),
        "generator_wakeups": sum(o["wakeups"] for o in outs),
        "replies_validated": sum(o["validated"] for o in outs), "replies_malformed": sum(o["malformed"] for o in outs),
        # the switch's CPU over the whole run (incl. connection set-up), per exchange sent
        "server_cpu_us_per_exchange": 1e6 * (c1 - c0) / max(1, sum(o["sent"] for o in outs)), "run_wall_s": wall,
        "table_flows": m1["switchemu_table_flows"],
    }
    res["other_load_cores"] = (res["machine_busy_cores"] - res["server_cpu_pct"] / 100.0
                               - res["generators_cpu_pct"] / 100.0)
    res["keeps_up"] = keeps_up(len(lat_ms), expected, late, res["error_replies"], res["rtt_ms_p99_first_third"],
                               res["rtt_ms_p99_last_third"])
    return res



def reply_status(parts, full: bool, unpack) -> tuple[bool, object, bool]:
    """(error reply?, request id, malformed?) of one reply's frames: decoded and checked whole with
    wire.decode_reply when ``full``, else only type, status and id read from the msgpack maps."""
    from hostctl.core import wire  # (imported where used, as the generators' other helpers do)

    try:
        if full:
            replies = [wire.decode_reply(p) for p in parts]
            return any(r.type == "error" or r.status for r in replies), replies[-1].req_id, False
        ms = [unpack(p) for p in parts]
        return any(m["type"] == "error" or m["status"] for m in ms), ms[-1]["id"], False
    except (wire.WireError, ValueError, TypeError, KeyError, IndexError):  # msgpack's errors are ValueErrors
        return True, None, True

def keeps_up(answered: int, expected: float, late: int, error_replies: int, p99_first_ms: float,
             p99_last_ms: float) -> bool:
    """The keep-up criteria: >= 98% of the exchanges answered, <= 1% late or lost, <= 1% answered with an
    error (e.g. stale_slot: the frame waited past the 5 ms skew), and no latency growth over the run (the
    p99 of the last third within twice that of the first third, or within half a slot)."""
    return bool(answered >= 0.98 * expected and late <= 0.01 * expected and error_replies <= 0.01 * expected
                and p99_last_ms <= max(2 * p99_first_ms, SLOT_S * 1000 / 2))


def run_meta() -> dict:
    return {"date": time.strftime("%Y-%m-%d %H:%M:%S %z"), "machine": platform.node(),
            "cpu": _cpu_model(), "cores": os.cpu_count(), "python": platform.python_version(),
            "revision": _revision(),
            "command": " ".join([os.path.relpath(sys.executable), *sys.argv]), "slot_s": SLOT_S, "K": K}


def write_results(out: str, results: list, **extra) -> None:
    """The results file: ``{"meta": run_meta(), "results": [...], **extra}``."""
    os.makedirs(os.path.dirname(os.path.abspath(out)), exist_ok=True)
    with open(out, "w") as f:
        json.dump({"meta": run_meta(), "results": results, **extra}, f, indent=2)


# ---------------------------------------------------------------------- (c) the Lingjun racks: one switchemu per switch

FLEET_JOB_HOSTS = 32  # hosts per job (a ring all-reduce on consecutive hosts in rack order)
LAYERS = ("core", "aggregation", "tor")


def _natural(name: str) -> tuple:
    return tuple(int(x) if x.isdigit() else x for x in re.split(r"(\d+)", name))


def lingjun_racks(csv_path: str | None = None) -> list[tuple[str, str, str, int]]:
    """The Lingjun topology's racks as (core, aggregation switch, ToR, hosts), read the way switchemu
    reads the file (``Topology.from_lingjun_csv``: ToR = ``PSW.ASW``), in order of core, aggregation
    switch and ASW number (natural order)."""
    from hostctl.core.topology import Topology

    if csv_path is None:
        from hostctl_lab.sim.topo import lingjun_csv

        csv_path = lingjun_csv()
    with open(csv_path) as f:
        topo = Topology.from_lingjun_csv(f.read())
    counts: dict[str, int] = {}
    for h in topo.hosts.values():
        counts[h.switch] = counts.get(h.switch, 0) + 1
    racks = []
    for tor, n in counts.items():
        (psw,) = topo.switches[tor]
        (dsw,) = topo.switches[psw]
        racks.append((dsw, psw, tor, n))
    racks.sort(key=lambda r: (_natural(r[0]), _natural(r[1]), _natural(r[2])))
    return racks


def scale_counts(counts: list[int], total: int) -> list[int]:
    """``counts`` scaled to sum to ``total`` (largest remainder), at least one each."""
    if total < len(counts):
        raise ValueError(f"{total} hosts cannot fill {len(counts)} racks")
    s = sum(counts)
    exact = [c * total / s for c in counts]
    out = [max(1, int(x)) for x in exact]
    by_frac = sorted(range(len(counts)), key=lambda i: (exact[i] - int(exact[i]), counts[i]), reverse=True)
    j = 0
    while sum(out) < total:
        out[by_frac[j % len(out)]] += 1
        j += 1
    while sum(out) > total:  # the racks lifted to 1 host: take back from the largest
        out[max(range(len(out)), key=out.__getitem__)] -= 1
    return out


def fleet_racks(racks: list[tuple[str, str, str, int]], n_daemons: int,
                n_racks: int | None = None) -> tuple[list[tuple[str, str, str, int]], list[int], str]:
    """The racks of a fleet of ``n_daemons`` hosts and their host counts, and how they were chosen:
    with ``n_racks``, the first ``n_racks`` racks, their host counts scaled to ``n_daemons``; otherwise,
    up to the topology's size (847), the first racks at their real sizes (a prefix of its hosts in rack
    order, the last rack cut short), and above it every rack, its host count scaled (largest remainder)."""
    total = sum(r[3] for r in racks)
    if n_racks:
        racks = racks[:n_racks]
        return racks, scale_counts([r[3] for r in racks], n_daemons), \
            f"the first {len(racks)} racks, host counts scaled by {n_daemons}/{sum(r[3] for r in racks)}"
    if n_daemons >= total:
        return racks, scale_counts([r[3] for r in racks], n_daemons), \
            f"all {len(racks)} racks, host counts scaled by {n_daemons}/{total} (largest remainder)"
    out, counts = [], []
    for r in racks:
        if sum(counts) >= n_daemons:
            break
        out.append(r)
        counts.append(min(r[3], n_daemons - sum(counts)))
    return out, counts, f"the first {n_daemons} of the {total} hosts in rack order ({len(out)} racks)"


def fleet_plan(racks: list[tuple[str, str, str, int]], counts: list[int], job_hosts: int = FLEET_JOB_HOSTS) -> dict:
    """The fleet of case (c): the topology TOML, the switches that carry traffic and, per daemon, its
    flow and the switches its flow crosses.

    Hosts: ``counts[i]`` in rack ``racks[i]`` (``fleet_racks``), named h0.. in rack order.
    Jobs: consecutive blocks of ``job_hosts`` hosts (a last block of one host joins the one before);
    each host's daemon has one flow, to the next host of its job (the last one to the first: a ring).
    A daemon sends its exchange to every switch owning a link of the flow's up-down path (its own NIC
    link is its local table), as ``SwitchClient`` routes it with a topology: the ToR for a flow inside
    the rack; source ToR, aggregation switch and destination ToR across racks; plus the core switch
    (and a second aggregation switch) across pods."""
    from hostctl.core.topology import Topology

    n_daemons = sum(counts)
    lines = ['format = 1', '[defaults]', 'host_rate = "25gbit"', '']
    seen: set[str] = set()
    for dsw, psw, _, _ in racks:
        if dsw not in seen:
            seen.add(dsw)
            lines += ['[[switch]]', f'name = "{dsw}"', '']
        if psw not in seen:
            seen.add(psw)
            lines += ['[[switch]]', f'name = "{psw}"', f'parent = "{dsw}"', 'uplink_rate = "400gbit"', '']
    start, base = 0, ipaddress.ip_address("10.64.0.1")
    for (_, psw, tor, _), n in zip(racks, counts):
        lines += ['[[switch]]', f'name = "{tor}"', f'parent = "{psw}"', 'uplink_rate = "100gbit"',
                  f'hosts = {{count = {n}, prefix = "h", start = {start}, first_addr = "{base + start}"}}', '']
        start += n
    toml = "\n".join(lines)
    topo = Topology.from_toml(toml)
    jobs = [(a, min(a + job_hosts, n_daemons)) for a in range(0, n_daemons, job_hosts)]
    if len(jobs) > 1 and jobs[-1][1] - jobs[-1][0] < 2:
        jobs[-2:] = [(jobs[-2][0], n_daemons)]
    sw_index: dict[str, int] = {}
    daemons = []
    for j, (a, b) in enumerate(jobs):
        for h in range(a, b):
            dst = a + (h - a + 1) % (b - a)
            owners = [topo.links[i].src for i in topo.path(f"h{h}", f"h{dst}")]
            sws = [sw_index.setdefault(o, len(sw_index)) for o in dict.fromkeys(owners) if o in topo.switches]
            daemons.append([h, dst, f"j{j}", sws])
    tors = {r[2] for r in racks}
    parents = {r[1] for r in racks}
    switches = [{"name": s, "layer": "tor" if s in tors else "aggregation" if s in parents else "core"}
                for s in sw_index]
    # processes in layer order, the ToRs in rack order
    rack_pos = {r[2]: i for i, r in enumerate(racks)}
    order = sorted(range(len(switches)), key=lambda i: (LAYERS.index(switches[i]["layer"]),
                                                        rack_pos.get(switches[i]["name"], 0),
                                                        _natural(switches[i]["name"])))
    new = {old: k for k, old in enumerate(order)}
    for d in daemons:
        d[3] = [new[s] for s in d[3]]
    switches = [switches[i] for i in order]
    for k, s in enumerate(switches):
        s["daemons"] = sum(1 for d in daemons if k in d[3])
    return {"toml": toml, "racks": len(racks), "hosts_per_rack": counts, "jobs": len(jobs), "switches": switches,
            "daemons": daemons}


def _stop(p: subprocess.Popen, sig: int = signal.SIGTERM) -> None:
    if p.poll() is None:
        try:
            os.kill(p.pid, sig)
        except ProcessLookupError:
            pass


def start_switches(names: list[str], topo_path: str, started: list, timeout_s: float = 180.0) -> list[dict]:
    """One ``switchemu --name NAME`` per switch on its own loopback port (and metrics port), all started
    at once; returns [{"name", "endpoint", "metrics_port", "proc", "log"}] once every one serves its
    metrics and is still running 1 s later. Their ports are distinct (one switch's metrics could
    otherwise be another's, which answered for one that had exited). Their logs go to NAME.log beside
    ``topo_path``. A switch that exits (a port taken by another program in between) is started again
    on other ports, twice at most."""
    pool = free_ports(2 * len(names))
    used = set(pool)

    def launch(name: str) -> dict:
        if len(pool) < 2:  # a restart: two more, distinct from every port handed out
            pool.extend(free_ports(2, used))
            used.update(pool)
        port, mport = pool.pop(), pool.pop()
        ep = f"tcp://127.0.0.1:{port}"
        log_path = os.path.join(os.path.dirname(topo_path), f"{name}.log")
        with open(log_path, "a") as err:
            p = subprocess.Popen([SWITCHEMU, "--bind", ep, "--topology", topo_path, "--name", name,
                                  "--metrics-port", str(mport), "--log-level", "WARNING"],
                                 stdout=subprocess.DEVNULL, stderr=err)
        started.append(p)
        return {"name": name, "endpoint": ep, "metrics_port": mport, "proc": p, "log": log_path, "tries": 1}

    sws = [launch(n) for n in names]
    waiting, deadline = set(range(len(sws))), time.monotonic() + timeout_s
    while waiting:
        if time.monotonic() > deadline:
            raise RuntimeError(f"{len(waiting)} switchemu processes not serving within {timeout_s:g} s")
        for i in sorted(waiting):
            s = sws[i]
            if s["proc"].poll() is not None:
                with open(s["log"]) as f:
                    err = f.read().strip()[-500:]
                if s["tries"] >= 3:
                    raise RuntimeError(f"switchemu {s['name']} exited {s['proc'].returncode}: {err}")
                tries = s["tries"] + 1
                sws[i] = s = launch(s["name"])
                s["tries"] = tries
                continue
            try:
                metrics(s["metrics_port"])
                waiting.discard(i)
            except OSError:
                pass
        time.sleep(0.2)
        if not waiting:  # none exited since it answered
            time.sleep(1.0)
            waiting = {i for i, s in enumerate(sws) if s["proc"].poll() is not None}
    return sws


def stop_all(procs: list[subprocess.Popen]) -> None:
    """SIGTERM to each (by PID), then wait; SIGKILL to those still running after 10 s."""
    for p in procs:
        _stop(p)
    for p in procs:
        try:
            p.wait(10)
        except subprocess.TimeoutExpired:
            _stop(p, signal.SIGKILL)
            p.wait()


def run_fleet_case(name: str, n_daemons: int, n_workers: int, duration_s: float, *, transport: str = "zmtp",
                   validate_every: int = 50, n_racks: int | None = None, job_hosts: int = FLEET_JOB_HOSTS,
                   csv_path: str | None = None, started: list | None = None, idle_s: float = 2.0,
                   one_process: bool = False, log=print) -> dict:
    """Case (c): ``n_daemons`` emulated daemons on the Lingjun racks (the first ``n_racks`` racks, default
    all 119), one real switchemu process per switch their flows cross (``fleet_plan``), ``n_workers``
    generator processes (``fleet_worker``). Before the load, ``idle_s`` seconds with every switch up and
    every generator connected measure what the idle switches cost. ``one_process``: the same fleet and
    flows, but one ``switchemu --name all`` owns every switch's links and each daemon sends its exchange to
    it once (the comparison: one process per machine instead of one per switch). Every process started is appended to
    ``started`` (Popen) and stopped by PID before this returns, also on errors."""
    started = [] if started is None else started
    first_started = len(started)
    all_racks = lingjun_racks(csv_path)
    racks, counts, how = fleet_racks(all_racks, n_daemons, n_racks)
    n_workers = max(1, min(n_workers, n_daemons))
    plan = fleet_plan(racks, counts, job_hosts)
    if one_process:
        plan["switches"] = [{"name": "all", "layer": "all", "daemons": n_daemons}]
        for dm in plan["daemons"]:
            dm[3] = [0]
    n_sw = len(plan["switches"])
    sws: list[dict] = []
    workers: list[subprocess.Popen] = []
    t_case = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="bench_switchemu_fleet_") as d:
        topo_path = os.path.join(d, "topo.toml")
        with open(topo_path, "w") as f:
            f.write(plan["toml"])
        try:
            sws = start_switches([s["name"] for s in plan["switches"]], topo_path, started)
            t_up = time.monotonic()
            log(f"  {name}: {n_sw} switchemu processes up in {t_up - t_case:.1f} s")
            pids = [s["proc"].pid for s in sws]
            per = math.ceil(n_daemons / n_workers)
            spec_path = os.path.join(d, "spec.json")
            with open(spec_path, "w") as f:
                json.dump({"endpoints": [s["endpoint"] for s in sws], "hosts": n_daemons, "duration_s": duration_s,
                           "workers": [plan["daemons"][w * per:(w + 1) * per] for w in range(n_workers)]}, f)
            for w in range(n_workers):
                p = subprocess.Popen([sys.executable, __file__, "--fleet-worker", spec_path, str(w), str(validate_every),
                                      transport], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
                started.append(p)
                workers.append(p)
            for p in workers:
                if p.stdout.readline().strip() != "ready":
                    raise RuntimeError("a load generator failed to start")
            ci0, bi0, ti0 = [cpu_s(p) for p in pids], machine_busy_s(), time.monotonic()
            time.sleep(idle_s)  # idle: every switch up, every generator connected, nothing sent yet
            ci1, bi1, ti1 = [cpu_s(p) for p in pids], machine_busy_s(), time.monotonic()
            r0 = [run_time_s(p) for p in pids]
            c0, me0, t0 = [cpu_s(p) for p in pids], cpu_s(), time.monotonic()
            # (wall time, [switch CPU s], machine busy s, this driver's CPU s) every 0.25 s
            samples: list[tuple[float, list[float], float, float]] = []
            done = threading.Event()

            def sample() -> None:
                while not done.wait(0.25):
                    try:
                        samples.append((time.time(), [cpu_s(p) for p in pids], machine_busy_s(), cpu_s()))
                    except OSError:
                        pass

            sampler = threading.Thread(target=sample, daemon=True)
            sampler.start()
            t_go = time.time() + 0.3
            # every switch's counters, CPU and context switches near the start and the end of the load: a
            # switch that falls behind goes on handling its backlog after the load, which the rates leave out
            edge = min(0.5, 0.25 * duration_s)
            scrapes: dict[str, list[dict]] = {}
            scraper = threading.Thread(target=_scrape_twice, args=(sws, (t_go + edge, t_go + duration_s - edge / 2),
                                                                    scrapes, done), daemon=True)
            scraper.start()
            for p in workers:
                p.stdin.write(f"{t_go!r}\n")
                p.stdin.flush()
            outs = [json.loads(p.communicate(timeout=duration_s + 120)[0]) for p in workers]
            c1, me1, t1 = [cpu_s(p) for p in pids], cpu_s(), time.monotonic()
            r1 = [run_time_s(p) for p in pids]
            scraper.join()
            done.set()
            sampler.join()
            if "a" not in scrapes or "b" not in scrapes:
                raise RuntimeError(f"the switches' counters were not read: {scrapes.get('error', 'too short a run')}")
        finally:
            for p in workers:
                _stop(p, signal.SIGKILL)
                p.wait()
            stop_all([p for p in started[first_started:] if p not in workers])  # every switch, restarts included
    w0, w1 = max(o["t_start"] for o in outs), min(o["t_end"] for o in outs)
    win = [x for x in samples if w0 <= x[0] <= w1]
    if len(win) < 2:  # too short for the sampler: the whole run
        win = [(t0, c0, math.nan, me0), (t1, c1, math.nan, me1)]
    (wa, ca, ba, da), (wb, cb, bb, db) = win[0], win[-1]
    span = wb - wa
    per_slot = duration_s / SLOT_S
    switches = []
    all_rtts = []
    for j, s in enumerate(plan["switches"]):
        rt = [(t * 1e-6, r * 1e-6, bool(b)) for o in outs for t, r, b in o["rtts"].get(str(j), ())]
        all_rtts += rt
        lat = [r * 1000 for _, r, _ in rt]
        first = [r * 1000 for t, r, _ in rt if t < duration_s / 3]
        last = [r * 1000 for t, r, _ in rt if t > 2 * duration_s / 3]
        expected = s["daemons"] * per_slot
        late = sum(o["late"][j] for o in outs)
        errs = sum(o["errors"][j] for o in outs)
        sa, sb = scrapes["a"][j], scrapes["b"][j]
        a, b, dt = sa["m"], sb["m"], sb["t"] - sa["t"]
        msgs = max(1.0, b["switchemu_messages_total"] - a["switchemu_messages_total"])
        row = {
            "switch": s["name"], "layer": s["layer"], "pid": pids[j], "daemons": s["daemons"],
            "expected_exchanges": round(expected), "exchanges_sent": sum(o["sent"][j] for o in outs),
            "exchanges": len(lat), "answered_frac": len(lat) / expected if expected else math.nan,
            "late_frac": late / expected if expected else math.nan,
            "error_frac": errs / expected if expected else math.nan,
            "late_or_lost": late, "error_replies": errs,
            "rtt_ms_p50": pct(lat, 50), "rtt_ms_p99": pct(lat, 99), "rtt_ms_max": max(lat, default=math.nan),
            "rtt_ms_p99_first_third": pct(first, 99), "rtt_ms_p99_last_third": pct(last, 99),
            # CPU while all generators send (from /proc/PID/stat every 0.25 s); frames and messages the
            # switch handled between its two reads of its counters in that window (its own read times)
            "cpu_pct": 100.0 * (cb[j] - ca[j]) / span,
            "frames_per_s": (b["switchemu_frames_total"] - a["switchemu_frames_total"]) / dt,
            "messages_per_s": (b["switchemu_messages_total"] - a["switchemu_messages_total"]) / dt,
            "server_errors": {k: v - a.get(k, 0) for k, v in b.items()
                              if k.startswith("switchemu_errors_total") and v - a.get(k, 0)},
            "table_flows": b["switchemu_table_flows"], "links": b["switchemu_table_links"],
            # between the same two reads
            "cpu_us_per_message": 1e6 * (sb["cpu"] - sa["cpu"]) / msgs,
            "ctx_switches_per_message": (sb["ctx"] - sa["ctx"]) / msgs,
            "idle_cpu_pct": 100.0 * (ci1[j] - ci0[j]) / max(1e-3, ti1 - ti0),
            # from before the go to the generators' end, /proc/PID/stat vs the scheduler's clock
            "cpu_pct_run": 100.0 * (c1[j] - c0[j]) / (t1 - t0),
            "cpu_pct_run_schedstat": 100.0 * (r1[j] - r0[j]) / (t1 - t0),
        }
        row["keeps_up"] = keeps_up(len(lat), expected, late, errs, row["rtt_ms_p99_first_third"],
                                   row["rtt_ms_p99_last_third"])
        switches.append(row)
    whole = [r / 1000 for o in outs for r in o["whole_rtts_us"]]
    lat_all = [r * 1000 for _, r, _ in all_rtts]
    gen_cpu = [o["cpu_s"] / (o["t_done"] - o["t_start"]) for o in outs]
    n_sent = sum(o["exchanges_sent"] for o in outs)
    n_msgs = sum(o["messages_sent"] for o in outs)
    res = {
        "case": name, "daemons": n_daemons, "switch_processes": n_sw, "generator_processes": n_workers,
        "duration_s": duration_s, "transport": transport,
        "topology": {"racks": len(racks), "of_racks": len(all_racks), "lingjun_hosts": sum(r[3] for r in all_racks),
                     "hosts_per_rack_min": min(plan["hosts_per_rack"]), "hosts_per_rack_max": max(plan["hosts_per_rack"]),
                     "hosts": how,
                     "jobs": plan["jobs"], "job_hosts": job_hosts,
                     "layers": {ly: sum(1 for s in plan["switches"] if s["layer"] == ly) for ly in LAYERS},
                     "switches_per_daemon": {str(k): sum(1 for d in plan["daemons"] if len(d[3]) == k)
                                             for k in sorted({len(d[3]) for d in plan["daemons"]})}},
        "switches": switches,
        # whole exchanges: every switch of the daemon's flow answered (the slowest one's round trip)
        "expected_exchanges": round(n_daemons * per_slot), "exchanges_sent": n_sent, "exchanges": len(whole),
        "exchange_ms_p50": pct(whole, 50), "exchange_ms_p99": pct(whole, 99),
        "messages_expected": round(sum(s["daemons"] for s in plan["switches"]) * per_slot), "messages_sent": n_msgs,
        "rtt_ms_p50": pct(lat_all, 50), "rtt_ms_p99": pct(lat_all, 99), "rtt_ms_max": max(lat_all, default=math.nan),
        "timeline": timeline(all_rtts, 0.0),
        "late_or_lost": sum(s["late_or_lost"] for s in switches), "error_replies": sum(s["error_replies"] for s in switches),
        "window_s": span,
        "switches_cpu_pct": sum(s["cpu_pct"] for s in switches),
        "switches_cpu_pct_run": sum(s["cpu_pct_run"] for s in switches),
        "switches_cpu_pct_run_schedstat": sum(s["cpu_pct_run_schedstat"] for s in switches),
        "switch_cpu_pct_max": max(s["cpu_pct"] for s in switches),
        "frames_per_s": sum(s["frames_per_s"] for s in switches),
        "messages_per_s": sum(s["messages_per_s"] for s in switches),
        "machine_busy_cores": (bb - ba) / span,
        # before the load: the idle switches, and the machine (the generators wait, connected)
        "switches_idle_cpu_pct": 100.0 * sum(ci1[j] - ci0[j] for j in range(n_sw)) / max(1e-3, ti1 - ti0),
        "machine_busy_cores_idle": (bi1 - bi0) / max(1e-3, ti1 - ti0),
        "driver_cpu_pct": 100.0 * (db - da) / span,
        "generators_cpu_pct": 100.0 * sum(gen_cpu), "generator_cpu_pct_per_process": [100.0 * c for c in gen_cpu],
        "generator_cpu_us_per_exchange": 1e6 * sum(o["cpu_s"] for o in outs) / max(1, n_sent),
        "generator_cpu_us_per_message": 1e6 * sum(o["cpu_s"] for o in outs) / max(1, n_msgs),
        "generator_send_blocked": sum(o["send_blocked"] for o in outs),
        "replies_validated": sum(o["validated"] for o in outs), "replies_malformed": sum(o["malformed"] for o in outs),
        "setup_s": t_up - t_case, "run_wall_s": time.monotonic() - t_case,
    }
    res["other_load_cores"] = (res["machine_busy_cores"] - res["switches_cpu_pct"] / 100.0
                               - res["generators_cpu_pct"] / 100.0 - res["driver_cpu_pct"] / 100.0)
    res["layers"] = {ly: _layer_summary([s for s in switches if s["layer"] == ly]) for ly in LAYERS}
    res["not_keeping_up"] = [s["switch"] for s in switches if not s["keeps_up"]]
    res["keeps_up"] = not res["not_keeping_up"]
    res["limits"] = _limits(res)
    return res


def _scrape_twice(sws: list[dict], at: tuple[float, float], out: dict, done: threading.Event) -> None:
    """At the wall times ``at``, every switch's metrics, CPU s and context switches (16 at a time), each
    with the midpoint of its HTTP request: ``out["a"]``, ``out["b"]`` (``out["error"]`` on failure)."""
    from concurrent.futures import ThreadPoolExecutor

    def one(s: dict) -> dict:
        t_a = time.time()
        m = metrics(s["metrics_port"])
        t_b = time.time()
        pid = s["proc"].pid
        return {"t": (t_a + t_b) / 2, "m": m, "cpu": cpu_s(pid), "ctx": ctx_switches(pid)}

    try:
        with ThreadPoolExecutor(16) as pool:
            for key, t in zip("ab", at):
                if done.wait(max(0.0, t - time.time())):
                    return
                out[key] = list(pool.map(one, sws))
    except (OSError, KeyError) as e:
        out["error"] = repr(e)


def _layer_summary(rows: list[dict]) -> dict:
    if not rows:
        return {"processes": 0}
    out = {"processes": len(rows)}
    for k in ("daemons", "rtt_ms_p50", "rtt_ms_p99", "cpu_pct", "frames_per_s", "answered_frac", "cpu_us_per_message",
              "ctx_switches_per_message"):
        v = sorted(r[k] for r in rows)
        out[k] = {"min": v[0], "median": v[len(v) // 2], "max": v[-1]}
    return out


def _limits(r: dict) -> list[str]:
    """What was near its limit in a run (facts, for the search's report)."""
    out = []
    if r["messages_sent"] < 0.98 * r["messages_expected"]:
        out.append(f"generators sent {r['messages_sent'] / r['messages_expected']:.0%} of the messages due")
    busy = [c for c in r["generator_cpu_pct_per_process"] if c >= 85.0]
    if busy:
        out.append(f"{len(busy)} generator process(es) at >= 85% of a core")
    if r["machine_busy_cores"] >= 0.9 * (os.cpu_count() or 1):
        out.append(f"machine busy {r['machine_busy_cores']:.2f} of {os.cpu_count()} cores")
    if r["switch_cpu_pct_max"] >= 85.0:
        out.append(f"a switch process at {r['switch_cpu_pct_max']:.0f}% of a core")
    if r["not_keeping_up"]:
        out.append(f"{len(r['not_keeping_up'])} switch process(es) not keeping up")
    return out


def fleet_step(r: dict) -> dict:
    """A search step: the run's totals and per-layer numbers, without the per-process rows."""
    keys = ("daemons", "switch_processes", "generator_processes", "duration_s", "keeps_up", "not_keeping_up",
            "limits", "exchanges", "expected_exchanges", "exchange_ms_p50", "exchange_ms_p99", "rtt_ms_p99",
            "late_or_lost", "error_replies", "switches_cpu_pct", "switch_cpu_pct_max", "frames_per_s",
            "messages_per_s", "switches_cpu_pct_run", "switches_cpu_pct_run_schedstat", "switches_idle_cpu_pct",
            "machine_busy_cores_idle", "generators_cpu_pct", "generator_cpu_pct_per_process", "generator_cpu_us_per_exchange",
            "generator_cpu_us_per_message", "machine_busy_cores", "driver_cpu_pct", "other_load_cores", "layers",
            "setup_s", "run_wall_s")
    out = {k: r[k] for k in keys}
    # the processes that did not keep up (the first 10): which criterion
    out["failing"] = [{k: s[k] for k in ("switch", "layer", "daemons", "answered_frac", "late_frac", "error_frac",
                                         "rtt_ms_p99_first_third", "rtt_ms_p99_last_third", "cpu_pct")}
                      for s in r["switches"] if not s["keeps_up"]][:10]
    return out


def fleet_search(run, start: int, budget_s: float, first: dict | None = None, resolution: int = 25,
                 log=print) -> dict:
    """The largest fleet that keeps up: ``run(n)`` (a ``run_fleet_case`` result) at start, 2 x start,
    4 x start ... until a run does not keep up, then bisection (to ``resolution`` daemons, or 10%) while
    the next step fits in ``budget_s`` (when ``start`` does not keep up: halving from it). ``first``: a
    result for ``start`` daemons already measured."""
    t0 = time.monotonic()
    steps: list[dict] = []
    lo, hi, est, out_of_time = 0, None, 0.0, False

    def step(n: int) -> bool | None:
        nonlocal est, out_of_time
        if time.monotonic() - t0 + est > budget_s:
            out_of_time = True
            return None
        t = time.monotonic()
        r = first if first is not None and n == first["daemons"] else run(n)
        steps.append(fleet_step(r))
        est = max(est, time.monotonic() - t)
        log(f"  search: {n} daemons over {r['switch_processes']} switch processes: "
            f"{'keeps up' if r['keeps_up'] else 'does NOT keep up'}; switches {r['switches_cpu_pct']:.0f}% "
            f"(max {r['switch_cpu_pct_max']:.0f}%), generators {r['generators_cpu_pct']:.0f}%, other "
            f"{r['other_load_cores']:.2f} cores; {'; '.join(r['limits']) or 'nothing near a limit'}")
        return r["keeps_up"]

    n = start
    while True:
        ok = step(n)
        if ok is None:
            break
        if ok:
            lo, n = n, n * 2
        else:
            hi = n
            break
    while hi is not None and hi - lo > max(resolution, lo // 10):
        mid = int(round((lo + hi) / 2 / 25.0)) * 25
        if mid in (lo, hi):
            break
        ok = step(mid)
        if ok is None:
            break
        if ok:
            lo = mid
        else:
            hi = mid
    kept = [s for s in steps if s["keeps_up"] and s["daemons"] == lo]
    return {"largest_fleet_kept_up": lo or None, "smallest_fleet_failed": hi, "budget_s": budget_s,
            "stopped_by_budget": out_of_time, "search_s": time.monotonic() - t0,
            "at_largest": kept[-1] if kept else None, "steps": steps}


def plot_fleet(search: dict, path: str) -> bool:
    """p99 round trip and CPU per switch process (by layer) and of the generators vs fleet size."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return False
    steps = sorted(search["steps"], key=lambda s: s["daemons"])
    xs = [s["daemons"] for s in steps]
    fig, (a1, a2) = plt.subplots(1, 2, figsize=(11, 4))
    for ly, mark in (("tor", "o"), ("aggregation", "s"), ("core", "^")):
        if not all(s["layers"][ly]["processes"] for s in steps):
            continue
        a1.plot(xs, [s["layers"][ly]["rtt_ms_p99"]["max"] for s in steps], marker=mark, label=f"{ly}: max p99")
        a2.plot(xs, [s["layers"][ly]["cpu_pct"]["max"] for s in steps], marker=mark, label=f"{ly}: max per process")
    a1.plot(xs, [s["layers"]["tor"]["rtt_ms_p99"]["median"] for s in steps], marker="o", ls="--", label="tor: median p99")
    a1.plot(xs, [s["exchange_ms_p99"] for s in steps], marker="x", color="k", label="whole exchange p99")
    a2.plot(xs, [s["switches_cpu_pct"] for s in steps], marker="x", color="k", label="all switches")
    a2.plot(xs, [s["generators_cpu_pct"] for s in steps], marker="+", color="grey", label="generators")
    a2.plot(xs, [100 * s["other_load_cores"] for s in steps], ls=":", color="grey", label="rest of machine")
    for s in steps:
        if not s["keeps_up"]:
            a1.axvline(s["daemons"], color="r", alpha=0.2)
            a2.axvline(s["daemons"], color="r", alpha=0.2)
    a1.set(xlabel="daemons", ylabel="round trip p99 (ms)", yscale="log", title="latency per switch process")
    a2.set(xlabel="daemons", ylabel="CPU (% of a core)", title="CPU (red: did not keep up)")
    a1.legend(fontsize=7)
    a2.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return True


def print_fleet(r: dict, top: int = 5) -> None:
    print(f"{r['case']}: {r['daemons']} daemons, {r['switch_processes']} switch processes "
          f"({', '.join(f'{v} {k}' for k, v in r['topology']['layers'].items() if v) or 'all switches in one'}), "
          f"{r['generator_processes']} "
          f"generators, {r['duration_s']:g} s")
    print(f"{'switch':14s} {'layer':6s} {'dmns':>5s} {'p50 ms':>7s} {'p99 ms':>7s} {'CPU%':>6s} {'frames/s':>9s} "
          f"{'answered':>8s} {'late':>6s} {'error':>6s} keeps up")
    tors = sorted((s for s in r["switches"] if s["layer"] == "tor"), key=lambda s: -s["cpu_pct"])
    shown = [s for s in r["switches"] if s["layer"] != "tor"] + tors[:top]
    for s in shown:
        print(f"{s['switch']:14s} {s['layer'][:6]:6s} {s['daemons']:5d} {s['rtt_ms_p50']:7.2f} {s['rtt_ms_p99']:7.2f} "
              f"{s['cpu_pct']:6.1f} {s['frames_per_s']:9.0f} {s['answered_frac']:8.2%} {s['late_frac']:6.2%} "
              f"{s['error_frac']:6.2%} {'yes' if s['keeps_up'] else 'NO'}")
    t = r["layers"]["tor"]
    if len(tors) > top:
        print(f"  ... {len(tors) - top} more ToRs; all {t['processes']} ToRs: p99 ms median {t['rtt_ms_p99']['median']:.2f} "
              f"max {t['rtt_ms_p99']['max']:.2f}, CPU% median {t['cpu_pct']['median']:.1f} max {t['cpu_pct']['max']:.1f}, "
              f"frames/s median {t['frames_per_s']['median']:.0f}")
    print(f"total: {r['exchanges']} of {r['expected_exchanges']} whole exchanges (p50 {r['exchange_ms_p50']:.2f} ms, p99 "
          f"{r['exchange_ms_p99']:.2f} ms), {r['frames_per_s']:.0f} frames/s, switches {r['switches_cpu_pct']:.1f}% "
          f"of a core, generators {r['generators_cpu_pct']:.1f}% ({r['generator_cpu_us_per_exchange']:.1f} us per "
          f"exchange), driver {r['driver_cpu_pct']:.1f}%, rest of machine {r['other_load_cores']:.2f} cores; "
          f"keeps up: {'yes' if r['keeps_up'] else 'NO (' + ', '.join(r['not_keeping_up'][:8]) + ')'}")


def main() -> None:
    if len(sys.argv) > 1 and sys.argv[1] == "--worker":
        ep, first, count, n_hosts, dur, seed, validate_every, transport, start_at = sys.argv[2:11]
        worker(ep, int(first), int(count), int(n_hosts), float(dur), int(seed), int(validate_every), transport, start_at)
        return
    if len(sys.argv) > 1 and sys.argv[1] == "--fleet-worker":
        spec, w, validate_every, transport = sys.argv[2:6]
        fleet_worker(spec, int(w), int(validate_every), transport)
        return
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", help="results file (default results/switchemu.json; with --only c results/switchemu_fleet.json)")
    ap.add_argument("--quick", action="store_true", help="3 s per case instead of 20 s")
    ap.add_argument("--duration", type=float, help="seconds per case (instead of 20 s, or 3 s with --quick)")
    ap.add_argument("--workers", type=int, default=2, help="load-generator processes for the 1000-daemon cases")
    ap.add_argument("--transport", choices=("zmtp", "zmtp-event", "pyzmq"), default="zmtp",
                    help="the generators' DEALER peers: ZMTP over plain TCP sockets, one thread per process, "
                         "replies collected once per send tick (zmtp) or on arrival (zmtp-event); or pyzmq sockets")
    ap.add_argument("--validate-every", type=int, default=50,
                    help="(b): fully validate every N-th reply message with wire.decode_reply ((a): every one)")
    ap.add_argument("--only", choices=("a", "b", "c"), help="run one case only (c runs only when asked for)")
    g = ap.add_argument_group("case c: one switchemu per switch of the Lingjun racks")
    g.add_argument("--daemons", type=int, default=1000, help="emulated daemons (hosts)")
    g.add_argument("--racks", type=int, help="the first N racks of the Lingjun topology (default: all 119)")
    g.add_argument("--job-hosts", type=int, default=FLEET_JOB_HOSTS, help="hosts per job (ring on consecutive hosts)")
    g.add_argument("--lingjun", help="the Lingjun CSV (default ../shared/data/lingjun-2023/topo.csv or $HOSTCTL_LINGJUN)")
    g.add_argument("--one-process", action="store_true",
                   help="then the same fleet against one switchemu --name all (every switch in one process)")
    g.add_argument("--search", action="store_true", help="then the largest fleet that keeps up: --daemons, x2, x4 ... "
                                                         "until one does not, then bisection (implies --only c)")
    g.add_argument("--search-budget-s", type=float, default=600.0, help="no search step starts past this time")
    g.add_argument("--search-step-s", type=float, default=10.0, help="seconds of load per search step")
    args = ap.parse_args()
    dur = args.duration or (3.0 if args.quick else 20.0)
    if args.search:
        args.only = "c"
    if args.only == "c":
        fleet_main(args, dur)
        return
    args.out = args.out or "results/switchemu.json"
    with tempfile.TemporaryDirectory() as d:
        topo = os.path.join(d, "topo.toml")
        with open(topo, "w") as f:
            f.write('[[switch]]\nname = "sw0"\nhosts = {count = 1000, prefix = "h", first_addr = "10.1.0.1"}\n'
                    'host_rate = "25gbit"\n')
        results = []
        if args.only != "b":
            results.append(run_case("a: 64 daemons", 64, 1, dur, topo, args.transport, 1))
        if args.only != "a":
            results.append(run_case("b: 1000 daemons", 1000, args.workers, dur, topo, args.transport, args.validate_every))
    write_results(args.out, results)
    print(f"{'case':18s} {'exch':>7s} {'p50 ms':>7s} {'p90 ms':>7s} {'p99 ms':>7s} {'max ms':>7s} {'late':>5s} "
          f"{'frames/s':>9s} {'sw CPU%':>7s} {'gen CPU%':>8s} {'gen us/x':>8s} {'other':>5s} keeps up")
    for r in results:
        print(f"{r['case']:18s} {r['exchanges']:7d} {r['rtt_ms_p50']:7.2f} {r['rtt_ms_p90']:7.2f} {r['rtt_ms_p99']:7.2f} "
              f"{r['rtt_ms_max']:7.1f} {r['late_or_lost']:5d} {r['frames_per_s']:9.0f} {r['server_cpu_pct']:7.1f} "
              f"{r['generators_cpu_pct']:8.1f} {r['generator_cpu_us_per_exchange']:8.1f} {r['other_load_cores']:5.2f} "
              f"{'yes' if r['keeps_up'] else 'NO'}")
    print(f"results: {args.out}")


def fleet_main(args, dur: float) -> None:
    out = args.out or "results/switchemu_fleet.json"
    os.makedirs(os.path.dirname(os.path.abspath(out)), exist_ok=True)

    def log(msg: str) -> None:
        print(msg, flush=True)

    def run(n: int, seconds: float, name: str, one: bool = False) -> dict:
        return run_fleet_case(name, n, args.workers, seconds, transport=args.transport,
                              validate_every=args.validate_every, n_racks=args.racks, job_hosts=args.job_hosts,
                              csv_path=args.lingjun, one_process=one, log=log)

    r = run(args.daemons, dur, f"c: {args.daemons} daemons, Lingjun racks")
    print_fleet(r)
    results = [r]
    if args.one_process:
        results.append(run(args.daemons, dur, f"c, one process: {args.daemons} daemons", one=True))
        print_fleet(results[-1])
    extra = {}
    if args.search:
        search = fleet_search(lambda n: run(n, args.search_step_s, f"search: {n} daemons"), args.daemons,
                              args.search_budget_s, first=r, log=log)
        extra["search"] = search
        png = os.path.splitext(out)[0] + ".png"
        if plot_fleet(search, png):
            extra["plot"] = os.path.basename(png)
        print(f"{'daemons':>8s} {'sw procs':>8s} {'exch p99':>8s} {'tor p99':>8s} {'max CPU%':>8s} {'sw CPU%':>8s} "
              f"{'gen CPU%':>8s} {'gen us/x':>8s} {'other':>6s} keeps up")
        for st in sorted(search["steps"], key=lambda x: x["daemons"]):
            print(f"{st['daemons']:8d} {st['switch_processes']:8d} {st['exchange_ms_p99']:8.2f} "
                  f"{st['layers']['tor']['rtt_ms_p99']['max']:8.2f} {st['switch_cpu_pct_max']:8.1f} "
                  f"{st['switches_cpu_pct']:8.1f} {st['generators_cpu_pct']:8.1f} {st['generator_cpu_us_per_exchange']:8.1f} "
                  f"{st['other_load_cores']:6.2f} {'yes' if st['keeps_up'] else 'NO: ' + '; '.join(st['limits'])}")
        print(f"largest fleet that kept up: {search['largest_fleet_kept_up']} daemons "
              f"(first that did not: {search['smallest_fleet_failed']}; budget stop: {search['stopped_by_budget']})")
    write_results(out, results, **extra)
    print(f"results: {out}")


def _revision() -> str:
    try:
        return subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=os.path.dirname(os.path.abspath(__file__)),
                              capture_output=True, text=True, timeout=10).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return ""


def _cpu_model() -> str:
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor()


if __name__ == "__main__":
    main()
