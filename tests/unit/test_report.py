"""hostctl_lab.bench.report on synthetic results dicts whose answers are computed by hand."""

from __future__ import annotations

import copy
import math

import pytest
from rich.console import Console

from hostctl_lab.bench import report

PNG = b"\x89PNG\r\n\x1a\n"

# avg JCT per (policy, repeat) from jobs a, b:
#   fifo: (10, 20) -> 15, (12, 18) -> 15, (11, 21) -> 16
#   one:  (6, 12) -> 9,   (9, 12) -> 10.5, (8, 16) -> 12
#   rr:   (15, 15) -> 15, repeat 1 failed,  (16, 16) -> 16
JCTS = {
    "fifo": [(10, 20), (12, 18), (11, 21)],
    "one": [(6, 12), (9, 12), (8, 16)],
    "rr": [(15, 15), (1000, 1000), (16, 16)],
}
BARRIER_STD = {"fifo": [0.010, 0.020], "one": [0.005, 0.010], "rr": [0.010, 0.010]}
CROSS = {"fifo": (100e6, 20e6), "one": (80e6, 10e6), "rr": (50e6, 10e6)}
UTIL = {"fifo": [(0.9, 0.5)] * 3, "one": [(0.8, 0.1), (0.2, 0.6), (0.7, 0.3)], "rr": [(0.5, 0.5)] * 3}
CPU = {"fifo": [(10, 50), (20, 70), (30, 60)], "one": [(5, 10)] * 3, "rr": [(5, 10)] * 3}


def job(jct, stds):
    return {"jct_s": jct, "iteration_s": [jct / 2, jct / 2], "barrier_wait_s": [0.001, 0.002, 0.004, 0.003],
            "barrier_wait_std_s": list(stds), "barrier_wait_mean_s": [0.002, 0.003], "errors": []}


def make_results(policies=("fifo", "one", "rr"), repeat=3, cross=True):
    runs = []
    for r in range(repeat):
        for p in policies:
            a, b = JCTS[p][r]
            run = {"repeat": r, "policy": p, "ok": not (p == "rr" and r == 1),
                   "error": "worker died" if (p == "rr" and r == 1) else None, "duration_s": 30.0,
                   "jobs": {"a": job(a, BARRIER_STD[p]), "b": job(b, BARRIER_STD[p])},
                   "links": {"h0:up": {"bytes": 1, "rate_bps": 8, "seconds": 1.0, "utilisation": UTIL[p][r][0]},
                             "h1:down": {"bytes": 1, "rate_bps": 8, "seconds": 1.0, "utilisation": UTIL[p][r][1]}},
                   "cpu": {"mean_pct": CPU[p][r][0], "max_pct": CPU[p][r][1]}}
            if cross:
                run["cross"] = {"backup": {"bytes": 1, "seconds": 1.0, "throughput_bps": CROSS[p][0]},
                                "b2": {"bytes": 1, "seconds": 1.0, "throughput_bps": CROSS[p][1]}}
            runs.append(run)
    return {"scenario": {"name": "synthetic"}, "policies": list(policies), "repeat": repeat,
            "lower_bound": {"avg_jct_s": 10.0, "bottleneck": "h0:up"}, "runs": runs}


def by_hand_ci(xs):
    n = len(xs)
    m = sum(xs) / n
    sd = math.sqrt(sum((x - m) ** 2 for x in xs) / (n - 1))
    half = {2: 4.3027, 1: 12.7062}[n - 1] * sd / math.sqrt(n)
    return [m - half, m + half]


