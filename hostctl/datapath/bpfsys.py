"""The few bpf(2) commands hostctl needs without bcc: pin, get, get by id, object
info, attach, detach, map element operations, run-time statistics, and running a BPF
iterator (link create, iter create); and mount(2).

bcc loads and compiles; these calls let ``hostctl clean`` undo a crashed daemon's
program and maps with nothing but the pinned paths or the program's id, and let the
daemon attach with BPF_F_ALLOW_MULTI (so it coexists with other cgroup sock_ops users).
"""

from __future__ import annotations

import ctypes
import ctypes.util
import errno
import mmap
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
BPF_PROG_GET_FD_BY_ID = 13
BPF_MAP_GET_FD_BY_ID = 14
BPF_OBJ_GET_INFO_BY_FD = 15
BPF_PROG_QUERY = 16
BPF_MAP_LOOKUP_BATCH = 24
BPF_MAP_UPDATE_BATCH = 26
BPF_ENABLE_STATS = 32
BPF_ITER_CREATE = 33
BPF_LINK_CREATE = 28

BPF_MAP_TYPE_RINGBUF = 27  # enum bpf_map_type
BPF_CGROUP_SOCK_OPS = 3  # enum bpf_attach_type
BPF_TRACE_ITER = 28
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


def prog_get_fd_by_id(prog_id: int) -> int:
    """A new fd of the program with this id (ENOENT when no such program lives)."""
    return _call(BPF_PROG_GET_FD_BY_ID, struct.pack("=III", prog_id, 0, 0))


def map_get_fd_by_id(map_id: int) -> int:
    return _call(BPF_MAP_GET_FD_BY_ID, struct.pack("=III", map_id, 0, 0))


def prog_info(fd: int, max_maps: int = 32) -> tuple[int, str, list[int]]:
    """(id, name, map ids) of a program (struct bpf_prog_info: id at 4, nr_map_ids at 52,
    map_ids at 56, name[16] at 64)."""
    ids = (ctypes.c_uint32 * max_maps)()
    info = ctypes.create_string_buffer(128)
    struct.pack_into("=IQ", info, 52, max_maps, ctypes.addressof(ids))
    _call(BPF_OBJ_GET_INFO_BY_FD, struct.pack("=IIQ", fd, len(info), ctypes.addressof(info)))
    prog_id, nr = struct.unpack_from("=I", info.raw, 4)[0], struct.unpack_from("=I", info.raw, 52)[0]
    name = info.raw[64:80].split(b"\0", 1)[0].decode(errors="replace")
    return prog_id, name, list(ids[:min(nr, max_maps)])


def map_name(fd: int) -> str:
    """The name of a map (struct bpf_map_info: name[16] at 24)."""
    info = ctypes.create_string_buffer(80)
    _call(BPF_OBJ_GET_INFO_BY_FD, struct.pack("=IIQ", fd, len(info), ctypes.addressof(info)))
    return info.raw[24:40].split(b"\0", 1)[0].decode(errors="replace")


def prog_attach(target_fd: int, prog_fd: int, attach_type: int, flags: int = 0) -> None:
    _call(BPF_PROG_ATTACH, struct.pack("=IIII", target_fd, prog_fd, attach_type, flags))


def prog_detach(target_fd: int, prog_fd: int, attach_type: int) -> None:
    _call(BPF_PROG_DETACH, struct.pack("=IIII", target_fd, prog_fd, attach_type, 0))


def iter_link(prog_fd: int) -> int:
    """A link for an iterator program (BPF_TRACE_ITER, no target options: tcp, ...)."""
    return _call(BPF_LINK_CREATE, struct.pack("=IIII", prog_fd, 0, BPF_TRACE_ITER, 0))


def iter_read(link_fd: int, chunk: int = 1 << 16) -> bytes:
    """Run the iterator once (a new session: BPF_ITER_CREATE) and return everything it wrote."""
    fd = _call(BPF_ITER_CREATE, struct.pack("=II", link_fd, 0))
    try:
        parts = []
        while data := os.read(fd, chunk):
            parts.append(data)
        return b"".join(parts)
    finally:
        os.close(fd)


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


