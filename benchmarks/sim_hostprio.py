"""The rate kernel's strict priority at the hosts' NICs before and after (a git revision's
``_host_prio`` against this tree's), on the simulator's own cases (docs/simulator.md, "Rates").

    python benchmarks/sim_hostprio.py [--before 643bd38] [--parts tests,replay,speed] [--until 150] [--replay 800]
        [--out docs/results/sim/tlscale/hostprio.json]

``tests``: the one/rr cases of tests/unit/test_sim_cluster.py (two hand cases and the random ring/PS
mixes of test_fast_forward_changes_no_result, seeds 0 and 1): every job's JCT under both kernels.
``replay``: the first ``--replay`` kernel calls under priority of a dense ``one`` case (1000 servers,
the first 250 multi-GPU Philly jobs arriving over 180 s, as benchmarks/sim_scale.py's dense case),
captured while this tree's kernel drives the run, then solved again by both kernels: milliseconds per
call, calls that stopped unverified, allocations that break the definition (rtol 1e-6).
``speed``: 1000 servers of MLCC's tree, the first 100 multi-GPU Philly jobs arriving over 300 s, <= 150
iterations, ff, ``one``, --steady 50, the first ``--until`` simulated seconds: wall time, kernel solves
under priority, the share that ended unverified (``host_prio_unconverged``), each in a fresh process.
"""

from __future__ import annotations

import argparse
import json
import multiprocessing as mp
import os
import subprocess
import sys
import time
import types


def _through_rates(kernel) -> None:
    """Every solve under bands through kernel.rates, so through the _host_prio this script swaps: the
    simulator's one-call compiled solve (kernel.solve_comp_prio) answers None, "use the NumPy path";
    and every solve cold (kernel.WARM_START off: the revisions' solvers are compared from nothing)."""
    kernel.solve_comp_prio = lambda *a: None
    kernel.WARM_START = False


def _use(before: str | None, check: bool = False) -> dict:
    """Make the kernel's _host_prio the one of git revision ``before`` (None: this tree's)."""
    from hostctl_lab.sim import kernel

    _through_rates(kernel)

    if before:
        src = subprocess.run(["git", "show", f"{before}:lab/hostctl_lab/sim/kernel.py"], capture_output=True,
                             text=True, check=True).stdout
        old = types.ModuleType("kernel_before")
        exec(compile(src, f"{before}:kernel.py", "exec"), old.__dict__)
        old.STATS = kernel.STATS  # count into the same counters
        kernel._host_prio = old._host_prio
    for k in list(kernel.STATS):
        kernel.STATS[k] = 0
    if check:  # count the allocations that break the definition (kernel.host_prio_violations, rtol 1e-6)
        solve = kernel._host_prio

        def checked(ptr, links, capacity, caps, prio, plinks):
            r = solve(ptr, links, capacity, caps, prio, plinks)
            if kernel.host_prio_violations(ptr, links, capacity, caps, prio, plinks, r, rtol=1e-6).any():
                kernel.STATS["breaks_definition"] = kernel.STATS.get("breaks_definition", 0) + 1
            return r

        kernel._host_prio = checked
    return kernel.STATS


def _tests(before: str | None) -> dict:
    import numpy as np

    from hostctl_lab.sim.cluster import simulate
    from hostctl_lab.sim.topo import mlcc_tree, single_switch
    from hostctl_lab.sim.workload import JobSpec

    stats = _use(before, check=True)

    def job(name, gpus, size=1e9, compute=0.1, iters=1, arrival=0.0, kind="ring"):
        return JobSpec(name, arrival, gpus, "m", int(size), compute, iters, kind)

    out = {}
    two = [job("a", 2, size=1e9), job("b", 2, size=2e9)]
    out["one_two_jobs"] = simulate(single_switch(2), two, gpus_per_server=2, placement="ls", network="one")["jct_s"]
    rr = [job("a", 2, size=4e9), job("b", 2, size=4e9)]
    out["rr_0.5"] = simulate(single_switch(2), rr, gpus_per_server=2, placement="ls", network="rr",
                             rr_interval_s=0.5)["jct_s"]
    for network in ("one", "rr"):
        for seed in (0, 1):
            rng = np.random.default_rng(seed)
            jobs = [job(f"j{k}", int(rng.choice([2, 3, 4, 6])), size=float(rng.uniform(2e8, 2e9)),
                        compute=float(rng.uniform(0.05, 0.3)), iters=int(rng.integers(3, 30)),
                        arrival=float(rng.uniform(0, 10)), kind=str(rng.choice(["ring", "ps"])))
                    for k in range(12)]
            kw = dict(gpus_per_server=2, placement=str(rng.choice(["ff", "ls", "rand"])), network=network,
                      seed=seed, rr_interval_s=0.7)
            out[f"mix_{network}_{seed}"] = simulate(mlcc_tree(8, per_tor=4, tors_per_edge=2), jobs,
                                                   fast_forward=False, **kw)["jct_s"]
    return {"jct_s": out, "kernel": dict(stats)}


