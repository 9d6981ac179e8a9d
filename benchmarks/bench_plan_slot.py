"""Benchmark for one host's whole MLCC decision (hostctl.core.mlccplan.plan_slot): time per slot.

    nice -n 10 .venv/bin/python benchmarks/bench_plan_slot.py [--slots 1000] [--repeat 3]
        [--flows 10,100,1000] [--jobs 1,4,10] [--baseline REV]
        [--out docs/results/mlcc/plan25/bench_plan_slot.json]
    .venv/bin/python benchmarks/bench_plan_slot.py --table RESULTS.json [...]   (the table of saved runs)

Requirement measured: the one-call ordered allocator, so that a job order (policy.mlcc, --job-order) costs one
plan per slot; decision p90 <= 1 ms for 100 flows. Pure CPU, no I/O, no root.

Machines differ in speed, so every slot also times a FIXED reference computation (numpy: an argsort
of a fixed seeded 20 000-float array, the product of a chain of eight 64 x 64 matrices and, as the decision
does, many numpy calls on tiny arrays: 100 x ``np.maximum(row - 0.5, 0).sum()`` on rows of 30 floats;
0.55 ms of CPU alone in a loop, p90 0.8-1.1 ms between decisions on the machine of
docs/results/mlcc/plan25/README.md), interleaved with the decision in the same loop; each case reports
its p90 as a ratio to the reference's p90 in that case.

Workload (seeded; a new input is drawn for every slot, outside the timed region), as a switch-mode host
sees it. L = 30 links: column 0 this host's NIC (10 Gbit/s), 1 its rack uplink (20 Gbit/s), 2..5 the
downlinks of 4 remote racks (20 Gbit/s), 6..29 the NIC downlinks of 24 remote hosts (6 per remote rack;
10 Gbit/s). A flow goes to a host of its job's peer set (each job has 6 peers drawn from the 24, so jobs
overlap): 20% over 2 links (the NIC and the peer's NIC downlink, as to a peer behind the same ToR), 20%
over 3 (NIC, rack uplink, the peer rack's downlink: no known last hop) and 60% over 4 (and the peer's NIC
downlink). Flows are spread over J jobs at random. Sizes: 70% known (log-uniform
1 MB..500 MB), 15% unknown (NaN), 15% idle (0); 5% did not move in the last slot.

The FabricView: external load (jobs with no flow here) uniform 0..40% of each link's capacity with 30% of
the entries 0; each local job's load from other hosts (same_Bps) on 50% of its links, 0..30% of capacity,
by 1..3 flows (same_flows); a job's other_Bps = external load + the other local jobs' remote loads
(ordered: only the jobs ranked before it, and a rank-proportional part of the external load). û of the
NIC 70..100% of its capacity, the other links their capacity. With J >= 2 the NIC is shared by several
local jobs with different views, so virtual links appear (reported as ``virtual_links_mean``).

``--baseline REV`` also times plan_slot as it was at git revision REV (its core/mlcc.py, mlcchost.py and
mlccplan.py, loaded beside the working tree's under another package name) on the same inputs, in the same
loop (the two alternate which goes first), and counts the slots where both decide the same, bit for bit:
a before/after comparison that the machine's load drifts cannot bias.

Variants: ``order`` none (wave None: one wave) or ``rank`` (wave = the job's rank: one wave per job);
``alg2`` off, or on: roles (30% aggregation, 30% broadcast, 30% ring, 10% none), the peers' F (20% NaN),
ring slack (one eighth of the iteration) and received ceilings (15% of the flows, some of them binding).

Times on a shared machine are noisy: each sample records wall time (perf_counter) and this thread's CPU
time (thread_time); wall >> CPU means the process was preempted, or waited for OpenBLAS's worker threads
(matrix products of a few hundred thousand multiply-adds and more, at n = 1000; OPENBLAS_NUM_THREADS=1
avoids them and gives the same floats; the results file records the variable). Medians, p90 and p99 over the slots,
per repeat; the table shows the median over the repeats of each statistic.
"""

