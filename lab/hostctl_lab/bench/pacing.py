"""Pacing benchmark: how well hostctl/bpf/hc_pace.c (through hostctl.datapath.pacer.Pacer) paces
real TCP flows, and what it costs.

    python -m hostctl_lab.bench.pacing [--out DIR] [--quick] [--repeat N]

Setup (every name unique: prefix ``hcpb-`` + random tag, all removed in ``finally``):
two network namespaces ``hcpb-TAG-rx`` / ``hcpb-TAG-tx`` joined by a veth pair (no qdisc
shaping: pacing is the only limiter), receivers in rx, senders in tx and inside a fresh
cgroup v2 directory ``<cgroup2 root>/hcpb-TAG-b`` with a Pacer attached (lease 1 s, a
heartbeat thread every 0.1 s). ``hcpb-TAG-a`` is a sibling cgroup without the program
(the unpaced baseline). Senders are iperf3 clients (data streams bound with ``--cport``,
so every 4-tuple is known before the connection exists and is selected at ESTABLISHED)
or, for the step response, this module's own ``_send`` helper; receivers are iperf3
servers (per-stream bytes per 1 s interval, -J) or this module's ``_recv`` helper
(bytes timestamped with CLOCK_MONOTONIC into 5 ms bins). Rates are written by 4-tuple
into hc_rates (bytes/s), except in the map-full section (a port selector).

Sections (the JSON has one key each; numbers are bits/s unless the name says _Bps):
  unpaced     one bulk flow, no program: the ceiling; accuracy targets above 90% of it
              are skipped (and listed with the reason).
  accuracy    one bulk flow per target rate; goodput at the receiver per 1 s window, the
              first window skipped (slow start, selection); error of every window.
              Header bytes: TCP's internal pacing (no fq qdisc on this kernel) charges
              skb->len of the write-queue skb, i.e. TCP payload, to the rate. If it
              charged IP+TCP headers, goodput would be rate * MSS/(MSS+52) (~3.5% low at
              MTU 1500). Both errors are reported: ``err`` (goodput vs rate: payload model)
              and ``err_hdr`` (goodput vs rate * MSS/(MSS+52): header model), and the
              ``header_model`` entry says which one the measurements fit.
  step        60 ms slots, one flow, rate schedule changed from user space at each slot
              boundary: per change, the time until every 20 ms window (starting at or
              after that time, before the next change) is within 10% of the new target;
              per slot, the mean rate from 10 ms after the change to the next change.
  flows200    200 concurrent flows (two iperf3 clients, -P 100 each), per-flow rates
              spread 1..20 Mbit/s, written by 4-tuple; per-flow goodput over the measured
              windows vs its target.
  map_full    a Pacer with max_flows=N and N+k selected flows: hc_pace_ctl.flows_full must be
              k, the k flows without a map entry must be unpaced.
  overhead    bulk flow, rate unlimited, iperf3 pinned (client CPU 0, server CPU 1):
              (a) no program, (b) program + flow selected
              (counted, not paced), (c) program, flow not selected, track-all on; rounds
              interleaved (order rotated), ratios b/a and c/a per round, mean and 95% t
              interval; then one run each of (b) and (c) with BPF run-time stats on:
              run_time_ns / run_cnt per call and calls per second, and the ratio that
              program time predicts (1 - program CPU / CPU busy) for a CPU-bound flow.

TSO bursts: tcp_tso_rtt_log (default 9) lets a flow with a sub-512 us RTT send 64 KB TSO
bursts whatever its pacing rate, so short windows at low rates hold few bursts. The step
and flows200 sections also run (full mode) with tcp_tso_rtt_log=0 in the sender's
namespace, which separates that quantization from the pacer's own behaviour (TSO_NOTE).

Other sessions share the machine: before each measurement ``Quiet`` waits (within a time
budget) until the CPUs are idle; every iperf3 run records the user time of processes that
are not ours (``foreign_cpu_cores``, a run above FOREIGN_MAX_CORES is "disturbed"); a
disturbed run that missed its target (accuracy) or a disturbed overhead round is measured
again, and what was discarded stays in the JSON.

The pacer's owner record names this process: another hostctl's ``clean`` releases pacers
whose owner does not look like a live hostctl (``journal.daemon_alive``: "hostctl" in its
command line). ``python -m hostctl_lab.bench.pacing`` qualifies; every section checks
``pacer_intact`` (still ours, pinned, attached, no fail-open event) afterwards.
"""

from __future__ import annotations

import argparse
import datetime as _dt
import functools
import json
import math
import os
import platform
import random
import signal
import socket
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Callable, Sequence
from typing import Any

PREFIX = "hcpb-"
RX_ADDR = "10.93.0.1"
TX_ADDR = "10.93.0.2"
HDR_BYTES = 52  # IPv4 20 + TCP 20 + timestamp option 12: what a header-counting pacer would charge per MSS
MBIT = 1_000_000
GBIT = 1_000_000_000
ACC_TARGETS = (50 * MBIT, 100 * MBIT, 200 * MBIT, 500 * MBIT, 1 * GBIT, 2 * GBIT, 5 * GBIT, 10 * GBIT,
               20 * GBIT, 30 * GBIT)
ACC_TARGETS_QUICK = (50 * MBIT, 1 * GBIT)
ACC_TOL = 0.05
ACC_CEILING = 0.90  # skip targets above this fraction of the unpaced throughput
STEP_SLOT_S = 0.060
STEP_BIN_S = 0.005
STEP_WIN_S = 0.020
STEP_TOL = 0.10
STEP_SKIP_S = 0.010
STEP_HOLD = (800, 200, 500, 100, 800)  # Mbit/s: the paper's 20 -> 5 Gbit/s step scaled to this machine
STEP_EVERY = (400, 100, 800, 200, 600, 150, 700, 300, 500, 800, 100, 400)  # Mbit/s, one slot each
FLOWS_N = 200
FLOWS_MIN, FLOWS_MAX = 1 * MBIT, 20 * MBIT
FLOWS_TOL = 0.10
OVERHEAD_TARGET = 0.97
SCHEMA = "hostctl_lab.bench.pacing/1"


# ==================================================================== helpers run as processes

class _Stop(Exception):
    pass


def _raise_stop(*_a) -> None:
    raise _Stop()


def _recv_main(argv: Sequence[str]) -> int:
    """Accept one connection, count received bytes into CLOCK_MONOTONIC bins, print JSON
    ({base_ns, bin_ns, bytes}) on SIGTERM, EOF or after --seconds."""
    ap = argparse.ArgumentParser(prog="pacing _recv")
    ap.add_argument("--bind", required=True)
    ap.add_argument("--port", type=int, required=True)
    ap.add_argument("--bin-ms", type=float, default=5.0)
    ap.add_argument("--seconds", type=float, default=60.0)
    a = ap.parse_args(argv)
    signal.signal(signal.SIGTERM, _raise_stop)
    bin_ns = int(a.bin_ms * 1e6)
    bins: list[int] = []
    base = 0
    srv = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    try:
        srv.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        srv.bind((a.bind, a.port))
        srv.listen(1)
        print("listening", flush=True)
        conn, _ = srv.accept()
        base = time.monotonic_ns()
        deadline = base + int(a.seconds * 1e9)
        conn.settimeout(0.5)
        buf = bytearray(1 << 20)
        with conn:
            while True:
                try:
                    n = conn.recv_into(buf)
                except socket.timeout:
                    n = -1
                now = time.monotonic_ns()
                if n == 0 or now >= deadline:
                    break
                if n > 0:
                    i = (now - base) // bin_ns
                    if i >= len(bins):
                        bins.extend([0] * (i + 1 - len(bins)))
                    bins[i] += n
    except _Stop:
        pass
    finally:
        srv.close()
    print(json.dumps({"base_ns": base, "bin_ns": bin_ns, "bytes": bins}), flush=True)
    return 0


def _send_main(argv: Sequence[str]) -> int:
    """Connect from --bind:--cport and send zeros as fast as TCP allows, for --seconds."""
    ap = argparse.ArgumentParser(prog="pacing _send")
    ap.add_argument("--bind", required=True)
    ap.add_argument("--cport", type=int, required=True)
    ap.add_argument("--connect", required=True)
    ap.add_argument("--seconds", type=float, default=60.0)
    a = ap.parse_args(argv)
    host, port = a.connect.rsplit(":", 1)
    s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    s.bind((a.bind, a.cport))
    s.connect((host, int(port)))
    payload = bytes(256 * 1024)
    end = time.monotonic() + a.seconds
    try:
        while time.monotonic() < end:
            s.sendall(payload)
    except OSError:
        pass
    finally:
        s.close()
    return 0


# ==================================================================== small utilities

def _sh(cmd: Sequence[str], check: bool = True, timeout: float = 30) -> subprocess.CompletedProcess:
    r = subprocess.run(list(cmd), capture_output=True, text=True, timeout=timeout)
    if check and r.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd)} failed ({r.returncode}): {(r.stderr or r.stdout).strip()}")
    return r


def _mean(xs: Sequence[float]) -> float | None:
    return float(sum(xs) / len(xs)) if xs else None


def _ci95(xs: Sequence[float]) -> list[float] | None:
    from hostctl_lab.bench.report import mean_ci95

    ci = mean_ci95(list(xs))
    return list(ci) if ci else None


def _r(x: float | None, nd: int = 4) -> float | None:
    return None if x is None or not math.isfinite(x) else round(float(x), nd)


def _cpu_times() -> tuple[float, float, float]:
    """(busy, total, steal) jiffies over all CPUs, from /proc/stat."""
    with open("/proc/stat") as f:
        v = [float(x) for x in f.readline().split()[1:]]
    idle = v[3] + (v[4] if len(v) > 4 else 0.0)
    total = sum(v[:8])
    steal = v[7] if len(v) > 7 else 0.0
    return total - idle, total, steal


def _hrtimer_softirqs() -> int:
    try:
        with open("/proc/softirqs") as f:
            for line in f:
                if line.strip().startswith("HRTIMER:"):
                    return sum(int(x) for x in line.split()[1:])
    except OSError:
        pass
    return 0


def _proc_stat() -> dict[str, list[float]]:
    """/proc/stat cpu lines: name -> [user nice system idle iowait irq softirq steal] jiffies."""
    out = {}
    with open("/proc/stat") as f:
        for line in f:
            if not line.startswith("cpu"):
                break
            parts = line.split()
            out[parts[0]] = [float(x) for x in parts[1:9]]
    return out


class SysSnap:
    """System counters around a run: CPU busy (cores, and per CPU with its softirq share),
    user time outside this process, steal, HRTIMER softirqs."""

    def __init__(self) -> None:
        import resource

        self.t = time.monotonic()
        self.stat = _proc_stat()
        self.self_user = resource.getrusage(resource.RUSAGE_SELF).ru_utime
        self.hrt = _hrtimer_softirqs()

    def since(self, old: "SysSnap") -> dict:
        dt = max(1e-9, self.t - old.t)
        ncpu = os.cpu_count() or 1

        def delta(name: str) -> list[float]:
            return [a - b for a, b in zip(self.stat.get(name, []), old.stat.get(name, []))]

        d = delta("cpu")
        tot = max(1e-9, sum(d))
        per_cpu = []
        for name in sorted(k for k in self.stat if k != "cpu"):
            c = delta(name)
            ct = max(1e-9, sum(c))
            per_cpu.append({"cpu": name, "busy_pct": _r((ct - c[3] - c[4]) / ct * 100, 1),
                            "softirq_pct": _r(c[6] / ct * 100, 1)})
        hog = max(per_cpu, key=lambda c: c["busy_pct"] or 0) if per_cpu else {}
        return {"seconds": _r(dt, 3), "cpu_busy_cores": _r((tot - d[3] - d[4]) / tot * ncpu, 3),
                # user time is where other sessions' load shows; our traffic costs kernel time
                "user_cores_not_self": _r(((d[0] + d[1]) / tot * ncpu) - (self.self_user - old.self_user) / dt, 3),
                "softirq_cores": _r(d[6] / tot * ncpu, 3), "steal_pct": _r(d[7] / tot * 100, 2),
                "busiest_cpu_pct": hog.get("busy_pct"), "busiest_cpu_softirq_pct": hog.get("softirq_pct"),
                "per_cpu": per_cpu, "hrtimer_softirq_per_s": _r((self.hrt - old.hrt) / dt, 0)}


