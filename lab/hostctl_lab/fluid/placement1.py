"""A fluid model of TensorLights placement #1: what job ordering could win if TCP were ideal.

    python -m hostctl_lab.fluid.placement1 [--jobs 12] [--seconds 20] [--seeds 3] [--out FILE]

N synchronous PS jobs, their servers on one host, cycle through three resources per iteration:
the update (h0's send link, u seconds of it), the compute (c seconds: on a private processor, or
on the worker host's processor shared by all jobs' workers), and the gradient (h0's receive link,
g seconds). Each resource is a fluid server: `fifo` shares it equally among the jobs using it
(TCP's ideal fair share, no losses, no slow start); `one` serves the highest-priority job first
(strict priority, work-conserving); `rr` is `one` with the order rotated every --rr-interval
seconds. Priority applies to the send link only (TensorLights, egress bands) or to both links
(hostctl's ingress bands). Each phase's work varies by +-jitter (uniform), which keeps fifo's jobs
from staying in lock-step; jobs start at random points of their compute.

It prints, per case, the iterations per job (throughput) and the busy share of each resource, and
the throughput of `one` and `rr` relative to fifo: the paper's Table II ratio (1.20x, 1.21x).
Compare it with the testbed's "all jobs" utilisation (hostctl bench) to see how much of what
ordering could win the emulation shows. Writes JSON (default results/fluid_placement1.json).
"""

from __future__ import annotations

import argparse
import random
import sys

from hostctl_lab.bench.results import write_results


def simulate(n: int, u: float, c: float, g: float, policy: str, shared: bool, prio_links: tuple[int, ...],
             seconds: float, dt: float, jitter: float, rr_interval: float, seed: int) -> dict:
    rnd = random.Random(seed)
    work = (u, c, g)
    stage = [1] * n  # 0 update, 1 compute, 2 gradient
    left = [rnd.uniform(0.0, c if c > 0 else dt) for _ in range(n)]
    iters = [0] * n
    order = list(range(n))
    busy = [0.0, 0.0, 0.0]
    t, rotations = 0.0, 0
    while t < seconds:
        if policy == "rr" and t >= (rotations + 1) * rr_interval:
            rotations += 1
            order = order[1:] + order[:1]
        for s in range(3):
            act = [j for j in range(n) if stage[j] == s]
            if not act:
                continue
            busy[s] += dt
            if s == 1 and not shared:
                for j in act:
                    left[j] -= dt
            elif policy == "fifo" or s not in prio_links:
                for j in act:
                    left[j] -= dt / len(act)
            else:
                left[min(act, key=order.index)] -= dt
        for j in range(n):
            if left[j] <= 0:
                stage[j] = (stage[j] + 1) % 3
                if stage[j] == 0:
                    iters[j] += 1
                left[j] = work[stage[j]] * rnd.uniform(1 - jitter, 1 + jitter)
        t += dt
    return {"iterations_per_job": sum(iters) / n, "busy": {"send": busy[0] / seconds,
                                                           "processor": busy[1] / seconds,
                                                           "receive": busy[2] / seconds}}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--jobs", type=int, default=12)
    ap.add_argument("--seconds", type=float, default=20.0, help="simulated time per run")
    ap.add_argument("--seeds", type=int, default=3, help="runs per case (different jitter and start)")
    ap.add_argument("--dt", type=float, default=5e-4)
    ap.add_argument("--jitter", type=float, default=0.3)
    ap.add_argument("--rr-interval", type=float, default=2.0)
    ap.add_argument("--out", default="results/fluid_placement1.json")
    a = ap.parse_args(argv)
    burst = 5 * 256 * 1024 * 8 / 500e6  # 5 workers x 256 KiB at 500 Mbit/s: placement1.toml
    cases = [  # (name, compute seconds, shared processor)
        ("placement1 (private compute, 50 ms)", 0.05, False),
        ("placement1-shared (shared processor, 21 ms)", 0.021, True),
    ]
    out = {"burst_s": burst, "jobs": a.jobs, "seconds": a.seconds, "seeds": a.seeds, "jitter": a.jitter,
           "cases": []}
    for name, comp, shared in cases:
        for prio_links, where in (((0,), "egress"), ((0, 2), "egress+ingress")):
            res = {}
            for pol in ("fifo", "one", "rr"):
                runs = [simulate(a.jobs, burst, comp, burst, pol, shared, prio_links, a.seconds, a.dt, a.jitter,
                                 a.rr_interval, seed) for seed in range(a.seeds)]
                res[pol] = {"iterations_per_job": sum(r["iterations_per_job"] for r in runs) / len(runs),
                            "busy": {k: sum(r["busy"][k] for r in runs) / len(runs) for k in runs[0]["busy"]}}
            base = res["fifo"]["iterations_per_job"]
            for pol in res:
                res[pol]["throughput_vs_fifo"] = res[pol]["iterations_per_job"] / base
            out["cases"].append({"case": name, "priority_on": where, "policies": res})
            print(f"{name}, priority on {where}:")
            for pol, r in res.items():
                b = r["busy"]
                print(f"  {pol:4s} {r['iterations_per_job']:6.1f} iterations/job  x{r['throughput_vs_fifo']:.3f} fifo  "
                      f"busy: send {b['send']:.0%} processor {b['processor']:.0%} receive {b['receive']:.0%}",
                      flush=True)
    write_results(a.out, "fluid model of placement #1", out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
