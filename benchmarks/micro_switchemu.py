"""In-process microbenchmark of switchemu's hot path, without sockets (docs/switchemu.md, "Measured").

Feeds ``SwitchState.handle_message`` the same messages ``bench_switchemu.py``'s emulated daemons send
(one ZeroMQ message per daemon per 60 ms slot: an ``update_schedule`` frame with one flow, K = 10, and a
``fetch_feedback`` frame; topology: one switch with 1000 hosts), with a simulated clock that advances
so that every daemon sends once per slot (slots advance, flows expire and are replaced as in the real
run). Reports CPU microseconds per message (= per update + fetch pair) and per frame, best of
``--repeat`` runs (each a fresh SwitchState).

    .venv/bin/python benchmarks/micro_switchemu.py                  # ~3 s
    .venv/bin/python benchmarks/micro_switchemu.py --profile        # cProfile of one run, top 25
    .venv/bin/python benchmarks/micro_switchemu.py --socket         # + the ROUTER loop over ipc (recv/send)
    .venv/bin/python benchmarks/micro_switchemu.py --compare /tmp/old --repeat 16 --out R.json
                                                                    # against another checkout, alternated

To time the code before a change, ``--compare DIR`` imports DIR's switchemu (e.g. ``git archive``
of the old commit unpacked there) next to this tree's and alternates runs of the two in this one
process (the order swapped every round), so drift of a shared machine hits both alike; it prints
the min and median of each and their ratio. (Or run a copy of this script from inside the other tree:
it inserts its own parent folder on the path.)
"""

from __future__ import annotations

import argparse
import os
import random
import statistics
import sys
import time

from hostctl.core.topology import Topology
from switchemu.server import SwitchState

from bench_switchemu import exchange_frames  # (the frames bench_switchemu sends)

SLOT_S = 0.06
K = 10
TOPO = ('[[switch]]\nname = "sw0"\nhosts = {count = 1000, prefix = "h", first_addr = "10.1.0.1"}\n'
        'host_rate = "25gbit"\n')


def topology() -> Topology:
    return Topology.from_toml(TOPO)