FOREIGN_MAX_CORES = 0.15  # user time outside our processes above this (cores): the run was "disturbed"


class Quiet:
    """Waits (within a budget) until the machine is quiet before a measurement: other
    sessions share this machine, and a CPU-bound flow measures their load, not ours."""

    def __init__(self, budget_s: float, each_s: float = 8.0, busy_max_cores: float = 0.30) -> None:
        self.budget_s = budget_s
        self.each_s = each_s
        self.busy_max = busy_max_cores
        self.waited_s = 0.0
        self.gates = 0
        self.timeouts = 0

    def wait(self) -> float:
        """Sample CPU busy over 0.25 s until it is below busy_max; returns the last busy (cores)."""
        t0 = time.monotonic()
        ncpu = os.cpu_count() or 1
        busy = 0.0
        while True:
            b0, tot0, _ = _cpu_times()
            time.sleep(0.25)
            b1, tot1, _ = _cpu_times()
            busy = (b1 - b0) / max(1e-9, tot1 - tot0) * ncpu
            spent = time.monotonic() - t0
            if busy <= self.busy_max:
                break
            if spent >= self.each_s or self.waited_s + spent >= self.budget_s:
                self.timeouts += 1
                break
        self.waited_s += time.monotonic() - t0
        self.gates += 1
        return busy

    def to_dict(self) -> dict:
        return {"busy_max_cores": self.busy_max, "gates": self.gates, "waited_s": round(self.waited_s, 1),
                "budget_s": self.budget_s, "gave_up": self.timeouts,
                "foreign_max_cores": FOREIGN_MAX_CORES}


def _disturbed(run: dict) -> bool:
    f = (run.get("system") or {}).get("foreign_cpu_cores")
    return f is not None and f > FOREIGN_MAX_CORES


def _fmt_rate(bps: float | None) -> str:
    if bps is None:
        return "\u2014"
    if bps >= GBIT:
        return f"{bps / GBIT:.3g} Gbit/s"
    return f"{bps / MBIT:.4g} Mbit/s"


def _pct(x: float | None, signed: bool = True) -> str:
    if x is None:
        return "\u2014"
    return (f"{x * 100:+.2f}%" if signed else f"{x * 100:.2f}%").replace("-", "\u2212")


# ==================================================================== the testbed

class Bed:
    """Two namespaces joined by a veth, cgroups, and every process started: all unique
    (hcpb-TAG...) and all removed by ``down`` (idempotent; also after a failure)."""

    def __init__(self) -> None:
        self.tag = uuid.uuid4().hex[:6]
        self.rx = f"{PREFIX}{self.tag}-rx"
        self.tx = f"{PREFIX}{self.tag}-tx"
        self.rx_dev = f"hcpb{self.tag}r"
        self.tx_dev = f"hcpb{self.tag}t"
        self.cgroups: list[str] = []
        self.procs: list[subprocess.Popen] = []
        self.keepers: list[Keeper] = []
        self.made_ns: list[str] = []
        self._next_cport = 20000

    # -- setup -------------------------------------------------------------------------
    def up(self) -> None:
        for ns in (self.rx, self.tx):
            self.made_ns.append(ns)  # registered first: down() removes it even if add half-failed
            _sh(["ip", "netns", "add", ns])
        _sh(["ip", "link", "add", self.rx_dev, "netns", self.rx, "type", "veth", "peer", "name", self.tx_dev,
             "netns", self.tx])
        for ns, dev, addr in ((self.rx, self.rx_dev, RX_ADDR), (self.tx, self.tx_dev, TX_ADDR)):
            _sh(["ip", "-n", ns, "addr", "add", f"{addr}/24", "dev", dev])
            _sh(["ip", "-n", ns, "link", "set", "lo", "up"])
            _sh(["ip", "-n", ns, "link", "set", dev, "up"])

    def cgroup(self, name: str) -> str:
        from hostctl.datapath.pacer import cgroup2_root

        path = os.path.join(cgroup2_root(), f"{PREFIX}{self.tag}-{name}")
        self.cgroups.append(path)
        os.makedirs(path)
        return path

    def cport(self, n: int = 1) -> int:
        """A block of n client ports never used before in this run (no stale 4-tuples)."""
        p = self._next_cport
        self._next_cport += n + 1
        return p

    def sysctl(self, ns: str, key: str, value: str | None = None) -> str:
        """Read (and set, if value is given) a sysctl inside one of our namespaces."""
        if value is not None:
            _sh(["ip", "netns", "exec", ns, "sysctl", "-q", "-w", f"{key}={value}"])
        return _sh(["ip", "netns", "exec", ns, "sysctl", "-n", key]).stdout.strip()

    def mtu(self) -> int:
        d = json.loads(_sh(["ip", "-j", "-n", self.tx, "link", "show", "dev", self.tx_dev]).stdout)
        return int(d[0]["mtu"])

    def tx_counters(self) -> tuple[int, int]:
        d = json.loads(_sh(["ip", "-j", "-s", "-n", self.tx, "link", "show", "dev", self.tx_dev]).stdout)
        st = d[0]["stats64"]["tx"]
        return int(st["bytes"]), int(st["packets"])

    def pacer(self, cgroup: str, **kw) -> "Keeper":
        from hostctl.datapath.pacer import Pacer

        k = Keeper(Pacer(cgroup, **kw))
        self.keepers.append(k)
        return k

    # -- processes ---------------------------------------------------------------------
    def popen_rx(self, argv: Sequence[str], **kw) -> subprocess.Popen:
        return self._popen(["ip", "netns", "exec", self.rx, *argv], **kw)

    def popen_tx(self, cgroup: str, argv: Sequence[str], **kw) -> subprocess.Popen:
        """Join ``cgroup`` first, then the tx namespace (both by exec: the PID stays the same)."""
        return self._popen(["sh", "-c", 'echo $$ > "$0/cgroup.procs" && exec ip netns exec "$@"', cgroup, self.tx,
                            *argv], **kw)

    def _popen(self, argv: list[str], **kw) -> subprocess.Popen:
        kw.setdefault("stdout", subprocess.PIPE)
        kw.setdefault("stderr", subprocess.PIPE)
        kw.setdefault("text", True)
        p = subprocess.Popen(argv, **kw)
        self.procs.append(p)
        return p

    def wait_listen(self, port: int, timeout: float = 10.0) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            out = _sh(["ip", "netns", "exec", self.rx, "ss", "-Hltn", f"sport = :{port}"], check=False).stdout
            if out.strip():
                return
            time.sleep(0.03)
        raise RuntimeError(f"nothing listens on {RX_ADDR}:{port} in {self.rx} after {timeout:.0f} s")

    @staticmethod
    def kill(p: subprocess.Popen, sig: int = signal.SIGTERM) -> None:
        if p.poll() is None:
            try:
                p.send_signal(sig)
                p.wait(3)
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait(3)
            except ProcessLookupError:
                pass

    # -- teardown ----------------------------------------------------------------------
    def down(self) -> list[str]:
        """Kill our processes (by PID), release our pacers, delete our namespaces and
        cgroups. Every step runs even if an earlier one fails."""
        errors: list[str] = []
        for p in reversed(self.procs):
            try:
                self.kill(p)
            except Exception as e:  # noqa: BLE001
                errors.append(f"kill {p.pid}: {e}")
        for k in reversed(self.keepers):
            try:
                k.close()
            except Exception as e:  # noqa: BLE001
                errors.append(f"pacer: {e}")
        self.keepers.clear()
        for ns in self.made_ns:  # anything left in our namespaces was started by us
            for pid in _sh(["ip", "netns", "pids", ns], check=False).stdout.split():
                try:
                    os.kill(int(pid), signal.SIGKILL)
                except (ProcessLookupError, ValueError):
                    pass
        from hostctl.datapath import pacer as P

        for cg in self.cgroups:
            for _ in range(30):
                pids = P.cgroup_pids(cg) if os.path.isdir(cg) else []
                if not pids:
                    break
                for pid in pids:
                    try:
                        os.kill(pid, signal.SIGKILL)
                    except ProcessLookupError:
                        pass
                time.sleep(0.1)
            for owner in P.all_owners():  # a pacer of ours that close() did not finish
                if owner.get("cgroup", "").removeprefix("/proc/1/root") == cg.removeprefix("/proc/1/root"):
                    try:
                        P.release_scope(owner)
                    except Exception as e:  # noqa: BLE001
                        errors.append(f"release {cg}: {e}")
            try:
                if os.path.isdir(cg):
                    os.rmdir(cg)
            except OSError as e:
                errors.append(f"rmdir {cg}: {e.strerror}")
        for ns in self.made_ns:
            r = _sh(["ip", "netns", "del", ns], check=False)
            if r.returncode != 0 and os.path.exists(f"/run/netns/{ns}"):
                errors.append(f"ip netns del {ns}: {r.stderr.strip()}")
        self.made_ns.clear()
        self.cgroups.clear()
        return errors


class Keeper:
    """A Pacer with a heartbeat thread (every 0.1 s, the lease is 1 s); every map access
    goes through one lock so the heartbeat never interleaves with an apply."""

    def __init__(self, pacer, period_s: float = 0.1) -> None:
        self.p = pacer
        self.lock = threading.Lock()
        self.period_s = period_s
        self.max_gap_s = 0.0
        self._stop = threading.Event()
        self._t = threading.Thread(target=self._loop, name="hcpb-heartbeat", daemon=True)
        self._t.start()

    def _loop(self) -> None:
        last = time.monotonic()
        while not self._stop.wait(self.period_s):
            with self.lock:
                self.p.heartbeat()
            now = time.monotonic()
            self.max_gap_s = max(self.max_gap_s, now - last)
            last = now

    def apply(self, table) -> int:
        with self.lock:
            return self.p.apply(table)

    def flows(self) -> list:
        with self.lock:
            return self.p.flows()

    def ctl(self) -> dict:
        with self.lock:
            return self.p.ctl()

    def forget_closed(self) -> int:
        with self.lock:
            gone = [r.key for r in self.p.flows() if r.closed]
            self.p.forget(gone)
        return len(gone)

    def prog_stats(self) -> dict:
        """run_time_ns / run_cnt of the program (non-zero only while stats are enabled)."""
        from hostctl.datapath.pacer import PROG_NAME

        out = _sh(["bpftool", "prog", "show", "pinned", os.path.join(self.p.pin_dir, PROG_NAME), "--json"]).stdout
        d = json.loads(out)
        return {"id": d.get("id"), "run_time_ns": int(d.get("run_time_ns", 0)), "run_cnt": int(d.get("run_cnt", 0))}

    def intact(self) -> dict:
        """Is the pacer still ours and working? Another hostctl's ``clean`` releases pacers
        whose owner does not look like a live hostctl process (journal.daemon_alive)."""
        from hostctl.datapath import bpfsys
        from hostctl.datapath.pacer import HP_CTL_RELEASE, PROG_NAME, load_owner

        owner = load_owner(self.p.scope)
        d: dict[str, Any] = {"owner_is_us": bool(owner) and owner.get("pid") == os.getpid(),
                             "pinned": os.path.exists(os.path.join(self.p.pin_dir, PROG_NAME))}
        try:
            fd = os.open(self.p.cgroup, os.O_RDONLY | os.O_DIRECTORY)
            try:
                d["attached_progs"] = len(bpfsys.prog_query(fd, bpfsys.BPF_CGROUP_SOCK_OPS))
            finally:
                os.close(fd)
        except OSError:
            d["attached_progs"] = 0
        ctl = self.ctl()
        d["failopen_events"] = ctl["failopen_events"]
        d["release_flag"] = bool(ctl["flags"] & HP_CTL_RELEASE)
        d["ok"] = (d["owner_is_us"] and d["pinned"] and d["attached_progs"] >= 1 and not d["failopen_events"]
                   and not d["release_flag"])
        return d

    def close(self) -> str:
        self._stop.set()
        if self._t.is_alive() and self._t is not threading.current_thread():
            self._t.join(2)
        with self.lock:
            return self.p.close()


