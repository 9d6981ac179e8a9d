"""Reproduce paper 000's Table IV (placement, all with Ada-SRSF), Table V (admission, all with LWF-1)
and the kappa sweep of Fig. 5 with the task-level simulator hostctl_lab.sim.paper000.

    .venv/bin/python benchmarks/sim_paper000.py [--seeds 10] [--workers 2] [--gpu-mem 16384]
                                                [--out docs/results/sim/paper000]

16 servers x 4 GPUs, 160 jobs of the paper's mix per seed (the workload of seed s is make_jobs(s)),
the same workloads for every configuration. Writes ``paper000.json`` (per configuration: per-seed
and mean metrics; the paper's tables; our ratios next to the paper's) and ``paper000_cdf.png``
(JCT CDFs pooled over seeds, and mean JCT over kappa) under --out.
"""

from __future__ import annotations

import argparse
import json
import multiprocessing as mp
import sys
import time
from pathlib import Path

import numpy as np

from hostctl_lab.bench.results import write_results
from hostctl_lab.sim.paper000 import make_jobs, run

# (placement, admission) per configuration name
CONFIGS = {
    "lwf1+ada": ("lwf1", "adadual"),
    "ff+ada": ("ff", "adadual"), "ls+ada": ("ls", "adadual"), "rand+ada": ("rand", "adadual"),
    "lwf1+srsf1": ("lwf1", "srsf1"), "lwf1+srsf2": ("lwf1", "srsf2"), "lwf1+srsf3": ("lwf1", "srsf3"),
    **{f"lwf{k}+ada": (f"lwf{k}", "adadual") for k in (2, 4, 8, 16, 32)},
}
TABLE_IV = ["rand+ada", "ff+ada", "ls+ada", "lwf1+ada"]
TABLE_V = ["lwf1+srsf1", "lwf1+srsf2", "lwf1+srsf3", "lwf1+ada"]
KAPPAS = [1, 2, 4, 8, 16, 32]
# the paper's numbers: (avg GPU util, avg JCT, median JCT, p95 JCT)
PAPER = {
    "rand+ada": (0.1952, 2881.6, 680.3, 8910.9), "ff+ada": (0.2676, 1921.1, 766.1, 6224.6),
    "ls+ada": (0.2514, 2282.41, 749.9, 7224.9), "lwf1+ada": (0.4278, 1098.57, 487.2, 4024.0),
    "lwf1+srsf1": (0.3065, 1374.84, 459.0, 6283.1), "lwf1+srsf2": (0.2595, 1734.74, 477.0, 7658.6),
    "lwf1+srsf3": (0.2514, 1750.9, 520.7, 7578.7),
}
METRICS = ("avg_jct", "median_jct", "p95_jct", "gpu_util", "makespan")


def _one(task: tuple) -> tuple:
    name, seed, n_jobs, gpu_mem, key_comm = task
    placement, admission = CONFIGS[name]
    t0 = time.process_time()
    r = run(make_jobs(seed, n_jobs), 16, 4, placement, admission, "srsf", seed, gpu_mem, key_comm=key_comm)
    r["cpu_s"] = time.process_time() - t0
    del r["gpu_util_per_gpu"]
    return name, seed, r


