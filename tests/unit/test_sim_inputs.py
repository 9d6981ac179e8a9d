"""The simulator's inputs: fabrics (built-in, Lingjun, files) and jobs (Philly rule, synthetic)."""

from __future__ import annotations

import numpy as np
import pytest

from hostctl.errors import ConfigError
from hostctl_lab.sim import topo, workload


def test_mlcc_tree_has_the_papers_tiers():
    fab = topo.mlcc_tree(1000)
    assert fab.n_hosts == 1000
    assert len(fab.topo.switches) == 1 + 10 + 100
    # h0 -> h999: NIC, ToR up, edge up, edge down, ToR down, ToR port
    p = fab.path(0, 999)
    assert [fab.capacity[ln] * 8 / 1e9 for ln in p] == [10, 20, 40, 40, 20, 10]
    assert fab.nic[p].tolist() == [True] + [False] * 5
    assert len(fab.path(0, 1)) == 2  # same rack: NIC and ToR port


def test_oversubscription_sets_the_uplinks():
    fab = topo.mlcc_tree(200, oversub=4)
    p = fab.path(0, 199)
    assert fab.capacity[p[1]] * 8 / 1e9 == pytest.approx(10 * 10 / 4)
    assert fab.capacity[p[2]] * 8 / 1e9 == pytest.approx(10 * 25 / 4)


def test_lingjun_loads_847_hosts():
    fab = topo.load("lingjun")
    assert fab.n_hosts == 847
    assert len(fab.path(0, 846)) in (2, 4, 6)


def test_topology_errors_are_one_line(tmp_path):
    with pytest.raises(ConfigError, match="unknown topology"):
        topo.load("fat-tree")
    with pytest.raises(ConfigError, match="has 847 hosts"):
        topo.load("lingjun", 100)
    f = tmp_path / "t.toml"
    f.write_text('[[switch]]\nname = "s"\nhosts = ["a", "b"]\n')
    assert topo.load(str(f)).n_hosts == 2


def test_philly_rule():
    jobs = workload.philly(None, 200, seed=1)
    assert len(jobs) == 200
    assert jobs[0].arrival_s == 0 and all(b.arrival_s >= a.arrival_s for a, b in zip(jobs, jobs[1:]))
    assert all(j.gpus >= 2 and j.iterations >= 1 and j.model in workload.ZOO for j in jobs)
    # same seed, same models; another seed, other models, same arrivals and GPUs
    again, other = workload.philly(None, 200, seed=1), workload.philly(None, 200, seed=2)
    assert again == jobs
    assert [j.model for j in other] != [j.model for j in jobs]
    assert [(j.arrival_s, j.gpus) for j in other] == [(j.arrival_s, j.gpus) for j in jobs]
    # iterations x the reference iteration time is the trace's duration (to within one iteration)
    capped = workload.philly(None, 200, seed=1, max_iterations=10)
    assert max(j.iterations for j in capped) == 10


def test_philly_bad_file(tmp_path):
    f = tmp_path / "x.csv"
    f.write_text("a,b\n1,2\n")
    with pytest.raises(ConfigError, match="expected columns"):
        workload.philly(str(f), 10)
    with pytest.raises(ConfigError, match="cannot read"):
        workload.philly(str(tmp_path / "missing.csv"), 10)


def test_synthetic_mix():
    jobs = workload.synthetic(1600, seed=3)
    g = np.array([j.gpus for j in jobs])
    for gpus, share in ((1, 80 / 160), (8, 30 / 160), (32, 2 / 160)):
        assert abs((g == gpus).mean() - share) < 0.04
    assert all(0 <= j.arrival_s < 1200 and 1000 <= j.iterations <= 6000 for j in jobs)
