"""PACE as the simulator's iteration-time model (lab/hostctl_lab/sim/pace.py), checked against
independent oracles: a min-max MILP (scipy.optimize.milp) for the preemptive schedule, brute force
for MaxMinSize and for contiguous fusion, the spec's layered toy vector (FIFO 11, PACE 10), and
published parameter counts for the model profiles (spec cluster-papers.md §3.5(b), tests 1-7)."""

from __future__ import annotations

import itertools
import math

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from scipy.optimize import Bounds, LinearConstraint, milp

from hostctl_lab.sim.pace import (
    C0_S, GBIT_Bps, ArCost, IterDag, IterTable, MaxMinTable, balanced_fusion, fifo_order, fifo_schedule, fuse,
    horovod_schedule, iter_table, layered_dag, max_min_size, model_dag, pace_schedule, preemptive_edd, t_iter,
)
from hostctl_lab.sim.pace_profiles import MODELS, profile

SETTINGS = settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
UNIT = ArCost(bandwidth_Bps=1.0, workers=2, c0_s=0.0)  # g(S) = S: sizes are AR times


# --------------------------------------------------------------------------- oracles

def milp_makespan(r, p, q) -> float:
    """Spec §3.2.3's min-max MILP: min C s.t. C >= t*x_i(t) + q_i, sum_t x_i(t) = p_i,
    sum_i x_i(t) <= 1, x_i(t) = 0 for t < r_i (slots 1..T, r_i = first allowed slot)."""
    n = len(r)
    T = int(max(r) + sum(p))
    nx = n * T
    c = np.zeros(nx + 1)
    c[-1] = 1.0
    ub = np.ones(nx + 1)
    ub[-1] = np.inf
    for i in range(n):
        ub[i * T:i * T + r[i] - 1] = 0  # slots 1..r_i-1 are index 0..r_i-2
    rows, lo, hi = [], [], []
    for i in range(n):  # enough slots
        a = np.zeros(nx + 1)
        a[i * T:(i + 1) * T] = 1
        rows.append(a), lo.append(p[i]), hi.append(p[i])
    for t in range(T):  # one AR per slot
        a = np.zeros(nx + 1)
        a[[i * T + t for i in range(n)]] = 1
        rows.append(a), lo.append(-np.inf), hi.append(1)
    for i in range(n):  # C - t*x_i(t) >= q_i
        for t in range(T):
            a = np.zeros(nx + 1)
            a[i * T + t] = -(t + 1)
            a[-1] = 1
            rows.append(a), lo.append(q[i]), hi.append(np.inf)
    integrality = np.ones(nx + 1)
    integrality[-1] = 0
    res = milp(c, constraints=LinearConstraint(np.array(rows), lo, hi), integrality=integrality,
               bounds=Bounds(np.zeros(nx + 1), ub))
    assert res.status == 0, res.message
    return float(res.fun)


def edd_makespan_slotted(r, p, q) -> float:
    """The slotted convention (first allowed slot r) is continuous release r - 1."""
    done, _ = preemptive_edd(np.array(r) - 1, p, q)
    return float(np.max(done + np.array(q)))


def compositions(n: int, r: int):
    """All ways to cut range(n) into r contiguous non-empty groups."""
    for cuts in itertools.combinations(range(1, n), r - 1):
        b = (0, *cuts, n)
        yield [tuple(range(b[k], b[k + 1])) for k in range(r)]


@st.composite
def random_dags(draw, integer: bool = False, max_ars: int = 5):
    """A DAG obeying Lemma 1: ops 0..m1-1 never wait for an AR (they produce the ARs); ops
    m1..m1+m2-1 consume them, with random compute edges between and within both parts."""
    m1, m2 = draw(st.integers(1, 4)), draw(st.integers(1, 4))
    m = m1 + m2
    dur = st.integers(0, 4) if integer else st.floats(0.0, 3.0, allow_nan=False)
    f = [float(draw(dur)) for _ in range(m)]
    preds = []
    for j in range(m):
        pool = list(range(min(j, m1))) if j < m1 else list(range(j))
        preds.append(tuple(sorted(draw(st.sets(st.sampled_from(pool), max_size=2))) if pool else ()))
    n = draw(st.integers(1, max_ars))
    producer = [draw(st.integers(0, m1 - 1)) for _ in range(n)]
    consumers = [tuple(sorted(draw(st.sets(st.integers(m1, m - 1), min_size=1, max_size=2)))) for _ in range(n)]
    size = st.integers(1, 5) if integer else st.floats(0.01, 4.0, allow_nan=False)
    sizes = [float(draw(size)) for _ in range(n)]
    return IterDag(np.array(f), tuple(preds), np.array(producer), tuple(consumers), np.array(sizes))


