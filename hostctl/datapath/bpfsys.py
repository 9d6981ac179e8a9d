"""The few bpf(2) commands hostctl needs without bcc: pin, get, attach, detach,
map element operations, and run-time statistics.

bcc loads and compiles; these calls let ``hostctl clean`` undo a crashed daemon's
pinned program and maps with nothing but the pinned paths, and let the daemon
attach with BPF_F_ALLOW_MULTI (so it coexists with other cgroup sock_ops users).
"""

from __future__ import annotations

import ctypes
import ctypes.util
import errno
import os
import platform
import struct

_NR_BPF = {"x86_64": 321, "aarch64": 280}.get(platform.machine(), 321)
_libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6", use_errno=True)
_libc.syscall.restype = ctypes.c_long

BPF_MAP_LOOKUP_ELEM = 1
BPF_MAP_UPDATE_ELEM = 2
BPF_MAP_DELETE_ELEM = 3
BPF_MAP_GET_NEXT_KEY = 4
BPF_OBJ_PIN = 6
BPF_OBJ_GET = 7
BPF_PROG_ATTACH = 8
BPF_PROG_DETACH = 9
BPF_PROG_QUERY = 16
BPF_MAP_LOOKUP_BATCH = 24
BPF_ENABLE_STATS = 32

BPF_CGROUP_SOCK_OPS = 3  # enum bpf_attach_type
BPF_F_ALLOW_MULTI = 2
BPF_STATS_RUN_TIME = 0
BPF_FS_MAGIC = 0xCAFE4A11
ATTR_SIZE = 128


class BpfError(OSError):
    pass


def _call(cmd: int, attr: bytes) -> int:
    buf = ctypes.create_string_buffer(attr.ljust(ATTR_SIZE, b"\0"), ATTR_SIZE)
    ret = _libc.syscall(_NR_BPF, cmd, buf, ATTR_SIZE)
    if ret < 0:
        e = ctypes.get_errno()
        raise BpfError(e, f"bpf cmd {cmd}: {os.strerror(e)}")
    return int(ret)


def obj_pin(fd: int, path: str) -> None:
    p = ctypes.create_string_buffer(os.fsencode(path))
    _call(BPF_OBJ_PIN, struct.pack("=QII", ctypes.addressof(p), fd, 0))


def obj_get(path: str) -> int:
    p = ctypes.create_string_buffer(os.fsencode(path))
    return _call(BPF_OBJ_GET, struct.pack("=QII", ctypes.addressof(p), 0, 0))


def prog_attach(target_fd: int, prog_fd: int, attach_type: int, flags: int = 0) -> None:
    _call(BPF_PROG_ATTACH, struct.pack("=IIII", target_fd, prog_fd, attach_type, flags))


def prog_detach(target_fd: int, prog_fd: int, attach_type: int) -> None:
    _call(BPF_PROG_DETACH, struct.pack("=IIII", target_fd, prog_fd, attach_type, 0))


def prog_query(target_fd: int, attach_type: int, max_ids: int = 64) -> list[int]:
    """IDs of the programs attached to a cgroup for attach_type (this cgroup only)."""
    ids = (ctypes.c_uint32 * max_ids)()
    # struct { u32 target_fd; u32 attach_type; u32 query_flags; u32 attach_flags; u64 prog_ids; u32 prog_cnt; }
    buf = ctypes.create_string_buffer(
        struct.pack("=IIIIQI", target_fd, attach_type, 0, 0, ctypes.addressof(ids), max_ids).ljust(ATTR_SIZE, b"\0"),
        ATTR_SIZE)
    if _libc.syscall(_NR_BPF, BPF_PROG_QUERY, buf, ATTR_SIZE) < 0:
        e = ctypes.get_errno()
        raise BpfError(e, f"bpf prog query: {os.strerror(e)}")
    cnt = struct.unpack_from("=I", buf.raw, 24)[0]
    return list(ids[:cnt])


def map_lookup(fd: int, key: bytes, value_size: int) -> bytes | None:
    k = ctypes.create_string_buffer(key, len(key))
    v = ctypes.create_string_buffer(value_size)
    try:
        _call(BPF_MAP_LOOKUP_ELEM, struct.pack("=IIQQQ", fd, 0, ctypes.addressof(k), ctypes.addressof(v), 0))
    except BpfError as e:
        if e.errno == errno.ENOENT:
            return None
        raise
    return v.raw


