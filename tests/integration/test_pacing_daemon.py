"""`hostctl start --policy cap` on real veths, cgroups and TCP: flows paced to the cap,
status per flow, hints over the control socket, kill -9 failing open, `hostctl clean`
after it, two daemons in two namespaces and cgroups side by side, and a daemon started
with `ip netns exec` (a private /sys) that paces and is cleaned up after kill -9."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time

import pytest

from hostctl.datapath import pacer
from tests.conftest import HOSTCTL, PY, wait_for

pytestmark = [pytest.mark.root, pytest.mark.netns, pytest.mark.bpf]

HEADER_FACTOR = 1.0  # without fq, TCP pacing charges payload only: goodput equals the rate (docs/pacing.md)


def serve(pair, host, cgroup, port):
    """A bulk sender (PS-like: it sends to whoever connects) inside the host's cgroup."""
    p = subprocess.Popen(host.argv_in(cgroup, PY, "-m", "hostctl_lab.tools.bulk", "serve", "--bind", host.addr,
                                      "--port", str(port)), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    pair.procs.append(p)
    return p


def recv(pair, host, server, port, seconds):
    return pair.start(host, PY, "-m", "hostctl_lab.tools.bulk", "recv", "--connect", f"{server.addr}:{port}",
                      "--seconds", str(seconds), "--bucket", "0.1")


def result(p) -> dict:
    out, err = p.communicate(timeout=60)
    assert p.returncode == 0, err
    return json.loads(out)


def mbit(res: dict, t0: float, t1: float) -> float:
    b = res["bytes"][int(t0 / res["bucket_s"]):int(t1 / res["bucket_s"])]
    return sum(b) * 8 / (len(b) * res["bucket_s"]) / 1e6


def start_cap(pair, host, cgroup, port, cap, *extra, ip_netns_exec=False):
    return start_paced(pair, host, cgroup, port, "--policy", "cap", "--cap", cap, *extra,
                       ip_netns_exec=ip_netns_exec)


def start_paced(pair, host, cgroup, port, *policy_args, ip_netns_exec=False):
    """A pacing daemon (policy_args: --policy cap|mlcc ...) on host's veth, 1 Gbit/s link rate,
    serving `port`, pacing in `cgroup`; returns once its status lists a job and pacing.
    Entered with nsenter (the host's mounts), or with `ip netns exec` (a private /sys)."""
    args = [HOSTCTL, "start", *policy_args, "--iface", host.dev, "--link-rate", "1gbit", "--ports", str(port),
            "--cgroup", cgroup, "--rescan", "0.5"]
    argv = ["ip", "netns", "exec", host.ns, *args] if ip_netns_exec else host.nsenter(*args)
    d = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    pair.procs.append(d)

    def ready():
        if d.poll() is not None:
            raise AssertionError(f"daemon exited: {d.stderr.read()}")
        r = host.hostctl("status", "--json")
        if r.returncode != 0:
            return None
        st = json.loads(r.stdout)
        return st if st["jobs"] and st.get("pacing") else None

    wait_for(ready, 30, 0.2, "pacing daemon ready")
    return d


def status(host) -> dict:
    r = host.hostctl("status", "--json", check=True)
    return json.loads(r.stdout)


def test_cap_paces_the_job_and_status_shows_the_flow(pair, cgroup):
    serve(pair, pair.ps, cgroup, 5201)
    start_cap(pair, pair.ps, cgroup, 5201, "40mbit")
    rx = recv(pair, pair.wk, pair.ps, 5201, 4)
    wait_for(lambda: status(pair.ps)["pacing"]["flows"], 10, 0.2, "the flow in status")
    st = wait_for(lambda: (s := status(pair.ps)) and s["pacing"]["flows"][0]["rate_bps"] > 0 and s, 10, 0.2,
                  "a measured rate")
    res = result(rx)
    got = mbit(res, 1.0, 4.0)
    assert got == pytest.approx(40 * HEADER_FACTOR, rel=0.06), got
    (row,) = st["pacing"]["flows"]
    assert row["target_bps"] == 40_000_000 and row["applied_bps"] == 40_000_000
    assert row["rate_bps"] == pytest.approx(40e6 * HEADER_FACTOR, rel=0.25)  # one slot, noisy
    text = " ".join(pair.ps.hostctl("status", check=True).stdout.split())
    assert "decision p90" in text and "fail-open rate changes 0" in text


def test_a_connection_accepted_before_discovery_found_its_job_is_paced(pair, cgroup):
    """The daemon runs first (--ports 5201, no job yet); the PS starts and its worker connects at
    once, before the next rescan (5 s) finds the job. The port spec's local watch gives the accepted
    flow callbacks, so the job's served-port selector, written when the job is found, selects it:
    it is paced to the cap from then on (before the local watch, such a flow was never paced)."""
    args = [HOSTCTL, "start", "--policy", "cap", "--cap", "40mbit", "--iface", pair.ps.dev, "--link-rate", "1gbit",
            "--ports", "5201", "--cgroup", cgroup, "--rescan", "5"]
    d = subprocess.Popen(pair.ps.nsenter(*args), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    pair.procs.append(d)
    wait_for(lambda: pair.ps.hostctl("status", "--json").returncode == 0, 30, 0.2, "the daemon up")
    time.sleep(0.5)  # (just after a rescan: the next is about 4.5 s away)
    serve(pair, pair.ps, cgroup, 5201)
    rx = recv(pair, pair.wk, pair.ps, 5201, 9)
    st = wait_for(lambda: (s := status(pair.ps))["pacing"]["flows"] and s, 15, 0.2, "the flow paced")
    assert st["pacing"]["flows"][0]["applied_bps"] == 40_000_000
    res = result(rx)
    assert mbit(res, 7.0, 9.0) == pytest.approx(40 * HEADER_FACTOR, rel=0.1)  # paced once the job was found
    assert d.poll() is None


def test_flows_running_before_the_daemon_started_are_adopted_and_paced(pair, cgroup):
    """The job runs first (a PS sending to its worker at full speed); the daemon starts 2 s into
    it. No sock_ops program saw that connection established, so only the adoption pass can give it
    callbacks: it is paced to the cap from the daemon's first table on, and status counts it."""
    serve(pair, pair.ps, cgroup, 5201)
    rx = recv(pair, pair.wk, pair.ps, 5201, 16)
    time.sleep(2.0)
    t_start = time.monotonic()
    start_cap(pair, pair.ps, cgroup, 5201, "40mbit")
    st = wait_for(lambda: (s := status(pair.ps))["pacing"]["flows"] and s, 10, 0.2, "the flow paced")
    t_ready, w_ready = time.monotonic(), time.time()
    assert st["pacing"]["flows"][0]["applied_bps"] == 40_000_000
    assert st["pacing"]["kernel"]["adopted"] == 1
    text = " ".join(pair.ps.hostctl("status", check=True).stdout.split())
    assert "flows adopted 1" in text
    res = result(rx)
    t_rel = w_ready - res["start"]  # seconds into the transfer when the daemon paced it
    assert t_rel + 3.0 <= 16, f"the daemon took {t_ready - t_start:.1f} s to start: no time left to measure"
    before = mbit(res, 0.5, 1.5)
    after = mbit(res, t_rel + 1.0, t_rel + 3.0)
    print(f"before the daemon {before:.0f} Mbit/s, after {after:.1f} Mbit/s (ready {t_ready - t_start:.1f} s)")
    assert before > 200  # unpaced while no daemon ran
    assert after == pytest.approx(40 * HEADER_FACTOR, rel=0.1)


def test_hint_reaches_the_monitor(pair, cgroup):
    serve(pair, pair.ps, cgroup, 5201)
    start_cap(pair, pair.ps, cgroup, 5201, "100mbit", "--config", "/dev/null")
    job = status(pair.ps)["jobs"][0]["job_id"]
    rx = recv(pair, pair.wk, pair.ps, 5201, 3)  # the monitor lists jobs that have flows
    wait_for(lambda: status(pair.ps)["pacing"]["flows"], 10, 0.1, "the flow in status")
    code = f"from hostctl.client import hint; hint({job!r}, bytes_per_iter=123456789)"
    pair.ps.run(PY, "-c", code)
    st = wait_for(lambda: (s := status(pair.ps)) and s["pacing"]["jobs"].get(job, {}).get("source") == "hint" and s,
                  5, 0.1, "the hint applied")
    assert st["pacing"]["jobs"][job]["bytes_per_iter"] == 123456789
    assert st["pacing"]["jobs"][job]["source"] == "hint"
    bad = pair.ps.run(PY, "-c", "from hostctl.client import hint; hint('nope', bytes_per_iter=1)", check=False)
    assert bad.returncode != 0 and "no job 'nope'" in bad.stderr
    result(rx)


def test_kill_9_fails_open_and_clean_removes_the_pacer(pair, cgroup):
    serve(pair, pair.ps, cgroup, 5201)
    d = start_cap(pair, pair.ps, cgroup, 5201, "20mbit")
    scope = pacer.scope_id(cgroup)
    assert os.path.isdir(f"/sys/fs/bpf/hostctl/{scope}") and pacer.load_owner(scope)["pid"] == d.pid
    rx = recv(pair, pair.wk, pair.ps, 5201, 6)
    wait_for(lambda: status(pair.ps)["pacing"]["flows"], 10, 0.1, "the flow in status")
    import time

    time.sleep(1.0)
    d.send_signal(signal.SIGKILL)
    d.wait(5)
    t_kill = time.time()
    res = result(rx)
    t_rel = t_kill - res["start"]
    before = mbit(res, max(0.2, t_rel - 1.0), t_rel)
    after = mbit(res, t_rel + 1.5, 6.0)  # lease 1 s + an RTT + measurement slack
    assert before == pytest.approx(20 * HEADER_FACTOR, rel=0.15), before
    assert after > 5 * before, (before, after)
    # the dead daemon's pacer is still pinned and attached until clean, which reaches the
    # host's pins also from the private /sys of `ip netns exec`
    assert os.path.isdir(f"/sys/fs/bpf/hostctl/{scope}")
    out = pair.ps.hostctl("clean", check=True).stdout
    assert f"pacer {scope}" in out and "detached" in out
    assert_released(cgroup, scope)


def attached(cgroup: str) -> list[int]:
    from hostctl.datapath import bpfsys

    fd = os.open(cgroup, os.O_RDONLY | os.O_DIRECTORY)
    try:
        return bpfsys.prog_query(fd, bpfsys.BPF_CGROUP_SOCK_OPS)
    finally:
        os.close(fd)


def assert_released(cgroup: str, scope: str) -> None:
    assert not os.path.exists(f"/sys/fs/bpf/hostctl/{scope}")
    assert pacer.load_owner(scope) is None
    assert attached(cgroup) == []


def test_under_ip_netns_exec_the_daemon_paces_and_clean_releases_it_after_kill_9(pair, cgroup):
    """`ip netns exec` gives the daemon a private /sys: it mounts cgroup2 there (the same
    hierarchy), pins nothing (a private bpffs would vanish), records its program id; after
    kill -9, `hostctl clean` in another private mount namespace finds it by that id."""
    serve(pair, pair.ps, cgroup, 5201)
    d = start_cap(pair, pair.ps, cgroup, 5201, "30mbit", ip_netns_exec=True)
    scope = pacer.scope_id(cgroup)
    owner = pacer.load_owner(scope)
    assert owner["pid"] == d.pid and owner["pin_dir"] is None and owner["prog_id"] in attached(cgroup)
    assert not os.path.exists(f"/sys/fs/bpf/hostctl/{scope}")
    rx = recv(pair, pair.wk, pair.ps, 5201, 3)
    wait_for(lambda: status(pair.ps)["pacing"]["flows"], 10, 0.1, "the flow in status")
    got = mbit(result(rx), 1.0, 3.0)
    assert got == pytest.approx(30 * HEADER_FACTOR, rel=0.1), got
    d.send_signal(signal.SIGKILL)
    d.wait(5)
    assert attached(cgroup) == [owner["prog_id"]]  # the attachment outlives the daemon and its namespace
    out = pair.ps.hostctl("clean", check=True).stdout
    assert f"pacer {scope}: detached" in out, out
    assert_released(cgroup, scope)


def test_under_ip_netns_exec_a_restarted_daemon_takes_over_after_kill_9(pair, cgroup):
    """After kill -9 of a daemon started with `ip netns exec`, a new one started the same way
    (as systemd's restart would) releases the dead one's program, found by the id in its owner
    record, attaches its own, paces, and leaves nothing behind at stop."""
    serve(pair, pair.ps, cgroup, 5201)
    d = start_cap(pair, pair.ps, cgroup, 5201, "30mbit", ip_netns_exec=True)
    scope = pacer.scope_id(cgroup)
    old = pacer.load_owner(scope)["prog_id"]
    d.send_signal(signal.SIGKILL)
    d.wait(5)
    assert attached(cgroup) == [old]
    d2 = start_cap(pair, pair.ps, cgroup, 5201, "30mbit", ip_netns_exec=True)
    owner = pacer.load_owner(scope)
    assert owner["pid"] == d2.pid and owner["prog_id"] != old
    assert attached(cgroup) == [owner["prog_id"]]  # the dead daemon's program is gone
    rx = recv(pair, pair.wk, pair.ps, 5201, 3)
    wait_for(lambda: status(pair.ps)["pacing"]["flows"], 10, 0.1, "the flow in status")
    assert mbit(result(rx), 1.0, 3.0) == pytest.approx(30 * HEADER_FACTOR, rel=0.1)
    pair.ps.hostctl("stop", check=True)
    d2.wait(10)
    assert d2.returncode == 0
    assert_released(cgroup, scope)


def test_two_daemons_in_two_namespaces_and_cgroups(pair, make_cgroup):
    cg_ps, cg_wk = make_cgroup(), make_cgroup()
    serve(pair, pair.ps, cg_ps, 5201)
    serve(pair, pair.wk, cg_wk, 5202)
    start_cap(pair, pair.ps, cg_ps, 5201, "30mbit")
    start_cap(pair, pair.wk, cg_wk, 5202, "90mbit")
    a = recv(pair, pair.wk, pair.ps, 5201, 4)  # ps -> wk, paced by ps's daemon
    b = recv(pair, pair.ps, pair.wk, 5202, 4)  # wk -> ps, paced by wk's daemon
    fa = wait_for(lambda: status(pair.ps)["pacing"]["flows"], 10, 0.1, "ps's flow")
    fb = wait_for(lambda: status(pair.wk)["pacing"]["flows"], 10, 0.1, "wk's flow")
    ra, rb = result(a), result(b)
    assert mbit(ra, 1.0, 4.0) == pytest.approx(30 * HEADER_FACTOR, rel=0.08)
    assert mbit(rb, 1.0, 4.0) == pytest.approx(90 * HEADER_FACTOR, rel=0.08)
    assert {f["flow"].split("->")[0].rsplit(":", 1)[1] for f in fa} == {"5201"}
    assert {f["flow"].split("->")[0].rsplit(":", 1)[1] for f in fb} == {"5202"}


def test_stop_restores_rates_and_removes_everything(pair, cgroup):
    serve(pair, pair.ps, cgroup, 5201)
    d = start_cap(pair, pair.ps, cgroup, 5201, "20mbit")
    scope = pacer.scope_id(cgroup)
    rx = recv(pair, pair.wk, pair.ps, 5201, 5)
    wait_for(lambda: status(pair.ps)["pacing"]["flows"], 10, 0.1, "the flow in status")
    import time

    time.sleep(1.0)
    pair.ps.hostctl("stop", check=True)
    d.wait(10)
    t_stop = time.time()
    res = result(rx)
    t_rel = t_stop - res["start"]
    assert mbit(res, t_rel + 0.5, 5.0) > 5 * 20 * HEADER_FACTOR
    assert not os.path.exists(f"/sys/fs/bpf/hostctl/{scope}") and pacer.load_owner(scope) is None
    assert "stopped" in d.stderr.read()


BURSTY_SERVER = """
import socket, sys, time
s = socket.socket(); s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
s.bind((sys.argv[1], int(sys.argv[2]))); s.listen(1)
c, _ = s.accept()
time.sleep(0.5)  # set-up time: the daemon sees the new flow at 0 bytes, as with a real job
for i in range(int(sys.argv[3])):
    c.sendall(b"x" * int(sys.argv[4]))
    time.sleep(0.3)
time.sleep(2.0)
c.close()
"""

BURSTY_CLIENT = """
import socket, sys
c = socket.create_connection((sys.argv[1], int(sys.argv[2])), timeout=30)
n = 0
while (b := c.recv(1 << 20)):
    n += len(b)
print(n)
"""


def test_iterations_of_on_off_traffic_are_counted(pair, cgroup):
    """5 iterations of 1 MiB, 0.3 s apart, through the real kernel and daemon: the monitor
    counts 5 (the last one may still be open) and learns 1 MiB per iteration (5%)."""
    size, n = 1 << 20, 5
    srv = subprocess.Popen(pair.ps.argv_in(cgroup, PY, "-c", BURSTY_SERVER, pair.ps.addr, "5301", str(n),
                                           str(size)), stderr=subprocess.PIPE, text=True)
    pair.procs.append(srv)
    start_cap(pair, pair.ps, cgroup, 5301, "200mbit")
    cli = pair.start(pair.wk, PY, "-c", BURSTY_CLIENT, pair.ps.addr, "5301")

    def settled():
        st = status(pair.ps)["pacing"]
        rows = st["flows"]
        if not rows or rows[0]["bytes_acked"] < n * size:
            return None
        return rows[0]

    import time

    row = wait_for(settled, 20, 0.1, "all bytes acked")
    time.sleep(0.5)  # a few slots with an idle counter
    row = status(pair.ps)["pacing"]["flows"][0]
    done = row["iterations"] + (1 if row["iter_bytes"] > size // 2 else 0)
    assert done == n, row
    assert row["bytes_per_iter"] == pytest.approx(size, rel=0.05), row
    assert cli.wait(20) == 0 and int(cli.stdout.read()) == n * size


def test_under_ip_netns_exec_stop_releases_everything(pair, cgroup):
    serve(pair, pair.ps, cgroup, 5201)
    d = start_cap(pair, pair.ps, cgroup, 5201, "30mbit", ip_netns_exec=True)
    scope = pacer.scope_id(cgroup)
    assert attached(cgroup) == [pacer.load_owner(scope)["prog_id"]]
    pair.ps.hostctl("stop", check=True)
    d.wait(10)
    assert d.returncode == 0
    assert_released(cgroup, scope)


def test_cap_on_the_worker_side_paces_uploads_to_a_ps_port(pair, cgroup):
    """`hostctl start --policy cap --cap 50mbit --ports 5201` on the WORKER namespace: the upload to
    PS 10.77.0.1:5201 is the job ps:10.77.0.1:5201 (found by remote port) and is held near the cap,
    its first connection too (made before the job existed: watched, then selected by the job's
    remote endpoint); a second connection to the PS, made once the job exists, is selected at
    connection time and the two share the cap."""
    sink = pair.start(pair.ps, PY, "-m", "hostctl_lab.tools.bulk", "serve", "--sink", "--bind", pair.ps.addr,
                      "--port", "5201")
    wait_for(lambda: pair.wk.run("bash", "-c", f"echo > /dev/tcp/{pair.ps.addr}/5201", check=False).returncode == 0,
             10, 0.1, "sink on 5201")
    d = subprocess.Popen(pair.wk.nsenter(HOSTCTL, "start", "--policy", "cap", "--cap", "50mbit", "--iface",
                                         pair.wk.dev, "--link-rate", "1gbit", "--ports", "5201", "--cgroup", cgroup,
                                         "--rescan", "0.5"),
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    pair.procs.append(d)

    def up():
        if d.poll() is not None:
            raise AssertionError(f"daemon exited: {d.stderr.read()}")
        r = pair.wk.hostctl("status", "--json")
        return r.returncode == 0 and json.loads(r.stdout).get("pacing") is not None

    wait_for(up, 30, 0.2, "worker pacing daemon up")

    def send(seconds):
        p = subprocess.Popen(pair.wk.argv_in(cgroup, PY, "-m", "hostctl_lab.tools.bulk", "send", "--connect",
                                             f"{pair.ps.addr}:5201", "--seconds", str(seconds), "--bucket", "0.1"),
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        pair.procs.append(p)
        return p

    first = send(9)
    st = wait_for(lambda: (s := status(pair.wk)) and s["jobs"] and s, 10, 0.1, "the worker job")
    assert [(j["job_id"], j["role"]) for j in st["jobs"]] == [("ps:10.77.0.1:5201", "client")]
    wait_for(lambda: any(f["applied_bps"] for f in status(pair.wk)["pacing"]["flows"]), 10, 0.1,
             "the first connection paced")
    time.sleep(1.5)  # the first upload alone, paced
    second = send(4)
    a, b = result(first), result(second)
    t0 = b["start"] - a["start"]  # the second upload's start on the first one's clock
    assert t0 >= 1.5, (t0, a["bytes"][:40])
    alone = mbit(a, t0 - 1.2, t0)
    assert alone == pytest.approx(50, rel=0.12), f"first upload alone {alone:.1f} Mbit/s"
    both = mbit(a, t0 + 1.0, t0 + 4.0) + mbit(b, 1.0, 4.0)  # the two connections share the job's cap
    assert both == pytest.approx(50, rel=0.15), f"both uploads {both:.1f} Mbit/s"
    # paced from its start: what it handed to TCP in its first second is its send buffer's first fill
    # plus the paced rate (unpaced, the 1 Gbit/s link would take about 100 MB)
    assert sum(b["bytes"][:10]) < 10 * 2**20, b["bytes"][:10]
    sink.terminate()


def test_pins_removed_bpffs_unmounted_and_the_cgroup_removed_and_back(pair, cgroup):
    """The pacer's kernel state under an operator's hands, with a running daemon (in a private mount
    namespace, so that unmounting its bpf filesystem touches no one else):
    1. its pins removed (`rm -r`): pinned again at the next rescan;
    2. the bpf filesystem unmounted (in the daemon's mount namespace; the pins the host still sees are
       removed too, as the last unmount of a real bpffs drops them): mounted and pinned again;
    3. its cgroup removed (no process left in it): the pacer released (program detached, owner record
       gone), the daemon runs on; re-created under the same path: a new pacer attached to it, and a
       job started there is paced to the cap (its flow adopted or tracked from ESTABLISHED).
    The daemon logs each, and `hostctl stop` leaves nothing behind."""
    import shutil

    lst = pair.start(pair.ps, PY, "-m", "hostctl_lab.tools.bulk", "serve", "--bind", pair.ps.addr, "--port", "5201")
    args = [HOSTCTL, "start", "--policy", "cap", "--cap", "40mbit", "--iface", pair.ps.dev, "--link-rate", "1gbit",
            "--ports", "5201", "--cgroup", cgroup, "--rescan", "0.3"]
    d = subprocess.Popen(["unshare", "--mount", "--propagation", "private", *pair.ps.nsenter(*args)],
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    pair.procs.append(d)
    wait_for(lambda: (r := pair.ps.hostctl("status", "--json")).returncode == 0 and json.loads(r.stdout)["jobs"],
             30, 0.2, "the daemon up with its job")
    scope = pacer.scope_id(cgroup)
    pin_dir = f"/sys/fs/bpf/hostctl/{scope}"
    assert os.path.exists(f"{pin_dir}/hc_pace")
    prog = pacer.load_owner(scope)["prog_id"]

    # 1. pins removed by hand
    shutil.rmtree(pin_dir)
    t0 = time.monotonic()
    wait_for(lambda: os.path.exists(f"{pin_dir}/hc_pace") and os.path.exists(f"{pin_dir}/hc_rates"), 10, 0.05,
             "the pins back")
    print(f"pins back {time.monotonic() - t0:.2f} s after their removal")
    assert attached(cgroup) == [prog]  # the program never left the cgroup

    # 2. bpffs unmounted in the daemon's mount namespace
    mnt = f"/proc/{d.pid}/ns/mnt"
    subprocess.run(["nsenter", f"--mount={mnt}", "umount", "/sys/fs/bpf"], check=True)
    shutil.rmtree(pin_dir)
    t0 = time.monotonic()
    wait_for(lambda: subprocess.run(["nsenter", f"--mount={mnt}", "test", "-e", f"{pin_dir}/hc_pace"]).returncode == 0,
             10, 0.1, "bpffs mounted and the pins back in the daemon's namespace")
    print(f"pins back {time.monotonic() - t0:.2f} s after the unmount")
    assert attached(cgroup) == [prog] and status(pair.ps)["jobs"]

    # 3. the cgroup removed, then created again under the same path
    os.rmdir(cgroup)
    t0 = time.monotonic()
    wait_for(lambda: pacer.load_owner(scope) is None, 10, 0.05, "the pacer released")
    print(f"pacer released {time.monotonic() - t0:.2f} s after its cgroup was removed")
    assert d.poll() is None and status(pair.ps)["jobs"]
    os.mkdir(cgroup)
    t0 = time.monotonic()
    scope2 = pacer.scope_id(cgroup)
    slowest = []

    def attached_again():  # and the daemon answers meanwhile: bcc compiles on a thread, not in the loop
        t = time.monotonic()
        status(pair.ps)
        slowest.append(time.monotonic() - t)
        return (o := pacer.load_owner(scope2)) and o["prog_id"] and attached(cgroup) and o

    owner = wait_for(attached_again, 15, 0.1, "a pacer attached to the new cgroup")
    print(f"attached {time.monotonic() - t0:.2f} s after the cgroup was back; status answered within "
          f"{max(slowest):.2f} s meanwhile")
    assert max(slowest) < 1.0
    assert owner["pid"] == d.pid and attached(cgroup) == [owner["prog_id"]]
    os.kill(lst.pid, signal.SIGTERM)  # the job moves into the new cgroup
    lst.wait(5)
    serve(pair, pair.ps, cgroup, 5201)
    rx = recv(pair, pair.wk, pair.ps, 5201, 4)
    assert mbit(result(rx), 2.0, 4.0) == pytest.approx(40 * HEADER_FACTOR, rel=0.1)

    pair.ps.hostctl("stop", check=True)
    d.wait(10)
    assert d.returncode == 0
    err = d.stderr.read()
    for line in ("the pacer's pins are gone", "the bpf filesystem is not mounted", f"{cgroup} was removed",
                 "exists again: attaching the pacer"):
        assert line in err, err[-3000:]
    assert "Traceback" not in err
    assert_released(cgroup, scope2)
    assert not os.path.exists(pin_dir)
