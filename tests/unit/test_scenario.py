"""Scenario files: parsing, expansion of job replicas, ports, and clear errors."""

from __future__ import annotations

import glob
import os
import re
import tomllib

import pytest

from hostctl.core.traffic import shards
from hostctl.errors import ConfigError
from hostctl_lab.bench.runner import host_jobs, policy_order
from hostctl_lab.bench.scenario import PORT_BASE, load_scenario, parse_scenario

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
SCENARIOS = sorted(glob.glob(os.path.join(ROOT, "examples", "scenarios", "*.toml")))


def sc(**over):
    d = {"testbed": {"hosts": 4, "link": "100mbit"},
         "jobs": [{"name": "a", "kind": "ps", "ps": ["h0"], "count": 3, "model": "1MiB"}]}
    d.update(over)
    return parse_scenario(d)


def test_replicas_get_names_ports_and_workers():
    s = sc()
    assert [j.name for j in s.jobs] == ["a-01", "a-02", "a-03"]
    assert [j.ports for j in s.jobs] == [(PORT_BASE,), (PORT_BASE + 1,), (PORT_BASE + 2,)]
    assert all(j.ps_hosts == ("h0",) and j.worker_hosts == ("h1", "h2", "h3") for j in s.jobs)
    assert s.topology.link_bps == 100_000_000 and s.topology.racks == 1
    assert s.policies == ("fifo", "one", "rr") and s.repeat == 3


def test_ps_pool_is_used_round_robin_with_shards():
    s = sc(jobs=[{"name": "b", "ps": ["h0", "h1"], "count": 3, "servers": 2}])
    assert [j.ps_hosts for j in s.jobs] == [("h0", "h1"), ("h0", "h1"), ("h0", "h1")]
    s = sc(jobs=[{"name": "b", "ps": ["h0", "h1"], "count": 3}])
    assert [j.ps_hosts for j in s.jobs] == [("h0",), ("h1",), ("h0",)]
    assert s.jobs[1].worker_hosts == ("h0", "h2", "h3")


def test_allreduce_ports_one_per_rank_and_arrivals():
    s = sc(jobs=[{"name": "r", "kind": "allreduce", "workers": ["h1", "h2", "h3"], "count": 2,
                  "arrival": 1.0, "arrival_step": 0.5}])
    assert s.jobs[0].ports == (PORT_BASE, PORT_BASE + 1, PORT_BASE + 2)
    assert s.jobs[1].ports[0] == PORT_BASE + 3
    assert [j.arrival_s for j in s.jobs] == [1.0, 1.5]


def test_racks_topology():
    s = sc(testbed={"racks": 2, "hosts_per_rack": 3, "link": "100mbit", "uplink": "50mbit"},
           jobs=[{"name": "a", "ps": ["h0"]}])
    t = s.topology
    assert t.hosts == ("h0", "h1", "h2", "h3", "h4", "h5") and t.rack_of == (0, 0, 0, 1, 1, 1)
    assert t.uplink_bps == 50_000_000


def test_tcp_cc_and_sysctls():
    s = sc(testbed={"hosts": 2, "tcp_cc": "cubic", "sysctls": {"net.ipv4.tcp_slow_start_after_idle": 0}},
           jobs=[{"name": "a", "ps": ["h0"]}])
    assert s.topology.tcp_cc == "cubic"
    assert s.topology.sysctls == (("net.ipv4.tcp_slow_start_after_idle", "0"),)


def test_host_cores_default_none_and_reach_the_workers():
    assert sc(testbed={"hosts": 2}).topology.host_cores is None
    s = sc(testbed={"hosts": 3, "host_cores": 1}, jobs=[{"name": "a", "ps": ["h0"]}])
    assert s.topology.host_cores == 1.0


def test_gso_default_on():
    assert sc(testbed={"hosts": 2}).topology.gso is True
    assert sc(testbed={"hosts": 2, "gso": False}).topology.gso is False


def test_cross_traffic_ports_follow_jobs():
    s = sc(cross=[{"src": "h1", "dst": "h0", "duration": 5}])
    assert s.cross[0].port == PORT_BASE + 3 and s.cross[0].name == "cross0"


