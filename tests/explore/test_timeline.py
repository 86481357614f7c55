"""One client's memory over time.

The replayed dataset (days after ``T0``), client ``acme`` unless said otherwise::

    day 0    f1  fact host "Acme hosts on Heroku"
    day 0    e1  event (low) "Old backup note"
    day 1    e2  event "Wrong note", forgotten on day 1.5
    day 1    g1  fact for client globex
    day 2    f2  fact host "Acme hosts on Fly.io"    (supersedes f1)
    day 3    q1  query: the newest visible memory, f2, is touched
    day 4    f3  fact host "Acme hosts on AWS"       (supersedes f2)
    day 40   q2  query: e1 (40 days old, never touched) expires first; f3 is touched
"""

from __future__ import annotations

import sys
from pathlib import Path

import polars as pl
import pytest

from memlab.datasets.format import Dataset, MemoryOp, Query
from memlab.embed import HashingEmbedder
from memlab.explore import session
from memlab.explore import timeline as tl
from memlab.pipeline import Pipeline

if str(Path(__file__).parent) not in sys.path:  # --import-mode=importlib: helpers by path
    sys.path.insert(0, str(Path(__file__).parent))
from _explore_fixtures import DAY, T0, Newest  # noqa: E402


def _dataset() -> Dataset:
    acme = {"client_id": "acme", "source_agent": "a"}
    ops = [
        MemoryOp.store("f1", T0, "Acme hosts on Heroku", "fact", key="host", **acme),
        MemoryOp.store("e1", T0, "Old backup note", "event", importance="low", **acme),
        MemoryOp.store("e2", T0 + DAY, "Wrong note", "event", **acme),
        MemoryOp.store("g1", T0 + DAY, "Globex uses WordPress", "fact", key="cms",
                       client_id="globex", source_agent="a"),
        MemoryOp.forget(T0 + 1.5 * DAY, "e2", "incorrect"),
        MemoryOp.store("f2", T0 + 2 * DAY, "Acme hosts on Fly.io", "fact", key="host", **acme),
        MemoryOp.store("f3", T0 + 4 * DAY, "Acme hosts on AWS", "fact", key="host", **acme),
    ]
    queries = [
        Query(0, "q1", T0 + 3 * DAY, "hosting", client_id="acme"),
        Query(0, "q2", T0 + 40 * DAY, "hosting", client_id="acme"),
    ]
    return Dataset(None, {"name": "tl"}, ops, queries)


@pytest.fixture(scope="module")
def data() -> tl.TimelineData:
    rep = session.make_replayer(_dataset(), HashingEmbedder(dim=16), touch_k=1)
    return tl.replay_timeline(rep, Pipeline([("newest", Newest())]))


def test_replay_timeline_logs_every_access(data):
    assert data.accesses.rows() == [(T0 + 3 * DAY, "q1", "f2"), (T0 + 40 * DAY, "q2", "f3")]
    assert data.horizon == T0 + 40 * DAY
    assert data.store.get("f3").access_count == 1


def test_client_table_counts_memories(data):
    assert tl.client_table(data.store).rows() == [("acme", 5), ("globex", 1)]


def test_client_records_states_and_labels(data):
    recs = tl.client_records(data.store, "acme")
    assert recs.select("id", "state", "label").rows() == [
        ("f1", "superseded", "f1 host: Acme hosts on Heroku"),
        ("e1", "expired", "e1 Old backup note"),
        ("e2", "forgotten", "e2 Wrong note"),
        ("f2", "superseded", "f2 host: Acme hosts on Fly.io"),
        ("f3", "active", "f3 host: Acme hosts on AWS"),
    ]


def test_supersession_chains_follow_the_links(data):
    chains = tl.supersession_chains(tl.client_records(data.store, "acme"))
    assert chains.select("chain", "position", "mem_id", "valid_from", "valid_to", "state") \
        .rows() == [
        ("host", 0, "f1", T0, T0 + 2 * DAY, "superseded"),
        ("host", 1, "f2", T0 + 2 * DAY, T0 + 4 * DAY, "superseded"),
        ("host", 2, "f3", T0 + 4 * DAY, None, "active"),
    ]


def test_validity_windows_end_at_valid_to_expiry_or_the_horizon(data):
    windows = tl.validity_windows(tl.client_records(data.store, "acme"), horizon=data.horizon)
    assert windows.select("mem_id", "start", "end", "open").rows() == [
        ("e1", T0, T0 + 40 * DAY, False),
        ("f1", T0, T0 + 2 * DAY, False),
        ("e2", T0 + DAY, T0 + 1.5 * DAY, False),
        ("f2", T0 + 2 * DAY, T0 + 4 * DAY, False),
        ("f3", T0 + 4 * DAY, T0 + 40 * DAY, True),
    ]


