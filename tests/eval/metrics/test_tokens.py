"""Tests of memlab.eval.metrics.tokens: Context cost, values written as arithmetic."""

import sys
from pathlib import Path

import polars as pl

from memlab.eval.metrics import evaluate

if str(Path(__file__).parent) not in sys.path:  # --import-mode=importlib: helpers by path
    sys.path.insert(0, str(Path(__file__).parent))
from _frames import MEMORIES, make_rankings, values  # noqa: E402


def test_tokens_from_memories_or_rankings() -> None:
    rankings = make_rankings({"q1": ["m1", "m2", "m3"], "q2": ["m4"]})
    got = evaluate(rankings, None, ["tokens@2", "tokens@3"], memories=MEMORIES)
    assert values(got, "tokens@2") == {"q1": 10.0 + 5.0, "q2": 1.0}
    assert values(got, "tokens@3") == {"q1": 10.0 + 5.0 + 7.0, "q2": 1.0}
    own = rankings.with_columns(tokens=pl.Series([2, 3, 4, 8]))
    assert values(evaluate(own, None, ["tokens@2"]), "tokens@2") == {"q1": 2.0 + 3.0, "q2": 8.0}
