"""Flow discovery, the I/O side: snapshot processes and TCP sockets of this
network namespace and of its containers, then group them into jobs with
hostctl.core.grouping.

Two ways to take a snapshot:

* `take_socket_snapshot()` reads the listening and established TCP sockets over
  sock_diag (/proc/net/tcp and /proc/net/tcp6 where it is missing): no processes,
  no socket owners. Cheap, enough when every job spec selects by port (Discovery asks the
  kernel for the sockets of the listed ports only).
* `take_snapshot()` lists the processes of this network namespace (pid, ppid,
  command line, from /proc) and the sockets with their owners: sock_diag gives each
  socket's inode, and the owners are found among the fds of the processes that can
  own a job's sockets (`owned_sockets`), so its cost grows with the open files of
  those processes, not of the whole machine (psutil.net_connections() walks every
  /proc/<pid>/fd; it remains the fallback without sock_diag). As root every owner is
  visible; otherwise only the caller's own processes are.

hostctl is never part of a job: `Discovery` groups with its own pid excluded, and
grouping leaves out every process running a hostctl command with its descendants
(hostctl.core.grouping), so `hostctl flows --match REGEX` does not find itself, a
daemon or their wrappers (sudo, timeout) even when REGEX matches their command lines.

Containers (``containers=True``, the default; hostctl.containers says which namespaces
count): their processes are listed with this namespace's, and their sockets are read with
sock_diag from inside their namespace. A listener of a container on the wildcard address is
reported with the address a peer reaches it at: the container's own (``container_addr =
"pod"``: routed pod networks) or the host's address on the egress interface (``"host"``:
masquerading with hostPort = containerPort). Established sockets keep the container-side
addresses, the ones its traffic has on the host's NIC when routed and the ones the sock_ops
pacer sees in every case.

Processes and sockets that vanish mid-scan are normal and skipped silently.
IPv4-mapped IPv6 addresses (::ffff:a.b.c.d, IPv4 traffic on a dual-stack socket)
are reported as plain IPv4 addresses in both paths.
"""

from __future__ import annotations

import dataclasses
import ipaddress
import os
import socket
import struct
import sys
from collections.abc import Callable, Iterable, Sequence

import psutil

from hostctl.containers import ContainerNs, call_in_each_netns, container_namespaces, netns_inode, veth_peer_nsids
from hostctl.core.grouping import (
    ESTABLISHED,
    LAUNCHER_ENV_KEYS,
    LISTEN,
    group_jobs,
    is_wildcard,
    normalize_addr,
    pids_needing_env,
)
from hostctl.core.types import Job, JobSpec, ProcInfo, Snapshot, SockInfo
from hostctl.datapath.rtnl_raw import RawNetlink, _rta
from hostctl.datapath.sockreset import socket_fds
from hostctl.consts import CONTAINER_ADDRS
from hostctl.errors import ConfigError

# What a process or socket that disappears between two reads can raise.
_VANISHED: tuple[type[BaseException], ...] = (
    psutil.NoSuchProcess,
    psutil.AccessDenied,
    psutil.ZombieProcess,
    FileNotFoundError,
    ProcessLookupError,
    PermissionError,
)

PROC_NET_TCP = ("/proc/net/tcp", "/proc/net/tcp6")
# /proc/net/tcp "st" column (include/net/tcp_states.h); other states are ignored.
_PROC_STATES = {"01": ESTABLISHED, "0A": LISTEN}
_PSUTIL_STATES = {psutil.CONN_ESTABLISHED: ESTABLISHED, psutil.CONN_LISTEN: LISTEN}


# --------------------------------------------------------------------------
# Interface address


def host_addr_of(iface: str | None) -> str:
    """First IPv4 address of `iface`, or "" when iface is None, absent or has none."""
    if not iface:
        return ""
    try:
        addrs = psutil.net_if_addrs().get(iface, [])
    except OSError:
        return ""
    for a in addrs:
        if a.family == socket.AF_INET and a.address:
            return str(a.address)
    return ""


