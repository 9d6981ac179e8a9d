"""Prometheus metrics (``--metrics-port``), read from the daemon's last status."""

from __future__ import annotations

from collections.abc import Callable

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily
from prometheus_client.registry import CollectorRegistry


class StatusCollector:
    def __init__(self, status: Callable[[], dict]):
        self.status = status

    def collect(self):
        st = self.status()
        band = GaugeMetricFamily("hostctl_job_band", "Priority band of the job (0 = highest; -1 = default class)", labels=["job"])
        txb = CounterMetricFamily("hostctl_job_tx_bytes", "Egress bytes of the job on this host", labels=["job"])
        rate = GaugeMetricFamily("hostctl_job_rate_bps", "Egress rate of the job over the last scan, bits/s", labels=["job"])
        burst = GaugeMetricFamily("hostctl_job_last_burst_bytes", "Size of the job's last completed burst, bytes", labels=["job"])
        for j in st.get("jobs", []):
            band.add_metric([j["job_id"]], -1 if j["band"] is None else j["band"])
            txb.add_metric([j["job_id"]], j["tx_bytes"])
            rate.add_metric([j["job_id"]], j["rate_bps"])
            burst.add_metric([j["job_id"]], j["last_burst_bytes"])
        cb = CounterMetricFamily("hostctl_class_bytes", "Bytes sent through the htb class", labels=["classid", "name"])
        cd = CounterMetricFamily("hostctl_class_drops", "Packets dropped in the htb class", labels=["classid", "name"])
        cr = GaugeMetricFamily("hostctl_class_rate_bps", "Rate of the htb class over the last scan, bits/s", labels=["classid", "name"])
        for c in st.get("classes", []):
            cb.add_metric([c["classid"], c["name"]], c["bytes"])
            cd.add_metric([c["classid"], c["name"]], c["drops"])
            cr.add_metric([c["classid"], c["name"]], c["rate_bps"])
        ib = CounterMetricFamily("hostctl_ingress_class_bytes", "Bytes received through the ingress bands' htb class",
                                 labels=["classid", "name"])
        idr = CounterMetricFamily("hostctl_ingress_class_drops", "Received packets dropped in the ingress bands' htb class",
                                  labels=["classid", "name"])
        for c in st.get("ingress_classes", []):
            ib.add_metric([c["classid"], c["name"]], c["bytes"])
            idr.add_metric([c["classid"], c["name"]], c["drops"])
        stats = st.get("stats", {})
        yield from (band, txb, rate, burst, cb, cd, cr)
        if st.get("ingress_classes"):
            yield from (ib, idr)
        yield CounterMetricFamily("hostctl_rotations", "Priority rotations (policy rr)", value=stats.get("rotations", 0))
        yield CounterMetricFamily("hostctl_reassignments", "Band reassignments on job arrival/departure", value=stats.get("reassignments", 0))
        yield CounterMetricFamily("hostctl_errors", "Errors (discovery, map writes, counters)", value=stats.get("errors", 0))
        yield CounterMetricFamily("hostctl_failopen_packets", "Packets left unclassified because the daemon's lease expired", value=st.get("failopen_pkts", 0))
        yield GaugeMetricFamily("hostctl_jobs", "DL jobs found on this host", value=len(st.get("jobs", [])))
        pc = st.get("pacing")
        if pc:
            yield from _pacing_metrics(pc, stats)


