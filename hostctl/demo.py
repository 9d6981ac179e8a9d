"""`hostctl demo`: TensorLights on a two-host emulated cluster, fifo vs one vs rr.

Builds two network namespaces joined by a veth (a "PS host" and a "worker
host"), shapes the PS host's egress to ``link`` with hostctl itself, colocates
the parameter servers of ``jobs`` PS-style jobs on the PS host, and runs the
same jobs once per policy with a real hostctl daemon. Prints the job completion
times side by side and writes them as JSON. Everything it creates is removed at
the end, also on Ctrl-C or an error.
"""

from __future__ import annotations

import atexit
import json
import os
import signal
import statistics
import subprocess
import sys
import time
import uuid

from hostctl.errors import HostctlError

HOSTCTL = os.path.join(sys.prefix, "bin", "hostctl")


def _sh(*cmd: str, check: bool = True) -> subprocess.CompletedProcess:
    return subprocess.run(cmd, check=check, capture_output=True, text=True)


class Cluster:
    def __init__(self) -> None:
        tag = uuid.uuid4().hex[:6]
        self.ps, self.wk = f"hcdemo-{tag}-ps", f"hcdemo-{tag}-wk"
        self.ps_dev, self.wk_dev = f"hdp{tag}", f"hdw{tag}"
        self.ps_addr, self.wk_addr = "10.78.0.1", "10.78.0.2"
        self.procs: list[subprocess.Popen] = []
        self.made: list[str] = []

    def up(self) -> None:
        for ns in (self.ps, self.wk):
            self.made.append(ns)  # recorded before creation: removal is attempted even if this fails
            _sh("ip", "netns", "add", ns)
        _sh("ip", "link", "add", self.ps_dev, "netns", self.ps, "type", "veth", "peer", "name", self.wk_dev,
            "netns", self.wk)
        for ns, dev, addr in ((self.ps, self.ps_dev, self.ps_addr), (self.wk, self.wk_dev, self.wk_addr)):
            _sh("ip", "netns", "exec", ns, "ip", "addr", "add", f"{addr}/24", "dev", dev)
            _sh("ip", "netns", "exec", ns, "ip", "link", "set", dev, "up")
            _sh("ip", "netns", "exec", ns, "ip", "link", "set", "lo", "up")

    def start(self, ns: str, *args: str) -> subprocess.Popen:
        p = subprocess.Popen(["ip", "netns", "exec", ns, *args], stdout=subprocess.PIPE,
                             stderr=subprocess.PIPE, text=True)
        self.procs.append(p)
        return p

    def hostctl(self, *args: str) -> subprocess.CompletedProcess:
        return _sh("ip", "netns", "exec", self.ps, HOSTCTL, *args, check=False)

    def down(self) -> None:
        for p in reversed(self.procs):
            if p.poll() is None:
                p.terminate()
                try:
                    p.wait(5)
                except subprocess.TimeoutExpired:
                    p.kill()
        self.procs.clear()
        for ns in self.made:
            _sh("ip", "netns", "del", ns, check=False)
        self.made.clear()


def _wait_ready(c: Cluster, daemon: subprocess.Popen, njobs: int, timeout: float = 30) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if daemon.poll() is not None:
            raise HostctlError(f"hostctl daemon exited: {daemon.stderr.read().strip()}")
        r = c.hostctl("status", "--json")
        if r.returncode == 0 and len(json.loads(r.stdout).get("jobs", [])) == njobs:
            return
        time.sleep(0.2)
    raise HostctlError("hostctl daemon did not become ready within 30 s")


