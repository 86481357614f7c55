"""The store's SQLite side: schema, connection, lock, transactions and record payloads.

SQLite is the store's source of truth. :class:`SQLiteIO` is the part of
:class:`~memlab.memory.store.MemoryStore` that opens the database (writable with the directory
lock, or read-only), runs statements (errors become one :class:`StoreError` naming the file),
and makes every write all or nothing: one transaction, a savepoint when nested, and on failure
a rollback followed by a rebuild of the in-memory state from SQLite (``_reload``).
"""

from __future__ import annotations

import json
import operator
import sqlite3
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import fields
from pathlib import Path
from typing import Any

import orjson
import polars as pl

from memlab.memory.records import (
    MemoryRecord,
    StoreCorruptError,
    StoreError,
    StoreLockedError,
    StoreWriteError,
)

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


class SQLiteIO:
    """SQLite I/O of :class:`~memlab.memory.store.MemoryStore` (a mixin; the store owns the
    state: ``_db``, ``_db_file``, ``path``, ``_lock``, ``_batch_depth``, ``_aborted``)."""

    def _connect(self, target: str, *, uri: bool = False) -> sqlite3.Connection:
        """The SQLite connection (autocommit mode: transactions are explicit)."""
        return sqlite3.connect(target, isolation_level=None, uri=uri, check_same_thread=False)

    def _open_writable(self) -> None:
        """Lock the store directory, then open (or create) ``memlab.sqlite3`` in WAL mode."""
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
        self._acquire_lock()
        existed = self._check_db_file(db_file)
        try:
            self._db = self._connect(str(db_file))
        except sqlite3.Error as exc:
            raise StoreWriteError(f"{db_file}: cannot open the store ({exc})") from None
        self._check_schema(existed)
        self._exec("PRAGMA journal_mode=WAL")
        self._exec("PRAGMA synchronous=NORMAL")
        # The savepoint of each write inside a batch keeps the pages it changes in a statement
        # journal: in memory, not in a temporary file (it only matters until the savepoint
        # is released; durability comes from the WAL).
        self._exec("PRAGMA temp_store=MEMORY")
        if not self._has_tables():
            self._exec("BEGIN IMMEDIATE")
            for statement in _SCHEMA.split(";"):
                if statement.strip():
                    self._exec(statement)
            self._exec("COMMIT")
        else:  # a store from before a table was added gets it, empty
            for statement in _SCHEMA.split(";"):
                if "relation_scopes" in statement:
                    self._exec(statement)

    def _open_read_only(self) -> None:
        """Open ``memlab.sqlite3`` without writing: ``mode=ro``, and ``immutable=1`` when no
        writer has a write-ahead log open (then SQLite creates no ``-wal``/``-shm`` file)."""
        assert self.path is not None
        db_file = self.path / DB_NAME
        if not db_file.is_file():
            raise StoreError(f"{self.path}: not a memlab store (no {DB_NAME})")
        self._check_db_file(db_file)
        wal = db_file.with_name(DB_NAME + "-wal")
        uri = db_file.resolve().as_uri() + ("?mode=ro" if wal.exists() else "?mode=ro&immutable=1")
        try:
            self._db = self._connect(uri, uri=True)
        except sqlite3.Error as exc:
            raise StoreError(f"{db_file}: cannot open the store read-only ({exc})") from None
        self._check_schema(True)

    def _check_db_file(self, db_file: Path) -> bool:
        """Whether ``memlab.sqlite3`` exists; an empty one is refused (never read as empty)."""
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

    def _has_tables(self) -> bool:
        names = {r[0] for r in self._exec("SELECT name FROM sqlite_master WHERE type='table'")}
        return all(t in names for t in _TABLES)

    def _check_schema(self, existed: bool) -> None:
        """Refuse a file that is not a SQLite database or lacks the memlab tables."""
        try:
            names = {
                r[0]
                for r in self._db.execute("SELECT name FROM sqlite_master WHERE type='table'")
            }
        except sqlite3.DatabaseError as exc:
            raise StoreCorruptError(
                f"{self._db_file}: corrupt or not a SQLite database ({exc}); nothing was changed"
            ) from None
        if existed and names and not all(t in names for t in _TABLES):
            missing = ", ".join(t for t in _TABLES if t not in names)
            raise StoreCorruptError(
                f"{self._db_file}: not a memlab store (missing table(s) {missing}); "
                "nothing was changed"
            )

    def _acquire_lock(self) -> None:
        from filelock import FileLock, Timeout

        assert self.path is not None
        lock_file = self.path / LOCK_NAME
        lock = FileLock(lock_file, timeout=float(self.lock_timeout))
        try:
            lock.acquire()
        except Timeout:
            raise StoreLockedError(
                f"{self.path}: the store is open for writing in another process (lock "
                f"{lock_file} held for more than {self.lock_timeout} s); one writer process "
                "per store directory — close the other one, or open with read_only=True"
            ) from None
        except OSError as exc:
            raise StoreWriteError(
                f"{lock_file}: cannot take the store lock ({exc.strerror or exc})"
            ) from None
        self._lock = lock

    def _release(self) -> None:
        """Close SQLite and release the lock (idempotent)."""
        if self._db is not None:
            try:
                self._db.close()
            finally:
                self._db = None
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
        return pl.DataFrame(
            rows, schema=["seq", "at", "change", "payload"], orient="row"
        )

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

    def meta(self, key: str) -> str | None:
        """The value stored under ``key`` in the store's ``meta`` table (``None``: absent).

        Other components keep small facts about the store there, written in the same
        transaction as the writes they describe (a live server: how far its recording had
        been appended when a write committed)."""
        if not isinstance(key, str):
            raise TypeError(f"field 'key' must be a string, got {type(key).__name__}")
        rows = self._exec("SELECT value FROM meta WHERE key = ?", (key,)).fetchall()
        return rows[0][0] if rows else None

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
        """Run one statement; SQLite and OS errors become one :class:`StoreError` naming the
        file (never quoting memory text). A store that defers SQLite queues a write and runs a
        read on SQLite brought up to date (:meth:`_deferred_read`)."""
        if self._db is None:
            raise StoreError(f"{self._db_file}: the store is closed")
        deferred = self._deferred
        if deferred is not None and not self._applying:
            if sql.lstrip()[:6].upper() in _WRITES:
                deferred.append((sql, tuple(params), False))
                return None
            return self._deferred_read(sql, params)
        try:
            return self._db.execute(sql, params)
        except (sqlite3.Error, OSError) as exc:
            raise self._store_error(exc) from exc

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

    def _store_error(self, exc: BaseException) -> StoreError:
        detail = exc.strerror if isinstance(exc, OSError) and exc.strerror else str(exc)
        if type(exc) is sqlite3.DatabaseError:
            return StoreCorruptError(f"{self._db_file}: the database is corrupt ({detail})")
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
            if depth == 0 and self.chroma_sync == "commit":
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
        except (sqlite3.Error, ValueError, TypeError, KeyError, IndexError) as exc:
            detail = str(exc).splitlines()[0][:200] if str(exc) else type(exc).__name__
            raise StoreCorruptError(
                f"{self._db_file}: the store cannot be read ({type(exc).__name__}: {detail}); "
                "nothing was changed"
            ) from None
