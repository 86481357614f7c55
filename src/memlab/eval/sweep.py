"""Parameter sweeps: every grid point is ``clone()`` + ``set_params()`` of one pipeline.

The best point is chosen on a seeded train split of the queries and reported on the held-out
split, so the reported number is not the maximum of many noisy tries. Grids are plain dicts
(``{"rrf__k": [10, 30, 60]}``); :func:`parse_grid` reads the command line's
``--grid rrf__k=10,30,60`` (a list-valued constant is written in brackets:
``--grid combsum__weights=[0.7,0.3],[0.5,0.5]``). Names starting with ``consolidation__`` or
``replay__`` set the replay configuration instead of the pipeline
(``--grid consolidation__merge_threshold=0.7,0.8``, ``--grid replay__touch_k=0,10``).
"""

from __future__ import annotations

import copy
import dataclasses
import itertools
import json
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import polars as pl

from memlab.datasets.format import Dataset, Query, load_dataset
from memlab.embed.frozen import FrozenEmbedder, RecordingEmbedder, unloaded
from memlab.eval.executor import Executor, Meanwhile, SerialExecutor, make_executor
from memlab.eval.experiment import (
    DEFAULT_METRICS,
    charts_on_worker,
    check_metrics,
    fit_learned_stages,
    git_commit,
    learnable_stages,
    package_versions,
    replayer_for,
    score_rankings,
    split_queries,
    tail_work,
    unscored_split,
    warm_workers,
)
from memlab.eval.grid import REPLAY_PREFIXES as REPLAY_PREFIXES
from memlab.eval.grid import grid_points, split_point
from memlab.eval.grid import parse_grid as parse_grid
from memlab.eval.metrics import higher_is_better
from memlab.eval.replay import ReplayConfig, Replayer
from memlab.eval.report import markdown_table, render_specs, write_rendered
from memlab.eval.stats import compare, correct_pvalues
from memlab.io import atomic_directory, check_output_dir
from memlab.pipeline import Parallel, Pipeline, load_pipeline
from memlab.progress import Progress, resolve_mode

if TYPE_CHECKING:
    import altair as alt


@dataclass
class SweepResult:
    """A sweep's results.

    Attributes:
        results: One row per point, in grid order: ``param_*`` columns, then ``<metric>`` on all
            queries, ``<metric>_train`` and ``<metric>_test`` (split 0), and for the selection
            metric ``<metric>_test_mean`` / ``_test_sd`` (held-out mean over the repeated
            splits) and ``_test_lo`` / ``_test_hi`` (95% bootstrap interval of the held-out mean
            of split 0).
        best_params: The point with the best train score of split 0 (ties: first in grid order).
        best_test: Its held-out score.
        best_train: Its train score.
        metric: The selection metric.
        split_by: How queries were split (``"query"`` or ``"client"``).
        n_train: Train queries (split 0).
        n_test: Held-out queries (split 0).
        per_query: ``point, split, qid, metric, value`` (``point``: the row of ``results``;
            -1: the defaults, when they
            are not a grid point; ``split``: the split a learned stage was fitted on).
        repeats: One row per split: ``split, seed, n_train, n_test, best_point, best_params,
            train, test`` — the held-out score of the point each split chooses.
        tests: Paired tests of the best point against the defaults and the runner-up on the
            held-out queries of split 0 (Holm-corrected across the rows).
        warnings: Best values on the edge of the grid, skipped degenerate splits.
    """

    results: pl.DataFrame
    best_params: dict[str, Any]
    best_test: float
    best_train: float
    metric: str
    split_by: str = "query"
    n_train: int = 0
    n_test: int = 0
    out: Path | None = None
    per_query: pl.DataFrame | None = None
    repeats: pl.DataFrame | None = None
    tests: pl.DataFrame | None = None
    warnings: list[str] = field(default_factory=list)
    manifest: dict[str, Any] = field(default_factory=dict)

    @property
    def chosen_test(self) -> tuple[float, float]:
        """Mean and standard deviation over the splits of the chosen point's held-out score."""
        if self.repeats is None or self.repeats.height == 0:
            return self.best_test, float("nan")
        vals = self.repeats["test"].to_numpy()
        sd = float(np.std(vals, ddof=1)) if vals.size > 1 else float("nan")
        return round(float(vals.mean()), 6), round(sd, 6)


