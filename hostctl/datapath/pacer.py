"""The pacing datapath: hostctl/bpf/hc_pace.c (sock_ops) loaded with bcc, attached to one
cgroup v2 (the daemon's *scope*), its program and maps pinned so that ``hostctl
clean`` can undo a crashed daemon.

Scope and names:
  scope        a cgroup v2 directory; its id is the directory's inode
  pins         <bpffs>/hostctl/cg<id>/{hc_pace, hc_pace_flows, hc_rates, ...}
  owner record /run/hostctl/pace/cg<id>.json: pid, cgroup (path, and path below the
               cgroup v2 root), pin folder (or none), program id, netns
One daemon per scope: a second one is refused while the owner lives.

Where the filesystems are: ``ip netns exec`` gives its command a private mount
namespace with a fresh /sys, where neither cgroup2 nor bpffs is mounted. There the
pacer mounts cgroup2 at /sys/fs/cgroup of that private namespace: cgroup v2 is one
hierarchy, so this is the same tree the host sees (mounted with the host's options,
read from the mount table of the process that started it, because mounting cgroup2
sets the hierarchy's global options). It does not mount a bpffs: that would be a
private instance whose pins vanish with the namespace. It pins nothing there; the
cgroup attachment keeps program and maps alive, and the owner record names the
program by id, through which ``hostctl clean`` or a restarted daemon (in any mount
namespace) finds the program and its maps.

Teardown (orderly stop, ``hostctl clean`` after a crash: one function, ``release``):
  1. set HP_CTL_RELEASE: every callback from now on restores the flow's original rate;
  2. flows still throttled (idle ones get no callback) get their original rate back
     from user space, through a duplicate of the socket (sockreset.py);
  3. detach the program from the cgroup, unpin everything, drop the owner record.
"""

from __future__ import annotations

import ctypes
import errno
import ipaddress
import json
import logging
import operator
import os
import struct
import time

import numpy as np

from hostctl import consts
from hostctl.cgroups import cgroup_pids
from hostctl.containers import call_in_each_netns, netns_inode
from hostctl.core.bpfabi import DEFINES
from hostctl.core.gencache import Generations
from hostctl.core.pace import WATCH_SLOT, PaceTable
from hostctl.core.types import FlowKey
from hostctl.datapath import Burst, BurstBatch, FlowRecord, bpfsys
from hostctl.datapath.classifier import addr16, bpf_dir, bpf_source, import_bcc
from hostctl.errors import DatapathError, ProbeError

log = logging.getLogger("hostctl.datapath")

PROG_NAME = "hc_pace"
MAP_NAMES = ("hc_pace_flows", "hc_rates", "hc_sel_flows", "hc_sel_ports", "hc_sel_remotes", "hc_slot_rate",
             "hc_pace_ctl", "hc_bursts")
# Compatibility: pins of a hostctl from before the maps were named hc_* (hp_<name>, in
# MAP_NAMES' order); _open_objects and release() still find and remove them.
OLD_MAP_NAMES = dict(zip(("hp_flows", "hp_rates", "hp_sel_flows", "hp_sel_ports", "hp_sel_remotes", "hp_slot_rate",
                          "hp_ctl", "hp_bursts"), MAP_NAMES))
# sizes and values shared with the program: hostctl/bpf/hostctl.h
HC_MAX_FLOWS = DEFINES["HC_MAX_FLOWS"]
SIZES = ("HC_MAX_FLOWS", "HC_MAX_PORTS", "HC_MAX_REMOTES", "HC_MAX_SLOTS", "HC_RINGBUF_PAGES")  # passed with -D
UNLIMITED = DEFINES["HP_UNLIMITED"]
HP_SLOT_WATCH = WATCH_SLOT  # a remote-port selector that only asks for callbacks (core/pace.py)
MAX_RATE_BPS_BYTES = UNLIMITED - 1  # the largest settable rate, bytes/s (~34 Gbit/s)
MIN_RATE_BYTES = 12_500  # 100 kbit/s: a rate of 0 would stall TCP; never go below this

HP_F_CLOSED = DEFINES["HP_F_CLOSED"]
HP_F_SETOPT_ERR = DEFINES["HP_F_SETOPT_ERR"]
HP_CTL_TRACK_ALL = DEFINES["HP_CTL_TRACK_ALL"]
HP_CTL_RELEASE = DEFINES["HP_CTL_RELEASE"]
# hc_pace_ctl has two entries: the daemon's control words and the program's counters (so that
# a heartbeat, which writes its entry whole, never overwrites a counter increment)
HP_CTL_KEY_CONTROL = DEFINES["HP_CTL_KEY_CONTROL"]
HP_CTL_KEY_COUNTERS = DEFINES["HP_CTL_KEY_COUNTERS"]
CTL_COUNTERS = ("flows_full", "failopen_events", "bursts_lost", "setopt_errors")
SIDE = {"local": DEFINES["HP_SIDE_LOCAL"], "remote": DEFINES["HP_SIDE_REMOTE"]}
ADOPT_TRACKED = DEFINES["HP_ADOPT_TRACKED"]  # hc_adopt.slot of a flow adopted for HP_CTL_TRACK_ALL only
ITER_NAME = "bpf_iter__tcp"  # the adoption pass in hc_pace.c (bcc finds the iterator target by this name)

OWNER_DIR = os.path.join(consts.RUN_DIR, "pace")
# Scopes held by a Pacer of this process that is not closed yet. The owner record cannot
# tell them apart from a dead daemon's record with the same pid (a daemon restarted in a
# fresh PID namespace gets its old pid back), so they are tracked here.
_LIVE_SCOPES: set[str] = set()


# -- C struct mirrors (tests/unit/test_bpf_layout.py checks them against hostctl.h) --------
class FlowKeyC(ctypes.Structure):
    _fields_ = [("laddr", ctypes.c_uint8 * 16), ("raddr", ctypes.c_uint8 * 16),
                ("lport", ctypes.c_uint16), ("rport", ctypes.c_uint16), ("pad", ctypes.c_uint32)]


_KEY_SIZE = ctypes.sizeof(FlowKeyC)
_PORTS = struct.Struct("=HHI")  # FlowKeyC after the two addresses: lport, rport, pad
assert FlowKeyC.lport.offset == 32 and 32 + _PORTS.size == _KEY_SIZE


