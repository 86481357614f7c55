"""Dataset format v1: objects, canonical bytes, atomic writes, frames."""

from __future__ import annotations

import hashlib
import json
import tomllib
from pathlib import Path

import polars as pl
import pytest

from memlab.datasets.format import (
    Dataset,
    DatasetError,
    MemoryOp,
    Query,
    dumps_meta,
    load_dataset,
    write_dataset,
)
from memlab.datasets.validate import Problem, validate_dataset
from memlab.timeutil import parse_ts

HANDMADE = Path(__file__).resolve().parents[1] / "fixtures" / "handmade"
META = {
    "name": "t",
    "version": "1",
    "description": "d",
    "license": "Apache-2.0",
    "source": "s",
}


def parts() -> tuple[dict[str, str], list[MemoryOp], list[Query]]:
    ops = [
        MemoryOp.store(
            "a", "2025-01-01T00:00:00Z", "Alpha runs on Redis.", "fact",
            client_id="acme", key="alpha", source_agent="claude-code",
        ),
        MemoryOp.store("b", "2025-01-02T00:00:00Z", "Beta shipped.", "event"),
        MemoryOp.forget("2025-01-03T00:00:00Z", "b", "wrong"),
        MemoryOp.relate("2025-01-04T00:00:00Z", "Alpha", "uses", "Redis"),
    ]  # fmt: skip
    queries = [
        Query(0, "q1", parse_ts("2025-01-05T00:00:00Z"), "Where does Alpha run?", "acme",
              None, {"a": 1}, ("b",), ("supersession",), "Redis"),
    ]  # fmt: skip
    return dict(META), ops, queries


def test_store_to_json_order_and_iso() -> None:
    op = MemoryOp.store(
        "x", 1735689600.0, "Text.", "fact",
        metadata={"b": 1, "a": {"d": 2, "c": 3}}, valid_from="2025-01-01T00:00:00Z",
        key="k", source_agent="ops-agent", importance=None,
    )  # fmt: skip
    assert list(op.to_json().items()) == [
        ("id", "x"),
        ("ts", "2025-01-01T00:00:00.000Z"),
        ("type", "fact"),
        ("text", "Text."),
        ("source_agent", "ops-agent"),
        ("key", "k"),
        ("valid_from", "2025-01-01T00:00:00.000Z"),
        ("metadata", {"a": {"c": 3, "d": 2}, "b": 1}),
    ]
    assert op.fields["valid_from"] == 1735689600.0
    assert "importance" not in op.fields


def test_store_rejects_unknown_payload_field() -> None:
    with pytest.raises(TypeError, match="colour"):
        MemoryOp.store("x", 0.0, "t", "event", colour="red")


def test_forget_and_relate_to_json() -> None:
    assert MemoryOp.forget(0.0, "m1", "dup", id="f1").to_json() == {
        "id": "f1",
        "ts": "1970-01-01T00:00:00.000Z",
        "op": "forget",
        "target": "m1",
        "reason": "dup",
    }
    assert list(MemoryOp.relate(1.5, "A", "uses", "B").to_json()) == [
        "ts",
        "op",
        "from",
        "relation",
        "to",
    ]


def test_query_to_json_omits_absent_fields() -> None:
    q = Query(0, "q", 0.0, "t", relevant={}, tags=("scope",))
    assert q.to_json() == {
        "qid": "q",
        "ts": "1970-01-01T00:00:00.000Z",
        "text": "t",
        "relevant": {},
        "tags": ["scope"],
    }


def test_dumps_meta_order_and_escaping() -> None:
    text = dumps_meta({"source": 'a "b"\n', "zeta": [1, 2.5, True], "name": "n", "alpha": "é"})
    assert text == ('name = "n"\nsource = "a \\"b\\"\\n"\nalpha = "é"\nzeta = [1, 2.5, true]\n')
    assert tomllib.loads(text) == {
        "name": "n",
        "source": 'a "b"\n',
        "alpha": "é",
        "zeta": [1, 2.5, True],
    }
    with pytest.raises(TypeError, match="dataset.toml: field 'nested.a'"):
        dumps_meta({"nested": {"a": {1, 2}}})


def test_dumps_meta_writes_tables_last() -> None:
    meta = {"name": "n", "replay": {"touch_k": 0, "consolidation": {"interval_hours": 6.0}}}
    text = dumps_meta(meta)
    assert text == (
        'name = "n"\n\n[replay]\ntouch_k = 0\n\n[replay.consolidation]\ninterval_hours = 6.0\n'
    )
    assert tomllib.loads(text) == meta