def _cell(value: Any) -> Any:
    """A grid value as a table cell (a tuple is shown as ``[a, b]`` text)."""
    if isinstance(value, tuple | list):
        return "[" + ", ".join(str(v) for v in value) + "]"
    return value


@dataclass
class _SweepJob:
    """What every sweep task needs (pickled once per worker)."""

    replayer: Replayer
    dataset: Dataset
    base: Pipeline
    metrics: list[str]
    exclude_tags: tuple[str, ...]
    trains: list[list[Query]]
    config: ReplayConfig


def _point_task(job: _SweepJob, task: tuple[int, dict[str, Any], int | None]) -> pl.DataFrame:
    """Replay one point (fitting learned stages on split ``task[2]``); per-query metrics.

    ``consolidation__…`` and ``replay__…`` names of the point set the replay configuration."""
    _, point, split = task
    pipe_params, replay_params = split_point(point)
    pipe = job.base.clone().set_params(**pipe_params)
    job.replayer.config = job.config.with_params(_origin="override", **replay_params)
    try:
        if split is not None:
            fit_learned_stages(job.replayer, pipe, job.trains[split])
        rep = job.replayer.run(pipe)
    finally:
        job.replayer.config = job.config
    return score_rankings(job.dataset, rep, job.metrics, exclude_tags=job.exclude_tags)


def _frozen_extra(replayer: Replayer, name: str, embedder: Any) -> Any:
    """A stage's named embedder for workers: the vectors :meth:`Replayer.prepare` computed,
    frozen, with an unloaded copy of the embedder for anything else."""
    texts, vectors = replayer.prepared_.get(name, ([], None))
    if vectors is None:
        return unloaded(embedder)
    model = getattr(embedder, "model_id", type(embedder).__name__)
    return FrozenEmbedder(texts, vectors, model, unloaded(embedder))


def _shippable(replayer: Replayer, embedder: Any) -> Replayer:
    """A copy of ``replayer`` for workers: the frozen embedder, no store, an empty cache, and
    progress lines only when the parent writes lines (several bars would overwrite each
    other)."""
    out = copy.copy(replayer)
    vars(out).pop("last_store_", None)
    vars(out).pop("remembered_", None)  # a worker remembers the entity candidates itself
    out.cache = {}
    out.embedder = embedder
    if replayer._vectors is not None and isinstance(embedder, FrozenEmbedder):
        # the memories' vectors are rows of the frozen table: shipped once, not twice
        table = embedder.table(replayer._vectors)
        if table is not None:
            out._vectors = table
    out.embedders = {name: _frozen_extra(replayer, name, emb)
                     for name, emb in replayer.embedders.items()}
    out.prepared_ = {}  # shipped inside the frozen embedders
    # Workers write whole lines (interleaved with the parent's) but never a bar.
    out.progress = "lines" if resolve_mode(replayer.progress) == "lines" else False
    return out


def embeds_other_texts(pipelines: Sequence[Pipeline]) -> bool:
    """Whether a stage of the pipelines may embed texts other than the queries and memories
    (``Stage.embeds_other_texts``; pipeline and parallel steps are judged by what is in
    them): :func:`run_tasks` then probes with the first task before shipping vectors."""
    return any(
        stage.embeds_other_texts
        for pipeline in pipelines
        for _, stage in pipeline.named_stages()
        if not isinstance(stage, (Pipeline, Parallel))
    )


