"""Tests for memlab.stages.mmr (Carbonell & Goldstein 1998)."""

from __future__ import annotations

import numpy as np
import polars as pl
import pytest

from memlab.memory.store import MemoryStore
from memlab.stages.base import CANDIDATE_SCHEMA, QueryContext, check_frame
from memlab.stages.mmr import MMR, cosine_matrix, mmr_select


@pytest.fixture
def ctx(now: float) -> QueryContext:
    """A, B, C with cos(A, B) = 0.8, cos(A, C) = 0, cos(B, C) = 0.6; D has no vector."""
    store = MemoryStore()
    for mid, vec in [("A", [1, 0, 0]), ("B", [0.8, 0.6, 0]), ("C", [0, 1, 0]), ("D", None)]:
        store.store(f"memory {mid}", "event", source_agent="t", now=now - 60, id=mid,
                    embedding=vec)
    return QueryContext(qid="q", text="x", store=store, now=now)


def _frame(ids: list[str], scores: list[float | None]) -> pl.DataFrame:
    return pl.DataFrame(
        {"qid": ["q"] * len(ids), "mem_id": ids, "score": scores,
         "rank": list(range(1, len(ids) + 1))},
        schema=CANDIDATE_SCHEMA,
    )


def test_hand_computed_three_candidates(ctx: QueryContext) -> None:
    # vectors are stored as float32, hence abs=1e-6 below
    frame = _frame(["A", "B", "C"], [0.9, 0.8, 0.5])
    # relevance after min-max: A = (0.9-0.5)/0.4 = 1, B = (0.8-0.5)/0.4 = 0.75, C = 0
    out = MMR(lambda_=0.5).transform(frame, ctx)
    check_frame(out, "mmr")
    # step 1: A = 0.5*1 = 0.5, B = 0.5*0.75 = 0.375, C = 0 -> A
    # step 2: B = 0.375 - 0.5*0.8 = -0.025, C = 0 - 0.5*0 = 0 -> C
    # step 3: B = 0.375 - 0.5*max(0.8, 0.6) = -0.025
    assert out["mem_id"].to_list() == ["A", "C", "B"]
    assert out["mmr_score"].to_list() == pytest.approx(
        [0.5 * 1, 0.5 * 0 - 0.5 * 0, 0.5 * 0.75 - 0.5 * 0.8], abs=1e-6
    )
    assert out["score"].to_list() == out["mmr_score"].to_list()
    assert out["rank"].to_list() == [1, 2, 3]

    relevant = MMR(lambda_=0.7).transform(frame, ctx)
    # step 2 with lambda 0.7: B = 0.7*0.75 - 0.3*0.8 = 0.285, C = 0 -> B; then C = -0.3*0.6
    assert relevant["mem_id"].to_list() == ["A", "B", "C"]
    assert relevant["mmr_score"].to_list() == pytest.approx(
        [0.7 * 1, 0.7 * 0.75 - 0.3 * 0.8, 0.7 * 0 - 0.3 * 0.6], abs=1e-6
    )


def test_top_k_and_lambda_one(ctx: QueryContext) -> None:
    frame = _frame(["A", "B", "C"], [0.9, 0.8, 0.5])
    assert MMR(lambda_=0.5, top_k=2).transform(frame, ctx)["mem_id"].to_list() == ["A", "C"]
    assert MMR(lambda_=1.0).transform(frame, ctx)["mem_id"].to_list() == ["A", "B", "C"]


def test_equal_scores_and_missing_vectors(ctx: QueryContext) -> None:
    # all relevance 1; D has no vector so it is never redundant
    frame = _frame(["A", "B", "D"], [0.4, 0.4, 0.4])
    out = MMR(lambda_=0.5).transform(frame, ctx)
    # step 1: all 0.5, earliest rank wins -> A; step 2: B = 0.5 - 0.5*0.8 = 0.1, D = 0.5 -> D
    assert out["mem_id"].to_list() == ["A", "D", "B"]
    assert out["mmr_score"].to_list() == pytest.approx([0.5, 0.5, 0.5 - 0.5 * 0.8], abs=1e-6)


