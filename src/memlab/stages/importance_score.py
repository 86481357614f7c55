"""Design §D1.4's live importance score, as a re-ranking stage.

Each memory's importance label sets its starting score ("original importance, set at
extraction"); use raises it and time without use lowers it ("live score, changes with usage and
decay")::

    importance_score = min(1, start[label] + use_gain × access_count)
                       × decay_per_day ** days_since_last_access
    effective_score  = relevance × (1 − weight + weight × importance_score)

Design §D1.4 names the four labels and the two scores but no constants; the defaults here (1.0,
0.75, 0.5, 0.25; +0.05 per access; 0.99 per day) are this module's.
"""

from __future__ import annotations

from typing import Any, ClassVar

import numpy as np
import polars as pl

from memlab.memory.decay import importance_score
from memlab.memory.lifecycle import days_since
from memlab.stages.base import QueryContext, Stage, register_stage, score_columns
from memlab.stages.constraints import Interval, Options, Real
from memlab.stages.decay_score import _empty, _finish, _relevance, _rows


@register_stage("importance_score")
class ImportanceScore(Stage):
    """Re-rank by ``relevance × (1 − weight + weight × importance_score)`` (docs/design.md §D1.4).

    Args:
        critical: Starting score of ``critical`` memories.
        high: Starting score of ``high`` memories.
        medium: Starting score of ``medium`` memories.
        low: Starting score of ``low`` memories.
        use_gain: Added per access (capped at 1).
        decay_per_day: Kept per day without access.
        weight: How much the importance score weighs against relevance (0 = ignore it).
        relevance: Candidate column used as the relevance factor.
    """

    _parameter_constraints: ClassVar[dict[str, list[Any]]] = {
        **{
            name: [Interval(Real, 0, 1, closed="both")]
            for name in ("critical", "high", "medium", "low", "decay_per_day", "weight")
        },
        "use_gain": [Interval(Real, 0, None, closed="left")],
        "relevance": [Options(str, score_columns)],
    }
    embeds_other_texts = False  # embeds no text but the query

    def __init__(
        self,
        critical: float = 1.0,
        high: float = 0.75,
        medium: float = 0.5,
        low: float = 0.25,
        use_gain: float = 0.05,
        decay_per_day: float = 0.99,
        weight: float = 0.5,
        relevance: str = "score",
    ) -> None:
        self.critical = critical
        self.high = high
        self.medium = medium
        self.low = low
        self.use_gain = use_gain
        self.decay_per_day = decay_per_day
        self.weight = weight
        self.relevance = relevance

    def transform(self, frame: pl.DataFrame, ctx: QueryContext) -> pl.DataFrame:
        if frame.height == 0:
            return _empty(frame)
        rel = _relevance(frame, self.relevance, "importance_score")
        rows = _rows(frame, ctx)
        store = ctx.store
        labels = np.array([store.record_at(int(r)).importance for r in rows])
        score = importance_score(
            labels,
            store.column("access_count")[rows],
            days_since(
                ctx.now, store.column("last_accessed_at")[rows], store.column("created_at")[rows]
            ),
            critical=self.critical,
            high=self.high,
            medium=self.medium,
            low=self.low,
            use_gain=self.use_gain,
            decay_per_day=self.decay_per_day,
        )
        factor = 1.0 - self.weight + self.weight * score
        return _finish(frame, factor, rel * factor)
