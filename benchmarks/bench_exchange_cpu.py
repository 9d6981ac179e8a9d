"""The daemon's CPU for its two switch exchanges per slot, against a real switchemu on an ipc socket.

    python benchmarks/bench_exchange_cpu.py [--flows 100] [--peers 1] [--slots 300] [--wire-versions 1,2]

Per slot, as ``MlccControl`` does it: one fetch (one query per peer: the flows of a job to one peer share
a query) and one publish of every flow's K-slot schedule, each waiting for the reply. Prints the client's
thread CPU per slot (building the schedule messages included; the wait for the replies is not CPU) and
the wall time of the two round trips, and writes them as JSON (--out). switchemu runs as its own process; its
CPU is not counted here. With several ``--wire-versions`` the slots alternate between them (side by side
in one run: version 1 sends each load as a msgpack int, version 2 packs them)."""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from hostctl.core import wire
from hostctl.policy.switchclient import SwitchClient
from hostctl_lab.bench.results import write_results

SLOT_S = 0.06
K = 10


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--flows", type=int, default=100)
    ap.add_argument("--peers", type=int, default=1, help="hosts the flows go to (1..200)")
    ap.add_argument("--slots", type=int, default=300)
    ap.add_argument("--wire-versions", default=str(wire.WIRE_VERSION),
                    help="comma-separated wire versions to alternate slot by slot (e.g. 1,2)")
    ap.add_argument("--out", default="results/bench_exchange_cpu.json")
    a = ap.parse_args()
    if not 1 <= a.peers <= 200:
        ap.error("--peers must be within 1..200")
    try:
        versions = [int(x) for x in a.wire_versions.split(",")]
    except ValueError:
        versions = []
    if not versions or not set(versions) <= set(wire.WIRE_VERSIONS):
        ap.error(f"--wire-versions: a comma-separated list of {wire.WIRE_VERSIONS}")
    d = tempfile.mkdtemp(prefix="hc-xcpu-")
    topo = os.path.join(d, "topo.toml")
    peers = [f"10.0.1.{i + 1}" for i in range(a.peers)]
    hosts = ", ".join(['"h0=10.0.0.1"'] + [f'"p{i}={p}"' for i, p in enumerate(peers)])
    Path(topo).write_text(f'[[switch]]\nname = "sw0"\nhosts = [{hosts}]\nhost_rate = "10gbit"\n')
    ep = f"ipc://{d}/sw.sock"
    sw = subprocess.Popen([sys.executable, "-m", "switchemu.cli", "--bind", ep, "--topology", topo,
                           "--log-level", "WARNING"], stderr=subprocess.PIPE, text=True)
    try:
        with SwitchClient([ep]) as c:
            deadline = time.monotonic() + 30
            while c.probe(SLOT_S, timeout_s=0.5).error is not None:
                if sw.poll() is not None or time.monotonic() > deadline:
                    why = sw.stderr.read() if sw.poll() is not None else "timeout"
                    raise SystemExit(f"switchemu did not start: {why}")
            dst = [peers[i % a.peers] for i in range(a.flows)]
            queries = [wire.FlowQuery(f"f{i}", "10.0.0.1", p, job_id="j") for i, p in enumerate(peers)]
            cpu: dict[int, list[float]] = {v: [] for v in versions}
            wall: dict[int, list[float]] = {v: [] for v in versions}
            for n in range(a.slots + 20):
                v = c.version[ep] = versions[n % len(versions)]
                slot = int(time.time() // SLOT_S)
                c0, w0 = time.thread_time(), time.perf_counter()
                c.exchange(slot, fetches=queries, timeout_s=SLOT_S / 6)
                ups = [wire.FlowSchedule(f"f{i}", "j", "10.0.0.1", p, slot, (1e6 + i,) * K)
                       for i, p in enumerate(dst)]
                c.exchange(slot, updates=ups, timeout_s=SLOT_S / 12)
                if n >= 20:
                    cpu[v].append((time.thread_time() - c0) * 1e3)
                    wall[v].append((time.perf_counter() - w0) * 1e3)
    finally:
        sw.kill()
        sw.wait()
        shutil.rmtree(d, ignore_errors=True)
    results = {}
    for v in versions:
        print(f"{a.flows} flows to {a.peers} peer(s), {len(cpu[v])} slots, wire version {v}: client CPU per slot "
              f"mean {statistics.fmean(cpu[v]):.3f} ms (median {statistics.median(cpu[v]):.3f}); both round trips, "
              f"wall: median {statistics.median(wall[v]):.2f} ms")
        results[v] = {"flows": a.flows, "peers": a.peers, "slots": len(cpu[v]), "wire_version": v,
                      "client_cpu_ms_mean": statistics.fmean(cpu[v]), "client_cpu_ms_median": statistics.median(cpu[v]),
                      "round_trips_wall_ms_median": statistics.median(wall[v])}
    # one version: the same keys as before ("result"); several: one entry per version as well
    out = {"result": results[versions[-1]]}
    if len(versions) > 1:
        out["by_version"] = {str(v): r for v, r in results.items()}
    write_results(a.out, "the daemon's two switch exchanges per slot (client CPU)", out)


if __name__ == "__main__":
    main()
