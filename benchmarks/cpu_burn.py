"""Burn a fixed share of CPU in the background, to see what a policy's daemons' CPU costs the jobs.

On the lab's small machines the six hosts' daemons share the CPU with the jobs: `mlcc` daemons use about
20% of a core each (docs/benchmarks.md), `fifo` none. Running fifo beside this burner, at the daemons'
measured CPU, separates the cost of that CPU from the effect of the schedules::

    python benchmarks/cpu_burn.py --procs 6 --duty 0.2 --seconds 600 &
    hostctl bench examples/scenarios/two-rack.toml --policies fifo --repeat 2 --out /tmp/burn
    kill %1

Each process alternates ``duty`` x 10 ms of a busy loop with the rest of 10 ms asleep, on monotonic
deadlines; it ends after ``--seconds`` or on SIGTERM/SIGINT. It prints the CPU it used at the end.
"""

from __future__ import annotations

import argparse
import multiprocessing as mp
import os
import signal
import sys
import time

PERIOD_S = 0.010


def burn(duty: float, seconds: float, stop) -> None:
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # the parent ends the children (stop event)
    end = time.monotonic() + seconds
    busy = duty * PERIOD_S
    t = time.monotonic()
    while not stop.is_set() and t < end:
        until = t + busy
        while time.monotonic() < until:
            pass
        t += PERIOD_S
        rest = t - time.monotonic()
        if rest > 0:
            time.sleep(rest)
        else:
            t = time.monotonic()  # fell behind (the machine is busy): no catching up


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--procs", type=int, default=6, help="processes (one per emulated host's daemon)")
    ap.add_argument("--duty", type=float, default=0.2, help="share of a core each process uses, 0-1")
    ap.add_argument("--seconds", type=float, default=600.0, help="stop after this long")
    a = ap.parse_args(argv)
    if not 1 <= a.procs <= 256:
        print(f"cpu_burn: --procs {a.procs}: give 1 to 256 processes", file=sys.stderr)
        return 2
    if not 0.0 < a.duty <= 1.0:
        print(f"cpu_burn: --duty {a.duty}: give a share of a core in (0, 1]", file=sys.stderr)
        return 2
    if not a.seconds > 0:
        print(f"cpu_burn: --seconds {a.seconds}: give a positive duration", file=sys.stderr)
        return 2
    stop = mp.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda *_: stop.set())
    t0, c0 = time.monotonic(), os.times()
    procs = [mp.Process(target=burn, args=(a.duty, a.seconds, stop), daemon=True) for _ in range(a.procs)]
    for p in procs:
        p.start()
    for p in procs:
        while p.is_alive():
            p.join(0.2)
    c1 = os.times()
    wall = time.monotonic() - t0
    used = (c1.children_user + c1.children_system) - (c0.children_user + c0.children_system)
    print(f"cpu_burn: {a.procs} x {a.duty:.2f} of a core for {wall:.1f} s: used {used / wall:.2f} cores")
    return 0


if __name__ == "__main__":
    sys.exit(main())
