"""SJF-BCO (paper 001) on the paper's configuration: policies, kappa, servers and lambda sweeps.

    nice -n 10 .venv/bin/python benchmarks/sim_sjfbco.py [--seeds 20] [--out docs/results/sim/sjfbco]
                                                         [--quick] [--plot-only FILE.json] [--online] [--lemma3]

Configuration (spec cluster-papers.md 2.3, 2.5(b) test 7; generator: hostctl_lab.sim.sjfbco.paper_instance):
20 servers with GPU counts uniform over {4, 8, 16, 32}; 160 jobs, 80x1, 14x2, 26x4, 30x8, 8x16, 2x32
GPUs; F uniform 1000..6000; T = 1200 (1500 for the servers sweep). Per seed:

  1. policies: SJF-BCO (literal bisection, kappa over distinct sizes, lambda = 1, FA-FFP as printed),
     SJF-BCO with FA-FFP `pack`, SJF-BCO with the monotone bisection, FF, LS, RAND: planned and
     replayed makespan and average JCT;
  2. kappa = 1..32 (each fixed; equal kappa classes computed once);
  3. servers 10..20 (the first n of the seed's 20 servers, same jobs), T = 1500: SJF-BCO, FF, LS, RAND;
  4. lambda in {1, 2, 4, 8} at kappa = 1;
  5. the theta search against every theta (`scan`) on --scan-seeds seeds of the paper configuration
     and on 200 small random instances.

--lemma3 runs only a stress check of Lemma 3 (makespan <= n_g * theta with exact durations; lemma3.json).
--online runs only hostctl's online adaptation instead (not in the paper; online.json): the same jobs
arriving uniformly over 1200 slots, each policy re-run over the pending queue every 60 slots.

The paper publishes no numbers; the JSON lists each qualitative claim and whether it holds here.
"""

from __future__ import annotations

import argparse
import json
import platform
import time
from pathlib import Path

import numpy as np

from hostctl_lab.bench.results import write_results
from hostctl_lab.sim import sjfbco as sb

POLICY_CASES = {
    "SJF-BCO": dict(policy="sjf-bco"),
    "SJF-BCO pack": dict(policy="sjf-bco", ffp="pack"),
    "SJF-BCO monotone": dict(policy="sjf-bco", bisection="monotone"),
    "SJF-BCO full": dict(policy="sjf-bco", kappa="full"),
    "FF": dict(policy="ff"),
    "LS": dict(policy="ls"),
    "RAND": dict(policy="rand"),
}
KEYS = ("makespan", "avg_jct", "replay_makespan", "replay_avg_jct")


def one(jobs, servers, **kw) -> dict:
    t0 = time.process_time()
    try:
        r = sb.run(jobs, servers, **kw)
    except sb.Infeasible as e:
        return {"infeasible": str(e), "cpu_s": time.process_time() - t0}
    out = {k: r[k] for k in KEYS}
    out.update(theta=r["theta"], kappa=r["kappa"], trials=r["trials"], cpu_s=time.process_time() - t0)
    # contention + overhead share of the replayed execution time (the paper's budget: <= 15%)
    base = np.array([j["rho_hat"] for j in r["jobs"]])
    dur = np.array([j["replay_end"] - j["replay_start"] for j in r["jobs"]], dtype=float)
    out["extra_share"] = float(max(0.0, (dur.sum() - base.sum())) / dur.sum())
    out["servers_per_job"] = float(np.mean([len(j["servers"]) for j in r["jobs"]]))
    return {k: round(v, 4) if isinstance(v, float) else v for k, v in out.items()}


def slim(row: dict) -> dict:
    """What the sweeps keep per run (the results file stays small)."""
    return {k: row[k] for k in KEYS + ("infeasible",) if k in row}


def mean(rows: list[dict], key: str) -> float | None:
    v = [r[key] for r in rows if key in r]
    return float(np.mean(v)) if v else None