# --------------------------------------------------------------------------- 1. EDD = MILP optimum

def test_edd_matches_milp_on_random_instances():
    rng = np.random.default_rng(3)
    mismatches, gains = 0, []
    for _ in range(80):
        n = int(rng.integers(2, 6))
        r = [int(x) for x in rng.integers(1, 7, n)]
        p = [int(x) for x in rng.integers(1, 5, n)]
        q = [int(x) for x in rng.integers(0, 7, n)]
        opt = milp_makespan(r, p, q)
        mismatches += abs(edd_makespan_slotted(r, p, q) - opt) > 1e-6
        fifo = float(np.max(fifo_order(np.array(r) - 1, p) + np.array(q)))
        assert fifo >= opt - 1e-9  # FIFO is a feasible schedule: never better than the optimum
        gains.append(1 - opt / fifo)
    assert mismatches == 0
    assert np.mean(gains) > 0.02  # preemption matters on these instances (spec: ~9% on its 300)


@SETTINGS
@given(st.lists(st.tuples(st.integers(0, 8), st.integers(0, 4), st.integers(0, 6)), min_size=1, max_size=8),
       st.sampled_from([0.0, 0.5]))
def test_fast_makespan_equals_preemptive_edd(jobs, resume):
    """Algorithm 1's scan uses a lean copy of the rule (_edd_makespan): the same makespans."""
    from hostctl_lab.sim.pace import _edd_makespan
    r, p, q = (np.array(sorted(jobs))[:, k].astype(float) for k in range(3))
    done, _ = preemptive_edd(r, p, q, resume_s=resume)
    assert _edd_makespan(r, p, q, resume) == pytest.approx(float(np.max(done + q)))


@SETTINGS
@given(random_dags(integer=True))
def test_pace_schedule_matches_milp_on_random_dags(dag):
    sch = pace_schedule(dag, UNIT, slot_s=1.0)
    r = [int(x) + 1 for x in dag.ready_s]
    p = [int(x) for x in dag.size_bytes]
    opt = max(milp_makespan(r, p, [int(x) for x in dag.tail_s]), dag.compute_cp_s)
    assert sch.iter_s == pytest.approx(opt)


# --------------------------------------------------------------------------- 2. PACE <= FIFO

@SETTINGS
@given(random_dags(), st.floats(0.05, 50.0), st.integers(2, 16), st.sampled_from([0.0, 0.01, 0.5]))
def test_pace_never_slower_than_fifo(dag, bw, workers, c0):
    cost = ArCost(bw, workers, c0)
    fifo = fifo_schedule(dag, cost).iter_s
    edd = pace_schedule(dag, cost).iter_s
    plan = balanced_fusion(dag, cost)
    assert edd <= fifo + 1e-9
    assert plan.schedule.iter_s <= edd + 1e-9  # R = N (no fusion) is among the candidates
    assert plan.schedule.iter_s >= dag.compute_cp_s - 1e-9


@pytest.mark.parametrize("model", MODELS)
@pytest.mark.parametrize("gbps", [1, 10, 100])
def test_t_iter_pace_le_fifo_on_models(model, gbps):
    fifo = t_iter(model, gbps * GBIT_Bps, 12, "wfbp_fifo")
    pace = t_iter(model, gbps * GBIT_Bps, 12, "pace")
    assert pace.iter_s <= fifo.iter_s + 1e-12
    assert pace.compute_s <= pace.iter_s
    assert 0 < pace.duty_cycle <= 1 and 0 < fifo.duty_cycle <= 1


# --------------------------------------------------------------------------- 3. the layered toy vector

def test_layered_toy_vector_fifo_11_pace_10():
    # backward b3 -> b2 -> b1 (2 slots each) -> AR_l -> forward f1 -> f2 -> f3 (1 slot each)
    dag = layered_dag([1, 1, 1], [2, 2, 2], [[1.0], [1.0], [4.0]])  # AR sizes p1 = 1, p2 = 1, p3 = 4
    assert list(dag.ready_s) == [6, 4, 2]  # AR1, AR2, AR3: slots r = 7, 5, 3
    assert list(dag.tail_s) == [3, 2, 1]
    fifo = fifo_schedule(dag, UNIT)
    assert list(fifo.done_s) == [8, 7, 6] and fifo.iter_s == 11
    pace = pace_schedule(dag, UNIT)
    assert list(pace.done_s) == [7, 5, 8] and pace.iter_s == 10
    assert pace.runs[2] == ((2, 4), (5, 6), (7, 8))  # AR3 preempted by AR2, then by AR1
    assert pace.n_preemptions == 2
    parts = pace.partitions()
    assert [(pt.ar, pt.k) for pt in parts] == [(2, 0), (1, 0), (2, 1), (0, 0), (2, 2)]  # priority order
    assert [pt.bytes for pt in parts if pt.ar == 2] == [2.0, 1.0, 1.0]
    assert pace_schedule(dag, UNIT, slot_s=1.0).iter_s == 10
    assert balanced_fusion(dag, UNIT).schedule.iter_s == 10  # c0 = 0: fusion cannot help


