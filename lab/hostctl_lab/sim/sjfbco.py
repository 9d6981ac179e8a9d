"""SJF-BCO (paper 001: Yu, Ji, Rajan, Liu, MobiHoc '22): batch placement of ring-all-reduce jobs that
contend for inter-server links, minimising the makespan. Spec: shared/spec/cluster-papers.md section 2.

Pure: NumPy and the standard library, no I/O, no clock. Time is in slots (integers); a job holds its
GPUs over the half-open interval [start, end), so its JCT is `end` (every job is there at slot 0) and
the makespan is max(end). The paper's completion slot T_j is end - 1.

Contents
  * the model of Eqs. (6)-(9): `contention_p` (p_j), `k_of_p` (k_j = xi1*p_j, >= 1 for split jobs),
    a degradation factor `f(alpha, k)` behind the `Degradation` protocol (default
    `LinearDegradation`: k + alpha*(k-1), alpha = eta/b = 0.2745), `bandwidth` (B_j), `tau` (tau_j),
    `speed` (phi_j: 1/tau, or floor(1/tau) with `Model(floor_phi=True)`) and `slots_needed`;
  * `search()`: SJF-BCO (Algorithm 1) with FA-FFP (Algorithm 2, `ffp="literal"` or `"pack"`) and
    LBSGF (Algorithm 3); the baselines FF, LS (each with its own theta cap found by the same search)
    and RAND (theta = T); the theta search `bisection="literal"` (the paper's rule), `"monotone"`
    (smallest feasible theta) or `"scan"` (every theta in 1..T: the brute force of the tests);
    kappa over `"distinct"` sizes (exact speed-up) or `"full"` 1..n_g;
  * `replay()`: the finished schedule re-run slot by slot with time-varying p_j[t], so contention
    created by jobs placed later is charged to the jobs already running;
  * `run()`: the one entry point (schedule + replay -> a plain dict), and `paper_instance()`, the
    paper's evaluation workload (spec 2.3);
  * `run_online()`: hostctl's own adaptation (not in the paper): jobs arrive over time and SJF-BCO is
    re-run over the pending queue at every epoch.

Readings of garbled or missing details are marked [I] here and in docs/sim-sjfbco.md.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field, replace
from typing import Iterable, Protocol, Sequence

import numpy as np

ALPHA_R = 0.235 / 0.856  # eta/b of paper 000's reference code: 0.2745 (spec 2.1 "bridge to paper 000")
_EPS = 1e-9  # float slack on the theta cap test U + rho_hat/u <= theta
_SLOT_EPS = 1e-7  # float slack when turning work/rate into whole slots
POLICIES = ("sjf-bco", "ff", "ls", "rand")
BISECTIONS = ("literal", "monotone", "scan")
FFP_VARIANTS = ("literal", "pack")


class Infeasible(ValueError):
    """No schedule with makespan < T was found; the message says which knob to turn."""


# -- the model: Eqs. (6)-(9) ---------------------------------------------------------------------------
class Degradation(Protocol):
    """Bandwidth-sharing degradation factor f(alpha, k): f(1) = 1, increasing in k (k >= 1, real)."""

    def __call__(self, k: np.ndarray) -> np.ndarray: ...


@dataclass(frozen=True)
class LinearDegradation:
    """The paper's example f(alpha, k) = k + alpha*(k - 1); alpha = eta/b makes it paper 000's model."""

    alpha: float = ALPHA_R

    def __call__(self, k: np.ndarray) -> np.ndarray:
        k = np.asarray(k, dtype=float)
        return k + self.alpha * (k - 1.0)


@dataclass(frozen=True)
class Model:
    """Parameters of Eq. (8). Data in units of `b_e` x one slot, times in slots.

    b_e: inter-server link bandwidth (data per slot); b_i: intra-server (NVLink-class) bandwidth;
    C: GPU reduction speed (data per slot); xi1: duty-cycle factor of k_j = xi1*p_j, in (0, 1];
    xi2: communication overhead per server used (slots per iteration); f: the degradation factor;
    floor_phi: phi = floor(1/tau) as printed (True) or the un-floored 1/tau (default, [I]).
    The paper gives none of these values; the defaults are hostctl's [I] (docs/sim-sjfbco.md)."""

    b_e: float = 1.0
    b_i: float = 10.0
    C: float = 20.0
    xi1: float = 1.0
    xi2: float = 0.0005
    f: Degradation = field(default_factory=LinearDegradation)
    floor_phi: bool = False

    def __post_init__(self) -> None:
        for name in ("b_e", "b_i", "C"):
            if not getattr(self, name) > 0:
                raise ValueError(f"Model.{name} must be > 0 (got {getattr(self, name)}); it is a bandwidth/speed")
        if not 0 < self.xi1 <= 1:
            raise ValueError(f"Model.xi1 must be in (0, 1] (got {self.xi1}): the share of time a job communicates")
        if self.xi2 < 0:
            raise ValueError(f"Model.xi2 must be >= 0 (got {self.xi2}); it is an overhead in slots per server")


