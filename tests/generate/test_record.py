"""Tests for memlab.generate.record: resumable recording and round trips."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

from memlab.generate import (
    GENERATORS,
    GeneratorError,
    RecordedGenerator,
    generation_params,
    prompt_hash,
    scan_records,
)
from memlab.generate.record import main, read_prompts, record_generations

if str(Path(__file__).parent) not in sys.path:  # --import-mode=importlib: helpers by path
    sys.path.insert(0, str(Path(__file__).parent))
from _fake_generator import FakeGenerator  # noqa: E402


@pytest.fixture(autouse=True)
def quiet(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CI", "true")


def test_writes_one_line_per_prompt(tmp_path: Path) -> None:
    path = tmp_path / "out" / "rec.jsonl"
    gen = FakeGenerator()
    assert record_generations(["p1", "p2"], gen, path, max_new_tokens=16, seed=4) == 2
    params = generation_params(max_new_tokens=16, temperature=0.0, seed=4)
    lines = [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines()]
    assert lines == [
        {
            "model": "fake",
            "params": {"max_new_tokens": 16, "seed": 4, "temperature": 0.0},
            "prompt": p,
            "prompt_hash": prompt_hash("fake", p, params),
            "text": f"answer to {p} (16, 0.0, 4)",
        }
        for p in ("p1", "p2")
    ]


def test_resume_skips_recorded_prompts(tmp_path: Path) -> None:
    path = tmp_path / "rec.jsonl"
    record_generations(["p1", "p2"], FakeGenerator(), path)
    gen = FakeGenerator()
    assert record_generations(["p1", "p3", "p2"], gen, path) == 1
    assert gen.calls == ["p3"]
    assert [r["prompt"] for r in scan_records(path)[0]] == ["p1", "p2", "p3"]


def test_other_params_are_recorded_separately(tmp_path: Path) -> None:
    path = tmp_path / "rec.jsonl"
    record_generations(["p"], FakeGenerator(), path, max_new_tokens=8)
    gen = FakeGenerator()
    assert record_generations(["p"], gen, path, max_new_tokens=9) == 1
    assert gen.calls == ["p"]


def test_duplicate_prompts_generated_once(tmp_path: Path) -> None:
    gen = FakeGenerator()
    assert record_generations(["p", "p", "q", "p"], gen, tmp_path / "rec.jsonl") == 2
    assert gen.calls == ["p", "q"]


def test_round_trip_through_recorded_generator(tmp_path: Path) -> None:
    path = tmp_path / "rec.jsonl"
    prompts = ["what does the user drink?", "when is the meeting?"]
    fake = FakeGenerator()
    record_generations(prompts, fake, path, max_new_tokens=32, temperature=0.7, seed=2)
    replay = RecordedGenerator(path, model_id="fake")
    for prompt in prompts:
        expected = fake.generate(prompt, max_new_tokens=32, temperature=0.7, seed=2)
        assert replay.generate(prompt, max_new_tokens=32, temperature=0.7, seed=2) == expected


def test_crash_leaves_valid_prefix_and_resume_finishes(tmp_path: Path) -> None:
    path = tmp_path / "rec.jsonl"
    with pytest.raises(GeneratorError, match="model crashed"):
        record_generations(["a", "b", "c", "d"], FakeGenerator(fail_on="c"), path)
    assert [r["prompt"] for r in scan_records(path)[0]] == ["a", "b"]
    gen = FakeGenerator()
    assert record_generations(["a", "b", "c", "d"], gen, path) == 2
    assert gen.calls == ["c", "d"]


def test_truncated_tail_is_cut_before_appending(tmp_path: Path) -> None:
    path = tmp_path / "rec.jsonl"
    record_generations(["a"], FakeGenerator(), path)
    intact = path.read_bytes()
    with open(path, "ab") as fh:
        fh.write(b'{"model": "fake", "params": {"max_')
    gen = FakeGenerator()
    assert record_generations(["a", "b"], gen, path) == 1
    assert gen.calls == ["b"]
    records, valid = scan_records(path)
    assert valid == path.stat().st_size
    assert path.read_bytes().startswith(intact)
    assert [r["prompt"] for r in records] == ["a", "b"]


def test_complete_unterminated_line_gets_newline(tmp_path: Path) -> None:
    path = tmp_path / "rec.jsonl"
    record_generations(["a"], FakeGenerator(), path)
    path.write_bytes(path.read_bytes().rstrip(b"\n"))
    assert record_generations(["a", "b"], FakeGenerator(), path) == 1
    assert [r["prompt"] for r in scan_records(path)[0]] == ["a", "b"]
    assert path.read_bytes().count(b"\n") == 2


def test_same_prompts_give_identical_bytes(tmp_path: Path) -> None:
    record_generations(["x", "y"], FakeGenerator(), tmp_path / "1.jsonl")
    record_generations(["x", "y"], FakeGenerator(), tmp_path / "2.jsonl")
    assert (tmp_path / "1.jsonl").read_bytes() == (tmp_path / "2.jsonl").read_bytes()


def test_progress_bar_hidden_in_ci_and_shown_otherwise(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    record_generations(["a"], FakeGenerator(), tmp_path / "1.jsonl", progress=True)
    assert capsys.readouterr().err == ""
    monkeypatch.setenv("CI", "false")
    record_generations(["a"], FakeGenerator(), tmp_path / "2.jsonl", progress=True)
    assert "recording fake" in capsys.readouterr().err
    record_generations(["a"], FakeGenerator(), tmp_path / "3.jsonl", progress=False)
    assert capsys.readouterr().err == ""


def test_non_string_prompt_is_rejected(tmp_path: Path) -> None:
    with pytest.raises(TypeError, match=r"prompts\[1\] must be a string"):
        record_generations(["a", 2], FakeGenerator(), tmp_path / "r.jsonl")  # type: ignore[list-item]


def test_read_prompts(tmp_path: Path) -> None:
    path = tmp_path / "prompts.jsonl"
    path.write_text('"plain"\n\n{"prompt": "line\\nbreak", "id": 3}\n', encoding="utf-8")
    assert read_prompts(path) == ["plain", "line\nbreak"]
    path.write_text('"ok"\n{"id": 1}\n', encoding="utf-8")
    with pytest.raises(ValueError, match=rf"{path}:2: missing field 'prompt'"):
        read_prompts(path)


def test_command_line(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setitem(GENERATORS, "fake", FakeGenerator)
    prompts = tmp_path / "prompts.jsonl"
    prompts.write_text('"p1"\n{"prompt": "p2"}\n', encoding="utf-8")
    out = tmp_path / "rec.jsonl"
    argv = [str(prompts), "--out", str(out), "--generator", "fake", "--max-new-tokens", "8"]
    assert main(argv) == 0
    assert "2 new generation(s)" in capsys.readouterr().out
    replay = RecordedGenerator(out, model_id="fake")
    assert replay.generate("p2", max_new_tokens=8) == "answer to p2 (8, 0.0, 0)"
    assert main(argv) == 0
    assert "0 new generation(s)" in capsys.readouterr().out


def test_query_texts_are_scrubbed_in_the_recording_and_replayed(tmp_path: Path) -> None:
    path = tmp_path / "rec.jsonl"
    prompt = "what is the db? password=hunter22 please"
    fake = FakeGenerator()
    assert record_generations([prompt], fake, path) == 1
    # The generator never saw the credential, the file never holds it.
    assert fake.calls == ["what is the db? password=[REDACTED:password] please"]
    raw = path.read_text()
    assert "hunter22" not in raw
    (rec,) = [json.loads(line) for line in raw.splitlines()]
    assert rec["prompt"] == "what is the db? password=[REDACTED:password] please"
    assert rec["text"] == (
        "answer to what is the db? password=[REDACTED:password] please (128, 0.0, 0)"
    )
    # Replaying with the raw query finds the scrubbed recording.
    replay = RecordedGenerator(path, model_id="fake")
    assert replay.generate(prompt) == rec["text"]