# --------------------------------------------------------------------------
# /proc/net/tcp{,6} (fast path, no owners)


def _hex_addr(text: str) -> str:
    """Kernel hex address -> text. The kernel prints each 32-bit word of the
    network-order address as a native integer (little-endian on x86/arm64):
    IPv4 is one word ('0100007F' = 127.0.0.1), IPv6 four words."""
    raw = b"".join(int(text[i:i + 8], 16).to_bytes(4, sys.byteorder) for i in range(0, len(text), 8))
    if len(raw) == 4:
        return str(ipaddress.IPv4Address(raw))
    v6 = ipaddress.IPv6Address(raw)
    return str(v6.ipv4_mapped) if v6.ipv4_mapped is not None else str(v6)


def _hex_endpoint(text: str) -> tuple[str, int]:
    addr, _, port = text.partition(":")
    return _hex_addr(addr), int(port, 16)


def parse_proc_net_tcp(text: str) -> list[SockInfo]:
    """Parse the content of /proc/net/tcp or /proc/net/tcp6 (header line first).
    Keeps LISTEN (0A) and ESTABLISHED (01) sockets; `pid` is always None."""
    out: list[SockInfo] = []
    for line in text.splitlines()[1:]:
        parts = line.split()
        if len(parts) < 4:
            continue
        state = _PROC_STATES.get(parts[3].upper())
        if state is None:
            continue
        try:
            laddr, lport = _hex_endpoint(parts[1])
            raddr, rport = _hex_endpoint(parts[2])
        except ValueError:
            continue  # malformed line: skip rather than fail a scan
        if state == LISTEN:
            raddr, rport = "", 0
        out.append(SockInfo(state=state, laddr=laddr, lport=lport, raddr=raddr, rport=rport))
    return out


def read_proc_sockets(paths: Iterable[str] = PROC_NET_TCP) -> list[SockInfo]:
    """LISTEN/ESTABLISHED TCP sockets of this network namespace, without owners.
    A missing file (IPv6 disabled) is skipped."""
    out: list[SockInfo] = []
    for path in paths:
        try:
            with open(path, encoding="ascii", errors="replace") as f:
                text = f.read()
        except (FileNotFoundError, PermissionError):
            continue
        out += parse_proc_net_tcp(text)
    return out


SOCK_DIAG_BY_FAMILY = 20
_NLM_F_REQUEST, _NLM_F_DUMP = 0x1, 0x300
_NETLINK_SOCK_DIAG = 4
_TCP_LISTEN_STATE = 10
_DIAG_REQ = struct.Struct("=BBBBI48s")  # inet_diag_req_v2: family, protocol, ext, pad, states, sockid
_DIAG_MSG = struct.Struct("=BBBB2s2s16s16s")  # inet_diag_msg head: family, state, timer, retrans, sport, dport, src, dst


_DIAG_INODE = struct.Struct("=I")  # inet_diag_msg.idiag_inode ...
_DIAG_INODE_AT = 68  # ... after the head (4), sockid (48), expires, rqueue, wqueue and uid (4 each)
_TCP_ESTABLISHED_STATE = 1
_DIAG_STATES = {_TCP_LISTEN_STATE: LISTEN, _TCP_ESTABLISHED_STATE: ESTABLISHED}


_ADDR_TEXT: dict[tuple[bytes, int], str] = {}  # a host's sockets share a few addresses: each is formatted once


def _diag_addr(raw: bytes, family: int) -> str:
    """An inet_diag address field (16 bytes) as text; IPv4-mapped IPv6 as plain IPv4, as
    /proc/net/tcp6's parser gives it."""
    text = _ADDR_TEXT.get((raw, family))
    if text is None:
        if len(_ADDR_TEXT) >= 65536:
            _ADDR_TEXT.clear()
        if family == socket.AF_INET:
            text = str(ipaddress.IPv4Address(raw[:4]))
        else:
            v6 = ipaddress.IPv6Address(raw)
            text = str(v6.ipv4_mapped) if v6.ipv4_mapped is not None else str(v6)
        _ADDR_TEXT[(raw, family)] = text
    return text


