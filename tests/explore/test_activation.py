"""BFS and LIF step frames, the network drawing, rankings with and without propagation.

The graph of most tests: entities A(0), B(1), C(2), D(3) with ``A -uses-> B`` (strength 5,
carries fully), ``B - C`` co-occurrence 2.5 (carries half) and ``C - D`` co-occurrence 5.
"""

from __future__ import annotations

import numpy as np
import polars as pl
import pytest
from polars.testing import assert_frame_equal

from memlab.embed import HashingEmbedder
from memlab.explore import activation as act
from memlab.explore import session
from memlab.memory.entities import Entity
from memlab.memory.graph import EntityGraph
from memlab.memory.store import MemoryStore
from memlab.stages.base import empty_candidates
from memlab.stages.bm25 import BM25
from memlab.stages.dense import Dense
from memlab.stages.graph import Graph
from memlab.stages.lif import LIF, LIFTrace
from memlab.stages.rrf import RRF


def chain_graph() -> EntityGraph:
    g = EntityGraph()
    for name in ("A", "B", "C", "D"):
        g.add_entity(Entity(name, "concept"))
    g.add_relation(0, 1, "uses", increment=5.0)
    g.add_relation(1, 2, "co_occurrence", increment=2.5)
    g.add_relation(2, 3, "co_occurrence", increment=5.0)
    return g


B_ACT = 1.0 * 0.8 * 2.0 * min(5.0 / 5, 1.0)
C_ACT = B_ACT * 0.8 * min(2.5 / 5, 1.0)
D_ACT = C_ACT * 0.8 * min(5.0 / 5, 1.0)


def test_bfs_steps_lists_the_state_after_each_hop():
    frame = act.bfs_steps(chain_graph(), [0], max_depth=2)
    assert frame.columns == ["step", "entity_idx", "name", "activation", "changed"]
    rows = frame.rows()
    assert [r[:3] + (r[4],) for r in rows] == [
        (0, 0, "A", True),
        (1, 0, "A", False),
        (1, 1, "B", True),
        (2, 0, "A", False),
        (2, 1, "B", False),
        (2, 2, "C", True),
    ]
    assert [r[3] for r in rows] == pytest.approx([1.0, 1.0, B_ACT, 1.0, B_ACT, C_ACT])


def test_bfs_steps_reaches_further_with_more_hops_and_lower_decay():
    frame = act.bfs_steps(chain_graph(), [0], max_depth=3)
    last = frame.filter(pl.col("step") == 3)
    assert last["activation"].to_list() == pytest.approx([1.0, B_ACT, C_ACT, D_ACT])
    weak = act.bfs_steps(chain_graph(), [0], hop_decay=0.5, max_depth=3)
    # 1 * 0.5 * 2 = 1.0 for B, then 1.0 * 0.5 * 0.5 = 0.25 for C, 0.25 * 0.5 = 0.125 for D.
    assert weak.filter(pl.col("step") == 3)["activation"].to_list() == pytest.approx(
        [1.0, 1.0, 0.25, 0.125]
    )


def test_bfs_steps_repeats_the_last_state_once_the_spread_stops():
    g = EntityGraph()
    g.add_entity(Entity("alone", "concept"))
    frame = act.bfs_steps(g, [0], max_depth=2)
    assert frame.rows() == [
        (0, 0, "alone", 1.0, True),
        (1, 0, "alone", 1.0, False),
        (2, 0, "alone", 1.0, False),
    ]


def test_bfs_steps_without_seeds_is_empty():
    assert act.bfs_steps(chain_graph(), []).height == 0


def test_lif_steps_lists_potentials_spikes_and_running_counts():
    trace = LIFTrace(
        potentials=np.array([[1.2, 0.0, 0.0, 0.0], [0.0, 0.5, 0.0, 0.0], [0.0, 1.1, 0.0, 0.0]]),
        spikes=np.array([[True, False, False, False], [False] * 4, [False, True, False, False]]),
    )
    frame = act.lif_steps(trace, chain_graph())
    assert frame.rows() == [
        (0, 0, "A", 1.2, True, 1),
        (0, 1, "B", 0.0, False, 0),
        (1, 0, "A", 0.0, False, 1),
        (1, 1, "B", 0.5, False, 0),
        (2, 0, "A", 0.0, False, 1),
        (2, 1, "B", 1.1, True, 1),
    ]
    chosen = act.lif_steps(trace, chain_graph(), nodes=[3])
    assert chosen.rows() == [
        (0, 3, "D", 0.0, False, 0),
        (1, 3, "D", 0.0, False, 0),
        (2, 3, "D", 0.0, False, 0),
    ]


