import math

import numpy as np
import pytest

from memlab.memory.decay import decay_score, importance_score, recency

T0 = 1_767_225_600.0
DAY = 86_400.0


def test_decay_score_seed_003():
    got = decay_score(np.array([T0, T0]), np.array([0, 3]), np.array([1.0, 0.5]), T0 + 100 * DAY)
    assert got == pytest.approx([math.exp(-1.0), math.exp(-1.0) * (1 + math.log(4)) * 0.5])


def test_importance_score_labels_use_and_decay():
    got = importance_score(
        np.array(["critical", "low", "medium"]), np.array([0, 4, 20]), np.array([0.0, 10.0, 0.0])
    )
    assert got == pytest.approx([1.0, (0.25 + 4 * 0.05) * 0.99**10, 1.0])
    with pytest.raises(ValueError, match="unknown label 'huge'"):
        importance_score(np.array(["huge"]), np.array([0]), np.array([0.0]))


def test_recency_halves_and_decisions_do_not_decay():
    got = recency(np.array(["fact", "decision"]), np.array([T0, T0]), T0 + 60 * DAY)
    assert got == pytest.approx([0.25, 1.0])
