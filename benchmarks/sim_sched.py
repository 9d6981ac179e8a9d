"""The cluster papers' schedulers in the cluster engine (link-level fluid contention) on paper 000's
setting, against paper 000's tables and against the task-level simulator (hostctl_lab.sim.paper000).

    .venv/bin/python benchmarks/sim_sched.py [--seeds 3] [--scale 0.05] [--workers 2]
                                             [--out docs/results/sim/sched]

16 servers x 4 GPUs on one 10 Gbit/s switch, 160 jobs of paper 000's mix per seed
(``workload.synthetic(160, seed)``), with iterations and the arrival window both x ``--scale`` (the
paper: 1000-6000 iterations over 1200 s; 0.05: 50-300 over 60 s; the load is the same, the runs 20
times shorter). GPUs are exclusive (the engine's model; paper 000 packs jobs into GPU memory).

Configurations (placement / order / network):
  Table IV  (placement, all Ada-SRSF): ff, ls, rand, lwf1 / ada-srsf / adadual
  Table V   (LWF-1): ada-srsf with srsf1 (SRSF(1)), srsf2, adadual; adadual with eta = 0 (threshold
            0.5, the engine's own tie); the engine's srsf with fifo (no admission)
  paper 001: sjfbco / fifo / fifo against ff / fifo / fifo (makespan), and against pack / fifo / fifo
            (consolidation without SJF) and ff / srsf / fifo (a short-first order without SJF-BCO)
Writes ``sched.json`` (per configuration and seed; ratios next to the paper's and the task-level
simulator's from docs/results/sim/paper000/paper000.json) and ``sched.png``.
"""

from __future__ import annotations

import argparse
import json
import time
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

import numpy as np

from hostctl_lab.bench.results import write_results

ROOT = Path(__file__).resolve().parent.parent
# name: (placement, order, network, adadual_eta)
CONFIGS = {
    "ff+ada": ("ff", "ada-srsf", "adadual", None), "ls+ada": ("ls", "ada-srsf", "adadual", None),
    "rand+ada": ("rand", "ada-srsf", "adadual", None), "lwf1+ada": ("lwf1", "ada-srsf", "adadual", None),
    "lwf1+srsf1": ("lwf1", "ada-srsf", "srsf1", None), "lwf1+srsf2": ("lwf1", "ada-srsf", "srsf2", None),
    "lwf1+ada-eta0": ("lwf1", "ada-srsf", "adadual", 0.0), "lwf1+srsf-fifo": ("lwf1", "srsf", "fifo", None),
    "ff+fifo": ("ff", "fifo", "fifo", None), "sjfbco+fifo": ("sjfbco", "fifo", "fifo", None),
    "pack+fifo": ("pack", "fifo", "fifo", None), "ff+srsf-fifo": ("ff", "srsf", "fifo", None),
}
# (ours, baseline, metric, paper 000's ratio or None); paper's from its Tables IV and V
COMPARE = [
    ("lwf1+ada", "ff+ada", "avg_jct", -0.428), ("lwf1+ada", "ls+ada", "avg_jct", -0.519),
    ("lwf1+ada", "rand+ada", "avg_jct", -0.619), ("lwf1+ada", "lwf1+srsf1", "avg_jct", -0.201),
    ("lwf1+ada", "lwf1+srsf2", "avg_jct", -0.367), ("lwf1+ada-eta0", "lwf1+srsf1", "avg_jct", None),
    ("lwf1+srsf-fifo", "lwf1+srsf1", "avg_jct", None), ("lwf1+ada", "ff+ada", "gpu_util", 0.599),
    ("lwf1+ada", "lwf1+srsf1", "gpu_util", 0.396), ("sjfbco+fifo", "ff+fifo", "makespan", None),
    ("sjfbco+fifo", "ff+fifo", "avg_jct", None), ("sjfbco+fifo", "pack+fifo", "makespan", None),
    ("sjfbco+fifo", "ff+srsf-fifo", "makespan", None), ("pack+fifo", "ff+fifo", "makespan", None),
]


