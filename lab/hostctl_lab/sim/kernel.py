"""The rate kernel: rates of flows on links, max-min fair with per-flow caps and strict priority classes.

One function, :func:`rates`, covers every network policy of the simulator:

- ``fifo`` (ideal TCP): every flow in one class, max-min fair on every link;
- paced flows (``cap``, MLCC's planned rates): a per-flow cap, then max-min fair under the caps;
- strict priority classes (TensorLights bands): ``prio`` (0 = highest). With ``prio_links=None`` the
  classes are strict at every link (each class shares what the classes above left, max-min fairly);
  with ``prio_links`` a boolean mask, only those links (the sending hosts' NICs: bands at the host)
  serve the classes in order, and every other link (a switch port, a FIFO) shares itself max-min
  fairly among all flows whatever their class.

Paths are CSR arrays: flow ``f`` crosses links ``links[ptr[f]:ptr[f+1]]``. Capacities and rates are
bytes/s. A flow with an empty path gets its cap (inf when uncapped).

Algorithm (exact progressive filling, several bottlenecks a round): all unfrozen flows rise together;
``share[l] = residual[l] / unfrozen flows on l`` is the level at which link l fills. A flow is
frozen at its cap when the cap is below every share on its path, and at ``share[l]`` when l is a
local bottleneck: no unfrozen flow on l is held lower elsewhere. Shares only grow as flows freeze
below them, so both freezes are final; the global minimum link is always a local bottleneck, so
every round freezes a flow. Rounds: about the depth of the bottleneck chain, not the flow count.

Priority at some links only (bands at hosts, fair fabric): :func:`_host_prio`. The allocation is
defined by its bottlenecks (:func:`host_prio_violations`): feasible, and every flow at its cap or
served last at a full link (a fair link: no flow there has more; a priority link: no flow of its
class there has more and no lower class has anything). Such allocations are not always unique, and
no progressive filling gives them (tests/unit/test_sim_hostprio.py has both counterexamples). The
solver runs fixed-point rounds and, after each, an exact step (the round's bottleneck structure solved
as linear equations); it returns the first allocation that passes the definition. :data:`STATS`:
``host_prio_polished`` solves ended by the exact step, ``host_prio_unconverged`` solves that found
no allocation passing the definition in ``HOST_PRIO_ROUNDS`` rounds (the last round is returned),
``host_prio_fallbacks`` compiled solves handed to the NumPy path (below).

The exact step's linear system (one equation per bottleneck group, about 1.4 nonzeros a row) is solved
by its structure first (:func:`_peel_solve`: rows and columns with one nonzero peeled, LAPACK's dgesv on
the core that remains, usually empty); one with more than ``DENSE_MAX`` groups is solved sparse.

Compiled (numba, optional): the progressive filling, the host-priority solver's check, and the whole
host-priority solver (_kernel_nb.host_prio: the same steps in the same order; the tests compare its
rates bit for bit); :func:`solve_comp_prio` runs a simulator component's solve under bands in one
compiled call. An exact step with more than ``DENSE_MAX`` groups hands the whole solve to the NumPy
path.
"""

from __future__ import annotations

import os

import numpy as np

EPS = 1e-9
WARM_START = True  # ClusterSim starts the host-priority solver from the last rates (_repair); off: cold solves
HOST_PRIO_ROUNDS = 1000  # the slowest solves seen in the cluster runs converged within 860 (tests/unit/data)
STATS = {"solves": 0, "rounds": 0, "host_prio_warm": 0, "host_prio_polished": 0, "host_prio_unconverged": 0,
         "host_prio_fallbacks": 0}

try:  # the compiled progressive filling (optional: numba); HOSTCTL_SIM_NUMBA=0 keeps the NumPy path
    if os.environ.get("HOSTCTL_SIM_NUMBA", "1") == "0":
        raise ImportError
    from hostctl_lab.sim import _kernel_nb
except ImportError:  # numba missing (or turned off): the NumPy path, same results
    _kernel_nb = None
