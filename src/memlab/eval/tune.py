"""Tuning beyond grids: Optuna studies over pipeline constants (``memlab tune``).

Each trial is ``clone()`` + ``set_params()`` of one pipeline, replayed and scored on the **train**
queries of the same seeded split as :mod:`memlab.eval.sweep`; the best trial is then scored on the
held-out queries and compared, paired per query, with the pipeline's own defaults. The sampler is
TPE (Bergstra et al., "Algorithms for Hyper-Parameter Optimization", NeurIPS 2011), seeded.

The study lives in an Optuna RDB storage: ``sqlite:///OUT/study.db`` by default, or any URL
(``--storage postgresql://…``) so that several machines add trials to one study (each runs
``--trials`` more; ``--study-name`` names it).

``OUT`` is a memlab result directory of kind ``tune`` (:mod:`memlab.io`), published by the rule
of ``memlab sweep``: it must be missing, empty or an earlier tune directory (a directory memlab
did not write, a file, a symbolic link, the working directory, or a result of another kind such
as an ``eval`` run are refused before any work). Its marker claims ``study.db`` from the moment
the study is created, and the study is written in place, trial by trial, so an interrupted run
keeps its finished trials. The summary (``tune.json``, ``manifest.json``, ``best.toml``,
``trials.parquet``, the charts) is built in a hidden sibling and published atomically; the
files memlab did not write in ``OUT`` are never touched. **Continuing a study**: run
``memlab tune`` again with the same ``--out`` (and the same ``--pipeline``, ``--metric`` or
``--study-name``): the marker lets the directory be reused, the trials are added to its
``study.db`` and the summary is replaced by one over every trial. A study created in this run
that finished no trial is removed again with the directory, if the run made it.

Search spaces are written ``stage__param=KIND:…``::

    rrf__k=int:1:200:log          lifecycle__decay_factor=float:0.9:1.0
    mmr__lambda_=float:0:1        bm25__statistics=cat:store,scope

A range's bounds are finite numbers with ``low < high`` (``low > 0`` on a log scale). Before the
study is created (so a bad space leaves no ``study.db``), :func:`check_space` sets both bounds of
every range, and every value of a categorical space, on a copy of the pipeline: each must pass
the parameter's constraints and be writable to the pipeline's TOML configuration.
"""

from __future__ import annotations

import json
import math
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import altair as alt
import polars as pl

from memlab.datasets.format import Dataset, load_dataset
from memlab.eval.commands import SAMPLERS
from memlab.eval.experiment import (
    DEFAULT_METRICS,
    check_metrics,
    fit_learned_stages,
    git_commit,
    learnable_stages,
    package_versions,
    replayer_for,
    score_rankings,
    split_queries,
    unscored_split,
)
from memlab.eval.grid import _parse_value
from memlab.eval.replay import ReplayConfig
from memlab.eval.report import save_chart
from memlab.eval.stats import compare
from memlab.eval.sweep import dataset_entry, higher_is_better
from memlab.io import (
    OUTPUT_MARKER,
    OutputDirError,
    atomic_directory,
    atomic_write_text,
    check_output_dir,
    first_line,
    output_kind,
    owned_entries,
    write_marker,
)
from memlab.pipeline import Pipeline, load_pipeline

STUDY_FILE = "study.db"
"""The study's SQLite file in a tune directory (the default storage)."""


def check_tune_dir(out: str | Path, *, what: str = "output directory") -> Path:
    """Refuse a tune output directory before any work (see the module docstring).

    Returns:
        The absolute path.

    Raises:
        OutputDirError: ``out`` is not missing, empty or a tune directory memlab wrote, or its
            ``study.db`` is not memlab's.
    """
    path = check_output_dir(out, what=what)
    if not path.exists() or not any(path.iterdir()):
        return path
    kind = output_kind(path)
    if kind != "tune":
        raise OutputDirError(
            f"{what} {out}: is a memlab {kind} result, not a tune directory; give a new "
            "directory (a tune directory holds its study, which later runs continue)"
        )
    study = path / STUDY_FILE
    owned = owned_entries(path)
    if study.is_symlink() or (study.exists() and (owned is None or not owned(STUDY_FILE))):
        raise OutputDirError(
            f"{what} {out}: holds a {STUDY_FILE} memlab did not write; move it away, or give "
            "it as --storage sqlite:///PATH"
        )
    return path


