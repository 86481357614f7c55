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
rows (after the commit), and a purge's deletes after the commit too; if it fails, the write
still stands and the index is repaired on the next open (a purged memory's vector that
chromadb still holds is then deleted: memlab wrote it, and its content was erased).
Reopening reconciles chromadb with SQLite: missing ids, vectors and metadata are rewritten;
ids SQLite does not know are never deleted, only quarantined (metadata
``orphan=True, active=False, forgotten=True``, hidden from every filter) and reported by
:meth:`~MemoryStore.check`. An index chromadb cannot open or read is moved aside to
``chroma.damaged-<UTC time>`` (kept, never deleted) and rebuilt from SQLite
(:mod:`~memlab.memory.chroma_mirror`).

Creation. A new store's ``memlab.sqlite3`` is made complete or not at all: its tables are
committed in a temporary file beside it, which is then linked under the final name, never over
an existing file (:meth:`~memlab.memory.sqlite_io.SQLiteIO._create_db`). A process killed
half-way leaves at most ``memlab.sqlite3.creating-<pid>-<hex>`` (ignored; safe to delete) and
``memlab.lock``; a store is never left empty or without its tables, so an empty file or a
database without memlab's tables at that name is not memlab's: refused, never written to. Rows
that lifecycle writes rewrite (retire, save, promote, correct …) are checked with the rules of a
write and of the loader before they are written, so no write leaves a row behind that would make
the store refuse to open.

Damage. Every row of ``memlab.sqlite3`` is checked as it is read
(:mod:`~memlab.memory.integrity`): rows memlab could not have written are listed by
:meth:`~MemoryStore.check` (table, row, field, what is wrong — never the stored text), and a
writable store refuses to open on them (:meth:`~MemoryStore.ensure_sound`) before it writes
anything, chromadb included.

Processes. A writable persisted store holds an exclusive lock on ``<path>/memlab.lock`` for its
whole lifetime (``filelock``; released by :meth:`~MemoryStore.close` or when the process dies):
one writer process per store directory. A second writer waits up to ``lock_timeout`` seconds,
then raises :class:`~memlab.memory.records.StoreLockedError`. A writer also holds a byte lock
on ``memlab.sqlite3`` itself, so a second writer is kept out even when ``memlab.lock`` was
deleted or replaced under the first (:meth:`~memlab.memory.sqlite_io.SQLiteIO._lock_writer`).
Waiting writers queue (an
``flock`` on the store directory), so a writer that closes the store and reopens it at once
goes behind the ones already waiting instead of taking the lock straight back.
``read_only=True`` (what ``memlab store check`` uses) never writes or creates a file: each read
is one consistent snapshot, which holds the lock *shared* while it reads a store no writer has
open (a writer that opens meanwhile waits for it; :mod:`~memlab.memory.sqlite_io`).

Modules. :class:`MemoryStore` is the one public face; each concern lives in its own module as a
part of the class: :mod:`~memlab.memory.sqlite_io` (schema, connection, lock, transactions),
:mod:`~memlab.memory.column_index` (records, id maps, numpy columns, ``visible_mask``),
:mod:`~memlab.memory.write_policy` (validation, scrubbing, dedup, supersession, lifecycle
writes), :mod:`~memlab.memory.entity_index` (entities, links, relations) and
:mod:`~memlab.memory.chroma_mirror` (the chromadb collection, its check and repair).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import polars as pl

