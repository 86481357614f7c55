"""Tests of memlab.eval.metrics.leak: Cross-client leak, values written as arithmetic."""

import sys
from pathlib import Path

import polars as pl

from memlab.eval.metrics import evaluate

if str(Path(__file__).parent) not in sys.path:  # --import-mode=importlib: helpers by path
    sys.path.insert(0, str(Path(__file__).parent))
from _frames import MEMORIES, make_rankings, values  # noqa: E402


def test_leak_exact() -> None:
    rankings = make_rankings({"q1": ["m1", "m3", "m2"], "q2": ["m2"], "q4": ["m4", "m3"]})
    queries = pl.DataFrame(
        {"qid": ["q1", "q2", "q3", "q4"], "client_id": ["A", None, "B", "A"]},
    )
    got = evaluate(rankings, None, ["leak@2", "leak@3"], queries=queries, memories=MEMORIES)
    # q2 is unscoped (no row); q3 has no ranking; m4 (null client) counts as global.
    assert values(got, "leak@2") == {"q1": 0.0, "q3": 0.0, "q4": 0.0}
    assert values(got, "leak@3") == {"q1": 1.0, "q3": 0.0, "q4": 0.0}
