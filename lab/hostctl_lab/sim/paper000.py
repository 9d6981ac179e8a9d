"""Paper 000's cluster simulator, task level and event driven (Wang et al., LWF-kappa, AdaDUAL,
Ada-SRSF; docs/sim-paper000.md).

Jobs arrive online and wait in a queue (order SRSF with E_J = 0, or FIFO); on every arrival and
every job end, the queue is walked in order and each job that fits is placed (``placement``, GPU
memory packing: several jobs may share a GPU; later jobs may backfill). A placed job runs its
iterations as a DAG: on each of its GPUs a forward task then a backward task (``t_f``, ``t_b``),
then a barrier and one all-reduce (AR) task that occupies every server of the job and moves the
model's bytes at the fluid rate of the contention backend (default ``WangNic``: 1/(k*b + (k-1)*eta),
k the largest number of running ARs on any of the job's servers, recomputed whenever an AR starts
or ends) after a latency a. A job on one server has no AR (intra-server communication is free).
A GPU runs one task at a time; whenever it is idle it starts the ready task of the resident job
with the shortest remaining service (SRSF). ARs that are ready wait for ``admission``, asked in
SRSF order after every change (earlier acceptances count): ``srsf<n>`` starts an AR only if every
server of the job runs at most n-1 ARs (SRSF(1): no contention), ``adadual`` applies AdaDUAL
(hostctl.core.adadual; never 3-way).

Remaining service of a job (SRSF key): the GPU-seconds of its remaining compute tasks plus, once
placed on several servers, ``n_gpus * (a + b*size)`` per remaining AR (the paper's (C_J + E_J)|G|).
L_g for placement: the same work per GPU, over the jobs resident on the GPU.

Units: seconds and bytes. ``run`` returns JCTs (finish - arrival), the makespan and the GPU
utilisation (busy compute time / makespan, averaged over GPUs).

    python -m hostctl_lab.sim.paper000 --placement lwf1 --admission adadual --seed 0
"""

from __future__ import annotations

import argparse
import heapq
import itertools
import math
import operator
import re
import sys
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from hostctl.core.adadual import ADADUAL_MODES, adadual
from hostctl_lab.sim.contention import Contention, WangNic
from hostctl_lab.sim.placement import GpuCluster, Placement, get_placement

MB = 2**20  # Table III's "MB" read as MiB (VGG-16: 138.4M fp32 parameters = 527.8 MiB, listed 526.4)


@dataclass(frozen=True)
class Model:
    """A row of the paper's Table III: model size (MB), GPU memory per worker (MB), forward and
    backward time of one mini-batch on a V100 (seconds)."""

    name: str
    size_mb: float
    mem_mb: float
    t_f: float
    t_b: float


MODELS: tuple[Model, ...] = (
    Model("vgg16", 526.4, 4527, 0.0358, 0.0537),
    Model("resnet50", 99.2, 3213, 0.0250, 0.0374),
    Model("inception3", 103.0, 3291, 0.0349, 0.0524),
    Model("lstm-ptb", 251.8, 2751, 0.0315, 0.0473),
)
MIX_160: dict[int, int] = {1: 80, 2: 14, 4: 26, 8: 30, 16: 8, 32: 2}  # GPUs per job -> jobs (Sec. V)


@dataclass(frozen=True)
class Job:
    """One training job: arrives at ``arrival`` s, needs ``n_gpus`` workers of ``mem_mb`` MB each,
    runs ``iters`` iterations of t_f + t_b seconds per worker plus one AR of ``size_bytes``."""

    id: int
    arrival: float
    n_gpus: int
    model: str
    size_bytes: float
    mem_mb: float
    t_f: float
    t_b: float
    iters: int


def _split(n: int, weights: Sequence[int]) -> list[int]:
    """n items split in proportion to weights (largest remainder)."""
    w = np.asarray(weights, dtype=float)
    exact = n * w / w.sum()
    out = np.floor(exact).astype(int)
    for i in np.argsort(-(exact - out), kind="stable")[: n - out.sum()]:
        out[i] += 1
    return out.tolist()


