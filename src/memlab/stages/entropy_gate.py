"""Shannon entropy gating: fit the candidates into a token budget (seed 002).

Seed 002: "The expanded candidate set is pruned to fit within the context budget. Nodes are
scored by Shannon entropy — high-redundancy, low-information chunks are evicted first. An
``eviction_report`` records what was dropped and why." Entropy after Shannon (1948).

Per candidate, over its lowercase ``\\w+`` word tokens (the ``text`` column when set, else the
memory's text):

* ``entropy`` -- ``H = -Σ_w p(w) log2 p(w)`` bits, ``p(w)`` the word's share of the tokens
  (``"a a b b"`` → 1 bit; no tokens → 0).
* ``tokens`` -- the context cost, ``ceil(words × tokens_per_word)`` (the product is rounded to
  9 decimals first so that ``10 × 1.3`` costs 13).
* ``redundancy`` -- the largest Jaccard overlap of its word *set* with the word set of any
  higher-ranked candidate still kept (0 for the first kept one). Jaccard is used rather than a
  cosine of counts so that repeating a word does not make a chunk look more novel.
* ``entropy_norm`` -- ``entropy / max entropy`` over the candidates that passed ``min_entropy``.

Algorithm:

1. In rank order, a candidate with ``entropy < min_entropy`` is evicted (``low_information``).
2. While the kept candidates cost more than ``token_budget`` tokens, recompute ``redundancy``
   against the current kept set and evict the kept candidate of lowest priority
   ``entropy_weight × entropy_norm − redundancy_weight × redundancy``; ties evict the lower-ranked
   one first. Its reason compares the two deficits ``d_red = redundancy_weight × redundancy`` and
   ``d_info = entropy_weight × (1 − entropy_norm)``: ``redundant`` if ``d_red ≥ d_info > 0`` or
   ``d_red > 0 = d_info``, ``low_information`` if ``d_info > d_red``, ``over_budget`` if both
   are 0 (it was neither, only too much).

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

from memlab.stages.base import QueryContext, Stage, register_stage
from memlab.stages.constraints import Integral, Interval, Real
from memlab.stages.features import word_tokens


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
    inter = (x @ x.T).toarray()
    size = np.asarray(x.sum(axis=1)).reshape(-1)
    union = size[:, None] + size[None, :] - inter
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.where(union > 0, inter / union, 0.0)


def token_cost(n_words: int, tokens_per_word: float) -> int:
    """``ceil(n_words × tokens_per_word)``, rounded to 9 decimals before the ceiling."""
    return int(math.ceil(round(n_words * tokens_per_word, 9)))


def _number(value: Any, name: str, *, low: float | None = None) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        raise ValueError(
            f"entropy_gate.py: EntropyGate field '{name}' must be a finite number, got {value!r}"
        )
    if low is not None and value < low:
        raise ValueError(
            f"entropy_gate.py: EntropyGate field '{name}' must be >= {low}, got {value!r}"
        )
    return float(value)


@register_stage("entropy_gate")
class EntropyGate(Stage):
    """Keep the candidates that fit a token budget, evicting redundant, low-information ones.

    Args:
        token_budget: Tokens the kept candidates may cost in total.
        redundancy_weight: Weight of redundancy in the eviction priority.
        entropy_weight: Weight of normalised entropy in the eviction priority.
        min_entropy: Candidates below this entropy (bits) are always evicted.
        tokens_per_word: Context tokens per word (1.3 is the usual English estimate for
            sub-word tokenisers).
    """

    _parameter_constraints: ClassVar[dict[str, list[Any]]] = {
        "token_budget": [Interval(Integral, 0, None, closed="left")],
        "redundancy_weight": [Interval(Real, 0, None, closed="left")],
        "entropy_weight": [Interval(Real, 0, None, closed="left")],
        "min_entropy": [Interval(Real, None, None, closed="neither")],
        "tokens_per_word": [Interval(Real, 0, None, closed="left")],
    }

    def __init__(
        self,
        token_budget: int = 2000,
        redundancy_weight: float = 1.0,
        entropy_weight: float = 1.0,
        min_entropy: float = 0.0,
        tokens_per_word: float = 1.3,
    ) -> None:
        self.token_budget = token_budget
        self.redundancy_weight = redundancy_weight
        self.entropy_weight = entropy_weight
        self.min_entropy = min_entropy
        self.tokens_per_word = tokens_per_word

    def _texts(self, frame: pl.DataFrame, ctx: QueryContext) -> list[str]:
        own = [ctx.store.get(m).text for m in frame["mem_id"].to_list()]
        if "text" not in frame.columns:
            return own
        return [t if t is not None else o for t, o in zip(frame["text"].to_list(), own,
                                                           strict=True)]

    def transform(self, frame: pl.DataFrame, ctx: QueryContext) -> pl.DataFrame:
        budget = _number(self.token_budget, "token_budget", low=0)
        w_red = _number(self.redundancy_weight, "redundancy_weight", low=0)
        w_ent = _number(self.entropy_weight, "entropy_weight", low=0)
        min_entropy = _number(self.min_entropy, "min_entropy")
        per_word = _number(self.tokens_per_word, "tokens_per_word", low=0)

        frame = frame.sort("rank")
        if frame.height:
            visible = ctx.visible_mask()
            rows = np.asarray([ctx.store.idx(m) for m in frame["mem_id"].to_list()])
            frame = frame.filter(pl.Series(visible[rows]))
        ids = frame["mem_id"].to_list()
        toks = [word_tokens(t) for t in self._texts(frame, ctx)]
        entropy = np.asarray([shannon_entropy(t) for t in toks], dtype=np.float64)
        cost = np.asarray([token_cost(len(t), per_word) for t in toks], dtype=np.int64)
        n = len(ids)
        # lower[i, j] = Jaccard(i, j) for j < i (0 elsewhere): redundancy looks up the ranking.
        lower = np.tril(_jaccard_matrix(toks), k=-1)
        report: list[dict[str, Any]] = []
        alive = entropy >= min_entropy

        def redundancy_of(alive: np.ndarray) -> np.ndarray:
            if n == 0:
                return np.zeros(0)
            return np.where(alive[None, :], lower, 0.0).max(axis=1)

        redundancy = redundancy_of(alive)
        for i in np.flatnonzero(~alive):
            report.append(self._entry(ids[i], "low_information", float(entropy[i]),
                                      float(redundancy[i]), int(cost[i])))
        top = float(entropy[alive].max()) if alive.any() else 0.0
        norm = entropy / top if top > 0 else np.zeros(n)

        while alive.any() and int(cost[alive].sum()) > budget:
            redundancy = redundancy_of(alive)
            priority = w_ent * norm - w_red * redundancy
            live = np.flatnonzero(alive)
            best = priority[live].min()
            victim = int(live[priority[live] == best].max())  # ties: the lowest-ranked goes
            d_red = w_red * redundancy[victim]
            d_info = w_ent * (1.0 - norm[victim])
            if d_red == 0.0 and d_info == 0.0:
                reason = "over_budget"
            elif d_red >= d_info:
                reason = "redundant"
            else:
                reason = "low_information"
            report.append(self._entry(ids[victim], reason, float(entropy[victim]),
                                      float(redundancy[victim]), int(cost[victim])))
            alive[victim] = False
        redundancy = redundancy_of(alive)
        kept = [int(i) for i in np.flatnonzero(alive)]

        ctx.trace["eviction_report"] = report
        out = frame[kept] if kept else frame.head(0)
        return out.drop(["entropy", "redundancy", "tokens"], strict=False).with_columns(
            pl.Series("entropy", entropy[kept], dtype=pl.Float64),
            pl.Series("redundancy", redundancy[kept], dtype=pl.Float64),
            pl.Series("tokens", cost[kept], dtype=pl.Int64),
            pl.int_range(1, len(kept) + 1, dtype=pl.Int64).alias("rank"),
        )

    @staticmethod
    def _entry(
        mem_id: str, reason: str, entropy: float, redundancy: float, tokens: int
    ) -> dict[str, Any]:
        return {"mem_id": mem_id, "reason": reason, "entropy": entropy,
                "redundancy": redundancy, "tokens": tokens}