def test_load_handmade() -> None:
    ds = load_dataset(HANDMADE)
    assert ds.meta["name"] == "handmade"
    assert len(ds.ops) == 20
    assert len(ds.stores()) == 18
    assert len(ds.queries) == 10
    relate = ds.ops[11]
    assert (relate.line, relate.op, relate.from_entity, relate.relation, relate.to_entity) == (
        12,
        "relate",
        "Orion Dashboard",
        "uses",
        "metrics-gateway",
    )
    forget = ds.ops[17]
    assert (forget.op, forget.target, forget.reason, forget.id) == (
        "forget",
        "h16",
        "incorrect",
        None,
    )
    first = ds.ops[0]
    assert first.ts == parse_ts("2025-01-15T09:00:00Z")
    assert first.fields == {
        "source_agent": "ops-agent",
        "client_id": "acme-corp",
        "importance": "low",
    }
    q2 = ds.queries[1]
    assert q2.at_time == parse_ts("2025-03-05T00:00:00Z")
    assert q2.relevant == {"h02": 1}
    assert q2.stale == ("h14",)
    assert q2.tags == ("temporal", "client:acme-corp")


def test_handmade_round_trips_byte_for_byte() -> None:
    ds = load_dataset(HANDMADE)
    for name, data in ds.serialize().items():
        assert data == (HANDMADE / name).read_bytes()


def test_sha256_of_loaded_files() -> None:
    ds = load_dataset(HANDMADE)
    assert ds.sha256() == {
        name: hashlib.sha256((HANDMADE / name).read_bytes()).hexdigest()
        for name in ("dataset.toml", "memories.jsonl", "queries.jsonl")
    }


def test_sha256_of_dataset_built_in_code() -> None:
    ds = Dataset(None, *parts())
    expected = {n: hashlib.sha256(b).hexdigest() for n, b in ds.serialize().items()}
    assert ds.sha256() == expected


def test_write_then_load(tmp_path: Path) -> None:
    out = tmp_path / "out"
    written = write_dataset(parts(), out)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out"]
    assert sorted(p.name for p in out.iterdir()) == [
        ".memlab-output.json",
        "dataset.toml",
        "memories.jsonl",
        "queries.jsonl",
    ]
    lines = (out / "memories.jsonl").read_text(encoding="utf-8").splitlines()
    assert (
        lines[2] == '{"ts":"2025-01-03T00:00:00.000Z","op":"forget","target":"b","reason":"wrong"}'
    )
    assert json.loads(lines[0]) == {
        "id": "a",
        "ts": "2025-01-01T00:00:00.000Z",
        "type": "fact",
        "text": "Alpha runs on Redis.",
        "source_agent": "claude-code",
        "client_id": "acme",
        "key": "alpha",
    }
    loaded = load_dataset(out)
    assert loaded.ops == written.ops
    assert [op.line for op in loaded.ops] == [1, 2, 3, 4]
    assert loaded.queries[0].relevant == {"a": 1}
    assert loaded.sha256() == written.sha256()


def test_write_accepts_mapping_and_dataset(tmp_path: Path) -> None:
    meta, ops, queries = parts()
    a = write_dataset({"meta": meta, "ops": ops, "queries": queries}, tmp_path / "a")
    b = write_dataset(Dataset(None, meta, ops, queries), tmp_path / "b")
    assert a.sha256() == b.sha256()
    with pytest.raises(TypeError, match="write_dataset expects"):
        write_dataset([meta, ops, queries], tmp_path / "c")


def test_write_is_deterministic(tmp_path: Path) -> None:
    write_dataset(parts(), tmp_path / "a")
    write_dataset(parts(), tmp_path / "b")
    for name in ("dataset.toml", "memories.jsonl", "queries.jsonl"):
        assert (tmp_path / "a" / name).read_bytes() == (tmp_path / "b" / name).read_bytes()


def test_write_replaces_an_existing_dataset(tmp_path: Path) -> None:
    out = tmp_path / "out"
    write_dataset(parts(), out, extra_files={"README.md": "old\n"})
    meta, ops, queries = parts()
    (out / "generations.jsonl").write_text("recorded\n")
    write_dataset((meta, ops[:2], []), out)
    # files that are not part of the new dataset are kept: memlab cannot tell who wrote them
    assert sorted(p.name for p in out.iterdir()) == [
        ".memlab-output.json",
        "README.md",
        "dataset.toml",
        "generations.jsonl",
        "memories.jsonl",
        "queries.jsonl",
    ]
    assert (out / "generations.jsonl").read_text() == "recorded\n"
    assert len(load_dataset(out).ops) == 2
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out"]
    write_dataset((meta, ops[:1], []), out, extra_files={"README.md": "new\n"})
    assert (out / "README.md").read_text() == "new\n"
    assert (out / "generations.jsonl").read_text() == "recorded\n"


