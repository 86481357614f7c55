"""CombMAX fusion (Fox & Shaw, "Combination of Multiple Searches", TREC-2 1993).

``combmax(d) = max_{i : d ∈ L_i} norm_i(s_i(d))``: the best normalised score a candidate has in
any list (ranx ``comb_max``; each list normalised over its own candidates, ranx default
``min-max``).
"""

from __future__ import annotations

import numpy as np

from memlab.stages.base import FusedLists, register_stage, score_column
from memlab.stages.normalization import NormalizedFusion


@register_stage("combmax")
class CombMAX(NormalizedFusion):
    """Best normalised score over the lists that found the candidate.

    Parameters: ``normalization`` and ``top_k`` (:class:`NormalizedFusion`).
    """

    score_name = "combmax_score"
    columns = (score_column("combmax_score", "CombMAX fusion score"),)

    def combine(self, lists: FusedLists) -> np.ndarray:
        norm = lists.normalized(self.normalization)
        return np.where(lists.present, norm, -np.inf).max(axis=0)
