"""The embedder protocol and the registry of named embedders.

An embedder maps texts to float32 row vectors of unit L2 norm, so a dot product of two rows is
their cosine similarity. Embedders are registered under a short name with
:func:`register_embedder` and built from configuration with :func:`make_embedder`.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any, Protocol, TypeVar, runtime_checkable

import numpy as np

__all__ = [
    "EMBEDDERS",
    "Embedder",
    "check_texts",
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


EMBEDDERS: dict[str, Callable[..., Embedder]] = {}

_T = TypeVar("_T")


def register_embedder(name: str) -> Callable[[_T], _T]:
    """Class decorator registering an embedder factory under ``name``.

    Args:
        name: The registry key used by :func:`make_embedder`.

    Returns:
        A decorator that records the class in :data:`EMBEDDERS` and returns it unchanged.

    Raises:
        ValueError: If ``name`` is already registered to a different class.
    """

    def decorator(cls: _T) -> _T:
        existing = EMBEDDERS.get(name)
        if existing is not None and existing is not cls:
            raise ValueError(f"embedder name {name!r} is already registered to {existing!r}")
        EMBEDDERS[name] = cls  # type: ignore[assignment]
        return cls

    return decorator


def make_embedder(name: str, **params: Any) -> Embedder:
    """Build the embedder registered under ``name``.

    Args:
        name: A key of :data:`EMBEDDERS`, e.g. ``"minilm"`` or ``"hashing"``.
        **params: Keyword arguments passed to the embedder's constructor.

    Returns:
        The embedder instance.

    Raises:
        ValueError: If ``name`` is not registered; the message lists the known names.
    """
    try:
        factory = EMBEDDERS[name]
    except KeyError:
        known = ", ".join(sorted(EMBEDDERS)) or "(none)"
        raise ValueError(f"unknown embedder {name!r}; known embedders: {known}") from None
    return factory(**params)


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
