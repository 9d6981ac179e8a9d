"""The shipped examples stay valid: examples/hostctl.toml loads and documents every
key; examples/hostctl.service passes `systemd-analyze verify` and keeps the
settings hostctl depends on; examples/k8s/hostctl-daemonset.yaml is a well-formed
ConfigMap + DaemonSet with the namespaces, mounts and cleanup hostctl needs, and its
config loads."""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from hostctl import consts
from hostctl.config import JOB_KEYS, TOP_KEYS, Config, build_config
from hostctl.core.types import JobSpec
from hostctl.errors import ConfigError, ProbeError

ROOT = Path(__file__).resolve().parents[2]
EXAMPLE_TOML = ROOT / "examples" / "hostctl.toml"
EXAMPLE_UNIT = ROOT / "examples" / "hostctl.service"
INSTALLED_BIN = "/usr/local/bin/hostctl"
VENV_BIN = Path(sys.prefix) / "bin" / "hostctl"

# "# key = value" lines: settings a user can uncomment.
COMMENTED_SETTING = re.compile(r"^# (?P<key>[a-z_]+) = (?P<value>.*?)(?P<fail>\s+\(would fail: .*\))?$")


# ==========================================================================
# examples/hostctl.toml


def test_example_config_loads_with_the_expected_policy_and_jobs():
    cfg = build_config(str(EXAMPLE_TOML))
    assert cfg == Config(
        policy="rr",
        iface=None,
        link_rate_bps=None,
        other_rate="10%",
        bands=6,
        rr_interval_s=20.0,
        rescan_s=1.0,
        lease_s=1.0,
        metrics_port=None,
        cgroup="/",
        slot_s=0.06,
        phase_gap_s=0.02,
        jobs=(
            JobSpec(name="resnet50", ports=(9000,), model_bytes=98 * 2**20, comm="ps"),
            JobSpec(name="vgg16", ports=(9100, 9101), model_bytes=528 * 2**20, cap_bps=5 * 10**9),
            JobSpec(name="gpt-ring", ports=(7000,), model_bytes=2**30, comm="ring", ring_size=8),
            JobSpec(name="bert-large", match=r"torchrun|torch\.distributed\.(run|launch)", model_bytes=1_300_000_000),
        ),
    )


def test_example_config_active_values_are_the_documented_defaults():
    """The example claims "Default: ..." for the values it sets; keep that true."""
    cfg = build_config(str(EXAMPLE_TOML))
    assert cfg.policy == consts.DEFAULT_POLICY
    assert cfg.other_rate == consts.DEFAULT_OTHER_SHARE
    assert cfg.bands == consts.DEFAULT_BANDS
    assert cfg.rr_interval_s == consts.DEFAULT_RR_INTERVAL_S
    assert cfg.rescan_s == consts.DEFAULT_RESCAN_S
    assert cfg.lease_s == consts.DEFAULT_LEASE_S
    text = EXAMPLE_TOML.read_text()
    assert f'Default: "{consts.DEFAULT_POLICY}"' in text
    assert f'Default: "{consts.DEFAULT_OTHER_SHARE}"' in text
    assert f"Default: {consts.DEFAULT_BANDS}." in text
    assert f"Default: {consts.DEFAULT_RR_INTERVAL_S}." in text
    assert f"Default: {consts.DEFAULT_RESCAN_S}." in text
    assert f"Default: {consts.DEFAULT_LEASE_S}." in text
    assert f"{consts.DEFAULT_LINK_FRACTION:.0%} of the NIC speed" in text


@pytest.mark.parametrize("key", sorted(TOP_KEYS | JOB_KEYS))
def test_example_config_documents_every_key(key):
    text = EXAMPLE_TOML.read_text()
    if key == "jobs":
        assert re.search(r"^\[\[jobs\]\]$", text, re.M)
        return
    # set (or shown commented out) at least once, with a comment block mentioning it
    assert re.search(rf"^(# )?{key} = ", text, re.M), f"{key} is neither set nor shown in {EXAMPLE_TOML}"


@pytest.mark.parametrize("flag", ["--policy", "--iface", "--link-rate", "--other-rate", "--bands", "--rr-interval",
                                  "--rescan", "--lease", "--metrics-port", "--ports", "--pids", "--match",
                                  "--metrics-addr", "--log-level", "--phase-gap"])
def test_example_config_names_the_equivalent_flag(flag):
    assert flag in EXAMPLE_TOML.read_text()


def _commented_settings() -> list[tuple[int, str, str, bool]]:
    out = []
    for i, line in enumerate(EXAMPLE_TOML.read_text().splitlines()):
        m = COMMENTED_SETTING.match(line)
        if m and m["key"] in TOP_KEYS | JOB_KEYS:
            out.append((i, m["key"], m["value"], bool(m["fail"])))
    return out


