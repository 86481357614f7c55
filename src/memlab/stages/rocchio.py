"""Rocchio pseudo-relevance feedback in embedding space: re-score the head by an expanded query.

Rocchio, "Relevance Feedback in Information Retrieval", in *The SMART Retrieval System*, 1971:
move the query vector towards the documents judged relevant. Without judgments the leading
candidates stand in for them (pseudo-relevance feedback); Li et al., "Pseudo Relevance Feedback
with Deep Language Models and Dense Retrievers: Successes and Pitfalls", TOIS 2023, apply it to
dense vectors. With ``q`` the query vector and ``v(d)`` the unit memory vectors::

    q' = q / |q| + beta · mean_{d ∈ top feedback} v(d)
    score'(d) = z(score)(d) + weight · z(cos(q', v(d)))        for the top_n candidates

(z-scores over the head; candidates below it keep their incoming order). A question that names
a category ("Which activities does Melanie do?") finds one or two instances; their vectors pull
the query towards the others (a class, a hike, a painting), which a multi-hop answer needs all
of. Defaults: 5 feedback memories and ``beta = 1`` (the centroid weighs as much as the query),
``weight = 0.5``; ``eval/locomo_cv.py`` chooses them on held-in conversations.
"""

from __future__ import annotations

from typing import Any, ClassVar

import numpy as np
import polars as pl

from memlab.stages.base import (
    HeadReranker,
    QueryContext,
    register_stage,
    score_column,
)
from memlab.stages.constraints import Integral, Interval, Predicate, Real, SequenceOf
from memlab.stages.maxsim import zscore_fusion


def expanded_query(query: np.ndarray, feedback: np.ndarray, beta: float) -> np.ndarray:
    """``q / |q| + beta · mean(feedback)`` scaled to unit length (``q / |q|`` without
    feedback)."""
    q = np.asarray(query, dtype=np.float64)
    q = q / max(float(np.linalg.norm(q)), 1e-12)
    if len(feedback):
        q = q + beta * np.asarray(feedback, dtype=np.float64).mean(axis=0)
    return q / max(float(np.linalg.norm(q)), 1e-12)


@register_stage("rocchio")
class Rocchio(HeadReranker):
    """Fuse the head's cosine to a Rocchio-expanded query vector with its incoming score.

    Args:
        top_n: How many leading candidates are re-scored.
        feedback: How many leading candidates expand the query.
        beta: Weight of the feedback centroid against the unit query vector.
        weight: Weight of the z-scored expanded cosine against the z-scored incoming score.
        mask_entity_types: Embed the query without the names of known entities of these types
            (as :class:`~memlab.stages.dense.Dense` does).

    Output column: ``rocchio_score`` (cosine to the expanded query; null below the head).
    """

    _parameter_constraints: ClassVar[dict[str, list[Any]]] = {
        "top_n": [Interval(Integral, 1, None, closed="left")],
        "feedback": [Interval(Integral, 1, None, closed="left")],
        "beta": [Interval(Real, 0, None, closed="left")],
        "weight": [Interval(Real, 0, None, closed="left")],
        "mask_entity_types": [SequenceOf(Predicate(str, str.strip, "a non-empty str"))],
    }

    columns = (score_column("rocchio_score", "cosine to the Rocchio-expanded query"),)

    def __init__(
        self,
        top_n: int = 50,
        feedback: int = 5,
        beta: float = 1.0,
        weight: float = 0.5,
        mask_entity_types: tuple[str, ...] = (),
    ) -> None:
        self.top_n = top_n
        self.feedback = feedback
        self.beta = beta
        self.weight = weight
        self.mask_entity_types = mask_entity_types

    def rescore(
        self, frame: pl.DataFrame, rows: np.ndarray, head_scores: np.ndarray, ctx: QueryContext
    ) -> tuple[np.ndarray, dict[str, np.ndarray]]:
        store = ctx.store
        vecs = store.vectors.matrix[rows].astype(np.float64)
        vecs *= store.vectors.present[rows, None]
        norms = np.linalg.norm(vecs, axis=1, keepdims=True)
        vecs = np.divide(vecs, norms, out=np.zeros_like(vecs), where=norms > 0)
        q = expanded_query(ctx.vector(mask_entity_types=self.mask_entity_types),
                           vecs[: self.feedback], self.beta)
        cos = vecs @ q
        return zscore_fusion(head_scores, cos, self.weight), {"rocchio_score": cos}