def test_retired_memories_lists_expired_and_forgotten(data):
    retired = tl.retired_memories(tl.client_records(data.store, "acme"))
    assert retired.select("mem_id", "state", "retired_at", "age_days", "reason").rows() == [
        ("e2", "forgotten", T0 + 1.5 * DAY, 0.5, "incorrect"),
        ("e1", "expired", T0 + 40 * DAY, 40.0, None),
    ]


def test_change_log_in_time_order(data):
    log = tl.change_log(data.store, ["f1", "e1", "e2", "f2", "f3"])
    assert log.select("mem_id", "at", "change").rows() == [
        ("f1", T0, "created"),
        ("e1", T0, "created"),
        ("e2", T0 + DAY, "created"),
        ("e2", T0 + 1.5 * DAY, "forgotten"),
        ("f2", T0 + 2 * DAY, "created"),
        ("f1", T0 + 2 * DAY, "superseded"),
        ("f3", T0 + 4 * DAY, "created"),
        ("f2", T0 + 4 * DAY, "superseded"),
        ("e1", T0 + 40 * DAY, "expired"),
    ]


def _records(**over) -> pl.DataFrame:
    base = {"id": "m", "label": "m", "type": "fact", "confidence": 1.0, "created_at": 0.0,
            "valid_to": None, "expired_at": None}
    base.update(over)
    return pl.DataFrame([base], schema={"id": pl.String, "label": pl.String, "type": pl.String,
                                        "confidence": pl.Float64, "created_at": pl.Float64,
                                        "valid_to": pl.Float64, "expired_at": pl.Float64})


def _accesses(*times: float) -> pl.DataFrame:
    n = len(times)
    return pl.DataFrame({"ts": list(times), "qid": ["q"] * n, "mem_id": ["m"] * n},
                        schema={"ts": pl.Float64, "qid": pl.String, "mem_id": pl.String})


def test_decay_curves_decay_between_accesses_and_jump_at_each():
    curves = tl.decay_curves(_records(), _accesses(2 * DAY), until=4 * DAY, n_points=3)
    rows = curves.select("ts", "phase", "accesses", "effective_confidence", "access_boost",
                         "factor").rows()
    boost1 = 1 + 0.3 * 1.0  # log2(1 + 1) = 1
    assert [r[:3] for r in rows] == [(0.0, 1, 0), (2 * DAY, 0, 0), (2 * DAY, 1, 1),
                                     (4 * DAY, 1, 1)]
    assert [r[3] for r in rows] == pytest.approx([1.0, 0.98**2, 1.0, 0.98**2])
    assert [r[4] for r in rows] == pytest.approx([1.0, 1.0, boost1, boost1])
    assert [r[5] for r in rows] == pytest.approx([1.0, 0.98**2, boost1, 0.98**2 * boost1])


def test_decay_curves_take_the_constants_and_spare_events():
    fact = tl.decay_curves(_records(confidence=0.5), _accesses(), until=10 * DAY, n_points=2,
                           decay_factor=0.9, boost_weight=1.0)
    assert fact["factor"].to_list() == pytest.approx([0.5, 0.5 * 0.9**10])
    event = tl.decay_curves(_records(type="event"), _accesses(DAY, DAY, DAY), until=2 * DAY,
                            n_points=2)
    # Three accesses at once: boost 1 + 0.3 * log2(3 + 1) = 1.6; events never decay.
    assert event["factor"].to_list() == pytest.approx([1.0, 1.0, 1.6, 1.6])


def test_decay_curves_read_the_kind_so_a_rule_is_spared():
    rule = _records().with_columns(pl.lit("rule").alias("kind"))
    curve = tl.decay_curves(rule, _accesses(), until=10 * DAY, n_points=2)
    assert curve["factor"].to_list() == [1.0, 1.0]  # a fact by type, a rule by kind
    pref = _records().with_columns(pl.lit("preference").alias("kind"))
    assert tl.decay_curves(pref, _accesses(), until=10 * DAY, n_points=2)[
        "factor"].to_list() == pytest.approx([1.0, 0.98**10])


def test_decay_curves_stop_where_the_memory_stopped_being_valid():
    curves = tl.decay_curves(_records(valid_to=DAY), _accesses(3 * DAY), until=4 * DAY,
                             n_points=2)
    assert curves["ts"].to_list() == [0.0, DAY]
    assert tl.decay_curves(_records(created_at=5 * DAY), _accesses(), until=4 * DAY).height == 0
    with pytest.raises(ValueError, match="field 'n_points'"):
        tl.decay_curves(_records(), _accesses(), until=DAY, n_points=1)


def test_access_counts_accumulate_per_memory():
    acc = pl.DataFrame(
        {"ts": [1.0, 1.0, 2.0, 5.0, 3.0], "qid": ["a", "a", "b", "c", "d"],
         "mem_id": ["x", "x", "y", "x", "z"]}
    )
    assert tl.access_counts(acc, ["x", "y"]).rows() == [
        ("x", 1.0, 2), ("x", 5.0, 3), ("y", 2.0, 1)
    ]


