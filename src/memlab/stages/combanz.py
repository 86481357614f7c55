"""CombANZ fusion (Fox & Shaw, "Combination of Multiple Searches", TREC-2 1993).

``combanz(d) = Σ_{i : d ∈ L_i} norm_i(s_i(d)) / |{i : d ∈ L_i}|``: the mean normalised score over
the lists that found the candidate (ranx ``comb_anz``; each list normalised over its own
candidates, ranx default ``min-max``).
"""

from __future__ import annotations

from typing import Any, ClassVar

import numpy as np

from memlab.stages.base import FusedLists, FusionStage, register_stage, score_column
from memlab.stages.constraints import Integral, Interval, Options
from memlab.stages.normalization import NORMALIZATIONS


@register_stage("combanz")
class CombANZ(FusionStage):
    """Mean normalised score over the lists that found the candidate.

    Args:
        normalization: A name of :mod:`memlab.stages.normalization` (ranx default min-max).
        top_k: Keep this many fused candidates (``None`` = all).
    """

    cacheable = True
    score_name = "combanz_score"
    columns = (score_column("combanz_score", "CombANZ fusion score"),)

    _parameter_constraints: ClassVar[dict[str, list[Any]]] = {
        "normalization": [Options(str, NORMALIZATIONS)],
        "top_k": [Interval(Integral, 1, None, closed="left"), None],
    }

    def __init__(self, normalization: str = "min-max", top_k: int | None = None) -> None:
        self.normalization = normalization
        self.top_k = top_k

    def combine(self, lists: FusedLists) -> np.ndarray:
        return lists.normalized(self.normalization).sum(axis=0) / lists.counts
