"""lab/hostctl_lab/analysis/opt_tworack.py: the fluid model's fifo and priority schedules on cases whose answers are
known in closed form, and its lower bounds (never above a schedule the model can run, tight where
the optimum is known)."""

from __future__ import annotations

import json
import random

import pytest

pytest.importorskip("scipy")  # the dev extra and the lab pin it

from hostctl_lab.analysis import opt_tworack as opt  # noqa: E402

MB = 1 << 20
RATE = 8 * MB  # bits/s: 1 MiB/s, so a 1 MiB flow alone takes 1 s


def two_jobs_one_link():
    """Two PS jobs with one worker each and the same PS host: their updates share h0:up, their
    gradients h0:down. One iteration, no compute."""
    net = opt.make_net(["h0", "h1", "h2"], RATE)
    return opt.Model("two", net, (opt.PSJob("a", ("h0",), (MB,), ("h1",), 0.0, 1),
                                  opt.PSJob("b", ("h0",), (MB,), ("h2",), 0.0, 1)))


def test_two_jobs_fifo_and_priority_by_hand():
    m = two_jobs_one_link()
    fifo = opt.simulate(m)
    # fair: both updates at 0.5 MiB/s until 2 s, both gradients until 4 s
    assert fifo.jct == pytest.approx({"a": 4.0, "b": 4.0})
    # a first: a's update 0-1, its gradient 1-2 (h0:down), b's update 1-2 (h0:up), its gradient 2-3
    prio = opt.simulate(m, ["a", "b"])
    assert prio.jct == pytest.approx({"a": 2.0, "b": 3.0})
    assert opt.simulate(m, ["b", "a"]).jct == pytest.approx({"a": 3.0, "b": 2.0})
    r = opt.search_orders(m, fifo)
    assert r["orders_tried"] == 2 and r["best"]["avg_jct_s"] == pytest.approx(2.5)
    assert r["best"]["ratio_vs_fifo"] == pytest.approx(2.5 / 4.0)


def test_ps_job_alone_fair_and_one_worker_after_another():
    # PS h0, workers h1 h2, 2 MiB model, 0.5 s compute, 3 iterations
    net = opt.make_net(["h0", "h1", "h2"], RATE)
    m = opt.Model("ps", net, (opt.PSJob("p", ("h0",), (2 * MB,), ("h1", "h2"), 0.5, 3),))
    # fair: the two updates share h0:up (4 s), compute, the two gradients share h0:down (4 s)
    assert opt.simulate(m).jct["p"] == pytest.approx(3 * (4 + 0.5 + 4))
    # by worker: w0's update 0-2, w1's 2-4; w0's gradient 2.5-4.5, w1's 4.5-6.5 on h0:down
    assert opt.simulate(m, ["p"], by_worker=True).jct["p"] == pytest.approx(3 * 6.5)


def test_sharded_ps_sends_each_worker_every_shard():
    # two servers (h0, h1) of 1 MiB shards, one worker h2: its down link carries both shards (2 s),
    # then both gradients leave its up link (2 s)
    net = opt.make_net(["h0", "h1", "h2"], RATE)
    m = opt.Model("sh", net, (opt.PSJob("p", ("h0", "h1"), opt._shards(2 * MB, 2), ("h2",), 0.0, 2),))
    assert opt.simulate(m).jct["p"] == pytest.approx(2 * 4.0)


def test_ring_steps_by_hand():
    # 3 ranks on a ring h0 -> h1 -> h2 -> h0, 3 MiB model: 4 steps of 1 MiB, each on its own links
    net = opt.make_net(["h0", "h1", "h2"], RATE)
    m = opt.Model("ring", net, (opt.RingJob("r", ("h0", "h1", "h2"), MB, 0.25, 2),))
    assert opt.simulate(m).jct["r"] == pytest.approx(2 * (0.25 + 4 * 1.0))
    # a second ring on the same hosts in the same direction halves every step's rate
    m2 = opt.Model("rings", net, (opt.RingJob("r", ("h0", "h1", "h2"), MB, 0.25, 2),
                                  opt.RingJob("s", ("h0", "h1", "h2"), MB, 0.25, 2)))
    assert opt.simulate(m2).jct == pytest.approx({"r": 2 * (0.25 + 8.0), "s": 2 * (0.25 + 8.0)})


