"""GPU-level job placement on multi-GPU servers: first-fit, list scheduling, random and paper 000's
LWF-kappa (Algorithm 1, with the spec's [I] fixes), for any cluster simulator.

State: ``GpuCluster``, one row per GPU (ids are server-major: GPU g sits on server
``g // gpus_per_server``): its server, its queued work ``load`` (L_g, seconds of GPU time still to
run on it) and its free memory (MB). Several jobs may share a GPU if memory allows.

A placement is a function ``(state, n_gpus, mem, work, rng) -> np.ndarray | None``: it picks
``n_gpus`` distinct GPUs that each have at least ``mem`` MB free, *commits* the choice (each chosen
GPU: ``free_mem -= mem``, ``load += work``; ``work`` is the job's per-GPU work, e.g. its compute
time C_J) and returns the GPU ids in worker order (worker i runs on the i-th id). It returns None,
changing nothing, if there are not enough such GPUs. ``rng`` (a numpy Generator) is used by
``rand`` only. ``get_placement(name)`` resolves names: ``ff``, ``ls``, ``rand``, ``lwf<k>`` and
``lwf<k>-strict`` (``PLACEMENTS`` holds the common ones).

Ties: least-loaded choices break ties by GPU id (so by server, then GPU index), server orders by
server id: runs are reproducible and the first servers fill first when all are idle.

The cluster engine (hostctl_lab.sim.cluster) places through this module too: ``place_free`` runs the
same ``ff``, ``rand`` and ``lwf<k>`` on an exclusive view of its servers (a GPU holds one job), plus
the exclusive-only ``pack`` and ``ls`` and the batch rule ``sjfbco_batch`` (paper 001); see the
section "The exclusive-GPU model" below.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

Placement = Callable[["GpuCluster", int, float, float, np.random.Generator], "np.ndarray | None"]


@dataclass
class GpuCluster:
    """Per-GPU placement state of ``n_servers`` servers of ``gpus_per_server`` GPUs each."""

    n_servers: int
    gpus_per_server: int
    server: np.ndarray  # server id of each GPU (int)
    load: np.ndarray  # L_g: queued work, GPU-seconds (float)
    free_mem: np.ndarray  # free memory, MB (float)
    mem_total: float

    @classmethod
    def empty(cls, n_servers: int, gpus_per_server: int, mem_mb: float = 16384.0) -> GpuCluster:
        """An idle cluster: no load, all memory free."""
        if n_servers < 1 or gpus_per_server < 1 or mem_mb <= 0:
            raise ValueError(f"need n_servers >= 1, gpus_per_server >= 1, mem_mb > 0; got {n_servers}, "
                             f"{gpus_per_server}, {mem_mb}")
        n = n_servers * gpus_per_server
        return cls(n_servers, gpus_per_server, np.arange(n) // gpus_per_server, np.zeros(n),
                   np.full(n, float(mem_mb)), float(mem_mb))

    @property
    def n_gpus(self) -> int:
        return len(self.server)

    def copy(self) -> GpuCluster:
        """An independent copy (to try a placement without committing it)."""
        return GpuCluster(self.n_servers, self.gpus_per_server, self.server.copy(), self.load.copy(),
                          self.free_mem.copy(), self.mem_total)

    def server_load(self) -> np.ndarray:
        """L_S: the sum of L_g over each server's GPUs."""
        return np.bincount(self.server, weights=self.load, minlength=self.n_servers)

    def commit(self, gpus: np.ndarray, mem: float, work: float) -> None:
        """Book ``mem`` MB and ``work`` GPU-seconds on each of ``gpus``."""
        self.free_mem[gpus] -= mem
        self.load[gpus] += work

    def release(self, gpus: np.ndarray, mem: float) -> None:
        """Free ``mem`` MB on each of ``gpus`` (a job ended); its load must already be worked off."""
        self.free_mem[gpus] += mem


def _check(state: GpuCluster, n: int, mem: float) -> None:
    if n < 1:
        raise ValueError(f"a job needs at least one GPU, got {n}")
    if mem < 0:
        raise ValueError(f"GPU memory per worker must be >= 0 MB, got {mem}")


