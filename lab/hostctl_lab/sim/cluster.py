"""The cluster simulator: jobs arrive, a cluster scheduler places them on GPUs, their iterations'
flows share the fabric under a network policy, and the run reports every job's completion time.

Event-driven fluid model (``python -m hostctl_lab.sim`` or ``hostctl sim``):

- a job gets ``gpus`` GPUs (exclusive) on one or more servers (the placement) when the queue order
  reaches it and a placement fits (later jobs may start before an earlier one that does not fit:
  backfilling, as paper 000's Algorithm 3; ``backfill=False`` makes the queue strict);
- a job on one server never touches the network: it ends after ``iterations x compute_s`` (one event);
- a job on S > 1 servers runs iterations: compute for ``compute_s``, then the iteration's exchange,
  then the next iteration. Ring all-reduce (hierarchical: one ring member per server, the GPUs of a
  server reduce over NVLink for free) is S flows, server i to server i+1, of 2(S-1)/S x size bytes
  each, all at once. A parameter server (on the job's first server) is a push (every other server
  sends it ``size``) followed, once the push is done, by a pull (it sends ``size`` to each);
- with ``iter_model`` one of paper 003's strategies (wfbp_fifo, horovod_fusion, pace), a ring job's
  compute before each exchange is its model's iteration time T(B) at the rate B its last exchange got,
  less that exchange's duration (``overlap_compute``): a job that keeps getting B iterates in T(B);
- flows are rates on paths (hostctl_lab.sim.topo); rates are piecewise constant between events and
  come from the rate kernel (hostctl_lab.sim.kernel) under the network policy.

Recomputing only what an event touches: flows interact only through links they share, so an event
(flows start or end, a policy changes a flow's class or cap) re-solves the flows of one component:
the running jobs joined by links that their exchanges share (kept by union-find, rebuilt when a
networked job starts or ends). Every event at the same instant is handled before the one re-solve,
and a solve puts one event on the queue: its component's first flow end. ``stats`` says how many solves covered every active flow (a full solve).
A job whose exchange has every link to itself (no other running job's exchange uses any of them) runs
the same iteration again and again: it is fast-forwarded, one event to its end, with its links
reserved; when another job that uses one of them starts, the job is brought back to the present (how
many iterations done, which phase, how many bytes left) and simulated flow by flow again. The result
is the same as without (``fast_forward=False``; tests/unit/test_sim_cluster.py compares them).

Parking (``park=True``, exact): jobs that share links (a component of 2..PARK_MAX_JOBS jobs) are
watched at each compute end; when the component's state (phases, bytes left, compute left) equals one
it had at the same job's earlier compute end, it repeats with that period. It is parked: its flows
leave the fabric, its pending events are voided, and its jobs move on by the iterations of the whole
periods that end before anything outside could change it (``horizon``: the next arrival, the earliest
end of any other job, rr's next rotation); then it resumes from the saved state. Nothing starts on an
exactly parked component's links before it resumes (start_job checks it). With ``steady=N``
(approximate), a component that does not repeat is parked once every job has a steady mean iteration
time (at least N iterations after a warm-up since its members last changed, the window's halves
agreeing), until its first job's end, each job moved on by the span over its mean (rounded, the
remainder carried); a job that starts on its links before then interrupts it (``interrupt``: each job
moved on by the time parked so far instead). After a change, a job that had a mean before confirms it
over a shorter window (steady // 5 iterations after the warm-up, agreeing to STEADY_AGREE) instead of
being measured in full (``reconfirm``, the default; a job whose mean moved more is measured in full).
Once STEADY_QUORUM (90%) of a component's jobs have their means, the others are taken at their windows'
means so far when each window holds at least steady // 5 iterations (``quorum``, the default): a
component is not held for a job whose iterations are long or whose halves a beat keeps apart. With a
share instead (``quorum=0.75``: --steady-quorum), the quorum is that share, and a slow job (its mean at
least SLOW_RATIO x the component's median) is taken at 2 iterations after a warm-up of 2 ends: faster,
a little less exact (docs/simulator.md).

The flows' numbers live in a FlowTable (one row per flow: bytes left, rate, cap, class, path, job,
component), so a settle or a solve reads and writes a component's rows at once; the rate kernel's
progressive filling is compiled with numba when it is installed (hostctl_lab.sim._kernel_nb).

Network policies (the policy code the daemon runs, driven by the simulated clock):

- ``fifo``: ideal TCP, every flow max-min fair on every link;
- ``one``, ``rr``: TensorLights bands at each sending host: each host's jobs (those with flows, i.e.
  on more than one server) get bands from ``hostctl.policy``'s driver (the daemon's
  ``HostDriver.bands``: the band rule of the policy row, ``--bands``, the rotation epoch of the
  simulated clock every ``rr_interval_s``); a host's NIC serves the bands in strict priority, switch
  ports are FIFO (max-min fair among all flows);
- ``cap``: every job's rate at each host capped at ``cap_bps``, split over its flows there
  (hostctl.core.pace.cap_rates, the daemon's decision);
- ``prio-every-link`` (an oracle, not a daemon policy): the ``one`` order enforced at every link.
"""

from __future__ import annotations

import heapq
import math
import time
from dataclasses import dataclass, field

import numpy as np

from hostctl.core.pace import job_caps_Bps
from hostctl.errors import ConfigError
from hostctl_lab.sim import kernel, mlccnet, pace, sched
from hostctl_lab.sim import placement as gpu_placement
from hostctl_lab.sim.topo import Fabric
from hostctl_lab.sim.workload import JobSpec

ARRIVAL, COMPUTE_END, FLOW_END, LOCAL_END, TICK, FF_END, PARK_END = range(7)
DONE_BYTES = 1e-3  # a flow with this little left is done
NETWORKS = ("fifo", "one", "rr", "cap", "prio-every-link", "adadual", "srsf1", "srsf2", "srsf3") + mlccnet.POLICIES  # + srsf<n>
ORDERS = sched.ORDERS  # fifo, srsf, ada-srsf
# a ring job's iteration: compute then exchange (serial), or paper 003's iteration-time model of a strategy
# (hostctl_lab.sim.pace: the exchange overlaps the backward pass; see ClusterSim.overlap_compute)
ITER_MODELS = ("serial",) + pace.STRATEGIES
PLACEMENTS = ("ff", "pack", "ls", "rand", "lwf1", "lwf2", "sjfbco")  # + lwf<k> (hostctl_lab.sim.placement)
DEFAULT_CLASS = 99  # a flow of a job without a band (a host with one job): below every band
PARK_MAX_JOBS = 32  # components up to this many jobs are watched for a repeating state (parking)
PARK_HISTORY = 8  # states kept per (component, job, shape)
PARK_KEYS = 4096  # (component, job, shape) keys kept at most
PARK_MIN_PERIODS = 2  # park only when at least this many whole periods fit
STEADY_AGREE = 0.01  # --steady: the two halves of a job's window agree on its mean iteration time to 1%
STEADY_MAX_WINDOW = 20  # ... or the window has grown to this many times N: its mean is taken as it is
# --steady's quorum: once this share of a component's jobs have their means, each job still measuring is
# taken at its window's mean so far if the window holds at least N // 5 iterations (a confirm's length)
STEADY_QUORUM = 0.9
# ... with a share given (ClusterSim(quorum=SHARE), `hostctl sim --steady-quorum SHARE`: faster, a little
# less exact), a slow job too (its mean at least SLOW_RATIO x the median of the component's means): once
# it has 2 iterations after a warm-up of 2 ends that span at least SLOW_SPAN of the time since its
# component changed
SLOW_RATIO = 4.0
SLOW_SPAN = 0.5
MEMO_BYTES = 64 << 20  # solve_numpy's memo of rates by inputs holds at most this much


