"""Decay and scoring models besides design §D0.5's (array code shared by stages and consolidation).

* docs/design.md §D3.7 ``decay_score``::

      decay_score = base_score × exp(−λ × days_since_created) × (1 + ln(1 + access_count))
                    × confidence                                       (λ = 0.01, base 1.0)

  below 0.1 a memory is a candidate for archival to a cold tier (still queryable, lower
  priority);
* design §D1.4's live importance score: set at write from the importance label, raised by use,
  lowered by decay::

      importance_score = min(1, start[label] + use_gain × access_count)
                         × decay_per_day ** days_since_last_access

* design §D4.3's recency: ``0.5 ** (days_since_created / half_life_days)``, and ``1`` for types
  that never decay (design §D4.3: ``rule`` and ``decision``; memlab's decisions are its rules).
"""

from __future__ import annotations

import numpy as np

from memlab.memory.records import NON_DECAYING_KINDS
from memlab.timeutil import SECONDS_PER_DAY


def decay_score(
    created_at: np.ndarray,
    access_count: np.ndarray,
    confidence: np.ndarray,
    now: float,
    *,
    lam: float = 0.01,
    base_score: float = 1.0,
) -> np.ndarray:
    """Design §D3.7 (e.g. 100 days, 0 accesses, confidence 1: ``exp(−1)`` = 0.368)."""
    days = np.maximum((now - np.asarray(created_at, dtype=np.float64)) / SECONDS_PER_DAY, 0.0)
    access = 1.0 + np.log1p(np.asarray(access_count, dtype=np.float64))
    return base_score * np.exp(-lam * days) * access * np.asarray(confidence, dtype=np.float64)


def importance_score(
    importance: np.ndarray,
    access_count: np.ndarray,
    days_since_access: np.ndarray,
    *,
    critical: float = 1.0,
    high: float = 0.75,
    medium: float = 0.5,
    low: float = 0.25,
    use_gain: float = 0.05,
    decay_per_day: float = 0.99,
) -> np.ndarray:
    """Design §D1.4's live importance score (labels map to starting values, see module docstring).

    Raises:
        ValueError: On an importance label outside ``critical, high, medium, low``.
    """
    labels = np.asarray(importance)
    start = np.full(labels.shape, np.nan)
    for name, value in (("critical", critical), ("high", high), ("medium", medium), ("low", low)):
        start[labels == name] = value
    if np.isnan(start).any():
        bad = str(labels[np.isnan(start)][0])
        raise ValueError(f"decay.py: field 'importance': unknown label {bad!r}")
    used = np.minimum(1.0, start + use_gain * np.asarray(access_count, dtype=np.float64))
    days = np.maximum(np.asarray(days_since_access, dtype=np.float64), 0.0)
    return used * np.power(decay_per_day, days)


def recency(
    types: np.ndarray,
    created_at: np.ndarray,
    now: float,
    *,
    half_life_days: float = 30.0,
    non_decaying_types: tuple[str, ...] = NON_DECAYING_KINDS,
) -> np.ndarray:
    """Design §D4.3's recency score: halves every ``half_life_days``; 1 for non-decaying
    kinds (``types`` are the memories' kinds: :func:`memlab.memory.records.kind_of`)."""
    days = np.maximum((now - np.asarray(created_at, dtype=np.float64)) / SECONDS_PER_DAY, 0.0)
    r = np.power(0.5, days / half_life_days)
    return np.where(np.isin(np.asarray(types), list(non_decaying_types)), 1.0, r)
