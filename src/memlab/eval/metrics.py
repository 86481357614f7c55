"""Per-query retrieval metrics whose names state the variant (``R_all@10``, ``nDCG@5``, ``MRR``).

Every metric is a *family* registered with :func:`register_metric`; a metric name is the family
followed by an optional cutoff ``@k`` and is parsed by :func:`parse_metric`.

=============  ==========================================================================
name           per-query value
=============  ==========================================================================
``R_all@k``    1 if every relevant id is in the top k, else 0
``R_any@k``    1 if any relevant id is in the top k (Success@k)
``R_frac@k``   evidence-recall fraction ``|relevant ∩ top k| / |relevant|`` (R@k)
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
=============  ==========================================================================

Every family carries its direction and kind (:func:`register_metric`): ``stale``, ``leak``,
``dup`` (exposures) and ``tokens`` (a cost) are lower-is-better; the others higher-is-better.

Judgements of grade 0 ("judged, not relevant") matter only to ``judged``, ``bpref``, ``cnDCG``
and ``cMAP``; the standard metrics read every memory without a grade ≥ 1 as not relevant, as
trec_eval does. ``c`` marks a condensed-list variant: with incomplete (pooled) judgements it
does not penalise a pipeline for surfacing memories nobody judged (Sakai, "Alternatives to
bpref", SIGIR 2007).

``nDCG``, ``MRR``, ``MAP``, ``R_frac`` and ``R_any`` are computed by trec_eval through
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

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from functools import cached_property
from typing import Literal, Protocol

import ir_measures
import polars as pl

from memlab.memory.records import GLOBAL_CLIENT

Cutoff = Literal["required", "optional", "none"]
Kind = Literal["relevance", "judgment", "exposure", "cost"]
KINDS: tuple[str, ...] = ("relevance", "judgment", "exposure", "cost")
"""What a family measures: ``relevance`` (needs qrels), ``judgment`` (how much of a ranking is
judged), ``exposure`` (memories that should not be shown: stale, leaked, duplicated), ``cost``
(context size)."""

_NAME_PATTERN = re.compile(r"^(?P<family>[A-Za-z][A-Za-z_]*)(?:@(?P<k>[0-9]+))?$")
_VALUE_SCHEMA = {"qid": pl.String, "value": pl.Float64}
_RESULT_SCHEMA = {"qid": pl.String, "metric": pl.String, "value": pl.Float64}


class MetricFunction(Protocol):
    """Computes one metric family: one row ``qid, value`` per query of its population."""

    def __call__(self, data: EvalData, k: int | None) -> pl.DataFrame:
        """Return a frame with columns ``qid`` (String) and ``value`` (Float64)."""
        ...


@dataclass(frozen=True, slots=True)
class MetricFamily:
    """A registered metric family.

    Attributes:
        name: Family name, e.g. ``"R_all"``.
        function: The implementation.
        cutoff: Whether ``@k`` is ``"required"``, ``"optional"`` or not allowed (``"none"``).
        description: One line shown in error messages and listings.
        higher_is_better: The direction: ``False`` for costs and exposures (``tokens@k``,
            ``stale@k``), read by sweeps, comparisons, wins/losses, reports and apps.
        kind: One of :data:`KINDS`.
    """

    name: str
    function: MetricFunction
    cutoff: Cutoff
    description: str
    higher_is_better: bool = True
    kind: Kind = "relevance"

    @property
    def pattern(self) -> str:
        """The family as written in a metric name: ``R_all@k``, ``MRR[@k]``, ``X``."""
        return {"required": f"{self.name}@k", "optional": f"{self.name}[@k]", "none": self.name}[
            self.cutoff
        ]


@dataclass(frozen=True, slots=True)
class MetricSpec:
    """A parsed metric name.

    Attributes:
        family: Registered family name.
        k: Cutoff, or ``None`` for the full ranking.
    """

    family: str
    k: int | None = None

    @property
    def name(self) -> str:
        """Canonical metric name, e.g. ``"nDCG@10"`` or ``"MRR"``."""
        return self.family if self.k is None else f"{self.family}@{self.k}"


_FAMILIES: dict[str, MetricFamily] = {}


def register_metric(
    name: str,
    *,
    cutoff: Cutoff = "required",
    description: str = "",
    higher_is_better: bool = True,
    kind: Kind = "relevance",
) -> Callable[[MetricFunction], MetricFunction]:
    """Register a metric family under ``name`` (decorator).

    Modelled on ir_measures' measure objects, which carry their own metadata: a family states
    its direction and kind once, and every consumer (sweep, compare, wins/losses, the report,
    the apps) reads them through :func:`metric_family` / :func:`higher_is_better`.

    Args:
        name: Family name; letters and underscores, starting with a letter.
        cutoff: ``"required"``, ``"optional"`` or ``"none"``.
        description: One line describing the per-query value.
        higher_is_better: ``False`` for metrics to minimise (costs, exposures).
        kind: One of :data:`KINDS`.

    Raises:
        ValueError: If the name is malformed or already registered, or ``cutoff`` or ``kind``
            is unknown.
        TypeError: If ``higher_is_better`` is not a bool.
    """
    if not re.fullmatch(r"[A-Za-z][A-Za-z_]*", name):
        raise ValueError(f"register_metric: field 'name': malformed family name {name!r}")
    if cutoff not in ("required", "optional", "none"):
        raise ValueError(f"register_metric: field 'cutoff': unknown value {cutoff!r}")
    if kind not in KINDS:
        raise ValueError(
            f"register_metric: field 'kind': unknown value {kind!r}; expected one of "
            + ", ".join(KINDS)
        )
    if not isinstance(higher_is_better, bool):
        raise TypeError(
            "register_metric: field 'higher_is_better' must be a bool, got "
            f"{type(higher_is_better).__name__}"
        )

    def decorator(function: MetricFunction) -> MetricFunction:
        if name in _FAMILIES:
            raise ValueError(f"register_metric: metric family {name!r} is already registered")
        _FAMILIES[name] = MetricFamily(
            name, function, cutoff, description, higher_is_better, kind
        )
        return function

    return decorator


def metric_families() -> tuple[MetricFamily, ...]:
    """All registered families, in registration order."""
    return tuple(_FAMILIES.values())


def metric_family(name: str) -> MetricFamily:
    """The registered family of a metric name (``"tokens@10"`` → the ``tokens`` family).

    Raises:
        ValueError: As :func:`parse_metric`.
    """
    return _FAMILIES[parse_metric(name).family]


def higher_is_better(name: str) -> bool:
    """The direction of a metric name; ``True`` for a name no registered family parses.

    Per-query frames may carry metrics that are not registered here (computed elsewhere and
    joined in); they are read as higher-is-better, the convention of IR measures.
    """
    try:
        return metric_family(name).higher_is_better
    except (TypeError, ValueError):
        return True


def _known() -> str:
    return ", ".join(family.pattern for family in _FAMILIES.values())


def parse_metric(name: str) -> MetricSpec:
    """Parse a metric name such as ``"R_all@10"``, ``"MRR"`` or ``"MAP@100"``.

    Raises:
        TypeError: If ``name`` is not a string.
        ValueError: If the family is unknown (the message lists the known families), or the
            cutoff is missing, forbidden or smaller than 1.
    """
    if not isinstance(name, str):
        raise TypeError(f"metric name must be a str, got {type(name).__name__}: {name!r}")
    match = _NAME_PATTERN.match(name.strip())
    family = _FAMILIES.get(match["family"]) if match else None
    if match is None or family is None:
        raise ValueError(f"unknown metric {name!r}; known families: {_known()}")
    k = None if match["k"] is None else int(match["k"])
    if k is None and family.cutoff == "required":
        raise ValueError(f"metric {name!r} needs a cutoff: write it as {family.pattern}")
    if k is not None and family.cutoff == "none":
        raise ValueError(f"metric {name!r} takes no cutoff: write it as {family.pattern}")
    if k is not None and k < 1:
        raise ValueError(f"metric {name!r}: cutoff k must be >= 1, got {k}")
    return MetricSpec(family.name, k)


# --------------------------------------------------------------------------- input checks


def _require(frame: object, what: str, columns: dict[str, tuple[type[pl.DataType], ...]]) -> None:
    if not isinstance(frame, pl.DataFrame):
        raise TypeError(f"{what} must be a polars DataFrame, got {type(frame).__name__}")
    for column, dtypes in columns.items():
        if column not in frame.columns:
            raise ValueError(f"{what}: missing column {column!r} (has {frame.columns})")
        dtype = frame.schema[column]
        if not isinstance(dtype, dtypes) and dtype != pl.Null:
            names = " or ".join(d.__name__ for d in dtypes)
            raise TypeError(f"{what}: field {column!r} must be {names}, got {dtype}")


def _first_row(frame: pl.DataFrame, mask: pl.Expr) -> int | None:
    rows = frame.with_row_index("_row").filter(mask).get_column("_row")
    return None if rows.is_empty() else int(rows[0])


def _no_nulls(frame: pl.DataFrame, what: str, columns: Sequence[str]) -> None:
    for column in columns:
        row = _first_row(frame, pl.col(column).is_null())
        if row is not None:
            raise ValueError(f"{what}: row {row}, field {column!r}: null value")


def _no_duplicates(frame: pl.DataFrame, what: str, columns: list[str]) -> None:
    row = _first_row(frame, ~pl.struct(columns).is_first_distinct())
    if row is not None:
        values = frame.row(row, named=True)
        key = ", ".join(f"{c}={values[c]!r}" for c in columns)
        raise ValueError(f"{what}: row {row}, fields {columns}: duplicate ({key})")


_INT = (pl.Int8, pl.Int16, pl.Int32, pl.Int64, pl.UInt8, pl.UInt16, pl.UInt32, pl.UInt64)
_NUM = (*_INT, pl.Float32, pl.Float64)
_STR = (pl.String,)
_LIST = (pl.List,)


def _check_rankings(rankings: pl.DataFrame) -> pl.DataFrame:
    _require(rankings, "rankings", {"qid": _STR, "rank": _INT, "mem_id": _STR})
    if "tokens" in rankings.columns:
        _require(rankings, "rankings", {"tokens": _NUM})
    _no_nulls(rankings, "rankings", ["qid", "rank", "mem_id"])
    row = _first_row(rankings, pl.col("rank") < 1)
    if row is not None:
        rank = rankings.get_column("rank")[row]
        raise ValueError(f"rankings: row {row}, field 'rank': ranks are 1-based, got {rank}")
    _no_duplicates(rankings, "rankings", ["qid", "rank"])
    _no_duplicates(rankings, "rankings", ["qid", "mem_id"])
    extra = [pl.col("tokens").cast(pl.Float64)] if "tokens" in rankings.columns else []
    return (
        rankings.with_row_index("row")
        .select(
            "row",
            pl.col("qid").cast(pl.String),
            pl.col("rank").cast(pl.Int64),
            pl.col("mem_id").cast(pl.String),
            *extra,
        )
        .sort("qid", "rank")
        .with_columns(pos=pl.int_range(1, pl.len() + 1, dtype=pl.Int64).over("qid"))
    )


def _check_judgments(qrels: pl.DataFrame) -> pl.DataFrame:
    """Every judgement (grade 0 included), checked and sorted."""
    _require(qrels, "qrels", {"qid": _STR, "mem_id": _STR, "relevance": _INT})
    _no_nulls(qrels, "qrels", ["qid", "mem_id", "relevance"])
    row = _first_row(qrels, pl.col("relevance") < 0)
    if row is not None:
        value = qrels.get_column("relevance")[row]
        raise ValueError(f"qrels: row {row}, field 'relevance': must be >= 0, got {value}")
    _no_duplicates(qrels, "qrels", ["qid", "mem_id"])
    return qrels.select(
        pl.col("qid").cast(pl.String),
        pl.col("mem_id").cast(pl.String),
        pl.col("relevance").cast(pl.Int64),
    ).sort("qid", "mem_id")


def _check_qrels(qrels: pl.DataFrame) -> pl.DataFrame:
    """The relevant judgements only (``relevance >= 1``)."""
    return _check_judgments(qrels).filter(pl.col("relevance") >= 1)


def _check_queries(queries: pl.DataFrame) -> pl.DataFrame:
    _require(queries, "queries", {"qid": _STR})
    _no_nulls(queries, "queries", ["qid"])
    _no_duplicates(queries, "queries", ["qid"])
    casts = [pl.col("qid").cast(pl.String)]
    if "client_id" in queries.columns:
        _require(queries, "queries", {"client_id": _STR})
        casts.append(pl.col("client_id").cast(pl.String))
    if "stale" in queries.columns:
        _require(queries, "queries", {"stale": _LIST})
        casts.append(pl.col("stale").cast(pl.List(pl.String)))
    return queries.with_columns(casts)


def _check_memories(memories: pl.DataFrame) -> pl.DataFrame:
    _require(memories, "memories", {"mem_id": _STR})
    _no_nulls(memories, "memories", ["mem_id"])
    _no_duplicates(memories, "memories", ["mem_id"])
    casts = [pl.col("mem_id").cast(pl.String)]
    for column in ("client_id", "content_hash", "text"):
        if column in memories.columns:
            _require(memories, "memories", {column: _STR})
            casts.append(pl.col(column).cast(pl.String))
    if "tokens" in memories.columns:
        _require(memories, "memories", {"tokens": _NUM})
        casts.append(pl.col("tokens").cast(pl.Float64))
    return memories.with_columns(casts)


# --------------------------------------------------------------------------- evaluation data


@dataclass(frozen=True)
class EvalData:
    """Validated inputs handed to every metric function.

    Attributes:
        rankings: ``row`` (input row), ``qid``, ``rank``, ``mem_id``, ``pos`` (1-based position
            in rank order) and ``tokens`` when given; sorted by ``qid, rank``.
        qrels: Relevant judgements only (``relevance >= 1``), or ``None``.
        judgments: Every judgement, non-relevant ones (``relevance == 0``) included, or
            ``None``; read by the metrics that know what is unjudged.
        queries: The queries frame, or ``None``.
        memories: The memories frame, or ``None``.
        global_client: Client id of memories visible to every client.
    """

    rankings: pl.DataFrame
    qrels: pl.DataFrame | None
    queries: pl.DataFrame | None
    memories: pl.DataFrame | None
    global_client: str = GLOBAL_CLIENT
    judgments: pl.DataFrame | None = None
    _runs: dict[int | None, dict[str, dict[str, float]]] = field(
        default_factory=dict, repr=False, compare=False
    )

    def top(self, k: int | None) -> pl.DataFrame:
        """The rankings cut to the first ``k`` positions of each query (all when ``None``)."""
        return self.rankings if k is None else self.rankings.filter(pl.col("pos") <= k)

    def require_qrels(self, metric: str) -> pl.DataFrame:
        """The qrels, or a ValueError naming ``metric`` when none were given."""
        if self.qrels is None:
            raise ValueError(f"metric {metric!r} needs qrels")
        return self.qrels

    def require_queries(self, metric: str, column: str) -> pl.DataFrame:
        """The queries frame, checked to have ``column``."""
        if self.queries is None:
            raise ValueError(f"metric {metric!r} needs queries (column {column!r})")
        if column not in self.queries.columns:
            raise ValueError(f"queries: missing column {column!r} needed by metric {metric!r}")
        return self.queries

    def require_memories(self, metric: str, column: str) -> pl.DataFrame:
        """The memories frame, checked to have ``column`` and every ranked ``mem_id``."""
        if self.memories is None:
            raise ValueError(f"metric {metric!r} needs memories (column {column!r})")
        if column not in self.memories.columns:
            raise ValueError(f"memories: missing column {column!r} needed by metric {metric!r}")
        unknown = self.rankings.join(self.memories, on="mem_id", how="anti").sort("row")
        if not unknown.is_empty():
            row, mem_id = unknown.get_column("row")[0], unknown.get_column("mem_id")[0]
            raise ValueError(
                f"rankings: row {row}, field 'mem_id': {mem_id!r} is not in memories "
                f"(needed by metric {metric!r})"
            )
        return self.memories

    @cached_property
    def relevant_qids(self) -> pl.DataFrame:
        """One row ``qid`` per query with at least one relevant id, sorted."""
        qrels = self.qrels if self.qrels is not None else pl.DataFrame(schema={"qid": pl.String})
        return qrels.select("qid").unique().sort("qid")

    @cached_property
    def all_qids(self) -> pl.DataFrame:
        """One row ``qid`` per known query (queries, qrels and rankings together), sorted."""
        parts = [self.relevant_qids, self.rankings.select("qid")]
        if self.queries is not None:
            parts.append(self.queries.select("qid"))
        return pl.concat(parts).unique().sort("qid")

    @cached_property
    def judged_qids(self) -> pl.DataFrame:
        """One row ``qid`` per query with at least one judgement (of any grade), sorted."""
        judged = self.require_judgments("judged")
        return judged.select("qid").unique().sort("qid")

    def require_judgments(self, metric: str) -> pl.DataFrame:
        """Every judgement (grade 0 included), or a ValueError naming ``metric``."""
        if self.judgments is None:
            raise ValueError(f"metric {metric!r} needs qrels")
        return self.judgments

    @cached_property
    def judgments_dict(self) -> dict[str, dict[str, int]]:
        """Every judgement as ``{qid: {mem_id: relevance}}`` (grade 0 included)."""
        out: dict[str, dict[str, int]] = {}
        for qid, mem_id, relevance in self.require_judgments("trec_eval").iter_rows():
            out.setdefault(qid, {})[mem_id] = relevance
        return out

    @cached_property
    def qrels_dict(self) -> dict[str, dict[str, int]]:
        """Qrels as ``{qid: {mem_id: relevance}}`` for trec_eval."""
        out: dict[str, dict[str, int]] = {}
        for qid, mem_id, relevance in self.require_qrels("trec_eval").iter_rows():
            out.setdefault(qid, {})[mem_id] = relevance
        return out

    def run_dict(self, k: int | None) -> dict[str, dict[str, float]]:
        """The rankings (cut at ``k``) as ``{qid: {mem_id: -position}}`` for trec_eval."""
        if k not in self._runs:
            out: dict[str, dict[str, float]] = {}
            for qid, mem_id, pos in self.top(k).select("qid", "mem_id", "pos").iter_rows():
                out.setdefault(qid, {})[mem_id] = -float(pos)
            self._runs[k] = out
        return self._runs[k]


def _per_query(population: pl.DataFrame, values: pl.DataFrame, default: float) -> pl.DataFrame:
    """One row per query of ``population``; queries without a value get ``default``."""
    return (
        population.join(values, on="qid", how="left")
        .select("qid", pl.col("value").cast(pl.Float64).fill_null(default))
        .sort("qid")
    )


def _trec_eval(data: EvalData, metric: str, measure: object, *, cut: int | None) -> pl.DataFrame:
    """Per-query values of one ir_measures ``measure`` computed by pytrec_eval.

    ``cut`` truncates the run before evaluation (used for ``MRR@k``, which trec_eval lacks).
    """
    data.require_qrels(metric)
    if data.relevant_qids.is_empty():
        return pl.DataFrame(schema=_VALUE_SCHEMA)
    results = ir_measures.pytrec_eval.iter_calc([measure], data.qrels_dict, data.run_dict(cut))
    values = pl.DataFrame(
        [(m.query_id, float(m.value)) for m in results], schema=_VALUE_SCHEMA, orient="row"
    )
    return _per_query(data.relevant_qids, values, 0.0)


# --------------------------------------------------------------------------- relevance families


@register_metric("R_all", description="1 if all relevant ids are in the top k")
def r_all(data: EvalData, k: int | None) -> pl.DataFrame:
    """All-evidence recall: 1 if every relevant id of the query is in the top k, else 0."""
    qrels = data.require_qrels("R_all")
    found = data.top(k).select("qid", "mem_id", found=pl.lit(True))
    values = (
        qrels.join(found, on=["qid", "mem_id"], how="left")
        .group_by("qid")
        .agg(value=pl.col("found").fill_null(False).all())
    )
    return _per_query(data.relevant_qids, values, 0.0)


@register_metric("R_any", description="1 if any relevant id is in the top k (Success@k)")
def r_any(data: EvalData, k: int | None) -> pl.DataFrame:
    """Success@k (trec_eval ``success_k``)."""
    return _trec_eval(data, "R_any", ir_measures.Success @ k, cut=None)


@register_metric("R_frac", description="|relevant ∩ top k| / |relevant| (R@k)")
def r_frac(data: EvalData, k: int | None) -> pl.DataFrame:
    """Evidence-recall fraction (trec_eval ``recall_k``)."""
    return _trec_eval(data, "R_frac", ir_measures.R @ k, cut=None)


@register_metric("nDCG", cutoff="optional", description="graded nDCG, gain = relevance")
def ndcg(data: EvalData, k: int | None) -> pl.DataFrame:
    """nDCG (Järvelin and Kekäläinen 2002) as trec_eval ``ndcg`` / ``ndcg_cut_k``.

    Gain = relevance, discount ``log2(position + 1)``; the ideal ranking uses every judged id.
    """
    measure = ir_measures.nDCG if k is None else ir_measures.nDCG @ k
    return _trec_eval(data, "nDCG", measure, cut=None)


@register_metric("MRR", cutoff="optional", description="reciprocal rank of the first relevant id")
def mrr(data: EvalData, k: int | None) -> pl.DataFrame:
    """Reciprocal rank (trec_eval ``recip_rank``); with ``@k`` the run is cut at k first."""
    return _trec_eval(data, "MRR", ir_measures.RR, cut=k)


@register_metric("MAP", cutoff="optional", description="average precision")
def map_(data: EvalData, k: int | None) -> pl.DataFrame:
    """Average precision (trec_eval ``map`` / ``map_cut_k``; both divide by all relevant ids)."""
    measure = ir_measures.AP if k is None else ir_measures.AP @ k
    return _trec_eval(data, "MAP", measure, cut=None)


# --------------------------------------------------------------------------- incomplete judgements


def _trec_eval_judged(
    data: EvalData, metric: str, measure: object, population: pl.DataFrame
) -> pl.DataFrame:
    """Per-query values of a trec_eval measure that reads non-relevant judgements too."""
    data.require_judgments(metric)
    if population.is_empty():
        return pl.DataFrame(schema=_VALUE_SCHEMA)
    results = ir_measures.pytrec_eval.iter_calc([measure], data.judgments_dict, data.run_dict(None))
    values = pl.DataFrame(
        [(m.query_id, float(m.value)) for m in results], schema=_VALUE_SCHEMA, orient="row"
    )
    return _per_query(population, values, 0.0)


@register_metric(
    "judged", description="share of the top k that has a judgement", kind="judgment"
)
def judged(data: EvalData, k: int | None) -> pl.DataFrame:
    """Judgement rate: the share of the top k memories that have a judgement of any grade.

    ir_measures ``Judged@k`` (its ``judged`` provider, after OpenNIR): the share is taken over
    ``min(k, length of the ranking)``. One row per query with at least one judgement; such a
    query without rankings scores 0.
    """
    population = data.judged_qids
    if population.is_empty():
        return pl.DataFrame(schema=_VALUE_SCHEMA)
    measure = ir_measures.Judged @ k
    results = ir_measures.judged.iter_calc([measure], data.judgments_dict, data.run_dict(None))
    values = pl.DataFrame(
        [(m.query_id, float(m.value)) for m in results], schema=_VALUE_SCHEMA, orient="row"
    )
    return _per_query(population, values, 0.0)


@register_metric(
    "bpref",
    cutoff="none",
    description="binary preference: judged relevant above judged non-relevant",
)
def bpref(data: EvalData, k: int | None) -> pl.DataFrame:
    """bpref (Buckley and Voorhees, "Retrieval evaluation with incomplete information", SIGIR
    2004) as trec_eval ``bpref``: ``1/R · Σ_r (1 - |n ranked above r| / min(R, N))`` over the
    judged relevant ``r``, with ``n`` among the first ``R`` judged non-relevant; unjudged
    memories are ignored. One row per query with a relevant id."""
    return _trec_eval_judged(data, "bpref", ir_measures.Bpref, data.relevant_qids)


@register_metric(
    "cnDCG", cutoff="optional", description="nDCG on the condensed list (unjudged removed)"
)
def cndcg(data: EvalData, k: int | None) -> pl.DataFrame:
    """Condensed-list nDCG, Sakai's nDCG' ("Alternatives to bpref", SIGIR 2007).

    Unjudged memories are removed from the ranking before scoring, then the cutoff applies
    (trec_eval ``-J``, ir_measures ``nDCG(judged_only=True)``). One row per query with a
    relevant id.
    """
    base = ir_measures.nDCG(judged_only=True)
    measure = base if k is None else base @ k
    return _trec_eval_judged(data, "cnDCG", measure, data.relevant_qids)


@register_metric(
    "cMAP", cutoff="optional", description="average precision on the condensed list"
)
def cmap(data: EvalData, k: int | None) -> pl.DataFrame:
    """Condensed-list average precision, Sakai's AP' (trec_eval ``-J``, ir_measures
    ``AP(judged_only=True)``): unjudged memories are removed before scoring."""
    base = ir_measures.AP(judged_only=True)
    measure = base if k is None else base @ k
    return _trec_eval_judged(data, "cMAP", measure, data.relevant_qids)


# --------------------------------------------------------------------------- memory families


@register_metric(
    "stale",
    description="1 if a stale id of the query is in the top k",
    higher_is_better=False,
    kind="exposure",
)
def stale(data: EvalData, k: int | None) -> pl.DataFrame:
    """Stale exposure: 1 if any id in the query's ``stale`` list is in the top k."""
    queries = data.require_queries("stale", "stale")
    stale_ids = (
        queries.select("qid", mem_id=pl.col("stale"))
        .explode("mem_id")
        .drop_nulls("mem_id")
        .unique()
    )
    population = stale_ids.select("qid").unique()
    hits = stale_ids.join(data.top(k), on=["qid", "mem_id"], how="semi")
    values = hits.select("qid").unique().with_columns(value=pl.lit(1.0))
    return _per_query(population, values, 0.0)


