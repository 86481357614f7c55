"""The metric contract: the family registry, metric names, input checks and :func:`evaluate`.

A metric *family* is one function registered with :func:`register_metric` in its own module of
:mod:`memlab.eval.metrics`; a metric name is the family followed by an optional cutoff ``@k``
and is parsed by :func:`parse_metric`. A name no memlab family parses but that
``ir_measures.parse_measure`` accepts (``P@5``, ``AP``, ``RBP(p=0.8)``) is computed by
ir_measures (:mod:`memlab.eval.metrics.ir_measures_names`).
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
from memlab.registry import Registry

Cutoff = Literal["required", "optional", "none"]
Kind = Literal["relevance", "judgment", "exposure", "cost"]
KINDS: tuple[str, ...] = ("relevance", "judgment", "exposure", "cost")
"""What a family measures: ``relevance`` (needs qrels), ``judgment`` (how much of a ranking is
judged), ``exposure`` (memories that should not be shown: stale, leaked, duplicated), ``cost``
(context size)."""

_NAME_PATTERN = re.compile(r"^(?P<family>[A-Za-z][A-Za-z_]*)(?:@(?P<k>[0-9]+))?$")
MAX_CUTOFF = 100_000
"""The largest cutoff ``@k`` a metric name may carry (memlab's families and ir_measures')."""
VALUE_SCHEMA = {"qid": pl.String, "value": pl.Float64}
"""The schema of a metric function's result."""
_RESULT_SCHEMA = {"qid": pl.String, "metric": pl.String, "value": pl.Float64}


class MetricFunction(Protocol):
    """Computes one metric family: one row ``qid, value`` per query of its population."""

    def __call__(self, data: EvalData, spec: MetricSpec) -> pl.DataFrame:
        """Return a frame with columns ``qid`` (String) and ``value`` (Float64)."""
        ...


class MetricResolver(Protocol):
    """Turns a name no registered family parses into a :class:`MetricSpec`, or ``None``."""

    def __call__(self, name: str) -> MetricSpec | None:
        """The spec of ``name``; ``None`` when the resolver does not know it."""
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
        aliases: Other family names accepted for this one (``R_any`` for ``Success``).
        trec: For a family computed by trec_eval, ``spec -> (ir_measures measure, cut)``: what
            :func:`trec_eval` is asked for, declared so that :func:`evaluate` hands trec_eval
            every such measure of a call at once (one pass over the run per cut).
    """

    name: str
    function: MetricFunction
    cutoff: Cutoff
    description: str
    higher_is_better: bool = True
    kind: Kind = "relevance"
    aliases: tuple[str, ...] = ()
    trec: Callable[[MetricSpec], tuple[object, int | None]] | None = None

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
        measure: The canonical ir_measures name (``"P@5"``) of a metric memlab passes through
            to ir_measures; ``None`` for memlab's own families.
        higher_is_better: The direction of this metric (the family's, or for a passed-through
            measure the one :mod:`memlab.eval.metrics.ir_measures_names` assigns).
    """

    family: str
    k: int | None = None
    measure: str | None = None
    higher_is_better: bool = field(default=True, compare=False)

    @property
    def name(self) -> str:
        """Canonical metric name, e.g. ``"nDCG@10"``, ``"MRR"`` or ``"P@5"``."""
        if self.measure is not None:
            return self.measure
        return self.family if self.k is None else f"{self.family}@{self.k}"


METRICS: Registry[MetricFamily] = Registry("metric family")
"""Every metric family, by name, in registration (module) order."""
METRIC_ALIASES: Registry[str] = Registry("metric alias")
"""Accepted old family names → the family they name (``R_any`` → ``Success``)."""
METRIC_RESOLVERS: Registry[MetricResolver] = Registry("metric resolver")
"""Fallbacks tried, in order, for a name no family parses (ir_measures names)."""


