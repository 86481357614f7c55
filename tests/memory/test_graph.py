"""Tests for memlab.memory.graph (entity graph, design §D0.9 BFS, design §D2.6 Hebbian upkeep)."""

from __future__ import annotations

import igraph
import numpy as np
import polars as pl
import pytest

from memlab.memory.entities import Entity, EntityMention
from memlab.memory.graph import EntityGraph


def make(*names: str) -> tuple[EntityGraph, list[int]]:
    g = EntityGraph()
    return g, [g.add_entity(Entity(n, "concept")) for n in names]


# ---------------------------------------------------------------- entities and links
def test_add_entity_finds_or_creates_by_lower_name_and_type() -> None:
    g = EntityGraph()
    a = g.add_entity(Entity("Next.js", "technology"))
    assert g.add_entity(Entity("next.JS", "technology")) == a
    b = g.add_entity(Entity("Next.js", "concept"))
    assert (a, b) == (0, 1)
    assert g.n_entities == 2
    assert g.find("NEXT.JS") == 0
    assert g.find("next.js", "concept") == 1
    assert g.find("nope") is None
    assert g.entity(1) == Entity("Next.js", "concept")


def test_links_both_ways_first_role_wins() -> None:
    g, (a, b) = make("a", "b")
    g.link(a, 10, "about")
    g.link(b, 10, "mentioned")
    g.link(a, 7, "mentioned")
    g.link(a, 10, "mentioned")
    assert g.memories_of(a) == [10, 7]
    assert g.entities_of(10) == [a, b]
    assert g.entities_of(99) == []
    assert g.links_frame().rows() == [(0, 10, "about"), (0, 7, "mentioned"), (1, 10, "mentioned")]
    assert g.unlink_memory(10) == 2
    assert g.memories_of(a) == [7]
    assert g.memories_of(b) == []


def test_add_memory_links_and_co_occurs() -> None:
    g = EntityGraph()
    mentions = [
        EntityMention(Entity("acme", "client"), "about"),
        EntityMention(Entity("bot", "agent"), "source"),
        EntityMention(Entity("Redis", "technology"), "mentioned"),
    ]
    assert g.add_memory(3, mentions) == [0, 1, 2]
    assert g.add_memory(4, mentions[:2]) == [0, 1]
    assert g.strength(0, 1, "co_occurrence") == 2.0
    assert g.strength(1, 2, "co_occurrence") == 1.0
    assert g.n_edges == 3
    assert g.entities_of(3) == [0, 1, 2]


# ---------------------------------------------------------------- relations
def test_relation_strength_counters() -> None:
    g, (a, b) = make("a", "b")
    assert g.add_relation(a, b, "uses") == 1.0
    assert g.add_relation(a, b, "uses", increment=2.5) == 3.5
    assert g.strength(a, b, "uses") == 3.5
    assert g.strength(b, a, "uses") == 0.0  # typed relations are directed
    assert g.add_relation(b, a, "co_occurrence") == 1.0
    assert g.strength(a, b, "co_occurrence") == 1.0  # co-occurrence is undirected
    assert g.n_edges == 2
    assert sorted(g.neighbours(a)) == [(b, "co_occurrence", 1.0), (b, "uses", 3.5)]


def test_co_occur_all_pairs_once() -> None:
    g, (a, b, c) = make("a", "b", "c")
    assert g.co_occur([a, b, c, a]) == 3
    assert [g.strength(x, y, "co_occurrence") for x, y in ((a, b), (a, c), (c, b))] == [1, 1, 1]


def test_relation_validation() -> None:
    g, (a, b) = make("a", "b")
    with pytest.raises(ValueError, match="'relation'"):
        g.add_relation(a, b, "likes")
    with pytest.raises(ValueError, match="same entity"):
        g.add_relation(a, a, "uses")
    with pytest.raises(ValueError, match="'dst' = 5"):
        g.add_relation(a, 5, "uses")
    with pytest.raises(TypeError, match="'src'"):
        g.add_relation("a", b, "uses")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="'role'"):
        g.link(a, 0, "owner")
    with pytest.raises(ValueError, match="'mem_idx'"):
        g.link(a, -1, "about")


