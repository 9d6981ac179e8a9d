"""cgroup v2 helpers shared by the testbed, the pacer and the tests."""

from __future__ import annotations

import os
import signal
import time


def cgroup_pids(cg: str) -> list[int]:
    """PIDs in a cgroup v2 directory and all its descendants."""
    pids: list[int] = []
    for dirpath, _dirs, files in os.walk(cg):
        if "cgroup.procs" not in files:
            continue
        try:
            with open(os.path.join(dirpath, "cgroup.procs")) as f:
                pids += [int(x) for x in f.read().split()]
        except OSError:
            continue
    return pids


def kill_cgroup(cg: str, grace_s: float) -> None:
    """SIGTERM every process of the cgroup tree, SIGKILL what is left after grace_s."""
    if not os.path.isdir(cg):
        return
    for sig, wait in ((signal.SIGTERM, grace_s), (signal.SIGKILL, 5.0)):
        pids = cgroup_pids(cg)
        if not pids:
            return
        for pid in pids:
            try:
                os.kill(pid, sig)
            except ProcessLookupError:
                pass
        deadline = time.monotonic() + wait
        while time.monotonic() < deadline and cgroup_pids(cg):
            time.sleep(0.05)


def remove_cgroup_tree(cg: str) -> None:
    """rmdir a cgroup and its descendants, deepest first (they must be empty of processes)."""
    for dirpath, _dirs, _files in sorted(os.walk(cg), key=lambda w: -len(w[0])):
        try:
            os.rmdir(dirpath)
        except OSError:
            pass
