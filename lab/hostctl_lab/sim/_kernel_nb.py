"""The rate kernel, compiled with numba (optional).

- ``maxmin``: the same algorithm as :func:`hostctl_lab.sim.kernel._maxmin` (its docstring), loop by
  loop: per round each link's share, each unfrozen flow's smallest share on its path, the local
  bottlenecks, the freezes; ``solve_rows``/``solve_comp``/``settle_rows``: the simulator's per-event
  steps around it (one class);
- ``host_prio``: strict priority at the hosts' NICs, max-min fair elsewhere: kernel._host_prio with
  kernel._Net.violations, kernel._Net.polish and kernel._peel_solve, step by step (exact steps of up
  to dense_max groups); ``solve_comp_prio``: the simulator's solve of a component around it.

Imported only when numba is installed; ``kernel.COMPILED`` says whether it is used, and
tests/unit/test_sim_kernel.py compares every function with the NumPy path on random cases. First use
compiles for about 20 s (cached in __pycache__ afterwards).
"""

from __future__ import annotations

import llvmlite.binding
import numba
import numpy as np
from numba import types
from numba.extending import get_cython_function_address

# LAPACK's dgesv from SciPy's bundled library, the routine kernel._Net.polish calls through
# scipy.linalg.lapack.dgesv: the same solutions bit for bit. Called directly, not through
# np.linalg.solve, whose error on a singular matrix is a compiled exception (numba leaks each one,
# ~0.5 KiB: gigabytes over a long simulation). Declared by symbol name so that numba can cache the
# functions that call it; its pointer arguments are passed as addresses (arr.ctypes.data).
llvmlite.binding.add_symbol("hostctl_sim_dgesv", get_cython_function_address("scipy.linalg.cython_lapack", "dgesv"))
_dgesv = types.ExternalFunction("hostctl_sim_dgesv", types.void(*([types.uintp] * 8)))


@numba.njit(cache=True, nogil=True)
def maxmin(ptr, links, resid, caps, flows, eps):  # pragma: no cover - compiled
    """Max-min fair rates of ``flows`` under ``caps`` on ``resid`` (modified), as kernel._maxmin.
    Returns (rates, rounds)."""
    n = flows.shape[0]
    out = np.zeros(n)
    L = resid.shape[0]
    live = np.ones(n, dtype=np.bool_)
    nlive = 0
    for k in range(n):
        f = flows[k]
        if ptr[f + 1] == ptr[f]:  # an empty path gets its cap
            out[k] = caps[f]
            live[k] = False
        else:
            nlive += 1
    cnt = np.zeros(L, dtype=np.int64)
    share = np.empty(L)
    lmin = np.empty(L)
    ready = np.zeros(L, dtype=np.bool_)
    fmin = np.empty(n)
    fshare = np.empty(n)
    freeze = np.zeros(n, dtype=np.bool_)
    rounds = 0
    while nlive > 0:
        rounds += 1
        cnt[:] = 0
        for k in range(n):
            if live[k]:
                f = flows[k]
                for e in range(ptr[f], ptr[f + 1]):
                    cnt[links[e]] += 1
        for ln in range(L):
            if cnt[ln] > 0:
                r = resid[ln]
                share[ln] = (r if r > 0.0 else 0.0) / cnt[ln]
            else:
                share[ln] = np.inf
            lmin[ln] = np.inf
        for k in range(n):
            if live[k]:
                f = flows[k]
                m = np.inf
                for e in range(ptr[f], ptr[f + 1]):
                    s = share[links[e]]
                    if s < m:
                        m = s
                fmin[k] = m
                c = caps[f]
                fs = c if c < m else m
                fshare[k] = fs
                for e in range(ptr[f], ptr[f + 1]):
                    ln = links[e]
                    if fs < lmin[ln]:
                        lmin[ln] = fs
        for ln in range(L):
            ready[ln] = cnt[ln] > 0 and lmin[ln] >= share[ln] * (1 - eps)
        anyf = False
        for k in range(n):
            freeze[k] = False
            if live[k]:
                f = flows[k]
                fr = caps[f] <= fmin[k] * (1 + eps)
                if not fr:
                    for e in range(ptr[f], ptr[f + 1]):
                        if ready[links[e]]:
                            fr = True
                            break
                if fr:
                    freeze[k] = True
                    anyf = True
        if not anyf:  # numerical corner: freeze the global minimum
            m = np.inf
            for k in range(n):
                if live[k] and fshare[k] < m:
                    m = fshare[k]
            for k in range(n):
                if live[k] and fshare[k] <= m * (1 + eps):
                    freeze[k] = True
        for k in range(n):
            if freeze[k]:
                f = flows[k]
                out[k] = fshare[k]
                live[k] = False
                nlive -= 1
                for e in range(ptr[f], ptr[f + 1]):
                    resid[links[e]] -= out[k]
    return out, rounds


