"""One stretch of the Philly trace simulated by this tree and by a git revision, side by side.

    python benchmarks/sim_stretch.py --before REV [--network one] [--from-h 586] [--to-h 587] [--repeat 2]
        [--steady 50] [--cache /tmp/hostctl-sim-stretch] [--out docs/results/sim/scale/stretch_one]

The simulator's state at --from-h (benchmarks/sim_scale.py's trace case: MLCC's tree, 1000 servers x 8
GPUs, the first 1000 multi-GPU Philly jobs at their own arrival times, ff placement, fifo order,
--steady) is built once by this tree and pickled in --cache. Each repeat loads it in a fresh process of
each tree, alternating (the revision checked out in a temporary git worktree; each tree first runs a
short warm-up so that numba's compiling is not timed), and runs it to --to-h: wall seconds, events,
solves, and whether both trees end alike (the same events, solves and JCTs; a change that moves a
rate by a rounding error is enough to make them differ). The revision must keep ClusterSim's state
layout (the pickle is this tree's). Writes OUT/sim_stretch.json.
"""

from __future__ import annotations

import argparse
import json
import os
import pickle
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

CHILD = r"""
import json, pickle, sys, time
from hostctl_lab.sim import kernel
sim = pickle.load(open(sys.argv[1], "rb"))
sim.until = float(sys.argv[2]) * 3600
t = time.perf_counter()
r = sim.run()
w = time.perf_counter() - t
print(json.dumps({"wall_s": w, "events": r["events"], "solves": r["stats"]["solves"], "finished": r["finished"],
                  "jct_s": r["jct_s"], "kernel": dict(kernel.STATS), "module": kernel.__file__}))
"""


def snapshot(network: str, steady: int, hours: float, cache: Path) -> Path:
    """The trace's simulator state at ``hours``, built by this tree (cached by its arguments: delete
    the cache after a change to ClusterSim's state or to what happens before ``hours``)."""
    path = cache / f"trace-{network}-steady{steady}-{hours:g}h.pkl"
    if path.exists():
        return path
    from hostctl_lab.sim.cluster import ClusterSim
    from hostctl_lab.sim.topo import load
    from hostctl_lab.sim.workload import philly

    sim = ClusterSim(load("mlcc-tree", 1000), philly(None, 1000, seed=0), network=network, steady=steady,
                     until_s=hours * 3600)
    t = time.perf_counter()
    sim.run()
    print(f"snapshot: {network} to {hours:g} h in {time.perf_counter() - t:.0f} s", flush=True)
    sim.until = None
    cache.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".part")
    with open(tmp, "wb") as f:
        pickle.dump(sim, f)
    tmp.rename(path)
    return path


def stretch_args(ap: argparse.ArgumentParser, out: str) -> None:
    """The options that name a stretch of the trace and its cached state (this script's and
    sim_steady_chain.py's)."""
    ap.add_argument("--network", default="one")
    ap.add_argument("--steady", type=int, default=50)
    ap.add_argument("--from-h", type=float, default=586.0)
    ap.add_argument("--to-h", type=float, default=587.0)
    ap.add_argument("--cache", default=os.path.join(tempfile.gettempdir(), "hostctl-sim-stretch"))
    ap.add_argument("--out", default=out)


def child(tree: Path, snap: Path, to_h: float) -> dict:
    env = {**os.environ, "PYTHONPATH": f"{tree / 'lab'}{os.pathsep}{tree}"}
    r = subprocess.run([sys.executable, "-c", CHILD, str(snap), str(to_h)], capture_output=True, text=True,
                       env=env, cwd=tree)
    if r.returncode:
        raise SystemExit(f"sim_stretch: the run in {tree} failed:\n{r.stderr[-2000:]}")
    out = json.loads(r.stdout.strip().splitlines()[-1])
    if not out["module"].startswith(str(tree)):
        raise SystemExit(f"sim_stretch: {tree} ran {out['module']}, not its own kernel")
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--before", required=True, help="the git revision to compare this tree with")
    stretch_args(ap, "docs/results/sim/scale/stretch_one")
    ap.add_argument("--repeat", type=int, default=2)
    a = ap.parse_args()
    if a.to_h <= a.from_h or a.repeat < 1:
        print("sim_stretch: need --to-h > --from-h and --repeat >= 1", file=sys.stderr)
        return 2
    before = subprocess.run(["git", "-C", str(ROOT), "rev-parse", "--verify", "-q", a.before + "^{commit}"],
                            capture_output=True, text=True).stdout.strip()
    if not before:
        print(f"sim_stretch: {a.before!r} is not a git revision here: pass --before REV", file=sys.stderr)
        return 2
    after = subprocess.run(["git", "-C", str(ROOT), "rev-parse", "HEAD"], capture_output=True, text=True).stdout.strip()
    snap = snapshot(a.network, a.steady, a.from_h, Path(a.cache))
    wt = Path(tempfile.mkdtemp(prefix="sim_stretch_")) / "before"
    subprocess.run(["git", "-C", str(ROOT), "worktree", "add", "-q", "--detach", str(wt), before], check=True)
    try:
        trees = {"before": wt, "after": ROOT}
        for name, tree in trees.items():  # warm-up: numba compiles (and caches) outside the timing
            child(tree, snap, a.from_h + 0.01)
        runs: dict[str, list[dict]] = {"before": [], "after": []}
        for k in range(a.repeat):
            for name in (("before", "after") if k % 2 == 0 else ("after", "before")):
                r = child(trees[name], snap, a.to_h)
                runs[name].append(r)
                print(f"{name:>6} ({k + 1}/{a.repeat}): {a.from_h:g}-{a.to_h:g} h in {r['wall_s']:.1f} s, "
                      f"{r['events']} events, {r['solves']} solves", flush=True)
    finally:
        subprocess.run(["git", "-C", str(ROOT), "worktree", "remove", "--force", str(wt)], check=False)
        shutil.rmtree(wt.parent, ignore_errors=True)
    b, f = runs["before"][0], runs["after"][0]
    same = all(b[k] == f[k] for k in ("events", "solves", "finished", "jct_s"))
    wall = {n: statistics.median(r["wall_s"] for r in rs) for n, rs in runs.items()}
    res = {"before": before, "after": after, "network": a.network, "steady": a.steady, "from_h": a.from_h,
           "to_h": a.to_h, "repeat": a.repeat, "same_result": same, "wall_s_median": wall,
           "speedup": wall["before"] / wall["after"],
           "h_per_wall_min": {n: (a.to_h - a.from_h) / (w / 60) for n, w in wall.items()},
           "runs": {n: [{k: v for k, v in r.items() if k != "jct_s"} for r in rs] for n, rs in runs.items()},
           "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()), "machine": os.uname().nodename}
    os.makedirs(a.out, exist_ok=True)
    with open(os.path.join(a.out, "sim_stretch.json"), "w") as fh:
        json.dump(res, fh, indent=1)
    print(f"{a.network} {a.from_h:g}-{a.to_h:g} h: before {wall['before']:.1f} s, after {wall['after']:.1f} s "
          f"(median of {a.repeat}): {res['speedup']:.2f}x; the same result: {'yes' if same else 'NO'}")
    print(f"wrote {os.path.join(a.out, 'sim_stretch.json')}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