def run_demo(jobs: int = 3, workers: int = 2, iterations: int = 8, model_mib: float = 4.0,
             compute_s: float = 0.2, link: str = "200mbit", policies: tuple[str, ...] = ("fifo", "one", "rr"),
             rr_interval_s: float = 2.0, out: str | None = "results/demo.json",
             echo=print) -> dict:
    if os.geteuid() != 0:
        raise HostctlError("the demo builds network namespaces: run it as root")
    model_bytes = int(model_mib * 1024 * 1024)
    c = Cluster()
    atexit.register(c.down)
    old = signal.signal(signal.SIGTERM, lambda *_: (_ for _ in ()).throw(KeyboardInterrupt()))
    results: dict = {"params": {"jobs": jobs, "workers": workers, "iterations": iterations,
                                "model_bytes": model_bytes, "compute_s": compute_s, "link": link,
                                "rr_interval_s": rr_interval_s}, "policies": {}}
    try:
        c.up()
        ports = [7001 + j for j in range(jobs)]
        for p in ports:
            c.start(c.ps, sys.executable, "-m", "hostctl.tools.psjob", "serve", "--bind", c.ps_addr,
                    "--port", str(p), "--model-bytes", str(model_bytes))
        echo(f"emulated cluster: PS host {c.ps} ({link} egress) with {jobs} colocated parameter servers, "
             f"worker host {c.wk}; {workers} workers/job, {iterations} iterations, {model_mib:g} MiB model, "
             f"{compute_s * 1000:.0f} ms compute")
        for policy in policies:
            daemon = c.start(c.ps, HOSTCTL, "start", "--policy", policy, "--iface", c.ps_dev, "--link-rate", link,
                             "--ports", f"{ports[0]}-{ports[-1]}", "--rr-interval", str(rr_interval_s),
                             "--rescan", "0.5", "--log-level", "WARNING")
            _wait_ready(c, daemon, jobs)
            runs = [c.start(c.wk, sys.executable, "-m", "hostctl.tools.psjob", "work", "--connect",
                            f"{c.ps_addr}:{p}", "--workers", str(workers), "--iterations", str(iterations),
                            "--compute", str(compute_s), "--model-bytes", str(model_bytes)) for p in ports]
            per_job = {}
            for p, r in zip(ports, runs):
                outp, err = r.communicate(timeout=600)
                if r.returncode != 0:
                    raise HostctlError(f"job on port {p} failed: {err.strip()}")
                per_job[f"ps:{c.ps_addr}:{p}"] = json.loads(outp)
            stop = c.hostctl("stop")
            daemon.wait(15)
            if stop.returncode != 0:
                raise HostctlError(f"hostctl stop failed: {stop.stderr.strip()}")
            jcts = [v["jct_s"] for v in per_job.values()]
            stds = [s for v in per_job.values() for s in v["barrier_wait_std_s"]]
            results["policies"][policy] = {
                "jobs": per_job, "avg_jct_s": statistics.fmean(jcts), "max_jct_s": max(jcts),
                "min_jct_s": min(jcts), "barrier_wait_std_mean_s": statistics.fmean(stds)}
            echo(f"  {policy:4s}: average JCT {statistics.fmean(jcts):6.2f} s  "
                 f"(jobs: {', '.join(f'{j:.2f}' for j in sorted(jcts))})")
    finally:
        c.down()
        atexit.unregister(c.down)
        signal.signal(signal.SIGTERM, old)
    base = results["policies"].get("fifo", {}).get("avg_jct_s")
    if base:
        echo("")
        echo(f"{'policy':8s}{'avg JCT':>10s}{'vs fifo':>10s}{'first job':>11s}{'last job':>10s}{'barrier-wait std':>18s}")
        for pol, r in results["policies"].items():
            echo(f"{pol:8s}{r['avg_jct_s']:9.2f}s{(r['avg_jct_s'] / base - 1) * 100:+9.1f}%"
                 f"{r['min_jct_s']:10.2f}s{r['max_jct_s']:9.2f}s{r['barrier_wait_std_mean_s'] * 1000:15.1f} ms")
    if out:
        os.makedirs(os.path.dirname(out) or ".", exist_ok=True)
        with open(out, "w") as f:
            json.dump(results, f, indent=1)
        echo(f"\nwrote {out}")
    return results
