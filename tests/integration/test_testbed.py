"""The emulated testbed on the real kernel: namespaces, bridges, tbf line rates,
cgroups, and teardown that leaves nothing behind (also after a crash)."""

from __future__ import annotations

import json
import os
import re
import subprocess
import textwrap
import time
import uuid

import pytest

from hostctl_lab.testbed.net import NS_PREFIX, STATE_DIR, Testbed, all_testbed_names, cgroup2_root, teardown
from hostctl_lab.topology import LabFabric
from tests.conftest import HOSTCTL, PY, sh, wait_for

pytestmark = [pytest.mark.root, pytest.mark.netns]


def topo(n=3, link=100_000_000, racks=1, uplink=None, **kw):
    rack_of = tuple(i // (n // racks) for i in range(n)) if racks > 1 else (0,) * n
    return LabFabric(hosts=tuple(f"h{i}" for i in range(n)), rack_of=rack_of, racks=racks, link_bps=link,
                     uplink_bps=uplink, queue_bytes=256 * 1024, **kw)


def uname() -> str:
    return "t" + uuid.uuid4().hex[:7]


@pytest.fixture
def make_tb(request):
    made = []

    def make(t: LabFabric) -> Testbed:
        tb = Testbed(uname(), t)
        made.append(tb.name)  # before up(): removed even if up fails half-way
        return tb.up()

    yield make
    for n in made:
        teardown(n)


def leftovers(name: str) -> list[str]:
    out = [n for n in os.listdir("/run/netns") if n.startswith(f"{NS_PREFIX}{name}-")] \
        if os.path.isdir("/run/netns") else []
    cg = os.path.join(cgroup2_root(), "hostctl-testbed", name)
    if os.path.exists(cg):
        out.append(cg)
    if os.path.exists(os.path.join(STATE_DIR, f"{name}.json")):
        out.append("state file")
    return out


def throughput_mbit(tb: Testbed, src: str, dst: str, port: int, seconds: float = 2.0) -> subprocess.Popen:
    tb.popen(src, [PY, "-m", "hostctl_lab.tools.bulk", "serve", "--bind", tb.host(src).addr, "--port", str(port)],
             stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    time.sleep(0.3)
    return tb.popen(dst, [PY, "-m", "hostctl_lab.tools.bulk", "recv", "--connect", f"{tb.host(src).addr}:{port}",
                          "--seconds", str(seconds), "--bucket", "0.5"], stdout=subprocess.PIPE, text=True)


def mbit(p: subprocess.Popen) -> float:
    """Goodput of a bulk receiver, skipping its first half second (slow start)."""
    out, _ = p.communicate(timeout=30)
    d = json.loads(out)
    return sum(d["bytes"][1:]) * 8 / (d["bucket_s"] * (len(d["bytes"]) - 1)) / 1e6


def test_up_down_leaves_nothing(make_tb):
    tb = make_tb(topo(3))
    hosts = tb.hosts()
    assert len({h.addr for h in hosts}) == 3
    for h in hosts:
        assert os.path.exists(f"/run/netns/{h.ns}") and os.path.isdir(h.cgroup)
        q = sh(["tc", "-n", h.ns, "qdisc", "show", "dev", "eth0", "root"]).stdout
        assert "tbf" in q and "rate 100Mbit" in q
    sleeper = tb.popen("h1", ["sleep", "600"])
    wait_for(lambda: str(sleeper.pid) in open(os.path.join(hosts[1].cgroup, "cgroup.procs")).read() or
             open(os.path.join(hosts[1].cgroup, "cgroup.procs")).read().strip(), what="process in host cgroup")
    tb.down()
    assert sleeper.poll() is not None
    assert leftovers(tb.name) == []


def test_down_after_harness_crash(tmp_path):
    """The harness is SIGKILLed with a testbed up and a job running: `hostctl testbed down` removes all."""
    name = uname()
    script = tmp_path / "crash.py"
    script.write_text(textwrap.dedent(f"""
        import os, signal, sys, time
        from hostctl_lab.testbed.net import Testbed
        from hostctl_lab.topology import LabFabric
        t = LabFabric(hosts=("h0", "h1"), rack_of=(0, 0), racks=1, link_bps=10**8, uplink_bps=None,
                      queue_bytes=262144)
        tb = Testbed({name!r}, t).up()
        p = tb.popen("h0", ["sleep", "600"])
        print(p.pid, flush=True)
        time.sleep(600)
    """))
    harness = subprocess.Popen([PY, str(script)], stdout=subprocess.PIPE, text=True)
    try:
        line = harness.stdout.readline()
        assert line.strip(), "harness did not start the testbed"
        wait_for(lambda: _cg_procs(name, "h0"), what="job process in the host cgroup")
        job_pids = _cg_procs(name, "h0")
        harness.kill()
        harness.wait(10)
        assert name in all_testbed_names()
        r = sh([HOSTCTL, "testbed", "down", name])
        assert "removed" in r.stdout
        for pid in job_pids:
            wait_for(lambda: not os.path.exists(f"/proc/{pid}"), what=f"pid {pid} gone")
        assert leftovers(name) == []
    finally:
        if harness.poll() is None:
            harness.kill()
        teardown(name)


def _cg_procs(name: str, host: str) -> list[int]:
    try:
        with open(os.path.join(cgroup2_root(), "hostctl-testbed", name, host, "cgroup.procs")) as f:
            return [int(x) for x in f.read().split()]
    except OSError:
        return []


def test_line_rates_both_directions_and_oversubscribed_uplink(make_tb):
    tb = make_tb(topo(4, link=100_000_000, racks=2, uplink=40_000_000))  # racks: h0,h1 | h2,h3
    same_rack = throughput_mbit(tb, "h0", "h1", 7301)
    assert 85 <= mbit(same_rack) <= 101
    cross_rack = throughput_mbit(tb, "h1", "h3", 7302)
    assert 32 <= mbit(cross_rack) <= 41
    # two senders into one host: its ingress link (the switch port's tbf) caps the sum
    a = throughput_mbit(tb, "h1", "h0", 7303, seconds=2.5)
    b = throughput_mbit(tb, "h2", "h0", 7304, seconds=2.5)
    total = mbit(a) + mbit(b)
    assert 80 <= total <= 101, total
    c = tb.counters()
    assert c["rack0:down"] > 0 and c["rack1:up"] > 0 and c["h0:down"] > c["h3:down"]
    # queue drops per link: each link's root qdisc count, as tc prints it (the flows have ended)
    d = tb.drops()
    assert set(d) == set(c)
    for ln in tb.links():
        text = sh(["tc", "-n", ln.ns, "-s", "qdisc", "show", "dev", ln.dev, "root"]).stdout
        assert d[ln.name] == int(re.search(r"dropped (\d+)", text).group(1)), (ln, text)


def test_gso_off_makes_one_frame_packets(make_tb):
    tb = make_tb(topo(2, gso=False))
    for h in tb.hosts():
        assert "gso_max_segs 1 " in sh(["ip", "-n", h.ns, "-d", "link", "show", "dev", "eth0"]).stdout
    assert Testbed.load(tb.name).topology.gso is False  # kept in the state
    assert 85 <= mbit(throughput_mbit(tb, "h0", "h1", 7306)) <= 101  # one frame per packet, still at line rate


def test_cli_up_no_gso_and_status_say_so():
    name = uname()
    try:
        r = sh([HOSTCTL, "testbed", "up", "--name", name, "--hosts", "2", "--link", "100mbit", "--no-gso"])
        assert "hosts send one-frame packets (--no-gso)" in r.stdout, r.stdout
        ns = f"{NS_PREFIX}{name}-h1"
        assert "gso_max_segs 1 " in sh(["ip", "-n", ns, "-d", "link", "show", "dev", "eth0"]).stdout
        st = json.loads(sh([HOSTCTL, "testbed", "status", "--json"]).stdout)
        assert [s["gso"] for s in st if s["name"] == name] == [False]
    finally:
        teardown(name)
    assert leftovers(name) == []


def test_two_testbeds_coexist(make_tb):
    a = make_tb(topo(2))
    b = make_tb(topo(2))
    assert a.subnet != b.subnet and a.host("h0").addr != b.host("h0").addr
    a.down()
    assert leftovers(a.name) == []
    r = throughput_mbit(b, "h0", "h1", 7305, seconds=1.5)
    assert mbit(r) > 50, "the second testbed still works after the first is gone"


def test_hostctl_replaces_the_nic_qdisc_and_restores_it(make_tb):
    tb = make_tb(topo(2))
    before = sh(["tc", "-n", tb.host("h0").ns, "qdisc", "show", "dev", "eth0", "root"]).stdout
    d = tb.popen("h0", [HOSTCTL, "start", "--policy", "fifo", "--iface", "eth0", "--link-rate", "100mbit"],
                 stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    wait_for(lambda: "htb" in sh(["tc", "-n", tb.host("h0").ns, "qdisc", "show", "dev", "eth0", "root"]).stdout,
             what="hostctl's htb on eth0")
    assert tb.run("h0", [HOSTCTL, "stop"], check=False).returncode == 0
    d.wait(15)
    after = sh(["tc", "-n", tb.host("h0").ns, "qdisc", "show", "dev", "eth0", "root"]).stdout
    assert after == before and "tbf" in after


def test_cli_up_status_exec_down():
    name = uname()
    try:
        r = sh([HOSTCTL, "testbed", "up", "--name", name, "--hosts", "2", "--link", "50mbit", "--json"])
        st = json.loads(r.stdout)[0]
        assert st["name"] == name and [h["host"] for h in st["hosts"]] == ["h0", "h1"]
        assert {ln["link"]: ln["rate_bps"] for ln in st["links"]}["h1:down"] == 50_000_000
        r = sh([HOSTCTL, "testbed", "exec", name, "h1", "--", "ip", "-j", "addr", "show", "eth0"])
        assert st["hosts"][1]["addr"] in r.stdout
        again = sh([HOSTCTL, "testbed", "up", "--name", name], check=False)
        assert again.returncode != 0 and "already exists" in again.stderr and "Traceback" not in again.stderr
        assert name in sh([HOSTCTL, "testbed", "status"]).stdout
    finally:
        sh([HOSTCTL, "testbed", "down", name], check=False)
    assert leftovers(name) == []
    bad = sh([HOSTCTL, "testbed", "up", "--name", "Bad_Name"], check=False)
    assert bad.returncode == 2 and "bad testbed name" in bad.stderr


def test_sysctls_and_congestion_control_reach_the_hosts(make_tb):
    tb = make_tb(topo(2, tcp_cc="cubic", sysctls=(("net.ipv4.tcp_slow_start_after_idle", "0"),)))
    r = tb.run("h1", ["sysctl", "-n", "net.ipv4.tcp_slow_start_after_idle"])
    assert r.stdout.strip() == "0"
    # a workload socket made on the host uses the scenario's congestion control (the netns default is bbr)
    probe = ("import socket; from hostctl_lab.workloads.common import set_cc; s = socket.socket(); set_cc(s); "
             "print(s.getsockopt(socket.IPPROTO_TCP, socket.TCP_CONGESTION, 16).rstrip(b'\\0').decode())")
    p = tb.popen("h1", [PY, "-c", probe], stdout=subprocess.PIPE, text=True)
    out, _ = p.communicate(timeout=30)
    assert out.strip() == "cubic"


def test_prioritize_fabric_serves_the_listed_ports_first(make_tb):
    """The lab oracle `fabric-prio`: strict priority at the switch ports by TCP port. Two bulk flows into
    h0 share its switch port: the one whose port is listed takes the link, whichever it is."""
    tb = make_tb(topo(3, link=100_000_000))
    for first, other in ((7311, 7312), (7314, 7313)):
        tb.prioritize_fabric([[first]])
        a = throughput_mbit(tb, "h1", "h0", first, seconds=2.5)
        b = throughput_mbit(tb, "h2", "h0", other, seconds=2.5)
        hi, lo = mbit(a), mbit(b)
        assert hi >= 75 and lo <= 20, (first, hi, lo)
        bands = tb.fabric_band_bytes()["h0"]  # 0 control, 1 the listed port, 2 the rest
        assert len(bands) == 3 and bands[1] > 4 * bands[2] > 0, bands
    # the rack-less testbed has no rack links; every host's switch port got the tree
    assert set(tb.fabric_band_bytes()) == {"h0", "h1", "h2"}
