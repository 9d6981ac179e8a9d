"""Every kernel effect behind one small interface.

``Datapath`` is implemented by ``LinuxDatapath`` (pyroute2 netlink + bcc) and
``FakeDatapath`` (in memory, for unit tests of the daemon). Both run the same
contract tests (tests/unit/test_datapath_contract.py, tests/integration/...).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Protocol

from hostctl.core.plan import ClassifierTable, TcPlan


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


class Datapath(Protocol):
    def setup(self, plan: TcPlan) -> None:
        """Install the plan (idempotent: a second call with the same plan changes nothing)."""

    def apply(self, table: ClassifierTable) -> int:
        """Make the classifier maps equal to ``table``; returns the number of map writes."""

    def heartbeat(self) -> None:
        """Tell the kernel side the daemon is alive (fail-open lease)."""

    def read_counters(self) -> Counters:
        """One batched read of class and job counters."""

    def teardown(self) -> None:
        """Remove everything setup() created and restore the previous state (idempotent)."""
