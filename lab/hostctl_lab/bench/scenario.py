"""Benchmark scenarios: a TOML file describing a testbed, jobs, cross traffic
and hostctl settings, parsed into frozen dataclasses (no I/O but reading the file).

    name = "placement1"
    [testbed]
    hosts = 6                      # one switch: h0..h5
    # racks = 2                    # or racks of hosts under top-of-rack bridges
    # hosts_per_rack = 3           #   joined through an aggregation bridge
    # uplink = "200mbit"           #   each rack's uplink, each direction
    link = "200mbit"               # every host NIC, each direction
    queue = "256KiB"               # switch port buffer (tbf limit)
    tcp_cc = "cubic"               # congestion control of the workloads' sockets (default: the kernel's)
    sysctls = { "net.ipv4.tcp_slow_start_after_idle" = 0 }   # per host namespace
    gso = false                    # hosts send one-frame packets (default true: GSO packets of up to 64 KiB,
                                   #   which the switch ports queue and drop whole); costs CPU (docs/testbed.md)
    host_cores = 1                 # the workers on a host share its processor: at most this many
                                   #   compute steps run at full speed, more share it (emulated,
                                   #   hostctl_lab.workloads.processor); default: none, every worker
                                   #   computes on its own (a sleep)

    [hostctl]                      # settings of the daemon under test
    rr_interval = 2.0
    hosts = "all"                  # hosts that run the policy; others run fifo
    workers = false                # true: worker hosts order their PS workers' gradients too
                                   #   (TensorLights configures only the PS hosts)
    ingress_rate = "97%"           # --ingress-rate of the policies one-ingress and rr-ingress
    slot = 0.06                    # pacing slot of cap / mlcc daemons and switchemu, seconds

    [bench]
    policies = ["fifo", "one", "rr"]
    repeat = 3
    timeout = 600                  # seconds; a run whose jobs are not done by then fails
    warmup = 1.0                   # the all-jobs-running utilisation window opens this long after the last arrival

    [[jobs]]
    name = "resnet"                # count > 1: resnet-01, resnet-02, ...
    count = 12
    kind = "ps"                    # ps | allreduce | torch
    ps = ["h0"]                    # PS hosts, used round-robin by the replicas
    servers = 1                    # PS shards per job
    workers = "others"             # or a list of hosts, one worker each
    model = "1MiB"
    compute = 0.1                  # seconds per iteration
    backward = 0.67                # ps: share of compute that is the backward pass (default 0)
    buckets = 8                    # ps: the gradient leaves in this many buckets during the
                                   #   backward pass, as TF/PyTorch send it (default 1: one
                                   #   burst after compute)
    iterations = 10
    arrival = 0.0                  # seconds after the start
    arrival_step = 0.0             # added per replica

    [[cross]]                      # non-DL bulk TCP
    name = "backup"
    src = "h1"
    dst = "h0"
    start = 1.0
    duration = 10.0
    flows = 1

Every mistake is a ConfigError naming the key and the fix.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass, field, replace
from typing import Any

from hostctl import policy as policy_table
from hostctl.config import check_ingress_rate, read_toml
from hostctl.core.units import parse_rate_bps, parse_size_bytes
from hostctl.errors import ConfigError
from hostctl_lab.topology import LabFabric

# the bench's policies: the daemon's, and variants of them with options (hostctl.policy.VARIANTS)
POLICIES = tuple(policy_table.VARIANTS)

KINDS = ("ps", "allreduce", "torch")
PORT_BASE = 7100  # first port handed to a job's servers / ranks
MAX_HOSTS = 64
MAX_PROCESSES = 400

TOP_KEYS = {"name", "description", "testbed", "hostctl", "bench", "jobs", "cross"}
TESTBED_KEYS = {"hosts", "racks", "hosts_per_rack", "link", "uplink", "queue", "tcp_cc", "sysctls", "host_cores",
                "gso"}
_SYSCTL = re.compile(r"net\.(ipv4|ipv6|core)\.[a-z0-9_.]+")
HOSTCTL_KEYS = {"rr_interval", "bands", "other_rate", "rescan", "hosts", "workers", "cap", "ingress_rate", "slot"}
BENCH_KEYS = {"policies", "repeat", "timeout", "warmup"}
JOB_KEYS = {"name", "count", "kind", "ps", "servers", "workers", "model", "compute", "iterations",
            "arrival", "arrival_step", "backward", "buckets"}
CROSS_KEYS = {"name", "src", "dst", "start", "duration", "flows"}
_NAME = re.compile(r"[A-Za-z0-9_.-]{1,32}")


@dataclass(frozen=True)
class JobDef:
    """One job after expanding `count`; ports are fixed here so every run uses the same ones."""
    name: str
    kind: str
    ps_hosts: tuple[str, ...]  # ps: one entry per server (shard); empty otherwise
    worker_hosts: tuple[str, ...]  # ranks in order (all-reduce ring order; torch rank 0 = master)
    model_bytes: int
    compute_s: float
    iterations: int
    arrival_s: float
    ports: tuple[int, ...]  # ps: one per server; allreduce: one per rank; torch: (master port,)
    backward: float = 0.0  # ps: share of compute_s that is the backward pass
    buckets: int = 1  # ps: gradient buckets sent during the backward pass (1 = one burst after compute)

    @property
    def workers(self) -> int:
        return len(self.worker_hosts)


@dataclass(frozen=True)
class CrossDef:
    name: str
    src: str
    dst: str
    start_s: float
    duration_s: float
    flows: int
    port: int


@dataclass(frozen=True)
class HostctlSettings:
    rr_interval_s: float = 2.0
    bands: int = 6
    other_rate: str = "10%"
    rescan_s: float = 0.5
    hosts: tuple[str, ...] | None = None  # None: all hosts run the policy under test
    workers: bool = False  # also order PS workers' gradients on their hosts (found by command line)
    cap: str | None = None  # policy cap: each job's rate cap on its hosts (a rate, e.g. "100mbit")
    ingress_rate: str = "97%"  # policies one-ingress / rr-ingress: hostctl start --ingress-rate
    slot_s: float = 0.06  # pacing policies: hostctl start --slot (and switchemu --slot-ms)


@dataclass(frozen=True)
class Scenario:
    name: str
    description: str
    topology: LabFabric
    jobs: tuple[JobDef, ...]
    cross: tuple[CrossDef, ...] = ()
    hostctl: HostctlSettings = field(default_factory=HostctlSettings)
    policies: tuple[str, ...] = ("fifo", "one", "rr")
    repeat: int = 3
    timeout_s: float = 600.0
    warmup_s: float = 1.0  # the all-jobs-running window opens this long after the last arrival
    path: str = ""

    def policy_hosts(self) -> tuple[str, ...]:
        return self.hostctl.hosts if self.hostctl.hosts is not None else self.topology.hosts

    def with_overrides(self, *, iterations: int | None = None, policies: tuple[str, ...] | None = None,
                       repeat: int | None = None) -> "Scenario":
        s = self
        if iterations is not None:
            if iterations < 1:
                raise ConfigError("--iterations must be at least 1")
            s = replace(s, jobs=tuple(replace(j, iterations=iterations) for j in s.jobs))
        if policies is not None:
            s = replace(s, policies=_policies(list(policies), "--policies"))
            if _capped(s.policies) and s.hostctl.cap is None:
                raise ConfigError("--policies lists cap: give its rate in the scenario, [hostctl] cap = \"100mbit\"")
            _check_fabric_prio(s.policies, s.jobs, "--policies")
        if repeat is not None:
            if not 1 <= repeat <= 100:
                raise ConfigError("--repeat must be within 1..100")
            s = replace(s, repeat=repeat)
        return s


def _check_fabric_prio(policies, jobs, where: str) -> None:
    """fabric-prio classifies by the jobs' TCP ports in htb's 8 priorities (control, jobs, the rest)."""
    oracles = [p for p in policies if policy_table.VARIANTS[p].fabric_prio]
    if not oracles:
        return
    torch = [j for j in jobs if j.kind not in ("ps", "allreduce")]
    if torch:
        raise ConfigError(f"{where} lists {oracles[0]}, which finds a job by its ports; {torch[0].kind} job "
                          f"{torch[0].name} has no fixed ports: drop {oracles[0]}")
    if len(jobs) > 6:
        raise ConfigError(f"{where} lists {oracles[0]}, which gives each job one of htb's 8 priorities (6 for jobs); "
                          f"this scenario has {len(jobs)} jobs: drop {oracles[0]}")


def _capped(policies) -> bool:
    """A listed policy paces each job to [hostctl] cap."""
    return any(policy_table.VARIANTS[p].spec.rates == "cap" for p in policies)


def _where(ctx: str, key: str) -> str:
    return f"{ctx}.{key}" if ctx else key


def _check_keys(d: Any, allowed: set[str], ctx: str) -> dict:
    if not isinstance(d, dict):
        raise ConfigError(f"{ctx} must be a table")
    bad = sorted(set(d) - allowed)
    if bad:
        raise ConfigError(f"unknown key {_where(ctx, bad[0])}; allowed: {', '.join(sorted(allowed))}")
    return d


def _num(d: dict, key: str, ctx: str, default: float | None, lo: float, hi: float,
         integer: bool = False) -> float:
    v = d.get(key, default)
    if v is None:
        raise ConfigError(f"{_where(ctx, key)} is required")
    if isinstance(v, bool) or not isinstance(v, (int, float)) or (integer and not isinstance(v, int)):
        raise ConfigError(f"{_where(ctx, key)} must be {'an integer' if integer else 'a number'}, got {v!r}")
    if not lo <= v <= hi:
        raise ConfigError(f"{_where(ctx, key)} = {v} is out of range {lo:g}..{hi:g}")
    return v


def _bool(d: dict, key: str, ctx: str, default: bool) -> bool:
    v = d.get(key, default)
    if not isinstance(v, bool):
        raise ConfigError(f"{_where(ctx, key)} must be true or false, got {v!r}")
    return v


def _host_list(v: Any, hosts: tuple[str, ...], where: str) -> tuple[str, ...]:
    if isinstance(v, str):
        v = [v]
    if not isinstance(v, list) or not v or not all(isinstance(h, str) for h in v):
        raise ConfigError(f"{where} must be a list of host names like [\"h0\", \"h1\"]")
    for h in v:
        if h not in hosts:
            raise ConfigError(f"{where}: unknown host {h!r}; this testbed has {hosts[0]}..{hosts[-1]}")
    return tuple(v)


def _cap(h: dict) -> str | None:
    if "cap" not in h:
        return None
    v = h["cap"]
    if not isinstance(v, str):
        raise ConfigError(f"hostctl.cap must be a rate string such as \"100mbit\", got {v!r}")
    parse_rate_bps(v, what="hostctl.cap")
    return v


def _ingress_rate(h: dict) -> str:
    v = h.get("ingress_rate", "97%")
    if not isinstance(v, str):
        raise ConfigError(f"hostctl.ingress_rate must be a share such as \"97%\" or a rate, got {v!r}")
    check_ingress_rate(v, "hostctl.ingress_rate")
    return v


def _policies(v: Any, where: str) -> tuple[str, ...]:
    if isinstance(v, str):
        v = [p.strip() for p in v.split(",") if p.strip()]
    if not isinstance(v, list) or not v:
        raise ConfigError(f"{where} must list policies, e.g. fifo,one,rr")
    for p in v:
        if p not in POLICIES:
            raise ConfigError(f"{where}: unknown policy {p!r}; choose from {', '.join(POLICIES)}")
    if len(set(v)) != len(v):
        raise ConfigError(f"{where}: a policy is listed twice")
    return tuple(v)


def parse_topology(d: dict) -> LabFabric:
    """A [testbed] table (also what `hostctl testbed up` builds from its flags)."""
    d = _check_keys(d, TESTBED_KEYS, "testbed")
    link = parse_rate_bps(d.get("link", "200mbit"), what="testbed.link")
    queue = parse_size_bytes(d.get("queue", "256KiB"), what="testbed.queue")
    if not 16 * 1024 <= queue <= 64 * 1024 * 1024:
        raise ConfigError("testbed.queue must be within 16KiB..64MiB")
    if "racks" in d:
        if "hosts" in d:
            raise ConfigError("testbed: give either hosts (one switch) or racks + hosts_per_rack, not both")
        racks = int(_num(d, "racks", "testbed", None, 2, 16, integer=True))
        per = int(_num(d, "hosts_per_rack", "testbed", None, 1, MAX_HOSTS, integer=True))
        if "uplink" not in d:
            raise ConfigError("testbed.uplink is required with racks, e.g. uplink = \"200mbit\"")
        uplink = parse_rate_bps(d["uplink"], what="testbed.uplink")
        n = racks * per
        rack_of = tuple(i // per for i in range(n))
    else:
        for k in ("hosts_per_rack", "uplink"):
            if k in d:
                raise ConfigError(f"testbed.{k} needs racks = N (two or more racks)")
        n = int(_num(d, "hosts", "testbed", None, 2, MAX_HOSTS, integer=True))
        racks, uplink, rack_of = 1, None, tuple(0 for _ in range(n))
    if n > MAX_HOSTS:
        raise ConfigError(f"testbed has {n} hosts; at most {MAX_HOSTS}")
    cc = d.get("tcp_cc")
    if cc is not None and (not isinstance(cc, str) or not re.fullmatch(r"[a-z0-9_]{1,15}", cc)):
        raise ConfigError(f"testbed.tcp_cc {cc!r} is not a congestion control name like \"cubic\" or \"bbr\"")
    sysctls = d.get("sysctls", {})
    if not isinstance(sysctls, dict):
        raise ConfigError("testbed.sysctls must be a table like { \"net.ipv4.tcp_slow_start_after_idle\" = 0 }")
    for k, v in sysctls.items():
        if not _SYSCTL.fullmatch(k) or isinstance(v, (bool, list, dict)):
            raise ConfigError(f"testbed.sysctls: {k} = {v!r}: only net.ipv4/ipv6/core keys (namespaced) with a "
                              "number or string value")
    cores = None if "host_cores" not in d else float(_num(d, "host_cores", "testbed", None, 0.1, 1024))
    gso = _bool(d, "gso", "testbed", True)
    return LabFabric(hosts=tuple(f"h{i}" for i in range(n)), rack_of=rack_of, racks=racks, link_bps=link,
                     uplink_bps=uplink, queue_bytes=queue, tcp_cc=cc,
                     sysctls=tuple(sorted((k, str(v)) for k, v in sysctls.items())), host_cores=cores, gso=gso)


def _jobs(items: Any, topo: LabFabric) -> tuple[JobDef, ...]:
    if not isinstance(items, list) or not items:
        raise ConfigError("a scenario needs at least one [[jobs]] table")
    out: list[JobDef] = []
    port = PORT_BASE
    for n, d in enumerate(items):
        ctx = f"jobs[{n}]"
        d = _check_keys(d, JOB_KEYS, ctx)
        name = d.get("name")
        if not isinstance(name, str) or not _NAME.fullmatch(name):
            raise ConfigError(f"{ctx}.name must be 1-32 letters, digits, '_', '.' or '-'")
        ctx = f"jobs[{name}]"
        kind = d.get("kind", "ps")
        if kind not in KINDS:
            raise ConfigError(f"{ctx}.kind {kind!r} is unknown; choose from {', '.join(KINDS)}")
        count = int(_num(d, "count", ctx, 1, 1, 64, integer=True))
        servers = int(_num(d, "servers", ctx, 1, 1, 16, integer=True))
        model = parse_size_bytes(d.get("model", "1MiB"), what=f"{ctx}.model")
        if not 1024 <= model <= 1 << 32:
            raise ConfigError(f"{ctx}.model must be within 1KiB..4GiB")
        compute = float(_num(d, "compute", ctx, 0.1, 0.0, 60.0))
        iterations = int(_num(d, "iterations", ctx, 10, 1, 100_000, integer=True))
        arrival = float(_num(d, "arrival", ctx, 0.0, 0.0, 3600.0))
        step = float(_num(d, "arrival_step", ctx, 0.0, 0.0, 600.0))
        backward = float(_num(d, "backward", ctx, 0.0, 0.0, 1.0))
        buckets = int(_num(d, "buckets", ctx, 1, 1, 4096, integer=True))
        if kind != "ps" and ("backward" in d or "buckets" in d):
            raise ConfigError(f"{ctx}: backward and buckets are only for kind = \"ps\" (the ring jobs "
                              "all-reduce after compute)")
        if (buckets > 1) != (backward > 0):
            raise ConfigError(f"{ctx}: set backward (0 < backward <= 1) and buckets (> 1) together, e.g. "
                              "backward = 0.67 and buckets = 8; or neither, for one gradient burst after compute")
        if kind == "ps" and buckets > model // servers:
            raise ConfigError(f"{ctx}.buckets = {buckets} is more than the bytes of a shard ({model // servers})")
        if kind == "ps":
            if "ps" not in d:
                raise ConfigError(f"{ctx}.ps is required for a ps job: the PS hosts, e.g. ps = [\"h0\"]")
            ps_pool = _host_list(d["ps"], topo.hosts, f"{ctx}.ps")
        elif "ps" in d or "servers" in d:
            raise ConfigError(f"{ctx}: ps and servers are only for kind = \"ps\"")
        for r in range(count):
            jname = name if count == 1 else f"{name}-{r + 1:02d}"
            ps_hosts: tuple[str, ...] = ()
            if kind == "ps":
                ps_hosts = tuple(ps_pool[(r * servers + s) % len(ps_pool)] for s in range(servers))
            w = d.get("workers", "others")
            if w == "others":
                if kind != "ps":
                    raise ConfigError(f"{ctx}.workers = \"others\" is only for ps jobs; list the hosts")
                workers = tuple(h for h in topo.hosts if h not in ps_hosts)
            elif w == "all":
                workers = topo.hosts
            else:
                workers = _host_list(w, topo.hosts, f"{ctx}.workers")
            if kind != "ps" and len(workers) < 2:
                raise ConfigError(f"{ctx}.workers: a {kind} job needs at least two workers")
            nports = servers if kind == "ps" else (len(workers) if kind == "allreduce" else 1)
            out.append(JobDef(name=jname, kind=kind, ps_hosts=ps_hosts, worker_hosts=workers, model_bytes=model,
                              compute_s=compute, iterations=iterations, arrival_s=arrival + r * step,
                              ports=tuple(range(port, port + nports)), backward=backward, buckets=buckets))
            port += nports
    names = [j.name for j in out]
    dup = {x for x in names if names.count(x) > 1}
    if dup:
        raise ConfigError(f"job name {sorted(dup)[0]!r} is used twice; job names must be unique")
    procs = sum(j.workers + len(j.ps_hosts) for j in out)
    if procs > MAX_PROCESSES:
        raise ConfigError(f"the scenario starts {procs} job processes; at most {MAX_PROCESSES} fit this machine")
    return tuple(out)


def _cross(items: Any, topo: LabFabric, first_port: int) -> tuple[CrossDef, ...]:
    if items is None:
        return ()
    if not isinstance(items, list):
        raise ConfigError("cross must be a list of [[cross]] tables")
    out = []
    for n, d in enumerate(items):
        ctx = f"cross[{n}]"
        d = _check_keys(d, CROSS_KEYS, ctx)
        name = d.get("name", f"cross{n}")
        if not isinstance(name, str) or not _NAME.fullmatch(name):
            raise ConfigError(f"{ctx}.name must be 1-32 letters, digits, '_', '.' or '-'")
        src = _host_list(d.get("src", ""), topo.hosts, f"{ctx}.src")[0]
        dst = _host_list(d.get("dst", ""), topo.hosts, f"{ctx}.dst")[0]
        if src == dst:
            raise ConfigError(f"{ctx}: src and dst are the same host; cross traffic must cross a link")
        out.append(CrossDef(name=name, src=src, dst=dst, start_s=float(_num(d, "start", ctx, 0.0, 0.0, 3600.0)),
                            duration_s=float(_num(d, "duration", ctx, None, 0.5, 3600.0)),
                            flows=int(_num(d, "flows", ctx, 1, 1, 32, integer=True)), port=first_port + n))
    return tuple(out)


def parse_scenario(data: dict, path: str = "") -> Scenario:
    _check_keys(data, TOP_KEYS, "")
    topo = parse_topology(data.get("testbed", {}))
    jobs = _jobs(data.get("jobs"), topo)
    cross = _cross(data.get("cross"), topo, max(p for j in jobs for p in j.ports) + 1)
    h = _check_keys(data.get("hostctl", {}), HOSTCTL_KEYS, "hostctl")
    hosts = h.get("hosts", "all")
    settings = HostctlSettings(
        rr_interval_s=float(_num(h, "rr_interval", "hostctl", 2.0, 0.1, 3600.0)),
        bands=int(_num(h, "bands", "hostctl", 6, 1, 7, integer=True)),
        other_rate=str(h.get("other_rate", "10%")),
        rescan_s=float(_num(h, "rescan", "hostctl", 0.5, 0.05, 60.0)),
        hosts=None if hosts == "all" else _host_list(hosts, topo.hosts, "hostctl.hosts"),
        workers=_bool(h, "workers", "hostctl", False),
        cap=_cap(h), ingress_rate=_ingress_rate(h),
        slot_s=float(_num(h, "slot", "hostctl", 0.06, 0.01, 1.0)))
    b = _check_keys(data.get("bench", {}), BENCH_KEYS, "bench")
    if _capped(_policies(b.get("policies", ["fifo"]), "bench.policies")) and settings.cap is None:
        raise ConfigError("bench.policies lists cap: give its rate with [hostctl] cap = \"100mbit\"")
    _check_fabric_prio(_policies(b.get("policies", ["fifo"]), "bench.policies"), jobs, "bench.policies")
    name = data.get("name") or os.path.splitext(os.path.basename(path))[0] or "scenario"
    if not isinstance(name, str) or not _NAME.fullmatch(name):
        raise ConfigError("name must be 1-32 letters, digits, '_', '.' or '-'")
    return Scenario(
        name=name, description=str(data.get("description", "")), topology=topo, jobs=jobs, cross=cross,
        hostctl=settings, policies=_policies(b.get("policies", ["fifo", "one", "rr"]), "bench.policies"),
        repeat=int(_num(b, "repeat", "bench", 3, 1, 100, integer=True)),
        timeout_s=float(_num(b, "timeout", "bench", 600.0, 5.0, 86400.0)),
        warmup_s=float(_num(b, "warmup", "bench", 1.0, 0.0, 3600.0)), path=path)


def load_scenario(path: str) -> Scenario:
    data = read_toml(path, "scenario", missing=f"scenario file {path} does not exist; see examples/scenarios/")
    try:
        return parse_scenario(data, path)
    except ConfigError as e:
        raise ConfigError(f"{path}: {e}") from None
