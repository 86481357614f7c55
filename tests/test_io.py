"""Result directories: nothing memlab did not write is ever deleted."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from memlab.io import OUTPUT_MARKER, OutputDirError, atomic_directory, check_output_dir


def _publish(out: Path, files: dict[str, str], kind: str = "experiment") -> None:
    with atomic_directory(out, kind=kind) as tmp:
        for name, text in files.items():
            (tmp / name).write_text(text)


def test_new_directory_gets_the_files_and_the_marker(tmp_path: Path) -> None:
    out = tmp_path / "run"
    _publish(out, {"metrics.json": "{}", "report.md": "# r"})
    assert sorted(p.name for p in out.iterdir()) == [OUTPUT_MARKER, "metrics.json", "report.md"]
    marker = json.loads((out / OUTPUT_MARKER).read_text())
    assert marker == {"memlab": "experiment", "entries": ["metrics.json", "report.md"]}
    assert sorted(p.name for p in tmp_path.iterdir()) == ["run"]  # no temporary left


def test_empty_directory_is_used(tmp_path: Path) -> None:
    out = tmp_path / "run"
    out.mkdir()
    _publish(out, {"a.txt": "1"})
    assert (out / "a.txt").read_text() == "1"


def test_foreign_directory_is_refused_and_untouched(tmp_path: Path) -> None:
    out = tmp_path / "mine"
    out.mkdir()
    (out / "thesis.tex").write_text("years of work")
    with pytest.raises(OutputDirError, match=r"mine: exists, is not empty and is not a memlab"):
        _publish(out, {"metrics.json": "{}"})
    assert [p.name for p in out.iterdir()] == ["thesis.tex"]
    assert (out / "thesis.tex").read_text() == "years of work"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["mine"]


def test_a_file_is_refused(tmp_path: Path) -> None:
    f = tmp_path / "f"
    f.write_text("x")
    with pytest.raises(OutputDirError, match="exists and is not a directory"):
        check_output_dir(f)
    assert f.read_text() == "x"


@pytest.mark.parametrize("rel", [".", "..", "./"])
def test_working_directory_and_parents_are_refused(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, rel: str
) -> None:
    cwd = tmp_path / "work"
    cwd.mkdir()
    (cwd / "notes.txt").write_text("keep")
    monkeypatch.chdir(cwd)
    with pytest.raises(OutputDirError, match="working directory or one of its parents"):
        _publish(Path(rel), {"metrics.json": "{}"})
    assert (cwd / "notes.txt").read_text() == "keep"


def test_empty_working_directory_is_refused(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.chdir(tmp_path)
    with pytest.raises(OutputDirError, match="working directory"):
        check_output_dir(".")


def test_memlab_result_is_replaced_and_foreign_files_are_kept(tmp_path: Path) -> None:
    out = tmp_path / "run"
    _publish(out, {"metrics.json": "old", "stale.parquet": "old"})
    (out / "my-notes.md").write_text("mine")
    (out / "plots").mkdir()
    (out / "plots" / "p.png").write_text("mine too")
    _publish(out, {"metrics.json": "new"})
    assert (out / "metrics.json").read_text() == "new"
    assert not (out / "stale.parquet").exists()  # memlab wrote it: replaced
    assert (out / "my-notes.md").read_text() == "mine"
    assert (out / "plots" / "p.png").read_text() == "mine too"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["run"]
    # the kept files are still not memlab's on the next replacement
    _publish(out, {"metrics.json": "newer"})
    assert (out / "my-notes.md").read_text() == "mine"


def test_foreign_file_with_a_result_name_is_refused(tmp_path: Path) -> None:
    out = tmp_path / "run"
    _publish(out, {"metrics.json": "old"})
    (out / "report.md").write_text("my report")
    with pytest.raises(OutputDirError, match="report.md, which memlab did not write"):
        _publish(out, {"metrics.json": "new", "report.md": "# generated"})
    assert (out / "report.md").read_text() == "my report"
    assert (out / "metrics.json").read_text() == "old"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["run"]


def test_result_written_before_the_marker_is_recognised(tmp_path: Path) -> None:
    out = tmp_path / "old-run"
    out.mkdir()
    (out / "manifest.json").write_text(json.dumps({"pipelines": {}, "dataset": {}}))
    (out / "metrics.png").write_text("png")
    (out / "README.txt").write_text("mine")
    _publish(out, {"manifest.json": "{}"})
    assert not (out / "metrics.png").exists()
    assert (out / "README.txt").read_text() == "mine"


def test_failure_leaves_the_old_result(tmp_path: Path) -> None:
    out = tmp_path / "run"
    _publish(out, {"metrics.json": "old"})
    with pytest.raises(RuntimeError):
        with atomic_directory(out) as tmp:
            (tmp / "metrics.json").write_text("half")
            raise RuntimeError("crash")
    assert (out / "metrics.json").read_text() == "old"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["run"]
