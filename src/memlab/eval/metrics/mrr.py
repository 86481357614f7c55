"""``MRR[@k]``: reciprocal rank of the first relevant id (Voorhees, TREC-8 QA track 1999),
computed by trec_eval through ir_measures."""

from __future__ import annotations

import ir_measures
import polars as pl

from memlab.eval.metrics.base import EvalData, MetricSpec, register_metric, trec_eval


@register_metric("MRR", cutoff="optional", description="reciprocal rank of the first relevant id")
def mrr(data: EvalData, spec: MetricSpec) -> pl.DataFrame:
    """Reciprocal rank (trec_eval ``recip_rank``); with ``@k`` the run is cut at k first."""
    k = spec.k
    return trec_eval(data, "MRR", ir_measures.RR, cut=k)
