"""Load table (hostctl.core.loadtable): spec properties 19-22 against a brute-force model."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from hostctl.core.loadtable import MAX_RATE_Bps, LoadTable

K = 4
N_LINKS = 5
RING = 6


class Model:
    """Latest schedule per flow; loads summed from scratch (the definition of property 19)."""

    def __init__(self):
        self.flows: dict[str, tuple[tuple[int, ...], int, list[int], int]] = {}
        self.now = None

    def advance(self, now):
        self.now = now if self.now is None else max(self.now, now)
        self.flows = {f: v for f, v in self.flows.items() if v[1] + K - 1 >= self.now}

    def update(self, f, links, start, rates, now, seq):
        self.advance(now)
        old = self.flows.get(f)
        if old is not None and seq < old[3]:
            return False
        # slots from now + RING on are beyond what the table stores: dropped at update time
        kept = [r if start + j < self.now + RING else 0 for j, r in enumerate(rates)]
        if not any(kept) or not links or start + K - 1 < self.now:
            self.flows.pop(f, None)
        else:
            self.flows[f] = (tuple(links), start, kept, seq)
        return True

    def loads(self, links, start, now, exclude=None):
        self.advance(now)
        out = np.zeros((len(links), K), dtype=np.int64)
        for f, (ls, s0, rates, _) in self.flows.items():
            if f == exclude:
                continue
            for i, ln in enumerate(links):
                if ln not in ls:
                    continue
                for j in range(K):
                    t = start + j
                    if self.now <= t and s0 <= t < s0 + K:
                        out[i, j] += rates[t - s0]
        return out


flow_ids = st.sampled_from(["a", "b", "c", "d"])
link_sets = st.lists(st.integers(0, N_LINKS - 1), min_size=0, max_size=3, unique=True)
rate_lists = st.lists(st.one_of(st.just(0), st.integers(0, 10**9)), min_size=K, max_size=K)
ops = st.lists(st.one_of(
    st.tuples(st.just("update"), flow_ids, link_sets, st.integers(-2, 3), rate_lists, st.integers(0, 3)),
    st.tuples(st.just("withdraw"), flow_ids),
    st.tuples(st.just("tick"), st.integers(0, 7)),
), max_size=40)


@settings(max_examples=300, deadline=None)
@given(ops)
def test_table_matches_latest_schedules(seq_ops):
    """Property 19 (consistency with the latest schedules), 20 (expiry) and 21 (self-exclusion)."""
    t, m = LoadTable(N_LINKS, K, ring=RING), Model()
    now = 100
    for op in seq_ops:
        if op[0] == "update":
            _, f, links, off, rates, seq = op
            assert t.update(f, links, now + off, rates, now, seq=seq) == m.update(f, links, now + off, rates, now, seq)
        elif op[0] == "withdraw":
            t.withdraw(op[1], now)
            m.advance(now)
            m.flows.pop(op[1], None)
        else:
            now += op[1]
        all_links = list(range(N_LINKS))
        for start in (now - 1, now, now + 1):
            assert np.array_equal(t.loads(all_links, start, now), m.loads(all_links, start, now))
        for f in ("a", "b"):
            assert np.array_equal(t.loads(all_links, now, now, exclude=f), m.loads(all_links, now, now, exclude=f))
        assert np.array_equal(t.recompute(), m.loads(all_links, now, now))
        assert set(t._flows) == set(m.flows)
        assert (t.loads(all_links, now, now) >= 0).all()


@settings(max_examples=100, deadline=None)
@given(link_sets, st.integers(-1, 2), rate_lists, st.lists(st.tuples(flow_ids, link_sets, rate_lists), max_size=4))
def test_same_update_twice_is_idempotent(links, off, rates, others):
    t = LoadTable(N_LINKS, K, ring=RING)
    for f, ls, rs in others:
        t.update(f, ls, 10, rs, 10)
    t.update("x", links, 10 + off, rates, 10, seq=1)
    once = t.loads(range(N_LINKS), 10, 10).copy()
    t.update("x", links, 10 + off, rates, 10, seq=1)
    assert np.array_equal(t.loads(range(N_LINKS), 10, 10), once)


def test_replace_not_add():
    t = LoadTable(2, K)
    t.update("f", [0, 1], 10, [5, 20, 0, 0], 10)
    t.update("f", [0, 1], 10, [1, 1, 1, 1], 10)
    assert t.loads([0, 1], 10, 10).tolist() == [[1, 1, 1, 1]] * 2


def test_self_exclusion_keeps_same_job_flows():
    t = LoadTable(1, K)
    t.update("ps->w1", [0], 10, [10, 10, 10, 10], 10, job_id="j")
    t.update("ps->w2", [0], 10, [3, 3, 3, 3], 10, job_id="j")
    assert t.loads([0], 10, 10, exclude="ps->w1").tolist() == [[3, 3, 3, 3]]
    assert t.loads([0], 10, 10, exclude="ps->w2").tolist() == [[10, 10, 10, 10]]
    assert t.path_load([0], 10, 10, exclude="nobody").tolist() == [13, 13, 13, 13]


def test_expiry_after_k_silent_slots():
    t = LoadTable(1, K)
    t.update("f", [0], 10, [1, 2, 3, 4], 10)
    assert t.loads([0], 12, 12).tolist() == [[3, 4, 0, 0]]
    assert len(t) == 1
    t.advance(10 + K)
    assert len(t) == 0 and t.expired_flows == 1
    assert not t.loads([0], 10 + K, 10 + K).any()
    t.advance(10**6)  # a long jump: no per-slot loop over a million slots
    assert not t._agg.any()


def test_withdraw_by_zero_schedule_leaves_exact_zero():
    t = LoadTable(3, K)
    t.update("f", [0, 2], 10, [0.1, 1e9 / 3, 7.5, 1e12], 10)
    t.update("f", [0, 2], 10, [0, 0, 0, 0], 10)
    assert len(t) == 0 and not t._agg.any()
    t.update("g", [1], 10, [1, 1, 1, 1], 10)
    assert t.withdraw("g", 10) and not t.withdraw("g", 10)
    assert not t._agg.any()


def test_older_seq_is_ignored():
    t = LoadTable(1, K)
    t.update("f", [0], 10, [5] * K, 10, seq=5)
    assert t.update("f", [0], 10, [9] * K, 10, seq=4) is False
    assert t.loads([0], 10, 10).tolist() == [[5] * K]


def test_bad_input_raises_valueerror():
    t = LoadTable(2, K)
    for links, rates in (([5], [1] * K), ([0, 0], [1] * K), ([0], [1] * (K + 1)), ([0], [-1] + [0] * (K - 1)),
                         ([0], [float("nan")] + [0] * (K - 1)), ([0], [MAX_RATE_Bps + 1] + [0] * (K - 1))):
        with pytest.raises(ValueError):
            t.update("f", links, 10, rates, 10)
    assert len(t) == 0 and not t._agg.any()


def test_many_flows_fetch_cost_is_independent_of_flow_count():
    """1000s of flows: the aggregate is incremental (a read touches no per-flow state)."""
    import time

    t = LoadTable(64, 10)
    rng = np.random.default_rng(1)
    for i in range(5000):
        t.update(i, rng.choice(64, 2, replace=False), 10, rng.integers(0, 10**6, 10), 10)
    t0 = time.perf_counter()
    for i in range(2000):
        t.loads([i % 64, (i + 1) % 64], 10, 10, exclude=i)
    per_read_s = (time.perf_counter() - t0) / 2000
    assert per_read_s < 200e-6, per_read_s
    assert np.array_equal(t.recompute()[:, :], t.loads(range(64), 10, 10))


def test_exclude_job_leaves_out_the_whole_job():
    t = LoadTable(2, 4)
    t.update("a1", [0], 100, [10, 10, 10, 10], 100, job_id="a")
    t.update("a2", [0, 1], 100, [5, 5, 5, 5], 100, job_id="a")
    t.update("b1", [0], 100, [1, 1, 1, 1], 100, job_id="b")
    assert t.loads([0], 100, 100).tolist() == [[16] * 4]
    assert t.loads([0], 100, 100, exclude="a1").tolist() == [[6] * 4]
    assert t.loads([0, 1], 100, 100, exclude="a1", exclude_job="a").tolist() == [[1] * 4, [0] * 4]
    t.withdraw("b1", 100)
    assert t.loads([0], 100, 100, exclude_job="a").tolist() == [[0] * 4]
    t.update("a2", [1], 100, [5, 5, 5, 5], 100, job_id="c")  # moved to another job
    assert t.loads([1], 100, 100, exclude_job="a").tolist() == [[5] * 4]


jobs = st.sampled_from(["", "j1", "j2"])
float_rates = st.lists(st.one_of(st.integers(0, 10**9), st.floats(0, 1e9), st.integers(0, 50).map(lambda x: x + 0.5)),
                       min_size=K, max_size=K)
fast_ops = st.lists(st.one_of(
    st.tuples(st.just("update"), flow_ids, link_sets, st.integers(-2, 3), float_rates, st.integers(0, 3), jobs),
    st.tuples(st.just("withdraw"), flow_ids),
    st.tuples(st.just("tick"), st.integers(0, 7)),
), max_size=40)


@settings(max_examples=300, deadline=None)
@given(fast_ops)
def test_update_valid_and_rows_match_update_and_loads(seq_ops):
    """The switch's per-frame API (update_valid with caller-rounded ints, rows() lists) against the
    generic one (update rounds, loads() arrays), including exclude / exclude_job."""
    a, b = LoadTable(N_LINKS, K, ring=RING), LoadTable(N_LINKS, K, ring=RING)
    now = 100
    for op in seq_ops:
        if op[0] == "update":
            _, f, links, off, rates, seq, job = op
            ra = a.update(f, links, now + off, rates, now, seq=seq, job_id=job)
            rb = b.update_valid(f, tuple(links), now + off, [round(r) for r in rates], now, seq, job)
            assert ra == rb
        elif op[0] == "withdraw":
            assert a.withdraw(op[1], now) == b.withdraw(op[1], now)
        else:
            now += op[1]
        links = list(range(N_LINKS))
        for start in (now - 1, now, now + 2):
            for f, job in ((None, None), ("a", None), ("b", "j1"), (None, "j2")):
                assert a.loads(links, start, now, exclude=f, exclude_job=job).tolist() == \
                    b.rows(links, start, now, f, job)
        assert a._rows == b._rows and a._flows == b._flows


def test_rounding_is_half_to_even_like_numpy():
    t = LoadTable(1, K)
    rates = [0.5, 1.5, 2.5, 1e9 / 3]
    t.update("f", [0], 10, rates, 10)
    assert t.loads([0], 10, 10).tolist() == [np.rint(rates).astype(np.int64).tolist()]


class RankModel(Model):
    """Model plus jobs and the job order: a job's rank is the one of its latest applied (not
    withdrawing) update, forgotten with the job's last flow."""

    def __init__(self):
        super().__init__()
        self.job: dict[str, str] = {}
        self.rank: dict[str, int] = {}

    def _prune(self):
        live = {self.job[f] for f in self.flows}
        self.rank = {j: r for j, r in self.rank.items() if j in live}

    def advance(self, now):
        super().advance(now)
        if hasattr(self, "rank"):
            self._prune()

    def update_ranked(self, f, links, start, rates, now, seq, job, rank):
        ok = self.update(f, links, start, rates, now, seq)
        if ok and f in self.flows:
            self.job[f] = job
            if rank is None:
                self.rank.pop(job, None)
            else:
                self.rank[job] = rank
        self._prune()
        return ok

    def loads_ranked(self, links, start, now, exclude, exclude_job, below_rank):
        self.advance(now)
        keep = {f: v for f, v in self.flows.items()
                if self.job[f] != exclude_job
                and not (below_rank is not None and self.rank.get(self.job[f], -1) > below_rank)}
        saved, rank, self.flows = self.flows, self.rank, keep
        try:
            return self.loads(links, start, now, exclude)
        finally:  # (loads() advances, which prunes the ranks of the jobs left out here)
            self.flows, self.rank = saved, rank


