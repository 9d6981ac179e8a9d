"""benchmarks/bench_switchemu.py's load generator: pre-encoded frames and its ZMTP DEALER peers.

The generator must send exactly what the old per-exchange path (``exchange_frames`` ->
``wire.encode_request``) sent, and its plain-socket ZMTP peers must talk to a real libzmq ROUTER.
"""

from __future__ import annotations

import importlib.util
import os
import random
import time

import msgpack
import pytest

from hostctl.core import wire

_PATH = os.path.join(os.path.dirname(__file__), "..", "..", "benchmarks", "bench_switchemu.py")
_spec = importlib.util.spec_from_file_location("bench_switchemu", _PATH)
bench = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(bench)

PACK = msgpack.Packer(use_bin_type=True).pack
K = bench.K


def old_path(rates, seq: int, slot: int, host: int, n_hosts: int) -> tuple[bytes, bytes]:
    """``exchange_frames`` with the rates given instead of drawn."""
    src, dst = f"h{host}", f"h{(host + 1) % n_hosts}"
    flow = f"{src}>{dst}"
    upd = wire.encode_request(wire.Request("update_schedule", seq * 2, slot, src,
                                           (wire.FlowSchedule(flow, f"j{host % 50}", src, dst, seq, tuple(rates)),)))
    fet = wire.encode_request(wire.Request("fetch_feedback", seq * 2 + 1, slot, src,
                                           (wire.FlowQuery(flow, src, dst),)))
    return upd, fet


def test_exchange_frames_draws_like_the_daemon_frames():
    # same rng sequence: exchange_frames draws K rates per call, DaemonFrames draws VARIANTS x K up front
    a, b = random.Random(7), random.Random(7)
    g = bench.DaemonFrames(b, 3, 1000)
    for v in range(bench.DaemonFrames.VARIANTS):
        upd, fet = bench.exchange_frames(a, 5, 123, 3, 1000)
        assert g.frames(PACK, 5, 123, v) == (upd, fet)


@pytest.mark.parametrize("host,n_hosts", [(0, 1000), (999, 1000), (42, 1000), (7, 8)])
def test_pre_encoded_frames_are_byte_identical_and_decode(host, n_hosts):
    rng = random.Random(host)
    g = bench.DaemonFrames(rng, host, n_hosts)
    slot0 = int(1.79e9 // bench.SLOT_S)
    # ids across msgpack's int widths (fixint, uint8/16/32/64) and slots around the current time
    for seq, slot in [(0, 0), (1, slot0), (63, slot0 + 1), (200, slot0 + 2), (40_000, slot0), (3_000_000_000, slot0 + 9),
                      (2**62, 2**62 - 1)]:
        for v in range(g.VARIANTS):
            upd, fet = g.frames(PACK, seq, slot, v)
            assert (upd, fet) == old_path(g.rates[v], seq, slot, host, n_hosts)
            ru = wire.decode_request(upd, horizon=K)
            rf = wire.decode_request(fet, horizon=K)
            src, dst = f"h{host}", f"h{(host + 1) % n_hosts}"
            assert ru == wire.Request("update_schedule", seq * 2, slot, src,
                                      (wire.FlowSchedule(f"{src}>{dst}", f"j{host % 50}", src, dst, seq,
                                                         tuple(g.rates[v])),))
            assert rf == wire.Request("fetch_feedback", seq * 2 + 1, slot, src, (wire.FlowQuery(f"{src}>{dst}", src, dst),))
            # the switch's fast path takes them too
            assert wire.fast_request(msgpack.unpackb(upd), K) is not None
            assert wire.fast_request(msgpack.unpackb(fet), K) is not None


def test_patching_changes_only_id_slot_seq_rates_and_earlier_frames_stay():
    g = bench.DaemonFrames(random.Random(1), 10, 1000)
    assert all(len(r) == K and all(10**6 <= x < 10**8 for x in r) for r in g.rates)
    assert len({tuple(r) for r in g.rates}) == g.VARIANTS  # real random rates, distinct variants
    first = g.frames(PACK, 1, 100, 0)
    second = g.frames(PACK, 2, 101, 5)
    assert first == old_path(g.rates[0], 1, 100, 10, 1000)  # bytes already handed out are not affected
    u1, u2 = wire.decode_request(first[0], horizon=K), wire.decode_request(second[0], horizon=K)
    assert (u2.req_id, u2.slot, u2.flows[0].seq, u2.flows[0].rates_Bps) == (4, 101, 2, tuple(g.rates[5]))
    assert (u1.req_id, u1.slot, u1.flows[0].seq) == (2, 100, 1)
    f2 = wire.decode_request(second[1], horizon=K)
    assert (f2.req_id, f2.slot) == (5, 101)


def test_zmtp_frames_encoding():
    short, long_ = b"a" * 255, b"b" * 256
    data = bench.zmtp_frames((short, long_))
    assert data[:2] == b"\x01\xff" and data[2:257] == short
    assert data[257:266] == b"\x02" + (256).to_bytes(8, "big") and data[266:] == long_
    assert bench.zmtp_frames((b"x",)) == b"\x00\x01x"


def test_zmtp_peers_talk_to_a_libzmq_router():
    zmq = pytest.importorskip("zmq")
    ctx = zmq.Context()
    router = ctx.socket(zmq.ROUTER)
    router.linger = 0
    port = router.bind_to_random_port("tcp://127.0.0.1")
    peers = bench.ZmtpPeers(f"tcp://127.0.0.1:{port}", 3)
    try:
        big = b"z" * 300  # a long frame (> 255 bytes) both ways
        for i in range(3):
            peers.send(i, f"upd{i}".encode(), big)
        got = {}
        for _ in range(3):
            assert router.poll(2000)
            ident, *parts = router.recv_multipart()
            got[parts[0]] = (ident, parts)
        assert sorted(got) == [b"upd0", b"upd1", b"upd2"]
        assert all(p[1] == big for _, p in got.values())
        t_send = time.time()
        for name, (ident, _) in got.items():
            router.send_multipart([ident, b"r-" + name, big])
        replies = []
        deadline = time.monotonic() + 2
        while len(replies) < 3 and time.monotonic() < deadline:
            replies += peers.wait(50, {0: None, 1: None, 2: None}, True)
        assert sorted((i, parts) for i, parts, _ in replies) == [(i, [f"r-upd{i}".encode(), big]) for i in range(3)]
        # receive times: kernel timestamps on the send clock (wall), after the send
        assert all(t_send - 0.01 <= t <= time.time() for _, _, t in replies)
    finally:
        peers.close()
        router.close(0)
        ctx.term()
