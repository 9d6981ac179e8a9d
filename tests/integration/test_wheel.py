"""The wheel, built from the repository and installed in a fresh venv, is a complete
install: from a folder outside the checkout (which is not on sys.path), the bands
daemon classifies a real flow and restores the qdisc at stop, and the pacer paces a
real flow and leaves nothing attached or pinned at stop. The wheel holds no lab (hostctl_lab,
hostctl/bench|testbed|workloads|tools): without it the daemon's commands run and the lab's say
how to get it. The traffic (hostctl_lab.tools.bulk) comes from the checkout's venv.

Built once per module: the sources tracked by git (plus untracked, not ignored ones)
are copied to a temp folder and built there with `pip wheel --no-deps` (nothing is
written into the checkout), then installed with its dependencies (pip's index) in a
venv of Debian's python with --system-site-packages (for bcc)."""

from __future__ import annotations

import json
import os
import random
import re
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

from tests import oracle
from tests.conftest import wait_for

pytestmark = [pytest.mark.root, pytest.mark.netns, pytest.mark.bpf, pytest.mark.slow]

ROOT = Path(__file__).resolve().parents[2]
DEBIAN_PY = "/usr/bin/python3"  # bcc's python package is in its dist-packages
LAB_PY = sys.executable  # the traffic tools are the lab's (hostctl_lab.tools.bulk): the checkout's venv runs them


def _sources(dst: Path) -> None:
    files = subprocess.run(["git", "ls-files", "-co", "--exclude-standard", "-z"], cwd=ROOT, check=True,
                           capture_output=True).stdout.decode().split("\0")
    for rel in filter(None, files):
        src = ROOT / rel
        if src.is_file():
            (dst / rel).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(src, dst / rel)


@pytest.fixture(scope="module")
def wheel_env(tmp_path_factory):
    """(venv bin folder, a cwd outside the checkout, env without the checkout on the path)."""
    if not shutil.which("git") or not (ROOT / ".git").exists():
        pytest.skip("the wheel is built from a git checkout")
    tmp = tmp_path_factory.mktemp("wheel")
    src, dist, venv, cwd = tmp / "src", tmp / "dist", tmp / "venv", tmp / "elsewhere"
    for d in (src, dist, cwd):
        d.mkdir()
    _sources(src)
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV", "HOSTCTL_BPF_DIR")}
    run = dict(check=True, capture_output=True, text=True, env=env, cwd=cwd, timeout=300)
    subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "-q", "-w", str(dist), str(src)], **run)
    (whl,) = dist.glob("hostctl-*.whl")
    whl = tmp / whl.name
    shutil.copy2(dist / whl.name, whl)
    subprocess.run([DEBIAN_PY, "-m", "venv", "--system-site-packages", str(venv)], **run)
    subprocess.run([str(venv / "bin" / "pip"), "install", "-q", str(whl)], **run)
    shutil.rmtree(src)  # nothing of the sources is left to be found but the installed package
    where = subprocess.run([str(venv / "bin" / "python"), "-c",
                            "import hostctl, json, sys; print(json.dumps([hostctl.__file__, sys.path]))"],
                           **run).stdout
    pkg, path = json.loads(where)
    assert pkg.startswith(str(venv)), pkg
    assert not any(p and Path(p).resolve() == ROOT for p in path), path
    return venv / "bin", cwd, env, whl


def _subnet() -> str:
    return f"10.{random.randint(200, 250)}.{random.randint(0, 255)}"


def _daemon(args, env, cwd):
    return subprocess.Popen(args, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env, cwd=cwd)


def _status(host, bin_dir, env, cwd):
    r = subprocess.run(["ip", "netns", "exec", host.ns, str(bin_dir / "hostctl"), "status", "--json"],
                       capture_output=True, text=True, env=env, cwd=cwd, timeout=30)
    return json.loads(r.stdout) if r.returncode == 0 else None


def test_the_wheel_runs_the_bands_daemon_outside_the_checkout(wheel_env, make_pair):
    bin_dir, cwd, env, _ = wheel_env
    pair = make_pair(_subnet())
    ps, wk, port = pair.ps, pair.wk, 5301
    before = oracle.qdiscs(ps.ns, ps.dev)
    for p in (port, port + 1):  # two jobs: with one job there is nothing to order and no band
        pair.start(ps, LAB_PY, "-m", "hostctl_lab.tools.bulk", "serve", "--bind", ps.addr, "--port", str(p),
                   cwd=cwd, env=env)
    d = _daemon(["ip", "netns", "exec", ps.ns, str(bin_dir / "hostctl"), "start", "--policy", "one",
                 "--iface", ps.dev, "--link-rate", "200mbit", "--ports", f"{port},{port + 1}", "--rescan", "0.5"],
                env, cwd)
    pair.procs.append(d)

    def ready():
        if d.poll() is not None:
            raise AssertionError(f"daemon exited: {d.stderr.read()}")
        st = _status(ps, bin_dir, env, cwd)
        return st if st and len(st["jobs"]) == 2 and all(j["band"] is not None for j in st["jobs"]) else None

    jobs = {j["job_id"]: j for j in wait_for(ready, 30, 0.2, "the daemon lists both jobs in bands")["jobs"]}
    job = jobs[f"ps:{ps.addr}:{port}"]
    assert job["band"] == 0 and job["classid"] != "6863:10"
    assert oracle.filters(ps.ns, ps.dev, "6863:")[0]["options"]["bpf_name"] == "tl_classify"
    rx = pair.start(wk, LAB_PY, "-m", "hostctl_lab.tools.bulk", "recv", "--connect", f"{ps.addr}:{port}",
                    "--seconds", "2", cwd=cwd, env=env)
    out, err = rx.communicate(timeout=30)
    assert rx.returncode == 0, err
    got = sum(json.loads(out)["bytes"])
    classified = oracle.class_bytes(ps.ns, ps.dev).get(job["classid"], 0)
    assert got > 1_000_000 and classified >= 0.9 * got, (got, classified)  # the flow went through its band
    r = subprocess.run(["ip", "netns", "exec", ps.ns, str(bin_dir / "hostctl"), "stop"], capture_output=True,
                       text=True, env=env, cwd=cwd, timeout=30)
    assert r.returncode == 0, r.stderr
    d.wait(10)
    assert d.returncode == 0, d.stderr.read()
    assert oracle.qdiscs(ps.ns, ps.dev) == before


