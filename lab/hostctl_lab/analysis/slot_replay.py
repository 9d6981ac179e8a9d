"""Capture a real daemon's slots and replay them: the per-slot CPU of the pacing control (monitor,
flow table, mlcc plan) on fixed input, free of the machine's drift and of the traffic's variation.

    # 1. capture (a real daemon on a testbed, through bench_daemon_cpu.py):
    sudo .venv/bin/python benchmarks/bench_daemon_cpu.py --pattern stream --capture /tmp/cap-stream.pkl
    # 2. replay it with the code under test (best of --reps passes; the hash covers every slot's
    #    rates, selectors, monitor stats, mlcc plan and periodic status, so two versions of the
    #    code that hash alike decided alike):
    .venv/bin/python -m hostctl_lab.analysis.slot_replay replay /tmp/cap-stream.pkl --reps 3
    # compare code versions by alternating them (PYTHONPATH=<other tree>) on the same capture.

The capture records, per slot, what ``PaceControl.tick`` read: its clock readings, the datapath's
readout (flow records and burst records) and the jobs; the first ``--slots`` (default 900) slots
after the daemon starts are kept. Replay feeds them to a fresh PaceControl over a fake datapath and
times each tick with ``time.thread_time()`` (CPU, not wall time); the first 100 slots (the monitor
learning the flows) are left out of the statistics.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import pickle
import sys
import time

import numpy as np

# Comparing two versions of the code: PYTHONPATH=<other tree> puts that tree's hostctl before the installed one.
# Run this file by its path for that (python lab/hostctl_lab/analysis/slot_replay.py ...): `python -m` puts the
# current directory first, which from the checkout is this tree's hostctl.

WARM_SLOTS = 100


def install_capture(path: str, slots: int) -> None:
    """Wrap PaceControl so that its first `slots` ticks' inputs are pickled to `path` (rewritten
    every 100 slots, atomically, so that a daemon stopped early leaves a usable file)."""
    import hostctl.policy.pacing as pc

    cap: dict = {"ticks": [], "config": None, "link_rate_bps": None}
    init, tick = pc.PaceControl.__init__, pc.PaceControl.tick

    def init_c(self, config, datapath, mono=time.monotonic, *, link_rate_bps=None, switch=None, wall=time.time):
        cap["config"], cap["link_rate_bps"] = config, link_rate_bps
        cur: dict = {}
        self._cap_cur = cur

        def mono_c():
            v = mono()
            cur.setdefault("mono", []).append(v)
            return v

        def wall_c():
            v = wall()
            cur.setdefault("wall", []).append(v)
            return v

        init(self, config, datapath, mono_c, link_rate_bps=link_rate_bps, switch=switch, wall=wall_c)
        read = datapath.read_pacing

        def read_c():
            cur["readout"] = r = read()
            return r

        datapath.read_pacing = read_c

    def tick_c(self, now, jobs):
        cur = self._cap_cur
        cur.clear()
        cur["now"], cur["jobs"] = now, dict(jobs)
        try:
            return tick(self, now, jobs)
        finally:
            if len(cap["ticks"]) < slots:
                cap["ticks"].append(dict(cur))
                if len(cap["ticks"]) % 100 == 0 or len(cap["ticks"]) == slots:
                    with open(path + ".tmp", "wb") as f:
                        pickle.dump(cap, f)
                    os.replace(path + ".tmp", path)

    pc.PaceControl.__init__ = init_c
    pc.PaceControl.tick = tick_c


class _Datapath:
    """The replay's datapath: returns the captured readout, keeps the applied tables."""

    def __init__(self) -> None:
        self.readout = None
        self.tables: list = []

    def read_pacing(self):
        return self.readout

    def pace(self, table) -> int:
        self.tables.append(table)
        return 0

    def heartbeat(self) -> None:
        pass

    def forget(self, keys) -> None:
        pass


