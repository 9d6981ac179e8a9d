"""Give the C allocator's free memory back to the kernel (glibc ``malloc_trim``).

bcc compiles the BPF programs inside the daemon's process (clang and LLVM). The compile leaves some
45 MiB of free chunks in the C heap, and glibc keeps them: they stay in the daemon's RSS, and as the
allocator later hands out other parts of that free space, pages never touched since are touched and
RSS creeps up by a few MiB an hour though nothing is in use (measured: docs/benchmarks.md, "Soak").
``malloc_trim(0)`` returns every whole free page to the kernel (madvise DONTNEED inside the heap,
not only at its top). The daemon calls it once it is up and then every ``consts.MEM_TRIM_S``.

Without glibc (musl, another libc) there is nothing to call: :func:`trim` returns None.
"""

from __future__ import annotations

import ctypes
import os
import time

_PAGE_KIB = os.sysconf("SC_PAGE_SIZE") // 1024
try:  # glibc's; None with another libc
    _malloc_trim = ctypes.CDLL(None).malloc_trim
    _malloc_trim.argtypes, _malloc_trim.restype = [ctypes.c_size_t], ctypes.c_int
except (OSError, AttributeError):
    _malloc_trim = None


def rss_kib() -> int:
    """This process's resident set (KiB), from /proc/self/statm (0 if unreadable)."""
    try:
        with open("/proc/self/statm", "rb") as f:
            return int(f.read().split()[1]) * _PAGE_KIB
    except (OSError, ValueError, IndexError):
        return 0


def trim() -> tuple[int, float] | None:
    """malloc_trim(0): (KiB the RSS fell by, milliseconds it took), or None without glibc."""
    if _malloc_trim is None:
        return None
    before = rss_kib()
    t0 = time.perf_counter()
    _malloc_trim(0)
    ms = (time.perf_counter() - t0) * 1e3
    return max(0, before - rss_kib()), ms
