"""Every stage respects the query's principal: no memory of an unreadable namespace comes out.

The store holds the same facts about Acme in four namespaces, linked through shared entities
and one conversation stream, so graph expansion, neighbours, LIF, MaxP, BM25 per-scope indexes,
chromadb and CRAG's fallbacks all have a path to the private memories if they ignored it.
"""

from __future__ import annotations

import numpy as np
import polars as pl
import pytest

from memlab.embed import HashingEmbedder
from memlab.memory.scopes import Principal
from memlab.memory.store import MemoryStore
from memlab.pipeline import Pipeline, load_pipeline
from memlab.stages.base import QueryContext, candidates_from_rows
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


def _graph_world(hera_writes: str) -> MemoryStore:
    """Atlas's two memories (one names Vercel, one PostgreSQL; each also links the client
    ``acme`` and the agent ``atlas``), and what hera adds privately: nothing, a memory naming
    Vercel with PostgreSQL, or the relation Vercel uses PostgreSQL."""
    s = MemoryStore(embedder=HashingEmbedder(dim=64))
    s.store("Vercel deploys run nightly", "event", client_id="acme", scope="agent:atlas",
            now=1.0, source_agent="atlas")
    s.store("PostgreSQL backups run nightly", "event", client_id="acme", scope="agent:atlas",
            now=2.0, source_agent="atlas")
    if hera_writes == "memory":
        s.store("Vercel now talks to PostgreSQL", "event", client_id="acme",
                scope="agent:hera", now=3.0, source_agent="hera")
    elif hera_writes == "relation":
        s.relate("Vercel", "uses", "PostgreSQL", now=3.0, scope="agent:hera")
    return s


def _graph_hits(s: MemoryStore, principal: Principal | None) -> dict[str, float]:
    ctx = QueryContext(qid="q", text="Vercel", store=s, now=100.0, client_id="acme",
                       principal=principal)
    out = Graph(top_k=None).transform(None, ctx)
    return {s.get(m).text: round(v, 12) for m, v in zip(out["mem_id"], out["score"],
                                                         strict=True)}


# The seed Vercel has activation 1.0; a co-occurrence of strength c carries 0.8 × min(c/5, 1),
# a typed relation of strength r 0.8 × 2.0 (causal boost) × min(r/5, 1); a memory sums the
# activations of its entities. Atlas alone: acme and atlas (each named with Vercel once) get
# 0.16; PostgreSQL, two hops away, would get 0.16 × 0.8 × 1/5 < 0.1 and is not reached.
ALONE = {"Vercel deploys run nightly": 1.32, "PostgreSQL backups run nightly": 0.32}


@pytest.mark.parametrize("hera_writes", ["memory", "relation"])
def test_an_agents_graph_ranking_ignores_what_it_cannot_read(hera_writes: str) -> None:
    atlas = Principal.of("atlas")
    assert _graph_hits(_graph_world("nothing"), atlas) == ALONE
    assert _graph_hits(_graph_world(hera_writes), atlas) == ALONE
    human = _graph_hits(_graph_world(hera_writes), None)
    if hera_writes == "memory":
        # acme now named with Vercel twice (0.32), hera and PostgreSQL once (0.16 each)
        assert human == {"Vercel deploys run nightly": 1.48,
                         "PostgreSQL backups run nightly": 0.64,
                         "Vercel now talks to PostgreSQL": 1.64}
    else:
        # PostgreSQL through the relation: 0.8 × 2.0 × 1/5 = 0.32
        assert human == {"Vercel deploys run nightly": 1.32,
                         "PostgreSQL backups run nightly": 0.64}


def test_an_agent_counts_the_relation_strength_written_where_it_reads() -> None:
    s = _graph_world("relation")  # Vercel uses PostgreSQL, once in agent:hera
    s.relate("Vercel", "uses", "PostgreSQL", now=4.0, scope="team")  # and once in team
    # atlas reads team's 1: PostgreSQL 0.8 × 2.0 × 1/5 = 0.32; a human the graph's 2: 0.64
    assert _graph_hits(s, Principal.of("atlas"))["PostgreSQL backups run nightly"] == 0.64
    assert _graph_hits(s, None)["PostgreSQL backups run nightly"] == 0.96


def test_an_agents_lif_synapses_are_its_view_of_the_graph(monkeypatch) -> None:
    seen: list[np.ndarray] = []
    simulate = LIF.simulate

    def spy(self, graph, current):
        seen.append(graph.adjacency().toarray())
        return simulate(self, graph, current)

    monkeypatch.setattr(LIF, "simulate", spy)
    s = _graph_world("memory")
    ctx = QueryContext(qid="q", text="Vercel deploys", store=s, now=100.0, client_id="acme",
                       embedder=s.embedder, principal=Principal.of("atlas"))
    Pipeline([("dense", Dense(top_k=1)), ("lif", LIF(top_k=None))]).run(ctx)
    # Entities in order of first mention: acme 0, atlas 1, Vercel 2, PostgreSQL 3, hera 4.
    # Atlas's two memories name acme and atlas together twice, each of them with Vercel once
    # and with PostgreSQL once; hera's memory (Vercel with PostgreSQL, hera) is not counted.
    assert [e.name for e in map(s.graph.entity, range(5))] == [
        "acme", "atlas", "Vercel", "PostgreSQL", "hera"]
    assert seen[0].tolist() == [[0, 2, 1, 1, 0], [2, 0, 1, 1, 0], [1, 1, 0, 0, 0],
                                [1, 1, 0, 0, 0], [0, 0, 0, 0, 0]]


