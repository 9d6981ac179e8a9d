"""Jobs in containers: "pods" (network namespaces on a bridge in a "host" namespace) whose
traffic leaves through the host's uplink to a "remote" namespace, routed or masqueraded.
The daemon runs in the host namespace (nsenter, as on a real host) and must find the pods'
jobs (their sockets are only visible inside the pods), give them the expected ids, band
them at the uplink and pace them, with real TCP."""

from __future__ import annotations

import json
import os
import random
import re
import subprocess
import time
import uuid
from dataclasses import dataclass, field

import pytest

from tests.conftest import HOSTCTL, PY, _kill, remove_netns, sh, wait_for

pytestmark = [pytest.mark.root, pytest.mark.netns]

LINK = "200mbit"


@dataclass
class Ns:
    name: str
    addr: str = ""

    def argv(self, *args: str) -> list[str]:
        """Enters only the network namespace (keeps the host's /sys mounts: cgroup2, bpffs)."""
        return ["nsenter", f"--net=/run/netns/{self.name}", *args]

    def run(self, *args: str, check: bool = True, timeout: float = 60) -> subprocess.CompletedProcess:
        return sh(self.argv(*args), check=check, timeout=timeout)


@dataclass
class Pods:
    """host (bridge + uplink), pods[0..1] on the bridge, remote at the uplink's other end."""

    mode: str  # "routed" or "masq"
    host: Ns
    pods: list[Ns]
    remote: Ns
    other: Ns  # a namespace linked to remote only: another host, not a container of this one
    uplink: str  # the host's uplink veth (--iface)
    procs: list[subprocess.Popen] = field(default_factory=list)

    def start(self, argv: list[str], **kw) -> subprocess.Popen:
        kw.setdefault("stdout", subprocess.PIPE)
        kw.setdefault("stderr", subprocess.PIPE)
        kw.setdefault("text", True)
        p = subprocess.Popen(argv, **kw)
        self.procs.append(p)
        return p

    def publish(self, pod: Ns, port: int) -> None:
        """masq: DNAT host:port -> pod:port (a published port, hostPort = containerPort)."""
        self.host.run("nft", "add", "rule", "ip", TABLE, "pre", "iifname", self.uplink, "tcp", "dport", str(port),
                      "dnat", "to", f"{pod.addr}:{port}")

    def addr_of(self, pod: Ns) -> str:
        """Where the remote side reaches a pod's server: the pod (routed) or the host (masq)."""
        return pod.addr if self.mode == "routed" else self.host.addr


TABLE = "hctpods"


