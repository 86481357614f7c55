"""SQLite's side files read before a store opens them: a damaged log is refused, not dropped.

When SQLite opens a database whose write-ahead log (``memlab.sqlite3-wal``) a crashed writer
left behind, it replays the log's frames up to the first frame that fails its checksum and
ignores the rest; on close it folds what it replayed into the database and deletes the log. A
log damaged in the middle (a bad sector, a torn copy) then loses every transaction committed
after the damage, without a word, and the only copy of those writes is deleted. A file at the
log's name that is not a log at all is ignored and deleted the same way, and a rollback journal
(``memlab.sqlite3-journal``, which a store in WAL mode never writes) would be played back into
the database and deleted. The log's index (``memlab.sqlite3-shm``) holds no data, but a file at
its name that is not one would be overwritten and deleted: it is refused too.

:func:`side_file_problem` reads these files as the SQLite file format defines them
(https://www.sqlite.org/fileformat2.html, "The Write-Ahead Log"): a 32-byte header (magic,
version 3007000, page size, checkpoint sequence, two salts, a checksum), then frames of a
24-byte header (page number, database size after a commit or 0, the salts, a cumulative
checksum) and one page. A frame is valid when its salts are the header's and its checksum
continues the chain from the header's. The log is damaged when a *committed* frame of the
current salts validates after a frame that does not: SQLite would stop before it. Frames of
other salts are an earlier generation of the log, already in the database, and an invalid
frame with no committed frame of the current salts after it is the tail a crash cut short
(uncommitted), both normal. A damaged last transaction cannot be told from such a tail and is
not reported.

The store refuses to open (:class:`~memlab.memory.store.StoreCorruptError`, naming the file and
the frame) rather than let SQLite discard anything; moving the file aside opens the store
without it.
"""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np

WAL_MAGIC = (0x377F0682, 0x377F0683)
"""The log header's magic: checksums over little-endian words, or over big-endian ones."""
WAL_VERSION = 3007000
WAL_HEADER = 32
FRAME_HEADER = 24
_MASK = 0xFFFFFFFF
_CHUNK_BYTES = 1 << 24
"""Frames checksummed per numpy batch (about this many bytes of log)."""


def _powers(n: int) -> np.ndarray:
    """``M^(n-1-i)`` for ``i < n`` (mod 2^32) as ``(n, 2, 2)`` uint64, where ``M = [[1, 1], [1,
    2]]`` is one step of the checksum on its state: ``s0 += x0 + s1; s1 += x1 + s0``."""
    out = np.empty((n, 2, 2), dtype=np.uint64)
    p = ((1, 0), (0, 1))
    for k in range(n - 1, -1, -1):
        out[k] = p
        p = (
            ((p[0][0] + p[0][1]) & _MASK, (p[0][0] + 2 * p[0][1]) & _MASK),
            ((p[1][0] + p[1][1]) & _MASK, (p[1][0] + 2 * p[1][1]) & _MASK),
        )
    return out


def wal_checksum(data: bytes, big_endian: bool, seed: tuple[int, int] = (0, 0)) -> tuple[int, int]:
    """SQLite's WAL checksum of ``data`` (a multiple of 8 bytes) continued from ``seed``: the
    reference loop, one word pair at a time."""
    order = "big" if big_endian else "little"
    s0, s1 = seed
    for i in range(0, len(data), 8):
        s0 = (s0 + int.from_bytes(data[i:i + 4], order) + s1) & _MASK
        s1 = (s1 + int.from_bytes(data[i + 4:i + 8], order) + s0) & _MASK
    return s0, s1


def _frame_offsets(words: np.ndarray, pw: np.ndarray) -> np.ndarray:
    """The part of each frame's checksum its own words add (``(frames, 2)`` uint64): the
    checksum of the frame's words from a zero state, which the previous state then shifts by a
    fixed matrix. ``words``: ``(frames, pairs, 2)`` uint64 of word values."""
    a = words[:, :, 0]
    c1 = (a + words[:, :, 1]) & _MASK  # s1 gains x0 + x1 beyond what s0 passes on
    # state after pair i from zero: sum over j of M^(n-1-j) @ (x0_j, x0_j + x1_j)
    d0 = ((pw[:, 0, 0] * a) & _MASK) + ((pw[:, 0, 1] * c1) & _MASK)
    d1 = ((pw[:, 1, 0] * a) & _MASK) + ((pw[:, 1, 1] * c1) & _MASK)
    return np.stack([d0.sum(axis=1) & _MASK, d1.sum(axis=1) & _MASK], axis=1)


