"""``scope_violation@k``: top-k memories in a namespace the query's agent may not read
(docs/design.md §D3.5)."""

from __future__ import annotations

import polars as pl

from memlab.eval.metrics.base import EvalData, MetricSpec, per_query, register_metric


@register_metric(
    "scope_violation",
    description="top-k memories in a namespace the query's agent may not read",
    higher_is_better=False,
    kind="exposure",
)
def scope_violation(data: EvalData, spec: MetricSpec) -> pl.DataFrame:
    """Namespace violations (docs/design.md §D3.5) for queries asked by an agent.

    A memory violates when its ``scope`` is neither ``team``, nor ``agent:{the query's agent}``,
    nor ``project:{p}`` for a project ``p`` in the query's ``projects``; a null scope counts as
    ``team``. Queries without an agent (a human reads everything) are not in the population.
    """
    k = spec.k
    queries = data.require_queries("scope_violation", "agent")
    memories = data.require_memories("scope_violation", "scope")
    asked = queries.filter(pl.col("agent").is_not_null())
    if "projects" in asked.columns:
        projects = asked.select("qid", "agent", pl.col("projects").cast(pl.List(pl.String)))
    else:
        projects = asked.select("qid", "agent", projects=pl.lit([], dtype=pl.List(pl.String)))
    readable = projects.select(
        "qid",
        allowed=pl.concat_list(
            pl.lit(["team"], dtype=pl.List(pl.String)),
            pl.concat_list(pl.lit("agent:") + pl.col("agent")),
            pl.col("projects").list.eval(pl.lit("project:") + pl.element()),
        ),
    )
    scopes = memories.select("mem_id", scope=pl.col("scope").cast(pl.String).fill_null("team"))
    values = (
        data.top(k)
        .select("qid", "mem_id")
        .join(readable, on="qid", how="inner")
        .join(scopes, on="mem_id", how="left")
        .with_columns(scope=pl.col("scope").fill_null("team"))
        .group_by("qid")
        .agg(value=(~pl.col("allowed").list.contains(pl.col("scope"))).sum().cast(pl.Float64))
    )
    return per_query(asked.select("qid"), values, 0.0)
