"""Candidate frames for the re-ranker tests: ``(mem_id, score)`` pairs of one query ``q``,
ranked (score descending, ties by id)."""

from __future__ import annotations

import polars as pl

from memlab.stages.base import CANDIDATE_SCHEMA, rerank


def frame(pairs: list[tuple[str, float]]) -> pl.DataFrame:
    return rerank(pl.DataFrame(
        {"qid": ["q"] * len(pairs), "mem_id": [m for m, _ in pairs],
         "score": [s for _, s in pairs], "rank": [0] * len(pairs)}, schema=CANDIDATE_SCHEMA,
    ))