_BATCH_ATTR = struct.Struct("=QQQQIIQQ")  # in_batch, out_batch, keys, values, count, map_fd, elem_flags, flags


class BatchReader:
    """Reads a whole hash map with BPF_MAP_LOOKUP_BATCH (Linux 5.6+), ``chunk`` entries per call,
    into buffers kept between reads: bcc's items_lookup_batch() allocates and zeroes room for
    max_entries keys and values on every call (2 MB for the pacer's flow map) and builds a
    ctypes object per entry."""

    _ATTR = _BATCH_ATTR

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


def map_update_batch(fd: int, keys: bytes, values: bytes, count: int) -> int:
    """BPF_MAP_UPDATE_BATCH (Linux 5.6+): write ``count`` entries, keys and values each concatenated,
    in one call. Returns the entries written (all of them unless it raises). Raises BpfError with
    ``.done`` = the entries written before the one that failed (the kernel stops there), e.g. EINVAL
    where the kernel has no batch ops for the map type, E2BIG / ENOMEM when the map is full."""
    k = ctypes.create_string_buffer(keys, len(keys))
    v = ctypes.create_string_buffer(values, len(values))
    attr = ctypes.create_string_buffer(_BATCH_ATTR.pack(0, 0, ctypes.addressof(k), ctypes.addressof(v), count, fd,
                                                        0, 0).ljust(ATTR_SIZE, b"\0"), ATTR_SIZE)
    ret = _libc.syscall(_NR_BPF, BPF_MAP_UPDATE_BATCH, attr, ATTR_SIZE)
    done = struct.unpack_from("=I", attr, 32)[0]
    if ret < 0:
        e = ctypes.get_errno()
        err = BpfError(e, f"bpf map update batch: {os.strerror(e)}")
        err.done = done
        raise err
    return done


def map_info(fd: int) -> tuple[int, int, int, int]:
    """(type, key_size, value_size, max_entries) of a map (struct bpf_map_info's first fields)."""
    info = ctypes.create_string_buffer(80)
    _call(BPF_OBJ_GET_INFO_BY_FD, struct.pack("=IIQ", fd, len(info), ctypes.addressof(info)))
    mtype, _id, ksz, vsz, maxe = struct.unpack_from("=5I", info.raw)
    return mtype, ksz, vsz, maxe


RINGBUF_BUSY = 1 << 31  # record header: reserved, not committed yet
RINGBUF_DISCARD = 1 << 30  # record header: discarded by the program
RINGBUF_HDR = 8  # u32 length (with the two bits above), u32 page offset


