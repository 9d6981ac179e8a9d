"""The cluster engine against an independent optimum on small cases (docs/sim-mlcc.md, "The independent
check"): the same jobs, hosts and capacities given to the engine (``ClusterSim`` with fixed placements)
and to ``hostctl_lab.analysis.opt_cluster`` (its own fluid model, LP/MILP bounds and simulator, which
imports nothing of the engine). Every engine JCT must be >= the optimum's lower bound; the gap between
a policy and the optimum says how much room there is.

The cases (``CASES``) are built around the mechanisms the MLCC paper credits: a short job behind a long
one on the same hosts (planning around other jobs: shortest first), jobs whose compute can hide each
other's exchange (interleaving), parameter servers (push/pull pipelining: in the engine's PS model no
policy can pipeline; the bound is computed both ways), and a 2:1 oversubscribed rack uplink that the
MCS logical switch does not see.
"""

from __future__ import annotations

import time

import numpy as np

from hostctl_lab.analysis import opt_cluster as oc

GBIT = 10**9
C10 = 10 * GBIT / 8  # 10 Gbit/s in bytes/s
MB = 10**6
NETWORKS = ("fifo", "mlcc", "mlcc-switch", "mcs", "ccml")
DT = {"ps-pair": 0.03, "mixed": 0.03}  # the MILP's slot per case (default 0.02 s): PS cases are harder


def _single(n: int) -> oc.Net:
    return oc.Net(n, n, C10)


CASES: dict[str, oc.Case] = {c.name: c for c in (
    oc.Case("short-behind-long", _single(2), (
        oc.Job("long", 0.0, 500 * MB, 0.09, 3, (0, 1)),
        oc.Job("short", 0.05, 100 * MB, 0.06, 3, (0, 1))),
        "a ResNet-sized ring arrives just after a VGG-sized one on the same two hosts: shortest first wins"),
    oc.Case("interleave", _single(2), (
        oc.Job("a", 0.0, 250 * MB, 0.2, 4, (0, 1)),
        oc.Job("b", 0.0, 250 * MB, 0.2, 4, (0, 1))),
        "two identical rings, compute = exchange alone: one's compute can hide the other's exchange"),
    oc.Case("ps-pair", _single(4), (
        oc.Job("ps-a", 0.0, 150 * MB, 0.06, 3, (0, 1, 2), "ps"),
        oc.Job("ps-b", 0.02, 150 * MB, 0.06, 3, (0, 2, 3), "ps")),
        "two PS jobs sharing the PS host 0 and worker host 2: push and pull use different links"),
    oc.Case("rack-uplink", oc.Net(4, 2, C10, C10), (
        oc.Job("x-big", 0.0, 300 * MB, 0.09, 3, (0, 2)),
        oc.Job("x-small", 0.02, 150 * MB, 0.06, 3, (1, 3))),
        "two cross-rack rings on different hosts share a 10 Gbit/s rack uplink (2:1) that MCS's logical "
        "switch does not see"),
    oc.Case("mixed", _single(3), (
        oc.Job("ring", 0.0, 300 * MB, 0.09, 2, (0, 1, 2)),
        oc.Job("ps", 0.03, 150 * MB, 0.06, 2, (1, 0, 2), "ps"),
        oc.Job("ring-small", 0.06, 100 * MB, 0.06, 2, (2, 0))),
        "a 3-host ring, a PS job and a small ring on three hosts, staggered arrivals"),
)}


def fabric(net: oc.Net):
    """The engine's fabric of the same hosts, racks and capacities (hostctl_lab.sim.topo)."""
    from hostctl_lab.sim.topo import mlcc_tree, single_switch

    if net.racks == 1:
        return single_switch(net.hosts, net.nic_Bps * 8)
    return mlcc_tree(net.hosts, per_tor=net.per_rack, tors_per_edge=net.racks, nic_bps=net.nic_Bps * 8,
                     tor_bps=net.uplink_Bps * 8)