from __future__ import annotations

import argparse
import atexit
import importlib
import json
import os
import platform
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

from bench_mlcc import summary  # (percentiles as bench_mlcc.py reports them)

from hostctl.core.mlcc import MlccParams, Role
from hostctl.core.mlccplan import FabricView, plan_slot
from hostctl_lab.bench.results import write_results

NIC_Bps = 10e9 / 8  # 10 Gbit/s in bytes/s
RACK_Bps = 20e9 / 8
REMOTE_RACKS, HOSTS_PER_RACK = 4, 6
L = 2 + REMOTE_RACKS + REMOTE_RACKS * HOSTS_PER_RACK  # 30
PEERS_PER_JOB = 6
DEFAULT_OUT = "docs/results/mlcc/plan25/bench_plan_slot.json"


def capacities() -> np.ndarray:
    cap = np.full(L, NIC_Bps)
    cap[1:2 + REMOTE_RACKS] = RACK_Bps
    return cap


def make_slot(rng: np.random.Generator, n: int, J: int, K: int, ordered: bool, alg2: bool) -> dict:
    """plan_slot's keyword arguments for one slot (see the module docstring)."""
    cap = capacities()
    # paths
    peers = np.stack([rng.choice(REMOTE_RACKS * HOSTS_PER_RACK, PEERS_PER_JOB, replace=False) for _ in range(J)])
    fj = rng.integers(0, J, n)
    dst = peers[fj, rng.integers(0, PEERS_PER_JOB, n)]  # remote host 0..23
    rack = dst // HOSTS_PER_RACK
    kind = rng.random(n)
    path = np.full((n, 4), -1, dtype=np.int64)
    path[:, 0] = 0
    local = kind < 0.2  # "same rack": NIC, remote NIC
    path[local, 1] = 2 + REMOTE_RACKS + dst[local]
    far = ~local
    path[far, 1] = 1
    path[far, 2] = 2 + rack[far]
    full = kind >= 0.4  # 4 links: also the remote NIC
    path[full, 3] = 2 + REMOTE_RACKS + dst[full]
    # sizes and rates
    G = np.exp(rng.uniform(np.log(1e6), np.log(5e8), n))
    u = rng.random(n)
    G[u < 0.15] = np.nan
    G[(u >= 0.15) & (u < 0.30)] = 0.0
    moving = rng.random(n) >= 0.05
    B = rng.uniform(0.1, 1.2, n) * NIC_Bps
    it = np.where(np.isnan(G), 1e8, G)  # (this iteration's bytes, for sent and slack)
    sent = rng.uniform(0, 1, n) * it
    # the fabric view
    on = np.zeros((J, L), dtype=bool)
    on[fj[:, None], np.where(path >= 0, path, 0)] = True
    ext = rng.uniform(0, 0.4, (L, K)) * cap[:, None]
    ext[rng.random((L, K)) < 0.3] = 0.0
    same = rng.uniform(0, 0.3, (J, L, K)) * cap[None, :, None]
    nsame = rng.integers(1, 4, (J, L, K)).astype(np.float64)
    mask = on[:, :, None] & (rng.random((J, L, 1)) < 0.5)
    same = np.where(mask, same, 0.0)
    nsame = np.where(mask, nsame, 0.0)
    if ordered:
        rank = rng.permutation(J)  # job index -> rank
        before = rank[None, :] < rank[:, None]  # [j, j']: j' ranked before j
        other = ext[None] * ((rank + 1) / J)[:, None, None] + np.einsum("ab,blk->alk", before.astype(float), same)
        wave = rank[fj]
    else:
        other = ext[None] + same.sum(axis=0)[None] - same
        wave = None
    avail = cap.copy()
    avail[0] *= rng.uniform(0.7, 1.0)
    kw = dict(G_bytes=G, B_Bps=B, sent_bytes=sent, flow_job=fj, path=path,
              view=FabricView(cap, avail, other, same, nsame), moving=moving, wave=wave,
              idle_share=wave is None)
    if alg2:
        role = rng.choice([Role.AGGREGATION, Role.BROADCAST, Role.RING, Role.NONE], n, p=[0.3, 0.3, 0.3, 0.1])
        ref = sent * rng.uniform(0.8, 1.3, n) + rng.uniform(0, 0.1, n) * it
        ref[rng.random(n) < 0.2] = np.nan
        ceil = np.full(n, np.inf)
        some = rng.random(n) < 0.15
        ceil[some] = sent[some] + rng.uniform(0, 0.05, some.sum()) * NIC_Bps
        kw.update(role=role, ref_bytes=ref, slack_bytes=np.where(role == Role.RING, it / 8, 0.0), ceiling_bytes=ceil)
    return kw


