"""BM25 keyword retrieval (Robertson & Zaragoza 2009; rank_bm25's Okapi variant).

Seed 000's keyword path ("by BM25 text relevance"), one of the ranked lists hybrid retrieval
fuses with RRF; seed 004's "keyword candidates from lexical matching". Defaults are rank_bm25's
``BM25Okapi``: ``k1 = 1.5``, ``b = 0.75``, ``epsilon = 0.25`` (see :mod:`memlab.index.bm25` for
the formula and the engines).

Corpus statistics (``N``, document frequencies, average length) are taken over **every memory
written so far** — all clients, active or not — like one shared keyword index; the scores are
then masked by the query's visibility. This is a documented approximation: a per-scope index
would give slightly different idf values.

The stage keeps the fitted index (``index_``) and the tokenised corpus (``corpus_``) between
queries. Texts never change once written, so the index is refitted lazily only when the store
has new rows (a version change without new rows — an access, a supersession — leaves the corpus
as it was); a refit tokenises only the new rows and rebuilds the sparse matrix.
"""

from __future__ import annotations

import weakref
from typing import TYPE_CHECKING

import polars as pl

from memlab.index.bm25 import BM25Engine, TokenizedCorpus, get_bm25_engine
from memlab.index.stopwords import get_stopwords
from memlab.stages.base import (
    QueryContext,
    Stage,
    candidates_from_rows,
    empty_candidates,
    register_stage,
)
from memlab.stages.dense import top_rows

if TYPE_CHECKING:
    from memlab.memory.store import MemoryStore


@register_stage("bm25")
class BM25(Stage):
    """Retrieve memories by BM25 over their texts.

    Args:
        top_k: How many memories to return (``None`` = every one with a positive score).
        k1: Term-frequency saturation (default 1.5).
        b: Length normalisation (default 0.75).
        epsilon: Floor of negative idf values as a fraction of the mean idf (default 0.25).
        engine: ``"sparse"`` (scipy, fast) or ``"rank_bm25"`` (the reference implementation).
        token_pattern: Regular expression of one token (default: word characters).
        lowercase: Lowercase texts and queries before tokenising.
        query_stopwords: Name of a stop-word list (:mod:`memlab.index.stopwords`) whose words
            are dropped from the query (documents are indexed as they are); ``None`` keeps every
            query token (rank_bm25's behaviour).

    Output column: ``bm25_score`` (also ``score``); only memories scoring above 0 are returned.

    Attributes:
        corpus_: The tokenised texts of every memory indexed so far.
        index_: The fitted engine.
        index_version_: ``store.version`` when the index was last checked against the store.
    """

    cacheable = True

    def __init__(
        self,
        top_k: int | None = 100,
        k1: float = 1.5,
        b: float = 0.75,
        epsilon: float = 0.25,
        engine: str = "sparse",
        token_pattern: str = r"\w+",
        lowercase: bool = True,
        query_stopwords: str | None = None,
    ) -> None:
        self.top_k = top_k
        self.k1 = k1
        self.b = b
        self.epsilon = epsilon
        self.engine = engine
        self.token_pattern = token_pattern
        self.lowercase = lowercase
        self.query_stopwords = query_stopwords

    def fit(self, store: MemoryStore, **kwargs: object) -> BM25:
        """Index every memory of ``store`` now (otherwise done on the first query)."""
        self._index(store)
        return self

    def _index(self, store: MemoryStore) -> BM25Engine:
        """The engine fitted on every row of ``store``, refitted when rows or settings change."""
        corpus: TokenizedCorpus | None = getattr(self, "corpus_", None)
        ref = getattr(self, "store_", None)
        if (
            corpus is None
            or ref is None
            or ref() is not store
            or corpus.token_pattern != self.token_pattern
            or corpus.lowercase != self.lowercase
            or corpus.n_docs > len(store)
        ):
            corpus = TokenizedCorpus(token_pattern=self.token_pattern, lowercase=self.lowercase)
            self.corpus_ = corpus
            self.store_ = weakref.ref(store)
            self.index_ = None
        n = len(store)
        settings = (self.engine, self.k1, self.b, self.epsilon)
        if (
            self.index_ is None
            or corpus.n_docs != n
            or getattr(self, "index_settings_", None) != settings
        ):
            corpus.extend(store.record_at(i).text for i in range(corpus.n_docs, n))
            engine_cls = get_bm25_engine(self.engine)
            self.index_ = engine_cls(k1=self.k1, b=self.b, epsilon=self.epsilon).fit(corpus)
            self.index_settings_ = settings
        self.index_version_ = store.version
        return self.index_

    def transform(self, frame: pl.DataFrame, ctx: QueryContext) -> pl.DataFrame:
        store = ctx.store
        if len(store) == 0:
            return empty_candidates({"bm25_score": pl.Float64()})
        index = self._index(store)
        tokens = self.corpus_.tokenize(ctx.text)
        if self.query_stopwords is not None:
            stop = get_stopwords(self.query_stopwords)
            tokens = [t for t in tokens if t not in stop]
        scores = index.get_scores(tokens)
        rows = top_rows(scores, ctx.visible_mask() & (scores > 0), self.top_k)
        return candidates_from_rows(ctx, rows, scores[rows], "bm25_score", top_k=self.top_k)
