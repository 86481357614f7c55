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

A name is checked in full when it is parsed (``memlab eval`` parses every ``--metric`` before
any replay), so a bad name is one ``ValueError`` naming it, never a failure after the replay:

* **Parameters.** A cutoff ``@k`` is an integer in ``[1, MAX_CUTOFF]``; a ``rel`` threshold an
  integer in ``[1, MAX_GRADE]`` (the largest grade a dataset may hold); every other numeric
  parameter is finite and at most ``MAX_PARAMETER`` in size; a parameter ir_measures refuses
  (``RBP(p=2)``) is refused with its reason.
* **In-process providers only.** A measure is computed by the first installed provider of
  :data:`IN_PROCESS_PROVIDERS` that supports it; a measure only a provider running an external
  program computes (``ERR@5``: gdeval, a perl script) is refused.
* **Trial.** The measure is computed once on a two-query toy run; whatever fails there (a
  parameter combination a provider rejects) is refused as well.
* A name ir_measures parses but none of the providers computes is refused (with the providers
  that could).
"""

from __future__ import annotations

import functools
import math
from typing import Any

import ir_measures
import polars as pl
from ir_measures import providers
from ir_measures.providers.fallback_provider import FallbackProvider

from memlab.datasets.validate import MAX_GRADE
from memlab.eval.metrics.base import (
    MAX_CUTOFF,
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
IN_PROCESS_PROVIDERS: tuple[str, ...] = (
    "runtime", "pytrec_eval", "cwl_eval", "compat", "pyndeval", "judged", "msmarco", "accuracy",
    "ranx",
)
"""ir_measures providers that compute inside this process, in ir_measures' order of preference
(``gdeval`` runs a perl script and is left out)."""
MAX_PARAMETER = 1_000_000
"""The largest magnitude of a numeric measure parameter other than a cutoff or ``rel``."""
PIPELINE = FallbackProvider(
    [p for p in ir_measures.DefaultPipeline.providers if p.NAME in IN_PROCESS_PROVIDERS]
)
"""The provider every passed-through measure is computed by."""
_TRIAL_QRELS = {"q1": {"a": 1, "b": 2, "n": 0}, "q2": {"c": 1}}
_TRIAL_RUN = {"q1": {"a": -1.0, "x": -2.0, "b": -3.0}, "q2": {"x": -1.0}}


def _supported(name: str, measure: object) -> bool:
    """Whether an installed in-process provider computes ``measure``.

    Raises:
        ValueError: If ir_measures refuses a parameter of ``measure`` (``RBP(p=2)``).
    """
    try:
        return bool(PIPELINE.supports(measure))
    except AssertionError as exc:  # ir_measures checks parameters with assert
        why = str(exc) or "invalid parameter"
        raise ValueError(f"metric {name!r}: {why}") from None


def _computable(name: str, measure: object) -> object | None:
    """``measure``, or it with ``rel=1``, if an installed provider computes it; else None."""
    if _supported(name, measure):
        return measure
    params = getattr(measure, "SUPPORTED_PARAMS", {})
    if "rel" in params and "rel" not in measure.params:  # type: ignore[attr-defined]
        with_rel = measure(rel=1)  # type: ignore[operator]
        if _supported(name, with_rel):
            return with_rel
    return None


def _check_parameters(name: str, params: dict[str, Any]) -> None:
    """Refuse a cutoff, ``rel`` or numeric parameter out of its range (``ValueError``)."""
    for key, value in params.items():
        if key in ("cutoff", "rel"):
            high = MAX_CUTOFF if key == "cutoff" else MAX_GRADE
            what = "cutoff" if key == "cutoff" else "parameter 'rel'"
            if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= high:
                raise ValueError(
                    f"metric {name!r}: {what} must be an integer in [1, {high}], got {value!r}"
                )
        elif isinstance(value, (int, float)) and not isinstance(value, bool):
            if isinstance(value, int):
                ok = abs(value) <= MAX_PARAMETER
            else:
                ok = math.isfinite(value) and abs(value) <= MAX_PARAMETER
            if not ok:
                raise ValueError(
                    f"metric {name!r}: parameter {key!r} must be finite and at most "
                    f"{MAX_PARAMETER} in size, got {value!r}"
                )


def _trial(name: str, measure: object) -> None:
    """Compute ``measure`` on a toy run; any failure is a ``ValueError`` naming ``name``."""
    try:
        list(PIPELINE.iter_calc([measure], _TRIAL_QRELS, _TRIAL_RUN))
    except Exception as exc:  # noqa: BLE001 - any provider failure refuses the name
        why = str(exc).splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise ValueError(f"metric {name!r}: {measure} cannot be computed: {why}") from None


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
    except AssertionError as exc:  # a known measure with a parameter it refuses: RBP(p=2)
        why = str(exc) or "invalid parameter"
        raise ValueError(f"metric {name!r}: {why}") from None
    except (NameError, ValueError, SyntaxError, TypeError, AttributeError, RecursionError,
            MemoryError, OverflowError):
        return None
    _check_parameters(name, dict(parsed.params))
    measure = _computable(name, parsed)
    if measure is None:
        could = [p for p in providers.registry.values() if _supports(p, parsed)]
        external = [p.NAME for p in could if p.NAME not in IN_PROCESS_PROVIDERS]
        if external:
            raise ValueError(
                f"metric {name!r}: {parsed} is computed only by {', '.join(external)}, which "
                "runs an external program; memlab computes measures in-process only"
            )
        hint = ", ".join(f"{p.NAME} ({p.install_instructions()})" for p in could)
        raise ValueError(
            f"metric {name!r}: ir_measures knows {parsed} but none of its installed providers "
            f"computes it" + (f"; providers that could: {hint}" if hint else "")
        )
    _trial(name, measure)
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
    results = PIPELINE.iter_calc([measure], data.judgments_dict, data.run_dict(None))
    return measure_values(results, population)
