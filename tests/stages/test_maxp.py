"""Tests for memlab.stages.maxp."""

from __future__ import annotations

import numpy as np
import pytest

from memlab.embed.hashing import HashingEmbedder
from memlab.memory.store import MemoryStore
from memlab.stages.base import CANDIDATE_SCHEMA, QueryContext, check_frame, empty_candidates
from memlab.stages.dense import Dense
from memlab.stages.maxp import MaxP, split_passages


def _unit(v: np.ndarray) -> np.ndarray:
    return v / np.linalg.norm(v)


def test_split_passages() -> None:
    pattern = MaxP().sentence_pattern
    assert split_passages("Hi Mel! I went to Rome. Was it fun? [photo]", pattern) == [
        "Hi Mel!", "I went to Rome.", "Was it fun?", "[photo]",
    ]
    assert split_passages("version 1.5 is out", pattern) == ["version 1.5 is out"]
    assert split_passages("   ", pattern) == ["   "]


def test_a_memory_scores_as_its_best_sentence(now: float) -> None:
    emb = HashingEmbedder(dim=64, seed=0)
    store = MemoryStore(embedder=emb)
    text = "Hello friend. The Rome trip was great."
    store.store(text, "event", source_agent="t", now=now, id="m0")
    store.store("Billing moved to Stripe", "event", source_agent="t", now=now, id="m1")
    ctx = QueryContext("q", "Rome trip", store, now, embedder=emb)
    out = MaxP(top_k=None).transform(empty_candidates(), ctx)
    check_frame(out, "maxp")
    assert list(out.columns) == [*CANDIDATE_SCHEMA, "row", "maxp_score"]
    q = _unit(emb.embed(["Rome trip"])[0])
    sentences = emb.embed(["Hello friend.", "The Rome trip was great.", "Billing moved to Stripe"])
    cos = [float(_unit(v) @ q) for v in sentences]
    want = {"m0": max(cos[0], cos[1]), "m1": cos[2]}
    assert dict(zip(out["mem_id"], out["maxp_score"], strict=True)) == pytest.approx(want, abs=1e-6)
    assert out["mem_id"].to_list() == sorted(want, key=lambda m: -want[m])


def test_one_sentence_memories_score_as_dense(store, make_ctx) -> None:
    ctx = make_ctx("Acme website hosting")
    maxp = MaxP(top_k=None).transform(empty_candidates(), ctx)
    dense = Dense(top_k=None).transform(empty_candidates(), ctx)
    assert maxp["mem_id"].to_list() == dense["mem_id"].to_list()
    np.testing.assert_allclose(maxp["maxp_score"], dense["dense_score"], atol=1e-6)
    assert "acme-stack-1" not in maxp["mem_id"].to_list()  # superseded: invisible
    top = MaxP(top_k=3).transform(empty_candidates(), ctx)
    assert top["mem_id"].to_list() == maxp["mem_id"].to_list()[:3]


def test_sentences_are_embedded_once_and_extended(store, make_ctx, now) -> None:
    stage = MaxP(top_k=None)
    stage.transform(empty_candidates(), make_ctx("Acme website"))
    first = stage.passages_.copy()
    assert stage.n_rows_ == len(store) and len(stage.starts_) == len(store)
    store.store("Acme launched. Globex paused.", "event", client_id="acme", now=now - 1, id="two")
    grown = stage.transform(empty_candidates(), make_ctx("Globex paused"))
    assert stage.passages_.shape[0] == first.shape[0] + 2
    np.testing.assert_array_equal(stage.passages_[: len(first)], first)
    fresh = MaxP(top_k=None).transform(empty_candidates(), make_ctx("Globex paused"))
    assert grown.equals(fresh)
    assert grown["mem_id"][0] == "two"


def test_mask_entity_types(store, make_ctx) -> None:
    masked = MaxP(top_k=None, mask_entity_types=("agent",)).transform(
        empty_candidates(), make_ctx("What did tester's team host on the Acme website?")
    )
    plain = MaxP(top_k=None).transform(
        empty_candidates(), make_ctx("What did team host on the Acme website?")
    )
    assert masked.equals(plain)


def test_fit_needs_an_embedder(store) -> None:
    with pytest.raises(ValueError, match="maxp: fit needs an embedder"):
        MaxP().fit(store)
    stage = MaxP().fit(store, embedder=store.embedder)
    assert stage.n_rows_ == len(store)


def test_empty_store(now: float) -> None:
    out = MaxP().transform(empty_candidates(), QueryContext("q", "x", MemoryStore(), now))
    assert out.height == 0
    check_frame(out, "maxp")


def test_a_purge_drops_the_erased_sentences(now: float) -> None:
    emb = HashingEmbedder(dim=64, seed=0)
    store = MemoryStore(embedder=emb)
    store.store("Hello friend. The Rome trip was great.", "event", source_agent="t", now=now,
                id="m0")
    store.store("Billing moved to Stripe", "event", source_agent="t", now=now, id="m1")
    ctx = QueryContext("q", "Rome trip", store, now, embedder=emb)
    stage = MaxP(top_k=None)
    stage.transform(empty_candidates(), ctx)
    assert stage.passages_.shape[0] == 3  # two sentences of m0, one of m1
    store.forget("m0", "asked to", now=now)
    store.purge("m0", now=now)
    out = stage.transform(empty_candidates(), ctx)
    # m0's two sentences are gone: its empty text is one (empty) passage
    assert stage.passages_.shape[0] == 2
    np.testing.assert_array_equal(stage.passages_[0], _unit(emb.embed([""])[0]))
    fresh = MaxP(top_k=None)
    assert out.equals(fresh.transform(empty_candidates(), ctx))
    np.testing.assert_array_equal(stage.passages_, fresh.passages_)
