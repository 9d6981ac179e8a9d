"""hostctl.memory: malloc_trim gives the C heap's free pages back, in a real process; the collector is
frozen, run and timed."""

import subprocess
import sys

from hostctl import memory

# A child fills 48 MiB of the C heap with 4 KiB blocks (below the mmap threshold), frees all but every
# 64th (so the heap's top stays in use and free() alone cannot shrink it), then trims.
CHILD = r"""
import ctypes, json
from hostctl import memory
libc = ctypes.CDLL(None)
libc.malloc.restype = ctypes.c_void_p
libc.free.argtypes = [ctypes.c_void_p]
blocks = [libc.malloc(4096) for _ in range(12288)]
for b in blocks:
    ctypes.memset(b, 1, 4096)
full = memory.rss_kib()
for i, b in enumerate(blocks):
    if i % 64:
        libc.free(b)
freed = memory.rss_kib()
kib, ms = memory.trim()
print(json.dumps({"full": full, "freed": freed, "after": memory.rss_kib(), "kib": kib, "ms": ms,
                  "again": memory.trim()[0]}))
"""


def test_trim_gives_the_free_heap_back_and_says_how_much():
    import json

    r = subprocess.run([sys.executable, "-c", CHILD], capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    got = json.loads(r.stdout)
    assert got["freed"] > got["full"] - 8 * 1024  # free() kept nearly all of it resident
    assert got["kib"] > 40 * 1024, got  # 47 of the 48 MiB are free whole pages
    assert got["after"] <= got["freed"] - got["kib"] + 1024, got  # what trim reports is what RSS lost
    assert got["again"] < 1024, got  # nothing left to give


def test_rss_is_this_process():
    with open("/proc/self/status") as f:
        vm = next(int(line.split()[1]) for line in f if line.startswith("VmRSS:"))
    assert abs(memory.rss_kib() - vm) < 4096


# A child makes cycles that reach the old generation (they survive two collections), then drops them: the
# young collections never free them, a full one does. freeze() then leaves the collector nothing of the
# start-up to walk, and GcMeter times the collections it sees.
GC_CHILD = r"""
import gc, json
from hostctl import memory
class Node:
    pass
def cycles(n):
    out = []
    for _ in range(n):
        a, b = Node(), Node()
        a.b, b.a = b, a
        out.append(a)
    return out
old = cycles(5000)
gc.collect(); gc.collect()  # now in the oldest generation
del old
young = gc.collect(1)
m = memory.GcMeter()
m.start()
freed, ms = memory.collect()
m.stop()
gc.collect()
counted = m.collections
startup = [cycles(10) for _ in range(1000)]  # what a start-up leaves
frozen = memory.freeze()
t0 = memory.collect()[1]
memory.unfreeze()
print(json.dumps({"young": young, "freed": freed, "ms": ms, "counted": counted, "max_ms": m.max_ms,
                  "frozen": frozen, "left": gc.get_freeze_count(), "full_ms_frozen": t0}))
"""


def test_cycles_in_the_old_generation_wait_for_a_full_collection_and_freeze_hides_the_startup():
    import json

    r = subprocess.run([sys.executable, "-c", GC_CHILD], capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    got = json.loads(r.stdout)
    assert got["young"] < 100, got  # the young collections do not reach them
    assert got["freed"] >= 2 * 5000, got  # both nodes of every pair
    assert got["counted"] == 1 and got["max_ms"] > 0, got  # the meter saw that one, not the one after stop()
    assert got["frozen"] >= 1000 * 10 * 2, got  # the start-up's cycles are frozen (and stay alive)
    assert got["left"] == 0, got
