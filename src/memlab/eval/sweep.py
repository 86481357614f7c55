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

import itertools
import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import altair as alt
import polars as pl

from memlab.datasets.format import Dataset, load_dataset
from memlab.eval.experiment import (
    DEFAULT_METRICS,
    check_metrics,
    fit_learned_stages,
    replayer_for,
    score_rankings,
    split_queries,
)
from memlab.eval.metrics import higher_is_better
from memlab.eval.replay import ReplayConfig, progress_enabled
from memlab.eval.report import markdown_table, save_chart
from memlab.io import atomic_directory, check_output_dir
from memlab.pipeline import Pipeline, load_pipeline


def _parse_value(text: str) -> Any:
    t = text.strip()
    if t.lower() in ("true", "false"):
        return t.lower() == "true"
    if t.lower() in ("none", "null"):
        return None
    for cast in (int, float):
        try:
            return cast(t)
        except ValueError:
            pass
    return t


def _split_values(text: str) -> list[str] | None:
    """Split at the commas outside brackets (``None`` when brackets do not pair up)."""
    parts, depth, start = [], 0, 0
    for i, ch in enumerate(text):
        if ch == "[":
            depth += 1
        elif ch == "]":
            depth -= 1
            if depth < 0:
                return None
        elif ch == "," and depth == 0:
            parts.append(text[start:i])
            start = i + 1
    if depth != 0:
        return None
    parts.append(text[start:])
    return parts


def _parse_item(text: str) -> Any:
    t = text.strip()
    if t.startswith("[") and t.endswith("]"):
        inner = _split_values(t[1:-1])
        if inner is None:
            raise ValueError(f"unpaired brackets in {t!r}")
        return tuple(_parse_item(v) for v in inner if v.strip())
    if "[" in t or "]" in t:
        raise ValueError(f"unpaired brackets in {t!r}")
    return _parse_value(t)


def parse_grid(expressions: Sequence[str]) -> dict[str, list[Any]]:
    """Parse ``stage__param=v1,v2,…`` expressions into a grid dict.

    A value in brackets is a tuple (``[0.7,0.3]`` → ``(0.7, 0.3)``), for list-valued
    constants such as fusion weights.

    Raises:
        ValueError: Naming the expression at fault.
    """
    grid: dict[str, list[Any]] = {}
    for expr in expressions:
        name, sep, values = expr.partition("=")
        name = name.strip()
        if not sep or "__" not in name or not values.strip():
            raise ValueError(
                f"bad grid expression {expr!r}: write stage__param=value1,value2 "
                "(e.g. rrf__k=10,30,60)"
            )
        if name in grid:
            raise ValueError(f"bad grid expression {expr!r}: {name} is given twice")
        items = _split_values(values)
        if items is None:
            raise ValueError(f"bad grid expression {expr!r}: unpaired brackets")
        try:
            parsed = [_parse_item(v) for v in items if v.strip()]
        except ValueError as error:
            raise ValueError(f"bad grid expression {expr!r}: {error}") from None
        if not parsed:
            raise ValueError(f"bad grid expression {expr!r}: no values")
        grid[name] = parsed
    return grid


REPLAY_PREFIXES: tuple[str, ...] = ("consolidation__", "replay__")


def split_point(point: Mapping[str, Any]) -> tuple[dict[str, Any], dict[str, Any]]:
    """``(pipeline parameters, replay parameters)`` of one grid point."""
    pipe = {k: v for k, v in point.items() if not k.startswith(REPLAY_PREFIXES)}
    replay = {k: v for k, v in point.items() if k.startswith(REPLAY_PREFIXES)}
    return pipe, replay


def grid_points(grid: Mapping[str, Sequence[Any]]) -> list[dict[str, Any]]:
    """The Cartesian product of a grid, in a stable order."""
    keys = list(grid)
    return [dict(zip(keys, combo, strict=True)) for combo in itertools.product(*grid.values())]


