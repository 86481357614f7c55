"""A model-free, deterministic embedder based on signed feature hashing.

Each lowercase word (and, optionally, each character n-gram of each word) is hashed with
BLAKE2b into a bucket in ``[0, dim)`` and a sign in ``{-1, +1}``; a text's vector is the sum of
its features' signed one-hot vectors, L2-normalised. Feature hashing with a sign bit follows
Weinberger et al., "Feature Hashing for Large Scale Multitask Learning", ICML 2009.

The hash is keyed by ``seed`` and independent of Python's randomised ``hash()``, so vectors are
byte-identical across processes and machines. Texts that share words get a higher cosine than
texts that share none (up to bucket collisions, which a larger ``dim`` makes rarer). It needs no
model files, which makes it the embedder of choice for tests and smoke runs.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Sequence

import numpy as np

from memlab.embed.base import check_texts, register_embedder

__all__ = ["HashingEmbedder"]

_WORD = re.compile(r"\w+")
_EMPTY_FEATURE = "\x00empty"
_MAX_CACHED = 1 << 16


@register_embedder("hashing")
class HashingEmbedder:
    """Signed feature-hashing embedder over lowercase words.

    Args:
        dim: Number of hash buckets, i.e. the vector length.
        seed: Non-negative integer keying the hash; different seeds give unrelated vectors.
        char_ngram: Length of character n-grams added as features for every word (``3`` gives
            trigrams of ``"#word#"``); ``0`` uses words only.

    A text without any word character maps to a fixed "empty" feature so that every row still
    has unit norm.
    """

    def __init__(self, dim: int = 64, seed: int = 0, char_ngram: int = 0) -> None:
        self.dim = dim
        self.seed = seed
        self.char_ngram = char_ngram

    @property
    def model_id(self) -> str:
        """Identifier encoding every setting that changes the vectors."""
        return f"hashing-d{self.dim}-s{self.seed}-c{self.char_ngram}"

    def _validate(self) -> None:
        for name in ("dim", "seed", "char_ngram"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int):
                raise TypeError(f"HashingEmbedder.{name} must be an int, got {value!r}")
        if self.dim < 1:
            raise ValueError(f"HashingEmbedder.dim must be >= 1, got {self.dim}")
        if self.seed < 0:
            raise ValueError(f"HashingEmbedder.seed must be >= 0, got {self.seed}")
        if self.char_ngram < 0:
            raise ValueError(f"HashingEmbedder.char_ngram must be >= 0, got {self.char_ngram}")

    def features(self, text: str) -> list[str]:
        """Return the hashed features of ``text`` in order (words, then their n-grams).

        Args:
            text: The input text.

        Returns:
            Feature strings; word features are prefixed ``"w:"`` and n-gram features ``"c:"`` so
            that a word never collides with an identical n-gram by construction.
        """
        words = _WORD.findall(text.lower())
        feats = [f"w:{w}" for w in words]
        n = self.char_ngram
        if n > 0:
            for w in words:
                padded = f"#{w}#"
                feats.extend(f"c:{padded[i : i + n]}" for i in range(max(1, len(padded) - n + 1)))
        if not feats:
            feats.append(_EMPTY_FEATURE)
        return feats

    def bucket(self, feature: str) -> tuple[int, float]:
        """Return the ``(index, sign)`` a feature hashes to.

        Features recur (words do), so the answers are kept in a bounded table for the current
        ``dim`` and ``seed`` (up to ``_MAX_CACHED`` features; cleared when full or when either
        setting changes).

        Args:
            feature: A feature string as produced by :meth:`features`.

        Returns:
            The bucket index in ``[0, dim)`` and the sign ``+1.0`` or ``-1.0``.
        """
        key = (self.dim, self.seed)
        cache = self.__dict__.get("_buckets")
        if cache is None or cache[0] != key or len(cache[1]) >= _MAX_CACHED:
            cache = self.__dict__["_buckets"] = (key, {})
        got = cache[1].get(feature)
        if got is None:
            digest = hashlib.blake2b(
                f"{self.seed}\x1f{feature}".encode(), digest_size=16
            ).digest()
            index = int.from_bytes(digest[:8], "big") % self.dim
            sign = 1.0 if digest[8] & 1 else -1.0
            got = cache[1][feature] = (index, sign)
        return got

    def embed(self, texts: Sequence[str]) -> np.ndarray:
        """Embed ``texts`` as L2-normalised signed hashed bag-of-features vectors.

        Args:
            texts: The texts to embed.

        Returns:
            A float32 array of shape ``(len(texts), dim)`` with unit-norm rows.
        """
        self._validate()
        items = check_texts(texts)
        out = np.zeros((len(items), self.dim), dtype=np.float64)
        for row, text in enumerate(items):
            for feature in self.features(text):
                index, sign = self.bucket(feature)
                out[row, index] += sign
            norm = np.linalg.norm(out[row])
            if norm == 0.0:
                # Every feature cancelled out in shared buckets: fall back to the empty feature.
                index, sign = self.bucket(_EMPTY_FEATURE)
                out[row, index] = sign
                norm = 1.0
            out[row] /= norm
        return out.astype(np.float32)
