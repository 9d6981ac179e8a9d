"""The simulator's rate kernel against hand examples, a plain one-bottleneck-at-a-time water-filling
written here (a different algorithm), and the max-min optimality conditions."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

from hostctl_lab.sim.kernel import rates


def csr(paths):
    ptr = np.concatenate([[0], np.cumsum([len(p) for p in paths])])
    links = np.concatenate([np.asarray(p, dtype=np.int64) for p in paths]) if paths else np.zeros(0, np.int64)
    return ptr, links


def reference_maxmin(paths, cap, caps):
    """Textbook progressive filling: raise every unfrozen flow together to the next event (a link fills
    or a flow reaches its cap), freeze what is stuck, repeat."""
    n = len(paths)
    r = np.zeros(n)
    frozen = np.zeros(n, bool)
    resid = np.array(cap, float)
    while not frozen.all():
        cnt = np.zeros(len(cap))
        for f in range(n):
            if not frozen[f]:
                for ln in paths[f]:
                    cnt[ln] += 1
        inc = min([resid[ln] / cnt[ln] for ln in range(len(cap)) if cnt[ln] > 0] +
                  [caps[f] - r[f] for f in range(n) if not frozen[f]])
        for f in range(n):
            if not frozen[f]:
                r[f] += inc
                for ln in paths[f]:
                    resid[ln] -= inc
        for f in range(n):
            if not frozen[f] and (r[f] >= caps[f] - 1e-9 or any(resid[ln] <= 1e-9 for ln in paths[f])):
                frozen[f] = True
    return r


def check_maxmin(paths, cap, caps, r, tol=1e-6):
    """Feasible, and every flow is at its cap or has a saturated link where no flow gets more."""
    load = np.zeros(len(cap))
    for f, p in enumerate(paths):
        for ln in p:
            load[ln] += r[f]
    assert (load <= np.asarray(cap) * (1 + tol) + tol).all()
    for f, p in enumerate(paths):
        if r[f] >= caps[f] - tol:
            continue
        ok = any(load[ln] >= cap[ln] * (1 - tol) - tol and
                 all(r[g] <= r[f] * (1 + tol) + tol for g, q in enumerate(paths) if ln in q) for ln in p)
        assert ok, f"flow {f} at {r[f]} has no bottleneck"


def test_a_flow_alone_gets_its_narrowest_link_or_its_cap():
    ptr, links = csr([[0, 1, 2]])
    assert rates(ptr, links, [10.0, 4.0, 7.0])[0] == pytest.approx(4.0)
    assert rates(ptr, links, [10.0, 4.0, 7.0], caps=[3.0])[0] == pytest.approx(3.0)


def test_classic_example():
    # link 0 (cap 10): flows a, b; link 1 (cap 4): flows b, c, d -> b, c, d get 4/3, a gets 10 - 4/3
    paths = [[0], [0, 1], [1], [1]]
    r = rates(*csr(paths), [10.0, 4.0])
    assert r == pytest.approx([10 - 4 / 3, 4 / 3, 4 / 3, 4 / 3])


@settings(max_examples=150, deadline=None)
@given(st.data())
def test_matches_reference_and_is_maxmin(data):
    L = data.draw(st.integers(1, 6))
    n = data.draw(st.integers(1, 9))
    cap = [data.draw(st.sampled_from([1.0, 2.0, 3.0, 5.0, 8.0, 10.0])) for _ in range(L)]
    paths = [sorted(set(data.draw(st.lists(st.integers(0, L - 1), min_size=1, max_size=3)))) for _ in range(n)]
    caps = [data.draw(st.sampled_from([np.inf, np.inf, 0.5, 1.5, 4.0])) for _ in range(n)]
    r = rates(*csr(paths), cap, caps=caps)
    assert r == pytest.approx(reference_maxmin(paths, cap, caps), rel=1e-6, abs=1e-6)
    check_maxmin(paths, cap, caps, r)


@settings(max_examples=80, deadline=None)
@given(st.data())
def test_priority_at_every_link_is_maxmin_class_by_class(data):
    L = data.draw(st.integers(1, 5))
    n = data.draw(st.integers(1, 8))
    cap = [data.draw(st.sampled_from([2.0, 3.0, 5.0, 10.0])) for _ in range(L)]
    paths = [sorted(set(data.draw(st.lists(st.integers(0, L - 1), min_size=1, max_size=3)))) for _ in range(n)]
    prio = [data.draw(st.integers(0, 2)) for _ in range(n)]
    r = rates(*csr(paths), cap, prio=prio)
    resid = np.array(cap, float)
    for c in sorted(set(prio)):
        fl = [f for f in range(n) if prio[f] == c]
        want = reference_maxmin([paths[f] for f in fl], resid, [np.inf] * len(fl))
        assert r[fl] == pytest.approx(want, rel=1e-6, abs=1e-6)
        for f, w in zip(fl, want):
            for ln in paths[f]:
                resid[ln] -= w


def test_bands_at_the_host_are_work_conserving():
    # host NIC 0 (cap 10) sends f0 (band 0) over fabric link 2 (cap 4) shared with g (host NIC 1, band 0)
    # and f1 (band 1) over fabric link 3: f0 and g split link 2, f1 takes the rest of NIC 0
    paths = [[0, 2], [0, 3], [1, 2]]
    nic = np.array([True, True, False, False])
    r = rates(*csr(paths), [10.0, 10.0, 4.0, 10.0], prio=[0, 1, 0], prio_links=nic)
    assert r == pytest.approx([2.0, 8.0, 2.0])


def test_bands_at_the_host_are_strict():
    paths = [[0, 1], [0, 1]]
    nic = np.array([True, False])
    r = rates(*csr(paths), [10.0, 10.0], prio=[0, 1], prio_links=nic)
    assert r == pytest.approx([10.0, 0.0])


def test_a_fifo_switch_port_ignores_the_hosts_bands():
    # two hosts, each sends one band-0 and one band-1 flow into one switch port (link 2, cap 10):
    # the port is fair among all four flows that reach it, the NICs (cap 100) do not bind
    paths = [[0, 2], [0, 2], [1, 2], [1, 2]]
    nic = np.array([True, True, False])
    r = rates(*csr(paths), [100.0, 100.0, 10.0], prio=[0, 1, 0, 1], prio_links=nic)
    assert r == pytest.approx([2.5] * 4)


def test_the_compiled_kernel_is_in_use_where_numba_is_installed():
    import importlib.util
    import os

    from hostctl_lab.sim import kernel

    want = importlib.util.find_spec("numba") is not None and os.environ.get("HOSTCTL_SIM_NUMBA", "1") != "0"
    assert kernel.COMPILED == want


@settings(max_examples=60, deadline=None)
@given(st.data())
def test_compiled_and_numpy_paths_agree(data):
    """Random fabrics with up to 60 flows, caps, one class / classes at every link / bands at hosts:
    the numba progressive filling gives the NumPy path's rates (the same algorithm)."""
    from hostctl_lab.sim import kernel

    if kernel._kernel_nb is None:
        pytest.fail("numba is not installed: setup installs it (lab extra)")
    L = data.draw(st.integers(1, 12))
    n = data.draw(st.integers(1, 60))
    cap = [data.draw(st.sampled_from([1.0, 2.5, 5.0, 10.0, 40.0])) for _ in range(L)]
    paths = [sorted(set(data.draw(st.lists(st.integers(0, L - 1), min_size=0, max_size=4)))) for _ in range(n)]
    caps = [data.draw(st.sampled_from([np.inf, np.inf, 0.3, 2.0, 7.0])) for _ in range(n)]
    mode = data.draw(st.sampled_from(["fair", "every", "host"]))
    prio = None if mode == "fair" else [data.draw(st.integers(0, 2)) for _ in range(n)]
    plinks = np.array([i % 3 == 0 for i in range(L)]) if mode == "host" else None
    got = {}
    for compiled in (True, False):
        kernel.COMPILED = compiled
        try:
            got[compiled] = rates(*csr(paths), cap, caps=caps, prio=prio, prio_links=plinks)
        finally:
            kernel.COMPILED = True
    np.testing.assert_allclose(got[True], got[False], rtol=1e-12, atol=1e-12)