_INET_DIAG_REQ_BYTECODE = 1
_BC_JMP, _BC_S_EQ, _BC_D_EQ = 1, 11, 12  # inet_diag_bc_op codes (uapi/linux/inet_diag.h)
_BC_OP = struct.Struct("=BBH")  # code, yes, no: go `yes` bytes on when the test holds, else `no`


def port_bytecode(ports: Iterable[int]) -> bytes:
    """inet_diag bytecode that keeps the sockets whose local OR remote port is one of `ports`
    (the kernel runs it on every socket of the dump and sends only those). One test per port and
    side, ORed as ss(8) does: a test that holds goes on to a jump to the end (accept); one that
    fails skips that jump to the next test; the last test failing jumps past the end (reject)."""
    tests = [(code, p) for p in sorted(set(ports)) for code in (_BC_S_EQ, _BC_D_EQ)]
    out = b""
    for i, (code, port) in enumerate(tests):
        out += _BC_OP.pack(code, 8, 12) + _BC_OP.pack(0, 0, port)
        if i < len(tests) - 1:
            rest = (len(tests) - i - 1) * 12 - 4  # the remaining tests and jumps after this jump
            out += _BC_OP.pack(_BC_JMP, 4, rest + 4)
    return out


def read_diag_sockets(established: bool = True, ports: Iterable[int] | None = None) -> list[SockInfo] | None:
    """LISTEN (and, if ``established``, ESTABLISHED) TCP sockets of this network namespace via
    NETLINK_SOCK_DIAG, the same set read_proc_sockets() gives. The kernel is asked for those
    states only; with LISTEN alone it walks the listening hash and skips the established table.
    Even the established walk is several times cheaper than /proc/net/tcp{,6}, which walks the
    whole established hash once per file and formats every socket as text (about 6 ms per file
    on a large-memory host, whatever the number of connections). With ``ports``, only the
    sockets whose local or remote port is one of them (filtered in the kernel, port_bytecode).
    None where sock_diag is missing."""
    socks = _diag_sockets(established, ports)
    return None if socks is None else [s for s, _inode in socks]


def _diag_sockets(established: bool = True, ports: Iterable[int] | None = None,
                  keep: Callable[[int, int, int], bool] | None = None) -> list[tuple[SockInfo, int]] | None:
    """read_diag_sockets with each socket's inode (what /proc/<pid>/fd links name). ``keep``
    (inode, local port, remote port) -> bool: an established socket it rejects is skipped before
    its addresses are decoded (most of the Python cost of a dump of many sockets)."""
    out: list[tuple[SockInfo, int]] = []
    states = 1 << _TCP_LISTEN_STATE | (1 << _TCP_ESTABLISHED_STATE if established else 0)
    bytecode = b""
    if ports is not None:
        ports = tuple(ports)
        if not ports:
            return out
        bytecode = _rta(_INET_DIAG_REQ_BYTECODE, port_bytecode(ports))
    try:
        nl = RawNetlink(_NETLINK_SOCK_DIAG)
    except OSError:
        return None
    with nl:
        for family in (socket.AF_INET, socket.AF_INET6):
            req = _DIAG_REQ.pack(family, socket.IPPROTO_TCP, 0, 0, states, b"\0" * 48) + bytecode
            try:
                replies = nl.request(SOCK_DIAG_BY_FAMILY, _NLM_F_REQUEST | _NLM_F_DUMP, req)
            except OSError:  # no sock_diag at all (None), or no IPv6 (keep the IPv4 sockets)
                return None if family == socket.AF_INET else out
            for _typ, msg in replies:
                fam, state, _t, _r, sport, dport, src, dst = _DIAG_MSG.unpack_from(msg, 16)
                st = _DIAG_STATES.get(state)
                inode = _DIAG_INODE.unpack_from(msg, 16 + _DIAG_INODE_AT)[0]
                if st == LISTEN:
                    out.append((SockInfo(state=LISTEN, laddr=_diag_addr(src, fam), lport=int.from_bytes(sport, "big")),
                                inode))
                elif st == ESTABLISHED:
                    lport, rport = int.from_bytes(sport, "big"), int.from_bytes(dport, "big")
                    if keep is not None and not keep(inode, lport, rport):
                        continue
                    out.append((SockInfo(state=ESTABLISHED, laddr=_diag_addr(src, fam), lport=lport,
                                         raddr=_diag_addr(dst, fam), rport=rport), inode))
    return out


