"""Summary, table and plots of a bench results dict (see ``summarize`` for the schema).

    results = {
      "scenario": {"name": str, ...},
      "policies": ["fifo", "one", "rr"], "repeat": R,
      "lower_bound": {"avg_jct_s": float, "bottleneck": str | None, ...},
      "runs": [  # one per (repeat, policy)
        {"repeat": r, "policy": p, "ok": bool, "error": str | None, "duration_s": float,
         "jobs": {job: {"jct_s": float, "iteration_s": [...], "barrier_wait_s": [...],
                        "barrier_wait_std_s": [...], "barrier_wait_mean_s": [...], "errors": [...]}},
         "cross": {name: {"bytes": int, "seconds": float, "throughput_bps": float}},
         "links": {link: {"bytes": int, "rate_bps": int, "seconds": float, "utilisation": float,
                          "drops": int | None}},  # packets dropped by the link's queue
         "active": {"start_s": float, "end_s": float, "links": {...as above}} | None,  # all jobs running
         "cpu": {"mean_pct": float, "max_pct": float},
         # policies with a switchemu (hostctl.policy.VARIANTS, switch): its booking at the end (docs/switchemu.md)
         "booking": {"tolerance": float, "links": {link: {...}}, "worst": {"link": str, "peak_ratio": float,
                     "slot_peak_ratio": float, "over_slots": int, "slots": int, ...} | None} | None}]}

Only runs with ``ok`` true count; the others are counted as ``failed``. Every
part but ``runs`` may be missing (no cross traffic, no fifo, one repeat, ...):
the numbers that need it are None. matplotlib is imported only by ``plot``.
"""

from __future__ import annotations

import math
import os
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

import numpy as np

from hostctl import policy as policy_table

# Student t quantile t_{0.975, df} for df = 1..30; 1.96 beyond.
T975 = (12.7062, 4.3027, 3.1824, 2.7764, 2.5706, 2.4469, 2.3646, 2.3060, 2.2622, 2.2281,
        2.2010, 2.1788, 2.1604, 2.1448, 2.1314, 2.1199, 2.1098, 2.1009, 2.0930, 2.0860,
        2.0796, 2.0739, 2.0687, 2.0639, 2.0595, 2.0555, 2.0518, 2.0484, 2.0452, 2.0423)
BASELINE = policy_table.BASELINE
MINUS = "\u2212"
DASH = "\u2014"


def t975(df: int) -> float:
    if df < 1:
        raise ValueError("df must be at least 1")
    return T975[df - 1] if df <= len(T975) else 1.96


def _num(x: Any) -> float | None:
    """x as a finite float, else None."""
    if isinstance(x, bool) or not isinstance(x, (int, float)):
        return None
    x = float(x)
    return x if math.isfinite(x) else None


def _nums(xs: Any) -> list[float]:
    if not isinstance(xs, (list, tuple)):
        return []
    return [v for v in map(_num, xs) if v is not None]


def _mean(xs: Sequence[float]) -> float | None:
    return float(sum(xs) / len(xs)) if xs else None


def _ratio(a: float | None, b: float | None) -> float | None:
    return a / b if a is not None and b is not None and b > 0 else None


def mean_ci95(xs: Sequence[float]) -> tuple[float, float] | None:
    """Student t 95% interval of the mean; None with fewer than two values."""
    n = len(xs)
    if n < 2:
        return None
    m = sum(xs) / n
    sd = math.sqrt(sum((x - m) ** 2 for x in xs) / (n - 1))
    half = t975(n - 1) * sd / math.sqrt(n)
    return (m - half, m + half)


def policies_of(results: Mapping) -> list[str]:
    """The policies in the order of results["policies"], then any others that ran."""
    out = [p for p in results.get("policies") or [] if isinstance(p, str)]
    for run in results.get("runs") or []:
        p = run.get("policy")
        if isinstance(p, str) and p not in out:
            out.append(p)
    return out


def ok_runs(results: Mapping, policy: str) -> list[dict]:
    return [r for r in results.get("runs") or [] if r.get("policy") == policy and r.get("ok") is True]


