"""``judged@k``: the share of the top k that has a judgement of any grade (ir_measures
``Judged@k``)."""

from __future__ import annotations

import ir_measures
import polars as pl

from memlab.eval.metrics.base import (
    VALUE_SCHEMA,
    EvalData,
    MetricSpec,
    measure_values,
    register_metric,
)


@register_metric(
    "judged", description="share of the top k that has a judgement", kind="judgment"
)
def judged(data: EvalData, spec: MetricSpec) -> pl.DataFrame:
    """Judgement rate: the share of the top k memories that have a judgement of any grade.

    ir_measures ``Judged@k`` (its ``judged`` provider, after OpenNIR): the share is taken over
    ``min(k, length of the ranking)``. One row per query with at least one judgement; such a
    query without rankings scores 0.
    """
    k = spec.k
    population = data.judged_qids
    if population.is_empty():
        return pl.DataFrame(schema=VALUE_SCHEMA)
    measure = ir_measures.Judged @ k
    results = ir_measures.judged.iter_calc([measure], data.judgments_dict, data.run_dict(None))
    return measure_values(results, population)
