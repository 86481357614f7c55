"""Tests for memlab.stages.maxsim and memlab.embed.tokens (word one-hot token vectors)."""

from __future__ import annotations

import math
import sys
from collections.abc import Sequence
from pathlib import Path

import numpy as np
import pytest

from memlab.embed.cache import CachedEmbedder
from memlab.embed.hashing import HashingEmbedder
from memlab.embed.tokens import TokenCache, find_token_embedder, token_embeddings
from memlab.memory.store import MemoryStore
from memlab.stages.base import QueryContext, check_frame
from memlab.stages.maxsim import MaxSim, segment_maxsim, zscore

if str(Path(__file__).parent) not in sys.path:  # --import-mode=importlib: helpers by path
    sys.path.insert(0, str(Path(__file__).parent))
from _candidates import frame  # noqa: E402

T0 = 1_767_225_600.0
VOCAB = ("rome", "trip", "paris", "cat", "dog", "sunny")


class WordTokens:
    """Every word is one token whose vector is the word's one-hot (so MaxSim counts shared
    words); the sentence vector is the normalised sum."""

    model_id = "words-test"
    dim = len(VOCAB)

    def __init__(self) -> None:
        self.token_calls = 0

    def _onehots(self, text: str) -> np.ndarray:
        return np.eye(self.dim, dtype=np.float32)[[VOCAB.index(w) for w in text.split()]]

    def embed_tokens(self, texts: Sequence[str]) -> list[np.ndarray]:
        self.token_calls += len(texts)
        return [self._onehots(t) for t in texts]

    def embed(self, texts: Sequence[str]) -> np.ndarray:
        out = np.stack([self._onehots(t).sum(axis=0) for t in texts])
        return (out / np.linalg.norm(out, axis=1, keepdims=True)).astype(np.float32)


@pytest.fixture
def words() -> tuple[MemoryStore, WordTokens]:
    emb = WordTokens()
    store = MemoryStore(embedder=emb)
    for i, text in enumerate(["rome trip", "paris cat", "rome cat"]):
        store.store(text, "event", client_id="c", source_agent="a", now=T0 + i, id=f"m{i}")
    return store, emb


def test_segment_maxsim_is_the_mean_best_token_match() -> None:
    q = np.eye(3)[[0, 1]]  # tokens 0 and 1
    docs = np.eye(3)[[0, 2, 1, 1, 2]]  # doc A: 0,2; doc B: 1,1; doc C: 2
    got = segment_maxsim(q, docs, np.array([0, 2, 4]))
    np.testing.assert_allclose(got, [(1 + 0) / 2, (0 + 1) / 2, (0 + 0) / 2])


def test_zscore() -> None:
    np.testing.assert_allclose(zscore(np.array([3.0, 2.0, 1.0])),
                               [math.sqrt(1.5), 0.0, -math.sqrt(1.5)])
    np.testing.assert_array_equal(zscore(np.array([2.0, 2.0])), [0.0, 0.0])


def test_maxsim_fuses_with_the_incoming_score(words) -> None:
    store, emb = words
    ctx = QueryContext("q", "rome cat", store, T0 + 10, embedder=emb)
    cands = frame([("m0", 3.0), ("m1", 2.0), ("m2", 1.0)])
    # MaxSim: m0 "rome trip" 1/2, m1 "paris cat" 1/2, m2 "rome cat" 2/2
    z_in = [math.sqrt(1.5), 0.0, -math.sqrt(1.5)]
    z_sim = [-1 / math.sqrt(2), -1 / math.sqrt(2), math.sqrt(2)]
    out = MaxSim(top_n=3, weight=1.0).transform(cands, ctx)
    check_frame(out, "maxsim")
    want = {f"m{i}": z_in[i] + z_sim[i] for i in range(3)}
    assert dict(zip(out["mem_id"], out["score"], strict=True)) == pytest.approx(want)
    assert out["mem_id"].to_list() == ["m0", "m2", "m1"]
    assert dict(zip(out["mem_id"], out["maxsim_score"], strict=True)) == pytest.approx(
        {"m0": 0.5, "m1": 0.5, "m2": 1.0}
    )
    out = MaxSim(top_n=3, weight=2.0).transform(cands, ctx)
    assert out["mem_id"].to_list() == ["m2", "m0", "m1"]  # -√1.5 + 2√2 is the best
    out = MaxSim(top_n=3, weight=0.0).transform(cands, ctx)
    assert out["mem_id"].to_list() == ["m0", "m1", "m2"]


def test_the_tail_keeps_its_order_below_the_head(words) -> None:
    store, emb = words
    ctx = QueryContext("q", "rome cat", store, T0 + 10, embedder=emb)
    # head m1, m0 (both MaxSim 1/2: the incoming order decides); m2 stays last
    out = MaxSim(top_n=2, weight=5.0).transform(
        frame([("m1", 3.0), ("m0", 2.0), ("m2", 1.0)]), ctx
    )
    assert out["mem_id"].to_list() == ["m1", "m0", "m2"]
    # head scores z = ±1 (weight·0 from equal MaxSim); the tail is min(head) - 1
    assert out["score"].to_list() == pytest.approx([1.0, -1.0, -2.0])
    assert out["maxsim_score"].null_count() == 1


def test_tokens_are_embedded_once_per_row(words) -> None:
    store, emb = words
    stage = MaxSim(top_n=3)
    ctx = QueryContext("q", "rome", store, T0 + 10, embedder=emb)
    stage.transform(frame([("m0", 1.0)]), ctx)
    assert stage.n_rows_ == 3 and stage.lengths_.tolist() == [2, 2, 2]
    calls = emb.token_calls
    stage.transform(frame([("m1", 1.0)]), QueryContext("q2", "rome", store, T0 + 10,
                                                       embedder=emb, cache=ctx.cache))
    assert emb.token_calls == calls  # rows fitted, query tokens cached
    store.store("dog", "event", client_id="c", source_agent="a", now=T0 + 5, id="m3")
    stage.transform(frame([("m3", 1.0)]), ctx)
    assert stage.n_rows_ == 4 and emb.token_calls == calls + 1


def test_a_model_without_tokens_is_a_value_error(words) -> None:
    store, _ = words
    ctx = QueryContext("q", "rome", store, T0 + 10, embedder=HashingEmbedder(dim=8))
    with pytest.raises(ValueError, match="has no embed_tokens"):
        MaxSim().transform(frame([("m0", 1.0)]), ctx)


def test_token_cache_round_trip_through_the_vector_cache(tmp_path) -> None:
    emb = WordTokens()
    wrapped = CachedEmbedder(emb, cache_dir=tmp_path)
    inner, root = find_token_embedder(wrapped)
    assert inner is emb and root == tmp_path
    first = token_embeddings(wrapped, ["rome cat", "dog", "rome cat"])
    assert emb.token_calls == 2  # the repeated text is embedded once
    again = token_embeddings(CachedEmbedder(WordTokens(), cache_dir=tmp_path), ["dog"])
    np.testing.assert_array_equal(again[0], np.eye(len(VOCAB))[[VOCAB.index("dog")]])
    np.testing.assert_array_equal(first[0], first[2])
    assert TokenCache(tmp_path, emb.model_id, emb.dim).db_path.is_file()
