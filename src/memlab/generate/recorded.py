"""Replay of recorded generations, so HyDE and LLM judging run without a model (e.g. in CI).

A recording is a JSONL file written by :func:`memlab.generate.record.record_generations`, one
object per line::

    {"model": "smollm2", "params": {"max_new_tokens": 128, "seed": 0, "temperature": 0.0},
     "prompt": "...", "prompt_hash": "<sha256 hex>", "text": "..."}

where ``prompt_hash == prompt_hash(model, prompt, params)``. A last line without its newline
that does not parse is the trace of an interrupted write and is ignored. Every other way a
recording can be unreadable (not UTF-8, not JSON, nested too deeply to read, ``NaN``, a line
that is not such an object) is one :class:`ValueError` naming ``file:line``.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from memlab.generate.base import (
    GENERATORS,
    GeneratorError,
    generation_params,
    prompt_hash,
    register_generator,
)
from memlab.io import decode_utf8, loads_json, read_bytes
from memlab.memory.scrub import scrub_text

__all__ = ["RecordedGenerator", "parse_records", "scan_records"]

_FIELDS: dict[str, type] = {
    "model": str,
    "prompt_hash": str,
    "prompt": str,
    "text": str,
    "params": dict,
}


def _not_a_number(name: str) -> Any:
    """``parse_constant`` hook: a recording holds no ``NaN`` or ``Infinity``."""
    raise ValueError(f"{name} is not a JSON number")


def _check_record(obj: Any, where: str) -> dict[str, Any]:
    """``obj`` if it is a valid recorded line, else a ``ValueError`` naming ``where``."""
    if not isinstance(obj, dict):
        raise ValueError(f"{where}: expected a JSON object, got {type(obj).__name__}")
    for field, kind in _FIELDS.items():
        if field not in obj:
            raise ValueError(f"{where}: missing field {field!r}")
        if not isinstance(obj[field], kind):
            raise ValueError(
                f"{where}: field {field!r} must be {kind.__name__}, got {type(obj[field]).__name__}"
            )
    for field in ("model", "prompt", "text"):
        try:
            obj[field].encode("utf-8")
        except UnicodeEncodeError as exc:
            char = f"U+{ord(obj[field][exc.start]):04X}"
            raise ValueError(
                f"{where}: field {field!r} holds {char}, a lone surrogate, which is not text"
            ) from None
    try:
        expected = prompt_hash(obj["model"], obj["prompt"], obj["params"])
    except RecursionError:
        raise ValueError(f"{where}: field 'params' is nested too deeply to read") from None
    except (TypeError, ValueError) as exc:
        raise ValueError(f"{where}: field 'params' cannot be hashed ({exc})") from None
    if obj["prompt_hash"] != expected:
        raise ValueError(
            f"{where}: field 'prompt_hash' is {obj['prompt_hash']!r} but model, prompt and "
            f"params hash to {expected!r}"
        )
    return obj


def parse_records(data: bytes, where: str) -> tuple[list[dict[str, Any]], int]:
    """Validate the bytes of a recording (see :func:`scan_records`).

    Args:
        data: The file's content.
        where: The file, as messages name it (``where:line``).

    Returns:
        ``(records, valid_bytes)`` as :func:`scan_records` returns them.

    Raises:
        ValueError: Naming ``where`` and the line at fault.
    """
    cut = data.rfind(b"\n") + 1  # the complete lines end here; what follows is the tail
    text = decode_utf8(data[:cut], where)
    records: list[dict[str, Any]] = []
    lines = text.split("\n")[:-1]
    for lineno, raw in enumerate(lines, start=1):
        if not raw.strip():
            continue
        line = f"{where}:{lineno}"
        obj = loads_json(raw, line, parse_constant=_not_a_number)
        records.append(_check_record(obj, line))
    tail = data[cut:]
    if tail.strip():
        line = f"{where}:{len(lines) + 1}"
        try:
            obj = loads_json(tail, line, parse_constant=_not_a_number)
        except ValueError:  # an unterminated line that does not parse: an interrupted write
            return records, cut
        records.append(_check_record(obj, line))
    return records, len(data)


def scan_records(path: str | os.PathLike[str]) -> tuple[list[dict[str, Any]], int]:
    """Read and validate a recording.

    Args:
        path: The JSONL file.

    Returns:
        ``(records, valid_bytes)``: the records in file order, and the length of the valid
        prefix of the file (shorter than the file only when its last line is an unterminated,
        unparsable fragment left by an interrupted write).

    Raises:
        ValueError: If the file is missing or cannot be read, is not UTF-8, or a complete line
            is not a JSON object with every field and a matching ``prompt_hash`` (the message
            gives ``file:line`` and the field; a line nested too deeply to read, ``NaN`` and a
            lone surrogate included).
    """
    return parse_records(read_bytes(path), str(path))


@register_generator("recorded")
class RecordedGenerator:
    """Generator that answers from a recording instead of running a model.

    A request is looked up by ``(model_id, prompt_hash(model_id, prompt, params))`` with
    ``params`` from :func:`~memlab.generate.base.generation_params`, so it only matches a
    recording made with the same model id, prompt and decoding parameters. The file is read on
    the first call (fitted attribute ``index_``); when a hash occurs twice the first line wins.

    Args:
        path: The JSONL recording.
        model_id: Model id whose recordings are replayed (and reported as this generator's).
        strict: If true a request that is not recorded raises :class:`GeneratorError`; if
            false it returns ``""`` and its prompt is appended to ``missing_``.
    """

    def __init__(
        self,
        path: str | os.PathLike[str],
        model_id: str = "smollm2",
        strict: bool = True,
    ) -> None:
        self.path = path
        self.model_id = model_id
        self.strict = strict

    def load(self) -> dict[tuple[str, str], str]:
        """Read the recording if not read yet.

        Returns:
            The index ``{(model, prompt_hash): text}`` (also stored as ``index_``).

        Raises:
            GeneratorError: If the file does not exist.
            ValueError: If the file is malformed or unreadable (see :func:`scan_records`).
        """
        index = getattr(self, "index_", None)
        if index is not None:
            return index
        if not Path(self.path).exists():
            raise GeneratorError(
                f"recording {str(self.path)!r} does not exist; {self._how_to_record()}"
            )
        records, _ = scan_records(self.path)
        index = {}
        for rec in records:
            index.setdefault((rec["model"], rec["prompt_hash"]), rec["text"])
        self.index_ = index
        self.missing_: list[str] = []
        return index

    def _how_to_record(self) -> str:
        if self.model_id in GENERATORS:
            source = f"--generator {self.model_id}"
        else:
            source = f"--generator openai --model {self.model_id}"
        return (
            f"record it with `memlab generations record DATASET --pipeline PIPELINE {source} "
            f"--out {self.path}`, or for a JSONL file of prompts with "
            f"`python -m memlab.generate.record {source} --out {self.path} PROMPTS.jsonl`"
        )

    def generate(
        self,
        prompt: str,
        *,
        max_new_tokens: int = 128,
        temperature: float = 0.0,
        seed: int = 0,
    ) -> str:
        """Return the recorded text for this request.

        Args:
            prompt: The prompt.
            max_new_tokens: Part of the request identity.
            temperature: Part of the request identity.
            seed: Part of the request identity.

        Returns:
            The recorded text, or ``""`` for an unrecorded request when ``strict`` is false.

        Raises:
            TypeError: If ``prompt`` is not a string.
            GeneratorError: If the request is not recorded and ``strict`` is true; the message
                names the prompt hash and the command that records it.
        """
        if not isinstance(prompt, str):
            raise TypeError(f"prompt must be a string, got {type(prompt).__name__}")
        params = generation_params(
            max_new_tokens=max_new_tokens, temperature=temperature, seed=seed
        )
        index = self.load()
        # Recordings hold scrubbed prompts, hashed after scrubbing (see record.py).
        prompt = scrub_text(prompt)[0]
        key = prompt_hash(self.model_id, prompt, params)
        text = index.get((self.model_id, key))
        if text is not None:
            return text
        if self.strict:
            raise GeneratorError(
                f"{self.path}: no recorded generation for model {self.model_id!r}, "
                f"prompt_hash {key} (params {params}, prompt {prompt[:60]!r}); "
                f"{self._how_to_record()}"
            )
        self.missing_.append(prompt)
        return ""
