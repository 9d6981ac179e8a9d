"""Every kernel effect behind one small interface.

``Datapath`` is implemented by ``LinuxDatapath`` (pyroute2 netlink + bcc) and
``FakeDatapath`` (in memory, for unit tests of the daemon). One scenario runs against
both and compares what they report: tests/integration/test_datapath_contract.py.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import NamedTuple, Protocol

import numpy as np

from hostctl.core.pace import PaceTable
from hostctl.core.plan import ClassifierTable, TcPlan
from hostctl.core.types import FlowKey

UNLIMITED_BPS_BYTES = 0xFFFFFFFF  # SO_MAX_PACING_RATE's "no limit"
FLOW_CLOSED = 1  # FlowRecord.flags: the socket reached TCP_CLOSE


@dataclass(frozen=True)
class ClassCounters:
    classid: int
    bytes: int
    packets: int
    drops: int
    overlimits: int
    backlog_bytes: int


@dataclass(frozen=True)
class JobCounters:
    slot: int
    tx_bytes: int
    tx_packets: int
    last_burst_bytes: int
    bursts: int


@dataclass(frozen=True)
class Counters:
    classes: dict[int, ClassCounters] = field(default_factory=dict)
    jobs: dict[int, JobCounters] = field(default_factory=dict)
    failopen_pkts: int = 0
    ingress_classes: dict[int, ClassCounters] = field(default_factory=dict)  # the IFB's (ingress bands)
    rx_jobs: dict[int, JobCounters] = field(default_factory=dict)  # received, counted on the IFB


class FlowRecord(NamedTuple):
    """One paced/monitored flow as the kernel sees it (a row of hc_pace_flows, hostctl/bpf/hc_pace.c). A
    NamedTuple: every flow's row is read every slot."""

    key: FlowKey
    slot: int
    bytes_acked: int
    bytes_sent: int
    first_ns: int
    last_ns: int
    bursts: int
    callbacks: int
    rate_Bps: int  # applied now; UNLIMITED_BPS_BYTES = none
    orig_rate_Bps: int
    srtt_us: int
    snd_cwnd: int
    total_retrans: int
    flags: int
    setopt_errors: int

    @property
    def closed(self) -> bool:
        return bool(self.flags & FLOW_CLOSED)

    @property
    def throttled(self) -> bool:
        return not self.closed and self.rate_Bps != self.orig_rate_Bps


class Burst(NamedTuple):
    """A completed burst of ACK progress of one flow (CLOCK_MONOTONIC ns)."""

    key: FlowKey
    slot: int
    start_ns: int
    end_ns: int
    bytes: int


class BurstBatch(Sequence):
    """Bursts by column, as the pacer reads them from its ring buffer (no object per record):
    keys (FlowKey per record), slot, start_ns, end_ns and nbytes (numpy uint arrays, same
    length). A sequence of Burst for everyone else (indexing and iterating make them)."""

    __slots__ = ("keys", "slot", "start_ns", "end_ns", "nbytes")

    def __init__(self, keys: list[FlowKey], slot: np.ndarray, start_ns: np.ndarray, end_ns: np.ndarray,
                 nbytes: np.ndarray) -> None:
        if not len(keys) == len(slot) == len(start_ns) == len(end_ns) == len(nbytes):
            raise ValueError("BurstBatch columns differ in length")
        self.keys, self.slot, self.start_ns, self.end_ns, self.nbytes = keys, slot, start_ns, end_ns, nbytes

    @classmethod
    def of(cls, bursts: Sequence[Burst]) -> BurstBatch:
        if isinstance(bursts, BurstBatch):
            return bursts
        return cls([b.key for b in bursts], np.array([b.slot for b in bursts], dtype=np.uint32),
                   np.array([b.start_ns for b in bursts], dtype=np.uint64),
                   np.array([b.end_ns for b in bursts], dtype=np.uint64),
                   np.array([b.bytes for b in bursts], dtype=np.uint64))

    def __len__(self) -> int:
        return len(self.keys)

    def __getitem__(self, i):
        if isinstance(i, slice):
            return list(self)[i]
        return Burst(self.keys[i], int(self.slot[i]), int(self.start_ns[i]), int(self.end_ns[i]), int(self.nbytes[i]))

    def __iter__(self):
        return map(Burst, self.keys, self.slot.tolist(), self.start_ns.tolist(), self.end_ns.tolist(),
                   self.nbytes.tolist())

    def __eq__(self, other) -> bool:
        if isinstance(other, (BurstBatch, list, tuple)):
            return len(self) == len(other) and list(self) == list(other)
        return NotImplemented

    __hash__ = None  # mutable columns

    def __repr__(self) -> str:
        return f"BurstBatch({list(self)!r})"


