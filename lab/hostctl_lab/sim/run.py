"""Sweeps of the cluster simulator: every combination of placement x order x network x seed, run in
parallel processes, summarized in one table and ``DIR/sim.json`` (``hostctl sim``).

Runs are independent: ``--workers W`` runs W at once (a process pool on this machine). Beyond one
machine, see docs/simulator.md ("Sweeps beyond one machine"): each run is a call of :func:`run_one`
with a plain dict, so a Ray or Dask map over the same list does the same sweep.
"""

from __future__ import annotations

import functools
import itertools
import json
import os
import time
from concurrent.futures import ProcessPoolExecutor, as_completed
from dataclasses import asdict, dataclass, field

import numpy as np

from hostctl.errors import ConfigError


@dataclass
class SweepSpec:
    topology: str = "mlcc-tree"
    servers: int | None = None
    oversub: float | None = None
    trace: str | None = None  # Philly CSV; None with synthetic=None: the Philly trace beside the repository
    synthetic: int | None = None
    jobs: int = 100
    placements: tuple[str, ...] = ("ff",)
    orders: tuple[str, ...] = ("fifo",)
    networks: tuple[str, ...] = ("fifo",)
    seeds: tuple[int, ...] = (0,)
    until_s: float | None = None
    gpus_per_server: int = 8
    time_scale: float = 1.0
    max_iterations: int | None = None
    bands: int = 6
    rr_interval_s: float = 2.0
    cap_bps: int | None = None
    jitter: float = 0.0
    steady: int = 0
    steady_quorum: float | None = None  # --steady's quorum share (None: the default rule; ClusterSim's quorum)
    slot_s: float = 0.06  # mlcc, mlcc-switch: the planner's slot (hostctl_lab.sim.mlccnet)
    ps_fraction: float = 0.0  # each trace or synthetic job is a parameter-server job with this probability
    iter_model: str = "serial"  # a ring job's iteration: serial or one of paper 003's strategies (cluster.ITER_MODELS)
    extra: dict = field(default_factory=dict)

    @property
    def quorum(self) -> bool | float:
        """ClusterSim's ``quorum``: the share given, or True (the default rule)."""
        return True if self.steady_quorum is None else self.steady_quorum

    def combos(self) -> list[dict]:
        return [{"placement": p, "order": o, "network": n, "seed": s}
                for p, o, n, s in itertools.product(self.placements, self.orders, self.networks, self.seeds)]


def load_jobs(spec: SweepSpec, seed: int):
    if not 0.0 <= spec.ps_fraction <= 1.0:
        raise ConfigError(f"--ps-fraction must be in [0, 1], got {spec.ps_fraction}")
    return _jobs(spec.trace, spec.synthetic, spec.jobs, seed, spec.time_scale, spec.max_iterations,
                 spec.gpus_per_server, spec.ps_fraction)


def load_fabric(spec: SweepSpec):
    return _fabric(spec.topology, spec.servers, spec.oversub)


# A process runs many combinations of one sweep: the trace and the fabric are read and built once
# per process (both are only read by a run: JobSpec is frozen, a Fabric only caches its paths).
@functools.lru_cache(maxsize=8)
def _jobs(trace, synthetic, n, seed, time_scale, max_iterations, gpus_per_server, ps_fraction=0.0) -> tuple:
    from hostctl_lab.sim import workload

    if synthetic:
        return tuple(workload.synthetic(synthetic, seed=seed, ps_fraction=ps_fraction))
    return tuple(workload.philly(trace, n, seed=seed, time_scale=time_scale, max_iterations=max_iterations,
                                 gpus_per_server=gpus_per_server, ps_fraction=ps_fraction))


@functools.lru_cache(maxsize=4)
def _fabric(topology, servers, oversub):
    from hostctl_lab.sim import topo

    return topo.load(topology, servers, oversub=oversub)


def run_one(spec: dict, combo: dict) -> dict:
    """One run: a SweepSpec as a dict and one combination. Pure function of its arguments (seeded)."""
    from hostctl_lab.sim.cluster import simulate

    sp = SweepSpec(**spec)
    fab = load_fabric(sp)
    jobs = list(load_jobs(sp, combo["seed"]))
    r = simulate(fab, jobs, placement=combo["placement"], order=combo["order"], network=combo["network"],
                 seed=combo["seed"], gpus_per_server=sp.gpus_per_server, until_s=sp.until_s, bands=sp.bands,
                 rr_interval_s=sp.rr_interval_s, cap_bps=sp.cap_bps, jitter=sp.jitter, steady=sp.steady,
                 quorum=sp.quorum, slot_s=sp.slot_s, iter_model=sp.iter_model)
    return {**combo, **r}


def check(spec: SweepSpec) -> list[str]:
    """Bad topology, servers, trace or settings: one ConfigError now, not in every worker (each
    combination is built once, not run). Returns the networks under which a requested --steady has no
    effect (the engine runs them exact: ClusterSim turns it off)."""
    from hostctl_lab.sim.cluster import ClusterSim

    fab = load_fabric(spec)
    jobs = load_jobs(spec, spec.seeds[0])
    exact: list[str] = []
    for p, o, n in itertools.product(spec.placements, spec.orders, spec.networks):
        sim = ClusterSim(fab, jobs, placement=p, order=o, network=n,
                         gpus_per_server=spec.gpus_per_server, bands=spec.bands, rr_interval_s=spec.rr_interval_s,
                         cap_bps=spec.cap_bps, jitter=spec.jitter, steady=spec.steady, slot_s=spec.slot_s,
                         quorum=spec.quorum,
                         iter_model=spec.iter_model)
        if spec.steady and not sim.steady and n not in exact:
            exact.append(n)
    return exact