@register_metric(
    "leak",
    description="1 if a memory of another client is in the top k",
    higher_is_better=False,
    kind="exposure",
)
def leak(data: EvalData, k: int | None) -> pl.DataFrame:
    """Cross-client leak for scoped queries.

    A memory leaks when its ``client_id`` differs from the query's and from the global client;
    a memory whose ``client_id`` is null counts as global.
    """
    queries = data.require_queries("leak", "client_id")
    memories = data.require_memories("leak", "client_id")
    scoped = queries.filter(pl.col("client_id").is_not_null()).select(
        "qid", query_client=pl.col("client_id")
    )
    owners = memories.select(
        "mem_id", owner=pl.col("client_id").fill_null(pl.lit(data.global_client))
    )
    values = (
        data.top(k)
        .select("qid", "mem_id")
        .join(scoped, on="qid", how="inner")
        .join(owners, on="mem_id", how="left")
        .group_by("qid")
        .agg(
            value=(
                (pl.col("owner") != pl.col("query_client"))
                & (pl.col("owner") != pl.lit(data.global_client))
            ).any()
        )
    )
    return _per_query(scoped.select("qid"), values, 0.0)


def _has_duplicate(column: str) -> pl.Expr:
    """True when two non-empty, non-null values of ``column`` are equal."""
    kept = pl.col(column).filter(pl.col(column).is_not_null() & (pl.col(column) != ""))
    return kept.len() > kept.n_unique()


