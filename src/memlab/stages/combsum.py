"""CombSUM fusion of normalised scores (Fox & Shaw, TREC-2 1994; normalisation after
Montague & Aslam, CIKM 2001).

Each ranked list's scores are put on one scale over the union ``U`` of the candidates of all
lists — a candidate missing from a list takes ``missing_value`` there (0: no keyword match, no
activation) — then summed with weights::

    combsum(d) = Σ_i w_i · norm_i(s_i(d)),  d ∈ U

``normalization``: ``"zscore"`` ((s - mean) / std over ``U``), ``"minmax"`` ((s - min) /
(max - min)) or ``"none"``. A constant list contributes 0 under both normalisations. Unlike RRF,
CombSUM keeps how far apart the scores are, which matters when one list separates the candidates
sharply and another barely does.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, ClassVar

import numpy as np
import polars as pl

from memlab.stages.base import (
    CANDIDATE_SCHEMA,
    FusionStage,
    QueryContext,
    empty_candidates,
    register_stage,
    rerank,
)
from memlab.stages.constraints import Integral, Interval, Options, Real, SequenceOf

_NORMALIZERS = ("zscore", "minmax", "none")


def normalize(values: np.ndarray, method: str) -> np.ndarray:
    """Normalise one list's scores (see the module docstring)."""
    if method == "none":
        return values
    if method == "zscore":
        std = float(values.std())
        return np.zeros_like(values) if std == 0.0 else (values - values.mean()) / std
    if method == "minmax":
        span = float(values.max() - values.min()) if len(values) else 0.0
        return np.zeros_like(values) if span == 0.0 else (values - values.min()) / span
    raise ValueError(f"combsum: normalization must be one of {', '.join(_NORMALIZERS)}")


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

    def fuse(self, frames: list[pl.DataFrame], ctx: QueryContext) -> pl.DataFrame:
        if self.normalization not in _NORMALIZERS:
            raise ValueError(
                f"combsum: normalization must be one of {', '.join(_NORMALIZERS)}, "
                f"got {self.normalization!r}"
            )
        if self.weights is not None and len(self.weights) != len(frames):
            raise ValueError(f"combsum: {len(self.weights)} weights for {len(frames)} lists")
        nonempty = [f for f in frames if f.height]
        if not nonempty:
            return empty_candidates({"combsum_score": pl.Float64()})
        union = (
            pl.concat([f.select("mem_id") for f in nonempty])
            .unique(maintain_order=True)["mem_id"]
            .to_list()
        )
        pos = {m: i for i, m in enumerate(union)}
        total = np.zeros(len(union), dtype=np.float64)
        for i, frame in enumerate(frames):
            raw = np.full(len(union), float(self.missing_value), dtype=np.float64)
            if frame.height:
                idx = np.fromiter((pos[m] for m in frame["mem_id"]), dtype=np.int64)
                raw[idx] = frame["score"].to_numpy()
            w = 1.0 if self.weights is None else float(self.weights[i])
            total += w * normalize(raw, self.normalization)
        extras = (
            pl.concat(
                [f.drop([c for c in CANDIDATE_SCHEMA if c != "mem_id"]) for f in nonempty],
                how="diagonal_relaxed",
            )
            .drop("combsum_score", strict=False)
            .group_by("mem_id", maintain_order=True)
            .agg(pl.all().drop_nulls().first())
        )
        fused = pl.DataFrame(
            {
                "qid": [ctx.qid] * len(union),
                "mem_id": union,
                "score": total,
                "rank": np.zeros(len(union), dtype=np.int64),
                "combsum_score": total,
            },
            schema={**CANDIDATE_SCHEMA, "combsum_score": pl.Float64()},
        ).join(extras, on="mem_id", how="left")
        fused = rerank(fused)
        return fused if self.top_k is None else fused.head(self.top_k)