def ring_take(buf, base: int, mask: int, cons: int, prod: int, size: int) -> tuple[bytes, int, int, int]:
    """The committed records in [cons, prod) of a ring buffer's data area as mapped by the
    kernel (``buf``: data at ``base``, mapped twice in a row, so a record that wraps is
    contiguous; ``mask`` = data size - 1). Takes records in order up to the first one not
    committed yet; keeps those of ``size`` bytes. Returns (records, count, new consumer
    position, records of another size skipped): records is count records back to back,
    each its 8-byte header then its sample, padded to 8 bytes.

    The headers are read before the samples (x86 keeps loads in order, and the kernel
    commits a record by clearing its busy bit after writing it)."""
    stride = (size + RINGBUF_HDR + 7) & ~7
    avail = prod - cons
    off = base + (cons & mask)
    k = min(avail, mask + 1) // stride
    if k:  # fast path: every record of this size and committed (one program, one record type)
        mv = memoryview(buf)[off:off + k * stride]
        lens = mv.cast("B").cast("I")[::stride // 4].tolist()
        mv.release()
        n = k if lens.count(size) == k else next(j for j, x in enumerate(lens) if x != size)
    else:
        n = 0
    parts = [bytes(buf[off:off + n * stride])] if n else []
    cons += n * stride
    count, skipped = n, 0
    if n < k or (n == k and cons < prod):  # something else first: walk record by record
        while cons < prod:
            o = base + (cons & mask)
            ln = struct.unpack_from("=I", buf, o)[0]
            if ln & RINGBUF_BUSY:
                break
            body = ln & ~RINGBUF_DISCARD
            if not ln & RINGBUF_DISCARD:
                if body == size:
                    parts.append(bytes(buf[o:o + stride]))
                    count += 1
                else:
                    skipped += 1
            cons += (body + RINGBUF_HDR + 7) & ~7
    return b"".join(parts) if len(parts) != 1 else parts[0], count, cons, skipped


class RingReader:
    """Consumer of a BPF ring buffer (BPF_MAP_TYPE_RINGBUF) through its mmap'ed pages,
    as libbpf's ring_buffer__consume does, without a callback per record: read() returns
    every committed record of ``size`` bytes at once. x86 only (see ring_take); raises
    OSError where the map is not a ring buffer or cannot be mapped."""

    def __init__(self, fd: int, size: int) -> None:
        if platform.machine() not in ("x86_64", "AMD64"):
            raise BpfError(errno.ENOTSUP, "mmap ring buffer reads need x86's load ordering")
        mtype, _k, _v, data = map_info(fd)
        if mtype != BPF_MAP_TYPE_RINGBUF or data <= 0 or data & (data - 1):
            raise BpfError(errno.EINVAL, f"map {fd} is not a ring buffer (type {mtype}, size {data})")
        page = mmap.PAGESIZE
        self.size, self.mask, self.page = size, data - 1, page
        self.skipped = 0  # records of another size (none expected)
        self._cons_map = mmap.mmap(fd, page, mmap.MAP_SHARED, mmap.PROT_READ | mmap.PROT_WRITE, offset=0)
        try:
            self._prod_map = mmap.mmap(fd, page + 2 * data, mmap.MAP_SHARED, mmap.PROT_READ, offset=page)
        except BaseException:
            self._cons_map.close()
            raise
        self._cons = ctypes.c_uint64.from_buffer(self._cons_map)  # one aligned 8-byte load / store
        self._prod = struct.Struct("=Q")  # native: one 8-byte load

    def read(self) -> tuple[bytes, int]:
        """(records, count): see ring_take; the consumer position moves past them."""
        cons = self._cons.value
        prod = self._prod.unpack_from(self._prod_map, 0)[0]
        if prod <= cons:
            return b"", 0
        data, n, new, skipped = ring_take(self._prod_map, self.page, self.mask, cons, prod, self.size)
        self.skipped += skipped
        if new != cons:
            self._cons.value = new
        return data, n

    def close(self) -> None:
        if self._cons_map is not None:
            del self._cons
            self._cons_map.close()
            self._prod_map.close()
            self._cons_map = None


def enable_stats() -> int:
    """Turn on run_time_ns/run_cnt accounting for every program while the fd stays open."""
    return _call(BPF_ENABLE_STATS, struct.pack("=I", BPF_STATS_RUN_TIME))


class _Statfs(ctypes.Structure):  # struct statfs: f_type first (a class per call would be cyclic garbage)
    _fields_ = [("f_type", ctypes.c_long), ("_rest", ctypes.c_byte * 112)]


def is_bpffs(path: str) -> bool:
    """True if ``path`` is the root of a mounted bpf filesystem (statfs magic)."""
    st = _Statfs()
    if _libc.statfs(os.fsencode(path), ctypes.byref(st)) != 0:
        return False
    return (st.f_type & 0xFFFFFFFF) == BPF_FS_MAGIC


MS_NOSUID, MS_NODEV, MS_NOEXEC = 2, 4, 8


def mount_fs(fstype: str, path: str, options: str = "", flags: int = 0) -> None:
    """mount -t FSTYPE -o OPTIONS none PATH (mount(2) with no source device)."""
    if _libc.mount(fstype.encode(), os.fsencode(path), fstype.encode(), flags, options.encode() or None) != 0:
        e = ctypes.get_errno()
        raise BpfError(e, f"mount -t {fstype} {path}: {os.strerror(e)}")


def mount_bpffs(path: str) -> None:
    os.makedirs(path, exist_ok=True)
    mount_fs("bpf", path, "mode=0700")