def test_write_refuses_a_foreign_directory(tmp_path: Path) -> None:
    out = tmp_path / "out"
    out.mkdir()
    (out / "notes.txt").write_text("keep me")
    with pytest.raises(FileExistsError, match="holds no dataset.toml"):
        write_dataset(parts(), out)
    assert (out / "notes.txt").read_text() == "keep me"


def test_invalid_dataset_is_never_published(tmp_path: Path) -> None:
    out = tmp_path / "out"
    write_dataset(parts(), out)
    before = {p.name: p.read_bytes() for p in out.iterdir()}
    meta, ops, queries = parts()
    bad = Query(0, "q2", 0.0, "Too early?", None, None, {"a": 1}, (), ("x",), None)
    with pytest.raises(DatasetError) as info:
        write_dataset((meta, ops, [*queries, bad]), out)
    assert [(p.file, p.line, p.field) for p in info.value.problems] == [
        ("queries.jsonl", 2, "ts"),
        ("queries.jsonl", 2, "relevant"),
    ]
    assert {p.name: p.read_bytes() for p in out.iterdir()} == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out"]


def test_extra_file_names_are_checked(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="reserved"):
        write_dataset(parts(), tmp_path / "o", extra_files={"queries.jsonl": "x"})


def test_load_raises_with_every_problem(tmp_path: Path) -> None:
    out = tmp_path / "out"
    write_dataset(parts(), out)
    lines = (out / "memories.jsonl").read_text().splitlines()
    lines[1], lines[0] = lines[0], lines[1]
    (out / "memories.jsonl").write_text("\n".join(lines) + "\n[]\n")
    with pytest.raises(DatasetError) as info:
        load_dataset(out)
    assert info.value.problems == validate_dataset(out)
    assert [(p.line, p.field) for p in info.value.problems] == [(2, "ts"), (5, None)]
    assert str(info.value).startswith(f"{out}: 2 problem(s)\n  memories.jsonl:2: field 'ts'")


def test_load_without_validation_skips_cross_line_rules(tmp_path: Path) -> None:
    out = tmp_path / "out"
    write_dataset(parts(), out)
    lines = (out / "memories.jsonl").read_text().splitlines()
    lines[1], lines[0] = lines[0], lines[1]
    (out / "memories.jsonl").write_text("\n".join(lines) + "\n")
    ds = load_dataset(out, validate=False)
    assert [op.id for op in ds.ops] == ["b", "a", None, None]
    (out / "memories.jsonl").write_text("\n".join(lines) + "\n{}\n")
    with pytest.raises(DatasetError) as info:
        load_dataset(out, validate=False)
    assert info.value.problems == [
        Problem("memories.jsonl", 5, "id", "missing"),
        Problem("memories.jsonl", 5, "ts", "missing"),
        Problem("memories.jsonl", 5, "text", "missing"),
        Problem("memories.jsonl", 5, "type", "missing"),
    ]


def test_memories_frame() -> None:
    frame = load_dataset(HANDMADE).memories_frame()
    assert frame.height == 20
    assert frame.columns == [
        "line", "op", "id", "ts", "type", "text", "source_agent", "client_id", "key",
        "subject", "status_value", "importance", "category", "knowledge_category",
        "valid_from", "metadata", "target", "reason", "from_entity", "relation", "to_entity",
    ]  # fmt: skip
    assert frame.schema["ts"] == pl.Float64
    row = frame.filter(pl.col("id") == "h15").row(0, named=True)
    assert row["subject"] == "acme-corp:migration"
    assert row["status_value"] == "done"
    assert row["ts"] == parse_ts("2025-03-11T09:00:00Z")
    forget = frame.filter(pl.col("op") == "forget").row(0, named=True)
    assert (forget["target"], forget["reason"], forget["id"]) == ("h16", "incorrect", None)
    assert frame.filter(pl.col("op") == "store")["client_id"].value_counts(sort=True).rows() == [
        ("acme-corp", 14),
        ("globex", 4),
    ]


