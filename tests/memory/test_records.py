"""json_problem: what keeps a value from being stored as JSON text."""

from __future__ import annotations

import math

import pytest

from memlab.memory.records import MAX_JSON_DEPTH, MemoryInputError, check_json_value, json_problem
from memlab.memory.store import MemoryStore


def _nested(depth: int) -> dict:
    value: dict = {}
    for _ in range(depth - 1):
        value = {"k": value}
    return value


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        ({"a": 1, "b": [1.5, "x", None, True]}, None),
        (_nested(MAX_JSON_DEPTH), None),
        (_nested(MAX_JSON_DEPTH + 1), ("k", "nested deeper than 32 levels")),
        (_nested(5000), ("k", "nested deeper than 32 levels")),
        ({"a": math.nan}, ("a", "holds nan, which JSON cannot represent")),
        ({"a": [1, -math.inf]}, ("a", "holds -inf, which JSON cannot represent")),
        ({"a": "x\ud800"}, ("a", "holds a lone surrogate (\\ud800-\\udfff), which is not text")),
        ({"a": {1: 2}}, ("a", "has a key of type int, not a string")),
        ({"a": {1, 2}}, ("a", "holds a set, which is not a JSON value")),
    ],
)
def test_json_problem(value: object, expected: tuple[str, str] | None) -> None:
    assert json_problem(value) == expected


def test_store_refuses_metadata_it_cannot_write() -> None:
    store = MemoryStore()
    for bad in ({"x": math.nan}, _nested(100), {"\udfff": 1}):
        with pytest.raises(MemoryInputError, match="field 'metadata' "):
            store.store("a fact", "fact", key="k", metadata=bad, now=0.0)
    assert len(store) == 0
    check_json_value({"ok": [1, 2]}, "metadata")