def test_cross_traffic_is_backlogged_for_its_duration():
    net = opt.make_net(["h0", "h1", "h2"], RATE)
    job = opt.PSJob("p", ("h0",), (MB,), ("h1",), 0.0, 1)
    m = opt.Model("x", net, (job,), (opt.Cross("bulk", "h0", "h2", 0.0, 10.0),))
    fifo = opt.simulate(m)
    # the update shares h0:up with the bulk flow (2 s), the gradient goes alone (1 s)
    assert fifo.jct["p"] == pytest.approx(3.0)
    assert fifo.cross_bytes["bulk"] == pytest.approx(9 * MB)  # 0.5 MiB/s for 2 s, then 1 MiB/s
    assert fifo.cross_bps["bulk"] == pytest.approx(9 * MB * 8 / 10)
    job_first = opt.simulate(m, ["p", "cross:bulk"])
    assert job_first.jct["p"] == pytest.approx(2.0) and job_first.cross_bytes["bulk"] == pytest.approx(9 * MB)
    bulk_first = opt.simulate(m, ["cross:bulk", "p"])
    assert bulk_first.jct["p"] == pytest.approx(12.0) and bulk_first.cross_bytes["bulk"] == pytest.approx(10 * MB)
    assert opt.cross_share(bulk_first, fifo) == pytest.approx(10 / 9)


def test_rack_uplink_is_on_the_path_and_shared():
    net = opt.make_net(["h0", "h1", "h2", "h3"], RATE, [0, 0, 1, 1], RATE)
    assert [net.links[i] for i in net.path("h0", "h2")] == ["h0:up", "rack0:up", "rack1:down", "h2:down"]
    assert [net.links[i] for i in net.path("h0", "h1")] == ["h0:up", "h1:down"]
    # two PS jobs from rack 0 to rack 1: the uplink (as fast as a host link) is their bottleneck
    m = opt.Model("r", net, (opt.PSJob("a", ("h0",), (MB,), ("h2",), 0.0, 1),
                             opt.PSJob("b", ("h1",), (MB,), ("h3",), 0.0, 1)))
    assert opt.simulate(m).jct == pytest.approx({"a": 4.0, "b": 4.0})


def test_identical_jobs_are_ordered_once():
    m = two_jobs_one_link()
    same = opt.Model("same", m.net, (opt.PSJob("a", ("h0",), (MB,), ("h1",), 0.0, 1),
                                     opt.PSJob("b", ("h0",), (MB,), ("h1",), 0.0, 1)))
    assert opt.unique_orders(m) == ([("a", "b"), ("b", "a")], True)
    assert opt.unique_orders(same) == ([("a", "b")], True)
    with_cross = opt.Model("c", m.net, m.jobs, (opt.Cross("x", "h1", "h2", 0.0, 1.0),))
    assert len(opt.unique_orders(with_cross)[0]) == 6 and len(opt.unique_orders(with_cross, "bottom")[0]) == 2


def test_many_jobs_are_sampled_not_enumerated():
    # 12 identical jobs: one order; 12 distinct ones: 479001600 orders, so a sample
    net = opt.make_net([f"h{i}" for i in range(13)], RATE)
    same = opt.Model("s", net, tuple(opt.PSJob(f"j{k}", ("h0",), (MB,), ("h1",), 0.0, 1) for k in range(12)))
    assert opt.unique_orders(same) == ([tuple(f"j{k}" for k in range(12))], True)
    distinct = opt.Model("d", net, tuple(opt.PSJob(f"j{k}", ("h0",), ((k + 1) * MB,), (f"h{k + 1}",), 0.0, 1)
                                         for k in range(12)))
    orders, exhaustive = opt.unique_orders(distinct, max_orders=700, sample=50)
    assert not exhaustive and len(orders) == 50 and len(set(orders)) == 50
    # the scenario's order (here also by size, smallest first), then largest first, then random ones
    assert orders[0] == tuple(f"j{k}" for k in range(12)) and orders[1] == orders[0][::-1]
    count, _ = opt.multiset_orders(["a", "b", "c", "d"], {"a": 1, "b": 1, "c": 2, "d": 3}.get)
    assert count == 12


@pytest.mark.parametrize("slot", [None, 0.05])
def test_bound_is_tight_on_two_jobs(slot):
    m = two_jobs_one_link()
    b = opt.lp_bound(m, slot, 2.0 + 3.0)
    # the optimum is 2.5 (one job after the other); the bound may lose a slot's rounding, no more
    assert 2.5 - 0.05 <= b["bound_avg_jct_s"] <= 2.5 + 1e-6
    assert b["floor_avg_jct_s"] == pytest.approx(2.0)  # each job alone


