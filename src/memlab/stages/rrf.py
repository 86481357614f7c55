"""Reciprocal Rank Fusion (Cormack, Clarke & Büttcher, SIGIR 2009).

``rrf_score(d) = Σ_i w_i / (k + rank_i(d))`` over the ranked lists in which ``d`` appears; a list
that does not contain ``d`` contributes nothing (no penalty). Paper and seed 000 default:
``k = 60``.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, ClassVar

import polars as pl

from memlab.stages.base import (
    CANDIDATE_SCHEMA,
    FusionStage,
    QueryContext,
    empty_candidates,
    register_stage,
    rerank,
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

    def fuse(self, frames: list[pl.DataFrame], ctx: QueryContext) -> pl.DataFrame:
        if self.weights is not None and len(self.weights) != len(frames):
            raise ValueError(
                f"rrf: {len(self.weights)} weights for {len(frames)} ranked lists"
            )
        parts = []
        for i, frame in enumerate(frames):
            w = 1.0 if self.weights is None else float(self.weights[i])
            if frame.height == 0:
                continue
            extra = [c for c in frame.columns if c not in CANDIDATE_SCHEMA and c != "rrf_score"]
            parts.append(
                frame.select(
                    "mem_id",
                    (w / (self.k + pl.col("rank").cast(pl.Float64))).alias("rrf_score"),
                    *extra,
                )
            )
        if not parts:
            return empty_candidates({"rrf_score": pl.Float64()})
        stacked = pl.concat(parts, how="diagonal_relaxed")
        extra_cols = [c for c in stacked.columns if c not in ("mem_id", "rrf_score")]
        fused = stacked.group_by("mem_id", maintain_order=True).agg(
            pl.col("rrf_score").sum(),
            *[pl.col(c).drop_nulls().first() for c in extra_cols],
        )
        fused = fused.with_columns(
            pl.lit(ctx.qid).alias("qid"),
            pl.lit(0, dtype=pl.Int64).alias("rank"),
            pl.col("rrf_score").alias("score"),
        )
        fused = rerank(fused.select("qid", "mem_id", "score", "rank", "rrf_score", *extra_cols))
        if self.top_k is not None:
            fused = fused.head(self.top_k)
        return fused