@pytest.mark.parametrize("over, fragment", [
    ({"testbed": {"hosts": 4, "lnk": "1gbit"}}, "unknown key testbed.lnk"),
    ({"testbed": {"hosts": 1}}, "testbed.hosts = 1 is out of range"),
    ({"testbed": {"hosts": 4, "uplink": "1gbit"}}, "needs racks"),
    ({"testbed": {"racks": 2, "hosts_per_rack": 2}}, "testbed.uplink is required"),
    ({"testbed": {"hosts": 4, "link": "fast"}}, "bad testbed.link"),
    ({"jobs": []}, "at least one [[jobs]]"),
    ({"jobs": [{"name": "a", "kind": "mpi"}]}, "kind 'mpi' is unknown"),
    ({"jobs": [{"name": "a", "kind": "ps"}]}, "jobs[a].ps is required"),
    ({"jobs": [{"name": "a", "ps": ["h9"]}]}, "unknown host 'h9'"),
    ({"jobs": [{"name": "a", "ps": ["h0"]}, {"name": "a", "ps": ["h1"]}]}, "used twice"),
    ({"jobs": [{"name": "a", "kind": "allreduce", "workers": ["h1"]}]}, "at least two workers"),
    ({"jobs": [{"name": "a", "kind": "allreduce"}]}, "only for ps jobs"),
    ({"jobs": [{"name": "a", "ps": ["h0"], "iterations": 0}]}, "iterations = 0 is out of range"),
    ({"jobs": [{"name": "a", "ps": ["h0"], "compute": "fast"}]}, "must be a number"),
    ({"jobs": [{"name": "bad name", "ps": ["h0"]}]}, "name must be"),
    ({"jobs": [{"name": "a", "ps": ["h0"], "buckets": 8}]}, "set backward (0 < backward <= 1) and buckets"),
    ({"jobs": [{"name": "a", "ps": ["h0"], "backward": 0.5}]}, "set backward (0 < backward <= 1) and buckets"),
    ({"jobs": [{"name": "a", "ps": ["h0"], "backward": 1.5, "buckets": 2}]}, "backward = 1.5 is out of range"),
    ({"jobs": [{"name": "a", "ps": ["h0"], "backward": 0.5, "buckets": 0}]}, "buckets = 0 is out of range"),
    ({"jobs": [{"name": "a", "ps": ["h0"], "model": "1KiB", "backward": 0.5, "buckets": 2000}]}, "more than the bytes"),
    ({"jobs": [{"name": "a", "kind": "allreduce", "backward": 0.5, "buckets": 2}]}, "only for kind = \"ps\""),
    ({"bench": {"policies": ["fifo", "best"]}}, "unknown policy 'best'"),
    ({"cross": [{"src": "h1", "dst": "h1", "duration": 3}]}, "src and dst are the same"),
    ({"cross": [{"src": "h1", "dst": "h2"}]}, "cross[0].duration is required"),
    ({"hostctl": {"hosts": ["h7"]}}, "unknown host 'h7'"),
    ({"hostctl": {"workers": "yes"}}, "hostctl.workers must be true or false"),
    ({"extra": 1}, "unknown key extra"),
    ({"testbed": {"hosts": 2, "tcp_cc": "Cubic!"}}, "not a congestion control name"),
    ({"testbed": {"hosts": 2, "sysctls": {"kernel.panic": 1}}}, "only net.ipv4/ipv6/core keys"),
    ({"testbed": {"hosts": 2, "sysctls": 3}}, "testbed.sysctls must be a table"),
    ({"testbed": {"hosts": 2, "host_cores": 0}}, "testbed.host_cores = 0 is out of range"),
    ({"testbed": {"hosts": 2, "host_cores": "one"}}, "testbed.host_cores must be a number"),
    ({"testbed": {"hosts": 2, "gso": "off"}}, "testbed.gso must be true or false"),
])
def test_mistakes_name_the_key(over, fragment):
    with pytest.raises(ConfigError) as e:
        sc(**over)
    assert fragment in str(e.value)


def test_gradient_buckets():
    j = sc(jobs=[{"name": "a", "ps": ["h0"], "model": "1MiB", "backward": 0.67, "buckets": 8}]).jobs[0]
    assert (j.backward, j.buckets) == (0.67, 8)
    plain = sc().jobs[0]
    assert (plain.backward, plain.buckets) == (0.0, 1)


def test_overrides():
    s = sc().with_overrides(iterations=2, policies=("one", "fifo"), repeat=1)
    assert all(j.iterations == 2 for j in s.jobs) and s.policies == ("one", "fifo") and s.repeat == 1
    with pytest.raises(ConfigError, match="unknown policy"):
        sc().with_overrides(policies=("nope",))
    with pytest.raises(ConfigError, match="--repeat"):
        sc().with_overrides(repeat=0)


