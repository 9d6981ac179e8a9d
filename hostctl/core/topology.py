"""Fabric topology for the emulated switches: hosts, directed links with capacities, owners, paths (pure).

Parsing works on text or dicts; reading the file is the caller's job (``switchemu`` CLI).

Model
-----
* Nodes are hosts and switches. Every host hangs from exactly one switch (its ToR). A switch may have
  parent switches (its uplinks); the parent graph must be acyclic.
* Every cable is two **directed links**, one per direction, with id ``"A>B"`` and a capacity in bytes/s.
* A link is **owned** by the node it leaves (spec 2.4.1: a switch keeps the load of its outgoing links).
  So ``h0>tor0`` belongs to host h0 (the daemon's own NIC, "local mode"), ``tor0>h0`` and ``tor0>agg``
  to tor0, ``agg>tor0`` to agg.
* Paths are up-down (tree / Clos): from the source's ToR up to a lowest common ancestor and down to the
  destination's ToR. If several shortest up-down paths exist (multi-homed switches, ECMP), one is picked
  deterministically from a CRC32 of ``"src>dst"``, so every process agrees. Paths are computed lazily
  and cached.

TOML format (``format = 1``)
----------------------------
::

    format = 1                       # optional; the only version so far
    [defaults]
    host_rate = "25gbit"             # host <-> switch links, each direction (default 25gbit)

    [[switch]]
    name = "tor0"                    # unique among hosts and switches
    hosts = ["h0=10.100.0.1", "h1=10.100.0.2"]    # "name=address", or "name" (address = name),
                                     # or inline tables {name = "h0", addr = "10.100.0.1"},
                                     # or a range: {count = 4, prefix = "h", start = 0, first_addr = "10.100.0.1"}
                                     # (names h0..h3, addresses counted up from first_addr)
    host_rate = "200mbit"            # optional: overrides defaults.host_rate for this switch's hosts
    parent = "agg"                   # optional: the switch above; a list of names for ECMP uplinks
    uplink_rate = "1gbit"            # capacity of each uplink, each direction (required with parent)

    [[switch]]
    name = "agg"

Rates use tc units (``hostctl.core.units.parse_rate_bps``: bit/kbit/mbit/gbit, or kbps/mbps/gbps for
bytes/s) and are stored in bytes/s. The hostctl testbed (``hostctl testbed up``) is one switch with N
hosts at ``10.B.0.1..`` or racks ``tor0..`` under ``agg`` with an uplink rate: both are written this way
(see docs/switchemu.md).

Lingjun CSV (``ip,DSW,PSW,ASW``)
--------------------------------
The Alibaba Lingjun 2023 file lists per host its core (DSW), aggregation (PSW) and top-of-rack (ASW)
switch. ASW names repeat under different PSWs (S1..S48 per pod), so a ToR is named ``PSW.ASW``
(119 ToRs in the 847-host file), which makes the fabric a strict 3-tier tree. Hosts are named
``h0..`` in file order with the ``ip`` column (a hashed id) as their address. Default capacities
(overridable): host <-> ToR 25 Gbit/s, ToR <-> aggregation 100 Gbit/s, aggregation <-> core 400 Gbit/s.
"""

from __future__ import annotations

import csv
import io
import ipaddress
import zlib
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from hostctl.core.tomltext import parse_toml
from hostctl.core.units import parse_rate_bps
from hostctl.errors import ConfigError

DEFAULT_HOST_RATE_bps = 25 * 10**9
LINGJUN_HOST_RATE_bps = 25 * 10**9  # host <-> ToR
LINGJUN_TOR_UPLINK_bps = 100 * 10**9  # ToR <-> aggregation (PSW)
LINGJUN_AGG_UPLINK_bps = 400 * 10**9  # aggregation (PSW) <-> core (DSW)
MAX_NAME_LEN = 64
_PATH_CACHE_MAX = 200_000


