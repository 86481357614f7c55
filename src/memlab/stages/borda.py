"""BordaFuse (Aslam & Montague, "Models for Metasearch", SIGIR 2001), as in ranx ``bordafuse``.

With ``n`` the size of the union of the lists, list ``i`` gives its candidate at rank ``r`` the
``n - r + 1`` points and every candidate it lacks ``(n - |L_i| + 1) / 2`` points (the mean of the
points left over); a candidate's score is the sum of its points over the lists.
"""

from __future__ import annotations

from typing import Any, ClassVar

import numpy as np

from memlab.stages.base import FusedLists, FusionStage, register_stage, score_column
from memlab.stages.constraints import Integral, Interval


@register_stage("borda")
class BordaFuse(FusionStage):
    """Sum of Borda points over the lists.

    Args:
        top_k: Keep this many fused candidates (``None`` = all).
    """

    cacheable = True
    score_name = "borda_score"
    columns = (score_column("borda_score", "Borda count"),)

    _parameter_constraints: ClassVar[dict[str, list[Any]]] = {
        "top_k": [Interval(Integral, 1, None, closed="left"), None],
    }

    def __init__(self, top_k: int | None = None) -> None:
        self.top_k = top_k

    def combine(self, lists: FusedLists) -> np.ndarray:
        n = float(lists.size)
        unranked = (n - lists.list_sizes + 1.0) / 2.0
        points = np.where(lists.present, n - lists.ranks + 1.0, unranked[:, None])
        return points.sum(axis=0)
