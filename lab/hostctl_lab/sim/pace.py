"""PACE (paper 003: preemptive all-reduce scheduling) as the per-job iteration-time model of the
cluster simulator. Pure: NumPy and the standard library; no clocks, sockets or I/O.

What a cluster simulator calls (docs/sim-pace.md has the details)::

    from hostctl_lab.sim.pace import iter_table, t_iter
    tab = iter_table("resnet50", workers=8, strategy="pace")   # built once, cached
    tab.iter_s(share_Bps)            # a job's iteration time (s) at its bandwidth share (bytes/s)
    tab.duty_cycle(share_Bps)        # fraction of the iteration its all-reduce channel is busy
    t_iter("vgg16", 1.25e9, 12, "wfbp_fifo")   # one exact evaluation (IterTime), no table

The model (shared/spec/cluster-papers.md §3): one data-parallel job of W synchronised workers
running ring all-reduce (AR). One iteration is a DAG (``IterDag``): the backward pass produces
gradient tensors, each tensor is all-reduced, and the next forward pass consumes them. Compute is
ideal (constraint (5): an op starts when its inputs are ready). At most one AR runs at a time.
An AR of S bytes takes ``g(S) = c0 + S*2(W-1)/(W*B) [+ S*(W-1)/(W*G)]`` (``ArCost``).

Strategies (the iteration time is the DAG's makespan, start of backward to end of next forward):

- ``wfbp_fifo``: no fusion; ARs run non-preemptively in ready order (wait-free backprop, FIFO).
- ``horovod_fusion``: Horovod 0.16-0.20's defaults as we model them: every ``cycle_s`` (5 ms) the
  tensors that became ready are packed in ready order into buffers of at most
  ``threshold_bytes`` (64 MiB; a larger tensor goes alone) and queued; the AR channel runs the
  buffers FIFO, non-preemptively (NCCL ops are asynchronous, so the cycle does not wait for the
  previous buffers). Our reading; the paper gives no Horovod parameters.
- ``pace``: Algorithm 1: for R = 1..N the MaxMinSize grouping of the ready-ordered chain into R
  contiguous fused ARs, each scheduled by preemptive largest-tail-first (Jackson's preemptive
  EDD, optimal for the single-machine problem the paper's ILP reduces to); the best R wins.
  Preemption is free in the model (as in the paper): a preempted tensor becomes several
  partitions, each of which would pay c0 again in a real runtime (``Schedule.n_partitions``);
  ``partition_c0=True`` charges that c0 and lets Algorithm 1 choose R under it.
"""

from __future__ import annotations

import bisect
import heapq
import math
from dataclasses import dataclass, field
from functools import cached_property, lru_cache

import numpy as np

from hostctl_lab.sim.pace_profiles import BYTES_PER_PARAM, MODELS, ModelProfile, canonical_name, profile

__all__ = [
    "C0_S", "GBIT_Bps", "GRID_GBPS", "HOROVOD_CYCLE_S", "HOROVOD_THRESHOLD_BYTES", "MODELS", "STRATEGIES",
    "ArCost", "FusionPlan", "IterDag", "IterTable", "IterTime", "MaxMinTable", "Partition", "Schedule",
    "balanced_fusion", "fifo_order", "fifo_schedule", "fuse", "horovod_schedule", "iter_table",
    "layered_dag", "max_min_size", "model_dag", "pace_schedule", "preemptive_edd", "schedule", "t_iter",
]

C0_S = 6.69e-4  # per-AR latency (s): paper 000's a (2 nodes, 10GbE, ring, OpenMPI)
GBIT_Bps = 1e9 / 8  # 1 Gbit/s in bytes/s
GRID_GBPS = (1, 1.5, 2, 3, 5, 7, 10, 15, 25, 35, 50, 70, 100, 150, 200, 400)  # IterTable grid (Gbit/s), plus B = inf
HOROVOD_THRESHOLD_BYTES = 64 * 2**20  # Horovod's default fusion buffer before v0.21 (our assumption)
HOROVOD_CYCLE_S = 5e-3  # Horovod's default cycle time before v0.21 (our assumption)
STRATEGIES = ("wfbp_fifo", "horovod_fusion", "pace")
_EPS_S = 1e-12  # remaining work below this counts as done (float round-off in event times)


# --------------------------------------------------------------------------- the DAG

def _ints(x, what: str) -> np.ndarray:
    a = np.asarray(x)
    if a.ndim != 1 or (a.size and not np.issubdtype(a.dtype, np.integer)):
        raise ValueError(f"IterDag: {what} must be a 1-D array of op indices, got {a.dtype} shape {a.shape}")
    return a.astype(np.int64)


def _nonneg(x, what: str) -> np.ndarray:
    a = np.asarray(x, dtype=float)
    if a.ndim != 1 or not np.all(np.isfinite(a)) or np.any(a < 0):
        raise ValueError(f"IterDag: {what} must be a 1-D array of finite values >= 0")
    return a


