"""Where the pacer finds cgroup2 in a private /sys (ip netns exec), without root: the
host's cgroup2 options come from the nearest ancestor that sees a cgroup2 mount (rw/ro
dropped: mounting cgroup2 sets the hierarchy's global options, so they must be the
host's), and a --cgroup given as a full path of the host's view resolves below the
private mount. The mounts themselves: tests/integration/test_pacing_daemon.py."""

from __future__ import annotations

import pytest

from hostctl.datapath import pacer
from hostctl.errors import ProbeError

HOST = [("/", "ext4", "rw"), ("/sys", "sysfs", "rw"), ("/sys/fs/cgroup", "cgroup2", "rw,nsdelegate,memory_recursiveprot"),
        ("/sys/fs/bpf", "bpf", "rw,mode=700")]
PRIVATE = [("/", "ext4", "rw"), ("/sys", "sysfs", "rw")]


@pytest.fixture
def tables(monkeypatch):
    """pid -> mount table; 'self' is the private namespace, 300 a shell in it, 200 the host's shell."""
    t = {"self": PRIVATE, 300: PRIVATE, 200: HOST, 1: HOST}
    monkeypatch.setattr(pacer, "_mountinfo", lambda pid="self": t.get(pid, []))
    monkeypatch.setattr(pacer, "_ancestors", lambda: [300, 200, 1])
    return t


def test_host_cgroup2_options_come_from_the_nearest_ancestor_that_sees_one(tables):
    assert pacer._in_private_sysfs()
    assert pacer._host_cgroup2() == ("/sys/fs/cgroup", "nsdelegate,memory_recursiveprot")


def test_no_ancestor_with_cgroup2_is_a_clear_error(tables, monkeypatch):
    tables[200] = tables[1] = PRIVATE
    assert pacer._host_cgroup2() is None
    with pytest.raises(ProbeError, match="no cgroup v2 hierarchy is visible: /sys is private"):
        pacer._mount_private_cgroup2()


def test_mount_uses_the_host_options_and_does_not_count_as_a_host_mount(tables, monkeypatch):
    calls = []
    monkeypatch.setattr(pacer.bpfsys, "mount_fs", lambda *a: calls.append(a))
    monkeypatch.setattr(pacer, "_OWN_MOUNTS", set())
    assert pacer.cgroup2_root() == pacer.PRIVATE_CGROUP2
    assert calls[0][:3] == ("cgroup2", "/sys/fs/cgroup", "nsdelegate,memory_recursiveprot")
    tables["self"] = PRIVATE + [("/sys/fs/cgroup", "cgroup2", "rw,nsdelegate,memory_recursiveprot")]
    assert pacer._in_private_sysfs()  # its own mount does not make /sys the host's
    monkeypatch.setattr(pacer.bpfsys, "is_bpffs", lambda path: False)
    assert pacer.bpffs_root() is None  # and no private bpffs is mounted


def test_a_full_host_path_resolves_below_the_private_mount(tables, monkeypatch, tmp_path):
    hybrid = [("/sys/fs/cgroup", "tmpfs", "rw"), ("/sys/fs/cgroup/unified", "cgroup2", "rw")]
    tables[200] = tables[1] = hybrid
    root = tmp_path / "cg"
    (root / "jobs" / "a").mkdir(parents=True)
    for d in (root, root / "jobs" / "a"):
        (d / "cgroup.procs").write_text("")
    monkeypatch.setattr(pacer, "cgroup2_root", lambda: str(root))
    monkeypatch.setattr(pacer, "_OWN_MOUNTS", {str(root)})
    want = str(root / "jobs" / "a")
    assert pacer.resolve_cgroup("/sys/fs/cgroup/unified/jobs/a") == want
    assert pacer.resolve_cgroup("/jobs/a") == want
    assert pacer.resolve_cgroup(want) == want
    assert pacer.cgroup_rel(want) == "/jobs/a" and pacer.cgroup_rel(str(root)) == "/"
