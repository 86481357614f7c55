"""Reciprocal Rank Fusion (Cormack, Clarke & Büttcher, SIGIR 2009).

``rrf_score(d) = Σ_i w_i / (k + rank_i(d))`` over the ranked lists in which ``d`` appears; a list
that does not contain ``d`` contributes nothing (no penalty). Paper and design §D0.7 default:
``k = 60``.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, ClassVar

import numpy as np

from memlab.stages.base import (
    FusedLists,
    FusionStage,
    register_stage,
    score_column,
)
from memlab.stages.constraints import Integral, Interval, Real, SequenceOf


@register_stage("rrf")
class RRF(FusionStage):
    """Fuse ranked lists by reciprocal rank.

    Args:
        k: Rank offset; larger values flatten the weight across ranks (paper default 60).
        weights: One weight per fused list (``None`` = all 1.0).
        top_k: Keep this many fused candidates (``None`` = all).
    """

    cacheable = True
    score_name = "rrf_score"
    columns = (score_column("rrf_score", "reciprocal rank fusion score"),)

    _parameter_constraints: ClassVar[dict[str, list[Any]]] = {
        "k": [Interval(Real, 0, None, closed="left")],
        "weights": [SequenceOf(Interval(Real, 0, None, closed="left"), min_length=1), None],
        "top_k": [Interval(Integral, 1, None, closed="left"), None],
    }

    def __init__(
        self,
        k: float = 60.0,
        weights: Sequence[float] | None = None,
        top_k: int | None = None,
    ) -> None:
        self.k = k
        self.weights = weights
        self.top_k = top_k

    def combine(self, lists: FusedLists) -> np.ndarray:
        w = lists.weights(self.weights, "rrf")
        total = np.zeros(lists.size)
        for i in range(lists.n_lists):
            have = lists.present[i]
            total[have] += w[i] / (self.k + lists.ranks[i, have])
        return total