def test_with_datetimes_converts_epoch_seconds():
    frame = tl.with_datetimes(pl.DataFrame({"t": [0.0, 86_400.5]}), "t")
    assert [d.isoformat() for d in frame["t"]] == [
        "1970-01-01T00:00:00+00:00", "1970-01-02T00:00:00.500000+00:00"
    ]


def test_charts_encode_the_expected_fields(data):
    recs = tl.client_records(data.store, "acme")
    windows = tl.validity_windows(recs, horizon=data.horizon)
    spec = tl.windows_chart(windows).to_dict()
    assert spec["encoding"]["y"]["sort"] == windows["label"].to_list()
    access = tl.access_chart(tl.access_counts(data.accesses, ["f3"]), span=(0.0, DAY)).to_dict()
    assert access["encoding"]["x"]["scale"]["domain"] == [
        "1970-01-01T00:00:00+00:00", "1970-01-02T00:00:00+00:00"
    ]
    assert tl.chains_chart(tl.supersession_chains(recs)).to_dict()["layer"][0]["mark"][
        "type"] == "line"


def test_consolidation_log_lists_what_cycles_and_policies_did():
    from memlab.datasets.format import Dataset, MemoryOp, Query
    from memlab.eval.replay import ConsolidationConfig, ReplayConfig
    from memlab.pipeline import Pipeline
    from memlab.stages.dense import Dense

    t0 = 1_767_225_600.0
    ops = [
        MemoryOp.store("a", t0 + 3600, "Acme checkout supports guest orders", "fact",
                       client_id="c", authority="human"),
        MemoryOp.store("b", t0 + 7200, "Acme checkout does not support guest orders", "fact",
                       client_id="c", authority="inferred"),
        MemoryOp.store("e", t0 + 7200, "Ran the weekly report", "event", client_id="c",
                       importance="low"),
    ]
    ds = Dataset(None, {"name": "t"}, ops, [
        Query(0, "q", t0 + 12 * 86_400.0, "weekly report", client_id="c")
    ])
    cfg = ReplayConfig(
        consolidation=ConsolidationConfig(interval_hours=24.0, merge="none"),
        conflict_policy="authority",
        conflict_threshold=0.0,
        ttl_days=10.0,
    )
    rep = session.make_replayer(ds, HashingEmbedder(dim=32), config=cfg)
    data = tl.replay_timeline(rep, Pipeline([("dense", Dense())], name="d"))
    log = tl.consolidation_log(data, "c")
    assert log.select("source", "action", "ids").rows() == [
        ("conflict", "authority:rejected", "b vs a (winner a)"),
        ("consolidation", "expired", "e"),
    ]
    assert log["at"].to_list() == [t0 + 7200, t0 + 11 * 86_400.0]


def _client(*rows: tuple[str, str, str]) -> pl.DataFrame:
    return pl.DataFrame(rows, schema={"id": pl.String, "type": pl.String, "text": pl.String},
                        orient="row")


def _log(*mem_ids: str) -> pl.DataFrame:
    n = len(mem_ids)
    return pl.DataFrame({"ts": [float(i) for i in range(n)], "qid": ["q"] * n,
                         "mem_id": list(mem_ids)},
                        schema={"ts": pl.Float64, "qid": pl.String, "mem_id": pl.String})


def test_decay_records_take_chain_members_then_the_most_accessed():
    records = _client(("a", "fact", "A"), ("b", "status", "B"), ("c", "fact", "C"),
                      ("d", "event", "D"), ("e", "fact", "E"))
    accesses = _log("c", "c", "e", "d", "d", "d", "other")
    # chain member b first (no access), then c (2), e (1), a (0); d is an event
    assert tl.decay_records(records, accesses, ["b"], n=3)["id"].to_list() == ["b", "c", "e"]
    assert tl.decay_records(records, accesses, ["b"], n=6)["id"].to_list() == [
        "a", "b", "c", "e"
    ]  # records order, every column kept
    assert tl.decay_records(records, accesses, [], n=2).rows() == [
        ("c", "fact", "C"), ("e", "fact", "E")
    ]
    assert tl.decay_records(records, _log(), [], n=2)["id"].to_list() == ["a", "b"]


def test_most_accessed_lists_the_clients_memories_with_their_type_and_text():
    records = _client(("a", "fact", "A"), ("b", "event", "B"), ("c", "fact", "C"))
    accesses = _log("b", "c", "c", "b", "x", "x", "x", "a")
    top = tl.most_accessed(accesses, records, n=2)
    assert top.columns == ["mem_id", "accesses", "type", "text"]
    assert top.rows() == [("b", 2, "event", "B"), ("c", 2, "fact", "C")]
    assert tl.most_accessed(_log(), records).height == 0
