"""Reading a recording (and an HTTP generator's answer): every way it can be unreadable is one
``ValueError`` (or :class:`GeneratorError`) naming the file and line, never a raw
``RecursionError`` or an unnamed parser error."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any
from unittest import mock

import pytest

from memlab.generate import (
    GeneratorError,
    OpenAIHTTPGenerator,
    RecordedGenerator,
    generation_params,
    prompt_hash,
    scan_records,
)


def _line(prompt: str, text: str, **fields: Any) -> bytes:
    """One recorded line of model ``smollm2`` (``fields`` replace computed ones)."""
    params = generation_params()
    obj = {
        "model": "smollm2",
        "params": params,
        "prompt": prompt,
        "prompt_hash": prompt_hash("smollm2", prompt, params),
        "text": text,
        **fields,
    }
    return json.dumps(obj).encode("utf-8") + b"\n"


GOOD = _line("q", "a")
DEEP = b"[" * 100_000 + b"]" * 100_000


@pytest.mark.parametrize(
    ("content", "message"),
    [
        (GOOD + DEEP + b"\n", ":2: invalid JSON: nested too deeply to read"),
        (
            GOOD + b'{"model": "smollm2", "params": {"seed": NaN}, "prompt": "q"}\n',
            ":2: invalid JSON: NaN is not a JSON number",
        ),
        (GOOD + b'{"model": -Infinity}\n', ":2: invalid JSON: -Infinity is not a JSON number"),
        (
            GOOD + b'{"model": "smollm2", "n": ' + b"9" * 5000 + b"}\n",
            ":2: invalid JSON: Exceeds the limit (4300 digits) for integer string conversion",
        ),
        (GOOD + b'{"model": "caf\xe9"}\n', ": not valid UTF-8 (byte 0xe9 on line 2)"),
        (
            b'{"model": "smollm2", "params": {}, "prompt": "q\\ud800", "prompt_hash": "0", '
            b'"text": "a"}\n',
            ":1: field 'prompt' holds U+D800, a lone surrogate, which is not text",
        ),
        (
            GOOD + _line("r", "t\ud800"),  # json.dumps writes it as the escape \ud800
            ":2: field 'text' holds U+D800, a lone surrogate, which is not text",
        ),
    ],
    ids=[
        "deep-line",
        "nan",
        "infinity",
        "huge-int",
        "not-utf8",
        "surrogate-prompt",
        "surrogate-text",
    ],
)
def test_an_unreadable_line_is_a_value_error_naming_file_and_line(
    tmp_path: Path, content: bytes, message: str
) -> None:
    path = tmp_path / "rec.jsonl"
    path.write_bytes(content)
    with pytest.raises(ValueError) as info:
        scan_records(path)
    assert str(info.value).startswith(f"{path}{message}"), str(info.value)
    with pytest.raises(ValueError) as info:
        RecordedGenerator(path).generate("q")
    assert str(info.value).startswith(f"{path}{message}")


def test_a_recording_that_is_not_a_file_is_a_value_error_naming_it(tmp_path: Path) -> None:
    folder = tmp_path / "rec.jsonl"
    folder.mkdir()
    for call in (lambda: scan_records(folder), lambda: RecordedGenerator(folder).generate("q")):
        with pytest.raises(ValueError) as info:
            call()
        assert str(info.value) == f"{folder}: is a directory, not a file"
    with pytest.raises(ValueError, match=r"^.*absent\.jsonl: no such file$"):
        scan_records(tmp_path / "absent.jsonl")


class _Answer:
    """A stand-in for ``urlopen``'s response."""

    def __init__(self, body: bytes) -> None:
        self.body = body

    def read(self) -> bytes:
        return self.body

    def __enter__(self) -> _Answer:
        return self

    def __exit__(self, *exc: object) -> None:
        return None


@pytest.mark.parametrize(
    "body",
    [
        DEEP,
        b'{"choices": [{"message": {"content": "x"}}], "usage": ' + b"9" * 5000 + b"}",
    ],
    ids=["deep", "huge-int"],
)
def test_an_undecodable_answer_is_a_generator_error(body: bytes) -> None:
    gen = OpenAIHTTPGenerator(base_url="http://llm.test/v1", model="m", max_retries=0)
    with mock.patch("urllib.request.urlopen", return_value=_Answer(body)):
        with pytest.raises(GeneratorError) as info:
            gen.generate("p")
    assert str(info.value) == (
        "LLM request failed after 1 attempt(s): http://llm.test/v1/chat/completions returned a "
        "response without choices[0].message.content"
    )
