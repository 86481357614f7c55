"""Helpers shared by the metric tests: rankings and qrels from plain dicts."""

from __future__ import annotations

import polars as pl

RANK_SCHEMA = {"qid": pl.String, "rank": pl.Int64, "mem_id": pl.String, "score": pl.Float64}


def make_rankings(lists: dict[str, list[str]]) -> pl.DataFrame:
    """One row per ranked memory; ranks follow list order, scores ``1/rank``."""
    rows = [
        (qid, rank, mem_id, 1.0 / rank)
        for qid, mem_ids in lists.items()
        for rank, mem_id in enumerate(mem_ids, start=1)
    ]
    return pl.DataFrame(rows, schema=RANK_SCHEMA, orient="row")


def make_qrels(judged: dict[str, dict[str, int]]) -> pl.DataFrame:
    """``qid, mem_id, relevance`` from ``{qid: {mem_id: grade}}``."""
    rows = [(qid, mem_id, rel) for qid, rels in judged.items() for mem_id, rel in rels.items()]
    return pl.DataFrame(
        rows, schema={"qid": pl.String, "mem_id": pl.String, "relevance": pl.Int64}, orient="row"
    )


def values(per_query: pl.DataFrame, metric: str) -> dict[str, float]:
    """``{qid: value}`` of one metric of a per-query frame."""
    return dict(per_query.filter(pl.col("metric") == metric).select("qid", "value").iter_rows())


# q1: graded, both relevant found; q2: relevant ones deep; q3: no ranking; q4: no qrels.
HAND_RANKINGS = {"q1": ["a", "x", "b"], "q2": ["x", "y", "d", "c"], "q4": ["a"]}
HAND_QRELS = {"q1": {"a": 2, "b": 1}, "q2": {"c": 1, "d": 3}, "q3": {"e": 1}}

MEMORIES = pl.DataFrame(
    {
        "mem_id": ["m1", "m2", "m3", "m4"],
        "client_id": ["A", "B", "global", None],
        "content_hash": ["h1", "h2", "h3", "h4"],
        "tokens": [10, 5, 7, 1],
    },
    schema_overrides={"client_id": pl.String},
)

# q1 ranks a (rel 1), x (unjudged), n (judged 0), b (rel 2), y (unjudged);
# q2 is judged (z: 0) without any relevant memory; q3 is unjudged.
INC_RANKINGS = {"q1": ["a", "x", "n", "b", "y"], "q2": ["z", "w"], "q3": ["a"]}
INC_QRELS = {"q1": {"a": 1, "n": 0, "b": 2, "c": 1}, "q2": {"z": 0}}
