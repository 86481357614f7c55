"""Graph retrieval by spreading activation, on the hand-built store of ``_graph_fixtures``.

Query "How is Next.js deployed?" names one entity, Next.js (index 1), seeded at 1.0. One hop
(decay 0.8, strength factor min(s / 5, 1)):

* bot (0) and PostgreSQL (2) by co-occurrence of strength 1: ``1.0 * 0.8 * 1/5 = 0.16``;
* Redis (4) by the typed ``uses`` edge (boost 2): ``1.0 * 0.8 * 1/5 * 2 = 0.32``.

The second hop gives at most ``0.32 * 0.8 * 1/5 * 2 = 0.1024`` back to Next.js (already 1.0) and
``0.16 * 0.8 * 2/5 = 0.0512`` or less elsewhere (< 0.1): nothing new.
"""

from __future__ import annotations

import sys
from pathlib import Path

import polars as pl
import pytest

from memlab.stages.base import check_frame, get_stage_class
from memlab.stages.graph import Graph, memory_incidence

if str(Path(__file__).parent) not in sys.path:  # --import-mode=importlib: helpers by path
    sys.path.insert(0, str(Path(__file__).parent))
from _graph_fixtures import DAY, ENTITY, T0, build_graph_store, graph_ctx  # noqa: E402

HOP_CO = 1.0 * 0.8 * (1 / 5)
HOP_USES = 1.0 * 0.8 * (1 / 5) * 2.0
QUERY = "How is Next.js deployed?"


def test_registered_under_graph() -> None:
    assert get_stage_class("graph") is Graph


def test_scores_sum_activation_of_linked_entities() -> None:
    store = build_graph_store()
    ctx = graph_ctx(store, QUERY)
    out = Graph().transform(pl.DataFrame(), ctx)
    check_frame(out, "graph")
    assert out["mem_id"].to_list() == ["m0", "m2", "m1", "m3"]
    assert out["rank"].to_list() == [1, 2, 3, 4]
    expected = [
        HOP_CO + 1.0 + HOP_CO,  # m0: bot, Next.js, PostgreSQL
        HOP_CO + HOP_USES,  # m2: bot, Redis
        HOP_CO + HOP_CO,  # m1: bot, PostgreSQL (Amazon S3 not reached)
        HOP_CO,  # m3: bot (Docker not reached)
    ]
    assert out["graph_score"].to_list() == pytest.approx(expected, rel=1e-12)
    assert out["score"].to_list() == out["graph_score"].to_list()


def test_roles_filter_links() -> None:
    store = build_graph_store()
    ctx = graph_ctx(store, QUERY)
    out = Graph(roles=("mentioned",)).transform(pl.DataFrame(), ctx)
    assert out["mem_id"].to_list() == ["m0", "m2", "m1"]
    assert out["graph_score"].to_list() == pytest.approx(
        [1.0 + HOP_CO, HOP_USES, HOP_CO], rel=1e-12
    )


def test_trace_records_bfs_levels() -> None:
    store = build_graph_store()
    ctx = graph_ctx(store, QUERY)
    Graph().transform(pl.DataFrame(), ctx)
    trace = ctx.trace["graph"]
    assert trace["seeds"] == [ENTITY["Next.js"]]
    assert trace["levels"][0] == {ENTITY["Next.js"]: 1.0}
    assert trace["levels"][1] == pytest.approx(
        {ENTITY["bot"]: HOP_CO, ENTITY["PostgreSQL"]: HOP_CO, ENTITY["Redis"]: HOP_USES}
    )
    assert trace["levels"][2] == {}
    assert trace["names"][ENTITY["Redis"]] == "Redis"
    assert trace["n_memories"] == 4


def test_max_depth_zero_scores_seed_memories_only() -> None:
    store = build_graph_store()
    out = Graph(max_depth=0).transform(pl.DataFrame(), graph_ctx(store, QUERY))
    assert out["mem_id"].to_list() == ["m0"]
    assert out["graph_score"].to_list() == [1.0]


def test_min_activation_cuts_weak_hops() -> None:
    store = build_graph_store()
    # 0.2 drops the 0.16 co-occurrence hops but keeps the 0.32 typed hop.
    out = Graph(min_activation=0.2).transform(pl.DataFrame(), graph_ctx(store, QUERY))
    assert out["mem_id"].to_list() == ["m0", "m2"]
    assert out["graph_score"].to_list() == pytest.approx([1.0, HOP_USES], rel=1e-12)


