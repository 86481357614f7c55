"""Shannon entropy gating: fit the candidates into a token budget (design §D2.4), keeping relevance.

Design §D2.4: "The expanded candidate set is pruned to fit within the context budget. Nodes are
scored by Shannon entropy — high-redundancy, low-information chunks are evicted first. An
``eviction_report`` records what was dropped and why." Entropy after Shannon (1948).

Entropy alone measures how much a chunk says, not whether it answers the query: a long
off-topic memory carries more bits than a short top hit. The gate therefore trades information
against relevance as maximal marginal relevance does (Carbonell & Goldstein, SIGIR 1998:
relevance to the query minus redundancy with what is already selected), with entropy as a third
term, and never lets information outvote a hit whose retrieval score reaches
``relevance_floor`` (in the spirit of CRAG's upper confidence threshold, Yan et al. 2024: a
retrieval graded "correct" is used as is).

Per candidate, over its lowercase ``\\w+`` word tokens (the ``text`` column when set, else the
memory's text):

* ``entropy`` -- ``H = -Σ_w p(w) log2 p(w)`` bits, ``p(w)`` the word's share of the words
  (``"a a b b"`` → 1 bit; no words → 0).
* ``tokens`` -- the context cost in the package's one token count,
  :func:`memlab.tokens.count_tokens` (the same count as the ``context`` stage and ``tokens@k``).
* ``redundancy`` -- the largest Jaccard overlap of its word *set* with the word set of any
  higher-ranked candidate still kept (0 for the first kept one). Jaccard is used rather than a
  cosine of counts so that repeating a word does not make a chunk look more novel.
* ``entropy_norm`` -- ``entropy / max entropy`` over the candidates that passed ``min_entropy``.
* ``relevance`` -- the retrieval ``score`` min-max scaled over the candidates,
  ``(s - min) / (max - min)`` (1 for every candidate when all scores are equal).

Algorithm:

1. A candidate is *protected* when ``relevance_floor`` is set and its ``score`` reaches it.
2. In rank order, an unprotected candidate with ``entropy < min_entropy`` is evicted
   (``low_information``).
3. While the kept candidates cost more than ``token_budget`` tokens, recompute ``redundancy``
   against the current kept set and evict the kept candidate of lowest priority
   ``relevance_weight × relevance + entropy_weight × entropy_norm − redundancy_weight ×
   redundancy``, unprotected candidates before protected ones; ties evict the lower-ranked one
   first. Its reason is the largest of the three deficits ``d_red = redundancy_weight ×
   redundancy``, ``d_info = entropy_weight × (1 − entropy_norm)`` and ``d_rel =
   relevance_weight × (1 − relevance)`` (ties in that order: ``redundant``,
   ``low_information``, ``low_relevance``), ``over_budget`` if all are 0 (it was none of them,
   only too much).

Kept candidates keep their order and score (ranks renumbered 1, 2, …) and gain ``entropy``,
``redundancy`` and ``tokens``. ``ctx.trace["eviction_report"]`` lists the evicted ones in eviction
order as ``{mem_id, reason, entropy, redundancy, tokens}``.
"""

from __future__ import annotations

import math
from collections import Counter
from typing import Any, ClassVar

import numpy as np
import polars as pl
import scipy.sparse as sp

from memlab.fastframe import (
    by_rank,
    drop_columns,
    f64_series,
    f64_values,
    i64_series,
    keep_rows,
    take_rows,
    with_series,
)
from memlab.numeric import is_finite_number, shown_number
from memlab.stages.base import (
    Column,
    QueryContext,
    Stage,
    concat_ranges,
    frame_rows,
    register_stage,
)
from memlab.stages.constraints import Integral, Interval, Real
from memlab.stages.features import word_tokens
from memlab.stages.graph import cached
from memlab.tokens import count_tokens


def shannon_entropy(tokens: list[str]) -> float:
    """Entropy in bits of the empirical distribution of ``tokens`` (0 for no tokens)."""
    n = len(tokens)
    if n == 0:
        return 0.0
    h = 0.0
    for c in Counter(tokens).values():
        p = c / n
        h -= p * math.log2(p)
    return h + 0.0


def jaccard(a: frozenset[str], b: frozenset[str]) -> float:
    """``|a ∩ b| / |a ∪ b|`` (0 when both are empty)."""
    union = len(a | b)
    return len(a & b) / union if union else 0.0


