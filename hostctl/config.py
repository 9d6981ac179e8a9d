"""One frozen Config, from a TOML file and/or flags (flags win), validated at load.

Every key is documented in examples/hostctl.toml and has a flag of `hostctl start`
(tests/unit/test_cli_config_parity.py keeps the two in step). Unknown keys are errors,
so a typo never silently falls back to a default.

`reload_config` decides what a reload (SIGHUP) may change in a running daemon: the
keys in RELOAD_LIVE take their new values, every other key keeps its old one and each
change to it is refused with the reason from RELOAD_FIXED.
"""

from __future__ import annotations

import ipaddress
import re
from dataclasses import dataclass, field, replace
from typing import Any

from hostctl import consts
from hostctl import policy as policies
from hostctl.core.bands import MAX_BANDS
from hostctl.core.joborder import JOB_ORDERS
from hostctl.core.plan import BAND_MIN_RATE_BPS
from hostctl.core.tomltext import parse_toml
from hostctl.core.types import JobSpec
from hostctl.core.units import (
    parse_fraction_or_rate, parse_pids, parse_ports, parse_rate_bps, parse_size_bytes,
)
from hostctl.errors import ConfigError

TOP_KEYS = {"policy", "iface", "link_rate", "other_rate", "bands", "rr_interval", "rescan",
            "lease", "metrics_port", "ports", "pids", "match", "jobs", "cap", "cgroup", "slot", "phase_gap",
            "switch", "curve_keys", "horizon", "plan_offset", "ingress_rate", "deps",
            "job_order", "metrics_addr", "log_level", "containers", "container_addr"}
JOB_KEYS = {"name", "ports", "pids", "match", "model_size", "cap", "comm", "ring_size"}
COMM_PATTERNS = ("ps", "ring")  # [[jobs]] comm: parameter server, ring all-reduce
_ENDPOINT = re.compile(r"tcp://[^\s,]+:(?P<port>\d{1,5}|\*)|ipc://[^\s,]+")


def endpoint_ok(ep: str, *, bind: bool = False) -> bool:
    """A ZeroMQ endpoint hostctl and switchemu accept: tcp://HOST:PORT (PORT 1..65535; ``*`` =
    any free port, to bind) or ipc://PATH. ZeroMQ's own parser is lenient: it reads
    "tcp://h:1x" as port 1 and "tcp://h:99999" as port 34463."""
    m = _ENDPOINT.fullmatch(ep)
    if m is None:
        return False
    port = m.group("port")
    return port is None or (port == "*" and bind) or (port != "*" and 1 <= int(port) <= 65535)
LOG_LEVELS = ("DEBUG", "INFO", "WARNING", "ERROR", "CRITICAL")


