"""Operating the daemon: reload rules, the reload in the loop, CLI <-> config parity, the
link-rate warning, sd_notify over a real datagram socket, journald priorities, --version,
and exit codes of operator mistakes (real `hostctl` processes)."""

from __future__ import annotations

import logging
import os
import socket
import subprocess
import sys
import uuid

import pytest

from hostctl.config import RELOAD_FIXED, RELOAD_LIVE, TOP_KEYS, Config, build_config, link_rate_warning, reload_config
from hostctl.core.plan import build_tc_plan
from hostctl.core.types import Job, JobSpec
from hostctl.daemon import Daemon
from hostctl.datapath.fake import FakeDatapath
from hostctl.errors import ConfigError
from tests.conftest import HOSTCTL

# ------------------------------------------------------------------------------------------
# reload rules (hostctl.config.reload_config)

A, B, C = (JobSpec(name=n, ports=(p,)) for n, p in (("a", 9000), ("b", 9001), ("c", 9002)))


def test_every_config_field_has_a_reload_rule():
    fields = set(Config.__dataclass_fields__)
    assert set(RELOAD_LIVE) | set(RELOAD_FIXED) == fields
    assert not set(RELOAD_LIVE) & set(RELOAD_FIXED)


def test_live_keys_change_and_fixed_keys_are_refused_with_the_reason():
    old = Config(policy="rr", jobs=(A, B)).validate()
    new = Config(policy="one", bands=4, rescan_s=0.5, rr_interval_s=5.0, log_level="debug", jobs=(A, C)).validate()
    merged, changed, refused = reload_config(old, new)
    assert merged.jobs == (A, C) and merged.rescan_s == 0.5 and merged.rr_interval_s == 5.0
    assert merged.log_level == "debug"
    assert merged.policy == "rr" and merged.bands == 6  # kept
    assert set(changed) == {"jobs (ports, pids, match, [[jobs]])", "rescan", "rr_interval", "log_level"}
    assert len(refused) == 2
    pol = next(r for r in refused if r.startswith("policy"))
    assert "rr -> one refused" in pol and "chosen at start" in pol and "restart" in pol
    assert any(r.startswith("bands 6 -> 4 refused: the htb tree is built with it at start") for r in refused)


def test_unchanged_config_changes_nothing():
    old = Config(policy="rr", jobs=(A,)).validate()
    merged, changed, refused = reload_config(old, Config(policy="rr", jobs=(A,)))
    assert merged == old and changed == [] and refused == []


def test_mlcc_keeps_its_rr_interval():
    old = Config(policy="mlcc", jobs=(A,)).validate()
    _, changed, refused = reload_config(old, Config(policy="mlcc", rr_interval_s=3.0, jobs=(A,)))
    assert changed == [] and refused and refused[0].startswith("rr_interval 20.0 -> 3.0 refused: mlcc")


def test_pacer_started_port_only_refuses_pid_and_match_jobs():
    old = Config(policy="cap", cap_bps=10**8, jobs=(A,)).validate()
    new = Config(policy="cap", cap_bps=10**8, jobs=(A, JobSpec(name="m", match="torchrun")))
    merged, changed, refused = reload_config(old, new)
    assert merged.jobs == (A,) and changed == []
    assert "pids or match needs a restart" in refused[0]
    # a cap is live
    merged, changed, _ = reload_config(old, Config(policy="cap", cap_bps=2 * 10**8, jobs=(A,)))
    assert merged.cap_bps == 2 * 10**8 and changed == ["cap"]


def test_reload_that_leaves_an_invalid_mix_is_refused():
    old = Config(policy="cap", cap_bps=10**8, jobs=(A,)).validate()
    with pytest.raises(ConfigError, match="policy cap needs a rate"):
        reload_config(old, Config(policy="cap", jobs=(A,)))  # the cap removed: nothing left to pace to


# ------------------------------------------------------------------------------------------
# the reload in the daemon's loop (fake datapath)


class Discovery:
    """Returns one job per port spec, named like the spec."""

    def __init__(self, specs):
        self.specs = tuple(specs)

    def scan(self):
        return [Job(s.name, "port", listen_ports=s.ports) for s in self.specs]


class Clock:
    def __init__(self, t):
        self.t = t

    def __call__(self):
        return self.t


def _daemon(tmp_path, text: str):
    path = tmp_path / "hostctl.toml"
    path.write_text(text)
    cfg = build_config(str(path))
    plan = build_tc_plan("eth0", 10**9, cfg.bands, 10**8, True)
    dp = FakeDatapath()
    d = Daemon(cfg, plan, dp, Discovery(cfg.jobs), wall=Clock(1000.0), mono=Clock(5.0),
               load_config=lambda: build_config(str(path), rescan=None), new_discovery=Discovery)
    dp.setup(plan)
    d.scan()
    d.reassign()
    return d, dp, path