def test_lif_steps_of_a_real_simulation_match_the_trace():
    g = chain_graph()
    trace = LIF(leak=0.5, threshold=1.0, refractory=1, steps=3).simulate(g, {0: 1.0})
    frame = act.lif_steps(trace, g)
    ids = sorted(set(frame["entity_idx"].to_list()))
    assert ids == [int(e) for e in np.flatnonzero((trace.potentials != 0).any(axis=0))]
    for t, e, _, potential, spiked, count in frame.rows():
        assert potential == trace.potentials[t, e]
        assert spiked == bool(trace.spikes[t, e])
        assert count == int(trace.spikes[: t + 1, e].sum())


def test_focus_nodes_takes_active_nodes_then_strongest_neighbours():
    g = chain_graph()
    assert act.focus_nodes(g, [2], max_nodes=3) == [2, 3, 1]  # D (5.0) before B (2.5)
    assert act.focus_nodes(g, [2], max_nodes=2) == [2, 3]
    assert act.focus_nodes(g, [1, 1, 0], max_nodes=1) == [1]
    with pytest.raises(ValueError, match="field 'max_nodes'"):
        act.focus_nodes(g, [0], max_nodes=0)


def test_layout_frame_is_deterministic_and_fills_the_unit_square():
    g = chain_graph()
    first = act.layout_frame(g, [3, 0, 1, 2])
    assert_frame_equal(first, act.layout_frame(g, [0, 1, 2, 3]))
    assert first["entity_idx"].to_list() == [0, 1, 2, 3]
    assert first["name"].to_list() == ["A", "B", "C", "D"]
    for axis in ("x", "y"):
        assert (first[axis].min(), first[axis].max()) == (0.0, 1.0)


def test_layout_of_one_node_sits_in_the_middle_and_of_none_is_empty():
    g = chain_graph()
    assert act.layout_frame(g, [2]).rows() == [(2, "C", "concept", 0.5, 0.5)]
    assert act.layout_frame(g, []).height == 0


def test_network_edges_joins_end_points():
    g = chain_graph()
    layout = pl.DataFrame(
        {"entity_idx": [0, 1, 2], "name": ["A", "B", "C"], "type": ["concept"] * 3,
         "x": [0.0, 0.5, 1.0], "y": [0.0, 1.0, 0.0]}
    )
    edges = act.network_edges(g, layout)
    assert edges.rows() == [
        (0, 1, "uses", 5.0, 0.0, 0.0, 0.5, 1.0),
        (1, 2, "co_occurrence", 2.5, 0.5, 1.0, 1.0, 0.0),
    ]


def test_node_states_fill_missing_values_with_zero():
    layout = pl.DataFrame(
        {"entity_idx": [0, 1, 2], "name": ["A", "B", "C"], "type": ["concept"] * 3,
         "x": [0.0, 0.5, 1.0], "y": [0.0, 1.0, 0.0]}
    )
    nodes = act.node_states(layout, {1: 0.7}, spiked=[2], seeds=[0])
    assert nodes.select("entity_idx", "value", "spiked", "seed").rows() == [
        (0, 0.0, False, True),
        (1, 0.7, False, False),
        (2, 0.0, True, False),
    ]


def test_network_chart_layers_and_colour_scale():
    g = chain_graph()
    layout = act.layout_frame(g, [0, 1, 2, 3])
    chart = act.network_chart(
        act.node_states(layout, {0: 1.0}, spiked=[0]), act.network_edges(g, layout),
        color_max=2.0, title="t",
    )
    spec = chart.to_dict()
    assert [layer["mark"]["type"] for layer in spec["layer"]] == ["rule", "circle", "point",
                                                                   "text"]
    assert spec["layer"][1]["encoding"]["color"]["scale"]["domain"] == [0.0, 2.0]
    assert spec["layer"][2]["transform"] == [{"filter": "datum.spiked"}]


def test_compare_rankings_orders_by_best_rank_and_labels():
    store = MemoryStore()
    for mid in ("m1", "m2", "m3", "m4"):
        store.store(f"memory {mid}", "event", now=0.0, id=mid)

    def ranking(ids):
        return pl.DataFrame({"mem_id": ids, "rank": list(range(1, len(ids) + 1))},
                            schema={"mem_id": pl.String, "rank": pl.Int64})

    table = act.compare_rankings(
        {"base": ranking(["m2", "m1"]), "prop": ranking(["m3", "m2", "m1"])},
        store,
        relevant=["m4"],
        stale=["m1"],
        top_k=2,
    )
    assert table.rows() == [
        ("m2", "", 1, 2, "memory m2"),
        ("m3", "", None, 1, "memory m3"),
        ("m1", "stale", 2, 3, "memory m1"),
        ("m4", "relevant", None, None, "memory m4"),
    ]
    assert table.columns == ["mem_id", "label", "base", "prop", "text"]


