"""The emulated cluster a lab scenario runs on: its hosts, their racks, and the link rates, switch buffer
and host settings the testbed builds (one network namespace per host, emulated switches between them).

This is the *lab's* fabric, not the daemon's view of a network: ``hostctl.core.topology.Topology`` is what
a running daemon and switchemu read (switches, host addresses, link capacities, paths) from a
topology file. A scenario's ``LabFabric`` is turned into such a file by
``hostctl_lab.bench.runner.switch_topology`` when the scenario needs switchemu; the two are kept apart
on purpose: this one also carries what only an emulation has (queue sizes, TCP congestion control,
sysctls, emulated host cores, GSO).

It lives outside ``bench`` so that the testbed (``hostctl_lab.testbed.net``), which builds it, and the
scenario parser (``hostctl_lab.bench.scenario``), which reads it from a toml file, both import it from below.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class LabFabric:
    hosts: tuple[str, ...]  # h0, h1, ...
    rack_of: tuple[int, ...]  # rack index of each host (all 0 with one switch)
    racks: int  # 1 = one switch, no aggregation link
    link_bps: int  # every host NIC, each direction (bits/s)
    uplink_bps: int | None  # each rack's uplink, each direction; None with one switch
    queue_bytes: int  # switch port buffer
    tcp_cc: str | None = None  # congestion control for the workloads' sockets; None: the kernel default
    sysctls: tuple[tuple[str, str], ...] = ()  # set in every host namespace
    host_cores: float | None = None  # each host's emulated processor, shared by its workers' compute; None: sleep
    gso: bool = True  # False: the hosts' TCP sends one-frame packets (eth0 gso_max_segs 1)

    def index(self, host: str) -> int:
        return self.hosts.index(host)
