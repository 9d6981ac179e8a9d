"""Rates of policy ``cap``: each job's cap (``--cap``, or ``cap`` of its [[jobs]] entry) split equally
over its active flows (hostctl.core.pace.cap_rates decides; this only gathers its inputs)."""

from __future__ import annotations

from collections.abc import Mapping

from hostctl.config import Config
from hostctl.core.pace import cap_rates
from hostctl.core.types import FlowKey, Job


class CapRates:
    def __init__(self, config: Config, **_context) -> None:
        self.config = config

    def observe(self, ctl, readout, t: float) -> None:
        pass

    def plan(self, ctl, jobs: Mapping[str, Job]) -> tuple[dict[FlowKey, int], dict[int, int]]:
        flow_rates, job_rates = cap_rates(ctl.caps_Bps(jobs), ctl.job_flows(), ctl.active_flows())
        return flow_rates, {ctl.slots[j]: r for j, r in job_rates.items() if j in ctl.slots}

    def schedule_of(self, key: FlowKey) -> dict | None:
        return None

    def describe(self, jobs: Mapping[str, Job]) -> dict:
        caps = self.config.job_caps_bps()
        return {"caps_bps": {jid: caps.get(jid, self.config.cap_bps) for jid in jobs}}

    def status(self) -> dict:
        return {"mlcc": None}

    def close(self) -> None:
        pass
