"""The pacing datapath (hostctl/bpf/hc_pace.c + hostctl/datapath/pacer.py) with real TCP flows.

Every flow goes from a small Python app in the worker namespace ``wk`` (run inside the
test's cgroup, which the pacer is attached to) to a receiver in ``ps`` (outside the
cgroup). The receiver counts the bytes of each connection as its kernel takes them in
(tcp_info), in 10 ms bins of CLOCK_MONOTONIC, which is shared with the test, so rates are
measured where the data arrives, over windows the test picks. The app reports its own socket's
SO_MAX_PACING_RATE on request: that is how a flow left throttled is seen.

Pacers run either in the test process (with a heartbeat thread, like the daemon's
loop) or in a child process started by the test, which the test SIGKILLs by PID to
play a crashed daemon.
"""

from __future__ import annotations

import contextlib
import json
import os
import select
import signal
import subprocess
import threading
import time

import pytest

from hostctl.core.pace import PaceTable
from hostctl.core.types import FlowKey
from hostctl.datapath import bpfsys, pacer
from hostctl.errors import DatapathError
from tests.conftest import PY, Host

pytestmark = [pytest.mark.root, pytest.mark.netns, pytest.mark.bpf]

MBIT = 1_000_000 // 8  # bytes/s per Mbit/s
UNLIMITED = pacer.UNLIMITED

# -- the receiver (ps) ------------------------------------------------------------------
RECV = r"""
import json, socket, struct, sys, threading, time
BIN = 0.01
addr, ports, sink = sys.argv[1], [int(p) for p in sys.argv[2].split(",")], int(sys.argv[3])
conns, lock, kept = [], threading.Lock(), []

# Bytes are counted where the kernel takes them in (tcp_info's tcpi_bytes_received, offset
# 128), sampled every 2 ms with the time of each sample; the bytes between two samples are
# spread over the 10 ms bins they span. A late wake-up of this process (a shared machine)
# then widens one sample interval but moves no bytes in time, which counting at recv() did.
def bytes_received(conn):
    return struct.unpack_from("Q", conn.getsockopt(socket.IPPROTO_TCP, socket.TCP_INFO, 160), 128)[0]

def add(bins, ta, tb, n):
    if n <= 0:
        return
    if tb <= ta:
        i = int(tb / BIN)
        bins[i] = bins.get(i, 0) + n
        return
    i = int(ta / BIN)
    while i * BIN < tb:
        lo, hi = max(ta, i * BIN), min(tb, (i + 1) * BIN)
        if hi > lo:
            bins[i] = bins.get(i, 0) + n * (hi - lo) / (tb - ta)
        i += 1

def sample(rec):
    conn = rec["conn"]
    if conn is None:
        return
    t0 = time.monotonic()
    try:
        v = bytes_received(conn)
    except OSError:
        return
    t = (t0 + time.monotonic()) / 2
    if rec["last"] is not None:
        add(rec["bins"], rec["last"][0], t, v - rec["last"][1])
    rec["last"] = (t, v)

def sampler():
    while True:
        with lock:
            for rec in conns:
                sample(rec)
        time.sleep(0.002)

def serve(conn, rec):
    buf = bytearray(1 << 20)
    with conn:
        while True:
            try:
                n = conn.recv_into(buf)
            except OSError:
                break
            if not n:
                break
        with lock:
            sample(rec)
            rec["conn"] = None

def accept(srv, port):
    while True:
        c, peer = srv.accept()
        if sink:  # never read: no socket lock taken by this process (see Receiver)
            kept.append(c)
            continue
        rec = {"port": port, "peer": list(peer), "bins": {}, "conn": c, "last": (time.monotonic(), 0)}
        with lock:
            sample(rec)
            conns.append(rec)
        threading.Thread(target=serve, args=(c, rec), daemon=True).start()

for p in ports:
    s = socket.socket()
    s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    if sink:  # SO_RCVBUFFORCE (root, above rmem_max): room for everything the connection will carry
        s.setsockopt(socket.SOL_SOCKET, 33, sink)
    s.bind((addr, p))
    s.listen(64)
    threading.Thread(target=accept, args=(s, p), daemon=True).start()
threading.Thread(target=sampler, daemon=True).start()
print("listening", flush=True)
for line in sys.stdin:
    if line.strip() == "dump":
        with lock:
            for rec in conns:
                sample(rec)
            snap = [{"port": r["port"], "peer": r["peer"], "bins": dict(r["bins"])} for r in conns]
        print(json.dumps({"bin_s": BIN, "conns": snap}), flush=True)
"""

# -- the app (wk, in the cgroup): one TCP connection per entry of cfg["ports"] ------------
APP = r"""
import fcntl, json, socket, struct, sys, termios, threading, time
SO_MAX_PACING_RATE = 47
cfg = json.loads(sys.argv[1])
CHUNK = memoryview(bytearray(64 * 1024))

def outq(s):
    return struct.unpack("i", fcntl.ioctl(s.fileno(), termios.TIOCOUTQ, b"\0\0\0\0"))[0]

def drain(s, timeout=30.0):
    end = time.monotonic() + timeout
    while outq(s) and time.monotonic() < end:
        time.sleep(0.002)
    return outq(s) == 0

class Flow:
    def __init__(self, s):
        self.s, self.mode, self.busy = s, "idle", False
        self.cv = threading.Condition()
        threading.Thread(target=self.run, daemon=True).start()

    def run(self):
        while True:
            with self.cv:
                while self.mode != "bulk":
                    self.busy = False
                    self.cv.notify_all()
                    self.cv.wait()
                self.busy = True
            try:
                self.s.send(CHUNK)
            except OSError:
                return

    def set(self, mode):
        with self.cv:
            self.mode = mode
            self.cv.notify_all()
            if mode != "bulk":
                while self.busy:
                    self.cv.wait()

flows = []
for i, port in enumerate(cfg["ports"]):
    s = socket.socket()
    if cfg.get("rate") is not None:
        s.setsockopt(socket.SOL_SOCKET, SO_MAX_PACING_RATE, cfg["rate"])
    if cfg.get("cports"):
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        s.bind(("", cfg["cports"][i]))
    s.connect((cfg["host"], port))
    flows.append(Flow(s))
print(json.dumps({"lports": [f.s.getsockname()[1] for f in flows]}), flush=True)

def pick(arg):
    return flows if arg == "all" else [flows[int(arg)]]

for line in sys.stdin:
    cmd, *args = line.split()
    if cmd == "bulk":
        for f in pick(args[0]):
            f.set("bulk")
        print("ok", flush=True)
    elif cmd == "pause":  # stop sending, then wait until every byte is acked
        for f in pick(args[0]):
            f.set("idle")
        print("idle" if all(drain(f.s) for f in pick(args[0])) else "busy", flush=True)
    elif cmd == "burst":  # burst <i> <bytes> <count> <gap_s>: each burst fully acked, then gap_s idle
        f = flows[int(args[0])]
        data = b"\1" * int(args[1])
        # the whole burst fits in the socket at once (SO_SNDBUFFORCE: root, above wmem_max): the
        # kernel sends it with no wait on this process, whose late wake-up on a busy machine would
        # be a real pause in the flow, and a real burst boundary
        f.s.setsockopt(socket.SOL_SOCKET, 32, 4 * len(data))
        for _ in range(int(args[2])):
            f.s.sendall(data)
            drain(f.s)
            time.sleep(float(args[3]))
        print("done", flush=True)
    elif cmd == "rate":
        v = flows[int(args[0])].s.getsockopt(socket.SOL_SOCKET, SO_MAX_PACING_RATE)
        print(v & 0xFFFFFFFF, flush=True)
    elif cmd == "quit":
        break
"""

