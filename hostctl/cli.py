"""hostctl command line: a thin shell over library calls.

Every HostctlError becomes one line on stderr and a non-zero exit; no tracebacks
for user mistakes.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import os
import signal
import sys
import time
from typing import Optional

import typer

from hostctl import consts
from hostctl.policy import POLICIES

app = typer.Typer(
    add_completion=False, pretty_exceptions_enable=False, no_args_is_help=True,
    help="End-host traffic control for deep-learning training jobs "
         "(TensorLights priority bands, MLCC per-flow pacing).",
    epilog="Examples:\n\n  hostctl start --policy rr --ports 9000-9005 --link-rate 9.7gbit\n\n"
           "  hostctl status\n\n  hostctl clean",
)

PolicyOpt = typer.Option(None, "--policy", "-p", help="; ".join(f"{p.name}: {p.summary}" for p in POLICIES.values())
                         + f". Default {consts.DEFAULT_POLICY}.")
IfaceOpt = typer.Option(None, "--iface", "-i", help="Egress interface. Default: the default route's.")
ContainersOpt = typer.Option(None, "--containers/--no-containers", help="Find jobs in this host's containers too (network namespaces with a veth to this one: Docker, Kubernetes pods). Default on.")
ContainerAddrOpt = typer.Option(None, "--container-addr", help="Address naming a container's listening port in job ids: pod (its own address; routed pod networks, default) or host (the --iface address; masquerading with hostPort = containerPort).")
PortsOpt = typer.Option(None, "--ports", help="DL ports, e.g. 9000-9005,9100: each port served here is one job, and so is each PS address:port that processes here connect to (worker hosts).")
PidsOpt = typer.Option(None, "--pids", help="Process ids, e.g. 1234,5678: each with its children is one job.")
MatchOpt = typer.Option(None, "--match", help="Regex on command lines, e.g. 'torchrun|horovodrun'.")
ConfigOpt = typer.Option(None, "--config", "-c", help="TOML config file (flags win). See examples/hostctl.toml.")
JsonOpt = typer.Option(False, "--json", help="Machine-readable output.")


def _setup_logging(level: str = "INFO") -> None:
    from hostctl.systemd import log_handler

    root = logging.getLogger()
    for h in list(root.handlers):
        root.removeHandler(h)
    root.addHandler(log_handler(sys.stderr))
    root.setLevel(level.upper())


def _version() -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("hostctl")
    except PackageNotFoundError:  # run from a checkout that was never installed
        return "unknown"


def _version_callback(value: bool) -> None:
    if value:
        typer.echo(f"hostctl {_version()}")
        raise typer.Exit()


@app.callback()
def _main(version: Optional[bool] = typer.Option(None, "--version", callback=_version_callback, is_eager=True,
                                                 help="Print hostctl's version and exit.")) -> None:
    """End-host traffic control for deep-learning training jobs."""


def _resolve_iface(cfg) -> str:
    import socket

    from hostctl.datapath.linux import default_route_iface
    from hostctl.errors import ConfigError

    iface = cfg.iface or default_route_iface()
    if not iface:
        raise ConfigError("no default route in this network namespace: give --iface")
    try:
        socket.if_nametoindex(iface)
    except OSError:
        raise ConfigError(f"interface {iface!r} not found in this network namespace; list them with `ip link` "
                          "and give --iface (or iface = in the config)") from None
    return iface


def _resolve_link_rate(cfg, iface: str, given: str | None = None) -> int:
    from hostctl.config import link_rate_warning
    from hostctl.datapath.linux import nic_speed_bps
    from hostctl.errors import ConfigError

    speed = nic_speed_bps(iface)
    if cfg.link_rate_bps:
        warning = link_rate_warning(cfg.link_rate_bps, given, iface, speed)
        if warning:
            logging.getLogger("hostctl").warning("%s", warning)
        return cfg.link_rate_bps
    if not speed:
        raise ConfigError(
            f"{iface} reports no line rate (veth and some virtual NICs don't): give --link-rate, e.g. --link-rate 10gbit"
        )
    return int(speed * consts.DEFAULT_LINK_FRACTION)


def _link_rate_text(config: str | None, flag: str | None) -> str | None:
    """The link rate as the operator wrote it (the flag, else the file's link_rate), for the warning."""
    if flag is not None or not config:
        return flag
    from hostctl.config import read_toml
    from hostctl.errors import ConfigError

    try:
        v = read_toml(config, "config file").get("link_rate")
    except ConfigError:
        return None
    return v if isinstance(v, str) else None


@app.command()
def start(
    policy: Optional[str] = PolicyOpt,
    iface: Optional[str] = IfaceOpt,
    link_rate: Optional[str] = typer.Option(None, "--link-rate", help="Root rate, e.g. 9.7gbit (tc units: gbit is bits/s, gbps is BYTES/s). Default 97% of the NIC speed."),
    other_rate: Optional[str] = typer.Option(None, "--other-rate", help="Guaranteed to non-DL traffic: a share like 10% or a rate."),
    ingress_rate: Optional[str] = typer.Option(None, "--ingress-rate", help="one/rr: order received traffic too, through an IFB shaped to this share of the link rate or rate, e.g. 97%. Default: egress only."),
    ports: Optional[str] = PortsOpt,
    pids: Optional[str] = PidsOpt,
    match: Optional[str] = MatchOpt,
    config: Optional[str] = ConfigOpt,
    bands: Optional[int] = typer.Option(None, "--bands", help="Priority bands, 1..7 (default 6)."),
    rr_interval: Optional[float] = typer.Option(None, "--rr-interval", help="Seconds between rotations (rr; default 20)."),
    rescan: Optional[float] = typer.Option(None, "--rescan", help="Seconds between flow rescans (default 1)."),
    lease: Optional[float] = typer.Option(None, "--lease", help="Fail open when the daemon is silent this long (s, default 1)."),
    metrics_port: Optional[int] = typer.Option(None, "--metrics-port", help="Serve Prometheus metrics on this port."),
    cap: Optional[str] = typer.Option(None, "--cap", help="Policy cap: each job's rate cap, e.g. 2gbit (split over its flows)."),
    cgroup: Optional[str] = typer.Option(None, "--cgroup", help="Pacing scope: cgroup v2 path whose flows are paced (default /)."),
    slot: Optional[float] = typer.Option(None, "--slot", help="Pacing slot, seconds (default 0.06)."),
    phase_gap: Optional[float] = typer.Option(None, "--phase-gap", help="cap/mlcc: seconds without ACK progress that end a flow's burst (default 0.02)."),
    switch: Optional[str] = typer.Option(None, "--switch", help="mlcc: switchemu endpoints, e.g. tcp://10.0.0.9:5555[,...]. Default: local mode (this host's NIC only)."),
    curve_keys: Optional[str] = typer.Option(None, "--curve-keys", help="mlcc: folder with the switch's server.key and this host's NAME.key_secret, or that file (switchemu keygen)."),
    horizon: Optional[int] = typer.Option(None, "--horizon", help="mlcc: slots planned ahead, K (default 10)."),
    plan_offset: Optional[float] = typer.Option(None, "--plan-offset", help="mlcc: seconds into each slot at which this host plans (default: from its host name, 0..35 ms)."),
    deps: Optional[bool] = typer.Option(None, "--deps/--no-deps", help="mlcc: Algorithm 2's dependency rules for jobs with a comm pattern in the config (switch mode; default on)."),
    job_order: Optional[str] = typer.Option(None, "--job-order", help="mlcc with --switch: order the jobs on the fabric's links, the same order on every host: none (default: by arrival), fixed, rotate (a new order every --rr-interval), smallest (smaller model_size first, as policy one; one size by arrival), or flat (no order: every job plans around all others). mlcc-bands: the order of its bands too (fixed unless rotate)."),
    containers: Optional[bool] = ContainersOpt,
    container_addr: Optional[str] = ContainerAddrOpt,
    metrics_addr: Optional[str] = typer.Option(None, "--metrics-addr", help="Address for --metrics-port (default 127.0.0.1)."),
    dry_run: bool = typer.Option(False, "--dry-run", help="Print the plan (qdisc, classes, classifier entries) and exit."),
    log_level: Optional[str] = typer.Option(None, "--log-level", help="DEBUG, INFO (default), WARNING, ERROR or CRITICAL."),
) -> None:
    """Run the daemon in the foreground (systemd: examples/hostctl.service). SIGHUP reloads --config."""
    from hostctl.config import build_config
    from hostctl.core.plan import build_tc_plan
    from hostctl.discovery import Discovery
    from hostctl.policy import make_driver

    # a SIGHUP while starting up is kept and reloads once the loop runs (its default would kill us)
    early_hup = []
    if not dry_run:
        signal.signal(signal.SIGHUP, lambda *_: early_hup.append(1))
    # the flags given on the command line (None: not given); they win over the file, also on reload
    flags = dict(policy=policy, iface=iface, link_rate=link_rate, other_rate=other_rate,
                 ports=ports, pids=pids, match=match, bands=bands, rr_interval=rr_interval,
                 rescan=rescan, lease=lease, metrics_port=metrics_port, cap=cap, cgroup=cgroup, slot=slot,
                 phase_gap=phase_gap, switch=switch, curve_keys=curve_keys, horizon=horizon,
                 plan_offset=plan_offset, ingress_rate=ingress_rate, deps=deps, job_order=job_order,
                 metrics_addr=metrics_addr, log_level=log_level, containers=containers,
                 container_addr=container_addr)
    cfg = build_config(config, **flags)
    _setup_logging(cfg.log_level)
    the_iface = _resolve_iface(cfg)
    rate = _resolve_link_rate(cfg, the_iface, _link_rate_text(config, link_rate))
    dataclasses.replace(cfg, link_rate_bps=rate).validate()  # guaranteed rates must fit in a sysfs rate too
    plan = build_tc_plan(the_iface, rate, cfg.bands, cfg.other_rate_bps(rate), classify=cfg.spec.classifies,
                         ingress_rate_bps=cfg.ingress_rate_bps(rate))
    if cfg.pacing:
        from hostctl.datapath.pacer import resolve_cgroup
        from hostctl.errors import ConfigError, DatapathError

        try:
            resolve_cgroup(cfg.cgroup)  # a clear error before anything is touched
        except DatapathError as e:  # a path that names no cgroup: the flag's fault (exit 2, as a mistyped --iface)
            raise ConfigError(str(e)) from None
    discovery = Discovery(list(cfg.jobs), the_iface, containers=cfg.containers, container_addr=cfg.container_addr)

    if dry_run:  # what the daemon would apply now: its policy's driver, without a datapath
        jobs = {j.job_id: j for j in discovery.scan()}
        driver = make_driver(cfg, None, link_rate_bps=rate)
        assignment, table = driver.classifier(jobs, driver.epoch(time.time()))
        typer.echo(json.dumps({"plan": plan.to_dict(), "assignment": assignment,
                               # mlcc-bands: the bands follow mlcc's fabric job order (fixed, rotate or smallest)
                               "band_order": cfg.spec.band_order(cfg.job_order),
                               "classifier": table.to_dict() if plan.classify else None,
                               "pacing": driver.describe(jobs)}, indent=2))
        driver.close()
        return

    from hostctl import control
    from hostctl.daemon import Daemon
    from hostctl.datapath.linux import LinuxDatapath, require_root

    require_root()
    if plan.classify or cfg.pacing:
        from hostctl.datapath.classifier import import_bcc

        import_bcc()
    switch_client = None
    if cfg.switch:
        from hostctl.policy.switchclient import CurveClientKeys, SwitchClient

        keys = CurveClientKeys.from_dir(cfg.curve_keys) if cfg.curve_keys else None
        switch_client = SwitchClient(list(cfg.switch), curve=keys, horizon=cfg.horizon)
    server = control.ControlServer({})  # binds first: a second daemon fails before touching anything
    try:
        datapath = LinuxDatapath(the_iface, policy=cfg.policy, lease_s=cfg.lease_s,
                                 pace_cgroup=cfg.cgroup if cfg.pacing else None, phase_gap_s=cfg.phase_gap_s,
                                 # port-selected flows are picked at connection time; flows of jobs
                                 # found by pid/command line only later, by 4-tuple
                                 track_all=cfg.tracks_all_flows)
        daemon = Daemon(cfg, plan, datapath, discovery, switch=switch_client,
                        load_config=(lambda: build_config(config, **flags)) if config else None,
                        new_discovery=lambda specs: Discovery(list(specs), the_iface), version=_version())
        switch_client = None  # the daemon closes it

        def _stop(_req: dict) -> dict:
            daemon.request_stop()
            return {}

        def _hint(req: dict) -> dict:
            peer = req.get("_peer", {})
            job = req.get("job")
            if not peer.get("privileged") and not _owns_job(daemon, job, peer.get("uid", -1)):
                raise ValueError(f"permission denied: uid {peer.get('uid')} runs no process of job {job!r}")
            daemon.hint(job, req.get("bytes_per_iter"), req.get("iteration_start"))
            return {}

        server.handlers.update({"status": lambda _r: {"status": daemon.status()}, "stop": _stop, "hint": _hint})
        server.start()
        # signals only set events: the loop stops, or reloads the config file, at its next turn
        for sig in (signal.SIGTERM, signal.SIGINT):
            signal.signal(sig, lambda *_: daemon.request_stop())
        signal.signal(signal.SIGHUP, lambda *_: daemon.request_reload())
        if early_hup:
            daemon.request_reload()
        if cfg.metrics_port:
            from hostctl.metrics import serve

            serve(cfg.metrics_port, daemon.status, cfg.metrics_addr, _version())
        _run_profiled(daemon.run, os.environ.get("HOSTCTL_PROFILE"))
    finally:
        server.close()
        if switch_client is not None:
            switch_client.close()


def _run_profiled(run, path: str | None) -> None:
    """HOSTCTL_PROFILE=FILE: run the daemon's loop under cProfile and write the stats to FILE
    (read them with `python -m pstats FILE`). For finding where the daemon's CPU goes."""
    if not path:
        run()
        return
    import cProfile

    prof = cProfile.Profile()
    try:
        prof.runcall(run)
    finally:
        prof.dump_stats(path)


def _owns_job(daemon, job, uid: int) -> bool:
    j = daemon.jobs.get(job) if isinstance(job, str) else None
    if j is None:
        return False
    for pid in j.pids:
        try:
            if os.stat(f"/proc/{pid}").st_uid == uid:
                return True
        except OSError:
            continue
    return False


@app.command()
def stop(timeout: float = typer.Option(10.0, help="Seconds to wait for the daemon to exit.")) -> None:
    """Ask the daemon of this network namespace to stop and restore the interface."""
    from hostctl import control
    from hostctl.errors import HostctlError

    control.request("stop")
    deadline = time.monotonic() + timeout
    while control.is_running():
        if time.monotonic() > deadline:
            raise HostctlError(f"the daemon did not stop within {timeout:g}s; `hostctl clean` forces it")
        time.sleep(0.05)
    typer.echo("stopped")


@app.command()
def status(as_json: bool = JsonOpt) -> None:
    """Jobs, bands, flows and per-class counters of the running daemon."""
    from hostctl import control
    from hostctl.core.units import format_bytes, format_rate

    st = control.request("status")["status"]
    if as_json:
        typer.echo(json.dumps(st, indent=2))
        return
    from rich.console import Console
    from rich.table import Table

    con = Console()
    nxt = st.get("next_rotation")
    when = f", next rotation in {max(0.0, nxt - time.time()):.1f}s" if nxt else ""
    ingress = f", ingress bands at {format_rate(st['ingress_rate_bps'])}" if st.get("ingress_rate_bps") else ""
    order = f" in mlcc's job order ({st['band_order']})" if st.get("band_order") else ""
    con.print(f"hostctl {st.get('version', '?')} pid {st['pid']} on {st['iface']}: policy {st['policy']}, link "
              f"{format_rate(st['link_rate_bps'])}, {st['bands']} bands{order}{ingress}{when}")
    rx = bool(st.get("ingress_rate_bps"))  # ingress bands: the bytes each job received through them
    t = Table("job", "band", "class", "role", "flows", "tx", "rate", "last burst", *(["rx"] if rx else []))
    for j in st["jobs"]:
        t.add_row(j["job_id"], "-" if j["band"] is None else str(j["band"]), j["classid"], j["role"],
                  str(len(j["flows"])), format_bytes(j["tx_bytes"]), format_rate(j["rate_bps"]),
                  format_bytes(j["last_burst_bytes"]),
                  *([format_bytes(j.get("rx_bytes") or 0)] if rx else []))
    con.print(t)
    c = Table("class", "name", "prio", "bytes", "rate", "drops", "backlog")
    for r in st["classes"]:
        c.add_row(r["classid"], r["name"], str(r["prio"]), format_bytes(r["bytes"]), format_rate(r["rate_bps"]),
                  str(r["drops"]), format_bytes(r["backlog_bytes"]))
    con.print(c)
    s = st["stats"]
    rl = st.get("reloads") or {}
    con.print(f"rotations {s['rotations']}, reassignments {s['reassignments']}, errors {s['errors']}, "
              f"fail-open packets {st['failopen_pkts']}, config reloads {rl.get('ok', 0)} "
              f"(refused {rl.get('refused', 0)})")
    if s.get("reconciliations"):
        con.print(f"tc tree put back {s['reconciliations']} time(s) after another agent changed it; last: "
                  f"{s.get('last_drift') or '?'}")
    pc = st.get("pacing")
    if pc:
        _print_pacing(con, pc, s)


def _print_pacing(con, pc: dict, s: dict) -> None:
    from rich.table import Table

    from hostctl.core.units import format_bytes, format_rate

    def rate(v):
        return "-" if v is None else format_rate(v)

    def size(v):
        return "-" if v is None else format_bytes(int(v))

    ml = pc.get("mlcc")
    cols = ["flow", "job", "target", "applied", "measured", "max (4 slots)", "iter bytes", "iters", "bytes/iter",
            "left", "srtt"]
    if ml:
        cols.append("plan: next K slots (Mbit/s), wave")
    t = Table(*cols)
    for f in pc["flows"]:
        row = [f["flow"], f["job"] or "-", rate(f["target_bps"]), rate(f["applied_bps"]), rate(f["rate_bps"]),
               rate(f["max_rate_bps"]), size(f["iter_bytes"]), str(f["iterations"]), size(f["bytes_per_iter"]),
               size(f["bytes_left"]), f"{f['srtt_us'] / 1000:.2f} ms"]
        if ml:
            p = f.get("plan")
            row.append("-" if not p else " ".join(f"{x * 8 / 1e6:.0f}" for x in p["schedule_Bps"])
                       + f"  {p['kind']}" + (f" w{p['wave']}" if p["wave"] >= 0 else "")
                       + (f" {p['role']}" + (f" +{p['delta_Bps'] * 8 / 1e6:.0f}" if p.get("delta_Bps") else "")
                          + (" held" if p.get("held") else "") if p.get("role") else ""))
        t.add_row(*row)
    con.print(t)
    if ml:
        def ms(v):
            return "-" if v is None else f"{v:.2f} ms"
        con.print(f"mlcc: {ml['mode']} mode{' (switch configured)' if ml['switch'] and ml['mode'] == 'local' else ''}, "
                  f"K {ml['K']}, negotiation p50 {ms(ml['negotiation_ms_p50'])} p90 {ms(ml['negotiation_ms_p90'])}, "
                  f"fallbacks {ml['fallbacks']}, recoveries {ml['recoveries']}, silent slots {ml['silent_slots']}, "
                  f"late publishes {ml.get('late_publishes', 0)}, "
                  f"errors {ml['errors'] or 'none'}; NIC plan (Mbit/s): "
                  + " ".join(f"{x * 8 / 1e6:.0f}" for x in ml["nic_load_Bps"]))
        from hostctl.core.wire import WIRE_VERSION

        old = sorted(ep for ep, v in (ml.get("wire_versions") or {}).items() if v < WIRE_VERSION)
        if old:
            con.print(f"switches answering in an older wire version (upgrade switchemu): {', '.join(old)}")
        offs, sil = ml.get("switch_clock_offset_ms") or {}, ml.get("switch_silent_slots") or {}
        if offs or any(sil.values()):
            con.print("switches: " + "; ".join(
                f"{ep}" + (f" clock {offs[ep]:+.1f} ms" if ep in offs else "")
                + (f", silent {sil[ep]} slots" if sil.get(ep) else "") for ep in sorted(set(offs) | set(sil))))
        jo = ml.get("job_order")
        if jo and jo.get("order") != "none":
            con.print(f"job order ({jo['order']}" + (f", every {jo['interval_s']:g} s" if jo["order"] == "rotate" else "")
                      + "): " + (" > ".join(jo["jobs"]) or "no jobs yet"))
        d = ml.get("deps")
        if d and d.get("flows"):
            con.print(f"Algorithm 2: {d['flows']} flow(s) with a role; slots raised {d['delta_flows']}, held "
                      f"{d.get('held_flows', d['reduced_flows'])}, without a peer's progress {d['progress_missing']}; notifications "
                      f"sent {d['notifications_sent']}, received {d['notifications_received']}")
    j = Table("job", "cap", "flows", "iterations", "bytes/iter", "this iteration", "left", "from")
    for name, r in sorted(pc["jobs"].items()):
        j.add_row(name, rate(r["cap_bps"]), str(r["flows"]), str(r["iterations"]), size(r["bytes_per_iter"]),
                  size(r["iter_bytes"]), size(r["bytes_left"]), r["source"])
    con.print(j)
    k = pc.get("kernel", {})
    p90 = pc.get("tick_ms_p90")
    con.print(f"slot {pc['slot_s'] * 1000:.0f} ms: {s.get('slots', 0)} slots, {s.get('slot_overruns', 0)} overruns, "
              f"decision p90 {'-' if p90 is None else f'{p90:.2f} ms'}; kernel: flows not tracked (map full) "
              f"{k.get('flows_full', 0)}, fail-open rate changes {k.get('failopen_events', 0)}, "
              f"setsockopt errors {k.get('setopt_errors', 0)}, burst records lost {k.get('bursts_lost', 0)}, "
              f"flows adopted {k.get('adopted', 0)}")


@app.command()
def clean(iface: Optional[str] = typer.Option(None, "--iface", "-i", help="Only this interface.")) -> None:
    """Remove everything hostctl created in this network namespace and restore the
    previous qdiscs; also after kill -9. Idempotent."""
    from hostctl import control
    from hostctl.datapath.linux import clean_all, require_root

    require_root()
    if control.is_running():
        try:
            control.request("stop", timeout_s=5)
            deadline = time.monotonic() + 10
            while control.is_running() and time.monotonic() < deadline:
                time.sleep(0.05)
        except Exception:
            pass
    for line in clean_all(iface=iface):
        typer.echo(line)


@app.command()
def flows(
    ports: Optional[str] = PortsOpt, pids: Optional[str] = PidsOpt, match: Optional[str] = MatchOpt,
    config: Optional[str] = ConfigOpt, iface: Optional[str] = IfaceOpt, as_json: bool = JsonOpt,
    containers: Optional[bool] = ContainersOpt, container_addr: Optional[str] = ContainerAddrOpt,
) -> None:
    """Show the DL jobs and flows that the selection finds on this host, once."""
    from hostctl.config import build_config
    from hostctl.core.plan import endpoint_str
    from hostctl.datapath.linux import default_route_iface
    from hostctl.discovery import Discovery
    from hostctl.errors import ConfigError

    cfg = build_config(config, policy="fifo", ports=ports, pids=pids, match=match, iface=iface,
                       containers=containers, container_addr=container_addr)
    if not cfg.jobs:
        raise ConfigError("give --ports, --pids, --match or a --config with [[jobs]]")
    # the interface `start` would control: its address names wildcard listeners, its peer is no container
    jobs = Discovery(list(cfg.jobs), cfg.iface or default_route_iface(), containers=cfg.containers,
                     container_addr=cfg.container_addr).scan()
    rows = [{"job_id": j.job_id, "source": j.source, "role": j.role, "pids": list(j.pids),
             "listen_ports": list(j.listen_ports), "flows": [str(f) for f in j.flows],
             "remote_endpoints": [endpoint_str(e) for e in j.remote_endpoints],
             "model_bytes": j.model_bytes} for j in jobs]
    if as_json:
        typer.echo(json.dumps(rows, indent=2))
        return
    from rich.console import Console
    from rich.table import Table

    t = Table("job", "role", "pids", "ports", "connects to", "flows")
    for r in rows:
        t.add_row(r["job_id"], r["role"], ",".join(map(str, r["pids"])) or "-",
                  ",".join(map(str, r["listen_ports"])) or "-", ",".join(r["remote_endpoints"]) or "-",
                  "\n".join(r["flows"]) or "-")
    Console().print(t)


class Terminated(BaseException):
    """SIGTERM in a command that must undo what it built (the bench's testbeds): raised by the
    handler so that every `finally` runs; the process then exits 143."""


def _terminate(_sig, _frame) -> None:
    signal.signal(signal.SIGTERM, signal.SIG_IGN)  # a second SIGTERM must not cut the teardown short
    raise Terminated


# The lab's commands (bench, bench-compare, bench-pacing, demo, sim, testbed) are in the hostctl-lab
# distribution (lab/): registered here when it is installed, otherwise each says so in one line.
LAB_COMMANDS = ("bench", "bench-compare", "bench-pacing", "demo", "sim", "testbed")
LAB_MISSING = "hostctl {} is part of the lab: pip install ./lab (scripts/setup.sh installs it)"


def _lab_missing(name: str):
    def cmd(ctx: typer.Context) -> None:
        print(LAB_MISSING.format(name), file=sys.stderr)
        raise typer.Exit(2)

    return cmd


def _register_lab() -> None:
    try:
        from hostctl_lab.cli import register  # the one import of the lab in hostctl
    except ModuleNotFoundError as e:
        if e.name not in ("hostctl_lab", "hostctl_lab.cli"):
            raise
        for name in LAB_COMMANDS:
            app.command(name, help="Part of the lab (not installed): pip install ./lab.", add_help_option=False,
                        context_settings={"allow_extra_args": True, "ignore_unknown_options": True})(
                _lab_missing(name))
        return
    register(app)


_register_lab()


def main() -> None:
    from hostctl.errors import run_app

    try:
        run_app(app, "hostctl")
    except Terminated:
        print("hostctl: terminated (SIGTERM); what this run built was removed", file=sys.stderr)
        sys.exit(143)


if __name__ == "__main__":
    main()
