"""`hostctl bench`: run a scenario's jobs on a fresh emulated testbed once per
policy and repeat, interleaved, and collect JCTs, barrier waits, cross traffic,
link counters and CPU use.

One run = build the testbed; start one hostctl daemon per host (the policy
under test on the scenario's policy hosts that carry jobs, ``fifo`` elsewhere,
so every host NIC is the same htb shaper in every run); start the parameter
servers and wait until the daemons see them; start workers and cross traffic
at their arrival times; wait; stop the daemons (checking that the NIC's tbf came
back); tear the testbed down. Raw per-worker records and daemon logs stay in
``<out>/raw/<run>/``.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import threading
import time
import uuid
from dataclasses import dataclass, field

from hostctl import policy as policy_table
from hostctl.core.traffic import shards
from hostctl.errors import HostctlError
from hostctl_lab.bench.scenario import JobDef, Scenario
from hostctl_lab.testbed.net import Testbed

PY = sys.executable
PROCESSOR_NAME = "host"
"""Each host's emulated processor (host_cores); its socket is per network namespace."""
HOSTCTL = os.path.join(sys.prefix, "bin", "hostctl")
READY_TIMEOUT_S = 60.0
OBSERVE_EVERY_S = 1.0  # policy daemons' status (jobs, bands, flows) is sampled this often during a run


class RunError(HostctlError):
    pass


def policy_order(policies: tuple[str, ...], repeat: int) -> list[str]:
    """Repeat r runs the policies rotated by r, so drift of the machine hits each policy in each position."""
    k = repeat % len(policies)
    return list(policies[k:] + policies[:k])


def daemon_policy(policy: str) -> str:
    """`hostctl start --policy` of a bench policy (hostctl.policy.VARIANTS: mlcc-local is mlcc without
    switchemu, mlcc-fixed mlcc with --job-order fixed, one-ingress one with --ingress-rate, ...)."""
    return policy_table.variant(policy).policy


def host_jobs(sc: Scenario, host: str, workers: bool | None = None) -> list[dict]:
    """hostctl [[jobs]] entries for the DL traffic *sent* by `host`: its listening ports (PS shards,
    all-reduce ranks), torch ranks by command line, and with ``[hostctl] workers = true`` (or
    ``workers=True``: policy mlcc plans every DL flow) its PS workers by command line (their
    gradients go to a remote port)."""
    out = []
    workers = sc.hostctl.workers if workers is None else workers
    for j in sc.jobs:
        if j.kind == "ps" and workers and host in j.worker_hosts and host not in j.ps_hosts:
            # the gradients this host's workers send to the job's parameter servers
            match = rf"hostctl_lab\.workloads\.ps worker .*--job {re.escape(j.name)}( |$)"
            out.append({"name": j.name, "match": match, "model_size": j.model_bytes, "comm": "ps"})
            continue
        if j.kind == "ps":
            ports = [p for h, p in zip(j.ps_hosts, j.ports) if h == host]
        elif j.kind == "allreduce":
            ports = [p for h, p in zip(j.worker_hosts, j.ports) if h == host]
        else:
            if host in j.worker_hosts:
                out.append({"name": j.name, "match": rf"hostctl_lab\.workloads\.torchjob .*--job {re.escape(j.name)}( |$)",
                            "model_size": j.model_bytes})
            continue
        if ports:
            comm = {"comm": "ps"} if j.kind == "ps" else {"comm": "ring", "ring_size": len(j.worker_hosts)}
            out.append({"name": j.name, "ports": ports, "model_size": j.model_bytes, **comm})
    return out


