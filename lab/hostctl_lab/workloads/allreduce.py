"""Ring all-reduce job over persistent TCP connections.

  python -m hostctl_lab.workloads.allreduce worker --job NAME --rank K --world W --bind ADDR --port P
         --prev ADDR:PORT --iterations N --compute SECONDS --model-bytes B --out FILE
         [--connect-timeout 60] [--io-timeout 300]

Ring: rank k LISTENS on ADDR:P and rank (k+1) mod W connects to it; rank k
connects to --prev, the listener of rank (k-1) mod W. Rank k SENDS to rank k+1
over the socket it ACCEPTED (so its egress flow has the listening port as
source port) and RECEIVES from rank k-1 over the connection it made. Each
connection carries data one way only.

Setup (cannot deadlock): listen first; connect to --prev with retry in a
thread while this thread accepts. The connecting side says hello ``"HARW"
rank:u32 world:u32 chunk_bytes:u64`` and the listener answers ``"HARA"
status:u32`` (0 = accepted; 1 = wrong rank, not our successor; 2 = world or
chunk size differs). Rejected connections are closed; the listener goes on
accepting until --connect-timeout. The listening socket stays open (idle) until
the program exits.

Per iteration: sleep --compute seconds; barrier_enter = now; 2(W-1) steps
(W-1 of reduce-scatter, then W-1 of all-gather), each step sending one chunk of
ceil(B/W) bytes to rank k+1 and receiving one chunk from rank k-1 concurrently
(a sender thread), both finished before the next step; barrier_exit = now =
iter_end. Barrier wait = barrier_exit - barrier_enter, the time spent in the
all-reduce, waiting for the slowest peer included. The reduction itself is not
computed (payloads are zeros), so the CPU stays free for the traffic. Each
worker sends and receives exactly N * 2(W-1) * ceil(B/W) bytes. W = 1 is
allowed: no sockets, no traffic, and --prev may be left out.

Exit 0 when done, 1 after an error (the record has "errors"), 143 after
SIGTERM, 2 on bad arguments.
"""

from __future__ import annotations

import argparse
import socket
import struct
import sys
import threading
from functools import partial

from hostctl_lab.workloads.common import (
    HELLO_TIMEOUT_S, ArgParser, Link, ProtocolError, accept, add_job_args, check_out_path, close_all,
    compute_then_collective, connect_retry, install_sigterm, listen, new_record, now, parse_hostport, pos_int,
    port_number, run_parallel, run_recorded, shutdown_all,
)
from hostctl_lab.workloads.compute import compute_from_args

PROG = "hostctl_lab.workloads.allreduce"
HELLO = struct.Struct("!4sIIQ")  # "HARW", rank, world, chunk_bytes
ACK = struct.Struct("!4sI")      # "HARA", status
HELLO_MAGIC = b"HARW"
ACK_MAGIC = b"HARA"
ACCEPTED, WRONG_RANK, MISMATCH = 0, 1, 2


