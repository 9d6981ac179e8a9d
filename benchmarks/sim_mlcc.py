"""MLCC (local and switch view) against its simulator baselines MCS and CCML, and fifo, in the cluster
simulator on MLCC's tree (docs/sim-mlcc.md).

    python benchmarks/sim_mlcc.py [--servers 100] [--jobs 40] [--time-scale 0.0001] [--max-iterations 200]
        [--seeds 2] [--workers 2] [--speed-until 180] [--ps-fraction 0] [--out docs/results/sim/mlcc]

Part 1: the first ``--jobs`` multi-GPU Philly jobs on ``--servers`` servers of MLCC's tree (10 per ToR,
10 ToRs per edge switch, 10/20/40 Gbit/s), ``ff`` placement, fifo queue, every network of NETWORKS, every
seed (``--ps-fraction F``: each job is a parameter-server job with probability F, seeded); prints
average JCT per network, its ratio to fifo, and MLCC's ratios to MCS and CCML (the paper:
-33.6% and -23.3% at 1000 servers), each a mean over seeds of per-seed ratios; and each network against
fifo on the multi-server jobs that got the same servers in both runs (the network's effect alone).

Part 2 (``--speed-until`` > 0): speed at the target's scale: 1000 servers, benchmarks/sim_scale.py's
dense case (the first 250 multi-GPU Philly jobs arriving over 3 simulated minutes), fifo, mlcc and
mlcc-switch for the first ``--speed-until`` simulated seconds: wall time, and wall minutes per simulated
hour at that density. Writes OUT/sim_mlcc.json and OUT/sim_mlcc.png.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import sys
import time
from concurrent.futures import ProcessPoolExecutor
from dataclasses import asdict

import numpy as np

NETWORKS = ("fifo", "mlcc", "mlcc-switch", "mcs", "ccml")


def ratios(runs: list[dict]) -> dict:
    """Mean over seeds of per-seed avg JCT ratios: every network to fifo, each MLCC view to MCS and CCML."""
    by = {(r["network"], r["seed"]): r["avg_jct_s"] for r in runs}
    seeds = sorted({r["seed"] for r in runs})
    out = {}
    pairs = [(n, "fifo") for n in NETWORKS if n != "fifo"]
    pairs += [(m, b) for m in ("mlcc", "mlcc-switch") for b in ("mcs", "ccml")]
    for a, b in pairs:
        v = [by[(a, s)] / by[(b, s)] for s in seeds if by.get((a, s)) and by.get((b, s))]
        out[f"{a}/{b}"] = {"mean": float(np.mean(v)), "per_seed": v} if v else None
    return out


def run_placed(d: dict, combo: dict) -> dict:
    """hostctl_lab.sim.run.run_one, plus each job's servers (for the paired comparison)."""
    from hostctl_lab.sim.cluster import ClusterSim
    from hostctl_lab.sim.run import SweepSpec, load_fabric, load_jobs

    sp = SweepSpec(**d)
    sim = ClusterSim(load_fabric(sp), list(load_jobs(sp, combo["seed"])), placement=combo["placement"],
                     order=combo["order"], network=combo["network"], seed=combo["seed"],
                     gpus_per_server=sp.gpus_per_server, slot_s=sp.slot_s)
    r = sim.run()
    r["servers"] = {j.spec.name: j.servers for j in sim.jobs}
    return {**combo, **r}


def paired(runs: list[dict]) -> dict:
    """Each network against fifo on the jobs placed alike (hostctl_lab.sim.tlscale.paired)."""
    from hostctl_lab.sim.tlscale import paired as paired_alike

    return paired_alike([r for r in runs if r["network"] in NETWORKS], "fifo")