def _sqlite_file(url: str) -> Path | None:
    """The file of an SQLite storage URL (``None``: another database, or in memory)."""
    head = "sqlite:///"
    if not url.startswith(head) or url == head or ":memory:" in url:
        return None
    return Path(url[len(head):].partition("?")[0]).resolve()


def _claim(out: Path, names: Sequence[str]) -> tuple[bool, bool]:
    """Make ``out`` (missing or empty, or a tune directory) a marked tune directory claiming
    ``names`` besides what it claims already.

    Returns:
        Whether this call created ``out``, and whether it was missing or empty.
    """
    created = not out.exists()
    out.mkdir(parents=True, exist_ok=True)
    empty = not any(out.iterdir())
    owned = None if empty else owned_entries(out)
    present = [e.name for e in out.iterdir() if e.name != OUTPUT_MARKER]
    claimed = [n for n in present if owned is not None and owned(n)]
    write_marker(out, "tune", sorted({*claimed, *names}))
    return created, empty


def _release(out: Path, study_file: Path | None, created: bool, empty: bool) -> None:
    """Undo :func:`_claim` for a study that finished no trial: its ``study.db`` (when this
    run created it), the marker (when ``out`` was missing or empty) and ``out`` itself (when
    this run made it and it holds nothing else)."""
    if study_file is not None:
        for suffix in ("", "-journal", "-wal", "-shm"):
            study_file.with_name(study_file.name + suffix).unlink(missing_ok=True)
    if empty:
        (out / OUTPUT_MARKER).unlink(missing_ok=True)
    if created:
        try:
            out.rmdir()
        except OSError:
            pass  # something else is in it now: leave it


def parse_space(expressions: Sequence[str]) -> dict[str, Any]:
    """Parse ``stage__param=int:lo:hi[:log]``, ``float:lo:hi[:log]`` or ``cat:a,b,c``.

    Returns:
        ``{name: optuna distribution}``.

    Raises:
        ValueError: Naming the expression at fault.
    """
    import optuna.distributions as od

    space: dict[str, Any] = {}
    for expr in expressions:
        name, sep, spec = expr.partition("=")
        name = name.strip()
        kind, _, rest = spec.partition(":")
        hint = "write stage__param=int:1:200[:log], float:0.9:1.0[:log] or cat:a,b"
        if not sep or "__" not in name or not rest:
            raise ValueError(f"bad space expression {expr!r}: {hint}")
        if name in space:
            raise ValueError(f"bad space expression {expr!r}: {name} is given twice")
        try:
            if kind == "cat":
                choices = [_parse_value(v) for v in rest.split(",") if v.strip()]
                if not choices:
                    raise ValueError("no choices")
                space[name] = od.CategoricalDistribution(choices)
                continue
            parts = rest.split(":")
            log = len(parts) == 3 and parts[2] == "log"
            if len(parts) not in (2, 3) or (len(parts) == 3 and not log):
                raise ValueError(hint)
            if kind == "int":
                lo, hi = int(parts[0]), int(parts[1])
                _check_bounds(lo, hi, log)
                space[name] = od.IntDistribution(lo, hi, log=log)
            elif kind == "float":
                lo_f, hi_f = float(parts[0]), float(parts[1])
                _check_bounds(lo_f, hi_f, log)
                space[name] = od.FloatDistribution(lo_f, hi_f, log=log)
            else:
                raise ValueError(f"unknown kind {kind!r} (int, float, cat)")
        except ValueError as error:
            raise ValueError(f"bad space expression {expr!r}: {error}") from None
    return space


def _check_bounds(low: Any, high: Any, log: bool) -> None:
    """Raise ``ValueError`` unless ``low < high`` are finite numbers (``low > 0`` when ``log``)."""
    for what, value in (("low", low), ("high", high)):
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise ValueError(f"the {what} bound {value!r} is not a number")
        if not math.isfinite(value):
            raise ValueError(f"the {what} bound {value!r} is not a finite number")
    if not low < high:
        raise ValueError(f"the low bound {low!r} must be below the high bound {high!r}")
    if log and low <= 0:
        raise ValueError(f"a log scale needs a low bound above 0, got {low!r}")


