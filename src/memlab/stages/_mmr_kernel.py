"""numba kernel of :func:`memlab.stages.mmr.mmr_select` (imported on first use).

Kept in its own module so that importing :mod:`memlab.stages.mmr` does not import numba, and so
that numba can cache the compiled kernel on disk (``cache=True``).
"""

from __future__ import annotations

import numba
import numpy as np

__all__ = ["greedy"]


@numba.njit(cache=True, nogil=True)
def greedy(
    relevance: np.ndarray, sim: np.ndarray, lambda_: float, k: int,
    chosen: np.ndarray, values: np.ndarray,
) -> None:  # pragma: no cover - compiled
    """Greedy MMR, written into ``chosen`` and ``values`` (``k`` entries each).

    The floats and choices of the numpy loop it replaces: at each step every candidate's value
    is ``lambda_ * relevance - (1 - lambda_) * penalty`` (``-inf`` once chosen), the first
    largest value wins (the first NaN, as ``np.argmax``), and the penalty becomes the chosen
    candidate's similarity column, then its elementwise maximum with each later one (NaN
    propagating, as ``np.maximum``).
    """
    n = relevance.shape[0]
    oml = 1.0 - lambda_
    penalty = np.zeros(n)
    available = np.ones(n, dtype=np.bool_)
    for step in range(k):
        best = -1
        best_value = 0.0
        for j in range(n):
            v = lambda_ * relevance[j] - oml * penalty[j] if available[j] else -np.inf
            if v != v:  # NaN: np.argmax stops at the first
                best = j
                best_value = v
                break
            if best < 0 or v > best_value:
                best = j
                best_value = v
        chosen[step] = best
        values[step] = best_value
        available[best] = False
        for j in range(n):
            s = sim[j, best]
            if step == 0:
                penalty[j] = s
            else:
                p = penalty[j]
                penalty[j] = p if (p >= s or p != p) else s