def test_layered_toy_with_latency_and_partition_cost():
    """The toy with c0 = 0.5 (p = S + 0.5). Free preemption: AR3 runs [2,4], [5.5,6], [7.5,9.5] ->
    10.5. Paying c0 per resumed partition: AR3's two resumptions cost 1 more -> done 10.5 -> 11.5.
    FIFO: AR3 [2,6.5], AR2 [6.5,8], AR1 [8,9.5] -> 9.5 + 3 = 12.5."""
    dag = layered_dag([1, 1, 1], [2, 2, 2], [[1.0], [1.0], [4.0]])
    cost = ArCost(1.0, 2, c0_s=0.5)
    free = pace_schedule(dag, cost)
    paid = pace_schedule(dag, cost, partition_c0=True)
    assert free.iter_s == 10.5 and list(free.done_s) == [7.5, 5.5, 9.5]
    assert paid.iter_s == 11.5 and list(paid.done_s) == [7.5, 5.5, 10.5]
    assert paid.runs[2] == ((2, 4), (5.5, 6), (7.5, 10.5)) and paid.busy_s == free.busy_s + 1.0
    assert fifo_schedule(dag, cost).iter_s == 12.5
    assert pace_schedule(dag, UNIT, partition_c0=True).iter_s == 10  # c0 = 0: nothing to pay


@SETTINGS
@given(random_dags(), st.floats(0.1, 20.0))
def test_partition_cost_only_adds_time(dag, bw):
    cost = ArCost(bw, 4, c0_s=0.3)
    free = balanced_fusion(dag, cost)
    paid = balanced_fusion(dag, cost, partition_c0=True)
    assert paid.schedule.iter_s >= free.schedule.iter_s - 1e-9
    assert np.all(paid.iter_by_r >= free.iter_by_r - 1e-9)


# --------------------------------------------------------------------------- 4. MaxMinSize = brute force

@SETTINGS
@given(st.lists(st.integers(0, 50), min_size=1, max_size=10))
def test_max_min_size_matches_brute_force(sizes):
    n = len(sizes)
    tab = MaxMinTable(sizes)
    for r in range(1, n + 1):
        brute = max(min(sum(sizes[i] for i in g) for g in groups) for groups in compositions(n, r))
        assert tab.value(r) == brute
        groups = tab.groups(r)
        assert len(groups) == r and [i for g in groups for i in g] == list(range(n))
        assert min(sum(sizes[i] for i in g) for g in groups) == brute
    assert tab.groups(1) == [tuple(range(n))]
    assert tab.groups(n) == [(i,) for i in range(n)]
    assert max_min_size(sizes, n)[1] == [(i,) for i in range(n)]


# --------------------------------------------------------------------------- 5. Lemma 2

@SETTINGS
@given(st.lists(st.integers(0, 20), min_size=2, max_size=7), st.data())
def test_lemma2_contiguous_groups_are_ready_no_later(ready, data):
    """For any grouping (contiguous or not), the contiguous grouping of the ready-ordered chain
    with the same group sizes, taken in the order of the grouping's fused ready times, has every
    fused ready time no later than the grouping's, group by group."""
    n = len(ready)
    labels = data.draw(st.lists(st.integers(0, n - 1), min_size=n, max_size=n))
    groups = [[i for i in range(n) if labels[i] == g] for g in sorted(set(labels))]
    fused = sorted((max(ready[i] for i in g), len(g)) for g in groups)  # (fused ready, size)
    chain = sorted(ready)
    end = 0
    for ready_g, size in fused:
        end += size
        assert chain[end - 1] <= ready_g


def test_fuse_matches_algorithm1_shortcut():
    dag = model_dag("resnet50")
    cost = ArCost(5 * GBIT_Bps, 8)
    plan = balanced_fusion(dag, cost, r_values=[1, 7, 40, dag.n_ars])
    for r in (1, 7, 40, dag.n_ars):
        groups = [tuple(int(dag.chain[k]) for k in g) for g in dag.fusion_table.groups(r)]
        assert pace_schedule(fuse(dag, groups), cost).iter_s == pytest.approx(plan.iter_by_r[r - 1])
    assert np.isnan(plan.iter_by_r[1])


