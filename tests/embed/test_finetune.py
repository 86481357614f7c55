import json
import random
from pathlib import Path

import numpy as np
import pytest

from memlab.datasets.format import load_dataset
from memlab.embed.finetune import (
    FineTuneParams,
    dataset_pairs,
    fine_tune,
    model_dir,
    no_duplicate_batches,
    pairs_digest,
)
from memlab.embed.minilm import default_minilm_path
from memlab.embed.sentence_transformer import SentenceTransformerEmbedder, model_digest

HANDMADE = Path(__file__).resolve().parents[1] / "fixtures" / "handmade"

PAIRS = [
    ("Which city did Ana move to?", "Ana: I finally moved to Lisbon last spring."),
    ("What instrument does Ben play?", "Ben: Cello practice again tonight, my fingers hurt."),
    ("What is Carla's dog called?", "Carla: Biscuit chewed my shoes, that dog!"),
    ("Where does Dev work?", "Dev: First week at the bakery on Main Street went well."),
]


def test_batches_hold_no_text_twice_and_every_pair_once():
    # m1 is relevant to three queries: one of them per batch. With batches of 3, the first
    # takes one m1 pair and the m2 and m3 pairs whatever the order; the two m1 pairs left can
    # only form batches of one (no negative), which are dropped.
    pairs = [("q1", "m1"), ("q2", "m1"), ("q3", "m2"), ("q4", "m3"), ("q5", "m1")]
    for seed in range(5):
        batches = no_duplicate_batches(pairs, 3, random.Random(seed))
        assert len(batches) == 1
        assert sorted(pairs[i][1] for i in batches[0]) == ["m1", "m2", "m3"]
    # distinct texts, batches of 2: two full batches, the fifth pair alone is dropped
    distinct = [(f"q{i}", f"m{i}") for i in range(5)]
    batches = no_duplicate_batches(distinct, 2, random.Random(0))
    assert [len(b) for b in batches] == [2, 2]
    dealt = [i for b in batches for i in b]
    assert len(set(dealt)) == 4 and set(dealt) < set(range(5))
    # the same seed deals the same batches
    assert no_duplicate_batches(distinct, 2, random.Random(0)) == batches


def test_pairs_that_all_share_one_memory_have_no_negatives():
    pairs = [("q1", "m"), ("q2", "m"), ("q3", "m")]
    assert no_duplicate_batches(pairs, 32, random.Random(0)) == []


def test_pairs_digest_follows_text_and_order():
    a = pairs_digest(PAIRS)
    assert a == pairs_digest(list(PAIRS))
    assert a != pairs_digest(PAIRS[::-1])
    assert a != pairs_digest([("ab", "c"), *PAIRS[1:]])


@pytest.mark.parametrize(
    ("kwargs", "error", "message"),
    [
        ({"epochs": 0}, ValueError, "epochs must be >= 1, got 0"),
        ({"batch_size": 1}, ValueError, "batch_size must be >= 2, got 1"),
        ({"epochs": 1.5}, TypeError, "epochs must be an int"),
        ({"learning_rate": 0.0}, ValueError, "learning_rate must be a finite number > 0"),
        ({"scale": float("nan")}, ValueError, "scale must be a finite number > 0"),
        ({"seed": True}, TypeError, "seed must be an int"),
    ],
)
def test_constants_are_checked(kwargs, error, message):
    with pytest.raises(error, match=message):
        FineTuneParams(**kwargs).check()


def test_model_dir_names_sentence_transformer_directories(tmp_path):
    assert model_dir("minilm") == default_minilm_path()
    assert model_dir(f"path:{tmp_path}") == tmp_path
    with pytest.raises(ValueError, match="cannot fine-tune embedder 'hashing'"):
        model_dir("hashing")


def test_bad_pairs_are_refused_before_training(tmp_path):
    with pytest.raises(ValueError, match="at least 2 pairs, got 1"):
        fine_tune(default_minilm_path(), PAIRS[:1], tmp_path / "m")
    with pytest.raises(ValueError, match=r"training pair 1: expected \(query, memory\)"):
        fine_tune(default_minilm_path(), [PAIRS[0], ("q", " ")], tmp_path / "m")
    assert not (tmp_path / "m").exists()


def _cos(model: Path, a: str, b: str) -> float:
    va, vb = SentenceTransformerEmbedder(model).embed([a, b])
    return float(np.dot(va, vb))


def test_fine_tuning_is_deterministic_and_pulls_queries_to_their_memories(tmp_path):
    params = FineTuneParams(epochs=3, learning_rate=1e-4, batch_size=4)
    base = default_minilm_path()
    one = fine_tune(base, PAIRS, tmp_path / "one", params)
    two = fine_tune(base, PAIRS, tmp_path / "two", params)
    assert one == tmp_path / "one"
    # the same pairs, base and constants: the same weights, other than the base's
    assert (one / "model.safetensors").read_bytes() == (two / "model.safetensors").read_bytes()
    assert model_digest(one) == model_digest(two) != model_digest(base)
    record = json.loads((one / "finetune.json").read_text(encoding="utf-8"))
    assert record == {
        "base": str(base), "base_digest": model_digest(base), "pairs": 4,
        "pairs_digest": pairs_digest(PAIRS), "loss": "MultipleNegativesRankingLoss",
        "epochs": 3, "learning_rate": 1e-4, "batch_size": 4, "scale": 20.0, "seed": 0,
    }
    q, m = PAIRS[1]
    assert _cos(one, q, m) > _cos(base, q, m)
    # asked again: returned as is, not trained again
    stamp = (one / "model.safetensors").stat().st_mtime_ns
    assert fine_tune(base, PAIRS, one, params) == one
    assert (one / "model.safetensors").stat().st_mtime_ns == stamp


def test_an_existing_path_is_never_replaced(tmp_path):
    mine = tmp_path / "notes"
    mine.mkdir()
    (mine / "todo.txt").write_text("keep me", encoding="utf-8")
    with pytest.raises(ValueError, match="notes: exists and is not a model fine-tuned"):
        fine_tune(default_minilm_path(), PAIRS, mine, FineTuneParams(epochs=1))
    assert [p.name for p in mine.iterdir()] == ["todo.txt"]
    # a model tuned with other constants is not replaced either
    out = fine_tune(default_minilm_path(), PAIRS, tmp_path / "m", FineTuneParams(epochs=1))
    with pytest.raises(ValueError, match="m: exists and is not a model fine-tuned"):
        fine_tune(default_minilm_path(), PAIRS, out, FineTuneParams(epochs=2))
    assert json.loads((out / "finetune.json").read_text(encoding="utf-8"))["epochs"] == 1
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".")]


def test_dataset_pairs_are_judged_memories_as_a_store_holds_them():
    ds = load_dataset(HANDMADE)
    pairs = dataset_pairs(ds, clients=["globex"])
    assert pairs == [
        ("What happened in INC-1002?", "INC-1002: `claims-engine` timed out."),
        # the credential is scrubbed, as the store scrubs it
        ("How does Globex staging reach its database?",
         "Globex staging database: postgres://app:[REDACTED:password]@db.globex.io:5432/app"),
    ]
    assert len(dataset_pairs(ds)) == sum(len(q.relevant) for q in ds.queries)
    assert dataset_pairs(ds, clients=["globex"], exclude_tags=["credential"]) == pairs[:1]
    with pytest.raises(ValueError, match="no query of client 'globx'"):
        dataset_pairs(ds, clients=["globx"])