def contention_p(Y: np.ndarray, G: np.ndarray) -> np.ndarray:
    """Eq. (6): p_j = max over servers s where j is split (0 < y_js < G_j) of the number of active jobs
    split on s (j included). Y is (jobs x servers) GPU counts of the *active* jobs, G their sizes.
    A job on one server has p = 0."""
    Y = np.asarray(Y)
    G = np.asarray(G)
    split = (Y > 0) & (Y < G[:, None])
    per_server = split.sum(axis=0)
    return np.where(split, per_server[None, :], 0).max(axis=1, initial=0)


def k_of_p(p: np.ndarray, xi1: float) -> np.ndarray:
    """Eq. (7) k_j = xi1*p_j, clamped to >= 1 for split jobs (p >= 1) [I]; 0 for unsplit jobs."""
    p = np.asarray(p, dtype=float)
    return np.where(p > 0, np.maximum(xi1 * p, 1.0), 0.0)


def bandwidth(p: np.ndarray, n_servers: np.ndarray, model: Model) -> np.ndarray:
    """B_j: b_e / f(alpha, k_j) if j spans more than one server, else b_i."""
    k = k_of_p(p, model.xi1)
    split = np.asarray(n_servers) > 1
    return np.where(split, model.b_e / model.f(np.maximum(k, 1.0)), model.b_i)


def tau(G: np.ndarray, m: np.ndarray, compute: np.ndarray, n_servers: np.ndarray, p: np.ndarray,
        model: Model) -> np.ndarray:
    """Eq. (8), slots per iteration: ring exchange (m/w)*2(w-1)/B_j + reductions (m/w)(w-1)/C
    + overhead xi2 * #servers + compute (the FP/BP term Delta_f*M + Delta_b)."""
    w = np.asarray(G, dtype=float)
    share = np.asarray(m, dtype=float) / w
    B = bandwidth(p, n_servers, model)
    return (share * 2.0 * (w - 1.0) / B + share * (w - 1.0) / model.C
            + model.xi2 * np.asarray(n_servers, dtype=float) + np.asarray(compute, dtype=float))


def speed(t: np.ndarray, model: Model) -> np.ndarray:
    """phi_j: iterations per slot, 1/tau (default) or floor(1/tau) (Model(floor_phi=True), as printed)."""
    phi = 1.0 / np.asarray(t, dtype=float)
    if model.floor_phi:
        phi = np.floor(phi + _SLOT_EPS)
        if np.any(phi < 1):
            raise ValueError("floor(1/tau) = 0 for a job (tau >= 1 slot): use Model(floor_phi=False) or shorter slots")
    return phi


def slots_needed(work: np.ndarray, phi: np.ndarray) -> np.ndarray:
    """Eq. (9): whole slots to do `work` iterations at `phi` per slot (0 for no work)."""
    n = np.ceil(np.asarray(work, dtype=float) / np.asarray(phi, dtype=float) - _SLOT_EPS)
    return np.maximum(n, 0).astype(np.int64)


# -- inputs ------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class Job:
    """One training job. G: GPUs (= ring workers w_j); F: iterations; compute: FP + BP per iteration
    (slots); m: gradient size (units of b_e x slot); rho_hat: the estimated execution time the
    algorithm books on each GPU (slots); None: F * tau on one server without contention [I]."""

    G: int
    F: int
    compute: float
    m: float = 0.0
    rho_hat: float | None = None