# ---------------------------------------------------------------- spreading activation
@pytest.fixture
def chain() -> tuple[EntityGraph, dict[str, int]]:
    """S -co(5)- X -co(10)- Z -co(5)- Q;  S -uses(1)-> Y <-works_on(5)- W;  X -co(1)- V;
    Y -co(1)- U."""
    g = EntityGraph()
    idx = {n: g.add_entity(Entity(n, "concept")) for n in "SXYZWQVU"}
    g.add_relation(idx["S"], idx["X"], "co_occurrence", 5)
    g.add_relation(idx["S"], idx["Y"], "uses", 1)
    g.add_relation(idx["X"], idx["Z"], "co_occurrence", 10)
    g.add_relation(idx["W"], idx["Y"], "works_on", 5)
    g.add_relation(idx["Z"], idx["Q"], "co_occurrence", 5)
    g.add_relation(idx["X"], idx["V"], "co_occurrence", 1)
    g.add_relation(idx["Y"], idx["U"], "co_occurrence", 1)
    return g, idx


def test_spread_activation_hand_computed(chain: tuple[EntityGraph, dict[str, int]]) -> None:
    g, i = chain
    act = g.spread_activation([i["S"]])
    by_name = {g.entity(k).name: v for k, v in act.items()}
    assert by_name == pytest.approx(
        {
            "S": 1.0,
            "X": 1.0 * 0.8 * 1.0 * min(5 / 5, 1.0),  # co-occurrence, saturated
            "Y": 1.0 * 0.8 * 2.0 * (1 / 5),  # typed relation, strength 1
            "Z": 0.8 * 0.8 * 1.0 * min(10 / 5, 1.0),  # depth 2
            "W": (0.8 * 2.0 * (1 / 5)) * 0.8 * 2.0 * (5 / 5),  # typed, walked backwards
            "V": 0.8 * 0.8 * 1.0 * (1 / 5),  # 0.128 >= 0.1
        },
        rel=1e-12,
    )
    # U: 0.32 * 0.8 * (1/5) = 0.0512 < 0.1; Q would be depth 3.
    assert i["U"] not in act and i["Q"] not in act
    assert list(act) == [i[n] for n in "SXYZVW"]  # order first reached


def test_spread_activation_depth_and_threshold(chain: tuple[EntityGraph, dict[str, int]]) -> None:
    g, i = chain
    assert g.spread_activation([i["S"]], max_depth=0) == {i["S"]: 1.0}
    one = g.spread_activation([i["S"]], max_depth=1)
    assert set(one) == {i["S"], i["X"], i["Y"]}
    three = g.spread_activation([i["S"]], max_depth=3)
    assert three[i["Q"]] == pytest.approx(0.8 * 0.8 * 0.8 * (5 / 5))
    low = g.spread_activation([i["S"]], min_activation=0.05)
    assert low[i["U"]] == pytest.approx(1.0 * 0.8 * 2.0 * (1 / 5) * 0.8 * (1 / 5))
    no_boost = g.spread_activation([i["S"]], causal_boost=1.0)
    assert no_boost[i["Y"]] == pytest.approx(1.0 * 0.8 * 1.0 * (1 / 5))
    assert i["W"] in no_boost and no_boost[i["W"]] == pytest.approx(0.16 * 0.8 * 1.0)


def test_node_reached_twice_keeps_max_and_re_expands() -> None:
    g, (s, m, n, k) = make("s", "m", "n", "k")
    g.add_relation(s, m, "co_occurrence", 1)  # depth 1: 0.8 * 0.2 = 0.16
    g.add_relation(s, n, "uses", 5)  # depth 1: 0.8 * 2.0 * 1 = 1.6
    g.add_relation(n, m, "co_occurrence", 5)  # depth 2: 1.6 * 0.8 = 1.28 > 0.16
    g.add_relation(m, k, "co_occurrence", 5)
    act, trace = g.spread_activation([s], max_depth=3, trace=True)
    assert act[m] == pytest.approx(1.0 * 0.8 * 2.0 * 1.0 * 0.8 * 1.0)
    assert act[k] == pytest.approx(1.28 * 0.8)  # expanded again with its raised value
    assert trace[0] == {s: 1.0}
    assert trace[1] == pytest.approx({m: 0.8 * (1 / 5), n: 0.8 * 2.0})
    assert trace[2] == pytest.approx({m: 1.6 * 0.8, k: 0.16 * 0.8})
    assert trace[3] == pytest.approx({k: 1.28 * 0.8})


def test_no_echo_into_seeds_or_parents() -> None:
    g, (s, a, b) = make("s", "a", "b")
    g.add_relation(s, a, "co_occurrence", 5)
    g.add_relation(a, b, "uses", 5)
    g.add_relation(s, b, "uses", 5)
    act = g.spread_activation([s], max_depth=3)
    # b: max(direct 1.0 * 0.8 * 2.0, via a 0.8 * 0.8 * 2.0); the seed keeps 1.0 although
    # b -> s would carry 1.6 * 1.6; a is raised via b (1.6 * 1.6 = 2.56 > 0.8) but b is not
    # raised back via a (its parent is s, a's parent is b).
    assert act == pytest.approx({s: 1.0, a: 1.6 * 0.8 * 2.0, b: 0.8 * 2.0})