def run_jcts(run: Mapping) -> dict[str, float]:
    """job -> JCT of one run (jobs without a finite jct_s are left out)."""
    out = {}
    for name, job in (run.get("jobs") or {}).items():
        v = _num((job or {}).get("jct_s"))
        if v is not None:
            out[name] = v
    return out


def run_avg_jct(run: Mapping) -> float | None:
    return _mean(list(run_jcts(run).values()))


def _per_repeat_avg(runs: Iterable[Mapping]) -> dict[Any, float]:
    """repeat -> average JCT (several runs of one repeat, if ever: their mean)."""
    acc: dict[Any, list[float]] = {}
    for r in runs:
        v = run_avg_jct(r)
        if v is not None:
            acc.setdefault(r.get("repeat"), []).append(v)
    return {k: sum(v) / len(v) for k, v in acc.items()}


def _barrier(run: Mapping, key: str) -> list[float]:
    return [v for job in (run.get("jobs") or {}).values() for v in _nums((job or {}).get(key))]


def _cross_bps(run: Mapping) -> float | None:
    cross = run.get("cross")
    if not isinstance(cross, Mapping) or not cross:
        return None
    vals = [_num((c or {}).get("throughput_bps")) for c in cross.values()]
    vals = [v for v in vals if v is not None]
    return float(sum(vals)) if vals else None


def _link_util(link: Mapping) -> float | None:
    u = _num(link.get("utilisation"))
    if u is None:  # derive it: bytes x 8 / (rate x seconds)
        b, rate, s = _num(link.get("bytes")), _num(link.get("rate_bps")), _num(link.get("seconds"))
        if b is not None and rate and s:
            u = b * 8 / (rate * s)
    return u


def _busiest(run: Mapping, window: str = "run") -> tuple[str, float] | None:
    """(link, utilisation) of the busiest link over the whole run, or (window "active") while
    every job was running."""
    links = run.get("links") if window == "run" else (run.get("active") or {}).get("links")
    if not isinstance(links, Mapping):
        return None
    utils = [(name, u) for name, l in links.items() if (u := _link_util(l or {})) is not None]
    return max(utils, key=lambda x: x[1]) if utils else None


def _drops(run: Mapping) -> tuple[int, str] | None:
    """(packets dropped by all link queues, the link that dropped most) over the run; None if no
    link has a drop count (results from before drops were recorded)."""
    links = run.get("links")
    if not isinstance(links, Mapping):
        return None
    counts = [(int(d), name) for name, l in links.items() if (d := _num((l or {}).get("drops"))) is not None]
    if not counts:
        return None
    return sum(c for c, _ in counts), max(counts)[1]


def _booking_worst(run: Mapping) -> Mapping | None:
    """The run's worst-booked link (its switch's ``booking.worst``), None without a switch or booking."""
    w = (run.get("booking") or {}).get("worst") if isinstance(run.get("booking"), Mapping) else None
    return w if isinstance(w, Mapping) and _num(w.get("slot_peak_ratio")) is not None else None


def _most_common(names: list[str]) -> str | None:
    return max(set(names), key=lambda n: (names.count(n), n)) if names else None


def _policy_stats(runs: list[dict]) -> dict:
    per_run_avg = [v for v in map(run_avg_jct, runs) if v is not None]
    pooled = [v for r in runs for v in run_jcts(r).values()]
    stds = [v for r in runs for v in _barrier(r, "barrier_wait_std_s")]
    cross = [v for v in map(_cross_bps, runs) if v is not None]
    busiest = [b for b in map(_busiest, runs) if b is not None]
    active = [b[1] for r in runs if (b := _busiest(r, "active")) is not None]
    cpu_mean = [v for r in runs if (v := _num((r.get("cpu") or {}).get("mean_pct"))) is not None]
    cpu_max = [v for r in runs if (v := _num((r.get("cpu") or {}).get("max_pct"))) is not None]
    names = [b[0] for b in busiest]
    drops = [d for d in map(_drops, runs) if d is not None]
    booked = [w for w in map(_booking_worst, runs) if w is not None]
    worst = max(booked, key=lambda w: w["slot_peak_ratio"]) if booked else None
    return {
        "avg_jct_s": _mean(per_run_avg),
        "p95_jct_s": float(np.percentile(pooled, 95)) if pooled else None,
        "barrier_std_mean_s": _mean(stds),
        "cross_throughput_bps": _mean(cross),
        "bottleneck_utilisation": _mean([b[1] for b in busiest]),
        "busiest_link": _most_common(names),
        "active_utilisation": _mean(active),
        "cpu_mean_pct": _mean(cpu_mean),
        "cpu_max_pct": max(cpu_max) if cpu_max else None,
        "queue_drops": _mean([d[0] for d in drops]),
        "most_drops_link": _most_common([d[1] for d in drops if d[0] > 0]),
        "booked_slot_peak_ratio": worst["slot_peak_ratio"] if worst else None,
        "booked_peak_ratio": max(_num(w.get("peak_ratio")) or 0.0 for w in booked) if booked else None,
        "booked_link": worst.get("link") if worst else None,
        "overbooked_slots": sum(int(_num(w.get("over_slots")) or 0) for w in booked) if booked else None,
        "booked_slots": sum(int(_num(w.get("slots")) or 0) for w in booked) if booked else None,
    }


