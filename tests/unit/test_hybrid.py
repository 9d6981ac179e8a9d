"""Policy mlcc-bands (the hybrid of MLCC and TensorLights): its config and flags, and its bands in
MLCC's fabric job order. The daemon runs with the fake datapath, fake clocks and a fake switch: the
job MlccControl plans first (its ``job_order`` in status, the order of ``_plan_ordered``) must be
band 0 of the classifier table, on every host and at every rotation, while the pacer gets the
planned rates of the same flows."""

from __future__ import annotations

import json
import socket
import subprocess
import sys
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from hostctl.config import Config, build_config, reload_config
from hostctl.policy import POLICIES as TABLE
from hostctl.core.bands import FABRIC, assign_bands, priority_order, rr_epoch
from hostctl.core.joborder import fabric_order, fabric_rank
from hostctl.core.plan import band_classid, build_tc_plan
from hostctl.core.types import FlowKey, Job, JobSpec
from hostctl.daemon import Daemon
from hostctl.datapath.fake import FakeDatapath
from hostctl.errors import ConfigError
from hostctl.policy.mlcc import FlowIn, MlccControl
from hostctl.policy.switchclient import ExchangeResult

from tests.unit.test_daemon import Clock, ScriptedDiscovery

HOSTCTL = Path(sys.executable).parent / "hostctl"
PS = "10.0.0.1"
SLOT = 0.06
C = 1_000_000_000 // 8


# ------------------------------------------------------------------ config and flags

def test_policy_name_and_what_it_turns_on():
    spec = TABLE["mlcc-bands"]
    assert spec.pacing and spec.plans_mlcc and spec.bands == FABRIC and spec.classifies
    c = build_config(policy="mlcc-bands", ports="9000")
    assert c.pacing and c.plans_mlcc and c.spec.bands == FABRIC and not c.band_rotates
    assert c.job_order == "none" and c.fabric_order == "fixed"  # the bands need an order: fixed by default
    r = build_config(policy="mlcc-bands", ports="9000", job_order="rotate", rr_interval=4.0)
    assert r.fabric_order == "rotate" and r.band_rotates
    s = build_config(policy="mlcc-bands", ports="9000", switch="tcp://10.0.0.9:5555", job_order="fixed")
    assert s.switch == ("tcp://10.0.0.9:5555",) and s.fabric_order == "fixed"


def test_the_parents_are_unchanged():
    m = build_config(policy="mlcc", ports="9000")
    assert m.spec.bands == "fifo" and m.fabric_order == "none" and m.plans_mlcc and not m.band_rotates
    o = build_config(policy="one", ports="9000")
    assert o.spec.bands == "one" and not o.pacing and not o.plans_mlcc
    assert build_config(policy="rr", ports="9000").band_rotates
    with pytest.raises(ConfigError, match="needs --policy mlcc with --switch"):
        build_config(policy="mlcc", ports="9000", job_order="fixed")  # mlcc's order still needs switches


def test_policy_from_the_config_file(tmp_path):
    f = tmp_path / "hostctl.toml"
    f.write_text('policy = "mlcc-bands"\nswitch = "ipc:///run/sw.sock"\njob_order = "rotate"\nbands = 3\n'
                 '[[jobs]]\nname = "a"\nports = [9000]\n')
    c = build_config(str(f))
    assert (c.policy, c.switch, c.fabric_order, c.bands) == ("mlcc-bands", ("ipc:///run/sw.sock",), "rotate", 3)
    m = build_config(str(f), policy="mlcc")  # the flag wins: mlcc with the same order, and no bands
    assert m.policy == "mlcc" and m.spec.bands == "fifo" and m.fabric_order == "rotate"


@pytest.mark.parametrize("kw, fragment", [
    ({"ingress_rate": "97%"}, "policy mlcc-bands orders egress only"),
    ({"curve_keys": "/etc/k"}, "curve_keys needs switch endpoints"),
    ({"job_order": "largest"}, "unknown job order 'largest'"),
    ({"job_order": "flat"}, "give --job-order fixed, rotate or smallest, not flat"),
    ({"horizon": 0}, "horizon must be within 1..64"),
])
def test_mistakes_are_one_clear_error(kw, fragment):
    with pytest.raises(ConfigError, match=fragment):
        build_config(policy="mlcc-bands", ports="9000", **kw)
    with pytest.raises(ConfigError, match="policy mlcc-bands needs DL jobs"):
        build_config(policy="mlcc-bands")


def test_reload_keeps_the_order_and_its_interval():
    old = build_config(policy="mlcc-bands", ports="9000", job_order="rotate")
    merged, changed, refused = reload_config(old, build_config(policy="mlcc-bands", ports="9000,9001",
                                                               job_order="fixed", rr_interval=5.0))
    assert changed == ["jobs (ports, pids, match, [[jobs]])"]
    assert merged.fabric_order == "rotate" and merged.rr_interval_s == old.rr_interval_s
    assert any(r.startswith("job_order rotate -> fixed refused") for r in refused)
    assert any(r.startswith("rr_interval") for r in refused)


