"""hostctl.core.traffic (link model, phases, standalone time, link work) and
hostctl.core.bound (lower bound on the average JCT): hand-computed cases and
property tests against schedules simulated here."""

from __future__ import annotations

import itertools
import math

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from hostctl.core import bound, traffic
from hostctl.core.traffic import JobTraffic

MB = 1_000_000
RATE_1MB = 8 * MB  # 8 Mbit/s: one megabyte per second


def net1(n_hosts: int = 4, rate: int = RATE_1MB) -> traffic.Network:
    hosts = [f"h{i}" for i in range(n_hosts)]
    return traffic.network(hosts, [0] * n_hosts, 1, rate, None)


def net_racks(racks: int = 2, per: int = 2, rate: int = RATE_1MB, uplink: int = RATE_1MB) -> traffic.Network:
    hosts = [f"h{i}" for i in range(racks * per)]
    return traffic.network(hosts, [i // per for i in range(racks * per)], racks, rate, uplink)


# ---------------------------------------------------------------- link model

def test_links_one_switch_and_racks():
    one = traffic.links(["h0", "h1"], [0, 0], 1, 200_000_000, None)
    assert one == {"h0:up": 200_000_000, "h0:down": 200_000_000, "h1:up": 200_000_000, "h1:down": 200_000_000}
    two = traffic.links(["h0", "h1", "h2", "h3"], [0, 0, 1, 1], 2, 100, 50)
    assert len(two) == 8 + 4
    assert two["rack0:up"] == two["rack1:down"] == 50 and two["h3:down"] == 100
    with pytest.raises(ValueError):
        traffic.links(["h0", "h1"], [0, 1], 2, 100, None)


def test_path():
    racks = {"h0": 0, "h1": 0, "h2": 1}
    assert traffic.path("h0", "h0", racks) == []
    assert traffic.path("h0", "h1", racks) == ["h0:up", "h1:down"]
    assert traffic.path("h0", "h2", racks) == ["h0:up", "rack0:up", "rack1:down", "h2:down"]
    assert traffic.path("h2", "h1", racks) == ["h2:up", "rack1:up", "rack0:down", "h1:down"]
    assert traffic.path("h0", "h2", {}) == ["h0:up", "h2:down"]  # one switch


# ---------------------------------------------------------------- phases and times

def test_ps_shards_and_phases():
    assert traffic.shards(10, 3) == [3, 3, 4]
    assert traffic.shards(9, 1) == [9]
    job = JobTraffic("ps", ("h0", "h1"), ("h2", "h3", "h4"), 11)
    update, gradient = traffic.iteration_phases(job)
    assert update.name == "update" and gradient.name == "gradient"
    assert sorted(update.flows) == sorted([("h0", w, 5) for w in ("h2", "h3", "h4")]
                                          + [("h1", w, 6) for w in ("h2", "h3", "h4")])
    assert sorted(gradient.flows) == sorted((d, s, b) for s, d, b in update.flows)


def test_ps_standalone_and_link_work_by_hand():
    # 1 server h0, 3 workers, 1 MB model, 1 MB/s links: update: h0:up carries 3 MB -> 3 s;
    # gradient: h0:down carries 3 MB -> 3 s; compute 0.5 s; 2 iterations -> 2 x 6.5 = 13 s (the
    # sequential analytic model). Lower bound: the last update ends >= 3 s, then its worker computes
    # 0.5 s and sends its own 1 MB (>= 1 s): 2 x 4.5 = 9 s.
    job = JobTraffic("ps", ("h0",), ("h1", "h2", "h3"), MB, compute_s=0.5, iterations=2)
    net = net1()
    assert traffic.phase_times(job, net) == pytest.approx([3.0, 3.0])
    assert traffic.analytic_s(job, net) == pytest.approx(13.0)
    assert traffic.standalone_s(job, net) == pytest.approx(9.0)
    assert traffic.link_work_s(job, net) == pytest.approx(
        {"h0:up": 6.0, "h0:down": 6.0, "h1:up": 2.0, "h1:down": 2.0, "h2:up": 2.0, "h2:down": 2.0,
         "h3:up": 2.0, "h3:down": 2.0})


def test_ps_bucketed_gradient_standalone_by_hand():
    # The job above with the gradient in 4 buckets over a backward pass of the whole compute
    # (0.5 s): the first bucket is ready at 0.125 s. Terms per iteration: U + c + min g/B =
    # 3 + 0.5 + 0.25; min u + c/B + G = 1 + 0.125 + 3 = 4.125; max(u + c + g/B) = 1 + 0.5 + 0.25.
    # So 2 x 4.125 = 8.25 s, below the 9 s of one burst after compute.
    job = JobTraffic("ps", ("h0",), ("h1", "h2", "h3"), MB, compute_s=0.5, iterations=2,
                     backward=1.0, buckets=4)
    assert traffic.standalone_s(job, net1()) == pytest.approx(8.25)
    # Half the compute is backward: first bucket at 0.25 + 0.0625 -> 1 + 0.3125 + 3 = 4.3125.
    half = JobTraffic("ps", ("h0",), ("h1", "h2", "h3"), MB, compute_s=0.5, iterations=2,
                      backward=0.5, buckets=4)
    assert traffic.standalone_s(half, net1()) == pytest.approx(8.625)
    # The update-bound term dominates with a long compute: U + c + g/B = 3 + 4 + 0.25.
    slow = JobTraffic("ps", ("h0",), ("h1", "h2", "h3"), MB, compute_s=4.0, iterations=1,
                      backward=1.0, buckets=4)
    assert traffic.standalone_s(slow, net1()) == pytest.approx(7.25)


@settings(max_examples=60, deadline=None)
@given(st.floats(0.0, 2.0), st.floats(0.01, 1.0), st.integers(2, 64))
def test_buckets_never_raise_the_standalone_bound(compute, backward, buckets):
    base = JobTraffic("ps", ("h0",), ("h1", "h2", "h3"), MB, compute_s=compute, iterations=3)
    bucketed = JobTraffic("ps", ("h0",), ("h1", "h2", "h3"), MB, compute_s=compute, iterations=3,
                          backward=backward, buckets=buckets)
    assert traffic.standalone_s(bucketed, net1()) <= traffic.standalone_s(base, net1()) + 1e-9


def test_ps_repeated_server_host_and_local_flows():
    # two shards on h0 (0.5 MB each) and a worker on h0 itself: its flows cross no link.
    job = JobTraffic("ps", ("h0", "h0"), ("h0", "h1"), MB)
    work = traffic.link_work_s(job, net1())
    assert work == pytest.approx({"h0:up": 1.0, "h1:down": 1.0, "h1:up": 1.0, "h0:down": 1.0})
    assert traffic.phase_times(job, net1()) == pytest.approx([1.0, 1.0])
    alone = JobTraffic("ps", ("h0",), ("h0",), MB, compute_s=0.25, iterations=4)
    assert traffic.link_work_s(alone, net1()) == {}
    assert traffic.standalone_s(alone, net1()) == pytest.approx(1.0)


@pytest.mark.parametrize("kind", ["allreduce", "torch"])
def test_ring_allreduce(kind):
    # W = 4, M = 4 MB + 1 byte: chunk = ceil(M / 4); 2(W - 1) = 6 steps, each one chunk per link.
    m = 4 * MB + 1
    job = JobTraffic(kind, (), ("h0", "h1", "h2", "h3"), m, compute_s=1.0, iterations=3)
    phases = traffic.iteration_phases(job)
    assert len(phases) == 6
    chunk = math.ceil(m / 4)
    assert phases[0].flows == (("h0", "h1", chunk), ("h1", "h2", chunk), ("h2", "h3", chunk), ("h3", "h0", chunk))
    step = chunk * 8 / RATE_1MB
    assert traffic.standalone_s(job, net1()) == pytest.approx(3 * (6 * step + 1.0))
    work = traffic.link_work_s(job, net1())
    assert set(work) == {f"h{i}:{d}" for i in range(4) for d in ("up", "down")}
    assert all(w == pytest.approx(3 * 6 * step) for w in work.values())


def test_racks_cross_rack_flows_load_rack_links():
    net = net_racks(uplink=RATE_1MB // 2)  # h0, h1 in rack 0; h2, h3 in rack 1; uplinks at 0.5 MB/s
    same = JobTraffic("ps", ("h0",), ("h1",), MB)
    assert not any(k.startswith("rack") for k in traffic.link_work_s(same, net))
    assert traffic.standalone_s(same, net) == pytest.approx(2.0)
    cross = JobTraffic("ps", ("h0",), ("h1", "h2", "h3"), MB)
    work = traffic.link_work_s(cross, net)
    # update: h0 -> h2, h3 cross rack0:up and rack1:down (2 MB at 0.5 MB/s = 4 s); gradient the reverse.
    assert work["rack0:up"] == pytest.approx(4.0) and work["rack1:down"] == pytest.approx(4.0)
    assert work["rack1:up"] == pytest.approx(4.0) and work["rack0:down"] == pytest.approx(4.0)
    assert work["h0:up"] == pytest.approx(3.0)
    assert traffic.phase_times(cross, net) == pytest.approx([4.0, 4.0])  # the uplink is the bottleneck
    # lower bound per iteration: max(U + g_min, u_min + G, max_k u_k + g_k) = max(4 + 1, 1 + 4, 2 + 2) = 5
    assert traffic.standalone_s(cross, net) == pytest.approx(5.0)
    # three copies: S = 5 each, each rack link 4 s per job -> L = 4, 8, 12 -> (5 + 8 + 12) / 3
    res = bound.avg_jct_lower_bound(traffic.bound_inputs([cross] * 3, net))
    assert res["avg_jct_s"] == pytest.approx(25 / 3)
    assert res["bottleneck"] == "rack0:down"  # ties between the four rack links: first by name
    assert res["per_link"]["h0:up"] == pytest.approx(20 / 3)  # 3 s per job: max(5,3)+max(5,6)+max(5,9)


def test_bench_jobdef_and_topology_fit():
    from hostctl_lab.bench.scenario import parse_scenario
    sc = parse_scenario({"testbed": {"racks": 2, "hosts_per_rack": 2, "link": "8mbit", "uplink": "8mbit"},
                         "jobs": [{"name": "a", "kind": "ps", "ps": ["h0"], "model": "1MB", "compute": 0.5,
                                   "iterations": 2, "count": 2, "arrival_step": 1.0}]})
    t = sc.topology
    net = traffic.network(t.hosts, t.rack_of, t.racks, t.link_bps, t.uplink_bps)
    inputs = traffic.bound_inputs(sc.jobs, net)
    assert [a for a, _, _ in inputs] == [0.0, 1.0]
    assert inputs[0][1] == pytest.approx(9.0)  # as in test_ps_standalone_and_link_work_by_hand
    assert inputs[0][2]["rack0:up"] == pytest.approx(4.0)  # h0 -> h2, h3 each iteration, 2 MB at 1 MB/s


# ---------------------------------------------------------------- bound: hand cases

def test_one_job_alone_bound_is_its_standalone_time():
    job = JobTraffic("ps", ("h0",), ("h1", "h2", "h3"), MB, compute_s=0.5, iterations=2)
    res = bound.avg_jct_lower_bound(traffic.bound_inputs([job], net1()))
    assert res["avg_jct_s"] == pytest.approx(9.0)
    assert res["standalone_s"] == pytest.approx([9.0])
    assert res["bottleneck"] is None  # the standalone time dominates
    res = bound.avg_jct_lower_bound([(5.0, 7.0, {"l": 7.0})])
    assert res["avg_jct_s"] == pytest.approx(7.0)


@pytest.mark.parametrize("n", [1, 2, 3, 7])
def test_identical_jobs_one_link(n):
    p = 2.5
    res = bound.avg_jct_lower_bound([(0.0, p, {"l": p})] * n)
    assert res["avg_jct_s"] == pytest.approx((n + 1) / 2 * p)
    assert res["bottleneck"] == ("l" if n > 1 else None)
    # the same from real jobs: identical rings on the same hosts, compute 0: every link's work = S
    job = JobTraffic("allreduce", (), ("h0", "h1", "h2"), 3 * MB)
    s = traffic.standalone_s(job, net1())
    assert s == pytest.approx(4.0)
    res = bound.avg_jct_lower_bound(traffic.bound_inputs([job] * n, net1()))
    assert res["avg_jct_s"] == pytest.approx((n + 1) / 2 * s)


def test_sorted_pairing_by_hand():
    # S = [5, 1, 1], works [1, 1, 1] -> L = [1, 2, 3]; sorted S [1, 1, 5]: max(1,1)+max(1,2)+max(5,3) = 8.
    res = bound.avg_jct_lower_bound([(0, 5, {"l": 1}), (0, 1, {"l": 1}), (0, 1, {"l": 1})])
    assert res["avg_jct_s"] == pytest.approx(8 / 3)
    assert res["per_link"] == pytest.approx({"l": 8 / 3})
    assert res["method"] == "sorted-pairing"


def test_unequal_arrivals_srpt():
    assert bound.srpt_completions([0, 1], [3, 1]) == pytest.approx([4, 2])
    assert bound.srpt_completions([2, 0, 0], [0, 1, 2]) == pytest.approx([2, 1, 3])
    # far apart: no interference, bound = standalone
    assert bound.avg_jct_lower_bound([(0, 1, {"l": 1}), (10, 1, {"l": 1})])["avg_jct_s"] == pytest.approx(1)
    # r = [0, 0.5], p = S = [2, 2]: SRPT C = [2, 4], flow times 2 + 3.5 -> 2.75 > mean S = 2
    res = bound.avg_jct_lower_bound([(0, 2, {"l": 2}), (0.5, 2, {"l": 2})])
    assert res["avg_jct_s"] == pytest.approx(2.75) and res["bottleneck"] == "l" and res["method"] == "srpt"


def test_max_over_links_and_empty():
    res = bound.avg_jct_lower_bound([(0, 1, {"a": 1, "b": 0.5}), (0, 1, {"a": 1}), (0, 1, {"b": 0.5})])
    assert res["per_link"] == pytest.approx({"a": (1 + 1 + 2) / 3, "b": 1.0})
    assert res["bottleneck"] == "a" and res["avg_jct_s"] == pytest.approx(4 / 3)
    assert bound.avg_jct_lower_bound([]) == {"avg_jct_s": 0.0, "bottleneck": None, "per_link": {},
                                             "standalone_s": [], "method": "sorted-pairing"}
    with pytest.raises(ValueError):
        bound.avg_jct_lower_bound([(0, -1, {})])


# ---------------------------------------------------------------- bound: properties

pos = st.floats(min_value=0.0, max_value=10.0, allow_nan=False)


@settings(max_examples=300, deadline=None)
@given(st.lists(st.tuples(pos, pos), min_size=1, max_size=6))
def test_permutation_brute_force_equals_sorted_pairing(pairs):
    s = [a for a, _ in pairs]
    lk = bound.prefix_sums_sorted([b for _, b in pairs])
    brute = min(sum(max(s[j], lk[perm[j]]) for j in range(len(s))) for perm in itertools.permutations(range(len(s))))
    assert bound.sorted_pairing_sum(s, [b for _, b in pairs]) == pytest.approx(brute, rel=1e-12, abs=1e-12)


@given(pos, pos, pos, pos)
def test_max_is_monge(a, a2, b, b2):
    a, a2 = sorted((a, a2))
    b, b2 = sorted((b, b2))
    assert max(a, b) + max(a2, b2) <= max(a, b2) + max(a2, b) + 1e-12


def simulate(jobs, policy: str, order=None) -> list[float]:
    """An actual preemptive schedule. jobs: (arrival, [(link or None, amount), ...]); a segment on a
    link needs `amount` seconds of that link at full rate (None: compute, on the job's own CPU).
    Each link serves its waiting segments by `policy`: "prio" (the first job in `order` gets all of
    the link) or "ps" (processor sharing). Returns JCTs."""
    n = len(jobs)
    seg = [0] * n
    rem = [segs[0][1] for _, segs in jobs]
    done: list[float | None] = [None] * n
    t = 0.0
    rank = {j: i for i, j in enumerate(order if order is not None else range(n))}
    while any(d is None for d in done):
        active = [j for j in range(n) if done[j] is None and jobs[j][0] <= t]
        rate = {}
        by_link: dict[str, list[int]] = {}
        for j in active:
            link = jobs[j][1][seg[j]][0]
            if link is None:
                rate[j] = 1.0
            else:
                by_link.setdefault(link, []).append(j)
        for link, js in by_link.items():
            if policy == "ps":
                for j in js:
                    rate[j] = 1.0 / len(js)
            else:
                rate[min(js, key=rank.__getitem__)] = 1.0
        cands = [rem[j] / r for j, r in rate.items() if r > 0]
        cands += [a - t for a, _ in jobs if a > t]
        dt = min(cands)
        t += dt
        for j, r in rate.items():
            rem[j] -= r * dt
            if rem[j] <= 1e-9:
                seg[j] += 1
                if seg[j] == len(jobs[j][1]):
                    done[j] = t
                else:
                    rem[j] = jobs[j][1][seg[j]][1]
    return [d - a for d, (a, _) in zip(done, jobs)]


segment = st.tuples(st.sampled_from([None, "a", "b"]), st.floats(min_value=0.05, max_value=4.0))
job_st = st.tuples(st.sampled_from([0.0, 0.0, 0.0, 0.7, 2.0, 5.0]), st.lists(segment, min_size=1, max_size=4))


def to_input(jobs):
    out = []
    for a, segs in jobs:
        work: dict[str, float] = {}
        for link, amount in segs:
            if link is not None:
                work[link] = work.get(link, 0.0) + amount
        out.append((a, sum(x for _, x in segs), work))
    return out


@settings(max_examples=300, deadline=None)
@given(st.lists(job_st, min_size=1, max_size=5), st.booleans(), st.data())
def test_bound_never_exceeds_a_simulated_schedule(jobs, same_arrival, data):
    if same_arrival:
        jobs = [(1.0, segs) for _, segs in jobs]
    lb = bound.avg_jct_lower_bound(to_input(jobs))["avg_jct_s"]
    order = data.draw(st.permutations(range(len(jobs))))
    for policy, o in (("ps", None), ("prio", order), ("prio", None)):
        jct = simulate(jobs, policy, o)
        assert all(c >= sum(x for _, x in segs) - 1e-6 for c, (_, segs) in zip(jct, jobs))
        assert lb <= sum(jct) / len(jct) + 1e-6, (policy, lb, jct)


@settings(max_examples=100, deadline=None)
@given(st.lists(st.floats(min_value=0.05, max_value=4.0), min_size=1, max_size=6))
def test_bound_is_attained_by_srpt_when_all_work_is_on_one_link(works):
    # equal arrivals, no compute: shortest-first on the link is optimal and meets the bound
    jobs = [(0.0, [("a", w)]) for w in works]
    order = sorted(range(len(works)), key=works.__getitem__)
    best = sum(simulate(jobs, "prio", order)) / len(works)
    assert bound.avg_jct_lower_bound(to_input(jobs))["avg_jct_s"] == pytest.approx(best, rel=1e-9)


@settings(max_examples=300, deadline=None)
@given(st.lists(job_st, min_size=1, max_size=5), st.booleans(), st.data())
def test_bound_is_monotone_in_added_work(jobs, same_arrival, data):
    if same_arrival:
        jobs = [(0.0, segs) for _, segs in jobs]
    inputs = to_input(jobs)
    before = bound.avg_jct_lower_bound(inputs)["avg_jct_s"]
    j = data.draw(st.integers(0, len(inputs) - 1))
    link = data.draw(st.sampled_from(["a", "b", "c"]))
    extra = data.draw(st.floats(min_value=0.0, max_value=5.0))
    a, s, work = inputs[j]
    work = dict(work)
    work[link] = work.get(link, 0.0) + extra
    grown = list(inputs)
    grown[j] = (a, s + extra * data.draw(st.sampled_from([0.0, 1.0])), work)
    after = bound.avg_jct_lower_bound(grown)["avg_jct_s"]
    assert after >= before - 1e-9


@settings(max_examples=200, deadline=None)
@given(st.lists(job_st, min_size=1, max_size=5))
def test_bound_at_least_mean_standalone_and_every_link(jobs):
    inputs = to_input(jobs)
    res = bound.avg_jct_lower_bound(inputs)
    assert res["avg_jct_s"] >= sum(s for _, s, _ in inputs) / len(inputs) - 1e-12
    assert all(res["avg_jct_s"] >= v - 1e-12 for v in res["per_link"].values())
    if res["bottleneck"] is not None:
        assert res["avg_jct_s"] == res["per_link"][res["bottleneck"]]
