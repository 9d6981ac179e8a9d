"""One host's MLCC slot as arrays (pure): monitor rows + load tables -> rates to apply
and schedules to publish, on the links core/mlccplan.py assembled (it calls this: the whole decision of
a host is core.mlccplan.plan_slot); the allocator itself is hostctl.core.mlcc.allocate.

Which flows are planned, and how (choices the papers leave to the implementer):

- **Active** flows (bytes left this iteration known and > 0, ``G > 0``) are planned by
  ``allocate`` (Algorithms 1 and 2) in one wave: progressive filling shares each link
  among this host's flows (Q-M8). ``by_job=True`` plans them in waves by job instead, the
  job with the fewest bytes left on this host first (SRPT; ties by job order), which
  staggers this host's jobs over the horizon. It is off by default: with PS and ring
  all-reduce jobs mixed it makes the ring jobs wait behind PS flows at every worker host,
  slot after slot (docs/mlcc.md).
- **Unknown-size** flows (no iteration size learnt yet: the first iteration without a
  hint, ``G`` NaN) are planned as backlogged (``G`` = what their path carries in K
  slots) in a last wave: they take what the known flows leave, and their schedule is
  published like any other, so other hosts see their load.
- **Idle** flows (``G == 0``: this iteration's bytes are all sent; or no progress in the
  last slot, whatever G says: the monitor's byte count can lag a finished burst by its
  last window, and a flow that was free to send but did not has nothing to send) are not
  planned; they
  get an *idle rate*, the headroom of their path in slot 0 (capacity minus other hosts'
  planned load; at least an equal share of their tightest link among this host's flows),
  so that a new iteration's burst starts as it would without hostctl (TCP shares it)
  until the next slot plans it. An equal share alone would hold a burst that starts
  while the host's other flows are idle to 1/n of the link: not work-conserving.
  Under a job order (``idle_share=False``, policy.mlcc's ``--job-order``) the idle rate is
  the headroom alone (at least the wait floor).
- **Work-conserving slot 0** (``fill``, default on; not in the paper): capacity that the
  plans leave free in slot 0 (Algorithm 1 fills a flow's chosen slots to finish just in
  time, and waves can leave a link part-used) goes to flows that still have bytes planned
  later, in wave order and max-min fair within a wave, taken off their last slots. Only
  slot 0 is filled: it is the only one that is applied, and the rest is re-planned next
  slot anyway.
- A flow whose plan ends in slot 0 is paced at the path's headroom in slot 0 (the
  capacity minus other hosts' load), not at its slot-0 volume / t: the tables count
  volume per slot, so sending that volume early in the slot changes no other plan, while
  stretching a 5 ms burst over a 60 ms slot would add 55 ms to its iteration (the paper's
  flows span many slots; the testbed's bursts are shorter than a slot).
- Unknown-size flows publish their slot-0 rate only (they reserve no future slot they may
  not use).
- Every flow that has bytes gets at least ``wait_floor_Bps`` (64 KiB per slot: 1.09 MB/s at
  60 ms), also in a slot where its plan says 0. Two reasons. The pacer changes a socket's
  rate only on its TCP callbacks (hostctl/bpf/hc_pace.c), so a flow held at ~0 would get no ACK,
  hence no callback, and could not be released in time. And TCP's own pacing sends a
  whole GSO packet (up to 64 KiB: on paths with an RTT under 512 us, tcp_tso_autosize adds
  gso_max_size >> (min_rtt_us >> tcp_tso_rtt_log) whatever the rate) and then waits
  len / rate before the next one; raising the rate does not shorten a wait already
  started (Linux 5.18+, net.ipv4.tcp_tso_rtt_log = 9 by default): a lower floor leaves a
  released flow waiting out its last GSO packet's gap (tests/integration/test_pacer.py
  measures the release). The floor costs at most n x floor on a link and is published as
  the flow's slot-0 rate.
- **Algorithm 2** (``role`` given; core/mlccplan.py builds the inputs): Delta raises the rate a flow is
  *paced* at (capped by B_i, its bytes left and the headroom its links have left: ``delta_within_avail``).
  A received notification lowers the schedule the flow *publishes* here (``apply_reductions``);
  core/mlccplan.plan_slot holds the *paced* rate to the ceiling as well.
- The links may include *virtual* links (core/mlccplan.job_rows: a job's bound on a link that several of
  this host's jobs share): their capacity is huge and only their headroom (``avail``) bounds; every
  headroom here is ``min(avail, cap) - load``.

Units: bytes, bytes/s, seconds (as in core/mlcc.py).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from hostctl.core.mlcc import (
    MlccParams, MlccPlan, Role, _path_min, allocate, allocate_prepared, apply_reductions, path_links,
)

GSO_MAX_BYTES = 65536  # a TCP socket's largest packet (gso_max_size, the kernel's default)
WAIT_FLOOR_BYTES_PER_SLOT = GSO_MAX_BYTES  # see the module docstring


@dataclass(frozen=True)
class HostSlot:
    """The decision for one slot, over the host's n flows (input order)."""

    rates_Bps: np.ndarray  # [n, K] schedule to publish (slot 0 = the applied rate)
    applied_Bps: np.ndarray  # [n] rate to write to the pacer now (> 0)
    kind: np.ndarray  # [n] str: "active", "unknown" or "idle"
    wave: np.ndarray  # [n] int: priority wave (-1 for idle flows)
    plan: MlccPlan | None  # the allocator's result for the planned rows (None if none)
    cum_bytes: np.ndarray | None = None  # [n] F: sent_bytes + slot-0 volume (Algorithm 2's progress)
    delta_Bps: np.ndarray | None = None  # [n] Algorithm 2's increase (0 for flows without one)
    notify_bytes: np.ndarray | None = None  # [n] ceiling to notify the receiver of (NaN: no notification)
    reduced_bytes: np.ndarray | None = None  # [n] slot-0 bytes taken off by received notifications


