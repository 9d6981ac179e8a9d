"""The rate kernel's strict priority at the hosts' NICs (max-min fair elsewhere) against its definition,
checked by plain loops written here, and against every equilibrium found by brute force on tiny cases.

The definition (kernel.host_prio_violations): feasible on every link, and every flow is at its cap or
has a bottleneck: a full fair link where no flow has more, or a full priority link where no flow of its
class has more and no lower class has anything."""

from __future__ import annotations

import itertools

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

from hostctl_lab.sim import kernel
from hostctl_lab.sim.kernel import host_prio_violations, rates


def csr(paths):
    ptr = np.concatenate([[0], np.cumsum([len(p) for p in paths])])
    return ptr, np.concatenate([np.asarray(p, dtype=np.int64) for p in paths])


def broken(paths, cap, nic, prio, caps, r, tol=1e-6):
    """The flows of r that break the definition (plain loops; independent of the kernel's check)."""
    scale = max(cap)
    load = [sum(r[f] for f, p in enumerate(paths) if ln in p) for ln in range(len(cap))]
    full = [load[ln] >= cap[ln] * (1 - tol) - tol * scale for ln in range(len(cap))]
    bad = []
    for f, p in enumerate(paths):
        if r[f] < -tol * scale or r[f] > caps[f] * (1 + tol) + tol * scale or \
                any(load[ln] > cap[ln] * (1 + tol) + tol * scale for ln in p):
            bad.append(f)
            continue
        if r[f] >= caps[f] * (1 - tol) - tol * scale:
            continue
        ok = False
        for ln in p:
            if not full[ln]:
                continue
            on = [g for g, q in enumerate(paths) if ln in q]
            if nic[ln]:
                same = all(r[g] <= r[f] * (1 + tol) + tol * scale for g in on if prio[g] == prio[f])
                lower_idle = all(r[g] <= tol * scale for g in on if prio[g] > prio[f])
                ok |= same and lower_idle
            else:
                ok |= all(r[g] <= r[f] * (1 + tol) + tol * scale for g in on)
        if not ok:
            bad.append(f)
    return bad


def all_equilibria(paths, cap, nic, prio, caps):
    """Brute force: every bottleneck structure (each flow at its cap, at zero, or at the level of one
    link of its path, shared by the flows that pick that link, per class at a NIC, with that link
    full), solved as linear equations; the solutions that meet the definition."""
    n, L = len(paths), len(cap)
    choices = [(["cap"] if np.isfinite(caps[f]) else []) + ["zero"] + list(paths[f]) for f in range(n)]
    found = []
    for pick in itertools.product(*choices):
        groups = sorted({(c, prio[f] if nic[c] else -1) for f, c in enumerate(pick) if not isinstance(c, str)})
        gi = {g: k for k, g in enumerate(groups)}
        links = sorted({g[0] for g in groups})
        if len(links) != len(groups):
            continue
        m = len(groups)
        A = np.zeros((n + m, n + m))
        b = np.zeros(n + m)
        for f, c in enumerate(pick):
            A[f, f] = 1.0
            if c == "cap":
                b[f] = caps[f]
            elif c != "zero":
                A[f, n + gi[(c, prio[f] if nic[c] else -1)]] = -1.0
        for k, ln in enumerate(links):
            for f, p in enumerate(paths):
                if ln in p:
                    A[n + k, f] = 1.0
            b[n + k] = cap[ln]
        x, *_ = np.linalg.lstsq(A, b, rcond=None)
        if np.allclose(A @ x, b, atol=1e-7) and not broken(paths, cap, nic, prio, caps, x[:n]):
            if not any(np.allclose(x[:n], y, atol=1e-6) for y in found):
                found.append(x[:n])
    return found


def solve(paths, cap, nic, prio, caps=None):
    caps = [np.inf] * len(paths) if caps is None else caps
    return rates(*csr(paths), cap, caps=caps, prio=prio, prio_links=np.asarray(nic, bool))


def cases(max_flows):
    @st.composite
    def case(draw):
        hosts = draw(st.integers(1, 3))
        fabric = draw(st.integers(1, 3))
        cap = [draw(st.sampled_from([2.0, 4.0, 10.0])) for _ in range(hosts)]
        cap += [draw(st.sampled_from([1.0, 3.0, 5.0, 10.0])) for _ in range(fabric)]
        nic = [True] * hosts + [False] * fabric
        n = draw(st.integers(1, max_flows))
        paths, prio, caps = [], [], []
        for _ in range(n):  # a flow leaves one host's NIC and crosses 0..2 fabric links
            fab = sorted(set(draw(st.lists(st.integers(hosts, hosts + fabric - 1), max_size=2))))
            paths.append([draw(st.integers(0, hosts - 1))] + fab)
            prio.append(draw(st.integers(0, 2)))
            caps.append(draw(st.sampled_from([np.inf, np.inf, np.inf, 1.5])))
        return paths, cap, nic, prio, caps
    return case()