@register_metric(
    "dup",
    description="1 if two memories in the top k share content",
    higher_is_better=False,
    kind="exposure",
)
def dup(data: EvalData, k: int | None) -> pl.DataFrame:
    """Duplicate exposure: two top-k memories share a non-empty ``content_hash`` or ``text``.

    Empty or null hashes and texts never match.
    """
    memories = data.require_memories("dup", "content_hash")
    keys = [c for c in ("content_hash", "text") if c in memories.columns]
    duplicated = pl.lit(False)
    for column in keys:
        duplicated = duplicated | _has_duplicate(column)
    values = (
        data.top(k)
        .select("qid", "mem_id")
        .join(memories.select("mem_id", *keys), on="mem_id", how="left")
        .group_by("qid")
        .agg(value=duplicated)
    )
    return _per_query(data.all_qids, values, 0.0)


@register_metric(
    "tokens", description="tokens of the top k memories", higher_is_better=False, kind="cost"
)
def tokens(data: EvalData, k: int | None) -> pl.DataFrame:
    """Context cost: the sum of ``tokens`` over the top k (rankings column, else memories)."""
    top = data.top(k)
    if "tokens" not in top.columns:
        memories = data.require_memories("tokens", "tokens")
        top = top.join(memories.select("mem_id", "tokens"), on="mem_id", how="left")
    values = top.group_by("qid").agg(value=pl.col("tokens").cast(pl.Float64).fill_null(0).sum())
    return _per_query(data.all_qids, values, 0.0)