def exp_policies(seeds, T) -> dict:
    out = {name: [] for name in POLICY_CASES}
    for seed in seeds:
        jobs, servers = sb.paper_instance(seed)
        for name, case in POLICY_CASES.items():
            out[name].append(one(jobs, servers, T=T, seed=seed, **case))
        print(f"  policies seed {seed}: " + ", ".join(f"{n} {out[n][-1].get('replay_makespan')}" for n in out),
              flush=True)
    return out


KAPPA_CLASSES = (1, 2, 4, 8, 16, 32)  # kappa in [c, next c) schedules as kappa = c for the paper's sizes


def exp_kappa(seeds, T) -> dict:
    return {c: [slim(one(*sb.paper_instance(s), T=T, kappa=c)) for s in seeds] for c in KAPPA_CLASSES}


def kappa_rows(res: dict, k: int) -> list[dict]:
    return res["kappa"][max(c for c in KAPPA_CLASSES if c <= k)]


def exp_servers(seeds, T, ns=range(10, 21)) -> dict:
    out = {name: {n: [] for n in ns} for name in ("SJF-BCO", "SJF-BCO pack", "FF", "LS", "RAND")}
    for seed in seeds:
        jobs, servers20 = sb.paper_instance(seed, 20)
        for n in ns:
            for name in out:
                out[name][n].append(slim(one(jobs, servers20[:n], T=T, seed=seed, **POLICY_CASES[name])))
        print(f"  servers seed {seed} done", flush=True)
    return out


def exp_lambda(seeds, T) -> dict:
    return {lam: [slim(one(*sb.paper_instance(s), T=T, kappa=1, lam=float(lam))) for s in seeds]
            for lam in (1, 2, 4, 8)}


def exp_bisection(scan_seeds, T, n_small=200) -> dict:
    """Literal and monotone bisection vs the best theta over all theta (scan)."""
    def compare(inst, T_):
        scan = sb.search(inst, "sjf-bco", T=T_, bisection="scan")
        if scan.plan is None:
            return None
        m_of = dict(scan.trace)
        feas = [m_of[t] < T_ for t in range(1, T_ + 1)]
        lit = sb.search(inst, "sjf-bco", T=T_, bisection="literal")
        mon = sb.search(inst, "sjf-bco", T=T_, bisection="monotone")
        return {"best": scan.plan.makespan, "best_theta": scan.plan.theta, "literal": lit.plan.makespan,
                "literal_theta": lit.plan.theta, "monotone": mon.plan.makespan, "monotone_theta": mon.plan.theta,
                "trials": [lit.trials, mon.trials, scan.trials],
                "nonmonotone_feasibility": any(a and not b for a, b in zip(feas, feas[1:]))}

    paper = []
    for seed in scan_seeds:
        jobs, servers = sb.paper_instance(seed)
        paper.append(compare(sb.instance(jobs, servers, sb.Model()), T))
        print(f"  scan seed {seed}: {paper[-1]}", flush=True)
    rng = np.random.default_rng(12345)
    small = []
    for _ in range(n_small):
        servers = [int(x) for x in rng.choice([2, 4, 8], size=rng.integers(2, 5))]
        jobs = []
        for _ in range(int(rng.integers(3, 9))):
            G = int(min(rng.choice([1, 1, 2, 3, 4, 8]), sum(servers)))
            t0 = rng.uniform(0.01, 0.05)
            jobs.append(sb.Job(G=G, F=int(rng.integers(200, 1200)), compute=0.9 * t0,
                               m=0.3 * t0 * G / max(2 * (G - 1), 1)))
        r = compare(sb.instance(jobs, servers, sb.Model()), 200)
        if r is not None:
            small.append(r)

    def summary(rows):
        rows = [r for r in rows if r]
        return {"instances": len(rows),
                "literal_missed": sum(r["literal"] > r["best"] for r in rows),
                "literal_max_gap_pct": max((100 * (r["literal"] / r["best"] - 1) for r in rows), default=0.0),
                "monotone_missed": sum(r["monotone"] > r["best"] for r in rows),
                "monotone_max_gap_pct": max((100 * (r["monotone"] / r["best"] - 1) for r in rows), default=0.0),
                "nonmonotone_feasibility": sum(r["nonmonotone_feasibility"] for r in rows)}

    return {"paper": {"rows": paper, "summary": summary(paper)},
            "small": {"rows": small, "summary": summary(small), "T": 200}}