@numba.njit(cache=True, nogil=True)
def remap(links, loc):  # pragma: no cover - compiled
    """np.unique(links, return_inverse=True) for link ids below len(loc): ``loc`` is a scratch of -1s
    (left as it was found)."""
    n = links.shape[0]
    u = np.empty(n, dtype=np.int64)
    nu = 0
    for e in range(n):
        ln = links[e]
        if loc[ln] < 0:
            loc[ln] = 0
            u[nu] = ln
            nu += 1
    u = np.sort(u[:nu])
    for k in range(nu):
        loc[u[k]] = k
    local = np.empty(n, dtype=np.int64)
    for e in range(n):
        local[e] = loc[links[e]]
    for k in range(nu):
        loc[u[k]] = -1
    return u, local


@numba.njit(cache=True, nogil=True)
def _gather(left, rate, t, cap, paths, idx, now, loc):  # pragma: no cover - compiled
    """The rows ``idx`` of the flow table made a kernel's input: bytes left brought to ``now`` (written
    back), their caps, their paths as CSR on local link ids (as remap). Returns (left, caps, ptr,
    links' fabric ids, local links)."""
    n = idx.shape[0]
    lf = np.empty(n)
    caps = np.empty(n)
    ptr = np.zeros(n + 1, dtype=np.int64)
    W = paths.shape[1]
    for k in range(n):
        s = idx[k]
        v = left[s] - rate[s] * (now - t[s])
        left[s] = v
        t[s] = now
        lf[k] = v
        caps[k] = cap[s]
        c = 0
        for w in range(W):
            if paths[s, w] >= 0:
                c += 1
        ptr[k + 1] = ptr[k] + c
    links = np.empty(ptr[n], dtype=np.int64)
    for k in range(n):
        s = idx[k]
        e = ptr[k]
        for w in range(W):
            if paths[s, w] >= 0:
                links[e] = paths[s, w]
                e += 1
    u, local = remap(links, loc)
    return lf, caps, ptr, u, local


@numba.njit(cache=True, nogil=True)
def _scatter(rate, idx, out, lf, now, done_bytes):  # pragma: no cover - compiled
    """The solved rates ``out`` written to the rows ``idx``; returns the first flow end (``now`` when
    a flow has nothing left)."""
    first = np.inf
    done = False
    for k in range(idx.shape[0]):
        rate[idx[k]] = out[k]
        if lf[k] <= done_bytes:
            done = True
        elif out[k] > 0:
            x = now + lf[k] / out[k]
            if x < first:
                first = x
    if done:
        first = now
    return first


@numba.njit(cache=True, nogil=True)
def solve_rows(left, rate, t, cap, paths, idx, now, capacity, loc, eps, done_bytes):  # pragma: no cover
    """ClusterSim.solve for one class (no priority), on the flow table's rows ``idx``, in one call:
    bytes left brought to ``now``, the rows' paths as CSR on local link ids (as remap), the max-min
    rates (as maxmin) written to ``rate``. Returns (the first flow end, rounds)."""
    lf, caps, ptr, u, local = _gather(left, rate, t, cap, paths, idx, now, loc)
    resid = np.empty(u.shape[0])
    for q in range(u.shape[0]):
        resid[q] = capacity[u[q]]
    out, rounds = maxmin(ptr, local, resid, caps, np.arange(idx.shape[0]), eps)
    return _scatter(rate, idx, out, lf, now, done_bytes), rounds


@numba.njit(cache=True, nogil=True)
def select_rows(comp, key, c):  # pragma: no cover - compiled
    """The rows whose ``comp`` is c, in ``key`` order (ClusterSim.comp_rows)."""
    n = 0
    for s in range(comp.shape[0]):
        if comp[s] == c:
            n += 1
    rows = np.empty(n, dtype=np.int64)
    k = 0
    for s in range(comp.shape[0]):
        if comp[s] == c:
            rows[k] = s
            k += 1
    return rows[np.argsort(key[rows])]


@numba.njit(cache=True, nogil=True)
def settle_rows(comp, key, fid, left, rate, t, c, now, done_bytes):  # pragma: no cover - compiled
    """ClusterSim.settle on component c's rows (select_rows' order) in one call: bytes left brought
    to ``now``; returns the ids of the flows that are done (nothing left, or so little that their end
    is this instant), sorted."""
    rows = select_rows(comp, key, c)
    n = 0
    done = np.empty(rows.shape[0], dtype=np.int64)
    for k in range(rows.shape[0]):
        s = rows[k]
        v = left[s] - rate[s] * (now - t[s])
        left[s] = v
        t[s] = now
        if v <= done_bytes or (rate[s] > 0 and now + v / rate[s] <= now):
            done[n] = fid[s]
            n += 1
    return np.sort(done[:n])


@numba.njit(cache=True, nogil=True)
def solve_comp(comp, key, job, left, rate, t, cap, paths, c, now, capacity, loc, eps, done_bytes):  # pragma: no cover
    """select_rows then solve_rows for component c in one call. Returns (the first flow end, rounds,
    the number of rows, the job of the first row; -1 with no rows)."""
    rows = select_rows(comp, key, c)
    if rows.shape[0] == 0:
        return np.inf, 0, 0, -1
    first, rounds = solve_rows(left, rate, t, cap, paths, rows, now, capacity, loc, eps, done_bytes)
    return first, rounds, rows.shape[0], job[rows[0]]


