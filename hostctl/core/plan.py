"""The datapath plan: what hostctl will create in the kernel, as plain data (pure).

``build_tc_plan`` gives the htb tree; ``build_classifier`` gives the entries of
the BPF classifier maps for a band assignment. ``hostctl start --dry-run`` prints
both; the Linux datapath executes them; the fake datapath records them.

htb layout (handle major 0x6863, "hc"):

    6863:    root htb qdisc, default class 6863:10
    6863:1   root class     rate = ceil = link rate
    6863:10  default class  rate = other_rate, ceil = link, prio 7   (all non-DL traffic)
    6863:11  control class  rate = 100kbit,    ceil = link, prio 0   (TCP segments without data)
    6863:20+b band b class  rate = 100kbit,    ceil = link, prio b   (b = 0..bands-1)

The control class (only with bands) keeps the pure ACKs of what this host receives from
queueing behind the data it sends: those of non-DL flows behind bulk data in the default
class, below the bands; those of a DL job behind higher bands' data, which would stall the
job's incoming direction (a PS host's gradients) while another job's update goes out.

Every band class is guaranteed only a token rate and borrows the rest from the
root class; htb lends excess to the lowest prio value first, which makes the
bands strict priority yet work-conserving (spec 1.2). The default class gets a
guaranteed ``other_rate`` so non-DL traffic (ssh, storage, cross traffic) is
never starved by DL bursts. Rotation never touches the htb tree: it re-points a
job's classifier-map entry to another band class (ENVIRONMENT.md: changing the
prio of a busy class does not flip precedence).

Ingress bands (optional, ``ingress_rate``): the NIC's ingress is redirected to an
IFB device that carries the same tree with the ingress rate in place of the link
rate, classified by the same job table with local and remote swapped. Set below
the rate at which the switch delivers, it moves the queue of a shared receive
link (gradients converging on a parameter-server host) from the switch port,
where the host has no say, into the host, where the bands order it.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field

from hostctl.core.bpfabi import DEFINES
from hostctl.core.types import FlowKey, Job, shared_ports

QDISC_MAJOR = 0x6863
QDISC_HANDLE = QDISC_MAJOR << 16
ROOT_CLASSID = QDISC_HANDLE | 0x1
DEFAULT_CLASSID = QDISC_HANDLE | 0x10
CONTROL_CLASSID = QDISC_HANDLE | 0x11
BAND_CLASSID_BASE = QDISC_HANDLE | 0x20
DEFAULT_PRIO = 7
BAND_MIN_RATE_BPS = 100_000  # 100kbit guaranteed per band (reference code's $MIN)
QUANTUM_BYTES = 65536  # DRR quantum for classes sharing a prio level (explicit: avoids htb warnings)
FILTER_PRIO = 1
# sizes of the classifier's maps: hostctl/bpf/hostctl.h
MAX_JOB_SLOTS = DEFINES["HC_MAX_SLOTS"]
MAX_PORT_ENTRIES = DEFINES["HC_MAX_PORTS"]
MAX_FLOW_ENTRIES = DEFINES["HC_MAX_FLOWS"]
MAX_REMOTE_ENTRIES = DEFINES["HC_MAX_REMOTES"]


def band_classid(band: int) -> int:
    return BAND_CLASSID_BASE + band


def fmt_handle(h: int) -> str:
    """0x68630020 -> '6863:20' (tc notation, hex)."""
    return f"{h >> 16:x}:{h & 0xFFFF:x}"


def burst_bytes(rate_bps: int, mtu: int = 1514) -> int:
    """htb bucket size: at least 1 ms of the rate and one 64 KiB GSO packet.

    pyroute2's default (rate/HZ + mtu with a nanosecond HZ) is about one MTU,
    which makes htb under-run at Gbit rates with TSO/GSO on veth and NICs.
    """
    return max(rate_bps // 8 // 1000, 65536 + mtu)


@dataclass(frozen=True)
class HtbClass:
    classid: int
    parent: int
    rate_bps: int
    ceil_bps: int
    prio: int
    name: str
    quantum_bytes: int = QUANTUM_BYTES

    @property
    def burst_bytes(self) -> int:
        return burst_bytes(self.rate_bps)

    @property
    def cburst_bytes(self) -> int:
        return burst_bytes(self.ceil_bps)


@dataclass(frozen=True)
class TcPlan:
    """The htb tree for one interface, plus whether the BPF classifier is attached."""

    iface: str
    link_rate_bps: int
    classes: tuple[HtbClass, ...]
    classify: bool  # False for fifo: no filter at all
    bands: int
    qdisc_handle: int = QDISC_HANDLE
    default_classid: int = DEFAULT_CLASSID
    filter_prio: int = FILTER_PRIO
    ingress_rate_bps: int = 0  # 0: no ingress bands
    ingress_classes: tuple[HtbClass, ...] = ()  # the IFB's tree (same handles, ingress rate)

    def to_dict(self) -> dict:
        d = asdict(self)
        d["qdisc_handle"] = fmt_handle(self.qdisc_handle)
        d["default_classid"] = fmt_handle(self.default_classid)
        for key, classes in (("classes", self.classes), ("ingress_classes", self.ingress_classes)):
            d[key] = [
                {**asdict(c), "classid": fmt_handle(c.classid), "parent": fmt_handle(c.parent),
                 "burst_bytes": c.burst_bytes, "cburst_bytes": c.cburst_bytes}
                for c in classes
            ]
        return d


def _htb_classes(rate_bps: int, bands: int, other_rate_bps: int, classify: bool) -> tuple[HtbClass, ...]:
    if other_rate_bps + (bands + 1) * BAND_MIN_RATE_BPS > rate_bps:
        raise ValueError("guaranteed rates exceed the link rate")
    classes = [
        HtbClass(ROOT_CLASSID, QDISC_HANDLE, rate_bps, rate_bps, 0, "root"),
        HtbClass(DEFAULT_CLASSID, ROOT_CLASSID, max(other_rate_bps, BAND_MIN_RATE_BPS),
                 rate_bps, DEFAULT_PRIO, "default"),
    ]
    if classify:
        classes.append(HtbClass(CONTROL_CLASSID, ROOT_CLASSID, BAND_MIN_RATE_BPS, rate_bps, 0, "control"))
        classes += [
            HtbClass(band_classid(b), ROOT_CLASSID, BAND_MIN_RATE_BPS, rate_bps, b, f"band{b}")
            for b in range(bands)
        ]
    return tuple(classes)


def build_tc_plan(
    iface: str, link_rate_bps: int, bands: int, other_rate_bps: int, classify: bool,
    ingress_rate_bps: int = 0,
) -> TcPlan:
    """ingress_rate_bps > 0 adds ingress bands (only with classify: fifo orders nothing)."""
    classes = _htb_classes(link_rate_bps, bands, other_rate_bps, classify)
    ingress_rate_bps = ingress_rate_bps if classify else 0
    ingress = _htb_classes(ingress_rate_bps, bands, other_rate_bps, True) if ingress_rate_bps else ()
    return TcPlan(iface, link_rate_bps, classes, classify, bands,
                  ingress_rate_bps=ingress_rate_bps, ingress_classes=ingress)


@dataclass(frozen=True)
class ClassifierTable:
    """Contents of the BPF classifier maps (hostctl/bpf/tl_classify.c).

    slots: job id -> job slot (index into the job-class array), stable while the job lives.
    slot_classid: slot -> htb classid (0: the job's traffic goes to the default class).
    ports: local TCP port -> slot (egress with that source port: a served listening port;
    none for a port several jobs serve, whose flows are 4-tuple entries).
    flows: connection -> slot (egress of connections the job opened).
    remotes: remote endpoint (address, port) -> slot (egress to a server the job connects to:
        a worker's connections to its PS, new ones and NATed ones included).

    ``lookup`` is the program's decision for one packet, in its order: 4-tuple, then local
    port, then remote endpoint. The ingress instance looks up the same table with the packet's
    destination as the local end, so its remote end is the source.
    """

    slots: Mapping[str, int] = field(default_factory=dict)
    slot_classid: Mapping[int, int] = field(default_factory=dict)
    ports: Mapping[int, int] = field(default_factory=dict)
    flows: Mapping[FlowKey, int] = field(default_factory=dict)
    remotes: Mapping[tuple[str, int], int] = field(default_factory=dict)
    dropped_flows: int = 0  # flows beyond MAX_FLOW_ENTRIES (classified as default)
    dropped_jobs: int = 0  # jobs beyond MAX_JOB_SLOTS
    dropped_remotes: int = 0  # remote endpoints beyond MAX_REMOTE_ENTRIES (their flows' 4-tuples still match)

    def lookup(self, flow: FlowKey) -> int | None:
        """The slot a packet of ``flow`` (local end first) is counted for, or None (no job)."""
        slot = self.flows.get(flow)
        if slot is None:
            slot = self.ports.get(flow.lport)
        if slot is None:
            slot = self.remotes.get((flow.raddr, flow.rport))
        return slot

    def to_dict(self) -> dict:
        return {
            "slots": dict(self.slots),
            "slot_classid": {s: fmt_handle(c) if c else "default" for s, c in self.slot_classid.items()},
            "ports": dict(self.ports),
            "flows": {str(k): v for k, v in self.flows.items()},
            "remotes": {endpoint_str(e): v for e, v in sorted(self.remotes.items())},
            "dropped_flows": self.dropped_flows,
            "dropped_jobs": self.dropped_jobs,
            "dropped_remotes": self.dropped_remotes,
        }


def endpoint_str(endpoint: tuple[str, int]) -> str:
    """('10.0.0.1', 9400) -> '10.0.0.1:9400'; IPv6 bracketed."""
    addr, port = endpoint
    return f"[{addr}]:{port}" if ":" in addr else f"{addr}:{port}"


def allocate_slots(job_ids: Sequence[str], previous: Mapping[str, int], capacity: int) -> tuple[dict[str, int], int]:
    """Keep existing jobs in their slots; give new jobs the lowest free slots.

    Returns (slots, number of jobs that did not fit)."""
    slots = {j: previous[j] for j in job_ids if j in previous}
    used = set(slots.values())
    free = (s for s in range(capacity) if s not in used)
    dropped = 0
    for j in sorted(job_ids):
        if j in slots:
            continue
        s = next(free, None)
        if s is None:
            dropped += 1
            continue
        slots[j] = s
    return slots, dropped


def build_classifier(
    jobs: Sequence[Job],
    assignment: Mapping[str, int],
    previous_slots: Mapping[str, int] | None = None,
    *,
    max_slots: int = MAX_JOB_SLOTS,
    max_ports: int = MAX_PORT_ENTRIES,
    max_flows: int = MAX_FLOW_ENTRIES,
    max_remotes: int = MAX_REMOTE_ENTRIES,
) -> ClassifierTable:
    """Map entries for ``jobs`` under a band ``assignment`` (job id -> band).

    Jobs without a band (fifo, a single job, or not assigned) keep their slot but
    point at classid 0, so their packets fall to the default class. A flow gets a
    4-tuple entry only where the port and remote-endpoint entries would not give its
    packets the job's slot already (a worker's flows to its PS need none).
    """
    slots, dropped_jobs = allocate_slots([j.job_id for j in jobs], previous_slots or {}, max_slots)
    slot_classid = {
        s: (band_classid(assignment[j]) if j in assignment else 0) for j, s in slots.items()
    }
    e = job_entries(jobs, slots, max_ports=max_ports, max_flows=max_flows, max_remotes=max_remotes)
    return ClassifierTable(slots, slot_classid, e.ports, e.flows, e.remotes, e.dropped_flows, dropped_jobs,
                           e.dropped_remotes)


@dataclass(frozen=True)
class JobEntries:
    """Which entries give each job's packets its slot: served port -> slot, remote endpoint ->
    slot, and 4-tuple -> slot for the flows neither covers. The tc classifier's maps and the
    pacer's selectors (hostctl.core.pace.selectors) are both made from it."""

    ports: dict[int, int]
    flows: dict[FlowKey, int]
    remotes: dict[tuple[str, int], int]
    dropped_flows: int = 0  # flows beyond max_flows
    dropped_remotes: int = 0  # endpoints beyond max_remotes


def job_entries(jobs: Sequence[Job], slots: Mapping[str, int], *, max_ports: int, max_flows: int,
                max_remotes: int) -> JobEntries:
    """The entries for the ``jobs`` that have a slot, in job-id order (an earlier job keeps a
    port, endpoint or flow another job also has). A port several jobs serve (shared_ports) gets
    no port entry: its flows get 4-tuples. A flow gets a 4-tuple only where its port or remote
    endpoint entry would not give it the job's slot already (a worker's flows to its PS need none).
    Beyond a limit (the kernel map's size) entries are left out and counted."""
    ports: dict[int, int] = {}
    flows: dict[FlowKey, int] = {}
    remotes: dict[tuple[str, int], int] = {}
    dropped_flows = dropped_remotes = 0
    shared = shared_ports(jobs)
    ordered = [(job, slots[job.job_id]) for job in sorted(jobs, key=lambda j: j.job_id) if job.job_id in slots]
    for job, slot in ordered:
        for p in job.listen_ports:
            if len(ports) < max_ports and p not in shared:
                ports.setdefault(p, slot)
        for e in job.remote_endpoints:
            if e in remotes:
                continue
            if len(remotes) >= max_remotes:
                dropped_remotes += 1
                continue
            remotes[e] = slot
    for job, slot in ordered:
        for f in job.client_flows(shared):
            if f in flows:
                continue
            by_port = ports.get(f.lport)
            if (by_port if by_port is not None else remotes.get((f.raddr, f.rport))) == slot:
                continue  # the port or endpoint entry classifies it already
            if len(flows) >= max_flows:
                dropped_flows += 1
                continue
            flows[f] = slot
    return JobEntries(ports, flows, remotes, dropped_flows, dropped_remotes)