@dataclass(frozen=True, eq=False)  # arrays inside: compare by identity
class IterDag:
    """One training iteration's DAG (paper 003 §III): M compute ops and N all-reduce ops.

    - ``compute_s[j]``: f_j, the duration of compute op j (seconds, or slots: any unit, used
      consistently with ``ArCost``).
    - ``preds[j]``: P_j, the compute ops j waits for. Ops are listed in topological order (every
      predecessor has a smaller index).
    - ``producer[i]``: u_i, the op whose completion makes AR i's tensor ready.
    - ``consumers[i]``: the ops that wait for AR i (an op may wait for several ARs).
    - ``size_bytes[i]``: S_i.

    Lemma 1 of the paper is enforced: no producer may depend, directly or not, on an AR. Derived
    (compute only, no AR): ``ready_s`` (z_{u_i}), ``tail_s`` (|L_i|: longest compute path from a
    consumer of i to the end, the consumer included) and ``compute_cp_s`` (the compute-only
    critical path).
    """

    compute_s: np.ndarray
    preds: tuple[tuple[int, ...], ...]
    producer: np.ndarray
    consumers: tuple[tuple[int, ...], ...]
    size_bytes: np.ndarray
    ready_s: np.ndarray = field(init=False, repr=False, compare=False)
    tail_s: np.ndarray = field(init=False, repr=False, compare=False)
    compute_cp_s: float = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        f = _nonneg(self.compute_s, "compute_s")
        m = f.size
        preds = tuple(tuple(int(k) for k in p) for p in self.preds)
        if len(preds) != m:
            raise ValueError(f"IterDag: preds has {len(preds)} entries for {m} compute ops; give one tuple per op")
        u = _ints(self.producer, "producer")
        s = _nonneg(self.size_bytes, "size_bytes")
        cons = tuple(tuple(int(k) for k in c) for c in self.consumers)
        n = u.size
        if s.size != n or len(cons) != n:
            raise ValueError(f"IterDag: producer ({n}), size_bytes ({s.size}) and consumers ({len(cons)}) "
                             "need one entry per AR")
        for j, p in enumerate(preds):
            bad = [k for k in p if not 0 <= k < j]
            if bad:
                raise ValueError(f"IterDag: preds[{j}] names op {bad[0]}, which is not an earlier op; "
                                 "list ops in topological order (every predecessor before its successor)")
        if n and (u.min() < 0 or u.max() >= m):
            raise ValueError(f"IterDag: producer names an op outside 0..{m - 1}")
        for i, c in enumerate(cons):
            if any(not 0 <= k < m for k in c):
                raise ValueError(f"IterDag: consumers[{i}] names an op outside 0..{m - 1}")
        ar_in: list[list[int]] = [[] for _ in range(m)]
        for i, c in enumerate(cons):
            for k in c:
                ar_in[k].append(i)
        # Lemma 1: which ops depend on some AR?
        after_ar = np.zeros(m, dtype=bool)
        for j in range(m):
            after_ar[j] = bool(ar_in[j]) or any(after_ar[k] for k in preds[j])
        for i in range(n):
            if after_ar[u[i]]:
                raise ValueError(f"IterDag: the producer of AR {i} (op {u[i]}) depends on an all-reduce; "
                                 "PACE's model (Lemma 1) needs every producer to depend on compute only")
        z = np.zeros(m)
        for j in range(m):
            z[j] = f[j] + max((z[k] for k in preds[j]), default=0.0)
        succ: list[list[int]] = [[] for _ in range(m)]
        for j, p in enumerate(preds):
            for k in p:
                succ[k].append(j)
        tail = np.zeros(m)  # longest path from j to the end, f_j included
        for j in range(m - 1, -1, -1):
            tail[j] = f[j] + max((tail[k] for k in succ[j]), default=0.0)
        q = np.array([max((tail[k] for k in c), default=0.0) for c in cons])
        for name, val in (("compute_s", f), ("preds", preds), ("producer", u), ("consumers", cons),
                          ("size_bytes", s), ("ready_s", z[u] if n else np.zeros(0)), ("tail_s", q),
                          ("compute_cp_s", float(z.max()) if m else 0.0)):
            object.__setattr__(self, name, val)

    @property
    def n_ops(self) -> int:
        return int(self.compute_s.size)

    @property
    def n_ars(self) -> int:
        return int(self.size_bytes.size)

    @cached_property
    def chain(self) -> np.ndarray:
        """AR indices in ready order (z_{u_i}, then index): the chain that fusion groups."""
        return np.lexsort((np.arange(self.n_ars), self.ready_s))

    @cached_property
    def fusion_table(self) -> MaxMinTable:
        """The MaxMinSize table over ``chain`` (built once, reused for every bandwidth)."""
        return MaxMinTable(self.size_bytes[self.chain])

    @cached_property
    def fusion_candidates(self) -> list[tuple[np.ndarray, np.ndarray, np.ndarray]]:
        """For R = 1..N (index R-1): the fused ARs' (ready, tail, bytes) of MaxMinSize's R groups.
        Independent of the bandwidth, so built once per DAG."""
        out = []
        r_c, q_c, s_c = self.ready_s[self.chain], self.tail_s[self.chain], self.size_bytes[self.chain]
        for r in range(1, self.n_ars + 1):
            starts = self.fusion_table.bounds(r)
            ends = np.append(starts[1:], self.n_ars) - 1
            out.append((r_c[ends], np.maximum.reduceat(q_c, starts), np.add.reduceat(s_c, starts)))
        return out

    def with_compute(self, compute_s: np.ndarray) -> IterDag:
        return IterDag(np.asarray(compute_s, dtype=float), self.preds, self.producer, self.consumers, self.size_bytes)


