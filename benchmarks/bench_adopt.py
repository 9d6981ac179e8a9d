"""Cost of the pacer's adoption pass (hostctl/bpf/hc_pace.c's bpf_iter__tcp, Pacer.adopt) against
the number of established TCP sockets, and a check that it adopts exactly what it should.

    sudo .venv/bin/python benchmarks/bench_adopt.py [--sizes 100,1000,8000] [--repeat 3]
                                                    [--out docs/results/adopt/adopt.json]

For each size N, in a network namespace and a cgroup made for the run (removed at the end, even on
failure): N idle TCP connections over the namespace's loopback (2N established sockets, opened by a
child process inside that cgroup), then a Pacer attached to the cgroup, then three passes, timed
(wall, the whole of Pacer.adopt: the scope's processes, their namespaces, the iterator's run and
its records read back):
  walk    a table whose selectors match none of the sockets: the iterator visits all 2N, flags none
  adopt   a table selecting the server port, local and remote side: all 2N get callbacks
  again   the same pass once more: every socket has its callbacks already, none is flagged
The counts are checked against N (the benchmark fails if a pass flags the wrong sockets).
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import secrets
import statistics
import subprocess
import sys
import time

from hostctl.core.pace import PaceTable
from hostctl.datapath import pacer
from hostctl_lab.bench.results import write_results

HOLDER = r"""
import json, resource, socket, sys
n = int(sys.argv[1])
hard = resource.getrlimit(resource.RLIMIT_NOFILE)[1]
resource.setrlimit(resource.RLIMIT_NOFILE, (min(2 * n + 256, hard), hard))
srv = socket.socket(); srv.bind(("127.0.0.1", 0)); srv.listen(4096)
keep = []
for _ in range(n):
    c = socket.create_connection(srv.getsockname()); a, _ = srv.accept(); keep += [c, a]
print(json.dumps({"port": srv.getsockname()[1]}), flush=True)
sys.stdin.readline()
"""


def run_size(n: int, ns: str, cgroup: str) -> dict:
    holder = subprocess.Popen(["sh", "-c", 'echo $$ > "$0/cgroup.procs" && exec ip netns exec "$@"', cgroup, ns,
                               sys.executable, "-c", HOLDER, str(n)],
                              stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    try:
        port = json.loads(holder.stdout.readline())["port"]
        p = pacer.Pacer(cgroup, track_all=False)
        try:
            p.apply(PaceTable(ports={(1, "remote"): 1}))  # matches nothing
            walk = (p.last_adoption_s, len(p.last_adoption))
            p.apply(PaceTable(ports={(1, "remote"): 1, (port, "local"): 2, (port, "remote"): 3}))
            adopt = (p.last_adoption_s, len(p.last_adoption))
            p.adopt()
            again = (p.last_adoption_s, len(p.last_adoption))
        finally:
            p.close()
    finally:
        holder.stdin.close()
        holder.wait(30)
    if walk[1] != 0 or adopt[1] != 2 * n or again[1] != 0:
        raise SystemExit(f"N={n}: flagged walk {walk[1]}, adopt {adopt[1]} (want {2 * n}), again {again[1]}")
    return {"walk_ms": walk[0] * 1e3, "adopt_ms": adopt[0] * 1e3, "again_ms": again[0] * 1e3, "adopted": adopt[1]}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--sizes", default="100,1000,8000", help="connections per case (2 sockets each)")
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--out", default="docs/results/adopt/adopt.json")
    a = ap.parse_args()
    try:
        sizes = [int(x) for x in a.sizes.split(",")]
    except ValueError:
        ap.error(f"--sizes {a.sizes!r}: give comma-separated integers, e.g. 100,1000")
    if os.geteuid() != 0:
        ap.error("run as root: it makes a network namespace and a cgroup and attaches BPF programs")
    hard = resource.getrlimit(resource.RLIMIT_NOFILE)[1]
    if 2 * max(sizes) + 256 > hard:
        ap.error(f"--sizes: {max(sizes)} connections need {2 * max(sizes) + 256} open files, the limit here is "
                 f"{hard} (ulimit -Hn): give at most {(hard - 256) // 2}")
    tag = secrets.token_hex(3)
    ns = f"hcb-adopt-{tag}"
    cgroup = os.path.join(pacer.cgroup2_root(), f"hostctl-bench-adopt-{tag}")
    subprocess.run(["ip", "netns", "add", ns], check=True)
    os.mkdir(cgroup)
    rows = []
    try:
        subprocess.run(["ip", "netns", "exec", ns, "ip", "link", "set", "lo", "up"], check=True)
        for r in range(a.repeat):
            for n in sizes:
                row = {"connections": n, "sockets": 2 * n, "repeat": r, **run_size(n, ns, cgroup)}
                rows.append(row)
                print(f"N={n:6d} sockets={2 * n:6d}  walk {row['walk_ms']:7.2f} ms  adopt {row['adopt_ms']:7.2f} ms"
                      f"  again {row['again_ms']:7.2f} ms", flush=True)
    finally:
        subprocess.run(["ip", "netns", "del", ns], check=False)
        for _ in range(50):
            try:
                os.rmdir(cgroup)
                break
            except OSError:
                time.sleep(0.1)
    summary = {}
    for n in sizes:
        rs = [x for x in rows if x["connections"] == n]
        summary[str(n)] = {k: statistics.median(x[k] for x in rs) for k in ("walk_ms", "adopt_ms", "again_ms")}
        summary[str(n)]["us_per_socket_walk"] = summary[str(n)]["walk_ms"] * 1e3 / (2 * n)
    print(json.dumps(summary, indent=1))
    write_results(a.out, "adoption pass", {"sizes": sizes, "repeat": a.repeat, "rows": rows, "median": summary})


if __name__ == "__main__":
    main()
