"""FakeDatapath: the Datapath contract in memory, for unit tests of the daemon.

It behaves like the kernel where the daemon can tell: setup is idempotent, apply
diffs the maps and counts writes, teardown restores and can run twice, and
counters grow with the traffic a test injects with ``send``.
"""

from __future__ import annotations


from hostctl.core.pace import WATCH_SLOT, PaceTable
from hostctl.core.plan import ClassifierTable, TcPlan
from hostctl.core.types import FlowKey
from hostctl.datapath import (
    FLOW_CLOSED, LINK_EVENTS, UNLIMITED_BPS_BYTES, Burst, ClassCounters, Counters, Drift, FlowRecord, JobCounters,
    PacingReadout,
)


class FakeDatapath:
    link_tx_bytes: int | None = None  # the interface's tx counter a test sets (None: unknown, as without sysfs)

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
        self.ingress_class_bytes: dict[int, int] = {}  # the IFB's classes (ingress bands)
        self.rx_job_bytes: dict[int, int] = {}
        self.torn_down = 0
        self.closed = False
        self.drift: list[Drift] = []  # what another agent changed since the last setup (tamper)
        self.pace_table = PaceTable()
        self.pace_writes: list[PaceTable] = []
        self.kflows: dict[FlowKey, FlowRecord] = {}  # the kernel's flow table, driven by connect/transfer
        self.kbursts: list[Burst] = []
        self.untracked: set[FlowKey] = set()  # established flows no selector matched (yet)
        # the program's control words and counters, as Pacer.ctl() reads them
        self.ctl = {"heartbeat_ns": 0, "lease_ns": 0, "gap_ns": 0, "flags": 0,
                    "flows_full": 0, "failopen_events": 0, "bursts_lost": 0, "setopt_errors": 0,
                    "adopted": 0}

    def setup(self, plan: TcPlan) -> None:
        self.setups += 1
        self.plan = plan
        self.root = f"htb {plan.qdisc_handle:x}"
        self.drift = []
        for c in plan.classes:
            self.class_bytes.setdefault(c.classid, 0)
        if not plan.ingress_classes:
            self.ingress_class_bytes.clear()
        for c in plan.ingress_classes:
            self.ingress_class_bytes.setdefault(c.classid, 0)

    def tamper(self, what: str, root: str = "tbf", to: str = "") -> None:
        """Another agent's change, as LinuxDatapath.check reports it: ``root`` (the root qdisc replaced
        by ``root``: the classes and the filter go with it, their counters start over), ``filter`` (the
        classifier detached), ``ingress``; the pacer: ``pins``, ``cgroup`` (``to``: gone, replaced, back);
        the device: ``gone``, ``renamed`` (to ``to``), ``replaced`` (setup() follows these), and ``down``,
        ``up``, ``mtu`` (reported by one check())."""
        assert self.plan is not None
        if what == "root":
            self.root = root
            self.drift = [Drift("root", f"the root qdisc is {root}, not hostctl's htb")]
            self.class_bytes = dict.fromkeys(self.class_bytes, 0)
        elif what in ("gone", "renamed", "replaced"):
            self.drift = [Drift(what, f"the device: {what}", to)]
        else:  # "pins", "cgroup" (to: gone, replaced, back), "down", "up", "mtu", "ingress", ...
            self.drift.append(Drift(what, f"{what} changed", to))

    def check(self) -> list[Drift]:
        if self.plan is None:
            return []
        out = list(self.drift)
        self.drift = [d for d in self.drift if d.what not in LINK_EVENTS]  # said once
        return out

    def apply(self, table: ClassifierTable) -> int:
        if self.plan is None:
            raise RuntimeError("apply before setup")
        cur = self.table
        writes = sum(1 for s, c in table.slot_classid.items() if cur.slot_classid.get(s) != c)
        writes += sum(1 for p, s in table.ports.items() if cur.ports.get(p) != s)
        writes += sum(1 for f, s in table.flows.items() if cur.flows.get(f) != s)
        writes += sum(1 for e, s in table.remotes.items() if cur.remotes.get(e) != s)
        writes += len(cur.flows.keys() - table.flows.keys()) + len(cur.ports.keys() - table.ports.keys())
        writes += len(cur.remotes.keys() - table.remotes.keys())
        writes += len(cur.slot_classid.keys() - table.slot_classid.keys())
        self.table = table
        self.applies.append(table)
        return writes

    def heartbeat(self) -> None:
        self.heartbeats += 1

    def classify(self, flow: FlowKey) -> int:
        """The class an egress data packet of ``flow`` goes to, as the classifier decides it
        (4-tuple, local port, remote endpoint; no job or no band: the default class)."""
        assert self.plan is not None
        slot = self.table.lookup(flow)
        return (self.table.slot_classid.get(slot) if slot is not None else None) or self.plan.default_classid

    def send(self, job_id: str, nbytes: int) -> None:
        """Pretend the job sent ``nbytes``: counted for the job and its class."""
        self._count(job_id, nbytes, self.job_bytes, self.class_bytes)

    def receive(self, job_id: str, nbytes: int) -> None:
        """Pretend the job received ``nbytes``: counted on the IFB if ingress bands are set up and
        some job is in a band (LinuxDatapath redirects to the IFB only then)."""
        assert self.plan is not None
        if self.plan.ingress_classes and any(self.table.slot_classid.values()):
            self._count(job_id, nbytes, self.rx_job_bytes, self.ingress_class_bytes)

    def _count(self, job_id: str, nbytes: int, jobs: dict[int, int], classes: dict[int, int]) -> None:
        slot = self.table.slots[job_id]
        jobs[slot] = jobs.get(slot, 0) + nbytes
        assert self.plan is not None
        cid = self.table.slot_classid.get(slot) or self.plan.default_classid
        classes[cid] = classes.get(cid, 0) + nbytes

    def read_counters(self, slots: set[int] | None = None) -> Counters:
        def classes(by: dict[int, int]) -> dict[int, ClassCounters]:
            return {cid: ClassCounters(cid, b, b // 1500, 0, 0, 0) for cid, b in by.items()}

        def jobs(by: dict[int, int]) -> dict[int, JobCounters]:
            return {s: JobCounters(s, by.get(s, 0), by.get(s, 0) // 1500, 0, 0) for s in (slots or set())}

        if not self.ingress_class_bytes:
            return Counters(classes(self.class_bytes), jobs(self.job_bytes), 0)
        return Counters(classes(self.class_bytes), jobs(self.job_bytes), 0,
                        classes(self.ingress_class_bytes), jobs(self.rx_job_bytes))

    # -- pacing: the sock_ops program's behaviour, in memory ---------------------------------
    def pace(self, table: PaceTable) -> int:
        writes = sum(1 for k, v in table.flow_rates.items() if self.pace_table.flow_rates.get(k) != v)
        writes += sum(1 for k, v in table.slot_rates.items() if self.pace_table.slot_rates.get(k) != v)
        writes += sum(1 for k, v in table.remotes.items() if self.pace_table.remotes.get(k) != v)
        self.pace_table = table
        self.pace_writes.append(table)
        # the adoption pass: a flow established while no selector matched it is tracked once one does
        for k in [k for k in self.untracked if self._selected(k) is not None]:
            self.untracked.discard(k)
            self.connect(k)
            self.ctl["adopted"] += 1
        # like the program at the flows' next callback: apply the wanted rate
        for k, r in self.kflows.items():
            self.kflows[k] = r._replace(rate_Bps=self._want(k, r.slot))
        return writes

    def _want(self, key: FlowKey, slot: int) -> int:
        return (self.pace_table.flow_rates.get(key) or self.pace_table.slot_rates.get(slot)
                or UNLIMITED_BPS_BYTES)

    def _selected(self, key: FlowKey) -> int | None:
        """The program's selection at ESTABLISHED: 4-tuple, local port, remote endpoint, remote
        port (a watched port selects nothing, and the search goes on past it)."""
        t = self.pace_table
        for slot in (t.flows.get(key), t.ports.get((key.lport, "local")), t.remotes.get((key.raddr, key.rport)),
                     t.ports.get((key.rport, "remote"))):
            if slot is not None and slot != WATCH_SLOT:
                return slot
        return None

    def connect(self, key: FlowKey, now_ns: int = 0) -> bool:
        """A flow is established: tracked if a selector matches (as at ESTABLISHED)."""
        slot = self._selected(key)
        if slot is None:
            self.untracked.add(key)  # established, not tracked (until an adoption pass, at a later pace())
            return False
        self.kflows[key] = FlowRecord(key, slot, 0, 0, now_ns, 0, 0, 0, self._want(key, slot),
                                      UNLIMITED_BPS_BYTES, 100, 10, 0, 0, 0)
        return True

    def transfer(self, key: FlowKey, nbytes: int, start_ns: int, end_ns: int) -> None:
        """The flow moved ``nbytes`` between start and end; reported as one completed burst."""
        r = self.kflows[key]
        self.kflows[key] = r._replace(bytes_acked=r.bytes_acked + nbytes, bytes_sent=r.bytes_sent + nbytes,
                                   last_ns=end_ns, bursts=r.bursts + 1)
        self.kbursts.append(Burst(key, r.slot, start_ns, end_ns, nbytes))

    def close_flow(self, key: FlowKey) -> None:
        self.kflows[key] = self.kflows[key]._replace(flags=self.kflows[key].flags | FLOW_CLOSED)

    def read_pacing(self) -> PacingReadout:
        bursts, self.kbursts = self.kbursts, []
        return PacingReadout(list(self.kflows.values()), bursts, dict(self.ctl), self.link_tx_bytes)

    def forget(self, keys: list[FlowKey]) -> None:
        for k in keys:
            self.kflows.pop(k, None)

    def teardown(self) -> None:
        self.torn_down += 1
        for k, r in self.kflows.items():  # release: every flow gets its original rate back
            self.kflows[k] = r._replace(rate_Bps=r.orig_rate_Bps)
        self.root = self.previous_root
        self.plan = None
        self.table = ClassifierTable()

    def close(self) -> None:
        self.closed = True
