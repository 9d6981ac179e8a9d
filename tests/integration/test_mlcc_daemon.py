"""`hostctl start --policy mlcc` on real veths, cgroups, TCP and a real switchemu: the flow is
paced to the rate its plan allows on the switch's link towards the receiver; killing
switchemu sends the daemon to local mode (NIC link only) after 3 silent slots and the flow
speeds up; restarting switchemu brings switch mode and the switch's limit back.

The switch's topology gives the receiver's port 40 Mbit/s while the daemon's NIC link is
1 Gbit/s (the veth itself is not shaped): only the switch's feedback can hold the flow to
40 Mbit/s. switchemu listens on an ipc:// socket, which the daemon in its namespace reaches
(unix sockets are not scoped by network namespace)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time

import pytest

from tests.conftest import HOSTCTL, wait_for
from tests.integration.test_pacing_daemon import mbit, recv, serve, start_paced, status

pytestmark = [pytest.mark.root, pytest.mark.netns, pytest.mark.bpf]

SWITCHEMU = os.path.join(sys.prefix, "bin", "switchemu")

TOPO = """
[[switch]]
name = "sw0"
hosts = ["ps=10.77.0.1", "wk=10.77.0.2"]
host_rate = "40mbit"
"""


def start_switch(pair, topo, ep):
    p = subprocess.Popen([SWITCHEMU, "--bind", ep, "--topology", topo, "--log-level", "WARNING"],
                         stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    pair.procs.append(p)
    return p


def test_switch_feedback_paces_the_flow_then_fallback_and_recovery(pair, cgroup, tmp_path):
    topo = tmp_path / "topo.toml"
    topo.write_text(TOPO)
    ep = f"ipc://{tmp_path}/sw.sock"
    sw = start_switch(pair, str(topo), ep)
    serve(pair, pair.ps, cgroup, 5301)
    start_paced(pair, pair.ps, cgroup, 5301, "--policy", "mlcc", "--switch", ep)
    rx = recv(pair, pair.wk, pair.ps, 5301, 14)
    t0 = time.monotonic()

    # switch mode: the plan names the switch's link and holds the flow to its 40 Mbit/s
    st = wait_for(lambda: (s := status(pair.ps)) and s["pacing"]["flows"] and s["pacing"]["flows"][0]["plan"]
                  and s, 10, 0.2, "a planned flow")
    assert st["pacing"]["mlcc"]["mode"] == "switch"
    plan = st["pacing"]["flows"][0]["plan"]
    assert plan["links"] == ["nic", "sw0>wk"] and plan["kind"] == "unknown"  # no iteration size yet
    assert max(plan["schedule_Bps"]) <= 40e6 / 8 * 1.001
    time.sleep(max(0.0, 4.0 - (time.monotonic() - t0)))

    # kill the switch: local mode after 3 silent slots, logged; the flow is planned on the NIC
    os.kill(sw.pid, signal.SIGKILL)
    sw.wait(5)
    t_kill = time.monotonic() - t0
    st = wait_for(lambda: (s := status(pair.ps)) and s["pacing"]["mlcc"]["mode"] == "local" and s, 5, 0.1,
                  "local mode")
    assert st["pacing"]["mlcc"]["fallbacks"] == 1
    time.sleep(max(0.0, 8.5 - (time.monotonic() - t0)))

    # restart it: switch mode again, the limit is back
    start_switch(pair, str(topo), ep)
    t_back = time.monotonic() - t0
    st = wait_for(lambda: (s := status(pair.ps)) and s["pacing"]["mlcc"]["mode"] == "switch" and s, 5, 0.1,
                  "switch mode again")
    assert st["pacing"]["mlcc"]["recoveries"] == 1
    t_sw = time.monotonic() - t0

    out, err = rx.communicate(timeout=60)
    assert rx.returncode == 0, err
    res = json.loads(out)
    before = mbit(res, 1.5, t_kill - 0.2)
    during = mbit(res, t_kill + 1.0, t_back - 0.2)
    after = mbit(res, t_sw + 1.0, 13.5)
    print(f"mlcc daemon: switch {before:.1f}, local {during:.1f}, switch again {after:.1f} Mbit/s")
    assert before == pytest.approx(40, rel=0.08), (before, during, after)
    assert during > 3 * 40, (before, during, after)  # unlimited but for the 1 Gbit/s NIC plan
    assert after == pytest.approx(40, rel=0.08), (before, during, after)


def test_two_connections_to_one_peer_share_the_switch_link(pair, cgroup, tmp_path):
    """Two connections of one job to the same worker: the daemon asks the switch once for both (its
    answer leaves the job out, so it is the same for both) and plans both over the switch's 40 Mbit/s
    link towards the worker, so together they get 40 Mbit/s, not 40 each."""
    topo = tmp_path / "topo.toml"
    topo.write_text(TOPO)
    ep = f"ipc://{tmp_path}/sw.sock"
    start_switch(pair, str(topo), ep)
    serve(pair, pair.ps, cgroup, 5303)
    start_paced(pair, pair.ps, cgroup, 5303, "--policy", "mlcc", "--switch", ep)
    rxs = [recv(pair, pair.wk, pair.ps, 5303, 6) for _ in range(2)]
    st = wait_for(lambda: (s := status(pair.ps)) and len(s["pacing"]["flows"]) == 2
                  and all(f["plan"] for f in s["pacing"]["flows"]) and s, 10, 0.2, "two planned flows")
    assert st["pacing"]["mlcc"]["mode"] == "switch"
    assert [f["plan"]["links"] for f in st["pacing"]["flows"]] == [["nic", "sw0>wk"]] * 2
    got = []
    for rx in rxs:
        out, err = rx.communicate(timeout=60)
        assert rx.returncode == 0, err
        got.append(mbit(json.loads(out), 2.0, 5.5))
    print(f"two connections: {got[0]:.1f} + {got[1]:.1f} Mbit/s")
    assert sum(got) == pytest.approx(40, rel=0.1), got
    assert min(got) > 8, got  # both move (the plan shares the link; TCP does the rest)


def test_a_ps_daemon_reports_its_broadcast_progress_through_the_switch(pair, cgroup, tmp_path):
    """With a [[jobs]] entry saying comm = "ps", the daemon's flow from the PS port is a broadcast
    (Algorithm 2): it reports F_b^max under ps:<address>:<port> to the real switchemu, where another
    client reads it back growing with the bytes the flow carried; without its worker's progress the
    flow gets no Delta (counted as missing progress)."""
    from hostctl.core.deps import ps_name
    from hostctl.core.wire import Code
    from hostctl.policy.switchclient import SwitchClient

    topo = tmp_path / "topo.toml"
    topo.write_text(TOPO.replace("40mbit", "200mbit"))
    ep = f"ipc://{tmp_path}/sw.sock"
    start_switch(pair, str(topo), ep)
    cfg = tmp_path / "hostctl.toml"
    cfg.write_text('[[jobs]]\nname = "p"\nports = [5302]\ncomm = "ps"\n')
    serve(pair, pair.ps, cgroup, 5302)
    d = subprocess.Popen(pair.ps.nsenter(HOSTCTL, "start", "--policy", "mlcc", "--switch", ep, "--config", str(cfg),
                                         "--iface", pair.ps.dev, "--link-rate", "1gbit", "--cgroup", cgroup,
                                         "--rescan", "0.5"),
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    pair.procs.append(d)

    def now() -> dict:  # the daemon's status, {} while it does not answer
        if d.poll() is not None:
            raise AssertionError(f"daemon exited: {d.stderr.read()}")
        r = pair.ps.hostctl("status", "--json")
        return json.loads(r.stdout) if r.returncode == 0 else {}

    # port selectors pick flows when they connect: the receiver connects once the daemon paces
    wait_for(lambda: (s := now()).get("jobs") and s.get("pacing"), 30, 0.2, "pacing daemon ready")
    rx = recv(pair, pair.wk, pair.ps, 5302, 8)
    st = wait_for(lambda: (s := now()) and ((s["pacing"]["flows"] or [{}])[0].get("plan") or {}).get("role") and s,
                  15, 0.2, "a flow with a role")
    assert st["pacing"]["flows"][0]["plan"]["role"] == "broadcast"
    name = ps_name(pair.ps.addr, 5302)

    def iterations() -> int:  # the flow's completed iterations, as the daemon's monitor counts them
        flows = status(pair.ps)["pacing"]["flows"]
        assert flows, "the flow ended before two reports within one iteration"
        return flows[0]["iterations"]

    with SwitchClient([ep]) as c:
        assert c.probe(0.06, timeout_s=5).error is None

        def report() -> int:
            for _ in range(5):  # a slot boundary between the clock read and the switch: stale, ask again
                r = c.exchange(int(time.time() // 0.06), get_progress=[name], timeout_s=1.0)
                if Code.STALE_SLOT not in r.error_codes.values():
                    break
            p = r.progress.get(name)
            assert p is not None, "no progress reported under " + name
            return p.cum_bytes

        # F is per iteration: it starts again when the flow pauses for the monitor's phase gap (a busy
        # machine can pause a bulk flow that long); a pair of reports within one iteration must grow
        tried = []
        for _ in range(5):
            it0 = iterations()
            time.sleep(0.2)  # (the reports that follow are newer than it0)
            got = [report()]
            time.sleep(0.5)
            got.append(report())
            if iterations() == it0:
                break
            tried.append(got)
        else:
            raise AssertionError(f"every pair of reports spanned an iteration end: {tried}")
    assert got[1] > got[0] > 0, got  # the flow keeps carrying bytes, and the reports follow
    st = status(pair.ps)
    assert st["pacing"]["mlcc"]["deps"]["flows"] == 1 and st["pacing"]["mlcc"]["deps"]["progress_missing"] > 0
    out, err = rx.communicate(timeout=60)
    assert rx.returncode == 0, err
