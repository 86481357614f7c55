"""Tests for memlab.stages.rrf (Cormack, Clarke & Büttcher 2009)."""

from __future__ import annotations

import polars as pl
import pytest

from memlab.memory.store import MemoryStore
from memlab.stages.base import CANDIDATE_SCHEMA, QueryContext, check_frame, empty_candidates
from memlab.stages.rrf import RRF


@pytest.fixture
def ctx(now: float) -> QueryContext:
    return QueryContext(qid="q7", text="x", store=MemoryStore(), now=now)


def _ranked(ids: list[str], column: str) -> pl.DataFrame:
    n = len(ids)
    scores = [float(n - i) for i in range(n)]
    return pl.DataFrame(
        {"qid": ["q7"] * n, "mem_id": ids, "score": scores, "rank": list(range(1, n + 1)),
         column: scores},
        schema={**CANDIDATE_SCHEMA, column: pl.Float64()},
    )


def test_fused_scores_are_reciprocal_rank_sums(ctx: QueryContext) -> None:
    dense = _ranked(["a", "b", "c"], "dense_score")
    bm25 = _ranked(["c", "d", "a"], "bm25_score")
    out = RRF().fuse([dense, bm25], ctx)
    check_frame(out, "rrf")
    got = dict(zip(out["mem_id"], out["rrf_score"], strict=True))
    assert got == pytest.approx({
        "a": 1 / (60 + 1) + 1 / (60 + 3),
        "c": 1 / (60 + 3) + 1 / (60 + 1),
        "b": 1 / (60 + 2),  # absent from the BM25 list: no contribution, no penalty
        "d": 1 / (60 + 2),
    }, rel=1e-15)
    # a and c tie exactly; b and d tie: ties go to mem_id
    assert out["mem_id"].to_list() == ["a", "c", "b", "d"]
    assert out["rank"].to_list() == [1, 2, 3, 4]
    assert out["score"].to_list() == out["rrf_score"].to_list()
    assert out["qid"].unique().to_list() == ["q7"]


def test_stage_columns_survive_fusion(ctx: QueryContext) -> None:
    out = RRF().fuse([_ranked(["a", "b"], "dense_score"), _ranked(["b"], "bm25_score")], ctx)
    rows = {r["mem_id"]: r for r in out.iter_rows(named=True)}
    assert rows["a"]["dense_score"] == 2.0 and rows["a"]["bm25_score"] is None
    assert rows["b"]["dense_score"] == 1.0 and rows["b"]["bm25_score"] == 1.0


def test_weights_and_k(ctx: QueryContext) -> None:
    dense = _ranked(["a", "b"], "dense_score")
    bm25 = _ranked(["b", "a"], "bm25_score")
    out = RRF(k=10, weights=(2.0, 0.5)).fuse([dense, bm25], ctx)
    got = dict(zip(out["mem_id"], out["rrf_score"], strict=True))
    assert got == pytest.approx(
        {"a": 2.0 / (10 + 1) + 0.5 / (10 + 2), "b": 2.0 / (10 + 2) + 0.5 / (10 + 1)}, rel=1e-15
    )
    assert out["mem_id"].to_list() == ["a", "b"]
    with pytest.raises(ValueError, match="1 weights for 2 lists"):
        RRF(weights=(1.0,)).fuse([dense, bm25], ctx)


def test_top_k_and_empty_lists(ctx: QueryContext) -> None:
    dense = _ranked(["a", "b", "c"], "dense_score")
    out = RRF(top_k=2).fuse([dense, empty_candidates()], ctx)
    assert out["mem_id"].to_list() == ["a", "b"]
    assert out["rrf_score"].to_list() == pytest.approx([1 / (60 + 1), 1 / (60 + 2)], rel=1e-15)
    empty = RRF().fuse([empty_candidates(), empty_candidates()], ctx)
    assert empty.height == 0
    check_frame(empty, "rrf")


def test_transform_fuses_a_single_list(ctx: QueryContext) -> None:
    out = RRF(k=0).transform(_ranked(["x", "y"], "dense_score"), ctx)
    assert out["rrf_score"].to_list() == pytest.approx([1 / 1, 1 / 2], rel=1e-15)
