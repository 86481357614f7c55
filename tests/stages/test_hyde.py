"""Tests for memlab.stages.hyde (Gao et al. 2022)."""

from __future__ import annotations

import numpy as np
import pytest

from memlab.embed.hashing import HashingEmbedder
from memlab.memory.store import MemoryStore
from memlab.stages.base import QueryContext, empty_candidates
from memlab.stages.dense import Dense
from memlab.stages.hyde import HyDE


class FakeGenerator:
    """Answers with a passage naming the seed; records every request."""

    model_id = "fake"

    def __init__(self, blank_seeds: tuple[int, ...] = ()) -> None:
        self.calls: list[tuple[str, int, float, int]] = []
        self.blank_seeds = blank_seeds

    def generate(
        self, prompt: str, *, max_new_tokens: int = 128, temperature: float = 0.0, seed: int = 0
    ) -> str:
        self.calls.append((prompt, max_new_tokens, temperature, seed))
        return " " if seed in self.blank_seeds else f"passage {seed} about Astro hosting"


def _ctx(generator: object | None, now: float, text: str = "Where is Acme hosted?") -> QueryContext:
    return QueryContext(
        qid="q", text=text, store=MemoryStore(), now=now,
        embedder=HashingEmbedder(dim=64, seed=0), generator=generator,
    )


def _normalised_mean(rows: np.ndarray) -> np.ndarray:
    mean = rows.astype(np.float64).mean(axis=0)
    return mean / np.linalg.norm(mean)


def test_vector_is_the_normalised_mean(now: float) -> None:
    gen = FakeGenerator()
    ctx = _ctx(gen, now)
    frame = empty_candidates()
    out = HyDE(n_documents=3, seed=10).transform(frame, ctx)
    assert out is frame
    emb = HashingEmbedder(dim=64, seed=0)
    want = _normalised_mean(
        emb.embed([
            "passage 10 about Astro hosting",
            "passage 11 about Astro hosting",
            "passage 12 about Astro hosting",
            "Where is Acme hosted?",
        ])
    )
    np.testing.assert_allclose(ctx.query_vector, want, atol=1e-6)
    assert ctx.vector() is ctx.query_vector
    prompt = (
        "Please write a passage to answer the question.\nQuestion: Where is Acme hosted?\n"
        "Passage:"
    )
    assert gen.calls == [(prompt, 96, 0.7, 10), (prompt, 96, 0.7, 11), (prompt, 96, 0.7, 12)]
    assert ctx.trace["hyde_documents"] == [f"passage {s} about Astro hosting" for s in (10, 11, 12)]


def test_without_the_query_and_blank_documents(now: float) -> None:
    ctx = _ctx(FakeGenerator(blank_seeds=(1,)), now)
    HyDE(n_documents=3, include_query=False).transform(empty_candidates(), ctx)
    emb = HashingEmbedder(dim=64, seed=0)
    want = _normalised_mean(
        emb.embed(["passage 0 about Astro hosting", "passage 2 about Astro hosting"])
    )
    np.testing.assert_allclose(ctx.query_vector, want, atol=1e-6)

    blank = _ctx(FakeGenerator(blank_seeds=(0,)), now)
    with pytest.raises(ValueError, match="every generated document is blank"):
        HyDE(n_documents=1, include_query=False).transform(empty_candidates(), blank)


def test_prompts_for_recording() -> None:
    stage = HyDE(n_documents=2, prompt_template="Answer: {query}", seed=5)
    assert stage.prompts("why?") == [("Answer: why?", 5), ("Answer: why?", 6)]
    with pytest.raises(ValueError, match="placeholder"):
        HyDE(prompt_template="no placeholder").prompts("q")


def test_generations_are_cached_in_the_context(now: float) -> None:
    gen = FakeGenerator()
    ctx = _ctx(gen, now)
    HyDE(n_documents=2).transform(empty_candidates(), ctx)
    first = ctx.query_vector.copy()
    ctx.query_vector = None
    HyDE(n_documents=2).transform(empty_candidates(), ctx)
    assert len(gen.calls) == 2
    np.testing.assert_array_equal(ctx.query_vector, first)


def test_needs_a_generator(now: float) -> None:
    with pytest.raises(ValueError, match="no generator"):
        HyDE().transform(empty_candidates(), _ctx(None, now))


def test_dense_uses_the_hyde_vector(now: float) -> None:
    store = MemoryStore(embedder=HashingEmbedder(dim=64, seed=0))
    store.store("Acme moved to Astro hosting on Netlify", "fact", source_agent="t",
                now=now - 10, id="astro")
    store.store("Where is the Acme office?", "event", source_agent="t", now=now - 10, id="office")
    ctx = QueryContext(
        qid="q", text="Where is Acme hosted?", store=store, now=now,
        embedder=store.embedder, generator=FakeGenerator(),
    )
    plain = Dense(top_k=1).transform(empty_candidates(), ctx)
    pipe = HyDE(n_documents=4, include_query=False) >> Dense(top_k=1)
    hyde = pipe.run(ctx)
    assert plain["mem_id"].to_list() == ["office"]
    assert hyde["mem_id"].to_list() == ["astro"]
