"""MlccControl's side of Algorithm 2 with a scripted switch: how the peers' progress and the
notifications it receives become references and ceilings (extrapolated to the end of the slot, counted
per iteration), and when it keeps a notification to itself."""

from __future__ import annotations

import math

import pytest

from hostctl.core import wire
from hostctl.core.deps import JobComm, flow_name, ps_name, ring_name
from hostctl.core.types import FlowKey
from hostctl.policy.mlcc import FlowIn, MlccControl
from hostctl.policy.switchclient import ExchangeResult

C = 1_000_000_000 // 8
SLOT = 0.06
S0 = 1_000_000


class ScriptedSwitch:
    """Answers every exchange; the fetch returns the progress and notifications set on it; records
    what the host reports and notifies."""

    host = None

    def __init__(self) -> None:
        self.progress: dict[str, wire.FlowProgress] = {}
        self.notes: list[wire.Notification] = []
        self.reported: list[wire.FlowProgress] = []
        self.notified: list[wire.Notification] = []

    def exchange(self, slot, *, updates=(), fetches=(), progress=(), get_progress=(), notify=(), timeout_s=0.02):
        self.reported += list(progress)
        self.notified += list(notify)
        res = ExchangeResult(slot=slot, latency_s={"fake": 1e-4})
        if fetches:
            res.progress = {n: p for n, p in self.progress.items() if n in get_progress}
            res.notifications, self.notes = self.notes, []
        return res


def ctl() -> tuple[MlccControl, ScriptedSwitch]:
    sw = ScriptedSwitch()
    return MlccControl(C, SLOT, switch=sw, wall=lambda: (S0 + 0.5) * SLOT), sw


RING = {"r": JobComm("ring", frozenset({7000}), 4)}
ME, NXT, PREV = "10.0.0.2", "10.0.0.3", "10.0.0.1"


def test_a_stale_report_is_extrapolated_at_the_peers_planned_rate():
    c, sw = ctl()
    ring = FlowIn(FlowKey(ME, 7000, NXT, 40000), "r", 1e6, C, 0.0, cum_bytes=5e6)
    # two slots old: F 4e6 planned at C/4 since -> by the end of this slot 4e6 + 2 * C/4 * t
    sw.progress[ring_name("r", ME)] = wire.FlowProgress(ring_name("r", ME), "r", 4_000_000, C / 4, S0 - 2, PREV)
    ref = c._dep_inputs(S0, [ring], c._flow_deps([ring], [flow_name(ring.key)], RING))  # before any fetch: nothing
    assert math.isnan(ref["ref_bytes"][0])
    c.tick([ring], RING)
    assert c.progress[ring_name("r", ME)] == (4e6, S0 - 2, C / 4)
    got = c._dep_inputs(S0, [ring], c.deps)["ref_bytes"][0]
    assert got == pytest.approx(4e6 + 2 * C / 4 * SLOT)
    # older than PROGRESS_MAX_AGE: dropped at the next fetch
    sw.progress[ring_name("r", ME)] = wire.FlowProgress(ring_name("r", ME), "r", 4_000_000, C / 4, S0 - 3, PREV)
    c.tick([ring], RING)
    assert ring_name("r", ME) not in c.progress


def test_the_ring_flow_reports_and_notifies_its_successor():
    c, sw = ctl()
    ring = FlowIn(FlowKey(ME, 7000, NXT, 40000), "r", 6e6, C, 2e6, cum_bytes=5e6)  # iteration 8e6: chunk 8e6/6
    c.tick([ring], RING)
    (rep,) = sw.reported
    # F by the end of the slot, counted in this iteration: 2e6 sent + its 6e6 left (they fit: C t = 7.5e6)
    assert rep.flow_id == ring_name("r", NXT) and rep.cum_bytes == pytest.approx(2e6 + 6e6, abs=1)
    assert rep.rate_Bps == pytest.approx(6e6 / SLOT)  # the slot-0 rate behind F (receivers extrapolate with it)
    (note,) = sw.notified
    assert note.to_host == NXT and note.flow_id == ring_name("r", NXT)
    assert note.f_pred_bytes == pytest.approx(rep.cum_bytes + 8e6 / 6, abs=1)
    assert sw.host == ME  # picks up its own notifications by its address


