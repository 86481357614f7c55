"""Tests of memlab.eval.metrics.conflict and .archived: exposure, values as arithmetic."""

import sys
from pathlib import Path

import polars as pl

from memlab.eval.metrics import evaluate

if str(Path(__file__).parent) not in sys.path:  # --import-mode=importlib: helpers by path
    sys.path.insert(0, str(Path(__file__).parent))


def test_conflict_and_archived_at_k():
    rankings = pl.DataFrame(
        {"qid": ["a", "a", "a", "b"], "rank": [1, 2, 3, 1], "mem_id": ["x", "y", "z", "x"]}
    )
    memories = pl.DataFrame(
        {"mem_id": ["x", "y", "z"], "contradicts": [["z"], [], ["x"]]},
        schema={"mem_id": pl.String, "contradicts": pl.List(pl.String)},
    )
    queries = pl.DataFrame(
        {"qid": ["a", "b"], "archived": [["z"], []]},
        schema={"qid": pl.String, "archived": pl.List(pl.String)},
    )
    out = evaluate(
        rankings, None, ["conflict@2", "conflict@3", "archived@2", "archived@3"],
        queries=queries, memories=memories,
    )
    got = {(r["metric"], r["qid"]): r["value"] for r in out.to_dicts()}
    assert got == {
        ("conflict@2", "a"): 0.0, ("conflict@2", "b"): 0.0,
        ("conflict@3", "a"): 1.0, ("conflict@3", "b"): 0.0,
        ("archived@2", "a"): 0.0, ("archived@2", "b"): 0.0,
        ("archived@3", "a"): 1.0, ("archived@3", "b"): 0.0,
    }

