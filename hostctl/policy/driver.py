"""The driver of a policy row: its band rule for the classifier, its Rates (PaceControl) for the pacing.

One class serves every policy: what differs between them is data in the table (the band rule,
the rates' key), and the code that decides lives in hostctl/core (band assignment) and in the
Rates classes (cap, mlcc). The daemon and ``hostctl start --dry-run`` both call it, so the
dry run prints exactly what the daemon would apply.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping

from hostctl.config import Config
from hostctl.core.bands import assign_bands, rr_epoch
from hostctl.core.plan import ClassifierTable, build_classifier
from hostctl.core.types import Job
from hostctl.policy import Policy


class HostDriver:
    def __init__(self, config: Config, datapath, *, link_rate_bps: int, switch=None,
                 mono: Callable[[], float] | None = None, wall: Callable[[], float] | None = None) -> None:
        self.config = config
        self.policy: Policy = config.spec
        self.pace = None
        if self.policy.pacing:
            from hostctl.policy.pacing import PaceControl

            self.pace = PaceControl(config, datapath, mono or time.monotonic, link_rate_bps=link_rate_bps,
                                    switch=switch, wall=wall or time.time)

    def set_config(self, config: Config) -> None:
        """A reload's live keys (the policy itself cannot change live)."""
        self.config = config
        if self.pace is not None:
            self.pace.config = config

    def epoch(self, wall: float) -> int:
        return rr_epoch(wall, self.config.rr_interval_s) if self.config.band_rotates else 0

    def classifier(self, jobs: Mapping[str, Job], epoch: int,
                   slots: Mapping[str, int] | None = None) -> tuple[dict[str, int], ClassifierTable]:
        assignment = self.bands({jid: j.model_bytes for jid, j in jobs.items()}, epoch)
        return assignment, build_classifier(list(jobs.values()), assignment, slots)

    def bands(self, sizes: Mapping[str, int | None], epoch: int) -> dict[str, int]:
        """Job id -> band of this host's jobs (model-update sizes in bytes, None unknown) at rotation
        ``epoch``: the policy's band rule (hostctl.core.bands). The cluster simulator calls it too."""
        return assign_bands(sizes, self.policy.bands, self.config.bands, epoch,
                            job_order=self.policy.fabric_order(self.config.job_order))

    def on_slot(self, now: float, jobs: Mapping[str, Job]) -> None:
        self.pace.tick(now, jobs)

    def describe(self, jobs: Mapping[str, Job]) -> dict | None:
        return self.pace.describe(jobs) if self.pace is not None else None

    def status(self) -> dict | None:
        return self.pace.status() if self.pace is not None else None

    def close(self) -> None:
        if self.pace is not None:
            self.pace.close()