def layered_dag(fwd_s, bwd_s, tensor_bytes) -> IterDag:
    """The layered template: backward chain (last layer first) -> one AR per tensor -> next forward
    chain (first layer first). ``tensor_bytes[l]`` lists layer l's gradient tensors (bytes).
    Layer l's backward op produces them; its next forward op consumes them. The first forward op
    also waits for the last backward op (the GPU finishes the backward pass first)."""
    fwd_s, bwd_s = np.asarray(fwd_s, dtype=float), np.asarray(bwd_s, dtype=float)
    n_layers = fwd_s.size
    if bwd_s.size != n_layers or len(tensor_bytes) != n_layers:
        raise ValueError(f"layered_dag: fwd_s ({fwd_s.size}), bwd_s ({bwd_s.size}) and tensor_bytes "
                         f"({len(tensor_bytes)}) need one entry per layer")
    # ops 0..L-1: backward of layers L-1..0; ops L..2L-1: forward of layers 0..L-1
    compute = np.concatenate([bwd_s[::-1], fwd_s])
    preds = [() if j == 0 else (j - 1,) for j in range(2 * n_layers)]
    producer, consumers, sizes = [], [], []
    for layer, tensors in enumerate(tensor_bytes):
        for s in tensors:
            producer.append(n_layers - 1 - layer)
            consumers.append((n_layers + layer,))
            sizes.append(float(s))
    return IterDag(compute, tuple(preds), np.array(producer, dtype=np.int64), tuple(consumers), np.array(sizes))


def model_dag(model: str | ModelProfile, compute_scale: float = 1.0) -> IterDag:
    """The layered DAG of a model profile (hostctl_lab.sim.pace_profiles)."""
    prof = model if isinstance(model, ModelProfile) else profile(canonical_name(model), float(compute_scale))
    if isinstance(model, ModelProfile) and compute_scale != 1.0:
        prof = prof.scaled(compute_scale)
    return _dag_of(prof)


@lru_cache(maxsize=64)
def _dag_of(prof: ModelProfile) -> IterDag:
    return layered_dag(prof.fwd_s, prof.bwd_s, [[t * BYTES_PER_PARAM for t in ly.tensors] for ly in prof.layers])


# --------------------------------------------------------------------------- AR cost

@dataclass(frozen=True)
class ArCost:
    """Time of one ring all-reduce of S bytes among W workers (paper 003 Eq. (1) plus a latency):
    ``g(S) = c0 + S*2(W-1)/(W*B) + S*(W-1)/(W*G)``; the last term only when ``reduce_Bps`` (G) is
    given. B and G in bytes/s; B may be ``math.inf``. With one worker there is no AR (g = 0)."""

    bandwidth_Bps: float
    workers: int
    c0_s: float = C0_S
    reduce_Bps: float | None = None

    def __post_init__(self) -> None:
        if not self.bandwidth_Bps > 0:
            raise ValueError(f"ArCost: bandwidth_Bps must be > 0 (bytes/s), got {self.bandwidth_Bps!r}")
        if int(self.workers) != self.workers or self.workers < 1:
            raise ValueError(f"ArCost: workers must be an integer >= 1, got {self.workers!r}")
        if not (self.c0_s >= 0 and math.isfinite(self.c0_s)):
            raise ValueError(f"ArCost: c0_s must be a finite value >= 0 (seconds), got {self.c0_s!r}")
        if self.reduce_Bps is not None and not self.reduce_Bps > 0:
            raise ValueError(f"ArCost: reduce_Bps must be > 0 (bytes/s) or None, got {self.reduce_Bps!r}")

    @property
    def ring_factor(self) -> float:
        """Bytes each worker sends per byte of tensor: 2(W-1)/W."""
        return 2.0 * (self.workers - 1) / self.workers

    def wire_bytes(self, size_bytes) -> np.ndarray:
        return np.asarray(size_bytes, dtype=float) * self.ring_factor

    def __call__(self, size_bytes) -> np.ndarray:
        s = np.asarray(size_bytes, dtype=float)
        if self.workers == 1:
            return np.zeros_like(s)
        t = self.c0_s + s * self.ring_factor / self.bandwidth_Bps
        if self.reduce_Bps is not None:
            t = t + s * (self.workers - 1) / (self.workers * self.reduce_Bps)
        return t


def _quantise(x: np.ndarray | float, slot_s: float | None):
    if slot_s is None:
        return x
    return np.ceil(np.asarray(x, dtype=float) / slot_s - 1e-9) * slot_s


# --------------------------------------------------------------------------- single-channel schedulers

