"""Special paths of the per-slot daemon work (CPU) against the general paths they shortcut: on
random inputs, both give the same state and the same results, bit for bit."""

import math

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from hostctl.core.monitor import FlowMonitor, MonitorParams, gap_threshold, ring_thresholds, synth_trace

SLOT = 0.060


# -- monitor: FlowMonitor._records_simple (one record of a flow per batch) ------------------------
@st.composite
def flow_traces(draw):
    """A few flows' kernel views (synth_trace), with the same read times: iterations of 1-4
    bursts, gaps below and above phase_gap_s, some flows first seen late or gone early, some
    records lost; emit "end" (records as soon as the gap passed) or "next" (hc_pace.c)."""
    kernel_gap = draw(st.sampled_from([0.002, 0.020]))
    emit = draw(st.sampled_from(["end", "next"]))
    t_end = draw(st.floats(0.6, 2.4))
    reads = int(t_end / SLOT) + 1
    flows = {}
    for f in range(draw(st.integers(1, 5))):
        t = draw(st.floats(0.0, 0.3))
        bursts = []
        while t < t_end - 0.1:
            for _ in range(draw(st.integers(1, 4))):  # an iteration: buckets
                size = draw(st.integers(2, 400)) * 1000
                d = draw(st.floats(0.001, 0.070))
                bursts.append((t, size, d))
                t += d + draw(st.sampled_from([0.0, 0.004, 0.030]) | st.floats(0.0, 0.05))
            t += draw(st.sampled_from([0.025, 0.1, 0.2]) | st.floats(0.02, 0.4))  # compute
        trace = synth_trace(bursts, emit=emit, kernel_gap_s=kernel_gap, t_end=(reads - 1) * SLOT + 1e-9)
        first = draw(st.sampled_from([0, 0, 0, 2, 5]))
        last = reads - draw(st.sampled_from([0, 0, 0, 4]))
        lost = draw(st.sets(st.integers(0, reads - 1), max_size=2))
        flows[3 * f + 1] = (f"j{f % 2}", trace, first, last, lost)
    # (read, job, bytes_per_iter hint or None: clear it, iteration start hint (s) or None)
    hints = draw(st.lists(st.tuples(st.integers(0, reads - 1), st.sampled_from(["j0", "j1"]),
                                    st.sampled_from([None, 500_000]), st.none() | st.floats(0.0, t_end)),
                          max_size=3))
    params = MonitorParams(kernel_gap_s=draw(st.sampled_from([0.0, kernel_gap])),
                           min_fraction=draw(st.sampled_from([0.5, 1.0])), gap_memory=draw(st.sampled_from([4, 32])))
    return params, reads, flows, hints


def _state(mon: FlowMonitor) -> dict:
    """Everything the monitor keeps, comparable with ==."""
    out = {name: (v.tolist() if v.dtype == object else v.tobytes()) for name, v in mon._a.items()}
    out["e_eff"] = mon._e_eff.tobytes()
    out["junctions"] = {fid: repr(tr.junctions) for fid, tr in mon._tracks.items() if tr.junctions}
    out["counts"] = (mon.records_dropped, mon.hints_ignored, mon._nobs)
    return out


def _step(mon: FlowMonitor, k: int, flows: dict, hints: list) -> None:
    for at, job, size, start in hints:
        if at == k:
            if start is not None:
                mon.hint(job, bytes_per_iter=size, iteration_start_s=start)
            elif size is None:
                mon.clear_hint(job)
            else:
                mon.hint(job, bytes_per_iter=size)
    recs = [(fid, *r) for fid, (_, trace, first, last, lost) in flows.items() if k not in lost
            for r in trace[k][2]]
    if recs:
        fid, s, e, b = (np.array(x) for x in zip(*recs))
        mon.bursts(fid, s, e, b)
    live = [fid for fid, (_, _, first, last, _) in sorted(flows.items()) if first <= k < last]
    mon.observe(k * SLOT, np.array(live, dtype=np.int64), [flows[f][0] for f in live],
                np.array([flows[f][1][k][1] for f in live], dtype=np.int64))


@settings(max_examples=300, deadline=None)
@given(flow_traces())
def test_monitor_simple_records_equal_the_per_record_path(case):
    params, reads, flows, hints = case
    fast, slow = FlowMonitor(params), FlowMonitor(params)
    slow.fast_paths = False
    for k in range(reads):
        _step(fast, k, flows, hints)
        _step(slow, k, flows, hints)
        assert _state(fast) == _state(slow), k
        # busy <=> undecided junctions (the fast path trusts busy for "no junction")
        junc = {fid for fid, tr in fast._tracks.items() if tr.junctions}
        assert {int(f) for f in fast._a["ids"][fast._a["busy"]]} == junc
    a, b = fast.flow_stats(), slow.flow_stats()
    for name in a.__dataclass_fields__:
        x, y = np.asarray(getattr(a, name)), np.asarray(getattr(b, name))
        assert (x.tolist() == y.tolist()) if x.dtype == object else x.tobytes() == y.tobytes(), name
    assert {j: repr(s) for j, s in fast.jobs().items()} == {j: repr(s) for j, s in slow.jobs().items()}