class RemoteKeyC(ctypes.Structure):
    _fields_ = [("raddr", ctypes.c_uint8 * 16), ("rport", ctypes.c_uint16), ("pad", ctypes.c_uint16)]


def remote_key(endpoint: tuple[str, int]) -> RemoteKeyC:
    return RemoteKeyC.from_buffer_copy(addr16(endpoint[0]) + struct.pack("=HH", endpoint[1], 0))


class PortKeyC(ctypes.Structure):
    _fields_ = [("port", ctypes.c_uint16), ("side", ctypes.c_uint8), ("pad", ctypes.c_uint8)]


class RateC(ctypes.Structure):
    _fields_ = [("rate_Bps", ctypes.c_uint32), ("pad", ctypes.c_uint32)]


class FlowC(ctypes.Structure):
    _fields_ = [("bytes_acked", ctypes.c_uint64), ("bytes_sent", ctypes.c_uint64),
                ("first_ns", ctypes.c_uint64), ("last_ns", ctypes.c_uint64),
                ("burst_start_ns", ctypes.c_uint64), ("burst_base_acked", ctypes.c_uint64),
                ("bursts", ctypes.c_uint64), ("callbacks", ctypes.c_uint64),
                ("slot", ctypes.c_uint32), ("rate_Bps", ctypes.c_uint32), ("orig_rate_Bps", ctypes.c_uint32),
                ("srtt_us", ctypes.c_uint32), ("snd_cwnd", ctypes.c_uint32), ("total_retrans", ctypes.c_uint32),
                ("flags", ctypes.c_uint32), ("setopt_errors", ctypes.c_uint32)]


class BurstC(ctypes.Structure):
    _fields_ = [("key", FlowKeyC), ("start_ns", ctypes.c_uint64), ("end_ns", ctypes.c_uint64),
                ("bytes", ctypes.c_uint64), ("slot", ctypes.c_uint32), ("pad", ctypes.c_uint32)]


class CtlC(ctypes.Structure):
    _fields_ = [("heartbeat_ns", ctypes.c_uint64), ("lease_ns", ctypes.c_uint64), ("gap_ns", ctypes.c_uint64),
                ("flags", ctypes.c_uint64), ("flows_full", ctypes.c_uint64), ("failopen_events", ctypes.c_uint64),
                ("bursts_lost", ctypes.c_uint64), ("setopt_errors", ctypes.c_uint64)]


class AdoptC(ctypes.Structure):
    _fields_ = [("key", FlowKeyC), ("slot", ctypes.c_uint32), ("err", ctypes.c_int32)]


MIRRORS = {"hc_flow_key": FlowKeyC, "hc_remote_key": RemoteKeyC, "hc_port_key": PortKeyC, "hc_rate": RateC,
           "hc_flow": FlowC, "hc_burst": BurstC, "hc_pace_ctl": CtlC, "hc_adopt": AdoptC}


def cflags(max_flows: int = HC_MAX_FLOWS) -> list[str]:
    """The include folder of hostctl.h and the map sizes (the header's; a test may shrink the flows)."""
    sizes = {**{n: DEFINES[n] for n in SIZES}, "HC_MAX_FLOWS": max_flows}
    return [f"-I{bpf_dir()}", *(f"-D{n}={v}" for n, v in sizes.items()), "-w"]


def key_bytes(f: FlowKey) -> FlowKeyC:
    return FlowKeyC.from_buffer_copy(raw_key(f))


def _encode(f: FlowKey) -> bytes:
    """The bytes of a flow's map key (hc_flow_key): addresses as 16 bytes (IPv4-mapped), ports."""
    return addr16(f.laddr) + addr16(f.raddr) + _PORTS.pack(f.lport, f.rport, 0)


def _addr(raw: bytes) -> str:
    """16 bytes (IPv6, or IPv4-mapped) -> text (once per flow: whole keys are cached in _KEYS)."""
    ip = ipaddress.IPv6Address(raw)
    return str(ip.ipv4_mapped) if ip.ipv4_mapped else str(ip)


def _decode(raw: bytes) -> FlowKey:
    k = FlowKeyC.from_buffer_copy(raw)
    return FlowKey(_addr(bytes(k.laddr)), int(k.lport), _addr(bytes(k.raddr)), int(k.rport))


# Every flow is encoded once and decoded once, not per write or read (each is every slot): FlowKey -> the
# map key's bytes, and back. Pacer.heartbeat turns their generations every CACHE_GENERATION_S, so they hold
# the flows used in the last 30-60 s (one generation at most twice the flows the map can hold).
CACHE_GENERATION_S = 30.0
raw_key: Generations[FlowKey, bytes] = Generations(_encode, 2 * HC_MAX_FLOWS)
_key_raw: Generations[bytes, FlowKey] = Generations(_decode, 2 * HC_MAX_FLOWS)
_cache_turn_at = [0.0]  # monotonic time of the next turn


def _turn_caches(now: float) -> None:
    if now >= _cache_turn_at[0]:
        if _cache_turn_at[0]:
            raw_key.turn()
            _key_raw.turn()
        _cache_turn_at[0] = now + CACHE_GENERATION_S


def key_of(k: FlowKeyC) -> FlowKey:
    return _key_raw(ctypes.string_at(ctypes.addressof(k), _KEY_SIZE))


# -- where cgroup2 and bpffs are ------------------------------------------------------------
def _mountinfo(pid: str | int = "self") -> list[tuple[str, str, str]]:
    """(mount point, fs type, super options) of a process's mount namespace."""
    out = []
    try:
        with open(f"/proc/{pid}/mountinfo") as f:
            for line in f:
                left, _, right = line.partition(" - ")
                fstype, _src, sopts = (right.split() + ["", "", ""])[:3]
                out.append((left.split()[4], fstype, sopts))
    except OSError:
        pass
    return out


PRIVATE_CGROUP2 = "/sys/fs/cgroup"  # where cgroup2 is mounted in a private /sys (ip netns exec)
_OWN_MOUNTS: set[str] = set()  # mounts this process made (they do not make /sys less private)


def _in_private_sysfs() -> bool:
    """True under `ip netns exec`: /sys is a fresh sysfs with nothing mounted below it
    (but what this process mounted there itself)."""
    return not any(mnt.startswith("/sys/") and mnt not in _OWN_MOUNTS for mnt, _t, _o in _mountinfo())