def test_policy_order_rotates_per_repeat():
    p = ("fifo", "one", "rr")
    assert [policy_order(p, r) for r in range(4)] == [
        ["fifo", "one", "rr"], ["one", "rr", "fifo"], ["rr", "fifo", "one"], ["fifo", "one", "rr"]]


def test_shards_sum_to_model():
    assert shards(10, 3) == [3, 3, 4] and sum(shards(1 << 20, 7)) == 1 << 20


def test_host_jobs_list_what_each_host_sends():
    s = sc(jobs=[{"name": "p", "ps": ["h0"], "count": 2, "model": "2MiB"},
                 {"name": "r", "kind": "allreduce", "workers": ["h0", "h1"]},
                 {"name": "t", "kind": "torch", "workers": ["h1", "h2"]}])
    h0 = host_jobs(s, "h0")
    assert [j["name"] for j in h0] == ["p-01", "p-02", "r"]
    assert h0[0]["ports"] == [PORT_BASE] and h0[0]["model_size"] == 2 << 20
    assert h0[2]["ports"] == [s.jobs[2].ports[0]]
    h1 = host_jobs(s, "h1")
    assert [j["name"] for j in h1] == ["r", "t"] and re.search(h1[1]["match"], "python -m hostctl_lab.workloads.torchjob --world 2 --job t --rank 0")
    assert host_jobs(s, "h3") == []
    w = sc(hostctl={"workers": True}, jobs=[{"name": "p", "ps": ["h0"], "count": 2}])
    h1 = host_jobs(w, "h1")
    assert [j["name"] for j in h1] == ["p-01", "p-02"]
    assert re.search(h1[0]["match"], "python -m hostctl_lab.workloads.ps worker --ps 10.0.0.1:7100 --job p-01 --rank 1")
    assert not re.search(h1[0]["match"], "python -m hostctl_lab.workloads.ps worker --job p-010 --rank 1")
    assert [j.get("ports") for j in host_jobs(w, "h0")] == [[PORT_BASE], [PORT_BASE + 1]]
    # mlcc's dependency rules: the communication pattern of each job, the ring's size
    assert [(j["name"], j.get("comm"), j.get("ring_size")) for j in h0] == [
        ("p-01", "ps", None), ("p-02", "ps", None), ("r", "ring", 2)]
    assert [j.get("comm") for j in host_jobs(w, "h1")] == ["ps", "ps"]  # the workers of a PS job


def test_host_jobs_config_loads_as_the_daemon_reads_it(tmp_path):
    from hostctl.config import build_config
    from hostctl_lab.bench.runner import _toml

    s = sc(jobs=[{"name": "p", "ps": ["h0"], "model": "2MiB"}, {"name": "r", "kind": "allreduce", "workers": ["h0", "h1", "h2"]}])
    f = tmp_path / "h0.toml"
    f.write_text(_toml(host_jobs(s, "h0", workers=True)))
    cfg = build_config(str(f), policy="mlcc")
    assert [(j.name, j.comm, j.ring_size) for j in cfg.jobs] == [("p", "ps", None), ("r", "ring", 3)]


def test_missing_and_broken_files(tmp_path):
    with pytest.raises(ConfigError, match="does not exist"):
        load_scenario(str(tmp_path / "nope.toml"))
    p = tmp_path / "bad.toml"
    p.write_text("name = [")
    with pytest.raises(ConfigError, match="not valid TOML"):
        load_scenario(str(p))


@pytest.mark.parametrize("path", SCENARIOS, ids=[os.path.basename(p) for p in SCENARIOS])
def test_example_scenarios_parse(path):
    s = load_scenario(path)
    assert s.jobs and s.name
    with open(path, "rb") as f:
        assert "description" in tomllib.load(f), "every example scenario says what it shows"


def test_placement1_matches_the_issue():
    s = load_scenario(os.path.join(ROOT, "examples", "scenarios", "placement1.toml"))
    assert len(s.jobs) >= 12 and {j.ps_hosts for j in s.jobs} == {("h0",)}


def test_switch_topology_of_the_testbed():
    from hostctl.core.topology import Topology
    from hostctl_lab.bench.runner import switch_topology

    addr = {f"h{i}": f"10.9.0.{i + 1}" for i in range(8)}.__getitem__
    one = Topology.parse(switch_topology(sc(), addr), filename="t.toml")
    assert one.switch_names() == ["sw0"] and len(one.hosts) == 4
    assert one.path_ids("h0", "h3") == ("h0>sw0", "sw0>h3")
    assert one.capacity_Bps(one.link_index["sw0>h3"]) == 100_000_000 // 8
    racks = parse_scenario({"testbed": {"racks": 2, "hosts_per_rack": 2, "link": "100mbit", "uplink": "50mbit"},
                            "jobs": [{"name": "a", "ps": ["h0"]}]})
    t = Topology.parse(switch_topology(racks, addr), filename="t.toml")
    assert t.path_ids("10.9.0.1", "10.9.0.4") == ("h0>tor0", "tor0>agg", "agg>tor1", "tor1>h3")
    assert t.capacity_Bps(t.link_index["tor0>agg"]) == 50_000_000 // 8


