"""MlccControl in switch mode sees other hosts' load: the switch's feedback for a flow leaves out that
flow's whole job; under a job order it leaves out the jobs ranked after it and counts this host's published
flows of the other jobs, which the daemon subtracts (Q-M8); without one (arrival order) it leaves this
host's flows out itself. Against a model switch that does exactly
that, each job's fabric view (core.mlccplan.FabricView) on every link of its flows must be the other
hosts' load the model was given (another job's), with none of the job's own flows elsewhere."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import hostctl.policy.mlcc as mlccctl
from hostctl.core.types import FlowKey
from hostctl.policy.mlcc import NIC, FlowIn, MlccControl, flow_id
from hostctl.core import wire
from hostctl.policy.switchclient import ExchangeResult, FlowLoads

C = 1_000_000_000 // 8
SLOT = 0.06
K = 10
LINKS = ["h0:up", "tor0:up", "tor1:down", "h1:down", "h2:down", "h3:down"]


class ModelSwitch:
    """Holds this host's last published schedules and answers fetches like switchemu: per link of the
    flow's path, the other hosts' load ``base`` plus this host's flows of other jobs on it."""

    def __init__(self, paths: dict[str, list[str]], base: dict[str, np.ndarray]):
        self.paths, self.base = paths, base
        self.queries: list[int] = []  # fetch queries per exchange
        self.asked: list[list[tuple]] = []  # per exchange: (job, rank, link) of every row asked for
        self.arrival: set[bool] = set()  # the queries' arrival flags
        self.table: dict[str, tuple[str, int | None, int, tuple[float, ...]]] = {}  # flow -> (job, rank, slot, rates)

    def exchange(self, slot, *, updates=(), fetches=(), **_kw) -> ExchangeResult:
        res = ExchangeResult(slot=slot, latency_s={"model": 1e-4})
        if fetches:
            self.queries.append(len(fetches))
        if fetches:
            self.asked.append([(q.job_id, q.rank, lid) for q in fetches for lid in (q.links or self.paths[q.flow_id])])
        for q in fetches:
            self.arrival.add(q.arrival)
            loads = {}
            for lid in (q.links if q.links is not None else self.paths[q.flow_id]):
                row = self.base[lid].astype(np.float64).copy()
                for g, (job, rank, at, rates) in self.table.items():
                    before = q.rank is None or rank is None or rank <= q.rank
                    # (every flow in this table is the tested host's: a fetch in arrival order leaves them out)
                    if job != q.job_id and before and lid in self.paths[g] and not q.arrival:
                        shift = slot - at
                        row[:K - shift] += np.asarray(rates)[shift:]
                loads[lid] = [int(round(x)) for x in row]
            res.feedback[q.flow_id] = FlowLoads(q.flow_id, loads, tuple(map(sum, zip(*loads.values()))))
            res.capacities_Bps.update((lid, C) for lid in loads)
        for u in updates:
            self.table[u.flow_id] = (u.job_id, u.rank, slot, u.rates_Bps)
        return res


