"""Tests for memlab.stages.cluster_smoothing and memlab.stages.score_regularization.

The store: two sessions of client ``c`` (a pause of 2.5 hours between them) and two entities,
each mentioned once in each session::

    session 0: m0 "Green Lake", m1 (none), m2 "Blue Bottle"
    session 1: m3 "Green Lake", m4 "Blue Bottle"
"""

from __future__ import annotations

import numpy as np
import polars as pl
import pytest
import scipy.sparse as sp

from memlab.embed.hashing import HashingEmbedder
from memlab.memory.store import MemoryStore
from memlab.stages.base import CANDIDATE_SCHEMA, QueryContext, check_frame, rerank
from memlab.stages.cluster_smoothing import (
    ClusterSmoothing,
    mean_of_others,
    minmax,
    session_ids,
)
from memlab.stages.score_regularization import ScoreRegularization, regularize

T0 = 1_767_225_600.0


@pytest.fixture
def ctx() -> QueryContext:
    store = MemoryStore(embedder=HashingEmbedder(dim=16))
    for i, (t, text) in enumerate([
        (0, "We rowed on Green Lake."), (1, "The pizza was great."),
        (2, "Coffee at Blue Bottle."), (9000, "Back at Green Lake."), (9001, "Blue Bottle again."),
    ]):
        store.store(text, "event", client_id="c", source_agent="jon", now=T0 + t, id=f"m{i}")
    links = store.graph.links_frame().filter(pl.col("role") == "mentioned")
    names = {store.graph.entity(e).name: sorted(links.filter(pl.col("entity_idx") == e)
                                                 ["mem_idx"].to_list())
             for e in links["entity_idx"].unique().to_list()}
    assert names == {"Green Lake": [0, 3], "Blue Bottle": [2, 4]}  # the fixture's premise
    return QueryContext("q", "lake", store, T0 + 10_000)


def frame(scores: list[float]) -> pl.DataFrame:
    n = len(scores)
    return rerank(pl.DataFrame(
        {"qid": ["q"] * n, "mem_id": [f"m{i}" for i in range(n)], "score": scores,
         "rank": [0] * n}, schema=CANDIDATE_SCHEMA,
    ))


def test_minmax_and_sessions(ctx) -> None:
    np.testing.assert_allclose(minmax(np.array([5.0, 4.0, 1.0])), [1.0, 0.75, 0.0])
    np.testing.assert_array_equal(minmax(np.array([2.0, 2.0])), [1.0, 1.0])
    assert session_ids(ctx, 3600.0).tolist() == [0, 0, 0, 1, 1]
    assert session_ids(ctx, 10_000.0).tolist() == [0, 0, 0, 0, 0]


def test_mean_of_others() -> None:
    # item 0 is in groups A = {0, 1} and B = {0, 2, 3}; item 4 is alone in C
    groups = sp.csr_matrix(np.array([
        [1, 1, 0, 0, 0],
        [1, 0, 1, 1, 0],
        [0, 0, 0, 0, 1],
    ], dtype=np.float64))
    v = np.array([0.0, 1.0, 0.4, 0.8, 0.5])
    got = mean_of_others(groups, v)
    want = [
        (1.0 + (0.4 + 0.8) / 2) / 2,  # mean of A's others and of B's others
        0.0,                          # A's other is item 0
        (0.0 + 0.8) / 2,
        (0.0 + 0.4) / 2,
        0.0,                          # no other member anywhere
    ]
    np.testing.assert_allclose(got, want)


def test_cluster_smoothing_adds_session_and_entity_evidence(ctx) -> None:
    cands = frame([5.0, 4.0, 3.0, 2.0, 1.0])  # scaled: 1, .75, .5, .25, 0
    out = ClusterSmoothing(top_n=5, session_weight=1.0, entity_weight=1.0).transform(cands, ctx)
    check_frame(out, "cluster_smoothing")
    session = {"m0": (0.75 + 0.5) / 2, "m1": (1 + 0.5) / 2, "m2": (1 + 0.75) / 2,
               "m3": 0.0, "m4": 0.25}
    entity = {"m0": 0.25, "m1": 0.0, "m2": 0.0, "m3": 1.0, "m4": 0.5}
    scaled = {"m0": 1.0, "m1": 0.75, "m2": 0.5, "m3": 0.25, "m4": 0.0}
    got = dict(zip(out["mem_id"], out["score"], strict=True))
    assert got == pytest.approx({m: scaled[m] + session[m] + entity[m] for m in scaled})
    assert dict(zip(out["mem_id"], out["session_evidence"], strict=True)) == pytest.approx(session)
    # entities alone, weight 2: m3 (.25 + 2·1) > m0 (1 + 2·.25) > m4 (0 + 2·.5) > m1 > m2
    out = ClusterSmoothing(top_n=5, session_weight=0.0, entity_weight=2.0).transform(cands, ctx)
    assert out["mem_id"].to_list() == ["m3", "m0", "m4", "m1", "m2"]


