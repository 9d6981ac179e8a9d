"""switchemu's per-frame fast path against its reference path (no sockets).

``SwitchState(fast=True)`` handles plainly valid update_schedule / fetch_feedback frames with
``wire.fast_request`` + ``LoadTable.update_valid`` / ``rows`` + a direct msgpack encode;
``fast=False`` sends every frame through ``wire.request_from_map`` -> dataclasses ->
``LoadTable.update`` / ``loads`` -> ``wire.encode_reply``. Fed the same random message stream (valid
and broken frames, unknown hosts and links, explicit paths, job exclusion, withdrawals, reordered
sequence numbers, stale and future slots, expiry), both must give byte-identical replies and end with
the same table, queues and counters.
"""

from __future__ import annotations

import math
import random

import msgpack
import pytest

from hostctl.core import wire
from hostctl.core.topology import Topology
from switchemu.server import SwitchState

K = 4
SLOT_S = 0.06
from tests.unit.test_topology import RACKS  # noqa: E402  (the same two-rack fabric)
HOSTS = ["h0", "h1", "h2", "h3", "10.100.0.1", "10.100.0.3", "h9"]  # h9: unknown
LINKS = ["tor0>h0", "tor0>h1", "tor0>agg", "agg>tor1", "tor1>h2", "h0>tor0", "nope>x"]  # nope>x: unknown


def _rate(rng: random.Random):
    r = rng.random()
    if r < 0.2:
        return 0
    if r < 0.3:
        return rng.randrange(0, 100) + 0.5  # rounding: half to even on both paths
    if r < 0.6:
        return float(rng.randrange(0, 10**9))
    return rng.randrange(0, 10**9)


def _frame(rng: random.Random, slot: int) -> bytes:
    kind = rng.random()
    flows = [f"f{i}" for i in range(6)]
    m: dict = {"v": rng.choice(wire.WIRE_VERSIONS), "id": rng.randrange(2**32), "slot": slot}
    if rng.random() < 0.7:
        m["host"] = rng.choice(HOSTS)
    if kind < 0.45:
        m["type"] = "update_schedule"
        items = []
        for _ in range(rng.randrange(0, 4)):
            d = {"flow": rng.choice(flows), "job": rng.choice(["ja", "jb", "jc"]), "src": rng.choice(HOSTS),
                 "dst": rng.choice(HOSTS), "seq": rng.randrange(0, 6),
                 "rates_Bps": [0] * K if rng.random() < 0.1 else [_rate(rng) for _ in range(K)]}
            if rng.random() < 0.2:
                d["links"] = rng.sample(LINKS, rng.randrange(0, 3))
            items.append(d)
        m["flows"] = items
    elif kind < 0.85:
        m["type"] = "fetch_feedback"
        items = []
        for _ in range(rng.randrange(0, 4)):
            d = {"flow": rng.choice(flows), "src": rng.choice(HOSTS), "dst": rng.choice(HOSTS)}
            if rng.random() < 0.3:
                d["job"] = rng.choice(["ja", "jb", "jc"])
            if rng.random() < 0.15:
                d["links"] = rng.sample(LINKS, rng.randrange(0, 3))
            items.append(d)
        m["flows"] = items
    elif kind < 0.9:
        m["type"] = "notify"
        m["items"] = [{"to": rng.choice(HOSTS), "flow": rng.choice(flows), "job": "ja",
                       "F_bytes": rng.randrange(10**6)}]
    elif kind < 0.95:
        m["type"] = "report_progress"
        m["flows"] = [{"flow": rng.choice(flows), "job": "ja", "cum_bytes": rng.randrange(10**6), "rate_Bps": 5.0}]
    else:
        m["type"] = "get_progress"
        m["flows"] = rng.sample(flows, 2)
    if rng.random() < 0.15:
        _break(rng, m)
    return msgpack.packb(m, use_bin_type=True)