def _die_with_parent() -> None:
    """Pool workers end when the sweep's process dies, even by SIGKILL (Linux PR_SET_PDEATHSIG)."""
    import ctypes
    import signal

    try:
        ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG = 1
    except (OSError, AttributeError):
        pass
    if os.getppid() == 1:  # the parent died before prctl
        os._exit(1)


def sweep(spec: SweepSpec, workers: int = 1, progress=None, checked: bool = False) -> list[dict]:
    if not checked:
        check(spec)
    combos = spec.combos()
    d = asdict(spec)
    if workers <= 1:
        out = []
        for c in combos:
            out.append(run_one(d, c))
            if progress:
                progress(out[-1])
        return out
    got: list[dict | None] = [None] * len(combos)  # in the order of combos, whatever order they end in
    with ProcessPoolExecutor(max_workers=workers, initializer=_die_with_parent) as ex:
        futs = {ex.submit(run_one, d, c): k for k, c in enumerate(combos)}
        for fu in as_completed(futs):
            got[futs[fu]] = fu.result()
            if progress:
                progress(got[futs[fu]])
    return got


def summarize(runs: list[dict]) -> list[dict]:
    """One row per placement x order x network: means over seeds, and the ratio of avg JCT to the
    first network's (the baseline) at the same placement, order and seed."""
    rows = []
    groups: dict[tuple, list[dict]] = {}
    for r in runs:
        groups.setdefault((r["placement"], r["order"], r["network"]), []).append(r)
    base_net = runs[0]["network"] if runs else None
    for (p, o, n), rs in groups.items():
        base = {r["seed"]: r for r in groups.get((p, o, base_net), [])}
        ratios = [r["avg_jct_s"] / base[r["seed"]]["avg_jct_s"] for r in rs
                  if r["avg_jct_s"] and r["seed"] in base and base[r["seed"]]["avg_jct_s"]]
        mean = lambda k: float(np.mean([r[k] for r in rs if r[k] is not None])) if any(r[k] is not None for r in rs) else None  # noqa: E731
        rows.append({"placement": p, "order": o, "network": n, "seeds": len(rs), "finished": mean("finished"),
                     "jobs": rs[0]["jobs"], "avg_jct_s": mean("avg_jct_s"), "p95_jct_s": mean("p95_jct_s"),
                     "makespan_s": mean("makespan_s"), "ratio": float(np.mean(ratios)) if ratios else None,
                     "wall_s": mean("wall_s"), "events": mean("events")})
    return rows


def print_table(rows: list[dict], console=None) -> None:
    from rich.console import Console
    from rich.table import Table

    t = Table(title="hostctl sim")
    for c in ("placement", "order", "network", "seeds", "finished", "avg JCT (s)", "p95 JCT (s)", "makespan (s)",
              "avg / first network", "wall (s)", "events"):
        t.add_column(c, justify="left" if c in ("placement", "order", "network") else "right")
    f = lambda v, d=1: "-" if v is None else f"{v:,.{d}f}"  # noqa: E731
    for r in rows:
        t.add_row(r["placement"], r["order"], r["network"], str(r["seeds"]), f"{r['finished']:.0f}/{r['jobs']}",
                  f(r["avg_jct_s"]), f(r["p95_jct_s"]), f(r["makespan_s"]), f(r["ratio"], 3), f(r["wall_s"], 2),
                  f(r["events"], 0))
    (console or Console(width=max(150, Console().width))).print(t)


def plot_cdf(runs: list[dict], path: str) -> str | None:
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return None
    fig, ax = plt.subplots(figsize=(7, 4.5))
    groups: dict[str, list[float]] = {}
    for r in runs:
        groups.setdefault(f"{r['placement']}/{r['order']}/{r['network']}", []).extend(r["jct_s"].values())
    for name, v in groups.items():
        if v:
            x = np.sort(v)
            ax.plot(x, np.arange(1, len(x) + 1) / len(x), label=name)
    ax.set_xscale("log")
    ax.set_xlabel("job completion time (s)")
    ax.set_ylabel("fraction of jobs")
    ax.grid(alpha=0.3)
    if groups and any(groups.values()):
        ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def write(out: str, spec: SweepSpec, runs: list[dict], rows: list[dict], command: str) -> str:
    import platform

    os.makedirs(out, exist_ok=True)
    path = os.path.join(out, "sim.json")
    with open(path, "w") as f:
        json.dump({"command": command, "date": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
                   "machine": {"node": platform.node(), "cpus": os.cpu_count(), "python": platform.python_version()},
                   "spec": asdict(spec), "summary": rows, "runs": runs}, f, indent=1)
    return path


def parse_list(s: str, allowed: tuple[str, ...] | None, what: str) -> tuple[str, ...]:
    items = tuple(x.strip() for x in s.split(",") if x.strip())
    if not items:
        raise ConfigError(f"--{what} is empty: give a comma list" + (f" of {', '.join(allowed)}" if allowed else ""))
    if allowed:
        bad = [x for x in items if x not in allowed]
        if bad:
            raise ConfigError(f"unknown {what} {bad[0]!r}: choose from {', '.join(allowed)}")
    return items
