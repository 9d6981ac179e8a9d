"""An emulated host processor shared by the workers on that host (processor sharing).

  python -m hostctl_lab.workloads.processor --name NAME [--cores C]

By default a worker's compute step is a sleep: every worker has a processor of its own, and
jobs compete for the network only. On real training hosts they also share the processor (the
TensorLights testbed trains on CPUs, with one worker of every job on each host; several jobs may
share a GPU). Jobs that compute at the same time then each compute more slowly. That coupling
leaves both the network and the processors partly idle under FIFO, the loss that ordering jobs
wins back (TensorLights Table II: network 1.20x and worker CPU 1.13x of FIFO's).

This process is one host's processor. It serves the workers of its host on the abstract unix
socket ``@hostctl-processor-NAME``; abstract sockets belong to a network namespace, so each
emulated host has its own. A worker sends a step of compute as its standalone duration (how long
it takes with the processor to itself) and gets the reply when the step is done. With n steps
running, each progresses at min(1, C / n) of its standalone speed (egalitarian processor sharing,
as the kernel's fair scheduler gives n equal threads C cores). It uses no CPU for the work
itself, so the machine's two cores stay free for the network. A CFS quota on real CPU work
could not do this here: with a 4 ms scheduler tick (HZ=250) a 0.1-core quota is overrun and
repaid in lumps of up to hundreds of milliseconds (docs/testbed.md).

Protocol, per connection (a worker's compute thread), all big-endian:
request ``"HCPU" seconds:f64`` -> reply ``"DONE" wall:f64`` when that much work is done.
A connection has at most one step in progress; a second request before the reply, a bad magic
or a bad size closes the connection. The server exits on SIGTERM, or when --idle-exit seconds
pass without a connection (0 = never).
"""

from __future__ import annotations

import argparse
import math
import selectors
import socket
import struct
import sys
import time

from hostctl_lab.workloads.common import Terminated, install_sigterm, recv_exact

PROG = "hostctl_lab.workloads.processor"
REQUEST = struct.Struct("!4sd")
REPLY = struct.Struct("!4sd")
MAGIC_REQ = b"HCPU"
MAGIC_REP = b"DONE"
MAX_STEP_S = 3600.0


def address(name: str) -> str:
    """The abstract socket name of processor `name` (in the current network namespace)."""
    return f"\0hostctl-processor-{name}"


class Processor:
    """Fluid processor sharing of `cores` among the steps in progress. Pure bookkeeping on the
    caller's clock: `advance(now)` (returns the steps done by then), then `start` or `drop`
    at that same time, and `next_done(now)` for the select timeout."""

    def __init__(self, cores: float = 1.0) -> None:
        if not cores > 0:
            raise ValueError("cores must be positive")
        self.cores = cores
        self.left: dict[object, float] = {}  # step -> standalone seconds still to do
        self.t = 0.0

    def rate(self) -> float:
        """Speed of each step in progress, in standalone seconds per second."""
        return min(1.0, self.cores / len(self.left)) if self.left else 0.0

    def advance(self, now: float) -> list[object]:
        """Progress every step to `now`; returns (and removes) the steps that are done, in order."""
        done: list[object] = []
        while self.left and now > self.t:
            r = self.rate()
            upto = min(now, self.t + min(self.left.values()) / r)
            work = (upto - self.t) * r
            for k in list(self.left):
                self.left[k] -= work
                if self.left[k] <= 1e-9:
                    del self.left[k]
                    done.append(k)
            self.t = upto
        self.t = max(self.t, now)
        return done

    def start(self, key: object, seconds: float) -> bool:
        """A new step at the time of the last `advance`; False when there is nothing to do."""
        if seconds <= 1e-9:
            return False
        self.left[key] = seconds
        return True

    def drop(self, key: object) -> None:
        self.left.pop(key, None)

    def next_done(self, now: float) -> float | None:
        """Seconds from `now` until the next step is done (None when idle)."""
        if not self.left:
            return None
        return max(0.0, self.t + min(self.left.values()) / self.rate() - now)


class _Conn:
    def __init__(self, sock: socket.socket) -> None:
        self.sock = sock
        self.fd = sock.fileno()
        self.buf = b""
        self.started = 0.0
        self.busy = False


