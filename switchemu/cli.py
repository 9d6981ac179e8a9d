"""switchemu command line: run an emulated switch, probe one, make CURVE keys (docs/switchemu.md).

Errors are one line, ``switchemu: error: <problem and fix>``, never a traceback; that includes
typer's own usage errors (bad or missing flags).
"""

from __future__ import annotations

import logging
import os
import re
import shutil
import signal
import sys
import threading
from typing import Optional

import typer

app = typer.Typer(
    add_completion=False, pretty_exceptions_enable=False, invoke_without_command=True,
    help="Emulated MLCC switch: per-link load over K future slots, served over ZeroMQ.",
    epilog="Examples:\n\n  switchemu --bind tcp://127.0.0.1:5555 --topology topo.toml\n\n"
           "  switchemu probe --connect tcp://127.0.0.1:5555\n\n"
           "  switchemu status --connect tcp://127.0.0.1:5555\n\n  switchemu keygen /etc/switchemu/keys",
)


def _setup_logging(level: str) -> None:
    logging.basicConfig(level=getattr(logging, level.upper(), logging.INFO),
                        format="%(asctime)s switchemu %(levelname)s %(message)s", stream=sys.stderr)


def _parse_csv_rates(text: str | None) -> dict[str, int]:
    from hostctl.core.units import parse_rate_bps
    from hostctl.errors import ConfigError

    if text is None:
        return {}
    parts = [p.strip() for p in text.split(",")]
    if len(parts) != 3:
        raise ConfigError(f"bad --csv-rates {text!r}: give three rates HOST,TOR_UPLINK,AGG_UPLINK, "
                          "e.g. 25gbit,100gbit,400gbit")
    h, t, a = (parse_rate_bps(p, what="--csv-rates") for p in parts)
    return {"host_rate_bps": h, "tor_uplink_bps": t, "agg_uplink_bps": a}


def load_topology(path: str, csv_rates: str | None = None):
    from hostctl.core.topology import Topology
    from hostctl.errors import ConfigError

    try:
        with open(path, encoding="utf-8") as f:
            text = f.read()
    except FileNotFoundError:
        raise ConfigError(f"topology file {path} does not exist: give --topology a TOML or Lingjun CSV file "
                          "(see docs/switchemu.md)") from None
    except (OSError, UnicodeDecodeError) as e:
        raise ConfigError(f"cannot read topology file {path}: {e}") from None
    return Topology.parse(text, filename=path, **_parse_csv_rates(csv_rates))


