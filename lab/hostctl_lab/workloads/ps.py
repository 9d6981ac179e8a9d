"""Synchronous parameter-server job over real TCP.

  python -m hostctl_lab.workloads.ps server --bind ADDR --port P --workers W --iterations N
         --shard-bytes B [--job NAME] [--out FILE] [--connect-timeout 60] [--io-timeout 300]
  python -m hostctl_lab.workloads.ps worker --job NAME --rank K --ps ADDR:PORT[,ADDR:PORT...]
         --iterations N --compute SECONDS --model-bytes B --out FILE
         [--backward SHARE --buckets B] [--connect-timeout 60] [--io-timeout 300]

The model of B bytes is split into P shards, one per server in --ps order:
shard i has B // P bytes, the last one also gets the remainder.

Protocol (all integers big-endian):

1. Each worker connects to every server (retrying until --connect-timeout, as
   all processes start together) and sends a hello ``"HPSW" rank:u32
   shard_bytes:u64``; the server answers ``"HPSS" shard_bytes:u64 status:u32``
   (status 0 = accepted; 1 = rank already taken; 2 = shard size differs, which
   means --model-bytes or the --ps list does not match the servers). Rejected
   connections are closed and the server goes on accepting. A server accepts
   exactly W workers; its listening socket stays open (idle) until it exits.
2. For iteration i = 0..N-1 the server sends, to ALL workers at once (one thread
   per connection, so the W update flows contend on the link), the header
   ``i:u64 t_grad:f64`` and its shard (the model update); then it receives each
   worker's gradient shard (same size) and waits until all W have arrived (the
   barrier). ``t_grad`` is when this worker's previous gradient had fully
   arrived at this server (CLOCK_MONOTONIC, shared by all processes of one
   machine; 0 for i = 0): the moment the worker really entered the barrier.
3. After N iterations it sends the header ``DONE`` (2**64-1) with the last
   ``t_grad`` and exits 0.

The update flows go server -> worker over the connection the worker made, so
the server's egress flows have the listening port as source port.

Worker, per iteration i: receive header + shard from every server concurrently
(one thread per server); barrier_exit[i] = arrival of the LAST server's header
of iteration i (for i = 0 the job start, for i >= 1 the release of barrier
i-1); then sleep --compute seconds; then send the gradient shards to all
servers concurrently (``gradient_sent[i]`` = when all those sends returned,
i.e. the kernel took the bytes). With --buckets B > 1 the gradient overlaps the
backward pass, as TensorFlow's per-variable sends and PyTorch's gradient buckets
do: the last --backward share of the compute time is the backward pass, and
after each B-th of it one bucket (a B-th of every shard, shards() split) is
ready and sent, so only the last bucket follows the end of compute.
barrier_enter[i] = the latest ``t_grad`` the servers report with the next header
(when the last of this worker's gradient shards had arrived: a worker is in the barrier once its gradient is delivered,
as a TensorFlow worker is once its push returns). After the last iteration
barrier_exit[N] = arrival of the last DONE header (= t_end). Barrier wait i =
barrier_exit[i+1] - barrier_enter[i], and iter_end[i] = barrier_exit[i+1] (the
release of barrier i: all gradients of iteration i were aggregated by every
server). t_start is taken after connecting, before the first header. Byte
counts exclude the hello: a worker receives N*B + 16*P*(N+1) bytes and sends N*B.

The worker writes its record (see hostctl_lab.workloads) to --out and exits 0, or
1 after an error (peer closed, timeout), 143 after SIGTERM; 2 = bad arguments.
"""

from __future__ import annotations

import argparse
import struct
import sys
import threading
from functools import partial

from hostctl.core.traffic import shards
from hostctl_lab.workloads.common import (
    HELLO_TIMEOUT_S, IO_TIMEOUT_S, ArgParser, add_job_args, Link, ProtocolError, accept, check_out_path, close_all, connect_retry,
    hostport_list, install_sigterm, listen, new_record, nonneg_int, now, pos_float,
    pos_int, port_number, run_parallel, run_recorded, shutdown_links,
)
from hostctl_lab.workloads.compute import Compute, compute_from_args


