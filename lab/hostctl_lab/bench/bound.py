"""The link-bound lower bound on average JCT for a scenario (glue to hostctl.core)."""

from __future__ import annotations

from hostctl.core import bound, traffic
from hostctl_lab.bench.scenario import Scenario


def for_scenario(sc: Scenario) -> dict:
    """Best average JCT any order of the scenario's transfers could reach on its links
    (see hostctl.core.bound.avg_jct_lower_bound), plus each job's standalone time."""
    t = sc.topology
    net = traffic.network(t.hosts, t.rack_of, t.racks, t.link_bps, t.uplink_bps)
    res = bound.avg_jct_lower_bound(traffic.bound_inputs(sc.jobs, net))
    res["jobs"] = [j.name for j in sc.jobs]
    return res
