"""The simulator's jobs: a model zoo, the Philly trace and seeded synthetic arrivals.

A job is data-parallel training: ``iterations`` times, every worker computes for ``compute_s`` (its
forward and backward pass on its own mini-batch), then the job exchanges its model update (``size``
bytes) and starts the next iteration only when the exchange is done. The exchange is ring all-reduce
(``kind = "ring"``) or a parameter server (``"ps"``); what flows that makes on the fabric is the
cluster simulator's business (hostctl_lab.sim.cluster).

Model zoo: paper 000's Table III (V100, PyTorch): model size, forward + backward time per iteration.
"MB" there is MiB (VGG-16: 138.4 M fp32 parameters = 527.8 MiB).

Philly rule (the trace has no models or iteration counts; ../shared/data/philly-2017/README.md):
the first N jobs with at least ``min_gpus`` GPUs (default 2: single-GPU jobs never touch the network)
in submission order; arrival = submission time minus the first one's, times ``time_scale``; the
model a seeded uniform choice from the zoo; iterations = the trace's duration divided by the job's
reference iteration time, rounded, at least 1 and at most ``max_iterations`` when given. The
reference iteration time is compute_s plus a ring all-reduce of the model over the fewest servers
that hold the job (``gpus_per_server``) at ``ref_nic_bps`` (10 Gbit/s), without contention: so a job
alone on a consolidated placement runs about as long as it ran in Philly.
"""

from __future__ import annotations

import csv
import math
from dataclasses import dataclass, replace

import numpy as np

from hostctl.errors import ConfigError

MIB = 1 << 20


@dataclass(frozen=True)
class Model:
    name: str
    size: int  # bytes of the model update per iteration
    compute_s: float  # forward + backward per iteration
    mem_mb: int  # GPU memory (paper 000's Table III)


# paper 000, Table III: size (MB = MiB), GPU memory (MB), t_f + t_b (ms) on a V100
ZOO = {m.name: m for m in (
    Model("vgg16", int(526.4 * MIB), (35.8 + 53.7) / 1e3, 4527),
    Model("resnet50", int(99.2 * MIB), (25.0 + 37.4) / 1e3, 3213),
    Model("inception3", int(103.0 * MIB), (34.9 + 52.4) / 1e3, 3291),
    Model("lstm-ptb", int(251.8 * MIB), (31.5 + 47.3) / 1e3, 2751),
)}


@dataclass(frozen=True)
class JobSpec:
    name: str
    arrival_s: float
    gpus: int
    model: str
    size: int  # bytes exchanged per iteration (the model update)
    compute_s: float
    iterations: int
    kind: str = "ring"  # "ring" (all-reduce) or "ps" (a parameter server on the job's first server)
    hosts: tuple[int, ...] = ()  # given placement (a scenario file): the workers' hosts; () = the placement's
    ps_hosts: tuple[int, ...] = ()  # given parameter servers (shards); () = the job's first server

    def ref_iter_s(self, gpus_per_server: int = 8, nic_Bps: float = 10e9 / 8) -> float:
        s = math.ceil(self.gpus / gpus_per_server)
        return self.compute_s + (2 * (s - 1) / s * self.size / nic_Bps if s > 1 else 0.0)


def philly_csv() -> str:
    from hostctl_lab.sim.topo import shared_data

    return shared_data("philly-2017/jobs.csv", "HOSTCTL_PHILLY", "the Philly trace", "--trace FILE")


def philly(path: str | None, n: int, *, seed: int = 0, min_gpus: int = 2, time_scale: float = 1.0,
           max_iterations: int | None = None, gpus_per_server: int = 8, ref_nic_bps: float = 10e9,
           ps_fraction: float = 0.0, max_gpus: int | None = None) -> list[JobSpec]:
    """The first ``n`` jobs of the Philly CSV with >= min_gpus GPUs (module docstring: the rule)."""
    path = path or philly_csv()
    rows = []
    try:
        with open(path, newline="") as f:
            for i, r in enumerate(csv.DictReader(f)):
                try:
                    g = int(float(r["num_gpus"]))
                    d = float(r["duration"])
                    ts = r["timestamp"]
                except (KeyError, TypeError, ValueError):
                    raise ConfigError(f"{path} line {i + 2}: expected columns timestamp,duration,num_gpus "
                                      "(the Philly jobs.csv format)") from None
                if g >= min_gpus and (max_gpus is None or g <= max_gpus) and d > 0:
                    rows.append((ts, d, g, i))
    except OSError as e:
        raise ConfigError(f"cannot read the trace {path}: {e.strerror}") from None
    if not rows:
        raise ConfigError(f"{path}: no job with at least {min_gpus} GPUs")
    rows.sort()
    rows = rows[:n]
    from datetime import datetime
    t0 = datetime.fromisoformat(rows[0][0])
    rng = np.random.default_rng(seed)
    models = list(ZOO.values())
    jobs = []
    for k, (ts, dur, g, line) in enumerate(rows):
        m = models[int(rng.integers(len(models)))]
        kind = "ps" if rng.random() < ps_fraction else "ring"
        j = JobSpec(f"p{k:05d}", (datetime.fromisoformat(ts) - t0).total_seconds() * time_scale, g, m.name,
                    m.size, m.compute_s, 1, kind)
        it = max(1, round(dur / j.ref_iter_s(gpus_per_server, ref_nic_bps / 8)))
        if max_iterations:
            it = min(it, max_iterations)
        jobs.append(replace(j, iterations=it))
    return jobs


# paper 000's job mix (GPUs: count of 160)
MIX_000 = ((1, 80), (2, 14), (4, 26), (8, 30), (16, 8), (32, 2))


def synthetic(n: int, *, seed: int = 0, window_s: float = 1200.0, iterations: tuple[int, int] = (1000, 6000),
              mix=MIX_000, ps_fraction: float = 0.0) -> list[JobSpec]:
    """``n`` jobs arriving uniformly over ``window_s``, GPUs from ``mix`` (paper 000's by default),
    models uniform over the zoo, iterations uniform in thousands over ``iterations`` (paper 000)."""
    if n < 1:
        raise ConfigError("--synthetic N needs N >= 1")
    rng = np.random.default_rng(seed)
    g = np.array([m[0] for m in mix])
    w = np.array([m[1] for m in mix], dtype=float)
    models = list(ZOO.values())
    lo, hi = iterations
    arr = np.sort(rng.uniform(0, window_s, n))
    jobs = []
    for k in range(n):
        m = models[int(rng.integers(len(models)))]
        it = int(rng.integers(max(1, lo // 1000), hi // 1000 + 1)) * 1000 if hi >= 1000 else int(rng.integers(lo, hi + 1))
        jobs.append(JobSpec(f"s{k:05d}", float(arr[k]), int(rng.choice(g, p=w / w.sum())), m.name, m.size,
                            m.compute_s, it, "ps" if rng.random() < ps_fraction else "ring"))
    return jobs