def test_weighted_seeds_and_validation() -> None:
    g, (a, b) = make("a", "b")
    g.add_relation(a, b, "co_occurrence", 5)
    assert g.spread_activation({a: 0.5}) == pytest.approx({a: 0.5, b: 0.5 * 0.8})
    with pytest.raises(ValueError, match="'seeds' = 9"):
        g.spread_activation([9])
    with pytest.raises(ValueError, match="'strength_saturation'"):
        g.spread_activation([a], strength_saturation=0)
    with pytest.raises(ValueError, match="'max_depth'"):
        g.spread_activation([a], max_depth=-1)


def test_memory_activation_sums_linked_entities(chain: tuple[EntityGraph, dict[str, int]]) -> None:
    g, i = chain
    g.link(i["S"], 0, "about")
    g.link(i["X"], 0, "mentioned")
    g.link(i["Y"], 1, "mentioned")
    g.link(i["X"], 2, "mentioned")
    g.link(i["Z"], 2, "mentioned")
    g.link(i["U"], 3, "mentioned")
    mem = g.memory_activation(g.spread_activation([i["S"]]))
    assert list(mem) == [0, 2, 1]  # sorted by score
    assert mem == pytest.approx({0: 1.0 + 0.8, 2: 0.8 + 0.64, 1: 0.32})


# ---------------------------------------------------------------- adjacency
def test_adjacency_symmetric_weighted_and_cached() -> None:
    g, (a, b, c) = make("a", "b", "c")
    g.add_relation(a, b, "co_occurrence", 5)
    g.add_relation(a, b, "uses", 1)
    g.add_relation(c, b, "works_on", 3)
    m = g.adjacency()
    assert m.shape == (3, 3)
    np.testing.assert_allclose(m.toarray(), [[0, 5 + 1, 0], [5 + 1, 0, 3], [0, 3, 0]])
    typed2 = g.adjacency(typed_weight=2.0).toarray()
    np.testing.assert_allclose(typed2, [[0, 5 + 2, 0], [5 + 2, 0, 6], [0, 6, 0]])
    np.testing.assert_allclose(g.adjacency("binary").toarray(), [[0, 2, 0], [2, 0, 1], [0, 1, 0]])
    assert g.adjacency() is m
    g.add_relation(a, c, "co_occurrence")
    m2 = g.adjacency()
    assert m2 is not m and m2[0, 2] == 1.0
    with pytest.raises(ValueError, match="'weight'"):
        g.adjacency("cosine")


# ---------------------------------------------------------------- Hebbian upkeep
def test_hebbian_update_strengthen_decay_default_floor() -> None:
    g, (a, b, c, d) = make("a", "b", "c", "d")
    g.add_relation(a, b, "co_occurrence", 5)
    g.add_relation(a, c, "co_occurrence", 2)
    g.add_relation(b, c, "uses", 3)
    assert g.hebbian_update([[a, b], [b, d], [a, b, a]]) == 0
    assert g.strength(a, b, "co_occurrence") == pytest.approx(5 * 0.98 + 1.0 + 1.0)
    assert g.strength(a, c, "co_occurrence") == pytest.approx(2 * 0.98)
    assert g.strength(b, d, "co_occurrence") == pytest.approx(1.0)
    assert g.strength(b, c, "uses") == 3  # typed relations do not decay


def test_hebbian_update_floor_drops_edges() -> None:
    g, (a, b, c, d) = make("a", "b", "c", "d")
    g.add_relation(a, b, "co_occurrence", 5)
    g.add_relation(a, c, "co_occurrence", 2)
    g.add_relation(c, d, "co_occurrence", 2)
    g.add_relation(b, c, "uses", 0.5)
    dropped = g.hebbian_update([[a, b], [c, d]], learning_rate=0.5, decay=0.9, floor=1.9)
    # a-b: 5*0.9+0.5 = 5.0; a-c: 2*0.9 = 1.8 < 1.9 dropped; c-d: 1.8+0.5 = 2.3; uses kept.
    assert dropped == 1
    assert g.n_edges == 3
    assert g.strength(a, c, "co_occurrence") == 0.0
    assert g.strength(a, b, "co_occurrence") == pytest.approx(5 * 0.9 + 0.5)
    assert g.strength(c, d, "co_occurrence") == pytest.approx(2 * 0.9 + 0.5)
    assert g.strength(b, c, "uses") == 0.5
    # adjacency lists were rebuilt: a now reaches only b.
    assert g.neighbours(a) == [(b, "co_occurrence", pytest.approx(5.0))]
    assert g.spread_activation([a], max_depth=1) == pytest.approx({a: 1.0, b: 0.8})


