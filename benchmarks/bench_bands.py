"""Benchmark for "TensorLights priority bands": apply / rotation time and daemon CPU.

    sudo .venv/bin/python benchmarks/bench_bands.py [--quick] [--out results/bench_bands.json]

Requirement measured: for 1, 8, 64 and 256 jobs on one host, the time to apply a
full assignment and one rotation, and the daemon's CPU per minute with a 1 s
rotation (targets: a 64-job rotation <= 10 ms; the idle daemon < 1% of a core).

Everything happens in a network namespace this script creates (``hcb-<random>``)
holding one veth pair (both ends inside it). No traffic is sent anywhere: jobs are
synthetic map entries, or idle TCP listeners on 127.0.0.1 inside the namespace.
The namespace, every process started here and the temporary state folder are
removed at the end, also on an error, Ctrl-C or SIGTERM (try/finally + atexit).

Part 1 (benchmarks/_bands_worker.py, run with ``ip netns exec``): the real
LinuxDatapath (pyroute2 + bcc) on the veth, plan build_tc_plan(veth, 1 Gbit/s,
6 bands, 100 Mbit/s, classify=True); per N jobs (each listens on 10000+i and has
4 client flows, all of one unknown model size so rr rotates all of them):
setup(), a full apply from empty maps (R reps), one rr rotation (R reps over
successive epochs), Daemon.reassign() at a rotation, teardown().

Part 2: the real daemon, ``ip netns exec NS hostctl start --policy rr
--rr-interval 1 --iface veth --link-rate 1gbit --ports 10000-...`` with N idle
listeners; its CPU time (utime+stime from /proc/PID/stat, and the ns-precise sum
of /proc/PID/task/*/schedstat) over a window after a warm-up, its RSS, and the
number of "rotation" log lines; stopped with ``hostctl stop``; the veth's root
qdisc must be what it was before.

Times on a shared 2-core machine are noisy: every number is a median / p90 over
repeats, and each timed sample also records the process CPU time (wall >> cpu
means the benchmark was preempted).
"""

from __future__ import annotations

import argparse
import atexit
import datetime as dt
import json
import os
import platform
import re
import secrets
import shlex
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
VENV_BIN = Path(sys.prefix) / "bin"
WORKER = Path(__file__).resolve().parent / "_bands_worker.py"
BASE_PORT = 10000
NS_PREFIX = "hcb-"

LISTENER = r"""
import signal, socket, sys
n, base, host, max_s = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3], int(sys.argv[4])
signal.alarm(max_s)  # never outlive the benchmark by much, whatever happens to it
socks = []
for i in range(n):
    s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    s.bind((host, base + i))
    s.listen(4)
    socks.append(s)
print("ready", flush=True)
sys.stdin.read()  # until the benchmark closes our stdin (or kills us)
"""


def log(msg: str) -> None:
    print(f"[bench_bands {time.strftime('%H:%M:%S')}] {msg}", file=sys.stderr, flush=True)


def run(cmd: list[str], timeout: float = 60, check: bool = True) -> subprocess.CompletedProcess:
    return subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, check=check)


# --------------------------------------------------------------------------
# The namespace and everything started in it


