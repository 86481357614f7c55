"""A deterministic generator for the recording tests."""

from __future__ import annotations

from memlab.generate import GeneratorError


class FakeGenerator:
    """Deterministic generator that records its calls; optionally fails on one prompt."""

    model_id = "fake"

    def __init__(self, fail_on: str | None = None) -> None:
        self.fail_on = fail_on
        self.calls: list[str] = []

    def generate(
        self, prompt: str, *, max_new_tokens: int = 128, temperature: float = 0.0, seed: int = 0
    ) -> str:
        self.calls.append(prompt)
        if prompt == self.fail_on:
            raise GeneratorError("model crashed")
        return f"answer to {prompt} ({max_new_tokens}, {temperature}, {seed})"