def _share(text: str) -> float:
    """argparse type: a number within 0..1."""
    try:
        v = float(text)
    except ValueError:
        v = float("nan")
    if not 0.0 <= v <= 1.0:  # also NaN
        raise argparse.ArgumentTypeError(f"expected a share within 0..1, got {text!r}")
    return v

PROG = "hostctl_lab.workloads.ps"
DONE = 2**64 - 1
HELLO = struct.Struct("!4sIQ")   # "HPSW", rank, shard_bytes the worker expects
ACK = struct.Struct("!4sQI")     # "HPSS", shard_bytes the server serves, status
STAMP = struct.Struct("!d")       # after each header: when the worker's last gradient arrived
HELLO_MAGIC = b"HPSW"
ACK_MAGIC = b"HPSS"
ACCEPTED, RANK_TAKEN, SHARD_MISMATCH = 0, 1, 2
_REJECT_TEXT = {RANK_TAKEN: "rank already connected", SHARD_MISMATCH: "shard size differs"}


# ---------------------------------------------------------------- server

def _accept_workers(srv, workers: int, shard_bytes: int, deadline: float, io_timeout_s: float) -> list[Link]:
    """Accept connections until `workers` valid hellos with distinct ranks; reject the others."""
    links: dict[int, Link] = {}
    while len(links) < workers:
        try:
            conn = accept(srv, deadline, HELLO_TIMEOUT_S)
        except TimeoutError:
            raise TimeoutError(f"only {len(links)} of {workers} workers connected in time "
                               "(--connect-timeout)") from None
        link = Link(conn, "worker")
        try:
            magic, rank, want_bytes = link.recv_struct(HELLO)
        except OSError:
            link.close()  # not one of our workers (a probe, a scanner): ignore it
            continue
        if magic != HELLO_MAGIC:
            link.close()
            continue
        status = RANK_TAKEN if rank in links else SHARD_MISMATCH if want_bytes != shard_bytes else ACCEPTED
        try:
            link.send_struct(ACK, ACK_MAGIC, shard_bytes, status)
        except OSError:
            status = -1
        if status != ACCEPTED:
            if status > 0:
                sys.stderr.write(f"{PROG} server: rejected worker rank {rank}: {_REJECT_TEXT[status]}\n")
            link.close()
            continue
        link.peer = f"worker {rank}"
        conn.settimeout(io_timeout_s)
        links[rank] = link
    return [links[r] for r in sorted(links)]


def _send_stamp(link: Link, t_grad: float) -> None:
    link.send_struct(STAMP, t_grad)
    link.sent_bytes += STAMP.size  # part of the header, counted like it


def _serve_worker(link: Link, iterations: int, shard_bytes: int, barrier: threading.Barrier,
                  io_timeout_s: float) -> None:
    """One worker connection: N x (header + stamp + shard out, gradient in, barrier), then DONE."""
    t_grad = 0.0
    for i in range(iterations):
        link.send_header(i)
        _send_stamp(link, t_grad)
        link.send_blob(shard_bytes)
        link.recv_blob(shard_bytes)
        t_grad = now()
        barrier.wait(io_timeout_s)
    link.send_header(DONE)
    _send_stamp(link, t_grad)


def run_server(a: argparse.Namespace) -> int:
    rec = new_record(a.job, "ps", None, role="server")
    rec.update(port=a.port, workers=a.workers, shard_bytes=a.shard_bytes)
    links: list[Link] = []
    srv = None

    def body() -> None:
        nonlocal srv
        srv = listen(a.bind, a.port)
        links.extend(_accept_workers(srv, a.workers, a.shard_bytes, now() + a.connect_timeout, a.io_timeout))
        rec["t_start"] = now()
        barrier = threading.Barrier(a.workers)

        def abort() -> None:
            barrier.abort()
            shutdown_links(links)

        run_parallel([partial(_serve_worker, lk, a.iterations, a.shard_bytes, barrier, a.io_timeout)
                      for lk in links], abort)
        rec["t_end"] = now()

    def cleanup() -> None:
        rec["bytes_sent"] = sum(lk.sent_bytes for lk in links)
        rec["bytes_received"] = sum(lk.received_bytes for lk in links)
        close_all([lk.sock for lk in links] + [srv])

    return run_recorded(f"{PROG} server :{a.port}", rec, a.out, body, cleanup)


