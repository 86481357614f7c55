"""Vector indexes behind the store: an exact numpy index and a chromadb persistent collection.

The exact index is the reference (deterministic, and ~0.3 ms per query at 10k vectors); the
chromadb index mirrors the same ids for persistence and for approximate search with metadata
filters. Both index L2-normalised vectors, so the inner product is the cosine similarity.
"""

from __future__ import annotations

import sys
import threading
from collections.abc import Iterable, Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import numpy as np

_BLAS: tuple[int, list[Any]] | None = None
"""``(len(sys.modules) when found, BLAS library controllers)`` of :func:`single_thread_blas`."""
_BLAS_GUARD = threading.RLock()


@contextmanager
def single_thread_blas() -> Iterator[None]:
    """Run the block with one BLAS thread (threadpoolctl), then restore the previous count.

    A matrix-vector product over the store (``(n, d) @ (d,)``, memory-bound) gains nothing from
    BLAS threads, and on a busy machine handing it to OpenBLAS's second thread and waiting for
    it costs far more than the product: at 10,000 x 64 float32, 0.07 ms on one thread against
    11-16 ms with two threads on a 2-core machine under a load average of 12. Each output
    element is one dot product either way, so the result does not change. BLAS has one thread
    count per process: blocks of different threads run one at a time, so each restores the count
    it found.
    """
    global _BLAS
    with _BLAS_GUARD:
        if _BLAS is None or _BLAS[0] != len(sys.modules):
            from threadpoolctl import ThreadpoolController

            # The BLAS libraries loaded now, found again only once modules were imported since
            # (one may bring its own BLAS); each block sets their thread counts directly (what
            # ``ThreadpoolController.limit`` does, without finding the libraries every time:
            # 45 µs per block against 2).
            libs = ThreadpoolController().select(user_api="blas").lib_controllers
            _BLAS = (len(sys.modules), libs)
        found = [(lib, lib.num_threads) for lib in _BLAS[1]]
        for lib, n in found:
            if n != 1:
                lib.set_num_threads(1)
        try:
            yield
        finally:
            for lib, n in found:
                if n != 1:
                    lib.set_num_threads(n)


BLOCK_ROWS = 512
"""Rows per product in :func:`block_products` (blocks start at multiples of it)."""

PAD_ROWS = 32
"""Products are computed over a multiple of this many rows (zero rows added at the end).

BLAS matrix-vector kernels take rows in groups of a few (4 or 8 on x86) and round the last
rows of a product whose length is not a multiple of the group through another code path: the
same row may then differ by a bit between two products. Padded, every row goes through the
same path, and a row's value is the same in any padded product that holds it."""

GATHER_SHARE = 0.125
""":func:`block_products` multiplies only the wanted rows (gathered) when they are at most this
share of the rows in the blocks that hold them; otherwise it multiplies those blocks in place.
Gathering copies the rows, and costs as much as the blocks' product at about 15–20% of their
rows (384 dimensions; 5,882 and 100,000 rows)."""


GROUP_MAX_ROWS = 262_144
"""Largest index whose rows :meth:`ExactIndex.similarities` also keeps grouped by client (a
second copy of the vectors); past it, blocks are multiplied (and a large store's queries
mostly go to the approximate index: ``dense``'s ``ann_min_rows``)."""


