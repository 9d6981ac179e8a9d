"""Soak: the daemon for a long run while jobs arrive and leave every few seconds; does anything grow?

    sudo .venv/bin/python benchmarks/soak.py --policy rr --minutes 30 --out docs/results/soak/rr
    sudo .venv/bin/python benchmarks/soak.py --policy mlcc --minutes 30 --out docs/results/soak/mlcc

Two network namespaces joined by a veth: "ps" runs the daemon (``hostctl start``, 1 Gbit/s link rate,
jobs by port in 20000-20999, 1 s rescan; rr rotating every 2 s; mlcc with a real switchemu over ipc
and the pacer on a fresh cgroup) and the jobs' servers; "wk" runs their clients. A job arrives every
few seconds (exponential, mean --arrival-s) and lives 10-40 s: a listener that sends a model update
of 64-512 KiB to each of its 1-3 connections every 0.2-1.0 s of the wall clock (real TCP), so flows
start and end, rotations and slots run. Every --sample-s seconds: the daemon's RSS, open fds,
threads and CPU, the lines it logged, its status (jobs, flows, classifier and pacing entries,
errors, slot overruns, the garbage collector's longest pause) and the entries of its BPF hash maps
(bpftool). The summary takes each series' growth over the run after --warmup-min minutes (a
least-squares slope, per hour) against its level, and the RSS slope over the second half alone
(does it level off?). At the end:
the daemon stopped with ``hostctl stop``; the interface's qdiscs, hostctl's bpffs folder and the
cgroup's attached programs compared with before it started (they must be equal).

Writes OUT/soak.json (the timeline and the summary) and OUT/soak.png.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import secrets
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
BIN = Path(sys.executable).parent
HOSTCTL = str(BIN / "hostctl")
SWITCHEMU = str(BIN / "switchemu")
PORTS = (20000, 20999)
HASH_MAPS = ("hc_flows", "hc_ports", "hc_remotes", "hc_pace_flows", "hc_rates", "hc_sel_flows", "hc_sel_ports",
             "hc_sel_remotes")
CLK_TCK = os.sysconf("SC_CLK_TCK")


def sh(*argv: str, check: bool = True, **kw) -> subprocess.CompletedProcess:
    return subprocess.run(argv, capture_output=True, text=True, check=check, **kw)


class Soak:
    def __init__(self, a: argparse.Namespace) -> None:
        self.a = a
        tag = secrets.token_hex(3)
        self.ns = {"ps": f"hcsoak-{tag}-ps", "wk": f"hcsoak-{tag}-wk"}
        self.dev = {"ps": f"hcs{tag}p", "wk": f"hcs{tag}w"}
        self.addr = {"ps": "10.66.0.1", "wk": "10.66.0.2"}
        self.tmp = Path(tempfile.mkdtemp(prefix="hcsoak-"))
        self.procs: list[subprocess.Popen] = []
        self.cgroup: str | None = None
        self.daemon: subprocess.Popen | None = None

    # -- the sandbox ---------------------------------------------------------------------
    def nsenter(self, side: str, *argv: str) -> list[str]:
        return ["nsenter", f"--net=/run/netns/{self.ns[side]}", *argv]  # keeps /sys: cgroup2 and bpffs

    def setup(self) -> None:
        for side in ("ps", "wk"):
            sh("ip", "netns", "add", self.ns[side])
        sh("ip", "link", "add", self.dev["ps"], "netns", self.ns["ps"], "type", "veth", "peer", "name",
           self.dev["wk"], "netns", self.ns["wk"])
        for side in ("ps", "wk"):
            sh("ip", "-n", self.ns[side], "addr", "add", f"{self.addr[side]}/24", "dev", self.dev[side])
            for dev in ("lo", self.dev[side]):
                sh("ip", "-n", self.ns[side], "link", "set", dev, "up")
        if self.a.policy == "mlcc":
            from hostctl.datapath.pacer import cgroup2_root

            self.cgroup = os.path.join(cgroup2_root(), f"hcsoak-{self.ns['ps'][7:13]}")
            os.mkdir(self.cgroup)

    def state(self) -> dict:
        """What must be the same before the daemon starts and after it stops."""
        pins = None
        if self.cgroup:  # the pacer's pins for this cgroup (other hostctl runs on the machine have their own)
            from hostctl.datapath.pacer import bpffs_root, scope_id

            root = bpffs_root()
            pins = Path(root, "hostctl", scope_id(self.cgroup)) if root else None
        return {"qdiscs": sh("tc", "-n", self.ns["ps"], "qdisc", "show", "dev", self.dev["ps"]).stdout.strip(),
                "ingress": sh("tc", "-n", self.ns["ps"], "filter", "show", "dev", self.dev["ps"], "ingress").stdout,
                "links": sorted(ln.split(":")[1].strip() for ln in sh("ip", "-n", self.ns["ps"], "-o", "link").stdout
                                .splitlines()),
                "bpffs": sorted(p.name for p in pins.iterdir()) if pins is not None and pins.is_dir() else [],
                "cgroup_progs": sh("bpftool", "cgroup", "show", self.cgroup, check=False).stdout.strip()
                if self.cgroup else ""}

    def start(self, side: str, argv: list[str], cgroup: str | None = None, **kw) -> subprocess.Popen:
        if cgroup:  # the process puts itself in the cgroup, then runs argv (its sockets are paced)
            argv = ["sh", "-c", f'echo $$ > {cgroup}/cgroup.procs && exec "$@"', "sh", *argv]
        p = subprocess.Popen(self.nsenter(side, *argv), **kw)
        self.procs.append(p)
        return p

    def cleanup(self) -> None:
        for p in reversed(self.procs):  # ours only, by PID
            if p.poll() is None:
                p.kill()
                p.wait(10)
        for side in ("ps", "wk"):
            for pid in sh("ip", "netns", "pids", self.ns[side], check=False).stdout.split():
                try:
                    os.kill(int(pid), 9)  # (only processes in the namespaces this run made)
                except (ProcessLookupError, ValueError):
                    pass
            sh("ip", "netns", "del", self.ns[side], check=False)
        if self.cgroup and os.path.isdir(self.cgroup):
            os.rmdir(self.cgroup)
        shutil.rmtree(self.tmp, ignore_errors=True)

    # -- the daemon ----------------------------------------------------------------------
    def start_daemon(self) -> None:
        probe = os.environ.get("HC_SOAK_DAEMON")  # another command for `hostctl` (benchmarks/_daemon_probe.py)
        args = [*(probe.split() if probe else [HOSTCTL]), "start", "--policy", self.a.policy, "--iface", self.dev["ps"], "--link-rate", "1gbit",
                "--ports", f"{PORTS[0]}-{PORTS[1]}", "--rescan", "1"]
        if self.a.policy == "rr":
            args += ["--rr-interval", "2"]
        if self.a.policy == "mlcc":
            topo = self.tmp / "topo.toml"
            topo.write_text(f'[[switch]]\nname = "sw0"\nhosts = {{count = 2, prefix = "h", first_addr = '
                            f'"{self.addr["ps"]}"}}\nhost_rate = "1gbit"\n')
            ep = f"ipc://{self.tmp}/sw.sock"
            self.switch = self.start("ps", [SWITCHEMU, "--bind", ep, "--topology", str(topo), "--log-level",
                                            "WARNING"], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
            args += ["--cgroup", self.cgroup, "--switch", ep]
        self.log = open(self.tmp / "daemon.log", "w")
        self.daemon = self.start("ps", args, stdout=subprocess.DEVNULL, stderr=self.log)
        deadline = time.monotonic() + 60
        while self.status() is None:
            if self.daemon.poll() is not None or time.monotonic() > deadline:
                raise SystemExit(f"soak: the daemon did not start: {(self.tmp / 'daemon.log').read_text()[-2000:]}")
            time.sleep(0.2)

    def status(self) -> dict | None:
        r = sh(*self.nsenter("ps", HOSTCTL, "status", "--json"), check=False, timeout=30)
        return json.loads(r.stdout) if r.returncode == 0 else None

    # -- one sample ----------------------------------------------------------------------
    def sample(self, t0: float) -> dict:
        pid = self.daemon.pid
        with open(f"/proc/{pid}/stat") as f:
            stat = f.read().rsplit(")", 1)[1].split()
        proc = dict(ln.split(":", 1) for ln in open(f"/proc/{pid}/status").read().splitlines() if ":" in ln)
        st = self.status() or {}
        pc = st.get("pacing") or {}
        stats = st.get("stats") or {}
        s = {"t_s": time.monotonic() - t0, "rss_kib": int(proc["VmRSS"].split()[0]),
             # RSS split: anonymous (Python's and C's heaps, thread stacks) and file-backed (shared libraries
             # paged in: bcc's LLVM is 44 MiB of it)
             "rss_anon_kib": int(proc.get("RssAnon", "0 kB").split()[0]),
             "rss_file_kib": int(proc.get("RssFile", "0 kB").split()[0]),
             "fds": len(os.listdir(f"/proc/{pid}/fd")), "threads": int(proc["Threads"]),
             "cpu_s": (int(stat[11]) + int(stat[12])) / CLK_TCK,
             "log_lines": sum(1 for _ in open(self.tmp / "daemon.log", "rb")),
             "jobs": len(st.get("jobs", [])), "job_flows": sum(len(j["flows"]) for j in st.get("jobs", [])),
             "pacing_flows": len(pc.get("flows", []) or []), "maps": self.map_entries(),
             # errors, the slot loop's timing and the garbage collector's pauses (hostctl/memory.py)
             **{k: stats.get(k) for k in ("errors", "slots", "slot_overruns", "gc_collections", "gc_max_ms",
                                          "gc_full_ms")}}
        return s

    def map_entries(self) -> dict[str, int]:
        """Entries of the daemon's BPF hash maps: the maps its own fds hold (/proc/PID/fdinfo: map_id),
        dumped with bpftool (other hostctl runs on the machine have maps of the same names)."""
        pid = self.daemon.pid
        ids = set()
        for fd in os.listdir(f"/proc/{pid}/fd"):
            try:
                if os.readlink(f"/proc/{pid}/fd/{fd}") != "anon_inode:bpf-map":
                    continue
                with open(f"/proc/{pid}/fdinfo/{fd}") as f:
                    ids.update(int(ln.split()[1]) for ln in f if ln.startswith("map_id:"))
            except OSError:
                continue  # an fd closed meanwhile
        out: dict[str, int] = {}
        for m in json.loads(sh("bpftool", "-j", "map", "show", check=False).stdout or "[]"):
            if m.get("id") in ids and m.get("name") in HASH_MAPS:
                d = sh("bpftool", "-j", "map", "dump", "id", str(m["id"]), check=False)
                out[m["name"]] = out.get(m["name"], 0) + len(json.loads(d.stdout or "[]"))
        return out


def summarize(samples: list[dict], warmup_s: float) -> dict:
    """Each series after the warm-up: first, last, min, max and its least-squares slope per hour."""
    after = [s for s in samples if s["t_s"] >= warmup_s]
    if len(after) < 3:
        return {"error": "too few samples after the warm-up"}

    def slope(xs, ys):
        mx, my = sum(xs) / len(xs), sum(ys) / len(ys)
        den = sum((x - mx) ** 2 for x in xs)
        return sum((x - mx) * (y - my) for x, y in zip(xs, ys)) / den * 3600 if den else 0.0

    t = [s["t_s"] for s in after]
    series = {k: [s.get(k, 0) for s in after] for k in ("rss_kib", "rss_anon_kib", "rss_file_kib", "fds", "threads",
                                                         "log_lines", "jobs", "job_flows")}
    series["map_entries"] = [sum(s["maps"].values()) for s in after]
    out = {k: {"first": v[0], "last": v[-1], "min": min(v), "max": max(v), "slope_per_h": slope(t, v)}
           for k, v in series.items()}
    dt = after[-1]["t_s"] - after[0]["t_s"]
    out["cpu_pct_core"] = (after[-1]["cpu_s"] - after[0]["cpu_s"]) / dt * 100 if dt else None
    out["log_lines_per_h"] = (after[-1]["log_lines"] - after[0]["log_lines"]) / dt * 3600 if dt else None
    out["rss_growth_mib_per_h"] = out["rss_kib"]["slope_per_h"] / 1024
    half = after[len(after) // 2:]  # levelling off: the slope over the second half alone
    out["rss_growth_mib_per_h_second_half"] = slope([s["t_s"] for s in half], [s["rss_kib"] for s in half]) / 1024
    a, b = after[0], after[-1]
    if b.get("slots") is not None and a.get("slots") is not None and b["slots"] > a["slots"]:
        out["slot_overruns_per_1000"] = (b["slot_overruns"] - a["slot_overruns"]) / (b["slots"] - a["slots"]) * 1000
    if b.get("gc_max_ms") is not None:
        out["gc_max_ms"], out["gc_full_ms"] = b["gc_max_ms"], b["gc_full_ms"]
    return out


def plot(samples: list[dict], out: Path, title: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    t = [s["t_s"] / 60 for s in samples]
    cpu = [0.0] + [(b["cpu_s"] - a["cpu_s"]) / max(1e-9, b["t_s"] - a["t_s"]) * 100 for a, b in zip(samples, samples[1:])]
    panels = [("RSS (MiB)", [s["rss_kib"] / 1024 for s in samples]), ("open fds", [s["fds"] for s in samples]),
              ("CPU (% of a core)", cpu), ("BPF hash map entries", [sum(s["maps"].values()) for s in samples]),
              ("jobs / their flows", None), ("log lines", [s["log_lines"] for s in samples])]
    fig, axs = plt.subplots(3, 2, figsize=(11, 8), sharex=True)
    for ax, (name, ys) in zip(axs.flat, panels):
        if ys is None:
            ax.plot(t, [s["jobs"] for s in samples], label="jobs")
            ax.plot(t, [s["job_flows"] for s in samples], label="flows")
            ax.legend()
        else:
            ax.plot(t, ys)
        ax.set_title(name)
        ax.set_ylim(bottom=0)
    for ax in axs[-1]:
        ax.set_xlabel("minutes")
    fig.suptitle(title)
    fig.tight_layout()
    fig.savefig(out, dpi=110)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--policy", choices=("rr", "mlcc"), default="rr")
    ap.add_argument("--minutes", type=float, default=30.0)
    ap.add_argument("--warmup-min", type=float, default=None, help="default: a fifth of the run, at most 5")
    ap.add_argument("--sample-s", type=float, default=10.0)
    ap.add_argument("--arrival-s", type=float, default=3.0, help="mean time between job arrivals")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--out", default="docs/results/soak")
    a = ap.parse_args()
    if os.geteuid() != 0:
        raise SystemExit("soak: needs root (namespaces, tc, BPF)")
    if a.minutes <= 0 or a.sample_s <= 0 or a.arrival_s <= 0:
        raise SystemExit("soak: --minutes, --sample-s and --arrival-s must be positive")
    warmup_s = 60 * (a.warmup_min if a.warmup_min is not None else min(5.0, a.minutes / 5))
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))  # the cleanup below runs on a SIGTERM too
    rng = random.Random(a.seed)
    revision = sh("git", "-C", str(REPO), "rev-parse", "--short", "HEAD", check=False).stdout.strip()  # the daemon's code
    sk = Soak(a)
    samples: list[dict] = []
    jobs_started = 0
    try:
        sk.setup()
        before = sk.state()
        sk.start_daemon()
        env = {**os.environ, "PYTHONPATH": str(REPO)}
        side = {name: sk.start(name, [sys.executable, str(HERE / "_soak_side.py"), name, sk.addr["ps"]],
                               cgroup=sk.cgroup if name == "ps" else None, stdin=subprocess.PIPE,
                               stdout=subprocess.PIPE, text=True, env=env) for name in ("ps", "wk")}

        def cmd(name: str, line: str) -> None:
            side[name].stdin.write(line + "\n")
            side[name].stdin.flush()
            assert side[name].stdout.readline().strip() == "ok", f"{name} side: {line}"

        t0 = time.monotonic()
        end = t0 + 60 * a.minutes
        next_job, next_sample = t0, t0
        free = list(range(PORTS[0], PORTS[1] + 1))
        rng.shuffle(free)
        live: list[tuple[float, int]] = []  # (leaves at, port)
        while (now := time.monotonic()) < end:
            for leave, port in [x for x in live if x[0] <= now]:
                cmd("ps", f"close {port}")
                live.remove((leave, port))
                free.append(port)
            if now >= next_job:
                port = free.pop(0)
                life = rng.uniform(10, 40)
                cmd("ps", f"open {port} {rng.choice((64, 128, 256, 512)) * 1024} {rng.uniform(0.2, 1.0):.2f}")
                cmd("wk", f"connect {port} {rng.randint(1, 3)} {life - 1:.1f}")
                live.append((now + life, port))
                jobs_started += 1
                next_job = now + rng.expovariate(1 / a.arrival_s)
            if now >= next_sample:
                samples.append(sk.sample(t0))
                s = samples[-1]
                print(f"{s['t_s'] / 60:5.1f} min: rss {s['rss_kib'] / 1024:.1f} MiB, fds {s['fds']}, jobs {s['jobs']}, "
                      f"flows {s['job_flows']}, map entries {sum(s['maps'].values())}, log {s['log_lines']}, "
                      f"cpu {s['cpu_s']:.1f} s", flush=True)
                next_sample += a.sample_s
            if sk.daemon.poll() is not None:
                raise SystemExit(f"soak: the daemon died: {(sk.tmp / 'daemon.log').read_text()[-3000:]}")
            time.sleep(0.05)
        for _, port in live:
            cmd("ps", f"close {port}")
        for name in ("ps", "wk"):
            side[name].stdin.write("quit\n")
            side[name].stdin.flush()
            side[name].wait(30)
        stop = sh(*sk.nsenter("ps", HOSTCTL, "stop"), check=False, timeout=60)
        rc = sk.daemon.wait(60)
        if a.policy == "mlcc":
            sk.switch.terminate()
            sk.switch.wait(10)
        time.sleep(0.5)
        after = sk.state()
        log_text = (sk.tmp / "daemon.log").read_text()
        report = {
            "policy": a.policy, "minutes": a.minutes, "warmup_s": warmup_s, "sample_s": a.sample_s,
            "jobs_started": jobs_started, "seed": a.seed, "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
            "revision": revision,
            "summary": summarize(samples, warmup_s),
            "stop": {"hostctl_stop_rc": stop.returncode, "daemon_rc": rc, "restored": before == after,
                     "before": before, "after": after},
            "log_warnings": len(warned := [ln for ln in log_text.splitlines() if " WARNING " in ln or ln.startswith("<4>")]),
            "log_errors": len(erred := [ln for ln in log_text.splitlines() if " ERROR " in ln or ln.startswith("<3>")]),
            "log_problem_lines": (warned + erred)[:50],  # what they said (the log itself goes with the tmp dir)
            "tracebacks": log_text.count("Traceback"),
            "samples": samples,
        }
        out = Path(a.out)
        out.mkdir(parents=True, exist_ok=True)
        (out / "soak.json").write_text(json.dumps(report, indent=1))
        plot(samples, out / "soak.png", f"hostctl soak: policy {a.policy}, {jobs_started} jobs in {a.minutes:g} min")
        sm = report["summary"]
        print(json.dumps({k: v for k, v in sm.items()}, indent=1))
        print(f"jobs started {jobs_started}; stop rc {stop.returncode}, daemon rc {rc}; restored exactly: "
              f"{before == after}; warnings {report['log_warnings']}, errors {report['log_errors']}, tracebacks "
              f"{report['tracebacks']}; wrote {out / 'soak.json'}")
        return 0 if before == after and rc == 0 and not report["tracebacks"] else 1
    finally:
        sk.cleanup()


if __name__ == "__main__":
    sys.exit(main())
