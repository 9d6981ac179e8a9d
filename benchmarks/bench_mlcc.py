"""Benchmark for the MLCC allocator (hostctl.core.mlcc): per-slot decision time.

    nice -n 10 .venv/bin/python benchmarks/bench_mlcc.py [--slots 2000] [--repeat 3] [--out results/bench_mlcc.json]

Requirement measured (issue 5, spec property 12): one host's decision for one slot,
``allocate()`` for n = 10, 100, 1000 flows at K = 10, p90 <= 1 ms for 100 flows
(paper: 1.5 ms). Pure CPU, no I/O; no root needed.

Workload (seeded, the same every run). The deciding host sits in a two-tier tree
(racks of 10 hosts behind 10 Gbit/s NICs, 20 Gbit/s rack uplinks); its n flows go to
random hosts in 10 racks: NIC uplink (shared by all n flows), rack uplink (shared by
the cross-rack ones), the remote rack's downlink, the remote NIC's downlink. Roles:
30% PS aggregation, 30% PS broadcast, 30% ring, 10% none; remaining bytes log-uniform
1 MB..500 MB; other hosts' load per link and slot uniform 0..80% of capacity with 30%
of the entries 0; û of the NIC = 70..100% of capacity (reading A), in-network links
= capacity; B_i 0.5..12 Gbit/s; peers' progress random around the flow's own. A new
random input is drawn for every slot (outside the timed region).

Variants: ``one-wave`` (no priority: one wave, progressive filling inside it) and
``4-waves`` (priority = job rank of 4 jobs, so 4 sequential waves, Q-M8). The time of
``apply_reductions()`` for a tenth of the flows is measured as well.

Times on a shared 2-core machine are noisy: each sample records wall time
(perf_counter) and this thread's CPU time (thread_time); wall >> CPU means the
process was preempted. Medians, p90 and p99 over the slots, per repeat.
"""

from __future__ import annotations

import argparse
import platform
import statistics
import time

import numpy as np

from hostctl.core.mlcc import MlccParams, Role, allocate, apply_reductions
from hostctl_lab.bench.results import write_results

NIC_Bps = 10e9 / 8  # 10 Gbit/s in bytes/s
RACK_UP_Bps = 20e9 / 8
RACKS, HOSTS_PER_RACK = 10, 10


def make_slot(rng: np.random.Generator, n: int, K: int, waves: int) -> dict:
    """One host's inputs for one slot (see the module docstring)."""
    # links: 0 own NIC up, 1 own rack up, 2..2+R rack downlinks, then one NIC downlink per host
    L = 2 + RACKS + RACKS * HOSTS_PER_RACK
    cap = np.empty(L)
    cap[0] = NIC_Bps
    cap[1] = RACK_UP_Bps
    cap[2:2 + RACKS] = RACK_UP_Bps
    cap[2 + RACKS:] = NIC_Bps
    dst = rng.integers(1, RACKS * HOSTS_PER_RACK, n)  # host 0 is us (rack 0)
    rack = dst // HOSTS_PER_RACK
    cross = rack != 0
    path = np.full((n, 4), -1)
    path[:, 0] = 0
    path[cross, 1] = 1
    path[cross, 2] = 2 + rack[cross]
    path[:, 3] = 2 + RACKS + dst
    load = rng.uniform(0, 0.8, (L, K)) * cap[:, None]
    load[rng.random((L, K)) < 0.3] = 0.0
    avail = cap.copy()
    avail[0] *= rng.uniform(0.7, 1.0)
    G = np.exp(rng.uniform(np.log(1e6), np.log(5e8), n))
    role = rng.choice([Role.AGGREGATION, Role.BROADCAST, Role.RING, Role.NONE], n, p=[0.3, 0.3, 0.3, 0.1])
    sent = rng.uniform(0, 1, n) * G
    ref = sent * rng.uniform(0.8, 1.3, n) + rng.uniform(0, 0.1, n) * G
    kw = dict(role=role, sent_bytes=sent, ref_bytes=ref, slack_bytes=np.where(role == Role.RING, G / 8, 0.0),
              succ_bytes=np.where(role == Role.RING, sent * rng.uniform(0.9, 1.2, n), np.nan))
    if waves > 1:
        kw["priority"] = rng.integers(0, waves, n)
    return dict(G_bytes=G, path=path, load_Bps=load, avail_Bps=avail, cap_Bps=cap,
                B_Bps=rng.uniform(0.5e9, 12e9, n) / 8, **kw)


