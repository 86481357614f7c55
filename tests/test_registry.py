"""Tests for memlab.registry: registration by decorator and lookup by name."""

from __future__ import annotations

import re

import pytest

from memlab.registry import Registry


def double(x: int) -> int:
    return 2 * x


def triple(x: int) -> int:
    return 3 * x


def test_register_records_and_returns_the_object_unchanged() -> None:
    registry: Registry[object] = Registry("widget")
    decorated = registry.register("double")(double)
    assert decorated is double
    assert registry == {"double": double}
    assert registry.lookup("double") is double
    assert registry.kind == "widget"


def test_register_as_class_decorator() -> None:
    registry: Registry[type] = Registry("widget")

    @registry.register("plain")
    class Plain:
        pass

    assert registry["plain"] is Plain
    assert Plain.__name__ == "Plain"


def test_registry_is_a_dict_in_registration_order() -> None:
    registry: Registry[object] = Registry("widget")
    registry.register("b")(triple)
    registry.register("a")(double)
    assert isinstance(registry, dict)
    assert list(registry) == ["b", "a"]
    assert "a" in registry
    assert registry.get("c") is None


def test_register_same_object_twice_is_allowed() -> None:
    registry: Registry[object] = Registry("widget")
    registry.register("double")(double)
    assert registry.register("double")(double) is double
    assert registry == {"double": double}


def test_register_other_object_under_taken_name_is_refused() -> None:
    registry: Registry[object] = Registry("widget")
    registry.register("f")(double)
    message = f"widget 'f' is already registered to {double!r}"
    with pytest.raises(ValueError, match=f"^{re.escape(message)}$"):
        registry.register("f")(triple)
    assert registry["f"] is double


def test_lookup_unknown_name_lists_known_names_sorted() -> None:
    registry: Registry[object] = Registry("widget")
    registry.register("c")(double)
    registry.register("a")(triple)
    registry.register("b")(double)
    message = "unknown widget 'z'; known widgets: a, b, c"
    with pytest.raises(ValueError, match=f"^{re.escape(message)}$"):
        registry.lookup("z")


def test_lookup_in_empty_registry() -> None:
    registry: Registry[object] = Registry("BM25 engine")
    message = "unknown BM25 engine 'x'; known BM25 engines: (none)"
    with pytest.raises(ValueError, match=f"^{re.escape(message)}$"):
        registry.lookup("x")


def test_lookup_error_is_not_chained_to_key_error() -> None:
    registry: Registry[object] = Registry("widget")
    with pytest.raises(ValueError) as info:
        registry.lookup("x")
    assert info.value.__cause__ is None
    assert info.value.__suppress_context__ is True
