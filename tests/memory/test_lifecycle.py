import numpy as np
import pytest

from memlab.memory.lifecycle import access_boost, effective_confidence, lifecycle_factor


@pytest.mark.parametrize(
    ("days", "table"),
    [(0, 1.000), (7, 0.869), (14, 0.755), (30, 0.545), (60, 0.297), (90, 0.162)],
)
def test_decay_follows_the_formula_and_the_seed_table(days, table):
    got = float(effective_confidence(1.0, days))
    assert got == pytest.approx(0.98**days, rel=1e-12)
    # The seed's table is printed to three places; three of its rows (7, 14 and 60 days) are
    # one unit in the last place away from its own formula (0.98**7 = 0.86813…).
    assert abs(got - table) < 0.0015


@pytest.mark.parametrize(("days", "expected"), [(30, 0.545), (90, 0.162)])
def test_decay_rows_quoted_by_the_spec_round_exactly(days, expected):
    assert round(float(effective_confidence(1.0, days)), 3) == expected


@pytest.mark.parametrize(
    ("count", "expected"), [(0, 1.000), (1, 1.300), (3, 1.600), (7, 1.900), (15, 2.200)]
)
def test_access_boost_table_of_seed_000(count, expected):
    assert round(float(access_boost(count)), 3) == expected


def test_constants_are_parameters():
    assert float(effective_confidence(1.0, 10, decay_factor=0.9)) == pytest.approx(0.9**10)
    assert float(access_boost(3, boost_weight=0.5)) == pytest.approx(1 + 0.5 * 2)


def test_negative_days_clamp_to_zero():
    assert float(effective_confidence(0.8, -3)) == pytest.approx(0.8)


def test_only_facts_and_statuses_decay():
    types = np.array(["event", "fact", "decision", "status"])
    got = lifecycle_factor(types, np.ones(4), np.full(4, 30.0), np.array([0, 0, 1, 1]))
    assert got.tolist() == pytest.approx([1.0, 0.98**30, 1.3, 0.98**30 * 1.3])