# --------------------------------------------------------------------------- 6. fusion needs an affine cost

@SETTINGS
@given(random_dags(), st.floats(0.1, 20.0))
def test_no_fusion_is_optimal_without_latency(dag, bw):
    plan = balanced_fusion(dag, ArCost(bw, 4, c0_s=0.0))
    assert plan.schedule.iter_s == pytest.approx(plan.iter_by_r[-1], rel=1e-12, abs=1e-12)


def test_fusion_pays_with_latency_on_resnet50():
    dag = model_dag("resnet50")
    assert np.mean(dag.size_bytes < 2**20) > 0.5  # more than half the tensors under 1 MB (paper 003)
    plan = balanced_fusion(dag, ArCost(10 * GBIT_Bps, 12, c0_s=C0_S))
    assert plan.r < dag.n_ars / 2
    assert plan.schedule.iter_s < 0.9 * plan.iter_by_r[-1]
    plan0 = balanced_fusion(dag, ArCost(10 * GBIT_Bps, 12, c0_s=0.0))
    assert plan0.schedule.iter_s == pytest.approx(plan0.iter_by_r[-1])


# --------------------------------------------------------------------------- 7. bandwidth sweep shape

@pytest.mark.parametrize("model", ["vgg16", "transformer", "lstm_ptb"])
def test_gain_over_fifo_has_interior_maximum(model):
    """Without per-AR latency (c0 = 0, so only preemption/order matters), PACE's gain over FIFO is
    ~0 when communication dominates (B -> 0) and when it vanishes (B -> inf), positive between."""
    gbps = np.geomspace(1e-3, 1e5, 17)
    gain = np.array([t_iter(model, g * GBIT_Bps, 12, "wfbp_fifo", c0_s=0).iter_s
                     / t_iter(model, g * GBIT_Bps, 12, "pace", c0_s=0).iter_s - 1 for g in gbps])
    k = int(np.argmax(gain))
    assert 0 < k < gbps.size - 1
    assert gain[k] > 0.05
    assert gain[0] < 0.01 and gain[-1] < 0.01
    assert np.all(gain >= -1e-12)


def test_gain_over_horovod_vanishes_at_both_ends_with_latency():
    gbps = np.geomspace(1e-2, 1e5, 15)
    gain = np.array([t_iter("vgg16", g * GBIT_Bps, 12, "horovod_fusion").iter_s
                     / t_iter("vgg16", g * GBIT_Bps, 12, "pace").iter_s - 1 for g in gbps])
    k = int(np.argmax(gain))
    assert 0 < k < gbps.size - 1 and gain[k] > 0.1
    assert abs(gain[0]) < 0.02 and abs(gain[-1]) < 0.1


# --------------------------------------------------------------------------- baselines and the table

@SETTINGS
@given(random_dags(), st.floats(0.1, 20.0), st.sampled_from([0.0, 0.05]))
def test_horovod_without_fusion_or_cycle_is_fifo(dag, bw, c0):
    cost = ArCost(bw, 6, c0)
    hv = horovod_schedule(dag, cost, threshold_bytes=0, cycle_s=0)
    assert hv.iter_s == pytest.approx(fifo_schedule(dag, cost).iter_s)


def test_horovod_fuses_up_to_the_threshold():
    dag = layered_dag([1.0] * 4, [1.0] * 4, [[10.0], [10.0], [10.0], [10.0]])
    cost = ArCost(1.0, 2, c0_s=0.5)
    # every tensor ready at its own tick (cycle 1): no fusion
    assert len(horovod_schedule(dag, cost, threshold_bytes=100, cycle_s=1.0).groups) == 4
    # one 10 s cycle sees all four: threshold 25 -> buffers of 2
    sch = horovod_schedule(dag, cost, threshold_bytes=25, cycle_s=10.0)
    assert sch.groups == ((3, 2), (1, 0))
    assert sch.busy_s == pytest.approx(2 * (0.5 + 20))


def test_one_worker_is_compute_only():
    for strategy in ("wfbp_fifo", "horovod_fusion", "pace"):
        it = t_iter("vgg16", GBIT_Bps, 1, strategy)
        assert it.iter_s == pytest.approx(0.0358 + 0.0537) and it.busy_s == 0 and it.wire_bytes == 0