@app.callback()
def serve(
    ctx: typer.Context,
    bind: Optional[str] = typer.Option(None, "--bind", help="ZeroMQ endpoint, e.g. tcp://127.0.0.1:5555 or ipc:///run/sw0.sock."),
    topology: Optional[str] = typer.Option(None, "--topology", "-t", help="Topology: TOML (docs/switchemu.md) or Lingjun CSV."),
    name: Optional[str] = typer.Option(None, "--name", help="The switch to emulate (default: the only one); 'all' = every switch."),
    slot_ms: float = typer.Option(60.0, "--slot-ms", help="Slot length, ms (absolute slot = floor(unix time / slot))."),
    horizon: int = typer.Option(10, "--horizon", help="K: future slots in the load table."),
    max_skew_ms: float = typer.Option(5.0, "--max-skew-ms", help="Accepted clock skew of a message's slot, ms."),
    curve_keys: Optional[str] = typer.Option(None, "--curve-keys", help="Require CURVE: DIR from 'switchemu keygen DIR'."),
    metrics_port: Optional[int] = typer.Option(None, "--metrics-port", help="Serve Prometheus metrics on this port."),
    metrics_addr: str = typer.Option("127.0.0.1", "--metrics-addr", help="Address for --metrics-port."),
    csv_rates: Optional[str] = typer.Option(None, "--csv-rates", help="Lingjun CSV capacities HOST,TOR_UP,AGG_UP (default 25gbit,100gbit,400gbit)."),
    booking_tolerance: float = typer.Option(0.01, "--booking-tolerance", help="A slot booked above capacity x (1 + this) counts as overbooked (switchemu status)."),
    log_level: str = typer.Option("INFO", "--log-level"),
) -> None:
    """Run one emulated switch in the foreground (SIGTERM / Ctrl-C stop it)."""
    if ctx.invoked_subcommand is not None:
        return
    from hostctl.config import endpoint_ok
    from hostctl.errors import ConfigError

    from switchemu.server import ServerConfig, SwitchServer, SwitchState, start_metrics

    _setup_logging(log_level)
    if not bind:
        raise ConfigError("give --bind ENDPOINT, e.g. --bind tcp://127.0.0.1:5555")
    if not endpoint_ok(bind, bind=True):
        raise ConfigError(f"bad --bind {bind!r}: give tcp://HOST:PORT or ipc://PATH, e.g. --bind tcp://127.0.0.1:5555")
    if not topology:
        raise ConfigError("give --topology FILE (TOML or Lingjun CSV, see docs/switchemu.md)")
    _check_slot_ms(slot_ms)
    if not (1 <= horizon <= 1000):
        raise ConfigError(f"--horizon must be within 1..1000 slots, got {horizon}")
    if not (0.0 <= max_skew_ms < slot_ms):
        raise ConfigError(f"--max-skew-ms must be within 0..slot length ({slot_ms:g} ms), got {max_skew_ms:g}")
    if not (0.0 <= booking_tolerance <= 10.0):
        raise ConfigError(f"--booking-tolerance must be within 0..10 (a fraction of capacity), got {booking_tolerance:g}")
    if metrics_port is not None and not (0 < metrics_port < 65536):
        raise ConfigError(f"--metrics-port must be within 1..65535, got {metrics_port}")
    if curve_keys is not None and not os.path.isdir(curve_keys):
        raise ConfigError(f"--curve-keys {curve_keys} is not a folder: create it with switchemu keygen {curve_keys}")
    topo = load_topology(topology, csv_rates)
    state = SwitchState(topo, name, slot_s=slot_ms / 1000.0, horizon=horizon, max_skew_s=max_skew_ms / 1000.0,
                        booking_tolerance=booking_tolerance)
    cfg = ServerConfig(bind=bind, slot_s=slot_ms / 1000.0, horizon=horizon, max_skew_s=max_skew_ms / 1000.0,
                       curve_dir=curve_keys, metrics_port=metrics_port, metrics_addr=metrics_addr)
    server = SwitchServer(state, cfg)
    log = logging.getLogger("switchemu")
    try:
        if metrics_port is not None:
            start_metrics(state, metrics_port, metrics_addr)
        stop = threading.Event()
        signal.signal(signal.SIGTERM, lambda *_: stop.set())
        signal.signal(signal.SIGINT, lambda *_: stop.set())
        signal.signal(signal.SIGHUP, lambda *_: server.reload.set())
        auth = f"CURVE on, {server.authorized_clients()} authorized client keys" if curve_keys else "no CURVE"
        log.info("switch %s: %d links, %d hosts in the topology, K=%d slots of %g ms, listening on %s (%s). "
                 "Ctrl-C to stop.", state.switch, len(state.owned), len(topo.hosts), horizon, slot_ms,
                 server.endpoint, auth)
        server.serve(stop)
        log.info("stopped: %s", state.stats.summary())
    finally:
        server.close()


def _check_slot_ms(slot_ms: float) -> None:
    from hostctl.errors import ConfigError

    if not (1.0 <= slot_ms <= 10_000.0):
        raise ConfigError(f"--slot-ms must be within 1..10000, got {slot_ms:g}")


def _check_client(connect: str, timeout: float) -> None:
    from hostctl.config import endpoint_ok
    from hostctl.errors import ConfigError

    if not endpoint_ok(connect):
        raise ConfigError(f"bad --connect {connect!r}: give tcp://HOST:PORT or ipc://PATH, e.g. tcp://127.0.0.1:5555")
    if not (0 < timeout <= 3600):  # also nan and inf: a client that never gives up is not what was asked
        raise ConfigError(f"--timeout must be within 0..3600 seconds, got {timeout:g}")


