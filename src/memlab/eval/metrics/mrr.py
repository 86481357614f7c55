"""``MRR[@k]``: reciprocal rank of the first relevant id (Voorhees, TREC-8 QA track 1999),
computed by trec_eval through ir_measures."""

from __future__ import annotations

import ir_measures
import polars as pl

from memlab.eval.metrics.base import EvalData, MetricSpec, register_metric, trec_eval


def _measure(spec: MetricSpec) -> tuple[object, int | None]:
    """trec_eval ``recip_rank`` on the run cut at k (trec_eval has no cut-off for it)."""
    return ir_measures.RR, spec.k


@register_metric("MRR", cutoff="optional", description="reciprocal rank of the first relevant id",
                 trec=_measure)
def mrr(data: EvalData, spec: MetricSpec) -> pl.DataFrame:
    """Reciprocal rank (trec_eval ``recip_rank``); with ``@k`` the run is cut at k first."""
    measure, cut = _measure(spec)
    return trec_eval(data, "MRR", measure, cut=cut)
