"""hostctl.policy: the one table of policies. Every row validates and drives the daemon, the
variants the bench runs resolve to rows, a new policy is a row plus a Rates class (no other file),
and no code outside hostctl/policy compares policy names."""

import ast
import json
import pathlib
import subprocess
import sys

import pytest

from hostctl import policy
from hostctl.config import Config, build_config
from hostctl.core.bands import BAND_RULES
from hostctl.core.plan import build_tc_plan
from hostctl.core.types import FlowKey, Job, JobSpec
from hostctl.daemon import Daemon
from hostctl.datapath import FlowRecord
from hostctl.datapath.fake import FakeDatapath
from hostctl.errors import ConfigError

from tests.unit.test_daemon import Clock, ScriptedDiscovery

ROOT = pathlib.Path(__file__).resolve().parents[2]
PS = "10.0.0.1"


def _config(p: policy.Policy, **kw) -> Config:
    return build_config(policy=p.name, ports="9000", cap="10mbit" if p.rates == "cap" else None, **kw)


@pytest.mark.parametrize("p", policy.POLICIES.values(), ids=lambda p: p.name)
def test_every_row_is_consistent_and_validates(p):
    assert p.bands in BAND_RULES
    assert p.rates is None or p.rates in policy.RATES
    assert p.default_order in p.job_orders
    assert "none" in p.job_orders
    c = _config(p)
    assert c.spec is p and c.pacing == p.pacing and c.plans_mlcc == p.plans_mlcc
    d = policy.make_driver(c, None, link_rate_bps=10**9)
    try:
        assert (d.pace is not None) == p.pacing
        jobs = {"a": Job("a", "config", listen_ports=(9000,), model_bytes=10),
                "b": Job("b", "config", listen_ports=(9001,), model_bytes=20)}
        assignment, table = d.classifier(jobs, d.epoch(1000.0))
        # a policy with bands puts two jobs in two bands; one without leaves both in the default class
        assert sorted(assignment.values()) == ([0, 1] if p.classifies else [])
        assert (d.describe(jobs) is not None) == p.pacing
    finally:
        d.close()


def test_the_checks_name_the_policies_from_the_table():
    with pytest.raises(ConfigError, match="ingress_rate orders received traffic by the bands of policies one and rr"):
        build_config(policy="cap", ports="9000", cap="1mbit", ingress_rate="97%")
    with pytest.raises(ConfigError, match=r"needs --policy mlcc with --switch ENDPOINT \(or --policy mlcc-bands"):
        build_config(policy="one", ports="9000", job_order="fixed")
    with pytest.raises(ConfigError, match="unknown policy 'best': choose one of fifo, one, rr, cap, mlcc, mlcc-bands"):
        build_config(policy="best", ports="9000")


def test_every_bench_variant_is_a_row_with_options():
    from hostctl_lab.bench.scenario import POLICIES

    assert POLICIES == tuple(policy.VARIANTS)
    assert set(policy.POLICIES) <= set(policy.VARIANTS)  # each policy runs under its own name
    for v in policy.VARIANTS.values():
        assert v.policy in policy.POLICIES
        assert v.job_order is None or v.job_order in v.spec.job_orders or v.fabric_prio
        assert not v.switch or v.spec.switch
        assert not v.ingress or v.spec.ingress
        assert all(p in policy.VARIANTS for p in v.parts)
    assert policy.variant("mlcc-local").policy == "mlcc" and not policy.variant("mlcc-local").switch
    assert policy.variant("mlcc-bands").job_order == "fixed"  # differs from mlcc-fixed by its bands only
    with pytest.raises(ConfigError, match="unknown policy 'x'"):
        policy.variant("x")


class ShareRates:
    """A new pacing policy for the test: every flow of a job paced at a fixed 1 MB/s."""

    def __init__(self, config, **_context):
        self.config = config

    def observe(self, ctl, readout, t):
        pass

    def plan(self, ctl, jobs):
        return {k: 1_000_000 for flows in ctl.job_flows().values() for k in flows}, {}

    def schedule_of(self, key):
        return None

    def describe(self, jobs):
        return {"share_Bps": 1_000_000}

    def status(self):
        return {"mlcc": None}

    def close(self):
        pass


