"""Maximal Marginal Relevance re-ranking (Carbonell & Goldstein, SIGIR 1998).

Greedy selection: with ``S`` the candidates selected so far,

    MMR(d) = λ · rel(d) − (1 − λ) · max_{s ∈ S} sim(d, s)        (the max over an empty S is 0)

and the candidate with the largest MMR joins ``S``. ``rel`` is the incoming ``score`` min-max
normalised to [0, 1] over the candidates (all 1 when every score is equal), so that λ weighs
comparable quantities whatever the upstream scale (cosine, RRF, effective score). ``sim`` is the
cosine between the memories' stored vectors; a memory without a vector has similarity 0 with
every other. Design §D4.3 re-ranks its merged hybrid candidates with MMR "to reduce near-duplicate
results". The paper leaves λ to the user; the default 0.7 leans towards relevance.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, ClassVar

import numpy as np
import polars as pl

from memlab.fastframe import by_rank, f64_series, i64_series, take_rows, with_series
from memlab.registry import Registry
from memlab.stages.base import (
    QueryContext,
    Stage,
    frame_rows,
    register_stage,
    score_column,
)
from memlab.stages.constraints import Integral, Interval, Options, Real

Similarity = Callable[[np.ndarray], np.ndarray]
"""``(n, dim) vectors -> (n, n) similarity matrix``."""

MMR_SIMILARITIES: Registry[Similarity] = Registry("similarity")
"""Similarity functions MMR can use, by name."""

register_mmr_similarity = MMR_SIMILARITIES.register
"""Function decorator: register an MMR similarity under ``name``."""


@register_mmr_similarity("cosine")
def cosine_matrix(vectors: np.ndarray) -> np.ndarray:
    """Pairwise cosine similarity (zero rows have similarity 0 with everything)."""
    v = np.asarray(vectors, dtype=np.float64)
    norms = np.linalg.norm(v, axis=1)
    v = np.divide(v, norms[:, None], out=np.zeros_like(v), where=norms[:, None] > 0)
    return v @ v.T


def mmr_select(
    relevance: np.ndarray, sim: np.ndarray, lambda_: float, k: int
) -> tuple[np.ndarray, np.ndarray]:
    """Greedy MMR over ``n`` candidates.

    Args:
        relevance: Relevance per candidate (already normalised).
        sim: ``(n, n)`` similarity matrix.
        lambda_: Weight of relevance against redundancy.
        k: How many to select.

    Returns:
        ``(positions in selection order, MMR value of each at its selection)``. Ties go to the
        earlier position, i.e. the better incoming rank.
    """
    n = len(relevance)
    k = min(k, n)
    chosen = np.zeros(k, dtype=np.int64)
    values = np.zeros(k, dtype=np.float64)
    if k == 0:
        return chosen, values
    from memlab.stages._mmr_kernel import greedy  # numba: loaded on first use

    greedy(
        np.ascontiguousarray(relevance, dtype=np.float64),
        np.ascontiguousarray(sim, dtype=np.float64),
        float(lambda_), k, chosen, values,
    )
    return chosen, values


@register_stage("mmr")
class MMR(Stage):
    """Re-order candidates by Maximal Marginal Relevance.

    Args:
        lambda_: Weight of relevance (1.0 = plain relevance order, 0.0 = pure diversity).
        top_k: How many candidates to select (``None`` = all of them, re-ordered).
        similarity: Name of the similarity between memory vectors (``"cosine"``).

    Output column: ``mmr_score`` (the MMR value at selection, also ``score``); rows come in
    selection order, ``rank`` 1, 2, ….
    """

    cacheable = True

    _parameter_constraints: ClassVar[dict[str, list[Any]]] = {
        "lambda_": [Interval(Real, 0, 1, closed="both")],
        "top_k": [Interval(Integral, 1, None, closed="left"), None],
        "similarity": [Options(str, MMR_SIMILARITIES)],
    }

    columns = (score_column("mmr_score", "MMR value at selection"),)
    embeds_other_texts = False  # embeds no text but the query

    def __init__(
        self,
        lambda_: float = 0.7,
        top_k: int | None = None,
        similarity: str = "cosine",
    ) -> None:
        self.lambda_ = lambda_
        self.top_k = top_k
        self.similarity = similarity

    def transform(self, frame: pl.DataFrame, ctx: QueryContext) -> pl.DataFrame:
        try:
            sim_fn = MMR_SIMILARITIES[self.similarity]
        except KeyError:
            raise ValueError(
                f"mmr: unknown similarity {self.similarity!r}; known: "
                f"{', '.join(sorted(MMR_SIMILARITIES))}"
            ) from None
        if frame.height == 0:
            return frame.with_columns(pl.lit(None, dtype=pl.Float64).alias("mmr_score"))
        frame = by_rank(frame)
        store = ctx.store
        rows = frame_rows(frame, ctx)
        vectors = store.vectors.matrix[rows] * store.vectors.present[rows, None]
        score = frame["score"]
        if score.dtype != pl.Float64:
            score = score.cast(pl.Float64)
        score = score.fill_nan(None)  # no score: relevance 0, never a NaN that wins argmax
        lo, hi = score.min(), score.max()
        if lo is None or hi is None or not hi > lo:
            relevance = np.ones(frame.height, dtype=np.float64)
        else:
            relevance = ((score - lo) / (hi - lo)).fill_null(0.0).to_numpy()
        k = frame.height if self.top_k is None else self.top_k
        chosen, values = mmr_select(relevance, sim_fn(vectors), float(self.lambda_), k)
        return with_series(
            take_rows(frame, np.asarray(chosen, dtype=np.int64)),
            f64_series("mmr_score", values),
            f64_series("score", values),
            i64_series("rank", np.arange(1, len(chosen) + 1)),
        )
