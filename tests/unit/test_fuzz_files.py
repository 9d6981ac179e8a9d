"""Hostile files: 10,000 config files and 10,000 scenario files each, made from valid seeds by
changing values to values of other types and ranges, dropping and adding keys and tables, and
flipping, cutting and inserting bytes of the text. Every one must end in a result or in one
ConfigError line (what hostctl prints as `hostctl: error: ...`), never in another exception.

Seeded (random.Random(seed)): a failure names its case, and the case is written to the test's
tmp folder for replay. The generator is structure-aware on purpose: random bytes alone stop at
the TOML parser."""

from __future__ import annotations

import glob
import math
import os
import random
import tomllib
import zlib

import pytest

from hostctl.config import build_config
from hostctl.errors import HostctlError

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
CASES = 10_000
pytestmark = pytest.mark.slow  # (about 25 s each)

CONFIG_SEEDS = [
    {"policy": "rr", "iface": "eth0", "link_rate": "10gbit", "bands": 6, "rr_interval": 20, "rescan": 1,
     "ports": "9000-9005", "cap": "2gbit", "metrics_port": 9101, "log_level": "INFO"},
    {"policy": "mlcc", "link_rate": 9_700_000_000, "switch": ["tcp://10.0.0.254:5555"], "horizon": 10, "slot": 0.06,
     "job_order": "fixed", "deps": True, "plan_offset": 0.007,
     "jobs": [{"name": "bert", "ports": "29500", "model_size": "1.3GB", "comm": "ring", "ring_size": 8},
              {"name": "resnet", "pids": [1234, 5678], "model_size": 98_000_000, "comm": "ps"}]},
    {"policy": "one", "other_rate": "10%", "ingress_rate": "9gbit", "containers": True, "container_addr": "pod",
     "jobs": [{"name": "a", "match": "python.*train", "cap": "1gbit"}], "lease": 1.0, "phase_gap": 0.002},
    {"policy": "cap", "cap": "500mbit", "cgroup": "/sys/fs/cgroup/unified", "metrics_addr": "0.0.0.0",
     "match": "torchrun", "pids": "100,200"},
]

# values of every type and awkward range a field can meet
ODD_VALUES = [0, -1, 1, 2**31, 2**63 - 1, -(2**63), 1.5, -0.0, 1e308, math.inf, -math.inf, math.nan, True, False,
              "", " ", "0", "-5", "1e9", "10gbit", "10 gbit", "-1gbit", "0bit", "9" * 40 + "gbit", "abc", "%",
              "150%", "0%", "nan", "inf", "1..2", "9000-8000", "0-65535", "65536", "tcp://", "ipc://x",
              "tcp://a:99999", "\x00", "é" * 300, "(" , "[a-", "*", "a" * 10_000, [], [1, "a"], [[1]],
              ["tcp://h:1", 5], {}, {"x": 1}, [{"name": 1}]]


def toml_dumps(d: dict) -> str:
    """The TOML text of ``d`` (scalars, arrays, tables and arrays of tables: what the mutator makes)."""
    def val(v) -> str:
        if isinstance(v, bool):
            return "true" if v else "false"
        if isinstance(v, float):
            return "nan" if math.isnan(v) else ("inf" if v == math.inf else "-inf" if v == -math.inf else repr(v))
        if isinstance(v, int):
            return str(v)
        if isinstance(v, str):
            return '"' + "".join(c if c.isprintable() and c not in '"\\' else f"\\u{ord(c):04x}" for c in v) + '"'
        if isinstance(v, list):
            return "[" + ", ".join(val(x) for x in v) + "]"
        if isinstance(v, dict):
            return "{" + ", ".join(f"{key(k)} = {val(x)}" for k, x in v.items()) + "}"
        raise TypeError(type(v))

    def key(k: str) -> str:
        return k if k.replace("_", "").replace("-", "").isalnum() and k.isascii() else val(k)

    lines, tables = [], []
    for k, v in d.items():
        if isinstance(v, list) and v and all(isinstance(x, dict) for x in v):
            tables.append((k, v))
        else:
            lines.append(f"{key(k)} = {val(v)}")
    for k, rows in tables:
        for row in rows:
            lines.append(f"\n[[{key(k)}]]")
            lines += [f"{key(a)} = {val(b)}" for a, b in row.items()]
    return "\n".join(lines) + "\n"