@register_metric(
    "scope_violation", description="top-k memories in a namespace the query's agent may not read"
)
def scope_violation(data: EvalData, k: int | None) -> pl.DataFrame:
    """Namespace violations (seed 003 §5) for queries asked by an agent.

    A memory violates when its ``scope`` is neither ``team``, nor ``agent:{the query's agent}``,
    nor ``project:{p}`` for a project ``p`` in the query's ``projects``; a null scope counts as
    ``team``. Queries without an agent (a human reads everything) are not in the population.
    """
    queries = data.require_queries("scope_violation", "agent")
    memories = data.require_memories("scope_violation", "scope")
    asked = queries.filter(pl.col("agent").is_not_null())
    if "projects" in asked.columns:
        projects = asked.select("qid", "agent", pl.col("projects").cast(pl.List(pl.String)))
    else:
        projects = asked.select("qid", "agent", projects=pl.lit([], dtype=pl.List(pl.String)))
    readable = projects.select(
        "qid",
        allowed=pl.concat_list(
            pl.lit(["team"], dtype=pl.List(pl.String)),
            pl.concat_list(pl.lit("agent:") + pl.col("agent")),
            pl.col("projects").list.eval(pl.lit("project:") + pl.element()),
        ),
    )
    scopes = memories.select("mem_id", scope=pl.col("scope").cast(pl.String).fill_null("team"))
    values = (
        data.top(k)
        .select("qid", "mem_id")
        .join(readable, on="qid", how="inner")
        .join(scopes, on="mem_id", how="left")
        .with_columns(scope=pl.col("scope").fill_null("team"))
        .group_by("qid")
        .agg(value=(~pl.col("allowed").list.contains(pl.col("scope"))).sum().cast(pl.Float64))
    )
    return _per_query(asked.select("qid"), values, 0.0)
