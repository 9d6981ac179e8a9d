"""The cluster papers' schedulers as hooks of the cluster engine (hostctl_lab.sim.cluster).

- ``--placement lwf<k>``: paper 000's LWF-k (hostctl_lab.sim.placement.lwf) on the engine's exclusive
  GPUs, L_S = the remaining work of the jobs running on each server (``server_loads``);
- ``--placement sjfbco``: paper 001's SJF-BCO re-planned over the waiting jobs as a batch at every
  scheduling point (an arrival or a job end); the jobs its plan starts now start (``sjfbco_starts``);
- ``--order ada-srsf``: paper 000's SRSF key (``ada_key``): remaining compute x GPUs, plus each
  remaining exchange's uncontended time x GPUs once the job is placed on several servers (E_J = 0
  while queued);
- ``--network adadual`` / ``srsf<n>``: communication admission (``Admission``). At the end of an
  iteration's compute, a job's exchange starts only if admitted; else it waits (its GPUs idle) and is
  asked again, in the order's key, whenever an exchange ends. ``adadual``: hostctl.core.adadual's rule
  (never three-way); ``srsf<n>``: at most n exchanges at once on any server of the job (paper 000's
  SRSF(n)). Admitted exchanges run as the engine's fluid flows, max-min fair (as ``fifo``).

An exchange is "on" every server of its job from its first flow to the end of its last phase (paper
000: an all-reduce occupies every server of its job). Sizes: a job's exchange is M = the bytes its
busiest host sends over the exchange (ring: 2(S-1)/S x size); what is left of a running one is its
largest flow's bytes left plus its later phases' M.
"""

from __future__ import annotations

import re
from typing import TYPE_CHECKING

import numpy as np

from hostctl.core import adadual as ad

if TYPE_CHECKING:
    from hostctl_lab.sim.cluster import ClusterSim

ORDERS = ("fifo", "srsf", "ada-srsf")
_ADMIT = re.compile(r"adadual|srsf(\d+)")


def is_admission(network: str) -> bool:
    m = _ADMIT.fullmatch(network)
    return bool(m) and (m.group(1) is None or int(m.group(1)) >= 1)


def phase_bytes(phases) -> list[float]:
    """Per phase: the most bytes one host sends in it (the phase's time on an uncontended NIC x rate)."""
    out = []
    for ph in phases:
        per: dict[int, float] = {}
        for a, _, nb in ph:
            per[a] = per.get(a, 0.0) + nb
        out.append(max(per.values(), default=0.0))
    return out


def exchange_s(sim: ClusterSim, i: int) -> float:
    """Job i's exchange alone on its NICs (s); 0 on one server. Before placement: the fewest servers."""
    j = sim.jobs[i]
    if j.phases:
        return sum(phase_bytes(j.phases)) / sim.fab.nic_rate_Bps(j.servers[0])
    return j.spec.ref_iter_s(sim.gps, sim.fab.nic_rate_Bps()) - j.spec.compute_s


def iteration_s(sim: ClusterSim, i: int) -> float:
    """Job i's iteration alone on its NICs (s): compute, plus, once placed on more than one server, its
    uncontended exchange (E_J = 0 while queued); under --iter-model (a ring job with paper 003's
    table) the table's T_iter at its NIC rate, in which the exchange overlaps the backward pass."""
    j = sim.jobs[i]
    if j.tab is not None:
        return float(j.tab.iter_s(sim.fab.nic_rate_Bps(j.servers[0])))
    return j.spec.compute_s + (exchange_s(sim, i) if len(j.servers) > 1 else 0.0)


def ada_key(sim: ClusterSim, i: int) -> float:
    """Paper 000's remaining service L_J = (C_J + E_J) x |G|: the iterations left x iteration_s x GPUs."""
    j = sim.jobs[i]
    return (j.spec.iterations - j.done_iters) * iteration_s(sim, i) * j.spec.gpus


def remaining_s(sim: ClusterSim, i: int) -> float:
    """A running job's remaining run time, estimated: iterations x iteration_s minus the time it has run
    (>= 0). From the clock only (fast-forward keeps done_iters stale)."""
    j = sim.jobs[i]
    return max(0.0, j.spec.iterations * iteration_s(sim, i) - (sim.now - j.start_s))


def running(sim: ClusterSim) -> list[int]:
    return [i for i, j in enumerate(sim.jobs) if j.start_s is not None and j.end_s is None and not j.spec.hosts]


def server_loads(sim: ClusterSim) -> np.ndarray:
    """L_S: per server, the remaining GPU-seconds of the jobs on it (remaining_s x its GPUs there)."""
    L = np.zeros(sim.fab.n_hosts)
    for i in running(sim):
        r = remaining_s(sim, i)
        for s, k in zip(sim.jobs[i].servers, sim.jobs[i].gpus_on):
            L[s] += r * k
    return L