def paired_ratios(results: Mapping, policy: str, baseline: str) -> dict[Any, float]:
    """repeat -> avg JCT of `policy` / avg JCT of `baseline` in that repeat, over the repeats where
    both ran ok (interleaved repeats share the machine's state, so pairs cancel most drift)."""
    mine = _per_repeat_avg(ok_runs(results, policy))
    base = _per_repeat_avg(ok_runs(results, baseline))
    return {k: mine[k] / base[k] for k in mine if base.get(k)}


def compare(results: Mapping, policy: str, baseline: str) -> dict:
    """`policy` against `baseline` (any two policies of one run): mean paired ratio of the average
    JCT, its Student t 95% interval (None with fewer than two pairs), and the per-repeat ratios."""
    known = policies_of(results)
    for p in (policy, baseline):
        if p not in known:
            raise ValueError(f"policy {p!r} is not in these results ({', '.join(known) or 'none'})")
    by_repeat = paired_ratios(results, policy, baseline)
    ratios = [by_repeat[k] for k in sorted(by_repeat, key=str)]
    ci = mean_ci95(ratios)
    return {"policy": policy, "baseline": baseline, "ratio": _mean(ratios), "ratio_ci95": list(ci) if ci else None,
            "pairs": len(ratios), "ratios": ratios}