@dataclass
class _Instance:
    """Validated arrays: jobs in input order, GPUs numbered server by server."""

    G: np.ndarray
    F: np.ndarray
    m: np.ndarray
    compute: np.ndarray
    rho_hat: np.ndarray
    O: np.ndarray
    server_of: np.ndarray
    model: Model

    @property
    def n_jobs(self) -> int:
        return int(self.G.size)

    @property
    def n_servers(self) -> int:
        return int(self.O.size)

    @property
    def n_gpus(self) -> int:
        return int(self.server_of.size)


def instance(jobs: Sequence[Job], servers: Sequence[int], model: Model) -> _Instance:
    """Validate jobs and servers (GPU count per server) into the arrays search() and replay() take."""
    O = np.asarray(list(servers), dtype=np.int64)
    if O.ndim != 1 or O.size == 0 or np.any(O < 1):
        raise ValueError("servers must be a non-empty list of GPU counts >= 1, e.g. [4, 8, 16]")
    if len(jobs) == 0:
        raise ValueError("no jobs: pass at least one Job(G, F, compute)")
    G = np.array([j.G for j in jobs], dtype=np.int64)
    F = np.array([j.F for j in jobs], dtype=np.int64)
    m = np.array([j.m for j in jobs], dtype=float)
    compute = np.array([j.compute for j in jobs], dtype=float)
    n = int(O.sum())
    for i, j in enumerate(jobs):
        if not 1 <= j.G <= n:
            raise ValueError(f"job {i} asks for {j.G} GPUs but the cluster has {n}: drop it or add servers")
        if j.F < 1 or j.compute < 0 or j.m < 0:
            raise ValueError(f"job {i}: F must be >= 1 and compute, m >= 0 (got F={j.F}, compute={j.compute}, m={j.m})")
        if j.rho_hat is not None and not j.rho_hat > 0:
            raise ValueError(f"job {i}: rho_hat must be > 0 slots (got {j.rho_hat}) or None for the model's estimate")
    est = F * tau(G, m, compute, np.ones_like(G), np.zeros_like(G), model)
    rho_hat = np.array([est[i] if j.rho_hat is None else j.rho_hat for i, j in enumerate(jobs)], dtype=float)
    if np.any(~np.isfinite(rho_hat)) or np.any(rho_hat <= 0):
        raise ValueError("a job has tau = 0 (compute = m = xi2 = 0): give it compute > 0 or a rho_hat")
    server_of = np.repeat(np.arange(O.size), O)
    return _Instance(G, F, m, compute, rho_hat, O, server_of, model)


# -- one (theta, kappa) trial: Algorithms 2 and 3 inside one pass of Algorithm 1 -----------------------
@dataclass
class Plan:
    """A finished schedule. Arrays are indexed by job (input order); `order` is the placement (SJF)
    order; `gpus[j]` the flat GPU ids of job j (server s owns ids sum(O[:s]) .. sum(O[:s+1])-1);
    `Y[j, s]` its GPU count on server s; `U` the booked execution time per GPU."""

    order: np.ndarray
    start: np.ndarray
    end: np.ndarray
    gpus: list[np.ndarray]
    Y: np.ndarray
    U: np.ndarray
    theta: float
    kappa: int | None

    @property
    def makespan(self) -> int:
        return int(self.end.max())

    @property
    def avg_jct(self) -> float:
        return float(self.end.mean())


def _least(keys: np.ndarray, idx: np.ndarray, k: int) -> np.ndarray:
    """The k entries of idx (ascending) with the smallest keys, ties to the lower index: O(n) with
    np.partition instead of a full sort."""
    if idx.size == k:
        return idx
    v = keys[idx]
    kth = np.partition(v, k - 1)[k - 1]
    lt = idx[v < kth]
    eq = idx[v == kth]
    return np.concatenate([lt, eq[: k - lt.size]])


