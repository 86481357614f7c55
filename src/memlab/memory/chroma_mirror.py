"""The store's chromadb mirror: committed vectors sent to chromadb, checked and repaired.

:class:`ChromaMirror` is the part of :class:`~memlab.memory.store.MemoryStore` that keeps a
chromadb collection in step with SQLite under the same ids: it only ever receives committed
rows (one background upsert at a time), its ``where`` filters match ``visible_mask``, and on
open it is reconciled with SQLite (ids SQLite lacks are quarantined, never deleted).

The index is derived from SQLite, so a damaged one is rebuilt, never trusted: when chromadb
cannot open or read ``chroma/`` while a writable store opens (bit flips in ``chroma.sqlite3``,
an empty or missing ``chroma.sqlite3``, ``chroma`` not a directory), the directory is moved
aside to ``chroma.damaged-<UTC time>`` (kept for the user, never deleted) and a new index is
filled from SQLite's vectors. Ids only the damaged index held stay in the moved directory.

chromadb keeps one "system" per directory for the life of the process (its client cache), and
that system caches the directory's vector segments: a process that reopened a store after
another process wrote to it read those stale caches and failed (``Error finding id``). A store
therefore closes its client when it closes (chromadb then stops the system), and opening a
store drops any system a store of this process left behind without closing.
"""

from __future__ import annotations

import logging
import math
import shutil
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from memlab.memory.records import (
    GLOBAL_CLIENT,
    StoreError,
    StoreWriteError,
)
from memlab.memory.scopes import Principal
from memlab.memory.sqlite_io import CREATING, DB_NAME
from memlab.memory.vectors import ChromaIndex, drop_chroma_system
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


def chroma_error(exc: BaseException) -> str:
    """A chromadb failure in a few words: its type and the first line of its message."""
    text = str(exc).splitlines()[0] if str(exc) else ""
    return f"{type(exc).__name__}: {text[:200]}" if text else type(exc).__name__


def chroma_dir_damage(where: Path) -> str | None:
    """What is visibly wrong with a store's ``chroma`` directory before chromadb opens it
    (``None``: nothing; chromadb itself may still fail on it)."""
    try:
        if not where.exists():
            return "a broken symbolic link" if where.is_symlink() else None
        if not where.is_dir():
            return "not a directory"
        db = where / "chroma.sqlite3"
        if not db.exists():
            return "chroma.sqlite3 is missing" if any(where.iterdir()) else None
        if not db.is_file():
            return "chroma.sqlite3 is not a file"
        if db.stat().st_size == 0:
            return "chroma.sqlite3 is empty (0 bytes)"
        with open(db, "rb") as fh:
            if fh.read(16) != b"SQLite format 3\0":
                return "chroma.sqlite3 is not a SQLite database"
    except OSError as exc:
        return f"it cannot be read ({exc.strerror or exc})"
    return None


_REBUILT = (
    "opening the store for writing rebuilds it from SQLite (moving it aside, not deleting it)"
)


_STALE_PURGED = (
    "purged in SQLite (its content erased), its vector still in chromadb (the next writable "
    "open deletes it)"
)


