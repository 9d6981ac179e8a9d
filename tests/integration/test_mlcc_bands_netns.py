"""`hostctl start --policy mlcc-bands` (the hybrid of MLCC and TensorLights) on real veths, cgroups, TCP
and a real switchemu: one daemon sets up both the htb band tree with the BPF classifier (policy one's
datapath) and the sock_ops pacer (policy mlcc's), the bands follow MLCC's fabric job order (the order
the planner reports, not one's id or size order), the planner's rates are written and hold the flows
to the switch's link in that order, and stop puts the interface's previous qdisc back exactly and
releases the pacer.

The switch's topology gives the receiver's port 60 Mbit/s while the NIC link is 1 Gbit/s (the veth is
not shaped): only the planner's rates, applied by the pacer, can give the first job the 60 Mbit/s and
hold the second at the planner's wait floor."""

from __future__ import annotations

import json
import signal
import subprocess
import time

import pytest

from hostctl.core.bands import priority_order
from hostctl.core.joborder import fabric_order
from hostctl.core.mlcchost import wait_floor_Bps
from hostctl.datapath import pacer
from tests import oracle
from tests.conftest import HOSTCTL, wait_for
from tests.integration.test_mlcc_daemon import start_switch
from tests.integration.test_pacing_daemon import assert_released, attached, mbit, recv, serve, status

pytestmark = [pytest.mark.root, pytest.mark.netns, pytest.mark.bpf]

TOPO = """
[[switch]]
name = "sw0"
hosts = ["ps=10.77.0.1", "wk=10.77.0.2"]
host_rate = "60mbit"
"""
JOBS = {"hybrid-a": 5401, "hybrid-b": 5402}  # fabric order: hybrid-b first (one would put hybrid-a first)


def hybrid_config(tmp_path):
    """The daemons' config: the two jobs by port. The jobs are bulk streams, not iterations: a phase_gap
    of 1 s keeps a stall of the sender under CPU load from reading as an iteration end (the monitor would
    learn an estimate that the stream then overruns, and the planner would plan the first job's stream
    idle, at its path's headroom: docs/mlcc.md)."""
    cfg = tmp_path / "hostctl-hybrid.toml"
    cfg.write_text("phase_gap = 1.0\n" + "".join(f'[[jobs]]\nname = "{n}"\nports = [{p}]\n'
                                                  for n, p in JOBS.items()))
    return cfg


