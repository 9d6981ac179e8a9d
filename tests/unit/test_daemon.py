"""The daemon loop with the fake datapath, a scripted discovery and fake clocks."""

import gc
import threading
import time

from hostctl.config import Config
from hostctl.core.plan import band_classid, build_tc_plan
from hostctl.core.types import JobSpec, Job
from hostctl.daemon import Daemon
from hostctl.datapath.fake import FakeDatapath


class ScriptedDiscovery:
    def __init__(self, *rounds):
        self.rounds = list(rounds)
        self.calls = 0

    def scan(self):
        self.calls += 1
        if len(self.rounds) > 1:
            return self.rounds.pop(0)
        return self.rounds[0]


class Clock:
    def __init__(self, t=1000.0):
        self.t = t

    def __call__(self):
        return self.t


def make(policy="rr", rounds=None, interval=20.0):
    cfg = Config(policy=policy, rr_interval_s=interval, jobs=(JobSpec(ports=(1,)),))
    plan = build_tc_plan("eth0", 10**9, 6, 10**8, policy != "fifo")
    dp = FakeDatapath()
    wall = Clock(1000.0)
    d = Daemon(cfg, plan, dp, ScriptedDiscovery(*(rounds or [[]])), wall=wall, mono=Clock(5.0))
    dp.setup(plan)
    return d, dp, wall


J = [Job("a", "port", listen_ports=(9000,)), Job("b", "port", listen_ports=(9001,))]


def test_rotation_changes_only_classids_at_epoch_boundaries():
    d, dp, wall = make("rr", [J])
    d.scan()
    d.reassign()
    first = dict(dp.table.slot_classid)
    wall.t = 1019.9  # same epoch (1000 // 20 = 50)
    assert not d.reassign()
    wall.t = 1020.0  # next epoch: the two jobs swap
    assert d.reassign()
    assert dp.table.ports == dp.applies[0].ports  # port entries untouched
    assert dp.table.slot_classid == {s: first[1 - s] for s in first}
    assert d.stats.rotations == 1


def test_one_reassigns_only_on_arrival_and_departure():
    more = J + [Job("0c", "port", listen_ports=(9002,))]
    d, dp, wall = make("one", [J, J, more, J])
    for step in range(4):
        d.scan()
        wall.t += 25
        d.reassign()
    assert [len(t.slots) for t in dp.applies] == [2, 3, 2]  # no apply when nothing changed
    assert d.stats.rotations == 0 and d.stats.reassignments == 3


def test_fifo_points_every_job_at_default():
    d, dp, _ = make("fifo", [J])
    d.scan()
    d.reassign(force=True)
    assert set(dp.table.slot_classid.values()) == {0}


def test_status_reports_bands_and_rates():
    d, dp, _ = make("one", [J])
    d.scan()
    d.reassign()
    d.refresh_status()
    dp.send("a", 1_000_000)
    d.mono.t += 1.0
    d.refresh_status()
    st = d.status(max_age_s=float("inf"))  # no loop thread here: read what refresh_status made
    a = next(j for j in st["jobs"] if j["job_id"] == "a")
    assert a["band"] == 0 and a["classid"] == "6863:20" and abs(a["rate_bps"] - 8e6) < 1
    assert any(c["classid"] == "6863:20" and c["bytes"] == 1_000_000 for c in st["classes"])


def test_discovery_error_is_counted_not_fatal():
    class Broken:
        def scan(self):
            raise OSError("boom")

    d, dp, _ = make("one")
    d.discovery = Broken()
    assert d.scan() is False and d.stats.errors == 1


def run_in_thread():
    """An rr daemon on the fake datapath with real clocks, its loop running in a thread."""
    d, dp, _ = make("rr", [J])
    d.wall = time.time
    d.mono = time.monotonic
    d.config = Config(policy="rr", rr_interval_s=0.2, rescan_s=0.05, jobs=d.config.jobs)
    th = threading.Thread(target=d.run)
    th.start()
    return d, dp, th


def test_memory_upkeep_runs_a_full_collection_then_trims_every_period(monkeypatch):
    from hostctl import consts

    monkeypatch.setattr(consts, "MEM_TRIM_S", 0.2)
    d, dp, th = run_in_thread()
    try:
        deadline = time.monotonic() + 10
        while d.stats.mem_trims < 3 and time.monotonic() < deadline:
            time.sleep(0.05)
        st = d.status(max_age_s=0)["stats"]  # (a fresh one: the refresh also reads the gc meter)
        assert st["mem_trims"] >= 3 and st["gc_full_ms"] > 0, st  # once up, then a collection before each trim
        assert st["gc_collections"] >= 1 and st["gc_max_ms"] >= st["gc_full_ms"] * 0.5, st
    finally:
        d.request_stop()
        th.join(5)
    assert gc.get_freeze_count() == 0