def check_space(pipeline: Pipeline, space: Mapping[str, Any]) -> None:
    """Check a search space against ``pipeline`` before any work.

    Every range's bounds must be finite with ``low < high`` (``low > 0`` on a log scale); both
    bounds of a range and every value of a categorical space are set on a copy of the pipeline
    (the parameter's constraints) and the copy written as a configuration (``best.toml`` and
    the run manifest must be able to hold it).

    Raises:
        ValueError: Naming the parameter and the value at fault.
    """
    for name, dist in space.items():
        if hasattr(dist, "choices"):
            values = list(dist.choices)
        elif hasattr(dist, "low") and hasattr(dist, "high"):
            try:
                _check_bounds(dist.low, dist.high, bool(getattr(dist, "log", False)))
            except ValueError as error:
                raise ValueError(f"search space {name}: {error}") from None
            values = [dist.low, dist.high]
        else:
            raise ValueError(f"search space {name}: {dist!r} is not a range or a choice")
        for value in values:
            try:
                pipeline.clone().set_params(**{name: value}).to_config()
            except (TypeError, ValueError) as error:
                raise ValueError(f"search space {name}: value {value!r}: {error}") from None


@dataclass
class TuneResult:
    """A study's outcome.

    Attributes:
        best_params: The best trial's parameters (on the train split).
        best_train: Its train score.
        best_test: Its held-out score.
        defaults_test: The pipeline's defaults on the held-out queries.
        tests: Paired tests of the best trial against the defaults on the held-out queries.
        trials: :func:`trials_table` of the study (every machine's trials).
        pipeline: The tuned pipeline.
    """

    best_params: dict[str, Any]
    best_train: float
    best_test: float
    defaults_test: float
    metric: str
    tests: pl.DataFrame
    trials: pl.DataFrame
    pipeline: Pipeline
    storage: str = ""
    study_name: str = ""
    out: Path | None = None
    manifest: dict[str, Any] = field(default_factory=dict)