def speed(until_s: float, network: str, jobs: int = 250, span_s: float = 180.0) -> dict:
    """Wall time of the speed target's fabric (1000 servers) under ``network`` for the first ``until_s``
    simulated seconds, with the first ``jobs`` multi-GPU Philly jobs' arrivals compressed into ``span_s``
    (benchmarks/sim_scale.py's dense case: 250 jobs in 3 simulated minutes)."""
    from hostctl_lab.sim.cluster import simulate
    from hostctl_lab.sim.topo import load
    from hostctl_lab.sim.workload import philly

    fab = load("mlcc-tree", 1000)
    js = philly(None, jobs, seed=0)
    span = max(j.arrival_s for j in js) or 1.0
    js = philly(None, jobs, seed=0, time_scale=0.999 * span_s / span)
    r = simulate(fab, js, network=network, until_s=until_s)
    r.pop("jct_s")
    st = r["stats"]
    return {"network": network, "servers": 1000, "jobs": jobs, "arrivals_span_s": span_s, "until_s": until_s,
            "wall_s": r["wall_s"], "wall_s_per_sim_s": r["wall_s"] / until_s,
            "wall_s_per_sim_hour": 3600 * r["wall_s"] / until_s, "events": r["events"], "stats": st,
            "started_multi_server_jobs": r["multi_server_jobs"]}