def run_tasks(
    job: Any,
    fn: Any,
    tasks: Sequence[Any],
    executor: str | Executor,
    *,
    probe: bool = True,
    progress: Progress | None = None,
    meanwhile: Meanwhile | None = None,
    idle: Meanwhile | None = None,
) -> list[Any]:
    """Run ``fn(job, task)`` for every task, in task order, on ``executor``.

    Embeddings are computed once, in this process, and shipped to the workers frozen (a
    :class:`~memlab.embed.frozen.FrozenEmbedder`), so no worker loads the model: with ``probe``
    the first task runs here and every text it embeds (memories, queries, and whatever its
    stages ask for, such as MaxP's sentences or masked queries) is frozen; without, only the
    replayer's memories and queries are (a worker asks the wrapped embedder, e.g. the disk
    cache, for anything else). ``job.replayer.embedder`` must be a
    :class:`~memlab.embed.frozen.RecordingEmbedder`.

    ``progress`` (a running :class:`~memlab.progress.Progress` over the tasks) counts each task
    that runs in this process as it ends, and the others when the executor returns; its
    heartbeat reports while workers run.

    ``meanwhile`` and ``idle`` are handed to the executor's ``map`` (:meth:`Executor.map`):
    what this process, and each worker once it has no task left, loads for the work that
    follows the tasks. Both are skipped when the tasks run here.
    """
    ex = make_executor(executor) if isinstance(executor, str) else executor
    if not tasks:
        return []

    def here(task: Any) -> Any:
        out = fn(job, task)
        if progress is not None:
            progress.update()
        return out

    if isinstance(ex, SerialExecutor) or len(tasks) == 1:
        return [here(t) for t in tasks]
    done: list[Any] = []
    if probe:
        done.append(here(tasks[0]))
        tasks = tasks[1:]
    else:
        job.replayer.prepare()
    frozen = job.replayer.embedder.freeze()
    shipped = dataclasses.replace(job, replayer=_shippable(job.replayer, frozen))
    # an executor of another package may take neither
    extra = {k: v for k, v in (("meanwhile", meanwhile), ("idle", idle)) if v is not None}
    rest = ex.map(fn, shipped, tasks, **extra)
    if progress is not None:
        progress.update(len(rest))
    return [*done, *rest]


def bootstrap_interval(
    values: np.ndarray, *, n_resamples: int = 1000, seed: int = 0, level: float = 0.95
) -> tuple[float, float]:
    """Percentile bootstrap interval of the mean (Efron 1979), resampling queries."""
    v = np.asarray(values, dtype=np.float64)
    if v.size == 0:
        return float("nan"), float("nan")
    rng = np.random.default_rng(seed)
    means = v[rng.integers(0, v.size, size=(n_resamples, v.size))].mean(axis=1)
    lo, hi = np.quantile(means, [(1 - level) / 2, 1 - (1 - level) / 2])
    return round(float(lo), 6), round(float(hi), 6)


def edge_warnings(grid: Mapping[str, Sequence[Any]], best: Mapping[str, Any]) -> list[str]:
    """A warning for each numeric constant whose best value is the grid's smallest or largest."""
    out = []
    for name, values in grid.items():
        nums = [v for v in values if isinstance(v, int | float) and not isinstance(v, bool)]
        if len(nums) != len(values) or len(set(nums)) < 2:
            continue
        lo, hi = min(nums), max(nums)
        if best[name] in (lo, hi):
            side = "smallest" if best[name] == lo else "largest"
            out.append(
                f"best {name}={best[name]} is the {side} value of the grid ({lo} … {hi}): "
                "the optimum may lie outside it; widen the grid"
            )
    return out


def _better_order(values: Sequence[float], higher: bool) -> list[int]:
    """Indices from best to worst (ties: grid order; NaN last)."""

    def key(i: int) -> tuple[bool, float, int]:
        v = values[i]
        bad = v != v
        return (bad, 0.0 if bad else (-v if higher else v), i)

    return sorted(range(len(values)), key=key)


def _paired_rows(
    per_query: pl.DataFrame,
    best: int,
    others: Sequence[tuple[str, int]],
    points: Sequence[dict[str, Any]],
    defaults: dict[str, Any] | None,
    *,
    seed: int,
    n_resamples: int,
) -> pl.DataFrame:
    """Paired tests of point ``best`` against each ``(label, point)`` on ``per_query``."""
    tests = ("t", "wilcoxon", "permutation")
    parts = []
    for label, other in others:
        frame = pl.concat(
            [
                per_query.filter(pl.col("point") == best).with_columns(pipeline=pl.lit("best")),
                per_query.filter(pl.col("point") == other).with_columns(pipeline=pl.lit(label)),
            ]
        ).select("pipeline", "qid", "metric", "value")
        comp = compare(
            frame, baseline=label, tests=tests, correction="none", seed=seed,
            n_resamples=n_resamples,
        )
        params = points[other] if other >= 0 else defaults or {}
        parts.append(
            comp.with_columns(
                against=pl.lit(label),
                against_params=pl.lit(json.dumps({k: _cell(v) for k, v in params.items()})),
            )
        )
    if not parts:
        return pl.DataFrame()
    out = pl.concat(parts).rename({"baseline_mean": "other_mean", "mean": "best_mean"})
    out = out.with_columns(
        pl.Series(f"p_{t}_adj", correct_pvalues(out[f"p_{t}"].to_numpy(), "holm"))
        for t in tests
    ).with_columns(significant=pl.col("p_t_adj").fill_nan(None).lt(0.05).fill_null(False))
    keep = ["against", "against_params", "metric", "n", "best_mean", "other_mean", "delta",
            "wins", "losses", "ties"]
    return out.select(keep + [c for c in out.columns if c.startswith("p_")] + ["significant"])


