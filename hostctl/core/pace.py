"""What the pacing datapath should hold, as plain data (pure).

``PaceTable`` is to bpf/hc_pace.c what ``ClassifierTable`` is to the classifier: the
daemon computes it, ``hostctl start --dry-run`` prints it, the Linux pacer diffs it
into the maps and the fake records it.

Selectors say which flows are DL flows of which job slot: a served port (``local``),
a port connected to (``remote``), or an exact 4-tuple. Rates are bytes/s: a per-flow
rate wins over its job slot's rate; a flow with neither is counted but not paced.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from hostctl.core.types import FlowKey, Job, shared_ports

SIDES = ("local", "remote")


@dataclass(frozen=True)
class PaceTable:
    ports: Mapping[tuple[int, str], int] = field(default_factory=dict)  # (port, side) -> slot
    flows: Mapping[FlowKey, int] = field(default_factory=dict)  # 4-tuple -> slot
    flow_rates: Mapping[FlowKey, int] = field(default_factory=dict)  # bytes/s
    slot_rates: Mapping[int, int] = field(default_factory=dict)  # bytes/s, job-wide default

    def to_dict(self) -> dict:
        return {
            "ports": [{"port": p, "side": s, "slot": slot} for (p, s), slot in sorted(self.ports.items())],
            "flows": [{"flow": str(f), "slot": s} for f, s in sorted(self.flows.items())],
            "flow_rates_Bps": {str(f): r for f, r in sorted(self.flow_rates.items())},
            "slot_rates_Bps": dict(sorted(self.slot_rates.items())),
        }


MAX_FLOW_SELECTORS = 16384  # = HP_MAX_FLOWS: hp_sel_flows holds no more
MAX_PORT_SELECTORS = 4096  # = HP_MAX_PORTS


def selectors(jobs: Sequence[Job], slots: Mapping[str, int], *, remote_ports: Mapping[str, Sequence[int]] = {},
              max_flows: int = MAX_FLOW_SELECTORS, max_ports: int = MAX_PORT_SELECTORS,
              ) -> tuple[dict[tuple[int, str], int], dict[FlowKey, int]]:
    """Port and 4-tuple selectors for the jobs that have a slot.

    A job's served ports select its flows at connection time (no 4-tuple needed), except a
    port several jobs serve (shared_ports), whose flows are selected by 4-tuple; the
    flows that are not on a served port (the job connects out) are selected by 4-tuple,
    plus by remote port when the caller knows the ports the job connects to. At most
    max_flows / max_ports entries (the kernel maps' sizes): later ones are left out."""
    ports: dict[tuple[int, str], int] = {}
    flows: dict[FlowKey, int] = {}
    shared = shared_ports(jobs)
    for job in sorted(jobs, key=lambda j: j.job_id):
        slot = slots.get(job.job_id)
        if slot is None:
            continue
        for p in job.listen_ports:
            if len(ports) < max_ports and p not in shared:
                ports.setdefault((p, "local"), slot)
        for p in remote_ports.get(job.job_id, ()):
            if len(ports) < max_ports:
                ports.setdefault((p, "remote"), slot)
        for f in job.client_flows(shared):
            if len(flows) < max_flows:  # beyond: not selected (the maps are full), like the classifier
                flows.setdefault(f, slot)
    return ports, flows


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