ranked_ops = st.lists(st.one_of(
    st.tuples(st.just("update"), flow_ids, link_sets, st.integers(-2, 3), rate_lists, st.integers(0, 3),
              st.sampled_from(["j1", "j2", "j3"]), st.none() | st.integers(0, 3)),
    st.tuples(st.just("withdraw"), flow_ids),
    st.tuples(st.just("tick"), st.integers(0, 7)),
), max_size=40)


@settings(max_examples=300, deadline=None)
@given(ranked_ops)
def test_job_order_leaves_out_the_jobs_ranked_after(seq_ops):
    """below_rank=r leaves out exactly the flows of jobs whose latest rank is > r (unranked jobs always
    count), on top of exclude / exclude_job; rows() and loads() agree."""
    t, m = LoadTable(N_LINKS, K, ring=RING), RankModel()
    now = 100
    for op in seq_ops:
        if op[0] == "update":
            _, f, links, off, rates, seq, job, rank = op
            if f in m.flows and m.job[f] != job:
                continue  # a flow keeps its job (the daemon's flow ids name one connection)
            assert t.update(f, links, now + off, rates, now, seq=seq, job_id=job, rank=rank) == \
                m.update_ranked(f, links, now + off, rates, now, seq, job, rank)
        elif op[0] == "withdraw":
            t.withdraw(op[1], now)
            m.advance(now)
            m.flows.pop(op[1], None)
            m._prune()
        else:
            now += op[1]
        links = list(range(N_LINKS))
        memo: dict = {}  # one batch of reads with no update in between (a fetch frame)
        for below in (None, 0, 1, 2, 3):
            for f, job in ((None, None), ("a", "j1"), (None, "j2"), ("b", "j1")):
                want = m.loads_ranked(links, now, now, f, job, below)
                assert np.array_equal(t.loads(links, now, now, exclude=f, exclude_job=job, below_rank=below), want)
                assert t.rows(links, now, now, f, job, below) == want.tolist()
                assert t.rows(links, now, now, f, job, below, memo) == want.tolist()
                for ln in links:  # a path of one link, through the same batch's index
                    assert t.rows([ln], now, now, f, job, below, memo) == [want[ln].tolist()]
        assert {j: t.job_rank(j) for j in ("j1", "j2", "j3") if t.job_rank(j) is not None} == m.rank


