"""The ``export``, ``compare``, ``tune`` and ``finetune`` subcommands of the ``memlab`` command
line.

Light to import: each command loads what it runs when it runs.
"""

from __future__ import annotations

import argparse
import sys
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

#: Optuna samplers ``memlab tune`` offers.
SAMPLERS = ("tpe", "random")


def cmd_export(args: argparse.Namespace) -> int:
    from memlab.eval.export import export_run

    out, notes = export_run(args.run_dir, args.out)
    for note in notes:
        print(f"memlab: note: {note}", file=sys.stderr)
    print(f"wrote {out}")
    return 0


def cmd_compare(args: argparse.Namespace) -> int:
    from memlab.cli import CLIError, _split
    from memlab.eval.report import markdown_table
    from memlab.eval.runcompare import check_compare_dir, compare_runs, write_comparison
    from memlab.eval.stats import COMPARISON_KEYS, TAG_COMPARISON_KEYS, comparison_view

    for path in (args.run_a, args.run_b):
        if not Path(path).is_dir():
            raise CLIError(f"{path}: no such run directory")
    if args.out:
        check_compare_dir(args.out)  # refused before the tests run
    res = compare_runs(
        args.run_a,
        args.run_b,
        pipelines=_split(args.pipelines),
        metrics=_split(args.metrics),
        metric=args.metric,
        tests=_split(args.tests) or ("t", "wilcoxon", "permutation"),
        correction=args.correction,
        alpha=args.alpha,
        seed=args.seed,
        n_resamples=args.n_resamples,
    )
    for note in res.notes:
        print(f"memlab: note: {note}", file=sys.stderr)
    keys = ("baseline", *COMPARISON_KEYS, "n")
    print(f"## A = {args.run_a}, B = {args.run_b}\n")
    print(f"A: {res.protocols[0]}.  \nB: {res.protocols[1]}.  \n`n`: queries paired.\n")
    print(markdown_table(comparison_view(res.comparison, keys)))
    if res.tag_comparison.height:
        print(f"## {res.metric} within each tag\n")
        tag_keys = ("baseline", *TAG_COMPARISON_KEYS)
        print(markdown_table(comparison_view(res.tag_comparison, tag_keys)))
    changed = res.per_query.filter(res.per_query["outcome"] != "tie")
    print(f"## Queries whose {res.metric} changed ({changed.height}), largest change first\n")
    print(markdown_table(changed.head(args.show)))
    if args.out:
        print(f"wrote {write_comparison(res, args.out)}")
    return 0


def add_commands(sub: argparse._SubParsersAction) -> None:
    """Register ``export`` and ``compare`` on the ``memlab`` subparsers."""
    from memlab.cli import nonnegative_int, probability

    p = sub.add_parser(
        "export",
        help="a run as TREC run files, qrels, CSV and a LaTeX table (RUN_DIR/export/)",
    )
    p.add_argument("run_dir")
    p.add_argument("--out", help="target directory (default: RUN_DIR/export)")
    p.set_defaults(func=cmd_export)

    p = sub.add_parser("compare", help="paired tests between two finished runs")
    p.add_argument("run_a", help="the reference run")
    p.add_argument("run_b", help="the run compared with it")
    p.add_argument("--pipelines", help="comma-separated pipelines present in both runs")
    p.add_argument("--metrics", help="comma-separated metrics (default: those both runs have)")
    p.add_argument("--metric", help="headline metric of per-tag tests (default: the first)")
    p.add_argument("--tests", help="comma-separated paired tests (default: t,wilcoxon,permutation)")
    p.add_argument("--correction", default="holm", help="multiple-testing correction")
    p.add_argument("--alpha", type=probability, default=0.05, help="significance level")
    p.add_argument("--seed", type=int, default=0, help="permutation-test seed")
    p.add_argument(
        "--n-resamples", type=nonnegative_int, default=10_000, help="permutation resamples"
    )
    p.add_argument("--show", type=nonnegative_int, default=20, help="changed queries to list")
    p.add_argument("--out", help="also write the tables as CSV into this directory")
    p.set_defaults(func=cmd_compare)