def _digest(h, pc, table, k: int, status_every: int) -> None:
    for m in (table.flow_rates, table.ports, table.flows, table.slot_rates):
        h.update(repr(sorted(m.items())).encode())
    st = pc.monitor.flow_stats()
    for name in st.__dataclass_fields__:
        v = np.asarray(getattr(st, name))
        h.update(v.tobytes() if v.dtype != object else repr(v.tolist()).encode())
    if pc.mlcc is not None and pc.mlcc.last is not None:
        h.update(np.asarray(pc.mlcc.last.rates_Bps).tobytes())
        h.update(np.asarray(pc.mlcc.last.applied_Bps).tobytes())
    if k % status_every == 0:
        s = pc.status()
        for x in ("tick_ms_p50", "tick_ms_p90"):
            s.pop(x, None)
        for x in ("negotiation_ms_p50", "negotiation_ms_p90", "exchange_ms_p90"):
            (s.get("mlcc") or {}).pop(x, None)
        h.update(json.dumps(s, sort_keys=True, default=str).encode())


def replay(cap: dict, reps: int = 3, status_every: int = 25, gap_s: float = 0.0) -> tuple[np.ndarray, str]:
    """(per-tick CPU seconds of the fastest pass, the behaviour hash). gap_s: sleep between ticks,
    as the daemon does between slots (the CPU's caches then go cold as other processes run)."""
    from hostctl.policy.pacing import PaceControl

    best, digest = None, ""
    for rep in range(reps):
        clock = {"mono": iter(()), "wall": iter(())}
        dp = _Datapath()
        pc = PaceControl(cap["config"], dp, lambda: next(clock["mono"]), link_rate_bps=cap["link_rate_bps"],
                         wall=lambda: next(clock["wall"]))
        h = hashlib.sha256()
        times = []
        for k, t in enumerate(cap["ticks"]):
            clock["mono"], clock["wall"] = iter(t.get("mono", ())), iter(t.get("wall", ()))
            dp.readout = t["readout"]
            t0 = time.thread_time()
            pc.tick(t["now"], t["jobs"])
            times.append(time.thread_time() - t0)
            if gap_s:
                time.sleep(gap_s)
            if rep == 0:
                _digest(h, pc, dp.tables[-1], k, status_every)
        tt = np.array(times[WARM_SLOTS:])
        if best is None or tt.mean() < best.mean():
            best = tt
        if rep == 0:
            digest = h.hexdigest()
        pc.close()
    return best, digest


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    d = sub.add_parser("daemon", help="run `hostctl ARGS...` with the capture installed (used by bench_daemon_cpu)")
    d.add_argument("capture")
    d.add_argument("--slots", type=int, default=900)
    d.add_argument("args", nargs=argparse.REMAINDER)
    r = sub.add_parser("replay", help="replay a capture with the code on PYTHONPATH")
    r.add_argument("capture")
    r.add_argument("--reps", type=int, default=3)
    r.add_argument("--gap", type=float, default=0.0,
                   help="seconds to sleep between ticks, as the daemon between slots (default 0: back to back)")
    r.add_argument("--out", help="append a JSON line with the result to this file")
    a = ap.parse_args()
    if a.cmd == "daemon":
        install_capture(os.path.abspath(a.capture), a.slots)
        from hostctl.cli import main as hostctl_main

        sys.argv = ["hostctl", *(x for x in a.args if x != "--")]
        hostctl_main()
        return
    with open(a.capture, "rb") as f:
        cap = pickle.load(f)
    if len(cap["ticks"]) <= WARM_SLOTS:
        raise SystemExit(f"{a.capture}: {len(cap['ticks'])} slots captured, more than {WARM_SLOTS} needed")
    tt, digest = replay(cap, a.reps, gap_s=a.gap)
    import hostctl

    res = {"capture": a.capture, "slots": len(cap["ticks"]), "code": os.path.dirname(hostctl.__file__),
           "tick_ms_mean": 1e3 * float(tt.mean()), "tick_ms_median": 1e3 * float(np.median(tt)),
           "tick_ms_p90": 1e3 * float(np.percentile(tt, 90)), "hash": digest, "gap_s": a.gap,
           "when": time.strftime("%Y-%m-%dT%H:%M:%S%z")}
    print(f"{res['slots']} slots from {res['code']}: per tick mean {res['tick_ms_mean']:.3f} ms, median "
          f"{res['tick_ms_median']:.3f}, p90 {res['tick_ms_p90']:.3f}; hash {digest[:16]}")
    if a.out:
        with open(a.out, "a") as f:
            f.write(json.dumps(res) + "\n")


if __name__ == "__main__":
    main()