def pct(xs: list[float], q: float) -> float:
    s = sorted(xs)
    return s[min(len(s) - 1, int(round(q * (len(s) - 1))))]


def summary(xs: list[float]) -> dict:
    return {"median": statistics.median(xs), "p90": pct(xs, 0.90), "p99": pct(xs, 0.99),
            "mean": statistics.fmean(xs), "min": min(xs)}


def run_case(n: int, K: int, waves: int, slots: int, seed: int) -> dict:
    rng = np.random.default_rng(seed)
    params = MlccParams(K=K)
    wall, cpu, red_wall, rounds = [], [], [], []
    for s in range(slots + 20):  # 20 warm-up slots, not recorded
        inp = make_slot(rng, n, K, waves)
        c0, w0 = time.thread_time_ns(), time.perf_counter_ns()
        plan = allocate(**inp, params=params)
        w1, c1 = time.perf_counter_ns(), time.thread_time_ns()
        ceil = np.full(n, np.inf)
        some = rng.random(n) < 0.1
        ceil[some] = plan.cum_bytes[some] * 0.8
        w2 = time.perf_counter_ns()
        apply_reductions(plan, ceil, params)
        w3 = time.perf_counter_ns()
        if s >= 20:
            wall.append((w1 - w0) / 1e6)
            cpu.append((c1 - c0) / 1e6)
            red_wall.append((w3 - w2) / 1e6)
            rounds.append(plan.rounds)
    return {"n": n, "K": K, "variant": "one-wave" if waves == 1 else f"{waves}-waves", "slots": slots,
            "decision_wall_ms": summary(wall), "decision_cpu_ms": summary(cpu),
            "reductions_wall_ms": summary(red_wall), "alg1_batches_mean": statistics.fmean(rounds)}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--slots", type=int, default=2000, help="timed slots per case (default 2000)")
    ap.add_argument("--repeat", type=int, default=3, help="repeats of the whole set (default 3)")
    ap.add_argument("--flows", default="10,100,1000", help="flow counts (default 10,100,1000)")
    ap.add_argument("--K", type=int, default=10)
    ap.add_argument("--out", default="results/bench_mlcc.json")
    args = ap.parse_args()
    flows = [int(x) for x in args.flows.split(",")]
    results = []
    for rep in range(args.repeat):
        for waves in (1, 4):
            for n in flows:
                r = run_case(n, args.K, waves, args.slots, seed=1000 * rep + n + waves)
                r["repeat"] = rep
                results.append(r)
                d, c = r["decision_wall_ms"], r["decision_cpu_ms"]
                print(f"rep {rep} {r['variant']:>8} n={n:5d} K={args.K}: wall median {d['median']:.3f} "
                      f"p90 {d['p90']:.3f} p99 {d['p99']:.3f} ms | cpu median {c['median']:.3f} "
                      f"p90 {c['p90']:.3f} ms | reductions p90 {r['reductions_wall_ms']['p90']:.3f} ms | "
                      f"batches {r['alg1_batches_mean']:.2f}", flush=True)
    write_results(args.out, "mlcc allocate() per-slot decision time", {
        "params": {"K": args.K, "slot_s": MlccParams().slot_s, "slots": args.slots, "repeat": args.repeat},
        "results": results,
    }, machine={"machine": platform.machine(), "numpy": np.__version__, "processor": platform.processor()})


if __name__ == "__main__":
    main()
