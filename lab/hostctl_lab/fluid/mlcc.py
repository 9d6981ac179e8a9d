"""MLCC's host algorithm on the fluid model of mlcc-mixed: what its plans could win with a perfect
monitor, a perfect pacer and no TCP dynamics.

    python -m hostctl_lab.fluid.mlcc [--seeds 3] [--slots 0.06,0.02,0.01] [--fifo-s S] [--out FILE]

The jobs, links and bulk flow of lab/hostctl_lab/fluid/mixed.py (examples/scenarios/mlcc-mixed.toml on
ideal 500 Mbit/s links), with the daemon's planning step in the loop: every slot, each host calls
``hostctl.core.mlccplan.plan_slot`` (the daemon's decision) on its connections, and every flow is
then capped at its connection's applied rate for the whole slot, a burst that starts mid-slot
included. Under the caps the flows share the links max-min fairly (ideal TCP); the bulk flow is not
planned, as in the testbed. What the model gives the planner that the testbed does not:

- exact bytes left: a burst's remaining bytes plus what its connection sends later in the
  iteration (a ring flow's next steps), known from the first iteration on; a connection with no
  burst in flight is idle (the daemon: no progress in the last slot);
- exact, instant rates: a cap is a flow's rate at once (no TCP pacing bursts, no slow start, no
  callbacks) and the measured rate of a slot is exact;
- switch mode: every host sees the others' published schedules of the slot before, shifted by one
  slot and labelled by job and host (what switchemu gives the daemon: core.mlccplan.FabricView), the
  jobs in the order their schedules arrived (without a job order) or in the job order.

Policies: ``fair`` (no planning: ideal fair sharing, fluid_mixed's pessimistic model of fifo);
``mlcc-local`` (each host plans its own NIC); ``mlcc`` (switch mode); ``mlcc-fixed`` (switch mode
under a job order, PS jobs first, as ``--job-order`` with the best order of the fluid model; each
job planned around the jobs ranked before it, in one plan with a wave per job, as the daemon does);
``mlcc-fixed, hash order`` (the same in the order ``--job-order fixed`` gives the testbed's jobs);
``mlcc-local, by job`` (each host plans its jobs in waves, fewest bytes left first); and for reference fluid_mixed's strict job priority, PS jobs first, at the senders only and
at every link. Each at every slot length of --slots (K = 10 slots, as in the paper, unless --K). Prints the average JCT and its
ratio to ``fair`` (and with --fifo-s to the testbed's fifo); writes JSON (default
results/fluid_mlcc.json).
"""

from __future__ import annotations

import argparse
import math
import sys
import time
from dataclasses import dataclass, field

import numpy as np

from hostctl_lab.fluid.mixed import (
    CAP_BPS, JOBS, WORKERS, Sim, bands_for, case_result, progressive_fill, run_case, scenario,
)

from hostctl.core.joborder import fabric_rank
from hostctl.core.mlcc import MlccParams
from hostctl.core.mlcchost import wait_floor_Bps
from hostctl.core.mlccplan import FabricView, plan_slot
from hostctl_lab.bench.results import write_results
from hostctl_lab.mlcctable import ScheduleTable

HOSTS = sorted({ps for _, ps in JOBS if ps} | set(WORKERS))
LINKS = [f"{h}:{d}" for h in HOSTS for d in ("up", "down")]
COL = {ln: i for i, ln in enumerate(LINKS)}
PS_FIRST = [j for j, (kind, _) in enumerate(JOBS) if kind != "ring"] + [j for j, (kind, _) in enumerate(JOBS)
                                                                         if kind == "ring"]
# the order `--job-order fixed` gives the testbed's jobs (the bench names them psa-01, psa-02, ...)
BENCH_NAMES = [f"{kind}-{1 + sum(1 for k, _ in JOBS[:j] if k == kind):02d}" for j, (kind, _) in enumerate(JOBS)]
HASH_ORDER = sorted(range(len(JOBS)), key=lambda j: fabric_rank(BENCH_NAMES[j], "fixed"))


@dataclass
class CappedSim(Sim):
    """Sim whose flows are capped at their connection's rate (conn -> B/s; none: uncapped), then shared
    max-min fairly on every link (one band: TCP under the pacer)."""

    caps: dict = field(default_factory=dict)

    def allocate(self) -> None:
        resid = {ln: self.cap_Bps for f in self.flows for ln in f.links}
        progressive_fill(list(self.flows), resid, {id(f): self.caps.get(f.conn, math.inf) for f in self.flows})