class Sandbox:
    """A fresh network namespace with a veth pair, plus the processes and temp
    files of the benchmark. ``cleanup`` is idempotent and always runs."""

    def __init__(self) -> None:
        existing = set(self._netns_list())
        while True:
            suffix = secrets.token_hex(3)
            if f"{NS_PREFIX}{suffix}" not in existing:
                break
        self.ns = f"{NS_PREFIX}{suffix}"
        self.veth = f"hcb{suffix}a"  # 10 chars; both ends live only inside self.ns
        self.peer = f"hcb{suffix}b"
        self.tmp = Path(tempfile.mkdtemp(prefix="hcb-"))
        self.procs: list[subprocess.Popen] = []
        self.created = False
        self.cleaned = False

    @staticmethod
    def _netns_list() -> list[str]:
        out = run(["ip", "netns", "list"], check=False).stdout
        return [line.split()[0] for line in out.splitlines() if line.strip()]

    def create(self) -> None:
        run(["ip", "netns", "add", self.ns])
        self.created = True
        run(["ip", "-n", self.ns, "link", "add", self.veth, "type", "veth", "peer", "name", self.peer])
        for dev in ("lo", self.veth, self.peer):
            run(["ip", "-n", self.ns, "link", "set", dev, "up"])
        log(f"created netns {self.ns} with veth {self.veth} <-> {self.peer}")

    def exec_argv(self, *argv: str) -> list[str]:
        return ["ip", "netns", "exec", self.ns, *argv]

    def popen(self, argv: list[str], **kw) -> subprocess.Popen:
        p = subprocess.Popen(self.exec_argv(*argv), **kw)
        self.procs.append(p)
        return p

    def qdisc(self, dev: str | None = None) -> str:
        return run(["tc", "-n", self.ns, "qdisc", "show", "dev", dev or self.veth]).stdout.strip()

    def stop_proc(self, p: subprocess.Popen, timeout: float = 10) -> None:
        """Terminate one of our processes by its PID (SIGTERM, then SIGKILL)."""
        if p.poll() is None:
            try:
                p.terminate()
                p.wait(timeout=timeout)
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait(timeout=timeout)
        for stream in (p.stdin, p.stdout, p.stderr):
            if stream is not None:
                try:
                    stream.close()
                except OSError:
                    pass

    def cleanup(self) -> None:
        if self.cleaned:
            return
        self.cleaned = True
        for p in reversed(self.procs):
            try:
                self.stop_proc(p)
            except Exception as e:  # keep going: the namespace must go
                log(f"could not stop pid {p.pid}: {e}")
        if self.created:
            r = run(["ip", "netns", "del", self.ns], check=False)
            if r.returncode != 0 and self.ns in self._netns_list():
                log(f"WARNING: `ip netns del {self.ns}` failed: {r.stderr.strip()}")
            else:
                log(f"deleted netns {self.ns}")
        shutil.rmtree(self.tmp, ignore_errors=True)


# --------------------------------------------------------------------------
# Part 1: datapath micro-benchmark


def bench_datapath(sb: Sandbox, jobs: list[int], reps_full: int, reps_rot: int, tick_reps: int) -> dict:
    out = sb.tmp / "worker.json"
    argv = [str(VENV_BIN / "python"), str(WORKER), "--iface", sb.veth, "--jobs", ",".join(map(str, jobs)),
            "--reps-full", str(reps_full), "--reps-rotation", str(reps_rot), "--tick-reps", str(tick_reps),
            "--state-dir", str(sb.tmp / "worker-state"), "--log", str(sb.tmp / "worker-daemon.log"),
            "--out", str(out)]
    log(f"part 1: datapath timings for N={jobs} ({reps_full} full applies, {reps_rot} rotations each)")
    p = sb.popen(argv, stdin=subprocess.DEVNULL)
    rc = p.wait(timeout=1800)
    if rc != 0:
        raise RuntimeError(f"the datapath worker failed (exit {rc}); see its stderr above")
    return json.loads(out.read_text())


# --------------------------------------------------------------------------
# Part 2: the real daemon's CPU


CLK_TCK = os.sysconf("SC_CLK_TCK")


def proc_cpu_ticks(pid: int) -> tuple[int, int]:
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return int(fields[11]), int(fields[12])  # utime, stime (fields 14, 15 of proc(5))


def proc_runtime_ns(pid: int) -> int:
    """Sum over the process's threads of the on-CPU time (schedstat, ns)."""
    total = 0
    for tid in os.listdir(f"/proc/{pid}/task"):
        try:
            with open(f"/proc/{pid}/task/{tid}/schedstat") as f:
                total += int(f.read().split()[0])
        except (FileNotFoundError, ProcessLookupError):
            pass
    return total


def proc_rss_kib(pid: int) -> int:
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    return 0


def wait_for(pred, timeout: float, what: str, alive: subprocess.Popen | None = None) -> None:
    deadline = time.monotonic() + timeout
    while not pred():
        if alive is not None and alive.poll() is not None:
            raise RuntimeError(f"{what}: the process exited early (rc={alive.returncode})")
        if time.monotonic() > deadline:
            raise RuntimeError(f"{what}: not within {timeout:g}s")
        time.sleep(0.1)


ROTATION_RE = re.compile(r" rotation \d+: ")


