"""The pacer's per-slot reads without a kernel: the ring buffer consumer's record walk
(bpfsys.ring_take) on a buffer laid out as the kernel maps a BPF ring buffer, the burst
columns (BurstBatch) and the flow rows built from a batch read (pacer._records)."""

from __future__ import annotations

import random
import struct

import numpy as np
import pytest

from hostctl.core.types import FlowKey
from hostctl.datapath import Burst, BurstBatch, FlowRecord, bpfsys, pacer

PAGE = 4096
DATA = 1024  # data area of the fake ring (a power of two)
SIZE = pacer._BURST_SIZE
STRIDE = (SIZE + bpfsys.RINGBUF_HDR + 7) & ~7


class FakeRing:
    """The producer side of a ring buffer as user space sees it: a page, then the data area
    mapped twice in a row (a write to the data shows in both copies)."""

    def __init__(self) -> None:
        self.buf = bytearray(PAGE + 2 * DATA)
        self.prod = 0

    def _write(self, pos: int, raw: bytes) -> None:
        for k, byte in enumerate(raw):
            o = (pos + k) % DATA
            self.buf[PAGE + o] = self.buf[PAGE + DATA + o] = byte

    def put(self, sample: bytes, *, busy: bool = False, discard: bool = False) -> None:
        ln = len(sample) | (bpfsys.RINGBUF_BUSY if busy else 0) | (bpfsys.RINGBUF_DISCARD if discard else 0)
        total = (len(sample) + bpfsys.RINGBUF_HDR + 7) & ~7
        self._write(self.prod, struct.pack("=II", ln, 0) + sample.ljust(total - bpfsys.RINGBUF_HDR, b"\0"))
        self.prod += total

    def commit_at(self, pos: int, size: int) -> None:
        self._write(pos, struct.pack("=I", size))

    def take(self, cons: int):
        return bpfsys.ring_take(self.buf, PAGE, DATA - 1, cons, self.prod, SIZE)


def burst(key: FlowKey, k: int) -> bytes:
    return bytes(pacer.key_bytes(key)) + struct.pack("=3QII", 1000 + k, 2000 + k, 300 + k, k % 7, 0)


KEYS = [FlowKey("10.0.0.1", 7100, "10.0.0.2", 40000 + i) for i in range(5)]


def expect(ks: list[int]) -> list[Burst]:
    return [Burst(KEYS[k % 5], k % 7, 1000 + k, 2000 + k, 300 + k) for k in ks]


def test_ring_take_reads_committed_records_in_order_across_the_wrap():
    ring, cons, seen = FakeRing(), 0, []
    k = 0
    for rnd in range(40):  # 40 rounds of 0..5 records: the 1 KiB area wraps many times
        for _ in range(rnd % 6):
            ring.put(burst(KEYS[k % 5], k))
            k += 1
        raw, n, cons, skipped = ring.take(cons)
        assert skipped == 0 and cons == ring.prod and len(raw) == n * STRIDE
        seen += list(pacer._burst_batch(raw, n)) if n else []
    assert cons > 4 * DATA
    assert seen == expect(list(range(k)))


def test_ring_take_stops_at_a_record_not_committed_yet_and_skips_others():
    ring = FakeRing()
    ring.put(burst(KEYS[0], 0))
    ring.put(b"x" * 12, discard=True)  # discarded by the program: skipped silently
    ring.put(b"y" * 20)  # another size: skipped and counted
    ring.put(burst(KEYS[1], 1))
    busy_at = ring.prod
    ring.put(burst(KEYS[2], 2), busy=True)  # reserved, not committed: the read stops there
    ring.put(burst(KEYS[3], 3))
    raw, n, cons, skipped = ring.take(0)
    assert (n, skipped, cons) == (2, 1, busy_at)
    assert list(pacer._burst_batch(raw, n)) == expect([0, 1])
    ring.commit_at(busy_at, SIZE)
    raw, n, cons, skipped = ring.take(cons)
    assert (n, skipped, cons) == (2, 0, ring.prod)
    assert list(pacer._burst_batch(raw, n)) == expect([2, 3])


def test_ring_take_with_nothing_new():
    ring = FakeRing()
    assert ring.take(0) == (b"", 0, 0, 0)


def test_burst_batch_is_a_sequence_of_bursts():
    bs = expect([0, 1, 2, 9])
    batch = BurstBatch.of(bs)
    assert BurstBatch.of(batch) is batch
    assert len(batch) == 4 and batch == bs and list(batch) == bs and batch[3] == bs[3] and batch[1:3] == bs[1:3]
    assert batch != bs[:3] and batch != expect([0, 1, 2, 8])
    assert BurstBatch.of([]) == [] and not BurstBatch.of([])
    assert [b.key for b in batch if b.key == KEYS[0]] == [KEYS[0]]
    assert batch.start_ns.tolist() == [b.start_ns for b in bs] and batch.nbytes.dtype == np.uint64
    with pytest.raises(ValueError):
        BurstBatch(KEYS[:2], batch.slot, batch.start_ns, batch.end_ns, batch.nbytes)


def test_flow_rows_from_a_batch_read_are_the_field_by_field_rows():
    rnd = random.Random(7)
    keys = [FlowKey(f"10.0.{i}.1", 7100 + i, f"fd00::{i:x}", 40000 + i) for i in range(30)]
    vals = [tuple(rnd.randrange(1 << 63) for _ in range(8)) + tuple(rnd.randrange(1 << 32) for _ in range(8))
            for _ in keys]
    got = pacer._records(b"".join(bytes(pacer.key_bytes(k)) for k in keys),
                         b"".join(pacer._FLOW.pack(*v) for v in vals))
    assert got == [pacer._row(pacer.key_of(pacer.key_bytes(k)), v) for k, v in zip(keys, vals)]
    assert all(type(r) is FlowRecord for r in got) and got[3].slot == vals[3][8] and got[3].key == keys[3]
    assert got[4].key == FlowKey("10.0.4.1", 7104, "fd00::4", 40004)
    assert got[5].bytes_acked == vals[5][0] and got[5].setopt_errors == vals[5][15]
