"""--steady against the exact run on one stretch of the Philly trace: how far each job's progress moves.

    python benchmarks/sim_steady_chain.py [--network one] [--from-h 586] [--to-h 590] [--steady 50]
        [--shares 0.75] [--exact-from FILE] [--cache /tmp/hostctl-sim-stretch]
        [--out docs/results/sim/scale/steady_chain_one]

The simulator's state at --from-h (benchmarks/sim_stretch.py's snapshot: MLCC's tree, 1000 servers x 8
GPUs, the first 1000 multi-GPU Philly jobs at their own arrival times, ff placement, fifo order,
--steady) is run on to --to-h three ways, each in a fresh process: exactly (``steady=0``: every flow
simulated from the first change on, none of --steady's measuring or extrapolating), with --steady and
its quorum (the default share, and each of --shares: ``quorum-SHARE``), and with --steady without it
(every job waits for its own window). --exact-from takes the exact run from an earlier steady_chain.json
of the same stretch and state (it does not depend on --steady's rules; it is the slow one). For every
job that runs in the stretch it compares the iterations done in it with the exact run's: the total, the
mean and the worst relative difference, and which jobs end in the stretch and when. Writes
OUT/steady_chain.json.
"""

from __future__ import annotations

import argparse
import json
import multiprocessing as mp
import os
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from sim_stretch import snapshot, stretch_args  # noqa: E402

MIN_ITERS = 20  # jobs with fewer iterations in the exact stretch are left out of the relative errors


def _run(snap: str, to_h: float, mode: str) -> dict:
    import pickle

    with open(snap, "rb") as f:
        sim = pickle.load(f)
    if mode == "exact":
        sim.steady = 0
    elif mode.startswith("quorum-"):
        sim.quorum = float(mode.split("-", 1)[1])
    else:
        sim.quorum = mode == "quorum"
    sim.until = to_h * 3600
    before = [j.done_iters for j in sim.jobs]
    ended = {j.spec.name for j in sim.jobs if j.end_s is not None}
    t = time.perf_counter()
    r = sim.run()
    wall = time.perf_counter() - t
    return {"mode": mode, "wall_s": wall, "events": r["events"],
            "stats": {k: r["stats"][k] for k in ("solves", "steady_parks", "steady_confirmed", "steady_remeasured",
                                                 "steady_quorum")},
            "progress": {j.spec.name: j.done_iters - d for j, d in zip(sim.jobs, before) if j.done_iters != d},
            "ends_s": {j.spec.name: j.end_s for j in sim.jobs if j.end_s is not None and j.spec.name not in ended}}


def compare(exact: dict, r: dict) -> dict:
    names = [k for k, v in exact["progress"].items() if v >= MIN_ITERS]
    rel = {k: r["progress"].get(k, 0) / exact["progress"][k] - 1 for k in names}
    tot_e = sum(exact["progress"][k] for k in names)
    tot_r = sum(r["progress"].get(k, 0) for k in names)
    ends = sorted(set(exact["ends_s"]) | set(r["ends_s"]))
    return {"jobs": len(names), "total_ratio": tot_r / tot_e if tot_e else None,
            "mean_abs_rel": statistics.fmean(abs(x) for x in rel.values()) if rel else None,
            "max_abs_rel": max((abs(x) for x in rel.values()), default=None),
            "worst": sorted(rel.items(), key=lambda kv: -abs(kv[1]))[:5],
            "ends": {k: (exact["ends_s"].get(k), r["ends_s"].get(k)) for k in ends}}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    stretch_args(ap, "docs/results/sim/scale/steady_chain_one")
    ap.set_defaults(to_h=590.0)
    ap.add_argument("--shares", default="", help="comma list of quorum shares to run besides the default")
    ap.add_argument("--exact-from", default=None, help="an earlier steady_chain.json of this stretch: its exact run")
    a = ap.parse_args()
    if a.to_h <= a.from_h or a.steady < 1:
        print("sim_steady_chain: need --to-h > --from-h and --steady >= 1", file=sys.stderr)
        return 2
    snap = snapshot(a.network, a.steady, a.from_h, Path(a.cache))
    runs = {}
    modes = ["exact", "quorum"] + [f"quorum-{float(x):g}" for x in a.shares.split(",") if x] + ["own-window"]
    if a.exact_from:
        with open(a.exact_from) as fh:
            old = json.load(fh)
        if (old["network"], old["steady"], old["from_h"], old["to_h"]) != (a.network, a.steady, a.from_h, a.to_h):
            print(f"sim_steady_chain: {a.exact_from} is another stretch", file=sys.stderr)
            return 2
        runs["exact"] = old["runs"]["exact"]
        modes.remove("exact")
    with mp.get_context("spawn").Pool(1, maxtasksperchild=1) as pool:
        for mode in modes:
            runs[mode] = pool.apply(_run, (str(snap), a.to_h, mode))
            r = runs[mode]
            print(f"{mode:>10}: {a.from_h:g}-{a.to_h:g} h in {r['wall_s']:.1f} s, {r['events']} events, "
                  f"{r['stats']}", flush=True)
    res = {"network": a.network, "steady": a.steady, "from_h": a.from_h, "to_h": a.to_h,
           "exact_from": a.exact_from,
           "runs": runs, "vs_exact": {m: compare(runs["exact"], runs[m]) for m in runs if m != "exact"},
           "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()), "machine": os.uname().nodename}
    for m, c in res["vs_exact"].items():
        print(f"{m:>10} vs exact: {c['jobs']} jobs, iterations x{c['total_ratio']:.4f}, per job mean "
              f"{c['mean_abs_rel']:.2%}, worst {c['max_abs_rel']:.2%}; wall {runs[m]['wall_s']:.1f} s "
              f"(exact {runs['exact']['wall_s']:.1f} s)")
    os.makedirs(a.out, exist_ok=True)
    with open(os.path.join(a.out, "steady_chain.json"), "w") as fh:
        json.dump(res, fh, indent=1)
    print(f"wrote {os.path.join(a.out, 'steady_chain.json')}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
