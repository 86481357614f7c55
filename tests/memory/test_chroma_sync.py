"""``chroma_sync="deferred"``: chromadb gets committed vectors only when asked, never loses one."""

from __future__ import annotations

import numpy as np
import pytest

from memlab.memory.records import MemoryInputError
from memlab.memory.store import MemoryStore

T0 = 1_767_225_600.0


def unit(i: int, dim: int = 8) -> np.ndarray:
    v = np.zeros(dim, dtype=np.float32)
    v[i % dim] = 1.0
    v[(i + 3) % dim] = 0.5
    return v / np.linalg.norm(v)


def test_deferred_vectors_wait_for_a_flush_then_all_arrive(tmp_path):
    with MemoryStore(tmp_path / "s", chroma_sync="deferred") as store:
        with store.batch():
            ids = [store.store(f"note {i}", source_agent="a", now=T0 + i, embedding=unit(i)).id
                   for i in range(3)]
        later = store.store("note 3", source_agent="a", now=T0 + 3, embedding=unit(3)).id
        assert store.chroma_backlog == 4
        assert store._chroma.count() == 0  # nothing sent at commit
        store.flush_chroma()  # hands them over in the background, never blocks
        store.flush_chroma(wait=True)
        assert store.chroma_backlog == 0
        assert sorted(store._chroma.ids()) == sorted([*ids, later])
        store.store("note 4", source_agent="a", now=T0 + 4, embedding=unit(4))
        assert store.chroma_backlog == 1
        assert store.chroma_index().count() == 5  # a chromadb read sends the rest first
        assert store.check() == []


def test_close_sends_the_backlog_and_a_killed_writer_is_repaired_on_open(tmp_path):
    path = tmp_path / "s"
    with MemoryStore(path, chroma_sync="deferred") as store:
        first = store.store("kept at close", source_agent="a", now=T0, embedding=unit(0)).id
    with MemoryStore(path, chroma_sync="deferred") as store:
        assert store._chroma.ids() == [first]
        second = store.store("never sent", source_agent="a", now=T0 + 1, embedding=unit(1)).id
        store._release()  # the process dies: no flush, the lock goes with it
    with MemoryStore(path, chroma_sync="deferred") as store:
        assert sorted(store._chroma.ids()) == sorted([first, second])
        assert store.check() == []


def test_chroma_sync_is_checked():
    with pytest.raises(MemoryInputError, match="field 'chroma_sync'"):
        MemoryStore(chroma_sync="later")


def test_a_purge_waits_for_the_upsert_in_flight(tmp_path, monkeypatch):
    """The memory's vector is on its way to chromadb when the purge deletes it: the upsert
    lands first, then the delete, so chromadb never holds a purged vector again."""
    import threading

    from memlab.memory.vectors import ChromaIndex

    release = threading.Event()
    upsert = ChromaIndex.upsert

    def slow_upsert(self, *args, **kwargs):
        release.wait(timeout=10)  # held until the purge has started
        return upsert(self, *args, **kwargs)

    with MemoryStore(tmp_path / "s", chroma_sync="deferred") as store:
        mid = store.store("Acme's card ends 4242", source_agent="a", now=T0,
                          embedding=unit(0)).id
        store.forget(mid, "asked to", now=T0 + 1)
        monkeypatch.setattr(ChromaIndex, "upsert", slow_upsert)
        store.flush_chroma()  # the upsert is in flight, blocked
        assert store.chroma_backlog == 1
        threading.Timer(0.2, release.set).start()
        store.purge(mid, now=T0 + 2)
        assert store.chroma_backlog == 0
        assert store._chroma.ids() == []
        assert store.check() == []
