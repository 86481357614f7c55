"""``MAP[@k]``: average precision (trec_eval ``map`` / ``map_cut_k``)."""

from __future__ import annotations

import ir_measures
import polars as pl

from memlab.eval.metrics.base import EvalData, MetricSpec, register_metric, trec_eval


@register_metric("MAP", cutoff="optional", description="average precision")
def map_(data: EvalData, spec: MetricSpec) -> pl.DataFrame:
    """Average precision (trec_eval ``map`` / ``map_cut_k``; both divide by all relevant ids)."""
    k = spec.k
    measure = ir_measures.AP if k is None else ir_measures.AP @ k
    return trec_eval(data, "MAP", measure, cut=None)