def test_the_wheel_runs_the_pacer_outside_the_checkout(wheel_env, make_pair, cgroup):
    from hostctl.datapath import bpfsys, pacer

    bin_dir, cwd, env, _ = wheel_env
    pair = make_pair(_subnet())
    ps, wk, port = pair.ps, pair.wk, 5311
    srv = subprocess.Popen(ps.argv_in(cgroup, LAB_PY, "-m", "hostctl_lab.tools.bulk", "serve", "--bind", ps.addr,
                                      "--port", str(port)), stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                           text=True, env=env, cwd=cwd)
    pair.procs.append(srv)
    d = _daemon(ps.nsenter(str(bin_dir / "hostctl"), "start", "--policy", "cap", "--cap", "50mbit",
                           "--iface", ps.dev, "--link-rate", "1gbit", "--ports", str(port), "--cgroup", cgroup,
                           "--rescan", "0.5"), env, cwd)
    pair.procs.append(d)

    def ready():
        if d.poll() is not None:
            raise AssertionError(f"daemon exited: {d.stderr.read()}")
        st = _status(ps, bin_dir, env, cwd)
        return st if st and st["jobs"] and st.get("pacing") else None

    wait_for(ready, 30, 0.2, "the pacing daemon ready")
    scope = pacer.scope_id(cgroup)
    assert pacer.load_owner(scope)["pid"] == d.pid
    rx = pair.start(wk, LAB_PY, "-m", "hostctl_lab.tools.bulk", "recv", "--connect", f"{ps.addr}:{port}",
                    "--seconds", "3", "--bucket", "0.1", cwd=cwd, env=env)
    row = wait_for(lambda: (s := _status(ps, bin_dir, env, cwd)) and s["pacing"]["flows"]
                   and s["pacing"]["flows"][0], 10, 0.2, "the flow in the pacer's status")
    out, err = rx.communicate(timeout=30)
    assert rx.returncode == 0, err
    res = json.loads(out)
    b = res["bytes"][10:30]  # seconds 1-3: after the daemon found the flow
    mbit = sum(b) * 8 / (len(b) * res["bucket_s"]) / 1e6
    assert row["applied_bps"] == 50_000_000
    assert mbit == pytest.approx(50, rel=0.2), mbit
    r = subprocess.run(["ip", "netns", "exec", ps.ns, str(bin_dir / "hostctl"), "stop"], capture_output=True,
                       text=True, env=env, cwd=cwd, timeout=30)
    assert r.returncode == 0, r.stderr
    d.wait(10)
    assert pacer.load_owner(scope) is None and not os.path.exists(f"/sys/fs/bpf/hostctl/{scope}")
    fd = os.open(cgroup, os.O_RDONLY | os.O_DIRECTORY)
    try:
        assert bpfsys.prog_query(fd, bpfsys.BPF_CGROUP_SOCK_OPS) == []
    finally:
        os.close(fd)


def test_the_wheel_holds_no_lab(wheel_env):
    *_, whl = wheel_env
    names = zipfile.ZipFile(whl).namelist()
    assert any(n.startswith("hostctl/cli.py") for n in names)
    lab = [n for n in names if n.startswith("hostctl_lab") or re.match(r"hostctl/(bench|testbed|workloads|tools)/", n)]
    assert lab == []


def test_without_the_lab_the_daemon_commands_run_and_the_lab_commands_name_it(wheel_env, tmp_path):
    """The wheel's venv has no hostctl_lab: start/status/stop/clean/flows import nothing from the lab
    (they run to their own errors, no traceback), and `hostctl bench`/`demo`/... print one line, exit 2."""
    bin_dir, cwd, env, _ = wheel_env
    env = {**env, "HOSTCTL_RUN_DIR": str(tmp_path)}
    r = subprocess.run([str(bin_dir / "python"), "-c", "import hostctl_lab"], capture_output=True, text=True,
                       env=env, cwd=cwd, timeout=60)
    assert r.returncode != 0 and "No module named 'hostctl_lab'" in r.stderr
    # clean is not run: as root it would act on this machine (its imports are start's and stop's)
    for argv in (["status"], ["stop"], ["flows", "--ports", "1", "--iface", "hctnoiface0"], ["clean", "--help"],
                 ["start", "--iface", "hctnoiface0", "--policy", "one", "--ports", "1"]):
        r = subprocess.run([str(bin_dir / "hostctl"), *argv], capture_output=True, text=True, env=env, cwd=cwd,
                           timeout=60)
        assert "Traceback" not in r.stderr and "lab" not in r.stderr, (argv, r.stderr)
    for argv in (["bench", "x.toml"], ["bench-compare", "a", "b", "c"], ["bench-pacing", "--quick"], ["demo"],
                 ["testbed", "status"]):
        r = subprocess.run([str(bin_dir / "hostctl"), *argv], capture_output=True, text=True, env=env, cwd=cwd,
                           timeout=60)
        assert r.returncode == 2 and r.stdout == "", (argv, r.stderr)
        assert r.stderr == f"hostctl {argv[0]} is part of the lab: pip install ./lab (scripts/setup.sh installs it)\n"
