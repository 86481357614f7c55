"""Per-query retrieval metrics whose names state the variant (``R_all@10``, ``nDCG@5``, ``MRR``).

Every metric is a *family*: one module of this package whose function is registered with
:func:`register_metric` (into the generic :class:`~memlab.registry.Registry` ``METRICS``).
Importing the package imports every module, as :mod:`memlab.stages` does, so a new metric is
one module here and its test in ``tests/eval/metrics/``. A metric name is the family followed
by an optional cutoff ``@k`` and is parsed by :func:`parse_metric`; old family names stay
accepted as aliases (``R_any`` → ``Success``, ``R_frac`` → ``Recall``).

=============  ==========================================================================
name           per-query value
=============  ==========================================================================
``R_all@k``    1 if every relevant id is in the top k, else 0 (all-relevant)
``Success@k``  1 if any relevant id is in the top k (alias ``R_any@k``)
``Recall@k``   evidence-recall fraction ``|relevant ∩ top k| / |relevant|`` (alias ``R_frac@k``)
``nDCG[@k]``   graded nDCG, gain = relevance, discount ``log2(rank + 1)`` (trec_eval)
``MRR[@k]``    reciprocal rank of the first relevant id (0 when none in the top k)
``MAP[@k]``    average precision; ``MAP@k`` divides by all relevant ids (trec_eval map_cut)
``stale@k``    1 if any of the query's ``stale`` ids is in the top k
``leak@k``     1 if a memory of another client (not the query's, not ``"global"``) is in the
               top k; scoped queries only
``dup@k``      1 if two memories in the top k share a ``content_hash`` (or an identical text)
``tokens@k``   sum of the ``tokens`` of the top k memories
``judged@k``   share of the top k that has a judgement of any grade (ir_measures Judged@k)
``bpref``      binary preference (Buckley and Voorhees 2004): unjudged memories ignored
``cnDCG[@k]``  nDCG on the condensed list: unjudged memories removed first (Sakai's nDCG')
``cMAP[@k]``   average precision on the condensed list (Sakai's AP')
``scope_violation@k``  number of top-k memories in a namespace the query's agent may not read
               (``team``, ``agent:{its name}`` and its projects are readable); agent queries
               only; must be 0
``conflict@k`` 1 if both sides of a labelled contradiction are in the top k (unresolved: a
               resolved one has a side retired, which a query does not see)
``archived@k`` 1 if a memory that was in the cold tier when the query ran is in the top k
any other      a measure ``ir_measures.parse_measure`` accepts (``P@5``, ``AP``, ``RR``,
               ``RBP(p=0.8)``), computed by ir_measures (:mod:`.ir_measures_names`)
=============  ==========================================================================

Every family carries its direction and kind (:func:`register_metric`): ``stale``, ``leak``,
``dup``, ``scope_violation``, ``conflict``, ``archived`` (exposures) and ``tokens`` (a cost) are
lower-is-better; the others higher-is-better.

Judgements of grade 0 ("judged, not relevant") matter only to ``judged``, ``bpref``, ``cnDCG``
and ``cMAP``; the standard metrics read every memory without a grade ≥ 1 as not relevant, as
trec_eval does. ``c`` marks a condensed-list variant: with incomplete (pooled) judgements it
does not penalise a pipeline for surfacing memories nobody judged (Sakai, "Alternatives to
bpref", SIGIR 2007).

``nDCG``, ``MRR``, ``MAP``, ``Recall`` and ``Success`` are computed by trec_eval through
ir_measures / pytrec_eval (Van Gysel and de Rijke, "Pytrec_eval: An Extremely Fast Python
Interface to trec_eval", SIGIR 2018; MacAvaney et al., "Streamlining Evaluation with
ir-measures", ECIR 2022). trec_eval re-sorts a run by score and breaks ties by document id, so
the run handed to it carries ``score = -position``: the ranking evaluated is exactly the given
order of ``rank``; the ``score`` column of the rankings is never used.

Populations: relevance metrics have one row per query with at least one relevant id in the
qrels (a query without rankings scores 0 and counts in the mean; a query without qrels has no
row). ``stale@k`` has one row per query with a non-empty ``stale`` list, ``leak@k`` one per
query whose ``client_id`` is not null, ``dup@k`` and ``tokens@k`` one per known query (the
queries frame, the qrels and the rankings together). ``judged@k`` has one row per query with
at least one judgement of any grade; ``bpref``, ``cnDCG`` and ``cMAP`` one per query with a
relevant id, like the standard relevance metrics.
"""

import importlib
import pkgutil

from memlab.eval.metrics.base import (
    KINDS,
    METRIC_ALIASES,
    METRIC_RESOLVERS,
    METRICS,
    EvalData,
    MetricFamily,
    MetricFunction,
    MetricResolver,
    MetricSpec,
    aggregate,
    canonical_metric,
    evaluate,
    higher_is_better,
    main_metric_of,
    metric_families,
    metric_family,
    parse_metric,
    register_metric,
)

for _module in sorted(m.name for m in pkgutil.iter_modules(__path__)):
    importlib.import_module(f"{__name__}.{_module}")

__all__ = [
    "KINDS",
    "METRICS",
    "METRIC_ALIASES",
    "METRIC_RESOLVERS",
    "EvalData",
    "MetricFamily",
    "MetricFunction",
    "MetricResolver",
    "MetricSpec",
    "aggregate",
    "canonical_metric",
    "evaluate",
    "higher_is_better",
    "main_metric_of",
    "metric_families",
    "metric_family",
    "parse_metric",
    "register_metric",
]
