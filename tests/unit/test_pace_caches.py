"""Caches and faster equivalents in the per-slot pacing path (daemon CPU): each one is checked
against what it replaces, and caches are checked to follow their inputs."""

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from hostctl.config import Config
from hostctl.core.mlcc import schedule_cost
from hostctl.core.monitor import FlowMonitor
from hostctl.core.pace import WATCH_SLOT, selectors
from hostctl.core.types import FlowKey, Job, JobSpec
from hostctl.datapath import FLOW_CLOSED, FlowRecord, PacingReadout
from hostctl.policy.mlcc import RATE_DEADBAND, MlccControl
from hostctl.policy.pacing import PaceControl

PS = "10.0.0.1"


class _Dp:
    def __init__(self):
        self.flows: list[FlowRecord] = []
        self.tables = []

    def read_pacing(self):
        return PacingReadout(list(self.flows), [], {})

    def pace(self, table):
        self.tables.append(table)
        return 0

    def heartbeat(self):
        pass

    def forget(self, keys):
        pass


def _record(key, slot, acked=0, flags=0):
    return FlowRecord(key, slot, acked, acked, 0, 0, 0, 0, 0, 0, 0, 0, 0, flags, 0)


def _pace(policy="mlcc"):
    cfg = Config(policy=policy, link_rate_bps=10**9, cap_bps=8 * 10**7,
                 jobs=(JobSpec(name="a", ports=(9000,)),)).validate()
    dp = _Dp()
    t = [100.0]
    pc = PaceControl(cfg, dp, lambda: t[0], link_rate_bps=10**9, wall=lambda: 1000.0 + t[0])
    return pc, dp, t


def _tick(pc, t, jobs):
    t[0] += 0.06
    pc.tick(t[0], jobs)


def test_selectors_are_cached_until_the_jobs_or_their_slots_change():
    pc, dp, t = _pace()
    f1, f2 = FlowKey(PS, 40001, "10.0.0.2", 9100), FlowKey(PS, 40002, "10.0.0.3", 9100)
    jobs = {"a": Job("a", "config", listen_ports=(9000,), flows=(f1,))}
    _tick(pc, t, jobs)
    first = dp.tables[-1]
    want = selectors(list(jobs.values()), pc.slots, watch_ports=pc.watch_ports)
    assert (first.ports, first.flows, first.remotes) == want
    _tick(pc, t, dict(jobs))  # a rescan that found the same jobs: the same selectors, not recomputed
    assert dp.tables[-1].flows is first.flows and dp.tables[-1].ports is first.ports
    # a job's flows change (rescan): recomputed
    jobs = {"a": Job("a", "config", listen_ports=(9000,), flows=(f1, f2))}
    _tick(pc, t, jobs)
    assert dp.tables[-1].flows == {f1: pc.slots["a"], f2: pc.slots["a"]}
    # a new job (a new slot) and a job that leaves
    jobs = {**jobs, "b": Job("b", "config", listen_ports=(9001,))}
    _tick(pc, t, jobs)
    assert dp.tables[-1].ports == {(9000, "local"): pc.slots["a"], (9001, "local"): pc.slots["b"],
                                   (9000, "remote"): WATCH_SLOT}  # the config's port, watched
    jobs = {"b": jobs["b"]}
    _tick(pc, t, jobs)
    want = selectors(list(jobs.values()), pc.slots, watch_ports=pc.watch_ports)
    assert (dp.tables[-1].ports, dp.tables[-1].flows, dp.tables[-1].remotes) == want
    assert dp.tables[-1].flows == {}


def test_the_flows_of_the_plan_follow_the_flow_set_in_key_order():
    pc, dp, t = _pace()
    jobs = {"a": Job("a", "config", listen_ports=(9000,))}
    _tick(pc, t, jobs)
    slot = pc.slots["a"]
    keys = [FlowKey(PS, 9000, f"10.0.0.{i}", 40000 + i) for i in (5, 3, 9)]
    local = FlowKey(PS, 9000, PS, 40100)  # intra-host: never planned
    dp.flows = [_record(k, slot, 1000) for k in keys + [local]]
    _tick(pc, t, jobs)
    assert [f.key for f in pc.rates.flows(pc)] == sorted(keys)
    assert set(dp.tables[-1].flow_rates) == set(keys)
    # a flow leaves, another arrives, one closes: the order is rebuilt
    k2 = FlowKey(PS, 9000, "10.0.0.4", 40001)
    dp.flows = [_record(keys[0], slot, 2000), _record(keys[2], slot, 2000, FLOW_CLOSED), _record(k2, slot, 10)]
    _tick(pc, t, jobs)
    assert [f.key for f in pc.rates.flows(pc)] == sorted([keys[0], k2])
    assert pc.flows_in_order() == sorted([keys[0], keys[2], k2])


def _beta_before(rates, complete, K):
    used = rates > 0
    beta = np.where(used.any(axis=1), K - np.argmax(used[:, ::-1], axis=1), 0)
    return np.where(complete, beta, K).astype(np.int64)


