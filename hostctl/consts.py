"""Names, paths and defaults in one place."""

from __future__ import annotations

import os

RUN_DIR = os.environ.get("HOSTCTL_RUN_DIR", "/run/hostctl")
CONTROL_SOCKET = "\0hostctl.ctl"  # abstract unix socket: one per network namespace
BPF_DIR_ENV = "HOSTCTL_BPF_DIR"

DEFAULT_POLICY = "rr"
DEFAULT_BANDS = 6
DEFAULT_RR_INTERVAL_S = 20.0
DEFAULT_RESCAN_S = 1.0
DEFAULT_LINK_FRACTION = 0.97  # of the NIC speed reported by sysfs (Q-T4)
DEFAULT_OTHER_SHARE = "10%"  # guaranteed to non-DL traffic
DEFAULT_LEASE_S = 1.0  # the BPF programs fail open when the daemon's heartbeat is older
HEARTBEAT_S = 0.25
DEFAULT_SLOT_S = 0.060  # pacing policies: one rate decision per flow per slot (MLCC)
DEFAULT_HORIZON = 10  # mlcc: K, slots planned ahead
DEFAULT_PHASE_GAP_S = 0.020  # no ACK progress this long may end a flow's communication phase
DEFAULT_CGROUP = "/"  # pacing scope: the cgroup v2 whose sockets are monitored/paced
STATUS_REFRESH_S = 5.0  # counters for status/metrics rates, when nobody asks sooner
MEM_TRIM_S = 300.0  # the C allocator's free memory back to the kernel (hostctl/memory.py), once up and this often
BURST_GAP_S = 0.010  # an idle gap longer than this ends a job's burst
CONTAINER_ADDRS = ("pod", "host")  # what names a container's listener in job ids (config container_addr)


def netns_id(path: str = "/proc/self/ns/net") -> str:
    """Identity of a network namespace (inode of its nsfs file; default: the caller's)."""
    try:
        return f"ns{os.stat(path).st_ino}"
    except OSError:
        return "ns0"


def state_dir(netns_path: str = "/proc/self/ns/net") -> str:
    """Per-network-namespace state folder: daemons in different namespaces never share it.
    `netns_path` names another namespace, e.g. /run/netns/NAME."""
    return os.path.join(RUN_DIR, netns_id(netns_path))
