"""BM25 keyword retrieval (Robertson & Zaragoza 2009; rank_bm25's Okapi variant).

Design §D0.7's keyword path ("by BM25 text relevance"), one of the ranked lists hybrid retrieval
fuses with RRF; design §D4.3's "keyword candidates from lexical matching". Defaults are rank_bm25's
``BM25Okapi``: ``k1 = 1.5``, ``b = 0.75``, ``epsilon = 0.25`` (see :mod:`memlab.index.bm25` for
the formula and the engines).

Corpus statistics (``N``, document frequencies, average length) are taken, with
``statistics="store"`` (the default), over **every memory written so far** — all clients,
active or not — like one shared keyword index; the scores are then masked by the query's
visibility. With ``statistics="scope"`` each query scope has its own index over the memories
that scope can ever see (the client's and the ``global`` ones, active or not): one tenant's
vocabulary then never shifts another tenant's idf, and a per-conversation benchmark such as
LoCoMo gets per-conversation statistics. Either way superseded and forgotten memories still
count in the statistics (a documented approximation of a live index). A query with a principal
(an agent, :mod:`memlab.memory.scopes`) gets, with either setting, the index of its scope: the
memories of the namespaces that agent reads, in the query's client (and ``global``), so the
memories of other agents and tenants never shape its idf: with scores a recall shows, an agent
could otherwise count how many memories it cannot read hold a word. A promotion (which moves a
memory between namespaces) rebuilds those indexes.

The stage keeps each fitted index (``indexes_``, by scope) between queries. A text changes
after it is written only when a purge erases it (``store.content_version``), which rebuilds the
indexes; otherwise an index is refitted lazily only when the store has new rows in its scope (a
version change without new rows — an access, a supersession — leaves the corpus as it was); a
refit tokenises only the new rows and rebuilds the sparse matrix.

A query reads only the documents its terms touch (the engine's ``top``), keeps the visible
ones and selects the best ``top_k`` among them, so its cost follows the query's posting lists
rather than the store's size.
"""

from __future__ import annotations

import weakref
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, ClassVar

import numpy as np
import polars as pl

from memlab.index.bm25 import BM25_ENGINES, BM25Engine, TokenizedCorpus, get_bm25_engine
from memlab.index.stopwords import STOPWORDS, get_stopwords
from memlab.memory.records import GLOBAL_CLIENT
from memlab.stages.base import (
    QueryContext,
    Stage,
    candidates_from_rows,
    empty_candidates,
    register_stage,
    score_column,
)
from memlab.stages.constraints import Integral, Interval, Options, Real, is_regex

if TYPE_CHECKING:
    from memlab.memory.scopes import Principal
    from memlab.memory.store import MemoryStore

_STATISTICS = ("store", "scope")