def _least_loaded(state: GpuCluster, cand: np.ndarray, n: int) -> np.ndarray:
    """The n candidates with the least load (ties by GPU id), least loaded first; argpartition for
    the top-n, then only the n chosen (and the ties at the cut) are sorted."""
    load = state.load[cand]
    if n < len(cand):
        cut = load[np.argpartition(load, n - 1)[n - 1]]  # the n-th smallest load
        below = cand[load < cut]
        at = cand[load == cut]  # cand is in id order, so the ties stay in id order
        cand = np.concatenate((below, at[: n - len(below)]))
        load = state.load[cand]
    return cand[np.lexsort((cand, load))][:n]


def ff(state: GpuCluster, n_gpus: int, mem: float, work: float, rng: np.random.Generator | None = None):
    """First-fit: the first ``n_gpus`` GPUs (by id) with ``mem`` MB free."""
    _check(state, n_gpus, mem)
    cand = np.flatnonzero(state.free_mem >= mem)
    if len(cand) < n_gpus:
        return None
    chosen = cand[:n_gpus]
    state.commit(chosen, mem, work)
    return chosen


def ls(state: GpuCluster, n_gpus: int, mem: float, work: float, rng: np.random.Generator | None = None):
    """List scheduling: the ``n_gpus`` least-loaded GPUs with ``mem`` MB free (LWF-kappa, kappa >= n)."""
    _check(state, n_gpus, mem)
    cand = np.flatnonzero(state.free_mem >= mem)
    if len(cand) < n_gpus:
        return None
    chosen = _least_loaded(state, cand, n_gpus)
    state.commit(chosen, mem, work)
    return chosen


def rand(state: GpuCluster, n_gpus: int, mem: float, work: float, rng: np.random.Generator | None = None):
    """Random: ``n_gpus`` GPUs drawn uniformly without replacement among those with ``mem`` MB free."""
    _check(state, n_gpus, mem)
    if rng is None:
        raise ValueError("placement rand needs a numpy Generator: pass rng=np.random.default_rng(seed)")
    cand = np.flatnonzero(state.free_mem >= mem)
    if len(cand) < n_gpus:
        return None
    chosen = rng.choice(cand, size=n_gpus, replace=False)
    state.commit(chosen, mem, work)
    return chosen


def lwf(kappa: int, strict: bool = False) -> Placement:
    """LWF-kappa (paper 000, Algorithm 1). A job of n <= kappa GPUs gets the n least-loaded GPUs
    with enough memory (as ``ls``). A larger job is consolidated: servers sorted by their load L_S
    (ties by id), and within each server its GPUs with enough memory by L_g; the job takes the first
    n of that list, so it fills the least-loaded servers first and spills over to the next server
    when one lacks room ([I]: the printed line 13 loops over all servers). ``strict`` only looks at
    the ceil(n / gpus_per_server) least-loaded servers (the printed, unused S_chosen of line 11) and
    returns None if they lack room. Per-GPU ``work`` is added to each chosen GPU ([I]: the printed
    lines 6 and 18 add the job's total)."""
    if int(kappa) != kappa or kappa < 1:
        raise ValueError(f"LWF kappa must be an integer >= 1, got {kappa!r}")
    kappa = int(kappa)

    def place(state: GpuCluster, n_gpus: int, mem: float, work: float, rng: np.random.Generator | None = None):
        _check(state, n_gpus, mem)
        ok = state.free_mem >= mem
        if n_gpus <= kappa:
            cand = np.flatnonzero(ok)
            if len(cand) < n_gpus:
                return None
            chosen = _least_loaded(state, cand, n_gpus)
        else:
            order = np.argsort(state.server_load(), kind="stable")  # least loaded server first, ties by id
            if strict:
                order = order[: math.ceil(n_gpus / state.gpus_per_server)]
            rank = np.full(state.n_servers, state.n_servers)  # servers left out (strict) rank last
            rank[order] = np.arange(len(order))
            cand = np.flatnonzero(ok & (rank[state.server] < len(order)))
            if len(cand) < n_gpus:
                return None
            chosen = cand[np.lexsort((cand, state.load[cand], rank[state.server[cand]]))][:n_gpus]
        state.commit(chosen, mem, work)
        return chosen

    place.__name__ = f"lwf{kappa}" + ("-strict" if strict else "")
    place.__doc__ = f"LWF-{kappa}{' (strict)' if strict else ''}: see hostctl_lab.sim.placement.lwf."
    return place


PLACEMENTS: dict[str, Placement] = {"ff": ff, "ls": ls, "rand": rand,
                                    **{f"lwf{k}": lwf(k) for k in (1, 2, 4, 8, 16, 32)}}