def _ppid(pid: int) -> int:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return int(f.read().rsplit(")", 1)[1].split()[1])
    except (OSError, IndexError, ValueError):
        return 0


def _ancestors() -> list[int]:
    """PIDs of this process's parent, its parent, ... up to PID 1."""
    out, pid = [], os.getppid()
    while pid > 0 and len(out) < 64:
        out.append(pid)
        pid = _ppid(pid) if pid != 1 else 0
    return out


def _host_cgroup2() -> tuple[str, str] | None:
    """(mount point, super options without rw/ro) of the cgroup2 mount seen by the nearest
    ancestor process that sees one (the shell or service manager that ran `ip netns exec`);
    None when no ancestor sees a cgroup2 mount."""
    for pid in _ancestors():
        for mnt, fstype, sopts in _mountinfo(pid):
            if fstype == "cgroup2":
                return mnt, ",".join(o for o in sopts.split(",") if o not in ("rw", "ro"))
    return None


def _host_path(path: str) -> str | None:
    """``path`` of the host's view (e.g. a pin in the host's bpffs) as reachable from here:
    as is, or from a private /sys through /proc/PID/root of the nearest ancestor process
    whose /sys is not private; None when no such view is reachable."""
    if not _in_private_sysfs():
        return path
    for pid in _ancestors():
        if any(mnt.startswith("/sys/") for mnt, _t, _o in _mountinfo(pid)):
            root = f"/proc/{pid}/root"
            try:
                if os.path.isdir(root + "/sys"):
                    return root + path
            except OSError:
                pass
    return None


def _mount_private_cgroup2() -> str:
    """Mount the cgroup v2 hierarchy at /sys/fs/cgroup of this private mount namespace."""
    host = _host_cgroup2()
    opts = host[1] if host else None
    if opts is None:
        raise ProbeError("no cgroup v2 hierarchy is visible: /sys is private here (as under `ip netns exec`) "
                         "and no parent process sees a cgroup2 mount to copy its options from; mount cgroup2 "
                         "on the host (`mount -t cgroup2 none /sys/fs/cgroup/unified`)")
    try:
        bpfsys.mount_fs("cgroup2", PRIVATE_CGROUP2, opts, bpfsys.MS_NOSUID | bpfsys.MS_NODEV | bpfsys.MS_NOEXEC)
    except OSError as e:
        raise ProbeError(f"cannot mount cgroup2 at {PRIVATE_CGROUP2} of this private mount namespace "
                         f"({e.strerror}): run hostctl as root") from None
    _OWN_MOUNTS.add(PRIVATE_CGROUP2)
    log.info("private /sys (ip netns exec): mounted the cgroup v2 hierarchy at %s (options %r) in this "
             "mount namespace", PRIVATE_CGROUP2, opts or "none")
    return PRIVATE_CGROUP2


def cgroup2_root() -> str:
    """Mount point of the cgroup v2 hierarchy; in a private /sys (ip netns exec), mounted
    first in this process's mount namespace."""
    for mnt, fstype, _o in _mountinfo():
        if fstype == "cgroup2" and os.path.exists(os.path.join(mnt, "cgroup.procs")):
            return mnt
    if _in_private_sysfs():
        return _mount_private_cgroup2()
    raise ProbeError("no cgroup v2 hierarchy is mounted: mount one with `mount -t cgroup2 none /sys/fs/cgroup/unified`")


def resolve_cgroup(spec: str) -> str:
    """A cgroup v2 path ('/' = the root, '/hostctl-testbed/tb/h0', or a full path under the
    v2 mount) -> its directory."""
    root = cgroup2_root()
    host = _host_cgroup2() if root in _OWN_MOUNTS else None  # a full path of the host's view
    prefixes = sorted((r for r in (root, host and host[0]) if r and (spec + "/").startswith(r + "/")), key=len)
    rel = spec[len(prefixes[-1]):] if prefixes else spec  # the longest mount point that contains spec
    path = os.path.normpath(os.path.join(root, rel.lstrip("/")))
    if not os.path.isfile(os.path.join(path, "cgroup.procs")):
        raise DatapathError(f"cgroup {spec!r} does not exist under the cgroup v2 hierarchy {root}: "
                            "give --cgroup a cgroup v2 path such as / or /system.slice")
    return path


def cgroup_rel(path: str) -> str:
    """A cgroup directory as a path below the cgroup v2 root ('/' for the root itself):
    the same in every mount namespace, wherever cgroup2 is mounted there."""
    rel = os.path.relpath(path, cgroup2_root())
    return "/" if rel == "." else "/" + rel


def bpffs_root() -> str | None:
    """The host's bpf filesystem; mounted at /sys/fs/bpf when missing (systemd does that at
    boot). None in a private /sys (ip netns exec): a bpffs mounted there would be a private
    instance, gone with the namespace, so nothing is pinned (the owner record names the
    program by id instead)."""
    path = "/sys/fs/bpf"
    if bpfsys.is_bpffs(path):
        return path
    if _in_private_sysfs():
        return None
    try:
        bpfsys.mount_bpffs(path)
    except OSError as e:
        raise ProbeError(f"cannot mount the bpf filesystem at {path} ({e.strerror}): "
                         f"mount it with `mount -t bpf bpf {path}`") from None
    log.info("mounted the bpf filesystem at %s", path)
    return path


def scope_id(cgroup_path: str) -> str:
    return f"cg{os.stat(cgroup_path).st_ino}"


_FLOW = struct.Struct("=8Q8I")  # FlowC's fields in order (checked against ctypes at import)
assert _FLOW.size == ctypes.sizeof(FlowC)
_BURST_SIZE = ctypes.sizeof(BurstC)
_ADOPT_SIZE = ctypes.sizeof(AdoptC)
_ADOPT_TAIL = struct.Struct("=Ii")  # AdoptC after its key: slot, err
assert AdoptC.slot.offset == _KEY_SIZE and _KEY_SIZE + _ADOPT_TAIL.size == _ADOPT_SIZE
_BURST_TAIL = struct.Struct("=3QI")  # BurstC after its key: start_ns, end_ns, bytes, slot
assert BurstC.start_ns.offset == _KEY_SIZE and BurstC.slot.offset == _KEY_SIZE + 24


