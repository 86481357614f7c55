"""Late-interaction re-ranking: ColBERT's MaxSim over contextual token vectors.

Khattab & Zaharia, "ColBERT: Efficient and Effective Passage Search via Contextualized Late
Interaction over BERT", SIGIR 2020, score a document by matching every query token with its most
similar document token::

    S(q, d) = Σ_{i ∈ tokens(q)} max_{j ∈ tokens(d)} E_q[i] · E_d[j]

with unit-length token vectors ``E``. Here the vectors are those of the experiment's token
embedder (:mod:`memlab.embed.tokens`; all-MiniLM-L6-v2's last-layer word pieces, before its mean
pooling): a bi-encoder not trained for late interaction, so MaxSim acts as a soft, contextual
term match that a pooled vector blurs. The sum is divided by the number of query tokens (one
query's ranking is unchanged; the scale no longer grows with the query's length).

Only the head of the incoming list is re-scored (ColBERT's re-ranking mode), and MaxSim is fused
with the incoming score, z-scored over the head (Montague & Aslam's CombSUM normalisation, as
``combsum`` does)::

    score'(d) = z(score)(d) + weight · z(maxsim)(d)          for the top_n candidates

Candidates below ``top_n`` keep their incoming order, below the head. ``weight = 0`` leaves the
order unchanged. memlab's defaults: ``top_n = 50`` (the head a 10-deep answer is re-ranked from)
and ``weight = 0.5`` (the two halves of LoCoMo's conversations chose 0.5 and 1.0 in
``eval/locomo_cv.py``; neither changed held-out R_all@10 significantly).

The token vectors are fitted state, computed once per store row (through the on-disk token cache,
so once per text across runs) and extended when the store gains rows.
"""

from __future__ import annotations

import weakref
from typing import TYPE_CHECKING, Any, ClassVar

import numpy as np
import polars as pl

from memlab.embed.tokens import token_embeddings
from memlab.memory.vectors import append_rows
from memlab.stages.base import (
    HeadReranker,
    QueryContext,
    concat_ranges,
    register_stage,
    score_column,
)
from memlab.stages.constraints import Integral, Interval, Predicate, Real, SequenceOf

if TYPE_CHECKING:
    from memlab.memory.store import MemoryStore


def zscore(x: np.ndarray) -> np.ndarray:
    """``(x - mean) / sd`` (population sd); all 0 when ``x`` is constant or empty."""
    if len(x) == 0:
        return x.astype(np.float64)
    sd = float(x.std())
    return np.zeros(len(x)) if sd == 0 else (x - x.mean()) / sd


def zscore_fusion(incoming: np.ndarray, other: np.ndarray, weight: float) -> np.ndarray:
    """``z(incoming) + weight · z(other)`` over a head (:func:`zscore`; a constant vector's
    z-scores are 0): how the re-ranking stages fuse their score with the incoming one
    (Montague & Aslam's CombSUM normalisation, as ``combsum`` does)."""
    return zscore(np.asarray(incoming)) + weight * zscore(np.asarray(other))


def segment_maxsim(query: np.ndarray, docs: np.ndarray, starts: np.ndarray) -> np.ndarray:
    """Mean over query tokens of the best dot product within each document's token segment.

    Args:
        query: ``(m, dim)`` query token vectors.
        docs: ``(T, dim)`` the documents' token vectors, document after document.
        starts: ``(n,)`` index in ``docs`` of each document's first token (increasing; every
            segment non-empty).

    Returns:
        ``(n,)`` float64: ``mean_i max_{j ∈ segment} query[i] · docs[j]``.
    """
    if len(starts) == 0:
        return np.zeros(0, dtype=np.float64)
    sims = docs @ query.T  # (T, m): reduceat runs over contiguous rows
    best = np.maximum.reduceat(sims, starts, axis=0)  # (n, m)
    return best.mean(axis=1).astype(np.float64)