COMPILED = _kernel_nb is not None  # tests switch it to compare both paths


def _maxmin(ptr: np.ndarray, links: np.ndarray, resid: np.ndarray, caps: np.ndarray,
            flows: np.ndarray) -> np.ndarray:
    """Max-min fair rates of ``flows`` (indices into ptr) under ``caps`` on residual capacities
    ``resid`` (modified: the flows' rates are taken off). Returns rates for those flows."""
    n = len(flows)
    if COMPILED and n:
        out, rounds = _kernel_nb.maxmin(ptr, links, resid, caps.astype(float), flows.astype(np.int64), EPS)
        STATS["rounds"] += rounds
        return out
    out = np.zeros(n)
    if n == 0:
        return out
    starts, ends = ptr[flows], ptr[flows + 1]
    lens = ends - starts
    # the flows' entries, contiguous: entry e belongs to local flow owner[e]
    owner = np.repeat(np.arange(n), lens)
    idx = np.arange(lens.sum()) - np.repeat(np.cumsum(lens) - lens, lens) + np.repeat(starts, lens)
    lk = links[idx]
    cap = caps[flows].astype(float)
    empty = lens == 0
    out[empty] = cap[empty]
    live = ~empty
    seg = np.cumsum(lens) - lens  # segment starts for reduceat (only valid for non-empty)
    L = len(resid)
    while live.any():
        STATS["rounds"] += 1
        ent = live[owner]
        cnt = np.bincount(lk[ent], minlength=L)
        with np.errstate(divide="ignore", invalid="ignore"):
            share = np.where(cnt > 0, np.maximum(resid, 0.0) / np.maximum(cnt, 1), np.inf)
        es = share[lk]
        fmin = np.full(n, np.inf)
        ne = ~empty
        fmin[ne] = np.minimum.reduceat(es, seg[ne]) if ne.any() else fmin[ne]
        fshare = np.minimum(cap, fmin)
        lmin = np.full(L, np.inf)
        np.minimum.at(lmin, lk[ent], fshare[owner[ent]])
        ready = (cnt > 0) & (lmin >= share * (1 - EPS))
        on_ready = np.zeros(n, dtype=bool)
        er = ready[lk] & ent
        if er.any():
            on_ready[np.unique(owner[er])] = True
        freeze = live & (on_ready | (cap <= fmin * (1 + EPS)))
        if not freeze.any():  # numerical corner: freeze the global minimum
            m = np.where(live, fshare, np.inf)
            freeze = live & (fshare <= m.min() * (1 + EPS))
        out[freeze] = fshare[freeze]
        fe = freeze[owner]
        if fe.any():
            np.subtract.at(resid, lk[fe], out[owner[fe]])
        live &= ~freeze
    return out


def rates(ptr, links, capacity, caps=None, prio=None, prio_links=None, warm=None) -> np.ndarray:
    """Rates (bytes/s) of every flow: see the module docstring. ``warm``: under classes at some links
    only, the flows' rates at the last solve (a new flow: 0), where the solver starts (_repair)."""
    ptr = np.asarray(ptr, dtype=np.int64)
    links = np.asarray(links, dtype=np.int64)
    capacity = np.asarray(capacity, dtype=float)
    n = len(ptr) - 1
    caps = np.full(n, np.inf) if caps is None else np.asarray(caps, dtype=float)
    STATS["solves"] += 1
    if prio is None or n == 0:
        return _maxmin(ptr, links, capacity.copy(), caps, np.arange(n))
    prio = np.asarray(prio, dtype=np.int64)
    if prio_links is None:  # strict at every link: class by class on what is left
        out = np.zeros(n)
        resid = capacity.copy()
        for c in np.unique(prio):
            fl = np.flatnonzero(prio == c)
            out[fl] = _maxmin(ptr, links, resid, caps, fl)
        return out
    plinks = np.asarray(prio_links, dtype=bool)
    if warm is None:  # (the six-argument call: benchmarks/sim_hostprio.py swaps in old revisions' solvers)
        return _host_prio(ptr, links, capacity, caps, prio, plinks)
    return _host_prio(ptr, links, capacity, caps, prio, plinks, np.asarray(warm, dtype=float))


