"""Discovery against real processes and sockets (loopback only, no root needed:
the processes are our own, so psutil sees their sockets' owners)."""

from __future__ import annotations

import json
import os
import re
import socket
import subprocess
import sys
import textwrap
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass

import psutil
import pytest

from hostctl import discovery
from hostctl.core.grouping import LAUNCHER_ENV_KEYS
from hostctl.core.types import FlowKey, JobSpec, SockInfo
from hostctl.discovery import Discovery, parse_proc_net_tcp, read_proc_sockets, take_snapshot

SERVER = textwrap.dedent("""
    import socket, sys, time
    host = sys.argv[1]
    srv = socket.socket(socket.AF_INET6 if ":" in host else socket.AF_INET)
    srv.bind((host, 0))
    srv.listen(8)
    print(srv.getsockname()[1], flush=True)
    conn, peer = srv.accept()
    print(peer[1], flush=True)
    time.sleep(120)
""")

CLIENT = textwrap.dedent("""
    import socket, sys, time
    host, port = sys.argv[1], int(sys.argv[2])
    c = socket.create_connection((host, port))
    print(c.getsockname()[1], flush=True)
    time.sleep(120)
""")


def _clean_env() -> dict[str, str]:
    """Our env without launcher keys, so ids do not depend on the CI environment."""
    return {k: v for k, v in os.environ.items() if k not in LAUNCHER_ENV_KEYS}


def _spawn(script: str, *args: str) -> subprocess.Popen[str]:
    return subprocess.Popen([sys.executable, "-c", script, *args], stdout=subprocess.PIPE, text=True,
                            env=_clean_env())


def _readline(p: subprocess.Popen[str]) -> str:
    assert p.stdout is not None
    line = p.stdout.readline().strip()
    if not line:
        raise RuntimeError(f"helper process {p.pid} exited early (rc={p.poll()})")
    return line


def _stop(p: subprocess.Popen[str]) -> None:
    if p.poll() is None:
        p.kill()
    p.wait(timeout=10)
    if p.stdout is not None:
        p.stdout.close()


@dataclass
class Pair:
    host: str
    server: subprocess.Popen[str]
    client: subprocess.Popen[str]
    port: int  # server listening port
    cport: int  # client local (ephemeral) port
    server_marker: str
    client_marker: str

    @property
    def server_flow(self) -> FlowKey:
        return FlowKey(self.host, self.port, self.host, self.cport)

    @property
    def client_flow(self) -> FlowKey:
        return FlowKey(self.host, self.cport, self.host, self.port)


def _start_pair(host: str) -> Iterator[Pair]:
    tag = uuid.uuid4().hex
    smark, cmark = f"--hostctl-test-marker-srv-{tag}", f"--hostctl-test-marker-cli-{tag}"
    server = _spawn(SERVER, host, smark)
    client = None
    try:
        port = int(_readline(server))
        client = _spawn(CLIENT, host, str(port), cmark)
        cport = int(_readline(client))
        assert int(_readline(server)) == cport  # accepted: the server side has an fd too
        yield Pair(host, server, client, port, cport, smark, cmark)
    finally:
        if client is not None:
            _stop(client)
        _stop(server)


@pytest.fixture
def pair() -> Iterator[Pair]:
    yield from _start_pair("127.0.0.1")


def _has_ipv6_loopback() -> bool:
    try:
        with socket.socket(socket.AF_INET6) as s:
            s.bind(("::1", 0))
        return True
    except OSError:
        return False


# --------------------------------------------------------------------------


def test_ports_spec_finds_one_job_with_the_flow(pair: Pair) -> None:
    d = Discovery([JobSpec(ports=(pair.port,))])
    assert d.port_only
    jobs = d.scan()
    assert len(jobs) == 1
    j = jobs[0]
    assert j.job_id == f"ps:127.0.0.1:{pair.port}"
    assert j.listen_ports == (pair.port,)
    assert j.flows == (pair.server_flow,)
    assert j.role == "server"
    assert j.pids == ()  # fast path: no owners


def test_ports_spec_with_iface_id_uses_listen_addr(pair: Pair) -> None:
    jobs = Discovery([JobSpec(name="ps", ports=(pair.port,))], iface="lo").scan()
    assert [j.job_id for j in jobs] == ["ps"]