def test_cluster_smoothing_head_only(ctx) -> None:
    # head m0, m1, m2 (scaled 1, .5, 0); m3 and m4 are neither evidence nor re-scored
    out = ClusterSmoothing(top_n=3, session_weight=1.0, entity_weight=1.0).transform(
        frame([5.0, 4.0, 3.0, 2.0, 1.0]), ctx
    )
    head = {"m0": 1 + (0.5 + 0) / 2, "m1": 0.5 + (1 + 0) / 2, "m2": 0 + (1 + 0.5) / 2}
    low = min(head.values())
    want = {**head, "m3": low - 1.0, "m4": low - 1.0 - 1.0}
    assert dict(zip(out["mem_id"], out["score"], strict=True)) == pytest.approx(want)
    assert out["mem_id"].to_list()[3:] == ["m3", "m4"]
    assert out["entity_evidence"].null_count() == 2


def test_regularize_closed_form() -> None:
    # a linked pair (y = 1, 0) and an isolated node (y = 1), α = 1/2:
    # (I − W/2)⁻¹ = [[4/3, 2/3], [2/3, 4/3]], so f = ½ · (4/3, 2/3); the isolated node keeps ½ y
    w = np.array([[0, 1, 0], [1, 0, 0], [0, 0, 0]], dtype=float)
    np.testing.assert_allclose(regularize(np.array([1.0, 0.0, 1.0]), w, 0.5),
                               [2 / 3, 1 / 3, 1 / 2])
    np.testing.assert_allclose(regularize(np.array([0.3, 0.7, 1.0]), w, 0.0), [0.3, 0.7, 1.0])


def test_score_regularization_over_sessions(ctx) -> None:
    out = ScoreRegularization(top_n=5, alpha=0.5, session_weight=1.0, entity_weight=0.0) \
        .transform(frame([5.0, 4.0, 3.0, 2.0, 1.0]), ctx)
    check_frame(out, "score_regularization")
    # session 0 is a triangle, S = W/2, y = (1, .75, .5) = .75·1 + (.25, 0, −.25):
    # eigenvalue 1 − α on the ones vector and 1 + α/2 off it, so f = ½(1.5 + (.2, 0, −.2));
    # session 1 is a pair with y = (.25, 0): f = ½ (4/3·.25, 2/3·.25)
    want = {"m0": 0.85, "m1": 0.75, "m2": 0.65, "m3": 1 / 6, "m4": 1 / 12}
    assert dict(zip(out["mem_id"], out["score"], strict=True)) == pytest.approx(want)
    assert out["regularized_score"].to_list() == pytest.approx(out["score"].to_list())


def test_score_regularization_affinity(ctx) -> None:
    stage = ScoreRegularization(session_weight=0.5, entity_weight=2.0)
    w = stage.affinity(np.arange(5), ctx)
    want = np.zeros((5, 5))
    for a, b in [(0, 1), (0, 2), (1, 2), (3, 4)]:
        want[a, b] = want[b, a] = 0.5
    for a, b in [(0, 3), (2, 4)]:
        want[a, b] = want[b, a] = 2.0
    np.testing.assert_array_equal(w, want)


def test_conversational_session_is_conversational_plus_session_smoothing() -> None:
    from memlab.pipeline import load_pipeline

    base = load_pipeline("conversational").to_config()
    cfg = load_pipeline("conversational-session").to_config()
    assert cfg["steps"] == [*base["steps"], "session"]
    for key, table in base.items():
        if key not in ("name", "description", "steps"):
            assert cfg[key] == table, key
    assert cfg["session"] == {
        "stage": "cluster_smoothing", "top_n": 50, "session_weight": 0.5, "entity_weight": 0.0,
        "max_gap_seconds": 3600.0, "roles": ["mentioned"],
    }
