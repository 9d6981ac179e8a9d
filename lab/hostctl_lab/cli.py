"""The lab's commands on hostctl's CLI: ``hostctl bench``, ``bench-compare``, ``bench-pacing``, ``demo`` and
``testbed up|down|status|exec``. ``hostctl.cli`` calls :func:`register` when this package is installed.
Imports stay inside the commands, so that ``hostctl`` starts as fast as without the lab."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path
from typing import Optional

import typer

from hostctl.cli import JsonOpt, _terminate

lab_app = typer.Typer()
testbed_app = typer.Typer(no_args_is_help=True, help="Emulated clusters in network namespaces (see docs/testbed.md).")


@testbed_app.command("up")
def testbed_up(
    name: str = typer.Option("tb", "--name", help="Testbed name: 1-8 lowercase letters/digits, unique."),
    hosts: Optional[int] = typer.Option(None, "--hosts", help="Hosts on one switch (default 4)."),
    racks: Optional[int] = typer.Option(None, "--racks", help="Racks of hosts under top-of-rack switches."),
    hosts_per_rack: Optional[int] = typer.Option(None, "--hosts-per-rack"),
    link: str = typer.Option("200mbit", "--link", help="Host NIC rate, each direction."),
    uplink: Optional[str] = typer.Option(None, "--uplink", help="Rack uplink rate (with --racks)."),
    queue: str = typer.Option("256KiB", "--queue", help="Switch port buffer."),
    gso: bool = typer.Option(True, "--gso/--no-gso", help="--no-gso: hosts send one-frame packets, so switch ports "
                             "queue and drop frames (costs CPU; docs/testbed.md)."),
    scenario: Optional[str] = typer.Option(None, "--scenario", help="Take the topology from a scenario file."),
    as_json: bool = JsonOpt,
) -> None:
    """Build an emulated cluster: hosts in network namespaces, bridges as switches, shaped links."""
    from hostctl_lab.bench.scenario import load_scenario, parse_topology
    from hostctl_lab.testbed.net import Testbed, status as tb_status

    if scenario:
        topo = load_scenario(scenario).topology
    else:
        d: dict = {"link": link, "queue": queue, "gso": gso}
        if racks is not None:
            d.update(racks=racks, hosts_per_rack=hosts_per_rack if hosts_per_rack is not None else 2)
            if uplink is not None:
                d["uplink"] = uplink
        else:
            d["hosts"] = hosts if hosts is not None else 4
            for k, v in (("hosts_per_rack", hosts_per_rack), ("uplink", uplink)):
                if v is not None:
                    d[k] = v
        topo = parse_topology(d)
    Testbed(name, topo).up()
    _print_testbeds([s for s in tb_status() if s["name"] == name], as_json)


def _print_testbeds(rows: list[dict], as_json: bool) -> None:
    from hostctl.core.units import format_rate

    if as_json:
        typer.echo(json.dumps(rows, indent=2))
        return
    if not rows:
        typer.echo("no testbeds")
    for s in rows:
        if "hosts" not in s:
            typer.echo(f"testbed {s['name']}: {s.get('problem')}")
            continue
        typer.echo(f"testbed {s['name']}: {len(s['hosts'])} hosts in {s['subnet']}")
        for h in s["hosts"]:
            typer.echo(f"  {h['host']:5s} rack {h['rack']}  {h['addr']:15s} netns {h['ns']}  "
                       f"{h['processes']} processes{'' if h['up'] else '  (namespace missing)'}")
        typer.echo("  links: " + ", ".join(f"{ln['link']} {format_rate(ln['rate_bps'])}" for ln in s["links"])
                   + ("" if s.get("gso", True) else "; hosts send one-frame packets (--no-gso)"))
        if s.get("problem"):
            typer.echo(f"  problem: {s['problem']}")


@testbed_app.command("down")
def testbed_down(
    name: Optional[str] = typer.Argument(None, help="Testbed name (default tb)."),
    all_: bool = typer.Option(False, "--all", help="Remove every testbed on this machine."),
) -> None:
    """Remove a testbed: processes, namespaces, links, cgroups, state. Works after a crash too."""
    from hostctl.datapath.linux import require_root
    from hostctl_lab.testbed.net import all_testbed_names, check_name, teardown

    require_root()
    names = all_testbed_names() if all_ else [check_name(name or "tb")]
    for n in names:
        removed = teardown(n)
        typer.echo(f"testbed {n}: " + (f"removed {len(removed)} objects" if removed else "nothing to remove"))


@testbed_app.command("status")
def testbed_status(as_json: bool = JsonOpt) -> None:
    """List testbeds with their hosts, addresses, process counts and link rates."""
    from hostctl_lab.testbed.net import status as tb_status

    _print_testbeds(tb_status(), as_json)


@testbed_app.command("exec", context_settings={"allow_extra_args": True, "ignore_unknown_options": True})
def testbed_exec(ctx: typer.Context, name: str = typer.Argument(..., help="Testbed name."),
                 host: str = typer.Argument(..., help="Host, e.g. h0.")) -> None:
    """Run a command on a testbed host (its namespace and cgroup): hostctl testbed exec tb h0 -- ip addr"""
    from hostctl.errors import ConfigError
    from hostctl_lab.testbed.net import Testbed

    if not ctx.args:
        raise ConfigError("give a command after --, e.g. hostctl testbed exec tb h0 -- ip addr")
    tb = Testbed.load(name)
    sys.exit(subprocess.call(tb.command(host, list(ctx.args))))


def _run_bench(scenario: str, policies: Optional[str], repeat: Optional[int], iterations: Optional[int],
               out: str, plots: bool = True) -> dict:
    from rich.console import Console
    from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn

    from hostctl.datapath.linux import require_root
    from hostctl_lab.bench import report
    from hostctl_lab.bench.runner import run_bench
    from hostctl_lab.bench.scenario import load_scenario

    require_root()
    if plots:
        from hostctl_lab.bench import agg_figure

        agg_figure()  # without matplotlib: say so now, not after the runs
    # SIGTERM (systemd, timeout(1), a CI limit) unwinds like Ctrl-C, so the run's testbed is torn down
    signal.signal(signal.SIGTERM, _terminate)
    sc = load_scenario(scenario).with_overrides(
        iterations=iterations, repeat=repeat,
        policies=tuple(p.strip() for p in policies.split(",") if p.strip()) if policies else None)
    con = Console(stderr=True)
    con.print(f"scenario {sc.name}: {len(sc.jobs)} jobs on {len(sc.topology.hosts)} hosts, policies "
              f"{', '.join(sc.policies)}, {sc.repeat} repeat(s)")
    with Progress(TextColumn("{task.description}"), BarColumn(), TextColumn("{task.completed}/{task.total}"),
                  TimeElapsedColumn(), console=con, transient=False) as prog:
        total = prog.add_task("runs", total=sc.repeat * len(sc.policies))
        jobs = prog.add_task("jobs", total=len(sc.jobs))

        def run_start(r, pol):
            prog.update(total, description=f"run {pol} (repeat {r + 1})")
            prog.reset(jobs, total=len(sc.jobs))

        def run_end(res):
            prog.advance(total)
            if not res["ok"]:
                prog.console.print(f"[red]run {res['policy']} repeat {res['repeat'] + 1} failed:[/] {res['error']}")

        results = run_bench(sc, out, on_run_start=run_start, on_run_end=run_end,
                            on_job_done=lambda n: prog.update(jobs, completed=n))
    results["command"] = " ".join(["hostctl"] + sys.argv[1:])
    summary = report.summarize(results)
    results["summary"] = summary
    os.makedirs(out, exist_ok=True)
    path = os.path.join(out, f"{sc.name}.json")
    with open(path, "w") as f:
        json.dump(results, f, indent=1)
    report.print_table(results, summary, Console(width=max(140, Console().width)))
    typer.echo(f"results: {path}")
    if plots:
        for p in report.plot(results, os.path.join(out, sc.name)):
            typer.echo(f"plot: {p}")
    return results


@lab_app.command()
def bench(
    scenario: str = typer.Argument(..., help="Scenario TOML, e.g. examples/scenarios/placement1.toml."),
    policies: Optional[str] = typer.Option(None, "--policies", help="Comma list, e.g. fifo,one,rr (default: the scenario's)."),
    repeat: Optional[int] = typer.Option(None, "--repeat", "-r", help="Repeats per policy (default: the scenario's)."),
    iterations: Optional[int] = typer.Option(None, "--iterations", help="Override every job's iterations (a shorter run)."),
    out: str = typer.Option("results/bench", "--out", help="Folder for JSON, plots and raw records."),
) -> None:
    """Run a scenario on an emulated testbed under each policy (interleaved repeats); print and save the comparison."""
    _run_bench(scenario, policies, repeat, iterations, out)


@lab_app.command("bench-compare")
def bench_compare(
    results: str = typer.Argument(..., help="A results JSON written by hostctl bench."),
    policy: str = typer.Argument(..., help="The policy to compare, e.g. mlcc."),
    baseline: str = typer.Argument(..., help="The policy to compare it with, e.g. mlcc-local."),
) -> None:
    """Compare two policies of one bench run: mean paired ratio of their average JCT over the repeats."""
    from hostctl.errors import ConfigError
    from hostctl_lab.bench import report

    try:
        with open(results) as f:
            data = json.load(f)
    except (OSError, ValueError) as e:
        raise ConfigError(f"cannot read {results} ({e}): give a results JSON written by hostctl bench") from None
    if not isinstance(data, dict) or not isinstance(data.get("runs"), list):
        raise ConfigError(f"{results} is not a results JSON written by hostctl bench (it has no runs)")
    try:
        c = report.compare(data, policy, baseline)
    except ValueError as e:
        raise ConfigError(f"{results}: {e}") from None
    if not c["pairs"]:
        raise ConfigError(f"{results}: no repeat where both {policy} and {baseline} ran ok")
    ci = c["ratio_ci95"]
    typer.echo(f"{policy} vs {baseline}: average JCT ratio {c['ratio']:.3f}"
               + (f", 95% CI [{ci[0]:.3f}, {ci[1]:.3f}]" if ci else " (one pair: no interval)")
               + f" over {c['pairs']} paired repeats; per repeat: "
               + ", ".join(f"{r:.3f}" for r in c["ratios"]))


@lab_app.command("bench-pacing")
def bench_pacing(
    out: str = typer.Option("results/pacing", "--out", help="Folder for pacing.json and the plots."),
    quick: bool = typer.Option(False, "--quick", help="A short version (about 30 s)."),
    repeat: Optional[int] = typer.Option(None, "--repeat", "-r", help="Repeats of the overhead comparison."),
) -> None:
    """Measure the pacing datapath: rate accuracy, step response at 60 ms slots, 200 flows,
    map full, overhead (two namespaces on this machine, as root)."""
    from hostctl.datapath.linux import require_root
    from hostctl_lab.bench.pacing import run

    require_root()
    run(out, quick=quick, repeat=repeat)


@lab_app.command()
def demo(
    repeat: int = typer.Option(1, "--repeat", "-r", help="Repeats per policy."),
    iterations: int = typer.Option(15, "--iterations", help="Iterations per job (the full scenario has 40)."),
    out: str = typer.Option("results/demo", "--out", help="Folder for JSON and plots."),
) -> None:
    """A short placement #1 run (12 PS jobs colocated on one host): fifo vs one vs rr vs one with ingress bands."""
    _run_bench(_demo_scenario(), None, repeat, iterations, out)


