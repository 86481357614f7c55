"""``conflict@k``: exposure of unresolved contradictions."""

from __future__ import annotations

import polars as pl

from memlab.eval.metrics.base import EvalData, MetricSpec, per_query, register_metric


@register_metric(
    "conflict",
    description="1 if both sides of a contradiction are in the top k",
    higher_is_better=False,
    kind="exposure",
)
def conflict(data: EvalData, spec: MetricSpec) -> pl.DataFrame:
    """Unresolved-contradiction exposure: some top-k memory's ``contradicts`` list (memories
    column, store ids) names another top-k memory. One row per known query."""
    k = spec.k
    memories = data.require_memories("conflict", "contradicts")
    top = data.top(k).select("qid", "mem_id")
    pairs = (
        memories.select("mem_id", other=pl.col("contradicts"))
        .explode("other")
        .drop_nulls("other")
    )
    hits = top.join(pairs, on="mem_id", how="inner").join(
        top.rename({"mem_id": "other"}), on=["qid", "other"], how="semi"
    )
    values = hits.select("qid").unique().with_columns(value=pl.lit(1.0))
    return per_query(data.all_qids, values, 0.0)