def _jaccard_matrix(token_lists: list[list[str]]) -> np.ndarray:
    """Pairwise Jaccard similarity of the token sets (an ``n × n`` matrix)."""
    vocab: dict[str, int] = {}
    rows, cols = [], []
    for i, toks in enumerate(token_lists):
        for t in set(toks):
            rows.append(i)
            cols.append(vocab.setdefault(t, len(vocab)))
    n = len(token_lists)
    if n == 0:
        return np.zeros((0, 0))
    x = sp.csr_matrix(
        (np.ones(len(rows)), (rows, cols)), shape=(n, max(len(vocab), 1)), dtype=np.float64
    )
    return _jaccard_of_sets(x)


def _jaccard_of_sets(x: sp.csr_matrix) -> np.ndarray:
    """Pairwise Jaccard of the rows of a 0/1 word-set matrix (``n × vocabulary``)."""
    if x.shape[0] == 0:
        return np.zeros((0, 0))
    inter = (x @ x.T).toarray()
    size = np.asarray(x.sum(axis=1)).reshape(-1)
    union = size[:, None] + size[None, :] - inter
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.where(union > 0, inter / union, 0.0)


class TextFeatures:
    """Per store row: the word set (ids into one vocabulary), entropy and token count.

    Computed once per memory text and grown as the store grows (rebuilt when a purge erases a
    text: see :func:`text_features`), so that a query gathers its candidates' features with
    array indexing instead of tokenising their texts again.
    """

    def __init__(self) -> None:
        self.vocab: dict[str, int] = {}
        self.indptr: list[int] = [0]
        self.indices: list[int] = []
        self.entropy: list[float] = []
        self.cost: list[int] = []
        # The lists as arrays, extended with the rows added since the last take().
        self._np: tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray] = (
            np.zeros(1, dtype=np.int64), np.zeros(0, dtype=np.int64),
            np.zeros(0, dtype=np.float64), np.zeros(0, dtype=np.int64),
        )

    def __len__(self) -> int:
        return len(self.entropy)

    def word_ids(self, text: str) -> tuple[list[int], float, int]:
        """Word-set ids (vocabulary grown), entropy and token count of one text."""
        toks = word_tokens(text)
        ids = sorted({self.vocab.setdefault(t, len(self.vocab)) for t in toks})
        return ids, shannon_entropy(toks), count_tokens(text)

    def add(self, text: str) -> None:
        """Compute the features of the next store row."""
        ids, entropy, cost = self.word_ids(text)
        self.indices.extend(ids)
        self.indptr.append(len(self.indices))
        self.entropy.append(entropy)
        self.cost.append(cost)

    def arrays(self) -> tuple[sp.csr_matrix, np.ndarray, np.ndarray]:
        """``(word-set matrix, entropy, tokens)`` over every row seen so far."""
        return self.take(np.arange(len(self), dtype=np.int64))

    def take(self, rows: np.ndarray) -> tuple[sp.csr_matrix, np.ndarray, np.ndarray]:
        """``(word-set matrix, entropy, tokens)`` of ``rows`` only (each seen already), without
        building the matrix of every row."""
        indptr, indices, entropy, cost = self._np
        n = len(self.entropy)
        if len(entropy) < n:
            done = len(entropy)
            indptr = np.concatenate([indptr, np.asarray(self.indptr[done + 1 :], np.int64)])
            indices = np.concatenate(
                [indices, np.asarray(self.indices[len(indices) :], np.int64)]
            )
            entropy = np.concatenate([entropy, np.asarray(self.entropy[done:], np.float64)])
            cost = np.concatenate([cost, np.asarray(self.cost[done:], np.int64)])
            self._np = (indptr, indices, entropy, cost)
        rows = np.asarray(rows, dtype=np.int64)
        gather, sub_ptr = concat_ranges(indptr[rows], indptr[rows + 1] - indptr[rows])
        words = sp.csr_matrix(
            (np.ones(len(gather)), indices[gather], sub_ptr),
            shape=(len(rows), max(len(self.vocab), 1)),
        )
        return words, entropy[rows], cost[rows]


