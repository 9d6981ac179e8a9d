"""The per-slot pacing control of the daemon (the policies with ``rates``: ``cap``, ``mlcc``, ``mlcc-bands``).

Every slot (60 ms by default) the daemon's loop calls ``PaceControl.tick``:
  1. one batched read of the kernel's flow table and the completed bursts;
  2. the monitor (hostctl.core.monitor, pure) turns them into per-flow slot bytes,
     rates, the 4-slot max rate B_i, iteration counts and bytes left;
  3. the policy's ``Rates`` turn jobs and flows into rates, PaceControl adds the selectors into a
     PaceTable, which the datapath diffs into its maps; then the heartbeat that keeps the lease alive.
     ``CapRates`` (hostctl.policy.cap): each job's cap split over its active flows; ``MlccRates``
     (hostctl.policy.mlcc): every flow's rate planned over the next K slots, with or without switchemu.
Everything here runs in the loop's thread; hints from the control socket are queued
and applied at the next tick (the monitor is not thread-safe).
"""

from __future__ import annotations

import importlib
import logging
import threading
import time
from collections import deque
from collections.abc import Callable, Mapping
from typing import Protocol

import numpy as np

from hostctl.config import Config
from hostctl.core.monitor import FlowMonitor, MonitorParams
from hostctl.core.pace import PaceTable, job_caps_Bps, selectors, watch_ports
from hostctl.core.plan import MAX_JOB_SLOTS, allocate_slots
from hostctl.core.types import FlowKey, Job
from hostctl.datapath import UNLIMITED_BPS_BYTES, BurstBatch, FlowRecord, PacingReadout
from hostctl.policy import RATES

log = logging.getLogger("hostctl")


class Rates(Protocol):
    """How a pacing policy decides its flows' rates, once per slot (CapRates, MlccRates)."""

    def observe(self, ctl: PaceControl, readout: PacingReadout, t: float) -> None:
        """This slot's read of the kernel (taken at monotonic time t), after the monitor's update."""

    def plan(self, ctl: PaceControl, jobs: Mapping[str, Job]) -> tuple[dict[FlowKey, int], dict[int, int]]:
        """(rate per flow, default rate per job slot), bytes/s."""

    def schedule_of(self, key: FlowKey) -> dict | None:
        """The flow's planned schedule, for status (None: no schedule)."""

    def describe(self, jobs: Mapping[str, Job]) -> dict:
        """--dry-run: what decides the rates, as JSON."""

    def status(self) -> dict:
        """Merged into the pacing status."""

    def close(self) -> None:
        """Release what the rates hold (the switch connection)."""


def _num(x: float) -> float | None:
    """JSON-friendly: nan -> None."""
    return None if x is None or x != x else float(x)


