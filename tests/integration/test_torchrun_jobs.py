"""Job ids of real torchrun jobs on two hosts (network namespaces), seen by `hostctl flows`.

Two 2-node torchrun jobs (gloo, CPU, 2 workers per node) run at once on the same two hosts.
Each host must report them as two jobs with distinct ids, and both hosts the same ids:
torchrun sets TORCHELASTIC_RUN_ID=none when no --rdzv-id is given, which names no launch.
The hostctl process itself (its command line holds the regex) must not be a job.
Skipped only when torch is not installed (scripts/setup.sh installs it from /opt/wheels).
"""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
import uuid

import pytest

from hostctl.core.grouping import LAUNCHER_ENV_KEYS
from tests.conftest import HOSTCTL, Host, Pair, wait_for

pytestmark = [
    pytest.mark.root, pytest.mark.netns, pytest.mark.slow,
    pytest.mark.skipif(importlib.util.find_spec("torch") is None,
                       reason="torch is not installed (scripts/setup.sh installs it from /opt/wheels)"),
]

TORCHRUN = os.path.join(sys.prefix, "bin", "torchrun")

# Each rank: join the group, all_reduce once, say it is ready, then all_reduce in a loop until
# rank 0 sees the stop file (broadcast, so every rank leaves the loop at the same step).
TRAIN = """
import os, sys, time
import torch
import torch.distributed as dist

ready, stop = sys.argv[1], sys.argv[2]
dist.init_process_group("gloo")
grad = torch.ones(4096)
dist.all_reduce(grad)
open(f"{ready}.{dist.get_rank()}", "w").close()
deadline = time.monotonic() + 120
flag = torch.zeros(1)
while True:
    flag[0] = float(os.path.exists(stop) or time.monotonic() > deadline)
    dist.broadcast(flag, 0)
    if flag[0]:
        break
    dist.all_reduce(grad)
    time.sleep(0.05)
dist.destroy_process_group()
"""


def _env(host: Host, tmp_path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in LAUNCHER_ENV_KEYS}
    # TMPDIR: torchrun's agent keeps its log folder (torchelastic_*) in the temporary directory after it exits
    env.update(GLOO_SOCKET_IFNAME=host.dev, OMP_NUM_THREADS="1", TMPDIR=str(tmp_path))
    return env


def _status(host: Host) -> dict | None:
    r = host.hostctl("status", "--json")
    return json.loads(r.stdout) if r.returncode == 0 else None


def _flows(host: Host) -> list[dict]:
    r = host.hostctl("flows", "--match", "torchrun", "--json")
    assert r.returncode == 0, r.stderr
    return json.loads(r.stdout)


def _launch(pair: Pair, tmp_path, rdzv: str, ports: tuple[int, int]) -> dict[tuple[int, int], int]:
    """Two 2-node torchrun jobs, node 0 of both on pair.ps; (job, node) -> torchrun agent pid.
    Returns once all 8 workers are in their all_reduce loop; touch tmp_path/"stop" to end them."""
    script = tmp_path / "train.py"
    script.write_text(TRAIN)
    agents: dict[tuple[int, int], int] = {}
    for job, port in enumerate(ports):
        for node, host in enumerate((pair.ps, pair.wk)):
            if rdzv == "static":  # torchrun's default: static rendezvous at --master-addr:--master-port
                launch = ["--node-rank", str(node), "--master-addr", pair.ps.addr, "--master-port", str(port)]
            else:  # c10d: node 0 hosts the store at the endpoint (is_host: both namespaces share a hostname)
                launch = ["--rdzv-backend", "c10d", "--rdzv-endpoint", f"{pair.ps.addr}:{port}",
                          "--rdzv-conf", f"is_host={node == 0}", "--local-addr", host.addr]
                if rdzv == "c10d-id":
                    launch += ["--rdzv-id", f"job{job}"]
            with open(tmp_path / f"job{job}-node{node}.log", "w") as log:
                p = pair.start(host, TORCHRUN, "--nnodes", "2", "--nproc-per-node", "2", *launch,
                               str(script), str(tmp_path / f"ready{job}"), str(tmp_path / "stop"),
                               env=_env(host, tmp_path), stdout=log, stderr=subprocess.STDOUT)
            agents[job, node] = p.pid  # `ip netns exec` execs torchrun: the agent keeps this pid
    started = list(agents.values())

    def all_ready() -> bool:
        if any(p.poll() is not None for p in pair.procs if p.pid in started):
            logs = "\n".join(f.read_text()[-2000:] for f in sorted(tmp_path.glob("*.log")))
            raise AssertionError(f"a torchrun exited early:\n{logs}")
        return all((tmp_path / f"ready{job}.{rank}").exists() for job in range(2) for rank in range(4))

    wait_for(all_ready, timeout=120, interval=0.2, what="8 torchrun workers in their all_reduce loop")
    return agents