# -- a pacer in a child process (a daemon the test can SIGKILL) -----------------------------
PACER_CHILD = r"""
import json, sys, time
from hostctl.core.pace import PaceTable
from hostctl.datapath.pacer import Pacer
cfg = json.loads(sys.argv[1])
p = Pacer(cfg["cgroup"], lease_s=cfg["lease_s"])
p.apply(PaceTable(ports={(port, side): slot for port, side, slot in cfg["ports"]},
                  slot_rates={int(k): v for k, v in cfg["slot_rates"].items()}))
print(json.dumps({"scope": p.scope, "pin_dir": p.pin_dir}), flush=True)
while True:
    p.heartbeat()
    time.sleep(0.05)
"""


def _readline(p: subprocess.Popen, timeout: float, what: str) -> str:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        r, _, _ = select.select([p.stdout], [], [], 0.1)
        if r:
            line = p.stdout.readline()
            if line:
                return line.strip()
            break
        if p.poll() is not None:
            break
    err = ""
    if p.poll() is not None and p.stderr is not None:
        err = p.stderr.read()
    raise AssertionError(f"no answer from {what} (exit code {p.poll()}): {err}")


class Proc:
    """A line-oriented helper process; killed by PID at teardown."""

    def __init__(self, argv: list[str], what: str, procs: list[subprocess.Popen]) -> None:
        self.what = what
        self.p = subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                  text=True, bufsize=1)
        procs.append(self.p)

    @property
    def pid(self) -> int:
        return self.p.pid

    def line(self, timeout: float = 20) -> str:
        return _readline(self.p, timeout, self.what)

    def cmd(self, text: str, timeout: float = 40) -> str:
        self.p.stdin.write(text + "\n")
        self.p.stdin.flush()
        return self.line(timeout)


