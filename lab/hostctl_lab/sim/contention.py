"""Task-level network contention backends: how fast each running communication task moves its bytes.

One small interface, ``Contention``, so that a simulator can swap the contention model of paper 000
(``WangNic``), the degradation factor of paper 001 (``YuF``) or, later, a link-level fluid kernel:

    rates(task_servers, n_servers) -> np.ndarray     # bytes/s of each running task
    latency                                          # seconds each task pays once, outside the fluid

``task_servers[i]`` is the array of server ids (0..n_servers-1, no repeats) that running task i
occupies: for an all-reduce, every server holding one of its job's workers. The caller recomputes
the rates whenever a task starts or ends and carries each task's remaining bytes over (fluid form).
Both backends here are *k-based*: a task's rate depends only on k, the largest number of running
tasks on any of its servers, through ``rate_k(k)``. ``fluid_finish_times`` runs a fixed set of
tasks through any backend (tests, small what-ifs).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol, runtime_checkable

import numpy as np

from hostctl.core.adadual import A_S, B_S_PER_BYTE, ETA_S_PER_BYTE, rate


@runtime_checkable
class Contention(Protocol):
    """A contention backend. ``latency``: seconds every task pays once (not shared, counts toward k).
    ``rates``: bytes/s of each running task given the servers each occupies."""

    latency: float

    def rates(self, task_servers: Sequence[np.ndarray], n_servers: int) -> np.ndarray: ...


def server_counts(task_servers: Sequence[np.ndarray], n_servers: int) -> np.ndarray:
    """Number of running tasks on each server (int array of n_servers)."""
    if not len(task_servers):
        return np.zeros(n_servers, dtype=np.int64)
    return np.bincount(np.concatenate(task_servers), minlength=n_servers)


def max_k(task_servers: Sequence[np.ndarray], n_servers: int) -> np.ndarray:
    """k of each running task: the largest number of running tasks on any of its servers (>= 1)."""
    if not len(task_servers):
        return np.zeros(0, dtype=np.int64)
    lens = np.fromiter((len(s) for s in task_servers), dtype=np.int64, count=len(task_servers))
    if np.any(lens == 0):
        raise ValueError("a communication task occupies no server: give each task at least one server id")
    flat = np.concatenate(task_servers)
    if flat.min() < 0 or flat.max() >= n_servers:
        raise ValueError(f"server ids must lie in 0..{n_servers - 1}, got {flat.min()}..{flat.max()}")
    counts = np.bincount(flat, minlength=n_servers)
    starts = np.concatenate(([0], np.cumsum(lens)[:-1]))
    return np.maximum.reduceat(counts[flat], starts)


class KBased:
    """Shared part of the backends whose rate is a function of k only."""

    latency: float = 0.0

    def rate_k(self, k: np.ndarray) -> np.ndarray:  # pragma: no cover - overridden
        raise NotImplementedError

    def rates(self, task_servers: Sequence[np.ndarray], n_servers: int) -> np.ndarray:
        """Bytes/s of each running task: ``rate_k`` of its k (see ``max_k``)."""
        if not len(task_servers):
            return np.zeros(0)
        return np.asarray(self.rate_k(max_k(task_servers, n_servers)), dtype=float)


@dataclass(frozen=True)
class WangNic(KBased):
    """Paper 000, Eq. (5) in fluid form: each server's NIC is the shared resource; a task moves
    ``1 / (k*b + (k-1)*eta)`` bytes/s, k the largest task count over its servers, and pays the
    latency ``a`` once. Defaults: a = 6.69e-4 s, b = 8.53e-10 s/B [paper], eta = 2.35e-10 s/B
    [reference code]. A task held at constant k takes ``comm_time(M, k, a, b, eta)`` seconds."""

    a: float = A_S
    b: float = B_S_PER_BYTE
    eta: float = ETA_S_PER_BYTE

    def __post_init__(self) -> None:
        if self.a < 0 or self.b <= 0 or self.eta < 0:
            raise ValueError(f"WangNic needs a >= 0, b > 0, eta >= 0, got a={self.a}, b={self.b}, eta={self.eta}")

    @property
    def latency(self) -> float:  # type: ignore[override]
        return self.a

    def rate_k(self, k: np.ndarray) -> np.ndarray:
        return rate(k, self.b, self.eta)


@dataclass(frozen=True)
class YuF(KBased):
    """Paper 001's bandwidth sharing degradation: a task gets ``bw / f(alpha, k)`` bytes/s with
    ``f = k + alpha*(k-1)``; k is ``xi1`` times the largest task count over the task's servers,
    clamped to >= 1 (paper 001 counts *split jobs* on a server and scales by xi1 for their duty
    cycle; pass the tasks you want counted). With ``bw = 1/b`` and ``alpha = eta/b`` it equals
    WangNic with a = 0. Defaults: bw = 1/8.53e-10 B/s, alpha = 2.35/8.53 = 0.2755, xi1 = 1."""

    alpha: float = ETA_S_PER_BYTE / B_S_PER_BYTE
    bw_Bps: float = 1.0 / B_S_PER_BYTE
    xi1: float = 1.0
    latency: float = 0.0

    def __post_init__(self) -> None:
        if self.alpha < 0 or self.bw_Bps <= 0 or not 0 < self.xi1 <= 1 or self.latency < 0:
            raise ValueError(f"YuF needs alpha >= 0, bw_Bps > 0, 0 < xi1 <= 1, latency >= 0; got "
                             f"alpha={self.alpha}, bw_Bps={self.bw_Bps}, xi1={self.xi1}, latency={self.latency}")

    def f(self, k: np.ndarray) -> np.ndarray:
        """The degradation factor f(alpha, k) = k + alpha*(k-1) (1 at k = 1)."""
        k = np.asarray(k, dtype=float)
        return k + self.alpha * (k - 1.0)

    def rate_k(self, k: np.ndarray) -> np.ndarray:
        kk = np.maximum(1.0, self.xi1 * np.asarray(k, dtype=float))
        return self.bw_Bps / self.f(kk)


CONTENTIONS = {"wang": WangNic, "yu": YuF}


def fluid_finish_times(sizes: np.ndarray, starts: np.ndarray, task_servers: Sequence[np.ndarray],
                       n_servers: int, model: Contention) -> np.ndarray:
    """Finish time of each of a fixed set of communication tasks: task i has ``sizes[i]`` bytes,
    starts at ``starts[i]`` seconds on the servers ``task_servers[i]``; rates from ``model`` are
    recomputed at every start and finish (remaining bytes carry over); each task first pays
    ``model.latency`` (counting toward k), then moves its bytes."""
    sizes = np.asarray(sizes, dtype=float)
    starts = np.asarray(starts, dtype=float)
    n = len(sizes)
    if len(starts) != n or len(task_servers) != n:
        raise ValueError(f"sizes, starts and task_servers must have one entry per task ({n}, {len(starts)}, "
                         f"{len(task_servers)})")
    rem = sizes.copy()
    lat = np.full(n, float(model.latency))
    fin = np.full(n, np.nan)
    started = np.zeros(n, dtype=bool)
    t = float(starts.min()) if n else 0.0
    while np.isnan(fin).any():
        started |= starts <= t
        active = np.flatnonzero(started & np.isnan(fin))
        pending = starts[~started]
        t_start = float(pending.min()) if len(pending) else np.inf
        if not len(active):
            t = t_start
            continue
        r = model.rates([np.asarray(task_servers[i]) for i in active], n_servers)
        ttd = lat[active] + rem[active] / r
        dt = min(float(ttd.min()), t_start - t)
        use = np.minimum(dt, lat[active])
        lat[active] -= use
        rem[active] -= (dt - use) * r
        t += dt
        done = active[ttd <= dt * (1 + 1e-12) + 1e-300]
        fin[done] = t
        rem[done] = 0.0
    return fin
