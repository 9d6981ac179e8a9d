"""What the pacing datapath should hold, as plain data (pure).

``PaceTable`` is to hostctl/bpf/hc_pace.c what ``ClassifierTable`` is to the classifier: the
daemon computes it, ``hostctl start --dry-run`` prints it, the Linux pacer diffs it
into the maps and the fake records it.

Selectors say which flows are DL flows of which job slot: an exact 4-tuple, a served port
(``local``), a server connected to (remote endpoint: address and port), or a port connected
to (``remote``), checked in that order when the flow is established. Rates are bytes/s: a
per-flow rate wins over its job slot's rate; a flow with neither is counted but not paced.

A port selector with slot ``WATCH_SLOT`` selects nothing: the flows of that port get the
callbacks that let a selector written later select them. Remote side: the endpoint, once
discovery has made the job from the flow itself, as a worker's first connection to its PS
needs. Local side: the job's served port, once discovery has found the job, as a PS's
connections accepted within a rescan of its listener need. The program looks past a watch
to the selectors after it (hc_pace.c, select_slot).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field

from hostctl.core.bpfabi import DEFINES
from hostctl.core.plan import endpoint_str, job_entries
from hostctl.core.types import FlowKey, Job, JobSpec

SIDES = ("local", "remote")
WATCH_SLOT = DEFINES["HP_SLOT_WATCH"]  # a selector that only asks for callbacks (bpf/hostctl.h)


@dataclass(frozen=True)
class PaceTable:
    ports: Mapping[tuple[int, str], int] = field(default_factory=dict)  # (port, side) -> slot
    flows: Mapping[FlowKey, int] = field(default_factory=dict)  # 4-tuple -> slot
    flow_rates: Mapping[FlowKey, int] = field(default_factory=dict)  # bytes/s
    slot_rates: Mapping[int, int] = field(default_factory=dict)  # bytes/s, job-wide default
    remotes: Mapping[tuple[str, int], int] = field(default_factory=dict)  # (remote addr, port) -> slot

    def to_dict(self) -> dict:
        return {
            "ports": [{"port": p, "side": s, "slot": "watch" if slot == WATCH_SLOT else slot}
                      for (p, s), slot in sorted(self.ports.items())],
            "remotes": [{"remote": endpoint_str(e), "slot": s} for e, s in sorted(self.remotes.items())],
            "flows": [{"flow": str(f), "slot": s} for f, s in sorted(self.flows.items())],
            "flow_rates_Bps": {str(f): r for f, r in sorted(self.flow_rates.items())},
            "slot_rates_Bps": dict(sorted(self.slot_rates.items())),
        }


# the sizes of hc_pace.c's selector maps (hostctl/bpf/hostctl.h): they hold no more
MAX_FLOW_SELECTORS = DEFINES["HC_MAX_FLOWS"]
MAX_PORT_SELECTORS = DEFINES["HC_MAX_PORTS"]
MAX_REMOTE_SELECTORS = DEFINES["HC_MAX_REMOTES"]


def selectors(jobs: Sequence[Job], slots: Mapping[str, int], *, watch_ports: Iterable[int] = (),
              max_flows: int = MAX_FLOW_SELECTORS, max_ports: int = MAX_PORT_SELECTORS,
              max_remotes: int = MAX_REMOTE_SELECTORS,
              ) -> tuple[dict[tuple[int, str], int], dict[FlowKey, int], dict[tuple[str, int], int]]:
    """Port, 4-tuple and remote-endpoint selectors for the jobs that have a slot.

    A job's served ports and the servers it connects to (``Job.remote_endpoints``, a
    worker's PS) select its flows at connection time, except a port several jobs serve
    (shared_ports: containers serving the same port), whose flows are selected by 4-tuple;
    its other flows (it connects out, found by pid or command line) are selected by 4-tuple
    once discovery has seen them.
    ``watch_ports``: the ports of the port specs, watched on both sides (WATCH_SLOT), so that a
    worker's connection made before its job existed, and a server's connection accepted
    before discovery found its job, can still be selected. At
    most max_flows / max_ports / max_remotes entries (the kernel maps' sizes): later ones
    are left out. Returns (ports, flows, remotes)."""
    e = job_entries(jobs, slots, max_ports=max_ports, max_flows=max_flows, max_remotes=max_remotes)
    ports: dict[tuple[int, str], int] = {(p, "local"): slot for p, slot in e.ports.items()}
    for p in sorted(set(watch_ports)):
        for side in ("local", "remote"):  # (a job's own served port, found later, keeps its slot)
            if len(ports) < max_ports:
                ports.setdefault((p, side), WATCH_SLOT)
    return ports, e.flows, e.remotes


def watch_ports(specs: Iterable[JobSpec]) -> frozenset[int]:
    """The ports of the port specs (selectors' watch_ports)."""
    return frozenset(p for spec in specs for p in spec.ports)


def job_caps_Bps(job_ids: Iterable[str], per_job_bps: Mapping[str, int], default_bps: int | None) -> dict[str, int]:
    """Policy ``cap``: each job's cap in bytes/s, its own ([[jobs]] cap) or the default (--cap); jobs
    with neither are left out."""
    out = {}
    for jid in job_ids:
        bps = per_job_bps.get(jid, default_bps)
        if bps:
            out[jid] = bps // 8
    return out


def split_cap(cap_Bps: int, flows: Sequence[FlowKey]) -> dict[FlowKey, int]:
    """A job cap split equally over its flows (each gets cap / n)."""
    if not flows:
        return {}
    share = max(1, cap_Bps // len(flows))
    return {f: share for f in flows}


def cap_rates(caps_Bps: Mapping[str, int], job_flows: Mapping[str, Sequence[FlowKey]],
              active: set[FlowKey]) -> tuple[dict[FlowKey, int], dict[str, int]]:
    """Policy ``cap``: each capped job's rate split equally over its active flows.

    A flow is active when it moved bytes in the monitor's window (the last 4 slots).
    Every flow of the job gets cap / n_active, idle ones included, so a flow that wakes
    up is paced at once; the job-wide rate (for flows the daemon has not seen yet) is the
    same share. An idle flow that wakes up can push the job above its cap by one share
    for at most one slot, until the next split counts it. Returns (per-flow rates,
    per-job default rates), bytes/s."""
    flow_rates: dict[FlowKey, int] = {}
    job_rates: dict[str, int] = {}
    for job, cap in caps_Bps.items():
        flows = job_flows.get(job, ())
        n = max(1, sum(1 for f in flows if f in active))
        share = max(1, cap // n)
        job_rates[job] = share
        for f in flows:
            flow_rates[f] = share
    return flow_rates, job_rates
