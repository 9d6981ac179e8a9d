"""`hostctl sim` as a user runs it: a real sweep writes its table, sim.json and plot; bad input is one line."""

from __future__ import annotations

import json

import pytest

from tests.integration.test_cli_errors import assert_one_line_error, run, show


def test_a_sweep_writes_sim_json_and_the_cdf(tmp_path):
    out = tmp_path / "simout"
    r = run(["sim", "--topology", "single-switch", "--servers", "8", "--jobs", "12", "--max-iterations", "30",
             "--time-scale", "0.0001", "--network", "fifo,one", "--steady", "10",
             "--placement", "ff,ls", "--workers", "2", "--out", str(out)], tmp_path)
    assert r.returncode == 0, show(r)
    assert "Traceback" not in r.stdout + r.stderr
    doc = json.loads((out / "sim.json").read_text())
    assert len(doc["runs"]) == 2 * 2
    for run_ in doc["runs"]:
        for k in ("placement", "order", "network", "seed", "jobs", "avg_jct_s", "p95_jct_s", "makespan_s",
                  "wall_s", "events"):
            assert k in run_
        assert run_["finished"] == run_["jobs"] == 12
    assert {(x["placement"], x["network"]) for x in doc["summary"]} == {("ff", "fifo"), ("ff", "one"),
                                                                        ("ls", "fifo"), ("ls", "one")}
    assert (out / "jct_cdf.png").stat().st_size > 1000
    assert "hostctl sim" in r.stdout and "results:" in r.stdout


def test_the_iter_model_reaches_every_run(tmp_path):
    # the same sweep serial and under paper 003's pace model: every job ends, the spec says which model
    # ran, and overlapping the exchange with the backward pass makes no job slower on average
    avg = {}
    for m in ("serial", "pace"):
        out = tmp_path / m
        r = run(["sim", "--topology", "single-switch", "--servers", "4", "--synthetic", "8", "--network", "fifo,one",
                 "--iter-model", m, "--no-plots", "--out", str(out)], tmp_path)
        assert r.returncode == 0, show(r)
        doc = json.loads((out / "sim.json").read_text())
        assert doc["spec"]["iter_model"] == m
        assert all(x["finished"] == x["jobs"] == 8 for x in doc["runs"])
        avg[m] = {x["network"]: x["avg_jct_s"] for x in doc["runs"]}
    for net in ("fifo", "one"):
        assert avg["pace"][net] < avg["serial"][net]


def test_the_steady_quorum_reaches_the_runs(tmp_path):
    out = tmp_path / "q"
    r = run(["sim", "--topology", "single-switch", "--servers", "4", "--synthetic", "8", "--steady", "20",
             "--steady-quorum", "0.75", "--no-plots", "--out", str(out)], tmp_path)
    assert r.returncode == 0, show(r)
    doc = json.loads((out / "sim.json").read_text())
    assert doc["spec"]["steady_quorum"] == 0.75
    assert all(x["finished"] == x["jobs"] == 8 for x in doc["runs"])


def test_a_sweep_file_sets_the_flags_and_a_flag_given_wins(tmp_path):
    conf = tmp_path / "sweep.toml"
    conf.write_text('topology = "single-switch"\nservers = 4\njobs = 3\nmax-iterations = 5\n'
                    'time_scale = 0.0001\nnetwork = ["fifo", "one"]\nplots = false\n')
    out = tmp_path / "o"
    r = run(["sim", "--config", str(conf), "--jobs", "2", "--out", str(out)], tmp_path)
    assert r.returncode == 0, show(r)
    spec = json.loads((out / "sim.json").read_text())["spec"]
    assert (spec["topology"], spec["servers"], spec["jobs"], spec["max_iterations"], spec["time_scale"],
            spec["networks"]) == ("single-switch", 4, 2, 5, 0.0001, ["fifo", "one"])
    assert not (out / "jct_cdf.png").exists()  # plots = false, from the file