def test_pulled_in_lists_new_entries_of_the_top_k():
    store = MemoryStore()
    for mid in ("m1", "m2", "m3"):
        store.store(f"memory {mid}", "event", now=0.0, id=mid)
    base = pl.DataFrame({"mem_id": ["m1", "m2", "m3"], "rank": [1, 2, 3],
                         "score": [3.0, 2.0, 1.0]})
    prop = pl.DataFrame({"mem_id": ["m3", "m1", "m2"], "rank": [1, 2, 3],
                         "score": [9.0, 8.0, 7.0]})
    assert act.pulled_in(base, prop, store, top_k=2).rows() == [(
        "m3", 1, 3, 9.0, "memory m3"
    )]
    assert act.pulled_in(base, prop, store, top_k=3).height == 0
    with pytest.raises(ValueError, match="field 'top_k'"):
        act.pulled_in(base, prop, store, top_k=0)


def test_seed_table_merges_bfs_seeds_and_lif_currents():
    trace = LIFTrace(potentials=np.zeros((1, 4)), spikes=np.zeros((1, 4), dtype=bool),
                     seed_currents=np.array([0.0, 0.5, 0.0, 0.9]))
    table = act.seed_table(chain_graph(), [0, 1], trace)
    assert table.rows() == [
        (3, "D", "concept", False, 0.9),
        (1, "B", "concept", True, 0.5),
        (0, "A", "concept", True, 0.0),
    ]


def test_propagation_rankings_wire_the_stages_as_documented():
    from memlab.datasets.format import load_dataset

    fixture = session.project_root() / "tests" / "fixtures" / "handmade"
    rep = session.make_replayer(load_dataset(fixture), HashingEmbedder(dim=64))
    state = session.replay_to_query(rep, "hq07")
    out = act.propagation_rankings(state.ctx)
    ctx = state.ctx
    d = Dense().transform(empty_candidates(), ctx)
    b = BM25().transform(empty_candidates(), ctx)
    base = RRF().fuse([d, b], ctx)
    assert list(out) == ["no propagation", "graph BFS", "LIF"]
    assert_frame_equal(out["no propagation"], base)
    assert_frame_equal(out["LIF"], LIF().transform(base, ctx))
    g = Graph().transform(empty_candidates(), ctx)
    assert_frame_equal(out["graph BFS"], RRF().fuse([d, b, g], ctx))
    assert ctx.trace["graph"]["seeds"] == state.store.query_entities(state.query.text)


def test_node_states_label_only_the_top_nodes_and_the_seeds():
    layout = pl.DataFrame(
        {"entity_idx": [0, 1, 2, 3], "name": ["A", "B", "C", "D"], "type": ["concept"] * 4,
         "x": [0.0, 0.5, 1.0, 0.2], "y": [0.0, 1.0, 0.0, 0.3]}
    )
    nodes = act.node_states(layout, {1: 0.7, 2: 1.6, 3: 0.7}, seeds=[0], n_labels=2)
    # top 2 by value: C (1.6), then B and D tie at 0.7 -> the lower index, B; A is a seed.
    assert nodes["label"].to_list() == ["A", "B", "C", ""]
    assert act.node_states(layout, {}, n_labels=None)["label"].to_list() == ["A", "B", "C", "D"]


def _hq07():
    from memlab.datasets.format import load_dataset

    fixture = session.project_root() / "tests" / "fixtures" / "handmade"
    rep = session.make_replayer(load_dataset(fixture), HashingEmbedder(dim=64))
    return session.replay_to_query(rep, "hq07")


def test_memory_nodes_sit_beside_their_drawn_entities():
    state = _hq07()
    store = state.store
    linked = [m for m in store.ids if store.graph.entities_of(store.idx(m))][:2]
    ents = sorted({e for m in linked for e in store.graph.entities_of(store.idx(m))})
    layout = act.layout_frame(store.graph, ents)
    nodes, links = act.memory_nodes(store, layout, linked, before={linked[0]: 3},
                                    after={linked[0]: 21}, relevant=[linked[0]], offset=0.1)
    pos = {e: (x, y) for e, x, y in layout.select("entity_idx", "x", "y").iter_rows()}
    for j, (mid, x, y) in enumerate(nodes.select("mem_id", "x", "y").iter_rows()):
        es = store.graph.entities_of(store.idx(mid))
        cx = sum(pos[e][0] for e in es) / len(es)
        cy = sum(pos[e][1] for e in es) / len(es)
        assert (x, y) == pytest.approx((cx + 0.1 * np.cos(2 * np.pi * j / 2),
                                        cy + 0.1 * np.sin(2 * np.pi * j / 2)))
    assert nodes["label"].to_list() == ["3→21", "-→-"]
    assert nodes["relevant"].to_list() == [True, False]
    assert links.height == sum(len(store.graph.entities_of(store.idx(m))) for m in linked)
    none, _ = act.memory_nodes(store, layout.head(0), linked)
    assert none.height == 0  # no drawn entity: not drawn