class Drift(NamedTuple):
    """One way the kernel differs from what setup() installed (Datapath.check). ``what``: "root" (the
    root qdisc is not hostctl's: its classes and filter went with it), "class" (one class is missing),
    "filter" (the classifier is detached), "ingress" (the ingress bands' IFB, its tree or the NIC's
    redirect); the device itself: "gone" (no device of that name or index), "renamed" (``to``: its new
    name), "replaced" (another device under the name); the pacer: "cgroup" (``to``: "gone" or "replaced":
    setup() releases the pacer; "back": a cgroup is under the path again, setup() attaches a new pacer),
    "pins" (removed, or the bpf filesystem unmounted: setup() pins them again); and, with nothing to put
    back, "down", "up" and "mtu" (a change since the last check). ``detail``: one line for the log."""

    what: str
    detail: str
    to: str = ""


LINK_EVENTS = ("down", "up", "mtu")  # Drift kinds that only say what happened (the tree is in place)


@dataclass(frozen=True)
class PacingReadout:
    flows: list[FlowRecord] = field(default_factory=list)
    bursts: list[Burst] | BurstBatch = field(default_factory=list)  # the pacer gives a BurstBatch
    ctl: dict[str, int] = field(default_factory=dict)
    link_tx_bytes: int | None = None  # the interface's transmitted bytes counter at the read (None: unknown)


class Datapath(Protocol):
    """What the daemon (hostctl/daemon.py, hostctl/policy/pacing.py, hostctl/policy/mlcc.py) calls, in this order:
    setup, then per slot heartbeat / apply / pace / read_counters / read_pacing / forget, per rescan check,
    then teardown; close last."""

    def setup(self, plan: TcPlan) -> None:
        """Install the plan (idempotent: a second call with the same plan changes nothing; after
        another agent changed the tree, a second call puts back what check() finds missing)."""

    def check(self) -> list[Drift]:
        """What of setup()'s tree is no longer in the kernel (empty: all of it is); one cheap read."""

    def apply(self, table: ClassifierTable) -> int:
        """Make the classifier maps equal to ``table``; returns the number of map writes."""

    def heartbeat(self) -> None:
        """Tell the kernel side the daemon is alive (fail-open lease)."""

    def read_counters(self, slots: set[int] | None = None) -> Counters:
        """One batched read of the class counters and of the job counters of ``slots`` (none when
        ``slots`` is None or empty)."""

    def pace(self, table: PaceTable) -> int:
        """Make the pacing maps equal to ``table`` (selectors and rates); returns map writes. A flow a
        selector matches is tracked whether it was established before or after (the real pacer's
        adoption pass, docs/pacing.md)."""

    def read_pacing(self) -> PacingReadout:
        """One batched read of the monitored flows, the completed bursts and the control counters."""

    def forget(self, keys: list[FlowKey]) -> None:
        """Drop closed flows' kernel entries once their last counters were read."""

    def teardown(self) -> None:
        """Remove everything setup() created and restore the previous state (idempotent)."""

    def close(self) -> None:
        """Release what the object itself holds (the netlink socket), after teardown()."""
