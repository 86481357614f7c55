"""The store's chromadb mirror: committed vectors sent to chromadb, checked and repaired.

:class:`ChromaMirror` is the part of :class:`~memlab.memory.store.MemoryStore` that keeps a
chromadb collection in step with SQLite under the same ids: it only ever receives committed
rows (one background upsert at a time), its ``where`` filters match ``visible_mask``, and on
open it is reconciled with SQLite (ids SQLite lacks are quarantined, never deleted).
"""

from __future__ import annotations

import logging
import math
from collections.abc import Sequence
from typing import Any

import numpy as np

from memlab.memory.records import (
    GLOBAL_CLIENT,
    StoreError,
    StoreWriteError,
)
from memlab.memory.scopes import Principal
from memlab.memory.vectors import ChromaIndex
from memlab.timeutil import coerce_ts

log = logging.getLogger("memlab.store")

_QUARANTINE = {"orphan": True, "active": False, "forgotten": True}


#: How far (units in the last place) a float metadata value may come back from chromadb.
_CHROMA_FLOAT_ULPS = 2


def _same_meta(got: Any, want: Any) -> bool:
    """Whether chromadb's metadata value ``got`` faithfully mirrors SQLite's ``want``.

    chromadb (1.x) keeps a float metadata value as a 64-bit float, but it passes through decimal
    JSON text on the way in and is parsed back by a parser that is not correctly rounded: it
    comes back up to :data:`_CHROMA_FLOAT_ULPS` units in the last place away (1 ULP is 0.24 µs
    for a timestamp in 2026). So floats are equal when they are within that many ULPs; anything
    else (bools, strings, a float against a non-float) must be exactly equal.
    """
    if isinstance(want, float) and not isinstance(want, bool):
        if not isinstance(got, float):
            return False
        if got == want:
            return True
        return math.isfinite(want) and abs(got - want) <= _CHROMA_FLOAT_ULPS * math.ulp(want)
    return type(got) is type(want) and got == want


class ChromaMirror:
    """The chromadb collection of :class:`~memlab.memory.store.MemoryStore` (a mixin; the store
    owns ``_chroma``, ``_chroma_pending``, ``_chroma_job``, ``_chroma_job_ids``)."""

    def _open_chroma(self) -> ChromaIndex:
        where = None if self.path is None else self.path / "chroma"
        try:
            return ChromaIndex(where, create=not self.read_only)
        except Exception as exc:  # chromadb raises many types
            raise StoreError(
                f"{where}: cannot open the chromadb index ({type(exc).__name__}: {exc}); "
                "move the directory away and reopen the store to rebuild it from SQLite"
            ) from None

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

    @property
    def chroma_backlog(self) -> int:
        """Committed vectors chromadb does not hold yet (pending or in the upsert in flight)."""
        return len(self._chroma_pending) + len(self._chroma_job_ids)

    def chroma_backlog_rows(self) -> np.ndarray:
        """The store rows of :attr:`chroma_backlog`'s vectors (``int64``), so that a reader
        can count those of the memories it reads."""
        rows = [*self._chroma_pending.values(), *self._chroma_job_ids.values()]
        return np.asarray(rows, dtype=np.int64)

    def flush_chroma(self, *, wait: bool = False) -> None:
        """Hand the pending (committed) vectors to chromadb now.

        What a store with ``chroma_sync="deferred"`` calls when it has time (``memlab serve``
        calls it once the server has been idle). Without ``wait`` it never blocks: while an
        upsert is still in flight the vectors stay pending for the next call. ``wait=True``
        blocks until chromadb has everything. Nothing is sent inside a batch.
        """
        self._flush_chroma(wait=wait, skip_busy=not wait)

    def _flush_chroma(self, *, wait: bool = False, skip_busy: bool = False) -> None:
        """Hand pending (committed) vectors to chromadb.

        The upsert runs on a background thread while the caller goes on writing to SQLite (the
        source of truth: a write is acknowledged when SQLite commits, and reopening a store
        re-sends anything chromadb missed). One upsert is in flight at a time: a new flush
        waits for it, or with ``skip_busy=True`` leaves everything pending while it runs;
        ``wait=True`` blocks until chromadb has everything. Inside a batch nothing is sent
        (chromadb never sees a write that may still roll back). A chromadb failure never fails
        a write: it is logged, the ids stay pending for the next flush, and the next open
        repairs the index.
        """
        if self._chroma_job is not None:
            if skip_busy and not self._chroma_job.done():
                return
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
                    if not _same_meta(meta.get(key), value):
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
