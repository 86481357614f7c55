"""Tests of memlab.eval.metrics.success: Success@k and its old name R_any@k."""

import sys
from pathlib import Path

import polars as pl

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

from memlab.eval.metrics import higher_is_better, metric_family, parse_metric  # noqa: E402


def test_hand_success() -> None:
    metrics = ["Success@1", "Success@3"]
    hand = evaluate(make_rankings(HAND_RANKINGS), make_qrels(HAND_QRELS), metrics)
    assert values(hand, "Success@1") == {"q1": 1.0, "q2": 0.0, "q3": 0.0}
    assert values(hand, "Success@3") == {"q1": 1.0, "q2": 1.0, "q3": 0.0}


def test_r_any_is_an_alias_and_results_carry_the_new_name() -> None:
    rankings, qrels = make_rankings(HAND_RANKINGS), make_qrels(HAND_QRELS)
    old = evaluate(rankings, qrels, ["R_any@3"])
    assert old.equals(evaluate(rankings, qrels, ["Success@3"]))
    assert set(old.get_column("metric")) == {"Success@3"}
    assert parse_metric("R_any@3").name == "Success@3"
    assert metric_family("R_any@3").name == "Success"
    assert higher_is_better("R_any@3") is True
    # the alias and the name are one metric: asked for twice, computed once
    both = evaluate(rankings, qrels, ["R_any@3", "Success@3"])
    assert both.height == 3
    assert isinstance(both, pl.DataFrame)