@numba.njit(cache=True, nogil=True)
def solve_comp_prio(comp, key, job, left, rate, t, cap, prio, paths, c, now, capacity, nic, loc, eps, done_bytes,
                    max_rounds, dense_max, active_steps, warm_start):  # pragma: no cover - compiled
    """ClusterSim.solve under classes at the hosts' NICs for component c, in one call: its rows
    (select_rows), their inputs (as solve_numpy builds them), host_prio (from the rows' last rates with
    ``warm_start``), the rates written. Returns
    (the first flow end, the number of rows, the job of the first row, host_prio's status and rounds).
    With status HP_FALLBACK nothing is written but the bytes left: the caller solves in NumPy."""
    rows = select_rows(comp, key, c)
    n = rows.shape[0]
    if n == 0:
        return np.inf, 0, -1, HP_ROUND, 0
    lf, caps, ptr, u, local = _gather(left, rate, t, cap, paths, rows, now, loc)
    cp = np.empty(u.shape[0])
    pl = np.empty(u.shape[0], dtype=np.bool_)
    for q in range(u.shape[0]):
        cp[q] = capacity[u[q]]
        pl[q] = nic[u[q]]
    pr = np.empty(n, dtype=np.int64)
    for k in range(n):
        pr[k] = prio[rows[k]]
    warm = np.empty(n if warm_start else 0)  # the rows' rates at the last solve (a new flow's: 0)
    for k in range(warm.shape[0]):
        warm[k] = rate[rows[k]]
    out, status, rounds = host_prio(ptr, local, cp, caps, pr, pl, eps, max_rounds, dense_max, active_steps, warm)
    if status == HP_FALLBACK:
        return np.inf, n, job[rows[0]], status, rounds
    return _scatter(rate, rows, out, lf, now, done_bytes), n, job[rows[0]], status, rounds


@numba.njit(cache=True, nogil=True)
def _link_tables(own, lk, L, prio, key, ncls, r, atol):  # pragma: no cover - compiled
    """Per link, under rates ``r``: the load, the largest rate, the largest rate per (link, class), and
    the lowest and highest classes (largest and smallest numbers) with a rate above ``atol``."""
    load = np.zeros(L)
    lmax = np.full(L, -np.inf)
    kmax = np.full(L * ncls, -np.inf)
    lowest = np.full(L, -1, dtype=np.int64)
    highest = np.full(L, np.iinfo(np.int64).max)
    for e in range(lk.shape[0]):
        v = r[own[e]]
        ln = lk[e]
        load[ln] += v
        if v > lmax[ln]:
            lmax[ln] = v
        if v > kmax[key[e]]:
            kmax[key[e]] = v
        if v > atol:
            p = prio[own[e]]
            if p > lowest[ln]:
                lowest[ln] = p
            if p < highest[ln]:
                highest[ln] = p
    return load, lmax, kmax, lowest, highest


@numba.njit(cache=True, nogil=True)
def host_prio_violations(own, lk, n, L, cap, caps, prio, onp, key, ncls, scale, r, rtol):  # pragma: no cover
    """kernel._Net.violations, compiled (the same sums in the same order: the same mask)."""
    atol = rtol * scale
    load, lmax, kmax, lowest, _ = _link_tables(own, lk, L, prio, key, ncls, r, atol)
    bad = np.zeros(n, dtype=np.bool_)
    has = np.zeros(n, dtype=np.bool_)
    for f in range(n):
        if r[f] < -atol or r[f] > caps[f] * (1 + rtol) + atol:
            bad[f] = True
    for e in range(lk.shape[0]):
        ln = lk[e]
        f = own[e]
        v = r[f]
        if load[ln] > cap[ln] * (1 + rtol) + atol:
            bad[f] = True
        if load[ln] >= cap[ln] * (1 - rtol) - atol:
            if not onp[e]:
                if v >= lmax[ln] * (1 - rtol) - atol:
                    has[f] = True
            elif v >= kmax[key[e]] * (1 - rtol) - atol and lowest[ln] <= prio[f]:
                has[f] = True
    out = np.empty(n, dtype=np.bool_)
    for f in range(n):
        out[f] = bad[f] or not (has[f] or r[f] >= caps[f] * (1 - rtol) - atol)
    return out


# ---------------------------------------------------------------- priority at the hosts' NICs
# kernel._host_prio and kernel._Net.polish, compiled: the same steps in the same order (the same sums,
# the same linear systems solved the same way: peeled, then SciPy's dgesv on the core), so the same rates.
# Status codes of host_prio:
HP_ROUND = 0  # a round's own rates passed the definition
HP_POLISHED = 1  # an exact step (or the filled-back round) passed it
HP_UNCONVERGED = 2  # nothing passed in the rounds: the last round's rates
HP_FALLBACK = 3  # an exact step needed a system larger than dense_max: solve it in NumPy (sparse)
HP_WARM = 4  # the repair from the last solve's rates passed it
REPAIR_STEPS = 3  # kernel.REPAIR_STEPS


