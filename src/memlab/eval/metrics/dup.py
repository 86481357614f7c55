"""``dup@k``: duplicate exposure (two top-k memories share content)."""

from __future__ import annotations

import polars as pl

from memlab.eval.metrics.base import EvalData, MetricSpec, per_query, register_metric


def _has_duplicate(column: str) -> pl.Expr:
    """True when two non-empty, non-null values of ``column`` are equal."""
    kept = pl.col(column).filter(pl.col(column).is_not_null() & (pl.col(column) != ""))
    return kept.len() > kept.n_unique()


@register_metric(
    "dup",
    description="1 if two memories in the top k share content",
    higher_is_better=False,
    kind="exposure",
)
def dup(data: EvalData, spec: MetricSpec) -> pl.DataFrame:
    """Duplicate exposure: two top-k memories share a non-empty ``content_hash`` or ``text``.

    Empty or null hashes and texts never match.
    """
    k = spec.k
    memories = data.require_memories("dup", "content_hash")
    keys = [c for c in ("content_hash", "text") if c in memories.columns]
    duplicated = pl.lit(False)
    for column in keys:
        duplicated = duplicated | _has_duplicate(column)
    values = (
        data.top(k)
        .select("qid", "mem_id")
        .join(memories.select("mem_id", *keys), on="mem_id", how="left")
        .group_by("qid")
        .agg(value=duplicated)
    )
    return per_query(data.all_qids, values, 0.0)
