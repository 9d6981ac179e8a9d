"""Run `hostctl ...` (hostctl.cli.main) in this process under a profiler, for the benchmarks that start a
daemon (soak.py: HC_SOAK_DAEMON, bench_limits.py: HC_LIMITS_DAEMON, e.g.
HC_SOAK_DAEMON="python benchmarks/_daemon_probe.py --tracemalloc /tmp/tm --every 60").

    _daemon_probe.py --cprofile OUT.prof  hostctl-args...   cProfile of the whole run, written at exit
    _daemon_probe.py --tracemalloc DIR [--every S] hostctl-args...
                                          tracemalloc (1 frame): every S seconds DIR/NNNN.txt lists the 40
                                          lines whose allocations grew most since the first snapshot (taken
                                          after S seconds, past the start-up)
    _daemon_probe.py --malloc OUT.jsonl [--every S] [--trim-every T] hostctl-args...
                                          every S seconds one JSON line: RSS split as /proc/self/status
                                          does, glibc's mallinfo2 (bytes the C allocator holds and
                                          uses), Python's allocated blocks; every T seconds also
                                          malloc_trim(0) with RSS before and after (T=0: never). Tells
                                          a leak (in use grows) from memory the allocator keeps free;
                                          also pymalloc's arenas (sys._debugmallocstats: Python's small
                                          objects live in 1 MiB mmapped arenas that mallinfo2 does not see)
    _daemon_probe.py --gc OUT.jsonl [--every S] [--no-freeze] hostctl-args...
                                          the cyclic garbage collector: every S seconds one JSON line with
                                          each generation's collections, total and longest pause (ms) and
                                          objects collected since the last line; then the young generations'
                                          garbage is collected (young_garbage) and a full collection that
                                          keeps its garbage (DEBUG_SAVEALL) counts the 20 commonest types of
                                          objects that died in cycles after reaching the old generation,
                                          how long that full collection took and how many objects it
                                          walked; --no-freeze: the daemon does not gc.freeze its start-up
"""

from __future__ import annotations

import ctypes
import json
import math
import os
import sys
import threading
import time


def main() -> None:
    args = sys.argv[1:]
    mode, out = args[0], args[1]
    every = 60.0
    rest = args[2:]
    if rest[:1] == ["--every"]:
        every, rest = float(rest[1]), rest[2:]
    sys.argv = ["hostctl", *rest]
    from hostctl.cli import main as hostctl_main

    if mode == "--cprofile":
        import cProfile

        pr = cProfile.Profile()
        pr.enable()
        try:
            hostctl_main()
        finally:
            pr.disable()
            pr.dump_stats(out)
        return
    if mode == "--malloc":
        trim_every = 0.0
        if rest[:1] == ["--trim-every"]:
            trim_every, rest = float(rest[1]), rest[2:]
        sys.argv = ["hostctl", *rest]
        threading.Thread(target=_malloc_samples, args=(out, every, trim_every), daemon=True, name="malloc").start()
        hostctl_main()
        return
    if mode == "--gc":
        if rest[:1] == ["--no-freeze"]:  # the daemon as it was before it froze its start-up (a comparison)
            sys.argv = ["hostctl", *rest[1:]]
            from hostctl import memory

            memory.freeze = lambda: 0
        threading.Thread(target=_gc_samples, args=(out, every), daemon=True, name="gc").start()
        hostctl_main()
        return
    if mode != "--tracemalloc":
        raise SystemExit(f"_daemon_probe: unknown mode {mode!r}")
    import tracemalloc

    tracemalloc.start(1)
    os.makedirs(out, exist_ok=True)

    def snaps() -> None:
        time.sleep(every)
        base = tracemalloc.take_snapshot().filter_traces([tracemalloc.Filter(False, tracemalloc.__file__)])
        n = 0
        while True:
            time.sleep(every)
            n += 1
            snap = tracemalloc.take_snapshot().filter_traces([tracemalloc.Filter(False, tracemalloc.__file__)])
            diff = snap.compare_to(base, "lineno")
            cur, peak = tracemalloc.get_traced_memory()
            with open(os.path.join(out, f"{n:04d}.txt"), "w") as f:
                f.write(f"t={n * every + every:.0f}s traced={cur / 2**20:.2f} MiB peak={peak / 2**20:.2f} MiB\n")
                for st in diff[:40]:
                    f.write(f"{st}\n")

    threading.Thread(target=snaps, daemon=True, name="tracemalloc").start()
    hostctl_main()


class _Mallinfo2(ctypes.Structure):
    _fields_ = [(name, ctypes.c_size_t) for name in
                ("arena", "ordblks", "smblks", "hblks", "hblkhd", "usmblks", "fsmblks", "uordblks", "fordblks",
                 "keepcost")]


def _status_kib() -> dict[str, int]:
    out = {}
    with open("/proc/self/status") as f:
        for line in f:
            k, _, v = line.partition(":")
            if k in ("VmRSS", "RssAnon", "RssFile", "RssShmem"):
                out[k] = int(v.split()[0])
    return out


