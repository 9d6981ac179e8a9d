"""TensorLights (``one``, ``rr``) against fifo on MLCC's tree at 1000 servers x 8 GPUs (docs/sim-tlscale.md).

    python benchmarks/sim_tlscale.py [--parts main,exact] [--servers 1000] [--jobs 200] [--span 600]
        [--max-iterations 300] [--seeds 2] [--steady 50] [--workers 2] [--out docs/results/sim/tlscale]

``main``: the first ``--jobs`` multi-GPU Philly jobs, arrivals compressed into ``--span`` simulated
seconds, at most ``--max-iterations`` iterations each, ff placement, fifo queue, every network of
fifo, one, rr, seeds 0..S-1 (the models drawn), ``--steady`` (approximate parking). Prints per
network: finished jobs, average and p95 JCT, average JCT of the networked jobs (more than one server),
ratio to fifo (mean of per-seed ratios), the same on jobs placed alike, wall time.
``exact``: a smaller case (``--exact-jobs``, ``--exact-span``, ``--exact-max-iterations``, seed 0) at
steady 0 (every flow simulated) and at ``--steady``: the ranking of the three networks in both.
Writes OUT/tlscale.json, OUT/exact.json and OUT/jct_cdf.png.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import sys
import time
from concurrent.futures import ProcessPoolExecutor
from dataclasses import asdict, replace

import numpy as np

NETWORKS = ("fifo", "one", "rr")


def _run(args):
    from hostctl_lab.sim.tlscale import run

    return run(*args)


def table(title: str, runs: list[dict]) -> tuple[list[dict], dict]:
    from hostctl_lab.sim.tlscale import paired, summary

    rows, pair = summary(runs), paired(runs)
    rows.sort(key=lambda r: NETWORKS.index(r["network"]))
    print(title)
    print(f"{'network':8} {'finished':>9} {'avg JCT':>9} {'p95 JCT':>9} {'networked':>10} {'vs fifo':>8} "
          f"{'placed alike':>13} {'wall s':>7}")
    for r in rows:
        p = pair.get(f"{r['network']}/fifo")
        r["placed_alike"] = p
        print(f"{r['network']:8} {r['finished']:5.0f}/{r['jobs']:<3} {r['avg_jct_s']:8.1f}s {r['p95_jct_s']:8.1f}s "
              f"{r['networked_avg_jct_s']:9.1f}s {r['ratio']:8.3f} "
              f"{(p['mean'] if p else 1.0):7.3f} ({sum(p['jobs']) if p else '-'}) {r['wall_s']:7.0f}"
              + (f"  [{r['stopped_early']} run(s) stopped at the wall limit]" if r["stopped_early"] else "")
              + (f"  [{r['unconverged']} kernel solves unverified]" if r["unconverged"] else ""))
    return rows, pair


def plot(runs: list[dict], path: str, title: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from hostctl_lab.sim.tlscale import networked_avg  # noqa: F401  (same definitions as the table)

    fig, axes = plt.subplots(1, 2, figsize=(11, 4.2))
    for k, n in enumerate(NETWORKS):
        rs = [r for r in runs if r["network"] == n]
        for ax, net_only in zip(axes, (False, True)):
            v = np.sort([t for r in rs for j, t in r["jct_s"].items()
                         if not net_only or len(r["servers"].get(j, ())) > 1])
            if len(v):
                ax.plot(v, np.arange(1, len(v) + 1) / len(v), color=f"C{k}", label=n)
    for ax, t in zip(axes, ("all jobs", "networked jobs (more than one server)")):
        ax.set_xscale("log")
        ax.set_xlabel("job completion time (s)")
        ax.set_ylabel("fraction of jobs")
        ax.set_title(t, fontsize=9)
        ax.grid(alpha=0.3)
        ax.legend(fontsize=8)
    fig.suptitle(title, fontsize=9)
    fig.tight_layout()
    fig.savefig(path, dpi=90)
    plt.close(fig)


def slim(r: dict) -> dict:
    r = dict(r)
    r["jct_s"] = {k: round(v, 3) for k, v in r["jct_s"].items()}
    r["servers"] = {k: v for k, v in r["servers"].items() if len(v) > 1}  # the networked jobs' servers
    return r


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--parts", default="main,exact")
    ap.add_argument("--servers", type=int, default=1000)
    ap.add_argument("--jobs", type=int, default=200)
    ap.add_argument("--span", type=float, default=600.0, help="arrivals compressed into this many simulated s")
    ap.add_argument("--max-iterations", type=int, default=300)
    ap.add_argument("--seeds", type=int, default=2)
    ap.add_argument("--steady", type=int, default=50)
    ap.add_argument("--rr-interval", type=float, default=2.0)
    ap.add_argument("--wall-limit", type=float, default=600.0, help="stop a run after this many wall s")
    ap.add_argument("--exact-jobs", type=int, default=100)
    ap.add_argument("--exact-span", type=float, default=300.0)
    ap.add_argument("--exact-max-iterations", type=int, default=150)
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--out", default="docs/results/sim/tlscale")
    a = ap.parse_args(argv)
    if min(a.servers, a.jobs, a.seeds, a.workers, a.max_iterations, a.exact_jobs, a.exact_max_iterations) < 1 \
            or min(a.span, a.exact_span, a.rr_interval, a.wall_limit) <= 0 or a.steady < 0:
        ap.error("counts must be >= 1, --span, --exact-span, --rr-interval, --wall-limit > 0, --steady >= 0")
    from hostctl.errors import ConfigError
    from hostctl_lab.sim.tlscale import Case

    parts = set(a.parts.split(","))
    os.makedirs(a.out, exist_ok=True)
    meta = {"command": " ".join(["python benchmarks/sim_tlscale.py"] + (argv if argv is not None else sys.argv[1:])),
            "date": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
            "machine": {"node": platform.node(), "cpus": os.cpu_count(), "python": platform.python_version()}}
    try:
        if "main" in parts:
            case = Case(servers=a.servers, jobs=a.jobs, span_s=a.span, max_iterations=a.max_iterations,
                        steady=a.steady, rr_interval_s=a.rr_interval, wall_limit_s=a.wall_limit)
            jobs = [(case, n, s) for s in range(a.seeds) for n in NETWORKS]
            jobs.sort(key=lambda x: x[1] == "fifo")  # the slow policies first
            t0 = time.monotonic()
            with ProcessPoolExecutor(max_workers=a.workers) as ex:
                runs = list(ex.map(_run, jobs))
            wall = time.monotonic() - t0
            title = (f"mlcc-tree {a.servers} servers x 8 GPUs, first {a.jobs} multi-GPU Philly jobs arriving over "
                     f"{a.span:g} s, <= {a.max_iterations} iterations, ff, steady {a.steady}, {a.seeds} seeds "
                     f"({wall:.0f} s wall)")
            rows, pair = table(title, runs)
            with open(os.path.join(a.out, "tlscale.json"), "w") as f:
                json.dump({**meta, "case": asdict(case), "seeds": a.seeds, "wall_s": wall, "summary": rows,
                           "placed_alike": pair, "runs": [slim(r) for r in runs]}, f, indent=1)
            plot(runs, os.path.join(a.out, "jct_cdf.png"), title)
        if "exact" in parts:
            base = Case(servers=a.servers, jobs=a.exact_jobs, span_s=a.exact_span,
                        max_iterations=a.exact_max_iterations, rr_interval_s=a.rr_interval, wall_limit_s=a.wall_limit)
            jobs = [(replace(base, steady=st), n, 0) for st in (0, a.steady) for n in NETWORKS]
            jobs.sort(key=lambda x: (x[0].steady != 0, x[1] == "fifo"))
            t0 = time.monotonic()
            with ProcessPoolExecutor(max_workers=a.workers) as ex:
                runs = list(ex.map(_run, jobs))
            wall = time.monotonic() - t0
            out = {}
            for st in (0, a.steady):
                rs = [r for r in runs if r["case"]["steady"] == st]
                rows, pair = table(f"exact check: {a.exact_jobs} jobs over {a.exact_span:g} s, <= "
                                   f"{a.exact_max_iterations} iterations, seed 0, steady {st}", rs)
                rank = [r["network"] for r in sorted(rows, key=lambda r: r["avg_jct_s"])]
                print(f"  ranking by average JCT: {' < '.join(rank)}; steady parks "
                      + ", ".join(f"{r['network']} {r['steady_parks']:.0f}" for r in rows) + "; events "
                      + ", ".join(f"{r['network']} {r['events']:.0f}" for r in rows))
                out[str(st)] = {"summary": rows, "placed_alike": pair, "ranking": rank,
                                "runs": [slim(r) for r in rs]}
            same = out["0"]["ranking"] == out[str(a.steady)]["ranking"]
            print(f"same ranking at steady 0 and {a.steady}: {same} ({wall:.0f} s wall)")
            with open(os.path.join(a.out, "exact.json"), "w") as f:
                json.dump({**meta, "case": asdict(base), "steady": a.steady, "same_ranking": same, "wall_s": wall,
                           "by_steady": out}, f, indent=1)
    except ConfigError as e:
        print(f"sim_tlscale: {e}", file=sys.stderr)
        return 2
    print(f"wrote {a.out}/")
    return 0


if __name__ == "__main__":
    sys.exit(main())
