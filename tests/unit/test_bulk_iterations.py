"""hostctl_lab.tools.bulk serve --burst/--period: a parameter server's iterations over real loopback TCP
(one real server process): every period it sends the burst on each connection, then idles."""

from __future__ import annotations

import json
import socket
import subprocess
import sys

import pytest


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_burst_mode_sends_one_update_per_period():
    port = _free_port()
    srv = subprocess.Popen([sys.executable, "-m", "hostctl_lab.tools.bulk", "serve", "--bind", "127.0.0.1", "--port",
                            str(port), "--burst", "64KiB", "--period", "0.2"], stdout=subprocess.PIPE, text=True)
    try:
        assert srv.stdout.readline().startswith("listening")
        out = subprocess.run([sys.executable, "-m", "hostctl_lab.tools.bulk", "recv", "--connect", f"127.0.0.1:{port}",
                              "--seconds", "1.0", "--bucket", "0.05"], capture_output=True, text=True, timeout=30)
        res = json.loads(out.stdout)
    finally:
        srv.kill()
        srv.wait(5)
    updates = res["total_bytes"] / (64 * 1024)
    assert 4 <= updates <= 6, res  # 5 periods in the window (the first or last may be cut)
    assert sum(1 for b in res["bytes"] if b == 0) >= 10  # idle between the iterations


@pytest.mark.parametrize("args", [["--burst", "64KiB"], ["--period", "0.2"], ["--burst", "1x", "--period", "1"],
                                  ["--sink", "--burst", "1KiB", "--period", "1"]])
def test_bad_burst_options_are_refused(args):
    r = subprocess.run([sys.executable, "-m", "hostctl_lab.tools.bulk", "serve", "--port", "1", *args],
                       capture_output=True, text=True, timeout=30)
    assert r.returncode == 2 and "Traceback" not in r.stderr and "--burst" in r.stderr, r.stderr
