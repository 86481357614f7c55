"""Tests for memlab.memory.wal: logs that SQLite would drop committed writes from are refused.

The logs are SQLite's own: a connection in WAL mode with automatic checkpoints off writes
them, and a copy taken while it is open is the log a writer killed at that moment leaves.
"""

from __future__ import annotations

import shutil
import sqlite3
from pathlib import Path

import pytest

from memlab.embed.hashing import HashingEmbedder
from memlab.memory.records import StoreCorruptError
from memlab.memory.store import MemoryStore
from memlab.memory.wal import (
    FRAME_HEADER,
    WAL_HEADER,
    _frames,
    _powers,
    side_file_problem,
    wal_checksum,
    wal_problem,
)

T0 = 1_767_225_600.0


def crashed_log(tmp_path: Path, transactions: int = 30) -> tuple[Path, bytes]:
    """A database and its un-checkpointed log, as a writer killed after ``transactions``
    commits leaves them; returns the copy's database path and the log's bytes."""
    live = tmp_path / "live"
    live.mkdir()
    db = sqlite3.connect(live / "a.db", isolation_level=None)
    db.execute("PRAGMA journal_mode=WAL")
    db.execute("PRAGMA wal_autocheckpoint=0")
    db.execute("CREATE TABLE t (x TEXT)")
    for i in range(transactions):
        db.execute("INSERT INTO t VALUES (?)", (f"row {i} " * 40,))
    copy = tmp_path / "copy"
    copy.mkdir()
    shutil.copy(live / "a.db", copy / "a.db")
    shutil.copy(live / "a.db-wal", copy / "a.db-wal")
    db.close()
    return copy / "a.db", (copy / "a.db-wal").read_bytes()


def frame_fields(log: bytes) -> list[tuple[int, ...]]:
    """Every whole frame's six header words, read with int.from_bytes."""
    page = int.from_bytes(log[8:12], "big")
    n = (len(log) - WAL_HEADER) // (FRAME_HEADER + page)
    out = []
    for k in range(n):
        o = WAL_HEADER + k * (FRAME_HEADER + page)
        out.append(tuple(int.from_bytes(log[o + i:o + i + 4], "big") for i in range(0, 24, 4)))
    return out


def test_checksum_arithmetic() -> None:
    # s0 += x0 + s1; s1 += x1 + s0, word pair by word pair
    words = (1, 2, 3, 4)
    little = b"".join(w.to_bytes(4, "little") for w in words)
    big = b"".join(w.to_bytes(4, "big") for w in words)
    s0 = 0 + 1 + 0
    s1 = 0 + 2 + s0
    want = (s0 + 3 + s1, s1 + 4 + (s0 + 3 + s1))
    assert want == (7, 14)
    assert wal_checksum(little, big_endian=False) == want
    assert wal_checksum(big, big_endian=True) == want
    assert wal_checksum(little[:8], False, seed=(10, 20)) == (10 + 1 + 20, 20 + 2 + 31)
    top = (0xFFFFFFFF).to_bytes(4, "little")
    assert wal_checksum(top + top, False) == (0xFFFFFFFF, (0xFFFFFFFF * 2) & 0xFFFFFFFF)


