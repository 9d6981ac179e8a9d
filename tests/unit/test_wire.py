"""Wire protocol (hostctl.core.wire): round trips and rejection of every malformed kind."""

from __future__ import annotations

import math

from dataclasses import replace

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
ranks = st.none() | st.integers(0, 2**64 - 1)
scheds = st.builds(wire.FlowSchedule, ids, ids, ids, ids, st.integers(0, 2**64 - 1), rates.map(tuple), links, ranks)
queries = st.builds(wire.FlowQuery, ids, ids, ids, links, st.none() | ids, ranks)
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


@pytest.mark.parametrize("v", wire.WIRE_VERSIONS)
def test_reply_round_trips(v):
    fb = wire.Reply("fetch_feedback", 5, 0, 99, slot=99, slot_s=0.06, horizon=2, capacities_Bps={"sw>h1": 10},
                    feedback=(wire.FlowFeedback("f", 0, ("sw>h1",), ((1, 2),), (1, 2)),
                              wire.FlowFeedback("g", 7),
                              wire.FlowFeedback("h", 0, ("sw>h1", "sw>h2"), ((1, 2), (0, 2**40)), (1, 2**40 + 2)),
                              wire.FlowFeedback("i", 0, (), (), (0, 0))),
                    notifications=(wire.Notification("h1", "f", "j", 5, 98, "h0"),), version=v)
    assert wire.decode_reply(wire.encode_reply(fb)) == fb
    pr = wire.Reply("get_progress", 6, 0, 99, progress=(wire.FlowProgress("f", "j", 10, 2.5, 98, "h0"),), version=v)
    assert wire.decode_reply(wire.encode_reply(pr)) == pr
    up = wire.Reply("update_schedule", 7, 7, 99, flow_status=(0, 7), version=v)
    assert wire.decode_reply(wire.encode_reply(up)) == up
    err = wire.decode_reply(wire.error_reply(Code.STALE_SLOT, "late", 8, 99))
    assert (err.type, err.req_id, err.status, err.slot_now, err.message, err.version) == (
        "error", 8, 5, 99, "late", wire.ERROR_VERSION)


@pytest.mark.parametrize("v", wire.WIRE_VERSIONS)
def test_the_switch_clock_t_round_trips_and_is_optional(v):
    """``t`` (the switch's clock) goes with every reply type; a reply without it (an older switch)
    decodes to t=None; anything but a finite number is malformed."""
    for r in (wire.Reply("fetch_feedback", 5, 0, 99, slot=99, slot_s=0.06, horizon=1, version=v, t=1764345600.123456),
              wire.Reply("get_progress", 6, 0, 99, version=v, t=5.0),
              wire.Reply("update_schedule", 7, 0, 99, version=v, t=0.25)):
        assert wire.decode_reply(wire.encode_reply(r)) == r
        assert wire.decode_reply(wire.encode_reply(replace(r, t=None))).t is None
    err = wire.decode_reply(wire.error_reply(Code.FUTURE_SLOT, "ahead", 8, 99, 1234.5))
    assert (err.status, err.t) == (Code.FUTURE_SLOT, 1234.5)
    assert wire.error_reply(Code.FUTURE_SLOT, "ahead", 8, 99, 1234.5) == wire.encode_reply(
        wire.Reply("error", 8, int(Code.FUTURE_SLOT), 99, message="ahead", t=1234.5))
    base = msgpack.unpackb(wire.encode_reply(wire.Reply("update_schedule", 7, 0, 99, version=v)))
    for bad in ("1.0", float("nan"), float("inf"), [1.0], True):
        with pytest.raises(wire.WireError) as e:
            wire.decode_reply(msgpack.packb({**base, "t": bad}))
        assert e.value.code == Code.MALFORMED


def test_every_reply_keeps_its_request_version_except_errors():
    """A version 1 client (an older daemon) gets version 1 replies it can read; errors are version 1."""
    for v in (1, 2):
        m = msgpack.unpackb(wire.encode_reply(wire.Reply("fetch_feedback", 1, 0, 9, slot=9, slot_s=0.06, horizon=2,
                                                         version=v)))
        assert m["v"] == v and ("loads_Bps" in m) == (v == 2)
        assert msgpack.unpackb(wire.encode_reply(wire.Reply("error", 1, 3, 9, message="x", version=v)))["v"] == 1


