"""TensorLights (``one``, ``rr``) against fifo at cluster scale: one run, the paired comparison and the
summary behind benchmarks/sim_tlscale.py (docs/sim-tlscale.md).

A run is the first ``jobs`` multi-GPU Philly jobs (models drawn with ``seed``) with their arrivals
compressed into ``span_s`` simulated seconds and at most ``max_iterations`` iterations each, on MLCC's
tree of ``servers`` servers x 8 GPUs, ff placement, fifo queue, one network policy.
"""

from __future__ import annotations

import time
from dataclasses import asdict, dataclass

import numpy as np


@dataclass(frozen=True)
class Case:
    servers: int = 1000
    jobs: int = 400
    span_s: float = 1800.0
    max_iterations: int = 2000
    steady: int = 50
    rr_interval_s: float = 2.0
    wall_limit_s: float = 600.0


def run(case: Case, network: str, seed: int) -> dict:
    """One run: the report of hostctl_lab.sim.cluster.ClusterSim, plus every job's servers and the
    kernel's counters."""
    from hostctl_lab.sim import kernel
    from hostctl_lab.sim.cluster import ClusterSim
    from hostctl_lab.sim.topo import load
    from hostctl_lab.sim.workload import philly

    for k in kernel.STATS:
        kernel.STATS[k] = 0
    fab = load("mlcc-tree", case.servers)
    js = philly(None, case.jobs, seed=seed)
    raw = max(j.arrival_s for j in js) or 1.0
    js = philly(None, case.jobs, seed=seed, time_scale=case.span_s / raw, max_iterations=case.max_iterations)
    sim = ClusterSim(fab, js, placement="ff", network=network, seed=seed, steady=case.steady,
                     rr_interval_s=case.rr_interval_s)
    w0 = time.perf_counter()
    r = sim.run(progress=lambda s: time.perf_counter() - w0 > case.wall_limit_s, every=500)
    r["servers"] = {j.spec.name: j.servers for j in sim.jobs}
    r["kernel"] = dict(kernel.STATS)
    return {"network": network, "seed": seed, "case": asdict(case), **r}


def networked_avg(r: dict) -> float | None:
    """Average JCT of the finished jobs that ran on more than one server."""
    v = [t for k, t in r["jct_s"].items() if len(r["servers"].get(k, ())) > 1]
    return float(np.mean(v)) if v else None


def paired(runs: list[dict], base: str = "fifo") -> dict:
    """Each network against ``base`` on the jobs placed alike: finished in both runs of a seed on the
    same servers (more than one). A policy changes when jobs end, hence where later jobs go: this
    keeps the network's effect apart from the placement's. Per seed: sum of those jobs' JCTs over the
    same sum under ``base``, and how many jobs."""
    by = {(r["network"], r["seed"]): r for r in runs}
    out = {}
    for n in sorted({r["network"] for r in runs} - {base}):
        v, cnt = [], []
        for s in sorted({r["seed"] for r in runs}):
            a, b = by.get((n, s)), by.get((base, s))
            if not a or not b:
                continue
            same = [k for k, sv in a["servers"].items() if len(sv) > 1 and sv == b["servers"].get(k)
                    and k in a["jct_s"] and k in b["jct_s"]]
            if same:
                v.append(sum(a["jct_s"][k] for k in same) / sum(b["jct_s"][k] for k in same))
                cnt.append(len(same))
        out[f"{n}/{base}"] = {"mean": float(np.mean(v)), "per_seed": v, "jobs": cnt} if v else None
    return out


def summary(runs: list[dict], base: str = "fifo") -> list[dict]:
    """One row per network: means over seeds of average JCT, p95, networked jobs' average JCT, and the
    mean of per-seed ratios to ``base``."""
    by = {(r["network"], r["seed"]): r for r in runs}
    rows = []
    for n in dict.fromkeys(r["network"] for r in runs):
        rs = [r for r in runs if r["network"] == n]
        ratio = [r["avg_jct_s"] / by[(base, r["seed"])]["avg_jct_s"] for r in rs
                 if (base, r["seed"]) in by and r["avg_jct_s"] and by[(base, r["seed"])]["avg_jct_s"]]
        rows.append({
            "network": n, "seeds": len(rs),
            "finished": float(np.mean([r["finished"] for r in rs])), "jobs": rs[0]["jobs"],
            "avg_jct_s": float(np.mean([r["avg_jct_s"] for r in rs])),
            "p95_jct_s": float(np.mean([r["p95_jct_s"] for r in rs])),
            "networked_avg_jct_s": float(np.mean([networked_avg(r) for r in rs])),
            "ratio": float(np.mean(ratio)) if ratio else None,
            "wall_s": float(np.mean([r["wall_s"] for r in rs])),
            "stopped_early": sum(bool(r["stats"].get("stopped_early")) for r in rs),
            "steady_parks": float(np.mean([r["stats"].get("steady_parks", 0) for r in rs])),
            "events": float(np.mean([r["events"] for r in rs])),
            "unconverged": sum(r["kernel"].get("host_prio_unconverged", 0) for r in rs),
        })
    return rows
