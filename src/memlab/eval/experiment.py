"""Experiments: named pipelines side by side on one dataset, with paired statistics.

``run_experiment`` replays the dataset through every pipeline, computes per-query metrics,
compares each pipeline with the baseline (paired t, Wilcoxon and permutation tests, Holm
correction by default), breaks results down by query tag, and writes the output contract:

``DIR/manifest.json``
    dataset name and SHA-256 of its files, resolved pipeline configurations, seed, package
    versions, git commit, times.
``DIR/metrics.json``
    ``{pipeline: {metric: value}}`` — deterministic: the same dataset, configurations and seed
    give byte-identical files.
``DIR/per_query.parquet``
    ``pipeline, qid, metric, value``.
``DIR/rankings.parquet``
    ``pipeline, qid, rank, mem_id, score``.
``DIR/comparison.parquet``, ``DIR/comparison_by_tag.parquet`` (the paired tests of the headline
metric within each query tag), ``DIR/per_tag.parquet``, ``DIR/timings.parquet``
    significance table, per-tag means, per-stage latencies.
``DIR/qrels.parquet``
    ``qid, mem_id, relevance``: the judgements the relevance metrics used (store ids, a relevant
    memory that a consolidation merged before its query's moment as the merged fact, evaluated
    queries only, excluded tags left out); led by a ``pipeline`` column when the pipelines'
    replays merged differently.
``DIR/queries.parquet``
    ``qid, text, client_id, tags``: the evaluated queries.
``DIR/report.md`` with charts as PNG and SVG beside it.

:meth:`ExperimentResult.load` is the one reader of this contract (the report, the runs app,
``memlab export`` and ``memlab compare`` read runs through it). Every way a run's file can be
unreadable (not UTF-8, not JSON, nested too deeply for the parser, an integer of more than
4300 digits, a parquet file polars cannot decode, a field of the wrong type) is one
``ValueError`` naming the file and the field.

The directory appears whole or not at all: everything is written into a temporary sibling that
is renamed into place at the end. It carries the marker ``.memlab-output.json``; an existing
``DIR`` is replaced only when it is such a result (files a user added are kept), and a
non-empty directory memlab did not write is refused before any work (:mod:`memlab.io`), and
so is a result of another kind memlab wrote (a dataset, a sweep, a tune, an export:
:func:`check_experiment_out`).
"""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from importlib import metadata
from pathlib import Path
from typing import Any

import polars as pl

from memlab.datasets.format import Dataset, Query, load_dataset
from memlab.eval import DEFAULT_PIPELINES as DEFAULT_PIPELINES
from memlab.eval.executor import (
    Executor,
    JoblibExecutor,
    Meanwhile,
    SerialExecutor,
    make_executor,
)
from memlab.eval.metrics import aggregate as aggregate_metrics
from memlab.eval.metrics import evaluate, main_metric_of, parse_metric
from memlab.eval.protocol import EvalProtocol
from memlab.eval.replay import (
    ReplayConfig,
    Replayer,
    ReplayResult,
    merge_shards,
    qrels_frame,
    queries_are_read_only,
    queries_frame,
    query_shards,
)
from memlab.eval.stats import (
    available_corrections,
    available_tests,
    compare,
    compare_by_tag,
    per_tag,
)
from memlab.io import (
    OutputDirError,
    atomic_directory,
    check_output_dir,
    output_kind,
    read_json,
    read_parquet,
)
from memlab.pipeline import Pipeline, load_pipeline
from memlab.progress import Progress, track
from memlab.tokens import count_tokens

DEFAULT_METRICS: tuple[str, ...] = (
    "R_all@10",
    "Success@10",
    "Recall@10",
    "nDCG@10",
    "MRR",
    "MAP",
    "stale@10",
    "leak@10",
    "dup@10",
    "tokens@10",
)
JUDGED_METRICS: tuple[str, ...] = ("judged@10", "bpref", "cnDCG@10")
"""Added to the default metrics when the dataset has ``judgments.jsonl`` (pooled judging)."""
JUDGED_WARNING = 0.8
"""The report warns when a pipeline's judged@10 is below this, on a judged dataset."""
RELEVANCE_FAMILIES = ("R_all", "Success", "Recall", "nDCG", "MRR", "MAP")
PACKAGES = (
    "memlab",
    "numpy",
    "polars",
    "scipy",
    "scikit-learn",
    "chromadb",
    "rank-bm25",
    "igraph",
    "ir-measures",
    "sentence-transformers",
    "torch",
    "altair",
)


RUN_TABLES: dict[str, str] = {
    "per_query": "per_query.parquet",
    "rankings": "rankings.parquet",
    "comparison": "comparison.parquet",
    "per_tag": "per_tag.parquet",
    "tag_comparison": "comparison_by_tag.parquet",
    "timings": "timings.parquet",
    "qrels": "qrels.parquet",
    "queries": "queries.parquet",
}
"""The parquet tables of a run directory: :class:`ExperimentResult` attribute → file name."""


