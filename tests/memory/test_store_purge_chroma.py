"""A purge and chromadb: the purged memory's vector leaves chromadb after the commit, never
before; a chromadb failure never fails the purge; what chromadb still holds of a purged memory
(a session without chromadb, a failed delete, a process killed after the commit) is reported by
``check`` and deleted by the next writable open."""

from __future__ import annotations

from pathlib import Path

import pytest

from memlab.cli import main
from memlab.embed import HashingEmbedder
from memlab.memory.store import MemoryStore

T0 = 1_767_225_600.0
LATER = T0 + 40 * 86_400.0


def _seed(path: Path) -> tuple[str, str]:
    with MemoryStore(path, embedder=HashingEmbedder()) as store:
        gone = store.store("alpha plan for the launch", source_agent="a", now=T0).id
        kept = store.store("beta note about the office", source_agent="a", now=T0).id
        store.forget(gone, "obsolete", now=T0 + 1)
        assert sorted(store.chroma_index().ids()) == sorted([gone, kept])
    return gone, kept


def test_a_purge_without_chromadb_is_finished_by_the_next_open(tmp_path, capsys) -> None:
    path = tmp_path / "s"
    gone, kept = _seed(path)
    with MemoryStore(path, embedder=HashingEmbedder(), chroma=False) as store:
        assert store.purge_forgotten(now=LATER) == [gone]
    assert main(["store", "check", str(path)]) == 1
    assert capsys.readouterr().out.splitlines() == [
        f"memory {gone}: purged in SQLite (its content erased), its vector still in chromadb "
        "(the next writable open deletes it)",
        "2 memories, 1 problem(s)",
    ]
    with MemoryStore(path, embedder=HashingEmbedder()) as store:
        assert store.chroma_index().ids() == [kept]
        assert store.check() == []
    assert main(["store", "check", str(path)]) == 0
    assert capsys.readouterr().out.splitlines() == ["2 memories, 0 problem(s)"]


def test_a_chromadb_failure_does_not_fail_the_purge(tmp_path, caplog) -> None:
    path = tmp_path / "s"
    gone, kept = _seed(path)
    with MemoryStore(path, embedder=HashingEmbedder()) as store:
        def broken(ids: list[str]) -> None:
            raise RuntimeError("disk I/O error")

        store._chroma.delete = broken
        assert store.purge_forgotten(now=LATER) == [gone]
        assert store.get(gone).purged_at == LATER
        assert store.get(gone).text == ""
    assert (
        "chromadb delete of 1 purged id(s) failed (RuntimeError: disk I/O error); the next "
        "open deletes them"
    ) in caplog.messages
    with MemoryStore(path, embedder=HashingEmbedder()) as store:
        assert store.get(gone).purged_at == LATER
        assert store.chroma_index().ids() == [kept]
        assert store.check() == []


def test_chromadb_is_not_touched_before_the_purge_commits(tmp_path) -> None:
    path = tmp_path / "s"
    gone, kept = _seed(path)
    with MemoryStore(path, embedder=HashingEmbedder()) as store:
        with pytest.raises(RuntimeError, match="^stop$"), store.batch():
            store.purge(gone, now=LATER)
            assert sorted(store._chroma.ids()) == sorted([gone, kept])  # nothing sent yet
            raise RuntimeError("stop")
        assert store.get(gone).purged_at is None  # rolled back, vector and all
        assert sorted(store._chroma.ids()) == sorted([gone, kept])
        assert store.check() == []
        store.purge(gone, now=LATER)
        assert store._chroma.ids() == [kept]
        assert store.check() == []