def test_bands_in_mlccs_order_and_the_pacer_together_and_stop_restores(pair, cgroup, tmp_path):
    ns, dev = pair.ps.ns, pair.ps.dev
    order = fabric_order(JOBS, "fixed")
    assert order != priority_order(dict.fromkeys(JOBS), "one")  # the test tells the two orders apart
    pair.ps.run("tc", "qdisc", "add", "dev", dev, "root", "handle", "5:", "tbf", "rate", "900mbit",
                "burst", "256kb", "latency", "50ms")
    before = oracle.qdiscs(ns, dev)
    topo = tmp_path / "topo.toml"
    topo.write_text(TOPO)
    ep = f"ipc://{tmp_path}/hybrid-sw.sock"
    start_switch(pair, str(topo), ep)
    cfg = hybrid_config(tmp_path)
    for port in JOBS.values():
        serve(pair, pair.ps, cgroup, port)
    args = ["--policy", "mlcc-bands", "--switch", ep, "--config", str(cfg), "--iface", dev, "--link-rate", "1gbit",
            "--cgroup", cgroup, "--rescan", "0.5"]

    # --dry-run prints the plan (bands in MLCC's order, classifier, pacer) and touches nothing
    dry = wait_for(lambda: (r := pair.ps.hostctl("start", "--dry-run", *args, check=True))
                   and len((out := json.loads(r.stdout))["assignment"]) == 2 and out, 10, 0.2, "dry run with both jobs")
    assert sorted(dry["assignment"], key=dry["assignment"].get) == order and dry["band_order"] == "fixed"
    assert dry["plan"]["classify"] and dry["classifier"] and dry["pacing"]["cgroup"] == cgroup
    assert dry["pacing"]["mlcc"]["mode"] == "switch" and dry["pacing"]["mlcc"]["job_order"] == "fixed"
    assert oracle.qdiscs(ns, dev) == before

    d = subprocess.Popen(pair.ps.nsenter(HOSTCTL, "start", *args), stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                         text=True)
    pair.procs.append(d)

    def now() -> dict:
        if d.poll() is not None:
            raise AssertionError(f"daemon exited: {d.stderr.read()}")
        r = pair.ps.hostctl("status", "--json")
        return json.loads(r.stdout) if r.returncode == 0 else {}

    st = wait_for(lambda: (s := now()).get("pacing") and len(s["jobs"]) == 2
                  and all(j["band"] is not None for j in s["jobs"]) and s, 30, 0.2, "daemon ready with two bands")
    assert st["policy"] == "mlcc-bands" and st["band_order"] == "fixed"
    assert {j["job_id"]: j["band"] for j in st["jobs"]} == {job: band for band, job in enumerate(order)}

    # both datapaths in the kernel: htb root, band classes and tl_classify on the NIC; hc_pace on the cgroup
    root = oracle.root_qdisc(ns, dev)
    assert root["kind"] == "htb" and root["handle"] == "6863:"
    classes = oracle.htb_classes(ns, dev)
    assert classes["6863:20"]["prio"] == 0 and classes["6863:21"]["prio"] == 1
    (f,) = oracle.filters(ns, dev, "6863:")
    assert f["kind"] == "bpf" and f["options"]["bpf_name"] == "tl_classify"
    assert len(attached(cgroup)) == 1

    # traffic: the receivers connect once the daemon paces (port selectors pick flows at connect)
    start = oracle.class_bytes(ns, dev)
    rxs = {job: recv(pair, pair.wk, pair.ps, port, 6) for job, port in JOBS.items()}
    st = wait_for(lambda: (s := now()) and len(s["pacing"]["flows"]) == 2
                  and all(fl["plan"] and fl["applied_bps"] for fl in s["pacing"]["flows"]) and s, 15, 0.2,
                  "both flows planned and paced")
    ml = st["pacing"]["mlcc"]
    assert ml["mode"] == "switch" and ml["job_order"]["jobs"] == order  # the planner's order is the bands'
    assert all(fl["plan"]["links"] == ["nic", "sw0>wk"] for fl in st["pacing"]["flows"])
    text = " ".join(pair.ps.hostctl("status", check=True).stdout.split())
    assert "policy mlcc-bands" in text and "bands in mlcc's job order (fixed)" in text
    assert f"job order (fixed): {' > '.join(order)}" in text
    got = {}
    for job, rx in rxs.items():
        out, err = rx.communicate(timeout=60)
        assert rx.returncode == 0, err
        got[job] = mbit(json.loads(out), 1.5, 5.5)
    sent = {c: b - start.get(c, 0) for c, b in oracle.class_bytes(ns, dev).items()}
    print(f"mlcc-bands: {order[0]} (band 0) {got[order[0]]:.1f}, {order[1]} (band 1) {got[order[1]]:.1f} Mbit/s; "
          f"class bytes band0 {sent.get('6863:20', 0)}, band1 {sent.get('6863:21', 0)}, "
          f"default {sent.get('6863:10', 0)}")
    # each job's data went through its band's class: the classifier acts
    assert sent["6863:20"] > 1_000_000 and sent["6863:21"] > 100_000
    assert sent["6863:10"] < 0.05 * (sent["6863:20"] + sent["6863:21"])
    # and the pacer applies the ordered plan on the switch's 60 Mbit/s link (the NIC link would allow
    # 1 Gbit/s): the first job in the order gets the link, the second waits at the planner's wait floor
    # (one 64 KiB packet per slot, 8.7 Mbit/s at 60 ms: held, never stopped)
    floor = wait_floor_Bps(0.06) * 8 / 1e6
    assert got[order[0]] == pytest.approx(60, rel=0.1), got
    assert 0.5 * floor <= got[order[1]] <= 1.3 * floor, got

    scope = pacer.scope_id(cgroup)
    r = pair.ps.hostctl("stop")
    assert r.returncode == 0, r.stderr
    d.wait(10)
    assert d.returncode == 0, d.stderr.read()
    assert oracle.qdiscs(ns, dev) == before  # the tbf is back with the same parameters
    assert_released(cgroup, scope)