def run_sweep(
    dataset: str | Path | Dataset,
    pipeline: str | Pipeline,
    grid: Mapping[str, Sequence[Any]],
    *,
    metric: str = "R_all@10",
    metrics: Sequence[str] = DEFAULT_METRICS,
    seed: int = 0,
    test_fraction: float = 0.5,
    split_by: str = "query",
    repeats: int = 5,
    embedder: Any | None = None,
    generator: Any | None = None,
    out: str | Path | None = None,
    progress: bool | str | None = None,
    exclude_tags: Sequence[str] = ("adversarial",),
    replay: ReplayConfig | None = None,
    executor: str | Executor = "joblib",
    n_jobs: int | None = None,
    n_resamples: int = 10_000,
) -> SweepResult:
    """Evaluate every grid point; choose on the train split, report on the test split.

    Args:
        dataset: A dataset or its directory.
        pipeline: A pipeline or its TOML config.
        grid: ``{"stage__param": [values]}``.
        metric: The selection metric (its direction comes from the metric registry).
        metrics: Further metrics to tabulate.
        seed: Seed of the first train/test split; split ``r`` uses ``seed + r``.
        test_fraction: Share of queries held out.
        split_by: ``"query"`` (each query on its own) or ``"client"`` (each client's queries
            together; see :func:`~memlab.eval.experiment.split_queries`).
        repeats: Seeded splits; the spread of the held-out score over them is reported.
            Splits that leave one side empty are skipped (with a warning), except the first.
        embedder: Embedder (default: MiniLM behind the disk cache).
        generator: Generator for stages that need one.
        out: Write the results here (atomically).
        progress: Progress (:mod:`memlab.progress`): ``None`` = a bar in a terminal, lines
            otherwise; ``False`` = none; ``"lines"`` = lines only.
        exclude_tags: Queries with these tags are not scored.
        replay: The replay configuration (default: the dataset's ``[replay]`` defaults).
        executor: ``"serial"``, ``"joblib"`` (local cores), ``"ray"`` or an executor object;
            results are identical whichever runs them.
        n_jobs: Jobs of the joblib executor, this process included (default: every
            core).
        n_resamples: Resamples of the permutation test.
    """
    started = time.time()
    if out is not None:
        check_output_dir(out, kinds=("sweep",))  # refuse before the expensive part
    names = check_metrics(list(dict.fromkeys([metric, *metrics])))
    metric = names[0]
    higher = higher_is_better(metric)
    if isinstance(repeats, bool) or not isinstance(repeats, int) or repeats < 1:
        raise ValueError(f"repeats must be an int >= 1, got {repeats!r}")
    ex = make_executor(executor, n_jobs=n_jobs) if isinstance(executor, str) else executor
    base = pipeline.clone() if isinstance(pipeline, Pipeline) else load_pipeline(pipeline)
    if not grid:
        raise ValueError("the grid is empty: give at least one stage__param=values")
    points = grid_points(grid)
    ds = dataset if isinstance(dataset, Dataset) else load_dataset(Path(dataset))
    config = replay if replay is not None else ReplayConfig.from_dataset(ds)
    # every point's pipeline, which rejects unknown names before any work (a point may also
    # name a stage's own embedder: the replayer embeds with it once, here)
    variants = []
    for point in points:
        pipe_params, replay_params = split_point(point)
        variants.append(base.clone().set_params(**pipe_params))
        config.with_params(_where="--grid", **replay_params)
    splits: list[tuple[int, list[Query], list[Query]]] = []
    warnings: list[str] = []
    for r in range(repeats):
        train, test = split_queries(
            ds.queries, test_fraction=test_fraction, seed=seed + r, by=split_by
        )
        if train and test:
            splits.append((seed + r, train, test))
        elif r == 0:
            side = "train" if not train else "held-out"
            raise ValueError(
                f"the split by {split_by} with seed {seed} leaves no {side} queries "
                f"({len(ds.queries)} queries); try another --seed or test fraction"
            )
        else:
            warnings.append(f"split seed {seed + r} leaves one side empty: skipped")
    all_params = base.get_params()
    defaults = {k: all_params[k] for k in grid if k in all_params}
    default_i = next((i for i, p in enumerate(points) if p == defaults), -1)
    learned = bool(learnable_stages(base))
    fits: list[int | None] = list(range(len(splits))) if learned else [None]
    tasks: list[tuple[int, dict[str, Any], int | None]] = [
        (i, point, f) for f in fits for i, point in enumerate(points)
    ]
    if default_i < 0 and len(defaults) == len(grid):
        tasks += [(-1, defaults, f) for f in fits]
    # Stages that embed other texts (sentences, masked queries): the first task runs here to
    # record them, and the workers take the rest; otherwise the workers take every task.
    probe = embeds_other_texts([base, *variants])
    if len(tasks) - probe > 1:  # every input is checked: workers start while data is prepared
        warm_workers(ex, [base, *variants], len(tasks) - probe, charts=out is not None)
    replayer = replayer_for(
        ds, [base, *variants], embedder=embedder, generator=generator, config=config,
        progress=progress,
    )
    replayer.embedder = RecordingEmbedder(replayer.embedder)
    job = _SweepJob(
        replayer=replayer,
        dataset=ds,
        base=base,
        metrics=names,
        exclude_tags=tuple(exclude_tags),
        trains=[s[1] for s in splits],
        config=config,
    )
    mode = "auto" if progress is None else progress
    with Progress(f"sweep {base.name}", len(tasks), unit="points", mode=mode) as bar:
        frames = run_tasks(
            job, _point_task, tasks, ex, probe=probe, progress=bar,
            **tail_work(ex, tests=True, charts=out is not None),
        )
    per_query = pl.concat(
        [
            f.with_columns(point=pl.lit(i), split=pl.lit(0 if s is None else s))
            for (i, _, s), f in zip(tasks, frames, strict=True)
        ]
    ).select("point", "split", "qid", "metric", "value")

    def scores(split: int, qids: set[str], m: str) -> dict[int, float]:
        sel = per_query.filter(
            (pl.col("split") == (split if learned else 0))
            & (pl.col("metric") == m)
            & pl.col("qid").is_in(qids)
        )
        means = dict(sel.group_by("point").agg(pl.col("value").mean()).iter_rows())
        return {i: round(float(means[i]), 6) if i in means else float("nan") for i in means}

    def nan_get(d: dict[int, float], i: int) -> float:
        return d.get(i, float("nan"))

    qid_sets = [({q.qid for q in tr}, {q.qid for q in te}) for _, tr, te in splits]
    repeat_rows = []
    test_by_split = []
    for r, (s_seed, tr, te) in enumerate(splits):
        train_s, test_s = scores(r, qid_sets[r][0], metric), scores(r, qid_sets[r][1], metric)
        if not any(v == v for v in train_s.values()):
            raise ValueError(unscored_split("sweep", metric, len(tr), split_by, s_seed,
                                            "--metric, --seed or --repeats"))
        test_by_split.append(test_s)
        order = _better_order([nan_get(train_s, i) for i in range(len(points))], higher)
        b = order[0]
        repeat_rows.append(
            {
                "split": r,
                "seed": s_seed,
                "n_train": len(tr),
                "n_test": len(te),
                "best_point": b,
                "best_params": json.dumps({k: _cell(v) for k, v in points[b].items()}),
                "train": nan_get(train_s, b),
                "test": nan_get(test_s, b),
            }
        )
    train0, test0 = qid_sets[0]
    rows: list[dict[str, Any]] = [
        {f"param_{k}": _cell(v) for k, v in point.items()} for point in points
    ]
    for m in names:
        everything = scores(0, {q.qid for q in ds.queries}, m)
        tr_s, te_s = scores(0, train0, m), scores(0, test0, m)
        for i, row in enumerate(rows):
            row[m] = nan_get(everything, i)
            row[f"{m}_train"] = nan_get(tr_s, i)
            row[f"{m}_test"] = nan_get(te_s, i)
    held0 = per_query.filter(
        (pl.col("split") == 0) & (pl.col("metric") == metric) & pl.col("qid").is_in(test0)
    ).sort("point", "qid")
    for i, row in enumerate(rows):
        vals = np.array([t[i] for t in test_by_split if i in t and t[i] == t[i]])
        row[f"{metric}_test_mean"] = round(float(vals.mean()), 6) if vals.size else float("nan")
        row[f"{metric}_test_sd"] = (
            round(float(np.std(vals, ddof=1)), 6) if vals.size > 1 else float("nan")
        )
        lo, hi = bootstrap_interval(
            held0.filter(pl.col("point") == i)["value"].to_numpy(), seed=seed
        )
        row[f"{metric}_test_lo"], row[f"{metric}_test_hi"] = lo, hi
    results = pl.DataFrame(rows, strict=False)
    order = _better_order([r[f"{metric}_train"] for r in rows], higher)
    best_i = order[0]
    train_values = {r[f"{metric}_train"] for r in rows}
    if len(points) > 1 and len(train_values) == 1:
        # every point ties: the first is "best" by grid order, wherever it lies
        warnings = [
            f"every grid point scores {metric} {train_values.pop():.4f} on the train "
            "queries: the grid does not move it on this dataset"
        ] + warnings
    else:
        warnings = edge_warnings(grid, points[best_i]) + warnings
    others: list[tuple[str, int]] = []
    if default_i != best_i and len(defaults) == len(grid):
        others.append(("defaults", default_i))
    if len(order) > 1:
        others.append(("runner-up", order[1]))
    res = SweepResult(
        results=results,
        best_params=dict(points[best_i]),
        best_test=rows[best_i][f"{metric}_test"],
        best_train=rows[best_i][f"{metric}_train"],
        metric=metric,
        split_by=split_by,
        n_train=len(splits[0][1]),
        n_test=len(splits[0][2]),
        per_query=per_query,
        repeats=pl.DataFrame(repeat_rows),
        warnings=warnings,
    )
    charts = None
    if out is not None and charts_on_worker(ex):
        # The charts read no test: an idle worker renders them while the tests run here.
        charts = ex.submit(
            render_sweep_charts, dataclasses.replace(res, per_query=None), dict(grid)
        )
    res.tests = _paired_rows(
        held0, best_i, others, points, defaults, seed=seed, n_resamples=n_resamples
    ) if held0.height else pl.DataFrame()
    res.manifest = {
        "dataset": dataset_entry(ds),
        "pipeline": base.to_config(),
        "grid": {k: [_cell(v) for v in vs] for k, vs in grid.items()},
        "defaults": {k: _cell(v) for k, v in defaults.items()},
        "metric": metric,
        "higher_is_better": higher,
        "metrics": names,
        "seed": seed,
        "repeats": len(splits),
        "test_fraction": test_fraction,
        "split_by": split_by,
        "exclude_tags": sorted(set(exclude_tags)),
        "replay": config.to_dict(),
        "embedder": getattr(replayer.embedder, "model_id", type(replayer.embedder).__name__),
        "stage_embedders": {
            name: getattr(e, "model_id", type(e).__name__)
            for name, e in sorted(replayer.embedders.items())
        },
        "executor": type(ex).__name__,
        "n_jobs": n_jobs,
        "packages": package_versions(),
        "git_commit": git_commit(),
        "started_at": datetime.fromtimestamp(started, tz=UTC).isoformat(),
        "seconds": round(time.time() - started, 3),
    }
    if out is not None:
        res.out = write_sweep(
            res, Path(out), pipeline=base, grid=grid, seed=seed, dataset=ds, replay=config,
            rendered=None if charts is None else charts(),
        )
    return res


