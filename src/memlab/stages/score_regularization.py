"""Score regularization: smooth the head's scores over a graph of its memories.

Diaz, "Regularizing Ad Hoc Retrieval Scores", CIKM 2005: related documents should score alike,
so the initial scores ``y`` of the top-ranked documents are replaced by the ``f`` that trades
closeness to ``y`` against smoothness over a document affinity graph ``W``::

    f* = argmin_f  Σ_ij W_ij (f_i / √D_ii − f_j / √D_jj)²  +  μ Σ_i (f_i − y_i)²
       = (1 − α) (I − α S)⁻¹ y,        S = D^{-1/2} W D^{-1/2},  α = 1 / (1 + μ)

(Zhou et al.'s local and global consistency; ``D`` the degree matrix, an isolated memory keeps
``(1 − α) y``). Here the documents are the ``top_n`` leading candidates, ``y`` their incoming
score min-max scaled to [0, 1], and the graph links two memories of the same **session** (a
client's writes without a pause longer than ``max_gap_seconds``) with weight ``session_weight``
and two memories sharing an **entity** (links whose role is in ``roles``) with weight
``entity_weight``; the two add up. The system is solved exactly (``top_n`` is small).
Candidates below the head keep their incoming order, below it.

Defaults: ``alpha = 0.5`` weighs the graph and the initial scores equally; both edge types on
(weight 1). Diaz tunes α per collection; on LoCoMo the two halves of the conversations chose
0.35 and 0.5 (``eval/locomo_cv.py``).
"""

from __future__ import annotations

from typing import Any, ClassVar

import numpy as np
import polars as pl

from memlab.memory.records import ENTITY_ROLES
from memlab.stages.base import (
    HeadReranker,
    QueryContext,
    register_stage,
    score_column,
)
from memlab.stages.cluster_smoothing import minmax, session_ids
from memlab.stages.constraints import Integral, Interval, Options, Real, SequenceOf
from memlab.stages.graph import check_roles, memory_incidence


def regularize(y: np.ndarray, w: np.ndarray, alpha: float) -> np.ndarray:
    """``(1 − α) (I − α S)⁻¹ y`` with ``S = D^{-1/2} W D^{-1/2}`` (Diaz 2005).

    Args:
        y: ``(n,)`` initial scores.
        w: ``(n, n)`` symmetric non-negative affinities (the diagonal is ignored).
        alpha: In ``[0, 1)``.
    """
    w = np.array(w, dtype=np.float64)
    np.fill_diagonal(w, 0.0)
    degree = w.sum(axis=1)
    inv_sqrt = np.divide(1.0, np.sqrt(degree), out=np.zeros_like(degree), where=degree > 0)
    s = inv_sqrt[:, None] * w * inv_sqrt[None, :]
    return (1.0 - alpha) * np.linalg.solve(np.eye(len(y)) - alpha * s, y)


@register_stage("score_regularization")
class ScoreRegularization(HeadReranker):
    """Replace the head's scores by their regularization over a session and entity graph.

    Args:
        top_n: How many leading candidates form the graph (and are re-scored).
        alpha: Weight of the graph against the initial scores (``α = 1 / (1 + μ)``); 0 keeps
            the incoming order.
        session_weight: Affinity of two memories of the same session.
        entity_weight: Affinity of two memories sharing an entity.
        max_gap_seconds: A longer pause between two writes of a client starts a new session.
        roles: Entity links that count as sharing an entity.

    Output column: ``regularized_score`` (``f*``; null below the head).
    """

    _parameter_constraints: ClassVar[dict[str, list[Any]]] = {
        "top_n": [Interval(Integral, 1, None, closed="left")],
        "alpha": [Interval(Real, 0, 1, closed="left")],
        "session_weight": [Interval(Real, 0, None, closed="left")],
        "entity_weight": [Interval(Real, 0, None, closed="left")],
        "max_gap_seconds": [Interval(Real, 0, None, closed="left")],
        "roles": [SequenceOf(Options(str, ENTITY_ROLES))],
    }

    columns = (score_column("regularized_score", "score regularized over the head's graph"),)
    embeds_other_texts = False  # embeds no text but the query

    def __init__(
        self,
        top_n: int = 50,
        alpha: float = 0.5,
        session_weight: float = 1.0,
        entity_weight: float = 1.0,
        max_gap_seconds: float = 3600.0,
        roles: tuple[str, ...] = ("mentioned",),
    ) -> None:
        self.top_n = top_n
        self.alpha = alpha
        self.session_weight = session_weight
        self.entity_weight = entity_weight
        self.max_gap_seconds = max_gap_seconds
        self.roles = roles

    def affinity(self, rows: np.ndarray, ctx: QueryContext) -> np.ndarray:
        """``(n, n)`` affinities of the store rows ``rows`` (zero diagonal)."""
        n = len(rows)
        w = np.zeros((n, n))
        if self.session_weight > 0:
            sess = session_ids(ctx, self.max_gap_seconds)[rows]
            w += self.session_weight * (sess[:, None] == sess[None, :])
        if self.entity_weight > 0:
            inc, _ = memory_incidence(ctx, check_roles(self.roles, "score_regularization"))
            head = inc[:, rows]
            shared = (head.T @ head).toarray() > 0
            w += self.entity_weight * shared
        np.fill_diagonal(w, 0.0)
        return w

    def rescore(
        self, frame: pl.DataFrame, rows: np.ndarray, head_scores: np.ndarray, ctx: QueryContext
    ) -> tuple[np.ndarray, dict[str, np.ndarray]]:
        f = regularize(minmax(head_scores), self.affinity(rows, ctx), self.alpha)
        return f, {"regularized_score": f}
