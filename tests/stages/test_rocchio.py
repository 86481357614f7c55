"""Tests for memlab.stages.rocchio (bag-of-words one-hot vectors, so cosines are arithmetic)."""

from __future__ import annotations

import math
import sys
from collections.abc import Sequence
from pathlib import Path

import numpy as np
import pytest

from memlab.memory.store import MemoryStore
from memlab.stages.base import QueryContext, check_frame
from memlab.stages.maxsim import zscore
from memlab.stages.rocchio import Rocchio, expanded_query

if str(Path(__file__).parent) not in sys.path:  # --import-mode=importlib: helpers by path
    sys.path.insert(0, str(Path(__file__).parent))
from _candidates import frame  # noqa: E402

T0 = 1_767_225_600.0
VOCAB = ("rome", "trip", "paris", "cat")


class Bag:
    model_id = "bag-test"
    dim = len(VOCAB)

    def embed(self, texts: Sequence[str]) -> np.ndarray:
        out = np.stack([np.eye(self.dim)[[VOCAB.index(w) for w in t.split()]].sum(axis=0)
                        for t in texts])
        return (out / np.linalg.norm(out, axis=1, keepdims=True)).astype(np.float32)


@pytest.fixture
def ctx() -> QueryContext:
    emb = Bag()
    store = MemoryStore(embedder=emb)
    for i, text in enumerate(["rome trip", "paris cat", "rome cat"]):
        store.store(text, "event", client_id="c", source_agent="a", now=T0 + i, id=f"m{i}")
    return QueryContext("q", "rome", store, T0 + 10, embedder=emb)


def test_expanded_query() -> None:
    q = expanded_query(np.array([2.0, 0.0]), np.array([[0.0, 1.0], [0.0, 1.0]]), 1.0)
    np.testing.assert_allclose(q, [1 / math.sqrt(2), 1 / math.sqrt(2)])
    np.testing.assert_allclose(expanded_query(np.array([3.0, 4.0]), np.zeros((0, 2)), 1.0),
                               [0.6, 0.8])


def test_rocchio_rescores_the_head_by_the_expanded_query(ctx) -> None:
    # feedback m0 "rome trip": q' ∝ (1 + 1/√2)·rome + (1/√2)·trip, |q'|² = 2 + √2
    r2, norm = math.sqrt(2), math.sqrt(2 + math.sqrt(2))
    cos = {"m0": (1 + r2) / r2 / norm, "m1": 0.0, "m2": (1 + 1 / r2) / r2 / norm}
    out = Rocchio(top_n=3, feedback=1, beta=1.0, weight=2.0).transform(
        frame([("m0", 3.0), ("m1", 2.0), ("m2", 1.0)]), ctx
    )
    check_frame(out, "rocchio")
    assert dict(zip(out["mem_id"], out["rocchio_score"], strict=True)) == pytest.approx(cos)
    z_in = dict(zip(["m0", "m1", "m2"], zscore(np.array([3.0, 2.0, 1.0])), strict=True))
    z_cos = dict(zip(["m0", "m1", "m2"], zscore(np.array([cos["m0"], 0.0, cos["m2"]])),
                     strict=True))
    want = {m: z_in[m] + 2.0 * z_cos[m] for m in z_in}
    assert dict(zip(out["mem_id"], out["score"], strict=True)) == pytest.approx(want)
    assert out["mem_id"].to_list() == sorted(want, key=lambda m: -want[m])
    assert out["mem_id"].to_list()[-1] == "m1"  # "paris cat" shares nothing with q'


def test_rocchio_tail_and_zero_weight(ctx) -> None:
    cands = frame([("m1", 3.0), ("m0", 2.0), ("m2", 1.0)])
    assert Rocchio(weight=0.0).transform(cands, ctx)["mem_id"].to_list() == ["m1", "m0", "m2"]
    out = Rocchio(top_n=2, weight=10.0).transform(cands, ctx)
    assert out["mem_id"].to_list() == ["m0", "m1", "m2"]  # m2 stays below the head
    assert out["rocchio_score"].null_count() == 1
