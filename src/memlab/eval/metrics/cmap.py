"""``cMAP[@k]``: average precision on the condensed list (Sakai's AP', SIGIR 2007)."""

from __future__ import annotations

import ir_measures
import polars as pl

from memlab.eval.metrics.base import EvalData, MetricSpec, register_metric, trec_eval_judged


@register_metric(
    "cMAP", cutoff="optional", description="average precision on the condensed list"
)
def cmap(data: EvalData, spec: MetricSpec) -> pl.DataFrame:
    """Condensed-list average precision, Sakai's AP' (trec_eval ``-J``, ir_measures
    ``AP(judged_only=True)``): unjudged memories are removed before scoring."""
    k = spec.k
    base = ir_measures.AP(judged_only=True)
    measure = base if k is None else base @ k
    return trec_eval_judged(data, "cMAP", measure, data.relevant_qids)
