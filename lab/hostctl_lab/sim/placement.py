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
