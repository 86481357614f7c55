"""``bpref``: binary preference (Buckley and Voorhees, SIGIR 2004), unjudged memories ignored."""

from __future__ import annotations

import ir_measures
import polars as pl

from memlab.eval.metrics.base import EvalData, MetricSpec, register_metric, trec_eval_judged


@register_metric(
    "bpref",
    cutoff="none",
    description="binary preference: judged relevant above judged non-relevant",
)
def bpref(data: EvalData, spec: MetricSpec) -> pl.DataFrame:
    """bpref (Buckley and Voorhees, "Retrieval evaluation with incomplete information", SIGIR
    2004) as trec_eval ``bpref``: ``1/R · Σ_r (1 - |n ranked above r| / min(R, N))`` over the
    judged relevant ``r``, with ``n`` among the first ``R`` judged non-relevant; unjudged
    memories are ignored. One row per query with a relevant id."""
    return trec_eval_judged(data, "bpref", ir_measures.Bpref, data.relevant_qids)