def engine_jobs(case: oc.Case) -> list:
    from hostctl_lab.sim.workload import JobSpec

    return [JobSpec(j.name, j.arrival, len(j.hosts), "m", int(j.size), j.compute, j.iterations, j.kind,
                    hosts=tuple(j.hosts)) for j in case.jobs]


WHATIF = ("mlcc-switch/smallest",)  # mlcc-switch under the daemon's --job-order smallest (not an engine flag)


def make_sim(fab, jobs: list, network: str, **kw):
    """A ClusterSim under ``network``, or under a what-if of WHATIF. ``mlcc-switch/smallest`` (not an
    engine flag): mlcc-switch with the jobs ordered smaller model first (ties by arrival) instead of by
    arrival, close to the daemon's ``--job-order smallest``: the switches' table's own ``rank``
    (hostctl_lab.mlcctable.ScheduleTable) and each host's planning waves, set on the engine's policy
    object (the daemon also plans without idle sharing under an order; this does not)."""
    from hostctl_lab.sim.cluster import ClusterSim

    base = network.split("/")[0]
    if network != base and network not in WHATIF:
        raise ValueError(f"unknown what-if network {network!r}: {', '.join(WHATIF)}")
    sim = ClusterSim(fab, jobs, network=base, **kw)
    if network == "mlcc-switch/smallest":
        order = sorted(range(len(sim.jobs)), key=lambda i: (sim.jobs[i].spec.size, sim.jobs[i].spec.arrival_s, i))
        rank = {i: r for r, i in enumerate(order)}
        sim.netpol.table.rank = rank  # other hosts' jobs: those ranked up to this one are planned around
        # this host's own jobs: planned in waves of that rank, as the daemon does under a job order
        sim.netpol.table.wave = lambda js: np.array([rank[j] for j in js], dtype=np.int64)
    return sim


def run_engine(case: oc.Case, network: str, slot_s: float = 0.06) -> dict:
    """The engine's JCTs for the case under ``network`` (fixed placement, exact: no parking, no steady;
    a what-if of WHATIF too)."""
    r = make_sim(fabric(case.net), engine_jobs(case), network, slot_s=slot_s).run()
    if r["finished"] != len(case.jobs):
        raise RuntimeError(f"{case.name} under {network}: {r['finished']} of {len(case.jobs)} jobs finished")
    return {"jct_s": r["jct_s"], "avg_jct_s": r["avg_jct_s"]}


def slot_sweep(names, slots=(0.06, 0.02, 0.01), networks=("mlcc", "mlcc-switch", "mlcc-switch/smallest")) -> list:
    """MLCC's average JCT on the cases at other planning slots (engine only)."""
    return [{"case": n, "slot_s": s, "network": net, "avg_jct_s": run_engine(CASES[n], net, s)["avg_jct_s"]}
            for n in names for s in slots for net in networks]


def run_trace(d: dict, combo: dict) -> dict:
    """One run of a hostctl_lab.sim.run sweep (Philly jobs, the spec's placement), a what-if network too."""
    from hostctl_lab.sim.run import SweepSpec, load_fabric, load_jobs

    sp = SweepSpec(**d)
    sim = make_sim(load_fabric(sp), list(load_jobs(sp, combo["seed"])), combo["network"],
                   placement=combo["placement"], order=combo["order"], seed=combo["seed"],
                   gpus_per_server=sp.gpus_per_server, slot_s=sp.slot_s)
    r = sim.run()
    return {**combo, "slot_s": sp.slot_s, "avg_jct_s": r["avg_jct_s"], "finished": r["finished"],
            "wall_s": r["wall_s"], "jct_s": {k: round(v, 4) for k, v in r["jct_s"].items()}}


