"""Tests of memlab.eval.metrics.judged: Judgement rate, values written as arithmetic."""

import sys
from pathlib import Path

import polars as pl
import pytest

from memlab.eval.metrics import evaluate

if str(Path(__file__).parent) not in sys.path:  # --import-mode=importlib: helpers by path
    sys.path.insert(0, str(Path(__file__).parent))
from _frames import INC_QRELS, INC_RANKINGS, make_qrels, make_rankings, values  # noqa: E402


@pytest.fixture
def incomplete() -> pl.DataFrame:
    metrics = ["judged@2", "judged@4", "judged@10", "bpref", "cnDCG@3", "cnDCG", "cMAP",
               "nDCG@3"]
    return evaluate(make_rankings(INC_RANKINGS), make_qrels(INC_QRELS), metrics)


def test_judged_at_k_is_the_judged_share_of_the_top_k(incomplete):
    # q1 top 2: a judged, x not; top 4: a, n, b judged; top 10 is the 5 ranked (ir_measures
    # divides by the ranking's length when shorter than k); q2: z judged, w not.
    assert values(incomplete, "judged@2") == {"q1": 1 / 2, "q2": 1 / 2}
    assert values(incomplete, "judged@4") == {"q1": 3 / 4, "q2": 1 / 2}
    assert values(incomplete, "judged@10") == {"q1": 3 / 5, "q2": 1 / 2}


def test_judged_needs_qrels():
    with pytest.raises(ValueError, match="metric 'judged' needs qrels"):
        evaluate(make_rankings({"q": ["a"]}), None, ["judged@10"])
