"""Lifecycle scoring of design §D0.5: confidence decay, access boost and the similarity floor.

::

    effective_confidence = confidence × decay_factor ** days_since_last_access   (facts, statuses)
    access_boost         = 1 + boost_weight × log2(access_count + 1)
    effective_score      = relevance × effective_confidence × access_boost

``days_since_last_access`` counts from ``last_accessed_at``, or from ``created_at`` when the
memory was never accessed, to the query's clock ``ctx.now``. Events and decisions are historical
records and do not decay (``decaying_types``). Seed defaults: decay 0.98 per day, boost weight
0.3, minimum cosine similarity 0.3. In hybrid retrieval the seed applies decay and boost after
RRF fusion, so ``relevance`` names the column that carries the fused score (``"score"``: whatever
the previous stage ranked by).

The design's minimum similarity filters *vector* results: a candidate is dropped when its
``dense_score`` is present and below ``min_similarity`` and no other retrieval signal
(``bm25_score``, ``graph_score``, ``activation``) found it. Candidates the query may not see
(scope, ``active``, ``at_time``, not yet written at ``ctx.now``) are dropped as well.
"""

from __future__ import annotations

from typing import Any, ClassVar

import numpy as np
import polars as pl

from memlab.fastframe import f64_series, i64_series, take_rows
from memlab.memory.lifecycle import days_since, lifecycle_factor
from memlab.memory.records import DECAYING_KINDS, MEMORY_KINDS
from memlab.stages.base import (
    ROW_COLUMN,
    QueryContext,
    Stage,
    frame_rows,
    rank_order,
    register_stage,
    rerank,
    score_column,
    score_columns,
)
from memlab.stages.constraints import Interval, Options, Real, SequenceOf

_OTHER_SIGNALS: tuple[str, ...] = ("bm25_score", "graph_score", "activation")


@register_stage("lifecycle")
class Lifecycle(Stage):
    """Re-rank candidates by ``relevance × effective_confidence × access_boost``.

    Args:
        decay_factor: Confidence kept per day without access (docs/design.md §D0.5: 0.98).
        boost_weight: Weight of ``log2(access_count + 1)`` in the boost (docs/design.md §D0.6: 0.3).
        min_similarity: Vector-only candidates below this cosine are dropped (design §D0.6: 0.3;
            ``-1.0`` keeps every candidate).
        decaying_types: Memory kinds whose confidence decays (design §D0.5: facts and
            statuses; §D4.3: preferences and summaries, not rules). A memory's kind is its
            type, or the §D4.1 type a fact was stored with (:func:`~memlab.memory.records.kind_of`).
        relevance: Candidate column used as the relevance factor (``"score"``,
            ``"dense_score"``, ``"rrf_score"`` …); a candidate without a value ranks last.

    Output columns: ``lifecycle_factor`` (effective confidence × boost) and ``effective_score``
    (also ``score``).
    """

    _parameter_constraints: ClassVar[dict[str, list[Any]]] = {
        "decay_factor": [Interval(Real, 0, 1, closed="both")],
        "boost_weight": [Interval(Real, 0, None, closed="left")],
        "min_similarity": [Interval(Real, -1, 1, closed="both")],
        "decaying_types": [SequenceOf(Options(str, MEMORY_KINDS))],
        "relevance": [Options(str, score_columns)],
    }

    columns = (
        score_column("lifecycle_factor", "effective confidence × access boost"),
        score_column("effective_score", "relevance × lifecycle factor"),
    )
    embeds_other_texts = False  # embeds no text but the query

    def __init__(
        self,
        decay_factor: float = 0.98,
        boost_weight: float = 0.3,
        min_similarity: float = 0.3,
        decaying_types: tuple[str, ...] = DECAYING_KINDS,
        relevance: str = "score",
    ) -> None:
        self.decay_factor = decay_factor
        self.boost_weight = boost_weight
        self.min_similarity = min_similarity
        self.decaying_types = decaying_types
        self.relevance = relevance

    def transform(self, frame: pl.DataFrame, ctx: QueryContext) -> pl.DataFrame:
        added = {"lifecycle_factor": pl.Float64(), "effective_score": pl.Float64()}
        if frame.height == 0:
            return frame.with_columns(
                [pl.lit(None, dtype=dtype).alias(name) for name, dtype in added.items()]
            )
        if self.relevance not in frame.columns:
            raise ValueError(
                f"lifecycle: relevance column {self.relevance!r} is not in the candidates "
                f"(columns: {', '.join(frame.columns)})"
            )
        store = ctx.store
        rows = frame_rows(frame, ctx)
        keep = ctx.visible_mask()[rows]
        if "dense_score" in frame.columns:
            dense = frame["dense_score"].cast(pl.Float64).to_numpy()
            weak = ~np.isnan(dense) & (dense < self.min_similarity)
            for col in _OTHER_SIGNALS:
                if col in frame.columns:
                    weak &= np.isnan(frame[col].cast(pl.Float64).to_numpy())
            keep &= ~weak
        rows = rows[keep]
        factor = lifecycle_factor(
            store.column("kind")[rows],
            store.column("confidence")[rows],
            days_since(
                ctx.now,
                store.column("last_accessed_at")[rows],
                store.column("created_at")[rows],
            ),
            store.column("access_count")[rows],
            decay_factor=self.decay_factor,
            boost_weight=self.boost_weight,
            decaying_types=tuple(self.decaying_types),
        )
        factor = np.asarray(factor, dtype=np.float64)
        kept = np.flatnonzero(keep)
        relevance = frame.get_column(self.relevance).cast(pl.Float64).to_numpy()[kept]
        effective = relevance * factor
        if ROW_COLUMN not in frame.columns or frame[ROW_COLUMN].null_count():
            out = frame if len(kept) == frame.height else frame[kept]
            out = out.drop(list(added), strict=False).hstack(
                [
                    pl.Series("lifecycle_factor", factor, dtype=pl.Float64),
                    pl.Series("effective_score", effective, dtype=pl.Float64, nan_to_null=True),
                ]
            )
            return rerank(out, by="effective_score", store=store)
        # the package's rank order (effective score descending, NaN last, ties by id), one gather
        order = rank_order(store, rows, effective)
        effective, factor = effective[order], factor[order]
        out = take_rows(frame, kept[order])
        stale = [name for name in added if name in out.columns]
        if stale:
            out = out.drop(stale)
        score = f64_series("score", effective, nan_to_null=True)
        out = out.hstack([f64_series("lifecycle_factor", factor), score.alias("effective_score")])
        out.replace_column(out.get_column_index("score"), score)
        out.replace_column(
            out.get_column_index("rank"), i64_series("rank", np.arange(1, out.height + 1))
        )
        return out