@dataclass(frozen=True)
class Config:
    policy: str = consts.DEFAULT_POLICY
    iface: str | None = None  # None: the interface of the default route
    link_rate_bps: int | None = None  # None: 97% of the NIC speed from sysfs
    other_rate: str = consts.DEFAULT_OTHER_SHARE  # guaranteed to non-DL traffic: "10%" or a rate
    bands: int = consts.DEFAULT_BANDS
    rr_interval_s: float = consts.DEFAULT_RR_INTERVAL_S
    rescan_s: float = consts.DEFAULT_RESCAN_S
    lease_s: float = consts.DEFAULT_LEASE_S
    metrics_port: int | None = None
    jobs: tuple[JobSpec, ...] = field(default_factory=tuple)
    cap_bps: int | None = None  # policy cap: default cap of each job (bits/s)
    cgroup: str = consts.DEFAULT_CGROUP  # pacing scope (cgroup v2 path)
    slot_s: float = consts.DEFAULT_SLOT_S
    phase_gap_s: float = consts.DEFAULT_PHASE_GAP_S
    switch: tuple[str, ...] = ()  # mlcc: switchemu endpoints; () = local mode only
    curve_keys: str | None = None  # mlcc: folder with server.key and this host's NAME.key_secret, or that file
    horizon: int = consts.DEFAULT_HORIZON  # mlcc: K, slots planned ahead
    plan_offset_s: float | None = None  # mlcc: when in the slot this host plans; None: from its host name
    ingress_rate: str | None = None  # ingress bands: "97%" of the link rate or a rate; None: off
    deps: bool = True  # mlcc: Algorithm 2's dependency rules for jobs with a comm (switch mode)
    job_order: str = "none"  # mlcc: fabric-wide job order through the switches: none (arrival), fixed,
    #                          rotate, smallest or flat (mlcc-bands: fixed, rotate or smallest; none there
    #                          means fixed, see fabric_order)
    metrics_addr: str = "127.0.0.1"  # address of the metrics server (metrics_port)
    log_level: str = "INFO"  # DEBUG, INFO, WARNING, ERROR or CRITICAL (any case)
    containers: bool = True  # find jobs in this host's containers (network namespaces with a veth to this one)
    container_addr: str = "pod"  # a container's listener in job ids: "pod" (its own address) or "host"

    @property
    def spec(self) -> policies.Policy:
        """The policy's row in the table (hostctl.policy.POLICIES)."""
        return policies.get(self.policy)

    @property
    def pacing(self) -> bool:
        return self.spec.pacing

    @property
    def plans_mlcc(self) -> bool:
        """mlcc's planner decides the flows' rates (policies mlcc and mlcc-bands)."""
        return self.spec.plans_mlcc

    @property
    def fabric_order(self) -> str:
        """The job order mlcc's planner is given and, for mlcc-bands, the bands follow: job_order,
        except that mlcc-bands always has one (its bands need an order; none, the default, is fixed)."""
        return self.spec.fabric_order(self.job_order)

    @property
    def band_rotates(self) -> bool:
        return self.spec.band_rotates(self.job_order)

    @property
    def tracks_all_flows(self) -> bool:
        """The pacer tracks every flow of its cgroup (not only those of listed ports): jobs found by
        pid or command line are known by their 4-tuples only after their connections exist."""
        return any(s.pids or s.match for s in self.jobs)

    def job_caps_bps(self) -> dict[str, int]:
        """Per-job caps from [[jobs]] (by job name)."""
        return {s.name: s.cap_bps for s in self.jobs if s.name and s.cap_bps}

    def other_rate_bps(self, link_rate_bps: int) -> int:
        bps = _share_or_rate_bps(self.other_rate, "other_rate", link_rate_bps)
        if bps > link_rate_bps // 2:
            raise ConfigError(f"other_rate {self.other_rate} is more than half the link rate; use at most 50%")
        return bps

    def guaranteed_bps(self, link_rate_bps: int) -> int:
        """What an htb tree of this config guarantees: a token rate per band and the control
        class, plus other_rate for the default class."""
        return BAND_MIN_RATE_BPS * (self.bands + 1) + self.other_rate_bps(link_rate_bps)

    def ingress_rate_bps(self, link_rate_bps: int) -> int:
        """Rate of the ingress bands' tree (0: off); a share is of the link rate."""
        if self.ingress_rate is None:
            return 0
        bps = _share_or_rate_bps(self.ingress_rate, "ingress_rate", link_rate_bps)
        need = self.guaranteed_bps(link_rate_bps)
        if bps < need:
            raise ConfigError(f"ingress_rate {self.ingress_rate} ({bps}bit/s) is below what {self.bands} bands and "
                              f"other_rate {self.other_rate} guarantee ({need}bit/s); give e.g. --ingress-rate 97%")
        return bps

    def validate(self) -> "Config":
        spec = policies.get(self.policy)
        if not 1 <= self.bands <= MAX_BANDS:
            raise ConfigError(f"bands must be within 1..{MAX_BANDS} (htb prio 7 is the default class), got {self.bands}")
        if not 0.1 <= self.rr_interval_s <= 86400:
            raise ConfigError(f"rr_interval must be within 0.1..86400 seconds, got {self.rr_interval_s}")
        if not 0.05 <= self.rescan_s <= 60:
            raise ConfigError(f"rescan must be within 0.05..60 seconds, got {self.rescan_s}")
        if not 2 * consts.HEARTBEAT_S <= self.lease_s <= 3600:
            raise ConfigError(f"lease must be within {2 * consts.HEARTBEAT_S}..3600 seconds, got {self.lease_s}")
        if not 0.01 <= self.slot_s <= 1.0:
            raise ConfigError(f"slot must be within 0.01..1 seconds (MLCC uses 0.06), got {self.slot_s}")
        if not 0.001 <= self.phase_gap_s <= 10:
            raise ConfigError(f"phase_gap must be within 0.001..10 seconds, got {self.phase_gap_s}")
        if not self.cgroup.startswith("/"):
            raise ConfigError(f"cgroup must be a cgroup v2 path starting with /, e.g. / or /system.slice, got {self.cgroup!r}")
        for what, bps in [("cap", self.cap_bps), *((f"cap of job {n}", c) for n, c in self.job_caps_bps().items())]:
            if bps is not None and not 100_000 <= bps <= 8 * 0xFFFFFFFE:
                raise ConfigError(f"{what} {bps}bit/s is outside what TCP pacing can enforce (100kbit .. 34gbit)")
        for ep in self.switch:
            if not endpoint_ok(ep):
                raise ConfigError(f"bad switch endpoint {ep!r}: give tcp://HOST:PORT or ipc://PATH, "
                                  "e.g. --switch tcp://10.0.0.9:5555")
        if self.job_order not in JOB_ORDERS:
            raise ConfigError(f"unknown job order {self.job_order!r}: choose one of {', '.join(JOB_ORDERS)}")
        if self.plan_offset_s is not None and not 0 <= self.plan_offset_s <= 0.6 * self.slot_s:
            raise ConfigError(f"plan_offset must be within 0..{0.6 * self.slot_s:g} seconds (60% of the slot), "
                              f"got {self.plan_offset_s}")
        if not 1 <= self.horizon <= 64:
            raise ConfigError(f"horizon must be within 1..64 slots (MLCC uses 10), got {self.horizon}")
        if self.container_addr not in consts.CONTAINER_ADDRS:
            raise ConfigError(f"unknown container_addr {self.container_addr!r}: choose pod (routed pod networks) "
                              "or host (masquerading, hostPort = containerPort)")
        if self.metrics_port is not None and not 1 <= self.metrics_port <= 65535:
            raise ConfigError(f"metrics_port must be within 1..65535, got {self.metrics_port}")
        if self.iface is not None and not re.fullmatch(r"[^/\s]{1,15}", self.iface):
            raise ConfigError(f"bad interface name {self.iface!r}")
        if self.log_level.upper() not in LOG_LEVELS:
            raise ConfigError(f"unknown log level {self.log_level!r}: choose one of {', '.join(LOG_LEVELS)}")
        try:
            ipaddress.ip_address(self.metrics_addr)
        except ValueError:
            raise ConfigError(f"metrics_addr must be an IP address to bind, e.g. 127.0.0.1 or 0.0.0.0, "
                              f"got {self.metrics_addr!r}") from None
        frac, _rate = parse_fraction_or_rate(self.other_rate, what="other_rate")
        if frac is not None and frac > 0.5:  # a share is checkable before the link rate is known
            raise ConfigError(f"other_rate {self.other_rate} is more than half the link rate; use at most 50%")
        if self.link_rate_bps is not None:
            need = self.guaranteed_bps(self.link_rate_bps)
            if self.link_rate_bps < need:
                raise ConfigError(
                    f"link rate {self.link_rate_bps}bit/s is below what {self.bands} bands and other_rate "
                    f"{self.other_rate} guarantee ({need}bit/s): raise --link-rate or lower --bands/--other-rate"
                )
        if self.ingress_rate is not None:
            check_ingress_rate(self.ingress_rate, "ingress_rate")
            if self.link_rate_bps is not None:
                self.ingress_rate_bps(self.link_rate_bps)
        spec.check(self)
        return self