JOBS3 = """policy = "one"
[[jobs]]
name = "a"
ports = "9000"
model_size = "1MB"
[[jobs]]
name = "b"
ports = "9001"
model_size = "2MB"
"""


def test_reload_changes_the_job_set_and_keeps_unchanged_jobs_entries(tmp_path, caplog):
    d, dp, path = _daemon(tmp_path, JOBS3)
    slot_a, band_a = d.table.slots["a"], d.assignment["a"]
    path.write_text(JOBS3.replace('name = "b"\nports = "9001"', 'name = "c"\nports = "9002"'))
    with caplog.at_level(logging.INFO, "hostctl"):
        assert d.reload()
    assert d._rescan_now
    d.scan()
    d.reassign()
    assert set(d.jobs) == {"a", "c"}
    assert d.table.slots["a"] == slot_a and d.assignment["a"] == band_a  # a's entries kept
    assert dp.table.slot_classid[slot_a] == d.table.slot_classid[slot_a]
    assert "reloaded the config: changed jobs" in caplog.text


def test_reload_refuses_a_fixed_key_and_a_broken_file(tmp_path, caplog):
    d, _, path = _daemon(tmp_path, JOBS3)
    before = d.config
    path.write_text("bands = 3\n" + JOBS3)
    with caplog.at_level(logging.INFO, "hostctl"):
        assert d.reload()
    assert d.config == before
    assert "reload: bands 6 -> 3 refused: the htb tree is built with it at start" in caplog.text
    caplog.clear()
    path.write_text(JOBS3 + "\nbands = [\n")
    with caplog.at_level(logging.INFO, "hostctl"):
        assert not d.reload()
    assert d.config == before and d.reloads == {"ok": 1, "refused": 1}
    errors = [r for r in caplog.records if r.levelno >= logging.ERROR]
    assert len(errors) == 1 and "reload refused, still running with the previous config" in errors[0].message
    assert "not valid TOML" in errors[0].message


def test_reload_sees_flags_win(tmp_path):
    path = tmp_path / "hostctl.toml"
    path.write_text(JOBS3)
    cfg = build_config(str(path), rescan=0.5)
    path.write_text("rescan = 2.0\n" + JOBS3)
    merged, changed, _ = reload_config(cfg, build_config(str(path), rescan=0.5))
    assert merged.rescan_s == 0.5 and changed == []


# ------------------------------------------------------------------------------------------
# every flag of `hostctl start` is a config key and vice versa


START_ONLY = {"config", "dry_run"}  # what the command does, not how the daemon runs
FILE_ONLY = {"jobs"}  # [[jobs]] tables (named jobs) have no flag form


def _start_params() -> dict[str, list[str]]:
    import typer.main

    from hostctl.cli import app

    cmd = typer.main.get_command(app).commands["start"]
    return {p.name: list(p.opts) + list(p.secondary_opts) for p in cmd.params}


def test_every_start_option_is_a_config_key_and_back():
    params = _start_params()
    assert set(params) - START_ONLY == TOP_KEYS - FILE_ONLY
    for name, opts in params.items():
        assert f"--{name.replace('_', '-')}" in opts, (name, opts)


def test_every_start_option_reaches_the_config(tmp_path, monkeypatch):
    """Each flag given on the command line ends up in the Config the daemon runs with."""
    import hostctl.cli as cli

    seen = {}

    def fake_build(path, **flags):
        seen.update(flags)
        raise ConfigError("stop here")

    monkeypatch.setattr("hostctl.config.build_config", fake_build)
    from typer.testing import CliRunner

    CliRunner().invoke(cli.app, ["start", "--dry-run"])
    assert set(seen) == set(_start_params()) - START_ONLY


# ------------------------------------------------------------------------------------------
# --link-rate above the NIC's speed


def test_link_rate_in_bytes_above_the_nic_names_both_numbers():
    from hostctl.core.units import parse_rate_bps

    bps = parse_rate_bps("10Gbps")
    assert bps == 80 * 10**9  # tc units: gbps is bytes per second
    w = link_rate_warning(bps, "10Gbps", "eth0", 10 * 10**9)
    assert "80Gbit" in w and "10Gbit" in w and "eth0" in w and "BYTES per second" in w and "10Gbit" in w
    assert "'10Gbps'" in w and "write e.g. 10Gbit" in w


