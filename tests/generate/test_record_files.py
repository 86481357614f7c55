"""Recording generations: the output rule (only a recording memlab wrote is extended) and
atomic writes; every file read names itself when it is unreadable."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from memlab.generate import GENERATORS
from memlab.generate.record import main, read_prompts, record_generations
from memlab.io import OutputFileError

if str(Path(__file__).parent) not in sys.path:  # --import-mode=importlib: helpers by path
    sys.path.insert(0, str(Path(__file__).parent))
from _fake_generator import FakeGenerator  # noqa: E402


@pytest.fixture(autouse=True)
def quiet(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CI", "true")


def _recording(path: Path, prompts: list[str]) -> bytes:
    """A recording of ``prompts`` by :class:`FakeGenerator` at ``path``; its bytes."""
    record_generations(prompts, FakeGenerator(), path)
    return path.read_bytes()


def _siblings(folder: Path) -> list[str]:
    """Hidden entries of ``folder`` (a temporary file left behind would be one)."""
    return sorted(p.name for p in folder.iterdir() if p.name.startswith("."))


def test_out_is_refused_unless_new_empty_or_a_recording_memlab_wrote(tmp_path: Path) -> None:
    recording = tmp_path / "rec.jsonl"
    intact = _recording(recording, ["a"])
    first_line = intact.decode("utf-8")
    notes = tmp_path / "notes.txt"
    notes.write_text("my precious notes", encoding="utf-8")  # no newline: not a fragment
    cases: dict[str, tuple[object, str]] = {
        "notes.txt": (None, "exists and is not a recording of generations memlab wrote"),
        "prompts.jsonl": (
            '"p1"\n{"prompt": "p2"}\n',
            "exists and is not a recording of generations memlab wrote",
        ),
        "noted.jsonl": (
            first_line + "my own note",
            "exists and is not a recording of generations memlab wrote",
        ),
        "blank.jsonl": ("\n\n", "exists and is not a recording of generations memlab wrote"),
        "link.jsonl": (recording, "is a symbolic link"),
        "folder": ({}, "is a directory"),
        "notes.txt/below.jsonl": (None, f"{notes} is a file, not a directory"),
    }
    for name, (content, message) in cases.items():
        path = tmp_path / name
        if isinstance(content, str):
            path.write_text(content, encoding="utf-8")
        elif isinstance(content, Path):
            path.symlink_to(content)
        elif isinstance(content, dict):
            path.mkdir()
        before = path.read_bytes() if path.is_file() else None
        gen = FakeGenerator()
        with pytest.raises(OutputFileError) as info:
            record_generations(["b"], gen, path)
        assert str(info.value).startswith(f"--out {path}: {message}"), (name, str(info.value))
        assert gen.calls == [], name  # refused before any generation
        if before is not None:
            assert path.read_bytes() == before, name
    assert recording.read_bytes() == intact
    assert notes.read_text(encoding="utf-8") == "my precious notes"
    assert os.listdir(tmp_path / "folder") == []
    assert _siblings(tmp_path) == []


def test_refusal_of_a_malformed_recording_names_its_line(tmp_path: Path) -> None:
    path = tmp_path / "rec.jsonl"
    _recording(path, ["a"])
    with open(path, "ab") as fh:
        fh.write(b'{"model": "fake"}\n')
    before = path.read_bytes()
    with pytest.raises(OutputFileError) as info:
        record_generations(["b"], FakeGenerator(), path)
    assert str(info.value) == (
        f"--out {path}: exists and is not a recording of generations memlab wrote ({path}:2: "
        "missing field 'prompt_hash'); memlab extends only a recording it wrote: give a new "
        "file name, or move it away first"
    )
    assert path.read_bytes() == before


def test_a_bad_prompt_is_refused_before_any_generation(tmp_path: Path) -> None:
    path = tmp_path / "rec.jsonl"
    for prompts, error, message in (
        (["a", 2], TypeError, "prompts[1] must be a string, got int"),
        (["a", "b\ud800"], ValueError, "prompts[1] holds U+D800, a lone surrogate"),
    ):
        gen = FakeGenerator()
        with pytest.raises(error) as info:
            record_generations(prompts, gen, path)  # type: ignore[arg-type]
        assert str(info.value).startswith(message)
        assert gen.calls == []
        assert not path.exists()


def test_a_write_cut_short_leaves_the_recording_as_it_was(tmp_path: Path) -> None:
    """A write that fails half way (here: the file size limit, as a full disk would) leaves
    the old recording whole, without half a line, and no temporary file."""
    path = tmp_path / "rec.jsonl"
    intact = _recording(path, ["a"])
    script = textwrap.dedent(
        f"""
        import resource, signal, sys
        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
        limit = {len(intact) + 40}
        resource.setrlimit(resource.RLIMIT_FSIZE, (limit, limit))
        from memlab.generate.record import record_generations

        class Long:
            model_id = "fake"

            def generate(self, prompt, **kw):
                return "x" * 400

        try:
            record_generations(["b", "c"], Long(), sys.argv[1], progress=False)
        except OSError as exc:
            print("failed", exc.errno)
        """
    )
    done = subprocess.run(
        [sys.executable, "-c", script, str(path)], capture_output=True, text=True, timeout=120
    )
    assert done.stdout.startswith("failed"), done.stderr
    assert path.read_bytes() == intact
    assert _siblings(tmp_path) == []


# ---------------------------------------------------------------- reading prompts


def test_every_unreadable_prompts_file_is_a_value_error_naming_it(tmp_path: Path) -> None:
    cases = {
        "latin1.jsonl": (b'"ok"\n"caf\xe9"\n', "not valid UTF-8 (byte 0xe9 on line 2)"),
        "deep.jsonl": (
            b'"ok"\n' + b"[" * 100_000 + b"]" * 100_000 + b"\n",
            None,
        ),
        "huge.jsonl": (b'{"prompt": "a", "n": ' + b"9" * 5000 + b"}\n", None),
        "syntax.jsonl": (b'"ok"\n{"prompt": \n', None),
        "missing.jsonl": (None, "no such file"),
        "folder.jsonl": ({}, "is a directory, not a file"),
    }
    lines = {
        "deep.jsonl": ":2: invalid JSON: nested too deeply to read",
        "huge.jsonl": ":1: invalid JSON: Exceeds the limit (4300 digits)",
        "syntax.jsonl": ":2: invalid JSON: Expecting value (column 12)",
    }
    for name, (content, message) in cases.items():
        path = tmp_path / name
        if isinstance(content, bytes):
            path.write_bytes(content)
        elif isinstance(content, dict):
            path.mkdir()
        expected = f"{path}: {message}" if message else f"{path}{lines[name]}"
        with pytest.raises(ValueError) as info:
            read_prompts(path)
        assert str(info.value).startswith(expected), (name, str(info.value))


# ---------------------------------------------------------------- the command line


def test_command_line_bad_input_is_one_line_and_nothing_is_written(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setitem(GENERATORS, "fake", FakeGenerator)
    prompts = tmp_path / "prompts.jsonl"
    prompts.write_text('"p1"\n', encoding="utf-8")
    # A prompts file that is itself a recording: --out on it would extend its own input.
    recording = tmp_path / "rec.jsonl"
    own = _recording(recording, ["p1"])
    notes = tmp_path / "notes.txt"
    notes.write_text("keep me", encoding="utf-8")
    latin = tmp_path / "latin1.jsonl"
    latin.write_bytes(b'"caf\xe9"\n')
    deep = tmp_path / "deep.jsonl"
    deep.write_bytes(b"[" * 100_000 + b"]" * 100_000 + b"\n")
    out = tmp_path / "new.jsonl"
    cases = [
        ([str(recording), "--out", str(recording)], f"--out {recording}: is the prompts file"),
        ([str(prompts), "--out", str(notes)], f"--out {notes}: exists and is not a recording"),
        ([str(latin), "--out", str(out)], f"{latin}: not valid UTF-8 (byte 0xe9 on line 1)"),
        ([str(deep), "--out", str(out)], f"{deep}:1: invalid JSON: nested too deeply to read"),
        ([str(prompts), "--out", str(out), "--max-new-tokens", "0"], "max_new_tokens must be"),
    ]
    for argv, message in cases:
        assert main([*argv, "--generator", "fake"]) == 2, argv
        captured = capsys.readouterr()
        assert captured.err.startswith(f"error: {message}"), (argv, captured.err)
        assert captured.err.count("\n") == 1 and captured.out == ""
    assert recording.read_bytes() == own
    assert notes.read_text(encoding="utf-8") == "keep me"
    assert not out.exists()
    assert json.loads(own.decode("utf-8"))["prompt"] == "p1"


def test_runs_take_turns_on_one_recording_and_keep_each_others_lines(tmp_path: Path) -> None:
    import fcntl

    path = tmp_path / "rec.jsonl"
    record_generations(["a"], FakeGenerator(), path)
    fd = os.open(tmp_path, os.O_RDONLY)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)  # another run is publishing in this directory
        with pytest.raises(OutputFileError) as info:
            record_generations(["b", "c"], FakeGenerator(), path, lock_timeout=0.05)
        assert str(info.value) == (
            f"--out {path}: another run is writing a recording in {tmp_path} (waited 0.05 s "
            "for its turn); 2 new generation(s) of this run were not written"
        )
    finally:
        os.close(fd)
    assert [json.loads(x)["prompt"] for x in path.read_text().splitlines()] == ["a"]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["rec.jsonl"]  # no lock file
    # a line another run published after this run read the file is kept when this one
    # publishes (the file is read again under the lock)
    other = tmp_path / "other.jsonl"
    record_generations(["d"], FakeGenerator(), other)
    gen = FakeGenerator()
    original = gen.generate

    def generate_while_another_run_publishes(prompt: str, **kw: object) -> str:
        path.write_bytes(path.read_bytes() + other.read_bytes())
        return original(prompt, **kw)

    gen.generate = generate_while_another_run_publishes  # type: ignore[method-assign]
    assert record_generations(["e"], gen, path) == 1
    assert [json.loads(x)["prompt"] for x in path.read_text().splitlines()] == ["a", "d", "e"]


@pytest.mark.parametrize(("value", "error"), [(True, TypeError), ("1", TypeError),
                                              (-1, ValueError), (float("nan"), ValueError)])
def test_a_bad_lock_timeout_is_refused_before_any_generation(tmp_path, value, error) -> None:
    gen = FakeGenerator()
    with pytest.raises(error, match="lock_timeout"):
        record_generations(["a"], gen, tmp_path / "r.jsonl", lock_timeout=value)
    assert gen.calls == [] and not (tmp_path / "r.jsonl").exists()