def test_queries_frame() -> None:
    frame = load_dataset(HANDMADE).queries_frame()
    assert frame.height == 10
    row = frame.filter(pl.col("qid") == "hq02").row(0, named=True)
    assert row["relevant"] == [{"id": "h02", "grade": 1}]
    assert row["stale"] == ["h14"]
    assert row["tags"] == ["temporal", "client:acme-corp"]
    assert row["at_time"] == parse_ts("2025-03-05T00:00:00Z")
    empty = Dataset(None, dict(META), [], []).queries_frame()
    assert empty.height == 0
    assert empty.schema["relevant"] == pl.List(pl.Struct({"id": pl.String, "grade": pl.Int64}))


# ---------------------------------------------------------------- never over a user's file

SHIPPED = Path(__file__).resolve().parents[2] / "datasets" / "agent-lifecycle"


def _files(root: Path) -> dict[str, bytes | str]:
    return {p.name: (f"-> {p.readlink()}" if p.is_symlink() else p.read_bytes())
            for p in sorted(root.iterdir()) if p.is_symlink() or p.is_file()}


def test_a_users_readme_in_a_dataset_directory_is_never_replaced(tmp_path: Path) -> None:
    out = tmp_path / "dsu"
    out.mkdir()
    (out / "dataset.toml").write_bytes((SHIPPED / "dataset.toml").read_bytes())
    (out / "README.md").write_text("MY OWN README\n")
    (out / "judgments.jsonl").write_text("j\n")
    before = _files(out)
    with pytest.raises(FileExistsError) as info:
        write_dataset(parts(), out, extra_files={"README.md": "# generated\n"})
    # the copied dataset.toml is not the one about to be written, and without the rest of a
    # dataset memlab wrote it proves nothing either
    assert str(info.value) == (
        f"{out}: holds README.md, dataset.toml, which memlab did not write (or which is not a "
        "plain file) and which the new dataset would overwrite; move it away first (nothing "
        "was written)"
    )
    assert _files(out) == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["dsu"]


def test_hand_written_dataset_files_are_not_replaced(tmp_path: Path) -> None:
    out = tmp_path / "mine"
    write_dataset(parts(), out)
    (out / ".memlab-output.json").unlink()  # a dataset as a user keeps it, no marker
    (out / "memories.jsonl").write_text('{"id": "a", "text": "my own data"}\n')
    before = _files(out)
    with pytest.raises(FileExistsError, match=r"holds memories.jsonl, which memlab did not"):
        write_dataset(parts(), out)
    assert _files(out) == before


def test_memlabs_files_are_replaced_until_a_user_edits_them(tmp_path: Path) -> None:
    out = tmp_path / "out"
    write_dataset(parts(), out, extra_files={"README.md": "v1\n"})
    marker = json.loads((out / ".memlab-output.json").read_text())
    assert marker["memlab"] == "dataset"
    assert marker["entries"] == ["README.md", "dataset.toml", "memories.jsonl", "queries.jsonl"]
    assert marker["sha256"]["README.md"] == hashlib.sha256(b"v1\n").hexdigest()
    meta, ops, queries = parts()
    write_dataset((meta, ops[:2], queries), out, extra_files={"README.md": "v2\n"})
    assert (out / "README.md").read_text() == "v2\n"
    write_dataset((meta, ops[:2], queries), out)  # README.md untouched, still memlab's
    assert "README.md" in json.loads((out / ".memlab-output.json").read_text())["entries"]
    write_dataset(parts(), out, extra_files={"README.md": "v3\n"})
    assert (out / "README.md").read_text() == "v3\n"
    (out / "README.md").write_text("v3 with my notes\n")  # now the user's
    before = _files(out)
    with pytest.raises(FileExistsError, match="holds README.md, which changed since memlab"):
        write_dataset(parts(), out, extra_files={"README.md": "v4\n"})
    assert _files(out) == before


def test_a_shipped_dataset_written_before_the_marker_is_regenerated(tmp_path: Path) -> None:
    import shutil

    from memlab.datasets.lifecycle import generate_lifecycle_dataset

    out = tmp_path / "agent-lifecycle"
    shutil.copytree(SHIPPED, out)
    before = _files(out)
    generate_lifecycle_dataset(7, out)  # same bytes: nothing is lost
    after = _files(out)
    assert {k: v for k, v in after.items() if k != ".memlab-output.json"} == before
    generate_lifecycle_dataset(8, out)  # memlab's now: another seed replaces them
    assert (out / "memories.jsonl").read_bytes() != before["memories.jsonl"]