def switch_topology(sc: Scenario, addr) -> str:
    """The testbed as a switchemu topology (docs/switchemu.md): one switch, or racks of hosts
    under tor0.. joined through agg by uplinks of the scenario's capacity."""
    t = sc.topology
    lines = []
    for r in range(t.racks):
        hosts = [h for h, rk in zip(t.hosts, t.rack_of) if rk == r]
        lines += ["[[switch]]", f'name = "{"sw0" if t.racks == 1 else f"tor{r}"}"',
                  "hosts = [" + ", ".join(f'"{h}={addr(h)}"' for h in hosts) + "]",
                  f'host_rate = "{t.link_bps}bit"']
        if t.racks > 1:
            lines += ['parent = "agg"', f'uplink_rate = "{t.uplink_bps}bit"']
        lines.append("")
    if t.racks > 1:
        lines += ["[[switch]]", 'name = "agg"', ""]
    return "\n".join(lines)


def _toml(jobs: list[dict]) -> str:
    lines = []
    for j in jobs:
        lines.append("[[jobs]]")
        lines.append(f"name = {json.dumps(j['name'])}")
        if "ports" in j:
            lines.append(f"ports = {json.dumps(j['ports'])}")
        else:
            lines.append(f"match = {json.dumps(j['match'])}")
        lines.append(f"model_size = {j['model_size']}")
        if "comm" in j:
            lines.append(f"comm = {json.dumps(j['comm'])}")
        if "ring_size" in j:
            lines.append(f"ring_size = {j['ring_size']}")
    return "\n".join(lines) + "\n"


class CpuSampler(threading.Thread):
    """Busy share of all CPUs (0..100 %) from /proc/stat every `period_s`."""

    def __init__(self, period_s: float = 0.5) -> None:
        super().__init__(daemon=True)
        self.period_s = period_s
        self.samples: list[float] = []
        self._halt = threading.Event()

    @staticmethod
    def _read() -> tuple[int, int]:
        with open("/proc/stat") as f:
            v = [int(x) for x in f.readline().split()[1:]]
        idle = v[3] + (v[4] if len(v) > 4 else 0)
        return sum(v), idle

    def run(self) -> None:
        t, i = self._read()
        while not self._halt.wait(self.period_s):
            t2, i2 = self._read()
            if t2 > t:
                self.samples.append(100.0 * (1 - (i2 - i) / (t2 - t)))
            t, i = t2, i2

    def stop(self) -> dict:
        self._halt.set()
        self.join(2)
        s = self.samples or [0.0]
        return {"mean_pct": sum(s) / len(s), "max_pct": max(s), "samples": len(self.samples)}