@pytest.mark.parametrize("text, fragment", [
    ("bogus = 1\n", "unknown key 'bogus'; the keys are the flags of hostctl sim"),
    ('servers = "four"\n', "servers must be a whole number, got \"four\""),
    ("plots = 3\n", "plots must be true or false, got 3"),
    ("network = [1, 2]\n", "network must be a string (a list of names or a comma string)"),
    ("servers = [\n", "is not valid TOML"),
    (None, "cannot read the sweep file"),
])
def test_a_bad_sweep_file_is_one_line(tmp_path, text, fragment):
    conf = tmp_path / "sweep.toml"
    if text is not None:
        conf.write_text(text)
    r = run(["sim", "--config", str(conf), "--out", str(tmp_path / "o")], tmp_path)
    assert_one_line_error(r, fragment, exit_code=2)


def test_steady_where_it_has_no_effect_is_one_note(tmp_path):
    # mcs runs exact (its stages are state a park does not save); fifo and mlcc park: named once, no error
    r = run(["sim", "--topology", "single-switch", "--servers", "4", "--jobs", "3", "--max-iterations", "5",
             "--time-scale", "0.0001", "--network", "fifo,mcs,mlcc", "--steady", "10", "--no-plots",
             "--out", str(tmp_path / "o")], tmp_path)
    assert r.returncode == 0, show(r)
    notes = [ln for ln in r.stderr.splitlines() if "--steady has no effect" in ln]
    assert len(notes) == 1 and "under mcs (" in notes[0], show(r)
    quiet = run(["sim", "--topology", "single-switch", "--servers", "4", "--jobs", "3", "--max-iterations", "5",
                 "--time-scale", "0.0001", "--network", "fifo,mlcc", "--steady", "10", "--no-plots",
                 "--out", str(tmp_path / "q")], tmp_path)
    assert quiet.returncode == 0 and "--steady has no effect" not in quiet.stderr, show(quiet)


@pytest.mark.parametrize("args, fragment", [
    (["--network", "tcp"], "unknown network 'tcp'"),
    (["--placement", "ff,best"], "unknown placement 'best'"),
    (["--topology", "fat-tree"], "unknown topology 'fat-tree'"),
    (["--topology", "lingjun", "--servers", "100"], "has 847 hosts"),
    (["--trace", "/nonexistent/jobs.csv"], "cannot read the trace"),
    (["--network", "cap"], "needs a cap"),
    (["--repeat", "0"], "at least 1"),
    (["--steady", "-5"], "--steady must be a whole number"),
    (["--steady", "50", "--steady-quorum", "1.5"], "--steady-quorum must be a share in (0, 1]"),
    (["--steady-quorum", "0.75"], "--steady-quorum is a rule of --steady's measuring"),
    (["--iter-model", "overlap"], "unknown --iter-model 'overlap'"),
    (["--iter-model", "pace", "--network", "fifo,mlcc"], "--iter-model pace works with the networks"),
])
def test_bad_input_is_one_line(tmp_path, args, fragment):
    r = run(["sim", "--jobs", "5", "--out", str(tmp_path / "o"), *args], tmp_path)
    assert_one_line_error(r, fragment, exit_code=2)


def test_workers_end_with_a_killed_sweep(tmp_path):
    """SIGKILL of `hostctl sim --workers 2` (a CI limit, the OOM killer) leaves no worker running."""
    import os
    import signal
    import subprocess
    import time

    import psutil

    from tests.integration.test_cli_errors import HOSTCTL

    kids: list = []
    p = subprocess.Popen([HOSTCTL, "sim", "--topology", "single-switch", "--servers", "4", "--synthetic", "40",
                          "--repeat", "4", "--workers", "2", "--out", str(tmp_path / "o")],
                         stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline and len(kids) < 2:
            time.sleep(0.2)
            kids = psutil.Process(p.pid).children(recursive=True)
        assert len(kids) >= 2, "the sweep started no workers"
        os.kill(p.pid, signal.SIGKILL)
        p.wait(10)
        gone, alive = psutil.wait_procs(kids, timeout=15)
        assert not alive, f"workers left running: {[k.pid for k in alive]}"
    finally:
        if p.poll() is None:
            p.kill()
        for k in kids:  # the workers we saw (orphans are no longer our children)
            try:
                k.kill()
            except psutil.NoSuchProcess:
                pass
