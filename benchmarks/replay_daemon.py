"""The daemon's decisions on a scripted host, as JSON: to compare two source trees bit for bit.

A refactoring of the policy code must not change a decision. This drives the real ``Daemon`` (its
driver, PaceControl, the monitor and the MLCC planner) with a fake datapath that serves a seeded
script of flows and byte counts, a fake switch that answers every exchange (no other host's load) and
fake clocks, for each policy, and prints every classifier table and every pacing table the daemon
wrote. Run it under each tree and compare the outputs (a tree's own venv, or PYTHONPATH first):

    /work/wt/before/.venv/bin/python benchmarks/replay_daemon.py > old.json
    .venv/bin/python benchmarks/replay_daemon.py > new.json
    cmp old.json new.json && echo same

It only uses what both trees have (Daemon, Config, FakeDatapath, FlowRecord, PacingReadout).
"""

from __future__ import annotations

import argparse
import hashlib
import json
import random

from hostctl.config import Config
from hostctl.core.plan import build_tc_plan
from hostctl.core.types import FlowKey, Job, JobSpec
from hostctl.daemon import Daemon
from hostctl.datapath import FlowRecord, PacingReadout
from hostctl.datapath.fake import FakeDatapath

try:  # after the policy package
    from hostctl.policy.switchclient import ExchangeResult
except ImportError:  # before it
    from hostctl.switchclient import ExchangeResult

PS = "10.0.0.1"
SLOT = 0.06


class Clock:
    def __init__(self, t: float) -> None:
        self.t = t

    def __call__(self) -> float:
        return self.t


class Discovery:
    def __init__(self, jobs: list[Job]) -> None:
        self.jobs = jobs

    def scan(self) -> list[Job]:
        return list(self.jobs)


class FakeSwitch:
    version: dict = {}

    def exchange(self, slot, **_kw):
        return ExchangeResult(slot=slot, latency_s={"fake": 1e-4})

    def close(self) -> None:
        pass


class ScriptedDatapath(FakeDatapath):
    """FakeDatapath whose pacing readout follows a seeded script: each flow sends bursts of random
    size with pauses between them, its counter growing by what its applied rate allows."""

    def __init__(self, seed: int, flows: dict[FlowKey, str]) -> None:
        super().__init__()
        self.rnd = random.Random(seed)
        self.script_flows = flows  # key -> job
        self.acked = {k: 0 for k in flows}
        self.left = {k: 0 for k in flows}
        self.tx = 0
        self.slot_of: dict[str, int] = {}
        self.log: list = []

    def read_pacing(self) -> PacingReadout:
        rows = []
        for k, job in self.script_flows.items():
            if self.left[k] <= 0 and self.rnd.random() < 0.3:
                self.left[k] = self.rnd.randint(50_000, 3_000_000)
            rate = self.pace_table.flow_rates.get(k) or 50_000_000
            sent = min(self.left[k], int(rate * SLOT))
            self.left[k] -= sent
            self.acked[k] += sent
            self.tx += sent
            slot = self.slot_of.get(job, 0)
            rows.append(FlowRecord(k, slot, self.acked[k], self.acked[k], 0, 0, 0, 0, 0, 0, 100, 10, 0, 0, 0))
        return PacingReadout(rows, [], {"flows_full": 0}, self.tx)

    def apply(self, table) -> int:
        self.log.append(["classifier", table.to_dict()])
        return super().apply(table)

    def pace(self, table) -> int:
        self.log.append(["pace", {str(k): v for k, v in sorted(table.flow_rates.items())},
                         {str(k): v for k, v in sorted(table.slot_rates.items())}])
        return super().pace(table)


def run(policy: str, seed: int, slots: int, **cfg) -> list:
    jobs = [Job(f"j{i}", "config", listen_ports=(9000 + i,), model_bytes=1_000_000) for i in range(3)]
    flows = {FlowKey(PS, 9000 + i, f"10.0.0.{2 + w}", 40000 + w): f"j{i}" for i in range(3) for w in range(3)}
    specs = tuple(JobSpec(name=j.job_id, ports=j.listen_ports) for j in jobs)
    config = Config(policy=policy, jobs=specs, link_rate_bps=10**9, rr_interval_s=0.5, **cfg).validate()
    plan = build_tc_plan("eth0", 10**9, 6, 10**8, policy in ("one", "rr", "mlcc-bands"))
    dp = ScriptedDatapath(seed, flows)
    wall, mono = Clock(1_000_000.0), Clock(100.0)
    d = Daemon(config, plan, dp, Discovery(jobs), wall=wall, mono=mono,
               switch=FakeSwitch() if config.switch else None)
    dp.setup(plan)
    d.scan()
    d.reassign(force=True)
    for _ in range(slots):
        wall.t += SLOT
        mono.t += SLOT
        if d.epoch != d.current_epoch():
            d.reassign()
        if d.pace is not None:
            dp.slot_of = dict(d.pace.slots)
            d.pace_tick(mono.t)
    return dp.log


CASES = {
    "one": {}, "rr": {},
    "cap": {"cap_bps": 200_000_000},
    "mlcc": {},
    "mlcc-switch-fixed": {"switch": ("ipc:///nonexistent",), "job_order": "fixed"},
    "mlcc-bands": {"switch": ("ipc:///nonexistent",)},
}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--slots", type=int, default=200)
    ap.add_argument("--seeds", type=int, default=3)
    a = ap.parse_args()
    out = {}
    for case, cfg in CASES.items():
        policy = case.split("-switch")[0]
        for seed in range(a.seeds):
            log = run(policy, seed, a.slots, **cfg)
            out[f"{case}/{seed}"] = {"writes": len(log),
                                     "sha256": hashlib.sha256(json.dumps(log).encode()).hexdigest()}
    print(json.dumps(out, indent=1, sort_keys=True))


if __name__ == "__main__":
    main()