def _row(key: FlowKey, fields: tuple) -> FlowRecord:
    (acked, sent, first, last, _bs, _bb, bursts, callbacks, slot, rate, orig, srtt, cwnd, retrans, flags,
     errors) = fields
    return FlowRecord(key, slot, acked, sent, first, last, bursts, callbacks, rate, orig, srtt, cwnd,
                      retrans, flags, errors)


def _record(key: FlowKeyC, v: FlowC) -> FlowRecord:
    return _row(key_of(key), _FLOW.unpack(ctypes.string_at(ctypes.addressof(v), _FLOW.size)))


# FlowC without burst_start_ns and burst_base_acked, whose fields put in FlowRecord's order
_FLOW_KEPT = struct.Struct("=4Q16x2Q8I")
assert _FLOW_KEPT.size == _FLOW.size
_IN_RECORD_ORDER = operator.itemgetter(6, 0, 1, 2, 3, 4, 5, 7, 8, 9, 10, 11, 12, 13)
assert FlowRecord._fields[1] == "slot" and FlowRecord._fields[2] == "bytes_acked"
_new_tuple = tuple.__new__


def _records(keys: bytes, values: bytes) -> list[FlowRecord]:
    """Rows from a batch read: keys and values concatenated in the same order. (Every flow's
    row every slot: no Python call per row but the cache miss of a new key.)"""
    ks, known = _KEY_SIZE, _key_raw.new.get
    return [_new_tuple(FlowRecord, (known(raw) or _key_raw(raw), *_IN_RECORD_ORDER(f)))
            for raw, f in zip([keys[i:i + ks] for i in range(0, len(keys), ks)], _FLOW_KEPT.iter_unpack(values))]


# a ring buffer record of hc_bursts: the kernel's 8-byte header, then struct hc_burst
_BURST_REC = np.dtype([("len", "<u4"), ("pgoff", "<u4"), ("key", f"V{_KEY_SIZE}"), ("start_ns", "<u8"),
                       ("end_ns", "<u8"), ("bytes", "<u8"), ("slot", "<u4"), ("pad", "<u4")])
assert _BURST_REC.itemsize == bpfsys.RINGBUF_HDR + _BURST_SIZE
assert _BURST_REC.fields["start_ns"][1] == bpfsys.RINGBUF_HDR + BurstC.start_ns.offset
assert _BURST_REC.fields["slot"][1] == bpfsys.RINGBUF_HDR + BurstC.slot.offset


def _burst_batch(raw: bytes, n: int) -> BurstBatch:
    """n ring buffer records (RingReader.read) -> columns."""
    rec = np.frombuffer(raw, dtype=_BURST_REC, count=n)
    known = _key_raw.new.get
    keys = [known(k) or _key_raw(k) for k in rec["key"].tolist()]
    return BurstBatch(keys, rec["slot"], rec["start_ns"], rec["end_ns"], rec["bytes"])