def test_a_new_policy_is_a_row_and_a_rates_class(monkeypatch):
    """What docs/architecture.md says adding a policy takes: a row and a Rates class. The config
    accepts the name, the daemon runs its driver and the kernel gets its rates."""
    monkeypatch.setitem(policy.RATES, "share", f"{__name__}:ShareRates")
    monkeypatch.setitem(policy.POLICIES, "share", policy.Policy("share", "1 MB/s per flow", rates="share"))
    cfg = Config(policy="share", jobs=(JobSpec(name="a", ports=(9000,)),)).validate()
    plan = build_tc_plan("eth0", 10**9, 6, 10**8, cfg.spec.classifies)
    dp = FakeDatapath()
    mono = Clock(100.0)
    d = Daemon(cfg, plan, dp, ScriptedDiscovery([Job("a", "config", listen_ports=(9000,))]), wall=Clock(1000.0),
               mono=mono)
    dp.setup(plan)
    d.scan()
    d.pace_tick(mono.t)
    key = FlowKey(PS, 9000, "10.0.0.2", 40000)
    dp.kflows[key] = FlowRecord(key, d.pace.slots["a"], 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0)
    mono.t += 0.06
    d.pace_tick(mono.t)
    assert dp.pace_table.flow_rates == {key: 1_000_000}
    assert d.status(max_age_s=float("inf"))["policy"] == "share"


def test_dry_run_prints_what_the_driver_decides():
    """--dry-run runs the policy's driver (no copy of the daemon's logic): mlcc-bands shows its bands in
    mlcc's order and mlcc's pacing, with no root and no kernel change."""
    hostctl = pathlib.Path(sys.executable).parent / "hostctl"
    r = subprocess.run([str(hostctl), "start", "--dry-run", "--policy", "mlcc-bands",
                        "--ports", "9000", "--iface", "lo", "--link-rate", "1gbit", "--cgroup", "/"],
                       capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    out = json.loads(r.stdout)
    assert out["band_order"] == "fixed" and out["plan"]["classify"]
    assert out["pacing"]["mlcc"]["job_order"] == "fixed" and out["pacing"]["mlcc"]["mode"] == "local"


def _policy_names() -> set[str]:
    return set(policy.VARIANTS) | set(policy.POLICIES)


def _names_policy(node: ast.AST) -> bool:
    """A name or attribute that holds a policy: policy, self.policy, cfg.policy, pol."""
    name = node.id if isinstance(node, ast.Name) else node.attr if isinstance(node, ast.Attribute) else ""
    return name in ("policy", "pol") or name.endswith("_policy")


def _str_consts(node: ast.AST) -> set[str]:
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return {node.value}
    if isinstance(node, (ast.Tuple, ast.List, ast.Set)):
        return set().union(*(_str_consts(e) for e in node.elts)) if node.elts else set()
    return set()


# independent models of the policies: by design they share no code with hostctl's (docs/benchmarks.md)
INDEPENDENT_MODELS = {"lab/hostctl_lab/fluid/placement1.py"}


def test_no_code_outside_the_policy_package_compares_policy_names():
    names = _policy_names()
    found = []
    trees = [ROOT / "hostctl", ROOT / "switchemu", ROOT / "lab"]
    for f in sorted(p for t in trees if t.exists() for p in t.rglob("*.py")):
        if (ROOT / "hostctl" / "policy") in f.parents or str(f.relative_to(ROOT)) in INDEPENDENT_MODELS:
            continue
        for node in ast.walk(ast.parse(f.read_text(), str(f))):
            if not isinstance(node, ast.Compare):
                continue
            sides = [node.left, *node.comparators]
            if any(_names_policy(s) for s in sides) and any(_str_consts(s) & names for s in sides):
                found.append(f"{f.relative_to(ROOT)}:{node.lineno}")
    assert found == []


def test_the_scan_finds_a_comparison():
    """The scan above can fail: it flags the comparisons it is there to forbid."""
    tree = ast.parse('if cfg.policy == "cap" or pol in ("mlcc", "x"): pass')
    flagged = [n for n in ast.walk(tree) if isinstance(n, ast.Compare)
               and any(_names_policy(s) for s in [n.left, *n.comparators])
               and any(_str_consts(s) & _policy_names() for s in [n.left, *n.comparators])]
    assert len(flagged) == 2


def test_docs_list_every_policy_and_variant():
    text = (ROOT / "docs" / "policies.md").read_text()
    missing = [n for n in [*policy.POLICIES, *policy.VARIANTS] if f"`{n}`" not in text]
    assert missing == []