@pytest.mark.parametrize("hera_between", [False, True])
def test_an_agents_neighbours_skip_what_it_cannot_read(hera_between: bool) -> None:
    s = MemoryStore(embedder=HashingEmbedder(dim=64))
    s.store("Question: where do backups go?", "event", client_id="acme", scope="agent:atlas",
            now=10.0, source_agent="atlas")
    if hera_between:  # another agent's private note, written between atlas's two turns
        s.store("Private note", "event", client_id="acme", scope="agent:hera", now=11.0,
                source_agent="hera")
    s.store("Answer: to the cold bucket", "event", client_id="acme", scope="agent:atlas",
            now=12.0, source_agent="atlas")
    ctx = QueryContext(qid="q", text="backups", store=s, now=100.0, client_id="acme",
                       principal=Principal.of("atlas"))
    q_row = s.rows_of(pl.Series([s.ids[0]]))[0]
    frame = candidates_from_rows(ctx, np.asarray([q_row]), np.asarray([1.0]), "dense_score")
    out = Neighbors(weight=0.5, window=1, add_missing=True).transform(frame, ctx)
    # the answer is atlas's next turn either way: it enters with 0.5 × 1.0
    assert dict(zip([s.get(m).text for m in out["mem_id"]], out["score"], strict=True)) == {
        "Question: where do backups go?": 1.0, "Answer: to the cold bucket": 0.5}


@pytest.mark.parametrize("atlas_in_the_pause", [False, True])
def test_an_agents_sessions_ignore_what_it_cannot_read(atlas_in_the_pause: bool) -> None:
    from memlab.stages.cluster_smoothing import session_ids

    s = MemoryStore(embedder=HashingEmbedder(dim=64))
    # hera writes at 0 s and 5,000 s: two sessions with a one-hour gap
    s.store("First", "event", client_id="acme", scope="agent:hera", now=1_000.0,
            source_agent="hera")
    if atlas_in_the_pause:  # atlas's private note half-way: 2,500 s from each
        s.store("Private", "event", client_id="acme", scope="agent:atlas", now=3_500.0,
                source_agent="atlas")
    s.store("Second", "event", client_id="acme", scope="agent:hera", now=6_000.0,
            source_agent="hera")
    ctx = QueryContext(qid="q", text="x", store=s, now=9_000.0, client_id="acme",
                       principal=Principal.of("hera"))
    ids = session_ids(ctx, 3600.0)
    first, second = (s.rows_of(pl.Series([s.ids[i]]))[0]
                     for i in ((0, 2) if atlas_in_the_pause else (0, 1)))
    assert [ids[first], ids[second]] == [0, 1]  # two sessions either way


@pytest.mark.parametrize("statistics", ["store", "scope"])
def test_another_tenants_project_memories_stay_out_of_an_agents_statistics_and_graph(
    statistics: str,
) -> None:
    # hera (client acme) and atlas (client globex) are both on project apollo; hera cannot
    # read globex's memories, so atlas's writes there must not move hera's scores.
    def hera_scores(globex_writes: int) -> tuple[dict[str, float], dict[str, float]]:
        s = MemoryStore(embedder=HashingEmbedder(dim=64))
        for i, text in enumerate(["The merger uses Redis", "Lunch is at noon",
                                  "Vercel hosts the merger site"]):
            s.store(text, "event", client_id="acme", scope="project:apollo", now=1.0 + i,
                    source_agent="hera")
        for i in range(globex_writes):
            s.store(f"merger with Redis and Vercel {i}", "event", client_id="globex",
                    scope="project:apollo", now=10.0 + i, source_agent="atlas")
        hera = Principal.of("hera", ["apollo"])
        ctx = QueryContext(qid="q", text="merger Redis", store=s, now=100.0,
                           client_id="acme", principal=hera)
        bm25 = BM25(statistics=statistics).transform(None, ctx)
        graph = Graph(top_k=None).transform(None, ctx)
        return (dict(zip([s.get(m).text for m in bm25["mem_id"]], bm25["score"], strict=True)),
                dict(zip([s.get(m).text for m in graph["mem_id"]], graph["score"], strict=True)))

    alone = hera_scores(0)
    assert alone[0] and alone[1]  # both stages find hera's memories
    assert hera_scores(4) == alone
