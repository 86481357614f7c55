"""The text-generator protocol, its registry, its error type and the prompt hash.

Generators produce hypothetical documents for HyDE and verdicts for an LLM judge. Every
generation is identified by :func:`prompt_hash` over the model id, the prompt and the decoding
parameters, which is how recorded generations are replayed without a model.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable, Mapping
from typing import Any, Protocol, runtime_checkable

from memlab.numeric import is_finite_number
from memlab.registry import Registry

__all__ = [
    "GENERATORS",
    "Generator",
    "GeneratorError",
    "generation_params",
    "make_generator",
    "prompt_hash",
    "register_generator",
]


class GeneratorError(RuntimeError):
    """A generator is unavailable (missing model, unreachable server) or its call failed."""


@runtime_checkable
class Generator(Protocol):
    """Anything that completes a prompt with text.

    Attributes:
        model_id: Identifier of the model; part of every prompt hash.
    """

    @property
    def model_id(self) -> str:
        """Identifier of the model."""
        ...

    def generate(
        self,
        prompt: str,
        *,
        max_new_tokens: int = 128,
        temperature: float = 0.0,
        seed: int = 0,
    ) -> str:
        """Complete ``prompt``.

        Args:
            prompt: The user prompt.
            max_new_tokens: Upper bound on generated tokens.
            temperature: Sampling temperature; ``0.0`` means greedy (deterministic) decoding.
            seed: Random seed used when sampling.

        Returns:
            The generated text.

        Raises:
            GeneratorError: If the generator cannot produce text.
        """
        ...


GENERATORS: Registry[Callable[..., Generator]] = Registry("generator")
"""Generator factories (classes) by name."""

register_generator = GENERATORS.register
"""Class decorator registering a generator factory under ``name`` (``ValueError`` if the name
is already registered to a different class)."""


def make_generator(name: str, **params: Any) -> Generator:
    """Build the generator registered under ``name``.

    Args:
        name: A key of :data:`GENERATORS`, e.g. ``"smollm2"``, ``"openai"`` or ``"recorded"``.
        **params: Keyword arguments passed to the generator's constructor.

    Returns:
        The generator instance.

    Raises:
        ValueError: If ``name`` is not registered; the message lists the known names.
    """
    return GENERATORS.lookup(name)(**params)


def generation_params(
    *, max_new_tokens: int = 128, temperature: float = 0.0, seed: int = 0
) -> dict[str, Any]:
    """Return decoding parameters in canonical form for :func:`prompt_hash`.

    ``temperature`` is stored as a float and the others as ints, so ``temperature=0`` and
    ``temperature=0.0`` hash alike.

    Args:
        max_new_tokens: Upper bound on generated tokens (>= 1).
        temperature: Sampling temperature (finite, >= 0).
        seed: Random seed.

    Returns:
        ``{"max_new_tokens": int, "seed": int, "temperature": float}``.

    Raises:
        TypeError: If a value has the wrong type.
        ValueError: If a value is out of range.
    """
    for name, value in (("max_new_tokens", max_new_tokens), ("seed", seed)):
        if isinstance(value, bool) or not isinstance(value, int):
            raise TypeError(f"{name} must be an int, got {value!r}")
    if isinstance(temperature, bool) or not isinstance(temperature, (int, float)):
        raise TypeError(f"temperature must be a number, got {temperature!r}")
    if max_new_tokens < 1:
        raise ValueError(f"max_new_tokens must be >= 1, got {max_new_tokens}")
    if not is_finite_number(temperature) or temperature < 0:
        raise ValueError(f"temperature must be finite and >= 0, got {temperature}")
    return {"max_new_tokens": max_new_tokens, "seed": seed, "temperature": float(temperature)}


def prompt_hash(model_id: str, prompt: str, params: Mapping[str, Any]) -> str:
    """Hash a generation request.

    The hash is the SHA-256 hex digest of the canonical JSON (sorted keys, no whitespace, UTF-8)
    of ``{"model": model_id, "params": params, "prompt": prompt}``. Pass ``params`` through
    :func:`generation_params` so equal settings always hash alike.

    Args:
        model_id: The generator's model id.
        prompt: The prompt text.
        params: Decoding parameters (JSON-serialisable, finite numbers).

    Returns:
        64 lowercase hex characters.

    Raises:
        TypeError: If ``model_id`` or ``prompt`` is not a string, or ``params`` is not JSON
            serialisable.
        ValueError: If ``params`` holds a non-finite float.
    """
    if not isinstance(model_id, str):
        raise TypeError(f"model_id must be a string, got {type(model_id).__name__}")
    if not isinstance(prompt, str):
        raise TypeError(f"prompt must be a string, got {type(prompt).__name__}")
    payload = {"model": model_id, "params": dict(params), "prompt": prompt}
    text = json.dumps(
        payload, sort_keys=True, separators=(",", ":"), ensure_ascii=False, allow_nan=False
    )
    return hashlib.sha256(text.encode("utf-8")).hexdigest()
