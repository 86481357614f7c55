"""Any ir_measures measure by name (``P@5``, ``AP``, ``RR``, ``RBP(p=0.8)``), passed through.

A metric name that no memlab family parses but ``ir_measures.parse_measure`` accepts is
computed by ir_measures (MacAvaney et al., "Streamlining Evaluation with ir-measures", ECIR
2022) from memlab's run and judgements, through the same run memlab's trec_eval families use
(``score = -position``, so the order evaluated is exactly the given ``rank``) and every
judgement, grade 0 included (measures such as ``Bpref`` or ``P(judged_only=True)@5`` read
it; the others treat grade 0 as not relevant, as trec_eval does).

Rules:

* **Name.** The metric is named by ir_measures' canonical spelling (``str(measure)``):
  ``"P(rel=1)@5"`` and ``"P@5"`` are one metric, ``P@5``; parameters at their default are left
  out (``RBP(p=0.8)`` is ``RBP``).
* **Relevance threshold.** When no installed provider computes the measure as written and
  the measure takes a ``rel`` threshold that was not given, memlab adds ``rel=1`` (memlab's
  own threshold: a grade >= 1 is relevant). The one installed provider of RBP (cwl_eval)
  requires it, so ``RBP(p=0.8)`` is computed, and named, as ``RBP(rel=1)``.
* **Direction.** ir_measures' measures carry no direction. Every measure is read as
  higher-is-better except ``NumRet`` without ``rel`` (how many memories were returned: a
  cost, like ``tokens@k``). ``NumQ`` and ``NumRel`` describe the judgements and do not vary
  between pipelines; they keep the default.
* **Population.** One row per query with at least one relevant id, like memlab's relevance
  families; such a query without a ranking scores 0. The per-query values are averaged like
  every memlab metric (``NumRet`` is therefore a mean, not trec_eval's sum).

A name ir_measures parses but none of its installed providers computes is refused when parsed
(with the providers that could).
"""

from __future__ import annotations

import functools

import ir_measures
import polars as pl
from ir_measures import providers

from memlab.eval.metrics.base import (
    METRIC_RESOLVERS,
    VALUE_SCHEMA,
    EvalData,
    MetricSpec,
    measure_values,
    register_metric,
)

FAMILY = "ir_measures"
"""The family every passed-through measure belongs to."""
LOWER_IS_BETTER: tuple[str, ...] = ("NumRet",)
"""ir_measures measures (without a ``rel`` threshold) that memlab minimises."""


def _computable(measure: object) -> object | None:
    """``measure``, or it with ``rel=1``, if an installed provider computes it; else None."""
    if ir_measures.DefaultPipeline.supports(measure):
        return measure
    params = getattr(measure, "SUPPORTED_PARAMS", {})
    if "rel" in params and "rel" not in measure.params:  # type: ignore[attr-defined]
        with_rel = measure(rel=1)  # type: ignore[operator]
        if ir_measures.DefaultPipeline.supports(with_rel):
            return with_rel
    return None


def _higher_is_better(measure: object) -> bool:
    name = getattr(measure, "NAME", "")
    return not (name in LOWER_IS_BETTER and "rel" not in measure.params)  # type: ignore[attr-defined]


@METRIC_RESOLVERS.register(FAMILY)
@functools.lru_cache(maxsize=256)
def resolve(name: str) -> MetricSpec | None:
    """The spec of an ir_measures measure name, ``None`` when ir_measures does not parse it.

    Raises:
        ValueError: If ir_measures parses ``name`` but no installed provider computes it.
    """
    try:
        parsed = ir_measures.parse_measure(name)
    except (NameError, ValueError, SyntaxError, TypeError, AttributeError):
        return None
    measure = _computable(parsed)
    if measure is None:
        could = [
            f"{p.NAME} ({p.install_instructions()})"
            for p in providers.registry.values()
            if _supports(p, parsed)
        ]
        hint = f"; providers that could: {', '.join(could)}" if could else ""
        raise ValueError(
            f"metric {name!r}: ir_measures knows {parsed} but none of its installed providers "
            f"computes it{hint}"
        )
    return MetricSpec(FAMILY, None, str(measure), higher_is_better=_higher_is_better(measure))


def _supports(provider: object, measure: object) -> bool:
    try:
        return bool(provider.supports(measure))  # type: ignore[attr-defined]
    except Exception:  # noqa: BLE001 - a provider's own check may fail when it is absent
        return False


@register_metric(
    FAMILY,
    cutoff="none",
    description="any measure ir_measures parses (P@5, AP, RBP(p=0.8)), passed through",
)
def ir_measure(data: EvalData, spec: MetricSpec) -> pl.DataFrame:
    """Per-query values of the ir_measures measure ``spec.measure``."""
    if spec.measure is None:
        raise ValueError(
            f"metric family {FAMILY!r} is not a metric name; name an ir_measures measure "
            "(P@5, AP, RBP(p=0.8))"
        )
    data.require_judgments(spec.measure)
    population = data.relevant_qids
    if population.is_empty():
        return pl.DataFrame(schema=VALUE_SCHEMA)
    measure = ir_measures.parse_measure(spec.measure)
    results = ir_measures.iter_calc([measure], data.judgments_dict, data.run_dict(None))
    return measure_values(results, population)
