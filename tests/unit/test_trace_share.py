"""lab/hostctl_lab/analysis/trace_share.py on a hand-made trace whose shares are known."""

from __future__ import annotations

import json

import pytest

from hostctl_lab.analysis import trace_share as ts

SLOT = 0.06
CAP = 62.5e6  # bytes/s
PER_SLOT = CAP * SLOT


def rec(slot: int, flows: list[tuple], plan0: float = 0.0) -> str:
    """One daemon's trace line: flows as (id, job, kind, sent bytes of the iteration so far), each with
    a slot-0 plan of plan0 bytes/s."""
    return json.dumps({"slot": slot, "mode": "switch", "flows": [
        {"id": fid, "job": job, "G": 1e6, "B": 0.0, "sent": sent, "kind": kind, "wave": 0, "applied": CAP,
         "plan": [plan0] + [0] * 9} for fid, job, kind, sent in flows]})


# hosts 10.1.0.1 (h0) and 10.1.0.2 (h1) in rack 0; 10.1.0.4 (h3) and 10.1.0.5 (h4) in rack 1
A = "10.1.0.1:5000>10.1.0.4:9000"  # h0 -> h3: h0:up, rack0:up, rack1:down, h3:down
B = "10.1.0.2:5001>10.1.0.5:9000"  # h1 -> h4: the same rack links


def test_links_of_a_flow():
    assert ts.parse_flow(A) == (0, 3)
    assert ts.links_of(0, 3, 3) == ["h0:up", "rack0:up", "rack1:down", "h3:down"]
    assert ts.links_of(0, 1, 3) == ["h0:up", "h1:down"]  # within a rack: no rack link


def test_shares_and_the_slots_until_half_the_link(tmp_path):
    # slot 0: job a busy, sends a quarter of the link, b idle sends a tenth; slot 1: a sends 3/4 (>= half);
    # slot 2: a idle. A new iteration restarts a's counter (slot 3: half the link sent since the restart)
    a_sent = [0.0, 0.25 * PER_SLOT, 1.0 * PER_SLOT, 0.0, 0.5 * PER_SLOT]
    b_sent = [0.0, 0.1 * PER_SLOT, 0.2 * PER_SLOT, 0.3 * PER_SLOT, 0.4 * PER_SLOT]
    kinds = ["active", "active", "idle", "active", "idle"]
    h0 = tmp_path / "trace-1.jsonl"
    h1 = tmp_path / "trace-2.jsonl"
    h0.write_text("\n".join(rec(100 + s, [(A, "a", kinds[s], a_sent[s])]) for s in range(5)) + "\n")
    h1.write_text("\n".join(rec(100 + s, [(B, "b", "idle", b_sent[s])]) for s in range(5)) + "\nnot json\n")
    by = ts.load([str(h0), str(h1)])
    assert sorted(by) == list(range(100, 105))
    res = ts.analyse(by, 3, CAP, SLOT)
    up = res["links"]["a"]["rack0:up"]
    # a busy in slots 100, 101 and 103 (the last slot has no next record: counted busy, nothing sent)
    assert up["busy_slots"] == 3
    assert up["own_share"] == pytest.approx((0.25 + 0.75 + 0.5) / 3)
    assert up["others_share"] == pytest.approx(0.1 * 3 / 3)
    # every flow was paced at the link's capacity; b's flow is idle, so what its pacer allowed is not counted
    assert up["own_applied"] == pytest.approx(1.0) and up["others_applied"] == 0.0
    # the burst from slot 100 reached half the link one slot after it began, the one from 103 at once
    assert up["bursts_reaching_half"] == 2 and up["mean_slots_to_half"] == pytest.approx(0.5)
    assert "b" not in res["links"]  # never busy
    assert "h0:up" not in res["links"]["a"]  # rack links only


