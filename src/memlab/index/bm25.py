"""BM25 engines over a cached, tokenised corpus.

Okapi BM25 (Robertson & Zaragoza, "The Probabilistic Relevance Framework: BM25 and Beyond",
Foundations and Trends in IR 3(4), 2009) in the variant of ``rank_bm25.BM25Okapi`` (after Trotman,
Puurula & Burgess, "Improvements to BM25 and Language Models Examined", ADCS 2014)::

    idf(t)      = log(N - n(t) + 0.5) - log(n(t) + 0.5)
                  (a negative idf is replaced by epsilon × mean idf over the vocabulary;
                  where that mean is not positive, every idf not above 0 by epsilon itself)
    score(d, q) = Σ_{t in q} idf(t) · f(t, d) · (k1 + 1) / (f(t, d) + K(d))
    K(d)        = k1 · (1 - b + b · |d| / avgdl)

where ``N`` is the number of documents, ``n(t)`` the number containing ``t``, ``f(t, d)`` the
count of ``t`` in ``d`` and the sum runs over the query's tokens (a repeated query token counts
each time). Defaults ``k1 = 1.5``, ``b = 0.75``, ``epsilon = 0.25`` are rank_bm25's.

In a corpus where most terms occur in most documents — one or two memories, as a new client's
scope has under ``statistics="scope"`` — the mean idf is itself negative and rank_bm25's floor
leaves every matching term a negative weight: a query that shares its words with the only
memory would score it below zero, and retrieve nothing. memlab floors those terms at
``epsilon`` instead (a small positive weight: the documents are then ranked by how often they
hold the query's terms); wherever the mean idf is positive, the scores are rank_bm25's. The
terms whose idf is exactly 0 (in half of the documents: in two memories, the term only one of
them holds) get ``epsilon`` too: left at 0, they would weigh less than the terms both memories
hold, and "the cat" would rank "the dog" above "the cat sat".

Two engines are registered: ``"rank_bm25"`` (the reference, rank_bm25's own code) and
``"sparse"`` (a scipy CSC matrix of precomputed term contributions; a query reads only its terms'
columns). The sparse engine's :meth:`SparseBM25Engine.top` visits only the documents a query
touches: on a large corpus (``jit_min_docs``, default 100,000 documents) a numba kernel adds the
query's posting lists into a reused buffer, so a query costs its postings, not the corpus size
(``bench/bench_bm25.py`` times it beside bm25s's numba backend).
Both read a :class:`TokenizedCorpus`, which tokenises each document once; refitting an engine
after documents are added costs a sparse-matrix build, not a re-tokenisation.
"""

from __future__ import annotations

import math
import re
import threading
from collections import Counter
from collections.abc import Iterable, Sequence
from typing import Any, Protocol, runtime_checkable

import numpy as np
import scipy.sparse as sp

from memlab.registry import Registry

__all__ = [
    "BM25_ENGINES",
    "BM25Engine",
    "RankBM25Engine",
    "SparseBM25Engine",
    "TokenizedCorpus",
    "get_bm25_engine",
    "select_top",
    "register_bm25_engine",
]


