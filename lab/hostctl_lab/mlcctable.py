"""The switches' load tables, in process: what every MLCC host published in the last slot, and each
host's per-job view of it (``hostctl.core.mlccplan.FabricView``), as switchemu answers the daemon.

Shared by the lab's models that run the daemon's planner (``hostctl.core.mlccplan.plan_slot``) in the
loop without switchemu: the fluid model of mlcc-mixed (``hostctl_lab.fluid.mlcc``) and the cluster
simulator (``hostctl_lab.sim.mlccnet``). What a host sees, per local job ``j`` and link:

- ``other``: the schedules of the *other* jobs that ``j`` plans around, from other hosts: without a job
  order those whose schedules reached the table before ``j``'s (arrival order), under a job order
  (``rank``) those ranked up to ``j``;
- ``same``, ``same_flows``: ``j``'s own flows on other hosts, and how many of them send in each slot;
- ``busy0``: every other host's booking of the current slot.

Every schedule is the one published in the slot before, shifted by one slot (a schedule still sending
in its last slot goes on at that rate). A job's arrival is the first slot its schedules had a rate > 0;
it is forgotten when none of its schedules has one (the job computes), so its next exchange arrives
again, behind the jobs that arrived meanwhile.
"""

from __future__ import annotations

import math
from collections.abc import Hashable, Iterable, Sequence

import numpy as np

from hostctl.core.mlccplan import FabricView

__all__ = ["ScheduleTable"]


class ScheduleTable:
    """The schedules published in the last slot: (job, host, links, K rates) per connection; links are
    global link ids (whatever the model numbers its links with). ``rank``: a job order (job -> rank),
    or None for arrival order."""

    def __init__(self, K: int, rank: dict | None = None) -> None:
        self.K = int(K)
        self.rank = rank
        self.arrival: dict[Hashable, int] = {}  # job -> when its schedules arrived in the table
        self.arrivals = 0
        self._by_link: dict[int, tuple[list, list, list]] = {}  # link -> (jobs, hosts, shifted rows)

    def earlier(self, a: Hashable, b: Hashable) -> bool:
        """Job ``b`` plans around job ``a``'s load (a != b)."""
        if self.rank is not None:
            return self.rank[a] <= self.rank[b]
        return self.arrival.get(a, math.inf) < self.arrival.get(b, math.inf)

    def wave(self, jobs: Sequence[Hashable]) -> np.ndarray:
        """The arrival wave of each of ``jobs`` (a job not in the table yet: after every one that is)."""
        return np.array([self.arrival.get(j, self.arrivals) for j in jobs], dtype=np.int64)

    def publish(self, entries: Iterable[tuple[Hashable, Hashable, Sequence[int], np.ndarray]]) -> None:
        """The schedules of this slot, in publishing order: (job, host, links, rates [K]). Replaces the
        last slot's; updates the arrival order (in publishing order, as the switch records them)."""
        by_link: dict[int, tuple[list, list, list]] = {}
        busy: set = set()
        order: list = []
        for job, host, links, r in entries:
            r = np.maximum(np.asarray(r, dtype=np.float64), 0.0)
            row = np.append(r[1:], r[-1])  # one slot on; a schedule still sending goes on at its last rate
            for ln in links:
                e = by_link.get(int(ln))
                if e is None:
                    e = by_link[int(ln)] = ([], [], [])
                e[0].append(job)
                e[1].append(host)
                e[2].append(row)
            order.append(job)
            if r.any():
                busy.add(job)
        self._by_link = by_link
        for j in [j for j in self.arrival if j not in busy]:
            del self.arrival[j]
        for j in order:
            if j in busy and j not in self.arrival:
                self.arrival[j] = self.arrivals
                self.arrivals += 1

    def empty(self) -> bool:
        """Nothing published and no arrival order kept: publishing nothing again changes nothing."""
        return not self._by_link and not self.arrival

    def view(self, host: Hashable, jobs: Sequence[Hashable], cols: Sequence[int], cap_Bps: np.ndarray,
             avail_Bps: np.ndarray | None = None) -> FabricView:
        """Host ``host``'s view for its local ``jobs`` (plan_slot's job index order) of the links ``cols``
        (global ids, in the host's column order)."""
        J, L, K = len(jobs), len(cols), self.K
        other, same, nsame = np.zeros((J, L, K)), np.zeros((J, L, K)), np.zeros((J, L, K))
        busy0 = np.zeros(L)
        for c, ln in enumerate(cols):
            e = self._by_link.get(int(ln))
            if e is None:
                continue
            for job, h, row in zip(*e):
                if h == host:
                    continue
                busy0[c] += row[0]
                for i, j in enumerate(jobs):
                    if job == j:
                        same[i, c] += row
                        nsame[i, c] += row > 0
                    elif self.earlier(job, j):
                        other[i, c] += row
        cap = np.asarray(cap_Bps, dtype=np.float64)
        return FabricView(cap, cap.copy() if avail_Bps is None else np.asarray(avail_Bps, dtype=np.float64),
                          other, same, nsame, busy0)