@settings(max_examples=200, deadline=None)
@given(st.integers(0, 12), st.integers(1, 12), st.data())
def test_schedule_cost_beta_is_the_last_used_slot(n, K, data):
    rates = np.array(data.draw(st.lists(st.lists(st.sampled_from([0.0, 0.0, 1.0, 5e5, 3e7]), min_size=K, max_size=K),
                                        min_size=n, max_size=n)), dtype=np.float64).reshape(n, K)
    G = np.array(data.draw(st.lists(st.sampled_from([0.0, 1.0, 1e4, 1e6, 1e9]), min_size=n, max_size=n)))
    price = np.ones((n, K))
    beta, _cost, complete = schedule_cost(rates, price, G, slot_s=0.06)
    assert beta.dtype == np.int64
    assert np.array_equal(beta, _beta_before(rates, complete, K))


@settings(max_examples=200, deadline=None)
@given(st.integers(1, 10), st.integers(1, 4), st.integers(1, 3), st.data())
def test_slot0_use_per_link_by_bincount_equals_add_at(m, L, P, data):
    rows = np.array([data.draw(st.lists(st.integers(-1, L - 1), min_size=P, max_size=P)) for _ in range(m)],
                    dtype=np.int64)
    r0 = np.array(data.draw(st.lists(st.floats(0, 1e10, allow_nan=False), min_size=m, max_size=m)))
    want = np.zeros(L + 1)
    np.add.at(want, np.where(rows >= 0, rows, L), np.broadcast_to(r0[:, None], rows.shape))
    got = np.bincount(np.where(rows >= 0, rows, L).ravel(), weights=np.repeat(r0, P), minlength=L + 1)
    assert np.array_equal(got, want)


@settings(max_examples=100, deadline=None)
@given(st.lists(st.lists(st.one_of(st.floats(1, 1e9), st.just(math.nan)), min_size=5, max_size=5),
                min_size=1, max_size=8), st.data())
def test_median_by_fancy_index_equals_take_along_axis(hist, data):
    h = np.array(hist)
    k = np.array(data.draw(st.lists(st.integers(0, 20), min_size=len(hist), max_size=len(hist))))
    m = np.minimum(k + 1, 5)
    v = np.sort(h, axis=1)
    want = (np.take_along_axis(v, ((m - 1) // 2)[:, None], 1) + np.take_along_axis(v, (m // 2)[:, None], 1))[:, 0] / 2
    at = np.arange(len(h))
    got = (v[at, (m - 1) // 2] + v[at, m // 2]) / 2
    assert np.array_equal(got, want, equal_nan=True)


def test_monitor_iterations_are_counted_with_the_median_estimate():
    # _commit_rows (several flows idle at once) keeps the median of the history as E
    mon = FlowMonitor()
    ids = np.array([1, 2])
    t, acked = 0.0, np.array([0, 0])
    for it in range(4):
        for _ in range(3):  # a burst over three slots, then idle
            t += 0.06
            acked = acked + np.array([1000 * (it + 1), 500])
            mon.observe(t, ids, ["j", "j"], acked)
        for _ in range(3):
            t += 0.06
            mon.observe(t, ids, ["j", "j"], acked)
    st_ = mon.flow_stats()
    assert st_.iterations.tolist() == [4, 4]
    # the first iteration was not seen whole (the first read already counted bytes): not in the history
    assert st_.bytes_per_iter.tolist() == [float(np.median([6000, 9000, 12000])), 1500.0]


@settings(max_examples=200, deadline=None)
@given(st.lists(st.floats(0, 1e10, allow_nan=False), min_size=1, max_size=20), st.data())
def test_hysteresis_keeps_rates_within_the_deadband(rates, data):
    ctl = MlccControl(10**8, 0.06)
    keys = [FlowKey(PS, 9000, "10.0.0.2", 40000 + i) for i in range(len(rates))]
    prev = data.draw(st.lists(st.one_of(st.none(), st.integers(1, 10**10)), min_size=len(rates), max_size=len(rates)))
    # the last slot wrote the rates given (None: a new flow), its rows in reverse order
    old = [w for w in prev if w is not None][::-1]
    ctl._written = np.array(old, dtype=np.int64)
    rows, r = [], len(old)
    for w in prev:
        r -= w is not None
        rows.append(r if w is not None else -1)
    out = ctl._hysteresis(keys, np.array(rates), np.array(rows, dtype=np.int64))
    for k, r, w in zip(keys, rates, prev):
        r = max(1, int(r))
        assert out[k] == (w if w is not None and abs(r - w) <= RATE_DEADBAND * w else r)



def test_the_nics_cross_traffic_reaches_mlccs_available_bandwidth():
    """The datapath's interface counter (PacingReadout.link_tx_bytes) minus the DL flows' rate is the
    cross traffic that lowers û of the NIC link (core.mlccplan.avail_from_cross)."""
    pc, dp, t = _pace()
    cap = 10**9 // 8
    tx = [0]

    def read():
        return PacingReadout(list(dp.flows), [], {}, tx[0])

    dp.read_pacing = read
    jobs = {"a": Job("a", "config", listen_ports=(9000,))}
    _tick(pc, t, jobs)
    assert pc.rates.ctl.nic_avail_Bps == cap  # one read: no rate yet
    for _ in range(3):
        tx[0] += int(0.5 * cap * 0.06)  # half the link, and no DL flow sends: cross traffic
        _tick(pc, t, jobs)
    assert pc.rates.ctl.nic_avail_Bps == pytest.approx(cap / 2, rel=0.01)
    dp.read_pacing = lambda: PacingReadout(list(dp.flows), [], {})  # no counter (sysfs unreadable): kept
    _tick(pc, t, jobs)
    assert pc.rates.ctl.nic_avail_Bps == pytest.approx(cap / 2, rel=0.01)