class TokenizedCorpus:
    """Documents tokenised once, kept as term ids and counts (a growable cache).

    Tokens are ``re.findall(token_pattern, text.lower())`` (no lowering when ``lowercase`` is
    false). Term ids are given in order of first occurrence, which is also the order in which
    rank_bm25 meets the vocabulary, so both engines sum idf values in the same order. New
    documents wait in small per-document arrays until :meth:`csr_arrays` merges them into the
    flat arrays once.

    Args:
        token_pattern: Regular expression of one token.
        lowercase: Lowercase the text before tokenising.

    Attributes:
        vocab_: Term → id.
        tokens_: Every document's token list (the reference engine reads these).
        n_tokens_: Total number of tokens.
    """

    def __init__(self, token_pattern: str = r"\w+", lowercase: bool = True) -> None:
        self.token_pattern = token_pattern
        self.lowercase = lowercase
        self.vocab_: dict[str, int] = {}
        self.tokens_: list[list[str]] = []
        self.n_tokens_ = 0
        self.regex_: re.Pattern[str] | None = None
        self._indptr = np.zeros(1, dtype=np.int64)
        self._terms = np.zeros(0, dtype=np.int32)
        self._counts = np.zeros(0, dtype=np.float64)
        self._doc_len = np.zeros(0, dtype=np.int64)
        self._pending_terms: list[np.ndarray] = []
        self._pending_counts: list[np.ndarray] = []

    @property
    def n_docs(self) -> int:
        """Number of documents tokenised so far."""
        return len(self.tokens_)

    def tokenize(self, text: str) -> list[str]:
        """The tokens of ``text``."""
        if self.regex_ is None:
            self.regex_ = re.compile(self.token_pattern)
        return self.regex_.findall(text.lower() if self.lowercase else text)

    def extend(self, texts: Iterable[str]) -> None:
        """Tokenise and append documents."""
        vocab = self.vocab_
        for text in texts:
            tokens = self.tokenize(text)
            counts = Counter(tokens)
            self.tokens_.append(tokens)
            self.n_tokens_ += len(tokens)
            self._pending_terms.append(
                np.fromiter(
                    (vocab.setdefault(t, len(vocab)) for t in counts),
                    dtype=np.int32,
                    count=len(counts),
                )
            )
            self._pending_counts.append(
                np.fromiter(counts.values(), dtype=np.float64, count=len(counts))
            )

    def csr_arrays(self) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
        """``(indptr, term ids, counts, doc lengths)``: the document × term count matrix (CSR).

        Each row lists a document's distinct terms in order of first occurrence.
        """
        if self._pending_terms:
            sizes = np.fromiter(
                (len(a) for a in self._pending_terms),
                dtype=np.int64,
                count=len(self._pending_terms),
            )
            lengths = np.fromiter(
                (int(a.sum()) for a in self._pending_counts),
                dtype=np.int64,
                count=len(self._pending_counts),
            )
            self._indptr = np.concatenate([self._indptr, self._indptr[-1] + np.cumsum(sizes)])
            self._terms = np.concatenate([self._terms, *self._pending_terms])
            self._counts = np.concatenate([self._counts, *self._pending_counts])
            self._doc_len = np.concatenate([self._doc_len, lengths])
            self._pending_terms = []
            self._pending_counts = []
        return self._indptr, self._terms, self._counts, self._doc_len


BM25_ENGINES: Registry[type[Any]] = Registry("BM25 engine")
"""BM25 engine classes by name."""

register_bm25_engine = BM25_ENGINES.register
"""Class decorator: register a BM25 engine under ``name``."""


def get_bm25_engine(name: str) -> type[BM25Engine]:
    """The engine class registered as ``name`` (``ValueError`` listing the known names)."""
    return BM25_ENGINES.lookup(name)


@runtime_checkable
class BM25Engine(Protocol):
    """A BM25 scorer fitted on a :class:`TokenizedCorpus`."""

    def fit(self, corpus: TokenizedCorpus) -> BM25Engine:
        """Index every document of ``corpus``."""
        ...

    def get_scores(self, query_tokens: Sequence[str]) -> np.ndarray:
        """One float64 score per indexed document."""
        ...

    def top(
        self,
        query_tokens: Sequence[str],
        k: int | None = None,
        rows: np.ndarray | None = None,
        visible: np.ndarray | None = None,
    ) -> tuple[np.ndarray, np.ndarray]:
        """``(documents, scores)``: the documents scoring above 0 whose store row
        (``rows[d]``) is ``visible``, cut at the ``k``-th best score, ties included (any
        order)."""
        ...


