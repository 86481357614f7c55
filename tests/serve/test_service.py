"""MemoryService: every tool, namespaces, recording and replay equality."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest

from memlab.datasets.format import load_dataset
from memlab.datasets.validate import validate_dataset
from memlab.embed import HashingEmbedder
from memlab.eval.replay import Replayer
from memlab.memory.scopes import Principal
from memlab.memory.store import MemoryStore
from memlab.pipeline import load_pipeline
from memlab.serve.recording import Recorder
from memlab.serve.service import MemoryService, ServiceError
from memlab.timeutil import parse_ts

T0 = parse_ts("2026-03-01T10:00:00Z")


class StepClock:
    """A clock that advances one minute a call."""

    def __init__(self, start: float = T0) -> None:
        self.t = start

    def __call__(self) -> float:
        self.t += 60.0
        return self.t


def _service(
    store: MemoryStore,
    agent: str | None = "atlas",
    projects: tuple[str, ...] = (),
    recorder: Recorder | None = None,
    pipeline: str = "rrf",
    clock: StepClock | None = None,
) -> MemoryService:
    principal = None if agent is None else Principal.of(agent, projects)
    return MemoryService(
        store,
        load_pipeline(pipeline),
        principal=principal,
        client_id="acme",
        recorder=recorder,
        clock=clock or StepClock(),
    )


@pytest.fixture
def store() -> MemoryStore:
    return MemoryStore(embedder=HashingEmbedder(dim=64))


def test_clock_is_whole_milliseconds_and_strictly_increasing(store: MemoryStore) -> None:
    svc = MemoryService(store, load_pipeline("bm25"), clock=lambda: 1000.0004)
    assert [svc.now(), svc.now(), svc.now()] == [1000.0, 1000.001, 1000.002]


def test_a_clock_before_1970_is_recorded_as_it_reads(store: MemoryStore) -> None:
    moon = parse_ts("1969-07-20T20:17:00Z")  # -14,182,980 s
    svc = MemoryService(store, load_pipeline("bm25"), clock=lambda: moon)
    assert [svc.now(), svc.now()] == [-14_182_980.0, -14_182_980.0 + 0.001]


def test_a_recording_another_store_wrote_is_refused(tmp_path: Path) -> None:
    first = Recorder(tmp_path / "rec")
    _service(MemoryStore(embedder=HashingEmbedder(dim=64)), recorder=first).store_memory(
        "Atlas prefers tabs", "preference"
    )
    first.close()
    again = Recorder(tmp_path / "rec")
    with pytest.raises(ValueError, match=(
        r"memories.jsonl: the recording holds calls that the store \(in memory\) did not make"
    )):
        _service(MemoryStore(embedder=HashingEmbedder(dim=64)), recorder=again)
    again.close()


def test_the_recording_keeps_the_settings_that_decide_what_is_served(tmp_path: Path) -> None:
    import tomllib

    recorder = Recorder(tmp_path / "rec")
    svc = MemoryService(MemoryStore(embedder=HashingEmbedder(dim=64)), load_pipeline("bm25"),
                        recorder=recorder, clock=StepClock(), touch_k=0, ttl_days=1.0)
    svc.store_memory("Atlas prefers tabs", "fact")
    recorder.close()
    meta = tomllib.loads((tmp_path / "rec" / "dataset.toml").read_text())
    assert meta["replay"] == {"ttl_days": 1.0, "expire": True, "touch_k": 0, "depth": 100}
    assert meta["name"] == "live-recording"  # the rest is kept
    again = Recorder(tmp_path / "rec")
    with pytest.raises(ValueError, match=re.escape(
        "the recording's calls were served with ttl_days = 1.0 (this server: 30.0), touch_k = 0 "
        "(this server: 10)"
    )):
        MemoryService(MemoryStore(embedder=HashingEmbedder(dim=64)), load_pipeline("bm25"),
                      recorder=again, clock=StepClock())
    again.close()


def test_a_recall_serves_from_the_ranking_a_replay_keeps(store: MemoryStore) -> None:
    svc = MemoryService(store, load_pipeline("bm25"), clock=StepClock(), depth=2)
    for i, scope in enumerate(("team", "team", "project:apollo")):
        store.store("deploy notes " + "deploy " * (3 - i), "fact", now=T0, scope=scope,
                    id=f"m{i}")
    # bm25 ranks m0, m1, m2; the replay keeps the top 2, so the filter finds nothing there
    assert svc.recall("deploy")["ids"] == ["m0", "m1"]
    assert svc.recall("deploy", scope="project:apollo")["ids"] == []
    with pytest.raises(ServiceError, match="depth"):
        MemoryService(store, load_pipeline("bm25"), depth=0)


def test_agent_writes_its_own_scope_and_team_only_by_promote(store: MemoryStore) -> None:
    svc = _service(store, projects=("apollo",))
    own = svc.store_memory("Atlas prefers tabs over spaces", "preference")
    assert own["scope"] == "agent:atlas"
    assert store.get(own["id"]).type == "fact"
    assert store.get(own["id"]).metadata["memory_type"] == "preference"
    proj = svc.store_memory("Apollo deploys on Fridays", "fact", scope="project:apollo")
    assert proj["scope"] == "project:apollo"
    with pytest.raises(ServiceError, match="promote"):
        svc.store_memory("Everyone uses tabs", "fact", scope="team")
    with pytest.raises(ServiceError, match="may not write 'project:zeus'"):
        svc.store_memory("Zeus is secret", "fact", scope="project:zeus")
    promoted = svc.promote(own["id"])
    assert promoted == {"id": own["id"], "scope": "team", "superseded": None}
    assert store.get(own["id"]).scope == "team"


def test_agent_never_reads_another_agents_memory(store: MemoryStore) -> None:
    atlas = _service(store, "atlas")
    hera = _service(store, "hera")
    human = _service(store, None)
    secret = atlas.store_memory("Atlas keeps the deploy runbook in notion", "fact")["id"]
    shared = human.store_memory("The deploy runbook lives in the wiki", "fact")["id"]
    assert human.store.get(shared).scope == "team"
    got = hera.recall("where is the deploy runbook", limit=10)
    assert got["ids"] == [shared]
    assert set(human.recall("where is the deploy runbook")["ids"]) == {secret, shared}
    for call in (
        lambda: hera.forget(secret, "x"),
        lambda: hera.promote(secret),
        lambda: hera.correct(secret, "new", "x"),
    ):
        with pytest.raises(ServiceError, match="unknown memory id"):
            call()
    with pytest.raises(ServiceError, match="may not read 'agent:atlas'"):
        hera.recall("runbook", scope="agent:atlas")
    assert [m["id"] for m in hera.list_memories()["memories"]] == [shared]


def test_agent_changes_only_its_own_and_its_projects_memories(store: MemoryStore) -> None:
    human = _service(store, None)
    hera = _service(store, "hera", projects=("apollo",))
    rule = human.store_memory("Deploys need two approvals", "rule")["id"]
    fact = human.store_memory("The prod database is Postgres 15", "fact", key="prod-db")["id"]
    # team memories are read-only to an agent: no forget, correct, promote or consolidate
    for call in (
        lambda: hera.forget(rule, "x"),
        lambda: hera.correct(fact, "The prod database is MySQL 5", "x"),
        lambda: hera.promote(fact),
    ):
        with pytest.raises(ServiceError, match="agent 'hera' may not change memory .* of scope "
                                               "'team'"):
            call()
    with pytest.raises(ServiceError, match="may not consolidate 'team'"):
        hera.consolidate(scope="team")
    assert store.get(rule).active and store.get(rule).forgotten_reason is None
    assert store.get(fact).superseded_by is None
    assert [m["text"] for m in hera.list_memories()["memories"]] == [
        "Deploys need two approvals", "The prod database is Postgres 15",
    ]
    # its own scope and its projects' it changes
    own = hera.store_memory("Hera drafts the release notes", "fact")["id"]
    proj = hera.store_memory("Apollo ships on Fridays", "fact", scope="project:apollo")["id"]
    assert hera.correct(proj, "Apollo ships on Thursdays", "moved")["superseded"] == proj
    assert hera.forget(own, "done") == {"id": own, "forgotten": True}
    assert hera.consolidate(scope="project:apollo")["processed"] >= 1
    # a human changes team memories
    assert human.forget(rule, "obsolete") == {"id": rule, "forgotten": True}


def test_relations_are_seen_in_the_scopes_they_were_written_in(tmp_path: Path) -> None:
    rec_dir = tmp_path / "rec"
    recorder = Recorder(rec_dir)
    path = tmp_path / "store"
    store = MemoryStore(path, embedder=HashingEmbedder(dim=64))
    clock = StepClock()
    atlas = _service(store, "atlas", recorder=recorder, clock=clock)
    hera = _service(store, "hera", recorder=recorder, clock=clock)
    human = _service(store, None, recorder=recorder, clock=clock)
    atlas.relate("Initech", "works_on", "Project Nightfall")
    atlas.store_entity("Globex", "organization", relations=[
        {"relation": "competitor_of", "to": "Umbrella"},
    ])
    human.relate("Initech", "uses", "Kafka")
    mine = {(r["from"], r["relation"], r["to"]) for r in atlas.get_entity("Initech")["relations"]}
    assert mine == {("Initech", "works_on", "Project Nightfall"), ("Initech", "uses", "Kafka")}
    # hera reads team, not agent:atlas: the team relation only, and no path through atlas's
    theirs = hera.get_entity("Initech")["relations"]
    assert [(r["from"], r["relation"], r["to"]) for r in theirs] == [
        ("Initech", "uses", "Kafka")
    ]
    with pytest.raises(ServiceError, match="field 'to': unknown entity 'Project Nightfall'"):
        hera.trace("Initech", "Project Nightfall")
    with pytest.raises(ServiceError, match="field 'name': unknown entity 'Umbrella'"):
        hera.get_entity("Umbrella")
    assert atlas.trace("Initech", "Project Nightfall")["found"] is True
    assert len(human.get_entity("Initech")["relations"]) == 2
    human.recall("initech")  # a replay applies the writes before its queries
    recorder.close()
    store.close()
    # the scopes are kept on disk and in the recording, and a replay restores them
    reopened = MemoryStore(path, embedder=HashingEmbedder(dim=64))
    again = _service(reopened, "hera")
    assert len(again.get_entity("Initech")["relations"]) == 1
    reopened.close()
    lines = [json.loads(x) for x in (rec_dir / "memories.jsonl").read_text().splitlines()]
    assert [(x["from"], x["client_id"], x["scope"]) for x in lines
            if x.get("op") == "relate"] == [
        ("Initech", "acme", "agent:atlas"), ("Globex", "acme", "agent:atlas"),
        ("Initech", "acme", "team"),
    ]
    assert validate_dataset(rec_dir) == []
    replayed = Replayer(load_dataset(rec_dir), embedder=HashingEmbedder(dim=64),
                        progress=False).run(load_pipeline("bm25")).store
    graph = replayed.graph
    a, b = graph.find("Initech"), graph.find("Project Nightfall")
    assert graph.relation_scopes(a, b, "works_on") == {"acme|agent:atlas": 1.0}


def test_a_relation_is_seen_only_in_the_client_it_was_written_in(store: MemoryStore) -> None:
    # atlas of client globex and hera of client acme are both on project apollo
    atlas = MemoryService(store, load_pipeline("graph"), principal=Principal.of(
        "atlas", ["apollo"]), client_id="globex", clock=StepClock())
    hera = MemoryService(store, load_pipeline("graph"), principal=Principal.of(
        "hera", ["apollo"]), client_id="acme", clock=StepClock(2e9))
    globex_human = MemoryService(store, load_pipeline("graph"), client_id="globex",
                                 clock=StepClock(3e9))
    hera.store_memory("Vercel deploys the storefront", scope="project:apollo")
    atlas.relate("Vercel", "uses", "PostgreSQL")  # globex's agent:atlas
    globex_human.relate("Vercel", "works_on", "Redis")  # globex's team
    atlas.store_memory("Vercel talks to Kafka", scope="project:apollo")
    assert [(r["relation"], r["to"]) for r in hera.get_entity("Vercel")["relations"]
            if r["relation"] != "co_occurrence"] == []
    assert {(r["relation"], r["to"]) for r in atlas.get_entity("Vercel")["relations"]
            if r["relation"] != "co_occurrence"} == {("uses", "PostgreSQL"), ("works_on", "Redis")}


def test_an_agent_cannot_replace_a_team_memory_by_promoting_one_with_its_key(
    store: MemoryStore,
) -> None:
    human = _service(store, None)
    hera = _service(store, "hera")
    team = human.store_memory("The deploy freeze ends Friday", "fact", key="freeze")["id"]
    mine = hera.store_memory("There is no deploy freeze", "fact", key="freeze")["id"]
    with pytest.raises(ServiceError, match=re.escape(
        f"memory {mine}: the team scope holds key 'freeze' as {team}; promoting would "
        "supersede it, and only a human changes team memories"
    )):
        hera.promote(mine)
    assert store.get(team).active and store.get(mine).scope == "agent:hera"
    status = human.store_memory("green", "status", subject="ci")["id"]
    own = hera.store_memory("red", "status", subject="ci")["id"]
    with pytest.raises(ServiceError, match="the team scope holds subject 'ci'"):
        hera.promote(own)
    assert store.get(status).active
    # a human's promotion supersedes, as the write path always has
    assert human.promote(mine)["superseded"] == team
    assert not store.get(team).active


def test_decision_keys_are_per_scope(store: MemoryStore) -> None:
    bob = _service(store, "bob")
    alice = _service(store, "alice")
    mine = bob.store_decision("Acquire Initech", key="acquisition")["id"]
    # alice neither learns bob's decision id nor is blocked by his private key
    theirs = alice.store_decision("Do not acquire anyone this year", key="acquisition")["id"]
    assert theirs != mine and store.get(theirs).scope == "agent:alice"
    with pytest.raises(ServiceError, match=f"decision {mine} has key 'acquisition'"):
        bob.store_decision("Acquire Initech and Globex", key="acquisition")


def test_an_agent_sees_neither_the_direction_nor_the_count_of_others_relations(
    store: MemoryStore,
) -> None:
    clock = StepClock()
    human = _service(store, None, clock=clock)
    bob = _service(store, "bob", clock=clock)
    alice = _service(store, "alice", clock=clock)
    human.relate("Billing", "uses", "Ledger")
    bob.relate("Ledger", "uses", "Billing")
    for _ in range(3):
        bob.relate("Billing", "competitor_of", "Zephyr")
    assert [(r["from"], r["to"], r["strength"]) for r in alice.get_entity("Ledger")["relations"]
            ] == [("Billing", "Ledger", 1.0)]
    assert alice.trace("Ledger", "Billing")["path"] == [
        {"from": "Ledger", "relation": "uses", "to": "Billing", "reverse": True}
    ]
    # her own write of bob's relation counts hers alone; the graph (a human) counts all four
    assert alice.relate("Billing", "competitor_of", "Zephyr")["strength"] == 1.0
    assert bob.relate("Billing", "competitor_of", "Zephyr")["strength"] == 4.0
    rels = {(r["from"], r["relation"], r["to"]): r["strength"]
            for r in human.get_entity("Billing")["relations"]}
    assert rels == {("Billing", "uses", "Ledger"): 1.0, ("Ledger", "uses", "Billing"): 1.0,
                    ("Billing", "competitor_of", "Zephyr"): 5.0}
    assert [r["strength"] for r in alice.get_entity("Zephyr")["relations"]] == [1.0]


def test_caller_metadata_may_not_set_the_keys_memlab_reads(store: MemoryStore) -> None:
    svc = _service(store, None)
    with pytest.raises(ServiceError, match=re.escape(
        "field 'metadata.tags' is set by memlab, not by a caller (give it as 'tags')"
    )):
        svc.store_memory("deploys need approval", "fact", metadata={"tags": 5})
    for key in ("memory_type", "entity", "episode_id", "decision", "conflicts_with"):
        with pytest.raises(ServiceError, match=f"field 'metadata.{key}' is set by memlab"):
            svc.store_memory("deploys need approval", "fact", metadata={key: "x"})
    out = svc.store_many([{"content": "ok"}, {"content": "x", "metadata": {"tags": "a"}}])
    assert [r["ok"] for r in out] == [True, False]
    # metadata written around the service (a dataset, the Python API) cannot break a recall
    odd = store.store("deploys need two approvals", "fact", client_id="acme", now=svc.now(),
                      metadata={"tags": 5, "memory_type": 7})
    got = svc.recall("deploys approvals", format="json")
    described = {m["id"]: m for m in got["memories"]}[odd.id]
    assert (described["tags"], described["memory_type"]) == ([], "fact")


def test_relate_checks_properties_before_it_writes(tmp_path: Path) -> None:
    recorder = Recorder(tmp_path / "rec")
    svc = _service(MemoryStore(embedder=HashingEmbedder(dim=64)), "atlas", recorder=recorder)
    for bad, message in (
        ({"x": float("nan")}, "field 'properties.x' holds nan, which JSON cannot represent"),
        ({"x": [float("inf")]}, "field 'properties.x' holds inf, which JSON cannot represent"),
        ({"x": "\ud800"}, "field 'properties.x' holds a lone surrogate"),
        ("tier", "field 'properties' must be an object, got str"),
    ):
        with pytest.raises(ServiceError, match=re.escape(message)):
            svc.relate("billing", "uses", "postgres", properties=bad)
    assert svc.store.graph.n_edges == 0
    recorder.close()
    assert (tmp_path / "rec" / "memories.jsonl").read_text() == ""


def test_episodes_and_entities_are_stored_all_or_nothing(tmp_path: Path) -> None:
    recorder = Recorder(tmp_path / "rec")
    store = MemoryStore(embedder=HashingEmbedder(dim=64))
    svc = _service(store, "atlas", recorder=recorder)
    good = {"content": "Payroll export needs UTF-8"}
    for bad, message in (
        ({"content": "x", "memory_type": "bogus"}, "field 'observations[1].memory_type'"),
        ({"content": "x", "confidence": 7}, "field 'observations[1].confidence'"),
        ({"content": ""}, "field 'observations[1].content' must not be empty"),
    ):
        with pytest.raises(ServiceError, match=re.escape(message)):
            svc.capture_episode("Debugged payroll export", [good, bad])
    with pytest.raises(ServiceError, match="name the same entity"):
        svc.store_entity("Alice", "person", relations=[{"relation": "uses", "to": "alice"}])
    with pytest.raises(ServiceError, match=re.escape("field 'relations[0].properties.w' holds")):
        svc.store_entity("Alice", "person", relations=[
            {"relation": "uses", "to": "Bob", "properties": {"w": float("nan")}},
        ])
    assert len(store) == 0 and store.graph.n_edges == 0
    # and a good call after the refused ones writes everything, recorded in order
    ep = svc.capture_episode("Debugged payroll export", [good, {"content": "Use iconv"}])
    ent = svc.store_entity("Alice", "person", relations=[{"relation": "uses", "to": "Bob"}])
    recorder.close()
    assert len(store) == 4 and ent["relations"][0]["strength"] == 1.0
    lines = [json.loads(x) for x in (tmp_path / "rec" / "memories.jsonl").read_text().splitlines()]
    assert [x["id"] for x in lines[:3]] == [ep["summary_id"], *ep["observation_ids"]]
    assert [x.get("op", "store") for x in lines] == ["store"] * 4 + ["relate"]


def test_text_that_is_not_text_and_overlong_timestamps_are_refused_by_name(
    store: MemoryStore,
) -> None:
    svc = _service(store, None)
    for kwargs, field in (
        ({"key": "deploy-\ud800"}, "key"),
        ({"subject": "\udfff"}, "subject"),
        ({"status_value": "green\ud800"}, "status_value"),
        ({"tags": ["ok", "bad\ud800"]}, "tags[1]"),
    ):
        with pytest.raises(ServiceError, match=re.escape(f"field '{field}' holds a lone "
                                                         "surrogate")):
            svc.store_memory("The deploy window is Friday", "fact", **kwargs)
    with pytest.raises(ServiceError, match=re.escape("field 'content' holds a lone surrogate")):
        svc.store_memory("text \ud800", "fact")
    with pytest.raises(ServiceError, match="field 'since' is longer than 64 characters"):
        svc.consolidate(since="2026" * 75_000)
    with pytest.raises(ServiceError, match="field 'at_time': '2026-03-01T10:00:00' has no time "
                                           "zone"):
        svc.recall("deploy", at_time="2026-03-01T10:00:00")
    assert len(store) == 0


def test_recall_filters_and_formats(store: MemoryStore) -> None:
    svc = _service(store, None)
    a = svc.store_memory("CI fails when cyclomatic complexity exceeds 15", "rule",
                         tags=["ci", "style"])["id"]
    b = svc.store_memory("The team prefers small pull requests for CI", "preference",
                         tags=["ci"], confidence=0.4)["id"]
    assert set(svc.recall("CI complexity")["ids"]) == {a, b}
    assert svc.recall("CI complexity", memory_type="rule")["ids"] == [a]
    assert svc.recall("CI complexity", tags=["ci", "style"])["ids"] == [a]
    assert svc.recall("CI complexity", min_confidence=0.5)["ids"] == [a]
    assert len(svc.recall("CI complexity", limit=1)["ids"]) == 1
    # a token budget of 9 admits the first memory (8 tokens) only
    first = svc.recall("CI complexity")["ids"][0]
    budget = len(store.get(first).text.split()) + 1
    assert svc.recall("CI complexity", token_budget=budget)["ids"] == [first]
    bullets = svc.recall("CI complexity", format="bullets", memory_type="rule")["text"]
    assert bullets == f"- [rule] CI fails when cyclomatic complexity exceeds 15 (id {a})"
    xml = svc.recall("CI complexity", format="xml", memory_type="rule")["text"]
    assert xml.startswith("<memories>\n  <memory id=") and xml.endswith("</memories>")
    with pytest.raises(ServiceError, match="field 'format'"):
        svc.recall("x", format="yaml")
    with pytest.raises(ServiceError, match="field 'limit'"):
        svc.recall("x", limit=0)


def test_a_decisions_fields_are_redacted_in_its_metadata_as_in_its_text(
    store: MemoryStore,
) -> None:
    # "Tr0ub4dor&3" alone is no credential; after "The db password ... Rationale:" it is, so
    # the text redacts it, and the rationale kept apart must too (the same for the others).
    svc = _service(store, None)
    dec = svc.store_decision("The db password", "  Tr0ub4dor&3 ", ["password=hunter2x9Q", "none"],
                             ["ann"])["id"]
    rec = store.get(dec)
    assert rec.text == (
        "The db password Rationale: [REDACTED:password] Alternatives considered: "
        "password=[REDACTED:password], none. Participants: ann."
    )
    assert rec.metadata["decision"] == {
        "rationale": "  [REDACTED:password] ",
        "alternatives": ["password=[REDACTED:password]", "none"],
        "participants": ["ann"],
    }


def test_lifecycle_tools(store: MemoryStore) -> None:
    svc = _service(store, None)
    old = svc.store_memory("Acme storefront runs on Next.js", "fact", key="acme-stack")["id"]
    new = svc.correct(old, "Acme storefront runs on Remix", "migrated")
    assert store.get(old).superseded_by == new["id"]
    assert store.get(new["id"]).supersedes == old
    dec = svc.store_decision("Use Postgres", "mature", ["MySQL"], ["adam"])["id"]
    assert store.get(dec).text == (
        "Use Postgres Rationale: mature Alternatives considered: MySQL. Participants: adam."
    )
    with pytest.raises(ServiceError, match="immutable"):
        svc.forget(dec, "no")
    assert [d["id"] for d in svc.get_decisions("postgres")["decisions"]] == [dec]
    assert svc.get_decisions("mysql redis")["decisions"] == []
    svc.forget(new["id"], "wrong")
    ids = svc.recall("Acme storefront", include_superseded=True)["ids"]
    assert old in ids and new["id"] not in ids  # forgotten: never returned, history is
    ep = svc.capture_episode(
        "Fixed the flaky login test", [{"content": "Login test needs a 2 s wait", "tags": ["qa"]}]
    )
    assert store.get(ep["summary_id"]).type == "event"
    assert store.get(ep["observation_ids"][0]).metadata["episode_id"] == ep["episode_id"]
    report = svc.consolidate()
    assert report["processed"] >= 3
    with pytest.raises(ServiceError, match="observations"):
        svc.capture_episode("x", [])


def test_entities_relations_trace(store: MemoryStore) -> None:
    svc = _service(store, None)
    svc.store_entity("Acme", "organization", {"tier": "gold"},
                     [{"relation": "uses", "to": "Postgres"}])
    svc.relate("Postgres", "competitor_of", "MySQL")
    ent = svc.get_entity("Acme", depth=2)
    assert ent["entity"] == {"name": "acme", "type": "client"}  # the graph's canonical entity
    assert ent["profile"][0]["text"] == "Acme is a organization. tier: gold."
    typed = {(r["from"], r["relation"], r["to"]) for r in ent["relations"]
             if r["relation"] != "co_occurrence"}
    assert typed == {("acme", "uses", "PostgreSQL"), ("PostgreSQL", "competitor_of", "MySQL")}
    path = svc.trace("Acme", "MySQL")
    assert path == {"found": True, "path": [
        {"from": "acme", "relation": "uses", "to": "PostgreSQL", "reverse": False},
        {"from": "PostgreSQL", "relation": "competitor_of", "to": "MySQL", "reverse": False},
    ]}
    back = svc.trace("MySQL", "Acme")
    assert [p["reverse"] for p in back["path"]] == [True, True]
    assert svc.trace("Acme", "MySQL", max_depth=1) == {"found": False, "path": []}
    with pytest.raises(ServiceError, match="unknown entity"):
        svc.get_entity("Nobody")
    with pytest.raises(ServiceError, match="field 'relation'"):
        svc.relate("a", "likes", "b")


def test_feedback_checks_and_pending(store: MemoryStore) -> None:
    svc = _service(store)
    mid = svc.store_memory("Atlas deploys with helm", "fact")["id"]
    rid = svc.recall("how does atlas deploy")["recall_id"]
    out = svc.feedback(rid, useful_ids=[mid], note="right answer")
    assert out == {"recall_id": rid, "judged": 1, "recorded": False}
    line = svc.pending_judgments[0]
    assert {k: line[k] for k in ("qid", "mem_id", "grade", "source", "judge", "note")} == {
        "qid": rid, "mem_id": mid, "grade": 1, "source": "agent", "judge": "atlas",
        "note": "right answer",
    }
    with pytest.raises(ServiceError, match="unknown recall"):
        svc.feedback("r-nope", useful_ids=[mid])
    with pytest.raises(ServiceError, match="both"):
        svc.feedback(rid, useful_ids=[mid], not_useful_ids=[mid])
    with pytest.raises(ServiceError, match="at least one"):
        svc.feedback(rid)


def test_store_many_reports_each_item(store: MemoryStore) -> None:
    svc = _service(store, None)
    out = svc.store_many([
        {"content": "one", "memory_type": "event"},
        {"content": ""},
        {"content": "two", "bogus": 1},
        {"content": "three", "agent": "hera"},
        "not an object",
    ])
    assert [r["ok"] for r in out] == [True, False, False, True, False]
    assert "field 'content' must not be empty" in out[1]["error"]
    assert "unknown field(s) 'bogus'" in out[2]["error"]
    assert out[3]["scope"] == "agent:hera"
    assert store.get(out[3]["id"]).source_agent == "hera"


def _session(svc_atlas: MemoryService, svc_human: MemoryService) -> list[str]:
    """A short live session: writes, lifecycle calls and recalls by two principals."""
    a = svc_human.store_memory("Acme storefront runs on Next.js with Vercel", "fact",
                               key="acme-stack")["id"]
    svc_human.store_memory("Acme pays invoices net 30", "fact", key="acme-billing")
    svc_atlas.store_memory("Atlas found the Acme build needs Node 20", "fact")
    svc_atlas.store_memory("Atlas found the Acme build needs Node 20", "fact")  # dedup
    svc_human.relate("Acme", "uses", "Vercel")
    svc_human.correct(a, "Acme storefront runs on Remix with Vercel", "migrated in March")
    rids = [svc_atlas.recall("what does the acme storefront run on")["recall_id"]]
    p = svc_atlas.store_memory("Atlas: token is api_key=sk-abcdefghijklmnopqrstuvwx1234",
                               "fact")["id"]
    svc_atlas.promote(p)
    svc_human.forget(svc_human.store_memory("temporary note about acme", "event")["id"], "noise")
    svc_human.consolidate()
    rids.append(svc_human.recall("acme build node version", limit=5)["recall_id"])
    rids.append(svc_atlas.recall("acme billing terms", format="bullets")["recall_id"])
    rids.append(svc_human.recall("acme storefront", at_time="2026-03-01T10:03:00Z")["recall_id"])
    return rids


def test_recording_validates_and_replays_to_the_served_ids(tmp_path: Path) -> None:
    rec_dir = tmp_path / "rec"
    recorder = Recorder(rec_dir)
    store = MemoryStore(embedder=HashingEmbedder(dim=64))
    clock = StepClock()
    atlas = _service(store, "atlas", recorder=recorder, clock=clock)
    human = _service(store, None, recorder=recorder, clock=clock)
    rids = _session(atlas, human)
    atlas.feedback(rids[0], useful_ids=atlas._served[rids[0]].ids[:1])
    recorder.close()

    assert validate_dataset(rec_dir) == []
    raw = (rec_dir / "memories.jsonl").read_text()
    assert "sk-abcdef" not in raw and "[REDACTED:api_key]" in raw
    ds = load_dataset(rec_dir)
    assert [q.qid for q in ds.queries] == rids
    assert [op.op for op in ds.ops] == [
        "store", "store", "store", "store", "relate", "correct", "store", "promote", "store",
        "forget", "consolidate",
    ]
    assert ds.queries[0].agent == "atlas" and ds.queries[1].agent is None
    judged = [json.loads(x) for x in (rec_dir / "judgments.jsonl").read_text().splitlines()]
    assert judged[0]["qid"] == rids[0] and judged[0]["source"] == "agent"

    replayer = Replayer(ds, embedder=HashingEmbedder(dim=64), progress=False)
    result = replayer.run(load_pipeline("rrf"))
    for q in ds.queries:
        replayed = result.rankings.filter(result.rankings["qid"] == q.qid)["mem_id"].to_list()
        served = list(q.served or ())
        assert served, q.qid
        # the served ids are the replayed ranking (filters only cut it: limit here)
        assert replayed[: len(served)] == served, q.qid
    assert set(result.id_map.values()) <= set(store.ids)


def test_credential_fields_are_redacted_in_the_store_and_the_recording(tmp_path: Path) -> None:
    recorder = Recorder(tmp_path / "rec")
    store = MemoryStore(embedder=HashingEmbedder(dim=64))
    svc = _service(store, "atlas", recorder=recorder)
    out = svc.store_memory(
        "deploy notes for the billing db",
        metadata={"db_password": "Tr0ub4dor&3", "owner": "ops", "contains_secret": "api-key"},
    )
    svc.relate("billing", "uses", "postgres", properties={"api_key": "3f6b2a9c8d7e4f1a0b5c6d7e"})
    recorder.close()
    meta = store.get(out["id"]).metadata
    assert meta["db_password"] == "[REDACTED:password]"
    assert (meta["owner"], meta["contains_secret"]) == ("ops", "api-key")
    raw = (tmp_path / "rec" / "memories.jsonl").read_text()
    assert "Tr0ub4dor" not in raw and "3f6b2a9c" not in raw
    assert raw.count("[REDACTED:password]") == 1 and raw.count("[REDACTED:api_key]") == 1


def test_recording_rejects_a_foreign_directory(tmp_path: Path) -> None:
    (tmp_path / "notes.txt").write_text("mine")
    with pytest.raises(ValueError, match="not empty and holds no dataset.toml"):
        Recorder(tmp_path)


def test_cli_validates_and_evaluates_a_recording(tmp_path: Path, capsys) -> None:
    from memlab.cli import main

    rec_dir = tmp_path / "rec"
    recorder = Recorder(rec_dir)
    store = MemoryStore(embedder=HashingEmbedder())
    clock = StepClock()
    _session(_service(store, "atlas", recorder=recorder, clock=clock),
             _service(store, None, recorder=recorder, clock=clock))
    recorder.close()
    assert main(["datasets", "validate", str(rec_dir)]) == 0
    out = tmp_path / "run"
    assert main(["eval", str(rec_dir), "--pipelines", "rrf", "--embedder", "hashing",
                 "--no-cache", "--quiet", "--metrics", "tokens@10", "--out", str(out)]) == 0
    metrics = json.loads((out / "metrics.json").read_text())
    assert metrics["rrf"]["scope_violation@10"] == 0.0  # added: agents asked
    import polars as pl

    rankings = pl.read_parquet(out / "rankings.parquet")
    ds = load_dataset(rec_dir)
    for q in ds.queries:
        got = rankings.filter(pl.col("qid") == q.qid).sort("rank")["mem_id"].to_list()
        assert got[: len(q.served)] == list(q.served)


_KILLED_BETWEEN_APPEND_AND_COMMIT = """
import os, signal, sys
from memlab.embed import HashingEmbedder
from memlab.memory.store import MemoryStore
from memlab.pipeline import load_pipeline
from memlab.serve.recording import Recorder
from memlab.serve.service import MemoryService