def test_bound_sees_a_job_pipelining_its_workers():
    # one PS job alone: sending the workers their updates one after another beats fair sharing
    # (6.5 s against 8.5 s per iteration, above); no bound may exceed the pipelined schedule
    net = opt.make_net(["h0", "h1", "h2"], RATE)
    m = opt.Model("ps", net, (opt.PSJob("p", ("h0",), (2 * MB,), ("h1", "h2"), 0.5, 1),))
    for slot in (None, 0.05):
        b = opt.lp_bound(m, slot, 6.5)["bound_avg_jct_s"]
        assert 6.5 - 0.1 <= b <= 6.5 + 1e-6


def test_bound_refuses_a_sum_below_the_floors():
    with pytest.raises(ValueError, match="floors"):
        opt.lp_bound(two_jobs_one_link(), None, 3.0)


def _random_model(seed: int):
    rng = random.Random(seed)
    hosts = [f"h{i}" for i in range(4)]
    racks = [0, 0, 1, 1] if rng.random() < 0.5 else None
    net = opt.make_net(hosts, RATE, racks, RATE * rng.choice([0.5, 1.0]) if racks else None)
    jobs = []
    for k in range(rng.choice([2, 3])):
        comp, it = rng.choice([0.0, 0.3, 1.0]), rng.choice([1, 2])
        if rng.random() < 0.7:
            srv = tuple(rng.sample(hosts, rng.choice([1, 2])))
            jobs.append(opt.PSJob(f"j{k}", srv, opt._shards(2 * MB, len(srv)), tuple(rng.sample(hosts, 2)), comp, it,
                                  rng.choice([0.0, 0.5])))
        else:
            jobs.append(opt.RingJob(f"j{k}", tuple(rng.sample(hosts, 3)), MB // 3, comp, it))
    cross = (opt.Cross("x", *rng.sample(hosts, 2), 0.5, 2.5),) if rng.random() < 0.4 else ()
    return opt.Model(f"r{seed}", net, tuple(jobs), cross)


@pytest.mark.parametrize("seed", range(8))
def test_bounds_never_exceed_a_schedule_the_model_runs(seed):
    m = _random_model(seed)
    fifo = opt.simulate(m)
    r = opt.search_orders(m, fifo)
    best = r["best"]["avg_jct_s"]
    total = sum(r["best"]["jct_s"][j.name] + j.arrival for j in m.jobs)
    untimed = opt.lp_bound(m, None, total)["bound_avg_jct_s"]
    timed = opt.lp_bound(m, 0.1, total)["bound_avg_jct_s"]
    floor = sum(c - j.arrival for c, j in zip(opt.job_floor(m), m.jobs)) / len(m.jobs)
    assert floor - 1e-6 <= untimed <= timed + 1e-6  # the time index only adds constraints
    assert timed <= best + 1e-6 and best <= r["worst"]["avg_jct_s"] + 1e-9


def test_scenario_command_writes_json(tmp_path, capsys):
    toml = tmp_path / "tiny.toml"
    toml.write_text("""name = "tiny"
description = "two PS jobs across two racks"
[testbed]
racks = 2
hosts_per_rack = 2
link = "100mbit"
uplink = "100mbit"
[[jobs]]
name = "a"
ps = ["h0"]
workers = ["h2", "h3"]
model = "1MiB"
iterations = 3
[[jobs]]
name = "b"
ps = ["h1"]
workers = ["h2"]
model = "1MiB"
iterations = 3
[[cross]]
src = "h3"
dst = "h0"
start = 0.1
duration = 1.0
""")
    assert opt.main([str(toml), "--out-dir", str(tmp_path), "--lp-iterations", "1", "--lp-slot", "0.01"]) == 0
    d = json.loads((tmp_path / "tiny.json").read_text())
    full, small = d["full"], d["small"]
    assert full["fifo"]["avg_jct_s"] > 0 and set(full["fifo"]["jct_s"]) == {"a", "b"}
    assert full["bound"]["bound_avg_jct_s"] <= full["best"]["avg_jct_s"] <= full["worst"]["avg_jct_s"]
    assert small["bound"]["bound_avg_jct_s"] <= small["best"]["avg_jct_s"]
    assert set(small["iterations"].values()) == {1}
    assert full["best_cross_ok"]["cross_share"] >= 0.8
    assert "LOWER BOUND" in capsys.readouterr().out
    # the slotted search (default 60 ms, lag 1 and 2, with and without the floor) and a given order
    assert opt.main([str(toml), "--out-dir", str(tmp_path), "--no-lp", "--order", "b,a"]) == 0
    d = json.loads((tmp_path / "tiny.json").read_text())
    assert [(x["lag"], x["floor_bytes_per_slot"]) for x in d["slotted"]] == [(1, 0), (1, 65536), (2, 0), (2, 65536)]
    cont = {o["schedule"]: o for o in d["orders"]}
    assert set(cont) == {"continuous", "every 60 ms, lag 1", "every 60 ms, lag 2"}
    assert cont["continuous"]["avg_jct_s"] == pytest.approx(opt.simulate(opt.model_from_scenario(
        opt.load_scenario(str(toml))), ["b", "a"]).avg_jct)
    assert "b > a, every 60 ms, lag 1" in capsys.readouterr().out
    assert opt.main([str(toml), "--out-dir", str(tmp_path), "--no-lp", "--order", "a,zz"]) == 2
    assert capsys.readouterr().err.strip() == "opt_tworack: --order names zz, not jobs of tiny (a, b)"


def test_bad_scenario_is_one_line(tmp_path, capsys):
    assert opt.main([str(tmp_path / "nope.toml"), "--out-dir", str(tmp_path)]) == 2
    err = capsys.readouterr().err
    assert err.startswith("opt_tworack: ") and err.count("\n") == 1 and "Traceback" not in err
    torch = tmp_path / "t.toml"
    torch.write_text('[testbed]\nhosts = 3\n[[jobs]]\nname = "t"\nkind = "torch"\nworkers = ["h0", "h1"]\n')
    assert opt.main([str(torch), "--out-dir", str(tmp_path)]) == 2
    assert "not modelled" in capsys.readouterr().err


def late_high_job():
    """b (3.5 MiB, low) starts at 0; a (0.5 MiB, high) arrives at 0.25 s on the same PS host h0. One
    iteration each, 0.1 s compute, 1 MiB/s links."""
    net = opt.make_net(["h0", "h1", "h2"], RATE)
    return opt.Model("late", net, (opt.PSJob("a", ("h0",), (MB // 2,), ("h1",), 0.1, 1, 0.25),
                                   opt.PSJob("b", ("h0",), (7 * MB // 2,), ("h2",), 0.1, 1)))


def test_slotted_priority_waits_for_the_next_boundary_by_hand():
    m = late_high_job()
    # continuous: a's update 0.25-0.75 (b paused), compute, gradient 0.85-1.35; b's update ends at 4.0,
    # its gradient 4.1-7.6
    assert opt.simulate(m, ["a", "b"]).jct == pytest.approx({"a": 1.1, "b": 7.6})
    # 1 s slots: b holds h0:up (frozen at 1 MiB/s) until boundary 1, where a is seen and gets it; a's update
    # 1-1.5, compute, its gradient (unseen) fills the idle h0:down 1.6-2.1; b, frozen at 0 until boundary 2,
    # sends its last 2.5 MiB 2-4.5, gradient 4.6-8.1
    assert opt.simulate(m, ["a", "b"], slot=1.0).jct == pytest.approx({"a": 1.85, "b": 8.1})
    # lag 2: nobody is seen before boundary 1 (b alone at full rate, then a and b at 0.5 each from 0.25);
    # at boundary 1 b is seen and frozen at the whole link, a (0.375 MiB sent) waits for boundary 2
    assert opt.simulate(m, ["a", "b"], slot=1.0, lag=2).jct == pytest.approx({"a": 2.475, "b": 8.475})
    # a floor of 0.125 MiB/s for every seen flow: at boundary 1 a gets 0.875, b its floor (until boundary 2)
    assert opt.simulate(m, ["a", "b"], slot=1.0, floor=MB / 8).jct == pytest.approx(
        {"a": 1 + 0.5 / 0.875 + 0.1 + 0.5 - 0.25, "b": 7.975})
    # slots much shorter than every phase: the continuous schedule
    assert opt.simulate(m, ["a", "b"], slot=1e-3).jct == pytest.approx({"a": 1.1, "b": 7.6}, abs=3e-3)


@pytest.mark.parametrize("seed", range(4))
def test_slotted_schedules_stay_above_the_bound_and_finish(seed):
    # a slotted schedule is a schedule: never below the LP's bound on every schedule; and every job ends
    m = _random_model(seed)
    fifo = opt.simulate(m)
    names = [j.name for j in m.jobs]
    for kw in ({"slot": 0.5}, {"slot": 0.3, "lag": 2}, {"slot": 0.5, "floor": MB / 16}):
        r = opt.search_orders(m, fifo, **kw)["best"]
        total = sum(r["jct_s"][j.name] + j.arrival for j in m.jobs)
        bound = opt.lp_bound(m, None, total)["bound_avg_jct_s"]
        assert bound <= r["avg_jct_s"] + 1e-6
        assert set(opt.simulate(m, names, slot=kw["slot"], lag=kw.get("lag", 1)).jct) == set(names)