def test_summary_by_hand():
    s = report.summarize(make_results())
    assert list(s) == ["fifo", "one", "rr"]
    fifo, one, rr = s["fifo"], s["one"], s["rr"]

    assert fifo["avg_jct_s"] == pytest.approx(46 / 3)
    assert one["avg_jct_s"] == pytest.approx(10.5)
    assert rr["avg_jct_s"] == pytest.approx(15.5)  # the failed repeat (1000 s) is left out
    # pooled JCTs sorted [10, 11, 12, 18, 20, 21]: position 0.95 x 5 = 4.75 -> 20 + 0.75 x 1
    assert fifo["p95_jct_s"] == pytest.approx(20.75)
    assert one["p95_jct_s"] == pytest.approx(15.0)  # [6, 8, 9, 12, 12, 16] -> 12 + 0.75 x 4

    ratios = [9 / 15, 10.5 / 15, 12 / 16]
    assert one["ratio_vs_fifo"] == pytest.approx(sum(ratios) / 3)
    assert one["ratio_ci95"] == pytest.approx(by_hand_ci(ratios))
    assert one["ratio_ci95"] == pytest.approx([0.49360, 0.87307], abs=1e-4)
    assert one["pairs"] == 3
    assert rr["ratio_vs_fifo"] == pytest.approx(1.0)  # 15/15 and 16/16: paired by repeat
    assert rr["ratio_ci95"] == pytest.approx([1.0, 1.0]) and rr["pairs"] == 2
    assert fifo["ratio_vs_fifo"] == pytest.approx(1.0)

    assert fifo["barrier_std_mean_s"] == pytest.approx(0.015)
    assert one["barrier_std_mean_s"] == pytest.approx(0.0075)
    assert one["barrier_std_ratio_vs_fifo"] == pytest.approx(0.5)

    assert fifo["cross_throughput_bps"] == pytest.approx(120e6)
    assert one["cross_throughput_bps"] == pytest.approx(90e6)
    assert one["cross_ratio_vs_fifo"] == pytest.approx(0.75)

    assert fifo["bottleneck_utilisation"] == pytest.approx(0.9)
    assert one["bottleneck_utilisation"] == pytest.approx((0.8 + 0.6 + 0.7) / 3)
    assert fifo["busiest_link"] == "h0:up"
    assert fifo["cpu_mean_pct"] == pytest.approx(20) and fifo["cpu_max_pct"] == pytest.approx(70)

    assert (fifo["runs"], fifo["failed"]) == (3, 0)
    assert (rr["runs"], rr["failed"]) == (2, 1)
    assert fifo["gap_to_bound"] == pytest.approx(46 / 30)
    assert one["gap_to_bound"] == pytest.approx(1.05)


def test_queue_drops_by_hand():
    res = make_results()
    drops = {"fifo": [(300, 0), (100, 500), (200, 100)], "one": [(0, 0)] * 3}
    for run in res["runs"]:
        if run["policy"] in drops:
            up, down = drops[run["policy"]][run["repeat"]]
            run["links"]["h0:up"]["drops"], run["links"]["h1:down"]["drops"] = up, down
        else:  # rr: one link's count went back (None), the other's missing: recorded runs only
            run["links"]["h0:up"]["drops"] = None
    s = report.summarize(res)
    assert s["fifo"]["queue_drops"] == pytest.approx((300 + 600 + 300) / 3)
    assert s["fifo"]["most_drops_link"] == "h0:up"  # most in runs 0 and 2, h1:down in run 1
    assert s["one"]["queue_drops"] == 0 and s["one"]["most_drops_link"] is None  # no drops: no link named
    assert s["rr"]["queue_drops"] is None and s["rr"]["most_drops_link"] is None
    text = render(res, s)
    assert "400 (h0:up)" in text


def test_cpu_warning_names_the_policies_above_70_percent():
    res = make_results()
    for run in res["runs"]:
        if run["policy"] == "one":
            run["cpu"]["mean_pct"] = 71 + run["repeat"]  # 71, 72, 73: mean 72
    s = report.summarize(res)
    (line,) = report.cpu_warnings(s)  # fifo (20%) and rr (5%) stay quiet
    assert line.startswith("one: the machine's CPU averaged 72% (> 70%)")
    assert "warning: one: the machine's CPU averaged 72%" in render(res, s)


def test_one_repeat_gives_no_interval():
    s = report.summarize(make_results(repeat=1))
    assert s["one"]["ratio_vs_fifo"] == pytest.approx(0.6)
    assert s["one"]["ratio_ci95"] is None and s["one"]["pairs"] == 1
    assert s["one"]["p95_jct_s"] == pytest.approx(6 + 0.95 * 6)


def test_missing_fifo_gives_no_ratios():
    s = report.summarize(make_results(policies=("one", "rr")))
    assert list(s) == ["one", "rr"]
    for p in s.values():
        assert p["ratio_vs_fifo"] is None and p["ratio_ci95"] is None and p["pairs"] == 0
        assert p["barrier_std_ratio_vs_fifo"] is None and p["cross_ratio_vs_fifo"] is None
    assert s["one"]["avg_jct_s"] == pytest.approx(10.5)


