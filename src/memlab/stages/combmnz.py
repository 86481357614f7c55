"""CombMNZ fusion (Fox & Shaw, "Combination of Multiple Searches", TREC-2 1993).

``combmnz(d) = |{i : d ∈ L_i}| · Σ_{i : d ∈ L_i} norm_i(s_i(d))``: the sum of a candidate's
normalised scores times the number of lists that found it (ranx ``comb_mnz``). Each list is
normalised over its own candidates (ranx's default ``min-max``).
"""

from __future__ import annotations

import numpy as np

from memlab.stages.base import FusedLists, register_stage, score_column
from memlab.stages.normalization import NormalizedFusion


@register_stage("combmnz")
class CombMNZ(NormalizedFusion):
    """Sum of normalised scores times the number of lists that found the candidate.

    Parameters: ``normalization`` and ``top_k`` (:class:`NormalizedFusion`).
    """

    score_name = "combmnz_score"
    columns = (score_column("combmnz_score", "CombMNZ fusion score"),)

    def combine(self, lists: FusedLists) -> np.ndarray:
        return lists.normalized(self.normalization).sum(axis=0) * lists.counts
