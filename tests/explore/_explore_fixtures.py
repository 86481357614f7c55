"""Small datasets and stages shared by the explore tests.

Times are days after ``T0`` (2026-03-01T00:00:00Z).
"""

from __future__ import annotations

import numpy as np
import polars as pl

from memlab.datasets.format import Dataset, MemoryOp, Query
from memlab.stages.base import QueryContext, Stage, candidates_from_rows
from memlab.timeutil import SECONDS_PER_DAY, parse_ts

T0 = parse_ts("2026-03-01T00:00:00Z")
DAY = SECONDS_PER_DAY


class Newest(Stage):
    """Every visible memory, newest first (a retriever without parameters)."""

    def transform(self, frame: pl.DataFrame, ctx: QueryContext) -> pl.DataFrame:
        rows = np.flatnonzero(ctx.visible_mask())
        created = ctx.store.column("created_at")[rows]
        return candidates_from_rows(ctx, rows, created, "dense_score")


class Fixed(Stage):
    """Returns ``ids`` ranked 1, 2, … with scores ``len(ids)``, …, 1 (ignores its input)."""

    def __init__(self, ids: tuple[str, ...] = ()) -> None:
        self.ids = ids

    def transform(self, frame: pl.DataFrame, ctx: QueryContext) -> pl.DataFrame:
        n = len(self.ids)
        return pl.DataFrame(
            {
                "qid": [ctx.qid] * n,
                "mem_id": list(self.ids),
                "score": [float(n - i) for i in range(n)],
                "rank": list(range(1, n + 1)),
            },
            schema={"qid": pl.String, "mem_id": pl.String, "score": pl.Float64,
                    "rank": pl.Int64},
        )


class Drop(Stage):
    """Removes one memory and renumbers the ranks."""

    def __init__(self, mem_id: str = "") -> None:
        self.mem_id = mem_id

    def transform(self, frame: pl.DataFrame, ctx: QueryContext) -> pl.DataFrame:
        out = frame.sort("rank").filter(pl.col("mem_id") != self.mem_id)
        return out.with_columns(pl.int_range(1, out.height + 1, dtype=pl.Int64).alias("rank"))


class Reverse(Stage):
    """Reverses the ranking."""

    def transform(self, frame: pl.DataFrame, ctx: QueryContext) -> pl.DataFrame:
        out = frame.sort("rank", descending=True)
        return out.with_columns(pl.int_range(1, out.height + 1, dtype=pl.Int64).alias("rank"))


def small_dataset() -> Dataset:
    """Four writes and two queries for one client.

    ``d1`` (day 0), its duplicate ``d2`` by the same agent (day 1, maps onto ``d1``), ``d3``
    (day 2), ``d4`` (day 5, after both queries). ``q1`` at day 1.5, ``q2`` at day 3; ``q2``
    wants ``d2`` (i.e. ``d1``) with grade 2 and marks ``d3`` stale.
    """
    ops = [
        MemoryOp.store("d1", T0, "Acme hosts its shop on Heroku", "fact", key="host",
                       source_agent="a", client_id="acme"),
        MemoryOp.store("d2", T0 + DAY, "Acme hosts its shop on Heroku", "fact", key="host",
                       source_agent="a", client_id="acme"),
        MemoryOp.store("d3", T0 + 2 * DAY, "Acme billing runs on Stripe", "decision",
                       source_agent="a", client_id="acme"),
        MemoryOp.store("d4", T0 + 5 * DAY, "Acme moved the shop to Fly.io", "fact", key="host",
                       source_agent="a", client_id="acme"),
    ]
    queries = [
        Query(0, "q1", T0 + 1.5 * DAY, "where is the acme shop hosted", client_id="acme",
              relevant={"d1": 1}, tags=("supersession",)),
        Query(0, "q2", T0 + 3 * DAY, "what does acme bill with", client_id="acme",
              relevant={"d2": 2}, stale=("d3",), tags=("scope", "client:acme")),
    ]
    meta = {"name": "small", "version": "1", "description": "explore tests", "license": "MIT",
            "source": "written for the tests"}
    return Dataset(None, meta, ops, queries)
