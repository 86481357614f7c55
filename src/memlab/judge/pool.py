"""Pooling (TREC style): the union of the top ``depth`` memories of several runs, per query.

A run is one pipeline of an experiment directory (``rankings.parquet``); a recording's
``served`` lists (what the live system returned) count as one more run named ``served``. The
pool is de-duplicated per (query, memory) and ordered query by query, so a judge sees each
query's candidates together and once. Within a query the order is a seeded hash of the memory
id, so no run's ranking shows through (Voorhees and Harman, *TREC*, 2005, ch. 2).

The judging queue is written as JSONL, one line per candidate:
``{"qid", "mem_id", "position", "runs", "best_rank"}``.
"""

from __future__ import annotations

import hashlib
import json
import os
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import polars as pl

from memlab.datasets.format import QUERIES_FILE
from memlab.io import atomic_write_text

POOL_SCHEMA = {
    "qid": pl.String,
    "mem_id": pl.String,
    "position": pl.Int64,
    "runs": pl.List(pl.String),
    "best_rank": pl.Int64,
}


@dataclass
class Pool:
    """A judging queue.

    Attributes:
        candidates: :data:`POOL_SCHEMA` rows in queue order.
        runs: Names of the pooled runs (``DIR/pipeline`` and ``served``).
        depth: Ranks pooled from each run.
        dataset: The dataset directory the runs were made on (from their manifests).
    """

    candidates: pl.DataFrame
    runs: list[str]
    depth: int
    dataset: str | None = None


def read_run_rankings(run_dir: str | os.PathLike[str]) -> pl.DataFrame:
    """``run, qid, rank, mem_id`` of every pipeline of an experiment directory.

    Raises:
        ValueError: If the directory holds no ``rankings.parquet``.
    """
    path = Path(run_dir)
    file = path / "rankings.parquet"
    if not file.is_file():
        raise ValueError(f"{path}: not a run directory (no rankings.parquet)")
    frame = pl.read_parquet(file)
    for column in ("pipeline", "qid", "rank", "mem_id"):
        if column not in frame.columns:
            raise ValueError(f"{file}: missing column {column!r}")
    return frame.select(
        run=pl.lit(f"{path.name}/") + pl.col("pipeline"), qid="qid", rank="rank", mem_id="mem_id"
    )


def served_rankings(dataset: str | os.PathLike[str]) -> pl.DataFrame:
    """``run, qid, rank, mem_id`` of the ``served`` lists of a recording's queries."""
    rows = []
    file = Path(dataset) / QUERIES_FILE
    for number, raw in enumerate(file.read_text(encoding="utf-8").splitlines(), start=1):
        if not raw.strip():
            continue
        obj = json.loads(raw)
        served = obj.get("served") or []
        if not isinstance(served, list) or not all(isinstance(m, str) for m in served):
            raise ValueError(f"{QUERIES_FILE}:{number}: field 'served': must be a list of ids")
        rows += [("served", obj["qid"], rank, m) for rank, m in enumerate(served, start=1)]
    schema = {"run": pl.String, "qid": pl.String, "rank": pl.Int64, "mem_id": pl.String}
    return pl.DataFrame(rows, schema=schema, orient="row")


def _dataset_of(run_dirs: Sequence[str | os.PathLike[str]]) -> str | None:
    paths = set()
    for d in run_dirs:
        man = Path(d) / "manifest.json"
        if man.is_file():
            path = json.loads(man.read_text(encoding="utf-8")).get("dataset", {}).get("path")
            if path:
                paths.add(str(Path(path).resolve()))
    if len(paths) > 1:
        raise ValueError(f"the runs were made on different datasets: {', '.join(sorted(paths))}")
    return paths.pop() if paths else None


def _order_key(seed: int, qid: str, mem_id: str) -> str:
    return hashlib.sha256(f"{seed}:{qid}:{mem_id}".encode()).hexdigest()


