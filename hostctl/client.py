"""A small client for training code: tell the local hostctl daemon exact sizes.

The monitor estimates bytes per iteration and iteration starts from the traffic; a
framework hook that knows better can say so (both arguments optional)::

    from hostctl.client import hint
    hint("resnet-job", bytes_per_iter=98_000_000)      # once, after the model is built
    hint("resnet-job", iteration_start=time.time())    # at the start of each iteration

The daemon of the caller's network namespace answers (an abstract unix socket). A
non-root caller may only hint jobs whose processes it owns. ``hint`` raises
``HostctlError`` when no daemon runs or the daemon refuses (unknown job, bad value);
``try_hint`` returns False instead, for hooks that must never break training.
"""

from __future__ import annotations

from hostctl import control
from hostctl.errors import HostctlError


def hint(job: str, bytes_per_iter: int | None = None, iteration_start: float | None = None,
         timeout_s: float = 0.5) -> None:
    kw: dict = {"job": job}
    if bytes_per_iter is not None:
        kw["bytes_per_iter"] = int(bytes_per_iter)
    if iteration_start is not None:
        kw["iteration_start"] = float(iteration_start)
    control.request("hint", timeout_s=timeout_s, **kw)


def try_hint(job: str, bytes_per_iter: int | None = None, iteration_start: float | None = None,
             timeout_s: float = 0.5) -> bool:
    try:
        hint(job, bytes_per_iter, iteration_start, timeout_s)
        return True
    except HostctlError:
        return False