class _Net:
    """One solve's arrays: entries (flow ``own[e]`` crosses link ``lk[e]``), which are at priority links."""

    def __init__(self, ptr, links, capacity, caps, prio, plinks) -> None:
        self.n = len(ptr) - 1
        self.L = len(capacity)
        # classes by rank (0, 1, ...: the same order, so the same allocation): tables per (link, class)
        # stay small when class numbers are large (the default class is 99)
        prio = np.unique(prio, return_inverse=True)[1].reshape(-1).astype(np.int64)
        self.ptr, self.links, self.cap, self.caps, self.prio, self.plinks = ptr, links, capacity, caps, prio, plinks
        self.own = np.repeat(np.arange(self.n), np.diff(ptr))
        self.lk = links
        self.onp = plinks[links]
        self.scale = float(capacity.max(initial=1.0))
        # classes at priority links: group entries by (link, class)
        self.ncls = int(prio.max(initial=0)) + 1
        self.key = links.astype(np.int64) * self.ncls + prio[self.own]

    def violations(self, r: np.ndarray, rtol: float = 1e-7) -> np.ndarray:
        """Flows that break the definition (see host_prio_violations), as a boolean mask; and the
        links' overload folded in: every flow on an overloaded link is marked."""
        if COMPILED:
            return _kernel_nb.host_prio_violations(self.own, self.lk, self.n, self.L, self.cap, self.caps,
                                                   self.prio, self.onp, self.key, self.ncls, self.scale,
                                                   np.asarray(r, dtype=float), rtol)
        own, lk, L = self.own, self.lk, self.L
        atol = rtol * self.scale
        re_ = r[own]
        load = np.bincount(lk, weights=re_, minlength=L)
        over = load > self.cap * (1 + rtol) + atol
        tight = load >= self.cap * (1 - rtol) - atol
        bad = np.zeros(self.n, dtype=bool)
        bad[own[over[lk]]] = True
        bad |= (r < -atol) | (r > self.caps * (1 + rtol) + atol)
        # fair link: tight and the flow has the most among all its flows
        lmax = np.full(L, -np.inf)
        np.maximum.at(lmax, lk, re_)
        ok_fair = ~self.onp & tight[lk] & (re_ >= lmax[lk] * (1 - rtol) - atol)
        # priority link: tight, the flow has the most of its class there, no lower class has any
        kmax = np.full(L * self.ncls, -np.inf)
        np.maximum.at(kmax, self.key, re_)
        pos = re_ > atol
        lowest = np.full(L, -1, dtype=np.int64)  # the lowest class (largest number) with a positive rate
        np.maximum.at(lowest, lk[pos], self.prio[own[pos]])
        ok_prio = (self.onp & tight[lk] & (re_ >= kmax[self.key] * (1 - rtol) - atol)
                   & (lowest[lk] <= self.prio[own]))
        has = np.zeros(self.n, dtype=bool)
        has[own[ok_fair | ok_prio]] = True
        capped = r >= self.caps * (1 - rtol) - atol
        return bad | ~(has | capped)

    def polish(self, r: np.ndarray, delta: float, prio_first: bool = True) -> np.ndarray | None:
        """Read the bottleneck structure off an approximate equilibrium ``r`` (each flow: at its cap,
        zero below a higher class at a priority link, or at the level of one tight link where it has
        the most among the flows that link treats as equals) and solve that structure's linear
        equations exactly. None when some flow has no bottleneck within ``delta``."""
        from scipy.sparse import csr_matrix
        from scipy.sparse.linalg import spsolve

        own, lk, L, n = self.own, self.lk, self.L, self.n
        atol = delta * self.scale
        re_ = r[own]
        load = np.bincount(lk, weights=re_, minlength=L)
        slack = (self.cap - load) / np.maximum(self.cap, EPS)
        tight = slack <= delta
        lmax = np.full(L, -np.inf)
        np.maximum.at(lmax, lk, re_)
        kmax = np.full(L * self.ncls, -np.inf)
        np.maximum.at(kmax, self.key, re_)
        pos = re_ > atol
        lowest = np.full(L, -1, dtype=np.int64)
        np.maximum.at(lowest, lk[pos], self.prio[own[pos]])
        higher_pos = np.full(L, np.iinfo(np.int64).max)  # the highest class with a positive rate
        np.minimum.at(higher_pos, lk[pos], self.prio[own[pos]])
        gap = np.where(self.onp, kmax[self.key] - re_, lmax[lk] - re_) / self.scale
        cand = tight[lk] & (gap <= delta) & (~self.onp | (lowest[lk] <= self.prio[own]))
        score = np.where(cand, gap + np.maximum(slack[lk], 0.0), np.inf)
        zero = self.onp & tight[lk] & (re_ <= atol) & (higher_pos[lk] < self.prio[own])
        capped = r >= self.caps * (1 - delta) - atol
        # each flow's choice: its cap, zero, or its best candidate entry
        best = np.full(n, np.inf)
        np.minimum.at(best, own, score)
        is_zero = np.zeros(n, dtype=bool)
        is_zero[own[zero]] = True
        kind = np.where(capped & np.isfinite(self.caps), 0, np.where(is_zero, 1, 2))
        lost = (kind == 2) & ~np.isfinite(best)
        if lost.any():
            # a flow with no bottleneck in sight (an oscillating round): guess the link it crosses
            # with the least slack, a priority link first (it takes what the higher classes leave)
            # or a fair link first (it takes its share there)
            pen = np.where(self.onp, 0.0, 1.0) if prio_first else np.where(self.onp, 1e-9, 0.0)
            guess = np.where(lost[own], np.maximum(slack[lk], 0.0) + pen, np.inf)
            gb = np.full(n, np.inf)
            np.minimum.at(gb, own, guess)
            ok = lost[own] & (guess == gb[own]) & np.isfinite(guess)
            score = np.where(ok, guess, score)
            best = np.where(lost, gb, best)
            if (lost & ~np.isfinite(gb)).any():
                return None
        pick = np.full(n, -1, dtype=np.int64)  # the entry of each kind-2 flow's bottleneck
        e_best = (kind[own] == 2) & (score == best[own]) & np.isfinite(score)
        ent = np.flatnonzero(e_best)
        pick[own[ent[::-1]]] = ent[::-1]  # the first such entry per flow
        f2 = np.flatnonzero(kind == 2)
        # bottleneck groups: (link) for fair links, (link, class) for priority links
        gkey = np.where(self.onp[pick[f2]], L + self.key[pick[f2]], lk[pick[f2]])
        groups, gidx = np.unique(gkey, return_inverse=True)
        m = len(groups)
        glink = np.where(groups >= L, (groups - L) // self.ncls, groups)
        # two groups at one link (two classes held at one NIC) break the definition: left to the rounds
        if len(np.unique(glink)) < m:
            return None
        # the structure's equations: a kind-0 flow at its cap, a kind-1 flow at zero, a kind-2 flow at
        # its group's level, and each group's link full (the sum of its flows' rates = its capacity).
        # With the flows' rates substituted: one equation per group in the groups' levels,
        # M[g, h] = the kind-2 flows of group h on g's link; rhs[g] = g's capacity less its capped flows
        gof = np.full(L, -1, dtype=np.int64)
        gof[glink] = np.arange(m)
        fgroup = np.full(n, -1, dtype=np.int64)
        fgroup[f2] = gidx
        on = np.flatnonzero(gof[lk] >= 0)
        eg, ef = gof[lk[on]], own[on]
        rhs = self.cap[glink].astype(float)
        k0 = kind[ef] == 0
        np.subtract.at(rhs, eg[k0], self.caps[ef[k0]])
        k2 = kind[ef] == 2
        out = np.where(kind == 0, self.caps, 0.0)
        if m:
            with np.errstate(all="ignore"):
                if m <= DENSE_MAX:  # small systems: dense is faster than building a sparse matrix
                    M = np.zeros((m, m))
                    np.add.at(M, (eg[k2], fgroup[ef[k2]]), 1.0)
                    x = _peel_solve(M, rhs)
                    if x is None:  # singular
                        return None
                else:
                    import warnings

                    with warnings.catch_warnings():
                        warnings.simplefilter("ignore")
                        try:
                            M = csr_matrix((np.ones(int(k2.sum())), (eg[k2], fgroup[ef[k2]])), shape=(m, m))
                            x = spsolve(M.tocsc(), rhs)
                        except Exception:
                            return None
            out[f2] = x[gidx]
        if not np.isfinite(out).all():
            return None
        out[np.abs(out) <= 1e-12 * self.scale] = 0.0
        return out


def _peel_solve(M: np.ndarray, b: np.ndarray) -> np.ndarray | None:
    """x with M x = b (M square, dense, mostly zeros), or None when M is singular.

    The exact step's systems have about 1.4 nonzeros a row: most groups' links carry only their own
    flows. So, before any LU: a row with one nonzero left gives its variable (substituted into the
    other rows), a column with one nonzero left is set aside with its row (solved from that row at the
    end, in reverse order), repeated until neither is left; LAPACK's dgesv solves the core that remains
    (usually empty). A row or column with nothing left is a singular matrix. _kernel_nb.peel_solve is
    this function compiled, operation for operation (the same bits)."""
    from scipy.linalg import lapack

    m = len(b)
    nz = M != 0.0
    rcnt = nz.sum(1)
    ccnt = nz.sum(0)
    ract = np.ones(m, dtype=bool)
    cact = np.ones(m, dtype=bool)
    bb = b.astype(float)
    x = np.zeros(m)
    aside: list[tuple[int, int]] = []
    progress = True
    while progress:
        progress = False
        for g in range(m):
            if not ract[g]:
                continue
            if rcnt[g] == 0:
                return None
            if rcnt[g] == 1:
                h = int(np.flatnonzero(cact & nz[g])[0])
                xv = bb[g] / M[g, h]
                x[h] = xv
                ract[g] = cact[h] = False
                rows = np.flatnonzero(ract & nz[:, h])
                bb[rows] -= M[rows, h] * xv
                rcnt[rows] -= 1
                progress = True
        for h in range(m):
            if not cact[h]:
                continue
            if ccnt[h] == 0:
                return None
            if ccnt[h] == 1:
                g = int(np.flatnonzero(ract & nz[:, h])[0])
                ract[g] = cact[h] = False
                ccnt[cact & nz[g]] -= 1
                aside.append((g, h))
                progress = True
    R, C = np.flatnonzero(ract), np.flatnonzero(cact)
    if len(R):
        _, _, xc, info = lapack.dgesv(M[np.ix_(R, C)], bb[R])  # (the compiled path calls the same routine)
        if info != 0:
            return None
        x[C] = xc
    for g, h in reversed(aside):
        v = float(b[g])
        for h2 in np.flatnonzero(nz[g]):
            if h2 != h:
                v -= M[g, h2] * x[h2]
        x[h] = v / M[g, h]
    return x


ACTIVE_SET_STEPS = 4
DENSE_MAX = 800  # the exact step solves systems of up to this many bottleneck groups densely


def _active_set(net: _Net, x: np.ndarray | None, delta: float, prio_first: bool) -> np.ndarray | None:
    """The exact step, repeated: ``x`` is a first step's solution that broke the definition (None: it
    had none); read the structure off it and solve again (ACTIVE_SET_STEPS steps in all, the first
    included). Returns only an allocation that passes :meth:`_Net.violations`."""
    for _ in range(ACTIVE_SET_STEPS - 1):
        if x is None:
            return None
        x = net.polish(np.maximum(x, 0.0), delta, prio_first)
        if x is not None and not net.violations(x).any():
            return x
    return None


def host_prio_violations(ptr, links, capacity, caps, prio, plinks, r, rtol: float = 1e-7) -> np.ndarray:
    """The flows of ``r`` that break the definition of the allocation (a boolean mask; empty: ``r``
    is an equilibrium). The definition, every flow f:

    - every link carries at most its capacity, and ``0 <= r[f] <= caps[f]``;
    - f is at its cap, or has a *bottleneck* on its path: a full link where f is served last, i.e.
      a fair link where no flow has more than f, or a priority link where no flow of f's class has
      more than f and no flow of a lower class (larger number) has anything.

    So a lower class gets a priority link's capacity only while every higher-class flow there is at
    its cap or held at a fair link (strict priority), and a fair link treats every flow as an equal
    (max-min)."""
    net = _Net(np.asarray(ptr, np.int64), np.asarray(links, np.int64), np.asarray(capacity, float),
               np.asarray(caps, float), np.asarray(prio, np.int64), np.asarray(plinks, bool))
    return net.violations(np.asarray(r, float), rtol)


def _counted(status: int, rounds: int) -> bool:
    """The compiled host-priority solver's outcome in STATS; False: it handed the solve to NumPy."""
    if status == _kernel_nb.HP_FALLBACK:
        return False
    STATS["rounds"] += rounds
    STATS["host_prio_polished"] += status == _kernel_nb.HP_POLISHED
    STATS["host_prio_warm"] += status == _kernel_nb.HP_WARM
    STATS["host_prio_unconverged"] += status == _kernel_nb.HP_UNCONVERGED
    return True


def solve_comp_prio(ft, c: int, now: float, capacity, nic, loc, done_bytes: float, warm: bool = True):
    """ClusterSim's solve of component c under classes at the hosts' NICs in one compiled call (the
    rows' inputs built, _host_prio, the rates written to the flow table ``ft``): the same rates and
    counters as rates() on those inputs. Returns (the first flow end, rows, the first row's job), or
    None when the solve needs the NumPy path (an exact step larger than DENSE_MAX)."""
    first, n, job0, status, rounds = _kernel_nb.solve_comp_prio(
        ft.comp, ft.key, ft.job, ft.left, ft.rate, ft.t, ft.cap, ft.prio, ft.paths, c, now, capacity, nic, loc,
        EPS, done_bytes, HOST_PRIO_ROUNDS, DENSE_MAX, ACTIVE_SET_STEPS, warm)
    if n and not _counted(status, rounds):
        return None
    STATS["solves"] += n > 0
    return first, n, job0


def _host_prio(ptr, links, capacity, caps, prio, plinks, warm=None) -> np.ndarray:
    """Strict priority at the links of ``plinks``, max-min fair at the others.

    Definition (:func:`host_prio_violations` checks it): rates ``0 <= r <= caps`` that fit every link, where
    every flow is at its cap or has a bottleneck, a full link on its path where it is served last:

    - a fair link where no flow has more than it (max-min: the link treats all flows as equals);
    - a priority link where no flow of its class has more and no flow of a lower class has any rate
      (strict priority: a lower class gets a priority link's capacity only while every higher-class
      flow there is at its cap or held at a fair link).

    Not a progressive filling: a lower class that waits for the higher classes of its NIC while a fair
    link keeps its share can end with that share unused (test_waiting_for_the_higher_bands_is_not_enough),
    and two allocations can both meet the definition (test_equilibria_are_not_unique: priority wins, or an
    even split held in place by two NICs' lower bands). Which one the solver returns: from nothing, the
    one its fixed-point rounds reach first (they start from priority: the NICs serve the classes in
    order); from ``warm`` (the flows' last rates, :func:`_repair`), the one the repair reaches from
    them, so an equilibrium the flows are in is kept while it still holds. The two differ rarely (by more
    than 1e-6 of the largest capacity in 0.1-0.4% of the solves of 200-job cluster runs, in none of
    4,000 sampled on the trace's chain).

    Termination: at most HOST_PRIO_ROUNDS rounds of a fixed number of max-min solves and exact steps
    (each a linear solve in the bottleneck groups' levels, repeated at most ACTIVE_SET_STEPS times).
    Exactness: an allocation is returned early only when it passes the definition (to 1e-7 of the
    largest capacity); otherwise the last round is returned and ``STATS["host_prio_unconverged"]``
    counts it.

    The rounds: the priority links serve the classes in order up to each flow's demand, the fair links
    share themselves max-min under what the priority links gave; a flow held at a fair link demands what
    it got there, one held at its priority link demands everything, one that got exactly its demand keeps
    it unless a probe (the fair links without its priority link's cap) would give it more. After each
    round, exact steps: the bottleneck structure read off the round's rates (and off its mean with the
    last round, and off the round with its starved flows filled back class by class) solved as linear
    equations (_Net.polish, _active_set). The first allocation that passes :meth:`_Net.violations` is
    returned, a round's own rates included; ``STATS["host_prio_polished"]`` counts solves ended by an
    exact step."""
    if COMPILED:
        r, status, rounds = _kernel_nb.host_prio(ptr, links, capacity, caps.astype(float), prio, plinks, EPS,
                                                   HOST_PRIO_ROUNDS, DENSE_MAX, ACTIVE_SET_STEPS,
                                                   np.empty(0) if warm is None else warm)
        if _counted(status, rounds):
            return r
        STATS["host_prio_fallbacks"] += 1  # an exact step larger than DENSE_MAX: solved sparse below
    if warm is not None:
        x = _repair(ptr, links, capacity, caps, prio, plinks, warm)
        if x is not None:
            STATS["host_prio_warm"] += 1
            return x
    r, status = _cold(ptr, links, capacity, caps, prio, plinks)
    if status != "round":
        STATS[f"host_prio_{status}"] += 1
    return r


REPAIR_STEPS = 3  # widenings of the repair before it gives the solve to the rounds


def _repair(ptr, links, capacity, caps, prio, plinks, warm) -> np.ndarray | None:
    """The solve from ``warm``, the flows' rates at the last solve (a new flow's: 0): the flows that
    break the definition under them and every flow on their links solved anew (the rounds, _cold) in
    what the others leave, widened the same way up to REPAIR_STEPS times while some flow still breaks
    it. Returns an allocation that passes the definition on the whole, or None (the set grew to more
    than half the flows, or its solve did not converge): the caller runs the rounds.
    _kernel_nb._repair is this, compiled, step for step."""
    net = _Net(ptr, links, capacity, caps, prio, plinks)
    own, lk = net.own, net.lk
    x = np.maximum(np.asarray(warm, dtype=float), 0.0)
    sub = np.zeros(net.n, dtype=bool)
    for _ in range(REPAIR_STEPS):
        lost = net.violations(x)
        if not lost.any():
            return x
        sub |= lost
        hit = np.zeros(net.L, dtype=bool)
        hit[lk[sub[own]]] = True
        sub[own[hit[lk]]] = True
        if 2 * int(sub.sum()) > net.n:  # most of the component: the rounds cost no more
            return None
        keep = ~sub[own]
        resid = np.maximum(capacity - np.bincount(lk[keep], weights=x[own[keep]], minlength=net.L), 0.0)
        idx = np.flatnonzero(sub)
        sptr = np.concatenate([[0], np.cumsum(np.diff(ptr)[idx])]).astype(np.int64)
        r, status = _cold(sptr, links[sub[own]], resid, caps[idx], prio[idx], plinks)
        if status == "unconverged":
            return None
        x[idx] = r
    return None if net.violations(x).any() else x


def _cold(ptr, links, capacity, caps, prio, plinks) -> tuple[np.ndarray, str]:
    """_host_prio's rounds (its docstring) from nothing. Returns (rates, how they were found: "round",
    "polished" (an exact step or a filled-back round) or "unconverged")."""
    n = len(ptr) - 1
    net = _Net(ptr, links, capacity, caps, prio, plinks)
    owner = net.own
    onp = net.onp
    pptr = np.concatenate([[0], np.cumsum(np.bincount(owner[onp], minlength=n))]).astype(np.int64)
    plk = links[onp]
    fptr = np.concatenate([[0], np.cumsum(np.bincount(owner[~onp], minlength=n))]).astype(np.int64)
    flk = links[~onp]
    demand = caps.copy()
    classes = np.unique(prio)
    out = np.full(n, -1.0)
    for k in range(HOST_PRIO_ROUNDS):
        pcap = np.zeros(n)
        resid = capacity.copy()
        for c in classes:
            fl = np.flatnonzero(prio == c)
            pcap[fl] = _maxmin(pptr, plk, resid, demand, fl)
        new = _maxmin(fptr, flk, capacity.copy(), np.minimum(pcap, caps), np.arange(n))
        lost = net.violations(new)
        if not lost.any():
            return new, "round"
        # an oscillating round alternates between two structures: its mean with the last round is
        # often nearer the equilibrium than either
        guesses = [new] if k == 0 else [new, 0.5 * (new + out)]
        # and the round with the flows that have no bottleneck taken out and filled back max-min
        # fairly into what the others leave (a flow starved by an oscillation gets its share back)
        fill = new.copy()
        fill[lost] = 0.0
        resid = np.maximum(capacity - np.bincount(links, weights=fill[owner], minlength=len(capacity)), 0.0)
        for c in np.unique(prio[lost]):  # class by class: a lower class takes what the higher leave
            fl = np.flatnonzero(lost & (prio == c))
            fill[fl] = _maxmin(ptr, links, resid, caps, fl)
        guesses.append(fill)
        if not net.violations(fill).any():
            return fill, "polished"
        # the exact step: one reading a round, every reading every third round (each costs a linear solve)
        tries = ([(gi, d, pf) for gi in range(len(guesses)) for d in (1e-6, 1e-3, 3e-2) for pf in (True, False)]
                 if k % 3 == 2 else [(gi, 1e-3, True) for gi in range(len(guesses))])
        first_steps = {}  # (guess, prio_first) -> its exact step at delta 1e-3 (the active set's first)
        for gi, delta, pf in tries:
            x = net.polish(guesses[gi], delta, pf)
            if delta == 1e-3:
                first_steps[gi, pf] = x
            if x is not None and not net.violations(x).any():
                return x, "polished"
        if k % 3 == 2:  # the exact step repeated from its own solution
            for gi in range(len(guesses)):
                for pf in (True, False):
                    x = _active_set(net, first_steps[gi, pf], 1e-3, pf)
                    if x is not None:
                        return x, "polished"
        out = new
        held_fair = new < pcap * (1 - 1e-9)
        target = np.where(held_fair, new, caps)
        # a flow that got exactly what it asked for at both kinds of links: would the fair links give
        # it more? (one probe: those flows uncapped by their NICs) If not, it keeps its demand rather
        # than asking for everything again (which flips it between two structures every round)
        sat = ~held_fair & np.isfinite(demand) & (pcap >= demand * (1 - 1e-9))
        if sat.any():
            probe = _maxmin(fptr, flk, capacity.copy(), np.where(sat, caps, np.minimum(pcap, caps)), np.arange(n))
            keep = sat & (probe <= new * (1 + 1e-9))
            target = np.where(keep, new, np.where(sat, probe, target))
        demand = target if k < 8 else np.where(np.isfinite(demand) & np.isfinite(target),
                                               0.5 * (demand + target), target)
    return out, "unconverged"