def _lbsgf_servers(U: np.ndarray, inst: _Instance, need: float) -> tuple[np.ndarray, np.ndarray]:
    """Algorithm 3 line 2: servers by mean booked time sum_g U / O_s (ties: server id); the fewest
    first ones with sum O_s >= lambda_j G_j (all servers if the cluster is smaller). Returns the
    selected mask over servers and every server's rank in that order."""
    mean_u = np.bincount(inst.server_of, weights=U, minlength=inst.n_servers) / inst.O
    order = np.argsort(mean_u, kind="stable")
    cum = np.cumsum(inst.O[order])
    cut = int(np.searchsorted(cum, need - _EPS)) + 1
    sel = np.zeros(inst.n_servers, dtype=bool)
    sel[order[:cut]] = True
    rank = np.empty(inst.n_servers, dtype=np.int64)
    rank[order] = np.arange(inst.n_servers)
    return sel, rank


def _pick_pack(free: np.ndarray, G: int, busy_until: np.ndarray, start: int, inst: _Instance) -> np.ndarray:
    """FA-FFP `pack` variant [I] (spec 2.6(6)): servers ordered partially-occupied first (some GPU busy
    at `start`), then fewest free GPUs, then id. Best fit: the first server that holds all G free
    GPUs takes the job whole; otherwise first fit across the servers in that order."""
    srv = inst.server_of[free]
    n_free = np.bincount(srv, minlength=inst.n_servers)
    occupied = np.bincount(inst.server_of, weights=(busy_until > start), minlength=inst.n_servers) > 0
    cand = np.flatnonzero(n_free > 0)
    cand = cand[np.lexsort((cand, n_free[cand], ~occupied[cand]))]
    whole = cand[n_free[cand] >= G]
    if whole.size:
        return free[srv == whole[0]][:G]
    rank = np.empty(inst.n_servers, dtype=np.int64)
    rank[cand] = np.arange(cand.size)
    return free[np.lexsort((free, rank[srv]))][:G]


def _trial(inst: _Instance, order: np.ndarray, theta: float, kappa: int | None, policy: str, ffp: str,
           lam: np.ndarray, u: float, bound: float, seed: int, busy0: np.ndarray | None = None) -> Plan | None:
    """One pass of Algorithm 1's inner loop for a given (theta, kappa): every job in SJF order is placed
    by FA-FFP (G_j <= kappa) or LBSGF (G_j > kappa) (or the baseline's picker), on a simulated clock
    that only moves forward ("wait for some job to exit"). None if a job can never fit under the cap
    (U + rho_hat/u > theta on too many GPUs) or the makespan reaches `bound` (it cannot improve).
    busy0 (run_online only): GPUs held until these slots, booked in U as well."""
    model = inst.model
    U = np.zeros(inst.n_gpus) if busy0 is None else busy0.astype(float)
    busy_until = np.zeros(inst.n_gpus, dtype=np.int64) if busy0 is None else busy0.astype(np.int64)
    J = inst.n_jobs
    start = np.zeros(J, dtype=np.int64)
    end = np.zeros(J, dtype=np.int64)
    Y = np.zeros((J, inst.n_servers), dtype=np.int64)
    split = np.zeros((J, inst.n_servers), dtype=bool)
    gpus: list[np.ndarray] = [np.empty(0, dtype=np.int64)] * J
    rng = np.random.default_rng(seed) if policy == "rand" else None
    clock = 0
    for pos, j in enumerate(order):
        Gj = int(inst.G[j])
        r = inst.rho_hat[j] / u
        cap = U + r <= theta + _EPS
        big = policy == "sjf-bco" and kappa is not None and Gj > kappa
        if big:
            sel, srank = _lbsgf_servers(U, inst, lam[j] * Gj)
            cap &= sel[inst.server_of]
        elig = np.flatnonzero(cap)
        if elig.size < Gj:
            return None  # never fits: waiting for every running job changes no U (the paper's "return empty, T")
        bu = busy_until[elig]
        a = max(clock, int(np.partition(bu, Gj - 1)[Gj - 1]))  # first completion with G eligible GPUs free
        free = elig[bu <= a]
        if big:  # Algorithm 3 lines 4-8: per server least-U first, then the G least U overall
            chosen = free[np.lexsort((free, srank[inst.server_of[free]], U[free]))][:Gj]
        elif policy == "ff":
            chosen = free[:Gj]
        elif policy == "rand":  # [I] random servers, random GPUs inside each
            sperm = rng.permutation(inst.n_servers)
            chosen = free[np.lexsort((rng.random(free.size), sperm[inst.server_of[free]]))][:Gj]
        elif policy == "sjf-bco" and ffp == "pack":
            chosen = _pick_pack(free, Gj, busy_until, a, inst)
        else:  # FA-FFP as printed (Algorithm 2 line 4) and LS: the G least-U free GPUs
            chosen = _least(U, free, Gj)
        chosen = np.sort(chosen)
        y = np.bincount(inst.server_of[chosen], minlength=inst.n_servers)
        ns = int(np.count_nonzero(y))
        sp = (y > 0) & (y < Gj)
        p = 0
        if ns > 1:
            placed = order[:pos]
            active = placed[end[placed] > a]
            per_server = split[active].sum(axis=0) + sp
            p = int(per_server[sp].max())
        t = tau(inst.G[j], inst.m[j], inst.compute[j], ns, p, model)
        d = int(slots_needed(inst.F[j], speed(t, model)))
        e = a + d
        if e >= bound:
            return None
        start[j], end[j], Y[j], split[j], gpus[j] = a, e, y, sp, chosen
        U[chosen] += r
        busy_until[chosen] = e
        clock = a
    return Plan(order=order, start=start, end=end, gpus=gpus, Y=Y, U=U, theta=theta, kappa=kappa)


