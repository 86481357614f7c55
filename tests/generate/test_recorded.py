"""Tests for memlab.generate.recorded: reading recordings and replaying them."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from memlab.generate import (
    GeneratorError,
    RecordedGenerator,
    generation_params,
    prompt_hash,
    scan_records,
)


def _line(model: str, prompt: str, text: str, **params: Any) -> dict[str, Any]:
    p = generation_params(**params)
    return {
        "model": model,
        "params": p,
        "prompt": prompt,
        "prompt_hash": prompt_hash(model, prompt, p),
        "text": text,
    }


def _write(path: Path, lines: list[dict[str, Any]], tail: str = "") -> None:
    body = "".join(json.dumps(obj) + "\n" for obj in lines)
    path.write_text(body + tail, encoding="utf-8")


def test_replays_recorded_text(tmp_path: Path) -> None:
    path = tmp_path / "rec.jsonl"
    _write(path, [_line("smollm2", "q1", "answer one"), _line("smollm2", "q2", "answer two")])
    gen = RecordedGenerator(path)
    assert gen.model_id == "smollm2"
    assert gen.generate("q2") == "answer two"
    assert gen.generate("q1", max_new_tokens=128, temperature=0.0, seed=0) == "answer one"


def test_lookup_uses_model_and_params(tmp_path: Path) -> None:
    path = tmp_path / "rec.jsonl"
    _write(
        path,
        [
            _line("smollm2", "q", "greedy 64", max_new_tokens=64),
            _line("other", "q", "other model", max_new_tokens=64),
        ],
    )
    assert RecordedGenerator(path).generate("q", max_new_tokens=64) == "greedy 64"
    assert RecordedGenerator(path, model_id="other").generate("q", max_new_tokens=64) == (
        "other model"
    )
    with pytest.raises(GeneratorError):
        RecordedGenerator(path).generate("q", max_new_tokens=32)


def test_missing_prompt_strict_names_hash_and_command(tmp_path: Path) -> None:
    path = tmp_path / "rec.jsonl"
    _write(path, [_line("smollm2", "q", "a")])
    expected = prompt_hash("smollm2", "unseen", generation_params())
    with pytest.raises(GeneratorError) as info:
        RecordedGenerator(path).generate("unseen")
    message = str(info.value)
    assert expected in message
    assert "memlab generations record DATASET --pipeline PIPELINE --generator smollm2" in message
    assert "python -m memlab.generate.record --generator smollm2" in message
    assert str(path) in message


def test_missing_prompt_lenient_returns_empty_and_remembers(tmp_path: Path) -> None:
    path = tmp_path / "rec.jsonl"
    _write(path, [_line("smollm2", "q", "a")])
    gen = RecordedGenerator(path, strict=False)
    assert gen.generate("unseen") == ""
    assert gen.generate("q") == "a"
    assert gen.missing_ == ["unseen"]


def test_missing_file(tmp_path: Path) -> None:
    with pytest.raises(GeneratorError, match="does not exist; record it with"):
        RecordedGenerator(tmp_path / "absent.jsonl").generate("q")


def test_first_duplicate_wins(tmp_path: Path) -> None:
    path = tmp_path / "rec.jsonl"
    _write(path, [_line("smollm2", "q", "first"), _line("smollm2", "q", "second")])
    assert RecordedGenerator(path).generate("q") == "first"


def test_truncated_last_line_is_ignored(tmp_path: Path) -> None:
    path = tmp_path / "rec.jsonl"
    _write(path, [_line("smollm2", "q", "a")], tail='{"model": "smol')
    records, valid = scan_records(path)
    assert [r["text"] for r in records] == ["a"]
    assert valid == len(json.dumps(_line("smollm2", "q", "a"))) + 1
    assert RecordedGenerator(path).generate("q") == "a"


def test_complete_last_line_without_newline_is_read(tmp_path: Path) -> None:
    path = tmp_path / "rec.jsonl"
    _write(path, [_line("smollm2", "q", "a")], tail=json.dumps(_line("smollm2", "r", "b")))
    records, valid = scan_records(path)
    assert [r["text"] for r in records] == ["a", "b"]
    assert valid == path.stat().st_size


def test_bad_json_line_names_file_and_line(tmp_path: Path) -> None:
    path = tmp_path / "rec.jsonl"
    path.write_text(json.dumps(_line("smollm2", "q", "a")) + "\n{broken\n", encoding="utf-8")
    with pytest.raises(ValueError, match=rf"{path}:2: invalid JSON: Expecting property name"):
        scan_records(path)


def test_missing_field_names_it(tmp_path: Path) -> None:
    path = tmp_path / "rec.jsonl"
    line = _line("smollm2", "q", "a")
    del line["text"]
    _write(path, [line])
    with pytest.raises(ValueError, match=rf"{path}:1: missing field 'text'"):
        RecordedGenerator(path).generate("q")


def test_hash_mismatch_is_reported(tmp_path: Path) -> None:
    path = tmp_path / "rec.jsonl"
    line = _line("smollm2", "q", "a")
    line["prompt"] = "edited"
    _write(path, [line])
    with pytest.raises(ValueError, match=rf"{path}:1: field 'prompt_hash'"):
        scan_records(path)


def test_blank_lines_are_skipped(tmp_path: Path) -> None:
    path = tmp_path / "rec.jsonl"
    path.write_text("\n" + json.dumps(_line("smollm2", "q", "a")) + "\n\n", encoding="utf-8")
    assert RecordedGenerator(path).generate("q") == "a"