def preemptive_edd(release, proc, tail, *, resume_s: float = 0.0,
                   want_runs: bool = True) -> tuple[np.ndarray, list[list[tuple[float, float]]]]:
    """Preemptive largest-tail-first (Jackson's rule; preemptive EDD with due dates -tail).

    Optimal for ``1 | r_i, pmtn | max_i (C_i + q_i)``: at every moment the channel runs the
    released, unfinished job with the largest tail (ties: earlier release, lower index). Returns
    the completion times and each job's runs [(start, end), ...] (maximal busy intervals).
    O(N log N). Times may be slots or seconds; with integer inputs all outputs are integers, and
    the result equals the slotted schedule with release slot r+1 (spec §3.2.3's convention).

    ``resume_s`` > 0 charges that much extra work each time a preempted job resumes (a new
    partition pays the AR latency c0 again). The rule is then a policy, no longer an optimum.
    ``want_runs=False`` skips recording the runs (returned empty).
    """
    r = np.asarray(release, dtype=float)
    p = np.asarray(proc, dtype=float)
    q = np.asarray(tail, dtype=float)
    n = r.size
    order = np.lexsort((np.arange(n), r)).tolist()
    done = [0.0] * n
    runs: list[list[tuple[float, float]]] = [[] for _ in range(n)] if want_runs else []
    rem = p.tolist()
    rl, ql = r.tolist(), q.tolist()
    heap: list[tuple[float, float, int]] = []
    started = [False] * n
    k, t, prev = 0, -math.inf, -1
    while k < n or heap:
        if not heap:
            t = max(t, rl[order[k]])
        while k < n and rl[order[k]] <= t:
            i = order[k]
            heapq.heappush(heap, (-ql[i], rl[i], i))
            k += 1
        i = heap[0][2]
        if i != prev and started[i]:
            rem[i] += resume_s  # resuming after a preemption: a new partition
        started[i], prev = True, i
        nxt = rl[order[k]] if k < n else math.inf
        end = t + rem[i]
        if end <= nxt + _EPS_S:
            heapq.heappop(heap)
            if want_runs:
                _add_run(runs[i], t, end)
            rem[i] = 0.0
            done[i] = end
            t = max(t, end)
            prev = -1
        else:
            if want_runs:
                _add_run(runs[i], t, nxt)
            rem[i] -= nxt - t
            t = nxt
    return np.array(done), runs


def _edd_makespan(release: np.ndarray, proc: np.ndarray, tail: np.ndarray, resume_s: float) -> float:
    """``max_i(C_i + q_i)`` of ``preemptive_edd`` for releases already in ascending order (ties in
    index order): the same rule, with no runs kept. Algorithm 1 calls it once per R."""
    rl, rem, ql = release.tolist(), proc.tolist(), tail.tolist()
    n = len(rl)
    push, pop = heapq.heappush, heapq.heappop
    heap: list[tuple[float, int]] = []
    started = [False] * n
    k, t, prev, best = 0, (rl[0] if n else 0.0), -1, -math.inf
    while k < n or heap:
        if not heap and rl[k] > t:
            t = rl[k]
        while k < n and rl[k] <= t:
            push(heap, (-ql[k], k))
            k += 1
        negq, i = heap[0]
        if resume_s and i != prev and started[i]:
            rem[i] += resume_s
        started[i], prev = True, i
        nxt = rl[k] if k < n else math.inf
        end = t + rem[i]
        if end <= nxt + _EPS_S:
            pop(heap)
            t, prev = end, -1
            if end - negq > best:
                best = end - negq
        else:
            rem[i] -= nxt - t
            t = nxt
    return best


def _add_run(runs: list[tuple[float, float]], start: float, end: float) -> None:
    if end <= start:
        if not runs:
            runs.append((start, start))  # a zero-length AR still has one (empty) partition
        return
    if runs and abs(runs[-1][1] - start) <= _EPS_S:
        runs[-1] = (runs[-1][0], end)
    elif runs and runs[-1][0] == runs[-1][1]:
        runs[-1] = (start, end)
    else:
        runs.append((start, end))


def fifo_order(release, proc) -> np.ndarray:
    """Non-preemptive FIFO in ready order (ties: lower index): completion times."""
    r = np.asarray(release, dtype=float)
    p = np.asarray(proc, dtype=float)
    done = np.zeros(r.size)
    t = -math.inf
    for i in sorted(range(r.size), key=lambda i: (r[i], i)):
        t = max(t, r[i]) + p[i]
        done[i] = t
    return done


# --------------------------------------------------------------------------- schedules

@dataclass(frozen=True)
class Partition:
    """One contiguous piece of a (fused) AR: what a runtime would issue as one all-reduce."""

    ar: int  # index into Schedule.groups
    k: int  # partition number within the AR
    start_s: float
    end_s: float
    bytes: float  # the AR's bytes times this run's share of its channel time
    priority: int  # 0 = highest: rank of start_s over all partitions (the paper's "priority t")


@dataclass(frozen=True)
class Schedule:
    """A schedule of one iteration's ARs on the single AR channel.

    ``groups[g]`` lists the original AR indices fused into scheduled AR g (singletons without
    fusion); ``done_s[g]`` its completion; ``runs[g]`` its busy intervals; ``busy_s`` the
    channel's total busy time (sum of the scheduled ARs' g(S), c0 included).
    """

    strategy: str
    iter_s: float
    groups: tuple[tuple[int, ...], ...]
    size_bytes: np.ndarray
    done_s: np.ndarray
    runs: tuple[tuple[tuple[float, float], ...], ...]
    busy_s: float
    compute_cp_s: float

    @property
    def duty_cycle(self) -> float:
        """Fraction of the iteration the AR channel is busy."""
        return self.busy_s / self.iter_s if self.iter_s > 0 else 0.0

    @property
    def n_partitions(self) -> int:
        return sum(len(r) for r in self.runs)

    @property
    def n_preemptions(self) -> int:
        """Extra partitions created by preemption (each would pay c0 again in a real runtime)."""
        return self.n_partitions - len(self.runs)

    def partitions(self) -> list[Partition]:
        """Every partition with its bytes and priority (smaller = higher), as PACE's runtime gets them."""
        flat = []
        for g, runs in enumerate(self.runs):
            total = sum(e - s for s, e in runs)
            for k, (s, e) in enumerate(runs):
                share = (e - s) / total if total > 0 else 1.0 / len(runs)
                flat.append((s, g, k, e, float(self.size_bytes[g]) * share))
        flat.sort()
        return [Partition(g, k, s, e, b, prio) for prio, (s, g, k, e, b) in enumerate(flat)]