def run_tune(
    dataset: str | Path | Dataset,
    pipeline: str | Pipeline,
    space: Mapping[str, Any],
    *,
    trials: int = 100,
    metric: str = "R_all@10",
    seed: int = 0,
    test_fraction: float = 0.5,
    split_by: str = "query",
    sampler: str = "tpe",
    storage: str | None = None,
    study_name: str | None = None,
    out: str | Path | None = None,
    embedder: Any | None = None,
    generator: Any | None = None,
    exclude_tags: Sequence[str] = ("adversarial",),
    replay: ReplayConfig | None = None,
    n_resamples: int = 10_000,
    progress: bool | str | None = None,
) -> TuneResult:
    """Run (or continue) an Optuna study of ``pipeline`` over ``space``.

    Args:
        dataset: A dataset or its directory.
        pipeline: A pipeline or its TOML config.
        space: ``{"stage__param": optuna distribution}`` (see :func:`parse_space`).
        trials: Trials this call adds to the study.
        metric: The objective (maximised or minimised by its direction), on train queries.
        seed: Seed of the split and of the sampler.
        test_fraction: Share of queries held out.
        split_by: ``"query"`` or ``"client"`` (as in sweeps).
        sampler: ``"tpe"`` (default) or ``"random"``.
        storage: Optuna RDB URL (default: ``sqlite:///OUT/study.db``; in memory without ``out``).
        study_name: Name of the study in the storage (default: ``PIPELINE-METRIC``).
        out: Output directory: ``study.db``, ``tune.json``, ``manifest.json``, ``best.toml``,
            ``trials.parquet``, ``history.png/svg``, ``importance.png/svg``.
        embedder: Embedder (default: MiniLM behind the disk cache).
        generator: Generator for stages that need one.
        exclude_tags: Queries with these tags are not scored.
        replay: The replay configuration (default: the dataset's ``[replay]`` defaults).
        n_resamples: Resamples of the permutation test.
        progress: Progress (:mod:`memlab.progress`): ``None`` = a bar in a terminal, lines
            otherwise; ``False`` = none; ``"lines"`` = lines only.
    """
    import optuna

    started = time.time()
    [metric] = check_metrics([metric])
    names = check_metrics(list(dict.fromkeys([metric, *DEFAULT_METRICS])))
    higher = higher_is_better(metric)
    if isinstance(trials, bool) or not isinstance(trials, int) or trials < 1:
        raise ValueError(f"trials must be an int >= 1, got {trials!r}")
    if sampler not in SAMPLERS:
        raise ValueError(f"unknown sampler {sampler!r}; known: {', '.join(SAMPLERS)}")
    if not space:
        raise ValueError("the search space is empty: give at least one --space")
    out_dir = check_tune_dir(out) if out is not None else None  # before any work
    base = pipeline.clone() if isinstance(pipeline, Pipeline) else load_pipeline(pipeline)
    params = base.get_params()
    check_space(base, space)  # bounds, constraints, writability: before any work or study.db
    ds = dataset if isinstance(dataset, Dataset) else load_dataset(Path(dataset))
    train, test = split_queries(ds.queries, test_fraction=test_fraction, seed=seed, by=split_by)
    if not train or not test:
        raise ValueError(
            f"the split by {split_by} with seed {seed} leaves no "
            f"{'train' if not train else 'held-out'} queries; try another --seed"
        )
    train_ids, test_ids = {q.qid for q in train}, {q.qid for q in test}
    config = replay if replay is not None else ReplayConfig.from_dataset(ds)
    replayer = replayer_for(
        ds, [base], embedder=embedder, generator=generator, config=config, progress=progress
    )
    learned = bool(learnable_stages(base))

    def per_query(point: Mapping[str, Any]) -> pl.DataFrame:
        pipe = base.clone().set_params(**point)
        if learned:
            fit_learned_stages(replayer, pipe, train)
        rep = replayer.run(pipe)
        return score_rankings(ds, rep, names, exclude_tags=exclude_tags)

    def mean(frame: pl.DataFrame, qids: set[str]) -> float:
        vals = frame.filter((pl.col("metric") == metric) & pl.col("qid").is_in(qids))["value"]
        return float("nan") if vals.len() == 0 else round(float(vals.mean()), 6)

    unscored: list[str] = []

    def objective(trial: Any) -> float:
        point = {name: _suggest(trial, name, dist) for name, dist in space.items()}
        value = mean(per_query(point), train_ids)
        if value != value:
            # Optuna would record a failed trial, log its traceback and go on, then find no
            # best trial: the study stops here and the problem is raised after it.
            unscored.append(unscored_split("tune", metric, len(train), split_by, seed,
                                           "--metric or --seed"))
            trial.study.stop()
            raise optuna.TrialPruned(unscored[0])
        return value

    if storage is None and out_dir is not None:
        storage = f"sqlite:///{(out_dir / STUDY_FILE).resolve()}"
    study_name = study_name or f"{base.name}-{metric}"
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    samplers = {"tpe": optuna.samplers.TPESampler, "random": optuna.samplers.RandomSampler}
    # The study's file in OUT is memlab's from before it exists: the directory is marked first.
    in_out = out_dir is not None and _sqlite_file(storage or "") == (out_dir / STUDY_FILE)
    created, empty, new_study = False, False, None
    if out_dir is not None:
        new_study = out_dir / STUDY_FILE if in_out and not (out_dir / STUDY_FILE).exists() else None
        created, empty = _claim(out_dir, [STUDY_FILE] if in_out else [])
    question = {
        "dataset": dict(sorted(ds.digests.items())),
        "pipeline": repr(base.clone().set_params(**{k: params[k] for k in space})),
        "space": {
            k: optuna.distributions.distribution_to_json(v) for k, v in sorted(space.items())
        },
        "metric": metric, "seed": seed, "test_fraction": test_fraction, "split_by": split_by,
        "exclude_tags": sorted(exclude_tags), "replay": repr(config),
    }
    study = None
    try:
        try:
            study = optuna.create_study(
                storage=storage,
                study_name=study_name,
                direction="maximize" if higher else "minimize",
                sampler=samplers[sampler](seed=seed),
                load_if_exists=True,
            )
        except Exception as exc:  # noqa: BLE001 - a URL optuna or its database driver refuses
            raise ValueError(
                f"--storage {_redact(storage) if storage else 'in memory'}: cannot open the "
                f"study ({type(exc).__name__}: {first_line(exc)})"
            ) from None
        _same_question(study, question, space)
        from memlab.progress import Progress

        mode = "auto" if progress is None else progress
        with Progress(f"tune {base.name}", trials, unit="trials", mode=mode) as bar:
            study.optimize(objective, n_trials=trials, callbacks=[lambda *_: bar.update()])
        if unscored:
            raise ValueError(unscored[0])
    except BaseException:
        finished = study is not None and any(t.state.name == "COMPLETE" for t in study.trials)
        if out_dir is not None and not finished:
            _release(out_dir, new_study, created, empty)
        raise
    best = dict(study.best_params)
    best_pq = per_query(best)
    defaults = {k: params[k] for k in space if k in params}
    default_pq = per_query(defaults)
    held = pl.concat(
        [
            best_pq.with_columns(pipeline=pl.lit("best")),
            default_pq.with_columns(pipeline=pl.lit("defaults")),
        ]
    ).filter((pl.col("metric") == metric) & pl.col("qid").is_in(test_ids))
    tests = compare(
        held.select("pipeline", "qid", "metric", "value"), baseline="defaults",
        correction="none", seed=seed, n_resamples=n_resamples,
    )
    tuned = base.clone().set_params(**best)
    tuned.name = f"{base.name}-tuned"
    trials_frame = trials_table(study, list(space))
    res = TuneResult(
        best_params=best,
        best_train=mean(best_pq, train_ids),
        best_test=mean(best_pq, test_ids),
        defaults_test=mean(default_pq, test_ids),
        metric=metric,
        tests=tests,
        trials=trials_frame,
        pipeline=tuned,
        storage=_redact(storage) if storage else "in memory",
        study_name=study_name,
    )
    res.manifest = {
        "dataset": dataset_entry(ds),
        "pipeline": base.to_config(),
        "space": {k: repr(v) for k, v in space.items()},
        "metric": metric,
        "higher_is_better": higher,
        "seed": seed,
        "test_fraction": test_fraction,
        "split_by": split_by,
        "n_train": len(train),
        "n_test": len(test),
        "sampler": sampler,
        "trials_added": trials,
        "trials_in_study": len(study.trials),
        "storage": res.storage,
        "study_name": study_name,
        "exclude_tags": sorted(set(exclude_tags)),
        "replay": config.to_dict(),
        "packages": package_versions() | {"optuna": optuna.__version__},
        "git_commit": git_commit(),
        "started_at": datetime.fromtimestamp(started, tz=UTC).isoformat(),
        "seconds": round(time.time() - started, 3),
    }
    if out_dir is not None:
        with atomic_directory(out_dir, kind="tune", keep=(STUDY_FILE,) if in_out else ()) as tmp:
            write_tune(res, study, tmp)
        res.out = out_dir.resolve()
    return res


