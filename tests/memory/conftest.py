"""Helpers for the store's atomicity, corruption and locking tests."""

from __future__ import annotations

import sqlite3
from typing import Any

import numpy as np

from memlab.memory.store import MemoryStore

TABLES = ("memories", "versions", "entities", "entity_memory_links", "entity_relationships")


class FaultyConnection:
    """A sqlite3 connection whose ``fail_at``-th write statement raises ``exc``.

    Reads (SELECT, PRAGMA) and transaction control (BEGIN, SAVEPOINT, ROLLBACK) are never
    failed; COMMIT and RELEASE are, as a full disk fails a commit. With ``abort=True`` the
    failure also rolls the whole transaction back, as SQLite does on some errors.
    """

    def __init__(
        self,
        db: sqlite3.Connection,
        fail_at: int,
        exc: BaseException | None = None,
        *,
        abort: bool = False,
    ) -> None:
        self.db = db
        self.fail_at = fail_at
        self.exc = exc if exc is not None else sqlite3.OperationalError("database or disk is full")
        self.abort = abort
        self.writes = 0
        self.failed = False

    def _tick(self, sql: str) -> None:
        head = sql.lstrip().split(None, 1)[0].upper()
        if head in ("SELECT", "PRAGMA", "BEGIN", "SAVEPOINT", "ROLLBACK"):
            return
        self.writes += 1
        if self.writes == self.fail_at:
            self.failed = True
            if self.abort and self.db.in_transaction:
                self.db.execute("ROLLBACK")
            raise self.exc

    def execute(self, sql: str, params: Any = ()) -> sqlite3.Cursor:
        self._tick(sql)
        return self.db.execute(sql, params)

    def executemany(self, sql: str, rows: Any) -> sqlite3.Cursor:
        self._tick(sql)
        return self.db.executemany(sql, rows)

    def __getattr__(self, name: str) -> Any:
        return getattr(self.db, name)


def _cell(value: Any) -> Any:
    if isinstance(value, float) and np.isnan(value):
        return "nan"
    return value


def memory_state(store: MemoryStore) -> dict[str, Any]:
    """Everything a store holds in memory, in comparable form."""
    cols = {
        name: [_cell(v) for v in store.column(name).tolist()]
        for name, _, _ in type(store._cols).SPEC
    }
    graph = store.graph
    return {
        "records": [r.to_payload() for r in store._records],
        "index": dict(store._index),
        "cols": cols,
        # the rows that hold a vector (a store reopened without any has no dimension yet)
        "vectors": (store.vectors.matrix[store.vectors.present].tobytes(),
                    store.vectors.present.tolist()),
        "clients": dict(store._clients),
        "dedup": dict(store._dedup),
        "by_key": dict(store._by_key),
        "by_subject": dict(store._by_subject),
        "entities": [graph.entity(i) for i in range(graph.n_entities)],
        "edges": sorted(graph.edges_frame().rows()),
        "links": sorted(graph.links_frame().rows()),
    }


def sql_state(store: MemoryStore) -> dict[str, list[tuple[Any, ...]]]:
    """Every row of every table of the store's SQLite database."""
    db = store._db.db if isinstance(store._db, FaultyConnection) else store._db
    return {t: db.execute(f"SELECT * FROM {t} ORDER BY 1, 2").fetchall() for t in TABLES}


def state(store: MemoryStore) -> dict[str, Any]:
    return {**memory_state(store), "sql": sql_state(store)}
