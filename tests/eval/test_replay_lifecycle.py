import numpy as np
import polars as pl
import pytest

from memlab.datasets.format import Dataset, MemoryOp, Query
from memlab.embed import HashingEmbedder
from memlab.eval.experiment import memories_frame, score_rankings
from memlab.eval.replay import ConsolidationConfig, ReplayConfig, Replayer, qrels_frame
from memlab.pipeline import Pipeline
from memlab.stages.base import Stage, candidates_from_rows

DAY = 86_400.0
HOUR = 3_600.0
T0 = 1_767_225_600.0  # midnight UTC


class AllVisible(Stage):
    def transform(self, frame, ctx):
        rows = np.flatnonzero(ctx.visible_mask())
        return candidates_from_rows(ctx, rows, -rows.astype(float), "dense_score")


def replay(ops, queries, meta=None, **cfg):
    ds = Dataset(None, {"name": "t", **(meta or {})}, ops, queries)
    config = ReplayConfig.from_dataset(ds, **cfg)
    rep = Replayer(ds, embedder=HashingEmbedder(dim=64), progress=False, config=config)
    return ds, rep.run(Pipeline([("all", AllVisible())], name="all"))


def test_dataset_defaults_and_overrides():
    ds = Dataset(None, {"replay": {"expire": False, "touch_k": 0,
                                   "consolidation": {"interval_hours": 6}}}, [], [])
    cfg = ReplayConfig.from_dataset(ds, touch_k=3)
    assert (cfg.expire, cfg.touch_k, cfg.ttl_days, cfg.consolidation.interval_hours) == (
        False, 3, 30.0, 6)
    assert cfg.to_dict()["source"] == {
        "consolidation.interval_hours": "dataset", "expire": "dataset", "touch_k": "override"
    }
    assert cfg.with_params(consolidation__merge_threshold=0.8).consolidation.merge_threshold == 0.8
    with pytest.raises(ValueError, match=r"dataset.toml \[replay\]: unknown field 'ttl'"):
        ReplayConfig.from_dataset(Dataset(None, {"replay": {"ttl": 3}}, [], []))
    with pytest.raises(TypeError, match="field 'touch_k' must be an int"):
        ReplayConfig(touch_k=1.5)
    with pytest.raises(ValueError, match="'maybe' is not one of"):
        ReplayConfig(conflict_policy="maybe")


def test_a_cycle_merges_and_the_merged_fact_answers_later_queries():
    ops = [
        MemoryOp.store("a", T0 + HOUR, "Acme launch owner is Dana", "fact", client_id="c"),
        MemoryOp.store("b", T0 + 2 * HOUR, "Acme launch owner is Dana Lee", "fact",
                       client_id="c"),
    ]
    qs = [
        Query(0, "before", T0 + 3 * HOUR, "acme launch", client_id="c",
              relevant={"a": 1, "b": 1}),
        Query(0, "after", T0 + 7 * HOUR, "acme launch", client_id="c",
              relevant={"a": 1, "b": 1}),
    ]
    cons = {"interval_hours": 6.0, "merge_threshold": 0.5}
    ds, res = replay(ops, qs, meta={"replay": {"consolidation": cons}})
    [cycle] = res.consolidation
    assert cycle["at"] == T0 + 6 * HOUR
    [(merged, sources)] = cycle["merged_from"].items()
    assert sources == ["a", "b"]
    assert res.store.get(merged).text == "Acme launch owner is Dana. Acme launch owner is Dana Lee."
    assert res.resolve("a", T0 + 3 * HOUR) == "a" and res.resolve("a", T0 + 7 * HOUR) == merged
    qrels = qrels_frame(ds, res.id_map, res)
    assert qrels.filter(pl.col("qid") == "after")["mem_id"].to_list() == [merged]
    pq = score_rankings(ds, res, ["R_all@1"])
    assert pq["value"].to_list() == [1.0, 0.0]  # after, before (sorted by qid)