def _ratio(ours: dict, a: str, b: str, metric: str) -> dict:
    """a vs b: per-seed a/b - 1 (mean, std, min, max) and the ratio of the means - 1."""
    x = np.array(ours[a]["per_seed"][metric]) / np.array(ours[b]["per_seed"][metric]) - 1.0
    return {"mean_of_ratios": float(x.mean()), "std": float(x.std(ddof=1)) if len(x) > 1 else 0.0,
            "min": float(x.min()), "max": float(x.max()),
            "ratio_of_means": ours[a]["mean"][metric] / ours[b]["mean"][metric] - 1.0}


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--seeds", type=int, default=10)
    p.add_argument("--jobs", type=int, default=160)
    p.add_argument("--workers", type=int, default=1, help="processes (the machine is shared: 1 or 2)")
    p.add_argument("--gpu-mem", type=float, default=16384.0, help="MB per GPU (paper 16 GB, reference code 32 GB)")
    p.add_argument("--configs", default="all", help="comma-separated names of CONFIGS, or all")
    p.add_argument("--out", default="docs/results/sim/paper000")
    p.add_argument("--compute-key", action="store_true",
                   help="SRSF key without the communication term (the reference code's), see run(key_comm)")
    p.add_argument("--tag", default="", help="suffix of the output file names")
    p.add_argument("--cache", default=None, help="JSON-lines file of finished runs, reused and appended to "
                   "(default /tmp/sim_paper000<tag>_<gpu-mem>.jsonl); lets an interrupted sweep resume")
    p.add_argument("--report-only", action="store_true", help="summarise the runs in --cache, run nothing")
    a = p.parse_args(argv)
    names = list(CONFIGS) if a.configs == "all" else a.configs.split(",")
    bad = [n for n in names if n not in CONFIGS]
    if bad:
        print(f"error: unknown configuration(s) {bad}; known: {', '.join(CONFIGS)}", file=sys.stderr)
        return 2
    cache = Path(a.cache or f"/tmp/sim_paper000{a.tag}_{int(a.gpu_mem)}.jsonl")
    res: dict[str, dict[int, dict]] = {n: {} for n in names}
    if cache.exists():
        for line in cache.read_text().splitlines():
            c = json.loads(line)
            if (c["name"] in res and c["jobs"] == a.jobs and c["gpu_mem"] == a.gpu_mem and c["seed"] < a.seeds
                    and c.get("key_comm", True) == (not a.compute_key)):
                res[c["name"]][c["seed"]] = c["result"]
    tasks = [(n, s, a.jobs, a.gpu_mem, not a.compute_key) for s in range(a.seeds) for n in names if s not in res[n]]
    t0 = time.time()
    if tasks and not a.report_only:
        with mp.Pool(a.workers) if a.workers > 1 else _Serial() as pool, cache.open("a") as fh:
            for i, (name, seed, r) in enumerate(pool.imap_unordered(_one, tasks)):
                res[name][seed] = r
                fh.write(json.dumps({"name": name, "seed": seed, "jobs": a.jobs, "gpu_mem": a.gpu_mem,
                                     "key_comm": not a.compute_key, "result": r}) + "\n")
                fh.flush()
                print(f"[{i + 1}/{len(tasks)}] {name} seed {seed}: avg JCT {r['avg_jct']:.1f} s, util "
                      f"{100 * r['gpu_util']:.1f}%, max k {r['max_server_k']}, cpu {r['cpu_s']:.1f} s", flush=True)
    wall = time.time() - t0
    names = [n for n in names if res[n]]
    if not names:
        print(f"error: no finished runs in {cache}", file=sys.stderr)
        return 2

    ours: dict[str, dict] = {}
    for n in names:
        seeds = sorted(res[n])
        for r in res[n].values():  # JSON turned the k keys into strings
            r["comm_k_seconds"] = {int(k): v for k, v in r["comm_k_seconds"].items()}
        per = {m: [res[n][s][m] for s in seeds] for m in METRICS}
        ours[n] = {"placement": CONFIGS[n][0], "admission": CONFIGS[n][1], "seeds": seeds, "per_seed": per,
                   "mean": {m: float(np.mean(v)) for m, v in per.items()},
                   "std": {m: float(np.std(v, ddof=1)) if len(v) > 1 else 0.0 for m, v in per.items()},
                   "max_server_k": max(res[n][s]["max_server_k"] for s in seeds),
                   "comm_k_seconds": {str(k): float(np.mean([res[n][s]["comm_k_seconds"].get(k, 0.0) for s in seeds]))
                                      for k in sorted({k for s in seeds for k in res[n][s]["comm_k_seconds"]})},
                   "n_ar_mean": float(np.mean([res[n][s]["n_ar"] for s in seeds])),
                   "cpu_s_mean": float(np.mean([res[n][s]["cpu_s"] for s in seeds]))}
    comparisons = {}
    for other in [n for n in TABLE_IV + TABLE_V if n != "lwf1+ada"]:
        if other in ours and "lwf1+ada" in ours:
            key = f"lwf1+ada vs {other}"
            comparisons[key] = {
                "avg_jct": _ratio(ours, "lwf1+ada", other, "avg_jct"),
                "p95_jct": _ratio(ours, "lwf1+ada", other, "p95_jct"),
                "gpu_util": _ratio(ours, "lwf1+ada", other, "gpu_util"),
                "paper": {"avg_jct": PAPER["lwf1+ada"][1] / PAPER[other][1] - 1,
                          "p95_jct": PAPER["lwf1+ada"][3] / PAPER[other][3] - 1,
                          "gpu_util": PAPER["lwf1+ada"][0] / PAPER[other][0] - 1}}
    kappa = {}
    kn = [f"lwf{k}+ada" for k in KAPPAS if f"lwf{k}+ada" in ours]
    if kn:  # over the seeds every kappa ran
        common = sorted(set.intersection(*(set(ours[n]["seeds"]) for n in kn)))
        kappa = {"seeds": common, "avg_jct": {}, "gpu_util": {}, "vs_lwf1": {}}
        for n in kn:
            for m in ("avg_jct", "gpu_util"):
                kappa[m][n] = float(np.mean([res[n][s][m] for s in common]))
            kappa["vs_lwf1"][n] = kappa["avg_jct"][n] / kappa["avg_jct"].get("lwf1+ada", np.nan) - 1
    out = Path(a.out)
    body = {"setup": {"servers": 16, "gpus_per_server": 4, "gpu_mem_mb": a.gpu_mem, "jobs": a.jobs,
                      "seeds": a.seeds, "order": "srsf",
                      "srsf_key": "compute only" if a.compute_key else "compute + communication (E_J)",
                      "contention": "WangNic(a=6.69e-4, b=8.53e-10, eta=2.35e-10)",
                      "wall_s": wall, "cpu_s_total": float(sum(r["cpu_s"] for n in names for r in res[n].values()))},
            "paper": {n: dict(zip(("gpu_util", "avg_jct", "median_jct", "p95_jct"), v)) for n, v in PAPER.items()},
            "ours": ours, "comparisons": comparisons, "kappa_sweep": kappa,
            "jct": {n: [[round(x, 1) for x in res[n][s]["jct"]] for s in sorted(res[n])] for n in names}}
    write_results(out / f"paper000{a.tag}.json", "sim_paper000", body)
    _plot(ours, body["jct"], kappa, out / f"paper000{a.tag}_cdf.png")
    _print(ours, comparisons, kappa)
    return 0


