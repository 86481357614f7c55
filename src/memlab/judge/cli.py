"""``memlab judge …``: pool runs into a judging queue, record a judgment, judges' agreement.

::

    memlab judge pool RUN_DIR… [--depth 10] [--dataset DIR] [--no-served] --out POOL.jsonl
    memlab judge add DATASET QID MEM_ID GRADE --judge NAME [--note TEXT]
    memlab judge agreement DATASET [--source human]
"""

from __future__ import annotations

import argparse
from typing import Any


def cmd_pool(args: argparse.Namespace) -> int:
    from memlab.judge.pool import check_pool_out, pool_runs, write_pool
    from memlab.progress import Progress

    check_pool_out(args.out)  # before any pooling
    with Progress("judge pool", mode="auto"):
        pool = pool_runs(
            args.runs, depth=args.depth, dataset=args.dataset, served=not args.no_served,
            seed=args.seed,
        )
    path = write_pool(pool, args.out)
    n_queries = pool.candidates.get_column("qid").n_unique()
    print(
        f"pooled {len(pool.runs)} runs ({', '.join(pool.runs)}) at depth {pool.depth}: "
        f"{pool.candidates.height} candidates over {n_queries} queries"
    )
    print(f"wrote {path}")
    return 0


def cmd_add(args: argparse.Namespace) -> int:
    from memlab.datasets.format import load_dataset
    from memlab.judge.judgments import judge

    ds = load_dataset(args.dataset)
    if args.qid not in {q.qid for q in ds.queries}:
        raise ValueError(f"{args.dataset}: no query {args.qid!r}")
    if args.mem_id not in {op.id for op in ds.stores()}:
        raise ValueError(f"{args.dataset}: no memory {args.mem_id!r}")
    made = judge(args.dataset, args.qid, args.mem_id, args.grade, judge=args.judge,
                 source=args.source, note=args.note)
    print(f"{made.qid} {made.mem_id} {made.grade} by {made.judge} at {made.ts}")
    return 0


def cmd_agreement(args: argparse.Namespace) -> int:
    from pathlib import Path

    from memlab.datasets.format import META_FILE
    from memlab.judge.agreement import agreement
    from memlab.judge.judgments import read_judgments

    where = Path(args.dataset)
    if not where.is_dir():
        raise ValueError(f"{where}: no such dataset directory")
    if not (where / META_FILE).is_file():
        raise ValueError(f"{where}: not a dataset (no {META_FILE})")
    table = agreement(read_judgments(args.dataset), source=args.source)
    if table.height == 0:
        print("fewer than two judges: no agreement to report")
        return 0
    for row in table.iter_rows(named=True):
        print(
            f"{row['judge_a']} / {row['judge_b']}: {row['n']} items, "
            f"agreement {row['agreement']:.3f}, Cohen's kappa {row['kappa']:.3f}"
        )
    return 0


def _grade(text: str) -> int:
    if text not in ("0", "1", "2"):
        raise argparse.ArgumentTypeError(f"grade must be 0, 1 or 2, got {text!r}")
    return int(text)


def _depth(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"depth must be an integer, got {text!r}") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"depth must be >= 1, got {value}")
    return value


def add_commands(sub: Any) -> None:
    """Add ``memlab judge`` and its subcommands to the top-level subparsers ``sub``."""
    judge = sub.add_parser("judge", help="relevance judging of recordings").add_subparsers(
        dest="judge_command", required=True
    )
    p = judge.add_parser("pool", help="pool the top k of several runs into a judging queue")
    p.add_argument("runs", nargs="+", metavar="RUN_DIR")
    p.add_argument("--depth", type=_depth, default=10, help="ranks pooled from each run")
    p.add_argument("--dataset", help="the dataset (default: from the runs' manifests)")
    p.add_argument("--no-served", action="store_true", help="do not pool the served lists")
    p.add_argument("--seed", type=int, default=0, help="seed of the order within a query")
    p.add_argument(
        "--out", required=True,
        help="the judging queue (JSONL): a new file, or an earlier queue it replaces",
    )
    p.set_defaults(func=cmd_pool)
    p = judge.add_parser("add", help="record one judgment into DATASET/judgments.jsonl")
    p.add_argument("dataset")
    p.add_argument("qid")
    p.add_argument("mem_id")
    p.add_argument("grade", type=_grade)
    p.add_argument("--judge", required=True, help="who judges")
    p.add_argument("--source", choices=("human", "agent"), default="human")
    p.add_argument("--note")
    p.set_defaults(func=cmd_add)
    p = judge.add_parser("agreement", help="Cohen's kappa between every pair of judges")
    p.add_argument("dataset")
    p.add_argument("--source", choices=("human", "agent", "all"), default="human")
    p.set_defaults(func=cmd_agreement)
