"""Bulk TCP traffic with per-bucket throughput logs (real sockets, real TCP).

The server plays a parameter server pushing a model update: every accepted
connection is sent zeros as fast as TCP allows until the peer closes it, so the
egress flow has the *listening port* as its source port. The client receives for
a number of seconds and prints JSON: bytes per bucket with wall-clock bucket
start times, so tests can line traffic up with rotation epochs.

With ``serve --sink`` the server instead reads and discards (a parameter server
receiving gradients) and ``send`` is the client: it sends for a number of seconds
and prints the same JSON for the bytes it handed to TCP.

With ``serve --burst BYTES --period S`` the server sends in iterations, as a
synchronous parameter server does: at every multiple of S seconds of the wall clock
it sends BYTES on every connection at once, then the connection is idle until the
next multiple (the workers' compute). An iteration that takes longer than S skips
to the next multiple.

  python -m hostctl_lab.tools.bulk serve --bind 10.77.0.1 --port 5201 [--sink | --burst 256KiB --period 0.7]
  python -m hostctl_lab.tools.bulk recv --connect 10.77.0.1:5201 --seconds 5 [--bucket 0.1]
  python -m hostctl_lab.tools.bulk send --connect 10.77.0.1:5201 --seconds 5 [--bucket 0.1]
"""

from __future__ import annotations

import argparse
import json
import math
import signal
import socket
import sys
import threading
import time

from hostctl_lab.workloads.common import connect_retry, listen

CHUNK = 256 * 1024


def serve(bind: str, port: int, sink: bool = False, burst: int = 0, period_s: float = 0.0) -> None:
    srv = listen(bind, port, backlog=64)
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
    payload = b"\0" * CHUNK
    update = memoryview(b"\0" * burst) if burst else None
    print(f"listening {bind}:{port}", flush=True)

    def push(conn: socket.socket) -> None:
        with conn:
            try:
                while True:
                    if update is None:
                        conn.sendall(payload)
                        continue
                    now = time.time()
                    time.sleep((math.floor(now / period_s) + 1) * period_s - now)
                    conn.sendall(update)
            except OSError:
                pass

    def drain(conn: socket.socket) -> None:
        with conn:
            try:
                while conn.recv(CHUNK):
                    pass
            except OSError:
                pass

    while True:
        conn, _ = srv.accept()
        threading.Thread(target=drain if sink else push, args=(conn,), daemon=True).start()


def _timed(addr: str, port: int, seconds: float, bucket_s: float, sending: bool) -> dict:
    """Receive (or send) for `seconds`; bytes per bucket of wall-clock time."""
    s = connect_retry(addr, port, timeout_s=10.0)  # the server may still be starting
    s.settimeout(1.0)
    payload = memoryview(b"\0" * (CHUNK // 4))
    start = time.time()
    end = start + seconds
    nb = int(math.ceil(seconds / bucket_s))
    buckets = [0] * nb
    total = 0
    try:
        while True:
            now = time.time()
            if now >= end:
                break
            try:
                n = s.send(payload) if sending else len(s.recv(CHUNK))
            except socket.timeout:
                continue
            if not n:
                break
            i = min(int((time.time() - start) / bucket_s), nb - 1)
            buckets[i] += n
            total += n
    finally:
        s.close()
    return {"start": start, "bucket_s": bucket_s, "bytes": buckets, "total_bytes": total,
            "seconds": seconds}



def _size(text: str) -> int:
    from hostctl.core.units import parse_size_bytes
    from hostctl.errors import ConfigError

    try:
        return parse_size_bytes(text, what="--burst")
    except ConfigError as e:
        raise argparse.ArgumentTypeError(str(e)) from None


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(prog="bulk")
    sub = ap.add_subparsers(dest="cmd", required=True)
    s = sub.add_parser("serve")
    s.add_argument("--bind", default="0.0.0.0")
    s.add_argument("--port", type=int, required=True)
    s.add_argument("--sink", action="store_true", help="read and discard instead of sending")
    s.add_argument("--burst", type=_size, default=0, help="send this many bytes per connection per iteration "
                   "(e.g. 256KiB; with --period)")
    s.add_argument("--period", type=float, default=0.0, help="seconds per iteration (with --burst)")
    for cmd in ("recv", "send"):
        r = sub.add_parser(cmd)
        r.add_argument("--connect", required=True, help="ADDR:PORT")
        r.add_argument("--seconds", type=float, default=5.0)
        r.add_argument("--bucket", type=float, default=0.1)
    a = ap.parse_args(argv)
    if a.cmd == "serve" and ((a.burst > 0) != (a.period > 0) or (a.burst and a.sink)):
        ap.error("--burst and --period go together (bytes per connection every period seconds), without --sink")
    if a.cmd == "serve":
        serve(a.bind, a.port, a.sink, a.burst, a.period)
    else:
        host, _, port = a.connect.rpartition(":")
        print(json.dumps(_timed(host.strip("[]"), int(port), a.seconds, a.bucket, sending=a.cmd == "send")))


if __name__ == "__main__":
    main()
