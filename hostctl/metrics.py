"""Prometheus metrics (``--metrics-port``), read from the daemon's last status.

Names follow Prometheus' conventions: base units (``_bytes``, ``_seconds``,
``_bytes_per_second``), counters exposed with ``_total`` (prometheus_client adds it),
latencies as histograms (``hostctl_slot_decision_seconds``,
``hostctl_mlcc_negotiation_seconds``), and labels that stay few: per job, per htb class,
per switch endpoint or error code; never per flow or per planned slot (flows with ephemeral
ports would make a new series per connection), so flow-level numbers are summed per job.
Rates that a counter already gives (``rate(hostctl_job_tx_bytes_total[1m])``) are not
exported as gauges. ``hostctl_build_info{version}`` is 1.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, HistogramMetricFamily
from prometheus_client.registry import CollectorRegistry


def _histogram(name: str, doc: str, h: dict | None) -> HistogramMetricFamily | None:
    """A HistogramMetricFamily from hostctl.core.hist.Histogram.to_dict()."""
    if not h:
        return None
    buckets = [(repr(float(le)), c) for le, c in zip(h["le"], h["cumulative"])] + [("+Inf", h["cumulative"][-1])]
    return HistogramMetricFamily(name, doc, buckets=buckets, sum_value=h["sum"])


class StatusCollector:
    def __init__(self, status: Callable[[], dict], version: str | None = None):
        self.status = status
        self.version = version

    def collect(self):
        st = self.status()
        info = GaugeMetricFamily("hostctl_build_info", "hostctl's version (the value is 1)", labels=["version"])
        info.add_metric([str(self.version or st.get("version") or "unknown")], 1)
        yield info
        band = GaugeMetricFamily("hostctl_job_band", "Priority band of the job (0 = highest; -1 = default class)", labels=["job"])
        txb = CounterMetricFamily("hostctl_job_tx_bytes", "Egress bytes of the job on this host", labels=["job"])
        rxb = CounterMetricFamily("hostctl_job_rx_bytes", "Bytes the job received through the ingress bands", labels=["job"])
        burst = GaugeMetricFamily("hostctl_job_last_burst_bytes", "Size of the job's last completed burst, bytes", labels=["job"])
        for j in st.get("jobs", []):
            band.add_metric([j["job_id"]], -1 if j["band"] is None else j["band"])
            txb.add_metric([j["job_id"]], j["tx_bytes"])
            if j.get("rx_bytes") is not None:
                rxb.add_metric([j["job_id"]], j["rx_bytes"])
            burst.add_metric([j["job_id"]], j["last_burst_bytes"])
        cb = CounterMetricFamily("hostctl_class_bytes", "Bytes sent through the htb class", labels=["classid", "name"])
        cd = CounterMetricFamily("hostctl_class_drops", "Packets dropped in the htb class", labels=["classid", "name"])
        for c in st.get("classes", []):
            cb.add_metric([c["classid"], c["name"]], c["bytes"])
            cd.add_metric([c["classid"], c["name"]], c["drops"])
        ib = CounterMetricFamily("hostctl_ingress_class_bytes", "Bytes received through the ingress bands' htb class",
                                 labels=["classid", "name"])
        idr = CounterMetricFamily("hostctl_ingress_class_drops", "Received packets dropped in the ingress bands' htb class",
                                  labels=["classid", "name"])
        for c in st.get("ingress_classes", []):
            ib.add_metric([c["classid"], c["name"]], c["bytes"])
            idr.add_metric([c["classid"], c["name"]], c["drops"])
        stats = st.get("stats", {})
        yield from (band, txb, burst, cb, cd)
        if st.get("ingress_classes"):
            yield from (ib, idr, rxb)
        yield CounterMetricFamily("hostctl_rotations", "Priority rotations (policy rr)", value=stats.get("rotations", 0))
        yield CounterMetricFamily("hostctl_reassignments", "Band reassignments on job arrival/departure", value=stats.get("reassignments", 0))
        yield CounterMetricFamily("hostctl_errors", "Errors (discovery, map writes, counters)", value=stats.get("errors", 0))
        yield CounterMetricFamily("hostctl_memory_trimmed_bytes", "Memory the C allocator gave back to the kernel "
                                  "(malloc_trim, once up and every 5 minutes)", value=stats.get("mem_trimmed_kib", 0) * 1024)
        yield GaugeMetricFamily("hostctl_gc_pause_max_seconds", "Longest pause of Python's garbage collector "
                                "since the daemon was up", value=stats.get("gc_max_ms", 0.0) / 1e3)
        yield CounterMetricFamily("hostctl_reconciliations", "Times the tc tree was put back after another agent "
                                  "changed it", value=stats.get("reconciliations", 0))
        yield CounterMetricFamily("hostctl_failopen_packets", "Packets left unclassified because the daemon's lease expired", value=st.get("failopen_pkts", 0))
        reloads = CounterMetricFamily("hostctl_config_reloads", "Config reloads (SIGHUP) by result", labels=["result"])
        for result, n in sorted(st.get("reloads", {}).items()):
            reloads.add_metric([result], n)
        yield reloads
        yield GaugeMetricFamily("hostctl_jobs", "DL jobs found on this host", value=len(st.get("jobs", [])))
        pc = st.get("pacing")
        if pc:
            yield from _pacing_metrics(pc, stats, st.get("slot_decision_seconds"))


def _per_job(flows: list[dict], value: Callable[[dict], float | None]) -> dict[str, float]:
    out: dict[str, float] = defaultdict(float)
    for f in flows:
        v = value(f)
        if v is not None:
            out[f["job"] or ""] += v
    return out


def _pacing_metrics(pc: dict, stats: dict, decision: dict | None):
    flows = pc.get("flows", [])
    target = GaugeMetricFamily("hostctl_job_pacing_target_bytes_per_second",
                               "Sum of the pacing rates the daemon asks for the job's flows", labels=["job"])
    for job, v in sorted(_per_job(flows, lambda f: None if f["target_bps"] is None else f["target_bps"] / 8).items()):
        target.add_metric([job], v)
    nflows = GaugeMetricFamily("hostctl_job_paced_flows", "Flows of the job the pacer tracks", labels=["job"])
    iters = CounterMetricFamily("hostctl_job_iterations", "Completed iterations seen on the job's flows", labels=["job"])
    per_iter = GaugeMetricFamily("hostctl_job_iteration_size_bytes", "Estimated (or hinted) bytes per iteration",
                                 labels=["job"])
    cap = GaugeMetricFamily("hostctl_job_cap_bytes_per_second", "The job's rate cap (policy cap)", labels=["job"])
    for job, r in sorted(pc.get("jobs", {}).items()):
        nflows.add_metric([job], r["flows"])
        iters.add_metric([job], r["iterations"])
        if r.get("bytes_per_iter") is not None:
            per_iter.add_metric([job], r["bytes_per_iter"])
        if r.get("cap_bps") is not None:
            cap.add_metric([job], r["cap_bps"] / 8)
    yield from (target, nflows, iters, per_iter, cap)
    yield CounterMetricFamily("hostctl_slots", "Pacing slots run", value=stats.get("slots", 0))
    yield CounterMetricFamily("hostctl_pacing_burst_records", "Burst records read from the kernel",
                              value=pc.get("burst_records", 0))
    yield CounterMetricFamily("hostctl_slot_overruns", "Pacing slots whose work overran the slot", value=stats.get("slot_overruns", 0))
    h = _histogram("hostctl_slot_decision_seconds", "Time of one pacing slot's work (read, decide, write)", decision)
    if h is not None:
        yield h
    k = pc.get("kernel", {})
    yield CounterMetricFamily("hostctl_pacing_flows_not_tracked", "Selected flows left alone because the flow map was full", value=k.get("flows_full", 0))
    yield CounterMetricFamily("hostctl_pacing_failopen_events", "Flow rates restored because the lease expired or on release", value=k.get("failopen_events", 0))
    yield CounterMetricFamily("hostctl_pacing_setsockopt_errors", "Failed bpf_setsockopt calls", value=k.get("setopt_errors", 0))
    yield CounterMetricFamily("hostctl_pacing_flows_adopted", "Established flows given pacing callbacks by an adoption "
                              "pass (established before the pacer or their selector)", value=k.get("adopted", 0))
    ml = pc.get("mlcc")
    if ml:
        yield from _mlcc_metrics(ml, pc)


def _per_endpoint(name: str, what: str, values: dict | None, scale: float = 1.0):
    """A gauge with one series per switch endpoint (none if there are no values)."""
    if values:
        g = GaugeMetricFamily(name, what, labels=["endpoint"])
        for ep, v in sorted(values.items()):
            g.add_metric([ep], v * scale)
        yield g


def _mlcc_metrics(ml: dict, pc: dict):
    flows = pc.get("flows", [])
    mode = GaugeMetricFamily("hostctl_mlcc_switch_mode", "1: planning with switchemu feedback, 0: local mode")
    mode.add_metric([], 1 if ml["mode"] == "switch" else 0)
    yield mode
    yield CounterMetricFamily("hostctl_mlcc_fallbacks", "Changes to local mode (switches silent 3 slots)", value=ml["fallbacks"])
    yield CounterMetricFamily("hostctl_mlcc_recoveries", "Changes back to switch mode", value=ml["recoveries"])
    yield CounterMetricFamily("hostctl_mlcc_late_publishes", "Schedules published after their slot had ended "
                              "(sent from the current slot on)", value=ml.get("late_publishes", 0))
    h = _histogram("hostctl_mlcc_negotiation_seconds", "Round trip of one slot's fetch from the switches",
                   ml.get("negotiation_seconds"))
    if h is not None:
        yield h
    yield from _per_endpoint("hostctl_mlcc_switch_wire_version", "Wire version spoken to each switch endpoint (below "
                             "the newest: an older switchemu)", ml.get("wire_versions"))
    yield from _per_endpoint("hostctl_mlcc_switch_clock_offset_seconds", "Each switch's clock minus this host's, "
                             "measured from its last reply (beyond the switch's --max-skew-ms it "
                             "refuses this host's slots)", ml.get("switch_clock_offset_ms"), 1e-3)
    yield from _per_endpoint("hostctl_mlcc_switch_silent_slots", "Slots in a row each switch endpoint did not "
                             "answer (late or refused answers count as silence)", ml.get("switch_silent_slots"))
    err = CounterMetricFamily("hostctl_mlcc_switch_errors", "Error replies from the switches, by code", labels=["code"])
    for code, n in sorted(ml.get("errors", {}).items()):
        err.add_metric([code], n)
    yield err
    deps = ml.get("deps")
    if deps:
        yield GaugeMetricFamily("hostctl_mlcc_dep_flows", "Flows with an Algorithm 2 role (ps or ring job, switch "
                                "mode)", value=deps.get("flows", 0))
        for key, what in (("notifications_sent", "Algorithm 2 notifications sent to receivers"),
                          ("notifications_received", "Algorithm 2 notifications received"),
                          ("delta_flows", "Flow slots raised by Algorithm 2's Delta"),
                          ("reduced_flows", "Flow slots whose published plan a received notification lowered"),
                          ("held_flows", "Flow slots paced below their plan by a received notification"),
                          ("progress_missing", "Flow slots planned without Delta: a peer's progress was missing")):
            yield CounterMetricFamily(f"hostctl_mlcc_{key}", what, value=deps.get(key, 0))
    planned = GaugeMetricFamily("hostctl_mlcc_job_planned_bytes_per_second",
                                "Sum of the rates planned for the job's flows in the current slot", labels=["job"])
    for job, v in sorted(_per_job(flows, lambda f: f["plan"]["schedule_Bps"][0]
                                  if f.get("plan") and f["plan"]["schedule_Bps"] else None).items()):
        planned.add_metric([job], v)
    delta = GaugeMetricFamily("hostctl_mlcc_job_delta_bytes_per_second",
                              "Sum of Algorithm 2's increases of the job's flows' rates this slot", labels=["job"])
    for job, v in sorted(_per_job(flows, lambda f: f["plan"].get("delta_Bps", 0)
                                  if f.get("plan") and f["plan"].get("role") is not None else None).items()):
        delta.add_metric([job], v)
    held = GaugeMetricFamily("hostctl_mlcc_job_held_flows", "The job's flows paced below their plan this slot by a "
                             "receiver's notification (Algorithm 2, switch mode)", labels=["job"])
    for job, v in sorted(_per_job(flows, lambda f: 1 if f.get("plan") and f["plan"].get("held") else 0
                                  if f.get("plan") and f["plan"].get("role") is not None else None).items()):
        held.add_metric([job], v)
    yield from (planned, delta, held)


def serve(port: int, status: Callable[[], dict], addr: str = "127.0.0.1", version: str | None = None):
    from prometheus_client import start_http_server

    reg = CollectorRegistry()
    reg.register(StatusCollector(status, version))
    return start_http_server(port, addr=addr, registry=reg)
