"""MLCC: one host's whole decision for one slot (pure: numpy and stdlib; no clock, socket or kernel).

The daemon (hostctl/policy/mlcc.py), the fluid models (lab/hostctl_lab/fluid/mlcc.py) and the simulator call
:func:`plan_slot`; nothing else decides a rate. The daemon only does I/O around it: it fetches the
switches' feedback and the peers' progress, builds a :class:`FabricView`, calls ``plan_slot`` and
writes ``applied_Bps`` to the pacer, publishes ``rates_Bps`` and sends ``reports`` and ``notify``.

Inputs are arrays over this host's ``n`` flows (it sends them), its ``J`` jobs and the ``L`` links
of their paths (column 0 is conventionally the host's NIC link), for the ``K`` slots from now.

**Per-job fabric views** (docs/mlcc.md, "What each flow sees"). A switch knows every host's published
schedules. For each local job ``j`` and link ``l`` the view holds

* ``other_Bps[j, l]``: other hosts' load of the *other* jobs that ``j`` plans around (all of them; under
  a job order only those ranked before ``j``),
* ``same_Bps[j, l]`` and ``same_flows[j, l]``: other hosts' load of ``j``'s own flows on ``l`` and how many
  of those flows have a rate > 0 in each slot.

Jobs are served in the order the load table saw them (a job plans around the reservations of the others:
the paper's b_l). Inside a job the link is **shared explicitly**: with ``m`` flows of ``j`` on ``l`` here
and ``n`` elsewhere, the other hosts' flows of ``j`` count at most their share ``n / (m + n)`` of what the
other jobs leave (``H = û - other``), and this host's flows of ``j`` may use ``H`` minus what the other
flows of ``j`` really book, up to that share. So every host computes the same split from the same table,
whatever order its flows are listed in, and N workers of one PS incast plan ``1/N`` of the PS downlink
each, not N times the link (a host that joins late takes its share at once; the others see it in the
next slot and give it up). The host's own flows of all its jobs together stay within what the other
hosts leave (``allocate``'s progressive filling, spec Q-M8); with two or more local jobs on a link, each
job's bound is a *virtual link* of the allocator (its own row of headroom, no price), so one
``allocate`` call plans every job, in waves when there is a job order.

**Available bandwidth** ``avail_Bps`` = û (spec 2.7, Q-M5): capacity minus the cross traffic (non-DL)
measured on the link over the last 4 slots (:func:`avail_from_cross`; the NIC link, where the host
measures it); capacity for links it cannot measure.

**Algorithm 2 per iteration** (spec 2.8): F is the bytes of the flow's *current iteration* plus the
slot-0 volume (the paper's accumulated size), never a connection's lifetime count (a PS that sends its
update before the gradient it answers is one whole update ahead on that count). What a flow reports
(:func:`progress_bytes`) depends on the side of the dependency it is on:

* an aggregation flow (worker -> PS) and a ring flow report their F; an idle aggregation flow has
  delivered its gradient, so it reports its whole iteration (``sent + G``);
* a PS's broadcast flows report the largest F among those *sending*; when none is sending the update
  that depends on the current gradients has not started: 0. (So an aggregation flow's Delta = (F_b^max
  - F_i)_+ is 0 while it uploads, and a broadcast flow's Delta speeds it up to its workers' progress.)

**Notifications are enforced** (Alg. 2 lines 13-16): a flow whose receiver was told a ceiling (its F may
not pass ``ceiling`` by the end of this slot) is paced at ``(ceiling - sent) / t``, never below the wait
floor (a flow held at ~0 gets no ACK to release it), and publishes the held plan. A ceiling below what
the flow has sent already belongs to another iteration (the peer rolled over first): it is ignored.

Units: bytes, bytes/s, seconds, as in core/mlcc.py.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from hostctl.core.mlcc import MlccParams, Role
from hostctl.core.mlcchost import HostSlot, host_slot, wait_floor_Bps

__all__ = ["CROSS_WINDOW", "VIRTUAL_CAP_Bps", "FabricView", "SlotDecision", "avail_from_cross", "job_rows",
           "plan_slot", "progress_bytes"]

CROSS_WINDOW = 4  # slots of the max filter of the cross traffic (spec 2.7)
VIRTUAL_CAP_Bps = 1e18  # a virtual link's capacity: it bounds with its headroom only (no price, no floor)
CROSS_OVERHEAD = 0.05  # headers and ACKs: NIC bytes above DL payload bytes that are not cross traffic
CROSS_MIN_FRAC = 0.05  # cross traffic below this fraction of the capacity is noise (ACKs of received DL flows: ~2%)


@dataclass(frozen=True)
class FabricView:
    """What this host knows of the links of its flows' paths for one slot (see the module docstring).

    cap_Bps [L] capacity; avail_Bps [L] û (capacity available to DL traffic); other_Bps, same_Bps,
    same_flows [J, L, K] per local job and link (jobs in the order of ``plan_slot``'s job index)."""

    cap_Bps: np.ndarray
    avail_Bps: np.ndarray
    other_Bps: np.ndarray
    same_Bps: np.ndarray
    same_flows: np.ndarray
    busy0_Bps: np.ndarray | None = None  # [L] other hosts' whole booking in slot 0, any job (None: unknown)

    @classmethod
    def empty(cls, cap_Bps, J: int, K: int, avail_Bps=None) -> FabricView:
        """No other host's load (local mode, or before the first feedback)."""
        cap = np.asarray(cap_Bps, dtype=np.float64)
        z = np.zeros((J, cap.shape[0], K))
        return cls(cap, cap.copy() if avail_Bps is None else np.asarray(avail_Bps, dtype=np.float64), z, z, z)


@dataclass(frozen=True)
class SlotDecision:
    """plan_slot's answer, over the n flows in input order."""

    slot: HostSlot  # the plan (rates_Bps [n, K] to publish; kind, wave, Algorithm 2's arrays)
    applied_Bps: np.ndarray  # [n] rate to write to the pacer now (after any ceiling)
    held: np.ndarray  # [n] bool: paced below its plan by a received ceiling
    reports: np.ndarray  # [n] F this flow reports for its dependants (NaN: nothing to report)
    L_virtual: int = 0  # virtual links used (jobs sharing a link here)


def avail_from_cross(cap_Bps, link_Bps_hist, dl_Bps_hist) -> np.ndarray:
    """û per link: capacity minus the largest cross traffic of the last CROSS_WINDOW slots, where cross
    traffic = measured link rate - this host's DL flows' rate (x 1 + CROSS_OVERHEAD for headers) and
    values under CROSS_MIN_FRAC of the capacity count as 0. link_Bps_hist, dl_Bps_hist [L, S] (S >= 0
    slots, NaN where not measured); clamped to [0, cap] (spec Q-M5)."""
    cap = np.asarray(cap_Bps, dtype=np.float64)
    link = np.asarray(link_Bps_hist, dtype=np.float64).reshape(cap.shape[0], -1)[:, -CROSS_WINDOW:]
    dl = np.asarray(dl_Bps_hist, dtype=np.float64).reshape(cap.shape[0], -1)[:, -CROSS_WINDOW:]
    if link.shape[1] == 0:
        return cap.copy()
    cross = link - dl * (1.0 + CROSS_OVERHEAD)
    cross = np.where(np.isnan(cross) | (cross < CROSS_MIN_FRAC * cap[:, None]), 0.0, cross)
    return np.clip(cap - cross.max(axis=1), 0.0, cap)


def job_rows(view: FabricView, flow_job: np.ndarray, path: np.ndarray, planned: np.ndarray,
             params: MlccParams = MlccParams()) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, int]:
    """The allocator's links for this slot: (path [n, P'], cap [L'], avail [L', K], load [L', K], virtual
    links). Real links 0..L-1 carry the other hosts' load that every local job on them plans around; a
    link with planned flows of two or more local jobs gets one virtual link per such job (index >= L),
    whose headroom is that job's bound on the link (see the module docstring). ``params``: K and the
    slot-0 options (slot0_job_booked, slot0_within_free)."""
    K = int(params.K)
    cap = view.cap_Bps
    L = cap.shape[0]
    J = view.other_Bps.shape[0]
    n = path.shape[0]
    hcap = np.empty((L, K))  # ĉ = min(û, c) in every slot
    hcap[:] = np.minimum(np.asarray(view.avail_Bps, dtype=np.float64).reshape(L, -1), cap[:, None])
    m = np.zeros((J, L + 1))  # this host's planned flows per job and link (column L: padding)
    if n and J:
        pp = path[planned]
        cell = flow_job[planned, None] * (L + 1) + np.where(pp >= 0, pp, L)
        m = np.bincount(cell.ravel(), minlength=J * (L + 1)).reshape(J, L + 1).astype(np.float64)
    m = m[:, :L]
    other, same, nsame = view.other_Bps, view.same_Bps, view.same_flows
    H = np.maximum(hcap - other, 0.0)  # what the other jobs leave to job j [J, L, K]
    mn = m[:, :, None] + nsame
    some = mn > 0
    share_rem = np.where(some, H * nsame / np.where(some, mn, 1.0), 0.0)
    vis = other + np.minimum(same, share_rem)  # what job j plans around on l [J, L, K]
    if params.slot0_job_booked:
        # the job's flows on other hosts fixed the current slot when they planned it: it is planned within
        # what they booked, the job's share counts from slot 1 on (they give way at their next plan)
        vis[:, :, 0] = other[:, :, 0] + same[:, :, 0]
    if params.slot0_within_free and view.busy0_Bps is not None:
        # slot 0 is planned within what the other hosts left free, whoever booked it: a job's share or its
        # precedence counts from slot 1 on, which the hosts it displaces re-plan before it begins
        vis[:, :, 0] = np.maximum(vis[:, :, 0], np.asarray(view.busy0_Bps, dtype=np.float64)[None, :])
    if J <= 1:  # (one local job: its view is the row; none: no flow either)
        return path, cap, hcap, vis[0] if J else np.zeros((L, K)), 0
    local = m > 0  # [J, L]
    # the host's sum on a link: around the least that any of its planned jobs there sees
    load = np.where(local[:, :, None], vis, np.inf).min(axis=0)
    load = np.where(np.isfinite(load), load, vis.min(axis=0))
    # a job whose view of a link differs from the host's row gets a virtual link there (two or more
    # local jobs: with one, its view is the row)
    differs = (local & (np.abs(vis - load).max(axis=2) > 1e-9 * np.maximum(cap, 1.0))).any(axis=0)
    shared = ((local.sum(axis=0) >= 2) & differs).nonzero()[0]
    if shared.size == 0:
        return path, cap, hcap, load, 0
    vj, vl = np.nonzero(local[:, shared])  # (job, shared link) pairs
    vl = shared[vl]
    V = vj.size
    vidx = np.full((J, L + 1), -1, dtype=np.int64)  # (column L: padding)
    vidx[vj, vl] = L + np.arange(V)
    cap2 = np.concatenate([cap, np.full(V, VIRTUAL_CAP_Bps)])
    avail2 = np.concatenate([hcap, np.maximum(hcap[vl] - vis[vj, vl], 0.0)], axis=0)
    load2 = np.concatenate([load, np.zeros((V, K))], axis=0)
    extra = vidx[flow_job[:, None], np.where(path >= 0, path, L)]
    return np.concatenate([path, extra], axis=1), cap2, avail2, load2, V