def test_ingress_policies_map_to_one_and_rr_with_the_scenario_rate():
    from hostctl_lab.bench.runner import daemon_policy

    s = sc(bench={"policies": ["fifo", "one-ingress", "rr-ingress"]}, hostctl={"ingress_rate": "95%"})
    assert s.policies == ("fifo", "one-ingress", "rr-ingress") and s.hostctl.ingress_rate == "95%"
    assert sc().hostctl.ingress_rate == "97%"
    assert [daemon_policy(p) for p in ("one-ingress", "rr-ingress", "mlcc-local", "one", "fifo")] == [
        "one", "rr", "mlcc", "one", "fifo"]
    for bad in ("20%", 97, "fast"):
        with pytest.raises(ConfigError, match="ingress_rate"):
            sc(hostctl={"ingress_rate": bad})


def test_slot_setting_reaches_the_pacing_daemons_and_is_bounded():
    assert sc().hostctl.slot_s == 0.06
    assert sc(hostctl={"slot": 0.03}).hostctl.slot_s == 0.03
    with pytest.raises(ConfigError, match="slot"):
        sc(hostctl={"slot": 0.001})


def test_two_rack_scenario_crosses_the_rack1_uplink():
    """examples/scenarios/two-rack.toml: PSes in rack 0, workers in rack 1, a worker host with the
    gradients of two jobs, cross traffic through the same uplink mid-run, phases of several 60 ms slots."""
    s = load_scenario(os.path.join(ROOT, "examples", "scenarios", "two-rack.toml"))
    t = s.topology
    assert t.racks == 2 and t.hosts == tuple(f"h{i}" for i in range(6)) and t.rack_of == (0, 0, 0, 1, 1, 1)
    assert t.link_bps == t.uplink_bps == 500_000_000
    assert 3 <= len(s.jobs) <= 4 and s.policies == ("fifo", "one", "mlcc-local", "mlcc")
    rack = dict(zip(t.hosts, t.rack_of))
    for j in s.jobs:
        assert j.kind == "ps" and {rack[h] for h in j.ps_hosts} == {0} and {rack[h] for h in j.worker_hosts} == {1}
        assert 10 <= j.iterations <= 20
        # the update to the workers (one PS link) spans at least two 60 ms slots
        assert j.model_bytes * j.workers * 8 / t.link_bps >= 2 * s.hostctl.slot_s
    jobs_of = {h: [j.name for j in s.jobs if h in j.worker_hosts] for h in t.hosts}
    assert max(len(v) for v in jobs_of.values()) >= 2
    (c,) = s.cross
    assert rack[c.src] == 1 and rack[c.dst] == 0  # the gradients' direction: rack1:up
    assert c.start_s >= 2.0 and c.duration_s <= 10.0


def test_fabric_prio_runs_fifo_hosts_and_refuses_what_it_cannot_classify():
    from hostctl_lab.bench.runner import daemon_policy

    s = sc(bench={"policies": ["fifo", "fabric-prio"]})
    assert s.policies == ("fifo", "fabric-prio") and daemon_policy("fabric-prio") == "fifo"
    assert sc().with_overrides(policies=("fabric-prio",)).policies == ("fabric-prio",)
    # 7 jobs: more than htb's 8 priorities hold besides the control and default bands
    with pytest.raises(ConfigError, match="fabric-prio.*7 jobs"):
        sc(jobs=[{"name": "a", "kind": "ps", "ps": ["h0"], "count": 7, "model": "1MiB"}],
           bench={"policies": ["fabric-prio"]})
    with pytest.raises(ConfigError, match="--policies lists fabric-prio.*7 jobs"):
        sc(jobs=[{"name": "a", "kind": "ps", "ps": ["h0"], "count": 7, "model": "1MiB"}]).with_overrides(
            policies=("fifo", "fabric-prio"))
    torch = sc(jobs=[{"name": "t", "kind": "torch", "workers": ["h0", "h1"], "model": "1MiB"}])
    with pytest.raises(ConfigError, match="torch job t has no fixed ports"):
        torch.with_overrides(policies=("fabric-prio",))