def map_update(fd: int, key: bytes, value: bytes) -> None:
    k = ctypes.create_string_buffer(key, len(key))
    v = ctypes.create_string_buffer(value, len(value))
    _call(BPF_MAP_UPDATE_ELEM, struct.pack("=IIQQQ", fd, 0, ctypes.addressof(k), ctypes.addressof(v), 0))


def map_keys(fd: int, key_size: int, limit: int = 1 << 20) -> list[bytes]:
    """Every key of a hash map (BPF_MAP_GET_NEXT_KEY walk)."""
    out: list[bytes] = []
    nxt = ctypes.create_string_buffer(key_size)
    prev_addr = 0
    prev = None
    while len(out) < limit:
        try:
            _call(BPF_MAP_GET_NEXT_KEY, struct.pack("=IIQQ", fd, 0, prev_addr, ctypes.addressof(nxt)))
        except BpfError as e:
            if e.errno == errno.ENOENT:
                break
            raise
        out.append(nxt.raw)
        prev = ctypes.create_string_buffer(nxt.raw, key_size)
        prev_addr = ctypes.addressof(prev)
    return out


class BatchReader:
    """Reads a whole hash map with BPF_MAP_LOOKUP_BATCH (Linux 5.6+), ``chunk`` entries per call,
    into buffers kept between reads: bcc's items_lookup_batch() allocates and zeroes room for
    max_entries keys and values on every call (2 MB for the pacer's flow map) and builds a
    ctypes object per entry."""

    _ATTR = struct.Struct("=QQQQIIQQ")  # in_batch, out_batch, keys, values, count, map_fd, elem_flags, flags

    def __init__(self, fd: int, key_size: int, value_size: int, chunk: int = 1024) -> None:
        self.fd, self.ks, self.vs, self.chunk = fd, key_size, value_size, chunk
        self.keys = ctypes.create_string_buffer(key_size * chunk)
        self.values = ctypes.create_string_buffer(value_size * chunk)
        self.tok_in, self.tok_out = ctypes.c_uint32(0), ctypes.c_uint32(0)  # hash maps: a bucket index
        self.attr = ctypes.create_string_buffer(ATTR_SIZE)

    def read(self) -> tuple[bytes, bytes]:
        """(keys, values): every entry's key and value bytes, concatenated in the same order.
        Raises BpfError (e.g. EINVAL where the kernel has no batch ops for this map type)."""
        keys, values = [], []
        first = True
        while True:
            self._ATTR.pack_into(self.attr, 0, 0 if first else ctypes.addressof(self.tok_in),
                                 ctypes.addressof(self.tok_out), ctypes.addressof(self.keys),
                                 ctypes.addressof(self.values), self.chunk, self.fd, 0, 0)
            ret = _libc.syscall(_NR_BPF, BPF_MAP_LOOKUP_BATCH, self.attr, ATTR_SIZE)
            err = ctypes.get_errno() if ret < 0 else 0
            if ret < 0 and err != errno.ENOENT:
                raise BpfError(err, f"bpf map lookup batch: {os.strerror(err)}")
            n = struct.unpack_from("=I", self.attr, 32)[0]  # entries copied (also with ENOENT: the last ones)
            if n:
                keys.append(ctypes.string_at(self.keys, n * self.ks))
                values.append(ctypes.string_at(self.values, n * self.vs))
            if ret < 0:  # ENOENT: no more entries
                break
            self.tok_in.value = self.tok_out.value
            first = False
        return b"".join(keys), b"".join(values)


def enable_stats() -> int:
    """Turn on run_time_ns/run_cnt accounting for every program while the fd stays open."""
    return _call(BPF_ENABLE_STATS, struct.pack("=I", BPF_STATS_RUN_TIME))


def is_bpffs(path: str) -> bool:
    """True if ``path`` is the root of a mounted bpf filesystem (statfs magic)."""

    class _Statfs(ctypes.Structure):
        _fields_ = [("f_type", ctypes.c_long), ("_rest", ctypes.c_byte * 112)]

    st = _Statfs()
    if _libc.statfs(os.fsencode(path), ctypes.byref(st)) != 0:
        return False
    return (st.f_type & 0xFFFFFFFF) == BPF_FS_MAGIC


def mount_bpffs(path: str) -> None:
    os.makedirs(path, exist_ok=True)
    if _libc.mount(b"bpf", os.fsencode(path), b"bpf", 0, b"mode=0700") != 0:
        e = ctypes.get_errno()
        raise BpfError(e, f"mount -t bpf {path}: {os.strerror(e)}")
