"""switchemu scale benchmark (docs/switchemu.md): real switchemu process, real pyzmq DEALER clients.

(a) 64 emulated daemons, each doing one update_schedule + fetch_feedback round trip per 60 ms slot
    (both frames in one ZeroMQ message): p50/p90/p99 round-trip latency.
(b) 1000 emulated daemons, same per-slot exchange, against one switchemu: p99 latency, switchemu CPU %
    (from /proc/PID/stat), request frames per second, whether it keeps up (replies inside the slot, no
    latency growth from the first to the last third of the run).

The load generators are a few processes, each multiplexing many DEALER sockets; each daemon sends
at its own random phase inside the slot. On a small machine their CPU competes with the switch's:
the report gives both. A generator polls only the sockets that wait for a reply (zmq_poll is
O(sockets): polling all 250 of a process's sockets on every wake-up was most of its CPU until
2026-11-23 18:00 UTC) and decodes each reply frame once.

    nice -n 5 .venv/bin/python benchmarks/bench_switchemu.py --out docs/results/switchemu.json [--quick]
"""

from __future__ import annotations

import argparse
import heapq
import json
import math
import os
import platform
import random
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request

SWITCHEMU = os.path.join(sys.prefix, "bin", "switchemu")
SLOT_S = 0.06
K = 10
CLK_TCK = os.sysconf("SC_CLK_TCK")


def cpu_s(pid: int | str = "self") -> float:
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / CLK_TCK  # utime + stime


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def metrics(port: int) -> dict[str, float]:
    out = {}
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as r:
        for line in r.read().decode().splitlines():
            if line and not line.startswith("#"):
                k, _, v = line.rpartition(" ")
                out[k] = float(v)
    return out


# ---------------------------------------------------------------------- load generator (a subprocess)


def exchange_frames(rng, seq: int, slot: int, host: int, n_hosts: int) -> tuple[bytes, bytes]:
    """One emulated daemon's per-slot frames: an update_schedule (one flow to the next host, K random
    rates) and a fetch_feedback for the same flow."""
    from hostctl.core import wire

    src, dst = f"h{host}", f"h{(host + 1) % n_hosts}"
    flow = f"{src}>{dst}"
    rates = tuple(float(rng.randrange(10**6, 10**8)) for _ in range(K))
    upd = wire.encode_request(wire.Request("update_schedule", seq * 2, slot, src,
                                           (wire.FlowSchedule(flow, f"j{host % 50}", src, dst, seq, rates),)))
    fet = wire.encode_request(wire.Request("fetch_feedback", seq * 2 + 1, slot, src,
                                           (wire.FlowQuery(flow, src, dst),)))
    return upd, fet


