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

Priority at some links only (bands at hosts, fair fabric) has no closed progressive filling; it is
the fixed point of two allocations, iterated (``HOST_PRIO_ROUNDS`` at most): the priority links give
each flow, class by class, what is left up to its demand (what the fair links would give it), and
the fair links share themselves max-min under those caps. :data:`STATS` counts the solves that
stopped at the round limit without converging.
"""

from __future__ import annotations

import os

import numpy as np

EPS = 1e-9
HOST_PRIO_ROUNDS = 30
STATS = {"solves": 0, "rounds": 0, "host_prio_unconverged": 0}

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


def rates(ptr, links, capacity, caps=None, prio=None, prio_links=None) -> np.ndarray:
    """Rates (bytes/s) of every flow: see the module docstring."""
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
    return _host_prio(ptr, links, capacity, caps, prio, np.asarray(prio_links, dtype=bool))


def _host_prio(ptr, links, capacity, caps, prio, plinks) -> np.ndarray:
    """Strict priority at the links of ``plinks``, max-min fair at the others: the fixed point.

    Each round, the priority links serve the classes in order, each flow up to its demand; the fair
    links then share themselves max-min under what the priority links gave. A flow held below that at
    a fair link demands only what it got there (the rest of the priority link goes to lower classes);
    a flow held at its priority link demands more (inf)."""
    n = len(ptr) - 1
    lens = np.diff(ptr)
    owner = np.repeat(np.arange(n), lens)
    onp = plinks[links]
    pptr = np.concatenate([[0], np.cumsum(np.bincount(owner[onp], minlength=n))]).astype(np.int64)
    plk = links[onp]
    fptr = np.concatenate([[0], np.cumsum(np.bincount(owner[~onp], minlength=n))]).astype(np.int64)
    flk = links[~onp]
    demand = caps.copy()
    classes = np.unique(prio)
    out = np.full(n, -1.0)
    atol = 1e-7 * float(capacity.max(initial=1.0))
    for k in range(HOST_PRIO_ROUNDS):
        pcap = np.zeros(n)
        resid = capacity.copy()
        for c in classes:
            fl = np.flatnonzero(prio == c)
            pcap[fl] = _maxmin(pptr, plk, resid, demand, fl)
        new = _maxmin(fptr, flk, capacity.copy(), np.minimum(pcap, caps), np.arange(n))
        if np.allclose(new, out, rtol=1e-7, atol=atol):
            return new
        out = new
        held_fair = new < pcap * (1 - 1e-9)
        target = np.where(held_fair, new, caps)
        # after a few rounds, move half way: a flow that alternates between held at its NIC and held
        # at a fair link (its NIC share and its competitors' feed each other) settles between the two
        demand = target if k < 8 else np.where(np.isfinite(demand) & np.isfinite(target),
                                               0.5 * (demand + target), target)
    STATS["host_prio_unconverged"] += 1
    return out