@st.composite
def raw_inputs(draw):
    """Arbitrary reads and records (not a kernel's consistent view): counters that stall, jump or
    restart, records late, early, overlapping, before first sight or out of order."""
    reads = draw(st.integers(2, 25))
    steps = []
    acked = {}
    first = {fid: draw(st.sampled_from([0, 0, 1, 3])) for fid in (1, 2, 5)}  # first sight (read)
    for k in range(reads):
        t = k * SLOT
        recs = []
        for fid in draw(st.lists(st.sampled_from([1, 2, 5]), max_size=6)):
            s = t + draw(st.floats(-0.25, 0.0))
            recs.append((fid, s, s + draw(st.sampled_from([0.0, 0.001]) | st.floats(0.0, 0.1)),
                         draw(st.integers(0, 200_000))))
        live = [fid for fid in (1, 2, 5) if first[fid] <= k and draw(st.integers(0, 9))] or [1]
        for fid in live:
            step = draw(st.sampled_from([0, 0, 50_000]) | st.integers(-1000, 300_000))  # < 0: a restart
            acked[fid] = max(0, acked.get(fid, 0) + step)
        steps.append((recs, live, [acked[f] for f in live]))
    params = MonitorParams(kernel_gap_s=draw(st.sampled_from([0.0, 0.002, 0.020])),
                           gap_memory=draw(st.sampled_from([3, 8])))
    return params, steps


@settings(max_examples=300, deadline=None)
@given(raw_inputs())
def test_monitor_simple_records_equal_the_per_record_path_on_any_input(case):
    params, steps = case
    _fast_and_slow_agree(params, steps)


def _fast_and_slow_agree(params, steps) -> FlowMonitor:
    """Feed (records, live flows, counters) per read to a monitor with and one without the fast
    paths; their whole state is the same after every read. Returns the fast one."""
    fast, slow = FlowMonitor(params), FlowMonitor(params)
    slow.fast_paths = False
    for k, (recs, live, acked) in enumerate(steps):
        for mon in (fast, slow):
            if recs:
                mon.bursts(*(np.array(x) for x in zip(*recs)))
            mon.observe(k * SLOT, np.array(live), ["j"] * len(live), np.array(acked))
        assert _state(fast) == _state(slow), k
    return fast


def test_monitor_simple_record_that_straddles_first_sight():
    """A flow's second record started before the flow was first seen (its first one ended
    before): only its part after first sight counts, on both paths."""
    steps = [([], [2], [0]), ([], [1, 2], [1000, 0]), ([(1, 0.0, 0.01, 100)], [1, 2], [71_000, 0]),
             ([(1, 0.03, 0.10, 70_000)], [1, 2], [71_000, 0])]
    fast = _fast_and_slow_agree(MonitorParams(), steps)
    assert fast._a["rec_pos"][0] == 1000 + 40_000  # 3/7 of the record was before first sight


@settings(max_examples=300, deadline=None)
@given(st.lists(st.lists(st.sampled_from([0.02, 0.05, 0.2, 0.5, 2.0]) | st.floats(0.02, 3.0), max_size=40),
                min_size=1, max_size=6), st.integers(3, 12), st.sampled_from([2.0, 4.0, 10.0]))
def test_ring_thresholds_are_gap_threshold(flows, memory, ratio):
    """Several flows' gap rings at once (ties between jumps included) give each flow's gap_threshold."""
    ring, count = np.full((len(flows), memory), np.nan), np.zeros(len(flows), dtype=np.int64)
    for i, gaps in enumerate(flows):
        for g in gaps:
            ring[i, count[i] % memory] = g
            count[i] += 1
    got = ring_thresholds(ring, count, ratio)
    for i, gaps in enumerate(flows):
        want = gap_threshold(gaps[-memory:], ratio)
        assert (math.isnan(got[i]) and math.isnan(want)) or got[i] == want, (i, gaps)


def test_monitor_simple_records_take_the_common_case():
    """The fast path does take one-record-per-flow batches (else the test above shows nothing)."""
    bursts = [(0.1 + 0.2 * i, 300_000, 0.02) for i in range(12)]
    trace = synth_trace(bursts, emit="end", kernel_gap_s=0.02, t_end=2.6)
    flows = {1: ("j", trace, 0, len(trace), set()), 4: ("j", trace, 0, len(trace), set())}
    mon = FlowMonitor(MonitorParams(kernel_gap_s=0.02))
    done = []
    simple = mon._records_simple

    def counted(*args):
        mask = simple(*args)
        done.append(int(mask.sum()))
        return mask

    mon._records_simple = counted
    for k in range(len(trace)):
        _step(mon, k, flows, [])
    assert sum(done) >= 20 and mon.flow_stats().iterations.tolist() == [12, 12]
    assert not math.isnan(mon.flow_stats().bytes_per_iter[0])
