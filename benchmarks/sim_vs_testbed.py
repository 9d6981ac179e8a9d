"""The simulator against the testbed: the same scenario files, the same policies, side by side.

    python benchmarks/sim_vs_testbed.py [--seeds 5] [--out docs/results/sim/vs_testbed]

For each scenario with a testbed result on record (``hostctl bench`` JSON files under docs/results),
runs the scenario in the simulator (hostctl_lab.sim.scenario: its hosts, links, jobs and placement)
under fifo, one and rr, with no compute jitter and with 10% (seeded, ``--seeds`` runs averaged), and
prints each policy's average JCT, the simulator / testbed ratio and whether the ranking of the
policies agrees. Writes OUT/sim_vs_testbed.json.
"""

from __future__ import annotations

import argparse
import glob
import json
import os
import sys
import time

import numpy as np

from hostctl_lab.sim.cluster import simulate
from hostctl_lab.sim.scenario import from_scenario

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
# scenario -> the testbed result files (hostctl bench JSON) that docs/benchmarks.md cites
TESTBED = {
    "placement1": "docs/results/refactor25/before_after_placement1_rr.json",  # fifo, rr (8 repeats, new tree)
    "placement1_fanout": "docs/results/bench/placement1_fanout.json",
    "split2": "docs/results/bench/split2.json",
    "split4": "docs/results/bench/split4.json",
    "mlcc-mixed": "docs/results/mlcc/mlcc-mixed.json",
    "racks": "docs/results/mlcc/racks.json",
    "racks-uplink": "docs/results/mlcc/racks-uplink.json",
}
POLICIES = ("fifo", "one", "rr")


def testbed_jct(name: str) -> dict[str, float]:
    path = os.path.join(ROOT, TESTBED[name])
    with open(path) as f:
        d = json.load(f)
    if "ratio_vs_fifo" in d:  # a before_after.py file: the new tree's bench outputs beside it
        out: dict[str, list[float]] = {}
        for r in d["runs"]:
            if r["tree"] == "new":
                for p, v in r["avg_jct_s"].items():
                    out.setdefault(p, []).append(v)
        got = {p: float(np.mean(v)) for p, v in out.items()}
        one = glob.glob(os.path.join(ROOT, "docs/results/refactor25/new-placement1-*/placement1.json"))
        ones = [json.load(open(f))["summary"]["one"]["avg_jct_s"] for f in one]
        if ones:
            got["one"] = float(np.mean(ones))
        return got
    return {p: s["avg_jct_s"] for p, s in d["summary"].items() if isinstance(s, dict) and s.get("avg_jct_s")}


def rank(d: dict[str, float]) -> list[str]:
    return sorted((p for p in POLICIES if p in d), key=lambda p: d[p])


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seeds", type=int, default=5)
    ap.add_argument("--jitter", type=float, default=0.1)
    ap.add_argument("--out", default="results/sim/vs_testbed")
    a = ap.parse_args()
    rows = []
    for name in TESTBED:
        sc = from_scenario(os.path.join(ROOT, "examples/scenarios", f"{name}.toml"))
        tb = testbed_jct(name)
        sim0, simj = {}, {}
        for p in POLICIES:
            kw = dict(network=p, rr_interval_s=sc.rr_interval_s, bands=sc.bands)
            sim0[p] = simulate(sc.fabric, sc.jobs, **kw)["avg_jct_s"]
            simj[p] = float(np.mean([simulate(sc.fabric, sc.jobs, jitter=a.jitter, seed=s, **kw)["avg_jct_s"]
                                     for s in range(a.seeds)]))
        row = {"scenario": name, "testbed_file": TESTBED[name], "left_out": sc.left_out, "testbed": tb,
               "sim": sim0, "sim_jitter": simj,
               "ratio": {p: sim0[p] / tb[p] for p in POLICIES if p in tb},
               "ratio_jitter": {p: simj[p] / tb[p] for p in POLICIES if p in tb},
               "rank_testbed": rank(tb), "rank_sim": rank({p: v for p, v in sim0.items() if p in tb}),
               "rank_sim_jitter": rank({p: v for p, v in simj.items() if p in tb})}
        rows.append(row)
        f = lambda d: " ".join(f"{p} {d[p]:.2f}" for p in POLICIES if p in d)  # noqa: E731
        print(f"{name:18} testbed {f(tb):36} sim {f(sim0):34} sim+{a.jitter:g} {f(simj)}")
        print(f"{'':18} ratio sim/testbed {f(row['ratio'])}   with jitter {f(row['ratio_jitter'])}   ranking "
              f"testbed {'<'.join(row['rank_testbed'])}, sim {'<'.join(row['rank_sim'])}, "
              f"sim+jitter {'<'.join(row['rank_sim_jitter'])}" + (f"   (left out: {'; '.join(sc.left_out)})"
                                                                   if sc.left_out else ""), flush=True)
    os.makedirs(a.out, exist_ok=True)
    path = os.path.join(a.out, "sim_vs_testbed.json")
    with open(path, "w") as fh:
        json.dump({"command": " ".join([os.path.basename(sys.executable)] + sys.argv),
                   "date": time.strftime("%Y-%m-%dT%H:%M:%S%z"), "machine": {"cpus": os.cpu_count()},
                   "seeds": a.seeds, "jitter": a.jitter, "rows": rows}, fh, indent=1)
    print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