@settings(max_examples=50, deadline=None)
@given(st.lists(st.integers(0, 40), min_size=1, max_size=80))
def test_compiled_remap_is_numpy_unique(links):
    from hostctl_lab.sim import kernel

    if kernel._kernel_nb is None:
        pytest.fail("numba is not installed: setup installs it (lab extra)")
    a = np.asarray(links, dtype=np.int64)
    loc = np.full(41, -1, dtype=np.int64)
    u, local = kernel._kernel_nb.remap(a, loc)
    want_u, want_local = np.unique(a, return_inverse=True)
    assert u.tolist() == want_u.tolist() and local.tolist() == want_local.tolist()
    assert (loc == -1).all()  # the scratch is left as found


@settings(max_examples=150, deadline=None)
@given(st.data())
def test_compiled_host_prio_violations_are_the_numpy_ones(data):
    """The host-priority solver's check of its definition (kernel._Net.violations), compiled and in
    NumPy, on random nets and random rates (exact, at caps, at link shares, zero, overloaded)."""
    from hostctl_lab.sim import kernel

    if kernel._kernel_nb is None:
        pytest.fail("numba is not installed: setup installs it (lab extra)")
    L = data.draw(st.integers(1, 8))
    n = data.draw(st.integers(1, 30))
    cap = np.array([data.draw(st.sampled_from([1.0, 2.5, 5.0, 10.0])) for _ in range(L)])
    paths = [sorted(set(data.draw(st.lists(st.integers(0, L - 1), min_size=0, max_size=3)))) for _ in range(n)]
    caps = np.array([data.draw(st.sampled_from([np.inf, np.inf, 0.3, 2.0])) for _ in range(n)])
    prio = np.array([data.draw(st.integers(0, 2)) for _ in range(n)], dtype=np.int64)
    plinks = np.array([data.draw(st.booleans()) for _ in range(L)])
    ptr, links = csr(paths)
    net = kernel._Net(ptr.astype(np.int64), links, cap, caps, prio, plinks)
    solved = kernel.rates(ptr, links, cap, caps=caps, prio=prio, prio_links=plinks)
    drawn = np.array(data.draw(st.lists(st.sampled_from([0.0, 0.3, 1.0, 1.25, 2.5, 5.0, -1.0]),
                                        min_size=n, max_size=n)))
    for r in (solved, drawn):
        got = {}
        for compiled in (True, False):
            kernel.COMPILED = compiled
            try:
                got[compiled] = net.violations(np.asarray(r, float))
            finally:
                kernel.COMPILED = True
        assert got[True].tolist() == got[False].tolist()