def test_iter_table_interpolates_in_inverse_bandwidth():
    tab = IterTable.build("resnet50", 12, "pace")
    for b, t in zip(tab.bandwidth_Bps, tab.iter_s_grid):  # exact at the grid
        assert tab.iter_s(b) == pytest.approx(t_iter("resnet50", b, 12, "pace").iter_s)
    mids = np.array([1.5, 3, 7, 15, 35, 70, 300]) * GBIT_Bps
    exact = np.array([t_iter("resnet50", b, 12, "pace").iter_s for b in mids])
    assert np.max(np.abs(tab.iter_s(mids) / exact - 1)) < 0.05
    slow = 0.1 * GBIT_Bps  # below the grid: communication-bound extrapolation
    assert tab.iter_s(slow) == pytest.approx(t_iter("resnet50", slow, 12, "pace").iter_s, rel=0.05)
    d = tab.duty_cycle(np.array([1, 10, 100]) * GBIT_Bps)
    assert np.all((d > 0) & (d <= 1)) and d[0] > d[-1]
    probe = np.array([0.3, 1.0, 2.2, 19.0, 99.0, 1e4]) * GBIT_Bps  # the scalar fast path = the array path
    assert [tab.iter_s(float(b)) for b in probe] == pytest.approx(list(tab.iter_s(probe)), rel=1e-12)
    assert [tab.duty_cycle(float(b)) for b in probe] == pytest.approx(list(tab.duty_cycle(probe)), rel=1e-12)
    assert tab.iter_s(math.inf) == pytest.approx(t_iter("resnet50", math.inf, 12, "pace").iter_s)
    assert tab.iter_s(0.0) == math.inf and tab.duty_cycle(0) == 1.0  # a starved job never finishes
    assert list(tab.iter_s(np.array([0.0, math.inf]))) == [math.inf, tab.iter_s(math.inf)]
    with pytest.raises(ValueError, match="bandwidth_Bps must be >= 0"):
        tab.iter_s(-1.0)
    solo = IterTable.build("vgg16", 1, "pace", grid_gbps=(1, 10))
    assert solo.iter_s(0.0) == pytest.approx(0.0895) and solo.duty_cycle(5e8) == 0.0
    assert iter_table("ResNet-50", 12, "pace") is iter_table("resnet50", 12, "pace")


# --------------------------------------------------------------------------- profiles and inputs

@pytest.mark.parametrize("model,params", [
    ("vgg16", 138_357_544), ("resnet50", 25_557_032), ("inception_v3", 27_161_264),  # torchvision counts
    ("lstm_ptb", 66_034_000), ("transformer", 91_787_544),
])
def test_profile_parameter_counts(model, params):
    prof = profile(model)
    assert prof.n_params == params
    assert prof.fwd_s.sum() == pytest.approx(prof.t_f_s) and prof.bwd_s.sum() == pytest.approx(prof.t_b_s)


def test_profiles_match_the_papers_totals():
    mib = {m: profile(m).model_bytes / 2**20 for m in MODELS}
    for m, table3 in (("vgg16", 526.4), ("resnet50", 99.2), ("inception_v3", 103.0), ("lstm_ptb", 251.8)):
        assert mib[m] == pytest.approx(table3, rel=0.03)  # paper 000 Table III "Model Size (MB)"
    assert profile("transformer").n_params / 1e6 == pytest.approx(91.8, abs=0.05)  # paper 003 Table II
    vgg = profile("vgg16").tensor_bytes
    assert vgg.max() == 411_041_792 and vgg.min() == 256  # fc6 weight (paper: 410 MB) and conv1 bias (256 B)
    t = profile("transformer")
    assert 0.01 < t.t_f_s < 0.2 and t.t_b_s == pytest.approx(1.5 * t.t_f_s)


@pytest.mark.parametrize("call,msg", [
    (lambda: ArCost(0, 4), "bandwidth_Bps must be > 0"),
    (lambda: ArCost(1e9, 0), "workers must be an integer >= 1"),
    (lambda: t_iter("alexnet", 1e9, 4), "unknown model 'alexnet'"),
    (lambda: t_iter("vgg16", 1e9, 4, "fastest"), "unknown strategy 'fastest'"),
    (lambda: IterDag(np.ones(2), ((1,), ()), np.array([0]), ((1,),), np.ones(1)), "topological order"),
    (lambda: IterDag(np.ones(3), ((), (0,), (1,)), np.array([0, 2]), ((1,), (2,)), np.ones(2)), "Lemma 1"),
    (lambda: fuse(model_dag("vgg16"), [(0, 1)]), "must partition"),
])
def test_bad_input_names_the_problem(call, msg):
    with pytest.raises(ValueError, match=msg):
        call()
