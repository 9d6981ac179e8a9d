"""An independent optimum of small cluster-simulator cases: how low can the average JCT go at all?

Written from the job definitions (sizes, compute times, iterations, hosts, link capacities) alone: it
imports nothing of the cluster simulator (hostctl_lab.sim: kernel, cluster, mlccnet, topo) nor of the
daemon's planner. It exists to check the simulator's MLCC result (docs/sim-mlcc.md, "The independent
check"): every JCT the engine reports must be at least this model's lower bound, and the gap between the
bound and a policy says how much any schedule could still gain.

The model (fluid, ideal links), the engine's job semantics (docs/simulator.md, "The model"):

- a fabric of hosts in racks: every host has an up link (its NIC) and a down link (its switch port) of
  ``nic_Bps``; with more than one rack, each rack has an up and a down link of ``uplink_Bps``. A flow
  from a to b crosses a:up, [rack(a):up, rack(b):down when the racks differ], b:down;
- a job arrives at ``arrival``, then ``iterations`` times: compute ``compute`` s, then the exchange;
  the next compute starts when the exchange is done. Ring (``kind="ring"``, hosts in ring order): one
  phase, host k sends 2(S-1)/S x size bytes to host k+1, all S flows at once (the fluid ring: no chunk
  dependencies, as the engine). Parameter server (``kind="ps"``, the first host is the PS, the others
  are workers; the PS's own worker is local): a push (every worker sends ``size`` to the PS) then a
  pull (the PS sends ``size`` to every worker). ``ps_mode="barrier"``: the pull starts only after the
  whole push (the engine's PS model, every policy); ``"pipelined"``: a byte of the pull may leave as
  soon as that byte has arrived from every worker (MLCC's dependency pipelining taken to its limit: the
  pull's fraction sent to each worker never exceeds any worker's push fraction);
- any rates at any instant (any policy, also idling), as long as no link carries more than its
  capacity. JCT = the end of the last exchange - arrival.

Three things, each independent of the others:

1. ``simulate(case, order)``: an event-driven fluid simulator of this model, written here. ``order=None``
   is fifo (every flow max-min fair on every link: what the engine's ``fifo`` must give, to rounding);
   an order of the jobs is strict priority at every link (a higher job takes all it can, max-min within
   a job), work-conserving. Every order's schedule is feasible: ``best_order`` is an upper bound.
2. ``milp(case, dt, mode="lower")``: a time-indexed MILP whose optimum is a LOWER BOUND on the sum of
   completion times of every schedule of the model. Slots of ``dt`` s; variables: each flow's
   cumulative bytes at the end of every slot (nondecreasing, from 0 to its size), and per phase a binary
   z[t] = "done by the end of slot t" (nondecreasing). Constraints, each true of any schedule mapped to
   slots (a slot's bytes = what was sent within it): per slot, every link carries at most cap x dt; a
   flow's cumulative bytes reach its size where its phase's z is 1; a phase sends nothing in slot t
   unless the phase it waits for has z = 1 at slot t - floor(compute / dt) (the exchange before, with
   the compute between) or at t (the PS push, barrier) or until every push fraction is at least the
   pull's (pipelined); the first exchange sends nothing in a slot that ends before arrival + compute;
   a job's completion C >= dt x (the slots before its last z turns 1), and C >= its critical path alone
   (arrival + iterations x (compute + its exchange's shortest time alone)). Cuts, each also true of any
   schedule: a phase's fraction sent by slot t <= the z it waits for; a phase is done no earlier than
   the one it waits for + the wait + its shortest time alone (z chains); with ``busy=True``, continuous
   start S and end E per phase, tied to the slots by each flow's mean busy time M (slot midpoints: within
   dt/2): S <= M - b/2r, E >= M + b/2r (r: the flow's slowest link), S >= E(dep) + wait, E >= S + its
   shortest time, C >= E. Rounding loses at most a slot per dependency, always downwards, so the bound is
   valid for any dt; a smaller dt makes it tighter. ``bounds`` solves both variants and keeps the higher.
   Slots after each job's latest possible end in an optimal schedule (the upper bound's sum of
   completion times minus the other jobs' critical paths) are left out. HiGHS's dual bound is used
   (valid also when the time limit stops it before optimality).
3. ``milp(case, dt, mode="upper")``: the same MILP made conservative, so that every solution is a
   schedule: a phase may send in slot t only if the phase it waits for is done by the end of slot
   t - 1 - ceil(compute / dt) (or t - 1), the first exchange from the slot that starts after
   arrival + compute, a pipelined pull's cumulative fraction at the end of t at most every push's at
   the end of t - 1, and C = the end of the slot its last z turns 1. Each flow sends at a constant rate
   within a slot. ``check_schedule`` replays such a solution (caps, dependencies) and computes its
   exact JCTs: an UPPER BOUND on the optimum (a feasible schedule), reported beside the lower bound.

So: lower <= optimum <= min(upper, best order). The gap between them is the discretisation (about a
slot per dependency and iteration) plus whatever the time limit left open; both are reported.
"""