@pytest.fixture(params=["routed", "masq"])
def pods(request) -> Pods:
    """Builds the topology (unique names, a random /24 pair inside 10.200-10.250); removes
    everything, processes first, even when the test fails."""
    mode = request.param
    tag = uuid.uuid4().hex[:6]
    a, b = random.randint(200, 250), random.randrange(0, 254, 2)
    net, up = f"10.{a}.{b}", f"10.{a}.{b + 1}"
    host = Ns(f"hct-{tag}-host", f"{up}.1")
    pods_ = [Ns(f"hct-{tag}-pod{i}", f"{net}.{i + 2}") for i in range(2)]
    remote = Ns(f"hct-{tag}-rem", f"{up}.2")
    other = Ns(f"hct-{tag}-oth", f"{up}.3")
    env = Pods(mode, host, pods_, remote, other, f"hu{tag}")
    all_ns = [host, *pods_, remote, other]

    def fin():
        for p in reversed(env.procs):
            _kill(p)
        for ns in all_ns:
            remove_netns(ns.name)

    request.addfinalizer(fin)
    for ns in all_ns:
        sh(["ip", "netns", "add", ns.name])
        ns.run("ip", "link", "set", "lo", "up")
    br = f"hb{tag}"
    host.run("ip", "link", "add", br, "type", "bridge")
    host.run("ip", "addr", "add", f"{net}.1/24", "dev", br)
    host.run("ip", "link", "set", br, "up")
    for i, pod in enumerate(pods_):
        hv, pv = f"hv{i}{tag}", f"pv{i}{tag}"
        sh(["ip", "link", "add", hv, "netns", host.name, "type", "veth", "peer", "name", pv, "netns", pod.name])
        host.run("ip", "link", "set", hv, "master", br)
        host.run("ip", "link", "set", hv, "up")
        pod.run("ip", "addr", "add", f"{pod.addr}/24", "dev", pv)
        pod.run("ip", "link", "set", pv, "up")
        pod.run("ip", "route", "add", "default", "via", f"{net}.1")
    sh(["ip", "link", "add", env.uplink, "netns", host.name, "type", "veth", "peer", "name", f"ru{tag}",
        "netns", remote.name])
    host.run("ip", "addr", "add", f"{host.addr}/24", "dev", env.uplink)
    host.run("ip", "link", "set", env.uplink, "up")
    remote.run("ip", "addr", "add", f"{remote.addr}/24", "dev", f"ru{tag}")
    remote.run("ip", "link", "set", f"ru{tag}", "up")
    remote.run("ip", "link", "add", f"rb{tag}", "type", "bridge")
    remote.run("ip", "link", "set", f"ru{tag}", "master", f"rb{tag}")
    remote.run("ip", "addr", "del", f"{remote.addr}/24", "dev", f"ru{tag}")
    remote.run("ip", "addr", "add", f"{remote.addr}/24", "dev", f"rb{tag}")
    remote.run("ip", "link", "set", f"rb{tag}", "up")
    sh(["ip", "link", "add", f"ro{tag}", "netns", remote.name, "type", "veth", "peer", "name", f"oo{tag}",
        "netns", other.name])
    remote.run("ip", "link", "set", f"ro{tag}", "master", f"rb{tag}")
    remote.run("ip", "link", "set", f"ro{tag}", "up")
    other.run("ip", "addr", "add", f"{other.addr}/24", "dev", f"oo{tag}")
    other.run("ip", "link", "set", f"oo{tag}", "up")
    host.run("sysctl", "-q", "-w", "net.ipv4.ip_forward=1")
    if mode == "routed":
        remote.run("ip", "route", "add", f"{net}.0/24", "via", host.addr)
    else:  # the remote side has no route to the pods: they are masqueraded behind the host
        rules = (f"table ip {TABLE} {{\n"
                 f"  chain pre {{ type nat hook prerouting priority -100; }}\n"
                 f"  chain post {{ type nat hook postrouting priority 100; "
                 f"oifname \"{env.uplink}\" ip saddr {net}.0/24 masquerade; }}\n}}\n")
        subprocess.run(host.argv("nft", "-f", "-"), input=rules, text=True, check=True, capture_output=True)
    return env


def serve(env: Pods, pod: Ns, port: int, *extra: str) -> None:
    """A bulk server in a pod on the wildcard address (sends to whoever connects)."""
    env.start(pod.argv(PY, "-m", "hostctl_lab.tools.bulk", "serve", "--port", str(port), *extra))
    if env.mode == "masq":
        env.publish(pod, port)
    target = env.addr_of(pod)
    wait_for(lambda: env.remote.run("bash", "-c", f"echo > /dev/tcp/{target}/{port}", check=False).returncode == 0,
             10, 0.1, f"server on {port}")


def recv(env: Pods, pod: Ns, port: int, seconds: float) -> subprocess.Popen:
    return env.start(env.remote.argv(PY, "-m", "hostctl_lab.tools.bulk", "recv", "--connect",
                                     f"{env.addr_of(pod)}:{port}", "--seconds", str(seconds), "--bucket", "0.1"))


def result(p: subprocess.Popen) -> dict:
    out, err = p.communicate(timeout=60)
    assert p.returncode == 0, err
    return json.loads(out)