def _host_case(data, max_flows):
    hosts = data.draw(st.integers(1, 6))
    fabric = data.draw(st.integers(1, 6))
    cap = [data.draw(st.sampled_from([2.0, 4.0, 10.0])) for _ in range(hosts)]
    cap += [data.draw(st.sampled_from([1.0, 3.0, 5.0, 10.0])) for _ in range(fabric)]
    n = data.draw(st.integers(1, max_flows))
    paths = [[data.draw(st.integers(0, hosts - 1))]
             + sorted(set(data.draw(st.lists(st.integers(hosts, hosts + fabric - 1), max_size=2))))
             for _ in range(n)]
    caps = [data.draw(st.sampled_from([np.inf, np.inf, np.inf, 1.5, 0.4])) for _ in range(n)]
    prio = [data.draw(st.integers(0, 3)) for _ in range(n)]
    return paths, cap, caps, prio, np.array([True] * hosts + [False] * fabric)


def _both_paths(paths, cap, caps, prio, plinks, warm=None):
    """rates() compiled and in NumPy, with the kernel's counters of each."""
    from hostctl_lab.sim import kernel

    got = {}
    saved = dict(kernel.STATS)
    try:
        for compiled in (True, False):
            kernel.COMPILED = compiled
            for k in kernel.STATS:
                kernel.STATS[k] = 0
            r = rates(*csr(paths), cap, caps=caps, prio=prio, prio_links=plinks, warm=warm)
            got[compiled] = (r, dict(kernel.STATS))
    finally:
        kernel.COMPILED = True
        kernel.STATS.update(saved)
    return got


