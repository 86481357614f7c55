"""Design §D3.7's ``decay_score`` with a cold tier, as a re-ranking stage.

::

    decay_score     = exp(−λ × days_since_created) × (1 + ln(1 + access_count)) × confidence
    effective_score = relevance × decay_score × (cold_weight if cold else 1)

λ = 0.01 (docs/design.md §D3.7, "slow decay"). A memory is *cold* when its ``decay_score`` is below
``archive_threshold`` (design §D3.7: 0.1) or a consolidation cycle archived it (``archived_at``):
it stays queryable at lower priority. Unlike design §D0.5's model every type decays, counted from
creation, not from the last access.
"""

from __future__ import annotations

from typing import Any, ClassVar

import numpy as np
import polars as pl

from memlab.memory.decay import decay_score
from memlab.stages.base import QueryContext, Stage, register_stage, rerank, score_columns
from memlab.stages.constraints import Interval, Options, Real


def _rows(frame: pl.DataFrame, ctx: QueryContext) -> np.ndarray:
    store = ctx.store
    return np.fromiter((store.idx(m) for m in frame["mem_id"]), dtype=np.int64, count=frame.height)


def _relevance(frame: pl.DataFrame, column: str, stage: str) -> np.ndarray:
    if column not in frame.columns:
        raise ValueError(
            f"{stage}: relevance column {column!r} is not in the candidates "
            f"(columns: {', '.join(frame.columns)})"
        )
    return frame[column].cast(pl.Float64).fill_null(np.nan).to_numpy().copy()


def _finish(frame: pl.DataFrame, factor: np.ndarray, effective: np.ndarray) -> pl.DataFrame:
    out = frame.with_columns(
        pl.Series("lifecycle_factor", factor.astype(np.float64)),
        pl.Series("effective_score", effective.astype(np.float64)),
    )
    return rerank(out, by="effective_score")


def _empty(frame: pl.DataFrame) -> pl.DataFrame:
    return frame.with_columns(
        pl.lit(None, dtype=pl.Float64).alias("lifecycle_factor"),
        pl.lit(None, dtype=pl.Float64).alias("effective_score"),
    )


@register_stage("decay_score")
class DecayScore(Stage):
    """Re-rank by ``relevance × decay_score`` with a cold tier (docs/design.md §D3.7).

    Args:
        lam: λ of ``exp(−λ × days since created)`` (docs/design.md §D3.7: 0.01).
        base_score: Starting score (docs/design.md §D3.7: 1.0).
        archive_threshold: Below this ``decay_score`` a memory is cold (docs/design.md §D3.7: 0.1).
        cold_weight: Cold memories' scores are multiplied by this (lower priority).
        relevance: Candidate column used as the relevance factor.

    Output columns: ``lifecycle_factor`` (decay score × cold weight) and ``effective_score``.
    """

    _parameter_constraints: ClassVar[dict[str, list[Any]]] = {
        "lam": [Interval(Real, 0, None, closed="left")],
        "base_score": [Interval(Real, 0, None, closed="left")],
        "archive_threshold": [Interval(Real, 0, None, closed="left")],
        "cold_weight": [Interval(Real, 0, 1, closed="both")],
        "relevance": [Options(str, score_columns)],
    }
    embeds_other_texts = False  # embeds no text but the query

    def __init__(
        self,
        lam: float = 0.01,
        base_score: float = 1.0,
        archive_threshold: float = 0.1,
        cold_weight: float = 0.1,
        relevance: str = "score",
    ) -> None:
        self.lam = lam
        self.base_score = base_score
        self.archive_threshold = archive_threshold
        self.cold_weight = cold_weight
        self.relevance = relevance

    def transform(self, frame: pl.DataFrame, ctx: QueryContext) -> pl.DataFrame:
        if frame.height == 0:
            return _empty(frame)
        rel = _relevance(frame, self.relevance, "decay_score")
        rows = _rows(frame, ctx)
        store = ctx.store
        score = decay_score(
            store.column("created_at")[rows],
            store.column("access_count")[rows],
            store.column("confidence")[rows],
            ctx.now,
            lam=self.lam,
            base_score=self.base_score,
        )
        cold = (score < self.archive_threshold) | store.column("archived")[rows]
        factor = score * np.where(cold, self.cold_weight, 1.0)
        return _finish(frame, factor, rel * factor)