def test_planned_bytes_that_went_unsent(tmp_path):
    # job a plans the whole link in 4 slots and sends in 2 of them (and under 5% in a third)
    sent = [0.0, PER_SLOT, PER_SLOT + 0.01 * PER_SLOT, 2.01 * PER_SLOT, 2.01 * PER_SLOT, 2.01 * PER_SLOT]
    p = tmp_path / "t.jsonl"
    p.write_text("\n".join(rec(s, [(A, "a", "active", sent[s])], CAP) for s in range(5)) + "\n")
    res = ts.analyse(ts.load([str(p)]), 3, CAP, SLOT)
    # slots 0-3 have a next record: planned 4 slots, unsent in slot 1 (1%) and slot 3 (0)
    assert res["unsent_plan_frac"]["a"] == pytest.approx(2 / 4)


def test_the_command_line(tmp_path, capsys):
    p = tmp_path / "t.jsonl"
    p.write_text(rec(7, [(A, "a", "active", 0.0)]) + "\n" + rec(8, [(A, "a", "active", PER_SLOT)]) + "\n")
    out = tmp_path / "share.json"
    assert ts.main([str(p), "--link", "500mbit", "--out", str(out)]) == 0
    assert "rack0:up" in capsys.readouterr().out
    assert json.loads(out.read_text())["links"]["a"]["rack0:up"]["own_share"] == pytest.approx(0.5)
    # bad input: one line naming the problem, exit 2
    assert ts.main([str(p), "--link", "fast"]) == 2
    assert "--link" in capsys.readouterr().err
    assert ts.main([str(tmp_path / "none-*.jsonl")]) == 2
    assert "no trace records" in capsys.readouterr().err


def test_booking_from_the_plans():
    # slot 10: two workers of job a (h3, h4 -> h0) each plan the whole link (an incast's first slot); slot
    # 11: half each. Slot 12 is booked by the plans made in slot 11 (their second slot)
    w3, w4 = "10.1.0.4:5000>10.1.0.1:9000", "10.1.0.5:5000>10.1.0.1:9000"
    by = {10: {w3: {"job": "a", "plan": [CAP, CAP] + [0] * 8}, w4: {"job": "a", "plan": [CAP, CAP] + [0] * 8}},
          11: {w3: {"job": "a", "plan": [CAP / 2, CAP / 4] + [0] * 8},
               w4: {"job": "a", "plan": [CAP / 2, CAP / 4] + [0] * 8}}}
    b = ts.booking(by, 3, CAP)
    assert b["h0:down"] == {"slots": 2, "over": 1, "over_one_job": 1, "worst_ratio": pytest.approx(2.0)}
    assert b["rack1:up"]["over"] == 1 and b["h3:up"]["over"] == 0


def test_plans_and_what_a_burst_booked_ahead(tmp_path):
    """Slot 100: a is idle but books the whole link for slot 101 (plan[1]); in 101 it is busy and plans the
    whole link, while b's busy flow plans half of it. In slot 105 a starts again without having booked
    anything the slot before: one burst announced, one not."""
    def line(slot, fid, job, kind, plan):
        return json.dumps({"slot": slot, "mode": "switch", "flows": [
            {"id": fid, "job": job, "G": 1e6, "B": 0.0, "sent": 0.0, "kind": kind, "wave": 0, "applied": plan[0],
             "plan": plan + [0] * (10 - len(plan))}]})
    h0 = tmp_path / "trace-1.jsonl"
    h1 = tmp_path / "trace-2.jsonl"
    h0.write_text("\n".join([line(100, A, "a", "idle", [0, CAP]), line(101, A, "a", "active", [CAP]),
                             line(102, A, "a", "idle", [0]), line(104, A, "a", "idle", [0]),
                             line(105, A, "a", "active", [CAP])]) + "\n")
    h1.write_text("\n".join(line(s, B, "b", "active", [CAP / 2]) for s in range(100, 106)) + "\n")
    up = ts.analyse(ts.load([str(h0), str(h1)]), 3, CAP, SLOT)["links"]["a"]["rack0:up"]
    assert up["busy_slots"] == 2 and up["bursts"] == 2 and up["bursts_unannounced"] == 1
    assert up["own_plan"] == pytest.approx(1.0) and up["others_plan"] == pytest.approx(0.5)
    assert up["own_booked_ahead"] == pytest.approx(0.5)  # the whole link for 101, nothing for 105
