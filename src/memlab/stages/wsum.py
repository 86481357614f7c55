"""Weighted sum of normalised scores (ranx ``wsum``; Montague & Aslam, CIKM 2001 for the
normalisation).

``wsum(d) = Σ_i w_i · norm_i(s_i(d))`` where each list is normalised over its own candidates
(ranx default ``min-max``) and a list that lacks ``d`` contributes 0. Compare
:mod:`memlab.stages.combsum`, which normalises over the union of the lists.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, ClassVar

import numpy as np

from memlab.stages.base import FusedLists, FusionStage, register_stage, score_column
from memlab.stages.constraints import Integral, Interval, Options, Real, SequenceOf
from memlab.stages.normalization import NORMALIZATIONS


@register_stage("wsum")
class WeightedSum(FusionStage):
    """Weighted sum of per-list normalised scores.

    Args:
        weights: One weight per fused list (``None`` = all 1.0).
        normalization: A name of :mod:`memlab.stages.normalization` (ranx default min-max).
        top_k: Keep this many fused candidates (``None`` = all).
    """

    cacheable = True
    score_name = "wsum_score"
    columns = (score_column("wsum_score", "weighted sum of normalised scores"),)

    _parameter_constraints: ClassVar[dict[str, list[Any]]] = {
        "weights": [SequenceOf(Interval(Real, 0, None, closed="left"), min_length=1), None],
        "normalization": [Options(str, NORMALIZATIONS)],
        "top_k": [Interval(Integral, 1, None, closed="left"), None],
    }

    def __init__(
        self,
        weights: Sequence[float] | None = None,
        normalization: str = "min-max",
        top_k: int | None = None,
    ) -> None:
        self.weights = weights
        self.normalization = normalization
        self.top_k = top_k

    def combine(self, lists: FusedLists) -> np.ndarray:
        w = lists.weights(self.weights, "wsum")
        return (w[:, None] * lists.normalized(self.normalization)).sum(axis=0)