@dataclass
class Run:
    sc: Scenario
    policy: str
    repeat: int
    raw_dir: str
    tb: Testbed | None = None
    daemons: dict[str, subprocess.Popen] = field(default_factory=dict)
    daemon_policy: dict[str, str] = field(default_factory=dict)
    workers: dict[str, list[subprocess.Popen]] = field(default_factory=dict)
    servers: list[subprocess.Popen] = field(default_factory=list)
    cross: dict[str, list[subprocess.Popen]] = field(default_factory=dict)
    log: list[str] = field(default_factory=list)
    switch_ep: str = ""  # policy mlcc: the run's switchemu endpoint (ipc://)

    # --- processes ------------------------------------------------------------
    def _start(self, host: str, argv: list[str], tag: str, net_only: bool = False) -> subprocess.Popen:
        assert self.tb is not None
        err = open(os.path.join(self.raw_dir, f"{tag}.err"), "w")
        try:
            return self.tb.popen(host, argv, stdout=subprocess.PIPE, stderr=err, text=True, net_only=net_only)
        finally:
            err.close()

    def _addr(self, host: str) -> str:
        assert self.tb is not None
        return self.tb.host(host).addr

    def start_switch(self) -> None:
        """Policy mlcc: one switchemu for the whole fabric (``--name all``), on an ipc socket every
        host namespace reaches; it runs in the first host's namespace, so `testbed down` ends it."""
        assert self.tb is not None
        topo = os.path.join(self.raw_dir, "switch-topology.toml")
        with open(topo, "w") as f:
            f.write(switch_topology(self.sc, self._addr))
        self.switch_ep = f"ipc:///tmp/hc-sw-{os.getpid()}-{uuid.uuid4().hex[:8]}.sock"
        host = self.sc.topology.hosts[0]
        slot_s = self.sc.hostctl.slot_s
        p = self._start(host, [sys.executable, "-m", "switchemu.cli", "--bind", self.switch_ep, "--topology", topo,
                               "--name", "all", "--slot-ms", f"{slot_s * 1000:g}", "--log-level", "WARNING"],
                        "switchemu", net_only=True)
        from hostctl.policy.switchclient import SwitchClient

        with SwitchClient([self.switch_ep]) as c:
            deadline = time.monotonic() + READY_TIMEOUT_S
            while c.probe(slot_s, timeout_s=0.5).error is not None:
                if p.poll() is not None or time.monotonic() > deadline:
                    err = open(os.path.join(self.raw_dir, "switchemu.err")).read().strip()
                    raise RunError(f"switchemu did not start: {err[-400:] or 'no answer'}")

    def switch_booking(self) -> dict:
        """How far the daemons' published schedules booked the fabric's links in this run: the switch's
        booking (switchemu status over its socket; docs/switchemu.md, "Booking"), or {"error": why} if it
        does not answer."""
        from hostctl.policy.switchclient import SwitchClient

        try:
            with SwitchClient([self.switch_ep]) as c:
                return c.status(timeout_s=3.0)["booking"]
        except (HostctlError, KeyError) as e:
            return {"error": f"switch booking not read: {e}"}

    def start_daemons(self) -> None:
        sc, tb = self.sc, self.tb
        assert tb is not None
        hs = sc.hostctl
        var = policy_table.variant(self.policy)
        mlcc = var.spec.plans_mlcc
        if var.switch:
            self.start_switch()
        if var.fabric_prio:
            from hostctl.core.joborder import fabric_order

            names = fabric_order([j.name for j in sc.jobs], var.job_order)
            ports = {j.name: list(j.ports) for j in sc.jobs}
            self.fabric_classes = [ports[n] for n in names]
            tb.prioritize_fabric(self.fabric_classes)
        for h in sc.topology.hosts:
            jobs = host_jobs(sc, h, workers=True if mlcc else None)
            # hosts without jobs, and every host under a lab oracle, run the baseline
            v = var if (h in sc.policy_hosts() and jobs and not var.fabric_prio) else policy_table.variant(policy_table.BASELINE)
            pol, spec = v.name, v.spec
            cfg = os.path.join(self.raw_dir, f"hostctl-{h}.toml")
            with open(cfg, "w") as f:
                f.write(_toml(jobs) if spec.needs_jobs else "")
            argv = [HOSTCTL, "start", "--policy", v.policy, "--iface", "eth0",
                    "--link-rate",
                    f"{sc.topology.link_bps}bit", "--other-rate", hs.other_rate, "--bands", str(hs.bands),
                    "--rr-interval", str(hs.rr_interval_s), "--rescan", str(hs.rescan_s), "--log-level", "WARNING"]
            if spec.needs_jobs:
                argv += ["--config", cfg]
            paced = spec.pacing
            if paced:  # the pacer watches this host's cgroup only
                argv += ["--cgroup", tb.host(h).cgroup, "--slot", f"{hs.slot_s:g}"]
            if spec.rates == "cap":
                argv += ["--cap", hs.cap or ""]
            if v.ingress:
                argv += ["--ingress-rate", hs.ingress_rate]
            if v.switch:
                argv += ["--switch", self.switch_ep]
            if not v.deps:
                argv += ["--no-deps"]
            if v.job_order:
                argv += ["--job-order", v.job_order]
            if mlcc:  # one host name for all namespaces: spread the planning offsets by host index
                from hostctl.daemon import nth_plan_offset

                argv += ["--plan-offset", f"{nth_plan_offset(sc.topology.index(h), hs.slot_s):.4f}"]
            self.daemons[h] = self._start(h, argv, f"hostctl-{h}", net_only=paced)
            self.daemon_policy[h] = pol

    def link_readings(self) -> tuple[dict[str, int], dict[str, int]]:
        """(bytes sent, packets dropped) so far per link: the two ends of a link_window."""
        assert self.tb is not None
        return self.tb.counters(), self.tb.drops()

    def daemon_status(self, host: str) -> dict | None:
        """The daemon's status over its control socket (in-process: no CLI spawn), None if it doesn't answer."""
        from hostctl import control
        from hostctl_lab.testbed.net import call_in_netns

        assert self.tb is not None
        try:
            return call_in_netns(self.tb.host(host).ns, lambda: control.request("status", timeout_s=3)["status"])
        except (HostctlError, OSError):
            return None

    def observe(self, res: dict) -> None:
        """Merge what each policy daemon sees now into res["daemons"]: per job its bands, the
        most flows and bytes seen. Sampled about once a second while jobs run."""
        for h in self.sc.topology.hosts:
            if self.daemon_policy.get(h) == policy_table.BASELINE:
                continue
            st = self.daemon_status(h)
            d = res["daemons"].setdefault(h, {"policy": self.daemon_policy[h], "samples": 0, "jobs": {}})
            if not st:
                continue
            d["samples"] += 1
            d["stats"] = st.get("stats")
            ml = (st.get("pacing") or {}).get("mlcc")
            if ml:  # the last sample: mode, negotiation latency, Algorithm 2's counters
                d["mlcc"] = {k: ml.get(k) for k in ("mode", "fallbacks", "negotiation_ms_p90", "errors",
                                                    "late_publishes", "deps", "wire_versions", "nic_avail_min_Bps",
                                                    "nic_capacity_Bps")}
            for j in st.get("jobs", []):
                e = d["jobs"].setdefault(j["job_id"], {"bands": [], "flows": 0, "tx_bytes": 0})
                if j["band"] is not None and j["band"] not in e["bands"]:
                    e["bands"].append(j["band"])
                e["flows"] = max(e["flows"], len(j["flows"]))
                e["tx_bytes"] = max(e["tx_bytes"], j["tx_bytes"])

    def wait_daemons(self, expect_jobs: bool) -> None:
        """Every daemon answers status; with expect_jobs, policy daemons list all their jobs."""
        deadline = time.monotonic() + READY_TIMEOUT_S
        pending = set(self.daemons)
        while pending:
            for h in sorted(pending):
                d = self.daemons[h]
                if d.poll() is not None:
                    err = open(os.path.join(self.raw_dir, f"hostctl-{h}.err")).read().strip()
                    raise RunError(f"hostctl daemon on {h} exited ({d.returncode}): {err[-400:]}")
                st = self.daemon_status(h)
                if st is None:
                    continue
                if expect_jobs and self.daemon_policy[h] != policy_table.BASELINE:
                    # the parameter servers are up by now; all-reduce and torch ranks start with their job
                    want = {j.name for j in self.sc.jobs if j.kind == "ps" and h in j.ps_hosts}
                    have = {j["job_id"].split(":")[0] for j in st.get("jobs", [])}
                    if not want <= have:
                        continue
                pending.discard(h)
            if pending and time.monotonic() > deadline:
                raise RunError(f"hostctl daemons on {', '.join(sorted(pending))} not ready within "
                               f"{READY_TIMEOUT_S:.0f} s")
            if pending:
                time.sleep(0.1)

    def start_processors(self) -> None:
        """[testbed] host_cores: one emulated processor on every host that runs workers."""
        cores = self.sc.topology.host_cores
        if not cores:
            return
        for h in sorted({h for j in self.sc.jobs for h in j.worker_hosts}):
            self.servers.append(self._start(h, [PY, "-m", "hostctl_lab.workloads.processor", "--name", PROCESSOR_NAME,
                                                "--cores", str(cores)], f"processor-{h}"))

    def start_servers(self) -> None:
        for j in self.sc.jobs:
            if j.kind != "ps":
                continue
            for s, (h, port, nbytes) in enumerate(zip(j.ps_hosts, j.ports, shards(j.model_bytes,
                                                                                      len(j.ps_hosts)))):
                self.servers.append(self._start(h, [
                    PY, "-m", "hostctl_lab.workloads.ps", "server", "--bind", self._addr(h), "--port", str(port),
                    "--workers", str(j.workers), "--iterations", str(j.iterations), "--shard-bytes", str(nbytes),
                    "--job", j.name], f"{j.name}.ps{s}"))

    def worker_argv(self, j: JobDef, k: int) -> list[str]:
        out = os.path.join(self.raw_dir, f"{j.name}.w{k}.json")
        shared = ["--compute-processor", PROCESSOR_NAME] if self.sc.topology.host_cores else []
        common = ["--job", j.name, "--rank", str(k), "--iterations", str(j.iterations), "--compute",
                  str(j.compute_s), *shared, "--model-bytes", str(j.model_bytes), "--out", out]
        if j.kind == "ps":
            ps = ",".join(f"{self._addr(h)}:{p}" for h, p in zip(j.ps_hosts, j.ports))
            overlap = ["--backward", str(j.backward), "--buckets", str(j.buckets)] if j.buckets > 1 else []
            return [PY, "-m", "hostctl_lab.workloads.ps", "worker", "--ps", ps, *common, *overlap]
        if j.kind == "allreduce":
            prev = (k - 1) % j.workers
            return [PY, "-m", "hostctl_lab.workloads.allreduce", "worker", "--world", str(j.workers), "--bind",
                    self._addr(j.worker_hosts[k]), "--port", str(j.ports[k]), "--prev",
                    f"{self._addr(j.worker_hosts[prev])}:{j.ports[prev]}", *common]
        return [PY, "-m", "hostctl_lab.workloads.torchjob", "--world", str(j.workers), "--master",
                f"{self._addr(j.worker_hosts[0])}:{j.ports[0]}", "--iface", "eth0", *common]

    def start_job(self, j: JobDef) -> None:
        self.workers[j.name] = [self._start(h, self.worker_argv(j, k), f"{j.name}.w{k}")
                                for k, h in enumerate(j.worker_hosts)]

    def start_cross(self, c) -> None:
        src, dst = c.src, c.dst
        srv = self._start(src, [PY, "-m", "hostctl_lab.tools.bulk", "serve", "--bind", self._addr(src), "--port",
                                str(c.port)], f"cross-{c.name}.srv")
        self.servers.append(srv)
        self.cross[c.name] = [self._start(dst, [PY, "-m", "hostctl_lab.tools.bulk", "recv", "--connect",
                                                f"{self._addr(src)}:{c.port}", "--seconds", str(c.duration_s),
                                                "--bucket", "0.5"], f"cross-{c.name}.r{i}")
                              for i in range(c.flows)]

    # --- the run ----------------------------------------------------------------
    def execute(self, tb_name: str, progress=None) -> dict:
        from hostctl_lab.workloads.summary import load_records, summarize

        sc = self.sc
        res: dict = {"repeat": self.repeat, "policy": self.policy, "ok": False, "error": None, "jobs": {},
                     "cross": {}, "links": {}, "cpu": {}, "daemons": {}}
        os.makedirs(self.raw_dir, exist_ok=True)
        cpu = CpuSampler()
        self.tb = Testbed(tb_name, sc.topology)
        try:
            self.tb.up()
            self.start_daemons()
            self.wait_daemons(expect_jobs=False)
            self.start_processors()
            self.start_servers()
            self.wait_daemons(expect_jobs=True)
            c0 = self.link_readings()
            cpu.start()
            t0 = time.monotonic()
            events = sorted([(j.arrival_s, 0, j) for j in sc.jobs] + [(c.start_s, 1, c) for c in sc.cross],
                            key=lambda e: (e[0], e[1]))
            deadline = t0 + sc.timeout_s
            ends: dict[str, float] = {}
            # the active window (the paper's utilisation window, "a fixed period when all jobs are active"):
            # from [bench] warmup after the last arrival (processes start, connect) to the first job's end
            active_from = t0 + max((j.arrival_s for j in sc.jobs), default=0.0) + sc.warmup_s
            active: list[tuple[float, tuple]] = []  # (time, (bytes, drops)) at the window's start and end
            next_observe = t0 + 0.5
            while True:
                now = time.monotonic()
                while events and t0 + events[0][0] <= now:
                    _, kind, obj = events.pop(0)
                    (self.start_job if kind == 0 else self.start_cross)(obj)
                if not active and not ends and now >= active_from:
                    active.append((now, self.link_readings()))
                for name, ps in self.workers.items():
                    if name not in ends and all(p.poll() is not None for p in ps):
                        ends[name] = time.monotonic()
                        if len(ends) == 1 and len(active) == 1:
                            active.append((ends[name], self.link_readings()))
                        if progress:
                            progress(len(ends))
                if now >= next_observe:
                    next_observe = now + OBSERVE_EVERY_S
                    self.observe(res)
                if not events and len(ends) == len(sc.jobs):
                    break
                if now > deadline:
                    raise RunError(f"jobs {', '.join(j.name for j in sc.jobs if j.name not in ends)} did not "
                                   f"finish within {sc.timeout_s:.0f} s (bench.timeout)")
                time.sleep(0.05)
            t_end = max(ends.values())
            c1 = self.link_readings()
            if policy_table.variant(self.policy).fabric_prio:  # bytes per band: 0 control, 1.. the jobs in order, last the rest
                res["fabric_bands"] = {"order": self.fabric_classes, "bytes": self.tb.fabric_band_bytes()}
            res["tcp"] = self.tcp_counters()
            res["cpu"] = cpu.stop()
            res["duration_s"] = t_end - t0
            for c in sc.cross:
                res["cross"][c.name] = self._collect_cross(c.name, deadline)
            for j in sc.jobs:
                files = [os.path.join(self.raw_dir, f"{j.name}.w{k}.json") for k in range(j.workers)]
                bad = [p.returncode for p in self.workers[j.name] if p.returncode != 0]
                summ = summarize(load_records(files))
                summ["arrival_s"] = j.arrival_s
                if bad:
                    summ.setdefault("errors", []).append(f"{len(bad)} worker(s) exited with {bad[0]}")
                res["jobs"][j.name] = summ
            rates = {ln.name: ln.rate_bps for ln in self.tb.links()}
            res["links"] = link_window(rates, *c0, *c1, t_end - t0)
            res["active"] = None
            if len(active) == 2:
                (ta, ca), (tb_, cb) = active
                res["active"] = {"start_s": ta - t0, "end_s": tb_ - t0,
                                 "links": link_window(rates, *ca, *cb, tb_ - ta)}
            self.observe(res)
            if self.switch_ep:  # the run's switchemu: how far the schedules booked its links
                res["booking"] = self.switch_booking()
            res["daemon_cpu"] = self.daemon_cpu(t_end - t0)
            self.stop_daemons()
            errors = [f"{n}: {e}" for n, s in res["jobs"].items() for e in s.get("errors", [])]
            errors += [e for c in res["cross"].values() for e in c["errors"]]
            res["ok"] = not errors
            res["error"] = "; ".join(errors[:3]) or None
        except HostctlError as e:
            res["error"] = str(e)
        finally:
            if cpu.is_alive():
                cpu.stop()
            self.tb.down()  # also ends switchemu (it runs in a host namespace)
            if self.switch_ep:
                try:
                    os.unlink(self.switch_ep[len("ipc://"):])
                except OSError:
                    pass
        return res

    def _collect_cross(self, name: str, deadline: float) -> dict:
        """Bytes and throughput of one cross-traffic entry; a receiver that failed is an error of the run."""
        total, secs, errors = 0, 0.0, []
        for i, p in enumerate(self.cross.get(name, [])):
            try:
                out, _ = p.communicate(timeout=max(1.0, deadline - time.monotonic()))
                d = json.loads(out)
                total += d["total_bytes"]
                secs = max(secs, d["seconds"])
            except (subprocess.TimeoutExpired, ValueError, KeyError):
                err = open(os.path.join(self.raw_dir, f"cross-{name}.r{i}.err")).read().strip().splitlines()
                errors.append(f"cross traffic {name} receiver {i} failed: {err[-1] if err else 'no output'}")
        return {"bytes": total, "seconds": secs, "throughput_bps": total * 8 / secs if secs else 0.0,
                "errors": errors}

    # DSACKRecv: retransmissions the receiver already had (spurious); SACKReorder: reordering seen
    TCP_KEYS = ("TcpOutSegs", "TcpRetransSegs", "TcpExtTCPTimeouts", "TcpExtTCPLossProbes",
                "TcpExtTCPSpuriousRTOs", "TcpExtTCPFastRetrans", "TcpExtTCPDSACKRecv", "TcpExtTCPSACKReorder")

    def tcp_counters(self) -> dict:
        """TCP counters summed over the hosts (every host namespace is fresh, so these are this run's):
        retransmissions and timeouts (RTOs) explain a slow run better than any average."""
        assert self.tb is not None
        tot = dict.fromkeys(self.TCP_KEYS, 0)
        for h in self.tb.hosts():
            r = subprocess.run(["ip", "netns", "exec", h.ns, "nstat", "-asz", "--json"], capture_output=True,
                               text=True)
            try:
                kern = json.loads(r.stdout).get("kernel", {})
            except ValueError:
                continue
            for k in self.TCP_KEYS:
                tot[k] += int(kern.get(k, 0))
        return tot

    def daemon_cpu(self, seconds: float) -> dict:
        """CPU time each policy daemon used so far (user + system of the process the testbed started
        and its descendants: the daemon runs under a netns/cgroup wrapper), as seconds and as a share
        of one core over the run's `seconds`."""
        import psutil

        out = {}
        for h, d in self.daemons.items():
            if self.daemon_policy.get(h) == policy_table.BASELINE:
                continue
            cpu = 0.0
            try:
                root = psutil.Process(d.pid)
                procs = [root, *root.children(recursive=True)]
            except psutil.Error:
                procs = []
            for p in procs:
                try:
                    t = p.cpu_times()
                    cpu += t.user + t.system
                except psutil.Error:
                    continue
            out[h] = {"cpu_s": cpu, "core_pct": 100.0 * cpu / seconds if seconds > 0 else 0.0}
        return out

    def stop_daemons(self) -> None:
        """Stop every daemon and check that the host NIC's tbf came back (hostctl restores what it replaced)."""
        from hostctl import control
        from hostctl_lab.testbed.net import call_in_netns

        assert self.tb is not None
        for h, d in self.daemons.items():
            try:
                call_in_netns(self.tb.host(h).ns, lambda: control.request("stop", timeout_s=10))
            except (HostctlError, OSError) as e:
                raise RunError(f"hostctl stop on {h} failed: {e}") from None
        for h, d in self.daemons.items():
            try:
                d.wait(15)
            except subprocess.TimeoutExpired:
                raise RunError(f"hostctl daemon on {h} did not exit within 15 s of stop") from None
            q = subprocess.run(["tc", "-n", self.tb.host(h).ns, "qdisc", "show", "dev", "eth0", "root"],
                               capture_output=True, text=True).stdout
            if "tbf" not in q:
                raise RunError(f"after hostctl stop, {h}'s eth0 root qdisc is not the tbf it replaced: {q.strip()}")


