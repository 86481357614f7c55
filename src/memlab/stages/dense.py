"""Dense retrieval: cosine similarity between the query vector and every visible memory.

Seed 000's vector path ("cosine similarity … by similarity score"), the first of the three ranked
lists that hybrid retrieval fuses; seed 004's "vector candidates from cosine similarity search".
Bi-encoder retrieval in the sense of Karpukhin et al., "Dense Passage Retrieval for Open-Domain
Question Answering", EMNLP 2020. The seed's minimum similarity of 0.3 is applied by the
``lifecycle`` stage (so that a fused keyword or graph hit is not dropped); ``min_similarity`` here
is an optional hard cut on the dense list itself.

Backends are registered by name: ``"exact"`` scores every row with the store's exact numpy index
(the reference; deterministic), ``"chroma"`` asks the store's chromadb collection (HNSW,
approximate) under the ``where`` filter equivalent to the query's visibility.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, ClassVar

import numpy as np
import polars as pl

from memlab.registry import Registry
from memlab.stages.base import (
    QueryContext,
    Stage,
    candidates_from_rows,
    empty_candidates,
    register_stage,
)
from memlab.stages.constraints import Integral, Interval, Options, Predicate, Real, SequenceOf

DenseBackend = Callable[[QueryContext, np.ndarray, int | None], tuple[np.ndarray, np.ndarray]]
"""``(ctx, query vector, top_k) -> (store rows, cosine similarities)`` (at least the top_k)."""

DENSE_BACKENDS: Registry[DenseBackend] = Registry("backend")
"""Dense search backends by name."""

register_dense_backend = DENSE_BACKENDS.register
"""Function decorator: register a dense search backend under ``name``."""


def top_rows(scores: np.ndarray, mask: np.ndarray, k: int | None) -> np.ndarray:
    """Rows where ``mask`` holds whose score is among the ``k`` best, ties at the cut included.

    ``np.argpartition`` finds the ``k``-th best score in linear time; every row scoring at least
    that much is returned (possibly more than ``k`` on ties) so that the caller's exact sort
    (ties by ``mem_id``) decides, deterministically, which tied rows survive.

    Args:
        scores: One score per store row.
        mask: Which rows may be returned.
        k: How many best rows (``None`` = all masked rows).

    Returns:
        Store row indices in ascending order.
    """
    rows = np.flatnonzero(mask)
    if k is None or len(rows) <= k:
        return rows
    if k <= 0:
        return rows[:0]
    s = scores[rows]
    kth = s[np.argpartition(-s, k - 1)[k - 1]]
    return rows[s >= kth]


@register_dense_backend("exact")
def exact_search(
    ctx: QueryContext, vector: np.ndarray, top_k: int | None
) -> tuple[np.ndarray, np.ndarray]:
    """Exact cosine against every row of ``store.vectors``, masked by the query's visibility."""
    sims = ctx.store.vectors.similarities(vector)
    mask = ctx.visible_mask() & np.isfinite(sims)
    rows = top_rows(sims, mask, top_k)
    return rows, sims[rows]


@register_dense_backend("chroma")
def chroma_search(
    ctx: QueryContext, vector: np.ndarray, top_k: int | None
) -> tuple[np.ndarray, np.ndarray]:
    """Approximate cosine search in the store's chromadb collection under the same filters."""
    store = ctx.store
    index = store.chroma_index()
    where = store.chroma_where(
        client_id=ctx.client_id,
        at_time=ctx.at_time,
        include_superseded=ctx.include_superseded,
        now=ctx.now,
    )
    k = index.count() if top_k is None else top_k
    hits = index.query(vector, k, where=where)
    rows = np.fromiter((store.idx(mid) for mid, _ in hits), dtype=np.int64, count=len(hits))
    sims = np.fromiter((s for _, s in hits), dtype=np.float64, count=len(hits))
    return rows, sims


@register_stage("dense")
class Dense(Stage):
    """Retrieve the memories most similar to the query vector.

    The query vector is ``ctx.vector()``: the HyDE vector when a ``hyde`` stage ran, else the
    embedded query text. Incoming candidates are ignored (this is a retriever).

    Args:
        top_k: How many memories to return (``None`` = every visible one).
        backend: ``"exact"`` (numpy, the reference) or ``"chroma"`` (chromadb HNSW).
        min_similarity: Drop memories below this cosine (``None`` = keep all; seed 000's 0.3
            is applied downstream by ``lifecycle``).
        mask_entity_types: Embed the query without the names of known entities of these types
            (e.g. ``("agent",)``). A name such as the speaker's dominates the embedding of a
            short question, pulling up every short turn of that speaker; masked, the vector
            carries the topic alone and the name is left to a graph stage. ``()`` embeds the
            query as written.

    Output column: ``dense_score`` (the cosine similarity, also ``score``).
    """

    cacheable = True

    _parameter_constraints: ClassVar[dict[str, list[Any]]] = {
        "top_k": [Interval(Integral, 1, None, closed="left"), None],
        "backend": [Options(str, DENSE_BACKENDS)],
        "min_similarity": [Interval(Real, -1, 1, closed="both"), None],
        "mask_entity_types": [SequenceOf(Predicate(str, str.strip, "a non-empty str"))],
    }

    def __init__(
        self,
        top_k: int | None = 100,
        backend: str = "exact",
        min_similarity: float | None = None,
        mask_entity_types: tuple[str, ...] = (),
    ) -> None:
        self.top_k = top_k
        self.backend = backend
        self.min_similarity = min_similarity
        self.mask_entity_types = mask_entity_types

    def transform(self, frame: pl.DataFrame, ctx: QueryContext) -> pl.DataFrame:
        try:
            search = DENSE_BACKENDS.lookup(self.backend)
        except ValueError as error:
            raise ValueError(f"dense: {error}") from None
        if len(ctx.store) == 0 or ctx.store.vectors.dim is None:
            return empty_candidates({"dense_score": pl.Float64()})
        vector = ctx.vector(mask_entity_types=self.mask_entity_types)
        rows, sims = search(ctx, vector, self.top_k)
        if self.min_similarity is not None:
            keep = sims >= self.min_similarity
            rows, sims = rows[keep], sims[keep]
        return candidates_from_rows(ctx, rows, sims, "dense_score", top_k=self.top_k)