def test_write_time_policy_and_conflict_metric():
    ops = [
        MemoryOp.store("h", T0, "Acme checkout supports guest orders", "fact", client_id="c",
                       authority="human"),
        MemoryOp.store("i", T0 + HOUR, "Acme checkout does not support guest orders", "fact",
                       client_id="c", authority="inferred", metadata={"contradicts": "h"}),
    ]
    qs = [Query(0, "q", T0 + 2 * HOUR, "guest orders", client_id="c", relevant={"h": 1})]
    _, res = replay(ops, qs, conflict_policy="authority", conflict_threshold=0.0)
    assert [(e["action"], e["winner"], e["rule"]) for e in res.conflicts] == [
        ("rejected", "h", "authority")]
    assert res.rankings["mem_id"].to_list() == ["h"]
    ds, res = replay(ops, qs)
    mem = memories_frame(res)
    assert mem.filter(pl.col("mem_id") == "h")["contradicts"].to_list() == [["i"]]
    pq = score_rankings(ds, res, ["conflict@10"])
    assert pq["value"].to_list() == [1.0]


def test_archival_and_purge():
    ops = [
        MemoryOp.store("old", T0, "Acme uses Jenkins for builds", "fact", client_id="c"),
        MemoryOp.store("gone", T0, "Temporary token note", "fact", client_id="c"),
        MemoryOp.forget(T0 + DAY, "gone", "wrong"),
    ]
    qs = [Query(0, "q", T0 + 240 * DAY, "builds", client_id="c")]
    cons = ConsolidationConfig(interval_hours=24.0, merge="none")
    ds = Dataset(None, {"name": "t"}, ops, qs)
    cfg = ReplayConfig(consolidation=cons, forget_retention_days=30.0)
    res = Replayer(ds, embedder=HashingEmbedder(dim=64), progress=False, config=cfg).run(
        Pipeline([("all", AllVisible())], name="all"))
    # exp(−0.01 × days) < 0.1 once days > 100 ln 10 = 230.3: archived on day 231.
    archived_at = [c["at"] for c in res.consolidation if c["archived"]]
    assert archived_at == [T0 + 231 * DAY]
    assert res.archived == {"q": ["old"]}
    assert score_rankings(ds, res, ["archived@10"])["value"].to_list() == [1.0]
    assert res.purged == [(T0 + 31 * DAY, "gone")]
    assert res.store.get("gone").text == ""


def test_more_cycles_than_the_bound_are_refused_before_any_write():
    from memlab.eval import replay as rp

    ops = [MemoryOp.store("a", T0, "Acme uses Jenkins", "fact", client_id="c")]
    # One cycle a second (the shortest interval) from midnight to a query 12 days later:
    # ticks at T0 + 1 s … T0 + 12 × 86,400 s, 1,036,800 of them (above 1,000,000).
    qs = [Query(0, "q", T0 + 12 * DAY, "builds", client_id="c")]
    cons = ConsolidationConfig(interval_hours=1 / 3600, merge="none")
    ds = Dataset(None, {"name": "t"}, ops, qs)
    rep = Replayer(ds, embedder=HashingEmbedder(dim=64), progress=False,
                   config=ReplayConfig(consolidation=cons))
    with pytest.raises(ValueError) as info:
        rep.run(Pipeline([("all", AllVisible())], name="all"))
    assert str(info.value) == (
        "replay configuration [consolidation]: field 'interval_hours' = 0.0002777777777777778 "
        "would run 1,036,800 cycles over the 12.0 simulated days replayed (at most 1,000,000): "
        "use a longer interval"
    )
    assert rp.MAX_CYCLES == 1_000_000
    # a shard of the replay (an early query only) is refused over the whole replay's span
    early = Query(0, "early", T0 + DAY, "builds", client_id="c")
    ds2 = Dataset(None, {"name": "t"}, ops, [early, *qs])
    rep2 = Replayer(ds2, embedder=HashingEmbedder(dim=64), progress=False,
                    config=ReplayConfig(consolidation=cons))
    with pytest.raises(ValueError) as again:
        rep2.run(Pipeline([("all", AllVisible())], name="all"), queries=[early])
    assert str(again.value) == str(info.value)
    # 11 days (950,400 cycles) stays within the bound: the check lets it through.
    run = rp._Run(rep, rep.config, "all")
    run.check_cycles(T0 + 11 * DAY)


def test_a_replay_says_no_write_warnings(caplog):
    import logging

    ops = [MemoryOp.store("a", T0, "Acme uses Jenkins", "fact", client_id="c"),
           MemoryOp.store("b", T0, "Deploy is green", "status", client_id="c")]
    with caplog.at_level(logging.WARNING, logger="memlab.store"):
        _, res = replay(ops, [Query(0, "q", T0 + HOUR, "jenkins", client_id="c")])
    assert [r.getMessage() for r in caplog.records] == []
    assert len(res.store) == 2