def test_top_k_and_visibility() -> None:
    store = build_graph_store()
    assert Graph(top_k=2).transform(pl.DataFrame(), graph_ctx(store, QUERY))[
        "mem_id"
    ].to_list() == ["m0", "m2"]
    # At T0 + 1.5 days only m0 and m1 exist.
    early = graph_ctx(store, QUERY, now=T0 + 1.5 * DAY)
    out = Graph().transform(pl.DataFrame(), early)
    assert out["mem_id"].to_list() == ["m0", "m1"]
    assert early.trace["graph"]["n_memories"] == 2


def test_query_without_entities_gives_empty_frame() -> None:
    store = build_graph_store()
    ctx = graph_ctx(store, "what happened yesterday")
    out = Graph().transform(pl.DataFrame(), ctx)
    check_frame(out, "graph")
    assert out.height == 0
    assert "graph_score" in out.columns
    assert ctx.trace["graph"]["seeds"] == []


def test_incidence_matches_links_and_roles() -> None:
    store = build_graph_store()
    ctx = graph_ctx(store, QUERY)
    inc, inc_t = memory_incidence(ctx, ("mentioned",))
    assert inc.shape == (6, 4)
    assert sorted(inc_t[1].indices.tolist()) == [ENTITY["PostgreSQL"], ENTITY["Amazon S3"]]
    full, _ = memory_incidence(ctx, ("about", "source", "mentioned"))
    assert full[ENTITY["bot"]].indices.tolist() == [0, 1, 2, 3]
    assert memory_incidence(ctx, ("mentioned",))[0] is inc  # cached


def test_bad_role_names_field() -> None:
    store = build_graph_store()
    with pytest.raises(ValueError, match="'roles'"):
        Graph(roles=("owner",)).transform(pl.DataFrame(), graph_ctx(store, QUERY))


def test_memory_activation_is_the_incidence_product_bit_for_bit():
    """The sorted-links sums equal ``incidence.T @ activation`` exactly: after the store grows,
    after a link to an earlier memory, with a role left out, and after an unlink."""
    import numpy as np

    from memlab.stages.graph import memory_activation

    rng = np.random.default_rng(4)
    store = build_graph_store()
    graph = store.graph

    def check(roles):
        ctx = graph_ctx(store, "anything")
        act = {e: float(rng.random()) / 3 for e in range(graph.n_entities)
               if rng.random() < 0.7}
        inc, _ = memory_incidence(ctx, roles)
        vec = np.zeros(graph.n_entities)
        vec[list(act)] = list(act.values())
        want = np.asarray(inc.T @ vec).reshape(-1)
        got = memory_activation(ctx, roles, act)
        assert got.tolist() == want.tolist()  # same sums, same order: equal, not close
        return got

    every = ("about", "source", "mentioned")
    check(every)
    store.store("Redis and Next.js and Stripe and Kubernetes at Acme", "event",
                source_agent="bot", now=T0 + 9 * DAY)
    check(every)
    check(("about",))
    loose = next(e for e in range(graph.n_entities) if 0 not in graph.memories_of(e))
    links = len(graph.link_arrays()[0])
    graph.link(loose, 0, "mentioned")  # a link to the first memory, after later ones
    assert len(graph.link_arrays()[0]) == links + 1
    check(every)
    graph.unlink_memory(1)
    assert graph.has_unlinked
    assert check(every)[1] == 0.0


def test_entity_currents_are_the_incidence_product_bit_for_bit():
    """``incidence[:, rows] @ weights`` from the sorted links, rows in any order (a ranking),
    equal to the sparse product: after growth, a late link, a role left out, an unlink."""
    import numpy as np

    from memlab.stages.graph import entity_currents

    rng = np.random.default_rng(5)
    store = build_graph_store()
    graph = store.graph

    def check(roles):
        ctx = graph_ctx(store, "anything")
        rows = rng.permutation(len(store))[: max(1, len(store) - 1)]
        weights = rng.random(len(rows)) / 3
        _, inc_t = memory_incidence(ctx, roles)
        want = np.zeros(graph.n_entities) + inc_t[rows].T @ weights
        got = entity_currents(ctx, roles, rows, weights)
        assert got.tolist() == want.tolist()  # same sums, same order: equal, not close
        return got

    every = ("about", "source", "mentioned")
    assert check(every).any()
    store.store("Redis and Next.js and Stripe and Kubernetes at Acme", "event",
                source_agent="bot", now=T0 + 9 * DAY)
    check(every)
    check(("about",))
    loose = next(e for e in range(graph.n_entities) if 0 not in graph.memories_of(e))
    graph.link(loose, 0, "mentioned")
    check(every)
    graph.unlink_memory(1)
    check(every)
    assert entity_currents(graph_ctx(store, "x"), every, np.zeros(0, np.int64),
                           np.zeros(0)).tolist() == [0.0] * graph.n_entities