def bench_daemon(sb: Sandbox, n: int, window_s: float, warmup_s: float, profile: str, profile_s: float,
                 rr_interval: float = 1.0, rescan: float | None = None) -> dict:
    """One daemon run. rr_interval 1 and the default rescan (1 s) is the measured case; other values
    are labelled variants (``variant`` set) that show where the CPU goes."""
    variant = "" if rr_interval == 1.0 and rescan is None else \
        f"rr-interval {rr_interval:g}s" + (f", rescan {rescan:g}s" if rescan is not None else "")
    log(f"part 2: daemon with {n} jobs{' (' + variant + ')' if variant else ''}: warm-up {warmup_s:g}s, "
        f"window {window_s:g}s")
    res: dict = {"jobs": n, "variant": variant, "rr_interval_s": rr_interval, "rescan_s": rescan or 1.0,
                 "window_s": window_s, "warmup_s": warmup_s}
    listener = sb.popen([str(VENV_BIN / "python"), "-c", LISTENER, str(n), str(BASE_PORT), "127.0.0.1",
                         str(int(window_s + warmup_s + 600))],
                        stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    if listener.stdout.readline().strip() != "ready":
        raise RuntimeError("the listener process did not start")
    qdisc_before = sb.qdisc()
    logf = sb.tmp / f"daemon-{n}.log"
    env = dict(os.environ, HOSTCTL_RUN_DIR=str(sb.tmp / "run"))  # journal in our temp dir, not /run/hostctl
    ports = f"{BASE_PORT}-{BASE_PORT + n - 1}" if n > 1 else str(BASE_PORT)
    argv = [str(VENV_BIN / "hostctl"), "start", "--policy", "rr", "--rr-interval", f"{rr_interval:g}",
            "--iface", sb.veth, "--link-rate", "1gbit", "--ports", ports]
    if rescan is not None:
        argv += ["--rescan", f"{rescan:g}"]
    res["command"] = shlex.join(sb.exec_argv(*argv))
    with open(logf, "w") as lf:
        daemon = sb.popen(argv, stdin=subprocess.DEVNULL, stdout=lf, stderr=subprocess.STDOUT, env=env)
    pid = daemon.pid
    text = lambda: logf.read_text(errors="replace")  # noqa: E731
    try:
        wait_for(lambda: "controlling" in text(), 120, "daemon start", daemon)
        wait_for(lambda: "assignment:" in text() or ROTATION_RE.search(text()), 30, "first assignment", daemon)
        cmdline = Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode()
        if "hostctl" not in cmdline:  # ip netns exec must have exec'd into the daemon
            raise RuntimeError(f"pid {pid} is not the daemon: {cmdline!r}")
        time.sleep(warmup_s)

        off0 = logf.stat().st_size
        u0, s0 = proc_cpu_ticks(pid)
        r0 = proc_runtime_ns(pid)
        t0 = time.monotonic()
        per_s_ms, rss = [], []
        last_r, next_t = r0, t0 + 1.0
        while True:
            now = time.monotonic()
            if now >= t0 + window_s:
                break
            time.sleep(max(0.0, min(next_t, t0 + window_s) - now))
            if daemon.poll() is not None:
                raise RuntimeError(f"the daemon died during the window (rc={daemon.returncode})")
            r = proc_runtime_ns(pid)
            per_s_ms.append((r - last_r) / 1e6)
            last_r = r
            rss.append(proc_rss_kib(pid))
            next_t += 1.0
        u1, s1 = proc_cpu_ticks(pid)
        r1 = proc_runtime_ns(pid)
        t1 = time.monotonic()
        off1 = logf.stat().st_size
        wall = t1 - t0
        cpu_ticks_s = (u1 - u0 + s1 - s0) / CLK_TCK
        cpu_sched_s = (r1 - r0) / 1e9
        with open(logf, "rb") as f:
            f.seek(off0)
            window_log = f.read(off1 - off0).decode(errors="replace")
        res.update({
            "pid": pid,
            "wall_s": wall,
            "utime_s": (u1 - u0) / CLK_TCK, "stime_s": (s1 - s0) / CLK_TCK,
            "cpu_s_stat": cpu_ticks_s,
            "cpu_s_schedstat": cpu_sched_s,
            "cpu_pct_of_core": 100 * cpu_ticks_s / wall,
            "cpu_pct_of_core_schedstat": 100 * cpu_sched_s / wall,
            "cpu_s_per_min": 60 * cpu_ticks_s / wall,
            "cpu_s_per_min_schedstat": 60 * cpu_sched_s / wall,
            "cpu_ms_per_second": summarize(per_s_ms),
            "rss_mib": {"last": rss[-1] / 1024, "max": max(rss) / 1024} if rss else {},
            "rotations_in_window": len(ROTATION_RE.findall(window_log)),
            "expected_rotations_in_window": int(wall // rr_interval),
            "warnings_in_window": sum(1 for line in window_log.splitlines() if " WARNING " in line or " ERROR " in line),
        })
        # Profile after (never during) the measured window: py-spy costs the target a little.
        if profile == "always" or (profile == "auto" and res["cpu_pct_of_core"] >= 1.0):
            prof = start_profile(sb, pid, profile_s)
            if prof is not None:
                log(f"  profiling the daemon with py-spy for {profile_s:g}s (its CPU was "
                    f"{res['cpu_pct_of_core']:.2f}% of a core)")
                res["profile"] = finish_profile(prof)
        try:
            st = json.loads(run_env(sb.exec_argv(str(VENV_BIN / "hostctl"), "status", "--json"), env))
            res["status"] = {"jobs_seen": len(st["jobs"]), **{k: st["stats"][k] for k in
                             ("rotations", "reassignments", "errors", "scans", "scan_overruns",
                              "last_apply_ms", "map_writes")}}
        except Exception as e:
            res["status"] = {"error": str(e)}
    finally:
        t = time.monotonic()
        stop = subprocess.run(sb.exec_argv(str(VENV_BIN / "hostctl"), "stop"), capture_output=True, text=True,
                              timeout=60, env=env)
        try:
            daemon.wait(timeout=15)
        except subprocess.TimeoutExpired:
            log(f"the daemon (pid {pid}) did not exit after `hostctl stop`; killing it")
            sb.stop_proc(daemon)
        res["stop_s"] = time.monotonic() - t
        res["stop_rc"] = stop.returncode
        res["daemon_rc"] = daemon.returncode
        listener.stdin.close()
        sb.stop_proc(listener)
    full_log = logf.read_text(errors="replace")
    res["rotations_total"] = len(ROTATION_RE.findall(full_log))
    res["clean_stop_logged"] = "restored" in full_log.splitlines()[-1] if full_log.strip() else False
    res["qdisc_before"] = qdisc_before
    res["qdisc_after"] = sb.qdisc()
    res["qdisc_restored"] = res["qdisc_after"] == qdisc_before
    res["log_tail"] = full_log.splitlines()[-3:]
    if not res["qdisc_restored"]:
        log(f"WARNING: root qdisc not restored: before {qdisc_before!r}, after {res['qdisc_after']!r}")
    return res


def run_env(argv: list[str], env: dict) -> str:
    return subprocess.run(argv, capture_output=True, text=True, timeout=30, env=env, check=True).stdout


def start_profile(sb: Sandbox, pid: int, seconds: float):
    exe = VENV_BIN / "py-spy"
    if not exe.exists():
        log("--profile: py-spy is not installed in the venv (.venv/bin/pip install py-spy); skipping")
        return None
    out = sb.tmp / f"pyspy-{pid}.txt"
    # raw (collapsed stacks) output at 500 Hz; idle samples (threads waiting) are dropped by default
    p = subprocess.Popen([str(exe), "record", "--pid", str(pid), "--duration", str(max(1, int(seconds))),
                          "--rate", "500", "--format", "raw", "--output", str(out), "--nonblocking"],
                         stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    sb.procs.append(p)
    return p, out


def finish_profile(prof) -> dict:
    p, out = prof
    try:
        p.wait(timeout=120)
    except subprocess.TimeoutExpired:
        return {"error": "py-spy did not finish"}
    if not out.exists():
        return {"error": "py-spy wrote nothing"}
    by_func: dict[str, int] = {}
    total = 0
    for line in out.read_text().splitlines():
        stack, _, count = line.rpartition(" ")
        if not count.isdigit():
            continue
        c = int(count)
        total += c
        seen = set()
        for frame in stack.split(";"):
            m = re.match(r"(.*) \((.*?):\d+\)$", frame)
            name, path = (m.group(1), m.group(2)) if m else (frame, "")
            if (re.search(r"(^|/)(typer|click)/", path) or name == "<module>"
                    or (Path(path).name == "cli.py" and name in ("main", "start"))):
                continue  # the CLI wrapper frames above Daemon.run: 100% everywhere, no information
            key = f"{name} ({Path(path).name})" if path else name
            if key not in seen:  # inclusive counts
                seen.add(key)
                by_func[key] = by_func.get(key, 0) + c
    top = sorted(by_func.items(), key=lambda kv: -kv[1])[:30]
    return {"samples": total, "top_inclusive": [{"func": k, "samples": v, "pct": 100 * v / total}
                                                for k, v in top] if total else []}


# --------------------------------------------------------------------------
# Reporting


def summarize(samples: list[float]) -> dict:
    s = sorted(samples)
    if not s:
        return {}
    p90 = statistics.quantiles(s, n=10, method="inclusive")[8] if len(s) > 1 else s[0]
    return {"n": len(s), "median": statistics.median(s), "p90": p90, "min": s[0], "max": s[-1]}


def machine_info() -> dict:
    model = ""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                model = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    info = {"kernel": platform.release(), "nproc": os.cpu_count(),
            "cpus_usable": len(os.sched_getaffinity(0)), "cpu_model": model,
            "python": platform.python_version()}
    try:
        import pyroute2
        info["pyroute2"] = pyroute2.__version__
    except Exception:
        pass
    try:
        info["bcc"] = run(["dpkg-query", "-W", "-f=${Version}", "python3-bpfcc"], check=False).stdout.strip()
    except Exception:
        pass
    return info


def fmt(x: float | None, nd: int = 2) -> str:
    return "-" if x is None else f"{x:.{nd}f}"


def print_tables(report: dict) -> None:
    m = report["machine"]
    print()
    print(f"TensorLights bands benchmark  {report['date']}  kernel {m['kernel']}, {m['nproc']} cores, {m['cpu_model']}")
    print("times in ms: median / p90 (max) over the repeats; 'cpu' = process CPU time median (preemption-free)")
    hdr = (f"{'jobs':>5} {'setup':>7} {'full apply':>22} {'cpu':>7} {'writes':>6}  "
           f"{'rotation':>22} {'cpu':>7} {'writes':>6}  {'Daemon.reassign':>16} {'teardown':>8}")
    print(hdr)
    print("-" * len(hdr))
    for r in report["datapath"]["results"]:
        f, ro = r["full_ms"]["total"], r["rotation_ms"]["total"]
        print(f"{r['jobs']:>5} {r['setup_ms']:>7.0f} "
              f"{fmt(f['median'], 3):>7} / {fmt(f['p90'], 3):>6} ({fmt(f['max'], 1):>5}) "
              f"{fmt(r['full_ms']['cpu']['median'], 3):>7} {r['full_writes']['median']:>6.0f}  "
              f"{fmt(ro['median'], 3):>7} / {fmt(ro['p90'], 3):>6} ({fmt(ro['max'], 1):>5}) "
              f"{fmt(r['rotation_ms']['cpu']['median'], 3):>7} {r['rotation_writes']['median']:>6.0f}  "
              f"{fmt(r['daemon_reassign_ms']['median'], 3):>7} / {fmt(r['daemon_reassign_ms']['p90'], 3):>6} "
              f"{r['teardown_ms']:>8.1f}")
    print()
    print("rotation breakdown (median ms): assign / build_classifier / compare / apply")
    for r in report["datapath"]["results"]:
        b = r["rotation_ms"]
        print(f"{r['jobs']:>5}: {b['assign']['median']:.3f} / {b['build']['median']:.3f} / "
              f"{b['compare']['median']:.3f} / {b['apply']['median']:.3f}")
    if any("tick_ms" in r for r in report["datapath"]["results"]):
        print()
        print("daemon loop steps, in-process with N idle listeners (median wall ms; user+sys mean ms):")
        steps = ("scan", "read_proc_net_tcp_raw", "check_drift", "reassign_rotation", "refresh_status", "read_counters",
                 "heartbeat")
        print(f"{'jobs':>5} " + " ".join(f"{s:>22}" for s in steps) + f" {'est. ms per 1 s':>16}")
        for r in report["datapath"]["results"]:
            t = r.get("tick_ms")
            if not t:
                continue
            cells = [f"{t[s]['wall']['median']:8.3f} ({t[s]['user_mean'] + t[s]['sys_mean']:6.3f})" if s in t else "-"
                     for s in steps]
            print(f"{r['jobs']:>5} " + " ".join(f"{c:>22}" for c in cells) +
                  f" {t['est_ms_per_second_cpu']:>16.2f}")
    if report.get("daemon"):
        print()
        hdr = (f"{'jobs':>5} {'window s':>8} {'CPU % core':>10} {'(schedstat)':>11} {'CPU s/min':>9} "
               f"{'ms/s p90':>8} {'RSS MiB':>8} {'rotations':>10} {'qdisc ok':>8}  variant")
        print("daemon (rr, 1 s rotation, 1 s rescan unless a variant says otherwise; idle listeners):")
        print(hdr)
        print("-" * len(hdr))
        for d in report["daemon"]:
            if "error" in d:
                print(f"{d['jobs']:>5} error: {d['error']}")
                continue
            print(f"{d['jobs']:>5} {d['wall_s']:>8.1f} {d['cpu_pct_of_core']:>10.2f} "
                  f"{d['cpu_pct_of_core_schedstat']:>11.2f} {d['cpu_s_per_min']:>9.2f} "
                  f"{d['cpu_ms_per_second'].get('p90', 0):>8.1f} {d['rss_mib'].get('max', 0):>8.1f} "
                  f"{d['rotations_in_window']:>4}/{d['expected_rotations_in_window']:<5} "
                  f"{str(d['qdisc_restored']):>8}  {d.get('variant') or '-'}")
        for d in report["daemon"]:
            prof = d.get("profile")
            if prof and prof.get("top_inclusive"):
                print(f"\npy-spy profile of the daemon with {d['jobs']} jobs {d.get('variant') or ''} ({prof['samples']} non-idle samples, "
                      f"inclusive %):")
                for row in prof["top_inclusive"][:15]:
                    print(f"  {row['pct']:5.1f}%  {row['func']}")
    print()
    for k, v in report["targets"].items():
        print(f"target {k}: {v}")


def targets(report: dict) -> dict:
    out = {}
    r64 = next((r for r in report["datapath"]["results"] if r["jobs"] == 64), None)
    if r64:
        med, p90 = r64["rotation_ms"]["total"]["median"], r64["rotation_ms"]["total"]["p90"]
        out["rotation_64_jobs_le_10ms"] = {"met": p90 <= 10.0, "median_ms": med, "p90_ms": p90,
                                           "max_ms": r64["rotation_ms"]["total"]["max"]}
    ds = [d for d in report.get("daemon", []) if "cpu_pct_of_core" in d and not d.get("variant")]
    if ds:
        worst = max(ds, key=lambda d: d["cpu_pct_of_core"])
        out["idle_daemon_lt_1pct_core"] = {
            "met": all(d["cpu_pct_of_core"] < 1.0 for d in ds),
            "per_jobs": {d["jobs"]: round(d["cpu_pct_of_core"], 3) for d in ds},
            "worst_jobs": worst["jobs"]}
    return out


def plot(report: dict, path: Path) -> None:
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    rs = report["datapath"]["results"]
    ns = [r["jobs"] for r in rs]
    ds = [d for d in report.get("daemon", []) if "cpu_pct_of_core" in d and not d.get("variant")]
    fig, axes = plt.subplots(1, 2 if ds else 1, figsize=(11, 4.2) if ds else (6, 4.2), squeeze=False)
    ax = axes[0][0]
    for key, label, marker in (("full_ms", "full assignment (from empty)", "o"),
                               ("rotation_ms", "one rr rotation", "s")):
        med = [r[key]["total"]["median"] for r in rs]
        p90 = [r[key]["total"]["p90"] for r in rs]
        ax.errorbar(ns, med, yerr=[[0] * len(ns), [p - m for p, m in zip(p90, med)]], marker=marker,
                    capsize=3, label=f"{label}: median, bar to p90")
    med = [r["daemon_reassign_ms"]["median"] for r in rs]
    ax.plot(ns, med, marker="^", linestyle="--", label="rotation via Daemon.reassign (median)")
    ax.axhline(10, color="red", linestyle=":", label="10 ms (target for a 64-job rotation)")
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xticks(ns)
    ax.set_xticklabels([str(n) for n in ns])
    ax.set_xlabel("jobs on the host")
    ax.set_ylabel("time (ms)")
    ax.set_title("LinuxDatapath (pyroute2 + bcc) on a veth")
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(fontsize=7)
    if ds:
        ax = axes[0][1]
        ax.plot([d["jobs"] for d in ds], [d["cpu_pct_of_core"] for d in ds], marker="o",
                label="CPU % of one core (utime+stime)")
        ax.plot([d["jobs"] for d in ds], [d["cpu_pct_of_core_schedstat"] for d in ds], marker="x",
                linestyle="--", label="CPU % (schedstat)")
        for d, marker in zip([d for d in report["daemon"] if d.get("variant") and "cpu_pct_of_core" in d], "Dv^<>"):
            ax.plot([d["jobs"]], [d["cpu_pct_of_core"]], marker=marker, linestyle="none",
                    label=f"variant: {d['variant']}")
        ax.axhline(1.0, color="red", linestyle=":", label="target: < 1% of a core")
        ax.set_xscale("log")
        ax.set_xticks([d["jobs"] for d in ds])
        ax.set_xticklabels([str(d["jobs"]) for d in ds])
        top = max([d.get("cpu_pct_of_core", 0) for d in report["daemon"]] +
                  [d["cpu_pct_of_core_schedstat"] for d in ds] + [1.0])
        ax.set_ylim(0, top * 1.25)
        ax.set_xlabel("jobs on the host")
        ax.set_ylabel("daemon CPU (% of one core)")
        ax.set_title(f"hostctl daemon, rr every 1 s, {ds[0]['window_s']:g} s window")
        ax.grid(True, which="both", alpha=0.3)
        ax.legend(fontsize=7)
    fig.suptitle(f"TensorLights bands — {report['machine']['cpu_model']}, {report['machine']['nproc']} cores, "
                 f"kernel {report['machine']['kernel']} ({report['date'][:10]})", fontsize=9)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


# --------------------------------------------------------------------------


def parse_args() -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--quick", action="store_true",
                    help="fewer repeats, 15 s daemon windows, daemon for 8 and 64 jobs only")
    ap.add_argument("--out", default="results/bench_bands.json", help="JSON output (the PNG goes beside it)")
    ap.add_argument("--jobs", default="1,8,64,256", help="job counts for the datapath timings")
    ap.add_argument("--daemon-jobs", default=None, help="job counts for the daemon CPU runs (default 8,64,256; "
                    "--quick: 8,64); 'none' skips them")
    ap.add_argument("--variants", default=None,
                    help="extra labelled daemon runs JOBS:rr=SECONDS or JOBS:rescan=SECONDS, comma-separated "
                         "(default 64:rr=20,64:rescan=5; --quick: none; 'none' skips them)")
    ap.add_argument("--window", type=float, default=None, help="daemon CPU window, s (default 60; --quick 15)")
    ap.add_argument("--warmup", type=float, default=None, help="daemon warm-up before the window, s (default 10; --quick 5)")
    ap.add_argument("--reps-full", type=int, default=None, help="full-apply repeats per N (default 50; --quick 10)")
    ap.add_argument("--reps-rotation", type=int, default=None, help="rotation repeats per N (default 300; --quick 50)")
    ap.add_argument("--tick-reps", type=int, default=None, help="repeats of each daemon-loop step (default 40; --quick 15)")
    ap.add_argument("--plot-only", metavar="JSON", help="only redraw the PNG and tables from an existing JSON")
    ap.add_argument("--profile", choices=("auto", "always", "never"), default="auto",
                    help="sample the daemon with py-spy after its window: auto = only if it used >= 1%% of a core "
                         "(needs .venv/bin/pip install py-spy)")
    ap.add_argument("--profile-seconds", type=float, default=None, help="py-spy duration (default 30; --quick 10)")
    a = ap.parse_args()
    q = a.quick
    a.window = a.window if a.window is not None else (15.0 if q else 60.0)
    a.warmup = a.warmup if a.warmup is not None else (5.0 if q else 10.0)
    a.reps_full = a.reps_full if a.reps_full is not None else (10 if q else 50)
    a.reps_rotation = a.reps_rotation if a.reps_rotation is not None else (50 if q else 300)
    a.tick_reps = a.tick_reps if a.tick_reps is not None else (15 if q else 40)
    a.profile_seconds = a.profile_seconds if a.profile_seconds is not None else (10.0 if q else 30.0)
    if a.daemon_jobs is None:
        a.daemon_jobs = "8,64" if q else "8,64,256"
    a.jobs_list = [int(x) for x in a.jobs.split(",") if x]
    a.daemon_list = [] if a.daemon_jobs == "none" else [int(x) for x in a.daemon_jobs.split(",") if x]
    if a.variants is None:
        a.variants = "none" if q else "64:rr=20,64:rescan=5"
    a.variant_list = []
    for v in ([] if a.variants == "none" else a.variants.split(",")):
        m = re.fullmatch(r"(\d+):(rr|rescan)=([\d.]+)", v.strip())
        if not m:
            ap.error(f"bad --variants item {v!r}: write e.g. 64:rr=20 or 64:rescan=5")
        a.variant_list.append((int(m.group(1)), m.group(2), float(m.group(3))))
    return a


def main() -> int:
    a = parse_args()
    if a.plot_only:
        report = json.loads(Path(a.plot_only).read_text())
        png = Path(a.plot_only).with_suffix(".png")
        plot(report, png)
        log(f"wrote {png}")
        print_tables(report)
        return 0
    if os.geteuid() != 0:
        print("bench_bands: run as root (it creates a network namespace and loads BPF)", file=sys.stderr)
        return 2
    for tool in ("ip", "tc"):
        if shutil.which(tool) is None:
            print(f"bench_bands: `{tool}` (iproute2) is missing", file=sys.stderr)
            return 2
    out = Path(a.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    png = out.with_suffix(".png")

    def _on_signal(signum, _frame):
        raise KeyboardInterrupt(f"signal {signum}")

    signal.signal(signal.SIGINT, signal.default_int_handler)  # even if started with SIGINT ignored
    signal.signal(signal.SIGTERM, _on_signal)
    signal.signal(signal.SIGHUP, _on_signal)

    report: dict = {
        "benchmark": "bench_bands",
        "date": dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds"),
        "command": shlex.join([sys.executable, *sys.argv]),
        "machine": machine_info(),
        "loadavg_start": os.getloadavg(),
        "params": {"quick": a.quick, "jobs": a.jobs_list, "daemon_jobs": a.daemon_list,
                   "daemon_variants": [f"{n}:{k}={v:g}" for n, k, v in a.variant_list],
                   "reps_full": a.reps_full, "reps_rotation": a.reps_rotation, "tick_reps": a.tick_reps,
                   "profile": a.profile, "profile_seconds": a.profile_seconds,
                   "daemon_window_s": a.window, "daemon_warmup_s": a.warmup,
                   "plan": "build_tc_plan(veth, 1_000_000_000, 6, 100_000_000, True)",
                   "policy": "rr", "flows_per_job": 4, "model_bytes": "unknown (one rr group)"},
    }
    sb = Sandbox()
    atexit.register(sb.cleanup)
    t_start = time.monotonic()
    try:
        sb.create()
        report["netns"] = sb.ns
        report["datapath"] = bench_datapath(sb, a.jobs_list, a.reps_full, a.reps_rotation, a.tick_reps)
        report["daemon"] = []
        runs = [(n, {}) for n in a.daemon_list]
        runs += [(n, {"rr_interval": v} if k == "rr" else {"rescan": v}) for n, k, v in a.variant_list]
        for n, kw in runs:
            try:
                report["daemon"].append(bench_daemon(sb, n, a.window, a.warmup, a.profile, a.profile_seconds, **kw))
            except RuntimeError as e:
                log(f"daemon run with {n} jobs {kw or ''} failed: {e}")
                report["daemon"].append({"jobs": n, "variant": str(kw) if kw else "", "error": str(e)})
    finally:
        sb.cleanup()
    report["loadavg_end"] = os.getloadavg()
    report["duration_s"] = time.monotonic() - t_start
    report["targets"] = targets(report)
    out.write_text(json.dumps(report, indent=1))
    log(f"wrote {out}")
    try:
        plot(report, png)
        log(f"wrote {png}")
    except ImportError:
        log("matplotlib is missing (.venv/bin/pip install matplotlib==3.11.2): no plot")
    except Exception as e:  # a plotting problem must not hide the numbers
        log(f"plotting failed: {e!r}")
    print_tables(report)
    return 0


if __name__ == "__main__":
    try:
        sys.exit(main())
    except KeyboardInterrupt:
        log("interrupted; cleaned up")
        sys.exit(130)
