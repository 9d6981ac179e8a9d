"""The simulator's fabrics: hosts, directed links with capacities, and paths, as arrays.

Every fabric is a ``hostctl.core.topology.Topology`` (the emulated switch's own type: the same
up-down paths and ECMP choice), wrapped with what the fluid engine needs: a capacity array in
bytes/s, a path as an array of link indices, and which links are hosts' NICs (egress), where
TensorLights bands act.

Built-in fabrics (``--topology``):

- ``single-switch``: paper 000's cluster, N hosts on one non-blocking switch (10 Gbit/s NICs);
- ``mlcc-tree``: MLCC's simulated three-tier tree (spec 2.13): 10 servers per ToR, 10 ToRs per
  edge switch, the edge switches under one aggregation switch; 10/20/40 Gbit/s by tier;
- ``lingjun``: the Alibaba Lingjun 2023 production topology (847 hosts, ../shared/data/lingjun-2023),
  with core/topology's default rates (25/100/400 Gbit/s);
- a file: a switchemu topology TOML or a Lingjun-format CSV (docs/switchemu.md).

``oversub`` (mlcc-tree and single-switch racks) sets every uplink to (what its children can send) /
oversub, instead of the tier rates.
"""

from __future__ import annotations

import math
import os
from dataclasses import dataclass, field

import numpy as np

from hostctl.core.topology import Topology
from hostctl.errors import ConfigError

GBIT = 10**9
TOPOLOGIES = ("single-switch", "mlcc-tree", "lingjun")


def shared_data(relpath: str, env: str, what: str, flag: str) -> str:
    """A file of the data folder beside the repository (``../shared/data/RELPATH``), or $ENV."""
    p = os.environ.get(env)
    if p:
        return p
    here = os.path.dirname(os.path.abspath(__file__))
    for up in range(2, 7):
        root = os.path.normpath(os.path.join(here, *[".."] * up))
        for base in (root, os.path.dirname(root)):
            p = os.path.join(base, "shared", "data", relpath)
            if os.path.exists(p):
                return p
    raise ConfigError(f"{what} is not found: put ../shared/data/{relpath} beside the repository, set {env}"
                      f"{', or give ' + flag if flag else ''}")


def lingjun_csv() -> str:
    return shared_data("lingjun-2023/topo.csv", "HOSTCTL_LINGJUN", "the Lingjun topology", "")


@dataclass
class Fabric:
    """A Topology as arrays: ``capacity[l]`` bytes/s; ``hosts`` in order; ``path(a, b)`` link indices
    (host indices in, cached); ``nic[l]`` True for links that leave a host."""

    topo: Topology
    name: str = ""
    hosts: list[str] = field(init=False)
    capacity: np.ndarray = field(init=False)
    nic: np.ndarray = field(init=False)
    _paths: dict = field(init=False, repr=False, default_factory=dict)

    def __post_init__(self) -> None:
        self.hosts = list(self.topo.hosts)
        self.capacity = np.array([ln.capacity_Bps for ln in self.topo.links], dtype=float)
        self.nic = np.array([ln.src in self.topo.hosts for ln in self.topo.links], dtype=bool)

    @property
    def n_hosts(self) -> int:
        return len(self.hosts)

    @property
    def n_links(self) -> int:
        return len(self.capacity)

    def path(self, a: int, b: int) -> np.ndarray:
        key = (a, b)
        p = self._paths.get(key)
        if p is None:
            p = np.array(self.topo.path(self.hosts[a], self.hosts[b]), dtype=np.int64)
            self._paths[key] = p
        return p

    def nic_rate_Bps(self, host: int = 0) -> float:
        return float(self.capacity[self.topo.owned_links(self.hosts[host])[0]])

    def describe(self) -> dict:
        return {"name": self.name, "hosts": self.n_hosts, "switches": len(self.topo.switches),
                "links": self.n_links}