@settings(max_examples=200, deadline=None)
@given(st.data())
def test_compiled_host_prio_is_the_numpy_one(data):
    """The host-priority solver (rounds, exact steps, active set) compiled and in NumPy on random NICs
    and fabrics with up to 40 flows in 4 classes: the same rates bit for bit, and the same counters
    (max-min rounds, solves ended by an exact step, unconverged)."""
    from hostctl_lab.sim import kernel

    if kernel._kernel_nb is None:
        pytest.fail("numba is not installed: setup installs it (lab extra)")
    got = _both_paths(*_host_case(data, 40))
    assert got[True][0].tolist() == got[False][0].tolist()
    assert got[True][1] == got[False][1]


@settings(max_examples=200, deadline=None)
@given(st.data())
def test_compiled_repair_is_the_numpy_one(data):
    """The solve from the last rates (kernel._repair, then the rounds if it gives up) compiled and in
    NumPy: the same rates bit for bit and the same counters, from the rates before a flow arrived (its
    own 0), before one ended, or from drawn rates; every answer meets the definition."""
    from hostctl_lab.sim import kernel

    assert kernel.REPAIR_STEPS == kernel._kernel_nb.REPAIR_STEPS  # (the compiled one is its own constant)
    paths, cap, caps, prio, plinks = _host_case(data, 30)
    n = len(paths)
    how = data.draw(st.sampled_from(["arrival", "end", "drawn"]))
    if how == "arrival" and n > 1:  # flow k is new
        k = data.draw(st.integers(0, n - 1))
        keep = [f for f in range(n) if f != k]
        before = rates(*csr([paths[f] for f in keep]), cap, caps=[caps[f] for f in keep],
                       prio=[prio[f] for f in keep], prio_links=plinks)
        warm = np.insert(before, k, 0.0)
    elif how == "end":  # one more flow was there
        extra = [data.draw(st.integers(0, int(plinks.sum()) - 1))]
        before = rates(*csr(paths + [extra]), cap, caps=caps + [np.inf], prio=prio + [0], prio_links=plinks)
        warm = before[:-1]
    else:
        warm = np.array([data.draw(st.sampled_from([0.0, 0.4, 1.0, 2.5, 7.0])) for _ in range(n)])
    got = _both_paths(paths, cap, caps, prio, plinks, warm)
    assert got[True][0].tolist() == got[False][0].tolist()
    assert got[True][1] == got[False][1]
    assert got[True][1]["host_prio_warm"] + got[True][1]["host_prio_polished"] + \
        got[True][1]["host_prio_unconverged"] <= 1
    ptr, links = csr(paths)
    assert not kernel.host_prio_violations(ptr, links, cap, caps, prio, plinks, got[True][0]).any()


def test_compiled_host_prio_hands_large_exact_steps_to_numpy(monkeypatch):
    """An exact step with more than DENSE_MAX bottleneck groups is solved sparse by the NumPy path: the
    compiled solver hands the whole solve over (counted), and the rates are the NumPy path's."""
    from hostctl_lab.sim import kernel

    if kernel._kernel_nb is None:
        pytest.fail("numba is not installed: setup installs it (lab extra)")
    # one NIC (10) sends band 0 and band 1 into one fair link (1): the NIC's order gives band 1 nothing
    # at first, the fair link halves it
    args = ([[0, 1], [0, 1]], [10.0, 1.0], [np.inf] * 2, [0, 1], np.array([True, False]))
    monkeypatch.setattr(kernel, "DENSE_MAX", 0)
    got = _both_paths(*args)
    assert got[True][1]["host_prio_fallbacks"] == 1  # the compiled solver met an exact step it cannot take
    np.testing.assert_array_equal(got[True][0], got[False][0])
    np.testing.assert_allclose(got[True][0], [0.5, 0.5], rtol=1e-12)
    monkeypatch.setattr(kernel, "DENSE_MAX", 800)
    dense = _both_paths(*args)
    assert dense[True][1]["host_prio_fallbacks"] == 0
    np.testing.assert_allclose(dense[True][0], got[False][0], rtol=1e-12)