class UnknownNode(LookupError):
    """A host (by name or address) or switch that is not in the topology."""

    def __str__(self) -> str:
        return str(self.args[0]) if self.args else "unknown node"


@dataclass(frozen=True, slots=True)
class Host:
    name: str
    addr: str
    switch: str  # its ToR


@dataclass(frozen=True, slots=True)
class Link:
    link_id: str  # "A>B"
    src: str  # node the link leaves (its owner)
    dst: str
    capacity_Bps: int

    @property
    def owner(self) -> str:
        return self.src


@dataclass
class Topology:
    """Hosts, switches and directed links; lazy cached up-down paths. Build with ``from_toml``,
    ``from_dict`` or ``from_lingjun_csv``."""

    hosts: dict[str, Host]
    switches: dict[str, tuple[str, ...]]  # switch -> parent switches (uplinks)
    links: list[Link]
    link_index: dict[str, int] = field(init=False)
    _by_addr: dict[str, Host] = field(init=False, repr=False)
    _owned: dict[str, tuple[int, ...]] = field(init=False, repr=False)
    _up_routes: dict[str, dict[str, list[tuple[str, ...]]]] = field(init=False, repr=False)
    _sw_paths: dict[tuple[str, str], list[tuple[str, ...]]] = field(init=False, repr=False)
    _paths: dict[tuple[str, str], tuple[int, ...]] = field(init=False, repr=False)

    def __post_init__(self) -> None:
        self.link_index = {ln.link_id: i for i, ln in enumerate(self.links)}
        self._by_addr = {}
        for h in self.hosts.values():
            self._by_addr[h.addr] = h
        owned: dict[str, list[int]] = {}
        for i, ln in enumerate(self.links):
            owned.setdefault(ln.src, []).append(i)
        self._owned = {k: tuple(v) for k, v in owned.items()}
        self._up_routes = {}
        self._sw_paths = {}
        self._paths = {}
        self._check_acyclic()

    # ------------------------------------------------------------------ construction

    @classmethod
    def from_toml(cls, text: str) -> Topology:
        return cls.from_dict(parse_toml(text, "topology"))

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Topology:
        """Build from the parsed TOML structure (see the module docstring)."""
        if not isinstance(data, dict):
            raise ConfigError("topology must be a table with [[switch]] entries")
        fmt = data.get("format", 1)
        if fmt != 1:
            raise ConfigError(f"topology format {fmt!r} is not supported: write format = 1")
        unknown = set(data) - {"format", "defaults", "switch"}
        if unknown:
            raise ConfigError(f"unknown topology keys {sorted(unknown)}: expected format, [defaults], [[switch]]")
        defaults = data.get("defaults", {})
        if not isinstance(defaults, dict) or set(defaults) - {"host_rate"}:
            raise ConfigError("[defaults] takes only host_rate, e.g. host_rate = \"25gbit\"")
        default_host_Bps = _rate_Bps(defaults.get("host_rate", DEFAULT_HOST_RATE_bps), "defaults.host_rate")
        sws = data.get("switch")
        if not isinstance(sws, list) or not sws:
            raise ConfigError("topology has no switches: add [[switch]] entries with name and hosts")
        hosts: dict[str, Host] = {}
        switches: dict[str, tuple[str, ...]] = {}
        cables: list[tuple[str, str, int]] = []
        for n, sw in enumerate(sws):
            if not isinstance(sw, dict):
                raise ConfigError(f"switch #{n + 1} must be a table")
            bad = set(sw) - {"name", "hosts", "host_rate", "parent", "uplink_rate"}
            if bad:
                raise ConfigError(f"switch #{n + 1}: unknown keys {sorted(bad)} "
                                  "(expected name, hosts, host_rate, parent, uplink_rate)")
            name = _name(sw.get("name"), f"switch #{n + 1} name")
            if name in switches or name in hosts:
                raise ConfigError(f"switch {name!r} is defined twice: names must be unique")
            parents = sw.get("parent", [])
            if isinstance(parents, str):
                parents = [parents]
            if not isinstance(parents, list) or not all(isinstance(p, str) for p in parents):
                raise ConfigError(f"switch {name}: parent must be a switch name or a list of names")
            if len(set(parents)) != len(parents) or name in parents:
                raise ConfigError(f"switch {name}: parents must be distinct and not the switch itself")
            switches[name] = tuple(parents)
            if parents:
                if "uplink_rate" not in sw:
                    raise ConfigError(f"switch {name}: give uplink_rate (e.g. \"10gbit\") with parent")
                up = _rate_Bps(sw["uplink_rate"], f"switch {name} uplink_rate")
                cables.extend((name, p, up) for p in parents)
            elif "uplink_rate" in sw:
                raise ConfigError(f"switch {name}: uplink_rate needs a parent switch")
            host_Bps = _rate_Bps(sw["host_rate"], f"switch {name} host_rate") if "host_rate" in sw \
                else default_host_Bps
            for hname, addr in _host_list(sw.get("hosts", []), name):
                if hname in hosts or hname in switches:
                    raise ConfigError(f"host {hname!r} is defined twice: names must be unique")
                hosts[hname] = Host(hname, addr, name)
                cables.append((hname, name, host_Bps))
        for sw, parents in switches.items():
            for p in parents:
                if p not in switches:
                    raise ConfigError(f"switch {sw}: parent {p!r} is not a switch in this topology")
        addrs: dict[str, str] = {}
        for h in hosts.values():
            if h.addr in addrs and addrs[h.addr] != h.name:
                raise ConfigError(f"address {h.addr} is used by hosts {addrs[h.addr]} and {h.name}")
            if h.addr in hosts and h.addr != h.name:
                raise ConfigError(f"address {h.addr} of host {h.name} is also a host name")
            addrs[h.addr] = h.name
        return cls(hosts, switches, _links(cables))

    @classmethod
    def from_lingjun_csv(cls, text: str, *, host_rate_bps: int = LINGJUN_HOST_RATE_bps,
                         tor_uplink_bps: int = LINGJUN_TOR_UPLINK_bps,
                         agg_uplink_bps: int = LINGJUN_AGG_UPLINK_bps) -> Topology:
        """Parse the Lingjun ``ip,DSW,PSW,ASW`` CSV (rates in bits/s; see the module docstring)."""
        reader = csv.reader(io.StringIO(text))
        header = next(reader, None)
        if header is None or [c.strip() for c in header] != ["ip", "DSW", "PSW", "ASW"]:
            raise ConfigError(f"not a Lingjun topology CSV: the header must be ip,DSW,PSW,ASW, got {header}")
        hosts: dict[str, Host] = {}
        switches: dict[str, tuple[str, ...]] = {}
        cables: list[tuple[str, str, int]] = []
        seen_ip: set[str] = set()
        h_Bps, t_Bps, a_Bps = host_rate_bps // 8, tor_uplink_bps // 8, agg_uplink_bps // 8
        for lineno, row in enumerate(reader, start=2):
            if not row or all(not c.strip() for c in row):
                continue
            if len(row) != 4 or not all(c.strip() for c in row):
                raise ConfigError(f"topology CSV line {lineno}: expected 4 non-empty columns ip,DSW,PSW,ASW")
            ip, dsw, psw, asw = (c.strip() for c in row)
            if ip in seen_ip:
                raise ConfigError(f"topology CSV line {lineno}: host {ip} is listed twice")
            seen_ip.add(ip)
            tor = f"{psw}.{asw}"
            if dsw not in switches:
                switches[dsw] = ()
            if psw not in switches:
                switches[psw] = (dsw,)
                cables.append((psw, dsw, a_Bps))
            elif switches[psw] != (dsw,):
                raise ConfigError(f"topology CSV line {lineno}: aggregation switch {psw} under two cores")
            if tor not in switches:
                switches[tor] = (psw,)
                cables.append((tor, psw, t_Bps))
            name = f"h{len(hosts)}"
            hosts[name] = Host(name, ip, tor)
            cables.append((name, tor, h_Bps))
        if not hosts:
            raise ConfigError("topology CSV lists no hosts")
        return cls(hosts, switches, _links(cables))

    @classmethod
    def parse(cls, text: str, *, filename: str = "", **csv_rates: int) -> Topology:
        """TOML or Lingjun CSV, chosen by the file name (``.csv``) or by the CSV header."""
        if filename.endswith(".csv") or text.lstrip().startswith("ip,DSW"):
            return cls.from_lingjun_csv(text, **csv_rates)
        return cls.from_toml(text)

    def _check_acyclic(self) -> None:
        state: dict[str, int] = {}
        for root in self.switches:
            stack = [(root, iter(self.switches[root]))]
            if state.get(root) == 2:
                continue
            state[root] = 1
            while stack:
                node, it = stack[-1]
                nxt = next(it, None)
                if nxt is None:
                    state[node] = 2
                    stack.pop()
                elif state.get(nxt) == 1:
                    raise ConfigError(f"switch parents form a loop through {nxt}: make the uplinks a tree")
                elif state.get(nxt) is None:
                    state[nxt] = 1
                    stack.append((nxt, iter(self.switches[nxt])))

    # ------------------------------------------------------------------ lookups

    def host(self, name_or_addr: str) -> Host:
        h = self.hosts.get(name_or_addr) or self._by_addr.get(name_or_addr)
        if h is None:
            raise UnknownNode(f"unknown host {name_or_addr!r}")
        return h

    def owned_links(self, node: str) -> tuple[int, ...]:
        """Indices of the links ``node`` owns (its outgoing links)."""
        if node not in self.switches and node not in self.hosts:
            raise UnknownNode(f"unknown switch {node!r}")
        return self._owned.get(node, ())

    def capacity_Bps(self, link: int) -> int:
        return self.links[link].capacity_Bps

    def path(self, src: str, dst: str) -> tuple[int, ...]:
        """Link indices from host ``src`` to host ``dst`` (names or addresses); () if they are the same
        host (intra-host traffic is not scheduled). Raises UnknownNode."""
        a, b = self.host(src), self.host(dst)
        key = (a.name, b.name)
        p = self._paths.get(key)
        if p is not None:
            return p
        if a.name == b.name:
            p = ()
        else:
            routes = self._switch_paths(a.switch, b.switch)
            route = routes[zlib.crc32(f"{a.name}>{b.name}".encode()) % len(routes)] if len(routes) > 1 else routes[0]
            nodes = (a.name, *route, b.name)
            idx = self.link_index
            p = tuple(idx[f"{nodes[i]}>{nodes[i + 1]}"] for i in range(len(nodes) - 1))
        if len(self._paths) >= _PATH_CACHE_MAX:
            self._paths.clear()
        self._paths[key] = p
        return p

    def path_ids(self, src: str, dst: str) -> tuple[str, ...]:
        return tuple(self.links[i].link_id for i in self.path(src, dst))

    def _routes_up(self, sw: str) -> dict[str, list[tuple[str, ...]]]:
        """Every ancestor of ``sw`` (itself included) -> the up-routes (node tuples) from sw to it."""
        r = self._up_routes.get(sw)
        if r is None:
            r = {sw: [(sw,)]}
            for p in self.switches[sw]:
                for anc, routes in self._routes_up(p).items():
                    r.setdefault(anc, []).extend((sw, *rt) for rt in routes)
            self._up_routes[sw] = r
        return r

    def _switch_paths(self, sa: str, sb: str) -> list[tuple[str, ...]]:
        key = (sa, sb)
        got = self._sw_paths.get(key)
        if got is not None:
            return got
        ua, ub = self._routes_up(sa), self._routes_up(sb)
        common = set(ua) & set(ub)
        if not common:
            raise UnknownNode(f"no path between switches {sa} and {sb}: they share no ancestor")
        cands = [(*ra, *reversed(rb[:-1])) for c in common for ra in ua[c] for rb in ub[c]]
        shortest = min(len(c) for c in cands)
        got = sorted(c for c in cands if len(c) == shortest)
        self._sw_paths[key] = got
        return got

    def switch_names(self) -> list[str]:
        return list(self.switches)