feedbacks = st.integers(1, 4).flatmap(lambda k: st.tuples(st.just(k), st.lists(st.one_of(
    st.builds(lambda f, code: wire.FlowFeedback(f, code), ids, st.integers(1, 11)),  # refused
    st.lists(st.tuples(ids, st.tuples(*[st.integers(0, wire.MAX_LOAD_Bps)] * k)), max_size=4,
             unique_by=lambda x: x[0]).map(
        lambda rows: ("ok", tuple(r[0] for r in rows), tuple(r[1] for r in rows))),
), max_size=6)))


@settings(max_examples=300, deadline=None)
@given(feedbacks, ids)
def test_v2_feedback_decodes_as_v1(kf, fid):
    """The same feedback sent in either version decodes to the same rows and path sums."""
    k, items = kf
    fb = []
    for i, x in enumerate(items):
        if isinstance(x, wire.FlowFeedback):
            fb.append(x._replace(flow_id=f"{fid}{i}"))
        else:
            _, links, rows = x
            fb.append(wire.FlowFeedback(f"{fid}{i}", 0, links, rows,
                                        tuple(map(sum, zip(*rows))) if rows else (0,) * k))
    got = [wire.decode_reply(wire.encode_reply(wire.Reply("fetch_feedback", 5, 0, 9, slot=9, slot_s=0.06, horizon=k,
                                                          feedback=tuple(fb), version=v))) for v in (1, 2)]
    assert got[0].feedback == got[1].feedback == tuple(fb)
    assert (got[0].version, got[1].version) == (1, 2)


def _v2(**over) -> dict:
    m = {"v": 2, "type": "fetch_feedback", "id": 5, "status": 0, "slot_now": 9, "slot": 9, "slot_s": 0.06, "K": 2,
         "caps": {}, "notify": [], "flows": [["f", 0, ["sw>h1"]], ["g", 9, []], ["h", 0, ["a", "b"]]],
         "loads_Bps": wire.pack_rows([(1, 2), (3, 4), (5, 6)])}
    m.update(over)
    return m


@pytest.mark.parametrize("over", [
    {"loads_Bps": wire.pack_rows([(1, 2), (3, 4)])},  # a row short
    {"loads_Bps": wire.pack_rows([(1, 2), (3, 4), (5, 6)]) + b"\0"},  # not whole int64s
    {"loads_Bps": wire.pack_rows([(1, 2), (3, 4), (5, -6)])},
    {"loads_Bps": wire.pack_rows([(1, 2), (3, 4), (5, wire.MAX_LOAD_Bps + 1)])},
    {"loads_Bps": [[1, 2], [3, 4], [5, 6]]},  # version 1's rows in a version 2 reply
    {"loads_Bps": "x" * 48},
    {"K": 3}, {"K": 0}, {"K": None}, {"K": True},
    {"flows": [["f", 0, ["sw>h1"]], ["g", 9, []], ["h", 0, ["a", 7]]]},
    {"flows": [["f", 0, ["sw>h1"]], ["g", 9, []], ["h", 0, "ab"]]},
    {"flows": [["f", 0, ["sw>h1"]], ["g", 9], ["h", 0, ["a", "b"]]]},
    {"flows": [["f", 0, ["sw>h1"]], [b"g", 9, []], ["h", 0, ["a", "b"]]]},
    {"flows": [["f", 0, ["sw>h1"]], ["g", True, []], ["h", 0, ["a", "b"]]]},
    {"flows": [["f", 0, ["sw>h1"]], {"flow": "g"}, ["h", 0, ["a", "b"]]]},
    {"flows": {"f": 0}},
    {"flows": []},  # rows without flows
])
def test_a_malformed_v2_feedback_is_refused(over):
    """Version 2's rows arrive as one block of bytes: its size must fit the flows' links and K exactly,
    and the values must be loads; anything else refuses the whole reply."""
    ok = wire.decode_reply(pack(_v2()))
    assert [f.load_Bps for f in ok.feedback] == [((1, 2),), (), ((3, 4), (5, 6))]
    assert [f.path_load_Bps for f in ok.feedback] == [(1, 2), (), (8, 10)]
    with pytest.raises(WireError) as e:
        wire.decode_reply(pack(_v2(**over)))
    assert e.value.code == Code.MALFORMED


