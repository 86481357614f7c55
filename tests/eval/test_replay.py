from types import SimpleNamespace

import numpy as np
import polars as pl
import pytest

from memlab.datasets.format import Dataset, MemoryOp, Query
from memlab.embed import HashingEmbedder
from memlab.eval.replay import ReplayConfig, Replayer, cacheable_prefix, qrels_frame
from memlab.memory.entities import _DOMAIN_RULE
from memlab.pipeline import Pipeline
from memlab.stages.base import Stage, candidates_from_rows

DAY = 86_400.0
T0 = 1_767_225_600.0


class AllVisible(Stage):
    """Every visible memory, newest first (a retriever with no parameters)."""

    cacheable = True

    def transform(self, frame, ctx):
        rows = np.flatnonzero(ctx.visible_mask())
        created = ctx.store.column("created_at")[rows]
        return candidates_from_rows(ctx, rows, created, "dense_score")


def dataset(ops, queries):
    return Dataset(None, {"name": "t"}, ops, queries)


def run(ds, **kw):
    config = ReplayConfig(**kw)
    rep = Replayer(ds, embedder=HashingEmbedder(dim=16), progress=False, config=config)
    res = rep.run(Pipeline([("all", AllVisible())], name="all"))
    return res, rep


def top(res, qid):
    return res.rankings.filter(pl.col("qid") == qid).sort("rank")["mem_id"].to_list()


def test_a_supersession_between_two_queries_changes_the_answer():
    ds = dataset(
        [
            MemoryOp.store("v1", T0, "Acme hosts on Heroku", "fact", key="host",
                           source_agent="a", client_id="acme"),
            MemoryOp.store("v2", T0 + 2 * DAY, "Acme hosts on Fly.io", "fact", key="host",
                           source_agent="a", client_id="acme"),
        ],
        [
            Query(0, "q1", T0 + DAY, "where does acme host", client_id="acme"),
            Query(0, "q2", T0 + 3 * DAY, "where does acme host", client_id="acme"),
        ],
    )
    res, _ = run(ds)
    assert top(res, "q1") == ["v1"]
    assert top(res, "q2") == ["v2"]


def test_only_the_past_is_visible_and_at_time_sees_history():
    ds = dataset(
        [
            MemoryOp.store("v1", T0, "CI red", "status", subject="ci", source_agent="a"),
            MemoryOp.store("v2", T0 + 2 * DAY, "CI green", "status", subject="ci",
                           source_agent="a"),
            MemoryOp.store("later", T0 + 5 * DAY, "Release cut", "decision", source_agent="a"),
        ],
        [
            Query(0, "q", T0 + 3 * DAY, "ci status", at_time=T0 + DAY),
            Query(0, "now", T0 + 3 * DAY, "ci status"),
        ],
    )
    res, _ = run(ds)
    assert top(res, "q") == ["v1"]
    assert top(res, "now") == ["v2"]


def test_ttl_expiry_and_access_feedback():
    ds = dataset(
        [
            MemoryOp.store("e1", T0, "Rotated logs", "event", source_agent="a", importance="low"),
            MemoryOp.store("e2", T0, "Cleared cache", "event", source_agent="a",
                           importance="low", client_id="x"),
        ],
        [
            Query(0, "early", T0 + DAY, "logs", client_id="global"),
            Query(0, "late", T0 + 40 * DAY, "anything"),
        ],
    )
    res, _ = run(ds)
    # e1 was returned (touched) by the early scoped query, so it survives the TTL; e2 expires.
    assert top(res, "early") == ["e1"]
    assert top(res, "late") == ["e1"]
    assert res.store.get("e2").expired_at == T0 + 40 * DAY
    res, _ = run(ds, touch_k=0)
    assert top(res, "late") == []