def path_order(links: Sequence[str]) -> list[str]:
    """Link ids ``"A>B"`` in the order a packet crosses them, whatever order they came in (a flow's
    links merged from the replies of several switches come in the order the replies arrived). A path
    with a gap (a switch on it did not answer) gives its pieces in the order of their first link's id.
    Ids that are not all ``"A>B"``, or that do not form pieces of one path (a node left twice), keep
    the order they came in."""
    nxt: dict[str, str] = {}
    ends: set[str] = set()
    for lid in links:
        a, sep, b = lid.partition(">")
        if not sep or ">" in b or a in nxt:
            return list(links)
        nxt[a] = lid
        ends.add(b)
    out: list[str] = []
    for head in sorted(lid for a, lid in nxt.items() if a not in ends):
        lid: str | None = head
        while lid is not None and len(out) <= len(nxt):  # (a piece that runs into a loop ends)
            out.append(lid)
            lid = nxt.get(lid.partition(">")[2])
    if len(out) != len(nxt):  # a loop
        return list(links)
    return out


# ---------------------------------------------------------------------- helpers


def _links(cables: list[tuple[str, str, int]]) -> list[Link]:
    out: list[Link] = []
    for a, b, cap in cables:
        out.append(Link(f"{a}>{b}", a, b, cap))
        out.append(Link(f"{b}>{a}", b, a, cap))
    return out


