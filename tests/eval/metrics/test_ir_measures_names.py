"""Tests of memlab.eval.metrics.ir_measures_names: ir_measures measures passed through."""

import sys
from pathlib import Path

import pytest

from memlab.eval.experiment import check_metrics
from memlab.eval.metrics import evaluate, higher_is_better, metric_family, parse_metric

if str(Path(__file__).parent) not in sys.path:  # --import-mode=importlib: helpers by path
    sys.path.insert(0, str(Path(__file__).parent))
from _frames import make_qrels, make_rankings, values  # noqa: E402

# q1 ranks a (rel 1), x, b (rel 2), y, z; c (rel 1) is not ranked, n is judged 0.
# q2 ranks only x; q3 has a relevant id and no ranking; q4 has a ranking and no judgement.
RANKINGS = {"q1": ["a", "x", "b", "y", "z"], "q2": ["x"], "q4": ["a"]}
QRELS = {"q1": {"a": 1, "b": 2, "c": 1, "n": 0}, "q2": {"c": 1}, "q3": {"e": 1}}


@pytest.fixture(scope="module")
def passed() -> object:
    names = ["P@5", "AP", "RR", "P(rel=2)@5", "RBP(p=0.8)", "RBP(p=0.5,rel=1)", "NumRet"]
    return evaluate(make_rankings(RANKINGS), make_qrels(QRELS), names)


def test_precision_at_5(passed):
    # q1: a and b among the 5; q2: nothing relevant; q3: no ranking
    assert values(passed, "P@5") == pytest.approx({"q1": 2 / 5, "q2": 0 / 5, "q3": 0.0})
    assert values(passed, "P(rel=2)@5") == pytest.approx({"q1": 1 / 5, "q2": 0.0, "q3": 0.0})


def test_average_precision_and_reciprocal_rank(passed):
    # q1: a at 1 (1/1), b at 3 (2/3), c missing; R = 3
    assert values(passed, "AP") == pytest.approx({"q1": (1 / 1 + 2 / 3) / 3, "q2": 0, "q3": 0})
    assert values(passed, "RR") == pytest.approx({"q1": 1 / 1, "q2": 0.0, "q3": 0.0})


def test_rank_biased_precision_gets_memlab_threshold(passed):
    # RBP = (1 - p) * sum of p^(i-1) over relevant positions i (a at 1, b at 3)
    assert values(passed, "RBP(rel=1)") == pytest.approx(
        {"q1": (1 - 0.8) * (0.8**0 + 0.8**2), "q2": 0.0, "q3": 0.0}
    )
    assert values(passed, "RBP(p=0.5,rel=1)") == pytest.approx(
        {"q1": (1 - 0.5) * (0.5**0 + 0.5**2), "q2": 0.0, "q3": 0.0}
    )
    assert parse_metric("RBP(p=0.8)").name == "RBP(rel=1)"


def test_numret_counts_and_is_lower_is_better(passed):
    assert values(passed, "NumRet") == {"q1": 5.0, "q2": 1.0, "q3": 0.0}
    assert higher_is_better("NumRet") is False
    assert higher_is_better("NumRet(rel=1)") is True
    assert all(higher_is_better(m) for m in ("P@5", "AP", "RBP(p=0.8)", "nDCG@10", "RR"))


def test_names_are_canonical_and_memlab_families_come_first():
    assert parse_metric("P(rel=1)@5").name == "P@5"
    assert parse_metric("AP@10").measure == "AP@10"
    assert metric_family("P@5").name == "ir_measures"
    # memlab's own family wins over ir_measures' measure of the same name
    assert parse_metric("nDCG@10").measure is None
    assert parse_metric("MAP").family == "MAP"
    assert check_metrics(["P@5", "R_any@10", "Success@10", "RBP(p=0.8)"]) == [
        "P@5", "Success@10", "RBP(rel=1)",
    ]


def test_unknown_and_uncomputable_names_are_refused():
    with pytest.raises(ValueError, match="unknown metric 'precision@5'"):
        parse_metric("precision@5")
    with pytest.raises(ValueError, match="none of its installed providers computes it"):
        parse_metric("alpha_nDCG@10")
    with pytest.raises(ValueError, match="needs qrels"):
        evaluate(make_rankings(RANKINGS), None, ["P@5"])


@pytest.mark.parametrize(
    ("name", "message"),
    [
        ("RBP(p=2)", "metric 'RBP(p=2)': invalid param p=2"),
        ("P@0", "metric 'P@0': cutoff must be an integer in [1, 100000], got 0"),
        ("P@99999999999999999999",
         "metric 'P@99999999999999999999': cutoff must be an integer in [1, 100000], got "
         "99999999999999999999"),
        ("P(rel=0)@5", "metric 'P(rel=0)@5': parameter 'rel' must be an integer in [1, 1000000], "
         "got 0"),
        ("Compat(p=1e400)", "metric 'Compat(p=1e400)': parameter 'p' must be finite and at most "
         "1000000 in size, got inf"),
        ("ERR@5", "metric 'ERR@5': ERR@5 is computed only by gdeval, which runs an external "
         "program; memlab computes measures in-process only"),
        ("NERR10(max_rel=0)", "metric 'NERR10(max_rel=0)': NERR10(max_rel=0) cannot be computed: "
         "min_rel must be less than max_rel"),
        ("nDCG@0", "metric 'nDCG@0': cutoff k must be >= 1 and <= 100000, got 0"),
        ("nDCG@100001", "metric 'nDCG@100001': cutoff k must be >= 1 and <= 100000, got 100001"),
    ],
)
def test_bad_measure_names_are_refused_when_parsed(name, message):
    with pytest.raises(ValueError) as info:
        check_metrics(["P@5", name])
    assert str(info.value) == message


def test_largest_cutoff_is_accepted():
    assert parse_metric("P@100000").name == "P@100000"
    assert parse_metric("nDCG@100000").k == 100000
