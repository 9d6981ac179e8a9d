"""core.gencache.Generations: what was used in the last generation stays, what was not is made again."""

from __future__ import annotations

from hostctl.core.gencache import Generations


def test_a_key_used_in_each_generation_stays_and_an_unused_one_goes():
    made = []
    g = Generations(lambda k: made.append(k) or k * 2, limit=100)
    assert g(1) == 2 and g(2) == 4 and made == [1, 2]
    g.turn()
    assert g(1) == 2 and made == [1, 2]  # from the last generation: not made again
    g.turn()  # 2 was not used in the generation that just ended: gone
    assert len(g) == 1
    assert g(2) == 4 and made == [1, 2, 2]
    assert g(1) == 2 and made == [1, 2, 2]


def test_the_limit_bounds_a_generation_however_many_keys_come():
    g = Generations(str, limit=10)
    for i in range(1000):
        assert g(i) == str(i)
        assert len(g.new) <= 10 and len(g) <= 20
    assert g(999) == "999" and len(g) <= 20


def test_flow_names_of_flows_that_ended_are_dropped_after_two_turns():
    from hostctl.core.deps import flow_name
    from hostctl.core.types import FlowKey

    live = FlowKey("10.0.0.1", 40000, "10.0.0.2", 9000)
    gone = FlowKey("10.0.0.1", 40001, "10.0.0.2", 9000)
    assert flow_name(live) == "10.0.0.1:40000>10.0.0.2:9000" and flow_name(gone).endswith(":9000")
    for _ in range(2):
        flow_name.turn()
        flow_name(live)
    assert live in flow_name.new and gone not in flow_name.new and gone not in flow_name.old


def test_the_pacer_turns_its_key_caches_each_generation(monkeypatch):
    from hostctl.core.types import FlowKey
    from hostctl.datapath import pacer

    monkeypatch.setattr(pacer, "_cache_turn_at", [0.0])
    k = FlowKey("10.0.0.1", 40000, "10.0.0.2", 9000)
    raw = pacer.raw_key(k)
    assert pacer._key_raw(raw) == k and len(raw) == pacer._KEY_SIZE
    g = pacer.CACHE_GENERATION_S
    pacer._turn_caches(100.0)  # the first heartbeat only sets the time of the first turn
    assert k in pacer.raw_key.new and raw in pacer._key_raw.new
    pacer._turn_caches(100.0 + g - 0.001)
    assert k in pacer.raw_key.new
    pacer._turn_caches(100.0 + g)
    assert k in pacer.raw_key.old and raw in pacer._key_raw.old
    pacer._turn_caches(100.0 + 2 * g)
    assert not pacer.raw_key.old.get(k) and not pacer._key_raw.old.get(raw)
