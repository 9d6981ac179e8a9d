"""The per-slot pacing control of the daemon (policies that pace flows: ``cap``, ``mlcc``, ``mlcc-bands``).

Every slot (60 ms by default) the daemon's loop calls ``PaceControl.tick``:
  1. one batched read of the kernel's flow table and the completed bursts;
  2. the monitor (hostctl.core.monitor, pure) turns them into per-flow slot bytes,
     rates, the 4-slot max rate B_i, iteration counts and bytes left;
  3. the policy turns jobs and flows into a PaceTable (selectors + rates), which the
     datapath diffs into its maps; then the heartbeat that keeps the lease alive.
     ``cap``: each job's cap split over its active flows; ``mlcc`` and ``mlcc-bands``: every flow's
     rate planned over the next K slots (hostctl.policy.mlcc, with or without switchemu).
Everything here runs in the loop's thread; hints from the control socket are queued
and applied at the next tick (the monitor is not thread-safe).
"""

from __future__ import annotations

import logging
import threading
import time
from collections import deque
from collections.abc import Callable, Mapping

import numpy as np

from hostctl.config import Config
from hostctl.core.deps import JobComm
from hostctl.core.monitor import FlowMonitor, MonitorParams
from hostctl.core.pace import PaceTable, cap_rates, selectors, watch_ports
from hostctl.core.plan import MAX_JOB_SLOTS, allocate_slots
from hostctl.core.types import FlowKey, Job
from hostctl.datapath import UNLIMITED_BPS_BYTES, BurstBatch, FlowRecord

NAN = float("nan")
log = logging.getLogger("hostctl")


def _intra_host(key: FlowKey) -> bool:
    """Traffic that stays on this host (loopback, or to its own address): not scheduled."""
    return key.raddr == key.laddr or key.raddr.startswith("127.")


def _num(x: float) -> float | None:
    """JSON-friendly: nan -> None."""
    return None if x is None or x != x else float(x)


