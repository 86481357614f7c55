"""numba kernel of :meth:`memlab.index.bm25.SparseBM25Engine.top` (imported on first use).

Kept in its own module so that importing :mod:`memlab.index.bm25` does not import numba (about
0.6 s) and so that numba can cache the compiled kernel on disk (``cache=True``).
"""

from __future__ import annotations

import numba
import numpy as np

__all__ = ["top_k"]


@numba.njit(cache=True, nogil=True, inline="always")
def _offer(heap: np.ndarray, filled: int, k: int, s: float) -> int:  # pragma: no cover
    """Put ``s`` into the min-heap of the ``k`` best scores; return the new fill."""
    if filled < k:
        heap[filled] = s
        c = filled
        while c > 0:
            p = (c - 1) // 2
            if heap[p] <= heap[c]:
                break
            heap[p], heap[c] = heap[c], heap[p]
            c = p
        return filled + 1
    if s > heap[0]:
        heap[0] = s
        p = 0
        while True:
            c = 2 * p + 1
            if c >= k:
                break
            if c + 1 < k and heap[c + 1] < heap[c]:
                c += 1
            if heap[p] <= heap[c]:
                break
            heap[p], heap[c] = heap[c], heap[p]
            p = c
    return filled


@numba.njit(cache=True, nogil=True)
def top_k(
    indptr: np.ndarray,
    indices: np.ndarray,
    data: np.ndarray,
    terms: np.ndarray,
    rows: np.ndarray,
    visible: np.ndarray,
    k: int,
    score: np.ndarray,
    seen: np.ndarray,
    docs: np.ndarray,
    out: np.ndarray,
    heap: np.ndarray,
) -> int:  # pragma: no cover - compiled
    """Sum the CSC columns ``terms`` and keep the best visible positive documents.

    The columns are added in order, repeats included (document ``d`` gets ``0.0 + c1 + c2 + …``
    in query-token order: the floats of a dense ``score[col] += data`` loop). A document is kept
    when its score is above 0 and ``visible[rows[d]]`` holds; with ``k > 0`` only those scoring
    at least the ``k``-th best score are kept (ties at the cut included, as
    :func:`memlab.stages.dense.top_rows`). The ``k`` best scores so far sit in a min-heap; a
    document scoring below its root can never make the cut and is dropped at once.

    ``score`` and ``seen`` are all-zero buffers of one entry per document and are left all-zero;
    ``heap`` holds at least ``k`` floats. When the query's posting lists cover a quarter of the
    documents or more, the sums go straight into ``score`` and every document is scanned once
    (no per-posting bookkeeping); otherwise only the touched documents are listed and visited.

    Returns:
        ``n``: the kept documents are ``docs[:n]`` (in no particular order), their scores
        ``out[:n]``.
    """
    n_docs = len(score)
    postings = 0
    for t in terms:
        postings += indptr[t + 1] - indptr[t]
    m = 0
    filled = 0
    # A score is kept when it is above 0 and, once the heap holds k scores, at least its root:
    # ``bar`` is 0 until then and the root after, so the test that fails for nearly every
    # document comes first and is one comparison.
    bar = 0.0
    if postings * 4 >= n_docs:
        # many postings: add without bookkeeping, scan every document once, clear the buffer
        for t in terms:
            for j in range(indptr[t], indptr[t + 1]):
                score[indices[j]] += data[j]
        for d in range(n_docs):
            s = score[d]
            if s >= bar and s > 0.0 and visible[rows[d]]:
                if k > 0:
                    filled = _offer(heap, filled, k, s)
                    if filled == k:
                        bar = heap[0]
                docs[m] = d
                out[m] = s
                m += 1
        score[:] = 0.0
    else:
        # few postings: remember the touched documents and visit only those
        n = 0
        for t in terms:
            for j in range(indptr[t], indptr[t + 1]):
                d = indices[j]
                if not seen[d]:
                    seen[d] = True
                    docs[n] = d
                    n += 1
                score[d] += data[j]
        for i in range(n):
            d = docs[i]
            s = score[d]
            score[d] = 0.0
            seen[d] = False
            if s >= bar and s > 0.0 and visible[rows[d]]:
                if k > 0:
                    filled = _offer(heap, filled, k, s)
                    if filled == k:
                        bar = heap[0]
                docs[m] = d  # m <= i: never overwrites a document still to visit
                out[m] = s
                m += 1
    if k <= 0 or filled < k:
        return m
    kth = heap[0]
    j = 0
    for i in range(m):
        if out[i] >= kth:
            docs[j] = docs[i]
            out[j] = out[i]
            j += 1
    return j
