"""The judging app's logic (``notebooks/judge.py``): a queue of pooled candidates, one at a
time, with the query's scope and time and the memory's history; each grade is saved at once
through :func:`memlab.judge.judgments.judge`.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import polars as pl

from memlab.datasets.format import QUERIES_FILE, Dataset, load_dataset
from memlab.datasets.importers import source_lines
from memlab.io import decode_utf8, read_bytes
from memlab.judge.judgments import judge, read_judgments
from memlab.judge.pool import POOL_SCHEMA, read_pool, served_rankings
from memlab.timeutil import to_iso

RECORDING = Path(__file__).resolve().parents[3] / "tests" / "fixtures" / "recording"
"""The small recording the app opens when no dataset is given."""


def served_pool(dataset: str | os.PathLike[str]) -> pl.DataFrame:
    """A judging queue of the recording's ``served`` lists alone (no runs needed)."""
    served = served_rankings(dataset)
    grouped = (
        served.group_by("qid", "mem_id", maintain_order=True)
        .agg(runs=pl.col("run").unique().sort(), best_rank=pl.col("rank").min())
    )
    return grouped.select(
        "qid",
        "mem_id",
        position=pl.int_range(1, pl.len() + 1, dtype=pl.Int64),
        runs="runs",
        best_rank=pl.col("best_rank").cast(pl.Int64),
    ).cast(POOL_SCHEMA)  # type: ignore[arg-type]


def pool_lines(path: str | os.PathLike[str]) -> dict[tuple[str, str], int]:
    """Line number (from 1) of each ``(qid, mem_id)`` of a pool file :func:`read_pool` read.

    The first line wins when a pair occurs twice; a line that is not a JSON object with
    ``qid`` and ``mem_id`` is left out (:func:`read_pool` reports it).
    """
    out: dict[tuple[str, str], int] = {}
    text = decode_utf8(read_bytes(Path(path)), str(path))
    for number, raw in enumerate(source_lines(text), start=1):
        try:
            obj = json.loads(raw) if raw.strip() else None
        except (json.JSONDecodeError, RecursionError):
            continue
        if isinstance(obj, dict) and "qid" in obj and "mem_id" in obj:
            out.setdefault((str(obj["qid"]), str(obj["mem_id"])), number)
    return out


def check_pool(
    queue: pl.DataFrame,
    qids: set[str],
    mem_ids: set[str],
    *,
    source: str,
    lines: dict[tuple[str, str], int] | None = None,
) -> None:
    """Refuse a judging queue naming a query or a memory the dataset does not hold.

    Args:
        queue: The queue (``qid``, ``mem_id``, ...), checked in queue order.
        qids: The dataset's query ids.
        mem_ids: The dataset's memory ids (its stores).
        source: What the queue was read from (the pool file), for the message.
        lines: ``(qid, mem_id)`` → line number in ``source`` (:func:`pool_lines`), when known.

    Raises:
        ValueError: ``"<source>[:<line>]: query 'q9' is not in the dataset"`` (or ``memory``)
            for the first pair in queue order naming an unknown id.
    """
    for qid, mem_id in queue.select("qid", "mem_id").iter_rows():
        line = None if lines is None else lines.get((qid, mem_id))
        where = source if line is None else f"{source}:{line}"
        if qid not in qids:
            raise ValueError(f"{where}: query {qid!r} is not in the dataset")
        if mem_id not in mem_ids:
            raise ValueError(f"{where}: memory {mem_id!r} is not in the dataset")


