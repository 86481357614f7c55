"""Training a cross-encoder re-ranker offline and deterministically from a local BERT.

A cross-encoder reads the query and one memory as a single sequence (``[CLS] query [SEP]
memory [SEP]``) and outputs one relevance logit from the ``[CLS]`` vector (Nogueira & Cho,
"Passage Re-ranking with BERT", 2019). No trained cross-encoder installs offline, so one is
trained here from the weights of a local sentence-transformers or BERT directory
(:func:`memlab.embed.finetune.model_dir`; ``minilm`` is all-MiniLM-L6-v2): its encoder is kept
and a fresh one-logit head (``BertForSequenceClassification``) is added, initialised from the
seed.

Training examples (:func:`training_examples`) are, for every judged query of the training
clients, its evidence memories (label 1) and hard negatives (label 0): memories a first-stage
ranking (``conversational``'s, in ``eval/locomo_cv.py``) put in its top ``negative_depth`` that
are not evidence, ``negatives`` of them drawn per query with a seeded generator. Drawing from a
depth rather than taking the very top leaves out part of the unjudged near-duplicates of the
evidence that the top holds. The loss is binary cross-entropy on the logit (Nogueira & Cho's
pointwise loss, ``BinaryCrossEntropyLoss`` of sentence-transformers' ``CrossEncoder``).

Every constant is in :class:`CrossFineTuneParams`. Nothing is downloaded: the base is read with
``local_files_only``. Training runs on the CPU on one torch thread with every draw seeded
(head initialisation, shuffling, dropout), so the same base, examples and constants give the
same weights. The result is written atomically (a temporary sibling renamed into place) as a
Hugging Face model directory (weights, configuration, tokenizer) with ``crossencoder.json``
beside it: the base model and its digest, the constants and a digest of the examples. A
directory that already holds the same record is returned as is.

``eval/locomo_cv.py`` trains one per fold of a cross-validation by conversation: each fold's
questions are re-ranked by a model trained on the other fold's questions and turns only.
"""

from __future__ import annotations

import hashlib
import json
import math
import os
import random
import shutil
import tempfile
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from memlab.datasets.format import Dataset

__all__ = [
    "RECORD",
    "CrossFineTuneParams",
    "Example",
    "check_examples",
    "examples_digest",
    "first_stage_rankings",
    "train_cross_encoder",
    "training_examples",
]

RECORD = "crossencoder.json"
"""The file beside the weights that says how they were trained."""

Example = tuple[str, str, float]
"""``(query, memory, label)``: label 1.0 for evidence, 0.0 for a negative."""


@dataclass(frozen=True)
class CrossFineTuneParams:
    """The constants of a cross-encoder training run, all fixed before any measurement.

    Args:
        epochs: Passes over the examples. 2, as :class:`~memlab.embed.finetune.FineTuneParams`
            (9,436 example-steps on LoCoMo's larger fold: 15 CPU-minutes on one core).
        learning_rate: AdamW's peak learning rate. 2e-5, the rate of sentence-transformers'
            cross-encoder training examples and of :mod:`memlab.embed.finetune`.
        batch_size: Examples per step. 16: about 600 optimiser steps on a LoCoMo fold for the
            fresh head.
        warmup_fraction: Share of the steps over which the rate rises linearly from 0 before
            decaying linearly to 0 (0.1, sentence-transformers' default schedule).
        weight_decay: AdamW's decoupled weight decay (0.01, transformers' ``Trainer`` examples).
        negatives: Hard negatives drawn per query (4: about two negatives per evidence turn on
            LoCoMo, whose scored questions have 1.6 evidence turns on average).
        negative_depth: The negatives are drawn from the first-stage ranking's top this many
            (30: inside the head of 50 the re-ranker sees, below the near-duplicates the
            very top holds).
        max_length: Word pieces of query and memory together (128: a LoCoMo turn has 37 on
            average and at most 121, a question at most 32, so almost no pair is cut; a longer
            pair loses the end of its longer text).
        seed: Seeds the head's initialisation, the negatives, the shuffling and dropout.
    """

    epochs: int = 2
    learning_rate: float = 2e-5
    batch_size: int = 16
    warmup_fraction: float = 0.1
    weight_decay: float = 0.01
    negatives: int = 4
    negative_depth: int = 30
    max_length: int = 128
    seed: int = 0

    def __post_init__(self) -> None:
        for name, low in (("epochs", 1), ("batch_size", 1), ("negatives", 0),
                          ("negative_depth", 1), ("max_length", 8), ("seed", 0)):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int):
                raise TypeError(f"CrossFineTuneParams.{name} must be an int, got {value!r}")
            if value < low:
                raise ValueError(f"CrossFineTuneParams.{name} must be >= {low}, got {value}")
        for name, low, high in (("learning_rate", 0.0, math.inf),
                                ("warmup_fraction", 0.0, 1.0),
                                ("weight_decay", 0.0, math.inf)):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, (int, float)):
                raise TypeError(f"CrossFineTuneParams.{name} must be a number, got {value!r}")
            if not math.isfinite(value) or value < low or value > high or (
                name == "learning_rate" and value == 0
            ):
                bound = "> 0" if name == "learning_rate" else f"in [{low}, {high}]"
                raise ValueError(
                    f"CrossFineTuneParams.{name} must be a finite number {bound}, got {value}"
                )

    def to_dict(self) -> dict[str, Any]:
        """The constants, by name."""
        return asdict(self)