def test_link_rate_within_the_nic_or_unknown_speed_is_fine():
    assert link_rate_warning(9_700_000_000, "9.7gbit", "eth0", 10 * 10**9) is None
    assert link_rate_warning(80 * 10**9, "10gbps", "veth0", None) is None
    w = link_rate_warning(20 * 10**9, "20gbit", "eth0", 10 * 10**9)
    assert w and "BYTES" not in w


# ------------------------------------------------------------------------------------------
# sd_notify and journald


def test_notify_sends_a_datagram_to_notify_socket(tmp_path):
    from hostctl.systemd import monotonic_usec, notify

    path = str(tmp_path / "notify")
    with socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM) as srv:
        srv.bind(path)
        srv.settimeout(2)
        assert notify("READY=1", "STATUS=ok", env={"NOTIFY_SOCKET": path})
        assert srv.recv(4096) == b"READY=1\nSTATUS=ok"
        assert notify("RELOADING=1", monotonic_usec(), env={"NOTIFY_SOCKET": path})
        fields = srv.recv(4096).decode().split("\n")
        assert fields[0] == "RELOADING=1" and fields[1].startswith("MONOTONIC_USEC=")
        assert abs(int(fields[1].split("=")[1]) - __import__("time").monotonic() * 1e6) < 5e6


def test_notify_abstract_socket_and_absent_socket():
    from hostctl.systemd import notify

    name = f"hostctl-test-{uuid.uuid4().hex}"
    with socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM) as srv:
        srv.bind("\0" + name)
        srv.settimeout(2)
        assert notify("STOPPING=1", env={"NOTIFY_SOCKET": "@" + name})
        assert srv.recv(4096) == b"STOPPING=1"
    assert not notify("READY=1", env={})
    assert not notify("READY=1", env={"NOTIFY_SOCKET": "@" + name})  # nobody listens: no exception


def test_journal_formatter_prefixes_syslog_priorities():
    from hostctl.systemd import JournalFormatter

    f = JournalFormatter("%(message)s")

    def rec(level, msg):
        return logging.LogRecord("hostctl", level, __file__, 1, msg, (), None)

    assert f.format(rec(logging.ERROR, "boom")) == "<3>boom"
    assert f.format(rec(logging.WARNING, "hm")) == "<4>hm"
    assert f.format(rec(logging.INFO, "ok")) == "<6>ok"
    assert f.format(rec(logging.DEBUG, "dbg")) == "<7>dbg"
    assert f.format(rec(logging.CRITICAL, "x")) == "<2>x"
    assert f.format(rec(logging.WARNING, "a\nb")) == "<4>a\n<4>b"


def test_journal_stream_is_detected_by_device_and_inode(tmp_path):
    from hostctl.systemd import JournalFormatter, log_handler

    with open(tmp_path / "stream", "w") as stream:
        st = os.fstat(stream.fileno())
        assert isinstance(log_handler(stream, {"JOURNAL_STREAM": f"{st.st_dev}:{st.st_ino}"}).formatter,
                          JournalFormatter)
        assert not isinstance(log_handler(stream, {"JOURNAL_STREAM": f"{st.st_dev}:{st.st_ino + 1}"}).formatter,
                              JournalFormatter)  # inherited by a child whose stderr is elsewhere
        assert not isinstance(log_handler(stream, {}).formatter, JournalFormatter)


# ------------------------------------------------------------------------------------------
# exit codes and one-line errors of real `hostctl` processes


def _run(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([HOSTCTL, *args], capture_output=True, text=True, timeout=60)


def test_version():
    from importlib.metadata import version

    r = _run("--version")
    assert r.returncode == 0 and r.stdout.strip() == f"hostctl {version('hostctl')}"


def test_bogus_log_level_is_a_config_error():
    r = _run("start", "--policy", "fifo", "--iface", "lo", "--link-rate", "1gbit", "--log-level", "bogus", "--dry-run")
    assert r.returncode == 2, r
    assert r.stderr.strip().splitlines() == ["hostctl: error: unknown log level 'bogus': choose one of DEBUG, INFO, "
                                             "WARNING, ERROR, CRITICAL"]


def test_mistyped_interface_is_a_config_error():
    """Exit 2, which the unit's RestartPreventExitStatus= does not restart (it was 4, a datapath error)."""
    name = f"hc{uuid.uuid4().hex[:8]}"
    r = _run("start", "--policy", "fifo", "--iface", name, "--link-rate", "1gbit", "--dry-run")
    assert r.returncode == 2, r
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and f"interface {name!r} not found" in lines[0] and "ip link" in lines[0]


if __name__ == "__main__":
    sys.exit(pytest.main([__file__]))