def test_run_tears_down_once_when_stopped():
    d, dp, th = run_in_thread()
    time.sleep(0.7)
    st = d.status()  # answered by the loop's thread
    assert st["state"] == "running" and len(st["jobs"]) == 2
    assert st["stats"]["mem_trims"] == 1  # once up (glibc here), the next MEM_TRIM_S later
    assert st["stats"]["gc_frozen"] > 1000 and gc.get_freeze_count() > 0  # the start-up's objects, once up
    d.request_stop()
    th.join(5)
    assert not th.is_alive()
    assert gc.get_freeze_count() == 0  # the collector as it was (an in-process daemon)
    assert dp.torn_down == 1 and dp.root == "noqueue" and dp.heartbeats >= 1
    assert d.stats.rotations >= 1
    assert band_classid(0) in {c for t in dp.applies for c in t.slot_classid.values()}


def test_status_reports_received_bytes_with_ingress_bands():
    cfg = Config(policy="one", jobs=(JobSpec(ports=(1,)),), ingress_rate="90%")
    plan = build_tc_plan("eth0", 10**9, 6, 10**8, True, ingress_rate_bps=cfg.ingress_rate_bps(10**9))
    dp = FakeDatapath()
    d = Daemon(cfg, plan, dp, ScriptedDiscovery(J), wall=Clock(1000.0), mono=Clock(5.0))
    dp.setup(plan)
    d.scan()
    d.reassign()
    dp.receive("b", 3000)
    dp.send("b", 1000)
    d.refresh_status()
    st = d.status(max_age_s=float("inf"))
    assert st["ingress_rate_bps"] == 900_000_000
    b = next(j for j in st["jobs"] if j["job_id"] == "b")
    assert (b["rx_bytes"], b["tx_bytes"]) == (3000, 1000)
    ing = {c["classid"]: c["bytes"] for c in st["ingress_classes"]}
    assert ing["6863:21"] == 3000 and {c["classid"]: c["bytes"] for c in st["classes"]}["6863:21"] == 1000


def test_status_without_ingress_bands_has_none():
    d, dp, _ = make("one", [J])
    d.scan()
    d.reassign()
    d.refresh_status()
    st = d.status(max_age_s=float("inf"))
    assert st["ingress_rate_bps"] == 0 and st["ingress_classes"] == []
    assert all(j["rx_bytes"] is None for j in st["jobs"])


def test_fake_counts_received_bytes_on_the_ifb_only_while_a_job_is_banded():
    cfg = Config(policy="one", jobs=(JobSpec(ports=(1,)),), ingress_rate="90%")
    plan = build_tc_plan("eth0", 10**9, 6, 10**8, True, ingress_rate_bps=9 * 10**8)
    dp = FakeDatapath()
    d = Daemon(cfg, plan, dp, ScriptedDiscovery(J[:1]), wall=Clock(1000.0), mono=Clock(5.0))
    dp.setup(plan)
    d.scan()
    d.reassign(force=True)  # a lone job: no band
    dp.receive("a", 3000)
    assert sum(dp.ingress_class_bytes.values()) == 0


def test_worker_jobs_are_classified_by_remote_endpoint_and_follow_rotation():
    """A worker host's two jobs (found by remote port): new connections to each PS, and a NATed one,
    go to the job's band; at the next rr epoch both move, with no 4-tuple entry written."""
    from hostctl.core.plan import DEFAULT_CLASSID, band_classid
    from hostctl.core.types import FlowKey

    a = Job("ps:10.0.0.1:9400", "port", flows=(FlowKey("10.0.0.5", 40000, "10.0.0.1", 9400),), role="client",
            remote_endpoints=(("10.0.0.1", 9400),))
    b = Job("ps:10.0.0.2:9400", "port", flows=(FlowKey("10.0.0.5", 40001, "10.0.0.2", 9400),), role="client",
            remote_endpoints=(("10.0.0.2", 9400),))
    d, dp, wall = make("rr", [[a, b]])
    d.scan()
    d.reassign()
    new_a, nat_b = FlowKey("10.0.0.5", 41000, "10.0.0.1", 9400), FlowKey("172.17.0.9", 33000, "10.0.0.2", 9400)
    ca, cb = dp.classify(new_a), dp.classify(nat_b)
    assert {ca, cb} == {band_classid(0), band_classid(1)}
    assert dp.table.flows == {}
    assert dp.classify(FlowKey("10.0.0.5", 41001, "10.0.0.3", 9400)) == DEFAULT_CLASSID  # no job
    wall.t += 20.0
    d.reassign()
    assert (dp.classify(new_a), dp.classify(nat_b)) == (cb, ca)