# ---------------------------------------------------------------- worker

def _connect_servers(servers: list[tuple[str, int]], rank: int, sizes: list[int],
                     timeout_s: float, io_timeout_s: float, links: list[Link]) -> None:
    """Connect and say hello to every server in order (appending to `links` as it goes)."""
    deadline = now() + timeout_s
    for (addr, port), shard_bytes in zip(servers, sizes):
        sock = connect_retry(addr, port, max(0.0, deadline - now()), io_timeout_s)
        link = Link(sock, f"server {addr}:{port}")
        links.append(link)
        link.send_struct(HELLO, HELLO_MAGIC, rank, shard_bytes)
        magic, their_bytes, status = link.recv_struct(ACK)
        if magic != ACK_MAGIC:
            raise ProtocolError(f"{link.peer} is not a ps server (bad hello answer)")
        if status == SHARD_MISMATCH:
            raise ProtocolError(f"{link.peer} serves {their_bytes}-byte shards, this worker expects "
                                f"{shard_bytes} (--model-bytes or --ps does not match the servers)")
        if status != ACCEPTED:
            raise ProtocolError(f"{link.peer} rejected rank {rank}: {_REJECT_TEXT.get(status, status)}")


def _recv_update(link: Link, expect: int, shard_bytes: int) -> tuple[float, float]:
    """Receive one header (must be `expect`), its stamp and, unless DONE, the shard;
    returns (the header's arrival time, the server's t_grad)."""
    value = link.recv_header()
    t = now()
    if value != expect:
        want = "DONE" if expect == DONE else f"iteration {expect}"
        got = "DONE" if value == DONE else f"iteration {value}"
        raise ProtocolError(f"{link.peer} sent {got}, expected {want}")
    (t_grad,) = link.recv_struct(STAMP)
    link.received_bytes += STAMP.size
    if expect != DONE:
        link.recv_blob(shard_bytes)
    return t, t_grad


def _release(rec: dict, got: list[tuple[float, float]]) -> None:
    """Barrier of the previous iteration released when the last server's header of the next one
    arrived; it was entered when the last gradient shard of this worker arrived at its server."""
    t_exit = max(t for t, _ in got)
    rec["barrier_exit"].append(t_exit)
    if rec["gradient_sent"]:
        t_enter = max(g for _, g in got)
        rec["barrier_enter"].append(t_enter)
        rec["iter_end"].append(t_exit)
        rec["barrier_wait_s"].append(t_exit - t_enter)


def _compute_and_push(links: list[Link], sizes: list[int], a: argparse.Namespace, abort, compute: Compute) -> float:
    """--compute seconds of compute, and the gradient to every server: in one burst after it
    (--buckets 1), or bucket by bucket as the backward pass (its last --backward share)
    produces them: bucket b of B is sent once b/B of the backward pass is done.
    Returns the compute's wall time."""
    if a.buckets <= 1:
        wall = compute.run(a.compute)
        run_parallel([partial(lk.send_blob, n) for lk, n in zip(links, sizes)], abort)
        return wall
    forward_s = a.compute * (1.0 - a.backward)
    step_s = a.compute * a.backward / a.buckets
    ready = [threading.Event() for _ in range(a.buckets)]
    failed = threading.Event()
    wall = 0.0

    def produce() -> None:
        nonlocal wall
        try:
            compute.begin()
            compute.until(forward_s)
            for b in range(a.buckets):
                compute.until(forward_s + (b + 1) * step_s)
                ready[b].set()
            wall = now() - compute.t0
        except BaseException:
            failed.set()
            raise

    def push(link: Link, nbytes: int) -> None:
        for b, part in enumerate(shards(nbytes, a.buckets)):
            while not ready[b].wait(0.2):
                if failed.is_set():
                    return
            link.send_blob(part)

    run_parallel([produce, *(partial(push, lk, n) for lk, n in zip(links, sizes))], abort)
    return wall


