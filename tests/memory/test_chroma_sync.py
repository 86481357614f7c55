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
        assert store.chroma_backlog_rows().tolist() == [0, 1, 2, 3]  # the rows they belong to
        assert store._chroma.count() == 0  # nothing sent at commit
        store.flush_chroma()  # hands them over in the background, never blocks
        store.flush_chroma(wait=True)
        assert store.chroma_backlog == 0 and store.chroma_backlog_rows().tolist() == []
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


# Wall-clock times whose float does not survive chromadb's decimal round trip exactly: it comes
# back one unit in the last place away (chromadb parses its JSON text not correctly rounded).
WALL = (1795556812.1481655, 1795556812.3391023, 1694867473.8744655, 990870174.1838819)


def test_check_accepts_the_floats_chromadb_round_trips_and_reopening_keeps_them(tmp_path):
    path = tmp_path / "s"
    with MemoryStore(path) as store:
        ids = [store.store(f"note {i}", source_agent="a", now=t, embedding=unit(i)).id
               for i, t in enumerate(WALL)]
        store.flush_chroma(wait=True)
        got = store._chroma.get(ids)
        back = {mid: meta["created_at"] for mid, meta in zip(got["ids"], got["metadatas"],
                                                             strict=True)}
        assert [back[mid] for mid in ids] != list(WALL)  # chromadb did round them
        assert all(abs(back[mid] - t) <= 2 * np.spacing(t) for mid, t in zip(ids, WALL,
                                                                           strict=True))
        assert store.check() == []
    with MemoryStore(path, read_only=True) as store:
        assert store.check() == []


@pytest.mark.parametrize(
    ("key", "change", "shown"),
    [
        ("created_at", lambda v: v + 1e-6, "chromadb metadata 'created_at' is"),  # 1 µs
        ("valid_from", lambda v: v - 1.0, "chromadb metadata 'valid_from' is"),
        ("valid_to", lambda v: 1.0, "chromadb metadata 'valid_to' is 1.0, SQLite says 1e+300"),
        ("created_at", lambda v: int(v), "chromadb metadata 'created_at' is 1795556812, "),
        ("active", lambda v: False, "chromadb metadata 'active' is False, SQLite says True"),
        ("scope", lambda v: "agent:b", "chromadb metadata 'scope' is 'agent:b', SQLite says"),
    ],
)
def test_check_still_reports_a_real_metadata_mismatch(tmp_path, key, change, shown):
    path = tmp_path / "s"
    with MemoryStore(path) as store:
        mid = store.store("note", source_agent="a", now=WALL[0], embedding=unit(0)).id
        keep = store.store("other", source_agent="a", now=WALL[1], embedding=unit(1)).id
        store.flush_chroma(wait=True)
        meta = store._chroma.get([mid])["metadatas"][0]
        store._chroma.update_metadata([mid], [{**meta, key: change(meta[key])}])
        problems = store.check()
        assert len(problems) == 1
        assert problems[0].startswith(f"memory {mid}: {shown}")
        assert keep not in problems[0]