def examples_digest(examples: Sequence[Example]) -> str:
    """SHA-256 (hex) of the training examples, in order."""
    h = hashlib.sha256()
    for query, memory, label in examples:
        h.update(query.encode("utf-8") + b"\0" + memory.encode("utf-8") + b"\0"
                 + repr(float(label)).encode() + b"\0\0")
    return h.hexdigest()


def training_examples(
    dataset: Dataset,
    rankings: Mapping[str, Sequence[str]],
    *,
    clients: Sequence[str] | None = None,
    exclude_tags: Sequence[str] = ("adversarial",),
    params: CrossFineTuneParams | None = None,
) -> list[Example]:
    """Evidence and hard negatives of a dataset's judged queries, in dataset order.

    For each query with judgements (of ``clients``, without an ``exclude_tags`` tag): one
    example per judged-relevant memory the write log stores (label 1.0), then ``negatives``
    memories drawn without replacement (``random.Random`` seeded by the seed and the query id)
    from the ones ``rankings[qid]`` puts in its top ``negative_depth`` that are not judged
    relevant (label 0.0), in rank order. Texts are scrubbed of credentials as a store holds
    them (:func:`~memlab.memory.scrub.scrub_text`).

    Args:
        dataset: The dataset.
        rankings: Query id → memory ids of a first-stage ranking, best first.
        clients: Only the queries of these clients (``None``: every query).
        exclude_tags: Queries carrying one of these tags are left out.
        params: ``negatives``, ``negative_depth`` and ``seed`` are read from it.

    Raises:
        ValueError: A client of ``clients`` has no query, or a training query has no ranking.
    """
    from memlab.embed.finetune import training_queries
    from memlab.memory.scrub import scrub_text

    params = params or CrossFineTuneParams()
    queries, text = training_queries(dataset, clients=clients, exclude_tags=exclude_tags)
    out: list[Example] = []
    for q in queries:
        if not q.relevant:
            continue
        positives = [m for m, grade in q.relevant.items() if grade > 0 and m in text]
        if not positives:
            continue
        if q.qid not in rankings:
            raise ValueError(f"rankings: no ranking for training query {q.qid!r}")
        pool = [m for m in list(rankings[q.qid])[: params.negative_depth]
                if m in text and q.relevant.get(m, 0) <= 0]
        rng = random.Random(f"{params.seed}:{q.qid}")
        picked = sorted(rng.sample(range(len(pool)), min(params.negatives, len(pool))))
        out += [(q.text, scrub_text(text[m])[0], 1.0) for m in positives]
        out += [(q.text, scrub_text(text[pool[i]])[0], 0.0) for i in picked]
    return out


def first_stage_rankings(
    dataset: Dataset, pipeline: Any, *, exclude_tags: Sequence[str] = ("adversarial",)
) -> dict[str, list[str]]:
    """Every query's ranking by ``pipeline`` (memory ids, best first), replayed as ``memlab
    eval`` replays it: where :func:`training_examples` draws its hard negatives. A query the
    pipeline ranked nothing for has an empty list (it gets no negative)."""
    from memlab.eval.experiment import run_experiment

    ranked = run_experiment(dataset, [pipeline], metrics=["R_all@10"], exclude_tags=exclude_tags,
                            progress=False, write_report=False).rankings
    rankings: dict[str, list[str]] = {q.qid: [] for q in dataset.queries}
    for (qid,), sub in ranked.sort("qid", "rank").group_by(["qid"], maintain_order=True):
        rankings[str(qid)] = sub.get_column("mem_id").to_list()
    return rankings


def check_examples(examples: Sequence[Any]) -> list[Example]:
    """The examples as ``(str, str, float)`` tuples.

    Raises:
        ValueError: An example is not ``(query, memory, label)`` with two non-empty strings
            and a label in [0, 1], or there are no positive or no negative examples.
    """
    out: list[Example] = []
    for i, ex in enumerate(examples):
        ok = (isinstance(ex, (tuple, list)) and len(ex) == 3
              and all(isinstance(t, str) and t.strip() for t in ex[:2])
              and not isinstance(ex[2], bool) and isinstance(ex[2], (int, float))
              and 0.0 <= float(ex[2]) <= 1.0)
        if not ok:
            raise ValueError(f"examples[{i}]: expected (query, memory, label), two non-empty "
                             f"strings and a label in [0, 1], got {ex!r}")
        out.append((ex[0], ex[1], float(ex[2])))
    if not any(label > 0 for _, _, label in out) or not any(label < 1 for _, _, label in out):
        raise ValueError("examples: need at least one positive and one negative example")
    return out


