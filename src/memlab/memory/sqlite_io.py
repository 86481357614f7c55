"""The store's SQLite side: schema, connection, lock, transactions and record payloads.

SQLite is the store's source of truth. :class:`SQLiteIO` is the part of
:class:`~memlab.memory.store.MemoryStore` that opens the database (writable with the directory
lock, or read-only), runs statements (errors become one :class:`StoreError` naming the file),
and makes every write all or nothing: one transaction, a savepoint when nested, and on failure
a rollback followed by a rebuild of the in-memory state from SQLite (``_reload``).

Reading without writing. A read-only store (``memlab store check``) must neither create a file
nor see a half-written database while writers come and go. SQLite cannot give both on its own: a
plain ``mode=ro`` connection to a database in WAL mode creates ``-wal`` and ``-shm`` files when
none exist, and ``immutable=1`` (which creates nothing) trusts that the file never changes, so a
writer that opens, commits and checkpoints into ``memlab.sqlite3`` meanwhile makes it read a
torn database ("database disk image is malformed"). So every read of a read-only store runs in
a *snapshot* (:meth:`SQLiteIO._snapshot`), one read transaction that holds one of two guards:

* a writer has the store open (its ``-wal`` and ``-shm`` exist): a ``mode=ro`` connection reads
  through them, in one read transaction (a WAL snapshot), while a POSIX read lock on SQLite's
  shared-lock bytes of ``memlab.sqlite3`` keeps the last writer to close from checkpointing and
  deleting the log under it;
* no writer has it open: a shared ``flock`` on ``memlab.lock`` (the lock every writer takes
  exclusively) keeps any writer from opening it while ``immutable=1`` reads the file. A writer
  that opens meanwhile waits, within its ``lock_timeout``, for the snapshot to end. The read
  lock on the shared-lock bytes is held here too, so that a writer that opens anyway (a store
  without ``memlab.lock``) cannot delete its log on closing: a log that appeared during the
  read means it may have changed, and the snapshot is read again.
"""

from __future__ import annotations

import errno
import json
import operator
import os
import random
import secrets
import sqlite3
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import fields
from pathlib import Path
from typing import Any, TypeVar

import orjson
import polars as pl

from memlab.io import DirectoryGate
from memlab.memory.integrity import sqlite_detail
from memlab.memory.records import (
    MemoryRecord,
    StoreCorruptError,
    StoreError,
    StoreLockedError,
    StoreWriteError,
)
from memlab.memory.wal import side_file_problem

_T = TypeVar("_T")

_SCHEMA = """
CREATE TABLE IF NOT EXISTS memories (
    idx INTEGER PRIMARY KEY,
    id TEXT UNIQUE NOT NULL,
    client_id TEXT NOT NULL,
    type TEXT NOT NULL,
    content_hash TEXT NOT NULL,
    active INTEGER NOT NULL,
    payload TEXT NOT NULL,
    vector BLOB
);
CREATE INDEX IF NOT EXISTS memories_hash ON memories(content_hash, client_id, type, active);
CREATE TABLE IF NOT EXISTS versions (
    seq INTEGER PRIMARY KEY AUTOINCREMENT,
    memory_id TEXT NOT NULL,
    at REAL NOT NULL,
    change TEXT NOT NULL,
    payload TEXT NOT NULL
);
CREATE TABLE IF NOT EXISTS entities (
    idx INTEGER PRIMARY KEY,
    name TEXT NOT NULL,
    type TEXT NOT NULL
);
CREATE TABLE IF NOT EXISTS entity_memory_links (
    entity_idx INTEGER NOT NULL,
    memory_idx INTEGER NOT NULL,
    role TEXT NOT NULL,
    PRIMARY KEY (entity_idx, memory_idx, role)
);
CREATE TABLE IF NOT EXISTS entity_relationships (
    src INTEGER NOT NULL,
    dst INTEGER NOT NULL,
    relation TEXT NOT NULL,
    strength REAL NOT NULL,
    PRIMARY KEY (src, dst, relation)
);
CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS relation_scopes (
    src INTEGER NOT NULL,
    dst INTEGER NOT NULL,
    relation TEXT NOT NULL,
    scope TEXT NOT NULL,
    strength REAL NOT NULL,
    PRIMARY KEY (src, dst, relation, scope)
);
"""

_RECORD_FIELDS = tuple(f.name for f in fields(MemoryRecord))
_RECORD_VALUES = operator.attrgetter(*_RECORD_FIELDS)
_JSON_ENCODE = json.JSONEncoder(ensure_ascii=False).encode  # json.dumps(…, ensure_ascii=False)


def _encode(value: dict[str, Any]) -> str:
    """A record payload as JSON text: orjson (~10× the standard library, which payloads written
    on every store, touch and retirement made a fifth of a replay), or the standard library for
    what orjson refuses (integers past 64 bits, lone surrogates). Both read back the same with
    ``json.loads``; fields are validated finite before they reach a record."""
    try:
        return orjson.dumps(value).decode()
    except TypeError:  # orjson.JSONEncodeError is one
        return _JSON_ENCODE(value)


_WRITES = ("INSERT", "UPDATE", "DELETE", "REPLAC")


class _Rows(list):  # type: ignore[type-arg]
    """Rows read through a deferred store: a list that answers ``fetchall()`` as a cursor."""

    def fetchall(self) -> list[Any]:
        return list(self)


_TABLES = ("memories", "versions", "entities", "entity_memory_links", "entity_relationships")
DB_NAME = "memlab.sqlite3"
LOCK_NAME = "memlab.lock"