QUESTION_ATTR = "memlab_question"
"""The study's user attribute recording what its trials answer (:func:`_same_question`)."""


def _same_question(study: Any, question: dict[str, Any], space: Mapping[str, Any]) -> None:
    """Record what the study's trials answer (the dataset's digests, the pipeline, the
    space, metric, seed, split, excluded tags and replay), or refuse to continue a study
    started for another question: its trials were scored on other queries or data, or
    sampled from another space, and its best trial would be reported as this run's.

    A study started before the question was recorded is continued only when each of its
    trials' parameters is a parameter of ``space`` with the same distribution.

    Raises:
        ValueError: Naming what differs and how to go on.
    """
    import optuna

    stored = study.user_attrs.get(QUESTION_ATTR)
    if stored is None:
        for t in study.trials:
            for name, dist in t.distributions.items():
                if name not in space or optuna.distributions.distribution_to_json(
                    dist
                ) != optuna.distributions.distribution_to_json(space[name]):
                    raise ValueError(
                        f"study {study.study_name!r}: trial {t.number} sampled {name} from "
                        f"{dist}, not from this run's --space; continue it with its own "
                        "--space, or give another --study-name or a new --out"
                    )
        study.set_user_attr(QUESTION_ATTR, question)
        return
    differ = [k for k in question if stored.get(k) != question[k]]
    if differ:
        flags = {"dataset": "DATASET", "pipeline": "--pipeline", "space": "--space",
                 "metric": "--metric", "seed": "--seed", "test_fraction": "test_fraction",
                 "split_by": "--split-by", "exclude_tags": "--exclude-tags",
                 "replay": "the replay options"}
        raise ValueError(
            f"study {study.study_name!r} was started for another question: its "
            f"{', '.join(flags.get(k, k) for k in differ)} "
            f"{'differs' if len(differ) == 1 else 'differ'} from this run's, so its "
            "trials do not answer this one; continue it as it was started, or give another "
            "--study-name or a new --out"
        )


