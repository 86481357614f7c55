"""The write policy's batch preparation (``MemoryStore.prepared``): one scrub and one embedder
call for a whole batch, with exactly the writes a store without it makes."""

import numpy as np
import pytest

from memlab.embed import HashingEmbedder
from memlab.memory.records import MemoryInputError
from memlab.memory.store import MemoryStore

T0 = 1_767_225_600.0  # 2026-01-01T00:00:00Z
KEY = "AKIA" + "ABCDEFGHIJKLMNOP"  # an AWS access key id shape, split so no scanner flags it

TEXTS = [
    "Acme deploys the billing api on Kubernetes",
    f"the deploy key is {KEY}",
    "Acme deploys the billing api on Kubernetes",  # a duplicate: deduplicated
    "Redis caches the invoice dashboard",
]


class CountingEmbedder:
    """A hashing embedder that counts its calls and the texts it was given."""

    def __init__(self, fail: bool = False) -> None:
        self.inner = HashingEmbedder(dim=16)
        self.calls: list[list[str]] = []
        self.fail = fail

    def embed(self, texts):
        self.calls.append(list(texts))
        if self.fail and len(texts) > 1:
            raise RuntimeError("batch refused")
        return self.inner.embed(texts)


def _write(store: MemoryStore, texts) -> list:
    return [store.store(t, "event", source_agent="atlas", now=T0 + i) for i, t in enumerate(texts)]


def test_prepared_writes_equal_plain_writes_with_one_embedder_call():
    plain_embedder, batch_embedder = CountingEmbedder(), CountingEmbedder()
    plain = MemoryStore(embedder=plain_embedder)
    batched = MemoryStore(embedder=batch_embedder)
    expected = _write(plain, TEXTS)
    with batched.batch(), batched.prepared(TEXTS):
        got = _write(batched, TEXTS)
    assert got == expected
    assert [r.action for r in got] == ["created", "created", "deduplicated", "created"]
    assert got[1].redactions == 1
    assert batched.texts == plain.texts
    assert "[REDACTED:" in batched.texts[1] and KEY not in batched.texts[1]
    np.testing.assert_array_equal(batched.vectors.matrix, plain.vectors.matrix)
    # one call for the three distinct texts, scrubbed before the embedder sees them
    assert len(batch_embedder.calls) == 1
    assert len(batch_embedder.calls[0]) == 3
    assert batch_embedder.calls[0][1] == batched.texts[1]
    # without the block: one call per created memory
    assert len(plain_embedder.calls) == 3


def test_a_bad_text_in_a_prepared_batch_fails_alone_with_the_plain_error():
    store = MemoryStore(embedder=CountingEmbedder())
    with store.batch(), store.prepared(["fine text", "   ", 42]):
        assert store.store("fine text", now=T0).action == "created"
        with pytest.raises(MemoryInputError, match="field 'text' must not be empty"):
            store.store("   ", now=T0 + 1)
        with pytest.raises(TypeError, match="field 'text' must be a string"):
            store.store(42, now=T0 + 2)
    assert store.texts == ["fine text"]


def test_a_failing_batched_embedder_call_falls_back_to_one_call_per_write():
    embedder = CountingEmbedder(fail=True)
    store = MemoryStore(embedder=embedder)
    with store.batch(), store.prepared(TEXTS[:2]):
        _write(store, TEXTS[:2])
    assert [len(c) for c in embedder.calls] == [2, 1, 1]
    assert store.vectors.present.tolist() == [True, True]


def test_the_preparation_ends_with_the_block():
    embedder = CountingEmbedder()
    store = MemoryStore(embedder=embedder)
    with store.prepared(["Acme deploys"]):
        pass
    store.store("Acme deploys", now=T0)
    assert [len(c) for c in embedder.calls] == [1, 1]


def test_fields_scrubbed_once_per_block_give_the_plain_records():
    def write(store):
        return [
            store.store(f"fact {i}", "fact", source_agent="atlas", key=f"deploy {KEY}",
                        now=T0 + i)
            for i in range(2)
        ]

    plain, batched = MemoryStore(), MemoryStore()
    expected = write(plain)
    with batched.batch(), batched.prepared(["fact 0", "fact 1"]):
        got = write(batched)
    assert got == expected
    assert [r.redactions for r in got] == [1, 1]
    assert [r.superseded for r in got] == [None, got[0].id]
    assert batched.get(got[1].id).key == plain.get(expected[1].id).key
    assert KEY not in batched.get(got[1].id).key


