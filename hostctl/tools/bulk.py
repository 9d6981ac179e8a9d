"""Bulk TCP traffic with per-bucket throughput logs (real sockets, real TCP).

The server plays a parameter server pushing a model update: every accepted
connection is sent zeros as fast as TCP allows until the peer closes it, so the
egress flow has the *listening port* as its source port. The client receives for
a number of seconds and prints JSON: bytes per bucket with wall-clock bucket
start times, so tests can line traffic up with rotation epochs.

With ``serve --sink`` the server instead reads and discards (a parameter server
receiving gradients) and ``send`` is the client: it sends for a number of seconds
and prints the same JSON for the bytes it handed to TCP.

  python -m hostctl.tools.bulk serve --bind 10.77.0.1 --port 5201 [--sink]
  python -m hostctl.tools.bulk recv --connect 10.77.0.1:5201 --seconds 5 [--bucket 0.1]
  python -m hostctl.tools.bulk send --connect 10.77.0.1:5201 --seconds 5 [--bucket 0.1]
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

from hostctl.workloads.common import connect_retry, listen

CHUNK = 256 * 1024


def serve(bind: str, port: int, sink: bool = False) -> None:
    srv = listen(bind, port, backlog=64)
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
    payload = b"\0" * CHUNK
    print(f"listening {bind}:{port}", flush=True)

    def push(conn: socket.socket) -> None:
        with conn:
            try:
                while True:
                    conn.sendall(payload)
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



def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(prog="bulk")
    sub = ap.add_subparsers(dest="cmd", required=True)
    s = sub.add_parser("serve")
    s.add_argument("--bind", default="0.0.0.0")
    s.add_argument("--port", type=int, required=True)
    s.add_argument("--sink", action="store_true", help="read and discard instead of sending")
    for cmd in ("recv", "send"):
        r = sub.add_parser(cmd)
        r.add_argument("--connect", required=True, help="ADDR:PORT")
        r.add_argument("--seconds", type=float, default=5.0)
        r.add_argument("--bucket", type=float, default=0.1)
    a = ap.parse_args(argv)
    if a.cmd == "serve":
        serve(a.bind, a.port, a.sink)
    else:
        host, _, port = a.connect.rpartition(":")
        print(json.dumps(_timed(host.strip("[]"), int(port), a.seconds, a.bucket, sending=a.cmd == "send")))


if __name__ == "__main__":
    main()