def _ids_by_agent(jobs: list[dict], agents: list[int]) -> list[str]:
    """The id of the job holding each agent (each agent in exactly one job)."""
    out = []
    for agent in agents:
        mine = [j["job_id"] for j in jobs if agent in j["pids"]]
        assert len(mine) == 1, f"agent {agent} in {jobs}"
        out.append(mine[0])
    return out


def _finish(pair: Pair, tmp_path, agents: dict[tuple[int, int], int]) -> None:
    (tmp_path / "stop").touch()
    for p in pair.procs:
        if p.pid in agents.values():
            assert p.wait(60) == 0, (tmp_path / "job0-node0.log").read_text()[-2000:]


@pytest.mark.parametrize("rdzv", ["static", "c10d-id", "c10d"])
def test_two_torchrun_jobs_two_ids_same_on_both_hosts(make_pair, tmp_path, rdzv: str) -> None:
    n = uuid.uuid4().int
    pair: Pair = make_pair(net=f"10.{200 + n % 51}.{(n >> 8) % 256}")
    ports = (29510, 29610)
    agents = _launch(pair, tmp_path, rdzv, ports)
    try:
        seen = {node: _flows(host) for node, host in enumerate((pair.ps, pair.wk))}
    finally:
        (tmp_path / "stop").touch()
    for node in range(2):
        jobs = seen[node]
        assert len(jobs) == 2, f"host {node}: {jobs}"  # no third job: not the hostctl process
        for job in jobs:
            assert len(job["pids"]) == 3, job  # an agent and its 2 workers, nothing else
            assert job["flows"], job  # its workers' gloo and store connections
    ids = [_ids_by_agent(seen[node], [agents[0, node], agents[1, node]]) for node in range(2)]
    assert ids[0] == ids[1], f"the hosts disagree: {ids}"
    assert ids[0][0] != ids[0][1], ids
    if rdzv == "static":  # MASTER_ADDR:MASTER_PORT of the workers: --master-addr and --master-port
        assert ids[0] == [f"master:{pair.ps.addr}:{port}" for port in ports]
    elif rdzv == "c10d-id":
        assert ids[0] == ["torchelastic:job0", "torchelastic:job1"]
    else:  # node 0's agent picks the master port of a round and tells the other nodes
        assert all(i.startswith(f"master:{pair.ps.addr}:") for i in ids[0]), ids
    _finish(pair, tmp_path, agents)


@pytest.mark.bpf
def test_daemons_band_two_torchrun_jobs_alike(make_pair, tmp_path) -> None:
    """`hostctl start --match torchrun` on both hosts: each daemon bands the two jobs (not
    itself, though its command line matches), under the same ids on both hosts; `hostctl
    flows` with the same regex does not list the daemon either."""
    n = uuid.uuid4().int
    pair: Pair = make_pair(net=f"10.{200 + n % 51}.{(n >> 8) % 256}")
    daemons = {host.ns: pair.start(host, HOSTCTL, "start", "--policy", "rr", "--iface", host.dev,
                                   "--link-rate", "1gbit", "--match", "torchrun", "--rescan", "0.3")
               for host in (pair.ps, pair.wk)}
    agents = _launch(pair, tmp_path, "static", (29510, 29610))
    try:
        seen = {}
        for node, host in enumerate((pair.ps, pair.wk)):
            st = wait_for(lambda h=host: (s := _status(h)) and len(s["jobs"]) >= 2
                          and all(j["band"] is not None for j in s["jobs"]) and s, 30, 0.2, "two banded jobs")
            assert len(st["jobs"]) == 2, st["jobs"]
            assert daemons[host.ns].pid not in {p for j in st["jobs"] for p in j["pids"]}
            assert sorted(j["band"] for j in st["jobs"]) == [0, 1]
            seen[node] = st["jobs"]
            flows = _flows(host)
            assert sorted(j["job_id"] for j in flows) == sorted(j["job_id"] for j in st["jobs"]), flows
    finally:
        (tmp_path / "stop").touch()
    ids = [_ids_by_agent(seen[node], [agents[0, node], agents[1, node]]) for node in range(2)]
    assert ids[0] == ids[1] == [f"master:{pair.ps.addr}:{port}" for port in (29510, 29610)]
    _finish(pair, tmp_path, agents)
    for host in (pair.ps, pair.wk):
        assert host.hostctl("stop").returncode == 0
