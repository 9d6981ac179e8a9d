"""CPU of a real pacing daemon (policy mlcc or cap) with N concurrent DL flows, on a 2-host testbed.

    sudo .venv/bin/python benchmarks/bench_daemon_cpu.py [--policy mlcc] [--flows 100] [--seconds 15]

h0 serves a bulk sender on one port (hostctl_lab.tools.bulk); one process on h1 opens N connections to it
and reads them all (one process, so the receivers do not swamp the machine); the daemon on h0 plans and
paces all N flows. --pattern stream (default): every connection sends all the time, and the single
receiver, reading the sockets in turn, cuts each flow into a burst every ~60 ms (a stress test of the
monitor's burst records, not a DL pattern). --pattern dl: a synchronous parameter server's iterations:
every --period seconds each connection sends --burst bytes at once, then idles (the workers' compute). After a warm-up, the daemon's user + system CPU time (/proc/PID/stat) over --seconds
gives its share of one core; its status gives the slot work's p50/p90 and overruns. --switch: mlcc in
switch mode, against a real switchemu for the testbed (its own CPU is reported apart). --peers N: the
receiver's connections come from N addresses of h1, which the switch's topology lists as N hosts with a
link each (a PS whose flows go to N workers: N queries per slot and N + 2 links to plan). Writes JSON
(default results/bench_daemon_cpu.json). --profile FILE runs the daemon under cProfile; --capture FILE records its
slots for lab/hostctl_lab/analysis/slot_replay.py. The testbed has a unique name and is removed at the end."""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
import uuid
from pathlib import Path

import psutil

from hostctl.policy.switchclient import SwitchClient
from hostctl_lab.analysis import slot_replay  # run by its path, as before the move (its docstring says why)
from hostctl_lab.bench.results import write_results
from hostctl_lab.bench.runner import switch_topology
from hostctl_lab.bench.scenario import parse_scenario
from hostctl_lab.testbed.net import Testbed

PY = sys.executable
HOSTCTL = os.path.join(os.path.dirname(PY), "hostctl")
RECEIVER = """
import selectors, socket, sys, time
addr, port, n, secs = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), float(sys.argv[4])
local = sys.argv[5].split(",") if len(sys.argv) > 5 else [""]  # connection i from local[i % len(local)]
sel = selectors.DefaultSelector()
for i in range(n):
    s = socket.create_connection((addr, port), source_address=(local[i % len(local)], 0))
    s.setblocking(False); sel.register(s, selectors.EVENT_READ)
end, tot = time.time() + secs, 0
while time.time() < end:
    for k, _ in sel.select(0.1):
        try:
            tot += len(k.fileobj.recv(1 << 20))
        except BlockingIOError:
            pass
print(tot * 8 / secs)
"""


def cpu_s(proc: psutil.Process) -> float:
    t = proc.cpu_times()
    return t.user + t.system