@app.command()
def probe(
    connect: str = typer.Option(..., "--connect", help="Endpoint of a running switchemu, e.g. tcp://127.0.0.1:5555."),
    curve_keys: Optional[str] = typer.Option(None, "--curve-keys", help="DIR with server.key and this host's NAME.key_secret (or that file)."),
    timeout: float = typer.Option(2.0, "--timeout", help="Seconds to wait for the reply."),
    slot_ms: float = typer.Option(60.0, "--slot-ms", help="Slot length the switch uses, ms."),
) -> None:
    """One real fetch_feedback round trip; prints its latency (exit 1 on timeout)."""
    from hostctl.errors import HostctlError
    from hostctl.policy.switchclient import CurveClientKeys, SwitchClient

    _check_client(connect, timeout)
    _check_slot_ms(slot_ms)
    keys = CurveClientKeys.from_dir(curve_keys) if curve_keys else None
    client = SwitchClient([connect], curve=keys)
    try:
        res = client.probe(slot_s=slot_ms / 1000.0, timeout_s=timeout)
    finally:
        client.close()
    if res.error:
        raise HostctlError(f"no answer from {connect} within {timeout:g} s ({res.error}): is switchemu running "
                           "there, with matching --curve-keys?")
    clock = "" if res.clock_offset_s is None else f", the switch's clock {res.clock_offset_s * 1000:+.1f} ms from this host's"
    typer.echo(f"{connect}: fetch round trip {res.latency_s * 1000:.3f} ms (slot_now {res.slot_now}, "
               f"K {res.horizon}, slot {res.slot_s * 1000:g} ms, wire version {res.version}{clock})")


@app.command()
def status(
    connect: str = typer.Option(..., "--connect", help="Endpoint of a running switchemu, e.g. tcp://127.0.0.1:5555."),
    curve_keys: Optional[str] = typer.Option(None, "--curve-keys", help="DIR with server.key and this host's NAME.key_secret (or that file)."),
    timeout: float = typer.Option(2.0, "--timeout", help="Seconds to wait for the reply."),
    as_json: bool = typer.Option(False, "--json", help="Print the whole status as JSON."),
    top: int = typer.Option(20, "--top", help="Links shown, most booked first (0: all)."),
    reset_booking: bool = typer.Option(False, "--reset-booking", help="Start the booking over after reading it."),
) -> None:
    """The switch's table and how far the hosts' schedules booked each of its links (docs/switchemu.md)."""
    import json

    from hostctl.errors import ConfigError
    from hostctl.policy.switchclient import CurveClientKeys, SwitchClient

    _check_client(connect, timeout)
    if top < 0:
        raise ConfigError(f"--top must be >= 0, got {top}")
    keys = CurveClientKeys.from_dir(curve_keys) if curve_keys else None
    client = SwitchClient([connect], curve=keys)
    try:
        st = client.status(timeout_s=timeout, reset_booking=reset_booking)
    finally:
        client.close()
    if as_json:
        typer.echo(json.dumps(st, indent=2, sort_keys=True))
        return
    typer.echo(format_status(connect, st, top))