def _pacing_metrics(pc: dict, stats: dict):
    target = GaugeMetricFamily("hostctl_flow_target_bps", "Pacing rate the daemon asks for, bits/s", labels=["flow", "job"])
    rate = GaugeMetricFamily("hostctl_flow_rate_bps", "Measured rate over the last slot, bits/s", labels=["flow", "job"])
    iters = CounterMetricFamily("hostctl_flow_iterations", "Completed iterations seen on the flow", labels=["flow", "job"])
    for f in pc.get("flows", []):
        lab = [f["flow"], f["job"] or ""]
        if f["target_bps"] is not None:
            target.add_metric(lab, f["target_bps"])
        rate.add_metric(lab, f["rate_bps"])
        iters.add_metric(lab, f["iterations"])
    yield from (target, rate, iters)
    yield CounterMetricFamily("hostctl_slots", "Pacing slots run", value=stats.get("slots", 0))
    yield CounterMetricFamily("hostctl_pacing_burst_records", "Burst records read from the kernel",
                              value=pc.get("burst_records", 0))
    yield CounterMetricFamily("hostctl_slot_overruns", "Pacing slots whose work overran the slot", value=stats.get("slot_overruns", 0))
    if pc.get("tick_ms_p90") is not None:
        yield GaugeMetricFamily("hostctl_slot_decision_p90_ms", "p90 time of one slot's work (last 200), ms", value=pc["tick_ms_p90"])
    k = pc.get("kernel", {})
    yield CounterMetricFamily("hostctl_pacing_flows_not_tracked", "Selected flows left alone because the flow map was full", value=k.get("flows_full", 0))
    yield CounterMetricFamily("hostctl_pacing_failopen_events", "Flow rates restored because the lease expired or on release", value=k.get("failopen_events", 0))
    yield CounterMetricFamily("hostctl_pacing_setsockopt_errors", "Failed bpf_setsockopt calls", value=k.get("setopt_errors", 0))
    ml = pc.get("mlcc")
    if ml:
        yield from _mlcc_metrics(ml, pc)


def _mlcc_metrics(ml: dict, pc: dict):
    mode = GaugeMetricFamily("hostctl_mlcc_switch_mode", "1: planning with switchemu feedback, 0: local mode")
    mode.add_metric([], 1 if ml["mode"] == "switch" else 0)
    yield mode
    yield CounterMetricFamily("hostctl_mlcc_fallbacks", "Changes to local mode (switches silent 3 slots)", value=ml["fallbacks"])
    yield CounterMetricFamily("hostctl_mlcc_recoveries", "Changes back to switch mode", value=ml["recoveries"])
    yield CounterMetricFamily("hostctl_mlcc_late_publishes", "Schedules published after their slot had ended "
                              "(sent from the current slot on)", value=ml.get("late_publishes", 0))
    for q in ("p50", "p90"):
        v = ml.get(f"negotiation_ms_{q}")
        if v is not None:
            yield GaugeMetricFamily(f"hostctl_mlcc_negotiation_{q}_ms", f"{q} switch fetch round trip (last 200 slots), ms", value=v)
    wv = ml.get("wire_versions")
    if wv:
        g = GaugeMetricFamily("hostctl_mlcc_switch_wire_version", "Wire version spoken to each switch endpoint (below "
                              "the newest: an older switchemu)", labels=["endpoint"])
        for ep, v in sorted(wv.items()):
            g.add_metric([ep], v)
        yield g
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
                          ("reduced_flows", "Flow slots held back by a received notification"),
                          ("progress_missing", "Flow slots planned without Delta: a peer's progress was missing")):
            yield CounterMetricFamily(f"hostctl_mlcc_{key}", what, value=deps.get(key, 0))
    plan = GaugeMetricFamily("hostctl_flow_plan_bps", "Planned rate of a flow per future slot, bits/s",
                             labels=["flow", "job", "slot"])
    delta = GaugeMetricFamily("hostctl_flow_delta_bps", "Algorithm 2's increase of the flow's rate this slot, "
                              "bits/s", labels=["flow", "job", "role"])
    kept = GaugeMetricFamily("hostctl_flow_kept_ratio", "Share of its reservations the flow has been using (switch "
                             "mode: its published schedule is scaled by it)", labels=["flow", "job"])
    for f in pc.get("flows", []):
        p = f.get("plan")
        if p:
            for k, r in enumerate(p["schedule_Bps"]):
                plan.add_metric([f["flow"], f["job"] or "", str(k)], r * 8)
            if p.get("kept") is not None:
                kept.add_metric([f["flow"], f["job"] or ""], p["kept"])
            if p.get("role") is not None:
                delta.add_metric([f["flow"], f["job"] or "", p["role"]], p.get("delta_Bps", 0) * 8)
    yield plan
    yield kept
    yield delta


def serve(port: int, status: Callable[[], dict], addr: str = "127.0.0.1"):
    from prometheus_client import start_http_server

    reg = CollectorRegistry()
    reg.register(StatusCollector(status))
    return start_http_server(port, addr=addr, registry=reg)