def make_rates(config: Config, *, link_rate_bps: int, switch=None, wall: Callable[[], float] = time.time) -> Rates:
    """The Rates of the config's (pacing) policy: the class that hostctl.policy.RATES names for its rates
    kind, given the config, the link rate, the switch client (None: plan on this host's NIC) and the wall
    clock."""
    kind = config.spec.rates
    where = RATES.get(kind)
    if where is None:
        raise ValueError(f"policy {config.policy}: no rates {kind!r} in hostctl.policy.RATES")
    module, cls = where.split(":")
    return getattr(importlib.import_module(module), cls)(config, link_rate_bps=link_rate_bps, switch=switch,
                                                         wall=wall)


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
        # this slot's view, read by the policy's Rates: the monitor's id of each flow, the kernel's
        # record of each flow read this slot, and its job
        self.flow_ids: dict[FlowKey, int] = {}
        self._next_id = 0
        self.records: dict[FlowKey, FlowRecord] = {}
        self.flow_job: dict[FlowKey, str] = {}
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
        self.rates = make_rates(config, link_rate_bps=link_rate_bps or config.link_rate_bps or 0, switch=switch,
                                wall=wall)

    # -- from other threads -----------------------------------------------------------
    def hint(self, job: str, bytes_per_iter: int | None, iteration_start_mono: float | None) -> None:
        with self._hint_lock:
            self._hints.append((job, bytes_per_iter, iteration_start_mono))

    # -- the slot ------------------------------------------------------------------------
    def _flow_id(self, key: FlowKey) -> int:
        fid = self.flow_ids.get(key)
        if fid is None:
            fid = self.flow_ids[key] = self._next_id
            self._next_id += 1
        return fid

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
        self.records = records = {}
        self.flow_job = flow_job = {}
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
            ids_of = self.flow_ids.get
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
                self.flow_ids.pop(k, None)

        self.rates.observe(self, readout, t_read)
        self.table = self.plan(jobs)
        self.datapath.pace(self.table)
        self.datapath.heartbeat()

    def plan(self, jobs: Mapping[str, Job]) -> PaceTable:
        """Selectors for every job; rates from the policy's Rates."""
        ports, flows, remotes = self._selectors(jobs)
        flow_rates, slot_rates = self.rates.plan(self, jobs)
        return PaceTable(ports, flows, flow_rates, slot_rates, remotes)

    def job_flows(self) -> dict[str, list[FlowKey]]:
        """This slot's open flows by job."""
        out: dict[str, list[FlowKey]] = {}
        for key, job in self.flow_job.items():
            if not self.records[key].closed:
                out.setdefault(job, []).append(key)
        return out

    def active_flows(self) -> set[FlowKey]:
        """The flows that moved bytes in the monitor's window (the last 4 slots)."""
        stats = self.monitor.flow_stats()
        recent = {int(i) for i, r in zip(stats.flow_id, stats.max_rate_Bps) if r > 0}
        return {k for k in self.flow_job if self.flow_ids.get(k) in recent}

    def caps_Bps(self, job_ids) -> dict[str, int]:
        """The configured cap of each job (bytes/s; jobs without one left out)."""
        return job_caps_Bps(job_ids, self.config.job_caps_bps(), self.config.cap_bps)

    def describe(self, jobs: Mapping[str, Job]) -> dict:
        """--dry-run: the selectors the kernel would get now, and what decides the rates."""
        from hostctl.core.plan import MAX_JOB_SLOTS, allocate_slots

        slots, _ = allocate_slots(sorted(jobs), {}, MAX_JOB_SLOTS)
        ports, flows, remotes = selectors(list(jobs.values()), slots, watch_ports=self.watch_ports)
        return {"cgroup": self.config.cgroup, "slot_s": self.config.slot_s, "slots": slots,
                "selectors": PaceTable(ports, flows, remotes=remotes).to_dict(), **self.rates.describe(jobs)}

    def _selectors(self, jobs: Mapping[str, Job]) -> tuple[dict, dict, dict]:
        """selectors() of the jobs and their slots, recomputed only when either changed (the
        tables share the dicts: nobody mutates a PaceTable's maps)."""
        key = (tuple(jobs.values()), dict(self.slots))  # a copy: the slots may change in place
        if key != self._sel_key:
            self._sel = selectors(list(key[0]), self.slots, watch_ports=self.watch_ports)
            self._sel_key = key
        return self._sel

    def flows_in_order(self) -> list[FlowKey]:
        """This slot's flows (of a job, open or not) in key order, re-sorted only when the set changed."""
        keys = self.flow_job.keys()
        if keys != self._sorted_set:
            self._sorted_set = frozenset(keys)
            self._sorted_keys = sorted(keys)
        return self._sorted_keys

    def close(self) -> None:
        self.rates.close()

    # -- status ------------------------------------------------------------------------------
    def status(self) -> dict:
        stats = self.monitor.flow_stats()
        row_of = {int(fid): i for i, fid in enumerate(stats.flow_id)}
        flows = []
        for key, rec in sorted(self.records.items()):
            i = row_of.get(self.flow_ids.get(key, -1))
            target = self.table.flow_rates.get(key)
            sched = self.rates.schedule_of(key)
            flows.append({
                "flow": str(key), "job": self.flow_job.get(key), "plan": sched,
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
        caps = {j: c * 8 for j, c in self.caps_Bps(self.slots).items()}
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
            "kernel": dict(self.ctl), **self.rates.status(),
        }