def _demo_scenario() -> str:
    here = str(Path(__file__).resolve().parents[2])  # the checkout: lab/hostctl_lab/cli.py
    p = os.path.join(here, "examples", "scenarios", "placement1.toml")
    if not os.path.exists(p):
        from hostctl.errors import ConfigError

        raise ConfigError(f"{p} is missing: run the demo from a checkout of the hostctl repository")
    return p


LIST_FLAGS = ("placement", "order", "network")  # hostctl sim's comma-list flags


def sweep_file(ctx: typer.Context, path: str) -> dict:
    """``hostctl sim --config FILE``: the sweep's settings from a TOML file, keyed by the flags' names
    (``time-scale`` or ``time_scale``; ``placement``, ``order`` and ``network`` a list or a comma string).
    Returns {parameter: value} for the keys whose flag was not given on the command line (a flag wins).
    A missing or unreadable file, an unknown key or a value of the wrong type: one ConfigError line."""
    import typing

    from hostctl.config import read_toml
    from hostctl.errors import ConfigError

    data = read_toml(path, "the sweep file", missing=f"cannot read the sweep file {path}: it does not exist")
    kinds = {k: v for k, v in typing.get_type_hints(sim).items() if k not in ("ctx", "config", "return")}
    out = {}
    for key, value in data.items():
        name = key.replace("-", "_")
        kind = kinds.get(name)
        if kind is None:
            raise ConfigError(f"{path}: unknown key {key!r}; the keys are the flags of hostctl sim: "
                              + ", ".join(sorted(n.replace("_", "-") for n in kinds)))
        kind = next((a for a in typing.get_args(kind) if a is not type(None)), kind)  # Optional[X] -> X
        if name in LIST_FLAGS and isinstance(value, list) \
                and all(isinstance(v, str) for v in value):
            value = ",".join(value)
        if kind is float and isinstance(value, int) and not isinstance(value, bool):
            value = float(value)
        if not isinstance(value, kind) or (kind is int and isinstance(value, bool)):
            want = {str: "a string", int: "a whole number", float: "a number", bool: "true or false"}[kind]
            more = " (a list of names or a comma string)" if name in LIST_FLAGS else ""
            shown = json.dumps(value) if isinstance(value, (bool, int, float, str, list)) else repr(value)
            raise ConfigError(f"{path}: {key} must be {want}{more}, got {shown}")
        if ctx.get_parameter_source(name).name != "COMMANDLINE":  # a flag given on the command line wins
            out[name] = value
    return out