def test_pids_spec_finds_client_job(pair: Pair) -> None:
    d = Discovery([JobSpec(pids=(pair.client.pid,))])
    assert not d.port_only
    jobs = d.scan()
    assert len(jobs) == 1
    j = jobs[0]
    assert j.job_id == f"pid:{pair.client.pid}"
    assert j.role == "client"
    assert j.pids == (pair.client.pid,)
    assert j.listen_ports == ()
    assert j.flows == (pair.client_flow,)


def test_pids_spec_server_job(pair: Pair) -> None:
    jobs = Discovery([JobSpec(pids=(pair.server.pid,))]).scan()
    assert len(jobs) == 1
    assert jobs[0].job_id == f"ps:127.0.0.1:{pair.port}"
    assert jobs[0].role == "server"
    assert jobs[0].flows == (pair.server_flow,)


def test_match_spec_finds_marked_processes(pair: Pair) -> None:
    jobs = Discovery([JobSpec(match=re.escape(pair.client_marker))]).scan()
    assert len(jobs) == 1
    assert jobs[0].job_id == f"pid:{pair.client.pid}"
    assert jobs[0].source == "match"
    assert jobs[0].role == "client"
    assert jobs[0].flows == (pair.client_flow,)

    tag = pair.client_marker.rsplit("-", 1)[1]
    jobs = Discovery([JobSpec(match=f"hostctl-test-marker-(srv|cli)-{tag}", model_bytes=1000)]).scan()
    by_id = {j.job_id: j for j in jobs}
    assert set(by_id) == {f"pid:{pair.client.pid}", f"ps:127.0.0.1:{pair.port}"}
    server_job = by_id[f"ps:127.0.0.1:{pair.port}"]
    assert server_job.pids == (pair.server.pid,)
    assert server_job.listen_ports == (pair.port,)
    assert server_job.role == "server"
    assert all(j.model_bytes == 1000 for j in jobs)


def test_match_spec_uses_launcher_env() -> None:
    tag = uuid.uuid4().hex
    marker = f"--hostctl-test-marker-env-{tag}"
    env = {**_clean_env(), "TORCHELASTIC_RUN_ID": f"run-{tag}", "UNRELATED": "x"}
    p = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(120)", marker], env=env)
    try:
        deadline = time.monotonic() + 10
        while marker not in " ".join(psutil.Process(p.pid).cmdline()) and time.monotonic() < deadline:
            time.sleep(0.01)
        d = Discovery([JobSpec(match=re.escape(marker))])
        assert [j.job_id for j in d.scan()] == [f"torchelastic:run-{tag}"]
        proc = next(x for x in d.snapshot().procs if x.pid == p.pid)
        assert proc.env == {"TORCHELASTIC_RUN_ID": f"run-{tag}"}  # only launcher keys are kept
    finally:
        p.kill()
        p.wait(timeout=10)


def test_mixed_specs_use_full_snapshot(pair: Pair) -> None:
    d = Discovery([JobSpec(ports=(pair.port,)), JobSpec(pids=(pair.client.pid,))])
    assert not d.port_only
    by_id = {j.job_id: j for j in d.scan()}
    assert set(by_id) == {f"ps:127.0.0.1:{pair.port}", f"pid:{pair.client.pid}"}
    assert by_id[f"ps:127.0.0.1:{pair.port}"].pids == (pair.server.pid,)  # owners known now


def test_proc_parsing_matches_psutil(pair: Pair) -> None:
    mine = {s for s in read_proc_sockets() if pair.port in (s.lport, s.rport)}
    assert mine == {
        SockInfo("LISTEN", "127.0.0.1", pair.port),
        SockInfo("ESTABLISHED", "127.0.0.1", pair.port, "127.0.0.1", pair.cport),
        SockInfo("ESTABLISHED", "127.0.0.1", pair.cport, "127.0.0.1", pair.port),
    }
    conns = [c for c in psutil.net_connections(kind="tcp") if c.laddr and c.laddr.port == pair.port
             and c.status == psutil.CONN_LISTEN]
    assert len(conns) == 1
    assert (conns[0].laddr.ip, conns[0].laddr.port) == ("127.0.0.1", pair.port)
    assert conns[0].pid == pair.server.pid
    # and the full snapshot agrees, with owners
    snap = take_snapshot(pids_of_interest=set(), iface=None)
    full = {s for s in snap.socks if pair.port in (s.lport, s.rport)}
    assert {SockInfo(s.state, s.laddr, s.lport, s.raddr, s.rport) for s in full} == mine
    assert {(s.state, s.lport, s.pid) for s in full} == {
        ("LISTEN", pair.port, pair.server.pid),
        ("ESTABLISHED", pair.port, pair.server.pid),
        ("ESTABLISHED", pair.cport, pair.client.pid),
    }