def _speed(before: str | None, until: float) -> dict:
    from hostctl_lab.sim.tlscale import Case, run

    stats = _use(before)
    import hostctl_lab.sim.tlscale as tl

    t0 = time.perf_counter()
    case = Case(servers=1000, jobs=100, span_s=300.0, max_iterations=150, steady=50, wall_limit_s=1e9)
    from hostctl_lab.sim.cluster import ClusterSim
    from hostctl_lab.sim.topo import load
    from hostctl_lab.sim.workload import philly

    js = philly(None, case.jobs, seed=0)
    raw = max(j.arrival_s for j in js)
    js = philly(None, case.jobs, seed=0, time_scale=case.span_s / raw, max_iterations=case.max_iterations)
    sim = ClusterSim(load("mlcc-tree", 1000), js, network="one", steady=case.steady, until_s=until)
    r = sim.run()
    del tl
    return {"wall_s": time.perf_counter() - t0, "sim_s": r["sim_s"], "finished": r["finished"],
            "solves": r["stats"]["solves"], "kernel": dict(stats), "jct_s": r["jct_s"]}


def _replay(before: str | None, calls: int) -> dict:
    import numpy as np

    from hostctl_lab.sim import kernel
    from hostctl_lab.sim.cluster import ClusterSim
    from hostctl_lab.sim.topo import load
    from hostctl_lab.sim.workload import philly

    got = []
    _through_rates(kernel)
    solve = kernel._host_prio

    def rec(*a):
        if len(got) < calls:
            got.append(tuple(np.array(x, copy=True) for x in a))
        return solve(*a)

    kernel._host_prio = rec
    js = philly(None, 250, seed=0)
    raw = max(j.arrival_s for j in js)
    js = philly(None, 250, seed=0, time_scale=0.999 * 180.0 / raw)
    ClusterSim(load("mlcc-tree", 1000), js, network="one").run(progress=lambda s: len(got) >= calls, every=50)
    kernel._host_prio = solve
    out = {}
    for w, rev in (("before", before), ("after", None)):
        stats = _use(rev)
        fn = kernel._host_prio
        t0 = time.perf_counter()
        res = [fn(*a) for a in got]
        dt = time.perf_counter() - t0
        bad = sum(bool(kernel.host_prio_violations(*a, r, rtol=1e-6).any()) for a, r in zip(got, res))
        out[w] = {"calls": len(got), "ms_per_call": 1e3 * dt / len(got), "unconverged": stats["host_prio_unconverged"],
                  "break_definition": bad, "flows_median": float(np.median([len(a[0]) - 1 for a in got]))}
        kernel._host_prio = solve
    return out


def fresh(fn, *args):
    with mp.get_context("spawn").Pool(1) as pool:
        return pool.apply(fn, args)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--before", default="643bd38", help="the git revision whose _host_prio is 'before'")
    ap.add_argument("--parts", default="tests,replay")
    ap.add_argument("--until", type=float, default=150.0)
    ap.add_argument("--replay", type=int, default=800, help="kernel calls captured for the replay part")
    ap.add_argument("--out", default="docs/results/sim/tlscale/hostprio.json")
    a = ap.parse_args()
    if subprocess.run(["git", "rev-parse", "--verify", "-q", a.before + "^{commit}"], capture_output=True).returncode:
        print(f"sim_hostprio: {a.before!r} is not a git revision here: pass --before REV", file=sys.stderr)
        return 2
    res: dict = {"command": "python benchmarks/sim_hostprio.py " + " ".join(sys.argv[1:]),
                 "date": time.strftime("%Y-%m-%dT%H:%M:%S%z"), "before": a.before}
    if "tests" in a.parts:
        old, new = fresh(_tests, a.before), fresh(_tests, None)
        res["tests"] = {"before": old, "after": new, "max_rel_diff": {}}
        for k in new["jct_s"]:
            d = max(abs(new["jct_s"][k][j] / old["jct_s"][k][j] - 1) for j in new["jct_s"][k])
            res["tests"]["max_rel_diff"][k] = d
            print(f"tests {k:14}: largest JCT change {d * 100:.4f}%")
        for w, x in (("before", old), ("after", new)):
            print(f"tests kernel {w:6}: {x['kernel']}")
    if "replay" in a.parts:
        rp = fresh(_replay, a.before, a.replay)
        res["replay"] = rp
        for w, x in rp.items():
            print(f"replay {w:6}: {x['calls']} calls (median {x['flows_median']:.0f} flows): {x['ms_per_call']:.1f} ms "
                  f"a call, {x['unconverged']} stopped unverified, {x['break_definition']} break the definition")
    if "speed" in a.parts:
        sp = {w: fresh(_speed, rev, a.until) for w, rev in (("before", a.before), ("after", None))}
        res["speed"] = sp
        for w, x in sp.items():
            k = x["kernel"]
            print(f"speed {w:6}: {x['wall_s']:.1f} s wall for {x['sim_s']:.0f} simulated s, {x['solves']} solves, "
                  f"{k.get('host_prio_unconverged', 0)} unverified of {k['solves']} kernel calls, "
                  f"{x['finished']} jobs finished")
        same = set(sp["before"]["jct_s"]) & set(sp["after"]["jct_s"])
        if same:
            d = [sp["after"]["jct_s"][j] / sp["before"]["jct_s"][j] - 1 for j in same]
            res["speed"]["jct_change"] = {"jobs": len(same), "mean": sum(d) / len(d), "max_abs": max(map(abs, d))}
            print(f"speed: {len(same)} jobs finished in both: mean JCT change {sum(d) / len(d) * 100:+.3f}%, "
                  f"largest {max(map(abs, d)) * 100:.3f}%")
    os.makedirs(os.path.dirname(a.out), exist_ok=True)
    with open(a.out, "w") as f:
        json.dump(res, f, indent=1)
    print(f"wrote {a.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
