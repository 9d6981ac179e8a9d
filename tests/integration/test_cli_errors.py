"""The real CLI on bad input: a non-zero exit, exactly one line on stderr,
"hostctl: error: <what is wrong>", and never a traceback.

Runs `hostctl` from this venv as a subprocess. Nothing here changes the kernel:
every case fails before hostctl touches an interface (or is a --dry-run).
The status/stop cases run in a fresh network namespace of their own, so a
daemon that happens to run on the test host cannot answer them.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from hostctl_lab.testbed.net import delete_netns

HOSTCTL = os.path.join(sys.prefix, "bin", "hostctl")
TIMEOUT_S = 120


def run(args: list[str], cwd: Path, netns: str | None = None) -> subprocess.CompletedProcess:
    cmd = [HOSTCTL, *args]
    if netns:
        cmd = ["ip", "netns", "exec", netns, *cmd]
    env = {**os.environ, "COLUMNS": "100", "NO_COLOR": "1"}
    return subprocess.run(cmd, capture_output=True, text=True, timeout=TIMEOUT_S, cwd=cwd, env=env)


def show(r: subprocess.CompletedProcess) -> str:
    return f"exit {r.returncode}\n--- stdout ---\n{r.stdout}\n--- stderr ---\n{r.stderr}"


def assert_one_line_error(r: subprocess.CompletedProcess, *fragments: str, exit_code: int | None = None) -> None:
    out = show(r)
    assert "Traceback" not in r.stdout + r.stderr, out
    assert r.returncode != 0, out
    if exit_code is not None:
        assert r.returncode == exit_code, out
    lines = r.stderr.splitlines()
    assert len(lines) == 1, out
    assert lines[0].startswith("hostctl: error: "), out
    for f in fragments:
        assert f in lines[0], f"{f!r} not in the error\n{out}"
    assert r.stdout == "", out


@pytest.fixture(scope="module", autouse=True)
def _hostctl_installed():
    if not os.access(HOSTCTL, os.X_OK):
        pytest.skip(f"{HOSTCTL} not found: pip install -e . into the venv")


# ==========================================================================
# start: bad flags and config (exit 2, ConfigError)


def test_unknown_policy(tmp_path):
    r = run(["start", "--policy", "bogus", "--ports", "9000"], tmp_path)
    assert_one_line_error(r, "unknown policy 'bogus'", "fifo, one, rr", exit_code=2)


def test_bands_9(tmp_path):
    r = run(["start", "--bands", "9", "--ports", "9000"], tmp_path)
    assert_one_line_error(r, "bands must be within 1..7", "got 9", exit_code=2)


def test_bad_link_rate(tmp_path):
    r = run(["start", "--link-rate", "12xyz", "--ports", "9000"], tmp_path)
    assert_one_line_error(r, "bad --link-rate '12xyz'", "tc unit", exit_code=2)


def test_bad_ports(tmp_path):
    r = run(["start", "--ports", "70000"], tmp_path)
    assert_one_line_error(r, "bad --ports entry '70000'", "1..65535", exit_code=2)


def test_bad_match_regex(tmp_path):
    r = run(["start", "--match", "torchrun("], tmp_path)
    assert_one_line_error(r, "--match: bad regex 'torchrun('", exit_code=2)


def test_policy_needs_jobs(tmp_path):
    r = run(["start", "--policy", "one"], tmp_path)
    assert_one_line_error(r, "policy one needs DL jobs", exit_code=2)


def test_cap_needs_a_rate(tmp_path):
    r = run(["start", "--policy", "cap", "--ports", "9000"], tmp_path)
    assert_one_line_error(r, "policy cap needs a rate", "--cap", exit_code=2)


def test_cap_bad_cgroup(tmp_path):
    r = run(["start", "--policy", "cap", "--cap", "1gbit", "--ports", "9000", "--cgroup", "nope"], tmp_path)
    assert_one_line_error(r, "cgroup must be a cgroup v2 path starting with /", exit_code=2)


def test_cap_cgroup_that_does_not_exist(tmp_path):
    r = run(["start", "--policy", "cap", "--cap", "1gbit", "--ports", "9000", "--iface", "lo", "--link-rate",
             "1gbit", "--cgroup", "/hostctl-no-such-cgroup", "--dry-run"], tmp_path)
    assert_one_line_error(r, "cgroup '/hostctl-no-such-cgroup' does not exist", "--cgroup", exit_code=2)


def test_missing_config_file(tmp_path):
    path = tmp_path / "nope.toml"
    r = run(["start", "--config", str(path)], tmp_path)
    assert_one_line_error(r, f"config file {path} not found", exit_code=2)


def test_config_with_unknown_key(tmp_path):
    path = tmp_path / "hostctl.toml"
    path.write_text('policy = "rr"\npolcy = "one"\nports = "9000"\n')
    r = run(["start", "--config", str(path)], tmp_path)
    assert_one_line_error(r, str(path), "unknown key(s) polcy", exit_code=2)


def test_config_with_unknown_job_key(tmp_path):
    path = tmp_path / "hostctl.toml"
    path.write_text('[[jobs]]\nname = "a"\nports = 9000\nmodelsize = "1MB"\n')
    r = run(["start", "--config", str(path)], tmp_path)
    assert_one_line_error(r, "jobs[0]: unknown key(s) modelsize", exit_code=2)


def test_config_not_toml(tmp_path):
    path = tmp_path / "hostctl.toml"
    path.write_text('policy = "rr\n')
    r = run(["start", "--config", str(path)], tmp_path)
    assert_one_line_error(r, "is not valid TOML", exit_code=2)


def test_other_rate_over_half(tmp_path):
    r = run(["start", "--dry-run", "--ports", "9000", "--iface", "lo", "--link-rate", "1gbit",
             "--other-rate", "60%"], tmp_path)
    assert_one_line_error(r, "other_rate 60% is more than half the link rate", exit_code=2)


def test_flows_without_selector(tmp_path):
    r = run(["flows"], tmp_path)
    assert_one_line_error(r, "give --ports, --pids, --match", exit_code=2)


# ==========================================================================
# start: environment problems


def test_unknown_interface(tmp_path):
    # --link-rate given, so the missing NIC speed is not what fails; a config error (exit 2), which
    # the systemd unit does not restart (RestartPreventExitStatus=2 3)
    r = run(["start", "--iface", "hc-nope0", "--link-rate", "1gbit", "--ports", "9000"], tmp_path)
    assert_one_line_error(r, "interface 'hc-nope0' not found", "ip link", exit_code=2)


# ==========================================================================
# the parser's own errors (unknown flag, wrong type, missing value): one line too, with the help


@pytest.mark.parametrize("args, fragments", [
    (["start", "--bands", "x"], ["'--bands'", "valid integer", "hostctl start --help"]),
    (["start", "--rr-interval", "soon"], ["'--rr-interval'", "hostctl start --help"]),
    (["start", "--metrics-port", "http"], ["'--metrics-port'", "hostctl start --help"]),
    (["start", "--no-such-flag"], ["No such option: --no-such-flag", "hostctl start --help"]),
    (["status", "--json", "extra"], ["unexpected extra argument", "hostctl status --help"]),
    (["flows", "--ports"], ["'--ports' requires an argument", "--help"]),
    (["no-such-command"], ["No such command 'no-such-command'", "hostctl --help"]),
])
def test_usage_errors(tmp_path, args, fragments):
    r = run(args, tmp_path)
    assert_one_line_error(r, *fragments, exit_code=2)


def test_no_arguments_print_the_help(tmp_path):
    r = run([], tmp_path)
    assert r.returncode == 2 and "Traceback" not in r.stdout + r.stderr, show(r)
    assert "Usage: hostctl [OPTIONS] COMMAND" in r.stdout and "start" in r.stdout, show(r)


# ==========================================================================
# bugs: inputs that currently end in a traceback (see the reasons)


def test_link_rate_too_small_for_the_bands(tmp_path):
    r = run(["start", "--dry-run", "--ports", "9000", "--iface", "lo", "--link-rate", "500kbit"], tmp_path)
    assert_one_line_error(r, "link", exit_code=2)


def test_link_rate_overflow(tmp_path):
    r = run(["start", "--ports", "9000", "--link-rate", "9" * 400 + "gbit"], tmp_path)
    assert_one_line_error(r, "--link-rate", exit_code=2)


def test_pids_unicode_digit(tmp_path):
    r = run(["start", "--pids", "²"], tmp_path)
    assert_one_line_error(r, "--pids", exit_code=2)


def test_config_match_not_a_string(tmp_path):
    path = tmp_path / "hostctl.toml"
    path.write_text("match = 5\n")
    r = run(["start", "--config", str(path)], tmp_path)
    assert_one_line_error(r, "match", exit_code=2)


def test_config_link_rate_nan(tmp_path):
    path = tmp_path / "hostctl.toml"
    path.write_text('link_rate = nan\nports = "9000"\n')
    r = run(["start", "--config", str(path)], tmp_path)
    assert_one_line_error(r, "link_rate", exit_code=2)


@pytest.mark.parametrize("cmd", [["start", "--dry-run", "--config"], ["flows", "-c"]])
def test_config_nested_too_deeply(tmp_path, cmd):
    # found by tests/cli_fuzz.py: tomllib recurses once per level and ran out of stack (RecursionError)
    path = tmp_path / "hostctl.toml"
    path.write_text("ports = " + "[" * 5000 + "]" * 5000 + "\n")
    r = run([*cmd, str(path)], tmp_path)
    assert_one_line_error(r, f"config file {path} is not valid TOML here", "nested too deeply", exit_code=2)


def test_switch_endpoint_port_out_of_range(tmp_path):
    # ZeroMQ would read port 99999 as 34463
    r = run(["start", "--dry-run", "--policy", "mlcc", "--ports", "9000", "--iface", "lo", "--link-rate", "1gbit",
             "--switch", "tcp://127.0.0.1:99999"], tmp_path)
    assert_one_line_error(r, "bad switch endpoint 'tcp://127.0.0.1:99999'", exit_code=2)


# ==========================================================================
# --dry-run (no root needed, no kernel change)


def test_dry_run_plan(tmp_path):
    r = run(["start", "--dry-run", "--policy", "one", "--ports", "9000-9001", "--iface", "lo",
             "--link-rate", "1gbit"], tmp_path)
    assert r.returncode == 0, show(r)
    assert "Traceback" not in r.stdout + r.stderr, show(r)
    out = json.loads(r.stdout)
    plan = out["plan"]
    assert plan["iface"] == "lo" and plan["link_rate_bps"] == 10**9 and plan["classify"] is True
    classes = {c["classid"]: c for c in plan["classes"]}
    assert "6863:1" in classes and "6863:10" in classes
    bands = [f"6863:{0x20 + b:x}" for b in range(plan["bands"])]
    assert plan["bands"] == 6 and bands[0] == "6863:20" and bands[-1] == "6863:25"
    assert set(classes) == {"6863:1", "6863:10", "6863:11", *bands}  # 6863:11: the control class (pure ACKs)
    assert classes["6863:10"]["prio"] == 7 and classes["6863:10"]["rate_bps"] == 10**8  # 10% default
    assert [classes[b]["prio"] for b in bands] == list(range(6))
    assert plan["default_classid"] == "6863:10"
    assert isinstance(out["assignment"], dict) and out["classifier"] is not None


@pytest.mark.skipif(os.geteuid() != 0 or shutil.which("setpriv") is None,
                    reason="needs root to drop to nobody with setpriv")
def test_dry_run_as_an_unprivileged_user():
    drop = ["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups", "--inh-caps=-all"]
    probe = subprocess.run([*drop, HOSTCTL, "--help"], capture_output=True, text=True, timeout=TIMEOUT_S, cwd="/")
    if probe.returncode != 0:
        pytest.skip(f"user nobody cannot run {HOSTCTL} here: {probe.stderr.strip()[-200:]}")
    r = subprocess.run([*drop, HOSTCTL, "start", "--dry-run", "--policy", "one", "--ports", "9000-9001",
                        "--iface", "lo", "--link-rate", "1gbit"],
                       capture_output=True, text=True, timeout=TIMEOUT_S, cwd="/")
    assert r.returncode == 0, show(r)
    assert "6863:20" in {c["classid"] for c in json.loads(r.stdout)["plan"]["classes"]}


# ==========================================================================
# status / stop with no daemon, in a fresh network namespace


@pytest.fixture
def netns() -> Iterator[str]:
    if os.geteuid() != 0:
        pytest.skip("creating a network namespace needs root")
    if shutil.which("ip") is None:
        pytest.skip("iproute2 (ip) is not installed")
    name = f"hcte-{uuid.uuid4().hex[:10]}"
    add = subprocess.run(["ip", "netns", "add", name], capture_output=True, text=True, timeout=30)
    try:
        if add.returncode != 0:
            pytest.skip(f"ip netns add failed: {add.stderr.strip()}")
        yield name
    finally:
        delete_netns(name)


@pytest.mark.root
@pytest.mark.netns
@pytest.mark.parametrize("args", [["status"], ["status", "--json"], ["stop"]])
def test_no_daemon(tmp_path, netns, args):
    r = run(args, tmp_path, netns=netns)
    assert_one_line_error(r, "no hostctl daemon runs in this network namespace", "hostctl start", exit_code=5)


@pytest.mark.root
@pytest.mark.netns
def test_clean_with_nothing_to_clean(tmp_path, netns):
    r = run(["clean"], tmp_path, netns=netns)
    assert r.returncode == 0, show(r)
    assert "Traceback" not in r.stdout + r.stderr, show(r)
    assert "nothing journalled" in r.stdout, show(r)