@pytest.mark.parametrize("entry", [
    {"flow": 3},  # not a str
    {"status": "0"},
    {"status": True},  # (a bool is no status)
    {"links": ["sw>h1", 4]},
    {"links": "sw>h1"},
    {"load_Bps": [[1, 2], [3, 4]]},  # two rows for one link
    {"load_Bps": [[1, 2.5]]},
    {"load_Bps": [[1]]},  # not K values
    {"load_Bps": [{"a": 1}]},
    {"path_Bps": [1, "2"]},
    {"path_Bps": 3},
])
def test_a_malformed_v1_feedback_entry_is_refused(entry):
    """The client keeps a reply's feedback rows as msgpack made them, so the types are checked at once:
    a bad entry among good ones makes the whole reply malformed (the daemon treats it as no answer)."""
    good = {"flow": "f", "status": 0, "links": ["sw>h1"], "load_Bps": [[1, 2]], "path_Bps": [1, 2]}
    m = {"v": 1, "type": "fetch_feedback", "id": 5, "status": 0, "slot_now": 9, "slot": 9,
         "slot_s": 0.06, "K": 2, "caps": {}, "notify": [], "flows": [good, {**good, "flow": "g", **entry}]}
    assert wire.decode_reply(pack({**m, "flows": [good, {**good, "flow": "g"}]})).feedback[1].load_Bps == ((1, 2),)
    with pytest.raises(WireError) as e:
        wire.decode_reply(pack(m))
    assert e.value.code == Code.MALFORMED


@pytest.mark.parametrize("frame, code", [
    (b"", Code.MALFORMED),
    (b"\xc1", Code.MALFORMED),  # never-used msgpack byte
    (pack([1, 2]), Code.MALFORMED),  # not a map
    (pack(upd()) + b"\x00", Code.MALFORMED),  # trailing bytes
    (pack(upd())[:-3], Code.MALFORMED),  # truncated
    (b"\x81\x01\x02", Code.MALFORMED),  # int map key
    (b"\xa2\xff\xfe", Code.MALFORMED),  # invalid UTF-8
    (b"\x91" * 5000 + b"\xc0", Code.MALFORMED),  # deep nesting
    (pack(upd(v=3)), Code.UNKNOWN_VERSION),
    (pack(upd(v=0)), Code.UNKNOWN_VERSION),
    (pack(upd(v=True)), Code.MALFORMED),
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
                        "rates_Bps", "links", "rank", "status", "slot_now", "caps", "K", "notify", "progress"])


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


# ---------------------------------------------------------------------- the switch's fast path


def _fast_view(req: Request) -> tuple:
    """What ``fast_request`` returns for a valid update_schedule / fetch_feedback ``req``."""
    if req.type == "update_schedule":
        items = [(f.flow_id, f.job_id, f.src, f.dst, f.seq, list(f.rates_Bps), f.links, f.rank) for f in req.flows]
    else:
        items = [(f.flow_id, f.src, f.dst, f.links, f.job_id, f.rank, f.arrival) for f in req.flows]
    return (req.type, req.req_id, req.slot, req.host, items, req.version)


queries_job = st.builds(wire.FlowQuery, ids, ids, ids, links, st.none() | ids, ranks, st.booleans())
fast_requests = st.one_of(
    st.builds(Request, st.just("update_schedule"), st.integers(0, 2**64 - 1), st.integers(0, 2**62 - 1),
              st.none() | ids, st.lists(scheds, max_size=4).map(tuple)),
    st.builds(Request, st.just("fetch_feedback"), st.integers(0, 2**64 - 1), st.integers(0, 2**62 - 1),
              st.none() | ids, st.lists(queries_job, max_size=4).map(tuple)),
)


def _fast_agrees(m: dict) -> None:
    """fast_request accepts exactly the valid update_schedule / fetch_feedback maps, with their content."""
    got = wire.fast_request(m, K)
    try:
        req = wire.request_from_map(m, K)
    except WireError:
        assert got is None, m
        return
    if req.type in ("update_schedule", "fetch_feedback"):
        assert got == _fast_view(req)
    else:
        assert got is None


@settings(max_examples=300, deadline=None)
@given(st.one_of(fast_requests, requests))
def test_fast_request_accepts_every_valid_update_and_fetch(req):
    m = wire.unpack_frame(wire.encode_request(req))
    _fast_agrees(m)
    if req.type in ("update_schedule", "fetch_feedback"):
        assert wire.fast_request(m, K) == _fast_view(req)


