"""Tests for memlab.generate.base: registry, parameters and the prompt hash."""

from __future__ import annotations

import hashlib
import math
from pathlib import Path

import pytest

from memlab.generate import (
    GENERATORS,
    Generator,
    GeneratorError,
    OpenAIHTTPGenerator,
    RecordedGenerator,
    SmolLMGenerator,
    generation_params,
    make_generator,
    prompt_hash,
)
from memlab.generate.base import register_generator


def test_builtin_generators_are_registered() -> None:
    assert GENERATORS["smollm2"] is SmolLMGenerator
    assert GENERATORS["openai"] is OpenAIHTTPGenerator
    assert GENERATORS["recorded"] is RecordedGenerator


def test_make_generator_passes_params(tmp_path: Path) -> None:
    gen = make_generator("recorded", path=tmp_path / "r.jsonl", model_id="m", strict=False)
    assert isinstance(gen, RecordedGenerator)
    assert (gen.path, gen.model_id, gen.strict) == (tmp_path / "r.jsonl", "m", False)
    assert isinstance(gen, Generator)


def test_unknown_generator_lists_known_names() -> None:
    with pytest.raises(ValueError, match=r"unknown generator 'gpt9'.*openai, recorded, smollm2"):
        make_generator("gpt9")


def test_register_rejects_name_taken_by_other_class() -> None:
    with pytest.raises(ValueError, match="already registered"):

        @register_generator("openai")
        class Other:  # noqa: B903
            pass


def test_generator_error_is_runtime_error() -> None:
    assert issubclass(GeneratorError, RuntimeError)


def test_prompt_hash_is_sha256_of_canonical_json() -> None:
    params = generation_params(max_new_tokens=16, temperature=0, seed=0)
    canonical = (
        '{"model":"m","params":{"max_new_tokens":16,"seed":0,"temperature":0.0},"prompt":"hi"}'
    )
    assert prompt_hash("m", "hi", params) == hashlib.sha256(canonical.encode()).hexdigest()


def test_prompt_hash_non_ascii_is_utf8() -> None:
    canonical = '{"model":"m","params":{},"prompt":"café"}'
    assert prompt_hash("m", "café", {}) == hashlib.sha256(canonical.encode("utf-8")).hexdigest()


def test_prompt_hash_ignores_param_order_and_int_float_temperature() -> None:
    a = prompt_hash("m", "p", {"seed": 1, "temperature": 0.5})
    b = prompt_hash("m", "p", {"temperature": 0.5, "seed": 1})
    assert a == b
    assert generation_params(temperature=0) == generation_params(temperature=0.0)


def test_prompt_hash_depends_on_every_part() -> None:
    base = prompt_hash("m", "p", generation_params())
    assert prompt_hash("n", "p", generation_params()) != base
    assert prompt_hash("m", "q", generation_params()) != base
    assert prompt_hash("m", "p", generation_params(seed=1)) != base
    assert prompt_hash("m", "p", generation_params(max_new_tokens=127)) != base
    assert prompt_hash("m", "p", generation_params(temperature=0.1)) != base


def test_generation_params_canonical_form() -> None:
    assert generation_params(max_new_tokens=64, temperature=1, seed=7) == {
        "max_new_tokens": 64,
        "seed": 7,
        "temperature": 1.0,
    }


@pytest.mark.parametrize(
    ("params", "error", "message"),
    [
        ({"max_new_tokens": 0}, ValueError, "max_new_tokens must be >= 1"),
        ({"temperature": -0.1}, ValueError, "temperature must be finite and >= 0"),
        ({"temperature": math.inf}, ValueError, "temperature must be finite"),
        ({"seed": True}, TypeError, "seed must be an int"),
        ({"max_new_tokens": 1.5}, TypeError, "max_new_tokens must be an int"),
    ],
)
def test_generation_params_rejects(params: dict, error: type[Exception], message: str) -> None:
    with pytest.raises(error, match=message):
        generation_params(**params)


def test_prompt_hash_rejects_nan_and_non_string() -> None:
    with pytest.raises(ValueError):
        prompt_hash("m", "p", {"temperature": math.nan})
    with pytest.raises(TypeError, match="prompt must be a string"):
        prompt_hash("m", 3, {})  # type: ignore[arg-type]
