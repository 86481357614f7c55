"""Tests for memlab.stages.cross_encoder (a word-overlap scorer stands in for the model)."""

from __future__ import annotations

import math
import sys
from collections.abc import Iterator, Sequence
from pathlib import Path

import numpy as np
import pytest

from memlab.embed.hashing import HashingEmbedder
from memlab.memory.store import MemoryStore
from memlab.pipeline import Pipeline, pipeline_from_config
from memlab.stages.base import QueryContext, check_frame
from memlab.stages.cross_encoder import (
    CrossEncoderRerank,
    CrossEncoderScorer,
    PairScorer,
    cached_scores,
    clear_score_cache,
    fuse,
    load_scorer,
)

if str(Path(__file__).parent) not in sys.path:  # --import-mode=importlib: helpers by path
    sys.path.insert(0, str(Path(__file__).parent))
from _candidates import frame  # noqa: E402

T0 = 1_767_225_600.0


class Overlap:
    """Scores a memory by the number of query words it contains; counts the pairs scored."""

    def __init__(self, digest: str = "overlap") -> None:
        self.digest = digest
        self.pairs = 0

    def score(self, query: str, memories: Sequence[str]) -> np.ndarray:
        self.pairs += len(memories)
        words = set(query.split())
        return np.asarray([len(words & set(m.split())) for m in memories], dtype=np.float64)


@pytest.fixture(autouse=True)
def _fresh_cache() -> Iterator[None]:
    clear_score_cache()
    yield
    clear_score_cache()


@pytest.fixture
def store() -> MemoryStore:
    s = MemoryStore(embedder=HashingEmbedder(dim=8))
    for i, text in enumerate(["rome trip", "paris cat", "rome cat"]):
        s.store(text, "event", client_id="c", source_agent="a", now=T0 + i, id=f"m{i}")
    return s


def stage(scorer: PairScorer, **params: object) -> CrossEncoderRerank:
    out = CrossEncoderRerank(**params)  # type: ignore[arg-type]
    out.scorer_ = scorer  # no model: the scorer set is the one used
    return out


def test_fuse_is_the_sum_of_z_scores() -> None:
    # incoming 3, 2, 1: z = ±√1.5, 0. Scores 1, 1, 2: mean 4/3, sd √2/3, z = -1/√2, -1/√2, √2
    got = fuse(np.array([3.0, 2.0, 1.0]), np.array([1.0, 1.0, 2.0]), 2.0)
    r15, r2 = math.sqrt(1.5), math.sqrt(2)
    want = [r15 - 2 / r2, -2 / r2, -r15 + 2 * r2]
    np.testing.assert_allclose(got, want)
    # a constant cross-encoder changes nothing
    np.testing.assert_allclose(fuse(np.array([3.0, 2.0, 1.0]), np.ones(3), 5.0),
                               [math.sqrt(1.5), 0.0, -math.sqrt(1.5)])


def test_the_head_is_reranked_by_the_fused_score(store: MemoryStore) -> None:
    ctx = QueryContext("q", "rome cat", store, T0 + 10)
    cands = frame([("m0", 3.0), ("m1", 2.0), ("m2", 1.0)])
    # overlap: m0 "rome trip" 1, m1 "paris cat" 1, m2 "rome cat" 2
    z_in = [math.sqrt(1.5), 0.0, -math.sqrt(1.5)]
    z_ce = [-1 / math.sqrt(2), -1 / math.sqrt(2), math.sqrt(2)]
    out = stage(Overlap(), top_n=3, weight=1.0).transform(cands, ctx)
    check_frame(out, "cross_encoder")
    want = {f"m{i}": z_in[i] + z_ce[i] for i in range(3)}  # 0.518, -0.707, 0.189
    assert dict(zip(out["mem_id"], out["score"], strict=True)) == pytest.approx(want)
    assert out["mem_id"].to_list() == ["m0", "m2", "m1"]
    assert dict(zip(out["mem_id"], out["cross_score"], strict=True)) == {
        "m0": 1.0, "m1": 1.0, "m2": 2.0
    }
    out = stage(Overlap(), top_n=3, weight=2.0).transform(cands, ctx)
    assert out["mem_id"].to_list() == ["m2", "m0", "m1"]  # -√1.5 + 2√2 = 1.604 is the best
    out = stage(Overlap(), top_n=3, weight=0.0).transform(cands, ctx)
    assert out["mem_id"].to_list() == ["m0", "m1", "m2"]


def test_the_tail_keeps_its_order_below_the_head(store: MemoryStore) -> None:
    ctx = QueryContext("q", "rome cat", store, T0 + 10)
    scorer = Overlap()
    # head m1, m0 (overlap 1 each: z = 0, the incoming order stays); m2 is the tail
    out = stage(scorer, top_n=2, weight=5.0).transform(
        frame([("m1", 3.0), ("m0", 2.0), ("m2", 1.0)]), ctx
    )
    assert out["mem_id"].to_list() == ["m1", "m0", "m2"]
    assert out["score"].to_list() == pytest.approx([1.0, -1.0, -2.0])  # tail: min(head) - 1
    assert out["cross_score"].null_count() == 1
    assert scorer.pairs == 2  # the tail is never scored


