"""MlccControl's reading of refused answers (logic only; the real switchemu is in
tests/integration/test_mlcc_switch_faults.py): a refused slot is silence, logged with the offset at
most every REFUSAL_LOG_S per switch; a switch that sends no clock is described by its slot."""

from __future__ import annotations

import logging
import time

import pytest

import hostctl.policy.mlcc as mlcc
from hostctl.core import wire
from hostctl.core.types import FlowKey
from hostctl.policy.mlcc import SILENT_SLOTS, FlowIn, MlccControl
from hostctl.policy.switchclient import ExchangeResult

C = 1_000_000_000 // 8
SLOT = 0.06
KEY = FlowKey("10.0.0.1", 5000, "10.0.1.2", 9000)


class RefusingSwitch:
    """Two endpoints: ``a`` refuses every frame with future_slot (without its clock, as a switch from
    before replies carried one), ``b`` answers unless ``b_down``, its clock 2 ms ahead of the host's
    (``wall``; the client measures offsets against time.time())."""

    endpoints = ["a", "b"]

    def __init__(self, wall):
        self.wall = wall
        self.b_down = False

    def exchange(self, slot, **_kw) -> ExchangeResult:
        res = ExchangeResult(slot=slot, latency_s={"a": 1e-4}, slot_now={"a": slot - 50},
                             errors={"a": "future_slot: ahead"}, error_codes={"a": int(wire.Code.FUTURE_SLOT)})
        if not self.b_down:
            res.latency_s["b"] = 1e-4
            res.clock_offset_s["b"] = self.wall() + 0.002 - time.time()
        return res


def test_answered_leaves_out_endpoints_that_refused():
    res = ExchangeResult(slot=1, latency_s={"a": 1e-4, "b": 1e-4, "c": 1e-4}, errors={"b": "stale_slot: x", "d": "timeout"})
    assert res.answered == ["a", "c"]


def test_refusals_are_silence_logged_by_slot_at_most_once_a_period(monkeypatch, caplog):
    t = [1_000_000.5 * SLOT]
    sw = RefusingSwitch(lambda: t[0])
    ctl = MlccControl(C, SLOT, switch=sw, wall=lambda: t[0])
    fl = [FlowIn(KEY, "ja", 20 * C * SLOT, C, 0.0, True)]
    with caplog.at_level(logging.WARNING, logger="hostctl"):
        for _ in range(SILENT_SLOTS + 1):
            ctl.tick(fl)
            t[0] += SLOT
        assert ctl.mode == "switch"  # b answers: one switch's refusals are its paths' business
        said = [r.getMessage() for r in caplog.records if "refuses this host's slots" in r.getMessage()]
        assert len(said) == 1 and "this host is at slot 1000000, the switch at 999950" in said[0]
        st = ctl.status()
        assert st["switch_silent_slots"] == {"a": SILENT_SLOTS + 1, "b": 0}
        assert st["switch_clock_offset_ms"] == {"b": pytest.approx(2.0, abs=0.5)}  # a sends no clock

        sw.b_down = True  # b is gone too: nobody answers -> local mode
        for _ in range(SILENT_SLOTS):
            ctl.tick(fl)
            t[0] += SLOT
        assert ctl.mode == "local" and ctl.fallbacks == 1

        monkeypatch.setattr(mlcc, "REFUSAL_LOG_S", 0.0)  # the period has passed: said again, with the count
        caplog.clear()
        ctl.tick(fl)
        said = [r.getMessage() for r in caplog.records if "refuses this host's slots" in r.getMessage()]
        assert len(said) == 1 and f"({2 * SILENT_SLOTS} more refusals since the last report)" in said[0]