def sjfbco_starts(sim: ClusterSim, queue: list[int]) -> list[tuple[int, list[tuple[int, int]]]]:
    """SJF-BCO over the queued jobs (placement.sjfbco_batch); the jobs it starts now, with their GPUs.
    Nothing is planned when no queued job fits the free GPUs (no plan could start one now)."""
    from hostctl_lab.sim.placement import sjfbco_batch

    if not queue or min(sim.jobs[i].spec.gpus for i in queue) > int(sim.free.sum()):
        return []
    gps, n_srv = sim.gps, sim.fab.n_hosts
    busy = np.zeros(n_srv * gps)
    used = np.zeros(n_srv, dtype=np.int64)
    for i in running(sim):
        r = max(1.0, remaining_s(sim, i))
        for s, k in zip(sim.jobs[i].servers, sim.jobs[i].gpus_on):
            busy[s * gps + used[s]: s * gps + used[s] + k] = r
            used[s] += k
    nic = sim.fab.nic_rate_Bps()
    sp = [sim.jobs[i].spec for i in queue]
    got = sjfbco_batch([s.gpus for s in sp], [s.iterations for s in sp], [s.compute_s for s in sp],
                       [s.size / nic for s in sp], [s.iterations * s.ref_iter_s(gps, nic) for s in sp],
                       sim.free, gps, busy)
    return [(queue[k], p) for k, p in got]


class Admission:
    """Communication admission (``adadual`` or ``srsf<n>``) for a ClusterSim; see the module docstring.
    ``on[s]``: the jobs whose exchange is on server s. ``stats``: ``max_comm_per_server`` (the most
    exchanges ever on one server at once), ``admitted``, ``refused`` (requests that had to wait),
    ``log`` of (time, job, +1 start / -1 end) when ``keep_log``."""

    def __init__(self, sim: ClusterSim, network: str, b: float = ad.B_S_PER_BYTE, eta: float = ad.ETA_S_PER_BYTE,
                 mode: str = "all", keep_log: bool = False) -> None:
        m = _ADMIT.fullmatch(network)
        self.sim, self.limit = sim, (None if m.group(1) is None else int(m.group(1)))
        self.b, self.eta, self.mode = b, eta, mode
        ad.threshold(b, eta)  # bad b, eta: one ValueError now
        self.on: list[set[int]] = [set() for _ in range(sim.fab.n_hosts)]
        self.active: set[int] = set()
        self.waiting: list[int] = []
        self.stats = {"max_comm_per_server": 0, "admitted": 0, "refused": 0}
        self.log: list[tuple[float, int, int]] | None = [] if keep_log else None

    def left_bytes(self, i: int) -> float:
        """What job i's running exchange has left: its largest flow's bytes now, plus later phases."""
        sim, j = self.sim, self.sim.jobs[i]
        cur = max((sim.flows[f].left - sim.flows[f].rate * (sim.now - sim.flows[f].t)
                   for f in sim.job_flows.get(i, ())), default=0.0)
        return max(0.0, cur) + sum(phase_bytes(j.phases[j.phase + 1:]))

    def ok(self, i: int) -> bool:
        srv = self.sim.jobs[i].servers
        most = max(len(self.on[s]) for s in srv)
        if self.limit is not None:
            return most <= self.limit - 1
        if most != 1:  # none: start; two or more: wait (never three-way); the rule says the same
            return most == 0
        olds = [{o: self.left_bytes(o) for o in self.on[s]} for s in srv]
        return ad.adadual(sum(phase_bytes(self.sim.jobs[i].phases)), olds, self.b, self.eta, self.mode)

    def request(self, i: int) -> bool:
        """At the end of job i's compute: True to start its exchange now; False: it waits."""
        if self.ok(i):
            self.stats["admitted"] += 1
            return True
        self.stats["refused"] += 1
        self.waiting.append(i)
        return False

    def mark(self, i: int) -> None:
        """Job i has flows: its exchange is on its servers (idempotent; also a resumed fast-forward)."""
        if i in self.active:
            return
        self.active.add(i)
        for s in self.sim.jobs[i].servers:
            self.on[s].add(i)
            self.stats["max_comm_per_server"] = max(self.stats["max_comm_per_server"], len(self.on[s]))
        if self.log is not None:
            self.log.append((self.sim.now, i, 1))

    def release(self, i: int) -> None:
        """Job i's exchange ended: off its servers; the waiting exchanges are asked again, in the
        order's key (earlier admissions count)."""
        if i not in self.active:
            return
        self.active.discard(i)
        for s in self.sim.jobs[i].servers:
            self.on[s].discard(i)
        if self.log is not None:
            self.log.append((self.sim.now, i, -1))
        if not self.waiting:
            return
        sim = self.sim
        if sim.order == "fifo":
            self.waiting.sort(key=lambda k: (sim.jobs[k].spec.arrival_s, k))
        else:
            key = ada_key if sim.order == "ada-srsf" else sim.remaining_service
            self.waiting.sort(key=lambda k: (key(sim, k) if key is ada_key else key(k), sim.jobs[k].spec.arrival_s, k))
        keep = []
        for k in self.waiting:
            if self.ok(k):
                self.stats["admitted"] += 1
                j = sim.jobs[k]
                j.phase = 0
                sim.add_flows(k, j.phases[0])  # marks k
            else:
                keep.append(k)
        self.waiting = keep