def test_each_pair_is_scored_once_per_model(store: MemoryStore) -> None:
    scorer = Overlap()
    ctx = QueryContext("q", "rome cat", store, T0 + 10)
    cands = frame([("m0", 3.0), ("m1", 2.0), ("m2", 1.0)])
    stage(scorer, top_n=3).transform(cands, ctx)
    stage(scorer, top_n=3, weight=2.0).transform(cands, ctx)  # another grid point
    assert scorer.pairs == 3
    stage(scorer, top_n=3).transform(cands, QueryContext("q2", "paris", store, T0 + 10))
    assert scorer.pairs == 6  # another query text
    other = Overlap(digest="other-weights")
    stage(other, top_n=3).transform(cands, ctx)
    assert other.pairs == 3  # another model
    # a repeated text in one head is scored once
    np.testing.assert_array_equal(cached_scores(Overlap("x"), "a b", ["a", "a b", "a"]),
                                  [1.0, 2.0, 1.0])
    counted = Overlap("y")
    cached_scores(counted, "a b", ["a", "a b", "a"])
    assert counted.pairs == 2


def test_a_scorer_of_the_wrong_shape_is_refused(store: MemoryStore) -> None:
    class Short(Overlap):
        def score(self, query: str, memories: Sequence[str]) -> np.ndarray:
            return np.zeros(len(memories) - 1)

    with pytest.raises(ValueError, match=r"returned shape \(1,\) for 2 memories"):
        cached_scores(Short(), "q", ["a", "b"])
    bad = CrossEncoderRerank()
    bad.scorer_ = object()  # type: ignore[assignment]
    with pytest.raises(TypeError, match="scorer_ must be a PairScorer"):
        bad.transform(frame([("m0", 1.0)]), QueryContext("q", "rome", store, T0 + 10))


@pytest.mark.parametrize(
    ("params", "field"),
    [({"top_n": 0}, "top_n"), ({"weight": -0.5}, "weight"), ({"model": " "}, "model"),
     ({"model": 3}, "model"), ({"weight": math.nan}, "weight")],
)
def test_parameters_are_checked_and_named(params: dict[str, object], field: str) -> None:
    with pytest.raises(ValueError, match=rf"'{field}'"):
        CrossEncoderRerank(**params)  # type: ignore[arg-type]


def test_no_model_is_a_value_error_when_the_stage_runs(store: MemoryStore) -> None:
    ctx = QueryContext("q", "rome", store, T0 + 10)
    assert CrossEncoderRerank().transform(frame([]), ctx).height == 0  # nothing to score
    with pytest.raises(ValueError, match="cross_encoder.model: no model directory set"):
        CrossEncoderRerank().transform(frame([("m0", 1.0)]), ctx)
    with pytest.raises(ValueError, match="is not a model directory"):
        CrossEncoderRerank(model="/nonexistent/model").transform(frame([("m0", 1.0)]), ctx)


def test_the_stage_round_trips_through_a_configuration() -> None:
    pipe = Pipeline(steps=[("cross", CrossEncoderRerank(model="path:/m", weight=2.0))],
                    name="p")
    back = pipeline_from_config(pipe.to_config(), source="p.toml").stage("cross")
    assert back.get_params() == {"model": "path:/m", "top_n": 30, "weight": 2.0}


def _tiny_classifier(path: Path, num_labels: int = 1) -> Path:
    import torch
    from transformers import BertConfig, BertForSequenceClassification, BertTokenizerFast

    words = ["rome", "trip", "paris", "cat"]
    vocab = {w: i for i, w in enumerate(["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", *words])}
    BertTokenizerFast(vocab=vocab).save_pretrained(str(path))
    torch.manual_seed(0)
    config = BertConfig(vocab_size=len(vocab), hidden_size=8, num_hidden_layers=1,
                        num_attention_heads=2, intermediate_size=16, max_position_embeddings=32,
                        initializer_range=0.5, num_labels=num_labels)
    BertForSequenceClassification(config).save_pretrained(str(path))
    return path


def test_a_pairs_logit_does_not_depend_on_the_others(tmp_path: Path) -> None:
    path = _tiny_classifier(tmp_path / "ce")
    scorer = load_scorer(f"path:{path}")
    assert load_scorer(str(path)) is scorer  # loaded once per path
    assert isinstance(scorer, PairScorer) and scorer.max_length == 512
    memories = ["rome trip", "paris cat rome trip rome cat", "cat"]
    together = scorer.score("rome cat", memories)
    alone = [scorer.score("rome cat", [m])[0] for m in memories]
    assert together.tolist() == alone  # bit for bit
    assert len(set(together.tolist())) == 3
    assert scorer.score("rome cat", []).shape == (0,)


def test_a_model_with_two_outputs_is_refused(tmp_path: Path) -> None:
    path = _tiny_classifier(tmp_path / "two", num_labels=2)
    with pytest.raises(ValueError, match="has 2 outputs; a cross-encoder has one"):
        CrossEncoderScorer(path)


def test_a_changed_model_is_loaded_again(monkeypatch: pytest.MonkeyPatch) -> None:
    from memlab.stages import cross_encoder

    monkeypatch.setattr(cross_encoder, "load_scorer", lambda model: Overlap(digest=model))
    rerank_stage = CrossEncoderRerank(model="fold-0")
    assert rerank_stage.scorer().digest == "fold-0"
    rerank_stage.set_params(model="fold-1")
    assert rerank_stage.scorer().digest == "fold-1"  # not the scorer of fold 0


def test_the_score_cache_is_bounded(monkeypatch: pytest.MonkeyPatch) -> None:
    from memlab.stages import cross_encoder

    monkeypatch.setattr(cross_encoder, "MAX_CACHED_SCORES", 3)
    scorer = Overlap()
    cached_scores(scorer, "a", ["a", "b"])
    cached_scores(scorer, "a", ["a", "b"])
    assert scorer.pairs == 2  # kept
    cached_scores(scorer, "a", ["c", "d"])  # 2 + 2 > 3: the table is emptied first
    assert scorer.pairs == 4
    cached_scores(scorer, "a", ["a"])  # forgotten: scored again
    assert scorer.pairs == 5
