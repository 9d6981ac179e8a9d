"""Wire protocol (hostctl.core.wire): round trips and rejection of every malformed kind."""

from __future__ import annotations

import math

import msgpack
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from hostctl.core import wire
from hostctl.core.wire import Code, Request, WireError

K = 10


def pack(m) -> bytes:
    return msgpack.packb(m, use_bin_type=True)


def upd(**over) -> dict:
    flow = {"flow": "f1", "job": "j", "src": "h0", "dst": "h1", "seq": 3, "rates_Bps": [1.5] * K}
    flow.update(over.pop("flow", {}))
    m = {"v": 1, "type": "update_schedule", "id": 7, "slot": 1000, "host": "h0", "flows": [flow]}
    m.update(over)
    return m


def code_of(frame: bytes) -> Code:
    with pytest.raises(WireError) as e:
        wire.decode_request(frame, horizon=K)
    return e.value.code


ids = st.text(min_size=1, max_size=20)
rates = st.lists(st.one_of(st.integers(0, wire.MAX_RATE_Bps), st.floats(0, 1e12)), min_size=K, max_size=K)
links = st.none() | st.lists(ids, max_size=4, unique=True).map(tuple)
scheds = st.builds(wire.FlowSchedule, ids, ids, ids, ids, st.integers(0, 2**64 - 1), rates.map(tuple), links)
queries = st.builds(wire.FlowQuery, ids, ids, ids, links)
progs = st.builds(wire.FlowProgress, ids, ids, st.integers(0, 2**62), st.floats(0, 1e12))
notes = st.builds(wire.Notification, ids, ids, ids, st.integers(0, 2**62))
requests = st.one_of(
    st.builds(Request, st.just("update_schedule"), st.integers(0, 2**64 - 1), st.integers(0, 2**40), st.none() | ids,
              st.lists(scheds, max_size=5).map(tuple)),
    st.builds(Request, st.just("fetch_feedback"), st.integers(0, 2**64 - 1), st.integers(0, 2**40), st.none() | ids,
              st.lists(queries, max_size=5).map(tuple)),
    st.builds(Request, st.just("report_progress"), st.integers(0, 2**64 - 1), st.integers(0, 2**40), st.none() | ids,
              st.lists(progs, max_size=5).map(tuple)),
    st.builds(Request, st.just("get_progress"), st.integers(0, 2**64 - 1), st.integers(0, 2**40), st.none() | ids,
              st.lists(ids, max_size=5).map(tuple)),
    st.builds(Request, st.just("notify"), st.integers(0, 2**64 - 1), st.integers(0, 2**40), st.none() | ids,
              st.lists(notes, max_size=5).map(tuple)),
)


@settings(max_examples=300, deadline=None)
@given(requests)
def test_request_round_trip(req):
    assert wire.decode_request(wire.encode_request(req), horizon=K) == req


def test_reply_round_trips():
    fb = wire.Reply("fetch_feedback", 5, 0, 99, slot=99, slot_s=0.06, horizon=2, capacities_Bps={"sw>h1": 10},
                    feedback=(wire.FlowFeedback("f", 0, ("sw>h1",), ((1, 2),), (1, 2)),
                              wire.FlowFeedback("g", 7)),
                    notifications=(wire.Notification("h1", "f", "j", 5, 98, "h0"),))
    assert wire.decode_reply(wire.encode_reply(fb)) == fb
    pr = wire.Reply("get_progress", 6, 0, 99, progress=(wire.FlowProgress("f", "j", 10, 2.5, 98, "h0"),))
    assert wire.decode_reply(wire.encode_reply(pr)) == pr
    up = wire.Reply("update_schedule", 7, 7, 99, flow_status=(0, 7))
    assert wire.decode_reply(wire.encode_reply(up)) == up
    err = wire.decode_reply(wire.error_reply(Code.STALE_SLOT, "late", 8, 99))
    assert (err.type, err.req_id, err.status, err.slot_now, err.message) == ("error", 8, 5, 99, "late")