class ChromaMirror:
    """The chromadb collection of :class:`~memlab.memory.store.MemoryStore` (a mixin; the store
    owns ``_chroma``, ``_chroma_pending``, ``_chroma_job``, ``_chroma_job_ids``)."""

    def _open_chroma(self) -> ChromaIndex | None:
        """The chromadb index of a writable (or in-memory) store; ``None`` with
        ``_chroma_damage`` set when the directory cannot be used (see
        :meth:`_chroma_opened`)."""
        if self.path is None:
            return ChromaIndex(None)
        where = self.path / "chroma"
        drop_chroma_system(where)  # a store of this process dropped without close()
        self._chroma_damage = chroma_dir_damage(where)
        if self._chroma_damage is None:
            try:
                return ChromaIndex(where, create=True)
            except Exception as exc:  # chromadb raises many types
                drop_chroma_system(where)
                self._chroma_damage = chroma_error(exc)
        return None

    def _chroma_opened(self, repair: bool) -> None:
        """After a writable store has loaded SQLite: rebuild a damaged index, or reconcile."""
        assert self.path is not None
        if self._chroma_damage is not None:
            if not repair:
                raise StoreError(
                    f"{self.path / 'chroma'}: the chromadb index cannot be opened "
                    f"({self._chroma_damage}); nothing was changed (open the store with "
                    "repair=True to move it aside and rebuild it from SQLite)"
                )
            self._rebuild_chroma(self._chroma_damage)
            self._flush_chroma(wait=True)
        elif repair:
            self._reconcile()

    def _rebuild_chroma(self, reason: str) -> None:
        """Move a damaged ``chroma/`` aside (never delete it) and start a new index holding
        every vector of SQLite (sent by the next flush)."""
        assert self.path is not None
        where = self.path / "chroma"
        self._close_chroma()
        drop_chroma_system(where)
        if where.exists() or where.is_symlink():
            stamp = time.strftime("%Y%m%dT%H%M%SZ", time.gmtime())
            dest = self.path / f"chroma.damaged-{stamp}"
            n = 1
            while dest.exists() or dest.is_symlink():
                n += 1
                dest = self.path / f"chroma.damaged-{stamp}-{n}"
            try:
                where.rename(dest)
            except OSError as exc:
                raise StoreWriteError(
                    f"{where}: the chromadb index is damaged ({reason}) and cannot be moved "
                    f"aside ({exc.strerror or exc}); move it away yourself and reopen the store "
                    "to rebuild it from SQLite"
                ) from None
            log.warning(
                "%s: the chromadb index is damaged (%s); moved it to %s (kept, not deleted) "
                "and rebuilt it from SQLite",
                where, reason, dest.name,
            )
        try:
            self._chroma = ChromaIndex(where, create=True)
        except Exception as exc:  # chromadb raises many types
            drop_chroma_system(where)
            raise StoreError(
                f"{where}: cannot create the chromadb index ({chroma_error(exc)}); SQLite is "
                "intact: free the space or fix the permissions, then reopen the store"
            ) from None
        self._chroma_job = None
        self._chroma_job_ids = {}
        self._chroma_pending = {
            r.id: i for i, r in enumerate(self._records) if self.vectors.present[i]
        }

    def _close_chroma(self) -> None:
        """Close a persisted index's chromadb client (chromadb then stops its system for the
        directory, caches included)."""
        index, self._chroma = self._chroma, None
        if index is not None and index.path is not None:
            index.close()
        elif index is not None:
            self._chroma = index  # an ephemeral index lives as long as its store object

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
            if not self._collect_chroma_job():
                return
        if self._chroma is None:
            self._chroma_pending.clear()
            self._chroma_purged.clear()
            return
        if self._batch_depth > 0:
            return
        self._drop_purged()
        if not self._chroma_pending:
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

    def _collect_chroma_job(self) -> bool:
        """Wait for the upsert in flight; False when it failed (its ids are pending again)."""
        job, self._chroma_job = self._chroma_job, None
        if job is None:
            return True
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
            return False
        return True

    def _drop_purged(self) -> None:
        """Delete the vectors of purged memories from chromadb, after their purge committed
        and whatever ``chroma_sync`` says (an upsert in flight, which may carry one of them,
        lands first). A failure is logged and never fails a write: the ids stay pending, and
        the next open deletes what chromadb still holds of a purged memory."""
        if self._chroma is None:
            self._chroma_purged.clear()
            return
        if not self._chroma_purged or self._batch_depth > 0:
            return
        self._collect_chroma_job()
        gone, self._chroma_purged = self._chroma_purged, {}
        for mid in gone:  # a failed upsert puts its ids back: a purged one has no vector
            self._chroma_pending.pop(mid, None)
        try:
            self._chroma.delete(sorted(gone))
        except Exception as exc:  # chromadb raises many types
            log.warning(
                "chromadb delete of %d purged id(s) failed (%s: %s); the next open deletes them",
                len(gone),
                type(exc).__name__,
                exc,
            )
            self._chroma_purged = {**gone, **self._chroma_purged}

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

    def _chroma_diff(
        self, index: ChromaIndex | None = None
    ) -> tuple[list[str], list[str], list[tuple[str, str]]]:
        """Compare chromadb (``index``, default the store's) with SQLite: (ids missing from
        chromadb, ids only in chromadb, (id, what differs) for ids in both — a purged memory
        whose vector chromadb still holds among them). Ids of damaged
        rows (``check`` lists them) are left out."""
        index = index if index is not None else self._chroma
        assert index is not None
        sql_ids = {r.id for i, r in enumerate(self._records) if self.vectors.present[i]}
        purged = {r.id for r in self._records if r.purged_at is not None}
        chroma_ids = set(index.ids())
        missing = sorted(sql_ids - chroma_ids)
        orphans = sorted(chroma_ids - sql_ids - self._damaged_ids - purged)
        differ: list[tuple[str, str]] = []
        common = sorted(sql_ids & chroma_ids)
        for start in range(0, len(common), 1000):
            chunk = common[start : start + 1000]
            got = index.get(chunk)
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
        differ += [(mid, _STALE_PURGED) for mid in sorted(chroma_ids & purged)]
        return missing, orphans, differ

    def check(self) -> list[str]:
        """Disagreements within SQLite and between SQLite and chromadb (empty when consistent).

        SQLite's ``PRAGMA quick_check``; every row memlab could not have written (table, row,
        field: :mod:`memlab.memory.integrity`); then ids, vectors and filter metadata against
        chromadb. Ids only chromadb holds are reported whether or not a repair has quarantined
        them. A chromadb that cannot be read is one problem, not an exception.

        On a read-only store (``memlab store check``) nothing is written: SQLite is read in one
        consistent snapshot and chromadb is compared from a temporary copy of ``chroma/``
        (chromadb writes to any directory it opens). When a writer has the store open,
        chromadb may lag SQLite by the vectors it has not sent yet, so what differs there is
        put in :attr:`check_notes` instead.
        """
        self.check_notes = []
        problems = self._check_parts()
        self.check_notes += self._creation_notes()
        return problems

    def _check_parts(self) -> list[str]:
        if self.read_only:
            return self._check_copy()
        problems = self._sqlite_problems()
        if self._chroma is None:
            return problems
        self._flush_chroma(wait=True)
        where = self.path / "chroma" if self.path is not None else "chromadb"
        problems += self._chroma_problems(self._chroma, where)
        return problems

    def _creation_notes(self) -> list[str]:
        """A note for each file a store creation left behind when it was killed (its schema
        file, never linked into place): memlab does not delete what it cannot prove it wrote."""
        if self.path is None:
            return []
        return [
            f"{left.name}: left by a store creation that was interrupted (it holds no memory); "
            "remove it unless a store is being created here now"
            for left in sorted(self.path.glob(f"{DB_NAME}{CREATING}*"))
        ]

    def _sqlite_problems(self) -> list[str]:
        problems = []
        for (msg,) in self._exec("PRAGMA quick_check").fetchall():
            if msg != "ok":
                problems.append(f"{self._db_file}: {' '.join(str(msg).split())}")
        return problems + list(self._row_problems)

    def _chroma_problems(self, index: ChromaIndex, where: Any) -> list[str]:
        """What differs between SQLite and the chromadb ``index`` (one line when chromadb
        cannot be read)."""
        try:
            missing, orphans, differ = self._chroma_diff(index)
            quarantined = set(self._quarantined(orphans, index))
        except Exception as exc:  # chromadb raises many types
            return [f"{where}: the chromadb index cannot be read ({chroma_error(exc)}); "
                    f"{_REBUILT}"]
        problems = [f"memory {mid}: in SQLite, missing from chromadb" for mid in missing]
        for mid in orphans:
            note = " (quarantined: hidden from searches)" if mid in quarantined else ""
            problems.append(f"memory {mid}: in chromadb, missing from SQLite{note}")
        problems += [f"memory {mid}: {what}" for mid, what in differ]
        return problems

    def _check_copy(self) -> list[str]:
        """:meth:`check` of a read-only store: SQLite in one snapshot, chromadb in a copy
        (taken again when a writer may have started during a snapshot without a lock file)."""
        from memlab.memory.sqlite_io import _SnapshotChanged

        for attempt in range(3):
            self.check_notes = []
            try:
                return self._check_copy_once()
            except _SnapshotChanged:
                if attempt == 2:
                    raise StoreError(
                        f"{self.path}: writers kept starting while the store was checked; "
                        "nothing was read, try again"
                    ) from None
        raise AssertionError("unreachable")

    def _check_copy_once(self) -> list[str]:
        assert self.path is not None
        where = self.path / "chroma"
        damage: str | None = None
        copy: Path | None = None
        index: ChromaIndex | None = None
        try:
            with self._snapshot() as writer:
                if self._use_chroma and (where.exists() or where.is_symlink()):
                    damage = chroma_dir_damage(where)
                    if damage is None:
                        # chromadb writes to whatever it opens: give it a copy (taken before
                        # SQLite's snapshot, so that every id it holds is committed there).
                        tmp = Path(tempfile.mkdtemp(prefix="memlab-check-"))
                        copy = tmp / "chroma"
                        try:
                            shutil.copytree(where, copy, symlinks=False)
                        except OSError as exc:
                            self.check_notes.append(
                                f"{where}: not compared: it cannot be copied to a temporary "
                                f"directory ({exc.strerror or exc})"
                            )
                            copy = None
                if writer or self._db_stamp() != self._load_stamp:
                    self._reload()  # the state this snapshot sees
                problems = self._sqlite_problems()
            found: list[str] = []
            if damage is not None:
                found = [f"{where}: the chromadb index is damaged ({damage}); {_REBUILT}"]
            elif copy is not None:
                try:
                    index = ChromaIndex(copy, create=False)
                except Exception as exc:  # chromadb raises many types
                    found = [f"{where}: the chromadb index cannot be read "
                             f"({chroma_error(exc)}); {_REBUILT}"]
                else:
                    found = self._chroma_problems(index, where)
            if writer and found:
                self.check_notes.append(
                    f"{where}: a writer has the store open, so chromadb may not hold its "
                    f"newest writes yet; {len(found)} difference(s) not counted as problems:"
                )
                self.check_notes += [f"  {line}" for line in found]
            else:
                problems += found
            return problems
        finally:
            if index is not None:
                index.close()
            if copy is not None:
                drop_chroma_system(copy)
                shutil.rmtree(copy.parent, ignore_errors=True)

    def _quarantined(self, ids: Sequence[str], index: ChromaIndex | None = None) -> list[str]:
        """Those of ``ids`` whose chromadb metadata marks them as quarantined orphans."""
        index = index if index is not None else self._chroma
        assert index is not None
        out: list[str] = []
        for start in range(0, len(ids), 1000):
            got = index.collection.get(
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
        :meth:`drop_orphans`). An index chromadb cannot read is moved aside and rebuilt
        (:meth:`_rebuild_chroma`)."""
        if self._chroma is None:
            return
        try:
            missing, orphans, differ = self._chroma_diff()
            done = set(self._quarantined(orphans))
        except Exception as exc:  # chromadb raises many types
            self._rebuild_chroma(chroma_error(exc))
            self._flush_chroma(wait=True)
            return
        for mid in [*missing, *(mid for mid, _ in differ)]:
            idx = self._index[mid]
            if self._records[idx].purged_at is not None:
                self._chroma_purged[mid] = idx  # its content was erased: its vector goes too
            else:
                self._chroma_pending[mid] = idx
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
