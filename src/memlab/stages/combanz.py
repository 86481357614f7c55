"""CombANZ fusion (Fox & Shaw, "Combination of Multiple Searches", TREC-2 1993).

``combanz(d) = Σ_{i : d ∈ L_i} norm_i(s_i(d)) / |{i : d ∈ L_i}|``: the mean normalised score over
the lists that found the candidate (ranx ``comb_anz``; each list normalised over its own
candidates, ranx default ``min-max``).
"""

from __future__ import annotations

import numpy as np

from memlab.stages.base import FusedLists, register_stage, score_column
from memlab.stages.normalization import NormalizedFusion


@register_stage("combanz")
class CombANZ(NormalizedFusion):
    """Mean normalised score over the lists that found the candidate.

    Parameters: ``normalization`` and ``top_k`` (:class:`NormalizedFusion`).
    """

    score_name = "combanz_score"
    columns = (score_column("combanz_score", "CombANZ fusion score"),)

    def combine(self, lists: FusedLists) -> np.ndarray:
        return lists.normalized(self.normalization).sum(axis=0) / lists.counts
