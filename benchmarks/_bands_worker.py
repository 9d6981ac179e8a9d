"""Inner half of benchmarks/bench_bands.py: times the real LinuxDatapath.

Not meant to be run by hand: bench_bands.py starts it inside its own network
namespace (``ip netns exec NS .venv/bin/python benchmarks/_bands_worker.py ...``)
and reads the JSON it writes to --out. It only touches the interface it is given
(a veth end inside that namespace) and a private state folder (--state-dir).

For each N it measures, with the real pyroute2 + bcc datapath:
  setup      LinuxDatapath.setup(plan): htb tree + compile/load/attach the BPF classifier
  full       assign_bands + build_classifier + apply, from empty maps (an empty
             table is applied first, untimed, so every rep writes every entry)
  rotation   assign_bands(epoch e+1) + build_classifier(previous slots) + the
             daemon's "table changed?" compare + apply: one rr rotation boundary
  daemon     Daemon.reassign() itself (the code path the daemon runs, with its
             INFO log line written to a file) at successive rotation epochs
  tick       the daemon's per-second work, step by step, with N idle TCP listeners on
             127.0.0.1:10000+i opened here and a real port-spec Discovery: scan()
             (reads /proc/net/tcp{,6}), check_drift() (the tc tree read back), reassign() at a
             rotation, refresh_status(), heartbeat(); explains the daemon CPU that bench_bands.py measures
  teardown   LinuxDatapath.teardown(): restore the previous qdisc tree
Every sample records wall time (perf_counter) and the process's CPU time
(CLOCK_PROCESS_CPUTIME_ID): on a shared machine wall >> cpu means we were preempted.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import resource
import socket
import statistics
import subprocess
import sys
import time

from hostctl.config import Config, build_config
from hostctl.core.bands import assign_bands
from hostctl.core.plan import ClassifierTable, build_classifier, build_tc_plan
from hostctl.core.types import FlowKey, Job, JobSpec
from hostctl.daemon import Daemon
from hostctl.datapath.linux import LinuxDatapath
from hostctl.discovery import Discovery, read_proc_sockets

POLICY = "rr"
BANDS = 6
LINK_BPS = 1_000_000_000
OTHER_BPS = 100_000_000
BASE_PORT = 10000
BASE_EPOCH = 1_000_000  # any epoch works; rr only uses it modulo the group size


def make_jobs(n: int, flows_per_job: int) -> list[Job]:
    """n jobs of unknown (equal) model size: one rr group, so every rotation moves jobs.
    Each job listens on 10000+i and has ``flows_per_job`` client connections
    (loopback addresses, map entries only: no traffic is sent)."""
    jobs = []
    for i in range(n):
        flows = tuple(
            FlowKey("127.0.0.1", 20000 + i * flows_per_job + k, "127.0.0.2", 30000 + k)
            for k in range(flows_per_job)
        )
        jobs.append(Job(job_id=f"job{i:04d}", source="port", listen_ports=(BASE_PORT + i,),
                        flows=flows, role="both"))
    return jobs


def summarize(samples_ms: list[float]) -> dict:
    s = sorted(samples_ms)
    if not s:
        return {}
    p90 = statistics.quantiles(s, n=10, method="inclusive")[8] if len(s) > 1 else s[0]
    return {"n": len(s), "median": statistics.median(s), "p90": p90, "min": s[0], "max": s[-1],
            "mean": statistics.fmean(s)}


class Timer:
    """Wall and CPU time of a block, in ms."""

    def __enter__(self) -> "Timer":
        self.c0 = time.process_time_ns()
        self.w0 = time.perf_counter_ns()
        return self

    def __exit__(self, *exc) -> None:
        self.wall_ms = (time.perf_counter_ns() - self.w0) / 1e6
        self.cpu_ms = (time.process_time_ns() - self.c0) / 1e6


class ThreadTimer:
    """Wall, and this thread's user / system CPU (getrusage RUSAGE_THREAD), in ms."""

    def __enter__(self) -> "ThreadTimer":
        r = resource.getrusage(resource.RUSAGE_THREAD)
        self.u0, self.s0 = r.ru_utime, r.ru_stime
        self.w0 = time.perf_counter_ns()
        return self

    def __exit__(self, *exc) -> None:
        self.wall_ms = (time.perf_counter_ns() - self.w0) / 1e6
        r = resource.getrusage(resource.RUSAGE_THREAD)
        self.user_ms = (r.ru_utime - self.u0) * 1e3
        self.sys_ms = (r.ru_stime - self.s0) * 1e3


def qdisc_of(iface: str) -> str:
    out = subprocess.run(["tc", "qdisc", "show", "dev", iface], capture_output=True, text=True, check=True)
    return out.stdout.strip()


def map_counts(dp: LinuxDatapath) -> dict:
    """What the kernel maps hold (read back through bcc), to check the apply did its job."""
    c = dp.classifier
    return {
        "ports": sum(1 for _ in c.ports.keys()),
        "flows": sum(1 for _ in c.flows.keys()),
        "job_class_nonzero": sum(1 for _, v in c.job_class.items() if v.classid),
    }


