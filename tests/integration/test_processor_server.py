"""The emulated host processor's server (hostctl_lab.workloads.processor) as a real process on its
abstract unix socket, and workers' compute steps on it. No root: the socket lives in the test's
own network namespace, under a unique name."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import threading
import time
import uuid

import pytest

from hostctl_lab.workloads.compute import Compute, ComputeError
from hostctl_lab.workloads.processor import REQUEST, ProcessorClient, address

PY = sys.executable



@pytest.fixture
def processor(request):
    """A processor server with a unique name on this namespace's abstract socket; killed at teardown."""
    procs: list[subprocess.Popen] = []

    def start(cores: float = 1.0) -> str:
        name = f"t{uuid.uuid4().hex[:12]}"
        p = subprocess.Popen([PY, "-m", "hostctl_lab.workloads.processor", "--name", name, "--cores", str(cores)],
                             stderr=subprocess.PIPE, text=True)
        procs.append(p)
        ProcessorClient(name, timeout_s=10).close()  # wait until it listens
        return name

    yield start
    for p in procs:
        p.terminate()
        try:
            p.wait(5)
        except subprocess.TimeoutExpired:
            p.kill()
            p.wait(5)
        assert p.returncode == 0, p.stderr.read()


def test_server_shares_its_core_between_two_workers(processor):
    name = processor(1.0)
    alone = Compute(name)
    wall_alone = alone.run(0.2)
    walls: list[float] = []

    def one() -> None:
        c = Compute(name)
        walls.append(c.run(0.2))
        c.close()

    ts = [threading.Thread(target=one) for _ in range(2)]
    for t in ts:
        t.start()
    for t in ts:
        t.join(10)
    alone.close()
    assert 0.19 <= wall_alone < 0.3
    assert len(walls) == 2 and all(0.38 <= w < 0.55 for w in walls), walls


def test_steps_in_pieces_add_up(processor):
    """The backward pass asks for its compute in pieces (one per gradient bucket)."""
    c = Compute(processor(1.0))
    c.begin()
    for s in (0.05, 0.1, 0.15, 0.2):
        c.until(s)
    assert 0.19 <= time.monotonic() - c.t0 < 0.3
    c.close()


def test_server_survives_bad_clients(processor):
    name = processor(1.0)
    for junk in (b"XXXX" + bytes(8), REQUEST.pack(b"HCPU", float("nan")), REQUEST.pack(b"HCPU", -1.0),
                 REQUEST.pack(b"HCPU", 0.5) + REQUEST.pack(b"HCPU", 0.5)):
        s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        s.settimeout(5)
        s.connect(address(name))
        s.sendall(junk)
        assert s.recv(64) == b""  # closed by the server
        s.close()
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    s.connect(address(name))
    s.sendall(REQUEST.pack(b"HCPU", 5.0))
    s.close()  # a worker that dies mid-step
    c = Compute(name)
    assert c.run(0.05) < 0.2  # the dead worker's step no longer takes a share
    c.close()


def test_a_zero_step_returns_at_once(processor):
    c = Compute(processor(1.0))
    assert c.run(0.0) < 0.05
    c.close()


def test_missing_processor_is_a_clear_error():
    with pytest.raises(ComputeError, match="no processor 'nothere-.*' in this network namespace.*start"):
        Compute(f"nothere-{uuid.uuid4().hex[:8]}", timeout_s=0.2)


def test_worker_with_missing_processor_exits_2_with_one_line(tmp_path):
    r = subprocess.run([PY, "-m", "hostctl_lab.workloads.ps", "worker", "--job", "j", "--rank", "0", "--ps",
                        "127.0.0.1:9", "--iterations", "1", "--compute", "0.01", "--model-bytes", "10", "--out",
                        str(tmp_path / "w.json"), "--compute-processor", f"nothere-{uuid.uuid4().hex[:8]}",
                        "--connect-timeout", "0.3"], capture_output=True, text=True, timeout=30,
                       env={**os.environ, "PYTHONPATH": os.getcwd()})
    assert r.returncode == 2
    assert "--compute-processor" in r.stderr and "Traceback" not in r.stderr


def test_idle_exit_and_name_taken():
    name = f"t{uuid.uuid4().hex[:12]}"
    p = subprocess.Popen([PY, "-m", "hostctl_lab.workloads.processor", "--name", name, "--idle-exit", "0.3"],
                         stderr=subprocess.PIPE, text=True)
    try:
        c = ProcessorClient(name, timeout_s=10)  # held open: the server is not idle meanwhile
        # a second processor of the same name in this namespace says so and exits 1
        r = subprocess.run([PY, "-m", "hostctl_lab.workloads.processor", "--name", name], capture_output=True,
                           text=True, timeout=30)
        assert r.returncode == 1 and "is another processor named" in r.stderr
        assert p.poll() is None
        c.close()
        assert p.wait(10) == 0  # no connection for 0.3 s: it exits by itself
    finally:
        if p.poll() is None:
            p.kill()
            p.wait(5)


@pytest.mark.parametrize("args, msg", [(["--cores", "0"], "must be a positive number"),
                                       (["--cores", "nan"], "must be a positive number"),
                                       (["--cores", "x"], "invalid float value")])
def test_bad_flags_one_line(args, msg):
    r = subprocess.run([PY, "-m", "hostctl_lab.workloads.processor", *args], capture_output=True, text=True, timeout=30)
    assert r.returncode == 2 and msg in r.stderr and "Traceback" not in r.stderr
