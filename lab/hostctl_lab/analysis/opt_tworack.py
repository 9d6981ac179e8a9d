"""An independent optimum model of a testbed scenario: how much could ANY schedule gain over fifo?

    python -m hostctl_lab.analysis.opt_tworack [SCENARIO.toml ...] [--out-dir DIR] [--lp-iterations 2]
           [--lp-slot 0.02] [--lp-time 60] [--order-work 300000] [--max-orders 700] [--no-lp] [--cross-share 0.8]
           [--cross-positions all|bottom] [--slot-plan 0.06] [--slot-floor 65536] [--order J1,J2,...]

Default scenario: examples/scenarios/two-rack.toml; one JSON per scenario, DIR/<name>.json (default
docs/results/mlcc/opt). Written from scratch: it reads the scenario with hostctl_lab.bench.scenario and
shares no code with hostctl's planner (hostctl.core.mlcc, mlcchost, hostctl.policy.mlcc), its bound
(hostctl.core.bound) or the other fluid models in benchmarks/.

The model (fluid, ideal links):

- links: every host has an up link (its NIC) and a down link (its switch port) of the scenario's
  `link` rate; with racks, each rack has an up link (ToR -> aggregation) and a down link
  (aggregation -> ToR) of the `uplink` rate. A flow from host a to host b crosses a:up,
  [rack(a):up, rack(b):down when the racks differ], b:down; a flow within one host crosses nothing
  and takes no time. Rates are payload bytes/s (no headers, queueing, losses, slow start or RTT).
- PS job (lab/hostctl_lab/workloads/ps.py): the model of B bytes is split into shards, one per server; per
  iteration every server sends its shard to every worker (one flow each, all at once); a worker
  computes `compute` s once it has every server's shard of the iteration, then sends each server
  its shard of the gradient (one flow each); a server starts its next update when it has all W
  gradients of the iteration (its barrier). The job ends when every server has the last
  iteration's gradients; JCT = end - arrival.
- ring all-reduce job (lab/hostctl_lab/workloads/allreduce.py): per iteration each rank computes, then
  2(W-1) steps; in a step rank k sends ceil(B/W) bytes to rank k+1; it starts step s+1 when its
  send and its receive of step s are both done (the receive may arrive before the rank gets
  there, as TCP's buffers allow).
- cross traffic ([[cross]], lab/hostctl_lab/tools/bulk.py): `flows` BACKLOGGED flows src -> dst from
  `start` for `duration` seconds (a fixed time, not a fixed volume), each taking what the
  schedule leaves it. Its throughput = bytes / duration; its share = that / its fifo throughput.
- compute is a fixed delay (host_cores is not modelled); gradient buckets (buckets > 1) and torch
  jobs are refused.

Schedules (simulated, event-driven: between two events every flow sends at a constant rate; an
event is a flow ending, a compute ending, cross traffic starting or stopping):

a. fifo: per-flow max-min fair sharing of every link (ideal TCP). Ideal fair sharing keeps
   identical jobs in lock-step, where real TCP's short-term unfairness staggers them: on
   racks-uplink this fifo takes 14.1 s where the testbed's takes 8.6 s. Read the ratios against
   the testbed's fifo too (printed when docs/results/mlcc/<scenario>.json has one).
b. strict priority orders: an order of the jobs (and of the cross traffic, as one more entry);
   every link serves the flows of a higher entry first (they take all they can), max-min fair
   within an entry ("max-min in a job") or, second variant, by worker rank within a job ("by
   worker": a PS sends its updates one worker after another, and the first worker starts computing
   early), work-conserving. Every order is simulated in both variants; jobs with identical
   definitions are interchangeable, so orders that only swap them are simulated once (with more than
   --max-orders, a sample of 100: the scenario's order, by size both ways, random ones); the cross
   traffic is put at every position (--cross-positions all) or last (bottom). Reported: the best
   (lowest average JCT), the best that leaves the cross traffic >= --cross-share of its fifo
   throughput, and the worst order.
c. a LOWER BOUND on the average JCT of every schedule (any rates at any instant, any order, also
   within a job): the optimum of a linear program that every real schedule satisfies. Variables: per
   flow f of every iteration (a task) its start S_f and end C_f, per event (a worker has its
   update, a server its gradients, a rank its step) its end, per job its completion C_j; the
   objective is sum_j C_j. Constraints, each true of every schedule:
   - critical paths: C_f >= S_f + bytes / (slowest link of its path); S_f >= the end of every event
     it waits for + the compute in between (and >= the job's arrival); an event ends after its tasks;
   - PS iterations: the W updates a server sends after its barrier share its up link (and the
     gradients into a server its down link), so the next barrier is >= the previous one + their
     bytes / the link's rate + the shortest time from the last of them to the barrier;
   - per link l and every subset A of the jobs using it (Queyranne's inequalities for one machine):
     sum_{j in A} p_jl (C_j - t_jl) >= r_A sum p_jl + ((sum p_jl)^2 + sum p_jl^2) / 2, with p_jl the
     seconds of l's time job j needs, t_jl the shortest time from j's last byte on l to j's end,
     r_A the earliest any of that work can start;
   - time-indexed (the small version below): bytes per flow and slot of --lp-slot seconds, each
     link carrying at most rate x slot per slot (cross traffic too, its bytes within its window),
     and each flow's mean busy time M_f (slot midpoints: within slot/2 of the true one) within
     [S_f + b/(2 r), C_f - b/(2 r)], r its path's rate;
   - an optimal schedule has sum C <= that of the best schedule found (b.), so every C_j <= that sum
     - the other jobs' floors (their critical paths): the slots after that are left out;
   - and the minimum over the orders in which the jobs can finish their work on the most loaded
     link (one LP each, the k-th to finish ends after the first k's work), when the number of orders
     x the LP's columns is at most --order-work.
   HiGHS solves it (scipy.optimize.linprog). It is a relaxation, so it is <= the true optimum; how
   far below is not known (the gap to the best schedule found is the most it can be). It runs on
   the whole run without the time index, and on a small version (--lp-iterations iterations per
   job, the cross traffic as it is) with it; the small version's bound is compared with the small
   version's fifo. With --cross-share, the small version's bound is computed a second time with the
   cross traffic required to get that share of its fifo bytes, when its window overlaps the jobs.

d. slotted orders (--slot-plan S, default 0.06 s; 0: off): the same order search, but the order is
   applied only at slot boundaries, as a planner of fixed slots applies it (slotted_rates): at each
   boundary every flow seen by then gets its strict-priority rate and keeps it until the next boundary
   (a paced flow), whatever ends or starts in between; a flow is seen from the first boundary at or after
   its start (lag 1) or the one after (lag 2: the other hosts plan around it a slot later); flows not seen
   yet share what the seen ones leave, max-min (work-conserving, so optimistic for the planner). Also
   with every seen flow given --slot-floor bytes per slot first (mlcc's wait floor). --order J1,J2,...
   simulates one given order, continuous and slotted (e.g. the order mlcc --job-order fixed uses).

What it does not model: TCP (slow start, losses, RTT, fairness over short times), the switch
buffers, the pacer's granularity, the headers on the wire (about 5% of a link) and the processes'
start-up; the slotted schedules model the planning slot, with exact information at each boundary.
Prints a table and writes JSON.
"""

from __future__ import annotations

import argparse
import datetime as dt
import heapq
import itertools
import json
import math
import os
import platform
import random
import sys
import time
from dataclasses import dataclass, field, replace
from pathlib import Path

from hostctl.errors import HostctlError  # the scenario parser's one-line errors
from hostctl_lab.bench.scenario import load_scenario  # only to read the toml