class _ListDiscovery:
    def __init__(self, jobs: list[Job]) -> None:
        self.jobs = jobs

    def scan(self) -> list[Job]:
        return list(self.jobs)


def bench_ticks(iface: str, n: int, plan, dp: LinuxDatapath, reps: int) -> dict:
    """The daemon loop's steps for one 1 s rotation period, timed one by one."""
    socks = []
    try:
        for i in range(n):
            s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            s.bind(("127.0.0.1", BASE_PORT + i))
            s.listen(4)
            socks.append(s)
        ports = f"{BASE_PORT}-{BASE_PORT + n - 1}" if n > 1 else str(BASE_PORT)
        cfg = build_config(None, policy=POLICY, iface=iface, link_rate="1gbit", ports=ports, rr_interval=1.0,
                           bands=BANDS)
        clock = [float(BASE_EPOCH) + 0.5]
        d = Daemon(cfg, plan, dp, Discovery(list(cfg.jobs), iface), wall=lambda: clock[0])
        d.scan()
        d.reassign()
        d.refresh_status()
        steps = {
            "scan": d.scan,
            "reassign_rotation": d.reassign,
            "refresh_status": d.refresh_status,
            "heartbeat": dp.heartbeat,
            "check_drift": lambda: d.check_drift(d.mono()),  # the tc tree read back (nothing changed)
            # parts of the above
            "read_proc_net_tcp_raw": lambda: [open(p).read() for p in ("/proc/net/tcp", "/proc/net/tcp6")],
            "read_proc_sockets": read_proc_sockets,
            "read_counters": lambda: dp.read_counters(set(d.table.slots.values())),
        }
        out: dict = {"jobs_found": len(d.jobs)}
        for name, fn in steps.items():
            wall, user, sys_ = [], [], []
            for _ in range(reps):
                clock[0] += 1.0  # every reassign is at a new rotation epoch
                with ThreadTimer() as t:
                    fn()
                wall.append(t.wall_ms)
                user.append(t.user_ms)
                sys_.append(t.sys_ms)
            out[name] = {"wall": summarize(wall), "user_mean": statistics.fmean(user),
                         "sys_mean": statistics.fmean(sys_)}
        out["rotations"] = d.stats.rotations
        assert d.stats.reconciliations == 0  # the check found the tree as set up
        # what one second of the daemon costs: 1 scan and its tc tree check, 1 reassign (a rotation), 1 status,
        # 2 heartbeats
        per_s = ["scan", "check_drift", "reassign_rotation", "refresh_status", "heartbeat", "heartbeat"]
        out["est_ms_per_second_wall"] = sum(out[k]["wall"]["median"] for k in per_s)
        out["est_ms_per_second_cpu"] = sum(out[k]["user_mean"] + out[k]["sys_mean"] for k in per_s)
        return out
    finally:
        for s in socks:
            s.close()


