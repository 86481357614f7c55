"""``nDCG[@k]``: graded nDCG (Järvelin and Kekäläinen, "Cumulated gain-based evaluation of IR
techniques", TOIS 2002), computed by trec_eval through ir_measures."""

from __future__ import annotations

import ir_measures
import polars as pl

from memlab.eval.metrics.base import EvalData, MetricSpec, register_metric, trec_eval


@register_metric("nDCG", cutoff="optional", description="graded nDCG, gain = relevance")
def ndcg(data: EvalData, spec: MetricSpec) -> pl.DataFrame:
    """nDCG (Järvelin and Kekäläinen 2002) as trec_eval ``ndcg`` / ``ndcg_cut_k``.

    Gain = relevance, discount ``log2(position + 1)``; the ideal ranking uses every judged id.
    """
    k = spec.k
    measure = ir_measures.nDCG if k is None else ir_measures.nDCG @ k
    return trec_eval(data, "nDCG", measure, cut=None)
