"""Any ONNX export of a sentence encoder as an embedder, run by onnxruntime (no torch).

``onnx:DIR`` (or ``OnnxEmbedder(model_path=DIR)``) loads ``DIR/model.onnx`` (or
``DIR/onnx/model.onnx``, the layout of sentence-transformers' and Optimum's exports) and the
fast tokenizer ``DIR/tokenizer.json``. The graph takes ``input_ids`` and ``attention_mask``
(and ``token_type_ids`` when it declares it) and returns either token vectors
``(batch, tokens, dim)``, which are pooled, or sentence vectors ``(batch, dim)``, which are used
as they are; every vector is then L2-normalised. The pooling and the maximum length come from the
sentence-transformers files when the directory has them (``1_Pooling/config.json``,
``sentence_bert_config.json``), else from the arguments (mean pooling, 256 tokens). Nothing is
downloaded; onnxruntime runs on the CPU with ``num_threads`` intra-op threads.

``model_id`` is ``onnx-<directory name>-<digest>``, the digest covering the configuration files
and the content of every weight file (:func:`~memlab.embed.sentence_transformer.model_digest`),
so two exports never share an embedding cache entry.
"""

from __future__ import annotations

import json
import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from memlab.embed.base import PATH_PREFIXES, check_texts, register_embedder
from memlab.embed.sentence_transformer import _positive_int, model_digest

__all__ = ["OnnxEmbedder"]

POOLINGS = ("mean", "cls", "max")


def _pooling_from_config(path: Path) -> str | None:
    cfg = path / "1_Pooling" / "config.json"
    if not cfg.is_file():
        return None
    modes = json.loads(cfg.read_text(encoding="utf-8"))
    for key, name in (("pooling_mode_cls_token", "cls"), ("pooling_mode_max_tokens", "max"),
                      ("pooling_mode_mean_tokens", "mean")):
        if modes.get(key):
            return name
    return None


def _max_length_from_config(path: Path) -> int | None:
    cfg = path / "sentence_bert_config.json"
    if not cfg.is_file():
        return None
    value = json.loads(cfg.read_text(encoding="utf-8")).get("max_seq_length")
    return int(value) if isinstance(value, int) and value > 0 else None