def wait_floor_Bps(slot_s: float) -> float:
    """The least rate a planned flow is paced at: one largest TCP packet per slot."""
    return WAIT_FLOOR_BYTES_PER_SLOT / slot_s


def job_waves(job: np.ndarray, job_left: dict[str, float]) -> np.ndarray:
    """Wave per flow: jobs ranked by bytes left on this host, fewest first (ties: job id)."""
    order = sorted(set(job.tolist()), key=lambda j: (job_left.get(j, float("inf")), j))
    rank = {j: i for i, j in enumerate(order)}
    return np.array([rank[j] for j in job.tolist()], dtype=np.int64)


def _fill_slot0(rates, planned, wave, pidx, head0, t) -> None:
    """Work-conserving slot 0: what the plans leave free in slot 0 on every link (capacity minus
    other hosts' load minus this host's slot-0 volumes) goes to flows that still have bytes planned
    for later slots, moved from their last slots. Wave by wave (the same order as the plan); within
    a wave, max-min fair by progressive filling, as the plan itself shares a link. (A greedy fill in
    row order gave the same flow the free capacity in every slot: the workers of a PS job whose
    updates left in key order got them at 0.26 s and 0.41-0.43 s, so every job waited for its last
    worker: racks-uplink, docs/benchmarks.md.)"""
    L = head0.shape[0]
    rows = pidx[planned]
    # slot-0 volume per link (padding -> bin L); bincount adds in the same order as np.add.at did
    use = np.bincount(np.where(rows >= 0, rows, L).ravel(), weights=np.repeat(rates[planned, 0], rows.shape[1]),
                      minlength=L + 1)
    free = np.append(np.maximum(head0 - use[:L], 0.0), np.inf)  # [L + 1]: padding never limits
    later = rates[planned, 1:].sum(axis=1)
    cand = planned[later > 0]
    if cand.size == 0 or free[:L].max(initial=0.0) <= 0:
        return
    links = pidx[cand]
    links = np.where((links >= 0) & (links < L), links, L)  # padding -> the +inf bin
    on_some = (links < L).any(axis=1)  # flows on some link
    cand, links = cand[on_some], links[on_some]
    cw = wave[cand]
    # free only decreases: a wave whose flows all have a full path now gets nothing (and changes nothing)
    open_now = _path_min(free, links.T) > 1e-9
    for w in sorted(set(cw[open_now].tolist())):
        sel = cw == w
        rs, M = cand[sel], links[sel]
        act = _path_min(free, M.T) > 1e-9  # (a flow whose path is full gets nothing)
        if not act.any():
            continue
        need = rates[rs, 1:].sum(axis=1)
        given = np.zeros(rs.size)
        for _round in range(rs.size + L + 1):  # each round ends a flow or fills a link
            if not act.any():
                break
            Ma = M[act]
            on = np.bincount(Ma.ravel(), minlength=L + 1).astype(np.float64)  # filling flows per link
            on[L] = 1.0
            offer = np.maximum(np.minimum(need[act], _path_min(free / np.maximum(on, 1.0), Ma.T)), 0.0)
            given[act] += offer
            need[act] -= offer
            free -= np.bincount(Ma.ravel(), weights=np.repeat(offer, Ma.shape[1]), minlength=L + 1)
            free[L] = np.inf
            # done: flows with nothing left to move, or on a link that is full now
            act &= (need > 1e-9 * np.maximum(1.0, given)) & (_path_min(free, M.T) > 1e-9)
        moved = given > 0
        if moved.any():
            rs, extra = rs[moved], given[moved]
            rates[rs, 0] += extra
            # take the same volume off their last planned slots
            tail = rates[rs, :0:-1]  # slots K-1 .. 1
            taken = np.minimum(tail, np.maximum(extra[:, None] - (np.cumsum(tail, axis=1) - tail), 0.0))
            rates[rs, :0:-1] = tail - taken
        if free[:L].max() <= 0:
            break  # every link is full: the later waves would get nothing


