"""Helpers shared by the workload programs: exact receives, zero-copy blob
sends, connect with retry, atomic record files, SIGTERM, one-line CLI errors.

Every socket made here has TCP_NODELAY; listening sockets have SO_REUSEADDR.
Payloads are zeros: only their size and timing matter to the traffic
controller, so nothing is allocated per message.
"""

from __future__ import annotations

import argparse
import contextlib
import errno
import json
import os
import signal
import socket
import struct
import sys
import threading
import time
import traceback
from collections.abc import Callable, Iterator, Sequence
from typing import Any, NoReturn, TypeVar

T = TypeVar("T")

CHUNK_BYTES = 1 << 20
"""Largest single send/recv; also the size of each thread's receive buffer."""
IO_TIMEOUT_S = 300.0
"""Default timeout of one blocking socket operation (a wedged peer fails the job, never hangs it)."""
HELLO_TIMEOUT_S = 10.0
"""How long an accepted connection may take to say hello (a silent probe must not stall the accepts)."""
JOIN_AFTER_ABORT_S = 5.0
"""After a failure, how long a thread of run_parallel may take to notice it."""
EXIT_ERROR = 1
EXIT_USAGE = 2
EXIT_SIGTERM = 128 + signal.SIGTERM

_ZEROS = memoryview(bytes(CHUNK_BYTES))
_tls = threading.local()
_RETRY_CONNECT = {errno.ECONNREFUSED, errno.ECONNRESET, errno.ECONNABORTED, errno.EHOSTUNREACH,
                  errno.ENETUNREACH, errno.ETIMEDOUT, errno.EADDRNOTAVAIL}


class ProtocolError(Exception):
    """A peer sent something the protocol does not allow (wrong magic, size, order)."""


class Terminated(Exception):
    """Raised in the main thread by the SIGTERM handler (see `install_sigterm`)."""


def now() -> float:
    """CLOCK_MONOTONIC seconds: comparable across processes (and namespaces) on one machine."""
    return time.monotonic()


# ---------------------------------------------------------------- sockets

def tune(sock: socket.socket, timeout_s: float | None = IO_TIMEOUT_S) -> socket.socket:
    """TCP_NODELAY and a per-operation timeout on a connected socket; returns it."""
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    sock.settimeout(timeout_s)
    return sock


TCP_CC_ENV = "HOSTCTL_TCP_CC"
"""Environment variable naming a TCP congestion control (e.g. cubic) for every socket of the
workloads; the testbed sets it per scenario (the sysctl can't be changed inside a netns here)."""


def set_cc(sock: socket.socket) -> None:
    """TCP_CONGESTION from $HOSTCTL_TCP_CC, if set (accepted sockets inherit the listener's)."""
    cc = os.environ.get(TCP_CC_ENV)
    if cc:
        try:
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_CONGESTION, cc.encode())
        except OSError as e:
            raise OSError(e.errno, f"{TCP_CC_ENV}={cc}: this kernel can't use that congestion control "
                          f"({e.strerror}); see /proc/sys/net/ipv4/tcp_available_congestion_control") from None


def _family(addr: str) -> socket.AddressFamily:
    return socket.AF_INET6 if ":" in addr else socket.AF_INET


def listen(addr: str, port: int, backlog: int = 128) -> socket.socket:
    """A listening TCP socket on addr:port with SO_REUSEADDR (and TCP_NODELAY, inherited by accepts)."""
    srv = socket.socket(_family(addr), socket.SOCK_STREAM)
    try:
        srv.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        srv.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        set_cc(srv)
        srv.bind((addr, port))
        srv.listen(backlog)
    except OSError:
        srv.close()
        raise
    return srv


def accept(srv: socket.socket, deadline: float, io_timeout_s: float = IO_TIMEOUT_S) -> socket.socket:
    """Accept one connection before `deadline` (monotonic); TimeoutError after it."""
    left = deadline - now()
    if left <= 0:
        raise TimeoutError("timed out waiting for peers to connect")
    srv.settimeout(left)
    try:
        conn, _ = srv.accept()
    except socket.timeout:
        raise TimeoutError("timed out waiting for peers to connect") from None
    return tune(conn, io_timeout_s)


