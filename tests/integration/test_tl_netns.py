"""TensorLights on real veths in namespaces: kernel state, precedence measured with
real TCP traffic, rotation, stop / kill -9 + clean restoring the interface."""

from __future__ import annotations

import json
import signal
import time
import uuid

import pytest

from tests import oracle
from tests.conftest import HOSTCTL, PY, Host, remove_netns, sh, wait_for

pytestmark = [pytest.mark.root, pytest.mark.netns, pytest.mark.bpf]

LINK = "200mbit"
LINK_BPS = 200_000_000
PORTS = (5201, 5202)


def start_daemon(pair, policy, *extra):
    d = pair.start(pair.ps, HOSTCTL, "start", "--policy", policy, "--iface", pair.ps.dev, "--link-rate", LINK,
                   "--ports", ",".join(map(str, PORTS)), "--rescan", "0.5", *extra)

    def ready():
        if d.poll() is not None:
            raise AssertionError(f"daemon exited: {d.stderr.read()}")
        r = pair.ps.hostctl("status", "--json")
        if r.returncode != 0:
            return None
        st = json.loads(r.stdout)
        want_bands = policy != "fifo"
        if len(st["jobs"]) == len(PORTS) and all((j["band"] is not None) == want_bands for j in st["jobs"]):
            return st
        return None

    return d, wait_for(ready, 30, 0.2, "daemon ready with both jobs")


def start_servers(pair, sinks=()):
    """A bulk server on each of PORTS on ps: it sends, or receives for the ports in sinks."""
    for port in PORTS:
        pair.start(pair.ps, PY, "-m", "hostctl_lab.tools.bulk", "serve", *(["--sink"] if port in sinks else []),
                   "--bind", pair.ps.addr, "--port", str(port))
    for port in PORTS:
        wait_for(lambda: pair.wk.run("bash", "-c", f"echo > /dev/tcp/{pair.ps.addr}/{port}", check=False).returncode == 0,
                 10, 0.1, f"server on {port}")


def recv(pair, port, seconds):
    return pair.start(pair.wk, PY, "-m", "hostctl_lab.tools.bulk", "recv", "--connect", f"{pair.ps.addr}:{port}",
                      "--seconds", str(seconds), "--bucket", "0.1")


def result(p):
    out, err = p.communicate(timeout=60)
    assert p.returncode == 0, err
    return json.loads(out)


def window_bytes(res, t0, t1):
    """Bytes received in the wall-clock window [t0, t1) (whole 100 ms buckets)."""
    return sum(b for i, b in enumerate(res["bytes"])
               if t0 <= res["start"] + i * res["bucket_s"] and res["start"] + (i + 1) * res["bucket_s"] <= t1)


def test_plan_matches_kernel_and_stop_restores_tbf(pair):
    ns, dev = pair.ps.ns, pair.ps.dev
    pair.ps.run("tc", "qdisc", "add", "dev", dev, "root", "handle", "5:", "tbf", "rate", "300mbit",
                "burst", "64kb", "latency", "50ms")
    before = oracle.qdiscs(ns, dev)
    start_servers(pair)
    plan = json.loads(pair.ps.hostctl("start", "--dry-run", "--policy", "one", "--iface", dev, "--link-rate", LINK,
                                      "--ports", "5201,5202", check=True).stdout)["plan"]
    assert oracle.qdiscs(ns, dev) == before  # dry run touched nothing
    d, _ = start_daemon(pair, "one")
    root = oracle.root_qdisc(ns, dev)
    assert root["kind"] == "htb" and root["handle"] == "6863:" and root["options"]["default"] == "0x10"
    kernel = oracle.htb_classes(ns, dev)
    assert set(kernel) == {c["classid"] for c in plan["classes"]}
    for c in plan["classes"]:
        k = kernel[c["classid"]]
        assert k["prio"] == c["prio"] or c["name"] == "root"
        assert abs(k["rate_bps"] - c["rate_bps"]) <= c["rate_bps"] * 0.01
        assert abs(k["ceil_bps"] - c["ceil_bps"]) <= c["ceil_bps"] * 0.01
        if c["name"] != "root":
            assert k["parent"] == "6863:1" and k["quantum"] == c["quantum_bytes"]
    f = oracle.filters(ns, dev, "6863:")
    assert len(f) == 1 and f[0]["kind"] == "bpf" and f[0]["options"]["bpf_name"] == "tl_classify"
    r = pair.ps.hostctl("stop")
    assert r.returncode == 0, r.stderr
    d.wait(10)
    assert d.returncode == 0, d.stderr.read()
    assert oracle.qdiscs(ns, dev) == before  # the tbf is back with the same parameters
    assert "stopped" in r.stdout


