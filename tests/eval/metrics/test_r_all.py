"""Tests of memlab.eval.metrics.r_all: the all-relevant measure."""

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


def test_hand_r_all() -> None:
    hand = evaluate(
        make_rankings(HAND_RANKINGS), make_qrels(HAND_QRELS), ["R_all@1", "R_all@3", "R_all@4"]
    )
    assert values(hand, "R_all@1") == {"q1": 0.0, "q2": 0.0, "q3": 0.0}
    assert values(hand, "R_all@3") == {"q1": 1.0, "q2": 0.0, "q3": 0.0}
    assert values(hand, "R_all@4") == {"q1": 1.0, "q2": 1.0, "q3": 0.0}
    assert hand.schema["metric"] == pl.String
    with pytest.raises(ValueError, match="needs a cutoff"):
        evaluate(make_rankings(HAND_RANKINGS), make_qrels(HAND_QRELS), ["R_all"])
