"""A ring job's iteration model in the cluster engine: serial (compute, then the exchange) against paper
003's iteration time under WFBP (FIFO all-reduce), Horovod fusion and PACE (`--iter-model`), under fifo
and TensorLights `one`, on paper 000's setting.

    .venv/bin/python benchmarks/sim_iter_model.py [--seeds 3] [--scale 0.05] [--workers 2]
                                                  [--out docs/results/sim/iter_model]

16 servers x 4 GPUs on one 10 Gbit/s switch, 160 jobs of paper 000's mix per seed
(``workload.synthetic(160, seed)``, iterations and arrival window x ``--scale``; ff placement, fifo
order), exact (no --steady). Every (iteration model, network, seed) runs in its own process. Reports
each run's average and p95 JCT and makespan, and per network the mean (and spread over seeds) of
each model's average JCT against serial's on the same seed. Writes ``iter_model.json`` and
``iter_model.png``.
"""

from __future__ import annotations

import argparse
import sys
import time
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

import numpy as np

from hostctl_lab.bench.results import write_results

sys.path.insert(0, str(Path(__file__).resolve().parent))
from sim_sched import paper000_jobs, setting_args, spread  # noqa: E402  (paper 000's setting, shared)

ROOT = Path(__file__).resolve().parent.parent
MODELS = ("serial", "wfbp_fifo", "horovod_fusion", "pace")
NETWORKS = ("fifo", "one")


def run_one(model: str, network: str, seed: int, scale: float) -> dict:
    from hostctl_lab.sim.cluster import simulate
    from hostctl_lab.sim.topo import single_switch

    jobs = paper000_jobs(seed, scale)
    t0 = time.process_time()
    r = simulate(single_switch(16), jobs, network=network, seed=seed, gpus_per_server=4, iter_model=model)
    return {"model": model, "network": network, "seed": seed, "finished": r["finished"], "jobs": r["jobs"],
            "avg_jct": r["avg_jct_s"], "p95_jct": r["p95_jct_s"], "makespan": r["makespan_s"],
            "multi_server_jobs": r["multi_server_jobs"], "events": r["events"], "cpu_s": time.process_time() - t0}


def ratio(runs: list[dict], model: str, base: str, network: str, base_network: str | None = None) -> dict:
    by = {(r["model"], r["network"], r["seed"]): r for r in runs}
    seeds = sorted({r["seed"] for r in runs})
    return spread([by[(model, network, s)]["avg_jct"] / by[(base, base_network or network, s)]["avg_jct"]
                   for s in seeds])


def plot(body: dict, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(8, 4))
    x = np.arange(len(MODELS))
    w = 0.38
    for k, net in enumerate(NETWORKS):
        rs = [body["vs_serial"][net][m] for m in MODELS]
        ax.bar(x + (k - 0.5) * w, [r["mean"] for r in rs], w, yerr=[r["std"] for r in rs], capsize=3,
               label=f"network {net}")
    ax.axhline(1.0, color="k", lw=0.6)
    ax.set_xticks(x, MODELS)
    ax.set_ylabel("avg JCT / serial's (same network, same seed)")
    ax.set_title(f"iteration model in the engine: 16 servers x 4 GPUs, 160 jobs, {body['seeds']} seeds", fontsize=9)
    ax.legend(fontsize=8)
    ax.grid(axis="y", alpha=0.3)
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)
    print(f"wrote {path}")


def main() -> None:
    a = setting_args(argparse.ArgumentParser(description=__doc__.split("\n\n")[0]),
                     str(ROOT / "docs/results/sim/iter_model"))
    wall0 = time.time()
    tasks = [(m, n, s) for s in range(a.seeds) for n in NETWORKS for m in MODELS]
    with ProcessPoolExecutor(a.workers) as ex:
        runs = list(ex.map(run_one, *zip(*tasks), [a.scale] * len(tasks)))
    for r in runs:
        print(f"{r['model']:>15} {r['network']:>4} seed {r['seed']}: avg JCT {r['avg_jct']:8.1f} s, p95 "
              f"{r['p95_jct']:8.1f} s, makespan {r['makespan']:8.1f} s, {r['finished']}/{r['jobs']} jobs, "
              f"{r['cpu_s']:.1f} s CPU")
    body = {"setting": {"servers": 16, "gpus_per_server": 4, "jobs": 160, "scale": a.scale, "placement": "ff",
                        "order": "fifo", "steady": 0},
            "seeds": a.seeds, "runs": runs,
            "vs_serial": {n: {m: ratio(runs, m, "serial", n) for m in MODELS} for n in NETWORKS},
            "vs_wfbp": {n: {m: ratio(runs, m, "wfbp_fifo", n) for m in MODELS} for n in NETWORKS},
            "one_vs_fifo": {m: ratio(runs, m, m, "one", "fifo") for m in MODELS},
            "wall_s": time.time() - wall0}
    for n in NETWORKS:
        print(f"{n}: avg JCT vs serial: " + ", ".join(
            f"{m} x{body['vs_serial'][n][m]['mean']:.3f} (+-{body['vs_serial'][n][m]['std']:.3f})" for m in MODELS[1:]))
    print("one vs fifo: " + ", ".join(f"{m} x{body['one_vs_fifo'][m]['mean']:.3f}" for m in MODELS))
    out = Path(a.out)
    write_results(out / "iter_model.json", "sim_iter_model", body)
    plot(body, out / "iter_model.png")


if __name__ == "__main__":
    main()
