"""Tests for memlab.numeric: finite numbers and how error messages show them."""

from __future__ import annotations

import math
import re

import numpy as np
import pytest

from memlab.embed.hashing import HashingEmbedder
from memlab.memory.records import MemoryInputError
from memlab.memory.store import MemoryStore
from memlab.numeric import is_finite_number, shown_number
from memlab.stages.entropy_gate import _number as gate_number
from memlab.stages.lif import LIF
from memlab.stages.lif import _number as lif_number


@pytest.mark.parametrize(
    ("value", "finite"),
    [(0, True), (-3, True), (2.5, True), (np.float64(1.0), True), (10**300, True),
     (10**400, False), (-(10**400), False), (math.inf, False), (math.nan, False),
     (True, False), ("1", False), (None, False)],
)
def test_is_finite_number(value: object, finite: bool) -> None:
    assert is_finite_number(value) is finite


def test_shown_number() -> None:
    assert shown_number(2) == "2"
    assert shown_number(0.5) == "0.5"
    assert shown_number(2**63) == str(2**63)
    # 10**400 has 401 digits: bit_length 1329, 1329 * log10(2) = 400.06
    assert shown_number(10**400) == "an integer of about 401 digits"
    assert shown_number(-(10**5000)) == "an integer of about 5001 digits"  # past str()'s limit


def test_store_refuses_huge_numbers_by_field() -> None:
    store = MemoryStore(embedder=HashingEmbedder(dim=16, seed=0))
    with pytest.raises(MemoryInputError, match=r"^field 'confidence' must lie in \[0, 1\], got "
                       r"an integer of about 401 digits$"):
        store.store("the freeze ends Friday", confidence=10**400, now=0.0)
    with pytest.raises(MemoryInputError, match=r"^field 'retention_days' must be a finite "
                       r"number >= 0, got an integer of about 401 digits$"):
        store.purge_forgotten(retention_days=10**400, now=0.0)
    assert len(store) == 0


def test_stage_parameters_refuse_huge_numbers() -> None:
    with pytest.raises(ValueError, match=re.escape(
            "LIF: parameter 'threshold' must be a float in (-inf, inf); got an integer of about "
            "401 digits")):
        LIF(threshold=10**400)
    # the checks a stage repeats when it runs (a parameter set past the constraints)
    with pytest.raises(ValueError, match=re.escape(
            "lif.py: LIF field 'leak' must be a finite number, got an integer of about 401 digits"
    )):
        lif_number(10**400, "leak")
    with pytest.raises(ValueError, match=re.escape(
            "entropy_gate.py: EntropyGate field 'token_budget' must be a finite number, got an "
            "integer of about 401 digits")):
        gate_number(10**400, "token_budget")
