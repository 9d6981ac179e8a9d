"""Run `hostctl ...` (hostctl.cli.main) in this process under a profiler, for the benchmarks that start a
daemon (soak.py: HC_SOAK_DAEMON, bench_limits.py: HC_LIMITS_DAEMON, e.g.
HC_SOAK_DAEMON="python benchmarks/_daemon_probe.py --tracemalloc /tmp/tm --every 60").

    _daemon_probe.py --cprofile OUT.prof  hostctl-args...   cProfile of the whole run, written at exit
    _daemon_probe.py --tracemalloc DIR [--every S] hostctl-args...
                                          tracemalloc (1 frame): every S seconds DIR/NNNN.txt lists the 40
                                          lines whose allocations grew most since the first snapshot (taken
                                          after S seconds, past the start-up)
"""

from __future__ import annotations

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


if __name__ == "__main__":
    main()
