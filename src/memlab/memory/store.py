"""The memory store: SQLite records, a vector index, the entity graph, the full write path.

Write path (design §D0.3), in this order: validate → scrub credentials → content hash (first 16 hex
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

Modules. :class:`MemoryStore` is the one public face; each concern lives in its own module as a
part of the class: :mod:`~memlab.memory.sqlite_io` (schema, connection, lock, transactions),
:mod:`~memlab.memory.column_index` (records, id maps, numpy columns, ``visible_mask``),
:mod:`~memlab.memory.write_policy` (validation, scrubbing, dedup, supersession, lifecycle
writes), :mod:`~memlab.memory.entity_index` (entities, links, relations) and
:mod:`~memlab.memory.chroma_mirror` (the chromadb collection, its check and repair).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import polars as pl

from memlab.memory.chroma_mirror import ChromaMirror
from memlab.memory.column_index import ColumnIndex, _Columns
from memlab.memory.entities import Entity, EntityExtractor
from memlab.memory.entity_index import EntityIndexing
from memlab.memory.graph import EntityGraph
from memlab.memory.records import (
    DecisionImmutableError,
    MemoryInputError,
    MemoryRecord,
    StoreCorruptError,
    StoreError,
    StoreLockedError,
    StoreWriteError,
    UnknownMemoryError,
)
from memlab.memory.scrub import Scrubber, default_scrubber
from memlab.memory.sqlite_io import _RECORD_FIELDS, _SCHEMA, DB_NAME, LOCK_NAME, SQLiteIO
from memlab.memory.vectors import ChromaIndex, ExactIndex
from memlab.memory.write_policy import WritePolicy, WriteResult, _check_k, _check_time, content_hash

__all__ = [
    "CHROMA_SYNC",
    "DB_NAME",
    "LOCK_NAME",
    "DecisionImmutableError",
    "MemoryInputError",
    "MemoryRecord",
    "MemoryStore",
    "StoreCorruptError",
    "StoreError",
    "StoreLockedError",
    "StoreWriteError",
    "UnknownMemoryError",
    "WriteResult",
    "content_hash",
]


CHROMA_SYNC: tuple[str, ...] = ("commit", "deferred")
"""When a store hands committed vectors to chromadb (see ``MemoryStore(chroma_sync=...)``)."""


class MemoryStore(WritePolicy, EntityIndexing, ColumnIndex, ChromaMirror, SQLiteIO):
    """Agent memories with their lifecycle, entity graph and vectors.

    Args:
        path: Directory of a persisted store (``memlab.sqlite3`` and ``chroma/`` inside), or
            ``None`` for a store that lives in memory.
        embedder: Embeds text when a write brings no embedding; ``None`` stores such memories
            without a vector.
        max_observed_by: Cap of the corroboration list (design §D0.3: ``MAX_OBSERVED_BY = 20``).
        max_text_chars: Longest text accepted.
        chroma: Keep a chromadb collection in step with the store. ``None`` means yes for a
            persisted store and no in memory (an in-memory store builds an ephemeral collection on
            first use of :meth:`chroma_index`).
        scrubber: Credential scrubber; ``None`` uses the shared default
            (:func:`~memlab.memory.scrub.default_scrubber`).
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
        chroma_sync: When committed vectors go to chromadb. ``"commit"``: after every commit
            (in the background; a commit waits for the previous upsert). ``"deferred"``: they
            stay pending until :meth:`flush_chroma`, a read of :meth:`chroma_index`,
            :meth:`check` or :meth:`close` — chromadb's insert costs about as much CPU as the
            whole write path, so a server under sustained ingest sends them when it is idle
            (``memlab serve``). Either way chromadb is never on the acknowledgement path: SQLite
            and the exact index are the truth, and opening a store re-sends whatever chromadb
            missed.
        defer_sqlite: An in-memory store only: queue SQLite's write statements instead of
            running them, and apply them when something reads SQLite (a failed write's
            rollback, :meth:`history`, :meth:`check`). Writes stay all or nothing; a replay,
            which never reads SQLite back, skips a third of its write cost.

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
        chroma_sync: str = "commit",
        defer_sqlite: bool = False,
    ) -> None:
        self.path = None if path is None else Path(path)
        self.chroma_sync = chroma_sync
        self.embedder = embedder
        # Write warnings (a keyless fact …) are for whoever writes live; a replay of a dataset
        # turns them off rather than repeat them for every pipeline replayed.
        self.warn_writes = True
        self.max_observed_by = max_observed_by
        self.max_text_chars = max_text_chars
        self.scrubber = scrubber if scrubber is not None else default_scrubber()
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
        # Bumped when an existing row's content (text, entities) is rewritten in place (a purge):
        # indexes grown row by row from the text (BM25, MaxP, the entropy gate's word sets)
        # are rebuilt, so no statistic keeps what was erased.
        self.content_version = 0
        self._batch_depth = 0
        self._known_patterns: dict[tuple[str, ...], Any] = {}
        self._prepared: dict[str, tuple[str, int, np.ndarray | None]] = {}
        self._field_scrubs: dict[str, tuple[str, int]] = {}
        self._adopted_scrubs: dict[str, tuple[str, int]] = {}
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
        if chroma_sync not in CHROMA_SYNC:
            raise MemoryInputError(
                f"field 'chroma_sync' must be one of {', '.join(CHROMA_SYNC)}, got {chroma_sync!r}"
            )
        if isinstance(lock_timeout, bool) or not isinstance(lock_timeout, (int, float)):
            raise TypeError(f"field 'lock_timeout' must be a number, got {lock_timeout!r}")
        if read_only and self.path is None:
            raise MemoryInputError("read_only=True needs the path of a persisted store")
        if defer_sqlite and self.path is not None:
            raise MemoryInputError("defer_sqlite=True is for a store in memory (path=None)")
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
            if defer_sqlite:
                self._deferred = []
            if self.path is not None and self._chroma is not None and repair and not read_only:
                self._reconcile()
        except BaseException:
            self._release()
            raise

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
        """Design §D0.6's vector search: cosine ≥ ``min_similarity`` × decay × access boost.

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
            self._index_in_memory(rec, vector, unit=True)  # stored normalised
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
        tables = {r[0] for r in self._exec("SELECT name FROM sqlite_master WHERE type='table'")}
        if "relation_scopes" in tables:  # absent from a store opened read-only before it
            for src, dst, rel, scope, strength in self._exec(
                "SELECT src, dst, relation, scope, strength FROM relation_scopes ORDER BY rowid"
            ):
                self.graph.add_relation_scope(src, dst, rel, scope, increment=strength)