def test_failed_fifo_repeat_is_not_paired():
    res = make_results()
    res["runs"][3]["ok"] = False  # fifo, repeat 1
    s = report.summarize(res)
    assert s["fifo"]["failed"] == 1 and s["fifo"]["avg_jct_s"] == pytest.approx(15.5)
    assert s["one"]["ratio_vs_fifo"] == pytest.approx((9 / 15 + 12 / 16) / 2)
    assert s["one"]["ratio_ci95"] == pytest.approx(by_hand_ci([9 / 15, 12 / 16]))


def test_no_cross_no_bound_no_links_no_cpu():
    res = make_results(cross=False)
    del res["lower_bound"]
    for run in res["runs"]:
        del run["links"], run["cpu"]
    s = report.summarize(res)
    for p in s.values():
        assert p["cross_throughput_bps"] is None and p["cross_ratio_vs_fifo"] is None
        assert p["gap_to_bound"] is None and p["bottleneck_utilisation"] is None
        assert p["cpu_mean_pct"] is None and p["cpu_max_pct"] is None
    text = render(res, s)
    assert "not computed" in text and "fifo" in text


def test_utilisation_derived_when_missing_and_all_failed_policy():
    res = make_results(repeat=1)
    for run in res["runs"]:
        run["links"] = {"h0:up": {"bytes": 250, "rate_bps": 1000, "seconds": 4.0}}  # 2000 bits / 4000
        if run["policy"] == "rr":
            run["ok"] = False
    s = report.summarize(res)
    assert s["fifo"]["bottleneck_utilisation"] == pytest.approx(0.5)
    assert s["rr"]["runs"] == 0 and s["rr"]["failed"] == 1 and s["rr"]["avg_jct_s"] is None
    assert "rr (1 failed)" in render(res, s)


def test_t_quantiles():
    assert report.t975(1) == pytest.approx(12.706, abs=1e-3)
    assert report.t975(10) == pytest.approx(2.228, abs=1e-3)
    assert report.t975(30) == pytest.approx(2.042, abs=1e-3)
    assert report.t975(31) == 1.96
    assert report.mean_ci95([1.0]) is None


def render(res, s) -> str:
    console = Console(record=True, width=220)
    report.print_table(res, s, console)
    return console.export_text()


def test_table_text():
    res = make_results()
    s = report.summarize(res)
    text = render(res, s)
    for p in ("fifo", "one", "rr"):
        assert p in text
    assert "synthetic" in text and "baseline" in text
    lo, hi = by_hand_ci([9 / 15, 10.5 / 15, 12 / 16])
    assert f"\u221231.7% [\u2212{(1 - lo) * 100:.1f}, \u2212{(1 - hi) * 100:.1f}]" in text
    assert "lower bound on avg JCT: 10.00 s, bottleneck h0:up" in text
    assert "1.05\u00d7" in text  # one: 10.5 / 10
    assert "90.0 (75%)" in text  # cross Mbit/s of one and its share of fifo's
    assert "7.5 (50%)" in text  # barrier-wait std ms of one
    assert "20/70%" in text  # fifo CPU mean/max
    assert "rr (1 failed)" in text


def check_png(path):
    with open(path, "rb") as f:
        data = f.read()
    assert data[:8] == PNG and len(data) > 1024


def test_plots_written(tmp_path):
    paths = report.plot(make_results(), str(tmp_path / "sub" / "synthetic"))
    assert paths == [str(tmp_path / "sub" / "synthetic_jct.png"), str(tmp_path / "sub" / "synthetic_barrier_cdf.png")]
    for p in paths:
        check_png(p)


def test_plots_robust_to_missing_data(tmp_path):
    res = make_results(policies=("one",), repeat=1, cross=False)
    for run in res["runs"]:
        for j in run["jobs"].values():
            j["barrier_wait_s"] = []
            j["barrier_wait_std_s"] = []
    for p in report.plot(res, str(tmp_path / "one")):
        check_png(p)
    empty = copy.deepcopy(res)
    for run in empty["runs"]:
        run["ok"] = False
    for p in report.plot(empty, str(tmp_path / "none")):
        check_png(p)
    assert report.summarize({"runs": []}) == {}


