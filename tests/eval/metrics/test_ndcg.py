"""Tests of memlab.eval.metrics.ndcg: graded nDCG, values written as arithmetic."""

import math
import sys
from pathlib import Path

import polars as pl
import pytest

from memlab.eval.metrics import evaluate

if str(Path(__file__).parent) not in sys.path:  # --import-mode=importlib: helpers by path
    sys.path.insert(0, str(Path(__file__).parent))
from _frames import (  # noqa: E402
    HAND_QRELS,
    HAND_RANKINGS,
    make_qrels,
    make_rankings,
    values,
)


def test_hand_ndcg() -> None:
    hand = evaluate(make_rankings(HAND_RANKINGS), make_qrels(HAND_QRELS), ["nDCG@3", "nDCG"])
    got = values(hand, "nDCG@3")
    assert got["q1"] == pytest.approx(
        (2 / math.log2(2) + 1 / math.log2(4)) / (2 / math.log2(2) + 1 / math.log2(3)), abs=1e-12
    )
    assert got["q2"] == pytest.approx(
        (3 / math.log2(4)) / (3 / math.log2(2) + 1 / math.log2(3)), abs=1e-12
    )
    assert got["q3"] == 0.0
    full = values(hand, "nDCG")
    assert full["q2"] == pytest.approx(
        (3 / math.log2(4) + 1 / math.log2(5)) / (3 / math.log2(2) + 1 / math.log2(3)), abs=1e-12
    )
    assert pl.Series(list(full.values())).len() == 3
