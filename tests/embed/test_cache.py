"""Tests for memlab.embed.cache.CachedEmbedder."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import numpy as np
import pytest

from memlab.embed import CachedEmbedder, Embedder, HashingEmbedder, default_cache_dir


class CountingEmbedder:
    """Hashing embedder that records every batch it is asked to embed."""

    def __init__(self, seed: int = 0, dim: int = 16, model_id: str | None = None) -> None:
        self.inner = HashingEmbedder(dim=dim, seed=seed)
        self.dim = dim
        self.model_id = model_id or self.inner.model_id
        self.calls: list[list[str]] = []

    def embed(self, texts: Sequence[str]) -> np.ndarray:
        self.calls.append(list(texts))
        return self.inner.embed(texts)


class FailingEmbedder(CountingEmbedder):
    """Fails on the call number ``fail_on`` (1-based)."""

    def __init__(self, fail_on: int) -> None:
        super().__init__()
        self.fail_on = fail_on

    def embed(self, texts: Sequence[str]) -> np.ndarray:
        if len(self.calls) + 1 == self.fail_on:
            self.calls.append(list(texts))
            raise RuntimeError("embedder crashed")
        return super().embed(texts)


TEXTS = ["a cat sits on the mat", "quarterly revenue grew", "the user likes tea"]


def test_first_call_embeds_second_call_reads_cache(tmp_path: Path) -> None:
    inner = CountingEmbedder()
    cached = CachedEmbedder(inner, tmp_path)
    first = cached.embed(TEXTS)
    assert inner.calls == [TEXTS]
    assert (cached.misses_, cached.hits_) == (3, 0)
    second = cached.embed(TEXTS)
    assert inner.calls == [TEXTS]
    assert (cached.misses_, cached.hits_) == (3, 3)
    assert first.tobytes() == second.tobytes() == inner.inner.embed(TEXTS).tobytes()
    assert second.dtype == np.float32


def test_cache_persists_across_instances(tmp_path: Path) -> None:
    CachedEmbedder(CountingEmbedder(), tmp_path).embed(TEXTS)
    inner = CountingEmbedder()
    cached = CachedEmbedder(inner, tmp_path)
    out = cached.embed(list(reversed(TEXTS)))
    assert inner.calls == []
    assert (cached.misses_, cached.hits_) == (0, 3)
    assert out.tobytes() == inner.inner.embed(list(reversed(TEXTS))).tobytes()
    assert cached.size() == 3


def test_only_unseen_texts_are_embedded(tmp_path: Path) -> None:
    inner = CountingEmbedder()
    cached = CachedEmbedder(inner, tmp_path)
    cached.embed(TEXTS[:2])
    cached.embed(TEXTS)
    assert inner.calls == [TEXTS[:2], TEXTS[2:]]
    assert (cached.misses_, cached.hits_) == (3, 2)


def test_duplicates_within_batch_are_embedded_once(tmp_path: Path) -> None:
    inner = CountingEmbedder()
    cached = CachedEmbedder(inner, tmp_path)
    out = cached.embed(["a", "b", "a", "a"])
    assert inner.calls == [["a", "b"]]
    assert (cached.misses_, cached.hits_) == (2, 2)
    assert out[0].tobytes() == out[2].tobytes() == out[3].tobytes()
    assert cached.size() == 2


def test_model_ids_do_not_collide(tmp_path: Path) -> None:
    inner0, inner1 = CountingEmbedder(seed=0), CountingEmbedder(seed=1)
    c0, c1 = CachedEmbedder(inner0, tmp_path), CachedEmbedder(inner1, tmp_path)
    v0 = c0.embed(["same text"])
    v1 = c1.embed(["same text"])
    assert inner0.calls == [["same text"]] and inner1.calls == [["same text"]]
    assert v0.tobytes() == inner0.inner.embed(["same text"]).tobytes()
    assert v1.tobytes() == inner1.inner.embed(["same text"]).tobytes()
    assert v0.tobytes() != v1.tobytes()
    assert c0.db_path.parent != c1.db_path.parent
    assert c0.db_path.parent.parent == c1.db_path.parent.parent == tmp_path


def test_layout_one_directory_per_model_and_file_per_namespace(tmp_path: Path) -> None:
    cached = CachedEmbedder(CountingEmbedder(), tmp_path, namespace="hyde")
    assert cached.db_path == tmp_path / "hashing-d16-s0-c0" / "hyde.sqlite3"
    default = CachedEmbedder(CountingEmbedder(), tmp_path)
    assert default.db_path == tmp_path / "hashing-d16-s0-c0" / "default.sqlite3"


def test_namespaces_are_separate(tmp_path: Path) -> None:
    inner = CountingEmbedder()
    CachedEmbedder(inner, tmp_path, namespace="x").embed(["t"])
    CachedEmbedder(inner, tmp_path, namespace="y").embed(["t"])
    assert inner.calls == [["t"], ["t"]]


def test_unsafe_model_id_gets_single_directory(tmp_path: Path) -> None:
    a = CachedEmbedder(CountingEmbedder(model_id="org/model"), tmp_path)
    b = CachedEmbedder(CountingEmbedder(model_id="org_model"), tmp_path)
    a.embed(["t"])
    b.embed(["t"])
    assert a.db_path.parent.parent == tmp_path
    assert a.db_path.parent.name.startswith("org_model-")
    assert b.db_path.parent.name == "org_model"


def test_default_cache_dir_from_env(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("MEMLAB_CACHE_DIR", str(tmp_path / "c"))
    assert default_cache_dir() == tmp_path / "c"
    cached = CachedEmbedder(CountingEmbedder())
    cached.embed(["t"])
    assert cached.db_path == tmp_path / "c" / "hashing-d16-s0-c0" / "default.sqlite3"
    assert cached.db_path.is_file()


def test_default_cache_dir_without_env(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("MEMLAB_CACHE_DIR", raising=False)
    assert default_cache_dir() == Path.home() / ".cache" / "memlab" / "embeddings"


def test_empty_input(tmp_path: Path) -> None:
    inner = CountingEmbedder()
    out = CachedEmbedder(inner, tmp_path).embed([])
    assert out.shape == (0, 16)
    assert inner.calls == []


def test_chunks_committed_before_a_crash_are_kept(tmp_path: Path) -> None:
    texts = ["t1", "t2", "t3", "t4", "t5"]
    failing = FailingEmbedder(fail_on=3)
    cached = CachedEmbedder(failing, tmp_path, chunk_size=2)
    with pytest.raises(RuntimeError, match="embedder crashed"):
        cached.embed(texts)
    assert failing.calls == [["t1", "t2"], ["t3", "t4"], ["t5"]]
    assert cached.size() == 4
    inner = CountingEmbedder()
    resumed = CachedEmbedder(inner, tmp_path, chunk_size=2)
    resumed.embed(texts)
    assert inner.calls == [["t5"]]


def test_wrong_shape_from_embedder(tmp_path: Path) -> None:
    class Broken(CountingEmbedder):
        def embed(self, texts: Sequence[str]) -> np.ndarray:
            return np.zeros((len(texts), 3), dtype=np.float32)

    with pytest.raises(ValueError, match=r"returned shape \(2, 3\), expected \(2, 16\)"):
        CachedEmbedder(Broken(), tmp_path).embed(["a", "b"])


def test_dimension_mismatch_with_existing_cache(tmp_path: Path) -> None:
    CachedEmbedder(CountingEmbedder(dim=16, model_id="m"), tmp_path).embed(["a"])
    with pytest.raises(ValueError, match="meta field 'dim' is '16', expected '8'"):
        CachedEmbedder(CountingEmbedder(dim=8, model_id="m"), tmp_path).embed(["a"])


def test_protocol_and_passthrough_attributes(tmp_path: Path) -> None:
    cached = CachedEmbedder(CountingEmbedder(dim=16), tmp_path)
    assert isinstance(cached, Embedder)
    assert (cached.model_id, cached.dim) == ("hashing-d16-s0-c0", 16)


def test_invalid_chunk_size(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="chunk_size must be >= 1"):
        CachedEmbedder(CountingEmbedder(), tmp_path, chunk_size=0).embed(["a"])


def test_recent_vectors_are_kept_in_memory_up_to_memo_size(tmp_path: Path) -> None:
    inner = CountingEmbedder()
    cached = CachedEmbedder(inner, tmp_path, memo_size=2)
    cached.embed(TEXTS)  # the memory keeps the last two: TEXTS[1], TEXTS[2]
    cached.db_path.unlink()  # what is not in memory must now be embedded again
    again = cached.embed(TEXTS[1:])
    assert inner.calls == [TEXTS] and (cached.misses_, cached.hits_) == (3, 2)
    assert again.tobytes() == inner.inner.embed(TEXTS[1:]).tobytes()
    cached.embed(TEXTS[:1])
    assert inner.calls == [TEXTS, TEXTS[:1]] and cached.misses_ == 4
    with pytest.raises(ValueError, match="memo_size must be an int >= 0"):
        CachedEmbedder(inner, tmp_path, memo_size=-1).embed(TEXTS)
    none_kept = CachedEmbedder(CountingEmbedder(), tmp_path / "b", memo_size=0)
    none_kept.embed(TEXTS)
    assert none_kept.memo_ == {}
