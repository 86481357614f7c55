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
from typing import Any

import numpy as np
import polars as pl

from memlab.stages.base import QueryContext, Stage, register_stage
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
        sets = [frozenset(t) for t in toks]
        entropy = [shannon_entropy(t) for t in toks]
        cost = [token_cost(len(t), per_word) for t in toks]
        n = len(ids)
        redundancy = [0.0] * n
        report: list[dict[str, Any]] = []

        def overlap(i: int, kept: list[int]) -> float:
            return max((jaccard(sets[i], sets[j]) for j in kept if j < i), default=0.0)

        kept: list[int] = []
        for i in range(n):
            redundancy[i] = overlap(i, kept)
            if entropy[i] < min_entropy:
                report.append(self._entry(ids[i], "low_information", entropy[i], redundancy[i],
                                          cost[i]))
            else:
                kept.append(i)
        top = max((entropy[i] for i in kept), default=0.0)
        norm = [e / top if top > 0 else 0.0 for e in entropy]

        while kept and sum(cost[i] for i in kept) > budget:
            for i in kept:
                redundancy[i] = overlap(i, kept)
            victim = min(
                kept, key=lambda i: (w_ent * norm[i] - w_red * redundancy[i], -i)
            )
            d_red = w_red * redundancy[victim]
            d_info = w_ent * (1.0 - norm[victim])
            if d_red == 0.0 and d_info == 0.0:
                reason = "over_budget"
            elif d_red >= d_info:
                reason = "redundant"
            else:
                reason = "low_information"
            report.append(self._entry(ids[victim], reason, entropy[victim], redundancy[victim],
                                      cost[victim]))
            kept.remove(victim)
        for i in kept:
            redundancy[i] = overlap(i, kept)

        ctx.trace["eviction_report"] = report
        out = frame[kept] if kept else frame.head(0)
        return out.drop(["entropy", "redundancy", "tokens"], strict=False).with_columns(
            pl.Series("entropy", [entropy[i] for i in kept], dtype=pl.Float64),
            pl.Series("redundancy", [redundancy[i] for i in kept], dtype=pl.Float64),
            pl.Series("tokens", [cost[i] for i in kept], dtype=pl.Int64),
            pl.int_range(1, len(kept) + 1, dtype=pl.Int64).alias("rank"),
        )

    @staticmethod
    def _entry(
        mem_id: str, reason: str, entropy: float, redundancy: float, tokens: int
    ) -> dict[str, Any]:
        return {"mem_id": mem_id, "reason": reason, "entropy": entropy,
                "redundancy": redundancy, "tokens": tokens}
