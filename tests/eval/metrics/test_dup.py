"""Tests of memlab.eval.metrics.dup: Duplicate exposure, values written as arithmetic."""

import sys
from pathlib import Path

import polars as pl

from memlab.eval.metrics import evaluate

if str(Path(__file__).parent) not in sys.path:  # --import-mode=importlib: helpers by path
    sys.path.insert(0, str(Path(__file__).parent))
from _frames import make_rankings, values  # noqa: E402


def test_dup_exact() -> None:
    memories = pl.DataFrame(
        {
            "mem_id": ["h1", "h2", "u", "t1", "t2", "e1", "e2"],
            "content_hash": ["h", "h", "u", "p", "q", "", None],
            "text": ["x1", "x2", "uniq", "same", "same", "one", "two"],
        }
    )
    rankings = make_rankings({"q1": ["h1", "u", "h2"], "q2": ["t1", "t2"], "q3": ["e1", "e2"]})
    queries = pl.DataFrame({"qid": ["q1", "q2", "q3", "q4"]})
    got = evaluate(rankings, None, ["dup@2", "dup@3"], queries=queries, memories=memories)
    assert values(got, "dup@2") == {"q1": 0.0, "q2": 1.0, "q3": 0.0, "q4": 0.0}
    assert values(got, "dup@3") == {"q1": 1.0, "q2": 1.0, "q3": 0.0, "q4": 0.0}
