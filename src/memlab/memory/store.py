"""The memory store: SQLite records, a vector index, the entity graph, the full write path.

Write path (seed 000), in this order: validate → scrub credentials → content hash (first 16 hex
of SHA-256 of the scrubbed text) → tenant-scoped dedup (same agent: no write; other agent:
corroboration, ``observed_by`` capped) → supersession (facts by ``key``, statuses by
``subject``; decisions are immutable) → entities and graph → SQLite commit → vectors.

SQLite is the source of truth (it also keeps each vector as a BLOB); the chromadb collection is an
index under the same ids, reconciled from SQLite when a persisted store is opened. With
``path=None`` the same code runs fully in memory (SQLite ``:memory:``, no chromadb unless asked).

The connection may be used from any thread (``check_same_thread=False``) but the store is not
thread-safe: a caller that serves several threads serialises its calls (``memlab.serve`` holds
one lock around every call).

Every time-dependent method takes ``now`` (epoch seconds or ISO 8601) so that a replay can run
the store on a recorded clock; it defaults to the wall clock.

Atomicity. Every write (:meth:`MemoryStore.store`, ``relate``, ``forget``, ``correct``,
``retire``, ``save``, ``touch``, ``persist_relations``, a :meth:`~MemoryStore.batch` and the
consolidation cycle built on them) is all or nothing: arguments are validated before anything
changes, the write runs in one SQLite transaction (a savepoint when nested in a batch), and when
anything fails — bad input found late, a full or read-only disk, an exception inside a batch —
SQLite rolls back and the in-memory records, columns, vectors, lookup tables and entity graph are
rebuilt from SQLite, so memory never runs ahead of disk. chromadb only ever receives committed
rows (after the commit); if it fails, the write still stands and the index is repaired on the
next open. Reopening reconciles chromadb with SQLite: missing ids, vectors and metadata are
rewritten; ids SQLite does not know are never deleted, only quarantined (metadata
``orphan=True, active=False, forgotten=True``, hidden from every filter) and reported by
:meth:`~MemoryStore.check`.

Processes. A writable persisted store holds an exclusive lock on ``<path>/memlab.lock`` for its
whole lifetime (``filelock``; released by :meth:`~MemoryStore.close` or when the process dies):
one writer process per store directory. A second writer waits up to ``lock_timeout`` seconds,
then raises :class:`~memlab.memory.records.StoreLockedError`. ``read_only=True`` (what
``memlab store check`` uses) takes no lock and never writes or creates a file.
"""

from __future__ import annotations

import hashlib
import json
import logging
import math
import re
import sqlite3
import time
import uuid
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, fields
from pathlib import Path
from typing import Any

import numpy as np
import polars as pl

from memlab.memory.entities import Entity, EntityExtractor, EntityMention
from memlab.memory.graph import EntityGraph
from memlab.memory.records import (
    AUTHORITY_LEVELS,
    CATEGORIES,
    GLOBAL_CLIENT,
    IMPORTANCE_LEVELS,
    KNOWLEDGE_CATEGORIES,
    MEMORY_TYPES,
    RELATION_TYPES,
    DecisionImmutableError,
    MemoryInputError,
    MemoryRecord,
    StoreCorruptError,
    StoreError,
    StoreLockedError,
    StoreWriteError,
    UnknownMemoryError,
    check_json_value,
)
from memlab.memory.scopes import TEAM, Principal, check_scope
from memlab.memory.scrub import Scrubber, scrub_message
from memlab.memory.vectors import ChromaIndex, ExactIndex
from memlab.timeutil import coerce_ts