def _padded_rows(r: int) -> int:
    """``r`` rounded up to a multiple of :data:`PAD_ROWS`."""
    return -(-r // PAD_ROWS) * PAD_ROWS


def _padded_product(
    matrix: np.ndarray,
    vector: np.ndarray,
    rows: np.ndarray | None = None,
    *,
    end: int | None = None,
) -> np.ndarray:
    """The products of ``vector`` with rows ``0..end`` of ``matrix`` (default: all of them), or
    with ``matrix[rows]``, computed over a multiple of :data:`PAD_ROWS` rows.

    Rows past ``end`` that ``matrix`` holds (zero rows of a buffer's spare capacity) serve as the
    padding where there are enough of them; otherwise the rows are copied into a padded buffer.
    """
    if rows is None:
        r = len(matrix) if end is None else end
        padded = _padded_rows(r)
        if padded <= len(matrix):
            return (matrix[:padded] @ vector)[:r]
    else:
        r = len(rows)
        padded = _padded_rows(r)
    buf = np.zeros((padded, matrix.shape[1]), dtype=np.float32)
    if rows is None:
        buf[:r] = matrix[:r]
    else:
        np.take(matrix, rows, axis=0, out=buf[:r])
    return (buf @ vector)[:r]


_GATHER_EXACT: dict[int, bool] = {}
"""Per vector dimension: whether a gathered product gives each row the value its block gives
(checked once per process and dimension by :func:`_gather_is_exact`)."""


def _gather_is_exact(dim: int) -> bool:
    """Whether this process's BLAS gives a row the same value in a product of gathered rows as
    in its fixed block (:data:`PAD_ROWS`); checked on random unit vectors of ``dim``, once.

    When it does not (a BLAS whose kernels round rows by their position), :func:`block_products`
    always multiplies whole blocks, so results never depend on which rows were wanted."""
    known = _GATHER_EXACT.get(dim)
    if known is not None:
        return known
    rng = np.random.default_rng(0)
    n = BLOCK_ROWS + 3 * PAD_ROWS + 5
    matrix = rng.standard_normal((n, dim)).astype(np.float32)
    matrix /= np.linalg.norm(matrix, axis=1, keepdims=True)
    vector = rng.standard_normal(dim).astype(np.float32)
    vector /= np.linalg.norm(vector)
    exact = True
    with single_thread_blas():
        ref = np.concatenate([
            _padded_product(matrix[lo : lo + BLOCK_ROWS], vector)
            for lo in range(0, n, BLOCK_ROWS)
        ])
        for size in (1, 2, 3, 5, 7, 9, 31, 33, 100, 257):
            rows = np.sort(rng.choice(n, size, replace=False))
            if not np.array_equal(_padded_product(matrix, vector, rows), ref[rows]):
                exact = False
                break
    _GATHER_EXACT[dim] = exact
    return exact


def block_products(
    matrix: np.ndarray, vector: np.ndarray, wanted: np.ndarray | None = None,
    *, n: int | None = None,
) -> np.ndarray:
    """``matrix @ vector`` (float32) for the ``wanted`` rows; ``-inf`` for rows not computed.

    A query sees a fraction of the store, and one client's rows are scattered over it (clients
    write at the same time). When the wanted rows are few beside the blocks of
    :data:`BLOCK_ROWS` that hold them (:data:`GATHER_SHARE`), only they are gathered and
    multiplied; otherwise each block holding a wanted row is multiplied in place and its other
    rows are computed too. Either way a row's value never depends on which other rows are
    wanted: every product is padded to :data:`PAD_ROWS` rows, and the gathered path is used
    only where this BLAS gives each row the value of its block (:func:`_gather_is_exact`).
    One BLAS thread (:func:`single_thread_blas`).

    Args:
        matrix: ``(n, d)`` float32, or a buffer whose first ``n`` rows are the matrix and whose
            other rows are zero (then used as the padding of the last block).
        vector: ``(d,)`` float32.
        wanted: Boolean mask of ``n`` rows (default: every row).
        n: The number of rows (default: all of ``matrix``'s).

    Returns:
        ``n`` float32 values.
    """
    if n is None:
        n = matrix.shape[0]
    out = np.full(n, -np.inf, dtype=np.float32)
    n_blocks = -(-n // BLOCK_ROWS)
    if wanted is None:
        blocks = np.arange(n_blocks)
    else:
        rows = np.flatnonzero(wanted)
        blocks = np.flatnonzero(np.bincount(rows // BLOCK_ROWS, minlength=n_blocks))
        if (
            len(rows)
            and len(rows) <= GATHER_SHARE * len(blocks) * BLOCK_ROWS
            and matrix.dtype == np.float32
            and matrix.flags.c_contiguous
            and _gather_is_exact(matrix.shape[1])
        ):
            with single_thread_blas():
                out[rows] = _padded_product(matrix, vector, rows)
            return out
    with single_thread_blas():
        for k in blocks.tolist():
            lo = k * BLOCK_ROWS
            hi = min(lo + BLOCK_ROWS, n)
            if hi - lo == BLOCK_ROWS:  # a multiple of PAD_ROWS
                np.matmul(matrix[lo:hi], vector, out=out[lo:hi])
            else:
                out[lo:hi] = _padded_product(matrix[lo:], vector, end=hi - lo)
    return out


def append_rows(buffer: np.ndarray | None, used: int, block: np.ndarray) -> np.ndarray:
    """``block``'s rows written after the first ``used`` rows of ``buffer``; returns the buffer
    (the same one, or a new one of twice the size, at least 1,024 rows, holding the first
    ``used`` rows), whose first ``used + len(block)`` rows are the result. A new buffer's
    rows are zero until written, and it holds a multiple of :data:`PAD_ROWS` rows, so a
    product over its rows can be padded in place (:func:`_padded_product`).

    Fitted state that grows with the store between queries (sentence or token vectors) is
    appended this way: stacking the old rows and the new ones each time would copy every row
    again on every write, a cost in the square of the store's size.
    """
    end = used + len(block)
    if buffer is None or buffer.shape[1:] != block.shape[1:] or buffer.dtype != block.dtype:
        grown = np.zeros((_padded_rows(max(end, 1024)), *block.shape[1:]), dtype=block.dtype)
        if used:
            if buffer is None:
                raise ValueError("append_rows: rows are in use but there is no buffer")
            grown[:used] = buffer[:used]
        buffer = grown
    elif end > len(buffer):
        size = _padded_rows(max(end, 2 * len(buffer)))
        grown = np.zeros((size, *buffer.shape[1:]), dtype=buffer.dtype)
        grown[:used] = buffer[:used]
        buffer = grown
    buffer[used:end] = block
    return buffer


def codes_of(codes: np.ndarray, mask: np.ndarray, n: int) -> list[int]:
    """The distinct codes of the first ``n`` rows where ``mask`` holds, ascending (the groups of
    :class:`RowGroups` a query reads)."""
    seen = np.asarray(codes)[:n][np.asarray(mask)[:n]]
    if len(seen) and seen.min() >= 0:  # np.unique's list, by counting
        return np.flatnonzero(np.bincount(seen)).tolist()
    return np.unique(seen).tolist()


class RowGroups:
    """Vectors of store rows kept in groups by a code of each row (its client), so that a query
    reads only the groups it can see: a client's rows are scattered over the store (clients
    write at the same time), while its group is one contiguous matrix.

    A row owns zero or more consecutive vectors (one for a memory's vector, one per sentence
    for MaxP); :meth:`best` gives each row the largest product of its vectors with the query.
    Rows are appended in order; :attr:`codes_` remembers each row's code, so a caller can check
    that the codes still hold (:meth:`same_codes`) and rebuild otherwise.

    Attributes:
        codes_: The code of each row appended so far.
        groups_: Per code: ``[vectors buffer, vectors used, store rows, first vector of each]``.
    """

    def __init__(self) -> None:
        self.codes_ = np.zeros(0, dtype=np.int64)
        self.groups_: dict[int, list[Any]] = {}

    def __len__(self) -> int:
        return len(self.codes_)

    def same_codes(self, codes: np.ndarray) -> bool:
        """Whether the rows appended so far still have these codes (``codes[:len(self)]``)."""
        n = len(self.codes_)
        return len(codes) >= n and bool(np.array_equal(codes[:n], self.codes_))

    def append(self, codes: np.ndarray, counts: np.ndarray, vectors: np.ndarray) -> None:
        """Append rows ``len(self)`` onwards: each row's code, its number of vectors, and the
        vectors of all of them in row order (``counts.sum()`` rows of float32)."""
        codes = np.asarray(codes, dtype=np.int64)
        counts = np.asarray(counts, dtype=np.int64)
        first = len(self.codes_)
        offsets = np.concatenate([[0], np.cumsum(counts)[:-1]]).astype(np.int64)
        for code in np.unique(codes).tolist():
            sel = np.flatnonzero((codes == code) & (counts > 0))
            if not len(sel):
                continue
            c = counts[sel]
            total = int(c.sum())
            within = np.arange(total) - np.repeat(np.cumsum(c) - c, c)
            block = vectors[np.repeat(offsets[sel], c) + within]
            group = self.groups_.get(code)
            if group is None:
                group = self.groups_[code] = [None, 0, np.zeros(0, np.int64), np.zeros(0, np.int64)]
            buffer, used, rows, starts = group
            group[0] = append_rows(buffer, used, block)
            group[1] = used + total
            group[2] = np.concatenate([rows, first + sel])
            group[3] = np.concatenate([starts, used + np.cumsum(c) - c])
        self.codes_ = np.concatenate([self.codes_, codes])

    def best(self, query: np.ndarray, codes: Iterable[int], n: int) -> np.ndarray:
        """Per store row (``n`` of them, float32): the largest product of its vectors with
        ``query``, for the rows of the groups ``codes``; ``-inf`` for every other row."""
        out = np.full(n, -np.inf, dtype=np.float32)
        with single_thread_blas():
            for code in codes:
                group = self.groups_.get(int(code))
                if group is None:
                    continue
                buffer, used, rows, starts = group
                sims = _padded_product(buffer, query, end=used)
                out[rows] = sims if len(starts) == used else np.maximum.reduceat(sims, starts)
        return out


class ExactIndex:
    """A growable float32 matrix of unit vectors addressed by the store's row index.

    Args:
        dim: Vector dimension, or ``None`` to take it from the first vector added.
    """

    def __init__(self, dim: int | None = None) -> None:
        self.dim = dim
        self._matrix = np.zeros((0, dim or 0), dtype=np.float32)
        self._present = np.zeros(0, dtype=bool)
        self._n = 0
        self.rewrites = 0

    def __len__(self) -> int:
        return self._n

    def _grow(self, n: int) -> None:
        cap = self._matrix.shape[0]
        if n <= cap:
            return
        new_cap = _padded_rows(max(n, 2 * cap, 1024))  # spare rows pad the last block
        matrix = np.zeros((new_cap, self.dim or 0), dtype=np.float32)
        matrix[: self._n] = self._matrix[: self._n]
        present = np.zeros(new_cap, dtype=bool)
        present[: self._n] = self._present[: self._n]
        self._matrix, self._present = matrix, present

    def set(self, row: int, vector: np.ndarray | None, *, unit: bool = False) -> None:
        """Put the vector of row ``row`` (rows are appended in order; ``None`` = no vector).

        The vector is scaled to unit length, unless ``unit`` says it is one already: a vector
        this index normalised once, read back from disk. Normalising it again would move its
        last float32 bits, and scores that tie in a replay (which normalises once) would no
        longer tie in a store reopened from disk."""
        if row < 0:
            raise ValueError(f"vectors.py: field 'row' must be >= 0, got {row}")
        if vector is not None:
            vec = np.asarray(vector, dtype=np.float32).reshape(-1)
            if self.dim is None:
                self.dim = int(vec.shape[0])
                self._matrix = np.zeros((self._matrix.shape[0], self.dim), dtype=np.float32)
            if vec.shape[0] != self.dim:
                raise ValueError(
                    f"field 'embedding': expected dimension {self.dim}, got {vec.shape[0]}"
                )
            norm = 0.0 if unit else float(np.linalg.norm(vec))
            if norm > 0:
                vec = vec / norm
        if row < self._n:
            self.rewrites += 1  # an approximate index built over the old vector is stale
        self._grow(row + 1)
        self._n = max(self._n, row + 1)
        if vector is None:
            self._present[row] = False
            self._matrix[row] = 0.0  # a removed (purged) vector leaves nothing behind
        else:
            self._matrix[row] = vec
            self._present[row] = True

    @property
    def matrix(self) -> np.ndarray:
        """The ``(n, dim)`` matrix of unit vectors (rows without a vector are zero)."""
        return self._matrix[: self._n]

    @property
    def present(self) -> np.ndarray:
        """Boolean mask of rows that have a vector."""
        return self._present[: self._n]

    def get(self, row: int) -> np.ndarray | None:
        """The unit vector of ``row``, or ``None`` (also for a row outside ``0..n-1``)."""
        if not 0 <= row < self._n or not self._present[row]:
            return None
        return self._matrix[row].copy()

    def similarities(
        self,
        query: np.ndarray,
        wanted: np.ndarray | None = None,
        *,
        codes: np.ndarray | None = None,
    ) -> np.ndarray:
        """Cosine similarity of ``query`` with every row (``-inf`` where a row has no vector).

        Args:
            query: The query vector (normalised here).
            wanted: Boolean mask of the rows whose similarity is needed (default: all); the
                others may be left at ``-inf``.
            codes: A code per row (the store's client codes), with ``wanted``: the rows are
                kept in one matrix per code as well (:class:`RowGroups`, up to
                :data:`GROUP_MAX_ROWS` rows), and only the groups of the wanted rows are
                multiplied. A client's rows are scattered over the store, so the blocks of
                :func:`block_products` that hold them are mostly other clients' rows. Used only
                where this BLAS gives a row the value of its block in any padded product
                (:func:`_gather_is_exact`): the values are those of :func:`block_products`.
        """
        q = np.asarray(query, dtype=np.float32).reshape(-1)
        check_query_dim(q, self.dim)
        norm = float(np.linalg.norm(q))
        if norm > 0:
            q = q / norm
        n = self._n
        groups = None
        if codes is not None and wanted is not None:
            groups = self._groups(codes)
        if groups is None:
            sims = block_products(self._matrix, q, wanted, n=n)
        else:
            sims = groups.best(q, codes_of(codes, wanted, n), n)
        return np.where(self.present, sims.astype(np.float64), -np.inf)

    def _groups(self, codes: np.ndarray) -> RowGroups | None:
        """The rows grouped by ``codes`` (kept, and extended as rows are appended; made again
        when a row's vector or code changed), or ``None`` where :meth:`similarities` multiplies
        blocks instead."""
        n = self._n
        codes = np.asarray(codes)
        if (
            not n
            or n > GROUP_MAX_ROWS
            or len(codes) < n
            or codes.dtype.kind not in "iu"
            or not self.dim
            or not _gather_is_exact(self.dim)
        ):
            return None
        kept = getattr(self, "groups_", None)
        if kept is None or kept[0] != self.rewrites or not kept[1].same_codes(codes) \
                or len(kept[1]) > n:
            kept = self.groups_ = (self.rewrites, RowGroups())
        groups = kept[1]
        start = len(groups)
        if start < n:
            groups.append(codes[start:n], np.ones(n - start, dtype=np.int64),
                          self._matrix[start:n])
        return groups


class AnnIndex:
    """An approximate (HNSW) index over the rows of an :class:`ExactIndex`, built with usearch.

    Keys are store rows. :meth:`sync` adds the rows written since the last call (a rewrite of an
    already indexed row rebuilds the index). usearch (Vardanian, "USearch", 2023) implements
    HNSW (Malkov & Yashunin, "Efficient and robust approximate nearest neighbor search using
    Hierarchical Navigable Small World graphs", TPAMI 2020); cosine metric over the exact index's
    unit vectors.

    Args:
        connectivity: HNSW graph degree ``M`` (usearch default 16).
        expansion_add: Build beam ``efConstruction`` (usearch default 128).
        expansion_search: Query beam ``ef`` (usearch default 64).
        dtype: Storage type of the vectors inside the graph (``"f32"``, ``"f16"``, ``"i8"``);
            the caller re-scores hits on the exact float32 vectors.
        threads: Threads used while adding vectors (0 = all cores). The default 1 adds them
            in row order, so the same store gives the same graph and the same results; more
            threads build faster but in an order that varies from run to run.

    Attributes:
        index_: The usearch ``Index`` (``None`` before the first sync).
        n_: Rows of the exact index examined so far.
        rewrites_: ``ExactIndex.rewrites`` at the last sync.
    """

    def __init__(
        self,
        connectivity: int = 16,
        expansion_add: int = 128,
        expansion_search: int = 64,
        dtype: str = "f32",
        threads: int = 1,
    ) -> None:
        self.connectivity = connectivity
        self.expansion_add = expansion_add
        self.expansion_search = expansion_search
        self.dtype = dtype
        self.threads = threads
        self.index_: Any = None
        self.n_ = 0
        self.rewrites_ = 0

    def __len__(self) -> int:
        return 0 if self.index_ is None else len(self.index_)

    def sync(self, exact: ExactIndex) -> AnnIndex:
        """Add the rows of ``exact`` written since the last sync (rebuild after a rewrite)."""
        from usearch.index import Index

        if exact.dim is None:
            return self
        if self.index_ is None or exact.rewrites != self.rewrites_ or len(exact) < self.n_:
            self.index_ = Index(
                ndim=exact.dim,
                metric="cos",
                dtype=self.dtype,
                connectivity=self.connectivity,
                expansion_add=self.expansion_add,
                expansion_search=self.expansion_search,
            )
            self.n_, self.rewrites_ = 0, exact.rewrites
        n = len(exact)
        if self.n_ < n:
            rows = self.n_ + np.flatnonzero(exact.present[self.n_ : n])
            if len(rows):
                self.index_.add(
                    rows.astype(np.uint64), exact.matrix[rows], threads=self.threads
                )
            self.n_ = n
        return self

    def search(self, query: np.ndarray, k: int) -> np.ndarray:
        """Rows of the (approximately) ``k`` nearest vectors, nearest first."""
        if self.index_ is None or len(self.index_) == 0 or k <= 0:
            return np.zeros(0, dtype=np.int64)
        q = np.asarray(query, dtype=np.float32).reshape(-1)
        check_query_dim(q, self.index_.ndim)
        hits = self.index_.search(q, min(k, len(self.index_)), threads=1)
        return np.asarray(hits.keys, dtype=np.int64)


def check_query_dim(query: np.ndarray, dim: int | None) -> None:
    """Refuse a query vector whose length is not the store's vector dimension ``dim`` (a store
    written with one embedder, read with another) with a message naming both, where numpy
    would fail inside a matrix product.

    Raises:
        ValueError: The lengths differ.
    """
    if dim is not None and query.shape[0] != dim:
        raise ValueError(
            f"the query vector has dimension {query.shape[0]} but the store's vectors have "
            f"{dim}: the store was written with another embedder; read it with the one that "
            "wrote it (the same --embedder)"
        )


def drop_chroma_system(path: str | Path) -> None:
    """Stop the chromadb system this process keeps for the directory ``path``, if any.

    chromadb shares one system (and its caches of the directory's vector segments) between
    every client of a directory in a process, until the last client is closed. A client that was
    never closed (a store dropped without ``close()``) would leave it behind, stale once another
    process writes there; the store drops it before it opens the directory, and whenever it gives
    up on one. Only for a directory no live client of this process uses.
    """
    try:
        from chromadb.api.shared_system_client import SharedSystemClient
    except ImportError:  # pragma: no cover - chromadb is a dependency
        return
    systems = getattr(SharedSystemClient, "_identifier_to_system", None)
    counts = getattr(SharedSystemClient, "_identifier_to_refcount", None)
    guard = getattr(SharedSystemClient, "_refcount_lock", None)
    if not isinstance(systems, dict) or guard is None:
        return  # a chromadb whose cache this does not know: nothing to drop
    key = str(path)
    with guard:
        system = systems.pop(key, None)
        if isinstance(counts, dict):
            counts.pop(key, None)
    if system is not None:
        try:
            system.stop()
        except Exception:  # chromadb raises many types; the system is out of the cache anyway
            pass


class ChromaIndex:
    """A chromadb ``PersistentClient`` collection holding the store's vectors under its ids.

    Embeddings are always handed to chromadb (its default embedding function would download a
    model). Cosine space, so ``1 - distance`` is the cosine similarity.

    Args:
        path: Directory of the persistent client, or ``None`` for an ephemeral in-memory client.
        collection: Collection name.
        hnsw_m: HNSW graph degree (chromadb's ``hnsw:M``; its default is 16).
        hnsw_construction_ef: HNSW build beam (``hnsw:construction_ef``; default 100). The
            store's defaults (12, 64) halve insert time; ``bench/bench_stages.py`` reports the
            recall@10 this costs against the exact index.
        hnsw_search_ef: HNSW query beam (``hnsw:search_ef``; default 100).
        create: Create the collection when it is missing; ``False`` opens an existing one
            (read-only use) and raises when there is none.
    """

    def __init__(
        self,
        path: str | Path | None,
        collection: str = "memories",
        *,
        hnsw_m: int = 12,
        hnsw_construction_ef: int = 64,
        hnsw_search_ef: int = 100,
        create: bool = True,
    ) -> None:
        import chromadb
        from chromadb.config import Settings

        settings = Settings(anonymized_telemetry=False, allow_reset=False)
        self.path = None if path is None else Path(path)
        if path is None:
            # Ephemeral clients of one process share their collections: give each index its own.
            import uuid

            self.client = chromadb.EphemeralClient(settings=settings)
            collection = f"{collection}-{uuid.uuid4().hex}"
        else:
            self.client = chromadb.PersistentClient(path=str(path), settings=settings)
        try:
            if not create:
                self.collection = self.client.get_collection(
                    name=collection, embedding_function=None
                )
                return
            self.collection = self.client.get_or_create_collection(
                name=collection,
                metadata={
                    "hnsw:space": "cosine",
                    "hnsw:M": hnsw_m,
                    "hnsw:construction_ef": hnsw_construction_ef,
                    "hnsw:search_ef": hnsw_search_ef,
                },
                embedding_function=None,
            )
        except BaseException:
            if self.path is not None:  # leave no system of the directory behind
                self.close()
            raise

    def close(self) -> None:
        """Close the chromadb client (idempotent). chromadb stops the directory's system once
        no client of this process uses it, so the next client starts from what is on disk
        instead of this process's caches. The index cannot be used afterwards."""
        client = self.__dict__.pop("client", None)
        if client is not None:
            try:
                client.close()
            except Exception:  # chromadb raises many types; closing must not fail a close
                if self.path is not None:
                    drop_chroma_system(self.path)

    def upsert(
        self,
        ids: Sequence[str],
        vectors: np.ndarray,
        metadatas: Sequence[dict[str, Any]],
    ) -> None:
        """Insert or replace vectors with their filterable metadata."""
        if len(ids) == 0:
            return
        vectors = np.asarray(vectors, dtype=np.float32)
        step = self.client.get_max_batch_size()
        for start in range(0, len(ids), step):
            self.collection.upsert(
                ids=list(ids[start : start + step]),
                embeddings=vectors[start : start + step],
                metadatas=list(metadatas[start : start + step]),
            )

    def update_metadata(self, ids: Sequence[str], metadatas: Sequence[dict[str, Any]]) -> None:
        """Replace the metadata of existing ids."""
        step = self.client.get_max_batch_size()
        for start in range(0, len(ids), step):
            self.collection.update(
                ids=list(ids[start : start + step]), metadatas=list(metadatas[start : start + step])
            )

    def delete(self, ids: Sequence[str]) -> None:
        """Remove ids (used to drop orphans on reconciliation)."""
        step = self.client.get_max_batch_size()
        for start in range(0, len(ids), step):
            self.collection.delete(ids=list(ids[start : start + step]))

    def ids(self) -> list[str]:
        """Every id in the collection."""
        return list(self.collection.get(include=[])["ids"])

    def get(self, ids: Sequence[str]) -> dict[str, Any]:
        """Vectors and metadata of ``ids`` (chromadb's ``get`` result)."""
        return self.collection.get(ids=list(ids), include=["embeddings", "metadatas"])

    def count(self) -> int:
        """Number of vectors."""
        return int(self.collection.count())

    def query(
        self, vector: np.ndarray, k: int, where: dict[str, Any] | None = None
    ) -> list[tuple[str, float]]:
        """Approximate top-``k`` (id, cosine similarity), best first, under a metadata filter."""
        if isinstance(k, bool) or not isinstance(k, (int, np.integer)) or k < 0:
            raise ValueError(f"vectors.py: field 'k' must be an int >= 0, got {k!r}")
        n = self.count()
        if n == 0 or k == 0:
            return []
        res = self.collection.query(
            query_embeddings=[np.asarray(vector, dtype=np.float32)],
            n_results=min(k, n),
            where=where or None,
            include=["distances"],
        )
        return [
            (mid, 1.0 - float(dist))
            for mid, dist in zip(res["ids"][0], res["distances"][0], strict=True)
        ]