def cmd_tune(args: argparse.Namespace) -> int:
    """``memlab tune``: run or continue a study; print the best trial and its held-out score."""
    from memlab.cli import CLIError, _embedder, _generator, _load_dataset, _replay_config
    from memlab.eval.tune import check_tune_dir, parse_space, run_tune

    space = parse_space(args.space or [])
    if not space:
        raise CLIError("give at least one --space stage__param=int:lo:hi")
    out = args.out or f"reports/tune-{datetime.now(tz=UTC).strftime('%Y%m%dT%H%M%SZ')}"
    check_tune_dir(out, what="--out")  # before any work
    ds = _load_dataset(args.dataset)
    res = run_tune(
        ds, args.pipeline, space, trials=args.trials, metric=args.metric, seed=args.seed,
        split_by=args.split_by, sampler=args.sampler, storage=args.storage,
        study_name=args.study_name, out=out,
        embedder=_embedder(args.embedder, not args.no_cache),
        generator=_generator(args.generator, ds), replay=_replay_config(args, ds),
        progress="lines" if args.quiet else None,
    )
    row = res.tests.row(0, named=True) if res.tests.height else {}
    print(f"best on train ({res.trials.height} trials): {res.best_params}")
    print(
        f"{res.metric}: train {res.best_train:.4f}, held-out {res.best_test:.4f} "
        f"(defaults held-out {res.defaults_test:.4f}, p_t {row.get('p_t', float('nan')):.3g})"
    )
    print(f"wrote {res.out}")
    return 0


def add_tune_command(sub: argparse._SubParsersAction) -> None:
    """Register ``memlab tune`` on the CLI's subparsers (the study's modules load when it runs)."""
    from memlab.cli import EMBEDDER_HELP  # the help every command shares

    p = sub.add_parser("tune", help="Optuna study over pipeline constants (TPE)")
    p.add_argument("dataset")
    p.add_argument("--pipeline", required=True)
    p.add_argument(
        "--space", action="append",
        help="stage__param=int:lo:hi[:log] | float:lo:hi[:log] | cat:a,b (repeatable)",
    )
    p.add_argument("--trials", type=int, default=100, help="trials to add (default: 100)")
    p.add_argument("--metric", default="R_all@10")
    p.add_argument("--sampler", choices=SAMPLERS, default="tpe")
    p.add_argument("--storage", help="Optuna RDB URL (default: sqlite:///OUT/study.db)")
    p.add_argument("--study-name", help="study name in the storage (default: PIPELINE-METRIC)")
    p.add_argument("--split-by", choices=("query", "client"), default="query")
    p.add_argument(
        "--out",
        help="output directory: new, empty, or an earlier tune directory whose study this run "
        "continues (default: reports/tune-<timestamp>)",
    )
    p.add_argument("--seed", type=int, default=0, help="seed of the split and the sampler")
    p.add_argument("--embedder", default="minilm", help=EMBEDDER_HELP)
    p.add_argument("--no-cache", action="store_true", help="do not use the embedding cache")
    p.add_argument("--generator", default=None, help="generator for HyDE")
    p.add_argument(
        "--quiet", action="store_true", help="no progress bars; one line per step on stderr"
    )
    from memlab.cli import add_replay_options

    add_replay_options(p)
    p.set_defaults(func=cmd_tune)


