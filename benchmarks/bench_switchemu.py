"""switchemu scale benchmark (docs/switchemu.md): one real switchemu process, emulated daemons over TCP.

(a) 64 emulated daemons, each doing one update_schedule + fetch_feedback round trip per 60 ms slot
    (both frames in one ZeroMQ message): p50/p90/p99 round-trip latency.
(b) 1000 emulated daemons, same per-slot exchange, against one switchemu: p99 latency, switchemu CPU %
    (from /proc/PID/stat), request frames per second, whether it keeps up (>= 98% of the exchanges
    answered, <= 1% late or lost, <= 1% answered with an error such as stale_slot, and no latency growth
    from the first to the last third of the run).

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
"""

from __future__ import annotations

import argparse
import gc
import heapq
import json
import math
import os
import platform
import random
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


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


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

    def __init__(self, rng, host: int, n_hosts: int):
        from hostctl.core import wire

        src, dst = f"h{host}", f"h{(host + 1) % n_hosts}"
        flow = f"{src}>{dst}"
        self.rates = [[float(rng.randrange(10**6, 10**8)) for _ in range(K)] for _ in range(self.VARIANTS)]
        self.flow = {"flow": flow, "job": f"j{host % 50}", "src": src, "dst": dst, "seq": 0, "rates_Bps": self.rates[0]}
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