# SQLite's unix VFS takes a reader's SHARED lock as a read lock on these bytes of the database
# file and an EXCLUSIVE lock as a write lock on them (os_unix.c: PENDING_BYTE + 2, 510 bytes).
_SHARED_FIRST = 0x40000000 + 2
_SHARED_SIZE = 510
_SNAPSHOT_WAIT = 10.0
"""Seconds a snapshot waits for a writer caught opening or closing the store (it retries)."""
_GATE_GRACE = 1.0
"""Seconds between the tries a writer queued behind the gate makes at the store lock itself
(so that a waiter stopped while it holds the gate cannot keep the store shut)."""
_WRITER_BYTE = 0x40000000 + 1024
"""A byte of ``memlab.sqlite3`` past SQLite's own lock bytes (its pending, reserved and
shared-lock bytes end at ``0x40000000 + 512``) that a writable store holds write-locked while it
is open: a second writer finds the store open even when ``memlab.lock`` was removed or replaced
under the first one (a new lock file is a new lock, and two writers on one database each
append rows the other does not know of)."""
_WRITER_POLL = 0.05
"""Seconds between a waiting writer's tries at :data:`_WRITER_BYTE`."""
CREATING = ".creating-"
"""``memlab.sqlite3.creating-<pid>-<random>``: a new store's file while its schema is made."""


class _SnapshotChanged(Exception):
    """A writer started during an ``immutable=1`` snapshot after all: read again."""


class _ReadGuard:
    """What keeps a read-only snapshot of ``memlab.sqlite3`` consistent (see the module
    docstring); released after SQLite's connection is closed (closing any descriptor of the
    database file drops this process's POSIX locks on it)."""

    def __init__(self) -> None:
        self.fds: list[int] = []
        self.writer = False  # a writer had the store open
        self.immutable = False  # read with immutable=1: look for a writer's log afterwards

    def lock_db(self, db_file: Path) -> bool:
        """Read-lock SQLite's shared-lock bytes (False while a writer holds them exclusively,
        which it does only while it checkpoints at its close)."""
        try:
            import fcntl
            import struct
        except ImportError:  # pragma: no cover - no POSIX locks (Windows): no guard
            return True

        fd = os.open(db_file, os.O_RDONLY)
        try:
            ofd = getattr(fcntl, "F_OFD_SETLK", None)
            if ofd is not None:
                # An open-file-description lock (Linux): closing it never drops the POSIX locks
                # this process's own SQLite connections hold on the file, as a classic lock's
                # close would. struct flock: l_type, l_whence, l_start, l_len, l_pid (0), pad.
                flock = struct.pack(
                    "hhqqi", fcntl.F_RDLCK, os.SEEK_SET, _SHARED_FIRST, _SHARED_SIZE, 0
                )
                fcntl.fcntl(fd, ofd, flock + bytes(32 - len(flock)))
            else:
                fcntl.lockf(fd, fcntl.LOCK_SH | fcntl.LOCK_NB, _SHARED_SIZE, _SHARED_FIRST)
        except OSError:
            os.close(fd)
            return False
        self.fds.append(fd)
        return True

    def lock_store(self, lock_file: Path, *, keep: bool) -> bool | None:
        """Take ``memlab.lock`` shared: False when a writer holds it, None when there is no
        lock file (nothing is created); ``keep=False`` lets it go at once (a probe)."""
        try:
            import fcntl
        except ImportError:  # pragma: no cover - no flock (Windows): no guard
            return None

        try:
            fd = os.open(lock_file, os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0))
        except FileNotFoundError:
            return None
        except OSError:
            return None  # not a lock a writer could hold either (a directory, a loop)
        try:
            fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
        except OSError:
            os.close(fd)
            return False
        if keep:
            self.fds.append(fd)
        else:
            os.close(fd)
        return True

    def release(self) -> None:
        for fd in self.fds:
            os.close(fd)
        self.fds = []


def _writer_flock() -> bytes:
    """``struct flock`` of a write lock on :data:`_WRITER_BYTE` (l_type, l_whence, l_start,
    l_len, l_pid 0, padded to the kernel's 32 bytes), for ``F_OFD_SETLK`` and ``F_OFD_GETLK``."""
    import fcntl
    import struct

    flock = struct.pack("hhqqi", fcntl.F_WRLCK, os.SEEK_SET, _WRITER_BYTE, 1, 0)
    return flock + bytes(32 - len(flock))


def writer_byte_held(db_file: Path) -> bool:
    """Whether a writable store holds :data:`_WRITER_BYTE` of ``db_file``: the authority on
    "is a writer open?" that writers enforce among themselves, which holds even when
    ``memlab.lock`` was removed or replaced under the writer (a probe: nothing is locked).
    False where there are no open-file-description locks (the lock file then decides)."""
    try:
        import fcntl
        import struct
    except ImportError:  # pragma: no cover - no POSIX locks (Windows)
        return False
    getlk = getattr(fcntl, "F_OFD_GETLK", None)
    if getlk is None:  # pragma: no cover - not Linux
        return False
    try:
        fd = os.open(db_file, os.O_RDONLY | getattr(os, "O_CLOEXEC", 0))
    except OSError:
        return False
    try:
        # F_WRLCK asked on a read-only descriptor: GETLK only reports what would conflict
        out = fcntl.fcntl(fd, getlk, _writer_flock())
    except OSError:
        return False
    finally:
        os.close(fd)
    return struct.unpack("h", out[:2])[0] != fcntl.F_UNLCK


