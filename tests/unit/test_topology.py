"""Topology (hostctl.core.topology): TOML and Lingjun CSV parsing, owners, up-down paths, property 22."""

from __future__ import annotations

import os
import time

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from hostctl.core.loadtable import LoadTable
from hostctl.core.topology import Topology, UnknownNode, path_order
from hostctl.errors import ConfigError

LINGJUN = os.path.join(os.path.dirname(__file__), "..", "..", "..", "shared", "data", "lingjun-2023", "topo.csv")

ONE_SWITCH = """
[defaults]
host_rate = "200mbit"
[[switch]]
name = "br0"
hosts = {count = 4, prefix = "h", first_addr = "10.100.0.1"}
"""

RACKS = """
[[switch]]
name = "tor0"
hosts = ["h0=10.100.0.1", "h1=10.100.0.2"]
host_rate = "1gbit"
parent = "agg"
uplink_rate = "500mbit"
[[switch]]
name = "tor1"
hosts = [{name = "h2", addr = "10.100.0.3"}, "h3=10.100.0.4"]
parent = "agg"
uplink_rate = "500mbit"
[[switch]]
name = "agg"
"""

ECMP = """
[[switch]]
name = "tor0"
hosts = {count = 8, prefix = "a"}
parent = ["spine0", "spine1"]
uplink_rate = "100gbit"
[[switch]]
name = "tor1"
hosts = {count = 8, prefix = "b"}
parent = ["spine0", "spine1"]
uplink_rate = "100gbit"
[[switch]]
name = "spine0"
[[switch]]
name = "spine1"
"""


def test_one_switch_testbed():
    t = Topology.from_toml(ONE_SWITCH)
    assert list(t.switches) == ["br0"]
    assert t.host("10.100.0.3").name == "h2"
    assert t.path_ids("h0", "10.100.0.2") == ("h0>br0", "br0>h1")
    assert t.links[t.link_index["br0>h1"]].capacity_Bps == 200_000_000 // 8
    assert [t.links[i].link_id for i in t.owned_links("br0")] == ["br0>h0", "br0>h1", "br0>h2", "br0>h3"]
    assert [t.links[i].link_id for i in t.owned_links("h0")] == ["h0>br0"]
    assert t.path("h1", "h1") == ()


def test_racks_under_an_aggregation_switch():
    t = Topology.from_toml(RACKS)
    assert t.path_ids("h0", "h3") == ("h0>tor0", "tor0>agg", "agg>tor1", "tor1>h3")
    assert t.path_ids("h3", "h2") == ("h3>tor1", "tor1>h2")
    assert t.capacity_Bps(t.link_index["tor0>agg"]) == 500_000_000 // 8
    assert t.capacity_Bps(t.link_index["h0>tor0"]) == 10**9 // 8
    assert t.capacity_Bps(t.link_index["h2>tor1"]) == 25 * 10**9 // 8  # default host rate
    assert {t.links[i].link_id for i in t.owned_links("agg")} == {"agg>tor0", "agg>tor1"}


def test_ecmp_choice_is_deterministic_and_spreads():
    t1, t2 = Topology.from_toml(ECMP), Topology.from_toml(ECMP)
    spines = set()
    for i in range(8):
        for j in range(8):
            p = t1.path_ids(f"a{i}", f"b{j}")
            assert p == t2.path_ids(f"a{i}", f"b{j}")
            assert len(p) == 4
            spines.add(p[1])
    assert spines == {"tor0>spine0", "tor0>spine1"}


@pytest.mark.parametrize("text, fragment", [
    ("[[switch]]\nname = 'a'\n[[switch]]\nname = 'a'\n", "defined twice"),
    ("[[switch]]\nname = 'a'\nparent = 'b'\nuplink_rate = '1gbit'\n", "not a switch"),
    ("[[switch]]\nname = 'a'\nparent = 'b'\n[[switch]]\nname = 'b'\n", "uplink_rate"),
    ("[[switch]]\nname = 'a'\nparent = 'b'\nuplink_rate = '1gbit'\n[[switch]]\nname = 'b'\nparent = 'a'\n"
     "uplink_rate = '1gbit'\n", "loop"),
    ("[[switch]]\nname = 'a'\nhosts = ['h0', 'h0']\n", "defined twice"),
    ("[[switch]]\nname = 'a'\nhosts = ['h0=1.1.1.1', 'h1=1.1.1.1']\n", "used by hosts"),
    ("[[switch]]\nname = 'a'\nhost_rate = 'fast'\n", "tc unit"),
    ("[[switch]]\nname = 'a'\nbogus = 1\n", "unknown keys"),
    ("nope = 1\n", "unknown topology keys"),
    ("format = 2\n[[switch]]\nname = 'a'\n", "format"),
    ("[[switch]]\nname = 'a b'\n", "without spaces"),
    ("[[switch]]\nname = 'a'\nhosts = {count = 0}\n", "host range"),
    ("[[switch]\n", "not valid TOML"),
    ("", "no switches"),
])
def test_bad_toml_names_the_problem(text, fragment):
    with pytest.raises(ConfigError, match=fragment):
        Topology.from_toml(text)


def test_unknown_hosts_raise_unknownnode():
    t = Topology.from_toml(ONE_SWITCH)
    with pytest.raises(UnknownNode, match="unknown host 'h9'"):
        t.path("h0", "h9")
    with pytest.raises(UnknownNode):
        t.owned_links("nosuchswitch")


