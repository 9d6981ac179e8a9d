"""An emulated cluster in network namespaces: hosts, switches, shaped links.

Layout of testbed NAME (every name below is unique to it, so testbeds coexist):

* ``hctb-NAME-sw``: one namespace holding the switches, Linux bridges: ``br0``
  with one switch; ``tor0``, ``tor1``, ... joined to ``agg`` with racks.
* ``hctb-NAME-hI``: host I, a namespace with ``eth0`` (address 10.B.0.I+1/16, B
  unique per testbed) whose peer ``hI`` sits on the host's switch.
* ``/sys/fs/cgroup/unified/hostctl-testbed/NAME/hI``: host I's cgroup (v2).
  Every process started on a host is put there before it enters the
  namespace, so per-host cgroup eBPF attachments stay separate and ``down``
  finds every process, also after a crash of the harness.

Line rates (bits/s, each direction): host egress by a ``tbf`` root qdisc on
``eth0`` (the "NIC", which hostctl replaces while it runs and which comes back
when it stops), host ingress by a ``tbf`` on the switch port ``hI``; a rack
uplink is a veth pair ``rRup`` (on tor R, shaping ToR -> aggregation) /
``rRdn`` (on agg, shaping aggregation -> ToR). The tbf ``limit`` is the switch
port buffer (``queue``).

State (``/run/lab/hostctl_lab/testbed/NAME.json``) is written before anything is
created; ``down`` uses it, and falls back to the naming scheme when it is gone.
"""

from __future__ import annotations

import ctypes
import json
import os
import re
import shutil
import signal
import subprocess
import threading
import time
from dataclasses import asdict, dataclass

from hostctl import consts
from hostctl.cgroups import cgroup_pids, kill_cgroup, remove_cgroup_tree
from hostctl.errors import ConfigError, HostctlError
from hostctl_lab.topology import LabFabric
from hostctl_lab.workloads.common import TCP_CC_ENV

STATE_DIR = os.path.join(consts.RUN_DIR, "testbed")
CGROUP_V2_CANDIDATES = ("/sys/fs/cgroup/unified", "/sys/fs/cgroup")
NS_PREFIX = "hctb-"
HOST_DEV = "eth0"
_NAME_RE = re.compile(r"[a-z0-9]{1,8}")
MTU_WIRE = 1514


class TestbedError(HostctlError):
    __test__ = False
    exit_code = 6


def cgroup2_root() -> str:
    for p in CGROUP_V2_CANDIDATES:
        if os.path.exists(os.path.join(p, "cgroup.procs")) and os.path.exists(os.path.join(p, "cgroup.controllers")):
            return p
    raise TestbedError("no cgroup v2 hierarchy found (looked at /sys/fs/cgroup/unified and /sys/fs/cgroup): "
                       "mount one with: mount -t cgroup2 none /sys/fs/cgroup/unified")


def check_name(name: str) -> str:
    if not _NAME_RE.fullmatch(name or ""):
        raise ConfigError(f"bad testbed name {name!r}: use 1-8 lowercase letters or digits, e.g. tb1")
    return name


def _run(cmd: list[str], *, check: bool = True, stdin: str | None = None, timeout: float = 30
         ) -> subprocess.CompletedProcess:
    r = subprocess.run(cmd, input=stdin, capture_output=True, text=True, timeout=timeout)
    if check and r.returncode != 0:
        raise TestbedError(f"{' '.join(cmd[:6])} failed: {(r.stderr or r.stdout).strip()}")
    return r