def worker(endpoint: str, first: int, count: int, n_hosts: int, duration_s: float, seed: int) -> None:
    import zmq

    from hostctl.core import wire

    rng = random.Random(seed)
    ctx = zmq.Context()
    socks, poller, owner = [], zmq.Poller(), {}
    for i in range(count):
        s = ctx.socket(zmq.DEALER)
        s.linger = 0
        s.connect(endpoint)
        socks.append(s)
        owner[s] = i
    time.sleep(0.5)  # connections up
    start = time.time() + 0.2
    heap = [(start + rng.random() * SLOT_S, i) for i in range(count)]
    heapq.heapify(heap)
    sent_at: dict[int, tuple[int, float]] = {}  # daemon -> (request id, send time)
    # only the sockets waiting for a reply are polled: zmq_poll is O(sockets), and polling all 250 of a
    # process's sockets on every wake-up cost ~0.3 ms, i.e. most of a generator's CPU
    polled: set[int] = set()
    rtts, late, errors, seq = [], 0, 0, 0
    t_first = time.monotonic()
    end = start + duration_s
    cpu0 = cpu_s()
    while True:
        now = time.time()
        if now >= end and not sent_at:
            break
        if now >= end + 1.0:
            late += len(sent_at)
            break
        timeout_ms = math.ceil(max(0.0, (heap[0][0] - now) * 1000.0)) if now < end else 50
        if not polled:  # zmq_poll returns at once without sockets
            time.sleep(timeout_ms / 1000.0)
            ready = []
        else:
            ready = poller.poll(timeout_ms)  # whole ms: no busy loop competing with the switch
        for s, _ in ready:
            i = owner[s]
            while True:
                try:
                    parts = s.recv_multipart(zmq.NOBLOCK)
                except zmq.Again:
                    break
                t_rx = time.monotonic()
                replies = [wire.decode_reply(p) for p in parts]  # each frame decoded (validated) once
                if any(x.type == "error" for x in replies):
                    errors += 1
                got = sent_at.get(i)
                if got is not None and got[0] == replies[-1].req_id:
                    rtt = t_rx - got[1]
                    rtts.append((got[1] - t_first, rtt))
                    if rtt > SLOT_S:
                        late += 1
                    del sent_at[i]
            if i not in sent_at:
                poller.unregister(s)
                polled.discard(i)
        now = time.time()
        while now < end and heap[0][0] <= now:
            t, i = heapq.heappop(heap)
            if i in sent_at:  # previous exchange never answered within a slot
                late += 1
                del sent_at[i]
            host = first + i
            slot = int(now // SLOT_S)
            seq += 1
            upd, fet = exchange_frames(rng, seq, slot, host, n_hosts)
            sent_at[i] = (seq * 2 + 1, time.monotonic())
            socks[i].send_multipart([upd, fet], zmq.NOBLOCK)
            if i not in polled:
                poller.register(socks[i], zmq.POLLIN)
                polled.add(i)
            heapq.heappush(heap, (t + SLOT_S, i))
    cpu = cpu_s() - cpu0
    for s in socks:
        s.close(0)
    ctx.term()
    json.dump({"rtts": rtts, "late": late, "errors": errors, "cpu_s": cpu}, sys.stdout)


# ---------------------------------------------------------------------- driver


def pct(xs: list[float], p: float) -> float:
    if not xs:
        return float("nan")
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(p / 100.0 * len(xs)))]


def run_case(name: str, n_daemons: int, n_workers: int, duration_s: float, topo: str) -> dict:
    ep = f"tcp://127.0.0.1:{free_port()}"
    mport = free_port()
    server = subprocess.Popen([SWITCHEMU, "--bind", ep, "--topology", topo, "--metrics-port", str(mport),
                               "--log-level", "WARNING"])
    workers = []
    try:
        for _ in range(100):
            try:
                metrics(mport)
                break
            except OSError:
                time.sleep(0.05)
        m0, c0, t0 = metrics(mport), cpu_s(server.pid), time.monotonic()
        per = n_daemons // n_workers
        for w in range(n_workers):
            cnt = per if w < n_workers - 1 else n_daemons - per * (n_workers - 1)
            workers.append(subprocess.Popen(
                [sys.executable, __file__, "--worker", ep, str(w * per), str(cnt), str(n_daemons), str(duration_s), str(w)],
                stdout=subprocess.PIPE, text=True))
        outs = [json.loads(p.communicate(timeout=duration_s + 60)[0]) for p in workers]
        m1, c1, t1 = metrics(mport), cpu_s(server.pid), time.monotonic()
    finally:
        for p in workers:
            if p.poll() is None:
                os.kill(p.pid, signal.SIGKILL)
                p.wait()
        if server.poll() is None:
            os.kill(server.pid, signal.SIGTERM)
            server.wait(10)
    wall = t1 - t0
    rtts = [r for o in outs for r in o["rtts"]]
    lat_ms = [r[1] * 1000 for r in rtts]
    span = max((r[0] for r in rtts), default=0)
    first = [r[1] * 1000 for r in rtts if r[0] < span / 3]
    last = [r[1] * 1000 for r in rtts if r[0] > 2 * span / 3]
    frames = m1["switchemu_frames_total"] - m0["switchemu_frames_total"]
    expected = n_daemons * duration_s / SLOT_S
    late = sum(o["late"] for o in outs)
    res = {
        "case": name, "daemons": n_daemons, "generator_processes": n_workers, "duration_s": duration_s,
        "exchanges": len(lat_ms), "expected_exchanges": round(expected),
        "rtt_ms_p50": pct(lat_ms, 50), "rtt_ms_p90": pct(lat_ms, 90), "rtt_ms_p99": pct(lat_ms, 99),
        "rtt_ms_max": max(lat_ms, default=float("nan")),
        "rtt_ms_p99_first_third": pct(first, 99), "rtt_ms_p99_last_third": pct(last, 99),
        "late_or_lost": late, "error_replies": sum(o["errors"] for o in outs),
        "server_errors": {k: v - m0.get(k, 0) for k, v in m1.items() if k.startswith("switchemu_errors_total") and v - m0.get(k, 0)},
        "frames_per_s": frames / wall, "messages_per_s": (m1["switchemu_messages_total"] - m0["switchemu_messages_total"]) / wall,
        "server_cpu_pct": 100.0 * (c1 - c0) / wall,
        "generators_cpu_pct": 100.0 * sum(o["cpu_s"] for o in outs) / wall,
        "table_flows": m1["switchemu_table_flows"],
    }
    res["keeps_up"] = bool(len(lat_ms) >= 0.98 * expected and late <= 0.01 * expected
                           and res["rtt_ms_p99_last_third"] <= max(2 * res["rtt_ms_p99_first_third"], SLOT_S * 1000 / 2))
    return res