def connect_retry(addr: str, port: int, timeout_s: float, io_timeout_s: float = IO_TIMEOUT_S,
                  cancel: threading.Event | None = None) -> socket.socket:
    """Connect to addr:port, retrying refused/unreachable for up to `timeout_s`.

    The programs of one job start concurrently, so a peer may not listen yet.
    Raises TimeoutError (naming the peer and the last error) when time is up,
    ConnectionAbortedError as soon as `cancel` is set (another thread failed).
    """
    deadline = now() + timeout_s
    delay_s = 0.02
    while True:
        sock = socket.socket(_family(addr), socket.SOCK_STREAM)
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        set_cc(sock)
        sock.settimeout(max(0.1, min(5.0, deadline - now())))
        try:
            sock.connect((addr, port))
            return tune(sock, io_timeout_s)
        except OSError as e:
            sock.close()
            code = errno.ETIMEDOUT if isinstance(e, socket.timeout) else e.errno
            if code not in _RETRY_CONNECT:
                raise
            if now() + delay_s >= deadline:
                raise TimeoutError(f"could not connect to {addr}:{port} within {timeout_s:g} s "
                                   f"({os.strerror(code)})") from None
        if cancel is None:
            time.sleep(delay_s)
        elif cancel.wait(delay_s):
            raise ConnectionAbortedError(f"connecting to {addr}:{port} was cancelled")
        delay_s = min(delay_s * 2, 0.25)


def _scratch() -> memoryview:
    buf = getattr(_tls, "buf", None)
    if buf is None:
        buf = _tls.buf = memoryview(bytearray(CHUNK_BYTES))
    return buf


def recv_exact(sock: socket.socket, n: int) -> memoryview:
    """Receive exactly n bytes into this thread's reusable buffer.

    Returns a view of the bytes when n <= CHUNK_BYTES (valid until this thread's
    next call); a larger payload is received in CHUNK_BYTES pieces into the same
    buffer and the view holds only the last piece (payloads are discarded).
    Raises ConnectionError when the peer closes the connection first.
    """
    buf = _scratch()
    left = n
    view = buf[:0]
    while left > 0:
        want = min(left, CHUNK_BYTES)
        got = 0
        while got < want:
            k = sock.recv_into(buf[got:want])
            if k == 0:
                raise ConnectionError(f"peer closed the connection ({n - left + got} of {n} bytes received)")
            got += k
        view = buf[:want]
        left -= want
    return view


def send_blob(sock: socket.socket, n: int) -> int:
    """Send n zero bytes (sendall in CHUNK_BYTES pieces of one preallocated view); returns n."""
    left = n
    while left > 0:
        k = min(left, CHUNK_BYTES)
        sock.sendall(_ZEROS[:k])
        left -= k
    return n


def shutdown_all(socks: Sequence[socket.socket | None]) -> None:
    """Shut down sockets both ways so threads blocked on them return at once."""
    for s in socks:
        if s is None:
            continue
        try:
            s.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass


def close_all(socks: Sequence[socket.socket | None]) -> None:
    for s in socks:
        if s is not None:
            s.close()


HEADER = struct.Struct("!Q")
"""The 8-byte header of a message (an iteration number, or a program's DONE value)."""