def test_job_order_example():
    t = LoadTable(1, K)
    t.update("a1", [0], 10, [100] * K, 10, job_id="a", rank=1)
    t.update("b1", [0], 10, [200] * K, 10, job_id="b", rank=2)
    t.update("c1", [0], 10, [400] * K, 10, job_id="c")  # unordered: everybody sees it
    assert t.rows([0], 10, 10, "a1", "a", 1) == [[400] * K]  # b is ranked after a
    assert t.rows([0], 10, 10, "b1", "b", 2) == [[500] * K]
    assert t.rows([0], 10, 10, "a1", "a") == [[600] * K]  # no rank asked: the paper's b_l
    t.update("b1", [0], 10, [200] * K, 10, job_id="b", rank=0)  # the order rotated
    assert t.rows([0], 10, 10, "a1", "a", 1) == [[600] * K]
    t.withdraw("b1", 10)
    assert t.job_rank("b") is None and t.job_rank("a") == 1


# ---------------------------------------------------------------------- booking (docs/switchemu.md, "Booking")

def _bk(t: LoadTable, ln: int = 0) -> dict:
    return t.booking()[ln].to_dict()


def test_booking_two_flows_on_one_link():
    """cap 100, tolerance 10%: 60 + 55 = 115 in slots 10-11 (over 110), 60 alone in 12-13."""
    t = LoadTable(1, K, capacities_Bps=[100], tolerance=0.1)
    t.update("f1", [0], 10, [60, 60, 60, 60], 10)
    t.update("f2", [0], 10, [55, 55, 0, 0], 10)
    t.settle()
    assert _bk(t) == {"capacity_Bps": 100, "peak_Bps": 115, "peak_ratio": 1.15, "slot_peak_Bps": 0,
                      "slot_peak_ratio": 0.0, "worst_slot": None, "worst_excess_Bps": 0, "worst_flows": 0,
                      "over_slots": 0, "slots": 0}  # no slot has ended yet
    t.advance(12)
    b = _bk(t)
    assert (b["slot_peak_Bps"], b["worst_slot"], b["worst_flows"], b["worst_excess_Bps"]) == (115, 10, 2, 15)
    assert (b["over_slots"], b["slots"], b["slot_peak_ratio"]) == (2, 2, 1.15)
    t.advance(20)  # slots 12, 13 end with f1 alone (60); 14.. were never booked
    b = _bk(t)
    assert (b["over_slots"], b["slots"], b["slot_peak_Bps"], b["worst_slot"], b["peak_Bps"]) == (2, 4, 115, 10, 115)


