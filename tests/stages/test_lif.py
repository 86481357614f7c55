"""Leaky integrate-and-fire propagation: hand-worked networks and the stage on a small store.

Chain network for the simulation tests: A - B - C - D with co-occurrence strengths 5, 5, 2.5,
so with ``weight_scale = 0.2`` the synapses are ``w_AB = w_BC = 1.0`` and ``w_CD = 0.5``.
"""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import polars as pl
import pytest

from memlab.memory.entities import Entity
from memlab.memory.graph import EntityGraph
from memlab.stages.base import check_frame, get_stage_class
from memlab.stages.lif import LIF, LIFTrace

if str(Path(__file__).parent) not in sys.path:  # --import-mode=importlib: helpers by path
    sys.path.insert(0, str(Path(__file__).parent))
from _graph_fixtures import DAY, ENTITY, T0, build_graph_store, graph_ctx  # noqa: E402

A, B, C, D = 0, 1, 2, 3


def chain() -> EntityGraph:
    g = EntityGraph()
    for name in "ABCD":
        g.add_entity(Entity(name, "concept"))
    g.co_occur([A, B], increment=5.0)
    g.co_occur([B, C], increment=5.0)
    g.co_occur([C, D], increment=2.5)
    return g


def test_registered_under_lif() -> None:
    assert get_stage_class("lif") is LIF


def test_synapses_scale_and_cap() -> None:
    w = LIF(weight_scale=0.2, max_weight=0.8).synapses(chain()).toarray()
    assert w[A, B] == w[B, A] == 0.8  # min(0.2 * 5, 0.8)
    assert w[C, D] == pytest.approx(0.2 * 2.5)
    assert w[A, C] == 0.0


def test_hand_worked_potentials_refractory_one() -> None:
    lif = LIF(leak=0.5, threshold=1.0, reset=0.0, refractory=1, steps=4)
    trace = lif.simulate(chain(), {A: 1.2})
    assert isinstance(trace, LIFTrace)
    expected = np.array(
        [
            # t0: V = I; A spikes and is silent at t1.
            [1.2, 0.0, 0.0, 0.0],
            # t1: A held at reset; B = 0.5*0 + w_AB*1 = 1.0 spikes.
            [0.0, 1.0, 0.0, 0.0],
            # t2: A free again: 0.5*0 + w_AB*1 = 1.0 spikes; B silent; C = w_BC*1 = 1.0 spikes.
            [1.0, 0.0, 1.0, 0.0],
            # t3: A, C silent; B = 0.5*0 + w_AB + w_BC = 2.0 spikes; D = 0.5*0 + w_CD = 0.5.
            [0.0, 1.0 + 1.0, 0.0, 0.5],
            # t4: B silent; A = w_AB = 1.0 and C = w_BC = 1.0 spike; D = 0.5 * 0.5 = 0.25.
            [1.0, 0.0, 1.0, 0.5 * 0.5],
        ]
    )
    np.testing.assert_array_equal(trace.potentials, expected)
    spikes = np.array(
        [
            [True, False, False, False],
            [False, True, False, False],
            [True, False, True, False],
            [False, True, False, False],
            [True, False, True, False],
        ]
    )
    np.testing.assert_array_equal(trace.spikes, spikes)
    assert trace.fired == [A, B, C]
    assert trace.spike_counts.tolist() == [3, 2, 2, 0]
    assert trace.first_spike.tolist() == [0, 1, 2, -1]
    assert trace.seed_currents.tolist() == [1.2, 0.0, 0.0, 0.0]


def test_longer_refractory_blocks_the_echo() -> None:
    # refractory=2: the wave passes A -> B -> C once; nobody is free when its neighbour fires.
    trace = LIF(leak=0.5, refractory=2, steps=4).simulate(chain(), {A: 1.2})
    expected = np.array(
        [
            [1.2, 0.0, 0.0, 0.0],
            [0.0, 1.0, 0.0, 0.0],
            [0.0, 0.0, 1.0, 0.0],
            [0.0, 0.0, 0.0, 0.5],  # A free but B did not fire at t2; D = w_CD
            [0.0, 0.0, 0.0, 0.5 * 0.5],
        ]
    )
    np.testing.assert_array_equal(trace.potentials, expected)
    assert trace.spike_counts.tolist() == [1, 1, 1, 0]
    assert trace.fired == [A, B, C]


def test_subthreshold_input_leaks_away() -> None:
    trace = LIF(leak=0.5, steps=4).simulate(chain(), {D: 0.8})
    np.testing.assert_allclose(trace.potentials[:, D], [0.8, 0.4, 0.2, 0.1, 0.05], rtol=0, atol=0)
    assert not trace.spikes.any()
    assert trace.fired == []


def test_reset_value_is_where_integration_restarts() -> None:
    # reset=0.5 and no refractory: A at t1 = leak*0.5 + 0 = 0.25 (B spiked at t1, not t0).
    trace = LIF(leak=0.5, reset=0.5, refractory=0, steps=1).simulate(chain(), {A: 1.0})
    assert trace.potentials[1].tolist() == [0.5 * 0.5, 1.0, 0.0, 0.0]


def test_vector_currents_and_bad_length() -> None:
    lif = LIF(steps=0)
    trace = lif.simulate(chain(), np.array([0.0, 2.0, 0.0, 0.0]))
    assert trace.spikes[0].tolist() == [False, True, False, False]
    with pytest.raises(ValueError, match="seed_currents"):
        lif.simulate(chain(), np.zeros(3))