@register_stage("maxsim")
class MaxSim(HeadReranker):
    """Re-rank the head of the list by late interaction (ColBERT MaxSim) fused with its score.

    Args:
        top_n: How many leading candidates are re-scored.
        weight: Weight of the z-scored MaxSim against the z-scored incoming score.
        mask_entity_types: Score the query without the names of known entities of these types
            (as :class:`~memlab.stages.dense.Dense` does).

    Output column: ``maxsim_score`` (mean best token similarity; null below the head).

    Attributes:
        tokens_: Token vectors of every store row seen, row after row (float16).
        buffer_: The memory ``tokens_`` is a view of (it doubles when full).
        starts_: Index in ``tokens_`` of each store row's first token.
        lengths_: Number of tokens of each store row.
        n_rows_: Store rows whose tokens are embedded.
        content_version_: ``store.content_version`` they were embedded at.
    """

    _parameter_constraints: ClassVar[dict[str, list[Any]]] = {
        "top_n": [Interval(Integral, 1, None, closed="left")],
        "weight": [Interval(Real, 0, None, closed="left")],
        "mask_entity_types": [SequenceOf(Predicate(str, str.strip, "a non-empty str"))],
    }

    columns = (score_column("maxsim_score", "late-interaction MaxSim (mean over query tokens)"),)

    def __init__(
        self,
        top_n: int = 50,
        weight: float = 0.5,
        mask_entity_types: tuple[str, ...] = (),
    ) -> None:
        self.top_n = top_n
        self.weight = weight
        self.mask_entity_types = mask_entity_types

    def fit(self, store: MemoryStore, **kwargs: object) -> MaxSim:
        """Embed the tokens of every memory of ``store`` now (needs ``embedder=``)."""
        embedder = kwargs.get("embedder")
        if embedder is None:
            raise ValueError("maxsim: fit needs an embedder (fit(store, embedder=...))")
        ctx = QueryContext(qid="", text="", store=store, now=float("inf"), embedder=embedder)
        self._tokens(ctx)
        return self

    def _tokens(self, ctx: QueryContext) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Token vectors of every store row, each row's first index and its token count."""
        store = ctx.store
        ref = getattr(self, "store_", None)
        if (
            ref is None
            or ref() is not store
            or self.n_rows_ > len(store)
            or self.content_version_ != store.content_version  # a purge erased a text
        ):
            self.store_ = weakref.ref(store)
            self.content_version_ = store.content_version
            self.n_rows_ = 0
            self.tokens_ = np.zeros((0, 0), dtype=np.float16)
            self.starts_ = np.zeros(0, dtype=np.int64)
            self.lengths_ = np.zeros(0, dtype=np.int64)
        n = len(store)
        if self.n_rows_ < n:
            texts = [store.record_at(i).text for i in range(self.n_rows_, n)]
            mats = token_embeddings(ctx.embedder, texts)
            lengths = np.asarray([len(m) for m in mats], dtype=np.int64)
            if (lengths < 1).any():
                raise ValueError("maxsim: the token embedder returned a text with no token")
            block = np.concatenate(mats).astype(np.float16)
            offset = len(self.tokens_)
            starts = offset + np.concatenate([[0], np.cumsum(lengths)[:-1]]).astype(np.int64)
            buf = getattr(self, "buffer_", None) if offset else None
            self.buffer_ = append_rows(buf, offset, block)
            self.tokens_ = self.buffer_[: offset + len(block)]
            self.starts_ = np.concatenate([self.starts_, starts])
            self.lengths_ = np.concatenate([self.lengths_, lengths])
            self.n_rows_ = n
        return self.tokens_, self.starts_, self.lengths_

    def _query_tokens(self, ctx: QueryContext) -> np.ndarray:
        text = ctx.text
        if self.mask_entity_types:
            text = ctx.store.mask_known_names(text, known_types=self.mask_entity_types)
        model = getattr(ctx.embedder, "model_id", type(ctx.embedder).__name__)
        key = ("maxsim-query", model, text)
        hit = ctx.cache.get(key)
        if hit is None:
            hit = token_embeddings(ctx.embedder, [text], persist=False)[0].astype(np.float32)
            ctx.cache[key] = hit
        return hit

    def scores(self, rows: np.ndarray, ctx: QueryContext) -> np.ndarray:
        """MaxSim of the query against each store row in ``rows``."""
        tokens, starts, lengths = self._tokens(ctx)
        idx, bounds = concat_ranges(starts[rows], lengths[rows])
        docs = tokens[idx].astype(np.float32)
        return segment_maxsim(self._query_tokens(ctx), docs, bounds[:-1])

    def rescore(
        self, frame: pl.DataFrame, rows: np.ndarray, head_scores: np.ndarray, ctx: QueryContext
    ) -> tuple[np.ndarray, dict[str, np.ndarray]]:
        sim = self.scores(rows, ctx)
        return zscore_fusion(head_scores, sim, self.weight), {"maxsim_score": sim}
