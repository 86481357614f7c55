import math

import polars as pl
import pytest

from memlab.stages.base import CANDIDATE_SCHEMA, rerank
from memlab.stages.combsum import CombSUM
from memlab.stages.normalization import get_normalization


def ranked(qid, pairs, column):
    frame = pl.DataFrame(
        {
            "qid": [qid] * len(pairs),
            "mem_id": [m for m, _ in pairs],
            "score": [s for _, s in pairs],
            "rank": [0] * len(pairs),
            column: [s for _, s in pairs],
        },
        schema={**CANDIDATE_SCHEMA, column: pl.Float64},
    )
    return rerank(frame)


def test_normalizers():
    import numpy as np

    v = np.array([1.0, 2.0, 3.0])
    assert get_normalization("minmax")(v).tolist() == [0.0, 0.5, 1.0]
    sd = math.sqrt(2 / 3)
    assert get_normalization("zscore")(v).tolist() == pytest.approx([-1 / sd, 0.0, 1 / sd])
    assert get_normalization("zscore")(np.array([4.0, 4.0])).tolist() == [0.0, 0.0]


def test_minmax_combsum_over_the_union_with_missing_zero(make_ctx):
    ctx = make_ctx("x")
    dense = ranked("q1", [("a", 0.9), ("b", 0.5), ("c", 0.1)], "dense_score")
    bm25 = ranked("q1", [("c", 8.0), ("d", 4.0)], "bm25_score")
    out = CombSUM(normalization="minmax", weights=(1.0, 0.5)).fuse([dense, bm25], ctx)
    # union order a, b, c, d; dense raw [0.9, 0.5, 0.1, 0] → /0.9; bm25 raw [0, 0, 8, 4] → /8
    expected = {
        "a": 0.9 / 0.9 + 0.5 * 0.0,
        "b": 0.5 / 0.9 + 0.5 * 0.0,
        "c": 0.1 / 0.9 + 0.5 * 1.0,
        "d": 0.0 + 0.5 * 0.5,
    }
    got = dict(zip(out["mem_id"], out["combsum_score"], strict=True))
    assert got == pytest.approx(expected)
    assert out["mem_id"].to_list() == ["a", "c", "b", "d"]
    assert out["rank"].to_list() == [1, 2, 3, 4]
    assert out.filter(pl.col("mem_id") == "c")["bm25_score"].item() == 8.0
    assert out.filter(pl.col("mem_id") == "c")["dense_score"].item() == 0.1


def test_bad_arguments(make_ctx):
    ctx = make_ctx("x")
    f = ranked("q1", [("a", 1.0)], "dense_score")
    with pytest.raises(ValueError, match="normalization"):
        CombSUM(normalization="rank").fuse([f], ctx)
    with pytest.raises(ValueError, match="2 weights for 1 lists"):
        CombSUM(weights=(1.0, 2.0)).fuse([f], ctx)
    assert CombSUM().fuse([f.head(0)], ctx).height == 0


def test_a_nan_score_counts_as_missing_from_its_list(make_ctx):
    ctx = make_ctx("x")
    dense = ranked("q1", [("a", 0.9), ("b", float("nan")), ("c", 0.1)], "dense_score")
    bm25 = ranked("q1", [("b", 8.0), ("c", 4.0)], "bm25_score")
    out = CombSUM(normalization="minmax").fuse([dense, bm25], ctx)
    # dense raw a 0.9, b missing 0, c 0.1 -> /0.9; bm25 raw a 0, b 8, c 4 -> /8
    got = dict(zip(out["mem_id"], out["combsum_score"], strict=True))
    assert got == pytest.approx({"a": 1.0 + 0.0, "b": 0.0 + 1.0, "c": 0.1 / 0.9 + 4 / 8})
