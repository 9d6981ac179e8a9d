"""benchmarks/replay_daemon.py compares two trees by the hash of every table the daemon wrote: that
only means something if a run is deterministic and its decisions vary."""

import importlib.util
from pathlib import Path

# a script in benchmarks/, not a package: loaded from its file
_spec = importlib.util.spec_from_file_location(
    "replay_daemon", Path(__file__).resolve().parents[2] / "benchmarks" / "replay_daemon.py")
replay_daemon = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(replay_daemon)


def test_a_replay_is_deterministic_and_its_rates_vary():
    a = replay_daemon.run("mlcc", 0, 40, **replay_daemon.CASES["mlcc-switch-fixed"])
    b = replay_daemon.run("mlcc", 0, 40, **replay_daemon.CASES["mlcc-switch-fixed"])
    assert a == b
    rates = {v for kind, *tables in a if kind == "pace" for v in tables[0].values()}
    assert len(rates) > 10


def test_rr_rotates_in_the_replay():
    log = replay_daemon.run("rr", 0, 40)
    assert sum(1 for kind, *_ in log if kind == "classifier") > 1
