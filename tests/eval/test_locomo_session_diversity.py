"""eval/locomo_session_diversity.py: MMR over a ranking's head with same-session similarity."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import numpy as np

SCRIPT = Path(__file__).resolve().parents[2] / "eval" / "locomo_session_diversity.py"
_spec = importlib.util.spec_from_file_location("locomo_session_diversity", SCRIPT)
script = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(script)

IDS = ["c:D1:1", "c:D1:2", "c:D2:1"]
SCORES = np.array([1.0, 0.9, 0.5])  # relevance after min-max scaling: 1, 0.8, 0


def test_sessions_are_the_turn_ids_without_the_turn_number():
    assert script.session_of(["c:D2:4", "c:D1:1", "c:D2:9", "d:D2:1"]).tolist() == [1, 0, 1, 2]


def test_lambda_one_keeps_the_order():
    assert script.diversified_top(IDS, SCORES, 1.0) == IDS


def test_a_turn_of_an_unseen_session_overtakes_a_second_turn_of_the_first():
    # after c:D1:1, MMR(c:D1:2) = 0.5·0.8 − 0.5·1 = −0.1 and MMR(c:D2:1) = 0.5·0 − 0.5·0 = 0
    assert script.diversified_top(IDS, SCORES, 0.5) == ["c:D1:1", "c:D2:1", "c:D1:2"]
    # at λ = 0.9: 0.9·0.8 − 0.1·1 = 0.62 beats 0.9·0 − 0 = 0
    assert script.diversified_top(IDS, SCORES, 0.9) == IDS
    assert script.diversified_top(IDS, SCORES, 0.5, k=2) == ["c:D1:1", "c:D2:1"]
