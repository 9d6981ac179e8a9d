"""Give the C allocator's free memory back to the kernel (glibc ``malloc_trim``).

bcc compiles the BPF programs inside the daemon's process (clang and LLVM). The compile leaves some
45 MiB of free chunks in the C heap, and glibc keeps them: they stay in the daemon's RSS, and as the
allocator later hands out other parts of that free space, pages never touched since are touched and
RSS creeps up by a few MiB an hour though nothing is in use (measured: docs/benchmarks.md, "Soak").
``malloc_trim(0)`` returns every whole free page to the kernel (madvise DONTNEED inside the heap,
not only at its top). The daemon calls it once it is up and then every ``consts.MEM_TRIM_S``.

Without glibc (musl, another libc) there is nothing to call: :func:`trim` returns None.

Python's cyclic garbage collector is the other half. Objects that die in reference cycles after they reached
the old generation (pyroute2's netlink messages that were alive during a young collection, for one) wait for a
full collection, which CPython starts only when the old generation has grown by a quarter: with the ~64,000
objects the start-up leaves (bcc, pyroute2, numpy), that was an hour and ~3 MiB of garbage in a soak, and a
full collection that walks all of them takes 45-80 ms, most of a 60 ms slot. So once it is up the daemon
collects and :func:`freeze` s what is left (``gc.freeze``: later collections skip those objects), then
:func:`collect` s every ``consts.MEM_TRIM_S`` before it trims. :class:`GcMeter` times every collection.
"""

from __future__ import annotations

import ctypes
import gc
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


def freeze() -> int:
    """Collect, then move every object left to the permanent generation (gc.freeze): from now on a
    collection walks only what was made after. Returns how many objects were frozen. The objects are
    still freed when their last reference goes; only a cycle among them would stay (the start-up's
    objects live as long as the daemon). Undone by :func:`unfreeze`."""
    gc.collect()
    gc.freeze()
    return gc.get_freeze_count()


def unfreeze() -> None:
    gc.unfreeze()


def collect() -> tuple[int, float]:
    """A full collection: (objects it freed, milliseconds it took)."""
    t0 = time.perf_counter()
    n = gc.collect()
    return n, (time.perf_counter() - t0) * 1e3


class GcMeter:
    """Times every collection (gc.callbacks) while started: how many, and the longest pause."""

    def __init__(self) -> None:
        self.collections = 0
        self.max_ms = 0.0
        self._t0 = 0.0

    def __call__(self, phase: str, info: dict) -> None:
        if phase == "start":
            self._t0 = time.perf_counter()
            return
        self.collections += 1
        self.max_ms = max(self.max_ms, (time.perf_counter() - self._t0) * 1e3)

    def start(self) -> None:
        if self not in gc.callbacks:
            gc.callbacks.append(self)

    def stop(self) -> None:
        if self in gc.callbacks:
            gc.callbacks.remove(self)