def exp_online(seeds, epoch=60, horizon=1200) -> dict:
    """hostctl's online adaptation (not the paper's): the same 160 jobs arrive uniformly over
    [0, horizon] slots; every `epoch` slots each policy is re-run over the pending queue."""
    out = {name: [] for name in ("SJF-BCO", "SJF-BCO pack", "FF", "LS", "RAND")}
    for seed in seeds:
        jobs, servers = sb.paper_instance(seed)
        arr = np.random.default_rng(1000 + seed).uniform(0, horizon, size=len(jobs))
        for name in out:
            t0 = time.process_time()
            r = sb.run_online(jobs, arr, servers, epoch=epoch, seed=seed, **POLICY_CASES[name])
            out[name].append({"makespan": r["makespan"], "avg_jct": r["avg_jct"], "cpu_s": time.process_time() - t0})
        print(f"  online seed {seed}: " + ", ".join(f"{n} {out[n][-1]['avg_jct']:.1f}" for n in out), flush=True)
    return out


def exp_lemma3(n=1500, seed=99) -> dict:
    """Lemma 3 (makespan <= n_g * theta) with actual = estimated durations (contention and overhead
    off) on random small instances, for SJF-BCO, FF, LS with both bisection modes."""
    model = sb.Model(xi1=1e-6, xi2=0.0, b_i=1.0, f=sb.LinearDegradation(0.0))
    rng = np.random.default_rng(seed)
    runs, viol, worst = 0, 0, {"ratio": 0.0}
    for trial in range(n):
        servers = [int(x) for x in rng.choice([1, 2, 3, 4, 8], size=rng.integers(1, 5))]
        jobs = []
        for _ in range(int(rng.integers(3, 16))):
            G = int(min(rng.choice([1, 2, 3, 4, 5, 8]), sum(servers)))
            d = int(rng.choice([1, 2, 5, 10, 50, 100]) * rng.integers(1, 4))
            jobs.append(sb.Job(G=G, F=d * 50, compute=0.02, m=0.0, rho_hat=float(d)))
        ng = max(j.G for j in jobs)
        for policy in ("sjf-bco", "ff", "ls"):
            for bis in ("literal", "monotone"):
                try:
                    r = sb.run(jobs, servers, policy=policy, T=20000, model=model, bisection=bis, do_replay=False)
                except sb.Infeasible:
                    continue
                runs += 1
                ratio = r["makespan"] / (ng * r["theta"])
                viol += ratio > 1
                if ratio > worst["ratio"]:
                    worst = {"ratio": ratio, "instance": trial, "policy": policy, "bisection": bis,
                             "makespan": r["makespan"], "n_g": ng, "theta": r["theta"]}
    return {"instances": n, "runs": runs, "violations": int(viol), "worst": worst}