class Link:
    """A connected socket and the application bytes moved over it after the handshake.

    Each Link is used by one thread at a time, so the counters need no lock.
    Handshake messages go through `send_struct`/`recv_struct` and are not counted.
    A closed/reset connection or a timeout is raised again naming the peer.
    """

    def __init__(self, sock: socket.socket, peer: str) -> None:
        self.sock = sock
        self.peer = peer
        self.sent_bytes = 0
        self.received_bytes = 0

    @contextlib.contextmanager
    def _named(self) -> Iterator[None]:
        try:
            yield
        except TimeoutError:  # socket.timeout
            raise TimeoutError(f"{self.peer}: nothing moved for {self.sock.gettimeout():g} s "
                               "(I/O timeout)") from None
        except ConnectionError as e:  # EOF, reset, broken pipe
            what = "closed the connection" if isinstance(e, (BrokenPipeError, ConnectionResetError)) else str(e)
            raise ConnectionError(f"{self.peer}: {what}") from None

    def send_struct(self, st: struct.Struct, *values: Any) -> None:
        with self._named():
            self.sock.sendall(st.pack(*values))

    def recv_struct(self, st: struct.Struct) -> tuple[Any, ...]:
        with self._named():
            return st.unpack(recv_exact(self.sock, st.size))

    def send_header(self, value: int) -> None:
        with self._named():
            self.sock.sendall(HEADER.pack(value))
        self.sent_bytes += HEADER.size

    def recv_header(self) -> int:
        with self._named():
            (value,) = HEADER.unpack(recv_exact(self.sock, HEADER.size))
        self.received_bytes += HEADER.size
        return value

    def send_blob(self, n: int) -> None:
        with self._named():
            self.sent_bytes += send_blob(self.sock, n)

    def recv_blob(self, n: int) -> None:
        with self._named():
            recv_exact(self.sock, n)
        self.received_bytes += n

    def close(self) -> None:
        self.sock.close()


def shutdown_links(links: Sequence[Link | None]) -> None:
    shutdown_all([lk.sock for lk in links if lk is not None])


# ---------------------------------------------------------------- threads

def run_parallel(fns: Sequence[Callable[[], T]], abort: Callable[[], None]) -> list[T]:
    """Run fns concurrently (all but the last in threads, the last in this one).

    Returns their results in order. When one fails, `abort()` is called at once
    (it should shut the sockets down so the others stop waiting), all are
    joined (each for at most JOIN_AFTER_ABORT_S once something failed; they are
    daemon threads), and the first exception is raised again. A SIGTERM lands
    in the calling thread, so it aborts the others the same way.
    """
    results: list[Any] = [None] * len(fns)
    errors: list[BaseException] = []
    lock = threading.Lock()

    def run(i: int) -> None:
        try:
            results[i] = fns[i]()
        except BaseException as e:  # noqa: BLE001 - re-raised by the caller below
            with lock:
                first = not errors
                errors.append(e)
            if first:
                abort()

    threads = [threading.Thread(target=run, args=(i,), daemon=True) for i in range(len(fns) - 1)]
    for t in threads:
        t.start()
    try:
        if fns:
            run(len(fns) - 1)
    finally:
        for t in threads:
            _join(t, abort, bounded=bool(errors))
    if errors:
        raise errors[0]
    return results


def _join(t: threading.Thread, abort: Callable[[], None], bounded: bool) -> None:
    """Join t (for at most JOIN_AFTER_ABORT_S when bounded); a SIGTERM while
    waiting aborts the others first, then is re-raised."""
    try:
        t.join(JOIN_AFTER_ABORT_S if bounded else None)
    except BaseException:
        abort()
        t.join(JOIN_AFTER_ABORT_S)
        raise


# ---------------------------------------------------------------- records, signals, CLI

def add_job_args(p: argparse.ArgumentParser) -> None:
    """The options the ps and all-reduce workers share: who they are, what to run, where to write the record."""
    p.add_argument("--job", required=True)
    p.add_argument("--rank", type=nonneg_int, required=True)
    p.add_argument("--iterations", type=pos_int, required=True)
    add_compute_args(p)
    p.add_argument("--model-bytes", type=nonneg_int, required=True)
    p.add_argument("--out", required=True, help="record file ('-' = stdout)")
    p.add_argument("--connect-timeout", type=pos_float, default=60.0)
    p.add_argument("--io-timeout", type=pos_float, default=IO_TIMEOUT_S)


