"""``R_all@k``: the all-relevant measure, 1 if every relevant id is in the top k, else 0.

Stricter than :mod:`~memlab.eval.metrics.recall` (the fraction) and
:mod:`~memlab.eval.metrics.success` (any one): a question that needs several memories is
answered only when all of them are in the context.
"""

from __future__ import annotations

import polars as pl

from memlab.eval.metrics.base import EvalData, MetricSpec, per_query, register_metric


@register_metric("R_all", description="1 if all relevant ids are in the top k")
def r_all(data: EvalData, spec: MetricSpec) -> pl.DataFrame:
    """All-evidence recall: 1 if every relevant id of the query is in the top k, else 0."""
    k = spec.k
    qrels = data.require_qrels("R_all")
    found = data.top(k).select("qid", "mem_id", found=pl.lit(True))
    values = (
        qrels.join(found, on=["qid", "mem_id"], how="left")
        .group_by("qid")
        .agg(value=pl.col("found").fill_null(False).all())
    )
    return per_query(data.relevant_qids, values, 0.0)
