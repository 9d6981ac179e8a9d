"""A testbed scenario file (examples/scenarios/*.toml) in the simulator: the same hosts, links and
jobs, with the scenario's own placement, so that ``hostctl bench`` and the simulator can be compared.

What the simulator leaves out of a scenario (say so next to every comparison): cross traffic
(``[[cross]]`` bulk flows), gradient buckets overlapped with the backward pass (``buckets``), TCP's
own dynamics (slow start, losses, RTOs, queueing delay) and the hosts' CPU (``host_cores``).
"""

from __future__ import annotations

from dataclasses import dataclass

from hostctl.core.topology import Topology
from hostctl_lab.bench.scenario import Scenario, load_scenario
from hostctl_lab.sim.topo import Fabric
from hostctl_lab.sim.workload import JobSpec


@dataclass
class SimScenario:
    name: str
    fabric: Fabric
    jobs: list[JobSpec]
    rr_interval_s: float
    bands: int
    cap_bps: int | None
    left_out: list[str]


def fabric_of(sc: Scenario) -> Fabric:
    t = sc.topology
    if t.racks <= 1:
        sw = [{"name": "sw", "hosts": list(t.hosts), "host_rate": f"{t.link_bps}bit"}]
    else:
        sw = [{"name": "agg"}]
        for r in range(t.racks):
            sw.append({"name": f"tor{r}", "hosts": [h for h, k in zip(t.hosts, t.rack_of) if k == r],
                       "host_rate": f"{t.link_bps}bit", "parent": "agg", "uplink_rate": f"{t.uplink_bps}bit"})
    return Fabric(Topology.from_dict({"switch": sw}), sc.name)


def from_scenario(path: str) -> SimScenario:
    sc = load_scenario(path)
    fab = fabric_of(sc)
    idx = {h: i for i, h in enumerate(fab.hosts)}
    jobs = []
    for j in sc.jobs:
        kind = "ps" if j.kind == "ps" else "ring"
        jobs.append(JobSpec(j.name, j.arrival_s, j.workers, "scenario", j.model_bytes, j.compute_s, j.iterations,
                            kind, tuple(idx[h] for h in j.worker_hosts), tuple(idx[h] for h in j.ps_hosts)))
    left = []
    if sc.cross:
        left.append(f"{len(sc.cross)} cross-traffic flow group(s)")
    if any(j.buckets > 1 for j in sc.jobs):
        left.append("gradient buckets (the whole update is sent after compute)")
    if sc.topology.host_cores:
        left.append("the hosts' emulated processors")
    hs = sc.hostctl
    from hostctl.core.units import parse_rate_bps

    return SimScenario(sc.name, fab, jobs, hs.rr_interval_s, hs.bands,
                       parse_rate_bps(hs.cap) if getattr(hs, "cap", None) else None, left)