from memlab.memory.chroma_mirror import ChromaMirror
from memlab.memory.column_index import ColumnIndex, _Columns
from memlab.memory.entities import Entity, EntityExtractor
from memlab.memory.entity_index import EntityIndexing
from memlab.memory.graph import EntityGraph
from memlab.memory.integrity import (
    derived_problems,
    describe,
    entity_row_problem,
    link_problem,
    parse_payload,
    payload_problems,
    relation_problem,
)
from memlab.memory.records import (
    GLOBAL_CLIENT,
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
from memlab.memory.write_policy import (
    WritePolicy,
    WriteResult,
    _check_k,
    _check_time,
    content_hash,
    entities_key,
)

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
        read_only: Open an existing persisted store without writing anything: no lock, no
            repair, no file or directory created, nothing changed; writes raise
            :class:`StoreWriteError`. Every read of SQLite is one consistent snapshot, also
            while writers come and go (:mod:`~memlab.memory.sqlite_io`). chromadb is not
            opened (it writes whenever it opens): :meth:`check` compares a temporary copy of
            it, and :meth:`chroma_index` builds an in-memory index from the store's vectors.
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
        StoreCorruptError: ``memlab.sqlite3`` is empty, corrupt or not a memlab store, or (a
            writable store) holds rows memlab could not have written (:meth:`ensure_sound`).
        StoreLockedError: Another process has the store open for writing.
        StoreError: The store cannot be opened (no store at ``path`` in read-only mode, the
            directory cannot be created, a damaged chromadb index can be neither moved aside
            nor rebuilt, or ``repair=False`` with one chromadb cannot open).
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
        # Per row, the content hash its SQLite column holds (written once, with the row): a
        # rewrite of the row's payload must carry the same, or the store would refuse to open.
        self._row_hashes: list[str] = []
        # Per row, the entities its payload was written with (:func:`entities_key`): the
        # entity graph's links were made from them, so a rewrite must carry the same.
        self._row_entities: list[int] = []
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
        self._adopted_strings: dict[str, tuple[str, int]] = {}
        self._chroma_pending: dict[str, int] = {}
        # Purged memories whose vectors chromadb still holds (dropped after the commit).
        self._chroma_purged: dict[str, int] = {}
        self._chroma: ChromaIndex | None = None
        self._chroma_pool: Any | None = None
        self._chroma_job: Any | None = None
        self.repair = repair
        self.read_only = read_only
        self.lock_timeout = lock_timeout
        self.version = 0
        self._chroma_job_ids: dict[str, int] = {}
        self._chroma_damage: str | None = None
        self.check_notes: list[str] = []
        self._row_problems: list[str] = []
        self._damaged_ids: set[str] = set()
        self._aborted = False
        self._lock: Any | None = None
        self._db: Any | None = None
        self._db_file = ":memory:" if self.path is None else str(self.path / DB_NAME)
        for name, value in (
            ("max_observed_by", max_observed_by),
            ("max_text_chars", max_text_chars),
        ):
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
                # chromadb is never opened in place: ``check`` reads a copy of it.
                self._use_chroma = chroma is not False
                self._readable = True
            else:
                self._open_writable()
                self._use_chroma = True if chroma is None else bool(chroma)
            if read_only:
                self._read(self._load_again)
                self._load_stamp = self._snapshot_stamp
            else:
                self._load()
            if defer_sqlite:
                self._deferred = []
            if self.path is not None and not read_only:
                self.ensure_sound()  # before anything is written, chromadb included
                self._upgrade_schema()
            if self._use_chroma and not read_only:
                self._chroma = self._open_chroma()  # chromadb writes whenever it opens
                if self.path is not None:
                    self._chroma_opened(repair)
        except BaseException:
            self._release()
            raise

    def close(self) -> None:
        """Flush pending vectors, close chromadb's client (so that chromadb keeps nothing of
        this store in the process), close SQLite and release the store lock (idempotent)."""
        if self._db is None:
            self._release()
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
            c.kind[rows],
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
        purged = self._chroma_purged
        self.graph = EntityGraph()
        self.vectors = ExactIndex()
        self._records = []
        self._row_hashes = []
        self._row_entities = []
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
        self._chroma_purged = {  # a purge rolled back leaves the vector where it is
            mid: self._index[mid]
            for mid in purged
            if mid in self._index and self._records[self._index[mid]].purged_at is not None
        }

    def _load_again(self) -> None:
        """Check the schema and load (a read-only store, inside a snapshot; after a retried
        snapshot, from scratch)."""
        self._check_schema()
        if self._records or self.graph.n_entities:
            self._reload()
        else:
            self._load()

    def ensure_sound(self) -> None:
        """Refuse a store whose SQLite rows memlab could not have written.

        Raises:
            StoreCorruptError: One line naming the file, the first problem (table, row, field)
                and how many there are; nothing was changed.
        """
        if self._row_problems:
            n = len(self._row_problems)
            raise StoreCorruptError(
                f"{self._db_file}: {n} damaged row(s), first {self._row_problems[0]}; nothing "
                f"was changed (memlab store check {self.path} lists them; restore the file from "
                "a backup)"
            )

    def _load_rows(self) -> None:
        """Read every table into memory, each row checked as it comes
        (:mod:`memlab.memory.integrity`).

        A row memlab could not have written is listed in ``_row_problems`` (table, row, field,
        what is wrong, never the stored text) and skipped: a memory row becomes a hidden
        placeholder (inactive, forgotten, no vector), so row numbers stay right and
        :meth:`check` lists every problem; a writable store then refuses to open
        (:meth:`ensure_sound`). Rows out of order cannot be worked around: a
        :class:`StoreCorruptError`.
        """
        problems: list[str] = []
        damaged_ids: set[str] = set()
        rows = self._exec(
            "SELECT idx, CAST(id AS BLOB), CAST(client_id AS BLOB), CAST(type AS BLOB), "
            "CAST(content_hash AS BLOB), active, CAST(payload AS BLOB), vector "
            "FROM memories ORDER BY idx"
        ).fetchall()
        sizes = Counter(len(r[7]) for r in rows if isinstance(r[7], bytes))
        width = sizes.most_common(1)[0][0] if sizes else None
        tables = {r[0] for r in self._exec("SELECT name FROM sqlite_master WHERE type='table'")}
        dim, wrong_dim = self._recorded_dim(tables)
        if wrong_dim is not None:
            problems.append(f"{DB_NAME}: {wrong_dim}")
        if dim is not None:  # recorded with the first vector: every vector has it
            width = 4 * dim
        self._dim_recorded = dim is not None
        vectors = _stored_vectors([r[7] for r in rows], width)
        first_row: dict[str, int] = {}
        active_slots: dict[tuple[str, str, str, str], int] = {}
        for expected, (idx, *columns, payload, blob) in enumerate(rows):
            if idx != expected:
                raise StoreCorruptError(
                    f"{self._db_file}: memories table has a gap at row {expected}"
                )
            data, wrong = parse_payload(payload)
            # A string can hold a lone surrogate only through a \\u escape in the JSON text.
            escaped = not isinstance(payload, bytes) or b"\\ud" in payload or b"\\uD" in payload
            found = (
                [f"payload {wrong}"]
                if wrong
                else [
                    f"payload field '{name}' {what}"
                    for name, what in payload_problems(data, surrogates=escaped)
                ]
            )
            if data is not None and not found:
                get = data.get
                id_b, client_b, type_b, hash_b, active = columns
                if not (
                    id_b == data["id"].encode()
                    and type_b == data["type"].encode()
                    and client_b == get("client_id", GLOBAL_CLIENT).encode()
                    and hash_b == get("content_hash", "").encode()
                    and type(active) is int
                    and active == int(get("active", True))
                ):
                    found += _column_problems(columns, data)
                mid = data["id"]
                if mid in first_row:
                    found.append(f"payload field 'id' is also the id of row {first_row[mid]}")
                found += [f"payload field '{name}' {what}" for name, what in derived_problems(data)]
                slot = _active_slot(data)
                if slot is not None and not found:
                    if slot in active_slots:
                        found.append(
                            f"payload field '{slot[0]}' is also the {slot[0]} of active row "
                            f"{active_slots[slot]} in its client and scope (a new {data['type']} "
                            "supersedes the active one: only one is active)"
                        )
                    else:
                        active_slots[slot] = idx
            vector, what = vectors(idx, blob)
            if what is not None:
                found.append(f"column 'vector' {what}")
            if found:
                problems += [f"{DB_NAME} row {idx}: {f}" for f in found]
                damaged_ids.update(
                    v for v in (_text(columns[0]), (data or {}).get("id")) if type(v) is str
                )
                rec = MemoryRecord(
                    id=f"(damaged row {idx})",
                    text="",
                    type="event",
                    source_agent="",
                    active=False,
                    forgotten_reason="damaged",
                    created_at=0.0,
                )
                vector = None
            else:
                first_row[data["id"]] = idx
                rec = MemoryRecord(**{k: data[k] for k in _RECORD_FIELDS if k in data})
            self._index_in_memory(rec, vector, unit=True)  # stored normalised
            self._row_hashes.append(rec.content_hash)
            self._row_entities.append(entities_key(rec.entities))
        known = first_row.keys() | damaged_ids
        for idx, rec in enumerate(self._records):
            for name in ("supersedes", "superseded_by"):
                target = getattr(rec, name)
                if target is not None and target not in known:
                    problems.append(
                        f"{DB_NAME} row {idx}: payload field '{name}' names no memory in the store"
                    )
        for idx, name, type_ in self._exec(
            "SELECT idx, CAST(name AS BLOB), CAST(type AS BLOB) FROM entities ORDER BY idx"
        ):
            wrong = entity_row_problem(name, type_)
            if wrong is None:
                entity = Entity(name.decode(), type_.decode())
                if self.graph.find(entity.name, entity.type) is not None:
                    wrong = "has the name and type of an earlier entity"
            if wrong is not None:
                problems.append(f"{DB_NAME} entities row {idx}: {wrong}")
                entity = Entity(f"(damaged entity {idx})", "damaged")
            if self.graph.add_entity(entity) != idx:
                raise StoreCorruptError(f"{self._db_file}: entity table out of order at {idx}")
        n_entities, n_rows = self.graph.n_entities, len(self._records)
        for rowid, e, m, role in self._exec(
            "SELECT rowid, entity_idx, memory_idx, CAST(role AS BLOB) FROM entity_memory_links "
            "ORDER BY rowid"
        ):
            role = _text(role)
            wrong = link_problem(e, m, role, n_entities=n_entities, n_rows=n_rows)
            if wrong is not None:
                problems.append(f"{DB_NAME} entity_memory_links row {rowid}: {wrong}")
                continue
            self.graph.link(e, m, role)
        for rowid, src, dst, rel, strength in self._exec(
            "SELECT rowid, src, dst, CAST(relation AS BLOB), strength FROM entity_relationships "
            "ORDER BY rowid"
        ):
            rel = _text(rel)
            wrong = relation_problem(src, dst, rel, strength, n_entities=n_entities)
            if wrong is not None:
                problems.append(f"{DB_NAME} entity_relationships row {rowid}: {wrong}")
                continue
            self.graph.add_relation(src, dst, rel, increment=strength)
        if "relation_scopes" in tables:  # absent from a store opened read-only before it
            for rowid, src, dst, rel, scope, strength in self._exec(
                "SELECT rowid, src, dst, CAST(relation AS BLOB), CAST(scope AS BLOB), strength "
                "FROM relation_scopes ORDER BY rowid"
            ):
                rel, scope = _text(rel), _text(scope)
                wrong = relation_problem(
                    src, dst, rel, strength, n_entities=n_entities, scope=scope, scoped=True
                )
                if wrong is not None:
                    problems.append(f"{DB_NAME} relation_scopes row {rowid}: {wrong}")
                    continue
                self.graph.add_relation_scope(src, dst, rel, scope, increment=strength)
        self._row_problems = problems
        self._damaged_ids = damaged_ids


def _active_slot(data: dict[str, Any]) -> tuple[str, str, str, str] | None:
    """The supersession slot an active fact (its ``key``) or status (its ``subject``) holds in
    its client and scope, or ``None``: only one active memory holds a slot."""
    if not data.get("active", True):
        return None
    name = {"fact": "key", "status": "subject"}.get(data["type"])
    value = data.get(name) if name is not None else None
    if value is None:
        return None
    return (name, data.get("client_id", GLOBAL_CLIENT), data.get("scope", "team"), value)


def _text(raw: Any) -> Any:
    """A TEXT column read as a BLOB, decoded (bytes that are not UTF-8 stay bytes)."""
    if isinstance(raw, bytes):
        try:
            return raw.decode("utf-8")
        except UnicodeDecodeError:
            return raw
    return raw


_COLUMN_DEFAULTS = (
    ("id", None),
    ("client_id", GLOBAL_CLIENT),
    ("type", None),
    ("content_hash", ""),
)


def _column_problems(columns: list[Any], data: dict[str, Any]) -> list[str]:
    """Where the ``memories`` columns (``id, client_id, type, content_hash, active``)
    contradict the payload they index."""
    out = []
    for (name, default), raw in zip(_COLUMN_DEFAULTS, columns, strict=False):
        if _text(raw) != data.get(name, default):
            out.append(f"column '{name}' differs from payload field '{name}'")
    active = columns[4]
    if type(active) is not int or active != int(data.get("active", True)):
        out.append(
            f"column 'active' is {describe(active)} but payload field 'active' is "
            f"{describe(data.get('active', True))}"
        )
    return out


def _stored_vectors(
    blobs: list[Any], width: int | None
) -> Callable[[int, Any], tuple[np.ndarray | None, str | None]]:
    """The vectors of the ``memories`` rows (``width``: the byte size of the store's vectors,
    the most common one), checked in one pass: ``(row, blob) -> (vector, None)`` or
    ``(None, what is wrong)``."""
    ok = [
        isinstance(b, bytes) and width is not None and len(b) == width and width % 4 == 0
        for b in blobs
    ]
    dim = (width or 0) // 4
    matrix = (
        np.frombuffer(
            b"".join(b for b, good in zip(blobs, ok, strict=True) if good), dtype=np.float32
        ).reshape(-1, dim)
        if dim
        else None
    )
    finite = np.isfinite(matrix).all(axis=1) if matrix is not None else None
    place = np.cumsum(ok) - 1

    def vector(idx: int, blob: Any) -> tuple[np.ndarray | None, str | None]:
        if blob is None:
            return None, None
        if not isinstance(blob, bytes):
            return None, f"is {describe(blob)}, not a float32 vector"
        if not ok[idx]:
            return None, (
                f"is {len(blob)} bytes, not a float32 vector of the store's dimension {dim}"
            )
        if not finite[place[idx]]:
            return None, "holds a value that is not finite"
        return matrix[place[idx]], None

    return vector
