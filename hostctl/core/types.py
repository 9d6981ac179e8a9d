"""Plain data shared by discovery, policies, the plan builder and the daemon.

Units are in field names: `_bytes`, `_bps` (bits/s), `_Bps` (bytes/s), `_s`.
No I/O here (hostctl.core is pure; tests/unit/test_core_pure.py checks it).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import NamedTuple


class FlowKey(NamedTuple):
    """One TCP connection as seen on this host, oriented egress (local -> remote).

    A NamedTuple, not a dataclass: flow keys are hashed and compared thousands of times per
    slot (dict lookups in the monitor, the pacer and the controller), and a tuple does that
    in C; a frozen dataclass's generated __hash__/__eq__ cost about a tenth of the pacing
    daemon's CPU with 100 flows. Ordered by (laddr, lport, raddr, rport), as before."""

    laddr: str
    lport: int
    raddr: str
    rport: int

    def __str__(self) -> str:
        la = f"[{self.laddr}]" if ":" in self.laddr else self.laddr
        ra = f"[{self.raddr}]" if ":" in self.raddr else self.raddr
        return f"{la}:{self.lport}->{ra}:{self.rport}"


@dataclass(frozen=True)
class JobSpec:
    """How the operator asked for a job to be found (flag or config [[jobs]] entry).

    Exactly one of the selectors is used per spec: ports, pids or match.
    """

    name: str | None = None  # config name: becomes the job id when given
    ports: tuple[int, ...] = ()  # ports of the job's PS: listened to here, or connected to (worker side)
    pids: tuple[int, ...] = ()  # root PIDs; children belong to the job too
    match: str | None = None  # regex on the process command line
    model_bytes: int | None = None  # model-update size, if known
    cap_bps: int | None = None  # policy cap: this job's rate cap (bits/s)
    comm: str | None = None  # communication pattern: "ps" or "ring" (mlcc's dependency rules need it)
    ring_size: int | None = None  # ring all-reduce: number of ranks (one chunk = iteration / (2 (n - 1)))


@dataclass(frozen=True)
class Job:
    """A DL job present on this host."""

    job_id: str  # same on every host carrying the job (see core/grouping.py)
    source: str  # how it was found: "port", "pid", "match" or "config"
    pids: tuple[int, ...] = ()
    listen_ports: tuple[int, ...] = ()  # egress with sport in here belongs to the job
    flows: tuple[FlowKey, ...] = ()  # established connections of the job on this host
    role: str = "server"  # "server" (serves a listening port), "client" (connects out) or "both"
    # servers the job connects to (remote address, port): egress to them belongs to the job,
    # whatever the local end (new connections, a source rewritten by NAT)
    remote_endpoints: tuple[tuple[str, int], ...] = ()
    model_bytes: int | None = None  # from the config; None when unknown
    comm: str | None = None  # "ps", "ring" or None (unknown), from the config
    ring_size: int | None = None  # ring all-reduce ranks, from the config

    def client_flows(self, shared: frozenset[int] | set[int] = frozenset()) -> tuple[FlowKey, ...]:
        """Flows not on one of the job's listening ports (a 4-tuple entry in the classifier and
        the pacer, unless a remote-endpoint entry covers them). A port in ``shared`` (served by
        several jobs, see shared_ports) has no port entry, so its flows are in here too."""
        ports = set(self.listen_ports) - set(shared)
        return tuple(f for f in self.flows if f.lport not in ports)


def shared_ports(jobs: Sequence[Job]) -> frozenset[int]:
    """Listening ports served by more than one job (containers of one host serving the same
    port, each at its own address): a port entry cannot tell their packets apart, so their
    flows are selected by 4-tuple instead (flows opened since the last scan stay unselected
    until the next one)."""
    seen: set[int] = set()
    out: set[int] = set()
    for j in jobs:
        for p in j.listen_ports:
            (out if p in seen else seen).add(p)
    return frozenset(out)


@dataclass(frozen=True)
class ProcInfo:
    """What discovery needs to know about one process (a snapshot, may be stale)."""

    pid: int
    ppid: int
    cmdline: str
    env: dict[str, str] = field(default_factory=dict)  # only the launcher keys (MASTER_ADDR, ...)


@dataclass(frozen=True)
class SockInfo:
    """One TCP socket of this network namespace."""

    state: str  # "LISTEN" or "ESTABLISHED" (others are ignored)
    laddr: str
    lport: int
    raddr: str = ""
    rport: int = 0
    pid: int | None = None  # owning process, when known


@dataclass(frozen=True)
class Snapshot:
    """Processes and TCP sockets at one instant; the input of pure job grouping."""

    procs: tuple[ProcInfo, ...]
    socks: tuple[SockInfo, ...]
    host_addr: str = ""  # primary address of the egress interface (for wildcard listeners)