class PaceControl:
    def __init__(self, config: Config, datapath, mono: Callable[[], float] = time.monotonic, *,
                 link_rate_bps: int | None = None, switch=None, wall: Callable[[], float] = time.time) -> None:
        self.config = config
        self.datapath = datapath
        self.mono = mono
        # the kernel cuts bursts at the same gap, so each burst record proves its gap
        self.monitor = FlowMonitor(MonitorParams(slot_s=config.slot_s, phase_gap_s=config.phase_gap_s,
                                                 kernel_gap_s=config.phase_gap_s))
        self.slots: dict[str, int] = {}
        self.table = PaceTable()
        self._ids: dict[FlowKey, int] = {}
        self._next_id = 0
        self._records: dict[FlowKey, FlowRecord] = {}
        self._flow_job: dict[FlowKey, str] = {}
        # selectors() of the last (jobs, slots): jobs change at rescans only (every 0.5-1 s), not per slot
        self._sel_key: tuple | None = None
        self._sel: tuple[dict, dict, dict] = ({}, {}, {})
        # the ports of port specs: a worker's connection to one is watched until its job exists
        self.watch_ports = watch_ports(config.jobs)
        # the flows in key order, kept while the flow set does not change: sorting 100 keys every
        # slot costs more than comparing the sets
        self._sorted_keys: list[FlowKey] = []
        self._sorted_set: frozenset[FlowKey] = frozenset()
        self._hints: list[tuple[str, int | None, float | None]] = []
        self._hint_lock = threading.Lock()
        self.ctl: dict[str, int] = {}
        self.ticks = 0
        self.burst_records = 0  # burst records read from the kernel (the monitor's main input)
        self.errors = 0
        self.tick_ms: deque[float] = deque(maxlen=200)
        self.full_warned = 0
        self.mlcc = None
        # the NIC's tx counter, when it was read, and the DL flows' bytes_sent then
        self._nic_last: tuple[int | None, float, dict[FlowKey, int]] = (None, 0.0, {})
        if config.plans_mlcc:  # mlcc, mlcc-bands (whose bands the daemon sets in the same job order)
            from hostctl.policy.mlcc import MlccControl

            rate = link_rate_bps or config.link_rate_bps
            if not rate:
                raise ValueError(f"policy {config.policy} needs the link rate (the NIC link's capacity)")
            self.mlcc = MlccControl(rate // 8, config.slot_s, switch=switch, horizon=config.horizon, wall=wall,
                                    deps=config.deps, job_order=config.fabric_order,
                                    order_interval_s=config.rr_interval_s)

    # -- from other threads -----------------------------------------------------------
    def hint(self, job: str, bytes_per_iter: int | None, iteration_start_mono: float | None) -> None:
        with self._hint_lock:
            self._hints.append((job, bytes_per_iter, iteration_start_mono))

    # -- the slot ------------------------------------------------------------------------
    def _flow_id(self, key: FlowKey) -> int:
        fid = self._ids.get(key)
        if fid is None:
            fid = self._ids[key] = self._next_id
            self._next_id += 1
        return fid

    def caps_Bps(self, jobs: Mapping[str, Job]) -> dict[str, int]:
        per_job = self.config.job_caps_bps()
        out = {}
        for jid in jobs:
            bps = per_job.get(jid, self.config.cap_bps)
            if bps:
                out[jid] = bps // 8
        return out

    def tick(self, now: float, jobs: Mapping[str, Job]) -> None:
        self.ticks += 1
        with self._hint_lock:
            hints, self._hints = self._hints, []
        for job, size, start in hints:
            self.monitor.hint(job, size, start)

        self.slots, _dropped = allocate_slots(sorted(jobs), self.slots, MAX_JOB_SLOTS)
        slot_job = {s: j for j, s in self.slots.items()}
        readout = self.datapath.read_pacing()
        t_read = self.mono()  # the monitor places boundaries by the time of the read, not of the tick
        self.ctl = readout.ctl
        if readout.ctl.get("flows_full", 0) > self.full_warned:
            log.warning("pacing flow table full: %d flow(s) are neither counted nor paced",
                        readout.ctl["flows_full"])
            self.full_warned = readout.ctl["flows_full"]
        self._records = records = {}
        self._flow_job = flow_job = {}
        jobs_l, acked_l, closed = [], [], []  # closed: ended, or of no job any more (forgotten below)
        for r in readout.flows:
            key, job = r.key, slot_job.get(r.slot)
            if job is None:
                closed.append(key)
                continue
            if r.closed:
                closed.append(key)
            records[key] = r
            flow_job[key] = job
            jobs_l.append(job)
            acked_l.append(r.bytes_acked)
        if readout.bursts:
            self.burst_records += len(readout.bursts)
            bursts = BurstBatch.of(readout.bursts)  # the pacer's are columns already
            ids_of = self._ids.get
            fid = np.array([ids_of(k, -1) for k in bursts.keys], dtype=np.int64)
            known = fid >= 0
            if known.any():
                self.monitor.bursts(fid[known], bursts.start_ns[known] / 1e9, bursts.end_ns[known] / 1e9,
                                    bursts.nbytes[known].astype(np.int64))
        # ids after the bursts: the records of a flow read for the first time are left out
        ids = np.array([self._flow_id(k) for k in records], dtype=np.int64)
        self.monitor.observe(max(now, t_read), ids, jobs_l,
                             np.array(acked_l, dtype=np.int64))
        if closed:
            self.datapath.forget(closed)
            for k in closed:
                self._ids.pop(k, None)

        if self.mlcc is not None:
            self._observe_nic(readout.link_tx_bytes, readout.flows, t_read)
        self.table = self.plan(jobs)
        self.datapath.pace(self.table)
        self.datapath.heartbeat()

    def _observe_nic(self, tx_bytes: int | None, flows: list[FlowRecord], t: float) -> None:
        """The NIC's transmit rate since the last read and the DL flows' part of it (their bytes_sent, read
        with it), for MLCC's û."""
        sent = {r.key: r.bytes_sent for r in flows}
        last, self._nic_last = self._nic_last, (tx_bytes, t, sent)
        if tx_bytes is None or last[0] is None or t <= last[1] or tx_bytes < last[0]:
            return
        before = last[2]
        dl = sum(max(b - before.get(k, 0), 0) for k, b in sent.items())
        dt = t - last[1]
        self.mlcc.observe_nic((tx_bytes - last[0]) / dt, dl / dt)

    def plan(self, jobs: Mapping[str, Job]) -> PaceTable:
        """Selectors for every job; rates from the policy (cap or mlcc)."""
        ports, flows, remotes = self._selectors(jobs)
        stats = self.monitor.flow_stats()
        if self.mlcc is not None:
            comms = {jid: JobComm(j.comm, frozenset(j.listen_ports), j.ring_size)
                     for jid, j in jobs.items() if j.comm} if self.mlcc.wants_comms else None
            sizes = {jid: j.model_bytes for jid, j in jobs.items()} if self.mlcc.wants_sizes else None
            return PaceTable(ports, flows, self.mlcc.tick(self._mlcc_flows(stats), comms, sizes), {}, remotes)
        recent = {int(i) for i, r in zip(stats.flow_id, stats.max_rate_Bps) if r > 0}
        job_flows: dict[str, list[FlowKey]] = {}
        for key, job in self._flow_job.items():
            if not self._records[key].closed:
                job_flows.setdefault(job, []).append(key)
        active = {k for k in self._flow_job if self._ids.get(k) in recent}
        flow_rates, job_rates = cap_rates(self.caps_Bps(jobs), job_flows, active)
        slot_rates = {self.slots[j]: r for j, r in job_rates.items() if j in self.slots}
        return PaceTable(ports, flows, flow_rates, slot_rates, remotes)

    def _selectors(self, jobs: Mapping[str, Job]) -> tuple[dict, dict, dict]:
        """selectors() of the jobs and their slots, recomputed only when either changed (the
        tables share the dicts: nobody mutates a PaceTable's maps)."""
        key = (tuple(jobs.values()), dict(self.slots))  # a copy: the slots may change in place
        if key != self._sel_key:
            self._sel = selectors(list(key[0]), self.slots, watch_ports=self.watch_ports)
            self._sel_key = key
        return self._sel

    def _flows_in_order(self) -> list[FlowKey]:
        """This slot's flows (of a job, open or not) in key order, re-sorted only when the set changed."""
        keys = self._flow_job.keys()
        if keys != self._sorted_set:
            self._sorted_set = frozenset(keys)
            self._sorted_keys = sorted(keys)
        return self._sorted_keys

    def _mlcc_flows(self, stats) -> list:
        """This host's open inter-host DL flows, with the monitor's view of each."""
        from hostctl.policy.mlcc import FlowIn

        row_of = {fid: i for i, fid in enumerate(stats.flow_id.tolist())}
        # plain lists: indexing numpy arrays element by element costs more than the conversion
        left, max_rate, rate = stats.bytes_left.tolist(), stats.max_rate_Bps.tolist(), stats.rate_Bps.tolist()
        it_bytes, active = stats.iter_bytes.tolist(), stats.active.tolist()
        out = []
        records, ids, flow_job = self._records, self._ids, self._flow_job
        for key in self._flows_in_order():
            r = records[key]
            if r.closed or _intra_host(key):
                continue  # intra-host traffic is not scheduled (spec 2.2)
            i = row_of.get(ids.get(key, -1))
            if i is None:
                out.append(FlowIn(key, flow_job[key], NAN, 0.0, 0.0, cum_bytes=r.bytes_sent))
                continue
            # (tolist() gave Python floats and bools already)
            out.append(FlowIn(key, flow_job[key], left[i], max_rate[i], float(it_bytes[i]), active[i], rate[i],
                              r.bytes_sent))
        return out

    def close(self) -> None:
        if self.mlcc is not None:
            self.mlcc.close()

    # -- status ------------------------------------------------------------------------------
    def status(self) -> dict:
        stats = self.monitor.flow_stats()
        row_of = {int(fid): i for i, fid in enumerate(stats.flow_id)}
        flows = []
        for key, rec in sorted(self._records.items()):
            i = row_of.get(self._ids.get(key, -1))
            target = self.table.flow_rates.get(key)
            sched = self.mlcc.schedule_of(key) if self.mlcc is not None else None
            flows.append({
                "flow": str(key), "job": self._flow_job.get(key), "plan": sched,
                "target_bps": target * 8 if target else None,
                "applied_bps": None if rec.rate_Bps == UNLIMITED_BPS_BYTES else rec.rate_Bps * 8,
                "rate_bps": float(stats.rate_Bps[i]) * 8 if i is not None else 0.0,
                "max_rate_bps": float(stats.max_rate_Bps[i]) * 8 if i is not None else 0.0,
                "iter_bytes": int(stats.iter_bytes[i]) if i is not None else 0,
                "iterations": int(stats.iterations[i]) if i is not None else 0,
                "bytes_per_iter": _num(stats.bytes_per_iter[i]) if i is not None else None,
                "bytes_left": _num(stats.bytes_left[i]) if i is not None else None,
                "bytes_acked": rec.bytes_acked, "srtt_us": rec.srtt_us, "cwnd": rec.snd_cwnd,
                "retrans": rec.total_retrans, "closed": rec.closed,
            })
        caps = {j: c * 8 for j, c in self.caps_Bps({j: None for j in self.slots}).items()}
        jobs = {}
        for jid, js in self.monitor.jobs().items():
            jobs[jid] = {"flows": js.flows, "iterations": js.iterations, "bytes_per_iter": _num(js.bytes_per_iter),
                         "iter_bytes": js.iter_bytes, "bytes_left": _num(js.bytes_left), "source": js.source,
                         "cap_bps": caps.get(jid)}
        ms = sorted(self.tick_ms)
        return {
            "slot_s": self.config.slot_s, "flows": flows, "jobs": jobs, "ticks": self.ticks,
            "burst_records": self.burst_records,
            "tick_ms_p50": ms[len(ms) // 2] if ms else None, "tick_ms_p90": ms[int(len(ms) * 0.9)] if ms else None,
            "kernel": dict(self.ctl), "mlcc": self.mlcc.status() if self.mlcc is not None else None,
        }