log = logging.getLogger("memlab.store")

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
"""

_NO_END = np.inf
_RECORD_FIELDS = tuple(f.name for f in fields(MemoryRecord))
_TIME_FIELDS = (
    "created_at", "last_accessed_at", "superseded_at", "valid_from", "valid_to", "expired_at"
)
_TABLES = ("memories", "versions", "entities", "entity_memory_links", "entity_relationships")
DB_NAME = "memlab.sqlite3"
LOCK_NAME = "memlab.lock"
_QUARANTINE = {"orphan": True, "active": False, "forgotten": True}


@dataclass(frozen=True, slots=True)
class WriteResult:
    """What a store call did.

    Attributes:
        id: The id of the memory the text now lives in (the existing one on dedup).
        action: ``"created"``, ``"deduplicated"`` (same agent, no write) or ``"corroborated"``.
        superseded: The id this write superseded, if any.
        redactions: How many credentials were scrubbed from the text.
    """

    id: str
    action: str
    superseded: str | None = None
    redactions: int = 0


class _Columns:
    """Growable numpy columns mirroring the records, for vectorised filters and scoring."""

    SPEC: tuple[tuple[str, Any, Any], ...] = (
        ("created_at", np.float64, np.nan),
        ("last_accessed_at", np.float64, np.nan),
        ("access_count", np.int64, 0),
        ("confidence", np.float64, 1.0),
        ("active", bool, False),
        ("forgotten", bool, False),
        ("valid_from", np.float64, np.nan),
        ("valid_to", np.float64, _NO_END),
        ("client", np.int32, -1),
        ("type", "<U8", ""),
        ("scope", np.int32, -1),
        ("archived", bool, False),
    )

    def __init__(self) -> None:
        self.n = 0
        self.cap = 0
        for name, dtype, fill in self.SPEC:
            setattr(self, name, np.full(0, fill, dtype=dtype))

    def append(self) -> int:
        if self.n == self.cap:
            new_cap = max(1024, 2 * self.cap)
            for name, dtype, fill in self.SPEC:
                old = getattr(self, name)
                new = np.full(new_cap, fill, dtype=dtype)
                new[: self.n] = old[: self.n]
                setattr(self, name, new)
            self.cap = new_cap
        self.n += 1
        return self.n - 1

    def view(self, name: str) -> np.ndarray:
        return getattr(self, name)[: self.n]


def content_hash(text: str) -> str:
    """First 16 hex characters of SHA-256 of ``text`` (the seed's ``content_hash``)."""
    return hashlib.sha256(text.encode("utf-8")).hexdigest()[:16]


def _check_choice(value: Any, name: str, choices: Sequence[str], *, optional: bool) -> None:
    if value is None and optional:
        return
    if not isinstance(value, str):
        raise TypeError(f"field '{name}' must be a string, got {type(value).__name__}")
    if value not in choices:
        raise MemoryInputError(
            scrub_message(f"field '{name}': {value!r} is not one of {', '.join(choices)}")
        )


def _check_time(value: Any, name: str) -> float:
    """A finite timestamp (epoch seconds or ISO 8601), ``now`` when ``value`` is None."""
    if value is None:
        return time.time()
    t = coerce_ts(value, field=name)
    if t is None or not math.isfinite(t):
        raise MemoryInputError(f"field '{name}' must be a finite timestamp, got {value!r}")
    return t


def _check_k(k: Any, name: str = "k") -> int:
    """A count of results: an int >= 0 (a negative one would slice from the end)."""
    if isinstance(k, bool) or not isinstance(k, (int, np.integer)):
        raise MemoryInputError(f"field '{name}' must be an int >= 0, got {k!r}")
    if k < 0:
        raise MemoryInputError(f"field '{name}' must be an int >= 0, got {k}")
    return int(k)


def _check_str(value: Any, name: str, *, optional: bool) -> None:
    if value is None and optional:
        return
    if not isinstance(value, str):
        raise TypeError(f"field '{name}' must be a string, got {type(value).__name__}")
    if not value.strip():
        raise MemoryInputError(f"field '{name}' must not be empty")


class MemoryStore:
    """Agent memories with their lifecycle, entity graph and vectors.

    Args:
        path: Directory of a persisted store (``memlab.sqlite3`` and ``chroma/`` inside), or
            ``None`` for a store that lives in memory.
        embedder: Embeds text when a write brings no embedding; ``None`` stores such memories
            without a vector.
        max_observed_by: Cap of the corroboration list (seed 000: ``MAX_OBSERVED_BY = 20``).
        max_text_chars: Longest text accepted.
        chroma: Keep a chromadb collection in step with the store. ``None`` means yes for a
            persisted store and no in memory (an in-memory store builds an ephemeral collection on
            first use of :meth:`chroma_index`).
        scrubber: Credential scrubber; ``None`` uses :class:`~memlab.memory.scrub.Scrubber`.
        extractor: Entity extractor; ``None`` uses
            :class:`~memlab.memory.entities.EntityExtractor`.
        repair: On opening a persisted store, bring chromadb in line with SQLite (missing ids,
            vectors and metadata; ids SQLite lacks are quarantined, never deleted).
        read_only: Open an existing persisted store without writing anything: SQLite read-only
            (``mode=ro``), no lock, no repair, no file or directory created; writes raise
            :class:`StoreWriteError`. chromadb is read when its directory exists.
        lock_timeout: Seconds a writable persisted store waits for another process to release
            the store directory's lock before raising :class:`StoreLockedError` (negative:
            wait forever).

    Raises:
        StoreCorruptError: ``memlab.sqlite3`` is empty, corrupt or not a memlab store.
        StoreLockedError: Another process has the store open for writing.
        StoreError: The store cannot be opened (no store at ``path`` in read-only mode, the
            directory cannot be created, chromadb cannot be opened).
    """

    def __init__(
        self,
        path: str | Path | None = None,
        *,
        embedder: Any | None = None,
        max_observed_by: int = 20,
        max_text_chars: int = 20_000,
        chroma: bool | None = None,
        scrubber: Scrubber | None = None,
        extractor: EntityExtractor | None = None,
        repair: bool = True,
        read_only: bool = False,
        lock_timeout: float = 10.0,
    ) -> None:
        self.path = None if path is None else Path(path)
        self.embedder = embedder
        self.max_observed_by = max_observed_by
        self.max_text_chars = max_text_chars
        self.scrubber = scrubber if scrubber is not None else Scrubber()
        self.extractor = extractor if extractor is not None else EntityExtractor()
        self.graph = EntityGraph()
        self.vectors = ExactIndex()
        self._records: list[MemoryRecord] = []
        self._index: dict[str, int] = {}
        self._id_column = pl.Series("mem_id", [], dtype=pl.String)
        self._id_frame = pl.DataFrame(schema={"mem_id": pl.String, "row": pl.Int64})
        self._id_rank = np.zeros(0, dtype=np.int64)
        self._cols = _Columns()
        self._clients: dict[str, int] = {}
        self._dedup: dict[tuple[str, str, str, str], int] = {}
        self._by_key: dict[tuple[str, str, str], int] = {}
        self._by_subject: dict[tuple[str, str, str], int] = {}
        self._scopes: dict[str, int] = {}
        self.scope_version = 0
        self._batch_depth = 0
        self._known_patterns: dict[tuple[str, ...], Any] = {}
        self._chroma_pending: dict[str, int] = {}
        self._chroma: ChromaIndex | None = None
        self._chroma_pool: Any | None = None
        self._chroma_job: Any | None = None
        self.repair = repair
        self.read_only = read_only
        self.lock_timeout = lock_timeout
        self.version = 0
        self._chroma_job_ids: dict[str, int] = {}
        self._aborted = False
        self._lock: Any | None = None
        self._db: Any | None = None
        self._db_file = ":memory:" if self.path is None else str(self.path / DB_NAME)
        for name, value in (("max_observed_by", max_observed_by),
                            ("max_text_chars", max_text_chars)):
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise MemoryInputError(f"field '{name}' must be an int >= 1, got {value!r}")
        if isinstance(lock_timeout, bool) or not isinstance(lock_timeout, (int, float)):
            raise TypeError(f"field 'lock_timeout' must be a number, got {lock_timeout!r}")
        if read_only and self.path is None:
            raise MemoryInputError("read_only=True needs the path of a persisted store")
        try:
            if self.path is None:
                self._db = self._connect(":memory:")
                self._use_chroma = bool(chroma)
                self._db.executescript(_SCHEMA)
            elif read_only:
                self._open_read_only()
                self._use_chroma = chroma is not False and (
                    self.path / "chroma" / "chroma.sqlite3"
                ).is_file()
            else:
                self._open_writable()
                self._use_chroma = True if chroma is None else bool(chroma)
            if self._use_chroma:
                self._chroma = self._open_chroma()
            self._load()
            if self.path is not None and self._chroma is not None and repair and not read_only:
                self._reconcile()
        except BaseException:
            self._release()
            raise

    # ------------------------------------------------------------------ opening
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
        if not self._has_tables():
            self._exec("BEGIN IMMEDIATE")
            for statement in _SCHEMA.split(";"):
                if statement.strip():
                    self._exec(statement)
            self._exec("COMMIT")

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

    def _open_chroma(self) -> ChromaIndex:
        where = None if self.path is None else self.path / "chroma"
        try:
            return ChromaIndex(where, create=not self.read_only)
        except Exception as exc:  # chromadb raises many types
            raise StoreError(
                f"{where}: cannot open the chromadb index ({type(exc).__name__}: {exc}); "
                "move the directory away and reopen the store to rebuild it from SQLite"
            ) from None

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

    # ------------------------------------------------------------------ basics
    def __len__(self) -> int:
        return len(self._records)

    def __contains__(self, memory_id: object) -> bool:
        return memory_id in self._index

    def close(self) -> None:
        """Flush pending vectors, close SQLite and release the store lock (idempotent)."""
        if self._db is None:
            return
        try:
            if self._batch_depth == 0:
                self._flush_chroma(wait=True)
            if self._chroma_pool is not None:
                self._chroma_pool.shutdown(wait=True)
                self._chroma_pool = None
        finally:
            self._release()

    def __enter__(self) -> MemoryStore:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def get(self, memory_id: str) -> MemoryRecord:
        """The record of ``memory_id`` (raises :class:`UnknownMemoryError`)."""
        try:
            return self._records[self._index[memory_id]]
        except KeyError:
            raise UnknownMemoryError(scrub_message(f"unknown memory id {memory_id!r}")) from None

    def idx(self, memory_id: str) -> int:
        """Row index of ``memory_id``."""
        try:
            return self._index[memory_id]
        except KeyError:
            raise UnknownMemoryError(scrub_message(f"unknown memory id {memory_id!r}")) from None

    def record_at(self, idx: int) -> MemoryRecord:
        """The record stored at row ``idx`` (``0 <= idx < len(store)``; no negative indexing)."""
        n = len(self._records)
        if isinstance(idx, bool) or not isinstance(idx, (int, np.integer)):
            raise TypeError(f"field 'idx' must be an int row index, got {type(idx).__name__}")
        if not 0 <= idx < n:
            raise IndexError(f"row {idx} is not in the store (it has {n} rows)")
        return self._records[idx]

    @property
    def ids(self) -> list[str]:
        """Every memory id in row order."""
        return [r.id for r in self._records]

    def ids_of(self, rows: Sequence[int] | np.ndarray) -> list[str]:
        """Memory ids of store rows (each ``0 <= row < len(store)``; no negative indexing)."""
        arr = np.asarray(rows)
        if arr.size:
            if arr.dtype.kind not in "iu":
                raise TypeError(f"field 'rows' must hold int row indices, got {arr.dtype}")
            if arr.min() < 0 or arr.max() >= len(self._records):
                raise IndexError(
                    f"field 'rows' holds a row outside 0..{len(self._records) - 1}"
                )
        return self.id_frame()[np.asarray(rows, dtype=np.int64)].get_column("mem_id").to_list()

    def id_column(self) -> pl.Series:
        """Every memory id in row order as a polars ``String`` Series named ``mem_id``.

        Kept between calls and extended with the rows written since, so that
        ``id_column().gather(rows)`` maps store rows to ids without a Python loop.
        """
        n = len(self._records)
        col = self._id_column
        if len(col) != n:
            new = pl.Series("mem_id", [r.id for r in self._records[len(col) :]], dtype=pl.String)
            col = pl.concat([col, new], rechunk=col.n_chunks() >= 16)
            self._id_column = col
        return col

    def id_frame(self) -> pl.DataFrame:
        """``mem_id, row`` of every memory in row order (cached): ``id_frame()[rows]`` maps
        rows to ids with one frame gather."""
        n = len(self._records)
        if self._id_frame.height != n:
            self._id_frame = pl.DataFrame(
                [self.id_column(), pl.Series("row", np.arange(n, dtype=np.int64))]
            )
        return self._id_frame

    def id_sort_keys(self, rows: np.ndarray) -> np.ndarray:
        """Integer keys of the rows' memory ids that sort as the ids do (``int64``).

        The rank of every id among all ids, computed once per store size (one string sort of
        the ids after writes, none between them), so that candidates are ranked with
        ``np.lexsort`` on integers instead of a string sort per query.
        """
        n = len(self._records)
        if len(self._id_rank) != n:
            ids = np.asarray(self.ids, dtype=str)
            rank = np.empty(n, dtype=np.int64)
            rank[np.argsort(ids, kind="stable")] = np.arange(n, dtype=np.int64)
            self._id_rank = rank
        return self._id_rank[np.asarray(rows, dtype=np.int64)]

    def rows_of(self, memory_ids: Sequence[str] | pl.Series) -> np.ndarray:
        """Store rows of memory ids, in order (``int64``; raises :class:`UnknownMemoryError`)."""
        ids = memory_ids.to_list() if isinstance(memory_ids, pl.Series) else list(memory_ids)
        try:
            return np.fromiter(map(self._index.__getitem__, ids), dtype=np.int64, count=len(ids))
        except KeyError as error:
            raise UnknownMemoryError(f"unknown memory id {error.args[0]!r}") from None

    @property
    def texts(self) -> list[str]:
        """Every (scrubbed) text in row order."""
        return [r.text for r in self._records]

    def column(self, name: str) -> np.ndarray:
        """A read-only view of a numpy column (see ``_Columns.SPEC``) over all rows."""
        view = self._cols.view(name)
        view = view.view()
        view.flags.writeable = False
        return view

    def client_code(self, client_id: str) -> int:
        """Integer code of a client id (-1 when the store has never seen it)."""
        return self._clients.get(client_id, -1)

    # ------------------------------------------------------------------ write path
    def prepare_text(self, text: str) -> tuple[str, int]:
        """Validate and scrub ``text`` exactly as :meth:`store` will: (scrubbed text, redactions).

        Replays call this to embed the scrubbed text ahead of the writes.
        """
        if not isinstance(text, str):
            raise TypeError(f"field 'text' must be a string, got {type(text).__name__}")
        if not text.strip():
            raise MemoryInputError("field 'text' must not be empty")
        if len(text) > self.max_text_chars:
            raise MemoryInputError(
                f"field 'text' is {len(text)} characters long; the limit is {self.max_text_chars}"
            )
        try:
            text.encode("utf-8")
        except UnicodeEncodeError:
            raise MemoryInputError("field 'text' is not valid UTF-8") from None
        return self.scrubber.scrub(text)

    def store(
        self,
        text: str,
        type: str = "event",
        *,
        source_agent: str = "unknown",
        client_id: str = GLOBAL_CLIENT,
        key: str | None = None,
        subject: str | None = None,
        status_value: str | None = None,
        importance: str = "medium",
        category: str | None = None,
        knowledge_category: str = "general",
        valid_from: float | str | None = None,
        metadata: dict[str, Any] | None = None,
        confidence: float = 1.0,
        authority: str = "unverified_agent",
        now: float | str | None = None,
        embedding: np.ndarray | Sequence[float] | None = None,
        id: str | None = None,
        scope: str = TEAM,
    ) -> WriteResult:
        """Store one memory through the full write path (see the module docstring).

        Args:
            text: Memory content; credentials are scrubbed before anything else sees it.
            type: ``event``, ``fact``, ``decision`` or ``status``.
            source_agent: The agent writing.
            client_id: Tenant scope (``"global"`` is system-wide).
            key: Facts: upsert key (a new fact with the key of an active fact supersedes it).
            subject: Statuses: what the status is about (supersedes by subject).
            status_value: Statuses: the value.
            importance: ``critical``, ``high``, ``medium`` or ``low``.
            category: ``semantic``, ``episodic``, ``procedural`` or ``None``.
            knowledge_category: One of the seed's knowledge categories.
            valid_from: Facts/statuses: when it became true (default: ``now``).
            metadata: Arbitrary JSON-serialisable metadata.
            confidence: Base confidence in [0, 1].
            authority: Source authority (seed 003 §6.4): ``human``, ``verified_agent``,
                ``unverified_agent`` or ``inferred``.
            now: The write time (default: wall clock).
            embedding: Vector of the *scrubbed* text; computed with the embedder when ``None``.
            id: Memory id to use (default: a deterministic UUID).
            scope: Namespace inside the client (``team``, ``agent:{name}``,
                ``project:{name}``); dedup and supersession act within one scope.

        Returns:
            A :class:`WriteResult`.

        Raises:
            TypeError, MemoryInputError: On bad input (nothing is stored).
            DecisionImmutableError: On a decision whose key names an active decision.
        """
        scrubbed, redactions = self.prepare_text(text)
        _check_choice(type, "type", MEMORY_TYPES, optional=False)
        _check_str(source_agent, "source_agent", optional=False)
        _check_str(client_id, "client_id", optional=False)
        try:
            check_scope(scope)
        except ValueError as exc:
            raise MemoryInputError(str(exc)) from None
        _check_str(key, "key", optional=True)
        _check_str(subject, "subject", optional=True)
        if status_value is not None and not isinstance(status_value, str):
            raise TypeError("field 'status_value' must be a string")
        _check_choice(importance, "importance", IMPORTANCE_LEVELS, optional=False)
        _check_choice(authority, "authority", AUTHORITY_LEVELS, optional=False)
        _check_choice(category, "category", CATEGORIES, optional=True)
        _check_choice(
            knowledge_category, "knowledge_category", KNOWLEDGE_CATEGORIES, optional=False
        )
        if metadata is not None and not isinstance(metadata, dict):
            kind = metadata.__class__.__name__
            raise TypeError(f"field 'metadata' must be an object, got {kind}")
        check_json_value(metadata, "metadata")  # NaN, deep nesting, lone surrogates
        if metadata:
            try:
                json.dumps(metadata, allow_nan=False)
            except (TypeError, ValueError) as exc:
                raise MemoryInputError(
                    f"field 'metadata' is not JSON-serialisable ({exc})"
                ) from None
        if isinstance(confidence, bool) or not isinstance(confidence, (int, float)):
            raise TypeError("field 'confidence' must be a number")
        if not 0.0 <= float(confidence) <= 1.0:
            raise MemoryInputError(f"field 'confidence' must lie in [0, 1], got {confidence}")
        if id is not None:
            _check_str(id, "id", optional=False)
            if id in self._index:
                raise MemoryInputError(scrub_message(f"field 'id': {id!r} is already in the store"))
        t_now = _check_time(now, "now")
        t_valid = None if valid_from is None else _check_time(valid_from, "valid_from")
        vector = None if embedding is None else self._check_vector(embedding, "embedding")
        # Every stored string field is scrubbed, not only the text.
        (source_agent, key, subject, status_value), n_fields = self.scrubber.scrub_value(
            (source_agent, key, subject, status_value)
        )
        try:
            metadata, n_meta = self.scrubber.scrub_value(metadata, field="metadata")
        except ValueError as exc:
            raise MemoryInputError(str(exc)) from None
        redactions += n_fields + n_meta
        h = content_hash(scrubbed)

        existing = self._dedup.get((client_id, scope, type, h))
        if existing is not None:
            return self._corroborate(existing, source_agent, t_now, redactions)

        old_idx: int | None = None
        if type == "fact":
            if key is None:
                log.warning("fact stored without a key: it can never be superseded")
            else:
                old_idx = self._by_key.get((client_id, scope, key))
        elif type == "status":
            if subject is None:
                log.warning("status stored without a subject: it can never be superseded")
            else:
                old_idx = self._by_subject.get((client_id, scope, subject))
        elif type == "decision" and key is not None:
            for rec in self._records:
                if rec.type == "decision" and rec.active and rec.key == key:
                    raise DecisionImmutableError(
                        f"decision {rec.id} has key {key!r}: decisions are immutable and "
                        "can never be superseded; store a new decision with another key"
                    )

        if vector is None and self.embedder is not None:
            vector = self._check_vector(
                self.embedder.embed([scrubbed])[0], "embedding (from the embedder)"
            )

        mem_id = id if id is not None else self._new_id(h, client_id, type, t_now)
        mentions = self.extractor.extract(
            scrubbed,
            client_id=None if client_id == GLOBAL_CLIENT else client_id,
            source_agent=source_agent,
        )
        rec = MemoryRecord(
            id=mem_id,
            text=scrubbed,
            type=type,
            source_agent=source_agent,
            client_id=client_id,
            observed_by=[source_agent],
            observation_count=1,
            category=category,
            importance=importance,
            knowledge_category=knowledge_category,
            content_hash=h,
            created_at=t_now,
            confidence=float(confidence),
            authority=authority,
            supersedes=None if old_idx is None else self._records[old_idx].id,
            key=key,
            subject=subject,
            status_value=status_value,
            valid_from=t_valid if t_valid is not None else t_now,
            entities=[m.entity.to_dict() for m in mentions],
            metadata=dict(metadata) if metadata else {},
            scope=scope,
        )
        with self._transaction():
            idx = self._append(rec, vector)
            superseded = None
            if old_idx is not None:
                superseded = self._supersede(old_idx, idx, t_now)
            self._index_entities(idx, mentions)
        return WriteResult(mem_id, "created", superseded, redactions)

    def _check_vector(self, embedding: Any, name: str) -> np.ndarray:
        """A finite 1-D float32 vector of the index's dimension (checked before any write)."""
        try:
            vector = np.asarray(embedding, dtype=np.float32).reshape(-1)
        except (TypeError, ValueError):
            raise MemoryInputError(f"field '{name}' must be a vector of numbers") from None
        if vector.shape[0] == 0:
            raise MemoryInputError(f"field '{name}' is empty")
        if not np.all(np.isfinite(vector)):
            raise MemoryInputError(f"field '{name}' holds a non-finite value")
        dim = self.vectors.dim
        if dim is not None and vector.shape[0] != dim:
            raise MemoryInputError(
                f"field '{name}': expected dimension {dim}, got {vector.shape[0]}"
            )
        return vector

    def _new_id(self, h: str, client_id: str, type_: str, t_now: float) -> str:
        seed = f"{h}|{client_id}|{type_}|{t_now!r}|{len(self._records)}".encode()
        return str(uuid.UUID(bytes=hashlib.sha256(seed).digest()[:16], version=4))

    def _append(self, rec: MemoryRecord, vector: np.ndarray | None) -> int:
        idx = self._index_in_memory(rec, vector)
        blob = None if vector is None else self.vectors.get(idx).tobytes()
        payload = self._payload(rec)
        self._exec(
            "INSERT INTO memories (idx, id, client_id, type, content_hash, active, payload, vector)"
            " VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
            (idx, rec.id, rec.client_id, rec.type, rec.content_hash, int(rec.active),
             payload, blob),
        )
        self._version(rec, "created", rec.created_at, payload)
        if vector is not None:
            self._chroma_pending[rec.id] = idx
        self.version += 1
        return idx

    @staticmethod
    def _payload(rec: MemoryRecord) -> str:
        return json.dumps(
            {name: getattr(rec, name) for name in _RECORD_FIELDS}, ensure_ascii=False
        )

    def _version(
        self, rec: MemoryRecord, change: str, at: float, payload: str | None = None
    ) -> None:
        self._exec(
            "INSERT INTO versions (memory_id, at, change, payload) VALUES (?, ?, ?, ?)",
            (rec.id, at, change, payload if payload is not None else self._payload(rec)),
        )

    def _save(self, idx: int, change: str | None, at: float) -> None:
        """Write a changed record back to SQLite (and the columns), logging a version."""
        rec = self._records[idx]
        self._sync_columns(idx)
        payload = self._payload(rec)
        self._exec(
            "UPDATE memories SET active = ?, payload = ? WHERE idx = ?",
            (int(rec.active), payload, idx),
        )
        if change is not None:
            self._version(rec, change, at, payload)
            if self.vectors.present[idx]:
                self._chroma_pending[rec.id] = idx
        self.version += 1

    def _deactivate(self, idx: int) -> None:
        rec = self._records[idx]
        rec.active = False
        cs = (rec.client_id, rec.scope)
        if self._dedup.get((*cs, rec.type, rec.content_hash)) == idx:
            del self._dedup[(*cs, rec.type, rec.content_hash)]
        if rec.key is not None and self._by_key.get((*cs, rec.key)) == idx:
            del self._by_key[(*cs, rec.key)]
        if rec.subject is not None and self._by_subject.get((*cs, rec.subject)) == idx:
            del self._by_subject[(*cs, rec.subject)]

    def _supersede(self, old_idx: int, new_idx: int, t_now: float) -> str:
        old, new = self._records[old_idx], self._records[new_idx]
        if old.type == "decision":
            raise DecisionImmutableError(f"decision {old.id} can never be superseded")
        self._deactivate(old_idx)
        old.superseded_by = new.id
        old.superseded_at = t_now
        old.valid_to = t_now
        new.supersedes = old.id
        self._save(old_idx, "superseded", t_now)
        return old.id

    def _corroborate(self, idx: int, agent: str, t_now: float, redactions: int) -> WriteResult:
        rec = self._records[idx]
        if agent in rec.observed_by:
            return WriteResult(rec.id, "deduplicated", None, redactions)
        if len(rec.observed_by) < self.max_observed_by:
            with self._transaction():
                rec.observed_by.append(agent)
                rec.observation_count = len(rec.observed_by)
                self._save(idx, "corroborated", t_now)
        return WriteResult(rec.id, "corroborated", None, redactions)

    def _index_entities(self, idx: int, mentions: Sequence[EntityMention]) -> None:
        ent_idxs: list[int] = []
        links = []
        for m in mentions:
            e = self._entity_idx(m.entity)
            self.graph.link(e, idx, m.role)
            links.append((e, idx, m.role))
            if e not in ent_idxs:
                ent_idxs.append(e)
        self._exec_many(
            "INSERT OR IGNORE INTO entity_memory_links (entity_idx, memory_idx, role)"
            " VALUES (?, ?, ?)",
            links,
        )
        if len(ent_idxs) > 1:
            self.graph.co_occur(ent_idxs)
            pairs = [(a, b) for i, a in enumerate(ent_idxs) for b in ent_idxs[i + 1 :]]
            self._save_relations(pairs, "co_occurrence")

    def _entity_idx(self, entity: Entity) -> int:
        n_before = self.graph.n_entities
        e = self.graph.add_entity(entity)
        if self.graph.n_entities > n_before:
            stored = self.graph.entity(e)
            # A plain INSERT: an index taken by another entity is an error, never overwritten.
            self._exec(
                "INSERT INTO entities (idx, name, type) VALUES (?, ?, ?)",
                (e, stored.name, stored.type),
            )
        return e

    def _save_relations(self, pairs: Sequence[tuple[int, int]], relation: str) -> None:
        rows = []
        for a, b in pairs:
            src, dst = (min(a, b), max(a, b)) if relation == "co_occurrence" else (a, b)
            rows.append((src, dst, relation, float(self.graph.strength(src, dst, relation))))
        self._exec_many(
            "INSERT INTO entity_relationships (src, dst, relation, strength) VALUES (?, ?, ?, ?)"
            " ON CONFLICT (src, dst, relation) DO UPDATE SET strength = excluded.strength",
            rows,
        )

    def relate(
        self,
        from_entity: str,
        relation: str,
        to_entity: str,
        *,
        from_type: str = "concept",
        to_type: str = "concept",
        now: float | str | None = None,
    ) -> float:
        """Record a typed relationship between two entities; returns its new strength.

        Names resolve through the alias cache and the graph (an unknown name becomes a new
        entity of ``from_type`` / ``to_type``).

        Raises:
            MemoryInputError: A bad relation or name, or both names naming one entity (nothing
                is written).
        """
        _check_choice(relation, "relation", RELATION_TYPES, optional=False)
        _check_str(from_entity, "from", optional=False)
        _check_str(to_entity, "to", optional=False)
        from_entity = self.scrubber.scrub(from_entity)[0]
        to_entity = self.scrubber.scrub(to_entity)[0]
        _check_str(from_type, "from_type", optional=False)
        _check_str(to_type, "to_type", optional=False)
        if now is not None:
            _check_time(now, "now")
        found_a, ent_a = self._lookup_entity(from_entity, from_type)
        found_b, ent_b = self._lookup_entity(to_entity, to_type)
        same = (
            found_a == found_b
            if found_a is not None or found_b is not None
            else (" ".join(ent_a.name.split()).lower(), ent_a.type)
            == (" ".join(ent_b.name.split()).lower(), ent_b.type)
        )
        if same:
            raise MemoryInputError(
                scrub_message(f"relate: {from_entity!r} and {to_entity!r} name the same entity")
            )
        with self._transaction():
            a = found_a if found_a is not None else self._entity_idx(ent_a)
            b = found_b if found_b is not None else self._entity_idx(ent_b)
            strength = self.graph.add_relation(a, b, relation)
            self._save_relations([(a, b)], relation)
            self.version += 1
        return float(strength)

    def _lookup_entity(self, name: str, type_: str) -> tuple[int | None, Entity]:
        """A named entity and its graph index (``None`` when new): known name, alias, or the
        type extraction gives it. Changes nothing.

        ``acme.com`` becomes a ``domain`` and ``Postgres`` the ``technology`` PostgreSQL, so a
        relation written before any memory mentions them joins the same nodes extraction will.
        """
        alias = self.extractor.resolve(name)
        if alias is not None:
            return self.graph.find(alias.name, alias.type), alias
        for ent in self.extractor.extract_query_entities(name):
            if ent.name.lower() == name.strip().lower():
                return self.graph.find(ent.name, ent.type), ent
        found = self.graph.find(name)
        if found is not None:
            return found, self.graph.entity(found)
        return None, Entity(name, type_)

    def _resolve_entity(self, name: str, type_: str) -> int:
        """Graph index of a named entity (see :meth:`_lookup_entity`), created when new."""
        found, entity = self._lookup_entity(name, type_)
        return found if found is not None else self._entity_idx(entity)

    def retire(
        self, memory_id: str, change: str, *, now: float | str | None = None, **updates: Any
    ) -> MemoryRecord:
        """Deactivate a memory, set payload fields (``expired_at=…``), and log the change.

        Lifecycle jobs (TTL expiry, merges) use this; it refuses decisions.
        """
        idx = self.idx(memory_id)
        rec = self._records[idx]
        if rec.type == "decision":
            raise DecisionImmutableError(f"decision {memory_id} is immutable")
        _check_str(change, "change", optional=False)
        updates = self._check_updates(updates)
        t_now = _check_time(now, "now")
        with self._transaction():
            self._deactivate(idx)
            for name, value in updates.items():
                setattr(rec, name, value)
            self._save(idx, change, t_now)
        return rec

    _FIXED_FIELDS = frozenset(
        ("id", "text", "type", "client_id", "content_hash", "created_at", "valid_from", "active")
    )

    @classmethod
    def _check_updates(cls, updates: dict[str, Any]) -> dict[str, Any]:
        """Validate payload updates before anything changes (times become epoch seconds)."""
        unknown = sorted(set(updates) - set(_RECORD_FIELDS))
        if unknown:
            raise TypeError(f"unknown payload field(s): {', '.join(unknown)}")
        fixed = sorted(set(updates) & cls._FIXED_FIELDS)
        if fixed:
            raise MemoryInputError(f"payload field(s) {', '.join(fixed)} cannot be changed")
        out: dict[str, Any] = {}
        for name, value in updates.items():
            if name in _TIME_FIELDS and value is not None:
                value = _check_time(value, name)
            else:
                try:
                    json.dumps(value, allow_nan=False)
                except (TypeError, ValueError) as exc:
                    raise MemoryInputError(
                        f"field '{name}' is not JSON-serialisable ({exc})"
                    ) from None
            out[name] = value
        return out

    def save(self, memory_id: str, change: str, *, now: float | str | None = None) -> None:
        """Persist in-place edits of a record's descriptive fields and log a version.

        For fields that do not move it through the lifecycle (``knowledge_category``,
        ``consolidated``, ``metadata``); lifecycle moves go through :meth:`retire`.
        """
        idx = self.idx(memory_id)
        _check_str(change, "change", optional=False)
        t_now = _check_time(now, "now")
        with self._transaction():
            self._save(idx, change, t_now)

    def persist_relations(self) -> None:
        """Rewrite the relationship table from the graph (after a Hebbian update)."""
        edges = self.graph.edges_frame()
        with self._transaction():
            self._exec("DELETE FROM entity_relationships")
            self._exec_many(
                "INSERT INTO entity_relationships (src, dst, relation, strength)"
                " VALUES (?, ?, ?, ?)",
                edges.select("src", "dst", "relation", "strength").rows(),
            )

    def forget(self, memory_id: str, reason: str, *, now: float | str | None = None) -> None:
        """Soft-delete a memory (seed 003 ``forget``): inactive, reason kept, never returned."""
        idx = self.idx(memory_id)
        rec = self._records[idx]
        _check_str(reason, "reason", optional=False)
        reason = self.scrubber.scrub(reason)[0]
        if rec.type == "decision":
            raise DecisionImmutableError(
                f"decision {memory_id} is immutable (an audit trail) and cannot be forgotten"
            )
        t_now = _check_time(now, "now")
        self.retire(
            memory_id,
            "forgotten",
            now=t_now,
            forgotten_reason=reason,
            expired_at=t_now,
            valid_to=rec.valid_to if rec.valid_to is not None else t_now,
        )

    def restore(self, memory_id: str, *, now: float | str | None = None) -> MemoryRecord:
        """Undo a ``forget`` (seed 003: soft deletes are kept for undo until purged).

        Raises:
            MemoryInputError: If the memory was not forgotten, was purged, or a memory written
                since holds its dedup, key or subject slot.
        """
        idx = self.idx(memory_id)
        rec = self._records[idx]
        if rec.forgotten_reason is None:
            raise MemoryInputError(f"memory {memory_id} is not forgotten")
        if rec.purged_at is not None:
            raise MemoryInputError(f"memory {memory_id} was purged and cannot be restored")
        slots = [(self._dedup, (rec.client_id, rec.type, rec.content_hash))]
        if rec.type == "fact" and rec.key is not None:
            slots.append((self._by_key, (rec.client_id, rec.key)))
        if rec.type == "status" and rec.subject is not None:
            slots.append((self._by_subject, (rec.client_id, rec.subject)))
        for table, slot in slots:
            if slot in table:
                other = self._records[table[slot]].id
                raise MemoryInputError(f"memory {memory_id} cannot be restored: {other} holds it")
        t_now = coerce_ts(now, field="now") if now is not None else time.time()
        with self.batch():
            rec.active = True
            rec.forgotten_reason = None
            rec.expired_at = None
            rec.valid_to = None
            for table, slot in slots:
                table[slot] = idx
            self._save(idx, "restored", t_now)
        return rec

    def purge(self, memory_id: str, *, now: float | str | None = None) -> MemoryRecord:
        """Erase a forgotten memory's content for good (seed 003: purged after the undo window).

        The row stays (ids and row numbers are stable) with an empty text, no entities, no
        metadata and no vector; the payloads of its earlier versions are erased too.
        """
        idx = self.idx(memory_id)
        rec = self._records[idx]
        if rec.forgotten_reason is None:
            raise MemoryInputError(f"memory {memory_id} is not forgotten; forget it first")
        t_now = coerce_ts(now, field="now") if now is not None else time.time()
        with self.batch():
            rec.text = ""
            rec.entities = []
            rec.metadata = {}
            rec.purged_at = t_now
            self.vectors.set(idx, None)
            self._db.execute("UPDATE memories SET vector = NULL WHERE idx = ?", (idx,))
            self._db.execute(
                "UPDATE versions SET payload = '{}' WHERE memory_id = ?", (memory_id,)
            )
            self._chroma_pending.pop(memory_id, None)
            if self._chroma is not None:
                self._chroma.delete([memory_id])
            self._save(idx, "purged", t_now)
        return rec

    def correct(
        self,
        memory_id: str,
        new_text: str,
        reason: str,
        *,
        now: float | str | None = None,
        source_agent: str | None = None,
        embedding: np.ndarray | Sequence[float] | None = None,
        id: str | None = None,
    ) -> WriteResult:
        """Supersede a memory with corrected text (seed 004 ``correct_memory``), linked both ways.

        The correction keeps the old memory's client, scope and payload fields; ``id`` names the
        new memory (default: a deterministic UUID).
        """
        idx = self.idx(memory_id)
        old = self._records[idx]
        _check_str(reason, "reason", optional=False)
        reason = self.scrubber.scrub(reason)[0]
        if old.type == "decision":
            raise DecisionImmutableError(
                f"decision {memory_id} is immutable and cannot be corrected; "
                "record a new decision instead"
            )
        if not old.active:
            raise MemoryInputError(f"memory {memory_id} is not active and cannot be corrected")
        if source_agent is not None:
            _check_str(source_agent, "source_agent", optional=False)
        t_now = _check_time(now, "now")
        self.prepare_text(new_text)
        if embedding is not None:
            embedding = self._check_vector(embedding, "embedding")
        with self._transaction():
            self._deactivate(idx)
            result = self.store(
                new_text,
                old.type,
                source_agent=source_agent or old.source_agent,
                client_id=old.client_id,
                key=old.key,
                subject=old.subject,
                status_value=old.status_value,
                importance=old.importance,
                category=old.category,
                knowledge_category=old.knowledge_category,
                metadata={**old.metadata, "correction_reason": reason},
                now=t_now,
                embedding=embedding,
                id=id,
                scope=old.scope,
            )
            new_idx = self._index[result.id]
            old.superseded_by = result.id
            old.superseded_at = t_now
            old.valid_to = t_now
            self._records[new_idx].supersedes = old.id
            self._save(idx, "corrected", t_now)
            self._save(new_idx, None, t_now)
        return WriteResult(result.id, "created", old.id, result.redactions)

    # ------------------------------------------------------------------ read side
    def visible_mask(
        self,
        *,
        client_id: str | None = None,
        at_time: float | str | None = None,
        include_superseded: bool = False,
        now: float | str | None = None,
        principal: Principal | None = None,
    ) -> np.ndarray:
        """Which rows a read may see; every stage filters through this one function.

        Args:
            client_id: Scope: that client's memories and ``"global"`` ones; ``None`` = all.
            at_time: Temporal query: memories valid then (``valid_from <= t < valid_to``),
                superseded versions included, forgotten ones never.
            include_superseded: Show inactive history too (forgotten memories stay hidden).
            now: Rows created after ``now`` are invisible (replays never see the future).
                Lifecycle flags are the store's current ones: on a store that already holds
                later writes, a version superseded after ``now`` is hidden too — ask with
                ``at_time=now`` for the state as of then.
            principal: The agent reading (:class:`~memlab.memory.scopes.Principal`): only the
                ``team`` scope, its own ``agent:`` scope and its projects' scopes are visible.
                ``None`` is a human, who reads every scope.
        """
        c = self._cols
        n = c.n
        mask = np.ones(n, dtype=bool)
        if now is not None:
            mask &= c.created_at[:n] <= coerce_ts(now, field="now")
        if client_id is not None:
            codes = [self._clients.get(client_id, -2), self._clients.get(GLOBAL_CLIENT, -2)]
            mask &= np.isin(c.client[:n], codes)
        if at_time is not None:
            t = coerce_ts(at_time, field="at_time")
            mask &= (c.valid_from[:n] <= t) & (t < c.valid_to[:n]) & ~c.forgotten[:n]
        elif include_superseded:
            mask &= ~c.forgotten[:n]
        else:
            mask &= c.active[:n]
        if principal is not None:
            mask &= np.isin(c.scope[:n], self.scope_codes(principal))
        return mask

    def scope_codes(self, principal: Principal) -> list[int]:
        """Codes of the scopes ``principal`` may read (scopes never seen are left out)."""
        return [self._scopes[s] for s in principal.readable_scopes() if s in self._scopes]

    def promote(self, memory_id: str, *, now: float | str | None = None) -> WriteResult:
        """Move a memory to the ``team`` scope (seed 003 ``promote``).

        An active team fact with the same key (a status with the same subject) is superseded by
        the promoted memory. Promoting text that the team scope already holds is refused: the
        team copy is named in the error.
        """
        idx = self.idx(memory_id)
        rec = self._records[idx]
        if rec.scope == TEAM:
            raise MemoryInputError(f"memory {memory_id} is already in the team scope")
        if not rec.active:
            raise MemoryInputError(f"memory {memory_id} is not active and cannot be promoted")
        dup = self._dedup.get((rec.client_id, TEAM, rec.type, rec.content_hash))
        if dup is not None:
            raise MemoryInputError(
                f"memory {memory_id}: the team scope already holds this text as "
                f"{self._records[dup].id}"
            )
        t_now = coerce_ts(now, field="now") if now is not None else time.time()
        old_idx = None
        if rec.type == "fact" and rec.key is not None:
            old_idx = self._by_key.get((rec.client_id, TEAM, rec.key))
        elif rec.type == "status" and rec.subject is not None:
            old_idx = self._by_subject.get((rec.client_id, TEAM, rec.subject))
        with self.batch():
            self._deactivate(idx)
            rec.scope = TEAM
            rec.active = True
            self._cols.scope[idx] = self._scopes.setdefault(TEAM, len(self._scopes))
            self._register_active(idx)
            superseded = None
            if old_idx is not None and old_idx != idx:
                superseded = self._supersede(old_idx, idx, t_now)
            self._save(idx, "promoted", t_now)
        self.scope_version += 1
        return WriteResult(rec.id, "promoted", superseded, 0)

    def touch(self, memory_ids: Sequence[str], *, now: float | str | None = None) -> None:
        """Count a search hit for each id: ``access_count += 1``, ``last_accessed_at = now``."""
        if isinstance(memory_ids, str):
            raise TypeError("field 'memory_ids' must be a list of ids, got a string")
        t_now = _check_time(now, "now")
        rows = [self.idx(mid) for mid in memory_ids]
        with self._transaction():
            for idx in rows:
                rec = self._records[idx]
                rec.access_count += 1
                rec.last_accessed_at = t_now
                self._save(idx, None, t_now)

    def search(
        self,
        query: str,
        *,
        k: int = 10,
        client_id: str | None = None,
        at_time: float | str | None = None,
        include_superseded: bool = False,
        now: float | str | None = None,
        decay_factor: float = 0.98,
        boost_weight: float = 0.3,
        min_similarity: float = 0.3,
        touch: bool = True,
    ) -> pl.DataFrame:
        """Seed 000's vector search: cosine ≥ ``min_similarity`` × decay × access boost.

        A convenience for interactive use; evaluations compose stages instead. Returned hits
        count as accesses unless ``touch=False``.

        Returns:
            A frame ``mem_id, text, type, similarity, effective_score``, best first.
        """
        from memlab.memory.lifecycle import days_since, lifecycle_factor

        k = _check_k(k)
        if self.embedder is None:
            raise MemoryInputError("search needs an embedder: pass embedder= to MemoryStore")
        t_now = _check_time(now, "now")
        qvec = np.asarray(self.embedder.embed([query])[0], dtype=np.float32)
        sims = self.vectors.similarities(qvec)
        mask = self.visible_mask(
            client_id=client_id, at_time=at_time, include_superseded=include_superseded, now=t_now
        ) & (sims >= min_similarity)
        rows = np.flatnonzero(mask)
        c = self._cols
        factor = lifecycle_factor(
            c.type[rows],
            c.confidence[rows],
            days_since(t_now, c.last_accessed_at[rows], c.created_at[rows]),
            c.access_count[rows],
            decay_factor=decay_factor,
            boost_weight=boost_weight,
        )
        scores = sims[rows] * factor
        order = np.lexsort((rows, -scores))[:k]
        hits = rows[order]
        frame = pl.DataFrame(
            {
                "mem_id": [self._records[i].id for i in hits],
                "text": [self._records[i].text for i in hits],
                "type": [self._records[i].type for i in hits],
                "similarity": sims[hits].astype(np.float64),
                "effective_score": scores[order].astype(np.float64),
            },
            schema={
                "mem_id": pl.String,
                "text": pl.String,
                "type": pl.String,
                "similarity": pl.Float64,
                "effective_score": pl.Float64,
            },
        )
        if touch and len(hits):
            self.touch(frame["mem_id"].to_list(), now=t_now)
        return frame

    def history(self, memory_id: str) -> pl.DataFrame:
        """Every saved version of a memory: ``seq, at, change, payload`` (JSON)."""
        rows = self._exec(
            "SELECT seq, at, change, payload FROM versions WHERE memory_id = ? ORDER BY seq",
            (memory_id,),
        ).fetchall()
        return pl.DataFrame(
            rows, schema=["seq", "at", "change", "payload"], orient="row"
        )

    def records_frame(self) -> pl.DataFrame:
        """All records as a frame (one row per memory, payload columns, epoch-second times)."""
        cols: dict[str, list[Any]] = {name: [] for name in _RECORD_FIELDS}
        for rec in self._records:
            for name in _RECORD_FIELDS:
                cols[name].append(getattr(rec, name))
        cols["entities"] = [json.dumps(v) for v in cols["entities"]]
        cols["metadata"] = [json.dumps(v, sort_keys=True) for v in cols["metadata"]]
        return pl.DataFrame(cols, strict=False, infer_schema_length=None)

    def query_entities(self, text: str, *, known_types: Sequence[str] = ()) -> list[int]:
        """Graph indices of the entities named in a query.

        Fast-path extraction finds the seed's patterns (technologies, domains, quoted and
        capitalised names). ``known_types`` adds a dictionary match against the names of the
        graph's entities of those types (e.g. ``("agent",)``: a question naming "Caroline"
        finds the agent entity of Caroline's memories, which a single capitalised word alone
        would not), as seed 000 extends its dictionaries from the entity table.
        """
        out: list[int] = []
        for ent in self.extractor.extract_query_entities(text):
            found = self.graph.find(ent.name, ent.type)
            if found is None:
                found = self.graph.find(ent.name)
            if found is not None and found not in out:
                out.append(found)
        if known_types:
            for idx in self._known_name_matches(text, tuple(known_types)):
                if idx not in out:
                    out.append(idx)
        return out

    def mask_known_names(self, text: str, *, known_types: Sequence[str]) -> str:
        """``text`` without the names of the graph's entities of ``known_types``.

        Each name (matched as :meth:`query_entities` matches it, case-insensitively, with a
        possessive ``'s`` or ``'`` after it) is removed and the spaces are collapsed: "What
        did Caroline's mother give Melanie?" becomes "What did mother give?". A text left with
        no words is returned unchanged.
        """
        pattern, _ = self._known_name_pattern(tuple(known_types))
        if pattern is None:
            return text
        masked = re.sub(r"\s+([?!.,;:])", r"\1", " ".join(pattern.sub(" ", text).split()))
        return masked if masked.strip("?!.,;: ") else text

    def _known_name_pattern(
        self, types: tuple[str, ...]
    ) -> tuple[re.Pattern[str] | None, dict[str, int]]:
        """A regex matching the names of the entities of ``types`` (``None`` when there are
        none), with a name-to-index map; rebuilt when the graph gains entities."""
        key = (types, self.graph.n_entities)
        cached = self._known_patterns.get(types)
        if cached is None or cached[0] != key:
            names: dict[str, int] = {}
            for idx in range(self.graph.n_entities):
                ent = self.graph.entity(idx)
                if ent.type in types and len(ent.name) >= 3:
                    names.setdefault(ent.name.lower(), idx)
            pattern = None
            if names:
                alternation = "|".join(
                    re.escape(n) for n in sorted(names, key=lambda n: (-len(n), n))
                )
                pattern = re.compile(
                    rf"(?<![\w-])({alternation})(?:'s|’s|'|’)?(?![\w-])", re.IGNORECASE
                )
            cached = (key, pattern, names)
            self._known_patterns[types] = cached
        return cached[1], cached[2]

    def _known_name_matches(self, text: str, types: tuple[str, ...]) -> list[int]:
        pattern, names = self._known_name_pattern(types)
        if pattern is None:
            return []
        return [names[m.group(1).lower()] for m in pattern.finditer(text)]

    # ------------------------------------------------------------------ batches & persistence
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

    def _exec(self, sql: str, params: Sequence[Any] = ()) -> sqlite3.Cursor:
        """Run one statement; SQLite and OS errors become one :class:`StoreError` naming the
        file (never quoting memory text)."""
        if self._db is None:
            raise StoreError(f"{self._db_file}: the store is closed")
        try:
            return self._db.execute(sql, params)
        except (sqlite3.Error, OSError) as exc:
            raise self._store_error(exc) from exc

    def _exec_many(self, sql: str, rows: Sequence[Sequence[Any]]) -> None:
        if self._db is None:
            raise StoreError(f"{self._db_file}: the store is closed")
        try:
            self._db.executemany(sql, rows)
        except (sqlite3.Error, OSError) as exc:
            raise self._store_error(exc) from exc

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

    def _reload(self) -> None:
        """Rebuild records, columns, vectors, lookup tables and the graph from SQLite.

        Called after a rollback so that memory never runs ahead of disk. Counters stay
        monotonic (caches keyed on ``version`` or ``graph.version`` are invalidated).
        """
        version, graph_version = self.version, self.graph.version
        pending = {**self._chroma_pending, **self._chroma_job_ids}
        self.graph = EntityGraph()
        self.vectors = ExactIndex()
        self._records = []
        self._index = {}
        self._cols = _Columns()
        self._id_column = pl.Series("mem_id", [], dtype=pl.String)
        self._id_frame = pl.DataFrame(schema={"mem_id": pl.String, "row": pl.Int64})
        self._id_rank = np.zeros(0, dtype=np.int64)
        self._clients = {}
        self._dedup = {}
        self._by_key = {}
        self._by_subject = {}
        self._known_patterns = {}
        self._load()
        self.graph._version = graph_version + 1  # keep graph-version caches honest
        self.version = version + 1
        self._chroma_pending = {
            mid: self._index[mid]
            for mid in pending
            if mid in self._index and self.vectors.present[self._index[mid]]
        }

    def _chroma_meta(self, idx: int) -> dict[str, Any]:
        rec = self._records[idx]
        c = self._cols
        return {
            "client_id": rec.client_id,
            "type": rec.type,
            "scope": rec.scope,
            "active": bool(rec.active),
            "forgotten": rec.forgotten_reason is not None,
            "created_at": float(rec.created_at),
            "valid_from": float(c.valid_from[idx]),
            "valid_to": float(c.valid_to[idx]) if np.isfinite(c.valid_to[idx]) else 1e300,
        }

    def _flush_chroma(self, *, wait: bool = False) -> None:
        """Hand pending (committed) vectors to chromadb.

        The upsert runs on a background thread while the caller goes on writing to SQLite (the
        source of truth: a write is acknowledged when SQLite commits, and reopening a store
        re-sends anything chromadb missed). One upsert is in flight at a time; ``wait=True``
        blocks until chromadb has everything. Inside a batch nothing is sent (chromadb never
        sees a write that may still roll back). A chromadb failure never fails a write: it is
        logged, the ids stay pending for the next flush, and the next open repairs the index.
        """
        if self._chroma_job is not None:
            job, self._chroma_job = self._chroma_job, None
            try:
                job.result()
                self._chroma_job_ids = {}
            except Exception as exc:  # chromadb raises many types
                log.warning(
                    "chromadb update failed (%s: %s); the index is repaired on the next open",
                    type(exc).__name__,
                    exc,
                )
                self._chroma_pending = {**self._chroma_job_ids, **self._chroma_pending}
                self._chroma_job_ids = {}
                return
        if self._chroma is None or not self._chroma_pending:
            self._chroma_pending.clear()
            return
        if self._batch_depth > 0:
            return
        pending_ids = self._chroma_pending
        pending = sorted(pending_ids.values())
        self._chroma_pending = {}
        ids = [self._records[i].id for i in pending]
        vectors = self.vectors.matrix[pending].copy()
        metas = [self._chroma_meta(i) for i in pending]
        if wait:
            try:
                self._chroma.upsert(ids, vectors, metas)
            except Exception as exc:  # chromadb raises many types
                log.warning(
                    "chromadb update failed (%s: %s); the index is repaired on the next open",
                    type(exc).__name__,
                    exc,
                )
                self._chroma_pending = {**pending_ids, **self._chroma_pending}
            return
        if self._chroma_pool is None:
            from concurrent.futures import ThreadPoolExecutor

            self._chroma_pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="chroma")
        self._chroma_job_ids = pending_ids
        self._chroma_job = self._chroma_pool.submit(self._chroma.upsert, ids, vectors, metas)

    def chroma_index(self) -> ChromaIndex:
        """The chromadb index, built (ephemeral) and filled on first use in an in-memory store."""
        if self._chroma is None:
            self._chroma = ChromaIndex(None)
            self._chroma_pending = {
                r.id: i for i, r in enumerate(self._records) if self.vectors.present[i]
            }
        self._flush_chroma(wait=True)
        return self._chroma

    def chroma_where(
        self,
        *,
        client_id: str | None = None,
        at_time: float | str | None = None,
        include_superseded: bool = False,
        now: float | str | None = None,
        principal: Principal | None = None,
    ) -> dict[str, Any] | None:
        """The chromadb ``where`` filter equivalent to :meth:`visible_mask`."""
        clauses: list[dict[str, Any]] = []
        if now is not None:
            clauses.append({"created_at": {"$lte": coerce_ts(now, field="now")}})
        if client_id is not None:
            clauses.append({"client_id": {"$in": [client_id, GLOBAL_CLIENT]}})
        if principal is not None:
            clauses.append({"scope": {"$in": list(principal.readable_scopes())}})
        if at_time is not None:
            t = coerce_ts(at_time, field="at_time")
            clauses += [
                {"valid_from": {"$lte": t}},
                {"valid_to": {"$gt": t}},
                {"forgotten": False},
            ]
        elif include_superseded:
            clauses.append({"forgotten": False})
        else:
            clauses.append({"active": True})
        if not clauses:
            return None
        return clauses[0] if len(clauses) == 1 else {"$and": clauses}

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

    def _load_rows(self) -> None:
        rows = self._exec("SELECT idx, payload, vector FROM memories ORDER BY idx").fetchall()
        for expected, (idx, payload, blob) in enumerate(rows):
            if idx != expected:
                raise StoreCorruptError(
                    f"{self._db_file}: memories table has a gap at row {expected}"
                )
            data = json.loads(payload)
            rec = MemoryRecord(**{k: data[k] for k in _RECORD_FIELDS if k in data})
            vector = None if blob is None else np.frombuffer(blob, dtype=np.float32)
            self._index_in_memory(rec, vector)
        for idx, name, type_ in self._exec("SELECT idx, name, type FROM entities ORDER BY idx"):
            got = self.graph.add_entity(Entity(name, type_))
            if got != idx:
                raise StoreCorruptError(f"{self._db_file}: entity table out of order at {idx}")
        for e, m, role in self._exec(
            "SELECT entity_idx, memory_idx, role FROM entity_memory_links ORDER BY rowid"
        ):
            self.graph.link(e, m, role)
        for src, dst, rel, strength in self._exec(
            "SELECT src, dst, relation, strength FROM entity_relationships ORDER BY rowid"
        ):
            self.graph.add_relation(src, dst, rel, increment=strength)

    def _index_in_memory(self, rec: MemoryRecord, vector: np.ndarray | None) -> int:
        """Add a record to the in-memory columns, vectors and lookup tables; return its row."""
        idx = self._cols.append()
        self._records.append(rec)
        self._index[rec.id] = idx
        c = self._cols
        c.created_at[idx] = rec.created_at
        c.client[idx] = self._clients.setdefault(rec.client_id, len(self._clients))
        c.type[idx] = rec.type
        c.scope[idx] = self._scopes.setdefault(rec.scope, len(self._scopes))
        c.valid_from[idx] = rec.valid_from if rec.valid_from is not None else rec.created_at
        self._sync_columns(idx)
        self.vectors.set(idx, vector)
        if rec.active:
            self._register_active(idx)
        return idx

    def _register_active(self, idx: int) -> None:
        """Enter an active record in the dedup and supersession lookups (per client and scope)."""
        rec = self._records[idx]
        cs = (rec.client_id, rec.scope)
        self._dedup[(*cs, rec.type, rec.content_hash)] = idx
        if rec.type == "fact" and rec.key is not None:
            self._by_key[(*cs, rec.key)] = idx
        if rec.type == "status" and rec.subject is not None:
            self._by_subject[(*cs, rec.subject)] = idx

    def scope_code(self, scope: str) -> int:
        """Integer code of a scope (-1 when the store has never seen it)."""
        return self._scopes.get(scope, -1)

    def _sync_columns(self, idx: int) -> None:
        """Copy a record's mutable lifecycle fields into the numpy columns."""
        rec = self._records[idx]
        c = self._cols
        c.last_accessed_at[idx] = np.nan if rec.last_accessed_at is None else rec.last_accessed_at
        c.access_count[idx] = rec.access_count
        c.confidence[idx] = rec.confidence
        c.active[idx] = rec.active
        c.forgotten[idx] = rec.forgotten_reason is not None
        c.valid_to[idx] = _NO_END if rec.valid_to is None else rec.valid_to
        c.archived[idx] = rec.archived_at is not None

    def _chroma_diff(self) -> tuple[list[str], list[str], list[tuple[str, str]]]:
        """Compare chromadb with SQLite: (ids missing from chromadb, ids only in chromadb,
        (id, what differs) for ids in both)."""
        assert self._chroma is not None
        sql_ids = {r.id for i, r in enumerate(self._records) if self.vectors.present[i]}
        chroma_ids = set(self._chroma.ids())
        missing = sorted(sql_ids - chroma_ids)
        orphans = sorted(chroma_ids - sql_ids)
        differ: list[tuple[str, str]] = []
        common = sorted(sql_ids & chroma_ids)
        for start in range(0, len(common), 1000):
            chunk = common[start : start + 1000]
            got = self._chroma.get(chunk)
            for mid, emb, meta in zip(
                got["ids"], got["embeddings"], got["metadatas"], strict=True
            ):
                idx = self._index[mid]
                meta = meta or {}
                if not np.allclose(np.asarray(emb), self.vectors.matrix[idx], atol=1e-5):
                    differ.append((mid, "vector differs between SQLite and chromadb"))
                for key, value in self._chroma_meta(idx).items():
                    if meta.get(key) != value:
                        differ.append(
                            (
                                mid,
                                f"chromadb metadata '{key}' is {meta.get(key)!r}, "
                                f"SQLite says {value!r}",
                            )
                        )
        return missing, orphans, differ

    def check(self) -> list[str]:
        """Disagreements within SQLite and between SQLite and chromadb (empty when consistent).

        Reads only (``memlab store check`` opens the store with ``read_only=True``): SQLite's
        ``PRAGMA quick_check``, ids, vectors and filter metadata. Ids only chromadb holds are
        reported whether or not a repair has quarantined them.
        """
        problems: list[str] = []
        for (msg,) in self._exec("PRAGMA quick_check").fetchall():
            if msg != "ok":
                problems.append(f"{self._db_file}: {msg}")
        if self._chroma is None:
            return problems
        self._flush_chroma(wait=True)
        missing, orphans, differ = self._chroma_diff()
        for mid in missing:
            problems.append(f"memory {mid}: in SQLite, missing from chromadb")
        quarantined = set(self._quarantined(orphans))
        for mid in orphans:
            note = " (quarantined: hidden from searches)" if mid in quarantined else ""
            problems.append(f"memory {mid}: in chromadb, missing from SQLite{note}")
        problems += [f"memory {mid}: {what}" for mid, what in differ]
        return problems

    def _quarantined(self, ids: Sequence[str]) -> list[str]:
        """Those of ``ids`` whose chromadb metadata marks them as quarantined orphans."""
        assert self._chroma is not None
        out: list[str] = []
        for start in range(0, len(ids), 1000):
            got = self._chroma.collection.get(
                ids=list(ids[start : start + 1000]), include=["metadatas"]
            )
            for mid, meta in zip(got["ids"], got["metadatas"], strict=True):
                if (meta or {}).get("orphan") is True:
                    out.append(mid)
        return out

    def _reconcile(self) -> None:
        """Make chromadb agree with SQLite (SQLite is the source of truth) without destroying
        anything: rows missing from chromadb, or whose vector or metadata differ (a killed
        writer, a session without chromadb), are rewritten; ids only chromadb holds are
        quarantined — kept, and marked so that no filter returns them (see
        :meth:`drop_orphans`)."""
        if self._chroma is None:
            return
        missing, orphans, differ = self._chroma_diff()
        for mid in [*missing, *(mid for mid, _ in differ)]:
            self._chroma_pending[mid] = self._index[mid]
        done = set(self._quarantined(orphans))
        todo = [mid for mid in orphans if mid not in done]
        if todo:
            log.warning(
                "%d id(s) in chromadb are not in %s: quarantined (kept, hidden from searches)",
                len(todo),
                self._db_file,
            )
            try:
                self._chroma.update_metadata(todo, [dict(_QUARANTINE) for _ in todo])
            except Exception as exc:  # chromadb raises many types
                log.warning("chromadb quarantine failed (%s: %s)", type(exc).__name__, exc)
        self._flush_chroma(wait=True)

    def drop_orphans(self) -> list[str]:
        """Delete from chromadb the ids SQLite does not hold; returns them.

        Repair never does this on its own (the ids may be all that is left of a lost SQLite
        file); call it once the SQLite side is known to be the one to keep.
        """
        if self._chroma is None:
            return []
        if self.read_only:
            raise StoreWriteError(f"{self._db_file}: the store is open read-only")
        self._flush_chroma(wait=True)
        _, orphans, _ = self._chroma_diff()
        self._chroma.delete(orphans)
        return orphans
