"""What a training host installs: the BPF C sources ship as package data, matplotlib
is only in the lab (lab/pyproject.toml, hostctl-lab), nothing in hostctl/ imports the lab but
the guarded registration of its commands in hostctl/cli.py, and the daemon's commands
(start/status/stop/clean/flows) import nothing from the lab (hostctl_lab.bench, .testbed,
.workloads, .tools, .fluid, .analysis, .topology) or matplotlib.
The wheel itself, installed in a fresh venv, is run in tests/integration/test_wheel.py."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

import hostctl
from hostctl.datapath.classifier import bpf_dir, bpf_source
from hostctl.errors import ProbeError

ROOT = Path(__file__).resolve().parents[2]
LAB = ("hostctl_lab.bench", "hostctl_lab.testbed", "hostctl_lab.workloads", "hostctl_lab.tools", "hostctl_lab.fluid",
       "hostctl_lab.analysis", "hostctl_lab.topology", "matplotlib")

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
    code = f"LAB = {LAB!r}\n" + PROBE.replace("from hostctl import cli", "import hostctl_lab.bench.report\nfrom hostctl import cli")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    lab = json.loads([ln for ln in r.stderr.splitlines() if ln.startswith("LAB=")][-1][4:])
    assert "hostctl_lab.bench.report" in lab


def test_matplotlib_and_torch_are_only_in_the_lab():
    meta = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    product = meta["dependencies"] + [d for ds in meta["optional-dependencies"].values() for d in ds]
    assert not any(d.lower().startswith(("matplotlib", "torch")) for d in product)
    lab = tomllib.loads((ROOT / "lab" / "pyproject.toml").read_text())
    assert lab["project"]["name"] == "hostctl-lab"
    assert any(d.startswith("matplotlib==") for d in lab["project"]["dependencies"])
    assert lab["project"]["optional-dependencies"]["torch"] == ["torch==2.13.0"]
    assert f"hostctl=={hostctl.__version__}" in lab["project"]["dependencies"]


def test_the_product_packages_no_lab():
    find = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]["packages"]["find"]
    assert not any(p.startswith("hostctl_lab") or p == "hostctl*" for p in find["include"])
    for sub in ("bench", "testbed", "workloads", "tools"):
        assert not (ROOT / "hostctl" / sub).exists(), f"hostctl/{sub} is the lab's: lab/hostctl_lab/{sub}"


def test_nothing_in_hostctl_imports_the_lab_but_the_cli_registration():
    found = []
    for p in sorted((ROOT / "hostctl").rglob("*.py")):
        for n, line in enumerate(p.read_text().splitlines(), 1):
            if re.match(r"\s*(from|import)\s+hostctl_lab\b", line):
                found.append(f"{p.relative_to(ROOT)}:{n}: {line.strip()}")
    assert found == ["hostctl/cli.py:%d: from hostctl_lab.cli import register  # the one import of the lab in hostctl"
                     % next(n for n, ln in enumerate((ROOT / "hostctl" / "cli.py").read_text().splitlines(), 1)
                            if "from hostctl_lab.cli import register" in ln)]


def test_the_lab_layers_import_downwards():
    """testbed, workloads, tools and topology sit below bench: none of them imports hostctl_lab.bench
    (the testbed takes its LabFabric from hostctl_lab.topology, not from the scenario)."""
    lab = ROOT / "lab" / "hostctl_lab"
    found = [f"{p.relative_to(ROOT)}: {line.strip()}"
             for p in [lab / "topology.py", *sorted((lab / "testbed").rglob("*.py")),
                       *sorted((lab / "workloads").rglob("*.py")), *sorted((lab / "tools").rglob("*.py"))]
             for line in p.read_text().splitlines() if re.match(r"\s*(from|import)\s+hostctl_lab\.(bench|cli)\b", line)]
    assert found == []


def test_without_the_lab_its_commands_say_how_to_get_it(tmp_path):
    """hostctl without hostctl_lab: each lab command prints one line naming the fix and exits 2."""
    for argv in (["bench", "x.toml", "--repeat", "1"], ["bench-compare", "--help"], ["bench-pacing"], ["demo"],
                 ["testbed", "up", "--name", "x"]):
        code = ("import sys; sys.modules['hostctl_lab'] = None\nfrom hostctl.cli import main\n"
                f"sys.argv = ['hostctl', *{argv!r}]\nmain()")
        r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=tmp_path, timeout=60)
        assert r.returncode == 2, (argv, r.stderr)
        assert r.stderr == f"hostctl {argv[0]} is part of the lab: pip install ./lab (scripts/setup.sh installs it)\n"
        assert r.stdout == ""


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
    from hostctl_lab.bench import LAB_HINT, report

    monkeypatch.setitem(sys.modules, "matplotlib", None)  # import matplotlib -> ImportError
    monkeypatch.delitem(sys.modules, "matplotlib.figure", raising=False)
    monkeypatch.delitem(sys.modules, "matplotlib.backends.backend_agg", raising=False)
    with pytest.raises(ProbeError) as e:
        report.plot({"scenario": {"name": "x"}}, "/nonexistent/x")
    assert str(e.value) == LAB_HINT and "pip install ./lab" in LAB_HINT