def _break(rng: random.Random, m: dict) -> None:
    """One schema violation (the fast path must leave it to the reference path's error reply)."""
    items = m.get("flows") or m.get("items") or []
    d = items[0] if items and isinstance(items[0], dict) else None
    choice = rng.randrange(10)
    if choice == 0:
        m["extra"] = 1
    elif choice == 1:
        m["v"] = rng.choice([3, 0, True, "1"])
    elif choice == 2:
        m["id"] = rng.choice([-1, 1.0, True])
    elif choice == 3:
        m.pop(rng.choice(["v", "id", "slot", "type"]))
    elif choice == 4 and d is not None:
        d[rng.choice(["flow", "src", "dst", "job"])] = rng.choice(["", "x" * 200, 5, None, b"b"])
    elif choice == 5 and d is not None and "rates_Bps" in d:
        d["rates_Bps"][rng.randrange(K)] = rng.choice([math.nan, math.inf, -1, True, "1", 10**12 + 1, None])
    elif choice == 6 and d is not None and "rates_Bps" in d:
        d["rates_Bps"] = d["rates_Bps"][:-1]
    elif choice == 7 and d is not None:
        d["bogus"] = 1
    elif choice == 8 and d is not None:
        d["links"] = rng.choice([["a", "a"], "tor0>h0", [1], ["l"] * 17])
    else:
        m["host"] = rng.choice(["", 7])


