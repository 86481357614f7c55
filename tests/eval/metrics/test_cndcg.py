"""Tests of memlab.eval.metrics.cndcg: Condensed nDCG and AP, values written as arithmetic."""

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


def test_condensed_ndcg_and_map_drop_unjudged_before_scoring(incomplete):
    from math import log2

    # condensed list of q1: a (1), n (0), b (2); ideal: 2, 1, 1 (b, a, c)
    dcg3 = 1 / log2(2) + 0 / log2(3) + 2 / log2(4)
    idcg3 = 2 / log2(2) + 1 / log2(3) + 1 / log2(4)
    assert values(incomplete, "cnDCG@3") == pytest.approx({"q1": dcg3 / idcg3})
    assert values(incomplete, "cnDCG") == pytest.approx({"q1": dcg3 / idcg3})
    # the standard nDCG@3 sees a, x, n: only a gains
    assert values(incomplete, "nDCG@3") == pytest.approx({"q1": (1 / log2(2)) / idcg3})
    # AP' of q1: a at 1 (1/1), b at 3 (2/3), c missing; divided by R = 3
    assert values(incomplete, "cMAP") == pytest.approx({"q1": (1 + 2 / 3) / 3})
