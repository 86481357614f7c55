"""Creating a store is all or nothing: a process killed at any point of a new store's first
transactions leaves either no ``memlab.sqlite3`` or a complete one, and the store opens
afterwards. Nothing memlab did not write is ever written over."""

from __future__ import annotations

import os
import sqlite3
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from memlab.memory.records import StoreError, StoreWriteError
from memlab.memory.store import MemoryStore

from .conftest import FaultyConnection

T0 = 1_767_225_600.0
ENV = {**os.environ, "ANONYMIZED_TELEMETRY": "False"}

# The child opens a new store and dies (os._exit, as SIGKILL would: no cleanup runs) at the
# point named by argv[2]: the statement it is about to run, or the one it has just run.
KILLER = textwrap.dedent(
    """
    import os
    import sys

    from memlab.memory.store import MemoryStore

    path, when = sys.argv[1], sys.argv[2]
    opened = False
    connect = MemoryStore._connect


    class Dying:
        def __init__(self, db):
            self.db = db

        def execute(self, sql, params=()):
            head = " ".join(sql.split()[:2]).upper()
            phase = "first-write " if opened else ""
            if when == f"before {phase}{head}":
                os._exit(9)
            out = self.db.execute(sql, params)
            if when == f"after {phase}{head}":
                os._exit(9)
            return out

        def __getattr__(self, name):
            return getattr(self.db, name)


    def dying_connect(self, target, *, uri=False):
        db = connect(self, target, uri=uri)
        if when == "connected":
            os._exit(9)
        return Dying(db)


    MemoryStore._connect = dying_connect
    store = MemoryStore(path, chroma=False)
    opened = True
    store.store("the first memory", source_agent="a", now=float(sys.argv[3]))
    store.close()
    print("SURVIVED", flush=True)
    """
)

# (where the child dies, how many memories the store holds afterwards)
KILL_POINTS = [
    ("connected", 0),  # the database file was just opened
    ("before PRAGMA JOURNAL_MODE=WAL", 0),
    ("before CREATE TABLE", 0),  # the schema's transaction has begun
    ("before CREATE INDEX", 0),  # half of the schema written
    ("before COMMIT", 0),  # the schema, uncommitted
    ("after COMMIT", 0),  # the schema, committed
    ("before first-write COMMIT", 0),
    ("after first-write COMMIT", 1),
]


def _listing(path: Path) -> dict[str, int]:
    return {p.name: p.stat().st_size for p in sorted(path.iterdir())}


def test_a_store_killed_while_it_is_created_is_absent_or_complete(tmp_path) -> None:
    script = tmp_path / "killer.py"
    script.write_text(KILLER)
    wrong = []
    for n, (when, expected) in enumerate(KILL_POINTS):
        path = tmp_path / f"s{n}"
        proc = subprocess.run(
            [sys.executable, str(script), str(path), when, str(T0)],
            capture_output=True,
            text=True,
            env=ENV,
            timeout=300,
        )
        assert proc.returncode == 9, (when, proc.stdout, proc.stderr)
        files = _listing(path)
        # never a partial memlab.sqlite3: none, or one that opens with every table
        if files.get("memlab.sqlite3") == 0:
            wrong.append((when, "a 0-byte memlab.sqlite3"))
            continue
        try:
            with MemoryStore(path, chroma=False) as store:
                if len(store) != expected or store.check() != []:
                    wrong.append((when, len(store), store.check()))
                store.store("written after the crash", source_agent="b", now=T0 + 1)
            with MemoryStore(path, read_only=True) as again:
                assert again.texts[-1] == "written after the crash"
                assert again.check() == []
        except StoreError as exc:
            wrong.append((when, str(exc)))
    assert wrong == []


def test_creating_a_store_never_writes_over_a_file_that_appears_meanwhile(
    tmp_path, monkeypatch
) -> None:
    path = tmp_path / "s"
    db_file = path / "memlab.sqlite3"
    connect = MemoryStore._connect

    def someone_else_creates_it(self, target, *, uri=False):
        db_file.write_bytes(b"")  # another program's (empty) file takes the name
        return connect(self, target, uri=uri)

    monkeypatch.setattr(MemoryStore, "_connect", someone_else_creates_it)
    with pytest.raises(StoreError) as info:
        MemoryStore(path, chroma=False)
    assert str(info.value) == (
        f"{db_file}: a file appeared there while the store was being created (not memlab's: "
        "memlab holds the store lock); nothing was overwritten"
    )
    assert _listing(path) == {"memlab.lock": 0, "memlab.sqlite3": 0}


def test_a_dangling_symbolic_link_is_refused_and_its_target_not_created(tmp_path) -> None:
    path = tmp_path / "s"
    path.mkdir()
    target = tmp_path / "elsewhere.sqlite3"
    (path / "memlab.sqlite3").symlink_to(target)
    with pytest.raises(StoreError, match="a symbolic link to nothing, not a memlab store"):
        MemoryStore(path, chroma=False)
    assert not target.exists()
    assert (path / "memlab.sqlite3").is_symlink()


def test_a_failed_creation_leaves_no_database_behind(tmp_path, monkeypatch) -> None:
    path = tmp_path / "s"
    connect = MemoryStore._connect
    for fail_at in (1, 2, 9):  # the first table, the index, the schema's commit

        def full_disk(self, target, *, uri=False, fail_at=fail_at):
            return FaultyConnection(connect(self, target, uri=uri), fail_at)

        monkeypatch.setattr(MemoryStore, "_connect", full_disk)
        with pytest.raises(StoreWriteError) as info:
            MemoryStore(path, chroma=False)
        assert str(info.value).endswith("(database or disk is full)")
        assert str(info.value).startswith(f"{path / 'memlab.sqlite3'}: cannot ")
        assert _listing(path) == {"memlab.lock": 0}
    monkeypatch.setattr(MemoryStore, "_connect", connect)
    with MemoryStore(path, chroma=False) as store:
        store.store("first", source_agent="a", now=T0)
    with sqlite3.connect(path / "memlab.sqlite3") as db:
        names = {r[0] for r in db.execute("SELECT name FROM sqlite_master WHERE type='table'")}
    assert {"memories", "versions", "entities", "meta", "relation_scopes"} <= names


def test_store_check_notes_a_file_an_interrupted_creation_left(tmp_path, capsys) -> None:
    from memlab.cli import main

    path = tmp_path / "s"
    with MemoryStore(path, chroma=False) as store:
        store.store("kept", source_agent="a", now=T0)
    left = path / "memlab.sqlite3.creating-4242-0a1b2c3d"
    left.write_bytes(b"")  # as a creation killed before its link leaves it
    with MemoryStore(path, read_only=True) as store:
        assert store.check() == []
        assert store.check_notes == [
            "memlab.sqlite3.creating-4242-0a1b2c3d: left by a store creation that was "
            "interrupted (it holds no memory); remove it unless a store is being created here "
            "now"
        ]
    assert main(["store", "check", str(path)]) == 0
    out = capsys.readouterr().out
    assert "note: memlab.sqlite3.creating-4242-0a1b2c3d: left by a store creation" in out
    assert out.endswith("1 memories, 0 problem(s)\n")
    assert left.exists()  # never deleted