# ==================================================================== iperf3 runs

def _start_iperf(bed: Bed, cgroup: str, *, port: int, cport: int, seconds: float, streams: int = 1,
                 interval: float = 1.0, extra: Sequence[str] = ()) -> tuple[subprocess.Popen, subprocess.Popen]:
    """iperf3 server (one test) in rx; client in tx and ``cgroup``, data streams from cport, cport+1, ..."""
    srv = bed.popen_rx(["iperf3", "-s", "-1", "-p", str(port), "-J", "-i", str(interval)])
    bed.wait_listen(port)
    cli = bed.popen_tx(cgroup, ["iperf3", "-c", RX_ADDR, "-p", str(port), "--cport", str(cport), "-t",
                                f"{seconds:g}", "-P", str(streams), "-J", "-i", str(interval), *extra])
    return srv, cli


def _finish_iperf(bed: Bed, srv: subprocess.Popen, cli: subprocess.Popen, timeout: float) -> tuple[dict, dict]:
    try:
        cout, cerr = cli.communicate(timeout=timeout)
        sout, serr = srv.communicate(timeout=15)
    except subprocess.TimeoutExpired:
        bed.kill(cli)
        bed.kill(srv)
        raise RuntimeError("iperf3 did not finish in time") from None
    out = []
    for name, text, err in (("client", cout, cerr), ("server", sout, serr)):
        try:
            d = json.loads(text)
        except ValueError:
            raise RuntimeError(f"iperf3 {name} printed no JSON: {(err or text)[-400:]}") from None
        if d.get("error"):
            raise RuntimeError(f"iperf3 {name}: {d['error']}")
        out.append(d)
    return out[0], out[1]


def _windows(server: dict, interval: float = 1.0) -> tuple[list[dict], dict[int, int]]:
    """Full receiver intervals [{seconds, bytes, streams: {cport: bytes}}] and socket -> cport."""
    sock_port = {int(c["socket"]): int(c["remote_port"]) for c in server.get("start", {}).get("connected", [])}
    wins = []
    for iv in server.get("intervals", []):
        s = iv.get("sum", {})
        if float(s.get("seconds", 0)) < 0.9 * interval:
            continue  # the last, partial interval
        wins.append({"seconds": float(s["seconds"]), "bytes": int(s["bytes"]),
                     "streams": {sock_port.get(int(st["socket"]), -1): int(st["bytes"]) for st in iv["streams"]}})
    return wins, sock_port


def _cpu_pct(client: dict) -> tuple[float | None, float | None]:
    c = client.get("end", {}).get("cpu_utilization_percent", {})
    return _r(c.get("host_total"), 1), _r(c.get("remote_total"), 1)


def bulk_run(bed: Bed, cgroup: str, *, port: int, cport: int, windows: int, streams: int = 1,
             extra: Sequence[str] = ()) -> dict:
    """One iperf3 test of windows+1 seconds; the first 1 s window is dropped (slow start)."""
    snap0 = SysSnap()
    txb0, txp0 = bed.tx_counters()
    srv, cli = _start_iperf(bed, cgroup, port=port, cport=cport, seconds=windows + 1, streams=streams, extra=extra)
    client, server = _finish_iperf(bed, srv, cli, timeout=windows + 30)
    txb1, txp1 = bed.tx_counters()
    sysd = SysSnap().since(snap0)
    wins, sock_port = _windows(server)
    used = wins[1:1 + windows]
    rates = [w["bytes"] * 8 / w["seconds"] for w in used]
    snd, rcv = _cpu_pct(client)
    cu = client.get("end", {}).get("cpu_utilization_percent", {})
    if sysd["user_cores_not_self"] is not None:
        # other sessions' load: user time that is neither ours nor iperf3's (softirq work of
        # our own traffic is charged to whatever task it interrupts, so kernel time cannot tell)
        sysd["foreign_cpu_cores"] = _r(sysd["user_cores_not_self"] - (cu.get("host_user", 0) + cu.get("remote_user", 0))
                                       / 100, 3)
    mss = client.get("start", {}).get("tcp_mss_default")
    return {"windows_bps": [_r(x, 0) for x in rates], "goodput_bps": _r(_mean(rates), 0),
            "first_window_bps": _r(wins[0]["bytes"] * 8 / wins[0]["seconds"], 0) if wins else None,
            "per_stream_windows": [w["streams"] for w in used], "cports": sorted(sock_port.values()),
            "sender_cpu_pct": snd, "receiver_cpu_pct": rcv, "mss": mss,
            "veth_tx_skbs_per_s": _r((txp1 - txp0) / sysd["seconds"], 0),
            "veth_tx_bytes_per_skb": _r((txb1 - txb0) / max(1, txp1 - txp0), 0), "system": sysd}


# ==================================================================== sections

def section_unpaced(bed: Bed, cg_a: str, windows: int, log, quiet: Quiet) -> dict:
    """The ceiling: best of up to 3 runs (a run disturbed by other load is repeated)."""
    attempts = []
    for _ in range(3):
        quiet.wait()
        r = bulk_run(bed, cg_a, port=5201, cport=bed.cport(), windows=windows)
        r.pop("per_stream_windows", None)
        attempts.append(r)
        if not _disturbed(r):
            break
    best = max(attempts, key=lambda x: x["goodput_bps"] or 0)
    best = {**best, "attempts_bps": [a["goodput_bps"] for a in attempts], "disturbed": _disturbed(best)}
    log(f"unpaced: {_fmt_rate(best['goodput_bps'])} (sender CPU {best['sender_cpu_pct']}%, "
        f"{len(attempts)} run(s))")
    return best


