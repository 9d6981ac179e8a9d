"""One side of the soak benchmark's jobs (benchmarks/soak.py), run inside a network namespace: many
jobs' sockets in one process, commanded line by line on stdin.

  ps side:  open PORT BURST_BYTES PERIOD_S   listen on ADDR:PORT; every connection gets BURST_BYTES at
                                             every multiple of PERIOD_S of the wall clock (a parameter
                                             server's model updates)
            close PORT                       close the listener and its connections (the job leaves)
  wk side:  connect PORT CONNS SECONDS       CONNS connections to ADDR:PORT, received from for SECONDS
  both:     quit

    python benchmarks/_soak_side.py ps|wk ADDR
"""

from __future__ import annotations

import math
import socket
import sys
import threading
import time


def _push(conn: socket.socket, burst: int, period: float, stop: threading.Event) -> None:
    data = memoryview(b"\0" * burst)
    with conn:
        try:
            while not stop.is_set():
                now = time.time()
                time.sleep((math.floor(now / period) + 1) * period - now)
                conn.sendall(data)
        except OSError:
            pass


def _serve(srv: socket.socket, burst: int, period: float, stop: threading.Event, conns: list) -> None:
    while not stop.is_set():
        try:
            c, _ = srv.accept()
        except OSError:
            return
        conns.append(c)
        threading.Thread(target=_push, args=(c, burst, period, stop), daemon=True).start()


def _recv(addr: str, port: int, seconds: float) -> None:
    end = time.monotonic() + seconds
    s = None
    while s is None and time.monotonic() < end:
        try:
            s = socket.create_connection((addr, port), timeout=1.0)
        except OSError:
            time.sleep(0.1)
    if s is None:
        return
    with s:
        s.settimeout(0.5)
        while time.monotonic() < end:
            try:
                if not s.recv(1 << 16):
                    return
            except TimeoutError:
                continue
            except OSError:
                return


def main() -> None:
    side, addr = sys.argv[1], sys.argv[2]
    jobs: dict[int, tuple[socket.socket, threading.Event, list]] = {}
    for line in sys.stdin:
        cmd, *args = line.split()
        if cmd == "quit":
            break
        if cmd == "open" and side == "ps":
            port, burst, period = int(args[0]), int(args[1]), float(args[2])
            srv = socket.socket()
            srv.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            srv.bind((addr, port))
            srv.listen(16)
            stop, conns = threading.Event(), []
            jobs[port] = (srv, stop, conns)
            threading.Thread(target=_serve, args=(srv, burst, period, stop, conns), daemon=True).start()
        elif cmd == "close" and side == "ps":
            srv, stop, conns = jobs.pop(int(args[0]))
            stop.set()
            try:  # (wakes the thread blocked in accept(): close() alone would leave the port listening)
                srv.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
            srv.close()
            for c in conns:
                try:
                    c.shutdown(socket.SHUT_RDWR)
                except OSError:
                    pass
        elif cmd == "connect" and side == "wk":
            port, n, seconds = int(args[0]), int(args[1]), float(args[2])
            for _ in range(n):
                threading.Thread(target=_recv, args=(addr, port, seconds), daemon=True).start()
        print("ok", flush=True)


if __name__ == "__main__":
    main()
