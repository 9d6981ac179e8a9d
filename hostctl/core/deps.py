"""Dependency roles of this host's flows, for MLCC's Algorithm 2 (pure: stdlib only).

Spec: ``shared/spec/tensorlights-mlcc.md`` 2.8 (the rules) and 2.4.4 (the progress exchange);
the allocator side is ``hostctl.core.mlcc.allocate`` (``role``, ``ref_bytes``, ``slack_bytes``)
and ``apply_reductions``; the daemon side is ``hostctl/policy/mlcc.py``. Design notes: docs/mlcc.md.

Which role a flow has follows from its job's communication pattern (``comm`` in the job's
``[[jobs]]`` entry: the daemon cannot tell a parameter-server job from a ring from sockets alone)
and from which side of the connection this host is (the flows are this host's egress):

- ``comm = "ps"``: a flow whose local port is one of the job's listening ports leaves a parameter
  server: **broadcast** (PS -> worker). Any other flow of the job goes to a PS: **aggregation**
  (worker -> PS).
- ``comm = "ring"``: a flow whose local port is one of the job's listening ports carries data to
  the successor rank: **ring** (hostctl's all-reduce workload and the usual ring layout: a rank
  sends over the connection it accepted and receives over the one it made). The job's other
  flows carry data the other way (this host only ACKs them): no role.
- no ``comm``: no role (Algorithm 1 only).

F values (spec 2.8.2) are **cumulative bytes of the connection** (``bytes_sent`` of the pacer:
ACKed plus in flight, no retransmissions) plus this slot's planned volume, the same measure on
every host, so no host has to agree with another on where an iteration starts. A peer's F is
found through the switches' progress store under a **name** both sides can compute:

- ring: ``ring:<job>><receiver address>``: the ring flow of the job that sends *to* that host.
  The sender reports under it, and the receiver (whose own ring flow depends on it) asks for it.
  Ring jobs therefore need the same job id on every rank: give them a ``name`` in the config.
- aggregation: its own flow id (``laddr:lport>raddr:rport``): the PS, whose socket is the same
  connection, asks for the reverse of each of its broadcast flows.
- broadcast: ``ps:<PS address>:<port>``, the largest F over the PS's broadcast flows on that port
  (F_b^max); the workers ask for the PS they send to (address and port name the PS, whatever the
  job is called on each host).

The reference of a flow (``ref_bytes``) is the minimum of the F values its names resolve to:
F_pred for a ring flow, F_b^max for an aggregation flow, F_a^min (over all of the PS's workers)
for a broadcast flow. If one of them is unknown or stale the flow has no reference this slot and
is planned without Delta.

Notifications (Alg. 2 lines 13-16) travel under the same names: an aggregation flow notifies its
PS under its own flow id, a ring flow notifies its successor under its ring name; the receiver's
ceiling for a flow is the minimum of the notified values among its query names.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import NamedTuple

from hostctl.core.gencache import Generations
from hostctl.core.mlcc import Role
from hostctl.core.types import FlowKey

__all__ = ["Dep", "JobComm", "NO_DEP", "flow_deps", "flow_name", "ring_name", "ps_name", "references",
           "ceilings", "reports"]


class JobComm(NamedTuple):
    """What the dependency rules need to know about a job on this host."""

    comm: str | None  # "ps", "ring" or None
    listen_ports: frozenset[int]
    ring_size: int | None = None


class Dep(NamedTuple):
    """The dependency of one flow (this host sends it)."""

    role: int  # Role
    query: tuple[str, ...] = ()  # progress names whose minimum is the flow's reference (and ceiling)
    report: str = ""  # name under which this flow's F is reported ("": not reported)
    notify_to: str = ""  # receiver host (address) of the flow's notifications ("": none)


NO_DEP = Dep(int(Role.NONE))


def _flow_name(key: FlowKey) -> str:
    return f"{key.laddr}:{key.lport}>{key.raddr}:{key.rport}"


# A flow's id on the wire, its 4-tuple (unique in the fabric; ``policy.mlcc.flow_id``). Kept per flow:
# the daemon asks for every flow every slot. MlccControl turns the generation every 30 s, so it holds the
# flows of the last 30-60 s (a generation holds at most twice the 16,384 flows a host's pacer tracks).
flow_name: Generations[FlowKey, str] = Generations(_flow_name, 1 << 15)


def ring_name(job: str, to_addr: str) -> str:
    return f"ring:{job}>{to_addr}"


def ps_name(addr: str, port: int) -> str:
    return f"ps:{addr}:{port}"


def _reverse(key: FlowKey) -> FlowKey:
    return FlowKey(key.raddr, key.rport, key.laddr, key.lport)


def flow_deps(flows: Sequence[tuple[FlowKey, str]], jobs: Mapping[str, JobComm]) -> list[Dep]:
    """Dependency of each (flow key, job id) of this host, in input order."""
    # a PS's broadcast flows per (job, address, port): each one's reference is F_a^min over all of them
    bcast: dict[tuple[str, str, int], list[str]] = {}
    for key, job in flows:
        jc = jobs.get(job)
        if jc is not None and jc.comm == "ps" and key.lport in jc.listen_ports:
            bcast.setdefault((job, key.laddr, key.lport), []).append(flow_name(_reverse(key)))
    out = []
    for key, job in flows:
        jc = jobs.get(job)
        if jc is None or jc.comm is None:
            out.append(NO_DEP)
        elif jc.comm == "ps":
            if key.lport in jc.listen_ports:
                out.append(Dep(int(Role.BROADCAST), tuple(sorted(bcast[job, key.laddr, key.lport])),
                               ps_name(key.laddr, key.lport)))
            else:
                out.append(Dep(int(Role.AGGREGATION), (ps_name(key.raddr, key.rport),), flow_name(key),
                               key.raddr))
        elif jc.comm == "ring" and key.lport in jc.listen_ports:
            out.append(Dep(int(Role.RING), (ring_name(job, key.laddr),), ring_name(job, key.raddr), key.raddr))
        else:
            out.append(NO_DEP)
    return out


def references(deps: Sequence[Dep], progress: Mapping[str, float]) -> list[float]:
    """ref_bytes per flow: the minimum F over its query names; NaN without a role or if a name is
    missing from ``progress`` (the caller leaves stale reports out)."""
    out = []
    for d in deps:
        if d.role == Role.NONE or not d.query:
            out.append(math.nan)
            continue
        vals = [progress.get(q) for q in d.query]
        out.append(math.nan if any(v is None for v in vals) else float(min(vals)))
    return out


def ceilings(deps: Sequence[Dep], notified: Mapping[str, float]) -> list[float]:
    """Receiver side of the notifications: per flow, the minimum ceiling notified under one of its
    query names (+inf: none)."""
    out = []
    for d in deps:
        c = math.inf
        for q in d.query:
            v = notified.get(q)
            if v is not None and v < c:
                c = v
        out.append(c)
    return out


def reports(deps: Sequence[Dep], cum_bytes: Sequence[float]) -> dict[str, float]:
    """Progress to report: per name, the largest F of the flows reporting under it (one flow per name,
    except a PS's broadcast flows on one port, whose name carries F_b^max)."""
    out: dict[str, float] = {}
    for d, f in zip(deps, cum_bytes):
        if d.report and f == f:
            out[d.report] = max(out.get(d.report, -math.inf), float(f))
    return out