def cmd_finetune(args: argparse.Namespace) -> int:
    """``memlab finetune``: fine-tune a sentence encoder on a dataset's judged pairs."""
    from memlab.cli import CLIError, _load_dataset
    from memlab.embed.finetune import FineTuneParams, dataset_pairs, fine_tune, model_dir

    ds = _load_dataset(args.dataset)
    clients = [c for c in (args.clients or "").split(",") if c] or None
    tags = [t for t in (args.exclude_tags or "").split(",") if t]
    if args.cross_encoder:
        return _finetune_cross_encoder(args, ds, clients, tags)
    try:
        base = model_dir(args.embedder)
        pairs = dataset_pairs(ds, clients=clients, exclude_tags=tags)
        params = FineTuneParams(
            epochs=args.epochs, learning_rate=args.learning_rate,
            batch_size=32 if args.batch_size is None else args.batch_size,
            scale=args.scale, seed=args.seed,
        )
        print(f"fine-tuning {args.embedder} on {len(pairs)} pairs", flush=True)
        out = fine_tune(base, pairs, Path(args.out), params)
    except (ValueError, TypeError, FileNotFoundError) as exc:
        raise CLIError(str(exc)) from None
    print(f"wrote {out} (use it as --embedder path:{out})")
    return 0


def _finetune_cross_encoder(
    args: argparse.Namespace, ds: Any, clients: list[str] | None, tags: list[str]
) -> int:
    """``memlab finetune --cross-encoder``: a cross-encoder trained from the base model's
    encoder (:mod:`memlab.embed.cross_finetune`) on the judged queries' evidence and the hard
    negatives of a first-stage pipeline's rankings (replayed here, as ``memlab eval`` does)."""
    from memlab.cli import CLIError
    from memlab.embed.cross_finetune import (
        CrossFineTuneParams,
        first_stage_rankings,
        train_cross_encoder,
        training_examples,
    )
    from memlab.embed.finetune import model_dir
    from memlab.pipeline import load_pipeline

    try:
        base = model_dir(args.embedder)
        params = CrossFineTuneParams(
            epochs=args.epochs, learning_rate=args.learning_rate,
            batch_size=16 if args.batch_size is None else args.batch_size, seed=args.seed,
        )
        first = load_pipeline(args.first_stage)
        rankings = first_stage_rankings(ds, first, exclude_tags=tags)
        examples = training_examples(ds, rankings, clients=clients, exclude_tags=tags,
                                     params=params)
        positives = sum(1 for e in examples if e[2] > 0)
        print(f"training a cross-encoder from {args.embedder} on {len(examples)} examples "
              f"({positives} positive; negatives from {first.name})", flush=True)
        out = train_cross_encoder(base, examples, Path(args.out), params)
    except (ValueError, TypeError, FileNotFoundError) as exc:
        raise CLIError(str(exc)) from None
    print(f"wrote {out} (use it as cross_encoder__model={out})")
    return 0


def add_finetune_command(sub: argparse._SubParsersAction) -> None:
    """Register ``memlab finetune`` (torch and sentence-transformers load when it runs)."""
    p = sub.add_parser(
        "finetune",
        help="fine-tune a sentence encoder on a dataset's (query, relevant memory) pairs",
    )
    p.add_argument("dataset")
    p.add_argument("out", help="the new model's directory (must not exist)")
    p.add_argument("--embedder", default="minilm", help="base model: minilm, mpnet or path:DIR")
    p.add_argument("--clients", help="comma-separated clients whose queries train (default all)")
    p.add_argument("--exclude-tags", default="adversarial",
                   help="comma-separated query tags left out (default: adversarial)")
    p.add_argument("--epochs", type=int, default=2)
    p.add_argument("--learning-rate", type=float, default=2e-5)
    p.add_argument("--batch-size", type=int, default=None,
                   help="examples per step (default 32; 16 with --cross-encoder)")
    p.add_argument("--scale", type=float, default=20.0)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--cross-encoder", action="store_true",
                   help="train a cross-encoder re-ranker (the cross_encoder stage's model) from "
                        "the base model's encoder instead of fine-tuning the sentence encoder")
    p.add_argument("--first-stage", default="conversational",
                   help="with --cross-encoder: the pipeline whose rankings give the hard "
                        "negatives (default conversational)")
    p.set_defaults(func=cmd_finetune)