def _share_or_rate_bps(text: str, what: str, link_rate_bps: int) -> int:
    """'10%' of the link rate, or a rate ('50mbit'), in bits/s."""
    frac, rate = parse_fraction_or_rate(text, what=what)
    bps = int(link_rate_bps * frac) if frac is not None else rate
    assert bps is not None
    return bps


def check_ingress_rate(text: str, what: str) -> None:
    """An ingress rate given as a share must be 50%..100% of the link rate (a rate is checked
    against the guarantees once the link rate is known: Config.ingress_rate_bps)."""
    frac, _rate = parse_fraction_or_rate(text, what=what)
    if frac is not None and not 0.5 <= frac <= 1.0:
        raise ConfigError(f"{what} {text} must be within 50%..100% of the link rate "
                          "(a little below the rate the switch delivers, e.g. 97%)")


def _num(d: dict, key: str, typ: type, where: str) -> Any:
    v = d[key]
    if typ is float and isinstance(v, int) and not isinstance(v, bool):
        v = float(v)
    if not isinstance(v, typ) or isinstance(v, bool):
        kind = {"int": "an integer", "float": "a number"}.get(typ.__name__, typ.__name__)
        raise ConfigError(f"{where}: {key} must be {kind}, got {v!r}")
    return v


def _ports_value(v: Any, where: str) -> tuple[int, ...]:
    if isinstance(v, int) and not isinstance(v, bool):
        v = str(v)
    if isinstance(v, list):
        v = ",".join(str(x) for x in v)
    if not isinstance(v, str):
        raise ConfigError(f"{where}: ports must be a string like \"9000-9005,9100\" or a list of ports")
    return parse_ports(v, what=f"{where} ports")