def paper000_jobs(seed: int, scale: float) -> list:
    """Paper 000's 160 jobs of seed ``seed``, iterations and arrival window x ``scale`` (also
    benchmarks/sim_iter_model.py's setting)."""
    from hostctl_lab.sim import workload

    return workload.synthetic(160, seed=seed, window_s=1200 * scale,
                              iterations=(round(1000 * scale), round(6000 * scale)))


def setting_args(ap: argparse.ArgumentParser, out: str) -> argparse.Namespace:
    """--seeds, --scale, --workers, --out (default ``out``) of a benchmark on paper 000's setting, parsed
    and checked (exits with one line)."""
    ap.add_argument("--seeds", type=int, default=3)
    ap.add_argument("--scale", type=float, default=0.05, help="iterations and arrival window x this (paper: 1)")
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--out", default=out)
    a = ap.parse_args()
    if a.seeds < 1 or not 0 < a.scale <= 1 or a.workers < 1:
        raise SystemExit(f"{ap.prog}: --seeds >= 1, 0 < --scale <= 1 and --workers >= 1")
    return a


def spread(v) -> dict:
    """Per-seed values as their mean, sample std (0 for one seed), min, max and the list."""
    v = np.asarray(v, dtype=float)
    return {"mean": float(v.mean()), "std": float(v.std(ddof=1)) if len(v) > 1 else 0.0,
            "min": float(v.min()), "max": float(v.max()), "per_seed": v.tolist()}


def run_one(name: str, seed: int, scale: float) -> dict:
    from hostctl_lab.sim.cluster import simulate
    from hostctl_lab.sim.topo import single_switch

    p, o, n, eta = CONFIGS[name]
    jobs = paper000_jobs(seed, scale)
    t0 = time.process_time()
    r = simulate(single_switch(16), jobs, placement=p, order=o, network=n, seed=seed, gpus_per_server=4,
                 adadual_eta=eta)
    jct = np.array(list(r["jct_s"].values()))
    work = sum(j.gpus * j.iterations * j.compute_s for j in jobs)
    return {"config": name, "seed": seed, "finished": r["finished"], "avg_jct": r["avg_jct_s"],
            "median_jct": float(np.median(jct)), "p95_jct": r["p95_jct_s"], "makespan": r["makespan_s"],
            "gpu_util": work / (64 * r["makespan_s"]), "events": r["events"],
            "cpu_s": time.process_time() - t0,
            "multi_server_jobs": r["multi_server_jobs"],
            **{k: r["stats"][k] for k in ("max_comm_per_server", "admitted", "refused") if k in r["stats"]}}


def ratios(runs: dict, a: str, b: str, metric: str) -> dict:
    seeds = sorted(set(runs[a]) & set(runs[b]))
    return spread([runs[a][s][metric] / runs[b][s][metric] - 1 for s in seeds])


def task_level(a: str, b: str, metric: str) -> float | None:
    """The task-level simulator's ratio from its stored results (docs/results/sim/paper000)."""
    try:
        d = json.loads((ROOT / "docs/results/sim/paper000/paper000.json").read_text())
        return d["comparisons"][f"{a} vs {b}"][metric]["mean_of_ratios"]
    except (OSError, KeyError, ValueError):
        return None