class Receiver(Proc):
    def __init__(self, host: Host, ports: list[int], procs, *, sink: int = 0) -> None:
        """sink > 0: never read, and give each connection a receive buffer of ``sink`` bytes (which must
        hold all it will carry; no rates then). A reader that the scheduler stops inside recv() holds
        its socket's lock, and the kernel ACKs nothing until it runs again: a pause in the sender's ACK
        progress that a busy machine makes, not the flow."""
        super().__init__(["ip", "netns", "exec", host.ns, PY, "-c", RECV, host.addr, ",".join(map(str, ports)),
                          str(sink)],
                         f"receiver in {host.ns}", procs)
        assert self.line() == "listening"

    def rates(self, t0: float, t1: float) -> dict[tuple[int, int], float]:
        """Goodput (bytes/s) of every connection over [t0, t1) of CLOCK_MONOTONIC, keyed by
        (server port, sender's port) = App.ids (one sender port can serve connections to
        several server ports); only the 10 ms bins wholly inside the window count."""
        snap = json.loads(self.cmd("dump"))
        b = snap["bin_s"]
        lo, hi = int(-(-t0 // b)), int(t1 // b)
        assert hi > lo, (t0, t1)
        out = {}
        for c in snap["conns"]:
            bins = {int(k): v for k, v in c["bins"].items()}
            out[(c["port"], c["peer"][1])] = sum(bins.get(i, 0) for i in range(lo, hi)) / ((hi - lo) * b)
        return out

    def series(self, fid: tuple[int, int], t0: float, t1: float, width: float) -> list[tuple[float, float]]:
        """(bin start, goodput bytes/s) of connection ``fid`` (see rates) in bins of ``width``
        seconds over [t0, t1)."""
        snap = json.loads(self.cmd("dump"))
        b = snap["bin_s"]
        found = [c for c in snap["conns"] if (c["port"], c["peer"][1]) == fid]
        assert len(found) == 1, (fid, [(c["port"], c["peer"]) for c in snap["conns"]])
        bins = {int(k): v for k, v in found[0]["bins"].items()}
        per = int(round(width / b))
        first = int(-(-t0 // b))
        out = []
        i = first
        while (i + per) * b <= t1:
            out.append((i * b, sum(bins.get(j, 0) for j in range(i, i + per)) / (per * b)))
            i += per
        return out


class App(Proc):
    def __init__(self, host: Host, cgroup: str, peer: Host, ports: list[int], procs, *, cports=None,
                 rate: int | None = None) -> None:
        cfg = {"host": peer.addr, "ports": ports, "cports": cports, "rate": rate}
        super().__init__(host.argv_in(cgroup, PY, "-c", APP, json.dumps(cfg)), f"app in {host.ns}", procs)
        self.host, self.peer = host, peer
        self.lports = json.loads(self.line())["lports"]
        self.keys = [FlowKey(host.addr, lp, peer.addr, rp) for lp, rp in zip(self.lports, ports)]
        self.ids = [(rp, lp) for lp, rp in zip(self.lports, ports)]  # as Receiver.rates keys them

    def rate(self, i: int = 0) -> int:
        return int(self.cmd(f"rate {i}"))


class Driver:
    """A pacer in the test process with a heartbeat thread, as the daemon's loop would."""

    def __init__(self, cgroup: str, **kw) -> None:
        self.p = pacer.Pacer(cgroup, **kw)
        self.lock = threading.Lock()
        self.stop = threading.Event()
        self.t = threading.Thread(target=self._beat, daemon=True)
        self.t.start()

    def _beat(self) -> None:
        while not self.stop.wait(0.05):
            with self.lock:
                self.p.heartbeat()

    def apply(self, table: PaceTable) -> None:
        with self.lock:
            self.p.apply(table)

    def flows(self) -> dict[FlowKey, pacer.FlowRecord]:
        with self.lock:
            return {r.key: r for r in self.p.flows()}

    def close(self) -> str:
        self.stop.set()
        self.t.join(5)
        with self.lock:
            return self.p.close()


# -- fixtures ------------------------------------------------------------------------------
@pytest.fixture
def procs():
    """Processes the test starts (killed by PID, in reverse order, even when it fails)."""
    started: list[subprocess.Popen] = []
    yield started
    for p in reversed(started):
        if p.poll() is None:
            p.kill()
        try:
            p.wait(5)
        except subprocess.TimeoutExpired:
            pass
        for f in (p.stdin, p.stdout, p.stderr):
            with contextlib.suppress(Exception):
                f.close()


@pytest.fixture
def driver(request):
    """driver(cgroup, **kw) -> Driver, closed at teardown."""
    made: list[Driver] = []

    def make(cgroup: str, **kw) -> Driver:
        d = Driver(cgroup, **kw)
        made.append(d)
        return d

    yield make
    for d in reversed(made):
        d.close()


@pytest.fixture
def extra_pair(make_pair):
    """A second pair of namespaces (the same addresses as ``pair``, other unique names)."""
    return make_pair()


@pytest.fixture
def extra_cgroup(make_cgroup):
    """A second fresh cgroup (see conftest's make_cgroup)."""
    return make_cgroup()


# -- helpers -------------------------------------------------------------------------------
def scope_of(cgroup: str) -> str:
    return pacer.scope_id(cgroup)


def attached(cgroup: str) -> list[int]:
    fd = os.open(cgroup, os.O_RDONLY | os.O_DIRECTORY)
    try:
        return bpfsys.prog_query(fd, bpfsys.BPF_CGROUP_SOCK_OPS)
    finally:
        os.close(fd)


def pinned_flows(pin_dir: str) -> dict[FlowKey, pacer.FlowRecord]:
    return {r.key: r for r in pacer._pinned_flows(pin_dir)}


def assert_scope_gone(cgroup: str) -> None:
    scope = scope_of(cgroup)
    pin_dir = os.path.join(pacer.bpffs_root(), "hostctl", scope)
    assert not os.path.exists(pin_dir), os.listdir(pin_dir)
    assert not os.path.exists(pacer.owner_path(scope))
    assert attached(cgroup) == []


def own_owners(monkeypatch, *cgroups: str) -> None:
    """clean_pacers() sees only this test's pacers (other sessions' are left alone)."""
    mine = {scope_of(c) for c in cgroups}
    real = pacer.all_owners
    monkeypatch.setattr(pacer, "all_owners", lambda: [o for o in real() if o.get("scope") in mine])


def start_child_pacer(cgroup: str, procs, *, ports, slot_rates, lease_s: float = 1.0) -> tuple[Proc, dict]:
    cfg = {"cgroup": cgroup, "lease_s": lease_s, "ports": ports, "slot_rates": slot_rates}
    child = Proc([PY, "-c", PACER_CHILD, json.dumps(cfg)], "child pacer", procs)
    info = json.loads(child.line(30))
    return child, info


def within(measured: float, target: float, tol: float) -> bool:
    return abs(measured - target) <= tol * target


def mbit(bps: float) -> str:
    return f"{bps * 8 / 1e6:.1f} Mbit/s"


# -- 1. accuracy ---------------------------------------------------------------------------
# (Mbit/s, how far below the target the goodput may fall). Pacing cannot push a flow above its
# rate, so above the target only +3% is allowed (measurement error over 2 s is < 1%). Below it, 5%:
# the rates must be ones that this 2-core VM carries even when busy, so that the pacer, not the
# machine, is what limits the flow. Until session 23 the top rate was 1 Gbit/s (7% allowed): on an
# idle machine 999.1-1000.1 Mbit/s, but with 4 busy loops on the 2 cores TCP over veth carried
# 906-929 Mbit/s (3 failures in 3 runs; CI failed on it once), while 500 Mbit/s held 499.5-499.8.
# Higher rates, with the machine's limits, are in `hostctl bench-pacing` (docs/benchmarks.md).
RATES = ((50, 0.05), (200, 0.05), (500, 0.05))


@pytest.mark.slow
def test_rate_accuracy(pair, cgroup, procs, driver):
    """A bulk flow selected by remote port, paced by its slot's rate: receiver goodput over
    2-s windows after a 1-s warm-up, at three rates (one flow after the other).

    Every window must stay under the rate (+3%). The floor (-5%) must hold in one of up to
    four windows sliding by 1 s: on this shared 2-core machine a busy neighbour can starve
    the sender for seconds (CI once saw 458 Mbit/s at 500 over one window), which the next
    window does not show; a pacer that throttles below its rate fails every window."""
    ports = [5301 + i for i in range(len(RATES))]
    rx = Receiver(pair.ps, ports, procs)
    d = driver(cgroup)
    d.apply(PaceTable(ports={(p, "remote"): i + 1 for i, p in enumerate(ports)},
                      slot_rates={i + 1: r * MBIT for i, (r, _tol) in enumerate(RATES)}))
    app = App(pair.wk, cgroup, pair.ps, ports, procs)
    seen: dict[int, list[float]] = {}
    for i, (r, tol) in enumerate(RATES):
        app.cmd(f"bulk {i}")
        t0 = time.monotonic()
        seen[r] = []
        for end in (3.0, 4.0, 5.0, 6.0):
            time.sleep(max(0.0, t0 + end - time.monotonic()))
            t1 = time.monotonic()
            seen[r].append(rx.rates(t1 - 2.0, t1)[app.ids[i]])
            if seen[r][-1] >= (1 - tol) * r * MBIT:
                break
        app.cmd(f"pause {i}")
        rec = d.flows()[app.keys[i]]
        assert (rec.slot, rec.rate_Bps, rec.orig_rate_Bps) == (i + 1, r * MBIT, UNLIMITED)
        assert rec.setopt_errors == 0 and rec.bytes_acked >= 3.0 * 0.9 * r * MBIT
    print("accuracy:", {r: [f"{mbit(v)} ({(v / (r * MBIT) - 1) * 100:+.2f}%)" for v in vs]
                        for r, vs in seen.items()})
    for r, tol in RATES:
        assert max(seen[r]) >= (1 - tol) * r * MBIT, (r, [mbit(v) for v in seen[r]])
        assert all(v <= 1.03 * r * MBIT for v in seen[r]), (r, [mbit(v) for v in seen[r]])


# -- 2. rate change mid-flow -----------------------------------------------------------------
def test_rate_change_mid_flow(pair, cgroup, procs, driver):
    """100 Mbit/s (the slot's rate), then 400 Mbit/s (a per-flow rate keyed by the 4-tuple
    read from flows(), which wins over the slot's), then the per-flow rate removed: back to
    100 Mbit/s. Measured at the receiver in 100 ms bins."""
    port = 5311
    rx = Receiver(pair.ps, [port], procs)
    d = driver(cgroup)
    base = PaceTable(ports={(port, "remote"): 3}, slot_rates={3: 100 * MBIT})
    d.apply(base)
    app = App(pair.wk, cgroup, pair.ps, [port], procs)
    key = app.keys[0]
    app.cmd("bulk 0")
    time.sleep(1.2)
    # the flow as the kernel reports it: the 4-tuple the daemon would key its rate by
    assert list(d.flows()) == [key]
    t_up = time.monotonic()
    d.apply(PaceTable(ports=base.ports, slot_rates=base.slot_rates, flow_rates={key: 400 * MBIT}))
    time.sleep(1.2)
    up_rate = app.rate(0)  # what the program set on the socket
    t_down = time.monotonic()
    d.apply(base)  # the per-flow rate removed: back to the slot's rate
    time.sleep(1.2)
    t_end = time.monotonic()
    down_rate = app.rate(0)
    series = rx.series(app.ids[0], t_up - 0.8, t_end, 0.1)
    shown = [(round(t - t_up, 2), round(v * 8 / 1e6)) for t, v in series]  # (s after the change, Mbit/s)
    assert (up_rate, down_rate) == (400 * MBIT, 100 * MBIT), shown

    def phase(a: float, b: float) -> list[float]:
        return [v for t, v in series if a <= t and t + 0.1 <= b]

    # Once 0.3 s have passed, no 200 ms (two adjacent bins) goes more than 10% over its target,
    # and at 100 Mbit/s none goes more than 10% under it, the phase's mean within 5%. At 400 Mbit/s
    # the flow gets less when this shared machine is busy (20 runs with other work beside them had
    # 200 ms at 304-344 Mbit/s, the socket's rate at 400): a late pacing timer is not made up, and a
    # reader descheduled inside recv() holds its socket's lock, so no ACK goes out meanwhile (see
    # Receiver; which of the two it was is not measured). So there the floor is 75%, which 100 Mbit/s
    # (the slot's rate) is far below.
    for (a, b), target, floor in (((t_up - 0.8, t_up), 100, 0.90), ((t_up + 0.3, t_down), 400, 0.75),
                                  ((t_down + 0.3, t_end), 100, 0.90)):
        bins = phase(a, b)
        assert len(bins) >= 4, f"{shown}"
        pairs = [(u + v) / 2 for u, v in zip(bins, bins[1:])]
        assert all(p <= target * MBIT * 1.10 for p in pairs), f"{target}: {shown}"
        assert all(p >= target * MBIT * floor for p in pairs), f"{target}: {shown}"
        if floor == 0.90:
            assert within(sum(bins) / len(bins), target * MBIT, 0.05), f"{target}: {shown}"


# -- 3. an unselected flow is never touched ---------------------------------------------------
def test_unselected_flow_untouched(pair, cgroup, procs, driver):
    paced, other = 5321, 5322
    rx = Receiver(pair.ps, [paced, other], procs)
    d = driver(cgroup)
    d.apply(PaceTable(ports={(paced, "remote"): 1}, slot_rates={1: 50 * MBIT}))
    app = App(pair.wk, cgroup, pair.ps, [paced, other], procs)
    app.cmd("bulk all")
    time.sleep(1.5)
    t1 = time.monotonic()
    got = rx.rates(t1 - 1.0, t1)
    flows = d.flows()
    assert list(flows) == [app.keys[0]], flows  # no entry for the other flow
    assert flows[app.keys[0]].rate_Bps == 50 * MBIT and flows[app.keys[0]].callbacks > 10
    assert app.rate(0) == 50 * MBIT
    assert app.rate(1) == UNLIMITED
    print(mbit(got[app.ids[0]]), mbit(got[app.ids[1]]))
    assert within(got[app.ids[0]], 50 * MBIT, 0.05)
    assert got[app.ids[1]] > 10 * 50 * MBIT


# -- 4. late selection by 4-tuple ------------------------------------------------------------
@pytest.mark.parametrize("track_all", [True, False], ids=["default", "track_all_off_but_4tuple_selectors"])
def test_late_selection_by_four_tuple(pair, cgroup, procs, driver, track_all):
    """A flow established before its 4-tuple selector is written is paced afterwards:
    with the default pacer even if the table was empty when the flow started (the
    daemon's first job), with track_all=False when some 4-tuple selector existed."""
    port = 5331
    rx = Receiver(pair.ps, [port], procs)
    d = driver(cgroup, track_all=track_all)
    other = FlowKey(pair.wk.addr, 1, pair.ps.addr, 1)  # a 4-tuple that never exists
    d.apply(PaceTable() if track_all else PaceTable(flows={other: 9}))
    app = App(pair.wk, cgroup, pair.ps, [port], procs)
    key = app.keys[0]
    app.cmd("bulk 0")
    time.sleep(0.6)
    assert d.flows() == {}  # not selected yet: not tracked
    t_sel = time.monotonic()
    d.apply(PaceTable(flows={key: 2}, slot_rates={2: 40 * MBIT}))  # discovery found its 4-tuple
    assert d.p.ctl()["flags"] & pacer.HP_CTL_TRACK_ALL
    time.sleep(1.3)
    t1 = time.monotonic()
    before = rx.rates(t_sel - 0.5, t_sel)[app.ids[0]]
    after = rx.rates(t1 - 1.0, t1)[app.ids[0]]
    print(mbit(before), mbit(after))
    rec = d.flows().get(key)
    assert rec is not None and rec.slot == 2 and rec.rate_Bps == 40 * MBIT, rec
    assert before > 10 * 40 * MBIT
    assert within(after, 40 * MBIT, 0.05)


# -- 5. heartbeat expiry after kill -9 -------------------------------------------------------
def test_lease_expiry_after_kill9_fails_open(pair, cgroup, procs, monkeypatch):
    port = 5341
    rate = 20 * MBIT
    rx = Receiver(pair.ps, [port], procs)
    child, info = start_child_pacer(cgroup, procs, ports=[[port, "remote", 1]], slot_rates={1: rate})
    pin_dir = info["pin_dir"]
    assert pacer.load_owner(info["scope"])["pid"] == child.pid
    assert len(attached(cgroup)) == 1
    app = App(pair.wk, cgroup, pair.ps, [port], procs)
    key = app.keys[0]
    app.cmd("bulk 0")
    time.sleep(1.0)
    t_kill = time.monotonic()
    before = rx.rates(t_kill - 0.6, t_kill)[app.ids[0]]
    assert pinned_flows(pin_dir)[key].rate_Bps == rate
    assert pacer.pinned_ctl(pin_dir)["failopen_events"] == 0
    os.kill(child.pid, signal.SIGKILL)
    child.p.wait(5)
    # the lease (1 s) runs out; the flow still sends, so its next ACK releases it
    time.sleep(1.0 + 0.5)
    t1 = time.monotonic()
    got = rx.series(app.ids[0], t_kill, t1, 0.1)
    after = rx.rates(t1 - 0.3, t1)[app.ids[0]]
    print(mbit(before), mbit(after), [(round(t - t_kill, 1), round(v * 8 / 1e6)) for t, v in got])
    assert within(before, rate, 0.05)
    assert after > 5 * rate
    # not before the lease ran out: still throttled during the first 0.9 s after the kill (single
    # 100 ms bins of a 20 Mbit/s flow hold 3 or 4 TSO-sized packets: only "not released" is checked)
    early = [v for t, v in got if t + 0.1 <= t_kill + 0.9]
    assert len(early) >= 8 and max(early) < 2 * rate
    rec = pinned_flows(pin_dir)[key]
    assert rec.rate_Bps == rec.orig_rate_Bps == UNLIMITED
    assert pacer.pinned_ctl(pin_dir)["failopen_events"] == 1
    assert app.rate(0) == UNLIMITED

    own_owners(monkeypatch, cgroup)
    msgs = pacer.clean_pacers()
    assert len(msgs) == 1 and info["scope"] in msgs[0] and "detached" in msgs[0], msgs
    assert_scope_gone(cgroup)
    # the flow goes on, untouched
    assert app.rate(0) == UNLIMITED


# -- 6./7. an idle throttled flow gets its rate back: clean after a crash, orderly close ------
def _throttle_then_idle(rx, app, rate: int) -> None:
    app.cmd("bulk 0")
    time.sleep(0.8)
    t = time.monotonic()
    assert within(rx.rates(t - 0.5, t)[app.ids[0]], rate, 0.2)
    assert app.rate(0) == rate
    assert app.cmd("pause 0") == "idle"  # every byte sent and acked: no ACK, no callback any more


def _resumes_fast(rx, app, rate: int) -> list[float]:
    app.cmd("bulk 0")
    t0 = time.monotonic()
    time.sleep(0.5)
    series = [v for _t, v in rx.series(app.ids[0], t0, time.monotonic(), 0.1)]
    assert len(series) >= 3 and all(v > 10 * rate for v in series), [mbit(v) for v in series]
    return series


@pytest.mark.parametrize("old_pins", [False, True], ids=["pins", "old-pins"])
def test_clean_after_crash_releases_idle_flow(pair, cgroup, procs, monkeypatch, old_pins):
    """old-pins: the maps are pinned under the names of hostctl before hc_* (hp_*), as a host
    upgraded from it may have them: clean still finds them, releases the flow and unpins."""
    port = 5351
    rate = 10 * MBIT
    orig = 375_000_000  # the app's own SO_MAX_PACING_RATE (3 Gbit/s): what it must get back
    rx = Receiver(pair.ps, [port], procs)
    child, info = start_child_pacer(cgroup, procs, ports=[[port, "remote", 1]], slot_rates={1: rate})
    app = App(pair.wk, cgroup, pair.ps, [port], procs, rate=orig)
    _throttle_then_idle(rx, app, rate)
    rec = pinned_flows(info["pin_dir"])[app.keys[0]]
    assert (rec.rate_Bps, rec.orig_rate_Bps) == (rate, orig)
    os.kill(child.pid, signal.SIGKILL)
    child.p.wait(5)
    time.sleep(1.3)
    # the lease ran out, but an idle flow gets no callback: the kernel alone leaves it throttled
    assert app.rate(0) == rate
    if old_pins:
        for old, new in pacer.OLD_MAP_NAMES.items():
            os.rename(os.path.join(info["pin_dir"], new), os.path.join(info["pin_dir"], old))
    own_owners(monkeypatch, cgroup)
    msgs = pacer.clean_pacers()
    assert len(msgs) == 1 and "released 1 throttled flow(s)" in msgs[0] and "detached" in msgs[0], msgs
    assert app.rate(0) == orig
    assert_scope_gone(cgroup)
    print([mbit(v) for v in _resumes_fast(rx, app, rate)])


def test_orderly_close_releases_idle_flow(pair, cgroup, procs, driver):
    port = 5361
    rate = 10 * MBIT
    rx = Receiver(pair.ps, [port], procs)
    d = driver(cgroup)
    d.apply(PaceTable(ports={(port, "remote"): 1}, slot_rates={1: rate}))
    assert os.path.isdir(d.p.pin_dir) and pacer.load_owner(d.p.scope)["pid"] == os.getpid()
    assert len(attached(cgroup)) == 1
    app = App(pair.wk, cgroup, pair.ps, [port], procs)
    _throttle_then_idle(rx, app, rate)
    msg = d.close()
    assert "released 1 throttled flow(s)" in msg and "detached" in msg, msg
    assert app.rate(0) == UNLIMITED
    assert_scope_gone(cgroup)
    assert d.close() == ""  # idempotent
    print([mbit(v) for v in _resumes_fast(rx, app, rate)])


# -- 8. two pacers, two cgroups, two pairs of namespaces ---------------------------------------
def test_two_pacers_do_not_interfere(pair, extra_pair, cgroup, extra_cgroup, procs, driver):
    """Both pacers select the same remote port and both apps use the same 4-tuple (each in its
    own namespaces): each pacer sees and paces only the flow of its own cgroup."""
    port, cport = 5371, 40371
    setups = [(pair, cgroup, 30), (extra_pair, extra_cgroup, 120)]
    runs = []
    for pr, cg, r in setups:
        rx = Receiver(pr.ps, [port], procs)
        d = driver(cg)
        d.apply(PaceTable(ports={(port, "remote"): 1}, slot_rates={1: r * MBIT}))
        runs.append((rx, d, r))
    apps = [App(pr.wk, cg, pr.ps, [port], procs, cports=[cport]) for pr, cg, _r in setups]
    assert apps[0].keys == apps[1].keys
    for app in apps:
        app.cmd("bulk 0")
    time.sleep(1.5)
    t1 = time.monotonic()
    got = []
    for (rx, d, r), app in zip(runs, apps):
        flows = d.flows()
        assert list(flows) == app.keys and flows[app.keys[0]].rate_Bps == r * MBIT
        assert app.rate(0) == r * MBIT
        got.append(rx.rates(t1 - 1.0, t1)[app.ids[0]])
    print([mbit(g) for g in got])
    for g, (_rx, _d, r) in zip(got, runs):
        assert within(g, r * MBIT, 0.05)
    # closing one leaves the other in place and pacing
    runs[0][1].close()
    assert attached(cgroup) == [] and len(attached(extra_cgroup)) == 1
    assert apps[1].rate(0) == 120 * MBIT
    assert pacer.load_owner(scope_of(extra_cgroup))["pid"] == os.getpid()


# -- 9. flow map full -------------------------------------------------------------------------
def test_flow_map_full(pair, cgroup, procs, driver):
    port = 5381
    rate = 20 * MBIT
    rx = Receiver(pair.ps, [port], procs)
    d = driver(cgroup, max_flows=4)
    d.apply(PaceTable(ports={(port, "remote"): 1}, slot_rates={1: rate}))
    app = App(pair.wk, cgroup, pair.ps, [port] * 6, procs)  # connected one after the other
    app.cmd("bulk all")
    time.sleep(1.5)
    t1 = time.monotonic()
    got = rx.rates(t1 - 1.0, t1)
    flows = d.flows()
    print(sorted(mbit(got[fid]) for fid in app.ids), d.p.ctl())
    assert d.p.ctl()["flows_full"] == 2
    assert set(flows) == set(app.keys[:4])
    for i, (key, fid) in enumerate(zip(app.keys, app.ids)):
        if i < 4:
            assert flows[key].rate_Bps == rate and app.rate(i) == rate
            assert within(got[fid], rate, 0.10), mbit(got[fid])
        else:
            assert app.rate(i) == UNLIMITED
            assert got[fid] > 5 * rate, mbit(got[fid])
    # still counted once per flow after a second of ACKs
    assert d.p.ctl()["flows_full"] == 2


# -- 10. one pacer per cgroup ------------------------------------------------------------------
def test_second_pacer_refused_while_owner_lives(cgroup, procs, monkeypatch):
    child, info = start_child_pacer(cgroup, procs, ports=[[5391, "remote", 1]], slot_rates={1: 10 * MBIT})
    prog_ids = attached(cgroup)
    assert len(prog_ids) == 1
    with pytest.raises(DatapathError, match=rf"pid {child.pid}\b"):
        pacer.Pacer(cgroup)
    # the refused one changed nothing
    assert attached(cgroup) == prog_ids
    assert pacer.load_owner(info["scope"])["pid"] == child.pid
    assert sorted(os.listdir(info["pin_dir"])) == sorted([pacer.PROG_NAME, *pacer.MAP_NAMES])
    # once the owner is dead, a new pacer takes over (releasing the dead one's pins first)
    os.kill(child.pid, signal.SIGKILL)
    child.p.wait(5)
    p = pacer.Pacer(cgroup)
    try:
        now = attached(cgroup)
        assert len(now) == 1 and now != prog_ids
        assert pacer.load_owner(info["scope"])["pid"] == os.getpid()
    finally:
        p.close()
    assert_scope_gone(cgroup)


# -- 11. bursts --------------------------------------------------------------------------------
def test_bursts(pair, cgroup, procs, driver):
    """5 bursts of 1 MiB, 200 ms idle between them, on an unpaced flow and on a flow paced at
    50 Mbit/s (whose ACKs are spaced by pacing, which must not cut its bursts); and 8 bursts
    of 100 kB on an unpaced flow, which fit in one window: the ACK that completes such a burst
    comes with no sock_ops callback (RTT_CB runs about once per round trip), so its bytes
    must still be counted in that burst, not in the next one."""
    ports = (5401, 5402, 5403)
    cases = [(1 << 20, 5, 0.2, 1, None), (1 << 20, 5, 0.2, 2, 50 * MBIT), (100_000, 8, 0.1, 3, None)]
    # bursts end where the flow really pauses: neither Python process may make a pause by running
    # late (a receiver that never reads, see Receiver; the app's send buffer, see APP)
    Receiver(pair.ps, list(ports), procs, sink=32 << 20)
    d = driver(cgroup)
    d.apply(PaceTable(ports={(p, "remote"): slot for p, (_s, _n, _g, slot, _r) in zip(ports, cases)},
                      slot_rates={slot: r for _s, _n, _g, slot, r in cases if r}))
    app = App(pair.wk, cgroup, pair.ps, list(ports), procs)
    for i, (size, count, gap, _slot, _r) in enumerate(cases):
        assert app.cmd(f"burst {i} {size} {count} {gap}") == "done"
    bursts = d.p.bursts()
    by_key = {k: [b for b in bursts if b.key == k] for k in app.keys}
    print({k.rport: [(b.bytes, round((b.end_ns - b.start_ns) / 1e6, 1)) for b in v] for k, v in by_key.items()})
    assert sum(len(v) for v in by_key.values()) == len(bursts)
    for key, (size, count, gap, slot, rate) in zip(app.keys, cases):
        bs = by_key[key]
        # a burst is reported when the next one starts: the last one is still open
        assert len(bs) == count - 1, [(b.bytes, b.start_ns) for b in bs]
        assert all(b.slot == slot and within(b.bytes, size, 0.05) for b in bs), [(b.slot, b.bytes) for b in bs]
        gaps = [(b2.start_ns - b1.end_ns) / 1e9 for b1, b2 in zip(bs, bs[1:])]
        assert all(gap * 0.75 < g < gap + 0.5 for g in gaps), gaps
        if rate:  # paced: each burst lasts about size / rate (168 ms for 1 MiB at 50 Mbit/s)
            assert all(within((b.end_ns - b.start_ns) / 1e9, size / rate, 0.2) for b in bs), bs
    assert d.p.bursts() == []  # drained
    assert d.p.ctl()["bursts_lost"] == 0


# -- 12. the program's counters survive the daemon's heartbeats -------------------------------
def test_counters_not_lost_to_heartbeats(pair, cgroup, procs):
    """A heartbeat rewrites the daemon's whole hc_pace_ctl entry; counters the program bumps in
    between must not be overwritten. Heartbeats in a tight loop while 300 connections are
    refused a place in a full flow table: flows_full must count every one."""
    port, n = 5501, 300
    Receiver(pair.ps, [port], procs)
    p = pacer.Pacer(cgroup, max_flows=1)
    try:
        p.apply(PaceTable(ports={(port, "remote"): 1}))
        stop = threading.Event()
        beats = [0]

        def beat() -> None:
            while not stop.is_set():
                p.heartbeat()
                beats[0] += 1

        t = threading.Thread(target=beat, daemon=True)
        t.start()
        code = (f"import socket\nkeep = socket.create_connection(({pair.ps.addr!r}, {port}))\n"
                f"for i in range({n}):\n    socket.create_connection(({pair.ps.addr!r}, {port})).close()\n"
                "print('done', flush=True)")
        try:
            app = Proc(pair.wk.argv_in(cgroup, PY, "-c", code), "connector", procs)
            assert app.line(60) == "done"
        finally:
            stop.set()
            t.join(5)
        assert beats[0] > 100
        assert p.ctl()["flows_full"] == n
        assert len(p.flows()) == 1
    finally:
        p.close()


def test_second_pacer_in_the_same_process_refused(cgroup):
    """The owner record names this process, but the first pacer is alive: refused too (not
    taken for a dead daemon's pacer, which would detach the first and let its close() later
    tear down the second)."""
    first = pacer.Pacer(cgroup)
    try:
        prog_ids = attached(cgroup)
        with pytest.raises(DatapathError, match=rf"pid {os.getpid()}\b"):
            pacer.Pacer(cgroup)
        assert attached(cgroup) == prog_ids
        assert sorted(os.listdir(first.pin_dir)) == sorted([pacer.PROG_NAME, *pacer.MAP_NAMES])
    finally:
        first.close()
    assert_scope_gone(cgroup)
    # once closed, the cgroup can be paced again from this process
    again = pacer.Pacer(cgroup)
    try:
        assert len(attached(cgroup)) == 1
    finally:
        again.close()
    assert_scope_gone(cgroup)


# -- batched reads of the flow map ------------------------------------------------------------
def test_batch_read_is_the_key_by_key_read(pair, cgroup, procs, driver):
    """Pacer.flows() reads hc_pace_flows with BPF_MAP_LOOKUP_BATCH into reused buffers; the rows are
    the ones a key-by-key walk gives, also when a read takes several calls (chunk of 2)."""
    ports = [5331, 5332, 5333, 5334, 5335]
    Receiver(pair.ps, ports, procs)
    d = driver(cgroup)
    d.apply(PaceTable(ports={(p, "remote"): 1 for p in ports}, slot_rates={1: 50 * MBIT}))
    App(pair.wk, cgroup, pair.ps, ports, procs)  # connected, idle: the counters stay put
    for _ in range(3):  # a late ACK may move a counter between the reads: read again
        with d.lock:
            m = d.p.maps["hc_pace_flows"]
            walk = sorted(pacer._record(k, v) for k, v in m.items())
            small = sorted(pacer._records(*bpfsys.BatchReader(m.map_fd, pacer._KEY_SIZE, pacer._FLOW.size,
                                                                chunk=2).read()))
            fast = sorted(d.p.flows())
        if walk == small == fast:
            break
        time.sleep(0.2)
    assert d.p._batch not in (None, False)  # the batched path ran
    assert len(walk) == len(ports) and fast == walk and small == walk


# -- rate writes: one batch call, or key by key ------------------------------------------------
def _rates_in_map(p: pacer.Pacer) -> dict[FlowKey, int]:
    return {pacer.key_of(k): int(v.rate_Bps) for k, v in p.maps["hc_rates"].items()}


def test_rate_writes_batched_and_key_by_key_give_the_same_map(cgroup, driver):
    """Per-flow rates go into hc_rates with one BPF_MAP_UPDATE_BATCH call; a kernel without it gets
    one update per flow. Both leave the map the table asks for (IPv4 and IPv6 keys, rates clamped,
    removed flows deleted), read back from the kernel."""
    d = driver(cgroup)
    p = d.p
    keys = ([FlowKey(f"10.9.{i // 200}.{i % 200 + 1}", 40000 + i, "10.8.0.1", 9000) for i in range(300)]
            + [FlowKey("fd00::1", 1000 + i, "fd00::2", 9000) for i in range(20)])
    want = {k: 1_000_000 + 1000 * i for i, k in enumerate(keys)}
    want[keys[0]] = 1  # below the minimum: clamped
    d.apply(PaceTable(flow_rates=want))
    assert p._batch_update, "this kernel has batch writes for hash maps (Linux 5.6+)"
    assert _rates_in_map(p) == {k: pacer.clamp_rate(r) for k, r in want.items()}
    for batched in (True, False):  # half the flows changed, a quarter removed, the rest kept
        p._batch_update = batched
        want = {k: (r * 2 if i % 2 else r) for i, (k, r) in enumerate(want.items()) if i % 4 != 3}
        d.apply(PaceTable(flow_rates=want))
        assert _rates_in_map(p) == {k: pacer.clamp_rate(r) for k, r in want.items()}, batched


# -- release from mlcc's wait floor ------------------------------------------------------------
def _release_s(rx: Receiver, app: App, d: Driver, base: PaceTable, held_Bps: float, *, hold_s: float = 0.2,
               need_bytes: int = 1_000_000) -> float:
    """Hold the bulk flow at ``held_Bps`` for ``hold_s``, give it back its slot's rate, and return
    how long after that the receiver took to get ``need_bytes`` (inf: not within 1.5 s)."""
    key = app.keys[0]
    d.apply(PaceTable(ports=base.ports, slot_rates=base.slot_rates, flow_rates={key: int(held_Bps)}))
    time.sleep(hold_s)
    t_up = time.monotonic()
    d.apply(base)
    time.sleep(1.5)
    got = 0.0
    for t, v in rx.series(app.ids[0], t_up, time.monotonic(), 0.01):
        got += v * 0.01
        if got >= need_bytes:
            return t + 0.01 - t_up
    return float("inf")


def test_flow_held_at_the_wait_floor_is_released_within_three_slots(pair, cgroup, procs, driver):
    """policy mlcc holds a flow that its plan makes wait at ``wait_floor_Bps`` (64 KiB per 60 ms
    slot), and releases it by writing a higher rate. TCP's pacing sends a whole GSO packet (up
    to 64 KiB on a path this short) and then waits len / rate before the next; the new rate does
    not shorten that wait. So 1 MB at 50 MB/s (20 ms) must arrive within three slots of the
    release (119-123 ms measured, about two packets' wait at the floor). The old floor (4 MSS per
    slot, 96.5 KB/s) is measured for the record: 1.18 s (a 64 KiB packet alone waits 0.68 s at
    that rate)."""
    from hostctl.core.mlcchost import wait_floor_Bps

    port = 5371
    rx = Receiver(pair.ps, [port], procs)
    d = driver(cgroup)
    base = PaceTable(ports={(port, "remote"): 1}, slot_rates={1: 50_000_000})
    d.apply(base)
    app = App(pair.wk, cgroup, pair.ps, [port], procs)
    app.cmd("bulk 0")
    time.sleep(1.0)
    floor = wait_floor_Bps(0.06)
    new = _release_s(rx, app, d, base, floor)
    old = _release_s(rx, app, d, base, 4 * 1448 / 0.06)
    print(f"1 MB after the release: floor {floor / 1e6:.2f} MB/s {new * 1e3:.0f} ms; "
          f"4 MSS per slot {old * 1e3:.0f} ms")
    assert new <= 0.18, f"{new * 1e3:.0f} ms after a hold at {floor / 1e6:.2f} MB/s"


# -- adoption: flows established before the pacer ----------------------------------------------
@pytest.mark.parametrize("track_all", [False, True], ids=["selected_only", "track_all"])
def test_flows_established_before_the_pacer_are_adopted(pair, cgroup, procs, driver, track_all):
    """Two bulk flows run before any pacer exists (no sock_ops program ever saw them established).
    The pacer's first table selects one by remote port: its adoption pass (bpf_iter__tcp) gives
    that socket callbacks, with the very 4-tuple the socket has (a check of the struct sock_common
    fields the iterator reads), and the flow is paced from then on; the other is left alone, or
    under TRACK_ALL given callbacks too, so that a 4-tuple selector written later paces it."""
    paced, other = 5401, 5402
    rx = Receiver(pair.ps, [paced, other], procs)
    app = App(pair.wk, cgroup, pair.ps, [paced, other], procs)
    app.cmd("bulk all")
    time.sleep(0.5)
    d = driver(cgroup, track_all=track_all)
    d.apply(PaceTable())  # the first table: no selector yet, so only TRACK_ALL adopts
    assert sorted(d.p.last_adoption, key=str) == (
        sorted([(app.keys[0], pacer.ADOPT_TRACKED), (app.keys[1], pacer.ADOPT_TRACKED)], key=str) if track_all else [])
    t_sel = time.monotonic()
    d.apply(PaceTable(ports={(paced, "remote"): 1}, slot_rates={1: 50 * MBIT}))
    assert d.p.last_adoption == ([] if track_all else [(app.keys[0], 1)])
    assert d.p.adopted == (2 if track_all else 1)
    with d.lock:
        assert d.p.adopt() == []  # a second pass finds every socket with its callbacks already
    time.sleep(1.5)
    t1 = time.monotonic()
    before = rx.rates(t_sel - 0.4, t_sel)
    got = rx.rates(t1 - 1.0, t1)
    flows = d.flows()
    print(mbit(before[app.ids[0]]), mbit(got[app.ids[0]]), mbit(got[app.ids[1]]))
    assert before[app.ids[0]] > 10 * 50 * MBIT  # unpaced before the pacer
    assert list(flows) == [app.keys[0]] and flows[app.keys[0]].slot == 1, flows
    assert app.rate(0) == 50 * MBIT and app.rate(1) == UNLIMITED
    assert within(got[app.ids[0]], 50 * MBIT, 0.05)
    assert got[app.ids[1]] > 10 * 50 * MBIT
    d.apply(PaceTable(ports={(paced, "remote"): 1}, flows={app.keys[1]: 2}, slot_rates={1: 50 * MBIT, 2: 30 * MBIT}))
    if track_all:  # tracked since the first pass: the 4-tuple selector takes it at its next round trip
        time.sleep(1.3)
        t2 = time.monotonic()
        assert within(rx.rates(t2 - 1.0, t2)[app.ids[1]], 30 * MBIT, 0.05)
        assert d.flows()[app.keys[1]].slot == 2
    else:  # TRACK_ALL turned on by the 4-tuple selector: that is an adoption pass too
        assert d.p.adopted == 2
        wait_for_rate = time.monotonic() + 10
        while app.rate(1) != 30 * MBIT and time.monotonic() < wait_for_rate:
            time.sleep(0.1)
        assert app.rate(1) == 30 * MBIT


V6_PAIR = r"""
import json, socket, sys, time
srv = socket.socket(socket.AF_INET6)
srv.bind(("::1", 0)); srv.listen()
cli = socket.socket(socket.AF_INET6)
cli.connect(("::1", srv.getsockname()[1]))
acc, _ = srv.accept()
print(json.dumps({"server": srv.getsockname()[1], "client": cli.getsockname()[1]}), flush=True)
sys.stdin.readline()
"""


def test_adoption_reads_ipv6_addresses(pair, cgroup, procs, driver):
    """The adoption pass keys an IPv6 connection (::1 inside the namespace) by its real
    addresses and ports: the client side selected by the server's port as remote, the accepted
    side by it as local."""
    p = Proc(pair.wk.argv_in(cgroup, PY, "-c", V6_PAIR), "v6 pair", procs)
    ports = json.loads(p.line())
    d = driver(cgroup, track_all=False)
    d.apply(PaceTable(ports={(ports["server"], "remote"): 3, (ports["server"], "local"): 4}))
    client = FlowKey("::1", ports["client"], "::1", ports["server"])
    server = FlowKey("::1", ports["server"], "::1", ports["client"])
    assert sorted(d.p.last_adoption, key=str) == sorted([(client, 3), (server, 4)], key=str)
    assert d.p.adopted == 2