# ------------------------------------------------------------ scrubbing adopted from elsewhere
def test_adopted_scrubs_give_the_plain_records_without_scrubbing_again(scrub_calls):
    from memlab.memory.scrub import Scrubber

    maker = MemoryStore()
    scrubs = {t: maker.prepare_text(t) for t in dict.fromkeys(TEXTS)}
    assert scrubs[TEXTS[1]] == ("the deploy key is [REDACTED:api_key]", 1)
    plain, adopting = MemoryStore(), MemoryStore()
    expected = _write(plain, TEXTS)
    assert adopting.adopt_scrubs(scrubs, Scrubber()) is True  # equal parameters
    scrub_calls.clear()
    got = _write(adopting, TEXTS)
    assert got == expected
    assert adopting.texts == plain.texts
    assert not set(scrub_calls) & set(TEXTS)  # no memory text was scrubbed again
    assert scrub_calls == ["atlas"]  # the writing agent's name, once (fields are remembered)


def test_adopted_strings_scrub_fields_and_metadata_without_scrubbing_again(scrub_calls):
    from memlab.memory.scrub import default_scrubber

    maker = MemoryStore()
    metadata = {"ticket": f"rotate {KEY}", "dia_id": "D1:3", "tags": ["ops", "D1:3"]}
    strings = {s: maker.scrubber.scrub(s)
               for s in ["atlas", "ticket", f"rotate {KEY}", "dia_id", "D1:3", "tags", "ops"]}
    assert strings[f"rotate {KEY}"] == ("rotate [REDACTED:api_key]", 1)
    plain, adopting = MemoryStore(), MemoryStore()
    texts = {t: maker.prepare_text(t) for t in TEXTS}
    assert adopting.adopt_scrubs(texts, default_scrubber(), strings) is True
    scrub_calls.clear()
    got = adopting.store(TEXTS[0], "event", source_agent="atlas", metadata=metadata, now=T0)
    assert scrub_calls == []  # text, agent, every metadata key and string: adopted
    want = plain.store(TEXTS[0], "event", source_agent="atlas", metadata=metadata, now=T0)
    assert got.redactions == want.redactions == 1
    assert adopting.get(got.id).metadata == plain.get(want.id).metadata == {
        "ticket": "rotate [REDACTED:api_key]", "dia_id": "D1:3", "tags": ["ops", "D1:3"],
    }
    # a string the log did not name is scrubbed; a credential's key still redacts its value
    scrub_calls.clear()
    rec = adopting.store(TEXTS[3], "event", source_agent="atlas",
                         metadata={"password": "hunter2", "note": "ops"}, now=T0 + 1)
    assert scrub_calls == ["password", "note"]  # "ops" was adopted
    assert adopting.get(rec.id).metadata == {"password": "[REDACTED:password]", "note": "ops"}


def test_scrubs_of_another_scrubber_are_not_adopted():
    from memlab.memory.scrub import Scrubber

    store = MemoryStore()
    lying = {TEXTS[1]: (TEXTS[1], 0)}  # what a scrubber without the key rule would keep
    assert store.adopt_scrubs(lying, Scrubber(entropy=False)) is False
    store.store(TEXTS[1], now=T0)
    assert KEY not in store.texts[0]


def test_adopted_scrubs_still_check_the_length_limit():
    from memlab.memory.scrub import default_scrubber

    store = MemoryStore()
    long = "word " * 10
    store.max_text_chars = 20
    store.adopt_scrubs({long: (long, 0)}, default_scrubber())
    with pytest.raises(MemoryInputError, match="the limit is 20"):
        store.store(long, now=T0)


def test_the_length_limit_holds_for_the_stored_text_after_redaction():
    from memlab.memory.scrub import default_scrubber

    store = MemoryStore()
    store.max_text_chars = 20
    given = "pwd=s3cr3t!Pass"  # 15 characters; stored as "pwd=[REDACTED:password]", 23
    with pytest.raises(
        MemoryInputError,
        match=r"is 23 characters long once its credentials are redacted; the limit is 20",
    ):
        store.store(given, now=T0)
    store.adopt_scrubs({given: ("pwd=[REDACTED:password]", 1)}, default_scrubber())
    with pytest.raises(MemoryInputError, match="once its credentials are redacted"):
        store.store(given, now=T0)
    assert len(store) == 0


def test_a_nested_prepared_block_restores_the_outer_one():
    embedder = CountingEmbedder()
    store = MemoryStore(embedder=embedder)
    with store.prepared(["outer text"]):
        with store.prepared(["inner text"]):
            pass
        store.store("outer text", now=T0)  # still prepared by the outer block: no new call
    assert embedder.calls == [["outer text"], ["inner text"]]