_LWF = re.compile(r"lwf(\d+)(-strict)?")


def get_placement(name: str) -> Placement:
    """A placement by name: ``ff``, ``ls``, ``rand``, ``lwf<k>`` (e.g. ``lwf1``) or ``lwf<k>-strict``."""
    if name in PLACEMENTS:
        return PLACEMENTS[name]
    m = _LWF.fullmatch(name)
    if m and int(m.group(1)) >= 1:
        return lwf(int(m.group(1)), strict=bool(m.group(2)))
    raise ValueError(f"unknown placement {name!r}: use ff, ls, rand, lwf<k> or lwf<k>-strict (k >= 1, e.g. lwf1)")


# ---------------------------------------------------------------------------------------------------
# The exclusive-GPU model: the cluster engine (hostctl_lab.sim.cluster): a GPU holds at most one job,
# so the state is each server's free GPU count, and a placement is [(server, GPUs), ...].
#
# The same rules as above run on an exclusive view of that state (``exclusive_view``: a GpuCluster in
# which every job books a whole GPU's memory): ``ff``, ``rand`` and ``lwf<k>`` are the functions above,
# unchanged. ``pack`` and ``ls`` exist only in this model: with exclusive GPUs every free GPU carries no
# queued work (L_g = 0), so paper 000's GPU-level LS (``ls`` above) picks the first free GPUs by id and
# is exactly ``ff`` (tests/unit/test_sim_sched.py checks it); the engine's ``ls`` is list scheduling
# one level up: each GPU in turn on the server with the most free GPUs (it spreads, which is the
# behaviour paper 000 attributes to LS). ``sjfbco`` is a batch rule (``sjfbco_batch``), not a
# per-job one.
# ---------------------------------------------------------------------------------------------------
EXCLUSIVE = ("ff", "pack", "ls", "rand")  # plus lwf<k> and sjfbco (parametric or batch)


def exclusive_name(name: str) -> str | None:
    """None if ``name`` is a placement of the engine (``EXCLUSIVE``, ``lwf<k>``, ``sjfbco``), else the
    one-line error."""
    if name in EXCLUSIVE or name == "sjfbco":
        return None
    m = re.fullmatch(r"lwf(\d+)", name)
    if m and int(m.group(1)) >= 1:
        return None
    return f"unknown placement {name!r}: choose {', '.join(EXCLUSIVE)}, lwf<k> (k >= 1, e.g. lwf1) or sjfbco"


def exclusive_view(free: np.ndarray, gpus_per_server: int, server_load: np.ndarray | None = None) -> GpuCluster:
    """A GpuCluster for the exclusive model: memory 1 per GPU, every job books 1 (so a GPU holds one
    job). Server s has ``free[s]`` free GPUs (its last ones; which GPUs of a server are free changes
    no rule's per-server counts) and its busy GPUs share ``server_load[s]`` (L_S) equally; free GPUs
    have L_g = 0."""
    free = np.asarray(free, dtype=np.int64)
    st = GpuCluster.empty(len(free), gpus_per_server, mem_mb=1.0)
    busy = gpus_per_server - free
    idx = np.arange(st.n_gpus) % gpus_per_server
    taken = idx < busy[st.server]
    st.free_mem[taken] = 0.0
    if server_load is not None:
        per = np.where(busy > 0, np.asarray(server_load, dtype=float) / np.maximum(busy, 1), 0.0)
        st.load[taken] = per[st.server[taken]]
    return st


def _counts(state: GpuCluster, chosen: np.ndarray) -> list[tuple[int, int]]:
    s, c = np.unique(state.server[chosen], return_counts=True)
    return [(int(a), int(b)) for a, b in zip(s, c)]