@numba.njit(cache=True, nogil=True)
def _violates(own, lk, n, L, cap, caps, prio, onp, key, ncls, scale, r):  # pragma: no cover - compiled
    """Whether any flow of ``r`` breaks the definition (kernel._Net.violations(r).any())."""
    return _any(host_prio_violations(own, lk, n, L, cap, caps, prio, onp, key, ncls, scale, r, 1e-7))


@numba.njit(cache=True, nogil=True)
def _polish(own, lk, n, L, cap, caps, prio, onp, key, ncls, scale, r, delta, prio_first, eps, dense_max):  # pragma: no cover
    """kernel._Net.polish. Returns (rates, status): 0 solved, 1 none (the NumPy path's None), 2 the
    system is larger than dense_max (the NumPy path solves it sparse)."""
    E = lk.shape[0]
    atol = delta * scale
    load, lmax, kmax, lowest, higher_pos = _link_tables(own, lk, L, prio, key, ncls, r, atol)
    slack = np.empty(L)
    tight = np.empty(L, dtype=np.bool_)
    for ln in range(L):
        c = cap[ln] if cap[ln] > eps else eps
        slack[ln] = (cap[ln] - load[ln]) / c
        tight[ln] = slack[ln] <= delta
    score = np.full(E, np.inf)
    best = np.full(n, np.inf)
    is_zero = np.zeros(n, dtype=np.bool_)
    for e in range(E):
        f = own[e]
        ln = lk[e]
        v = r[f]
        if onp[e]:
            gap = (kmax[key[e]] - v) / scale
        else:
            gap = (lmax[ln] - v) / scale
        if tight[ln] and gap <= delta and (not onp[e] or lowest[ln] <= prio[f]):
            s = slack[ln] if slack[ln] > 0.0 else 0.0
            score[e] = gap + s
            if score[e] < best[f]:
                best[f] = score[e]
        if onp[e] and tight[ln] and v <= atol and higher_pos[ln] < prio[f]:
            is_zero[f] = True
    kind = np.empty(n, dtype=np.int64)
    nlost = 0
    for f in range(n):
        capped = r[f] >= caps[f] * (1 - delta) - atol
        if capped and np.isfinite(caps[f]):
            kind[f] = 0
        elif is_zero[f]:
            kind[f] = 1
        else:
            kind[f] = 2
            if not np.isfinite(best[f]):
                nlost += 1
    out = np.zeros(n)
    if nlost > 0:
        # a flow with no bottleneck in sight: guess the link it crosses with the least slack
        gb = np.full(n, np.inf)
        guess = np.full(E, np.inf)
        for e in range(E):
            f = own[e]
            if kind[f] == 2 and not np.isfinite(best[f]):
                if prio_first:
                    pen = 0.0 if onp[e] else 1.0
                else:
                    pen = 1e-9 if onp[e] else 0.0
                s = slack[lk[e]]
                guess[e] = (s if s > 0.0 else 0.0) + pen
                if guess[e] < gb[f]:
                    gb[f] = guess[e]
        for e in range(E):
            f = own[e]
            if kind[f] == 2 and not np.isfinite(best[f]) and guess[e] == gb[f] and np.isfinite(guess[e]):
                score[e] = guess[e]
        for f in range(n):
            if kind[f] == 2 and not np.isfinite(best[f]):
                if not np.isfinite(gb[f]):
                    return out, 1
                best[f] = gb[f]
    pick = np.full(n, -1, dtype=np.int64)  # the first best entry of each kind-2 flow
    for e in range(E):
        f = own[e]
        if kind[f] == 2 and pick[f] < 0 and score[e] == best[f] and np.isfinite(score[e]):
            pick[f] = e
    # bottleneck groups: (link) for fair links, (link, class) for priority links; sorted as np.unique
    n2 = 0
    for f in range(n):
        if kind[f] == 2:
            n2 += 1
    f2 = np.empty(n2, dtype=np.int64)
    gkey = np.empty(n2, dtype=np.int64)
    j = 0
    for f in range(n):
        if kind[f] == 2:
            f2[j] = f
            e = pick[f]
            gkey[j] = L + key[e] if onp[e] else lk[e]
            j += 1
    # np.unique(gkey, return_inverse=True) by a table over the key range (no sort to compile)
    slot = np.full(L + L * ncls, -1, dtype=np.int64)
    for q in range(n2):
        slot[gkey[q]] = 0
    groups = np.empty(n2, dtype=np.int64)
    m = 0
    for g in range(slot.shape[0]):
        if slot[g] == 0:
            slot[g] = m
            groups[m] = g
            m += 1
    gidx = np.empty(n2, dtype=np.int64)
    for q in range(n2):
        gidx[q] = slot[gkey[q]]
    gof = np.full(L, -1, dtype=np.int64)
    glink = np.empty(m, dtype=np.int64)
    for g in range(m):
        ln = (groups[g] - L) // ncls if groups[g] >= L else groups[g]
        glink[g] = ln
        if gof[ln] >= 0:  # two groups at one link (two classes held at one NIC): left to the rounds
            return out, 1
        gof[ln] = g
    if m > dense_max:
        return out, 2
    # the structure's equations with the flows' rates substituted (kernel._Net.polish): M is
    # column-major for LAPACK (Mt[h, g] = M[g, h]), rhs[g] = g's capacity less its capped flows
    fgroup = np.full(n, -1, dtype=np.int64)
    for q in range(n2):
        fgroup[f2[q]] = gidx[q]
    M = np.zeros((m, m))
    rhs = np.empty(m)
    eg = np.empty(E, dtype=np.int64)  # M's nonzeros, each once
    eh = np.empty(E, dtype=np.int64)
    nnz = 0
    for g in range(m):
        rhs[g] = cap[glink[g]]
    for e in range(E):
        g = gof[lk[e]]
        if g >= 0:
            f = own[e]
            if kind[f] == 0:
                rhs[g] -= caps[f]
            elif kind[f] == 2:
                h = fgroup[f]
                if M[g, h] == 0.0:
                    eg[nnz] = g
                    eh[nnz] = h
                    nnz += 1
                M[g, h] += 1.0
    for f in range(n):
        if kind[f] == 0:
            out[f] = caps[f]
    if m > 0:
        x, ok = _peel(M, rhs, eg[:nnz], eh[:nnz])
        if not ok:  # singular
            return out, 1
        for q in range(n2):
            out[f2[q]] = x[gidx[q]]
    for f in range(n):
        if not np.isfinite(out[f]):
            return out, 1
        if abs(out[f]) <= 1e-12 * scale:
            out[f] = 0.0
    return out, 0


