"""Resource limits: the daemon under many flows, measured.

    sudo .venv/bin/python benchmarks/bench_limits.py --out docs/results/limits [--seconds 60] [--churn-rate 1000]
                                                    [--big 10000] [--full 17000]

The soak's sandbox (benchmarks/soak.py: two namespaces and a veth, the daemon in "ps" with `--policy mlcc`
in local mode, jobs by port, 1 s rescan, the pacer on a cgroup made for the run), three phases one after
the other, each against a job of its own (a server in the cgroup, clients in "wk"):
  churn    --churn-rate short connections per second for --seconds: each gets 64 KiB and is closed;
  big      one job with --big connections held open, the server sending 4 KiB on each every second;
  full     one job with --full connections (more than the flow map's 16,384 entries), 1 KiB every 2 s each.
Sampled every --sample-s: the daemon's RSS, CPU, fds, the entries of its BPF hash maps, its status (flows,
slots, overruns, decision p90, the kernel's `flows_full`). Per phase: CPU share of a core, RSS, the largest
map sizes, flows left alone (`flows_full`), overruns, errors, and after the clients stop, how long the maps
take to drain back. Fails (exit 1) if the daemon dies, or the maps do not drain.

Writes OUT/limits.json and prints a table. HC_LIMITS_DAEMON="CMD ARGS" starts the daemon as
`CMD ARGS start ...` instead of `hostctl start ...` (e.g. a script that runs hostctl.cli.main under
cProfile: how the costs fixed in docs/benchmarks.md were found).
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
from soak import HOSTCTL, REPO, Soak, sh  # noqa: E402  (the soak's sandbox and samples)

from hostctl_lab.bench.results import write_results  # noqa: E402

PHASES = {"churn": 20000, "big": 20001, "full": 20002}  # phase -> the job's port


class Limits(Soak):
    def start_daemon(self) -> None:
        args = [*(os.environ["HC_LIMITS_DAEMON"].split() if os.environ.get("HC_LIMITS_DAEMON") else [HOSTCTL]),
                "start", "--policy", "mlcc", "--iface", self.dev["ps"], "--link-rate", "1gbit",
                "--ports", "20000-20999", "--rescan", "1", "--cgroup", self.cgroup]
        self.log = open(self.tmp / "daemon.log", "w")
        self.daemon = self.start("ps", args, stdout=subprocess.DEVNULL, stderr=self.log)
        deadline = time.monotonic() + 60
        while self.status() is None:
            if self.daemon.poll() is not None or time.monotonic() > deadline:
                raise SystemExit(f"limits: the daemon did not start: {(self.tmp / 'daemon.log').read_text()[-2000:]}")
            time.sleep(0.2)

    def side(self, where: str, *args: str, cgroup: bool = False) -> subprocess.Popen:
        env = {**os.environ, "PYTHONPATH": str(REPO)}
        p = self.start(where, [sys.executable, str(HERE / "_limits_side.py"), *args],
                       cgroup=self.cgroup if cgroup else None, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                       text=True, env=env)
        line = p.stdout.readline().strip()
        if line != "ready":
            raise SystemExit(f"limits: {' '.join(args[:2])} did not start ({line!r})")
        return p

    def kernel(self) -> dict:
        st = self.status() or {}
        pc = st.get("pacing") or {}
        stats = st.get("stats") or {}
        return {"flows_full": (pc.get("kernel") or {}).get("flows_full", 0), "slots": stats.get("slots", 0),
                "overruns": stats.get("slot_overruns", 0), "errors": stats.get("errors", 0),
                "tick_ms_p90": pc.get("tick_ms_p90"), "status_flows": len(pc.get("flows") or [])}


def run_phase(lm: Limits, name: str, a: argparse.Namespace, t0: float, samples: list[dict]) -> dict:
    port = PHASES[name]
    addr = lm.addr["ps"]
    k0 = lm.kernel()
    if name == "churn":
        srv = lm.side("ps", "serve", addr, str(port), str(64 * 1024), "0", cgroup=True)
        cli = lm.side("wk", "churn", addr, str(port), str(a.churn_rate), str(a.seconds))
    else:
        n, nbytes, period = (a.big, 4096, 1.0) if name == "big" else (a.full, 1024, 2.0)
        srv = lm.side("ps", "serve", addr, str(port), str(nbytes), str(period), cgroup=True)
        cli = lm.side("wk", "hold", addr, str(port), str(n), str(a.seconds))
    p0 = time.monotonic()
    cpu0 = lm.sample(t0)
    phase_samples = [cpu0]
    while cli.poll() is None:
        time.sleep(a.sample_s)
        if lm.daemon.poll() is not None:
            raise SystemExit(f"limits: the daemon died in phase {name}: {(lm.tmp / 'daemon.log').read_text()[-3000:]}")
        s = lm.sample(t0)
        s["phase"] = name
        phase_samples.append(s)
        samples.append(s)
        print(f"{name:5s} {s['t_s']:6.1f} s: rss {s['rss_kib'] / 1024:.1f} MiB, fds {s['fds']}, "
              f"maps {s['maps']}, cpu {s['cpu_s']:.1f} s", flush=True)
    client = json.loads(cli.stdout.readline() or "{}")
    k1 = lm.kernel()
    srv.stdin.write("stop\n")
    srv.stdin.flush()
    server = json.loads(srv.stdout.readline() or "{}")
    srv.wait(30)
    t_end = time.monotonic()
    drained = None
    while time.monotonic() - t_end < 30:  # closed flows forgotten: the pacing maps back to the job-less level
        m = lm.map_entries()
        if m.get("hc_pace_flows", 0) == 0 and m.get("hc_flows", 0) == 0:
            drained = time.monotonic() - t_end
            break
        time.sleep(0.5)
    last = phase_samples[-1]
    dt = last["t_s"] - cpu0["t_s"]
    row = {"phase": name, "seconds": round(t_end - p0, 1), "client": client, "server": server,
           "cpu_pct_core": (last["cpu_s"] - cpu0["cpu_s"]) / dt * 100 if dt else None,
           "rss_mib": [cpu0["rss_kib"] / 1024, max(s["rss_kib"] for s in phase_samples) / 1024, last["rss_kib"] / 1024],
           "fds_max": max(s["fds"] for s in phase_samples),
           "maps_max": {m: max(s["maps"].get(m, 0) for s in phase_samples) for m in last["maps"]},
           "flows_full": k1["flows_full"] - k0["flows_full"], "slots": k1["slots"] - k0["slots"],
           "overruns": k1["overruns"] - k0["overruns"], "errors": k1["errors"] - k0["errors"],
           "tick_ms_p90_end": k1["tick_ms_p90"], "drained_s": drained}
    print(json.dumps(row), flush=True)
    return row


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--seconds", type=float, default=60.0, help="length of each phase")
    ap.add_argument("--churn-rate", type=float, default=1000.0, help="short connections per second")
    ap.add_argument("--big", type=int, default=10_000, help="connections of the big job")
    ap.add_argument("--full", type=int, default=17_000, help="connections of the job that overfills the flow map")
    ap.add_argument("--phases", default="churn,big,full")
    ap.add_argument("--sample-s", type=float, default=3.0)
    ap.add_argument("--out", default="docs/results/limits")
    a = ap.parse_args()
    if os.geteuid() != 0:
        ap.error("needs root (namespaces, tc, BPF)")
    phases = a.phases.split(",")
    if set(phases) - set(PHASES):
        ap.error(f"--phases: choose from {', '.join(PHASES)}")
    a.policy = "mlcc"  # (Soak.setup makes the cgroup for it)
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    lm = Limits(a)
    samples: list[dict] = []
    rows = []
    try:
        lm.setup()
        before = lm.state()
        lm.start_daemon()
        t0 = time.monotonic()
        for name in phases:
            rows.append(run_phase(lm, name, a, t0, samples))
        stop = sh(*lm.nsenter("ps", HOSTCTL, "stop"), check=False, timeout=60)
        rc = lm.daemon.wait(60)
        time.sleep(0.5)
        after = lm.state()
        log_text = (lm.tmp / "daemon.log").read_text()
        report = {"rows": rows, "args": {k: v for k, v in vars(a).items() if k != "policy"},
                  "revision": sh("git", "-C", str(REPO), "rev-parse", "--short", "HEAD", check=False).stdout.strip(),
                  "stop": {"hostctl_stop_rc": stop.returncode, "daemon_rc": rc, "restored": before == after},
                  "log_errors": sum(1 for ln in log_text.splitlines() if " ERROR " in ln),
                  "tracebacks": log_text.count("Traceback"),
                  "log_tail": log_text.splitlines()[-20:], "samples": samples}
        write_results(Path(a.out) / "limits.json", "resource limits", report)
        print(f"{'phase':6s} {'cpu %':>6s} {'rss MiB (start/max/end)':>24s} {'pace map max':>12s} "
              f"{'flows_full':>10s} {'overruns':>8s} {'drained s':>9s}")
        for r in rows:
            print(f"{r['phase']:6s} {r['cpu_pct_core'] or 0:6.1f} {'/'.join(f'{x:.0f}' for x in r['rss_mib']):>24s} "
                  f"{r['maps_max'].get('hc_pace_flows', 0):12d} {r['flows_full']:10d} {r['overruns']:8d} "
                  f"{r['drained_s'] if r['drained_s'] is None else round(r['drained_s'], 1)!s:>9s}")
        ok = rc == 0 and report["stop"]["restored"] and not report["tracebacks"] and all(
            r["drained_s"] is not None for r in rows)
        return 0 if ok else 1
    finally:
        lm.cleanup()


if __name__ == "__main__":
    sys.exit(main())