def messages(n_daemons: int, n_slots: int, seed: int = 1, t0: float = 1.7e9) -> list[tuple[float, list[bytes]]]:
    """(send time, frames) for every daemon in every slot, in time order, like bench_switchemu's worker."""
    rng = random.Random(seed)
    phase = [rng.random() * SLOT_S for _ in range(n_daemons)]
    base = (int(t0 // SLOT_S) + 1) * SLOT_S
    out, seq = [], 0
    for s in range(n_slots):
        for i in sorted(range(n_daemons), key=lambda i: phase[i]):
            now = base + s * SLOT_S + phase[i]
            slot = int(now // SLOT_S)
            seq += 1
            out.append((now, list(exchange_frames(rng, seq, slot, i, n_daemons))))
    return out


def run(topo, msgs, state_kw=None, state_cls=SwitchState) -> tuple[float, SwitchState, list[list[bytes]]]:
    st = state_cls(topo, None, slot_s=SLOT_S, horizon=K, **(state_kw or {}))
    handle = st.handle_message
    replies = []
    t0 = time.process_time()
    for now, parts in msgs:
        replies.append(handle(parts, now))
    return time.process_time() - t0, st, replies


def other_tree(tree: str):
    """(SwitchState, Topology) of another checkout, imported under the same module names; this tree's
    modules are put back afterwards, so both live side by side in this process."""
    roots = ("hostctl", "switchemu")
    saved = {k: m for k, m in sys.modules.items() if k.split(".")[0] in roots}
    for k in saved:
        del sys.modules[k]
    sys.path.insert(0, os.path.abspath(tree))  # deliberately: a second source tree to compare with the installed one
    try:
        from hostctl.core.topology import Topology as OtherTopology
        from switchemu.server import SwitchState as OtherState
    finally:
        sys.path.pop(0)
        for k in [k for k in sys.modules if k.split(".")[0] in roots]:
            del sys.modules[k]
        sys.modules.update(saved)
    return OtherState, OtherTopology


def compare(tree: str, msgs, repeat: int) -> dict:
    """CPU us per message of this tree's handler and ``tree``'s, alternated ``repeat`` rounds."""
    other_cls, other_topo_cls = other_tree(tree)
    sides = {"this": (SwitchState, topology()), "other": (other_cls, other_topo_cls.from_toml(TOPO))}
    per: dict[str, list[float]] = {"this": [], "other": []}
    for i in range(repeat):
        for name in (("this", "other") if i % 2 == 0 else ("other", "this")):
            cls, topo = sides[name]
            per[name].append(run(topo, msgs, state_cls=cls)[0] / len(msgs) * 1e6)
    out = {"other_tree": os.path.abspath(tree), "rounds": repeat, "us_per_message": per}
    for name, v in per.items():
        out[f"{name}_min_us"], out[f"{name}_median_us"] = min(v), statistics.median(v)
    out["ratio_min"] = out["this_min_us"] / out["other_min_us"]
    out["ratio_median"] = out["this_median_us"] / out["other_median_us"]
    return out


def socket_loop(topo, msgs, n: int, peers: int = 1) -> float:
    """Server-thread CPU per message of the real ROUTER loop (poll, recv, handle, send) over ipc.

    All ``n`` messages are queued at the server (from ``peers`` DEALER sockets) before its loop starts,
    so the loop runs flat out, in full batches, while the client thread waits; ZeroMQ's own I/O thread
    is not counted. A switch that keeps up wakes for every message or few instead, which costs more
    (each blocking wait cost ~20 us of CPU on the 2-core VM of docs/switchemu.md)."""
    import shutil
    import tempfile
    import threading

    import zmq

    from switchemu.server import ServerConfig, SwitchServer

    msgs = msgs[:n]
    d = tempfile.mkdtemp()
    st = SwitchState(topo, None, slot_s=SLOT_S, horizon=K)
    srv = SwitchServer(st, ServerConfig(bind=f"ipc://{d}/sw.sock"),
                       clock=lambda: msgs[min(st.stats.messages, n - 1)][0])  # the time of the next message
    ctx = zmq.Context()
    socks = []
    for _ in range(peers):
        s = ctx.socket(zmq.DEALER)
        s.sndhwm = s.rcvhwm = 0
        s.connect(srv.endpoint)
        socks.append(s)
    time.sleep(0.2)
    for j, (_, parts) in enumerate(msgs):
        socks[j % peers].send_multipart(parts)
    time.sleep(0.5)  # all queued at the server (its RCVHWM is 100k)
    cpu = {}

    class Stop:  # ends the loop as soon as every message is handled
        def is_set(self):
            return st.stats.messages >= n

    def serve():
        c0 = time.thread_time()
        srv.serve(Stop())
        cpu["s"] = time.thread_time() - c0

    th = threading.Thread(target=serve)
    th.start()
    th.join(60)
    got = 0
    poller = zmq.Poller()
    for s in socks:
        poller.register(s, zmq.POLLIN)
    while got < n:
        ready = poller.poll(2000)
        if not ready:
            break
        for s, _ in ready:
            while True:
                try:
                    s.recv_multipart(zmq.NOBLOCK)
                except zmq.Again:
                    break
                got += 1
    for s in socks:
        s.close(0)
    ctx.term()
    srv.close()
    shutil.rmtree(d, ignore_errors=True)  # the ipc socket's folder
    assert got == n, (got, n)
    return cpu["s"] / n


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--daemons", type=int, default=1000)
    ap.add_argument("--slots", type=int, default=10, help="slots of messages per run (daemons x slots messages)")
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--profile", action="store_true")
    ap.add_argument("--socket", action="store_true", help="also time the ROUTER loop over ipc (one thread)")
    ap.add_argument("--peers", type=int, default=1, help="DEALER sockets the --socket messages come from")
    ap.add_argument("--compare", metavar="DIR", help="also time DIR's switchemu (another checkout), alternated")
    ap.add_argument("--out", help="write the --compare results here (JSON)")
    args = ap.parse_args()
    topo = topology()
    msgs = messages(args.daemons, args.slots)
    run(topo, msgs[: min(len(msgs), 2000)])  # warm up (imports, caches)
    if args.compare:
        res = compare(args.compare, msgs, args.repeat)
        print(f"{len(msgs)} messages per run, {args.repeat} alternated rounds, CPU us per message (update + fetch), "
              f"handler only: this tree min {res['this_min_us']:.2f} median {res['this_median_us']:.2f}; "
              f"{args.compare} min {res['other_min_us']:.2f} median {res['other_median_us']:.2f}; "
              f"this / other: {res['ratio_min']:.3f} (min), {res['ratio_median']:.3f} (median)")
        if args.out:
            from hostctl_lab.bench.results import write_results

            write_results(args.out, "micro_switchemu --compare", {"daemons": args.daemons, "slots": args.slots, **res})
        return
    if args.profile:
        import cProfile
        import pstats

        pr = cProfile.Profile()
        pr.enable()
        run(topo, msgs)
        pr.disable()
        pstats.Stats(pr).sort_stats("tottime").print_stats(25)
        return
    best = min(run(topo, msgs)[0] for _ in range(args.repeat))
    n = len(msgs)
    print(f"{n} messages ({2 * n} frames), {args.daemons} daemons x {args.slots} slots, best of {args.repeat}: "
          f"{best / n * 1e6:.1f} us per message (update + fetch), {best / n / 2 * 1e6:.1f} us per frame, "
          f"{2 * n / best:,.0f} frames/s per core (handler only)")
    if args.socket:
        per = socket_loop(topo, msgs, min(n, 10_000), args.peers)
        print(f"ROUTER loop over ipc, {args.peers} peers (recv + handle + send, server thread CPU): "
              f"{per * 1e6:.1f} us per message, "
              f"{2 / per:,.0f} frames/s per core")


if __name__ == "__main__":
    main()