@numba.njit(cache=True, nogil=True)
def _dense_solve(A, x):  # pragma: no cover - compiled
    """LAPACK dgesv on the square A (C order; copied to column order), x solved in place; False when
    A is singular."""
    k = A.shape[0]
    At = A.T.copy()  # C order of the transpose = column order of A
    dims = np.full(4, k, dtype=np.int32)  # n, lda, ldb; nrhs
    dims[3] = 1
    ipiv = np.empty(k, dtype=np.int32)
    info = np.zeros(1, dtype=np.int32)
    d = dims.ctypes.data  # n at d, lda at d + 4, ldb at d + 8, nrhs at d + 12 (int32)
    _dgesv(d, d + 12, At.ctypes.data, d + 4, ipiv.ctypes.data, x.ctypes.data, d + 8, info.ctypes.data)
    return info[0] == 0


@numba.njit(cache=True, nogil=True)
def _csort(key, order, m):  # pragma: no cover - compiled
    """``order`` stably sorted by ``key`` (values 0..m-1; a counting sort), and each key's start."""
    ptr = np.zeros(m + 1, dtype=np.int64)
    for q in range(order.shape[0]):
        ptr[key[order[q]] + 1] += 1
    for k in range(m):
        ptr[k + 1] += ptr[k]
    fill = ptr[:m].copy()
    out = np.empty(order.shape[0], dtype=np.int64)
    for q in range(order.shape[0]):
        k = key[order[q]]
        out[fill[k]] = order[q]
        fill[k] += 1
    return out, ptr


@numba.njit(cache=True, nogil=True)
def peel_solve(M, b):  # pragma: no cover - compiled
    """kernel._peel_solve: (x, True) with M x = b, or (_, False) when M is singular."""
    m = b.shape[0]
    nnz = 0
    for g in range(m):
        for h in range(m):
            if M[g, h] != 0.0:
                nnz += 1
    eg = np.empty(nnz, dtype=np.int64)
    eh = np.empty(nnz, dtype=np.int64)
    q = 0
    for g in range(m):
        for h in range(m):
            if M[g, h] != 0.0:
                eg[q] = g
                eh[q] = h
                q += 1
    return _peel(M, b, eg, eh)