def test_local_mode_kill_9_then_clean_restores_the_qdisc_and_releases_the_pacer(pair, cgroup, tmp_path):
    """Without --switch: the planner plans this host's NIC link only (local mode), the bands keep the fabric
    order; after kill -9 both programs are still in place (the classifier and the pacer fail open after
    their lease), and `hostctl clean` removes both and puts the previous qdisc back."""
    ns, dev = pair.ps.ns, pair.ps.dev
    order = fabric_order(JOBS, "fixed")
    pair.ps.run("tc", "qdisc", "add", "dev", dev, "root", "handle", "7:", "tbf", "rate", "300mbit",
                "burst", "64kb", "latency", "50ms")
    before = oracle.qdiscs(ns, dev)
    cfg = hybrid_config(tmp_path)
    for port in JOBS.values():
        serve(pair, pair.ps, cgroup, port)
    d = subprocess.Popen(pair.ps.nsenter(HOSTCTL, "start", "--policy", "mlcc-bands", "--config", str(cfg),
                                         "--iface", dev, "--link-rate", "200mbit", "--cgroup", cgroup,
                                         "--rescan", "0.5"),
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    pair.procs.append(d)
    wait_for(lambda: d.poll() is None and pair.ps.hostctl("status", "--json").returncode == 0
             and len((s := status(pair.ps))["jobs"]) == 2 and all(j["band"] is not None for j in s["jobs"]),
             30, 0.2, "daemon ready with two bands")
    rxs = {job: recv(pair, pair.wk, pair.ps, port, 6) for job, port in JOBS.items()}
    # Both flows are planned; the band-0 flow is paced. The band-1 flow may never send a byte while band 0
    # is backlogged (strict priority between bulk senders), so it may have no measured rate to pace.
    st = wait_for(lambda: (s := status(pair.ps)) and len(s["pacing"]["flows"]) == 2
                  and all(fl["plan"] for fl in s["pacing"]["flows"])
                  and any(fl["job"] == order[0] and fl["applied_bps"] for fl in s["pacing"]["flows"]) and s,
                  15, 0.2, "both flows planned and the band-0 flow paced")
    assert st["pacing"]["mlcc"]["mode"] == "local" and not st["pacing"]["mlcc"]["switch"]
    assert {j["job_id"]: j["band"] for j in st["jobs"]} == {job: band for band, job in enumerate(order)}
    assert all(fl["plan"]["links"] == ["nic"] for fl in st["pacing"]["flows"])
    flows = {fl["job"]: fl for fl in st["pacing"]["flows"]}
    time.sleep(2.0)
    got = {}
    d.send_signal(signal.SIGKILL)
    d.wait(5)
    for job, rx in rxs.items():
        out, err = rx.communicate(timeout=60)
        assert rx.returncode == 0, err
        got[job] = mbit(json.loads(out), 1.5, 3.5)
    paced = {j: f"{fl['applied_bps'] / 1e6:.1f}" if fl["applied_bps"] else "not paced" for j, fl in flows.items()}
    print(f"mlcc-bands local mode, 200 Mbit/s link: {order[0]} (band 0) {got[order[0]]:.1f} Mbit/s, paced at "
          f"{paced[order[0]]}; {order[1]} (band 1) {got[order[1]]:.1f} Mbit/s, paced at {paced[order[1]]}")
    assert sum(got.values()) == pytest.approx(200, rel=0.1), got  # work-conserving on the htb link

    # kill -9 left the tree, the classifier and the pacer in place; clean removes them all
    scope = pacer.scope_id(cgroup)
    assert oracle.root_qdisc(ns, dev)["handle"] == "6863:" and attached(cgroup)
    out = pair.ps.hostctl("clean", check=True).stdout
    assert f"pacer {scope}" in out and f"{dev}: restored tbf 7:" in out
    assert oracle.qdiscs(ns, dev) == before
    assert_released(cgroup, scope)
