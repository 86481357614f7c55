"""Tests for memlab.embed.onnx.OnnxEmbedder: an ONNX export of all-MiniLM-L6-v2, made in the
test (torch's exporter needs the ``onnx`` package), embeds as the sentence-transformers model
does."""

from __future__ import annotations

import shutil
from pathlib import Path

import numpy as np
import pytest

from memlab.embed import MiniLMEmbedder, OnnxEmbedder, default_minilm_path, make_embedder

TEXTS = [
    "Melanie went camping with her kids in the mountains.",
    "What did Caroline research?",
    "ok",
    " ".join(["a long memory that runs past the model's two hundred and fifty-six tokens"] * 40),
]


def _export(out: Path) -> Path:
    pytest.importorskip("onnx")
    torch = pytest.importorskip("torch")
    from transformers import AutoModel, AutoTokenizer

    src = default_minilm_path()
    out.mkdir(parents=True)
    for name in ("tokenizer.json", "sentence_bert_config.json", "config.json"):
        shutil.copy(src / name, out / name)
    (out / "1_Pooling").mkdir()
    shutil.copy(src / "1_Pooling" / "config.json", out / "1_Pooling" / "config.json")
    tok = AutoTokenizer.from_pretrained(str(src))
    model = AutoModel.from_pretrained(str(src)).eval()

    class Tokens(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.model = model

        def forward(self, input_ids, attention_mask, token_type_ids):  # noqa: ANN001
            return self.model(input_ids=input_ids, attention_mask=attention_mask,
                              token_type_ids=token_type_ids).last_hidden_state

    enc = tok(["hello world", "a b c"], padding=True, return_tensors="pt")
    axes = {k: {0: "batch", 1: "tokens"}
            for k in ("input_ids", "attention_mask", "token_type_ids", "last_hidden_state")}
    torch.onnx.export(Tokens(), (enc["input_ids"], enc["attention_mask"], enc["token_type_ids"]),
                      str(out / "model.onnx"), input_names=list(axes)[:3],
                      output_names=["last_hidden_state"], dynamic_axes=axes, opset_version=17,
                      dynamo=False)
    return out


@pytest.fixture(scope="module")
def export(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return _export(tmp_path_factory.mktemp("onnx") / "minilm-onnx")


@pytest.mark.slow
def test_an_onnx_export_embeds_as_the_sentence_transformers_model(export: Path) -> None:
    onnx = make_embedder(f"onnx:{export}", batch_size=3)
    assert isinstance(onnx, OnnxEmbedder) and onnx.dim == 384
    got = onnx.embed(TEXTS)
    want = MiniLMEmbedder().embed(TEXTS)
    assert got.dtype == np.float32 and got.shape == (4, 384)
    np.testing.assert_allclose(np.linalg.norm(got, axis=1), 1.0, atol=1e-6)
    np.testing.assert_allclose(got, want, atol=2e-5)  # the long text is truncated alike
    assert onnx.pooling_ == "mean"
    assert onnx.model_id.startswith("onnx-minilm-onnx-")


@pytest.mark.slow
def test_the_model_id_changes_with_the_export_and_layouts_are_found(export: Path,
                                                                    tmp_path: Path) -> None:
    nested = tmp_path / "nested"
    (nested / "onnx").mkdir(parents=True)
    shutil.copy(export / "model.onnx", nested / "onnx" / "model.onnx")
    shutil.copy(export / "tokenizer.json", nested / "tokenizer.json")
    emb = OnnxEmbedder(model_path=nested, pooling="cls", max_length=8)
    vec = emb.embed(["one two three"])
    assert emb.pooling_ == "cls" and vec.shape == (1, 384)  # no pooling file: the argument
    assert emb.model_id != OnnxEmbedder(model_path=export).model_id


def test_missing_files_and_bad_settings_are_named(tmp_path: Path) -> None:
    with pytest.raises(FileNotFoundError, match="is not a directory"):
        OnnxEmbedder(model_path=tmp_path / "nope").embed(["x"])
    with pytest.raises(FileNotFoundError, match="no model.onnx"):
        OnnxEmbedder(model_path=tmp_path).embed(["x"])
    (tmp_path / "model.onnx").write_bytes(b"")
    with pytest.raises(FileNotFoundError, match="no tokenizer.json"):
        OnnxEmbedder(model_path=tmp_path).embed(["x"])
    with pytest.raises(ValueError, match="pooling"):
        OnnxEmbedder(model_path=tmp_path, pooling="sum").embed(["x"])
    with pytest.raises(ValueError, match="batch_size"):
        OnnxEmbedder(model_path=tmp_path, batch_size=0).embed(["x"])
    with pytest.raises(ValueError, match="names no directory"):
        make_embedder("onnx:")