def mutate(rng: random.Random, v, depth: int = 0):
    """A copy of ``v`` with some of its values replaced, dropped or added (recursively)."""
    if isinstance(v, dict):
        out = {}
        for k, x in v.items():
            r = rng.random()
            if r < 0.08:
                continue  # dropped
            out[k] = rng.choice(ODD_VALUES) if r < 0.3 else mutate(rng, x, depth + 1)
        if rng.random() < 0.1:
            out[rng.choice(["bogus", "Policy", "jobs", "ports", "name", ""]) + rng.choice(["", "_x"])] = \
                rng.choice(ODD_VALUES)
        return out
    if isinstance(v, list):
        out = [mutate(rng, x, depth + 1) for x in v if rng.random() > 0.1]
        if out and rng.random() < 0.2:
            out.append(rng.choice(out))  # a duplicate (a job twice, a port twice)
        return out
    return rng.choice(ODD_VALUES) if rng.random() < 0.15 else v


def flip_bytes(rng: random.Random, text: str) -> bytes:
    b = bytearray(text.encode())
    for _ in range(rng.randint(1, 6)):
        op, i = rng.random(), rng.randrange(len(b) + 1)
        if op < 0.4 and b:
            b[min(i, len(b) - 1)] = rng.randrange(256)
        elif op < 0.6:
            del b[i:i + rng.randint(1, 40)]
        elif op < 0.8:
            b[i:i] = bytes(rng.choice([b"[", b"]", b"=", b'"', b"\n", b"[[jobs]]\n", b"\x00", b"\xff", b"{", b"#"]))
        else:
            b = b[:i]  # cut
    return bytes(b)


def cases(seed: int, seeds: list[str], n: int):
    """``n`` file contents (bytes): a third byte-mutated seeds, the rest mutated structures."""
    rng = random.Random(seed)
    parsed = [tomllib.loads(s) for s in seeds]
    for i in range(n):
        k = rng.randrange(len(seeds))
        if i % 3 == 0:
            yield flip_bytes(rng, seeds[k])
        else:
            yield toml_dumps(mutate(rng, parsed[k])).encode()


def run_cases(tmp_path, name: str, seeds: list[str], load) -> dict[str, int]:
    """Every case through ``load(path)``; returns how the cases ended (by outcome)."""
    path = tmp_path / f"{name}.toml"
    ends = {"ok": 0, "ConfigError": 0}
    for i, data in enumerate(cases(zlib.crc32(name.encode()), seeds, CASES)):
        path.write_bytes(data)
        try:
            load(str(path))
            ends["ok"] += 1
        except HostctlError as e:
            msg = str(e)
            bad = not msg or "\n" in msg.strip() or "Traceback" in msg
            if bad:
                (tmp_path / f"{name}-case{i}.toml").write_bytes(data)
            assert not bad, f"case {i}: not one line: {msg!r}"
            ends["ConfigError"] += 1
        except Exception as e:
            (tmp_path / f"{name}-case{i}.toml").write_bytes(data)
            raise AssertionError(f"case {i} ({tmp_path}/{name}-case{i}.toml): {type(e).__name__}: {e}") from e
    return ends


def test_10k_hostile_config_files_end_in_a_config_or_one_error_line(tmp_path):
    seeds = [toml_dumps(s) for s in CONFIG_SEEDS]
    for s in seeds:
        build_config(file=_write(tmp_path / "seed.toml", s))  # the seeds are valid
    ends = run_cases(tmp_path, "config", seeds, lambda p: build_config(file=p))
    assert sum(ends.values()) == CASES
    assert ends["ok"] >= 100 and ends["ConfigError"] >= CASES // 2, ends  # both outcomes are reached


def test_10k_hostile_scenario_files_end_in_a_scenario_or_one_error_line(tmp_path):
    from hostctl_lab.sim.scenario import from_scenario  # loads the testbed's scenario, then the simulator's view

    seeds = [open(p).read() for p in sorted(glob.glob(os.path.join(ROOT, "examples", "scenarios", "*.toml")))]
    assert len(seeds) >= 10
    ends = run_cases(tmp_path, "scenario", seeds, from_scenario)
    assert sum(ends.values()) == CASES
    assert ends["ok"] >= 100 and ends["ConfigError"] >= CASES // 2, ends


def _write(path, text: str) -> str:
    path.write_text(text)
    return str(path)


@pytest.mark.parametrize("seed", range(3))
def test_the_mutator_keeps_its_toml_readable(seed):
    """(the generator itself: its structured cases are TOML that tomllib reads back)"""
    rng = random.Random(seed)
    for _ in range(200):
        d = mutate(rng, rng.choice(CONFIG_SEEDS))
        assert isinstance(tomllib.loads(toml_dumps(d)), dict)
