import math

import polars as pl
import pytest

from memlab.embed import HashingEmbedder
from memlab.memory.store import MemoryStore
from memlab.stages.base import QueryContext, get_stage_class
from memlab.stages.decay_score import DecayScore
from memlab.stages.importance_score import ImportanceScore
from memlab.stages.recency_blend import RecencyBlend

T0 = 1_767_225_600.0
DAY = 86_400.0


def setup():
    store = MemoryStore(embedder=HashingEmbedder(dim=16))
    old = store.store("old fact", "fact", now=T0, importance="critical").id
    new = store.store("new fact", "fact", now=T0 + 250 * DAY, importance="low").id
    rule = store.store("a rule", "decision", now=T0).id
    ctx = QueryContext(qid="q", text="x", store=store, now=T0 + 260 * DAY)
    frame = pl.DataFrame(
        {"qid": ["q"] * 3, "mem_id": [old, new, rule], "score": [1.0, 0.5, 0.8], "rank": [1, 2, 3]}
    )
    return ctx, frame, old, new, rule


def test_decay_score_puts_cold_memories_last():
    ctx, frame, old, new, rule = setup()
    out = DecayScore().transform(frame, ctx)
    # old and rule: exp(−2.6) = 0.074 < 0.1 → cold (× 0.1); new: exp(−0.1).
    assert out["mem_id"].to_list() == [new, old, rule]
    assert out["effective_score"].to_list() == pytest.approx(
        [0.5 * math.exp(-0.1), 1.0 * math.exp(-2.6) * 0.1, 0.8 * math.exp(-2.6) * 0.1]
    )


def test_importance_score_starts_from_the_label():
    ctx, frame, old, new, rule = setup()
    out = ImportanceScore(decay_per_day=1.0).transform(frame, ctx)
    by_id = dict(zip(out["mem_id"], out["effective_score"], strict=True))
    assert by_id[old] == pytest.approx(1.0 * (0.5 + 0.5 * 1.0))
    assert by_id[new] == pytest.approx(0.5 * (0.5 + 0.5 * 0.25))


def test_recency_blend_never_decays_decisions():
    ctx, frame, old, new, rule = setup()
    out = RecencyBlend(recency_weight=0.5, half_life_days=10.0).transform(frame, ctx)
    by_id = dict(zip(out["mem_id"], out["effective_score"], strict=True))
    assert by_id[rule] == pytest.approx(0.5 * 0.8 + 0.5 * 1.0)
    assert by_id[new] == pytest.approx(0.5 * 0.5 + 0.5 * 0.5)
    assert by_id[old] == pytest.approx(0.5 * 1.0 + 0.5 * 0.5**26)


def test_recency_blend_never_decays_a_rule_stored_as_a_fact():
    store = MemoryStore(embedder=HashingEmbedder(dim=16))
    rule = store.store("CI fails above complexity 15", "fact", key="ci", now=T0,
                       metadata={"memory_type": "rule"}).id
    pref = store.store("Tabs over spaces", "fact", key="tabs", now=T0,
                       metadata={"memory_type": "preference"}).id
    ctx = QueryContext(qid="q", text="x", store=store, now=T0 + 10 * DAY)
    frame = pl.DataFrame({"qid": ["q"] * 2, "mem_id": [rule, pref], "score": [1.0, 1.0],
                          "rank": [1, 2]})
    out = RecencyBlend(recency_weight=0.5, half_life_days=10.0).transform(frame, ctx)
    by_id = dict(zip(out["mem_id"], out["effective_score"], strict=True))
    assert by_id == pytest.approx({rule: 0.5 * 1.0 + 0.5 * 1.0, pref: 0.5 * 1.0 + 0.5 * 0.5})


def test_registered_and_cloneable():
    for name in ("decay_score", "importance_score", "recency_blend"):
        cls = get_stage_class(name)
        assert cls().clone().get_params() == cls().get_params()
    with pytest.raises(ValueError, match="relevance"):
        ctx, frame, *_ = setup()
        DecayScore(relevance="nope").transform(frame, ctx)
