"""CPU time of one flow-discovery scan (hostctl.discovery.Discovery.scan) on this host, as the
daemon runs it every --rescan seconds.

    python benchmarks/bench_discovery.py [--scans 30] [--repeat 3] [--out results/discovery.json]

Specs: ``port`` (a listening port: sock_diag only), ``match`` (a command-line regex: this network
namespace's processes, and the fds of those it selects), ``match+port`` (both: the fds of every process
of the namespace). The regex and the port select nothing, so the time is the scan itself. Run it as
root, as the daemon runs: otherwise other users' processes are skipped. To compare with older code,
alternate ``PYTHONPATH=TREE python TREE/benchmarks/bench_discovery.py`` (a git worktree) with this one."""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

import psutil

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from hostctl.bench.results import write_results  # noqa: E402
from hostctl.core.types import JobSpec  # noqa: E402
from hostctl.discovery import Discovery  # noqa: E402

NOTHING = "hostctl-bench-discovery-selects-nothing"
SPECS = {
    "port": [JobSpec(ports=(1,))],
    "match": [JobSpec(match=NOTHING)],
    "match+port": [JobSpec(match=NOTHING), JobSpec(ports=(1,))],
}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--scans", type=int, default=30)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--out", default="results/discovery.json")
    a = ap.parse_args()
    rows = []
    for r in range(a.repeat):
        for name, specs in SPECS.items():
            d = Discovery(specs)
            cpu = []
            for _ in range(a.scans):
                t = time.thread_time()
                d.scan()
                cpu.append(time.thread_time() - t)
            row = {"repeat": r, "specs": name, "median_ms": 1e3 * statistics.median(cpu),
                   "p90_ms": 1e3 * sorted(cpu)[int(0.9 * (len(cpu) - 1))]}
            rows.append(row)
            print(f"rep {r} {name:>10}: CPU per scan median {row['median_ms']:.2f} ms, p90 {row['p90_ms']:.2f} ms",
                  flush=True)
    write_results(a.out, "discovery", {"processes": len(psutil.pids()), "scans": a.scans, "runs": rows})


if __name__ == "__main__":
    main()