@lab_app.command()
def sim(
    ctx: typer.Context,
    topology: str = typer.Option("mlcc-tree", "--topology", help="lingjun, mlcc-tree, single-switch, or a topology "
                                 "file (switchemu TOML or Lingjun CSV)."),
    servers: Optional[int] = typer.Option(None, "--servers", help="Servers (mlcc-tree: 1000, single-switch: 16)."),
    oversub: Optional[float] = typer.Option(None, "--oversub", help="Uplink oversubscription (mlcc-tree)."),
    trace: Optional[str] = typer.Option(None, "--trace", help="Philly jobs CSV (default: ../shared/data/philly-2017)."),
    synthetic: Optional[int] = typer.Option(None, "--synthetic", help="N seeded synthetic jobs (paper 000's mix) "
                                            "instead of the trace."),
    jobs: int = typer.Option(100, "--jobs", help="The first N multi-GPU jobs of the trace."),
    placement: str = typer.Option("ff", "--placement", help="Comma list: ff, pack, ls, rand, lwf<k> (e.g. lwf1), sjfbco."),
    order: str = typer.Option("fifo", "--order", help="Comma list: fifo, srsf, ada-srsf."),
    network: str = typer.Option("fifo", "--network", help="Comma list: fifo, one, rr, cap, "
                                 "prio-every-link, adadual, srsf<n> (admission, e.g. srsf1), mlcc, mlcc-switch, "
                                 "mcs, ccml."),
    seed: int = typer.Option(0, "--seed", help="First seed."),
    repeat: int = typer.Option(1, "--repeat", help="Seeds seed..seed+R-1."),
    until: Optional[float] = typer.Option(None, "--until", help="Stop at this simulated time (s)."),
    time_scale: float = typer.Option(1.0, "--time-scale", help="Multiply the trace's arrival times."),
    max_iterations: Optional[int] = typer.Option(None, "--max-iterations", help="Cap each trace job's iterations."),
    cap: Optional[str] = typer.Option(None, "--cap", help="Per-job rate of network cap (e.g. 5gbit)."),
    bands: int = typer.Option(6, "--bands", help="Bands of one and rr."),
    rr_interval: float = typer.Option(2.0, "--rr-interval", help="rr's rotation period (s)."),
    jitter: float = typer.Option(0.0, "--jitter", help="Each iteration's compute x U(1-J, 1+J), seeded."),
    steady: int = typer.Option(0, "--steady", help="Extrapolate jobs that share links at their mean iteration "
                               "time measured over N iterations (0: exact; not under mlcc-switch, mcs, ccml, adadual, "
                               "srsf<n>; docs/simulator.md, \"Speed\")."),
    steady_quorum: Optional[float] = typer.Option(None, "--steady-quorum", help="With --steady: once this share "
                                                  "of a component's jobs have their means, take the rest at their "
                                                  "windows so far, slow jobs at 2 iterations (faster, a little less "
                                                  "exact; default: 90%, slow jobs at 10; docs/simulator.md)."),
    slot: float = typer.Option(0.06, "--slot", help="mlcc, mlcc-switch: the planner's slot (s)."),
    ps_fraction: float = typer.Option(0.0, "--ps-fraction", help="Each job is a parameter-server job (the PS on "
                                      "its first server) with this probability, seeded; the others are rings."),
    iter_model: str = typer.Option("serial", "--iter-model", help="A ring job's iteration: serial (compute, then "
                                   "the exchange) or paper 003's model of wfbp_fifo, horovod_fusion or pace (the "
                                   "exchange overlaps the backward pass; fifo, one, rr, cap, prio-every-link)."),
    workers: int = typer.Option(1, "--workers", help="Runs in parallel (processes)."),
    out: str = typer.Option("results/sim", "--out", help="Folder for sim.json and the JCT CDF plot."),
    plots: bool = typer.Option(True, "--plots/--no-plots"),
    config: Optional[str] = typer.Option(None, "--config", help="A TOML file of these settings, keyed by the "
                                         "flags' names (e.g. time-scale = 0.001, network = [\"fifo\", \"one\"]); "
                                         "a flag given here wins over the file."),
) -> None:
    """Simulate a cluster: every combination of placement x order x network x seed (docs/simulator.md)."""
    from types import SimpleNamespace

    o = SimpleNamespace(**{k: v for k, v in locals().items() if k not in ("ctx", "config")})  # the settings
    from rich.console import Console
    from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn

    from hostctl.core.units import parse_rate_bps
    from hostctl.errors import ConfigError
    from hostctl_lab.sim import run as simrun
    from hostctl_lab.sim.cluster import ORDERS

    if config:  # the file's values where the command line gave none
        vars(o).update(sweep_file(ctx, config))
    if o.repeat < 1 or o.workers < 1 or o.jobs < 1:
        raise ConfigError("--repeat, --workers and --jobs must be at least 1")
    if o.steady_quorum is not None and not o.steady:
        raise ConfigError("--steady-quorum is a rule of --steady's measuring: give --steady N (e.g. 50) too, "
                          "or drop it")
    spec = simrun.SweepSpec(
        topology=o.topology, servers=o.servers, oversub=o.oversub, trace=o.trace, synthetic=o.synthetic, jobs=o.jobs,
        # lwf<k> and srsf<n> are families: names are checked by simrun.check (ClusterSim's one-line errors)
        placements=simrun.parse_list(o.placement, None, "placement"),
        orders=simrun.parse_list(o.order, ORDERS, "order"), networks=simrun.parse_list(o.network, None, "network"),
        seeds=tuple(range(o.seed, o.seed + o.repeat)), until_s=o.until, time_scale=o.time_scale,
        max_iterations=o.max_iterations, bands=o.bands, rr_interval_s=o.rr_interval,
        cap_bps=parse_rate_bps(o.cap) if o.cap else None, jitter=o.jitter, steady=o.steady,
        steady_quorum=o.steady_quorum, slot_s=o.slot,
        ps_fraction=o.ps_fraction, iter_model=o.iter_model)
    exact = simrun.check(spec)
    con = Console(stderr=True)
    if exact:
        why = "--jitter makes iterations differ" if o.jitter else "their state is not saved by a park"
        con.print(f"note: --steady has no effect under {', '.join(exact)} ({why}): those runs are exact "
                  "(docs/simulator.md)", highlight=False)
    n = len(spec.combos())
    with Progress(TextColumn("{task.description}"), BarColumn(), TextColumn("{task.completed}/{task.total}"),
                  TimeElapsedColumn(), console=con) as prog:
        task = prog.add_task("runs", total=n)
        runs = simrun.sweep(spec, o.workers, progress=lambda r: prog.advance(task), checked=True)
    rows = simrun.summarize(runs)
    simrun.print_table(rows)
    path = simrun.write(o.out, spec, runs, rows, " ".join(["hostctl"] + sys.argv[1:]))
    typer.echo(f"results: {path}")
    if o.plots:
        p = simrun.plot_cdf(runs, os.path.join(o.out, "jct_cdf.png"))
        if p:
            typer.echo(f"plot: {p}")


def register(app: typer.Typer) -> None:
    """Add the lab's commands to hostctl's typer app (same names and flags as before the split)."""
    for cmd in lab_app.registered_commands:
        app.registered_commands.append(cmd)
    app.add_typer(testbed_app, name="testbed")
