"""A benchmark's results file: one JSON document with what was measured, when, the command that ran it
and the machine it ran on, so that a number in docs/benchmarks.md can be traced back and rerun."""

from __future__ import annotations

import datetime as dt
import json
import os
import platform
import sys
from pathlib import Path
from typing import Any


def write_results(path: str | os.PathLike, benchmark: str, body: dict[str, Any], *,
                  machine: dict[str, Any] | None = None) -> Path:
    """Write ``{"benchmark", "date", "command", "machine", **body}`` to ``path`` (folders made as
    needed) and say so. ``machine`` adds to the platform, CPU count and Python version."""
    doc = {"benchmark": benchmark,
           "date": dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds"),
           "command": " ".join([os.path.basename(sys.executable)] + sys.argv),
           "machine": {"platform": platform.platform(), "cpus": os.cpu_count(), "python": platform.python_version(),
                       **(machine or {})},
           **body}
    p = Path(path)
    p.parent.mkdir(parents=True, exist_ok=True)
    p.write_text(json.dumps(doc, indent=1))
    print(f"wrote {p}")
    return p