def progress_bytes(role, sent_bytes, G_bytes, rate0_Bps, kind, slot_s: float) -> np.ndarray:
    """F each flow reports for its dependants (spec 2.8.2, per iteration; module docstring): sent + the
    slot-0 volume; an idle aggregation flow its whole iteration (sent + G; NaN while G is unknown); a
    broadcast flow NaN when idle (the reporter takes the max over its sending flows, 0 without one);
    flows without a role NaN."""
    rl = np.asarray(role, dtype=np.int64)
    sent = np.asarray(sent_bytes, dtype=np.float64)
    G = np.asarray(G_bytes, dtype=np.float64)
    idle = np.asarray(kind) == "idle"
    F = sent + np.asarray(rate0_Bps, dtype=np.float64) * slot_s
    F = np.where(idle, sent, F)
    F = np.where((rl == Role.AGGREGATION.value) & idle, sent + G, F)
    F = np.where((rl == Role.BROADCAST.value) & idle, np.nan, F)
    return np.where(rl == Role.NONE.value, np.nan, F)


def plan_slot(G_bytes, B_Bps, sent_bytes, flow_job, path, view: FabricView, *, moving=None,
              params: MlccParams = MlccParams(), wave=None, idle_share: bool = True, fill: bool = True,
              role=None, ref_bytes=None, slack_bytes=None, ceiling_bytes=None,
              floor_Bps: float | None = None) -> SlotDecision:
    """One host's decision for the current slot.

    G_bytes [n] bytes left this iteration (NaN: unknown); B_Bps [n] max rate over the last 4 slots;
    sent_bytes [n] bytes of this iteration sent before this slot (Algorithm 2's F base); flow_job [n]
    int job index 0..J-1 into the view; path [n, P] link indices padded with -1; view: FabricView.
    moving [n]: progress in the last slot (default all). wave [n] int: the job order's waves (lower
    first; None: one wave). idle_share: see core.mlcchost.host_slot.
    Algorithm 2 (optional): role [n] (Role), ref_bytes [n] (the peers' F, NaN: unknown), slack_bytes
    [n], ceiling_bytes [n] (received notifications, +inf: none)."""
    K, t = int(params.K), float(params.slot_s)
    G = np.asarray(G_bytes, dtype=np.float64).reshape(-1)
    n = G.shape[0]
    if n == 0:
        hs = host_slot(G, [], [], np.zeros(0, dtype=np.int64), np.zeros((0, 1), np.int64), view.cap_Bps,
                       view.avail_Bps, np.zeros((view.cap_Bps.shape[0], K)), params=params)
        return SlotDecision(hs, np.zeros(0), np.zeros(0, dtype=bool), np.zeros(0))
    fj = np.asarray(flow_job, dtype=np.int64).reshape(n)
    pidx = np.asarray(path, dtype=np.int64).reshape(n, -1)
    mv = np.ones(n, dtype=bool) if moving is None else np.asarray(moving, dtype=bool)
    planned = mv & (np.isnan(G) | (G > 0))  # (host_slot's kind != "idle")
    xpath, cap, avail, load, V = job_rows(view, fj, pidx, planned, params)
    sent = np.asarray(sent_bytes, dtype=np.float64)
    deps = {}
    if role is not None:
        deps = {"role": role, "ref_bytes": ref_bytes, "slack_bytes": slack_bytes, "ceiling_bytes": ceiling_bytes}
    hs = host_slot(G, B_Bps, sent, fj, xpath, cap, avail, load, moving=mv, params=params, floor_Bps=floor_Bps,
                   fill=fill, waves=wave, idle_share=idle_share, **deps)
    applied = hs.applied_Bps
    held = np.zeros(n, dtype=bool)
    reports = np.full(n, np.nan)
    if role is not None:
        floor = wait_floor_Bps(t) if floor_Bps is None else float(floor_Bps)
        if ceiling_bytes is not None:
            ceil = np.asarray(ceiling_bytes, dtype=np.float64)
            room = (ceil - sent) / t
            # a ceiling binds a flow that has bytes to send, has not passed it yet (else: another iteration)
            # and could pass it in this slot (with its bytes left: unknown ones could)
            bind = np.isfinite(ceil) & planned & (ceil >= sent) & (room < applied) \
                & ~(sent + G <= ceil)
            applied = np.where(bind, np.maximum(room, floor), applied)
            held = bind
        reports = progress_bytes(role, sent, G, hs.rates_Bps[:, 0], hs.kind, t)
    return SlotDecision(hs, applied, held, reports, V)
