"""``MAP[@k]``: average precision (trec_eval ``map`` / ``map_cut_k``)."""

from __future__ import annotations

import ir_measures
import polars as pl

from memlab.eval.metrics.base import EvalData, MetricSpec, register_metric, trec_eval


def _measure(spec: MetricSpec) -> tuple[object, int | None]:
    """trec_eval ``map`` / ``map_cut_k``, on the whole run."""
    return (ir_measures.AP if spec.k is None else ir_measures.AP @ spec.k), None


@register_metric("MAP", cutoff="optional", description="average precision", trec=_measure)
def map_(data: EvalData, spec: MetricSpec) -> pl.DataFrame:
    """Average precision (trec_eval ``map`` / ``map_cut_k``; both divide by all relevant ids)."""
    measure, cut = _measure(spec)
    return trec_eval(data, "MAP", measure, cut=cut)
