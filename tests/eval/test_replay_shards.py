"""Tests for replaying a pipeline's queries in shards (memlab.eval.replay.query_shards and
merge_shards, and run_experiment's ``shards``): where queries leave the replay's state alone,
the joined shards are the whole replay, byte for byte."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import polars as pl
import pytest

from memlab.datasets.format import Query, load_dataset
from memlab.embed import HashingEmbedder
from memlab.eval.executor import JoblibExecutor, SerialExecutor
from memlab.eval.experiment import _shard_count, load_pipeline, memories_frame, run_experiment
from memlab.eval.replay import (
    ReplayConfig,
    Replayer,
    merge_shards,
    queries_are_read_only,
    query_shards,
    replay_order,
)

ROOT = Path(__file__).resolve().parents[2]
LIFECYCLE = ROOT / "datasets" / "agent-lifecycle"
HANDMADE = ROOT / "tests" / "fixtures" / "handmade"


def _q(qid: str, ts: float) -> Query:
    return Query(0, qid, ts, "text")


def test_replay_order_is_by_time_then_as_listed() -> None:
    qs = [_q("a", 3.0), _q("b", 1.0), _q("c", 3.0), _q("d", 2.0)]
    assert [q.qid for q in replay_order(qs)] == ["b", "d", "a", "c"]


def test_query_shards_are_contiguous_even_runs_of_the_replay_order() -> None:
    qs = [_q(f"q{i}", float(10 - i)) for i in range(7)]  # listed newest first
    shards = query_shards(qs, 3)
    # 7 queries in 3 shards: cuts at 7*1//3 = 2 and 7*2//3 = 4
    assert [[q.qid for q in s] for s in shards] == [
        ["q6", "q5"], ["q4", "q3"], ["q2", "q1", "q0"],
    ]
    assert [[q.qid for q in s] for s in query_shards(qs, 1)] == [
        ["q6", "q5", "q4", "q3", "q2", "q1", "q0"],
    ]


@pytest.mark.parametrize("n", [0, -1, 1.5, True])
def test_query_shards_refuses_a_bad_count(n: object) -> None:
    with pytest.raises(ValueError, match="positive int"):
        query_shards([_q("a", 1.0)], n)  # type: ignore[arg-type]


def test_only_touch_free_expiry_free_replays_are_read_only() -> None:
    assert queries_are_read_only(ReplayConfig(touch_k=0, expire=False))
    assert not queries_are_read_only(ReplayConfig(touch_k=1, expire=False))
    assert not queries_are_read_only(ReplayConfig(touch_k=0, expire=True))


@pytest.mark.parametrize("n", [2, 3, 5])
def test_joined_shards_equal_the_whole_replay_with_consolidation_conflicts_and_purges(
    n: int,
) -> None:
    """agent-lifecycle consolidates every 6 hours, merges, resolves conflicts by authority and
    purges forgotten memories after 30 days: all of it follows the clock, so a shard that skips
    the earlier queries ends with the whole replay's store and logs."""
    ds = load_dataset(LIFECYCLE)
    config = dataclasses.replace(ReplayConfig.from_dataset(ds), touch_k=0, expire=False)
    pipe = load_pipeline("hybrid")
    whole = Replayer(ds, embedder=HashingEmbedder(dim=64), config=config, progress=False)
    expected = whole.run(pipe)
    assert expected.consolidation and expected.merges and expected.conflicts  # all exercised
    sharded = Replayer(ds, embedder=HashingEmbedder(dim=64), config=config, progress=False)
    parts = [sharded.run(pipe, queries=s) for s in query_shards(ds.queries, n)]
    got = merge_shards(parts)
    assert got.rankings.equals(expected.rankings)
    assert got.rankings["qid"].unique(maintain_order=True).to_list() == [
        q.qid for q in replay_order(ds.queries)
    ]
    assert got.timings.select("qid", "stage").equals(expected.timings.select("qid", "stage"))
    for name in ("contexts", "flags", "archived", "clarifications", "consolidation",
                 "conflicts", "merges", "purged", "id_map"):
        assert getattr(got, name) == getattr(expected, name), name
    assert memories_frame(got).equals(memories_frame(expected))


@pytest.mark.parametrize(
    "name", ["bm25", "dense", "graph", "rrf", "hybrid", "conversational", "conversational-session"]
)
def test_every_shipped_pipeline_keeps_no_state_across_queries(name: str) -> None:
    """A stage that carried state from one query to the next (beyond caches of the store)
    would answer a shard's first query differently from the whole replay."""
    ds = load_dataset(LIFECYCLE)
    config = dataclasses.replace(ReplayConfig.from_dataset(ds), touch_k=0, expire=False)
    pipe = load_pipeline(name)
    expected = Replayer(ds, embedder=HashingEmbedder(dim=64), config=config,
                        progress=False).run(pipe)
    sharded = Replayer(ds, embedder=HashingEmbedder(dim=64), config=config, progress=False)
    parts = [sharded.run(pipe.clone(), queries=s) for s in query_shards(ds.queries, 4)]
    assert merge_shards(parts).rankings.equals(expected.rankings)