def window_bytes(res: dict, t0: float, t1: float) -> int:
    """Bytes in the wall-clock window [t0, t1) (whole 100 ms buckets)."""
    return sum(b for i, b in enumerate(res["bytes"])
               if t0 <= res["start"] + i * res["bucket_s"] and res["start"] + (i + 1) * res["bucket_s"] <= t1)


def flows(env: Pods, *args: str) -> list[dict]:
    r = env.host.run(HOSTCTL, "flows", "--iface", env.uplink, "--json", *args, check=False)
    assert r.returncode == 0, r.stderr
    return json.loads(r.stdout)


def id_args(env: Pods) -> tuple[str, ...]:
    return () if env.mode == "routed" else ("--container-addr", "host")


def expected_ps_id(env: Pods, pod: Ns, port: int) -> str:
    return f"ps:{env.addr_of(pod)}:{port}"


def start_daemon(env: Pods, *args: str, jobs: int = 2) -> subprocess.Popen:
    d = env.start(env.host.argv(HOSTCTL, "start", "--iface", env.uplink, "--link-rate", LINK, "--rescan", "0.5",
                                *args))

    def ready():
        if d.poll() is not None:
            raise AssertionError(f"daemon exited: {d.stderr.read()}")
        r = env.host.run(HOSTCTL, "status", "--json", check=False)
        if r.returncode != 0:
            return None
        st = json.loads(r.stdout)
        return st if len(st["jobs"]) == jobs else None

    wait_for(ready, 30, 0.2, f"daemon with {jobs} job(s)")
    return d


def free_ports() -> tuple[int, int]:
    base = random.randrange(20000, 30000, 2)
    return base, base + 1


# ------------------------------------------------------------------------------------
# discovery


def test_flows_finds_pod_servers_with_their_ids(pods):
    p0, p1 = free_ports()
    for pod, port in zip(pods.pods, (p0, p1)):
        serve(pods, pod, port)
    # another host on the remote side serving the same port: no container of this host
    pods.start(pods.other.argv(PY, "-m", "hostctl_lab.tools.bulk", "serve", "--port", str(p0)))
    wait_for(lambda: pods.remote.run("bash", "-c", f"echo > /dev/tcp/{pods.other.addr}/{p0}", check=False)
             .returncode == 0, 10, 0.1, "the other host's server")
    rx = [recv(pods, pod, port, 8) for pod, port in zip(pods.pods, (p0, p1))]
    want = {expected_ps_id(pods, pod, port): port for pod, port in zip(pods.pods, (p0, p1))}
    seen = []

    def found():
        rows = flows(pods, "--ports", f"{p0},{p1}", *id_args(pods))
        seen.append(rows)
        return rows if {r["job_id"] for r in rows} == set(want) and all(r["flows"] for r in rows) else None

    try:
        rows = wait_for(found, 8, 0.3, f"jobs {sorted(want)}")
    except AssertionError as e:
        raise AssertionError(f"{e}; last seen {seen[-1:]}") from None
    for r in rows:
        assert r["listen_ports"] == [want[r["job_id"]]] and r["role"] == "server"
    # the full path (a --match spec beside the ports) finds the same jobs, with the pods' pids
    rows = flows(pods, "--ports", f"{p0},{p1}", "--match", "no-such-process-[x]yz", *id_args(pods))
    assert {r["job_id"] for r in rows} == set(want)
    assert all(r["pids"] for r in rows)
    # off: the host namespace itself has no such listener
    assert flows(pods, "--ports", f"{p0},{p1}", "--no-containers") == []
    # the remote namespace, at the other end of the uplink, is no container of this host
    assert flows(pods, "--match", r"hostctl_lab\.tools\.bulk [r]ecv") == []
    for p in rx:
        result(p)