def claims(res: dict) -> list[dict]:
    """The paper's qualitative claims (spec 2.4, 2.5(b) test 7), on the means over seeds; `wins`
    counts the seeds where the claim holds seed by seed."""
    pol = res["policies"]
    out = []
    base = ("FF", "LS", "RAND")
    for variant in ("SJF-BCO", "SJF-BCO pack"):
        for key in ("makespan", "replay_makespan", "avg_jct", "replay_avg_jct"):
            s = mean(pol[variant], key)
            others = {n: mean(pol[n], key) for n in base}
            wins = sum(a[key] <= min(pol[n][i][key] for n in base) for i, a in enumerate(pol[variant]))
            out.append({"claim": f"{variant} mean {key} <= min(FF, LS, RAND)", "holds": s <= min(others.values()),
                        "values": {variant: s, **others}, "wins": f"{wins}/{len(pol[variant])}"})
    same = all(a[k] == b[k] for a, b in zip(pol["SJF-BCO"], pol["SJF-BCO full"]) for k in KEYS + ("theta", "kappa"))
    out.append({"claim": "kappa over distinct sizes = kappa over 1..32 (exactness of the speed-up)", "holds": same,
                "values": {"cpu_s distinct": mean(pol["SJF-BCO"], "cpu_s"),
                           "cpu_s full": mean(pol["SJF-BCO full"], "cpu_s")}})
    for key in ("makespan", "replay_makespan"):
        lam = [mean(res["lambda"][k], key) for k in sorted(res["lambda"])]
        out.append({"claim": f"{key} non-increasing in lambda 1,2,4,8 (kappa=1)",
                    "holds": all(a >= b for a, b in zip(lam, lam[1:])), "values": lam})
    srv = res["servers"]
    gains = {}
    for name in ("SJF-BCO", "SJF-BCO pack", "FF", "LS"):
        ns = sorted(srv[name])
        v = [mean(srv[name][n], "makespan") for n in ns]
        ok = all(a is not None and b is not None and a >= b for a, b in zip(v, v[1:]))
        out.append({"claim": f"{name} makespan non-increasing in servers 10..20 (planned, T=1500)", "holds": ok,
                    "values": v})
        if v[0] is not None and v[-1] is not None:
            gains[name] = 1 - v[-1] / v[0]
    out.append({"claim": "FF gains the most from 10 -> 20 servers (planned)",
                "holds": max(gains, key=gains.get) == "FF", "values": gains})
    for variant in ("SJF-BCO", "SJF-BCO pack"):
        adv = {}
        for n in (10, 20):
            s = mean(srv[variant][n], "makespan")
            b = min(mean(srv[x][n], "makespan") or np.inf for x in base)
            adv[n] = 1 - s / b if s else None
        out.append({"claim": f"{variant}'s advantage over the best baseline is larger at 10 servers than at 20",
                    "holds": adv[10] is not None and adv[20] is not None and adv[10] > adv[20], "values": adv})
    for key in ("makespan", "replay_makespan"):
        kap = [mean(res["kappa"][c], key) for c in KAPPA_CLASSES]
        signs = "".join("-" if b < a else "+" for a, b in zip(kap, kap[1:]) if b != a)
        runs = "".join(c for i, c in enumerate(signs) if i == 0 or c != signs[i - 1])
        out.append({"claim": f"kappa sweep: {key} drops, rises, drops again", "holds": runs == "-+-",
                    "values": {"kappa": list(KAPPA_CLASSES), "mean": kap, "changes": signs}})
    return out


