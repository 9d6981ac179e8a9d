"""--iter-model: paper 003's iteration time (hostctl_lab.sim.pace) as the cluster engine's model of a ring
job's iteration, checked against the table itself on cases computed by hand."""

from __future__ import annotations

import pytest

from hostctl.errors import ConfigError
from hostctl_lab.sim import pace
from hostctl_lab.sim.cluster import ITER_MODELS, ClusterSim, simulate
from hostctl_lab.sim.topo import single_switch
from hostctl_lab.sim.workload import ZOO, JobSpec

C = 10e9 / 8  # single_switch's 10 Gbit/s NICs in bytes/s


def zoo_job(name, model, gpus, iters, arrival=0.0, kind="ring"):
    m = ZOO[model]
    return JobSpec(name, arrival, gpus, model, m.size, m.compute_s, iters, kind)


@pytest.mark.parametrize("strategy", pace.STRATEGIES)
@pytest.mark.parametrize("ff", [True, False])
def test_a_ring_alone_iterates_in_the_tables_time_at_its_nic_rate(strategy, ff):
    """Alone on two servers the ring's flows get the whole NIC every iteration: each iteration takes
    T_iter(NIC rate) of paper 003's model (compute before the exchange = T_iter(B) - its duration),
    whether the engine fast-forwards the job or simulates every flow."""
    r = simulate(single_switch(2), [zoo_job("a", "vgg16", 16, 40)], gpus_per_server=8, iter_model=strategy,
                 fast_forward=ff)
    T = pace.iter_table("vgg16", 2, strategy).iter_s(C)
    assert r["jct_s"]["a"] == pytest.approx(40 * T, rel=1e-9)


@pytest.mark.parametrize("strategy", pace.STRATEGIES)
@pytest.mark.parametrize("park", [True, False])
def test_two_rings_in_lock_step_iterate_in_the_tables_time_at_half_the_nic(strategy, park):
    """Two identical rings on the same two NICs under fifo exchange at the same time, each at C/2.
    The first iteration's compute comes from the rate alone (C), every later one from C/2:
    JCT = (T(C) - w/C) + w/(C/2) + (N-1) T(C/2), w the bytes of a ring flow. Exact parking (the
    iterations repeat) must give the same: it saves how long each exchange has run."""
    n = 60
    jobs = [zoo_job("a", "resnet50", 2, n), zoo_job("b", "resnet50", 2, n)]
    r = simulate(single_switch(2), jobs, gpus_per_server=2, placement="ls", iter_model=strategy, park=park)
    tab = pace.iter_table("resnet50", 2, strategy)
    w = ZOO["resnet50"].size  # 2 (S-1) / S x size with S = 2
    want = (tab.iter_s(C) - w / C) + w / (C / 2) + (n - 1) * tab.iter_s(C / 2)
    for name in "ab":
        assert r["jct_s"][name] == pytest.approx(want, rel=1e-9)
    if park:
        assert r["stats"]["parks"] > 0


def test_overlap_shortens_an_iteration_against_serial_and_pace_is_no_slower_than_wfbp():
    """The same job under serial (compute, then the exchange) and under each strategy of paper 003:
    overlapping the exchange with the backward pass can only help, and PACE's schedule is never
    slower than WFBP's FIFO order (its Theorem 1; the table's values at this rate)."""
    jct = {m: simulate(single_switch(2), [zoo_job("a", "vgg16", 16, 20)], gpus_per_server=8,
                       iter_model=m)["jct_s"]["a"] for m in ITER_MODELS}
    assert jct["wfbp_fifo"] < jct["serial"]
    assert jct["pace"] <= jct["wfbp_fifo"] * (1 + 1e-12)


def test_the_floor_bounds_the_compute_at_every_rate():
    """overlap_compute never goes below the table's off-channel floor (horizon's lower bound on an
    iteration rests on it), from a starved exchange to an infinitely fast one."""
    sim = ClusterSim(single_switch(2), [zoo_job("a", "lstm-ptb", 16, 5)], gpus_per_server=8, iter_model="pace")
    sim.run()
    j = sim.jobs[0]
    assert j.tab is not None
    floor = j.tab.off_channel_floor_s
    assert floor >= 0
    for B in (1e3, 1e6, 1e8, C / 3, C, 1e11, float("inf")):
        j.ex_B = B
        c = sim.overlap_compute(j)
        raw = j.tab.iter_s(B) - j.ex_wire / B
        assert c >= floor and c == pytest.approx(max(raw, floor))
        assert raw >= floor - 1e-9 * j.tab.iter_s(B)  # the floor is a bound, not a clip, where wire = table's


def test_ps_and_one_server_jobs_keep_the_serial_model():
    jobs = [zoo_job("ps", "vgg16", 3, 2, kind="ps"), zoo_job("local", "vgg16", 1, 10)]
    a = simulate(single_switch(3), jobs, gpus_per_server=1, iter_model="pace")
    b = simulate(single_switch(3), jobs, gpus_per_server=1)
    assert a["jct_s"] == b["jct_s"]


