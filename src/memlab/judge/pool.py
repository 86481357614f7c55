"""Pooling (TREC style): the union of the top ``depth`` memories of several runs, per query.

A run is one pipeline of an experiment directory (``rankings.parquet``); a recording's
``served`` lists (what the live system returned) count as one more run named ``served``. The
pool is de-duplicated per (query, memory) and ordered query by query, so a judge sees each
query's candidates together and once. Within a query the order is a seeded hash of the memory
id, so no run's ranking shows through (Voorhees and Harman, *TREC*, 2005, ch. 2).

The judging queue is written as JSONL, one line per candidate:
``{"qid", "mem_id", "position", "runs", "best_rank"}``. It is published atomically and only
over a missing path, an empty file or an earlier judging queue (every line one of these
objects, positions 1, 2, 3 …): a file memlab cannot recognise as a queue it wrote, a symbolic
link or a directory is refused before any pooling (:func:`memlab.io.publish_file`).
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
from memlab.io import check_output_file, loads_json, publish_file, read_bytes, read_json

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


_RANKING_COLUMNS = {"pipeline": "a string", "qid": "a string", "rank": "an integer",
                    "mem_id": "a string"}


def read_run_rankings(run_dir: str | os.PathLike[str]) -> pl.DataFrame:
    """``run, qid, rank, mem_id`` of every pipeline of an experiment directory.

    Raises:
        ValueError: If the directory holds no ``rankings.parquet``, or the file cannot be read
            or lacks a column of the right type (the message names the file).
    """
    from memlab.io import read_parquet

    path = Path(run_dir)
    file = path / "rankings.parquet"
    if not file.is_file():
        raise ValueError(f"{path}: not a run directory (no rankings.parquet)")
    frame = read_parquet(file)
    for column, kind in _RANKING_COLUMNS.items():
        if column not in frame.columns:
            raise ValueError(f"{file}: missing column {column!r}")
        dtype = frame.schema[column]
        if not (dtype.is_integer() if column == "rank" else dtype == pl.String):
            raise ValueError(f"{file}: column {column!r}: must be {kind}, got {dtype}")
    return frame.select(
        run=pl.lit(f"{path.name}/") + pl.col("pipeline"), qid="qid", rank="rank", mem_id="mem_id"
    ).cast({"rank": pl.Int64})


def _query_lines(dataset: str | os.PathLike[str]) -> list[tuple[str, dict[str, object]]]:
    """``(file:line, object)`` of every query line of a dataset's ``queries.jsonl``, each an
    object with a string ``qid``.

    Raises:
        ValueError: Naming ``queries.jsonl:LINE`` of a line that is not such an object.
    """
    file = Path(dataset) / QUERIES_FILE
    out: list[tuple[str, dict[str, object]]] = []
    for number, raw in enumerate(read_bytes(file).split(b"\n"), start=1):
        if not raw.strip():
            continue
        where = f"{file}:{number}"
        obj = loads_json(raw, where)
        if not isinstance(obj, dict):
            raise ValueError(f"{where}: expected a JSON object, got {type(obj).__name__}")
        if not isinstance(obj.get("qid"), str):
            raise ValueError(f"{where}: field 'qid': must be a string")
        out.append((where, obj))
    return out


def served_rankings(dataset: str | os.PathLike[str]) -> pl.DataFrame:
    """``run, qid, rank, mem_id`` of the ``served`` lists of a recording's queries.

    Raises:
        ValueError: Naming ``queries.jsonl:LINE`` of a line that cannot be read or whose
            ``served`` is not a list of ids.
    """
    rows = []
    for where, obj in _query_lines(dataset):
        served = obj.get("served") or []
        if not isinstance(served, list) or not all(isinstance(m, str) for m in served):
            raise ValueError(f"{where}: field 'served': must be a list of ids")
        rows += [("served", obj["qid"], rank, m) for rank, m in enumerate(served, start=1)]
    schema = {"run": pl.String, "qid": pl.String, "rank": pl.Int64, "mem_id": pl.String}
    return pl.DataFrame(rows, schema=schema, orient="row")


def _dataset_of(run_dirs: Sequence[str | os.PathLike[str]]) -> str | None:
    paths = set()
    for d in run_dirs:
        man = Path(d) / "manifest.json"
        if man.is_file():
            manifest = read_json(man)
            dataset = manifest.get("dataset") if isinstance(manifest, dict) else None
            if manifest is not None and not isinstance(manifest, dict):
                raise ValueError(f"{man}: expected a JSON object")
            if dataset is not None and not isinstance(dataset, dict):
                raise ValueError(f"{man}: field 'dataset': must be an object")
            path = (dataset or {}).get("path")
            if path is not None and not isinstance(path, str):
                raise ValueError(f"{man}: field 'dataset.path': must be a string")
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
    from memlab.progress import Progress

    frames = []
    # a plain loop in the step (not a generator an error would leave suspended): the step
    # ends, and says so, where the error leaves it
    with Progress("pooling runs", len(run_dirs), unit="runs") as bar:
        for d in run_dirs:
            frames.append(read_run_rankings(d))
            bar.update()
    ds_path = str(Path(dataset).resolve()) if dataset is not None else _dataset_of(run_dirs)
    order: dict[str, int] = {}
    if ds_path is not None and (Path(ds_path) / QUERIES_FILE).is_file():
        if served:
            frames.append(served_rankings(ds_path))
        for _, obj in _query_lines(ds_path):
            order.setdefault(str(obj["qid"]), len(order))
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


def is_pool_file(path: str | os.PathLike[str]) -> bool:
    """Whether ``path`` holds a judging queue as :func:`write_pool` writes it: every line (each
    ending in a newline) an object with exactly the fields of :data:`POOL_SCHEMA` and their
    types, positions 1, 2, 3 … in file order. Reading stops at the first line that is not."""
    expected = list(POOL_SCHEMA)
    try:
        with open(path, "rb") as fh:
            for position, raw in enumerate(fh, start=1):
                if not raw.endswith(b"\n"):
                    return False
                obj = json.loads(raw.decode("utf-8"))
                if not isinstance(obj, dict) or list(obj) != expected:
                    return False
                runs = obj["runs"]
                if not (
                    isinstance(obj["qid"], str) and isinstance(obj["mem_id"], str)
                    and type(obj["position"]) is int and obj["position"] == position
                    and type(obj["best_rank"]) is int
                    and isinstance(runs, list) and all(isinstance(r, str) for r in runs)
                ):
                    return False
    except (OSError, ValueError, RecursionError):
        return False
    return True


POOL_OUTPUT = {"owned": is_pool_file, "kind": "a judging queue memlab wrote"}
"""How a judging queue's ``--out`` is checked (:func:`memlab.io.check_output_file`)."""