def summarize(results: Mapping) -> dict[str, dict]:
    """policy -> summary over its ok runs:

    avg_jct_s: mean over repeats of the run's average JCT; p95_jct_s: 95th percentile
    (linear interpolation) of all job JCTs pooled over repeats; ratio_vs_fifo: mean over
    repeats r of avg_jct(policy, r) / avg_jct(fifo, r), over the repeats where both ran
    ok (``pairs`` of them); ratio_ci95: [lo, hi] Student t 95% interval of those ratios
    (None with fewer than two pairs); barrier_std_mean_s: mean over all barriers (jobs,
    iterations, runs) of the per-barrier std of the barrier waits, and
    barrier_std_ratio_vs_fifo = that / fifo's; cross_throughput_bps: mean per run of
    the sum over cross flows (bits/s; None without cross traffic), cross_ratio_vs_fifo
    likewise; bottleneck_utilisation: mean per run of the largest link utilisation
    (0..1; ``busiest_link`` the link most often busiest); active_utilisation: the same
    while every job was running (the run's ``active`` window: from the last arrival plus
    a warm-up to the first job's end; the paper's network-throughput window), and
    active_utilisation_ratio_vs_fifo = that / fifo's; cpu_mean_pct: mean of the runs'
    mean CPU; cpu_max_pct: largest of the runs' max CPU; queue_drops: mean per run of the
    packets dropped by all link queues (switch port buffers, host NIC qdiscs; None if not
    recorded), most_drops_link: the link that dropped most, most often; booked_slot_peak_ratio:
    the largest over the runs of their switch's worst slot_peak_ratio (a slot's final booking /
    capacity, docs/switchemu.md; None for policies without a switch), booked_link its link,
    booked_peak_ratio the largest peak_ratio of the runs' worst links, overbooked_slots /
    booked_slots the sums of those links' over_slots / slots; runs: ok runs; failed: runs
    not ok; gap_to_bound: avg_jct_s / lower_bound avg_jct_s. Ratios are None without an
    ok fifo baseline.
    """
    all_runs = results.get("runs") or []
    lb = _num((results.get("lower_bound") or {}).get("avg_jct_s"))
    base_runs = ok_runs(results, BASELINE)
    base = _policy_stats(base_runs) if base_runs else None
    out: dict[str, dict] = {}
    for policy in policies_of(results):
        runs = ok_runs(results, policy)
        s = _policy_stats(runs)
        ratios = list(paired_ratios(results, policy, BASELINE).values())
        ci = mean_ci95(ratios)
        s.update({
            "ratio_vs_fifo": _mean(ratios),
            "ratio_ci95": list(ci) if ci else None,
            "pairs": len(ratios),
            "barrier_std_ratio_vs_fifo": _ratio(s["barrier_std_mean_s"], base and base["barrier_std_mean_s"]),
            "cross_ratio_vs_fifo": _ratio(s["cross_throughput_bps"], base and base["cross_throughput_bps"]),
            "active_utilisation_ratio_vs_fifo": _ratio(s["active_utilisation"], base and base["active_utilisation"]),
            "runs": len(runs),
            "failed": sum(1 for r in all_runs if r.get("policy") == policy and r.get("ok") is not True),
            "gap_to_bound": _ratio(s["avg_jct_s"], lb),
        })
        parents = [p for p in HYBRIDS.get(policy, ()) if ok_runs(results, p)]
        if parents:  # a hybrid: also its average JCT against each parent that ran (mean paired ratio)
            s["vs_parents"] = {p: _mean(list(paired_ratios(results, policy, p).values())) for p in parents}
        out[policy] = s
    return out


# hybrid policy -> the policies it combines, as the bench names them (hostctl.policy: Policy.parts)
HYBRIDS = {v.name: v.parts for v in policy_table.VARIANTS.values() if v.parts}


def hybrid_lines(summary: Mapping[str, Mapping]) -> list[str]:
    """One line per hybrid policy: its average JCT as a multiple of each parent's that ran."""
    out = []
    for policy, s in summary.items():
        vs = s.get("vs_parents") or {}
        parts = [f"{r:.3f}x {p}" for p, r in vs.items() if r is not None]
        if parts:
            out.append(f"{policy} (hybrid): average JCT " + ", ".join(parts) + " (mean paired ratio over repeats)")
    return out


# ---------------------------------------------------------------- table

def _signed(x: float, digits: int = 1) -> str:
    s = f"{x:+.{digits}f}"
    return s.replace("-", MINUS)


def _fmt_vs_fifo(policy: str, s: Mapping) -> str:
    r = s.get("ratio_vs_fifo")
    if policy == BASELINE and r is not None:
        return "baseline"
    if r is None:
        return DASH
    text = f"{_signed((r - 1) * 100)}%"
    ci = s.get("ratio_ci95")
    if ci:
        text += f" [{_signed((ci[0] - 1) * 100)}, {_signed((ci[1] - 1) * 100)}]"
    return text


def _fmt(x: float | None, spec: str, suffix: str = "") -> str:
    return DASH if x is None else f"{x:{spec}}{suffix}"


def _fmt_pct_of_fifo(policy: str, ratio: float | None) -> str:
    return "" if ratio is None or policy == BASELINE else f" ({ratio * 100:.0f}%)"


def caption(results: Mapping) -> str:
    lb = results.get("lower_bound") or {}
    v = _num(lb.get("avg_jct_s"))
    if v is None:
        text = "lower bound: not computed"
    else:
        neck = lb.get("bottleneck")
        text = f"lower bound on avg JCT: {v:.2f} s, " + (
            f"bottleneck {neck}" if neck else "no link binds (standalone times dominate)")
    text += "; vs fifo: mean paired ratio, 95% t interval over repeats"
    if any(isinstance(r.get("booking"), Mapping) for r in results.get("runs") or []):
        text += "; booked: worst slot's final booking / capacity on the switch (docs/switchemu.md)"
    return text