def test_compiled_host_prio_does_not_leak_on_singular_exact_steps():
    """Two bands of one NIC into one fair link: each solve meets two singular exact steps. The compiled
    solver must report them without raising: numba leaks every exception raised in compiled code
    (np.linalg.solve's LinAlgError leaked ~17 MiB over these 20,000 solves, 2.4 GiB in a long run)."""
    import psutil

    from hostctl_lab.sim import kernel

    if kernel._kernel_nb is None:
        pytest.fail("numba is not installed: setup installs it (lab extra)")
    args = (np.array([0, 2, 4]), np.array([0, 2, 0, 2]), np.array([10.0, 10.0, 1.0]), np.full(2, np.inf),
            np.array([1, 2]), np.array([True, True, False]))
    np.testing.assert_allclose(kernel._host_prio(*args), [0.5, 0.5])
    proc = psutil.Process()
    for _ in range(2000):  # warm: the allocator's pools settle
        kernel._host_prio(*args)
    before = proc.memory_info().rss
    for _ in range(20000):
        kernel._host_prio(*args)
    grown = (proc.memory_info().rss - before) / 2**20
    assert grown < 4.0, f"RSS grew {grown:.1f} MiB over 20,000 solves"


def _sparse_system(data, m_max: int):
    """A square system like the exact step's: a small count (1-3) on the diagonal of most rows, a few
    off-diagonal counts, sometimes a dense block (a core no peeling removes), sometimes a zero row."""
    m = data.draw(st.integers(1, m_max))
    M = np.zeros((m, m))
    for g in range(m):
        if data.draw(st.integers(0, 9)):
            M[g, g] = data.draw(st.integers(1, 3))
    for _ in range(data.draw(st.integers(0, m))):
        M[data.draw(st.integers(0, m - 1)), data.draw(st.integers(0, m - 1))] = data.draw(st.integers(1, 3))
    if m >= 3 and data.draw(st.booleans()):
        k = data.draw(st.integers(2, m))
        M[m - k:, m - k:] += np.array(data.draw(st.lists(st.integers(0, 2), min_size=k * k, max_size=k * k)),
                                      float).reshape(k, k)
    perm = np.array(data.draw(st.permutations(range(m))))
    b = np.array(data.draw(st.lists(st.floats(-50, 50, allow_nan=False), min_size=m, max_size=m)))
    return M[perm], b


@settings(max_examples=400, deadline=None)
@given(st.data())
def test_peeled_exact_step_solves_the_system(data):
    """The exact step's solver (singletons peeled, LU on the core): the compiled and NumPy versions give
    the same bits; a solution solves M x = b (checked by the residual, not by the solver); a refusal is a
    singular matrix (checked by its rank)."""
    from hostctl_lab.sim import _kernel_nb, kernel

    M, b = _sparse_system(data, 12)
    x = kernel._peel_solve(M, b)
    xc, ok = _kernel_nb.peel_solve(M, b)
    assert ok == (x is not None)
    if x is None:
        assert np.linalg.matrix_rank(M) < len(b)
        return
    assert xc.tolist() == x.tolist()
    if np.linalg.cond(M) < 1e8:
        np.testing.assert_allclose(M @ x, b, atol=1e-8 * (1 + np.abs(b).max()) * np.linalg.cond(M))


def test_peeled_exact_step_hand_cases():
    """A chain solved by row singletons, a column set aside and solved last, a 2x2 core, a singular
    matrix whose rows repeat."""
    from hostctl_lab.sim import _kernel_nb, kernel

    cases = [
        # x0 = 2 (row 0); row 1: x0 + x1 = 5 -> x1 = 3; row 2: x1 + 2 x2 = 7 -> x2 = 2
        (np.array([[1.0, 0, 0], [1, 1, 0], [0, 1, 2]]), np.array([2.0, 5, 7]), [2.0, 3, 2]),
        # column 2 is only in row 0: set aside; rows 1, 2 are the core (x0 + x1 = 3, 2 x0 + x1 = 4); then
        # row 0 gives x2 = 6 - 1 - 2
        (np.array([[1.0, 1, 1], [1, 1, 0], [2, 1, 0]]), np.array([6.0, 3, 4]), [1.0, 2, 3]),
    ]
    for M, b, want in cases:
        x = kernel._peel_solve(M, b)
        np.testing.assert_allclose(x, want, rtol=1e-15)
        xc, ok = _kernel_nb.peel_solve(M, b)
        assert ok and xc.tolist() == x.tolist()
    singular = np.array([[1.0, 1, 0], [1, 1, 0], [0, 0, 1]])
    assert kernel._peel_solve(singular, np.ones(3)) is None
    assert not _kernel_nb.peel_solve(singular, np.ones(3))[1]
