"""Tests for memlab.stages.wsum (ranx's weighted sum)."""

import sys
from pathlib import Path

import pytest

from memlab.memory.store import MemoryStore
from memlab.stages.base import QueryContext
from memlab.stages.wsum import WeightedSum

if str(Path(__file__).parent) not in sys.path:  # --import-mode=importlib: helpers by path
    sys.path.insert(0, str(Path(__file__).parent))
from _fusion_lists import scores, two_lists  # noqa: E402


def test_weighted_sum_of_per_list_min_max_scores(now: float) -> None:
    ctx = QueryContext("q", "x", MemoryStore(), now)
    out = WeightedSum(weights=(0.3, 0.7)).fuse(two_lists(), ctx)
    assert scores(out, "wsum_score") == pytest.approx(
        {"a": 0.3 * 1.0, "b": 0.3 * 0.5, "c": 0.3 * 0.0 + 0.7 * 1.0, "d": 0.7 * 0.0}, rel=1e-15
    )
    with pytest.raises(ValueError, match="wsum: 1 weights for 2 lists"):
        WeightedSum(weights=(1.0,)).fuse(two_lists(), ctx)


def test_sum_normalisation(now: float) -> None:
    ctx = QueryContext("q", "x", MemoryStore(), now)
    out = WeightedSum(normalization="sum").fuse(two_lists(), ctx)
    dense_den = (0.9 - 0.3) + (0.6 - 0.3) + 0.0
    assert scores(out, "wsum_score") == pytest.approx(
        {"a": 0.6 / dense_den, "b": 0.3 / dense_den, "c": 0.0 + 4.0 / 4.0, "d": 0.0}, rel=1e-12
    )
