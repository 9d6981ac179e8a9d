"""A parameter-server-style DL job over real TCP, for the demo and tests.

Each iteration every worker asks its PS for the model update (``model_bytes``),
receives it, then "computes" for ``compute_s``; the PS answers all workers at
once, so updates of colocated jobs collide on the PS host's egress link, as in
TensorLights. (The full workload with gradient uploads and barriers comes with
the testbed.)

  python -m hostctl.tools.psjob serve --bind ADDR --port P --model-bytes N
  python -m hostctl.tools.psjob work --connect ADDR:P --workers W --iterations I --compute 0.2
The ``work`` side runs W worker connections in threads with a barrier per
iteration and prints JSON: job completion time, per-iteration times and the
barrier wait (mean, standard deviation) of each iteration.
"""

from __future__ import annotations

import argparse
import json
import signal
import socket
import statistics
import sys
import threading
import time

REQ = b"U"


def serve(bind: str, port: int, model_bytes: int) -> None:
    srv = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    srv.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    srv.bind((bind, port))
    srv.listen(128)
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
    blob = b"\0" * model_bytes

    def handle(conn: socket.socket) -> None:
        with conn:
            try:
                while conn.recv(1) == REQ:
                    conn.sendall(blob)
            except OSError:
                pass

    while True:
        conn, _ = srv.accept()
        conn.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        threading.Thread(target=handle, args=(conn,), daemon=True).start()


def _recv_exact(s: socket.socket, n: int) -> None:
    while n > 0:
        chunk = s.recv(min(n, 1 << 20))
        if not chunk:
            raise ConnectionError("PS closed the connection")
        n -= len(chunk)


def work(addr: str, port: int, workers: int, iterations: int, compute_s: float, model_bytes: int) -> dict:
    socks = [socket.create_connection((addr, port), timeout=60) for _ in range(workers)]
    barrier = threading.Barrier(workers)
    arrive = [[0.0] * iterations for _ in range(workers)]
    leave = [[0.0] * iterations for _ in range(workers)]
    errors: list[str] = []

    def worker(w: int) -> None:
        s = socks[w]
        try:
            for it in range(iterations):
                s.sendall(REQ)
                _recv_exact(s, model_bytes)
                time.sleep(compute_s)
                arrive[w][it] = time.monotonic()
                barrier.wait()
                leave[w][it] = time.monotonic()
        except Exception as e:  # noqa: BLE001 - reported in the JSON
            errors.append(repr(e))
            barrier.abort()

    t0 = time.monotonic()
    threads = [threading.Thread(target=worker, args=(w,)) for w in range(workers)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    jct = time.monotonic() - t0
    for s in socks:
        s.close()
    waits = [[leave[w][it] - arrive[w][it] for w in range(workers)] for it in range(iterations)]
    ends = [max(leave[w][it] for w in range(workers)) for it in range(iterations)]
    iter_s = [b - a for a, b in zip([t0] + ends[:-1], ends)]
    return {"jct_s": jct, "iteration_s": iter_s, "errors": errors,
            "barrier_wait_mean_s": [statistics.fmean(w) for w in waits],
            "barrier_wait_std_s": [statistics.pstdev(w) for w in waits]}


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(prog="psjob")
    sub = ap.add_subparsers(dest="cmd", required=True)
    s = sub.add_parser("serve")
    s.add_argument("--bind", default="0.0.0.0")
    s.add_argument("--port", type=int, required=True)
    s.add_argument("--model-bytes", type=int, required=True)
    w = sub.add_parser("work")
    w.add_argument("--connect", required=True)
    w.add_argument("--workers", type=int, default=2)
    w.add_argument("--iterations", type=int, default=10)
    w.add_argument("--compute", type=float, default=0.2)
    w.add_argument("--model-bytes", type=int, required=True)
    a = ap.parse_args(argv)
    if a.cmd == "serve":
        serve(a.bind, a.port, a.model_bytes)
    else:
        host, _, port = a.connect.rpartition(":")
        print(json.dumps(work(host, int(port), a.workers, a.iterations, a.compute, a.model_bytes)))


if __name__ == "__main__":
    main()