def render_table(results: Mapping, summary: Mapping[str, Mapping]):
    """A rich Table: one row per policy."""
    from rich.table import Table

    name = (results.get("scenario") or {}).get("name") or "scenario"
    repeat = results.get("repeat")
    title = f"{name}" + (f" ({repeat} repeat{'s' if repeat != 1 else ''})" if repeat else "")
    t = Table(title=title, caption=caption(results))
    for col in ("policy", "avg JCT", "p95 JCT", "vs fifo", "\u00d7bound", "barrier-wait std ms (% fifo)",
                "cross Mbit/s (% fifo)", "bottleneck util run | all jobs (% fifo)", "queue drops/run (most at)",
                "booked", "CPU mean/max"):
        t.add_column(col, justify="left" if col in ("policy", "vs fifo") else "right")
    for policy, s in summary.items():
        label = policy + (f" ({s['failed']} failed)" if s.get("failed") else "")
        std = s.get("barrier_std_mean_s")
        cross = s.get("cross_throughput_bps")
        util = s.get("bottleneck_utilisation")
        act = s.get("active_utilisation")
        cm, cx = s.get("cpu_mean_pct"), s.get("cpu_max_pct")
        drops, at = s.get("queue_drops"), s.get("most_drops_link")
        t.add_row(
            label,
            _fmt(s.get("avg_jct_s"), ".2f", " s"),
            _fmt(s.get("p95_jct_s"), ".2f", " s"),
            _fmt_vs_fifo(policy, s),
            _fmt(s.get("gap_to_bound"), ".2f", "\u00d7"),
            _fmt(None if std is None else std * 1e3, ".1f")
            + ("" if std is None else _fmt_pct_of_fifo(policy, s.get("barrier_std_ratio_vs_fifo"))),
            _fmt(None if cross is None else cross / 1e6, ".1f")
            + ("" if cross is None else _fmt_pct_of_fifo(policy, s.get("cross_ratio_vs_fifo"))),
            _fmt(None if util is None else util * 100, ".0f", "%") + " | "
            + _fmt(None if act is None else act * 100, ".0f", "%")
            + ("" if act is None else _fmt_pct_of_fifo(policy, s.get("active_utilisation_ratio_vs_fifo"))),
            _fmt(drops, ",.0f") + ("" if drops is None or at is None else f" ({at})"),
            _fmt(s.get("booked_slot_peak_ratio"), ".3f", "\u00d7"),
            DASH if cm is None and cx is None else f"{_fmt(cm, '.0f')}/{_fmt(cx, '.0f')}%",
        )
    return t


CPU_TRUST_PCT = 70.0  # above this mean machine CPU the emulation itself may be what is slow (docs/testbed.md)


def cpu_warnings(summary: Mapping[str, Mapping]) -> list[str]:
    """One line per policy whose runs kept the machine busier than CPU_TRUST_PCT on average: its
    hosts, daemons and emulated links competed for the processors, so its JCTs may be the machine's."""
    out = []
    for policy, s in summary.items():
        cm = _num(s.get("cpu_mean_pct"))
        if cm is not None and cm > CPU_TRUST_PCT:
            out.append(f"{policy}: the machine's CPU averaged {cm:.0f}% (> {CPU_TRUST_PCT:.0f}%): the emulation may be "
                       "CPU-bound under this policy; compare with care, or scale link rates and models down")
    return out


def print_table(results: Mapping, summary: Mapping[str, Mapping], console=None) -> None:
    if console is None:
        from rich.console import Console
        console = Console()
    console.print(render_table(results, summary))
    for line in hybrid_lines(summary):
        console.print(line, highlight=False)
    for line in cpu_warnings(summary):
        console.print(f"[yellow]warning:[/yellow] {line}", highlight=False)


# ---------------------------------------------------------------- plots

def job_jcts(results: Mapping) -> dict[str, dict[str, list[float]]]:
    """policy -> job -> JCTs over the policy's ok runs (jobs in order of first appearance)."""
    out: dict[str, dict[str, list[float]]] = {}
    for policy in policies_of(results):
        per: dict[str, list[float]] = {}
        for run in ok_runs(results, policy):
            for name, v in run_jcts(run).items():
                per.setdefault(name, []).append(v)
        out[policy] = per
    return out