def dataset_entry(ds: Dataset) -> dict[str, Any]:
    """The manifest's description of a dataset (name, path, SHA-256 of its files, sizes)."""
    return {
        "name": ds.meta.get("name", Path(str(ds.path)).name),
        "path": str(ds.path),
        "sha256": ds.sha256(),
        "memories": sum(1 for op in ds.ops if op.op == "store"),
        "operations": len(ds.ops),
        "queries": len(ds.queries),
    }


def _varied(grid: Mapping[str, Sequence[Any]]) -> list[str]:
    return [k for k, v in grid.items() if len({json.dumps(_cell(x)) for x in v}) > 1]


def sweep_chart(result: SweepResult, param: str) -> alt.Chart:
    """The selection metric against one constant, the others at their best values: train line,
    held-out mean over the splits with a ± one standard deviation band."""
    import altair as alt  # on first use: a process that renders no chart never loads it

    col, m = f"param_{param}", result.metric
    data = _slice(result, [param]).select(
        col,
        pl.col(f"{m}_train").alias("train"),
        pl.col(f"{m}_test_mean").alias("test"),
        (pl.col(f"{m}_test_mean") - pl.col(f"{m}_test_sd").fill_nan(0)).alias("lo"),
        (pl.col(f"{m}_test_mean") + pl.col(f"{m}_test_sd").fill_nan(0)).alias("hi"),
    )
    kind = "Q" if data.schema[col].is_numeric() else "O"
    long = data.unpivot(index=[col, "lo", "hi"], on=["train", "test"], variable_name="split")
    x = alt.X(f"{col}:{kind}", title=param)
    lines = (
        alt.Chart(long)
        .mark_line(point=True)
        .encode(
            x=x,
            y=alt.Y("value:Q", title=m, scale=alt.Scale(zero=False)),
            color=alt.Color("split:N", title=None),
            tooltip=[col, "split", alt.Tooltip("value:Q", format=".4f")],
        )
    )
    band = alt.Chart(data).mark_errorbar(color="#f58518").encode(
        x=x, y=alt.Y("lo:Q", title=m), y2="hi:Q"
    )
    return (band + lines).properties(
        width=320, height=220, title=f"held-out: mean ± sd over {_n_repeats(result)} splits"
    )


