"""A fluid model of mlcc-mixed: how much any rate schedule could win over ideal TCP.

    python -m hostctl_lab.fluid.mixed [--seeds 5] [--jitter 0.1] [--out FILE]

The jobs of examples/scenarios/mlcc-mixed.toml on ideal links: every host has an up and a down
link of 500 Mbit/s and the switch does not block. Two PS jobs serve from h0 and two from h1 (2 MiB
to and from each of 4 workers on h2-h5 per iteration, 200 ms compute, 12 iterations); two ring
all-reduce jobs of 8 MiB run on h2-h5 (6 steps of 2 MiB per iteration, a worker starts step s+1
when its send and its receive of step s are done); a bulk flow h0 -> h3 runs from 1 s to 9 s.

The model is event-driven: between two events every active flow sends at a constant rate, and
an event is a flow ending, a compute step ending or the bulk flow starting or stopping. Rates:

- `fair`: per-flow max-min fairness on every link (TCP's ideal fair share: no losses, no slow
  start, no queueing delay). This is the best fifo could do.
- `prio ORDER (every link)`: strict priority between jobs on every link, max-min fair within a
  job, work-conserving: a schedule that orders the jobs at every queue, the switch ports included
  (as bands on every host in both directions would, or senders that agree on a plan).
- `prio ORDER (egress only)`: the same priority on the hosts' up links only; each down link (a
  switch port) is a FIFO that shares itself fairly among the flows reaching it (TensorLights bands
  on every host; the rates are the fixed point of the two kinds of links' allocations).
  Every order of the three job kinds is tried, with the two jobs of a kind together or
  interleaved; the bulk flow is in the lowest band (`--cross top`: the highest).

Compute steps vary by +-jitter (uniform, per worker and iteration), so jobs do not stay in
lock-step by construction. It prints each policy's average JCT, its ratio to `fair`, and the
busy share of the worker hosts' links, and with --fifo-s the ratio to the testbed's measured fifo.
`fair` is a pessimistic model of fifo: ideal fair sharing keeps identical jobs in lock-step,
while real TCP's short-term unfairness staggers them (docs/benchmarks.md: two PS jobs on one host
take 6.4-7.1 s under fifo on the testbed, 8.65 s in this model). So read the best orders
against the testbed's fifo: that is what a schedule could win there at most. Writes JSON
(default results/fluid_mixed.json).
"""

from __future__ import annotations

import argparse
import itertools
import random
import sys
from dataclasses import dataclass, field

from hostctl_lab.bench.results import write_results

MIB = 1 << 20
EPS = 1e-12


@dataclass
class Flow:
    job: int
    src: str
    dst: str
    left: float
    on_done: object = None  # called with no arguments when the flow's last byte arrives
    rate: float = 0.0
    then_bytes: float = 0.0  # what the same connection sends later in this iteration (a ring's next steps)

    @property
    def links(self) -> tuple[str, str]:
        return (self.src + ":up", self.dst + ":down")

    @property
    def conn(self) -> tuple[int, str, str]:
        """The connection the flow is a burst of: one per job, sender and receiver."""
        return (self.job, self.src, self.dst)