_PYMALLOC_KEYS = {"# arenas allocated total": "py_arenas_total", "# arenas reclaimed": "py_arenas_reclaimed",
                  "# arenas highwater mark": "py_arenas_highwater", "# arenas allocated current": "py_arenas",
                  "# bytes in allocated blocks": "py_alloc_bytes", "# bytes in available blocks": "py_avail_bytes"}


def _pymalloc_stats() -> dict[str, int]:
    """pymalloc's arena counts and block bytes. sys._debugmallocstats() writes to the C stderr, so fd 2 points
    at a file for the call (~1 ms; a log line another thread writes in that window lands in the file, not the log)."""
    import tempfile

    sys.stderr.flush()
    with tempfile.TemporaryFile("w+") as tmp:
        saved = os.dup(2)
        try:
            os.dup2(tmp.fileno(), 2)
            sys._debugmallocstats()
        finally:
            os.dup2(saved, 2)
            os.close(saved)
        tmp.seek(0)
        text = tmp.read()
    out = {}
    for line in text.splitlines():
        k, eq, v = line.partition("=")
        if eq:
            name = _PYMALLOC_KEYS.get(k.strip())
            if name:
                out[name] = int(v.strip().replace(",", ""))
            elif "unused pools" in k:
                out["py_unused_pool_bytes"] = int(v.strip().replace(",", ""))
    return out


def _malloc_samples(out: str, every: float, trim_every: float) -> None:
    from hostctl import memory

    libc = ctypes.CDLL("libc.so.6")
    libc.mallinfo2.restype = _Mallinfo2
    t0 = time.monotonic()
    next_trim = t0 + trim_every if trim_every > 0 else math.inf
    with open(out, "a") as f:
        while True:
            time.sleep(every)
            now = time.monotonic()
            m = libc.mallinfo2()
            row = {"t_s": round(now - t0, 1), **_status_kib(),
                   "malloc_system_kib": (m.arena + m.hblkhd) // 1024,  # brk/arena heaps + mmapped chunks
                   "malloc_in_use_kib": (m.uordblks + m.hblkhd) // 1024,
                   "malloc_free_kib": m.fordblks // 1024, "malloc_mmapped_kib": m.hblkhd // 1024,
                   "py_blocks": sys.getallocatedblocks(), **_pymalloc_stats()}
            if now >= next_trim:
                next_trim += trim_every
                memory.trim()
                row["after_trim"] = _status_kib()
            f.write(json.dumps(row) + "\n")
            f.flush()


def _kind(o: object) -> str:
    """A garbage object's type, and for functions and frames the code they belong to."""
    import types

    t = type(o)  # not isinstance: a dead weakref proxy raises on __class__
    if t is types.FunctionType:
        return f"function {o.__module__}.{o.__qualname__}"
    if t is types.FrameType:
        return f"frame {'/'.join(o.f_code.co_filename.rsplit('/', 2)[-2:])} {o.f_code.co_name}"
    return t.__qualname__ if t.__module__ == "builtins" else f"{t.__module__}.{t.__qualname__}"


def _gc_samples(out: str, every: float) -> None:
    import collections
    import gc

    stats = {g: {"n": 0, "ms": 0.0, "max_ms": 0.0, "collected": 0} for g in range(3)}
    started = [0.0]

    def cb(phase: str, info: dict) -> None:
        if phase == "start":
            started[0] = time.perf_counter()
            return
        ms = (time.perf_counter() - started[0]) * 1e3
        st = stats[info["generation"]]
        st["n"] += 1
        st["ms"] += ms
        st["max_ms"] = max(st["max_ms"], ms)
        st["collected"] += info["collected"]

    gc.callbacks.append(cb)
    t0 = time.monotonic()
    with open(out, "a") as f:
        while True:
            time.sleep(every)
            row = {"t_s": round(time.monotonic() - t0, 1), "gc_counts": gc.get_count(),
                   **{f"gen{g}": {k: round(v, 2) for k, v in st.items()} for g, st in stats.items()}}
            for st in stats.values():
                st.update(n=0, ms=0.0, max_ms=0.0, collected=0)
            gc.callbacks.remove(cb)  # the probe's own collections are not the daemon's
            row["young_garbage"] = gc.collect(1)  # what the next young collections would have freed
            gc.set_debug(gc.DEBUG_SAVEALL)
            try:
                t = time.perf_counter()
                gc.collect()  # what is left: garbage in the old generation, freed only by a full collection
                row["probe_full_ms"] = round((time.perf_counter() - t) * 1e3, 3)  # (keeping, not freeing, it)
                row["tracked"] = len(gc.get_objects())
                kinds = collections.Counter(_kind(o) for o in gc.garbage)
                row["garbage"] = len(gc.garbage)
                row["garbage_types"] = kinds.most_common(20)
            finally:
                gc.set_debug(0)
                gc.garbage.clear()
                gc.callbacks.append(cb)
            f.write(json.dumps(row) + "\n")
            f.flush()


if __name__ == "__main__":
    main()
