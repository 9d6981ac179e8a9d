"""Where the iterations of parameter-server jobs spend their time, from a bench run's worker records.

    python -m hostctl_lab.analysis.ps_phases RAW_RUN_DIR [RAW_RUN_DIR ...]

RAW_RUN_DIR is one run's record directory (`hostctl bench --out DIR` writes them to
DIR/raw/SCENARIO-DATE/rN-POLICY/). Per job, per iteration i >= 1, averaged over its workers:

- update: from the barrier's release (the last gradient of iteration i-1 arrived at the server)
  to the whole update of iteration i having arrived at the worker (its compute starts);
- compute: the compute step's wall time (longer than --compute on a shared processor);
- gradient: from the end of compute to the worker's gradient having arrived at the server;
- wait: the rest of the iteration (the worker waits for the job's slowest gradient).

Prints one line per job and the mean over jobs, then which worker rank's gradient was the job's
last (and first) in how many iterations, and the mean spread between a job's first and last
gradient: a rank that is last far more often than 1/W of the time is a systematic straggler (for
example a host that is always served last). Needs records with ``compute_start`` (ps workers from
2026-11-24 on).
"""

from __future__ import annotations

import collections
import glob
import json
import os
import statistics
import sys


def job_phases(recs: list[dict]) -> dict[str, float]:
    n = min(len(r["barrier_enter"]) for r in recs)
    upd, comp, grad, wait, it = [], [], [], [], []
    for i in range(1, n):
        release = max(r["barrier_enter"][i - 1] for r in recs)
        end = max(r["barrier_enter"][i] for r in recs)
        for r in recs:
            cs, cw, ge = r["compute_start"][i], r["compute_wall_s"][i], r["barrier_enter"][i]
            upd.append(cs - release)
            comp.append(cw)
            grad.append(ge - (cs + cw))
            wait.append(end - ge)
        it.append(end - release)
    m = statistics.fmean
    return {"iteration": m(it), "update": m(upd), "compute": m(comp), "gradient": m(grad), "wait": m(wait)}


def stragglers(by_job: dict[str, list[dict]]) -> tuple[dict[int, float], dict[int, float], float]:
    """(share of iterations whose last gradient came from each rank, the same for the first,
    mean spread between a job's first and last gradient in seconds), over all jobs, iterations >= 1."""
    last: collections.Counter = collections.Counter()
    first: collections.Counter = collections.Counter()
    spread = []
    for recs in by_job.values():
        recs = sorted(recs, key=lambda r: r["rank"])
        n = min(len(r["barrier_enter"]) for r in recs)
        for i in range(1, n):
            g = [r["barrier_enter"][i] for r in recs]
            last[recs[g.index(max(g))]["rank"]] += 1
            first[recs[g.index(min(g))]["rank"]] += 1
            spread.append(max(g) - min(g))
    tot = sum(last.values()) or 1
    return ({k: v / tot for k, v in sorted(last.items())}, {k: v / tot for k, v in sorted(first.items())},
            statistics.fmean(spread) if spread else 0.0)


def main(argv: list[str]) -> int:
    if not argv:
        sys.stderr.write(__doc__)
        return 2
    for d in argv:
        by_job: dict[str, list[dict]] = {}
        for f in sorted(glob.glob(os.path.join(d, "*.w*.json"))):
            r = json.load(open(f))
            if r.get("kind") == "ps":
                by_job.setdefault(r["job"], []).append(r)
        if not by_job:
            sys.stderr.write(f"{d}: no ps worker records\n")
            return 1
        if any("compute_start" not in r for rs in by_job.values() for r in rs):
            sys.stderr.write(f"{d}: records without compute_start (made before 2026-11-24): rerun the bench\n")
            return 1
        print(f"== {d}  (ms per iteration, mean over workers)")
        rows = {j: job_phases(rs) for j, rs in sorted(by_job.items())}
        for j, p in rows.items():
            print(f"{j:12s} " + "  ".join(f"{k} {v * 1e3:5.0f}" for k, v in p.items()))
        mean = {k: statistics.fmean(p[k] for p in rows.values()) for k in next(iter(rows.values()))}
        print(f"{'mean':12s} " + "  ".join(f"{k} {v * 1e3:5.0f}" for k, v in mean.items()))
        last, first, spread = stragglers(by_job)
        print("job's last gradient from rank: " + ", ".join(f"{k}: {v:.0%}" for k, v in last.items())
              + "; first: " + ", ".join(f"{k}: {v:.0%}" for k, v in first.items())
              + f"; mean spread {spread * 1e3:.0f} ms")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