@numba.njit(cache=True, nogil=True)
def _peel(M, b, eg, eh):  # pragma: no cover - compiled
    """peel_solve given M's nonzeros (eg[q], eh[q]), each once, in any order: kernel._peel_solve's
    operations on each number in the same order (the same bits), the rows and columns walked as lists
    of their nonzeros in index order instead of scanning M."""
    m = b.shape[0]
    every = np.arange(eg.shape[0])
    by_g, _ = _csort(eg, every, m)
    by_h, _ = _csort(eh, every, m)
    rows_of, cptr = _csort(eh, by_g, m)  # by column, rows ascending
    cols_of, rptr = _csort(eg, by_h, m)  # by row, columns ascending
    rcol = np.empty(eg.shape[0], dtype=np.int64)
    crow = np.empty(eg.shape[0], dtype=np.int64)
    for q in range(eg.shape[0]):
        rcol[q] = eh[cols_of[q]]
        crow[q] = eg[rows_of[q]]
    rcnt = np.empty(m, dtype=np.int64)
    ccnt = np.empty(m, dtype=np.int64)
    for g in range(m):
        rcnt[g] = rptr[g + 1] - rptr[g]
        ccnt[g] = cptr[g + 1] - cptr[g]
    ract = np.ones(m, dtype=np.bool_)
    cact = np.ones(m, dtype=np.bool_)
    bb = b.copy()
    x = np.zeros(m)
    aside_g = np.empty(m, dtype=np.int64)
    aside_h = np.empty(m, dtype=np.int64)
    na = 0
    progress = True
    while progress:
        progress = False
        for g in range(m):
            if not ract[g]:
                continue
            if rcnt[g] == 0:
                return x, False
            if rcnt[g] == 1:
                h = -1
                for q in range(rptr[g], rptr[g + 1]):
                    if cact[rcol[q]]:
                        h = rcol[q]
                        break
                xv = bb[g] / M[g, h]
                x[h] = xv
                ract[g] = False
                cact[h] = False
                for q in range(cptr[h], cptr[h + 1]):
                    g2 = crow[q]
                    if ract[g2]:
                        bb[g2] -= M[g2, h] * xv
                        rcnt[g2] -= 1
                progress = True
        for h in range(m):
            if not cact[h]:
                continue
            if ccnt[h] == 0:
                return x, False
            if ccnt[h] == 1:
                g = -1
                for q in range(cptr[h], cptr[h + 1]):
                    if ract[crow[q]]:
                        g = crow[q]
                        break
                ract[g] = False
                cact[h] = False
                for q in range(rptr[g], rptr[g + 1]):
                    if cact[rcol[q]]:
                        ccnt[rcol[q]] -= 1
                aside_g[na] = g
                aside_h[na] = h
                na += 1
                progress = True
    k = 0
    for g in range(m):
        if ract[g]:
            k += 1
    if k > 0:
        R = np.empty(k, dtype=np.int64)
        C = np.empty(k, dtype=np.int64)
        i = 0
        j = 0
        for g in range(m):
            if ract[g]:
                R[i] = g
                i += 1
            if cact[g]:
                C[j] = g
                j += 1
        A = np.empty((k, k))
        xc = np.empty(k)
        for i in range(k):
            xc[i] = bb[R[i]]
            for j in range(k):
                A[i, j] = M[R[i], C[j]]
        if not _dense_solve(A, xc):
            return x, False
        for j in range(k):
            x[C[j]] = xc[j]
    for q in range(na - 1, -1, -1):
        g = aside_g[q]
        h = aside_h[q]
        v = b[g]
        for p in range(rptr[g], rptr[g + 1]):
            if rcol[p] != h:
                v -= M[g, rcol[p]] * x[rcol[p]]
        x[h] = v / M[g, h]
    return x, True


@numba.njit(cache=True, nogil=True)
def _entries_on(ptr, links, onp, want, n):  # pragma: no cover - compiled
    """The CSR of each flow's entries whose ``onp`` is ``want`` (the NIC part or the fabric part)."""
    sub = np.zeros(n + 1, dtype=np.int64)
    for f in range(n):
        c = 0
        for e in range(ptr[f], ptr[f + 1]):
            if onp[e] == want:
                c += 1
        sub[f + 1] = sub[f] + c
    out = np.empty(sub[n], dtype=np.int64)
    k = 0
    for e in range(links.shape[0]):
        if onp[e] == want:
            out[k] = links[e]
            k += 1
    return sub, out


@numba.njit(cache=True, nogil=True)
def _any(mask):  # pragma: no cover - compiled
    for v in mask:
        if v:
            return True
    return False


@numba.njit(cache=True, nogil=True)
def _members(prio, mask, c):  # pragma: no cover - compiled
    """np.flatnonzero((prio == c) & mask); mask None: every flow."""
    k = 0
    for f in range(prio.shape[0]):
        if prio[f] == c and (mask is None or mask[f]):
            k += 1
    out = np.empty(k, dtype=np.int64)
    k = 0
    for f in range(prio.shape[0]):
        if prio[f] == c and (mask is None or mask[f]):
            out[k] = f
            k += 1
    return out


@numba.njit(cache=True, nogil=True)
def _classes_of(prio, mask, ncls):  # pragma: no cover - compiled
    """np.unique(prio[mask]) for classes 0..ncls-1."""
    has = np.zeros(ncls, dtype=np.bool_)
    for f in range(prio.shape[0]):
        if mask[f]:
            has[prio[f]] = True
    return np.flatnonzero(has)


@numba.njit(cache=True, nogil=True)
def host_prio(ptr, links, capacity, caps, prio, plinks, eps, max_rounds, dense_max, active_steps, warm):  # pragma: no cover
    """kernel._host_prio (its docstring), compiled: the repair from ``warm`` (the flows' rates at the
    last solve; an empty array: none), else the rounds. Returns (rates, status (HP_*), maxmin rounds)."""
    rounds = 0
    if warm.shape[0] == ptr.shape[0] - 1:
        x, st, rounds = _repair(ptr, links, capacity, caps, prio, plinks, eps, max_rounds, dense_max, active_steps,
                                warm)
        if st == HP_WARM:
            return x, st, rounds
    r, st, rr = _cold(ptr, links, capacity, caps, prio, plinks, eps, max_rounds, dense_max, active_steps)
    return r, st, rounds + rr


