"""hostctl.core.monitor: per-slot flow stats, phase/iteration detection, hints.

Traces come from monitor.synth_trace (the kernel's view of a burst schedule):
emit="end" reports a burst as soon as its gap has passed, emit="next" as hc_pace.c
does (at the flow's next progress, so the last burst before an idle period is
reported late).
"""

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from hostctl.core.monitor import FlowMonitor, MonitorParams, gap_threshold, synth_trace

X = 1_000_000
SLOT = 0.060


def drive(mon, flows, on_read=None):
    """Feed traces {flow_id: (job, trace)} (same read times) to mon: bursts() then observe()."""
    ids = sorted(flows)
    n = len(flows[ids[0]][1])
    assert all(len(flows[f][1]) == n for f in ids)
    out = []
    for k in range(n):
        t = flows[ids[0]][1][k][0]
        recs = [(f, *r) for f in ids for r in flows[f][1][k][2]]
        if recs:
            fid, s, e, b = (np.array(x) for x in zip(*recs))
            mon.bursts(fid, s, e, b)
        acked = np.array([flows[f][1][k][1] for f in ids])
        stats = mon.observe(t, np.array(ids), [flows[f][0] for f in ids], acked)
        out.append((t, acked, stats))
        if on_read:
            on_read(t, acked, stats)
    return out


