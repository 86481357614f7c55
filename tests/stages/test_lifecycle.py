"""Tests for memlab.stages.lifecycle (docs/design.md §D0.5's decay, boost and similarity floor)."""

from __future__ import annotations

import math

import polars as pl
import pytest

from memlab.memory.store import MemoryStore
from memlab.stages.base import CANDIDATE_SCHEMA, QueryContext, check_frame
from memlab.stages.lifecycle import Lifecycle
from memlab.timeutil import SECONDS_PER_DAY

DAY = SECONDS_PER_DAY


def _frame(ids: list[str], **columns: list[float | None]) -> pl.DataFrame:
    data: dict[str, list[object]] = {
        "qid": ["q"] * len(ids),
        "mem_id": ids,
        "score": columns.pop("score", [1.0] * len(ids)),
        "rank": list(range(1, len(ids) + 1)),
    }
    schema = dict(CANDIDATE_SCHEMA)
    for name, values in columns.items():
        data[name] = values
        schema[name] = pl.Float64()
    return pl.DataFrame(data, schema=schema)


@pytest.fixture
def aged(now: float) -> MemoryStore:
    """Memories of known age and access count, all with base confidence 1."""
    store = MemoryStore()
    for mid, type_, days in [
        ("fact-7", "fact", 7),
        ("fact-30", "fact", 30),
        ("fact-90", "fact", 90),
        ("status-30", "status", 30),
        ("event-90", "event", 90),
        ("decision-90", "decision", 90),
        ("boost-1", "decision", 1),
        ("boost-7", "decision", 1),
        ("boost-15", "decision", 1),
    ]:
        store.store(f"memory {mid}", type_, source_agent="t", now=now - days * DAY, id=mid)
    for mid, n in [("boost-1", 1), ("boost-7", 7), ("boost-15", 15)]:
        for _ in range(n):
            store.touch([mid], now=now - 0.5 * DAY)
    return store


def _factors(store: MemoryStore, now: float, ids: list[str], **params: object) -> dict:
    ctx = QueryContext(qid="q", text="x", store=store, now=now)
    out = Lifecycle(**params).transform(_frame(ids), ctx)
    check_frame(out, "lifecycle")
    return dict(zip(out["mem_id"], out["lifecycle_factor"], strict=True))


def test_seed_decay_table(aged: MemoryStore, now: float) -> None:
    f = _factors(aged, now, ["fact-7", "fact-30", "fact-90", "status-30"])
    assert f["fact-7"] == pytest.approx(0.98**7, rel=1e-12)
    assert f["fact-30"] == pytest.approx(0.98**30, rel=1e-12)
    assert f["fact-90"] == pytest.approx(0.98**90, rel=1e-12)
    assert f["status-30"] == pytest.approx(0.98**30, rel=1e-12)
    # design §D0.5's table: 30 days -> 0.545, 90 days -> 0.162. Its 7-day entry reads 0.869, but
    # its own formula gives 0.98**7 = 0.86813 -> 0.868; the formula is what the stage computes.
    assert round(f["fact-30"], 3) == 0.545
    assert round(f["fact-90"], 3) == 0.162
    assert round(f["fact-7"], 3) == 0.868


def test_seed_boost_table(aged: MemoryStore, now: float) -> None:
    f = _factors(aged, now, ["boost-1", "boost-7", "boost-15"])
    assert f["boost-1"] == pytest.approx(1 + 0.3 * math.log2(1 + 1), rel=1e-12)
    assert f["boost-7"] == pytest.approx(1 + 0.3 * math.log2(7 + 1), rel=1e-12)
    assert f["boost-15"] == pytest.approx(1 + 0.3 * math.log2(15 + 1), rel=1e-12)
    assert [round(f[k], 3) for k in ("boost-1", "boost-7", "boost-15")] == [1.3, 1.9, 2.2]


def test_events_and_decisions_do_not_decay(aged: MemoryStore, now: float) -> None:
    f = _factors(aged, now, ["event-90", "decision-90", "fact-90"])
    assert f["event-90"] == 1.0
    assert f["decision-90"] == 1.0
    assert f["fact-90"] < 1.0
    g = _factors(aged, now, ["event-90"], decaying_types=("fact", "status", "event"))
    assert g["event-90"] == pytest.approx(0.98**90, rel=1e-12)


def test_a_rule_does_not_decay_and_a_preference_does(now: float) -> None:
    # design §D4.3: "rule and decision do not decay, while fact, summary, and preference
    # receive recency weighting"; §D4.1's types are facts carrying metadata.memory_type
    store = MemoryStore()
    for mid, kind in [("rule", "rule"), ("pref", "preference"), ("summ", "summary"),
                      ("fact", None), ("odd", "made-up")]:
        meta = None if kind is None else {"memory_type": kind}
        store.store(f"memory {mid}", "fact", key=mid, source_agent="t", now=now - 30 * DAY,
                    id=mid, metadata=meta)
    assert store.column("kind").tolist() == ["rule", "preference", "summary", "fact", "fact"]
    f = _factors(store, now, ["rule", "pref", "summ", "fact", "odd"])
    assert f == pytest.approx({"rule": 1.0, "pref": 0.98**30, "summ": 0.98**30,
                               "fact": 0.98**30, "odd": 0.98**30}, rel=1e-12)


