"""The benchmark harness end to end: real processes, real TCP, real hostctl daemons
on an emulated testbed."""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import textwrap
import uuid

import pytest

from hostctl.core import traffic
from hostctl.core.wire import WIRE_VERSION
from hostctl_lab.bench.scenario import parse_scenario
from hostctl_lab.testbed.net import NS_PREFIX, Testbed
from hostctl_lab.workloads.summary import load_records, summarize
from tests.conftest import HOSTCTL, PY, sh

pytestmark = [pytest.mark.root, pytest.mark.netns]


def _ps_job(tmp_path, sc, buckets: int) -> dict:
    """Run the 2-host PS job of the test below once on a fresh testbed; its summary."""
    job, t = sc.jobs[0], sc.topology
    tb = Testbed("a" + uuid.uuid4().hex[:7], t)
    try:
        tb.up()
        ps = tb.popen("h0", [PY, "-m", "hostctl_lab.workloads.ps", "server", "--bind", tb.host("h0").addr, "--port",
                             "7100", "--workers", "2", "--iterations", "6", "--shard-bytes", str(job.model_bytes),
                             "--job", "j"], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        outs = [str(tmp_path / f"w{k}.json") for k in range(2)]
        ws = [tb.popen("h1", [PY, "-m", "hostctl_lab.workloads.ps", "worker", "--job", "j", "--rank", str(k), "--ps",
                              f"{tb.host('h0').addr}:7100", "--iterations", "6", "--compute", "0.1",
                              "--model-bytes", str(job.model_bytes), "--out", outs[k],
                              *(["--backward", "1", "--buckets", str(buckets)] if buckets > 1 else [])],
                       stderr=subprocess.PIPE, text=True) for k in range(2)]
        for w in ws:
            assert w.wait(60) == 0, w.stderr.read()
        assert ps.wait(10) == 0
        return summarize(load_records(outs))
    finally:
        tb.down()


@pytest.mark.parametrize("buckets", [1, 4])
def test_ps_job_finishes_close_to_its_analytic_jct(tmp_path, buckets):
    """2 hosts at 100 Mbit/s: PS on h0, 2 workers on h1; JCT within 20% of bytes / rate + compute.
    With 4 gradient buckets over the whole compute (backward = 1) the gradient overlaps compute:
    by hand 0.168 s update + 0.193 s (first bucket at 25 ms, then 2 MiB at 100 Mbit/s) = 0.36 s an
    iteration instead of 0.44 s (18% less), so the median iteration must beat the one-burst analytic
    one by > 8% (the JCT varies more: one TCP timeout adds 0.2 s), and the job not beat the lower bound.

    The job runs a second time if the first run misses: on this shared VM a stall of the machine
    slowed every iteration of one CI run by 40% (median iteration 1.42x, JCT 1.24x; 0.92-1.03x in
    runs before and after). A job that is off twice in a row fails."""
    overlap = {"backward": 1.0, "buckets": buckets} if buckets > 1 else {}
    sc = parse_scenario({"testbed": {"hosts": 2, "link": "100mbit"},
                         "jobs": [{"name": "j", "ps": ["h0"], "workers": ["h1", "h1"], "model": "1MiB",
                                   "compute": 0.1, "iterations": 6, **overlap}]})
    job, t = sc.jobs[0], sc.topology
    net = traffic.network(t.hosts, t.rack_of, t.racks, t.link_bps, None)
    analytic = traffic.analytic_s(job, net)
    # by hand: 6 x (2 MiB down + 0.1 s + 2 MiB up) at 100 Mbit/s
    assert analytic == pytest.approx(6 * (2 * 2 * 2**20 * 8 / 100e6 + 0.1))

    def close(s: dict) -> bool:
        med = sorted(s["iteration_s"])[len(s["iteration_s"]) // 2]
        print(f"buckets {buckets}: JCT {s['jct_s']:.3f} s = {s['jct_s'] / analytic:.3f} x analytic, "
              f"median iteration {med / (analytic / 6):.3f} x")
        if buckets == 1:
            return abs(s["jct_s"] / analytic - 1) <= 0.2
        # the median iteration: one iteration slowed by a TCP timeout must not hide the overlap
        return med <= 0.92 * analytic / 6

    s = _ps_job(tmp_path, sc, buckets)
    assert s["errors"] == []
    if not close(s):
        s = _ps_job(tmp_path, sc, buckets)
        assert s["errors"] == []
        assert close(s), ("JCT off the analytic one twice" if buckets == 1 else "the gradient did not overlap compute",
                          s["jct_s"], s["iteration_s"], analytic)
    assert s["jct_s"] >= traffic.standalone_s(job, net), "faster than the lower bound: the bound is wrong"
    assert len(s["barrier_wait_std_s"]) == 6


def tiny_scenario(path, extra: str = "") -> str:
    path.write_text(textwrap.dedent("""
        name = "tiny"
        description = "CI: 2 PS jobs on h0, one all-reduce job, cross traffic"
        [testbed]
        hosts = 3
        link = "100mbit"
        host_cores = 1
        [hostctl]
        rr_interval = 1.0
        rescan = 0.2
        workers = true
        [bench]
        policies = ["fifo", "one"]
        repeat = 1
        timeout = 120
        warmup = 0.3
        [[jobs]]
        name = "ps"
        count = 2
        ps = ["h0"]
        model = "512KiB"
        compute = 0.05
        iterations = 8
        [[jobs]]
        name = "ring"
        kind = "allreduce"
        workers = ["h1", "h2"]
        model = "4MiB"
        compute = 0.05
        iterations = 8
        [[cross]]
        name = "bulk"
        src = "h1"
        dst = "h0"
        start = 0.2
        duration = 1.5
    """) + extra)
    return str(path)


def test_tiny_bench_writes_complete_json_and_plots(tmp_path):
    before = set(os.listdir("/run/netns")) if os.path.isdir("/run/netns") else set()
    out = tmp_path / "out"
    r = sh([HOSTCTL, "bench", tiny_scenario(tmp_path / "tiny.toml"), "--out", str(out)], check=False, timeout=600)
    assert r.returncode == 0, r.stdout[-2000:] + r.stderr[-2000:]
    d = json.loads((out / "tiny.json").read_text())
    assert [x["policy"] for x in d["runs"]] == ["fifo", "one"]
    for run in d["runs"]:
        assert run["ok"], run["error"]
        assert set(run["jobs"]) == {"ps-01", "ps-02", "ring"}
        for j in run["jobs"].values():
            assert j["jct_s"] > 0 and len(j["barrier_wait_std_s"]) == 8 and not j["errors"]
            # host_cores = 1: the steps ran on the hosts' shared processors, never faster than alone
            assert j["compute_wall_mean_s"] >= 0.05 * 0.95
        assert run["cross"]["bulk"]["bytes"] > 0
        assert run["links"]["h0:up"]["bytes"] > 8 * 2 * 2 * 512 * 1024  # 2 jobs x 2 workers x 8 updates
        assert all(isinstance(ln["drops"], int) and ln["drops"] >= 0 for ln in run["links"].values())
        assert 0 < run["cpu"]["mean_pct"] <= 100
        act = run["active"]  # from warmup (0.3 s) to the first job's end: all three jobs running
        first_end = min(j["arrival_s"] + j["jct_s"] for j in run["jobs"].values())
        assert 0.3 <= act["start_s"] < act["end_s"] <= run["duration_s"] and act["end_s"] >= first_end
        assert act["links"]["h0:up"]["seconds"] == pytest.approx(act["end_s"] - act["start_s"])
        assert 0 < act["links"]["h0:up"]["bytes"] <= run["links"]["h0:up"]["bytes"]
        # a sub-window of the run: never more on any link, and less in all (the ring, twice as long as the
        # PS jobs, is still sending after the first job ends). Not h0:up alone: on a loaded machine the PS
        # jobs may start after the warmup and end together, and then h0 sends nothing outside the window.
        assert all(act["links"][n]["bytes"] <= ln["bytes"] for n, ln in run["links"].items())
        assert sum(ln["bytes"] for ln in act["links"].values()) < sum(ln["bytes"] for ln in run["links"].values())
        assert 0 < act["links"]["h0:up"]["utilisation"] <= 1.05
    one = next(x for x in d["runs"] if x["policy"] == "one")
    # the policy daemon on h0 saw both PS jobs and put them in different bands
    seen = one["daemons"]["h0"]["jobs"]
    assert set(seen) == {"ps-01", "ps-02"} and {seen[j]["bands"][0] for j in seen} == {0, 1}
    assert all(seen[j]["flows"] == 2 and seen[j]["tx_bytes"] > 0 for j in seen)
    ring = one["daemons"]["h1"]["jobs"]["ring"]
    assert ring["flows"] >= 1 and ring["tx_bytes"] > 0
    # workers = true: the worker hosts order their workers' gradients under the same job names. Bytes
    # counted under the job's name and a band prove it; not the flows list: it holds the connections alive
    # at a status sample (about 1 s apart), and on a loaded machine a worker's short job can fall between two.
    for h in ("h1", "h2"):
        wk = one["daemons"][h]["jobs"]
        assert {"ps-01", "ps-02"} <= set(wk)
        assert all(wk[j]["tx_bytes"] > 0 and wk[j]["bands"] for j in ("ps-01", "ps-02")), wk
    s = d["summary"]
    assert s["fifo"]["ratio_vs_fifo"] == pytest.approx(1.0) and s["one"]["ratio_vs_fifo"] > 0
    assert d["lower_bound"]["avg_jct_s"] > 0
    for p in ("tiny_jct.png", "tiny_barrier_cdf.png"):
        assert (out / p).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert "policy" in r.stdout and "fifo" in r.stdout
    after = set(os.listdir("/run/netns")) if os.path.isdir("/run/netns") else set()
    assert not {n for n in after - before if n.startswith(NS_PREFIX)}, "bench left namespaces behind"


@pytest.mark.bpf
def test_cap_bench_paces_ps_jobs_in_the_testbed(tmp_path):
    """policy cap through the whole harness: the daemon on h0 (entered with nsenter, in
    h0's cgroup scope) holds each PS job to 20 Mbit/s of a 100 Mbit/s link, so the jobs take
    at least their bytes at the cap."""
    path = tmp_path / "cap.toml"
    path.write_text(textwrap.dedent("""
        name = "capped"
        [testbed]
        hosts = 3
        link = "100mbit"
        [hostctl]
        cap = "20mbit"
        rescan = 0.2
        hosts = ["h0"]
        [bench]
        policies = ["cap"]
        repeat = 1
        timeout = 120
        [[jobs]]
        name = "ps"
        count = 2
        ps = ["h0"]
        model = "256KiB"
        compute = 0.02
        iterations = 6
    """))
    out = tmp_path / "out"
    r = sh([HOSTCTL, "bench", str(path), "--out", str(out)], check=False, timeout=600)
    assert r.returncode == 0, r.stdout[-2000:] + r.stderr[-2000:]
    (run,) = json.loads((out / "capped.json").read_text())["runs"]
    assert run["ok"], run["error"]
    assert set(run["daemons"]["h0"]["jobs"]) == {"ps-01", "ps-02"}
    per_job_bits = 6 * 2 * 256 * 1024 * 8  # 6 updates to 2 workers
    for j in run["jobs"].values():
        assert j["jct_s"] >= 0.85 * per_job_bits / 20e6, j["jct_s"]  # paced: at the cap or slower
        assert j["jct_s"] < 3 * per_job_bits / 20e6 + 2.0, j["jct_s"]


def test_fabric_prio_oracle_serves_the_first_job_first(tmp_path):
    """bench policy fabric-prio: fifo daemons on the hosts, strict job priority in the emulated switch in
    mlcc-fixed's order (a before b for these names). Both jobs' updates meet at h2's switch port: a's go
    first every iteration, so a ends before b, and the switch counted each job's bytes in its band."""
    path = tmp_path / "fp.toml"
    path.write_text(textwrap.dedent("""
        name = "fprio"
        [testbed]
        hosts = 3
        link = "100mbit"
        [hostctl]
        rescan = 0.2
        [bench]
        policies = ["fabric-prio"]
        repeat = 1
        timeout = 120
        [[jobs]]
        name = "a"
        ps = ["h0"]
        workers = ["h2"]
        model = "2MiB"
        compute = 0.02
        iterations = 6
        [[jobs]]
        name = "b"
        ps = ["h1"]
        workers = ["h2"]
        model = "2MiB"
        compute = 0.02
        iterations = 6
    """))
    out = tmp_path / "out"
    r = sh([HOSTCTL, "bench", str(path), "--out", str(out)], check=False, timeout=600)
    assert r.returncode == 0, r.stdout[-2000:] + r.stderr[-2000:]
    (run,) = json.loads((out / "fprio.json").read_text())["runs"]
    assert run["ok"], run["error"]
    from hostctl_lab.bench.scenario import PORT_BASE

    fb = run["fabric_bands"]
    assert fb["order"] == [[PORT_BASE], [PORT_BASE + 1]]  # a's PS port, then b's
    h2 = fb["bytes"]["h2"]  # 0 control, 1 a, 2 b, 3 the rest
    assert len(h2) == 4 and h2[1] > 6 * 2 * 2**20 * 0.9 and h2[2] > 6 * 2 * 2**20 * 0.9, h2
    # a first (measured: a 0.72 of b's JCT, where fifo gave 0.84-1.07); how strictly the switch serves the
    # listed ports first is test_testbed.py's test_prioritize_fabric_serves_the_listed_ports_first
    jct = {n: j["jct_s"] for n, j in run["jobs"].items()}
    assert jct["a"] < jct["b"], jct


@pytest.mark.bpf
def test_mlcc_bench_runs_with_and_without_switchemu(tmp_path):
    """policy mlcc through the whole harness on two racks: with switchemu (one per run, on an
    ipc socket, its topology written from the testbed), with switchemu but without Algorithm 2
    (mlcc-nodeps) and in local mode; every host with DL traffic runs the daemon, every run
    finishes, the jobs' comm patterns reach the daemons, nothing is left behind."""
    path = tmp_path / "mlcc.toml"
    path.write_text(textwrap.dedent("""
        name = "mlcc-tiny"
        [testbed]
        racks = 2
        hosts_per_rack = 2
        link = "100mbit"
        uplink = "50mbit"
        [hostctl]
        rescan = 0.2
        [bench]
        policies = ["mlcc", "mlcc-local", "mlcc-nodeps"]
        repeat = 1
        timeout = 120
        [[jobs]]
        name = "ps"
        ps = ["h0"]
        model = "512KiB"
        compute = 0.05
        iterations = 4
        [[jobs]]
        name = "ring"
        kind = "allreduce"
        workers = ["h1", "h2", "h3"]
        model = "512KiB"
        compute = 0.05
        iterations = 4
    """))
    before = set(sh(["ip", "netns", "list"]).stdout.split())
    out = tmp_path / "out"
    r = sh([HOSTCTL, "bench", str(path), "--out", str(out)], check=False, timeout=600)
    assert r.returncode == 0, r.stdout[-2000:] + r.stderr[-2000:]
    res = json.loads((out / "mlcc-tiny.json").read_text())
    runs = {run["policy"]: run for run in res["runs"]}
    assert set(runs) == {"mlcc", "mlcc-local", "mlcc-nodeps"}
    for pol, run in runs.items():
        assert run["ok"], (pol, run["error"])
        assert set(run["daemon_cpu"]) == {"h0", "h1", "h2", "h3"}  # workers run the policy too
        assert all(d["policy"] == pol for d in run["daemons"].values())
    deps = {pol: [d["mlcc"]["deps"] for d in run["daemons"].values() if d.get("mlcc")] for pol, run in runs.items()}
    assert deps["mlcc"] and all(d["enabled"] for d in deps["mlcc"])
    # the flows had roles (ps / ring from the bench's config): Algorithm 2 ran on them
    assert sum(d["delta_flows"] + d["notifications_sent"] + d["progress_missing"] for d in deps["mlcc"]) > 0
    assert deps["mlcc-nodeps"] and not any(d["enabled"] or d["notifications_sent"] for d in deps["mlcc-nodeps"])
    # every switch-mode daemon spoke the current wire version with the bench's switchemu; local mode has none
    versions = {pol: [d["mlcc"]["wire_versions"] for d in run["daemons"].values() if d.get("mlcc")]
                for pol, run in runs.items()}
    assert versions["mlcc"] and all(set(v.values()) == {WIRE_VERSION} for v in versions["mlcc"])
    assert all(v == {} for v in versions["mlcc-local"])
    # the switch's booking at the end of each switch run (docs/switchemu.md, "Booking"); none in local mode
    for pol in ("mlcc", "mlcc-nodeps"):
        bk = runs[pol]["booking"]
        w = bk["worst"]
        assert w["link"] in bk["links"] and w["slots"] > 0 and 0 < w["slot_peak_ratio"] <= w["peak_ratio"], bk
        assert 0 <= w["over_slots"] <= w["slots"] and w["worst_flows"] >= 1
    assert "booking" not in runs["mlcc-local"]
    raw = [d for d in os.listdir(res["raw_dir"]) if d.endswith("-mlcc")]
    topo = open(os.path.join(res["raw_dir"], raw[0], "switch-topology.toml")).read()
    assert 'name = "tor0"' in topo and 'uplink_rate = "50000000bit"' in topo
    after = set(sh(["ip", "netns", "list"]).stdout.split())
    assert not {n for n in after - before if n.startswith(NS_PREFIX)}, "bench left namespaces behind"


@pytest.mark.skipif(importlib.util.find_spec("torch") is None,
                    reason="torch is not installed: pip install -e './lab[torch]' runs the PyTorch job test")
def test_pytorch_job_runs_through_hostctl(tmp_path):
    p = tmp_path / "torch.toml"
    p.write_text(textwrap.dedent("""
        name = "torchtiny"
        description = "CI: one PyTorch gloo job over two hosts"
        [testbed]
        hosts = 2
        link = "100mbit"
        [bench]
        policies = ["one"]
        repeat = 1
        timeout = 180
        [[jobs]]
        name = "gloo"
        kind = "torch"
        workers = ["h0", "h1"]
        model = "1MiB"
        compute = 0.05
        iterations = 20
    """))
    out = tmp_path / "out"
    r = sh([HOSTCTL, "bench", str(p), "--out", str(out)], check=False, timeout=600)
    assert r.returncode == 0, r.stdout[-2000:] + r.stderr[-2000:]
    run = json.loads((out / "torchtiny.json").read_text())["runs"][0]
    assert run["ok"], run["error"]
    assert run["jobs"]["gloo"]["jct_s"] > 0
    # 2 ranks all-reduce 1 MiB 3 times: each host sends at least 3 x 1 MiB / 2 x 2(W-1)
    assert run["links"]["h0:up"]["bytes"] > 3 * 2**20
    gloo = run["daemons"]["h0"]["jobs"]
    assert list(gloo) == ["gloo"], "only the rank in h0's namespace is a job there"
    assert gloo["gloo"]["flows"] >= 1 and gloo["gloo"]["tx_bytes"] > 0


def test_sigterm_tears_the_testbed_down(tmp_path):
    """SIGTERM (timeout(1), systemd, a CI limit) in the middle of a run: the bench removes its
    testbed, says so, and exits 143."""
    import signal
    import time

    def ours() -> set[str]:
        names = os.listdir("/run/netns") if os.path.isdir("/run/netns") else []
        return {n for n in names if n.startswith(NS_PREFIX + "b")}

    before = ours()
    p = subprocess.Popen([HOSTCTL, "bench", tiny_scenario(tmp_path / "t.toml"), "--policies", "fifo", "--out",
                          str(tmp_path / "out")], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + 120
        while not (ours() - before) and time.monotonic() < deadline and p.poll() is None:
            time.sleep(0.2)
        made = ours() - before
        assert made, "the bench built no testbed"
        time.sleep(2.0)  # into the run: daemons and jobs started
        p.send_signal(signal.SIGTERM)
        _, err = p.communicate(timeout=120)
    finally:
        if p.poll() is None:
            p.kill()
            p.wait(10)
    assert p.returncode == 143, err[-2000:]
    assert "terminated (SIGTERM)" in err and "Traceback" not in err
    assert not (made & ours()), "the terminated bench left its namespaces"


def test_bench_errors_are_one_line(tmp_path):
    bad = tmp_path / "bad.toml"
    bad.write_text("[testbed]\nhosts = 2\n[[jobs]]\nname = 'x'\nkind = 'ps'\n")
    r = sh([HOSTCTL, "bench", str(bad)], check=False)
    assert r.returncode == 2 and "jobs[x].ps is required" in r.stderr and "Traceback" not in r.stderr
    r = sh([HOSTCTL, "bench", str(tmp_path / "missing.toml")], check=False)
    assert r.returncode == 2 and "does not exist" in r.stderr
    r = sh([HOSTCTL, "bench", tiny_scenario(tmp_path / "t.toml"), "--policies", "fifo,best"], check=False)
    assert r.returncode == 2 and "unknown policy 'best'" in r.stderr
