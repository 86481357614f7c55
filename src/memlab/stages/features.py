"""Relevance features of (query, memory) pairs, for the CRAG evaluator and for notebooks.

One row per candidate text (a whole memory or a sentence strip of one), columns
:data:`FEATURE_NAMES`:

* ``dense`` -- cosine of the query vector (``ctx.vector()``, HyDE-aware) and the text's vector:
  the store's vector for a whole memory, the embedder's for a strip; 0 without a vector.
* ``bm25`` -- Okapi BM25 (Robertson & Zaragoza 2009; ``k1 = 1.5``, ``b = 0.75``) of the text for
  the query, over unique query terms, with ``idf = ln(1 + (N - df + 0.5) / (df + 0.5))`` and
  ``N``, ``df`` and the mean length counted over the rows the query may see (so a replay never
  learns from the future). Normalised by the query's upper bound ``Σ idf(t) (k1 + 1)``, which
  puts it in ``[0, 1)`` independently of the other candidates.
* ``entity_overlap`` -- Jaccard of the entity sets of the query and of the text, both found by
  the store's query-side extraction (:meth:`MemoryStore.query_entities`), so memory and strip
  are treated alike; 0 when both are empty.
* ``recency`` -- ``ln(1 + days since creation)`` at ``ctx.now`` (never negative).
* ``type_event``, ``type_fact``, ``type_decision``, ``type_status`` -- one-hot memory type.
* ``rank_reciprocal`` -- ``1 / rank`` of the candidate in the incoming ranking.
* ``score_norm`` -- incoming score, max-normalised over the incoming frame
  (``max(score, 0) / max(score)``).

Tokens are lowercase ``\\w+`` words (:func:`word_tokens`), as in the entropy gate.
"""

from __future__ import annotations

import functools
import math
import re
from collections import Counter
from collections.abc import Sequence

import numpy as np

from memlab.memory.records import MEMORY_TYPES
from memlab.stages.base import QueryContext
from memlab.stages.graph import cached
from memlab.timeutil import SECONDS_PER_DAY

_WORD = re.compile(r"\w+")

FEATURE_NAMES: tuple[str, ...] = (
    "dense",
    "bm25",
    "entity_overlap",
    "recency",
    *(f"type_{t}" for t in MEMORY_TYPES),
    "rank_reciprocal",
    "score_norm",
)
"""Column names of :func:`candidate_features`, in order."""


def max_normalise(values: np.ndarray | Sequence[float]) -> np.ndarray:
    """``max(x, 0) / max(x)``: the best value becomes 1; all zeros when none is positive. A
    value that is not a finite number (a candidate with no score) counts as 0."""
    x = np.asarray(values, dtype=np.float64)
    x = np.where(np.isfinite(x), np.maximum(x, 0.0), 0.0)
    top = float(x.max()) if x.size else 0.0
    return x / top if top > 0.0 else np.zeros_like(x)


def word_tokens(text: str) -> list[str]:
    """Lowercase word tokens (``\\w+``) of ``text``."""
    return _WORD.findall(text.lower())


@functools.lru_cache(maxsize=65_536)
def _term_counts(text: str) -> tuple[dict[str, int], int]:
    """Each word token's count in ``text``, and the number of tokens (read only; a text's
    are computed once: the same memories are candidates of many queries)."""
    toks = word_tokens(text)
    return dict(Counter(toks)), len(toks)


class TermIndex:
    """Postings for BM25 statistics, grown row by row: term → rows containing it, row lengths.

    The index appends the rows it has not seen (:meth:`add`, called by :func:`term_index`); a
    purge, which rewrites a text in place, makes :func:`term_index` build a new one.
    """

    def __init__(self) -> None:
        self.postings: dict[str, list[int]] = {}
        self.lengths: list[int] = []

    def add(self, text: str) -> None:
        """Index the next row."""
        row = len(self.lengths)
        toks = word_tokens(text)
        self.lengths.append(len(toks))
        for term in dict.fromkeys(toks):
            self.postings.setdefault(term, []).append(row)


def term_index(ctx: QueryContext) -> TermIndex:
    """The store's term index (kept in ``ctx.cache``, extended when the store grows)."""
    store = ctx.store
    index = cached(ctx, ("terms",), store, ("grown in place", store.content_version), TermIndex)
    for row in range(len(index.lengths), len(store)):
        index.add(store.record_at(row).text)
    return index