def link_window(rates: dict[str, int], c0: dict[str, int], d0: dict[str, int], c1: dict[str, int],
                d1: dict[str, int], seconds: float) -> dict:
    """Bytes, utilisation and queue drops (packets; None where the link's root qdisc was missing or
    replaced in between: its count went back) of every link between two readings `seconds` apart."""
    out = {}
    for name, rate in rates.items():
        b = c1.get(name, 0) - c0.get(name, 0)
        drops = d1[name] - d0[name] if name in d0 and name in d1 and d1[name] >= d0[name] else None
        out[name] = {"bytes": b, "rate_bps": rate, "seconds": seconds,
                     "utilisation": b * 8 / (rate * seconds) if seconds > 0 else 0.0, "drops": drops}
    return out


def run_bench(sc: Scenario, out_dir: str, *, on_run_start=None, on_job_done=None, on_run_end=None) -> dict:
    """All repeats x policies, interleaved. Returns the results dict (see report.py for its schema)."""
    from hostctl_lab.bench import bound

    stamp = time.strftime("%Y%m%d-%H%M%S")
    raw_root = os.path.join(out_dir, "raw", f"{sc.name}-{stamp}")
    results: dict = {"scenario": scenario_json(sc), "policies": list(sc.policies), "repeat": sc.repeat,
                     "lower_bound": bound.for_scenario(sc), "runs": [], "raw_dir": raw_root,
                     "started": time.strftime("%Y-%m-%dT%H:%M:%S%z"), "machine": machine_info()}
    for r in range(sc.repeat):
        for pol in policy_order(sc.policies, r):
            if on_run_start:
                on_run_start(r, pol)
            run = Run(sc, pol, r, os.path.join(raw_root, f"r{r}-{pol}"))
            res = run.execute(f"b{uuid.uuid4().hex[:6]}", progress=on_job_done)
            results["runs"].append(res)
            if on_run_end:
                on_run_end(res)
    results["finished"] = time.strftime("%Y-%m-%dT%H:%M:%S%z")
    return results