def _makespan(done_per_ar: np.ndarray, dag: IterDag) -> float:
    if dag.n_ars == 0:
        return dag.compute_cp_s
    return float(max(dag.compute_cp_s, np.max(done_per_ar + dag.tail_s)))


def _prepare(dag: IterDag, slot_s: float | None) -> IterDag:
    if slot_s is None:
        return dag
    if not slot_s > 0:
        raise ValueError(f"slot_s must be > 0 (or None for continuous time), got {slot_s!r}")
    return dag.with_compute(_quantise(dag.compute_s, slot_s))


def pace_schedule(dag: IterDag, cost: ArCost, *, slot_s: float | None = None,
                  partition_c0: bool = False) -> Schedule:
    """PACE's optimal preemptive schedule of ``dag``'s ARs as they are (no fusion): preemptive
    largest-tail-first with release z_{u_i}, processing g(S_i), tail |L_i| (spec §3.2.3).
    With ``slot_s`` every duration is rounded up to whole slots (the paper's slotted model).
    ``partition_c0``: every partition after an AR's first pays ``cost.c0_s`` again (not in the
    paper's model; the schedule is then the same rule, no longer proven optimal)."""
    d = _prepare(dag, slot_s)
    p = _quantise(cost(d.size_bytes), slot_s)
    resume = float(_quantise(cost.c0_s, slot_s)) if partition_c0 and cost.workers > 1 else 0.0
    done, runs = preemptive_edd(d.ready_s, p, d.tail_s, resume_s=resume)
    busy = float(sum(e - b for r in runs for b, e in r))
    return Schedule("pace", _makespan(done, d), tuple((i,) for i in range(d.n_ars)), d.size_bytes.copy(), done,
                    tuple(tuple(r) for r in runs), busy, d.compute_cp_s)


def fifo_schedule(dag: IterDag, cost: ArCost, *, slot_s: float | None = None) -> Schedule:
    """WFBP: no fusion, non-preemptive FIFO in ready order."""
    d = _prepare(dag, slot_s)
    p = _quantise(cost(d.size_bytes), slot_s)
    done = fifo_order(d.ready_s, p)
    runs = tuple(((float(e - pi), float(e)),) for e, pi in zip(done, p))
    return Schedule("wfbp_fifo", _makespan(done, d), tuple((i,) for i in range(d.n_ars)), d.size_bytes.copy(),
                    done, runs, float(p.sum()), d.compute_cp_s)


def horovod_schedule(dag: IterDag, cost: ArCost, *, threshold_bytes: float = HOROVOD_THRESHOLD_BYTES,
                     cycle_s: float = HOROVOD_CYCLE_S, slot_s: float | None = None) -> Schedule:
    """Horovod-like fusion (module docstring): cycles at 0, cycle_s, 2*cycle_s, ... from the start of
    the backward pass; each cycle packs the newly ready tensors, in ready order, into buffers of at
    most ``threshold_bytes`` (0 = no fusion) and queues them on a FIFO channel. With one worker
    there is nothing to all-reduce and no cycle."""
    if not threshold_bytes >= 0 or not cycle_s >= 0:
        raise ValueError(f"horovod_schedule: threshold_bytes and cycle_s must be >= 0, got "
                         f"{threshold_bytes!r}, {cycle_s!r}")
    d = _prepare(dag, slot_s)
    if cost.workers == 1:
        cycle_s = 0.0  # one worker: no all-reduce, so no Horovod cycle either
    r, s = d.ready_s, d.size_bytes
    order = [int(i) for i in d.chain]
    tick = (np.ceil(r / cycle_s - 1e-9) * cycle_s) if cycle_s > 0 else r.copy()
    buffers: list[list[int]] = []
    enq: list[float] = []
    for i in order:
        cur = buffers[-1] if buffers else None
        if (cur is not None and enq[-1] == tick[i] and threshold_bytes > 0
                and sum(s[k] for k in cur) + s[i] <= threshold_bytes):
            cur.append(i)
        else:
            buffers.append([i])
            enq.append(float(tick[i]))
    sizes = np.array([sum(s[k] for k in b) for b in buffers])
    p = _quantise(cost(sizes), slot_s)
    bdone = fifo_order(np.array(enq), p)  # buffers are queued in order of their ticks already
    done = np.zeros(d.n_ars)
    for b, members in enumerate(buffers):
        done[members] = bdone[b]
    runs = tuple(((float(e - pi), float(e)),) for e, pi in zip(bdone, p))
    return Schedule("horovod_fusion", _makespan(done, d), tuple(tuple(b) for b in buffers), sizes, bdone, runs,
                    float(p.sum()), d.compute_cp_s)


# --------------------------------------------------------------------------- balanced tensor fusion

