"""A damaged store is refused with one clear error; repair never destroys the surviving side;
``memlab store check`` never writes; reopening reconciles chromadb's metadata, not only ids."""

import hashlib
import os
import sqlite3

import numpy as np
import pytest

from memlab.cli import main
from memlab.memory.records import StoreCorruptError, StoreError, StoreWriteError
from memlab.memory.store import MemoryStore
from memlab.memory.vectors import ChromaIndex

from .conftest import FaultyConnection

T0 = 1_767_225_600.0


def unit(i, dim=8):
    v = np.zeros(dim, dtype=np.float32)
    v[i % dim] = 1.0
    v[(i + 3) % dim] = 0.5
    return v / np.linalg.norm(v)


def make_store(path, n=4, **kwargs):
    with MemoryStore(path, **kwargs) as store:
        ids = [
            store.store(
                f"Memory number {i} about Acme and PostgreSQL",
                source_agent="a",
                client_id="acme",
                now=T0 + i,
                embedding=unit(i),
            ).id
            for i in range(n)
        ]
    return ids


def chroma_ids(path):
    return sorted(ChromaIndex(path / "chroma", create=False).ids())


def tree(path):
    """Every file and directory under ``path`` with its size, mtime and content hash."""
    out = {}
    for root, dirs, files in os.walk(path):
        for name in dirs + files:
            p = os.path.join(root, name)
            st = os.stat(p)
            digest = None
            if os.path.isfile(p):
                with open(p, "rb") as fh:
                    digest = hashlib.sha256(fh.read()).hexdigest()
            out[p] = (st.st_size, st.st_mtime_ns, digest)
    return out


def one_line_error(capsys, argv):
    assert main(argv) == 2
    captured = capsys.readouterr()
    lines = captured.err.strip().splitlines()
    assert len(lines) == 1, captured.err
    assert lines[0].startswith("memlab: error: ")
    return lines[0]


