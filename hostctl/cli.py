"""hostctl command line: a thin shell over library calls.

Every HostctlError becomes one line on stderr and a non-zero exit; no tracebacks
for user mistakes.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import signal
import sys
import time
from typing import Optional

import typer

from hostctl import consts

app = typer.Typer(
    add_completion=False, pretty_exceptions_enable=False, no_args_is_help=True,
    help="End-host traffic control for deep-learning training jobs (TensorLights priority bands).",
    epilog="Examples:\n\n  hostctl start --policy rr --ports 9000-9005 --link-rate 9.7gbit\n\n"
           "  hostctl status\n\n  hostctl clean",
)

PolicyOpt = typer.Option(None, "--policy", "-p", help="fifo, one (static priority) or rr (rotating). Default rr.")
IfaceOpt = typer.Option(None, "--iface", "-i", help="Egress interface. Default: the default route's.")
PortsOpt = typer.Option(None, "--ports", help="DL listening ports, e.g. 9000-9005,9100: each port is one job.")
PidsOpt = typer.Option(None, "--pids", help="Process ids, e.g. 1234,5678: each with its children is one job.")
MatchOpt = typer.Option(None, "--match", help="Regex on command lines, e.g. 'torchrun|horovodrun'.")
ConfigOpt = typer.Option(None, "--config", "-c", help="TOML config file (flags win). See examples/hostctl.toml.")
JsonOpt = typer.Option(False, "--json", help="Machine-readable output.")


def _setup_logging(level: str = "INFO") -> None:
    logging.basicConfig(level=getattr(logging, level.upper(), logging.INFO),
                        format="%(asctime)s hostctl %(levelname)s %(message)s", stream=sys.stderr)


def _resolve_iface(cfg) -> str:
    from hostctl.datapath.linux import default_route_iface
    from hostctl.errors import ConfigError

    iface = cfg.iface or default_route_iface()
    if not iface:
        raise ConfigError("no default route in this network namespace: give --iface")
    return iface


def _resolve_link_rate(cfg, iface: str) -> int:
    from hostctl.datapath.linux import nic_speed_bps
    from hostctl.errors import ConfigError

    if cfg.link_rate_bps:
        return cfg.link_rate_bps
    speed = nic_speed_bps(iface)
    if not speed:
        raise ConfigError(
            f"{iface} reports no line rate (veth and some virtual NICs don't): give --link-rate, e.g. --link-rate 10gbit"
        )
    return int(speed * consts.DEFAULT_LINK_FRACTION)


@app.command()
def start(
    policy: Optional[str] = PolicyOpt,
    iface: Optional[str] = IfaceOpt,
    link_rate: Optional[str] = typer.Option(None, "--link-rate", help="Root rate, e.g. 9.7gbit. Default 97% of the NIC speed."),
    other_rate: Optional[str] = typer.Option(None, "--other-rate", help="Guaranteed to non-DL traffic: a share like 10% or a rate."),
    ports: Optional[str] = PortsOpt,
    pids: Optional[str] = PidsOpt,
    match: Optional[str] = MatchOpt,
    config: Optional[str] = ConfigOpt,
    bands: Optional[int] = typer.Option(None, "--bands", help="Priority bands, 1..7 (default 6)."),
    rr_interval: Optional[float] = typer.Option(None, "--rr-interval", help="Seconds between rotations (rr; default 20)."),
    rescan: Optional[float] = typer.Option(None, "--rescan", help="Seconds between flow rescans (default 1)."),
    lease: Optional[float] = typer.Option(None, "--lease", help="Fail open when the daemon is silent this long (s, default 3)."),
    metrics_port: Optional[int] = typer.Option(None, "--metrics-port", help="Serve Prometheus metrics on this port."),
    metrics_addr: str = typer.Option("127.0.0.1", "--metrics-addr", help="Address for --metrics-port."),
    dry_run: bool = typer.Option(False, "--dry-run", help="Print the plan (qdisc, classes, classifier entries) and exit."),
    log_level: str = typer.Option("INFO", "--log-level"),
) -> None:
    """Run the daemon in the foreground (systemd: examples/hostctl.service)."""
    from hostctl.config import build_config
    from hostctl.core.bands import assign_bands, rr_epoch
    from hostctl.core.plan import build_classifier, build_tc_plan
    from hostctl.discovery import Discovery

    _setup_logging(log_level)
    cfg = build_config(config, policy=policy, iface=iface, link_rate=link_rate, other_rate=other_rate,
                       ports=ports, pids=pids, match=match, bands=bands, rr_interval=rr_interval,
                       rescan=rescan, lease=lease, metrics_port=metrics_port)
    the_iface = _resolve_iface(cfg)
    from hostctl.datapath.linux import link_info

    link_info(the_iface)  # clear error if the interface does not exist
    rate = _resolve_link_rate(cfg, the_iface)
    dataclasses.replace(cfg, link_rate_bps=rate).validate()  # guaranteed rates must fit in a sysfs rate too
    plan = build_tc_plan(the_iface, rate, cfg.bands, cfg.other_rate_bps(rate), classify=cfg.policy != "fifo")
    discovery = Discovery(list(cfg.jobs), the_iface)

    if dry_run:
        jobs = discovery.scan()
        epoch = rr_epoch(time.time(), cfg.rr_interval_s) if cfg.policy == "rr" else 0
        assignment = assign_bands({j.job_id: j.model_bytes for j in jobs}, cfg.policy, cfg.bands, epoch)
        table = build_classifier(jobs, assignment)
        typer.echo(json.dumps({"plan": plan.to_dict(), "assignment": assignment,
                               "classifier": table.to_dict() if plan.classify else None}, indent=2))
        return

    from hostctl import control
    from hostctl.daemon import Daemon
    from hostctl.datapath.linux import LinuxDatapath, require_root

    require_root()
    if plan.classify:
        from hostctl.datapath.classifier import import_bcc

        import_bcc()
    server = control.ControlServer({})  # binds first: a second daemon fails before touching anything
    try:
        datapath = LinuxDatapath(the_iface, policy=cfg.policy, lease_s=cfg.lease_s)
        daemon = Daemon(cfg, plan, datapath, discovery)

        def _stop(_req: dict) -> dict:
            daemon.request_stop()
            return {}

        server.handlers.update({"status": lambda _r: {"status": daemon.status()}, "stop": _stop})
        server.start()
        for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
            signal.signal(sig, lambda *_: daemon.request_stop())
        if cfg.metrics_port:
            from hostctl.metrics import serve

            serve(cfg.metrics_port, daemon.status, metrics_addr)
        daemon.run()
    finally:
        server.close()


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
    con.print(f"hostctl pid {st['pid']} on {st['iface']}: policy {st['policy']}, link "
              f"{format_rate(st['link_rate_bps'])}, {st['bands']} bands{when}")
    t = Table("job", "band", "class", "role", "flows", "tx", "rate", "last burst")
    for j in st["jobs"]:
        t.add_row(j["job_id"], "-" if j["band"] is None else str(j["band"]), j["classid"], j["role"],
                  str(len(j["flows"])), format_bytes(j["tx_bytes"]), format_rate(j["rate_bps"]),
                  format_bytes(j["last_burst_bytes"]))
    con.print(t)
    c = Table("class", "name", "prio", "bytes", "rate", "drops", "backlog")
    for r in st["classes"]:
        c.add_row(r["classid"], r["name"], str(r["prio"]), format_bytes(r["bytes"]), format_rate(r["rate_bps"]),
                  str(r["drops"]), format_bytes(r["backlog_bytes"]))
    con.print(c)
    s = st["stats"]
    con.print(f"rotations {s['rotations']}, reassignments {s['reassignments']}, errors {s['errors']}, "
              f"fail-open packets {st['failopen_pkts']}")


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
) -> None:
    """Show the DL jobs and flows that the selection finds on this host, once."""
    from hostctl.config import build_config
    from hostctl.discovery import Discovery
    from hostctl.errors import ConfigError

    cfg = build_config(config, policy="fifo", ports=ports, pids=pids, match=match, iface=iface)
    if not cfg.jobs:
        raise ConfigError("give --ports, --pids, --match or a --config with [[jobs]]")
    jobs = Discovery(list(cfg.jobs), cfg.iface).scan()
    rows = [{"job_id": j.job_id, "source": j.source, "role": j.role, "pids": list(j.pids),
             "listen_ports": list(j.listen_ports), "flows": [str(f) for f in j.flows],
             "model_bytes": j.model_bytes} for j in jobs]
    if as_json:
        typer.echo(json.dumps(rows, indent=2))
        return
    from rich.console import Console
    from rich.table import Table

    t = Table("job", "role", "pids", "ports", "flows")
    for r in rows:
        t.add_row(r["job_id"], r["role"], ",".join(map(str, r["pids"])) or "-",
                  ",".join(map(str, r["listen_ports"])) or "-", "\n".join(r["flows"]) or "-")
    Console().print(t)


@app.command()
def demo(
    jobs: int = typer.Option(3, min=2, max=20, help="Colocated PS jobs."),
    workers: int = typer.Option(2, min=1, max=16, help="Workers per job."),
    iterations: int = typer.Option(8, min=1, max=1000),
    model_mib: float = typer.Option(4.0, min=0.01, max=1024, help="Model update size, MiB."),
    compute: float = typer.Option(0.2, min=0.0, max=60, help="Compute time per iteration, s."),
    link: str = typer.Option("200mbit", help="PS host egress rate."),
    policies: str = typer.Option("fifo,one,rr", help="Comma list of policies to compare."),
    out: str = typer.Option("results/demo.json", help="JSON results file."),
) -> None:
    """Run colocated PS jobs on an emulated two-host cluster under each policy; print JCTs."""
    from hostctl.core.bands import POLICIES
    from hostctl.core.units import parse_rate_bps
    from hostctl.demo import run_demo
    from hostctl.errors import ConfigError

    pols = tuple(p.strip() for p in policies.split(",") if p.strip())
    bad = [p for p in pols if p not in POLICIES]
    if bad or not pols:
        raise ConfigError(f"unknown policy {', '.join(bad) or '(none)'}: choose from {', '.join(POLICIES)}")
    parse_rate_bps(link, what="--link")
    run_demo(jobs, workers, iterations, model_mib, compute, link, pols, out=out, echo=typer.echo)


def main() -> None:
    from hostctl.errors import HostctlError

    try:
        app()
    except HostctlError as e:
        print(f"hostctl: error: {e}", file=sys.stderr)
        sys.exit(e.exit_code)
    except KeyboardInterrupt:
        sys.exit(130)


if __name__ == "__main__":
    main()
