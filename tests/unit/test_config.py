"""Unit tests of hostctl.config (TOML + flags -> validated Config) and
hostctl.core.units (rates, sizes, ports, pids).

Every user mistake must raise hostctl.errors.ConfigError whose message names the
problem: the tests assert on message fragments, not only on the exception type.
"""

from __future__ import annotations

import dataclasses
import math
import re
import textwrap
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from hostctl import consts
from hostctl.config import JOB_KEYS, TOP_KEYS, Config, build_config, load_file, specs_from_flags
from hostctl.core.bands import MAX_BANDS
from hostctl.policy import POLICIES
from hostctl.core.types import JobSpec
from hostctl.core.units import (
    format_bytes, format_rate, parse_fraction_or_rate, parse_pids, parse_ports, parse_rate_bps,
    parse_size_bytes,
)
from hostctl.errors import ConfigError, HostctlError


def raises(*fragments: str):
    """pytest.raises(ConfigError) whose message contains every fragment (literally)."""
    return pytest.raises(ConfigError, match="(?s)" + "".join(f"(?=.*{re.escape(f)})" for f in fragments))


@pytest.fixture
def toml(tmp_path: Path):
    """Write a dedented TOML text to a file and return its path."""
    def write(text: str, name: str = "hostctl.toml") -> str:
        p = tmp_path / name
        p.write_text(textwrap.dedent(text))
        return str(p)
    return write


def test_config_error_is_a_hostctl_error_with_exit_code_2():
    assert issubclass(ConfigError, HostctlError)
    assert ConfigError.exit_code == 2


# ==========================================================================
# rates


@pytest.mark.parametrize("text, bps", [
    ("200mbit", 200_000_000),
    ("10gbit", 10_000_000_000),
    ("9.7gbit", 9_700_000_000),
    ("500kbit", 500_000),
    ("8kbit", 8_000),
    ("1tbit", 10**12),
    ("8000bit", 8_000),
    ("1.5G", 1_500_000_000),  # bare SI prefixes are bits
    ("100m", 100_000_000),
    ("64k", 64_000),
    ("2t", 2 * 10**12),
    ("10GBit", 10_000_000_000),  # units are case-insensitive
    (" 10 mbit ", 10_000_000),  # blanks around and between
    (".5gbit", 500_000_000),
])
def test_rate_tc_bit_units(text, bps):
    assert parse_rate_bps(text) == bps


@pytest.mark.parametrize("text, bps", [
    ("1kbps", 8_000),
    ("125kbps", 1_000_000),
    ("100mbps", 800_000_000),
    ("1gbps", 8_000_000_000),
    ("1.25GBps", 10_000_000_000),
])
def test_rate_bytes_per_second_units_follow_tc(text, bps):
    # tc convention: Xbps is bytes per second, i.e. 8 bits.
    assert parse_rate_bps(text) == bps


def test_rate_plain_bps_is_bytes_per_second_like_tc():
    assert parse_rate_bps("1000000bps") == 8_000_000


@pytest.mark.parametrize("text", ["8000", "10000000000"])
def test_rate_bare_number_string_is_bits_per_second(text):
    assert parse_rate_bps(text) == int(text)


@pytest.mark.parametrize("value, bps", [(8000, 8000), (10**9, 10**9), (1e9, 10**9), (9.7e9, 9_700_000_000)])
def test_rate_numbers_are_bits_per_second(value, bps):
    assert parse_rate_bps(value) == bps
    assert isinstance(parse_rate_bps(value), int)


@pytest.mark.parametrize("text", [
    "12xyz", "10 gigabit", "gbit", "", "   ", "-5mbit", "1e9", "1e9bit", "10%", "1,000mbit",
    "1.2.3gbit", "0x10gbit", "10gbit/s", "mbit10", "tbps", "1kib", True, False, None,
])
def test_rate_bad_unit_or_syntax(text):
    with raises("bad rate", "tc unit", "200mbit"):
        parse_rate_bps(text)


def test_rate_error_names_what_and_value():
    with raises("bad --link-rate '12xyz'", "tc unit"):
        parse_rate_bps("12xyz", what="--link-rate")


@pytest.mark.parametrize("text", ["7kbit", "7.999kbit", "100bit", "0gbit", 0, 7999, 0.5, "0.0009mbps"])
def test_rate_below_8kbit(text):
    with raises("bad link_rate", "at least 8kbit"):
        parse_rate_bps(text, what="link_rate")


@pytest.mark.parametrize("value", [-1, -1e9])
def test_rate_negative_number(value):
    with raises("at least 8kbit"):
        parse_rate_bps(value)


@pytest.mark.parametrize("value", [math.nan, math.inf, "9" * 400 + "gbit"])
def test_rate_nan_inf_overflow_are_config_errors(value):
    with raises("bad rate"):
        parse_rate_bps(value)


# --------------------------------------------------------------------------
# share-or-rate (other_rate)


@pytest.mark.parametrize("text, expected", [
    ("10%", (0.10, None)),
    ("0%", (0.0, None)),
    ("100%", (1.0, None)),
    (" 25.5% ", (0.255, None)),
    ("50mbit", (None, 50_000_000)),
    ("1gbps", (None, 8_000_000_000)),
])
def test_fraction_or_rate(text, expected):
    frac, rate = parse_fraction_or_rate(text, what="other_rate")
    if expected[0] is None:
        assert frac is None and rate == expected[1]
    else:
        assert rate is None and frac == pytest.approx(expected[0])