def test_proc_parsing_ipv6_loopback() -> None:
    if not _has_ipv6_loopback():
        pytest.skip("no IPv6 loopback in this namespace")
    for p in _start_pair("::1"):
        mine = {s for s in read_proc_sockets() if p.port in (s.lport, s.rport)}
        assert SockInfo("LISTEN", "::1", p.port) in mine
        assert SockInfo("ESTABLISHED", "::1", p.cport, "::1", p.port) in mine
        jobs = Discovery([JobSpec(ports=(p.port,))]).scan()
        assert [j.job_id for j in jobs] == [f"ps:[::1]:{p.port}"]
        assert jobs[0].flows == (FlowKey("::1", p.port, "::1", p.cport),)


def test_parse_proc_net_tcp_sample() -> None:
    if sys.byteorder != "little":
        pytest.skip("sample is in little-endian /proc format")
    v4 = textwrap.dedent("""\
          sl  local_address rem_address   st tx_queue rx_queue tr tm->when retrnsmt   uid  timeout inode
           0: 0100007F:2328 00000000:0000 0A 00000000:00000000 00:00000000 00000000     0        0 1 1
           1: 0100007F:2328 0100007F:C350 01 00000000:00000000 00:00000000 00000000     0        0 2 1
           2: 0500000A:C351 0900000A:2328 06 00000000:00000000 00:00000000 00000000     0        0 0 1
           3: 0500000A:C352 0900000A:2328 01 00000000:00000000 00:00000000 00000000     0        0 3 1
        """)
    assert parse_proc_net_tcp(v4) == [
        SockInfo("LISTEN", "127.0.0.1", 9000),
        SockInfo("ESTABLISHED", "127.0.0.1", 9000, "127.0.0.1", 50000),
        SockInfo("ESTABLISHED", "10.0.0.5", 50002, "10.0.0.9", 9000),
    ]
    v6 = textwrap.dedent("""\
          sl  local_address                         remote_address                        st
           0: 00000000000000000000000001000000:2328 00000000000000000000000000000000:0000 0A 0 0 0
           1: 0000000000000000FFFF00000100007F:2328 0000000000000000FFFF00000500000A:C350 01 0 0 0
           2: 000000FD000000000000000001000000:2328 00000000000000000000000000000000:0000 0A 0 0 0
        """)
    assert parse_proc_net_tcp(v6) == [
        SockInfo("LISTEN", "::1", 9000),
        SockInfo("ESTABLISHED", "127.0.0.1", 9000, "10.0.0.5", 50000),  # v4-mapped -> IPv4
        SockInfo("LISTEN", "fd00::1", 9000),
    ]


# --------------------------------------------------------------------------
# robustness: vanishing processes


def test_scan_survives_processes_vanishing_live() -> None:
    """A shell forking short-lived children as fast as it can while we scan."""
    marker = f"--hostctl-test-marker-churn-{uuid.uuid4().hex}"
    churn = subprocess.Popen(["/bin/sh", "-c", "while :; do /bin/true; done", "sh", marker])
    try:
        d = Discovery([JobSpec(match=re.escape(marker)), JobSpec(pids=(churn.pid,))])
        seen = set()
        for _ in range(30):
            for j in d.scan():
                seen.add(j.job_id)
        assert f"pid:{churn.pid}" in seen
    finally:
        churn.kill()
        churn.wait(timeout=10)


