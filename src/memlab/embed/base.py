"""The embedder protocol and the registry of named embedders.

An embedder maps texts to float32 row vectors of unit L2 norm, so a dot product of two rows is
their cosine similarity. Embedders are registered under a short name with
:func:`register_embedder` and built from configuration with :func:`make_embedder`.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any, Protocol, runtime_checkable

import numpy as np

from memlab.registry import Registry

__all__ = [
    "EMBEDDERS",
    "EMBEDDER_NAME",
    "PATH_PREFIXES",
    "Embedder",
    "check_texts",
    "is_embedder_name",
    "make_embedder",
    "register_embedder",
]


@runtime_checkable
class Embedder(Protocol):
    """Anything that turns texts into L2-normalised float32 vectors.

    Attributes:
        model_id: Identifier of the model and its settings; two embedders with the same
            ``model_id`` must produce the same vectors (it keys the embedding cache).
        dim: Length of every embedding vector.
    """

    @property
    def model_id(self) -> str:
        """Identifier of the model and its settings."""
        ...

    @property
    def dim(self) -> int:
        """Length of every embedding vector."""
        ...

    def embed(self, texts: Sequence[str]) -> np.ndarray:
        """Embed ``texts``.

        Args:
            texts: The texts, in order.

        Returns:
            A float32 array of shape ``(len(texts), dim)`` whose rows have unit L2 norm.
        """
        ...


EMBEDDERS: Registry[Callable[..., Embedder]] = Registry("embedder")
"""Embedder factories (classes) by name."""

register_embedder = EMBEDDERS.register
"""Class decorator registering an embedder factory under ``name`` (``ValueError`` if the name
is already registered to a different class)."""


PATH_PREFIXES: dict[str, str] = {"path": "sentence-transformers"}
"""``<prefix>:<directory>`` embedder names: the registered embedder built with ``model_path``."""


def make_embedder(name: str, **params: Any) -> Embedder:
    """Build the embedder registered under ``name``, or one loaded from a model directory.

    Args:
        name: A key of :data:`EMBEDDERS`, e.g. ``"minilm"``, ``"mpnet"`` or ``"hashing"``; or
            ``"path:<directory>"`` for any sentence-transformers model directory
            (:data:`PATH_PREFIXES`).
        **params: Keyword arguments passed to the embedder's constructor.

    Returns:
        The embedder instance.

    Raises:
        ValueError: If ``name`` is not registered (the message lists the known names) or names
            no directory after its prefix.
    """
    prefix, sep, directory = name.partition(":")
    if sep and prefix in PATH_PREFIXES:
        if not directory:
            raise ValueError(f"embedder {name!r} names no directory after '{prefix}:'")
        return EMBEDDERS.lookup(PATH_PREFIXES[prefix])(model_path=directory, **params)
    return EMBEDDERS.lookup(name)(**params)


EMBEDDER_NAME = "a registered embedder name (memlab.embed.EMBEDDERS), path:DIR or onnx:DIR"
"""What :func:`is_embedder_name` accepts, for parameter-constraint messages."""


def is_embedder_name(name: object) -> bool:
    """Whether :func:`make_embedder` knows ``name``: a registered embedder, or a known prefix
    followed by a directory (``path:DIR``; whether the directory holds a model is checked when
    it loads)."""
    if not isinstance(name, str):
        return False
    prefix, sep, directory = name.partition(":")
    if sep and prefix in PATH_PREFIXES:
        return bool(directory)
    return name in EMBEDDERS


def check_texts(texts: Sequence[str]) -> list[str]:
    """Validate an embedder input and return it as a list.

    Args:
        texts: A sequence of strings.

    Returns:
        The texts as a new list.

    Raises:
        TypeError: If ``texts`` is a single string rather than a sequence of them, or if an item
            is not a string (the message names its index).
    """
    if isinstance(texts, (str, bytes)):
        raise TypeError("texts must be a sequence of strings, got a single string")
    items = list(texts)
    for i, text in enumerate(items):
        if not isinstance(text, str):
            raise TypeError(f"texts[{i}] must be a string, got {type(text).__name__}")
    return items