@pytest.mark.parametrize("text, fragment", [
    ("abc%", "write a percentage like 10%"),
    ("%", "write a percentage like 10%"),
    ("10 %%", "write a percentage like 10%"),
    ("101%", "within 0%..100%"),
    ("-1%", "within 0%..100%"),
    ("nan%", "within 0%..100%"),
    ("ten", "tc unit"),
    ("10", ""),  # no unit: an error either way (see test_rate_bare_number_string_is_bits_per_second)
])
def test_fraction_or_rate_bad(text, fragment):
    with raises(f"bad other_rate {text!r}", fragment):
        parse_fraction_or_rate(text, what="other_rate")


# ==========================================================================
# sizes


@pytest.mark.parametrize("text, n", [
    ("98MB", 98_000_000),
    ("1.2GB", 1_200_000_000),
    ("1kb", 1_000),
    ("4MiB", 4 * 2**20),
    ("4M", 4 * 2**20),
    ("4m", 4 * 2**20),
    ("1GiB", 2**30),
    ("1G", 2**30),
    ("1k", 1024),
    ("1KiB", 1024),
    ("123", 123),
    ("123b", 123),
    ("0", 0),
    (" 12 MB ", 12_000_000),
    (123, 123),
    (0, 0),
])
def test_size(text, n):
    assert parse_size_bytes(text) == n


@pytest.mark.parametrize("text", ["12TB", "12tib", "MB", "", "-1MB", "1.2.3MB", "1e9", "12 meg", "98MBs", True, None])
def test_size_bad(text):
    with raises("bad model_size", "write bytes with a unit", "98MB"):
        parse_size_bytes(text, what="model_size")


def test_size_negative_int():
    with raises("bad size -1", "must not be negative"):
        parse_size_bytes(-1)


def test_size_overflow_is_config_error():
    with raises("bad size"):
        parse_size_bytes("9" * 400 + "GB")


# ==========================================================================
# ports


@pytest.mark.parametrize("text, ports", [
    ("9000", (9000,)),
    ("9000-9002,9100", (9000, 9001, 9002, 9100)),
    (" 9100 , 9000-9001 ", (9000, 9001, 9100)),  # sorted
    ("9000,9000-9001,9001", (9000, 9001)),  # unique
    ("9000,,9001,", (9000, 9001)),  # empty parts are skipped
    ("1", (1,)),
    ("65535", (65535,)),
    ("9000-9000", (9000,)),
    (9000, (9000,)),
])
def test_ports(text, ports):
    assert parse_ports(text) == ports


def test_ports_range_of_4096_is_the_limit():
    assert len(parse_ports("1-4097")) == 4097  # hi - lo == 4096
    with raises("bad --ports entry '1-4098'", "at most 4096 ports"):
        parse_ports("1-4098")


@pytest.mark.parametrize("text", ["70000", "0", "65536", "0-10", "9000-70000", "9005-9000"])
def test_ports_out_of_range_or_reversed(text):
    with raises(f"bad --ports entry {text!r}", "1..65535", "low-high"):
        parse_ports(text)


@pytest.mark.parametrize("text, entry", [
    ("abc", "abc"), ("9000-", "9000-"), ("-9000", "-9000"), ("9000:9001", "9000:9001"),
    ("9000 - 9005", "9000 - 9005"), ("9000,x", "x"), ("9.5", "9.5"), ("+9000", "+9000"),
])
def test_ports_bad_syntax(text, entry):
    with raises(f"bad --ports entry {entry!r}", "9000-9005,9100"):
        parse_ports(text)


@pytest.mark.parametrize("text", ["", ",", " , ,", "   "])
def test_ports_empty(text):
    with raises("--ports is empty"):
        parse_ports(text)


def test_ports_error_names_what():
    with raises("bad f.toml: jobs[0] ports entry '0'"):
        parse_ports("0", what="f.toml: jobs[0] ports")


@given(st.lists(st.integers(1, 65535), min_size=1, max_size=30))
def test_ports_property_sorted_unique(ports):
    assert parse_ports(",".join(map(str, ports))) == tuple(sorted(set(ports)))


# ==========================================================================
# pids


@pytest.mark.parametrize("text, pids", [
    ("1234", (1234,)),
    ("5678,1234,1234", (1234, 5678)),
    (" 1 , 2 ,", (1, 2)),
    (4242, (4242,)),
])
def test_pids(text, pids):
    assert parse_pids(text) == pids


@pytest.mark.parametrize("text, entry", [
    ("0", "0"), ("-1", "-1"), ("abc", "abc"), ("12a", "12a"), ("1,x", "x"), ("1.5", "1.5"), ("1-3", "1-3"),
])
def test_pids_bad(text, entry):
    with raises(f"bad --pids entry {entry!r}", "1234,5678"):
        parse_pids(text)


@pytest.mark.parametrize("text", ["", ",,", " "])
def test_pids_empty(text):
    with raises("--pids is empty"):
        parse_pids(text)


def test_pids_unicode_digit_is_config_error():
    with raises("bad --pids entry"):
        parse_pids("²")


