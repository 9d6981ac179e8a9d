"""The workload programs (hostctl_lab.workloads) as real processes on loopback.

No root: everything runs on 127.0.0.1 with ports picked free by binding port 0.
Every process started here is killed by a finalizer even when a test fails, and
every wait has a timeout, so nothing hangs.
"""

from __future__ import annotations

import json
import math
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from hostctl_lab.workloads.summary import RecordError, load_records, summarize

PY = sys.executable
RUN_TIMEOUT_S = 30
LO = "127.0.0.1"


def free_port() -> int:
    with socket.socket() as s:
        s.bind((LO, 0))
        return s.getsockname()[1]


def free_ports(n: int) -> list[int]:
    """n distinct free ports (held open together while picking, so they differ)."""
    socks = [socket.socket() for _ in range(n)]
    try:
        for s in socks:
            s.bind((LO, 0))
        return [s.getsockname()[1] for s in socks]
    finally:
        for s in socks:
            s.close()


Spawn = Callable[..., subprocess.Popen]


@pytest.fixture
def spawn(request) -> Spawn:
    """spawn("ps", "worker", ...) starts `python -m hostctl_lab.workloads.ps worker ...`; killed at teardown."""
    procs: list[subprocess.Popen] = []

    def fin() -> None:
        for p in procs:
            if p.poll() is None:
                p.kill()
        for p in procs:
            try:
                p.communicate(timeout=5)
            except (subprocess.TimeoutExpired, ValueError):
                pass

    request.addfinalizer(fin)

    def start(module: str, *args: object, env: dict | None = None) -> subprocess.Popen:
        p = subprocess.Popen([PY, "-m", f"hostctl_lab.workloads.{module}", *map(str, args)],
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
        procs.append(p)
        return p

    return start


def finish(p: subprocess.Popen, timeout_s: float = RUN_TIMEOUT_S) -> tuple[int, str, str]:
    out, err = p.communicate(timeout=timeout_s)
    return p.returncode, out, err


def run_cli(module: str, *args: str, env: dict | None = None) -> subprocess.CompletedProcess:
    return subprocess.run([PY, "-m", f"hostctl_lab.workloads.{module}", *args], capture_output=True, text=True,
                          timeout=RUN_TIMEOUT_S, env=env)


def read(path: Path) -> dict:
    return json.loads(path.read_text())


def check_worker_record(rec: dict, kind: str, rank: int, iterations: int, compute_s: float) -> None:
    assert rec["errors"] == []
    assert (rec["kind"], rec["rank"], rec["role"]) == (kind, rank, "worker")
    exits = iterations + 1 if kind == "ps" else iterations
    assert len(rec["iter_end"]) == len(rec["barrier_enter"]) == len(rec["barrier_wait_s"]) == iterations
    assert len(rec["barrier_exit"]) == exits
    assert all(w >= 0 for w in rec["barrier_wait_s"])
    assert rec["t_start"] <= rec["iter_end"][0]
    assert rec["iter_end"] == sorted(rec["iter_end"]) and rec["iter_end"][-1] <= rec["t_end"]
    assert rec["t_end"] - rec["t_start"] >= iterations * compute_s


# ---------------------------------------------------------------- parameter server

def run_ps_job(spawn: Spawn, tmp_path: Path, servers: int, workers: int, iterations: int,
               compute_s: float, model_bytes: int) -> tuple[list[dict], list[dict], float]:
    ports = free_ports(servers)
    base = model_bytes // servers
    shards = [base] * (servers - 1) + [model_bytes - base * (servers - 1)]
    t0 = time.monotonic()
    srv = [spawn("ps", "server", "--bind", LO, "--port", port, "--workers", workers, "--iterations", iterations,
                 "--shard-bytes", shard, "--job", "psj", "--out", tmp_path / f"s{i}.json", "--connect-timeout", 20)
           for i, (port, shard) in enumerate(zip(ports, shards))]
    ps_arg = ",".join(f"{LO}:{p}" for p in ports)
    wk = [spawn("ps", "worker", "--job", "psj", "--rank", k, "--ps", ps_arg, "--iterations", iterations,
                "--compute", compute_s, "--model-bytes", model_bytes, "--out", tmp_path / f"w{k}.json",
                "--connect-timeout", 20)
          for k in range(workers)]
    for p in wk + srv:
        rc, _, err = finish(p)
        assert rc == 0, err
    return ([read(tmp_path / f"w{k}.json") for k in range(workers)],
            [read(tmp_path / f"s{i}.json") for i in range(servers)], t0)


@pytest.mark.parametrize("servers,workers", [(1, 3), (2, 2)])
def test_ps_job(spawn, tmp_path, servers, workers):
    iterations, compute_s, model_bytes = 4, 0.05, 300_001
    recs, srecs, t0 = run_ps_job(spawn, tmp_path, servers, workers, iterations, compute_s, model_bytes)
    for k, rec in enumerate(recs):
        check_worker_record(rec, "ps", k, iterations, compute_s)
        assert rec["bytes_sent"] == iterations * model_bytes
        assert rec["bytes_received"] == iterations * model_bytes + 16 * servers * (iterations + 1)
        assert rec["iter_end"] == rec["barrier_exit"][1:]
        for i in range(iterations):
            assert rec["barrier_wait_s"][i] == pytest.approx(rec["barrier_exit"][i + 1] - rec["barrier_enter"][i])
    for srec in srecs:
        shard = srec["shard_bytes"]
        assert srec["errors"] == [] and srec["role"] == "server"
        assert srec["bytes_sent"] == workers * (iterations * shard + 16 * (iterations + 1))
        assert srec["bytes_received"] == workers * iterations * shard
    job = summarize(recs + srecs)  # server records are ignored
    assert (job["job"], job["kind"], job["workers"], job["iterations"]) == ("psj", "ps", workers, iterations)
    assert job["errors"] == []
    assert job["jct_s"] >= iterations * compute_s
    assert summarize(recs, t0)["jct_s"] >= job["jct_s"]
    assert len(job["iteration_s"]) == iterations and all(x > 0 for x in job["iteration_s"])
    assert sum(job["iteration_s"]) <= job["jct_s"] + 1e-9
    assert len(job["barrier_wait_s"]) == iterations * workers
    assert min(job["barrier_wait_s"]) >= 0


def test_ps_worker_whose_server_dies_writes_errors(spawn, tmp_path):
    port = free_port()
    srv = spawn("ps", "server", "--bind", LO, "--port", port, "--workers", 1, "--iterations", 1000,
                "--shard-bytes", 10_000)
    out = tmp_path / "w.json"
    wk = spawn("ps", "worker", "--job", "dies", "--rank", 0, "--ps", f"{LO}:{port}", "--iterations", 1000,
               "--compute", 0.02, "--model-bytes", 10_000, "--out", out, "--connect-timeout", 3)
    time.sleep(1.0)
    srv.kill()
    rc, _, err = finish(wk)
    assert rc == 1, err
    rec = read(out)
    assert rec["errors"], rec
    assert "Traceback" not in err and err.strip()
    assert rec["t_end"] >= rec["t_start"]
    job = summarize([rec])
    assert job["errors"] and job["errors"][0].startswith("rank 0: ")


def test_ps_worker_sigterm_writes_record(spawn, tmp_path):
    port = free_port()
    srv = spawn("ps", "server", "--bind", LO, "--port", port, "--workers", 1, "--iterations", 1000,
                "--shard-bytes", 1000)
    out = tmp_path / "w.json"
    wk = spawn("ps", "worker", "--job", "term", "--rank", 0, "--ps", f"{LO}:{port}", "--iterations", 1000,
               "--compute", 0.02, "--model-bytes", 1000, "--out", out, "--connect-timeout", 10)
    time.sleep(1.0)
    wk.send_signal(signal.SIGTERM)
    rc, _, err = finish(wk)
    assert rc == 128 + signal.SIGTERM, err
    assert "Traceback" not in err
    rec = read(out)
    assert rec["errors"] == ["terminated by SIGTERM"]
    assert len(rec["iter_end"]) >= 1  # it had been running
    rc, _, err = finish(srv)  # the server loses its worker: error, no hang
    assert rc == 1 and "Traceback" not in err


# ---------------------------------------------------------------- ring all-reduce

def run_ring(spawn: Spawn, tmp_path: Path, world: int, iterations: int, compute_s: float,
             model_bytes: int) -> list[dict]:
    ports = free_ports(world)
    procs = [spawn("allreduce", "worker", "--job", "ring", "--rank", k, "--world", world, "--bind", LO,
                   "--port", ports[k], "--prev", f"{LO}:{ports[(k - 1) % world]}", "--iterations", iterations,
                   "--compute", compute_s, "--model-bytes", model_bytes, "--out", tmp_path / f"r{k}.json",
                   "--connect-timeout", 20)
             for k in range(world)]
    for p in procs:
        rc, _, err = finish(p)
        assert rc == 0, err
    return [read(tmp_path / f"r{k}.json") for k in range(world)]


@pytest.mark.parametrize("world", [3, 1])
def test_allreduce_job(spawn, tmp_path, world):
    iterations, compute_s, model_bytes = 4, 0.05, 100_000
    recs = run_ring(spawn, tmp_path, world, iterations, compute_s, model_bytes)
    expect = iterations * 2 * (world - 1) * math.ceil(model_bytes / world)
    for k, rec in enumerate(recs):
        check_worker_record(rec, "allreduce", k, iterations, compute_s)
        assert rec["bytes_sent"] == rec["bytes_received"] == expect
        assert rec["iter_end"] == rec["barrier_exit"]
    job = summarize(recs)
    assert (job["workers"], job["iterations"], job["errors"]) == (world, iterations, [])
    assert job["jct_s"] >= iterations * compute_s


# ---------------------------------------------------------------- PyTorch

def test_torch_job_world_2(spawn, tmp_path):
    pytest.importorskip("torch", reason="torch is not installed (pip install './lab[torch]')")
    port = free_port()
    iterations, compute_s = 3, 0.02
    procs = [spawn("torchjob", "--job", "tj", "--rank", k, "--world", 2, "--master", f"{LO}:{port}",
                   "--iface", "lo", "--model-bytes", 400_000, "--compute", compute_s, "--iterations", iterations,
                   "--out", tmp_path / f"t{k}.json", "--connect-timeout", 20)
             for k in range(2)]
    for p in procs:
        rc, _, err = finish(p, 60)
        assert rc == 0, err
    recs = [read(tmp_path / f"t{k}.json") for k in range(2)]
    for k, rec in enumerate(recs):
        check_worker_record(rec, "torch", k, iterations, compute_s)
        assert rec["bytes_sent"] is None
    assert summarize(recs)["iterations"] == iterations


def test_torchjob_without_torch_says_how_to_install(tmp_path):
    fake = tmp_path / "torch"
    fake.mkdir()
    (fake / "__init__.py").write_text("raise ImportError('no torch here')\n")
    env = {**os.environ, "PYTHONPATH": str(tmp_path)}
    r = run_cli("torchjob", "--job", "x", "--rank", "0", "--world", "1", "--master", f"{LO}:1", "--iface", "lo",
                "--model-bytes", "4", "--compute", "0", "--iterations", "1", "--out", str(tmp_path / "x.json"),
                env=env)
    assert r.returncode == 2
    assert r.stderr == "torch is not installed: pip install './lab[torch]' (torch==2.13.0, CPU build)\n"


# ---------------------------------------------------------------- bad arguments

BAD_ARGS = [
    ("ps", []),
    ("ps", ["worker", "--job", "j", "--rank", "x", "--ps", "127.0.0.1:9000", "--iterations", "1",
            "--compute", "0", "--model-bytes", "10", "--out", "-"]),
    ("ps", ["worker", "--job", "j", "--rank", "0", "--ps", "nonsense", "--iterations", "1",
            "--compute", "0", "--model-bytes", "10", "--out", "-"]),
    ("ps", ["worker", "--job", "j", "--rank", "0", "--ps", "127.0.0.1:9000", "--iterations", "1",
            "--compute", "-1", "--model-bytes", "10", "--out", "-"]),
    ("ps", ["worker", "--job", "j", "--rank", "0", "--ps", "127.0.0.1:9000", "--iterations", "1",
            "--compute", "0", "--model-bytes", "10", "--out", "/nonexistent/dir/w.json"]),
    ("ps", ["server", "--bind", "127.0.0.1", "--port", "70000", "--workers", "1", "--iterations", "1",
            "--shard-bytes", "1"]),
    ("allreduce", ["worker", "--job", "j", "--rank", "0", "--world", "3", "--bind", "127.0.0.1", "--port", "9000",
                   "--iterations", "1", "--compute", "0", "--model-bytes", "10", "--out", "-"]),
    ("allreduce", ["worker", "--job", "j", "--rank", "3", "--world", "3", "--bind", "127.0.0.1", "--port", "9000",
                   "--prev", "127.0.0.1:9001", "--iterations", "1", "--compute", "0", "--model-bytes", "10",
                   "--out", "-"]),
    ("torchjob", ["--job", "j", "--rank", "0", "--world", "2", "--master", "127.0.0.1:9000",
                  "--iface", "nosuchif0", "--model-bytes", "4", "--compute", "0", "--iterations", "1", "--out", "-"]),
    ("summary", []),
]


@pytest.mark.parametrize("module,args", BAD_ARGS, ids=[f"{m}-{i}" for i, (m, _) in enumerate(BAD_ARGS)])
def test_bad_arguments_one_line(module, args):
    r = run_cli(module, *args)
    assert r.returncode == 2, r.stderr
    assert "Traceback" not in r.stderr
    assert r.stderr.count("\n") == 1 and r.stderr.startswith(f"hostctl_lab.workloads.{module}"), r.stderr
    assert ": error: " in r.stderr
    assert r.stdout == ""


def test_connect_timeout_is_an_error_record(tmp_path):
    out = tmp_path / "w.json"
    r = run_cli("ps", "worker", "--job", "j", "--rank", "0", "--ps", f"{LO}:{free_port()}", "--iterations", "1",
                "--compute", "0", "--model-bytes", "10", "--out", str(out), "--connect-timeout", "0.5")
    assert r.returncode == 1 and "Traceback" not in r.stderr
    assert "could not connect" in read(out)["errors"][0]


# ---------------------------------------------------------------- summarize

def rec(rank: int, t_start: float, t_end: float, iter_end: list[float], enter: list[float],
        exit_: list[float], kind: str = "allreduce", **extra) -> dict:
    return {"job": "j", "kind": kind, "role": "worker", "rank": rank, "t_start": t_start, "t_end": t_end,
            "iter_end": iter_end, "barrier_enter": enter, "barrier_exit": exit_, "bytes_sent": 0,
            "bytes_received": 0, "errors": [], **extra}


TWO = [rec(0, 10.0, 13.0, [11.0, 12.5], [10.5, 12.0], [11.0, 12.5]),   # waits 0.5, 0.5
       rec(1, 10.2, 13.5, [11.2, 12.4], [10.7, 11.4], [11.2, 12.4])]   # waits 0.5, 1.0


def test_summarize_known_answers():
    job = summarize(TWO)
    assert (job["job"], job["kind"], job["workers"], job["iterations"]) == ("j", "allreduce", 2, 2)
    assert job["jct_s"] == pytest.approx(3.5)
    assert job["iteration_s"] == pytest.approx([1.2, 1.3])
    assert job["barrier_wait_mean_s"] == pytest.approx([0.5, 0.75])
    assert job["barrier_wait_std_s"] == pytest.approx([0.0, 0.25])
    assert job["barrier_wait_s"] == pytest.approx([0.5, 0.5, 0.5, 1.0])
    assert job["barrier_wait_mean_all_s"] == pytest.approx(0.625)
    assert job["barrier_wait_std_mean_s"] == pytest.approx(0.125)
    assert job["errors"] == []


def test_summarize_with_t0():
    job = summarize(TWO, t0=9.0)
    assert job["jct_s"] == pytest.approx(4.5)
    assert job["iteration_s"] == pytest.approx([2.2, 1.3])


def test_summarize_ps_barriers_are_shifted():
    # ps: barrier_exit[0] is the start, wait i = exit[i+1] - enter[i]
    r = rec(0, 0.0, 4.0, [2.0, 4.0], [1.0, 3.0], [0.5, 2.0, 4.0], kind="ps")
    job = summarize([r])
    assert job["barrier_wait_s"] == pytest.approx([1.0, 1.0])
    assert job["iteration_s"] == pytest.approx([2.0, 2.0])
    # an explicit barrier_wait_s in the record wins
    job = summarize([{**r, "barrier_wait_s": [0.25, 0.75]}])
    assert job["barrier_wait_mean_s"] == pytest.approx([0.25, 0.75])


def test_summarize_partial_worker_and_errors():
    failed = rec(1, 10.2, 11.5, [11.2], [10.7], [11.2], errors=["ConnectionError: peer closed"])
    server = {"job": "j", "kind": "allreduce", "role": "server", "errors": ["ignored"]}
    job = summarize([TWO[0], failed, server])
    assert job["workers"] == 2 and job["iterations"] == 1
    assert job["errors"] == ["rank 1: ConnectionError: peer closed"]
    assert job["barrier_wait_mean_s"] == pytest.approx([0.5])


def test_summarize_rejects_mixed_or_empty():
    with pytest.raises(ValueError, match="several jobs"):
        summarize([TWO[0], {**TWO[1], "job": "other"}])
    with pytest.raises(ValueError, match="no worker records"):
        summarize([])


def test_load_records_names_the_bad_file(tmp_path):
    good = tmp_path / "good.json"
    good.write_text(json.dumps(TWO[0]))
    broken = tmp_path / "broken.json"
    broken.write_text('{"job": ')
    assert load_records([str(good)]) == [TWO[0]]
    with pytest.raises(RecordError, match="missing.json: no such record file"):
        load_records([str(good), str(tmp_path / "missing.json")])
    with pytest.raises(RecordError, match="broken.json: not a JSON record"):
        load_records([str(broken)])
    r = run_cli("summary", str(good), str(tmp_path / "missing.json"))
    assert r.returncode == 1 and r.stderr.count("\n") == 1 and "missing.json" in r.stderr
    r = run_cli("summary", str(good))
    assert r.returncode == 0 and json.loads(r.stdout)["jct_s"] == pytest.approx(3.0)