@settings(max_examples=1000, deadline=None)
@given(fast_requests, st.data())
def test_fast_request_rejects_what_the_validator_rejects(req, data):
    """One random change to a valid frame (a key set to any msgpack value, or removed, at the top,
    in an item or in its rates/links): the fast path never accepts a frame the validator refuses."""
    m = wire.unpack_frame(wire.encode_request(req))
    targets = [m]
    for d in m.get("flows", []):
        targets.append(d)
        for k in ("rates_Bps", "links"):
            if isinstance(d.get(k), list) and d[k]:
                targets.append(d[k])
    for _ in range(data.draw(st.integers(1, 3))):
        t = data.draw(st.sampled_from(targets))
        if isinstance(t, list):
            t[data.draw(st.integers(0, len(t) - 1))] = data.draw(values | st.sampled_from(
                [math.nan, math.inf, -0.0, True, 10**12, 10**12 + 1, 2**64 - 1, "x" * 129]))
        elif data.draw(st.booleans()) and t:
            del t[data.draw(st.sampled_from(sorted(t)))]
        else:
            t[data.draw(keys | st.text(max_size=5))] = data.draw(values)
    _fast_agrees(m)


@settings(max_examples=300, deadline=None)
@given(st.dictionaries(keys, values, max_size=8), st.sampled_from(["update_schedule", "fetch_feedback"]))
def test_fast_request_on_random_maps(m, t):
    for v in (1, 2):
        _fast_agrees({**m, "v": v, "type": t})


BAD_RATES = [-1, -0.5, math.nan, math.inf, -math.inf, True, False, None, "1", b"1", [1], {}, wire.MAX_RATE_Bps + 1,
             wire.MAX_RATE_Bps + 0.5, 2**64 - 1]
BAD_STRS = ["", "x" * (wire.MAX_STR + 1), 5, 1.5, True, None, b"h0", ["h0"], {}]


@pytest.mark.parametrize("where", range(K))
@pytest.mark.parametrize("bad", BAD_RATES, ids=repr)
def test_fast_request_refuses_each_bad_rate(bad, where):
    m = upd()
    m["flows"][0]["rates_Bps"][where] = bad
    if where == 0:
        m["flows"].insert(0, upd()["flows"][0])  # not only in the first item
    _fast_agrees(m)
    assert wire.fast_request(m, K) is None


@pytest.mark.parametrize("field", ["flow", "job", "src", "dst", "host", "links0"])
@pytest.mark.parametrize("bad", BAD_STRS, ids=repr)
def test_fast_request_refuses_each_bad_string(field, bad):
    for m in (upd(), {"v": 1, "type": "fetch_feedback", "id": 3, "slot": 9, "host": "h0",
                      "flows": [{"flow": "f", "src": "h0", "dst": "h1", "job": "j", "links": ["a>b"]}]}):
        if field == "host":
            m["host"] = bad
        elif field == "links0":
            m["flows"][0]["links"] = [bad]
        else:
            m["flows"][0][field] = bad
        _fast_agrees(m)  # refused by both (None is a valid host, and a valid job of a fetch: accepted by both)


@pytest.mark.parametrize("links", [["a", "a"], ["l"] * (wire.MAX_LINKS + 1), "a>b", [], None, ["a", "b"]])
def test_fast_request_links(links):
    m = upd(flow={"links": links})
    _fast_agrees(m)
    assert (wire.fast_request(m, K) is None) == (links not in ([], None, ["a", "b"]))


@pytest.mark.parametrize("req_id, slot_now", [(None, None), (7, 99), (2**64 - 1, 2**40)])
@pytest.mark.parametrize("message", ["", "late", "x" * 300])
def test_error_reply_is_encode_reply_of_an_error(req_id, slot_now, message):
    for code in (Code.MALFORMED, Code.STALE_SLOT, 11):
        assert wire.error_reply(code, message, req_id, slot_now) == wire.encode_reply(
            wire.Reply("error", req_id, int(code), slot_now, message=message[:200]))


@pytest.mark.parametrize("rank", [-1, 2**64, True, 1.5, "1", [1], None, 0, 2**64 - 1, 7])
def test_fast_request_rank(rank):
    """A schedule's or a query's job rank: an optional uint; fast and full decoders agree."""
    ok = rank is None or (type(rank) is int and 0 <= rank < 2**64)
    for m in (upd(flow={"rank": rank}), {"v": 1, "type": "fetch_feedback", "id": 3, "slot": 9, "host": "h0",
                                          "flows": [{"flow": "f", "src": "h0", "dst": "h1", "job": "j", "rank": rank}]}):
        _fast_agrees(m)
        got = wire.fast_request(m, K)
        assert (got is not None) == ok
        if ok:
            assert got[4][0][-1 if "rates_Bps" in m["flows"][0] else -2] == rank