def _pids_value(v: Any, where: str) -> tuple[int, ...]:
    if isinstance(v, list):
        v = ",".join(str(x) for x in v)
    return parse_pids(str(v), what=f"{where} pids")


def _str(d: dict, key: str, where: str) -> str:
    v = d[key]
    if not isinstance(v, str):
        raise ConfigError(f"{where}: {key} must be a string, got {v!r}")
    return v


def _check_regex(rx: object, where: str) -> str:
    if not isinstance(rx, str):
        raise ConfigError(f"{where}: match must be a string (a regular expression), got {rx!r}")
    try:
        re.compile(rx)
    except re.error as e:
        raise ConfigError(f"{where}: bad regex {rx!r}: {e}") from None
    return rx


def _comm_keys(j: dict, where: str) -> dict[str, Any]:
    """comm and ring_size of a [[jobs]] entry (mlcc's dependency rules, docs/mlcc.md)."""
    comm = j.get("comm")
    if comm is not None and comm not in COMM_PATTERNS:
        raise ConfigError(f"{where}: comm must be one of {', '.join(COMM_PATTERNS)} (parameter server or ring "
                          f"all-reduce), got {comm!r}; leave it out if the pattern is neither")
    size = j.get("ring_size")
    if size is not None:
        if comm != "ring":
            raise ConfigError(f"{where}: ring_size is for comm = \"ring\" jobs (the number of ranks in the ring)")
        if isinstance(size, bool) or not isinstance(size, int) or size < 2:
            raise ConfigError(f"{where}: ring_size must be an integer >= 2 (the number of ranks), got {size!r}")
    return {"comm": comm, "ring_size": size}


def specs_from_flags(ports: str | None, pids: str | None, match: str | None) -> tuple[JobSpec, ...]:
    specs = []
    if ports:
        specs.append(JobSpec(ports=parse_ports(ports)))
    if pids:
        specs.append(JobSpec(pids=parse_pids(pids)))
    if match:
        specs.append(JobSpec(match=_check_regex(match, "--match")))
    return tuple(specs)


