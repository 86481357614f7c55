"""Design §D4.3's recency blend, as a re-ranking stage.

Design §D4.3 blends "vector similarity, keyword score, and recency score; ``rule`` and ``decision``
do not decay, while ``fact``, ``summary`` and ``preference`` receive recency weighting". memlab's
decisions are its rules (immutable constraints), so ``decision`` never decays here; events,
facts and statuses do::

    recency         = 0.5 ** (days_since_created / half_life_days)   (1 for non-decaying types)
    effective_score = (1 − recency_weight) × relevance / max(relevance) + recency_weight × recency

Relevance is divided by the query's best relevance so that the blend does not depend on the
scale of the fused score. Design §D4.3 gives no constants; the defaults are this module's.
"""

from __future__ import annotations

from typing import Any, ClassVar

import numpy as np
import polars as pl

from memlab.memory.decay import recency
from memlab.memory.records import MEMORY_KINDS, NON_DECAYING_KINDS
from memlab.stages.base import QueryContext, Stage, register_stage, score_columns
from memlab.stages.constraints import Interval, Options, Real, SequenceOf
from memlab.stages.decay_score import _empty, _finish, _relevance, _rows


@register_stage("recency_blend")
class RecencyBlend(Stage):
    """Blend normalised relevance with recency (docs/design.md §D4.3).

    Args:
        recency_weight: Weight of recency in the blend.
        half_life_days: Days for recency to halve.
        non_decaying_types: Kinds whose recency is always 1 (design §D4.3: rule and decision;
            a kind is a type, or the §D4.1 type a fact was stored with).
        relevance: Candidate column used as relevance.

    Output columns: ``lifecycle_factor`` (the recency) and ``effective_score`` (the blend).
    """

    _parameter_constraints: ClassVar[dict[str, list[Any]]] = {
        "recency_weight": [Interval(Real, 0, 1, closed="both")],
        "half_life_days": [Interval(Real, 0, None, closed="neither")],
        "non_decaying_types": [SequenceOf(Options(str, MEMORY_KINDS))],
        "relevance": [Options(str, score_columns)],
    }
    embeds_other_texts = False  # embeds no text but the query

    def __init__(
        self,
        recency_weight: float = 0.2,
        half_life_days: float = 30.0,
        non_decaying_types: tuple[str, ...] = NON_DECAYING_KINDS,
        relevance: str = "score",
    ) -> None:
        self.recency_weight = recency_weight
        self.half_life_days = half_life_days
        self.non_decaying_types = non_decaying_types
        self.relevance = relevance

    def transform(self, frame: pl.DataFrame, ctx: QueryContext) -> pl.DataFrame:
        if frame.height == 0:
            return _empty(frame)
        rel = _relevance(frame, self.relevance, "recency_blend")
        top = np.nanmax(rel) if np.isfinite(rel).any() else 0.0
        norm = np.where(np.isnan(rel), 0.0, rel / top if top > 0 else 0.0)
        rows = _rows(frame, ctx)
        store = ctx.store
        r = recency(
            store.column("kind")[rows],
            store.column("created_at")[rows],
            ctx.now,
            half_life_days=self.half_life_days,
            non_decaying_types=tuple(self.non_decaying_types),
        )
        w = self.recency_weight
        return _finish(frame, r, (1.0 - w) * norm + w * r)
