"""What a switch port of the testbed drops: whole GSO packets or single frames (docs/testbed.md).

    sudo .venv/bin/python benchmarks/bench_port_drops.py [--modes gso,nic-frames,no-gso] [--repeat 2]
        [--senders 3] [--link 500mbit] [--queue 256KiB] [--seconds 4] [--out results/port_drops.json]

Builds a one-switch testbed of 1 + senders hosts (no hostctl), sends one bulk TCP flow (CUBIC) from
each sender into h0 for --seconds, and reports per mode: goodput into h0, packets dropped by h0's
switch port (its tbf), the share of the senders' segments that were retransmitted, and the machine's
CPU use. Modes, alternated within each repeat:

* ``gso``: the testbed as the scenarios build it. TCP sends GSO packets (up to 64 KiB, sized to about
  1 ms of the flow's rate), the host NIC's tbf bucket (4 ms) passes them whole, and the switch port
  queues and drops them whole: one drop loses up to 44 frames;
* ``nic-frames``: the host NIC's tbf with a two-frame bucket, which splits each GSO packet into frames
  and sends them one by one at the line rate, as a real NIC serialises;
* ``no-gso``: ``[testbed] gso = false``: TCP builds one-frame packets (eth0 gso_max_segs 1).

Needs root. Every name is unique to the run (testbed ``pdNNNNNN``) and removed at the end."""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
import uuid
from dataclasses import replace

from hostctl.core.units import parse_rate_bps, parse_size_bytes
from hostctl_lab.bench.results import write_results
from hostctl_lab.testbed.net import MTU_WIRE, Testbed
from hostctl_lab.topology import LabFabric

PY = sys.executable
MODES = ("gso", "nic-frames", "no-gso")


def cpu_times() -> tuple[int, int]:
    """(busy, total) jiffies of the whole machine."""
    with open("/proc/stat") as f:
        v = list(map(int, f.readline().split()[1:]))
    return sum(v) - v[3] - v[4], sum(v)


def tcp_counters(tb: Testbed, host: str) -> dict:
    r = subprocess.run(["ip", "netns", "exec", tb.host(host).ns, "nstat", "-asz", "--json"], capture_output=True,
                       text=True, check=True)
    return json.loads(r.stdout)["kernel"]


def run_mode(mode: str, topo: LabFabric, senders: int, seconds: float, port: int) -> dict:
    tb = Testbed(f"pd{uuid.uuid4().hex[:6]}", replace(topo, gso=mode != "no-gso"))
    try:
        tb.up()
        if mode == "nic-frames":
            for h in tb.hosts():
                subprocess.run(["tc", "-n", h.ns, "qdisc", "replace", "dev", h.dev, "root", "tbf", "rate",
                                f"{topo.link_bps}bit", "burst", str(2 * MTU_WIRE), "limit", str(topo.queue_bytes)],
                               check=True)
        srcs = [f"h{i}" for i in range(1, senders + 1)]
        for i, h in enumerate(srcs):
            tb.popen(h, [PY, "-m", "hostctl_lab.tools.bulk", "serve", "--bind", tb.host(h).addr, "--port", str(port + i)],
                     stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        time.sleep(0.3)
        d0, c0 = tb.drops(), cpu_times()
        recv = [tb.popen("h0", [PY, "-m", "hostctl_lab.tools.bulk", "recv", "--connect", f"{tb.host(h).addr}:{port + i}",
                                "--seconds", str(seconds), "--bucket", "0.5"], stdout=subprocess.PIPE, text=True)
                for i, h in enumerate(srcs)]
        goodput = 0.0
        for p in recv:
            out, _ = p.communicate(timeout=seconds + 30)
            b = json.loads(out)
            goodput += sum(b["bytes"][1:]) * 8 / (b["bucket_s"] * (len(b["bytes"]) - 1))  # after slow start
        d1, c1 = tb.drops(), cpu_times()
        segs = retrans = 0
        for h in srcs:
            k = tcp_counters(tb, h)
            segs += int(k.get("TcpOutSegs", 0))
            retrans += int(k.get("TcpRetransSegs", 0))
        return {"mode": mode, "goodput_mbit": goodput / 1e6, "port_drops": d1["h0:down"] - d0["h0:down"],
                "segments": segs, "retransmitted": retrans, "retransmitted_share": retrans / segs if segs else None,
                "cpu_pct": 100.0 * (c1[0] - c0[0]) / max(1, c1[1] - c0[1])}
    finally:
        tb.down()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--modes", default=",".join(MODES))
    ap.add_argument("--repeat", type=int, default=2)
    ap.add_argument("--senders", type=int, default=3)
    ap.add_argument("--link", default="500mbit")
    ap.add_argument("--queue", default="256KiB")
    ap.add_argument("--seconds", type=float, default=4.0)
    ap.add_argument("--out", default="results/port_drops.json")
    a = ap.parse_args()
    modes = [m for m in a.modes.split(",") if m]
    bad = [m for m in modes if m not in MODES]
    if bad or not modes:
        ap.error(f"unknown mode {bad[0] if bad else '(none)'}; choose from {', '.join(MODES)}")
    if os.geteuid() != 0:
        ap.error("needs root (network namespaces)")
    n = a.senders + 1
    topo = LabFabric(hosts=tuple(f"h{i}" for i in range(n)), rack_of=(0,) * n, racks=1,
                     link_bps=parse_rate_bps(a.link, what="--link"), uplink_bps=None,
                     queue_bytes=parse_size_bytes(a.queue, what="--queue"), tcp_cc="cubic")
    rows = []
    for r in range(a.repeat):
        for mode in modes:
            row = {"repeat": r, **run_mode(mode, topo, a.senders, a.seconds, 7400)}
            rows.append(row)
            print(f"rep {r} {mode:>10}: goodput {row['goodput_mbit']:6.1f} Mbit/s, port drops {row['port_drops']:6d}, "
                  f"retransmitted {100 * (row['retransmitted_share'] or 0):5.1f}% of {row['segments']} segments, "
                  f"machine CPU {row['cpu_pct']:4.1f}%", flush=True)
    write_results(a.out, "port_drops", {"senders": a.senders, "link": a.link, "queue": a.queue,
                                        "seconds": a.seconds, "runs": rows})


if __name__ == "__main__":
    main()
