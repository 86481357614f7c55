"""numba kernel of the eviction loop of :class:`memlab.stages.entropy_gate.EntropyGate`
(imported on first use; kept apart so that importing the stage does not import numba, and so
that numba caches the compiled kernel on disk)."""

from __future__ import annotations

import numba
import numpy as np

__all__ = ["evict"]

OVER_BUDGET = 3
"""Reason code of an eviction with no deficit (0, 1, 2: the largest deficit's position)."""


@numba.njit(cache=True, nogil=True)
def evict(
    lower: np.ndarray, redundancy: np.ndarray, alive: np.ndarray, open_: np.ndarray,
    base: np.ndarray, norm: np.ndarray, relevance: np.ndarray, cost: np.ndarray,
    w_red: float, w_ent: float, w_rel: float, total: int, budget: float,
    victims: np.ndarray, reasons: np.ndarray, noted: np.ndarray,
) -> int:  # pragma: no cover - compiled
    """Evict candidates until the alive ones cost at most ``budget`` tokens; returns how many
    were evicted (written into ``victims``, ``reasons`` and ``noted``).

    At each step the candidate of lowest priority ``base - w_red * redundancy`` among the open
    ones (the alive ones once none is open) leaves, the lowest-ranked of equal priorities first;
    its reason is the position of its largest deficit (redundancy, low information, low
    relevance; the first of equal ones) or :data:`OVER_BUDGET` when none is positive; the
    redundancy of every alive candidate whose maximum it was is recomputed over the alive ones.
    ``alive``, ``open_`` and ``redundancy`` are updated in place. The floats and choices of the
    numpy loop it replaces (finite inputs).
    """
    n = alive.shape[0]
    count = 0
    n_alive = 0
    n_open = 0
    for j in range(n):
        n_alive += alive[j]
        n_open += open_[j]
    while total > budget and n_alive > 0:
        pool = open_ if n_open > 0 else alive
        victim = -1
        best = 0.0
        for j in range(n):
            if pool[j]:
                p = base[j] - w_red * redundancy[j]
                if victim < 0 or p < best:
                    best = p
                    victim = j
                elif p == best:
                    victim = j
        d0 = w_red * redundancy[victim]
        d1 = w_ent * (1.0 - norm[victim])
        d2 = w_rel * (1.0 - relevance[victim])
        if not (d0 > 0 or d1 > 0 or d2 > 0):
            reason = OVER_BUDGET
        elif d0 >= d1 and d0 >= d2:
            reason = 0
        elif d1 >= d2:
            reason = 1
        else:
            reason = 2
        victims[count] = victim
        reasons[count] = reason
        noted[count] = redundancy[victim]
        count += 1
        if open_[victim]:
            n_open -= 1
        alive[victim] = False
        open_[victim] = False
        n_alive -= 1
        total -= cost[victim]
        for i in range(n):
            if alive[i] and redundancy[i] > 0 and lower[i, victim] == redundancy[i]:
                m = 0.0
                for j in range(n):
                    v = lower[i, j] if alive[j] else 0.0
                    if j == 0 or v > m:
                        m = v
                redundancy[i] = m
    return count
