"""Shannon entropy gating: exact entropies, token costs and a worked eviction.

Four candidates of four words each (cost ``ceil(4 * 1.3) = 6`` tokens):

====  =========================  =======  ======================================
rank  text                       entropy  redundancy (max Jaccard with kept above)
====  =========================  =======  ======================================
1 a   alpha beta gamma delta     2        0
2 b   alpha beta gamma epsilon   2        3/5 (with a)
3 c   zeta eta theta iota        2        0
4 d   kappa kappa kappa lambda   H(¾,¼)   0
====  =========================  =======  ======================================

Priorities ``entropy/2 - redundancy``: a 1, b 1 - 3/5, c 1, d H(¾,¼)/2 ≈ 0.406.
"""

from __future__ import annotations

import math

import polars as pl
import pytest

from memlab.memory.store import MemoryStore
from memlab.stages.base import QueryContext, check_frame, get_stage_class
from memlab.stages.entropy_gate import EntropyGate, jaccard, shannon_entropy, token_cost

TEXTS = {
    "a": "alpha beta gamma delta",
    "b": "alpha beta gamma epsilon",
    "c": "zeta eta theta iota",
    "d": "kappa kappa kappa lambda",
}
H_D = -(0.75 * math.log2(0.75) + 0.25 * math.log2(0.25))


def _setup(now: float = 100.0) -> tuple[pl.DataFrame, QueryContext]:
    store = MemoryStore()
    for i, (mid, text) in enumerate(TEXTS.items()):
        store.store(text, "event", source_agent="bot", now=float(i), id=mid)
    ids = list(TEXTS)
    frame = pl.DataFrame(
        {"qid": ["q"] * 4, "mem_id": ids, "score": [0.9, 0.8, 0.7, 0.6], "rank": [1, 2, 3, 4]},
        schema={"qid": pl.String, "mem_id": pl.String, "score": pl.Float64, "rank": pl.Int64},
    )
    return frame, QueryContext(qid="q", text="greek letters", store=store, now=now)


def test_registered_under_entropy_gate() -> None:
    assert get_stage_class("entropy_gate") is EntropyGate


def test_exact_entropies() -> None:
    assert shannon_entropy("a a b b".split()) == 1.0
    assert shannon_entropy("a b c d".split()) == 2.0
    assert shannon_entropy("a a a a".split()) == 0.0
    assert shannon_entropy([]) == 0.0
    assert shannon_entropy("kappa kappa kappa lambda".split()) == pytest.approx(H_D)


def test_jaccard_and_token_cost() -> None:
    assert jaccard(frozenset("abcd"), frozenset("abce")) == 3 / 5
    assert jaccard(frozenset(), frozenset()) == 0.0
    assert token_cost(4, 1.3) == 6  # ceil(5.2)
    assert token_cost(10, 1.3) == 13  # 10 * 1.3 is 13.000000000000002 in floating point
    assert token_cost(0, 1.3) == 0


def test_everything_fits_under_a_large_budget() -> None:
    frame, ctx = _setup()
    out = EntropyGate(token_budget=24).transform(frame, ctx)
    check_frame(out, "entropy_gate")
    assert out["mem_id"].to_list() == ["a", "b", "c", "d"]
    assert out["entropy"].to_list() == pytest.approx([2.0, 2.0, 2.0, H_D])
    assert out["redundancy"].to_list() == [0.0, 3 / 5, 0.0, 0.0]
    assert out["tokens"].to_list() == [6, 6, 6, 6]
    assert ctx.trace["eviction_report"] == []


def test_redundant_item_goes_first() -> None:
    frame, ctx = _setup()
    out = EntropyGate(token_budget=18).transform(frame, ctx)
    assert out["mem_id"].to_list() == ["a", "c", "d"]
    assert out["rank"].to_list() == [1, 2, 3]
    assert out["score"].to_list() == [0.9, 0.7, 0.6]
    assert ctx.trace["eviction_report"] == [
        {"mem_id": "b", "reason": "redundant", "entropy": 2.0, "redundancy": 3 / 5, "tokens": 6}
    ]


def test_low_information_then_over_budget() -> None:
    frame, ctx = _setup()
    out = EntropyGate(token_budget=6).transform(frame, ctx)
    assert out["mem_id"].to_list() == ["a"]
    report = ctx.trace["eviction_report"]
    assert [(r["mem_id"], r["reason"]) for r in report] == [
        ("b", "redundant"),  # priority 1 - 3/5
        ("d", "low_information"),  # priority H_D / 2 ≈ 0.406
        ("c", "over_budget"),  # ties with a at 1: the lower-ranked one goes
    ]
    assert report[1]["entropy"] == pytest.approx(H_D)


def test_redundancy_weight_zero_evicts_by_information_only() -> None:
    frame, ctx = _setup()
    out = EntropyGate(token_budget=18, redundancy_weight=0.0).transform(frame, ctx)
    assert out["mem_id"].to_list() == ["a", "b", "c"]
    assert ctx.trace["eviction_report"][0]["reason"] == "low_information"


def test_min_entropy_evicts_before_budgeting() -> None:
    frame, ctx = _setup()
    out = EntropyGate(token_budget=1000, min_entropy=1.0).transform(frame, ctx)
    assert out["mem_id"].to_list() == ["a", "b", "c"]
    assert ctx.trace["eviction_report"] == [
        {"mem_id": "d", "reason": "low_information", "entropy": pytest.approx(H_D),
         "redundancy": 0.0, "tokens": 6}
    ]


def test_text_column_overrides_memory_text() -> None:
    frame, ctx = _setup()
    frame = frame.with_columns(pl.Series("text", ["x x y y", None, None, None], dtype=pl.String))
    out = EntropyGate(token_budget=1000).transform(frame, ctx)
    assert out["entropy"].to_list()[0] == 1.0
    assert out["tokens"].to_list()[0] == 6


def test_invisible_candidates_are_dropped() -> None:
    frame, ctx = _setup(now=1.5)  # only a and b exist yet
    out = EntropyGate().transform(frame, ctx)
    assert out["mem_id"].to_list() == ["a", "b"]


def test_negative_budget_names_field() -> None:
    frame, ctx = _setup()
    with pytest.raises(ValueError, match="'token_budget'"):
        EntropyGate(token_budget=-1).transform(frame, ctx)
