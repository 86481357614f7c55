import dataclasses
import hashlib
import json
from pathlib import Path

import pytest

from memlab.datasets.format import load_dataset
from memlab.embed.cross_finetune import (
    RECORD,
    CrossFineTuneParams,
    check_examples,
    examples_digest,
    train_cross_encoder,
    training_examples,
)
from memlab.embed.sentence_transformer import model_digest

HANDMADE = Path(__file__).resolve().parents[1] / "fixtures" / "handmade"

EXAMPLES = [
    ("who plays cello", "ben plays cello tonight", 1.0),
    ("who plays cello", "carla walks her dog", 0.0),
    ("where does dev work", "dev works at the bakery", 1.0),
    ("where does dev work", "ben plays cello tonight", 0.0),
]


def tiny_bert(path: Path) -> Path:
    """A one-layer BERT of width 8 over the words of EXAMPLES (no classification head)."""
    import torch
    from transformers import BertConfig, BertModel, BertTokenizerFast

    words = sorted({w for q, m, _ in EXAMPLES for w in f"{q} {m}".split()})
    vocab = {w: i for i, w in enumerate(["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", *words])}
    BertTokenizerFast(vocab=vocab).save_pretrained(str(path))
    torch.manual_seed(0)
    config = BertConfig(vocab_size=5 + len(words), hidden_size=8, num_hidden_layers=1,
                        num_attention_heads=2, intermediate_size=16, max_position_embeddings=32,
                        initializer_range=0.5)
    BertModel(config).save_pretrained(str(path))
    return path


@pytest.mark.parametrize(
    ("kwargs", "error", "field"),
    [
        ({"epochs": 0}, ValueError, "epochs"),
        ({"batch_size": True}, TypeError, "batch_size"),
        ({"negatives": -1}, ValueError, "negatives"),
        ({"negative_depth": 0}, ValueError, "negative_depth"),
        ({"max_length": 4}, ValueError, "max_length"),
        ({"learning_rate": 0.0}, ValueError, "learning_rate"),
        ({"learning_rate": float("nan")}, ValueError, "learning_rate"),
        ({"warmup_fraction": 1.5}, ValueError, "warmup_fraction"),
        ({"weight_decay": "0.01"}, TypeError, "weight_decay"),
        ({"seed": 1.0}, TypeError, "seed"),
    ],
)
def test_constants_are_checked_and_named(kwargs, error, field):
    with pytest.raises(error, match=rf"CrossFineTuneParams\.{field} must be"):
        CrossFineTuneParams(**kwargs)


def test_constants_are_frozen_and_listed():
    params = CrossFineTuneParams()
    with pytest.raises(dataclasses.FrozenInstanceError):
        params.epochs = 3  # type: ignore[misc]
    assert params.to_dict() == {
        "epochs": 2, "learning_rate": 2e-5, "batch_size": 16, "warmup_fraction": 0.1,
        "weight_decay": 0.01, "negatives": 4, "negative_depth": 30, "max_length": 128,
        "seed": 0,
    }


def test_examples_digest_is_the_sha256_of_the_texts_and_labels():
    want = hashlib.sha256(b"q\0m\x001.0\0\0" + b"q\0n\x000.0\0\0").hexdigest()
    assert examples_digest([("q", "m", 1.0), ("q", "n", 0)]) == want
    assert examples_digest([("q", "n", 0.0), ("q", "m", 1.0)]) != want


def test_bad_examples_name_the_example():
    with pytest.raises(ValueError, match=r"examples\[1\]: expected \(query, memory, label\)"):
        check_examples([("q", "m", 1.0), ("q", " ", 0.0)])
    with pytest.raises(ValueError, match=r"examples\[0\]"):
        check_examples([("q", "m", 2.0)])
    with pytest.raises(ValueError, match="at least one positive and one negative"):
        check_examples([("q", "m", 1.0)])


