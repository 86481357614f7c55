"""A run directory's files: reading any of them names the file at fault; a run and an export
replace only a directory of their own kind."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import polars as pl
import pytest

from memlab.embed import HashingEmbedder
from memlab.eval.experiment import ExperimentResult, run_experiment, write_experiment
from memlab.eval.export import export_run
from memlab.io import OUTPUT_MARKER, OutputDirError, write_marker

HANDMADE = Path(__file__).resolve().parents[1] / "fixtures" / "handmade"
DEEP = "[" * 100_000 + "]" * 100_000


@pytest.fixture(scope="module")
def run_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("runs") / "run"
    run_experiment(
        HANDMADE,
        ["bm25"],
        embedder=HashingEmbedder(dim=32),
        out=out,
        progress=False,
        n_resamples=50,
    )
    return out


def _small_run(path: Path) -> Path:
    """A trimmed run: ``metrics.json``, ``manifest.json`` and ``rankings.parquet``."""
    path.mkdir()
    (path / "metrics.json").write_text('{"bm25": {"MRR": 0.5, "nDCG@10": NaN}}\n')
    (path / "manifest.json").write_text('{"baseline": "bm25", "pipelines": {}}\n')
    pl.DataFrame(
        {"pipeline": ["bm25"], "qid": ["q1"], "rank": [1], "mem_id": ["m1"]}
    ).write_parquet(path / "rankings.parquet")
    return path


def _fake_result(kind: str, path: Path) -> list[str]:
    """A directory as memlab marks a result of ``kind``; the names of its files."""
    path.mkdir()
    names = ["memories.jsonl", "queries.jsonl"] if kind == "dataset" else ["results.parquet"]
    for name in names:
        (path / name).write_text(f"{kind} data\n")
    write_marker(path, kind, names)
    return names


# ---------------------------------------------------------------- reading


def test_every_unreadable_run_file_is_a_value_error_naming_it(tmp_path: Path) -> None:
    run = _small_run(tmp_path / "run")
    loaded = ExperimentResult.load(run)
    assert loaded.metrics["bm25"]["MRR"] == 0.5 and loaded.rankings.height == 1
    cases = [
        ("metrics.json", DEEP, "invalid JSON: nested too deeply to read"),
        (
            "metrics.json",
            '{"bm25": {"MRR": ' + "9" * 5000 + "}}",
            "invalid JSON: Exceeds the limit (4300 digits) for integer string conversion",
        ),
        (
            "metrics.json",
            '{"bm25": {"MRR": "high"}}',
            "field 'bm25.MRR': must be a number, got string",
        ),
        ("metrics.json", '{"bm25": {"MRR": null}}', "field 'bm25.MRR': must be a number, got null"),
        (
            "metrics.json",
            '{"bm25": {"MRR": true}}',
            "field 'bm25.MRR': must be a number, got boolean",
        ),
        (
            "metrics.json",
            '{"bm\\ud800": {"MRR": 0.5}}',
            "name 'bm\\ud800' holds U+D800, a lone surrogate, which is not text",
        ),
        (
            "manifest.json",
            "{" + '"a": {' * 50_000 + "}" * 50_001,
            "invalid JSON: nested too deeply to read",
        ),
        (
            "manifest.json",
            '{"pipelines": "bm25"}',
            "field 'pipelines': must be an object, got string",
        ),
        ("manifest.json", '{"dataset": [1]}', "field 'dataset': must be an object, got array"),
        (
            "manifest.json",
            '{"tests": ["t", 2]}',
            "field 'tests': must be a list of strings, got an item of type integer",
        ),
        ("manifest.json", '{"alpha": "5%"}', "field 'alpha': must be a number, got string"),
    ]
    for name, content, message in cases:
        case = tmp_path / f"case-{len(list(tmp_path.iterdir()))}"
        shutil.copytree(run, case)
        (case / name).write_text(content, encoding="utf-8")
        with pytest.raises(ValueError) as info:
            ExperimentResult.load(case)
        assert str(info.value).startswith(f"{case / name}: {message}"), (name, str(info.value))
        assert "\n" not in str(info.value)


def test_a_parquet_file_polars_panics_on_is_a_value_error_naming_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from polars.exceptions import PanicException

    run = _small_run(tmp_path / "run")

    def panic(*args: object, **kwargs: object) -> None:
        raise PanicException("index out of bounds: the len is 0 but the index is 3")

    monkeypatch.setattr(pl, "read_parquet", panic)
    with pytest.raises(ValueError) as info:
        ExperimentResult.load(run)
    assert str(info.value) == (
        f"{run / 'rankings.parquet'}: not a readable parquet file (index out of bounds: the len "
        "is 0 but the index is 3)"
    )


def test_a_manifest_from_a_run_without_a_held_out_split_is_read(tmp_path: Path) -> None:
    """Runs written before held-out splits were optional say ``"held_out_split": null``."""
    from memlab.eval.runfiles import load_run

    run = _small_run(tmp_path / "run")
    (run / "manifest.json").write_text('{"baseline": "bm25", "held_out_split": null}\n')
    for read in (ExperimentResult.load, load_run):
        assert read(run).manifest == {"baseline": "bm25", "held_out_split": None}
    (run / "manifest.json").write_text('{"held_out_split": 0.5}\n')
    with pytest.raises(ValueError) as info:
        load_run(run)
    assert str(info.value) == (
        f"{run / 'manifest.json'}: field 'held_out_split': must be an object or null, got number"
    )


# ---------------------------------------------------------------- writing


def test_a_run_replaces_only_a_run(tmp_path: Path) -> None:
    result = ExperimentResult.load(_small_run(tmp_path / "source"))
    first = write_experiment(result, tmp_path / "out", write_report=False)
    again = write_experiment(result, tmp_path / "out", write_report=False)  # a run: replaced
    assert first == again and json.loads((again / "metrics.json").read_text())["bm25"]["MRR"] == 0.5
    for kind in ("dataset", "sweep", "tune", "export", "result"):
        target = tmp_path / kind
        names = _fake_result(kind, target)
        marker = (target / OUTPUT_MARKER).read_text()
        with pytest.raises(OutputDirError) as info:
            write_experiment(result, target, write_report=False)
        assert str(info.value) == (
            f"output directory {target}: is a memlab {kind} directory, not a run; a run "
            "replaces only a run: give a new or empty directory"
        )
        assert sorted(p.name for p in target.iterdir()) == sorted([*names, OUTPUT_MARKER])
        assert all((target / n).read_text() == f"{kind} data\n" for n in names)
        assert (target / OUTPUT_MARKER).read_text() == marker
    assert sorted(p.name for p in tmp_path.iterdir() if p.name.startswith(".")) == []


def test_an_export_replaces_only_an_export(run_dir: Path, tmp_path: Path) -> None:
    run = tmp_path / "run"
    shutil.copytree(run_dir, run)
    files = {p.name: p.read_bytes() for p in run.iterdir() if p.is_file()}
    other = tmp_path / "other-run"
    shutil.copytree(run_dir, other)
    legacy = tmp_path / "legacy-run"  # a run written before the marker existed
    shutil.copytree(run_dir, legacy)
    (legacy / OUTPUT_MARKER).unlink()
    cases = {
        run: "is the run",
        other: "is a memlab experiment directory, not an export",
        legacy: "is a memlab experiment directory, not an export",
    }
    for kind in ("dataset", "sweep", "tune"):
        _fake_result(kind, tmp_path / kind)
        cases[tmp_path / kind] = f"is a memlab {kind} directory, not an export"
    for target, message in cases.items():
        before = sorted(p.name for p in target.iterdir())
        with pytest.raises(OutputDirError) as info:
            export_run(run, target)
        assert str(info.value).startswith(f"output directory {target}: {message}"), target
        assert sorted(p.name for p in target.iterdir()) == before
    assert {p.name: p.read_bytes() for p in run.iterdir() if p.is_file()} == files
    out, _ = export_run(run)  # the default, RUN/export, and again over itself
    assert export_run(run)[0] == out == (run / "export").resolve()
    assert json.loads((out / OUTPUT_MARKER).read_text())["memlab"] == "export"
    assert {p.name: p.read_bytes() for p in run.iterdir() if p.is_file()} == files