@dataclass
class ScopedIndex:
    """One BM25 index: the store rows it covers, their tokenised texts and the fitted engine.

    Attributes:
        client_id: The scope (``None`` = every client).
        principal: The agent whose namespaces the index covers (``None`` = every namespace).
        scope_version: ``store.scope_version`` when the index was built (a promotion moves a
            memory between namespaces and rebuilds it).
        content_version: ``store.content_version`` when the index was built (a purge erases a
            text and rebuilds it: the statistics never keep an erased text's terms).
        corpus: Tokenised texts of ``rows``, in row order.
        rows: Store rows covered (document ``i`` of the corpus is store row ``rows[i]``).
        seen: Store rows examined so far (rows ``>= seen`` are not yet considered).
        engine: The fitted engine (``None`` until the first fit).
        settings: Engine settings of the last fit.
    """

    client_id: str | None
    corpus: TokenizedCorpus
    principal: Principal | None = None
    scope_version: int = 0
    content_version: int = 0
    rows: np.ndarray = field(default_factory=lambda: np.zeros(0, dtype=np.int64))
    seen: int = 0
    engine: BM25Engine | None = None
    settings: tuple[object, ...] | None = None


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
        indexes_: The fitted :class:`ScopedIndex` of each scope seen (key ``None`` for the
            store-wide index, the client id, or ``(client id, principal)`` for an agent).
        corpus_: The tokenised corpus of the index used last.
        index_: The engine of the index used last.
        index_version_: ``store.version`` when the index was last checked against the store.
    """

    cacheable = True

    _parameter_constraints: ClassVar[dict[str, list[Any]]] = {
        "top_k": [Interval(Integral, 1, None, closed="left"), None],
        "k1": [Interval(Real, 0, None, closed="left")],
        "b": [Interval(Real, 0, 1, closed="both")],
        "epsilon": [Interval(Real, 0, None, closed="left")],
        "engine": [Options(str, BM25_ENGINES)],
        "token_pattern": [is_regex()],
        "lowercase": [bool],
        "query_stopwords": [Options(str, STOPWORDS), None],
        "statistics": [Options(str, _STATISTICS)],
    }

    columns = (score_column("bm25_score", "BM25 score"),)
    embeds_other_texts = False  # embeds no text but the query

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
        statistics: str = "store",
    ) -> None:
        self.top_k = top_k
        self.k1 = k1
        self.b = b
        self.epsilon = epsilon
        self.engine = engine
        self.token_pattern = token_pattern
        self.lowercase = lowercase
        self.query_stopwords = query_stopwords
        self.statistics = statistics

    def fit(self, store: MemoryStore, **kwargs: object) -> BM25:
        """Index ``store`` now (otherwise done on the first query).

        Builds the store-wide index, or with ``statistics="scope"`` the index of the scope
        given as ``client_id=`` (store-wide when absent); other scopes are indexed on their
        first query.
        """
        client_id = kwargs.get("client_id")
        self._index(store, None if client_id is None else str(client_id))
        return self

    def _index(
        self, store: MemoryStore, client_id: str | None, principal: Principal | None = None
    ) -> tuple[ScopedIndex, BM25Engine]:
        """The index of ``client_id``'s scope (and ``principal``'s namespaces) and its engine,
        refitted when rows or settings change."""
        if self.statistics not in _STATISTICS:
            raise ValueError(
                f"bm25: statistics must be one of {', '.join(_STATISTICS)}, "
                f"got {self.statistics!r}"
            )
        # An agent's statistics are always its scope's: what it may read in the query's client
        scoped = self.statistics == "scope" or principal is not None
        key: Any = None
        if scoped:
            key = client_id if principal is None else (client_id, principal)
        ref = getattr(self, "store_", None)
        indexes: dict[Any, ScopedIndex] | None = getattr(self, "indexes_", None)
        if indexes is None or ref is None or ref() is not store:
            indexes = {}
            self.indexes_ = indexes
            self.store_ = weakref.ref(store)
        index = indexes.get(key)
        if (
            index is None
            or index.corpus.token_pattern != self.token_pattern
            or index.corpus.lowercase != self.lowercase
            or index.seen > len(store)
            or (index.principal is not None and index.scope_version != store.scope_version)
            or index.content_version != store.content_version
        ):
            corpus = TokenizedCorpus(token_pattern=self.token_pattern, lowercase=self.lowercase)
            index = indexes[key] = ScopedIndex(
                client_id=client_id if scoped else None,
                corpus=corpus,
                principal=principal,
                scope_version=store.scope_version,
                content_version=store.content_version,
            )
        n = len(store)
        if index.seen < n:
            new = np.arange(index.seen, n, dtype=np.int64)
            if index.client_id is not None or index.principal is not None:
                keep = np.ones(len(new), dtype=bool)
                if index.client_id is not None:
                    codes = [store.client_code(index.client_id), store.client_code(GLOBAL_CLIENT)]
                    keep &= np.isin(store.column("client")[index.seen : n], codes)
                if index.principal is not None:
                    scopes = store.scope_codes(index.principal)
                    keep &= np.isin(store.column("scope")[index.seen : n], scopes)
                new = new[keep]
            if len(new):
                index.corpus.extend(store.record_at(int(i)).text for i in new)
                index.rows = np.concatenate([index.rows, new])
                index.engine = None
            index.seen = n
        settings = (self.engine, self.k1, self.b, self.epsilon)
        engine = index.engine
        if engine is None or index.settings != settings:
            engine_cls = get_bm25_engine(self.engine)
            engine = engine_cls(k1=self.k1, b=self.b, epsilon=self.epsilon).fit(index.corpus)
            index.engine, index.settings = engine, settings
        self.corpus_ = index.corpus
        self.index_ = engine
        self.index_version_ = store.version
        return index, engine

    def transform(self, frame: pl.DataFrame, ctx: QueryContext) -> pl.DataFrame:
        store = ctx.store
        if len(store) == 0:
            return empty_candidates({"bm25_score": pl.Float64()})
        index, engine = self._index(store, ctx.client_id, ctx.principal)
        tokens = index.corpus.tokenize(ctx.text)
        if self.query_stopwords is not None:
            stop = get_stopwords(self.query_stopwords)
            tokens = [t for t in tokens if t not in stop]
        docs, scores = engine.top(tokens, self.top_k, index.rows, ctx.visible_mask())
        rows = index.rows[docs]
        return candidates_from_rows(ctx, rows, scores, "bm25_score", top_k=self.top_k)
