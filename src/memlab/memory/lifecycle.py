"""Read-side lifecycle arithmetic of docs/design.md §D0.5: confidence decay and access boost.

effective_confidence = confidence × decay_factor ** days_since_last_access
access_boost         = 1 + boost_weight × log2(access_count + 1)
effective_score      = similarity × effective_confidence × access_boost

Decay applies to facts and statuses only; events and decisions are historical records. Every
constant is a parameter (design §D0.5 defaults: decay 0.98 per day, boost weight 0.3).
"""

from __future__ import annotations

import numpy as np

from memlab.memory.records import DECAYING_KINDS
from memlab.timeutil import SECONDS_PER_DAY


def effective_confidence(
    confidence: float | np.ndarray,
    days_since_access: float | np.ndarray,
    *,
    decay_factor: float = 0.98,
) -> float | np.ndarray:
    """``confidence × decay_factor ** days`` (docs/design.md §D0.5: 30 days → 0.545, 90 → 0.162).

    The design's table prints 0.869 for 7 days; its own formula gives 0.98**7 = 0.86813.

    Negative day counts (a clock that runs backwards) are clamped to zero.
    """
    days = np.maximum(days_since_access, 0.0)
    return confidence * np.power(decay_factor, days)


def access_boost(
    access_count: int | np.ndarray, *, boost_weight: float = 0.3
) -> float | np.ndarray:
    """``1 + boost_weight × log2(access_count + 1)`` (design §D0.6; 1 → 1.3, 7 → 1.9, 15 → 2.2)."""
    return 1.0 + boost_weight * np.log2(np.asarray(access_count, dtype=np.float64) + 1.0)


def days_since(now: float, last_accessed_at: np.ndarray, created_at: np.ndarray) -> np.ndarray:
    """Days since the last access, or since creation when never accessed (NaN = never)."""
    last = np.where(np.isnan(last_accessed_at), created_at, last_accessed_at)
    return (now - last) / SECONDS_PER_DAY


def lifecycle_factor(
    types: np.ndarray,
    confidence: np.ndarray,
    days: np.ndarray,
    access_count: np.ndarray,
    *,
    decay_factor: float = 0.98,
    boost_weight: float = 0.3,
    decaying_types: tuple[str, ...] = DECAYING_KINDS,
) -> np.ndarray:
    """``effective_confidence × access_boost`` per memory, decay on ``decaying_types`` only
    (``types`` are the memories' kinds: :func:`memlab.memory.records.kind_of`)."""
    decays = np.isin(types, decaying_types)
    eff = np.where(
        decays,
        effective_confidence(confidence, days, decay_factor=decay_factor),
        confidence,
    )
    return eff * access_boost(access_count, boost_weight=boost_weight)
