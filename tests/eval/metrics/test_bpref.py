"""Tests of memlab.eval.metrics.bpref: bpref, values written as arithmetic."""

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


def test_bpref_ignores_unjudged_memories(incomplete):
    # R = 3 (a, b, c), N = 1 (n): a has no judged non-relevant above it, b has n above it,
    # c is not retrieved: (1 + (1 - 1/min(3, 1)) + 0) / 3.
    assert values(incomplete, "bpref") == pytest.approx({"q1": (1 + 0 + 0) / 3})