def test_a_ring_flow_of_unknown_size_does_not_notify():
    c, sw = ctl()
    ring = FlowIn(FlowKey(ME, 7000, NXT, 40000), "r", math.nan, C, 0.0, cum_bytes=5e6)
    c.tick([ring], RING)
    assert len(sw.reported) == 1 and sw.notified == []


def test_a_ps_update_is_held_to_the_gradients_it_answers():
    """Progress is counted per iteration: the PS starts the update of this round (4e6, nothing sent yet);
    the gradient it answers is either all in (4e6: the update goes at its plan's rate) or still 2e6 short
    (the worker notified F = 2e6 by the end of the slot: the update is paced at 2e6 per slot and publishes
    the held plan). The lifetime counts (cum_bytes) play no part."""
    comm = {"p": JobComm("ps", frozenset({9000}))}
    bc = FlowIn(FlowKey(ME, 9000, NXT, 50000), "p", 4e6, C, 0.0, cum_bytes=12e6)  # iteration: 4e6
    agg = flow_name(FlowKey(NXT, 50000, ME, 9000))
    for grads, held in ((4e6, False), (2e6, True)):
        c, sw = ctl()
        sw.progress[agg] = wire.FlowProgress(agg, "p", int(grads), 0.0, S0, NXT)
        sw.notes = [wire.Notification(ME, agg, "p", int(grads), S0, NXT)]
        applied = c.tick([bc], comm)
        s = c.schedule_of(bc.key)
        assert s["role"] == "broadcast" and (s["reduced_bytes"] > 0) == held and s["held"] == held, grads
        want = grads / SLOT if held else C
        assert applied[bc.key] == pytest.approx(want, rel=0.01)
        assert c.status()["deps"]["notifications_received"] == 1
    # the PS reports F_b^max under its address and port, and notifies nobody
    assert [p.flow_id for p in sw.reported] == [ps_name(ME, 9000)] and sw.notified == []


def test_a_ps_whose_broadcast_flows_are_idle_reports_zero():
    """The update of this round was sent (idle): the next update, which answers the gradients now
    uploading, has not started, so the PS reports 0 under its name and the workers get no Delta."""
    comm = {"p": JobComm("ps", frozenset({9000}))}
    bc = FlowIn(FlowKey(ME, 9000, NXT, 50000), "p", 0.0, C, 4e6, False, 0.0, cum_bytes=12e6)
    c, sw = ctl()
    c.tick([bc], comm)
    (rep,) = sw.reported
    assert rep.flow_id == ps_name(ME, 9000) and rep.cum_bytes == 0 and rep.rate_Bps == 0


def test_without_deps_nothing_is_exchanged():
    sw = ScriptedSwitch()
    c = MlccControl(C, SLOT, switch=sw, wall=lambda: (S0 + 0.5) * SLOT, deps=False)
    ring = FlowIn(FlowKey(ME, 7000, NXT, 40000), "r", 6e6, C, 2e6, cum_bytes=5e6)
    c.tick([ring], RING)
    assert sw.reported == [] and sw.notified == [] and sw.host is None
    assert "role" not in c.schedule_of(ring.key)


def test_a_host_the_switch_does_not_know_stops_asking_for_notifications(caplog):
    """The switch refuses a fetch that names an unknown host (UNKNOWN_HOST for the whole frame): the
    controller stops naming its address, says so once, and keeps planning (without notifications)."""
    import logging

    class Refusing(ScriptedSwitch):
        def exchange(self, slot, **kw):
            res = super().exchange(slot, **kw)
            if kw.get("fetches") and self.host is not None:
                res.error_codes = {"sw": int(wire.Code.UNKNOWN_HOST)}
                res.errors = {"sw": "unknown host"}
            return res

    sw = Refusing()
    c = MlccControl(C, SLOT, switch=sw, wall=lambda: (S0 + 0.5) * SLOT)
    ring = FlowIn(FlowKey(ME, 7000, NXT, 40000), "r", 6e6, C, 2e6, cum_bytes=5e6)
    caplog.set_level(logging.WARNING, logger="hostctl")
    for _ in range(3):
        rates = c.tick([ring], RING)
        assert rates[ring.key] > 0
    assert sw.host is None and c._host_refused
    assert sum("does not know this host's address" in r.getMessage() for r in caplog.records) == 1
    assert c.schedule_of(ring.key)["role"] == "ring"  # progress is still reported and read
