"""``nDCG[@k]``: graded nDCG (Järvelin and Kekäläinen, "Cumulated gain-based evaluation of IR
techniques", TOIS 2002), computed by trec_eval through ir_measures."""

from __future__ import annotations

import ir_measures
import polars as pl

from memlab.eval.metrics.base import EvalData, MetricSpec, register_metric, trec_eval


def _measure(spec: MetricSpec) -> tuple[object, int | None]:
    """trec_eval ``ndcg`` / ``ndcg_cut_k``, on the whole run."""
    return (ir_measures.nDCG if spec.k is None else ir_measures.nDCG @ spec.k), None


@register_metric("nDCG", cutoff="optional", description="graded nDCG, gain = relevance",
                 trec=_measure)
def ndcg(data: EvalData, spec: MetricSpec) -> pl.DataFrame:
    """nDCG (Järvelin and Kekäläinen 2002) as trec_eval ``ndcg`` / ``ndcg_cut_k``.

    Gain = relevance, discount ``log2(position + 1)``; the ideal ranking uses every judged id.
    """
    measure, cut = _measure(spec)
    return trec_eval(data, "nDCG", measure, cut=cut)