def main() -> None:
    if len(sys.argv) > 1 and sys.argv[1] == "--worker":
        ep, first, count, n_hosts, dur, seed = sys.argv[2:8]
        worker(ep, int(first), int(count), int(n_hosts), float(dur), int(seed))
        return
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", default="results/switchemu.json")
    ap.add_argument("--quick", action="store_true", help="3 s per case instead of 20 s")
    ap.add_argument("--workers", type=int, default=4, help="load-generator processes for the 1000-daemon case")
    args = ap.parse_args()
    dur = 3.0 if args.quick else 20.0
    with tempfile.TemporaryDirectory() as d:
        topo = os.path.join(d, "topo.toml")
        with open(topo, "w") as f:
            f.write('[[switch]]\nname = "sw0"\nhosts = {count = 1000, prefix = "h", first_addr = "10.1.0.1"}\n'
                    'host_rate = "25gbit"\n')
        results = [run_case("a: 64 daemons", 64, 1, dur, topo),
                   run_case("b: 1000 daemons", 1000, args.workers, dur, topo)]
    meta = {"date": time.strftime("%Y-%m-%d %H:%M:%S %z"), "machine": platform.node(),
            "cpu": _cpu_model(), "cores": os.cpu_count(), "python": platform.python_version(),
            "command": " ".join([os.path.relpath(sys.executable), *sys.argv]), "slot_s": SLOT_S, "K": K}
    os.makedirs(os.path.dirname(os.path.abspath(args.out)), exist_ok=True)
    with open(args.out, "w") as f:
        json.dump({"meta": meta, "results": results}, f, indent=2)
    print(f"{'case':18s} {'exch':>7s} {'p50 ms':>7s} {'p90 ms':>7s} {'p99 ms':>7s} {'max ms':>7s} {'late':>5s} "
          f"{'frames/s':>9s} {'sw CPU%':>7s} {'gen CPU%':>8s} keeps up")
    for r in results:
        print(f"{r['case']:18s} {r['exchanges']:7d} {r['rtt_ms_p50']:7.2f} {r['rtt_ms_p90']:7.2f} {r['rtt_ms_p99']:7.2f} "
              f"{r['rtt_ms_max']:7.1f} {r['late_or_lost']:5d} {r['frames_per_s']:9.0f} {r['server_cpu_pct']:7.1f} "
              f"{r['generators_cpu_pct']:8.1f} {'yes' if r['keeps_up'] else 'NO'}")
    print(f"results: {args.out}")


def _cpu_model() -> str:
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor()


if __name__ == "__main__":
    main()
