"""Traffic of DL jobs on the emulated testbed's links, as plain data (pure).

Link model: every host hN has two links, ``hN:up`` (host -> its switch) and
``hN:down`` (switch -> host), each at the host link rate. With more than one
rack, rack r also has ``rack<r>:up`` (ToR -> aggregation) and ``rack<r>:down``,
each at the uplink rate. A flow src -> dst crosses [src:up, dst:down], plus
[rack(src):up, rack(dst):down] when the racks differ; a flow with src == dst
crosses no link.

One iteration of a job is a list of phases run one after the other; a phase is
a set of concurrent flows (src, dst, bytes):

- ``ps`` with P servers and W workers, model M bytes: shard i is M // P bytes
  (the last shard also gets the remainder). Phase "update": every server i ->
  every worker, shard_i bytes; then compute_s; then phase "gradient": every
  worker -> every server i, shard_i bytes. With ``buckets`` B > 1 the gradient
  overlaps the backward pass (the last ``backward`` share of compute_s): bucket
  b of B is ready, and sent, after b/B of the backward pass, so only the last
  bucket waits for the end of compute.
- ``allreduce`` and ``torch`` (a ring all-reduce): compute_s first, then
  2(W - 1) sequential steps; in each step rank k sends ceil(M / W) bytes to
  rank (k + 1) mod W.

Rates are bits/s, sizes bytes, times seconds. Jobs are any objects with the
attributes of :class:`JobTraffic` (``hostctl_lab.bench.scenario.JobDef`` has them).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Protocol

KINDS = ("ps", "allreduce", "torch")

Flow = tuple[str, str, int]  # (src host, dst host, bytes)


class JobLike(Protocol):
    kind: str
    ps_hosts: Sequence[str]
    worker_hosts: Sequence[str]
    model_bytes: int
    compute_s: float
    iterations: int


@dataclass(frozen=True)
class JobTraffic:
    """The traffic-relevant part of a job (same attribute names as the bench's JobDef)."""
    kind: str
    ps_hosts: tuple[str, ...]
    worker_hosts: tuple[str, ...]
    model_bytes: int
    compute_s: float = 0.0
    iterations: int = 1
    arrival_s: float = 0.0
    name: str = ""
    backward: float = 0.0  # ps: share of compute_s that is the backward pass
    buckets: int = 1  # ps: gradient buckets sent during the backward pass


@dataclass(frozen=True)
class Phase:
    name: str  # "update", "gradient", "ring<k>"
    flows: tuple[Flow, ...]


@dataclass(frozen=True)
class Network:
    """Link rates (link name -> bits/s) and the rack of every host."""
    rates: Mapping[str, int]
    rack_of: Mapping[str, int] = field(default_factory=dict)


def up(host: str) -> str:
    return f"{host}:up"


def down(host: str) -> str:
    return f"{host}:down"


def links(hosts: Sequence[str], rack_of: Sequence[int], racks: int, link_bps: int,
          uplink_bps: int | None) -> dict[str, int]:
    """Every link of the testbed -> its rate in bits/s. ``rack_of`` is parallel to ``hosts``."""
    if len(rack_of) != len(hosts):
        raise ValueError(f"rack_of has {len(rack_of)} entries for {len(hosts)} hosts")
    if link_bps <= 0:
        raise ValueError("link_bps must be positive")
    out: dict[str, int] = {}
    for h in hosts:
        out[up(h)] = int(link_bps)
        out[down(h)] = int(link_bps)
    if racks > 1:
        if not uplink_bps or uplink_bps <= 0:
            raise ValueError("uplink_bps must be positive with more than one rack")
        for r in range(racks):
            out[f"rack{r}:up"] = int(uplink_bps)
            out[f"rack{r}:down"] = int(uplink_bps)
    return out


def network(hosts: Sequence[str], rack_of: Sequence[int], racks: int, link_bps: int,
            uplink_bps: int | None) -> Network:
    """The Network of a testbed (arguments as in :func:`links`; a bench Topology has them all)."""
    return Network(rates=links(hosts, rack_of, racks, link_bps, uplink_bps),
                   rack_of=dict(zip(hosts, rack_of)) if racks > 1 else {})


def path(src: str, dst: str, rack_of_by_host: Mapping[str, int] | None = None) -> list[str]:
    """Links crossed by a flow src -> dst. Hosts missing from ``rack_of_by_host`` are in rack 0."""
    if src == dst:
        return []
    rk = rack_of_by_host or {}
    rs, rd = rk.get(src, 0), rk.get(dst, 0)
    if rs == rd:
        return [up(src), down(dst)]
    return [up(src), f"rack{rs}:up", f"rack{rd}:down", down(dst)]


def _ceil_div(a: int, b: int) -> int:
    return -(-a // b)


def shards(model_bytes: int, servers: int) -> list[int]:
    """Bytes of each PS shard: M // P each, the last one also gets the remainder."""
    if servers < 1:
        raise ValueError("a ps job needs at least one server")
    base = model_bytes // servers
    return [base] * (servers - 1) + [model_bytes - base * (servers - 1)]


def iteration_phases(job: JobLike) -> list[Phase]:
    """The network phases of one iteration, in order (compute is not a phase).

    ps: [update, gradient] with compute between them; allreduce/torch: compute
    first, then the 2(W - 1) ring steps."""
    kind = job.kind
    workers = tuple(job.worker_hosts)
    m = int(job.model_bytes)
    if kind == "ps":
        servers = tuple(job.ps_hosts)
        sizes = shards(m, len(servers))
        update = tuple((s, w, b) for s, b in zip(servers, sizes) for w in workers)
        gradient = tuple((w, s, b) for w in workers for s, b in zip(servers, sizes))
        return [Phase("update", update), Phase("gradient", gradient)]
    if kind in ("allreduce", "torch"):
        n = len(workers)
        if n < 2:
            return []
        chunk = _ceil_div(m, n)
        step = tuple((workers[k], workers[(k + 1) % n], chunk) for k in range(n))
        return [Phase(f"ring{i}", step) for i in range(2 * (n - 1))]
    raise ValueError(f"unknown job kind {kind!r}; choose from {', '.join(KINDS)}")


def link_bytes(flows: Sequence[Flow], rack_of_by_host: Mapping[str, int] | None = None) -> dict[str, int]:
    """Bytes carried by each link (only links that carry some) when the flows run."""
    out: dict[str, int] = {}
    for src, dst, nbytes in flows:
        if nbytes <= 0:
            continue
        for link in path(src, dst, rack_of_by_host):
            out[link] = out.get(link, 0) + int(nbytes)
    return out


def _rate(net: Network, link: str) -> int:
    try:
        return net.rates[link]
    except KeyError:
        raise ValueError(f"link {link} is not in the network (host or rack unknown)") from None


def phase_time_s(phase: Phase, net: Network) -> float:
    """Time the phase takes alone: max over links of bytes x 8 / rate (0 if it crosses no link)."""
    per = link_bytes(phase.flows, net.rack_of)
    return max((b * 8 / _rate(net, link) for link, b in per.items()), default=0.0)


def phase_times(job: JobLike, net: Network) -> list[float]:
    """Time of each phase of one iteration when the job is alone (seconds)."""
    return [phase_time_s(p, net) for p in iteration_phases(job)]


def analytic_s(job: JobLike, net: Network) -> float:
    """The simple analytic JCT when alone: iterations x (sum of phase times + compute_s),
    i.e. bytes / rate + compute with the phases one after the other. Workers whose update
    ends early may overlap their gradient with others' updates, so a real run can be a
    little faster: this is a model, :func:`standalone_s` is the lower bound."""
    return job.iterations * (sum(phase_times(job, net)) + job.compute_s)


def _flows_time_s(flows: Sequence[Flow], net: Network) -> float:
    per = link_bytes(flows, net.rack_of)
    return max((b * 8 / _rate(net, link) for link, b in per.items()), default=0.0)


def standalone_s(job: JobLike, net: Network) -> float:
    """A lower bound on the job's JCT when alone (critical path, seconds).

    ps: iterations are separated by the barrier (a server sends update i+1 only after
    every gradient of i). Within one, with U = update phase time, G = gradient phase time,
    u_k / g_k = worker k's own update / gradient flows alone: the last update ends >= U,
    then that worker computes and sends its gradient (>= min g_k); the first gradient
    starts >= min u_k + compute and all gradients need G; and every worker's own chain
    is u_k + compute + g_k. Per iteration: the largest of the three.
    With B > 1 buckets over a backward share b of compute c, only the last bucket
    (1/B of the gradient) follows the end of compute, and the first bucket is ready
    after c(1 - b) + cb/B: the three terms become U + c + min g_k/B,
    min u_k + c(1 - b) + cb/B + G and max(u_k + c + g_k/B). (B = 1 gives the above.)
    ring (allreduce, torch): each rank sends its 2(W - 1) chunks one after the other
    after its compute, so rank k needs >= compute + 2(W - 1) x (its chunk alone on its
    path) per iteration; the slowest rank bounds the job."""
    c = job.compute_s
    phases = iteration_phases(job)
    if not phases:
        return job.iterations * c
    if job.kind == "ps":
        update, gradient = phases
        own = [[(srv, w, b) for srv, b in zip(job.ps_hosts, shards(job.model_bytes, len(job.ps_hosts)))]
               for w in job.worker_hosts]  # worker k's shards (several workers may share a host)
        u = [_flows_time_s(fl, net) for fl in own]
        g = [_flows_time_s([(w, srv, b) for srv, w, b in fl], net) for fl in own]
        big_u, big_g = phase_time_s(update, net), phase_time_s(gradient, net)
        nb = max(1, int(getattr(job, "buckets", 1)))
        bw = float(getattr(job, "backward", 0.0)) if nb > 1 else 0.0
        first = c * (1.0 - bw) + c * bw / nb  # when the first gradient bucket is ready
        per_iter = max(big_u + c + min(g) / nb, min(u) + first + big_g, max(a + c + b / nb for a, b in zip(u, g)))
        return job.iterations * per_iter
    steps = len(phases)
    per_rank = max(_flows_time_s([f], net) for f in phases[0].flows)
    return job.iterations * (c + steps * per_rank)


def link_work_s(job: JobLike, net: Network) -> dict[str, float]:
    """Link -> seconds the link must spend on this job: iterations x sum over phases of bytes x 8 / rate.
    Only links the job uses are listed."""
    total: dict[str, int] = {}
    for p in iteration_phases(job):
        for link, b in link_bytes(p.flows, net.rack_of).items():
            total[link] = total.get(link, 0) + b
    return {link: job.iterations * b * 8 / _rate(net, link) for link, b in total.items()}


def bound_inputs(jobs: Sequence[JobLike], net: Network) -> list[tuple[float, float, dict[str, float]]]:
    """(arrival_s, standalone_s, link_work_s) per job: the input of ``bound.avg_jct_lower_bound``.
    A job without ``arrival_s`` arrives at 0."""
    return [(float(getattr(j, "arrival_s", 0.0)), standalone_s(j, net), link_work_s(j, net)) for j in jobs]
