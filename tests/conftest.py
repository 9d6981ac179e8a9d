"""Markers and fixtures shared by all tests.

Namespaces, links and processes made here get unique names, and are removed even
when a test fails (finalizers are registered before each thing is created).
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import time
import uuid
from dataclasses import dataclass, field

import pytest

from hostctl_lab.testbed.net import delete_netns

HOSTCTL = os.path.join(sys.prefix, "bin", "hostctl")
PY = sys.executable


def _bcc_ok() -> str | None:
    try:
        import bcc  # noqa: F401
    except ImportError:
        return "bcc (python3-bpfcc) is not importable"
    if not os.path.exists(f"/lib/modules/{os.uname().release}/build"):
        return "no kernel headers link for bcc (run scripts/setup.sh)"
    return None


def pytest_collection_modifyitems(config, items):
    is_root = os.geteuid() == 0
    bcc_problem = _bcc_ok()
    for item in items:
        if not is_root and ("root" in item.keywords or "netns" in item.keywords or "bpf" in item.keywords):
            item.add_marker(pytest.mark.skip(reason="needs root"))
        elif "bpf" in item.keywords and bcc_problem:
            item.add_marker(pytest.mark.skip(reason=bcc_problem))
        elif "netns" in item.keywords and not shutil.which("ip"):
            item.add_marker(pytest.mark.skip(reason="iproute2 missing"))


def sh(cmd: list[str], check: bool = True, **kw) -> subprocess.CompletedProcess:
    return subprocess.run(cmd, check=check, capture_output=True, text=True, **kw)


@dataclass
class Host:
    ns: str
    dev: str
    addr: str

    def run(self, *args: str, check: bool = True, timeout: float = 60) -> subprocess.CompletedProcess:
        return sh(["ip", "netns", "exec", self.ns, *args], check=check, timeout=timeout)

    def popen(self, *args: str, **kw) -> subprocess.Popen:
        return subprocess.Popen(["ip", "netns", "exec", self.ns, *args], **kw)

    def hostctl(self, *args: str, check: bool = False, timeout: float = 60) -> subprocess.CompletedProcess:
        return self.run(HOSTCTL, *args, check=check, timeout=timeout)

    def nsenter(self, *args: str) -> list[str]:
        """argv that enters only this network namespace (keeps the host's /sys mounts:
        cgroup2 and bpffs; `ip netns exec` gives a private /sys, where the pacer mounts
        cgroup2 itself and pins nothing)."""
        return ["nsenter", f"--net=/run/netns/{self.ns}", *args]

    def argv_in(self, cgroup: str, *args: str) -> list[str]:
        """argv that joins ``cgroup`` (a cgroup v2 directory) and then this namespace."""
        return ["sh", "-c", 'echo $$ > "$0/cgroup.procs" && exec ip netns exec "$@"', cgroup, self.ns, *args]


@dataclass
class Pair:
    ps: Host
    wk: Host
    procs: list[subprocess.Popen] = field(default_factory=list)

    def start(self, host: Host, *args: str, **kw) -> subprocess.Popen:
        kw.setdefault("stdout", subprocess.PIPE)
        kw.setdefault("stderr", subprocess.PIPE)
        kw.setdefault("text", True)
        p = host.popen(*args, **kw)
        self.procs.append(p)
        return p


def _kill(p: subprocess.Popen) -> None:
    if p.poll() is None:
        p.send_signal(signal.SIGTERM)
        try:
            p.wait(5)
        except subprocess.TimeoutExpired:
            p.kill()
            p.wait(5)


def remove_netns(name: str) -> None:
    """Kill what still runs in a namespace a test made (e.g. a daemon left by a failure), then
    delete it with hostctl's journals for it (a kill -9 test leaves one)."""
    for pid in sh(["ip", "netns", "pids", name], check=False).stdout.split():
        try:
            os.kill(int(pid), signal.SIGKILL)
        except (ProcessLookupError, ValueError):
            pass
    delete_netns(name)


@pytest.fixture
def make_pair(request):
    """Factory of namespace pairs ("PS host" 10.77.0.1, "worker host" 10.77.0.2, or
    ``net``.1 and ``net``.2 for make(net="10.231.7"), joined by a veth; each pair has its own
    unique names, so several pairs coexist). Everything a pair made (processes, namespaces,
    hostctl's journals for them) is removed at teardown."""

    def make(net: str = "10.77.0") -> Pair:
        tag = uuid.uuid4().hex[:6]
        ps = Host(f"hct-{tag}-ps", f"hcp{tag}", f"{net}.1")
        wk = Host(f"hct-{tag}-wk", f"hcw{tag}", f"{net}.2")
        pr = Pair(ps, wk)

        def fin():
            for p in reversed(pr.procs):
                _kill(p)
            for h in (ps, wk):
                remove_netns(h.ns)

        request.addfinalizer(fin)
        for h in (ps, wk):
            sh(["ip", "netns", "add", h.ns])
        sh(["ip", "link", "add", ps.dev, "netns", ps.ns, "type", "veth", "peer", "name", wk.dev, "netns", wk.ns])
        for h in (ps, wk):
            h.run("ip", "addr", "add", f"{h.addr}/24", "dev", h.dev)
            h.run("ip", "link", "set", h.dev, "up")
            h.run("ip", "link", "set", "lo", "up")
        return pr

    return make


@pytest.fixture
def pair(make_pair):
    """Two namespaces joined by a veth (see make_pair)."""
    return make_pair()


@pytest.fixture
def make_cgroup(request):
    """Factory of fresh cgroup v2 directories with unique names. The finalizer kills what
    runs in them, releases a pacer still attached to one (a crashed daemon's) and
    removes them."""
    from hostctl.datapath import pacer

    made: list[str] = []

    def fin():
        from hostctl.cgroups import kill_cgroup, remove_cgroup_tree

        for path in made:
            kill_cgroup(path, grace_s=0.0)
            for owner in pacer.all_owners():
                if owner.get("cgroup") == path:
                    pacer.release_scope(owner)
            remove_cgroup_tree(path)

    request.addfinalizer(fin)

    def make() -> str:
        path = os.path.join(pacer.cgroup2_root(), f"hostctl-test-{uuid.uuid4().hex[:8]}")
        made.append(path)
        os.makedirs(path)
        return path

    return make


@pytest.fixture
def cgroup(make_cgroup):
    """One fresh cgroup v2 directory (see make_cgroup)."""
    return make_cgroup()


def wait_for(pred, timeout: float = 20.0, interval: float = 0.1, what: str = "condition"):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        v = pred()
        if v:
            return v
        time.sleep(interval)
    raise AssertionError(f"timed out waiting for {what}")