DAMAGE = {
    "zero-bytes": lambda f: f.write_bytes(b""),
    "garbage": lambda f: f.write_bytes(b"not a database at all " * 200),
    "truncated": lambda f: f.write_bytes(f.read_bytes()[: len(f.read_bytes()) // 2]),
    "foreign": lambda f: (
        f.unlink(),
        sqlite3.connect(f)
        .executescript("CREATE TABLE notes (x TEXT); INSERT INTO notes VALUES ('mine');")
        .close(),
    ),
    "bad-payload": lambda f: _sql(f, "UPDATE memories SET payload = '{not json' WHERE idx = 1"),
    "gap": lambda f: _sql(f, "DELETE FROM memories WHERE idx = 1"),
}


def _sql(f, statement):
    db = sqlite3.connect(f)
    db.execute(statement)
    db.commit()
    db.close()


@pytest.mark.parametrize("name", sorted(DAMAGE))
def test_damaged_sqlite_is_refused_and_nothing_is_destroyed(tmp_path, capsys, name):
    path = tmp_path / "s"
    ids = make_store(path)
    db_file = path / "memlab.sqlite3"
    DAMAGE[name](db_file)
    before = tree(path)
    with pytest.raises(StoreCorruptError) as info:
        MemoryStore(path)
    message = str(info.value)
    assert message.startswith(str(db_file))
    assert "Memory number" not in message

    # nothing changed: SQLite file as it was, every chromadb vector still there
    def kept(t):
        return {k: v for k, v in t.items() if "chroma" not in k and not k.endswith(".lock")}

    assert kept(tree(path)) == kept(before)
    assert chroma_ids(path) == sorted(ids)
    if name == "bad-payload":  # a damaged row: check lists it (row, what), naming no text
        assert main(["store", "check", str(path)]) == 1
        out = capsys.readouterr().out
        assert out.splitlines()[0] == (
            "memlab.sqlite3 row 1: payload is not JSON (Expecting property name enclosed in "
            "double quotes at character 1)"
        )
        assert out.splitlines()[-1] == "4 memories, 1 problem(s)"
    else:
        line = one_line_error(capsys, ["store", "check", str(path)])
        assert str(db_file) in line and "Memory number" not in line
    line = one_line_error(
        capsys, ["store", "consolidate", str(path), "--embedder", "hashing", "--no-cache"]
    )
    assert str(db_file) in line
    assert chroma_ids(path) == sorted(ids)


def test_a_sqlite_database_without_tables_is_refused_not_made_a_store(tmp_path):
    """memlab creates a store's file with its tables in it, so a database without them (left by
    an older memlab killed while creating a store, or by any other program) is not a store:
    refused with one error, never written to."""
    path = tmp_path / "s"
    path.mkdir()
    db = sqlite3.connect(path / "memlab.sqlite3")
    db.execute("PRAGMA journal_mode=WAL")
    db.close()
    before = (path / "memlab.sqlite3").read_bytes()
    assert len(before) > 0
    for read_only in (False, True):
        with pytest.raises(StoreCorruptError) as info:
            MemoryStore(path, read_only=read_only)
        assert str(info.value) == (
            f"{path / 'memlab.sqlite3'}: a SQLite database without tables, not a memlab store; "
            "nothing was changed (a store whose creation was interrupted by an older memlab "
            "looks like this: move the file away to start a new store)"
        )
        assert (path / "memlab.sqlite3").read_bytes() == before
    (path / "memlab.sqlite3").rename(path / "moved-away.sqlite3")
    with MemoryStore(path) as store:
        store.store("first", source_agent="a", now=T0, embedding=unit(0))
    with MemoryStore(path) as store:
        assert len(store) == 1


def test_repair_quarantines_ids_sqlite_lost_and_never_serves_them(tmp_path):
    from memlab.memory.store import DB_NAME

    path = tmp_path / "s"
    ids = make_store(path, n=3)
    backup = (path / DB_NAME).read_bytes()
    with MemoryStore(path) as store:
        later = store.store(
            "Written after the backup",
            source_agent="a",
            client_id="acme",
            now=T0 + 10,
            embedding=unit(5),
        ).id
    (path / DB_NAME).write_bytes(backup)  # SQLite restored from an older copy
    with MemoryStore(path) as store:
        assert len(store) == 3
        assert sorted(store._chroma.ids()) == sorted([*ids, later])  # nothing deleted
        assert store.check() == [
            f"memory {later}: in chromadb, missing from SQLite (quarantined: hidden from searches)"
        ]
        for where in (
            store.chroma_where(),
            store.chroma_where(include_superseded=True),
            store.chroma_where(at_time=T0 + 20, client_id="acme"),
        ):
            hits = store._chroma.query(unit(5), 10, where=where)
            assert later not in [mid for mid, _ in hits]
            assert len(hits) == 3


def test_reopen_reconciles_metadata_left_stale_by_a_session_without_chromadb(tmp_path):
    path = tmp_path / "s"
    ids = make_store(path)
    with MemoryStore(path, chroma=False) as store:
        store.forget(ids[0], "asked to", now=T0 + 10)
        store.store(
            "Acme runs MySQL",
            "fact",
            key="db",
            client_id="acme",
            source_agent="a",
            now=T0 + 11,
            embedding=unit(6),
        )
    with MemoryStore(path, repair=False) as stale:
        problems = stale.check()
        assert f"memory {ids[0]}: chromadb metadata 'active' is True, SQLite says False" in (
            problems
        )
    with MemoryStore(path) as store:
        assert store.check() == []
        meta = store._chroma.get([ids[0]])["metadatas"][0]
        assert (meta["active"], meta["forgotten"]) == (False, True)
        hits = store._chroma.query(unit(0), 10, where=store.chroma_where())
        assert ids[0] not in [mid for mid, _ in hits]


def test_reopen_rewrites_a_vector_that_differs(tmp_path):
    path = tmp_path / "s"
    ids = make_store(path)
    with MemoryStore(path) as store:
        store._chroma.upsert([ids[1]], unit(7)[None, :], [store._chroma_meta(1)])
    with MemoryStore(path) as store:
        assert store.check() == []
        np.testing.assert_allclose(store._chroma.get([ids[1]])["embeddings"][0], unit(1), atol=1e-6)


def test_store_check_never_writes(tmp_path, capsys):
    path = tmp_path / "s"
    make_store(path)
    before = tree(path)
    assert main(["store", "check", str(path)]) == 0
    assert capsys.readouterr().out.strip() == "4 memories, 0 problem(s)"
    assert tree(path) == before
    # a missing store is reported, and not created
    assert main(["store", "check", str(tmp_path / "nothing")]) == 2
    assert not (tmp_path / "nothing").exists()
    with pytest.raises(StoreError, match="not a memlab store"):
        MemoryStore(tmp_path / "nothing", read_only=True)
    assert not (tmp_path / "nothing").exists()


def test_store_check_reads_through_a_live_writer_without_writing(tmp_path, capsys):
    path = tmp_path / "s"
    make_store(path)
    with MemoryStore(path) as writer:
        writer.store("Written by the live writer", source_agent="a", now=T0 + 9, embedding=unit(6))
        before = tree(path)
        assert main(["store", "check", str(path)]) == 0
        assert capsys.readouterr().out.strip() == "5 memories, 0 problem(s)"
        after = tree(path)
        shm = str(path / "memlab.sqlite3-shm")  # SQLite's shared-memory index of the log
        assert {k: v for k, v in after.items() if k != shm} == {
            k: v for k, v in before.items() if k != shm
        }


def test_read_only_store_refuses_writes(tmp_path):
    path = tmp_path / "s"
    ids = make_store(path)
    with MemoryStore(path, read_only=True) as store:
        assert len(store) == 4 and store.check() == []
        with pytest.raises(StoreWriteError, match="read-only"):
            store.forget(ids[0], "no")
        with pytest.raises(StoreWriteError, match="read-only"):
            store.store("new", source_agent="a", now=T0, embedding=unit(0))
        assert store.get(ids[0]).active


def test_a_store_path_that_is_a_file_is_refused(tmp_path):
    target = tmp_path / "file"
    target.write_text("mine")
    with pytest.raises(StoreError, match="not a directory"):
        MemoryStore(target)
    assert target.read_text() == "mine"


def test_cli_consolidate_on_a_full_disk_prints_one_line_and_changes_nothing(
    tmp_path, capsys, monkeypatch
):
    path = tmp_path / "s"
    ids = make_store(path, chroma=False)
    connect = MemoryStore._connect

    def faulty(self, target, *, uri=False):
        return FaultyConnection(connect(self, target, uri=uri), 1)

    monkeypatch.setattr(MemoryStore, "_connect", faulty)
    line = one_line_error(
        capsys,
        [
            "store",
            "consolidate",
            str(path),
            "--embedder",
            "hashing",
            "--no-cache",
            "--now",
            "2026-03-01T00:00:00Z",
        ],
    )
    assert line == (
        f"memlab: error: {path / 'memlab.sqlite3'}: cannot write to the store "
        "(database or disk is full)"
    )
    monkeypatch.setattr(MemoryStore, "_connect", connect)
    with MemoryStore(path, chroma=False) as store:
        assert not any(store.get(i).consolidated for i in ids)


def test_cli_consolidate_on_a_read_only_database_prints_one_line(tmp_path, capsys, monkeypatch):
    path = tmp_path / "s"
    make_store(path, chroma=False)
    connect = MemoryStore._connect

    def read_only(self, target, *, uri=False):
        return connect(
            self,
            f"{os.fspath(target)}?mode=ro" if uri else "file:" + os.fspath(target) + "?mode=ro",
            uri=True,
        )

    monkeypatch.setattr(MemoryStore, "_connect", read_only)
    line = one_line_error(
        capsys, ["store", "consolidate", str(path), "--embedder", "hashing", "--no-cache"]
    )
    assert line.startswith(f"memlab: error: {path / 'memlab.sqlite3'}: cannot write")
    assert "readonly" in line and "Memory number" not in line


def test_a_lock_file_that_cannot_be_created_is_one_clear_error(tmp_path, monkeypatch):
    import filelock

    def refuse(self, *args, **kwargs):
        raise PermissionError(13, "Permission denied", str(self.lock_file))

    monkeypatch.setattr(filelock.FileLock, "acquire", refuse)
    with pytest.raises(StoreWriteError, match="memlab.lock: cannot take the store lock"):
        MemoryStore(tmp_path / "s")


def test_only_a_damaged_file_is_called_corrupt(tmp_path):
    import sqlite3

    from memlab.memory.sqlite_io import is_corruption

    garbage = tmp_path / "garbage.db"
    garbage.write_bytes(b"x" * 4096)
    with pytest.raises(sqlite3.DatabaseError) as notadb:
        sqlite3.connect(garbage).execute("SELECT 1 FROM sqlite_master")
    with pytest.raises(sqlite3.OperationalError) as cantopen:
        sqlite3.connect(f"file:{tmp_path / 'none' / 'x.db'}?mode=ro", uri=True)
    assert (notadb.value.sqlite_errorcode, cantopen.value.sqlite_errorcode) == (26, 14)
    assert is_corruption(notadb.value) and not is_corruption(cantopen.value)
    assert is_corruption(sqlite3.DatabaseError("no code"))  # as SQLite raised it before 3.11
    assert not is_corruption(ValueError("x"))


def test_a_store_the_disk_cannot_serve_is_not_called_corrupt(tmp_path, monkeypatch):
    # A full disk: SQLite cannot make the -shm file, and the read fails with an I/O error
    import sqlite3

    from memlab.memory.records import StoreCorruptError, StoreWriteError

    with MemoryStore(tmp_path / "s") as store:
        store.store("Acme runs on Postgres", "fact", key="db", source_agent="a", now=0.0)
    try:
        sqlite3.connect(f"file:{tmp_path / 'none' / 'x.db'}?mode=ro", uri=True)
    except sqlite3.OperationalError as exc:
        failure = exc

    def fail(self):
        raise failure

    monkeypatch.setattr(MemoryStore, "_load_rows", fail)
    with pytest.raises(StoreWriteError, match=(
        r"memlab.sqlite3: cannot open the store \(unable to open database file\): the file "
        r"system may be full, read-only or failing; the store was not found damaged"
    )) as refused:
        MemoryStore(tmp_path / "s")
    assert not isinstance(refused.value, StoreCorruptError)
    monkeypatch.undo()
    with MemoryStore(tmp_path / "s") as again:
        assert len(again) == 1 and again.check() == []