def test_booking_a_slot_overbooked_then_corrected_before_its_end():
    """The peak sees the 120 that was booked for a while; the slot's final booking is what was last planned."""
    t = LoadTable(1, K, capacities_Bps=[100])
    t.update("f1", [0], 10, [80] * K, 10, seq=1)
    t.update("f2", [0], 10, [40] * K, 10, seq=1)
    t.settle()
    t.update("f2", [0], 10, [10] * K, 10, seq=2)
    t.settle()
    t.advance(11)
    b = _bk(t)
    assert (b["peak_Bps"], b["peak_ratio"], b["slot_peak_Bps"], b["slot_peak_ratio"]) == (120, 1.2, 90, 0.9)
    assert (b["over_slots"], b["slots"], b["worst_slot"], b["worst_flows"], b["worst_excess_Bps"]) == (0, 1, 10, 2, 0)


def test_booking_a_withdrawn_flow_no_longer_counts():
    t = LoadTable(2, K, capacities_Bps=[100, 100])
    t.update("f1", [0, 1], 10, [80] * K, 10)
    t.update("f2", [0], 10, [40] * K, 10)
    t.update("f3", [1], 10, [40] * K, 10)
    t.settle()
    assert t.withdraw("f2", 10)
    t.update("f3", [1], 10, [0] * K, 10)  # an all-zero schedule withdraws too
    t.advance(12)
    for ln in (0, 1):
        b = _bk(t, ln)
        assert (b["peak_Bps"], b["slot_peak_Bps"], b["over_slots"], b["slots"], b["worst_flows"]) == (120, 80, 0, 2, 1)
    t.advance(20)  # f1 expired: it is forgotten by the per-link index too
    assert not any(t._on_link) and _bk(t)["slots"] == 4


