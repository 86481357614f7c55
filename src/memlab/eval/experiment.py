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
``DIR/report.md`` with charts as PNG and SVG beside it.

The directory appears whole or not at all: everything is written into a temporary sibling that
is renamed into place at the end.
"""

from __future__ import annotations

import hashlib
import json
import subprocess
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from importlib import metadata
from pathlib import Path
from typing import Any

import polars as pl

from memlab.datasets.format import Dataset, Query, load_dataset
from memlab.eval.metrics import aggregate, evaluate, main_metric_of, parse_metric
from memlab.eval.replay import (
    ReplayConfig,
    Replayer,
    ReplayResult,
    qrels_frame,
    queries_frame,
)
from memlab.eval.stats import (
    available_corrections,
    available_tests,
    compare,
    compare_by_tag,
    per_tag,
)
from memlab.io import atomic_directory
from memlab.pipeline import Pipeline, load_pipeline
from memlab.tokens import count_tokens

DEFAULT_PIPELINES: tuple[str, ...] = (
    "bm25",
    "dense",
    "graph",
    "rrf",
    "hybrid",
    "conversational",
    "full",
)
DEFAULT_METRICS: tuple[str, ...] = (
    "R_all@10",
    "R_any@10",
    "R_frac@10",
    "nDCG@10",
    "MRR",
    "MAP",
    "stale@10",
    "leak@10",
    "dup@10",
    "tokens@10",
)
RELEVANCE_FAMILIES = ("R_all", "R_any", "R_frac", "nDCG", "MRR", "MAP")
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


@dataclass
class ExperimentResult:
    """Everything an experiment computed (the same tables it writes)."""

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


SPLIT_BY = ("query", "client")


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
    """Parse every metric name up front (``ValueError`` naming the bad one)."""
    return [parse_metric(m).name for m in metrics]


def learnable_stages(pipeline: Pipeline) -> list[tuple[str, Any]]:
    """Stages that must be fitted on training queries before use."""
    return [(n, s) for n, s in pipeline.named_stages() if getattr(s, "requires_fit", False)]


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
    for i, (name, stage) in enumerate(pipeline.steps):
        if not getattr(stage, "requires_fit", False):
            continue
        prefix = Pipeline(steps=pipeline.steps[:i], name=f"{pipeline.name}[:{name}]")
        collect = _Collector()
        result = replayer.run(prefix, queries=train, on_query=collect)
        relevant = {
            q.qid: {result.resolve(m, q.ts) for m in q.relevant} for q in train if q.relevant
        }
        stage.fit(
            result.store,
            queries=collect.contexts,
            relevant=relevant,
            embedder=replayer.embedder,
            candidates=collect.candidates,
        )


def memories_frame(replay: ReplayResult) -> pl.DataFrame:
    """``mem_id, client_id, content_hash, text, tokens, contradicts`` of a replay's store.

    ``contradicts`` lists the store ids a memory contradicts by the dataset's labels (a store
    line's ``metadata.contradicts``: a dataset id or a list of them), in both directions.
    """
    store = replay.store
    if store is None:
        raise ValueError("the replay result carries no store")
    recs = store.records_frame().select(
        pl.col("id").alias("mem_id"), "client_id", "content_hash", "text"
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


def score_rankings(
    dataset: Dataset,
    replay: ReplayResult,
    metrics: Sequence[str],
    *,
    memories: pl.DataFrame | None = None,
    exclude_tags: Sequence[str] = (),
    qids: set[str] | None = None,
) -> pl.DataFrame:
    """Per-query metrics (``qid, metric, value``) of one pipeline's replay.

    Relevance judgements are mapped through the replay's ``id_map`` (dedup) and merges; queries
    carrying one of ``exclude_tags`` get no relevance metric; ``qids`` restricts the evaluation
    (held-out split). ``memories`` defaults to :func:`memories_frame` of the replay.
    """
    rankings = replay.rankings
    qrels = qrels_frame(dataset, replay.id_map, replay)
    queries = queries_frame(dataset, replay.id_map, replay)
    if memories is None:
        memories = memories_frame(replay)
    if qids is not None:
        qrels = qrels.filter(pl.col("qid").is_in(qids))
        queries = queries.filter(pl.col("qid").is_in(qids))
        rankings = rankings.filter(pl.col("qid").is_in(qids))
    excluded = set(exclude_tags)
    if excluded:
        drop = {
            qid
            for qid, tags in zip(queries["qid"], queries["tags"], strict=True)
            if excluded & set(tags)
        }
        qrels = qrels.filter(~pl.col("qid").is_in(drop))
    return evaluate(
        rankings.select("qid", "rank", "mem_id", "score"),
        qrels,
        metrics,
        queries=queries,
        memories=memories,
    )


def run_experiment(
    dataset: str | Path | Dataset,
    pipelines: Sequence[str | Pipeline] = DEFAULT_PIPELINES,
    *,
    baseline: str | None = None,
    out: str | Path | None = None,
    metrics: Sequence[str] = DEFAULT_METRICS,
    seed: int = 0,
    embedder: Any | None = None,
    generator: Any | None = None,
    tests: Sequence[str] = ("t", "wilcoxon", "permutation"),
    correction: str = "holm",
    n_resamples: int = 10_000,
    exclude_tags: Sequence[str] = ("adversarial",),
    test_fraction: float = 0.5,
    replay: ReplayConfig | None = None,
    progress: bool | None = None,
    write_report: bool = True,
) -> ExperimentResult:
    """Compare pipelines on a dataset (see the module docstring for the output contract).

    Args:
        dataset: A dataset directory (validated) or a loaded dataset.
        pipelines: Pipeline names (``eval/configs/NAME.toml``), paths or objects.
        baseline: The pipeline the others are compared with (default: the first).
        out: Output directory (written atomically); ``None`` writes nothing.
        metrics: Metric names (``R_all@10``, ``nDCG@5``, ``MRR`` …).
        seed: Seeds the permutation test and the train/test split.
        embedder: Embedder for memories and queries (default: MiniLM behind the on-disk cache).
        generator: Generator for stages that need one (HyDE); default: recorded generations
            of the dataset when the pipelines need one.
        tests: Paired tests to run.
        correction: Multiple-testing correction across pipelines × metrics.
        n_resamples: Permutation-test resamples.
        exclude_tags: Queries with these tags are left out of relevance metrics (LoCoMo's
            adversarial questions have no evidence by design).
        test_fraction: When a pipeline has a learned stage, the share of queries held out for
            evaluation (every pipeline is then scored on the same held-out queries).
        replay: The replay configuration (TTL, expiry, touch_k, depth, consolidation, conflict
            policy); default: the dataset's ``[replay]`` defaults.
        progress: Progress bars (default: on unless ``CI=true``).
        write_report: Render ``report.md`` and charts into ``out``.
    """
    started = time.time()
    metric_names = check_metrics(metrics)
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
    ds = dataset if isinstance(dataset, Dataset) else load_dataset(Path(dataset))
    config = replay if replay is not None else ReplayConfig.from_dataset(ds)
    replayer = replayer_for(
        ds, pipes, embedder=embedder, generator=generator, config=config, progress=progress
    )
    embedder, generator = replayer.embedder, replayer.generator
    eval_queries: list[Query] | None = None
    if any(learnable_stages(p) for p in pipes):
        train, test = split_queries(ds.queries, test_fraction=test_fraction, seed=seed)
        for p in pipes:
            fit_learned_stages(replayer, p, train)
        eval_queries = test
    replays: dict[str, ReplayResult] = {}
    for p in pipes:
        replays[p.name] = replayer.run(p)
    first = replays[names[0]]
    keep = None if eval_queries is None else {q.qid for q in eval_queries}
    per_query_parts = []
    for name in names:
        pq = score_rankings(
            ds, replays[name], metric_names, exclude_tags=exclude_tags, qids=keep
        )
        per_query_parts.append(pq.with_columns(pl.lit(name).alias("pipeline")))
    queries = queries_frame(ds, first.id_map)
    if keep is not None:
        queries = queries.filter(pl.col("qid").is_in(keep))
    excluded = set(exclude_tags)
    per_query = pl.concat(per_query_parts).select("pipeline", "qid", "metric", "value")
    agg = {
        name: {
            m: round(v, 6)
            for m, v in aggregate(per_query.filter(pl.col("pipeline") == name)).items()
        }
        for name in names
    }
    present = set(per_query.filter(pl.col("pipeline") == base)["metric"].unique().to_list())
    compared = [m for m in metric_names if m in present]
    comparison = compare(
        per_query,
        baseline=base,
        metrics=compared,
        tests=tuple(tests),
        correction=correction,
        seed=seed,
        n_resamples=n_resamples,
    )
    tags = queries.select("qid", "tags")
    tag_table = per_tag(per_query, tags)
    tag_comparison = compare_by_tag(
        per_query,
        tags,
        baseline=base,
        metric=main_metric_of(compared),
        tests=tuple(tests),
        correction=correction,
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
        "tests": list(tests),
        "correction": correction,
        "exclude_tags": sorted(excluded),
        "held_out_split": None
        if eval_queries is None
        else {"test_fraction": test_fraction, "n_test": len(eval_queries)},
        "replay": config.to_dict(),
        "consolidation_cycles": {n: len(replays[n].consolidation) for n in names},
        "conflicts_resolved": {n: len(replays[n].conflicts) for n in names},
        "embedder": getattr(embedder, "model_id", type(embedder).__name__),
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
    )
    if out is not None:
        result.out = write_experiment(result, Path(out), write_report=write_report)
    return result


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
    return Replayer(
        dataset, embedder=embedder, generator=generator, config=cfg, progress=progress
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


def write_experiment(result: ExperimentResult, out: Path, *, write_report: bool = True) -> Path:
    """Write the output contract into ``out`` atomically (temporary sibling + rename)."""
    with atomic_directory(out) as tmp:
        (tmp / "manifest.json").write_text(
            json.dumps(result.manifest, indent=2, sort_keys=True) + "\n", encoding="utf-8"
        )
        (tmp / "metrics.json").write_text(metrics_json(result.metrics), encoding="utf-8")
        result.per_query.write_parquet(tmp / "per_query.parquet")
        result.rankings.write_parquet(tmp / "rankings.parquet")
        result.comparison.write_parquet(tmp / "comparison.parquet")
        result.per_tag.write_parquet(tmp / "per_tag.parquet")
        result.tag_comparison.write_parquet(tmp / "comparison_by_tag.parquet")
        result.timings.write_parquet(tmp / "timings.parquet")
        if write_report:
            from memlab.eval.report import write_report as render

            render(result, tmp)
    return out.resolve()