@dataclass
class Sim:
    cap_Bps: float
    prio: dict  # job -> band (0 = highest); the bulk flow is job -1
    flows: list = field(default_factory=list)
    timers: list = field(default_factory=list)  # (t, callable)
    t: float = 0.0
    busy: dict = field(default_factory=dict)  # link -> busy seconds (rate-weighted)
    egress_only: bool = False
    conn_bytes: dict = field(default_factory=dict)  # connection -> bytes sent so far
    jct: dict = field(default_factory=dict)  # job -> completion time (s), as jobs end
    n_jobs: int = 0

    def start(self, flow: Flow) -> None:
        self.flows.append(flow)

    def after(self, dt: float, fn) -> None:
        self.timers.append((self.t + dt, fn))

    def allocate(self) -> None:
        if self.egress_only:
            self._allocate_egress_only()
            return
        resid: dict[str, float] = {}
        for band in sorted({self.prio[f.job] for f in self.flows}):
            todo = [f for f in self.flows if self.prio[f.job] == band]
            for f in todo:
                for ln in f.links:
                    resid.setdefault(ln, self.cap_Bps)
            progressive_fill(todo, resid)

    def _allocate_egress_only(self) -> None:
        """Priority at the senders' up links only; every down link (a switch port) is a FIFO that shares
        itself fairly among the flows that reach it. Found as the fixed point of the two link kinds'
        demand-limited allocations."""
        if not self.flows:
            return
        rate = {id(f): self.cap_Bps for f in self.flows}
        ups: dict[str, list] = {}
        downs: dict[str, list] = {}
        for f in self.flows:
            ups.setdefault(f.src, []).append(f)
            downs.setdefault(f.dst, []).append(f)
        for _ in range(200):
            # what each flow could get at its up link if its down link let it through: what higher bands
            # leave, shared with its own band's flows at their present rates (priority takes from lower bands)
            offer = {}
            for fl in ups.values():
                for f in fl:
                    band = self.prio[f.job]
                    resid = self.cap_Bps - sum(rate[id(g)] for g in fl if self.prio[g.job] < band)
                    same = [g for g in fl if self.prio[g.job] == band]
                    want = {id(g): rate[id(g)] for g in same}
                    want[id(f)] = float("inf")
                    offer[id(f)] = waterfill(resid, same, want)[id(f)]
            down = {}
            for fl in downs.values():
                down.update(waterfill(self.cap_Bps, fl, offer))
            new = {}
            for fl in ups.values():
                resid = self.cap_Bps
                for band in sorted({self.prio[f.job] for f in fl}):
                    got = waterfill(resid, [f for f in fl if self.prio[f.job] == band], down)
                    new.update(got)
                    resid -= sum(got.values())
            delta = max(abs(new[k] - rate[k]) for k in new)
            rate = new
            if delta < 1.0:
                break
        for f in self.flows:
            f.rate = rate[id(f)]

    def run(self, until: float) -> None:
        while (self.flows or self.timers) and self.t < until:
            self.allocate()
            dt = min([f.left / f.rate for f in self.flows if f.rate > EPS] + [tt - self.t for tt, _ in self.timers]
                     + [until - self.t])
            dt = max(dt, 0.0)
            for f in self.flows:
                f.left -= f.rate * dt
                self.conn_bytes[f.conn] = self.conn_bytes.get(f.conn, 0.0) + f.rate * dt
                for ln in f.links:
                    self.busy[ln] = self.busy.get(ln, 0.0) + f.rate * dt / self.cap_Bps
            self.t += dt
            done = [f for f in self.flows if f.left <= 1e-6]
            self.flows = [f for f in self.flows if f.left > 1e-6]
            due = [fn for tt, fn in self.timers if tt <= self.t + 1e-12]
            self.timers = [(tt, fn) for tt, fn in self.timers if tt > self.t + 1e-12]
            for f in done:
                if f.on_done:
                    f.on_done()
            for fn in due:
                fn()


def progressive_fill(todo: list, resid: dict, cap: dict | None = None) -> None:
    """Max-min fair rates for the flows todo on links with resid[link] left (updated), each flow
    at most cap[id(flow)] if given (a pacer's rate): the tightest link, or the flows whose cap is
    below its fair share, get fixed first."""
    while todo:
        count: dict[str, int] = {}
        for f in todo:
            for ln in f.links:
                count[ln] = count.get(ln, 0) + 1
        tight = min(count, key=lambda ln: resid[ln] / count[ln])
        share = max(resid[tight] / count[tight], 0.0)
        low = [f for f in todo if cap[id(f)] < share] if cap else []
        fixed = low or [f for f in todo if tight in f.links]
        for f in fixed:
            f.rate = cap[id(f)] if low else share
            for ln in f.links:
                resid[ln] -= f.rate
        todo = [f for f in todo if f not in fixed]


def waterfill(cap: float, flows: list, demand: dict) -> dict:
    """Max-min fair shares of one link of capacity cap among flows, each wanting at most demand[id(f)]."""
    out = {}
    todo = sorted(flows, key=lambda f: demand[id(f)])
    left = cap
    while todo:
        share = max(left / len(todo), 0.0)
        f = todo[0]
        if demand[id(f)] <= share:
            out[id(f)] = demand[id(f)]
            left -= demand[id(f)]
            todo.pop(0)
            continue
        for f in todo:
            out[id(f)] = share
        break
    return out