# ==========================================================================
# formatting


@pytest.mark.parametrize("bps, text", [
    (9.7e9, "9.7Gbit"), (10**9, "1Gbit"), (250e6, "250Mbit"), (1500, "1.5kbit"), (500, "500bit"), (0, "0bit"),
])
def test_format_rate(bps, text):
    assert format_rate(bps) == text


@pytest.mark.parametrize("n, text", [
    (0, "0B"), (512, "512B"), (1024, "1KiB"), (4 * 2**20, "4MiB"), (1.5 * 2**30, "1.5GiB"),
])
def test_format_bytes(n, text):
    assert format_bytes(n) == text


@pytest.mark.parametrize("bps", [8_000, 123_456, 9_700_000_000, 999 * 10**9])
def test_format_rate_parses_back(bps):
    assert parse_rate_bps(format_rate(bps)) == pytest.approx(bps, rel=5e-3)


@pytest.mark.parametrize("fmt, value", [(format_rate, 999_600), (format_rate, 999_600_000), (format_rate, 1e12),
                                        (format_rate, 1e13), (format_bytes, 1023.9 * 1024)])
def test_format_never_uses_exponent_notation(fmt, value):
    assert "e+" not in fmt(value)


# ==========================================================================
# Config defaults and validation


def test_defaults_come_from_consts():
    c = Config()
    assert (c.policy, c.bands, c.rr_interval_s, c.rescan_s, c.lease_s, c.other_rate) == (
        consts.DEFAULT_POLICY, consts.DEFAULT_BANDS, consts.DEFAULT_RR_INTERVAL_S,
        consts.DEFAULT_RESCAN_S, consts.DEFAULT_LEASE_S, consts.DEFAULT_OTHER_SHARE)
    assert c.iface is None and c.link_rate_bps is None and c.metrics_port is None and c.jobs == ()


def test_config_is_frozen():
    with pytest.raises(dataclasses.FrozenInstanceError):
        Config().bands = 3  # type: ignore[misc]


def test_policy_fifo_needs_no_jobs():
    c = build_config(policy="fifo")
    assert c.policy == "fifo" and c.jobs == ()


@pytest.mark.parametrize("policy", ["one", "rr", None])
def test_other_policies_need_jobs(policy):
    with raises(f"policy {policy or 'rr'} needs DL jobs", "--ports, --pids, --match", "[[jobs]]"):
        build_config(policy=policy)


@pytest.mark.parametrize("policy", [p.name for p in POLICIES.values() if p.rates != "cap"])
def test_every_policy_with_jobs(policy):
    assert build_config(policy=policy, ports="9000").policy == policy


@pytest.mark.parametrize("policy", ["bogus", "RR", "", "round-robin"])
def test_unknown_policy(policy):
    with raises(f"unknown policy {policy!r}", "fifo, one, rr"):
        build_config(policy=policy, ports="9000")


@pytest.mark.parametrize("bands", [0, 8, -1, 100])
def test_bands_out_of_range(bands):
    with raises(f"bands must be within 1..{MAX_BANDS}", f"got {bands}"):
        build_config(bands=bands, ports="9000")


@pytest.mark.parametrize("bands", [1, MAX_BANDS])
def test_bands_limits(bands):
    assert build_config(bands=bands, ports="9000").bands == bands


@pytest.mark.parametrize("key, field, ok, bad, fragment", [
    ("rr_interval", "rr_interval_s", [0.1, 20, 86400], [0, 0.09, 86401, -1, math.nan, math.inf],
     "rr_interval must be within 0.1..86400 seconds"),
    ("rescan", "rescan_s", [0.05, 1, 60], [0, 0.04, 60.5, math.nan], "rescan must be within 0.05..60 seconds"),
    ("lease", "lease_s", [2 * consts.HEARTBEAT_S, 3, 3600], [0, 0.1, 0.49, 3601, math.nan],
     f"lease must be within {2 * consts.HEARTBEAT_S}..3600 seconds"),
    ("metrics_port", "metrics_port", [1, 9464, 65535], [0, -1, 65536, 70000], "metrics_port must be within 1..65535"),
])
def test_numeric_ranges(key, field, ok, bad, fragment):
    for v in ok:
        assert getattr(build_config(ports="9000", **{key: v}), field) == v
    for v in bad:
        with raises(fragment, "got"):
            build_config(ports="9000", **{key: v})


@pytest.mark.parametrize("iface", ["eth0", "lo", "a" * 15, "enp3s0f1.100", "veth-x@y"])
def test_iface_ok(iface):
    assert build_config(iface=iface, ports="9000").iface == iface


@pytest.mark.parametrize("iface", ["a/b", "a b", "a" * 16, "eth0\n", "\t"])
def test_iface_bad(iface):
    with raises(f"bad interface name {iface!r}"):
        build_config(iface=iface, ports="9000")


def test_empty_iface_flag_is_rejected():
    # "" is not None, so it overrides the default (None) and validate rejects it.
    with raises("bad interface name ''"):
        build_config(iface="", ports="9000")


@pytest.mark.parametrize("other, fragment", [
    ("abc", "bad other_rate 'abc'"), ("101%", "percentage must be within 0%..100%"), ("x%", "write a percentage"),
])
def test_other_rate_syntax_checked_at_load(other, fragment):
    with raises(fragment):
        build_config(other_rate=other, ports="9000")