def test_duplicates_map_onto_the_first_record_and_forget_hides():
    ds = dataset(
        [
            MemoryOp.store("a", T0, "Deploys on Fridays", "fact", key="d", source_agent="x"),
            MemoryOp.store("b", T0 + 1, "Deploys on Fridays", "fact", key="d", source_agent="y"),
            MemoryOp.store("c", T0 + 2, "Lunch at noon", "event", source_agent="x"),
            MemoryOp.forget(T0 + 3, "c", "irrelevant"),
        ],
        [Query(0, "q", T0 + 4, "deploys", relevant={"b": 1})],
    )
    res, _ = run(ds)
    assert res.id_map == {"a": "a", "b": "a", "c": "c"}
    assert top(res, "q") == ["a"]
    assert qrels_frame(ds, res.id_map).to_dicts() == [{"qid": "q", "mem_id": "a", "relevance": 1}]
    assert res.store.get("a").observed_by == ["x", "y"]


def test_cacheable_prefix_is_shared_between_pipelines():
    ds = dataset(
        [MemoryOp.store("a", T0, "hello", "event", source_agent="x")],
        [Query(0, "q", T0 + 1, "hello")],
    )
    rep = Replayer(ds, embedder=HashingEmbedder(dim=16), progress=False)
    pipe = Pipeline([("all", AllVisible())], name="p1")
    assert cacheable_prefix(pipe) == 1
    rep.run(pipe)
    n_cached = sum(1 for k in rep.cache if k[0] == "prefix")
    rep.run(Pipeline([("all", AllVisible())], name="p2"))
    assert sum(1 for k in rep.cache if k[0] == "prefix") == n_cached == 1


def test_a_bad_operation_names_its_line():
    ds = dataset(
        [MemoryOp(7, "store", "d", T0, "We chose X", "decision", {"source_agent": "a"}),
         MemoryOp(8, "forget", None, T0 + 1, target="d", reason="no")],
        [Query(0, "q", T0 + 2, "x")],
    )
    with pytest.raises(ValueError, match=r"memories.jsonl:8: .*immutable"):
        run(ds)


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"ttl_days": -1}, r"field 'ttl_days' must be at least 0.0, got -1"),
        ({"ttl_days": float("nan")}, "field 'ttl_days' must be finite"),
        ({"touch_k": -1}, r"field 'touch_k' must be at least 0, got -1"),
        ({"depth": 0}, r"field 'depth' must be at least 1, got 0"),
    ],
)
def test_replay_refuses_bad_settings(kwargs, message) -> None:
    with pytest.raises(ValueError, match=message):
        Replayer(Dataset(None, {}, [], []), embedder=None, config=ReplayConfig(**kwargs))


def test_memory_texts_are_scrubbed_once_in_prepare_and_adopted_by_every_replay(scrub_calls):
    key = "AKIA" + "ABCDEFGHIJKLMNOP"
    ds = dataset(
        [
            MemoryOp.store("v1", T0, f"Acme deploy key {key}", "fact", source_agent="a",
                           client_id="acme"),
            MemoryOp.store("v2", T0 + 1, "Acme hosts on Fly.io", "fact", source_agent="a",
                           client_id="acme"),
        ],
        [Query(0, "q1", T0 + DAY, "acme", client_id="acme")],
    )
    rep = Replayer(ds, embedder=HashingEmbedder(dim=16), progress=False)
    rep.prepare()
    assert sorted(rep.scrubs_) == sorted([f"Acme deploy key {key}", "Acme hosts on Fly.io"])
    assert rep.scrubs_["Acme hosts on Fly.io"] == ("Acme hosts on Fly.io", 0)
    assert rep.scrubs_[f"Acme deploy key {key}"][1] == 1
    assert f"Acme deploy key {key}" in scrub_calls  # scrubbed here, in prepare
    scrub_calls.clear()
    pipe = Pipeline([("all", AllVisible())], name="all")
    for _ in range(2):
        res = rep.run(pipe)
        assert res.store.texts == [rep.scrubs_[op.text][0] for op in ds.ops]
        assert key not in res.store.texts[0]
    assert not set(scrub_calls) & set(rep.scrubs_)  # no memory text scrubbed again


def _scrub_dataset(key: str) -> Dataset:
    return dataset(
        [
            MemoryOp.store("v1", T0, f"Acme deploy key {key}", "fact", source_agent="a",
                           client_id="acme"),
            MemoryOp.store("v2", T0 + 1, "Acme hosts on Fly.io", "fact", source_agent="a",
                           client_id="acme"),
            MemoryOp.store("v3", T0 + 2, "Acme hosts on Fly.io", "fact", source_agent="b",
                           client_id="acme"),
        ],
        [Query(0, "q1", T0 + DAY, "acme", client_id="acme")],
    )