def plot(runs: list[dict], path: str, title: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (a1, a2) = plt.subplots(1, 2, figsize=(11, 4.2))
    for k, n in enumerate(NETWORKS):
        v = [r["avg_jct_s"] for r in runs if r["network"] == n]
        a1.bar(k, np.mean(v), color=f"C{k}", alpha=0.6)
        a1.plot([k] * len(v), v, "k.", ms=6)
        jct = np.sort([x for r in runs if r["network"] == n for x in r["jct_s"].values()])
        a2.plot(jct, np.arange(1, len(jct) + 1) / len(jct), color=f"C{k}", label=n)
    a1.set_xticks(range(len(NETWORKS)), NETWORKS)
    a1.set_ylabel("average JCT (s): bar = mean, dots = seeds")
    a2.set_xscale("log")
    a2.set_xlabel("job completion time (s)")
    a2.set_ylabel("fraction of jobs")
    a2.legend(fontsize=8)
    a2.grid(alpha=0.3)
    fig.suptitle(title, fontsize=9)
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--servers", type=int, default=100)
    ap.add_argument("--jobs", type=int, default=40)
    ap.add_argument("--time-scale", type=float, default=0.0001)
    ap.add_argument("--max-iterations", type=int, default=200)
    ap.add_argument("--seeds", type=int, default=2)
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--slot", type=float, default=0.06)
    ap.add_argument("--speed-until", type=float, default=180.0, help="0: skip the 1000-server speed runs")
    ap.add_argument("--ps-fraction", type=float, default=0.0, help="each job is a PS job with this probability")
    ap.add_argument("--out", default="docs/results/sim/mlcc")
    a = ap.parse_args(argv)
    if min(a.servers, a.jobs, a.seeds, a.workers, a.max_iterations) < 1 or a.time_scale <= 0 or a.slot <= 0:
        ap.error("--servers, --jobs, --seeds, --workers, --max-iterations must be >= 1; --time-scale, --slot > 0")
    if not 0 <= a.ps_fraction <= 1:
        ap.error("--ps-fraction must be in [0, 1]")
    from hostctl.errors import ConfigError
    from hostctl_lab.sim.run import SweepSpec, check, summarize

    spec = SweepSpec(topology="mlcc-tree", servers=a.servers, jobs=a.jobs, time_scale=a.time_scale,
                     max_iterations=a.max_iterations, networks=NETWORKS, seeds=tuple(range(a.seeds)), slot_s=a.slot,
                     ps_fraction=a.ps_fraction)
    t0 = time.monotonic()
    try:
        check(spec)
    except ConfigError as e:
        print(f"sim_mlcc: {e}", file=sys.stderr)
        return 2
    d = asdict(spec)
    with ProcessPoolExecutor(max_workers=a.workers) as ex:
        runs = list(ex.map(run_placed, [d] * len(spec.combos()), spec.combos()))
    wall = time.monotonic() - t0
    rows = summarize(runs)
    rat = ratios(runs)
    print(f"MLCC vs MCS vs CCML vs fifo: mlcc-tree {a.servers} servers, {a.jobs} Philly jobs (time scale "
          f"{a.time_scale:g}, <= {a.max_iterations} iterations, PS fraction {a.ps_fraction:g}), {a.seeds} seeds, "
          f"slot {a.slot * 1e3:g} ms "
          f"({wall:.0f} s)")
    print(f"{'network':12} {'finished':>9} {'avg JCT':>9} {'p95 JCT':>9} {'vs fifo':>8} {'wall s':>7} "
          f"{'wall s / sim h':>15}")
    for r in rows:
        rs = [x for x in runs if x["network"] == r["network"]]
        per_h = float(np.mean([x["wall_s"] / (x["sim_s"] / 3600) for x in rs]))
        r["wall_s_per_sim_hour"] = per_h
        print(f"{r['network']:12} {r['finished']:6.0f}/{r['jobs']:<3} {r['avg_jct_s']:8.2f}s {r['p95_jct_s']:8.2f}s "
              f"{r['ratio']:8.3f} {r['wall_s']:7.1f} {per_h:15.1f}")
    for k in ("mlcc/mcs", "mlcc/ccml", "mlcc-switch/mcs", "mlcc-switch/ccml"):
        if rat.get(k):
            print(f"{k:18} {rat[k]['mean']:.3f} ({(rat[k]['mean'] - 1) * 100:+.1f}%)  per seed "
                  + " ".join(f"{x:.3f}" for x in rat[k]["per_seed"]))
    pair = paired(runs)
    for k, v in pair.items():
        if v:
            print(f"{k:18} on jobs placed alike: {v['mean']:.3f} ({(v['mean'] - 1) * 100:+.1f}%), per seed "
                  + " ".join(f"{x:.3f}" for x in v["per_seed"]) + f", jobs {v['jobs']}")
    sp = []
    if a.speed_until > 0:
        for n in ("fifo", "mlcc", "mlcc-switch"):
            sp.append(speed(a.speed_until, n))
            x = sp[-1]
            print(f"speed {n:12}: 1000 servers, {x['jobs']} Philly jobs arriving over {x['arrivals_span_s']:g} s: "
                  f"first {a.speed_until:g} simulated s in {x['wall_s']:.1f} s wall "
                  f"({x['wall_s_per_sim_hour'] / 60:.0f} wall min per simulated hour at this density; "
                  f"{x['started_multi_server_jobs']} networked jobs started, {x['stats']['solves']} solves, "
                  f"{x['stats']['ticks']} slots)")
    os.makedirs(a.out, exist_ok=True)
    for r in runs:
        r["jct_s"] = {k: round(v, 4) for k, v in r["jct_s"].items()}
    path = os.path.join(a.out, "sim_mlcc.json")
    with open(path, "w") as f:
        json.dump({"command": " ".join(["python benchmarks/sim_mlcc.py"] + (argv or sys.argv[1:])),
                   "date": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
                   "machine": {"node": platform.node(), "cpus": os.cpu_count(), "python": platform.python_version()},
                   "spec": asdict(spec), "wall_s": wall, "summary": rows, "ratios": rat, "paired_vs_fifo": pair,
                   "speed": sp, "runs": runs},
                  f, indent=1)
    plot(runs, os.path.join(a.out, "sim_mlcc.png"),
         f"mlcc-tree {a.servers} servers, {a.jobs} Philly jobs (time scale {a.time_scale:g}, PS fraction "
         f"{a.ps_fraction:g}), {a.seeds} seeds")
    print(f"wrote {path} and sim_mlcc.png")
    return 0


if __name__ == "__main__":
    sys.exit(main())