# -- Algorithm 1: the theta search around the kappa sweep ---------------------------------------------
@dataclass
class Search:
    """What the search did: the plan kept, every theta tried with the best makespan found at it (T if
    none), and the number of (theta, kappa) trials run."""

    plan: Plan | None
    trace: list[tuple[int, int]]
    trials: int


def _kappas(G: np.ndarray, kappa: str | int | Iterable[int]) -> list[int]:
    ng = int(G.max())
    if kappa == "full":
        return list(range(1, ng + 1))
    if kappa == "distinct":  # each kappa class {j: G_j <= kappa} once, at its smallest kappa
        return sorted({1} | {int(g) for g in G})
    ks = [int(kappa)] if isinstance(kappa, (int, np.integer)) else [int(k) for k in kappa]
    if not ks or min(ks) < 1:
        raise ValueError(f"kappa must be 'distinct', 'full', an int >= 1 or a list of them (got {kappa!r})")
    return ks


def _best_at(inst, order, theta, kappas, policy, ffp, lam, u, T, seed, busy0=None) -> tuple[Plan | None, int]:
    """Lines 8-24: the best complete schedule over kappa at this theta (strict improvement keeps the
    first kappa reaching it; the 'complete' guard is [I]). Trials that cannot beat the current best
    stop early, which changes no result."""
    best, m = None, T
    for kappa in kappas:
        plan = _trial(inst, order, theta, kappa, policy, ffp, lam, u, m, seed, busy0)
        if plan is not None and plan.makespan < m:
            best, m = plan, plan.makespan
    return best, len(kappas)


def search(inst: _Instance, policy: str, *, kappa="distinct", lam=1.0, u: float = 1.0, T: int = 1200,
           bisection: str = "literal", ffp: str = "literal", seed: int = 0,
           busy0: np.ndarray | None = None) -> Search:
    """Algorithm 1 for `policy` (the baselines use the same search with their own picker and no kappa
    loop; RAND runs once with theta = T and no horizon check). Jobs in SJF order (G, then input index)."""
    order = np.argsort(inst.G, kind="stable")
    lam_arr = np.broadcast_to(np.asarray(lam, dtype=float), (inst.n_jobs,))
    if np.any(lam_arr < 1):
        raise ValueError(f"lam (lambda_j) must be >= 1 (got min {lam_arr.min()}); it scales the servers LBSGF opens")
    kappas = _kappas(inst.G, kappa) if policy == "sjf-bco" else [None]
    if policy == "rand":
        plan = _trial(inst, order, float(T), None, policy, ffp, lam_arr, u, math.inf, seed, busy0)
        return Search(plan=plan, trace=[(T, plan.makespan if plan else T)], trials=1)
    trace: list[tuple[int, int]] = []
    trials = 0
    if bisection == "scan":
        best, m = None, T
        for theta in range(1, T + 1):
            plan, n = _best_at(inst, order, theta, kappas, policy, ffp, lam_arr, u, T, seed, busy0)
            trials += n
            trace.append((theta, plan.makespan if plan else T))
            if plan is not None and plan.makespan < m:
                best, m = plan, plan.makespan
        return Search(plan=best, trace=trace, trials=trials)
    best, m = None, T
    left, right = 1, T
    while left <= right:
        theta = (left + right) // 2  # [I] integer midpoint
        plan, n = _best_at(inst, order, theta, kappas, policy, ffp, lam_arr, u, T, seed, busy0)
        trials += n
        trace.append((theta, plan.makespan if plan else T))
        if bisection == "literal":  # move right when the makespan improved, else left (as printed)
            if plan is not None and plan.makespan < m:
                best, m = plan, plan.makespan
                right = theta - 1
            else:
                left = theta + 1
        else:  # monotone: smallest theta with a complete schedule of makespan < T
            if plan is not None:
                best = plan
                right = theta - 1
            else:
                left = theta + 1
    return Search(plan=best, trace=trace, trials=trials)


