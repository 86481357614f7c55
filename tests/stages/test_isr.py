"""Tests for memlab.stages.isr (Mourão et al. 2015)."""

import sys
from pathlib import Path

import pytest

from memlab.memory.store import MemoryStore
from memlab.stages.base import QueryContext
from memlab.stages.isr import ISR

if str(Path(__file__).parent) not in sys.path:  # --import-mode=importlib: helpers by path
    sys.path.insert(0, str(Path(__file__).parent))
from _fusion_lists import scores, two_lists  # noqa: E402


def test_inverse_square_ranks_times_the_lists(now: float) -> None:
    out = ISR().fuse(two_lists(), QueryContext("q", "x", MemoryStore(), now))
    assert scores(out, "isr_score") == pytest.approx(
        {"a": 1 / 1**2, "b": 1 / 2**2, "c": (1 / 3**2 + 1 / 1**2) * 2, "d": 1 / 2**2}, rel=1e-15
    )
    assert out["mem_id"].to_list() == ["c", "a", "b", "d"]  # b and d tie: by mem_id