def format_status(endpoint: str, st: dict, top: int = 20) -> str:
    """The text ``switchemu status`` prints for a status dict (SwitchState.status)."""
    b = st.get("booking") or {}
    links = b.get("links") or {}
    lines = [f"{endpoint}: switch {st.get('switch')}, slot {st.get('slot_now')} ({st.get('slot_s', 0) * 1000:g} ms), "
             f"K {st.get('K')}; {st.get('links')} links, {st.get('flows')} flows in the table, "
             f"{st.get('frames')} frames ({st.get('errors')} errors)"]
    tol = b.get("tolerance", 0.0)
    if not links:
        lines.append("booking: no link booked yet")
        return "\n".join(lines)
    w = b["worst"]
    lines.append(f"booking: {len(links)} link{'s' if len(links) != 1 else ''} booked; worst {w['link']}: slot peak {w['slot_peak_ratio']:.3f} x capacity "
                 f"({w['over_slots']} of {w['slots']} slots above capacity x {1 + tol:g}), peak {w['peak_ratio']:.3f}")
    head = ("link", "capacity B/s", "peak", "slot peak", "over/slots", "worst slot", "excess B/s", "flows")
    rows = []
    order = sorted(links, key=lambda k: (-links[k]["slot_peak_ratio"], -links[k]["peak_ratio"], k))
    for lid in order[:top or None]:
        x = links[lid]
        rows.append((lid, f"{x['capacity_Bps']:,}", f"{x['peak_ratio']:.3f}", f"{x['slot_peak_ratio']:.3f}",
                     f"{x['over_slots']}/{x['slots']}", "-" if x["worst_slot"] is None else str(x["worst_slot"]),
                     f"{x['worst_excess_Bps']:,}", str(x["worst_flows"])))
    width = [max(len(r[i]) for r in (head, *rows)) for i in range(len(head))]
    for r in (head, *rows):
        lines.append("  ".join(c.ljust(width[i]) if i == 0 else c.rjust(width[i]) for i, c in enumerate(r)).rstrip())
    if len(order) > len(rows):
        more = len(order) - len(rows)
        lines.append(f"({more} more link{'s' if more != 1 else ''}: --top 0 shows all)")
    return "\n".join(lines)


@app.command()
def keygen(
    folder: str = typer.Argument(..., help="Folder for the keys (created)."),
    client: str = typer.Option("client", "--client", help="Name of the client keypair to add (a host's name)."),
    client_only: bool = typer.Option(False, "--client-only", help="On a host: write only its NAME keypair, "
                                     "no server keys (the switch's folder never holds a host's secret)."),
    force: bool = typer.Option(False, "--force", help="Replace an existing server keypair."),
) -> None:
    """CURVE keys: DIR/server.key(_secret), DIR/<client>.key(_secret), DIR/clients/<client>.key (authorized);
    with --client-only, DIR/<client>.key(_secret) only."""
    import zmq.auth

    from hostctl.errors import ConfigError

    if not re.fullmatch(r"[A-Za-z0-9][A-Za-z0-9_-]{0,62}", client):
        raise ConfigError(f"--client {client!r}: use letters, digits, - and _ only (a host's name)")
    if client == "server":
        raise ConfigError("--client server: that name is the switch's keypair; pick the host's name")
    try:
        os.makedirs(folder if client_only else os.path.join(folder, "clients"), exist_ok=True)
        made = []
        if not client_only and (force or not os.path.exists(os.path.join(folder, "server.key_secret"))):
            zmq.auth.create_certificates(folder, "server")
            os.chmod(os.path.join(folder, "server.key_secret"), 0o600)
            made.append("server")
        if os.path.exists(os.path.join(folder, f"{client}.key_secret")):
            raise ConfigError(f"{folder}/{client}.key_secret exists: pick another --client NAME")
        zmq.auth.create_certificates(folder, client)
        os.chmod(os.path.join(folder, f"{client}.key_secret"), 0o600)
        if not client_only:
            shutil.copy(os.path.join(folder, f"{client}.key"), os.path.join(folder, "clients", f"{client}.key"))
    except OSError as e:
        raise ConfigError(f"cannot write keys to {folder}: {e.strerror}") from None
    made.append(client)
    if client_only:
        typer.echo(f"{folder}: wrote the {client} keypair. To authorize this host, copy {folder}/{client}.key into "
                   f"the switch's clients/ folder and send the switch SIGHUP; put the switch's server.key in {folder}.")
    else:
        typer.echo(f"{folder}: wrote {' and '.join(made)} keypairs; {client} is authorized (clients/{client}.key). "
                   f"Give hosts server.key and {client}.key_secret.")


def main() -> None:
    from hostctl.errors import run_app

    run_app(app, "switchemu")


if __name__ == "__main__":
    main()