def compare(case: oc.Case, dt: float, *, networks=NETWORKS, time_limit: float = 60.0, slot_s: float = 0.06,
            ps_modes: tuple[str, ...] | None = None, upper_milp: bool = True) -> dict:
    """The bounds of the case and every network's engine run, with the checks: engine >= lower bound
    (each job's JCT >= its own lower bound too: its critical path), fifo = the independent fifo."""
    t0 = time.perf_counter()
    if ps_modes is None:
        ps_modes = ("barrier", "pipelined") if any(j.kind == "ps" for j in case.jobs) else ("barrier",)
    b = oc.bounds(case, dt, ps_modes=ps_modes, time_limit=time_limit, upper_milp=upper_milp)
    lo = b["barrier"]["lower_avg_jct_s"]
    hi = b["barrier"]["upper_avg_jct_s"]
    eng = {}
    for n in networks:
        r = run_engine(case, n, slot_s)
        r["gap_to_lower"] = r["avg_jct_s"] / lo - 1
        r["gap_to_upper"] = r["avg_jct_s"] / hi - 1
        r["below_lower_bound"] = r["avg_jct_s"] < lo * (1 - 1e-9)
        r["job_below_critical_path"] = [j.name for j in case.jobs
                                        if r["jct_s"][j.name] < oc.critical_path(case.net, j) - j.arrival - 1e-9]
        eng[n] = r
    fifo_diff = (max(abs(eng["fifo"]["jct_s"][k] - v) for k, v in b["barrier"]["fifo"]["jct_s"].items())
                 if "fifo" in eng else None)
    return {"case": case.name, "what": case.what, "dt": dt, "slot_s": slot_s,
            "jobs": [vars(j) for j in case.jobs],
            "net": {"hosts": case.net.hosts, "per_rack": case.net.per_rack, "nic_Bps": case.net.nic_Bps,
                    "uplink_Bps": case.net.uplink_Bps},
            "bounds": b, "engine": eng, "fifo_vs_independent_fifo_max_abs_s": fifo_diff,
            "wall_s": time.perf_counter() - t0}


def random_case(seed: int) -> oc.Case:
    """A seeded small case: 4 hosts on one switch or in 2 racks of 2 behind a 2:1 uplink; 2 or 3 jobs,
    rings (2 or 3 hosts) and PS jobs (a PS and 1 or 2 workers), 100-400 MB, the zoo's compute times,
    2 iterations, arrivals within 0.1 s."""
    rng = np.random.default_rng(seed)
    net = _single(4) if rng.random() < 0.5 else oc.Net(4, 2, C10, C10)
    jobs = []
    for k in range(int(rng.integers(2, 4))):
        kind = "ps" if rng.random() < 0.4 else "ring"
        hosts = tuple(int(h) for h in rng.permutation(4)[:int(rng.integers(2, 4))])
        jobs.append(oc.Job(f"j{k}", round(float(rng.uniform(0, 0.1)), 3), int(rng.choice([100, 150, 250, 400])) * MB,
                           float(rng.choice([0.062, 0.079, 0.087, 0.09])), 2, hosts, kind))
    return oc.Case(f"random-{seed}", net, tuple(jobs), f"seeded random case {seed}")


def random_check(seeds, dt: float = 0.03, time_limit: float = 15.0, networks=NETWORKS + WHATIF) -> list[dict]:
    """The invariant and the gaps on seeded random cases (barrier PS; the best schedule found is the
    model's best strict-priority order)."""
    out = []
    for s in seeds:
        case = random_case(s)
        r = compare(case, dt, networks=networks, time_limit=time_limit, ps_modes=("barrier",), upper_milp=False)
        b = r["bounds"]["barrier"]
        out.append({"seed": s, "racks": case.net.racks, "jobs": [vars(j) for j in case.jobs],
                    "lower": b["lower_avg_jct_s"], "lower_optimal": b["lower"].get("optimal"),
                    "best": b["upper_avg_jct_s"], "engine": {n: e["avg_jct_s"] for n, e in r["engine"].items()},
                    "below_bound": [n for n, e in r["engine"].items() if e["below_lower_bound"]
                                    or e["job_below_critical_path"]],
                    "fifo_vs_independent_fifo_max_abs_s": r["fifo_vs_independent_fifo_max_abs_s"],
                    "wall_s": r["wall_s"]})
    return out
