"""Tests for memlab.memory.merge (LLM-backed merging for consolidation)."""

from __future__ import annotations

import pytest

from memlab.embed import HashingEmbedder
from memlab.memory.consolidate import Consolidator
from memlab.memory.merge import DEFAULT_MERGE_PROMPT, ClusterMerger, clean_fact
from memlab.memory.store import MemoryStore
from memlab.timeutil import parse_ts

T0 = parse_ts("2026-03-01T00:00:00Z")

# HashingEmbedder(dim=256) cosines: texts 0-1 0.60, texts 2-3 0.62, every other pair <= 0.18
TEXTS = [
    "Acme billing runs on Postgres",
    "Acme billing uses Postgres 15",
    "Globex posts two blog articles weekly",
    "Globex publishes two blog posts every week",
    "Team meeting moved to Thursday",
]


class ScriptedGenerator:
    """Answers prompts in order from a script and keeps the prompts it was given."""

    model_id = "scripted"

    def __init__(self, answers: list[str]) -> None:
        self.answers = list(answers)
        self.prompts: list[str] = []

    def generate(self, prompt: str, *, max_new_tokens: int = 128, temperature: float = 0.0,
                 seed: int = 0) -> str:
        self.prompts.append(prompt)
        return self.answers.pop(0)


def _merger(answers: list[str], **kw: object) -> ClusterMerger:
    return ClusterMerger(ScriptedGenerator(answers), HashingEmbedder(dim=256), **kw)


def test_clusters_cut_at_the_similarity_threshold() -> None:
    assert _merger([], similarity_threshold=0.5).clusters(TEXTS) == [[0, 1], [2, 3]]
    assert _merger([], similarity_threshold=0.61).clusters(TEXTS) == [[2, 3]]
    assert _merger([], similarity_threshold=0.7).clusters(TEXTS) == []
    assert _merger([], similarity_threshold=0.5, min_cluster_size=3).clusters(TEXTS) == []
    assert _merger([]).clusters(TEXTS[:1]) == []


def test_merge_prompts_once_per_cluster_and_cleans_the_answer() -> None:
    merger = _merger(
        ['1. "Acme billing runs on Postgres 15."\nSecond line', "\n\n"], similarity_threshold=0.5
    )
    out = merger.merge(TEXTS)
    assert out == [("Acme billing runs on Postgres 15.", [0, 1])]  # empty answer: no fact
    assert merger.last_clusters_ == [[0, 1]]
    prompts = merger.generator.prompts
    assert prompts[0] == DEFAULT_MERGE_PROMPT.format(
        memories="- Acme billing runs on Postgres\n- Acme billing uses Postgres 15"
    )
    assert len(prompts) == 2 and "- Globex posts two blog articles weekly" in prompts[1]


def test_max_cluster_size_caps_the_prompt() -> None:
    merger = _merger(["Acme billing: Postgres"], similarity_threshold=0.5, max_cluster_size=2)
    texts = [*TEXTS[:2], "Acme billing runs on Postgres 15 now"]
    clusters = merger.clusters(texts)
    assert clusters == [[0, 1, 2]]
    assert merger.merge(texts) == [("Acme billing: Postgres", [0, 1])]


def test_clean_fact() -> None:
    assert clean_fact("  - Acme uses Postgres.  ") == "Acme uses Postgres."
    assert clean_fact("\n* “Quoted fact”\nmore") == "Quoted fact"
    assert clean_fact("2) Second item") == "Second item"
    assert clean_fact(" \n - \n") == ""


@pytest.mark.parametrize(
    ("kw", "message"),
    [
        ({"similarity_threshold": 0.0}, "similarity_threshold must lie in"),
        ({"min_cluster_size": 1}, "min_cluster_size must be at least 2"),
        ({"max_cluster_size": 1}, "max_cluster_size must be at least min_cluster_size"),
        ({"prompt_template": "merge these"}, "needs a {memories} field"),
    ],
)
def test_bad_parameters_are_rejected(kw: dict[str, object], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        _merger([], **kw).merge(TEXTS)


def test_consolidation_stores_the_merged_fact_and_supersedes_its_sources() -> None:
    embedder = HashingEmbedder(dim=256)
    store = MemoryStore(embedder=embedder)
    ids = [
        store.store(text, "event", client_id="acme", source_agent="a", now=T0 + i).id
        for i, text in enumerate(TEXTS)
    ]
    merger = ClusterMerger(
        ScriptedGenerator(["Acme billing runs on Postgres 15", "Globex blogs twice a week"]),
        embedder,
        similarity_threshold=0.5,
    )
    report = Consolidator(merger=merger).run(store, now=T0 + 100)
    assert len(report.merged) == 2
    first = store.get(report.merged[0])
    assert (first.text, first.type, first.source_agent) == (
        "Acme billing runs on Postgres 15", "fact", "consolidation-engine",
    )
    assert first.metadata["merged_from"] == ids[:2]
    for sid in ids[:2]:
        assert store.get(sid).superseded_by == first.id and not store.get(sid).active
    assert store.get(ids[4]).active


@pytest.mark.parametrize("seed", range(6))
def test_clusters_equal_sklearns_agglomerative_clustering(seed: int) -> None:
    """The partition is sklearn's average-linkage cosine clustering cut at the same threshold
    (memlab builds the tree with scipy, which sklearn itself calls)."""
    import numpy as np
    from sklearn.cluster import AgglomerativeClustering

    rng = np.random.default_rng(seed)
    centres = rng.normal(size=(4, 16))
    vecs = centres[rng.integers(0, 4, size=40)] + rng.normal(scale=0.6, size=(40, 16))

    class Fixed:
        def embed(self, texts: list[str]) -> np.ndarray:
            return vecs[[int(t) for t in texts]]

    texts = [str(i) for i in range(40)]
    for threshold in (0.3, 0.6, 0.8):
        labels = AgglomerativeClustering(
            n_clusters=None, metric="cosine", linkage="average", distance_threshold=1 - threshold
        ).fit_predict(vecs)
        groups: dict[int, list[int]] = {}
        for i, label in enumerate(labels):
            groups.setdefault(int(label), []).append(i)
        expected = sorted((g for g in groups.values() if len(g) >= 2), key=lambda g: g[0])
        merger = ClusterMerger(ScriptedGenerator([]), Fixed(), similarity_threshold=threshold)
        assert merger.clusters(texts) == expected


def test_a_zero_vector_joins_no_cluster() -> None:
    import numpy as np

    vecs = np.array([[1.0, 0.0], [0.99, 0.1], [0.0, 0.0], [0.0, 1.0]])

    class Fixed:
        def embed(self, texts: list[str]) -> np.ndarray:
            return vecs[[int(t) for t in texts]]

    merger = ClusterMerger(ScriptedGenerator([]), Fixed(), similarity_threshold=0.5)
    assert merger.clusters(["0", "1", "2", "3"]) == [[0, 1]]
