"""Before and after a change, in one run: the same benchmarks from two source trees, interleaved.

A refactoring must not change behaviour. This runs the README demo (placement #1: fifo, one, rr,
one-ingress) and mlcc benchmarks (two-rack or mlcc-mixed: fifo, mlcc, mlcc-fixed, mlcc-bands) from an
old and a new checkout, alternating A B B A ... so that drift of this shared machine hits both alike, and
prints each policy's average JCT over fifo per tree, the ratio of the two trees, and the spread over
repeats. Each tree runs its own ``.venv/bin/hostctl`` (make both with scripts/setup.sh).

    python benchmarks/before_after.py --old /work/wt/before --new . --repeat 2 --out results/before-after

Writes OUT/before_after.json (every run's summary) and OUT/{tree}-{bench}-{i}/ (each bench's own output).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time

BENCHES = {
    # the README's demo: placement #1, short (15 iterations)
    "demo": ["demo", "--iterations", "15"],
    # placement #1 in full (40 iterations): the TensorLights benchmark of docs/benchmarks.md
    "placement1": ["bench", "examples/scenarios/placement1.toml", "--policies", "fifo,one,rr", "--repeat", "1"],
    # placement #1, rr only (with its fifo baseline): the check of rr's band rotation
    "placement1-rr": ["bench", "examples/scenarios/placement1.toml", "--policies", "fifo,rr", "--repeat", "1"],
    # mlcc with and without switchemu's job order, and the hybrid, on two racks
    "mlcc-two-rack": ["bench", "examples/scenarios/two-rack.toml", "--policies", "fifo,mlcc,mlcc-fixed,mlcc-bands",
                      "--repeat", "1"],
    # the same policies on PS and ring jobs with cross traffic (where mlcc loses to fifo)
    "mlcc-mixed": ["bench", "examples/scenarios/mlcc-mixed.toml", "--policies", "fifo,mlcc,mlcc-fixed,mlcc-bands",
                   "--repeat", "1"],
}


def run_one(tree: str, bench: str, out: str) -> dict:
    hostctl = os.path.join(tree, ".venv", "bin", "hostctl")
    if not os.access(hostctl, os.X_OK):
        sys.exit(f"before_after: {hostctl} not found: run scripts/setup.sh in {tree} first")
    argv = [hostctl, *BENCHES[bench], "--out", out]
    t0 = time.time()
    r = subprocess.run(argv, cwd=tree, capture_output=True, text=True)
    if r.returncode != 0:
        sys.exit(f"before_after: {' '.join(argv)} failed in {tree}:\n{r.stderr[-2000:]}")
    name = next(f for f in sorted(os.listdir(out)) if f.endswith(".json"))
    with open(os.path.join(out, name)) as f:
        res = json.load(f)
    return {"wall_s": time.time() - t0,
            "ratio_vs_fifo": {p: s.get("ratio_vs_fifo") for p, s in res["summary"].items()},
            "avg_jct_s": {p: s.get("avg_jct_s") for p, s in res["summary"].items()}}


def _revision(tree: str) -> str | None:
    """The tree's git commit (with "+dirty" when it has uncommitted changes), None outside git."""
    r = subprocess.run(["git", "-C", tree, "describe", "--always", "--dirty=+dirty", "--abbrev=12"],
                       capture_output=True, text=True)
    if r.returncode != 0:
        return None
    return r.stdout.strip() or None


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--old", required=True, help="the tree before the change")
    ap.add_argument("--new", default=".", help="the tree after the change")
    ap.add_argument("--repeat", type=int, default=2)
    ap.add_argument("--benches", default="demo,mlcc-two-rack", help=f"comma list of {', '.join(BENCHES)}")
    ap.add_argument("--out", default="results/before-after")
    a = ap.parse_args()
    trees = {"old": os.path.abspath(a.old), "new": os.path.abspath(a.new)}
    benches = [b.strip() for b in a.benches.split(",") if b.strip()]
    unknown = [b for b in benches if b not in BENCHES]
    if unknown:
        sys.exit(f"before_after: unknown bench {unknown[0]!r}: choose from {', '.join(BENCHES)}")
    os.makedirs(a.out, exist_ok=True)
    runs = []
    for i in range(a.repeat):
        order = ["old", "new"] if i % 2 == 0 else ["new", "old"]  # A B, then B A
        for bench in benches:
            for tree in order:
                out = os.path.abspath(os.path.join(a.out, f"{tree}-{bench}-{i}"))
                print(f"[{time.strftime('%H:%M:%S')}] {bench} repeat {i + 1}/{a.repeat}: {tree}", flush=True)
                runs.append({"tree": tree, "bench": bench, "repeat": i, **run_one(trees[tree], bench, out)})
    table = {}
    for bench in benches:
        for tree in trees:
            rs = [r for r in runs if r["bench"] == bench and r["tree"] == tree]
            for p in rs[0]["ratio_vs_fifo"]:
                vals = [r["ratio_vs_fifo"][p] for r in rs if r["ratio_vs_fifo"].get(p) is not None]
                table.setdefault(bench, {}).setdefault(p, {})[tree] = vals
    print(f"\n{'bench':<15}{'policy':<13}{'old /fifo':>20}{'new /fifo':>20}{'new/old':>9}")
    for bench, pol in table.items():
        for p, t in pol.items():
            o, n = statistics.mean(t["old"]), statistics.mean(t["new"])
            fmt = lambda v: ", ".join(f"{x:.3f}" for x in v)  # noqa: E731
            print(f"{bench:<15}{p:<13}{fmt(t['old']):>20}{fmt(t['new']):>20}{n / o:>9.3f}")
    with open(os.path.join(a.out, "before_after.json"), "w") as f:
        json.dump({"trees": trees, "revisions": {k: _revision(t) for k, t in trees.items()},
                   "started_runs": len(runs), "runs": runs, "ratio_vs_fifo": table,
                   "command": " ".join(sys.argv), "machine": os.uname().nodename,
                   "finished": time.strftime("%Y-%m-%d %H:%M:%S %Z")}, f, indent=1)


if __name__ == "__main__":
    main()