@pytest.mark.parametrize("kw, words", [
    (dict(iter_model="bogus"), ["unknown --iter-model 'bogus'", "pace"]),
    (dict(iter_model="pace", network="mlcc"), ["--iter-model pace works with", "not mlcc"]),
    (dict(iter_model="pace", network="adadual"), ["not adadual"]),
])
def test_bad_settings_get_one_line(kw, words):
    with pytest.raises(ConfigError) as e:
        ClusterSim(single_switch(2), [zoo_job("a", "vgg16", 16, 5)], gpus_per_server=8, **kw)
    assert "\n" not in str(e.value)
    for w in words:
        assert w in str(e.value)


def test_a_model_paper_003_does_not_profile_is_refused():
    jobs = [JobSpec("s", 0.0, 16, "scenario", 10**8, 0.1, 5)]
    with pytest.raises(ConfigError, match="job s is 'scenario'"):
        ClusterSim(single_switch(2), jobs, gpus_per_server=8, iter_model="pace")
    ClusterSim(single_switch(2), jobs, gpus_per_server=8)  # serial: any model


@pytest.mark.parametrize("offset", [0.03, 0.11])
def test_parking_saves_how_long_an_exchange_has_run(offset):
    """Two rings on the same NICs, the second a fraction of an iteration later: their iterations
    settle into a period with one job's exchange open at the other's compute end, and the engine parks
    them (exact: the state repeats). The next compute of a job depends on when its exchange began, so a
    park must save it and the state must include it: parked and flow by flow, the same JCTs."""
    jobs = [zoo_job("a", "resnet50", 2, 300), zoo_job("b", "resnet50", 2, 300, arrival=offset)]
    kw = dict(gpus_per_server=2, placement="ls", iter_model="pace")
    parked = simulate(single_switch(2), jobs, **kw)
    exact = simulate(single_switch(2), jobs, park=False, **kw)
    assert parked["stats"]["parks"] > 0 and parked["events"] < exact["events"] / 5
    for name, t in exact["jct_s"].items():
        assert parked["jct_s"][name] == pytest.approx(t, rel=1e-9)


@pytest.mark.parametrize("arrival", [7.31, 7.52])
def test_a_fast_forwarded_job_resumes_mid_exchange_with_its_start_kept(arrival):
    """A ring alone is fast-forwarded; a second ring starting on its NICs brings it back to the present,
    at ``arrival`` inside its exchange or its compute. Its next compute depends on when that exchange
    began: fast-forwarded and flow by flow, the same JCTs."""
    jobs = [zoo_job("a", "vgg16", 2, 40), zoo_job("b", "resnet50", 2, 30, arrival=arrival)]
    kw = dict(gpus_per_server=2, placement="ls", iter_model="wfbp_fifo", park=False)
    ff = simulate(single_switch(2), jobs, **kw)
    flows = simulate(single_switch(2), jobs, fast_forward=False, **kw)
    assert ff["stats"]["fast_forwards"] > 0 and ff["stats"]["resumes"] > 0
    for name, t in flows["jct_s"].items():
        assert ff["jct_s"][name] == pytest.approx(t, rel=1e-9)


def test_steady_extrapolates_overlapped_jobs_close_to_the_exact_run():
    """--steady measures a job's mean iteration from its iteration ends, whatever made them: under
    paper 003's model three rings sharing two NICs (one arriving later, interrupting a park) end
    within 1% of the exact run, with far fewer events."""
    jobs = [zoo_job("a", "vgg16", 2, 2000), zoo_job("b", "resnet50", 2, 2500),
            zoo_job("c", "lstm-ptb", 2, 300, arrival=400.0)]
    kw = dict(gpus_per_server=3, placement="ls", iter_model="pace")
    approx = simulate(single_switch(2), jobs, steady=20, **kw)
    exact = simulate(single_switch(2), jobs, park=False, **kw)
    assert approx["stats"]["steady_parks"] > 0 and approx["events"] < exact["events"] / 5
    for name, t in exact["jct_s"].items():
        assert approx["jct_s"][name] == pytest.approx(t, rel=0.01)


@pytest.mark.parametrize("model", ["serial", "pace"])
def test_the_schedulers_estimates_use_the_iteration_models_time(model):
    """SRSF's and Ada-SRSF's remaining service (sched.remaining_s, ada_key) count a ring job's
    iterations at the time the engine gives them alone: compute + exchange (serial), T_iter at the
    NIC rate under --iter-model, not the serial compute plus exchange."""
    from hostctl_lab.sim import sched

    n = 30
    sim = ClusterSim(single_switch(2), [zoo_job("a", "vgg16", 16, n)], gpus_per_server=8, iter_model=model)
    sim.run()
    j = sim.jobs[0]
    if model == "serial":
        T = j.spec.compute_s + sched.exchange_s(sim, 0)
    else:
        T = pace.iter_table("vgg16", 2, "pace").iter_s(C)
        assert T < j.spec.compute_s + sched.exchange_s(sim, 0)
    assert j.end_s - j.start_s == pytest.approx(n * T, rel=1e-9)  # the estimate is the engine's time alone
    sim.now = j.start_s + 5 * T
    assert sched.remaining_s(sim, 0) == pytest.approx((n - 5) * T)
    j.done_iters = 5
    assert sched.ada_key(sim, 0) == pytest.approx((n - 5) * T * 16)