@dataclass
class ExperimentResult:
    """Everything an experiment computed (the same tables it writes).

    Attributes:
        missing: Files of the output contract that :meth:`load` did not find (their tables are
            empty); always empty for a result computed in this process.
    """

    metrics: dict[str, dict[str, float]]
    per_query: pl.DataFrame
    rankings: pl.DataFrame
    comparison: pl.DataFrame
    per_tag: pl.DataFrame
    tag_comparison: pl.DataFrame
    timings: pl.DataFrame
    manifest: dict[str, Any]
    replays: dict[str, ReplayResult] = field(default_factory=dict)
    out: Path | None = None
    qrels: pl.DataFrame = field(default_factory=pl.DataFrame)
    queries: pl.DataFrame = field(default_factory=pl.DataFrame)
    missing: list[str] = field(default_factory=list)

    @property
    def pipelines(self) -> list[str]:
        """Pipeline names in ``metrics.json`` order."""
        return list(self.metrics)

    @property
    def baseline(self) -> str | None:
        """The baseline pipeline named by the manifest (``None`` when unknown)."""
        base = self.manifest.get("baseline")
        return base if isinstance(base, str) else None

    @classmethod
    def load(cls, path: str | Path) -> ExperimentResult:
        """Read a run directory written by :func:`write_experiment`.

        ``metrics.json`` is required; every other file may be absent (a trimmed copy such as
        ``reports/baseline`` keeps only some): its table is then empty and its file name is
        listed in :attr:`missing`, so a caller can say what is missing instead of failing.

        Raises:
            ValueError: If ``path`` is not a directory holding ``metrics.json``, or a JSON or
                parquet file of the run cannot be read (not UTF-8, not JSON, nested too deeply
                to read, a parquet file polars cannot decode) or holds a field of the wrong
                type (:func:`check_metric_values`, :func:`check_manifest_fields`); the message
                names the file and the field.
        """
        p = Path(path)
        metrics_file = p / "metrics.json"
        if not metrics_file.is_file():
            raise ValueError(f"{p}: not a memlab run (no metrics.json)")
        metrics = read_json(metrics_file)
        check_metric_values(metrics, metrics_file)
        missing: list[str] = []
        manifest: dict[str, Any] = {}
        if (p / "manifest.json").is_file():
            loaded = read_json(p / "manifest.json")
            if not isinstance(loaded, dict):
                raise ValueError(f"{p / 'manifest.json'}: expected a JSON object")
            check_manifest_fields(loaded, p / "manifest.json")
            manifest = loaded
        else:
            missing.append("manifest.json")
        tables: dict[str, pl.DataFrame] = {}
        for attr, name in RUN_TABLES.items():
            f = p / name
            if not f.is_file():
                missing.append(name)
                tables[attr] = pl.DataFrame()
                continue
            tables[attr] = read_parquet(f)
        return cls(metrics=metrics, manifest=manifest, out=p, missing=missing, **tables)


MANIFEST_FIELDS: dict[str, tuple[tuple[type, ...], str]] = {
    "dataset": ((dict,), "an object"),
    "pipelines": ((dict,), "an object"),
    "metrics": ((list,), "a list"),
    "tests": ((list,), "a list"),
    "alpha": ((int, float), "a number"),
    "correction": ((str, type(None)), "a string"),
    "baseline": ((str, type(None)), "a string"),
    "protocol": ((dict,), "an object"),
    "held_out_split": ((dict, type(None)), "an object or null"),
}
"""Fields of ``manifest.json`` that readers of a run use, with the JSON types memlab has written
there (``held_out_split`` was ``null`` for a run without a held-out split)."""


def json_type_name(value: Any) -> str:
    """How a message names the JSON type of ``value`` (``string``, ``object``, ``null`` …)."""
    if value is None:
        return "null"
    names = {bool: "boolean", int: "integer", float: "number", str: "string", list: "array"}
    return {**names, dict: "object"}.get(type(value), type(value).__name__)


def check_manifest_fields(manifest: Mapping[str, Any], file: Path) -> None:
    """Refuse a run manifest whose fields (:data:`MANIFEST_FIELDS`) have the wrong type.

    Raises:
        ValueError: ``FILE: field 'NAME': must be …, got …``.
    """
    for name, (types, what) in MANIFEST_FIELDS.items():
        if name not in manifest:
            continue
        value = manifest[name]
        if isinstance(value, bool) or not isinstance(value, types):
            raise ValueError(f"{file}: field {name!r}: must be {what}, got {json_type_name(value)}")
    for name in ("metrics", "tests"):
        for item in manifest.get(name) or []:
            if not isinstance(item, str):
                raise ValueError(
                    f"{file}: field {name!r}: must be a list of strings, got an item of type "
                    f"{json_type_name(item)}"
                )


def check_metric_values(metrics: Any, file: Path) -> None:
    """Refuse a ``metrics.json`` that is not ``{pipeline: {metric: number}}``.

    Raises:
        ValueError: ``FILE: expected {pipeline: {metric: value}}``, ``FILE: field
            'PIPELINE.METRIC': must be a number, got …``, or a name holding a lone surrogate.
    """
    if not isinstance(metrics, dict) or not all(isinstance(v, dict) for v in metrics.values()):
        raise ValueError(f"{file}: expected {{pipeline: {{metric: value}}}}")
    for pipeline, values in metrics.items():
        for name in (pipeline, *values):
            bad = next((ch for ch in name if "\ud800" <= ch <= "\udfff"), None)
            if bad is not None:  # JSON can spell one ("\ud800"); no file or text can hold it
                raise ValueError(
                    f"{file}: name {name!r} holds U+{ord(bad):04X}, a lone surrogate, which is "
                    "not text"
                )
        for metric, value in values.items():
            if isinstance(value, bool) or not isinstance(value, (int, float)):
                raise ValueError(
                    f"{file}: field '{pipeline}.{metric}': must be a number, got "
                    f"{json_type_name(value)}"
                )


SPLIT_BY = ("query", "client")


def unscored_split(command: str, metric: str, n_train: int, split_by: str, seed: int,
                   choices: str) -> str:
    """The error of a ``command`` (sweep, tune) whose selection ``metric`` scores none of the
    ``n_train`` train queries of a split: nothing can be chosen on it."""
    return (
        f"{command}: {metric} scores none of the {n_train} train queries of the split by "
        f"{split_by} with seed {seed} (none is in its population: relevance metrics need a "
        f"relevant memory, stale@k a 'stale' list); choose another {choices}"
    )


def split_queries(
    queries: Sequence[Query], *, test_fraction: float = 0.5, seed: int = 0, by: str = "query"
) -> tuple[list[Query], list[Query]]:
    """A seeded train/test split of queries (by a hash of ``seed`` and a key).

    ``by="query"`` hashes each ``qid``; ``by="client"`` hashes each query's ``client_id`` so
    that all queries of one client (one LoCoMo conversation) fall on the same side, and
    constants chosen on the train side never saw the memories of a test client. Stable: a
    query's side never depends on the other queries in the list.
    """
    if not 0.0 < test_fraction < 1.0:
        raise ValueError(f"test_fraction must lie in (0, 1), got {test_fraction}")
    if by not in SPLIT_BY:
        raise ValueError(f"split by must be one of {', '.join(SPLIT_BY)}, got {by!r}")
    train, test = [], []
    for q in queries:
        key = q.qid if by == "query" else str(q.client_id)
        h = hashlib.sha256(f"{seed}:{key}".encode()).digest()
        u = int.from_bytes(h[:8], "big") / 2**64
        (test if u < test_fraction else train).append(q)
    return train, test


