"""Shannon entropy gating: exact entropies, token costs and a worked eviction.

Four candidates of four words each (cost 4 tokens in :func:`memlab.tokens.count_tokens`),
retrieval scores 0.9, 0.8, 0.7, 0.6 (relevance ``(s - 0.6) / 0.3``: 1, 2/3, 1/3, 0):

====  =========================  =======  ======================================
rank  text                       entropy  redundancy (max Jaccard with kept above)
====  =========================  =======  ======================================
1 a   alpha beta gamma delta     2        0
2 b   alpha beta gamma epsilon   2        3/5 (with a)
3 c   zeta eta theta iota        2        0
4 d   kappa kappa kappa lambda   H(¾,¼)   0
====  =========================  =======  ======================================

Priorities without relevance (``relevance_weight=0``), ``entropy/2 - redundancy``: a 1,
b 1 - 3/5, c 1, d H(¾,¼)/2 ≈ 0.406. With relevance (the default weight 1): a 1 + 1,
b 2/3 + 1 - 3/5, c 1/3 + 1, d 0 + H(¾,¼)/2.
"""

from __future__ import annotations

import math

import polars as pl
import pytest

from memlab.memory.store import MemoryStore
from memlab.stages.base import QueryContext, check_frame, get_stage_class
from memlab.stages.entropy_gate import EntropyGate, jaccard, shannon_entropy
from memlab.tokens import count_tokens

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


def test_jaccard() -> None:
    assert jaccard(frozenset("abcd"), frozenset("abce")) == 3 / 5
    assert jaccard(frozenset(), frozenset()) == 0.0


def test_everything_fits_under_a_large_budget() -> None:
    frame, ctx = _setup()
    out = EntropyGate(token_budget=16).transform(frame, ctx)
    check_frame(out, "entropy_gate")
    assert out["mem_id"].to_list() == ["a", "b", "c", "d"]
    assert out["entropy"].to_list() == pytest.approx([2.0, 2.0, 2.0, H_D])
    assert out["redundancy"].to_list() == [0.0, 3 / 5, 0.0, 0.0]
    assert out["tokens"].to_list() == [4, 4, 4, 4]
    assert ctx.trace["eviction_report"] == []


def test_redundant_item_goes_first() -> None:
    frame, ctx = _setup()
    out = EntropyGate(token_budget=12, relevance_weight=0.0).transform(frame, ctx)
    assert out["mem_id"].to_list() == ["a", "c", "d"]
    assert out["rank"].to_list() == [1, 2, 3]
    assert out["score"].to_list() == [0.9, 0.7, 0.6]
    assert ctx.trace["eviction_report"] == [
        {"mem_id": "b", "reason": "redundant", "entropy": 2.0, "redundancy": 3 / 5, "tokens": 4}
    ]


def test_low_information_then_over_budget() -> None:
    frame, ctx = _setup()
    out = EntropyGate(token_budget=4, relevance_weight=0.0).transform(frame, ctx)
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
    gate = EntropyGate(token_budget=12, redundancy_weight=0.0, relevance_weight=0.0)
    out = gate.transform(frame, ctx)
    assert out["mem_id"].to_list() == ["a", "b", "c"]
    assert ctx.trace["eviction_report"][0]["reason"] == "low_information"


def test_min_entropy_evicts_before_budgeting() -> None:
    frame, ctx = _setup()
    out = EntropyGate(token_budget=1000, min_entropy=1.0).transform(frame, ctx)
    assert out["mem_id"].to_list() == ["a", "b", "c"]
    assert ctx.trace["eviction_report"] == [
        {"mem_id": "d", "reason": "low_information", "entropy": pytest.approx(H_D),
         "redundancy": 0.0, "tokens": 4}
    ]


def test_text_column_overrides_memory_text() -> None:
    frame, ctx = _setup()
    frame = frame.with_columns(pl.Series("text", ["x x y y", None, None, None], dtype=pl.String))
    out = EntropyGate(token_budget=1000).transform(frame, ctx)
    assert out["entropy"].to_list()[0] == 1.0
    assert out["tokens"].to_list()[0] == 4


def test_invisible_candidates_are_dropped() -> None:
    frame, ctx = _setup(now=1.5)  # only a and b exist yet
    out = EntropyGate().transform(frame, ctx)
    assert out["mem_id"].to_list() == ["a", "b"]