def make_jobs(seed: int, n_jobs: int = 160, mix: dict[int, int] | None = None,
              iters: tuple[int, int] = (1000, 6000), iter_step: int = 1000, window: float = 1200.0,
              models: Sequence[Model] = MODELS, integer_arrivals: bool = True) -> list[Job]:
    """The paper's workload: ``n_jobs`` jobs, GPU counts in the proportions of ``mix`` (default the
    160-job mix 80x1, 14x2, 26x4, 30x8, 8x16, 2x32), iterations uniform over ``iters`` in steps of
    ``iter_step`` (default 1000..6000 in thousands, as the reference code), arrivals uniform over
    [0, window) seconds (floored to whole seconds unless ``integer_arrivals`` is False), the model
    uniform over Table III. Job ids are in arrival order (ties by GPU count)."""
    mix = dict(MIX_160 if mix is None else mix)
    if n_jobs < 1 or not mix or min(mix) < 1 or min(mix.values()) < 0 or not sum(mix.values()):
        raise ValueError(f"need n_jobs >= 1 and a mix of GPU counts >= 1 to job counts >= 0, got {n_jobs}, {mix}")
    if iters[0] < 1 or iters[1] < iters[0] or iter_step < 1 or window < 0:
        raise ValueError(f"need 1 <= iters[0] <= iters[1], iter_step >= 1, window >= 0; got {iters}, {iter_step}, "
                         f"{window}")
    rng = np.random.default_rng(seed)
    sizes = sorted(mix)
    gpus = np.repeat(sizes, _split(n_jobs, [mix[s] for s in sizes]))
    steps = np.arange(iters[0], iters[1] + 1, iter_step)
    its = rng.choice(steps, size=n_jobs)
    arr = rng.uniform(0.0, window, size=n_jobs)
    if integer_arrivals:
        arr = np.floor(arr)
    mod = rng.integers(0, len(models), size=n_jobs)
    order = np.lexsort((gpus, arr))
    jobs = []
    for new_id, i in enumerate(order):
        m = models[mod[i]]
        jobs.append(Job(new_id, float(arr[i]), int(gpus[i]), m.name, m.size_mb * MB, float(m.mem_mb), m.t_f, m.t_b,
                        int(its[i])))
    return jobs


# worker states within an iteration
_FWD_READY, _FWD_RUN, _BWD_READY, _BWD_RUN, _WAIT_AR = range(5)
_EV_COMPUTE, _EV_COMM, _EV_ARRIVAL = range(3)
_ADMISSION = re.compile(r"srsf(\d+)|adadual")


class _J:
    """A job's run-time state."""

    __slots__ = ("spec", "id", "arrival", "n", "tf", "tb", "size", "mem", "iters", "gpus", "servers", "srv", "multi",
                 "ws", "nb", "it", "key", "e_iter", "finish", "c_rem", "c_lat", "c_rate", "c_t0", "c_ver", "c_k", "chk")

    def __init__(self, spec: Job, e_iter: float):
        self.spec = spec
        self.id, self.arrival, self.n = spec.id, spec.arrival, spec.n_gpus
        self.tf, self.tb, self.size, self.mem, self.iters = spec.t_f, spec.t_b, spec.size_bytes, spec.mem_mb, spec.iters
        self.gpus: list[int] = []
        self.servers = np.zeros(0, dtype=np.int64)
        self.srv: list[int] = []
        self.multi = False
        self.ws: list[int] = []
        self.nb = 0
        self.it = 0
        self.key = self.n * self.iters * (self.tf + self.tb)  # remaining service, E_J = 0 until placed
        self.e_iter = e_iter  # a + b*size: one uncontended AR
        self.finish = math.nan
        self.c_rem = self.c_lat = self.c_rate = self.c_t0 = 0.0
        self.c_ver = 0
        self.c_k = 0
        self.chk = -1  # srv_end sum when its AR was last refused

    def rank(self) -> tuple[float, float, int]:
        return (self.key, self.arrival, self.id)


_RANK = operator.attrgetter("key", "arrival", "id")  # SRSF order: least remaining service, then arrival, id


def parse_admission(name: str, mode: str = "all") -> int | None:
    """``srsf<n>`` -> n; ``adadual`` -> None. A bad name or AdaDUAL mode: ValueError."""
    m = _ADMISSION.fullmatch(name)
    if not m or (m.group(1) is not None and int(m.group(1)) < 1):
        raise ValueError(f"unknown admission {name!r}: use adadual or srsf<n> (n >= 1, e.g. srsf1)")
    if mode not in ADADUAL_MODES:
        raise ValueError(f"unknown AdaDUAL mode {mode!r} (one of {', '.join(ADADUAL_MODES)})")
    return None if m.group(1) is None else int(m.group(1))