def test_scan_survives_psutil_errors(pair: Pair, monkeypatch: pytest.MonkeyPatch) -> None:
    def gone(self: psutil.Process) -> dict[str, str]:
        raise psutil.NoSuchProcess(self.pid)

    def flaky(kind: str = "inet") -> list[object]:
        raise FileNotFoundError("/proc/123/fd")

    monkeypatch.setattr(psutil.Process, "environ", gone)
    monkeypatch.setattr(psutil, "net_connections", flaky)
    monkeypatch.setattr(discovery, "_diag_sockets", lambda *a, **kw: None)  # no sock_diag: psutil's path
    jobs = Discovery([JobSpec(ports=(pair.port,)), JobSpec(match=re.escape(pair.client_marker))]).scan()
    # owners are unknown after the fallback to /proc, but the port job is still found
    assert f"ps:127.0.0.1:{pair.port}" in {j.job_id for j in jobs}
    assert f"pid:{pair.client.pid}" in {j.job_id for j in jobs}


def test_fds_that_vanish_or_deny_leave_their_sockets_ownerless(pair: Pair, monkeypatch: pytest.MonkeyPatch) -> None:
    real = os.readlink

    def flaky(path: str) -> str:
        if path.startswith(f"/proc/{pair.client.pid}/fd/"):
            raise PermissionError(path)  # or FileNotFoundError: the fd was closed meanwhile
        return real(path)

    monkeypatch.setattr(os, "readlink", flaky)
    socks = {(s.state, s.lport, s.pid) for s in discovery.owned_sockets([pair.server.pid, pair.client.pid])
             if pair.port in (s.lport, s.rport)}
    assert socks == {("LISTEN", pair.port, pair.server.pid), ("ESTABLISHED", pair.port, pair.server.pid),
                     ("ESTABLISHED", pair.cport, None)}


def test_owned_sockets_keeps_only_the_wanted_connections(pair: Pair) -> None:
    """keep_pids (what a pid or match job needs): the established sockets those pids hold, and
    those on keep_ports; every listener. Another process's connection is not decoded at all."""
    pids = [pair.server.pid, pair.client.pid]

    def mine(**kw) -> set[tuple[str, int, int | None]]:
        return {(s.state, s.lport, s.pid) for s in discovery.owned_sockets(pids, **kw)
                if pair.port in (s.lport, s.rport)}

    everything = {("LISTEN", pair.port, pair.server.pid), ("ESTABLISHED", pair.port, pair.server.pid),
                  ("ESTABLISHED", pair.cport, pair.client.pid)}
    assert mine() == everything
    assert mine(keep_pids={pair.client.pid}) == everything - {("ESTABLISHED", pair.port, pair.server.pid)}
    assert mine(keep_pids={pair.client.pid}, keep_ports=frozenset({pair.port})) == everything
    assert mine(keep_pids=set()) == {("LISTEN", pair.port, pair.server.pid)}


def test_read_proc_agrees_with_psutil(pair: Pair, tmp_path) -> None:
    odd = tmp_path / "sl) eep (x"  # a comm with ")" and spaces: the stat line must be split after the last ")"
    odd.symlink_to("/bin/sleep")
    p = subprocess.Popen([str(odd), "30"])
    try:
        wait = time.monotonic() + 5
        # until the exec is done: the new comm is set before the new command line is readable
        while psutil.Process(p.pid).cmdline() != [str(odd), "30"] and time.monotonic() < wait:
            time.sleep(0.01)
        for pid in (p.pid, pair.server.pid, pair.client.pid, os.getpid()):
            mine, ref = discovery._read_proc(pid), psutil.Process(pid)
            assert mine is not None and (mine.ppid, mine.cmdline) == (ref.ppid(), " ".join(ref.cmdline())), pid
        assert discovery._read_proc(p.pid).ppid == os.getpid()
    finally:
        p.kill()
        p.wait(timeout=10)
    assert discovery._read_proc(p.pid) is None  # reaped: gone


def test_owners_only_among_the_pids_asked(pair: Pair) -> None:
    """A match spec's scan walks the fds of the processes it selects, not of every process."""
    socks = {(s.state, s.lport, s.pid) for s in discovery.owned_sockets([pair.client.pid])
             if pair.port in (s.lport, s.rport)}
    assert socks == {("LISTEN", pair.port, None), ("ESTABLISHED", pair.port, None),
                     ("ESTABLISHED", pair.cport, pair.client.pid)}
    d = Discovery([JobSpec(match=re.escape(pair.client_marker))])
    (job,) = d.scan()
    assert job.pids == (pair.client.pid,) and job.flows == (FlowKey("127.0.0.1", pair.cport, "127.0.0.1", pair.port),)