store = MemoryStore(sys.argv[1], embedder=HashingEmbedder(dim=64), chroma=False)
rec = Recorder(sys.argv[2])
svc = MemoryService(store, load_pipeline("bm25"), recorder=rec, clock=lambda: 1.77e9)
svc.store_memory("committed and recorded", "fact")
real = rec.append_all

def append_then_die(lines):
    real(lines)  # durable in the recording; the store's commit never comes
    os.kill(os.getpid(), signal.SIGKILL)

rec.append_all = append_then_die
svc.store_memory("recorded, never committed", "fact")
"""


def test_a_server_killed_between_append_and_commit_is_made_whole_at_the_next_start(
    tmp_path: Path, caplog
) -> None:
    import subprocess
    import sys

    store_dir, rec_dir = tmp_path / "store", tmp_path / "rec"
    run = subprocess.run(
        [sys.executable, "-c", _KILLED_BETWEEN_APPEND_AND_COMMIT, str(store_dir), str(rec_dir)],
        capture_output=True, text=True, timeout=120,
    )
    assert run.returncode == -9, run.stderr
    lines = (rec_dir / "memories.jsonl").read_text().splitlines()
    assert [json.loads(x)["text"] for x in lines] == [
        "committed and recorded", "recorded, never committed",
    ]
    first = len(lines[0]) + 1
    with caplog.at_level("WARNING", logger="memlab.serve"):
        store = MemoryStore(store_dir, embedder=HashingEmbedder(dim=64), chroma=False)
        svc = MemoryService(store, load_pipeline("bm25"), recorder=Recorder(rec_dir),
                            clock=StepClock(2e9))
    # the line of the write that never committed is cut; the store and recording agree
    assert (rec_dir / "memories.jsonl").stat().st_size == first
    assert [store.get(i).text for i in store.ids] == ["committed and recorded"]
    assert f"cut {len(lines[1]) + 1} bytes of memories.jsonl" in caplog.text
    # cut from the recording, kept beside it
    assert (rec_dir / ".memories.jsonl.uncommitted").read_text() == lines[1] + "\n"
    svc.store_memory("after the restart", "fact")
    svc.close()
    texts = [json.loads(x)["text"] for x in (rec_dir / "memories.jsonl").read_text().splitlines()]
    assert texts == ["committed and recorded", "after the restart"]
    assert validate_dataset(rec_dir) == []


def test_a_failed_commit_takes_its_lines_back_out_of_the_recording(tmp_path: Path) -> None:
    rec_dir = tmp_path / "rec"
    store = MemoryStore(tmp_path / "store", embedder=HashingEmbedder(dim=64), chroma=False)
    svc = _service(store, None, recorder=Recorder(rec_dir))
    svc.store_memory("kept", "fact")
    before = (rec_dir / "memories.jsonl").read_bytes()
    real_exec = store._exec

    def failing_commit(sql: str, params: Any = ()) -> Any:
        if sql == "COMMIT":
            raise OSError(5, "Input/output error")
        return real_exec(sql, params)

    store._exec = failing_commit  # type: ignore[method-assign]
    with pytest.raises(OSError, match="Input/output error"):
        svc.store_memory("never committed", "fact")
    with pytest.raises(OSError, match="Input/output error"):
        svc.recall("kept")  # a recall's accesses and its query line, alike
    store._exec = real_exec  # type: ignore[method-assign]
    assert (rec_dir / "memories.jsonl").read_bytes() == before
    assert (rec_dir / "queries.jsonl").read_bytes() == b""
    assert [store.get(i).text for i in store.ids] == ["kept"]
    svc.close()


def test_a_recording_cut_short_behind_the_store_is_refused(tmp_path: Path) -> None:
    rec_dir = tmp_path / "rec"
    store = MemoryStore(tmp_path / "store", embedder=HashingEmbedder(dim=64), chroma=False)
    svc = _service(store, None, recorder=Recorder(rec_dir))
    svc.store_memory("one", "fact")
    svc.store_memory("two", "fact")
    svc.close()
    data = (rec_dir / "memories.jsonl").read_bytes()
    (rec_dir / "memories.jsonl").write_bytes(data[: data.index(b"\n") + 1])
    store = MemoryStore(tmp_path / "store", embedder=HashingEmbedder(dim=64), chroma=False)
    recorder = Recorder(rec_dir)
    with pytest.raises(ValueError, match=r"memories.jsonl: \d+ bytes, but the store .* committed "
                                         r"calls recorded up to byte \d+: the recording was cut"):
        _service(store, None, recorder=recorder)
    recorder.close()
    store.close()
    # a new recording of the same store starts where the store is
    svc = _service(MemoryStore(tmp_path / "store", embedder=HashingEmbedder(dim=64),
                               chroma=False), None, recorder=Recorder(tmp_path / "rec2"))
    svc.store_memory("three", "fact")
    svc.close()
    assert len((tmp_path / "rec2" / "memories.jsonl").read_text().splitlines()) == 1


@pytest.mark.parametrize("atlas_events", [0, 4])
def test_consolidate_reports_only_the_expired_events_the_agent_reads(
    store: MemoryStore, atlas_events: int
) -> None:
    clock = StepClock()
    atlas, hera = _service(store, "atlas", clock=clock), _service(store, "hera", clock=clock)
    for i in range(atlas_events):
        atlas.store_memory(f"atlas private event {i}", memory_type="event")
    hera.store_memory("hera's own event", memory_type="event")
    clock.t += 31 * 86_400.0  # past the 30-day event TTL: every event above expires
    assert hera.consolidate()["expired"] == 1  # hera's own, whatever atlas wrote
    assert sum(1 for i in range(len(store)) if store.record_at(i).expired_at is not None) == (
        atlas_events + 1)  # the cleanup itself is store-wide, as a recall's is


@pytest.mark.parametrize("atlas_writes", [False, True])
def test_a_private_entity_of_the_same_name_never_hides_the_one_an_agent_sees(
    store: MemoryStore, atlas_writes: bool
) -> None:
    clock = StepClock()
    atlas, hera = _service(store, "atlas", clock=clock), _service(store, "hera", clock=clock)
    if atlas_writes:  # links the agent entity "atlas" (type agent), named first
        atlas.store_memory("my private scratch note")
    hera.store_memory('We met the "Atlas" vendor; they use Redis')
    assert hera.get_entity("Atlas")["entity"] == {"name": "Atlas", "type": "concept"}
    assert hera.trace("Atlas", "Redis")["found"] is True


def test_a_human_served_for_one_client_sees_nothing_of_another_tenant(
    store: MemoryStore,
) -> None:
    acme = MemoryService(store, load_pipeline("graph"), client_id="acme", clock=StepClock())
    globex = MemoryService(store, load_pipeline("graph"), client_id="globex",
                           clock=StepClock(2e9))
    acme.store_memory("Vercel deploys the storefront with PostgreSQL")
    acme.relate("Vercel", "uses", "PostgreSQL")
    globex.store_memory("Vercel also runs PostgreSQL backups here")
    globex.relate("Vercel", "uses", "PostgreSQL")
    globex.relate("Initech", "works_on", "Nightfall")
    edges = {(r["relation"], r["to"]): r["strength"]
             for r in acme.get_entity("Vercel")["relations"]}
    # acme wrote "uses" once and named the pair in one memory: globex's writes count for neither
    assert edges[("uses", "PostgreSQL")] == 1.0
    assert edges[("co_occurrence", "PostgreSQL")] == 1.0
    assert store.graph.strength(store.graph.find("Vercel"), store.graph.find("PostgreSQL"),
                                "uses") == 2.0  # the shared graph holds both tenants'
    with pytest.raises(ServiceError, match="unknown entity 'Initech'"):
        acme.get_entity("Initech")
    assert acme.health()["memories"] == 1 and globex.health()["memories"] == 1


def test_a_tenants_server_changes_no_memory_of_global(store: MemoryStore) -> None:
    shared = MemoryService(store, load_pipeline("bm25"), client_id="global", clock=StepClock())
    rule = shared.store_memory("All tenants deploy on Tuesdays")["id"]
    acme_human = MemoryService(store, load_pipeline("bm25"), client_id="acme",
                               clock=StepClock(2e9))
    assert acme_human.list_memories()["memories"][0]["id"] == rule  # read, yes
    message = (f"memory '{rule}' belongs to client 'global': this server changes only "
               "memories of its client 'acme'")
    for field, change in (("id", lambda: acme_human.forget(rule, "wrong")),
                          ("old_id", lambda: acme_human.correct(rule, "On Mondays", "changed")),
                          ("id", lambda: acme_human.promote(rule))):
        with pytest.raises(ServiceError, match=re.escape(f"field '{field}': {message}")):
            change()
    assert store.get(rule).active and store.get(rule).text == "All tenants deploy on Tuesdays"
    # a tenant's consolidation leaves global's memories to global's
    assert acme_human.consolidate()["processed"] == 0
    assert shared.consolidate()["processed"] == 1


def test_a_promoted_memory_does_not_name_the_private_one_it_superseded(
    store: MemoryStore,
) -> None:
    hera, atlas = _service(store, "hera"), _service(store, "atlas")
    old = hera.store_memory("The build runs on Jenkins", key="ci")["id"]
    new = hera.store_memory("The build runs on GitHub Actions", key="ci")
    assert new["superseded"] == old
    hera.promote(new["id"])
    (seen,) = [m for m in atlas.list_memories()["memories"] if m["id"] == new["id"]]
    assert "supersedes" not in seen  # hera's private first version stays unnamed
    (own,) = [m for m in hera.list_memories()["memories"] if m["id"] == new["id"]]
    assert own["supersedes"] == old


def test_a_humans_consolidate_counts_no_other_tenants_expired_events(
    store: MemoryStore,
) -> None:
    clock = StepClock()
    globex = MemoryService(store, load_pipeline("bm25"), client_id="globex", clock=clock)
    acme = MemoryService(store, load_pipeline("bm25"), client_id="acme", clock=clock)
    for i in range(3):
        globex.store_memory(f"globex event {i}", memory_type="event")
    acme.store_memory("acme event", memory_type="event")
    clock.t += 31 * 86_400.0
    assert acme.consolidate()["expired"] == 1  # its own; globex's three expire unreported


# --------------------------------------------------------------------- red team 21
T1 = "ghp_1111A1b2C3d4E5f6G7h8I9j0K1l2M3n4O5p6"
T2 = "ghp_2222A1b2C3d4E5f6G7h8I9j0K1l2M3n4O5p6"
T3 = "ghp_3333A1b2C3d4E5f6G7h8I9j0K1l2M3n4O5p6"
T4 = "ghp_4444A1b2C3d4E5f6G7h8I9j0K1l2M3n4O5p6"
SECRETS = (T1, T2, T3, T4, "Tr0ub4dor&3", "hunter2x9Q")


def _nothing_raw(rec_dir: Path) -> None:
    """No secret of :data:`SECRETS` in any file of the recording."""
    for path in rec_dir.iterdir():
        if path.is_file():
            data = path.read_bytes()
            for secret in SECRETS:
                assert secret.encode() not in data, (path.name, secret)


def test_the_recording_holds_exactly_what_the_store_holds(tmp_path: Path) -> None:
    rec_dir = tmp_path / "rec"
    recorder = Recorder(rec_dir)
    store = MemoryStore(embedder=HashingEmbedder(dim=64))
    svc = _service(store, None, recorder=recorder)
    meta = {T1: "a key that is a token", "nested": {T2: 1, "db_password": "Tr0ub4dor&3"}}
    first = svc.store_memory("deploy notes for billing", "fact", key="billing-notes",
                             tags=[f"tag {T3}"], metadata=meta)
    status = svc.store_memory("billing db state", "status", subject="billing-db",
                              status_value="up, password=hunter2x9Q")
    bulk = svc.store_many([
        {"content": "ingested note", "metadata": {"src": {T4: "x"}}},
        {"content": "deploy notes for billing", "key": "billing-notes", "metadata": meta,
         "tags": [f"tag {T3}"]},
    ])
    assert [r["action"] for r in bulk] == ["created", "deduplicated"]
    svc.correct(status["id"], f"billing db is down, token {T1}", f"ops said so {T2}")
    svc.forget(bulk[0]["id"], f"noise, ask {T3}")
    svc.relate("Billing", "uses", "Postgres", properties={T4: "v", "api_key": T1})
    svc.store_entity("Ledger", "service", properties={"api_key": T2})
    rid = svc.recall(f"billing {T4}")["recall_id"]
    svc.feedback(rid, useful_ids=[first["id"]], note=f"right, {T1}")
    recorder.close()

    _nothing_raw(rec_dir)
    lines = [json.loads(x) for x in (rec_dir / "memories.jsonl").read_text().splitlines()]
    for line in lines:
        op = line.get("op", "store")
        if op == "store" and line["id"] in store.ids:  # created: exactly the stored record
            rec = store.get(line["id"])
            for name in ("text", "source_agent", "key", "subject", "status_value", "metadata",
                         "scope", "client_id", "importance", "confidence"):
                if name in line:
                    assert line[name] == getattr(rec, name), (line["id"], name)
        elif op == "store":  # deduplicated: the fields scrubbed as the store scrubbed them
            assert line["metadata"] == store.get(first["id"]).metadata
        elif op == "correct":
            rec = store.get(line["id"])
            assert (line["text"], line["reason"]) == (rec.text, rec.metadata["correction_reason"])
        elif op == "forget":
            assert line["reason"] == store.get(line["target"]).forgotten_reason
    # and a replay of the recording rebuilds the same records
    assert validate_dataset(rec_dir) == []
    result = Replayer(load_dataset(rec_dir), embedder=HashingEmbedder(dim=64),
                      progress=False).run(load_pipeline("bm25"))
    for line in lines:
        if line.get("op", "store") in ("store", "correct") and line["id"] in store.ids:
            live, again = store.get(line["id"]), result.store.get(result.id_map[line["id"]])
            assert (again.text, again.metadata, again.status_value, again.key) == (
                live.text, live.metadata, live.status_value, live.key)


@pytest.mark.parametrize(
    ("call", "field"),
    [
        (lambda s: s.relate(f"Vendor {T1} corp", "uses", "Quantix"), "from"),
        (lambda s: s.relate("Quantix", "uses", f"Svc {T1}"), "to"),
        (lambda s: s.relate(T1, "uses", T2), "from"),  # not "the same entity": refused first
        (lambda s: s.store_entity(f"Acme {T2}", "org"), "name"),
        (lambda s: s.store_entity("Acme", T2), "type"),
        (lambda s: s.store_entity("Acme", "org", relations=[{"relation": "uses",
                                                             "to": f"Svc {T3}"}]),
         "relations[0].to"),
        (lambda s: s.store_memory("the deploy key rotates", key=f"deploy {T1}"), "key"),
        (lambda s: s.store_memory("green", "status", subject=T1), "subject"),
        (lambda s: s.capture_episode("fixed it", [{"content": "it works"}], episode_id=T1),
         "episode_id"),
        (lambda s: s.store_memory("x", scope=f"project:{T1}"), "scope"),
        (lambda s: s.recall("x", scope=f"agent:{T1}"), "scope"),
    ],
)
def test_names_keys_and_ids_holding_a_credential_are_refused(
    tmp_path: Path, call: Any, field: str
) -> None:
    """The store keeps a name scrubbed: two different tokens would name one entity, key or
    subject (and a scope or an agent name would keep the token). Such a value is refused."""
    recorder = Recorder(tmp_path / "rec")
    store = MemoryStore(embedder=HashingEmbedder(dim=64))
    svc = _service(store, None, recorder=recorder)
    with pytest.raises(ServiceError, match=re.escape(f"field '{field}' holds what looks like "
                                                     "a credential")) as err:
        call(svc)
    assert not any(t in str(err.value) for t in (T1, T2, T3))  # the message names no secret
    recorder.close()
    assert len(store) == 0 and store.graph.n_edges == 0
    assert (tmp_path / "rec" / "memories.jsonl").read_bytes() == b""


def test_agent_client_and_item_names_holding_a_credential_are_refused() -> None:
    store = MemoryStore(embedder=HashingEmbedder(dim=64))
    for kwargs, field in (({"principal": Principal.of(T1)}, "agent"),
                          ({"principal": Principal.of("atlas", [T2])}, "projects"),
                          ({"client_id": T1}, "client_id"),
                          ({"source_agent": T1}, "source_agent")):
        with pytest.raises(ServiceError, match=re.escape(f"field '{field}' holds what looks")):
            MemoryService(store, load_pipeline("bm25"), **kwargs)
    svc = MemoryService(store, load_pipeline("bm25"), clock=StepClock())
    out = svc.store_many([{"content": "mine", "agent": T1}, {"content": "ours", "agent": "hera"},
                          {"content": "x", "agent": "atlas\n"}])
    assert [r["ok"] for r in out] == [False, True, False]
    assert out[0]["error"].startswith("field 'agent' holds what looks like a credential")
    assert out[2]["error"] == (
        "field 'agent': 'atlas\\n' is not a valid name (it holds a line break)")
    assert [store.get(i).scope for i in store.ids] == ["agent:hera"]


def test_two_names_of_one_entity_are_refused_before_anything_is_written(
    store: MemoryStore,
) -> None:
    svc = _service(store, None)
    with pytest.raises(ServiceError, match=re.escape(
            "field 'to': 'Alice  Smith' and ' alice smith' name the same entity")):
        svc.relate("Alice  Smith", "uses", " alice smith")
    with pytest.raises(ServiceError, match=re.escape(
            "field 'relations[1].to': 'Acme' and 'ACME' name the same entity")):
        svc.store_entity("Acme", "org", relations=[{"relation": "uses", "to": "Vercel"},
                                                   {"relation": "uses", "to": "ACME"}])
    assert len(store) == 0 and store.graph.n_edges == 0


def test_errors_name_the_fields_the_caller_sent(store: MemoryStore) -> None:
    svc = _service(store, None)
    # aliases the entity extractor knows are one entity too: the store's refusal names 'to'
    with pytest.raises(ServiceError, match=re.escape(
            "field 'to': 'k8s' and 'Kubernetes' name the same entity")):
        svc.relate("k8s", "uses", "Kubernetes")
    with pytest.raises(ServiceError, match=re.escape(
            "field 'relations[1].to': 'Postgres' and 'PostgreSQL' name the same entity")):
        svc.store_entity("Postgres", "technology", relations=[
            {"relation": "uses", "to": "Redis"}, {"relation": "uses", "to": "PostgreSQL"}])
    # a text built from several fields: those fields, not the store's 'content'
    long = "x" * 20_000  # a rationale as long as a field may be
    n = len("Use it. Rationale: ") + 20_000
    with pytest.raises(ServiceError, match=re.escape(
            "fields 'decision', 'rationale', 'alternatives' and 'participants' make a text of "
            f"{n} characters, longer than the 20000 a memory holds")):
        svc.store_decision("Use it.", long)
    n = len("Gusto is a concept. notes: .") + 19_990
    with pytest.raises(ServiceError, match=re.escape(
            f"fields 'name', 'type' and 'properties' make a text of {n} characters")):
        svc.store_entity("Gusto", properties={"notes": "n" * 19_990})
    # a key built from the name and the type
    with pytest.raises(ServiceError, match=re.escape(
            "fields 'name' and 'type' (the entity's key) hold what looks like a credential "
            "(password)")):
        svc.store_entity("Kx9#mPq2zz", "password")
    # an integer too large for a float is out of range, described by its size
    with pytest.raises(ServiceError, match=re.escape(
            "field 'observations[1].confidence' must lie in [0, 1], got an integer of about "
            "401 digits")):
        svc.capture_episode("sprint review", [{"content": "one"},
                                              {"content": "two", "confidence": 10**400}])
    with pytest.raises(ServiceError, match=re.escape(
            "field 'confidence' must lie in [0, 1], got an integer of about 401 digits")):
        svc.store_memory("the freeze ends Friday", confidence=-(10**400))
    assert len(store) == 0 and store.graph.n_edges == 0


def test_every_value_a_call_accepts_is_recorded_validly(tmp_path: Path) -> None:
    rec_dir = tmp_path / "rec"
    recorder = Recorder(rec_dir)
    store = MemoryStore(embedder=HashingEmbedder(dim=64))
    svc = _service(store, None, recorder=recorder)
    for blank in ("", " "):
        with pytest.raises(ServiceError, match="field 'status_value' must not be empty"):
            svc.store_memory("deploy state", "status", subject="deploy", status_value=blank)
        out = svc.store_many([{"content": "deploy state", "memory_type": "status",
                               "subject": "deploy", "status_value": blank}])
        assert out[0]["error"] == "field 'status_value' must not be empty"
    ids = {}
    for stamp in ("0001-01-01T00:00:00Z", "0999-06-01T12:30:00.5Z", "9999-12-31T23:59:59.999Z"):
        ids[stamp] = svc.store_memory(f"a fact valid from {stamp}", valid_from=stamp)["id"]
    assert svc.list_memories()["memories"][1]["valid_from"] == "0999-06-01T12:30:00.500Z"
    svc.recall("fact", at_time="0001-01-01T00:00:00Z")
    svc.consolidate(since="0500-01-01T00:00:00+01:00")
    recorder.close()
    lines = [json.loads(x) for x in (rec_dir / "memories.jsonl").read_text().splitlines()]
    assert [x.get("valid_from") for x in lines[:3]] == [
        "0001-01-01T00:00:00.000Z", "0999-06-01T12:30:00.500Z", "9999-12-31T23:59:59.999Z"]
    assert lines[3]["since"] == "0499-12-31T23:00:00.000Z"
    query = json.loads((rec_dir / "queries.jsonl").read_text())
    assert query["at_time"] == "0001-01-01T00:00:00.000Z"
    assert validate_dataset(rec_dir) == []
    # parsed back, each timestamp is the very float the store holds
    replayed = Replayer(load_dataset(rec_dir), embedder=HashingEmbedder(dim=64),
                        progress=False).run(load_pipeline("bm25")).store
    for mid in ids.values():
        assert replayed.get(mid).valid_from == store.get(mid).valid_from


def test_changes_a_replay_could_not_make_are_refused(tmp_path: Path) -> None:
    store = MemoryStore(embedder=HashingEmbedder(dim=64))
    before = MemoryService(store, load_pipeline("bm25"), clock=StepClock())
    old = before.store_memory("written before the recording began", "fact")["id"]
    recorder = Recorder(tmp_path / "rec")
    svc = MemoryService(store, load_pipeline("bm25"), recorder=recorder, clock=StepClock(2e9))
    for change in (lambda: svc.forget(old, "stale"), lambda: svc.promote(old),
                   lambda: svc.correct(old, "rewritten", "fix")):
        with pytest.raises(ServiceError, match=re.escape(
                f"memory {old!r} is not in the recording {tmp_path / 'rec'} (it was written "
                "before the recording began)")):
            change()
    agent = MemoryService(store, load_pipeline("bm25"), principal=Principal.of("atlas"),
                          recorder=recorder, clock=StepClock(3e9))
    dec = agent.store_decision("Use Postgres", "mature")["id"]
    with pytest.raises(ServiceError, match=f"memory '{dec}' is a decision: decisions are "
                                           "immutable"):
        agent.promote(dec)
    mine = agent.store_memory("recorded, so changeable", "fact")["id"]
    agent.forget(mine, "done")  # a memory of the recording: changed as ever
    recorder.close()
    assert store.get(old).active and store.get(dec).scope == "agent:atlas"
    assert validate_dataset(tmp_path / "rec") == []
    assert before.forget(old, "stale")["forgotten"] is True  # no recording: nothing to replay


def test_a_line_the_validator_refuses_fails_the_call_and_writes_nothing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    recorder = Recorder(tmp_path / "rec")
    store = MemoryStore(embedder=HashingEmbedder(dim=64))
    svc = _service(store, None, recorder=recorder)
    real = svc._store_line

    def broken(*args: Any) -> dict[str, Any]:
        return {**real(*args), "importance": "urgent"}  # a value the validator refuses

    monkeypatch.setattr(svc, "_store_line", broken)
    with pytest.raises(ServiceError, match=re.escape(
            "field 'importance': unknown importance 'urgent'")):
        svc.store_memory("never stored", "fact")
    out = svc.store_many([{"content": "never stored either"}])
    assert "unknown importance 'urgent'" in out[0]["error"]
    recorder.close()
    assert len(store) == 0  # the write was undone with its line
    assert (tmp_path / "rec" / "memories.jsonl").read_bytes() == b""


@pytest.mark.parametrize("text", ["\x00", "\x1b[2J\x1b[31m", "\u200b\u200d", "\x07\x1b]0;x\x07"])
def test_text_with_nothing_visible_is_refused(store: MemoryStore, text: str) -> None:
    svc = _service(store, None)
    message = "holds no visible text (only control characters, format characters or terminal "
    with pytest.raises(ServiceError, match=re.escape(f"field 'content' {message}")):
        svc.store_memory(text)
    with pytest.raises(ServiceError, match=re.escape(f"field 'from' {message}")):
        svc.relate(text, "uses", "Postgres")
    with pytest.raises(ServiceError, match=re.escape(f"field 'name' {message}")):
        svc.store_entity(text)
    assert svc.store_memory("\x1b[31mred\x1b[0m alert")["action"] == "created"  # shows "red"
    assert len(store) == 1


def test_a_refused_call_never_rebuilds_the_store(
    store: MemoryStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A call refused before it writes leaves SQLite alone: a rolled-back transaction makes
    the store rebuild its whole in-memory state, with the lock held against every client."""
    svc = _service(store, "atlas")
    mine = svc.store_memory("Atlas deploys with helm", "fact")["id"]
    rebuilds: list[int] = []
    real = store._reload
    monkeypatch.setattr(store, "_reload", lambda: (rebuilds.append(1), real())[1])
    for call in (
        lambda: svc.store_memory(""),
        lambda: svc.store_memory("x", metadata={"tags": 1}),
        lambda: svc.store_decision("x", alternatives="MySQL"),
        lambda: svc.relate("a", "likes", "b"),
        lambda: svc.store_entity("x", relations=[{"to": "y"}]),
        lambda: svc.forget("nope", "x"),
        lambda: svc.correct(mine, "", "x"),
        lambda: svc.promote("nope"),
        lambda: svc.consolidate(scope="agent:hera"),
        lambda: svc.recall("x", at_time="2999-01-01T00:00:00Z"),
        lambda: svc.capture_episode("x", []),
    ):
        with pytest.raises(ServiceError):
            call()
    assert rebuilds == []
    assert svc.recall("helm")["ids"] == [mine]  # and the store serves as before


def test_a_deduplicated_write_reports_the_memory_it_names(store: MemoryStore) -> None:
    svc = _service(store, None)
    rule = svc.store_memory("Always run the linter before pushing", "rule")
    again = svc.store_memory("Always run the linter before pushing", "fact")
    assert (again["id"], again["action"]) == (rule["id"], "deduplicated")
    assert (again["memory_type"], again["scope"]) == ("rule", rule["scope"])


def test_an_entity_store_entity_wrote_alone_is_found_by_its_profile(store: MemoryStore) -> None:
    svc = _service(store, None)
    made = svc.store_entity("Payments", "project", {"owner": "alice"})
    got = svc.get_entity("Payments")
    assert got["entity"] == {"name": "Payments", "type": "project"}
    assert [m["id"] for m in got["profile"]] == [made["id"]]
    assert (got["relations"], got["memories"]) == ([], [])
    assert svc.resource("team", "Payments")["entity"]["name"] == "Payments"
    with pytest.raises(ServiceError, match="field 'entity': unknown entity 'Nobody'"):
        svc.resource("team", "Nobody")
    with pytest.raises(ServiceError, match="field 'name': unknown entity 'Nobody'"):
        svc.get_entity("Nobody")
