"""The emulated host processor's model (hostctl_lab.workloads.processor.Processor): processor
sharing, checked against an exact event-driven reference. The server process: tests/integration/
test_processor_server.py."""

from __future__ import annotations


import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from hostctl_lab.workloads.processor import Processor

def reference(jobs: list[tuple[float, float]], cores: float) -> list[float]:
    """Completion times of steps (arrival, standalone seconds) under egalitarian processor
    sharing of `cores`, by exact events (the next arrival or the next completion)."""
    order = sorted(range(len(jobs)), key=lambda i: jobs[i][0])
    left: dict[int, float] = {}
    done = [0.0] * len(jobs)
    t, k = 0.0, 0
    while k < len(order) or left:
        rate = min(1.0, cores / len(left)) if left else 0.0
        t_next_arrival = jobs[order[k]][0] if k < len(order) else float("inf")
        t_next_done = t + min(left.values()) / rate if left else float("inf")
        t_new = min(t_next_arrival, t_next_done)
        for i in left:
            left[i] -= (t_new - t) * rate
        t = t_new
        for i in [i for i, v in left.items() if v <= 1e-9]:
            del left[i]
            done[i] = t
        while k < len(order) and jobs[order[k]][0] <= t:
            i = order[k]
            k += 1
            if jobs[i][1] <= 1e-9:
                done[i] = t
            else:
                left[i] = jobs[i][1]
    return done


def drive(jobs: list[tuple[float, float]], cores: float, extra_ticks: list[float]) -> list[float]:
    """Processor driven as the server drives it: advance at every arrival, at every
    predicted completion, and at arbitrary extra times (spurious wake-ups)."""
    p = Processor(cores)
    done: dict[int, float] = {}
    arrivals = sorted(range(len(jobs)), key=lambda i: jobs[i][0])
    ticks = sorted(extra_ticks)
    k = 0
    now = 0.0
    while k < len(arrivals) or p.left:
        nd = p.next_done(now)
        cands = [now + nd if nd is not None else float("inf"),
                 jobs[arrivals[k]][0] if k < len(arrivals) else float("inf")]
        cands += [x for x in ticks if x > now][:1]
        now = max(now, min(cands))
        for key in p.advance(now):
            done[key] = now
        while k < len(arrivals) and jobs[arrivals[k]][0] <= now:
            i = arrivals[k]
            k += 1
            if not p.start(i, jobs[i][1]):
                done[i] = now
    return [done[i] for i in range(len(jobs))]


def test_two_steps_share_one_core():
    p = Processor(1.0)
    p.advance(0.0)
    assert p.start("a", 1.0) and p.start("b", 1.0)
    assert p.next_done(0.0) == pytest.approx(2.0)
    assert p.advance(1.9) == []
    assert sorted(p.advance(2.0)) == ["a", "b"]


def test_a_late_step_slows_the_first():
    p = Processor(1.0)
    p.advance(0.0)
    p.start("a", 1.0)
    p.advance(0.5)
    p.start("b", 1.0)  # a has 0.5 left, now at half speed
    assert p.advance(1.5) == ["a"]
    assert p.advance(2.0) == ["b"]


def test_cores_run_that_many_steps_at_full_speed():
    p = Processor(2.0)
    p.advance(0.0)
    p.start("a", 1.0)
    p.start("b", 1.0)
    assert sorted(p.advance(1.0)) == ["a", "b"]
    p.start("c", 1.0)
    p.start("d", 1.0)
    p.start("e", 1.0)  # three on two cores: 2/3 speed each
    assert p.next_done(1.0) == pytest.approx(1.5)


def test_an_empty_step_is_done_at_once_and_a_dropped_one_never():
    p = Processor()
    p.advance(0.0)
    assert not p.start("zero", 0.0)
    p.start("gone", 1.0)
    p.drop("gone")
    assert p.next_done(0.0) is None and p.advance(5.0) == []


@settings(max_examples=300, deadline=None)
@given(jobs=st.lists(st.tuples(st.floats(0, 5), st.floats(0, 2)), min_size=1, max_size=12),
       cores=st.sampled_from([0.5, 1.0, 1.5, 3.0]),
       ticks=st.lists(st.floats(0, 20), max_size=20))
def test_matches_the_exact_reference(jobs, cores, ticks):
    want = reference(jobs, cores)
    got = drive(jobs, cores, ticks)
    assert got == pytest.approx(want, abs=1e-6)
