"""Tests for memlab.stages.combanz (Fox & Shaw 1993)."""

import sys
from pathlib import Path

import pytest

from memlab.memory.store import MemoryStore
from memlab.stages.base import QueryContext
from memlab.stages.combanz import CombANZ

if str(Path(__file__).parent) not in sys.path:  # --import-mode=importlib: helpers by path
    sys.path.insert(0, str(Path(__file__).parent))
from _fusion_lists import scores, two_lists  # noqa: E402


def test_mean_normalised_score_over_the_lists_that_found_it(now: float) -> None:
    out = CombANZ().fuse(two_lists(), QueryContext("q", "x", MemoryStore(), now))
    assert scores(out, "combanz_score") == pytest.approx(
        {"a": 1.0 / 1, "b": 0.5 / 1, "c": (0.0 + 1.0) / 2, "d": 0.0 / 1}, rel=1e-15
    )
    assert out["mem_id"].to_list()[0] == "a" and out["mem_id"].to_list()[-1] == "d"
