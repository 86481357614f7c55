"""Tests for memlab.stages.ltr (learned fusion)."""

from __future__ import annotations

import math

import numpy as np
import polars as pl
import pytest

from memlab.embed.hashing import HashingEmbedder
from memlab.memory.store import MemoryStore
from memlab.pipeline import load_pipeline
from memlab.stages.base import CANDIDATE_SCHEMA, QueryContext, check_frame, rerank
from memlab.stages.ltr import LearnedFusion, head_features

T0 = 1_767_225_600.0


def test_head_features_are_per_query_z_scores_presence_flags_and_log_rank() -> None:
    f = pl.DataFrame({"a": [3.0, 1.0, 2.0], "b": [1.0, None, 3.0]})
    x = head_features(f, ["a", "b", "c"], 3)
    sd_a = math.sqrt(((3 - 2) ** 2 + (1 - 2) ** 2 + 0) / 3)
    want = np.array([
        # z(a)        present(a) z(b) present(b) z(c) present(c) log rank
        [1 / sd_a, 1, -1.0, 1, 0, 0, math.log(1)],
        [-1 / sd_a, 1, -1.0, 0, 0, 0, math.log(2)],  # b missing: the smallest z present
        [0.0, 1, 1.0, 1, 0, 0, math.log(3)],
    ])
    np.testing.assert_allclose(x, want, atol=1e-12)
    # only the head counts: the first two rows of a → z = ±1
    np.testing.assert_allclose(head_features(f, ["a"], 2)[:, 0], [1.0, -1.0])
    # equal values: z = 0
    np.testing.assert_allclose(head_features(pl.DataFrame({"a": [2.0, 2.0]}), ["a"], 2)[:, 0], 0)


@pytest.fixture
def ctx() -> QueryContext:
    store = MemoryStore(embedder=HashingEmbedder(dim=16))
    for i in range(6):
        store.store(f"turn {i}", "event", client_id="c", source_agent="a", now=T0 + i,
                    id=f"m{i}")
    return QueryContext("q", "turn", store, T0 + 100)


def _cands(qid: str, score: list[float], signal: list[float]) -> pl.DataFrame:
    n = len(score)
    return rerank(pl.DataFrame(
        {"qid": [qid] * n, "mem_id": [f"m{i}" for i in range(n)], "score": score,
         "rank": [0] * n, "bm25_score": signal},
        schema={**CANDIDATE_SCHEMA, "bm25_score": pl.Float64},
    ))


def test_the_model_learns_which_column_predicts_relevance(ctx) -> None:
    """In training, the relevant memory is the one with the largest ``signal``, whatever the
    incoming score; the fitted stage therefore ranks by ``signal``."""
    rng = np.random.default_rng(0)
    train, relevant = {}, {}
    for k in range(40):
        signal = rng.permutation(6).astype(float)
        score = rng.permutation(6).astype(float)
        qid = f"t{k}"
        train[qid] = _cands(qid, score.tolist(), signal.tolist())
        relevant[qid] = {f"m{int(np.argmax(signal))}"}
    stage = LearnedFusion(features=("bm25_score",), top_n=6).fit(
        ctx.store, queries=list(train), relevant=relevant, candidates=train
    )
    assert stage.n_train_ == 240 and stage.n_positive_ == 40
    # incoming order m0 … m5; the signal says m3 > m1 > m5 > m0 > m2 > m4
    out = stage.transform(_cands("q", [6, 5, 4, 3, 2, 1], [2, 4, 1, 5, 0, 3]), ctx)
    check_frame(out, "ltr")
    assert out["mem_id"].to_list()[:2] == ["m3", "m1"]
    assert out["score"].to_list() == out["ltr_score"].to_list()


def test_the_head_is_rescored_and_the_tail_keeps_its_order_below(ctx) -> None:
    train = {"t": _cands("t", [6, 5, 4, 3, 2, 1], [0, 0, 0, 0, 0, 9])}
    stage = LearnedFusion(features=("bm25_score",), top_n=3).fit(
        ctx.store, relevant={"t": {"m2"}}, candidates=train
    )
    out = stage.transform(_cands("q", [6, 5, 4, 3, 2, 1], [0, 0, 0, 0, 0, 0]), ctx)
    assert out["mem_id"].to_list()[3:] == ["m3", "m4", "m5"]
    assert out["ltr_score"].null_count() == 3


def test_fit_and_transform_refuse_what_they_cannot_use(ctx) -> None:
    cands = {"t": _cands("t", [3, 2, 1], [1, 2, 3])}
    with pytest.raises(ValueError, match="needs relevant= and candidates="):
        LearnedFusion().fit(ctx.store, candidates=cands)
    with pytest.raises(ValueError, match="no labelled training candidates"):
        LearnedFusion().fit(ctx.store, relevant={"t": set()}, candidates=cands)
    with pytest.raises(ValueError, match="relevant and irrelevant"):
        LearnedFusion(top_n=1).fit(ctx.store, relevant={"t": {"m0"}}, candidates=cands)
    with pytest.raises(ValueError, match="not fitted"):
        LearnedFusion().transform(cands["t"], ctx)
    with pytest.raises(ValueError, match="model"):
        LearnedFusion(model="forest").fit(ctx.store, relevant={"t": {"m0"}}, candidates=cands)


def test_conversational_ltr_is_conversational_session_then_a_learned_head() -> None:
    ltr = load_pipeline("conversational-ltr")
    session = load_pipeline("conversational-session")
    assert [n for n, _ in ltr.steps] == [*(n for n, _ in session.steps), "ltr"]
    params = ltr.get_params()
    assert params["ltr__model"] == "logistic" and params["ltr__top_n"] == 50
    assert getattr(ltr.stage("ltr"), "requires_fit", False)


def test_memlab_eval_cross_fits_the_learned_fusion() -> None:
    """``hybrid`` then ``ltr``: run_experiment fits one copy per fold on the other fold's
    labelled queries and answers each query with the copy that never saw it."""
    from pathlib import Path

    from memlab.datasets.format import load_dataset
    from memlab.eval.experiment import run_experiment
    from memlab.pipeline import Pipeline

    hybrid = load_pipeline("hybrid")
    pipe = Pipeline(
        steps=[*hybrid.clone().steps,
               ("ltr", LearnedFusion(features=("dense_score", "bm25_score", "rrf_score"),
                                     top_n=20))],
        name="hybrid-ltr",
    )
    ds = load_dataset(Path(__file__).resolve().parents[1] / "fixtures" / "handmade")
    res = run_experiment(ds, [hybrid, pipe], embedder=HashingEmbedder(dim=64), folds=2,
                         progress=False, write_report=False)
    assert res.manifest["protocol"]["folds"] == 2
    assert res.manifest["protocol"]["cross_fitted"] == ["hybrid-ltr"]
    qids = {name: set(res.rankings.filter(pl.col("pipeline") == name)["qid"])
            for name in ("hybrid", "hybrid-ltr")}
    assert qids["hybrid-ltr"] == qids["hybrid"] and len(qids["hybrid"]) >= 9
    # the head is re-scored by the model: the learned run's top scores are log-odds
    top = res.rankings.filter((pl.col("pipeline") == "hybrid-ltr") & (pl.col("rank") == 1))
    assert (top["score"] < 0).any() or (top["score"] > 1).any()  # not RRF's (0, 0.05] scale


def test_a_text_column_is_not_a_feature() -> None:
    with pytest.raises(ValueError, match="feature column 'text' is String"):
        head_features(pl.DataFrame({"text": ["a", "b"]}), ["text"], 2)