def run_worker(a: argparse.Namespace) -> int:
    rec = new_record(a.job, "ps", a.rank)
    rec.update(backward=a.backward, buckets=a.buckets)
    compute = a.compute_step
    rec["compute_processor"] = compute.processor
    rec["gradient_sent"] = []
    rec["compute_start"] = []  # the whole update had arrived: phases are update, compute, gradient
    sizes = shards(a.model_bytes, len(a.ps))
    links: list[Link] = []

    def abort() -> None:
        shutdown_links(links)

    def body() -> None:
        _connect_servers(a.ps, a.rank, sizes, a.connect_timeout, a.io_timeout, links)
        rec["t_start"] = now()
        for i in range(a.iterations):
            _release(rec, run_parallel([partial(_recv_update, lk, i, n) for lk, n in zip(links, sizes)], abort))
            rec["compute_start"].append(now())
            rec["compute_wall_s"].append(_compute_and_push(links, sizes, a, abort, compute))
            rec["gradient_sent"].append(now())
        _release(rec, run_parallel([partial(_recv_update, lk, DONE, 0) for lk in links], abort))
        rec["t_end"] = rec["barrier_exit"][-1]

    def cleanup() -> None:
        rec["bytes_sent"] = sum(lk.sent_bytes for lk in links)
        rec["bytes_received"] = sum(lk.received_bytes for lk in links)
        close_all([lk.sock for lk in links])

    return run_recorded(f"{PROG} worker {a.job}/{a.rank}", rec, a.out, body, cleanup)


# ---------------------------------------------------------------- CLI

def _parser() -> ArgParser:
    ap = ArgParser(prog=PROG, description="Synchronous parameter-server job over real TCP.")
    sub = ap.add_subparsers(dest="cmd", required=True, metavar="{server,worker}")
    s = sub.add_parser("server", help="one parameter server (one shard of the model)")
    s.add_argument("--bind", required=True, help="address to listen on")
    s.add_argument("--port", type=port_number, required=True)
    s.add_argument("--workers", type=pos_int, required=True, help="accept exactly this many workers")
    s.add_argument("--iterations", type=pos_int, required=True)
    s.add_argument("--shard-bytes", type=nonneg_int, required=True, help="size of this server's shard")
    s.add_argument("--job", default="ps", help="job name, for the record")
    s.add_argument("--out", help="write the server's record here ('-' = stdout)")
    s.add_argument("--connect-timeout", type=pos_float, default=60.0,
                   help="seconds to wait for all workers to connect (default 60)")
    s.add_argument("--io-timeout", type=pos_float, default=IO_TIMEOUT_S,
                   help=f"seconds one send/receive may block (default {IO_TIMEOUT_S:g})")
    w = sub.add_parser("worker", help="one worker")
    w.add_argument("--ps", type=hostport_list, required=True, metavar="ADDR:PORT[,ADDR:PORT...]")
    add_job_args(w)
    w.add_argument("--backward", type=_share, default=0.0,
                   help="share of --compute that is the backward pass (with --buckets > 1)")
    w.add_argument("--buckets", type=pos_int, default=1,
                   help="send the gradient in this many buckets during the backward pass (default 1: "
                        "one burst after compute)")
    return ap


def main(argv: list[str] | None = None) -> int:
    ap = _parser()
    a = ap.parse_args(argv)
    check_out_path(ap, a.out)
    if a.cmd == "worker" and a.model_bytes < len(a.ps):
        ap.error(f"--model-bytes {a.model_bytes} is smaller than the number of servers ({len(a.ps)})")
    if a.cmd == "worker" and (a.buckets > 1) != (a.backward > 0):
        ap.error("give --backward (> 0) and --buckets (> 1) together, e.g. --backward 0.67 --buckets 8")
    if a.cmd == "worker" and a.buckets > a.model_bytes // len(a.ps):
        ap.error(f"--buckets {a.buckets} is more than the bytes of a shard ({a.model_bytes // len(a.ps)})")
    if a.cmd == "worker":
        a.compute_step = compute_from_args(ap, a)
    install_sigterm()
    return run_server(a) if a.cmd == "server" else run_worker(a)


if __name__ == "__main__":
    sys.exit(main())
