"""``Success@k``: 1 if any relevant id is in the top k (trec_eval ``success_k``).

Named Success@k in the literature (e.g. ir_measures ``Success@k``); memlab called it
``R_any@k`` before, and still accepts that name as an alias.
"""

from __future__ import annotations

import ir_measures
import polars as pl

from memlab.eval.metrics.base import EvalData, MetricSpec, register_metric, trec_eval


@register_metric(
    "Success", description="1 if any relevant id is in the top k", aliases=("R_any",)
)
def success(data: EvalData, spec: MetricSpec) -> pl.DataFrame:
    """Success@k: 1 if at least one relevant id is among the first k, else 0."""
    return trec_eval(data, "Success", ir_measures.Success @ spec.k, cut=None)