class Server:
    """The processor's socket server: one `Processor`, one connection per worker compute thread."""

    def __init__(self, name: str, cores: float) -> None:
        self.name = name
        self.proc = Processor(cores)
        self.conns: dict[int, _Conn] = {}
        self.sel = selectors.DefaultSelector()
        self.srv = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.srv.bind(address(name))  # OSError when the name is taken in this network namespace
        self.srv.listen(256)
        self.srv.setblocking(False)
        self.sel.register(self.srv, selectors.EVENT_READ, None)

    def close(self) -> None:
        for c in list(self.conns.values()):
            c.sock.close()
        self.srv.close()
        self.sel.close()

    def run(self, idle_exit_s: float = 0.0) -> None:
        last_active = time.monotonic()
        while True:
            now = time.monotonic()
            timeout = self.proc.next_done(now)
            if idle_exit_s > 0 and not self.conns:
                if now - last_active > idle_exit_s:
                    return
                timeout = 1.0 if timeout is None else min(timeout, 1.0)
            events = self.sel.select(timeout)
            now = time.monotonic()
            self._reply(self.proc.advance(now), now)  # the clock is at `now` for what follows
            for key, _mask in events:
                if key.data is None:
                    self._accept()
                else:
                    self._read(key.data, now)
            if events:
                last_active = now

    def _accept(self) -> None:
        try:
            s, _ = self.srv.accept()
        except OSError:
            return
        s.setblocking(False)  # a reply is 12 bytes; a client that does not read them is dropped
        c = _Conn(s)
        self.conns[c.fd] = c
        self.sel.register(s, selectors.EVENT_READ, c)

    def _read(self, c: _Conn, now: float) -> None:
        if c.fd not in self.conns:  # closed earlier in this round
            return
        try:
            data = c.sock.recv(4096)
        except BlockingIOError:
            return
        except OSError:
            data = b""
        if not data:
            self._drop(c)
            return
        c.buf += data
        while len(c.buf) >= REQUEST.size:
            magic, seconds = REQUEST.unpack_from(c.buf)
            c.buf = c.buf[REQUEST.size:]
            if magic != MAGIC_REQ or c.busy or math.isnan(seconds) or not 0.0 <= seconds <= MAX_STEP_S:
                self._drop(c)
                return
            c.busy, c.started = True, now
            if not self.proc.start(c.fd, seconds):
                self._reply([c.fd], now)

    def _reply(self, fds: list[object], now: float) -> None:
        for fd in fds:
            c = self.conns.get(fd)  # type: ignore[arg-type]
            if c is None:
                continue
            c.busy = False
            try:
                c.sock.send(REPLY.pack(MAGIC_REP, now - c.started))
            except OSError:
                self._drop(c)

    def _drop(self, c: _Conn) -> None:
        self.conns.pop(c.fd, None)
        self.proc.drop(c.fd)
        self.sel.unregister(c.sock)
        c.sock.close()


def serve(name: str, cores: float, idle_exit_s: float = 0.0) -> int:
    install_sigterm()  # SIGTERM raises Terminated (select would otherwise resume after the signal)
    try:
        server = Server(name, cores)
    except OSError as e:
        sys.stderr.write(f"{PROG}: cannot listen on @{address(name)[1:]} ({e}): is another processor named "
                         f"{name!r} running in this network namespace?\n")
        return 1
    try:
        server.run(idle_exit_s)
    except (Terminated, KeyboardInterrupt):
        pass
    finally:
        server.close()
    return 0


class ProcessorClient:
    """One compute thread's connection to its host's processor."""

    def __init__(self, name: str, timeout_s: float = 10.0) -> None:
        self.name = name
        deadline = time.monotonic() + timeout_s
        while True:
            s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            try:
                s.connect(address(name))
                break
            except OSError as e:
                s.close()
                if time.monotonic() > deadline:
                    raise ConnectionError(f"no processor {name!r} in this network namespace ({e}): start "
                                          f"`python -m {PROG} --name {name}` on the host") from None
                time.sleep(0.05)
        self.sock = s

    def compute(self, seconds: float) -> float:
        """Block until `seconds` of standalone compute are done; returns the wall time."""
        self.sock.sendall(REQUEST.pack(MAGIC_REQ, seconds))
        try:
            magic, wall = REPLY.unpack(recv_exact(self.sock, REPLY.size))
        except ConnectionError as e:
            raise ConnectionError(f"processor {self.name!r}: {e}") from None
        if magic != MAGIC_REP:
            raise ConnectionError(f"processor {self.name!r} sent a bad reply")
        return wall

    def close(self) -> None:
        self.sock.close()


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog=PROG, description="An emulated host processor shared by its workers.")
    ap.add_argument("--name", default="host", help="processor name (abstract socket @hostctl-processor-NAME)")
    ap.add_argument("--cores", type=float, default=1.0,
                    help="steps that run at full speed at once; more share them (default 1)")
    ap.add_argument("--idle-exit", type=float, default=0.0,
                    help="exit after this many seconds without a connection (default 0: never)")
    a = ap.parse_args(argv)
    if not (a.cores > 0 and math.isfinite(a.cores)):
        ap.error(f"--cores {a.cores} must be a positive number")
    return serve(a.name, a.cores, a.idle_exit)


if __name__ == "__main__":
    sys.exit(main())