def _frame(ids: list[str], scores: list[float]) -> pl.DataFrame:
    return pl.DataFrame(
        {"qid": ["q"] * len(ids), "mem_id": ids, "score": scores,
         "rank": list(range(1, len(ids) + 1))},
        schema={"qid": pl.String, "mem_id": pl.String, "score": pl.Float64, "rank": pl.Int64},
    )


# Store network (``_graph_fixtures``) with weight_scale=1.0: every synapse is 1.0. Seeds m0
# (score 1 -> norm 1) and m1 (0.5 -> 0.5) inject I(Next.js) = 1, I(PostgreSQL) = 1 + 0.5 and
# I(Amazon S3) = 0.5 (mentioned links only).
#   t0: Next.js, PostgreSQL spike.
#   t1: bot = 2 (two neighbours fired), Amazon S3 = 0.8*0.5 + 1 = 1.4, Redis = 1: all spike.
#   t2: Docker = 1 (from bot) spikes; everyone else is silent.
#   t3..t5: no input; all potentials are 0.
# Every entity spikes once. Activation (mentioned): m0 = 2, m1 = 2, m2 = 1, m3 = 1.
STORE_LIF = {"weight_scale": 1.0, "n_seeds": 2}


def test_transform_adds_fired_memories_and_reranks() -> None:
    store = build_graph_store()
    ctx = graph_ctx(store, "anything")
    out = LIF(**STORE_LIF).transform(_frame(["m0", "m1"], [1.0, 0.5]), ctx)
    check_frame(out, "lif")
    assert out["mem_id"].to_list() == ["m0", "m1", "m2", "m3"]
    assert out["activation"].to_list() == [2.0, 2.0, 1.0, 1.0]
    # score = score_norm + 0.5 * activation / 2
    assert out["score"].to_list() == [1.0 + 0.5 * 1.0, 0.5 + 0.5 * 1.0, 0.5 * 0.5, 0.5 * 0.5]
    assert out["rank"].to_list() == [1, 2, 3, 4]
    lif = ctx.trace["lif"]
    assert lif["fired"] == [ENTITY["Next.js"], ENTITY["PostgreSQL"], ENTITY["bot"],
                            ENTITY["Amazon S3"], ENTITY["Redis"], ENTITY["Docker"]]
    assert lif["seed_mem_ids"] == ["m0", "m1"]
    assert lif["added"] == ["m2", "m3"]
    assert lif["trace"].potentials[1].tolist() == [2.0, 0.0, 0.0, 0.8 * 0.5 + 1.0, 1.0, 0.0]


def test_transform_respects_visibility_and_top_k() -> None:
    store = build_graph_store()
    # m3 does not exist yet at T0 + 2.5 days: it is not added.
    ctx = graph_ctx(store, "anything", now=T0 + 2.5 * DAY)
    out = LIF(**STORE_LIF).transform(_frame(["m0", "m1"], [1.0, 0.5]), ctx)
    assert out["mem_id"].to_list() == ["m0", "m1", "m2"]
    top = LIF(**STORE_LIF, top_k=1).transform(_frame(["m0", "m1"], [1.0, 0.5]),
                                             graph_ctx(store, "anything"))
    assert top["mem_id"].to_list() == ["m0"]


def test_default_weights_stay_subthreshold() -> None:
    # weight_scale=0.2: the t1 drive of bot is 0.2*1 + 0.2*2 = 0.6 < 1; nothing new fires.
    store = build_graph_store()
    ctx = graph_ctx(store, "anything")
    out = LIF(n_seeds=2).transform(_frame(["m0", "m1"], [1.0, 0.5]), ctx)
    assert out["mem_id"].to_list() == ["m0", "m1"]
    assert out["activation"].to_list() == [2.0, 1.0]  # Next.js + PostgreSQL ; PostgreSQL
    assert out["score"].to_list() == [1.0 + 0.5 * 1.0, 0.5 + 0.5 * 0.5]
    assert ctx.trace["lif"]["trace"].potentials[1][ENTITY["bot"]] == pytest.approx(0.2 + 0.4)


def test_empty_frame_gives_empty_frame() -> None:
    store = build_graph_store()
    out = LIF().transform(_frame([], []), graph_ctx(store, "anything"))
    check_frame(out, "lif")
    assert out.height == 0


def test_params_are_stored_verbatim() -> None:
    lif = LIF(n_seeds=3, leak=0.7, roles=("mentioned", "about"))
    assert lif.get_params()["leak"] == 0.7
    assert lif.clone().get_params() == lif.get_params()
    with pytest.raises(ValueError, match="'steps'"):
        LIF(steps=-1).simulate(chain(), {A: 1.0})


def test_memories_added_by_activation_carry_their_store_rows() -> None:
    store = build_graph_store()
    ctx = graph_ctx(store, "anything")
    frame = _frame(["m0", "m1"], [1.0, 0.5]).with_columns(
        pl.Series("row", [store.idx("m0"), store.idx("m1")], dtype=pl.Int64)
    )
    out = LIF(**STORE_LIF).transform(frame, ctx)
    assert out["mem_id"].to_list() == ["m0", "m1", "m2", "m3"]
    assert out["row"].to_list() == [store.idx(m) for m in ("m0", "m1", "m2", "m3")]
    assert out["score"].to_list() == [1.0 + 0.5 * 1.0, 0.5 + 0.5 * 1.0, 0.5 * 0.5, 0.5 * 0.5]