def status(tb: Testbed) -> dict:
    r = subprocess.run(tb.command("h0", [HOSTCTL, "status", "--json"], net_only=True), capture_output=True,
                       text=True, timeout=20)
    return json.loads(r.stdout) if r.returncode == 0 else {}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--policy", default="mlcc", choices=["mlcc", "cap"])
    ap.add_argument("--flows", type=int, default=100)
    ap.add_argument("--seconds", type=float, default=15.0)
    ap.add_argument("--warmup", type=float, default=8.0)
    ap.add_argument("--link", default="500mbit")
    ap.add_argument("--pattern", choices=["stream", "dl"], default="stream")
    ap.add_argument("--burst", default="256KiB", help="--pattern dl: bytes per flow per iteration")
    ap.add_argument("--period", type=float, default=0.7, help="--pattern dl: seconds per iteration")
    ap.add_argument("--switch", action="store_true", help="--policy mlcc with a switchemu for the testbed (switch "
                    "mode: the daemon also fetches feedback and publishes its schedules every slot)")
    ap.add_argument("--peers", type=int, default=1, help="the flows go to this many addresses of h1, each a host "
                    "of its own in the switch's topology (1..250)")
    ap.add_argument("--out", default="results/bench_daemon_cpu.json")
    ap.add_argument("--capture", metavar="FILE", help="also record the daemon's first 900 slots to FILE, to replay "
                    "them with lab/hostctl_lab/analysis/slot_replay.py (fixed-input CPU comparisons of code versions)")
    ap.add_argument("--profile", metavar="FILE", help="run the daemon under cProfile (HOSTCTL_PROFILE), stats to "
                    "FILE (the CPU share is then inflated by the profiler; read the breakdown, not the total)")
    a = ap.parse_args()
    if a.switch and a.policy != "mlcc":
        ap.error("--switch needs --policy mlcc")
    if not 1 <= a.peers <= 250:
        ap.error("--peers must be within 1..250")
    sc = parse_scenario({"testbed": {"hosts": 2, "link": a.link}, "jobs": [{"name": "j", "ps": ["h0"]}]})
    tb = Testbed("c" + uuid.uuid4().hex[:7], sc.topology)
    ep = topo = None
    try:
        tb.up()
        h0 = tb.host("h0")
        dl = ["--burst", a.burst, "--period", str(a.period)] if a.pattern == "dl" else []
        tb.popen("h0", [PY, "-m", "hostctl_lab.tools.bulk", "serve", "--bind", h0.addr, "--port", "7100", *dl],
                 stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        pol = ["--policy", "mlcc"] if a.policy == "mlcc" else ["--policy", "cap", "--cap", "400mbit"]
        h1 = tb.host("h1")
        peers = [h1.addr]
        if a.peers > 1:  # more addresses on h1's interface (its /16), one per peer
            b = h1.addr.split(".")[1]
            peers = [f"10.{b}.1.{i + 1}" for i in range(a.peers)]
            batch = "".join(f"addr add {p}/16 dev {h1.dev}\n" for p in peers)
            subprocess.run(tb.command("h1", ["ip", "-batch", "-"], net_only=True), input=batch, text=True,
                           check=True, capture_output=True)
        sw = None
        if a.switch:  # in h1's namespace, on an ipc socket the daemon in h0 reaches
            ep = f"ipc:///tmp/hc-cpu-{os.getpid()}-{uuid.uuid4().hex[:6]}.sock"
            topo = Path(f"/tmp/hc-cpu-{os.getpid()}.toml")
            text = switch_topology(sc, lambda h: tb.host(h).addr)
            if a.peers > 1:  # the peers as hosts of the same switch, each with a link of the link rate
                text = text.replace('"h1=' + h1.addr + '"', ", ".join(f'"p{i}={p}"' for i, p in enumerate(peers))
                                    + ', "h1=' + h1.addr + '"')
            topo.write_text(text)
            sw = tb.popen("h1", [PY, "-m", "switchemu.cli", "--bind", ep, "--topology", str(topo), "--name", "all",
                                 "--log-level", "WARNING"], net_only=True, stdout=subprocess.DEVNULL,
                          stderr=subprocess.PIPE, text=True)
            with SwitchClient([ep]) as c:
                deadline = time.monotonic() + 30
                while c.probe(0.06, timeout_s=0.5).error is not None:
                    if sw.poll() is not None or time.monotonic() > deadline:
                        why = sw.stderr.read() if sw.poll() is not None else "timeout"
                        raise SystemExit(f"switchemu did not start: {why}")
            pol += ["--switch", ep]
        launch = ([PY, slot_replay.__file__, "daemon",
                   os.path.abspath(a.capture), "--"] if a.capture else [HOSTCTL])
        d = tb.popen("h0", [*launch, "start", *pol, "--iface", "eth0", "--link-rate", a.link, "--ports", "7100",
                            "--cgroup", h0.cgroup, "--rescan", "0.5", "--log-level", "WARNING"],
                     net_only=True, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
                     env={**os.environ, "HOSTCTL_PROFILE": os.path.abspath(a.profile)} if a.profile else None)
        deadline = time.monotonic() + 30
        while not status(tb).get("pacing"):
            if d.poll() is not None or time.monotonic() > deadline:
                raise SystemExit(f"daemon did not start: {d.stderr.read() if d.poll() is not None else 'timeout'}")
            time.sleep(0.2)
        rx = tb.popen("h1", [PY, "-c", RECEIVER, h0.addr, "7100", str(a.flows), str(a.warmup + a.seconds + 2),
                             ",".join(peers) if a.peers > 1 else ""],
                      stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        time.sleep(a.warmup)
        # the daemon is the child of the nsenter wrapper, or the process itself
        kids = psutil.Process(d.pid).children()
        daemon = kids[0] if kids else psutil.Process(d.pid)
        swp = None
        if sw is not None:
            kids = psutil.Process(sw.pid).children()
            swp = kids[0] if kids else psutil.Process(sw.pid)
            w0 = cpu_s(swp)
        c0, t0 = cpu_s(daemon), time.monotonic()
        s0 = status(tb)
        time.sleep(a.seconds)
        c1, t1 = cpu_s(daemon), time.monotonic()
        s1 = status(tb)
        sw_pct = 100 * (cpu_s(swp) - w0) / (t1 - t0) if swp is not None else None
        out, _ = rx.communicate(timeout=60)
        pc = s1.get("pacing") or {}
        res = {"policy": a.policy, "mode": "switch" if a.switch else "local", "peers": a.peers, "pattern": a.pattern,
               **({"burst": a.burst, "period_s": a.period} if a.pattern == "dl" else {}),
               "flows_asked": a.flows, "flows_seen": len(pc.get("flows", [])),
               "window_s": t1 - t0, "daemon_cpu_s": c1 - c0, "core_pct": 100 * (c1 - c0) / (t1 - t0),
               "slot_work_ms_p50": pc.get("tick_ms_p50"), "slot_work_ms_p90": pc.get("tick_ms_p90"),
               "slots": s1["stats"]["slots"] - s0["stats"]["slots"],
               "slot_overruns": s1["stats"]["slot_overruns"] - s0["stats"]["slot_overruns"],
               "goodput_bps": float(out.strip() or 0), "load_avg": os.getloadavg()}
        # what the CPU paid for: slots and burst records (the monitor's input) in the window
        pc0 = s0.get("pacing") or {}
        if a.switch:
            ml = pc.get("mlcc") or {}
            res["switch_mode"] = ml.get("mode")
            res["planned_links"] = ml.get("links")  # the NIC plus the switch links of the flows' paths
            res["switchemu_core_pct"] = sw_pct
        res["burst_records_per_s"] = (pc.get("burst_records", 0) - pc0.get("burst_records", 0)) / res["window_s"]
        res["cpu_us_per_slot"] = 1e6 * res["daemon_cpu_s"] / max(1, res["slots"])
        # what the monitor made of the traffic: iterations and bytes per iteration per flow (medians)
        fl = pc.get("flows", [])
        med = (lambda v: sorted(v)[len(v) // 2] if v else None)
        res["flow_iterations_median"] = med([f["iterations"] for f in fl])
        res["flow_bytes_per_iter_median"] = med([f["bytes_per_iter"] for f in fl if f["bytes_per_iter"]])
        sw_txt = f" (switch mode: {res.get('switch_mode')}, switchemu {sw_pct:.1f}%)" if a.switch else ""
        print(f"{a.policy}{sw_txt}, {a.pattern}, {res['flows_seen']} flows: daemon {res['core_pct']:.1f}% of a core; "
              f"slot work p50 "
              f"{res['slot_work_ms_p50']:.2f} ms, p90 {res['slot_work_ms_p90']:.2f} ms; "
              f"{res['slot_overruns']} overruns in {res['slots']} slots; goodput {res['goodput_bps'] / 1e6:.0f} Mbit/s; "
              f"{res['burst_records_per_s']:.0f} burst records/s; {res['cpu_us_per_slot'] / 1000:.2f} ms CPU per slot; "
              f"per flow (median) {res['flow_iterations_median']} iterations of {res['flow_bytes_per_iter_median']} bytes")
        if a.profile:  # a clean stop, so that the daemon writes its stats
            subprocess.run(tb.command("h0", [HOSTCTL, "stop"], net_only=True), capture_output=True, timeout=30)
            d.wait(30)
            print(f"profile: {a.profile} (python -m pstats {a.profile})")
    finally:
        tb.down()  # also ends switchemu (it runs in h1's namespace)
        for f in ([ep[len("ipc://"):]] if ep else []) + ([topo] if topo else []):
            try:
                os.unlink(f)
            except OSError:
                pass
    write_results(a.out, "pacing daemon CPU with N flows", {"result": res})


if __name__ == "__main__":
    main()
