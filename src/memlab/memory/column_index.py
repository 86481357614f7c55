"""The store's in-memory column index: records, id lookups and numpy columns for filters.

:class:`ColumnIndex` is the part of :class:`~memlab.memory.store.MemoryStore` that keeps one
row per memory in growable numpy columns (:class:`_Columns`) next to the records, maps ids to
rows and back without Python loops, and computes the visibility mask every read filters with.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

import numpy as np
import polars as pl

from memlab.fastframe import take
from memlab.memory.records import (
    GLOBAL_CLIENT,
    MemoryRecord,
    UnknownMemoryError,
    kind_of,
)
from memlab.memory.scopes import Principal
from memlab.memory.scrub import scrub_message
from memlab.memory.sqlite_io import _RECORD_FIELDS
from memlab.timeutil import coerce_ts

_NO_END = np.inf


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
        ("kind", "<U10", ""),  # the type decay reads (records.kind_of)
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



class ColumnIndex:
    """Records, id maps and numpy columns of :class:`~memlab.memory.store.MemoryStore` (a
    mixin; the store owns ``_records``, ``_index``, ``_cols``, ``_clients``, ``_scopes``)."""

    def __len__(self) -> int:
        return len(self._records)

    def __contains__(self, memory_id: object) -> bool:
        return memory_id in self._index

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
        return self.ids_at(np.asarray(rows, dtype=np.int64)).to_list()

    def ids_at(self, rows: np.ndarray) -> pl.Series:
        """Memory ids of store rows (``int64``, each ``0 <= row < len(store)``; not checked) as
        a ``String`` Series named ``mem_id``: one gather from :meth:`id_column`."""
        return take(self.id_column(), rows)

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
        done = len(self._id_rank)
        if done != n:
            order = getattr(self, "_id_sorted", None)
            if done > n or order is None or len(order) != done:  # rebuilt store: start over
                done, order, rank = 0, np.zeros(0, dtype=str), np.zeros(0, dtype=np.int64)
            else:
                rank = self._id_rank
            # Merge the new ids into the sorted ids: an old id moves up by the number of new
            # ids inserted at or before its place; the i-th new id (sorted) lands at its
            # insertion point + i.
            new = np.asarray([r.id for r in self._records[done:]], dtype=str)
            new_order = np.argsort(new, kind="stable")
            new = new[new_order]
            at = np.searchsorted(order, new)
            grown = np.empty(n, dtype=np.int64)
            grown[:done] = rank + np.searchsorted(at, rank, side="right")
            grown[done + new_order] = at + np.arange(len(new), dtype=np.int64)
            wide = np.promote_types(order.dtype, new.dtype)  # np.insert would truncate
            self._id_sorted = np.insert(order.astype(wide, copy=False), at, new)
            self._id_rank = grown
        return self._id_rank[np.asarray(rows, dtype=np.int64)]

    def rows_of(self, memory_ids: Sequence[str] | pl.Series) -> np.ndarray:
        """Store rows of memory ids, in order (``int64``; raises :class:`UnknownMemoryError`)."""
        ids = memory_ids.to_list() if isinstance(memory_ids, pl.Series) else list(memory_ids)
        try:
            return np.fromiter(map(self._index.__getitem__, ids), dtype=np.int64, count=len(ids))
        except KeyError as error:
            raise UnknownMemoryError(
                scrub_message(f"unknown memory id {error.args[0]!r}")
            ) from None

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
        mask = self.readable_mask(principal, client_id=client_id)
        if now is not None:
            mask &= c.created_at[:n] <= coerce_ts(now, field="now")
        if at_time is not None:
            t = coerce_ts(at_time, field="at_time")
            mask &= (c.valid_from[:n] <= t) & (t < c.valid_to[:n]) & ~c.forgotten[:n]
        elif include_superseded:
            mask &= ~c.forgotten[:n]
        else:
            mask &= c.active[:n]
        return mask

    def readable_mask(
        self, principal: Principal | None, *, client_id: str | None = None
    ) -> np.ndarray:
        """Which rows ``principal`` may read whatever their state: those of the scopes it
        reads (``None``, a human: every scope), of ``client_id`` and ``"global"`` when given.
        What a principal's statistics, graph view and streams are built from."""
        c = self._cols
        n = c.n
        mask = np.ones(n, dtype=bool)
        if client_id is not None:
            codes = [self._clients.get(client_id, -2), self._clients.get(GLOBAL_CLIENT, -2)]
            mask &= np.isin(c.client[:n], codes)
        if principal is not None:
            mask &= np.isin(c.scope[:n], self.scope_codes(principal))
        return mask

    def scope_codes(self, principal: Principal) -> list[int]:
        """Codes of the scopes ``principal`` may read (scopes never seen are left out)."""
        return [self._scopes[s] for s in principal.readable_scopes() if s in self._scopes]

    def records_frame(self) -> pl.DataFrame:
        """All records as a frame (one row per memory, payload columns, epoch-second times)."""
        cols: dict[str, list[Any]] = {name: [] for name in _RECORD_FIELDS}
        for rec in self._records:
            for name in _RECORD_FIELDS:
                cols[name].append(getattr(rec, name))
        cols["entities"] = [json.dumps(v) for v in cols["entities"]]
        cols["metadata"] = [json.dumps(v, sort_keys=True) for v in cols["metadata"]]
        return pl.DataFrame(cols, strict=False, infer_schema_length=None)

    def _index_in_memory(
        self, rec: MemoryRecord, vector: np.ndarray | None, *, unit: bool = False
    ) -> int:
        """Add a record to the in-memory columns, vectors and lookup tables; return its row
        (``unit``: the vector is the unit vector this index stored, read back)."""
        idx = self._cols.append()
        self._records.append(rec)
        self._index[rec.id] = idx
        c = self._cols
        c.created_at[idx] = rec.created_at
        c.client[idx] = self._clients.setdefault(rec.client_id, len(self._clients))
        c.type[idx] = rec.type
        c.kind[idx] = kind_of(rec)
        c.scope[idx] = self._scopes.setdefault(rec.scope, len(self._scopes))
        c.valid_from[idx] = rec.valid_from if rec.valid_from is not None else rec.created_at
        self._sync_columns(idx)
        self.vectors.set(idx, vector, unit=unit)
        if rec.active:
            self._register_active(idx)
        return idx

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
