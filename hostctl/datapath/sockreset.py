"""Give TCP sockets their pacing rate back from user space.

When hostctl's sock_ops program is detached, an idle flow it had throttled would
keep its SO_MAX_PACING_RATE forever: the program only acts on callbacks, and an idle
flow has none. So teardown (and ``hostctl clean`` after a crash) finds the owning
process of every such flow and sets the option on a duplicate of its socket
(pidfd_getfd(2), root only). Flows are found through each process's own view of
/proc/<pid>/net/tcp{,6}, so this works across network namespaces.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import ipaddress
import logging
import os
import platform
import socket
import struct
from collections.abc import Iterable

from hostctl.core.types import FlowKey

log = logging.getLogger("hostctl.datapath")
SO_MAX_PACING_RATE = 47
_NR_PIDFD_GETFD = {"x86_64": 438, "aarch64": 438}.get(platform.machine(), 438)
_libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6", use_errno=True)
_libc.syscall.restype = ctypes.c_long


def _parse_addr(hexaddr: str) -> str:
    raw = bytes.fromhex(hexaddr)
    if len(raw) == 4:
        return str(ipaddress.IPv4Address(raw[::-1]))
    words = [raw[i:i + 4][::-1] for i in range(0, 16, 4)]
    ip = ipaddress.IPv6Address(b"".join(words))
    return str(ip.ipv4_mapped) if ip.ipv4_mapped else str(ip)


def proc_sockets(pid: int) -> dict[int, FlowKey]:
    """Socket inode -> 4-tuple for the TCP sockets in ``pid``'s network namespace."""
    out: dict[int, FlowKey] = {}
    for name in ("tcp", "tcp6"):
        try:
            with open(f"/proc/{pid}/net/{name}") as f:
                next(f, None)
                for line in f:
                    p = line.split()
                    if len(p) < 10:
                        continue
                    la, lp = p[1].split(":")
                    ra, rp = p[2].split(":")
                    ino = int(p[9])
                    if ino:
                        out[ino] = FlowKey(_parse_addr(la), int(lp, 16), _parse_addr(ra), int(rp, 16))
        except OSError:
            continue
    return out


def socket_fds(pid: int) -> dict[int, int]:
    """Socket inode -> fd number in ``pid``."""
    out = {}
    try:
        names = os.listdir(f"/proc/{pid}/fd")
    except OSError:
        return out
    for n in names:
        try:
            target = os.readlink(f"/proc/{pid}/fd/{n}")
        except OSError:
            continue
        if target.startswith("socket:["):
            out[int(target[8:-1])] = int(n)
    return out


def _pidfd_getfd(pid: int, fd: int) -> int:
    pidfd = os.pidfd_open(pid)
    try:
        ret = _libc.syscall(_NR_PIDFD_GETFD, pidfd, fd, 0)
        if ret < 0:
            e = ctypes.get_errno()
            raise OSError(e, os.strerror(e))
        return int(ret)
    finally:
        os.close(pidfd)


def set_pacing_rate(pid: int, fd: int, rate_Bps: int) -> None:
    dup = _pidfd_getfd(pid, fd)
    try:
        s = socket.socket(fileno=dup)
        try:
            # 4 bytes, unsigned: 0xFFFFFFFF (unlimited) does not fit the C int that
            # setsockopt(level, opt, int) packs; the kernel maps ~0U back to ~0UL.
            s.setsockopt(socket.SOL_SOCKET, SO_MAX_PACING_RATE, struct.pack("=I", min(rate_Bps, 0xFFFFFFFF)))
        finally:
            s.detach()
    finally:
        os.close(dup)


def reset_rates(flows: dict[FlowKey, int], pids: Iterable[int]) -> tuple[int, list[FlowKey]]:
    """Set each flow's SO_MAX_PACING_RATE to the given rate (bytes/s; 0xFFFFFFFF =
    unlimited) by finding it among ``pids``' sockets. Returns (done, not found)."""
    todo = dict(flows)
    done = 0
    seen_ns: dict[int, dict[int, FlowKey]] = {}
    for pid in pids:
        if not todo:
            break
        try:
            ns = os.stat(f"/proc/{pid}/ns/net").st_ino
        except OSError:
            continue
        socks = seen_ns.get(ns)
        if socks is None:
            socks = seen_ns[ns] = proc_sockets(pid)
        for ino, fd in socket_fds(pid).items():
            key = socks.get(ino)
            if key is None or key not in todo:
                continue
            try:
                set_pacing_rate(pid, fd, todo[key])
            except OSError as e:
                log.debug("cannot reset pacing of %s in pid %d: %s", key, pid, e)
                continue
            del todo[key]
            done += 1
    return done, sorted(todo)
