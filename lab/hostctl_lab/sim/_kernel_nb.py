"""The rate kernel's max-min progressive filling, compiled with numba (optional).

The same algorithm as :func:`hostctl_lab.sim.kernel._maxmin` (its docstring), loop by loop: per round
each link's share, each unfrozen flow's smallest share on its path, the local bottlenecks, the freezes.
Imported only when numba is installed; ``kernel.COMPILED`` says whether it is used, and
tests/unit/test_sim_kernel.py compares it with the NumPy path on random cases.
"""

from __future__ import annotations

import numba
import numpy as np


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
def solve_rows(left, rate, t, cap, paths, idx, now, capacity, loc, eps, done_bytes):  # pragma: no cover
    """ClusterSim.solve for one class (no priority), on the flow table's rows ``idx``, in one call:
    bytes left brought to ``now``, the rows' paths as CSR on local link ids (as remap), the max-min
    rates (as maxmin) written to ``rate``. Returns (the first flow end, rounds)."""
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
    resid = np.empty(u.shape[0])
    for q in range(u.shape[0]):
        resid[q] = capacity[u[q]]
    out, rounds = maxmin(ptr, local, resid, caps, np.arange(n), eps)
    first = np.inf
    done = False
    for k in range(n):
        rate[idx[k]] = out[k]
        if lf[k] <= done_bytes:
            done = True
        elif out[k] > 0:
            x = now + lf[k] / out[k]
            if x < first:
                first = x
    if done:
        first = now
    return first, rounds


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
def host_prio_violations(own, lk, n, L, cap, caps, prio, onp, key, ncls, scale, r, rtol):  # pragma: no cover
    """kernel._Net.violations, compiled (the same sums in the same order: the same mask)."""
    atol = rtol * scale
    load = np.zeros(L)
    lmax = np.full(L, -np.inf)
    kmax = np.full(L * ncls, -np.inf)
    lowest = np.full(L, -1, dtype=np.int64)
    for e in range(lk.shape[0]):
        v = r[own[e]]
        ln = lk[e]
        load[ln] += v
        if v > lmax[ln]:
            lmax[ln] = v
        if v > kmax[key[e]]:
            kmax[key[e]] = v
        if v > atol and prio[own[e]] > lowest[ln]:
            lowest[ln] = prio[own[e]]
    bad = np.zeros(n, dtype=np.bool_)
    has = np.zeros(n, dtype=np.bool_)
    for f in range(n):
        if r[f] < -atol:
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
