"""``Recall@k``: the evidence-recall fraction ``|relevant ∩ top k| / |relevant|``.

trec_eval ``recall_k`` (ir_measures ``R@k``); memlab called it ``R_frac@k`` before, and still
accepts that name as an alias. :mod:`~memlab.eval.metrics.r_all` is its all-or-nothing form.
"""

from __future__ import annotations

import ir_measures
import polars as pl

from memlab.eval.metrics.base import EvalData, MetricSpec, register_metric, trec_eval


def _measure(spec: MetricSpec) -> tuple[object, int | None]:
    """trec_eval ``recall_k``, on the whole run."""
    return ir_measures.R @ spec.k, None


@register_metric(
    "Recall", description="|relevant ∩ top k| / |relevant|", aliases=("R_frac",),
    trec=_measure,
)
def recall(data: EvalData, spec: MetricSpec) -> pl.DataFrame:
    """Recall@k: the share of the query's relevant ids found among the first k."""
    measure, cut = _measure(spec)
    return trec_eval(data, "Recall", measure, cut=cut)