def read_toml(path: str, what: str, missing: str | None = None) -> dict[str, Any]:
    """The TOML file at ``path``, or one ConfigError line: "<what> <path> not found" (or
    ``missing``), "cannot read <what> <path>: ...", "<what> <path> is not valid TOML: ...", ..."""
    try:
        with open(path, "rb") as f:
            data = f.read()
    except FileNotFoundError:
        raise ConfigError(missing or f"{what} {path} not found") from None
    except OSError as e:
        raise ConfigError(f"cannot read {what} {path}: {e.strerror or e}") from None
    return parse_toml(data, f"{what} {path}")


def load_file(path: str) -> dict[str, Any]:
    """Parse and check a TOML config; returns Config keyword arguments."""
    data = read_toml(path, "config file")
    unknown = set(data) - TOP_KEYS
    if unknown:
        raise ConfigError(f"{path}: unknown key(s) {', '.join(sorted(unknown))}; valid keys: {', '.join(sorted(TOP_KEYS))}")
    kw: dict[str, Any] = {}
    if "policy" in data:
        kw["policy"] = _str(data, "policy", path)
    if "iface" in data:
        kw["iface"] = _str(data, "iface", path)
    if "link_rate" in data:
        kw["link_rate_bps"] = parse_rate_bps(data["link_rate"], what=f"{path}: link_rate")
    if "other_rate" in data:
        kw["other_rate"] = _str(data, "other_rate", path)
    if "bands" in data:
        kw["bands"] = _num(data, "bands", int, path)
    if "rr_interval" in data:
        kw["rr_interval_s"] = _num(data, "rr_interval", float, path)
    if "rescan" in data:
        kw["rescan_s"] = _num(data, "rescan", float, path)
    if "lease" in data:
        kw["lease_s"] = _num(data, "lease", float, path)
    if "metrics_port" in data:
        kw["metrics_port"] = _num(data, "metrics_port", int, path)
    if "cap" in data:
        kw["cap_bps"] = parse_rate_bps(data["cap"], what=f"{path}: cap")
    if "cgroup" in data:
        kw["cgroup"] = _str(data, "cgroup", path)
    if "slot" in data:
        kw["slot_s"] = _num(data, "slot", float, path)
    if "phase_gap" in data:
        kw["phase_gap_s"] = _num(data, "phase_gap", float, path)
    if "switch" in data:
        v = data["switch"]
        if isinstance(v, str):
            v = [v]
        if not isinstance(v, list) or not all(isinstance(x, str) for x in v):
            raise ConfigError(f"{path}: switch must be an endpoint string or a list of them, e.g. "
                              "[\"tcp://10.0.0.9:5555\"]")
        kw["switch"] = tuple(v)
    if "curve_keys" in data:
        kw["curve_keys"] = _str(data, "curve_keys", path)
    if "horizon" in data:
        kw["horizon"] = _num(data, "horizon", int, path)
    if "plan_offset" in data:
        kw["plan_offset_s"] = _num(data, "plan_offset", float, path)
    if "ingress_rate" in data:
        kw["ingress_rate"] = _str(data, "ingress_rate", path)
    if "job_order" in data:
        kw["job_order"] = _str(data, "job_order", path)
    if "metrics_addr" in data:
        kw["metrics_addr"] = _str(data, "metrics_addr", path)
    if "log_level" in data:
        kw["log_level"] = _str(data, "log_level", path)
    for key in ("deps", "containers"):
        if key in data:
            if not isinstance(data[key], bool):
                raise ConfigError(f"{path}: {key} must be true or false, got {data[key]!r}")
            kw[key] = data[key]
    if "container_addr" in data:
        kw["container_addr"] = _str(data, "container_addr", path)
    specs: list[JobSpec] = []
    if "ports" in data:
        specs.append(JobSpec(ports=_ports_value(data["ports"], path)))
    if "pids" in data:
        specs.append(JobSpec(pids=_pids_value(data["pids"], path)))
    if "match" in data:
        specs.append(JobSpec(match=_check_regex(data["match"], f"{path}: match")))
    jobs = data.get("jobs", [])
    if not isinstance(jobs, list):
        raise ConfigError(f"{path}: jobs must be an array of tables: [[jobs]]")
    names = set()
    for i, j in enumerate(jobs):
        where = f"{path}: jobs[{i}]"
        if not isinstance(j, dict):
            raise ConfigError(f"{where} must be a table")
        unknown = set(j) - JOB_KEYS
        if unknown:
            raise ConfigError(f"{where}: unknown key(s) {', '.join(sorted(unknown))}; valid: {', '.join(sorted(JOB_KEYS))}")
        name = j.get("name")
        if not isinstance(name, str) or not re.fullmatch(r"[A-Za-z0-9_.:@/-]{1,128}", name):
            raise ConfigError(f"{where}: name is required (letters, digits, _.:@/-)")
        if name in names:
            raise ConfigError(f"{where}: duplicate job name {name!r}")
        names.add(name)
        sel = [k for k in ("ports", "pids", "match") if k in j]
        if len(sel) != 1:
            raise ConfigError(f"{where} ({name}): give exactly one of ports, pids, match")
        size = parse_size_bytes(j["model_size"], what=f"{where} model_size") if "model_size" in j else None
        cap = parse_rate_bps(j["cap"], what=f"{where} cap") if "cap" in j else None
        extra = {"model_bytes": size, "cap_bps": cap, **_comm_keys(j, f"{where} ({name})")}
        if sel[0] == "ports":
            specs.append(JobSpec(name=name, ports=_ports_value(j["ports"], where), **extra))
        elif sel[0] == "pids":
            specs.append(JobSpec(name=name, pids=_pids_value(j["pids"], where), **extra))
        else:
            specs.append(JobSpec(name=name, match=_check_regex(str(j["match"]), where), **extra))
    kw["jobs"] = tuple(specs)
    return kw


