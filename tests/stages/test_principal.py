"""Every stage respects the query's principal: no memory of an unreadable namespace comes out.

The store holds the same facts about Acme in four namespaces, linked through shared entities
and one conversation stream, so graph expansion, neighbours, LIF, MaxP, BM25 per-scope indexes,
chromadb and CRAG's fallbacks all have a path to the private memories if they ignored it.
"""

from __future__ import annotations

import numpy as np
import pytest

from memlab.embed import HashingEmbedder
from memlab.memory.scopes import Principal
from memlab.memory.store import MemoryStore
from memlab.pipeline import Pipeline, load_pipeline
from memlab.stages.base import QueryContext
from memlab.stages.bm25 import BM25
from memlab.stages.crag import CRAG
from memlab.stages.dense import Dense
from memlab.stages.graph import Graph
from memlab.stages.lif import LIF
from memlab.stages.maxp import MaxP
from memlab.stages.neighbors import Neighbors

SCOPES = ("team", "agent:atlas", "agent:hera", "project:apollo", "project:zeus")
ATLAS = Principal.of("atlas", ["apollo"])
READABLE = {"team", "agent:atlas", "project:apollo"}
TOPICS = ("billing", "schema", "outage", "pricing", "search")


@pytest.fixture(scope="module")
def store() -> MemoryStore:
    s = MemoryStore(embedder=HashingEmbedder(dim=64))
    t = 1_000_000.0
    for i in range(10):
        for scope in SCOPES:
            t += 60.0
            s.store(
                f"Acme {TOPICS[i % 5]} on PostgreSQL and Vercel: deploy note {i} for "
                f"{scope.replace(':', ' ')}. "
                f"Jean at Acme confirmed it.",
                "event", client_id="acme", scope=scope, now=t, source_agent="Jean",
            )
    s.relate("Acme", "uses", "PostgreSQL", now=t)
    return s


def _ctx(store: MemoryStore, principal: Principal | None = ATLAS) -> QueryContext:
    return QueryContext(
        qid="q", text="Acme billing PostgreSQL deploy Jean", store=store, now=store.get(
            store.ids[-1]).created_at + 1, client_id="acme", embedder=store.embedder,
        principal=principal,
    )


def _scopes(store: MemoryStore, frame) -> set[str]:
    return {store.get(m).scope for m in frame["mem_id"].to_list()}


@pytest.mark.parametrize("name", ["bm25", "dense", "graph", "rrf", "hybrid", "conversational"])
def test_shipped_pipelines(store: MemoryStore, name: str) -> None:
    out = load_pipeline(name).run(_ctx(store))
    assert out.height > 0
    assert _scopes(store, out) <= READABLE
    human = load_pipeline(name).run(_ctx(store, None))
    assert _scopes(store, human) - READABLE  # the same pipeline reaches them for a human


@pytest.mark.parametrize(
    "pipeline",
    [
        Pipeline([("bm25", BM25(statistics="scope", top_k=None))]),
        Pipeline([("dense", Dense(backend="chroma", top_k=50))]),
        Pipeline([("graph", Graph(top_k=None))]),
        Pipeline([("maxp", MaxP(top_k=None))]),
        Pipeline([("dense", Dense(top_k=3)), ("neighbors", Neighbors(add_missing=True,
                                                                     window=3))]),
        Pipeline([("dense", Dense(top_k=3)), ("lif", LIF(top_k=None))]),
        Pipeline([("dense", Dense(top_k=3)),
                  ("crag", CRAG(evaluator="similarity", upper=1.0, lower=1.0,
                                fallback="relax"))]),
        Pipeline([("dense", Dense(top_k=3)),
                  ("crag", CRAG(evaluator="similarity", upper=1.0, lower=1.0,
                                fallback="graph"))]),
    ],
    ids=["bm25-scope", "chroma", "graph", "maxp", "neighbors", "lif", "crag-relax", "crag-graph"],
)
def test_expanding_stages(store: MemoryStore, pipeline: Pipeline) -> None:
    out = pipeline.run(_ctx(store))
    assert out.height > 0
    assert _scopes(store, out) <= READABLE


def test_bm25_scope_statistics_cover_only_readable_namespaces(store: MemoryStore) -> None:
    stage = BM25(statistics="scope", top_k=None)
    stage.transform(None, _ctx(store))
    index = stage.indexes_[("acme", ATLAS)]
    assert {store.record_at(int(r)).scope for r in index.rows} == READABLE
    assert len(index.rows) == 30
    assert np.array_equal(index.rows, np.sort(index.rows))


@pytest.mark.parametrize("statistics", ["store", "scope"])
def test_an_agents_bm25_scores_ignore_what_it_cannot_read(statistics: str) -> None:
    # Atlas's one memory holds "merger"; hera writes it into 0 or 5 private memories. Were
    # hera's counted, idf(merger) and so atlas's score would tell atlas how many there are.
    def atlas_score(hera_private: int) -> float:
        s = MemoryStore(embedder=HashingEmbedder(dim=64))
        s.store("The merger closes Friday", "event", client_id="acme", scope="agent:atlas",
                now=1.0, source_agent="atlas")
        s.store("Lunch is at noon", "event", client_id="acme", scope="agent:atlas",
                now=2.0, source_agent="atlas")
        s.store("Badges renew in May", "event", client_id="acme", scope="agent:atlas",
                now=2.5, source_agent="atlas")
        for i in range(hera_private):
            s.store(f"merger note {i}", "event", client_id="acme", scope="agent:hera",
                    now=3.0 + i, source_agent="hera")
        ctx = QueryContext(qid="q", text="merger", store=s, now=100.0, client_id="acme",
                           principal=Principal.of("atlas"))
        out = BM25(statistics=statistics, k1=1.5, b=0.75).transform(None, ctx)
        assert _scopes(s, out) == {"agent:atlas"}
        return out["score"][0]

    # Over atlas's three memories idf(merger) = ln((3 - 1 + 0.5) / (1 + 0.5)) > 0; counting
    # hera's five as well it would be ln((8 - 6 + 0.5) / (6 + 0.5)) < 0 (floored at epsilon ×
    # the mean idf): a different score. Atlas sees the same corpus either way.
    assert atlas_score(5) == atlas_score(0) > 0