def shaper_burst(rate_bps: int) -> int:
    """A shaper's bucket at ``rate_bps``: ~4 ms of traffic, at least 2 full frames (so GSO
    packets are split and never stall)."""
    return max(2 * MTU_WIRE, rate_bps // 8 // 250)


def tbf_args(rate_bps: int, queue_bytes: int) -> list[str]:
    """tbf shaping ``rate_bps`` with a bucket of ``shaper_burst``, the queue ``queue_bytes`` (the
    port buffer)."""
    burst = shaper_burst(rate_bps)
    return ["tbf", "rate", f"{rate_bps}bit", "burst", str(burst), "limit", str(max(queue_bytes, burst))]


@dataclass(frozen=True)
class HostInfo:
    name: str  # h0
    ns: str  # hctb-NAME-h0
    dev: str  # eth0 inside ns
    port: str  # h0: the switch-side veth, in the switch namespace
    addr: str  # 10.B.0.1
    rack: int
    cgroup: str  # absolute cgroup v2 path


@dataclass(frozen=True)
class LinkInfo:
    name: str  # h0:up, h0:down, rack0:up, rack0:down
    ns: str  # namespace of the shaped device
    dev: str  # shaped device (egress)
    rate_bps: int


class Testbed:
    """Build (`up`), use (`popen`, `counters`) and remove (`down`) one emulated cluster."""

    __test__ = False  # not a pytest class

    def __init__(self, name: str, topology: LabFabric, subnet: int | None = None,
                 state_dir: str = STATE_DIR) -> None:
        self.name = check_name(name)
        self.topology = topology
        self.state_dir = state_dir
        self.subnet = subnet
        self.sw_ns = f"{NS_PREFIX}{name}-sw"
        self.cg_dir = ""
        self.procs: list[subprocess.Popen] = []

    # --- naming -------------------------------------------------------------
    def hosts(self) -> list[HostInfo]:
        assert self.subnet is not None
        return [HostInfo(name=h, ns=f"{NS_PREFIX}{self.name}-{h}", dev=HOST_DEV, port=h,
                         addr=f"10.{self.subnet}.{i // 250}.{i % 250 + 1}", rack=self.topology.rack_of[i],
                         cgroup=os.path.join(self.cg_dir, h))
                for i, h in enumerate(self.topology.hosts)]

    def host(self, name: str) -> HostInfo:
        for h in self.hosts():
            if h.name == name:
                return h
        raise ConfigError(f"testbed {self.name} has no host {name!r}")

    def links(self) -> list[LinkInfo]:
        t = self.topology
        out = []
        for h in self.hosts():
            out.append(LinkInfo(f"{h.name}:up", h.ns, h.dev, t.link_bps))
            out.append(LinkInfo(f"{h.name}:down", self.sw_ns, h.port, t.link_bps))
        if t.racks > 1:
            assert t.uplink_bps is not None
            for r in range(t.racks):
                out.append(LinkInfo(f"rack{r}:up", self.sw_ns, f"r{r}up", t.uplink_bps))
                out.append(LinkInfo(f"rack{r}:down", self.sw_ns, f"r{r}dn", t.uplink_bps))
        return out

    def state_path(self) -> str:
        return os.path.join(self.state_dir, f"{self.name}.json")

    # --- lifecycle ----------------------------------------------------------
    def _pick_subnet(self) -> int:
        used = {s.get("subnet") for s in list_states(self.state_dir)}
        for b in range(100, 200):
            if b not in used:
                return b
        raise TestbedError("all 100 testbed subnets (10.100-199.0.0/16) are in use: hostctl testbed down --all")

    def _save_state(self) -> None:
        os.makedirs(self.state_dir, mode=0o700, exist_ok=True)
        tmp = self.state_path() + ".tmp"
        with open(tmp, "w") as f:
            json.dump({"name": self.name, "subnet": self.subnet, "sw_ns": self.sw_ns, "cgroup": self.cg_dir,
                       "topology": asdict(self.topology), "created": time.time(), "creator_pid": os.getpid(),
                       "hosts": [asdict(h) for h in self.hosts()]}, f, indent=1)
        os.replace(tmp, self.state_path())

    def up(self) -> "Testbed":
        if os.geteuid() != 0:
            raise TestbedError("the testbed builds network namespaces: run it as root")
        if os.path.exists(self.state_path()) or _ns_exists(self.sw_ns):
            raise TestbedError(f"testbed {self.name} already exists: remove it with `hostctl testbed down {self.name}` "
                               "or pick another --name")
        self.cg_dir = os.path.join(cgroup2_root(), "hostctl-testbed", self.name)
        if self.subnet is None:
            self.subnet = self._pick_subnet()
        self._save_state()  # first: `down` can undo a half-built testbed
        try:
            self._build()
        except BaseException:
            self.down()
            raise
        return self

    def _build(self) -> None:
        t = self.topology
        hosts = self.hosts()
        os.makedirs(self.cg_dir, exist_ok=True)
        for h in hosts:
            os.makedirs(h.cgroup, exist_ok=True)
        for ns in [self.sw_ns] + [h.ns for h in hosts]:
            _run(["ip", "netns", "add", ns])
        sw = ["link set lo up"]
        bridges = ["br0"] if t.racks == 1 else [f"tor{r}" for r in range(t.racks)] + ["agg"]
        for br in bridges:
            # forward_delay 0 and no STP: ports forward at once, as a plain switch would
            sw.append(f"link add {br} type bridge forward_delay 0 stp_state 0 ageing_time 30000")
            sw.append(f"link set {br} up")
        for r in range(t.racks if t.racks > 1 else 0):
            sw.append(f"link add r{r}up type veth peer name r{r}dn")
            sw.append(f"link set r{r}up master tor{r} up")
            sw.append(f"link set r{r}dn master agg up")
        _run(["ip", "-n", self.sw_ns, "-batch", "-"], stdin="\n".join(sw) + "\n")
        for h in hosts:
            br = "br0" if t.racks == 1 else f"tor{h.rack}"
            _run(["ip", "link", "add", h.port, "netns", self.sw_ns, "type", "veth", "peer", "name", h.dev,
                  "netns", h.ns])
            _run(["ip", "-n", self.sw_ns, "link", "set", h.port, "master", br, "up"])
            _run(["ip", "-n", h.ns, "-batch", "-"], stdin=(
                f"addr add {h.addr}/16 dev {h.dev}\nlink set {h.dev} up\nlink set lo up\n"
                f"route add default dev {h.dev}\n"))
        tc = [f"qdisc replace dev {ln.dev} root " + " ".join(tbf_args(ln.rate_bps, t.queue_bytes))
              for ln in self.links() if ln.ns == self.sw_ns]
        _run(["tc", "-n", self.sw_ns, "-batch", "-"], stdin="\n".join(tc) + "\n")
        for h in hosts:
            self.shape_host_egress(h)
            if not t.gso:  # TCP sizes its packets by the device's limit: one frame each, as a real switch sees
                _run(["ip", "-n", h.ns, "link", "set", "dev", h.dev, "gso_max_segs", "1"])
            for k, v in t.sysctls:
                _run(["ip", "netns", "exec", h.ns, "sysctl", "-q", "-w", f"{k}={v}"])

    def prioritize_fabric(self, classes: list[list[int]]) -> list[str]:
        """Strict priority between jobs at every switch port and rack link (not at the hosts' NICs):
        the egress of each shaped switch-side device becomes an htb of the same rate whose leaf
        classes are served in strict priority (htb ``prio``; each guaranteed only 100 kbit/s, and
        borrowing the rest in priority order; this kernel has no ``prio`` qdisc): band 0 for packets
        under 128 bytes (pure ACKs, SYNs), band i+1 for the TCP ports of classes[i] (either direction:
        a port matches as source or destination), the last band for everything else (cross traffic).
        Each band queues in a bfifo of the port buffer (``queue``). A lab oracle for a programmable
        switch that orders the jobs; returns the tc commands it ran."""
        t = self.topology
        bands = len(classes) + 2
        if bands > 8:
            raise TestbedError(f"prioritize_fabric: {len(classes)} classes; htb has 8 priorities, so at most 6 "
                               "(plus the control and the default band)")
        queue = str(max(t.queue_bytes, 2 * MTU_WIRE))
        shaped = [(ln.dev, ln.rate_bps) for ln in self.links() if ln.ns == self.sw_ns]
        cmds = []
        for d, rate in shaped:
            burst = shaper_burst(rate)
            cmds.append(f"qdisc add dev {d} root handle 1: htb default {bands:x}")
            cmds.append(f"class add dev {d} parent 1: classid 1:ff htb rate {rate}bit ceil {rate}bit "
                        f"burst {burst} cburst {burst} quantum {MTU_WIRE}")
            for b in range(bands):
                cmds.append(f"class add dev {d} parent 1:ff classid 1:{b + 1:x} htb rate 100kbit ceil {rate}bit "
                            f"burst {burst} cburst {burst} prio {b} quantum {MTU_WIRE}")
                cmds.append(f"qdisc add dev {d} parent 1:{b + 1:x} handle {b + 10:x}: bfifo limit {queue}")
            cmds.append(f"filter add dev {d} parent 1: protocol ip prio 1 u32 match u16 0 0xff80 at 2 flowid 1:1")
            for i, ports in enumerate(classes):
                for port in ports:
                    for side in ("sport", "dport"):
                        cmds.append(f"filter add dev {d} parent 1: protocol ip prio {2 + i} u32 "
                                    f"match ip protocol 6 0xff match ip {side} {int(port)} 0xffff flowid 1:{i + 2:x}")
        # a root of another kind or handle cannot be changed in place: remove it first (no error if absent)
        _run(["tc", "-force", "-n", self.sw_ns, "-batch", "-"], check=False,
             stdin="".join(f"qdisc del dev {d} root\n" for d, _ in shaped))
        _run(["tc", "-n", self.sw_ns, "-batch", "-"], stdin="\n".join(cmds) + "\n")
        return cmds

    def fabric_band_bytes(self) -> dict[str, list[int]]:
        """After prioritize_fabric: per switch-side device, the bytes each prio band sent so far."""
        out: dict[str, list[int]] = {}
        for q in _qdisc_stats(self.sw_ns):
            parent = str(q.get("parent", ""))
            if q.get("kind") == "bfifo" and parent.startswith("1:"):
                band = int(parent[2:], 16) - 1
                row = out.setdefault(q["dev"], [])
                row.extend([0] * (band + 1 - len(row)))
                row[band] = int(q.get("bytes", 0))
        return out

    def shape_host_egress(self, h: HostInfo) -> None:
        """(Re)install the host NIC's line rate: a tbf root qdisc on eth0."""
        _run(["tc", "-n", h.ns, "qdisc", "replace", "dev", h.dev, "root",
              *tbf_args(self.topology.link_bps, self.topology.queue_bytes)])

    def down(self) -> list[str]:
        """Remove processes, namespaces, cgroups and state. Idempotent; returns what it removed."""
        for p in self.procs:
            if p.poll() is None:
                try:
                    p.send_signal(signal.SIGTERM)
                except ProcessLookupError:
                    pass
        removed = teardown(self.name, self.state_dir, grace_s=2.0)
        for p in self.procs:
            try:
                p.wait(2)
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait(2)
        self.procs.clear()
        return removed

    # --- use ----------------------------------------------------------------
    def command(self, host: str, argv: list[str], *, net_only: bool = False) -> list[str]:
        """argv run on `host`: joins the host's cgroup, then its network namespace.
        With net_only, only the network namespace is entered (nsenter): the command keeps
        the host's /sys mounts (cgroup2, bpffs), which the pacing daemon needs and which
        `ip netns exec` replaces with a fresh sysfs."""
        h = self.host(host)
        if net_only:
            return ["sh", "-c", 'ns=$1; shift; echo $$ > "$0/cgroup.procs" && exec nsenter --net="/run/netns/$ns" "$@"',
                    h.cgroup, h.ns, *argv]
        return ["sh", "-c", 'echo $$ > "$0/cgroup.procs" && exec ip netns exec "$@"', h.cgroup, h.ns, *argv]

    def popen(self, host: str, argv: list[str], *, net_only: bool = False, **kw) -> subprocess.Popen:
        kw.setdefault("stdin", subprocess.DEVNULL)
        if self.topology.tcp_cc:
            kw["env"] = {**(kw.get("env") or os.environ), TCP_CC_ENV: self.topology.tcp_cc}
        p = subprocess.Popen(self.command(host, argv, net_only=net_only), **kw)
        self.procs.append(p)
        return p

    def run(self, host: str, argv: list[str], *, check: bool = True, timeout: float = 60
            ) -> subprocess.CompletedProcess:
        return _run(self.command(host, argv), check=check, timeout=timeout)

    def counters(self) -> dict[str, int]:
        """Bytes transmitted so far on every shaped link (the egress device's tx_bytes)."""
        by_ns: dict[str, dict[str, int]] = {}
        out = {}
        for ln in self.links():
            if ln.ns not in by_ns:
                by_ns[ln.ns] = _tx_bytes(ln.ns)
            out[ln.name] = by_ns[ln.ns].get(ln.dev, 0)
        return out

    def drops(self) -> dict[str, int]:
        """Packets dropped so far by every shaped link's root qdisc: the switch port buffer
        (``queue``) for a down link or a rack link, the host NIC's root qdisc (hostctl's while it
        runs) for an up link. A link whose device or root qdisc is gone is left out."""
        by_ns: dict[str, dict[str, int]] = {}
        out = {}
        for ln in self.links():
            if ln.ns not in by_ns:
                by_ns[ln.ns] = _root_drops(ln.ns)
            if ln.dev in by_ns[ln.ns]:
                out[ln.name] = by_ns[ln.ns][ln.dev]
        return out

    @classmethod
    def load(cls, name: str, state_dir: str = STATE_DIR) -> "Testbed":
        p = os.path.join(state_dir, f"{check_name(name)}.json")
        try:
            with open(p) as f:
                st = json.load(f)
        except FileNotFoundError:
            raise TestbedError(f"no testbed named {name}: `hostctl testbed status` lists them") from None
        except (OSError, ValueError) as e:
            raise TestbedError(f"testbed state {p} is unreadable ({e}): `hostctl testbed down {name}` removes it")
        topo = st["topology"]
        tb = cls(name, LabFabric(hosts=tuple(topo["hosts"]), rack_of=tuple(topo["rack_of"]), racks=topo["racks"],
                                 link_bps=topo["link_bps"], uplink_bps=topo["uplink_bps"],
                                 queue_bytes=topo["queue_bytes"], tcp_cc=topo.get("tcp_cc"), gso=topo.get("gso", True),
                                 sysctls=tuple(tuple(x) for x in topo.get("sysctls", ()))),
                 subnet=st["subnet"], state_dir=state_dir)
        tb.cg_dir = st["cgroup"]
        return tb


CLONE_NEWNET = 0x40000000
_libc = ctypes.CDLL(None, use_errno=True)


def call_in_netns(ns: str, fn, timeout_s: float = 10.0):
    """fn() in a thread that joined network namespace `ns` (sockets it opens live there).
    Cheaper than spawning `ip netns exec` for a control-socket request."""
    box: dict = {}

    def target() -> None:
        try:
            fd = os.open(os.path.join("/run/netns", ns), os.O_RDONLY)
            try:
                if _libc.setns(fd, CLONE_NEWNET) != 0:
                    err = ctypes.get_errno()
                    raise OSError(err, f"setns into {ns}: {os.strerror(err)}")
            finally:
                os.close(fd)
            box["value"] = fn()
        except BaseException as e:  # noqa: BLE001 - re-raised in the caller
            box["error"] = e

    t = threading.Thread(target=target, daemon=True, name=f"netns-{ns}")
    t.start()
    t.join(timeout_s)
    if t.is_alive():
        raise TestbedError(f"a request in network namespace {ns} did not return within {timeout_s:g} s")
    if "error" in box:
        raise box["error"]
    return box.get("value")


def _ns_exists(ns: str) -> bool:
    return os.path.exists(os.path.join("/run/netns", ns))


def _tx_bytes(ns: str) -> dict[str, int]:
    r = _run(["ip", "-n", ns, "-s", "-j", "link", "show"], check=False)
    if r.returncode != 0:
        return {}
    return {d["ifname"]: int(d.get("stats64", {}).get("tx", {}).get("bytes", 0)) for d in json.loads(r.stdout)}


def _qdisc_stats(ns: str) -> list[dict]:
    """Every qdisc of namespace ns with its counters (``tc -s -j qdisc show``); [] if tc fails."""
    r = _run(["tc", "-n", ns, "-s", "-j", "qdisc", "show"], check=False)
    if r.returncode != 0:
        return []
    try:
        return json.loads(r.stdout)
    except ValueError:
        return []


def _root_drops(ns: str) -> dict[str, int]:
    """device -> packets dropped by its root qdisc (a parent qdisc's count includes its children's)."""
    return {q["dev"]: int(q.get("drops", 0)) for q in _qdisc_stats(ns) if q.get("root") and "dev" in q}


def list_states(state_dir: str = STATE_DIR) -> list[dict]:
    try:
        names = sorted(n for n in os.listdir(state_dir) if n.endswith(".json"))
    except FileNotFoundError:
        return []
    out = []
    for n in names:
        try:
            with open(os.path.join(state_dir, n)) as f:
                out.append(json.load(f))
        except (OSError, ValueError):
            out.append({"name": n[:-5], "broken": True})
    return out


def teardown(name: str, state_dir: str = STATE_DIR, grace_s: float = 2.0) -> list[str]:
    """Remove everything of testbed `name`, from its state file or, without one, by naming scheme."""
    check_name(name)
    removed: list[str] = []
    cgs = {os.path.join(root, "hostctl-testbed", name) for root in CGROUP_V2_CANDIDATES}
    for cg in cgs:
        if os.path.isdir(cg):
            kill_cgroup(cg, grace_s)
    prefix = f"{NS_PREFIX}{name}-"
    namespaces = [n for n in _list_netns() if n.startswith(prefix)]
    for ns in namespaces:
        # processes that entered the namespace some other way (e.g. `ip netns exec` by hand)
        r = _run(["ip", "netns", "pids", ns], check=False)
        for pid in r.stdout.split():
            try:
                os.kill(int(pid), signal.SIGKILL)
            except (ProcessLookupError, ValueError):
                pass
        delete_netns(ns)
        removed.append(f"netns {ns}")
    for cg in cgs:
        if os.path.isdir(cg):
            remove_cgroup_tree(cg)
            removed.append(f"cgroup {cg}")
            try:  # the shared parent, once the last testbed is gone
                os.rmdir(os.path.dirname(cg))
            except OSError:
                pass
    p = os.path.join(state_dir, f"{name}.json")
    if os.path.exists(p):
        os.unlink(p)
        removed.append(f"state {p}")
    return removed


def delete_netns(ns: str) -> None:
    """`ip netns del`, and the hostctl state (journals) kept for that namespace, which died with it."""
    path = os.path.join("/run/netns", ns)
    state = consts.state_dir(path) if os.path.exists(path) else None
    _run(["ip", "netns", "del", ns], check=False)
    if state is not None:
        shutil.rmtree(state, ignore_errors=True)


def _list_netns() -> list[str]:
    try:
        return sorted(os.listdir("/run/netns"))
    except FileNotFoundError:
        return []


def all_testbed_names(state_dir: str = STATE_DIR) -> list[str]:
    """Testbeds known by state file or seen as namespaces (a crashed harness may have left either)."""
    names = {s["name"] for s in list_states(state_dir) if "name" in s}
    for ns in _list_netns():
        m = re.fullmatch(rf"{NS_PREFIX}([a-z0-9]{{1,8}})-(sw|h\d+)", ns)
        if m:
            names.add(m.group(1))
    for root in CGROUP_V2_CANDIDATES:
        d = os.path.join(root, "hostctl-testbed")
        if os.path.isdir(d):
            names |= {n for n in os.listdir(d) if _NAME_RE.fullmatch(n)}
    return sorted(names)


def status(state_dir: str = STATE_DIR) -> list[dict]:
    """One dict per testbed: hosts with address and live process count, links with rates, problems."""
    out = []
    for name in all_testbed_names(state_dir):
        try:
            tb = Testbed.load(name, state_dir)
        except TestbedError as e:
            out.append({"name": name, "problem": str(e)})
            continue
        hosts = []
        for h in tb.hosts():
            hosts.append({"host": h.name, "ns": h.ns, "addr": h.addr, "rack": h.rack,
                          "processes": len(cgroup_pids(h.cgroup)), "up": _ns_exists(h.ns)})
        missing = [h["ns"] for h in hosts if not h["up"]] + ([] if _ns_exists(tb.sw_ns) else [tb.sw_ns])
        out.append({"name": name, "subnet": f"10.{tb.subnet}.0.0/16", "hosts": hosts,
                    "links": [{"link": ln.name, "rate_bps": ln.rate_bps} for ln in tb.links()],
                    "gso": tb.topology.gso,
                    "problem": (f"missing namespaces {', '.join(missing)}: `hostctl testbed down {name}`"
                                if missing else None)})
    return out