def test_booking_peak_is_sampled_at_settle_not_per_flow():
    """Inside one update frame the order of the flows does not count: the switch settles after the frame."""
    t = LoadTable(1, K, capacities_Bps=[100])
    t.update("f1", [0], 10, [80] * K, 10, seq=1)
    t.update("f2", [0], 10, [20] * K, 10, seq=1)
    t.settle()
    t.update("f2", [0], 10, [40] * K, 10, seq=2)  # 120 between these two updates ...
    t.update("f1", [0], 10, [60] * K, 10, seq=2)  # ... 100 again before anyone could read it
    t.settle()
    assert _bk(t)["peak_Bps"] == 100
    t.update("f2", [0], 10, [50] * K, 10, seq=3)
    assert t.booking()[0].peak_Bps == 110  # booking() settles first


def test_booking_counts_only_flows_with_a_rate_in_the_worst_slot_and_reset():
    t = LoadTable(1, K, capacities_Bps=[100], tolerance=0.0)
    t.update("a", [0], 10, [50, 0, 0, 0], 10)
    t.update("b", [0], 10, [0, 70, 0, 0], 10)
    t.update("c", [0], 9, [9, 60, 60, 0], 10)  # a slot back (skew): slot 9 is past; 110 in slot 10, 130 in 11
    t.advance(13)
    b = _bk(t)
    assert (b["worst_slot"], b["slot_peak_Bps"], b["worst_flows"], b["over_slots"], b["slots"]) == (11, 130, 2, 2, 2)
    t.reset_booking()
    b = _bk(t)
    assert (b["peak_Bps"], b["slot_peak_Bps"], b["over_slots"], b["slots"], b["worst_slot"]) == (0, 0, 0, 0, None)
    t.update("a", [0], 13, [30] * K, 13)
    t.reset_booking()  # the peak starts from what is booked now
    assert _bk(t)["peak_Bps"] == 30


