"""The cluster simulator's speed and memory at 1000 servers, how its cost grows, and what --steady costs
in accuracy.

    python benchmarks/sim_scale.py [--parts trace,dense,growth,accuracy] [--networks fifo,one]
                                   [--steady 0,50] [--out docs/results/sim/scale]

Parts (each run in a fresh process: its own peak RSS):

- ``trace``: the first ``--jobs`` multi-GPU jobs of the Philly trace at their own arrival times on
  MLCC's tree (``--servers`` x 8 GPUs, ff placement, fifo order), per network and --steady value, until
  every job ends, ``--until-h`` or ``--wall-limit`` seconds of wall time. The speed is simulated hours
  per wall minute over the busy window: from the arrival of the 1% quantile job to the last arrival
  (the trace's first jobs arrive days before the rest).
- ``dense``: the same jobs with their arrivals compressed into ``--dense-hours`` simulated hours, run
  that long: far more jobs share links at once.
- ``growth``: jobs x servers per ``--growth-networks`` (default fifo) over ``--sweep-hours`` of compressed
  arrivals (a plot).
- ``accuracy``: --steady against the exact run (every flow simulated) on paper 000's setting (16
  servers x 4 GPUs, one switch, 160 synthetic jobs, iterations and arrival window x 0.2, ff placement,
  srsf order): average and p95 JCT ratios, jobs placed differently (a job that ends a little earlier or
  later changes where later jobs go: their JCTs differ by much more than the extrapolation), the worst
  job among those placed the same, wall time.

Writes OUT/sim_scale.json and OUT/sim_scale.png.
"""

from __future__ import annotations

import argparse
import json
import multiprocessing as mp
import os
import resource
import sys
import time