def test_parameters_change_the_factor(aged: MemoryStore, now: float) -> None:
    f = _factors(aged, now, ["fact-7", "boost-7"], decay_factor=0.9, boost_weight=0.5)
    assert f["fact-7"] == pytest.approx(0.9**7, rel=1e-12)
    assert f["boost-7"] == pytest.approx(1 + 0.5 * 3, rel=1e-12)


def test_effective_score_ranks_the_candidates(aged: MemoryStore, now: float) -> None:
    ctx = QueryContext(qid="q", text="x", store=aged, now=now)
    frame = _frame(["fact-90", "fact-7", "event-90"], score=[0.9, 0.5, 0.4])
    out = Lifecycle().transform(frame, ctx)
    assert out["mem_id"].to_list() == ["fact-7", "event-90", "fact-90"]
    assert out["effective_score"].to_list() == pytest.approx(
        [0.5 * 0.98**7, 0.4 * 1.0, 0.9 * 0.98**90], rel=1e-12
    )
    assert out["score"].to_list() == out["effective_score"].to_list()
    assert out["rank"].to_list() == [1, 2, 3]


def test_an_access_changes_the_order(now: float) -> None:
    store = MemoryStore()
    for mid in ("fact-a", "fact-b"):
        store.store(f"memory {mid}", "fact", source_agent="t", now=now - 20 * DAY, id=mid)
    ctx = QueryContext(qid="q", text="x", store=store, now=now)
    stage = Lifecycle()
    before = stage.transform(_frame(["fact-a", "fact-b"]), ctx)
    assert before["mem_id"].to_list() == ["fact-a", "fact-b"]  # a tie, broken by mem_id
    store.touch(["fact-b"], now=now - 2 * DAY)
    after = stage.transform(_frame(["fact-a", "fact-b"]), ctx)
    assert after["mem_id"].to_list() == ["fact-b", "fact-a"]
    assert after["effective_score"].to_list() == pytest.approx(
        [0.98**2 * 1.3, 0.98**20], rel=1e-12
    )


def test_min_similarity_drops_weak_vector_only_candidates(aged: MemoryStore, now: float) -> None:
    ctx = QueryContext(qid="q", text="x", store=aged, now=now)
    ids = ["event-90", "decision-90", "boost-1", "boost-7", "boost-15"]
    frame = _frame(
        ids,
        dense_score=[0.2, 0.2, 0.35, None, 0.1],
        bm25_score=[None, 1.5, None, 2.0, None],
    )
    out = Lifecycle().transform(frame, ctx)
    # event-90: vector only, below 0.3 -> dropped; decision-90: also a keyword hit -> kept;
    # boost-1: above the floor; boost-7: keyword only; boost-15: vector only, below -> dropped
    assert sorted(out["mem_id"]) == ["boost-1", "boost-7", "decision-90"]
    kept = Lifecycle(min_similarity=-1.0).transform(frame, ctx)
    assert kept.height == 5
    graph = _frame(["event-90"], dense_score=[0.2], graph_score=[0.8])
    assert Lifecycle().transform(graph, ctx)["mem_id"].to_list() == ["event-90"]


def test_invisible_candidates_are_dropped(store, make_ctx) -> None:
    frame = _frame(["acme-stack-1", "acme-stack-2", "globex-cms", "brain-sqlite"])
    out = Lifecycle().transform(frame, make_ctx("x", client_id="acme"))
    assert sorted(out["mem_id"]) == ["acme-stack-2", "brain-sqlite"]


def test_relevance_column(aged: MemoryStore, now: float) -> None:
    ctx = QueryContext(qid="q", text="x", store=aged, now=now)
    frame = _frame(["fact-7", "event-90"], score=[0.1, 0.9], rrf_score=[0.5, 0.25])
    out = Lifecycle(relevance="rrf_score").transform(frame, ctx)
    assert out["mem_id"].to_list() == ["fact-7", "event-90"]
    assert out["effective_score"].to_list() == pytest.approx([0.5 * 0.98**7, 0.25], rel=1e-12)
    with pytest.raises(ValueError, match="relevance column 'activation'"):
        Lifecycle(relevance="activation").transform(frame, ctx)


def test_empty_frame_gets_the_columns(aged: MemoryStore, now: float) -> None:
    ctx = QueryContext(qid="q", text="x", store=aged, now=now)
    out = Lifecycle().transform(_frame([]), ctx)
    assert out.height == 0
    assert {"lifecycle_factor", "effective_score"} <= set(out.columns)
    check_frame(out, "lifecycle")
