"""Result directories: nothing memlab did not write is ever deleted."""

from __future__ import annotations

import hashlib
import json
import os
import re
import signal
from pathlib import Path

import pytest

import memlab.io as mio
from memlab.io import OUTPUT_MARKER, OutputDirError, atomic_directory, check_output_dir

# The fields every pre-marker memlab experiment manifest carried.
_LEGACY_MANIFEST = {
    "dataset": {"name": "d"},
    "pipelines": {"bm25": {}},
    "baseline": "bm25",
    "metrics": ["MRR"],
    "seed": 0,
    "tests": ["paired_t"],
    "correction": "holm",
    "exclude_tags": [],
    "replay": {},
}


def sha(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()


def _publish(out: Path, files: dict[str, str], kind: str = "experiment") -> None:
    with atomic_directory(out, kind=kind) as tmp:
        for name, text in files.items():
            (tmp / name).write_text(text)


def test_new_directory_gets_the_files_and_the_marker(tmp_path: Path) -> None:
    out = tmp_path / "run"
    _publish(out, {"metrics.json": "{}", "report.md": "# r"})
    assert sorted(p.name for p in out.iterdir()) == [OUTPUT_MARKER, "metrics.json", "report.md"]
    marker = json.loads((out / OUTPUT_MARKER).read_text())
    assert marker == {"memlab": "experiment", "entries": ["metrics.json", "report.md"],
                      "sha256": {"metrics.json": sha("{}"), "report.md": sha("# r")}}
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
    (out / "manifest.json").write_text(json.dumps(_LEGACY_MANIFEST))
    (out / "metrics.json").write_text("{}")
    (out / "report.md").write_text("# r\n\n![metrics](metrics.png) ([svg](metrics.svg))\n")
    (out / "metrics.png").write_text("png")
    (out / "metrics.svg").write_text("svg")
    (out / "architecture.png").write_text("mine")  # not linked by memlab's report: not claimed
    (out / "extra.parquet").write_text("mine")  # not a name memlab wrote: not claimed
    (out / "README.txt").write_text("mine")
    _publish(out, {"manifest.json": "{}"})
    assert sorted(p.name for p in out.iterdir()) == [
        OUTPUT_MARKER, "README.txt", "architecture.png", "extra.parquet", "manifest.json"
    ]
    assert (out / "architecture.png").read_text() == "mine"
    assert (out / "extra.parquet").read_text() == "mine"
    assert (out / "README.txt").read_text() == "mine"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["old-run"]


@pytest.mark.parametrize(
    "manifest",
    [
        {"pipelines": ["etl"]},
        {"pipelines": {}, "dataset": {}},
        {**_LEGACY_MANIFEST, "seed": "zero"},
        {k: v for k, v in _LEGACY_MANIFEST.items() if k != "replay"},
    ],
)
def test_folder_that_does_not_prove_itself_memlabs_is_refused_untouched(
    tmp_path: Path, manifest: dict[str, object]
) -> None:
    out = tmp_path / "proj"
    out.mkdir()
    files = {
        "manifest.json": json.dumps(manifest),
        "report.md": "my own report",
        "architecture.png": "PNGDATA",
        "data.parquet": "mine",
        "notes.txt": "notes",
    }
    for name, text in files.items():
        (out / name).write_text(text)
    with pytest.raises(
        OutputDirError, match=r"^output directory .*/proj: exists, is not empty and is not a memlab"
    ):
        _publish(out, {"manifest.json": "{}", "report.md": "# generated"})
    assert {p.name: p.read_text() for p in out.iterdir()} == files
    assert sorted(p.name for p in tmp_path.iterdir()) == ["proj"]


def test_interrupt_mid_swap_keeps_the_users_files_and_the_old_result(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    out = tmp_path / "run"
    _publish(out, {"metrics.json": "old", "report.md": "old report"})
    (out / "my_notes.txt").write_text("irreplaceable")
    (out / "plots").mkdir()
    (out / "plots" / "p.png").write_text("mine too")
    real_replace = os.replace
    interrupted: list[bool] = []

    def replace(src: os.PathLike[str], dst: os.PathLike[str]) -> None:
        real_replace(src, dst)
        # every instant of the swap: the user's files are in OUT under their own names
        assert (out / "my_notes.txt").read_text() == "irreplaceable"
        assert (out / "plots" / "p.png").read_text() == "mine too"
        new_entry_moved_in = Path(src).parent.name.startswith(".run.tmp-") and Path(dst) == (
            out / "metrics.json"
        )
        if new_entry_moved_in and not interrupted:
            interrupted.append(True)
            raise KeyboardInterrupt  # ... and the user presses Ctrl-C now

    monkeypatch.setattr(mio.os, "replace", replace)
    with pytest.raises(KeyboardInterrupt):
        _publish(out, {"metrics.json": "new", "report.md": "new report"})
    monkeypatch.setattr(mio.os, "replace", real_replace)
    assert interrupted  # the old metrics.json was out of OUT, the new one in it
    assert (out / "my_notes.txt").read_text() == "irreplaceable"
    assert (out / "plots" / "p.png").read_text() == "mine too"
    assert (out / "metrics.json").read_text() == "old"
    assert (out / "report.md").read_text() == "old report"
    marker = json.loads((out / OUTPUT_MARKER).read_text())
    assert marker == {"memlab": "experiment", "entries": ["metrics.json", "report.md"],
                      "sha256": {"metrics.json": sha("old"), "report.md": sha("old report")}}
    assert sorted(p.name for p in tmp_path.iterdir()) == ["run"]
    _publish(out, {"metrics.json": "new"})  # the next run still replaces it
    assert sorted(p.name for p in out.iterdir()) == [
        OUTPUT_MARKER, "metrics.json", "my_notes.txt", "plots"
    ]


def test_sigint_during_the_swap_is_delivered_after_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    out = tmp_path / "run"
    _publish(out, {"metrics.json": "old", "stale.json": "old"})
    (out / "my_notes.txt").write_text("irreplaceable")
    real_replace = os.replace
    sent: list[bool] = []

    def replace(src: os.PathLike[str], dst: os.PathLike[str]) -> None:
        real_replace(src, dst)
        if not sent and str(src) == str(out / "stale.json"):  # mid-swap: OUT is old and new
            sent.append(True)
            signal.raise_signal(signal.SIGINT)  # Ctrl-C: held until the swap is done

    monkeypatch.setattr(mio.os, "replace", replace)
    with pytest.raises(KeyboardInterrupt):
        _publish(out, {"metrics.json": "new"})
    assert sent
    assert (out / "metrics.json").read_text() == "new"  # the new complete result
    assert sorted(p.name for p in out.iterdir()) == [OUTPUT_MARKER, "metrics.json", "my_notes.txt"]
    assert (out / "my_notes.txt").read_text() == "irreplaceable"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["run"]


def test_symlinked_output_directory_is_refused_and_left_intact(tmp_path: Path) -> None:
    real = tmp_path / "real"
    _publish(real, {"metrics.json": "old"})
    (real / "usernote.txt").write_text("mine")
    link = tmp_path / "link"
    link.symlink_to("real")
    with pytest.raises(OutputDirError, match=r"^output directory .*/link: is a symbolic link"):
        _publish(link, {"metrics.json": "new"})
    assert link.is_symlink() and os.readlink(link) == "real"
    assert sorted(p.name for p in real.iterdir()) == [OUTPUT_MARKER, "metrics.json", "usernote.txt"]
    assert (real / "metrics.json").read_text() == "old"
    assert (real / "usernote.txt").read_text() == "mine"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["link", "real"]
    dangling = tmp_path / "dangling"
    dangling.symlink_to("nowhere")
    with pytest.raises(OutputDirError, match="dangling: is a symbolic link"):
        _publish(dangling, {"metrics.json": "new"})
    assert dangling.is_symlink() and not (tmp_path / "nowhere").exists()


def test_failure_leaves_the_old_result(tmp_path: Path) -> None:
    out = tmp_path / "run"
    _publish(out, {"metrics.json": "old"})
    with pytest.raises(RuntimeError):
        with atomic_directory(out, kind="experiment") as tmp:
            (tmp / "metrics.json").write_text("half")
            raise RuntimeError("crash")
    assert (out / "metrics.json").read_text() == "old"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["run"]


def test_a_result_replaces_only_a_result_of_its_own_kind(tmp_path: Path) -> None:
    data = tmp_path / "ds"
    _publish(data, {"memories.jsonl": "mine"}, kind="dataset")
    for kind in ("experiment", "sweep", "result"):
        with pytest.raises(mio.OutputDirError, match="is a memlab dataset directory"):
            with atomic_directory(data, kind=kind) as tmp:
                (tmp / "metrics.json").write_text("new")
    with pytest.raises(mio.OutputDirError, match=r"this writes: sweep\)"):
        mio.check_output_dir(data, kinds=("sweep",))
    assert (data / "memories.jsonl").read_text() == "mine"
    # its own kind, any kind, or a kind it is allowed to replace: accepted
    assert mio.check_output_dir(data, kinds=("dataset",)) == data
    assert mio.check_output_dir(data) == data
    _publish(data, {"memories.jsonl": "again"}, kind="dataset")
    with atomic_directory(data, kind="export", replaces=("export", "dataset")) as tmp:
        (tmp / "x.txt").write_text("x")
    assert (data / "x.txt").read_text() == "x"
    # an empty directory is anyone's
    (tmp_path / "empty").mkdir()
    assert mio.check_output_dir(tmp_path / "empty", kinds=("sweep",)) == tmp_path / "empty"


# ---------------------------------------------------------------- single-file outputs


def _mine(path: Path) -> bool:
    return path.read_text().startswith("memlab:")


def test_publish_file_creates_and_replaces_only_what_it_recognises(tmp_path: Path) -> None:
    out = tmp_path / "sub" / "out.txt"
    mio.publish_file(out, "memlab: 1\n", owned=_mine)
    assert out.read_text() == "memlab: 1\n"
    mio.publish_file(out, "memlab: 2\n", owned=_mine)
    assert out.read_text() == "memlab: 2\n"
    (tmp_path / "empty.txt").write_text("")
    mio.publish_file(tmp_path / "empty.txt", "memlab: 3\n", owned=_mine)  # nothing to lose
    assert sorted(p.name for p in (tmp_path / "sub").iterdir()) == ["out.txt"]


@pytest.mark.parametrize(
    ("make", "message"),
    [
        (lambda t: (t / "out").write_text("my thesis"),
         "exists and is not a file memlab wrote; memlab replaces only a file it wrote"),
        (lambda t: ((t / "thesis").write_text("mine"), (t / "out").symlink_to("thesis")),
         "is a symbolic link (to thesis)"),
        (lambda t: (t / "out").symlink_to("missing"), "is a symbolic link (to missing)"),
        (lambda t: (t / "out").mkdir(), "is a directory; give a file name"),
    ],
    ids=["foreign-file", "symlink", "dangling-symlink", "directory"],
)
def test_publish_file_refuses_and_leaves_nothing_behind(tmp_path: Path, make, message) -> None:
    make(tmp_path)
    before = {p.name: (p.is_symlink(), p.is_dir()) for p in tmp_path.iterdir()}
    with pytest.raises(mio.OutputFileError) as info:
        mio.publish_file(tmp_path / "out", "memlab: new\n", what="--out", owned=_mine)
    assert str(info.value).startswith(f"--out {tmp_path / 'out'}: {message}")
    assert {p.name: (p.is_symlink(), p.is_dir()) for p in tmp_path.iterdir()} == before
    if (tmp_path / "thesis").exists():
        assert (tmp_path / "thesis").read_text() == "mine"


def test_publish_file_removes_its_temporary_file_when_the_rename_fails(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    def failing(src: object, dst: object) -> None:
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(mio.os, "replace", failing)
    with pytest.raises(OSError, match="No space left"):
        mio.publish_file(tmp_path / "out.txt", "memlab: x\n")
    with pytest.raises(OSError, match="No space left"):
        mio.atomic_write_text(tmp_path / "a.txt", "x")
    assert list(tmp_path.iterdir()) == []


def test_a_device_or_a_path_below_a_file_is_refused(tmp_path: Path) -> None:
    with pytest.raises(mio.OutputFileError, match="exists and is not a regular file"):
        mio.check_output_file("/dev/null")
    (tmp_path / "f").write_text("x")
    with pytest.raises(mio.OutputFileError, match="is a file, not a directory"):
        mio.check_output_file(tmp_path / "f" / "out.txt")


# ---------------------------------------------------------------- readers


@pytest.mark.parametrize(
    ("data", "message"),
    [
        (b"[" * 100_000 + b"]" * 100_000, "invalid JSON: nested too deeply to read"),
        (b'{"a": 1,\n "b": }', "invalid JSON: Expecting value (line 2, column 7)"),
        (b'{"a": "\xff"}', "not valid UTF-8 (byte 0xff on line 1)"),
        (b'{"n": ' + b"9" * 5000 + b"}", "invalid JSON: Exceeds the limit"),
    ],
    ids=["deep", "syntax", "utf8", "huge-int"],
)
def test_read_json_names_the_file(tmp_path: Path, data: bytes, message: str) -> None:
    file = tmp_path / "manifest.json"
    file.write_bytes(data)
    with pytest.raises(ValueError) as info:
        mio.read_json(file)
    assert str(info.value).startswith(f"{file}: {message}")


def test_read_toml_and_read_parquet_name_the_file(tmp_path: Path) -> None:
    toml = tmp_path / "dataset.toml"
    toml.write_text("x = " + "[" * 5000 + "]" * 5000 + "\n")
    with pytest.raises(ValueError, match=r"dataset.toml: invalid TOML: nested too deeply"):
        mio.read_toml(toml)
    toml.write_text('name = "a\n')
    with pytest.raises(ValueError, match=r"dataset.toml: invalid TOML: "):
        mio.read_toml(toml)
    table = tmp_path / "rankings.parquet"
    for data in (b"", b"PAR1" + b"\0" * 40 + b"PAR1", b"not parquet at all"):
        table.write_bytes(data)
        with pytest.raises(ValueError) as info:
            mio.read_parquet(table)
        assert str(info.value).startswith(f"{table}: not a readable parquet file (")
    with pytest.raises(ValueError, match="missing.parquet: no such file"):
        mio.read_parquet(tmp_path / "missing.parquet")


# ---------------------------------------------------------------- kinds and kept entries


def test_a_tune_result_before_the_marker_is_recognised_by_its_tune_json(tmp_path: Path) -> None:
    out = tmp_path / "tune"
    out.mkdir()
    summary = {"metric": "R_all@10", "best_params": {}, "best_train": 0.5, "best_test": 0.4,
               "defaults_test": 0.3, "tests": [], "study_name": "s", "storage": "x",
               "trials": 3}
    (out / "tune.json").write_text(json.dumps(summary))
    (out / "study.db").write_text("db")
    (out / "notes.md").write_text("mine")
    assert mio.output_kind(out) == "tune"
    owned = mio.owned_entries(out)
    assert owned is not None and owned("study.db") and not owned("notes.md")
    assert mio.output_kind(tmp_path / "nothing") is None


def test_kept_entries_stay_in_place_and_stay_claimed(tmp_path: Path) -> None:
    out = tmp_path / "t"
    with atomic_directory(out, kind="tune") as tmp:
        (tmp / "tune.json").write_text("1")
    (out / "study.db").write_text("trials")
    mio.write_marker(out, "tune", ["tune.json", "study.db"])
    inode = (out / "study.db").stat().st_ino
    with atomic_directory(out, kind="tune", keep=("study.db",)) as tmp:
        (tmp / "tune.json").write_text("2")
    assert (out / "study.db").stat().st_ino == inode
    assert (out / "tune.json").read_text() == "2"
    marker = json.loads((out / OUTPUT_MARKER).read_text())
    # study.db changes from run to run: claimed by name, no digest
    assert marker == {"memlab": "tune", "entries": ["study.db", "tune.json"],
                      "sha256": {"tune.json": sha("2")}}


@pytest.mark.parametrize("mode", [0o600, 0o640, 0o444])
def test_a_replaced_file_keeps_its_permission_bits(tmp_path: Path, mode: int) -> None:
    out = tmp_path / "out.txt"
    mio.publish_file(out, "memlab: 1\n", owned=_mine)
    os.chmod(out, mode)
    mio.publish_file(out, "memlab: 2\n", owned=_mine)
    assert out.read_text() == "memlab: 2\n"
    assert out.stat().st_mode & 0o777 == mode
    marker = tmp_path / "marker.json"
    mio.atomic_write_text(marker, "a")
    os.chmod(marker, mode)
    mio.atomic_write_text(marker, "b")
    assert marker.stat().st_mode & 0o777 == mode
    assert sorted(p.name for p in tmp_path.iterdir()) == ["marker.json", "out.txt"]


def test_a_new_file_gets_the_permissions_of_any_new_file(tmp_path: Path) -> None:
    old = os.umask(0o022)
    try:
        mio.publish_file(tmp_path / "new.txt", "memlab: 1\n", owned=_mine)
    finally:
        os.umask(old)
    assert (tmp_path / "new.txt").stat().st_mode & 0o777 == 0o644


def test_the_old_shared_result_kind_is_read_as_the_kind_its_entries_prove(tmp_path: Path) -> None:
    def marked(name: str, entries: list[str]) -> Path:
        out = tmp_path / name
        out.mkdir()
        for entry in entries:
            (out / entry).write_text("x")
        mio.write_marker(out, "result", entries)
        return out

    compared = marked("c", ["comparison.csv", "per_query.csv"])
    exported = marked("e", ["aggregate.csv", "comparison.tex", "per_query.csv", "runs"])
    unknown = marked("u", ["aggregate.csv", "metrics.json"])
    assert mio.output_kind(compared) == "compare"
    assert mio.output_kind(exported) == "export"
    assert mio.output_kind(unknown) == "result"
    assert mio.check_output_dir(compared, kinds=("compare",)) == compared
    assert mio.check_output_dir(exported, kinds=("export",)) == exported
    refused = r"is a memlab {} directory.*this writes: {}\)"
    with pytest.raises(mio.OutputDirError, match=refused.format("compare", "export")):
        mio.check_output_dir(compared, kinds=("export",))
    with pytest.raises(mio.OutputDirError, match=refused.format("export", "compare")):
        mio.check_output_dir(exported, kinds=("compare",))
    for kind in ("export", "compare"):
        with pytest.raises(mio.OutputDirError, match="is a memlab result directory"):
            mio.check_output_dir(unknown, kinds=(kind,))
    # a writer that still names the old kind itself replaces what that kind marked
    assert mio.check_output_dir(unknown, kinds=("result",)) == unknown


def test_an_entry_changed_since_memlab_wrote_it_is_never_replaced(tmp_path: Path) -> None:
    out = tmp_path / "run"
    _publish(out, {"metrics.json": "{}", "report.md": "# r", "old.svg": "<svg/>"})
    with open(out / "report.md", "a") as fh:
        fh.write("\nmy conclusions")
    with pytest.raises(OutputDirError, match=re.escape(
            f"{out}: holds report.md, which memlab did not write (or which changed since it "
            "did) and would overwrite; move it away first (nothing was written)")):
        _publish(out, {"metrics.json": "{1}", "report.md": "# new"})
    assert (out / "metrics.json").read_text() == "{}"
    assert (out / "report.md").read_text() == "# r\nmy conclusions"
    # a user's directory under a name memlab once wrote as a file
    (out / "report.md").write_text("# r")
    (out / "old.svg").unlink()
    (out / "old.svg").mkdir()
    (out / "old.svg" / "notes.txt").write_text("mine")
    _publish(out, {"metrics.json": "{1}", "report.md": "# new"})  # old.svg: not in the new run
    assert (out / "old.svg" / "notes.txt").read_text() == "mine"  # kept, and no longer claimed
    assert (out / "report.md").read_text() == "# new"
    marker = json.loads((out / OUTPUT_MARKER).read_text())
    assert marker["entries"] == ["metrics.json", "report.md"]


def test_entry_digest_of_files_and_trees(tmp_path: Path) -> None:
    (tmp_path / "f").write_text("abc")
    assert mio.entry_digest(tmp_path / "f") == sha("abc")
    tree = tmp_path / "d"
    (tree / "sub").mkdir(parents=True)
    (tree / "b.txt").write_text("b")
    (tree / "sub" / "a.txt").write_text("a")
    sub = hashlib.sha256(b"dir\0" + f"a.txt\0{sha('a')}\0".encode()).hexdigest()
    want = hashlib.sha256(b"dir\0" + f"b.txt\0{sha('b')}\0sub\0{sub}\0".encode()).hexdigest()
    assert mio.entry_digest(tree) == want
    (tree / "link").symlink_to(tree / "b.txt")
    assert mio.entry_digest(tree) is None  # memlab never writes a link: never matches
    assert mio.entry_digest(tmp_path / "missing") is None