def _switch(name: str, hosts: list[str], host_bps: float, parent: str | None = None,
            uplink_bps: float | None = None) -> dict:
    d: dict = {"name": name, "hosts": hosts, "host_rate": f"{int(host_bps)}bit"}
    if parent:
        d["parent"] = parent
        d["uplink_rate"] = f"{int(uplink_bps)}bit"
    return d


def single_switch(hosts: int, nic_bps: float = 10 * GBIT) -> Fabric:
    """N hosts on one non-blocking switch (paper 000: 16 servers, 10GbE)."""
    if hosts < 1:
        raise ConfigError("--servers must be at least 1")
    topo = Topology.from_dict({"switch": [_switch("sw", [f"h{i}" for i in range(hosts)], nic_bps)]})
    return Fabric(topo, "single-switch")


def mlcc_tree(servers: int = 1000, *, per_tor: int = 10, tors_per_edge: int = 10, nic_bps: float = 10 * GBIT,
              tor_bps: float = 20 * GBIT, edge_bps: float = 40 * GBIT, oversub: float | None = None) -> Fabric:
    """MLCC's three-tier tree: ``per_tor`` servers per ToR, ``tors_per_edge`` ToRs per edge switch, every
    edge switch under one aggregation switch (1000 servers: 10 x 10 x 10). ToR uplinks ``tor_bps``,
    edge uplinks ``edge_bps``; with ``oversub``, each uplink is what its children can send / oversub."""
    if servers < 1:
        raise ConfigError("--servers must be at least 1")
    if oversub is not None and oversub <= 0:
        raise ConfigError(f"oversubscription must be positive, got {oversub}")
    n_tor = math.ceil(servers / per_tor)
    n_edge = math.ceil(n_tor / tors_per_edge)
    if oversub is not None:
        tor_bps = per_tor * nic_bps / oversub
        edge_bps = tors_per_edge * tor_bps / oversub
    sw = [{"name": "agg"}]
    for e in range(n_edge):
        sw.append({"name": f"edge{e}", "parent": "agg", "uplink_rate": f"{int(edge_bps)}bit"})
    for t in range(n_tor):
        hosts = [f"h{i}" for i in range(t * per_tor, min(servers, (t + 1) * per_tor))]
        sw.append(_switch(f"tor{t}", hosts, nic_bps, f"edge{t // tors_per_edge}", tor_bps))
    return Fabric(Topology.from_dict({"switch": sw}), "mlcc-tree")


def lingjun(path: str | None = None) -> Fabric:
    with open(path or lingjun_csv()) as f:
        return Fabric(Topology.from_lingjun_csv(f.read()), "lingjun")


def load(spec: str, servers: int | None = None, *, oversub: float | None = None,
         nic_bps: float | None = None) -> Fabric:
    """A fabric by name (``TOPOLOGIES``) or from a file (switchemu TOML or Lingjun CSV)."""
    if spec == "single-switch":
        return single_switch(servers or 16, nic_bps or 10 * GBIT)
    if spec == "mlcc-tree":
        return mlcc_tree(servers or 1000, oversub=oversub, **({"nic_bps": nic_bps} if nic_bps else {}))
    if spec == "lingjun":
        fab = lingjun()
    elif os.path.isfile(spec):
        try:
            with open(spec, encoding="utf-8") as f:
                text = f.read()
        except (OSError, UnicodeDecodeError) as e:
            raise ConfigError(f"cannot read topology file {spec}: {e}") from None
        fab = Fabric(Topology.parse(text, filename=spec), os.path.basename(spec))
    else:
        raise ConfigError(f"unknown topology {spec!r}: choose {', '.join(TOPOLOGIES)} or give a topology file "
                          "(switchemu TOML or Lingjun CSV)")
    if servers is not None and servers != fab.n_hosts:
        raise ConfigError(f"--servers {servers}: topology {spec} has {fab.n_hosts} hosts (leave --servers out)")
    return fab
