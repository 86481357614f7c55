"""Tests of memlab.eval.metrics.mrr: reciprocal rank, values written as arithmetic."""

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


def test_hand_mrr() -> None:
    hand = evaluate(make_rankings(HAND_RANKINGS), make_qrels(HAND_QRELS), ["MRR", "MRR@2"])
    assert values(hand, "MRR") == pytest.approx({"q1": 1 / 1, "q2": 1 / 3, "q3": 0.0})
    assert values(hand, "MRR@2") == pytest.approx({"q1": 1 / 1, "q2": 0.0, "q3": 0.0})


def test_given_order_wins_over_scores_and_ids() -> None:
    # Equal scores: trec_eval alone would put "b" first (ties broken by id); the given ranks
    # put "a" first, so the relevant "b" is at position 2.
    rankings = pl.DataFrame(
        {"qid": ["q", "q"], "rank": [1, 2], "mem_id": ["a", "b"], "score": [0.3, 0.3]}
    )
    qrels = make_qrels({"q": {"b": 1}})
    assert values(evaluate(rankings, qrels, ["MRR", "Success@1"]), "MRR") == {"q": 1 / 2}
    # Scores increasing with rank are ignored too; gaps in rank keep the order.
    gapped = pl.DataFrame(
        {"qid": ["q", "q", "q"], "rank": [9, 2, 5], "mem_id": ["b", "c", "a"], "score": [3.0, 1, 2]}
    )
    assert values(evaluate(gapped, qrels, ["MRR"]), "MRR") == {"q": 1 / 3}
    assert values(evaluate(gapped, qrels, ["Success@2"]), "Success@2") == {"q": 0.0}