def test_rank_moves_and_their_sentences():
    store = MemoryStore()
    for mid in ("m1", "m2"):
        store.store(f"memory {mid}", "event", now=0.0, id=mid)

    def ranking(ids):
        return pl.DataFrame({"mem_id": ids, "rank": list(range(1, len(ids) + 1))},
                            schema={"mem_id": pl.String, "rank": pl.Int64})

    moves = act.rank_moves(
        {"no propagation": ranking(["x", "y", "m1"]), "LIF": ranking(["m2", *"abcdefghijklmnopqrs",
                                                                      "m1"])},
        store, ["m1", "m2"],
    )
    assert moves.rows() == [
        ("m1", "LIF", 3, 21, 21 - 3, "memory m1"),
        ("m2", "LIF", None, 1, None, "memory m2"),
    ]
    assert act.describe_moves(moves) == ["LIF moved m1 from rank 3 to rank 21",
                                         "LIF moved m2 from unranked to rank 1"]
    with pytest.raises(ValueError, match="base ranking"):
        act.rank_moves({"LIF": ranking(["m1"])}, store, ["m1"])


def test_propagation_stages_and_params_come_from_get_params():
    graph, lif = act.propagation_stages({"graph__hop_decay": 0.5, "lif__threshold": 1.5})
    assert (graph.hop_decay, lif.threshold) == (0.5, 1.5)
    got = act.propagation_params(graph, act.bfs_steps)
    assert got == {k: graph.get_params()[k] for k in (
        "hop_decay", "causal_boost", "max_depth", "min_activation", "strength_saturation")}
    with pytest.raises(ValueError, match="'rrf__k'"):
        act.propagation_stages({"rrf__k": 1.0})


def test_with_text_asks_another_question_on_the_same_store():
    state = _hq07()
    ctx = act.with_text(state.ctx, "who owns the billing service")
    assert (ctx.text, ctx.qid, ctx.store, ctx.now, ctx.client_id) == (
        "who owns the billing service", "free-text", state.ctx.store, state.ctx.now,
        state.ctx.client_id,
    )
    assert ctx.trace == {} and ctx.query_vector is None


def test_store_context_opens_a_store_directory(tmp_path):
    emb = HashingEmbedder(dim=16)
    store = MemoryStore(tmp_path / "s", embedder=emb)
    store.store("Acme uses Stripe", "fact", now=100.0, id="a", client_id="c")
    store.store("Acme moved to Fly.io", "fact", now=200.0, id="b", client_id="c")
    store.close()
    ctx = act.store_context(tmp_path / "s", "acme", embedder=emb)
    assert (ctx.text, ctx.now, len(ctx.store)) == ("acme", 200.0, 2)
    with pytest.raises(ValueError, match="not a directory"):
        act.store_context(tmp_path / "nope", "x", embedder=emb)


def test_lif_seeds_and_drawn_entities():
    g = chain_graph()
    trace = LIFTrace(
        potentials=np.zeros((2, 4)),
        spikes=np.zeros((2, 4), dtype=bool),
        fired=[3],
        seed_currents=np.array([0.0, 0.0, 0.7, 0.0]),
    )
    assert act.lif_seeds(trace) == [2]
    assert act.lif_seeds(LIFTrace(potentials=np.zeros((1, 4)), spikes=np.zeros((1, 4)))) == []
    bfs = act.bfs_steps(g, [0], max_depth=1)  # last step: A 1.0, B 1.6
    # BFS seed A, LIF input C, last BFS step by activation (B, A), fired D
    assert act.drawn_entities(g, bfs, [0], trace, max_nodes=30) == [0, 2, 1, 3]
    assert act.drawn_entities(g, bfs, [0], trace, max_nodes=2) == [0, 2]
    # no BFS at all: the LIF side alone, then the neighbours by strength
    assert act.drawn_entities(g, bfs.head(0), [], trace, max_nodes=3) == [2, 3, 1]
