"""Cross-encoder re-ranking of the head of the list, fused with the incoming score.

A cross-encoder reads the query and a memory together and outputs one relevance logit
(Nogueira & Cho, "Passage Re-ranking with BERT", 2019). It is too slow to score every memory,
so only the head is re-scored (the re-ranking mode of a retrieve-then-re-rank system), and its
logit is fused with the incoming score, both z-scored over the head (Montague & Aslam's
CombSUM normalisation, as ``maxsim`` and ``combsum`` do)::

    score'(d) = z(score)(d) + weight · z(ce)(d)          for the top_n candidates

Candidates below ``top_n`` keep their incoming order, below the head. ``weight = 0`` leaves the
order unchanged; a large weight orders the head by the cross-encoder alone.

The model is a Hugging Face sequence-classification directory with one logit, read by path
only (``local_files_only``; nothing is downloaded) and run on the CPU on one torch thread:
:mod:`memlab.embed.cross_finetune` trains one offline. Each pair runs alone, unpadded, so its
logit depends on nothing but the pair: in a padded batch a logit moves in its last bits with its
batch-mates. On LoCoMo's heads, whose turns vary in length, this is also faster than one padded
batch per head (about 23 ms a pair against 27 ms on this machine; batches of 8 pairs sorted by
length would take 19 ms, at the price of that dependence). Logits are kept in memory per
(model digest, query, memory text), so grid points and pipelines that share a model score a
pair once per process (:func:`clear_score_cache` frees them).

memlab's defaults, fixed before any measurement: ``top_n = 30`` (the depth
:mod:`~memlab.embed.cross_finetune` draws its training negatives from, so the model re-ranks
the kind of list it was trained on; 40% less scoring than the head of 50 of the other
re-rankers) and ``weight = 1.0`` (the two z-scores count equally). Held out on LoCoMo
(``eval/locomo_cv.py``, a model trained per fold on the other fold), these defaults lower
R_all@10 of the list they re-rank (0.731 → 0.719) and raise its multi-hop R_all@10
(0.319 → 0.340); see the README.
"""

from __future__ import annotations

import hashlib
import json
import threading
from collections.abc import Sequence
from pathlib import Path
from typing import Any, ClassVar, Protocol, runtime_checkable

import numpy as np
import polars as pl

from memlab.stages.base import (
    HeadReranker,
    QueryContext,
    register_stage,
    score_column,
)
from memlab.stages.constraints import Integral, Interval, Predicate, Real
from memlab.stages.maxsim import zscore_fusion as fuse

__all__ = [
    "CrossEncoderRerank",
    "CrossEncoderScorer",
    "PairScorer",
    "cached_scores",
    "clear_score_cache",
    "fuse",
    "load_scorer",
]

@runtime_checkable
class PairScorer(Protocol):
    """What the stage needs of a cross-encoder.

    Attributes:
        digest: Identifies the model's weights (the score cache's key).
    """

    digest: str

    def score(self, query: str, memories: Sequence[str]) -> np.ndarray:
        """One relevance score per memory (float64, higher is more relevant)."""
        ...


class CrossEncoderScorer:
    """A one-logit sequence-classification model from a local directory, on the CPU.

    Args:
        path: The model directory (weights, configuration and tokenizer).

    Raises:
        ValueError: ``path`` is not a directory, or the model has more than one output.
    """

    def __init__(self, path: str | Path) -> None:
        path = Path(path).expanduser()
        if not path.is_dir():
            raise ValueError(f"cross_encoder.model: {str(path)!r} is not a model directory")
        import torch
        from transformers import AutoModelForSequenceClassification, AutoTokenizer

        from memlab.embed.sentence_transformer import model_digest

        self.path = path
        self.digest = model_digest(path)
        record = path / "crossencoder.json"
        trained = json.loads(record.read_text(encoding="utf-8")) if record.is_file() else {}
        self.tokenizer = AutoTokenizer.from_pretrained(str(path), local_files_only=True)
        self.max_length = int(trained.get("max_length", min(512, self.tokenizer.model_max_length)))
        self.model = AutoModelForSequenceClassification.from_pretrained(
            str(path), local_files_only=True
        ).to("cpu").eval()
        if self.model.config.num_labels != 1:
            raise ValueError(f"cross_encoder.model: {path} has {self.model.config.num_labels} "
                             "outputs; a cross-encoder has one")
        self._torch = torch

    def score(self, query: str, memories: Sequence[str]) -> np.ndarray:
        """The model's logit for each ``(query, memory)`` pair, each pair run alone, unpadded
        (one torch thread)."""
        torch = self._torch
        out = np.zeros(len(memories), dtype=np.float64)
        if not memories:
            return out
        enc = self.tokenizer([query] * len(memories), list(memories), truncation="longest_first",
                             max_length=self.max_length)
        threads = torch.get_num_threads()
        torch.set_num_threads(1)
        try:
            with torch.inference_mode():
                for i in range(len(memories)):
                    feats = {k: torch.tensor([enc[k][i]]) for k in enc.keys()}
                    out[i] = float(self.model(**feats).logits.view(-1)[0])
        finally:
            torch.set_num_threads(threads)
        return out