def _n_repeats(result: SweepResult) -> int:
    return 0 if result.repeats is None else result.repeats.height


def _slice(result: SweepResult, params: Sequence[str]) -> pl.DataFrame:
    """Rows whose other constants sit at the best point's values."""
    frame = result.results
    for k, v in result.best_params.items():
        if k not in params:
            frame = frame.filter(pl.col(f"param_{k}") == _cell(v))
    return frame


def heatmap_chart(result: SweepResult, a: str, b: str) -> alt.Chart:
    """Held-out mean of the selection metric over a pair of constants (others at their best)."""
    import altair as alt

    m = f"{result.metric}_test_mean"
    data = _slice(result, [a, b]).select(
        pl.col(f"param_{a}").cast(pl.String).alias(a),
        pl.col(f"param_{b}").cast(pl.String).alias(b),
        pl.col(m).alias("value"),
        pl.col(f"param_{a}").alias("_sa"),
        pl.col(f"param_{b}").alias("_sb"),
    )
    order_a = data.sort("_sa")[a].unique(maintain_order=True).to_list()
    order_b = data.sort("_sb")[b].unique(maintain_order=True).to_list()
    data = data.drop("_sa", "_sb")
    base = alt.Chart(data).encode(
        x=alt.X(f"{a}:O", sort=order_a, title=a), y=alt.Y(f"{b}:O", sort=order_b, title=b)
    )
    rect = base.mark_rect().encode(
        color=alt.Color("value:Q", title=f"{result.metric} held-out", scale=alt.Scale(
            scheme="viridis")),
        tooltip=[a, b, alt.Tooltip("value:Q", format=".4f")],
    )
    text = base.mark_text(fontSize=11).encode(
        text=alt.Text("value:Q", format=".3f"),
        color=alt.condition(
            alt.datum.value > (data["value"].mean() or 0), alt.value("black"), alt.value("white")
        ),
    )
    others = [k for k in result.best_params if k not in (a, b)]
    title = f"mean over {_n_repeats(result)} splits" + (
        f"; {', '.join(f'{k}={_cell(result.best_params[k])}' for k in others)}" if others else ""
    )
    return (rect + text).properties(width=alt.Step(56), height=alt.Step(32), title=title)