@pytest.mark.parametrize("other, link, bps", [
    ("10%", 10**9, 10**8), ("50%", 10**9, 5 * 10**8), ("0%", 10**9, 0), ("500mbit", 10**9, 5 * 10**8),
    ("1gbps", 20 * 10**9, 8 * 10**9),
])
def test_other_rate_bps(other, link, bps):
    assert build_config(other_rate=other, ports="9000").other_rate_bps(link) == bps


@pytest.mark.parametrize("other", ["51%", "60%", "100%", "501mbit", "2gbit", "100mbps"])
def test_other_rate_over_half_the_link(other):
    if other.endswith("%"):  # a share is checked at load
        with raises(f"other_rate {other} is more than half the link rate", "at most 50%"):
            build_config(other_rate=other, ports="9000")
        return
    cfg = build_config(other_rate=other, ports="9000")  # a rate: once the link rate is known
    with raises(f"other_rate {other} is more than half the link rate", "at most 50%"):
        cfg.other_rate_bps(10**9)
    with raises(f"other_rate {other} is more than half the link rate"):
        build_config(other_rate=other, ports="9000", link_rate="1gbit")


def test_other_rate_share_over_half_rejected_at_load():
    with raises("other_rate 60% is more than half"):
        build_config(other_rate="60%", ports="9000")


# ==========================================================================
# flag selectors


def test_specs_from_flags_order_and_content():
    specs = specs_from_flags("9001,9000", "7,5", "torchrun")
    assert specs == (JobSpec(ports=(9000, 9001)), JobSpec(pids=(5, 7)), JobSpec(match="torchrun"))
    assert specs_from_flags(None, None, None) == ()
    assert specs_from_flags("", "", "") == ()  # empty flags are "not given"


@pytest.mark.parametrize("flags, fragment", [
    ({"ports": "70000"}, "bad --ports entry '70000'"),
    ({"ports": "x"}, "bad --ports entry 'x'"),
    ({"ports": ","}, "--ports is empty"),
    ({"pids": "x"}, "bad --pids entry 'x'"),
    ({"match": "("}, "--match: bad regex '('"),
    ({"match": "[a-"}, "--match: bad regex"),
    ({"link_rate": "12xyz"}, "bad --link-rate '12xyz'"),
    ({"link_rate": "1kbit"}, "--link-rate '1kbit': must be at least 8kbit"),
])
def test_flag_errors_name_the_flag(flags, fragment):
    with raises(fragment):
        build_config(**{"ports": "9000", **flags})


def test_flag_link_rate():
    assert build_config(ports="9000", link_rate="9.7gbit").link_rate_bps == 9_700_000_000
    assert build_config(ports="9000", link_rate=None).link_rate_bps is None


# ==========================================================================
# TOML loading


FULL = """
    policy = "one"
    iface = "eth1"
    link_rate = "9.7gbit"
    other_rate = "5%"
    bands = 4
    rr_interval = 30
    rescan = 0.5
    lease = 5.0
    metrics_port = 9464
    cap = "2gbit"
    cgroup = "/training.slice"
    slot = 0.05
    phase_gap = 0.03
    ports = "9200-9201"
    pids = [11, 10]
    match = "horovodrun"

    [[jobs]]
    name = "a"
    ports = 9000
    model_size = "98MB"

    [[jobs]]
    name = "b"
    pids = "20,21"
    cap = "500mbit"

    [[jobs]]
    name = "c"
    match = "torchrun"
    model_size = 1000
"""


def test_load_every_key(toml):
    c = build_config(toml(FULL))
    assert c == Config(
        policy="one", iface="eth1", link_rate_bps=9_700_000_000, other_rate="5%", bands=4,
        rr_interval_s=30.0, rescan_s=0.5, lease_s=5.0, metrics_port=9464,
        cap_bps=2_000_000_000, cgroup="/training.slice", slot_s=0.05, phase_gap_s=0.03,
        jobs=(
            JobSpec(ports=(9200, 9201)), JobSpec(pids=(10, 11)), JobSpec(match="horovodrun"),
            JobSpec(name="a", ports=(9000,), model_bytes=98_000_000),
            JobSpec(name="b", pids=(20, 21), cap_bps=500_000_000),
            JobSpec(name="c", match="torchrun", model_bytes=1000),
        ),
    )
    assert isinstance(c.rr_interval_s, float)


def test_mlcc_settings(toml):
    c = build_config(ports="9000", policy="mlcc", switch="tcp://10.0.0.9:5555, ipc:///run/sw.sock")
    assert c.pacing and c.spec.bands == "fifo" and c.switch == ("tcp://10.0.0.9:5555", "ipc:///run/sw.sock")
    assert c.horizon == 10
    f = build_config(toml('policy = "mlcc"\nports = "9000"\nswitch = "tcp://127.0.0.1:5555"\nhorizon = 6\n'))
    assert f.switch == ("tcp://127.0.0.1:5555",) and f.horizon == 6
    with raises("switch must be an endpoint string or a list"):
        build_config(toml('policy = "mlcc"\nports = "9000"\nswitch = 5\n'))