def test_one_strict_priority_and_work_conservation(pair):
    start_servers(pair)
    _, st = start_daemon(pair, "one")
    leader_port = min(PORTS)  # equal (unknown) sizes: order by job id, ps:10.77.0.1:5201 first
    assert {j["job_id"]: j["band"] for j in st["jobs"]} == {f"ps:10.77.0.1:{p}": i for i, p in enumerate(PORTS)}
    low = recv(pair, PORTS[1], 9)
    time.sleep(0.5)
    high = recv(pair, leader_port, 4)
    hi, lo = result(high), result(low)
    t_both0, t_both1 = hi["start"] + 1.0, hi["start"] + 4.0
    h, l = window_bytes(hi, t_both0, t_both1), window_bytes(lo, t_both0, t_both1)
    assert h / (h + l) >= 0.90, f"leader share {h / (h + l):.2f}"
    t_alone0, t_alone1 = hi["start"] + 5.0, lo["start"] + 9.0
    alone_bps = window_bytes(lo, t_alone0, t_alone1) * 8 / (t_alone1 - t_alone0)
    assert alone_bps >= 0.90 * LINK_BPS, f"alone: {alone_bps / 1e6:.0f} Mbit/s"


def test_rr_leader_changes_every_interval(pair):
    from hostctl.core.bands import priority_order

    start_servers(pair)
    start_daemon(pair, "rr", "--rr-interval", "2")
    ids = {p: f"ps:10.77.0.1:{p}" for p in PORTS}
    procs = {p: recv(pair, p, 11) for p in PORTS}
    res = {p: result(q) for p, q in procs.items()}
    start = max(r["start"] for r in res.values())
    first_epoch = int(start // 2) + 1
    leaders = []
    for e in range(first_epoch, first_epoch + 4):
        t0, t1 = e * 2 + 0.3, e * 2 + 2.0  # skip the first 300 ms after the switch
        b = {p: window_bytes(res[p], t0, t1) for p in PORTS}
        lead = max(b, key=b.get)
        share = b[lead] / sum(b.values())
        expected = priority_order({ids[p]: None for p in PORTS}, "rr", e)[0]
        assert ids[lead] == expected, f"epoch {e}: leader {ids[lead]}, expected {expected}, bytes {b}"
        assert share >= 0.85, f"epoch {e}: leader share {share:.2f}"
        leaders.append(lead)
    assert all(a != b for a, b in zip(leaders, leaders[1:]))


def test_kill9_fails_open_and_clean_restores(pair):
    ns, dev = pair.ps.ns, pair.ps.dev
    pair.ps.run("tc", "qdisc", "add", "dev", dev, "root", "handle", "7:", "tbf", "rate", "250mbit",
                "burst", "32kb", "latency", "40ms")
    before = oracle.qdiscs(ns, dev)
    start_servers(pair)
    d, _ = start_daemon(pair, "one", "--lease", "1")
    d.send_signal(signal.SIGKILL)
    d.wait(5)
    assert oracle.root_qdisc(ns, dev)["handle"] == "6863:"  # left behind by the crash
    time.sleep(1.5)  # lease expired: the classifier must no longer prioritise anyone
    before_bytes = oracle.class_bytes(ns, dev)
    procs = {p: recv(pair, p, 3) for p in PORTS}
    res = {p: result(q) for p, q in procs.items()}
    after_bytes = oracle.class_bytes(ns, dev)
    delta = {c: after_bytes[c] - before_bytes.get(c, 0) for c in after_bytes}
    # every packet now goes to the default class: no job is in a band (prioritised or demoted)
    assert all(delta[f"6863:2{b}"] == 0 for b in range(6)), delta
    assert delta["6863:10"] >= 0.9 * sum(r["total_bytes"] for r in res.values()), delta
    assert all(r["total_bytes"] > 0 for r in res.values())
    r = pair.ps.hostctl("clean")
    assert r.returncode == 0, r.stderr
    assert "restored tbf 7:0" in r.stdout
    assert oracle.qdiscs(ns, dev) == before
    r2 = pair.ps.hostctl("clean")
    assert r2.returncode == 0 and oracle.qdiscs(ns, dev) == before  # idempotent


def test_restart_after_crash_recovers_journal(pair):
    """A new daemon after kill -9 restores the pre-crash qdisc on its own stop."""
    ns, dev = pair.ps.ns, pair.ps.dev
    before = oracle.qdiscs(ns, dev)  # kernel default (noqueue)
    start_servers(pair)
    d, _ = start_daemon(pair, "one")
    d.kill()
    d.wait(5)
    d2, _ = start_daemon(pair, "rr")
    assert pair.ps.hostctl("stop").returncode == 0
    d2.wait(10)
    assert oracle.qdiscs(ns, dev) == before


def test_two_daemons_in_two_namespaces_do_not_interfere(pair):
    start_servers(pair)
    # a daemon on each side of the veth, each in its own namespace
    d1, _ = start_daemon(pair, "one")
    d2 = pair.start(pair.wk, HOSTCTL, "start", "--policy", "rr", "--iface", pair.wk.dev, "--link-rate", LINK,
                    "--ports", "6000")
    wait_for(lambda: pair.wk.hostctl("status", "--json").returncode == 0, 30, 0.2, "second daemon")
    s1 = json.loads(pair.ps.hostctl("status", "--json").stdout)
    s2 = json.loads(pair.wk.hostctl("status", "--json").stdout)
    assert s1["pid"] != s2["pid"] and s1["iface"] == pair.ps.dev and s2["iface"] == pair.wk.dev
    assert pair.wk.hostctl("stop").returncode == 0
    d2.wait(10)
    assert pair.ps.hostctl("status", "--json").returncode == 0  # the first one is untouched
    assert oracle.root_qdisc(pair.ps.ns, pair.ps.dev)["handle"] == "6863:"
    assert oracle.root_qdisc(pair.wk.ns, pair.wk.dev)["kind"] == "noqueue"
    assert pair.ps.hostctl("stop").returncode == 0
    d1.wait(10)


def test_second_daemon_in_same_namespace_is_refused(pair):
    start_servers(pair)
    start_daemon(pair, "one")
    r = pair.ps.run(HOSTCTL, "start", "--policy", "one", "--iface", pair.ps.dev, "--link-rate", LINK,
                    "--ports", "7000", check=False, timeout=30)
    assert r.returncode != 0 and "already runs" in r.stderr and "Traceback" not in r.stderr
    assert oracle.root_qdisc(pair.ps.ns, pair.ps.dev)["handle"] == "6863:"


def test_pure_acks_of_non_dl_flows_go_to_the_control_class(pair):
    """ps receives a non-DL bulk flow (port 5999, no job) while the daemon runs `one`: the pure ACKs
    ps sends back go to the control class 6863:11 (prio 0), not behind bulk data in the default class;
    the data ps sends on its DL ports still goes to the bands."""
    ns, dev = pair.ps.ns, pair.ps.dev
    start_servers(pair)
    pair.start(pair.ps, PY, "-m", "hostctl_lab.tools.bulk", "serve", "--sink", "--bind", pair.ps.addr, "--port", "5999")
    wait_for(lambda: pair.wk.run("bash", "-c", f"echo > /dev/tcp/{pair.ps.addr}/5999", check=False).returncode == 0,
             10, 0.1, "sink on 5999")
    start_daemon(pair, "one")
    before = oracle.class_bytes(ns, dev)
    up = pair.start(pair.wk, PY, "-m", "hostctl_lab.tools.bulk", "send", "--connect", f"{pair.ps.addr}:5999",
                    "--seconds", "2", "--bucket", "0.1")
    dl = recv(pair, PORTS[0], 2)
    sent, got = result(up), result(dl)
    after = oracle.class_bytes(ns, dev)
    delta = {c: after[c] - before.get(c, 0) for c in after}
    assert sent["total_bytes"] > 10**7, sent
    assert delta["6863:11"] >= 10**5, delta  # the ACKs (fewer than one per segment: GRO coalesces)
    assert delta["6863:11"] < 0.05 * sent["total_bytes"], delta  # only ACKs, no data
    assert delta["6863:10"] < 0.01 * delta["6863:11"], delta  # not in the default class
    assert delta["6863:20"] >= 0.9 * got["total_bytes"], delta  # DL data still in its band


def test_acks_of_a_low_band_job_do_not_wait_behind_higher_bands(pair):
    """ps sends the top band's job (5201) at line rate while it receives an upload on the second job's
    port (5202), as a PS host sends one job's update while another job's gradients arrive. The ACKs ps
    sends for the upload are that job's packets, but they go to the control class: in band 1 they would
    wait behind band 0's data (band 1 is guaranteed only 100 kbit) and stall the upload, which the
    bands never meant to order (it comes in on the other direction of the link)."""
    ns, dev = pair.ps.ns, pair.ps.dev
    start_servers(pair, sinks=(PORTS[1],))
    _, st = start_daemon(pair, "one")
    assert {j["job_id"]: j["band"] for j in st["jobs"]} == {f"ps:10.77.0.1:{p}": i for i, p in enumerate(PORTS)}
    top = recv(pair, PORTS[0], 4)
    time.sleep(0.5)  # band 0 is backlogged from here on
    before = oracle.class_bytes(ns, dev)
    up = pair.start(pair.wk, PY, "-m", "hostctl_lab.tools.bulk", "send", "--connect", f"{pair.ps.addr}:{PORTS[1]}",
                    "--seconds", "2", "--bucket", "0.1")
    sent = result(up)
    after = oracle.class_bytes(ns, dev)
    hi = result(top)
    delta = {c: after[c] - before.get(c, 0) for c in after}
    up_bps = sent["total_bytes"] * 8 / 2.0
    # the top job kept the link: ps's egress is busy with it while the upload runs
    assert window_bytes(hi, sent["start"], sent["start"] + 2.0) * 8 / 2.0 >= 0.85 * LINK_BPS, hi
    # the upload is not held to the pace of band 1's ACKs (measured: about 290 Mbit/s with the ACKs in band 1,
    # 6 Gbit/s in the control class; the worker's side of the veth is not shaped)
    assert up_bps >= 3 * LINK_BPS, f"upload {up_bps / 1e6:.0f} Mbit/s; classes {delta}"
    assert delta["6863:11"] >= 10**5, delta  # its ACKs went to the control class
    assert delta["6863:21"] < 0.01 * delta["6863:11"], delta  # not to band 1


# --------------------------------------------------------------------------
# The worker side: the same --ports, on the host that connects out to the PS


def start_worker_daemon(pair, policy, *extra):
    """hostctl on the worker namespace (wk), shaping its egress (the uploads) to LINK; returns once
    its control socket answers (its jobs exist only once the uploads connect)."""
    d = pair.start(pair.wk, HOSTCTL, "start", "--policy", policy, "--iface", pair.wk.dev, "--link-rate", LINK,
                   "--ports", ",".join(map(str, PORTS)), "--rescan", "0.5", *extra)

    def up():
        if d.poll() is not None:
            raise AssertionError(f"daemon exited: {d.stderr.read()}")
        return pair.wk.hostctl("status", "--json").returncode == 0

    wait_for(up, 30, 0.2, "worker daemon up")
    return d


def wait_worker_banded(pair):
    """The worker daemon's status once both jobs (found by remote port) are in their bands."""
    want = {f"ps:10.77.0.1:{p}": band for band, p in enumerate(PORTS)}

    def banded():
        st = json.loads(pair.wk.hostctl("status", "--json", check=True).stdout)
        return st if {j["job_id"]: j["band"] for j in st["jobs"]} == want else None

    return wait_for(banded, 8, 0.1, "both worker-side jobs in their bands")


def send(pair, port, seconds):
    return pair.start(pair.wk, PY, "-m", "hostctl_lab.tools.bulk", "send", "--connect", f"{pair.ps.addr}:{port}",
                      "--seconds", str(seconds), "--bucket", "0.1")


def test_one_on_the_worker_side_gives_the_leader_the_uplink(pair):
    """Two jobs' workers upload to PS 10.77.0.1:5201 and :5202 (sinks); `hostctl start --policy one
    --ports 5201,5202` runs in the WORKER namespace, whose egress is the shared 200 Mbit/s uplink. The
    jobs are found by remote port (ps:10.77.0.1:5201 leads) and the leader gets >= 90% of the uplink
    while both upload; the classes' counters show both bands carrying their job's data."""
    ns, dev = pair.wk.ns, pair.wk.dev
    start_servers(pair, sinks=PORTS)
    start_worker_daemon(pair, "one")
    low = send(pair, PORTS[1], 12)
    time.sleep(0.3)
    high = send(pair, PORTS[0], 10)
    ids = {p: f"ps:10.77.0.1:{p}" for p in PORTS}
    st = wait_worker_banded(pair)
    t_ready = time.time()
    assert all(j["role"] == "client" and j["listen_ports"] == [] for j in st["jobs"]), st["jobs"]
    assert {j["job_id"]: j["remote_endpoints"] for j in st["jobs"]} == {ids[p]: [f"10.77.0.1:{p}"] for p in PORTS}
    before = oracle.class_bytes(ns, dev)
    time.sleep(3.0)
    after = oracle.class_bytes(ns, dev)
    hi, lo = result(high), result(low)
    t0, t1 = t_ready + 0.5, t_ready + 3.0
    h, l = window_bytes(hi, t0, t1), window_bytes(lo, t0, t1)
    assert h / (h + l) >= 0.90, f"leader share {h / (h + l):.2f} ({h} vs {l} bytes)"
    delta = {c: after[c] - before.get(c, 0) for c in after}
    assert delta["6863:20"] >= 0.8 * LINK_BPS / 8 * 3.0 * 0.9, delta  # the leader's data, in band 0
    assert delta["6863:20"] >= 9 * delta["6863:21"], delta
    assert delta["6863:10"] < 0.01 * delta["6863:20"], delta  # not in the default class


def test_worker_side_job_ids_equal_the_ps_side_ids(pair):
    """`hostctl flows --ports` on the PS namespace and on the worker namespace name each job alike."""
    start_servers(pair, sinks=PORTS)
    for p in PORTS:
        send(pair, p, 20)  # until the end of the test (the pair's finalizer ends them)

    def both(host):
        r = host.hostctl("flows", "--ports", ",".join(map(str, PORTS)), "--json", check=True)
        rows = json.loads(r.stdout)
        return rows if len(rows) == 2 and all(r["flows"] for r in rows) else None

    ps_rows = wait_for(lambda: both(pair.ps), 15, 0.1, "both jobs on the PS side")
    wk_rows = wait_for(lambda: both(pair.wk), 15, 0.1, "both jobs on the worker side")
    want = [f"ps:10.77.0.1:{p}" for p in PORTS]
    assert [r["job_id"] for r in ps_rows] == [r["job_id"] for r in wk_rows] == want
    assert [r["role"] for r in ps_rows] == ["server"] * 2 and [r["role"] for r in wk_rows] == ["client"] * 2
    # --dry-run's classifier dump on the worker: one remote-endpoint entry per job, no 4-tuples needed
    dry = json.loads(pair.wk.hostctl("start", "--dry-run", "--policy", "one", "--iface", pair.wk.dev, "--link-rate",
                                     LINK, "--ports", ",".join(map(str, PORTS)), check=True).stdout)["classifier"]
    assert dry["remotes"] == {f"10.77.0.1:{p}": dry["slots"][f"ps:10.77.0.1:{p}"] for p in PORTS}
    assert dry["flows"] == {} and dry["ports"] == {}


@pytest.fixture
def pod(pair, request):
    """A "pod": a third namespace behind the worker namespace, on its own /24 (random within
    10.200-10.250), whose traffic the worker namespace forwards and masquerades out of its veth to
    the PS, as a container runtime's bridge network does. Returns the pod's Host."""
    tag = uuid.uuid4().hex[:6]
    net = f"10.{200 + int(tag[:2], 16) % 51}.{int(tag[2:4], 16)}"
    p = Host(f"hct-{tag}-pod", f"hpp{tag}", f"{net}.2")
    gw = f"hpg{tag}"

    def fin():
        remove_netns(p.ns)

    request.addfinalizer(fin)
    sh(["ip", "netns", "add", p.ns])
    sh(["ip", "link", "add", p.dev, "netns", p.ns, "type", "veth", "peer", "name", gw, "netns", pair.wk.ns])
    p.run("ip", "addr", "add", f"{p.addr}/24", "dev", p.dev)
    for h, dev in ((p, p.dev), (p, "lo"), (pair.wk, gw)):
        h.run("ip", "link", "set", dev, "up")
    pair.wk.run("ip", "addr", "add", f"{net}.1/24", "dev", gw)
    p.run("ip", "route", "add", "default", "via", f"{net}.1")
    pair.wk.run("sysctl", "-qw", "net.ipv4.ip_forward=1")
    pair.wk.run("nft", "add", "table", "ip", "hcnat")
    pair.wk.run("nft", "add", "chain", "ip", "hcnat", "post", "{ type nat hook postrouting priority 100 ; }")
    pair.wk.run("nft", "add", "rule", "ip", "hcnat", "post", "ip", "saddr", f"{net}.0/24", "oifname", pair.wk.dev,
                "masquerade")
    return p


def test_one_classifies_natted_uploads_from_a_pod_by_remote_endpoint(pair, pod):
    """Workers in a pod behind masquerading NAT upload to PS 10.77.0.1:5201/5202 through the worker
    namespace, whose daemon runs `one --ports 5201,5202` on its egress. The daemon finds the jobs from
    the worker namespace's own (idle) connections to the two PS endpoints; the pod's flows are not in
    its socket table and leave with a rewritten source, yet the remote-endpoint entries classify them:
    the leader gets >= 90% of the 200 Mbit/s uplink."""
    start_servers(pair, sinks=PORTS)
    keep = ("import socket, sys, time\n"
            "s = [socket.create_connection(('10.77.0.1', int(p))) for p in sys.argv[1:]]\n"
            "time.sleep(120)\n")
    pair.start(pair.wk, PY, "-c", keep, *map(str, PORTS))
    # --no-containers: the daemon must not read the pod's sockets (it would, the pod being a container
    # of the worker namespace: tests/integration/test_containers.py), so only the remote-endpoint
    # entries can classify the pod's flows
    start_worker_daemon(pair, "one", "--no-containers")
    st = wait_worker_banded(pair)
    assert all(len(j["flows"]) == 1 for j in st["jobs"]), st["jobs"]  # the idle connections only

    def send_from_pod(port, seconds):
        return pair.start(pod, PY, "-m", "hostctl_lab.tools.bulk", "send", "--connect", f"{pair.ps.addr}:{port}",
                          "--seconds", str(seconds), "--bucket", "0.1")

    low = send_from_pod(PORTS[1], 5)
    time.sleep(0.3)
    high = send_from_pod(PORTS[0], 4)
    hi, lo = result(high), result(low)
    t0, t1 = hi["start"] + 0.5, hi["start"] + 3.5
    h, l = window_bytes(hi, t0, t1), window_bytes(lo, t0, t1)
    assert h / (h + l) >= 0.90, f"leader share {h / (h + l):.2f} ({h} vs {l} bytes)"
    st = json.loads(pair.wk.hostctl("status", "--json", check=True).stdout)
    assert all(len(j["flows"]) == 1 for j in st["jobs"]), st["jobs"]  # still no 4-tuple of the pod's flows