# -- replay with time-varying contention --------------------------------------------------------------
def replay(inst: _Instance, plan: Plan) -> tuple[np.ndarray, np.ndarray]:
    """Re-run a finished plan slot by slot with p_j[t] from the jobs actually running (Eq. (6)-(9)).
    Kept from the plan [I]: each job's GPUs and the start order. A job starts at the first event
    at which all its GPUs are free and every job placed before it has started. Between events the
    rates are constant; a job ends at the first slot boundary where its iterations reach F_j.
    Returns (start, end) per job. With no change in contention it reproduces the plan exactly."""
    model = inst.model
    J = inst.n_jobs
    order = plan.order
    start = np.full(J, -1, dtype=np.int64)
    end = np.full(J, -1, dtype=np.int64)
    holder = np.full(inst.n_gpus, -1, dtype=np.int64)
    ns = np.count_nonzero(plan.Y, axis=1)
    done = np.zeros(J)
    running: list[int] = []
    head, t = 0, 0
    while head < J or running:
        while head < J and np.all(holder[plan.gpus[order[head]]] < 0):
            j = int(order[head])
            holder[plan.gpus[j]] = j
            start[j] = t
            running.append(j)
            head += 1
        run = np.array(running, dtype=np.int64)
        p = contention_p(plan.Y[run], inst.G[run])
        phi = speed(tau(inst.G[run], inst.m[run], inst.compute[run], ns[run], p, model), model)
        need = slots_needed(inst.F[run] - done[run], phi)
        dt = int(need.min())
        done[run] += dt * phi
        t += dt
        fin = run[need == dt]
        for j in fin:
            end[j] = t
            holder[plan.gpus[j]] = -1
            running.remove(int(j))
    return start, end


