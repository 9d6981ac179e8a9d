"""The hostctl daemon: discovery -> band assignment -> classifier maps, forever.

Signals only set events (``request_stop``, ``request_reload``); the loop sleeps on
monotonic deadlines (rescan, heartbeat) and on the wall-clock rotation boundary,
whichever is first, and never accumulates drift (deadlines advance by their period,
not from "now"). Teardown happens once, in ``run``'s finally block.

A reload (SIGHUP) runs in the loop: it reads the config file again (``load_config``),
applies the keys that can change live and refuses the others with a log line each
(hostctl.config.reload_config); a file that does not parse or validate is refused as a
whole. Jobs that are still selected keep their classifier slot and band, so their map
entries are not rewritten. systemd hears READY=1 once the tc tree, the classifier and
the first job table are in place, RELOADING=1/READY=1 around a reload and STOPPING=1
before teardown (hostctl.systemd).
"""

from __future__ import annotations

import logging
import math
import os
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field, replace

from hostctl import consts, memory
from hostctl.config import Config, reload_config
from hostctl.core.bands import describe, next_rotation_s
from hostctl.core.hist import Histogram
from hostctl.core.plan import DEFAULT_CLASSID, ClassifierTable, TcPlan, band_classid, endpoint_str, fmt_handle
from hostctl.core.types import Job
from hostctl.core.units import format_rate
from hostctl.datapath import LINK_EVENTS, Counters, Datapath
from hostctl.errors import HostctlError
from hostctl.policy import make_driver, names_with
from hostctl.systemd import monotonic_usec, notify

log = logging.getLogger("hostctl")
SLOT_OFFSET_S = 0.001  # a slot's tick runs this long after the wall-clock slot boundary
DRIFT_BACKOFF_S = 1.0  # after putting the tc tree back, the next check waits this long, doubled each time
DRIFT_BACKOFF_MAX_S = 300.0  # ... up to this (an agent that keeps changing it: one fight per 5 minutes)
DRIFT_CALM_S = 600.0  # no change for this long: the wait starts over at DRIFT_BACKOFF_S


@dataclass
class Stats:
    rotations: int = 0
    reassignments: int = 0
    errors: int = 0
    scans: int = 0
    scan_overruns: int = 0
    slots: int = 0
    slot_overruns: int = 0
    last_apply_ms: float = 0.0
    map_writes: int = 0
    reconciliations: int = 0  # times the tc tree was put back after another agent changed it
    last_drift: str = ""  # what that agent had changed, the last time
    mem_trims: int = 0  # malloc_trim calls (hostctl/memory.py; 0 without glibc)
    mem_trimmed_kib: int = 0  # RSS they gave back, in all
    mem_trim_ms: float = 0.0  # the last one's duration
    gc_frozen: int = 0  # objects the start-up left, moved out of the collector's way once up (memory.freeze)
    gc_collections: int = 0  # the collector's runs since then, all generations
    gc_max_ms: float = 0.0  # the longest of them
    gc_full_ms: float = 0.0  # the last full collection's duration (once up and every MEM_TRIM_S, before the trim)


@dataclass
class _Rates:
    t: float = 0.0
    class_bytes: dict[int, int] = field(default_factory=dict)
    job_bytes: dict[str, int] = field(default_factory=dict)
    ingress_class_bytes: dict[int, int] = field(default_factory=dict)


PLAN_OFFSETS = 6  # mlcc: hosts plan at one of this many offsets in the slot, PLAN_OFFSET_STEP_S apart
PLAN_OFFSET_STEP_S = 0.007


def plan_offset(config: Config, iface: str) -> float:
    """When in each slot this host plans (policy mlcc). Hosts that plan at different times see each
    other's fresh schedules in the switches' tables instead of the previous slot's, so two hosts do not
    both step aside for each other's stale reservations. Configured, or from a CRC of host name and
    interface (the same on every restart; hosts that share an offset plan as before)."""
    if config.plan_offset_s is not None:
        return config.plan_offset_s
    import socket
    import zlib

    return nth_plan_offset(zlib.crc32(f"{socket.gethostname()}/{iface}".encode()), config.slot_s)