@register_embedder("onnx")
class OnnxEmbedder:
    """A sentence encoder exported to ONNX, run by onnxruntime.

    The session and the tokenizer are loaded on first use (fitted attributes ``session_`` and
    ``tokenizer_``).

    Args:
        model_path: The export's directory (``model.onnx`` or ``onnx/model.onnx``, and
            ``tokenizer.json``).
        pooling: ``"mean"``, ``"cls"`` or ``"max"`` over the token vectors, when the directory
            does not say (``1_Pooling/config.json``).
        max_length: Tokens per text (longer texts are truncated), when the directory does not
            say (``sentence_bert_config.json``).
        batch_size: Texts per run of the session.
        num_threads: onnxruntime's intra-op threads.
    """

    def __init__(
        self,
        model_path: str | os.PathLike[str] | None = None,
        pooling: str = "mean",
        max_length: int = 256,
        batch_size: int = 64,
        num_threads: int = 1,
    ) -> None:
        self.model_path = model_path
        self.pooling = pooling
        self.max_length = max_length
        self.batch_size = batch_size
        self.num_threads = num_threads

    def _dir(self) -> Path:
        if self.model_path is None:
            raise ValueError("OnnxEmbedder needs model_path= (or the name onnx:DIR)")
        path = Path(self.model_path).expanduser()
        if not path.is_dir():
            raise FileNotFoundError(f"OnnxEmbedder.model_path {str(path)!r} is not a directory")
        return path

    def _model_file(self, path: Path) -> Path:
        for candidate in (path / "model.onnx", path / "onnx" / "model.onnx"):
            if candidate.is_file():
                return candidate
        raise FileNotFoundError(
            f"{path}: no model.onnx (looked for model.onnx and onnx/model.onnx)"
        )

    @property
    def model_id(self) -> str:
        """``onnx-<directory name>-<digest of its configuration and weights>``."""
        path = self._dir()
        return f"onnx-{path.name}-{model_digest(path)}"

    @property
    def dim(self) -> int:
        """Length of every vector (the graph's last output axis)."""
        session, _ = self.load()
        return int(session.get_outputs()[0].shape[-1])

    def load(self) -> tuple[Any, Any]:
        """Load the session and the tokenizer if they are not loaded yet.

        Raises:
            FileNotFoundError: The directory, ``model.onnx`` or ``tokenizer.json`` is missing.
            ValueError: A setting is out of range, or the graph has no ``input_ids`` input.
        """
        session = getattr(self, "session_", None)
        if session is not None:
            return session, self.tokenizer_
        path = self._dir()
        if self.pooling not in POOLINGS:
            raise ValueError(f"OnnxEmbedder.pooling must be one of {POOLINGS}, "
                             f"got {self.pooling!r}")
        for name in ("max_length", "batch_size", "num_threads"):
            _positive_int(getattr(self, name), "OnnxEmbedder", name)
        model = self._model_file(path)
        tokenizer_file = path / "tokenizer.json"
        if not tokenizer_file.is_file():
            raise FileNotFoundError(f"{path}: no tokenizer.json (a fast tokenizer file)")
        import onnxruntime as ort
        from tokenizers import Tokenizer

        options = ort.SessionOptions()
        options.intra_op_num_threads = self.num_threads
        options.inter_op_num_threads = 1
        session = ort.InferenceSession(str(model), options, providers=["CPUExecutionProvider"])
        names = {i.name for i in session.get_inputs()}
        if "input_ids" not in names:
            raise ValueError(f"{model}: the graph has no input_ids input (inputs: "
                             f"{', '.join(sorted(names))})")
        tokenizer = Tokenizer.from_file(str(tokenizer_file))
        tokenizer.enable_truncation(_max_length_from_config(path) or self.max_length)
        pad = tokenizer.padding
        pad_token = pad["pad_token"] if pad else "[PAD]"
        pad_id = tokenizer.token_to_id(pad_token)
        tokenizer.enable_padding(pad_id=0 if pad_id is None else pad_id, pad_token=pad_token)
        self.pooling_ = _pooling_from_config(path) or self.pooling
        self.session_, self.tokenizer_ = session, tokenizer
        return session, tokenizer

    def embed(self, texts: Sequence[str]) -> np.ndarray:
        """Embed ``texts`` into float32 unit-norm rows."""
        items = check_texts(texts)
        session, tokenizer = self.load()
        if not items:
            return np.zeros((0, self.dim), dtype=np.float32)
        wanted = {i.name for i in session.get_inputs()}
        # longest first, as sentence-transformers does: a batch pads to its longest text
        order = np.argsort([-len(t) for t in items], kind="stable")
        out = []
        for start in range(0, len(items), self.batch_size):
            encs = tokenizer.encode_batch(
                [items[i] for i in order[start : start + self.batch_size]]
            )
            ids = np.asarray([e.ids for e in encs], dtype=np.int64)
            mask = np.asarray([e.attention_mask for e in encs], dtype=np.int64)
            feed = {"input_ids": ids, "attention_mask": mask}
            if "token_type_ids" in wanted:
                feed["token_type_ids"] = np.asarray([e.type_ids for e in encs], dtype=np.int64)
            result = np.asarray(session.run(None, {k: v for k, v in feed.items()
                                                   if k in wanted})[0], dtype=np.float32)
            out.append(result if result.ndim == 2 else self._pool(result, mask))
        vectors = np.empty((len(items), out[0].shape[1]), dtype=np.float32)
        vectors[order] = np.concatenate(out)
        norms = np.linalg.norm(vectors, axis=1, keepdims=True)
        return np.ascontiguousarray(vectors / np.where(norms > 0, norms, 1.0), dtype=np.float32)

    def _pool(self, tokens: np.ndarray, mask: np.ndarray) -> np.ndarray:
        m = mask[:, :, None].astype(np.float32)
        if self.pooling_ == "cls":
            return tokens[:, 0]
        if self.pooling_ == "max":
            return np.where(m > 0, tokens, -np.inf).max(axis=1)
        return (tokens * m).sum(axis=1) / np.maximum(m.sum(axis=1), 1e-9)


PATH_PREFIXES["onnx"] = "onnx"
