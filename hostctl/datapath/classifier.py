"""Loads hostctl/bpf/tl_classify.c with bcc and keeps its maps equal to a ClassifierTable.

Map layout and semantics are documented at the top of hostctl/bpf/tl_classify.c.
"""

from __future__ import annotations

import ctypes
import ipaddress
import os
import time
from collections.abc import Callable, Mapping
from pathlib import Path

from hostctl import consts
from hostctl.core.bpfabi import DEFINES
from hostctl.core.plan import (
    CONTROL_CLASSID, MAX_FLOW_ENTRIES, MAX_JOB_SLOTS, MAX_PORT_ENTRIES, MAX_REMOTE_ENTRIES, ClassifierTable,
)
from hostctl.core.types import FlowKey
from hostctl.datapath import JobCounters
from hostctl.errors import ProbeError

PROG_NAME = "tl_classify"
REDIRECT_NAME = "tl_redirect"
# hc_ctl's entries (hostctl.h): the daemon's config, the programs' counters
HC_CTL_KEY_CONFIG = DEFINES["HC_CTL_KEY_CONFIG"]
HC_CTL_KEY_COUNTERS = DEFINES["HC_CTL_KEY_COUNTERS"]


def bpf_dir() -> Path:
    """The folder of the BPF C sources: package data (hostctl/bpf), or $HOSTCTL_BPF_DIR."""
    env = os.environ.get(consts.BPF_DIR_ENV)
    return Path(env) if env else Path(__file__).resolve().parents[1] / "bpf"


def bpf_source(name: str) -> Path:
    """One BPF C source; a clear error when it is missing (an incomplete install)."""
    src = bpf_dir() / name
    if not src.is_file():
        how = (f"{consts.BPF_DIR_ENV} names {bpf_dir()}; unset it or point it at a folder with {name}"
               if os.environ.get(consts.BPF_DIR_ENV) else "the hostctl install is incomplete: reinstall the package")
        raise ProbeError(f"BPF source {src} is missing: {how}")
    return src


def cflags(l2_hlen: int = 14, ingress: bool = False) -> list[str]:
    """Compile-time settings of the classifier (never edit the C text)."""
    return ["-DHC_INGRESS=1"] * ingress + [
        f"-I{bpf_dir()}",  # hostctl.h
        f"-DHC_MAX_FLOWS={MAX_FLOW_ENTRIES}",
        f"-DHC_MAX_PORTS={MAX_PORT_ENTRIES}",
        f"-DHC_MAX_REMOTES={MAX_REMOTE_ENTRIES}",
        f"-DHC_MAX_SLOTS={MAX_JOB_SLOTS}",
        f"-DL2_HLEN={l2_hlen}",
        f"-DCONTROL_CLASSID={CONTROL_CLASSID:#x}",
        "-w",
    ]


def addr16(addr: str) -> bytes:
    """An address as a BPF map key's 16 bytes: IPv6 as is, IPv4 IPv4-mapped (::ffff:a.b.c.d)."""
    ip = ipaddress.ip_address(addr)
    if ip.version == 4:
        return b"\0" * 10 + b"\xff\xff" + ip.packed
    return ip.packed


def import_bcc():
    try:
        import bcc  # Debian python3-bpfcc
    except ImportError as e:
        raise ProbeError(
            "bcc is not importable: install Debian's python3-bpfcc and use a venv made with "
            "--system-site-packages (run scripts/setup.sh); policy fifo works without it"
        ) from e
    return bcc


def _put(bpf_map, want: Mapping, have: Mapping, key: Callable) -> int:
    """Write the entries of ``want`` (-> job slot) that ``have`` (what is loaded) lacks or
    holds with another slot; returns the number of writes."""
    writes = 0
    for k, slot in want.items():
        if have.get(k) != slot:
            bpf_map[key(k)] = bpf_map.Leaf(slot)
            writes += 1
    return writes


def _drop(bpf_map, want: Mapping, have: Mapping, key: Callable) -> int:
    """Delete the loaded entries that ``want`` no longer has; returns the number of deletes."""
    stale = have.keys() - want.keys()
    for k in stale:
        try:
            del bpf_map[key(k)]
        except KeyError:
            pass
    return len(stale)


