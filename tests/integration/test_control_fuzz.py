"""The control socket under hostile input: a real pacing daemon (policy cap, so that `hint` reaches its
checks) in a namespace gets 10,000 fuzzed requests from root and 10,000 from an unprivileged user
(uid 65534, which also sends `stop`): bytes, JSON of every shape, too deep, too large, truncated,
and commands with fields of every type. Every request gets an answer or a closed connection within
its timeout; the daemon lives, logs no traceback, keeps its job, and answers status afterwards."""

from __future__ import annotations

import json
import os
import shutil
import subprocess

import pytest

from tests.conftest import PY
from tests.integration.test_pacing_daemon import serve, start_cap

pytestmark = [pytest.mark.root, pytest.mark.netns, pytest.mark.bpf, pytest.mark.slow]

PORT = 5441
CASES = 10_000
ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
NOBODY = ["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups", "--inh-caps=-all"]


def fuzz(pair, seed: int, job: str, *, as_nobody: bool) -> dict:
    argv = pair.ps.nsenter(*(NOBODY if as_nobody else []), PY, "-m", "tests.integration._control_fuzz", str(seed),
                           str(CASES), job, *(["--stop"] if as_nobody else []))
    r = subprocess.run(argv, capture_output=True, text=True, timeout=900, cwd=ROOT)
    assert r.returncode == 0, r.stderr[-2000:]
    return json.loads(r.stdout)


@pytest.mark.skipif(shutil.which("setpriv") is None, reason="setpriv (util-linux) is missing")
def test_10k_hostile_requests_from_root_and_from_another_user(pair, cgroup):
    serve(pair, pair.ps, cgroup, PORT)
    d = start_cap(pair, pair.ps, cgroup, PORT, "100mbit")
    st = json.loads(pair.ps.hostctl("status", "--json", check=True).stdout)
    job = st["jobs"][0]["job_id"]

    root = fuzz(pair, 1, job, as_nobody=False)
    nobody = fuzz(pair, 2, job, as_nobody=True)
    print("control fuzz:", json.dumps({"root": root, "nobody": nobody}))
    for got in (root, nobody):
        assert got["ends"]["timeout"] == 0 and got["ends"]["garbled"] == 0, got
        assert sum(got["ends"].values()) == CASES
        assert got["ends"]["error"] > CASES // 2 and got["ends"]["ok"] > 100, got  # refused, and served
    # the other user: every stop refused with the reason; status and its own (refused) hints served
    assert any(k.startswith("permission denied: stop changes the ho") for k in nobody["errors"]), nobody
    assert d.poll() is None, "the daemon died under the fuzzer"
    st = json.loads(pair.ps.hostctl("status", "--json", check=True).stdout)
    assert [j["job_id"] for j in st["jobs"]] == [job] and st["pid"] == d.pid
    r = pair.ps.hostctl("stop")
    assert r.returncode == 0, r.stderr
    _, err = d.communicate(timeout=30)
    assert d.returncode == 0 and "Traceback" not in err, err[-3000:]
    assert "control request failed" not in err, err[-3000:]  # every request was answered or closed cleanly
