"""Token embeddings: one unit vector per token of a text, for late-interaction scoring.

A *token embedder* is an embedder that also has ``embed_tokens(texts)``, returning one
``(n_tokens, dim)`` float32 matrix per text whose rows have unit L2 norm (the contextual output
of the encoder before pooling, without the ``[CLS]``/``[SEP]`` markers).
:class:`~memlab.embed.minilm.MiniLMEmbedder` is one. :func:`token_embeddings` finds the token
embedder inside the wrappers an experiment puts around it (the on-disk cache, the replayer's
cache, the recording or frozen tables of a parallel sweep) and keeps every matrix in a
:class:`TokenCache` beside the vector cache, so a text's tokens are computed once across runs
and processes.

The cache is one SQLite database per model (``<cache root>/<model id>/tokens.sqlite3``): a row
is the SHA-256 digest of the UTF-8 text and the matrix as little-endian float16 bytes (half the
size of float32; a token cosine changes by less than 1e-3).
"""

from __future__ import annotations

import hashlib
import os
import sqlite3
from collections.abc import Sequence
from pathlib import Path
from typing import Any, Protocol, runtime_checkable

import numpy as np

from memlab.embed.base import check_texts
from memlab.embed.cache import CachedEmbedder, _safe_name, default_cache_dir

__all__ = ["TokenCache", "TokenEmbedder", "find_token_embedder", "token_embeddings"]


@runtime_checkable
class TokenEmbedder(Protocol):
    """An embedder that also returns per-token vectors."""

    @property
    def model_id(self) -> str:
        """Identifier of the model and its settings."""
        ...

    @property
    def dim(self) -> int:
        """Length of every token vector."""
        ...

    def embed_tokens(self, texts: Sequence[str]) -> list[np.ndarray]:
        """One ``(n_tokens, dim)`` float32 matrix of unit rows per text (``n_tokens >= 1``)."""
        ...


def find_token_embedder(embedder: Any) -> tuple[Any | None, Path | None]:
    """The token embedder inside ``embedder``'s wrappers, and the cache root on the way.

    Follows ``embedder`` and ``fallback`` attributes (the wrappers memlab puts around a model)
    until an object with a callable ``embed_tokens``.

    Returns:
        ``(token embedder or None, cache root of the first CachedEmbedder met or None)``.
    """
    seen: set[int] = set()
    root: Path | None = None
    obj = embedder
    while obj is not None and id(obj) not in seen:
        seen.add(id(obj))
        if isinstance(obj, CachedEmbedder) and root is None:
            root = (
                Path(obj.cache_dir).expanduser() if obj.cache_dir is not None
                else default_cache_dir()
            )
        if callable(getattr(obj, "embed_tokens", None)):
            return obj, root
        obj = getattr(obj, "embedder", None) or getattr(obj, "fallback", None)
    return None, root


class TokenCache:
    """Token matrices on disk, keyed by ``(model_id, sha256(text))``.

    Args:
        root: Cache root (the vector cache's: ``$MEMLAB_CACHE_DIR`` or
            ``~/.cache/memlab/embeddings``).
        model_id: The token embedder's model id (its directory).
        dim: Length of every token vector.
        lock_timeout: Seconds to wait for another process's write lock.
    """

    def __init__(self, root: str | os.PathLike[str], model_id: str, dim: int,
                 lock_timeout: float = 30.0) -> None:
        self.root = root
        self.model_id = model_id
        self.dim = dim
        self.lock_timeout = lock_timeout

    @property
    def db_path(self) -> Path:
        """The database file."""
        return Path(self.root).expanduser() / _safe_name(self.model_id) / "tokens.sqlite3"

    def _connect(self) -> sqlite3.Connection:
        path = self.db_path
        path.parent.mkdir(parents=True, exist_ok=True)
        conn = sqlite3.connect(path, timeout=self.lock_timeout, isolation_level=None)
        conn.execute("PRAGMA journal_mode=WAL")
        conn.execute("PRAGMA synchronous=NORMAL")
        conn.execute(
            "CREATE TABLE IF NOT EXISTS tokens (key BLOB PRIMARY KEY, dim INTEGER NOT NULL, "
            "mat BLOB NOT NULL)"
        )
        return conn

    def get_or_compute(
        self, texts: Sequence[str], compute: Any
    ) -> list[np.ndarray]:
        """The matrices of ``texts``, computing the missing ones with ``compute(list)``."""
        items = check_texts(texts)
        keys = [hashlib.sha256(t.encode("utf-8")).digest() for t in items]
        found: dict[bytes, np.ndarray] = {}
        conn = self._connect()
        try:
            unique = list(dict.fromkeys(keys))
            for start in range(0, len(unique), 500):
                part = unique[start : start + 500]
                marks = ",".join("?" * len(part))
                for key, dim, blob in conn.execute(
                    f"SELECT key, dim, mat FROM tokens WHERE key IN ({marks})", part
                ):
                    if dim != self.dim:
                        raise ValueError(
                            f"{self.db_path}: an entry has dim {dim}, expected {self.dim}"
                        )
                    mat = np.frombuffer(blob, dtype="<f2").reshape(-1, dim)
                    found[bytes(key)] = mat.astype(np.float32)
            first = {k: i for i, k in reversed(list(enumerate(keys)))}
            missing = [k for k in unique if k not in found]
            if missing:
                mats = compute([items[first[k]] for k in missing])
                conn.execute("BEGIN IMMEDIATE")
                conn.executemany(
                    "INSERT OR IGNORE INTO tokens (key, dim, mat) VALUES (?, ?, ?)",
                    [(k, self.dim, np.asarray(m, dtype="<f2").tobytes())
                     for k, m in zip(missing, mats, strict=True)],
                )
                conn.execute("COMMIT")
                for k, m in zip(missing, mats, strict=True):
                    found[k] = np.asarray(m, dtype=np.float16).astype(np.float32)
        finally:
            conn.close()
        return [found[k] for k in keys]


def token_embeddings(
    embedder: Any, texts: Sequence[str], *, persist: bool = True
) -> list[np.ndarray]:
    """Token matrices of ``texts`` from the token embedder inside ``embedder``.

    Through the on-disk :class:`TokenCache` when ``persist`` and a
    :class:`~memlab.embed.cache.CachedEmbedder` wraps the model (every matrix rounded to float16
    then, computed or read), directly otherwise (a query embedded once per run is not worth a
    database transaction).

    Raises:
        ValueError: No token embedder is found (the message names ``embedder``'s type).
    """
    inner, root = find_token_embedder(embedder)
    if inner is None:
        raise ValueError(
            f"embedder {type(embedder).__name__} has no embed_tokens: late interaction needs "
            "a token embedder (e.g. minilm)"
        )
    if root is None or not persist:
        return [np.asarray(m, dtype=np.float32) for m in inner.embed_tokens(list(texts))]
    cache = TokenCache(root, inner.model_id, inner.dim)
    return cache.get_or_compute(texts, inner.embed_tokens)