VECTOR_DIM_KEY = "vector_dim"
"""The ``meta`` key under which a store records its vectors' dimension with its first vector."""
RECORDING_MARK = "recording:"
"""A live server's mark in ``meta``: ``recording:<recording path>`` -> the recording's file
lengths at its last commit (:class:`memlab.serve.service.MemoryService`)."""


class SQLiteIO:
    """SQLite I/O of :class:`~memlab.memory.store.MemoryStore` (a mixin; the store owns the
    state: ``_db``, ``_db_file``, ``path``, ``_lock``, ``_batch_depth``, ``_aborted``)."""

    def _connect(self, target: str, *, uri: bool = False) -> sqlite3.Connection:
        """The SQLite connection (autocommit mode: transactions are explicit)."""
        return sqlite3.connect(target, isolation_level=None, uri=uri, check_same_thread=False)

    def _open_writable(self) -> None:
        """Lock the store directory, then open ``memlab.sqlite3`` in WAL mode, creating it
        first when there is none (:meth:`_create_db`: a store is complete or does not exist)."""
        assert self.path is not None
        db_file = self.path / DB_NAME
        if self.path.exists() and not self.path.is_dir():
            raise StoreError(f"{self.path}: not a directory (a store is a directory)")
        try:
            self.path.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise StoreWriteError(
                f"{self.path}: cannot create the store directory ({exc.strerror or exc})"
            ) from None
        start = time.monotonic()
        self._acquire_lock()
        self._refuse_side_files(db_file)
        if not self._check_db_file(db_file):
            self._create_db(db_file)
        self._lock_writer(db_file, start)
        try:
            self._db = self._connect(str(db_file))
        except sqlite3.Error as exc:
            raise StoreWriteError(
                f"{db_file}: cannot open the store ({sqlite_detail(exc)})"
            ) from None
        self._check_schema()
        self._exec("PRAGMA journal_mode=WAL")
        self._exec("PRAGMA synchronous=NORMAL")
        # The statement journal of each write's savepoint stays SQLite's temporary file: with
        # temp_store=MEMORY, releasing a savepoint in WAL mode costs time in the size of the
        # whole transaction, so a batch of n rewrites (a consolidation cycle) took time in n²
        # (40,000 memories: minutes); the write path is no faster in memory.

    def _create_db(self, db_file: Path) -> None:
        """Create ``memlab.sqlite3`` complete or not at all.

        The schema is committed in a new file beside it, ``memlab.sqlite3.creating-<pid>-<hex>``
        (in WAL mode; closing it folds the log into the file), which is flushed to disk and
        then linked under the final name — a link never replaces a file, so whatever took the
        name meanwhile is kept and the creation refused. A process killed half-way leaves at
        most that temporary file (never a partial ``memlab.sqlite3``), which an open ignores;
        any failure the process sees removes it.

        Raises:
            StoreError: The name is a symbolic link to nothing, or a file appeared there.
            StoreWriteError: The file cannot be written.
        """
        if db_file.is_symlink():
            raise StoreError(
                f"{db_file}: a symbolic link to nothing, not a memlab store; nothing was "
                "changed (remove the link or point it at a store)"
            )
        tmp = db_file.with_name(f"{DB_NAME}{CREATING}{os.getpid()}-{secrets.token_hex(4)}")
        made: list[Path] = []
        try:
            try:
                fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o666)
                made += [tmp, tmp.with_name(tmp.name + "-wal"), tmp.with_name(tmp.name + "-shm")]
                os.close(fd)
                db = self._connect(str(tmp))
                try:
                    db.execute("PRAGMA journal_mode=WAL")
                    db.execute("PRAGMA synchronous=FULL")
                    db.execute("BEGIN IMMEDIATE")
                    for statement in _SCHEMA.split(";"):
                        if statement.strip():
                            db.execute(statement)
                    db.execute("COMMIT")
                finally:
                    db.close()  # the only connection: its log is checkpointed and deleted
                _fsync(tmp)
                _link_new(tmp, db_file)
            except FileExistsError:
                raise StoreError(
                    f"{db_file}: a file appeared there while the store was being created (not "
                    "memlab's: memlab holds the store lock); nothing was overwritten"
                ) from None
            except (sqlite3.Error, OSError) as exc:
                raise StoreWriteError(
                    f"{db_file}: cannot create the store ({sqlite_detail(exc)})"
                ) from None
            _fsync(db_file.parent)
        finally:
            for path in made:  # this call made them (the name is new): theirs to remove
                try:
                    path.unlink()
                except FileNotFoundError:
                    pass
                except OSError:  # pragma: no cover - left behind, harmless
                    pass

    def _upgrade_schema(self) -> None:
        """Give a store from before a table was added that table, empty (after the store's
        rows were found sound: a refused store is left as it was)."""
        for statement in _SCHEMA.split(";"):
            if "TABLE IF NOT EXISTS relation_scopes" in statement or (
                "TABLE IF NOT EXISTS meta" in statement
            ):
                self._exec(statement)

    def _open_read_only(self) -> None:
        """Check that ``memlab.sqlite3`` is there to read; reads then run in snapshots."""
        assert self.path is not None
        db_file = self.path / DB_NAME
        if not db_file.is_file():
            raise StoreError(f"{self.path}: not a memlab store (no {DB_NAME})")
        self._check_db_file(db_file)

    _guard: _ReadGuard | None = None
    _writer_fd: int | None = None  # holds the writer's lock on _WRITER_BYTE
    _snapshot_writer = False  # whether a writer had the store open during the last snapshot
    _snapshot_stamp: tuple[int, ...] | None = None  # the database file as the last snapshot saw it
    _load_stamp: tuple[int, ...] | None = None  # ... and as the loaded state was read

    def _db_stamp(self) -> tuple[int, ...] | None:
        """Identity, size and time of ``memlab.sqlite3`` and its log (None: a writer's log)."""
        assert self.path is not None
        db_file = self.path / DB_NAME
        if db_file.with_name(DB_NAME + "-wal").exists():
            return None
        st = db_file.stat()
        return (st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns)

    @contextmanager
    def _snapshot(self) -> Iterator[bool]:
        """Hold a consistent read-only view of ``memlab.sqlite3`` as ``self._db`` (one read
        transaction, nothing created or changed; see the module docstring). Yields whether a
        writer had the store open. Inside a snapshot already, it is that one.

        Raises:
            StoreError: The view cannot be had without writing (a log without its index), or a
                writer kept the store half-open for longer than :data:`_SNAPSHOT_WAIT`.
        """
        if self._guard is not None:
            yield self._snapshot_writer
            return
        assert self.path is not None
        guard = self._take_snapshot()
        self._guard = guard
        self._snapshot_writer = guard.writer
        wal = self.path / (DB_NAME + "-wal")
        try:
            self._db.execute("BEGIN")  # the read transaction starts at the first read
            try:
                yield guard.writer
            except Exception:
                if guard.immutable and wal.exists():  # what it read changed under it
                    raise _SnapshotChanged from None
                raise
            if guard.immutable and wal.exists():
                # A writer opened the file anyway (no lock file to hold, or not memlab): the
                # read lock on the shared-lock bytes kept its log from being deleted, so it
                # shows, and the read may have seen the file change.
                raise _SnapshotChanged
            self._snapshot_stamp = None if guard.writer else self._db_stamp()
        finally:
            db, self._db, self._guard = self._db, None, None
            try:
                if db is not None:
                    db.close()
            finally:
                guard.release()

    def _take_snapshot(self) -> _ReadGuard:
        """Open ``self._db`` read-only under the guard that keeps it consistent."""
        assert self.path is not None
        db_file = self.path / DB_NAME
        wal = db_file.with_name(DB_NAME + "-wal")
        shm = db_file.with_name(DB_NAME + "-shm")
        lock_file = self.path / LOCK_NAME
        deadline = time.monotonic() + _SNAPSHOT_WAIT
        while True:
            self._check_db_file(db_file)
            guard = _ReadGuard()
            try:
                with open(db_file, "rb") as fh:
                    header = fh.read(100)
                query = "mode=ro"
                if len(header) == 100 and header[:16] == b"SQLite format 3\0" and header[18] == 2:
                    # WAL mode. Keep the last writer to close from deleting its log from now on.
                    if not guard.lock_db(db_file):
                        guard.release()
                        self._snapshot_wait(deadline)
                        continue
                    if wal.exists():
                        # the lock file, or the byte every writer holds (a removed or
                        # replaced lock file leaves a live writer unseen by the first)
                        writer = guard.lock_store(lock_file, keep=False) is False \
                            or writer_byte_held(db_file)
                        if not writer:  # a crashed writer's log: read it as SQLite would
                            self._refuse_side_files(db_file)
                        if not shm.exists():
                            if writer:  # a writer opening or closing: look again
                                guard.release()
                                self._snapshot_wait(deadline)
                                continue
                            raise StoreError(
                                f"{wal}: a write-ahead log without its index ({DB_NAME}-shm); "
                                "reading it would create that file, so nothing was read: open "
                                "the store for writing once (that replays the log), then "
                                "check again"
                            )
                        guard.writer = writer
                    else:
                        # No writer has the store open: keep it so while the file is read.
                        held = guard.lock_store(lock_file, keep=True)
                        if held is False or wal.exists():  # a writer is opening: look again
                            guard.release()
                            self._snapshot_wait(deadline)
                            continue
                        guard.immutable = True
                        query = "mode=ro&immutable=1"
                # else a rollback journal: SQLite's shared lock keeps the read consistent.
                try:
                    self._db = self._connect(db_file.resolve().as_uri() + "?" + query, uri=True)
                except sqlite3.Error as exc:
                    raise StoreError(
                        f"{db_file}: cannot open the store read-only ({sqlite_detail(exc)})"
                    ) from None
                return guard
            except BaseException:
                guard.release()
                raise

    def _snapshot_wait(self, deadline: float) -> None:
        if time.monotonic() > deadline:
            raise StoreError(
                f"{self.path}: a writer kept opening or closing the store for "
                f"{_SNAPSHOT_WAIT:g} s; nothing was read, try again"
            )
        time.sleep(0.02)

    def _read(self, body: Callable[[], _T]) -> _T:
        """Run ``body`` in a snapshot; again (up to 3 times) when a writer started during an
        ``immutable=1`` one after all (a store without a lock file to hold)."""
        for attempt in range(3):
            try:
                with self._snapshot():
                    return body()
            except _SnapshotChanged:
                if attempt == 2:
                    raise StoreError(
                        f"{self.path}: writers kept starting while the store was read; "
                        "nothing was read, try again"
                    ) from None
        raise AssertionError("unreachable")

    def _refuse_side_files(self, db_file: Path) -> None:
        """Refuse a log or journal beside ``memlab.sqlite3`` that SQLite would drop committed
        writes from, or delete without it being SQLite's (:mod:`memlab.memory.wal`).

        Raises:
            StoreCorruptError: Naming the file and what is wrong with it; nothing was changed.
        """
        try:
            found = side_file_problem(db_file)
        except OSError as exc:
            raise StoreCorruptError(
                f"{db_file}: cannot read its log or journal ({exc.strerror or exc}); nothing "
                "was changed"
            ) from None
        if found is not None:
            path, what = found
            raise StoreCorruptError(
                f"{path}: {what}; nothing was changed (keep a copy of it, then move it out of "
                "the store to open the store without it: what it holds is then lost)"
            )

    def _check_db_file(self, db_file: Path) -> bool:
        """Whether ``memlab.sqlite3`` exists; an empty one is refused, never read as empty nor
        written over (memlab creates the file complete, :meth:`_create_db`, so an empty one is
        not memlab's to reuse)."""
        if not db_file.exists():
            return False
        if not db_file.is_file():
            raise StoreCorruptError(f"{db_file}: not a file")
        if db_file.stat().st_size == 0:
            raise StoreCorruptError(
                f"{db_file}: empty file (0 bytes), not a memlab store; nothing was changed "
                "(restore it from a backup, or move it away to start a new store)"
            )
        return True

    def _check_schema(self) -> None:
        """Refuse a file that is not a SQLite database or lacks memlab's tables: memlab creates
        a store's file with every table in it, so a database without them is not a store,
        and it is never turned into one."""
        try:
            names = {
                r[0] for r in self._db.execute("SELECT name FROM sqlite_master WHERE type='table'")
            }
        except sqlite3.DatabaseError as exc:
            if not is_corruption(exc):
                raise self._open_error(exc) from None
            raise StoreCorruptError(
                f"{self._db_file}: corrupt or not a SQLite database ({sqlite_detail(exc)}); "
                "nothing was changed"
            ) from None
        if not names:
            raise StoreCorruptError(
                f"{self._db_file}: a SQLite database without tables, not a memlab store; "
                "nothing was changed (a store whose creation was interrupted by an older "
                "memlab looks like this: move the file away to start a new store)"
            )
        if not all(t in names for t in _TABLES):
            missing = ", ".join(t for t in _TABLES if t not in names)
            raise StoreCorruptError(
                f"{self._db_file}: not a memlab store (missing table(s) {missing}); "
                "nothing was changed"
            )

    def _acquire_lock(self) -> None:
        """Take ``memlab.lock`` exclusively, waiting at most ``lock_timeout`` seconds in turn.

        Writers waiting for the store queue at the directory's gate
        (:class:`memlab.io.DirectoryGate`); the one holding it polls the lock, and lets the
        gate go once it has it. ``filelock`` polls, and alone it
        lets the process that has just let go of the lock take it back before any waiter looks
        again, so that one writer reopening the store in a loop starved the others into
        :class:`StoreLockedError`. A queued writer also tries the lock itself every
        :data:`_GATE_GRACE` seconds, so that a waiter stopped at the gate cannot keep the
        store shut.

        Raises:
            StoreLockedError: One line naming the store, its lock file and the time waited.
            StoreWriteError: The lock file cannot be opened or created.
        """
        from filelock import FileLock

        assert self.path is not None
        lock_file = self.path / LOCK_NAME
        timeout = float(self.lock_timeout)
        start = time.monotonic()
        deadline = None if timeout < 0 else start + timeout
        lock = FileLock(lock_file)
        gate = DirectoryGate(self.path)
        try:
            next_try = start + _GATE_GRACE
            while not gate.try_take():
                now = time.monotonic()
                if now >= next_try:  # is the lock free while the gate stays shut?
                    next_try = now + _GATE_GRACE
                    if self._try_lock(lock, lock_file, 0.0):
                        self._lock = lock
                        return
                    now = time.monotonic()
                if deadline is not None and now >= deadline:
                    raise self._locked_error(lock_file, timeout)
                pause = random.uniform(0.005, 0.03)  # noqa: S311 - spreads the waiters' looks
                time.sleep(pause if deadline is None else max(0.0, min(pause, deadline - now)))
            left = -1.0 if deadline is None else max(0.0, deadline - time.monotonic())
            if not self._try_lock(lock, lock_file, left, poll=0.01 if gate.held else 0.05):
                raise self._locked_error(lock_file, timeout)
        finally:
            gate.release()
        self._lock = lock

    def _lock_writer(self, db_file: Path, start: float) -> None:
        """Write-lock :data:`_WRITER_BYTE` of ``db_file`` for the store's lifetime, waiting
        until ``lock_timeout`` seconds after ``start`` for a writer that holds it.

        ``memlab.lock`` alone cannot keep a second writer out once it was deleted or replaced
        while a writer held it: the next writer creates a new file and locks that. The byte
        lock lives on the database itself (an open-file-description lock, Linux: closing another
        descriptor of the file does not drop it). Where there are no such locks, or the file
        cannot be opened for writing (SQLite then reports the store read-only on its first
        write), the directory lock is the only guard.

        Raises:
            StoreLockedError: Another process holds the byte: it has the store open for writing
                although it no longer holds ``memlab.lock``.
        """
        try:
            import fcntl
        except ImportError:  # pragma: no cover - no POSIX locks (Windows)
            return
        ofd = getattr(fcntl, "F_OFD_SETLK", None)
        if ofd is None:  # pragma: no cover - not Linux
            return
        try:
            fd = os.open(db_file, os.O_RDWR | getattr(os, "O_CLOEXEC", 0))
        except OSError:
            return
        flock = _writer_flock()
        timeout = float(self.lock_timeout)
        deadline = None if timeout < 0 else start + timeout
        while True:
            try:
                fcntl.fcntl(fd, ofd, flock)
            except OSError as exc:
                if exc.errno not in (errno.EACCES, errno.EAGAIN):
                    os.close(fd)  # no such lock on this file system: the directory lock guards
                    return
                if deadline is not None and time.monotonic() >= deadline:
                    os.close(fd)
                    raise StoreLockedError(
                        f"{self.path}: the store is open for writing in another process that "
                        f"no longer holds its lock file {self.path / LOCK_NAME} (removed or "
                        f"replaced while that process ran; waited {timeout:g} s: "
                        "lock_timeout); one writer process per store directory — stop the "
                        "other one, then retry"
                    ) from None
                time.sleep(_WRITER_POLL)
                continue
            self._writer_fd = fd
            return

    @staticmethod
    def _try_lock(lock: Any, lock_file: Path, timeout: float, *, poll: float = 0.05) -> bool:
        """Acquire the ``filelock`` ``lock`` within ``timeout`` seconds (negative: forever)."""
        from filelock import Timeout

        try:
            lock.acquire(timeout=timeout, poll_interval=poll)
        except Timeout:
            return False
        except OSError as exc:
            raise StoreWriteError(
                f"{lock_file}: cannot take the store lock ({exc.strerror or exc})"
            ) from None
        return True

    def _locked_error(self, lock_file: Path, timeout: float) -> StoreLockedError:
        """The one-line error of a writer that waited ``timeout`` seconds in vain."""
        return StoreLockedError(
            f"{self.path}: the store is open for writing in another process (waited "
            f"{timeout:g} s for its lock {lock_file}: lock_timeout); one writer process per "
            "store directory — close the other one, retry, or open with read_only=True"
        )

    def _release(self) -> None:
        """Close chromadb's client, SQLite, and release the lock (idempotent)."""
        try:
            self._close_chroma()
        finally:
            if self._db is not None:
                try:
                    self._db.close()
                finally:
                    self._db = None
            if self._guard is not None:
                self._guard.release()
                self._guard = None
            if self._writer_fd is not None:  # after SQLite's connection: see _ReadGuard
                os.close(self._writer_fd)
                self._writer_fd = None
            self._readable = False
            if self._lock is not None:
                self._lock.release()
                self._lock = None

    @staticmethod
    def _payload(rec: MemoryRecord) -> str:
        return _encode(dict(zip(_RECORD_FIELDS, _RECORD_VALUES(rec), strict=True)))

    def _version(
        self, rec: MemoryRecord, change: str, at: float, payload: str | None = None
    ) -> None:
        self._exec(
            "INSERT INTO versions (memory_id, at, change, payload) VALUES (?, ?, ?, ?)",
            (rec.id, at, change, payload if payload is not None else self._payload(rec)),
        )

    def history(self, memory_id: str) -> pl.DataFrame:
        """Every saved version of a memory: ``seq, at, change, payload`` (JSON)."""
        rows = self._exec(
            "SELECT seq, at, change, payload FROM versions WHERE memory_id = ? ORDER BY seq",
            (memory_id,),
        ).fetchall()
        return pl.DataFrame(rows, schema=["seq", "at", "change", "payload"], orient="row")

    @contextmanager
    def batch(self) -> Iterator[None]:
        """Group writes into one SQLite transaction (and one chromadb upsert): all or nothing.

        Writes are acknowledged when the outermost batch exits. On an exception inside the
        batch (or a failed commit) SQLite rolls back and the in-memory state is rebuilt from
        SQLite, so the store is exactly as it was before the batch; the exception propagates.
        A batch nested in another is a savepoint: a write that fails inside a batch is undone
        alone, and the writes before it stay pending.

        Raises:
            StoreWriteError: The store is read-only, or SQLite could not write or commit.
        """
        with self._transaction():
            yield

    def _recorded_dim(self, tables: set[str]) -> tuple[int | None, str | None]:
        """The vector dimension recorded in ``meta`` (:data:`VECTOR_DIM_KEY`), and what is
        wrong with the record (``(None, None)``: none recorded, or no ``meta`` among the
        database's ``tables`` yet)."""
        if "meta" not in tables:
            return None, None
        rows = self._exec("SELECT value FROM meta WHERE key = ?", (VECTOR_DIM_KEY,)).fetchall()
        if not rows:
            return None, None
        value = rows[0][0]
        if type(value) is str and value.isascii() and value.isdigit() and 0 < int(value) <= 65536:
            return int(value), None
        return None, f"meta '{VECTOR_DIM_KEY}' is {value!r}, not a vector dimension"

    def meta(self, key: str) -> str | None:
        """The value stored under ``key`` in the store's ``meta`` table (``None``: absent).

        Other components keep small facts about the store there, written in the same
        transaction as the writes they describe (a live server: how far its recording had
        been appended when a write committed)."""
        if not isinstance(key, str):
            raise TypeError(f"field 'key' must be a string, got {type(key).__name__}")
        rows = self._exec("SELECT value FROM meta WHERE key = ?", (key,)).fetchall()
        return rows[0][0] if rows else None

    def recordings(self) -> list[str]:
        """The recordings a live server kept of this store's writes (their paths, sorted):
        a write made outside the server is in none of them, and their replays would differ
        from the store from then on."""
        rows = self._exec("SELECT key FROM meta WHERE substr(key, 1, ?) = ?",
                          (len(RECORDING_MARK), RECORDING_MARK)).fetchall()
        return sorted(str(k)[len(RECORDING_MARK):] for (k,) in rows)

    def set_meta(self, key: str, value: str) -> None:
        """Store ``value`` under ``key`` in the ``meta`` table; inside a :meth:`batch` it
        commits (or rolls back) with the batch's writes."""
        if not isinstance(key, str) or not isinstance(value, str):
            raise TypeError("meta keys and values are strings")
        with self._transaction():
            self._exec(
                "INSERT INTO meta (key, value) VALUES (?, ?)"
                " ON CONFLICT (key) DO UPDATE SET value = excluded.value",
                (key, value),
            )

    def _exec(self, sql: str, params: Sequence[Any] = ()) -> Any:
        """Run one statement and fetch its rows; SQLite and OS errors become one
        :class:`StoreError` naming the file (never quoting memory text). A store that defers
        SQLite queues a write and runs a read on SQLite brought up to date
        (:meth:`_deferred_read`); a read-only store reads in a snapshot of its own."""
        if self._db is None:
            if self._readable:  # a read-only store reads in a snapshot of its own
                return self._read(lambda: self._exec(sql, params))
            raise StoreError(f"{self._db_file}: the store is closed")
        deferred = self._deferred
        if deferred is not None and not self._applying:
            if sql.lstrip()[:6].upper() in _WRITES:
                deferred.append((sql, tuple(params), False))
                return None
            return self._deferred_read(sql, params)
        try:
            # Rows are fetched here, where an error (text that is not UTF-8, a damaged page
            # met half-way) still becomes a StoreError, not at the caller's fetch.
            return _Rows(self._db.execute(sql, params).fetchall())
        except (sqlite3.Error, OSError) as exc:
            raise self._store_error(exc) from exc

    _readable = False  # a read-only store, open: its reads run in snapshots

    def _exec_many(self, sql: str, rows: Sequence[Sequence[Any]]) -> None:
        if self._db is None:
            raise StoreError(f"{self._db_file}: the store is closed")
        if self._deferred is not None and not self._applying:
            self._deferred.append((sql, list(rows), True))
            return
        try:
            self._db.executemany(sql, rows)
        except (sqlite3.Error, OSError) as exc:
            raise self._store_error(exc) from exc

    # ------------------------------------------------------------------ deferred SQLite
    # An in-memory store opened with ``defer_sqlite=True`` (a replay's scratch store) keeps its
    # write statements in ``_deferred`` instead of running them: a replay reads nothing back,
    # and SQLite was a third of its writes. Whatever reads SQLite (a rollback's rebuild,
    # ``history``, ``check``) first applies the queue in a transaction; committed writes then
    # leave the queue, the pending ones of an open batch are rolled back in SQLite and stay
    # queued. A unit of writes that fails drops its own statements from the queue, so the
    # rebuilt state is the one before the unit, as with SQLite's own rollback.
    _deferred: list[tuple[str, Any, bool]] | None = None
    _applying = False

    @contextmanager
    def _deferred_applied(self) -> Iterator[sqlite3.Connection]:
        """SQLite with the queued statements applied (kept when no batch is open)."""
        db, queue = self._db, self._deferred
        assert db is not None and queue is not None
        self._applying = True
        try:
            db.execute("BEGIN")
            try:
                for sql, params, many in queue:
                    (db.executemany if many else db.execute)(sql, params)
                yield db
            except BaseException:
                db.execute("ROLLBACK")
                raise
            if self._batch_depth == 0:
                db.execute("COMMIT")
                queue.clear()
            else:
                db.execute("ROLLBACK")
        except (sqlite3.Error, OSError) as exc:
            raise self._store_error(exc) from exc
        finally:
            self._applying = False

    def _deferred_read(self, sql: str, params: Sequence[Any]) -> _Rows:
        with self._deferred_applied() as db:
            return _Rows(db.execute(sql, params).fetchall())

    def _deferred_rollback(self, mark: int) -> None:
        """Drop the failed unit's statements and rebuild the in-memory state without them."""
        assert self._deferred is not None
        del self._deferred[mark:]
        with self._deferred_applied():
            self._reload()

    def _open_error(self, exc: BaseException) -> StoreWriteError:
        """A store that could not be read for another reason than its contents (a full,
        read-only or failing disk: SQLite cannot make its ``-shm`` file, or read a page),
        which is not called corrupt: the advice for a corrupt store is to restore or move
        the file, and this one is sound."""
        return StoreWriteError(
            f"{self._db_file}: cannot open the store ({sqlite_detail(exc)}): the file system may "
            "be full, read-only or failing; the store was not found damaged, and nothing was "
            "changed (free space or fix the disk, then open it again)"
        )

    def _store_error(self, exc: BaseException) -> StoreError:
        """One error naming the file, quoting none of the data SQLite may quote."""
        detail = sqlite_detail(exc)
        if is_corruption(exc):
            return StoreCorruptError(f"{self._db_file}: the database is corrupt ({detail})")
        if detail.startswith("Could not decode to UTF-8"):
            return StoreCorruptError(
                f"{self._db_file}: the database holds text that is not UTF-8 ({detail})"
            )
        return StoreWriteError(f"{self._db_file}: cannot write to the store ({detail})")

    @contextmanager
    def _transaction(self) -> Iterator[None]:
        """One all-or-nothing unit of writes: a transaction, or a savepoint when nested.

        On any exception SQLite rolls back to where the unit began and the in-memory state is
        rebuilt from SQLite (:meth:`_reload`); SQLite errors surface as :class:`StoreError`.
        """
        if self.read_only:
            raise StoreWriteError(f"{self._db_file}: the store is open read-only")
        if self._aborted:
            raise StoreWriteError(
                f"{self._db_file}: the enclosing batch was rolled back by an earlier failure; "
                "leave the batch before writing again"
            )
        depth = self._batch_depth
        if self._deferred is not None:
            mark = len(self._deferred)
            self._batch_depth += 1
            try:
                yield
            except BaseException:
                self._batch_depth -= 1
                self._deferred_rollback(mark)
                raise
            self._batch_depth -= 1
            if depth == 0:
                self._drop_purged()
                if self.chroma_sync == "commit":
                    self._flush_chroma()
            return
        savepoint = f"memlab_{depth}"
        self._exec("BEGIN IMMEDIATE" if depth == 0 else f"SAVEPOINT {savepoint}")
        self._batch_depth += 1
        try:
            yield
        except BaseException:
            self._batch_depth -= 1
            self._rollback(depth, savepoint)
            raise
        self._batch_depth -= 1
        if depth > 0:
            try:
                self._exec(f"RELEASE {savepoint}")
            except BaseException:
                self._rollback(depth, savepoint)
                raise
            return
        if self._aborted:
            self._aborted = False
            raise StoreWriteError(
                f"{self._db_file}: the batch was rolled back by a failure inside it"
            )
        try:
            self._exec("COMMIT")
        except BaseException:
            self._rollback(0, savepoint)
            raise
        self._drop_purged()  # a purged memory's vector leaves chromadb at once
        if self.chroma_sync == "commit":
            self._flush_chroma()

    def _rollback(self, depth: int, savepoint: str) -> None:
        """Undo SQLite to the start of a unit and rebuild the in-memory state from it."""
        db = self._db
        if db is not None:
            try:
                if depth == 0:
                    if db.in_transaction:
                        db.execute("ROLLBACK")
                    self._aborted = False
                elif db.in_transaction:
                    db.execute(f"ROLLBACK TO {savepoint}")
                    db.execute(f"RELEASE {savepoint}")
                else:  # SQLite gave up the whole transaction (e.g. disk full)
                    self._aborted = True
            except sqlite3.Error:
                # The transaction is gone with the savepoint: the batch cannot go on.
                self._aborted = depth > 0
                if db.in_transaction and depth == 0:
                    db.execute("ROLLBACK")
        if db is not None:
            self._reload()

    def _load(self) -> None:
        """Build the in-memory state from SQLite; anything unreadable is a
        :class:`StoreCorruptError` naming the file."""
        try:
            self._load_rows()
        except StoreError:
            raise
        except sqlite3.Error as exc:
            if not is_corruption(exc):
                raise self._open_error(exc) from None
            raise StoreCorruptError(
                f"{self._db_file}: the store cannot be read ({sqlite_detail(exc)}); "
                "nothing was changed"
            ) from None
        except (ValueError, TypeError, KeyError, IndexError, RecursionError) as exc:
            # Rows are checked field by field before use (memlab.memory.integrity); this is
            # the backstop, and its message names the error's type only (a message of Python's
            # may quote the value, which may be memory text).
            raise StoreCorruptError(
                f"{self._db_file}: the store cannot be read ({type(exc).__name__}); "
                "nothing was changed"
            ) from None


