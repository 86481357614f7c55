"""Tests of memlab.eval.metrics.recall: Recall@k and its old name R_frac@k."""

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

from memlab.eval.metrics import parse_metric  # noqa: E402


def test_hand_recall() -> None:
    metrics = ["Recall@1", "Recall@3"]
    hand = evaluate(make_rankings(HAND_RANKINGS), make_qrels(HAND_QRELS), metrics)
    assert values(hand, "Recall@1") == pytest.approx({"q1": 1 / 2, "q2": 0 / 2, "q3": 0 / 1})
    assert values(hand, "Recall@3") == pytest.approx({"q1": 2 / 2, "q2": 1 / 2, "q3": 0 / 1})


def test_r_frac_is_an_alias() -> None:
    rankings, qrels = make_rankings(HAND_RANKINGS), make_qrels(HAND_QRELS)
    old = evaluate(rankings, qrels, ["R_frac@3"])
    assert set(old.get_column("metric")) == {"Recall@3"}
    assert values(old, "Recall@3") == pytest.approx({"q1": 2 / 2, "q2": 1 / 2, "q3": 0 / 1})
    assert parse_metric("R_frac@010").name == "Recall@10"
    assert old.schema["value"] == pl.Float64
