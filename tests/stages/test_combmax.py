"""Tests for memlab.stages.combmax (Fox & Shaw 1993)."""

import sys
from pathlib import Path

import pytest

from memlab.memory.store import MemoryStore
from memlab.stages.base import QueryContext
from memlab.stages.combmax import CombMAX

if str(Path(__file__).parent) not in sys.path:  # --import-mode=importlib: helpers by path
    sys.path.insert(0, str(Path(__file__).parent))
from _fusion_lists import scores, two_lists  # noqa: E402


def test_best_normalised_score(now: float) -> None:
    ctx = QueryContext("q", "x", MemoryStore(), now)
    out = CombMAX().fuse(two_lists(), ctx)
    assert scores(out, "combmax_score") == pytest.approx(
        {"a": 1.0, "b": 0.5, "c": max(0.0, 1.0), "d": 0.0}, rel=1e-15
    )
    by_max = CombMAX(normalization="max").fuse(two_lists(), ctx)
    assert scores(by_max, "combmax_score") == pytest.approx(
        {"a": 0.9 / 0.9, "b": 0.6 / 0.9, "c": max(0.3 / 0.9, 8.0 / 8.0), "d": 4.0 / 8.0},
        rel=1e-15,
    )


def test_unknown_normalization_names_the_field() -> None:
    with pytest.raises(ValueError, match="CombMAX: parameter 'normalization' must be a str among"):
        CombMAX(normalization="softmax")
