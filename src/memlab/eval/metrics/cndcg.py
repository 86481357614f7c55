"""``cnDCG[@k]``: nDCG on the condensed list (Sakai, "Alternatives to bpref", SIGIR 2007)."""

from __future__ import annotations

import ir_measures
import polars as pl

from memlab.eval.metrics.base import EvalData, MetricSpec, register_metric, trec_eval_judged


@register_metric(
    "cnDCG", cutoff="optional", description="nDCG on the condensed list (unjudged removed)"
)
def cndcg(data: EvalData, spec: MetricSpec) -> pl.DataFrame:
    """Condensed-list nDCG, Sakai's nDCG' ("Alternatives to bpref", SIGIR 2007).

    Unjudged memories are removed from the ranking before scoring, then the cutoff applies
    (trec_eval ``-J``, ir_measures ``nDCG(judged_only=True)``). One row per query with a
    relevant id.
    """
    k = spec.k
    base = ir_measures.nDCG(judged_only=True)
    measure = base if k is None else base @ k
    return trec_eval_judged(data, "cnDCG", measure, data.relevant_qids)
