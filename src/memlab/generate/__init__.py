"""Text generators: the protocol, a registry, local and HTTP models, recording and replay."""

from typing import Any

from memlab.generate.base import (
    GENERATORS,
    Generator,
    GeneratorError,
    generation_params,
    make_generator,
    prompt_hash,
    register_generator,
)
from memlab.generate.local import SmolLMGenerator, default_smollm2_path
from memlab.generate.openai_http import OpenAIHTTPGenerator, chat_completions_url
from memlab.generate.recorded import RecordedGenerator, scan_records

__all__ = [
    "GENERATORS",
    "Generator",
    "GeneratorError",
    "OpenAIHTTPGenerator",
    "RecordedGenerator",
    "SmolLMGenerator",
    "chat_completions_url",
    "default_smollm2_path",
    "generation_params",
    "make_generator",
    "prompt_hash",
    "read_prompts",
    "record_generations",
    "register_generator",
    "scan_records",
]

_RECORD = ("read_prompts", "record_generations")


def __getattr__(name: str) -> Any:
    # memlab.generate.record is imported on first use so that `python -m memlab.generate.record`
    # does not find it already imported by its own package.
    if name in _RECORD:
        from memlab.generate import record

        return getattr(record, name)
    raise AttributeError(f"module 'memlab.generate' has no attribute {name!r}")
