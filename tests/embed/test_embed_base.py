"""Tests for memlab.embed.base: the protocol, the registry and input checks."""

from __future__ import annotations

import pytest

from memlab.embed import EMBEDDERS, Embedder, HashingEmbedder, MiniLMEmbedder, make_embedder
from memlab.embed.base import check_texts, register_embedder


def test_make_embedder_builds_registered_class_with_params() -> None:
    emb = make_embedder("hashing", dim=8, seed=3)
    assert isinstance(emb, HashingEmbedder)
    assert (emb.dim, emb.seed) == (8, 3)


def test_builtin_embedders_are_registered() -> None:
    assert EMBEDDERS["hashing"] is HashingEmbedder
    assert EMBEDDERS["minilm"] is MiniLMEmbedder


def test_unknown_embedder_lists_known_names() -> None:
    with pytest.raises(ValueError, match=r"unknown embedder 'nope'.*hashing.*minilm"):
        make_embedder("nope")


def test_register_rejects_name_taken_by_other_class() -> None:
    with pytest.raises(ValueError, match="already registered"):

        @register_embedder("hashing")
        class Other:  # noqa: B903
            pass


def test_register_adds_new_name() -> None:
    try:

        @register_embedder("tiny")
        class Tiny(HashingEmbedder):
            pass

        assert EMBEDDERS["tiny"] is Tiny
        assert isinstance(make_embedder("tiny", dim=4), Tiny)
    finally:
        EMBEDDERS.pop("tiny", None)


def test_protocol_is_satisfied_by_implementations() -> None:
    assert isinstance(HashingEmbedder(), Embedder)
    assert isinstance(MiniLMEmbedder(), Embedder)


def test_check_texts_rejects_bare_string() -> None:
    with pytest.raises(TypeError, match="single string"):
        check_texts("a cat")


def test_check_texts_names_bad_index() -> None:
    with pytest.raises(TypeError, match=r"texts\[1\] must be a string, got int"):
        check_texts(["ok", 3])  # type: ignore[list-item]


def test_check_texts_returns_list_copy() -> None:
    src = ("a", "b")
    assert check_texts(src) == ["a", "b"]