def nth_plan_offset(n: int, slot_s: float) -> float:
    """The (n mod PLAN_OFFSETS)-th planning offset in a slot of slot_s seconds: PLAN_OFFSET_STEP_S
    apart, closer for short slots so that all fit in 60% of the slot (--plan-offset's bound)."""
    return (n % PLAN_OFFSETS) * min(PLAN_OFFSET_STEP_S, 0.6 * slot_s / PLAN_OFFSETS)


class Daemon:
    def __init__(self, config: Config, plan: TcPlan, datapath: Datapath, discovery,
                 *, wall: Callable[[], float] = time.time, mono: Callable[[], float] = time.monotonic,
                 switch=None, load_config: Callable[[], Config] | None = None,
                 new_discovery: Callable[[tuple], object] | None = None, version: str = "unknown"):
        self.config = config
        self.load_config = load_config  # reload: the config file again, with the command line's flags
        self.new_discovery = new_discovery  # reload: a discovery for changed job specs
        self.version = version
        self.plan = plan
        self.datapath = datapath
        self.discovery = discovery
        self.wall = wall
        self.mono = mono
        self.stop = threading.Event()
        self._wake = threading.Event()  # set by request_stop() and by status requests
        self._status_wanted = threading.Event()
        self._status_ready = threading.Event()
        self._reload_wanted = threading.Event()
        self._rescan_now = False
        self._drift_next = 0.0  # monotonic: the tc tree is not checked before (backoff after a reconciliation)
        self._drift_streak = 0  # reconciliations since the tree last stayed put for DRIFT_CALM_S
        self._drift_at = -1e18  # monotonic time of the last reconciliation
        self._failing: dict[str, str] = {}  # what -> its last error (logged once until it works again)
        self.link_gone = False  # the interface is gone (logged once; set up again when it is back)
        self.ready = False  # READY=1 sent: tc tree, classifier and the first job table in place
        self.reloads = {"ok": 0, "refused": 0}
        self.slot_decision = Histogram()  # seconds per slot's work (pacing policies)
        self._last_refresh = -1e9
        self.jobs: dict[str, Job] = {}
        self.assignment: dict[str, int] = {}
        self.table = ClassifierTable()
        self.epoch: int | None = None
        self.stats = Stats()
        self._gc = memory.GcMeter()  # started once up
        self._rates = _Rates()
        self._lock = threading.Lock()
        self.started_wall = wall()
        # the policy: its bands for the classifier, its rates every slot (hostctl.policy)
        self.driver = make_driver(config, datapath, link_rate_bps=plan.link_rate_bps, switch=switch, mono=mono,
                                  wall=wall)
        self.pace = self.driver.pace  # the pacing policies' slot control (None for the others)
        self.plan_offset_s = plan_offset(config, plan.iface) if config.plans_mlcc else 0.0
        self._status: dict = {**self._base_status(), "state": "starting"}

    @property
    def config(self) -> Config:
        return self._config

    @config.setter
    def config(self, config: Config) -> None:
        """The running config; its policy's driver runs with the same one."""
        self._config = config
        if getattr(self, "driver", None) is not None:
            self.driver.set_config(config)

    # -- one step each ---------------------------------------------------------
    def scan(self) -> bool:
        """Rediscover jobs; log arrivals/departures. True if the job set or flows changed."""
        try:
            found = {j.job_id: j for j in self.discovery.scan()}
        except Exception as e:  # discovery must never kill the daemon
            self.stats.errors += 1
            log.warning("discovery failed: %s", e)
            return False
        self.stats.scans += 1
        for jid in sorted(found.keys() - self.jobs.keys()):
            j = found[jid]
            log.info("job arrived: %s (%s, %d flow(s), ports %s, connects to %s)", jid, j.role, len(j.flows),
                     ",".join(map(str, j.listen_ports)) or "-",
                     ",".join(endpoint_str(e) for e in j.remote_endpoints) or "-")
        for jid in sorted(self.jobs.keys() - found.keys()):
            log.info("job left: %s", jid)
        changed = found != self.jobs
        self.jobs = found
        return changed

    def check_drift(self, now: float) -> bool:
        """At a rescan: if another agent changed the tc tree (replaced or deleted the root qdisc, a
        class, the classifier's filter, the ingress side), log what and put it back (setup again, and
        the maps written in full), then wait DRIFT_BACKOFF_S before putting it back again, doubled with
        each reconciliation up to DRIFT_BACKOFF_MAX_S: the daemon never fights an agent in a tight loop.
        The device itself: down/up and MTU changes are logged (the tree stays); gone: logged once, and
        set up again as soon as a device of that name is back; renamed: followed. True if it set up again."""
        reading = f"checking the tc tree of {self.plan.iface}"
        try:
            drift = self.datapath.check()
        except Exception as e:  # a failed read must not kill the daemon (the interface gone?)
            self._failed(reading, e)
            return False
        self._failing.pop(reading, None)
        for d in drift:
            if d.what in LINK_EVENTS:  # the tree stays in place: only say it
                (log.warning if d.what == "down" else log.info)("%s (hostctl's tree stays in place)", d.detail)
        drift = [d for d in drift if d.what not in LINK_EVENTS]
        if any(d.what == "gone" for d in drift):
            if not self.link_gone:
                self.link_gone = True
                log.warning("%s: waiting for it to come back, then hostctl sets its tree up again (the pacer and "
                            "the jobs' records go on)", drift[0].detail)
            return False
        if not drift:
            if self._drift_streak and now - self._drift_at >= DRIFT_CALM_S:
                self._drift_streak = 0
            return False
        if any(d.what in ("renamed", "replaced") for d in drift):  # the device itself: at once, no backoff
            return self._set_up_again(drift)
        if any(d.what == "cgroup" for d in drift):  # the pacer's scope went or came back: at once, no backoff
            for d in drift:
                if d.what == "cgroup":
                    (log.info if d.to == "back" else log.warning)(
                        "%s: %s", d.detail, "attaching the pacer to it" if d.to == "back" else
                        "releasing its flows; the pacer is attached again when a cgroup is back under the path")
            return self._set_up_again(drift)
        if now < self._drift_next:
            return False
        self._drift_streak += 1
        wait = min(DRIFT_BACKOFF_MAX_S, DRIFT_BACKOFF_S * 2 ** (self._drift_streak - 1))
        self._drift_at, self._drift_next = now, now + wait
        log.warning("%s: %s changed under hostctl (%s): putting it back (reconciliation %d; next check in "
                    "%gs; if another agent manages this interface, stop one of the two)", self.plan.iface,
                    "the pacer's pins" if all(d.what == "pins" for d in drift) else "the tc tree",
                    "; ".join(d.detail for d in drift), self.stats.reconciliations + 1, wait)
        return self._set_up_again(drift)

    def _failed(self, what: str, e: Exception) -> None:
        """Log ``what`` failed, once per distinct error until it works again (the caller pops it then)."""
        if self._failing.get(what) != str(e):
            self._failing[what] = str(e)
            log.warning("%s failed: %s", what, e)

    def _set_up_again(self, drift) -> bool:
        """Run setup() again (it puts back what ``drift`` says is missing; a renamed device is followed, a
        new one under the name set up from scratch), then write the maps in full (a classifier built
        again has empty maps); counted as a reconciliation."""
        self.link_gone = False
        self.stats.reconciliations += 1
        self.stats.last_drift = "; ".join(d.detail for d in drift)
        try:
            self.datapath.setup(self.plan)
        except Exception as e:
            self.stats.errors += 1
            log.error("setting the tc tree of %s up again failed: %s", self.plan.iface, e)
            return False
        for d in drift:
            if d.what == "renamed":
                self.plan = replace(self.plan, iface=d.to)
                if getattr(self.discovery, "iface", None) is not None:
                    self.discovery.iface = d.to
        self.reassign(force=True)
        return True

    def current_epoch(self) -> int:
        """The rotation count of the band order (rr; mlcc-bands with job order rotate, whose planner
        takes the same count of its slot's time), else 0."""
        return self.driver.epoch(self.wall())

    def reassign(self, force: bool = False) -> bool:
        """Recompute bands (on job change or a new rotation epoch) and push map changes."""
        epoch = self.current_epoch()
        assignment, table = self.driver.classifier(self.jobs, epoch, self.table.slots)
        rotated = self.epoch is not None and epoch != self.epoch and self.config.band_rotates
        self.epoch = epoch
        if not force and table == self.table:
            return False
        t0 = time.perf_counter()
        try:
            writes = self.datapath.apply(table)
        except Exception as e:
            self.stats.errors += 1
            log.error("applying the classifier failed: %s", e)
            return False
        self.stats.last_apply_ms = (time.perf_counter() - t0) * 1e3
        self.stats.map_writes += writes
        if assignment != self.assignment:
            if rotated:
                self.stats.rotations += 1
                log.info("rotation %d: %s", epoch, describe(assignment, list(self.jobs)))
            else:
                self.stats.reassignments += 1
                log.info("assignment: %s", describe(assignment, list(self.jobs)))
        if table.dropped_flows and table.dropped_flows != self.table.dropped_flows:
            log.warning("flow table full: %d flow(s) left in the default class", table.dropped_flows)
        if table.dropped_remotes and table.dropped_remotes != self.table.dropped_remotes:
            log.warning("remote-endpoint table full: %d endpoint(s) not matched (their known flows still are, "
                        "by 4-tuple)", table.dropped_remotes)
        self.assignment = assignment
        self.table = table
        return True

    def refresh_status(self) -> None:
        self.stats.gc_collections, self.stats.gc_max_ms = self._gc.collections, round(self._gc.max_ms, 3)
        try:
            counters = self.datapath.read_counters(set(self.table.slots.values()))
        except Exception as e:
            self.stats.errors += 1
            self._failed("reading counters", e)  # (an interface that is gone: every refresh)
            counters = Counters()
        else:
            self._failing.pop("reading counters", None)
        now = self.mono()
        dt = now - self._rates.t if self._rates.t else 0.0
        prev = self._rates
        names = {c.classid: c for c in self.plan.classes}

        def class_rows(classes: dict, prev_bytes: dict) -> list[dict]:
            rows = []
            for cid, c in sorted(classes.items()):
                rate = (c.bytes - prev_bytes.get(cid, c.bytes)) * 8 / dt if dt > 0 else 0.0
                hc = names.get(cid)
                rows.append({"classid": fmt_handle(cid), "name": hc.name if hc else "?",
                             "prio": hc.prio if hc else None, "bytes": c.bytes, "packets": c.packets,
                             "rate_bps": max(rate, 0.0), "drops": c.drops, "backlog_bytes": c.backlog_bytes})
            return rows
        job_rows = []
        job_bytes = {}
        for jid, job in sorted(self.jobs.items()):
            slot = self.table.slots.get(jid)
            jc = counters.jobs.get(slot) if slot is not None else None
            tx = jc.tx_bytes if jc else 0
            job_bytes[jid] = tx
            rate = (tx - prev.job_bytes.get(jid, tx)) * 8 / dt if dt > 0 else 0.0
            band = self.assignment.get(jid)
            job_rows.append({
                "job_id": jid, "band": band, "slot": slot,
                "classid": fmt_handle(band_classid(band) if band is not None else DEFAULT_CLASSID),
                "role": job.role, "source": job.source, "pids": list(job.pids),
                "listen_ports": list(job.listen_ports), "flows": [str(f) for f in job.flows],
                "remote_endpoints": [endpoint_str(e) for e in job.remote_endpoints],
                "model_bytes": job.model_bytes, "tx_bytes": tx, "rate_bps": max(rate, 0.0),
                "last_burst_bytes": jc.last_burst_bytes if jc else 0, "bursts": jc.bursts if jc else 0,
                "rx_bytes": counters.rx_jobs[slot].tx_bytes if slot in counters.rx_jobs else None,
            })
        self._rates = _Rates(now, {cid: c.bytes for cid, c in counters.classes.items()}, job_bytes,
                             {cid: c.bytes for cid, c in counters.ingress_classes.items()})
        status = {
            **self._base_status(), "state": "running",
            "jobs": job_rows, "classes": class_rows(counters.classes, prev.class_bytes),
            "ingress_classes": class_rows(counters.ingress_classes, prev.ingress_class_bytes),
            "failopen_pkts": counters.failopen_pkts,
            "dropped_flows": self.table.dropped_flows,
            "pacing": self.driver.status(),
            "slot_decision_seconds": self.slot_decision.to_dict() if self.pace is not None else None,
        }
        with self._lock:
            self._status = status

    def _base_status(self) -> dict:
        return {
            "pid": os.getpid(), "version": self.version, "policy": self.config.policy, "iface": self.plan.iface,
            "link_rate_bps": self.plan.link_rate_bps, "ingress_rate_bps": self.plan.ingress_rate_bps,
            "bands": self.config.bands,
            "rr_interval_s": self.config.rr_interval_s, "epoch": self.epoch,
            "next_rotation": next_rotation_s(self.wall(), self.config.rr_interval_s)
            if self.config.band_rotates else None,
            # mlcc-bands: the bands follow mlcc's fabric job order (fixed, rotate or smallest)
            "band_order": self.config.spec.band_order(self.config.job_order),
            "uptime_s": self.wall() - self.started_wall,
            "jobs": [], "classes": [], "ingress_classes": [], "failopen_pkts": 0, "dropped_flows": 0, "pacing": None,
            "stats": dict(self.stats.__dict__), "reloads": dict(self.reloads),
        }

    def status(self, max_age_s: float = 1.0, timeout_s: float = 2.0) -> dict:
        """The latest status; asks the loop for a fresh one when it is older than
        ``max_age_s`` (counters are read only in the loop's thread)."""
        if self.mono() - self._last_refresh > max_age_s and not self.stop.is_set():
            self._status_ready.clear()
            self._status_wanted.set()
            self._wake.set()
            self._status_ready.wait(timeout_s)
        with self._lock:
            return dict(self._status)

    def hint(self, job: str, bytes_per_iter: int | None = None, iteration_start: float | None = None) -> None:
        """A framework hook's hint (control socket): exact bytes per iteration of a job and/or
        the wall-clock start of its new iteration. Raises ValueError on bad input."""
        if self.pace is None:
            raise ValueError(f"policy {self.config.policy} does not monitor flows; hints need a pacing policy "
                             f"({names_with('pacing').removeprefix('policies ')})")
        if not isinstance(job, str) or not job:
            raise ValueError("hint: job must be a non-empty string")
        if bytes_per_iter is not None and (not isinstance(bytes_per_iter, int) or isinstance(bytes_per_iter, bool)
                                           or bytes_per_iter <= 0):
            raise ValueError("hint: bytes_per_iter must be a positive integer")
        if bytes_per_iter is None and iteration_start is None:
            raise ValueError("hint: give bytes_per_iter and/or iteration_start")
        start_mono = None
        if iteration_start is not None:
            if not isinstance(iteration_start, (int, float)) or isinstance(iteration_start, bool):
                raise ValueError("hint: iteration_start must be a unix time in seconds")
            age = self.wall() - float(iteration_start)
            if not -1.0 <= age <= 60.0:
                raise ValueError(f"hint: iteration_start is {age:+.1f}s away from now; clocks out of sync?")
            start_mono = self.mono() - age
        if job not in self.jobs:
            raise ValueError(f"hint: no job {job!r} on this host (jobs: {', '.join(sorted(self.jobs)) or 'none'})")
        self.pace.hint(job, bytes_per_iter, start_mono)

    def request_stop(self) -> None:
        """Signal-safe: only sets events; the loop ends and run() tears down."""
        self.stop.set()
        self._wake.set()

    def request_reload(self) -> None:
        """Signal-safe (SIGHUP): only sets events; the loop reloads the config at its next turn."""
        self._reload_wanted.set()
        self._wake.set()

    def reload(self) -> bool:
        """Read the config again and apply what can change live (in the loop's thread).
        False when the file was refused as a whole; the daemon runs on as before."""
        notify("RELOADING=1", monotonic_usec(), "STATUS=reloading the config")
        try:
            if self.load_config is None:
                log.warning("reload: the daemon was started without --config; nothing to reload")
                self.reloads["refused"] += 1
                return False
            try:
                merged, changed, refused = reload_config(self.config, self.load_config())
                discovery = None
                if merged.jobs != self.config.jobs:
                    if self.new_discovery is None:
                        raise HostctlError("this daemon cannot change its job selectors live")
                    discovery = self.new_discovery(merged.jobs)  # checks the specs
            except HostctlError as e:
                self.reloads["refused"] += 1
                log.error("reload refused, still running with the previous config: %s", e)
                return False
            except Exception as e:  # a reload must never end the daemon
                self.reloads["refused"] += 1
                log.error("reload failed, still running with the previous config: %s: %s", type(e).__name__, e)
                return False
            for line in refused:
                log.warning("reload: %s", line)
            self.apply_config(merged, discovery)
            self.reloads["ok"] += 1
            log.info("reloaded the config: %s%s", f"changed {', '.join(changed)}" if changed else "no live change",
                     f"; {len(refused)} change(s) refused (see above)" if refused else "")
            return True
        finally:
            self._status_wanted.set()  # `status` shows the outcome at once
            notify("READY=1", self._status_line())

    def apply_config(self, config: Config, discovery=None) -> None:
        """Run with ``config`` from now on (its differences to the running one are all live
        keys), and with ``discovery`` for its job specs when they changed."""
        if discovery is not None:
            self.discovery = discovery
        if config.log_level != self.config.log_level:
            logging.getLogger().setLevel(config.log_level.upper())
        self.config = config  # the driver's too
        self._rescan_now = True  # new selectors, sizes, caps or intervals take effect at once

    def _status_line(self) -> str:
        return (f"STATUS=controlling {self.plan.iface}: policy {self.config.policy}, {len(self.jobs)} job(s)"
                if self.ready else "STATUS=starting")

    def pace_tick(self, now: float) -> None:
        t0 = time.perf_counter()
        try:
            self.driver.on_slot(now, self.jobs)
        except Exception as e:  # one bad slot must not kill the daemon; the lease covers a stuck one
            self.stats.errors += 1
            self.pace.errors += 1
            if self.pace.errors <= 3 or self.pace.errors % 100 == 0:
                log.error("pacing slot failed (%d so far): %s", self.pace.errors, e)
        self.stats.slots += 1
        dt = time.perf_counter() - t0
        self.pace.tick_ms.append(dt * 1e3)
        self.slot_decision.observe(dt)

    # -- the loop ------------------------------------------------------------------
    def run(self) -> None:
        """Set up, loop until ``stop`` is set, tear down (always, exactly once)."""
        try:
            self.datapath.setup(self.plan)
            log.info("controlling %s: policy %s, link %s, %d bands%s, rescan %gs. Ctrl-C to stop.",
                     self.plan.iface, self.config.policy, format_rate(self.plan.link_rate_bps),
                     self.config.bands,
                     f", rotation every {self.config.rr_interval_s:g}s" if self.config.band_rotates else "",
                     self.config.rescan_s)
            self.loop()
        finally:
            notify("STOPPING=1", "STATUS=stopping: restoring the interface")
            self._gc.stop()
            memory.unfreeze()  # (an in-process daemon, as in the tests: the collector as it was)
            self.driver.close()
            try:
                self.datapath.teardown()
                log.info("stopped; %s restored", self.plan.iface)
            except Exception as e:
                log.error("teardown failed: %s; run `hostctl clean`", e)
                raise

    def _tidy(self) -> None:
        """Memory upkeep, once up and every MEM_TRIM_S: a full collection, then malloc_trim."""
        self.stats.gc_full_ms = round(memory.collect()[1], 3)
        got = memory.trim()
        if got is None:
            return
        kib, ms = got
        self.stats.mem_trims += 1
        self.stats.mem_trimmed_kib += kib
        self.stats.mem_trim_ms = round(ms, 3)
        log.debug("malloc_trim: RSS %d KiB smaller, %.1f ms", kib, ms)

    def _next_slot(self) -> float:
        """Monotonic deadline of the next slot's tick. Slots are absolute (slot k = [k t, (k+1) t)
        of the wall clock, MLCC's slots): every host ticks SLOT_OFFSET_S after the same boundary,
        and the deadline is taken from the wall clock each time, so it never drifts."""
        slot = self.config.slot_s
        return self.mono() + slot - self.wall() % slot + SLOT_OFFSET_S + self.plan_offset_s

    def loop(self) -> None:
        slot = self.config.slot_s
        next_scan = self.mono()
        next_hb = self.mono()
        next_slot = self.mono()  # the first slot at once: selectors are in the maps before jobs connect
        next_trim = math.inf  # once up (the BPF programs compiled), then every MEM_TRIM_S
        last_slot = None
        while not self.stop.is_set():
            if self._reload_wanted.is_set():
                self._reload_wanted.clear()
                self.reload()
            period = self.config.rescan_s
            now = self.mono()
            if self._rescan_now:
                self._rescan_now = False
                next_scan = now
            scanned = now >= next_scan
            changed = False
            if scanned:
                self.check_drift(now)
                changed = self.scan()
                next_scan += period
                if next_scan <= now:  # fell behind (e.g. suspended): skip, don't burst
                    self.stats.scan_overruns += 1
                    next_scan = now + period
            if changed or self.epoch != self.current_epoch():
                self.reassign()
            if self.pace is not None and now >= next_slot:
                k = int(self.wall() // slot)
                if last_slot is not None and k - last_slot > 1:  # slots missed: the last tick overran
                    self.stats.slot_overruns += k - last_slot - 1
                last_slot = k
                self.pace_tick(now)
                next_slot = self._next_slot()
            if now >= next_hb:
                self.datapath.heartbeat()
                next_hb += consts.HEARTBEAT_S
                if next_hb <= now:
                    next_hb = now + consts.HEARTBEAT_S
            if not self.ready:  # tc tree, classifier, heartbeat and the first job table are in place
                self.ready = True
                notify("READY=1", self._status_line())
                self.stats.gc_frozen = memory.freeze()  # the start-up's objects, out of the collector's way
                self._gc.start()
                next_trim = now
            if now >= next_trim:
                self._tidy()
                next_trim = now + consts.MEM_TRIM_S
            # Counters are read for `status`/metrics when asked, and every STATUS_REFRESH_S
            # so that rates stay meaningful; not on every scan (idle CPU).
            if self._status_wanted.is_set() or now - self._last_refresh >= consts.STATUS_REFRESH_S:
                self._status_wanted.clear()
                self.refresh_status()
                self._last_refresh = now
                self._status_ready.set()
            wait = min(next_scan, next_hb, next_trim, self._last_refresh + consts.STATUS_REFRESH_S) - self.mono()
            if self.pace is not None:
                wait = min(wait, next_slot - self.mono())
            if self.config.band_rotates:
                wall = self.wall()
                wait = min(wait, next_rotation_s(wall, self.config.rr_interval_s) - wall + 1e-3)
            self._wake.wait(max(0.0, wait))
            self._wake.clear()
        self._status_ready.set()  # release a status request that raced with stop
