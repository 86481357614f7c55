"""Inverse Square Rank fusion (Mourão, Martins & Magalhães, "Multimodal medical information
retrieval with unsupervised rank fusion", Comput. Medical Imaging Graph. 39, 2015).

``isr(d) = |{i : d ∈ L_i}| · Σ_{i : d ∈ L_i} 1 / rank_i(d)²`` (ranx ``isr``: CombMNZ of the
inverse squared ranks). Scores are ignored; only the incoming ranks count.
"""

from __future__ import annotations

from typing import Any, ClassVar

import numpy as np

from memlab.stages.base import FusedLists, FusionStage, register_stage, score_column
from memlab.stages.constraints import Integral, Interval


@register_stage("isr")
class ISR(FusionStage):
    """Inverse squared ranks, summed and multiplied by the number of lists.

    Args:
        top_k: Keep this many fused candidates (``None`` = all).
    """

    cacheable = True
    score_name = "isr_score"
    columns = (score_column("isr_score", "inverse square rank fusion score"),)

    _parameter_constraints: ClassVar[dict[str, list[Any]]] = {
        "top_k": [Interval(Integral, 1, None, closed="left"), None],
    }

    def __init__(self, top_k: int | None = None) -> None:
        self.top_k = top_k

    def combine(self, lists: FusedLists) -> np.ndarray:
        inv = np.where(lists.present, 1.0 / np.where(lists.present, lists.ranks, 1.0) ** 2, 0.0)
        return inv.sum(axis=0) * lists.counts