def ps_job(sim: Sim, job: int, ps: str, workers: list[str], nbytes: float, compute: float, iters: int,
           jitter: float, rnd: random.Random, jct: dict) -> None:
    state = {"i": 0, "grads": 0}

    def update() -> None:
        state["grads"] = 0
        for w in workers:
            sim.start(Flow(job, ps, w, nbytes, on_done=lambda w=w: arrived(w)))

    def arrived(w: str) -> None:
        sim.after(compute * rnd.uniform(1 - jitter, 1 + jitter),
                  lambda: sim.start(Flow(job, w, ps, nbytes, on_done=gradient)))

    def gradient() -> None:
        state["grads"] += 1
        if state["grads"] < len(workers):
            return
        state["i"] += 1
        if state["i"] == iters:
            jct[job] = sim.t
        else:
            update()

    update()


def ring_job(sim: Sim, job: int, workers: list[str], nbytes: float, compute: float, iters: int, jitter: float,
             rnd: random.Random, jct: dict) -> None:
    n = len(workers)
    chunk = nbytes / n
    steps = 2 * (n - 1)
    # per worker: current iteration, step, and which halves of the step are done (send, receive)
    st = [{"i": 0, "s": 0, "sent": 0, "recv": 0, "active": False} for _ in range(n)]
    recv_early = [dict() for _ in range(n)]  # (i, s) -> chunks that arrived before the worker got there
    finished = [0]

    def begin_iteration(k: int) -> None:
        sim.after(compute * rnd.uniform(1 - jitter, 1 + jitter), lambda: begin_step(k))

    def begin_step(k: int) -> None:
        w = st[k]
        w["active"] = True
        w["sent"] = 0
        w["recv"] = recv_early[k].pop((w["i"], w["s"]), 0)
        key = (w["i"], w["s"])
        sim.start(Flow(job, workers[k], workers[(k + 1) % n], chunk,
                       on_done=lambda: delivered(k, (k + 1) % n, key), then_bytes=(steps - 1 - w["s"]) * chunk))

    def delivered(k: int, dst: int, key: tuple[int, int]) -> None:
        st[k]["sent"] = 1
        d = st[dst]
        if d["active"] and (d["i"], d["s"]) == key:
            d["recv"] = 1
        else:
            recv_early[dst][key] = 1
        check(k)
        if dst != k:
            check(dst)

    def check(k: int) -> None:
        w = st[k]
        if not (w["active"] and w["sent"] and w["recv"]):
            return
        w["active"] = False
        w["s"] += 1
        if w["s"] < steps:
            begin_step(k)
            return
        w["i"] += 1
        w["s"] = 0
        w["sent"] = w["recv"] = 0
        if w["i"] == iters:
            finished[0] += 1
            if finished[0] == n:
                jct[job] = sim.t
            return
        begin_iteration(k)

    for k in range(n):
        begin_iteration(k)


JOBS = [("psa", "h0"), ("psa", "h0"), ("psb", "h1"), ("psb", "h1"), ("ring", None), ("ring", None)]
WORKERS = ["h2", "h3", "h4", "h5"]


CAP_BPS = 500e6 / 8  # every link: 500 Mbit/s


def scenario(bands: dict, seed: int, jitter: float, cross: bool, egress_only: bool = False,
             until: float = 60.0, jobs: list = JOBS, sim: Sim | None = None) -> dict:
    """Run the jobs (and the bulk flow) on sim (default: a Sim with these bands) to the end."""
    rnd = random.Random(seed)
    sim = sim or Sim(cap_Bps=CAP_BPS, prio=bands, egress_only=egress_only)
    jct = sim.jct
    sim.n_jobs = len(jobs)
    for j, (kind, ps) in enumerate(jobs):
        if kind == "ring":
            ring_job(sim, j, WORKERS, 8 * MIB, 0.2, 12, jitter, rnd, jct)
        else:
            ps_job(sim, j, ps, WORKERS, 2 * MIB, 0.2, 12, jitter, rnd, jct)
    if cross:
        bulk = Flow(-1, "h0", "h3", float("inf"))
        sim.after(1.0, lambda: sim.start(bulk))
        sim.after(9.0, lambda: sim.flows.remove(bulk) if bulk in sim.flows else None)
    sim.run(until)
    if len(jct) != len(jobs):
        raise SystemExit(f"fluid_mixed: only {len(jct)} of {len(jobs)} jobs ended within {until} s")
    end = max(jct.values())
    workers_busy = [sim.busy.get(f"{h}:{d}", 0.0) / end for h in WORKERS for d in ("up", "down")]
    return {"avg_jct_s": sum(jct.values()) / len(jct), "jct_s": [jct[j] for j in range(len(jobs))],
            "makespan_s": end, "worker_links_busy": sum(workers_busy) / len(workers_busy)}