def test_a_large_datasets_scrubbing_is_kept_per_texts_and_source(tmp_path, monkeypatch,
                                                                  scrub_calls):
    """Above SCRUB_CACHE_MIN_TEXTS distinct texts, prepare keeps the scrubbed texts in the cache
    (keyed by memlab's source and the texts): a second replayer reads them instead of scrubbing
    again; other texts, or an entry that is not ours, are scrubbed anew."""
    from memlab.eval import replay

    monkeypatch.setenv("MEMLAB_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.setattr(replay, "SCRUB_CACHE_MIN_TEXTS", 2)
    key = "AKIA" + "ABCDEFGHIJKLMNOP"
    ds = _scrub_dataset(key)
    first = Replayer(ds, embedder=HashingEmbedder(dim=16), progress=False)
    first.prepare()
    # the texts, then the log's other strings (the agents)
    assert scrub_calls == [f"Acme deploy key {key}", "Acme hosts on Fly.io", "a", "b"]
    entries = list((tmp_path / "cache" / "scrubs").glob("*.json"))
    assert len(entries) == 1
    scrub_calls.clear()
    second = Replayer(ds, embedder=HashingEmbedder(dim=16), progress=False)
    second.prepare()
    assert scrub_calls == []  # read from the cache
    assert second.scrubs_ == first.scrubs_ == {
        f"Acme deploy key {key}": ("Acme deploy key [REDACTED:api_key]", 1),
        "Acme hosts on Fly.io": ("Acme hosts on Fly.io", 0),
    }
    assert second.strings_ == first.strings_ == {"a": ("a", 0), "b": ("b", 0)}
    assert second.candidates_ == first.candidates_ == {
        "params": [3, 60, 0.4],
        "rows": {"Acme deploy key [REDACTED:api_key]": [],
                 "Acme hosts on Fly.io": [[len("Acme hosts on "), _DOMAIN_RULE, "fly.io",
                                           "domain"]]},
    }
    res = second.run(Pipeline([("all", AllVisible())], name="all"))
    assert res.store.texts == ["Acme deploy key [REDACTED:api_key]",
                               "Acme hosts on Fly.io"]
    assert scrub_calls == []  # nothing scrubbed: texts and agents were read
    entries[0].write_text('{"scrubs": [["x", 0]]}')  # not the texts' entry: scrubbed anew
    third = Replayer(ds, embedder=HashingEmbedder(dim=16), progress=False)
    third.prepare()
    assert third.scrubs_ == first.scrubs_ and len(scrub_calls) == 4
    scrub_calls.clear()
    other = _scrub_dataset("AKIA" + "ZZZZZZZZZZZZZZZZ")
    Replayer(other, embedder=HashingEmbedder(dim=16), progress=False).prepare()
    assert scrub_calls == ["Acme deploy key AKIAZZZZZZZZZZZZZZZZ", "Acme hosts on Fly.io",
                           "a", "b"]
    assert len(list((tmp_path / "cache" / "scrubs").glob("*.json"))) == 2


def test_a_scrub_cache_key_tells_lists_of_texts_apart_and_names_what_scrubbing_runs_on(
    tmp_path, monkeypatch
):
    """Texts are hashed with their lengths (a text may hold the separator, NUL), and the key
    names the interpreter and the detect-secrets release the scrubber runs on."""
    from importlib import metadata

    from memlab.eval import replay
    from memlab.memory.scrub import default_scrubber

    monkeypatch.setenv("MEMLAB_CACHE_DIR", str(tmp_path))
    monkeypatch.setattr(replay, "SCRUB_CACHE_MIN_TEXTS", 2)
    store = SimpleNamespace(scrubber=default_scrubber(), max_text_chars=10_000)

    def name(texts: list[str], strings: tuple[str, ...] = ()) -> str:
        return replay._scrub_cache_entry(store, texts, strings)[0].name

    first = name(["a\0", "b"])
    assert name(["a", "\0b"]) != first
    assert name(["a\0", "b"]) == first
    assert name(["a\0", "b"], ("agent",)) != first  # the log's other strings are keyed too
    assert name(["a\0", "c"], ("b",)) != name(["a\0", "c", "b"])
    real = metadata.version
    monkeypatch.setattr(metadata, "version", lambda d: "0.0" if d == "detect-secrets" else real(d))
    assert name(["a\0", "b"]) != first
    monkeypatch.setattr(metadata, "version", real)
    monkeypatch.setattr("sys.version", "3.99.0 (other)")
    assert name(["a\0", "b"]) != first


def test_a_small_datasets_scrubbing_is_not_kept(tmp_path, monkeypatch):
    monkeypatch.setenv("MEMLAB_CACHE_DIR", str(tmp_path / "cache"))
    Replayer(_scrub_dataset("AKIA" + "ABCDEFGHIJKLMNOP"), embedder=HashingEmbedder(dim=16),
             progress=False).prepare()
    assert not (tmp_path / "cache").exists()


# --------------------------------------------------------------------------- number bounds


def test_consolidation_interval_below_one_second_is_refused():
    from memlab.eval.replay import MIN_INTERVAL_HOURS, ConsolidationConfig, ReplayConfig

    assert MIN_INTERVAL_HOURS == 1 / 3600
    for hours in (1e-12, 1e-300, MIN_INTERVAL_HOURS / 2):
        with pytest.raises(ValueError, match="must be 0 \\(no cycles\\) or at least"):
            ReplayConfig(consolidation=ConsolidationConfig(interval_hours=hours))
    assert ReplayConfig(consolidation=ConsolidationConfig(interval_hours=0.0)).consolidation
    ReplayConfig(consolidation=ConsolidationConfig(interval_hours=MIN_INTERVAL_HOURS))


def test_huge_integers_are_value_errors_naming_the_field():
    from memlab.eval.replay import ReplayConfig

    huge = 10**400
    cases = {
        "touch_k": "[replay]: field 'touch_k' must be at most 1000000, got an integer of 401 "
                   "digits",
        "ttl_days": "[replay]: field 'ttl_days' is too large, got an integer of 401 digits",
        "forget_retention_days": "[replay]: field 'forget_retention_days' is too large, got an "
                                 "integer of 401 digits",
    }
    for name, message in cases.items():
        with pytest.raises(ValueError) as info:
            ReplayConfig.from_mapping({name: huge}, where="[replay]")
        assert str(info.value) == message


def test_clock_cannot_spin_on_a_step_below_float_precision():
    from memlab.eval.replay import _Run

    run = _Run.__new__(_Run)
    run.config = SimpleNamespace(consolidation=SimpleNamespace(interval_hours=1e-12))
    run.origin, run.step, run.tick = 1.7e9, 1e-12 * 3600, 1
    run.next_tick = run.origin + run.step
    with pytest.raises(ValueError, match="does not advance the clock"):
        run._next_tick()



def test_a_query_at_a_time_before_a_merge_is_judged_on_the_memory_it_saw():
    # a (01:00) and b (02:00) merge at the 06:00 cycle; q_at asks what held at 03:00
    text = "Acme invoices go to billing at acme example with PO number"
    ds = dataset(
        [
            MemoryOp.store("a", T0 + 3600, text, "fact", key="k1", source_agent="x",
                           client_id="acme"),
            MemoryOp.store("b", T0 + 7200, text + " required", "fact", key="k2",
                           source_agent="x", client_id="acme"),
        ],
        [
            Query(0, "q_now", T0 + DAY, "where do Acme invoices go", client_id="acme",
                  relevant={"a": 1}),
            Query(0, "q_at", T0 + DAY, "where do Acme invoices go", client_id="acme",
                  at_time=T0 + 3 * 3600, relevant={"a": 1}),
        ],
    )
    config = ReplayConfig.from_mapping(
        {"consolidation": {"interval_hours": 6.0, "merge": "extractive", "merge_threshold": 0.6}}
    )
    rep = Replayer(ds, embedder=HashingEmbedder(dim=16), progress=False, config=config)
    res = rep.run(Pipeline([("all", AllVisible())], name="all"))
    merged = res.merges[res.id_map["a"]][1]
    assert ds.queries[1].seen_at == T0 + 3 * 3600 and ds.queries[0].seen_at == T0 + DAY
    qrels = qrels_frame(ds, res.id_map, res)
    assert dict(zip(qrels["qid"], qrels["mem_id"], strict=True)) == {
        "q_now": merged, "q_at": res.id_map["a"],
    }


def test_a_consolidate_line_cleans_up_with_the_replays_ttl():
    ds = dataset(
        [
            MemoryOp.store("g1", T0, "Globex kickoff call held", "event", importance="low",
                           source_agent="x", client_id="globex"),
            MemoryOp(0, "consolidate", None, T0 + 45 * DAY),
        ],
        [Query(0, "q1", T0 + 46 * DAY, "Globex kickoff call", client_id="globex")],
    )
    res, _ = run(ds, ttl_days=365.0, expire=False)
    assert top(res, "q1") == ["g1"]  # 45 days old: within the replay's 365-day TTL
    res, _ = run(ds, ttl_days=30.0, expire=False)
    assert top(res, "q1") == []  # the cycle's cleanup at 45 days, with a 30-day TTL


def test_every_clarify_question_surfaces_once_with_the_first_query_touching_it():
    # h1/i1 conflict on day 0; w1 (day 2) conflicts with both: three questions, h1 in two
    text = "Guest checkout is {} on the Acme storefront"
    ds = dataset(
        [
            MemoryOp.store("h1", T0, text.format("enabled"), "fact", key="k1", source_agent="x",
                           client_id="acme"),
            MemoryOp.store("i1", T0 + 3600, text.format("disabled"), "fact", key="k2",
                           source_agent="x", client_id="acme"),
            MemoryOp.store("w1", T0 + 2 * DAY, text.format("never enabled"), "fact", key="k3",
                           source_agent="x", client_id="acme"),
        ],
        [
            Query(0, "q1", T0 + DAY, "guest checkout", client_id="acme"),
            Query(0, "q2", T0 + 3 * DAY, "guest checkout", client_id="acme"),
            Query(0, "q3", T0 + 4 * DAY, "guest checkout", client_id="acme"),
        ],
    )
    res, _ = run(ds, conflict_policy="clarify", conflict_threshold=0.0, touch_k=3)
    q = "Which is current: “{}” or “{}”?"
    enabled, disabled, never = (text.format(w) for w in ("enabled", "disabled", "never enabled"))
    assert len(res.conflicts) == 3  # i1/h1, then w1 against each
    assert sorted(res.clarifications) == ["q1", "q2"]  # q3: nothing is left to ask
    assert res.clarifications["q1"] == [q.format(enabled, disabled)]
    # h1 holds two questions (its metadata only the latest): both are asked
    assert sorted(res.clarifications["q2"]) == sorted([q.format(enabled, never),
                                                       q.format(disabled, never)])


def test_a_memory_the_merge_policy_merged_is_judged_as_the_merged_memory():
    ds = dataset(
        [
            MemoryOp.store("h1", T0, "Guest checkout is enabled on the Acme storefront", "fact",
                           key="k1", source_agent="x", client_id="acme"),
            MemoryOp.store("h2", T0 + DAY, "Guest checkout is disabled on the Acme storefront",
                           "fact", key="k2", source_agent="x", client_id="acme"),
        ],
        [Query(0, "q1", T0 + 2 * DAY, "guest checkout", client_id="acme", relevant={"h1": 1})],
    )
    res, _ = run(ds, conflict_policy="merge", conflict_threshold=0.0)
    (event,) = res.conflicts
    assert event["action"] == "merged"
    merged = event["created"]
    assert res.merges == {res.id_map["h1"]: (T0 + DAY, merged),
                          res.id_map["h2"]: (T0 + DAY, merged)}
    qrels = qrels_frame(ds, res.id_map, res)
    assert qrels.rows() == [("q1", merged, 1)]
