"""The daemon's whole mlcc slot (MlccControl.tick: fetch, plan, publish) against a real switchemu of a
two-tier fabric, in one process, without pacing or traffic.

    python benchmarks/bench_switch_tick.py [--peers 100] [--racks 5] [--slots 300] [--out FILE]

This host (h0) is alone in rack 0; its 100 flows of one job go to --peers hosts spread over --racks other
racks under one aggregation switch, so each flow's path has three switch-owned links (its rack's uplink,
the aggregation switch's link down to that rack, the peer's downlink) and the racks' links are shared.
switchemu (`--name all`, every switch of the topology in one process) listens on an ipc socket. Prints
and writes (JSON) the thread CPU per tick (the waits for the switch's replies are not CPU) and the rows of
feedback per fetch."""

from __future__ import annotations

import argparse
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from hostctl.core.types import FlowKey
from hostctl.policy.mlcc import FlowIn, MlccControl
from hostctl.policy.switchclient import SwitchClient
from hostctl_lab.bench.results import write_results

SLOT_S = 0.06


def topology(peers: int, racks: int) -> tuple[str, list[str]]:
    addrs = [f"10.0.{1 + i % racks}.{2 + i // racks}" for i in range(peers)]
    hosts: dict[int, list[str]] = {0: ['"h0=10.0.0.1"']}
    for i, a in enumerate(addrs):
        hosts.setdefault(1 + i % racks, []).append(f'"p{i}={a}"')
    txt = "".join(f'[[switch]]\nname = "tor{r}"\nhosts = [{", ".join(h)}]\nparent = "agg"\n'
                  f'uplink_rate = "40gbit"\nhost_rate = "10gbit"\n\n' for r, h in sorted(hosts.items()))
    return txt + '[[switch]]\nname = "agg"\n', addrs


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--peers", type=int, default=100)
    ap.add_argument("--racks", type=int, default=5)
    ap.add_argument("--slots", type=int, default=300)
    ap.add_argument("--out", default="results/bench_switch_tick.json")
    a = ap.parse_args()
    if not (1 <= a.racks <= 200 and 1 <= a.peers <= 200 * a.racks):
        ap.error("--racks within 1..200, --peers within 1..200 per rack")
    d = tempfile.mkdtemp(prefix="hc-stick-")
    txt, addrs = topology(a.peers, a.racks)
    Path(d, "topo.toml").write_text(txt)
    ep = f"ipc://{d}/sw.sock"
    sw = subprocess.Popen([sys.executable, "-m", "switchemu.cli", "--bind", ep, "--topology", f"{d}/topo.toml",
                           "--name", "all", "--log-level", "WARNING"], stderr=subprocess.PIPE, text=True)
    rows: list[int] = []
    try:
        client = SwitchClient([ep])
        deadline = time.monotonic() + 30
        while client.probe(SLOT_S, timeout_s=0.5).error is not None:
            if sw.poll() is not None or time.monotonic() > deadline:
                raise SystemExit(f"switchemu did not start: {sw.stderr.read() if sw.poll() is not None else 'timeout'}")
        exchange = client.exchange

        def counted(slot, **kw):
            res = exchange(slot, **kw)
            if kw.get("fetches"):
                rows.append(sum(len(f.load_Bps) for f in res.feedback.values()))
            return res

        client.exchange = counted
        ctl = MlccControl(int(10e9 / 8), SLOT_S, switch=client)
        flows = [FlowIn(FlowKey("10.0.0.1", 7100, p, 40000 + i), "job", 2e6, 1e9, 0.0, True)
                 for i, p in enumerate(addrs)]
        cpu = []
        for n in range(a.slots + 20):
            # tick early in each slot, as the daemon does (the switch refuses a slot that has ended)
            time.sleep(SLOT_S - time.time() % SLOT_S + 0.002)
            c0 = time.thread_time()
            ctl.tick(flows)
            if n >= 20:
                cpu.append((time.thread_time() - c0) * 1e3)
        status = ctl.status()
        client.close()
    finally:
        sw.kill()
        sw.wait()
        shutil.rmtree(d, ignore_errors=True)
    res = {"peers": a.peers, "racks": a.racks, "slots": a.slots, "links_planned": status["links"],
           "mode": status["mode"], "errors": status["errors"], "fallbacks": status["fallbacks"],
           "fetch_round_trip_ms_p90": status["negotiation_ms_p90"], "exchanges_ms_p90": status["exchange_ms_p90"],
           "cpu_ms_median": statistics.median(cpu), "cpu_ms_mean": statistics.fmean(cpu),
           "rows_per_fetch_median": statistics.median(rows[20:]), "rows_per_fetch_max": max(rows[20:])}
    print(f"{len(addrs)} flows to {a.peers} hosts in {a.racks} racks, {a.slots} slots: tick thread CPU median "
          f"{res['cpu_ms_median']:.3f} ms (mean {res['cpu_ms_mean']:.3f}); feedback rows per fetch median "
          f"{res['rows_per_fetch_median']:g} (max {res['rows_per_fetch_max']}); {res['links_planned']} links "
          f"planned; fetch round trip p90 {res['fetch_round_trip_ms_p90']:.2f} ms; fallbacks to local mode "
          f"{res['fallbacks']}; mode {res['mode']}, errors {res['errors'] or 'none'}")
    write_results(a.out, "MlccControl.tick against a real switchemu (two-tier fabric)", {"result": res})


if __name__ == "__main__":
    main()