def bench_n(iface: str, n: int, reps_full: int, reps_rot: int, flows_per_job: int, state_dir: str,
            tick_reps: int) -> dict:
    plan = build_tc_plan(iface, LINK_BPS, BANDS, OTHER_BPS, True)
    jobs = make_jobs(n, flows_per_job)
    sizes = {j.job_id: j.model_bytes for j in jobs}
    res: dict = {"jobs": n, "flows_per_job": flows_per_job, "reps_full": reps_full, "reps_rotation": reps_rot}
    res["qdisc_before"] = qdisc_of(iface)
    dp = LinuxDatapath(iface, policy=POLICY, state_dir=state_dir)
    try:
        with Timer() as t:
            dp.setup(plan)
        res["setup_ms"], res["setup_cpu_ms"] = t.wall_ms, t.cpu_ms

        # -- full assignment from empty maps --------------------------------------
        full = {"total": [], "cpu": [], "assign": [], "build": [], "apply": [], "clear": []}
        writes_full = []
        table = ClassifierTable()
        for rep in range(reps_full + 1):  # rep 0 is the cold one, right after setup
            with Timer() as tc:
                dp.apply(ClassifierTable())  # empty the maps: the next apply writes everything
            with Timer() as tt:
                t0 = time.perf_counter_ns()
                assignment = assign_bands(sizes, POLICY, BANDS, BASE_EPOCH)
                t1 = time.perf_counter_ns()
                table = build_classifier(jobs, assignment)
                t2 = time.perf_counter_ns()
                w = dp.apply(table)
                t3 = time.perf_counter_ns()
            if rep == 0:
                res["full_cold_ms"] = tt.wall_ms
                res["full_cold_writes"] = w
                continue
            full["total"].append(tt.wall_ms)
            full["cpu"].append(tt.cpu_ms)
            full["assign"].append((t1 - t0) / 1e6)
            full["build"].append((t2 - t1) / 1e6)
            full["apply"].append((t3 - t2) / 1e6)
            full["clear"].append(tc.wall_ms)
            writes_full.append(w)
        res["map_check_after_full"] = map_counts(dp)
        res["expected_after_full"] = {"ports": n, "flows": n * flows_per_job,
                                      "job_class_nonzero": len(assignment)}
        res["full_ms"] = {k: summarize(v) for k, v in full.items()}
        res["full_writes"] = {"median": statistics.median(writes_full), "max": max(writes_full)}
        res["full_samples_ms"] = [round(x, 4) for x in full["total"]]

        # -- rotations: what the daemon does at a boundary -------------------------
        rot = {"total": [], "cpu": [], "assign": [], "build": [], "compare": [], "apply": []}
        writes_rot = []
        for r in range(1, reps_rot + 1):
            epoch = BASE_EPOCH + r
            with Timer() as tt:
                t0 = time.perf_counter_ns()
                assignment = assign_bands(sizes, POLICY, BANDS, epoch)
                t1 = time.perf_counter_ns()
                new = build_classifier(jobs, assignment, table.slots)
                t2 = time.perf_counter_ns()
                same = new == table
                t3 = time.perf_counter_ns()
                w = dp.apply(new) if not same else 0
                t4 = time.perf_counter_ns()
            table = new
            rot["total"].append(tt.wall_ms)
            rot["cpu"].append(tt.cpu_ms)
            rot["assign"].append((t1 - t0) / 1e6)
            rot["build"].append((t2 - t1) / 1e6)
            rot["compare"].append((t3 - t2) / 1e6)
            rot["apply"].append((t4 - t3) / 1e6)
            writes_rot.append(w)
        res["rotation_ms"] = {k: summarize(v) for k, v in rot.items()}
        res["rotation_writes"] = {"median": statistics.median(writes_rot), "min": min(writes_rot),
                                  "max": max(writes_rot)}
        res["rotation_samples_ms"] = [round(x, 4) for x in rot["total"]]

        # -- the same through Daemon.reassign (incl. its log line) ------------------
        cfg = Config(policy=POLICY, bands=BANDS, rr_interval_s=1.0,
                     jobs=(JobSpec(ports=tuple(BASE_PORT + i for i in range(n))),))
        clock = [float(BASE_EPOCH + reps_rot + 1) + 0.5]
        daemon = Daemon(cfg, plan, dp, _ListDiscovery(jobs), wall=lambda: clock[0])
        daemon.jobs = {j.job_id: j for j in jobs}
        daemon.table = table  # the maps hold exactly this table now
        daemon.epoch = BASE_EPOCH + reps_rot
        daemon.assignment = assign_bands(sizes, POLICY, BANDS, daemon.epoch)
        dsamples, dcpu = [], []
        for r in range(reps_rot):
            clock[0] += 1.0
            with Timer() as tt:
                daemon.reassign()
            dsamples.append(tt.wall_ms)
            dcpu.append(tt.cpu_ms)
        res["daemon_reassign_ms"] = summarize(dsamples)
        res["daemon_reassign_cpu_ms"] = summarize(dcpu)
        res["daemon_reassign_rotations"] = daemon.stats.rotations
        res["daemon_reassign_errors"] = daemon.stats.errors
        table = daemon.table

        if tick_reps:
            res["tick_ms"] = bench_ticks(iface, n, plan, dp, tick_reps)
    finally:
        with Timer() as t:
            dp.teardown()
        dp.close()
    res["teardown_ms"], res["teardown_cpu_ms"] = t.wall_ms, t.cpu_ms
    res["qdisc_after"] = qdisc_of(iface)
    res["qdisc_restored"] = res["qdisc_after"] == res["qdisc_before"]
    return res


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--iface", required=True)
    ap.add_argument("--jobs", default="1,8,64,256")
    ap.add_argument("--reps-full", type=int, default=50)
    ap.add_argument("--reps-rotation", type=int, default=200)
    ap.add_argument("--flows-per-job", type=int, default=4)
    ap.add_argument("--tick-reps", type=int, default=40)
    ap.add_argument("--state-dir", required=True)
    ap.add_argument("--log", required=True, help="file for the Daemon.reassign log lines")
    ap.add_argument("--out", required=True)
    a = ap.parse_args()

    handler = logging.FileHandler(a.log)
    handler.setFormatter(logging.Formatter("%(asctime)s hostctl %(levelname)s %(message)s"))
    logging.getLogger("hostctl").addHandler(handler)
    logging.getLogger("hostctl").setLevel(logging.INFO)

    netns = os.readlink("/proc/self/ns/net")
    results = []
    for n in (int(x) for x in a.jobs.split(",")):
        print(f"worker: N={n} ...", file=sys.stderr, flush=True)
        results.append(bench_n(a.iface, n, a.reps_full, a.reps_rotation, a.flows_per_job, a.state_dir,
                               a.tick_reps))
    with open(a.out, "w") as f:
        json.dump({"netns": netns, "results": results}, f)


if __name__ == "__main__":
    main()