def run(jobs: Sequence[Job], n_servers: int = 16, gpus_per_server: int = 4, placement: str | Placement = "lwf1",
        admission: str = "adadual", order: str = "srsf", seed: int = 0, gpu_mem_mb: float = 16384.0,
        contention: Contention | None = None, adadual_mode: str = "all", b: float | None = None,
        eta: float | None = None, key_comm: bool = True) -> dict:
    """Simulate ``jobs`` on ``n_servers`` x ``gpus_per_server`` GPUs of ``gpu_mem_mb`` MB.

    ``placement``: a name of hostctl_lab.sim.placement (ff, ls, rand, lwf<k>, lwf<k>-strict) or a
    placement function. ``admission``: ``adadual`` (mode ``adadual_mode``) or ``srsf<n>``.
    ``order``: the job queue's order, ``srsf`` or ``fifo``. ``seed``: the RNG of ``rand``.
    ``contention``: the backend (default ``WangNic()``); AdaDUAL's b and eta default to the
    backend's (WangNic) or to hostctl.core.adadual's defaults. ``key_comm``: the SRSF key of a job
    placed on several servers counts its remaining ARs, n*(a + b*size) each (the paper's E_J);
    False counts compute only, as the reference code does.

    Returns a dict: ``avg_jct``, ``median_jct``, ``p95_jct``, ``makespan`` (s), ``gpu_util`` (mean
    over GPUs of busy compute time / makespan), ``gpu_util_per_gpu``, ``jct`` (per job, in the order
    of ``jobs``), ``max_server_k`` (most ARs ever running at once on one server, measured),
    ``comm_k_seconds`` (AR-seconds spent at each k), ``n_ar`` (ARs run), ``n_events``."""
    if order not in ("srsf", "fifo"):
        raise ValueError(f"unknown job order {order!r}: use srsf or fifo")
    srsf_n = parse_admission(admission, adadual_mode)
    place = get_placement(placement) if isinstance(placement, str) else placement
    net = WangNic() if contention is None else contention
    ad_b = b if b is not None else getattr(net, "b", None)
    ad_eta = eta if eta is not None else getattr(net, "eta", None)
    ad_kw = {k: v for k, v in (("b", ad_b), ("eta", ad_eta)) if v is not None}
    state = GpuCluster.empty(n_servers, gpus_per_server, gpu_mem_mb)
    n_gpu = state.n_gpus
    ids = [j.id for j in jobs]
    if len(set(ids)) != len(ids):
        raise ValueError("job ids must be unique (make_jobs numbers them 0..n-1)")
    for j in jobs:
        if not 1 <= j.n_gpus <= n_gpu or j.mem_mb > gpu_mem_mb or j.iters < 1 or j.arrival < 0:
            raise ValueError(f"job {j.id} can never run here: it needs {j.n_gpus} GPUs of {j.mem_mb} MB for {j.iters} "
                             f"iterations from t={j.arrival}, the cluster has {n_gpu} GPUs of {gpu_mem_mb} MB; "
                             f"use a bigger cluster or fix the job")
    rng = np.random.default_rng(seed)
    lat = float(net.latency)

    r1 = float(net.rates([np.zeros(1, dtype=np.int64)], 1)[0])  # uncontended bytes/s: E_J's a + b*size
    rate_k = getattr(net, "rate_k", None)  # k-based backends (WangNic, YuF): k counted here, rate memoised
    rate_memo: dict[int, float] = {}
    J = [_J(j, lat + j.size_bytes / r1) for j in jobs]
    heap: list[tuple] = []
    seq = itertools.count()
    for x in J:
        heapq.heappush(heap, (x.arrival, next(seq), _EV_ARRIVAL, x, 0))

    g_busy = [False] * n_gpu
    g_cur: list[tuple[_J, int] | None] = [None] * n_gpu
    g_res: list[list[tuple[_J, int]]] = [[] for _ in range(n_gpu)]
    g_busy_time = [0.0] * n_gpu
    srv_tasks: list[dict[int, _J]] = [{} for _ in range(n_servers)]
    # ARs ended on each server so far: a refused AR can only become admissible after one of these
    # (counts only grow and old tasks' remaining bytes only shrink in between)
    srv_end = [0] * n_servers
    running: list[_J] = []
    queue: list[_J] = []
    comm_ready: list[_J] = []
    dirty: set[int] = set()
    stats = {"max_server_k": 0, "n_ar": 0, "n_events": 0}
    k_seconds: dict[int, float] = {}
    done = 0
    t = 0.0

    def advance(now: float) -> None:
        for x in running:
            dt = now - x.c_t0
            if dt > 0:
                use = dt if dt < x.c_lat else x.c_lat
                x.c_lat -= use
                x.c_rem -= (dt - use) * x.c_rate
                k_seconds[x.c_k] = k_seconds.get(x.c_k, 0.0) + dt
            x.c_t0 = now

    def rerate(now: float) -> None:
        if not running:
            return
        for x in running:
            x.c_k = max([len(srv_tasks[s]) for s in x.srv])
        if rate_k is not None:  # a k-based backend: its rate per k, memoised
            rates = []
            for x in running:
                r = rate_memo.get(x.c_k)
                if r is None:
                    r = rate_memo[x.c_k] = float(np.asarray(rate_k(np.array([x.c_k])))[0])
                rates.append(r)
        else:
            rates = net.rates([x.servers for x in running], n_servers).tolist()
        for x, rate in zip(running, rates):
            if rate != x.c_rate:
                x.c_rate = rate
                x.c_ver += 1
                heapq.heappush(heap, (now + x.c_lat + max(x.c_rem, 0.0) / rate, next(seq), _EV_COMM, x, x.c_ver))

    def iteration_done(x: _J, now: float) -> None:
        nonlocal done
        x.it += 1
        if x.multi and key_comm:
            x.key -= x.n * x.e_iter
        if x.it < x.iters:
            x.ws = [_FWD_READY] * x.n
            dirty.update(x.gpus)
            return
        x.finish = now
        done += 1
        state.release(np.asarray(x.gpus), x.mem)
        for w, g in enumerate(x.gpus):
            g_res[g].remove((x, w))

    def place_queue() -> None:
        # L_g: the remaining work of the workers resident on each GPU
        load = [0.0] * n_gpu
        for g in range(n_gpu):
            tot = 0.0
            for x, w in g_res[g]:
                s = x.ws[w]
                left = (x.iters - x.it) * (x.tf + x.tb)
                if s >= _WAIT_AR:
                    left -= x.tf + x.tb
                elif s >= _BWD_READY:
                    left -= x.tf
                if x.multi:
                    left += (x.iters - x.it) * x.e_iter
                tot += left
            load[g] = tot
        state.load[:] = load
        queue.sort(key=_RANK if order == "srsf" else operator.attrgetter("arrival", "id"))
        placed = []
        for x in queue:
            gpus = place(state, x.n, x.mem, x.iters * (x.tf + x.tb), rng)
            if gpus is None:
                continue
            x.gpus = [int(g) for g in gpus]
            x.servers = np.unique(state.server[gpus])
            x.srv = x.servers.tolist()
            x.multi = len(x.servers) > 1
            if x.multi:
                state.load[gpus] += x.iters * x.e_iter
                if key_comm:
                    x.key += x.n * x.iters * x.e_iter
            x.ws = [_FWD_READY] * x.n
            for w, g in enumerate(x.gpus):
                g_res[g].append((x, w))
            dirty.update(x.gpus)
            placed.append(x)
        if placed:
            keep = set(map(id, placed))
            queue[:] = [x for x in queue if id(x) not in keep]

    def admit(now: float) -> None:
        if running:
            advance(now)
        comm_ready.sort(key=_RANK)
        started = False
        left = []
        for x in comm_ready:
            srv = x.srv
            ends = sum([srv_end[s] for s in srv])
            if ends == x.chk:  # refused before and no AR on its servers ended since: refused again
                left.append(x)
                continue
            most = max([len(srv_tasks[s]) for s in srv])
            if srsf_n is not None:
                ok = most <= srsf_n - 1
            elif most == 1:  # AdaDUAL compares sizes only here; 0 starts, >= 2 waits (same answer, no dicts)
                ok = adadual(x.size, [{o.id: max(o.c_rem, 0.0) for o in srv_tasks[s].values()} for s in srv],
                             mode=adadual_mode, **ad_kw)
            else:
                ok = most == 0
            if not ok:
                x.chk = ends
                left.append(x)
                continue
            x.c_rem, x.c_lat, x.c_t0, x.c_rate = x.size, lat, now, 0.0
            running.append(x)
            for s in srv:
                srv_tasks[s][x.id] = x
            stats["max_server_k"] = max(stats["max_server_k"], max([len(srv_tasks[s]) for s in srv]))
            stats["n_ar"] += 1
            started = True
        comm_ready[:] = left
        if started:
            rerate(now)

    def start_compute(now: float) -> None:
        for g in sorted(dirty):
            if g_busy[g]:
                continue
            best = None
            bk = 0.0
            for pair in g_res[g]:  # the ready task of the job with the least remaining service (SRSF)
                x, w = pair
                s = x.ws[w]
                if s == _FWD_READY or s == _BWD_READY:
                    k = x.key
                    if best is None or k < bk or (k == bk and x.rank() < best[0].rank()):
                        best, bk = pair, k
            if best is None:
                continue
            x, w = best
            s = x.ws[w]
            x.ws[w] = s + 1  # READY -> RUN
            g_busy[g] = True
            g_cur[g] = best
            heapq.heappush(heap, (now + (x.tf if s == _FWD_READY else x.tb), next(seq), _EV_COMPUTE, g, 0))
        dirty.clear()

    n_jobs = len(J)
    while heap:
        t = heap[0][0]
        queue_dirty = comm_dirty = False
        while heap and heap[0][0] == t:
            _, _, kind, obj, ver = heapq.heappop(heap)
            stats["n_events"] += 1
            if kind == _EV_COMPUTE:
                g = obj
                x, w = g_cur[g]
                s = x.ws[w]
                g_busy[g] = False
                g_cur[g] = None
                dirty.add(g)
                if s == _FWD_RUN:
                    x.ws[w] = _BWD_READY
                    x.key -= x.tf
                    g_busy_time[g] += x.tf
                else:
                    x.ws[w] = _WAIT_AR
                    x.key -= x.tb
                    g_busy_time[g] += x.tb
                    x.nb += 1
                    if x.nb == x.n:
                        x.nb = 0
                        if x.multi:
                            x.chk = -1
                            comm_ready.append(x)
                            comm_dirty = True
                        else:
                            iteration_done(x, t)
                            queue_dirty |= x.it == x.iters
            elif kind == _EV_COMM:
                x = obj
                if ver != x.c_ver:
                    continue  # superseded by a rate change
                advance(t)
                running.remove(x)
                for s in x.srv:
                    del srv_tasks[s][x.id]
                    srv_end[s] += 1
                x.c_rate = 0.0
                iteration_done(x, t)
                queue_dirty |= x.it == x.iters
                comm_dirty = True
            else:
                queue.append(obj)
                queue_dirty = True
        if queue_dirty and queue:
            place_queue()
        if comm_dirty:
            if running:
                advance(t)
            rerate(t)
            if comm_ready:
                admit(t)
        if dirty:
            start_compute(t)
    if done != n_jobs:  # cannot happen for valid input: an idle cluster fits every job
        raise RuntimeError(f"simulation stalled with {n_jobs - done} jobs unfinished (queue {len(queue)})")

    makespan = t
    jct = np.array([x.finish - x.arrival for x in J])
    util = np.array(g_busy_time) / makespan if makespan > 0 else np.zeros(n_gpu)
    return {"n_jobs": n_jobs, "avg_jct": float(jct.mean()), "median_jct": float(np.median(jct)),
            "p95_jct": float(np.percentile(jct, 95)), "makespan": float(makespan), "gpu_util": float(util.mean()),
            "gpu_util_per_gpu": util.tolist(), "jct": jct.tolist(), "max_server_k": stats["max_server_k"],
            "comm_k_seconds": {int(k): v for k, v in sorted(k_seconds.items())}, "n_ar": stats["n_ar"],
            "n_events": stats["n_events"],
            "placement": placement if isinstance(placement, str) else getattr(placement, "__name__", "custom"),
            "admission": admission, "order": order, "seed": seed}


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m hostctl_lab.sim.paper000",
                                description="Paper 000's task-level cluster simulator: one run, summary printed.")
    p.add_argument("--placement", default="lwf1", help="ff, ls, rand, lwf<k>, lwf<k>-strict (default lwf1)")
    p.add_argument("--admission", default="adadual", help="adadual or srsf<n> (default adadual)")
    p.add_argument("--order", default="srsf", choices=("srsf", "fifo"))
    p.add_argument("--seed", type=int, default=0, help="workload and RAND seed")
    p.add_argument("--jobs", type=int, default=160)
    p.add_argument("--servers", type=int, default=16)
    p.add_argument("--gpus", type=int, default=4, help="GPUs per server")
    p.add_argument("--gpu-mem", type=float, default=16384.0, help="MB per GPU (paper 16 GB; reference code 32 GB)")
    a = p.parse_args(argv)
    try:
        r = run(make_jobs(a.seed, a.jobs), a.servers, a.gpus, a.placement, a.admission, a.order, a.seed, a.gpu_mem)
    except ValueError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    print(f"{r['placement']} {r['admission']} {r['order']} seed {a.seed}: avg JCT {r['avg_jct']:.1f} s, median "
          f"{r['median_jct']:.1f} s, p95 {r['p95_jct']:.1f} s, makespan {r['makespan']:.1f} s, GPU util "
          f"{100 * r['gpu_util']:.1f}%, max k {r['max_server_k']}, {r['n_ar']} ARs, {r['n_events']} events")
    return 0


if __name__ == "__main__":
    sys.exit(main())

