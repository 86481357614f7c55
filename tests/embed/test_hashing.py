"""Tests for memlab.embed.hashing.HashingEmbedder."""

from __future__ import annotations

import os
import subprocess
import sys

import numpy as np
import pytest

from memlab.embed import HashingEmbedder


def _cos(a: np.ndarray, b: np.ndarray) -> float:
    return float(np.dot(a.astype(np.float64), b.astype(np.float64)))


def test_shape_dtype_and_unit_norm() -> None:
    out = HashingEmbedder(dim=64).embed(["a cat sits on the mat", "revenue grew", "x"])
    assert out.shape == (3, 64)
    assert out.dtype == np.float32
    np.testing.assert_allclose(np.linalg.norm(out, axis=1), [1.0, 1.0, 1.0], atol=1e-6)


def test_empty_input() -> None:
    out = HashingEmbedder(dim=16).embed([])
    assert out.shape == (0, 16)
    assert out.dtype == np.float32


def test_deterministic_across_calls_and_instances() -> None:
    texts = ["the cat sat", "dogs bark loudly", ""]
    first = HashingEmbedder(dim=32, seed=5).embed(texts)
    again = HashingEmbedder(dim=32, seed=5).embed(texts)
    assert first.tobytes() == again.tobytes()


def test_deterministic_across_processes_with_different_hash_seeds() -> None:
    code = (
        "import sys; from memlab.embed import HashingEmbedder; "
        "sys.stdout.write(HashingEmbedder(dim=32, seed=1, char_ngram=3)"
        ".embed(['stable hashing please', 'x']).tobytes().hex())"
    )
    outputs = []
    for hash_seed in ("1", "2"):
        env = dict(os.environ, PYTHONHASHSEED=hash_seed)
        run = subprocess.run(
            [sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True
        )
        outputs.append(run.stdout)
    local = HashingEmbedder(dim=32, seed=1, char_ngram=3).embed(["stable hashing please", "x"])
    assert outputs[0] == outputs[1] == local.tobytes().hex()


def test_single_word_is_signed_one_hot() -> None:
    emb = HashingEmbedder(dim=64)
    vec = emb.embed(["cat"])[0]
    index, sign = emb.bucket("w:cat")
    expected = np.zeros(64, dtype=np.float32)
    expected[index] = sign
    assert vec.tobytes() == expected.tobytes()


def test_text_vector_is_normalised_sum_of_word_vectors() -> None:
    emb = HashingEmbedder(dim=64)
    red, apple, both = emb.embed(["red", "apple", "red apple"])
    total = red.astype(np.float64) + apple.astype(np.float64)
    np.testing.assert_allclose(both, total / np.linalg.norm(total), atol=1e-7)


def test_half_shared_words_give_cosine_one_half() -> None:
    # "red apple" and "red car" share one of two words each: 1 / (sqrt(2) * sqrt(2)).
    emb = HashingEmbedder(dim=4096)
    buckets = {emb.bucket(f)[0] for f in ("w:red", "w:apple", "w:car")}
    assert len(buckets) == 3  # no collision at this dim, so the arithmetic below is exact
    a, b = emb.embed(["red apple", "red car"])
    assert _cos(a, b) == pytest.approx(1 / (2**0.5 * 2**0.5), abs=1e-6)


def test_shared_words_rank_above_unrelated_text() -> None:
    emb = HashingEmbedder()
    base, near, far = emb.embed(
        ["a cat sits on the mat", "the cat sits on a rug", "quarterly revenue grew 8%"]
    )
    assert _cos(base, near) > _cos(base, far)


def test_lowercasing_and_punctuation() -> None:
    emb = HashingEmbedder(dim=32)
    a, b = emb.embed(["Red, APPLE!", "red apple"])
    assert a.tobytes() == b.tobytes()


def test_text_without_words_maps_to_fixed_unit_vector() -> None:
    emb = HashingEmbedder(dim=32)
    a, b = emb.embed(["", "?!"])
    assert a.tobytes() == b.tobytes()
    assert float(np.abs(a).sum()) == 1.0


def test_seed_changes_vectors() -> None:
    a = HashingEmbedder(dim=64, seed=0).embed(["some words here"])
    b = HashingEmbedder(dim=64, seed=1).embed(["some words here"])
    assert a.tobytes() != b.tobytes()


def test_char_trigram_features() -> None:
    emb = HashingEmbedder(char_ngram=3)
    assert emb.features("Cat") == ["w:cat", "c:#ca", "c:cat", "c:at#"]
    assert HashingEmbedder().features("Cat") == ["w:cat"]


def test_char_trigrams_relate_word_variants() -> None:
    # cat -> {w:cat, #ca, cat, at#}; cats -> {w:cats, #ca, cat, ats, ts#}; 2 shared features.
    words_only = HashingEmbedder(dim=4096)
    trigrams = HashingEmbedder(dim=4096, char_ngram=3)
    feats = trigrams.features("cat") + trigrams.features("cats")
    assert len({trigrams.bucket(f)[0] for f in set(feats)}) == 7  # no collision
    a, b = words_only.embed(["cat", "cats"])
    assert _cos(a, b) == 0.0
    a, b = trigrams.embed(["cat", "cats"])
    assert _cos(a, b) == pytest.approx(2 / (4**0.5 * 5**0.5), abs=1e-6)


def test_model_id_encodes_settings() -> None:
    assert HashingEmbedder().model_id == "hashing-d64-s0-c0"
    assert HashingEmbedder(dim=8, seed=2, char_ngram=3).model_id == "hashing-d8-s2-c3"


@pytest.mark.parametrize(
    ("params", "error", "message"),
    [
        ({"dim": 0}, ValueError, "dim must be >= 1"),
        ({"seed": -1}, ValueError, "seed must be >= 0"),
        ({"char_ngram": -2}, ValueError, "char_ngram must be >= 0"),
        ({"dim": 8.0}, TypeError, "dim must be an int"),
    ],
)
def test_invalid_params(params: dict, error: type[Exception], message: str) -> None:
    with pytest.raises(error, match=message):
        HashingEmbedder(**params).embed(["x"])
