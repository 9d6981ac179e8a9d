"""switchemu unreachable: a real switchemu in one namespace, a host's mlcc controller in another,
over TCP across their veth; nftables in the host's namespace drops everything towards the switch's
port (packets lost on the way: no reset, no error, only silence). The host falls back to local mode
after SILENT_SLOTS slots and returns to switch mode once the rule is gone (ZeroMQ reconnects by
itself); the test measures both times. Needs root and nft."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import time

import pytest

from hostctl.policy.mlcc import SILENT_SLOTS
from tests.conftest import PY

pytestmark = [pytest.mark.root, pytest.mark.netns]

SWITCHEMU = os.path.join(os.path.dirname(PY), "switchemu")
ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
PORT = 5557


def modes_until(lines, pred, timeout: float) -> dict:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        line = lines.stdout.readline()
        if not line:
            raise AssertionError(f"the client ended: {lines.stderr.read()[-2000:]}")
        rec = json.loads(line)
        if pred(rec):
            return rec
    raise AssertionError("timed out")


@pytest.mark.skipif(shutil.which("nft") is None, reason="nft (nftables) is missing")
@pytest.mark.parametrize("outage_s", [1.0, 5.0])  # shorter and longer than ZeroMQ's 3 s heartbeat timeout
def test_packets_dropped_to_the_switch_are_silence_and_the_host_comes_back(pair, tmp_path, outage_s):
    topo = tmp_path / "topo.toml"
    topo.write_text(f'[[switch]]\nname = "sw0"\nhosts = {{count = 2, prefix = "h", first_addr = "{pair.ps.addr}"}}\n'
                    'host_rate = "125mbit"\n')
    sw = pair.start(pair.ps, SWITCHEMU, "--bind", f"tcp://{pair.ps.addr}:{PORT}", "--topology", str(topo),
                    "--log-level", "WARNING")
    client = pair.start(pair.wk, PY, "-m", "tests.integration._mlcc_client", f"tcp://{pair.ps.addr}:{PORT}",
                        pair.wk.addr, pair.ps.addr, "60", cwd=ROOT)
    table = f"hctest{pair.wk.dev}"
    try:
        modes_until(client, lambda r: r["mode"] == "switch" and r["silent"] == 0, 30)
        pair.wk.run("nft", "add", "table", "inet", table)
        pair.wk.run("nft", "add", "chain", "inet", table, "out", "{ type filter hook output priority 0; }")
        t_cut = time.monotonic()
        pair.wk.run("nft", "add", "rule", "inet", table, "out", "tcp", "dport", str(PORT), "drop")
        local = modes_until(client, lambda r: r["mode"] == "local", 10)
        assert local["silent"] == SILENT_SLOTS
        to_local = local["t"] - t_cut
        time.sleep(outage_s)
        t_back = time.monotonic()
        pair.wk.run("nft", "delete", "table", "inet", table)
        back = modes_until(client, lambda r: r["mode"] == "switch", 30)
        to_switch = back["t"] - t_back
        print(f"unreachable switch ({outage_s:g} s): local mode {to_local * 1000:.0f} ms after the cut, switch mode "
              f"{to_switch * 1000:.0f} ms after the network came back")
        assert to_local < 1.0 and to_switch < 10.0
        assert sw.poll() is None
    finally:
        pair.wk.run("nft", "delete", "table", "inet", table, check=False)