@numba.njit(cache=True, nogil=True)
def _prelude(ptr, links, capacity, prio, plinks):  # pragma: no cover - compiled
    """A solve's tables, as kernel._Net builds them: each entry's flow and whether its link is a
    priority link, the classes ranked (0, 1, ...; the default class is 99: tables per (link, class)
    stay small), each entry's (link, class) key, the number of classes, the largest capacity."""
    n = ptr.shape[0] - 1
    L = capacity.shape[0]
    E = links.shape[0]
    own = np.empty(E, dtype=np.int64)
    for f in range(n):
        for e in range(ptr[f], ptr[f + 1]):
            own[e] = f
    top = np.int64(0)
    for f in range(n):
        if prio[f] > top:
            top = prio[f]
    rank = np.full(top + 1, -1, dtype=np.int64)
    for f in range(n):
        rank[prio[f]] = 0
    ncls = np.int64(0)
    for c in range(top + 1):
        if rank[c] == 0:
            rank[c] = ncls
            ncls += 1
    rp = rank[prio]
    onp = np.empty(E, dtype=np.bool_)
    key = np.empty(E, dtype=np.int64)
    for e in range(E):
        onp[e] = plinks[links[e]]
        key[e] = links[e] * ncls + rp[own[e]]
    scale = 1.0  # capacity.max(initial=1.0)
    for ln in range(L):
        if capacity[ln] > scale:
            scale = capacity[ln]
    return own, onp, rp, key, ncls, scale


@numba.njit(cache=True, nogil=True)
def _repair(ptr, links, capacity, caps, prio, plinks, eps, max_rounds, dense_max, active_steps, warm):  # pragma: no cover
    """kernel._repair, compiled (the same steps: the same bits). Returns (rates, HP_WARM or HP_ROUND
    when it found none, maxmin rounds)."""
    n = ptr.shape[0] - 1
    L = capacity.shape[0]
    E = links.shape[0]
    own, onp, rp, key, ncls, scale = _prelude(ptr, links, capacity, prio, plinks)
    x = warm.copy()
    for f in range(n):
        x[f] = max(x[f], 0.0)
    rounds = 0
    sub = np.zeros(n, dtype=np.bool_)
    for _ in range(REPAIR_STEPS):
        lost = host_prio_violations(own, links, n, L, capacity, caps, rp, onp, key, ncls, scale, x, 1e-7)
        if not _any(lost):
            return x, HP_WARM, rounds
        for f in range(n):
            if lost[f]:
                sub[f] = True
        hit = np.zeros(L, dtype=np.bool_)  # the set widened: every flow on a link of it
        for e in range(E):
            if sub[own[e]]:
                hit[links[e]] = True
        m = 0
        cnt = 0
        for e in range(E):
            if hit[links[e]]:
                sub[own[e]] = True
        for f in range(n):
            if sub[f]:
                m += 1
                cnt += ptr[f + 1] - ptr[f]
        if 2 * m > n:  # most of the component: that is the rounds' job
            return x, HP_ROUND, rounds
        load = np.zeros(L)  # what the others leave
        for e in range(E):
            if not sub[own[e]]:
                load[links[e]] += x[own[e]]
        resid = np.empty(L)
        for ln in range(L):
            resid[ln] = max(capacity[ln] - load[ln], 0.0)
        sptr = np.zeros(m + 1, dtype=np.int64)
        slk = np.empty(cnt, dtype=np.int64)
        scaps = np.empty(m)
        sprio = np.empty(m, dtype=np.int64)
        idx = np.empty(m, dtype=np.int64)
        q = 0
        for f in range(n):
            if sub[f]:
                idx[q] = f
                scaps[q] = caps[f]
                sprio[q] = prio[f]
                k = sptr[q]
                for e in range(ptr[f], ptr[f + 1]):
                    slk[k] = links[e]
                    k += 1
                sptr[q + 1] = k
                q += 1
        r, st, rr = _cold(sptr, slk, resid, scaps, sprio, plinks, eps, max_rounds, dense_max, active_steps)
        rounds += rr
        if st == HP_FALLBACK or st == HP_UNCONVERGED:
            return x, HP_ROUND, rounds
        for q in range(m):
            x[idx[q]] = r[q]
    lost = host_prio_violations(own, links, n, L, capacity, caps, rp, onp, key, ncls, scale, x, 1e-7)
    return x, HP_ROUND if _any(lost) else HP_WARM, rounds