class _Serial:
    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return False

    def imap_unordered(self, f, it):
        return map(f, it)


def _print(ours: dict, comparisons: dict, kappa: dict) -> None:
    print(f"\n{'config':12} {'util':>7} {'avg JCT':>9} {'median':>8} {'p95':>8}   paper: util avg JCT")
    for n, o in ours.items():
        m = o["mean"]
        pp = PAPER.get(n)
        paper = f"{100 * pp[0]:5.1f}% {pp[1]:8.1f}" if pp else ""
        print(f"{n:12} {100 * m['gpu_util']:6.1f}% {m['avg_jct']:9.1f} {m['median_jct']:8.1f} {m['p95_jct']:8.1f}   "
              f"{paper}")
    print()
    for k, c in comparisons.items():
        print(f"{k:26} avg JCT {100 * c['avg_jct']['mean_of_ratios']:+6.1f}% (+-{100 * c['avg_jct']['std']:.1f}) "
              f"paper {100 * c['paper']['avg_jct']:+6.1f}%   util {100 * c['gpu_util']['mean_of_ratios']:+6.1f}% "
              f"paper {100 * c['paper']['gpu_util']:+6.1f}%")
    if kappa:
        print(f"\nkappa sweep over seeds {kappa['seeds']}: " + ", ".join(
            f"{n.split('+')[0]} {v:.1f} s" for n, v in kappa["avg_jct"].items()))


def _plot(ours: dict, jct: dict, kappa: dict, path: Path) -> None:
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    fig, ax = plt.subplots(1, 3, figsize=(15, 4.2))
    for i, group in enumerate((TABLE_IV, TABLE_V)):
        for n in group:
            if n in jct:
                x = np.sort(np.concatenate(jct[n]))
                ax[i].plot(x, np.arange(1, len(x) + 1) / len(x), label=n)
        ax[i].set_xscale("log")
        ax[i].set_xlabel("JCT (s), all seeds pooled")
        ax[i].set_ylabel("CDF")
        ax[i].legend(fontsize=8)
        ax[i].grid(alpha=0.3)
    ax[0].set_title("Placement (Table IV), Ada-SRSF")
    ax[1].set_title("Admission (Table V), LWF-1")
    ks = [k for k in KAPPAS if f"lwf{k}+ada" in kappa.get("avg_jct", {})]
    if ks:
        m = [kappa["avg_jct"][f"lwf{k}+ada"] for k in ks]
        ax[2].plot(range(len(ks)), m, marker="o")
        ax[2].set_xticks(range(len(ks)), [str(k) for k in ks])
        ax[2].set_xlabel(f"kappa (LWF-kappa, Ada-SRSF), {len(kappa['seeds'])} seeds")
        ax[2].set_ylabel("average JCT (s), mean over seeds")
        ax[2].grid(alpha=0.3)
        ax[2].set_title("kappa sweep (Fig. 5c)")
    fig.tight_layout()
    fig.savefig(path, dpi=80)
    print(f"wrote {path}")


if __name__ == "__main__":
    sys.exit(main())