ROOT = Path(__file__).resolve().parents[3]  # the checkout: lab/hostctl_lab/analysis/ -> repository root

DEFAULT_SCENARIO = ROOT / "examples" / "scenarios" / "two-rack.toml"
DEFAULT_OUT_DIR = ROOT / "docs" / "results" / "mlcc" / "opt"
INF = math.inf
DONE_BYTES = 1e-6  # a flow with fewer bytes left is done (float rounding)


class ModelError(Exception):
    """A scenario this model cannot represent."""


# ------------------------------------------------------------------------------------ the model

@dataclass(frozen=True)
class Net:
    links: tuple[str, ...]  # h0:up, h0:down, ..., rack0:up, rack0:down, ...
    cap: tuple[float, ...]  # bytes/s of each link
    rack_of: dict[str, int]
    racks: int

    def path(self, src: str, dst: str) -> tuple[int, ...]:
        if src == dst:
            return ()
        names = [f"{src}:up"]
        if self.racks > 1 and self.rack_of[src] != self.rack_of[dst]:
            names += [f"rack{self.rack_of[src]}:up", f"rack{self.rack_of[dst]}:down"]
        names.append(f"{dst}:down")
        return tuple(self.links.index(n) for n in names)


def make_net(hosts: list[str], link_bps: float, racks: list[int] | None = None,
             uplink_bps: float | None = None) -> Net:
    """Hosts with up/down links of link_bps (bits/s); with racks (rack of each host), rack uplinks."""
    rack_of = dict(zip(hosts, racks or [0] * len(hosts)))
    nr = max(rack_of.values()) + 1
    links, cap = [], []
    for h in hosts:
        links += [f"{h}:up", f"{h}:down"]
        cap += [link_bps / 8, link_bps / 8]
    if nr > 1:
        if uplink_bps is None:
            raise ModelError("racks need an uplink rate")
        for r in range(nr):
            links += [f"rack{r}:up", f"rack{r}:down"]
            cap += [uplink_bps / 8, uplink_bps / 8]
    return Net(tuple(links), tuple(cap), rack_of, nr)


@dataclass(frozen=True)
class PSJob:
    name: str
    servers: tuple[str, ...]  # host of each server (shard)
    shard: tuple[int, ...]  # bytes of each shard
    workers: tuple[str, ...]
    compute: float
    iterations: int
    arrival: float = 0.0
    kind: str = "ps"

    def signature(self) -> tuple:
        return (self.kind, self.servers, self.shard, self.workers, self.compute, self.iterations, self.arrival)


@dataclass(frozen=True)
class RingJob:
    name: str
    workers: tuple[str, ...]  # rank order: rank k sends to rank k+1
    chunk: int  # bytes of one ring step
    compute: float
    iterations: int
    arrival: float = 0.0
    kind: str = "ring"

    @property
    def steps(self) -> int:
        return 2 * (len(self.workers) - 1)

    def signature(self) -> tuple:
        return (self.kind, self.workers, self.chunk, self.compute, self.iterations, self.arrival)


@dataclass(frozen=True)
class Cross:
    name: str
    src: str
    dst: str
    start: float
    end: float
    flows: int = 1

    @property
    def entity(self) -> str:
        return f"cross:{self.name}"


@dataclass(frozen=True)
class Model:
    name: str
    net: Net
    jobs: tuple
    cross: tuple[Cross, ...] = ()

    def with_iterations(self, n: int) -> "Model":
        return replace(self, jobs=tuple(replace(j, iterations=min(n, j.iterations)) for j in self.jobs))


def _shards(total: int, n: int) -> tuple[int, ...]:
    base = total // n  # as ps.py: B // P each, the last one also gets the remainder
    return tuple([base] * (n - 1) + [total - base * (n - 1)])