def test_take_snapshot_env_only_where_asked(pair: Pair, monkeypatch: pytest.MonkeyPatch) -> None:
    calls: list[int] = []
    real = psutil.Process.environ

    def counting(self: psutil.Process) -> dict[str, str]:
        calls.append(self.pid)
        return real(self)

    monkeypatch.setattr(psutil.Process, "environ", counting)
    take_snapshot(pids_of_interest={pair.client.pid})
    assert calls == [pair.client.pid]
    calls.clear()
    take_snapshot(want_env=False)
    assert calls == []
    Discovery([JobSpec(pids=(pair.client.pid,))]).scan()
    assert calls == [pair.client.pid]


def test_host_addr_of_lo() -> None:
    assert discovery.host_addr_of("lo") == "127.0.0.1"
    assert discovery.host_addr_of("no-such-iface0") == ""
    assert discovery.host_addr_of(None) == ""


# --------------------------------------------------------------------------
# hostctl is never a job

HOSTCTL = os.path.join(sys.prefix, "bin", "hostctl")


def _flows_json(argv: list[str]) -> list[dict]:
    r = subprocess.run(argv, capture_output=True, text=True, timeout=60, env=_clean_env())
    assert r.returncode == 0, r.stderr
    return json.loads(r.stdout)


@pytest.mark.parametrize("wrap", ["direct", "sh", "timeout"])
def test_flows_does_not_list_itself(wrap: str) -> None:
    """`hostctl flows --match R` where R matches its own command line (and that of a wrapper
    that stays its parent: `sh -c '...; true'`, `timeout`) lists no job."""
    marker = f"hostctl-self-{uuid.uuid4().hex}"
    argv = [HOSTCTL, "flows", "--match", marker, "--json"]
    if wrap == "sh":
        argv = ["sh", "-c", " ".join(argv) + "; true"]
    elif wrap == "timeout":
        argv = ["timeout", "60", *argv]
    assert _flows_json(argv) == []


def test_flows_lists_a_job_whose_path_holds_hostctl(tmp_path) -> None:
    """A training script under a `hostctl` folder, with `hostctl` among its arguments, is a job."""
    marker = f"hostctl-train-{uuid.uuid4().hex}"
    script = tmp_path / "hostctl" / f"{marker}.py"
    script.parent.mkdir()
    script.write_text("import time\ntime.sleep(120)\n")
    p = subprocess.Popen([sys.executable, str(script), "--name", "hostctl", "--out", str(tmp_path / "hostctl")],
                         env=_clean_env())
    try:
        deadline = time.monotonic() + 10
        while marker not in " ".join(psutil.Process(p.pid).cmdline()) and time.monotonic() < deadline:
            time.sleep(0.01)
        jobs = _flows_json([HOSTCTL, "flows", "--match", marker, "--json"])
        assert [(j["job_id"], j["pids"]) for j in jobs] == [(f"pid:{p.pid}", [p.pid])]
    finally:
        p.kill()
        p.wait(timeout=10)


def test_library_caller_is_no_job_but_its_children_are() -> None:
    """A program using Discovery (not the hostctl CLI) whose command line matches is left out;
    a process it started that matches is still a job."""
    marker = f"hostctl-lib-{uuid.uuid4().hex}"
    prog = textwrap.dedent("""
        import json, re, subprocess, sys, time
        from hostctl.core.types import JobSpec
        from hostctl.discovery import Discovery
        child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)", sys.argv[1]])
        time.sleep(0.5)
        jobs = Discovery([JobSpec(match=re.escape(sys.argv[1]))]).scan()
        print(json.dumps({"child": child.pid, "jobs": [[j.job_id, list(j.pids)] for j in jobs]}))
        child.kill()
        child.wait()
    """)
    r = subprocess.run([sys.executable, "-c", prog, marker], capture_output=True, text=True, timeout=60,
                       env=_clean_env())
    assert r.returncode == 0, r.stderr
    out = json.loads(r.stdout)
    assert out["jobs"] == [[f"pid:{out['child']}", [out["child"]]]]