class MaxMinTable:
    """MaxMinSize (paper 003 Alg. 1) for every R at once, over a chain of sizes.

    ``best[r, i]`` is the largest possible minimum group sum when the suffix ``sizes[i:]`` is cut
    into exactly r contiguous non-empty groups (-inf when impossible):
    ``best[1, i] = sum(sizes[i:])``, ``best[r, i] = max_{k >= i} min(sum(sizes[i..k]), best[r-1, k+1])``.
    Built in O(N^2 R_max) with one (N x N) NumPy step per r. Ties take the shortest first group.
    """

    def __init__(self, sizes, r_max: int | None = None) -> None:
        s = np.asarray(sizes, dtype=float)
        if s.ndim != 1 or s.size == 0 or np.any(~np.isfinite(s)) or np.any(s < 0):
            raise ValueError("MaxMinTable: sizes must be a non-empty 1-D array of finite values >= 0")
        n = s.size
        r_max = n if r_max is None else int(r_max)
        if not 1 <= r_max <= n:
            raise ValueError(f"MaxMinTable: r_max must be in 1..{n}, got {r_max}")
        prefix = np.concatenate([[0.0], np.cumsum(s)])
        best = np.full((r_max + 1, n + 1), -np.inf)
        choice = np.full((r_max + 1, n), n - 1, dtype=np.int64)
        best[1, :n] = prefix[n] - prefix[:n]
        idx = np.arange(n)
        seg = prefix[None, 1:] - prefix[:n, None]  # seg[i, k] = sum(sizes[i..k])
        seg[idx[None, :] < idx[:, None]] = -np.inf  # k < i: no group
        for r in range(2, r_max + 1):
            m = np.minimum(seg, best[r - 1, 1:][None, :])  # best[r-1, k+1] for k = 0..n-1
            choice[r] = np.argmax(m, axis=1)
            best[r, :n] = m[idx, choice[r]]
        self.sizes, self.n, self.r_max, self.best, self.choice = s, n, r_max, best, choice

    def value(self, r: int) -> float:
        """MaxMinSize(chain, r): the largest achievable smallest group sum with r groups."""
        self._check(r)
        return float(self.best[r, 0])

    def bounds(self, r: int) -> np.ndarray:
        """Start index of each of the r groups (ascending; group g is ``starts[g]:starts[g+1]``)."""
        self._check(r)
        starts, i = [], 0
        for rr in range(r, 0, -1):
            starts.append(i)
            i = int(self.choice[rr, i]) + 1
        return np.array(starts, dtype=np.int64)

    def groups(self, r: int) -> list[tuple[int, ...]]:
        """The r groups as tuples of chain positions."""
        st = list(self.bounds(r)) + [self.n]
        return [tuple(range(a, b)) for a, b in zip(st[:-1], st[1:])]

    def _check(self, r: int) -> None:
        if not 1 <= r <= self.r_max:
            raise ValueError(f"MaxMinTable: R must be in 1..{self.r_max}, got {r}")


def max_min_size(sizes, r: int) -> tuple[float, list[tuple[int, ...]]]:
    """MaxMinSize(sizes, R) of Algorithm 1: (best smallest group sum, the R contiguous groups)."""
    tab = MaxMinTable(sizes, r_max=r)
    return tab.value(r), tab.groups(r)


def fuse(dag: IterDag, groups) -> IterDag:
    """The fused DAG: one AR per group of original AR indices. Its producer is the member whose
    producer finishes last, its consumers the union of the members', its size the sum."""
    groups = [tuple(int(i) for i in g) for g in groups]
    flat = sorted(i for g in groups for i in g)
    if flat != list(range(dag.n_ars)):
        raise ValueError("fuse: groups must partition the AR indices 0..N-1 (each index exactly once)")
    producer = [int(dag.producer[max(g, key=lambda i: (dag.ready_s[i], i))]) for g in groups]
    consumers = [tuple(sorted({k for i in g for k in dag.consumers[i]})) for g in groups]
    sizes = [float(dag.size_bytes[list(g)].sum()) for g in groups]
    return IterDag(dag.compute_s, dag.preds, np.array(producer, dtype=np.int64), tuple(consumers), np.array(sizes))


@dataclass(frozen=True)
class FusionPlan:
    """Algorithm 1's result: the best R, its fused groups (original AR indices) and schedule, and
    the iteration time for every R tried (``iter_by_r[R-1]``; NaN where not tried)."""

    r: int
    schedule: Schedule
    iter_by_r: np.ndarray


def balanced_fusion(dag: IterDag, cost: ArCost, *, r_values=None, slot_s: float | None = None,
                    partition_c0: bool = False) -> FusionPlan:
    """Algorithm 1 (balanced all-reduce tensor fusion): for each R, fuse the ready-ordered chain
    into MaxMinSize's R contiguous groups and schedule them with preemptive largest-tail-first;
    keep the R with the smallest iteration time (the first on ties). ``r_values`` restricts R.
    ``partition_c0`` as in ``pace_schedule`` (R is then chosen under that cost)."""
    d = _prepare(dag, slot_s)
    n = d.n_ars
    if n == 0:
        return FusionPlan(0, pace_schedule(d, cost), np.zeros(0))
    chain = d.chain
    tab = d.fusion_table
    cands = d.fusion_candidates
    rs = range(1, n + 1) if r_values is None else sorted({int(r) for r in r_values})
    if not rs or rs[0] < 1 or rs[-1] > n:
        raise ValueError(f"balanced_fusion: r_values must be a non-empty set of group counts in 1..{n}")
    resume = float(_quantise(cost.c0_s, slot_s)) if partition_c0 and cost.workers > 1 else 0.0
    iter_by_r = np.full(n, np.nan)
    best: tuple[float, int] | None = None
    for r in rs:
        r_g, q_g, s_g = cands[r - 1]
        p = _quantise(cost(s_g), slot_s)
        t = max(d.compute_cp_s, _edd_makespan(r_g, p, q_g, resume))
        iter_by_r[r - 1] = t
        if best is None or t < best[0]:
            best = (t, r)
    assert best is not None
    r = best[1]
    groups = [tuple(int(chain[k]) for k in g) for g in tab.groups(r)]
    sched = pace_schedule(fuse(d, groups), cost, slot_s=slot_s, partition_c0=partition_c0)
    sched = Schedule("pace", sched.iter_s, tuple(groups), sched.size_bytes, sched.done_s, sched.runs,
                     sched.busy_s, sched.compute_cp_s)
    return FusionPlan(r, sched, iter_by_r)