def test_flows_finds_pod_clients(pods):
    """Workers in pods (connecting out) are found by their command line, with their
    launcher ids, and by the port they connect to, with the id their PS's host gives
    (ps:<PS address>:<port>), masqueraded or not; their flows keep the pod's address."""
    p0, p1 = free_ports()
    for port in (p0, p1):
        pods.start(pods.remote.argv(PY, "-m", "hostctl_lab.tools.bulk", "serve", "--sink", "--port", str(port)))
    marker = rf"bulk send --connect {re.escape(pods.remote.addr)}:({p0}|{p1})\b"
    for i, (pod, port) in enumerate(zip(pods.pods, (p0, p1))):
        env = {**os.environ, "MASTER_ADDR": pods.remote.addr, "MASTER_PORT": str(29500 + i)}
        pods.start(pod.argv(PY, "-m", "hostctl_lab.tools.bulk", "send", "--connect", f"{pods.remote.addr}:{port}",
                            "--seconds", "10"), env=env)
    for args, ids in ((("--match", marker), [f"master:{pods.remote.addr}:{29500 + i}" for i in range(2)]),
                      (("--ports", f"{p0},{p1}"), [f"ps:{pods.remote.addr}:{p}" for p in (p0, p1)])):
        want = dict(zip(ids, zip(pods.pods, (p0, p1))))

        def found():
            rows = flows(pods, *args)
            return rows if {r["job_id"] for r in rows} == set(want) and all(r["flows"] for r in rows) else None

        rows = wait_for(found, 8, 0.3, f"jobs {sorted(want)}")
        for r in rows:
            pod, port = want[r["job_id"]]
            assert r["role"] == "client"
            assert all(f.startswith(f"{pod.addr}:") and f.endswith(f"->{pods.remote.addr}:{port}") for f in r["flows"])


# ------------------------------------------------------------------------------------
# bands at the host's uplink


def leader_share(lead: dict, low: dict) -> float:
    """The leader's share while both run: from 1 s after the leader started to its end."""
    t0, t1 = lead["start"] + 1.0, lead["start"] + lead["seconds"]
    h, lo = window_bytes(lead, t0, t1), window_bytes(low, t0, t1)
    return h / (h + lo)


@pytest.mark.bpf
def test_one_bands_pod_servers(pods):
    """Two PS-like servers in two pods serve the remote side; under `one` the leading job
    (the smaller id) gets >= 90% of the uplink while both send. Masqueraded, the published
    port (hostPort = containerPort) keeps the source port that the classifier's port entry
    matches."""
    p0, p1 = free_ports()
    for pod, port in zip(pods.pods, (p0, p1)):
        serve(pods, pod, port)
    d = start_daemon(pods, "--policy", "one", "--ports", f"{p0},{p1}", *id_args(pods))
    st = json.loads(pods.host.run(HOSTCTL, "status", "--json").stdout)
    want = {expected_ps_id(pods, pod, port): i for i, (pod, port) in enumerate(zip(pods.pods, (p0, p1)))}
    assert {j["job_id"]: j["band"] for j in st["jobs"]} == want  # ids sort as (pod0, p0) < (pod1, p1)
    low = recv(pods, pods.pods[1], p1, 7)
    time.sleep(0.5)
    high = recv(pods, pods.pods[0], p0, 4)
    hi, lo = result(high), result(low)
    share = leader_share(hi, lo)
    print(f"{pods.mode} pod servers under one: leader share {share:.3f}")
    assert share >= 0.90, f"leader share {share:.2f}"
    total = (window_bytes(hi, hi["start"] + 1, hi["start"] + 4) + window_bytes(lo, hi["start"] + 1, hi["start"] + 4))
    assert total * 8 / 3 >= 0.8 * 200e6, f"uplink {total * 8 / 3e6:.0f} Mbit/s"  # work-conserving at the link
    assert pods.host.run(HOSTCTL, "stop", check=False).returncode == 0
    _out, log = d.communicate(timeout=15)
    assert "discovery failed" not in log and "Traceback" not in log, log


