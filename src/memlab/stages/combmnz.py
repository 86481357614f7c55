"""CombMNZ fusion (Fox & Shaw, "Combination of Multiple Searches", TREC-2 1993).

``combmnz(d) = |{i : d ∈ L_i}| · Σ_{i : d ∈ L_i} norm_i(s_i(d))``: the sum of a candidate's
normalised scores times the number of lists that found it (ranx ``comb_mnz``). Each list is
normalised over its own candidates (ranx's default ``min-max``).
"""

from __future__ import annotations

from typing import Any, ClassVar

import numpy as np

from memlab.stages.base import FusedLists, FusionStage, register_stage, score_column
from memlab.stages.constraints import Integral, Interval, Options
from memlab.stages.normalization import NORMALIZATIONS


@register_stage("combmnz")
class CombMNZ(FusionStage):
    """Sum of normalised scores times the number of lists that found the candidate.

    Args:
        normalization: A name of :mod:`memlab.stages.normalization` (ranx default min-max).
        top_k: Keep this many fused candidates (``None`` = all).
    """

    cacheable = True
    score_name = "combmnz_score"
    columns = (score_column("combmnz_score", "CombMNZ fusion score"),)

    _parameter_constraints: ClassVar[dict[str, list[Any]]] = {
        "normalization": [Options(str, NORMALIZATIONS)],
        "top_k": [Interval(Integral, 1, None, closed="left"), None],
    }

    def __init__(self, normalization: str = "min-max", top_k: int | None = None) -> None:
        self.normalization = normalization
        self.top_k = top_k

    def combine(self, lists: FusedLists) -> np.ndarray:
        return lists.normalized(self.normalization).sum(axis=0) * lists.counts
