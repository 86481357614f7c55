"""Tests of memlab.eval.metrics.stale: Stale exposure, values written as arithmetic."""

import sys
from pathlib import Path

import polars as pl

from memlab.eval.metrics import evaluate

if str(Path(__file__).parent) not in sys.path:  # --import-mode=importlib: helpers by path
    sys.path.insert(0, str(Path(__file__).parent))
from _frames import make_rankings, values  # noqa: E402


def test_stale_exact() -> None:
    rankings = make_rankings({"q1": ["a", "x"], "q2": ["x"], "q3": ["a", "b", "z"]})
    queries = pl.DataFrame(
        {
            "qid": ["q1", "q2", "q3", "q4"],
            "client_id": [None, None, None, None],
            "stale": [["x"], [], ["z", "y"], None],
            "tags": [[], [], [], []],
        },
        schema_overrides={"client_id": pl.String, "stale": pl.List(pl.String)},
    )
    got = evaluate(rankings, None, ["stale@1", "stale@2", "stale@3"], queries=queries)
    assert values(got, "stale@1") == {"q1": 0.0, "q3": 0.0}
    assert values(got, "stale@2") == {"q1": 1.0, "q3": 0.0}
    assert values(got, "stale@3") == {"q1": 1.0, "q3": 1.0}