@pytest.fixture
def listeners():
    socks = []
    for _ in range(3):
        s = socket.socket()
        s.bind(("127.0.0.1", 0))
        s.listen()
        socks.append(s)
    yield [s.getsockname()[1] for s in socks]
    for s in socks:
        s.close()


def test_start_flags_dry_run_prints_bands_in_mlccs_order_and_the_pacer(listeners, tmp_path):
    r = subprocess.run([str(HOSTCTL), "start", "--dry-run", "--policy", "mlcc-bands", "--iface", "lo",
                        "--link-rate", "1gbit", "--ports", ",".join(map(str, listeners)), "--no-containers"],
                       capture_output=True, text=True, timeout=120, cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    out = json.loads(r.stdout)
    ids = [f"ps:127.0.0.1:{p}" for p in listeners]
    assert set(out["assignment"]) == set(ids)
    assert sorted(ids, key=out["assignment"].get) == fabric_order(ids, "fixed")
    assert out["band_order"] == "fixed" and out["plan"]["classify"] and out["classifier"] is not None
    assert out["pacing"]["mlcc"] == {"switch": [], "mode": "local", "horizon": 10, "nic_capacity_Bps": C,
                                     "job_order": "fixed"}


def test_start_flag_mistake_is_one_line(tmp_path):
    r = subprocess.run([str(HOSTCTL), "start", "--dry-run", "--policy", "mlcc-bands", "--iface", "lo",
                        "--link-rate", "1gbit", "--ports", "9000", "--ingress-rate", "97%"],
                       capture_output=True, text=True, timeout=120, cwd=tmp_path)
    assert r.returncode == 2 and r.stdout == ""
    assert r.stderr.count("\n") == 1 and "policy mlcc-bands orders egress only" in r.stderr


# ------------------------------------------------------------------ the band order is MLCC's job order

def test_fabric_order_is_mlccs_ranking():
    ids = [f"job{i}" for i in range(12)]
    for order, epoch in (("fixed", 0), ("rotate", 3), ("rotate", 4)):
        want = sorted(ids, key=lambda j: (fabric_rank(j, order, epoch), j))
        assert fabric_order(ids, order, epoch) == want
        assert priority_order(dict.fromkeys(ids), FABRIC, epoch, order) == want
    # model sizes play no part (unlike one's smaller-model-first)
    sizes = {j: 10 ** (i % 3 + 3) for i, j in enumerate(ids)}
    assert priority_order(sizes, FABRIC, 0, "fixed") == fabric_order(ids, "fixed")
    for unranked in ("none", "flat"):
        with pytest.raises(ValueError):
            fabric_order(ids, unranked)
    # 12 jobs on 6 bands: two per band, in that order; one job alone: no bands (no contention)
    bands = assign_bands(dict.fromkeys(ids), FABRIC, 6, 0, "fixed")
    assert [bands[j] for j in fabric_order(ids, "fixed")] == [0, 0, 1, 1, 2, 2, 3, 3, 4, 4, 5, 5]
    assert assign_bands({"a": None}, FABRIC, 6, 0, "fixed") == {}


class FakeSwitch:
    """Answers every exchange, with no other hosts' load."""

    def exchange(self, slot, **_kw) -> ExchangeResult:
        return ExchangeResult(slot=slot, latency_s={"fake": 1e-4})

    def close(self) -> None:
        pass


@settings(max_examples=40, deadline=None)
@given(names=st.lists(st.text("abcdefghij-:.0123456789", min_size=1, max_size=12), min_size=2, max_size=7,
                      unique=True),
       order=st.sampled_from(["fixed", "rotate"]), t=st.integers(1_000_000, 10_000_000))
def test_band_order_equals_the_order_mlcc_plans_in(names, order, t):
    """Every host computes the bands from the job ids alone; the planner of any host that carries the
    jobs plans them in the same order: the job it plans first is band 0."""
    wall = t * SLOT
    ctl = MlccControl(C, SLOT, switch=FakeSwitch(), wall=lambda: wall, job_order=order, order_interval_s=2.0)
    flows = [FlowIn(FlowKey(PS, 9000 + i, "10.0.0.2", 40000), j, 1e6, C, 0.0) for i, j in enumerate(names)]
    ctl.tick(flows)
    planned = ctl.status()["job_order"]["jobs"]
    # the rotation count of the slot planned (t * SLOT may round to just below its boundary)
    epoch = rr_epoch(ctl.slot_now() * SLOT, 2.0)
    bands = assign_bands(dict.fromkeys(names), FABRIC, 7, epoch, order)
    assert sorted(names, key=bands.get) == planned
    assert bands[planned[0]] == 0


# ------------------------------------------------------------------ the daemon: bands and pacer together

def flow(lport, rport=40000, raddr="10.0.0.2"):
    return FlowKey(PS, lport, raddr, rport)


def make(job_order="none", names=("ja", "jb", "jc"), rr_interval=2.0):
    specs = tuple(JobSpec(name=n, ports=(9000 + i,)) for i, n in enumerate(names))
    cfg = Config(policy="mlcc-bands", jobs=specs, switch=("ipc:///tmp/hybrid-none.sock",), job_order=job_order,
                 rr_interval_s=rr_interval, plan_offset_s=0.0).validate()
    plan = build_tc_plan("eth0", 10**9, 6, 10**8, cfg.spec.classifies)
    dp = FakeDatapath()
    jobs = [Job(n, "config", listen_ports=(9000 + i,)) for i, n in enumerate(names)]
    wall, mono = Clock(1_000_000 * SLOT + 0.001), Clock(100.0)
    d = Daemon(cfg, plan, dp, ScriptedDiscovery(jobs), wall=wall, mono=mono, switch=FakeSwitch())
    dp.setup(plan)
    return d, dp, wall, mono


def step(d, wall, mono, dt=SLOT):
    wall.t += dt
    mono.t += dt
    if d.current_epoch() != d.epoch:
        d.reassign()
    d.pace_tick(mono.t)


def band_of(d, dp, job):
    return dp.table.slot_classid[d.table.slots[job]]


def test_daemon_sets_bands_in_mlccs_order_and_paces_the_same_flows():
    d, dp, wall, mono = make()
    assert dp.plan.classify and d.pace is not None and d.pace.rates.ctl is not None
    d.scan()
    d.reassign()
    step(d, wall, mono)  # the selectors reach the pacer's maps
    keys = [flow(9000 + i) for i in range(3)]
    for k in keys:
        assert dp.connect(k)
    step(d, wall, mono)
    ns = int(mono.t * 1e9)
    for k in keys:
        dp.transfer(k, 400_000, ns, ns + 50_000_000)
    step(d, wall, mono)
    order = d.pace.rates.ctl.status()["job_order"]
    assert order["order"] == "fixed" and order["jobs"] == fabric_order(["ja", "jb", "jc"], "fixed")
    for band, job in enumerate(order["jobs"]):
        assert d.assignment[job] == band and band_of(d, dp, job) == band_classid(band)
        assert dp.classify(keys[["ja", "jb", "jc"].index(job)]) == band_classid(band)
    assert set(dp.pace_table.flow_rates) == set(keys)  # the planner's rates were written for every flow
    assert all(r > 1 for r in dp.pace_table.flow_rates.values())
    d.refresh_status()
    st_ = d.status(max_age_s=1e9)
    assert st_["policy"] == "mlcc-bands" and st_["band_order"] == "fixed" and st_["next_rotation"] is None
    assert {j["job_id"]: j["band"] for j in st_["jobs"]} == d.assignment
    assert st_["pacing"]["mlcc"]["mode"] == "switch"


def test_rotating_order_moves_bands_and_planner_together():
    d, dp, wall, mono = make(job_order="rotate", rr_interval=0.6)
    d.scan()
    d.reassign()
    keys = [flow(9000 + i) for i in range(3)]
    step(d, wall, mono)
    for k in keys:
        dp.connect(k)
    leaders = set()
    for _ in range(60):  # 3.6 s: six rotations of 0.6 s
        step(d, wall, mono)
        planned = d.pace.rates.ctl.status()["job_order"]["jobs"]
        assert sorted(d.assignment, key=d.assignment.get) == planned, (wall.t, d.assignment, planned)
        assert band_of(d, dp, planned[0]) == band_classid(0)
        leaders.add(planned[0])
    assert d.stats.rotations >= 4 and len(leaders) >= 2
    assert d.status(max_age_s=0)["next_rotation"] is not None


def test_two_hosts_with_different_jobs_agree_on_the_order_of_the_ones_they_share():
    a, dpa, *_ = make(names=("ja", "jb", "jc"))
    b, dpb, *_ = make(names=("jc", "jb", "jd", "ja"))
    for d in (a, b):
        d.scan()
        d.reassign()
    shared = ["ja", "jb", "jc"]
    assert sorted(shared, key=a.assignment.get) == [j for j in sorted(b.assignment, key=b.assignment.get)
                                                    if j in shared]


def test_teardown_restores_the_interface_and_releases_the_pacer():
    d, dp, wall, mono = make()
    d.scan()
    d.reassign()
    step(d, wall, mono)
    dp.connect(flow(9000))
    step(d, wall, mono)
    d.stop.set()
    d.run()  # setup (idempotent), the loop ends at once, teardown
    assert dp.torn_down == 1 and dp.root == dp.previous_root
    assert all(r.rate_Bps == r.orig_rate_Bps for r in dp.kflows.values())


# ------------------------------------------------------------------ the bench: runner and report

RACKS = Path(__file__).resolve().parents[2] / "examples" / "scenarios" / "racks-uplink.toml"


def bench_argv(policy, tmp_path, monkeypatch) -> dict[str, list[str]]:
    """Each host's `hostctl start` argv in a bench run of ``policy`` on racks-uplink (no testbed: the
    processes are recorded, switchemu is not started)."""
    from types import SimpleNamespace

    from hostctl_lab.bench import runner
    from hostctl_lab.bench.scenario import load_scenario

    sc = load_scenario(str(RACKS)).with_overrides(policies=("fifo", "one", "mlcc", "mlcc-bands"))
    tmp_path.mkdir()
    run = runner.Run(sc, policy, 0, str(tmp_path))
    run.tb = SimpleNamespace(host=lambda h: SimpleNamespace(cgroup=f"/sys/fs/cgroup/hybrid-{h}"))
    started: dict[str, list[str]] = {}
    monkeypatch.setattr(runner.Run, "start_switch", lambda self: setattr(self, "switch_ep", "ipc:///tmp/hybrid-sw"))
    monkeypatch.setattr(runner.Run, "_start", lambda self, host, argv, tag, net_only=False: started.setdefault(host, argv))
    run.start_daemons()
    return started


def _opt(argv: list[str], flag: str) -> str | None:
    return argv[argv.index(flag) + 1] if flag in argv else None


def test_bench_runs_mlcc_bands_like_mlcc_with_switchemu_and_the_fixed_order(tmp_path, monkeypatch):
    from hostctl_lab.bench.runner import daemon_policy
    from hostctl_lab.bench.scenario import POLICIES

    assert "mlcc-bands" in POLICIES and daemon_policy("mlcc-bands") == "mlcc-bands"
    hybrid = bench_argv("mlcc-bands", tmp_path / "h", monkeypatch)
    mlcc = bench_argv("mlcc", tmp_path / "m", monkeypatch)
    assert set(hybrid) == set(mlcc) == {f"h{i}" for i in range(6)}
    for h, argv in hybrid.items():  # every host carries jobs (PS hosts their PS, rack 1 the workers)
        assert _opt(argv, "--policy") == "mlcc-bands" and _opt(argv, "--switch") == "ipc:///tmp/hybrid-sw"
        assert _opt(argv, "--job-order") == "fixed" and _opt(argv, "--cgroup") == f"/sys/fs/cgroup/hybrid-{h}"
        # the same daemon as mlcc's otherwise: jobs (workers too), offsets, slot
        m = mlcc[h]
        assert _opt(m, "--job-order") is None and _opt(m, "--policy") == "mlcc"
        assert [a for a in argv if a not in ("mlcc-bands", "--job-order", "fixed")] == \
            [a.replace(str(tmp_path / "m"), str(tmp_path / "h")) for a in m if a != "mlcc"]
        assert (tmp_path / "h" / f"hostctl-{h}.toml").read_text() == (tmp_path / "m" / f"hostctl-{h}.toml").read_text()
    assert "workloads" in (tmp_path / "h" / "hostctl-h3.toml").read_text()  # its PS workers, by command line
    cfg = build_config(str(tmp_path / "h" / "hostctl-h3.toml"), policy="mlcc-bands", switch="ipc:///tmp/hybrid-sw",
                       job_order="fixed")
    assert [s.name for s in cfg.jobs] == ["a", "b", "c"]  # three jobs' workers: bands on the worker hosts


def test_report_shows_the_hybrid_against_both_parents():
    from rich.console import Console

    from hostctl_lab.bench import report

    def run(r, p, jct):
        return {"repeat": r, "policy": p, "ok": True, "error": None, "duration_s": 30.0,
                "jobs": {"a": {"jct_s": jct, "barrier_wait_std_s": [], "errors": []}}}

    jcts = {"fifo": (10, 12), "one": (8, 10), "mlcc": (10, 10), "mlcc-bands": (6, 8)}
    res = {"scenario": {"name": "hybrid"}, "policies": list(jcts), "repeat": 2,
           "runs": [run(r, p, v[r]) for r in range(2) for p, v in jcts.items()]}
    summary = report.summarize(res)
    assert summary["mlcc-bands"]["vs_parents"] == pytest.approx({"one": (6 / 8 + 8 / 10) / 2, "mlcc": 0.7})
    assert "vs_parents" not in summary["one"] and "vs_parents" not in summary["mlcc"]
    con = Console(record=True, width=200)
    report.print_table(res, summary, con)
    assert "mlcc-bands (hybrid): average JCT 0.775x one, 0.700x mlcc" in con.export_text()