def add_compute_args(p: argparse.ArgumentParser) -> None:
    """--compute and --compute-processor (see hostctl_lab.workloads.compute)."""
    p.add_argument("--compute", type=nonneg_float, required=True,
                   help="seconds of compute per iteration (with the host's processor to itself)")
    p.add_argument("--compute-processor", metavar="NAME",
                   help="compute on this emulated processor of the host, shared by its workers "
                        "(hostctl_lab.workloads.processor; default: compute is a sleep)")


def compute_then_collective(rec: dict[str, Any], iterations: int, compute, compute_s: float, collective) -> None:
    """The loop of a collective job: compute (a `Compute`), then `collective()` as the barrier, per
    iteration; barrier_enter/exit bracket the collective (iter_end = its exit)."""
    rec["t_start"] = now()
    for _ in range(iterations):
        rec["compute_wall_s"].append(compute.run(compute_s))
        rec["barrier_enter"].append(now())
        collective()
        t = now()
        rec["barrier_exit"].append(t)
        rec["iter_end"].append(t)
        rec["barrier_wait_s"].append(t - rec["barrier_enter"][-1])
    rec["t_end"] = now()


def new_record(job: str, kind: str, rank: int | None, role: str = "worker") -> dict[str, Any]:
    """An empty record (see the package docstring); t_start is now until the job really starts."""
    t = now()
    return {"job": job, "kind": kind, "role": role, "rank": rank, "t_start": t, "t_end": t,
            "iter_end": [], "barrier_enter": [], "barrier_exit": [], "barrier_wait_s": [],
            "compute_wall_s": [], "bytes_sent": 0, "bytes_received": 0, "errors": []}


def write_record(path: str, rec: dict[str, Any]) -> None:
    """Write rec as JSON to path atomically (tmp file + os.replace); "-" means stdout."""
    text = json.dumps(rec) + "\n"
    if path == "-":
        sys.stdout.write(text)
        sys.stdout.flush()
        return
    tmp = f"{path}.tmp.{os.getpid()}"
    try:
        with open(tmp, "w") as f:
            f.write(text)
        os.replace(tmp, path)
    except BaseException:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise


def describe(e: BaseException) -> str:
    """One line for the record's "errors": the exception type and message."""
    if isinstance(e, Terminated):
        return "terminated by SIGTERM"
    msg = str(e)
    if isinstance(e, TimeoutError) and msg in ("", "timed out"):  # socket.timeout is TimeoutError
        return "TimeoutError: a peer did not answer within the I/O timeout"
    lines = [ln.strip() for ln in msg.splitlines() if ln.strip()]
    msg = lines[0][:400] if lines else e.__class__.__name__  # one line (gloo's messages have several)
    return f"{e.__class__.__name__}: {msg}"


def exit_code(errors: list[str], terminated: bool) -> int:
    """0 when the job completed, 143 after SIGTERM, 1 after any other error."""
    if terminated:
        return EXIT_SIGTERM
    return EXIT_ERROR if errors else 0


def install_sigterm() -> None:
    """SIGTERM raises Terminated in the main thread; the program catches it, closes
    its sockets, writes its record with the error "terminated by SIGTERM" and
    exits 143 without a traceback."""

    def handler(_sig: int, _frame: object) -> None:
        signal.signal(signal.SIGTERM, signal.SIG_DFL)  # a second SIGTERM kills outright
        raise Terminated()

    signal.signal(signal.SIGTERM, handler)


EXPECTED_ERRORS = (OSError, ProtocolError, threading.BrokenBarrierError)
"""Failures of the job itself (peer gone, timeout, protocol): one line on stderr, no traceback."""