def test_keys_sets_match_the_documented_ones():
    assert TOP_KEYS == {"policy", "iface", "link_rate", "other_rate", "bands", "rr_interval", "rescan",
                        "lease", "metrics_port", "ports", "pids", "match", "jobs", "cap", "cgroup", "slot",
                        "phase_gap", "switch", "curve_keys", "horizon", "plan_offset", "ingress_rate", "deps",
                        "job_order", "metrics_addr", "log_level", "containers", "container_addr"}
    assert JOB_KEYS == {"name", "ports", "pids", "match", "model_size", "cap", "comm", "ring_size"}


@pytest.mark.parametrize("kw, fragment", [
    ({"slot": 0.001}, "slot must be within 0.01..1 seconds"),
    ({"slot": 2.0}, "slot must be within 0.01..1 seconds"),
    ({"phase_gap": 0.0}, "phase_gap must be within"),
    ({"cgroup": "training.slice"}, "cgroup must be a cgroup v2 path starting with /"),
    ({"policy": "cap"}, "policy cap needs a rate"),
    ({"policy": "cap", "cap": "50kbit"}, "outside what TCP pacing can enforce"),
    ({"policy": "cap", "cap": "40gbit"}, "outside what TCP pacing can enforce"),
    ({"cap": "fast"}, "--cap"),
    ({"policy": "mlcc", "switch": "10.0.0.9:5555"}, "bad switch endpoint '10.0.0.9:5555'"),
    ({"policy": "mlcc", "curve_keys": "/etc/k"}, "curve_keys needs switch endpoints"),
    ({"policy": "mlcc", "horizon": 0}, "horizon must be within 1..64"),
    ({"policy": "mlcc", "plan_offset": 0.05}, "plan_offset must be within 0..0.036 seconds"),
])
def test_pacing_settings_are_checked(kw, fragment):
    with raises(fragment):
        build_config(ports="9000", **kw)


def test_cap_policy_config():
    c = build_config(ports="9000", policy="cap", cap="1gbit")
    assert c.pacing and c.spec.bands == "fifo" and c.cap_bps == 10**9


def test_load_file_returns_config_kwargs(toml):
    kw = load_file(toml('bands = 3\nrescan = 2\n'))
    assert kw == {"bands": 3, "rescan_s": 2.0, "jobs": ()}


@pytest.mark.parametrize("text, ports", [
    ('ports = "9000-9001"', (9000, 9001)),
    ("ports = 9000", (9000,)),
    ("ports = [9001, 9000]", (9000, 9001)),
    ('ports = ["9000-9001", 9005]', (9000, 9001, 9005)),
])
def test_top_level_ports_forms(toml, text, ports):
    assert build_config(toml(text)).jobs == (JobSpec(ports=ports),)


@pytest.mark.parametrize("text, ports", [
    ('ports = "9000-9001"', (9000, 9001)),
    ("ports = 9000", (9000,)),
    ("ports = [9001, 9000]", (9000, 9001)),
])
def test_job_ports_forms(toml, text, ports):
    assert build_config(toml(f'[[jobs]]\nname = "j"\n{text}\n')).jobs == (JobSpec(name="j", ports=ports),)


@pytest.mark.parametrize("text, pids", [('pids = "2,1"', (1, 2)), ("pids = [3]", (3,)), ("pids = 4", (4,))])
def test_job_pids_forms(toml, text, pids):
    assert build_config(toml(f'[[jobs]]\nname = "j"\n{text}\n')).jobs == (JobSpec(name="j", pids=pids),)


def test_empty_file_with_fifo(toml):
    assert build_config(toml('policy = "fifo"\n')).jobs == ()


def test_empty_file_needs_jobs_for_default_policy(toml):
    with raises("policy rr needs DL jobs"):
        build_config(toml(""))


def test_unknown_top_key_is_named(toml):
    path = toml('polcy = "rr"\nports = "9000"\nbandz = 3\n')
    with raises(path, "unknown key(s) bandz, polcy", "valid keys:", "policy", "bands"):
        build_config(path)


def test_unknown_job_key_is_named(toml):
    path = toml('[[jobs]]\nname = "a"\nports = "9000"\nmodel = "98MB"\n')
    with raises(f"{path}: jobs[0]: unknown key(s) model", "valid:", "model_size"):
        build_config(path)


def test_unknown_key_in_second_job_names_its_index(toml):
    path = toml('[[jobs]]\nname = "a"\nports = 1\n[[jobs]]\nname = "b"\nport = 2\n')
    with raises("jobs[1]: unknown key(s) port"):
        build_config(path)


@pytest.mark.parametrize("text", ['policy = "rr', "bands = \n", "[[jobs]\n", "a = 1\na = 2\n", "ports = [1,,2]"])
def test_bad_toml(toml, text):
    path = toml(text)
    with raises(f"config file {path} is not valid TOML"):
        build_config(path)


def test_missing_file(tmp_path):
    path = str(tmp_path / "nope.toml")
    with raises(f"config file {path} not found"):
        build_config(path)


def test_directory_instead_of_file(tmp_path):
    with raises(f"cannot read config file {tmp_path}"):
        build_config(str(tmp_path))


def test_duplicate_job_names(toml):
    path = toml('[[jobs]]\nname = "a"\nports = 1\n[[jobs]]\nname = "a"\nports = 2\n')
    with raises("jobs[1]: duplicate job name 'a'"):
        build_config(path)