def train_cross_encoder(
    base: Path,
    examples: Sequence[Example],
    out: Path,
    params: CrossFineTuneParams | None = None,
) -> Path:
    """Train a cross-encoder from the BERT in ``base`` on ``examples`` and save it as ``out``
    (see the module docstring); return ``out``.

    Args:
        base: A local BERT or sentence-transformers model directory.
        examples: ``(query, memory, label)`` examples (:func:`training_examples`).
        out: Where the model goes: a missing path, or a model this function wrote from the
            same base, examples and constants (returned as is).
        params: The constants (default :class:`CrossFineTuneParams`).

    Raises:
        TypeError: ``params`` is not a :class:`CrossFineTuneParams`.
        ValueError: A malformed example, or ``out`` an existing path other than that model
            (it is never replaced).
    """
    params = CrossFineTuneParams() if params is None else params
    if not isinstance(params, CrossFineTuneParams):
        raise TypeError(f"params must be a CrossFineTuneParams, got {type(params).__name__}")
    examples = check_examples(examples)
    from memlab.embed.sentence_transformer import model_digest

    record = {
        "base": str(base),
        "base_digest": model_digest(Path(base)),
        "examples": len(examples),
        "positives": sum(1 for e in examples if e[2] > 0),
        "examples_digest": examples_digest(examples),
        "loss": "BCEWithLogitsLoss",
        **params.to_dict(),
    }
    from memlab.embed.finetune import trained_already

    if trained_already(out, RECORD, record, f"a cross-encoder trained from {base} on these "
                       "examples with these constants"):
        return out
    model, tokenizer = _train(Path(base), examples, params)
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{out.name}.tmp-", dir=out.parent))
    try:
        model.save_pretrained(str(tmp))
        tokenizer.save_pretrained(str(tmp))
        (tmp / RECORD).write_text(json.dumps(record, indent=2, sort_keys=True) + "\n",
                                  encoding="utf-8")
        os.rename(tmp, out)  # fails if something appeared at out meanwhile: nothing replaced
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return out


def _batches(n: int, batch_size: int, rng: random.Random) -> list[list[int]]:
    order = list(range(n))
    rng.shuffle(order)
    return [order[i:i + batch_size] for i in range(0, n, batch_size)]


def _train(base: Path, examples: list[Example], params: CrossFineTuneParams) -> tuple[Any, Any]:
    """The trained ``BertForSequenceClassification`` and its tokenizer (CPU, one thread)."""
    import torch
    from transformers import AutoModelForSequenceClassification, AutoTokenizer

    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        torch.manual_seed(params.seed)  # the fresh head's initialisation
        tokenizer = AutoTokenizer.from_pretrained(str(base), local_files_only=True)
        model = AutoModelForSequenceClassification.from_pretrained(
            str(base), num_labels=1, local_files_only=True
        )
        model.to("cpu")
        decay = [p for n, p in model.named_parameters() if not n.endswith("bias")
                 and "LayerNorm" not in n]
        rest = [p for n, p in model.named_parameters() if n.endswith("bias") or "LayerNorm" in n]
        optimizer = torch.optim.AdamW(
            [{"params": decay, "weight_decay": params.weight_decay},
             {"params": rest, "weight_decay": 0.0}],
            lr=params.learning_rate,
        )
        rng = random.Random(params.seed)
        epochs = [_batches(len(examples), params.batch_size, rng) for _ in range(params.epochs)]
        total = sum(len(e) for e in epochs)
        warmup = int(params.warmup_fraction * total)

        def rate(step: int) -> float:
            if step < warmup:
                return (step + 1) / (warmup + 1)
            return max(0.0, (total - step) / max(1, total - warmup))

        scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, rate)
        loss_fn = torch.nn.BCEWithLogitsLoss()
        model.train()
        for batches in epochs:
            for batch in batches:
                features = tokenizer(
                    [examples[i][0] for i in batch], [examples[i][1] for i in batch],
                    truncation="longest_first", max_length=params.max_length, padding=True,
                    return_tensors="pt",
                )
                labels = torch.tensor([examples[i][2] for i in batch], dtype=torch.float32)
                logits = model(**features).logits.view(-1)
                loss = loss_fn(logits, labels)
                optimizer.zero_grad()
                loss.backward()
                optimizer.step()
                scheduler.step()
        model.eval()
        return model, tokenizer
    finally:
        torch.set_num_threads(threads)