def test_a_legacy_dataset_proves_its_files_by_their_bytes(tmp_path: Path) -> None:
    out = tmp_path / "out"
    write_dataset(parts(), out, extra_files={"README.md": "old\n"})
    (out / ".memlab-output.json").unlink()
    meta, ops, queries = parts()
    # the three dataset files read back to the same bytes: memlab's, replaced
    write_dataset((meta, ops[:2], queries), out)
    assert len(load_dataset(out).ops) == 2
    (out / ".memlab-output.json").unlink()
    # a README.md proves nothing by itself: only the very bytes to be written may stand
    with pytest.raises(FileExistsError, match="holds README.md"):
        write_dataset(parts(), out, extra_files={"README.md": "new\n"})
    write_dataset(parts(), out, extra_files={"README.md": "old\n"})


@pytest.mark.parametrize(
    ("make", "message"),
    [
        (lambda t: (t / "real").mkdir() or (t / "out").symlink_to("real"),
         "out: is a symbolic link (to real)"),
        (lambda t: (t / "out").write_text("x"), "out: exists and is not a directory"),
        (lambda t: (t / "f").write_text("x"), "f/out: " + "{t}/f is a file, not a directory"),
        (lambda t: ((t / "out").mkdir(), (t / "out" / ".memlab-output.json").write_text(
            '{"memlab": "experiment", "entries": ["metrics.json"]}')),
         "out: is a memlab experiment result, not a dataset"),
    ],
    ids=["symlink", "file", "below-a-file", "eval-result"],
)
def test_write_refuses_what_is_not_a_dataset_directory(tmp_path: Path, make, message) -> None:
    from memlab.datasets.format import check_dataset_out

    make(tmp_path)
    target = tmp_path / message.split(": ")[0]
    before = sorted(str(p) for p in tmp_path.rglob("*"))
    with pytest.raises(FileExistsError) as info:
        write_dataset(parts(), target)
    assert str(info.value).startswith(f"{tmp_path}/{message.format(t=tmp_path)}")
    with pytest.raises(FileExistsError):
        check_dataset_out(target)
    assert sorted(str(p) for p in tmp_path.rglob("*")) == before


def test_cli_generate_refuses_a_user_readme(tmp_path: Path, capsys) -> None:
    from memlab.cli import main

    out = tmp_path / "dsu"
    out.mkdir()
    (out / "dataset.toml").write_bytes((SHIPPED / "dataset.toml").read_bytes())
    (out / "README.md").write_text("MY OWN README\n")
    assert main(["datasets", "generate-lifecycle", "--seed", "7", str(out)]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"memlab: error: {out}: holds README.md, which memlab did not write")
    assert (out / "README.md").read_text() == "MY OWN README\n"
    assert sorted(p.name for p in out.iterdir()) == ["README.md", "dataset.toml"]


@pytest.mark.parametrize(
    ("src", "out", "message"),
    [
        ("data/memories.jsonl", "data", "data: holds the import's own source data/memories.jsonl"),
        ("data", "data", "data: holds the import's own source data"),
        ("data", "data/out", "data/out: lies inside the import's source directory data"),
    ],
    ids=["source-file-in-out", "same-directory", "out-in-source"],
)
def test_cli_import_never_writes_over_its_input(tmp_path: Path, monkeypatch, capsys, src, out,
                                                message) -> None:
    from memlab.cli import main

    monkeypatch.chdir(tmp_path)
    data = tmp_path / "data"
    data.mkdir()
    (data / "dataset.toml").write_bytes((SHIPPED / "dataset.toml").read_bytes())
    (data / "memories.jsonl").write_text(
        '{"type":"entity","name":"Acme","entityType":"org","observations":["uses Stripe"]}\n'
    )
    before = _files(data)
    code = main(["datasets", "import", "mcp-memory", src, out, "--option",
                 "ts=2026-03-01T00:00:00Z"])
    assert code == 2
    assert capsys.readouterr().err.startswith(f"memlab: error: {message}")
    assert _files(data) == before and sorted(p.name for p in tmp_path.iterdir()) == ["data"]


def test_a_dataset_error_survives_pickling_as_itself() -> None:
    import pickle

    from memlab.datasets.format import DatasetError
    from memlab.datasets.validate import Problem

    err = DatasetError("d", [Problem("memories.jsonl", 3, "ts", "is not a time")])
    back = pickle.loads(pickle.dumps(err))
    assert type(back) is DatasetError
    assert (str(back), back.path, back.problems) == (str(err), "d", err.problems)
