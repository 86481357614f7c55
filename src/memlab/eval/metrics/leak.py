"""``leak@k``: cross-client exposure for scoped queries."""

from __future__ import annotations

import polars as pl

from memlab.eval.metrics.base import EvalData, MetricSpec, per_query, register_metric


@register_metric(
    "leak",
    description="1 if a memory of another client is in the top k",
    higher_is_better=False,
    kind="exposure",
)
def leak(data: EvalData, spec: MetricSpec) -> pl.DataFrame:
    """Cross-client leak for scoped queries.

    A memory leaks when its ``client_id`` differs from the query's and from the global client;
    a memory whose ``client_id`` is null counts as global.
    """
    k = spec.k
    queries = data.require_queries("leak", "client_id")
    memories = data.require_memories("leak", "client_id")
    scoped = queries.filter(pl.col("client_id").is_not_null()).select(
        "qid", query_client=pl.col("client_id")
    )
    owners = memories.select(
        "mem_id", owner=pl.col("client_id").fill_null(pl.lit(data.global_client))
    )
    values = (
        data.top(k)
        .select("qid", "mem_id")
        .join(scoped, on="qid", how="inner")
        .join(owners, on="mem_id", how="left")
        .group_by("qid")
        .agg(
            value=(
                (pl.col("owner") != pl.col("query_client"))
                & (pl.col("owner") != pl.lit(data.global_client))
            ).any()
        )
    )
    return per_query(scoped.select("qid"), values, 0.0)