def test_example_config_has_commented_settings():
    keys = {k for _, k, _, _ in _commented_settings()}
    assert {"iface", "link_rate", "metrics_port", "ports", "pids", "match"} <= keys


@pytest.mark.parametrize("lineno, key, value, would_fail", _commented_settings(),
                         ids=[f"line{i + 1}-{k}" for i, k, _, _ in _commented_settings()])
def test_example_config_commented_settings_are_valid(tmp_path, lineno, key, value, would_fail):
    """Uncommenting any one "# key = value" line gives a loadable config, except the
    lines marked "(would fail: ...)", which must fail the way they say."""
    lines = EXAMPLE_TOML.read_text().splitlines()
    lines[lineno] = f"{key} = {value}"
    p = tmp_path / "hostctl.toml"
    p.write_text("\n".join(lines) + "\n")
    if would_fail:
        with pytest.raises(ConfigError, match="give exactly one of ports, pids, match"):
            build_config(str(p))
    else:
        cfg = build_config(str(p))
        if key == "link_rate":
            assert cfg.link_rate_bps == 9_700_000_000
        elif key == "metrics_port":
            assert cfg.metrics_port == 9464
        elif key == "iface":
            assert cfg.iface == "eth0"
        elif key in ("ports", "pids", "match"):
            unnamed = [s for s in cfg.jobs if s.name is None]
            assert len(unnamed) == 1 and getattr(unnamed[0], key)