def test_negative_budget_names_field() -> None:
    frame, ctx = _setup()
    with pytest.raises(ValueError, match="'token_budget'"):
        EntropyGate(token_budget=-1).transform(frame, ctx)


def test_relevance_orders_eviction() -> None:
    frame, ctx = _setup()
    out = EntropyGate(token_budget=4).transform(frame, ctx)
    assert out["mem_id"].to_list() == ["a"]
    report = ctx.trace["eviction_report"]
    assert [(r["mem_id"], r["reason"]) for r in report] == [
        ("d", "low_relevance"),  # priority H_D/2; deficits 0, 1 - H_D/2, 1
        ("b", "redundant"),  # 2/3 + 1 - 3/5 < 1/3 + 1; deficits 3/5, 0, 1/3
        ("c", "low_relevance"),  # 1/3 + 1 < 2; deficits 0, 0, 2/3
    ]


def test_cost_is_the_package_token_count() -> None:
    frame, ctx = _setup()
    text = "Acme's storefront: Next.js, then Remix."
    frame = frame.with_columns(pl.Series("text", [text, None, None, None], dtype=pl.String))
    out = EntropyGate(token_budget=1000).transform(frame, ctx)
    # Acme ' s storefront : Next . js , then Remix .
    assert out["tokens"].to_list()[0] == count_tokens(text) == 12


def _top_hit_and_off_topic() -> tuple[pl.DataFrame, QueryContext]:
    store = MemoryStore()
    store.store("Acme storefront runs on Remix", "fact", source_agent="bot", now=0.0, id="hit")
    long_text = " ".join(f"word{i}" for i in range(40))  # 40 distinct words: log2(40) bits
    store.store(long_text, "fact", source_agent="bot", now=0.0, id="off")
    frame = pl.DataFrame(
        {"qid": ["q", "q"], "mem_id": ["hit", "off"], "score": [0.95, 0.2], "rank": [1, 2]},
        schema={"qid": pl.String, "mem_id": pl.String, "score": pl.Float64, "rank": pl.Int64},
    )
    return frame, QueryContext(qid="q", text="acme storefront", store=store, now=1.0)


def test_top_hit_survives_a_long_off_topic_memory() -> None:
    frame, ctx = _top_hit_and_off_topic()
    out = EntropyGate(token_budget=10).transform(frame, ctx)
    assert out["mem_id"].to_list() == ["hit"]
    # off: 0 + log2(40)/log2(40) = 1 against hit: 1 + log2(5)/log2(40)
    assert ctx.trace["eviction_report"][0]["mem_id"] == "off"
    assert ctx.trace["eviction_report"][0]["reason"] == "low_relevance"


def test_entropy_only_gate_evicts_the_top_hit() -> None:
    frame, ctx = _top_hit_and_off_topic()
    out = EntropyGate(token_budget=40, relevance_weight=0.0).transform(frame, ctx)
    assert out["mem_id"].to_list() == ["off"]  # the seed's gate: the defect this stage fixes


def test_relevance_floor_protects_from_min_entropy_and_budget() -> None:
    frame, ctx = _top_hit_and_off_topic()
    gate = EntropyGate(token_budget=40, relevance_weight=0.0, relevance_floor=0.9,
                       min_entropy=3.0)  # hit has log2(5) < 3 bits
    out = gate.transform(frame, ctx)
    assert out["mem_id"].to_list() == ["hit"]
    assert ctx.trace["eviction_report"][0]["mem_id"] == "off"


def test_protected_candidates_go_last_and_only_over_budget() -> None:
    frame, ctx = _top_hit_and_off_topic()
    out = EntropyGate(token_budget=1, relevance_floor=0.9).transform(frame, ctx)
    assert out["mem_id"].to_list() == []
    assert [r["mem_id"] for r in ctx.trace["eviction_report"]] == ["off", "hit"]


def test_text_features_take_gives_the_rows_of_the_whole_matrix() -> None:
    import numpy as np

    from memlab.stages.entropy_gate import TextFeatures

    feats = TextFeatures()
    texts = ["the cat sat on the mat", "", "dogs bark", "the dog and the cat", "!!", "mat mat"]
    for i, text in enumerate(texts):
        feats.add(text)
        if i in (2, 4):  # taken between additions: the arrays grow with the store
            feats.take(np.array([0, i]))
    rows = np.array([3, 0, 1, 3, 5, 4])  # any order, repeats, rows without words
    words, entropy, cost = feats.take(rows)
    every, all_entropy, all_cost = feats.arrays()
    assert (words != every[rows]).nnz == 0 and words.shape == (6, len(feats.vocab))
    assert words.getnnz(axis=1).tolist() == [4, 5, 0, 4, 1, 0]  # distinct words per row
    assert entropy.tolist() == all_entropy[rows].tolist()
    assert cost.tolist() == [count_tokens(texts[r]) for r in rows.tolist()]