class Reference:
    """The fixed reference computation (module docstring): the same work and the same result every call."""

    def __init__(self) -> None:
        rng = np.random.default_rng(12345)
        self.x = rng.random(20_000)
        self.m = rng.standard_normal((8, 64, 64)) / 8.0
        self.rows = rng.random((100, 30))

    def __call__(self) -> float:
        o = np.argsort(self.x)
        a = self.m[0]
        for b in self.m[1:]:
            a = a @ b
        s = 0.0
        for r in self.rows:
            s += float(np.maximum(r - 0.5, 0.0).sum())
        return float(o[0]) + float(a[0, 0]) + s


BASELINE_MODULES = ("mlcc", "mlcchost", "mlccplan")


def load_baseline(rev: str):
    """(plan_slot as it was at git revision REV, the commit REV names): its three planner modules from
    ``git show``, imports among them renamed to a package of their own in a temporary folder (other imports
    stay the working tree's)."""
    root = Path(__file__).resolve().parents[1]
    tag = "_plan_slot_" + "".join(c if c.isalnum() else "_" for c in rev)
    tmp = tempfile.mkdtemp(prefix="bench_plan_slot_")
    atexit.register(shutil.rmtree, tmp, True)  # the modules stay imported; their folder goes with the process
    pkg = Path(tmp) / tag
    pkg.mkdir()
    (pkg / "__init__.py").write_text("")
    for m in BASELINE_MODULES:
        src = subprocess.run(["git", "-C", str(root), "show", f"{rev}:hostctl/core/{m}.py"], capture_output=True,
                             text=True)
        if src.returncode != 0:
            raise ValueError(f"--baseline {rev}: {src.stderr.strip() or 'git show failed'}")
        text = re.sub(r"\bhostctl\.core\.(" + "|".join(BASELINE_MODULES) + r")\b", tag + r".\1", src.stdout)
        (pkg / f"{m}.py").write_text(text)
    sys.path.insert(0, str(pkg.parent))  # deliberately: a second source tree (the baseline), under its own name
    commit = subprocess.run(["git", "-C", str(root), "rev-parse", rev], capture_output=True, text=True).stdout.strip()
    return importlib.import_module(f"{tag}.mlccplan").plan_slot, commit


def same_decision(a, b) -> bool:
    """Both plans' published and applied rates, bit for bit (NaN equal)."""
    return all(np.array_equal(x, y, equal_nan=True) for x, y in (
        (a.applied_Bps, b.applied_Bps), (a.slot.rates_Bps, b.slot.rates_Bps), (a.reports, b.reports),
        (a.held, b.held)))


