"""``Success@k``: 1 if any relevant id is in the top k (trec_eval ``success_k``).

Named Success@k in the literature (e.g. ir_measures ``Success@k``); memlab called it
``R_any@k`` before, and still accepts that name as an alias.
"""

from __future__ import annotations

import ir_measures
import polars as pl

from memlab.eval.metrics.base import EvalData, MetricSpec, register_metric, trec_eval


def _measure(spec: MetricSpec) -> tuple[object, int | None]:
    """trec_eval ``success_k``, on the whole run."""
    return ir_measures.Success @ spec.k, None


@register_metric(
    "Success", description="1 if any relevant id is in the top k", aliases=("R_any",),
    trec=_measure,
)
def success(data: EvalData, spec: MetricSpec) -> pl.DataFrame:
    """Success@k: 1 if at least one relevant id is among the first k, else 0."""
    measure, cut = _measure(spec)
    return trec_eval(data, "Success", measure, cut=cut)