def run_recorded(prog: str, rec: dict[str, Any], out: str | None, body: Callable[[], None],
                 cleanup: Callable[[], None] = lambda: None,
                 expected: tuple[type[BaseException], ...] = ()) -> int:
    """Run body(), which fills rec as it goes; always write rec to out (unless None); return the exit code.

    An error (or SIGTERM) is added to rec["errors"], t_end becomes the time it
    hit, each error is printed as one line "PROG: ERROR" on stderr (a traceback
    only for an unexpected exception, i.e. a bug: not EXPECTED_ERRORS nor
    `expected`) and the code is 1 (143).
    cleanup() (closing sockets) runs in every case, before the record is written.
    """
    terminated = False
    try:
        body()
    except Terminated as e:
        terminated = True
        rec["errors"].append(describe(e))
    except EXPECTED_ERRORS + expected as e:
        rec["errors"].append(describe(e))
    except Exception as e:  # noqa: BLE001 - a bug: still write the record, show where
        rec["errors"].append(describe(e))
        traceback.print_exc()
    finally:
        signal.signal(signal.SIGTERM, signal.SIG_IGN)  # we are finishing anyway: write the record
        cleanup()
    if rec["errors"]:
        rec["t_end"] = now()
        for err in rec["errors"]:
            sys.stderr.write(f"{prog}: {err}\n")
    try:
        if out is not None:
            write_record(out, rec)
    except OSError as e:
        sys.stderr.write(f"{prog}: cannot write the record to {out}: {e.strerror or e}\n")
        return EXIT_ERROR
    return exit_code(rec["errors"], terminated)


def check_out_path(ap: argparse.ArgumentParser, out: str | None) -> None:
    """Fail at once (exit 2) when the record could not be written at the end."""
    if out in (None, "-"):
        return
    folder = os.path.dirname(os.path.abspath(out))
    if not os.path.isdir(folder):
        ap.error(f"--out {out}: folder {folder} does not exist")
    if not os.access(folder, os.W_OK):
        ap.error(f"--out {out}: folder {folder} is not writable")


class ArgParser(argparse.ArgumentParser):
    """argparse whose errors are one line on stderr ("PROG: error: MSG"), exit 2."""

    def error(self, message: str) -> NoReturn:
        sys.stderr.write(f"{self.prog}: error: {message}\n")
        sys.exit(EXIT_USAGE)


def parse_hostport(text: str) -> tuple[str, int]:
    """"10.0.0.1:9000" -> ("10.0.0.1", 9000); "[::1]:9000" -> ("::1", 9000).

    Raises argparse.ArgumentTypeError (usable as an argparse `type=`)."""
    host, sep, port = text.strip().rpartition(":")
    host = host.strip("[]")
    if not sep or not host or not port.isdigit() or not 1 <= int(port) <= 65535:
        raise argparse.ArgumentTypeError(f"expected ADDR:PORT with a port in 1-65535, got {text!r}")
    return host, int(port)


def hostport_list(text: str) -> list[tuple[str, int]]:
    """"a:1,b:2" -> [(a, 1), (b, 2)] (argparse `type=`)."""
    items = [t for t in text.split(",") if t.strip()]
    if not items:
        raise argparse.ArgumentTypeError("expected ADDR:PORT[,ADDR:PORT...]")
    return [parse_hostport(t) for t in items]


def _number(kind: type, lo: float, what: str) -> Callable[[str], Any]:
    def parse(text: str) -> Any:
        try:
            v = kind(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"expected {what}, got {text!r}") from None
        if v != v or v < lo or v == float("inf"):  # NaN, too small, infinite
            raise argparse.ArgumentTypeError(f"expected {what}, got {text!r}")
        return v

    parse.__name__ = what  # argparse names the type in some messages
    return parse


pos_int = _number(int, 1, "an integer >= 1")
nonneg_int = _number(int, 0, "an integer >= 0")
nonneg_float = _number(float, 0.0, "a number of seconds >= 0")
pos_float = _number(float, 1e-9, "a number of seconds > 0")


def port_number(text: str) -> int:
    """A TCP port 1-65535 (argparse `type=`)."""
    v = nonneg_int(text)
    if not 1 <= v <= 65535:
        raise argparse.ArgumentTypeError(f"expected a port in 1-65535, got {text!r}")
    return v