# -- the entry point ---------------------------------------------------------------------------------
def run(jobs: Sequence[Job], servers: Sequence[int], policy: str = "sjf-bco", *, kappa="distinct",
        lam: float | Sequence[float] = 1.0, u: float = 1.0, T: int = 1200, bisection: str = "literal",
        ffp: str = "literal", model: Model | None = None, seed: int = 0, do_replay: bool = True) -> dict:
    """Schedule `jobs` on `servers` (GPU count per server) with `policy` in POLICIES and replay it.

    kappa: 'distinct' (each size class once: same result as 'full', faster), 'full' (1..n_g, as
    printed), an int or a list; lam: lambda_j >= 1 (scalar or per job); u: upper estimation factor
    (U grows by rho_hat/u); T: horizon in slots (a schedule must end before T; RAND ignores it);
    bisection: 'literal' | 'monotone' | 'scan'; ffp: 'literal' | 'pack' (FA-FFP variant); seed: RAND's.

    Returns a dict: policy, makespan and avg_jct (planned, slots), replay_makespan, replay_avg_jct,
    theta (the cap kept), kappa (the kappa of the kept schedule), trials, trace [(theta, makespan)],
    jobs: per job {G, F, rho_hat, start, end, replay_start, replay_end, servers {s: GPUs}}.
    Raises Infeasible (a ValueError) if no schedule ends before T, ValueError on bad input."""
    if policy not in POLICIES:
        raise ValueError(f"unknown policy {policy!r}: use one of {', '.join(POLICIES)}")
    if bisection not in BISECTIONS:
        raise ValueError(f"unknown bisection {bisection!r}: use one of {', '.join(BISECTIONS)}")
    if ffp not in FFP_VARIANTS:
        raise ValueError(f"unknown ffp {ffp!r}: use one of {', '.join(FFP_VARIANTS)}")
    if not u >= 1:
        raise ValueError(f"u must be >= 1 (got {u}); it is the upper estimation factor of rho_hat")
    if int(T) < 1:
        raise ValueError(f"T must be >= 1 slot (got {T})")
    inst = instance(jobs, servers, model or Model())
    res = search(inst, policy, kappa=kappa, lam=lam, u=u, T=int(T), bisection=bisection, ffp=ffp, seed=seed)
    plan = res.plan
    if plan is None:
        raise Infeasible(f"{policy}: no schedule ends before T={T} slots; raise T (the horizon) or add servers")
    rs, re = replay(inst, plan) if do_replay else (plan.start, plan.end)
    per_job = [{"G": int(inst.G[j]), "F": int(inst.F[j]), "rho_hat": float(inst.rho_hat[j]),
                "start": int(plan.start[j]), "end": int(plan.end[j]),
                "replay_start": int(rs[j]), "replay_end": int(re[j]),
                "servers": {int(s): int(plan.Y[j, s]) for s in np.flatnonzero(plan.Y[j])}}
               for j in range(inst.n_jobs)]
    return {"policy": policy, "makespan": plan.makespan, "avg_jct": plan.avg_jct,
            "replay_makespan": int(re.max()), "replay_avg_jct": float(re.mean()),
            "theta": float(plan.theta), "kappa": plan.kappa, "max_U": float(plan.U.max()),
            "trials": res.trials, "trace": res.trace, "jobs": per_job}


# -- the paper's workload (spec 2.3) --------------------------------------------------------------------
PAPER_MIX = ((1, 80), (2, 14), (4, 26), (8, 30), (16, 8), (32, 2))  # (GPUs, jobs): 160 jobs, 644 GPUs


def paper_instance(seed: int, n_servers: int = 20, *, model: Model | None = None, comm_frac: float = 0.05,
                   capacities: Sequence[int] = (4, 8, 16, 32), mix=PAPER_MIX) -> tuple[list[Job], list[int]]:
    """The evaluation of spec 2.3 [I where the paper is silent]: server sizes uniform over `capacities`;
    the job mix (shuffled); F_j uniform in 1000..6000; the contention-free single-server tau_j uniform
    in [max(0.01, 50/F), min(0.05, 300/F)] so that both tau in [0.01, 0.05] and rho_hat = F*tau in
    [50, 300] hold; the inter-server ring transfer at k = 1 is `comm_frac` of that tau; compute is
    the rest of tau after the intra-server terms and xi2."""
    model = model or Model()
    rng = np.random.default_rng(seed)
    O = [int(x) for x in rng.choice(np.asarray(capacities), size=n_servers)]
    G = np.concatenate([np.full(n, g) for g, n in mix])
    rng.shuffle(G)
    F = rng.integers(1000, 6001, size=G.size)
    lo, hi = np.maximum(0.01, 50.0 / F), np.minimum(0.05, 300.0 / F)
    t0 = lo + (hi - lo) * rng.random(G.size)
    w = G.astype(float)
    ring = np.where(w > 1, 2.0 * (w - 1.0) / w, 0.0)
    m = np.where(w > 1, comm_frac * t0 * model.b_e / np.where(ring > 0, ring, 1.0), 0.0)
    intra = np.where(w > 1, (m / w) * (w - 1.0) * (2.0 / model.b_i + 1.0 / model.C), 0.0)
    compute = t0 - intra - model.xi2
    if np.any(compute <= 0):
        raise ValueError("comm_frac/xi2 too large for tau in [0.01, 0.05]: lower them")
    jobs = [Job(G=int(g), F=int(f), compute=float(c), m=float(mm)) for g, f, c, mm in zip(G, F, compute, m)]
    return jobs, O