class Classifier:
    """The loaded program and its maps. ``fd`` / ``name`` go into the tc filter."""

    def __init__(self, l2_hlen: int = 14, lease_s: float = consts.DEFAULT_LEASE_S,
                 burst_gap_s: float = consts.BURST_GAP_S, ingress: bool = False) -> None:
        """ingress: the instance for ingress bands: tl_classify reads the local end from the
        destination, and ``redirect`` (tl_redirect, direct-action) sends the NIC's ingress
        to the IFB set by ``redirect_to`` while the lease holds."""
        bcc = import_bcc()
        src = bpf_source("tl_classify.c")
        try:
            self.bpf = bcc.BPF(src_file=str(src).encode(), cflags=cflags(l2_hlen, ingress))
        except Exception as e:  # bcc raises bare Exception on compile failure
            raise ProbeError(
                f"cannot compile {src.name} with bcc ({e}); kernel headers must be at "
                f"/lib/modules/$(uname -r)/build (scripts/setup.sh links them)"
            ) from e
        self.fn = self.bpf.load_func(PROG_NAME.encode(), bcc.BPF.SCHED_CLS)
        self.redirect = self.bpf.load_func(REDIRECT_NAME.encode(), bcc.BPF.SCHED_CLS) if ingress else None
        self.ifb_ifindex = 0
        self.flows = self.bpf[b"hc_flows"]
        self.ports = self.bpf[b"hc_ports"]
        self.remotes = self.bpf[b"hc_remotes"]
        self.job_class = self.bpf[b"hc_job_class"]
        self.job_stats = self.bpf[b"hc_job_stats"]
        self.ctl = self.bpf[b"hc_ctl"]
        self.lease_ns = int(lease_s * 1e9)
        self.burst_gap_ns = int(burst_gap_s * 1e9)
        self._current = ClassifierTable()
        self.heartbeat()

    @property
    def fd(self) -> int:
        return self.fn.fd

    @property
    def name(self) -> str:
        return self.fn.name.decode() if isinstance(self.fn.name, bytes) else self.fn.name

    def heartbeat(self) -> None:
        """Write the config entry whole (the programs count in the other entry: no increment lost)."""
        k = self.ctl.Key(HC_CTL_KEY_CONFIG)
        v = self.ctl[k]
        v.heartbeat_ns = time.monotonic_ns()  # CLOCK_MONOTONIC == bpf_ktime_get_ns()
        v.lease_ns = self.lease_ns
        v.burst_gap_ns = self.burst_gap_ns
        v.ifb_ifindex = self.ifb_ifindex
        self.ctl[k] = v

    def redirect_to(self, ifindex: int) -> None:
        """Start (ifindex > 0) or stop (0) tl_redirect's redirection to that IFB."""
        self.ifb_ifindex = ifindex
        self.heartbeat()

    def failopen_pkts(self) -> int:
        return int(self.ctl[self.ctl.Key(HC_CTL_KEY_COUNTERS)].failopen_pkts)

    def _flow_key(self, f: FlowKey):
        k = self.flows.Key()
        ctypes.memmove(k.laddr, addr16(f.laddr), 16)
        ctypes.memmove(k.raddr, addr16(f.raddr), 16)
        k.lport = f.lport
        k.rport = f.rport
        return k

    def _remote_key(self, endpoint: tuple[str, int]):
        k = self.remotes.Key()
        ctypes.memmove(k.raddr, addr16(endpoint[0]), 16)
        k.rport = endpoint[1]
        return k

    def apply(self, table: ClassifierTable) -> int:
        """Diff against what is loaded and write only the changes.

        Order matters for a consistent view: class entries for new slots first,
        then port/flow entries that point at them; removals go the other way."""
        cur = self._current
        writes = 0
        for slot, classid in table.slot_classid.items():
            if cur.slot_classid.get(slot) != classid:
                self.job_class[self.job_class.Key(slot)] = self.job_class.Leaf(classid, 0)
                writes += 1
        entries = [  # (map, wanted, loaded, key of an entry); removals go in the reverse order
            (self.ports, table.ports, cur.ports, self.ports.Key),
            (self.remotes, table.remotes, cur.remotes, self._remote_key),
            (self.flows, table.flows, cur.flows, self._flow_key),
        ]
        for bpf_map, want, have, key in entries:
            writes += _put(bpf_map, want, have, key)
        for bpf_map, want, have, key in reversed(entries):
            writes += _drop(bpf_map, want, have, key)
        for slot in cur.slot_classid.keys() - table.slot_classid.keys():
            self.job_class[self.job_class.Key(slot)] = self.job_class.Leaf(0, 0)
            self.job_stats[self.job_stats.Key(slot)] = self.job_stats.Leaf()  # reset for reuse
            writes += 1
        self._current = table
        return writes

    def job_counters(self, slots: set[int]) -> dict[int, JobCounters]:
        out = {}
        for s in slots:
            v = self.job_stats[self.job_stats.Key(s)]
            out[s] = JobCounters(s, int(v.tx_bytes), int(v.tx_packets), int(v.last_burst_bytes), int(v.bursts))
        return out

    def close(self) -> None:
        try:
            self.bpf.cleanup()
        except Exception:
            pass