def test_input_order_is_the_rank(ctx: QueryContext) -> None:
    frame = _frame(["A", "B", "C"], [0.9, 0.8, 0.5]).reverse()
    assert MMR(lambda_=0.5).transform(frame, ctx)["mem_id"].to_list() == ["A", "C", "B"]


def test_helpers() -> None:
    sim = cosine_matrix(np.array([[1.0, 0.0], [3.0, 4.0], [0.0, 0.0]]))
    np.testing.assert_allclose(sim, [[1, 0.6, 0], [0.6, 1, 0], [0, 0, 0]], atol=1e-12)
    order, values = mmr_select(np.array([1.0, 0.9]), np.array([[1, 1], [1, 1.0]]), 0.5, 5)
    assert order.tolist() == [0, 1]
    assert values.tolist() == pytest.approx([0.5, 0.45 - 0.5])


def test_empty_and_unknown_similarity(ctx: QueryContext) -> None:
    out = MMR().transform(_frame([], []), ctx)
    assert out.height == 0 and "mmr_score" in out.columns
    with pytest.raises(ValueError, match="MMR: parameter 'similarity' must be a str among"):
        MMR(similarity="jaccard")


def _numpy_mmr(relevance, sim, lambda_, k):
    """The greedy loop in numpy, as memlab wrote it before its kernel (the reference)."""
    n = len(relevance)
    k = min(k, n)
    chosen = np.zeros(k, dtype=np.int64)
    values = np.zeros(k, dtype=np.float64)
    available = np.ones(n, dtype=bool)
    penalty = np.zeros(n, dtype=np.float64)
    for step in range(k):
        mmr = lambda_ * relevance - (1.0 - lambda_) * penalty
        mmr[~available] = -np.inf
        i = int(np.argmax(mmr))
        chosen[step] = i
        values[step] = mmr[i]
        available[i] = False
        penalty = sim[:, i] if step == 0 else np.maximum(penalty, sim[:, i])
    return chosen, values


@pytest.mark.parametrize("seed", range(8))
def test_the_kernel_makes_the_numpy_loops_choices_and_floats(seed: int) -> None:
    rng = np.random.default_rng(seed)
    n = int(rng.integers(1, 60))
    vecs = rng.normal(size=(n, 8))
    vecs[rng.random(n) < 0.2] = 0.0  # zero vectors: similarity 0 with everything
    sim = cosine_matrix(vecs)
    relevance = np.round(rng.random(n), 1)  # many ties
    if seed % 2:
        relevance[rng.integers(0, n)] = np.nan
        sim[rng.integers(0, n), rng.integers(0, n)] = np.nan
    for lambda_ in (0.0, 0.3, 0.7, 1.0):
        for k in (1, n // 2 + 1, n + 3):
            got = mmr_select(relevance, sim, lambda_, k)
            want = _numpy_mmr(relevance, sim, lambda_, k)
            np.testing.assert_array_equal(got[0], want[0])
            assert got[1].tobytes() == want[1].tobytes()  # the same floats, NaN and -0.0


def test_a_candidate_without_a_score_has_no_relevance(ctx: QueryContext) -> None:
    # B's NaN is no score: relevance over A and C only, A = 1, C = 0, B = 0 (as a null)
    frame = _frame(["A", "B", "C"], [0.9, float("nan"), 0.5])
    out = MMR(lambda_=0.5).transform(frame, ctx)
    # step 1: A = 0.5 -> A; step 2: B = 0 - 0.5*0.8 = -0.4, C = 0 - 0.5*0 = 0 -> C;
    # step 3: B = 0 - 0.5*max(0.8, 0.6) = -0.4
    assert out["mem_id"].to_list() == ["A", "C", "B"]
    assert out["mmr_score"].to_list() == pytest.approx([0.5, 0.0, -0.5 * 0.8], abs=1e-6)