def schedule(dag: IterDag, cost: ArCost, strategy: str, *, slot_s: float | None = None,
             horovod_threshold_bytes: float = HOROVOD_THRESHOLD_BYTES,
             horovod_cycle_s: float = HOROVOD_CYCLE_S, partition_c0: bool = False) -> Schedule:
    """One iteration of ``dag`` under a strategy of ``STRATEGIES`` (``partition_c0``: pace only)."""
    if strategy == "wfbp_fifo":
        return fifo_schedule(dag, cost, slot_s=slot_s)
    if strategy == "horovod_fusion":
        return horovod_schedule(dag, cost, threshold_bytes=horovod_threshold_bytes, cycle_s=horovod_cycle_s,
                                slot_s=slot_s)
    if strategy == "pace":
        return balanced_fusion(dag, cost, slot_s=slot_s, partition_c0=partition_c0).schedule
    raise ValueError(f"unknown strategy {strategy!r}; use one of {', '.join(STRATEGIES)}")


# --------------------------------------------------------------------------- the simulator's interface

@dataclass(frozen=True)
class IterTime:
    """One job's iteration at one bandwidth: time, AR-channel busy time, bytes each worker sends."""

    iter_s: float
    busy_s: float
    wire_bytes: float
    compute_s: float  # t_f + t_b: the iteration time without communication

    @property
    def duty_cycle(self) -> float:
        """Fraction of the iteration during which the job's AR channel is busy (0..1)."""
        return self.busy_s / self.iter_s if self.iter_s > 0 else 0.0


def t_iter(model: str | ModelProfile | IterDag, bandwidth_Bps: float, workers: int, strategy: str = "pace", *,
           c0_s: float = C0_S, reduce_Bps: float | None = None, compute_scale: float = 1.0,
           horovod_threshold_bytes: float = HOROVOD_THRESHOLD_BYTES, horovod_cycle_s: float = HOROVOD_CYCLE_S,
           partition_c0: bool = False) -> IterTime:
    """A job's iteration time at bandwidth ``bandwidth_Bps`` (bytes/s per worker, ``math.inf``
    allowed) with ``workers`` workers, under ``strategy`` (``STRATEGIES``). Exact (runs the DAG);
    a simulator stepping many jobs should use ``iter_table``. ``model`` is a name of ``MODELS``
    (aliases such as 'VGG-16' work), a ``ModelProfile`` or an ``IterDag``. ``partition_c0=True``
    makes PACE pay c0 for every extra partition its preemptions create (the paper's model does
    not; see docs/sim-pace.md for why a simulator may want it)."""
    dag = model if isinstance(model, IterDag) else model_dag(model, compute_scale)
    cost = ArCost(float(bandwidth_Bps), int(workers), c0_s, reduce_Bps)
    sch = schedule(dag, cost, strategy, horovod_threshold_bytes=horovod_threshold_bytes,
                   horovod_cycle_s=horovod_cycle_s, partition_c0=partition_c0)
    return IterTime(sch.iter_s, sch.busy_s, float(cost.wire_bytes(dag.size_bytes).sum()), dag.compute_cp_s)