def sweep_charts(result: SweepResult, grid: Mapping[str, Sequence[Any]]) -> dict[str, str]:
    """The Vega-Lite specs of a sweep's charts, by file stem and in report order:
    ``sweep_<param>`` when one constant varies, ``heatmap_<a>_<b>`` for each pair of varied
    constants. They read the points' table, the best point and the splits, not the tests."""
    charts: dict[str, alt.TopLevelMixin] = {
        stem: sweep_chart(result, *params) if len(params) == 1 else heatmap_chart(result, *params)
        for stem, (_, params) in _chart_titles(grid).items()
    }
    return {stem: chart.to_json(validate=False) for stem, chart in charts.items()}


def _chart_titles(grid: Mapping[str, Sequence[Any]]) -> dict[str, tuple[str, tuple[str, ...]]]:
    """Each chart of a sweep by file stem, in report order: its title in ``report.md`` and the
    constants it plots (one line chart when one constant varies, a heatmap per pair)."""
    varied = _varied(grid)
    titles = {f"sweep_{varied[0]}": (varied[0], (varied[0],))} if len(varied) == 1 else {}
    for a, b in itertools.combinations(varied, 2):
        titles[f"heatmap_{a}_{b}"] = (f"{a} × {b}", (a, b))
    return titles


def render_sweep_charts(
    result: SweepResult, grid: Mapping[str, Sequence[Any]]
) -> dict[str, tuple[str, bytes]]:
    """:func:`~memlab.eval.report.render_specs` of :func:`sweep_charts`, in one call that an
    idle worker can make while this process runs the paired tests."""
    return render_specs(sweep_charts(result, grid))