def _suggest(trial: Any, name: str, dist: Any) -> Any:
    """Ask the trial for a value of ``name`` from its distribution."""
    if hasattr(dist, "choices"):
        return trial.suggest_categorical(name, dist.choices)
    import optuna.distributions as od

    if isinstance(dist, od.IntDistribution):
        return trial.suggest_int(name, dist.low, dist.high, log=dist.log)
    return trial.suggest_float(name, dist.low, dist.high, log=dist.log)


def trials_table(study: Any, names: Sequence[str]) -> pl.DataFrame:
    """``number, state, value, seconds, param_*`` of every trial of the study."""
    rows = []
    for t in study.trials:
        seconds = (
            (t.datetime_complete - t.datetime_start).total_seconds()
            if t.datetime_complete is not None and t.datetime_start is not None
            else None
        )
        row: dict[str, Any] = {
            "number": t.number,
            "state": t.state.name,
            "value": t.value,
            "seconds": seconds,
        }
        row |= {f"param_{n}": t.params.get(n) for n in names}
        rows.append(row)
    return pl.DataFrame(rows, strict=False)


def _redact(url: str) -> str:
    """The storage URL without a password."""
    head, at, tail = url.rpartition("@")
    if not at or "://" not in head:
        return url
    scheme, _, cred = head.partition("://")
    return f"{scheme}://{cred.partition(':')[0]}:***@{tail}"


def history_chart(trials: pl.DataFrame, metric: str, higher: bool) -> alt.Chart:
    """Objective of every completed trial and the best so far (optimisation history)."""
    done = trials.filter(pl.col("state") == "COMPLETE").sort("number")
    best = done["value"].cum_max() if higher else done["value"].cum_min()
    data = done.select("number", "value").with_columns(best=best)
    points = alt.Chart(data).mark_circle(size=40, opacity=0.6).encode(
        x=alt.X("number:Q", title="trial"),
        y=alt.Y("value:Q", title=f"{metric} (train)", scale=alt.Scale(zero=False)),
        tooltip=["number", alt.Tooltip("value:Q", format=".4f")],
    )
    line = alt.Chart(data).mark_line(color="#e45756", interpolate="step-after").encode(
        x="number:Q", y="best:Q"
    )
    return (points + line).properties(width=360, height=220, title="optimisation history")


def importance_chart(importances: Mapping[str, float]) -> alt.Chart:
    """Parameter importances (Optuna's default evaluator, `get_param_importances`) as bars."""
    data = pl.DataFrame(
        {"param": list(importances), "importance": [float(v) for v in importances.values()]}
    )
    return (
        alt.Chart(data)
        .mark_bar()
        .encode(
            x=alt.X("importance:Q", title="importance (share of variance)"),
            y=alt.Y("param:N", sort="-x", title=None),
            tooltip=["param", alt.Tooltip("importance:Q", format=".3f")],
        )
        .properties(width=320, height=alt.Step(26), title="parameter importances")
    )


def write_tune(res: TuneResult, study: Any, out: Path) -> Path:
    """Write the study's summary, tuned pipeline, trials and charts into ``out``.

    ``out`` is a directory memlab is building (:func:`run_tune` fills a hidden sibling of the
    tune directory and publishes it atomically); this function does not check it.
    """
    import optuna

    summary = {
        "metric": res.metric,
        "best_params": res.best_params,
        "best_train": res.best_train,
        "best_test": res.best_test,
        "defaults_test": res.defaults_test,
        "tests": res.tests.to_dicts(),
        "study_name": res.study_name,
        "storage": res.storage,
        "trials": res.trials.height,
    }
    atomic_write_text(
        out / "tune.json", json.dumps(summary, indent=2, sort_keys=True, default=str) + "\n"
    )
    atomic_write_text(
        out / "manifest.json",
        json.dumps(res.manifest, indent=2, sort_keys=True, default=str) + "\n",
    )
    atomic_write_text(out / "best.toml", res.pipeline.to_toml())
    res.trials.write_parquet(out / "trials.parquet")
    save_chart(history_chart(res.trials, res.metric, study.direction.name == "MAXIMIZE"),
               out / "history")
    try:
        importances = optuna.importance.get_param_importances(study)
    except (RuntimeError, ValueError):  # too few trials, or no variance yet
        importances = {}
    clean = {k: v for k, v in importances.items() if not math.isnan(v)}
    if clean:
        save_chart(importance_chart(clean), out / "importance")
    return out.resolve()