class HostPlanner:
    """Every host's mlcc decision, once a slot, on the model's connections: the daemon's decision
    (``hostctl.core.mlccplan.plan_slot``) on a fabric view built as switchemu builds it (the other hosts'
    published schedules of the slot before, labelled by job and host), without monitor, wire or datapath."""

    def __init__(self, sim: CappedSim, mode: str, order: list[int] | None, slot_s: float, *, K: int = 10,
                 floor_Bps: float | None = None, by_job: bool = False) -> None:
        self.sim, self.mode, self.slot_s, self.by_job = sim, mode, slot_s, by_job
        self.rank = {j: r for r, j in enumerate(order)} if order else None
        self.params = MlccParams(slot_s=slot_s, K=K)
        self.K = K
        self.floor = wait_floor_Bps(slot_s) if floor_Bps is None else floor_Bps
        self.cap = np.full(len(LINKS), CAP_BPS)
        self.conns: dict[str, set] = {}  # host -> its connections seen so far (DL only)
        self.table = ScheduleTable(K, self.rank)  # the schedules of the last slot, the jobs' arrival order
        self.slots = 0
        self.cpu_s = 0.0

    def path(self, c) -> list[int]:
        _, src, dst = c
        return [COL[src + ":up"], COL[dst + ":down"]] if self.mode == "switch" else [COL[src + ":up"]]

    def view(self, host: str, jobs: list[int]) -> FabricView:
        """Each of the host's jobs' view (core.mlccplan.FabricView) of the other hosts' schedules published
        in the slot before, as switchemu answers the daemon (hostctl_lab.mlcctable.ScheduleTable)."""
        if self.mode == "switch":
            return self.table.view(host, jobs, range(len(LINKS)), self.cap)
        z = np.zeros((len(jobs), len(LINKS), self.K))
        return FabricView(self.cap, self.cap.copy(), z, z, z, None)

    def tick(self) -> None:
        sim = self.sim
        if len(sim.jct) == sim.n_jobs:
            return
        t0 = time.process_time()
        burst = {f.conn: f for f in sim.flows if f.job >= 0}
        for c in burst:
            self.conns.setdefault(c[1], set()).add(c)
        pub = {}
        for host in sorted(self.conns):
            conns = sorted(self.conns[host])
            jobs = sorted({c[0] for c in conns}, key=lambda j: (self.rank or {}).get(j, 0))
            jix = {j: i for i, j in enumerate(jobs)}
            G = [burst[c].left + burst[c].then_bytes if c in burst else 0.0 for c in conns]
            paths = np.array([self.path(c) for c in conns], dtype=np.int64)
            fj = np.array([jix[c[0]] for c in conns], dtype=np.int64)
            wave = None
            if self.rank is not None:
                wave = fj
            elif self.mode == "switch":  # arrival order, as the daemon without a job order
                wave = self.table.wave([c[0] for c in conns])
            elif self.by_job:  # waves by bytes left on this host, fewest first
                left = {j: sum(g for g, c in zip(G, conns) if c[0] == j) for j in jobs}
                w = {j: i for i, j in enumerate(sorted(jobs, key=lambda j: (left[j], j)))}
                wave = np.array([w[c[0]] for c in conns], dtype=np.int64)
            d = plan_slot(G, np.full(len(conns), CAP_BPS), np.zeros(len(conns)), fj, paths, self.view(host, jobs),
                          moving=np.array([c in burst for c in conns]), params=self.params, floor_Bps=self.floor,
                          wave=wave, idle_share=self.rank is None)
            for i, c in enumerate(conns):
                sim.caps[c] = float(d.applied_Bps[i])
                pub[c] = (paths[i], np.maximum(d.slot.rates_Bps[i], 0.0))
        self.table.publish((c[0], c[1], cols, r) for c, (cols, r) in pub.items())
        self.slots += 1
        self.cpu_s += time.process_time() - t0
        sim.after(self.slot_s, self.tick)