def read_diag_listeners() -> list[SockInfo] | None:
    """Listening TCP sockets via NETLINK_SOCK_DIAG (read_diag_sockets without the established
    table, whose walk dominates any read of all sockets). None where sock_diag is missing."""
    return read_diag_sockets(established=False)


def take_socket_snapshot(iface: str | None = None) -> Snapshot:
    """Fast snapshot for port-only specs: sockets from sock_diag (/proc/net/tcp{,6} where it is
    missing), no processes, no socket owners. host_addr from `iface` as in take_snapshot."""
    socks = read_diag_sockets()
    if socks is None:
        socks = read_proc_sockets()
    return Snapshot(procs=(), socks=tuple(socks), host_addr=host_addr_of(iface))


# --------------------------------------------------------------------------
# psutil (full path)


def _pids_by_netns() -> dict[int, list[int]]:
    """nsfs inode of each network namespace -> the pids in it (one stat per process)."""
    out: dict[int, list[int]] = {}
    for pid in psutil.pids():
        ino = netns_inode(pid)
        if ino is not None:
            out.setdefault(ino, []).append(pid)
    return out


def _read_proc(pid: int) -> ProcInfo | None:
    """pid, ppid and command line from /proc/<pid>/stat and cmdline (None if it vanished).
    The command line's NUL-separated arguments joined by spaces, as psutil joins them."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            stat = f.read()
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            cmd = f.read()
        ppid = int(stat[stat.rindex(b")") + 2:].split(None, 2)[1])  # "pid (comm) S ppid ...": comm may hold ")"
    except (OSError, ValueError, IndexError):
        return None
    args = cmd.rstrip(b"\0").split(b"\0") if cmd else []
    return ProcInfo(pid=pid, ppid=ppid, cmdline=" ".join(a.decode("utf-8", "replace") for a in args))


def _list_procs(pods: Sequence[ContainerNs] = (), by_ns: dict[int, list[int]] | None = None) -> list[ProcInfo]:
    """The processes of this network namespace (pid, ppid, command line; env empty) and of
    the containers ``pods`` (find_containers). Processes of other namespaces (emulated hosts,
    unrelated namespaces) can't send on this namespace's interfaces, so they are no jobs here.
    Namespaces are told apart first (one stat per process; ``by_ns``, _pids_by_netns(), when
    the caller has it) and only the kept namespaces' processes are read: reading every process
    of the machine cost a testbed host's daemon most of its CPU."""
    own = netns_inode("self")
    by_ns = _pids_by_netns() if by_ns is None else by_ns
    keep = [own, *(c.inode for c in pods)] if own is not None else list(by_ns)
    procs: list[ProcInfo] = []
    for pid in sorted(p for ino in keep for p in by_ns.get(ino, ())):
        p = _read_proc(pid)
        if p is not None:
            procs.append(p)
    return procs