def place_free(name: str, free: np.ndarray, n: int, rng: np.random.Generator,
               gpus_per_server: int | None = None, server_load: np.ndarray | None = None
               ) -> list[tuple[int, int]] | None:
    """(server, GPUs) for a job of ``n`` exclusive GPUs on servers with ``free`` GPUs each, or None if
    it does not fit. ``ff``: servers in index order; ``pack``: the fewest servers (one that fits alone,
    the fullest such; else the emptiest first); ``ls``: one GPU at a time on the server with the most
    free GPUs (spreads); ``rand``: random free GPUs; ``lwf<k>``: LWF-k on the servers' loads
    ``server_load`` (L_S, GPU-seconds; None: all 0). ``gpus_per_server`` defaults to max(free)."""
    free = np.asarray(free)
    if free.sum() < n:
        return None
    if name == "pack":
        fits = np.flatnonzero(free >= n)
        if len(fits):
            s = fits[np.argmin(free[fits])]
            return [(int(s), n)]
        out, need = [], n
        for s in np.argsort(-free, kind="stable"):
            if free[s] == 0 or need == 0:
                break
            k = min(int(free[s]), need)
            out.append((int(s), k))
            need -= k
        return out if need == 0 else None
    if name == "ls":
        f = free.astype(np.int64).copy()
        got: dict[int, int] = {}
        for _ in range(n):
            s = int(np.argmax(f))
            f[s] -= 1
            got[s] = got.get(s, 0) + 1
        return sorted(got.items())
    if name in ("ff", "rand") or name.startswith("lwf"):
        err = exclusive_name(name)
        if err:
            raise ValueError(err)
        gps = int(gpus_per_server or max(1, int(free.max())))
        st = exclusive_view(free, gps, server_load)
        chosen = get_placement(name)(st, n, 1.0, 0.0, rng)
        return None if chosen is None else _counts(st, chosen)
    raise ValueError(exclusive_name(name) or f"placement {name!r} is a batch rule: use sjfbco_batch")


def sjfbco_batch(G, F, compute, size_s, rho_hat, free: np.ndarray, gpus_per_server: int,
                 busy_until: np.ndarray, *, alpha: float | None = None, kappa="distinct", lam: float = 1.0,
                 u: float = 1.0, ffp: str = "literal", bisection: str = "literal") -> list[tuple[int, list[tuple[int, int]]]]:
    """SJF-BCO (paper 001, Algorithm 1, ``hostctl_lab.sim.sjfbco.search``) over the waiting jobs as a
    batch, on the exclusive model at this instant; returns the jobs its plan starts now, as
    (index into the inputs, [(server, GPUs)]). The others wait for the next call.

    Inputs per waiting job: GPUs ``G``, iterations ``F``, compute per iteration ``compute`` (s),
    ``size_s`` (its model update over one NIC alone, s: the data unit of paper 001's Eq. (8) is one
    NIC-second) and ``rho_hat`` (its estimated run time, s; slots are seconds). A busy GPU (server
    s's first ``gpus_per_server - free[s]``) stays held until ``busy_until`` (per GPU, server-major,
    seconds from now, >= 1) and that time is booked in U, as ``sjfbco.run_online`` does. Eq. (8) with
    NVLink free (b_i and C huge), xi2 = 0 and f = k + alpha(k-1) (alpha default eta/b of paper 000).
    The horizon T is a serial schedule of everything, doubled until the search finds a plan."""
    from hostctl_lab.sim import sjfbco

    n_srv = len(free)
    model = sjfbco.Model(b_e=1.0, b_i=1e12, C=1e12, xi1=1.0, xi2=0.0,
                         f=sjfbco.LinearDegradation(sjfbco.ALPHA_R if alpha is None else alpha))
    jobs = [sjfbco.Job(G=int(g), F=int(f), compute=float(c), m=float(m), rho_hat=float(max(r, 1e-9)))
            for g, f, c, m, r in zip(G, F, compute, size_s, rho_hat)]
    if not jobs:
        return []
    inst = sjfbco.instance(jobs, [gpus_per_server] * n_srv, model)
    busy = np.ceil(np.asarray(busy_until, dtype=float)).astype(np.int64)
    # the longest a job can take in the model: every other job's GPUs split, k = jobs + 1
    worst = inst.F * sjfbco.tau(inst.G, inst.m, inst.compute, np.minimum(inst.G, n_srv),
                                np.full(inst.n_jobs, inst.n_jobs + 1), model)
    T = int(busy.max(initial=0) + np.ceil(worst).sum() + 2)
    for _ in range(6):
        plan = sjfbco.search(inst, "sjf-bco", kappa=kappa, lam=lam, u=u, T=T, bisection=bisection, ffp=ffp,
                             busy0=busy).plan
        if plan is not None:
            break
        T *= 4
    else:
        raise ValueError("sjfbco: no plan for the waiting jobs (horizon too short); this is a bug")
    out = []
    for k in plan.order:
        if plan.start[k] == 0:
            out.append((int(k), [(int(s), int(plan.Y[k, s])) for s in np.flatnonzero(plan.Y[k])]))
    return out