def text_features(ctx: QueryContext) -> TextFeatures:
    """The store's :class:`TextFeatures` (kept in ``ctx.cache``, grown with the store; rebuilt
    when a purge erases a text)."""
    store = ctx.store
    stamp = ("grown in place", store.content_version)
    feats = cached(ctx, ("entropy_gate", "text"), store, stamp, TextFeatures)
    for row in range(len(feats), len(store)):
        feats.add(store.record_at(row).text)
    return feats


def _candidate_features(
    frame: pl.DataFrame, rows: np.ndarray, ctx: QueryContext
) -> tuple[sp.csr_matrix, np.ndarray, np.ndarray]:
    """Word-set matrix, entropy and tokens of the candidates: the store's cached features,
    recomputed only for the candidates whose ``text`` column overrides the memory text."""
    feats = text_features(ctx)
    words, entropy, cost = feats.take(rows)
    if "text" not in frame.columns or frame["text"].null_count() == frame.height:
        return words, entropy, cost
    texts = frame["text"]
    own = np.flatnonzero(texts.is_null().to_numpy())
    given = np.flatnonzero(texts.is_not_null().to_numpy())
    indptr, indices = [0], []
    entropy, cost = entropy.copy(), cost.copy()
    for i, text in zip(given, texts.gather(given).to_list(), strict=True):
        ids, entropy[i], cost[i] = feats.word_ids(text)
        indices.extend(ids)
        indptr.append(len(indices))
    width = max(len(feats.vocab), 1)
    new = sp.csr_matrix(
        (np.ones(len(indices)), np.asarray(indices, dtype=np.int64),
         np.asarray(indptr, dtype=np.int64)), shape=(len(given), width),
    )
    old = words[own]
    old.resize((len(own), width))
    order = np.argsort(np.concatenate([own, given]), kind="stable")
    return sp.vstack([old, new], format="csr")[order], entropy, cost


def _number(value: Any, name: str, *, low: float | None = None) -> float:
    if not is_finite_number(value):
        raise ValueError(
            f"entropy_gate.py: EntropyGate field '{name}' must be a finite number, got "
            f"{shown_number(value)}"
        )
    if low is not None and value < low:
        raise ValueError(
            f"entropy_gate.py: EntropyGate field '{name}' must be >= {low}, got {value!r}"
        )
    return float(value)