@settings(max_examples=300, deadline=None)
@given(cases(8))
def test_the_kernel_meets_the_definition(c):
    paths, cap, nic, prio, caps = c
    before = kernel.STATS["host_prio_unconverged"]
    r = solve(paths, cap, nic, prio, caps)
    assert broken(paths, cap, nic, prio, caps, r) == []
    assert kernel.STATS["host_prio_unconverged"] == before
    # the kernel's own check agrees with the loops on this allocation and on a perturbed one
    assert not host_prio_violations(*csr(paths), cap, caps, prio, nic, r).any()
    for bump in (r.copy(), r + 0.05):  # one flow lower; every flow higher (over links and caps)
        bump[0] *= 0.9
        assert set(np.flatnonzero(host_prio_violations(*csr(paths), cap, caps, prio, nic, bump, rtol=1e-6))) == \
            set(broken(paths, cap, nic, prio, caps, bump))


@settings(max_examples=120, deadline=None)
@given(cases(4))
def test_the_kernel_returns_one_of_the_brute_force_equilibria(c):
    paths, cap, nic, prio, caps = c
    eq = all_equilibria(paths, cap, nic, prio, caps)
    assert eq, "brute force found no equilibrium"
    r = solve(paths, cap, nic, prio, caps)
    assert any(np.allclose(r, y, rtol=1e-6, atol=1e-6) for y in eq), (r, eq)


@settings(max_examples=120, deadline=None)
@given(cases(4), st.data())
def test_a_solve_from_other_rates_returns_one_of_the_brute_force_equilibria(c, data):
    """From the last rates (kernel._repair; here drawn), the answer is still an equilibrium of the
    definition, one of those the brute force finds."""
    paths, cap, nic, prio, caps = c
    eq = all_equilibria(paths, cap, nic, prio, caps)
    warm = [data.draw(st.sampled_from([0.0, 0.5, 1.0, 3.0, 10.0])) for _ in paths]
    r = rates(*csr(paths), cap, caps=caps, prio=prio, prio_links=np.asarray(nic, bool), warm=warm)
    assert broken(paths, cap, nic, prio, caps, r) == []
    assert any(np.allclose(r, y, rtol=1e-6, atol=1e-6) for y in eq), (r, eq)


def test_a_solve_from_the_last_rates_mends_only_what_changed():
    """NIC A (10) sends f (band 1) over X (10); h (band 0) arrives at NIC A: from f's old rates the
    repair gives NIC A to h. Then h ends: f takes NIC A back. Both answers by the repair (counted in
    host_prio_warm), both the cold solve's. Flows far away (g1, g2 from NIC B over Y) keep their rates
    (the repair gives a change that reaches more than half of the flows to the rounds)."""
    before = dict(kernel.STATS)
    nic, cap = [True, True, False, False], [10.0, 10.0, 10.0, 4.0]
    paths = [[0, 2], [1, 3], [1, 3], [0]]  # f, g1, g2, h
    prio = [1, 0, 0, 0]
    cold = solve(paths, cap, nic, prio)
    assert cold == pytest.approx([0.0, 2.0, 2.0, 10.0])
    r = rates(*csr(paths), cap, caps=[np.inf] * 4, prio=prio, prio_links=np.asarray(nic, bool),
              warm=[10.0, 2.0, 2.0, 0.0])
    assert r.tolist() == pytest.approx([0.0, 2.0, 2.0, 10.0])
    r = rates(*csr(paths[:3]), cap, caps=[np.inf] * 3, prio=prio[:3], prio_links=np.asarray(nic, bool),
              warm=r[:3])
    assert r.tolist() == pytest.approx([10.0, 2.0, 2.0])
    assert kernel.STATS["host_prio_warm"] - before["host_prio_warm"] == 2