def write_sweep(
    result: SweepResult,
    out: Path,
    *,
    pipeline: Pipeline,
    grid: Mapping[str, Sequence[Any]],
    seed: int,
    dataset: Dataset,
    replay: ReplayConfig | None = None,
    rendered: Mapping[str, tuple[str, bytes]] | None = None,
) -> Path:
    """Write ``results.parquet``, ``per_query.parquet``, ``repeats.parquet``, ``tests.parquet``,
    ``sweep.json``, ``manifest.json``, ``report.md`` and charts, atomically.

    Everything but ``manifest.json`` (times, executor) is byte-identical between runs of the
    same dataset, pipeline, grid and seeds, whichever executor ran them. ``rendered``: the
    charts already rendered (:func:`render_sweep_charts`), else they are rendered here.
    """
    if rendered is None:
        rendered = render_sweep_charts(result, grid)
    mean, sd = result.chosen_test
    with atomic_directory(out, kind="sweep") as tmp:
        result.results.write_parquet(tmp / "results.parquet")
        if result.per_query is not None:
            result.per_query.write_parquet(tmp / "per_query.parquet")
        if result.repeats is not None:
            result.repeats.write_parquet(tmp / "repeats.parquet")
        tests = result.tests if result.tests is not None else pl.DataFrame()
        tests.write_parquet(tmp / "tests.parquet")
        summary = {
            "dataset": dataset.meta.get("name"),
            "pipeline": pipeline.to_config(),
            "grid": {k: list(v) for k, v in grid.items()},
            "seed": seed,
            "repeats": _n_repeats(result),
            "split_by": result.split_by,
            "n_train": result.n_train,
            "n_test": result.n_test,
            "metric": result.metric,
            "best_params": result.best_params,
            "best_train": result.best_train,
            "best_test": result.best_test,
            "chosen_test_mean": mean,
            "chosen_test_sd": sd,
            "tests": tests.to_dicts(),
            "warnings": result.warnings,
        }
        (tmp / "sweep.json").write_text(
            json.dumps(summary, indent=2, sort_keys=True) + "\n", encoding="utf-8"
        )
        (tmp / "manifest.json").write_text(
            json.dumps(result.manifest, indent=2, sort_keys=True, default=str) + "\n",
            encoding="utf-8",
        )
        lines = [
            f"# Sweep of `{pipeline.name}` on {dataset.meta.get('name')}",
            "",
            f"Queries split by {result.split_by} (seed {seed}): {result.n_train} train, "
            f"{result.n_test} held out.",
            "",
            f"Best on the train split ({result.metric}, "
            f"{'higher' if higher_is_better(result.metric) else 'lower'} is better): "
            + ", ".join(f"`{k}={v}`" for k, v in result.best_params.items())
            + f" — train {result.best_train:.4f}, held-out test {result.best_test:.4f}.",
            "",
            f"Over {_n_repeats(result)} seeded splits (seeds {seed}…), the point chosen on each "
            f"train half scores {mean:.4f} ± {sd:.4f} (sd) on its held-out half.",
        ]
        lines += [""] + [f"> **Warning:** {w}" for w in result.warnings] if result.warnings else []
        if tests.height:
            lines += [
                "",
                "## Paired tests on the held-out queries (split 0; Holm across rows)",
                "",
                markdown_table(tests.drop("against_params")),
            ]
        lines += ["", "## Points", "", markdown_table(result.results)]
        for stem, (title, _) in _chart_titles(grid).items():
            files = write_rendered(rendered[stem], tmp / stem)
            lines += ["", f"![{title}]({files[0]}) ([svg]({files[1]}))"]
        (tmp / "report.md").write_text("\n".join(lines) + "\n", encoding="utf-8")
    return out.resolve()