def _name(v: Any, what: str) -> str:
    if not isinstance(v, str) or not v or len(v) > MAX_NAME_LEN or ">" in v or any(c.isspace() for c in v):
        raise ConfigError(f"{what} must be a non-empty string of at most {MAX_NAME_LEN} characters "
                          f"without spaces or '>', got {v!r}")
    return v


def _rate_Bps(v: Any, what: str) -> int:
    bps = parse_rate_bps(v, what=what)
    return max(1, bps // 8)  # bits/s -> bytes/s


def _host_list(v: Any, switch: str) -> list[tuple[str, str]]:
    if isinstance(v, dict):
        bad = set(v) - {"count", "prefix", "start", "first_addr"}
        count, prefix, start = v.get("count"), v.get("prefix", "h"), v.get("start", 0)
        if bad or not isinstance(count, int) or isinstance(count, bool) or not 0 < count <= 100_000 \
                or not isinstance(start, int) or start < 0 or not isinstance(prefix, str):
            raise ConfigError(f"switch {switch}: a host range is {{count = N, prefix = \"h\", start = 0, "
                              f"first_addr = \"10.0.0.1\"}} with 0 < N <= 100000")
        first = v.get("first_addr")
        base = None
        if first is not None:
            try:
                base = ipaddress.ip_address(first)
            except ValueError:
                raise ConfigError(f"switch {switch}: first_addr {first!r} is not an IP address") from None
        out = []
        for i in range(count):
            name = _name(f"{prefix}{start + i}", f"switch {switch} host")
            out.append((name, str(base + i) if base is not None else name))
        return out
    if not isinstance(v, list):
        raise ConfigError(f"switch {switch}: hosts must be a list or a range table")
    out = []
    for item in v:
        if isinstance(item, str):
            name, _, addr = item.partition("=")
            name, addr = name.strip(), addr.strip() or name.strip()
        elif isinstance(item, dict) and set(item) <= {"name", "addr"}:
            name, addr = item.get("name"), item.get("addr", item.get("name"))
        else:
            raise ConfigError(f"switch {switch}: each host is \"name=address\" or {{name = .., addr = ..}}, got {item!r}")
        out.append((_name(name, f"switch {switch} host name"), _name(addr, f"switch {switch} host address")))
    return out