def section_accuracy(bed: Bed, cg: str, cg_a: str, keeper: Keeper, unpaced_bps: float, targets: Sequence[int],
                     windows: int, log, quiet: Quiet) -> dict:
    from hostctl.core.pace import PaceTable
    from hostctl.core.types import FlowKey

    out: dict[str, Any] = {"window_s": 1.0, "windows_per_target": windows,
                           "first_window_skipped": "yes: slow start and the first ACKs (selection at ESTABLISHED)",
                           "tolerance": ACC_TOL, "ceiling_fraction_of_unpaced": ACC_CEILING,
                           "unpaced_bps": unpaced_bps, "header_bytes_per_mss": HDR_BYTES,
                           "targets": [], "skipped": []}
    for tgt in targets:
        if tgt > ACC_CEILING * unpaced_bps:
            out["skipped"].append({"target_bps": tgt, "reason": f"above {ACC_CEILING:.0%} of the unpaced "
                                                                f"throughput ({_fmt_rate(unpaced_bps)})"})
            log(f"accuracy {_fmt_rate(tgt)}: skipped (unpaced ceiling {_fmt_rate(unpaced_bps)})")
            continue
        discarded = []
        for attempt in range(3):
            quiet.wait()
            cport = bed.cport()
            key = FlowKey(TX_ADDR, cport, RX_ADDR, 5202)
            keeper.apply(PaceTable(flows={key: 1}, flow_rates={key: int(tgt // 8)}))
            r = bulk_run(bed, cg, port=5202, cport=cport, windows=windows)
            rec = next((f for f in keeper.flows() if f.key == key), None)
            keeper.apply(PaceTable())
            keeper.forget_closed()
            missed = any(abs(w / tgt - 1) > ACC_TOL for w in r["windows_bps"])
            if attempt < 2 and missed and _disturbed(r):
                # other load on the machine during a miss: measure again
                discarded.append({"goodput_bps": r["goodput_bps"], "windows_bps": r["windows_bps"],
                                  "system": r["system"]})
                continue
            break
        mss = int(r.get("mss") or 1448)
        hdr_factor = mss / (mss + HDR_BYTES)
        errs = [w / tgt - 1 for w in r["windows_bps"]]
        errs_h = [w / (tgt * hdr_factor) - 1 for w in r["windows_bps"]]
        row = {"target_bps": tgt, **{k: r[k] for k in ("goodput_bps", "windows_bps", "first_window_bps",
                                                        "sender_cpu_pct", "receiver_cpu_pct", "veth_tx_skbs_per_s",
                                                        "veth_tx_bytes_per_skb", "system")},
               "mss": mss, "hdr_factor": _r(hdr_factor, 5),
               "err_windows": [_r(e, 5) for e in errs], "err_mean": _r(_mean(errs), 5),
               "err_max_abs": _r(max(abs(e) for e in errs), 5) if errs else None,
               "err_hdr_windows": [_r(e, 5) for e in errs_h], "err_hdr_mean": _r(_mean(errs_h), 5),
               "err_hdr_max_abs": _r(max(abs(e) for e in errs_h), 5) if errs_h else None,
               "applied_rate_Bps": rec.rate_Bps if rec else None,
               "setopt_errors": rec.setopt_errors if rec else None,
               "callbacks": rec.callbacks if rec else None,
               "disturbed": _disturbed(r), "discarded_disturbed_runs": discarded}
        row["within_tol"] = bool(errs) and max(abs(e) for e in errs) <= ACC_TOL
        if not row["within_tol"]:
            # control: the same rate set by the application (iperf3 --fq-rate: SO_MAX_PACING_RATE),
            # no BPF program. The same shortfall there means TCP's pacing, not hc_pace.
            quiet.wait()
            c = bulk_run(bed, cg_a, port=5203, cport=bed.cport(), windows=windows, extra=["--fq-rate", str(int(tgt))])
            ce = [w / tgt - 1 for w in c["windows_bps"]]
            row["control_fq_rate"] = {"goodput_bps": c["goodput_bps"], "windows_bps": c["windows_bps"],
                                      "err_mean": _r(_mean(ce), 5),
                                      "err_max_abs": _r(max(abs(e) for e in ce), 5) if ce else None,
                                      "disturbed": _disturbed(c), "system": c["system"]}
            row["diagnosis"] = diagnose(row, r)
        out["targets"].append(row)
        log(f"accuracy {_fmt_rate(tgt)}: goodput {_fmt_rate(row['goodput_bps'])}, err mean {_pct(row['err_mean'])}"
            f" max|err| {_pct(row['err_max_abs'], False)}, sender CPU {row['sender_cpu_pct']}%")
    rows = out["targets"]
    # decide the header model on rates far below the ceiling, where nothing else limits the flow
    low = [t for t in rows if t["target_bps"] <= 0.25 * unpaced_bps] or rows
    mae = _mean([abs(t["err_mean"]) for t in low if t["err_mean"] is not None])
    mae_h = _mean([abs(t["err_hdr_mean"]) for t in low if t["err_hdr_mean"] is not None])
    counted = None if mae is None or mae_h is None else mae_h < mae
    out["header_model"] = {
        "mean_abs_err_payload_model": _r(mae, 5), "mean_abs_err_header_model": _r(mae_h, 5),
        "decided_on_targets_bps": [t["target_bps"] for t in low],
        "pacing_counts_header_bytes": counted,
        "note": ("err = goodput / target - 1 (the pacing rate is taken to count TCP payload only); "
                 f"err_hdr = goodput / (target * MSS/(MSS+{HDR_BYTES})) - 1 (the rate taken to count IP+TCP "
                 "headers too). The model with the smaller mean |error| is the one the kernel follows: "
                 + ("payload only (tcp_update_skb_after_send charges skb->len of the write-queue skb, "
                    "headers are not in it); on a real MTU-1500 wire the IP-level rate is target*(MSS+52)/MSS"
                    if counted is False else "headers counted" if counted else "undetermined")),
    }
    out["max_abs_err"] = _r(max((t["err_max_abs"] for t in rows if t["err_max_abs"] is not None), default=None), 5)
    out["mean_abs_err"] = _r(_mean([abs(e) for t in rows for e in t["err_windows"] if e is not None]), 5)
    out["all_within_tol"] = bool(rows) and all(t["within_tol"] for t in rows)
    out["missed"] = [t["target_bps"] for t in rows if not t["within_tol"]]
    return out


def diagnose(row: dict, run: dict) -> str:
    """Why a target was missed, from what was measured during the run."""
    sy = run.get("system") or {}
    busiest, si = sy.get("busiest_cpu_pct") or 0, sy.get("busiest_cpu_softirq_pct") or 0
    parts = []
    if _disturbed(run):
        parts.append(f"other load on the machine ({sy.get('foreign_cpu_cores')} cores of user time outside ours)")
    if busiest >= 95:
        parts.append(f"CPU-bound: the busiest CPU was {busiest}% busy, {si}% in softirq (TCP's internal pacing "
                     "sends from an hrtimer softirq pinned to one CPU, and on a veth the receive path runs in the "
                     "same softirq)")
    else:
        parts.append(f"no CPU at 100% (busiest {busiest}%, {si}% softirq)")
    ctl = row.get("control_fq_rate") or {}
    if ctl.get("err_mean") is not None:
        same = ctl["err_max_abs"] is not None and ctl["err_max_abs"] > ACC_TOL
        parts.append(f"control without BPF (iperf3 --fq-rate, the application sets SO_MAX_PACING_RATE): goodput "
                     f"{ctl['err_mean'] * 100:+.1f}%, max |err| {ctl['err_max_abs'] * 100:.1f}%"
                     + (" \u2192 the same shortfall: TCP's internal pacing at this rate, not hc_pace" if same
                        else " \u2192 within tolerance without the program"))
    parts.append(f"{run.get('veth_tx_skbs_per_s')} skbs/s of {run.get('veth_tx_bytes_per_skb')} B, "
                 f"{sy.get('hrtimer_softirq_per_s')} hrtimer softirqs/s; goodput {row['err_mean'] * 100:+.1f}% "
                 "(below target: the pacer is a cap, not a floor)" if row.get("err_mean") is not None else "")
    return "; ".join(p for p in parts if p)


def _recv_json(p: subprocess.Popen, bed: Bed) -> dict:
    """Stop the _recv helper (SIGTERM: it prints its bins and exits) and parse its JSON."""
    if p.poll() is None:
        p.send_signal(signal.SIGTERM)
    try:
        out, err = p.communicate(timeout=10)
    except subprocess.TimeoutExpired:
        bed.kill(p, signal.SIGKILL)
        raise RuntimeError("the step receiver did not stop") from None
    for line in reversed(out.splitlines()):
        if line.startswith("{"):
            return json.loads(line)
    raise RuntimeError(f"receiver printed no JSON: {err[-400:]}")


def step_run(bed: Bed, cg: str, keeper: Keeper, name: str, schedule_mbit: Sequence[int], hold_slots: int,
             port: int, warmup_s: float) -> dict:
    """One flow; schedule_mbit[i] held for hold_slots slots of STEP_SLOT_S each."""
    from hostctl.core.pace import PaceTable
    from hostctl.core.types import FlowKey

    slots = [m * MBIT for m in schedule_mbit for _ in range(hold_slots)]
    cport = bed.cport()
    key = FlowKey(TX_ADDR, cport, RX_ADDR, port)

    def table(bps: int) -> PaceTable:
        return PaceTable(flows={key: 1}, flow_rates={key: int(bps // 8)})

    keeper.apply(table(slots[0]))
    total = warmup_s + len(slots) * STEP_SLOT_S + 1.0
    txb0, txp0 = bed.tx_counters()
    py = [sys.executable, "-m", "hostctl_lab.bench.pacing"]
    rcv = bed.popen_rx([*py, "_recv", "--bind", RX_ADDR, "--port", str(port), "--bin-ms", f"{STEP_BIN_S * 1e3:g}",
                        "--seconds", f"{total + 5:g}"])
    line = rcv.stdout.readline()
    if "listening" not in line:
        raise RuntimeError(f"step receiver did not start: {line!r} {rcv.stderr.read()[-400:] if rcv.poll() is not None else ''}")
    snd = bed.popen_tx(cg, [*py, "_send", "--bind", TX_ADDR, "--cport", str(cport), "--connect", f"{RX_ADDR}:{port}",
                            "--seconds", f"{total + 5:g}"], stdout=subprocess.DEVNULL)
    deadline = time.monotonic() + 10
    while True:
        rec = next((f for f in keeper.flows() if f.key == key), None)
        if rec is not None and rec.bytes_acked > 0:
            break
        if time.monotonic() > deadline or snd.poll() is not None:
            raise RuntimeError(f"step sender never got going (exit {snd.poll()}): {snd.stderr.read()[-400:] if snd.poll() is not None else ''}")
        time.sleep(0.01)
    time.sleep(warmup_s)
    t0 = time.monotonic_ns()
    slot_ns = int(STEP_SLOT_S * 1e9)
    changes = [(t0, slots[0])]
    lateness = []
    for k in range(1, len(slots)):
        due = t0 + k * slot_ns
        while (d := due - time.monotonic_ns()) > 0:
            time.sleep(min(d / 1e9, 0.002) if d > 2_000_000 else d / 1e9)
        keeper.apply(table(slots[k]))
        now = time.monotonic_ns()
        changes.append((now, slots[k]))
        lateness.append((now - due) / 1e6)
    t_end = t0 + len(slots) * slot_ns
    while time.monotonic_ns() < t_end + 30_000_000:
        time.sleep(0.005)
    data = _recv_json(rcv, bed)
    bed.kill(snd)
    txb1, txp1 = bed.tx_counters()
    keeper.apply(PaceTable())
    keeper.forget_closed()
    out = analyse_step(name, data, changes, t_end, lateness, hold_slots)
    skb = (txb1 - txb0) / max(1, txp1 - txp0)
    out["veth_tx_bytes_per_skb"] = _r(skb, 0)
    # one TSO burst at the lowest target as a share of a 20 ms window: the measurement's
    # granularity there (a window holds a whole number of bursts)
    lo = min(slots)
    out["burst_share_of_window_at_min_rate"] = _r(
        burst_bytes(lo, int(bed.sysctl(bed.tx, TSO_KEY))) * 8 / (STEP_WIN_S * lo), 3)
    return out


def analyse_step(name: str, data: dict, changes: list[tuple[int, int]], t_end: int, lateness_ms: list[float],
                 hold_slots: int) -> dict:
    import numpy as np

    base, bin_ns = int(data["base_ns"]), int(data["bin_ns"])
    b = np.asarray(data["bytes"], dtype=float)
    bin_s = bin_ns / 1e9
    nwin = int(round(STEP_WIN_S / bin_s))
    win = np.convolve(b, np.ones(nwin), mode="valid") * 8 / STEP_WIN_S  # window i covers bins i..i+nwin-1
    starts = base + np.arange(len(win)) * bin_ns
    t0 = changes[0][0]
    bounds = [c[0] for c in changes[1:]] + [t_end]
    slots, steps = [], []
    for k, ((tc, tgt), te) in enumerate(zip(changes, bounds)):
        lo = tc + int(STEP_SKIP_S * 1e9)
        i0 = max(0, -(-(lo - base) // bin_ns))  # first bin starting at or after lo
        i1 = (te - base) // bin_ns  # bins before this one end at or before te
        full = b[i0:i1] if i1 > i0 else np.array([])
        mean = float(full.sum() * 8 / (len(full) * bin_s)) if len(full) else None
        slots.append({"k": k, "t_ms": _r((tc - t0) / 1e6, 2), "target_bps": tgt, "mean_bps": _r(mean, 0),
                      "err": _r(mean / tgt - 1, 5) if mean is not None else None})
        prev = changes[k - 1][1] if k else None
        if k == 0 or prev == tgt:
            continue
        # windows that start at or after the change and end by the next change
        sel = np.nonzero((starts >= tc) & (starts + nwin * bin_ns <= te))[0]
        settle = None
        if len(sel):
            ok = np.abs(win[sel] / tgt - 1) <= STEP_TOL
            bad = np.nonzero(~ok)[0]
            if len(bad) == 0:
                settle = (starts[sel[0]] - tc) / 1e6
            elif bad[-1] + 1 < len(sel):
                settle = (starts[sel[bad[-1] + 1]] - tc) / 1e6
        steps.append({"k": k, "t_ms": _r((tc - t0) / 1e6, 2), "from_bps": prev, "to_bps": tgt,
                      "settle_ms": _r(settle, 2), "settled": settle is not None,
                      "available_ms": _r((te - tc) / 1e6, 1)})
    slot_err = [abs(s["err"]) for s in slots if s["err"] is not None]
    settles = [s["settle_ms"] for s in steps if s["settle_ms"] is not None]
    t_lo = t0 - int(0.1 * 1e9)
    keep = (starts >= t_lo) & (starts <= t_end)
    bins_t = base + np.arange(len(b)) * bin_ns
    keepb = (bins_t >= t_lo) & (bins_t <= t_end)
    return {
        "name": name, "hold_slots": hold_slots, "slots": slots, "changes": steps,
        "apply_lateness_ms_max": _r(max(lateness_ms), 3) if lateness_ms else None,
        "slot_err_mean_abs": _r(_mean(slot_err), 5), "slot_err_max_abs": _r(max(slot_err), 5) if slot_err else None,
        "settle_ms_median": _r(float(np.median(settles)), 2) if settles else None,
        "settle_ms_max": _r(max(settles), 2) if settles else None,
        "unsettled": sum(1 for s in steps if not s["settled"]),
        "trace": {"t0_ns": t0, "bin_ms": bin_s * 1e3,
                  "bin_t_ms": [_r((t - t0) / 1e6, 2) for t in bins_t[keepb]],
                  "bin_bps": [_r(x * 8 / bin_s, 0) for x in b[keepb]],
                  "win_t_ms": [_r((t - t0) / 1e6, 2) for t in starts[keep]],
                  "win_bps": [_r(x, 0) for x in win[keep]],
                  "target": [[_r((tc - t0) / 1e6, 2), tgt] for tc, tgt in changes] + [[_r((t_end - t0) / 1e6, 2),
                                                                                       changes[-1][1]]]},
    }


TSO_KEY = "net.ipv4.tcp_tso_rtt_log"
TSO_NOTE = ("tcp_tso_rtt_log (default 9) adds gso_max_size >> (min_rtt_us >> 9) to TCP's TSO burst size: with "
            "the microsecond RTTs of a veth every paced skb is up to 64 KB whatever the rate, so a paced flow "
            "sends 64 KB bursts spaced by 64 KB / rate (5 ms at 100 Mbit/s, 0.5 s at 1 Mbit/s). A measurement "
            "window then holds a whole number of bursts: that, not the rate, limits short-window accuracy. "
            "The variant with tcp_tso_rtt_log=0 (set in the sender's namespace only) sizes bursts by the rate "
            "(~1 ms) and shows the pacer's own response.")


def burst_bytes(rate_bps: float, tso_rtt_log: int, mss: int = 1448) -> int:
    """TCP's TSO burst for a paced flow on this link (tcp_tso_autosize): rate >> 10 (~1 ms),
    plus gso_max_size >> (min_rtt_us >> tso_rtt_log) when tso_rtt_log > 0: with a veth's
    RTT (< 512 us) that is the whole 64 KB, i.e. 45 segments at MSS 1448."""
    full = (65536 // mss) * mss
    one_ms = int(rate_bps / 8 / 1024)
    if tso_rtt_log > 0:
        return full
    return min(full, max(2 * mss, (one_ms // mss) * mss))


def with_tso_rtt_log(bed: Bed, value: str | None, fn: Callable[[], dict]) -> dict:
    """Run fn with tcp_tso_rtt_log=value in the sender's namespace (None: leave the default)."""
    old = bed.sysctl(bed.tx, TSO_KEY)
    if value is None:
        r = fn()
        r["tcp_tso_rtt_log"] = int(old)
        return r
    bed.sysctl(bed.tx, TSO_KEY, value)
    try:
        r = fn()
    finally:
        bed.sysctl(bed.tx, TSO_KEY, old)
    r["tcp_tso_rtt_log"] = int(value)
    return r


def section_step(bed: Bed, cg: str, keeper: Keeper, quick: bool, log, quiet: Quiet) -> dict:
    out: dict[str, Any] = {"slot_ms": STEP_SLOT_S * 1e3, "bin_ms": STEP_BIN_S * 1e3, "window_ms": STEP_WIN_S * 1e3,
                           "tolerance": STEP_TOL, "slot_skip_ms": STEP_SKIP_S * 1e3,
                           "definition": ("settle_ms: from the rate write (user space, after apply() returned) to "
                                          "the start of the first 20 ms window from which every window (on the "
                                          "5 ms bin grid, ending before the next change) is within 10% of the new "
                                          "target; so an immediate response reads 0..5 ms (bin alignment). "
                                          "slot err: mean receiver rate from 10 ms after the write to the next "
                                          "write, vs the target"),
                           "tso_note": TSO_NOTE, "runs": []}
    hold = 2 if quick else 4
    seq = STEP_EVERY[:6] if quick else STEP_EVERY
    variants = [None] if quick else [None, "0"]
    port = 5301
    for v in variants:
        for name, sched, h in (("hold", STEP_HOLD, hold), ("every_slot", seq, 1)):
            quiet.wait()
            r = with_tso_rtt_log(bed, v, functools.partial(step_run, bed, cg, keeper, name, sched, h, port=port,
                                                           warmup_s=0.5))
            port += 1
            out["runs"].append(r)
            log(f"step ({name}, tcp_tso_rtt_log={r['tcp_tso_rtt_log']}): settle median {r['settle_ms_median']} ms "
                f"max {r['settle_ms_max']} ms, unsettled {r['unsettled']}/{len(r['changes'])}, slot |err| mean "
                f"{_pct(r['slot_err_mean_abs'], False)} max {_pct(r['slot_err_max_abs'], False)}, "
                f"{r['veth_tx_bytes_per_skb']:.0f} B/skb")
    return out


def flows_run(bed: Bed, cg: str, keeper: Keeper, n: int, windows: int, log, quiet: Quiet) -> dict:
    from hostctl.core.pace import PaceTable
    from hostctl.core.types import FlowKey

    per_proc = 100
    procs = [(5401 + i, bed.cport(min(per_proc, n - i * per_proc)), min(per_proc, n - i * per_proc))
             for i in range(-(-n // per_proc))]
    rng = random.Random(20240601)
    rates = [FLOWS_MIN + (FLOWS_MAX - FLOWS_MIN) * i / max(1, n - 1) for i in range(n)]
    rng.shuffle(rates)
    keys, flow_rates, target = [], {}, {}
    i = 0
    for port, cport, m in procs:
        for j in range(m):
            k = FlowKey(TX_ADDR, cport + j, RX_ADDR, port)
            keys.append(k)
            flow_rates[k] = int(rates[i] // 8)
            target[(port, cport + j)] = rates[i]
            i += 1
    keeper.apply(PaceTable(flows={k: 1 for k in keys}, flow_rates=flow_rates))
    quiet.wait()
    snap0 = SysSnap()
    txb0, txp0 = bed.tx_counters()
    started = [(_start_iperf(bed, cg, port=port, cport=cport, seconds=windows + 1, streams=m), port)
               for port, cport, m in procs]
    flows = []
    for (srv, cli), port in started:
        client, server = _finish_iperf(bed, srv, cli, timeout=windows + 40)
        wins, _ = _windows(server)
        used = wins[1:1 + windows]
        secs = sum(w["seconds"] for w in used)
        for cp in sorted({p for w in used for p in w["streams"]}):
            got = sum(w["streams"].get(cp, 0) for w in used) * 8 / secs if secs else None
            tgt = target.get((port, cp))
            if tgt is None:
                continue
            flows.append({"port": port, "cport": cp, "target_bps": _r(tgt, 0), "goodput_bps": _r(got, 0),
                          "err": _r(got / tgt - 1, 5) if got is not None else None})
    sysd = SysSnap().since(snap0)
    txb1, txp1 = bed.tx_counters()
    skb = (txb1 - txb0) / max(1, txp1 - txp0)
    tso_log = int(bed.sysctl(bed.tx, TSO_KEY))
    for f in flows:  # one TSO burst as a share of the flow's bytes in the measured span
        f["burst_bytes"] = burst_bytes(f["target_bps"], tso_log)
        f["burst_resolution"] = _r(f["burst_bytes"] * 8 / (windows * f["target_bps"]), 4)
    recs = {f.key: f for f in keeper.flows()}
    applied = sum(1 for k in keys if k in recs and recs[k].rate_Bps == flow_rates[k])
    keeper.apply(PaceTable())
    keeper.forget_closed()
    errs = [abs(f["err"]) for f in flows if f["err"] is not None]
    within = sum(1 for e in errs if e <= FLOWS_TOL)
    worst = max(flows, key=lambda f: abs(f["err"]) if f["err"] is not None else -1) if flows else None
    out = {"flows": n, "measured": len(flows), "windows": windows, "window_s": 1.0, "tolerance": FLOWS_TOL,
           "rates_bps": [FLOWS_MIN, FLOWS_MAX], "total_target_bps": _r(sum(rates), 0),
           "total_goodput_bps": _r(sum(f["goodput_bps"] or 0 for f in flows), 0),
           "rates_applied_in_kernel": applied,
           "within_tol": within, "worst_err": worst["err"] if worst else None, "worst_flow": worst,
           "mean_abs_err": _r(_mean(errs), 5), "mean_err": _r(_mean([f["err"] for f in flows if f["err"] is not None]), 5),
           "veth_tx_bytes_per_skb": _r(skb, 0),
           "flows_with_burst_resolution_over_tol": sum(1 for f in flows if (f["burst_resolution"] or 0) > FLOWS_TOL),
           "within_tol_or_one_burst": sum(1 for f in flows if f["err"] is not None
                                          and abs(f["err"]) <= max(FLOWS_TOL, f["burst_resolution"] or 0)),
           "system": sysd, "per_flow": flows}
    log(f"{n} flows: {within}/{len(flows)} within {FLOWS_TOL:.0%}, worst {_pct(out['worst_err'])}, "
        f"mean |err| {_pct(out['mean_abs_err'], False)}, {skb:.0f} B/skb, CPU {sysd['cpu_busy_cores']} cores")
    return out


def section_flows(bed: Bed, cg: str, keeper: Keeper, n: int, windows: int, quick: bool, log, quiet: Quiet) -> dict:
    """The default kernel settings; in full mode also with tcp_tso_rtt_log=0 (see TSO_NOTE)."""
    out = with_tso_rtt_log(bed, None, lambda: flows_run(bed, cg, keeper, n, windows, log, quiet))
    out["tso_note"] = TSO_NOTE
    if not quick:
        out["tso_rtt_log0"] = with_tso_rtt_log(bed, "0", lambda: flows_run(bed, cg, keeper, n, windows, log, quiet))
    return out


def section_map_full(bed: Bed, n_max: int, extra: int, windows: int, log) -> dict:
    """Pacer(max_flows=n_max) on its own cgroup; n_max+extra selected flows (port selector:
    iperf3's control connection to that port is one of them)."""
    from hostctl.core.pace import PaceTable

    cg = bed.cgroup("f")
    keeper = bed.pacer(cg, max_flows=n_max)
    pin_dir = keeper.p.pin_dir
    try:
        rate = 50 * MBIT
        port = 5501
        keeper.apply(PaceTable(ports={(port, "remote"): 1}, slot_rates={1: rate // 8}))
        streams = n_max + extra - 1  # + the control connection = n_max + extra selected flows
        cport = bed.cport(streams)
        r = bulk_run(bed, cg, port=port, cport=cport, windows=windows, streams=streams)
        ctl = keeper.ctl()
        recs = {f.key.lport: f for f in keeper.flows() if f.key.rport == port}
        intact = keeper.intact()
    finally:
        keeper.close()
        bed.keepers.remove(keeper)
    secs = len(r["per_stream_windows"])
    per = []
    for cp in range(cport, cport + streams):
        got = sum(w.get(cp, 0) for w in r["per_stream_windows"]) * 8 / secs if secs else None
        per.append({"cport": cp, "in_map": cp in recs, "goodput_bps": _r(got, 0),
                    "paced": got is not None and got <= rate * (1 + FLOWS_TOL)})
    control_in_map = any(lp < cport or lp >= cport + streams for lp in recs)
    not_in = [p for p in per if not p["in_map"]]
    in_ = [p for p in per if p["in_map"]]
    out = {"max_flows": n_max, "pin_dir": pin_dir, "selected_flows": n_max + extra, "data_streams": streams,
           "control_connection_selected": True, "control_connection_in_map": control_in_map,
           "rate_bps": rate, "expected_flows_full": extra, "flows_full": ctl["flows_full"],
           "map_entries": len(recs), "flows_full_ok": ctl["flows_full"] == extra,
           "streams_in_map": len(in_), "streams_not_in_map": len(not_in),
           "in_map_paced": sum(1 for p in in_ if p["paced"]),
           "not_in_map_unpaced": sum(1 for p in not_in if not p["paced"]),
           "in_map_goodput_mean_bps": _r(_mean([p["goodput_bps"] for p in in_ if p["goodput_bps"] is not None]), 0),
           "not_in_map_goodput_mean_bps": _r(_mean([p["goodput_bps"] for p in not_in
                                                    if p["goodput_bps"] is not None]), 0),
           "setopt_errors": ctl["setopt_errors"], "per_stream": per, "pacer_intact": intact}
    out["ok"] = (intact["ok"] and out["flows_full_ok"] and out["streams_not_in_map"] == extra and out["not_in_map_unpaced"] == extra
                 and out["in_map_paced"] == out["streams_in_map"])
    log(f"map full: max_flows {n_max}, {n_max + extra} selected, flows_full {ctl['flows_full']} (expected {extra}), "
        f"{out['not_in_map_unpaced']}/{len(not_in)} extra flows unpaced, {out['in_map_paced']}/{len(in_)} in-map paced")
    return out


def section_overhead(bed: Bed, cg_a: str, cg_b: str, keeper: Keeper, repeat: int, windows: int, log,
                     quiet: Quiet) -> dict:
    from hostctl.core.pace import PaceTable
    from hostctl.core.types import FlowKey
    from hostctl.datapath import bpfsys

    port = 5601
    pin = ["-A", "0,1"]  # iperf3 client on CPU 0, server on CPU 1: placement noise out of the ratios
    configs = ("a", "b", "c")
    desc = {"a": "no program attached (cgroup without hc_pace)",
            "b": "program attached, flow selected by 4-tuple, no rate (counted, unlimited)",
            "c": "program attached, flow not selected, track-all on (a 4-tuple selector for another flow)"}

    def prepare(cfg: str, cport: int) -> str:
        key = FlowKey(TX_ADDR, cport, RX_ADDR, port)
        other = FlowKey(TX_ADDR, 1, RX_ADDR, 9)  # never exists
        if cfg == "a":
            keeper.apply(PaceTable())
            return cg_a
        keeper.apply(PaceTable(flows={key: 1}) if cfg == "b" else PaceTable(flows={other: 1}))
        return cg_b

    runs: list[dict] = []  # kept rounds
    discarded: list[dict] = []  # rounds redone because other load disturbed one of their runs
    redo_budget = repeat
    for rnd in range(repeat):
        order = configs[rnd % 3:] + configs[:rnd % 3]
        while True:
            quiet.wait()
            this = []
            for cfg in order:
                cport = bed.cport()
                cg = prepare(cfg, cport)
                r = bulk_run(bed, cg, port=port, cport=cport, windows=windows, extra=pin)
                selected = any(f.key.lport == cport for f in keeper.flows())
                this.append({"round": rnd, "config": cfg, "goodput_bps": r["goodput_bps"],
                             "windows_bps": r["windows_bps"], "sender_cpu_pct": r["sender_cpu_pct"],
                             "receiver_cpu_pct": r["receiver_cpu_pct"], "flow_in_map": selected,
                             "system": r["system"], "disturbed": _disturbed(r)})
                keeper.apply(PaceTable())
                keeper.forget_closed()
            if any(x["disturbed"] for x in this) and redo_budget > 0:
                redo_budget -= 1
                discarded += this
                log(f"overhead round {rnd + 1}: disturbed by other load "
                    f"({max((x['system'].get('foreign_cpu_cores') or 0) for x in this):.2f} cores), redone")
                continue
            break
        runs += this
        log(f"overhead round {rnd + 1}/{repeat}: " + ", ".join(
            f"{x['config']} {_fmt_rate(x['goodput_bps'])}" for x in this))
    by = {(x["round"], x["config"]): x for x in runs}
    out: dict[str, Any] = {"configs": desc, "repeat": repeat, "windows": windows, "window_s": 1.0,
                           "pinned": "iperf3 -A 0,1 (client CPU 0, server CPU 1) in every run",
                           "target_b_over_a": OVERHEAD_TARGET, "runs": runs, "discarded_runs": discarded,
                           "disturbed_rounds_kept": len({x["round"] for x in runs if x["disturbed"]})}
    for cfg in ("b", "c"):
        pairs = [(by[(k, cfg)], by[(k, "a")]) for k in range(repeat)
                 if (k, "a") in by and (k, cfg) in by and by[(k, "a")]["goodput_bps"] and by[(k, cfg)]["goodput_bps"]]
        ratios = [x["goodput_bps"] / a["goodput_bps"] for x, a in pairs]
        # per sender CPU-second: cancels a sender that got less CPU (other load), not a costlier path
        per_cpu = [(x["goodput_bps"] / x["sender_cpu_pct"]) / (a["goodput_bps"] / a["sender_cpu_pct"])
                   for x, a in pairs if x["sender_cpu_pct"] and a["sender_cpu_pct"]]
        out[f"ratio_{cfg}_a"] = {"mean": _r(_mean(ratios), 4), "ci95": [_r(x, 4) for x in _ci95(ratios) or []] or None,
                                 "median": _r(float(sorted(ratios)[len(ratios) // 2]) if ratios else None, 4),
                                 "per_round": [_r(x, 4) for x in ratios],
                                 "per_sender_cpu_mean": _r(_mean(per_cpu), 4),
                                 "per_sender_cpu_ci95": [_r(x, 4) for x in _ci95(per_cpu) or []] or None}
    for cfg in configs:
        g = [x["goodput_bps"] for x in runs if x["config"] == cfg]
        out[f"goodput_{cfg}_mean_bps"] = _r(_mean(g), 0)
    # BPF run-time stats: separate runs (the accounting itself costs two clock reads per call)
    stats: dict[str, Any] = {}
    fd = bpfsys.enable_stats()
    try:
        for cfg in ("b", "c"):
            cport = bed.cport()
            cg = prepare(cfg, cport)
            quiet.wait()
            s0 = keeper.prog_stats()
            t0 = time.monotonic()
            r = bulk_run(bed, cg, port=port, cport=cport, windows=windows, extra=pin)
            dt = time.monotonic() - t0
            s1 = keeper.prog_stats()
            calls = s1["run_cnt"] - s0["run_cnt"]
            ns = s1["run_time_ns"] - s0["run_time_ns"]
            acked = [f for f in keeper.flows() if f.key.lport == cport]
            busy = r["system"].get("cpu_busy_cores") or 0
            stats[cfg] = {"run_cnt": calls, "run_time_ns": ns, "ns_per_call": _r(ns / calls, 1) if calls else None,
                          # if the flow is CPU-bound, the program's share of the CPU time spent is the
                          # throughput it can cost: an estimate of b/a (c/a) that other load does not blur
                          "predicted_ratio": _r(1 - (ns / (dt * 1e9)) / busy, 4) if busy else None,
                          "cpu_busy_cores": busy,
                          "calls_per_s": _r(calls / dt, 0), "seconds": _r(dt, 3),
                          "cpu_fraction_of_one_core": _r(ns / (dt * 1e9), 5),
                          "goodput_bps": r["goodput_bps"],
                          "bytes_acked_per_call": _r(acked[0].bytes_acked / acked[0].callbacks, 0)
                          if acked and acked[0].callbacks else None}
            keeper.apply(PaceTable())
            keeper.forget_closed()
    finally:
        os.close(fd)
    out["prog_stats"] = stats
    out["b_over_a_ok"] = (out["ratio_b_a"]["mean"] or 0) >= OVERHEAD_TARGET
    ci = out["ratio_b_a"]["ci95"]
    out["b_over_a_ci_low_ok"] = bool(ci) and ci[0] >= OVERHEAD_TARGET
    log(f"overhead: b/a {out['ratio_b_a']['mean']} {out['ratio_b_a']['ci95']}, c/a {out['ratio_c_a']['mean']} "
        f"{out['ratio_c_a']['ci95']}; per call b {stats.get('b', {}).get('ns_per_call')} ns, "
        f"c {stats.get('c', {}).get('ns_per_call')} ns")
    return out


# ==================================================================== machine info

def machine_info(bed: Bed | None = None) -> dict:
    info: dict[str, Any] = {"nproc": os.cpu_count(), "kernel": platform.release(),
                            "date": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
                            "python": platform.python_version(), "hostname": platform.node()}
    try:
        with open("/proc/cpuinfo") as f:
            info["cpu"] = next((ln.split(":", 1)[1].strip() for ln in f if ln.startswith("model name")), None)
    except OSError:
        pass
    try:
        with open("/proc/loadavg") as f:
            info["loadavg"] = f.read().split()[:3]
    except OSError:
        pass
    r = _sh(["iperf3", "--version"], check=False)
    info["iperf3"] = (r.stdout.splitlines() or [""])[0].strip()
    if bed is not None:
        r = _sh(["ip", "netns", "exec", bed.tx, "cat", "/proc/sys/net/ipv4/tcp_congestion_control"], check=False)
        info["tcp_congestion_control"] = r.stdout.strip() or None
        try:
            info["mtu"] = bed.mtu()
        except Exception:  # noqa: BLE001
            pass
    try:
        from hostctl.datapath import bpfsys
        from hostctl.datapath.pacer import cgroup2_root

        fd = os.open(cgroup2_root(), os.O_RDONLY | os.O_DIRECTORY)
        try:
            info["sock_ops_progs_on_cgroup2_root"] = len(bpfsys.prog_query(fd, bpfsys.BPF_CGROUP_SOCK_OPS))
        finally:
            os.close(fd)
    except Exception:  # noqa: BLE001
        pass
    return info


# ==================================================================== summary, table, plots

def summary_rows(res: dict) -> list[tuple[str, str, str, str]]:
    """(section, result, target, met) rows."""
    rows = []
    up = res.get("unpaced") or {}
    if up.get("goodput_bps"):
        rows.append(("unpaced ceiling", f"{_fmt_rate(up['goodput_bps'])} (sender CPU {up.get('sender_cpu_pct')}%)",
                     "\u2014", ""))
    acc = res.get("accuracy") or {}
    if acc.get("targets"):
        hm = acc.get("header_model") or {}
        rows.append(("accuracy, 1 s windows", f"max |err| {_pct(acc.get('max_abs_err'), False)}, mean |err| "
                     f"{_pct(acc.get('mean_abs_err'), False)} over {len(acc['targets'])} targets"
                     + (f"; missed: {', '.join(_fmt_rate(x) for x in acc['missed'])}" if acc.get("missed") else ""),
                     f"each window within {ACC_TOL:.0%}", "yes" if acc.get("all_within_tol") else "NO"))
        rows.append(("  header bytes in the rate?",
                     f"mean |err| payload model {_pct(hm.get('mean_abs_err_payload_model'), False)}, header model "
                     f"{_pct(hm.get('mean_abs_err_header_model'), False)}",
                     "report", {True: "counted", False: "not counted", None: "?"}[hm.get("pacing_counts_header_bytes")]))
    st = res.get("step") or {}
    for r in st.get("runs") or []:
        ok = r["unsettled"] == 0 and (r["slot_err_max_abs"] or 1) <= STEP_TOL
        tso = r.get("tcp_tso_rtt_log")
        rows.append((f"step, 60 ms slots ({r['name']}" + (", tso_rtt_log=0" if tso == 0 else "") + ")",
                     f"settle median {r['settle_ms_median']} ms, max {r['settle_ms_max']} ms, unsettled "
                     f"{r['unsettled']}/{len(r['changes'])}; slot |err| mean {_pct(r['slot_err_mean_abs'], False)}, "
                     f"max {_pct(r['slot_err_max_abs'], False)}; {r.get('veth_tx_bytes_per_skb') or 0:.0f} B/skb "
                     f"(one = {(r.get('burst_share_of_window_at_min_rate') or 0) * 100:.0f}% of a 20 ms window at "
                     "the lowest rate)",
                     f"settle within the slot; slot err \u2264 {STEP_TOL:.0%}", "yes" if ok else "NO"))
    fl = res.get("flows200") or {}
    for v, label in ((fl, ""), (fl.get("tso_rtt_log0") or {}, ", tso_rtt_log=0")):
        if v.get("measured"):
            rows.append((f"{v['flows']} flows, 1..20 Mbit/s{label}",
                         f"{v['within_tol']}/{v['measured']} within {FLOWS_TOL:.0%} "
                         f"({v.get('within_tol_or_one_burst')} within max(10%, one TSO burst)), worst "
                         f"{_pct(v['worst_err'])}, mean |err| {_pct(v['mean_abs_err'], False)} over {v['windows']} s; "
                         f"{v.get('veth_tx_bytes_per_skb') or 0:.0f} B/skb, CPU "
                         f"{(v.get('system') or {}).get('cpu_busy_cores')} cores",
                         f"within {FLOWS_TOL:.0%}", "yes" if v["within_tol"] == v["flows"] else "NO"))
    mf = res.get("map_full") or {}
    if "flows_full" in mf:
        rows.append((f"map full (max_flows {mf['max_flows']})",
                     f"{mf['selected_flows']} selected: flows_full {mf['flows_full']} (expected "
                     f"{mf['expected_flows_full']}), {mf['not_in_map_unpaced']}/{mf['streams_not_in_map']} extra "
                     f"flows unpaced ({_fmt_rate(mf['not_in_map_goodput_mean_bps'])} each), "
                     f"{mf['in_map_paced']}/{mf['streams_in_map']} in map paced", "flows_full == k", 
                     "yes" if mf.get("ok") else "NO"))
    ov = res.get("overhead") or {}
    if ov.get("ratio_b_a"):
        ps = ov.get("prog_stats") or {}
        for cfg, tgt in (("b", f"\u2265 {OVERHEAD_TARGET}"), ("c", "report")):
            rr = ov[f"ratio_{cfg}_a"]
            ci = rr.get("ci95")
            st = ps.get(cfg) or {}
            met = ""
            if cfg == "b":
                met = "NO"
                if ov.get("b_over_a_ok"):
                    met = "yes" if ci and ci[0] >= OVERHEAD_TARGET else "mean only (CI wider)"
            rows.append((f"overhead {cfg}/a ({ov['repeat']} rounds"
                         + (f", {ov['disturbed_rounds_kept']} disturbed" if ov.get("disturbed_rounds_kept") else "")
                         + ")",
                         f"mean {rr['mean']}" + (f" [{ci[0]}, {ci[1]}]" if ci else "") + f", median {rr['median']}"
                         + f"; prog {st.get('ns_per_call')} ns/call \u00d7 {st.get('calls_per_s')} calls/s = "
                         + f"{(st.get('cpu_fraction_of_one_core') or 0) * 100:.2f}% of a core"
                         + f" \u2192 predicted {st.get('predicted_ratio')}",
                         tgt, met))
    for name in ("unpaced", "accuracy", "step", "flows200", "map_full", "overhead"):
        e = (res.get(name) or {}).get("error")
        if e:
            rows.append((name, f"FAILED: {e}", "", "NO"))
    return rows


def render_tables(res: dict) -> list:
    from rich.table import Table

    m = res.get("machine") or {}
    tables = []
    acc = res.get("accuracy") or {}
    if acc.get("targets") or acc.get("skipped"):
        t = Table(title="Pacing accuracy: one bulk flow, receiver goodput per 1 s window (first window skipped)",
                  caption=("err = goodput/target \u2212 1 (rate counts TCP payload); err hdr = goodput/(target\u00b7"
                           f"MSS/(MSS+{HDR_BYTES})) \u2212 1 (if it counted IP+TCP headers); \u2264{ACC_TOL:.0%}: every window's err; "
                           "busiest CPU: busy % of the busiest CPU during the run (softirq % of it); other load: user time of "
                           "processes that are not ours, in cores"))
        for c in ("target", "goodput", "err mean", "max |err|", "err hdr mean", "max |err hdr|", f"\u2264{ACC_TOL:.0%}",
                  "busiest CPU (softirq)", "other load"):
            t.add_column(c, justify="right")
        for r in acc.get("targets", []):
            sy = r.get("system") or {}
            fo = sy.get("foreign_cpu_cores")
            t.add_row(_fmt_rate(r["target_bps"]), _fmt_rate(r["goodput_bps"]), _pct(r["err_mean"]),
                      _pct(r["err_max_abs"], False), _pct(r["err_hdr_mean"]), _pct(r["err_hdr_max_abs"], False),
                      "yes" if r["within_tol"] else "NO",
                      f"{sy.get('busiest_cpu_pct')}% ({sy.get('busiest_cpu_softirq_pct')}%)",
                      "\u2014" if fo is None else f"{fo:.2f} cores")
            c = r.get("control_fq_rate")
            if c:
                cs = c.get("system") or {}
                cf = cs.get("foreign_cpu_cores")
                t.add_row("  control", _fmt_rate(c["goodput_bps"]) + " (--fq-rate, no BPF)", _pct(c["err_mean"]),
                          _pct(c["err_max_abs"], False), "", "", "yes" if (c["err_max_abs"] or 1) <= ACC_TOL else "NO",
                          f"{cs.get('busiest_cpu_pct')}% ({cs.get('busiest_cpu_softirq_pct')}%)",
                          "\u2014" if cf is None else f"{cf:.2f} cores")
        for sk in acc.get("skipped", []):
            t.add_row(_fmt_rate(sk["target_bps"]), f"skipped (> {ACC_CEILING:.0%} of unpaced)", "", "", "", "", "", "",
                      "")
        tables.append(t)
    st = res.get("step") or {}
    hold = next((r for r in st.get("runs") or [] if r["name"] == "hold"), None)
    if hold:
        t = Table(title="Step response (hold schedule, 60 ms slots, receiver 5 ms bins)",
                  caption="settle: until every 20 ms window is within 10% of the new target")
        for c in ("t (ms)", "from \u2192 to", "settle", "slot errs (mean over slot after 10 ms)"):
            t.add_column(c, justify="right")
        for ch in hold["changes"]:
            k = ch["k"]
            errs = [s["err"] for s in hold["slots"][k:k + hold["hold_slots"]]]
            t.add_row(f"{ch['t_ms']:.0f}", f"{ch['from_bps'] / MBIT:.0f} \u2192 {ch['to_bps'] / MBIT:.0f} Mbit/s",
                      "\u2014" if ch["settle_ms"] is None else f"{ch['settle_ms']:.1f} ms",
                      " ".join(_pct(e) for e in errs))
        tables.append(t)
    t = Table(title=f"hostctl pacing benchmark ({m.get('nproc')} CPUs, kernel {m.get('kernel')}, {m.get('date')})")
    for c in ("section", "result", "target", "met"):
        t.add_column(c, justify="left")
    for row in summary_rows(res):
        t.add_row(*row)
    tables.append(t)
    return tables


def print_tables(res: dict, console=None) -> None:
    if console is None:
        from rich.console import Console
        console = Console(width=160)
    for t in render_tables(res):
        console.print(t)


def plot(res: dict, out_dir: str) -> list[str]:
    """pacing_accuracy.png, pacing_step.png, pacing_flows200.png (those whose section has data)."""
    from hostctl_lab.bench import agg_figure

    Figure, FigureCanvasAgg = agg_figure()
    import numpy as np

    paths = []
    acc = res.get("accuracy") or {}
    if acc.get("targets"):
        rows = acc["targets"]
        fig = Figure(figsize=(12, 5))
        FigureCanvasAgg(fig)
        ax = fig.add_subplot(1, 2, 1)
        tg = np.array([r["target_bps"] for r in rows], dtype=float) / MBIT
        xs = np.geomspace(tg.min() / 1.5, tg.max() * 1.5, 50)
        ax.fill_between(xs, xs * (1 - ACC_TOL), xs * (1 + ACC_TOL), color="0.85", label=f"target \u00b1{ACC_TOL:.0%}")
        ax.plot(xs, xs, color="0.4", lw=1, label="goodput = target")
        hf = _mean([r["hdr_factor"] for r in rows]) or 1.0
        ax.plot(xs, xs * hf, color="C3", lw=1, ls="--", label=f"expected if headers counted (\u00d7{hf:.3f})")
        for r in rows:
            w = np.array(r["windows_bps"], dtype=float) / MBIT
            ax.scatter(np.full(len(w), r["target_bps"] / MBIT), w, s=10, color="C0", alpha=0.5)
        ax.scatter(tg, np.array([r["goodput_bps"] for r in rows], dtype=float) / MBIT, s=40, color="C0",
                   marker="D", label="goodput (mean; dots: 1 s windows)")
        up = (res.get("unpaced") or {}).get("goodput_bps")
        if up:
            ax.axhline(up / MBIT, color="C2", lw=1, ls=":", label=f"unpaced {_fmt_rate(up)}")
        for sk in acc.get("skipped", []):
            ax.axvline(sk["target_bps"] / MBIT, color="0.6", lw=0.8, ls=":")
        ax.set_xscale("log")
        ax.set_yscale("log")
        ax.set_xlabel("target pacing rate (Mbit/s)")
        ax.set_ylabel("receiver goodput (Mbit/s)")
        ax.set_title("one bulk flow: goodput vs target (dotted verticals: skipped targets)", fontsize=10)
        ax.grid(alpha=0.3, which="both")
        ax.legend(fontsize=8, loc="upper left")
        ax = fig.add_subplot(1, 2, 2)
        ax.axhspan(-ACC_TOL * 100, ACC_TOL * 100, color="0.9")
        ax.axhline(0, color="0.4", lw=1)
        for key, color, label in (("err_windows", "C0", "err: goodput/target \u2212 1 (rate = TCP payload)"),
                                  ("err_hdr_windows", "C3", f"err hdr: vs target\u00b7MSS/(MSS+{HDR_BYTES}) "
                                                            "(rate incl. headers)")):
            first = True
            for r in rows:
                e = np.array([x for x in r[key] if x is not None], dtype=float) * 100
                ax.scatter(np.full(len(e), r["target_bps"] / MBIT), e, s=14, color=color, alpha=0.7,
                           label=label if first else None)
                first = False
        ax.set_xscale("log")
        ax.set_xlabel("target pacing rate (Mbit/s)")
        ax.set_ylabel("error per 1 s window (%)")
        ax.set_title(f"error of every window under both header models (band: \u00b1{ACC_TOL:.0%})", fontsize=10)
        ax.grid(alpha=0.3, which="both")
        ax.legend(fontsize=8, loc="lower left")
        fig.tight_layout()
        p = os.path.join(out_dir, "pacing_accuracy.png")
        fig.savefig(p, dpi=110)
        paths.append(p)
    st = res.get("step") or {}
    if st.get("runs"):
        runs = st["runs"]
        fig = Figure(figsize=(11, 3.4 * len(runs)))
        FigureCanvasAgg(fig)
        for i, r in enumerate(runs):
            ax = fig.add_subplot(len(runs), 1, i + 1)
            tr = r["trace"]
            ax.plot(tr["bin_t_ms"], np.array(tr["bin_bps"], dtype=float) / MBIT, color="0.75", lw=0.7,
                    label=f"measured, {tr['bin_ms']:g} ms bins")
            wt = np.array(tr["win_t_ms"], dtype=float) + STEP_WIN_S * 1e3 / 2
            ax.plot(wt, np.array(tr["win_bps"], dtype=float) / MBIT, color="C0", lw=1.3,
                    label=f"measured, {STEP_WIN_S * 1e3:g} ms windows (plotted at their centre)")
            tt = [q[0] for q in tr["target"]]
            tv = [q[1] / MBIT for q in tr["target"]]
            ax.step(tt, tv, where="post", color="C3", lw=1.5, label="target (at the map write)")
            for ch in r["changes"]:
                if ch["settle_ms"] is not None:
                    ax.plot([ch["t_ms"], ch["t_ms"] + ch["settle_ms"]], [ch["to_bps"] / MBIT * 1.12] * 2, color="C2",
                            lw=2)
                else:
                    ax.text(ch["t_ms"], ch["to_bps"] / MBIT * 1.12, "unsettled", color="C2", fontsize=7)
            ax.set_ylim(0, max(tv) * 1.35)
            ax.set_xlabel("time since the first slot (ms)")
            ax.set_ylabel("Mbit/s")
            ax.set_title(f"{r['name']}: {r['hold_slots']} slot(s) of {st['slot_ms']:g} ms per rate, "
                         f"tcp_tso_rtt_log={r.get('tcp_tso_rtt_log')} ({r.get('veth_tx_bytes_per_skb') or 0:.0f} "
                         "B/skb); green bars: settle time", fontsize=10)
            ax.grid(alpha=0.3)
            ax.legend(fontsize=7, loc="upper center", ncol=3)
        fig.tight_layout()
        p = os.path.join(out_dir, "pacing_step.png")
        fig.savefig(p, dpi=110)
        paths.append(p)
    fl = res.get("flows200") or {}
    if fl.get("per_flow"):
        variants = [("default", fl, "C0")]
        if (fl.get("tso_rtt_log0") or {}).get("per_flow"):
            variants.append(("tcp_tso_rtt_log=0", fl["tso_rtt_log0"], "C1"))
        fig = Figure(figsize=(12, 5))
        FigureCanvasAgg(fig)
        ax = fig.add_subplot(1, 2, 1)
        tmax = max(f["target_bps"] for f in fl["per_flow"]) / MBIT
        xs = np.linspace(0, tmax * 1.05, 10)
        ax.fill_between(xs, xs * (1 - FLOWS_TOL), xs * (1 + FLOWS_TOL), color="0.85", label=f"\u00b1{FLOWS_TOL:.0%}")
        ax.plot(xs, xs, color="0.4", lw=1)
        for name, v, color in variants:
            tg = np.array([f["target_bps"] for f in v["per_flow"]], dtype=float) / MBIT
            gp = np.array([f["goodput_bps"] or 0 for f in v["per_flow"]], dtype=float) / MBIT
            ax.scatter(tg, gp, s=10, color=color, alpha=0.7,
                       label=f"{name}: {v['within_tol']}/{v['measured']} within {FLOWS_TOL:.0%}")
        ax.set_xlabel("target (Mbit/s)")
        ax.set_ylabel(f"receiver goodput over {fl['windows']} s (Mbit/s)")
        ax.set_title(f"{fl['flows']} concurrent flows, per-flow rates by 4-tuple", fontsize=10)
        ax.grid(alpha=0.3)
        ax.legend(fontsize=8, loc="upper left")
        ax = fig.add_subplot(1, 2, 2)
        ax.axhspan(-FLOWS_TOL * 100, FLOWS_TOL * 100, color="0.9")
        for name, v, color in variants:
            tg = np.array([f["target_bps"] for f in v["per_flow"]], dtype=float) / MBIT
            er = np.array([(f["err"] or 0) * 100 for f in v["per_flow"]], dtype=float)
            ax.scatter(tg, er, s=10, color=color, alpha=0.7, label=name)
            tso = v.get("tcp_tso_rtt_log")
            if tso is not None:
                xx = np.linspace(tg.min(), tg.max(), 200)
                res_pct = np.array([burst_bytes(x * MBIT, tso) for x in xx]) * 8 / (fl["windows"] * xx * MBIT) * 100
                ax.plot(xx, res_pct, color=color, lw=0.8, ls=":", label=f"{name}: one TSO burst")
                ax.plot(xx, -res_pct, color=color, lw=0.8, ls=":")
        ax.set_ylim(-30, 30)
        ax.set_xlabel("target (Mbit/s)")
        ax.set_ylabel("error (%)")
        ax.set_title("per-flow error; dotted: one TSO burst as a share of the measured bytes", fontsize=10)
        ax.grid(alpha=0.3)
        ax.legend(fontsize=8, loc="upper right")
        fig.tight_layout()
        p = os.path.join(out_dir, "pacing_flows200.png")
        fig.savefig(p, dpi=110)
        paths.append(p)
    return paths


# ==================================================================== driver

def run(out_dir: str, quick: bool = False, repeat: int | None = None, console=None) -> dict:
    """Run every section, write <out_dir>/pacing.json and the PNGs, print the tables.
    Returns the results dict. Everything created is removed before returning."""
    from rich.console import Console

    con = console or Console(width=160)
    err_con = Console(stderr=True, width=160)
    repeat = repeat if repeat is not None else (2 if quick else 5)
    if repeat < 1:
        raise ValueError("repeat must be at least 1")
    os.makedirs(out_dir, exist_ok=True)
    t_start = time.monotonic()

    def log(msg: str) -> None:
        err_con.log(msg)

    res: dict[str, Any] = {"schema": SCHEMA, "quick": quick, "repeat": repeat}
    bed = Bed()
    res["bed"] = {"tag": bed.tag, "namespaces": [bed.rx, bed.tx], "rx_addr": RX_ADDR, "tx_addr": TX_ADDR,
                  "link": "veth pair, no qdisc shaping (pacing is the only limiter)"}
    w = 1 if quick else 4
    quiet = Quiet(budget_s=8.0 if quick else 60.0, each_s=3.0 if quick else 8.0)

    def section(name: str, fn: Callable[[], dict], keeper: Keeper | None = None) -> None:
        t0 = time.monotonic()
        try:
            res[name] = fn()
        except (KeyboardInterrupt, SystemExit):
            raise
        except Exception as e:  # one broken section does not lose the others
            log(f"[red]{name} failed: {e}")
            res[name] = {"error": f"{type(e).__name__}: {e}"}
        res[name]["elapsed_s"] = round(time.monotonic() - t0, 1)
        if keeper is not None:
            res[name]["pacer_intact"] = ok = keeper.intact()
            if not ok["ok"]:
                log(f"[red]{name}: the pacer was disturbed during the section ({ok}); its numbers are not valid")

    try:
        bed.up()
        res["machine"] = machine_info(bed)
        cg_a = bed.cgroup("a")
        cg_b = bed.cgroup("b")
        t0 = time.monotonic()
        keeper = bed.pacer(cg_b)
        res["bed"]["pacer_load_s"] = round(time.monotonic() - t0, 2)
        res["bed"]["pin_dirs"] = [keeper.p.pin_dir]
        res["bed"]["cgroups"] = {"a (no program)": cg_a, "b (hc_pace)": cg_b}
        section("unpaced", lambda: section_unpaced(bed, cg_a, w if quick else 3, log, quiet))
        unpaced = (res["unpaced"] or {}).get("goodput_bps") or 0
        section("accuracy", lambda: section_accuracy(bed, cg_b, cg_a, keeper, unpaced,
                                                     ACC_TARGETS_QUICK if quick else ACC_TARGETS, 2 if quick else 4,
                                                     log, quiet), keeper)
        section("step", lambda: section_step(bed, cg_b, keeper, quick, log, quiet), keeper)
        section("flows200", lambda: section_flows(bed, cg_b, keeper, FLOWS_N, 2 if quick else 4, quick, log, quiet),
                keeper)
        section("overhead", lambda: section_overhead(bed, cg_a, cg_b, keeper, repeat, 1 if quick else 3, log, quiet),
                keeper)
        section("map_full", lambda: section_map_full(bed, 4 if quick else 8, 2 if quick else 4, 1 if quick else 2,
                                                     log))
        ctl = keeper.ctl()
        res["pacer"] = {"ctl": ctl, "heartbeat_max_gap_s": round(keeper.max_gap_s, 3), "lease_s": 1.0,
                        "failopen_events": ctl["failopen_events"]}
    finally:
        res.setdefault("bed", {})["cgroups_created"] = list(bed.cgroups)
        with _signals_deferred():  # a second Ctrl-C must not cut the cleanup short
            cleanup_errors = bed.down()
        res.setdefault("bed", {})["cleanup_errors"] = cleanup_errors
        if cleanup_errors:
            log(f"[red]cleanup problems: {cleanup_errors}")
    res.setdefault("machine", machine_info(None))
    res["machine"]["loadavg_end"] = machine_info(None).get("loadavg")
    res["quiet_gate"] = quiet.to_dict()
    res["duration_s"] = round(time.monotonic() - t_start, 1)
    res["targets"] = {
        "accuracy_within_5pct": (res.get("accuracy") or {}).get("all_within_tol"),
        "flows200_all_within_10pct": (lambda f: f.get("within_tol") == f.get("flows") if f.get("measured") else None)(
            res.get("flows200") or {}),
        "map_full_ok": (res.get("map_full") or {}).get("ok"),
        "overhead_b_over_a_ge_0.97": (res.get("overhead") or {}).get("b_over_a_ok"),
    }
    res["plots"] = [os.path.basename(p) for p in plot(res, out_dir)]
    with open(os.path.join(out_dir, "pacing.json"), "w") as f:
        json.dump(res, f, indent=1)
    print_tables(res, con)
    con.print(f"wrote {os.path.join(out_dir, 'pacing.json')} and {', '.join(res['plots'])} "
              f"({res['duration_s']:.0f} s)")
    return res


class _signals_deferred:
    """Hold SIGINT/SIGTERM while cleaning up (main thread only); re-raise one afterwards."""

    def __enter__(self):
        self.old: dict[int, Any] = {}
        self.got: list[int] = []
        if threading.current_thread() is threading.main_thread():
            for sig in (signal.SIGINT, signal.SIGTERM):
                self.old[sig] = signal.signal(sig, lambda n, _f: self.got.append(n))
        return self

    def __exit__(self, *exc) -> bool:
        for sig, h in self.old.items():
            signal.signal(sig, h)
        if self.got and exc[0] is None:
            raise KeyboardInterrupt()
        return False


def _sigterm(*_a) -> None:
    raise KeyboardInterrupt()  # so that run()'s finally removes everything


def main(argv: Sequence[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv and argv[0] == "_recv":
        return _recv_main(argv[1:])
    if argv and argv[0] == "_send":
        return _send_main(argv[1:])
    ap = argparse.ArgumentParser(prog="python -m hostctl_lab.bench.pacing",
                                 description="Benchmark hc_pace (per-flow TCP pacing) between two namespaces.")
    ap.add_argument("--out", default="docs/results/pacing", help="output folder (pacing.json + PNGs)")
    ap.add_argument("--quick", action="store_true", help="a ~30 s version (fewer targets, shorter runs)")
    ap.add_argument("--repeat", type=int, default=None, help="interleaved overhead rounds (default 5; 2 with --quick)")
    a = ap.parse_args(argv)
    if os.geteuid() != 0:
        print("pacing benchmark: needs root (namespaces, cgroups, BPF)", file=sys.stderr)
        return 2
    old = None
    if threading.current_thread() is threading.main_thread():
        old = signal.signal(signal.SIGTERM, _sigterm)
    try:
        run(a.out, quick=a.quick, repeat=a.repeat)
    except KeyboardInterrupt:
        print("interrupted; everything created was removed", file=sys.stderr)
        return 130
    finally:
        if old is not None:
            signal.signal(signal.SIGTERM, old)
    return 0


if __name__ == "__main__":
    sys.exit(main())