def test_job_with_no_selector(toml):
    with raises("jobs[0] (a): give exactly one of ports, pids, match"):
        build_config(toml('[[jobs]]\nname = "a"\nmodel_size = "1MB"\n'))


@pytest.mark.parametrize("sel", ['ports = 1\npids = 2', 'ports = 1\nmatch = "x"', 'pids = 1\nmatch = "x"',
                                 'ports = 1\npids = 2\nmatch = "x"'])
def test_job_with_several_selectors(toml, sel):
    with raises("jobs[0] (a): give exactly one of ports, pids, match"):
        build_config(toml(f'[[jobs]]\nname = "a"\n{sel}\n'))


@pytest.mark.parametrize("name_line", ["", 'name = ""', 'name = "a b"', "name = 5", 'name = "' + "x" * 129 + '"',
                                       'name = "ü"'])
def test_job_name_required_and_checked(toml, name_line):
    with raises("jobs[0]: name is required"):
        build_config(toml(f'[[jobs]]\n{name_line}\nports = 9000\n'))


def test_job_bad_regex(toml):
    path = toml('[[jobs]]\nname = "t"\nmatch = "torchrun("\n')
    with raises(f"{path}: jobs[0]: bad regex 'torchrun('", "missing )"):
        build_config(path)


def test_top_level_bad_regex(toml):
    with raises("bad regex 'a[b'"):
        build_config(toml('match = "a[b"\n'))


@pytest.mark.parametrize("value", ["5", '["torchrun"]'])
def test_top_level_match_must_be_a_string(toml, value):
    with raises("match"):
        build_config(toml(f"match = {value}\n"))


@pytest.mark.parametrize("text, fragment", [
    ("jobs = 5", "jobs must be an array of tables: [[jobs]]"),
    ('[jobs]\nname = "a"', "jobs must be an array of tables"),
    ("jobs = [1]", "jobs[0] must be a table"),
])
def test_jobs_shape(toml, text, fragment):
    with raises(fragment):
        build_config(toml(text + "\n"))


@pytest.mark.parametrize("text, fragment", [
    ('[[jobs]]\nname = "a"\nports = 70000', "jobs[0] ports entry '70000'"),
    ('[[jobs]]\nname = "a"\nports = "9005-9000"', "jobs[0] ports entry '9005-9000'"),
    ('[[jobs]]\nname = "a"\nports = []', "jobs[0] ports is empty"),
    ('[[jobs]]\nname = "a"\nports = true', "jobs[0]: ports must be a string"),
    ('[[jobs]]\nname = "a"\nports = {x = 1}', "jobs[0]: ports must be a string"),
    ('[[jobs]]\nname = "a"\npids = "x"', "jobs[0] pids entry 'x'"),
    ('[[jobs]]\nname = "a"\npids = []', "jobs[0] pids is empty"),
    ('[[jobs]]\nname = "a"\nports = 1\nmodel_size = "98 megs"', "jobs[0] model_size '98 megs'"),
    ('[[jobs]]\nname = "a"\nports = 1\nmodel_size = -1', "jobs[0] model_size -1: must not be negative"),
    ('ports = "70000"', ".toml ports entry '70000'"),
    ('pids = "0"', ".toml pids entry '0'"),
])
def test_job_selector_values(toml, text, fragment):
    with raises(fragment):
        build_config(toml(text + "\n"))


@pytest.mark.parametrize("text, fragment", [
    ('bands = "6"', "bands must be an integer, got '6'"),
    ("bands = 6.0", "bands must be an integer, got 6.0"),
    ("bands = true", "bands must be an integer, got True"),
    ('rr_interval = "20"', "rr_interval must be a number, got '20'"),
    ("rescan = false", "rescan must be a number, got False"),
    ("lease = [3]", "lease must be a number"),
    ("metrics_port = 9464.0", "metrics_port must be an integer"),
    ('link_rate = "fast"', "link_rate 'fast': write a number with a tc unit"),
    ("link_rate = 100", "link_rate 100: must be at least 8kbit"),
    ('other_rate = "lots"', "bad other_rate 'lots'"),
    ('policy = "lifo"', "unknown policy 'lifo'"),
    ("bands = 8", "bands must be within 1..7"),
    ("lease = 0.1", "lease must be within"),
])
def test_top_level_value_errors(toml, text, fragment):
    path = toml(text + '\nports = "9000"\n')
    with raises(fragment):
        build_config(path)


def test_type_errors_name_the_file(toml):
    path = toml('bands = "6"\n')
    with raises(f"{path}: bands must be an integer"):
        build_config(path)


def test_link_rate_forms_in_file(toml):
    assert build_config(toml('link_rate = "10gbit"\nports = 1\n')).link_rate_bps == 10**10
    assert build_config(toml("link_rate = 1000000000\nports = 1\n")).link_rate_bps == 10**9
    assert build_config(toml("link_rate = 2.5e9\nports = 1\n")).link_rate_bps == 2_500_000_000


@pytest.mark.parametrize("value", ["nan", "inf"])
def test_link_rate_nan_inf_in_file(toml, value):
    with raises("link_rate"):
        build_config(toml(f"link_rate = {value}\nports = 1\n"))


