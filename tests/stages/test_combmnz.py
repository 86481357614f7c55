"""Tests for memlab.stages.combmnz (Fox & Shaw 1993)."""

import sys
from pathlib import Path

import pytest

from memlab.memory.store import MemoryStore
from memlab.stages.base import QueryContext, check_frame
from memlab.stages.combmnz import CombMNZ

if str(Path(__file__).parent) not in sys.path:  # --import-mode=importlib: helpers by path
    sys.path.insert(0, str(Path(__file__).parent))
from _fusion_lists import scores, two_lists  # noqa: E402


def test_sum_of_min_max_scores_times_the_lists_that_found_it(now: float) -> None:
    out = CombMNZ().fuse(two_lists(), QueryContext("q", "x", MemoryStore(), now))
    check_frame(out, "combmnz")
    assert scores(out, "combmnz_score") == pytest.approx(
        {"a": 1.0 * 1, "b": 0.5 * 1, "c": (0.0 + 1.0) * 2, "d": 0.0 * 1}, rel=1e-15
    )
    assert out["mem_id"].to_list() == ["c", "a", "b", "d"]
    assert out["dense_score"].to_list()[:3] == [0.3, 0.9, 0.6]  # columns carried
    assert out["bm25_score"].to_list()[0] == 8.0
