"""Tests of memlab.eval.metrics.map: average precision, values written as arithmetic."""

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


def test_hand_map() -> None:
    hand = evaluate(make_rankings(HAND_RANKINGS), make_qrels(HAND_QRELS), ["MAP", "MAP@3"])
    assert values(hand, "MAP") == pytest.approx(
        {"q1": (1 / 1 + 2 / 3) / 2, "q2": (1 / 3 + 2 / 4) / 2, "q3": 0.0}
    )
    assert values(hand, "MAP@3") == pytest.approx(
        {"q1": (1 / 1 + 2 / 3) / 2, "q2": (1 / 3) / 2, "q3": 0.0}
    )
    assert hand.schema["value"] == pl.Float64
