"""Text indexes behind the retrieval stages (BM25 engines)."""

from memlab.index.bm25 import (
    BM25_ENGINES,
    BM25Engine,
    RankBM25Engine,
    SparseBM25Engine,
    TokenizedCorpus,
    get_bm25_engine,
    register_bm25_engine,
)

__all__ = [
    "BM25_ENGINES",
    "BM25Engine",
    "RankBM25Engine",
    "SparseBM25Engine",
    "TokenizedCorpus",
    "get_bm25_engine",
    "register_bm25_engine",
]
