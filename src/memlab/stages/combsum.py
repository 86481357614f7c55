"""CombSUM fusion of normalised scores (Fox & Shaw, TREC-2 1994; normalisation after
Montague & Aslam, CIKM 2001).

Each ranked list's scores are put on one scale over the union ``U`` of the candidates of all
lists — a candidate missing from a list takes ``missing_value`` there (0: no keyword match, no
activation) — then summed with weights::

    combsum(d) = Σ_i w_i · norm_i(s_i(d)),  d ∈ U

``normalization``: ``"zscore"`` ((s - mean) / std over ``U``), ``"minmax"`` ((s - min) /
(max - min)) or ``"none"`` (:mod:`memlab.stages.normalization`). A constant
list contributes 0 under both normalisations. Unlike RRF, CombSUM keeps how far apart the scores
are, which matters when one list separates the candidates sharply and another barely does.
Normalising over the union (rather than over each list's own candidates, as ranx's ``wsum``
does, :mod:`memlab.stages.wsum`) lets ``missing_value`` say what absence means.
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
from memlab.stages.constraints import Integral, Interval, Options, Real, SequenceOf
from memlab.stages.normalization import get_normalization

_NORMALIZERS = ("zscore", "minmax", "none")


@register_stage("combsum")
class CombSUM(FusionStage):
    """Weighted sum of normalised scores.

    Args:
        normalization: ``"zscore"``, ``"minmax"`` or ``"none"``.
        weights: One weight per fused list (``None`` = all 1.0).
        missing_value: Raw score of a candidate absent from a list.
        top_k: Keep this many fused candidates (``None`` = all).
    """

    cacheable = True
    score_name = "combsum_score"
    columns = (score_column("combsum_score", "weighted sum of normalised scores"),)

    _parameter_constraints: ClassVar[dict[str, list[Any]]] = {
        "normalization": [Options(str, _NORMALIZERS)],
        "weights": [SequenceOf(Interval(Real, 0, None, closed="left"), min_length=1), None],
        "missing_value": [Interval(Real, None, None, closed="neither")],
        "top_k": [Interval(Integral, 1, None, closed="left"), None],
    }

    def __init__(
        self,
        normalization: str = "zscore",
        weights: Sequence[float] | None = None,
        missing_value: float = 0.0,
        top_k: int | None = None,
    ) -> None:
        self.normalization = normalization
        self.weights = weights
        self.missing_value = missing_value
        self.top_k = top_k

    def combine(self, lists: FusedLists) -> np.ndarray:
        if self.normalization not in _NORMALIZERS:
            raise ValueError(
                f"combsum: normalization must be one of {', '.join(_NORMALIZERS)}, "
                f"got {self.normalization!r}"
            )
        norm = get_normalization(self.normalization, where="combsum")
        w = lists.weights(self.weights, "combsum")
        # A NaN or null score is no score: the candidate counts as missing from that list.
        scored = lists.present & np.isfinite(lists.scores)
        raw = np.where(scored, lists.scores, float(self.missing_value))
        total = np.zeros(lists.size, dtype=np.float64)
        for i in range(lists.n_lists):
            total += w[i] * norm(raw[i])
        return total
