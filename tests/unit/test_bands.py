import math

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from hostctl.core.bands import (
    MAX_BANDS, assign_bands, describe, next_rotation_s, priority_order, rr_epoch,
)

job_ids = st.lists(st.text("abcdefgh0123456789:.", min_size=1, max_size=12), min_size=0, max_size=40, unique=True)
sizes = st.one_of(st.none(), st.sampled_from([1, 10, 100, 1000]))


@st.composite
def job_sets(draw):
    ids = draw(job_ids)
    return {j: draw(sizes) for j in ids}


def test_fifo_and_single_job_get_no_bands():
    assert assign_bands({"a": None, "b": None}, "fifo", 6) == {}
    assert assign_bands({"a": 5}, "one", 6) == {}
    assert assign_bands({}, "rr", 6) == {}


def test_smaller_model_first_then_id_order():
    a = assign_bands({"big": 100, "small": 1, "mid": 10, "unknown": None}, "one", 6)
    assert a == {"small": 0, "mid": 1, "big": 2, "unknown": 3}
    assert assign_bands({"b": None, "a": None, "c": None}, "one", 6) == {"a": 0, "b": 1, "c": 2}


def test_two_jobs_alternate_under_rr():
    seq = [assign_bands({"j1": None, "j2": None}, "rr", 6, epoch=e) for e in range(4)]
    leaders = [min(s, key=s.get) for s in seq]
    assert leaders == ["j1", "j2", "j1", "j2"]


def test_one_ignores_epoch():
    jobs = {f"j{i}": None for i in range(5)}
    assert all(assign_bands(jobs, "one", 6, epoch=e) == assign_bands(jobs, "one", 6) for e in range(10))


def test_21_jobs_three_per_band():
    a = assign_bands({f"j{i:02d}": None for i in range(21)}, "one", 7)
    counts = [list(a.values()).count(b) for b in range(7)]
    assert counts == [3] * 7


def test_bad_arguments():
    with pytest.raises(ValueError):
        assign_bands({"a": 1, "b": 2}, "one", 0)
    with pytest.raises(ValueError):
        assign_bands({"a": 1, "b": 2}, "one", MAX_BANDS + 1)
    with pytest.raises(ValueError):
        assign_bands({"a": 1, "b": 2}, "lottery", 6)


@settings(max_examples=300, deadline=None)
@given(job_sets(), st.integers(1, MAX_BANDS), st.integers(0, 10_000), st.sampled_from(["one", "rr"]))
def test_band_properties(jobs, bands, epoch, policy):
    a = assign_bands(jobs, policy, bands, epoch)
    if len(jobs) <= 1:
        assert a == {}
        return
    # every job in exactly one band, within range
    assert set(a) == set(jobs)
    assert all(0 <= b < bands for b in a.values())
    # at most ceil(n/bands) jobs per band
    per = math.ceil(len(jobs) / bands)
    assert max(list(a.values()).count(b) for b in set(a.values())) <= per
    # smaller-first at every rotation step (unknown sizes count as largest)
    key = lambda j: math.inf if jobs[j] is None else jobs[j]  # noqa: E731
    for x in jobs:
        for y in jobs:
            if key(x) < key(y):
                assert a[x] <= a[y], (x, y, a)


@settings(max_examples=200, deadline=None)
@given(st.integers(2, 12), st.integers(0, 1000))
def test_rr_each_job_holds_each_rank_once(n, start):
    jobs = {f"job{i}": None for i in range(n)}
    ranks = {j: [] for j in jobs}
    prev = None
    for e in range(start, start + n):
        order = priority_order(jobs, "rr", e)
        for r, j in enumerate(order):
            ranks[j].append(r)
        if prev is not None:  # each step is a cyclic shift by one of the previous order
            assert order == prev[-1:] + prev[:-1] or order == prev[1:] + prev[:1]
        prev = order
    assert all(sorted(r) == list(range(n)) for r in ranks.values())


def test_rr_rotates_within_equal_size_groups_only():
    jobs = {"s1": 1, "s2": 1, "b1": 9, "b2": 9, "b3": 9}
    for e in range(12):
        order = priority_order(jobs, "rr", e)
        assert set(order[:2]) == {"s1", "s2"} and set(order[2:]) == {"b1", "b2", "b3"}


def test_epoch_alignment():
    assert rr_epoch(39.99, 20) == 1 and rr_epoch(40.0, 20) == 2
    assert next_rotation_s(41.0, 20) == 60.0
    assert describe({"a": 0, "b": 1}, ["a", "b", "c"]) == "band0=a band1=b default=c"