def test_active_window_utilisation():
    """The busiest link while every job ran (run["active"]), and its ratio to fifo's; runs whose
    first job ended before the window opened (active None) are left out, not counted as 0."""
    res = make_results(repeat=2)
    act = {"fifo": [0.6, 0.8], "one": [0.9, None], "rr": [0.5, 0.1]}
    for run in res["runs"]:
        u = act[run["policy"]][run["repeat"]]
        run["active"] = None if u is None else {"start_s": 1.0, "end_s": 5.0, "links": {
            "h0:up": {"bytes": 1, "rate_bps": 8, "seconds": 4.0, "utilisation": u},
            "h1:down": {"bytes": 1, "rate_bps": 8, "seconds": 4.0, "utilisation": u / 2}}}
    s = report.summarize(res)
    assert s["fifo"]["active_utilisation"] == pytest.approx(0.7)
    assert s["one"]["active_utilisation"] == pytest.approx(0.9)
    assert s["one"]["active_utilisation_ratio_vs_fifo"] == pytest.approx(0.9 / 0.7)
    assert s["rr"]["active_utilisation"] == pytest.approx(0.5)  # repeat 1 (0.1) failed: left out
    text = render(res, s)
    assert "| 70%" in text and "| 90% (129%)" in text


def test_active_window_missing_in_old_results():
    s = report.summarize(make_results(repeat=1))
    assert all(p["active_utilisation"] is None and p["active_utilisation_ratio_vs_fifo"] is None
               for p in s.values())


def test_compare_any_two_policies_by_hand():
    # one vs rr, paired by repeat; rr's repeat 1 failed: 9/15 and 12/16
    c = report.compare(make_results(), "one", "rr")
    assert c["pairs"] == 2 and c["ratios"] == pytest.approx([9 / 15, 12 / 16])
    assert c["ratio"] == pytest.approx((9 / 15 + 12 / 16) / 2)
    assert c["ratio_ci95"] == pytest.approx(by_hand_ci([9 / 15, 12 / 16]))
    # against fifo it is the summary's ratio
    s = report.summarize(make_results())
    assert report.compare(make_results(), "one", "fifo")["ratio"] == pytest.approx(s["one"]["ratio_vs_fifo"])
    with pytest.raises(ValueError, match="policy 'best' is not in these results"):
        report.compare(make_results(), "best", "fifo")


def test_bench_compare_cli(tmp_path):
    import json
    import subprocess

    from tests.conftest import HOSTCTL

    p = tmp_path / "r.json"
    p.write_text(json.dumps(make_results()))
    r = subprocess.run([HOSTCTL, "bench-compare", str(p), "one", "rr"], capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    assert "one vs rr: average JCT ratio 0.675" in r.stdout and "over 2 paired repeats" in r.stdout
    for args, msg in (([str(p), "one", "best"], "policy 'best' is not in these results"),
                      ([str(tmp_path / "none.json"), "a", "b"], "cannot read"),
                      ([str(tmp_path)], "Missing argument")):
        r = subprocess.run([HOSTCTL, "bench-compare", *args], capture_output=True, text=True, timeout=60)
        assert r.returncode != 0 and msg in r.stderr and "Traceback" not in r.stderr
    (tmp_path / "list.json").write_text("[1, 2]")
    r = subprocess.run([HOSTCTL, "bench-compare", str(tmp_path / "list.json"), "a", "b"], capture_output=True,
                       text=True, timeout=60)
    assert r.returncode == 2 and "not a results JSON" in r.stderr


def test_booked_column_from_the_runs_switch_booking():
    """booked = the largest worst slot_peak_ratio over a policy's ok runs; a dash without a switch."""
    res = make_results()
    for run in res["runs"]:
        if run["policy"] == "one":
            w = {"link": f"tor{run['repeat']}>agg", "peak_ratio": 1.2 + run["repeat"] / 10,
                 "slot_peak_ratio": [1.004, 1.031, 0.9][run["repeat"]], "over_slots": run["repeat"], "slots": 50}
            run["booking"] = {"tolerance": 0.01, "links": {w["link"]: w}, "worst": w}
    res["runs"][2]["booking"] = {"error": "switch booking not read: no status"}  # rr, repeat 0: not counted
    s = report.summarize(res)
    one = s["one"]
    assert (one["booked_slot_peak_ratio"], one["booked_link"]) == (1.031, "tor1>agg")
    assert one["booked_peak_ratio"] == pytest.approx(1.4)
    assert (one["overbooked_slots"], one["booked_slots"]) == (3, 150)
    assert s["fifo"]["booked_slot_peak_ratio"] is None and s["rr"]["booked_slot_peak_ratio"] is None
    text = render(res, s)
    assert "booked" in text and "1.031\u00d7" in text and "worst slot's final booking / capacity" in text