# -- owner records ------------------------------------------------------------------------------
def proc_start(pid: int) -> int:
    """Start time of a process (clock ticks since boot; /proc/PID/stat field 22), 0 if gone.
    With the PID it identifies a process for good: a reused PID has another start time."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return int(f.read().rsplit(")", 1)[1].split()[19])
    except (OSError, IndexError, ValueError):
        return 0


def owner_alive(owner: dict) -> bool:
    pid = int(owner.get("pid", 0))
    start = proc_start(pid) if pid > 0 else 0
    return start != 0 and start == int(owner.get("start", start))


def owner_path(scope: str) -> str:
    return os.path.join(OWNER_DIR, f"{scope}.json")


def load_owner(scope: str) -> dict | None:
    try:
        with open(owner_path(scope)) as f:
            return json.load(f)
    except (OSError, ValueError):
        return None


def all_owners() -> list[dict]:
    try:
        names = sorted(n for n in os.listdir(OWNER_DIR) if n.endswith(".json"))
    except FileNotFoundError:
        return []
    return [o for n in names if (o := load_owner(n[:-5])) is not None]


class Pacer:
    """The loaded program, attached and pinned; its maps kept equal to a PaceTable."""

    def __init__(self, cgroup: str = "/", *, lease_s: float = 1.0, gap_s: float = 0.020,
                 max_flows: int = HC_MAX_FLOWS, track_all: bool = True) -> None:
        """track_all: give every flow of the cgroup RTT callbacks from the start, so that a
        flow can be selected by its 4-tuple after it is established (the daemon learns
        client flows by discovery, after they exist). The program can only act on a flow
        whose ESTABLISHED callback asked for later callbacks: with track_all=False a flow
        established while the table had no 4-tuple selector can never be paced. Turn it
        off only when every flow is selected by port."""
        self.cgroup_spec = cgroup
        self.cgroup = resolve_cgroup(cgroup)
        self.scope = scope_id(self.cgroup)
        bpffs = bpffs_root()
        self.pin_dir = os.path.join(bpffs, "hostctl", self.scope) if bpffs else None
        if bpffs is None:
            log.info("private /sys (ip netns exec): the pacer is not pinned; `hostctl clean` finds it by "
                     "program id through its owner record")
        self.lease_ns = int(lease_s * 1e9)
        self.gap_ns = int(gap_s * 1e9)
        self.max_flows = max_flows
        self._claimed = False
        self._claim()
        self.bpf = None
        self.attached = False
        self._cg_fd = -1
        self._current = PaceTable()
        self.track_all = track_all
        self._flags = HP_CTL_TRACK_ALL if track_all else 0
        self._bursts: list[Burst] = []
        self._ring: bpfsys.RingReader | None = None  # None: bcc's callbacks read the ring buffer
        self._batch: bpfsys.BatchReader | None | bool = None  # False: the kernel has no batch reads
        self._batch_update = True  # False: the kernel has no batch writes for hash maps
        self._iter_link = -1  # the adoption pass's iterator link; -1: not loaded
        self._adopt_refused = False
        self._applied = False
        self.adopted = 0  # flows given callbacks by adoption passes
        self.last_adoption: list[tuple[FlowKey, int]] = []  # what the last pass gave callbacks to
        self.last_adoption_s = 0.0  # how long it took (wall)
        self.adopt_passes = 0
        try:
            self._load()
        except BaseException:
            self.close()
            raise

    # -- setup ---------------------------------------------------------------------------
    def _claim(self) -> None:
        if self.scope in _LIVE_SCOPES:
            raise DatapathError(f"this hostctl (pid {os.getpid()}) already paces cgroup {self.cgroup}; "
                                "close that pacer first")
        old = load_owner(self.scope)
        if old is not None:
            if old.get("pid") != os.getpid() and owner_alive(old):
                raise DatapathError(
                    f"hostctl (pid {old['pid']}) already paces cgroup {old.get('cgroup')}; stop it first "
                    "with `hostctl stop` in its network namespace")
            log.warning("found the pinned pacer of a hostctl that died (pid %s); releasing it first", old.get("pid"))
            log.info("%s", release_scope(old))
        self._write_owner(prog_id=0)
        _LIVE_SCOPES.add(self.scope)
        self._claimed = True

    def _write_owner(self, prog_id: int) -> None:
        os.makedirs(OWNER_DIR, mode=0o700, exist_ok=True)
        tmp = owner_path(self.scope) + ".tmp"
        with open(tmp, "w") as f:
            json.dump({"pid": os.getpid(), "start": proc_start(os.getpid()), "scope": self.scope,
                       "cgroup": self.cgroup, "cgroup_rel": cgroup_rel(self.cgroup), "pin_dir": self.pin_dir,
                       "prog_id": prog_id, "netns": consts.netns_id()}, f)
        os.replace(tmp, owner_path(self.scope))

    def _load(self) -> None:
        bcc = import_bcc()
        src = bpf_source("hc_pace.c")
        try:
            self.bpf = bcc.BPF(src_file=str(src).encode(), cflags=cflags(self.max_flows))
        except Exception as e:  # bcc raises a bare Exception on compile errors
            raise ProbeError(f"cannot compile {src.name} with bcc ({e}); kernel headers must be at "
                             "/lib/modules/$(uname -r)/build (scripts/setup.sh links them)") from e
        try:
            self.fn = self.bpf.load_func(PROG_NAME.encode(), bcc.BPF.SOCK_OPS)
        except Exception as e:
            raise ProbeError(f"the kernel refused {src.name} ({e}); it needs BPF_PROG_TYPE_SOCK_OPS and "
                             "CONFIG_CGROUP_BPF (docs/operations.md)") from e
        self.maps = {n: self.bpf[n.encode()] for n in MAP_NAMES if n != "hc_bursts"}
        self._write_ctl(self._flags)
        try:  # the records in bulk from the mapped ring buffer; else one bcc callback per record
            self._ring = bpfsys.RingReader(self.bpf[b"hc_bursts"].map_fd, _BURST_SIZE)
        except OSError as e:
            log.info("reading the burst ring buffer through bcc (%s)", e)
            self.bpf[b"hc_bursts"].open_ring_buffer(self._on_burst)
        if self.pin_dir is not None:
            os.makedirs(self.pin_dir, mode=0o700, exist_ok=True)
            # a dead daemon's, left after a clean from a private /sys
            for n in (PROG_NAME, *MAP_NAMES, *OLD_MAP_NAMES):
                if os.path.exists(stale := os.path.join(self.pin_dir, n)):
                    log.warning("removing the stale pin %s", stale)
                    os.unlink(stale)
            bpfsys.obj_pin(self.fn.fd, os.path.join(self.pin_dir, PROG_NAME))
            for n in MAP_NAMES:
                bpfsys.obj_pin(self.bpf[n.encode()].map_fd, os.path.join(self.pin_dir, n))
        self._write_owner(prog_id=bpfsys.prog_info(self.fn.fd)[0])  # before attaching: clean can find it
        self._cg_fd = os.open(self.cgroup, os.O_RDONLY | os.O_DIRECTORY)
        try:
            bpfsys.prog_attach(self._cg_fd, self.fn.fd, bpfsys.BPF_CGROUP_SOCK_OPS, bpfsys.BPF_F_ALLOW_MULTI)
        except OSError as e:
            raise DatapathError(f"cannot attach the sock_ops program to cgroup {self.cgroup}: {e.strerror} "
                                "(another program attached there without BPF_F_ALLOW_MULTI?)") from None
        self.attached = True
        self._load_adoption(bcc)

    def _load_adoption(self, bcc) -> None:
        """The adoption pass (hc_pace.c's bpf_iter__tcp): loaded beside the sock_ops program, same
        maps. A kernel without TCP iterators (< 5.9) cannot load it: the pacer then works as
        before, for flows established after it attached only, and says so once."""
        try:
            fn = self.bpf.load_func(ITER_NAME.encode(), bcc.BPF.TRACING)
            self._iter_link = bpfsys.iter_link(fn.fd)
        except Exception as e:  # bcc raises a bare Exception when the kernel refuses the program
            log.warning("flows established before hostctl started cannot be adopted on this kernel (%s): "
                        "they are paced only once they reconnect (needs Linux 6.12: BPF TCP iterator and "
                        "TCP_BPF_SOCK_OPS_CB_FLAGS)", e)
            self._iter_link = -1

    def adopt(self) -> list[tuple[FlowKey, int]]:
        """One adoption pass: every established TCP socket of this network namespace that the
        selectors (or HP_CTL_TRACK_ALL) would have given callbacks at its ESTABLISHED, and
        that has none (it was established before the program was attached, or before its
        selector existed), gets them now; the program then selects and paces it at its next
        RTT callback. Returns [(flow, slot)] of the sockets given callbacks (slot: a job slot,
        WATCH_SLOT, or ADOPT_TRACKED)."""
        if self._iter_link < 0:
            return []
        t0 = time.perf_counter()
        try:
            raw = b"".join(self._adoption_output())
        except OSError as e:  # the iterator's read failed: the flows wait for the next pass
            log.warning("adoption pass failed (%s): flows established before their selector wait for the next "
                        "one", e)
            return []
        self.adopt_passes += 1
        seen: dict[FlowKey, int] = {}
        refused: set[FlowKey] = set()
        failed = 0
        for i in range(0, len(raw) - _ADOPT_SIZE + 1, _ADOPT_SIZE):
            slot, err = _ADOPT_TAIL.unpack_from(raw, i + _KEY_SIZE)
            key = _key_raw(raw[i:i + _KEY_SIZE])
            seen[key] = slot
            if err:  # the socket's second record: the kernel refused its flags
                failed = err
                refused.add(key)
        out = [(k, slot) for k, slot in seen.items() if k not in refused]
        if failed and not self._adopt_refused:
            self._adopt_refused = True
            log.warning("the kernel refused to give established flows callbacks (%s): flows established before "
                        "hostctl started are paced only once they reconnect (needs Linux 6.12: "
                        "TCP_BPF_SOCK_OPS_CB_FLAGS)", os.strerror(-failed))
        self.last_adoption = out
        self.last_adoption_s = time.perf_counter() - t0
        if out:
            self.adopted += len(out)
            sel = sum(1 for _, slot in out if slot not in (WATCH_SLOT, ADOPT_TRACKED))
            log.info("adopted %d established flows (%d selected by a job, %d watched or tracked for later "
                     "selection) in %.1f ms: paced from their next round trip", len(out), sel, len(out) - sel,
                     self.last_adoption_s * 1e3)
        return out

    def _adoption_output(self) -> list[bytes]:
        """Run the iterator in every network namespace that a process of the scope lives in (a
        TCP iterator walks the namespace of whoever creates it: a container's sockets are seen
        only from inside it, though the cgroup attach paces them from anywhere)."""
        own = netns_inode("self")
        paths: dict[int, str] = {}
        for pid in cgroup_pids(self.cgroup):
            ino = netns_inode(pid)
            if ino is not None and ino not in paths:
                paths[ino] = f"/proc/{pid}/ns/net"
        out = []
        if own in paths or not paths:
            out.append(bpfsys.iter_read(self._iter_link))
        others = [p for ino, p in paths.items() if ino != own]
        try:
            got = call_in_each_netns(others, lambda: bpfsys.iter_read(self._iter_link))
        except TimeoutError as e:
            log.warning("adoption pass: %s; flows of the namespaces not reached are adopted at the next pass", e)
            return out
        for path, res in got.items():
            if isinstance(res, BaseException):  # the process left, or its namespace went away: nothing to adopt
                log.debug("adoption pass: %s: %s", path, res)
            else:
                out.append(res)
        return out

    # -- health: what check() asks (hostctl/datapath/linux.py) ---------------------------------
    def cgroup_state(self) -> str:
        """"ok"; "gone" (the scope's cgroup was removed: its sockets that live on keep the program
        until they close); "replaced" (a new cgroup under the same path: not the one attached to)."""
        try:
            return "ok" if scope_id(self.cgroup) == self.scope else "replaced"
        except OSError:
            return "gone"

    def missing_pins(self) -> list[str]:
        """The pins that should be under pin_dir and are not (all of them when the bpf filesystem
        was unmounted); [] when complete or when nothing is pinned (a private /sys)."""
        if self.pin_dir is None or not self.attached:
            return []
        if not bpfsys.is_bpffs(os.path.dirname(os.path.dirname(self.pin_dir))):
            return [PROG_NAME, *MAP_NAMES]
        return [n for n in (PROG_NAME, *MAP_NAMES) if not os.path.exists(os.path.join(self.pin_dir, n))]

    def repin(self) -> list[str]:
        """Pin again what missing_pins() lists (mounting the bpf filesystem first if it is gone, as
        at start), so that `hostctl clean` finds them after a crash; returns what was pinned. (Without
        pins, clean still finds the program by the id in the owner record.)"""
        missing = self.missing_pins()
        if not missing:
            return []
        bpffs_root()
        os.makedirs(self.pin_dir, mode=0o700, exist_ok=True)
        for n in missing:
            fd = self.fn.fd if n == PROG_NAME else self.bpf[n.encode()].map_fd
            bpfsys.obj_pin(fd, os.path.join(self.pin_dir, n))
        return missing

    # -- control --------------------------------------------------------------------------
    def _write_ctl(self, flags: int) -> None:
        # the control entry is the daemon's alone (the program writes its counters to the other
        # one), so it is written whole, without reading it first; raw syscall: every slot
        bpfsys.map_update(self.maps["hc_pace_ctl"].map_fd, _CTL_KEYS[0], _CTL.pack(
            time.monotonic_ns(), self.lease_ns, self.gap_ns, flags, 0, 0, 0, 0))  # CLOCK_MONOTONIC == bpf_ktime_get_ns()

    def heartbeat(self) -> None:
        self._write_ctl(self._flags)
        _turn_caches(time.monotonic())

    def ctl(self) -> dict[str, int]:
        return {**_read_ctl(self.maps["hc_pace_ctl"].map_fd), "adopted": self.adopted}

    def apply(self, table: PaceTable) -> int:
        """Diff against what is loaded and write only the changes. New selectors and rates
        first, removals last, so that a flow never loses its rate while it is selected."""
        cur = self._current
        writes = 0
        want_flags = HP_CTL_TRACK_ALL if (self.track_all or table.flows) else 0
        # An adoption pass when a flow established earlier may now be one the program would have
        # tracked: at the first table, a new port or remote selector, TRACK_ALL turned on. (A new
        # 4-tuple selector needs none: under TRACK_ALL every flow has its callbacks already.)
        adopt = (not self._applied or not table.ports.keys() <= cur.ports.keys()
                 or not table.remotes.keys() <= cur.remotes.keys() or want_flags & ~self._flags)
        self._applied = True
        if want_flags != self._flags:
            self._flags = want_flags
            self._write_ctl(self._flags)
            writes += 1
        sr = self.maps["hc_slot_rate"]
        for slot, rate in table.slot_rates.items():
            if cur.slot_rates.get(slot) != rate:
                sr[sr.Key(slot)] = sr.Leaf(clamp_rate(rate), 0)
                writes += 1
        rates = self.maps["hc_rates"]
        old = cur.flow_rates.get
        changed = [(flow, rate) for flow, rate in table.flow_rates.items() if old(flow) != rate]
        if changed:
            self._write_rates(rates, changed)
            writes += len(changed)
        ports = self.maps["hc_sel_ports"]
        for (port, side), slot in table.ports.items():
            if cur.ports.get((port, side)) != slot:
                ports[PortKeyC(port, SIDE[side], 0)] = ports.Leaf(slot)
                writes += 1
        remotes = self.maps["hc_sel_remotes"]
        for endpoint, slot in table.remotes.items():
            if cur.remotes.get(endpoint) != slot:
                remotes[remote_key(endpoint)] = remotes.Leaf(slot)
                writes += 1
        flows = self.maps["hc_sel_flows"]
        for flow, slot in table.flows.items():
            if cur.flows.get(flow) != slot:
                flows[key_bytes(flow)] = flows.Leaf(slot)
                writes += 1
        for m, gone, mk in ((flows, cur.flows.keys() - table.flows.keys(), key_bytes),
                            (ports, cur.ports.keys() - table.ports.keys(),
                             lambda ps: PortKeyC(ps[0], SIDE[ps[1]], 0)),
                            (remotes, cur.remotes.keys() - table.remotes.keys(), remote_key),
                            (rates, cur.flow_rates.keys() - table.flow_rates.keys(), key_bytes)):
            for item in gone:
                try:
                    del m[mk(item)]
                except KeyError:
                    pass
                writes += 1
        for slot in cur.slot_rates.keys() - table.slot_rates.keys():
            sr[sr.Key(slot)] = sr.Leaf(0, 0)
            writes += 1
        self._current = table
        if adopt:
            self.adopt()
        return writes

    def _write_rates(self, rates, changed: list[tuple[FlowKey, int]]) -> None:
        """The flows' new rates into hc_rates: one BPF_MAP_UPDATE_BATCH call (under `cap` every flow of
        a job gets a new rate whenever the job's set of active flows changes), else one update per flow
        (kernels without batch ops for hash maps, or what a failed batch did not write: bcc's update
        then raises as it always did)."""
        done = 0
        if self._batch_update:
            keys = b"".join([raw_key(f) for f, _ in changed])
            vals = b"".join([_RATE.pack(clamp_rate(r), 0) for _, r in changed])
            try:
                done = bpfsys.map_update_batch(rates.map_fd, keys, vals, len(changed))
            except bpfsys.BpfError as e:
                done = getattr(e, "done", 0)
                if e.errno in (errno.EINVAL, errno.EOPNOTSUPP, _ENOTSUPP):
                    log.info("batched writes of the rate map failed (%s): writing it key by key", e)
                    self._batch_update = False
        for flow, rate in changed[done:]:
            rates[key_bytes(flow)] = RateC(clamp_rate(rate), 0)

    # -- reading ----------------------------------------------------------------------------
    def flows(self) -> list[FlowRecord]:
        """One batched read of every selected flow."""
        m = self.maps["hc_pace_flows"]
        if self._batch is not False:
            try:
                if self._batch is None:
                    self._batch = bpfsys.BatchReader(m.map_fd, _KEY_SIZE, _FLOW.size)
                return _records(*self._batch.read())
            except OSError as e:  # kernels without batch ops on hash maps: one lookup per key from now on
                log.info("batched reads of the flow map failed (%s): reading it key by key", e)
                self._batch = False
        return [_record(k, v) for k, v in m.items()]

    def forget(self, keys: list[FlowKey]) -> None:
        """Delete closed flows' entries (after their last counters were read)."""
        m = self.maps["hc_pace_flows"]
        for k in keys:
            try:
                del m[key_bytes(k)]
            except KeyError:
                pass

    def _on_burst(self, _ctx, data, _size) -> None:
        raw = ctypes.string_at(data, _BURST_SIZE)
        start, end, nbytes, slot = _BURST_TAIL.unpack_from(raw, _KEY_SIZE)
        self._bursts.append(Burst(_key_raw(raw[:_KEY_SIZE]), slot, start, end, nbytes))

    def bursts(self) -> BurstBatch | list[Burst]:
        """Completed bursts since the last call (drains the ring buffer, never blocks)."""
        if self._ring is not None:
            raw, n = self._ring.read()
            return _burst_batch(raw, n) if n else []
        if self.bpf is not None:
            self.bpf.ring_buffer_consume()
        out, self._bursts = self._bursts, []
        return out

    @property
    def prog_fd(self) -> int:
        return self.fn.fd

    # -- teardown ---------------------------------------------------------------------------
    def close(self) -> str:
        """Release every flow, detach, unpin, drop the owner record. Idempotent."""
        msg = ""
        if self._claimed:
            owner = load_owner(self.scope)
            if owner is not None and owner.get("pid") == os.getpid():
                msg = release_scope(owner)
            _LIVE_SCOPES.discard(self.scope)
            self._claimed = False
        if self._cg_fd >= 0:
            os.close(self._cg_fd)
            self._cg_fd = -1
        if self._iter_link >= 0:
            os.close(self._iter_link)
            self._iter_link = -1
        if self._ring is not None:
            self._ring.close()
            self._ring = None
        if self.bpf is not None:
            try:
                self.bpf.cleanup()
            except Exception:
                pass
            self.bpf = None
        self.attached = False
        return msg


def clamp_rate(rate_Bps: int) -> int:
    """A settable SO_MAX_PACING_RATE: at least MIN_RATE_BYTES, at most 2^32-2 (not 'unlimited')."""
    return int(min(max(rate_Bps, MIN_RATE_BYTES), MAX_RATE_BPS_BYTES))


_RATE = struct.Struct("=II")  # RateC's fields in order
assert _RATE.size == ctypes.sizeof(RateC)
_ENOTSUPP = 524  # the kernel's internal "not supported" (not in errno)
_CTL = struct.Struct("=8Q")  # CtlC's fields in order
assert _CTL.size == ctypes.sizeof(CtlC) and all(f[1] is ctypes.c_uint64 for f in CtlC._fields_)
_CTL_NAMES = [n for n, _t in CtlC._fields_]
_CTL_KEYS = [k.to_bytes(4, "little") for k in (HP_CTL_KEY_CONTROL, HP_CTL_KEY_COUNTERS)]


def _read_ctl(fd: int) -> dict[str, int]:
    """hc_pace_ctl's two entries as one dict: control words from the first, counters from the second."""
    control, counters = (bpfsys.map_lookup(fd, k, _CTL.size) or bytes(_CTL.size) for k in _CTL_KEYS)
    c, n = _CTL.unpack(control), _CTL.unpack(counters)
    return {name: (n if name in CTL_COUNTERS else c)[i] for i, name in enumerate(_CTL_NAMES)}


def pinned_ctl(pin_dir: str) -> dict[str, int]:
    """ctl() of a pacer from its pinned hc_pace_ctl (e.g. a crashed daemon's)."""
    fd = bpfsys.obj_get(os.path.join(pin_dir, "hc_pace_ctl"))
    try:
        return _read_ctl(fd)
    finally:
        os.close(fd)


def _flows_of(fd: int) -> list[FlowRecord]:
    """The rows of an hc_pace_flows map, by its fd."""
    ksz, vsz = ctypes.sizeof(FlowKeyC), ctypes.sizeof(FlowC)
    out = []
    for kb in bpfsys.map_keys(fd, ksz):
        vb = bpfsys.map_lookup(fd, kb, vsz)
        if vb is not None:
            out.append(_record(FlowKeyC.from_buffer_copy(kb), FlowC.from_buffer_copy(vb)))
    return out


def _pinned_flows(pin_dir: str) -> list[FlowRecord]:
    fd = bpfsys.obj_get(os.path.join(pin_dir, "hc_pace_flows"))
    try:
        return _flows_of(fd)
    finally:
        os.close(fd)


def _set_release(ctl_fd: int) -> None:
    key = HP_CTL_KEY_CONTROL.to_bytes(4, "little")
    raw = bpfsys.map_lookup(ctl_fd, key, ctypes.sizeof(CtlC))
    ctl = CtlC.from_buffer_copy(raw) if raw else CtlC()
    ctl.flags |= HP_CTL_RELEASE
    bpfsys.map_update(ctl_fd, key, bytes(ctl))


def _open_objects(owner: dict) -> tuple[int, dict[str, int]]:
    """fds of a pacer's program and maps (-1, {} when it is gone): from its pins, else by
    the program id of its owner record (a pacer started in a private /sys has no pins; its
    cgroup attachment keeps program and maps alive). The caller closes them."""
    pin_dir = owner.get("pin_dir") and _host_path(owner["pin_dir"])
    if pin_dir and os.path.exists(os.path.join(pin_dir, PROG_NAME)):
        maps = {OLD_MAP_NAMES.get(n, n): bpfsys.obj_get(os.path.join(pin_dir, n)) for n in (*OLD_MAP_NAMES, *MAP_NAMES)
                if os.path.exists(os.path.join(pin_dir, n))}
        return bpfsys.obj_get(os.path.join(pin_dir, PROG_NAME)), maps
    prog_id = int(owner.get("prog_id") or 0)
    if not prog_id:
        return -1, {}
    try:
        prog = bpfsys.prog_get_fd_by_id(prog_id)
    except OSError:
        return -1, {}  # not loaded any more (its cgroup was removed, or it was released)
    _id, name, map_ids = bpfsys.prog_info(prog)
    if name != PROG_NAME:  # the id was reused by another program
        os.close(prog)
        return -1, {}
    maps: dict[str, int] = {}
    for mid in map_ids:
        try:
            fd = bpfsys.map_get_fd_by_id(mid)
        except OSError:
            continue
        n = bpfsys.map_name(fd)
        n = OLD_MAP_NAMES.get(n, n)  # a program loaded by an older hostctl
        if n in MAP_NAMES and n not in maps:
            maps[n] = fd
        else:
            os.close(fd)
    return prog, maps


def _owner_cgroup(owner: dict) -> str | None:
    """The owner's cgroup directory as seen from this mount namespace, or None if it is gone:
    its path below the cgroup v2 root (the same in every mount namespace), checked by inode."""
    candidates = [owner.get("cgroup")]
    if owner.get("cgroup_rel"):
        try:
            candidates.insert(0, os.path.join(cgroup2_root(), owner["cgroup_rel"].lstrip("/")))
        except ProbeError:
            pass
    for path in candidates:
        try:
            if path and os.path.isdir(path) and scope_id(path) == owner["scope"]:
                return path
        except OSError:
            pass
    return None


def release_scope(owner: dict) -> str:
    """Undo one pacer from its pins (or program id) and owner record: release the flows,
    detach, unpin."""
    from hostctl.datapath.sockreset import reset_rates

    scope = owner["scope"]
    pin_dir = owner.get("pin_dir") and _host_path(owner["pin_dir"])
    cgroup = _owner_cgroup(owner)
    parts = []
    prog, maps = _open_objects(owner)
    try:
        if "hc_pace_ctl" in maps and "hc_pace_flows" in maps:
            try:
                _set_release(maps["hc_pace_ctl"])
                stuck = {r.key: r.orig_rate_Bps for r in _flows_of(maps["hc_pace_flows"]) if r.throttled}
                if stuck:
                    done, missing = reset_rates(stuck, cgroup_pids(cgroup) if cgroup else [])
                    parts.append(f"released {done} throttled flow(s)" + (f", {len(missing)} gone" if missing else ""))
            except OSError as e:
                parts.append(f"could not release flows ({e.strerror})")
        if prog >= 0 and cgroup is not None:
            cfd = os.open(cgroup, os.O_RDONLY | os.O_DIRECTORY)
            try:
                bpfsys.prog_detach(cfd, prog, bpfsys.BPF_CGROUP_SOCK_OPS)
                parts.append(f"detached from {cgroup}")
            except OSError as e:
                if e.errno not in (errno.ENOENT,):  # not attached any more
                    parts.append(f"detach failed ({e.strerror})")
            finally:
                os.close(cfd)
    finally:
        for fd in (prog, *maps.values()):
            if fd >= 0:
                os.close(fd)
    if pin_dir and os.path.isdir(pin_dir):
        for n in (PROG_NAME, *MAP_NAMES, *OLD_MAP_NAMES):
            try:
                os.unlink(os.path.join(pin_dir, n))
            except FileNotFoundError:
                pass
        for d in (pin_dir, os.path.dirname(pin_dir)):  # the scope's folder, then hostctl/ if now empty
            try:
                os.rmdir(d)
            except OSError:
                break
        parts.append("unpinned")
    if owner.get("pin_dir") and not pin_dir:
        # pinned in the host's bpffs, which this private /sys cannot reach: the record stays
        # so that `hostctl clean` in the host's mount namespace removes the pins
        parts.append(f"pins in {owner['pin_dir']} are not reachable from this mount namespace; "
                     "run `hostctl clean` on the host (or with nsenter --net) to remove them")
        return f"pacer {scope}: " + ", ".join(parts)
    try:
        os.unlink(owner_path(scope))
    except FileNotFoundError:
        pass
    return f"pacer {scope}: " + (", ".join(parts) or "nothing attached or pinned")


def clean_pacers(only_dead: bool = True) -> list[str]:
    """``hostctl clean``: release the pacers whose daemon is gone (all of them with only_dead=False)."""
    owners = [o for o in all_owners()
              if not only_dead or (int(o.get("pid", 0)) != os.getpid() and not owner_alive(o))]
    return [release_scope(o) for o in owners]