@register_metric("conflict", description="1 if both sides of a contradiction are in the top k")
def conflict(data: EvalData, k: int | None) -> pl.DataFrame:
    """Unresolved-contradiction exposure: some top-k memory's ``contradicts`` list (memories
    column, store ids) names another top-k memory. One row per known query."""
    memories = data.require_memories("conflict", "contradicts")
    top = data.top(k).select("qid", "mem_id")
    pairs = (
        memories.select("mem_id", other=pl.col("contradicts"))
        .explode("other")
        .drop_nulls("other")
    )
    hits = top.join(pairs, on="mem_id", how="inner").join(
        top.rename({"mem_id": "other"}), on=["qid", "other"], how="semi"
    )
    values = hits.select("qid").unique().with_columns(value=pl.lit(1.0))
    return _per_query(data.all_qids, values, 0.0)


@register_metric("archived", description="1 if a cold-tier memory is in the top k")
def archived(data: EvalData, k: int | None) -> pl.DataFrame:
    """Cold-tier exposure: a memory in the query's ``archived`` list (queries column: what was
    archived when it ran) is in the top k. One row per query of the queries frame."""
    queries = data.require_queries("archived", "archived")
    cold = (
        queries.select("qid", mem_id=pl.col("archived"))
        .explode("mem_id")
        .drop_nulls("mem_id")
        .unique()
    )
    hits = cold.join(data.top(k), on=["qid", "mem_id"], how="semi")
    values = hits.select("qid").unique().with_columns(value=pl.lit(1.0))
    return _per_query(queries.select("qid").unique(), values, 0.0)


