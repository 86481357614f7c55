"""The ``memlab`` command line.

::

    memlab eval DATASET [--pipelines a,b,c] [--baseline a] [--out DIR]
    memlab sweep DATASET --pipeline hybrid --grid rrf__k=10,30,60 [--grid …]
    memlab datasets validate DIR
    memlab datasets generate --seed N OUT
    memlab datasets import-locomo SRC OUT
    memlab datasets import NAME SRC OUT
    memlab store check PATH
    memlab generations record DATASET --out FILE [--pipeline full] [--generator smollm2]
    memlab pipelines [NAME]

Bad input ends with one clear message on stderr and exit status 2; nothing is written.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Any


class CLIError(Exception):
    """An error reported to the user as one message (exit status 2)."""


def _split(value: str | None) -> list[str] | None:
    if value is None:
        return None
    return [v.strip() for v in value.split(",") if v.strip()]


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


def _load_dataset(path: str) -> Any:
    from memlab.datasets.format import load_dataset

    p = Path(path)
    if not p.is_dir():
        raise CLIError(f"{path}: no such dataset directory")
    return load_dataset(p)


def _replay_config(args: argparse.Namespace, dataset: Any) -> Any:
    """The dataset's ``[replay]`` defaults with the flags that were given."""
    from memlab.eval.replay import ReplayConfig

    expire = None if args.expire is None else args.expire
    return ReplayConfig.from_dataset(
        dataset,
        ttl_days=args.ttl_days,
        expire=expire,
        touch_k=args.touch_k,
        consolidation__interval_hours=args.consolidation_hours,
        conflict_policy=args.conflict_policy,
    )


def _print_replay(config: Any) -> None:
    c = config.consolidation
    cons = f"every {c.interval_hours:g} h" if c.enabled else "off"
    print(
        f"replay: ttl_days={config.ttl_days:g} expire={config.expire} touch_k={config.touch_k} "
        f"consolidation={cons} conflict_policy={config.conflict_policy}"
    )


def cmd_eval(args: argparse.Namespace) -> int:
    from memlab.eval.experiment import DEFAULT_METRICS, DEFAULT_PIPELINES, run_experiment

    ds = _load_dataset(args.dataset)
    pipelines = _split(args.pipelines) or list(DEFAULT_PIPELINES)
    metrics = _split(args.metrics) or list(DEFAULT_METRICS)
    out = args.out or f"reports/{datetime.now(tz=UTC).strftime('%Y%m%dT%H%M%SZ')}"
    # Check everything that can be checked before the expensive part.
    from memlab.eval.experiment import check_metrics
    from memlab.pipeline import load_pipeline

    check_metrics(metrics)
    for p in pipelines:
        load_pipeline(p)
    config = _replay_config(args, ds)
    _print_replay(config)
    result = run_experiment(
        ds,
        pipelines,
        baseline=args.baseline,
        out=out,
        metrics=metrics,
        seed=args.seed,
        embedder=_embedder(args.embedder, not args.no_cache),
        generator=_generator(args.generator, ds),
        progress=False if args.quiet else None,
        replay=config,
    )
    _print_metrics(result.metrics)
    print(f"wrote {result.out}")
    return 0


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
    from memlab.eval.sweep import parse_grid, run_sweep

    grid = parse_grid(args.grid or [])
    if not grid:
        raise CLIError("give at least one --grid stage__param=v1,v2")
    ds = _load_dataset(args.dataset)
    out = args.out or f"reports/sweep-{datetime.now(tz=UTC).strftime('%Y%m%dT%H%M%SZ')}"
    config = _replay_config(args, ds)
    _print_replay(config)
    res = run_sweep(
        ds,
        args.pipeline,
        grid,
        metric=args.metric,
        seed=args.seed,
        split_by=args.split_by,
        embedder=_embedder(args.embedder, not args.no_cache),
        generator=_generator(args.generator, ds),
        out=out,
        progress=False if args.quiet else None,
        replay=config,
    )
    print(res.results)
    print(
        f"best on train: {res.best_params} → {res.metric} train {res.best_train:.4f}, "
        f"test {res.best_test:.4f}"
    )
    print(f"wrote {res.out}")
    return 0


def cmd_datasets_validate(args: argparse.Namespace) -> int:
    from memlab.datasets.validate import main_validate

    return main_validate(args.dir)


def cmd_datasets_generate(args: argparse.Namespace) -> int:
    from memlab.datasets.generate import generate_dataset

    ds = generate_dataset(args.seed, Path(args.out))
    print(f"wrote {args.out}: {len(ds.ops)} operations, {len(ds.queries)} queries")
    return 0


def cmd_datasets_generate_lifecycle(args: argparse.Namespace) -> int:
    from memlab.datasets.lifecycle import generate_lifecycle_dataset

    ds = generate_lifecycle_dataset(args.seed, Path(args.out))
    print(f"wrote {args.out}: {len(ds.ops)} operations, {len(ds.queries)} queries")
    return 0


def _print_import(report: Any, out: str) -> None:
    summary = getattr(report, "summary", None)
    print(summary() if callable(summary) else report)
    print(f"wrote {out}")


def cmd_datasets_import(args: argparse.Namespace) -> int:
    from memlab.datasets.importers import run_importer

    name = getattr(args, "importer", None) or args.name
    report = run_importer(name, Path(args.src), Path(args.out))
    _print_import(report, args.out)
    return 0