def test_drift_is_put_back_with_a_backoff_that_starts_over_when_the_tree_stays_put(caplog):
    import hostctl.daemon as dm

    d, dp, _ = make("one", [J])
    d.scan()
    d.reassign()
    mono = d.mono
    assert not d.check_drift(mono.t) and dp.setups == 1  # nothing changed: nothing done
    waits = []
    with caplog.at_level("WARNING", logger="hostctl"):
        for _ in range(12):  # an agent that replaces the root qdisc as soon as hostctl puts it back
            dp.tamper("root")
            while not d.check_drift(mono.t):  # the rescans in between only look when the wait is over
                mono.t += 2.0
            waits.append(d._drift_next - mono.t)
    assert waits == [1, 2, 4, 8, 16, 32, 64, 128, 256, 300, 300, 300]  # never a tight loop
    assert dp.setups == 13 and dp.check() == [] and d.stats.reconciliations == 12
    assert d.stats.last_drift.startswith("the root qdisc is tbf")
    said = [r.getMessage() for r in caplog.records if "changed under hostctl" in r.getMessage()]
    assert len(said) == 12 and "putting it back (reconciliation 12; next check in 300s" in said[-1]
    # the maps were written again in full after each reconciliation (a classifier built again is empty)
    assert len(dp.applies) == 13 and dp.applies[-1] == dp.applies[0]
    assert d.refresh_status() is None and d.status(max_age_s=1e9)["stats"]["reconciliations"] == 12

    mono.t += dm.DRIFT_CALM_S  # the tree stayed put: the next change is put back after 1 s again
    assert not d.check_drift(mono.t)
    dp.tamper("filter")
    assert d.check_drift(mono.t) and d._drift_next - mono.t == 1


def test_a_failing_check_is_logged_once_and_the_daemon_goes_on(caplog):
    d, dp, _ = make("one", [J])

    def broken():
        raise OSError("No such device")

    dp.check = broken
    with caplog.at_level("WARNING", logger="hostctl"):
        for _ in range(5):
            assert not d.check_drift(d.mono.t)
            d.mono.t += 1
    assert sum("checking the tc tree of eth0 failed" in r.getMessage() for r in caplog.records) == 1


def test_the_device_gone_renamed_or_replaced_is_followed_at_once(caplog):
    d, dp, _ = make("one", [J])
    d.discovery.iface = "eth0"
    d.scan()
    d.reassign()
    now = d.mono.t
    with caplog.at_level("INFO", logger="hostctl"):
        dp.tamper("root")
        assert d.check_drift(now)  # an agent's change: put back, and a 1 s wait begins
        dp.tamper("gone")
        for _ in range(3):
            assert not d.check_drift(now) and d.link_gone
        dp.tamper("replaced")  # back under its name, inside the wait: set up at once anyway
        assert d.check_drift(now) and not d.link_gone and dp.check() == []
        dp.tamper("renamed", to="eth9")
        assert d.check_drift(now)
        dp.tamper("mtu")
        assert not d.check_drift(now + 10) and dp.check() == []  # said once, nothing to put back
    d.refresh_status()
    assert d.plan.iface == "eth9" and d.discovery.iface == "eth9" and d.status(max_age_s=1e9)["iface"] == "eth9"
    assert d.stats.reconciliations == 3 and dp.setups == 4 and len(dp.applies) == 4
    msgs = [r.getMessage() for r in caplog.records]
    assert sum("waiting for it to come back" in m for m in msgs) == 1
    assert any(m == "mtu changed (hostctl's tree stays in place)" for m in msgs)


def test_the_pacers_cgroup_gone_or_back_is_acted_on_at_once_and_its_pins_with_the_backoff(caplog):
    d, dp, _ = make("one", [J])
    d.scan()
    d.reassign()
    now = d.mono.t
    with caplog.at_level("INFO", logger="hostctl"):
        dp.tamper("root")
        assert d.check_drift(now)  # an agent's change: put back, and a 1 s wait begins
        dp.tamper("cgroup", to="gone")
        assert d.check_drift(now) and dp.check() == []  # the scope's lifecycle: at once, inside the wait
        dp.tamper("cgroup", to="back")
        assert d.check_drift(now)
        dp.tamper("pins")  # someone removed the pins: put back like the tree, after the wait
        assert not d.check_drift(now + 0.5)
        assert d.check_drift(now + 1.0) and dp.check() == []
    assert d.stats.reconciliations == 4 and dp.setups == 5
    msgs = [r.getMessage() for r in caplog.records]
    assert sum("releasing its flows; the pacer is attached again when a cgroup is back" in m for m in msgs) == 1
    assert sum("attaching the pacer to it" in m for m in msgs) == 1
    assert any("eth0: the pacer's pins changed under hostctl (pins changed)" in m for m in msgs)