def find_containers(iface: str | None, by_ns: dict[int, list[int]] | None = None,
                    peers: set[int] | None = None) -> list[ContainerNs]:
    """The containers of this host (hostctl.containers); ``iface`` is the egress interface,
    whose peer is no container. ``by_ns`` (_pids_by_netns()) is taken only when this
    namespace has a veth to another one: a host without containers pays one link dump.
    Without an egress interface there are none: the namespace at the other end of a veth
    could as well be the network (an emulated host's uplink) as a container. ``peers``:
    veth_peer_nsids(iface) when the caller has it."""
    if peers is None:
        peers = veth_peer_nsids(iface) if iface else set()
    if not peers:
        return []
    own = netns_inode("self")
    by_ns = _pids_by_netns() if by_ns is None else by_ns
    return container_namespaces({i: p for i, p in by_ns.items() if i != own}, peers)


def _pod_addr() -> str:
    """The first IPv4 address of this thread's namespace other than loopback ("" if none)."""
    for _name, addrs in sorted(psutil.net_if_addrs().items()):
        for a in addrs:
            if a.family == socket.AF_INET and a.address and not a.address.startswith("127."):
                return str(a.address)
    return ""


def container_sockets(pods: Iterable[ContainerNs], established: bool = True, addr: str = "pod",
                      host_addr: str = "", ports: Iterable[int] | None = None) -> list[tuple[SockInfo, int]]:
    """The LISTEN (and ESTABLISHED) TCP sockets of the containers ``pods`` with their inodes,
    read with sock_diag inside each one's namespace. A listener's address becomes what a peer
    reaches it at (module doc): with ``addr`` "pod" a wildcard listener gets the container's
    address; with "host" every listener but a loopback one gets ``host_addr`` (when known).
    ``ports``: only the sockets with one of these local or remote ports (as read_diag_sockets).
    A container that vanished, or whose namespace cannot be read, is skipped."""
    ports = None if ports is None else tuple(ports)

    def read() -> tuple[list[tuple[SockInfo, int]] | None, str]:
        return _diag_sockets(established, ports), _pod_addr() if addr == "pod" else ""

    out: list[tuple[SockInfo, int]] = []
    try:
        got = call_in_each_netns([pod.path for pod in pods], read)
    except TimeoutError:
        return out
    for value in got.values():
        if isinstance(value, BaseException):
            if isinstance(value, OSError):
                continue
            raise value
        socks, pod_addr = value
        for s, inode in socks or ():
            if s.state == LISTEN:
                if addr == "host" and host_addr and not s.laddr.startswith("127.") and s.laddr != "::1":
                    s = dataclasses.replace(s, laddr=host_addr)
                elif addr == "pod" and pod_addr and is_wildcard(s.laddr):
                    s = dataclasses.replace(s, laddr=pod_addr)
            out.append((s, inode))
    return out


def _launcher_env(pid: int) -> dict[str, str]:
    """The LAUNCHER_ENV_KEYS present in the environment of process `pid` ({} if unreadable)."""
    try:
        env = psutil.Process(pid).environ()
    except (*_VANISHED, OSError):
        return {}
    return {k: env[k] for k in LAUNCHER_ENV_KEYS if k in env}


def _with_env(procs: list[ProcInfo], pids: set[int] | None) -> list[ProcInfo]:
    """Fill ProcInfo.env for `pids` (None: every process)."""
    out = []
    for p in procs:
        if pids is None or p.pid in pids:
            env = _launcher_env(p.pid)
            if env:
                p = ProcInfo(pid=p.pid, ppid=p.ppid, cmdline=p.cmdline, env=env)
        out.append(p)
    return out


def _psutil_sockets() -> list[SockInfo]:
    """LISTEN/ESTABLISHED TCP sockets with owners (when visible). Retries a
    scan disturbed by vanishing processes; falls back to /proc without owners."""
    for _attempt in range(3):
        try:
            conns = psutil.net_connections(kind="tcp")
        except (*_VANISHED, OSError):
            continue  # a process or fd vanished under psutil: scan again
        break
    else:
        return read_proc_sockets()
    out: list[SockInfo] = []
    for c in conns:
        state = _PSUTIL_STATES.get(c.status)
        if state is None or not c.laddr:
            continue
        laddr, lport = c.laddr
        raddr, rport = c.raddr if (c.raddr and state == ESTABLISHED) else ("", 0)
        out.append(SockInfo(state=state, laddr=normalize_addr(laddr), lport=int(lport),
                            raddr=normalize_addr(raddr), rport=int(rport), pid=c.pid))
    return out


