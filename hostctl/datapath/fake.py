"""FakeDatapath: the Datapath contract in memory, for unit tests of the daemon.

It behaves like the kernel where the daemon can tell: setup is idempotent, apply
diffs the maps and counts writes, teardown restores and can run twice, and
counters grow with the traffic a test injects with ``send``.
"""

from __future__ import annotations

from hostctl.core.plan import ClassifierTable, TcPlan
from hostctl.datapath import ClassCounters, Counters, JobCounters


class FakeDatapath:
    def __init__(self, previous_root: str = "noqueue") -> None:
        self.root = previous_root
        self.previous_root = previous_root
        self.plan: TcPlan | None = None
        self.table = ClassifierTable()
        self.setups = 0
        self.applies: list[ClassifierTable] = []
        self.heartbeats = 0
        self.class_bytes: dict[int, int] = {}
        self.job_bytes: dict[int, int] = {}
        self.torn_down = 0

    def setup(self, plan: TcPlan) -> None:
        self.setups += 1
        self.plan = plan
        self.root = f"htb {plan.qdisc_handle:x}"
        for c in plan.classes:
            self.class_bytes.setdefault(c.classid, 0)

    def apply(self, table: ClassifierTable) -> int:
        if self.plan is None:
            raise RuntimeError("apply before setup")
        cur = self.table
        writes = sum(1 for s, c in table.slot_classid.items() if cur.slot_classid.get(s) != c)
        writes += sum(1 for p, s in table.ports.items() if cur.ports.get(p) != s)
        writes += sum(1 for f, s in table.flows.items() if cur.flows.get(f) != s)
        writes += len(cur.flows.keys() - table.flows.keys()) + len(cur.ports.keys() - table.ports.keys())
        writes += len(cur.slot_classid.keys() - table.slot_classid.keys())
        self.table = table
        self.applies.append(table)
        return writes

    def heartbeat(self) -> None:
        self.heartbeats += 1

    def send(self, job_id: str, nbytes: int) -> None:
        """Pretend the job sent ``nbytes``: counted for the job and its class."""
        slot = self.table.slots[job_id]
        self.job_bytes[slot] = self.job_bytes.get(slot, 0) + nbytes
        assert self.plan is not None
        cid = self.table.slot_classid.get(slot) or self.plan.default_classid
        self.class_bytes[cid] = self.class_bytes.get(cid, 0) + nbytes

    def read_counters(self, slots: set[int] | None = None) -> Counters:
        classes = {cid: ClassCounters(cid, b, b // 1500, 0, 0, 0) for cid, b in self.class_bytes.items()}
        jobs = {s: JobCounters(s, self.job_bytes.get(s, 0), self.job_bytes.get(s, 0) // 1500, 0, 0)
                for s in (slots or set())}
        return Counters(classes, jobs, 0)

    def teardown(self) -> None:
        self.torn_down += 1
        self.root = self.previous_root
        self.plan = None
        self.table = ClassifierTable()