def test_hebbian_validation() -> None:
    g, (a,) = make("a")
    with pytest.raises(ValueError, match="'decay'"):
        g.hebbian_update([], decay=1.5)
    with pytest.raises(ValueError, match="'co_activated' = 4"):
        g.hebbian_update([[a, 4]])


# ---------------------------------------------------------------- exports
def test_to_igraph_and_frames() -> None:
    g = EntityGraph()
    a = g.add_entity(Entity("acme-corp", "client"))
    b = g.add_entity(Entity("Next.js", "technology"))
    c = g.add_entity(Entity("bot", "agent"))
    g.add_relation(a, b, "uses", 2)
    g.add_relation(c, a, "co_occurrence", 1)
    g.link(a, 0, "about")
    ig = g.to_igraph()
    assert isinstance(ig, igraph.Graph)
    assert (ig.vcount(), ig.ecount(), ig.is_directed()) == (3, 2, True)
    assert ig.vs["name"] == ["acme-corp", "Next.js", "bot"]
    assert ig.vs["type"] == ["client", "technology", "agent"]
    assert [e.tuple for e in ig.es] == [(0, 1), (0, 2)]
    assert ig.es["relation"] == ["uses", "co_occurrence"]
    assert ig.es["strength"] == [2.0, 1.0]
    assert ig.es["directed"] == [True, False]
    assert g.to_igraph() is ig
    edges = g.edges_frame()
    assert edges.rows() == [
        (0, 1, "acme-corp", "Next.js", "uses", 2.0, True),
        (0, 2, "acme-corp", "bot", "co_occurrence", 1.0, False),
    ]
    ents = g.entities_frame()
    assert ents.columns == ["idx", "name", "type", "degree", "n_memories"]
    assert ents.rows() == [
        (0, "acme-corp", "client", 2, 1),
        (1, "Next.js", "technology", 1, 0),
        (2, "bot", "agent", 1, 0),
    ]


def test_empty_graph_exports() -> None:
    g = EntityGraph()
    assert g.adjacency().shape == (0, 0)
    assert g.to_igraph().vcount() == 0
    assert g.edges_frame().schema["strength"] == pl.Float64
    assert g.edges_frame().height == 0
    assert g.entities_frame().height == 0
    assert g.links_frame().height == 0
    assert g.spread_activation([]) == {}
    assert g.memory_activation({}) == {}


def test_version_counts_changes() -> None:
    g, (a, b) = make("a", "b")
    v = g.version
    g.link(a, 0, "about")
    assert g.version == v + 1
    g.link(a, 0, "mentioned")  # already linked: no change
    assert g.version == v + 1
    g.add_relation(a, b, "uses")
    assert g.version == v + 2
    g.add_entity(Entity("a", "concept"))  # found, not created
    assert g.version == v + 2
    g.unlink_memory(0)
    assert g.version == v + 3


def test_links_frame_is_by_entity_then_link_order_before_and_after_an_unlink() -> None:
    g = EntityGraph()
    a = g.add_entity(Entity("A", "concept"))
    b = g.add_entity(Entity("B", "concept"))
    g.link(b, 0, "about")
    g.link(a, 1, "mentioned")
    g.link(b, 2, "source")
    g.link(a, 0, "about")
    g.link(a, 1, "about")  # first role wins: no new link
    assert g.links_frame().rows() == [
        (0, 1, "mentioned"), (0, 0, "about"), (1, 0, "about"), (1, 2, "source")
    ]
    g.unlink_memory(1)
    g.link(a, 3, "source")
    assert g.links_frame().rows() == [(0, 0, "about"), (0, 3, "source"), (1, 0, "about"),
                                      (1, 2, "source")]


def test_names_of_entity_indices_and_a_bad_index() -> None:
    g = EntityGraph()
    a = g.add_entity(Entity("Kafka", "technology"))
    b = g.add_entity(Entity("Billing Core", "system"))
    assert g.names([b, a, b]) == ["Billing Core", "Kafka", "Billing Core"]
    assert g.names([]) == []
    with pytest.raises(IndexError, match="entity index 2 is not in 0..1"):
        g.names([a, 2])


def test_many_links_grow_the_link_log() -> None:
    g = EntityGraph()
    e = g.add_entity(Entity("Kafka", "technology"))
    for m in range(200):  # past the first capacity of the log
        g.link(e, m, "mentioned")
    ent, mem, role = g.link_arrays()
    assert ent.tolist() == [e] * 200 and mem.tolist() == list(range(200))
    assert role.tolist() == [2] * 200  # ENTITY_ROLES.index("mentioned")