@dataclass
class SweepResult:
    """A sweep's results.

    Attributes:
        results: One row per point: ``param_*`` columns, then ``<metric>`` on all queries,
            ``<metric>_train`` and ``<metric>_test``.
        best_params: The point with the best train score: the highest, or the lowest for a
            lower-is-better metric such as ``tokens@10`` (ties: first in grid order).
        best_test: Its held-out score.
        best_train: Its train score.
        metric: The selection metric.
        split_by: How queries were split (``"query"`` or ``"client"``).
        n_train: Train queries.
        n_test: Held-out queries.
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


def _cell(value: Any) -> Any:
    """A grid value as a table cell (a tuple is shown as ``[a, b]`` text)."""
    if isinstance(value, tuple | list):
        return "[" + ", ".join(str(v) for v in value) + "]"
    return value


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
    embedder: Any | None = None,
    generator: Any | None = None,
    out: str | Path | None = None,
    progress: bool | None = None,
    exclude_tags: Sequence[str] = ("adversarial",),
    replay: ReplayConfig | None = None,
) -> SweepResult:
    """Evaluate every grid point; choose on the train split, report on the test split.

    Args:
        dataset: A dataset or its directory.
        pipeline: A pipeline or its TOML config.
        grid: ``{"stage__param": [values]}``; ``consolidation__…`` and ``replay__…`` names set
            the replay configuration.
        metric: The selection metric.
        metrics: Further metrics to tabulate.
        seed: Seed of the train/test split.
        test_fraction: Share of queries held out.
        split_by: ``"query"`` (each query on its own) or ``"client"`` (each client's queries
            together; see :func:`~memlab.eval.experiment.split_queries`).
        embedder: Embedder (default: MiniLM behind the disk cache).
        generator: Generator for stages that need one.
        out: Write the results here (atomically).
        progress: Show progress bars.
        exclude_tags: Queries with these tags are not scored.
        replay: The replay configuration (default: the dataset's ``[replay]`` defaults).
    """
    if out is not None:
        check_output_dir(out)  # refuse before the expensive part
    names = check_metrics(list(dict.fromkeys([metric, *metrics])))
    metric = names[0]
    base = pipeline.clone() if isinstance(pipeline, Pipeline) else load_pipeline(pipeline)
    if not grid:
        raise ValueError("the grid is empty: give at least one stage__param=values")
    points = grid_points(grid)
    ds = dataset if isinstance(dataset, Dataset) else load_dataset(Path(dataset))
    config = replay if replay is not None else ReplayConfig.from_dataset(ds)
    for point in points:  # reject unknown names before any work
        pipe_params, replay_params = split_point(point)
        base.clone().set_params(**pipe_params)
        config.with_params(_where="--grid", **replay_params)
    replayer = replayer_for(
        ds, [base], embedder=embedder, generator=generator, config=config, progress=progress
    )
    train, test = split_queries(ds.queries, test_fraction=test_fraction, seed=seed, by=split_by)
    if not train or not test:
        side = "train" if not train else "held-out"
        raise ValueError(
            f"the split by {split_by} with seed {seed} leaves no {side} queries "
            f"({len(ds.queries)} queries); try another --seed or test fraction"
        )
    train_ids, test_ids = {q.qid for q in train}, {q.qid for q in test}
    rows: list[dict[str, Any]] = []
    enabled = progress_enabled(progress)
    iterator: Any = points
    if enabled:
        from tqdm.auto import tqdm

        iterator = tqdm(points, desc=f"sweep {base.name}")
    for point in iterator:
        pipe_params, replay_params = split_point(point)
        pipe = base.clone().set_params(**pipe_params)
        replayer.config = config.with_params(_origin="override", **replay_params)
        fit_learned_stages(replayer, pipe, train)
        rep = replayer.run(pipe)
        pq = score_rankings(ds, rep, names, exclude_tags=exclude_tags)
        row: dict[str, Any] = {f"param_{k}": _cell(v) for k, v in point.items()}
        for m in names:
            vals = pq.filter(pl.col("metric") == m)
            row[m] = _mean(vals)
            row[f"{m}_train"] = _mean(vals.filter(pl.col("qid").is_in(train_ids)))
            row[f"{m}_test"] = _mean(vals.filter(pl.col("qid").is_in(test_ids)))
        rows.append(row)
    results = pl.DataFrame(rows, strict=False)
    sign = 1.0 if higher_is_better(metric) else -1.0  # a cost (tokens@k) is minimised
    best_i = max(range(len(rows)), key=lambda i: (sign * rows[i][f"{metric}_train"], -i))
    res = SweepResult(
        results=results,
        best_params=dict(points[best_i]),
        best_test=rows[best_i][f"{metric}_test"],
        best_train=rows[best_i][f"{metric}_train"],
        metric=metric,
        split_by=split_by,
        n_train=len(train),
        n_test=len(test),
    )
    replayer.config = config
    if out is not None:
        res.out = write_sweep(
            res, Path(out), pipeline=base, grid=grid, seed=seed, dataset=ds, replay=config
        )
    return res


def _mean(frame: pl.DataFrame) -> float:
    if frame.height == 0:
        return float("nan")
    return round(float(frame["value"].mean()), 6)


def sweep_chart(result: SweepResult, param: str) -> alt.Chart:
    """The selection metric against one constant (train and test lines; mean over others)."""
    col = f"param_{param}"
    data = (
        result.results.group_by(col)
        .agg(
            pl.col(f"{result.metric}_train").mean().alias("train"),
            pl.col(f"{result.metric}_test").mean().alias("test"),
        )
        .unpivot(index=col, on=["train", "test"], variable_name="split", value_name="value")
        .sort(col)
    )
    kind = "Q" if data.schema[col].is_numeric() else "N"
    return (
        alt.Chart(data)
        .mark_line(point=True)
        .encode(
            x=alt.X(f"{col}:{kind}", title=param),
            y=alt.Y("value:Q", title=result.metric),
            color=alt.Color("split:N"),
            tooltip=[col, "split", alt.Tooltip("value:Q", format=".4f")],
        )
        .properties(width=320, height=220)
    )


def write_sweep(
    result: SweepResult,
    out: Path,
    *,
    pipeline: Pipeline,
    grid: Mapping[str, Sequence[Any]],
    seed: int,
    dataset: Dataset,
    replay: ReplayConfig | None = None,
) -> Path:
    """Write ``results.parquet``, ``sweep.json``, ``report.md`` and plots, atomically."""
    with atomic_directory(out, kind="sweep") as tmp:
        result.results.write_parquet(tmp / "results.parquet")
        summary = {
            "dataset": dataset.meta.get("name"),
            "pipeline": pipeline.to_config(),
            "grid": {k: list(v) for k, v in grid.items()},
            "seed": seed,
            "split_by": result.split_by,
            "n_train": result.n_train,
            "n_test": result.n_test,
            "metric": result.metric,
            "best_params": result.best_params,
            "best_train": result.best_train,
            "best_test": result.best_test,
            "replay": None if replay is None else replay.to_dict(),
        }
        (tmp / "sweep.json").write_text(
            json.dumps(summary, indent=2, sort_keys=True) + "\n", encoding="utf-8"
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
            markdown_table(result.results),
        ]
        for param in grid:
            files = save_chart(sweep_chart(result, param), tmp / f"sweep_{param}")
            lines += ["", f"![{param}]({files[0]}) ([svg]({files[1]}))"]
        (tmp / "report.md").write_text("\n".join(lines) + "\n", encoding="utf-8")
    return out.resolve()
