"""Score normalisations for fusion, by name (ranx's ``normalization/``).

Each function maps one list's scores, given in the list's rank order, to a common scale:

* ``min-max`` (alias ``minmax``): ``(s - min) / (max - min)`` (Lee, SIGIR 1997);
* ``max``: ``s / max`` (ranx; the denominator is floored at 1e-9);
* ``sum``: ``(s - min) / Σ (s - min)`` (Montague & Aslam, CIKM 2001; floored at 1e-9);
* ``zscore`` (alias ``zmuv``): ``(s - mean) / std``, zero mean and unit variance
  (Montague & Aslam, CIKM 2001);
* ``rank``: ``1 - i / n`` for the list's ``i``-th candidate (0-based) of ``n``: the scores are
  ignored (ranx);
* ``none``: the scores as they are.

A list whose scores are all equal normalises to 0 under ``min-max`` and ``zscore`` (it says
nothing about the order). The statistics of ``min-max``, ``max``, ``sum`` and ``zscore`` are
those of the list's finite scores; a NaN (a candidate the list gives no number) stays NaN and
moves no other candidate's value. Register another with :func:`register_normalization`.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any, ClassVar

import numpy as np

from memlab.registry import Registry
from memlab.stages.base import FusionStage
from memlab.stages.constraints import Integral, Interval, Options

Normalization = Callable[[np.ndarray], np.ndarray]
"""``scores in rank order -> normalised scores``."""

NORMALIZATIONS: Registry[Normalization] = Registry("normalization")
"""Normalisations by name."""

register_normalization = NORMALIZATIONS.register
"""Function decorator: register a normalisation under ``name``."""

_FLOOR = 1e-9


def get_normalization(name: str, *, where: str = "fusion") -> Normalization:
    """The normalisation registered as ``name`` (``ValueError`` naming ``where``)."""
    try:
        return NORMALIZATIONS.lookup(name)
    except ValueError as error:
        raise ValueError(f"{where}: field 'normalization': {error}") from None


def _over_finite(norm: Normalization) -> Normalization:
    """``norm`` computed over the finite scores only; the others come out NaN."""

    @functools.wraps(norm)
    def wrapped(values: np.ndarray) -> np.ndarray:
        finite = np.isfinite(values)
        if finite.all():
            return norm(values)
        out = np.full(len(values), np.nan)
        out[finite] = norm(values[finite])
        return out

    return wrapped


@register_normalization("none")
def no_norm(values: np.ndarray) -> np.ndarray:
    """The scores unchanged."""
    return values


@register_normalization("minmax")
@register_normalization("min-max")
@_over_finite
def min_max_norm(values: np.ndarray) -> np.ndarray:
    """``(s - min) / (max - min)``; a constant list gives zeros."""
    span = float(values.max() - values.min()) if len(values) else 0.0
    return np.zeros_like(values) if span == 0.0 else (values - values.min()) / span


@register_normalization("max")
@_over_finite
def max_norm(values: np.ndarray) -> np.ndarray:
    """``s / max`` (max floored at 1e-9)."""
    top = float(values.max()) if len(values) else 0.0
    return values / max(top, _FLOOR)


@register_normalization("sum")
@_over_finite
def sum_norm(values: np.ndarray) -> np.ndarray:
    """``(s - min) / Σ (s - min)`` (denominator floored at 1e-9)."""
    if len(values) == 0:
        return values
    low = float(values.min())
    return (values - low) / max(float(values.sum()) - low * len(values), _FLOOR)


@register_normalization("zmuv")
@register_normalization("zscore")
@_over_finite
def zscore_norm(values: np.ndarray) -> np.ndarray:
    """``(s - mean) / std``; a constant list gives zeros (and an empty one stays empty)."""
    if len(values) == 0:
        return values
    std = float(values.std())
    return np.zeros_like(values) if std == 0.0 else (values - values.mean()) / std


@register_normalization("rank")
def rank_norm(values: np.ndarray) -> np.ndarray:
    """``1 - i / n`` by position in the list (the scores themselves are ignored)."""
    n = len(values)
    return 1.0 - np.arange(n, dtype=np.float64) / n if n else values.astype(np.float64)


class NormalizedFusion(FusionStage):
    """A fusion method over each list's normalised scores (CombMAX, CombANZ, CombMNZ …).

    Owns the two parameters such methods share; a subclass writes only its ``combine``,
    ``score_name`` and ``columns``.

    Args:
        normalization: A name of this module's registry (ranx default ``min-max``).
        top_k: Keep this many fused candidates (``None`` = all).
    """

    cacheable = True
    _parameter_constraints: ClassVar[dict[str, list[Any]]] = {
        "normalization": [Options(str, NORMALIZATIONS)],
        "top_k": [Interval(Integral, 1, None, closed="left"), None],
    }

    def __init__(self, normalization: str = "min-max", top_k: int | None = None) -> None:
        self.normalization = normalization
        self.top_k = top_k