def test_a_purged_text_leaves_the_kept_word_sets() -> None:
    from memlab.stages.entropy_gate import text_features

    _, ctx = _setup()
    before = text_features(ctx)
    assert before.take([0])[2].tolist() == [count_tokens(TEXTS["a"])]
    ctx.store.forget("a", "asked to", now=50.0)
    ctx.store.purge("a", now=60.0)
    after = text_features(ctx)
    assert after is not before  # rebuilt from the texts as they are now
    words, entropy, cost = after.take([0, 2])
    assert words[0].nnz == 0 and entropy[0] == 0.0 and cost[0] == count_tokens("")
    assert words[1].nnz == 4 and entropy[1] == pytest.approx(2.0)  # zeta eta theta iota


def _numpy_evict(lower, redundancy, alive, open_, base, norm, relevance, cost,
                 w_red, w_ent, w_rel, total, budget):
    """The eviction loop in numpy, as the gate ran it before its kernel (the reference)."""
    import numpy as np

    names = ("redundant", "low_information", "low_relevance")
    victims, reasons, noted = [], [], []
    while total > budget and alive.any():
        priority = base - w_red * redundancy
        live = np.flatnonzero(open_ if open_.any() else alive)
        best = priority[live].min()
        victim = int(live[priority[live] == best].max())
        deficits = (w_red * redundancy[victim], w_ent * (1.0 - norm[victim]),
                    w_rel * (1.0 - relevance[victim]))
        reasons.append("over_budget" if not any(d > 0 for d in deficits)
                       else names[int(np.argmax(deficits))])
        victims.append(victim)
        noted.append(float(redundancy[victim]))
        alive[victim] = open_[victim] = False
        total -= int(cost[victim])
        column = lower[:, victim]
        stale = np.flatnonzero(alive & (column == redundancy) & (redundancy > 0))
        if len(stale):
            redundancy[stale] = np.where(alive[None, :], lower[stale], 0.0).max(axis=1)
    return victims, reasons, noted


@pytest.mark.parametrize("seed", range(10))
def test_the_eviction_kernel_makes_the_numpy_loops_choices(seed: int) -> None:
    import numpy as np

    from memlab.stages._entropy_kernel import OVER_BUDGET, evict

    rng = np.random.default_rng(seed)
    n = int(rng.integers(1, 40))
    lower = np.tril(np.round(rng.random((n, n)), 1), k=-1)  # rounded: ties everywhere
    alive = rng.random(n) < 0.9
    protected = rng.random(n) < 0.2
    alive |= protected
    open_ = alive & ~protected
    redundancy = np.where(alive[None, :], lower, 0.0).max(axis=1)
    norm = np.round(rng.random(n), 1)
    relevance = np.round(rng.random(n), 1)
    if seed % 3 == 0:
        norm[:] = 1.0
        relevance[:] = 1.0  # no deficit but redundancy: "over_budget" once it is 0
    w_red, w_ent, w_rel = (1.0, 1.0, 1.0) if seed % 2 else (0.5, 2.0, 0.0)
    base = w_rel * relevance + w_ent * norm
    cost = rng.integers(1, 50, size=n)
    budget = float(rng.integers(0, 200))
    total = int(cost[alive].sum())
    want = _numpy_evict(lower, redundancy.copy(), alive.copy(), open_.copy(), base, norm,
                        relevance, cost, w_red, w_ent, w_rel, total, budget)
    victims, reasons, noted = (np.zeros(n, np.int64), np.zeros(n, np.int64),
                               np.zeros(n, np.float64))
    red, alive_k, open_k = redundancy.copy(), alive.copy(), open_.copy()
    count = evict(lower, red, alive_k, open_k, base, norm, relevance, cost, w_red, w_ent,
                  w_rel, total, budget, victims, reasons, noted)
    names = ("redundant", "low_information", "low_relevance")
    assert victims[:count].tolist() == want[0]
    assert [("over_budget" if r == OVER_BUDGET else names[r]) for r in reasons[:count]] == want[1]
    assert noted[:count].tolist() == want[2]