def plot(rows: list[dict], runs: dict, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (ax, bx) = plt.subplots(1, 2, figsize=(12, 4.5), gridspec_kw={"width_ratios": [3, 2]})
    rs = [r for r in rows if r["metric"] == "avg_jct" and (r["paper"] is not None or r["task_level"] is not None)]
    x = np.arange(len(rs))
    w = 0.27
    ax.bar(x - w, [100 * r["engine"]["mean"] for r in rs], w, yerr=[100 * r["engine"]["std"] for r in rs],
           label="engine (link-level fluid)", capsize=3)
    ax.bar(x, [100 * (r["task_level"] or 0) for r in rs], w, label="task-level (sim/paper000.py)")
    ax.bar(x + w, [100 * (r["paper"] or 0) for r in rs], w, label="paper 000")
    ax.set_xticks(x, [f"{r['ours']}\nvs {r['baseline']}" for r in rs], fontsize=7)
    ax.axhline(0, color="k", lw=0.6)
    ax.set_ylabel("avg JCT change (%)")
    ax.legend(fontsize=8)
    ax.grid(axis="y", alpha=0.3)
    names = ["ff+fifo", "ff+srsf-fifo", "pack+fifo", "sjfbco+fifo", "lwf1+srsf-fifo", "lwf1+ada"]
    seeds = sorted(runs["ff+fifo"])
    for k, s in enumerate(seeds):
        bx.plot(range(len(names)), [runs[n][s]["makespan"] for n in names], "o-", alpha=0.7, label=f"seed {s}")
    bx.set_xticks(range(len(names)), names, fontsize=8)
    bx.set_ylabel("makespan (s)")
    bx.legend(fontsize=8)
    bx.grid(alpha=0.3)
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)
    print(f"wrote {path}")


def main() -> None:
    a = setting_args(argparse.ArgumentParser(description=__doc__.split("\n\n")[0]),
                     str(ROOT / "docs/results/sim/sched"))
    wall0 = time.time()
    tasks = [(n, s) for n in ["sjfbco+fifo"] + [c for c in CONFIGS if c != "sjfbco+fifo"] for s in range(a.seeds)]
    with ProcessPoolExecutor(a.workers) as ex:
        out = list(ex.map(run_one, [t[0] for t in tasks], [t[1] for t in tasks], [a.scale] * len(tasks)))
    runs: dict[str, dict[int, dict]] = {}
    for r in out:
        runs.setdefault(r["config"], {})[r["seed"]] = r
    means = {n: {k: float(np.mean([r[k] for r in v.values()])) for k in
                 ("avg_jct", "median_jct", "p95_jct", "makespan", "gpu_util", "cpu_s", "events", "finished")}
             for n, v in runs.items()}
    rows = [{"ours": x, "baseline": y, "metric": m, "engine": ratios(runs, x, y, m), "paper": p,
             "task_level": task_level(x, y, m)} for x, y, m, p in COMPARE]
    print(f"{'configuration':16s} {'avg JCT':>9s} {'p95':>9s} {'makespan':>9s} {'util':>6s} {'cpu s':>6s}")
    for n, m in means.items():
        print(f"{n:16s} {m['avg_jct']:9.1f} {m['p95_jct']:9.1f} {m['makespan']:9.1f} {m['gpu_util']:6.1%} "
              f"{m['cpu_s']:6.1f}")
    for r in rows:
        e = r["engine"]
        f = lambda v: "-" if v is None else f"{100 * v:+.1f}%"  # noqa: E731
        print(f"{r['ours']} vs {r['baseline']} {r['metric']}: engine {100 * e['mean']:+.1f}% +- {100 * e['std']:.1f} "
              f"({100 * e['min']:+.1f} to {100 * e['max']:+.1f}), task-level {f(r['task_level'])}, paper {f(r['paper'])}")
    outdir = Path(a.out)
    write_results(outdir / "sched.json", "sim_sched", {
        "setup": {"servers": 16, "gpus_per_server": 4, "topology": "single-switch 10 Gbit/s", "jobs": 160,
                  "seeds": list(range(a.seeds)), "scale": a.scale,
                  "iterations": [round(1000 * a.scale), round(6000 * a.scale)], "window_s": 1200 * a.scale,
                  "wall_s": time.time() - wall0, "workers": a.workers},
        "configs": {n: dict(zip(("placement", "order", "network", "adadual_eta"), c)) for n, c in CONFIGS.items()},
        "means": means, "comparisons": rows,
        "runs": {n: [v[s] for s in sorted(v)] for n, v in runs.items()}})
    plot(rows, runs, outdir / "sched.png")
    print(f"wall {time.time() - wall0:.0f} s")


if __name__ == "__main__":
    main()
