"""Turn the worker records of one job into the job JSON.

  python -m hostctl_lab.workloads.summary [--t0 SECONDS] FILE...

prints::

    {"job", "kind", "workers", "iterations",
     "jct_s":                 max t_end - (t0 if given else min t_start),
     "iteration_s":           [per iteration: max over workers of iter_end[i]
                               - max over workers of iter_end[i-1]; the first from the start],
     "barrier_wait_mean_s":   [per iteration: mean over workers],
     "barrier_wait_std_s":    [per iteration: population std over workers],
     "barrier_wait_s":        [every worker's every wait, flat, iteration-major],
     "barrier_wait_mean_all_s", "barrier_wait_std_mean_s" (mean of the per-iteration stds),
     "compute_wall_mean_s":   mean wall time of a compute step (longer than --compute
                               when the host's processor is shared),
     "errors": ["rank K: ...", ...]}

The wait of worker w at barrier i is taken from the record's "barrier_wait_s"
when present, otherwise from its barrier lists (ps: barrier_exit[i+1] -
barrier_enter[i]; allreduce and torch: barrier_exit[i] - barrier_enter[i]; see
hostctl_lab.workloads). "iterations" is the number every worker completed; a
worker that failed early shortens the per-iteration lists and adds its errors.
Server records ("role": "server") are ignored. Statistics of nothing are null.
"""

from __future__ import annotations

import json
import statistics
import sys
from collections.abc import Iterable, Sequence
from typing import Any

from hostctl_lab.workloads.common import ArgParser

PROG = "hostctl_lab.workloads.summary"
REQUIRED = ("job", "kind", "rank", "t_start", "t_end", "iter_end", "barrier_enter", "barrier_exit")


class RecordError(Exception):
    """A record file is missing, unreadable or not a worker record; the message names it."""


def load_records(paths: Iterable[str]) -> list[dict]:
    """Read record files; RecordError naming the file when one is missing or broken."""
    records = []
    for path in paths:
        try:
            with open(path) as f:
                rec = json.load(f)
        except FileNotFoundError:
            raise RecordError(f"{path}: no such record file") from None
        except json.JSONDecodeError as e:
            raise RecordError(f"{path}: not a JSON record ({e.msg} at line {e.lineno} column {e.colno}); "
                              "was the worker killed before writing it?") from None
        except (OSError, UnicodeDecodeError) as e:
            raise RecordError(f"{path}: cannot read it ({getattr(e, 'strerror', None) or e})") from None
        if not isinstance(rec, dict):
            raise RecordError(f"{path}: not a worker record (a JSON object was expected)")
        missing = [k for k in REQUIRED if k not in rec]
        if missing and rec.get("role") != "server":
            raise RecordError(f"{path}: not a worker record (missing {', '.join(missing)})")
        records.append(rec)
    return records


def worker_waits(rec: dict) -> list[float]:
    """Barrier waits of one worker, one per completed iteration."""
    if "barrier_wait_s" in rec:
        return list(rec["barrier_wait_s"])
    enter, exit_ = rec["barrier_enter"], rec["barrier_exit"]
    shift = 1 if rec.get("kind") == "ps" else 0
    return [exit_[i + shift] - enter[i] for i in range(min(len(enter), len(exit_) - shift))]


def _mean(xs: Sequence[float]) -> float | None:
    return statistics.fmean(xs) if xs else None


def _iteration_times(records: list[dict], start: float, iterations: int) -> list[float]:
    ends = [max(r["iter_end"][i] for r in records) for i in range(iterations)]
    return [b - a for a, b in zip([start] + ends[:-1], ends)]


def summarize(records: list[dict], t0: float | None = None) -> dict[str, Any]:
    """The job JSON (module docstring) of the worker records of one job.

    t0 (monotonic seconds) is when the job was started, e.g. by the harness;
    without it the job starts at the earliest t_start. Raises ValueError when
    there is no worker record or the records belong to several jobs or kinds.
    """
    workers = sorted((r for r in records if r.get("role") != "server"), key=lambda r: r["rank"])
    if not workers:
        raise ValueError("no worker records")
    for field in ("job", "kind"):
        values = sorted({str(r[field]) for r in workers})
        if len(values) > 1:
            raise ValueError(f"records of several {field}s: {', '.join(values)}")
    waits = [worker_waits(r) for r in workers]
    iterations = min(min(len(r["iter_end"]) for r in workers), min(len(w) for w in waits))
    start = t0 if t0 is not None else min(r["t_start"] for r in workers)
    per_iter = [[w[i] for w in waits] for i in range(iterations)]
    stds = [statistics.pstdev(x) for x in per_iter]
    flat = [x for it in per_iter for x in it]
    errors = [f"rank {r['rank']}: {e}" for r in workers for e in r.get("errors", [])]
    ranks = [r["rank"] for r in workers]
    if len(set(ranks)) != len(ranks):
        errors.append(f"duplicate ranks in the records: {ranks}")
    return {
        "job": workers[0]["job"],
        "kind": workers[0]["kind"],
        "workers": len(workers),
        "iterations": iterations,
        "jct_s": max(r["t_end"] for r in workers) - start,
        "iteration_s": _iteration_times(workers, start, iterations),
        "barrier_wait_mean_s": [statistics.fmean(x) for x in per_iter],
        "barrier_wait_std_s": stds,
        "barrier_wait_s": flat,
        "barrier_wait_mean_all_s": _mean(flat),
        "barrier_wait_std_mean_s": _mean(stds),
        # mean wall time of a compute step: the --compute time, or more on a shared processor (host_cores)
        "compute_wall_mean_s": _mean([x for r in workers for x in r.get("compute_wall_s", [])]),
        "errors": errors,
    }


def main(argv: list[str] | None = None) -> int:
    ap = ArgParser(prog=PROG, description="Summarize the worker records of one job as JSON.")
    ap.add_argument("files", nargs="+", metavar="FILE", help="worker record files")
    ap.add_argument("--t0", type=float, help="job start (monotonic seconds); default: earliest t_start")
    a = ap.parse_args(argv)
    try:
        job = summarize(load_records(a.files), a.t0)
    except (RecordError, ValueError) as e:
        sys.stderr.write(f"{PROG}: error: {e}\n")
        return 1
    except (KeyError, TypeError, IndexError) as e:
        sys.stderr.write(f"{PROG}: error: malformed record ({e.__class__.__name__}: {e})\n")
        return 1
    print(json.dumps(job, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
