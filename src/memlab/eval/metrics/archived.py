"""``archived@k``: exposure of cold-tier memories."""

from __future__ import annotations

import polars as pl

from memlab.eval.metrics.base import EvalData, MetricSpec, per_query, register_metric


@register_metric(
    "archived",
    description="1 if a cold-tier memory is in the top k",
    higher_is_better=False,
    kind="exposure",
)
def archived(data: EvalData, spec: MetricSpec) -> pl.DataFrame:
    """Cold-tier exposure: a memory in the query's ``archived`` list (queries column: what was
    archived when it ran) is in the top k. One row per query of the queries frame."""
    k = spec.k
    queries = data.require_queries("archived", "archived")
    cold = (
        queries.select("qid", mem_id=pl.col("archived"))
        .explode("mem_id")
        .drop_nulls("mem_id")
        .unique()
    )
    hits = cold.join(data.top(k), on=["qid", "mem_id"], how="semi")
    values = hits.select("qid").unique().with_columns(value=pl.lit(1.0))
    return per_query(queries.select("qid").unique(), values, 0.0)
