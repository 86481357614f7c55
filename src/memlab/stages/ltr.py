"""Learned fusion: a pointwise learning-to-rank model over the candidates' score columns.

Metzler & Croft, "Linear feature-based models for information retrieval", Information Retrieval
10(3), 2007, and the pointwise approach of learning to rank (Liu, "Learning to Rank for
Information Retrieval", Foundations and Trends in IR 3(3), 2009, §2): each candidate is a
feature vector, a classifier learns P(relevant | features) from training queries' candidates and
their relevance labels, and the head of the ranking is re-scored by it.

The features of a query's ``top_n`` leading candidates are, for each column named in
``features``, its value z-scored over the head (``(x - mean) / std``, 0 when the head's values
are all equal; a missing value takes the head's smallest z-score) and whether the value is
present (1/0); and ``log(rank)`` of the incoming ranking. Being z-scored per query, the features
say how a candidate stands among this query's candidates, as z-score CombSUM does (a learned
CombSUM when the model is linear). The model is fitted on the training queries of a
cross-fit (:class:`~memlab.eval.protocol.CrossFitted`: ``memlab eval --folds 2`` fits one copy
per fold and answers each query with the copy that never saw its fold), so reported values are
held out. ``model="logistic"`` (default: ``C=1``, no tuning) or ``"gbdt"`` (gradient boosting:
interactions between the lists); the head's new score is the model's log-odds.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping
from typing import TYPE_CHECKING, Any, ClassVar

import numpy as np
import polars as pl

from memlab.stages.base import (
    HeadReranker,
    QueryContext,
    register_stage,
    score_column,
)
from memlab.stages.constraints import Integral, Interval, Options, Predicate, Real, SequenceOf
from memlab.stages.crag import CRAG_MODELS, MODEL_IMPORTS, fit_classifier

if TYPE_CHECKING:
    from memlab.memory.store import MemoryStore

DEFAULT_FEATURES = (
    "dense_score", "maxp_score", "bm25_score", "graph_score", "combsum_score", "neighbor_score",
)
"""The score columns of ``conversational``'s candidates."""


def head_features(frame: pl.DataFrame, features: Collection[str], n: int) -> np.ndarray:
    """The feature matrix of the first ``n`` rows of ``frame`` (in rank order).

    Per column of ``features``: the z-score over the ``n`` rows (a missing value or a missing
    column takes the smallest z-score present, 0 if none) and a 1/0 presence flag; then
    ``log(rank)`` with ranks ``1 … n``. Shape ``(n, 2 * len(features) + 1)``, float64.
    """
    cols: list[np.ndarray] = []
    for name in features:
        if name in frame.columns:
            col = frame[name]
            if not col.dtype.is_numeric():
                raise ValueError(
                    f"ltr: feature column '{name}' is {col.dtype}, not a number; features are "
                    "score columns such as dense_score or bm25_score"
                )
            x = col.head(n).cast(pl.Float64).to_numpy().astype(np.float64, copy=True)
        else:
            x = np.full(n, np.nan)
        present = np.isfinite(x)
        z = np.zeros(n)
        if present.any():
            v = x[present]
            sd = float(v.std())
            z[present] = (v - float(v.mean())) / sd if sd > 0 else 0.0
            z[~present] = z[present].min()
        cols.extend([z, present.astype(np.float64)])
    cols.append(np.log(np.arange(1, n + 1, dtype=np.float64)))
    return np.column_stack(cols)