@numba.njit(cache=True, nogil=True)
def _cold(ptr, links, capacity, caps, prio, plinks, eps, max_rounds, dense_max, active_steps):  # pragma: no cover
    """kernel._host_prio's rounds (its docstring), compiled. Returns (rates, status (HP_*), maxmin rounds)."""
    n = ptr.shape[0] - 1
    L = capacity.shape[0]
    E = links.shape[0]
    own, onp, prio, key, ncls, scale = _prelude(ptr, links, capacity, prio, plinks)
    pptr, plk = _entries_on(ptr, links, onp, True, n)
    fptr, flk = _entries_on(ptr, links, onp, False, n)
    allf = np.arange(n)
    demand = caps.copy()
    out = np.full(n, -1.0)
    rounds = 0
    guesses = np.empty((3, n))
    firsts = np.empty((6, n))  # (guess, prio_first) -> its exact step at delta 1e-3
    first_ok = np.zeros(6, dtype=np.bool_)
    deltas = np.array([1e-6, 1e-3, 3e-2])
    pc = np.empty(n)
    for k in range(max_rounds):
        pcap = np.zeros(n)
        resid = capacity.copy()
        for c in range(ncls):  # (ranked: every class 0..ncls-1 has flows)
            fl = _members(prio, None, c)
            got, rr = maxmin(pptr, plk, resid, demand, fl, eps)
            rounds += rr
            for q in range(fl.shape[0]):
                pcap[fl[q]] = got[q]
        for f in range(n):
            pc[f] = min(pcap[f], caps[f])
        new, rr = maxmin(fptr, flk, capacity.copy(), pc, allf, eps)
        rounds += rr
        lost = host_prio_violations(own, links, n, L, capacity, caps, prio, onp, key, ncls, scale, new, 1e-7)
        if not _any(lost):
            return new, HP_ROUND, rounds
        # guesses: the round, its mean with the last round (after the first), the round filled back
        ng = 1 if k == 0 else 2
        guesses[0] = new
        if k > 0:
            for f in range(n):
                guesses[1, f] = 0.5 * (new[f] + out[f])
        fill = new.copy()
        for f in range(n):
            if lost[f]:
                fill[f] = 0.0
        load = np.zeros(L)
        for e in range(E):
            load[links[e]] += fill[own[e]]
        for ln in range(L):
            resid[ln] = max(capacity[ln] - load[ln], 0.0)
        for c in _classes_of(prio, lost, ncls):  # class by class: a lower class takes what the higher leave
            fl = _members(prio, lost, c)
            got, rr = maxmin(ptr, links, resid, caps, fl, eps)
            rounds += rr
            for q in range(fl.shape[0]):
                fill[fl[q]] = got[q]
        guesses[ng] = fill
        ng += 1
        if not _violates(own, links, n, L, capacity, caps, prio, onp, key, ncls, scale, fill):
            return fill, HP_POLISHED, rounds
        every = k % 3 == 2  # the exact step: one reading a round, every reading every third round
        first_ok[:] = False
        for gi in range(ng):
            for di in range(3):
                if not every and di != 1:
                    continue
                for pi in range(2):
                    pf = pi == 0
                    if not every and not pf:
                        continue
                    x, st = _polish(own, links, n, L, capacity, caps, prio, onp, key, ncls, scale, guesses[gi],
                                    deltas[di], pf, eps, dense_max)
                    if st == 2:
                        return out, HP_FALLBACK, rounds
                    if di == 1 and st == 0:
                        firsts[2 * gi + pi] = x
                        first_ok[2 * gi + pi] = True
                    if st == 0 and not _violates(own, links, n, L, capacity, caps, prio, onp, key, ncls, scale, x):
                        return x, HP_POLISHED, rounds
        if every:  # the exact step repeated from its own solution
            for gi in range(ng):
                for pi in range(2):
                    if not first_ok[2 * gi + pi]:
                        continue
                    x = firsts[2 * gi + pi].copy()
                    for _ in range(active_steps - 1):
                        for f in range(n):
                            x[f] = max(x[f], 0.0)
                        x, st = _polish(own, links, n, L, capacity, caps, prio, onp, key, ncls, scale,
                                        x, 1e-3, pi == 0, eps, dense_max)
                        if st == 2:
                            return out, HP_FALLBACK, rounds
                        if st != 0:
                            break
                        if not _violates(own, links, n, L, capacity, caps, prio, onp, key, ncls, scale, x):
                            return x, HP_POLISHED, rounds
        out = new
        target = np.empty(n)
        sat = np.zeros(n, dtype=np.bool_)
        nsat = 0
        for f in range(n):
            held_fair = new[f] < pcap[f] * (1 - 1e-9)
            target[f] = new[f] if held_fair else caps[f]
            if not held_fair and np.isfinite(demand[f]) and pcap[f] >= demand[f] * (1 - 1e-9):
                sat[f] = True
                nsat += 1
        if nsat > 0:
            for f in range(n):
                pc[f] = caps[f] if sat[f] else min(pcap[f], caps[f])
            probe, rr = maxmin(fptr, flk, capacity.copy(), pc, allf, eps)
            rounds += rr
            for f in range(n):
                if sat[f]:
                    target[f] = new[f] if probe[f] <= new[f] * (1 + 1e-9) else probe[f]
        if k < 8:
            demand = target
        else:
            for f in range(n):
                if np.isfinite(demand[f]) and np.isfinite(target[f]):
                    demand[f] = 0.5 * (demand[f] + target[f])
                else:
                    demand[f] = target[f]
    return out, HP_UNCONVERGED, rounds
