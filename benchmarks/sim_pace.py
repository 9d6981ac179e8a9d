"""PACE (paper 003) in the simulator's iteration-time model: bandwidth sweep and worker counts.

    nice -n 10 .venv/bin/python benchmarks/sim_pace.py [--workers 12] [--out-dir docs/results/sim/pace]

What it computes (hostctl_lab.sim.pace.t_iter; pure CPU, about a minute on 2 cores):

1. The bandwidth sweep of PACE's Fig. 9: 12 workers, 1-25 Gbit/s, per model, training speed
   (samples/s over all workers = W * batch / T_iter) under ``wfbp_fifo``, ``horovod_fusion`` and
   ``pace``, and PACE's gain over each (T_base / T_pace - 1). Two compute settings:
   - ``v100``: paper 000's Table III times (one V100, batch 16; LSTM 64). What the cluster
     simulator uses.
   - ``slow-gpu``: every compute time x4 (``--slow-scale``), our stand-in for paper 003's testbed
     (GTX 1080Ti, batch 64/32 per GPU): roughly 2-4x the batch on a ~1.5-2x slower GPU. An
     assumption, not a calibration: the paper gives no per-iteration times.
2. A wide sweep (1-400 Gbit/s, v100) to show where the gain peaks on V100s.
3. Worker counts 2..16 at 10 Gbit/s (PACE's Fig. 8 setting), v100 and slow-gpu.
4. The per-AR latency c0 from 0 to 1 ms at 10 Gbit/s: how much of the gain is fusion.

Paper 003's numbers (Sec. VI; spec cluster-papers.md §3.4) for comparison: at 10 Gbit/s PACE
beats WFBP by 20-36% and Horovod by 3-32%; in the sweep it beats Horovod by up to 32% (VGG16 at
12 Gbit/s, ResNet50 at 6 Gbit/s), 27% (Transformer at 14 Gbit/s), and gains shrink toward both
bandwidth ends. Writes sim_pace.json and sim_pace.png (+ sim_pace_wide.png) to --out-dir.
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

import numpy as np

from hostctl_lab.bench.results import write_results
from hostctl_lab.sim.pace import (
    C0_S, GBIT_Bps, HOROVOD_CYCLE_S, HOROVOD_THRESHOLD_BYTES, MODELS, STRATEGIES, ArCost, balanced_fusion, model_dag,
    schedule,
)
from hostctl_lab.sim.pace_profiles import profile

SWEEP_GBPS = (1, 2, 3, 4, 5, 6, 8, 10, 12, 14, 16, 18, 20, 25)
WIDE_GBPS = (1, 2, 5, 10, 15, 25, 40, 60, 100, 150, 200, 300, 400)
WORKERS = (2, 4, 8, 12, 16)
C0_VALUES = (0.0, 1e-4, 3e-4, C0_S, 1e-3)


def point(model: str, scale: float, gbps: float, workers: int, c0_s: float = C0_S) -> dict:
    """All three strategies at one (model, compute scale, bandwidth, workers, c0)."""
    dag = model_dag(model, scale)
    cost = ArCost(gbps * GBIT_Bps, workers, c0_s)
    batch = profile(model).batch
    out: dict = {"gbps": gbps, "workers": workers, "c0_s": c0_s}
    for s in STRATEGIES:
        if s == "pace":
            plan = balanced_fusion(dag, cost)
            sch = plan.schedule
            out["pace_R"] = plan.r
            out["pace_preemptions"] = sch.n_preemptions
            paid = balanced_fusion(dag, cost, partition_c0=True)  # c0 again for every extra partition
            out["pace_c0_iter_s"] = paid.schedule.iter_s
            out["pace_c0_R"] = paid.r
            out["pace_c0_preemptions"] = paid.schedule.n_preemptions
            out["pace_c0_speed"] = workers * batch / paid.schedule.iter_s
        else:
            sch = schedule(dag, cost, s)
        out[f"{s}_iter_s"] = sch.iter_s
        out[f"{s}_duty"] = sch.duty_cycle
        out[f"{s}_speed"] = workers * batch / sch.iter_s
    out["gain_vs_wfbp"] = out["wfbp_fifo_iter_s"] / out["pace_iter_s"] - 1
    out["gain_vs_horovod"] = out["horovod_fusion_iter_s"] / out["pace_iter_s"] - 1
    out["gain_c0_vs_wfbp"] = out["wfbp_fifo_iter_s"] / out["pace_c0_iter_s"] - 1
    out["gain_c0_vs_horovod"] = out["horovod_fusion_iter_s"] / out["pace_c0_iter_s"] - 1
    return out


def summary(rows: list[dict]) -> dict:
    out = {}
    for key in ("gain_vs_wfbp", "gain_vs_horovod", "gain_c0_vs_wfbp", "gain_c0_vs_horovod"):
        g = [r[key] for r in rows]
        k = int(np.argmax(g))
        out[key] = {"max": g[k], "at_gbps": rows[k]["gbps"], "lowest_bw": g[0], "highest_bw": g[-1]}
    return out


def plot(sweeps: dict, path: Path, title: str, logx: bool = False) -> None:
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    settings = list(sweeps)
    models = list(next(iter(sweeps.values())))
    fig, axes = plt.subplots(len(settings), len(models), figsize=(3.2 * len(models), 2.8 * len(settings)),
                             squeeze=False)
    styles = {"wfbp_fifo": ("WFBP (FIFO)", "tab:gray", "--"), "horovod_fusion": ("Horovod fusion", "tab:blue", "-."),
              "pace": ("PACE", "tab:red", "-"), "pace_c0": ("PACE, c0 per partition", "tab:orange", "-")}
    for a, setting in enumerate(settings):
        for b, m in enumerate(models):
            ax = axes[a][b]
            rows = sweeps[setting][m]
            x = [r["gbps"] for r in rows]
            for s, (label, color, ls) in styles.items():
                ax.plot(x, [r[f"{s}_speed"] for r in rows], ls, color=color, label=label,
                        lw=0.9 if s == "pace_c0" else 1.4)
            ax.set_title(f"{m} ({setting})", fontsize=9)
            if logx:
                ax.set_xscale("log")
            ax.set_xlabel("bandwidth (Gbit/s)", fontsize=8)
            if b == 0:
                ax.set_ylabel("samples/s (all workers)", fontsize=8)
            ax.tick_params(labelsize=7)
            ax.grid(alpha=0.3)
            ax2 = ax.twinx()
            ax2.plot(x, [100 * r["gain_vs_horovod"] for r in rows], ":", color="tab:green", lw=1.2,
                     label="gain vs Horovod (%)")
            ax2.tick_params(labelsize=7, colors="tab:green")
            if a == 0 and b == 0:
                h1, l1 = ax.get_legend_handles_labels()
                h2, l2 = ax2.get_legend_handles_labels()
                ax.legend(h1 + h2, l1 + l2, fontsize=6, loc="lower right")
    fig.suptitle(title, fontsize=10)
    fig.tight_layout()
    fig.savefig(path, dpi=70)
    plt.close(fig)
    print(f"wrote {path}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--workers", type=int, default=12)
    ap.add_argument("--slow-scale", type=float, default=4.0, help="compute-time multiplier of the slow-gpu setting")
    ap.add_argument("--models", default=",".join(MODELS))
    ap.add_argument("--out-dir", default="docs/results/sim/pace")
    args = ap.parse_args()
    models = [m.strip() for m in args.models.split(",") if m.strip()]
    settings = {"v100": 1.0, "slow-gpu": args.slow_scale}
    out = Path(args.out_dir)
    t0 = time.perf_counter()

    sweeps = {s: {m: [point(m, sc, g, args.workers) for g in SWEEP_GBPS] for m in models} for s, sc in settings.items()}
    wide = {"v100": {m: [point(m, 1.0, g, args.workers) for g in WIDE_GBPS] for m in models}}
    workers = {s: {m: [point(m, sc, 10, w) for w in WORKERS] for m in models} for s, sc in settings.items()}
    c0 = {s: {m: [point(m, sc, 10, args.workers, c) for c in C0_VALUES] for m in models} for s, sc in settings.items()}

    body = {
        "assumptions": {
            "c0_s": C0_S, "horovod_threshold_bytes": HOROVOD_THRESHOLD_BYTES, "horovod_cycle_s": HOROVOD_CYCLE_S,
            "settings_compute_scale": settings, "workers": args.workers,
            "profiles": {m: {"params": profile(m).n_params, "tensors": profile(m).n_tensors,
                             "t_f_s": profile(m).t_f_s, "t_b_s": profile(m).t_b_s, "batch": profile(m).batch,
                             "source": profile(m).source} for m in models},
        },
        "summary": {s: {m: summary(rows) for m, rows in per.items()} for s, per in sweeps.items()},
        "summary_wide_v100": {m: summary(rows) for m, rows in wide["v100"].items()},
        "sweep": sweeps, "wide": wide, "workers_at_10gbps": workers, "c0_at_10gbps": c0,
        "elapsed_s": round(time.perf_counter() - t0, 1),
    }
    write_results(out / "sim_pace.json", "sim_pace", body)
    plot(sweeps, out / "sim_pace.png", f"PACE Fig. 9 setting in the model: {args.workers} workers")
    plot(wide, out / "sim_pace_wide.png", f"V100 profiles, {args.workers} workers, 1-400 Gbit/s", logx=True)
    def fmt(g: dict) -> str:
        return f"{100 * g['max']:5.0f}%@{g['at_gbps']:<3} [{100 * g['lowest_bw']:3.0f},{100 * g['highest_bw']:3.0f}]"

    for title, summ in (("1-25 Gbit/s", body["summary"]), ("1-400 Gbit/s", {"v100": body["summary_wide_v100"]})):
        print(f"PACE gain, {title}: max%@Gbit/s [at lowest, highest bandwidth]; c0 = c0 per extra partition")
        print(f"{'setting':9} {'model':13} {'vs WFBP':>20} {'vs Horovod':>20} {'c0 vs WFBP':>20} {'c0 vs Horovod':>20}")
        for s, per in summ.items():
            for m, r in per.items():
                print(f"{s:9} {m:13} " + " ".join(f"{fmt(r[k]):>20}" for k in
                      ("gain_vs_wfbp", "gain_vs_horovod", "gain_c0_vs_wfbp", "gain_c0_vs_horovod")))
    print("workers at 10 Gbit/s: PACE gain vs WFBP / vs Horovod (%), c0 per partition in ()")
    for s, per in workers.items():
        for m, rows in per.items():
            cells = " ".join(f"W={r['workers']}:{100 * r['gain_vs_wfbp']:.0f}/{100 * r['gain_vs_horovod']:.0f}"
                             f"({100 * r['gain_c0_vs_wfbp']:.0f}/{100 * r['gain_c0_vs_horovod']:.0f})" for r in rows)
            print(f"{s:9} {m:13} {cells}")
    print(f"c0 at 10 Gbit/s, {args.workers} workers: PACE gain vs WFBP / vs Horovod (%) for c0 = "
          + ", ".join(f"{1e3 * c:g}" for c in C0_VALUES) + " ms")
    for s, per in c0.items():
        for m, rows in per.items():
            print(f"{s:9} {m:13} " + " ".join(f"{100 * r['gain_vs_wfbp']:.0f}/{100 * r['gain_vs_horovod']:.0f}"
                                              for r in rows))
    print(f"elapsed {body['elapsed_s']} s")


if __name__ == "__main__":
    main()