def test_training_examples_are_evidence_then_ranked_negatives():
    ds = load_dataset(HANDMADE)
    rankings = {"hq04": ["h07", "h06", "h08", "h17"], "hq08": ["h17", "h08", "h06", "h07"]}
    params = CrossFineTuneParams(negatives=2, negative_depth=3)
    got = training_examples(ds, rankings, clients=["globex"], params=params)
    inc = "What happened in INC-1002?"
    db = "How does Globex staging reach its database?"
    assert got == [
        (inc, "INC-1002: `claims-engine` timed out.", 1.0),
        # the top 3 without the evidence h07: h06 and h08, in rank order
        (inc, "INC-1001: `claims-engine` timed out.", 0.0),
        (inc, "Brand palette: teal and white.", 0.0),
        # the evidence is scrubbed as a store holds it
        (db, "Globex staging database: postgres://app:[REDACTED:password]@db.globex.io:5432/app",
         1.0),
        (db, "Brand palette: teal and white.", 0.0),
        (db, "INC-1001: `claims-engine` timed out.", 0.0),
    ]
    # one negative of two: a seeded draw, the same every time
    one = CrossFineTuneParams(negatives=1, negative_depth=3)
    drawn = training_examples(ds, rankings, clients=["globex"], params=one)
    assert drawn == training_examples(ds, rankings, clients=["globex"], params=one)
    assert [e[2] for e in drawn] == [1.0, 0.0, 1.0, 0.0]
    assert {drawn[1][1], drawn[3][1]} <= {got[1][1], got[2][1]}
    assert training_examples(ds, rankings, clients=["globex"], exclude_tags=["credential"],
                             params=params) == got[:3]
    with pytest.raises(ValueError, match="no ranking for training query 'hq08'"):
        training_examples(ds, {"hq04": ["h06"]}, clients=["globex"], params=params)
    with pytest.raises(ValueError, match="no query of client 'globx'"):
        training_examples(ds, rankings, clients=["globx"], params=params)


def test_training_is_deterministic_and_recorded(tmp_path):
    base = tiny_bert(tmp_path / "base")
    params = CrossFineTuneParams(epochs=1, batch_size=2, learning_rate=1e-3)
    one = train_cross_encoder(base, EXAMPLES, tmp_path / "one", params)
    two = train_cross_encoder(base, EXAMPLES, tmp_path / "two", params)
    assert one == tmp_path / "one"
    weights = (one / "model.safetensors").read_bytes()
    assert weights == (two / "model.safetensors").read_bytes()
    other = train_cross_encoder(base, EXAMPLES, tmp_path / "seed1",
                                dataclasses.replace(params, seed=1))
    assert (other / "model.safetensors").read_bytes() != weights
    record = json.loads((one / RECORD).read_text(encoding="utf-8"))
    assert record == {
        "base": str(base), "base_digest": model_digest(base), "examples": 4, "positives": 2,
        "examples_digest": examples_digest(EXAMPLES), "loss": "BCEWithLogitsLoss",
        **params.to_dict(),
    }
    # asked again: returned as is; a directory it did not write is never replaced
    stamp = (one / "model.safetensors").stat().st_mtime_ns
    assert train_cross_encoder(base, EXAMPLES, one, params) == one
    assert (one / "model.safetensors").stat().st_mtime_ns == stamp
    with pytest.raises(ValueError, match="one: exists and is not a cross-encoder"):
        train_cross_encoder(base, EXAMPLES, one, dataclasses.replace(params, epochs=2))
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".")]
    with pytest.raises(TypeError, match="params must be a CrossFineTuneParams"):
        train_cross_encoder(base, EXAMPLES, tmp_path / "x", {"epochs": 1})  # type: ignore[arg-type]


def test_training_separates_evidence_from_negatives(tmp_path):
    from memlab.stages.cross_encoder import CrossEncoderScorer

    base = tiny_bert(tmp_path / "base")
    untrained = CrossFineTuneParams(epochs=1, batch_size=4, learning_rate=1e-9)
    trained = CrossFineTuneParams(epochs=10, batch_size=4, learning_rate=1e-2,
                                  warmup_fraction=0.0)
    before = CrossEncoderScorer(train_cross_encoder(base, EXAMPLES, tmp_path / "b", untrained))
    after = CrossEncoderScorer(train_cross_encoder(base, EXAMPLES, tmp_path / "a", trained))
    cello = ("who plays cello", ["ben plays cello tonight", "carla walks her dog"])
    positive, negative = before.score(*cello)
    assert positive < negative  # the fresh head ranks the dog first
    for query in ("who plays cello", "where does dev work"):
        memories = [m for q, m, _ in EXAMPLES if q == query]
        positive, negative = after.score(query, memories)
        assert positive > negative