@register_stage("ltr")
class LearnedFusion(HeadReranker):
    """Re-score the head of the ranking by a classifier trained on relevance labels.

    Args:
        features: Candidate columns the model reads (each z-scored per query, with a presence
            flag; ``log(rank)`` is always added).
        top_n: How many leading candidates are re-scored (and, in training, labelled).
        model: ``"logistic"`` or ``"gbdt"`` (:data:`memlab.stages.crag.CRAG_MODELS`).
        C: Inverse regularisation strength of ``"logistic"``.
        seed: Random seed of the model.

    Output column: ``ltr_score`` (the model's log-odds, also ``score``; null below the head).

    Attributes:
        model_: The fitted classifier.
        n_train_: Training candidates seen by :meth:`fit`.
        n_positive_: Relevant ones among them.
    """

    _parameter_constraints: ClassVar[dict[str, list[Any]]] = {
        "features": [SequenceOf(Predicate(str, str.strip, "a non-empty column name"))],
        "top_n": [Interval(Integral, 1, None, closed="left")],
        "model": [Options(str, CRAG_MODELS)],
        "C": [Interval(Real, 0, None, closed="neither")],
        "seed": [Interval(Integral, 0, 2**32 - 1, closed="both")],
    }

    columns = (score_column("ltr_score", "log-odds of relevance by the learned fusion"),)

    def __init__(
        self,
        features: tuple[str, ...] = DEFAULT_FEATURES,
        top_n: int = 50,
        model: str = "logistic",
        C: float = 1.0,  # noqa: N803 - scikit-learn's name
        seed: int = 0,
    ) -> None:
        self.features = features
        self.top_n = top_n
        self.model = model
        self.C = C
        self.seed = seed

    @property
    def requires_fit(self) -> bool:
        """The model is trained on labelled queries before it can answer."""
        return True

    @property
    def imports(self) -> tuple[str, ...]:
        """The classifier's library (:data:`memlab.stages.crag.MODEL_IMPORTS`)."""
        return MODEL_IMPORTS.get(self.model, ())

    def fit(
        self,
        store: MemoryStore,
        *,
        queries: Any = None,
        relevant: Mapping[str, Collection[str]] | None = None,
        candidates: Mapping[str, pl.DataFrame] | None = None,
        **kwargs: Any,
    ) -> LearnedFusion:
        """Train the classifier on the training queries' candidate heads.

        Args:
            store: The store the training queries ran against (unused: the features are
                candidate columns).
            queries: The training queries' contexts (their ``qid`` select the candidates).
            relevant: ``qid`` → relevant memory ids.
            candidates: ``qid`` → the candidate frame this stage saw for the query.
            **kwargs: Ignored (a pipeline passes the same arguments to every stage).

        Raises:
            ValueError: No candidates or labels, or training candidates of one class only.
        """
        self._validate_params()
        if relevant is None or candidates is None:
            raise ValueError("ltr.py: LearnedFusion.fit needs relevant= and candidates=")
        qids = [getattr(q, "qid", q) for q in queries] if queries is not None else list(candidates)
        xs, ys = [], []
        for qid in qids:
            frame = candidates.get(str(qid))
            wanted = set(relevant.get(str(qid), ()))
            if frame is None or frame.height == 0 or not wanted:
                continue  # a query without a relevant memory teaches nothing about its order
            frame = frame.sort("rank")
            n = min(self.top_n, frame.height)
            xs.append(head_features(frame, self.features, n))
            ys.append(np.asarray([m in wanted for m in frame["mem_id"].head(n)], dtype=int))
        if not xs:
            raise ValueError("ltr.py: LearnedFusion.fit found no labelled training candidates")
        self.model_, self.n_train_, self.n_positive_ = fit_classifier(
            xs, ys, self.model, self.C, self.seed, owner="ltr.py: LearnedFusion.fit"
        )
        return self

    def transform(self, frame: pl.DataFrame, ctx: QueryContext) -> pl.DataFrame:
        if getattr(self, "model_", None) is None:
            raise ValueError(
                "ltr: the stage is not fitted; evaluate it with `memlab eval` (which cross-fits "
                "learned stages) or call fit(store, queries=, relevant=, candidates=) first"
            )
        return super().transform(frame, ctx)

    def rescore(
        self, frame: pl.DataFrame, rows: np.ndarray, head_scores: np.ndarray, ctx: QueryContext
    ) -> tuple[np.ndarray, dict[str, np.ndarray]]:
        x = head_features(frame, self.features, len(head_scores))
        proba = np.clip(self.model_.predict_proba(x)[:, 1], 1e-12, 1 - 1e-12)
        logit = np.log(proba) - np.log1p(-proba)
        return logit, {"ltr_score": logit}