@settings(max_examples=300, deadline=None)
@given(st.data())
def test_path_order_puts_any_arrival_order_of_a_path_back_in_path_order(data):
    """A flow's links merged from several switches' replies (switchclient): path order whatever order
    the replies came in; with links missing (a switch that did not answer) each piece in path order."""
    nodes = data.draw(st.lists(st.text("abcxyz019.", min_size=1, max_size=4), min_size=2, max_size=9, unique=True))
    path = [f"{a}>{b}" for a, b in zip(nodes, nodes[1:])]
    keep = data.draw(st.lists(st.booleans(), min_size=len(path), max_size=len(path)))
    kept = [lid for lid, k in zip(path, keep) if k]
    got = path_order(data.draw(st.permutations(kept)))
    assert sorted(got) == sorted(kept)
    pieces, cur = [], []
    for lid, k in zip(path, keep):  # the path's contiguous runs of kept links
        if k:
            cur.append(lid)
        elif cur:
            pieces.append(cur)
            cur = []
    if cur:
        pieces.append(cur)
    assert got == [lid for piece in sorted(pieces) for lid in piece]


@pytest.mark.parametrize("links", [["nic", "a>b"], ["a>b", "a>c"], ["x>y", "y>x"], ["h>x", "x>y", "y>x"], ["a>b>c"]])
def test_path_order_keeps_what_is_not_a_path_as_it_came(links):
    assert path_order(links) == links
    assert path_order(links[::-1]) == links[::-1]


def test_lingjun_csv_small():
    text = "ip,DSW,PSW,ASW\nx1,G6,P1,S1\nx2,G6,P1,S1\nx3,G6,P2,S1\nx4,G6,P1,S2\n"
    t = Topology.from_lingjun_csv(text, tor_uplink_bps=8 * 10**9)
    assert set(t.switches) == {"G6", "P1", "P2", "P1.S1", "P1.S2", "P2.S1"}
    assert t.path_ids("x1", "x2") == ("h0>P1.S1", "P1.S1>h1")
    assert t.path_ids("x1", "x4") == ("h0>P1.S1", "P1.S1>P1", "P1>P1.S2", "P1.S2>h3")
    assert t.path_ids("h0", "h2") == ("h0>P1.S1", "P1.S1>P1", "P1>G6", "G6>P2", "P2>P2.S1", "P2.S1>h2")
    assert t.capacity_Bps(t.link_index["P1.S1>P1"]) == 10**9
    assert t.capacity_Bps(t.link_index["P1>G6"]) == 400 * 10**9 // 8
    for bad in ("ip,A,B\n", "ip,DSW,PSW,ASW\nx,G,P\n", "ip,DSW,PSW,ASW\nx,G,P,S\nx,G,P,S\n", "ip,DSW,PSW,ASW\n"):
        with pytest.raises(ConfigError):
            Topology.from_lingjun_csv(bad)


@pytest.fixture(scope="module")
def lingjun():
    if not os.path.exists(LINGJUN):
        pytest.skip(f"{LINGJUN} not present")
    with open(LINGJUN) as f:
        text = f.read()
    t0 = time.perf_counter()
    topo = Topology.parse(text, filename="topo.csv")
    return topo, time.perf_counter() - t0


def test_lingjun_file_loads_fast(lingjun):
    topo, took_s = lingjun
    assert took_s < 0.5
    assert len(topo.hosts) == 847
    assert len(topo.switches) == 1 + 3 + 119
    assert len(topo.links) == 2 * (847 + 119 + 3)


@settings(max_examples=200, deadline=None)
@given(st.integers(0, 846), st.integers(0, 846))
def test_lingjun_paths_are_up_down_chains(lingjun, a, b):
    topo, _ = lingjun
    src, dst = f"h{a}", f"h{b}"
    p = [topo.links[i] for i in topo.path(src, dst)]
    if a == b:
        assert p == []
        return
    assert p[0].src == src and p[-1].dst == dst
    assert all(x.dst == y.src for x, y in zip(p, p[1:]))
    assert len(p) in (2, 4, 6) and len({x.link_id for x in p}) == len(p)
    back = [topo.links[i] for i in topo.path(dst, src)]
    assert [(x.dst, x.src) for x in reversed(back)] == [(x.src, x.dst) for x in p]  # symmetric in a tree


@settings(max_examples=100, deadline=None)
@given(st.lists(st.tuples(st.sampled_from(["h0", "h1", "h2", "h3"]), st.sampled_from(["h0", "h1", "h2", "h3"]),
                          st.lists(st.integers(0, 10**6), min_size=3, max_size=3)), max_size=12))
def test_path_load_is_the_sum_over_path_links(flows):
    """Property 22: path load for f = sum over f's path links of the per-link load (f excluded)."""
    topo = Topology.from_toml(RACKS)
    table = LoadTable(len(topo.links), 3)
    for n, (s, d, rates) in enumerate(flows):
        table.update(n, topo.path(s, d), 50, rates, 50)
    for n, (s, d, _) in enumerate(flows):
        path = topo.path(s, d)
        per_link = table.loads(path, 50, 50, exclude=n)
        total = table.path_load(path, 50, 50, exclude=n)
        assert np.array_equal(total, per_link.sum(axis=0) if len(path) else np.zeros(3))
        expect = np.zeros(3, dtype=np.int64)
        for m, (s2, d2, r2) in enumerate(flows):
            if m != n:
                expect += len(set(path) & set(topo.path(s2, d2))) * np.array(r2)
        assert np.array_equal(total, expect)