@pytest.mark.bpf
@pytest.mark.parametrize("select", ["ports", "match"])
def test_one_bands_pod_clients(pods, select):
    """Workers in two pods upload to the remote side; under `one` the leading job gets >= 90%.
    By --ports (the port connected to) the classifier matches the remote endpoint, which
    masquerading leaves alone; by --match the jobs' flows are 4-tuple entries, which match
    routed traffic only: masquerading rewrites the source before the egress qdisc, so there the
    jobs are found and given bands, but their packets stay in the default class and share the
    uplink (the limitation docs/operations.md states; this checks it still holds)."""
    banded = not (pods.mode == "masq" and select == "match")
    p0, p1 = free_ports()
    for port in (p0, p1):
        pods.start(pods.remote.argv(PY, "-m", "hostctl_lab.tools.bulk", "serve", "--sink", "--port", str(port)))
    if select == "ports":
        sel, ids = ("--ports", f"{p0},{p1}"), [f"ps:{pods.remote.addr}:{p}" for p in (p0, p1)]
    else:
        sel = ("--match", rf"bulk send --connect {re.escape(pods.remote.addr)}:({p0}|{p1})\b")
        ids = [f"master:{pods.remote.addr}:{29500 + i}" for i in range(2)]
    start_daemon(pods, "--policy", "one", *sel, jobs=0)

    def send(i: int, seconds: float) -> subprocess.Popen:
        env = {**os.environ, "MASTER_ADDR": pods.remote.addr, "MASTER_PORT": str(29500 + i)}
        return pods.start(pods.pods[i].argv(PY, "-m", "hostctl_lab.tools.bulk", "send", "--connect",
                                            f"{pods.remote.addr}:{(p0, p1)[i]}", "--seconds", str(seconds)), env=env)

    low = send(1, 9)

    def classified(n: int):
        st = json.loads(pods.host.run(HOSTCTL, "status", "--json").stdout)
        return st if len(st["jobs"]) == n and all(j["flows"] for j in st["jobs"]) else None

    wait_for(lambda: classified(1), 10, 0.2, "the first job and its flow")
    high = send(0, 5)
    st = wait_for(lambda: classified(2), 10, 0.2, "both jobs and their flows")
    assert {j["job_id"]: j["band"] for j in st["jobs"]} == {ids[0]: 0, ids[1]: 1}
    hi, lo = result(high), result(low)
    # the sender counts bytes handed to TCP; skip the time the new flow waits for a rescan
    t0, t1 = hi["start"] + 1.5, hi["start"] + 5
    h, l_ = window_bytes(hi, t0, t1), window_bytes(lo, t0, t1)
    print(f"{pods.mode} pod clients by {select} under one: leader share {h / (h + l_):.3f}")
    if banded:
        assert h / (h + l_) >= 0.90, f"leader share {h / (h + l_):.2f}"
    else:  # not classified at the NIC: the two uploads share the default class like any TCP flows
        assert h / (h + l_) <= 0.75, f"leader share {h / (h + l_):.2f}: masqueraded 4-tuples matched?"


# ------------------------------------------------------------------------------------
# pacing (sock_ops on the daemon's cgroup; the pods' processes in a child cgroup)