def _idf(doc_freq: np.ndarray, n_docs: int, epsilon: float) -> np.ndarray:
    """rank_bm25's idf with its negative-idf floor, computed in its order of operations (and
    ``epsilon`` as the floor where the mean idf is not positive: see the module docstring)."""
    log = math.log
    if len(doc_freq) == 0:
        return np.zeros(0, dtype=np.float64)
    # Few distinct document frequencies (each at most n_docs): compute each once (same
    # floats, fewer logs) into a table read by document frequency.
    doc_freq = np.asarray(doc_freq, dtype=np.int64)
    table = np.zeros(int(doc_freq.max()) + 1, dtype=np.float64)
    freqs = np.flatnonzero(np.bincount(doc_freq))
    table[freqs] = [log(n_docs - n + 0.5) - log(n + 0.5) for n in freqs.tolist()]
    idf = table[doc_freq]
    # cumsum adds left to right like rank_bm25's loop (np.sum would add pairwise).
    average_idf = float(np.cumsum(idf)[-1]) / len(idf)
    if average_idf > 0:
        idf[idf < 0] = epsilon * average_idf
    else:  # a degenerate corpus (module docstring)
        idf[idf <= 0] = epsilon
    return idf


@register_bm25_engine("sparse")
class SparseBM25Engine:
    """BM25Okapi on a scipy CSC matrix of precomputed contributions (columns = terms).

    Every (document, term) contribution ``idf · f · (k1 + 1) / (f + K(d))`` is computed with the
    same floating-point operations in the same order as rank_bm25; a query adds the
    contributions of its terms' columns, token by token as rank_bm25 does, so scores agree with
    the reference to the last bit in practice (and are tested to 1e-9).

    The fit computes idf and the length norms only. The first ``scan_queries`` queries after it
    (on at most ``scan_max_entries`` (document, term) entries) read the count matrix row-major
    and compute just their terms' contributions; the next query builds the CSC matrix of every
    contribution. A store that grows between queries (a replay refits at every size) then never
    pays for a matrix it reads once, and a store queried many times builds it once. Both paths
    give the same floats (tested).

    Args:
        k1: Term-frequency saturation (rank_bm25 default 1.5).
        b: Length normalisation (rank_bm25 default 0.75).
        epsilon: Floor of negative idf values, as a fraction of the mean idf (default 0.25).
        jit_min_docs: From this many documents :meth:`top` runs the numba kernel.
        scan_queries: Queries answered from the count matrix before the contribution matrix is
            built (0 builds it at the fit).
        scan_max_entries: Corpora with more (document, term) entries build the contribution
            matrix at the fit.

    Attributes:
        weights_: ``(n_docs, n_terms)`` CSC matrix of contributions (``None`` until built).
        idf_: idf per term id.
        vocab_: The corpus vocabulary (term → column; shared with the corpus, so terms added
            after the fit have columns beyond ``weights_`` and are ignored until a refit).
    """

    def __init__(
        self,
        k1: float = 1.5,
        b: float = 0.75,
        epsilon: float = 0.25,
        jit_min_docs: int = 100_000,
        scan_queries: int = 2,
        scan_max_entries: int = 200_000,
    ) -> None:
        self.k1 = k1
        self.b = b
        self.epsilon = epsilon
        self.jit_min_docs = jit_min_docs
        self.scan_queries = scan_queries
        self.scan_max_entries = scan_max_entries

    def fit(self, corpus: TokenizedCorpus) -> SparseBM25Engine:
        """Compute the idf of every term and the length norm of every document of ``corpus``
        (and the contribution matrix, on a large corpus or with ``scan_queries=0``)."""
        indptr, terms, counts, doc_len = corpus.csr_arrays()
        n_docs, n_terms = corpus.n_docs, len(corpus.vocab_)
        self.n_docs_ = n_docs
        self.n_terms_ = n_terms
        self.vocab_ = corpus.vocab_
        # Each row lists its distinct terms once: a term's count of entries is its df.
        self.idf_ = _idf(np.bincount(terms, minlength=n_terms), n_docs, self.epsilon)
        self.norm_ = np.zeros(0, dtype=np.float64)
        if len(terms):
            avgdl = corpus.n_tokens_ / n_docs
            self.norm_ = self.k1 * (1 - self.b + self.b * doc_len / avgdl)
        self.csr_ = (indptr, terms, counts)
        self.weights_: sp.csc_matrix | None = None
        self.scanned_ = 0
        self.buffers_ = threading.local()
        if (
            self.scan_queries <= 0
            or len(terms) > self.scan_max_entries
            or n_docs >= self.jit_min_docs
        ):
            self._build()
        return self

    def _build(self) -> sp.csc_matrix:
        """The ``(n_docs, n_terms)`` CSC matrix of every contribution (built once)."""
        if self.weights_ is None:
            indptr, terms, counts = self.csr_
            n_docs, n_terms = self.n_docs_, self.n_terms_
            tf = sp.csr_matrix(
                (counts, terms, indptr), shape=(n_docs, n_terms), copy=False
            ).tocsc()
            if tf.nnz:
                f = tf.data
                term = np.repeat(np.arange(n_terms), np.diff(tf.indptr))
                tf.data = self._contribution(self.idf_[term], f, self.norm_[tf.indices])
            self.weights_ = tf
        return self.weights_

    def _contribution(self, idf: Any, f: np.ndarray, norm: np.ndarray) -> np.ndarray:
        """``idf · f · (k1 + 1) / (f + K(d))`` in rank_bm25's order of operations (both the
        matrix and the scan compute a contribution here, so they give the same floats)."""
        return idf * (f * (self.k1 + 1) / (f + norm))

    def _term_ids(self, query_tokens: Sequence[str]) -> np.ndarray:
        """Column of each query token known to the fitted matrix, in query order."""
        vocab, n_terms = self.vocab_, self.n_terms_
        ids = [t for t in map(vocab.get, query_tokens) if t is not None and t < n_terms]
        return np.asarray(ids, dtype=np.int64)

    def get_scores(self, query_tokens: Sequence[str]) -> np.ndarray:
        """BM25 score of every document for the query tokens (repeats count each time)."""
        score = np.zeros(self.n_docs_, dtype=np.float64)
        terms = self._term_ids(query_tokens).tolist()
        if self.weights_ is None and self.scanned_ < self.scan_queries:
            self.scanned_ += 1
            if terms:
                self._scan(terms, score)
            return score
        w = self._build()
        for t in terms:
            lo, hi = w.indptr[t], w.indptr[t + 1]
            score[w.indices[lo:hi]] += w.data[lo:hi]
        return score

    def _scan(self, terms: list[int], score: np.ndarray) -> None:
        """Add the query terms' contributions from the count matrix (row-major), token by
        token: the floats of the CSC path, computed for these terms only."""
        indptr, all_terms, counts = self.csr_
        wanted = np.unique(terms)
        hit = np.flatnonzero(np.isin(all_terms, wanted))
        docs = np.searchsorted(indptr, hit, side="right") - 1
        term_of = all_terms[hit]
        per_term: dict[int, tuple[np.ndarray, np.ndarray]] = {}
        for t in terms:
            if t not in per_term:
                sel = term_of == t
                d, f = docs[sel], counts[hit[sel]]
                per_term[t] = (d, self._contribution(self.idf_[t], f, self.norm_[d]))
            d, w = per_term[t]
            score[d] += w

    def top(
        self,
        query_tokens: Sequence[str],
        k: int | None = None,
        rows: np.ndarray | None = None,
        visible: np.ndarray | None = None,
    ) -> tuple[np.ndarray, np.ndarray]:
        """The best visible documents scoring above 0, with their scores.

        Below ``jit_min_docs`` documents this is :func:`select_top` on :meth:`get_scores`; from
        there a numba kernel adds the query's columns token by token (the same additions in the
        same order, so the same floats) into a per-thread buffer, visits only the documents the
        query touches and selects the best ``k`` with a heap: a query costs its posting lists,
        not the corpus size.

        Args:
            query_tokens: The query's tokens (repeats count each time).
            k: Keep documents scoring at least the ``k``-th best score (ties at the cut
                included; ``None`` keeps every positive one).
            rows: Store row of each document (``None``: document ``i`` is row ``i``).
            visible: Which store rows may be returned (``None``: all).

        Returns:
            ``(documents, scores)``: document indices in no particular order and float64
            scores.
        """
        if self.n_docs_ < self.jit_min_docs:
            return select_top(self.get_scores(query_tokens), k, rows, visible)
        terms = self._term_ids(query_tokens)
        buffers = self.buffers_
        if getattr(buffers, "score", None) is None:
            buffers.score = np.zeros(self.n_docs_, dtype=np.float64)
            buffers.seen = np.zeros(self.n_docs_, dtype=np.bool_)
            buffers.docs = np.empty(self.n_docs_, dtype=np.int64)
            buffers.out = np.empty(self.n_docs_, dtype=np.float64)
        if rows is None:
            rows = np.arange(self.n_docs_, dtype=np.int64)
        if visible is None:
            visible = np.ones(int(rows.max(initial=-1)) + 1, dtype=np.bool_)
        kk = 0 if k is None else int(k)
        heap = np.empty(max(kk, 1), dtype=np.float64)
        w = self._build()
        from memlab.index._bm25_kernel import top_k

        n = top_k(
            w.indptr, w.indices, w.data, terms, rows, visible, kk,
            buffers.score, buffers.seen, buffers.docs, buffers.out, heap,
        )
        return buffers.docs[:n].copy(), buffers.out[:n].copy()