def test_merge_shards_needs_a_replay() -> None:
    with pytest.raises(ValueError, match="no replays"):
        merge_shards([])


def test_shard_count() -> None:
    two = JoblibExecutor(n_jobs=2)
    assert _shard_count(None, two, 1, 600, 250, True) == 2  # one pipeline, two workers
    assert _shard_count(None, two, 1, 499, 250, True) == 1  # shards of fewer than 250 queries
    assert _shard_count(None, two, 2, 600, 250, True) == 1  # no idle worker to fill
    assert _shard_count(None, JoblibExecutor(n_jobs=8), 2, 10_000, 250, True) == 4
    assert _shard_count(None, SerialExecutor(), 1, 10_000, 250, True) == 1
    assert _shard_count(None, two, 1, 600, 250, False) == 1  # queries change the state
    assert _shard_count(3, SerialExecutor(), 1, 10, 250, True) == 3  # asked for
    assert _shard_count(3, SerialExecutor(), 1, 2, 250, True) == 2  # never an empty shard
    assert _shard_count(3, SerialExecutor(), 1, 10, 250, False) == 1


def test_an_experiment_in_shards_writes_what_one_replay_writes(tmp_path: Path) -> None:
    ds = load_dataset(LIFECYCLE)
    config = dataclasses.replace(ReplayConfig.from_dataset(ds), touch_k=0, expire=False)
    kw = dict(pipelines=["bm25", "hybrid"], embedder=HashingEmbedder(dim=64), replay=config,
              progress=False, n_resamples=200, write_report=False)
    one = run_experiment(ds, out=tmp_path / "one", **kw)
    three = run_experiment(ds, out=tmp_path / "three", shards=3, **kw)
    for name in ("metrics.json", "per_query.parquet", "rankings.parquet",
                 "comparison.parquet"):
        assert (tmp_path / "one" / name).read_bytes() == (tmp_path / "three" / name).read_bytes()
    assert one.metrics == three.metrics
    assert three.replays["hybrid"].rankings.height == one.replays["hybrid"].rankings.height > 0


@pytest.mark.parametrize("bad", [0, -2, 1.0, True])
def test_run_experiment_refuses_a_bad_shard_count(bad: object) -> None:
    with pytest.raises(ValueError, match="shards must be"):
        run_experiment(HANDMADE, ["bm25"], shards=bad, progress=False)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="min_shard_queries"):
        run_experiment(HANDMADE, ["bm25"], min_shard_queries=bad,  # type: ignore[arg-type]
                       progress=False)


def test_frames_are_polars() -> None:  # the merged frames keep their schema
    ds = load_dataset(HANDMADE)
    config = ReplayConfig(touch_k=0, expire=False)
    rep = Replayer(ds, embedder=HashingEmbedder(dim=32), config=config, progress=False)
    pipe = load_pipeline("bm25")
    got = merge_shards([rep.run(pipe, queries=s) for s in query_shards(ds.queries, 2)])
    assert got.rankings.schema == pl.Schema(
        {"pipeline": pl.String, "qid": pl.String, "rank": pl.Int64, "mem_id": pl.String,
         "score": pl.Float64}
    )
    assert got.rankings.equals(rep.run(pipe).rankings)


def test_stages_with_their_own_vectors_keep_no_state_across_queries(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``conversational-mpnet``'s shape (dense and MaxP on a stage embedder, a fifth dense list
    from an asymmetric pair), with small registered embedders in place of the models."""
    monkeypatch.setenv("MEMLAB_CACHE_DIR", str(tmp_path))
    ds = load_dataset(LIFECYCLE)
    config = dataclasses.replace(ReplayConfig.from_dataset(ds), touch_k=0, expire=False)
    pipe = load_pipeline("conversational-mpnet").set_params(
        dense__embedder="test-hash32-a", maxp__embedder="test-hash32-a",
        dense_e5__embedder="test-hash32-a", dense_e5__query_embedder="test-hash32-b",
    )
    expected = Replayer(ds, embedder=HashingEmbedder(dim=64), config=config,
                        progress=False).run(pipe)
    sharded = Replayer(ds, embedder=HashingEmbedder(dim=64), config=config, progress=False)
    parts = [sharded.run(pipe.clone(), queries=s) for s in query_shards(ds.queries, 4)]
    assert merge_shards(parts).rankings.equals(expected.rankings)