def bands_for(order: tuple[int, ...], cross_top: bool) -> dict:
    bands = {j: 1 + r for r, j in enumerate(order)}
    bands[-1] = 0 if cross_top else len(order) + 1
    return bands


def case_result(name: str, runs: list[dict], **extra) -> dict:
    """One case over its seeds' runs: the mean average JCT and worker-link busy share."""
    return {"policy": name, **extra, "avg_jct_s": sum(r["avg_jct_s"] for r in runs) / len(runs), "runs": runs,
            "worker_links_busy": sum(r["worker_links_busy"] for r in runs) / len(runs)}


def run_case(name: str, bands: dict, seeds: int, jitter: float, cross: bool, egress_only: bool = False) -> dict:
    runs = [scenario(bands, s, jitter, cross, egress_only) for s in range(seeds)]
    return case_result(name, runs, egress_only=egress_only)


def standalone_s(kind: str) -> float:
    """One job of this kind alone on the fabric (no jitter, no bulk flow)."""
    one = [j for j in JOBS if j[0] == kind][:1]
    return scenario({-1: 0, 0: 0}, 0, 0.0, False, jobs=one)["jct_s"][0]


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--seeds", type=int, default=5, help="runs per case (different compute jitter)")
    ap.add_argument("--jitter", type=float, default=0.1, help="compute step varies by +-this share")
    ap.add_argument("--cross", choices=("bottom", "top", "none"), default="bottom",
                    help="the bulk flow's band under priority, or no bulk flow at all")
    ap.add_argument("--fifo-s", type=float, default=0.0,
                    help="the testbed's measured fifo average JCT (s), to print each case against it too")
    ap.add_argument("--out", default="results/fluid_mixed.json")
    a = ap.parse_args(argv)
    cross = a.cross != "none"
    fair = run_case("fair", {j: 0 for j in range(-1, len(JOBS))}, a.seeds, a.jitter, cross)
    cases = [fair]
    kinds: dict[str, list[int]] = {}
    for j, (kind, _) in enumerate(JOBS):
        kinds.setdefault(kind, []).append(j)
    for egress_only in (False, True):
        where = "egress only" if egress_only else "every link"
        for korder in itertools.permutations(kinds):
            grouped = tuple(j for k in korder for j in kinds[k])
            inter = tuple(kinds[k][i] for i in range(2) for k in korder)  # one job of each kind, then the rest
            for order, how in ((grouped, ""), (inter, ", interleaved")):
                name = f"prio {','.join(korder)}{how} ({where})"
                cases.append(run_case(name, bands_for(order, a.cross == "top"), a.seeds, a.jitter, cross,
                                      egress_only))
    base = fair["avg_jct_s"]
    best = {eo: min((c for c in cases[1:] if c["egress_only"] == eo), key=lambda c: c["avg_jct_s"])
            for eo in (False, True)}
    alone = {k: standalone_s(k) for k in kinds}
    print(f"fluid model of mlcc-mixed, {a.seeds} seeds, compute jitter +-{a.jitter:.0%}, bulk flow: {a.cross}")
    print("standalone: " + ", ".join(f"{k} {v:.2f} s" for k, v in alone.items()))
    head = f"{'case':50} {'avg JCT':>8} {'vs fair':>8} {'worker links busy':>18}"
    print(head + (f" {'vs testbed fifo':>16}" if a.fifo_s else ""))
    for c in cases:
        mark = "  <- best" if c in best.values() else ""
        tb = f" {c['avg_jct_s'] / a.fifo_s:16.3f}" if a.fifo_s else ""
        print(f"{c['policy']:50} {c['avg_jct_s']:7.2f}s {c['avg_jct_s'] / base:8.3f} "
              f"{c['worker_links_busy']:17.0%}{tb}{mark}")
    out = {"model": "fluid_mixed", "seeds": a.seeds, "jitter": a.jitter, "cross": a.cross, "standalone_s": alone,
           "testbed_fifo_s": a.fifo_s or None, "cases": cases,
           "best": {("egress_only" if eo else "every_link"): {"policy": c["policy"], "avg_jct_s": c["avg_jct_s"],
                                                              "vs_fair": c["avg_jct_s"] / base}
                    for eo, c in best.items()}}
    write_results(a.out, "fluid model of mlcc-mixed", out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