def _one(a: dict) -> dict:
    from hostctl_lab.sim import kernel
    from hostctl_lab.sim.cluster import ClusterSim
    from hostctl_lab.sim.topo import load
    from hostctl_lab.sim.workload import philly, synthetic

    t0 = time.perf_counter()
    if a["kind"] == "accuracy":
        fab = load("single-switch", 16)
        js = synthetic(160, seed=a["seed"], window_s=240.0, iterations=(200, 1200))
        kw = dict(gpus_per_server=4, placement="ff", order="srsf")
    else:
        fab = load("mlcc-tree", a["servers"])
        js = philly(None, a["jobs"], seed=0)
        if a.get("compress_to_s"):
            span = max(j.arrival_s for j in js) or 1.0
            js = philly(None, a["jobs"], seed=0, time_scale=0.999 * a["compress_to_s"] / span)
        kw = {}
    setup = time.perf_counter() - t0
    sim = ClusterSim(fab, js, network=a["network"], steady=a["steady"], park=a.get("park", True),
                     until_s=a.get("until_s"), seed=a.get("seed", 0), reconfirm=a.get("reconfirm", True),
                     quorum=a.get("quorum", True), **kw)
    curve = []
    w0 = time.perf_counter()

    def progress(s) -> bool:
        w = time.perf_counter() - w0
        curve.append((s.now, w))
        return w > a.get("wall_limit_s", 1e9)

    r = sim.run(progress=progress, every=2000)
    curve.append((r["sim_s"], r["wall_s"]))
    r["placed"] = {j.spec.name: j.servers for j in sim.jobs}
    out = {**a, "setup_s": setup, **r, "sim_h_per_wall_min": (r["sim_s"] / 3600) / (r["wall_s"] / 60),
           "kernel": dict(kernel.STATS), "curve": curve,
           "max_rss_mib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024}
    if a["kind"] == "trace":  # the busy window: the 1% quantile arrival to the last arrival
        arr = sorted(j.arrival_s for j in js)
        lo, hi = arr[len(arr) // 100], arr[-1]
        out["busy_window_h"] = (lo / 3600, hi / 3600)
        out["busy_rate_h_per_min"] = _rate(curve, lo, hi)
    return out


def _rate(curve: list, lo: float, hi: float) -> float | None:
    """Simulated hours per wall minute between simulated times lo and hi (or the run's end)."""
    w = [(t, x) for t, x in curve if lo <= t <= hi]
    if len(w) < 2 or w[-1][1] <= w[0][1]:
        return None
    return ((w[-1][0] - w[0][0]) / 3600) / ((w[-1][1] - w[0][1]) / 60)


def _quorum_label(qu) -> str:
    """How a run's --quorum shows in the printed lines: nothing for the default rule."""
    return "" if qu is True else " (no quorum)" if not qu else f" (quorum {qu})"


def run(a: dict) -> dict:
    with mp.get_context("spawn").Pool(1) as pool:  # a fresh process: its own peak RSS
        return pool.apply(_one, (a,))


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--parts", default="trace,dense,growth,accuracy")
    ap.add_argument("--networks", default="fifo,one")
    ap.add_argument("--steady", default="0,50", help="--steady values of the trace and dense parts")
    ap.add_argument("--jobs", type=int, default=1000)
    ap.add_argument("--servers", type=int, default=1000)
    ap.add_argument("--until-h", type=float, default=None, help="trace part: stop at this simulated hour")
    ap.add_argument("--wall-limit", type=float, default=900.0, help="stop a trace or dense run after this (s)")
    ap.add_argument("--dense-hours", type=float, default=1.0)
    ap.add_argument("--sweep", default="250,500,1000", help="job counts of the growth sweep")
    ap.add_argument("--sweep-servers", default="1000")
    ap.add_argument("--sweep-hours", type=float, default=0.05)
    ap.add_argument("--growth-networks", default="fifo", help="networks of the growth sweep (e.g. fifo,mlcc)")
    ap.add_argument("--accuracy-seeds", type=int, default=2)
    ap.add_argument("--accuracy-steady", default="20,50")
    ap.add_argument("--reconfirm", default="1", help="--steady's shorter re-measure after a change (1), the full one "
                    "(0), or both (1,0): trace and accuracy parts")
    ap.add_argument("--quorum", default="1", help="--steady's quorum (1: a component parks once 90%% of its jobs have "
                    "their means), without it (0), a share (e.g. 0.75: hostctl sim --steady-quorum), or a comma "
                    "list (1,0): trace and accuracy parts")
    ap.add_argument("--out", default="results/sim/scale")
    a = ap.parse_args()
    parts = set(a.parts.split(","))
    nets = [n for n in a.networks.split(",") if n]
    steadies = [int(x) for x in a.steady.split(",") if x]
    reconf = [x == "1" for x in a.reconfirm.split(",") if x]
    quorums = [True if x == "1" else False if x == "0" else float(x) for x in a.quorum.split(",") if x]
    res: dict = {"trace": [], "dense": [], "growth": [], "accuracy": []}
    if "trace" in parts:
        for net, st, rc, qu in [(n, st, rc, qu) for n in nets for st in steadies
                                for rc in (reconf if st else [True]) for qu in (quorums if st else [True])]:
            r = run({"kind": "trace", "servers": a.servers, "jobs": a.jobs, "network": net, "steady": st,
                     "until_s": a.until_h * 3600 if a.until_h else None, "wall_limit_s": a.wall_limit,
                     "reconfirm": rc, "quorum": qu})
            r["quorum"] = qu
            res["trace"].append(r)
            br = r["busy_rate_h_per_min"]
            print(f"trace {net:>5} steady {st:>3}{'' if rc else ' (full re-measure)'}{_quorum_label(qu)}: "
                  f"{r['sim_s'] / 3600:.1f} simulated h in {r['wall_s']:.0f} s, "
                  f"busy window {br if br is None else round(br, 1)} h/min, all {r['sim_h_per_wall_min']:.1f} "
                  f"h/min, {r['events']} events ({r['events_per_s']:.0f}/s), {r['finished']} finished, "
                  f"{'stopped at the wall limit, ' if r['stats'].get('stopped_early') else ''}"
                  f"peak RSS {r['max_rss_mib']:.0f} MiB", flush=True)
    if "dense" in parts:
        for net in nets:
            for st in steadies:
                until = a.dense_hours * 3600
                r = run({"kind": "dense", "servers": a.servers, "jobs": a.jobs, "network": net, "steady": st,
                         "compress_to_s": until, "until_s": until, "wall_limit_s": a.wall_limit})
                res["dense"].append(r)
                print(f"dense {net:>5} steady {st:>3}: {r['sim_s'] / 3600:.2f} simulated h in {r['wall_s']:.0f} s = "
                      f"{r['sim_h_per_wall_min']:.3f} h/min, {r['events']} events, {r['finished']} finished, "
                      f"{'stopped at the wall limit, ' if r['stats'].get('stopped_early') else ''}"
                      f"peak RSS {r['max_rss_mib']:.0f} MiB", flush=True)
    if "growth" in parts:
        for s, n, net in [(s, n, net) for s in [int(x) for x in a.sweep_servers.split(",") if x]
                          for n in [int(x) for x in a.sweep.split(",") if x]
                          for net in a.growth_networks.split(",") if net]:
            until = a.sweep_hours * 3600
            r = run({"kind": "growth", "servers": s, "jobs": n, "network": net, "steady": 0,
                     "compress_to_s": until, "until_s": until})
            res["growth"].append(r)
            print(f"growth {net}: {s} servers, {n} jobs: {r['wall_s']:.2f} s wall, {r['events']} events, "
                  f"{r['events_per_s']:.0f} events/s, {r['stats']['solves']} solves", flush=True)
    if "accuracy" in parts:
        for net in nets:
            for seed in range(a.accuracy_seeds):
                exact = run({"kind": "accuracy", "network": net, "steady": 0, "park": False, "seed": seed})
                for st, rc, qu in [(st, rc, qu) for st in [int(x) for x in a.accuracy_steady.split(",") if x]
                                   for rc in reconf for qu in quorums]:
                    r = run({"kind": "accuracy", "network": net, "steady": st, "seed": seed, "reconfirm": rc,
                             "quorum": qu})
                    same = [k for k in exact["jct_s"] if r["placed"][k] == exact["placed"][k]]
                    err = [abs(r["jct_s"][k] / exact["jct_s"][k] - 1) for k in same] or [0.0]
                    row = {"network": net, "seed": seed, "steady": st, "reconfirm": rc, "quorum": qu,
                           "avg_jct_ratio": r["avg_jct_s"] / exact["avg_jct_s"],
                           "p95_jct_ratio": r["p95_jct_s"] / exact["p95_jct_s"],
                           "placed_differently": len(exact["jct_s"]) - len(same),
                           "worst_job_err": max(err), "mean_job_err": sum(err) / len(err),
                           "wall_s": r["wall_s"], "exact_wall_s": exact["wall_s"], "events": r["events"],
                           "exact_events": exact["events"], "steady_parks": r["stats"]["steady_parks"],
                           "parks": r["stats"]["parks"], "steady_quorum": r["stats"]["steady_quorum"]}
                    res["accuracy"].append(row)
                    print(f"accuracy {net:>5} seed {seed} steady {st}{'' if rc else ' (full)'}{_quorum_label(qu)}: "
                          f"avg JCT x{row['avg_jct_ratio']:.4f}, p95 "
                          f"x{row['p95_jct_ratio']:.4f}, {row['placed_differently']} placed differently, worst other job "
                          f"{row['worst_job_err']:.2%}, wall {r['wall_s']:.1f} "
                          f"s vs exact {exact['wall_s']:.1f} s", flush=True)
    for rows in res.values():
        for r in rows:
            r.pop("jct_s", None)
            r.pop("placed", None)
    os.makedirs(a.out, exist_ok=True)
    path = os.path.join(a.out, "sim_scale.json")
    with open(path, "w") as f:
        json.dump({"command": " ".join([os.path.basename(sys.executable)] + sys.argv),
                   "date": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
                   "machine": {"cpus": os.cpu_count(), "node": os.uname().nodename}, **res}, f, indent=1)
    print(f"wrote {path}")
    if res["trace"] or res["growth"]:
        _plot(res, a, os.path.join(a.out, "sim_scale.png"))
    return 0


def _plot(res: dict, a, path: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    parts = [k for k in ("trace", "growth") if res[k]]  # a panel for each part that ran
    if not parts:
        return
    fig, axes = plt.subplots(1, len(parts), figsize=(5.5 * len(parts), 4), squeeze=False)
    for ax, part in zip(axes[0], parts):
        if part == "trace":
            for r in res["trace"]:
                t = [c[0] / 3600 for c in r["curve"]]
                w = [c[1] / 60 for c in r["curve"]]
                ax.plot(w, t, label=f"{r['network']}, steady {r['steady'] or 'off (exact)'}")
            ax.set_xlabel("wall minutes")
            ax.set_ylabel("simulated hours")
            ax.set_title(f"Philly, {a.jobs} jobs at their own arrivals, {a.servers} servers")
            ax.legend(fontsize=8)
        else:
            for s, net in sorted({(g["servers"], g["network"]) for g in res["growth"]}):
                gs = [g for g in res["growth"] if g["servers"] == s and g["network"] == net]
                ax.plot([g["jobs"] for g in gs], [g["wall_s"] for g in gs], "o-", label=f"{net}, {s} servers")
            ax.set_xlabel("jobs (Philly, first N multi-GPU), arrivals compressed")
            ax.set_ylabel(f"wall s for {a.sweep_hours:g} simulated h (exact)")
            ax.set_xscale("log")
            ax.set_yscale("log")
            ax.legend()
        ax.grid(alpha=0.3)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    print(f"wrote {path}")


if __name__ == "__main__":
    sys.exit(main())