def _socket_owners(pids: Iterable[int]) -> dict[int, list[int]]:
    """socket inode -> the pids among `pids` that hold it open (from /proc/<pid>/fd; a
    process or fd that vanishes, or is not ours to read, is skipped)."""
    owners: dict[int, list[int]] = {}
    for pid in sorted(set(pids)):
        for inode in socket_fds(pid):
            owners.setdefault(inode, []).append(pid)
    return owners


def owned_sockets(pids: Iterable[int], pods: Sequence[ContainerNs] = (), container_addr: str = "pod",
                  host_addr: str = "", keep_pids: set[int] | None = None,
                  keep_ports: frozenset[int] = frozenset()) -> list[SockInfo]:
    """LISTEN/ESTABLISHED TCP sockets of this network namespace and of the containers `pods`,
    one entry per owner among `pids` (pid None for a socket none of them holds). Sockets come
    from sock_diag with their inodes, owners from the fds of `pids` only: psutil.net_connections()
    walks the fds of every process on the machine, which in a testbed of emulated hosts, or on a
    host with containers, are mostly processes of other namespaces. Falls back to psutil without
    sock_diag (this namespace's sockets only). Container listeners' addresses as in
    container_sockets().

    ``keep_pids``: only the established sockets of this namespace that one of these pids holds,
    or whose local or remote port is in ``keep_ports``, are kept (listeners all are). A job found
    by pid or command line needs its own connections only, and on a host with thousands of other
    connections (storage, services) decoding all of them each scan cost 100 ms of CPU
    (benchmarks/bench_discovery.py --established 9000)."""
    owners = _socket_owners(pids)
    keep = None
    if keep_pids is not None:
        wanted = {inode for inode, holders in owners.items() if any(p in keep_pids for p in holders)}

        def keep(inode: int, lport: int, rport: int) -> bool:
            return inode in wanted or lport in keep_ports or rport in keep_ports
    socks = _diag_sockets(keep=keep)
    if socks is None:
        return _psutil_sockets()
    socks += container_sockets(pods, addr=container_addr, host_addr=host_addr)
    out: list[SockInfo] = []
    for s, inode in socks:
        holders = owners.get(inode) if inode else None
        if not holders:
            out.append(s)
        else:
            out += [dataclasses.replace(s, pid=p) for p in holders]
    return out


def take_snapshot(pids_of_interest: set[int] | None = None, want_env: bool = True,
                  iface: str | None = None, containers: bool = False, container_addr: str = "pod") -> Snapshot:
    """Processes and TCP sockets (with owners) of this network namespace, and of its
    containers when `containers` (`iface`, the egress interface, is no container's).

    Launcher env (TORCHELASTIC_RUN_ID, MASTER_ADDR, MASTER_PORT only) is read
    when `want_env`, for `pids_of_interest` only when given, else for every
    process (slower: one /proc/<pid>/environ read per process).
    host_addr is the first IPv4 address of `iface` ("" without iface).
    """
    by_ns = _pids_by_netns()
    pods = find_containers(iface, by_ns) if containers else []
    procs = _list_procs(pods, by_ns)
    if want_env:
        procs = _with_env(procs, pids_of_interest)
    host_addr = host_addr_of(iface)
    return Snapshot(procs=tuple(procs), socks=tuple(owned_sockets((p.pid for p in procs), pods, container_addr,
                                                                  host_addr)),
                    host_addr=host_addr)


# --------------------------------------------------------------------------
# Discovery