def scenario_json(sc: Scenario) -> dict:
    t = sc.topology
    return {"name": sc.name, "description": sc.description, "path": sc.path,
            "topology": {"hosts": len(t.hosts), "racks": t.racks, "link_bps": t.link_bps,
                         "uplink_bps": t.uplink_bps, "queue_bytes": t.queue_bytes, "tcp_cc": t.tcp_cc,
                         "sysctls": dict(t.sysctls)},
            "hostctl": {"rr_interval_s": sc.hostctl.rr_interval_s, "bands": sc.hostctl.bands,
                        "other_rate": sc.hostctl.other_rate, "rescan_s": sc.hostctl.rescan_s,
                        "hosts": list(sc.policy_hosts()), "workers": sc.hostctl.workers},
            "jobs": [{"name": j.name, "kind": j.kind, "ps": list(j.ps_hosts), "workers": list(j.worker_hosts),
                      "model_bytes": j.model_bytes, "compute_s": j.compute_s, "iterations": j.iterations,
                      "arrival_s": j.arrival_s, "backward": j.backward, "buckets": j.buckets} for j in sc.jobs],
            "cross": [{"name": c.name, "src": c.src, "dst": c.dst, "start_s": c.start_s,
                       "duration_s": c.duration_s, "flows": c.flows} for c in sc.cross],
            "warmup_s": sc.warmup_s}


def machine_info() -> dict:
    info = {"cpus": os.cpu_count(), "kernel": os.uname().release, "python": sys.version.split()[0]}
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    info["cpu_model"] = line.split(":", 1)[1].strip()
                    break
        with open("/proc/meminfo") as f:
            info["mem_gib"] = round(int(f.readline().split()[1]) / 2**20, 1)
    except OSError:
        pass
    return info