def test_model_size_float_in_file(toml):
    c = build_config(toml('[[jobs]]\nname = "a"\nports = 1\nmodel_size = 1.5e9\n'))
    assert c.jobs[0].model_bytes == 1_500_000_000


# ==========================================================================
# flags override the file


def test_flags_override_file_values(toml):
    path = toml("""
        policy = "one"
        iface = "eth1"
        link_rate = "1gbit"
        other_rate = "5%"
        bands = 4
        rr_interval = 30
        rescan = 0.5
        lease = 5
        metrics_port = 9000
        ports = "9000"
    """)
    c = build_config(path, policy="rr", iface="eth2", link_rate="2gbit", other_rate="20%", bands=2,
                     rr_interval=10.0, rescan=2.0, lease=4.0, metrics_port=9100)
    assert (c.policy, c.iface, c.link_rate_bps, c.other_rate, c.bands, c.rr_interval_s, c.rescan_s,
            c.lease_s, c.metrics_port) == ("rr", "eth2", 2 * 10**9, "20%", 2, 10.0, 2.0, 4.0, 9100)


def test_flags_given_as_none_keep_file_values(toml):
    path = toml('policy = "one"\nbands = 4\nlink_rate = "1gbit"\nrr_interval = 30\nports = "9000"\n')
    c = build_config(path, policy=None, iface=None, link_rate=None, other_rate=None, ports=None, pids=None,
                     match=None, bands=None, rr_interval=None, rescan=None, lease=None, metrics_port=None)
    assert (c.policy, c.bands, c.link_rate_bps, c.rr_interval_s) == ("one", 4, 10**9, 30.0)
    assert c.jobs == (JobSpec(ports=(9000,)),)


def test_flag_value_is_validated_even_if_file_is_fine(toml):
    with raises("bands must be within 1..7", "got 0"):
        build_config(toml('bands = 4\nports = "9000"\n'), bands=0)


def test_flag_fixes_invalid_file_value(toml):
    # Validation runs on the merged result, so a flag can override a bad file value.
    assert build_config(toml('bands = 9\nports = "9000"\n'), bands=3).bands == 3


SELECTORS = """
    ports = "9000"
    pids = [10]
    match = "horovodrun"

    [[jobs]]
    name = "named"
    ports = 9100
    model_size = "1MB"
"""


def test_no_flag_selectors_keeps_all_file_selectors(toml):
    c = build_config(toml(SELECTORS))
    assert c.jobs == (JobSpec(ports=(9000,)), JobSpec(pids=(10,)), JobSpec(match="horovodrun"),
                      JobSpec(name="named", ports=(9100,), model_bytes=1_000_000))


@pytest.mark.parametrize("flags, first", [
    ({"ports": "9200"}, (JobSpec(ports=(9200,)),)),
    ({"pids": "42"}, (JobSpec(pids=(42,)),)),
    ({"match": "torchrun"}, (JobSpec(match="torchrun"),)),
    ({"ports": "9200", "match": "torchrun"}, (JobSpec(ports=(9200,)), JobSpec(match="torchrun"))),
])
def test_flag_selectors_replace_unnamed_file_selectors_but_keep_named_jobs(toml, flags, first):
    c = build_config(toml(SELECTORS), **flags)
    assert c.jobs == first + (JobSpec(name="named", ports=(9100,), model_bytes=1_000_000),)


def test_flag_selector_with_only_named_jobs_in_file(toml):
    c = build_config(toml('[[jobs]]\nname = "n"\nmatch = "x"\n'), ports="9000")
    assert c.jobs == (JobSpec(ports=(9000,)), JobSpec(name="n", match="x"))


def test_policy_flag_fifo_over_file_without_jobs(toml):
    assert build_config(toml('policy = "rr"\n'), policy="fifo").policy == "fifo"


def test_policy_flag_rr_over_fifo_file_without_jobs(toml):
    with raises("policy rr needs DL jobs"):
        build_config(toml('policy = "fifo"\n'), policy="rr")


def test_ingress_rate_share_or_rate(toml):
    c = build_config(policy="one", ports="5201", ingress_rate="97%")
    assert c.ingress_rate_bps(10**9) == 970_000_000
    assert build_config(policy="rr", ports="5201", ingress_rate="900mbit").ingress_rate_bps(10**9) == 900_000_000
    assert build_config(policy="one", ports="5201").ingress_rate_bps(10**9) == 0
    c = build_config(toml('policy = "one"\nports = "5201"\ningress_rate = "95%"\n'))
    assert c.ingress_rate == "95%"


@pytest.mark.parametrize("kw,fragments", [
    ({"policy": "fifo"}, ("policy fifo has no bands", "drop --ingress-rate")),
    ({"policy": "mlcc"}, ("policy mlcc has no bands",)),
    ({"policy": "one", "ingress_rate": "30%"}, ("ingress_rate 30%", "50%..100%")),
    ({"policy": "one", "ingress_rate": "101%"}, ("bad ingress_rate", "0%..100%")),
    ({"policy": "one", "ingress_rate": "fast"}, ("bad ingress_rate 'fast'",)),
    ({"policy": "one", "ingress_rate": "1mbit", "link_rate": "100mbit"}, ("below what 6 bands", "--ingress-rate 97%")),
])
def test_ingress_rate_mistakes(kw, fragments):
    kw = {"ports": "5201", "ingress_rate": "97%", **kw}
    with raises(*fragments):
        build_config(**kw)


