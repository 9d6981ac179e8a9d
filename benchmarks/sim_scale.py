"""The cluster simulator's speed and memory at 1000 servers, and how its cost grows.

    python benchmarks/sim_scale.py [--hours 1] [--networks fifo,one] [--out docs/results/sim/scale]

Runs the first N multi-GPU jobs of the Philly trace on MLCC's tree (8 GPUs per server, ``ff``
placement, fifo order), their arrivals compressed into the first ``--hours`` simulated hours (the
trace's first 1000 multi-GPU jobs span 963 hours), for ``--hours`` per network policy, in a fresh
process each (peak RSS per run), and prints simulated hours per wall minute, events per second and
peak memory; then the growth sweep: jobs x servers at fifo over ``--sweep-hours``. Writes
OUT/sim_scale.json and OUT/sim_scale.png.
"""

from __future__ import annotations

import argparse
import json
import multiprocessing as mp
import os
import resource
import sys
import time


def _one(args: tuple) -> dict:
    topology, servers, jobs, network, until, max_iter = args
    from hostctl_lab.sim import kernel
    from hostctl_lab.sim.cluster import simulate
    from hostctl_lab.sim.topo import load
    from hostctl_lab.sim.workload import philly

    t0 = time.perf_counter()
    fab = load(topology, servers)
    js = philly(None, jobs, seed=0, max_iterations=max_iter)
    span = max(j.arrival_s for j in js) or 1.0
    js = philly(None, jobs, seed=0, max_iterations=max_iter, time_scale=0.999 * until / span)
    setup = time.perf_counter() - t0
    r = simulate(fab, js, network=network, until_s=until)
    r.pop("jct_s")
    return {"topology": topology, "servers": servers, "jobs_in": jobs, "network": network, "until_s": until,
            "setup_s": setup, **r, "sim_h_per_wall_min": (r["sim_s"] / 3600) / (r["wall_s"] / 60),
            "kernel": dict(kernel.STATS), "max_rss_mib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024}


def run(args: tuple) -> dict:
    with mp.get_context("spawn").Pool(1) as pool:  # a fresh process: its own peak RSS
        return pool.apply(_one, (args,))


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--hours", type=float, default=1.0)
    ap.add_argument("--networks", default="fifo,one")
    ap.add_argument("--jobs", type=int, default=1000)
    ap.add_argument("--servers", type=int, default=1000)
    ap.add_argument("--sweep", default="250,500,1000,2000", help="job counts of the growth sweep ('' = none)")
    ap.add_argument("--sweep-servers", default="250,500,1000")
    ap.add_argument("--sweep-hours", type=float, default=0.1)
    ap.add_argument("--out", default="results/sim/scale")
    a = ap.parse_args()
    until = a.hours * 3600
    rows = []
    for net in [n for n in a.networks.split(",") if n]:
        r = run(("mlcc-tree", a.servers, a.jobs, net, until, None))
        rows.append(r)
        print(f"{net:>6}: {r['jobs_in']} jobs, {r['servers']} servers: {r['sim_s'] / 3600:.2f} simulated h in "
              f"{r['wall_s']:.1f} s wall = {r['sim_h_per_wall_min']:.1f} h/min, {r['events']} events "
              f"({r['events_per_s']:.0f}/s), {r['finished']} finished, peak RSS {r['max_rss_mib']:.0f} MiB", flush=True)
    growth = []
    for s in [int(x) for x in a.sweep_servers.split(",") if x]:
        for n in [int(x) for x in a.sweep.split(",") if x]:
            r = run(("mlcc-tree", s, n, "fifo", a.sweep_hours * 3600, None))
            growth.append(r)
            print(f"growth: {s} servers, {n} jobs: {r['wall_s']:.2f} s wall, {r['events']} events, "
                  f"{r['events_per_s']:.0f} events/s, {r['stats']['solves']} solves", flush=True)
    os.makedirs(a.out, exist_ok=True)
    path = os.path.join(a.out, "sim_scale.json")
    with open(path, "w") as f:
        json.dump({"command": " ".join([os.path.basename(sys.executable)] + sys.argv),
                   "date": time.strftime("%Y-%m-%dT%H:%M:%S%z"), "machine": {"cpus": os.cpu_count(),
                                                                            "node": os.uname().nodename},
                   "targets": rows, "growth": growth}, f, indent=1)
    print(f"wrote {path}")
    if growth:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt

        fig, ax = plt.subplots(figsize=(6.5, 4))
        for s in sorted({g["servers"] for g in growth}):
            gs = [g for g in growth if g["servers"] == s]
            ax.plot([g["jobs_in"] for g in gs], [g["wall_s"] for g in gs], "o-", label=f"{s} servers")
        ax.set_xlabel("jobs (Philly, first N multi-GPU)")
        ax.set_ylabel(f"wall seconds for {a.sweep_hours:g} simulated h (fifo)")
        ax.set_xscale("log")
        ax.set_yscale("log")
        ax.grid(alpha=0.3)
        ax.legend()
        fig.tight_layout()
        fig.savefig(os.path.join(a.out, "sim_scale.png"), dpi=110)
        print(f"wrote {os.path.join(a.out, 'sim_scale.png')}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