def plot(res: dict, path: Path) -> None:
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(2, 2, figsize=(11, 8))
    names = list(res["policies"])
    x = np.arange(len(names))
    for off, key, lab in ((-0.3, "makespan", "makespan planned"), (-0.1, "replay_makespan", "makespan replayed"),
                          (0.1, "avg_jct", "avg JCT planned"), (0.3, "replay_avg_jct", "avg JCT replayed")):
        v = [mean(res["policies"][n], key) or 0 for n in names]
        e = [np.std([r[key] for r in res["policies"][n] if key in r]) for n in names]
        ax[0, 0].bar(x + off, v, 0.2, yerr=e, label=lab, capsize=2)
    ax[0, 0].set_xticks(x, names, rotation=20, fontsize=8)
    ax[0, 0].set_ylabel("slots")
    ax[0, 0].set_title(f"policies, 20 servers, T=1200 ({len(res['seeds'])} seeds, mean +- sd)")
    ax[0, 0].set_ylim(0, 1.35 * max(mean(res["policies"][n], "makespan") or 0 for n in names))
    ax[0, 0].legend(fontsize=7, ncol=2, loc="upper right")
    ks = list(range(1, 33))
    for key, lab in (("makespan", "planned"), ("replay_makespan", "replayed")):
        ax[0, 1].plot(ks, [mean(kappa_rows(res, k), key) for k in ks], marker=".", label=lab)
    ax[0, 1].set_xlabel("kappa")
    ax[0, 1].set_ylabel("mean makespan (slots)")
    ax[0, 1].set_title("SJF-BCO vs kappa (lambda=1, T=1200)")
    ax[0, 1].legend(fontsize=7)
    for name, rows in res["servers"].items():
        ns = sorted(rows)
        ax[1, 0].plot(ns, [mean(rows[n], "makespan") for n in ns], marker="o", label=name)
    ax[1, 0].set_xlabel("servers")
    ax[1, 0].set_ylabel("mean planned makespan (slots)")
    ax[1, 0].set_title("makespan vs servers (T=1500)")
    ax[1, 0].legend(fontsize=7)
    lams = sorted(res["lambda"])
    for key, lab in (("makespan", "planned"), ("replay_makespan", "replayed")):
        ax[1, 1].plot(lams, [mean(res["lambda"][k], key) for k in lams], marker="o", label=lab)
    ax[1, 1].set_xscale("log", base=2)
    ax[1, 1].set_xlabel("lambda")
    ax[1, 1].set_ylabel("mean makespan (slots)")
    ax[1, 1].set_title("SJF-BCO vs lambda (kappa=1, T=1200)")
    ax[1, 1].legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=80)
    print(f"wrote {path}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--seeds", type=int, default=20)
    ap.add_argument("--scan-seeds", type=int, default=2, help="paper-config seeds brute-forced over every theta")
    ap.add_argument("--out", default="docs/results/sim/sjfbco")
    ap.add_argument("--quick", action="store_true", help="3 seeds, no scan (a smoke run)")
    ap.add_argument("--plot-only", metavar="FILE.json")
    ap.add_argument("--online", action="store_true",
                    help="only hostctl's online adaptation (arrivals over 1200 slots, epoch 60): online.json")
    ap.add_argument("--lemma3", action="store_true",
                    help="only the Lemma 3 stress check (1500 random instances x 6 variants): lemma3.json")
    a = ap.parse_args()
    out = Path(a.out)
    if a.lemma3:
        write_results(out / "lemma3.json", "sim_sjfbco_lemma3", exp_lemma3(),
                      machine={"processor": platform.processor()})
        return
    if a.online:
        seeds = list(range(3 if a.quick else a.seeds))
        res = {"seeds": seeds, "epoch": 60, "arrivals": "uniform over [0, 1200] slots",
               "online": exp_online(seeds)}
        res["summary"] = {n: {k: mean(rows, k) for k in ("makespan", "avg_jct", "cpu_s")}
                          for n, rows in res["online"].items()}
        write_results(out / "online.json", "sim_sjfbco_online", res, machine={"processor": platform.processor()})
        return
    if a.plot_only:
        res = json.loads(Path(a.plot_only).read_text())
        res["kappa"] = {int(k): v for k, v in res["kappa"].items()}
        res["lambda"] = {int(k): v for k, v in res["lambda"].items()}
        res["servers"] = {n: {int(k): v for k, v in r.items()} for n, r in res["servers"].items()}
        plot(res, out / "sjfbco.png")
        return
    seeds = list(range(3 if a.quick else a.seeds))
    t0 = time.time()
    res: dict = {"seeds": seeds, "config": {"servers": 20, "capacities": [4, 8, 16, 32], "mix": sb.PAPER_MIX,
                                            "F": [1000, 6000], "T": 1200, "T_servers": 1500,
                                            "model": repr(sb.Model())}}
    print("policies", flush=True)
    res["policies"] = exp_policies(seeds, 1200)
    print("kappa", flush=True)
    res["kappa"] = exp_kappa(seeds, 1200)
    print("lambda", flush=True)
    res["lambda"] = exp_lambda(seeds, 1200)
    print("servers", flush=True)
    res["servers"] = exp_servers(seeds, 1500)
    print("bisection", flush=True)
    res["bisection"] = exp_bisection([] if a.quick else list(range(a.scan_seeds)), 1200,
                                     n_small=20 if a.quick else 200)
    res["claims"] = claims(res)
    res["summary"] = {n: {k: mean(rows, k) for k in KEYS + ("cpu_s", "extra_share", "servers_per_job")}
                      for n, rows in res["policies"].items()}
    res["wall_s"] = time.time() - t0
    for c in res["claims"]:
        print(f"  {'HOLDS' if c['holds'] else 'FAILS'}: {c['claim']}")
    write_results(out / "sjfbco.json", "sim_sjfbco", res, machine={"processor": platform.processor()})
    plot(res, out / "sjfbco.png")


if __name__ == "__main__":
    main()