class Discovery:
    """Finds the jobs of `specs` on this host; call scan() periodically.

    Specs are validated at construction (ConfigError for a bad regex or a spec
    without exactly one selector). scan() never raises for processes that
    vanish while it runs. The calling process is in no job (`exclude`); processes it
    started are, if the specs select them.
    """

    def __init__(self, specs: Sequence[JobSpec], iface: str | None = None,
                 containers: bool = True, container_addr: str = "pod") -> None:
        """containers: find jobs in this host's containers too (module doc); container_addr:
        what names a container's listener in job ids, "pod" or "host"."""
        if container_addr not in CONTAINER_ADDRS:
            raise ConfigError(f"unknown container_addr {container_addr!r}: choose one of {', '.join(CONTAINER_ADDRS)}")
        self.specs: tuple[JobSpec, ...] = tuple(specs)
        self.iface = iface
        self.containers = containers
        self.container_addr = container_addr
        self._pods: list[ContainerNs] = []
        self._peers: set[int] | None = None  # veth_peer_nsids() when self._pods was found
        group_jobs(self.specs, Snapshot(procs=(), socks=()))  # validate now, not at the first scan
        self.port_only = all(spec.ports for spec in self.specs)
        self.any_port = any(spec.ports for spec in self.specs)
        self.ports = frozenset(p for spec in self.specs for p in spec.ports)
        self.exclude = frozenset({os.getpid()})  # the caller is no job (its children may be)

    def pods(self) -> list[ContainerNs]:
        """The containers of this host (none with containers off or without an egress
        interface: find_containers). The namespace walk (one stat per process) is redone only
        when this namespace's veths lead to other namespaces than at the last walk (a
        container that comes or goes adds or removes its veth), when the process it was
        entered through has left it (one stat per container), or while a veth leads to a
        namespace in which no process was found (it may start one at any time)."""
        if not self.containers or not self.iface:
            return []
        peers = veth_peer_nsids(self.iface)
        if (peers != self._peers or any(netns_inode(c.pid) != c.inode for c in self._pods)
                or peers - {c.nsid for c in self._pods}):
            self._pods = find_containers(self.iface, peers=peers) if peers else []
            self._peers = peers
        return self._pods

    def snapshot(self) -> Snapshot:
        """The snapshot scan() groups: sockets only when every spec is port-only,
        else processes + owned sockets + launcher env where needed.

        Port-only: one sock_diag dump per scan of the listening and established sockets whose
        local or remote port is a listed port, filtered in the kernel (port_bytecode). Every
        scan sees them all: a worker host's jobs exist only through its established
        connections to a PS, so a new one is a job at the next scan. The kernel still walks the
        established hash, but sends and formats only the matching sockets (docs/benchmarks.md,
        "Discovery on real hosts"). Without sock_diag (or its bytecode filter),
        everything is read and filtered here. The same dump is made inside each container
        (pods()), whose sockets have no owners here either."""
        if self.port_only:
            socks = read_diag_sockets(ports=self.ports)
            if socks is None:
                socks = [s for s in take_socket_snapshot().socks if s.lport in self.ports or s.rport in self.ports]
            host_addr = host_addr_of(self.iface)
            socks += [s for s, _ in container_sockets(self.pods(), True, self.container_addr, host_addr, self.ports)]
            return Snapshot(procs=(), socks=tuple(socks), host_addr=host_addr)
        pods = self.pods()  # the same cached container list as port-only scans use
        procs = _list_procs(pods)
        trees = pids_needing_env(self.specs, procs, self.exclude)  # the processes pid and match specs select
        procs = _with_env(procs, trees)
        # whose sockets: a port spec's job takes the owners of its port's sockets, whoever they are
        owners_of = [p.pid for p in procs] if self.any_port else trees
        host_addr = host_addr_of(self.iface)
        socks = owned_sockets(owners_of, pods, self.container_addr, host_addr, keep_pids=set(trees),
                              keep_ports=self.ports)
        return Snapshot(procs=tuple(procs), socks=tuple(socks), host_addr=host_addr)

    def scan(self) -> list[Job]:
        """Jobs present now, sorted by job_id."""
        if not self.specs:
            return []
        return group_jobs(self.specs, self.snapshot(), self.exclude)
