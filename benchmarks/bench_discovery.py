"""CPU time of one flow-discovery scan (hostctl.discovery.Discovery.scan) on this host, as the
daemon runs it every --rescan seconds.

    python benchmarks/bench_discovery.py [--scans 30] [--repeat 3] [--established N] [--iface IF]
                                         [--out results/discovery.json]

Specs: ``port`` (a listening port: sock_diag only), ``match`` (a command-line regex: this network
namespace's processes, and the fds of those it selects), ``match+port`` (both: the fds of every process
of the namespace), and ``unfiltered`` (a reference, not a spec: one sock_diag dump of every listening
and established socket, what port-only scans read before the kernel-side port filter). The regex and
the port select nothing, so the time is the scan itself. ``--established N`` first opens N idle TCP
connections over loopback (2N established sockets that no spec selects: the table a busy host has);
``--iface IF`` gives discovery an egress interface, so it also looks for containers (one rtnetlink link
dump per scan when there are none). Run it as
root, as the daemon runs: otherwise other users' processes are skipped. To compare with older code,
alternate ``PYTHONPATH=TREE python TREE/benchmarks/bench_discovery.py`` (a git worktree) with this one."""

from __future__ import annotations

import argparse
import resource
import socket
import statistics
import time

import psutil

from hostctl.core.types import JobSpec
from hostctl.discovery import Discovery, read_diag_sockets
from hostctl_lab.bench.results import write_results

NOTHING = "hostctl-bench-discovery-selects-nothing"
SPECS = {
    "port": [JobSpec(ports=(1,))],
    "match": [JobSpec(match=NOTHING)],
    "match+port": [JobSpec(match=NOTHING), JobSpec(ports=(1,))],
}


class _Unfiltered:
    """The reference: every listening and established socket, unfiltered (no grouping)."""

    def scan(self) -> None:
        read_diag_sockets()


def open_idle_connections(n: int) -> list[socket.socket]:
    """n idle TCP connections over 127.0.0.1 (both ends kept open); the caller closes them."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    need = 2 * n + 256
    if soft < need:
        resource.setrlimit(resource.RLIMIT_NOFILE, (min(need, hard), hard))
    srv = socket.socket()
    srv.bind(("127.0.0.1", 0))
    srv.listen(4096)
    out = [srv]
    for _ in range(n):
        c = socket.create_connection(srv.getsockname())
        a, _addr = srv.accept()
        out += [c, a]
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--scans", type=int, default=30)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--established", type=int, default=0, help="idle loopback connections to open first")
    ap.add_argument("--iface", default=None, help="egress interface given to discovery (containers looked for)")
    ap.add_argument("--specs", default=",".join([*SPECS, "unfiltered"]), help="comma list of the cases to run")
    ap.add_argument("--out", default="results/discovery.json")
    a = ap.parse_args()
    unknown = set(a.specs.split(",")) - {*SPECS, "unfiltered"}
    if unknown:
        ap.error(f"unknown case(s) {', '.join(sorted(unknown))}: choose from {', '.join([*SPECS, 'unfiltered'])}")
    conns = open_idle_connections(a.established)
    rows = []
    for r in range(a.repeat):
        for name in a.specs.split(","):
            specs = SPECS.get(name)
            d = _Unfiltered() if specs is None else Discovery(specs, a.iface)
            cpu = []
            for _ in range(a.scans):
                t = time.thread_time()
                d.scan()
                cpu.append(time.thread_time() - t)
            row = {"repeat": r, "specs": name, "median_ms": 1e3 * statistics.median(cpu),
                   "mean_ms": 1e3 * statistics.fmean(cpu),
                   "p90_ms": 1e3 * sorted(cpu)[int(0.9 * (len(cpu) - 1))]}
            rows.append(row)
            print(f"rep {r} {name:>10}: CPU per scan median {row['median_ms']:.2f} ms, mean {row['mean_ms']:.2f} ms, "
                  f"p90 {row['p90_ms']:.2f} ms",
                  flush=True)
    for c in conns:
        c.close()
    write_results(a.out, "discovery", {"processes": len(psutil.pids()), "scans": a.scans,
                                       "established_sockets": 2 * a.established, "iface": a.iface, "runs": rows})


if __name__ == "__main__":
    main()
