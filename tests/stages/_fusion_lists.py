"""Two small ranked lists for the fusion tests (ranx's test style: expected values by hand).

``dense``: a 0.9, b 0.6, c 0.3 (ranks 1-3); ``bm25``: c 8.0, d 4.0 (ranks 1-2). Union: a, b, c,
d. Min-max over each list's own candidates: dense a 1, b 0.5, c 0; bm25 c 1, d 0.
"""

from __future__ import annotations

import polars as pl

from memlab.stages.base import CANDIDATE_SCHEMA


def ranked(pairs: list[tuple[str, float]], column: str) -> pl.DataFrame:
    n = len(pairs)
    return pl.DataFrame(
        {"qid": ["q"] * n, "mem_id": [m for m, _ in pairs], "score": [s for _, s in pairs],
         "rank": list(range(1, n + 1)), column: [s for _, s in pairs]},
        schema={**CANDIDATE_SCHEMA, column: pl.Float64()},
    )


def two_lists() -> list[pl.DataFrame]:
    return [
        ranked([("a", 0.9), ("b", 0.6), ("c", 0.3)], "dense_score"),
        ranked([("c", 8.0), ("d", 4.0)], "bm25_score"),
    ]


def scores(frame: pl.DataFrame, column: str) -> dict[str, float]:
    return dict(zip(frame["mem_id"], frame[column], strict=True))
