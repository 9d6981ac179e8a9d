"""The cluster engine's MLCC, MCS, CCML and fifo against an independent optimum on small cases
(docs/sim-mlcc.md, "The independent check").

    python benchmarks/sim_mlccopt.py [--parts bounds,slots,random] [--cases all] [--random-seeds 8] [--time-limit 60] [--slot 0.06]
        [--upper-milp] [--trace-servers 100 --trace-jobs 40 --trace-seeds 1 --ps-fraction 0.5]
        [--out docs/results/sim/mlcc/opt]

For every case of hostctl_lab.sim.optcheck.CASES: the lower bound on the average JCT of any schedule
(hostctl_lab.analysis.opt_cluster's time-indexed MILP, HiGHS's dual bound), the best feasible schedule
found (the better of that model's own fifo and best strict-priority order, and with --upper-milp the
conservative MILP's replayed schedule), for the engine's PS model (barrier) and, for cases with PS jobs,
for pipelined PS; and every network's engine run on the same jobs and hosts, plus the what-if
``mlcc-switch/smallest`` (mlcc-switch with the jobs ordered smaller model first instead of by arrival). Checks that no engine JCT
is below the bound and that the engine's fifo equals the model's own fifo. Writes OUT/<case>.json,
OUT/summary.json and OUT/opt.png (every network's average JCT over the lower bound).

Part ``slots``: MLCC (mlcc, mlcc-switch, the what-if) on the same cases at 60, 20 and 10 ms slots
(OUT/slots.json). Part ``random``: the same check on ``--random-seeds`` seeded random small cases
(hostctl_lab.sim.optcheck.random_case: 2-3 ring and PS jobs, 2 iterations, 4 hosts on one switch or in
two racks; barrier PS; MILP slot 30 ms, 15 s per MILP; OUT/random.json). Part ``trace`` (not in the default): the what-if on Philly jobs (benchmarks/sim_mlcc.py's
setting: MLCC's tree, ff placement, fifo queue, ``--ps-fraction`` PS jobs), mcs, mlcc-switch and
mlcc-switch/smallest at 60 ms and mlcc-switch/smallest at 20 ms (OUT/trace.json; minutes per seed).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import sys
import time


def plot(rows: list[dict], path: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from hostctl_lab.sim.optcheck import NETWORKS, WHATIF

    NETWORKS = NETWORKS + WHATIF
    fig, ax = plt.subplots(figsize=(10, 4.2))
    w = 0.8 / len(NETWORKS)
    for c, r in enumerate(rows):
        lo = r["lower"]
        for k, n in enumerate(NETWORKS):
            ax.bar(c + (k - (len(NETWORKS) - 1) / 2) * w, r["engine"][n] / lo, w, color=f"C{k}",
                   label=n if c == 0 else None)
        ax.plot([c - 0.45, c + 0.45], [r["upper"] / lo] * 2, "k--", lw=1, label="best schedule found" if c == 0 else None)
        if r.get("pipelined_upper"):
            first = c == min(k for k, x in enumerate(rows) if x.get("pipelined_upper"))
            ax.plot([c - 0.45, c + 0.45], [r["pipelined_upper"] / lo] * 2, "m:", lw=1.5,
                    label="pipelined PS: best schedule found" if first else None)
    ax.axhline(1.0, color="k", lw=1)
    ax.set_xticks(range(len(rows)), [r["case"] for r in rows])
    ax.set_ylabel("average JCT / lower bound (engine's PS model)")
    ax.set_ylim(0.6, max(max(r["engine"].values()) / r["lower"] for r in rows) * 1.05)
    ax.legend(fontsize=7, ncol=3)
    ax.grid(axis="y", alpha=0.3)
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)


def main(argv: list[str] | None = None) -> int:
    from hostctl_lab.sim import optcheck

    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--cases", default="all", help="comma list of " + ", ".join(optcheck.CASES) + ", or all")
    ap.add_argument("--time-limit", type=float, default=60.0, help="HiGHS's limit per MILP (s)")
    ap.add_argument("--slot", type=float, default=0.06, help="MLCC's planning slot (s)")
    ap.add_argument("--upper-milp", action="store_true", help="also solve the conservative MILP (slower)")
    ap.add_argument("--parts", default="bounds,slots,random", help="comma list of bounds, slots, random, trace")
    ap.add_argument("--random-seeds", type=int, default=8)
    ap.add_argument("--trace-servers", type=int, default=100)
    ap.add_argument("--trace-jobs", type=int, default=40)
    ap.add_argument("--trace-seeds", type=int, default=1)
    ap.add_argument("--ps-fraction", type=float, default=0.5)
    ap.add_argument("--out", default="docs/results/sim/mlcc/opt")
    a = ap.parse_args(argv)
    parts = {x.strip() for x in a.parts.split(",") if x.strip()}
    if not parts or parts - {"bounds", "slots", "random", "trace"}:
        ap.error("--parts is a comma list of bounds, slots, random, trace")
    if a.random_seeds < 1:
        ap.error("--random-seeds must be >= 1")
    if min(a.trace_servers, a.trace_jobs, a.trace_seeds) < 1 or not 0 <= a.ps_fraction <= 1:
        ap.error("--trace-servers, --trace-jobs, --trace-seeds must be >= 1 and --ps-fraction in [0, 1]")
    names = list(optcheck.CASES) if a.cases == "all" else [x.strip() for x in a.cases.split(",") if x.strip()]
    bad = [n for n in names if n not in optcheck.CASES]
    if bad or not names:
        ap.error(f"unknown case {bad[0] if bad else '(none)'}: choose from {', '.join(optcheck.CASES)} or all")
    if a.time_limit <= 0 or a.slot <= 0:
        ap.error("--time-limit and --slot must be > 0")
    os.makedirs(a.out, exist_ok=True)
    cmd = " ".join(["python benchmarks/sim_mlccopt.py"] + (argv if argv is not None else sys.argv[1:]))
    meta = {"command": cmd, "date": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
            "machine": {"node": platform.node(), "cpus": os.cpu_count(), "python": platform.python_version()}}
    rc = bounds_part(a, names, meta) if "bounds" in parts else 0
    if "slots" in parts:
        t0 = time.monotonic()
        sw = optcheck.slot_sweep(names)
        print("MLCC at other slots (average JCT, s):")
        for n in names:
            print(f"  {n:18} " + "  ".join(f"{r['network']} {r['slot_s'] * 1e3:g} ms {r['avg_jct_s']:.3f}"
                                          for r in sw if r["case"] == n))
        with open(os.path.join(a.out, "slots.json"), "w") as f:
            json.dump({**meta, "wall_s": time.monotonic() - t0, "runs": sw}, f, indent=1)
    if "random" in parts:
        rc = random_part(a, meta) or rc
    if "trace" in parts:
        trace_part(a, meta)
    return rc


def random_part(a, meta: dict) -> int:
    import numpy as np

    from hostctl_lab.sim import optcheck

    t0 = time.monotonic()
    rows = optcheck.random_check(range(a.random_seeds))
    nets = list(rows[0]["engine"])
    print("random cases (average JCT / lower bound):")
    print(f"  {'seed':>4} {'racks':>5} {'jobs':>4} {'best':>6} " + " ".join(f"{n[-11:]:>11}" for n in nets))
    for r in rows:
        print(f"  {r['seed']:4d} {r['racks']:5d} {len(r['jobs']):4d} {r['best'] / r['lower']:6.3f} "
              + " ".join(f"{r['engine'][n] / r['lower']:11.3f}" for n in nets)
              + ("" if r["lower_optimal"] else "  (bound: time limit)")
              + (f"  !! below the bound: {', '.join(r['below_bound'])}" if r["below_bound"] else ""))
    summ = {n: {"mean_over_best": float(np.mean([r["engine"][n] / r["best"] for r in rows])),
                "max_over_best": float(np.max([r["engine"][n] / r["best"] for r in rows]))} for n in nets}
    for n, v in summ.items():
        print(f"  {n:22} mean {v['mean_over_best']:.3f} x best schedule found, max {v['max_over_best']:.3f}")
    with open(os.path.join(a.out, "random.json"), "w") as f:
        json.dump({**meta, "wall_s": time.monotonic() - t0, "summary": summ, "cases": rows}, f, indent=1,
                  default=float)
    return 1 if any(r["below_bound"] for r in rows) else 0


def trace_part(a, meta: dict) -> None:
    from dataclasses import asdict

    from hostctl_lab.sim import optcheck
    from hostctl_lab.sim.run import SweepSpec

    t0 = time.monotonic()
    runs = []
    for slot, nets in ((0.06, ("fifo", "mcs", "mlcc-switch", "mlcc-switch/smallest")), (0.02, ("mlcc-switch/smallest",))):
        spec = SweepSpec(topology="mlcc-tree", servers=a.trace_servers, jobs=a.trace_jobs, time_scale=0.0001,
                         max_iterations=200, seeds=tuple(range(a.trace_seeds)), slot_s=slot, ps_fraction=a.ps_fraction)
        for seed in spec.seeds:
            for n in nets:
                r = optcheck.run_trace(asdict(spec), {"placement": "ff", "order": "fifo", "network": n, "seed": seed})
                runs.append(r)
                print(f"trace: seed {seed} {n:22} slot {slot * 1e3:g} ms: average JCT {r['avg_jct_s']:.2f} s "
                      f"({r['finished']} jobs, {r['wall_s']:.0f} s wall)", flush=True)
    with open(os.path.join(a.out, "trace.json"), "w") as f:
        json.dump({**meta, "wall_s": time.monotonic() - t0, "servers": a.trace_servers, "jobs": a.trace_jobs,
                   "ps_fraction": a.ps_fraction, "runs": runs}, f, indent=1)


def bounds_part(a, names: list[str], meta: dict) -> int:
    from hostctl_lab.sim import optcheck

    t0 = time.monotonic()
    rows = []
    nets = optcheck.NETWORKS + optcheck.WHATIF
    print(f"{'case':18} {'lower':>7} {'best':>7} " + " ".join(f"{n[-11:]:>11}" for n in nets)
          + f" {'pipe lo':>8} {'pipe best':>9}  (average JCT, s; engine: x lower bound)")
    for name in names:
        case = optcheck.CASES[name]
        r = optcheck.compare(case, optcheck.DT.get(name, 0.02), time_limit=a.time_limit, slot_s=a.slot,
                             upper_milp=a.upper_milp, networks=nets)
        b = r["bounds"]
        lo, up = b["barrier"]["lower_avg_jct_s"], b["barrier"]["upper_avg_jct_s"]
        row = {"case": name, "lower": lo, "upper": up, "lower_optimal": b["barrier"]["lower"].get("optimal"),
               "engine": {n: e["avg_jct_s"] for n, e in r["engine"].items()},
               "below_bound": [n for n, e in r["engine"].items() if e["below_lower_bound"]],
               "fifo_vs_independent_fifo_max_abs_s": r["fifo_vs_independent_fifo_max_abs_s"],
               "best_order": b["barrier"]["best_order"]["order"], "wall_s": r["wall_s"]}
        if "pipelined" in b:
            row["pipelined_lower"] = b["pipelined"]["lower_avg_jct_s"]
            row["pipelined_upper"] = b["pipelined"]["upper_avg_jct_s"]
            row["pipelined_lower_optimal"] = b["pipelined"]["lower"].get("optimal")
        rows.append(row)
        with open(os.path.join(a.out, f"{name}.json"), "w") as f:
            json.dump(r, f, indent=1, default=float)
        pl = f" {row['pipelined_lower']:8.3f} {row['pipelined_upper']:9.3f}" if "pipelined_lower" in row else " " * 19
        print(f"{name:18} {lo:7.3f} {up:7.3f} " + " ".join(
            f"{row['engine'][n]:6.3f} {row['engine'][n] / lo:4.2f}" for n in nets) + pl
            + ("" if row["lower_optimal"] else "  (bound: time limit)"), flush=True)
        if row["below_bound"]:
            print(f"  !! below the lower bound: {', '.join(row['below_bound'])}")
    wall = time.monotonic() - t0
    with open(os.path.join(a.out, "summary.json"), "w") as f:
        json.dump({**meta, "wall_s": wall, "rows": rows}, f, indent=1, default=float)
    plot(rows, os.path.join(a.out, "opt.png"))
    print(f"wrote {a.out}/summary.json, <case>.json and opt.png ({wall:.0f} s)")
    return 1 if any(r["below_bound"] for r in rows) else 0


if __name__ == "__main__":
    sys.exit(main())
