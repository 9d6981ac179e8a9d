"""Every kernel effect behind one small interface.

``Datapath`` is implemented by ``LinuxDatapath`` (pyroute2 netlink + bcc) and
``FakeDatapath`` (in memory, for unit tests of the daemon). Both run the same
contract tests (tests/unit/test_datapath_contract.py, tests/integration/...).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import NamedTuple, Protocol

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
    """One paced/monitored flow as the kernel sees it (a row of hp_flows, bpf/hc_pace.c). A
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


@dataclass(frozen=True)
class PacingReadout:
    flows: list[FlowRecord] = field(default_factory=list)
    bursts: list[Burst] = field(default_factory=list)
    ctl: dict[str, int] = field(default_factory=dict)


class Datapath(Protocol):
    def setup(self, plan: TcPlan) -> None:
        """Install the plan (idempotent: a second call with the same plan changes nothing)."""

    def apply(self, table: ClassifierTable) -> int:
        """Make the classifier maps equal to ``table``; returns the number of map writes."""

    def heartbeat(self) -> None:
        """Tell the kernel side the daemon is alive (fail-open lease)."""

    def read_counters(self) -> Counters:
        """One batched read of class and job counters."""

    def pace(self, table: PaceTable) -> int:
        """Make the pacing maps equal to ``table`` (selectors and rates); returns map writes."""

    def read_pacing(self) -> PacingReadout:
        """One batched read of the monitored flows, the completed bursts and the control counters."""

    def forget(self, keys: list[FlowKey]) -> None:
        """Drop closed flows' kernel entries once their last counters were read."""

    def teardown(self) -> None:
        """Remove everything setup() created and restore the previous state (idempotent)."""