from __future__ import annotations

import itertools
import math
import time
from dataclasses import dataclass, field, replace

import numpy as np

EPS = 1e-9
DONE_BYTES = 1e-3  # a flow with this little left is done (float rounding)


# ------------------------------------------------------------------------------------------ the model
@dataclass(frozen=True)
class Net:
    hosts: int
    per_rack: int
    nic_Bps: float
    uplink_Bps: float | None = None

    @property
    def racks(self) -> int:
        return -(-self.hosts // self.per_rack)

    @property
    def cap(self) -> np.ndarray:
        c = [self.nic_Bps] * (2 * self.hosts)
        if self.racks > 1:
            if self.uplink_Bps is None:
                raise ValueError("a fabric of several racks needs uplink_Bps")
            c += [self.uplink_Bps] * (2 * self.racks)
        return np.array(c, dtype=float)

    def link_names(self) -> list[str]:
        n = [f"h{h}:{d}" for h in range(self.hosts) for d in ("up", "down")]
        if self.racks > 1:
            n += [f"rack{r}:{d}" for r in range(self.racks) for d in ("up", "down")]
        return n

    def path(self, a: int, b: int) -> tuple[int, ...]:
        if a == b:
            return ()
        ra, rb = a // self.per_rack, b // self.per_rack
        mid = (2 * self.hosts + 2 * ra, 2 * self.hosts + 2 * rb + 1) if ra != rb else ()
        return (2 * a, *mid, 2 * b + 1)


@dataclass(frozen=True)
class Job:
    name: str
    arrival: float
    size: float  # bytes of the model update
    compute: float  # s per iteration
    iterations: int
    hosts: tuple[int, ...]  # ring: ring order; ps: the PS first, then the workers
    kind: str = "ring"

    def phases(self) -> list[list[tuple[int, int, float]]]:
        hs = list(dict.fromkeys(self.hosts))
        if self.kind == "ps":
            ps, workers = hs[0], hs[1:]
            if not workers:
                raise ValueError(f"job {self.name}: a PS job needs a worker on another host")
            return [[(w, ps, float(self.size)) for w in workers], [(ps, w, float(self.size)) for w in workers]]
        if self.kind != "ring":
            raise ValueError(f"job {self.name}: kind must be ring or ps, got {self.kind!r}")
        S = len(hs)
        if S < 2:
            raise ValueError(f"job {self.name}: a ring needs at least 2 hosts")
        return [[(hs[k], hs[(k + 1) % S], 2 * (S - 1) / S * self.size) for k in range(S)]] if S > 1 else [[]]


@dataclass(frozen=True)
class Case:
    name: str
    net: Net
    jobs: tuple[Job, ...]
    what: str = ""  # what the case is for

    def with_(self, **kw) -> "Case":
        return replace(self, **kw)


def phase_time_alone(net: Net, flows) -> float:
    """Shortest time of one phase alone on the fabric: every link's bytes over its capacity (a lower
    bound; also each flow's bytes over its slowest link, implied)."""
    if not flows:
        return 0.0
    load = np.zeros(len(net.cap))
    for a, b, nb in flows:
        for ln in net.path(a, b):
            load[ln] += nb
    return float((load / net.cap).max())


def exchange_time_alone(net: Net, job: Job, ps_mode: str = "barrier") -> float:
    """A lower bound on one exchange of ``job`` alone (barrier PS: push + pull; pipelined: the longer)."""
    ph = [phase_time_alone(net, p) for p in job.phases()]
    return max(ph) if job.kind == "ps" and ps_mode == "pipelined" else sum(ph)


def critical_path(net: Net, job: Job, ps_mode: str = "barrier") -> float:
    """The earliest the job can end (absolute time): alone, no waits."""
    return job.arrival + job.iterations * (job.compute + exchange_time_alone(net, job, ps_mode))


# ------------------------------------------------------------------------------ 1. the simulator
def _waterfill(paths: list[tuple[int, ...]], resid: np.ndarray, flows: list[int], rate: np.ndarray,
               caps: np.ndarray | None = None) -> None:
    """Max-min fair rates of ``flows`` under per-flow ``caps`` on residual capacities ``resid`` (both
    modified): the classic water-filling, one level at a time (a flow stops at its cap or at a full link)."""
    live = set(flows)
    while live:
        cnt: dict[int, int] = {}
        for f in live:
            for ln in paths[f]:
                cnt[ln] = cnt.get(ln, 0) + 1
        level = min((max(resid[ln], 0.0) / n for ln, n in cnt.items()), default=math.inf)
        if caps is not None:
            level = min(level, min(caps[f] for f in live))
        full = {ln for ln, n in cnt.items() if max(resid[ln], 0.0) / n <= level * (1 + 1e-12) + 1e-12}
        hit = [f for f in live if any(ln in full for ln in paths[f])
               or (caps is not None and caps[f] <= level * (1 + 1e-12))]
        for f in hit:
            rate[f] = level
            for ln in paths[f]:
                resid[ln] -= level
            live.discard(f)


def simulate(case: Case, order: list[int] | None = None, ps_mode: str = "barrier") -> dict:
    """Event-driven fluid run of the case: fifo (``order=None``: one class) or strict priority of the
    jobs in ``order`` at every link (a class per job), max-min fair within a class, work-conserving.

    ``ps_mode="pipelined"``: a PS job's push and pull start together; within its class the push flows
    are served first and each pull flow is held to the pushes' progress (its fraction sent never ahead
    of any push flow's: at equality it is capped at that push's rate). A feasible schedule of the
    pipelined model (not an optimal one). Returns JCTs (name -> s), their mean and the sum of ends."""
    net, jobs = case.net, case.jobs
    cap = net.cap
    prio = {j: k for k, j in enumerate(order)} if order is not None else {j: 0 for j in range(len(jobs))}
    phases = [j.phases() for j in jobs]
    pipe = [j.kind == "ps" and ps_mode == "pipelined" for j in jobs]
    # state: ("wait", t) | ("compute", end) | ("xfer", phase, left) | ("pipe", push left, pull left) | ("done", t)
    state: list = [("wait", j.arrival) for j in jobs]
    done_it = [0] * len(jobs)
    end = [math.nan] * len(jobs)
    now = 0.0
    for _ in range(10**6):
        changed = True
        while changed:  # the transitions at this instant
            changed = False
            for k, j in enumerate(jobs):
                s = state[k]
                if s[0] == "wait" and s[1] <= now + EPS:
                    state[k] = ("compute", now + j.compute)
                elif s[0] == "compute" and s[1] <= now + EPS:
                    if pipe[k]:
                        state[k] = ("pipe", *(np.array([nb for _, _, nb in ph]) for ph in phases[k]))
                    else:
                        state[k] = ("xfer", 0, np.array([nb for _, _, nb in phases[k][0]], dtype=float))
                elif s[0] == "xfer" and (s[2] <= DONE_BYTES).all() and s[1] + 1 < len(phases[k]):
                    state[k] = ("xfer", s[1] + 1, np.array([nb for _, _, nb in phases[k][s[1] + 1]]))
                elif (s[0] == "xfer" and (s[2] <= DONE_BYTES).all()) or (s[0] == "pipe" and (s[2] <= DONE_BYTES).all()):
                    done_it[k] += 1
                    if done_it[k] >= j.iterations:
                        state[k] = ("done", now)
                        end[k] = now
                    else:
                        state[k] = ("compute", now + j.compute)
                else:
                    continue
                changed = True
        if all(s[0] == "done" for s in state):
            break
        # open flows: (job, group, index, bytes left array); group = phase (xfer) or 0 push / 1 pull (pipe)
        fl = []
        for k, s in enumerate(state):
            if s[0] == "xfer":
                fl += [(k, s[1], x, s[2]) for x in range(len(s[2])) if s[2][x] > DONE_BYTES]
            elif s[0] == "pipe":
                fl += [(k, g, x, s[1 + g]) for g in (0, 1) for x in range(len(s[1 + g])) if s[1 + g][x] > DONE_BYTES]
        paths = [net.path(*phases[k][g][x][:2]) for k, g, x, _ in fl]
        size = [phases[k][g][x][2] for k, g, x, _ in fl]
        rate = np.zeros(len(fl))
        resid = cap.copy()
        for level in sorted({prio[k] for k, *_ in fl}):
            mine = [f for f, (k, *_) in enumerate(fl) if prio[k] == level]
            first = [f for f in mine if not (pipe[fl[f][0]] and fl[f][1] == 1)]
            _waterfill(paths, resid, first, rate)
            pulls = [f for f in mine if pipe[fl[f][0]] and fl[f][1] == 1]
            if pulls:
                caps = np.full(len(fl), math.inf)
                for f in pulls:
                    k, _, x, left = fl[f]
                    pf = 1 - left[x] / size[f]
                    push = state[k][1]
                    for y in range(len(push)):
                        qf = 1 - push[y] / phases[k][0][y][2]
                        if pf >= qf - 1e-9 and push[y] > DONE_BYTES:  # caught up: no faster than that push
                            g = next(q for q, (kk, gg, xx, _) in enumerate(fl) if (kk, gg, xx) == (k, 0, y))
                            caps[f] = min(caps[f], rate[g] / phases[k][0][y][2] * size[f])
                _waterfill(paths, resid, pulls, rate, caps)
        nxt = math.inf
        for s in state:
            if s[0] in ("wait", "compute"):
                nxt = min(nxt, s[1])
        for f, (k, g, x, left) in enumerate(fl):
            if rate[f] > 0:
                nxt = min(nxt, now + left[x] / rate[f])
            if pipe[k] and g == 1:  # a pull catching up with a push
                pf, vp = 1 - left[x] / size[f], rate[f] / size[f]
                for q, (kk, gg, y, pl) in enumerate(fl):
                    if kk == k and gg == 0:
                        qf, vq = 1 - pl[y] / size[q], rate[q] / size[q]
                        if pf < qf - 1e-9 and vp > vq:
                            nxt = min(nxt, now + (qf - pf) / (vp - vq))
        if nxt == math.inf:
            raise RuntimeError(f"{case.name}: no progress at t={now}")
        for f, (k, g, x, left) in enumerate(fl):
            left[x] = max(0.0, left[x] - rate[f] * (nxt - now))
        now = nxt
    jct = {j.name: end[k] - j.arrival for k, j in enumerate(jobs)}
    return {"jct_s": jct, "avg_jct_s": float(np.mean(list(jct.values()))), "sum_end_s": float(sum(end))}


def best_order(case: Case, max_orders: int = 720, ps_mode: str = "barrier") -> dict:
    """The best strict-priority order of the jobs (all orders up to ``max_orders``): a feasible
    schedule, so an upper bound on the optimum."""
    n = len(case.jobs)
    best = None
    for k, o in enumerate(itertools.permutations(range(n))):
        if k >= max_orders:
            break
        r = simulate(case, list(o), ps_mode)
        if best is None or r["avg_jct_s"] < best["avg_jct_s"] - 1e-12:
            best = {**r, "order": [case.jobs[x].name for x in o]}
    return best


# ---------------------------------------------------------------------------------- 2, 3. the MILP
@dataclass
class _Phase:
    job: int
    it: int
    p: int
    flows: list  # (src, dst, bytes)
    xs: int = 0  # first slot it may send in
    zs: int = 0  # first slot its z may be 1 in (before: 0)
    T: int = 0  # last slot of its job (z = 1 there)
    ycol: list = field(default_factory=list)  # per flow: first column of its cumulative bytes at slots xs..T
    zcol: int | None = None  # column of z at slot zs (z at zs..T), None: no z (a pipelined push)


class _Builder:
    def __init__(self) -> None:
        self.n = 0
        self.lb: list[float] = []
        self.ub: list[float] = []
        self.integ: list[int] = []
        self.rows: list[int] = []
        self.cols: list[int] = []
        self.vals: list[float] = []
        self.rlo: list[float] = []
        self.rhi: list[float] = []

    def var(self, k: int, lb=0.0, ub=math.inf, integer=False) -> int:
        c = self.n
        self.n += k
        self.lb += [lb] * k
        self.ub += [ub] * k
        self.integ += [1 if integer else 0] * k
        return c

    def row(self, terms, lo=-math.inf, hi=math.inf) -> None:
        r = len(self.rlo)
        for c, v in terms:
            self.rows.append(r)
            self.cols.append(c)
            self.vals.append(v)
        self.rlo.append(lo)
        self.rhi.append(hi)


def upper_sum(case: Case, ps_mode: str = "barrier") -> tuple[float, dict]:
    """A feasible schedule's sum of job ends: the better of fifo and the best strict-priority order."""
    f = simulate(case, None, ps_mode)
    b = best_order(case, ps_mode=ps_mode)
    return (min(f["sum_end_s"], b["sum_end_s"]), {"fifo": f, "best_order": b})


def milp(case: Case, dt: float, *, mode: str = "lower", ps_mode: str = "barrier", time_limit: float = 60.0,
         integral: bool = True, ub_sum: float | None = None, mip_gap: float = 1e-4, busy: bool = True) -> dict:
    """The time-indexed MILP (module docstring, 2 and 3). Returns the average JCT bound (``lower``: HiGHS's
    dual bound; ``upper``: the incumbent's, then replayed by check_schedule), status, and the solution."""
    from scipy.optimize import Bounds, LinearConstraint, milp as _milp
    from scipy.sparse import coo_matrix

    if mode not in ("lower", "upper"):
        raise ValueError("mode is lower or upper")
    if ps_mode not in ("barrier", "pipelined"):
        raise ValueError("ps_mode is barrier or pipelined")
    net, jobs = case.net, case.jobs
    cap = net.cap
    low = mode == "lower"
    if ub_sum is None:
        ub_sum = upper_sum(case, ps_mode)[0]
    cp = [critical_path(net, j, ps_mode) for j in jobs]
    U = float(cap.max()) * dt  # bytes are counted in units of the fastest link's slot (HiGHS's numerics)
    B = _Builder()
    phases: list[_Phase] = []
    links_slot: dict[tuple[int, int], list] = {}  # (link, slot) -> [(col of y[t], col of y[t-1] or None)]
    margin = 0 if low else 2 * max(j.iterations for j in jobs) + 4
    for k, j in enumerate(jobs):
        # latest end of job k in an optimal schedule: sum of ends <= ub_sum, the others at least their paths
        H = ub_sum - (sum(cp) - cp[k])
        T = int(math.ceil(H / dt)) + margin
        ex = [phase_time_alone(net, p) for p in j.phases()]
        est = j.arrival + j.compute
        for i in range(j.iterations):
            for p, flows in enumerate(j.phases()):
                ph = _Phase(k, i, p, flows, T=T)
                # a pipelined push has no barrier; its z (lower bound only) ties the pull's end to it
                pipelined_push = j.kind == "ps" and ps_mode == "pipelined" and p == 0 and not low
                s0 = est + (sum(ex[:p]) if j.kind != "ps" or ps_mode == "barrier" else 0.0)
                e0 = s0 + ex[p]
                ph.xs = max(0, int(math.floor(s0 / dt + 1e-9)))
                ph.zs = max(0, int(math.ceil(e0 / dt - 1e-9)) - 1)
                if ph.zs > T or ph.xs > T:
                    raise RuntimeError(f"{case.name}: horizon too short for job {j.name} (upper sum {ub_sum})")
                for a, b, nb in flows:
                    c = B.var(T - ph.xs + 1, 0.0, nb / U)
                    B.lb[c + T - ph.xs] = nb / U  # every byte by the horizon
                    ph.ycol.append(c)
                    for t in range(ph.xs, T + 1):
                        prev = c + t - ph.xs - 1 if t > ph.xs else None
                        if prev is not None:
                            B.row([(c + t - ph.xs, 1.0), (prev, -1.0)], lo=0.0)  # nondecreasing
                        for ln in net.path(a, b):
                            links_slot.setdefault((ln, t), []).append((c + t - ph.xs, prev))
                if not pipelined_push:
                    ph.zcol = B.var(T - ph.zs + 1, 0.0, 1.0, integer=integral)
                    B.lb[ph.zcol + T - ph.zs] = 1.0
                    for t in range(ph.zs + 1, T + 1):
                        B.row([(ph.zcol + t - ph.zs, 1.0), (ph.zcol + t - ph.zs - 1, -1.0)], lo=0.0)
                    for (a, b, nb), c in zip(flows, ph.ycol):  # done => every byte sent
                        for t in range(ph.zs, T + 1):
                            terms = [(ph.zcol + t - ph.zs, nb / U)]
                            if t >= ph.xs:
                                terms.append((c + t - ph.xs, -1.0))
                            B.row(terms, hi=0.0)
                phases.append(ph)
            est += sum(ex) if j.kind != "ps" or ps_mode == "barrier" else max(ex)
            est += j.compute
    # link capacities
    for (ln, t), terms in links_slot.items():
        row = []
        for cur, prev in terms:
            row.append((cur, 1.0))
            if prev is not None:
                row.append((prev, -1.0))
        B.row(row, hi=cap[ln] * dt / U)
    # dependencies
    by = {(ph.job, ph.it, ph.p): ph for ph in phases}

    def gate(ph: _Phase, dep: _Phase, shift: int) -> None:
        """ph sends nothing in slot t unless dep's z is 1 at slot t - shift."""
        for (a, b, nb), c in zip(ph.flows, ph.ycol):
            M = min(cap[ln] for ln in net.path(a, b)) * dt / U
            for t in range(ph.xs, ph.T + 1):
                u = t - shift
                inc = [(c + t - ph.xs, 1.0)] + ([(c + t - ph.xs - 1, -1.0)] if t > ph.xs else [])
                if u >= dep.T:
                    continue
                if u < dep.zs:
                    B.row(inc, hi=0.0)
                else:
                    B.row(inc + [(dep.zcol + u - dep.zs, -M)], hi=0.0)
                    # and its fraction sent by then is at most dep's z (0 or 1; tighter when fractional)
                    B.row([(c + t - ph.xs, U / nb), (dep.zcol + u - dep.zs, -1.0)], hi=0.0)

    def chain(ph: _Phase, dep: _Phase, wait: float) -> None:
        """Lower bound only: ph ends at least wait + its shortest time alone after dep ends, so
        z_ph[t] <= z_dep[t - floor((wait + shortest) / dt)]."""
        h = int(math.floor((wait + phase_time_alone(net, ph.flows)) / dt + 1e-9))
        for t in range(ph.zs, ph.T + 1):
            u = t - h
            if u >= dep.T:
                continue
            if u < dep.zs:
                B.ub[ph.zcol + t - ph.zs] = 0.0
            else:
                B.row([(ph.zcol + t - ph.zs, 1.0), (dep.zcol + u - dep.zs, -1.0)], hi=0.0)

    def frac(ph: _Phase, x: int, t: int):
        """(column, 1/bytes) of flow x's cumulative fraction at the end of slot t, or None if 0 / 1."""
        if t < ph.xs:
            return None
        return (ph.ycol[x] + min(t, ph.T) - ph.xs, U / ph.flows[x][2])

    for ph in phases:
        j = jobs[ph.job]
        last = len(j.phases()) - 1
        if ph.p == 0 and ph.it > 0:
            g = int(math.floor(j.compute / dt + 1e-9)) if low else 1 + int(math.ceil(j.compute / dt - 1e-9))
            gate(ph, by[(ph.job, ph.it - 1, last)], g)
            if low:
                chain(ph, by[(ph.job, ph.it - 1, last)], j.compute)
        elif ph.p == 0:  # the first exchange: after arrival + compute
            first = j.arrival + j.compute
            t0 = int(math.ceil(first / dt - 1e-9)) - 1 if low else int(math.ceil(first / dt - 1e-9))
            for (a, b, nb), c in zip(ph.flows, ph.ycol):  # cumulative bytes 0 before slot t0
                for t in range(ph.xs, min(t0, ph.T + 1)):
                    B.ub[c + t - ph.xs] = 0.0
        elif ps_mode == "barrier":
            gate(ph, by[(ph.job, ph.it, 0)], 0 if low else 1)
            if low:
                chain(ph, by[(ph.job, ph.it, 0)], 0.0)
        else:  # pipelined pull: every pull fraction <= every push fraction (a slot earlier, upper)
            push = by[(ph.job, ph.it, 0)]
            if low:  # the pull is done only once the push is
                for t in range(ph.zs, ph.T + 1):
                    u = t
                    if u < push.zs:
                        B.ub[ph.zcol + t - ph.zs] = 0.0
                    elif u < push.T:
                        B.row([(ph.zcol + t - ph.zs, 1.0), (push.zcol + u - push.zs, -1.0)], hi=0.0)
            for x in range(len(ph.flows)):
                for t in range(ph.xs, ph.T + 1):
                    for y in range(len(push.flows)):
                        pf = frac(ph, x, t)
                        qf = frac(push, y, t if low else t - 1)
                        terms = [(pf[0], pf[1])] + ([(qf[0], -qf[1])] if qf else [])
                        B.row(terms, hi=0.0)
    # completion of each job: C >= dt x (slots before its last z turns 1) [+ dt, upper]; C >= critical path
    ccol = B.var(len(jobs))
    for k, j in enumerate(jobs):
        ph = by[(k, j.iterations - 1, len(j.phases()) - 1)]
        n_z = ph.T - ph.zs + 1
        const = dt * (ph.zs + n_z) + (0.0 if low else dt)
        B.row([(ccol + k, 1.0)] + [(ph.zcol + t, dt) for t in range(n_z)], lo=const)
        if low:
            B.lb[ccol + k] = cp[k]
    if low and busy:
        # continuous start S and end E of every phase, tied to the slots by each flow's mean busy time M
        # (M' with slot midpoints is within dt/2 of M): S <= M - b/2r and E >= M + b/2r (r: its path's
        # slowest link); precedences in continuous time: S >= E(dep) + compute, E >= S + shortest alone.
        # These remove the slot per dependency that the z chain alone loses.
        se = {}
        for ph in phases:
            S, E = B.var(1), B.var(1)
            se[(ph.job, ph.it, ph.p)] = (S, E)
            B.row([(E, 1.0), (S, -1.0)], lo=phase_time_alone(net, ph.flows))
            if ph.zcol is not None:  # E >= dt x (slots before z turns 1)
                n_z = ph.T - ph.zs + 1
                B.row([(E, 1.0)] + [(ph.zcol + t, dt) for t in range(n_z)], lo=dt * (ph.zs + n_z))
            for (a, b, nb), c in zip(ph.flows, ph.ycol):
                r = min(cap[ln] for ln in net.path(a, b))
                sumy = [(c + t - ph.xs, dt * U / nb) for t in range(ph.xs, ph.T)]  # M' = dt(T+1/2) - these
                mid = dt * (ph.T + 0.5)
                B.row([(E, 1.0)] + sumy, lo=mid - dt / 2 + nb / (2 * r))
                B.row([(S, 1.0)] + sumy, hi=mid + dt / 2 - nb / (2 * r))
        for (k, i, p), (S, E) in se.items():
            j = jobs[k]
            last = len(j.phases()) - 1
            if p == 0 and i > 0:
                B.row([(S, 1.0), (se[(k, i - 1, last)][1], -1.0)], lo=j.compute)
            elif p == 0:
                B.lb[S] = j.arrival + j.compute
            elif ps_mode == "barrier":
                B.row([(S, 1.0), (se[(k, i, 0)][1], -1.0)], lo=0.0)
            else:  # pipelined: the pull starts no earlier and ends no earlier than the push
                B.row([(S, 1.0), (se[(k, i, 0)][0], -1.0)], lo=0.0)
                B.row([(E, 1.0), (se[(k, i, 0)][1], -1.0)], lo=0.0)
        for k, j in enumerate(jobs):
            B.row([(ccol + k, 1.0), (se[(k, j.iterations - 1, len(j.phases()) - 1)][1], -1.0)], lo=0.0)
    cvec = np.zeros(B.n)
    cvec[ccol:ccol + len(jobs)] = 1.0
    A = coo_matrix((B.vals, (B.rows, B.cols)), shape=(len(B.rlo), B.n)).tocsr()
    t0 = time.perf_counter()
    res = _milp(cvec, constraints=LinearConstraint(A, B.rlo, B.rhi), bounds=Bounds(B.lb, B.ub),
                integrality=np.array(B.integ), options={"time_limit": time_limit, "mip_rel_gap": mip_gap,
                                                        "disp": False})
    wall = time.perf_counter() - t0
    arr = sum(j.arrival for j in jobs)
    out = {"mode": mode, "ps_mode": ps_mode, "dt": dt, "integral": integral, "status": int(res.status),
           "message": res.message, "wall_s": wall, "vars": B.n, "binaries": int(sum(B.integ)),
           "rows": len(B.rlo), "ub_sum_s": ub_sum}
    dual = getattr(res, "mip_dual_bound", None)
    if res.x is None:  # no schedule found in time: the lower bound is still HiGHS's dual bound
        ok = low and integral and dual is not None and math.isfinite(dual)
        out["avg_jct_s"] = out["dual_avg_jct_s"] = (float(dual) - arr) / len(jobs) if ok else None
        out["optimal"] = False
        return out
    inc = (float(res.fun) - arr) / len(jobs)
    if integral and dual is not None and math.isfinite(dual):
        out["dual_avg_jct_s"] = (float(dual) - arr) / len(jobs)
    else:
        out["dual_avg_jct_s"] = inc  # an LP solved to optimality: its value is the bound
    out["incumbent_avg_jct_s"] = inc
    out["optimal"] = res.status == 0
    if low:
        out["avg_jct_s"] = out["dual_avg_jct_s"]  # a valid lower bound whatever the status
    else:
        sched = _extract(phases, res.x * U, dt)
        chk = check_schedule(case, sched, dt, ps_mode)
        out["check"] = {k: v for k, v in chk.items() if k != "jct_s"}
        out["jct_s"] = chk["jct_s"]
        out["avg_jct_s"] = chk["avg_jct_s"]  # the replayed schedule's own JCTs (<= the incumbent's)
    out["C_s"] = {j.name: float(res.x[ccol + k]) for k, j in enumerate(jobs)}
    return out


def _extract(phases: list[_Phase], x: np.ndarray, dt: float) -> dict:
    """Per (job, iteration, phase): the bytes each flow sends in each slot (from the cumulative columns)."""
    out = {}
    for ph in phases:
        per = []
        for c in ph.ycol:
            y = np.concatenate([[0.0], np.maximum.accumulate(x[c:c + ph.T - ph.xs + 1])])
            per.append((ph.xs, np.diff(y)))
        out[(ph.job, ph.it, ph.p)] = per
    return out


def check_schedule(case: Case, sched: dict, dt: float, ps_mode: str = "barrier", tol: float = 1e-6) -> dict:
    """Replay a slotted schedule (bytes per flow and slot, each sent at a constant rate within its slot):
    check every link's capacity per slot and every dependency at the exact times, and return the JCTs
    of the schedule (each exchange's real end: the instant its last flow's bytes are all sent)."""
    net, jobs = case.net, case.jobs
    cap = net.cap
    T = max(xs + len(v) for per in sched.values() for xs, v in per) + 1
    load = np.zeros((len(cap), T))
    worst_dep = 0.0
    worst_frac = 0.0  # pipelined: the most a pull's fraction ran ahead of a push's a slot before
    ends = {}
    for (k, i, p), per in sorted(sched.items()):
        j = jobs[k]
        flows = j.phases()[p]
        e_phase, s_phase = 0.0, math.inf
        for (a, b, nb), (xs, v) in zip(flows, per):
            for ln in net.path(a, b):
                load[ln, xs:xs + len(v)] += v
            nz = np.flatnonzero(v > tol * nb)
            if len(nz) == 0:
                raise AssertionError(f"job {j.name} iteration {i} phase {p}: a flow sends nothing")
            s_phase = min(s_phase, (xs + nz[0]) * dt)
            cum = np.cumsum(v)
            t_last = int(np.searchsorted(cum, nb * (1 - 1e-7)))  # slot in which its last byte leaves
            before = cum[t_last - 1] if t_last > 0 else 0.0
            rate = v[t_last] / dt
            e_phase = max(e_phase, (xs + t_last) * dt + ((nb - before) / rate if rate > 0 else dt))
        ends[(k, i, p)] = (s_phase, e_phase)
    for (k, i, p), (s, e) in ends.items():
        j = jobs[k]
        if p == 0 and i == 0:
            need = j.arrival + j.compute
        elif p == 0:
            need = ends[(k, i - 1, len(j.phases()) - 1)][1] + j.compute
        elif ps_mode == "barrier":
            need = ends[(k, i, 0)][1]
        else:
            need = ends[(k, i, 0)][0]
        worst_dep = max(worst_dep, need - s)
    if ps_mode == "pipelined":  # pull fraction by any instant <= every push fraction (slot ends suffice
        for (k, i, p), per in sched.items():  # when the pull's slot-t bytes are bounded by slot t-1's push)
            if jobs[k].kind != "ps" or p != 1:
                continue
            push = sched[(k, i, 0)]
            for (xs, v), (_, _, nb) in zip(per, jobs[k].phases()[1]):
                fp = np.zeros(T)
                fp[xs:xs + len(v)] = np.cumsum(v) / nb
                fp[xs + len(v):] = 1.0
                for (ys, w), (_, _, mb) in zip(push, jobs[k].phases()[0]):
                    fq = np.zeros(T)
                    fq[ys:ys + len(w)] = np.cumsum(w) / mb
                    fq[ys + len(w):] = 1.0
                    worst_frac = max(worst_frac, float((fp[1:] - fq[:-1]).max()), float(fp[0]))
    over = float((load / (cap[:, None] * dt)).max()) - 1.0
    jct = {j.name: ends[(k, j.iterations - 1, len(j.phases()) - 1)][1] - j.arrival for k, j in enumerate(jobs)}
    return {"jct_s": jct, "avg_jct_s": float(np.mean(list(jct.values()))), "max_link_over": over,
            "max_dependency_violation_s": worst_dep, "max_pipeline_violation": worst_frac,
            "feasible": over <= 1e-6 and worst_dep <= 1e-6 and worst_frac <= 1e-6}


def bounds(case: Case, dt: float, *, ps_modes=("barrier",), time_limit: float = 60.0,
           upper_milp: bool = True) -> dict:
    """Everything for one case, per PS mode: fifo and the best strict-priority order (simulated here:
    feasible, so upper bounds), the MILP's lower bound and (``upper_milp``) its conservative schedule."""
    out = {"case": case.name, "dt": dt}
    for m in ps_modes:
        ub, sims = upper_sum(case, m)
        # the MILP with and without the mean-busy-time rows: both are valid bounds, either may close first
        los = [milp(case, dt, mode="lower", ps_mode=m, time_limit=time_limit, ub_sum=ub, busy=x) for x in (False, True)]
        lo = max(los, key=lambda r: -math.inf if r["avg_jct_s"] is None else r["avg_jct_s"])
        lo = {**lo, "variants": [{k: r.get(k) for k in ("avg_jct_s", "incumbent_avg_jct_s", "optimal", "wall_s",
                                                         "binaries", "vars", "rows")} | {"busy": x}
                                 for r, x in zip(los, (False, True))]}
        up = milp(case, dt, mode="upper", ps_mode=m, time_limit=time_limit, ub_sum=ub) if upper_milp else {}
        if up.get("check") and not up["check"]["feasible"]:
            raise RuntimeError(f"{case.name}: the conservative MILP's schedule is not feasible: {up['check']}")
        best_ub = min(x for x in (up.get("avg_jct_s"), sims["best_order"]["avg_jct_s"], sims["fifo"]["avg_jct_s"])
                      if x is not None)
        out[m] = {"fifo": sims["fifo"], "best_order": sims["best_order"], "lower": lo, "upper": up,
                  "lower_avg_jct_s": lo["avg_jct_s"], "upper_avg_jct_s": best_ub}
    return out