def register_metric(
    name: str,
    *,
    cutoff: Cutoff = "required",
    description: str = "",
    higher_is_better: bool = True,
    kind: Kind = "relevance",
    aliases: Sequence[str] = (),
    trec: Callable[[MetricSpec], tuple[object, int | None]] | None = None,
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
        aliases: Other names accepted for the family wherever a user names a metric; results
            carry the canonical ``name``.
        trec: ``spec -> (measure, cut)`` for a family whose function returns
            ``trec_eval(data, name, measure, cut=cut)`` (see :attr:`MetricFamily.trec`).

    Raises:
        ValueError: If the name or an alias is malformed or already registered, or ``cutoff``
            or ``kind`` is unknown.
        TypeError: If ``higher_is_better`` is not a bool.
    """
    for label, value in (("name", name), *(("aliases", a) for a in aliases)):
        if not isinstance(value, str) or not re.fullmatch(r"[A-Za-z][A-Za-z_]*", value):
            raise ValueError(f"register_metric: field {label!r}: malformed family name {value!r}")
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
        taken = [n for n in (name, *aliases) if n in METRICS or n in METRIC_ALIASES]
        if taken:
            raise ValueError(f"register_metric: metric family {taken[0]!r} is already registered")
        METRICS.register(name)(
            MetricFamily(
                name, function, cutoff, description, higher_is_better, kind, tuple(aliases),
                trec,
            )
        )
        for alias in aliases:
            METRIC_ALIASES.register(alias)(name)
        return function

    return decorator


def metric_families() -> tuple[MetricFamily, ...]:
    """All registered families, in registration order."""
    return tuple(METRICS.values())


def metric_family(name: str) -> MetricFamily:
    """The registered family of a metric name (``"tokens@10"`` → the ``tokens`` family).

    Raises:
        ValueError: As :func:`parse_metric`.
    """
    return METRICS[parse_metric(name).family]


def higher_is_better(name: str) -> bool:
    """The direction of a metric name; ``True`` for a name that does not parse.

    Per-query frames may carry metrics that are not registered here (computed elsewhere and
    joined in); they are read as higher-is-better, the convention of IR measures.
    """
    try:
        return parse_metric(name).higher_is_better
    except (TypeError, ValueError):
        return True


def canonical_metric(name: str) -> str:
    """The canonical spelling of a metric name (``"R_any@10"`` → ``"Success@10"``).

    Raises:
        ValueError: As :func:`parse_metric`.
    """
    return parse_metric(name).name


def _known() -> str:
    return ", ".join(family.pattern for family in METRICS.values())


def parse_metric(name: str) -> MetricSpec:
    """Parse a metric name such as ``"R_all@10"``, ``"MRR"``, ``"MAP@100"`` or ``"P@5"``.

    A family's alias resolves to the family (``"R_frac@5"`` → ``Recall@5``). A name no family
    parses is handed to the resolvers of :data:`METRIC_RESOLVERS` (ir_measures names).

    Raises:
        TypeError: If ``name`` is not a string.
        ValueError: If the family is unknown (the message lists the known families), or the
            cutoff is missing, forbidden, smaller than 1 or larger than :data:`MAX_CUTOFF`.
    """
    if not isinstance(name, str):
        raise TypeError(f"metric name must be a str, got {type(name).__name__}: {name!r}")
    match = _NAME_PATTERN.match(name.strip())
    family = None
    if match is not None:
        family_name = METRIC_ALIASES.get(match["family"], match["family"])
        family = METRICS.get(family_name)
    if match is None or family is None:
        for resolve in METRIC_RESOLVERS.values():
            spec = resolve(name.strip())
            if spec is not None:
                return spec
        raise ValueError(
            f"unknown metric {name!r}; known families: {_known()}; or a measure name of "
            "ir_measures (P@5, AP, RBP(p=0.8,rel=1), ...)"
        )
    k = None if match["k"] is None else int(match["k"])
    if k is None and family.cutoff == "required":
        raise ValueError(f"metric {name!r} needs a cutoff: write it as {family.pattern}")
    if k is not None and family.cutoff == "none":
        raise ValueError(f"metric {name!r} takes no cutoff: write it as {family.pattern}")
    if k is not None and not 1 <= k <= MAX_CUTOFF:
        raise ValueError(f"metric {name!r}: cutoff k must be >= 1 and <= {MAX_CUTOFF}, got {k}")
    return MetricSpec(family.name, k, higher_is_better=family.higher_is_better)


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
    trec_plan: dict[int | None, list[object]] = field(
        default_factory=dict, repr=False, compare=False
    )
    """The trec_eval measures the call will ask for, per cut (filled by :func:`evaluate`)."""
    _trec: dict[tuple[str, int | None], pl.DataFrame] = field(
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
            # rankings are sorted by qid: each query's ids and scores are one run of the
            # columns, zipped into its dict (a Python step per query, not per ranked row: 0.12 s
            # for LoCoMo's 198,600 rows before)
            top = self.top(k)
            ids = top["mem_id"].to_list()
            scores = (-top["pos"].cast(pl.Float64)).to_list()
            runs = top["qid"].rle()
            out: dict[str, dict[str, float]] = {}
            start = 0
            for qid, n in zip(runs.struct.field("value").to_list(),
                              runs.struct.field("len").to_list(), strict=True):
                out.setdefault(qid, {}).update(
                    zip(ids[start : start + n], scores[start : start + n], strict=True)
                )
                start += n
            self._runs[k] = out
        return self._runs[k]


def per_query(population: pl.DataFrame, values: pl.DataFrame, default: float) -> pl.DataFrame:
    """One row per query of ``population``; queries without a value get ``default``."""
    return (
        population.join(values, on="qid", how="left")
        .select("qid", pl.col("value").cast(pl.Float64).fill_null(default))
        .sort("qid")
    )


def measure_values(
    results: object, population: pl.DataFrame, default: float = 0.0
) -> pl.DataFrame:
    """Per-query values of ir_measures results (``Metric`` tuples) over ``population``."""
    values = pl.DataFrame(
        [(m.query_id, float(m.value)) for m in results],  # type: ignore[attr-defined]
        schema=VALUE_SCHEMA,
        orient="row",
    )
    return per_query(population, values, default)


def trec_eval(data: EvalData, metric: str, measure: object, *, cut: int | None) -> pl.DataFrame:
    """Per-query values of one ir_measures ``measure`` computed by pytrec_eval on the relevant
    judgements, over the queries with a relevant id (0 for a query without a ranking).

    ``cut`` truncates the run before evaluation (used for ``MRR@k``, which trec_eval lacks).
    """
    data.require_qrels(metric)
    if data.relevant_qids.is_empty():
        return pl.DataFrame(schema=VALUE_SCHEMA)
    key = (str(measure), cut)
    if key not in data._trec:
        # Every measure planned for this cut in one trec_eval pass.
        batch = list({str(m): m for m in [*data.trec_plan.get(cut, ()), measure]}.values())
        values: dict[str, list[tuple[str, float]]] = {str(m): [] for m in batch}
        results = ir_measures.pytrec_eval.iter_calc(batch, data.qrels_dict, data.run_dict(cut))
        for r in results:
            values[str(r.measure)].append((r.query_id, float(r.value)))
        for name, pairs in values.items():
            frame = pl.DataFrame(pairs, schema=VALUE_SCHEMA, orient="row")
            data._trec[(name, cut)] = per_query(data.relevant_qids, frame, 0.0)
    return data._trec[key]


def trec_eval_judged(
    data: EvalData, metric: str, measure: object, population: pl.DataFrame
) -> pl.DataFrame:
    """Per-query values of a trec_eval measure that reads non-relevant judgements too."""
    data.require_judgments(metric)
    if population.is_empty():
        return pl.DataFrame(schema=VALUE_SCHEMA)
    results = ir_measures.pytrec_eval.iter_calc([measure], data.judgments_dict, data.run_dict(None))
    return measure_values(results, population)


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
        metrics: Metric names, e.g. ``["R_all@10", "nDCG@10", "MRR", "P@5"]``; aliases
            resolve to their family and results carry the canonical name; repeats are
            ignored.
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
    for spec in specs:
        trec = METRICS[spec.family].trec
        if trec is not None:
            measure, cut = trec(spec)
            data.trec_plan.setdefault(cut, []).append(measure)
    frames = [pl.DataFrame(schema=_RESULT_SCHEMA)]
    for spec in specs:
        values = METRICS[spec.family].function(data, spec)
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
