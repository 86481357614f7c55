import numpy as np
import pytest

from memlab.embed import HashingEmbedder
from memlab.memory.conflicts import (
    GeneratorNLIDetector,
    LexicalDetector,
    contradiction_candidates,
    make_detector,
)
from memlab.memory.store import MemoryStore

T0 = 1_767_225_600.0


@pytest.mark.parametrize(
    ("a", "b", "rule"),
    [
        ("Acme's checkout supports guest orders", "Acme's checkout no longer supports guest orders",
         "negation"),
        ("Dark mode is enabled for Acme's dashboard", "Dark mode is disabled for Acme's dashboard",
         "antonym:enabled/disabled"),
        ("The API rate limit for Acme is 1000 requests per minute",
         "The API rate limit for Acme is 500 requests per minute", "value"),
    ],
)
def test_lexical_rules_fire(a, b, rule):
    verdict = LexicalDetector().judge(a, b)
    assert verdict.contradicts and verdict.rule == rule
    assert LexicalDetector().judge(b, a).contradicts


def test_lexical_keeps_compatible_and_unrelated_pairs():
    det = LexicalDetector()
    assert not det.judge("Acme uses Postgres 15", "Acme uses Postgres 15 in production").contradicts
    assert det.judge("Lunch is at noon", "The deploy failed on Friday").rule == "unrelated"


class Fake:
    model_id = "fake"

    def __init__(self, answer):
        self.answer = answer
        self.prompts = []

    def generate(self, prompt, *, max_new_tokens=128, temperature=0.0, seed=0):
        self.prompts.append(prompt)
        return self.answer


def test_nli_detector_reads_the_first_word():
    gen = Fake(" Yes, they do.")
    assert GeneratorNLIDetector(gen).judge("a", "b").contradicts
    assert "Statement A: a\nStatement B: b" in gen.prompts[0]
    assert not GeneratorNLIDetector(Fake("no")).judge("a", "b").contradicts
    sym = Fake("yes")
    assert GeneratorNLIDetector(sym, symmetric=True).judge("a", "b").contradicts
    assert len(sym.prompts) == 2


def test_make_detector():
    assert isinstance(make_detector("lexical"), LexicalDetector)
    with pytest.raises(ValueError, match="needs a generator"):
        make_detector("nli")
    with pytest.raises(ValueError, match="unknown conflict detector 'x'"):
        make_detector("x")


def test_candidates_stay_in_the_client_and_skip_events():
    store = MemoryStore(embedder=HashingEmbedder(dim=64))
    a = store.store("Acme storefront runs on Next.js", "fact", client_id="acme", now=T0).id
    store.store("Acme storefront runs on Next.js", "fact", client_id="other", now=T0)
    store.store("Acme storefront runs on Next.js today", "event", client_id="acme", now=T0)
    b = store.store("Acme storefront runs on Remix", "fact", client_id="acme", now=T0 + 1).id
    found = contradiction_candidates(store, b, threshold=0.0)
    assert [m for m, _ in found] == [a]
    assert np.isclose(found[0][1], store.vectors.similarities(store.vectors.get(0))[3])
    assert contradiction_candidates(store, b, threshold=1.01) == []


def test_candidates_are_the_clients_own_memories_in_its_scope():
    # A client reads 'global' memories, but they belong to every client: one client's write
    # must not find them as contradictions (a policy would retire them for everyone), nor
    # memories of its other scopes.
    store = MemoryStore(embedder=HashingEmbedder(dim=64))
    text = "The shared brain stores memories in SQLite"
    store.store(text, "fact", client_id="global", now=T0)
    store.store(text, "fact", client_id="acme", scope="project:web", now=T0)
    own = store.store(text, "fact", client_id="acme", key="db", now=T0).id
    new = store.store(text + " no longer", "fact", client_id="acme", now=T0 + 1).id
    assert [m for m, _ in contradiction_candidates(store, new, threshold=0.0)] == [own]
    glob = store.store(text + " today", "fact", client_id="global", now=T0 + 2).id
    found = [m for m, _ in contradiction_candidates(store, glob, threshold=0.0)]
    assert [store.get(m).client_id for m in found] == ["global"]