def _left_by_earlier_waves(wave, idle, planned, rate0, gidx, head0) -> np.ndarray:
    """For each idle flow, the least over its path of what the planned flows of the waves before its own
    leave in slot 0: head0 [L] minus their slot-0 rates rate0 [n] on each link (gidx [n, P]: padding L).
    One bincount over the cells (idle wave, link), wave-major and the flows in row order within a wave,
    so every sum adds in the same order as one bincount per wave."""
    L = head0.shape[0]
    waves, row = np.unique(wave[idle], return_inverse=True)  # the idle flows' waves; each idle flow's one
    bw, bi = (wave[planned][None, :] < waves[:, None]).nonzero()  # (idle wave, earlier planned flow)
    rb = gidx[planned[bi]]
    use = np.bincount((bw[:, None] * (L + 1) + rb).ravel(), weights=np.repeat(rate0[planned[bi]], rb.shape[1]),
                      minlength=waves.size * (L + 1)).reshape(waves.size, L + 1)
    left = np.maximum(head0 - use[:, :L], 0.0)  # [W, L]
    left = np.concatenate([left, np.full((waves.size, 1), np.inf)], axis=1).ravel()
    return _path_min(left, row * (L + 1) + gidx[idle].T)


def _allocate(G, path, load, avail, cap, B, sent, prio, params: MlccParams, dep: dict) -> MlccPlan:
    """allocate() on host_slot's arrays for its planned flows (dep: role, ref_bytes, succ_bytes and
    slack_bytes, or empty). Arrays that allocate() would accept go straight to allocate_prepared (the
    same plan without checking every argument again); others to allocate(), which names a bad one.
    Without roles the check is for NaN and inf only, as it always was (a slightly negative load from a
    subtraction is planned as it is)."""
    n, L = G.shape[0], cap.shape[0]
    if not dep:
        ok = all(np.isfinite(a).all() for a in (load, B, G)) and (cap > 0).all()
    else:  # everything allocate() checks of these arguments (its shapes hold by construction but load's)
        rl = dep["role"]
        on = rl != Role.NONE.value
        ref = np.where(on, dep["ref_bytes"], 0.0)  # (allocate ignores the others' references)
        slack = dep.get("slack_bytes", np.zeros(n))
        vals = np.concatenate((load.ravel(), avail.ravel(), cap, B, sent, G, ref, np.abs(dep["ref_bytes"]), slack))
        ok = load.shape == (L, int(params.K)) and avail.shape in ((L,), (L, int(params.K))) \
            and vals.min(initial=0.0) >= 0 and vals.max(initial=0.0) < np.inf and (cap > 0).all() \
            and rl.min() >= 0 and rl.max() <= 3
    if not ok:  # allocate checks every argument and names a bad one
        return allocate(G, path, load, avail, cap, B, sent_bytes=sent, priority=prio, params=params, **dep)
    inc, pl = path_links(path, n, L)
    if not dep:
        return allocate_prepared(G, inc, pl, load, avail.reshape(L, -1), cap, B, sent, prio, params)
    return allocate_prepared(G, inc, pl, load, avail.reshape(L, -1), cap, B, sent, prio, params,
                             rl=rl.astype(np.int8), ref=ref, slack=slack, succ=dep["succ_bytes"])