def run_case(n: int, J: int, ordered: bool, alg2: bool, slots: int, seed: int, params: MlccParams,
             ref: Reference, warmup: int = 20, baseline=None) -> dict:
    rng = np.random.default_rng(seed)
    wall, cpu, rwall, rcpu, virt, bwall, bcpu = [], [], [], [], [], [], []
    same = 0

    def timed(fn, kw):
        c0, w0 = time.thread_time_ns(), time.perf_counter_ns()
        d = fn(params=params, **kw)
        w1, c1 = time.perf_counter_ns(), time.thread_time_ns()
        return d, (w1 - w0) / 1e6, (c1 - c0) / 1e6

    for s in range(slots + warmup):  # warm-up slots are not recorded
        kw = make_slot(rng, n, J, params.K, ordered, alg2)
        if baseline is not None and s % 2:
            b, bw, bc = timed(baseline, kw)
        d, w, c = timed(plan_slot, kw)
        if baseline is not None and not s % 2:
            b, bw, bc = timed(baseline, kw)
        _, rw, rc = timed(lambda params: ref(), {})
        if s >= warmup:
            wall.append(w)
            cpu.append(c)
            rwall.append(rw)
            rcpu.append(rc)
            virt.append(d.L_virtual)
            if baseline is not None:
                bwall.append(bw)
                bcpu.append(bc)
                same += same_decision(d, b)
    w, r = summary(wall), summary(rwall)
    c, rc = summary(cpu), summary(rcpu)
    out = {"n": n, "J": J, "order": "rank" if ordered else "none", "alg2": alg2, "slots": slots,
           "decision_wall_ms": w, "decision_cpu_ms": c, "reference_wall_ms": r, "reference_cpu_ms": rc,
           "p90_wall_over_reference": w["p90"] / r["p90"], "p90_cpu_over_reference": c["p90"] / rc["p90"],
           "virtual_links_mean": statistics.fmean(virt)}
    if baseline is not None:
        bw, bc = summary(bwall), summary(bcpu)
        out.update(baseline_wall_ms=bw, baseline_cpu_ms=bc, baseline_p90_cpu_over_reference=bc["p90"] / rc["p90"],
                   same_decisions=same / slots)
    return out