@dataclass(frozen=True, eq=False)
class IterTable:
    """``t_iter`` precomputed on a bandwidth grid, for one model, worker count and strategy.

    Lookups interpolate linearly in x = 1/B (time per byte) between grid points, with B = infinity
    (x = 0) as the last point: exact wherever T_iter is affine in 1/B (communication-bound stretches
    with a fixed schedule). Below the smallest grid bandwidth the job is taken as
    communication-bound: T grows with slope ``wire_bytes`` in 1/B. A bandwidth of 0 (a starved
    job) gives an infinite iteration time (duty cycle 1 when the job communicates at all).
    Arrays in, arrays out.
    """

    model: str
    workers: int
    strategy: str
    bandwidth_Bps: np.ndarray  # ascending grid, last = inf
    iter_s_grid: np.ndarray
    busy_s_grid: np.ndarray
    wire_bytes: float

    @classmethod
    def build(cls, model: str, workers: int, strategy: str = "pace", *, grid_gbps=GRID_GBPS,
              **kwargs) -> IterTable:
        """Evaluate ``t_iter`` at ``grid_gbps`` (Gbit/s) and at B = infinity. ``kwargs`` go to
        ``t_iter`` (c0_s, reduce_Bps, compute_scale, horovod_*, partition_c0)."""
        g = np.array(sorted(float(x) for x in grid_gbps))
        if g.size == 0 or np.any(g <= 0) or np.any(~np.isfinite(g)):
            raise ValueError("IterTable.build: grid_gbps must be finite bandwidths > 0 (Gbit/s)")
        bw = np.append(g * GBIT_Bps, math.inf)
        pts = [t_iter(model, b, workers, strategy, **kwargs) for b in bw]
        name = model if isinstance(model, str) else getattr(model, "name", "dag")
        return cls(str(name), int(workers), strategy, bw, np.array([p.iter_s for p in pts]),
                   np.array([p.busy_s for p in pts]), pts[0].wire_bytes)

    @cached_property
    def off_channel_floor_s(self) -> float:
        """A lower bound on iter_s(B) - busy_s(B) at every B >= 0: its least value on the grid (both are
        linear in 1/B between grid points, and their slopes agree below the smallest bandwidth), at
        least 0. The time of an iteration that its all-reduce channel is idle is never below it."""
        return max(0.0, float(np.min(self.iter_s_grid - self.busy_s_grid)))

    def __post_init__(self) -> None:
        xs = (1.0 / self.bandwidth_Bps[::-1]).tolist()  # ascending: 0 (B = inf), ..., 1/B_min
        object.__setattr__(self, "_xs", xs)
        ys = {"iter": self.iter_s_grid[::-1].tolist(), "busy": self.busy_s_grid[::-1].tolist()}
        object.__setattr__(self, "_ys", ys)

    def _interp(self, bandwidth_Bps, y: np.ndarray, key: str):
        if isinstance(bandwidth_Bps, (int, float)):  # the simulator's hot path: no NumPy overhead
            b = float(bandwidth_Bps)
            if not b >= 0:
                raise ValueError(f"IterTable: bandwidth_Bps must be >= 0 (bytes/s), got {bandwidth_Bps!r}")
            if b == 0:
                return math.inf if self.wire_bytes > 0 else self._ys[key][-1]
            x, xs, ys = 1.0 / b, self._xs, self._ys[key]
            if x >= xs[-1]:
                return ys[-1] + self.wire_bytes * (x - xs[-1])
            k = bisect.bisect_right(xs, x)
            return ys[k - 1] + (ys[k] - ys[k - 1]) * (x - xs[k - 1]) / (xs[k] - xs[k - 1])
        b = np.asarray(bandwidth_Bps, dtype=float)
        if np.any(~(b >= 0)):
            raise ValueError("IterTable: bandwidth_Bps must be >= 0 (bytes/s)")
        with np.errstate(divide="ignore"):
            x = 1.0 / b  # 0 for inf, inf for 0
        xs = 1.0 / self.bandwidth_Bps[::-1]  # ascending: 0 (inf), ..., 1/B_min
        ys = y[::-1]
        out = np.interp(x, xs, ys)
        below = x > xs[-1]
        with np.errstate(invalid="ignore"):
            out = np.where(below, ys[-1] + self.wire_bytes * (x - xs[-1]), out) if self.wire_bytes > 0 else out
        return float(out) if out.ndim == 0 else out

    def iter_s(self, bandwidth_Bps):
        """Iteration time (s) at bandwidth ``bandwidth_Bps`` (bytes/s; scalar or array)."""
        return self._interp(bandwidth_Bps, self.iter_s_grid, "iter")

    def busy_s(self, bandwidth_Bps):
        return self._interp(bandwidth_Bps, self.busy_s_grid, "busy")

    def duty_cycle(self, bandwidth_Bps):
        """Fraction of the iteration the AR channel is busy, at ``bandwidth_Bps``."""
        if isinstance(bandwidth_Bps, (int, float)):
            t = self.iter_s(bandwidth_Bps)
            if math.isinf(t):
                return 1.0
            return self.busy_s(bandwidth_Bps) / t if t > 0 else 0.0
        t = np.asarray(self.iter_s(bandwidth_Bps))
        busy = np.asarray(self.busy_s(bandwidth_Bps))
        with np.errstate(invalid="ignore"):
            d = np.where(np.isinf(t), 1.0, np.where(t > 0, busy / np.where(t > 0, t, 1.0), 0.0))
        return float(d) if d.ndim == 0 else d


@lru_cache(maxsize=256)
def _cached_table(model: str, workers: int, strategy: str, grid: tuple[float, ...], c0_s: float,
                  reduce_Bps: float | None, compute_scale: float, partition_c0: bool) -> IterTable:
    return IterTable.build(model, workers, strategy, grid_gbps=grid, c0_s=c0_s, reduce_Bps=reduce_Bps,
                           compute_scale=compute_scale, partition_c0=partition_c0)


def iter_table(model: str, workers: int, strategy: str = "pace", *, grid_gbps=GRID_GBPS, c0_s: float = C0_S,
               reduce_Bps: float | None = None, compute_scale: float = 1.0, partition_c0: bool = False) -> IterTable:
    """The cached ``IterTable`` of (model, workers, strategy, ...): built on first use (tens of ms
    to about a second), then shared."""
    if strategy not in STRATEGIES:
        raise ValueError(f"unknown strategy {strategy!r}; use one of {', '.join(STRATEGIES)}")
    return _cached_table(canonical_name(model), int(workers), strategy, tuple(float(g) for g in grid_gbps),
                         float(c0_s), reduce_Bps, float(compute_scale), bool(partition_c0))