class PyzmqPeers:
    """``count`` pyzmq DEALER sockets (one connection each) in one process: ``send`` one message,
    ``wait`` for replies. Only the sockets that wait for a reply are polled (zmq_poll is O(sockets))."""

    name = "pyzmq"
    clock = staticmethod(time.monotonic)  # send and receive times

    def __init__(self, endpoint: str, count: int):
        import zmq
        from zmq.backend.cython._zmq import Socket as RawSocket

        self.ctx = zmq.Context()
        self.socks = []
        for _ in range(count):
            s = self.ctx.socket(zmq.DEALER)
            s.linger = 0
            s.connect(endpoint)
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
    at the socket (SO_TIMESTAMPNS, CLOCK_REALTIME), so the round trip does not include that sleep."""

    name = "zmtp"
    clock = staticmethod(time.time)  # send times: the same clock as the kernel's receive timestamps

    def __init__(self, endpoint: str, count: int, tick: bool = True):
        import select

        self.tick = tick

        assert endpoint.startswith("tcp://"), endpoint
        host, port = endpoint[6:].rsplit(":", 1)
        self.socks, self.bufs = [], []
        # non-blocking connects, all at once (a blocking connect() took ~4 ms here: the switch accepts
        # in its I/O thread)
        ep = select.epoll()
        for _ in range(count):
            s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)  # libzmq sets it on its tcp sockets
            s.setsockopt(socket.SOL_SOCKET, SO_TIMESTAMPNS, 1)
            s.setblocking(False)
            s.connect_ex((host, int(port)))
            ep.register(s.fileno(), select.EPOLLOUT)
            self.socks.append(s)
        pending, deadline = {s.fileno(): s for s in self.socks}, time.monotonic() + 30
        while pending and time.monotonic() < deadline:
            for fd, _ in ep.poll(1.0):
                s = pending.pop(fd)
                ep.unregister(fd)
                err = s.getsockopt(socket.SOL_SOCKET, socket.SO_ERROR)
                if err:
                    raise ConnectionError(f"connect to {endpoint}: {os.strerror(err)}")
                s.settimeout(10)
                s.sendall(ZMTP_GREETING + bytes((4, len(ZMTP_READY))) + ZMTP_READY)
        ep.close()
        if pending:
            raise ConnectionError(f"{len(pending)} connections to {endpoint} not up within 30 s")
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
            if validated * validate_every <= sent:  # a sample (all with validate_every=1) is fully checked
                validated += 1
                try:
                    replies = [wire.decode_reply(p) for p in parts]
                    bad = any(r.type == "error" or r.status for r in replies)
                    rid = replies[-1].req_id
                except wire.WireError:
                    malformed += 1
                    bad, rid = True, None
            else:
                try:
                    ms = [unpack(p) for p in parts]
                    bad = any(m["type"] == "error" or m["status"] for m in ms)
                    rid = ms[-1]["id"]
                except (ValueError, TypeError, KeyError, IndexError):  # msgpack's errors are ValueErrors
                    malformed += 1
                    bad, rid = True, None
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
    # keeps up: >= 98% of the exchanges answered, <= 1% late or lost, <= 1% answered with an error
    # (e.g. stale_slot: the frame waited past the 5 ms skew), and no latency growth over the run
    res["other_load_cores"] = (res["machine_busy_cores"] - res["server_cpu_pct"] / 100.0
                               - res["generators_cpu_pct"] / 100.0)
    res["keeps_up"] = bool(len(lat_ms) >= 0.98 * expected and late <= 0.01 * expected
                           and res["error_replies"] <= 0.01 * expected
                           and res["rtt_ms_p99_last_third"] <= max(2 * res["rtt_ms_p99_first_third"], SLOT_S * 1000 / 2))
    return res


def main() -> None:
    if len(sys.argv) > 1 and sys.argv[1] == "--worker":
        ep, first, count, n_hosts, dur, seed, validate_every, transport, start_at = sys.argv[2:11]
        worker(ep, int(first), int(count), int(n_hosts), float(dur), int(seed), int(validate_every), transport, start_at)
        return
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", default="results/switchemu.json")
    ap.add_argument("--quick", action="store_true", help="3 s per case instead of 20 s")
    ap.add_argument("--workers", type=int, default=2, help="load-generator processes for the 1000-daemon case")
    ap.add_argument("--transport", choices=("zmtp", "zmtp-event", "pyzmq"), default="zmtp",
                    help="the generators' DEALER peers: ZMTP over plain TCP sockets, one thread per process, "
                         "replies collected once per send tick (zmtp) or on arrival (zmtp-event); or pyzmq sockets")
    ap.add_argument("--validate-every", type=int, default=50,
                    help="(b): fully validate every N-th reply message with wire.decode_reply ((a): every one)")
    ap.add_argument("--only", choices=("a", "b"), help="run one case only")
    args = ap.parse_args()
    dur = 3.0 if args.quick else 20.0
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
    meta = {"date": time.strftime("%Y-%m-%d %H:%M:%S %z"), "machine": platform.node(),
            "cpu": _cpu_model(), "cores": os.cpu_count(), "python": platform.python_version(),
            "command": " ".join([os.path.relpath(sys.executable), *sys.argv]), "slot_s": SLOT_S, "K": K}
    os.makedirs(os.path.dirname(os.path.abspath(args.out)), exist_ok=True)
    with open(args.out, "w") as f:
        json.dump({"meta": meta, "results": results}, f, indent=2)
    print(f"{'case':18s} {'exch':>7s} {'p50 ms':>7s} {'p90 ms':>7s} {'p99 ms':>7s} {'max ms':>7s} {'late':>5s} "
          f"{'frames/s':>9s} {'sw CPU%':>7s} {'gen CPU%':>8s} {'gen us/x':>8s} {'other':>5s} keeps up")
    for r in results:
        print(f"{r['case']:18s} {r['exchanges']:7d} {r['rtt_ms_p50']:7.2f} {r['rtt_ms_p90']:7.2f} {r['rtt_ms_p99']:7.2f} "
              f"{r['rtt_ms_max']:7.1f} {r['late_or_lost']:5d} {r['frames_per_s']:9.0f} {r['server_cpu_pct']:7.1f} "
              f"{r['generators_cpu_pct']:8.1f} {r['generator_cpu_us_per_exchange']:8.1f} {r['other_load_cores']:5.2f} "
              f"{'yes' if r['keeps_up'] else 'NO'}")
    print(f"results: {args.out}")


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
