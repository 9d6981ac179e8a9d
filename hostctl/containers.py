"""Containers of this host: the network namespaces whose traffic leaves through the daemon's.

A container (a Docker container, a Kubernetes pod) has its own network namespace, joined to
the host's by a veth pair: one end in the container, the other in the host's namespace, on a
bridge (docker0, a CNI bridge) or routed (Calico's cali* devices). Its traffic leaves through
the host's NIC, routed or masqueraded, so the daemon in the host's namespace controls it
there, but its sockets are visible only from inside its namespace.

Which namespaces count: those that hold the peer of a veth in the daemon's namespace, except
the peer of the controlled interface itself (on an emulated host, the egress interface is a
veth too; the namespace at its other end is the network, not a container). Other namespaces
of the machine (other emulated hosts, other tests' namespaces) are not containers of this
host. Not covered: containers attached by macvlan/ipvlan (no device in the host's namespace
points at them) and containers sharing the host's namespace (hostNetwork, ``--network
host``), which need nothing: they are the host.

How: one RTM_GETLINK dump of the daemon's namespace lists its veths and the namespace id
(IFLA_LINK_NETNSID) of each one's peer; processes are grouped by the inode of
/proc/<pid>/ns/net, and RTM_GETNSID with that file's fd tells which id a namespace has here.
With no such veth (a bare-metal host, an emulated host) nothing more is done: no walk, no
cost. Reading inside the containers (``call_in_each_netns``) happens on a short-lived thread
that joins each in turn with setns(2): sockets opened there belong to it, the daemon's
threads stay where they are.
"""

from __future__ import annotations

import ctypes
import os
import socket
import struct
import threading
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import TypeVar

from hostctl.datapath.rtnl_raw import NLM_F_DUMP, NLM_F_REQUEST, RawNetlink, _attrs

CLONE_NEWNET = 0x40000000
RTM_GETLINK = 18
RTM_GETNSID = 90
IFLA_IFNAME = 3
IFLA_LINKINFO = 18
IFLA_INFO_KIND = 1
IFLA_LINK_NETNSID = 37
NETNSA_NSID = 1
NETNSA_FD = 3
_IFINFOMSG = struct.Struct("=BxHiII")
_NLMSGHDR_LEN = 16
_RTGENMSG = struct.Struct("=Bxxx")  # rtgenmsg (family), padded to 4 bytes

T = TypeVar("T")
_libc = ctypes.CDLL(None, use_errno=True)


@dataclass(frozen=True)
class ContainerNs:
    """One container network namespace: its nsfs inode and a process in it (whose
    /proc/<pid>/ns/net is the handle to enter it)."""

    inode: int
    pid: int
    nsid: int

    @property
    def path(self) -> str:
        return f"/proc/{self.pid}/ns/net"


def veth_peer_nsids(exclude_iface: str | None = None) -> set[int]:
    """Namespace ids (as seen from this namespace) of the peers of this namespace's veths,
    except the peer of ``exclude_iface``. Empty when there is none or rtnetlink fails."""
    out: set[int] = set()
    try:
        with RawNetlink() as nl:
            replies = nl.request(RTM_GETLINK, NLM_F_REQUEST | NLM_F_DUMP, _IFINFOMSG.pack(socket.AF_UNSPEC, 0, 0, 0, 0))
    except OSError:
        return out
    for _typ, msg in replies:
        attrs = _attrs(msg, _NLMSGHDR_LEN + _IFINFOMSG.size)
        if IFLA_LINK_NETNSID not in attrs or IFLA_LINKINFO not in attrs:
            continue
        kind = _attrs(attrs[IFLA_LINKINFO], 0).get(IFLA_INFO_KIND, b"").rstrip(b"\0")
        name = attrs.get(IFLA_IFNAME, b"").rstrip(b"\0").decode(errors="replace")
        if kind != b"veth" or (exclude_iface and name == exclude_iface):
            continue
        out.add(struct.unpack_from("=i", attrs[IFLA_LINK_NETNSID])[0])
    return out


def nsid_of(ns_path: str, nl: RawNetlink | None = None) -> int | None:
    """This namespace's id for the namespace at ``ns_path`` (a /proc/<pid>/ns/net file),
    or None when it has none (no link between the two) or the file is gone. ``nl``: an
    open rtnetlink socket of this namespace to reuse."""
    try:
        fd = os.open(ns_path, os.O_RDONLY)
    except OSError:
        return None
    try:
        body = _RTGENMSG.pack(socket.AF_UNSPEC) + struct.pack("=HHI", 8, NETNSA_FD, fd)
        if nl is None:
            with RawNetlink() as own:
                replies = own.request(RTM_GETNSID, NLM_F_REQUEST, body)
        else:
            replies = nl.request(RTM_GETNSID, NLM_F_REQUEST, body)
    except OSError:
        return None
    finally:
        os.close(fd)
    for _typ, msg in replies:
        raw = _attrs(msg, _NLMSGHDR_LEN + _RTGENMSG.size).get(NETNSA_NSID)
        if raw is not None:
            nsid = struct.unpack_from("=i", raw)[0]
            return nsid if nsid >= 0 else None
    return None


def netns_inode(pid: int | str) -> int | None:
    try:
        return os.stat(f"/proc/{pid}/ns/net").st_ino
    except OSError:
        return None


def container_namespaces(by_ns: Mapping[int, Iterable[int]], peers: set[int]) -> list[ContainerNs]:
    """The containers among the namespaces of ``by_ns`` (nsfs inode -> pids in it, the
    daemon's own namespace left out by the caller): those whose id here is in ``peers``
    (veth_peer_nsids()), sorted by inode."""
    out = []
    try:
        nl = RawNetlink()
    except OSError:
        return out
    with nl:
        for inode, pids in sorted(by_ns.items()):
            for pid in sorted(pids):  # the first pid whose namespace file still opens
                nsid = nsid_of(f"/proc/{pid}/ns/net", nl)
                if nsid is None and netns_inode(pid) == inode:
                    break  # alive, but no id here: not linked to this namespace
                if nsid is not None:
                    if nsid in peers:
                        out.append(ContainerNs(inode, pid, nsid))
                    break
    return out


def call_in_each_netns(ns_paths: Sequence[str], fn: Callable[[], T], timeout_s: float = 5.0
                       ) -> dict[str, T | BaseException]:
    """fn() in each network namespace of ``ns_paths``, in turn, on one thread that joins
    each with setns(2) (one thread, not one per namespace: cheaper with many containers).
    Returns path -> fn's value, or the exception it raised (OSError when the namespace is
    gone or cannot be entered). Raises TimeoutError when the whole visit takes longer than
    ``timeout_s``."""
    box: dict[str, T | BaseException] = {}

    def target() -> None:
        for path in ns_paths:
            try:
                fd = os.open(path, os.O_RDONLY)
                try:
                    if _libc.setns(fd, CLONE_NEWNET) != 0:
                        err = ctypes.get_errno()
                        raise OSError(err, f"setns into {path}: {os.strerror(err)}")
                finally:
                    os.close(fd)
                box[path] = fn()
            except BaseException as e:  # noqa: BLE001 - handed to the caller
                box[path] = e

    if not ns_paths:
        return {}
    t = threading.Thread(target=target, daemon=True, name="hostctl-netns")
    t.start()
    t.join(timeout_s)
    if t.is_alive():
        raise TimeoutError(f"reading {len(ns_paths)} network namespace(s) took more than {timeout_s:g} s")
    return dict(box)