def test_example_config_dry_run(tmp_path):
    """The CLI accepts the example as is (interface and rate given, since the
    test host's default route and NIC speed are unknown)."""
    r = subprocess.run([str(VENV_BIN), "start", "--config", str(EXAMPLE_TOML), "--dry-run", "--iface", "lo",
                        "--link-rate", "1gbit"], capture_output=True, text=True, timeout=120, cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    assert '"6863:25"' in r.stdout  # 6 bands: 6863:20..25


# ==========================================================================
# examples/hostctl.service


def _unit_settings(text: str) -> dict[tuple[str, str], list[str]]:
    """(section, key) -> values, in order (systemd allows repeated keys)."""
    out: dict[tuple[str, str], list[str]] = {}
    section = ""
    for raw in text.splitlines():
        line = raw.strip()
        if not line or line[0] in "#;":
            continue
        if line.startswith("["):
            section = line.strip("[]")
            continue
        key, _, value = line.partition("=")
        out.setdefault((section, key.strip()), []).append(value.strip())
    return out


@pytest.fixture(scope="module")
def unit() -> dict[tuple[str, str], list[str]]:
    return _unit_settings(EXAMPLE_UNIT.read_text())


def test_unit_runs_hostctl_start_with_the_config(unit):
    # Type=notify: units ordered After=hostctl.service start once hostctl sent READY=1
    assert unit[("Service", "Type")] == ["notify"]
    assert unit[("Service", "ExecStart")] == [f"{INSTALLED_BIN} start --config /etc/hostctl/hostctl.toml"]
    assert unit[("Service", "ExecStopPost")] == [f"{INSTALLED_BIN} clean"]
    # reload = SIGHUP = read the config again (the daemon keeps running)
    assert unit[("Service", "ExecReload")] == ["/bin/kill -HUP $MAINPID"]


def test_unit_restart_and_stop_settings(unit):
    assert unit[("Service", "Restart")] == ["on-failure"]
    assert ("Service", "RestartSec") in unit
    assert unit[("Service", "KillSignal")] == ["SIGTERM"]
    assert ("Service", "TimeoutStopSec") in unit
    # config errors and missing kernel features are not fixed by restarting
    prevent = unit[("Service", "RestartPreventExitStatus")][0].split()
    assert str(ConfigError.exit_code) in prevent and str(ProbeError.exit_code) in prevent


def test_unit_ordering(unit):
    assert "network-online.target" in unit[("Unit", "After")][0].split()
    assert "network-online.target" in unit[("Unit", "Wants")][0].split()
    assert unit[("Install", "WantedBy")] == ["multi-user.target"]


def test_unit_keeps_what_hostctl_needs(unit):
    caps = set(unit[("Service", "CapabilityBoundingSet")][0].split())
    assert {"CAP_NET_ADMIN", "CAP_SYS_ADMIN", "CAP_BPF", "CAP_PERFMON"} <= caps
    # /run/hostctl holds the journal `hostctl clean` restores from: keep it across stops
    assert unit[("Service", "RuntimeDirectory")] == ["hostctl"]
    assert unit[("Service", "RuntimeDirectoryPreserve")] == ["yes"]
    assert unit.get(("Service", "User"), ["root"]) == ["root"]


@pytest.mark.parametrize("option", [
    "PrivateNetwork", "ProtectKernelModules", "ProtectKernelTunables", "MemoryDenyWriteExecute", "DynamicUser",
    "PrivateUsers", "InaccessiblePaths", "NetworkNamespacePath", "IPAddressDeny", "SystemCallFilter",
])
def test_unit_has_no_option_that_breaks_hostctl(unit, option):
    assert ("Service", option) not in unit


def _with_venv_bin(text: str) -> str:
    """The unit with its Exec*= lines pointing at this venv's hostctl."""
    lines = text.splitlines()
    exec_lines = [i for i, ln in enumerate(lines) if ln.startswith(("ExecStart=", "ExecStopPost="))]
    assert [lines[i].split("=", 1)[0] for i in exec_lines] == ["ExecStart", "ExecStopPost"]
    for i in exec_lines:
        assert f"={INSTALLED_BIN} " in lines[i]
        lines[i] = lines[i].replace(f"={INSTALLED_BIN} ", f"={VENV_BIN} ")
    return "\n".join(lines) + "\n"


def _verify(unit_path: Path) -> subprocess.CompletedProcess:
    return subprocess.run(["systemd-analyze", "verify", "--man=no", str(unit_path)],
                          capture_output=True, text=True, timeout=120)


def _mentions(r: subprocess.CompletedProcess, unit_path: Path) -> list[str]:
    """Output lines about our unit (verify also reports unrelated units of the host)."""
    return [ln for ln in (r.stdout + r.stderr).splitlines() if unit_path.name in ln or str(unit_path) in ln]


needs_systemd_analyze = pytest.mark.skipif(shutil.which("systemd-analyze") is None,
                                           reason="systemd-analyze is not installed")


@needs_systemd_analyze
def test_unit_passes_systemd_analyze_verify(tmp_path):
    """verify checks that Exec binaries exist, so verify a copy that points at this
    venv's hostctl. It works without systemd as PID 1."""
    assert VENV_BIN.exists(), f"{VENV_BIN} missing: install hostctl into the venv"
    copy = tmp_path / "hostctl.service"
    copy.write_text(_with_venv_bin(EXAMPLE_UNIT.read_text()))
    r = _verify(copy)
    print(f"systemd-analyze verify exit {r.returncode}\nstdout:\n{r.stdout}\nstderr:\n{r.stderr}")
    assert r.returncode == 0, r.stderr
    # verify exits 0 on unknown keys and bad values; it only warns, naming the unit
    assert _mentions(r, copy) == [], r.stderr


@needs_systemd_analyze
def test_systemd_analyze_verify_detects_mistakes(tmp_path):
    """The check above is meaningful here: verify reports a typo'd key and a missing
    binary for our unit."""
    text = _with_venv_bin(EXAMPLE_UNIT.read_text())
    copy = tmp_path / "hostctl.service"
    copy.write_text(text.replace("Restart=on-failure", "Restart=on-failure\nRestrat=always"))
    assert any("Restrat" in ln for ln in _mentions(_verify(copy), copy))
    copy.write_text(text.replace(str(VENV_BIN), str(tmp_path / "no-such-hostctl")))
    r = _verify(copy)
    assert r.returncode != 0 and any("no-such-hostctl" in ln for ln in _mentions(r, copy))


def test_example_switch_topology_parses_with_paths_through_agg():
    from hostctl.core.topology import Topology

    path = EXAMPLE_TOML.parent / "switch-topology.toml"
    t = Topology.parse(path.read_text(), filename=str(path))
    assert len(t.hosts) == 8 and sorted(t.switch_names()) == ["agg", "tor0", "tor1"]
    assert t.path_ids("gpu01", "gpu06") == ("gpu01>tor0", "tor0>agg", "agg>tor1", "tor1>gpu06")
    assert t.path_ids("10.0.1.11", "10.0.1.12") == ("gpu01>tor0", "tor0>gpu02")


# ==========================================================================
# examples/k8s: the DaemonSet and the image sketch

K8S_YAML = ROOT / "examples" / "k8s" / "hostctl-daemonset.yaml"
K8S_DOCKERFILE = ROOT / "examples" / "k8s" / "Dockerfile"


@pytest.fixture(scope="module")
def k8s():
    yaml = pytest.importorskip("yaml")  # the dev extra pins PyYAML
    docs = [d for d in yaml.safe_load_all(K8S_YAML.read_text()) if d is not None]
    by_kind = {d["kind"]: d for d in docs}
    assert sorted(by_kind) == ["ConfigMap", "DaemonSet"] and len(docs) == 2
    for d in docs:
        assert d["apiVersion"] == {"ConfigMap": "v1", "DaemonSet": "apps/v1"}[d["kind"]]
        assert d["metadata"]["name"] and d["metadata"]["namespace"] == "kube-system"
    return by_kind


def _pod(k8s) -> dict:
    return k8s["DaemonSet"]["spec"]["template"]["spec"]


def _container(k8s) -> dict:
    (c,) = _pod(k8s)["containers"]
    return c


def test_daemonset_selector_matches_its_pods(k8s):
    spec = k8s["DaemonSet"]["spec"]
    labels = spec["template"]["metadata"]["labels"]
    assert spec["selector"]["matchLabels"].items() <= labels.items() and spec["selector"]["matchLabels"]


def test_daemonset_runs_in_the_nodes_network_and_pid_namespaces(k8s):
    pod = _pod(k8s)
    assert pod["hostNetwork"] is True and pod["hostPID"] is True
    assert pod["dnsPolicy"] == "ClusterFirstWithHostNet"
    assert pod["tolerations"] and all(t["operator"] in ("Exists", "Equal") for t in pod["tolerations"])


def test_daemonset_is_privileged_as_bidirectional_propagation_requires(k8s):
    """Kubernetes accepts mountPropagation: Bidirectional only in privileged containers."""
    pod = _pod(k8s)
    for c in [*pod.get("initContainers", []), *pod["containers"]]:
        bidir = [m for m in c["volumeMounts"] if m.get("mountPropagation") == "Bidirectional"]
        if bidir:
            assert c["securityContext"]["privileged"] is True, c["name"]


def test_daemonset_mounts_what_hostctl_needs(k8s):
    pod = _pod(k8s)
    volumes = {v["name"]: v for v in pod["volumes"]}
    for c in [*pod.get("initContainers", []), *pod["containers"]]:
        names = [m["name"] for m in c["volumeMounts"]]
        assert len(names) == len(set(names)) and set(names) <= set(volumes), c["name"]
    mounts = {m["mountPath"]: m for m in _container(k8s)["volumeMounts"]}

    def host(path):
        return volumes[mounts[path]["name"]].get("hostPath", {}).get("path")

    assert host("/sys/fs/bpf") == "/sys/fs/bpf" and mounts["/sys/fs/bpf"]["mountPropagation"] == "Bidirectional"
    assert host("/sys/fs/cgroup") == "/sys/fs/cgroup"
    for ro in ("/lib/modules", "/usr/src"):  # bcc's kernel headers
        assert host(ro) == ro and mounts[ro]["readOnly"] is True
    assert host(consts.RUN_DIR) == consts.RUN_DIR and not mounts[consts.RUN_DIR].get("readOnly")
    cfg = volumes[mounts["/etc/hostctl"]["name"]]
    assert cfg["configMap"]["name"] == k8s["ConfigMap"]["metadata"]["name"]


def test_daemonset_starts_hostctl_with_the_configmaps_config(k8s, tmp_path):
    c = _container(k8s)
    cmd = c["command"]
    assert cmd[:2] == ["hostctl", "start"] and cmd[cmd.index("--config") + 1] == "/etc/hostctl/hostctl.toml"
    data = k8s["ConfigMap"]["data"]
    assert list(data) == ["hostctl.toml"]
    path = tmp_path / "hostctl.toml"
    path.write_text(data["hostctl.toml"])
    cfg = build_config(str(path))
    assert cfg.policy in ("one", "rr") and cfg.jobs


def test_daemonset_restores_the_nic_when_a_pod_goes(k8s):
    """preStop stops the daemon (it restores on exit) or cleans; an init container cleans
    what a killed pod left before the daemon starts."""
    c = _container(k8s)
    pre = " ".join(c["lifecycle"]["preStop"]["exec"]["command"])
    assert "hostctl stop" in pre and "hostctl clean" in pre
    (init,) = _pod(k8s)["initContainers"]
    assert init["command"] == ["hostctl", "clean"] and init["image"] == c["image"]
    assert {m["mountPath"] for m in init["volumeMounts"]} >= {consts.RUN_DIR, "/sys/fs/bpf", "/sys/fs/cgroup"}
    assert _pod(k8s)["terminationGracePeriodSeconds"] >= 10


def test_daemonset_resources_have_a_memory_limit_and_no_cpu_limit(k8s):
    res = _container(k8s)["resources"]
    assert res["requests"]["cpu"] and res["requests"]["memory"] and res["limits"]["memory"]
    assert "cpu" not in res["limits"]  # throttling would delay rotations and pacing slots


def test_dockerfile_sketch_installs_bcc_and_the_wheel():
    text = K8S_DOCKERFILE.read_text()
    assert text.startswith("#") and "FROM debian:12" in text
    assert "python3-bpfcc" in text and "--system-site-packages" in text and "hostctl-*.whl" in text
    assert "pip install bcc" not in text  # the PyPI "bcc" is an unrelated package