def build_config(file: str | None = None, **flags: Any) -> Config:
    """Config from an optional file, overridden by the flags that were given (not None)."""
    kw = load_file(file) if file else {}
    flag_specs = specs_from_flags(flags.pop("ports", None), flags.pop("pids", None), flags.pop("match", None))
    if flag_specs:
        kw["jobs"] = flag_specs + tuple(s for s in kw.get("jobs", ()) if s.name)
    if flags.get("link_rate") is not None:
        kw["link_rate_bps"] = parse_rate_bps(flags.pop("link_rate"), what="--link-rate")
    flags.pop("link_rate", None)
    if flags.get("cap") is not None:
        kw["cap_bps"] = parse_rate_bps(flags.pop("cap"), what="--cap")
    flags.pop("cap", None)
    if flags.get("switch") is not None:
        kw["switch"] = tuple(x.strip() for x in flags.pop("switch").split(",") if x.strip())
    flags.pop("switch", None)
    names = {"rr_interval": "rr_interval_s", "rescan": "rescan_s", "lease": "lease_s", "slot": "slot_s",
             "plan_offset": "plan_offset_s",
             "phase_gap": "phase_gap_s"}
    for k, v in flags.items():
        if v is not None:
            kw[names.get(k, k)] = v
    return replace(Config(), **kw).validate()


# -- reload (SIGHUP) --------------------------------------------------------------------------