def bm25_scores(
    ctx: QueryContext, texts: Sequence[str], *, k1: float = 1.5, b: float = 0.75
) -> np.ndarray:
    """Normalised BM25 of each text for ``ctx.text`` (see the module docstring)."""
    index = term_index(ctx)
    visible = ctx.visible_mask()
    n_docs = int(visible.sum())
    out = np.zeros(len(texts), dtype=np.float64)
    terms = list(dict.fromkeys(word_tokens(ctx.text)))
    if n_docs == 0 or not terms:
        return out
    lengths = np.asarray(index.lengths[: len(visible)], dtype=np.float64)
    avgdl = float(lengths[visible].mean()) or 1.0
    idf = {}
    for t in terms:
        rows = index.postings.get(t)
        df = int(visible[np.asarray(rows, dtype=np.int64)].sum()) if rows else 0
        idf[t] = math.log(1.0 + (n_docs - df + 0.5) / (df + 0.5))
    bound = sum(idf.values()) * (k1 + 1.0)
    for i, text in enumerate(texts):
        counts, length = _term_counts(text)
        norm = k1 * (1.0 - b + b * length / avgdl)
        score = 0.0
        for t in terms:
            tf = counts.get(t, 0)
            if tf:
                score += idf[t] * tf * (k1 + 1.0) / (tf + norm)
        out[i] = score / bound if bound > 0 else 0.0
    return out


def entity_overlap(ctx: QueryContext, texts: Sequence[str]) -> np.ndarray:
    """Jaccard of query entities and each text's entities (query-side extraction for both)."""
    query = set(ctx.store.query_entities(ctx.text))
    out = np.zeros(len(texts), dtype=np.float64)
    for i, text in enumerate(texts):
        ents = set(ctx.store.query_entities(text))
        union = query | ents
        out[i] = len(query & ents) / len(union) if union else 0.0
    return out


def dense_similarity(
    ctx: QueryContext, rows: np.ndarray, texts: Sequence[str] | None = None
) -> np.ndarray:
    """Cosine of the query vector with the store vectors of ``rows`` (or with ``texts``)."""
    q = np.asarray(ctx.vector(), dtype=np.float64).reshape(-1)
    qn = float(np.linalg.norm(q))
    if qn == 0.0:
        return np.zeros(len(rows) if texts is None else len(texts), dtype=np.float64)
    if texts is None:
        rows = np.asarray(rows, dtype=np.int64)
        if not len(rows):
            return np.zeros(0, dtype=np.float64)
        wanted = np.zeros(len(ctx.store.vectors.present), dtype=bool)
        wanted[rows] = True  # only the blocks holding a candidate are multiplied
        out = ctx.store.vectors.similarities(q, wanted=wanted)[rows]
        return np.where(np.isfinite(out), out, 0.0).astype(np.float64)
    if not texts:
        return np.zeros(0, dtype=np.float64)
    vecs = np.asarray(ctx.embed(list(texts)), dtype=np.float64)
    norms = np.linalg.norm(vecs, axis=1)
    norms[norms == 0.0] = 1.0
    return (vecs @ q) / (norms * qn)


def candidate_features(
    ctx: QueryContext,
    rows: np.ndarray | Sequence[int],
    *,
    ranks: np.ndarray | Sequence[int],
    scores: np.ndarray | Sequence[float],
    texts: Sequence[str] | None = None,
    k1: float = 1.5,
    b: float = 0.75,
) -> np.ndarray:
    """The ``(len(rows), len(FEATURE_NAMES))`` feature matrix.

    Args:
        ctx: The query.
        rows: Store row of each candidate (for a strip: its memory's row).
        ranks: Incoming rank of each candidate (1 = best).
        scores: Incoming score of each candidate, already max-normalised to ``[0, 1]``.
        texts: Texts to score instead of the memories' own (sentence strips); ``None`` = the
            memory texts.
        k1: BM25 term-frequency saturation.
        b: BM25 length normalisation.
    """
    rows = np.asarray(rows, dtype=np.int64)
    store = ctx.store
    own = [store.record_at(int(r)).text for r in rows]
    body = own if texts is None else list(texts)
    if len(body) != len(rows):
        raise ValueError(f"features.py: {len(body)} texts for {len(rows)} rows")
    x = np.zeros((len(rows), len(FEATURE_NAMES)), dtype=np.float64)
    if len(rows) == 0:
        return x
    x[:, 0] = dense_similarity(ctx, rows, None if texts is None else body)
    x[:, 1] = bm25_scores(ctx, body, k1=k1, b=b)
    x[:, 2] = entity_overlap(ctx, body)
    created = store.column("created_at")[rows]
    days = np.maximum((float(ctx.now) - created) / SECONDS_PER_DAY, 0.0)
    x[:, 3] = np.log1p(np.nan_to_num(days, nan=0.0))
    types = store.column("type")[rows]
    for j, t in enumerate(MEMORY_TYPES):
        x[:, 4 + j] = types == t
    base = 4 + len(MEMORY_TYPES)
    x[:, base] = 1.0 / np.maximum(np.asarray(ranks, dtype=np.float64), 1.0)
    x[:, base + 1] = np.asarray(scores, dtype=np.float64)
    return x