def chunk_bytes(model_bytes: int, world: int) -> int:
    """ceil(B / W): the bytes one ring step moves."""
    return -(-model_bytes // world)


def _accept_next(srv: socket.socket, rank: int, world: int, chunk: int, deadline: float,
                 io_timeout_s: float, made: list[Link]) -> Link:
    """Accept until rank (k+1) mod W says a matching hello; returns the link we send on."""
    want = (rank + 1) % world
    while True:
        try:
            conn = accept(srv, deadline, HELLO_TIMEOUT_S)
        except TimeoutError:
            raise TimeoutError(f"rank {want} did not connect in time (--connect-timeout)") from None
        link = Link(conn, f"rank {want} (next)")
        try:
            magic, their_rank, their_world, their_chunk = link.recv_struct(HELLO)
        except OSError:
            link.close()  # not one of ours (a probe, a scanner)
            continue
        if magic != HELLO_MAGIC:
            link.close()
            continue
        status = (WRONG_RANK if their_rank != want
                  else MISMATCH if (their_world, their_chunk) != (world, chunk) else ACCEPTED)
        try:
            link.send_struct(ACK, ACK_MAGIC, status)
        except OSError:
            link.close()
            continue
        if status == ACCEPTED:
            conn.settimeout(io_timeout_s)
            made.append(link)
            return link
        sys.stderr.write(f"{PROG}: rank {rank} rejected a connection from rank {their_rank} "
                         f"(world {their_world}, chunk {their_chunk} bytes; expected rank {want}, "
                         f"world {world}, chunk {chunk} bytes)\n")
        link.close()


def _connect_prev(prev: tuple[str, int], rank: int, world: int, chunk: int, timeout_s: float,
                  io_timeout_s: float, made: list[Link], cancel: threading.Event) -> Link:
    """Connect to the listener of rank k-1 and say hello; the link we receive on."""
    addr, port = prev
    link = Link(connect_retry(addr, port, timeout_s, io_timeout_s, cancel), f"rank {(rank - 1) % world} (prev)")
    made.append(link)
    link.send_struct(HELLO, HELLO_MAGIC, rank, world, chunk)
    magic, status = link.recv_struct(ACK)
    if magic != ACK_MAGIC:
        raise ProtocolError(f"{addr}:{port} is not an allreduce worker (bad hello answer)")
    if status == WRONG_RANK:
        raise ProtocolError(f"{addr}:{port} does not take rank {rank} as its successor (check --prev and --rank)")
    if status != ACCEPTED:
        raise ProtocolError(f"{addr}:{port} has another --world or --model-bytes")
    return link


def _step(nxt: Link, prv: Link, chunk: int, abort) -> None:
    """One ring step: send a chunk to next (in a thread) while receiving one from prev."""
    run_parallel([partial(nxt.send_blob, chunk), partial(prv.recv_blob, chunk)], abort)


def run_worker(a: argparse.Namespace) -> int:
    rec = new_record(a.job, "allreduce", a.rank)
    chunk = chunk_bytes(a.model_bytes, a.world)
    links: list[Link] = []
    srv: socket.socket | None = None
    cancel = threading.Event()

    def abort() -> None:
        cancel.set()
        shutdown_all([lk.sock for lk in links] + [srv])

    def setup() -> tuple[Link, Link]:
        nonlocal srv
        srv = listen(a.bind, a.port)
        deadline = now() + a.connect_timeout
        nxt, prv = run_parallel([
            lambda: _connect_prev(a.prev, a.rank, a.world, chunk, a.connect_timeout, a.io_timeout, links, cancel),
            lambda: _accept_next(srv, a.rank, a.world, chunk, deadline, a.io_timeout, links),
        ], abort)[::-1]
        return nxt, prv

    def body() -> None:
        ring = setup() if a.world > 1 else None

        def allreduce() -> None:
            for _step_no in range(2 * (a.world - 1) if ring else 0):
                _step(*ring, chunk, abort)

        compute_then_collective(rec, a.iterations, a.compute_step, a.compute, allreduce)

    def cleanup() -> None:
        rec["bytes_sent"] = sum(lk.sent_bytes for lk in links)
        rec["bytes_received"] = sum(lk.received_bytes for lk in links)
        close_all([lk.sock for lk in links] + [srv])

    return run_recorded(f"{PROG} {a.job}/{a.rank}", rec, a.out, body, cleanup)


def _parser() -> ArgParser:
    ap = ArgParser(prog=PROG, description="Ring all-reduce job over persistent TCP connections.")
    sub = ap.add_subparsers(dest="cmd", required=True, metavar="{worker}")
    w = sub.add_parser("worker", help="one rank of the ring")
    w.add_argument("--world", type=pos_int, required=True)
    w.add_argument("--bind", required=True, help="address this rank listens on (rank k+1 connects here)")
    w.add_argument("--port", type=port_number, required=True)
    w.add_argument("--prev", type=parse_hostport, metavar="ADDR:PORT",
                   help="listener of rank k-1 (required when --world > 1)")
    add_job_args(w)
    return ap


def main(argv: list[str] | None = None) -> int:
    ap = _parser()
    a = ap.parse_args(argv)
    if a.rank >= a.world:
        ap.error(f"--rank {a.rank} must be below --world {a.world}")
    if a.world > 1 and a.prev is None:
        ap.error("--prev ADDR:PORT is required when --world > 1")
    check_out_path(ap, a.out)
    a.compute_step = compute_from_args(ap, a)
    install_sigterm()
    return run_worker(a)


if __name__ == "__main__":
    sys.exit(main())