def test_sqlite_log_checks_out_frame_by_frame(tmp_path: Path) -> None:
    db_file, log = crashed_log(tmp_path)
    page = int.from_bytes(log[8:12], "big")
    big = log[3] == 0x83
    fields = frame_fields(log)
    assert len(fields) > 30
    state = wal_checksum(log[:24], big)
    assert state == (int.from_bytes(log[24:28], "big"), int.from_bytes(log[28:32], "big"))
    got_fields, offsets = _frames(db_file.with_name("a.db-wal"), len(fields), page, big,
                                  _powers((8 + page) // 8))
    assert got_fields.tolist() == [list(f) for f in fields]
    for k, f in enumerate(fields):
        o = WAL_HEADER + k * (FRAME_HEADER + page)
        body = log[o:o + 8] + log[o + FRAME_HEADER:o + FRAME_HEADER + page]
        state = wal_checksum(body, big, state)
        assert state == (f[4], f[5])  # SQLite's stored checksum: the reference agrees
        assert wal_checksum(body, big) == tuple(int(v) for v in offsets[k])
    assert wal_problem(db_file.with_name("a.db-wal")) is None


def _middle_of_frame(log: bytes) -> tuple[int, int]:
    """Damage 16 bytes inside the page of the middle frame: its index, and the byte."""
    page = int.from_bytes(log[8:12], "big")
    k = len(frame_fields(log)) // 2
    return k, WAL_HEADER + k * (FRAME_HEADER + page) + FRAME_HEADER + 100


@pytest.mark.parametrize("where", ["frame", "header salt"])
def test_damage_before_committed_frames_is_found(tmp_path: Path, where: str) -> None:
    db_file, log = crashed_log(tmp_path)
    wal = db_file.with_name("a.db-wal")
    fields = frame_fields(log)
    damaged = bytearray(log)
    if where == "frame":
        k, at = _middle_of_frame(log)
        damaged[at:at + 16] = b"\xff" * 16
        first, bad = k + 1, f"frame {k + 1}"
    else:
        damaged[20] ^= 1  # salt-2: no frame matches the header any more
        first, bad = 0, "its header"
    wal.write_bytes(bytes(damaged))
    commit = next(j for j in range(first, len(fields)) if fields[j][1] != 0)
    assert wal_problem(wal) == (
        f"is damaged: {bad} fails its checksum, and committed frames after it "
        f"(frame {commit + 1} of {len(fields)}) would be lost if SQLite opened it"
    )


def test_normal_logs_pass(tmp_path: Path) -> None:
    db_file, log = crashed_log(tmp_path)
    wal = db_file.with_name("a.db-wal")
    wal.write_bytes(log[:-100])  # a crash cut the last frame short: it was never committed
    assert wal_problem(wal) is None
    damaged = bytearray(log)
    damaged[-50:-40] = bytes(10)  # the last frame: indistinguishable from a torn one
    wal.write_bytes(bytes(damaged))
    assert wal_problem(wal) is None
    for short in (b"", log[:31], log[:WAL_HEADER]):  # no frame to lose
        wal.write_bytes(short)
        assert wal_problem(wal) is None
    # an earlier generation of frames (other salts) after the current ones is normal
    page = int.from_bytes(log[8:12], "big")
    frame = FRAME_HEADER + page
    old = bytearray(log[WAL_HEADER:WAL_HEADER + 3 * frame])
    for f in range(3):
        old[f * frame + 8] ^= 1  # salt-1 of an older log
    wal.write_bytes(log + bytes(old))
    assert wal_problem(wal) is None


def test_not_a_log(tmp_path: Path) -> None:
    db_file, log = crashed_log(tmp_path, transactions=2)
    wal = db_file.with_name("a.db-wal")
    wal.write_bytes(b"not a log " * 20)
    assert wal_problem(wal) == (
        "is not a SQLite write-ahead log (its header's magic number is wrong)"
    )
    wal.write_bytes(log[:4] + (3007001).to_bytes(4, "big") + log[8:])
    assert wal_problem(wal) == "is not a write-ahead log this SQLite reads (version 3007001)"
    wal.write_bytes(log[:8] + (1000).to_bytes(4, "big") + log[12:])
    assert wal_problem(wal) == "is damaged: its header gives page size 1000"


def test_side_files(tmp_path: Path) -> None:
    db_file = tmp_path / "memlab.sqlite3"
    db_file.write_bytes(b"x")
    assert side_file_problem(db_file) is None
    shm = tmp_path / "memlab.sqlite3-shm"
    shm.write_bytes(bytes(64))  # a new index: zeros
    assert side_file_problem(db_file) is None
    shm.write_bytes(b"garbage!" * 8)
    assert side_file_problem(db_file) == (
        shm, "is not SQLite's index of a write-ahead log (SQLite would overwrite and delete it)"
    )
    shm.unlink()
    (tmp_path / "memlab.sqlite3-wal").mkdir()
    assert side_file_problem(db_file) == (tmp_path / "memlab.sqlite3-wal", "is not a regular file")
    journal = tmp_path / "memlab.sqlite3-journal"
    journal.write_bytes(b"")
    path, what = side_file_problem(db_file)
    assert path == journal and what.startswith("is a rollback journal")


def _killed_store(tmp_path: Path) -> tuple[Path, int]:
    """A store whose writer was killed after committing 12 memories (its files copied while it
    was open), and the size of one log frame."""
    live = tmp_path / "live"
    store = MemoryStore(live, embedder=HashingEmbedder(dim=16, seed=0), chroma=False)
    for i in range(12):
        store.store(f"memory number {i} about the deploy", "event", now=T0 + i, id=f"m{i}")
    copy = tmp_path / "store"
    copy.mkdir()
    for name in ("memlab.sqlite3", "memlab.sqlite3-wal"):
        shutil.copy(live / name, copy / name)
    store.close()
    log = (copy / "memlab.sqlite3-wal").read_bytes()
    return copy, FRAME_HEADER + int.from_bytes(log[8:12], "big")


def test_store_reopens_a_killed_writers_log(tmp_path: Path) -> None:
    path, _ = _killed_store(tmp_path)
    with MemoryStore(path, embedder=HashingEmbedder(dim=16, seed=0), chroma=False) as store:
        assert [store.get(f"m{i}").id for i in range(12)] == [f"m{i}" for i in range(12)]


@pytest.mark.parametrize("read_only", [False, True])
def test_store_refuses_a_damaged_log_and_keeps_it(tmp_path: Path, read_only: bool) -> None:
    path, frame = _killed_store(tmp_path)
    wal = path / "memlab.sqlite3-wal"
    data = bytearray(wal.read_bytes())
    n = (len(data) - WAL_HEADER) // frame
    assert n >= 4
    at = WAL_HEADER + (n // 2) * frame + FRAME_HEADER + 8
    data[at:at + 16] = b"\xff" * 16
    wal.write_bytes(bytes(data))
    before = {p.name: p.read_bytes() for p in path.iterdir()}
    with pytest.raises(StoreCorruptError) as err:
        store = MemoryStore(path, embedder=HashingEmbedder(dim=16, seed=0), chroma=False,
                            read_only=read_only)
        len(store)  # a read-only store reads in snapshots
    assert str(err.value).startswith(f"{wal}: is damaged: frame {n // 2 + 1} fails its checksum")
    assert "nothing was changed" in str(err.value)
    after = {p.name: p.read_bytes() for p in path.iterdir() if p.name != "memlab.lock"}
    assert after == {k: v for k, v in before.items() if k != "memlab.lock"}