class FlowTable:
    """The numbers of the open flows (and the parked ones), one row (slot) per flow: bytes left at
    time ``t``, rate, cap, class, and the path's links padded with -1. Solves and settles read and write
    a component's rows at once; a freed slot is reused."""

    def __init__(self, width: int = 8) -> None:
        n = 64
        self.left, self.rate, self.t = np.zeros(n), np.zeros(n), np.zeros(n)
        self.cap, self.prio = np.full(n, math.inf), np.zeros(n, dtype=np.int64)
        self.fid = np.full(n, -1, dtype=np.int64)
        self.job = np.full(n, -1, dtype=np.int64)
        self.comp = np.full(n, -1, dtype=np.int64)  # the component of an open flow's job; -1: none (free, parked)
        self.key = np.zeros(n, dtype=np.int64)  # job x 2^32 + flow id: a component's rows in this order
        self.paths = np.full((n, width), -1, dtype=np.int64)
        self.free = list(range(n - 1, -1, -1))

    def alloc(self, fid: int, path: np.ndarray, size: float, t: float, job: int = -1, comp: int = -1) -> int:
        if not self.free:
            n = len(self.left)
            for name in ("left", "rate", "t", "cap", "prio", "fid", "job", "comp", "key"):
                a = getattr(self, name)
                setattr(self, name, np.concatenate([a, np.full_like(a, -1 if name in ("fid", "job", "comp") else 0)]))
            self.paths = np.concatenate([self.paths, np.full_like(self.paths, -1)])
            self.free = list(range(2 * n - 1, n - 1, -1))
        if len(path) > self.paths.shape[1]:
            self.paths = np.concatenate([self.paths, np.full((len(self.paths), len(path)), -1, np.int64)], 1)
        s = self.free.pop()
        self.left[s], self.rate[s], self.t[s], self.cap[s], self.prio[s], self.fid[s] = size, 0.0, t, math.inf, 0, fid
        self.job[s], self.comp[s], self.key[s] = job, comp, (job << 32) + fid
        self.paths[s, :] = -1
        self.paths[s, :len(path)] = path
        return s


def _field(name: str):
    def get(f):
        return getattr(f.tab, name)[f.s].item() if f.s >= 0 else f.own[name]

    def put(f, v):
        if f.s >= 0:
            getattr(f.tab, name)[f.s] = v
        else:
            f.own[name] = v
    return property(get, put)


class Flow:
    """An open flow: who and where (attributes), and its numbers (properties over its FlowTable
    row; a removed flow keeps a copy of them)."""
    __slots__ = ("fid", "job", "src", "dst", "path", "tab", "s", "own")

    def __init__(self, fid: int, job: int, src: int, dst: int, path: np.ndarray, size: float, t: float,
                 tab: FlowTable, comp: int = -1) -> None:
        self.fid, self.job, self.src, self.dst, self.path = fid, job, src, dst, path
        self.tab, self.s, self.own = tab, tab.alloc(fid, path, float(size), t, job, comp), None

    def detach(self) -> None:
        """The flow is removed: keep its numbers, give its row back."""
        tab, s = self.tab, self.s
        self.own = {"left": float(tab.left[s]), "rate": float(tab.rate[s]), "t": float(tab.t[s]),
                    "cap": float(tab.cap[s]), "prio": int(tab.prio[s])}
        tab.fid[s] = -1
        tab.comp[s] = -1
        tab.free.append(s)
        self.s = -1

    left, rate, t, cap, prio = (_field(k) for k in ("left", "rate", "t", "cap", "prio"))


@dataclass
class JobState:
    spec: JobSpec
    servers: list[int] = field(default_factory=list)  # host indices, first = the PS for kind "ps"
    gpus_on: list[int] = field(default_factory=list)
    start_s: float | None = None
    end_s: float | None = None
    done_iters: int = 0
    phase: int = 0  # index into phases
    phases: list = field(default_factory=list)  # an iteration's exchange: [[(src, dst, bytes), ...], ...]
    links: tuple = ()  # every link the exchange uses
    open_flows: int = 0
    ff: tuple | None = None  # fast-forward: (anchor time, iterations done then, period, phase durations, rates)
    ff_ver: int = 0
    ff_end: float = math.inf  # when a fast-forwarded job ends
    ce_at: float = math.inf  # its pending compute end
    ce_ver: int = 0  # COMPUTE_END events carry it: a parked job's pending one is void
    parked_until: float | None = None  # parked with its component until then
    park_steady: bool = False  # ... by --steady (a start on its links interrupts it)
    # --iter-model other than serial (ring jobs on several servers): paper 003's iteration time at the
    # rate its last exchange got (ClusterSim.overlap_compute)
    tab: pace.IterTable | None = None
    ex_start: float = 0.0  # when its exchange (this or the last) started
    ex_wire: float = 0.0  # bytes each ring flow carries an iteration
    ex_B: float = 0.0  # its last exchange's rate: ex_wire / its duration (bytes/s)
    min_iter_s: float = 0.0  # the least an iteration of it can take (horizon)


def place(name: str, free: np.ndarray, n: int, rng: np.random.Generator,
          server_load: np.ndarray | None = None, gpus_per_server: int | None = None) -> list[tuple[int, int]] | None:
    """(server, GPUs) for a job of ``n`` GPUs on servers with ``free`` GPUs each, or None if it does
    not fit: hostctl_lab.sim.placement.place_free (ff, pack, ls, rand, lwf<k>; the one placement
    module of the lab)."""
    err = gpu_placement.exclusive_name(name)
    if err or name == "sjfbco":
        raise ConfigError(err or "sjfbco is a batch placement: ClusterSim runs it over the whole queue")
    return gpu_placement.place_free(name, free, n, rng, gpus_per_server, server_load)


def exchange(spec: JobSpec, servers: list[int]) -> list[list[tuple[int, int, float]]]:
    """An iteration's exchange as phases of (src, dst, bytes) flows. Ring all-reduce over the worker
    servers: one phase, server k to server k+1, 2(S-1)/S x size each. Parameter servers: a push (every
    worker server sends size/P to each of the P servers) then a pull (the reverse); traffic within a
    host is free."""
    size = spec.size
    if spec.kind == "ps":
        ps = list(spec.ps_hosts) or servers[:1]
        workers = list(dict.fromkeys(spec.hosts)) if spec.hosts else servers
        push = [(w, p, size / len(ps)) for w in workers for p in ps if w != p]
        return [push, [(b, a, n) for a, b, n in push]]
    ring = list(dict.fromkeys(spec.hosts)) if spec.hosts else servers
    n = len(ring)
    return [[(ring[k], ring[(k + 1) % n], 2 * (n - 1) / n * size) for k in range(n)]]


def mean_iteration(e, warm: int, n: int) -> float | None:
    """--steady's measure of a job's mean iteration time from its iteration ends ``e`` ((time,
    iterations done) pairs): over the window after ``warm`` ends, once it has at least ``n`` ends and
    its two halves agree to STEADY_AGREE (a slow beat between jobs shows as halves that differ; the
    window grows and its halves converge), or it has grown to STEADY_MAX_WINDOW x n iterations. None:
    not yet. Iterations, not ends, are counted: an exact park in the window moves both on together."""
    if len(e) - 1 - warm < max(n, 2):  # (each half at least one iteration)
        return None
    m = e[-1][1] - e[warm][1]
    h = (warm + len(e) - 1) // 2
    m1 = (e[h][0] - e[warm][0]) / (e[h][1] - e[warm][1])
    m2 = (e[-1][0] - e[h][0]) / (e[-1][1] - e[h][1])
    if abs(m1 - m2) > STEADY_AGREE * max(m1, m2) and m < STEADY_MAX_WINDOW * n:
        return None
    return (e[-1][0] - e[warm][0]) / m


def confirm_iteration(e, warm: int, n: int, T0: float) -> float | bool | None:
    """--steady's shorter check after a job's component changed: its mean over the ``n`` iterations
    after ``warm`` ends (as mean_iteration counts them) against ``T0``, its mean from before the
    change. T0 when they agree to STEADY_AGREE, False when they do not (the job is measured in full),
    None: not yet."""
    if len(e) - 1 - warm < n:
        return None
    m = (e[warm + n][0] - e[warm][0]) / (e[warm + n][1] - e[warm][1])
    return T0 if abs(m - T0) <= STEADY_AGREE * T0 else False