@dataclass
class JudgeSession:
    """One judge working through a queue.

    Args:
        dataset: The dataset directory; judgments go to its ``judgments.jsonl``.
        pool: The judging queue file (default: the recording's served lists).
        judge: Who judges.

    Raises:
        DatasetError: If ``dataset`` is not a valid dataset directory (a ``ValueError``).
        OSError: If the pool file cannot be read.
        ValueError: If a pool line cannot be read, or names a query or memory the dataset does
            not hold (:func:`check_pool`).
    """

    dataset: Path
    pool: Path | None = None
    judge: str = "judge"
    skipped: set[tuple[str, str]] = field(default_factory=set)

    def __post_init__(self) -> None:
        self.dataset = Path(self.dataset)
        self.data: Dataset = load_dataset(self.dataset)
        self.queue = served_pool(self.dataset) if self.pool is None else read_pool(self.pool)
        self.raw_queries: dict[str, dict[str, Any]] = {}
        # not str.splitlines: a U+2028 or U+0085 held raw in a query's text stays in its line
        for raw in source_lines((self.dataset / QUERIES_FILE).read_text(encoding="utf-8")):
            if raw.strip():
                obj = json.loads(raw)
                self.raw_queries[obj["qid"]] = obj
        source = f"the served lists of {self.dataset}" if self.pool is None else str(self.pool)
        check_pool(
            self.queue,
            set(self.raw_queries),
            {op.id for op in self.data.stores()},
            source=source,
            lines=None if self.pool is None else pool_lines(self.pool),
        )

    def done(self) -> set[tuple[str, str]]:
        """(qid, mem_id) pairs this judge has judged (read from disk: survives a restart)."""
        return {
            (j.qid, j.mem_id)
            for j in read_judgments(self.dataset)
            if j.source == "human" and j.judge == self.judge
        }

    def remaining(self) -> pl.DataFrame:
        """The queue without what this judge judged or skipped, in queue order."""
        gone = self.done() | self.skipped
        keys = [(q, m) for q, m in self.queue.select("qid", "mem_id").iter_rows()]
        keep = [k not in gone for k in keys]
        return self.queue.filter(pl.Series(keep, dtype=pl.Boolean))

    def current(self) -> dict[str, Any] | None:
        """The next candidate (``qid``, ``mem_id``, ``runs``, ``best_rank``), or ``None``."""
        rest = self.remaining()
        return None if rest.is_empty() else rest.row(0, named=True)

    def progress(self) -> tuple[int, int]:
        """(judged by this judge, queue length)."""
        keys = set(self.queue.select("qid", "mem_id").iter_rows())
        return len(self.done() & keys), self.queue.height

    def query_view(self, qid: str) -> dict[str, Any]:
        """The query's text, scope (client, projects), agent and time."""
        q = self.raw_queries[qid]
        return {
            "qid": qid,
            "text": q["text"],
            "time": q["ts"],
            "client": q.get("client_id") or "every client",
            "projects": ", ".join(q.get("projects") or []) or "—",
            "agent": q.get("agent") or "—",
        }

    def history(self, mem_id: str) -> pl.DataFrame:
        """The memory's version chain: every store with its key and client, oldest first, with
        who wrote it and when; the memory alone when it has no key."""
        stores = {op.id: op for op in self.data.stores()}
        if mem_id not in stores:
            raise ValueError(f"memory {mem_id!r} is not in {self.dataset}")
        op = stores[mem_id]
        key = op.fields.get("key") or op.fields.get("subject")
        chain = [
            s for s in stores.values()
            if s.id == mem_id
            or (key is not None
                and (s.fields.get("key") or s.fields.get("subject")) == key
                and s.fields.get("client_id") == op.fields.get("client_id"))
        ]
        rows = [
            (s.id, to_iso(s.ts), s.fields.get("source_agent"), s.type, s.text,
             "this one" if s.id == mem_id else "")
            for s in sorted(chain, key=lambda s: (s.ts, s.line))
        ]
        schema = ["mem_id", "written", "by", "type", "text", "judged"]
        return pl.DataFrame(rows, schema=schema, orient="row")

    def grade(self, grade: int, *, note: str | None = None) -> dict[str, Any] | None:
        """Judge the current candidate (saved at once); returns it, or ``None`` when done."""
        cur = self.current()
        if cur is None:
            return None
        judge(self.dataset, cur["qid"], cur["mem_id"], grade, judge=self.judge, note=note)
        return cur

    def skip(self) -> dict[str, Any] | None:
        """Leave the current candidate for later (this session only)."""
        cur = self.current()
        if cur is not None:
            self.skipped.add((cur["qid"], cur["mem_id"]))
        return cur
