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
        stats = st.get("stats", {})
        yield from (band, txb, rate, burst, cb, cd, cr)
        yield CounterMetricFamily("hostctl_rotations", "Priority rotations (policy rr)", value=stats.get("rotations", 0))
        yield CounterMetricFamily("hostctl_reassignments", "Band reassignments on job arrival/departure", value=stats.get("reassignments", 0))
        yield CounterMetricFamily("hostctl_errors", "Errors (discovery, map writes, counters)", value=stats.get("errors", 0))
        yield CounterMetricFamily("hostctl_failopen_packets", "Packets left unclassified because the daemon's lease expired", value=st.get("failopen_pkts", 0))
        yield GaugeMetricFamily("hostctl_jobs", "DL jobs found on this host", value=len(st.get("jobs", [])))


def serve(port: int, status: Callable[[], dict], addr: str = "127.0.0.1"):
    from prometheus_client import start_http_server

    reg = CollectorRegistry()
    reg.register(StatusCollector(status))
    return start_http_server(port, addr=addr, registry=reg)
