"""``tokens@k``: context cost, the tokens of the top k memories."""

from __future__ import annotations

import polars as pl

from memlab.eval.metrics.base import EvalData, MetricSpec, per_query, register_metric


@register_metric(
    "tokens", description="tokens of the top k memories", higher_is_better=False, kind="cost"
)
def tokens(data: EvalData, spec: MetricSpec) -> pl.DataFrame:
    """Context cost: the sum of ``tokens`` over the top k (rankings column, else memories)."""
    k = spec.k
    top = data.top(k)
    if "tokens" not in top.columns:
        memories = data.require_memories("tokens", "tokens")
        top = top.join(memories.select("mem_id", "tokens"), on="mem_id", how="left")
    values = top.group_by("qid").agg(value=pl.col("tokens").cast(pl.Float64).fill_null(0).sum())
    return per_query(data.all_qids, values, 0.0)
