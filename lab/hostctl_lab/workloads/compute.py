"""The compute step of a training iteration: a sleep, or a step on the host's shared processor.

By default a worker "computes" by sleeping: every worker has a processor of its own. With
``--compute-processor NAME`` the step runs on the emulated processor of the worker's host
(hostctl_lab.workloads.processor), which the workers on that host share: while n steps run there,
each takes longer. ``--compute`` keeps its meaning either way: the time of one step with the
processor to itself.
"""

from __future__ import annotations

import time

from hostctl_lab.workloads.common import now
from hostctl_lab.workloads.processor import ProcessorClient


class ComputeError(Exception):
    """The processor is not there; the message names the fix."""


class Compute:
    """One worker's compute. `begin()` at the start of an iteration's compute, then
    `until(s)` returns once s seconds of it (standalone time) are done; `until` may be
    called several times with growing s (the forward pass, then each gradient bucket)."""

    def __init__(self, processor: str | None = None, timeout_s: float = 10.0) -> None:
        self.processor = processor
        self.t0 = 0.0
        self._done_s = 0.0
        self._client: ProcessorClient | None = None
        if processor:
            try:
                self._client = ProcessorClient(processor, timeout_s)
            except ConnectionError as e:
                raise ComputeError(f"--compute-processor {processor}: {e}") from None

    def begin(self) -> None:
        self.t0 = now()
        self._done_s = 0.0

    def until(self, s: float) -> None:
        if self._client is None:
            wait = self.t0 + s - now()
            if wait > 0:
                time.sleep(wait)
            return
        if s > self._done_s:
            self._client.compute(s - self._done_s)
            self._done_s = s

    def run(self, s: float) -> float:
        """A whole compute step of s seconds; returns its wall time."""
        self.begin()
        self.until(s)
        return now() - self.t0

    def close(self) -> None:
        if self._client is not None:
            self._client.close()


def compute_from_args(ap, a) -> Compute:
    """The worker's `Compute` from --compute-processor; a missing processor is a usage error."""
    try:
        return Compute(a.compute_processor, a.connect_timeout)
    except ComputeError as e:
        ap.error(str(e))
        raise  # not reached: ap.error exits
