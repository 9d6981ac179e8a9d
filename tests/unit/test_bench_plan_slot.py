"""benchmarks/bench_plan_slot.py: its cases run, its inputs are what it says, its results file and table."""

from __future__ import annotations

import importlib.util
import json
import os
import sys

import numpy as np

from hostctl.core.mlcc import MlccParams
from hostctl.core.mlccplan import plan_slot

_DIR = os.path.join(os.path.dirname(__file__), "..", "..", "benchmarks")
# bench_plan_slot imports its sibling bench_mlcc (the script's folder is on sys.path when it runs)
_sib = importlib.util.spec_from_file_location("bench_mlcc", os.path.join(_DIR, "bench_mlcc.py"))
sys.modules["bench_mlcc"] = importlib.util.module_from_spec(_sib)
_sib.loader.exec_module(sys.modules["bench_mlcc"])
_PATH = os.path.join(_DIR, "bench_plan_slot.py")
_spec = importlib.util.spec_from_file_location("bench_plan_slot", _PATH)
bench = importlib.util.module_from_spec(_spec)
sys.modules["bench_plan_slot"] = bench
_spec.loader.exec_module(bench)


def test_inputs_are_switch_like_and_seeded():
    P = MlccParams()
    a = bench.make_slot(np.random.default_rng(1), 100, 4, P.K, True, True)
    b = bench.make_slot(np.random.default_rng(1), 100, 4, P.K, True, True)
    np.testing.assert_array_equal(a["G_bytes"], b["G_bytes"])
    path = a["path"]
    lengths = (path >= 0).sum(axis=1)
    assert (path[:, 0] == 0).all() and lengths.min() >= 2 and lengths.max() <= 4 and path.max() < bench.L
    G = a["G_bytes"]
    assert np.isnan(G).any() and (G == 0).any() and (G > 0).any()  # unknown, idle and known sizes
    assert set(np.unique(a["wave"])) <= set(range(4)) and np.isfinite(a["ceiling_bytes"]).any()
    d = plan_slot(params=P, **a)
    assert d.L_virtual > 0  # the NIC at least is shared by local jobs with different views
    assert d.applied_Bps.shape == (100,)


def test_reference_is_fixed():
    r = bench.Reference()
    assert r() == bench.Reference()()


def test_cases_run_and_write_results(tmp_path, capsys):
    out = tmp_path / "r.json"
    assert bench.main(["--slots", "3", "--repeat", "1", "--flows", "5", "--jobs", "1,2", "--out", str(out)]) == 0
    doc = json.loads(out.read_text())
    assert len(doc["results"]) == 2 * 2 * 2  # J x order x alg2
    for r in doc["results"]:
        assert r["decision_cpu_ms"]["p90"] > 0 and r["reference_wall_ms"]["p90"] > 0
        assert r["p90_wall_over_reference"] > 0
    capsys.readouterr()
    assert bench.main(["--table", str(out)]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].startswith("| n | J |") and len(lines) == 2 + 8
    assert bench.main(["--flows", "x"]) == 2
    assert bench.main(["--table", str(tmp_path / "missing.json")]) == 2


def test_baseline_from_git_is_timed_beside_and_compared(tmp_path):
    import shutil
    import subprocess
    root = os.path.join(os.path.dirname(__file__), "..", "..")
    if shutil.which("git") is None or subprocess.run(["git", "-C", root, "rev-parse", "HEAD"],
                                                     capture_output=True).returncode != 0:
        import pytest
        pytest.skip("needs the git checkout")
    out = tmp_path / "b.json"
    assert bench.main(["--slots", "2", "--repeat", "1", "--flows", "4", "--jobs", "2", "--baseline", "HEAD",
                       "--out", str(out)]) == 0
    for r in json.loads(out.read_text())["results"]:
        assert r["baseline_cpu_ms"]["p90"] > 0 and 0.0 <= r["same_decisions"] <= 1.0
    assert bench.main(["--slots", "2", "--flows", "4", "--baseline", "no-such-revision"]) == 2