def pool_runs(
    run_dirs: Sequence[str | os.PathLike[str]],
    *,
    depth: int = 10,
    dataset: str | os.PathLike[str] | None = None,
    served: bool = True,
    seed: int = 0,
) -> Pool:
    """Pool the top ``depth`` of every pipeline of every run directory.

    Args:
        run_dirs: Experiment directories (``memlab eval --out``).
        depth: Ranks taken from each run.
        dataset: The dataset (default: the one named in the runs' manifests); its queries give
            the queue's query order (by time) and its ``served`` lists one more run.
        served: Pool the recording's ``served`` lists.
        seed: Seeds the order of candidates within a query.

    Raises:
        ValueError: On ``depth < 1``, no runs, a directory that is not a run, or runs of
            different datasets.
    """
    if isinstance(depth, bool) or not isinstance(depth, int) or depth < 1:
        raise ValueError(f"pool: field 'depth' must be an integer >= 1, got {depth!r}")
    if not run_dirs:
        raise ValueError("pool: no run directories given")
    from memlab.progress import track

    frames = [read_run_rankings(d) for d in track(run_dirs, "pooling runs", unit="runs")]
    ds_path = str(Path(dataset).resolve()) if dataset is not None else _dataset_of(run_dirs)
    order: dict[str, int] = {}
    if ds_path is not None and (Path(ds_path) / QUERIES_FILE).is_file():
        if served:
            frames.append(served_rankings(ds_path))
        lines = (Path(ds_path) / QUERIES_FILE).read_text(encoding="utf-8").splitlines()
        for raw in lines:
            if raw.strip():
                order.setdefault(json.loads(raw)["qid"], len(order))
    ranked = pl.concat(frames)
    runs = ranked.get_column("run").unique(maintain_order=True).to_list()
    top = ranked.filter(pl.col("rank") <= depth)
    grouped = (
        top.group_by("qid", "mem_id")
        .agg(runs=pl.col("run").unique().sort(), best_rank=pl.col("rank").min())
        .with_columns(
            _q=pl.col("qid").replace_strict(order, default=len(order), return_dtype=pl.Int64),
            _h=pl.struct("qid", "mem_id").map_elements(
                lambda r: _order_key(seed, r["qid"], r["mem_id"]), return_dtype=pl.String
            ),
        )
        .sort("_q", "qid", "_h")
    )
    candidates = grouped.select(
        "qid",
        "mem_id",
        position=pl.int_range(1, pl.len() + 1, dtype=pl.Int64),
        runs="runs",
        best_rank=pl.col("best_rank").cast(pl.Int64),
    )
    return Pool(candidates.cast(POOL_SCHEMA), runs, depth, ds_path)  # type: ignore[arg-type]


def write_pool(pool: Pool, out: str | os.PathLike[str]) -> Path:
    """Write the judging queue as JSONL (atomically)."""
    lines = [
        json.dumps(row, ensure_ascii=False, separators=(",", ":"))
        for row in pool.candidates.iter_rows(named=True)
    ]
    path = Path(out)
    atomic_write_text(path, "".join(line + "\n" for line in lines))
    return path


def read_pool(path: str | os.PathLike[str]) -> pl.DataFrame:
    """A judging queue written by :func:`write_pool`, in queue order.

    Raises:
        ValueError: Naming ``file:line`` of a bad line.
    """
    file = Path(path)
    rows = []
    for number, raw in enumerate(file.read_text(encoding="utf-8").splitlines(), start=1):
        if not raw.strip():
            continue
        try:
            obj = json.loads(raw)
            rows.append(
                (str(obj["qid"]), str(obj["mem_id"]), int(obj["position"]),
                 [str(r) for r in obj["runs"]], int(obj["best_rank"]))
            )
        except (json.JSONDecodeError, KeyError, TypeError, ValueError) as exc:
            raise ValueError(f"{file.name}:{number}: not a pool line: {exc}") from None
    return pl.DataFrame(rows, schema=POOL_SCHEMA, orient="row").sort("position")