@pytest.mark.bpf
@pytest.mark.parametrize("role", ["server", "worker"])
def test_cap_paces_a_pod_flow(pods, cgroup, role):
    """`--policy cap --cap 50mbit`: a pod's flow is held near the cap, whether the pod serves
    the remote side (a PS) or uploads to it (a worker, selected by the remote endpoint). The
    pacer is attached to the daemon's cgroup and the pod's process runs in a child cgroup of it
    (as a container's cgroup is below the host's); sock_ops sees the pod-side socket, the one
    discovery read inside the pod, masqueraded or not."""
    port = free_ports()[0]
    child = os.path.join(cgroup, "pod0")
    os.makedirs(child)
    pod = pods.pods[0]

    def in_child(*argv: str) -> subprocess.Popen:
        return pods.start(["sh", "-c", 'echo $$ > "$0/cgroup.procs" && exec "$@"', child, *pod.argv(*argv)])

    if role == "server":
        in_child(PY, "-m", "hostctl_lab.tools.bulk", "serve", "--port", str(port))
        if pods.mode == "masq":
            pods.publish(pod, port)
        target = pods.addr_of(pod)
    else:
        pods.start(pods.remote.argv(PY, "-m", "hostctl_lab.tools.bulk", "serve", "--sink", "--port", str(port)))
        target = pods.remote.addr
    wait_for(lambda: subprocess.run((pods.remote if role == "server" else pod).argv(
        "bash", "-c", f"echo > /dev/tcp/{target}/{port}"), capture_output=True).returncode == 0, 10, 0.1, "the server")
    start_daemon(pods, "--policy", "cap", "--cap", "50mbit", "--ports", str(port), "--cgroup", cgroup,
                 *id_args(pods), jobs=1 if role == "server" else 0)
    if role == "server":
        proc = recv(pods, pod, port, 5)
    else:
        proc = in_child(PY, "-m", "hostctl_lab.tools.bulk", "send", "--connect", f"{target}:{port}", "--seconds", "5")

    def paced():
        st = json.loads(pods.host.run(HOSTCTL, "status", "--json").stdout)
        rows = (st.get("pacing") or {}).get("flows") or []
        return rows if rows and rows[0]["applied_bps"] == 50_000_000 else None

    (row,) = wait_for(paced, 10, 0.2, "the pod's flow paced")
    assert row["flow"].startswith(f"{pod.addr}:"), row  # the pod-side tuple
    res = result(proc)
    got = window_bytes(res, res["start"] + 1.5, res["start"] + 5) * 8 / 3.5e6
    print(f"{pods.mode} pod {role} flow capped at 50 Mbit/s: {got:.1f} Mbit/s")
    # the sender counts bytes handed to TCP (up to a socket buffer ahead of the wire)
    assert got == pytest.approx(50, rel=0.10), f"{got:.1f} Mbit/s"


@pytest.mark.bpf
@pytest.mark.parametrize("pods", ["routed"], indirect=True)
def test_one_bands_pods_serving_the_same_port(pods):
    """Two pods serve the same port (one image, two jobs): two jobs, named by the pods'
    addresses, classified by 4-tuple (a port entry cannot tell them apart); the leader gets
    >= 90%. Routed only: masqueraded, two pods cannot publish the same host port."""
    port = free_ports()[0]
    for pod in pods.pods:
        serve(pods, pod, port)
    start_daemon(pods, "--policy", "one", "--ports", str(port))
    low = recv(pods, pods.pods[1], port, 8)

    def both_flows():
        st = json.loads(pods.host.run(HOSTCTL, "status", "--json").stdout)
        return st if all(j["flows"] for j in st["jobs"]) else None

    wait_for(lambda: json.loads(pods.host.run(HOSTCTL, "status", "--json").stdout)["jobs"][1]["flows"], 10, 0.2,
             "the second job's flow")
    high = recv(pods, pods.pods[0], port, 5)
    st = wait_for(both_flows, 10, 0.2, "both jobs' flows")
    assert {j["job_id"]: j["band"] for j in st["jobs"]} == {f"ps:{pods.pods[0].addr}:{port}": 0,
                                                             f"ps:{pods.pods[1].addr}:{port}": 1}
    hi, lo = result(high), result(low)
    t0, t1 = hi["start"] + 1.5, hi["start"] + 5  # a new flow waits for a rescan (0.5 s) to get its entry
    h, l_ = window_bytes(hi, t0, t1), window_bytes(lo, t0, t1)
    print(f"{pods.mode} pods on one port under one: leader share {h / (h + l_):.3f}")
    assert h / (h + l_) >= 0.90, f"leader share {h / (h + l_):.2f}"
