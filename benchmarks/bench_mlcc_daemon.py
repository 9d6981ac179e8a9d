"""The daemon's whole per-slot mlcc decision (hostctl.policy.mlcc.MlccControl.tick in local mode:
flow table -> waves by job -> allocate -> floors -> own load table), for n flows of J jobs.

    python benchmarks/bench_mlcc_daemon.py [--flows 10,100] [--jobs 1,4,10] [--slots 1000] [--repeat 3]
                                           [--job-order local,none,fixed] [--peers N]

With ``--job-order`` (a list) each case runs in switch mode with each order instead, against an
in-process switch that answers at once with other hosts' load on each flow's 2- or 4-link path
(``InstantSwitch``; the exchange itself is not timed: the decision is, with building its messages);
``none`` there is switch mode without an order, ``local`` local mode.

Each slot gets fresh random flows: bytes left 10 KB..50 MB (log-uniform, 10% unknown, 10% idle),
B_i up to the link rate, 10 Gbit/s NIC, K = 10. Prints and writes JSON (default
results/bench_mlcc_daemon.json) with wall and thread-CPU percentiles per case."""

from __future__ import annotations

import argparse
import dataclasses
import statistics
import time

import numpy as np

from hostctl.core.types import FlowKey
from hostctl.policy.mlcc import FlowIn, MlccControl
from hostctl.policy.switchclient import ExchangeResult, FlowLoads
from hostctl_lab.bench.results import write_results

NIC_Bps = 10e9 / 8


def flows(rng: np.random.Generator, n: int, jobs: int, peers: int | None = None) -> list[FlowIn]:
    """n flows of ``jobs`` jobs to ``peers`` destination hosts (None: each flow to its own host)."""
    G = np.exp(rng.uniform(np.log(1e4), np.log(5e7), n))
    G[rng.random(n) < 0.1] = np.nan
    G[rng.random(n) < 0.1] = 0.0
    dst = [i if peers is None else i % peers for i in range(n)]
    return [FlowIn(FlowKey("10.0.0.1", 9000 + i, f"10.0.{d // 200}.{2 + d % 200}", 40000 + i), f"job{i % jobs}",
                   float(G[i]), float(rng.uniform(0, NIC_Bps)), float(rng.uniform(0, 1e6)), True)
            for i, d in zip(range(n), dst)]


def pct(xs: list[float], q: float) -> float:
    s = sorted(xs)
    return s[min(len(s) - 1, int(round(q * (len(s) - 1))))]


class InstantSwitch:
    """Answers every exchange at once. With ``load``, like a switch of a two-tier fabric (racks of 20
    hosts): each fetched flow gets its path (this host's uplink, the destination's downlink and, across
    racks, both top-of-rack uplinks: 2 or 4 links) with other hosts' load on every link, random but fixed
    per flow (up to half the link rate in each of the K slots). The feedback is built once per flow, so
    the time measured is the daemon's, not this stand-in's."""

    def __init__(self, load: bool = True, K: int = 10, seed: int = 7):
        self.load, self.K, self.rng = load, K, np.random.default_rng(seed)
        self.fb: dict = {}  # flow id (or flow id and links asked) -> its feedback
        self.caps: dict[str, int] = {}

    def _feedback(self, q) -> FlowLoads:
        if q.links is not None:  # some links of the path (the daemon knows the path and asks for those)
            fl = self.fb.get((q.flow_id, q.links))
            if fl is None:
                whole = self._feedback(dataclasses.replace(q, links=None))
                rows = {lid: whole.load_Bps[lid] for lid in q.links if lid in whole.load_Bps}
                fl = self.fb[(q.flow_id, q.links)] = FlowLoads(q.flow_id, rows, tuple(map(sum, zip(*rows.values()))))
            return fl
        fl = self.fb.get(q.flow_id)
        if fl is None:
            dst = int(q.dst.rsplit(".", 1)[1])
            links = [f"{q.src}:up", f"{q.dst}:down"]
            if dst // 20:
                links[1:1] = ["tor0:up", f"tor{dst // 20}:down"]
            rows = (self.rng.uniform(0, NIC_Bps / 2, (len(links), self.K))).astype(int).tolist()
            fl = self.fb[q.flow_id] = FlowLoads(q.flow_id, dict(zip(links, rows)), tuple(map(sum, zip(*rows))))
            self.caps.update((lid, int(NIC_Bps)) for lid in links)
        return fl

    def exchange(self, slot, fetches=(), **_kw) -> ExchangeResult:
        res = ExchangeResult(slot=slot, latency_s={"inproc": 0.0})
        if self.load and fetches:
            res.feedback = {q.flow_id: self._feedback(q) for q in fetches}
            res.capacities_Bps = self.caps
        return res

    def close(self) -> None:
        pass


