"""Tests for memlab.stages.borda (Aslam & Montague 2001)."""

import sys
from pathlib import Path

import pytest

from memlab.memory.store import MemoryStore
from memlab.stages.base import QueryContext
from memlab.stages.borda import BordaFuse

if str(Path(__file__).parent) not in sys.path:  # --import-mode=importlib: helpers by path
    sys.path.insert(0, str(Path(__file__).parent))
from _fusion_lists import scores, two_lists  # noqa: E402


def test_borda_points_with_unranked_share(now: float) -> None:
    out = BordaFuse().fuse(two_lists(), QueryContext("q", "x", MemoryStore(), now))
    n = 4  # a, b, c, d
    dense_missing = (n - 3 + 1) / 2  # d
    bm25_missing = (n - 2 + 1) / 2  # a, b
    assert scores(out, "borda_score") == pytest.approx(
        {
            "a": (n - 1 + 1) + bm25_missing,
            "b": (n - 2 + 1) + bm25_missing,
            "c": (n - 3 + 1) + (n - 1 + 1),
            "d": dense_missing + (n - 2 + 1),
        },
        rel=1e-15,
    )