def _job_order(results: Mapping) -> list[str]:
    names: list[str] = []
    for run in results.get("runs") or []:
        for n in run.get("jobs") or {}:
            if n not in names:
                names.append(n)
    return names


def _cdf(ax, values: Sequence[float], label: str, color) -> None:
    xs = np.sort(np.asarray(values, dtype=float))
    ys = np.arange(1, len(xs) + 1) / len(xs)
    ax.step(np.concatenate(([xs[0]], xs)), np.concatenate(([0.0], ys)), where="post", label=label, color=color)


def plot(results: Mapping, out_prefix: str) -> list[str]:
    """Write <prefix>_jct.png and <prefix>_barrier_cdf.png; return their paths."""
    from hostctl_lab.bench import agg_figure

    Figure, FigureCanvasAgg = agg_figure()

    name = (results.get("scenario") or {}).get("name") or "scenario"
    policies = policies_of(results)
    colors = {p: f"C{i}" for i, p in enumerate(policies)}
    d = os.path.dirname(out_prefix)
    if d:
        os.makedirs(d, exist_ok=True)
    paths = []

    # JCT per job per policy: grouped bars, mean over repeats, min/max error bars
    per = job_jcts(results)
    jobs = _job_order(results)
    fig = Figure(figsize=(min(16.0, max(7.0, 1.0 + 0.45 * len(jobs) * max(1, len(policies)))), 4.5))
    FigureCanvasAgg(fig)
    ax = fig.add_subplot(1, 1, 1)
    width = 0.8 / max(1, len(policies))
    x = np.arange(len(jobs))
    drawn = False
    for i, p in enumerate(policies):
        vals = [per.get(p, {}).get(j, []) for j in jobs]
        if not any(vals):
            continue
        mean = np.array([np.mean(v) if v else np.nan for v in vals])
        lo = np.array([mean[k] - min(v) if v else 0.0 for k, v in enumerate(vals)])
        hi = np.array([max(v) - mean[k] if v else 0.0 for k, v in enumerate(vals)])
        ax.bar(x + (i - (len(policies) - 1) / 2) * width, np.nan_to_num(mean), width, yerr=[lo, hi],
               capsize=2, label=p, color=colors[p])
        drawn = True
    ax.set_xticks(x)
    ax.set_xticklabels(jobs, rotation=45 if len(jobs) > 6 else 0, ha="right" if len(jobs) > 6 else "center")
    ax.set_ylabel("JCT (s)")
    ax.set_title(f"{name}: JCT per job (mean over repeats; error bars: min..max)", fontsize=10)
    if drawn:
        ax.legend()
    else:
        ax.text(0.5, 0.5, "no completed runs", ha="center", va="center", transform=ax.transAxes)
    fig.tight_layout()
    path = f"{out_prefix}_jct.png"
    fig.savefig(path, dpi=110)
    paths.append(path)

    # CDFs: per-barrier std of the waits, and the individual waits (ms)
    fig = Figure(figsize=(11, 4.5))
    FigureCanvasAgg(fig)
    panels = (("barrier_wait_std_s", "std of barrier wait per barrier (ms)"),
              ("barrier_wait_s", "barrier wait (ms)"))
    for k, (key, xlabel) in enumerate(panels):
        ax = fig.add_subplot(1, 2, k + 1)
        drawn = False
        for p in policies:
            vals = [v * 1e3 for r in ok_runs(results, p) for v in _barrier(r, key)]
            if vals:
                _cdf(ax, vals, p, colors[p])
                drawn = True
        ax.set_xlabel(xlabel)
        ax.set_ylabel("CDF")
        ax.set_ylim(0, 1.02)
        ax.grid(alpha=0.3)
        if drawn:
            ax.legend(loc="lower right")
        else:
            ax.text(0.5, 0.5, "no barriers recorded", ha="center", va="center", transform=ax.transAxes)
    fig.suptitle(f"{name}: barrier waits, pooled over jobs and repeats")
    fig.tight_layout()
    path = f"{out_prefix}_barrier_cdf.png"
    fig.savefig(path, dpi=110)
    paths.append(path)
    return paths