# Config fields that a reload applies to the running daemon.
RELOAD_LIVE = ("jobs", "rescan_s", "rr_interval_s", "cap_bps", "log_level")
# The other fields, with the reason a reload cannot change them (restart hostctl to do so).
_TREE = "the htb tree is built with it at start"
_PACER = "the sock_ops pacer is attached with it at start"
_MLCC = "mlcc's planner and switch client are built with it at start"
_METRICS = "the metrics server is bound at start"
RELOAD_FIXED = {
    "policy": "the datapath (bands, classifier or pacer) is chosen at start",
    "iface": "the tc tree and filters live on the interface the daemon started on",
    "link_rate_bps": _TREE, "other_rate": _TREE, "bands": _TREE,
    "ingress_rate": "the IFB and its htb tree are built with it at start",
    "lease_s": "the BPF programs' fail-open lease is set when they are loaded",
    "metrics_port": _METRICS, "metrics_addr": _METRICS,
    "cgroup": _PACER, "phase_gap_s": _PACER, "slot_s": "the slot loop and the pacer's monitor run with it from start",
    "switch": _MLCC, "curve_keys": _MLCC, "horizon": _MLCC, "plan_offset_s": _MLCC, "deps": _MLCC,
    "job_order": _MLCC,
    "containers": "discovery is built with it at start", "container_addr": "discovery is built with it at start",
}
FIELD_KEYS = {"rr_interval_s": "rr_interval", "rescan_s": "rescan", "lease_s": "lease", "slot_s": "slot",
              "plan_offset_s": "plan_offset", "phase_gap_s": "phase_gap", "link_rate_bps": "link_rate",
              "cap_bps": "cap", "jobs": "jobs (ports, pids, match, [[jobs]])"}


def _show(field_name: str, v: Any) -> str:
    if field_name == "jobs":
        return ", ".join(s.name or ",".join(map(str, s.ports)) or ",".join(map(str, s.pids)) or str(s.match)
                         for s in v) or "none"
    if isinstance(v, tuple):
        return ",".join(map(str, v)) or "none"
    if v is not None and field_name in ("link_rate_bps", "cap_bps"):
        from hostctl.core.units import format_rate

        return format_rate(v)
    return "default" if v is None else str(v)


def reload_config(old: Config, new: Config) -> tuple[Config, list[str], list[str]]:
    """What a reload does: (the config to run with, the keys that changed live, one refusal line
    per key that cannot change live). Refused keys keep their old values; the result is
    validated (ConfigError when the mix of new live keys and kept keys is not a valid config)."""
    live: dict[str, Any] = {}
    changed, refused = [], []
    fixed = dict(RELOAD_FIXED)
    if old.plans_mlcc:  # mlcc rotates its job order every rr_interval (job_order rotate)
        fixed["rr_interval_s"] = _MLCC
    if old.pacing and not old.tracks_all_flows and new.tracks_all_flows:
        fixed["jobs"] = ("the pacer was started tracking the flows of listed ports only; selecting jobs by "
                         "pids or match needs a restart")
    for name in Config.__dataclass_fields__:
        a, b = getattr(old, name), getattr(new, name)
        if a == b:
            continue
        key = FIELD_KEYS.get(name, name)
        if name in fixed or name not in RELOAD_LIVE:
            refused.append(f"{key} {_show(name, a)} -> {_show(name, b)} refused: "
                           f"{fixed.get(name, 'it cannot change live')}; restart hostctl to change it "
                           f"(keeping {_show(name, a)})")
        else:
            live[name] = b
            changed.append(key)
    return replace(old, **live).validate(), changed, refused


def link_rate_warning(link_rate_bps: int, given: str | int | None, iface: str, nic_bps: int | None) -> str | None:
    """A warning when the configured link rate is above the NIC's reported speed (htb then never
    queues: the NIC's queue decides and the bands stop working). Names both numbers, and the
    likely mistake when the value was written in tc's bytes-per-second units (10gbps = 80gbit)."""
    from hostctl.core.units import format_rate

    if not nic_bps or link_rate_bps <= nic_bps:
        return None
    msg = (f"link rate {format_rate(link_rate_bps)} ({link_rate_bps} bit/s) is above the speed {iface} reports, "
           f"{format_rate(nic_bps)} ({nic_bps} bit/s): htb will not queue and priorities will not act")
    if isinstance(given, str) and re.search(r"bps\s*$", given, re.I) and not re.search(r"bit\s*$", given, re.I):
        msg += f"; note {given!r} is BYTES per second in tc units (for bits write e.g. {given[:-3]}bit)"
    return msg + "; give --link-rate a little below the line rate, e.g. 97% of it"