def run_mlcc(name: str, mode: str, order: list[int] | None, slot_s: float, seeds: int, jitter: float,
             cross: bool, jobs: list = JOBS, **planner) -> dict:
    """Average over seeds of the jobs' run with HostPlanner(mode, order, slot_s, **planner) in the loop."""
    runs, slots, cpu = [], 0, 0.0
    for s in range(seeds):
        sim = CappedSim(cap_Bps=CAP_BPS, prio={})
        hp = HostPlanner(sim, mode, order, slot_s, **planner)
        sim.after(0.0, hp.tick)
        runs.append(scenario({}, s, jitter, cross, jobs=jobs, sim=sim))
        slots, cpu = slots + hp.slots, cpu + hp.cpu_s
    return case_result(name, runs, slot_s=slot_s, plan_ms_per_slot=1e3 * cpu / max(slots, 1))


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--seeds", type=int, default=3, help="runs per case (different compute jitter)")
    ap.add_argument("--jitter", type=float, default=0.1, help="compute step varies by +-this share")
    ap.add_argument("--slots", default="0.06,0.02,0.01", help="slot lengths to plan with (s), comma-separated")
    ap.add_argument("--K", type=int, default=10, help="slots in the plan's horizon (the paper: 10)")
    ap.add_argument("--floor-Bps", type=float, default=None,
                    help="the wait floor (default: the daemon's, one 64 KiB GSO packet per slot)")
    ap.add_argument("--no-cross", action="store_true", help="without the bulk flow")
    ap.add_argument("--fifo-s", type=float, default=0.0,
                    help="the testbed's measured fifo average JCT (s), to print each case against it too")
    ap.add_argument("--out", default="results/fluid_mlcc.json")
    a = ap.parse_args(argv)
    try:
        slots = [float(x) for x in a.slots.split(",")]
        if not slots or min(slots) <= 0:
            raise ValueError
    except ValueError:
        ap.error(f"--slots {a.slots!r}: give slot lengths in seconds > 0, e.g. 0.06,0.02")
    if a.K < 1 or a.seeds < 1 or (a.floor_Bps is not None and a.floor_Bps < 0):
        ap.error("--K and --seeds must be >= 1 and --floor-Bps >= 0")
    cross = not a.no_cross
    t0 = time.monotonic()
    fair = run_case("fair", {j: 0 for j in range(-1, len(JOBS))}, a.seeds, a.jitter, cross)
    cases = [fair]
    for eo in (True, False):
        c = run_case(f"prio PS first ({'senders only' if eo else 'every link'})", bands_for(tuple(PS_FIRST), False),
                     a.seeds, a.jitter, cross, egress_only=eo)
        cases.append(c)
    for slot_s in slots:
        for name, mode, order, by_job in (("mlcc-local", "local", None, False), ("mlcc", "switch", None, False),
                                          ("mlcc-fixed", "switch", PS_FIRST, False),
                                          ("mlcc-fixed, hash order", "switch", HASH_ORDER, False),
                                          ("mlcc-local, by job", "local", None, True)):
            cases.append(run_mlcc(f"{name} ({slot_s * 1e3:g} ms)", mode, order, slot_s, a.seeds, a.jitter, cross,
                                  K=a.K, floor_Bps=a.floor_Bps, by_job=by_job))
            print(f"  {cases[-1]['policy']}: {cases[-1]['avg_jct_s']:.2f} s", file=sys.stderr, flush=True)
    base = fair["avg_jct_s"]
    print(f"MLCC's host plan on the fluid model of mlcc-mixed, {a.seeds} seeds, compute jitter +-{a.jitter:.0%}, "
          f"bulk flow: {'yes' if cross else 'no'} ({time.monotonic() - t0:.0f} s)")
    head = f"{'case':40} {'avg JCT':>8} {'vs fair':>8} {'worker links busy':>18} {'plan ms/slot':>13}"
    print(head + (f" {'vs testbed fifo':>16}" if a.fifo_s else ""))
    for c in cases:
        tb = f" {c['avg_jct_s'] / a.fifo_s:16.3f}" if a.fifo_s else ""
        ms = f"{c['plan_ms_per_slot']:13.2f}" if "plan_ms_per_slot" in c else " " * 13
        print(f"{c['policy']:40} {c['avg_jct_s']:7.2f}s {c['avg_jct_s'] / base:8.3f} "
              f"{c['worker_links_busy']:17.0%} {ms}{tb}")
    write_results(a.out, "MLCC's host plan on the fluid model of mlcc-mixed",
                  {"model": "fluid_mlcc", "seeds": a.seeds, "jitter": a.jitter, "cross": cross, "slots_s": slots,
                   "K": a.K, "floor_Bps": a.floor_Bps,
                   "testbed_fifo_s": a.fifo_s or None, "cases": cases})
    return 0


if __name__ == "__main__":
    sys.exit(main())