def test_booking_without_capacities_has_no_ratios():
    t = LoadTable(1, K)
    t.update("a", [0], 10, [10**12] * K, 10)
    t.advance(11)
    b = t.booking()[0]
    assert (b.peak_ratio, b.slot_peak_ratio, b.worst_excess_Bps, b.over_slots, b.slots) == (None, None, None, 0, 1)
    with pytest.raises(ValueError):
        LoadTable(2, K, capacities_Bps=[1])
    with pytest.raises(ValueError):
        LoadTable(1, K, capacities_Bps=[1], tolerance=-0.1)


class BookingModel(Model):
    """Model plus the booking, from scratch: booked(l, s) summed over the latest schedules after every
    operation (a settled moment) over the stored slots [now, now + RING), and each slot's booking
    sampled as the clock passes it (before expiry)."""

    def __init__(self, caps, tol):
        super().__init__()
        self.limit = [c * (1 + tol) for c in caps]
        n = len(caps)
        self.peak, self.final, self.final_slot = [0] * n, [0] * n, [None] * n
        self.final_flows, self.over, self.booked = [0] * n, [0] * n, [0] * n

    def booked_at(self, ln, s):
        return sum(r[s - s0] for ls, s0, r, _ in self.flows.values() if ln in ls and s0 <= s < s0 + K)

    def advance(self, now):
        if self.now is not None and now > self.now:
            for ln in range(len(self.limit)):
                for s in range(self.now, min(now, self.now + RING)):
                    v = self.booked_at(ln, s)
                    if v:
                        self.booked[ln] += 1
                        self.over[ln] += v > self.limit[ln]
                        if v > self.final[ln]:
                            self.final[ln], self.final_slot[ln] = v, s
                            self.final_flows[ln] = sum(1 for ls, s0, r, _ in self.flows.values()
                                                       if ln in ls and s0 <= s < s0 + K and r[s - s0])
        super().advance(now)

    def settle(self):
        for ln in range(len(self.limit)):
            for s in range(self.now, self.now + RING):
                self.peak[ln] = max(self.peak[ln], self.booked_at(ln, s))


@settings(max_examples=300, deadline=None)
@given(ops)
def test_booking_matches_a_brute_force_model(seq_ops):
    caps = [10**9, 2 * 10**9, 5 * 10**8, 10**9, 3 * 10**9]
    t, m = LoadTable(N_LINKS, K, ring=RING, capacities_Bps=caps, tolerance=0.05), BookingModel(caps, 0.05)
    now = 100
    m.advance(now)
    t.advance(now)
    for op in seq_ops:
        if op[0] == "update":
            _, f, links, off, rates, seq = op
            t.update(f, links, now + off, rates, now, seq=seq)
            m.update(f, links, now + off, rates, now, seq)
        elif op[0] == "withdraw":
            t.withdraw(op[1], now)
            m.advance(now)
            m.flows.pop(op[1], None)
        else:
            now += op[1]
            t.advance(now)
            m.advance(now)
        t.settle()
        m.settle()
        got = t.booking(settle=False)
        assert [b.peak_Bps for b in got] == m.peak
        assert [b.slot_peak_Bps for b in got] == m.final
        assert [b.worst_slot for b in got] == m.final_slot
        assert [b.worst_flows for b in got] == m.final_flows
        assert [b.over_slots for b in got] == m.over
        assert [b.slots for b in got] == m.booked