def table(results: list[dict]) -> list[str]:
    """One line per case: the median over the repeats of each number (ms; ratios to the reference's p90)."""
    keys = sorted({(r["n"], r["J"], r["order"], r["alg2"]) for r in results})
    def stat(key: str, q: str):
        return lambda r: r[key][q]

    cols = [("wall med", stat("decision_wall_ms", "median")), ("wall p90", stat("decision_wall_ms", "p90")),
            ("wall p99", stat("decision_wall_ms", "p99")), ("cpu med", stat("decision_cpu_ms", "median")),
            ("cpu p90", stat("decision_cpu_ms", "p90")), ("ref wall p90", stat("reference_wall_ms", "p90")),
            ("ref cpu p90", stat("reference_cpu_ms", "p90")), ("wall/ref", lambda r: r["p90_wall_over_reference"]),
            ("cpu/ref", lambda r: r["p90_cpu_over_reference"]), ("virtual", lambda r: r["virtual_links_mean"])]
    if all("baseline_cpu_ms" in r for r in results):
        cols += [("base cpu med", stat("baseline_cpu_ms", "median")), ("base cpu p90", stat("baseline_cpu_ms", "p90")),
                 ("base/ref", lambda r: r["baseline_p90_cpu_over_reference"]),
                 ("same", lambda r: r["same_decisions"])]
    lines = ["| n | J | order | alg2 | " + " | ".join(c for c, _ in cols) + " |",
             "|" + "---:|" * (4 + len(cols))]
    for k in keys:
        rs = [r for r in results if (r["n"], r["J"], r["order"], r["alg2"]) == k]
        vals = [statistics.median(f(r) for r in rs) for _, f in cols]
        lines.append(f"| {k[0]} | {k[1]} | {k[2]} | {'on' if k[3] else 'off'} | "
                     + " | ".join(f"{v:.2f}" if c in ("wall/ref", "cpu/ref", "base/ref", "same") else f"{v:.1f}" if c == "virtual"
                                  else f"{v:.3f}" for (c, _), v in zip(cols, vals)) + " |")
    return lines


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--slots", type=int, default=1000, help="timed slots per case (default 1000; n >= 1000: a fifth)")
    ap.add_argument("--repeat", type=int, default=3, help="repeats of the whole set (default 3)")
    ap.add_argument("--flows", default="10,100,1000", help="flow counts (default 10,100,1000)")
    ap.add_argument("--jobs", default="1,4,10", help="local job counts (default 1,4,10)")
    ap.add_argument("--K", type=int, default=MlccParams().K)
    ap.add_argument("--out", default=DEFAULT_OUT)
    ap.add_argument("--baseline", metavar="REV", help="also time plan_slot as at git revision REV (e.g. main), "
                    "interleaved, and compare its decisions")
    ap.add_argument("--table", nargs="+", metavar="JSON", help="print the table of saved results (their cases "
                    "pooled: medians over all their repeats) and exit")
    args = ap.parse_args(argv)
    if args.table:
        try:
            results = [r for f in args.table for r in json.loads(Path(f).read_text())["results"]]
        except (OSError, ValueError, KeyError, TypeError) as e:
            print(f"bench_plan_slot: cannot read the results ({e})", file=sys.stderr)
            return 2
        print("\n".join(table(results)))
        return 0
    try:
        flows = [int(x) for x in args.flows.split(",")]
        jobs = [int(x) for x in args.jobs.split(",")]
        params = MlccParams(K=args.K)
    except ValueError as e:
        print(f"bench_plan_slot: {e}", file=sys.stderr)
        return 2
    if args.slots < 1 or args.repeat < 1 or min(flows) < 1 or min(jobs) < 1:
        print("bench_plan_slot: --slots, --repeat, --flows and --jobs must be >= 1", file=sys.stderr)
        return 2
    baseline = baseline_commit = None
    if args.baseline:
        try:
            baseline, baseline_commit = load_baseline(args.baseline)
        except (ValueError, OSError, ImportError, SyntaxError) as e:
            print(f"bench_plan_slot: {e}", file=sys.stderr)
            return 2
    ref = Reference()
    results = []
    for rep in range(args.repeat):
        for n in flows:
            slots = args.slots if n < 1000 else max(1, args.slots // 5)
            for J in jobs:
                for ordered in (False, True):
                    for alg2 in (False, True):
                        seed = 100_000 * rep + 100 * n + 10 * J + 2 * ordered + alg2
                        r = run_case(n, J, ordered, alg2, slots, seed, params, ref, baseline=baseline)
                        r["repeat"] = rep
                        results.append(r)
                        w = r["decision_wall_ms"]
                        print(f"rep {rep} n={n:5d} J={J:2d} order={r['order']:>4} alg2={'on' if alg2 else 'off':>3}: "
                              f"wall median {w['median']:.3f} p90 {w['p90']:.3f} p99 {w['p99']:.3f} ms | "
                              f"cpu p90 {r['decision_cpu_ms']['p90']:.3f} | ref p90 {r['reference_wall_ms']['p90']:.3f}"
                              f" -> p90/ref {r['p90_wall_over_reference']:.2f} | virtual {r['virtual_links_mean']:.1f}"
                              + (f" | baseline cpu p90 {r['baseline_cpu_ms']['p90']:.3f}, same "
                                 f"{r['same_decisions']:.2f}" if baseline else ""), flush=True)
    print()
    print("\n".join(table(results)))
    write_results(args.out, "mlccplan plan_slot() per-slot decision time, with a fixed reference computation", {
        "params": {"K": args.K, "slot_s": params.slot_s, "slots": args.slots, "repeat": args.repeat, "links": L,
                   "baseline": args.baseline, "baseline_commit": baseline_commit},
        "reference": "numpy: argsort of a fixed seeded 20000-float array + product of eight 64x64 matrices + "
                     "100 x np.maximum(row - 0.5, 0).sum() on rows of 30 floats",
        "results": results,
    }, machine={"machine": platform.machine(), "numpy": np.__version__, "processor": platform.processor(),
                "OPENBLAS_NUM_THREADS": os.environ.get("OPENBLAS_NUM_THREADS")})
    return 0


if __name__ == "__main__":
    sys.exit(main())