@pytest.mark.parametrize("frame, code", [
    (b"", Code.MALFORMED),
    (b"\xc1", Code.MALFORMED),  # never-used msgpack byte
    (pack([1, 2]), Code.MALFORMED),  # not a map
    (pack(upd()) + b"\x00", Code.MALFORMED),  # trailing bytes
    (pack(upd())[:-3], Code.MALFORMED),  # truncated
    (b"\x81\x01\x02", Code.MALFORMED),  # int map key
    (b"\xa2\xff\xfe", Code.MALFORMED),  # invalid UTF-8
    (b"\x91" * 5000 + b"\xc0", Code.MALFORMED),  # deep nesting
    (pack(upd(v=2)), Code.UNKNOWN_VERSION),
    (pack(upd(v="1")), Code.MALFORMED),
    (pack({k: v for k, v in upd().items() if k != "v"}), Code.MALFORMED),
    (pack(upd(type="bogus")), Code.UNKNOWN_TYPE),
    (pack(upd(type=5)), Code.MALFORMED),
    (pack(upd(id=-1)), Code.MALFORMED),
    (pack(upd(id=True)), Code.MALFORMED),
    (pack(upd(id=1.0)), Code.MALFORMED),
    (pack(upd(slot=-5)), Code.MALFORMED),
    (pack(upd(slot="now")), Code.MALFORMED),
    (pack(upd(host="")), Code.MALFORMED),
    (pack(upd(host="x" * 200)), Code.MALFORMED),
    (pack(upd(extra=1)), Code.MALFORMED),
    (pack(upd(flows="f1")), Code.MALFORMED),
    (pack(upd(flows=[upd()["flows"][0]] * (wire.MAX_ITEMS + 1))), Code.OVERSIZED),
    (pack(upd(flow={"rates_Bps": [1.0] * (K - 1)})), Code.MALFORMED),
    (pack(upd(flow={"rates_Bps": [1.0] * (K + 1)})), Code.MALFORMED),
    (pack(upd(flow={"rates_Bps": [math.nan] + [1.0] * (K - 1)})), Code.MALFORMED),
    (pack(upd(flow={"rates_Bps": [math.inf] + [1.0] * (K - 1)})), Code.MALFORMED),
    (pack(upd(flow={"rates_Bps": [-1] + [1.0] * (K - 1)})), Code.MALFORMED),
    (pack(upd(flow={"rates_Bps": [True] + [1.0] * (K - 1)})), Code.MALFORMED),
    (pack(upd(flow={"rates_Bps": ["1"] + [1.0] * (K - 1)})), Code.MALFORMED),
    (pack(upd(flow={"rates_Bps": [wire.MAX_RATE_Bps + 1] + [1.0] * (K - 1)})), Code.MALFORMED),
    (pack(upd(flow={"seq": -1})), Code.MALFORMED),
    (pack(upd(flow={"flow": b"bytes"})), Code.MALFORMED),
    (pack(upd(flow={"links": ["a", "a"]})), Code.MALFORMED),
    (pack(upd(flow={"links": ["l"] * (wire.MAX_LINKS + 1)})), Code.OVERSIZED),
    (pack(upd(flow={"bogus": 1})), Code.MALFORMED),
    (pack(upd(flows=[[1, 2]])), Code.MALFORMED),
    (pack({"v": 1, "type": "notify", "id": 1, "slot": 5, "items": [{"to": "h1", "flow": "f", "job": "j", "F_bytes": -3}]}),
     Code.MALFORMED),
    (pack({"v": 1, "type": "notify", "id": 1, "slot": 5, "flows": []}), Code.MALFORMED),
    (pack({"v": 1, "type": "report_progress", "id": 1, "slot": 5,
           "flows": [{"flow": "f", "job": "j", "cum_bytes": 1.5, "rate_Bps": 1}]}), Code.MALFORMED),
    (pack({"v": 1, "type": "get_progress", "id": 1, "slot": 5, "flows": [3]}), Code.MALFORMED),
    (pack(upd(pad="x" * wire.MAX_FRAME_BYTES)), Code.OVERSIZED),
])
def test_malformed_frames_are_rejected_with_their_code(frame, code):
    assert code_of(frame) == code


def test_error_keeps_the_request_id():
    with pytest.raises(WireError) as e:
        wire.decode_request(pack(upd(v=9, id=42)), horizon=K)
    assert e.value.req_id == 42


@settings(max_examples=500, deadline=None)
@given(st.binary(max_size=300))
def test_random_bytes_only_raise_wireerror(b):
    try:
        wire.decode_request(b, horizon=K)
    except WireError:
        pass
    try:
        wire.decode_reply(b)
    except WireError:
        pass


values = st.recursive(st.none() | st.booleans() | st.integers(-2**70, 2**70).filter(lambda x: -2**63 <= x < 2**64)
                      | st.floats() | st.text(max_size=20) | st.binary(max_size=20),
                      lambda c: st.lists(c, max_size=5) | st.dictionaries(st.text(max_size=10), c, max_size=5),
                      max_leaves=30)
keys = st.sampled_from(["v", "type", "id", "slot", "host", "flows", "items", "flow", "job", "src", "dst", "seq",
                        "rates_Bps", "links", "status", "slot_now", "caps", "K", "notify", "progress"])


@settings(max_examples=500, deadline=None)
@given(st.dictionaries(keys, values, max_size=8), st.sampled_from([None, *wire.REQUEST_TYPES, "error"]))
def test_random_msgpack_maps_only_raise_wireerror(m, t):
    if t is not None:
        m = {**m, "v": 1, "type": t}
    b = pack(m)
    for fn in (lambda: wire.decode_request(b, horizon=K), lambda: wire.decode_reply(b)):
        try:
            fn()
        except WireError as e:
            assert isinstance(e.code, Code)


def test_batch_of_100_flows_is_small():
    req = Request("update_schedule", 1, 10**10, "10.0.0.1",
                  tuple(wire.FlowSchedule(f"10.0.0.1:{4000 + i}>10.0.0.2:9000", "job", "10.0.0.1", "10.0.0.2", 5,
                                          tuple([125_000_000] * K)) for i in range(100)))
    assert len(wire.encode_request(req)) < 25_000