_SCORERS: dict[str, PairScorer] = {}
_SCORES: dict[str, dict[bytes, float]] = {}
_LOCK = threading.Lock()

MAX_CACHED_SCORES = 1_000_000
"""Scores kept per model (about 100 MB); past it the model's table is emptied and refilled
(a long-lived process, such as a server, does not grow without bound)."""


def load_scorer(model: str) -> PairScorer:
    """The scorer of the model directory ``model`` (``path:DIR`` or ``DIR``), loaded once per
    process and path."""
    path = str(Path(model[5:] if model.startswith("path:") else model).expanduser().resolve())
    with _LOCK:
        hit = _SCORERS.get(path)
        if hit is None:
            hit = _SCORERS[path] = CrossEncoderScorer(path)
    return hit


def _key(query: str, memory: str) -> bytes:
    return hashlib.blake2b(query.encode("utf-8") + b"\0" + memory.encode("utf-8"),
                           digest_size=16).digest()


def cached_scores(scorer: PairScorer, query: str, memories: Sequence[str]) -> np.ndarray:
    """``scorer``'s scores of ``memories`` for ``query``, each pair scored once per process
    (kept per model digest, query and memory text)."""
    table = _SCORES.setdefault(scorer.digest, {})
    keys = [_key(query, m) for m in memories]
    first = {k: i for i, k in reversed(list(enumerate(keys)))}  # a repeated text is scored once
    missing = sorted(i for k, i in first.items() if k not in table)
    if missing and len(table) + len(missing) > MAX_CACHED_SCORES:
        table.clear()
        missing = sorted(first.values())
    if missing:
        fresh = np.asarray(scorer.score(query, [memories[i] for i in missing]), dtype=np.float64)
        if fresh.shape != (len(missing),):
            raise ValueError(f"cross_encoder: the scorer returned shape {fresh.shape} for "
                             f"{len(missing)} memories")
        for i, value in zip(missing, fresh, strict=True):
            table[keys[i]] = float(value)
    return np.asarray([table[k] for k in keys], dtype=np.float64)


def clear_score_cache() -> None:
    """Forget every cached score (and loaded scorer)."""
    with _LOCK:
        _SCORES.clear()
        _SCORERS.clear()


@register_stage("cross_encoder")
class CrossEncoderRerank(HeadReranker):
    """Re-rank the head of the list by a cross-encoder's logit fused with the incoming score.

    Args:
        model: The model directory (``DIR`` or ``path:DIR``), read from disk only; ``None``
            (the default, as no model ships) must be set before the stage runs.
        top_n: How many leading candidates are re-scored.
        weight: Weight of the z-scored cross-encoder logit against the z-scored incoming score.

    Output column: ``cross_score`` (the logit; null below the head).

    Attributes:
        scorer_: The :class:`PairScorer` in use: loaded from ``model`` on first use, or set
            beforehand (a test's fake scorer).
    """

    _parameter_constraints: ClassVar[dict[str, list[Any]]] = {
        "model": [Predicate(str, str.strip, "a non-empty str (a model directory)"), None],
        "top_n": [Interval(Integral, 1, None, closed="left")],
        "weight": [Interval(Real, 0, None, closed="left")],
    }

    columns = (score_column("cross_score", "cross-encoder logit of (query, memory)"),)
    embeds_other_texts = False  # reads texts, embeds none

    def __init__(self, model: str | None = None, top_n: int = 30, weight: float = 1.0) -> None:
        self.model = model
        self.top_n = top_n
        self.weight = weight

    def scorer(self) -> PairScorer:
        """The scorer: ``scorer_`` if it was set (a test's) or loaded from the current
        ``model``; otherwise the model in ``model``, loaded (once per process and path)."""
        hit = getattr(self, "scorer_", None)
        if hit is None or (self.model is not None
                           and getattr(self, "scorer_model_", None) != self.model):
            if self.model is None:
                raise ValueError("cross_encoder.model: no model directory set (train one with "
                                 "memlab.embed.cross_finetune and pass its path)")
            hit = self.scorer_ = load_scorer(self.model)
            self.scorer_model_ = self.model
        if not isinstance(hit, PairScorer):
            raise TypeError(f"cross_encoder.scorer_ must be a PairScorer, got {type(hit).__name__}")
        return hit

    def rescore(
        self, frame: pl.DataFrame, rows: np.ndarray, head_scores: np.ndarray, ctx: QueryContext
    ) -> tuple[np.ndarray, dict[str, np.ndarray]]:
        texts = [ctx.store.record_at(int(r)).text or "" for r in rows]
        ce = cached_scores(self.scorer(), ctx.text, texts)
        return fuse(head_scores, ce, self.weight), {"cross_score": ce}