# -- hostctl's online adaptation (not in the paper) ---------------------------------------------------
def _rates(inst: _Instance, Y: np.ndarray, run: np.ndarray, model: Model) -> np.ndarray:
    """phi of the running jobs `run` (Y rows: their GPUs per server) under their current p_j."""
    p = contention_p(Y[run], inst.G[run])
    return speed(tau(inst.G[run], inst.m[run], inst.compute[run], np.count_nonzero(Y[run], axis=1), p, model),
                 model)


def run_online(jobs: Sequence[Job], arrivals: Sequence[float], servers: Sequence[int], *, epoch: int = 60,
               policy: str = "sjf-bco", T: int = 20000, model: Model | None = None, **kw) -> dict:
    """hostctl's adaptation, NOT the paper's algorithm. Jobs arrive at `arrivals` (slots). At every
    epoch boundary (multiples of `epoch` slots) `policy` (same options as run(): kappa, lam, u,
    bisection, ffp, seed) is re-run over the arrived, not yet started jobs, on a cluster whose held
    GPUs are busy (and booked in U) until the running jobs' expected ends at their current speeds;
    the jobs that plan starts at once are started, the others wait for the next epoch. Jobs run under
    the replay model (time-varying p_j[t]). T bounds each epoch's plan (relative slots).
    Returns policy, epoch, makespan, avg_jct (mean of end - arrival) and per-job arrival/start/end."""
    model = model or Model()
    inst = instance(jobs, servers, model)
    arr = np.asarray(arrivals, dtype=float)
    if arr.shape != (inst.n_jobs,) or np.any(~np.isfinite(arr)) or np.any(arr < 0):
        raise ValueError("arrivals must give one finite time >= 0 (slots) per job")
    if int(epoch) < 1:
        raise ValueError(f"epoch must be >= 1 slot (got {epoch})")
    J = inst.n_jobs
    start = np.full(J, -1, dtype=np.int64)
    end = np.full(J, -1, dtype=np.int64)
    gpus: list[np.ndarray] = [np.empty(0, dtype=np.int64)] * J
    Y = np.zeros((J, inst.n_servers), dtype=np.int64)
    done = np.zeros(J)
    holder = np.full(inst.n_gpus, -1, dtype=np.int64)
    running: list[int] = []
    now = 0
    while np.any(end < 0):
        pending = np.flatnonzero((start < 0) & (arr <= now))
        if pending.size:
            busy = np.zeros(inst.n_gpus, dtype=np.int64)
            if running:
                run_ = np.array(running)
                left = slots_needed(inst.F[run_] - done[run_], _rates(inst, Y, run_, model))
                for j, d in zip(run_, left):
                    busy[gpus[j]] = max(int(d), 1)
            sub = instance([jobs[i] for i in pending], servers, model)
            plan = search(sub, policy, T=T, busy0=busy, **kw).plan
            if plan is None and not running:
                raise Infeasible(f"online: {pending.size} pending jobs do not fit in T={T} slots on an idle "
                                 "cluster; raise T")
            if plan is not None:
                for i in plan.order:
                    if plan.start[i] == 0:
                        j = int(pending[i])
                        start[j], gpus[j], Y[j] = now, plan.gpus[i], plan.Y[i]
                        holder[plan.gpus[i]] = j
                        running.append(j)
        nxt = now + int(epoch)
        if not running:  # idle: jump to the epoch boundary at or after the next arrival
            later = arr[start < 0]
            now = max(nxt, int(math.ceil(later.min() / epoch)) * int(epoch)) if later.size else nxt
            continue
        while now < nxt and running:
            run_ = np.array(running)
            phi = _rates(inst, Y, run_, model)
            need = slots_needed(inst.F[run_] - done[run_], phi)
            dt = int(min(need.min(), nxt - now))
            done[run_] += dt * phi
            now += dt
            for j in run_[need == dt]:
                end[j] = now
                holder[gpus[j]] = -1
                running.remove(int(j))
        now = nxt
    jct = end - arr
    return {"policy": f"online-{policy}", "epoch": int(epoch), "makespan": int(end.max()),
            "avg_jct": float(jct.mean()),
            "jobs": [{"G": int(inst.G[j]), "arrival": float(arr[j]), "start": int(start[j]), "end": int(end[j]),
                      "servers": {int(s): int(Y[j, s]) for s in np.flatnonzero(Y[j])}} for j in range(J)]}