def slow_window_mean(e, since: float) -> float | None:
    """--steady's quorum for a slow job (fewer than a confirm's iterations since its component changed,
    ``since`` seconds ago): its mean over the window after a warm-up of 2 ends (the iteration the change
    cut, one whole one), once that window holds at least 2 iterations and spans at least SLOW_SPAN of
    ``since``; else None."""
    if len(e) < 5 or e[-1][1] - e[2][1] < 2 or e[-1][0] - e[2][0] < SLOW_SPAN * since:
        return None
    return (e[-1][0] - e[2][0]) / (e[-1][1] - e[2][1])


def window_mean(e, warm: int, n: int) -> float | None:
    """A job's mean iteration time over its window after ``warm`` ends (as mean_iteration counts), if
    the window holds at least ``n`` iterations; else None (--steady's quorum)."""
    if len(e) - 1 - warm < 1 or e[-1][1] - e[warm][1] < n:
        return None
    return (e[-1][0] - e[warm][0]) / (e[-1][1] - e[warm][1])


class ClusterSim:
    iter_model = "serial"  # (a class default too: a state pickled before --iter-model existed still loads)

    def __init__(self, fabric: Fabric, jobs: list[JobSpec], *, placement: str = "ff", order: str = "fifo",
                 network: str = "fifo", seed: int = 0, gpus_per_server: int = 8, until_s: float | None = None,
                 bands: int = 6, rr_interval_s: float = 2.0, cap_bps: int | None = None,
                 backfill: bool = True, fast_forward: bool = True, park: bool = True, steady: int = 0,
                 jitter: float = 0.0, adadual_eta: float | None = None, slot_s: float = 0.06,
                 reconfirm: bool = True, quorum: bool | float = True, iter_model: str = "serial") -> None:
        for what, v, ok in (("order", order, ORDERS), ("network", network, NETWORKS)):
            if v not in ok and not (what == "network" and sched.is_admission(v)):
                raise ConfigError(f"unknown {what} {v!r}: choose {', '.join(ok)}")
        err = gpu_placement.exclusive_name(placement)
        if err:
            raise ConfigError(err)
        if iter_model not in ITER_MODELS:
            raise ConfigError(f"unknown --iter-model {iter_model!r}: choose {', '.join(ITER_MODELS)}")
        if iter_model != "serial":
            if network in mlccnet.POLICIES or sched.is_admission(network) or network not in NETWORKS:
                raise ConfigError(f"--iter-model {iter_model} works with the networks fifo, one, rr, cap and "
                                  f"prio-every-link, not {network} (it plans from the jobs' compute times): "
                                  "use --iter-model serial")
            for j in jobs:
                if j.kind == "ring":
                    try:
                        pace.canonical_name(j.model)
                    except ValueError:
                        raise ConfigError(f"--iter-model {iter_model} needs models that paper 003 profiles "
                                          f"({', '.join(pace.MODELS)}): job {j.name} is {j.model!r}; use "
                                          "--iter-model serial") from None
        self.iter_model = iter_model
        if network == "cap" and not cap_bps:
            raise ConfigError("network cap needs a cap: --cap RATE (e.g. 5gbit)")
        big = [j.name for j in jobs if j.gpus > gpus_per_server * fabric.n_hosts and not j.hosts]
        if big:
            raise ConfigError(f"job {big[0]} needs more GPUs than the cluster has "
                              f"({fabric.n_hosts} servers x {gpus_per_server}): use more --servers")
        self.fab, self.placement, self.order, self.network = fabric, placement, order, network
        self.rng = np.random.default_rng(seed)
        if not 0 <= jitter < 1:
            raise ConfigError(f"--jitter must be in [0, 1), got {jitter}")
        self.gps, self.until, self.backfill = gpus_per_server, until_s, backfill
        self.fast_forward = fast_forward and jitter == 0  # jittered iterations do not repeat
        self.parking = park and self.fast_forward
        if not isinstance(steady, int) or steady < 0:
            raise ConfigError(f"--steady must be a whole number of iterations >= 0 (0 = exact), got {steady}")
        self.steady = steady if self.parking else 0
        self.job_T: dict[int, float] = {}  # --steady: a job's measured mean iteration time
        # its iteration ends while it is measured: (time, iterations done); an exact park in the window
        # moves both on together
        self.job_ends: dict[int, list[tuple[float, int]]] = {}
        self.job_ends_new: set[int] = set()  # jobs whose job_ends grew since park_steady last read them
        # --steady: a job's mean from before its component last changed, to be confirmed by a shorter
        # window (reconfirm; see park_steady)
        self.job_T_prev: dict[int, float] = {}
        self.reconfirm = reconfirm
        # --steady's quorum: the share of a component's jobs with means at which the rest are taken at
        # their windows so far (True: STEADY_QUORUM, False: none, a share: that share and slow jobs
        # at 2 iterations; see park_steady)
        if quorum is not True and quorum is not False and not (isinstance(quorum, (int, float))
                                                                 and 0 < quorum <= 1):
            raise ConfigError(f"--steady-quorum must be a share in (0, 1] (0.9 is the default; 1: every job "
                              f"measures in full), got {quorum}")
        self.quorum = quorum
        self.job_t0: dict[int, float] = {}  # --steady: when a measuring job's component last changed
        self.job_carry: dict[int, float] = {}  # the fraction of an iteration its parks rounded away
        self.park_hist: dict[tuple, list] = {}  # (component, job, shape) -> [(time, floats, iterations done)]
        self.parked: dict[int, tuple] = {}  # park id -> (component's jobs, the job whose exchange waits, saved)
        self.next_park = 0
        self.local_ends: list[tuple[float, int]] = []  # (end, job) of running one-server jobs (a heap)
        self.next_arrival = 0  # index into self.jobs (sorted by arrival) of the next arrival
        self.parked_links: dict[int, int] = {}  # link -> the park that holds it
        self.next_tick = math.inf
        self.tick_asleep = False  # the network policy's ticks wait for the next flow (NetPolicy.next_tick)
        self.jitter = jitter
        self.jrng = np.random.default_rng([seed, 7])
        self.reserved: dict[int, int] = {}  # link -> the fast-forwarded job that has it
        self.link_users = np.zeros(fabric.n_links, dtype=np.int64)  # running jobs whose exchange uses the link
        self.jobs = [JobState(j) for j in sorted(jobs, key=lambda j: (j.arrival_s, j.name))]
        self.free = np.full(fabric.n_hosts, gpus_per_server, dtype=np.int64)
        self.queue: list[int] = []
        self.finished = 0
        self.now = 0.0
        self.started = False
        self.heap: list = []
        self.seq = 0
        self.flows: dict[int, Flow] = {}
        self.ft = FlowTable()  # their numbers (rows)
        self._loc = np.full(fabric.n_links, -1, dtype=np.int64)  # the compiled kernel's scratch
        # solve_numpy's rates by the solve's inputs (paths, caps, classes): the same flows on the same
        # paths come back every iteration, and the kernel is a function of those alone
        self._memo: dict[bytes, np.ndarray] = {}
        self._memo_bytes = 0
        self.next_fid = 0
        # job -> its open flows: flow id -> row, in flow id order (flows are added in id order; a park
        # empties it, its resume adds them back sorted)
        self.job_flows: dict[int, dict[int, int]] = {}
        self.dirty: set[int] = set()  # jobs whose component must be re-solved
        self.comp_of: dict[int, int] = {}  # running networked job -> its component (jobs joined by shared links)
        self.comps: dict[int, tuple[int, ...]] = {}  # component -> its jobs, in index order
        self.tok = 0  # the last re-solve's token (FLOW_END events carry it)
        self.comp_tok: dict[int, int] = {}  # component -> its last solve's token (a park voids it too)
        self.running_net: set[int] = set()  # running jobs on more than one server
        self.stats = {"events": 0, "solves": 0, "full_solves": 0, "solved_flows": 0, "max_active_flows": 0,
                      "ticks": 0, "fast_forwards": 0, "resumes": 0, "parks": 0, "steady_parks": 0,
                      "interrupted_parks": 0, "steady_confirmed": 0, "steady_remeasured": 0, "steady_quorum": 0,
                      "memo_hits": 0, "parked_s": 0.0}
        # communication admission (--network adadual / srsf<n>: hostctl_lab.sim.sched.Admission)
        # (adadual_eta: the rule's eta in s/byte, None: hostctl.core.adadual's; 0 gives the threshold 0.5
        # at which start-now and wait tie in this engine's fluid sharing, which has no contention loss)
        self.adm = (sched.Admission(self, network, **({} if adadual_eta is None else {"eta": adadual_eta}))
                    if sched.is_admission(network) else None)
        # policy state
        self.driver = None
        self.host_jobs: dict[int, set[int]] = {}
        self.assign: dict[int, dict[str, int]] = {}
        self.epoch = 0
        self.rr_interval_s, self.cap_bps = rr_interval_s, cap_bps
        if network in ("one", "rr", "prio-every-link"):
            from hostctl.config import Config
            from hostctl.policy.driver import HostDriver

            pol = "one" if network == "prio-every-link" else network
            self.driver = HostDriver(Config(policy=pol, bands=bands, rr_interval_s=rr_interval_s), None,
                                     link_rate_bps=int(fabric.capacity.max() * 8))
        # mlcc, mlcc-switch, mcs, ccml: hooks into the policy object (hostctl_lab.sim.mlccnet)
        self.netpol = mlccnet.make(network, self, slot_s)
        if self.netpol is not None and not self.netpol.fast_forward_ok:
            self.fast_forward = False
        if self.adm is not None or (self.netpol is not None and not self.netpol.steady_ok):
            # waiting exchanges, stage caps, held exchanges, a table's arrival order: state a park does not save
            self.parking = False
            self.steady = 0
        elif self.netpol is not None:
            # per-slot caps: a state that repeats need not repeat the slots (no exact park); --steady
            # parks take the component's connections out of the policy's slots (NetPolicy.parked)
            self.parking = self.parking and bool(self.steady)

    # ---------------------------------------------------------------- events
    def push(self, t: float, kind: int, a: int = 0, b: int = 0) -> None:
        self.seq += 1
        heapq.heappush(self.heap, (t, self.seq, kind, a, b))

    def run(self, progress=None, every: int = 10000) -> dict:
        """Simulate to the end (or ``until_s``). ``progress(sim)`` is called every ``every`` events; it
        returns True to stop the run there (a wall-clock limit, say)."""
        wall0 = time.perf_counter()
        if not self.started:  # a second run() (after a stop, or on an unpickled sim) goes on from now
            self.started = True
            for i, j in enumerate(self.jobs):
                self.push(j.spec.arrival_s, ARRIVAL, i)
            if self.network == "rr":
                self.next_tick = self.rr_interval_s
                self.push(self.rr_interval_s, TICK)
            if self.netpol is not None and self.netpol.tick_s:
                self.push(self.netpol.tick_s, TICK, 1)
        while self.heap:
            if self.until is not None and self.heap[0][0] > self.until:  # left on the heap: run() goes on
                self.now = self.until
                break
            t, _, kind, a, b = heapq.heappop(self.heap)
            self.now = t
            self.stats["events"] += 1
            if kind == ARRIVAL:
                self.next_arrival = a + 1
                self.queue.append(a)
                self.schedule()
            elif kind == COMPUTE_END:
                if self.jobs[a].ce_ver == b and not (self.parking and self.try_park(a)):
                    self.start_exchange(a)
            elif kind == PARK_END:
                if a in self.parked:  # (not a steady park that a start interrupted)
                    self.unpark(a)
            elif kind == FLOW_END:  # the first flow of a component's last solve ends
                if self.comp_tok.get(self.comp_of.get(a)) == b:
                    self.settle(a)
            elif kind == LOCAL_END:
                self.finish_job(a)
            elif kind == FF_END:
                j = self.jobs[a]
                if j.ff is not None and j.ff_ver == b:
                    self.release(a)
                    j.done_iters = j.spec.iterations
                    self.finish_job(a)
            elif kind == TICK and a == 1:  # the network policy's period (mlccnet)
                self.stats["ticks"] += 1
                self.dirty |= self.netpol.tick()
                nxt = self.netpol.next_tick() if self.finished < len(self.jobs) else None
                if nxt is None:
                    self.tick_asleep = True  # set_policy wakes it at the next flow's start
                else:
                    self.push(max(nxt, self.now), TICK, 1)
            elif kind == TICK:
                self.stats["ticks"] += 1
                self.tick()
                if self.finished < len(self.jobs):
                    self.next_tick = self.now + self.rr_interval_s
                    self.push(self.next_tick, TICK)
            if not self.heap or self.heap[0][0] > self.now:
                self.resolve()
            if self.finished == len(self.jobs):
                break
            if progress is not None and self.stats["events"] % every == 0 and progress(self):
                self.stats["stopped_early"] = True
                break
        return self.report(time.perf_counter() - wall0)

    # ---------------------------------------------------------------- scheduling
    def remaining_service(self, i: int) -> float:
        j = self.jobs[i]
        return (j.spec.iterations - j.done_iters) * j.spec.ref_iter_s(self.gps) * j.spec.gpus

    def schedule(self) -> None:
        if self.order == "srsf":
            self.queue.sort(key=lambda i: (self.remaining_service(i), self.jobs[i].spec.arrival_s, i))
        elif self.order == "ada-srsf":
            self.queue.sort(key=lambda i: (sched.ada_key(self, i), self.jobs[i].spec.arrival_s, i))
        if self.placement == "sjfbco":  # a batch rule over the whole queue (hostctl_lab.sim.sched)
            batch = [i for i in self.queue if not self.jobs[i].spec.hosts]
            plan = dict(sched.sjfbco_starts(self, batch))
        loads = sched.server_loads(self) if self.placement.startswith("lwf") else None
        started = []
        for i in self.queue:
            spec = self.jobs[i].spec
            if spec.hosts:  # a given placement (scenario files): no GPU accounting
                started.append(i)
                self.start_job(i, [(h, 0) for h in dict.fromkeys(spec.hosts + spec.ps_hosts)])
                continue
            if self.placement == "sjfbco":
                p = plan.get(i)
            else:
                p = place(self.placement, self.free, spec.gpus, self.rng, loads, self.gps)
            if p is None:
                if not self.backfill:
                    break
                continue
            started.append(i)
            self.start_job(i, p)
            if loads is not None:  # LWF's L_S counts the job just placed (paper 000, Algorithm 3)
                for s, k in p:
                    loads[s] += sched.remaining_s(self, i) * k
        if started:
            s = set(started)
            self.queue = [i for i in self.queue if i not in s]

    def start_job(self, i: int, p: list[tuple[int, int]]) -> None:
        j = self.jobs[i]
        j.servers = [s for s, _ in p]
        j.gpus_on = [k for _, k in p]
        for s, k in p:
            self.free[s] -= k
        j.start_s = self.now
        if len(j.servers) == 1:
            end = self.now + j.spec.iterations * j.spec.compute_s
            self.push(end, LOCAL_END, i)
            heapq.heappush(self.local_ends, (end, i))
            return
        for s in j.servers:
            self.host_jobs.setdefault(s, set()).add(i)
        j.phases = (self.netpol and self.netpol.exchange(j.spec, j.servers)) or exchange(j.spec, j.servers)
        j.links = tuple(sorted({int(ln) for ph in j.phases for a, b, _ in ph for ln in self.fab.path(a, b)}))
        if self.iter_model != "serial" and j.spec.kind == "ring":
            self.overlap_setup(j)
        for ln in j.links:  # a steady park on these links comes back to now (an exact one cannot be here)
            pid = self.parked_links.get(ln)
            if pid is not None:
                if self.parked[pid][4] is None:  # try_park's horizon rules this out
                    raise RuntimeError(f"internal: job {j.spec.name} starts on link {ln} of a parked component")
                self.interrupt(pid)
        for ln in j.links:  # a fast-forwarded job on these links comes back: it has company now
            self.link_users[ln] += 1
            other = self.reserved.get(ln)
            if other is not None:
                self.resume(other)
        self.running_net.add(i)
        self.rebuild_components(i)
        self.hosts_changed(j.servers)
        if self.netpol is not None:
            self.netpol.job_started(i)
        self.compute_until(i, self.now + self.compute_s(j))

    def finish_job(self, i: int) -> None:
        j = self.jobs[i]
        j.end_s = self.now
        self.finished += 1
        for s, k in zip(j.servers, j.gpus_on):
            self.free[s] += k
        if len(j.servers) > 1:
            for ln in j.links:
                self.link_users[ln] -= 1
            for s in j.servers:
                self.host_jobs[s].discard(i)
            self.running_net.discard(i)
            self.rebuild_components(i)
            self.hosts_changed(j.servers)
            if self.netpol is not None:
                self.netpol.job_finished(i)
        self.schedule()

    def compute_s(self, j: JobState) -> float:
        """One iteration's compute: compute_s (serial) or overlap_compute, times U(1 - jitter, 1 +
        jitter) with --jitter."""
        c = j.spec.compute_s if j.tab is None else self.overlap_compute(j)
        return c * (1 + self.jitter * (2 * self.jrng.random() - 1)) if self.jitter else c

    def overlap_setup(self, j: JobState) -> None:
        """--iter-model (not serial), a ring job starting on several servers: paper 003's table of its
        iteration time for its model over its ring's servers (one worker a server: the GPUs of a server
        reduce over NVLink), the least an iteration of it can take and its first iteration's rate (alone on its slowest link)."""
        j.tab = pace.iter_table(j.spec.model, len(j.phases[0]), self.iter_model)  # (cached by pace)
        j.ex_wire = float(j.phases[0][0][2])
        caps = self.fab.capacity[list(j.links)]
        # (no flow of it is faster than its fastest link; overlap_compute is at least the floor)
        j.min_iter_s = j.tab.off_channel_floor_s + j.ex_wire / float(caps.max())
        j.ex_B = float(caps.min())

    @staticmethod
    def overlap_compute(j: JobState) -> float:
        """The compute before a ring job's next exchange under --iter-model: its iteration time at the
        rate B its last exchange got (paper 003's T_iter(B): the exchange overlaps the backward pass)
        less that exchange's duration, at least the table's off-channel floor (a bound, not a clip, as
        busy_s(B) >= ex_wire / B: the channel carries the bytes plus a latency a transfer). A job that
        keeps getting B iterates in T_iter(B); its flows still go out in one burst after the compute
        (the engine's exchange)."""
        B = j.ex_B
        return max(j.tab.off_channel_floor_s, j.tab.iter_s(B) - j.ex_wire / B)

    # ---------------------------------------------------------------- iterations
    def start_exchange(self, i: int) -> None:
        j = self.jobs[i]
        if self.netpol is not None and self.netpol.hold(i):
            return
        if self.fast_forward and self.try_fast_forward(i):
            return
        if self.adm is not None and not self.adm.request(i):
            return  # waits: asked again when an exchange ends (Admission.release)
        j.phase = 0
        j.ex_start = self.now
        self.add_flows(i, j.phases[0])

    def exchange_done(self, i: int) -> None:
        j = self.jobs[i]
        if j.phase + 1 < len(j.phases):
            j.phase += 1
            self.add_flows(i, j.phases[j.phase])
            return
        if self.adm is not None:
            self.adm.release(i)
        if j.tab is not None:
            d = self.now - j.ex_start
            j.ex_B = j.ex_wire / d if d > 0 else math.inf
        j.done_iters += 1
        if self.steady and i not in self.job_T:
            self.job_ends.setdefault(i, []).append((self.now, j.done_iters))
            self.job_ends_new.add(i)
        if j.done_iters >= j.spec.iterations:
            self.finish_job(i)
        else:
            self.compute_until(i, self.now + self.compute_s(j))

    def compute_until(self, i: int, t: float) -> None:
        j = self.jobs[i]
        j.ce_at = t
        j.ce_ver += 1
        self.push(t, COMPUTE_END, i, j.ce_ver)

    # ---------------------------------------------------------------- fast-forward
    def try_fast_forward(self, i: int) -> bool:
        """At the start of an exchange: if every link of the job's exchange is its own, run the rest
        of its iterations in one step (see the module docstring)."""
        j = self.jobs[i]
        # no other running job's exchange uses the link (now or later): then no other job has a flow
        # on it or holds it fast-forwarded either
        if any(self.link_users[ln] != 1 for ln in j.links):
            return False
        durs, rates = [], []
        for pairs in j.phases:
            caps = np.array([self.flow_cap(i, a, sum(1 for x, _, _ in pairs if x == a)) for a, _, _ in pairs])
            # alone on its links, a job's classes matter only where they meet at one link: under
            # prio-every-link its flows from different hosts may differ in class; at a NIC they never do
            prio = ([self.assign.get(a, {}).get(j.spec.name, DEFAULT_CLASS) for a, _, _ in pairs]
                    if self.network == "prio-every-link" else None)
            r = self.rates([self.fab.path(a, b) for a, b, _ in pairs], caps, prio)
            if (r <= 0).any():
                return False
            rates.append(r)
            durs.append(float(max(nb / x for (_, _, nb), x in zip(pairs, r))))
        if j.tab is None:
            period = j.spec.compute_s + sum(durs)
        else:
            j.ex_B = j.ex_wire / sum(durs)
            period = self.overlap_compute(j) + sum(durs)
        j.ff = (self.now, j.done_iters, period, durs, rates)
        j.ff_ver += 1
        for ln in j.links:
            self.reserved[ln] = i
        left = j.spec.iterations - j.done_iters
        j.ff_end = self.now + (left - 1) * period + sum(durs)
        self.push(j.ff_end, FF_END, i, j.ff_ver)
        self.stats["fast_forwards"] += 1
        return True

    def release(self, i: int) -> None:
        j = self.jobs[i]
        j.ff = None
        j.ff_ver += 1
        j.ff_end = math.inf
        for ln in j.links:
            if self.reserved.get(ln) == i:
                del self.reserved[ln]

    def resume(self, i: int) -> None:
        """Bring a fast-forwarded job back to the present and simulate it flow by flow again."""
        j = self.jobs[i]
        anchor, base, period, durs, rates = j.ff
        self.release(i)
        self.stats["resumes"] += 1
        e = max(0.0, self.now - anchor)
        k = int(e // period)
        w = e - k * period
        j.done_iters = base + k
        j.ex_start = self.now - w  # (a period starts with the exchange)
        for p, d in enumerate(durs):
            if w < d:
                pairs = [(a, b, nb - r * w) for (a, b, nb), r in zip(j.phases[p], rates[p])]
                pairs = [x for x in pairs if x[2] > DONE_BYTES]
                if pairs:
                    j.phase = p
                    self.add_flows(i, pairs)
                    return
            w -= d
        # past the exchange: computing
        j.done_iters += 1
        if j.done_iters >= j.spec.iterations:
            self.finish_job(i)
        else:
            c = j.spec.compute_s if j.tab is None else period - sum(durs)
            self.compute_until(i, self.now + max(0.0, c - w))

    # ---------------------------------------------------------------- parking
    def comp_state(self, jobs: tuple, a: int) -> tuple[tuple, list[float]]:
        """A component's state now, as its shape (each job's phase and open flows, or computing) and
        its numbers (bytes left per flow, compute left per job)."""
        shape, rows, rest, held = [a, self.epoch], [], [], []
        ft, flows = self.ft, self.flows
        for k in jobs:
            fids = self.job_flows.get(k)
            if fids:
                shape.append((self.jobs[k].phase, tuple((flows[x].src, flows[x].dst) for x in fids)))
                rows.extend(fids.values())
                if self.jobs[k].tab is not None:  # its next compute depends on when its exchange began
                    held.append(self.now - self.jobs[k].ex_start)
            else:
                shape.append(None)
                rest.append(self.jobs[k].ce_at - self.now)
        # (the flows' bytes left in job order, then the computing jobs' compute left: one order per shape)
        vals = (ft.left[rows] - ft.rate[rows] * (self.now - ft.t[rows])).tolist() + rest if rows else rest
        return tuple(shape), vals + held

    def horizon(self, jobs: set, ticks: bool) -> float:
        """Until when nothing outside the component ``jobs`` can change it: no job can start on its
        links (arrivals; ends of other jobs, bounded below by their iterations left x compute) and no
        policy tick."""
        t = math.inf if self.until is None else self.until
        if self.next_arrival < len(self.jobs):
            t = min(t, self.jobs[self.next_arrival].spec.arrival_s)
        while self.local_ends and self.jobs[self.local_ends[0][1]].end_s is not None:
            heapq.heappop(self.local_ends)
        if self.local_ends:
            t = min(t, self.local_ends[0][0])
        if ticks:
            t = min(t, self.next_tick)
        for i in self.running_net:
            if i in jobs:
                continue
            j = self.jobs[i]
            if j.ff is not None:
                t = min(t, j.ff_end)
            else:  # (a steady park may be interrupted: its jobs may end from now on)
                base = self.now if j.parked_until is None or j.park_steady else j.parked_until
                lo = j.spec.compute_s if j.tab is None else j.min_iter_s
                t = min(t, base + max(0, j.spec.iterations - j.done_iters - 1) * lo)
        return t

    def try_park(self, a: int) -> bool:
        """At job a's compute end: park its component if its iterations repeat (exactly: a state seen
        before) or, with ``steady``, at their measured mean rates (see the module docstring)."""
        c = self.comp_of.get(a)
        if c is None or len(self.comps[c]) < 2:
            return False
        jobs = self.comps[c]
        # exact: a repeat of phases, bytes and compute is a repeat of everything only with no policy state
        if self.netpol is None and len(jobs) <= PARK_MAX_JOBS and self.park_repeat(jobs, a):
            return True
        return bool(self.steady) and self.park_steady(jobs, a)

    def park_repeat(self, jobs: tuple, a: int) -> bool:
        shape, vals = self.comp_state(jobs, a)
        key = (jobs, shape)
        done = [self.jobs[k].done_iters for k in jobs]
        if key not in self.park_hist and len(self.park_hist) >= PARK_KEYS:
            self.park_hist.clear()  # many shapes, none repeating: memory stays bounded
        hist = self.park_hist.setdefault(key, [])
        for t0, v0, d0 in reversed(hist):
            if len(v0) == len(vals) and all(abs(x - y) <= 1e-7 + 1e-12 * abs(x) for x, y in zip(vals, v0)):
                break
        else:
            hist.append((self.now, vals, done))
            del hist[:-PARK_HISTORY]
            return False
        period = self.now - t0
        dn = [x - y for x, y in zip(done, d0)]
        until = self.horizon(set(jobs), ticks=True)
        k = int(min((until - self.now) / period, 1e15)) if until < math.inf else 10**15
        while k > 0 and self.now + k * period >= until:
            k -= 1
        for i, d in zip(jobs, dn):
            if d > 0:
                k = min(k, (self.jobs[i].spec.iterations - self.jobs[i].done_iters - 1) // d - 1)
        if k < PARK_MIN_PERIODS:
            hist.append((self.now, vals, done))
            del hist[:-PARK_HISTORY]
            return False
        self.park(jobs, a, self.now + k * period, [k * d for d in dn], (key, vals))
        return True

    def park_steady(self, jobs: tuple, a: int) -> bool:
        """Extrapolate the component at each job's mean iteration time since its jobs last changed
        (after a warm-up of steady // 5, at least 2): a window of at least ``steady`` iterations whose
        two halves agree to STEADY_AGREE, or that has grown to STEADY_MAX_WINDOW x steady. With
        ``quorum``, once STEADY_QUORUM of the component's jobs have their means, the others (slow
        iterations, or a beat that keeps their halves apart) are taken at their windows' means so far
        if each holds at least steady // 5 iterations: the component is not held for its stragglers,
        and a mean's error moves only its own job (each job advances by the span over its own mean)."""
        n, warm = self.steady, max(2, self.steady // 5)
        short = max(2, n // 5)  # a confirm's window, and the least a quorum takes (of a slow job, 2: a share)
        share = STEADY_QUORUM if self.quorum is True else float(self.quorum)
        waiting = []
        for i in jobs:
            if i in self.job_T:
                continue
            if i not in self.job_ends_new:  # the same ends as when it was last found not ready
                waiting.append(i)
                continue
            self.job_ends_new.discard(i)
            e = self.job_ends.get(i, ())
            T = None
            if i in self.job_T_prev:
                seen = confirm_iteration(e, warm, short, self.job_T_prev[i])
                if seen is not None:  # confirmed (its old mean), or False: moved, measured in full
                    del self.job_T_prev[i]
                    self.stats["steady_confirmed" if seen else "steady_remeasured"] += 1
                    T = seen or None
            if T is None:
                T = mean_iteration(e, warm, n)
            if T is None:
                waiting.append(i)
                continue
            self.job_T[i] = T
            del self.job_ends[i]
        if waiting:
            if not share or len(waiting) > (1 - share) * len(jobs):
                return False
            late = {}
            t0 = self.__dict__.get("job_t0", {})  # (a state pickled before it existed)
            med = None
            for i in waiting:
                e = self.job_ends.get(i, ())
                T = window_mean(e, warm, short)
                if T is None and i in t0 and self.quorum is not True:
                    T = slow_window_mean(e, self.now - t0[i])
                    if T is not None:
                        if med is None:
                            med = float(np.median([self.job_T[k] for k in jobs if k in self.job_T]))
                        if T < SLOW_RATIO * med:
                            T = None
                if T is None:
                    return False
                late[i] = T
            for i, T in late.items():
                self.job_T[i] = T
                del self.job_ends[i]
                self.job_ends_new.discard(i)
                self.job_T_prev.pop(i, None)
            self.stats["steady_quorum"] += len(late)
        T, carry = self.job_T, self.job_carry
        # until its first job's end: a job that starts on its links before interrupts it (start_job)
        span = (math.inf if self.until is None else self.until) - self.now
        for i in jobs:
            j = self.jobs[i]
            span = min(span, (j.spec.iterations - j.done_iters - 2) * T[i])
        span *= 1 - 1e-9
        if span < PARK_MIN_PERIODS * max(T[i] for i in jobs):
            return False
        adv, info = [], []
        for i in jobs:
            c0 = carry.get(i, 0.0)
            x = c0 + span / T[i]  # rounded, the remainder carried: unbiased
            adv.append(math.floor(x + 0.5))
            carry[i] = x - adv[-1]
            info.append((c0, T[i]))
        self.park(jobs, a, self.now + span, adv, None, (self.now, info))
        self.stats["steady_parks"] += 1
        return True

    def park(self, jobs: tuple, a: int, end: float, adv: list[int], state, steady=None) -> None:
        """Take the component off the fabric until ``end``: its flows (bytes left as now) and compute
        times are saved, its pending events voided, its jobs ``adv`` iterations further on."""
        saved = []
        self.tok += 1  # voids the component's pending FLOW_END
        for i, d in zip(jobs, adv):
            j = self.jobs[i]
            fids = self.job_flows.get(i)
            if fids:
                fl = [self.flows.pop(x) for x in sorted(fids)]
                self.ft.comp[list(fids.values())] = -1
                fids.clear()
                for f in fl:
                    f.left -= f.rate * (self.now - f.t)
                    f.t = self.now
                saved.append((i, fl, self.now - j.ex_start))  # (how long its exchange has run)
            else:
                saved.append((i, None, j.ce_at - self.now))
                j.ce_ver += 1  # voids its pending COMPUTE_END
            j.done_iters += d
            j.parked_until = end
            j.park_steady = steady is not None
            self.dirty.discard(i)
        self.comp_tok[self.comp_of[jobs[0]]] = self.tok  # voids its pending FLOW_END
        pid = self.next_park
        self.next_park += 1
        for i in jobs:
            self.parked_links.update(dict.fromkeys(self.jobs[i].links, pid))
        self.parked[pid] = (jobs, a, saved, state, None if steady is None else (steady, adv))
        if self.netpol is not None:
            self.netpol.parked(jobs)
        self.push(end, PARK_END, pid)
        self.stats["parks"] += 1
        self.stats["parked_s"] += end - self.now

    def interrupt(self, pid: int) -> None:
        """A job starts on the links of steady park ``pid`` before its end: its jobs come back now,
        each moved on by the iterations of the time parked so far at its measured rate (the rest of
        the advance taken back, the remainder carried), then resume as at the park's end."""
        jobs, _, _, _, ((t0, info), adv) = self.parked[pid]
        self.stats["parked_s"] -= self.jobs[jobs[0]].parked_until - self.now
        for i, (c0, T), d in zip(jobs, info, adv):
            x = c0 + (self.now - t0) / T
            k = math.floor(x + 0.5)
            self.jobs[i].done_iters -= d - k
            self.job_carry[i] = x - k
        self.stats["interrupted_parks"] += 1
        self.unpark(pid)

    def unpark(self, pid: int) -> None:
        jobs, a, saved, state, _ = self.parked.pop(pid)
        for i, fl, rel in saved:
            j = self.jobs[i]
            j.parked_until = None
            for ln in j.links:
                self.parked_links.pop(ln, None)
            if fl:
                j.ex_start = self.now - rel
                for f in fl:
                    f.t = self.now
                    if self.driver is not None:  # a rotation may have moved the job's band
                        f.prio = self.assign.get(f.src, {}).get(j.spec.name, DEFAULT_CLASS)
                    self.flows[f.fid] = f
                    self.job_flows[i][f.fid] = f.s
                    self.ft.comp[f.s] = self.comp_of.get(i, -1)
                self.dirty.add(i)
            elif i != a:
                self.compute_until(i, self.now + rel)
        if state is not None:  # the state is the one matched: a period from now it will match again
            key, vals = state
            self.park_hist[key] = [(self.now, vals, [self.jobs[k].done_iters for k in jobs])]
        if self.netpol is not None:
            self.netpol.unparked(jobs)
            if self.tick_asleep and self.netpol.next_tick() is not None:
                self.wake_ticks()
        self.start_exchange(a)

    # ---------------------------------------------------------------- flows
    def add_flows(self, i: int, pairs) -> None:
        # (no fast-forwarded job holds these links: start_job resumed any that shared one)
        fl = self.job_flows.setdefault(i, {})
        for src, dst, nbytes in pairs:
            f = Flow(self.next_fid, i, src, dst, self.fab.path(src, dst), nbytes, self.now, self.ft,
                     self.comp_of.get(i, -1))
            self.next_fid += 1
            self.flows[f.fid] = f
            fl[f.fid] = f.s
            self.set_policy(f)
        self.dirty.add(i)
        self.jobs[i].open_flows += len(pairs)
        if self.adm is not None:
            self.adm.mark(i)
        self.stats["max_active_flows"] = max(self.stats["max_active_flows"], len(self.flows))

    def remove_flow(self, f: Flow) -> None:
        del self.flows[f.fid]
        self.job_flows[f.job].pop(f.fid, None)
        self.dirty.add(f.job)
        if self.netpol is not None:
            self.netpol.flow_ended(f)
        f.detach()
        j = self.jobs[f.job]
        j.open_flows -= 1
        if j.open_flows == 0:
            self.exchange_done(f.job)

    def rebuild_components(self, changed: int) -> None:
        """Jobs joined by shared links (union-find over the running networked jobs' exchange links);
        rebuilt when a networked job (``changed``) starts or ends. Every job with flows is re-solved
        after. With --steady, the jobs of its component (or of the ones it leaves) measure again."""
        parent: dict[int, int] = {}

        def find(x: int) -> int:
            while parent[x] != x:
                parent[x] = parent[parent[x]]
                x = parent[x]
            return x

        users: dict[int, list[int]] = {}  # link -> the running jobs whose exchange uses it
        for i in self.running_net:
            parent[i] = i
        for i in self.running_net:
            for ln in self.jobs[i].links:
                u = users.setdefault(ln, [])
                if u:
                    ra, rb = find(i), find(u[0])
                    if ra != rb:
                        parent[ra] = rb
                u.append(i)
        self.comp_of = {i: find(i) for i in self.running_net}
        comps: dict[int, list[int]] = {}
        for i, c in sorted(self.comp_of.items()):
            comps.setdefault(c, []).append(i)
        self.comps = {c: tuple(v) for c, v in comps.items()}
        for c, v in comps.items():  # the open flows' rows follow their jobs' components
            for i in v:
                if self.job_flows.get(i):
                    self.ft.comp[list(self.job_flows[i].values())] = c
        if self.park_hist:  # states of components that no longer exist
            now = set(self.comps.values())
            self.park_hist = {k: v for k, v in self.park_hist.items() if k[0] in now}
        if self.steady:
            # the component it joined, or the ones it leaves behind (those of its former neighbours)
            touch = {changed} | {k for ln in self.jobs[changed].links for k in users.get(ln, ())}
            near = {k for x in touch if x in self.comp_of for k in self.comps[self.comp_of[x]]} | {changed}
            t0 = self.__dict__.setdefault("job_t0", {})  # (a state pickled before it existed)
            for k in near:
                T = self.job_T.pop(k, None)
                if T is not None and self.reconfirm:
                    self.job_T_prev[k] = T
                self.job_ends.pop(k, None)
                self.job_ends_new.discard(k)
                if k in self.comp_of:
                    t0[k] = self.now
                else:
                    t0.pop(k, None)
            self.job_T_prev.pop(changed, None)  # (it starts or ends)
        self.dirty.update(i for i in self.running_net if self.job_flows.get(i))

    def comp_flows(self, jobs) -> list[Flow]:
        comps = {self.comp_of[i] for i in jobs if i in self.comp_of}
        return [self.flows[fid] for c in comps for i in self.comps[c] for fid in self.job_flows.get(i, ())]

    def comp_rows(self, c: int) -> np.ndarray:
        """The rows of component c's open flows in the flow table, job by job (index order), each job's
        by flow id."""
        ft = self.ft
        if kernel.COMPILED:
            return kernel._kernel_nb.select_rows(ft.comp, ft.key, c)
        rows = np.flatnonzero(ft.comp == c)
        return rows[np.argsort(ft.key[rows], kind="stable")]

    def settle(self, i: int) -> None:
        """A flow of job i's component ends: bring the component's bytes up to now, end every flow with
        nothing left."""
        c = self.comp_of.get(i)
        self.dirty.add(i)
        if c is None:
            return
        ft, now = self.ft, self.now
        if kernel.COMPILED:  # the same, in one compiled call
            done = kernel._kernel_nb.settle_rows(ft.comp, ft.key, ft.fid, ft.left, ft.rate, ft.t, c, now,
                                                 DONE_BYTES).tolist()
        else:
            idx = self.comp_rows(c)
            rate = ft.rate[idx]
            left = ft.left[idx] - rate * (now - ft.t[idx])
            ft.left[idx] = left
            ft.t[idx] = now
            # done: nothing left, or so little that its end is this instant (a late clock's resolution)
            with np.errstate(divide="ignore", invalid="ignore"):
                ended = (left <= DONE_BYTES) | ((rate > 0) & (now + left / rate <= now))
            done = sorted(ft.fid[idx[ended]].tolist())
        for fid in done:
            if fid in self.flows:
                self.remove_flow(self.flows[fid])

    def resolve(self) -> None:
        if self.netpol is not None:
            self.netpol.before_resolve()
        if not self.dirty:
            return
        jobs = set(self.dirty)
        self.dirty.clear()
        comps = {self.comp_of[i] for i in jobs if i in self.comp_of}
        if kernel.COMPILED and self.driver is None:  # one class: select and solve in one compiled call
            ft = self.ft
            for c in comps:
                first, rounds, n, job0 = kernel._kernel_nb.solve_comp(
                    ft.comp, ft.key, ft.job, ft.left, ft.rate, ft.t, ft.cap, ft.paths, c, self.now,
                    self.fab.capacity, self._loc, kernel.EPS, DONE_BYTES)
                if n:
                    kernel.STATS["solves"] += 1
                    kernel.STATS["rounds"] += rounds
                    self.solved(c, n, first, job0)
            return
        if kernel.COMPILED and self.network != "prio-every-link":  # bands at the NICs: one compiled call
            ft = self.ft
            for c in comps:
                got = kernel.solve_comp_prio(ft, c, self.now, self.fab.capacity, self.fab.nic, self._loc, DONE_BYTES,
                                             kernel.WARM_START)
                if got is None:  # an exact step too large for the compiled solver
                    idx = self.comp_rows(c)
                    if len(idx):
                        self.solve(c, idx)
                elif got[1]:
                    self.solved(c, got[1], got[0], got[2])
            return
        by_comp: dict[int, np.ndarray] = {}
        for c in comps:
            idx = self.comp_rows(c)
            if len(idx):
                by_comp[c] = idx
        for c, idx in by_comp.items():
            self.solve(c, idx)

    def rates(self, paths: list[np.ndarray], caps, prio=None) -> np.ndarray:
        """The kernel on these paths (link indices of the fabric): classes ``prio`` (None: one class) at
        the hosts' NICs, or at every link under ``prio-every-link``."""
        ptr = np.concatenate([[0], np.cumsum([len(p) for p in paths])])
        return self.rates_csr(ptr, np.concatenate(paths), caps, prio)

    def rates_csr(self, ptr: np.ndarray, links: np.ndarray, caps, prio=None, warm=None) -> np.ndarray:
        if kernel.COMPILED:  # the same as np.unique's, compiled
            uniq, local = kernel._kernel_nb.remap(links.astype(np.int64), self._loc)
        else:
            uniq, local = np.unique(links, return_inverse=True)
        if prio is None:
            return kernel.rates(ptr, local, self.fab.capacity[uniq], caps)
        plinks = None if self.network == "prio-every-link" else self.fab.nic[uniq]
        return kernel.rates(ptr, local, self.fab.capacity[uniq], caps, prio, plinks, warm)

    def solve(self, c: int, idx: np.ndarray) -> None:
        """Component c's rates from the kernel; ``idx``: its flows' rows (comp_rows). (Under one class
        with numba, resolve selects and solves in one compiled call instead.)"""
        self.solved(c, len(idx), self.solve_numpy(idx), int(self.ft.job[idx[0]]))

    def solved(self, c: int, n: int, first: float, job0: int) -> None:
        """After component c's solve (``n`` flows, the first of them job0's): its first flow end on the
        queue."""
        self.stats["solves"] += 1
        self.stats["solved_flows"] += n
        if n == len(self.flows):
            self.stats["full_solves"] += 1
        self.tok += 1
        self.comp_tok[c] = self.tok
        if first < math.inf:
            self.push(first, FLOW_END, int(job0), self.tok)

    def solve_numpy(self, idx: np.ndarray) -> float:
        """solve's rates on the rows ``idx`` through kernel.rates (classes, or no numba); returns the
        first flow end."""
        ft, now = self.ft, self.now
        left = ft.left[idx] - ft.rate[idx] * (now - ft.t[idx])
        ft.left[idx] = left
        ft.t[idx] = now
        P = ft.paths[idx]
        caps = ft.cap[idx]
        prio = ft.prio[idx] if self.driver is not None else None
        # under bands at the NICs, from the rows' last rates as the compiled one-call solve; no memo
        # then (a remembered answer was found from other rates)
        warm = ft.rate[idx] if prio is not None and self.network != "prio-every-link" and kernel.WARM_START else None
        key = None if warm is not None else P.tobytes() + caps.tobytes() + (b"" if prio is None else prio.tobytes())
        r = None if key is None else self._memo.get(key)
        if r is None:
            m = P >= 0
            ptr = np.zeros(len(idx) + 1, dtype=np.int64)
            np.cumsum(m.sum(1), out=ptr[1:])
            r = self.rates_csr(ptr, P[m], caps, prio, warm)
            if key is not None:
                size = len(key) + r.nbytes
                if self._memo_bytes + size > MEMO_BYTES:
                    self._memo.clear()  # bounded: start again
                    self._memo_bytes = 0
                self._memo[key] = r
                self._memo_bytes += size
        else:
            self.stats["memo_hits"] += 1
        ft.rate[idx] = r
        if (left <= DONE_BYTES).any():
            first = now
        else:
            pos = r > 0
            first = float((now + left[pos] / r[pos]).min()) if pos.any() else math.inf
        return first

    # ---------------------------------------------------------------- policy
    def wake_ticks(self) -> None:
        self.tick_asleep = False
        self.push(max(self.netpol.wake(self.now), self.now), TICK, 1)

    def set_policy(self, f: Flow) -> None:
        if self.netpol is not None:
            if self.tick_asleep:
                self.wake_ticks()
            self.netpol.flow_started(f)
        elif self.driver is not None:
            f.prio = self.assign.get(f.src, {}).get(self.jobs[f.job].spec.name, DEFAULT_CLASS)
        elif self.network == "cap":
            mine = [self.flows[fid] for fid in self.job_flows.get(f.job, ()) if self.flows[fid].src == f.src]
            for g in mine:  # the job's cap split over its flows at this host
                g.cap = self.flow_cap(f.job, f.src, len(mine))
            self.dirty.add(f.job)

    def flow_cap(self, i: int, src: int, n: int) -> float:
        """A flow's cap: under ``cap``, the job's cap (hostctl.core.pace.job_caps_Bps, the daemon's
        decision) split over the job's ``n`` flows at host ``src``; else none."""
        if self.network != "cap":
            return math.inf
        return job_caps_Bps([i], {}, self.cap_bps)[i] / max(1, n)

    def hosts_changed(self, hosts) -> None:
        if self.driver is None:
            return
        for h in hosts:
            self.assign_host(h)

    def assign_host(self, h: int) -> None:
        jobs = self.host_jobs.get(h, set())
        sizes = {self.jobs[i].spec.name: self.jobs[i].spec.size for i in jobs}
        new = self.driver.bands(sizes, self.epoch) if len(sizes) > 1 else {}
        if new == self.assign.get(h, {}):
            return
        self.assign[h] = new
        if self.network == "prio-every-link":  # a fast-forwarded job's own flows may change class
            for i in list(jobs):
                if self.jobs[i].ff is not None:
                    self.resume(i)
        for i in jobs:
            for fid in self.job_flows.get(i, ()):
                f = self.flows[fid]
                if f.src == h:
                    p = new.get(self.jobs[i].spec.name, DEFAULT_CLASS)
                    if p != f.prio:
                        f.prio = p
                        self.dirty.add(i)

    def tick(self) -> None:
        e = self.driver.epoch(self.now + 1e-9)
        if e == self.epoch:
            return
        self.epoch = e
        for h, jobs in self.host_jobs.items():
            if len(jobs) > 1:
                self.assign_host(h)

    # ---------------------------------------------------------------- results
    def report(self, wall_s: float) -> dict:
        done = [j for j in self.jobs if j.end_s is not None]
        jct = np.array([j.end_s - j.spec.arrival_s for j in done])
        return {
            "jobs": len(self.jobs), "finished": len(done),
            "avg_jct_s": float(jct.mean()) if len(jct) else None,
            "p95_jct_s": float(np.percentile(jct, 95)) if len(jct) else None,
            "makespan_s": float(max(j.end_s for j in done) - min(j.spec.arrival_s for j in self.jobs)) if done else None,
            "sim_s": self.now, "wall_s": wall_s, "events": self.stats["events"],
            "events_per_s": self.stats["events"] / wall_s if wall_s > 0 else None,
            "multi_server_jobs": sum(1 for j in self.jobs if len(j.servers) > 1),
            "stats": {**self.stats, **(self.adm.stats if self.adm is not None else {})},
            "jct_s": {j.spec.name: j.end_s - j.spec.arrival_s for j in done},
        }


def simulate(fabric: Fabric, jobs: list[JobSpec], **kw) -> dict:
    return ClusterSim(fabric, jobs, **kw).run()
