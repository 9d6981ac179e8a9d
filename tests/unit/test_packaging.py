"""What a training host installs: the BPF C sources ship as package data, matplotlib
is only in the lab extra, and the daemon's commands (start/status/stop/clean/flows)
import nothing from the lab (hostctl.bench, .testbed, .workloads) or matplotlib.
The wheel itself, installed in a fresh venv, is run in tests/integration/test_wheel.py."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

import hostctl
from hostctl.datapath.classifier import bpf_dir, bpf_source
from hostctl.errors import ProbeError

ROOT = Path(__file__).resolve().parents[2]
LAB = ("hostctl.bench", "hostctl.testbed", "hostctl.workloads", "matplotlib")

# Imports every module of the daemon path, then runs each daemon command in this
# process (they fail fast here: no daemon, no such interface), and prints the lab
# modules that ended up in sys.modules.
PROBE = """
import importlib, json, os, sys
for m in ("hostctl.cli", "hostctl.daemon", "hostctl.config", "hostctl.control", "hostctl.client",
          "hostctl.discovery", "hostctl.metrics", "hostctl.policy.switchclient", "hostctl.policy.pacing",
          "hostctl.policy.mlcc", "hostctl.datapath.linux", "hostctl.datapath.classifier",
          "hostctl.datapath.pacer", "hostctl.datapath.journal", "hostctl.datapath.sockreset"):
    importlib.import_module(m)
from hostctl import cli
for argv in (["status"], ["status", "--json"], ["stop"], ["flows", "--ports", "1"],
             ["start", "--iface", "hctnoiface0", "--policy", "one", "--ports", "1"],
             ["start", "--iface", "hctnoiface0", "--policy", "cap", "--cap", "1mbit", "--ports", "1"],
             *([["clean", "--iface", "hctnoiface0"]] if os.geteuid() else [])):  # as root, clean would act
    sys.argv = ["hostctl", *argv]
    try:
        cli.main()
    except SystemExit:
        pass
lab = sorted(m for m in sys.modules if m.startswith(LAB))
print("LAB=" + json.dumps(lab), file=sys.stderr)
"""


def test_daemon_commands_import_nothing_from_the_lab(tmp_path):
    env = {**os.environ, "HOSTCTL_RUN_DIR": str(tmp_path)}  # no journal or owner record of this host is read
    r = subprocess.run([sys.executable, "-c", f"LAB = {LAB!r}\n" + PROBE], capture_output=True, text=True,
                       cwd=tmp_path, env=env, timeout=60)
    line = [ln for ln in r.stderr.splitlines() if ln.startswith("LAB=")]
    assert line, r.stderr
    assert json.loads(line[-1][4:]) == []
    assert "Traceback" not in r.stderr, r.stderr


def test_the_probe_sees_a_lab_import():
    """The probe above can fail: a command that imports the lab is reported."""
    code = f"LAB = {LAB!r}\n" + PROBE.replace("from hostctl import cli", "import hostctl.bench.report\nfrom hostctl import cli")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    lab = json.loads([ln for ln in r.stderr.splitlines() if ln.startswith("LAB=")][-1][4:])
    assert "hostctl.bench.report" in lab


def test_matplotlib_is_only_in_the_lab_extra():
    meta = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    assert not any(d.lower().startswith("matplotlib") for d in meta["dependencies"])
    assert any(d.startswith("matplotlib==") for d in meta["optional-dependencies"]["lab"])


def test_bpf_sources_are_package_data():
    meta = tomllib.loads((ROOT / "pyproject.toml").read_text())
    assert "bpf/*.c" in meta["tool"]["setuptools"]["package-data"]["hostctl"]
    assert bpf_dir() == Path(hostctl.__file__).resolve().parent / "bpf"
    for name in ("tl_classify.c", "hc_pace.c"):
        assert bpf_source(name).is_file()
    assert not (ROOT / "bpf").exists(), "the BPF sources live in hostctl/bpf only"


def test_a_missing_bpf_source_names_the_fix(monkeypatch, tmp_path):
    monkeypatch.setenv("HOSTCTL_BPF_DIR", str(tmp_path))
    with pytest.raises(ProbeError, match=r"tl_classify.c is missing: HOSTCTL_BPF_DIR names .*unset it"):
        bpf_source("tl_classify.c")


def test_plotting_without_matplotlib_says_which_extra(monkeypatch):
    from hostctl.bench import LAB_HINT, report

    monkeypatch.setitem(sys.modules, "matplotlib", None)  # import matplotlib -> ImportError
    monkeypatch.delitem(sys.modules, "matplotlib.figure", raising=False)
    monkeypatch.delitem(sys.modules, "matplotlib.backends.backend_agg", raising=False)
    with pytest.raises(ProbeError) as e:
        report.plot({"scenario": {"name": "x"}}, "/nonexistent/x")
    assert str(e.value) == LAB_HINT and "hostctl[lab]" in LAB_HINT