def select_top(
    scores: np.ndarray,
    k: int | None,
    rows: np.ndarray | None = None,
    visible: np.ndarray | None = None,
) -> tuple[np.ndarray, np.ndarray]:
    """``BM25Engine.top`` from a full score vector (numpy; ``argpartition`` for the cut)."""
    keep = scores > 0
    if visible is not None:
        keep &= visible if rows is None else visible[rows]
    docs = np.flatnonzero(keep)
    s = scores[docs]
    if k is not None and 0 < k < len(docs):
        kth = s[np.argpartition(-s, k - 1)[k - 1]]
        docs, s = docs[s >= kth], s[s >= kth]
    return docs, s


@register_bm25_engine("rank_bm25")
class RankBM25Engine:
    """The reference: ``rank_bm25.BM25Okapi`` fitted on the cached token lists.

    Args:
        k1: Term-frequency saturation (default 1.5).
        b: Length normalisation (default 0.75).
        epsilon: Floor of negative idf values, as a fraction of the mean idf (default 0.25).

    Attributes:
        model_: The fitted ``BM25Okapi`` (``None`` for a corpus without any token, on which
            rank_bm25 would divide by zero; every score is then 0).
    """

    def __init__(self, k1: float = 1.5, b: float = 0.75, epsilon: float = 0.25) -> None:
        self.k1 = k1
        self.b = b
        self.epsilon = epsilon

    def fit(self, corpus: TokenizedCorpus) -> RankBM25Engine:
        """Fit ``BM25Okapi`` on the corpus's token lists."""
        from rank_bm25 import BM25Okapi

        self.n_docs_ = corpus.n_docs
        self.model_ = None
        if corpus.n_tokens_:
            self.model_ = BM25Okapi(corpus.tokens_, k1=self.k1, b=self.b, epsilon=self.epsilon)
            if self.model_.average_idf <= 0:  # the floor of a degenerate corpus (module doc)
                idf = self.model_.idf
                for term, value in idf.items():
                    if value <= 0:
                        idf[term] = self.epsilon
        return self

    def get_scores(self, query_tokens: Sequence[str]) -> np.ndarray:
        """``BM25Okapi.get_scores`` (zeros when the corpus has no token)."""
        if self.model_ is None:
            return np.zeros(self.n_docs_, dtype=np.float64)
        return np.asarray(self.model_.get_scores(list(query_tokens)), dtype=np.float64)

    def top(
        self,
        query_tokens: Sequence[str],
        k: int | None = None,
        rows: np.ndarray | None = None,
        visible: np.ndarray | None = None,
    ) -> tuple[np.ndarray, np.ndarray]:
        """:func:`select_top` on :meth:`get_scores`."""
        return select_top(self.get_scores(query_tokens), k, rows, visible)
