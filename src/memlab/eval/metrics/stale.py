"""``stale@k``: exposure of superseded memories (1 if a stale id of the query is in the top k)."""

from __future__ import annotations

import polars as pl

from memlab.eval.metrics.base import EvalData, MetricSpec, per_query, register_metric


@register_metric(
    "stale",
    description="1 if a stale id of the query is in the top k",
    higher_is_better=False,
    kind="exposure",
)
def stale(data: EvalData, spec: MetricSpec) -> pl.DataFrame:
    """Stale exposure: 1 if any id in the query's ``stale`` list is in the top k."""
    k = spec.k
    queries = data.require_queries("stale", "stale")
    stale_ids = (
        queries.select("qid", mem_id=pl.col("stale"))
        .explode("mem_id")
        .drop_nulls("mem_id")
        .unique()
    )
    population = stale_ids.select("qid").unique()
    hits = stale_ids.join(data.top(k), on=["qid", "mem_id"], how="semi")
    values = hits.select("qid").unique().with_columns(value=pl.lit(1.0))
    return per_query(population, values, 0.0)
