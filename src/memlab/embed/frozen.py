"""Embedders that ship precomputed vectors to worker processes.

:class:`RecordingEmbedder` wraps an embedder in the parent process and keeps every vector it
returns; :meth:`RecordingEmbedder.freeze` turns what it saw into a :class:`FrozenEmbedder`, one
float32 matrix and a text → row map, which pickles cheaply and needs no model. A worker that meets
a text the parent never embedded asks the optional ``fallback`` (for MiniLM behind the disk cache:
a read from the cache, the model only if the cache misses too) and counts it in ``misses_``.
"""

from __future__ import annotations

import copy
from collections.abc import Iterable, Iterator, Mapping, Sequence
from typing import Any

import numpy as np

from memlab.embed.base import Embedder, check_texts

__all__ = ["FrozenEmbedder", "FrozenRows", "RecordingEmbedder", "unloaded"]


def unloaded(embedder: Any) -> Any:
    """A shallow copy of ``embedder`` without fitted state (attributes ending in ``_``).

    A loaded model (``model_``) is dropped, so the copy pickles small and loads the model only
    if it is asked to embed; a wrapped ``embedder`` attribute is stripped the same way.
    """
    if not hasattr(embedder, "__dict__"):
        return embedder
    out = copy.copy(embedder)
    for name in [n for n in vars(out) if n.endswith("_") and not n.startswith("__")]:
        delattr(out, name)
    inner = getattr(out, "embedder", None)
    if inner is not None:
        out.embedder = unloaded(inner)
    if hasattr(embedder, "hits_"):  # counters of CachedEmbedder start again at zero
        out.hits_ = 0
        out.misses_ = 0
    return out


class FrozenEmbedder:
    """A fixed table of vectors behind the :class:`~memlab.embed.base.Embedder` protocol.

    Args:
        texts: The texts, one per row of ``vectors``.
        vectors: ``(len(texts), dim)`` float32 matrix.
        model_id: The model id of the embedder that computed them (it keys stage caches).
        fallback: Embedder asked for texts not in the table; ``None`` makes them an error.

    Attributes:
        misses_: Texts served by the fallback (each distinct text once: its vector is kept).
    """

    def __init__(
        self,
        texts: Sequence[str],
        vectors: np.ndarray,
        model_id: str,
        fallback: Embedder | None = None,
    ) -> None:
        self.texts = texts
        self.vectors = vectors
        self.model_id = model_id
        self.fallback = fallback
        self.misses_ = 0
        self._rows = {t: i for i, t in enumerate(texts)}

    @property
    def dim(self) -> int:
        """Length of every vector."""
        return int(self.vectors.shape[1])

    def table(self, texts: Iterable[str]) -> FrozenRows | None:
        """``texts`` → their rows of the table, as a read-only mapping that shares this
        embedder's matrix (pickled with it, the vectors cross a process boundary once), or
        ``None`` when a text is not in the table."""
        if not all(t in self._rows for t in texts):
            return None
        return FrozenRows(self)

    def embed(self, texts: Sequence[str]) -> np.ndarray:
        """Look the texts up (the fallback embeds the missing ones).

        Raises:
            ValueError: A text is not in the table and there is no fallback.
        """
        items = check_texts(texts)
        out = np.empty((len(items), self.dim), dtype=np.float32)
        extra: dict[str, np.ndarray] = self.__dict__.setdefault("_extra", {})
        missing = []
        for i, t in enumerate(items):
            row = self._rows.get(t)
            if row is not None:
                out[i] = self.vectors[row]
            elif t in extra:
                out[i] = extra[t]
            else:
                missing.append(i)
        if missing:
            if self.fallback is None:
                raise ValueError(
                    f"FrozenEmbedder({self.model_id}): text not precomputed: {items[missing[0]]!r}"
                )
            vecs = np.asarray(self.fallback.embed([items[i] for i in missing]), dtype=np.float32)
            out[missing] = vecs
            self.misses_ += len(missing)
            # A text the fallback embedded is asked for again (a sentence of a memory that is
            # a candidate of many queries): keep its vector beside the table.
            for i, vec in zip(missing, vecs, strict=True):
                extra[items[i]] = vec
        return out


class FrozenRows(Mapping[str, np.ndarray]):
    """The rows of a :class:`FrozenEmbedder`'s table by text (:meth:`FrozenEmbedder.table`)."""

    def __init__(self, frozen: FrozenEmbedder) -> None:
        self.frozen = frozen

    def __getitem__(self, text: str) -> np.ndarray:
        return self.frozen.vectors[self.frozen._rows[text]]

    def __iter__(self) -> Iterator[str]:
        return iter(self.frozen.texts)

    def __len__(self) -> int:
        return len(self.frozen.texts)


class RecordingEmbedder:
    """Wraps an embedder and keeps every (text, vector) it returns, in first-seen order.

    Args:
        embedder: The embedder to wrap.
    """

    def __init__(self, embedder: Embedder) -> None:
        self.embedder = embedder
        self.seen_: dict[str, np.ndarray] = {}

    @property
    def model_id(self) -> str:
        """The wrapped embedder's model id."""
        return self.embedder.model_id

    @property
    def dim(self) -> int:
        """The wrapped embedder's vector length."""
        return self.embedder.dim

    def embed(self, texts: Sequence[str]) -> np.ndarray:
        """Embed with the wrapped embedder and remember the vectors."""
        vecs = np.asarray(self.embedder.embed(texts), dtype=np.float32)
        for t, v in zip(texts, vecs, strict=True):
            self.seen_.setdefault(t, v)
        return vecs

    def freeze(self, *, fallback: bool = True) -> FrozenEmbedder:
        """Everything seen so far as a :class:`FrozenEmbedder` (fallback: an unloaded copy of
        the wrapped embedder)."""
        texts = list(self.seen_)
        dim = self.dim if not texts else len(next(iter(self.seen_.values())))
        matrix = (
            np.stack([self.seen_[t] for t in texts]).astype(np.float32)
            if texts
            else np.zeros((0, dim), dtype=np.float32)
        )
        return FrozenEmbedder(
            texts, matrix, self.model_id, unloaded(self.embedder) if fallback else None
        )
