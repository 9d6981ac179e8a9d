"""A latency histogram with fixed buckets (Prometheus' cumulative `le` buckets), in seconds.

The daemon observes every slot's decision time into one, and mlcc every switch round trip;
`hostctl.metrics` exports them as histograms (rates and quantiles are the server's job).
"""

from __future__ import annotations

from bisect import bisect_left
from collections.abc import Sequence

# slot decisions (60 ms slots) and switch round trips: 0.5 ms .. 0.5 s
LATENCY_BUCKETS_S = (0.0005, 0.001, 0.002, 0.005, 0.01, 0.02, 0.03, 0.06, 0.1, 0.25, 0.5)


class Histogram:
    def __init__(self, buckets: Sequence[float] = LATENCY_BUCKETS_S) -> None:
        self.le = tuple(sorted(buckets))
        self.counts = [0] * (len(self.le) + 1)  # per bucket, the last one is +Inf
        self.sum = 0.0
        self.count = 0

    def observe(self, v: float) -> None:
        self.counts[bisect_left(self.le, v)] += 1  # bisect_left: v == le counts in that bucket
        self.sum += v
        self.count += 1

    def to_dict(self) -> dict:
        """{"le": [...], "cumulative": [...] (one more than le: +Inf), "sum": s, "count": n}."""
        cum, acc = [], 0
        for c in self.counts:
            acc += c
            cum.append(acc)
        return {"le": list(self.le), "cumulative": cum, "sum": self.sum, "count": self.count}