def cmd_store_check(args: argparse.Namespace) -> int:
    from memlab.memory.store import MemoryStore

    path = Path(args.path)
    if not (path / "memlab.sqlite3").is_file():
        raise CLIError(f"{path}: not a memlab store (no memlab.sqlite3)")
    store = MemoryStore(path, repair=False)
    try:
        problems = store.check()
    finally:
        store.close()
    for p in problems:
        print(p)
    print(f"{len(store)} memories, {len(problems)} problem(s)")
    return 1 if problems else 0


def cmd_store_consolidate(args: argparse.Namespace) -> int:
    from memlab.memory.consolidate import Consolidator
    from memlab.memory.merge import ClusterMerger
    from memlab.memory.store import MemoryStore
    from memlab.timeutil import coerce_ts

    path = Path(args.path)
    if not (path / "memlab.sqlite3").is_file():
        raise CLIError(f"{path}: not a memlab store (no memlab.sqlite3)")
    try:
        now = coerce_ts(args.now, field="--now") if args.now is not None else None
    except (TypeError, ValueError) as exc:
        raise CLIError(str(exc)) from None
    embedder = _embedder(args.embedder, not args.no_cache)
    merger = None
    if args.generator is not None:
        from memlab.generate import make_generator

        merger = ClusterMerger(
            make_generator(args.generator),
            embedder,
            similarity_threshold=args.merge_threshold,
        )
    store = MemoryStore(path, embedder=embedder)
    try:
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
    from memlab.generate.record import record_generations
    from memlab.pipeline import load_pipeline

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


def build_parser() -> argparse.ArgumentParser:
    """The argument parser (exposed for documentation and tests)."""
    parser = argparse.ArgumentParser(prog="memlab", description=__doc__.split("\n")[0])
    sub = parser.add_subparsers(dest="command", required=True)

    def common(p: argparse.ArgumentParser) -> None:
        p.add_argument("--seed", type=int, default=0, help="seed (tests, splits)")
        p.add_argument("--embedder", default="minilm", help="embedder name (minilm, hashing)")
        p.add_argument("--no-cache", action="store_true", help="do not use the embedding cache")
        p.add_argument(
            "--generator",
            default=None,
            help="generator for HyDE: recorded (default when needed), smollm2, openai",
        )
        p.add_argument("--quiet", action="store_true", help="no progress bars")
        p.add_argument(
            "--ttl-days",
            type=float,
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
            type=int,
            default=None,
            help="hits per query counted as accesses (default: the dataset's, else 10)",
        )
        p.add_argument(
            "--consolidation-hours",
            type=float,
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

    p = sub.add_parser("eval", help="compare pipelines on a dataset")
    p.add_argument("dataset")
    p.add_argument("--pipelines", help="comma-separated names (default: all shipped)")
    p.add_argument("--baseline", help="baseline pipeline (default: the first)")
    p.add_argument("--out", help="output directory (default: reports/<timestamp>)")
    p.add_argument("--metrics", help="comma-separated metric names")
    common(p)
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
    p.add_argument("--out")
    common(p)
    p.set_defaults(func=cmd_sweep)

    ds = sub.add_parser("datasets", help="dataset tools").add_subparsers(
        dest="datasets_command", required=True
    )
    p = ds.add_parser("validate", help="report every problem of a dataset")
    p.add_argument("dir")
    p.set_defaults(func=cmd_datasets_validate)
    p = ds.add_parser("generate", help="generate the simulated agent-memories dataset")
    p.add_argument("--seed", type=int, required=True)
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
    p.add_argument("name")
    p.add_argument("src")
    p.add_argument("out")
    p.set_defaults(func=cmd_datasets_import)

    st = sub.add_parser("store", help="store tools").add_subparsers(
        dest="store_command", required=True
    )
    p = st.add_parser("check", help="report disagreements between SQLite and chromadb")
    p.add_argument("path")
    p.set_defaults(func=cmd_store_check)
    p = st.add_parser(
        "consolidate",
        help="one consolidation cycle: reclassify, merge (with --generator), Hebbian, expire",
    )
    p.add_argument("path")
    p.add_argument("--now", help="the cycle's clock (ISO 8601; default: now)")
    p.add_argument("--ttl-days", type=float, default=30.0, help="event TTL (seed 000: 30)")
    p.add_argument(
        "--generator",
        default=None,
        help="merge clusters of similar memories with this generator (smollm2, openai)",
    )
    p.add_argument(
        "--merge-threshold", type=float, default=0.75, help="cosine that joins a cluster"
    )
    p.add_argument("--embedder", default="minilm", help="embedder name (minilm, hashing)")
    p.add_argument("--no-cache", action="store_true", help="do not use the embedding cache")
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

    p = sub.add_parser("pipelines", help="list shipped pipelines, or print one")
    p.add_argument("name", nargs="?")
    p.set_defaults(func=cmd_pipelines)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the ``memlab`` console script."""
    import os

    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
    os.environ.setdefault("ANONYMIZED_TELEMETRY", "False")
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        return int(args.func(args))
    except CLIError as exc:
        print(f"memlab: error: {exc}", file=sys.stderr)
        return 2
    except (ValueError, TypeError, KeyError, FileNotFoundError) as exc:
        problems = getattr(exc, "problems", None)
        if problems:
            for prob in problems:
                print(str(prob), file=sys.stderr)
            print(f"memlab: error: {len(problems)} problem(s) in the dataset", file=sys.stderr)
        else:
            msg = exc.args[0] if isinstance(exc, KeyError) and exc.args else exc
            print(f"memlab: error: {msg}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    raise SystemExit(main())