def check_pool_out(out: str | os.PathLike[str], *, what: str = "--out") -> Path:
    """Refuse ``out`` before any pooling unless a queue may be written there (a new path, an
    empty file or an earlier queue; see the module docstring).

    Raises:
        memlab.io.OutputFileError: Naming ``out`` and what is wrong.
    """
    return check_output_file(out, what=what, **POOL_OUTPUT)  # type: ignore[arg-type]


def write_pool(pool: Pool, out: str | os.PathLike[str], *, what: str = "--out") -> Path:
    """Write the judging queue as JSONL (atomically; see the module docstring).

    Raises:
        memlab.io.OutputFileError: ``out`` is a symbolic link, a directory or a file memlab
            cannot tell it wrote (nothing is written).
    """
    lines = [
        json.dumps(row, ensure_ascii=False, separators=(",", ":"))
        for row in pool.candidates.iter_rows(named=True)
    ]
    publish_file(out, "".join(line + "\n" for line in lines), what=what,
                 **POOL_OUTPUT)  # type: ignore[arg-type]
    return Path(out)


def read_pool(path: str | os.PathLike[str]) -> pl.DataFrame:
    """A judging queue written by :func:`write_pool`, in queue order.

    Raises:
        ValueError: Naming ``file:line`` of a bad line.
    """
    from memlab.datasets.importers import source_lines
    from memlab.io import decode_utf8

    file = Path(path)
    rows = []
    text = decode_utf8(read_bytes(file), str(file))
    # not str.splitlines: a U+2028 or U+0085 held raw in an id stays in its line
    for number, raw in enumerate(source_lines(text), start=1):
        if not raw.strip():
            continue
        try:
            obj = json.loads(raw)
            rows.append(
                (str(obj["qid"]), str(obj["mem_id"]), int(obj["position"]),
                 [str(r) for r in obj["runs"]], int(obj["best_rank"]))
            )
        except RecursionError:
            raise ValueError(
                f"{file.name}:{number}: not a pool line: nested too deeply to read"
            ) from None
        except (json.JSONDecodeError, KeyError, TypeError, ValueError) as exc:
            raise ValueError(f"{file.name}:{number}: not a pool line: {exc}") from None
    return pl.DataFrame(rows, schema=POOL_SCHEMA, orient="row").sort("position")
