"""Restoring a previous htb tree byte-exactly; Prometheus metrics from a live daemon."""

from __future__ import annotations


import pytest

from tests import oracle
from tests.conftest import PY
from tests.integration.test_tl_netns import start_daemon, start_servers
from tests.unit.test_metrics_names import assert_conventions

pytestmark = [pytest.mark.root, pytest.mark.netns]


@pytest.mark.bpf
def test_previous_htb_tree_with_child_qdisc_comes_back(pair):
    ns, dev = pair.ps.ns, pair.ps.dev
    run = pair.ps.run
    run("tc", "qdisc", "add", "dev", dev, "root", "handle", "1:", "htb", "default", "20")
    run("tc", "class", "add", "dev", dev, "parent", "1:", "classid", "1:1", "htb", "rate", "80mbit")
    run("tc", "class", "add", "dev", dev, "parent", "1:1", "classid", "1:20", "htb", "rate", "30mbit",
        "ceil", "80mbit", "prio", "3")
    run("tc", "qdisc", "add", "dev", dev, "parent", "1:20", "handle", "20:", "pfifo", "limit", "77")
    before_q = oracle.qdiscs(ns, dev)
    before_c = oracle.htb_classes(ns, dev)
    start_servers(pair)
    d, _ = start_daemon(pair, "one")
    assert oracle.root_qdisc(ns, dev)["handle"] == "6863:"
    assert pair.ps.hostctl("stop").returncode == 0
    d.wait(10)
    assert oracle.qdiscs(ns, dev) == before_q
    assert oracle.htb_classes(ns, dev) == before_c


def test_fifo_needs_no_bpf_and_metrics_are_served(pair):
    start_servers(pair)
    d, st = start_daemon(pair, "fifo", "--metrics-port", "19477")
    assert all(j["band"] is None for j in st["jobs"])
    assert oracle.filters(pair.ps.ns, pair.ps.dev, "6863:") == []  # fifo: no classifier at all
    body = pair.ps.run(PY, "-c", "import urllib.request;print(urllib.request.urlopen("
                       "'http://127.0.0.1:19477/metrics', timeout=5).read().decode())").stdout
    assert 'hostctl_job_band{job="ps:10.77.0.1:5201"} -1.0' in body
    assert "hostctl_class_bytes_total" in body and "hostctl_rotations_total 0.0" in body
    fams = assert_conventions(body)  # parsed with prometheus_client's parser: base units, _total, no per-flow
    from importlib.metadata import version

    assert fams["hostctl_build_info"].samples[0].labels == {"version": version("hostctl")}
    assert pair.ps.hostctl("stop").returncode == 0
    d.wait(10)
