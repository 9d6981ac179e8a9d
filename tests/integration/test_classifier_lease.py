"""The classifier's lease on the real kernel: a heartbeat stamped a little after a packet's
own clock read is fresh, one older than the lease is expired.

The daemon stamps ``heartbeat_ns`` with its clock read before the map write, so a packet
classified meanwhile (or on another CPU) reads a stamp later than its ``bpf_ktime_get_ns()``.
With an unsigned ``now - heartbeat_ns`` that wrapped to ~2^64 and the packet failed open
(HC_LEASE_EXPIRED in hostctl/bpf/hostctl.h). A stamp 0.5 s ahead makes that case
deterministic; 3 s behind (lease 1 s) is the daemon that stopped. Heartbeats racing packets
that fail open lose no count (the counter is in its own entry). Runs in the worker's
namespace (tests/conftest.py ``pair``), in a child entered with nsenter.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import threading
import time

import pytest

from tests.conftest import PY

pytestmark = [pytest.mark.root, pytest.mark.netns, pytest.mark.bpf]

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
PACKETS = 20
RACE_PACKETS = 20000


def _child(iface: str, raddr: str, state_dir: str) -> None:
    from hostctl.core.plan import build_tc_plan
    from hostctl.datapath import classifier
    from hostctl.datapath.linux import LinuxDatapath

    dp = LinuxDatapath(iface, state_dir=state_dir)
    out = {}
    try:
        dp.setup(build_tc_plan(iface, 1_000_000_000, 2, 100_000_000, True))
        ctl = dp.classifier.ctl
        s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        for name, offset_ns in (("ahead", 500_000_000), ("behind", -3_000_000_000)):
            before = dp.read_counters().failopen_pkts
            v = ctl[ctl.Key(0)]
            v.heartbeat_ns = time.monotonic_ns() + offset_ns
            ctl[ctl.Key(0)] = v
            for _ in range(PACKETS):
                s.sendto(b"x" * 100, (raddr, 9))
            out[name] = dp.read_counters().failopen_pkts - before
        # the daemon's heartbeat rewrites the config entry whole while packets fail open: every one
        # of them is counted (the counter used to share that entry, and an increment between the
        # heartbeat's read and its write was lost)
        stop = threading.Event()

        def beat() -> None:
            while not stop.is_set():
                v = ctl[ctl.Key(classifier.HC_CTL_KEY_CONFIG)]
                v.heartbeat_ns = time.monotonic_ns() - 3_000_000_000  # expired, as "behind"
                ctl[ctl.Key(classifier.HC_CTL_KEY_CONFIG)] = v
                out["beats"] = out.get("beats", 0) + 1

        t = threading.Thread(target=beat)
        before = dp.read_counters().failopen_pkts
        t.start()
        try:
            for _ in range(RACE_PACKETS):
                s.sendto(b"x" * 100, (raddr, 9))
        finally:
            stop.set()
            t.join()
        out["race"] = dp.read_counters().failopen_pkts - before
        s.close()
    finally:
        dp.teardown()
        dp.close()
    print(json.dumps(out))


def test_a_heartbeat_stamped_after_the_packets_clock_is_fresh_and_an_old_one_expired(pair, tmp_path):
    r = subprocess.run(pair.wk.nsenter(PY, "-m", "tests.integration.test_classifier_lease", pair.wk.dev,
                                       pair.ps.addr, str(tmp_path)),
                       cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr[-3000:]
    out = json.loads(r.stdout.strip().splitlines()[-1])
    assert out["ahead"] == 0, out  # unsigned arithmetic: every packet failed open
    assert out["behind"] >= PACKETS, out
    assert out["beats"] > 100 and out["race"] >= RACE_PACKETS, out  # none lost to a heartbeat


if __name__ == "__main__":
    _child(*sys.argv[1:4])