def test_comm_pattern_and_ring_size(toml):
    c = build_config(toml('policy = "mlcc"\ndeps = false\n[[jobs]]\nname = "r"\nports = [7000]\ncomm = "ring"\n'
                          'ring_size = 4\n[[jobs]]\nname = "p"\nmatch = "ps worker"\ncomm = "ps"\n'))
    assert c.deps is False
    assert [(s.name, s.comm, s.ring_size) for s in c.jobs] == [("r", "ring", 4), ("p", "ps", None)]
    assert build_config(toml('policy = "mlcc"\nports = "9000"\n')).deps is True
    with raises("comm must be one of ps, ring"):
        build_config(toml('[[jobs]]\nname = "r"\nports = [7000]\ncomm = "allreduce"\n'))
    with raises("ring_size is for comm"):
        build_config(toml('[[jobs]]\nname = "r"\nports = [7000]\ncomm = "ps"\nring_size = 4\n'))
    with raises("ring_size must be an integer >= 2"):
        build_config(toml('[[jobs]]\nname = "r"\nports = [7000]\ncomm = "ring"\nring_size = 1\n'))
    with raises("deps must be true or false"):
        build_config(toml('policy = "mlcc"\nports = "9000"\ndeps = 1\n'))


def test_job_order_needs_mlcc_with_a_switch():
    ok = build_config(policy="mlcc", ports="9000", link_rate="1gbit", switch="tcp://127.0.0.1:5555",
                      job_order="rotate")
    assert ok.job_order == "rotate"
    assert build_config(policy="mlcc", ports="9000", link_rate="1gbit").job_order == "none"
    with pytest.raises(ConfigError, match="needs --policy mlcc with --switch"):
        build_config(policy="mlcc", ports="9000", link_rate="1gbit", job_order="fixed")
    with pytest.raises(ConfigError, match="needs --policy mlcc with --switch"):
        build_config(policy="rr", ports="9000", switch="tcp://127.0.0.1:5555", job_order="fixed")
    with pytest.raises(ConfigError, match="unknown job order 'largest'.*none, fixed, rotate, smallest, flat"):
        build_config(policy="mlcc", ports="9000", link_rate="1gbit", switch="tcp://127.0.0.1:5555",
                     job_order="largest")
    assert build_config(policy="mlcc", ports="9000", link_rate="1gbit", switch="tcp://127.0.0.1:5555",
                        job_order="flat").job_order == "flat"
    with pytest.raises(ConfigError, match="needs --policy mlcc with --switch"):
        build_config(policy="mlcc", ports="9000", link_rate="1gbit", job_order="flat")
    # mlcc-bands' bands need an order
    with pytest.raises(ConfigError, match="not flat"):
        build_config(policy="mlcc-bands", ports="9000", link_rate="1gbit", switch="tcp://127.0.0.1:5555",
                     job_order="flat")


def test_fabric_rank_is_the_same_everywhere_and_rotates():
    from hostctl.core.joborder import fabric_rank

    assert fabric_rank("ja", "none") is None
    assert fabric_rank("ja", "fixed") == fabric_rank("ja", "fixed", epoch=7)  # fixed: no rotation
    orders = {tuple(sorted("abcdef", key=lambda j: fabric_rank(j, "rotate", e))) for e in range(20)}
    assert len(orders) > 10  # a new order (nearly) every epoch
    firsts = {min("abcdef", key=lambda j: fabric_rank(j, "rotate", e)) for e in range(60)}
    assert firsts == set("abcdef")  # every job leads at some point
    with pytest.raises(ValueError):
        fabric_rank("ja", "largest")
    assert fabric_rank("ja", "flat") is None


def test_smallest_ranks_by_model_size():
    from hostctl.core.joborder import fabric_order, fabric_rank

    sizes = {"big": 8 << 20, "small": 2 << 20, "small2": 2 << 20, "unknown": None, "huge": 1 << 70}
    rank = {j: fabric_rank(j, "smallest", size=s) for j, s in sizes.items()}
    assert rank["small"] == rank["small2"] < rank["big"] < rank["huge"] <= rank["unknown"]  # smaller first
    assert fabric_rank("small", "smallest", epoch=9, size=2 << 20) == rank["small"]  # no rotation
    assert all(0 <= r < 1 << 64 for r in rank.values())  # a u64 on the wire
    # the bands of mlcc-bands: by rank, one size by job id
    assert fabric_order(sizes, "smallest", sizes=sizes) == ["small", "small2", "big", "huge", "unknown"]
    assert fabric_order(sizes, "smallest") == sorted(sizes)  # a host that knows no size: all alike


def test_containers_keys_and_flags(toml):
    d = build_config(policy="fifo")
    assert d.containers is True and d.container_addr == "pod"
    c = build_config(toml('policy = "fifo"\ncontainers = false\ncontainer_addr = "host"\n'))
    assert c.containers is False and c.container_addr == "host"
    assert build_config(toml('policy = "fifo"\ncontainers = false\n'), containers=True).containers is True  # flags win
    with raises("containers must be true or false"):
        build_config(toml('containers = "yes"\n'))
    with raises("unknown container_addr 'nat': choose pod"):
        build_config(policy="fifo", container_addr="nat")