@pytest.mark.parametrize("order", ["none", "fixed", "flat", "smallest"])
@settings(max_examples=60, deadline=None)
@given(data=st.data())
def test_the_plan_sees_exactly_the_other_hosts_load(order, data):
    n = data.draw(st.integers(1, 8), label="flows")
    jobs = [data.draw(st.sampled_from(["ja", "jb", "jc"])) for _ in range(n)]
    # a few destinations: several flows of a job between the same two hosts share one query
    keys = [FlowKey("10.0.0.1", 5000 + i, f"10.0.1.{data.draw(st.integers(2, 4))}", 9000) for i in range(n)]
    route = {d: data.draw(st.lists(st.sampled_from(LINKS), min_size=1, max_size=3, unique=True))
             for d in sorted({k.raddr for k in keys})}
    paths = {flow_id(k): route[k.raddr] for k in keys}
    base = {lid: np.array(data.draw(st.lists(st.integers(0, C // 2), min_size=K, max_size=K))) for lid in LINKS}
    G = [data.draw(st.sampled_from([float("nan"), 0.0, 1e5, 3 * C * SLOT, 20 * C * SLOT])) for _ in range(n)]
    skip = data.draw(st.booleans(), label="skip a slot")
    measured = [data.draw(st.sampled_from([float("nan"), 0.0, C / 10, C])) for _ in range(n)]  # rate last slot

    seen, waves = [], []
    real = mlccctl.plan_slot

    def spy(*a, **kw):
        seen.append((a[5], np.asarray(a[3]), np.asarray(a[4])))  # view, job index per flow, paths
        waves.append(kw.get("wave"))
        return real(*a, **kw)

    t = [1_000_000.0 * SLOT]
    sw = ModelSwitch(paths, base)
    ctl = MlccControl(C, SLOT, switch=sw, wall=lambda: t[0], job_order=order)
    for tick in range(3):
        seen.clear()
        with pytest.MonkeyPatch.context() as mp:
            mp.setattr(mlccctl, "plan_slot", spy)
            ctl.tick([FlowIn(k, j, g, C, 0.0, True, m) for k, j, g, m in zip(keys, jobs, G, measured)])
        asked = sw.asked[-1]
        if tick == 0:  # the paths are not known yet: one query per peer and job, for its whole path
            assert sw.queries[-1] == len({(k.raddr, j) for k, j in zip(keys, jobs)})
        else:  # then each link's row once per job and rank (the rows differ by job)
            scope = [(job, rank, lid) for job, rank, lid in asked]
            assert len(scope) == len(set(scope)), asked
        if tick > 0:  # from the second slot on, this host's own schedules are in the switch's table
            used = [NIC] + sorted({lid for p in paths.values() for lid in p})  # the plan's link columns
            (view, fj, path), = seen  # one plan for all jobs, ordered or not
            for i in range(n):
                for c in sorted(set(path[i][path[i] >= 0].tolist())):
                    lid = used[c]
                    want = (base[lid] if lid in base else np.zeros(K)).astype(float).copy()
                    want[-1] = max(want[-2], want[-1])  # the others' schedules go on in the window's last slot
                    # the published rates are rounded on the wire: half a byte/s per flow at most
                    assert view.other_Bps[fj[i], c] == pytest.approx(want, abs=n), (lid, view.other_Bps[fj[i], c])
            assert not view.same_Bps.any() and not view.same_flows.any()  # no other host has these jobs
            # none and smallest ask in arrival order; flat plans all of this host's jobs in one wave
            assert sw.arrival == {order in ("none", "smallest")}
            if order == "flat":
                assert waves[-1] is None
            elif order == "fixed":
                assert waves[-1] is not None
        t[0] += SLOT * (2 if skip and tick == 0 else 1)



class SlowSwitch:
    """Answers fetches only after ``late`` slots have passed (the clock moves on during the fetch), and
    records the slot and schedules of each publish."""

    def __init__(self, t: list[float], late: int):
        self.t, self.late = t, late
        self.published: list[tuple[int, dict[str, tuple[float, ...]]]] = []

    def exchange(self, slot, *, updates=(), fetches=(), **_kw) -> ExchangeResult:
        if fetches:
            self.t[0] += self.late * SLOT
        if updates:
            self.published.append((slot, {u.flow_id: u.rates_Bps for u in updates}))
        return ExchangeResult(slot=slot, latency_s={"slow": 1e-4})


@pytest.mark.parametrize("late", [0, 1, 3, K])
def test_a_tick_that_runs_past_its_slot_publishes_from_the_current_slot(late):
    """The switches refuse a slot that has ended (stale_slot); a late tick sends the same schedules from
    the current slot on, and counts it."""
    t = [1_000_000.5 * SLOT]
    sw = SlowSwitch(t, late)
    ctl = MlccControl(C, SLOT, switch=sw, wall=lambda: t[0])
    key = FlowKey("10.0.0.1", 5000, "10.0.1.2", 9000)
    slot = ctl.slot_now()
    ctl.tick([FlowIn(key, "ja", 20 * C * SLOT, C, 0.0, True)])
    plan = ctl.schedule_of(key)["schedule_Bps"]
    assert ctl.status()["late_publishes"] == (1 if late else 0)
    if late >= K:  # nothing left of the plan to send
        assert sw.published == []
        return
    (at, sched), = sw.published
    assert at == slot + late
    assert sched[flow_id(key)] == pytest.approx(list(plan[late:]) + [0.0] * late, abs=1.0)
    assert sum(plan) > 0 and sched[flow_id(key)][0] == pytest.approx(plan[late], abs=1.0)


def _forget_caches(ctl: MlccControl) -> None:
    """Make the next tick compute everything that MlccControl reuses while its flows, their jobs and
    their paths stay the same."""
    ctl._fetch_key = None
    ctl._own_cells = (None, None, None)
    ctl._cols_of = (None, [], {}, ctl.prev_path)
    ctl._jobs = ([], {}, np.zeros(0, dtype=np.int64), np.zeros(0, dtype=object))


@pytest.mark.parametrize("order", ["none", "fixed"])
@settings(max_examples=25, deadline=None)
@given(data=st.data())
def test_reusing_last_slots_work_decides_as_computing_it_again(order, data):
    """Two controllers see the same slots against equal model switches: one reuses its queries, link
    columns and own-load indices while the flows stay the same; the other is made
    to compute them every slot. Paths change, a flow ends, one starts and one changes job on the way."""
    n = data.draw(st.integers(2, 7), label="flows")
    jobs = [data.draw(st.sampled_from(["ja", "jb", "jc"])) for _ in range(n)]
    keys = [FlowKey("10.0.0.1", 5000 + i, f"10.0.1.{data.draw(st.integers(2, 4))}", 9000) for i in range(n)]
    dests = sorted({k.raddr for k in keys})
    route = {d: data.draw(st.lists(st.sampled_from(LINKS), min_size=1, max_size=3, unique=True)) for d in dests}
    new_route = data.draw(st.lists(st.sampled_from(LINKS), min_size=1, max_size=3, unique=True), label="reroute")
    base = {lid: np.array(data.draw(st.lists(st.integers(0, C // 2), min_size=K, max_size=K))) for lid in LINKS}
    G = [data.draw(st.sampled_from([float("nan"), 0.0, 1e5, 3 * C * SLOT, 20 * C * SLOT])) for _ in range(n)]
    late_key = FlowKey("10.0.0.1", 6000, dests[0], 9000)

    t = [1_000_000.0 * SLOT]
    ctls = []
    for _ in range(2):
        sw = ModelSwitch({}, base)
        ctls.append((sw, MlccControl(C, SLOT, switch=sw, wall=lambda: t[0], job_order=order)))
    fresh = ctls[1][1]
    fresh._prev_rows = lambda ids: np.array([{f: r for r, f in enumerate(fresh._last_ids)}.get(i, -1)
                                             for i in ids], dtype=np.int64)
    for tick in range(8):
        ks, js, gs = list(keys), list(jobs), list(G)
        if tick >= 3:  # the first destination's flows take another path
            route[dests[0]] = new_route
        if tick >= 5:  # the first flow ended, another one started
            ks[0], gs[0] = late_key, 2 * C * SLOT
        if tick >= 6:  # a flow moved to another job (the daemon regrouped it)
            js[-1] = "jd"
        flows = [FlowIn(k, j, g, C, 0.0, True, rate_Bps=C / (tick + 1)) for k, j, g in zip(ks, js, gs)]
        out = []
        for sw, ctl in ctls:
            sw.paths.update({flow_id(k): route[k.raddr] for k in ks})  # (ended flows keep theirs)
            if ctl is fresh:
                _forget_caches(ctl)
            out.append((ctl.tick(flows), ctl.last.rates_Bps.copy(), ctl.prev_rates.copy()))
        (ra, pa, qa), (rb, pb, qb) = out
        assert ra == rb
        np.testing.assert_array_equal(pa, pb)
        np.testing.assert_array_equal(qa, qb)
        t[0] += SLOT


class RefusingSwitch(ModelSwitch):
    """A ModelSwitch that, while ``refuse`` is set, refuses every query that names links (as a switch
    whose topology changed would: unknown_link)."""

    refuse = False

    def __init__(self, *a):
        super().__init__(*a)
        self.fetched: list[list[tuple[str, tuple[str, ...] | None]]] = []

    def exchange(self, slot, *, updates=(), fetches=(), **kw) -> ExchangeResult:
        if fetches:
            self.fetched.append([(q.flow_id, q.links) for q in fetches])
        named = [q for q in fetches if q.links is not None and self.refuse]
        res = super().exchange(slot, updates=updates, fetches=[q for q in fetches if q not in named], **kw)
        for q in named:
            res.feedback[q.flow_id] = FlowLoads(q.flow_id, complete=False)
            res.flow_status[q.flow_id] = int(wire.Code.UNKNOWN_LINK)
        return res


def test_a_flow_asks_only_for_links_not_asked_yet_and_for_its_whole_path_when_refused():
    """Once the paths are known, the second flow's query names only its own last link (the first flow
    asked for the shared one); a refused named query is asked as a whole path next slot, then named
    again; both flows plan on their whole paths throughout."""
    keys = [FlowKey("10.0.0.1", 5000, "10.0.1.2", 9000), FlowKey("10.0.0.1", 5001, "10.0.1.3", 9000)]
    f1, f2 = (flow_id(k) for k in keys)
    paths = {f1: ["h0:up", "h1:down"], f2: ["h0:up", "h2:down"]}
    base = {lid: np.full(K, C // 4) for lid in LINKS}
    t = [1_000_000.0 * SLOT]
    sw = RefusingSwitch(paths, base)
    ctl = MlccControl(C, SLOT, switch=sw, wall=lambda: t[0])
    flows = [FlowIn(k, "ja", 20 * C * SLOT, C, 0.0, True) for k in keys]
    for tick in range(5):
        sw.refuse = tick == 2
        ctl.tick(flows)
        assert [ctl._links_of(f) for f in (f1, f2)] == [(NIC, "h0:up", "h1:down"), (NIC, "h0:up", "h2:down")]
        t[0] += SLOT
    whole, named = [(f1, None), (f2, None)], [(f1, None), (f2, ("h2:down",))]
    assert sw.fetched == [whole, named, named, whole, named]
    assert ctl.errors == {"unknown_link": 1}


def test_job_order_smallest_ranks_the_jobs_by_the_model_sizes_given():
    """--job-order smallest: the ranks sent with the schedules and queries follow the model sizes that
    tick() is given (smaller first, unknown last); the host plans its jobs in that order (waves), the jobs
    of one size in the order they became busy, and asks for views in arrival order."""
    keys = {j: FlowKey("10.0.0.1", 5000 + i, "10.0.1.2", 9000) for i, j in enumerate(["big", "small", "unknown"])}
    paths = {flow_id(k): ["h0:up", "h1:down"] for k in keys.values()}
    sw = ModelSwitch(paths, {lid: np.zeros(K) for lid in LINKS})
    t = [1_000_000.0 * SLOT]
    ctl = MlccControl(C, SLOT, switch=sw, wall=lambda: t[0], job_order="smallest")
    waves = []
    real = mlccctl.plan_slot

    def spy(*a, **kw):
        waves.append(kw.get("wave"))
        return real(*a, **kw)

    flows = [FlowIn(k, j, 20 * C * SLOT, C, 0.0, True) for j, k in keys.items()]
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(mlccctl, "plan_slot", spy)
        ctl.tick(flows, sizes={"big": 8 << 20, "small": 2 << 20, "unknown": None})
    ranks = {job: rank for job, rank, _, _ in sw.table.values()}
    assert ranks["small"] < ranks["big"] < ranks["unknown"]
    assert sw.asked[-1] and all(rank == ranks[job] for job, rank, _ in sw.asked[-1])  # the queries too
    assert list(waves[-1]) == [1, 0, 2]  # flows big, small, unknown: small first
    assert ctl.status()["job_order"]["jobs"] == ["small", "big", "unknown"]
    assert sw.arrival == {True}
    # without sizes every job is of unknown size: one rank, the order they became busy decides
    t[0] += SLOT
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(mlccctl, "plan_slot", spy)
        ctl.tick(flows)
    assert {rank for _, rank, _, _ in sw.table.values()} == {(1 << 64) - 1}
    assert list(waves[-1]) == [0, 1, 2]  # big, small, unknown: as they became busy (sorted by id at once)