def run_case(n: int, jobs: int, slots: int, seed: int, order: str | None = None, peers: int | None = None) -> dict:
    rng = np.random.default_rng(seed)
    t = [1e9]
    if order is None:
        ctl = MlccControl(int(NIC_Bps), 0.06, wall=lambda: t[0])
    else:
        ctl = MlccControl(int(NIC_Bps), 0.06, wall=lambda: t[0], switch=InstantSwitch(), job_order=order)
    inputs = [flows(rng, n, jobs, peers) for _ in range(50)]
    wall, cpu = [], []
    for s in range(slots + 20):
        fl = inputs[s % len(inputs)]
        c0, w0 = time.thread_time_ns(), time.perf_counter_ns()
        ctl.tick(fl)
        w1, c1 = time.perf_counter_ns(), time.thread_time_ns()
        t[0] += 0.06
        if s >= 20:
            wall.append((w1 - w0) / 1e6)
            cpu.append((c1 - c0) / 1e6)
    summ = {k: {"median": statistics.median(v), "p90": pct(v, 0.9), "p99": pct(v, 0.99)}
            for k, v in (("wall_ms", wall), ("cpu_ms", cpu))}
    # CPU share of one core if the daemon made this decision every 60 ms slot
    return {"n": n, "jobs": jobs, "peers": peers, "slots": slots,
            "mode": "local" if order is None else f"switch, order {order}",
            **summ,
            "core_pct_at_60ms": 100.0 * statistics.fmean(cpu) / 60.0}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--flows", default="10,100")
    ap.add_argument("--jobs", default="1,4,10")
    ap.add_argument("--slots", type=int, default=1000)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--job-order", default=None, help="switch mode with these orders instead of local mode, e.g. "
                    "none,fixed (none: switch mode without an order); 'local' in the list: local mode too")
    ap.add_argument("--peers", type=int, default=None, help="destination hosts of the flows (default: one per flow; "
                    "fewer peers, fewer links to plan in switch mode)")
    ap.add_argument("--out", default="results/bench_mlcc_daemon.json")
    a = ap.parse_args()
    orders = [None] if a.job_order is None else [None if o == "local" else o for o in a.job_order.split(",")]
    res = []
    for rep in range(a.repeat):
        cases = [(n, jobs, order) for n in map(int, a.flows.split(",")) for jobs in map(int, a.jobs.split(","))
                 for order in orders]
        for n, jobs, order in cases:
            r = run_case(n, jobs, a.slots, seed=rep * 1000 + n * 10 + jobs, order=order, peers=a.peers)
            r["repeat"] = rep
            res.append(r)
            print(f"rep {rep} n={n:4d} jobs={jobs:3d} {r['mode']}: wall median {r['wall_ms']['median']:.3f} p90 "
                  f"{r['wall_ms']['p90']:.3f} p99 {r['wall_ms']['p99']:.3f} ms | cpu mean -> "
                  f"{r['core_pct_at_60ms']:.1f}% of a core at 60 ms slots", flush=True)
    write_results(a.out, "mlcc daemon per-slot decision (MlccControl.tick)", {"results": res},
                  machine={"numpy": np.__version__})


if __name__ == "__main__":
    main()