@register_stage("entropy_gate")
class EntropyGate(Stage):
    """Keep the candidates that fit a token budget, evicting redundant, low-information and
    low-relevance ones first.

    Args:
        token_budget: Tokens (:func:`memlab.tokens.count_tokens`) the kept candidates may cost
            in total.
        redundancy_weight: Weight of redundancy in the eviction priority.
        entropy_weight: Weight of normalised entropy in the eviction priority.
        relevance_weight: Weight of the min-max scaled retrieval score in the eviction
            priority (0: the design's entropy-only gate).
        relevance_floor: Candidates whose retrieval ``score`` reaches this value are exempt from
            ``min_entropy`` and evicted only when no other candidate is left to evict (``None``:
            no candidate is protected). On the scale of the incoming ``score`` column.
        min_entropy: Unprotected candidates below this entropy (bits) are always evicted.
    """

    _parameter_constraints: ClassVar[dict[str, list[Any]]] = {
        "token_budget": [Interval(Integral, 0, None, closed="left")],
        "redundancy_weight": [Interval(Real, 0, None, closed="left")],
        "entropy_weight": [Interval(Real, 0, None, closed="left")],
        "relevance_weight": [Interval(Real, 0, None, closed="left")],
        "relevance_floor": [Interval(Real, None, None, closed="neither"), None],
        "min_entropy": [Interval(Real, None, None, closed="neither")],
    }

    columns = (
        Column("entropy", pl.Float64(), False, "Shannon entropy of the words, bits"),
        Column("redundancy", pl.Float64(), False, "max Jaccard with a higher-ranked kept one"),
        Column("tokens", pl.Int64(), False, "context cost in tokens"),
    )
    embeds_other_texts = False  # embeds no text but the query

    def __init__(
        self,
        token_budget: int = 2000,
        redundancy_weight: float = 1.0,
        entropy_weight: float = 1.0,
        relevance_weight: float = 1.0,
        relevance_floor: float | None = None,
        min_entropy: float = 0.0,
    ) -> None:
        self.token_budget = token_budget
        self.redundancy_weight = redundancy_weight
        self.entropy_weight = entropy_weight
        self.relevance_weight = relevance_weight
        self.relevance_floor = relevance_floor
        self.min_entropy = min_entropy

    def transform(self, frame: pl.DataFrame, ctx: QueryContext) -> pl.DataFrame:
        budget = _number(self.token_budget, "token_budget", low=0)
        w_red = _number(self.redundancy_weight, "redundancy_weight", low=0)
        w_ent = _number(self.entropy_weight, "entropy_weight", low=0)
        w_rel = _number(self.relevance_weight, "relevance_weight", low=0)
        floor = (None if self.relevance_floor is None
                 else _number(self.relevance_floor, "relevance_floor"))
        min_entropy = _number(self.min_entropy, "min_entropy")

        frame = by_rank(frame)
        rows = np.zeros(0, dtype=np.int64)
        if frame.height:
            visible = ctx.visible_mask()
            rows = frame_rows(frame, ctx)
            seen = visible[rows]
            if not seen.all():
                frame, rows = keep_rows(frame, seen), rows[seen]
        ids = frame["mem_id"]
        words, entropy, cost = _candidate_features(frame, rows, ctx)
        n = frame.height
        score = f64_values(frame["score"], float("-inf"))
        finite = np.isfinite(score)
        lo = score[finite].min() if finite.any() else 0.0
        hi = score[finite].max() if finite.any() else 0.0
        if hi > lo:
            relevance = np.where(finite, (score - lo) / (hi - lo), 0.0)
        else:
            relevance = np.where(finite, 1.0, 0.0)
        protected = (score >= floor) if floor is not None else np.zeros(n, dtype=bool)
        # lower[i, j] = Jaccard(i, j) for j < i (0 elsewhere): redundancy looks up the ranking.
        lower = np.tril(_jaccard_of_sets(words), k=-1)
        alive = (entropy >= min_entropy) | protected
        # redundancy[i] = max(0, max over kept j of lower[i, j]); kept up to date as
        # candidates leave: only the rows whose maximum was the evicted one are recomputed.
        redundancy = (np.where(alive[None, :], lower, 0.0).max(axis=1) if n
                      else np.zeros(0))
        victims: list[int] = [int(i) for i in np.flatnonzero(~alive)]
        reasons = ["low_information"] * len(victims)
        noted = [float(redundancy[i]) for i in victims]
        top = float(entropy[alive].max()) if alive.any() else 0.0
        norm = entropy / top if top > 0 else np.zeros(n)
        names = ("redundant", "low_information", "low_relevance")
        base = w_rel * relevance + w_ent * norm
        total = int(cost[alive].sum())
        open_ = alive & ~protected
        if total > budget and alive.any():
            from memlab.stages._entropy_kernel import OVER_BUDGET, evict  # numba: on first use

            got = np.zeros(n, dtype=np.int64)
            why = np.zeros(n, dtype=np.int64)
            red = np.zeros(n, dtype=np.float64)
            count = evict(
                np.ascontiguousarray(lower), redundancy, alive, open_,
                np.ascontiguousarray(base, dtype=np.float64),
                np.ascontiguousarray(norm, dtype=np.float64),
                np.ascontiguousarray(relevance, dtype=np.float64),
                np.ascontiguousarray(cost, dtype=np.int64),
                w_red, w_ent, w_rel, total, float(budget), got, why, red,
            )
            victims += got[:count].tolist()
            reasons += ["over_budget" if r == OVER_BUDGET else names[r]
                        for r in why[:count].tolist()]
            noted += red[:count].tolist()
        kept = np.flatnonzero(alive)

        victim_ids = ids.gather(victims).to_list() if victims else []
        ctx.trace["eviction_report"] = [
            self._entry(m, r, float(entropy[i]), red, int(cost[i]))
            for m, r, i, red in zip(victim_ids, reasons, victims, noted, strict=True)
        ]
        out = drop_columns(take_rows(frame, kept), "entropy", "redundancy", "tokens")
        return with_series(
            out,
            f64_series("entropy", entropy[kept]),
            f64_series("redundancy", redundancy[kept]),
            i64_series("tokens", cost[kept]),
            i64_series("rank", np.arange(1, len(kept) + 1)),
        )

    @staticmethod
    def _entry(
        mem_id: str, reason: str, entropy: float, redundancy: float, tokens: int
    ) -> dict[str, Any]:
        return {"mem_id": mem_id, "reason": reason, "entropy": entropy,
                "redundancy": redundancy, "tokens": tokens}