def test_equilibria_are_not_unique():
    # NIC A sends a0 (band 0) over X and a1 (band 1) over Y; NIC B sends b0 over Y and b1 over X.
    # Priority wins (a0 = b0 = 10, a1 = b1 = 0) and an even split (5 each) both meet the definition:
    # in the split, a0 is held at X by b1, which NIC B serves only because b0 is held at Y by a1.
    paths = [[0, 2], [0, 3], [1, 3], [1, 2]]  # a0, a1, b0, b1; links: NIC A, NIC B, X, Y
    cap, nic, prio = [10.0] * 4, [True, True, False, False], [0, 1, 0, 1]
    eq = all_equilibria(paths, cap, nic, prio, [np.inf] * 4)
    assert sorted(tuple(np.round(x, 6)) for x in eq) == [(5.0, 5.0, 5.0, 5.0), (10.0, 0.0, 10.0, 0.0)]
    r = solve(paths, cap, nic, prio)
    assert any(np.allclose(r, y) for y in eq)
    assert r == pytest.approx([10.0, 0.0, 10.0, 0.0])  # the fixed-point rounds start from priority
    # from the rates of either one, a solve stays in it (the repair finds nothing broken)
    for y in eq:
        w = rates(*csr(paths), cap, caps=[np.inf] * 4, prio=prio, prio_links=np.asarray(nic, bool), warm=y)
        assert w == pytest.approx(y)


def test_waiting_for_the_higher_bands_is_not_enough():
    # NIC A (10) sends f1 (band 0) and f2 (band 1) over X (10) and f3 (band 0) over Y (100); g from
    # NIC B over X. A progressive filling where f2 waits for the higher bands of its NIC while X keeps
    # f2's share freezes f1 and g at 10/3; then f3 fills NIC A and f2 gets nothing: X is left a third
    # empty and f1, g have no bottleneck. The one equilibrium: f1 = f3 = g = 5, f2 = 0.
    paths = [[0, 2], [0, 2], [0, 3], [1, 2]]  # f1, f2, f3, g; links: NIC A, NIC B, X, Y
    cap, nic, prio = [10.0, 10.0, 10.0, 100.0], [True, True, False, False], [0, 1, 0, 0]
    waiting = [10 / 3, 0.0, 20 / 3, 10 / 3]
    assert broken(paths, cap, nic, prio, [np.inf] * 4, waiting) == [0, 3]
    eq = all_equilibria(paths, cap, nic, prio, [np.inf] * 4)
    assert len(eq) == 1 and eq[0] == pytest.approx([5.0, 0.0, 5.0, 5.0])
    assert solve(paths, cap, nic, prio) == pytest.approx([5.0, 0.0, 5.0, 5.0])


def test_a_lower_band_takes_what_the_higher_leaves_while_its_fair_link_stays_shared():
    # NIC A (10): h (band 0) over X (7), f (band 1) over Y (12); g from NIC B over Y. h is held at X
    # (7), f gets the 3 NIC A leaves, g the 9 Y leaves: f has less than g at Y, but NIC A is full.
    paths = [[0, 2], [0, 3], [1, 3]]
    r = solve(paths, [10.0, 10.0, 7.0, 12.0], [True, True, False, False], [0, 1, 0])
    assert r == pytest.approx([7.0, 3.0, 9.0])


def test_the_violation_check_names_a_starved_flow():
    # f2 (band 1) alone on a half-empty NIC and an empty link, given nothing
    paths = [[0, 1], [0, 2]]
    v = host_prio_violations(*csr(paths), [10.0, 5.0, 10.0], [np.inf] * 2, [0, 1], [True, False, False],
                             [5.0, 0.0])
    assert list(v) == [False, True]


@pytest.mark.parametrize("case, compiled", [("c0", True), ("c0", False), ("c1", True), ("c1", False),
                                            ("c2", True), ("c3", True)])
def test_slow_cases_from_the_cluster_converge(case, compiled, monkeypatch):
    """Solves of 200-job `one` runs (tlscale; 38-105 flows, 4-5 classes) whose rounds needed 150 and 100
    (c0, c1: unverified when the limit was 30), 860 and 280 (c2, c3: seeds 2 and 1, unverified when it was
    200) rounds to reach an allocation that passes the definition. They reach one now, checked by the
    loops here; c2 and c3 on the compiled path only (the NumPy path takes 7-16 s on them; other tests
    check that both paths give the same bits)."""
    import os

    d = np.load(os.path.join(os.path.dirname(__file__), "data", "sim_hostprio_slow.npz"))
    ptr, links, cap, caps, prio, nic = (d[f"{case}_{k}"] for k in ("ptr", "links", "capacity", "caps", "prio", "plinks"))
    paths = [links[ptr[f]:ptr[f + 1]].tolist() for f in range(len(ptr) - 1)]
    if compiled and kernel._kernel_nb is None:
        pytest.fail("numba is not installed: setup installs it (lab extra)")
    monkeypatch.setattr(kernel, "COMPILED", compiled)
    before = kernel.STATS["host_prio_unconverged"]
    r = kernel._host_prio(ptr, links, cap, caps, prio, nic)
    assert kernel.STATS["host_prio_unconverged"] == before
    assert broken(paths, cap.tolist(), nic.tolist(), prio.tolist(), caps.tolist(), r, tol=1e-6) == []