def _messages(seed: int, n: int):
    rng = random.Random(seed)
    now = 1_700_000_000.0 + rng.random()
    out = []
    for _ in range(n):
        r = rng.random()
        now += rng.random() * 0.04 if r < 0.97 else SLOT_S * rng.randrange(K, 3 * K)  # sometimes a gap: expiry
        slot = int(now // SLOT_S) + rng.choice([0, 0, 0, 0, 0, -1, 1, -3, 3])  # +-1 near a boundary, +-3 never
        frames = [_frame(rng, slot) for _ in range(rng.choice([1, 2, 2, 3]))]
        if rng.random() < 0.05:
            frames.insert(0, b"")  # REQ-style delimiter
        out.append((now, frames))
    return out


def _state(fast: bool, switch: str) -> SwitchState:
    return SwitchState(Topology.from_toml(RACKS), switch, slot_s=SLOT_S, horizon=K, max_skew_s=0.005, fast=fast)


def _snapshot(s: SwitchState):
    t = s.table
    flows = {f: (e.links, e.start_slot, list(e.rates_Bps), e.seq, e.job_id) for f, e in t._flows.items()}
    st = s.stats
    counters = (st.messages, st.frames, st.replies, st.errors, st.flow_errors, st.bytes_in, st.bytes_out,
                st.expired_flows, st.latency_count)
    return (flows, t._rows, {j: set(v) for j, v in t._by_job.items()}, t._expiry, t.now_slot, counters,
            dict(s.progress), {h: list(q) for h, q in s.notes.items()}, s.booking())


@pytest.mark.parametrize("switch", ["tor0", "all"])
@pytest.mark.parametrize("seed", range(12))
def test_fast_path_replies_and_state_match_the_reference(seed, switch):
    fast, ref = _state(True, switch), _state(False, switch)
    n_fast = 0
    for now, frames in _messages(seed, 400):
        a = fast.handle_message(list(frames), now)
        b = ref.handle_message(list(frames), now)
        assert a == b
        n_fast += sum(1 for f in frames if f and _is_fast(f))
    assert _snapshot(fast) == _snapshot(ref)
    st = fast.stats
    assert st.frames == sum(st.replies.values()) + sum(st.errors.values())
    assert n_fast > 100  # the stream exercised the fast path
    assert st.errors["stale_slot"] and st.errors["future_slot"] and st.errors["malformed"]
    assert st.flow_errors["unknown_host"] and st.flow_errors["reordered"]
    assert any(b["over_slots"] for b in fast.booking()["links"].values())  # both paths booked alike


def _is_fast(frame: bytes) -> bool:
    try:
        return wire.fast_request(wire.unpack_frame(frame), K) is not None
    except wire.WireError:
        return False


def test_fast_fetch_excludes_own_flow_and_job_like_the_reference():
    """The cases of docs/switchemu.md by hand: own schedule left out, same job kept unless exclude_job."""
    for fast in (True, False):
        s = _state(fast, "tor0")
        now = 1_700_000_000.0
        slot = int(now // SLOT_S)

        def send(m, v=1, raw=False):
            out = s.handle_frame(msgpack.packb({"v": v, "id": 1, "slot": slot, **m}), now)
            return out if raw else msgpack.unpackb(out)

        def sched(flow, job, rate):
            return {"flow": flow, "job": job, "src": "h0", "dst": "h2", "seq": 1, "rates_Bps": [rate] * K}

        assert send({"type": "update_schedule", "flows": [sched("a1", "a", 10), sched("a2", "a", 5),
                                                          sched("b1", "b", 1)]})["status"] == 0
        r = send({"type": "fetch_feedback", "flows": [{"flow": "a1", "src": "h0", "dst": "h2"},
                                                       {"flow": "a1", "src": "h0", "dst": "h2", "job": "a"},
                                                       {"flow": "zz", "src": "h0", "dst": "h9"}]})
        own, job, bad = r["flows"]
        assert own["links"] == ["tor0>agg"] and own["load_Bps"] == [[6] * K] and own["path_Bps"] == [6] * K
        # version 2 packs the same rows: both decode alike
        q = {"type": "fetch_feedback", "flows": [{"flow": "a1", "src": "h0", "dst": "h2"},
                                                 {"flow": "a1", "src": "h0", "dst": "h2", "job": "a"},
                                                 {"flow": "zz", "src": "h0", "dst": "h9"}]}
        r1, r2 = (wire.decode_reply(send(q, v, raw=True)) for v in (1, 2))
        assert r1.feedback == r2.feedback and [f.load_Bps for f in r2.feedback] == [((6,) * K,), ((1,) * K,), ()]
        assert (r1.version, r2.version, r2.status) == (1, 2, wire.Code.UNKNOWN_HOST)
        assert job["load_Bps"] == [[1] * K]
        assert bad["status"] == wire.Code.UNKNOWN_HOST and r["status"] == wire.Code.UNKNOWN_HOST
        assert r["caps"] == {"tor0>agg": 500 * 10**6 // 8}
        # a new schedule replaces the old one; an older seq is refused per flow
        assert send({"type": "update_schedule", "flows": [{**sched("a2", "a", 7), "seq": 2}]})["status"] == 0
        r = send({"type": "update_schedule", "flows": [sched("a2", "a", 99)]})
        assert r["flow_status"] == [wire.Code.REORDERED]
        r = send({"type": "fetch_feedback", "flows": [{"flow": "a1", "src": "h0", "dst": "h2"}]})
        assert r["flows"][0]["load_Bps"] == [[8] * K]


@pytest.mark.parametrize("fast", [True, False])
def test_every_reply_carries_the_clock_the_switch_read(fast):
    """``t`` in every reply is the time the switch handled the frame at (a client's clock offset is
    measured from it): fast and reference paths, errors, message-level errors and status."""
    st = SwitchState(Topology.from_toml(RACKS), "all", slot_s=SLOT_S, horizon=K, fast=fast)
    now = 1764345600.0 + 0.0123
    slot = int(now // SLOT_S)
    sched = {"flow": "f", "job": "j", "src": "h0", "dst": "h1", "seq": 1, "rates_Bps": [1] * K}
    frames = [{"type": "update_schedule", "flows": [sched]},
              {"type": "fetch_feedback", "flows": [{"flow": "f", "src": "h0", "dst": "h1"}]},
              {"type": "get_progress", "flows": ["f"]},
              {"type": "fetch_feedback", "flows": [], "slot": slot + 1000},  # future_slot
              {"type": "status"}]
    for i, m in enumerate(frames):
        out = st.handle_frame(msgpack.packb({"v": 2, "id": i, "slot": slot, **m}), now)
        assert msgpack.unpackb(out)["t"] == now, m["type"]
    assert wire.decode_reply(st.handle_frame(msgpack.packb({"v": 2, "id": 9, "slot": slot + 1000,
                                                            "type": "fetch_feedback", "flows": []}), now)).t == now
    (empty,) = st.handle_message([b""] * (wire.MAX_PARTS + 2), now)[1:]
    assert wire.decode_reply(empty).t == now