def model_from_scenario(sc) -> Model:
    t = sc.topology
    if t.host_cores is not None:
        raise ModelError(f"{sc.name}: testbed.host_cores (shared processors) is not modelled")
    net = make_net(list(t.hosts), t.link_bps, list(t.rack_of), t.uplink_bps)
    jobs = []
    for j in sc.jobs:
        if j.kind == "ps":
            if j.buckets > 1:
                raise ModelError(f"{sc.name}: job {j.name}: gradient buckets are not modelled")
            jobs.append(PSJob(j.name, tuple(j.ps_hosts), _shards(j.model_bytes, len(j.ps_hosts)),
                              tuple(j.worker_hosts), j.compute_s, j.iterations, j.arrival_s))
        elif j.kind == "allreduce":
            w = len(j.worker_hosts)
            jobs.append(RingJob(j.name, tuple(j.worker_hosts), -(-j.model_bytes // w), j.compute_s, j.iterations,
                                j.arrival_s))
        else:
            raise ModelError(f"{sc.name}: job {j.name}: kind {j.kind} is not modelled (ps and allreduce are)")
    cross = tuple(Cross(c.name, c.src, c.dst, c.start_s, c.start_s + c.duration_s, c.flows) for c in sc.cross)
    return Model(sc.name, net, tuple(jobs), cross)


# ------------------------------------------------------------------------------- the simulator

class _Flow:
    __slots__ = ("path", "left", "level", "done", "rate", "sent", "tag", "seen_at", "frozen")

    def __init__(self, path, left, level, done, tag, seen_at=0):
        self.path, self.left, self.level, self.done, self.tag = path, left, level, done, tag
        self.rate = 0.0
        self.sent = 0.0
        self.seen_at = seen_at  # slotted schedules: the slot boundary from which its level counts
        self.frozen = False  # slotted schedules: its rate was set at the last boundary


@dataclass
class SimResult:
    jct: dict[str, float]
    end: dict[str, float]
    makespan: float  # last job's end
    cross_bytes: dict[str, float] = field(default_factory=dict)
    cross_bps: dict[str, float] = field(default_factory=dict)  # bits/s over the cross traffic's duration

    @property
    def avg_jct(self) -> float:
        return sum(self.jct.values()) / len(self.jct)


def maxmin_rates(flows: list, cap, one_level: bool = False) -> None:
    """Set each flow's rate: strict priority by level (lower level first), max-min fair within a
    level on the capacity the levels before it left (progressive filling). one_level: all flows
    in one level (plain max-min)."""
    resid = list(cap)
    by_level: dict[int, list] = {}
    for f in flows:
        by_level.setdefault(0 if one_level else f.level, []).append(f)
    for lv in sorted(by_level):
        on: dict[int, list] = {}
        for f in by_level[lv]:
            f.rate = -1.0
            for l in f.path:
                on.setdefault(l, []).append(f)
        n = {l: len(v) for l, v in on.items()}
        while n:
            lb = min(n, key=lambda l: resid[l] / n[l])
            share = max(resid[lb] / n[lb], 0.0)
            for f in on[lb]:
                if f.rate < 0:
                    f.rate = share
                    for l in f.path:
                        resid[l] -= share
                        n[l] -= 1
                        if n[l] == 0:
                            del n[l]


def slotted_rates(flows: list, cap: tuple[float, ...], boundary: int | None, floor: float = 0.0) -> None:
    """A priority order that is applied only at slot boundaries (as a planner of fixed slots does).
    At a boundary (its index given): the flows seen by then (seen_at <= boundary) get the strict
    priority rates of maxmin_rates and keep them (frozen, as paced flows) until the next boundary;
    the flows not seen yet share what is left, max-min, at one level. Between boundaries (None):
    frozen flows keep their rates, whatever ends or starts; the others (flows that started since,
    or are not seen yet) share, max-min, what the frozen ones leave, which includes the rate of a
    frozen flow that ended. Optimistic for a planner: every flow it has seen is planned at the
    exact priority rates of that instant, and unseen flows fill every gap at once."""
    if boundary is not None:
        seen = [f for f in flows if f.seen_at <= boundary]
        base = list(cap)
        if floor > 0:  # every seen flow first gets the floor (a planner's wait floor), the order the rest
            for f in seen:
                for l in f.path:
                    base[l] -= floor
        maxmin_rates(seen, [max(b, 0.0) for b in base])
        for f in flows:
            f.frozen = f.seen_at <= boundary
            if f.frozen:
                f.rate += floor
    resid = list(cap)
    rest = []
    for f in flows:
        if f.frozen:
            for l in f.path:
                resid[l] -= f.rate
        else:
            rest.append(f)
    maxmin_rates(rest, [max(r, 0.0) for r in resid], one_level=True)


class Sim:
    def __init__(self, model: Model, levels: dict[str, int] | None = None, by_worker: bool = False,
                 slot: float | None = None, lag: int = 1, floor: float = 0.0):
        self.m = model
        self.floor = floor  # slotted: bytes/s every seen flow gets before the order
        self.levels = levels or {}
        self.by_worker = by_worker
        self.slot = slot  # slotted priority (slotted_rates): rates change at boundaries k * slot
        self.lag = lag  # a flow's level counts from the lag-th boundary after it started (1: the next)
        self.boundary: int | None = 0  # the boundary reached and not yet applied
        self.t = 0.0
        self.flows: list[_Flow] = []
        self.timers: list = []
        self.seq = 0
        self.dirty = True
        self.end: dict[str, float] = {}
        self.cross_flows: dict[str, list[_Flow]] = {}
        self.cross_bytes: dict[str, float] = {}

    def level(self, entity: str) -> int:
        return self.levels.get(entity, len(self.levels))

    def at(self, t: float, fn) -> None:
        self.seq += 1
        heapq.heappush(self.timers, (t, self.seq, fn))

    def add_flow(self, entity: str, src: str, dst: str, nbytes: float, done, worker: int = 0) -> _Flow | None:
        """worker: the flow's worker (rank) in its job; with by_worker, a job's flows of a lower
        worker come first (a PS sends its updates one worker after another)."""
        path = self.m.net.path(src, dst)
        if not path:  # within one host: no link, no time
            self.at(self.t, done)
            return None
        level = self.level(entity) * 1000 + (worker if self.by_worker else 0)
        seen_at = 0
        if self.slot:
            # the first boundary at or after its start (the events of one instant all come before
            # that instant's boundary plan), plus lag - 1
            seen_at = math.ceil(self.t / self.slot - 1e-9) + self.lag - 1
        f = _Flow(path, float(nbytes), level, done, entity, seen_at)
        self.flows.append(f)
        self.dirty = True
        return f

    def job_done(self, name: str) -> None:
        self.end[name] = self.t

    def run(self) -> None:
        while self.flows or self.timers:
            if self.slot:
                if self.flows and (self.dirty or self.boundary is not None):
                    slotted_rates(self.flows, self.m.net.cap, self.boundary, self.floor)
                    self.dirty, self.boundary = False, None
            elif self.dirty:
                maxmin_rates(self.flows, self.m.net.cap)
                self.dirty = False
            t_next = self.timers[0][0] if self.timers else INF
            if self.slot and self.flows:
                t_next = min(t_next, (math.floor(self.t / self.slot + 1e-9) + 1) * self.slot)
            for f in self.flows:
                if f.rate > 0 and f.left < INF:
                    t_next = min(t_next, self.t + f.left / f.rate)
            if t_next == INF:
                raise RuntimeError(f"{self.m.name}: the model is stuck at t={self.t:.3f} s "
                                   f"({len(self.flows)} flows without a rate)")
            step = t_next - self.t
            finished = []
            for f in self.flows:
                if f.rate > 0:
                    f.left -= f.rate * step
                    f.sent += f.rate * step
                if f.left <= DONE_BYTES or (f.rate > 0 and f.left / f.rate < 1e-12):
                    finished.append(f)
            self.t = t_next
            if finished:
                gone = set(map(id, finished))
                self.flows = [f for f in self.flows if id(f) not in gone]
                self.dirty = True
                for f in finished:
                    f.done()
            if self.slot:
                k = round(self.t / self.slot)
                self.boundary = k if abs(self.t - k * self.slot) < 1e-9 else None
            while self.timers and self.timers[0][0] <= self.t + 1e-12:
                _, _, fn = heapq.heappop(self.timers)
                fn()


def _start_ps(sim: Sim, job: PSJob) -> None:
    S, W, N = len(job.servers), len(job.workers), job.iterations
    updates = [0] * W  # shards of the current iteration's update a worker has
    grads = [0] * S  # gradients of the current iteration a server has
    servers_done = [0]

    def send_update(s: int, i: int) -> None:
        for w in range(W):
            sim.add_flow(job.name, job.servers[s], job.workers[w], job.shard[s], lambda w=w, i=i: update_in(w, i), w)

    def update_in(w: int, i: int) -> None:
        updates[w] += 1
        if updates[w] == S:
            updates[w] = 0
            sim.at(sim.t + job.compute, lambda: send_gradient(w, i))

    def send_gradient(w: int, i: int) -> None:
        for s in range(S):
            sim.add_flow(job.name, job.workers[w], job.servers[s], job.shard[s], lambda s=s: gradient_in(s, i), w)

    def gradient_in(s: int, i: int) -> None:
        grads[s] += 1
        if grads[s] == W:
            grads[s] = 0
            if i + 1 < N:
                send_update(s, i + 1)
            else:
                servers_done[0] += 1
                if servers_done[0] == S:
                    sim.job_done(job.name)

    sim.at(job.arrival, lambda: [send_update(s, 0) for s in range(S)])


def _start_ring(sim: Sim, job: RingJob) -> None:
    W, steps = len(job.workers), job.steps
    total = job.iterations * steps
    sent, received = [0] * W, [0] * W  # steps sent / received so far by each rank
    cur = [-1] * W  # the global step a rank is in; -1 while it computes
    ranks_done = [0]

    def start_step(k: int, g: int) -> None:
        cur[k] = g
        sim.add_flow(job.name, job.workers[k], job.workers[(k + 1) % W], job.chunk, lambda: step_sent(k), k)

    def step_sent(k: int) -> None:
        nxt = (k + 1) % W
        sent[k] += 1
        received[nxt] += 1
        advance(k)
        advance(nxt)

    def advance(k: int) -> None:
        g = cur[k]
        if g < 0 or sent[k] < g + 1 or received[k] < g + 1:
            return
        g += 1
        if g == total:
            cur[k] = -1
            ranks_done[0] += 1
            if ranks_done[0] == W:
                sim.job_done(job.name)
        elif g % steps == 0:
            cur[k] = -1
            sim.at(sim.t + job.compute, lambda: start_step(k, g))
        else:
            start_step(k, g)

    sim.at(job.arrival + job.compute, lambda: [start_step(k, 0) for k in range(W)])


def _start_cross(sim: Sim, c: Cross) -> None:
    def start() -> None:
        sim.cross_flows[c.name] = [sim.add_flow(c.entity, c.src, c.dst, INF, lambda: None) for _ in range(c.flows)]

    def stop() -> None:
        fl = sim.cross_flows.pop(c.name, [])
        sim.cross_bytes[c.name] = sum(f.sent for f in fl)
        sim.flows = [f for f in sim.flows if f not in fl]
        sim.dirty = True

    sim.at(c.start, start)
    sim.at(c.end, stop)


def simulate(model: Model, order: list[str] | tuple[str, ...] | None = None, by_worker: bool = False,
             slot: float | None = None, lag: int = 1, floor: float = 0.0) -> SimResult:
    """fifo (order None: one level, per-flow max-min) or strict priority in `order` (job names and
    cross entities "cross:NAME"; anything not listed comes last). by_worker: within a job, strict
    priority by worker (rank) too, instead of max-min. slot: the order is applied only at slot
    boundaries, a flow's level from the lag-th boundary after it starts (slotted_rates)."""
    levels = {e: i for i, e in enumerate(order)} if order is not None else {}
    sim = Sim(model, levels, by_worker, slot=slot, lag=lag, floor=floor)
    for j in model.jobs:
        (_start_ps if isinstance(j, PSJob) else _start_ring)(sim, j)
    for c in model.cross:
        _start_cross(sim, c)
    sim.run()
    missing = [j.name for j in model.jobs if j.name not in sim.end]
    if missing:
        raise RuntimeError(f"{model.name}: jobs {missing} did not finish")
    jct = {j.name: sim.end[j.name] - j.arrival for j in model.jobs}
    cb = {c.name: sim.cross_bytes.get(c.name, 0.0) for c in model.cross}
    return SimResult(jct=jct, end=dict(sim.end), makespan=max(sim.end.values()), cross_bytes=cb,
                     cross_bps={c.name: cb[c.name] * 8 / (c.end - c.start) for c in model.cross})


# ------------------------------------------------------------------------------- order search

def multiset_orders(items: list, key) -> tuple[int, "itertools.chain"]:
    """The number of distinct orders of items when items with the same key(item) are
    interchangeable, and an iterator over one representative of each (first seen first)."""
    groups: dict = {}
    for it in items:
        groups.setdefault(key(it), []).append(it)
    keys = list(groups)
    count = math.factorial(len(items))
    for k in keys:
        count //= math.factorial(len(groups[k]))

    def gen(left: dict, prefix: tuple):
        if not any(left.values()):
            yield prefix
            return
        for k in keys:
            if left[k]:
                nxt = dict(left)
                nxt[k] -= 1
                # the i-th job of a group placed is always its i-th member
                yield from gen(nxt, prefix + (groups[k][len(groups[k]) - left[k]],))

    return count, gen({k: len(v) for k, v in groups.items()}, ())


def unique_orders(model: Model, cross_positions: str = "all", max_orders: int = 700, sample: int = 100,
                  seed: int = 0) -> tuple[list[tuple[str, ...]], bool]:
    """Every strict-priority order of the jobs, orders that only swap identical jobs once; the
    cross traffic (one entry for all of it) at every position ('all') or last ('bottom').
    Returns (orders, exhaustive): with more than max_orders, only `sample` orders: the jobs in the
    scenario's order, by bytes per iteration (fewest first, most first) and random ones."""
    jobs = list(model.jobs)
    npos = len(jobs) + 1 if model.cross and cross_positions == "all" else 1
    count, it = multiset_orders([j.name for j in jobs], {j.name: j.signature() for j in jobs}.get)
    if count * npos <= max_orders:
        orders, exhaustive = list(it), True
    else:
        def size(j) -> float:
            if isinstance(j, PSJob):
                return 2.0 * sum(j.shard) * len(j.workers)
            return float(j.chunk * j.steps * len(j.workers))
        names = [j.name for j in jobs]
        by_size = [j.name for j in sorted(jobs, key=size)]
        picked = dict.fromkeys([tuple(names), tuple(by_size), tuple(reversed(by_size))])
        rng = random.Random(seed)
        for _ in range(100 * sample):
            if (len(picked) + 1) * npos > sample:
                break
            p = names[:]
            rng.shuffle(p)
            picked[tuple(p)] = None
        orders, exhaustive = list(picked), False
    if not model.cross:
        return orders, exhaustive
    ents = tuple(c.entity for c in model.cross)
    out = []
    for perm in orders:
        positions = range(len(perm) + 1) if cross_positions == "all" else [len(perm)]
        for p in positions:
            out.append(perm[:p] + ents + perm[p:])
    return out, exhaustive


def cross_share(res: SimResult, fifo: SimResult) -> float | None:
    """The smallest ratio of a cross traffic entry's throughput to its fifo throughput."""
    shares = [res.cross_bps[n] / fifo.cross_bps[n] for n in res.cross_bps if fifo.cross_bps[n] > 0]
    return min(shares) if shares else None


def search_orders(model: Model, fifo: SimResult, cross_positions: str = "all", min_share: float = 0.8,
                  max_orders: int = 700, **slotted) -> dict:
    """Every order (unique_orders), each with max-min within a job and with the job's workers in rank order.
    slotted: simulate's slot, lag and floor (the orders applied at slot boundaries only)."""
    orders, exhaustive = unique_orders(model, cross_positions, max_orders)
    rows = []
    for o in orders:
        for bw in (False, True):
            r = simulate(model, o, by_worker=bw, **slotted)
            rows.append((r.avg_jct, bw, o, r))
    rows.sort(key=lambda x: (x[0], x[1], x[2]))

    def entry(row) -> dict:
        avg, bw, o, r = row
        return {"order": list(o), "within_job": "by worker" if bw else "max-min", "avg_jct_s": avg,
                "ratio_vs_fifo": avg / fifo.avg_jct, "jct_s": r.jct, "makespan_s": r.makespan,
                "cross_share": cross_share(r, fifo), "cross_throughput_bps": r.cross_bps}

    plain = [row for row in rows if not row[1]]
    out = {"orders_tried": len(orders), "exhaustive": exhaustive, "best": entry(rows[0]),
           "best_maxmin": entry(plain[0]),
           "worst": entry(plain[-1])}
    if model.cross:
        ok = [row for row in rows if (cross_share(row[3], fifo) or 0.0) >= min_share - 1e-9]
        out["best_cross_ok"] = entry(ok[0]) if ok else None
        bottom = [row for row in rows if row[2][-1].startswith("cross:")]
        out["best_cross_last"] = entry(bottom[0]) if bottom else None
    return out


# ------------------------------------------------------------------------------- the bound

@dataclass
class _Task:
    job: int  # index in model.jobs
    nbytes: float
    path: tuple[int, ...]
    release: float  # may not start before (the job's arrival, or arrival + compute)
    preds: list  # (event index, delay seconds): starts >= the event's end + delay
    rmax: float = INF  # bytes/s: the slowest link of its path
    es: float = 0.0  # earliest start, earliest completion, longest chain after it to the job's end
    ec: float = 0.0
    tail: float = 0.0

    @property
    def dur(self) -> float:
        return self.nbytes / self.rmax if self.path else 0.0


@dataclass
class TaskGraph:
    tasks: list[_Task]
    events: list[list[int]]  # tasks that must all be done
    finals: dict[str, list[int]]  # each job's final events
    # (anchor event or None for the job's arrival, target event, [(task, delta, dist)]): every task starts
    # >= anchor's end + delta, and target ends >= the task's end + dist
    groups: list[tuple]


def task_graph(model: Model) -> TaskGraph:
    """Every flow of every iteration as a task, with the dependencies the simulator follows; each
    task's rmax, earliest start/completion (the critical path, every flow at its path's rate) and
    tail (the shortest time from its end to its job's end); the PS iterations as groups."""
    tasks: list[_Task] = []
    events: list[list[int]] = []
    finals: dict[str, list[int]] = {}
    groups: list[tuple] = []
    net = model.net

    def task(jn, src, dst, nbytes, release, preds) -> int:
        path = net.path(src, dst)
        tasks.append(_Task(jn, float(nbytes), path, release, preds,
                           min(net.cap[l] for l in path) if path else INF))
        return len(tasks) - 1

    def event(members) -> int:
        events.append(list(members))
        return len(events) - 1

    for jn, j in enumerate(model.jobs):
        if isinstance(j, PSJob):
            S, W = len(j.servers), len(j.workers)
            barrier = [None] * S  # event: server s has the previous iteration's gradients
            for i in range(j.iterations):
                upd = [[task(jn, j.servers[s], j.workers[w], j.shard[s], j.arrival,
                             [] if barrier[s] is None else [(barrier[s], 0.0)]) for s in range(S)] for w in range(W)]
                have = [event(upd[w]) for w in range(W)]
                grad = [[task(jn, j.workers[w], j.servers[s], j.shard[s], j.arrival, [(have[w], j.compute)])
                         for w in range(W)] for s in range(S)]
                new = [event(grad[s]) for s in range(S)]
                for s in range(S):  # anchor: server s's previous barrier
                    for s2 in range(S):  # target: server s2's barrier of this iteration
                        groups.append((barrier[s], new[s2], [(upd[w][s], 0.0, j.compute + tasks[grad[s2][w]].dur)
                                                             for w in range(W)]))
                        groups.append((barrier[s], new[s2], [(grad[s2][w], tasks[upd[w][s]].dur + j.compute, 0.0)
                                                             for w in range(W)]))
                barrier = new
            finals[j.name] = list(barrier)
        else:
            W, steps = len(j.workers), j.steps
            prev_ev = [None] * W  # event: rank k's send and receive of the previous step
            for g in range(j.iterations * steps):
                ids = []
                for k in range(W):
                    if prev_ev[k] is None:
                        ids.append(task(jn, j.workers[k], j.workers[(k + 1) % W], j.chunk, j.arrival + j.compute, []))
                    else:
                        delay = j.compute if g % steps == 0 else 0.0
                        ids.append(task(jn, j.workers[k], j.workers[(k + 1) % W], j.chunk, j.arrival,
                                        [(prev_ev[k], delay)]))
                prev_ev = [event([ids[k], ids[(k - 1) % W]]) for k in range(W)]
            finals[j.name] = list(prev_ev)
    # critical paths: a task is created after the tasks of the events it waits for
    ev_ec = [0.0] * len(events)
    ev_of: list[list[int]] = [[] for _ in tasks]
    for e, members in enumerate(events):
        for f in members:
            ev_of[f].append(e)
    for f, tk in enumerate(tasks):
        tk.es = max([tk.release] + [ev_ec[e] + d for e, d in tk.preds])
        tk.ec = tk.es + tk.dur
        for e in ev_of[f]:
            ev_ec[e] = max(ev_ec[e], tk.ec)
    waiting: list[list[tuple[int, float]]] = [[] for _ in events]  # event -> (task, delay) that wait for it
    for g, tk in enumerate(tasks):
        for e, d in tk.preds:
            waiting[e].append((g, d))
    for f in range(len(tasks) - 1, -1, -1):
        tasks[f].tail = max([0.0] + [d + tasks[g].dur + tasks[g].tail for e in ev_of[f] for g, d in waiting[e]])
    return TaskGraph(tasks, events, finals, groups)


def job_floor(model: Model) -> list[float]:
    """Each job's completion time alone with every flow at its path's rate and no flow of its own
    in its way: a lower bound on its completion under any schedule."""
    out = [0.0] * len(model.jobs)
    for tk in task_graph(model).tasks:
        out[tk.job] = max(out[tk.job], tk.ec)
    return out


def link_work(model: Model, graph: TaskGraph) -> dict[int, dict[int, tuple[float, float, float]]]:
    """link -> job -> (seconds of work, earliest start of that work, shortest tail after it)."""
    out: dict[int, dict[int, list[float]]] = {}
    for tk in graph.tasks:
        for l in tk.path:
            w = out.setdefault(l, {}).setdefault(tk.job, [0.0, INF, INF])
            w[0] += tk.nbytes / model.net.cap[l]
            w[1] = min(w[1], tk.es)
            w[2] = min(w[2], tk.tail)
    return {l: {j: tuple(v) for j, v in d.items()} for l, d in out.items()}


class _LP:
    """The LP of lp_bound: columns, bounds and <= rows, built once; solve() takes extra rows."""

    def __init__(self, model: Model, slot: float | None, sum_completion: float,
                 cross_min_bytes: dict[str, float] | None):
        """slot None: no time index (no link capacities per slot, no cross traffic): only critical
        paths, the PS groups and the per-link inequalities; small enough for a whole run."""
        import numpy as np

        self.model, self.slot = model, slot
        self.method = "highs"
        g = self.graph = task_graph(model)
        tasks, events = g.tasks, g.events
        J = self.J = len(model.jobs)
        floor_c = [0.0] * J
        for tk in tasks:
            floor_c[tk.job] = max(floor_c[tk.job], tk.ec)
        self.floor = floor_c
        # an optimal schedule has sum C <= sum_completion, so C_j <= sum_completion - the others' floors
        horizon = [sum_completion - (sum(floor_c) - floor_c[j]) for j in range(J)]
        if any(h < floor_c[j] - 1e-9 for j, h in enumerate(horizon)):
            raise ValueError("sum_completion is below the jobs' floors: not the sum of a real schedule")
        self.horizon = max(horizon)
        # columns: x[f, t] for the slots of f's window; S_f, C_f per task; C_e per event; C_j per job; cross x[t]
        col = 0
        xcols = []
        for tk in tasks:
            if slot is None:
                xcols.append((col, 0, 0))
                continue
            t_lo = int(math.floor(tk.es / slot + 1e-9))
            t_hi = max(int(math.ceil((horizon[tk.job] - tk.tail) / slot - 1e-9)), t_lo + 1) if tk.path else t_lo
            xcols.append((col, t_lo, t_hi - t_lo))
            col += t_hi - t_lo
        nx = col
        self.S0, self.C0 = nx, nx + len(tasks)
        self.E0 = self.C0 + len(tasks)
        self.J0 = self.E0 + len(events)
        X0 = self.J0 + J
        T_all = int(math.ceil(self.horizon / slot)) if slot else 0
        cross = list(model.cross) if slot else []
        self.nvar = X0 + len(cross) * T_all
        lb = np.zeros(self.nvar)
        ub = np.full(self.nvar, np.inf)
        self.rows: list[tuple[list, float]] = []  # (coefs, b): sum coefs <= b
        self.eq: list[tuple[list, float]] = []
        leq = self.leq
        S0, C0, E0, J0 = self.S0, self.C0, self.E0, self.J0
        on_link: dict[tuple[int, int], list] = {}
        for f, tk in enumerate(tasks):
            S, C = S0 + f, C0 + f
            lb[S], lb[C] = tk.es, tk.ec
            leq([(S, 1.0), (C, -1.0)], -tk.dur)  # C >= S + b / rmax
            for e, d in tk.preds:
                leq([(E0 + e, 1.0), (S, -1.0)], -d)  # S >= C_e + d
            c_first, t_lo, n = xcols[f]
            if not tk.path or not n:
                continue
            ub[c_first:c_first + n] = tk.rmax * slot
            self.eq.append(([(c_first + k, 1.0) for k in range(n)], tk.nbytes))
            mid = [(t_lo + k + 0.5) * slot / tk.nbytes for k in range(n)]  # mean busy time M = sum mid * x
            half = tk.nbytes / (2 * tk.rmax)
            # a byte's slot midpoint is within slot/2 of when it is sent: M <= C - half + slot/2, M >= S + half - slot/2
            leq([(c_first + k, mid[k]) for k in range(n)] + [(C, -1.0)], -half + slot / 2)
            leq([(c_first + k, -mid[k]) for k in range(n)] + [(S, 1.0)], -half + slot / 2)
            for k in range(n):
                for l in tk.path:
                    on_link.setdefault((l, t_lo + k), []).append((c_first + k, 1.0))
        for e, members in enumerate(events):
            for f in members:
                leq([(C0 + f, 1.0), (E0 + e, -1.0)], 0.0)  # C_e >= C_f
        for jn, j in enumerate(model.jobs):
            lb[J0 + jn] = floor_c[jn]
            for e in g.finals[j.name]:
                leq([(E0 + e, 1.0), (J0 + jn, -1.0)], 0.0)  # C_j >= C_e
        # groups: the tasks of a group that share a link pass it one after another
        for anchor, target, members in g.groups:
            per_link: dict[int, list] = {}
            for f, delta, dist in members:
                for l in tasks[f].path:
                    per_link.setdefault(l, []).append((f, delta, dist))
            for l, ms in per_link.items():
                if len(ms) < 2:
                    continue
                rhs = min(d for _, d, _ in ms) + sum(tasks[f].nbytes for f, _, _ in ms) / model.net.cap[l] \
                    + min(x for _, _, x in ms)
                if anchor is None:
                    jn = tasks[ms[0][0]].job
                    lb[E0 + target] = max(lb[E0 + target], model.jobs[jn].arrival + rhs)
                else:
                    leq([(E0 + anchor, 1.0), (E0 + target, -1.0)], -rhs)
        # Queyranne's inequalities per link over the jobs' total work on it
        self.work = link_work(model, g)
        for l, jobs in self.work.items():
            js = sorted(jobs)
            if len(js) > 10:
                continue
            for size in range(1, len(js) + 1):
                for sub in itertools.combinations(js, size):
                    w = [jobs[j][0] for j in sub]
                    r = min(jobs[j][1] for j in sub)
                    rhs = r * sum(w) + 0.5 * (sum(w) ** 2 + sum(x * x for x in w)) + sum(
                        jobs[j][0] * jobs[j][2] for j in sub)
                    leq([(J0 + j, -jobs[j][0]) for j in sub], -rhs)
        for cn, c in enumerate(cross):
            path = model.net.path(c.src, c.dst)
            pcap = min(model.net.cap[l] for l in path) * c.flows if path else 0.0
            for t in range(T_all):
                overlap = max(0.0, min((t + 1) * slot, c.end) - max(t * slot, c.start))
                ub[X0 + cn * T_all + t] = pcap * overlap
                for l in path:
                    on_link.setdefault((l, t), []).append((X0 + cn * T_all + t, 1.0))
            need = (cross_min_bytes or {}).get(c.name, 0.0) - pcap * max(0.0, c.end - max(T_all * slot, c.start))
            if need > 0:
                leq([(X0 + cn * T_all + t, -1.0) for t in range(T_all)], -need)
        for (l, t), coefs in on_link.items():
            leq(coefs, model.net.cap[l] * slot)
        self.lb, self.ub = lb, ub

    def leq(self, coefs, b) -> None:
        self.rows.append((coefs, b))

    def order_rows(self, link: int, order: tuple[int, ...]) -> list[tuple[list, float]]:
        """Rows saying the jobs finish their work on `link` in `order`: the k-th is done after the
        first k's work, which starts no earlier than the earliest of them may start."""
        jobs = self.work[link]
        out = []
        for k, j in enumerate(order):
            best = 0.0
            for i in range(k + 1):
                seg = order[i:k + 1]
                best = max(best, min(jobs[m][1] for m in seg) + sum(jobs[m][0] for m in seg))
            out.append(([(self.J0 + j, -1.0)], -(best + jobs[j][2])))
        return out

    def solve(self, extra: list | None = None, time_limit: float = 60.0):
        import numpy as np
        from scipy.optimize import linprog
        from scipy.sparse import coo_matrix

        rows = self.rows + (extra or [])
        r_i, c_i, v_i, b = [], [], [], []
        for i, (coefs, bb) in enumerate(rows):
            for c_, v in coefs:
                r_i.append(i)
                c_i.append(c_)
                v_i.append(v)
            b.append(bb)
        er, ec, ev, eb = [], [], [], []
        for i, (coefs, bb) in enumerate(self.eq):
            for c_, v in coefs:
                er.append(i)
                ec.append(c_)
                ev.append(v)
            eb.append(bb)
        cvec = np.zeros(self.nvar)
        cvec[self.J0:self.J0 + self.J] = 1.0
        return linprog(cvec, A_ub=coo_matrix((v_i, (r_i, c_i)), shape=(len(rows), self.nvar)).tocsr(),
                       b_ub=np.array(b), A_eq=coo_matrix((ev, (er, ec)), shape=(len(self.eq), self.nvar)).tocsr(),
                       b_eq=np.array(eb), bounds=np.column_stack([self.lb, self.ub]), method=self.method,
                       options={"time_limit": time_limit})


def lp_bound(model: Model, slot: float | None, sum_completion: float, *,
             cross_min_bytes: dict[str, float] | None = None, time_limit: float = 60.0,
             order_work: int = 300_000, max_vars: int = 12000) -> dict:
    """A lower bound on the average JCT of every schedule of `model` (module docstring, c.).
    sum_completion: the sum of the jobs' completion times (not JCTs) of a known schedule. slot
    None: without the time index. The slot is doubled until the LP has at most max_vars columns.
    Then the minimum over the orders in which the jobs can finish their work on the most loaded
    link (one LP per order), when orders x columns <= order_work."""
    t0 = time.monotonic()
    lp = _LP(model, slot, sum_completion, cross_min_bytes)
    while slot is not None and lp.nvar > max_vars:
        slot *= 2
        lp = _LP(model, slot, sum_completion, cross_min_bytes)
    arrivals = sum(j.arrival for j in model.jobs)
    out = {"method": ("LP relaxation: " + ("time-indexed link capacities, mean busy times, " if slot else "")
                      + "critical paths, PS iterations' shared links, per-link completion-time inequalities"),
           "slot_s": slot, "horizon_s": lp.horizon, "variables": int(lp.nvar),
           "constraints": len(lp.rows) + len(lp.eq), "floor_avg_jct_s": (sum(lp.floor) - arrivals) / lp.J}
    res = lp.solve(time_limit=time_limit)
    out["status"], out["message"] = int(res.status), str(res.message)
    base = (res.fun - arrivals) / lp.J if res.status == 0 else None
    out["base_avg_jct_s"] = base
    out["bound_avg_jct_s"] = base
    if base is not None:
        link = max(lp.work, key=lambda l: (sum(v[0] for v in lp.work[l].values()), -l))
        jobs = sorted(lp.work[link])
        count, it = multiset_orders(jobs, lambda j: model.jobs[j].signature())
        out["order_link"] = model.net.links[link]
        out["orders"] = count
        out["order_bound_avg_jct_s"] = None
        if count * lp.nvar <= order_work:
            perms = list(it)
            vals = []
            for p in perms:
                r = lp.solve(lp.order_rows(link, p), time_limit=time_limit)
                if r.status == 2:  # infeasible: no schedule finishes the link's work in this order
                    continue
                if r.status != 0:
                    vals = None
                    break
                vals.append(((r.fun - arrivals) / lp.J, p))
            if vals:
                v, p = min(vals)
                out["order_bound_avg_jct_s"] = v
                out["order_bound_order"] = [model.jobs[j].name for j in p]
                out["bound_avg_jct_s"] = max(base, v)
    out["seconds"] = round(time.monotonic() - t0, 2)
    return out


# ------------------------------------------------------------------------------- the report

def _sim_dict(r: SimResult) -> dict:
    return {"avg_jct_s": r.avg_jct, "jct_s": r.jct, "makespan_s": r.makespan,
            "cross_throughput_bps": r.cross_bps}


def _sum_completion(model: Model, entry: dict) -> float:
    return sum(entry["jct_s"][j.name] + j.arrival for j in model.jobs)


def _ratio(x: float | None, ref: float) -> float | None:
    return None if x is None else x / ref


def analyse_one(model: Model, *, slot: float | None, lp_time: float, order_work: int,
                cross_positions: str, min_share: float, max_orders: int = 700) -> dict:
    """fifo, the order search and the bounds of one model (slot None: the bound without time index)."""
    fifo = simulate(model)
    out = {"iterations": {j.name: j.iterations for j in model.jobs}, "fifo": _sim_dict(fifo),
           **search_orders(model, fifo, cross_positions, min_share, max_orders)}
    if model.cross:
        out["cross_after_jobs"] = all(c.start >= fifo.makespan for c in model.cross)
    # the best schedule found bounds the optimum's sum of completion times (it may leave the cross
    # traffic less than min_share: the plain bound holds whatever the cross traffic gets)
    bound = lp_bound(model, slot, _sum_completion(model, out["best"]), time_limit=lp_time,
                     order_work=order_work)
    out["bound"] = bound
    out["bound_ratio_vs_fifo"] = _ratio(bound["bound_avg_jct_s"], fifo.avg_jct)
    ok = out.get("best_cross_ok")
    if slot is not None and ok and min_share > 0 and any(c.start < bound["horizon_s"] for c in model.cross):
        need = {c.name: min_share * fifo.cross_bytes[c.name] for c in model.cross}
        bc = lp_bound(model, bound["slot_s"], _sum_completion(model, ok), cross_min_bytes=need, time_limit=lp_time,
                      order_work=order_work)
        out["bound_cross_ok"] = bc
        out["bound_cross_ok_ratio_vs_fifo"] = _ratio(bc["bound_avg_jct_s"], fifo.avg_jct)
    return out


def testbed_fifo(name: str) -> dict | None:
    """The testbed's fifo of this scenario where docs/results/mlcc/<name>.json has one."""
    p = ROOT / "docs" / "results" / "mlcc" / f"{name}.json"
    try:
        d = json.loads(p.read_text())
        return {"avg_jct_s": float(d["summary"]["fifo"]["avg_jct_s"]), "source": str(p.relative_to(ROOT)),
                "date": d.get("started")}
    except (OSError, ValueError, KeyError, TypeError):
        return None


def analyse(model: Model, *, lp_iterations: int = 2, lp_slot: float = 0.02, lp_time: float = 60.0,
            order_work: int = 300_000, do_lp: bool = True, cross_positions: str = "all",
            min_share: float = 0.8, max_orders: int = 700, slot_plan: float = 0.0,
            slot_floor: float = 0.0, orders: list[tuple[str, ...]] | None = None) -> dict:
    t0 = time.monotonic()
    out: dict = {}
    if do_lp:
        out["full"] = analyse_one(model, slot=None, lp_time=lp_time, order_work=order_work,
                                  cross_positions=cross_positions, min_share=min_share, max_orders=max_orders)
        out["small"] = analyse_one(model.with_iterations(lp_iterations), slot=lp_slot, lp_time=lp_time,
                                   order_work=order_work, cross_positions=cross_positions, min_share=min_share,
                                   max_orders=max_orders)
    else:
        fifo = simulate(model)
        out["full"] = {"fifo": _sim_dict(fifo), **search_orders(model, fifo, cross_positions, min_share, max_orders)}
    fifo_full = simulate(model) if orders or slot_plan else None  # the whole run's fifo, once for both
    if orders:
        out["orders"] = []
        for o in orders:
            unknown = sorted(set(o) - {j.name for j in model.jobs} - {c.entity for c in model.cross})
            if unknown:
                raise ModelError(f"--order names {', '.join(unknown)}, not jobs of {model.name} "
                                 f"({', '.join(j.name for j in model.jobs)})")
            runs = [("continuous", {})]
            if slot_plan:
                runs += [(f"every {slot_plan * 1000:.0f} ms, lag {lag}", {"slot": slot_plan, "lag": lag})
                         for lag in (1, 2)]
            for how, kw in runs:
                r = simulate(model, o, **kw)
                out["orders"].append({"order": list(o), "schedule": how, "avg_jct_s": r.avg_jct,
                                      "ratio_vs_fifo": r.avg_jct / fifo_full.avg_jct, "jct_s": r.jct,
                                      "cross_share": cross_share(r, fifo_full)})
    if slot_plan:
        out["slotted"] = []
        for lag in (1, 2):
            for floor in sorted({0.0, slot_floor}):
                kw = {"slot": slot_plan, "lag": lag, "floor": floor / slot_plan}
                r = search_orders(model, fifo_full, cross_positions, min_share, max_orders, **kw)
                out["slotted"].append({"slot_s": slot_plan, "lag": lag, "floor_bytes_per_slot": floor,
                                       "best": r["best"], "best_cross_ok": r.get("best_cross_ok")})
    tb = testbed_fifo(model.name)
    if tb:
        f = out["full"]
        tb["best_ratio"] = f["best"]["avg_jct_s"] / tb["avg_jct_s"]
        if f.get("bound", {}).get("bound_avg_jct_s"):
            tb["bound_ratio"] = f["bound"]["bound_avg_jct_s"] / tb["avg_jct_s"]
        out["testbed_fifo"] = tb
    out["seconds"] = round(time.monotonic() - t0, 1)
    return out


def _pct(ratio: float | None) -> str:
    return "-" if ratio is None else f"{ratio:.3f} ({(1 - ratio) * 100:+.1f}%)"


def print_report(name: str, res: dict, min_share: float) -> None:
    print(f"== {name}   (vs fifo: ratio of average JCTs, (+x%) = x% below fifo)")
    print(f"{'':52s} {'avg JCT s':>9s} {'vs fifo':>17s} {'cross share':>11s}")

    def line(label, avg, ratio, share=None):
        sh = "-" if share is None else f"{share:.2f}"
        print(f"  {label:50s} {avg:9.3f} {_pct(ratio):>17s} {sh:>11s}")

    for key, title in (("full", "whole run"), ("small", "small version")):
        f = res.get(key)
        if not f:
            continue
        its = sorted(set(f["iterations"].values())) if "iterations" in f else []
        print(f"-- {title}" + (f" ({'/'.join(map(str, its))} iterations per job)" if its else ""))
        has_cross = bool(f["fifo"]["cross_throughput_bps"])
        if f.get("cross_after_jobs"):
            print("  (the cross traffic starts after the last job's end under fifo: "
                  "its place in an order hardly matters)")
        line("fifo (per-flow max-min)", f["fifo"]["avg_jct_s"], 1.0, 1.0 if has_cross else None)
        b = f["best"]
        tried = f"{f['orders_tried']}{'' if f.get('exhaustive', True) else ' sampled'}"
        line(f"best of {tried} orders x 2 ({b['within_job']} in a job)", b["avg_jct_s"],
             b["ratio_vs_fifo"], b["cross_share"])
        print(f"      {' > '.join(b['order'])}")
        m = f["best_maxmin"]
        if m["order"] != b["order"] or m["within_job"] != b["within_job"]:
            line("best order, max-min in a job", m["avg_jct_s"], m["ratio_vs_fifo"], m["cross_share"])
            print(f"      {' > '.join(m['order'])}")
        c = f.get("best_cross_ok")
        if has_cross and c is not None and c["order"] != b["order"]:
            line(f"best order with cross >= {min_share:.0%} of fifo", c["avg_jct_s"], c["ratio_vs_fifo"],
                 c["cross_share"])
            print(f"      {' > '.join(c['order'])} ({c['within_job']})")
        w = f["worst"]
        line("worst order (max-min in a job)", w["avg_jct_s"], w["ratio_vs_fifo"], w["cross_share"])
        bd = f.get("bound")
        if bd and bd["bound_avg_jct_s"] is not None:
            how = f"slot {bd['slot_s'] * 1000:.0f} ms" if bd["slot_s"] else "no time index"
            line(f"LOWER BOUND, any schedule ({how})", bd["bound_avg_jct_s"], f["bound_ratio_vs_fifo"])
            bc = f.get("bound_cross_ok")
            if bc and bc["bound_avg_jct_s"] is not None:
                line(f"lower bound, cross >= {min_share:.0%} of fifo", bc["bound_avg_jct_s"],
                     f["bound_cross_ok_ratio_vs_fifo"])
        elif bd:
            print(f"  lower bound: none ({bd.get('message')})")
    for sl in res.get("slotted", []):
        if sl is res["slotted"][0]:
            print(f"-- the orders applied every {sl['slot_s'] * 1000:.0f} ms only (whole run, slotted_rates): "
                  "a flow's level counts from the lag-th boundary after it starts")
        b = sl["best"]
        fl = f", floor {sl['floor_bytes_per_slot'] / 1024:.0f} KiB/slot" if sl["floor_bytes_per_slot"] else ""
        line(f"best order, lag {sl['lag']}{fl} ({b['within_job']})", b["avg_jct_s"], b["ratio_vs_fifo"],
             b["cross_share"])
        print(f"      {' > '.join(b['order'])}")
    for o in res.get("orders", []):
        line(f"{' > '.join(o['order'])}, {o['schedule']}", o["avg_jct_s"], o["ratio_vs_fifo"], o["cross_share"])
    tb = res.get("testbed_fifo")
    if tb:
        msg = f"-- testbed fifo {tb['avg_jct_s']:.3f} s ({tb['source']}): best order {tb['best_ratio']:.3f}"
        if "bound_ratio" in tb:
            msg += f", lower bound {tb['bound_ratio']:.3f} of it"
        print(msg)
    print(f"  ({res['seconds']} s)")


def _jsonable(x):
    if isinstance(x, float) and not math.isfinite(x):
        return None
    if isinstance(x, dict):
        return {k: _jsonable(v) for k, v in x.items()}
    if isinstance(x, (list, tuple)):
        return [_jsonable(v) for v in x]
    return x


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("scenarios", nargs="*", default=[str(DEFAULT_SCENARIO)], help="scenario TOML files")
    ap.add_argument("--out-dir", default=str(DEFAULT_OUT_DIR), help="one JSON per scenario, named after it")
    ap.add_argument("--lp-iterations", type=int, default=2, help="iterations per job of the small version")
    ap.add_argument("--lp-slot", type=float, default=0.02,
                    help="slot of the small version's time-indexed LP, seconds (doubled while the LP has "
                         "more than 12000 columns)")
    ap.add_argument("--lp-time", type=float, default=60.0, help="HiGHS time limit per LP, seconds")
    ap.add_argument("--order-work", type=int, default=300_000,
                    help="the per-order LPs of a bound run when orders x LP columns is at most this")
    ap.add_argument("--max-orders", type=int, default=700,
                    help="simulate every order up to this many (with the cross traffic's positions), else a sample")
    ap.add_argument("--no-lp", action="store_true", help="fifo and the orders only (no scipy needed)")
    ap.add_argument("--cross-share", type=float, default=0.8,
                    help="share of its fifo throughput the cross traffic must keep (best_cross_ok)")
    ap.add_argument("--cross-positions", choices=("all", "bottom"), default="all",
                    help="the cross traffic at every position of an order, or last only")
    ap.add_argument("--slot-plan", type=float, default=0.06,
                    help="also search the orders applied only at boundaries of this slot, seconds, with lag 1 "
                         "and 2 (a planner of fixed slots such as mlcc's 60 ms; 0: off)")
    ap.add_argument("--slot-floor", type=float, default=65536,
                    help="with --slot-plan, also with every planned flow given this many bytes per slot first "
                         "(mlcc's wait floor is one 64 KiB packet per slot; 0: only without)")
    ap.add_argument("--order", action="append", default=[], metavar="J1,J2,...",
                    help="also simulate this strict-priority order of jobs (max-min within a job; cross traffic "
                         "\"cross:NAME\", else last), continuous and slotted; repeatable")
    a = ap.parse_args(argv)
    if not 0 <= a.slot_plan <= 1.0 or a.slot_floor < 0:
        ap.error("--slot-plan within 0..1 s, --slot-floor >= 0")
    if (a.lp_iterations < 1 or not 0.001 <= a.lp_slot <= 1.0 or a.lp_time <= 0 or not 0 <= a.cross_share <= 1
            or a.max_orders < 1 or a.order_work < 0):
        ap.error("--lp-iterations >= 1, --lp-slot within 0.001..1, --lp-time > 0, --cross-share within 0..1, "
                 "--max-orders >= 1, --order-work >= 0")
    for path in a.scenarios:
        try:
            model = model_from_scenario(load_scenario(path))
            res = analyse(model, lp_iterations=a.lp_iterations, lp_slot=a.lp_slot, lp_time=a.lp_time,
                          order_work=a.order_work, do_lp=not a.no_lp, cross_positions=a.cross_positions,
                          min_share=a.cross_share, max_orders=a.max_orders, slot_plan=a.slot_plan,
                          slot_floor=a.slot_floor,
                          orders=[tuple(x.strip() for x in o.split(",") if x.strip()) for o in a.order])
        except (ModelError, HostctlError) as e:
            print(f"opt_tworack: {e}", file=sys.stderr)
            return 2
        print_report(model.name, res, a.cross_share)
        try:
            import scipy
            scipy_version = scipy.__version__
        except ImportError:
            scipy_version = None
        doc = {"benchmark": "opt_tworack", "date": dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds"),
               "command": " ".join(["python", "lab/hostctl_lab/analysis/opt_tworack.py", *sys.argv[1:]]),
               "machine": {"platform": platform.platform(), "cpus": os.cpu_count(),
                           "python": platform.python_version(), "scipy": scipy_version},
               "scenario": {"name": model.name, "path": os.path.relpath(os.path.abspath(path), ROOT),
                            "jobs": [j.name for j in model.jobs], "cross": [c.name for c in model.cross]},
               "settings": {"lp_iterations": a.lp_iterations, "lp_slot_s": a.lp_slot, "lp_time_s": a.lp_time,
                            "order_work": a.order_work, "max_orders": a.max_orders, "cross_share": a.cross_share,
                            "cross_positions": a.cross_positions, "slot_plan_s": a.slot_plan,
                            "slot_floor_bytes": a.slot_floor,
                            "cross_model": "backlogged flows for the cross traffic's duration"},
               **res}
        out = Path(a.out_dir) / f"{model.name}.json"
        out.parent.mkdir(parents=True, exist_ok=True)
        out.write_text(json.dumps(_jsonable(doc), indent=1) + "\n")
        print(f"wrote {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