def test_a_jobs_view_in_arrival_order_leaves_out_later_jobs_and_the_asking_host():
    """rows(arrival_host=h): the asking job's other flows, the jobs that arrived in the table after it and
    every flow host h sends are left out; a job that left the table arrives again at the end."""
    t = LoadTable(1, 2)
    t.update("a1", [0], 10, [10, 10], 10, job_id="A", host="h1")
    t.update("b1", [0], 10, [20, 20], 10, job_id="B", host="h2")
    t.update("c1", [0], 10, [40, 40], 10, job_id="C", host="h1")  # h1's own flow of another job
    t.update("c2", [0], 10, [80, 80], 10, job_id="C", host="h3")
    # A arrived first: it sees no later job; h1 (the asker) is left out anyway
    assert t.rows([0], 10, 10, "a1", "A", arrival_host="h1") == [[0, 0]]
    # B (second) sees A, not C; from h1, C's h1 flow is out anyway
    assert t.rows([0], 10, 10, "b1", "B", arrival_host="h2") == [[10, 10]]
    # C (third) sees A and B, but not the asker's own flows (h3 asking: a1 and b1 count)
    assert t.rows([0], 10, 10, "c2", "C", arrival_host="h3") == [[30, 30]]
    assert t.rows([0], 10, 10, "c1", "C", arrival_host="h1") == [[20, 20]]  # h1's a1 is its own
    # a job not in the table yet arrives last: it sees every other host's flows of every job
    assert t.rows([0], 10, 10, "d1", "D", arrival_host="h4") == [[150, 150]]
    # A leaves (its only flow withdrawn) and comes back: now it is the newest
    t.update("a1", [0], 10, [0, 0], 10, job_id="A", host="h1")
    t.update("a1", [0], 10, [10, 10], 10, job_id="A", host="h1")
    assert t.rows([0], 10, 10, "a1", "A", arrival_host="h1") == [[100, 100]]  # B and C (h3); c1 is h1's
    assert t.rows([0], 10, 10, "b1", "B", arrival_host="h2") == [[0, 0]]  # B arrived first now
    # without arrival_host, rows are as before (the other jobs, all hosts)
    assert t.rows([0], 10, 10, "b1", "B") == [[130, 130]]


def test_a_ranked_view_in_arrival_order_orders_by_rank_then_arrival():
    """rows(below_rank=r, arrival_host=h) (job order smallest): the jobs ranked after r are left out
    whenever they came, a job ranked before r counts whenever it came, and among the jobs of rank r
    (or without a rank) those that arrived after the asking job are left out; h's own flows are left
    out, each flow once."""
    t = LoadTable(1, 2)
    t.update("b1", [0], 10, [1, 1], 10, job_id="B", host="h2", rank=8)  # big, first
    t.update("s1", [0], 10, [10, 10], 10, job_id="S", host="h2", rank=2)  # small, second
    t.update("t1", [0], 10, [100, 100], 10, job_id="T", host="h3", rank=2)  # small, third
    t.update("u1", [0], 10, [1000, 1000], 10, job_id="U", host="h3")  # no rank, fourth
    t.update("b2", [0], 10, [10000, 10000], 10, job_id="B", host="h1", rank=8)  # the asker's flow of B
    # S (rank 2, arrived before T): sees neither B (ranked after) nor T (same rank, later); U has no rank:
    # it is ordered by arrival, and came later
    assert t.rows([0], 10, 10, "s1", "S", below_rank=2, arrival_host="h1") == [[0, 0]]
    # T (rank 2, after S): sees S only; B ranked after, U later
    assert t.rows([0], 10, 10, "t1", "T", below_rank=2, arrival_host="h1") == [[10, 10]]
    # B (rank 8, first to arrive): sees S and T (ranked before, though they came later), not U (later);
    # its own flow b2 is left out as the job's, h1 asks
    assert t.rows([0], 10, 10, "b1", "B", below_rank=8, arrival_host="h1") == [[110, 110]]
    # from h2, B's view leaves out h2's own flows (s1) but counts h1's flow of another job: none here
    assert t.rows([0], 10, 10, "b1", "B", below_rank=8, arrival_host="h2") == [[100, 100]]
    # a job of rank 2 not in the table yet arrives last among rank 2: sees S, T (and not B); U has no
    # rank and came before it: counted
    assert t.rows([0], 10, 10, "v1", "V", below_rank=2, arrival_host="h9") == [[1110, 1110]]
    # U itself (no rank: arrival only) sees every job that arrived before it: B (both hosts), S, T
    assert t.rows([0], 10, 10, "u1", "U", arrival_host="h9") == [[10111, 10111]]


def test_host_rows_are_every_other_hosts_load():
    t = LoadTable(2, 2)
    t.update("a", [0], 10, [10, 20], 10, job_id="A", host="h1")
    t.update("b", [0, 1], 10, [5, 5], 10, job_id="B", host="h2")
    t.update("c", [0], 10, [1, 1], 10, job_id="B", host="h1")
    assert t.host_rows([0, 1], 10, 10, "h1") == [[5, 5], [5, 5]]
    assert t.host_rows([0, 1], 10, 10, "h2") == [[11, 21], [0, 0]]
    assert t.host_rows([0], 10, 10, "h9") == [[16, 26]]