#: SQLite's result codes for a file whose contents are damaged or not a database.
_CORRUPT_CODES = (sqlite3.SQLITE_CORRUPT, sqlite3.SQLITE_NOTADB)


def is_corruption(exc: BaseException) -> bool:
    """Whether a SQLite error says the file's contents are damaged (``SQLITE_CORRUPT``,
    ``SQLITE_NOTADB``), rather than that the disk or the file system failed (full, read-only,
    I/O error, cannot open): only the first is a corrupt store."""
    if not isinstance(exc, sqlite3.DatabaseError):
        return False
    code = getattr(exc, "sqlite_errorcode", None)
    if code is not None:
        return (code & 0xFF) in _CORRUPT_CODES
    return type(exc) is sqlite3.DatabaseError


def _fsync(path: Path) -> None:
    """Flush a file, or a directory's entries, to disk (where the platform allows it)."""
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError:  # pragma: no cover - a directory cannot be opened (Windows)
        return
    try:
        os.fsync(fd)
    except OSError:  # pragma: no cover - not supported for directories here
        pass
    finally:
        os.close(fd)


def _link_new(src: Path, dst: Path) -> None:
    """Give the file ``src`` the name ``dst`` without ever replacing a file there.

    Raises:
        FileExistsError: ``dst`` exists.
    """
    try:
        os.link(src, dst)
        return
    except FileExistsError:
        raise
    except OSError as exc:
        if exc.errno not in (
            errno.EPERM,
            errno.EOPNOTSUPP,
            errno.ENOTSUP,
            errno.EMLINK,
            errno.ENOSYS,
        ):
            raise
    # A file system without hard links: rename onto a free name (the store lock keeps every
    # memlab process away; only another program could take the name in between).
    if os.path.lexists(dst):
        raise FileExistsError(errno.EEXIST, "file exists", str(dst))
    os.rename(src, dst)