def package_versions() -> dict[str, str]:
    """Installed versions of the packages that shape results."""
    out = {}
    for name in PACKAGES:
        try:
            out[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            out[name] = "not installed"
    return out


def git_commit() -> str | None:
    """The checkout's commit (``None`` outside a git checkout)."""
    try:
        res = subprocess.run(
            ["git", "rev-parse", "HEAD"],
            capture_output=True,
            text=True,
            timeout=5,
            cwd=Path(__file__).resolve().parent,
        )
    except (OSError, subprocess.SubprocessError):
        return None
    return res.stdout.strip() or None if res.returncode == 0 else None


def check_metrics(metrics: Sequence[str]) -> list[str]:
    """Parse every metric name up front (``ValueError`` naming the bad one).

    Returns the canonical names, in order, without repeats: an alias (``R_any@10``) becomes its
    family's name (``Success@10``), an ir_measures name its canonical spelling.
    """
    return list(dict.fromkeys(parse_metric(m).name for m in metrics))


def learnable_stages(pipeline: Pipeline) -> list[tuple[str, Any]]:
    """Stages that must be fitted on training queries before use."""
    return [(n, s) for n, s in pipeline.named_stages() if getattr(s, "requires_fit", False)]


def stage_imports(pipelines: Sequence[Pipeline]) -> tuple[str, ...]:
    """What the pipelines' stages import on first use (``Stage.imports``), each once, in
    order: a worker that will run them can import these ahead."""
    out: dict[str, None] = {}
    for pipeline in pipelines:
        for _, stage in pipeline.named_stages():
            out.update(dict.fromkeys(getattr(stage, "imports", ())))
    return tuple(out)


def warm_workers(
    executor: Executor, pipelines: Sequence[Pipeline], tasks: int, *, charts: bool = False
) -> None:
    """Start ``executor``'s worker processes for ``tasks`` tasks now, if it has them
    (:meth:`~memlab.eval.executor.JoblibExecutor.warm`), importing memlab and what the
    pipelines' stages import (:func:`stage_imports`), and, if the run will draw ``charts``,
    the chart library (:data:`~memlab.eval.executor.CHART_MODULES`): they get ready while this
    process prepares the data. Called once the inputs are checked, so that a refused run never
    waits for them."""
    if hasattr(executor, "warm"):
        from memlab.eval.executor import CHART_MODULES, WORKER_MODULES

        extra = CHART_MODULES if charts else ()
        executor.warm((*WORKER_MODULES, *stage_imports(pipelines), *extra), tasks=tasks)


def tail_loads(*, tests: bool, charts: bool) -> Meanwhile | None:
    """What a run loads for its work after the replays, to be done while it waits for its
    workers (the ``meanwhile`` of :func:`~memlab.eval.sweep.run_tasks`): ``tests``, the paired
    tests' scipy (:func:`~memlab.eval.stats.load_tests`); ``charts``, a warm chart renderer
    (:func:`~memlab.eval.report.warm_renderer`), the report's charts then being rendered here
    rather than on a worker that would start the renderer first. ``None`` if neither."""
    if not (tests or charts):
        return None

    def load() -> None:
        if tests:
            from memlab.eval.stats import load_tests

            load_tests()
        if charts:
            from memlab.eval.report import warm_renderer

            warm_renderer()

    return load


def tail_work(executor: Executor, *, tests: bool, charts: bool) -> dict[str, Meanwhile]:
    """The ``meanwhile`` and ``idle`` (:meth:`~memlab.eval.executor.Executor.map`) of a run on
    ``executor`` whose work after the tasks is ``tests`` and ``charts`` (see
    :func:`tail_loads`), as keyword arguments of :func:`~memlab.eval.sweep.run_tasks`.

    An executor that can :meth:`~memlab.eval.executor.JoblibExecutor.submit` the charts to a
    worker has each worker warm its renderer once its last task ends (``idle``), and the
    charts go to a warm worker (:func:`charts_on_worker`), while this process loads only its
    tests (then scores and tests): on two cores, a worker that ends first warms up while this
    process ends its last task, and the rest of the warm-up runs beside this process's
    scoring instead of before it. Otherwise this process warms its own renderer."""
    from memlab.eval.report import warm_renderer

    on_worker = charts and hasattr(executor, "submit")
    work = {
        "meanwhile": tail_loads(tests=tests, charts=charts and not on_worker),
        "idle": warm_renderer if on_worker else None,
    }
    return {k: v for k, v in work.items() if v is not None}


def charts_on_worker(executor: Executor) -> bool:
    """Whether a run's charts go to an idle worker of ``executor`` while this process runs its
    tests: when it has workers, unless this process warmed its renderer while it waited
    (:func:`tail_loads`)."""
    from memlab.eval.report import renderer_is_warm

    return hasattr(executor, "submit") and not renderer_is_warm()


def replay_cost(pipeline: Pipeline) -> int:
    """A rough cost of evaluating ``pipeline``: its stages, times the replays it needs (one,
    plus one per learned step, whose prefix is replayed to fit it). Only orders work."""
    stages = sum(1 for _ in pipeline.named_stages())
    return stages * (1 + len(learnable_stages(pipeline)))


class _Collector:
    """Keeps each replayed query's context and candidates (an ``on_query`` callback)."""

    def __init__(self) -> None:
        self.contexts: list[Any] = []
        self.candidates: dict[str, pl.DataFrame] = {}

    def __call__(self, q: Query, ctx: Any, frame: pl.DataFrame) -> None:
        self.contexts.append(ctx)
        self.candidates[q.qid] = frame


def fit_learned_stages(replayer: Replayer, pipeline: Pipeline, train: Sequence[Query]) -> None:
    """Fit each learnable top-level step on the training queries, in pipeline order.

    The steps before it are replayed on the training queries; their candidates (what the stage
    will see at query time) and the replay's query contexts are handed to ``fit``.
    """
    labels: dict[str, list[str]] | None = None
    for i, (name, stage) in enumerate(pipeline.steps):
        if not getattr(stage, "requires_fit", False):
            continue
        prefix = Pipeline(steps=pipeline.steps[:i], name=f"{pipeline.name}[:{name}]")
        collect = _Collector()
        result = replayer.run(prefix, queries=train, on_query=collect)
        if labels is None:  # read once (judgments.jsonl) for every learned step
            labels = training_labels(replayer)
        relevant = {
            q.qid: {result.resolve(m, q.seen_at) for m in labels[q.qid]}
            for q in train if labels.get(q.qid)
        }
        stage.fit(
            result.store,
            queries=collect.contexts,
            relevant=relevant,
            embedder=replayer.embedder,
            candidates=collect.candidates,
        )


def training_labels(replayer: Replayer) -> dict[str, list[str]]:
    """Per query, the dataset ids of the memories a learned stage is fitted to find: those the
    run scores as relevant (:func:`dataset_qrels` of the replayer's ``qrels_source`` and
    ``aggregate``: the inline ``relevant`` grades, overridden by the judgments; grade > 0),
    so that a dataset judged in ``judgments.jsonl`` trains what it evaluates."""
    frame = dataset_qrels(
        replayer.dataset, {}, qrels_source=replayer.qrels_source, aggregate=replayer.aggregate
    )
    out: dict[str, list[str]] = {}
    for qid, mem_id, grade in frame.iter_rows():
        if grade > 0:
            out.setdefault(qid, []).append(mem_id)
    return out


def cross_fit_learned_stages(
    replayer: Replayer, pipeline: Pipeline, folds: dict[str, int]
) -> Pipeline:
    """A copy of ``pipeline`` whose learned top-level steps are cross-fitted over ``folds``.

    Each learned step becomes a :class:`~memlab.eval.protocol.CrossFitted` (one fitted copy
    per fold); the steps before it are replayed on every query of the dataset once, and each
    copy is fitted on the candidates and labels of the queries outside its fold. ``pipeline``
    itself is left unfitted (its configuration is what the manifest records).
    """
    from memlab.eval.protocol import CrossFitted

    steps = [
        (n, CrossFitted(s, folds) if getattr(s, "requires_fit", False) else s)
        for n, s in pipeline.steps
    ]
    out = Pipeline(steps=steps, name=pipeline.name, description=pipeline.description)
    if any(isinstance(s, CrossFitted) for _, s in steps):
        fit_learned_stages(replayer, out, replayer.dataset.queries)
    return out


def memories_frame(replay: ReplayResult) -> pl.DataFrame:
    """``mem_id, client_id, scope, content_hash, text, tokens, contradicts`` of a replay's
    store.

    ``contradicts`` lists the store ids a memory contradicts by the dataset's labels (a store
    line's ``metadata.contradicts``: a dataset id or a list of them), in both directions.
    """
    store = replay.store
    if store is None:
        raise ValueError("the replay result carries no store")
    recs = store.records_frame().select(
        pl.col("id").alias("mem_id"), "client_id", "scope", "content_hash", "text"
    )
    pairs: dict[str, set[str]] = {}
    for rec in (store.record_at(i) for i in range(len(store))):
        labelled = rec.metadata.get("contradicts")
        if labelled is None:
            continue
        for other in [labelled] if isinstance(labelled, str) else list(labelled):
            sid = replay.id_map.get(str(other), str(other))
            if sid != rec.id:
                pairs.setdefault(rec.id, set()).add(sid)
                pairs.setdefault(sid, set()).add(rec.id)
    return recs.with_columns(
        pl.col("text").map_elements(count_tokens, return_dtype=pl.Int64).alias("tokens"),
        pl.Series(
            "contradicts",
            [sorted(pairs.get(m, ())) for m in recs["mem_id"]],
            dtype=pl.List(pl.String),
        ),
    )


def has_judgments(dataset: Dataset) -> bool:
    """Whether the dataset directory holds ``judgments.jsonl``."""
    from memlab.judge.judgments import JUDGMENTS_FILE

    return dataset.path is not None and (Path(str(dataset.path)) / JUDGMENTS_FILE).is_file()


def default_metrics(dataset: Dataset) -> list[str]:
    """:data:`DEFAULT_METRICS`, plus :data:`JUDGED_METRICS` on a judged dataset."""
    extra = JUDGED_METRICS if has_judgments(dataset) else ()
    return [*DEFAULT_METRICS, *extra]


def dataset_qrels(
    dataset: Dataset,
    id_map: dict[str, str],
    *,
    qrels_source: str = "human",
    aggregate: str = "majority",
) -> pl.DataFrame:
    """``qid, mem_id, relevance``: the dataset's inline ``relevant`` and its judgments.

    Judgments (``judgments.jsonl``) of ``qrels_source`` are aggregated across judges
    (:func:`memlab.judge.judgments.qrels_from_judgments`) and override an inline grade of the
    same pair; grade-0 rows are kept (judged, not relevant). ``qrels_source="agent"`` leaves the
    inline grades out, so the agent's feedback is evaluated on its own. Ids are mapped through
    ``id_map`` (dedup; the highest grade wins on a collision).

    Raises:
        ValueError: On an unknown source or aggregation, or a judgment of an unknown query
            (naming ``judgments.jsonl:LINE``).
    """
    from memlab.judge.judgments import QRELS_SOURCES, qrels_from_judgments, read_judgments

    if qrels_source not in QRELS_SOURCES:
        raise ValueError(
            f"unknown qrels source {qrels_source!r}; expected one of {', '.join(QRELS_SOURCES)}"
        )
    inline = qrels_frame(dataset, id_map)
    if qrels_source == "agent":
        inline = inline.head(0)
    judgments = read_judgments(dataset.path) if dataset.path is not None else []
    if not judgments:
        return inline
    known = {q.qid for q in dataset.queries}
    for j in judgments:
        if j.qid not in known:
            raise ValueError(f"judgments.jsonl:{j.line}: field 'qid': unknown query {j.qid!r}")
    judged = (
        qrels_from_judgments(judgments, source=qrels_source, aggregate=aggregate)
        .with_columns(
            pl.col("mem_id").replace_strict(
                id_map, default=pl.col("mem_id"), return_dtype=pl.String
            )
        )
        .group_by("qid", "mem_id")
        .agg(pl.col("relevance").max())
    )
    return (
        pl.concat([judged, inline.join(judged, on=["qid", "mem_id"], how="anti")])
        .select("qid", "mem_id", pl.col("relevance").cast(pl.Int64))
        .sort("qid", "mem_id")
    )


def score_rankings(
    dataset: Dataset,
    replay: ReplayResult,
    metrics: Sequence[str],
    *,
    memories: pl.DataFrame | None = None,
    exclude_tags: Sequence[str] = (),
    qids: set[str] | None = None,
    qrels_source: str = "human",
    aggregate: str = "majority",
) -> pl.DataFrame:
    """Per-query metrics (``qid, metric, value``) of one pipeline's replay.

    Relevance judgements (:func:`dataset_qrels`: inline grades and ``judgments.jsonl`` of
    ``qrels_source``, aggregated with ``aggregate``) are mapped through the replay's ``id_map``
    (dedup) and merges; queries carrying one of ``exclude_tags`` get no relevance metric;
    ``qids`` restricts the evaluation (held-out split). ``memories`` defaults to
    :func:`memories_frame` of the replay.
    """
    rankings = replay.rankings
    id_map = replay.id_map
    queries = queries_frame(dataset, id_map, replay)
    if memories is None:
        memories = memories_frame(replay)
    if qids is not None:
        queries = queries.filter(pl.col("qid").is_in(qids))
        rankings = rankings.filter(pl.col("qid").is_in(qids))
    qrels = evaluation_qrels(
        dataset,
        id_map,
        exclude_tags=exclude_tags,
        qids=qids,
        qrels_source=qrels_source,
        aggregate=aggregate,
    )
    qrels = follow_merges(qrels, dataset, replay)
    return evaluate(
        rankings.select("qid", "rank", "mem_id", "score"),
        qrels,
        metrics,
        queries=queries,
        memories=memories,
    )


def follow_merges(qrels: pl.DataFrame, dataset: Dataset, replay: ReplayResult) -> pl.DataFrame:
    """``qrels`` with each relevant memory that a consolidation merged into a fact before the
    moment its query sees (:attr:`~memlab.datasets.format.Query.seen_at`) replaced by that
    fact (a fact carrying two relevant memories keeps the higher grade): the judgements the
    relevance metrics of ``replay``'s pipeline use."""
    if not replay.merges or not qrels.height:
        return qrels
    at = {q.qid: q.seen_at for q in dataset.queries}
    merged = [replay.resolve(m, at[q]) for q, m in zip(qrels["qid"], qrels["mem_id"],
                                                       strict=True)]
    return (
        qrels.with_columns(pl.Series("mem_id", merged, dtype=pl.String))
        .group_by("qid", "mem_id", maintain_order=True)
        .agg(pl.col("relevance").max())
    )


def scored_qrels(
    qrels: pl.DataFrame, dataset: Dataset, replays: Mapping[str, ReplayResult]
) -> pl.DataFrame:
    """The judgements as the relevance metrics used them (:func:`follow_merges`): one table
    when every pipeline's replay merged alike (the usual case), else the rows of each pipeline
    under a leading ``pipeline`` column (its replay's touches moved what a cycle merged)."""
    per = {name: follow_merges(qrels, dataset, rep) for name, rep in replays.items()}
    tables = list(per.values())
    if not tables or all(t.equals(tables[0]) for t in tables[1:]):
        return tables[0] if tables else qrels
    return pl.concat(
        [t.select(pl.lit(name).alias("pipeline"), pl.all()) for name, t in per.items()]
    )


def evaluation_qrels(
    dataset: Dataset,
    id_map: dict[str, str],
    *,
    exclude_tags: Sequence[str] = (),
    qids: set[str] | None = None,
    qrels_source: str = "human",
    aggregate: str = "majority",
) -> pl.DataFrame:
    """The judgements relevance metrics use: ``qid, mem_id, relevance`` on store ids
    (:func:`dataset_qrels` of ``qrels_source`` and ``aggregate``).

    Queries outside ``qids`` (when given) or carrying one of ``exclude_tags`` have none.
    """
    qrels = dataset_qrels(dataset, id_map, qrels_source=qrels_source, aggregate=aggregate)
    excluded = set(exclude_tags)
    drop = {q.qid for q in dataset.queries if excluded & set(q.tags)}
    if qids is not None:
        drop |= {q.qid for q in dataset.queries if q.qid not in qids}
    return qrels.filter(~pl.col("qid").is_in(drop)) if drop else qrels


def evaluated_queries(dataset: Dataset, qids: set[str] | None = None) -> pl.DataFrame:
    """``qid, text, client_id, tags`` of the queries a run scores (all when ``qids`` is None)."""
    keep = [q for q in dataset.queries if qids is None or q.qid in qids]
    return pl.DataFrame(
        {
            "qid": [q.qid for q in keep],
            "text": [q.text for q in keep],
            "client_id": [q.client_id for q in keep],
            "tags": [list(q.tags) for q in keep],
        },
        schema={
            "qid": pl.String,
            "text": pl.String,
            "client_id": pl.String,
            "tags": pl.List(pl.String),
        },
    )


def run_experiment(
    dataset: str | Path | Dataset,
    pipelines: Sequence[str | Pipeline] = DEFAULT_PIPELINES,
    *,
    baseline: str | None = None,
    out: str | Path | None = None,
    metrics: Sequence[str] | None = None,
    seed: int = 0,
    embedder: Any | None = None,
    generator: Any | None = None,
    qrels_source: str = "human",
    aggregate: str = "majority",
    tests: Sequence[str] = ("t", "wilcoxon", "permutation"),
    correction: str = "holm",
    alpha: float = 0.05,
    n_resamples: int = 10_000,
    exclude_tags: Sequence[str] = ("adversarial",),
    folds: int | None = None,
    group_by: str | None = None,
    replay: ReplayConfig | None = None,
    progress: bool | str | None = None,
    write_report: bool = True,
    executor: str | Executor = "serial",
    n_jobs: int | None = None,
    shards: int | None = None,
    min_shard_queries: int = 250,
) -> ExperimentResult:
    """Compare pipelines on a dataset (see the module docstring for the output contract).

    Args:
        dataset: A dataset directory (validated) or a loaded dataset.
        pipelines: Pipeline names (``eval/configs/NAME.toml``), paths or objects.
        baseline: The pipeline the others are compared with (default: the first).
        out: Output directory (written atomically); ``None`` writes nothing.
        metrics: Metric names (``R_all@10``, ``nDCG@5``, ``MRR`` …); default
            :func:`default_metrics` (judged@10, bpref and cnDCG@10 join on a judged dataset).
        seed: Seeds the permutation test and the train/test split.
        embedder: Embedder for memories and queries (default: MiniLM behind the on-disk cache).
        generator: Generator for stages that need one (HyDE); default: recorded generations
            of the dataset when the pipelines need one.
        qrels_source: Judgments of ``judgments.jsonl`` used as qrels: ``"human"`` (with the
            inline grades), ``"agent"`` (alone) or ``"all"``.
        aggregate: How the grades of several judges combine (``majority``, ``mean``, ``min``,
            ``max``).
        tests: Paired tests to run.
        correction: Multiple-testing correction across pipelines × metrics.
        alpha: Level of the ``significant`` column (first test's adjusted p-value).
        n_resamples: Permutation-test resamples.
        exclude_tags: Queries with these tags are left out of relevance metrics (LoCoMo's
            adversarial questions have no evidence by design).
        folds: ``k`` of the cross-fit of learned stages (default: the dataset's
            ``[evaluation]`` table, else 5); every pipeline is scored on every query whichever
            pipelines share the run (:mod:`memlab.eval.protocol`).
        group_by: What stays together in one fold: ``"query"`` or ``"client"`` (default: the
            dataset's ``[evaluation]`` table, else ``"query"``).
        replay: The replay configuration (TTL, expiry, touch_k, depth, consolidation, conflict
            policy); default: the dataset's ``[replay]`` defaults.
        progress: Progress of every step (:mod:`memlab.progress`): ``None`` = a bar in a
            terminal, lines otherwise; ``False`` = none; ``"lines"`` = one line per step and a
            line every few seconds, no bar.
        write_report: Render ``report.md`` and charts into ``out``.
        executor: Where the pipelines replay: ``"serial"``, ``"joblib"`` (local cores),
            ``"ray"`` or an executor object (see :mod:`memlab.eval.executor`); the metrics are
            the same whichever runs them.
        n_jobs: Jobs of the joblib executor, this process included (default: every
            core).
        shards: Split each pipeline's queries into this many contiguous runs of the replay
            order, replayed by separate tasks and joined (:func:`~memlab.eval.replay.merge_shards`;
            the metrics are those of one replay). Only where the queries leave the replay's
            state alone (:func:`~memlab.eval.replay.queries_are_read_only`: ``touch_k = 0``,
            no expiry) and for pipelines without learned stages; elsewhere 1. Default: on the
            joblib executor, as many shards as leave no worker idle (workers // pipelines),
            each of at least ``min_shard_queries`` queries; otherwise 1.
        min_shard_queries: Fewest queries worth a shard of their own when ``shards`` is
            chosen automatically (a shard replays the writes before its queries again, and a
            worker starts up for it).
    """
    started = time.time()
    if shards is not None and (isinstance(shards, bool) or not isinstance(shards, int)
                               or shards < 1):
        raise ValueError(f"shards must be a positive int or None, got {shards!r}")
    if isinstance(min_shard_queries, bool) or not isinstance(min_shard_queries, int) or (
        min_shard_queries < 1
    ):
        raise ValueError(f"min_shard_queries must be a positive int, got {min_shard_queries!r}")
    if out is not None:
        check_experiment_out(out)  # refuse before the expensive part
    ds = dataset if isinstance(dataset, Dataset) else load_dataset(Path(dataset))
    metric_names = check_metrics(default_metrics(ds) if metrics is None else metrics)
    for t in tests:
        if t not in available_tests():
            raise ValueError(f"unknown test {t!r}; known tests: {', '.join(available_tests())}")
    if correction not in available_corrections():
        raise ValueError(
            f"unknown correction {correction!r}; known: {', '.join(available_corrections())}"
        )
    pipes = [p.clone() if isinstance(p, Pipeline) else load_pipeline(p) for p in pipelines]
    if not pipes:
        raise ValueError("no pipelines to evaluate")
    names = [p.name for p in pipes]
    if len(set(names)) != len(names):
        raise ValueError(f"pipeline names repeat: {', '.join(names)}")
    base = baseline or names[0]
    if base not in names:
        raise ValueError(f"baseline {base!r} is not among the pipelines ({', '.join(names)})")
    config = replay if replay is not None else ReplayConfig.from_dataset(ds)
    protocol = EvalProtocol.from_dataset(ds, folds=folds, group_by=group_by, seed=seed)
    learned = [p.name for p in pipes if learnable_stages(p)]
    fold_of: dict[str, int] | None = None
    if learned:
        protocol.check_groups(ds.queries, where=f"cross-fit of {', '.join(learned)}")
        fold_of = protocol.assign(ds.queries)
    judging = judging_summary(ds, qrels_source=qrels_source, aggregate=aggregate)
    if any(q.agent is not None for q in ds.queries) and not any(
        m.startswith("scope_violation") for m in metric_names
    ):
        metric_names.append("scope_violation@10")  # agents asked: namespaces must hold
    ex = make_executor(executor, n_jobs=n_jobs) if isinstance(executor, str) else executor
    n_shards = _shard_count(
        shards, ex, len(pipes), len(ds.queries), min_shard_queries, queries_are_read_only(config)
    )
    # Longest first (a learned stage's fitting replays are the long pole): the other
    # pipelines then fill the other workers while it runs. Results come back in pipeline order.
    tasks: list[_Task] = []
    for i, p in sorted(enumerate(pipes), key=lambda t: (-replay_cost(t[1]), t[0])):
        if n_shards > 1 and not learnable_stages(p):
            cut = query_shards(ds.queries, n_shards)
            # each shard fits its own copy of the pipeline (no fitted state crosses shards)
            tasks.extend(
                (i, p if k == 0 else p.clone(), part, k == n_shards - 1)
                for k, part in enumerate(cut)
            )
        else:
            tasks.append((i, p, None, True))
    if len(tasks) > 1:  # every input is checked: the workers start while the data is prepared
        warm_workers(ex, pipes, len(tasks), charts=out is not None and write_report)
    replayer = replayer_for(
        ds, pipes, embedder=embedder, generator=generator, config=config, progress=progress
    )
    replayer.qrels_source, replayer.aggregate = qrels_source, aggregate  # learned stages' labels
    embedder, generator = replayer.embedder, replayer.generator
    from memlab.embed.frozen import RecordingEmbedder
    from memlab.eval.sweep import run_tasks

    replayer.embedder = RecordingEmbedder(embedder)
    job = _PipelineJob(replayer, fold_of, keep_store=isinstance(ex, SerialExecutor))
    mode = "auto" if progress is None else progress
    unit = "pipelines" if len(tasks) == len(pipes) else "replays"  # shards: several each
    with Progress(f"eval {ds.meta.get('name', 'dataset')}", len(tasks), unit=unit,
                  mode=mode) as bar:
        ran = run_tasks(
            job, _pipeline_task, tasks, ex, probe=False, progress=bar,
            **tail_work(ex, tests=len(pipes) > 1, charts=out is not None and write_report),
        )
    parts: dict[int, list[tuple[ReplayResult, pl.DataFrame | None]]] = {}
    for (i, *_), out_ in sorted(zip(tasks, ran, strict=True), key=lambda t: t[0][0]):
        parts.setdefault(i, []).append(out_)  # shards stay in replay order (a stable sort)
    done = [
        (merge_shards([r for r, _ in parts[i]]), parts[i][-1][1]) for i in range(len(pipes))
    ]
    replayer.embedder = embedder
    replays: dict[str, ReplayResult] = {p.name: r for p, (r, _) in zip(pipes, done, strict=True)}
    first = replays[names[0]]
    memories = {p.name: m for p, (_, m) in zip(pipes, done, strict=True)}
    per_query_parts = []
    for name in track(names, "scoring", unit="pipelines", mode=mode):
        # judged@10 goes into the manifest whether or not it is a reported metric: scored in
        # the same pass, then left out of the per-query table if it was not asked for.
        asked = "judged@10" in metric_names
        pq = score_rankings(
            ds,
            replays[name],
            metric_names if asked else [*metric_names, "judged@10"],
            memories=memories[name],
            exclude_tags=exclude_tags,
            qrels_source=qrels_source,
            aggregate=aggregate,
        )
        coverage = pq.filter(pl.col("metric") == "judged@10")
        if not asked:
            pq = pq.filter(pl.col("metric") != "judged@10")
        per_query_parts.append(pq.with_columns(pl.lit(name).alias("pipeline")))
        judging["judged@10"][name] = (
            None if coverage.is_empty() else round(float(coverage["value"].mean()), 6)
        )
    queries = queries_frame(ds, first.id_map)
    excluded = set(exclude_tags)
    per_query = pl.concat(per_query_parts).select("pipeline", "qid", "metric", "value")
    agg = {
        name: {
            m: round(v, 6)
            for m, v in aggregate_metrics(per_query.filter(pl.col("pipeline") == name)).items()
        }
        for name in names
    }
    present = set(per_query.filter(pl.col("pipeline") == base)["metric"].unique().to_list())
    compared = [m for m in metric_names if m in present]
    tags = queries.select("qid", "tags")
    tag_table = per_tag(per_query, tags)
    charts = None
    if out is not None and write_report and charts_on_worker(ex):
        # The charts read only these tables: an idle worker renders them during the tests.
        from memlab.eval.report import render_report_charts

        charts = ex.submit(render_report_charts, per_query, tag_table, metric_names)
    with Progress("paired tests", mode=mode):
        comparison = compare(
            per_query,
            baseline=base,
            metrics=compared,
            tests=tuple(tests),
            correction=correction,
            alpha=alpha,
            seed=seed,
            n_resamples=n_resamples,
        )
        tag_comparison = compare_by_tag(
            per_query,
            tags,
            baseline=base,
            metric=main_metric_of(compared),
            tests=tuple(tests),
            correction=correction,
            alpha=alpha,
            seed=seed,
            n_resamples=n_resamples,
        )
    rankings = pl.concat([replays[n].rankings for n in names])
    timings = pl.concat([replays[n].timings for n in names])
    manifest = {
        "dataset": {
            "name": ds.meta.get("name", Path(str(ds.path)).name),
            "path": str(ds.path),
            "sha256": ds.sha256(),
            "memories": sum(1 for op in ds.ops if op.op == "store"),
            "operations": len(ds.ops),
            "queries": len(ds.queries),
            "evaluated_queries": queries.height,
        },
        "pipelines": {p.name: p.to_config() for p in pipes},
        "baseline": base,
        "metrics": metric_names,
        "seed": seed,
        "judgments": judging,
        "tests": list(tests),
        "correction": correction,
        "alpha": alpha,
        "exclude_tags": sorted(excluded),
        "protocol": protocol.to_dict(queries.height, learned),
        "replay": config.to_dict(),
        "consolidation_cycles": {n: len(replays[n].consolidation) for n in names},
        "conflicts_resolved": {n: len(replays[n].conflicts) for n in names},
        "embedder": getattr(embedder, "model_id", type(embedder).__name__),
        "stage_embedders": {
            name: getattr(e, "model_id", type(e).__name__)
            for name, e in sorted(replayer.embedders.items())
        },
        "generator": None if generator is None else getattr(generator, "model_id", None),
        "packages": package_versions(),
        "git_commit": git_commit(),
        "started_at": datetime.fromtimestamp(started, tz=UTC).isoformat(),
        "seconds": round(time.time() - started, 3),
    }
    result = ExperimentResult(
        metrics=agg,
        per_query=per_query,
        rankings=rankings,
        comparison=comparison,
        per_tag=tag_table,
        tag_comparison=tag_comparison,
        timings=timings,
        manifest=manifest,
        replays=replays,
        qrels=scored_qrels(
            evaluation_qrels(
                ds,
                first.id_map,
                exclude_tags=exclude_tags,
                qrels_source=qrels_source,
                aggregate=aggregate,
            ),
            ds,
            {n: replays[n] for n in names},
        ),
        queries=evaluated_queries(ds),
    )
    if out is not None:
        with Progress(f"writing {out}", mode=mode):
            result.out = write_experiment(
                result, Path(out), write_report=write_report,
                rendered=None if charts is None else charts(),
            )
    return result


@dataclass
class _PipelineJob:
    """What each pipeline's replay needs (pickled once per worker)."""

    replayer: Replayer
    folds: dict[str, int] | None
    keep_store: bool = True


def _shard_count(
    shards: int | None, executor: Executor, n_pipelines: int, n_queries: int,
    min_shard_queries: int, read_only: bool,
) -> int:
    """How many query shards each pipeline's replay is split into (see ``run_experiment``)."""
    if not read_only or n_queries == 0:
        return 1
    if shards is not None:
        return min(shards, n_queries)  # no shard without queries
    if not isinstance(executor, JoblibExecutor):
        return 1
    workers = executor.n_jobs or os.cpu_count() or 1
    return max(1, min(workers // max(n_pipelines, 1), n_queries // min_shard_queries))


_Task = tuple[int, Pipeline, "list[Query] | None", bool]
"""A replay task: pipeline index, pipeline, its queries (a shard, or ``None`` for all), and
whether it is the last shard (whose store is the whole replay's)."""


def _pipeline_task(
    job: _PipelineJob, task: _Task
) -> tuple[ReplayResult, pl.DataFrame | None]:
    """Cross-fit the pipeline's learned stages over the folds (if any), replay it (on the
    task's queries: a shard, or all), and return the replay with the memories frame of its
    store (stores differ between pipelines once consolidation follows what each retrieved).
    A worker process returns the replay without its store (``keep_store=False``), which does
    not cross process boundaries. A shard that is not the last returns no memories frame."""
    _, pipeline, queries, last = task
    if job.folds is not None and learnable_stages(pipeline):
        pipeline = cross_fit_learned_stages(job.replayer, pipeline, job.folds)
    result = job.replayer.run(pipeline, queries=queries)
    memories = memories_frame(result) if last else None
    if not job.keep_store:
        result.store = None
    return result, memories


def judging_summary(
    dataset: Dataset, *, qrels_source: str = "human", aggregate: str = "majority"
) -> dict[str, Any]:
    """What the manifest records about the judgments: source, how judges' grades combine,
    counts, judges, agreement.

    ``pooled`` is true when the dataset has ``judgments.jsonl``: its qrels are then incomplete
    by construction and the report warns below :data:`JUDGED_WARNING` judged@10. A dataset
    without it (the simulation, LoCoMo) has complete labels by construction.
    """
    from memlab.judge.agreement import agreement
    from memlab.judge.judgments import latest, read_judgments

    judgments = read_judgments(dataset.path) if dataset.path is not None else []
    kept = [j for j in latest(judgments) if qrels_source == "all" or j.source == qrels_source]
    table = agreement(judgments, source=qrels_source)
    return {
        "pooled": has_judgments(dataset),
        "qrels_source": qrels_source,
        "aggregate": aggregate,
        "n": len(kept),
        "judges": sorted({j.judge for j in kept}),
        "queries": len({j.qid for j in kept}),
        "agreement": [
            {k: (None if isinstance(v, float) and v != v else v) for k, v in row.items()}
            for row in table.iter_rows(named=True)
        ],
        "warn_below": JUDGED_WARNING,
        "judged@10": {},
    }


def replayer_for(
    dataset: Dataset,
    pipelines: Sequence[Pipeline],
    *,
    embedder: Any | None = None,
    generator: Any | None = None,
    config: ReplayConfig | None = None,
    progress: bool | None = None,
) -> Replayer:
    """A replayer for these pipelines: MiniLM behind the disk cache unless an embedder is given,
    the dataset's recorded generations when a pipeline needs a generator and none is given."""
    if embedder is None:
        from memlab.embed import default_embedder

        embedder = default_embedder()
    if generator is None and any(needs_generator(p) for p in pipelines):
        generator = default_generator(dataset)
    cfg = config if config is not None else ReplayConfig.from_dataset(dataset)
    detects = cfg.conflict_policy is not None or (
        cfg.consolidation.enabled and cfg.consolidation.flag_contradictions
    )
    if generator is None and (
        cfg.consolidation.enabled and cfg.consolidation.merge == "generator"
        or detects and cfg.conflict_detector == "nli"
    ):
        generator = default_generator(dataset)
    from memlab.embed import named_embedder
    from memlab.eval.replay import stage_embedders

    roles = stage_embedders(pipelines)
    return Replayer(
        dataset, embedder=embedder, embedders={name: named_embedder(name) for name in roles},
        embedder_roles=roles, generator=generator, config=cfg, progress=progress,
    )


def needs_generator(p: Pipeline) -> bool:
    return any(getattr(s, "needs_generator", False) for _, s in p.named_stages())


def default_generator(ds: Dataset) -> Any:
    """Recorded generations of the dataset (``eval/generations/<name>.jsonl``)."""
    from memlab.generate.recorded import RecordedGenerator

    name = ds.meta.get("name", Path(str(ds.path)).name)
    candidates = [
        Path(str(ds.path)) / "generations.jsonl",
        Path.cwd() / "eval" / "generations" / f"{name}.jsonl",
        Path(__file__).resolve().parents[3] / "eval" / "generations" / f"{name}.jsonl",
    ]
    for c in candidates:
        if c.is_file():
            return RecordedGenerator(c)
    raise ValueError(
        f"a pipeline needs a generator and no recorded generations exist for dataset {name!r}; "
        f"record them with: memlab generations record {ds.path} --pipeline full "
        f"--out eval/generations/{name}.jsonl"
    )


def metrics_json(metrics: dict[str, dict[str, float]]) -> str:
    """The deterministic text of ``metrics.json``."""
    return json.dumps(metrics, indent=2, sort_keys=True) + "\n"


def check_experiment_out(
    out: str | os.PathLike[str], *, what: str = "output directory"
) -> Path:
    """Refuse a run's output directory before any work: the rule of
    :func:`memlab.io.check_output_dir`, and a result of another kind memlab wrote (a dataset,
    a sweep, a tune, an export) is not replaced by a run either.

    Returns:
        The absolute path.

    Raises:
        memlab.io.OutputDirError: Naming the directory and what is wrong.
    """
    path = check_output_dir(out, what=what)
    if path.is_dir() and any(path.iterdir()):
        kind = output_kind(path)
        if kind not in (None, "experiment"):
            raise OutputDirError(
                f"{what} {out}: is a memlab {kind} directory, not a run; a run replaces only "
                "a run: give a new or empty directory"
            )
    return path


def write_experiment(
    result: ExperimentResult,
    out: Path,
    *,
    write_report: bool = True,
    rendered: Mapping[str, tuple[str, bytes]] | None = None,
) -> Path:
    """Write the output contract into ``out`` atomically (temporary sibling + rename);
    ``rendered``: the report's charts rendered ahead (:func:`memlab.eval.report.render_specs`).

    Raises:
        memlab.io.OutputDirError: ``out`` is refused (:func:`check_experiment_out`).
    """
    check_experiment_out(out)
    with atomic_directory(out, kind="experiment") as tmp:
        (tmp / "manifest.json").write_text(
            json.dumps(result.manifest, indent=2, sort_keys=True) + "\n", encoding="utf-8"
        )
        (tmp / "metrics.json").write_text(metrics_json(result.metrics), encoding="utf-8")
        for attr, name in RUN_TABLES.items():
            getattr(result, attr).write_parquet(tmp / name)
        if write_report:
            from memlab.eval.report import write_report as render

            render(result, tmp, rendered)
    return out.resolve()