def host_slot(G_bytes, B_Bps, sent_bytes, job, path, cap_Bps, avail_Bps, load_Bps, *, moving=None,
              params: MlccParams = MlccParams(), floor_Bps: float | None = None, fill: bool = True,
              by_job: bool = False, role=None, ref_bytes=None, slack_bytes=None, ceiling_bytes=None,
              idle_share: bool = True, waves=None) -> HostSlot:
    """Plan this host's flows for the current slot.

    G_bytes [n]: bytes left this iteration (NaN: unknown); B_Bps [n]: max rate over the last
    4 slots; sent_bytes [n]: bytes of this iteration already sent; job [n]: job id per flow;
    path [n, P]: link indices padded with -1 (every flow crosses at least its NIC link);
    cap_Bps [L], avail_Bps [L], load_Bps [L, K]: per-link capacity, capacity available to DL
    traffic and the load of *other* hosts' flows (see core/mlcc.allocate). moving [n] (default
    all): the flow made progress in the last slot; one that did not is idle whatever its G says
    (it was free to send and did not: the application has nothing to send, e.g. it waits at the
    barrier while the last ACKs of its burst are not counted yet).

    Algorithm 2 (optional, core/deps.py): role [n] (Role), ref_bytes [n] (the peers' F; a flow
    whose ref is NaN has no Delta this slot but still notifies), slack_bytes [n] (ring: one
    chunk); sent_bytes is then the F base (cumulative bytes of the connection, the same measure
    on every host). ceiling_bytes [n]: received notifications
    (+inf: none), applied with apply_reductions to the schedule the flow *publishes* (rates_Bps),
    not to the rate it is paced at (applied_Bps): see the module docstring.

    waves [n] int (optional): the planned flows' jobs' waves, lower first (a job order); overrides by_job.
    It decides before known or unknown size: unknown sizes go last only within their wave.

    idle_share=False: an idle flow's rate is its path's slot-0 headroom only (at least the wait
    floor), not at least an equal share of its tightest link: under a job order (policy.mlcc), a job's
    new burst must not run over the reservations of the jobs ranked before it."""
    K, t = int(params.K), float(params.slot_s)
    G = np.asarray(G_bytes, dtype=np.float64)
    n = G.shape[0]
    rates = np.zeros((n, K))
    kind = np.full(n, "idle", dtype=object)
    wave = np.full(n, -1, dtype=np.int64)
    if n == 0:
        return HostSlot(rates, np.zeros(0), kind, wave, None)
    pidx = np.asarray(path, dtype=np.int64).reshape(n, -1)
    cap = np.asarray(cap_Bps, dtype=np.float64)
    L = cap.shape[0]
    floor = wait_floor_Bps(t) if floor_Bps is None else float(floor_Bps)

    valid = pidx >= 0
    gT = np.where(valid, pidx, L).T  # padding -> an extra link of infinite capacity; [P, n] for _path_min
    ext_cap = np.append(cap, np.inf)
    path_cap = _path_min(ext_cap, gT)  # [n] tightest link
    mv = np.ones(n, dtype=bool) if moving is None else np.asarray(moving, dtype=bool)
    unknown = np.isnan(G) & mv
    active = (G > 0) & mv  # (NaN > 0 is False)
    kind[active] = "active"
    kind[unknown] = "unknown"
    idle = ~(active | unknown)  # (kind == "idle")

    planned = (active | unknown).nonzero()[0]
    plan = held = None
    if planned.size:
        w = np.zeros(planned.size, dtype=np.int64)
        known = active[planned]
        if waves is not None:
            # the job order decides, as on the switches (and in policy mlcc-bands' bands): a later job's
            # flow of known size never goes before an earlier job's flow of unknown size. Within a job,
            # its flows of unknown size after its known ones.
            w = 2 * np.asarray(waves, dtype=np.int64)[planned] + ~known
        elif known.any():
            if by_job:
                job = np.asarray(job, dtype=object)
                job_left: dict[str, float] = {}
                for j, g in zip(job[active].tolist(), G[active].tolist()):
                    job_left[j] = job_left.get(j, 0.0) + g
                w[known] = job_waves(job[planned][known], job_left)
            w[~known] = int(w[known].max()) + 1  # unknown sizes after every known one
        wave[planned] = w
        Gp = np.where(unknown[planned], path_cap[planned] * K * t, G[planned])
        B = np.asarray(B_Bps, dtype=np.float64)[planned]
        sent_p = np.asarray(sent_bytes, dtype=np.float64)[planned]
        load = np.asarray(load_Bps, dtype=np.float64)
        avail = np.asarray(avail_Bps, dtype=np.float64)
        dep = {}
        if role is not None:
            ref = np.asarray(ref_bytes, dtype=np.float64)[planned]
            rl = np.asarray(role, dtype=np.int64)[planned]
            if (rl != Role.NONE.value).any():
                # no reference: ref 0 gives no Delta; the flow still notifies its receiver (succ unknown)
                has_ref = ~np.isnan(ref)
                dep = {"role": rl, "ref_bytes": np.where(has_ref, ref, 0.0),
                       "succ_bytes": np.where(has_ref & (rl == Role.AGGREGATION.value), ref, np.nan)}
                if slack_bytes is not None:
                    dep["slack_bytes"] = np.asarray(slack_bytes, dtype=np.float64)[planned]
        plan = _allocate(Gp, pidx[planned], load, avail, cap, B, sent_p, w, params, dep)
        rates[planned] = plan.rates_Bps
        if ceiling_bytes is not None:
            ceil = np.asarray(ceiling_bytes, dtype=np.float64)[planned]
            if np.isfinite(ceil).any():
                held = apply_reductions(plan, ceil, params)
    load0 = np.asarray(load_Bps, dtype=np.float64)[:, 0]  # other hosts' load in slot 0
    av0 = np.asarray(avail_Bps, dtype=np.float64).reshape(L, -1)[:, 0]
    link_head0 = np.maximum(np.minimum(av0, cap) - load0, 0.0)  # what the other hosts leave in slot 0 (û)
    if plan is not None and fill:
        _fill_slot0(rates, planned, wave, pidx, link_head0, t)
    # a flow whose plan ends in slot 0 may send that slot's volume at up to the path's headroom
    # (slot-0 rate of the plan = its volume / t): the table counts volume per slot, and a burst
    # stretched over the whole slot would only add its length to the iteration
    head0 = _path_min(np.append(link_head0, np.inf), gT)
    ends_now = np.zeros(n, dtype=bool)
    if plan is not None:
        ends_now[planned] = (plan.beta == 1) & ~unknown[planned]
    r0 = np.where(ends_now, np.maximum(rates[:, 0], head0), rates[:, 0])
    if waves is not None and not idle_share and idle.any() and planned.size:
        # under a job order an idle flow's new burst must not run over the slot-0 plans of the jobs
        # ranked before its own on this host: its headroom is what they leave
        head0[idle] = _left_by_earlier_waves(np.asarray(waves, dtype=np.int64), idle, planned, rates[:, 0],
                                             gT.T, link_head0)
    idle_rate = floor
    if idle_share and idle.any():
        # at least an equal share of the tightest link among this host's flows on it
        flows_on = np.append(np.bincount(pidx[valid], minlength=L), 1).astype(np.float64)
        idle_rate = _path_min(ext_cap / np.maximum(flows_on, 1.0), gT)
    applied = np.where(idle, np.maximum(idle_rate, head0), np.maximum(r0, floor))
    applied = np.minimum(applied, path_cap)
    rates[:, 0] = np.where(idle, 0.0, np.maximum(rates[:, 0], np.minimum(floor, applied)))
    # unknown sizes reserve nothing ahead: they publish the slot they are in only
    rates[unknown, 1:] = 0.0
    if role is None:
        return HostSlot(rates, applied, kind, wave, plan)
    sent = np.asarray(sent_bytes, dtype=np.float64)
    cum = sent + rates[:, 0] * t  # by the end of the slot at the rate it is paced at (before any hold)
    delta, notify, reduced = np.zeros(n), np.full(n, np.nan), np.zeros(n)
    if plan is not None:
        delta[planned] = plan.delta_Bps
        notify[planned] = np.where(plan.notify, plan.notify_ceiling_bytes, np.nan)
    if held is not None:
        # a notified flow publishes the held plan; it is still paced at its own plan's rate
        rows = planned[held.reduction_bytes > 0]
        reduced[planned] = held.reduction_bytes
        rates[rows] = held.rates_Bps[held.reduction_bytes > 0]
    return HostSlot(rates, applied, kind, wave, plan, cum_bytes=cum, delta_Bps=delta,
                    notify_bytes=notify, reduced_bytes=reduced)