# --------------------------------------------------------------------------- public API


def evaluate(
    rankings: pl.DataFrame,
    qrels: pl.DataFrame | None,
    metrics: Sequence[str],
    *,
    queries: pl.DataFrame | None = None,
    memories: pl.DataFrame | None = None,
    global_client: str = GLOBAL_CLIENT,
) -> pl.DataFrame:
    """Evaluate one pipeline's rankings per query.

    Args:
        rankings: ``qid`` (str), ``rank`` (int, 1-based, unique per query), ``mem_id`` (str,
            unique per query), optionally ``score`` (ignored) and ``tokens``. Only the order of
            ``rank`` matters: the top k are the first k rows of a query in rank order.
        qrels: ``qid``, ``mem_id``, ``relevance`` (int; rows with 0 are not relevant), or
            ``None`` when only memory metrics are asked for.
        metrics: Metric names, e.g. ``["R_all@10", "nDCG@10", "MRR"]``; repeats are ignored.
        queries: ``qid`` and, as needed, ``client_id`` (null = unscoped), ``stale`` (list[str]).
        memories: ``mem_id`` and, as needed, ``client_id``, ``content_hash``, ``text``,
            ``tokens``.
        global_client: Client id whose memories are visible to every client (``leak@k``).

    Returns:
        Long frame ``qid`` (String), ``metric`` (String), ``value`` (Float64) sorted by
        ``metric`` then ``qid``.

    Raises:
        TypeError: On a wrong frame or column type.
        ValueError: On an unknown metric name, a missing column or input needed by a metric,
            a null, a rank < 1, a repeated rank or memory within a query, or a ranked memory
            absent from ``memories`` (when a memory metric needs it).
    """
    if isinstance(metrics, str):
        raise TypeError("metrics must be a sequence of metric names, not a single str")
    specs = list(dict.fromkeys(parse_metric(name) for name in metrics))
    judgments = None if qrels is None else _check_judgments(qrels)
    data = EvalData(
        rankings=_check_rankings(rankings),
        qrels=None if judgments is None else judgments.filter(pl.col("relevance") >= 1),
        queries=None if queries is None else _check_queries(queries),
        memories=None if memories is None else _check_memories(memories),
        global_client=global_client,
        judgments=judgments,
    )
    frames = [pl.DataFrame(schema=_RESULT_SCHEMA)]
    for spec in specs:
        values = _FAMILIES[spec.family].function(data, spec.k)
        frames.append(values.select("qid", metric=pl.lit(spec.name), value="value"))
    return (
        pl.concat(frames, how="vertical_relaxed")
        .select(pl.col("qid").cast(pl.String), pl.col("metric").cast(pl.String), "value")
        .sort("metric", "qid")
    )


def aggregate(per_query: pl.DataFrame) -> dict[str, float]:
    """Mean value per metric of a per-query frame (``metric``, ``value``), sorted by metric.

    Raises:
        ValueError: If a column is missing or a value is null.
    """
    _require(per_query, "per_query", {"metric": _STR, "value": _NUM})
    _no_nulls(per_query, "per_query", ["metric", "value"])
    means = per_query.group_by("metric").agg(pl.col("value").cast(pl.Float64).mean()).sort("metric")
    return dict(means.iter_rows())


def main_metric_of(metrics: Sequence[str]) -> str:
    """The headline metric: the first ``R_all@k`` given, else the first metric."""
    return next((m for m in metrics if m.startswith("R_all")), metrics[0])
