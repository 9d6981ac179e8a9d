"""Paper 000's contention model and AdaDUAL admission rule, pure (Wang, Shi, Wang, Chu,
"Communication Contention Aware Scheduling of Multiple Deep Learning Training Jobs", 2020).

The model (Eq. 5): an all-reduce of M bytes that shares the NICs of its servers with k-1 other
all-reduces takes ``a + k*b*M + (k-1)*eta*M`` seconds, k being the largest number of running
all-reduces on any server of the task. In the fluid form every running task moves its bytes at
``1 / (k*b + (k-1)*eta)`` bytes/s, k recomputed whenever a task starts or ends; the latency a is
paid once per task.

AdaDUAL (Algorithm 2, Theorems 1-2): a new communication task starts now if no running task
touches its servers; if at most one runs on each of them, it starts only when it is small against
what remains of the old task, ``M_new / M_old_rem < b / (2(b + eta))``; two or more on a server:
it waits (never 3-way). The cluster simulator (hostctl_lab.sim.paper000) uses it as an admission
policy; a live arbiter in switchemu could use it to pick a burst's band.

Units: seconds, bytes, seconds per byte. Defaults: the paper's a and b (10GbE, ring all-reduce of
2 nodes, OpenMPI) and the reference code's eta (0.235 ms/MB, the text gives none).
"""

from __future__ import annotations

from collections.abc import Hashable, Mapping, Sequence

import numpy as np

A_S = 6.69e-4  # latency a of one all-reduce, seconds [paper 000, Fig. 2(a)]
B_S_PER_BYTE = 8.53e-10  # per-byte time b, seconds/byte (about 1.17 GB/s) [paper 000, Fig. 2(a)]
ETA_S_PER_BYTE = 2.35e-10  # contention penalty eta, seconds/byte [reference code: 0.235 ms/MB]
ADADUAL_MODES = ("all", "literal", "first")


def comm_time(M, k, a: float = A_S, b: float = B_S_PER_BYTE, eta: float = ETA_S_PER_BYTE):
    """Seconds for an all-reduce of ``M`` bytes under k-way contention held for its whole run,
    Eq. (5): ``a + k*b*M + (k-1)*eta*M``; k = 1 gives Eq. (2), ``a + b*M``. Broadcasts over
    arrays (k >= 1)."""
    k = np.asarray(k, dtype=float)
    if np.any(k < 1):
        raise ValueError(f"contention degree k must be >= 1, got {np.min(k)}")
    out = a + (k * b + (k - 1.0) * eta) * np.asarray(M, dtype=float)
    return out if out.ndim else float(out)


def rate(k, b: float = B_S_PER_BYTE, eta: float = ETA_S_PER_BYTE):
    """Bytes per second of one all-reduce under k-way contention (fluid form of Eq. 5):
    ``1 / (k*b + (k-1)*eta)``. Broadcasts over arrays (k >= 1)."""
    k = np.asarray(k, dtype=float)
    if np.any(k < 1):
        raise ValueError(f"contention degree k must be >= 1, got {np.min(k)}")
    out = 1.0 / (k * b + (k - 1.0) * eta)
    return out if out.ndim else float(out)


def threshold(b: float = B_S_PER_BYTE, eta: float = ETA_S_PER_BYTE) -> float:
    """AdaDUAL's size ratio, Eq. (13): a new task shares the network with an old one only when
    ``M_new / M_old_remaining`` is below ``b / (2(b + eta))``. 0.3920 with the defaults
    (8.53e-10, 2.35e-10); 0.3923 with the reference code's 0.856 and 0.235 ms/MB; 0.5 if eta = 0."""
    if b <= 0 or eta < 0:
        raise ValueError(f"need b > 0 and eta >= 0 (seconds per byte), got b={b}, eta={eta}")
    return b / (2.0 * (b + eta))


def max_contention(olds: Sequence[Mapping[Hashable, float]]) -> int:
    """The largest number of running communication tasks on any server of a new task (0 if none);
    ``olds[i]`` holds the tasks running on the new task's i-th server. SRSF(n) admits a new task
    when this is at most n-1."""
    return max((len(o) for o in olds), default=0)


def adadual(m_new: float, olds: Sequence[Mapping[Hashable, float]], b: float = B_S_PER_BYTE,
            eta: float = ETA_S_PER_BYTE, mode: str = "all") -> bool:
    """AdaDUAL (Algorithm 2): True to start a new communication task of ``m_new`` bytes now,
    False to let it wait (the caller asks again when a task on its servers ends).

    ``olds[i]`` maps each communication task running on the new task's i-th server to the bytes
    it has left (a task that spans several of those servers appears under each). No running task:
    True. Two or more on some server: False (never 3-way). Otherwise at most one per server, and the
    new task starts iff ``m_new < threshold(b, eta) * remaining`` for the old tasks compared, per
    ``mode``:

    - ``all`` (recommended): every distinct old task over the servers must pass.
    - ``literal``: the printed loop, which collects old tasks only from a server whose count exceeds
      the running maximum (so only the first server holding a task); all collected must pass. This
      is what the reference code checks.
    - ``first``: the first old task found, alone (the text's "the current communication task").
    """
    if mode not in ADADUAL_MODES:
        raise ValueError(f"unknown AdaDUAL mode {mode!r} (one of {', '.join(ADADUAL_MODES)})")
    max_task = 0
    compared: dict[Hashable, float] = {}
    for on_server in olds:
        n = len(on_server)
        if mode == "all":
            compared.update(on_server)
        elif n > max_task:  # literal and first: union only when the max grows (Algorithm 2, lines 3-5)
            compared.update(on_server)
        max_task = max(max_task, n)
    if max_task == 0:
        return True
    if max_task >= 2:
        return False
    thr = threshold(b, eta)
    rems = list(compared.values())
    if mode == "first":
        rems = rems[:1]
    return all(m_new < thr * rem for rem in rems)