def _frames(
    path: Path, n: int, page: int, big_endian: bool, pw: np.ndarray
) -> tuple[np.ndarray, np.ndarray]:
    """The header fields of each of the ``n`` whole frames (``(n, 6)`` int64: page number,
    database size after a commit, two salts, two checksum words) and :func:`_frame_offsets` of
    each (``pw``: :func:`_powers` of a frame's word pairs), read in batches of about
    :data:`_CHUNK_BYTES`."""
    frame = FRAME_HEADER + page
    pairs = (8 + page) // 8
    dtype = np.dtype(">u4" if big_endian else "<u4")
    per = max(1, _CHUNK_BYTES // frame)
    fields = np.empty((n, 6), dtype=np.int64)
    offsets = np.empty((n, 2), dtype=np.uint64)
    with open(path, "rb") as fh:
        fh.seek(WAL_HEADER)
        for start in range(0, n, per):
            k = min(per, n - start)
            raw = np.frombuffer(fh.read(k * frame), dtype=np.uint8).reshape(k, frame)
            fields[start:start + k] = raw[:, :FRAME_HEADER].copy().view(">u4").astype(np.int64)
            body = np.concatenate([raw[:, :8], raw[:, FRAME_HEADER:]], axis=1)
            words = np.ascontiguousarray(body).view(dtype).astype(np.uint64)
            offsets[start:start + k] = _frame_offsets(words.reshape(k, pairs, 2), pw)
    return fields, offsets


def wal_problem(path: Path) -> str | None:
    """What is wrong with the write-ahead log at ``path``, or ``None`` (see the module
    docstring): it is not a log (a bad magic, version or page size), or committed frames lie
    after a frame SQLite stops at. An empty log, or one too short for its header, is fine."""
    size = path.stat().st_size
    if size < WAL_HEADER:
        return None  # no frame to lose: SQLite starts the log anew
    with open(path, "rb") as fh:
        head = fh.read(WAL_HEADER)
    words = [int.from_bytes(head[i:i + 4], "big") for i in range(0, WAL_HEADER, 4)]
    magic, version, page = words[0], words[1], words[2]
    if magic not in WAL_MAGIC:
        return "is not a SQLite write-ahead log (its header's magic number is wrong)"
    if version != WAL_VERSION:
        return f"is not a write-ahead log this SQLite reads (version {version})"
    if page < 512 or page > 65536 or page & (page - 1):
        return f"is damaged: its header gives page size {page}"
    big = magic == WAL_MAGIC[1]
    salts = (words[4], words[5])
    stored_head = (words[6], words[7])
    n = (size - WAL_HEADER) // (FRAME_HEADER + page)
    if n == 0:
        return None
    pw = _powers((8 + page) // 8)
    fields, offsets = _frames(path, n, page, big, pw)
    headers = fields.tolist()
    # M^n = M · M^(n-1), M = [[1, 1], [1, 2]] (one checksum step; pw[0] is M^(n-1))
    m = [[int(v) for v in row] for row in pw[0]]
    step = (
        ((m[0][0] + m[1][0]) & _MASK, (m[0][1] + m[1][1]) & _MASK),
        ((m[0][0] + 2 * m[1][0]) & _MASK, (m[0][1] + 2 * m[1][1]) & _MASK),
    )

    def advance(state: tuple[int, int], k: int) -> tuple[int, int]:
        s0, s1 = state
        return (
            (step[0][0] * s0 + step[0][1] * s1 + int(offsets[k, 0])) & _MASK,
            (step[1][0] * s0 + step[1][1] * s1 + int(offsets[k, 1])) & _MASK,
        )

    header_ok = wal_checksum(head[:24], big) == stored_head
    state = stored_head
    first_bad = None if header_ok else -1  # -1: the header itself
    if not header_ok:  # its salts may be what was damaged: the first frame's are the log's
        salts = (headers[0][2], headers[0][3])
    for k, (pgno, commit, salt1, salt2, c0, c1) in enumerate(headers):
        if first_bad is None:
            if (salt1, salt2) == salts and pgno != 0 and advance(state, k) == (c0, c1):
                state = (c0, c1)
                continue
            first_bad = k
            continue
        # after SQLite's stopping point: a frame of the current salts that continues the chain
        # from the stored checksum of the frame before it, and commits, was written and lost
        prev = stored_head if k == 0 else (headers[k - 1][4], headers[k - 1][5])
        if (salt1, salt2) == salts and pgno != 0 and commit and advance(prev, k) == (c0, c1):
            where = "its header" if first_bad < 0 else f"frame {first_bad + 1}"
            return (
                f"is damaged: {where} fails its checksum, and committed frames after it "
                f"(frame {k + 1} of {n}) would be lost if SQLite opened it"
            )
    return None


def side_file_problem(db_file: Path) -> tuple[Path, str] | None:
    """The first of the database's side files that SQLite would discard data from or delete
    without it being SQLite's to discard, and why (see the module docstring)."""
    journal = db_file.with_name(db_file.name + "-journal")
    if journal.exists() or journal.is_symlink():
        return journal, (
            "is a rollback journal, which a memlab store (in WAL mode) never writes; SQLite "
            "would play it back into the database and delete it"
        )
    wal = db_file.with_name(db_file.name + "-wal")
    if wal.is_symlink() or (wal.exists() and not wal.is_file()):
        return wal, "is not a regular file"
    if wal.exists():
        problem = wal_problem(wal)
        if problem is not None:
            return wal, problem
    shm = db_file.with_name(db_file.name + "-shm")
    if shm.is_symlink() or (shm.exists() and not shm.is_file()):
        return shm, "is not a regular file"
    if shm.exists():
        with open(shm, "rb") as fh:
            head = fh.read(4)
        version = int.from_bytes(head, sys.byteorder) if len(head) == 4 else 0
        if head and version not in (0, WAL_VERSION):
            return shm, (
                "is not SQLite's index of a write-ahead log (SQLite would overwrite and delete "
                "it)"
            )
    return None


__all__ = ["side_file_problem", "wal_checksum", "wal_problem"]