def schedule(n, *, first=0.1, size=X, dur=0.040, gap=0.150, buckets=1, bucket_gap=0.030):
    """n iterations of `buckets` equal bursts; returns (bursts, [(iteration start, end)])."""
    bursts, spans, t = [], [], first
    for _ in range(n):
        start = t
        for b in range(buckets):
            bursts.append((t, size // buckets, dur))
            t += dur + (bucket_gap if b < buckets - 1 else 0)
        spans.append((start, t))
        t += gap
    return bursts, spans


# -- parameters and helpers ------------------------------------------------------------------
@pytest.mark.parametrize("bad", [
    dict(slot_s=0), dict(slot_s=-1), dict(window_slots=0), dict(window_slots=2.5), dict(phase_gap_s=0),
    dict(min_fraction=0), dict(min_fraction=1.5), dict(history=0), dict(gap_ratio=1.0),
    dict(gap_memory=1), dict(kernel_gap_s=-0.1), dict(phase_gap_s=math.nan), dict(window_slots=True),
])
def test_bad_params(bad):
    with pytest.raises(ValueError, match=next(iter(bad))):
        MonitorParams(**bad)


def test_gap_threshold():
    assert math.isnan(gap_threshold([0.03] * 6, 3.0))
    thr = gap_threshold([0.03] * 6 + [0.2] * 2, 3.0)
    assert 0.03 < thr < 0.2
    assert math.isnan(gap_threshold([0.03] * 6 + [0.2], 3.0))  # one long gap is not a pattern
    assert math.isnan(gap_threshold([0.025, 0.07, 0.05, 0.03], 3.0))  # spread < ratio: no split
    assert 0.2 < gap_threshold([0.03, 0.2, 0.2, 5.0, 5.0], 3.0) < 5.0  # the largest jump wins


def _gap_threshold_loop(gaps, ratio, min_long=2):
    """The rule written as a plain loop (the first implementation): the largest jump >= ratio
    leaving min_long gaps above it, the last one on ties."""
    g = sorted(gaps)
    if len(g) <= min_long or g[0] <= 0:
        return math.nan
    best, best_r = math.nan, ratio
    for k in range(len(g) - min_long):
        r = g[k + 1] / g[k]
        if r >= best_r:
            best, best_r = math.sqrt(g[k] * g[k + 1]), r
    return best


@settings(max_examples=300, deadline=None)
@given(st.lists(st.sampled_from([0.001, 0.02, 0.03, 0.06, 0.1, 0.2, 0.5, 1.0, 5.0]) | st.floats(1e-4, 10.0),
                max_size=40),
       st.sampled_from([1.5, 2.0, 3.0, 10.0]), st.integers(1, 4))
def test_gap_threshold_is_the_loop(gaps, ratio, min_long):
    got, want = gap_threshold(gaps, ratio, min_long), _gap_threshold_loop(gaps, ratio, min_long)
    assert (math.isnan(got) and math.isnan(want)) or got == want


def test_synth_trace_is_the_kernel_view():
    bursts = [(0.1, 1000, 0.01), (0.111, 500, 0.01), (0.2, 300, 0.0)]  # 1 ms gap: one kernel burst
    nxt = synth_trace(bursts, slot_s=0.05, t_end=0.3, kernel_gap_s=0.002, emit="next")
    assert [round(t, 3) for t, _, _ in nxt] == [0.0, 0.05, 0.1, 0.15, 0.2, 0.25, 0.3]
    assert [c for _, c, _ in nxt] == [0, 0, 0, 1500, 1800, 1800, 1800]
    first = 0.1 + 0.01 / 1000  # first byte acked
    assert [r for _, _, r in nxt] == [(), (), (), (), ((first, 0.121, 1500),), (), ()]  # last one never
    end = synth_trace(bursts, slot_s=0.05, t_end=0.3, kernel_gap_s=0.002, emit="end")
    assert [r for _, _, r in end] == [(), (), (), ((first, 0.121, 1500),), (), ((0.2, 0.2, 300),), ()]
    half = synth_trace([(0.0, 1000, 0.1)], slot_s=0.05, t_end=0.1)
    assert [c for _, c, _ in half] == [0, 500, 1000]


# -- iterations ---------------------------------------------------------------------------------
@pytest.mark.parametrize("emit", ["end", "next"])
def test_one_burst_per_iteration(emit):
    n = 12
    bursts, spans = schedule(n, dur=0.070)
    trace = synth_trace(bursts, emit=emit)
    checked = []

    def on_read(t, acked, s):
        ended = sum(e <= t for _, e in spans)
        assert sum(e <= t - 2 * SLOT for _, e in spans) <= s.iterations[0] <= ended  # within 2 slots
        assert s.done_bytes[0] + s.iter_bytes[0] == acked[0]
        running = [k for k, (b, e) in enumerate(spans) if b < t < e]
        if running and running[0] >= 1:  # mid-iteration, E known
            k = running[0]
            assert s.iterations[0] == k
            assert s.iter_bytes[0] == acked[0] - k * X
            assert 0 < s.bytes_left[0] <= X
            assert s.bytes_left[0] == pytest.approx(X - s.iter_bytes[0], rel=0.05)
            checked.append(k)

    out = drive(FlowMonitor(), {1: ("job", trace)}, on_read)
    s = out[-1][2]
    assert s.iterations[0] == n
    assert s.bytes_per_iter[0] == pytest.approx(X, rel=0.05)
    assert s.iter_bytes[0] == 0 and s.done_bytes[0] == n * X
    assert s.bytes_left[0] == pytest.approx(X, rel=0.05)  # the next iteration has not started
    assert len(checked) >= n - 2  # the mid-iteration checks did run


@pytest.mark.parametrize("emit, kernel_gap", [("end", 0.002), ("next", 0.020)])
def test_bucketed_iterations(emit, kernel_gap):
    """4 buckets 30 ms apart (> phase_gap_s), 200 ms compute. Documented: before the
    200 ms gap has been seen twice (gap rule), every bucket is an iteration, so the
    first two iterations count 4 each; from the third on one per iteration; E is
    the median of 5, right from the fifth iteration on."""
    n = 10
    bursts, spans = schedule(n, dur=0.015, gap=0.200, buckets=4)
    trace = synth_trace(bursts, emit=emit, kernel_gap_s=kernel_gap)
    params = MonitorParams(kernel_gap_s=kernel_gap if kernel_gap >= 0.02 else 0.0)
    out = drive(FlowMonitor(params), {1: ("job", trace)})
    # count just before each iteration starts, and at the end
    marks = [b - 0.001 for b, _ in spans[1:]] + [out[-1][0]]
    counts = [max(s.iterations[0] for t, _, s in out if t <= m) for m in marks]
    assert counts == [4, 8] + list(range(9, 9 + n - 2))
    e_at = [max((t, s.bytes_per_iter[0]) for t, _, s in out if t <= m)[1] for m in marks]
    assert e_at[:2] == [X // 4, X // 4]
    assert all(e == pytest.approx(X, rel=0.05) for e in e_at[4:])
    last = out[-1][2]
    assert last.done_bytes[0] == n * X and last.iter_bytes[0] == 0


def test_bucketed_iterations_lazy_reports_unknown_kernel_gap():
    """With hc_pace.c's late reports and no kernel gap known, a 30 ms bucket gap
    just before an idle period may not be provable in time and is then merged; the
    first iterations differ, but from the third on every iteration counts once."""
    n = 10
    bursts, spans = schedule(n, dur=0.015, gap=0.200, buckets=4)
    out = drive(FlowMonitor(), {1: ("job", synth_trace(bursts, emit="next"))})
    marks = [b - 0.001 for b, _ in spans[1:]] + [out[-1][0]]
    counts = [max(s.iterations[0] for t, _, s in out if t <= m) for m in marks]
    assert counts[0] >= 1 and counts[1] <= 8
    assert np.diff(counts[1:]).tolist() == [1] * (n - 2)
    assert out[-1][2].bytes_per_iter[0] == pytest.approx(X, rel=0.05)


def test_volume_rule():
    """Buckets of 30 % and 70 % with 30 ms between them and 60 ms of compute: the
    gaps differ too little for the gap rule, only volume helps. With E known (here
    from a hint) the 30 % phase is below min_fraction * E and goes on. Without: the
    first bucket ends the first iteration (E unknown), so each bucket counts until
    the median of the last 5 is a 70 % bucket (after 3 iterations); from then on
    the 30 % bucket goes on, and E reaches X once 3 whole iterations are in."""
    n = 6
    bursts, t = [], 0.1
    for _ in range(n):
        bursts += [(t, 3 * X // 10, 0.02), (t + 0.05, 7 * X // 10, 0.04)]
        t += 0.15
    trace = synth_trace(bursts, emit="end")
    mon = FlowMonitor()
    mon.hint("job", bytes_per_iter=X)
    s = drive(mon, {1: ("job", trace)})[-1][2]
    assert s.iterations[0] == n and s.done_bytes[0] == n * X
    out = drive(FlowMonitor(), {1: ("job", trace)})
    marks = [0.1 + 0.15 * k - 0.001 for k in range(1, n)] + [out[-1][0]]
    counts = [max(s.iterations[0] for t, _, s in out if t <= m) for m in marks]
    assert counts == [2, 4, 6, 7, 8, 9]
    assert out[-1][2].bytes_per_iter[0] == X


@pytest.mark.parametrize("emit, kernel_gap", [("end", 0.002), ("next", 0.020)])
def test_iteration_boundary_between_reads(emit, kernel_gap):
    """25 ms between iterations, 60 ms reads: boundaries and the next start fall
    between two reads; the records place them, the counters give the bytes."""
    n = 10
    bursts, spans = schedule(n, dur=0.050, gap=0.025)
    trace = synth_trace(bursts, emit=emit, kernel_gap_s=kernel_gap)
    params = MonitorParams(kernel_gap_s=kernel_gap if kernel_gap >= 0.02 else 0.0)
    period = spans[1][0] - spans[0][0]

    def on_read(t, acked, s):
        assert s.done_bytes[0] + s.iter_bytes[0] == acked[0]
        assert s.done_bytes[0] == s.iterations[0] * X  # every boundary at its exact position
        lag = 2 * period + 2 * SLOT
        assert sum(e <= t - lag for _, e in spans) <= s.iterations[0] <= sum(e <= t for _, e in spans)

    out = drive(FlowMonitor(params), {1: ("job", trace)}, on_read)
    assert out[-1][2].iterations[0] == n
    assert out[-1][2].bytes_per_iter[0] == X


def test_lost_record():
    """hc_pace.c drops records when its ring buffer is full. Iterations 25 ms apart
    (no read falls in most gaps): the lost burst's two ends cannot be placed, so
    three iterations merge into one; the next record is re-anchored on the reads and
    every later boundary is exact again."""
    n, lost = 12, 5
    bursts, spans = schedule(n, dur=0.050, gap=0.025)
    trace = synth_trace(bursts, emit="end")
    trace = [(t, c, tuple(r for r in recs if r[1] != spans[lost][1])) for t, c, recs in trace]
    dones = []

    def on_read(t, acked, s):
        assert s.done_bytes[0] + s.iter_bytes[0] == acked[0]
        dones.append(int(s.done_bytes[0]))

    out = drive(FlowMonitor(), {1: ("job", trace)}, on_read)
    s = out[-1][2]
    assert s.iterations[0] == n - 2 and s.done_bytes[0] == n * X
    assert all(d % X == 0 for d in dones)  # every boundary at an exact iteration end
    assert lost * X not in dones and (lost + 1) * X not in dones
    assert s.bytes_per_iter[0] == X


def test_ps_broadcast_job():
    """A PS sends its shard to 5 workers at once each iteration; a second job on the host."""
    n, workers = 8, 5
    flows = {}
    for w in range(workers):
        bursts = [(0.1 + k * 0.2 + 0.002 * w, X // workers, 0.030 + 0.004 * w) for k in range(n)]
        flows[10 + w] = ("ps", synth_trace(bursts, emit="end", t_end=2.0))
    other, _ = schedule(5, first=0.13, size=3 * X, dur=0.08, gap=0.25)
    flows[3] = ("other", synth_trace(other, emit="end", t_end=2.0))
    mon = FlowMonitor()
    seen = []

    def on_read(t, acked, s):
        j = mon.jobs()
        ps = j["ps"]
        rows = s.job == "ps"
        assert ps.flows == workers and ps.iter_bytes == s.iter_bytes[rows].sum()
        assert ps.iterations == s.iterations[rows].max()
        k = int((t - 0.1) // 0.2)
        if 0 < k < n and 0.1 + k * 0.2 + 0.01 < t < 0.1 + k * 0.2 + 0.03 and ps.iterations == k:
            assert 0.1 + k * 0.2 - SLOT <= ps.iter_start_s <= 0.1 + k * 0.2  # within a read
            seen.append(k)

    drive(mon, flows, on_read)
    assert seen  # the mid-iteration checks ran
    j = mon.jobs()
    assert set(j) == {"ps", "other"}
    assert j["ps"].iterations == n and j["other"].iterations == 5
    assert j["ps"].bytes_per_iter == pytest.approx(X, rel=0.01) and j["ps"].source == "estimate"
    assert j["other"].bytes_per_iter == pytest.approx(3 * X, rel=0.01)
    assert j["ps"].iter_bytes == 0 and j["ps"].bytes_left == pytest.approx(X, rel=0.01)


# -- rates, B_i, flow set changes ---------------------------------------------------------------
def test_rate_and_max_filter():
    mon = FlowMonitor()
    per_slot = [0, 600, 60, 1200, 0, 0, 0, 0, 60, 6000]
    c, rates = 0, []
    for k, b in enumerate(per_slot):
        c += b
        # ids out of order: output is sorted by id
        s = mon.observe(k * SLOT, np.array([9, 7]), ["b", "a"], np.array([5, c]))
        assert s.flow_id.tolist() == [7, 9] and s.job.tolist() == ["a", "b"]
        rates.append(b / SLOT if k else 0.0)
        assert s.bytes_slot[0] == (b if k else 0)
        assert s.rate_Bps[0] == pytest.approx(rates[-1])
        assert s.max_rate_Bps[0] == pytest.approx(max(rates[-4:]))
        assert s.active[0] == (s.bytes_slot[0] > 0)
        assert s.max_rate_Bps[1] == 0
    assert mon.flow_stats() is s
    with pytest.raises(ValueError):
        s.rate_Bps[0] = 1.0  # snapshots are read-only


def test_uneven_elapsed_and_flow_reuse():
    mon = FlowMonitor()
    mon.observe(1.0, [7], ["a"], [1000])
    s = mon.observe(1.1, [7], ["a"], [2000])
    assert s.rate_Bps[0] == pytest.approx(1000 / 0.1)
    # flow 7 closes (missing), then the id comes back for a new connection
    s = mon.observe(1.2, [8], ["a"], [50])
    assert s.flow_id.tolist() == [8] and s.bytes_slot[0] == 0
    s = mon.observe(1.3, [7, 8], ["a", "a"], [10, 50])
    assert s.bytes_slot.tolist() == [0, 0] and s.max_rate_Bps[0] == 0 and s.iter_bytes[0] == 0
    s = mon.observe(1.4, [7, 8], ["a", "a"], [510, 50])
    assert s.bytes_slot[0] == 500 and s.iter_bytes[0] == 500
    # counter goes down without a missing read: a new connection reusing the id
    s = mon.observe(1.5, [7, 8], ["a", "a"], [20, 50])
    assert s.bytes_slot[0] == 0 and s.max_rate_Bps[0] == 0 and s.iter_bytes[0] == 0 and s.iterations[0] == 0


def test_reused_id_forgets_iterations():
    bursts, _ = schedule(3)
    trace = synth_trace(bursts, emit="end")
    mon = FlowMonitor()
    drive(mon, {4: ("j", trace)})
    assert mon.flow_stats().iterations[0] == 3
    t = trace[-1][0]
    s = mon.observe(t + SLOT, [4], ["j"], [100])  # lower counter: new connection
    assert s.iterations[0] == 0 and math.isnan(s.bytes_per_iter[0]) and math.isnan(s.bytes_left[0])


def test_bad_observe():
    mon = FlowMonitor()
    mon.observe(1.0, [1], ["a"], [0])
    with pytest.raises(ValueError, match="increase"):
        mon.observe(1.0, [1], ["a"], [0])
    with pytest.raises(ValueError, match="increase"):
        mon.observe(0.5, [1], ["a"], [0])
    with pytest.raises(ValueError, match="duplicate"):
        mon.observe(2.0, [1, 1], ["a", "a"], [0, 0])
    with pytest.raises(ValueError, match="length"):
        mon.observe(2.0, [1, 2], ["a"], [0, 0])
    with pytest.raises(ValueError):
        mon.observe(2.0, [1], ["a"], [-5])
    with pytest.raises(ValueError):
        mon.bursts([1], [2.0], [1.0], [10])  # ends before it starts


def test_bursts_before_first_read_and_after_close():
    mon = FlowMonitor()
    mon.observe(0.0, [1], ["a"], [0])
    mon.bursts([5], [0.01], [0.055], [4000])  # flow 5 not read yet
    s = mon.observe(0.06, [1, 5], ["a", "a"], [0, 4000])
    assert s.bytes_slot.tolist() == [0, 0] and s.iter_bytes.tolist() == [0, 4000]
    assert mon.jobs()["a"].iter_start_s == pytest.approx(0.01)
    s = mon.observe(0.12, [1, 5], ["a", "a"], [0, 4000])  # idle since 0.055: iteration over
    assert s.iterations.tolist() == [0, 1] and s.bytes_per_iter[1] == 4000 and s.iter_bytes[1] == 0
    mon.observe(0.18, [1], ["a"], [0])  # flow 5 closed
    mon.bursts([5], [0.11], [0.15], [700])  # late record of the closed flow: dropped
    assert mon.records_dropped == 1
    s = mon.observe(0.24, [1, 5], ["a", "a"], [0, 0])  # id reused
    assert s.iter_bytes.tolist() == [0, 0]


# -- hints --------------------------------------------------------------------------------------
def two_flow_job(n):
    big, _ = schedule(n, size=3 * X // 4)
    small, spans = schedule(n, size=X // 4, first=0.105, dur=0.02)
    t_end = spans[-1][1] + 0.5
    flows = {1: ("j", synth_trace(big, emit="end", t_end=t_end)), 2: ("j", synth_trace(small, emit="end", t_end=t_end))}
    return flows, spans


def test_hint_bytes_per_iter():
    flows, spans = two_flow_job(4)
    mon = FlowMonitor()
    mon.hint("j", bytes_per_iter=4 * X)  # before anything is known: equal shares
    mon.observe(0.0, [1, 2], ["j", "j"], [0, 0])
    assert mon.flow_stats().bytes_per_iter.tolist() == [2 * X, 2 * X]
    mon.clear_hint("j")
    mon2 = FlowMonitor()
    out = drive(mon2, flows)
    assert out[-1][2].bytes_per_iter.tolist() == [3 * X // 4, X // 4]
    mon2.hint("j", bytes_per_iter=2 * X)  # shares in proportion to the flows' own estimates
    t = out[-1][0] + SLOT
    s = mon2.observe(t, [1, 2], ["j", "j"], [3 * X + 1000, X])
    assert s.bytes_per_iter.tolist() == [1.5 * X, 0.5 * X]
    assert s.bytes_left.tolist() == [1.5 * X - 1000, 0.5 * X]
    j = mon2.jobs()["j"]
    assert (j.bytes_per_iter, j.source, j.iter_bytes, j.bytes_left) == (2 * X, "hint", 1000, 2 * X - 1000)
    mon2.clear_hint("j")
    assert mon2.jobs()["j"].source == "estimate" and mon2.jobs()["j"].bytes_per_iter == X


def test_hint_iteration_start():
    """A hook marks each iteration start 5 ms before the job sends; iterations are
    then counted by the hints only (an iteration ends when the next one starts)."""
    n = 5
    flows, spans = two_flow_job(n)
    starts = [b - 0.005 for b, _ in spans]
    mon = FlowMonitor()
    times = [t for t, _, _ in flows[1][1]]
    pending = list(starts)

    def on_read(t, acked, s):
        while pending and pending[0] <= t + SLOT:  # the hook fires between reads
            mon.hint("j", iteration_start_s=pending.pop(0))

    drive(mon, flows, on_read)
    assert times[-1] > spans[-1][1] + 0.3
    s = mon.flow_stats()
    j = mon.jobs()["j"]
    assert s.iterations.tolist() == [n - 1, n - 1]  # the first hint closes nothing: no bytes yet
    assert j.iterations == n - 1 and j.iter_start_s == starts[-1]
    assert s.iter_bytes.tolist() == [3 * X // 4, X // 4]  # the last iteration stays open
    assert s.done_bytes.tolist() == [(n - 1) * 3 * X // 4, (n - 1) * X // 4]
    assert j.bytes_per_iter == X and j.source == "estimate"
    # the hook's time is in the future for the monitor: applied by the next read
    mon.hint("j", iteration_start_s=times[-1] + 0.01)
    assert mon.jobs()["j"].iterations == n - 1
    mon.observe(times[-1] + SLOT, [1, 2], ["j", "j"], s.done_bytes + s.iter_bytes)
    j = mon.jobs()["j"]
    assert j.iterations == n and j.iter_bytes == 0 and j.iter_start_s == times[-1] + 0.01
    mon.hint("j", iteration_start_s=times[-1] + 0.02)  # an iteration without bytes still counts
    assert mon.jobs()["j"].iterations == n + 1


@pytest.mark.parametrize("kwargs", [
    dict(job="", bytes_per_iter=5), dict(job="j", bytes_per_iter=0), dict(job="j", bytes_per_iter=-1),
    dict(job="j", bytes_per_iter=True), dict(job="j"), dict(job="j", iteration_start_s=math.nan),
    dict(job="j", bytes_per_iter=math.inf), dict(job=None, bytes_per_iter=5),
])
def test_bad_hints(kwargs):
    with pytest.raises(ValueError):
        FlowMonitor().hint(**kwargs)


def test_hint_start_not_after_the_previous_is_ignored():
    mon = FlowMonitor()
    for k, c in enumerate([0, 100, 100]):
        mon.observe(k * SLOT, [1], ["j"], [c])
    mon.hint("j", iteration_start_s=0.09)  # closes the first iteration (100 bytes)
    mon.hint("j", iteration_start_s=0.09)  # a repeat (two hooks, a retry): not a new iteration
    mon.hint("j", iteration_start_s=0.01)
    assert mon.hints_ignored == 2 and mon.jobs()["j"].iterations == 1
    mon.hint("k", iteration_start_s=0.01)  # per job
    assert mon.hints_ignored == 2


# -- property -----------------------------------------------------------------------------------
MODES = {  # emit mode -> range of gaps between iterations (s), within a factor < gap_ratio (else
    # the gap rule would take the shorter ones for gaps between buckets)
    "end": (0.025, 0.090),  # anything above phase_gap_s (records give exact gaps)
    "next": (0.085, 0.300),  # late reports: a gap must also be visible in the reads (> gap + slot)
}


@st.composite
def schedules(draw, emit):
    lo, hi = MODES[emit]
    n = draw(st.integers(1, 6))
    t = draw(st.floats(0.0, 0.2))
    bursts, sizes = [], []
    for _ in range(n):
        size = round(X * draw(st.floats(0.97, 1.03)))
        parts = draw(st.integers(1, 4))
        # parts of >= 1000 bytes: a part's first byte comes < 0.05 ms after its start
        cuts = draw(st.lists(st.integers(1, size // 1000 - 1), min_size=parts - 1, max_size=parts - 1, unique=True))
        cuts = sorted(c * 1000 for c in cuts)
        for k, (a, b) in enumerate(zip([0] + cuts, cuts + [size])):
            d = draw(st.floats(0.002, 0.050))
            bursts.append((t, b - a, d))
            t += d
            if k < parts - 1:
                t += draw(st.floats(0.0, 0.018))  # within an iteration: below phase_gap_s
        t += draw(st.floats(lo, hi))
        sizes.append(size)
    return bursts, sizes


@pytest.mark.parametrize("emit", sorted(MODES))
def test_property_counts_and_bytes(emit):
    @settings(max_examples=40, deadline=None)
    @given(schedules(emit))
    def check(sched):
        bursts, sizes = sched
        trace = synth_trace(bursts, emit=emit, kernel_gap_s=0.002)
        s = drive(FlowMonitor(), {1: ("j", trace)})[-1][2]
        assert s.iterations[0] == len(sizes)
        assert s.done_bytes[0] + s.iter_bytes[0] == trace[-1][1] == sum(sizes)
        assert s.done_bytes[0] == sum(sizes) and s.iter_bytes[0] == 0
        assert abs(s.bytes_per_iter[0] - X) <= 0.03 * X + 1

    check()


# -- batches of records: one flow's state never depends on the others' ------------------------
def test_flows_batched_together_equal_flows_alone():
    """The records of many flows come in one bursts() call (the slow path works on copies of
    the batch's flows, written back once): each flow ends as it would alone. Flows of
    different shapes, some with several records per read, one first seen mid-trace."""
    shapes = [dict(dur=0.070), dict(dur=0.015, gap=0.200, buckets=4), dict(dur=0.050, gap=0.025),
              dict(size=3 * X, dur=0.01, gap=0.03, buckets=3, bucket_gap=0.004), dict(first=0.3, dur=0.02)]
    t_end = 3.0
    flows = {}
    for k, (shape, emit) in enumerate(zip(shapes * 2, ["end", "next"] * 5)):
        bursts, _ = schedule(8, **shape)
        flows[10 + 3 * k] = ("j" if k % 2 else "i", synth_trace(bursts, emit=emit, t_end=t_end))
    params = MonitorParams(kernel_gap_s=0.002)
    together = drive(FlowMonitor(params), flows)[-1][2]
    assert together.iterations.sum() > 8 * len(flows) * 0.8  # the traces did end iterations
    for row, fid in enumerate(sorted(flows)):
        alone = drive(FlowMonitor(params), {fid: flows[fid]})[-1][2]
        for name in ("iterations", "iter_bytes", "done_bytes", "bytes_per_iter", "max_rate_Bps"):
            assert getattr(together, name)[row] == getattr(alone, name)[0] or (
                math.isnan(getattr(together, name)[row]) and math.isnan(getattr(alone, name)[0])), (fid, name)


@settings(max_examples=200, deadline=None)
@given(st.lists(st.sampled_from([0.02, 0.03, 0.2, 0.5]) | st.floats(0.02, 2.0), max_size=80),
       st.integers(3, 12))
def test_kept_gap_ring_gives_the_gap_rule(gaps, memory):
    """A flow keeps its last gap_memory gaps in a ring (column count % gap_memory, nan unused);
    the threshold from the ring is gap_threshold of the gaps."""
    from collections import deque

    from hostctl.core.monitor import ring_thresholds

    ring, last = np.full((1, memory), np.nan), deque(maxlen=memory)
    for count, g in enumerate(gaps):
        ring[0, count % memory] = g
        last.append(g)
        got, want = ring_thresholds(ring, np.array([count + 1]), 4.0)[0], gap_threshold(last, 4.0)
        assert (math.isnan(got) and math.isnan(want)) or got == want
