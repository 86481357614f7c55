"""Named registries filled by decorator.

A :class:`Registry` is a ``dict`` from name to registered object (a class, a factory or a
function) that knows what kind of thing it holds, so that its two error messages read the same
everywhere in the package::

    EMBEDDERS: Registry[Callable[..., Embedder]] = Registry("embedder")

    @EMBEDDERS.register("hashing")
    class HashingEmbedder: ...

    EMBEDDERS.lookup("nope")
    # ValueError: unknown embedder 'nope'; known embedders: hashing, minilm
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TypeVar

__all__ = ["Registry"]

T = TypeVar("T")
_O = TypeVar("_O")


class Registry(dict[str, T]):
    """A mapping from name to registered object, filled with the :meth:`register` decorator.

    It is an ordinary ``dict`` (iteration follows registration order; ``in``, ``[]`` and
    ``get`` work as usual) with a ``kind`` used in error messages.

    Args:
        kind: What the registry holds, singular (``"embedder"``, ``"BM25 engine"``); messages
            form the plural by appending ``s``.
    """

    def __init__(self, kind: str) -> None:
        super().__init__()
        self.kind = kind

    def register(self, name: str) -> Callable[[_O], _O]:
        """Decorator registering an object under ``name``.

        Registering the same object again under the same name is allowed (and changes
        nothing).

        Args:
            name: The registry key.

        Returns:
            A decorator that records its argument under ``name`` and returns it unchanged.

        Raises:
            ValueError: If ``name`` is already registered to a different object (raised when
                the decorator is applied).
        """

        def decorator(obj: _O) -> _O:
            if name in self and self[name] is not obj:
                raise ValueError(f"{self.kind} {name!r} is already registered to {self[name]!r}")
            self[name] = obj  # type: ignore[assignment]
            return obj

        return decorator

    def lookup(self, name: str) -> T:
        """The object registered under ``name``.

        Raises:
            ValueError: If ``name`` is not registered; the message lists the known names,
                sorted (``(none)`` when the registry is empty).
        """
        try:
            return self[name]
        except KeyError:
            known = ", ".join(sorted(self)) or "(none)"
            raise ValueError(f"unknown {self.kind} {name!r}; known {self.kind}s: {known}") from None
