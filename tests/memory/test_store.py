import logging

import numpy as np
import pytest

from memlab.memory.records import DecisionImmutableError, MemoryInputError, UnknownMemoryError
from memlab.memory.store import MemoryStore, content_hash

DAY = 86_400.0
T0 = 1_767_225_600.0  # 2026-01-01T00:00:00Z


def vec(*xs):
    return np.array(xs, dtype=np.float32)


@pytest.fixture
def store():
    return MemoryStore()


def test_content_hash_is_first_16_hex_of_sha256():
    import hashlib

    assert content_hash("abc") == hashlib.sha256(b"abc").hexdigest()[:16]


def test_store_fills_the_seed_payload(store):
    r = store.store(
        "Acme uses Next.js for the storefront",
        "fact",
        source_agent="claude-code",
        client_id="acme-corp",
        key="acme-stack",
        importance="high",
        knowledge_category="technical",
        now=T0,
        embedding=vec(1, 0, 0),
    )
    rec = store.get(r.id)
    payload = rec.to_payload()
    assert r.action == "created"
    assert payload["observed_by"] == ["claude-code"]
    assert payload["observation_count"] == 1
    assert payload["content_hash"] == content_hash("Acme uses Next.js for the storefront")
    assert payload["created_at"] == "2026-01-01T00:00:00.000Z"
    assert payload["valid_from"] == "2026-01-01T00:00:00.000Z"
    assert payload["valid_to"] is None
    assert payload["active"] is True and payload["confidence"] == 1.0
    assert {"name": "acme-corp", "type": "client"} in payload["entities"]
    assert {"name": "Next.js", "type": "technology"} in payload["entities"]


def test_same_agent_duplicate_is_not_written(store):
    a = store.store("Deploys happen on Fridays", source_agent="a", now=T0)
    b = store.store("Deploys happen on Fridays", source_agent="a", now=T0 + 1)
    assert (b.id, b.action) == (a.id, "deduplicated")
    assert len(store) == 1


def test_other_agent_corroborates_and_cap_holds():
    store = MemoryStore(max_observed_by=3)
    a = store.store("Deploys happen on Fridays", source_agent="a", now=T0)
    for agent in ("b", "c", "d"):
        r = store.store("Deploys happen on Fridays", source_agent=agent, now=T0 + 1)
        assert (r.id, r.action) == (a.id, "corroborated")
    rec = store.get(a.id)
    assert rec.observed_by == ["a", "b", "c"]
    assert rec.observation_count == 3
    assert len(store) == 1


def test_dedup_is_scoped_by_client_and_type(store):
    a = store.store("Invoice overdue", source_agent="a", client_id="x", now=T0)
    b = store.store("Invoice overdue", source_agent="a", client_id="y", now=T0)
    c = store.store("Invoice overdue", "fact", source_agent="a", client_id="x", key="k", now=T0)
    assert len({a.id, b.id, c.id}) == 3


def test_fact_supersession_by_key(store):
    old = store.store("Stack is Rails", "fact", source_agent="a", key="stack", now=T0)
    new = store.store("Stack is Django", "fact", source_agent="a", key="stack", now=T0 + DAY)
    o, n = store.get(old.id), store.get(new.id)
    assert new.superseded == old.id
    assert (o.active, o.superseded_by, o.superseded_at, o.valid_to) == (
        False, new.id, T0 + DAY, T0 + DAY,
    )
    assert (n.active, n.supersedes, n.valid_from, n.valid_to) == (True, old.id, T0 + DAY, None)


def test_status_supersession_by_subject_and_given_valid_from(store):
    old = store.store("CI is red", "status", source_agent="a", subject="ci", now=T0)
    new = store.store(
        "CI is green", "status", source_agent="a", subject="ci", status_value="green",
        now=T0 + DAY, valid_from=T0 + 0.5 * DAY,
    )
    assert store.get(old.id).superseded_by == new.id
    assert store.get(new.id).valid_from == T0 + 0.5 * DAY
    # the old status held until the new one became true: one version at every instant
    assert store.get(old.id).valid_to == T0 + 0.5 * DAY
    for t, expected in ((T0 + 0.25 * DAY, [old.id]), (T0 + 0.75 * DAY, [new.id])):
        mask = store.visible_mask(at_time=t)
        assert store.ids_of(np.flatnonzero(mask)) == expected


def test_a_version_dated_ahead_leaves_the_old_one_true_until_then(store):
    old = store.store("Launch in May", "fact", source_agent="a", key="launch", now=T0)
    new = store.store("Launch in June", "fact", source_agent="a", key="launch", now=T0 + DAY,
                      valid_from=T0 + 10 * DAY)
    assert store.get(old.id).valid_to == T0 + 10 * DAY
    assert store.ids_of(np.flatnonzero(store.visible_mask(at_time=T0 + 5 * DAY))) == [old.id]
    assert store.ids_of(np.flatnonzero(store.visible_mask(at_time=T0 + 10 * DAY))) == [new.id]
    # dated before the old one began: the old one was never true
    again = store.store("Launch in July", "fact", source_agent="a", key="launch",
                        now=T0 + 2 * DAY, valid_from=T0 - DAY)
    assert store.get(new.id).valid_to == T0 + 10 * DAY  # max(T0 - DAY, its own valid_from)
    assert store.get(again.id).supersedes == new.id


def test_supersession_is_scoped_by_client(store):
    a = store.store("Stack is Rails", "fact", source_agent="a", key="stack", client_id="x", now=T0)
    store.store("Stack is Go", "fact", source_agent="a", key="stack", client_id="y", now=T0 + 1)
    assert store.get(a.id).active


def test_missing_key_or_subject_warns_once_per_store(store, caplog):
    with caplog.at_level(logging.WARNING, logger="memlab.store"):
        store.store("A fact", "fact", source_agent="a", now=T0)
        store.store("A status", "status", source_agent="a", now=T0)
        store.store("Another fact", "fact", source_agent="a", now=T0 + 1)
        store.store("Another status", "status", source_agent="a", now=T0 + 1)
    assert [r.getMessage() for r in caplog.records] == [
        "fact stored without a key: it can never be superseded (said once per store)",
        "status stored without a subject: it can never be superseded (said once per store)",
    ]


def test_a_store_with_write_warnings_off_says_nothing(store, caplog):
    store.warn_writes = False
    with caplog.at_level(logging.WARNING, logger="memlab.store"):
        store.store("A fact", "fact", source_agent="a", now=T0)
        store.store("A status", "status", source_agent="a", now=T0)
    assert caplog.records == []
    assert len(store) == 2


def test_decisions_are_immutable(store):
    d = store.store("We chose Qdrant", "decision", source_agent="a", key="vdb", now=T0)
    with pytest.raises(DecisionImmutableError, match="immutable"):
        store.correct(d.id, "We chose Chroma", "changed mind", now=T0 + 1)
    with pytest.raises(DecisionImmutableError, match="never be superseded"):
        store.store("We chose Chroma", "decision", source_agent="a", key="vdb", now=T0 + 2)
    with pytest.raises(DecisionImmutableError):
        store.forget(d.id, "oops", now=T0 + 3)
    assert store.get(d.id).active and len(store) == 1


def test_events_never_supersede(store):
    a = store.store("Deployed v1", "event", source_agent="a", key="deploy", now=T0)
    store.store("Deployed v2", "event", source_agent="a", key="deploy", now=T0 + 1)
    assert store.get(a.id).active


def test_forget_and_correct(store):
    a = store.store("Office is in Paris", "fact", source_agent="a", key="office", now=T0)
    store.forget(a.id, "wrong city", now=T0 + DAY)
    rec = store.get(a.id)
    assert (rec.active, rec.forgotten_reason, rec.expired_at) == (False, "wrong city", T0 + DAY)
    assert not store.visible_mask(include_superseded=True)[0]

    b = store.store("Office is in Lyon", "fact", source_agent="a", key="office", now=T0 + 2 * DAY)
    c = store.correct(b.id, "Office is in Lille", "typo", now=T0 + 3 * DAY)
    assert c.superseded == b.id
    assert store.get(b.id).superseded_by == c.id
    assert store.get(c.id).supersedes == b.id
    assert store.get(c.id).metadata == {"correction_reason": "typo"}
    assert store.get(c.id).key == "office"
    assert [row["change"] for row in store.history(b.id).to_dicts()] == ["created", "corrected"]


def test_restore_gives_back_the_slots_and_refuses_a_taken_one(store):
    """A forgotten memory comes back with its key and dedup slots, unless a memory written
    since holds one (the slots are per client and namespace, as the write path keys them)."""
    a = store.store("Office is in Paris", "fact", source_agent="a", key="office",
                    client_id="acme", now=T0)
    store.forget(a.id, "asked to", now=T0 + 1)
    store.restore(a.id, now=T0 + 2)
    assert store.get(a.id).active and store.get(a.id).forgotten_reason is None
    b = store.store("Office is in Lyon", "fact", source_agent="a", key="office",
                    client_id="acme", now=T0 + 3)
    assert b.superseded == a.id  # the restored memory held its key again
    store.forget(b.id, "asked to", now=T0 + 4)
    c = store.store("Office is in Lille", "fact", source_agent="a", key="office",
                    client_id="acme", now=T0 + 5)
    with pytest.raises(MemoryInputError, match=f"cannot be restored: {c.id} holds it"):
        store.restore(b.id, now=T0 + 6)
    assert not store.get(b.id).active and store.get(c.id).active
    d = store.store("Release on Friday", "event", source_agent="a", client_id="acme",
                    now=T0 + 7)
    store.forget(d.id, "asked to", now=T0 + 8)
    e = store.store("Release on Friday", "event", source_agent="a", client_id="acme",
                    now=T0 + 9)
    assert e.action == "created"  # a forgotten memory is no duplicate to corroborate
    with pytest.raises(MemoryInputError, match=f"cannot be restored: {e.id} holds it"):
        store.restore(d.id, now=T0 + 10)


def test_visible_mask_scope_history_and_time(store):
    g = store.store("Global rule", "fact", source_agent="a", key="g", now=T0)
    x1 = store.store("X stack v1", "fact", source_agent="a", key="s", client_id="x", now=T0)
    store.store("Y note", source_agent="a", client_id="y", now=T0)
    x2 = store.store("X stack v2", "fact", source_agent="a", key="s", client_id="x", now=T0 + DAY)
    rows = {store.idx(m): m for m in (g.id, x1.id, x2.id)}
    assert store.visible_mask().tolist() == [True, False, True, True]
    assert store.visible_mask(client_id="x").tolist() == [True, False, False, True]
    assert store.visible_mask(client_id="x", include_superseded=True).tolist() == [
        True, True, False, True,
    ]
    assert store.visible_mask(at_time=T0 + 0.5 * DAY).tolist() == [True, True, True, False]
    assert store.visible_mask(now=T0).tolist() == [True, False, True, False]
    assert len(rows) == 3


def test_touch_counts_accesses(store):
    a = store.store("Hello", source_agent="a", now=T0)
    store.touch([a.id, a.id], now=T0 + 5)
    rec = store.get(a.id)
    assert (rec.access_count, rec.last_accessed_at) == (2, T0 + 5)
    assert store.column("access_count").tolist() == [2]


def test_search_ranks_by_similarity_decay_and_boost():
    class Fixed:
        model_id = "fixed"
        dim = 2

        def embed(self, texts):
            table = {"q": [1, 0], "fact one": [0.8, 0.6], "event two": [0.6, 0.8]}
            return np.array([table[t] for t in texts], dtype=np.float32)

    store = MemoryStore(embedder=Fixed())
    f = store.store("fact one", "fact", source_agent="a", key="k", now=T0)
    e = store.store("event two", "event", source_agent="a", now=T0)
    hits = store.search("q", now=T0 + 30 * DAY, touch=False)
    assert hits["mem_id"].to_list() == [e.id, f.id]
    assert hits["effective_score"].to_list() == pytest.approx([0.6, 0.8 * 0.98**30], rel=1e-6)
    store.search("q", now=T0 + 30 * DAY)
    assert store.get(f.id).access_count == 1


class TwoDim:
    model_id = "two"
    dim = 2

    def embed(self, texts):
        return np.array([[1.0, float(len(t) % 3)] for t in texts], dtype=np.float32)


@pytest.mark.parametrize("k", [-1, -3, 1.5, "2", True, None])
def test_search_refuses_a_k_that_is_not_a_count(k):
    store = MemoryStore(embedder=TwoDim())
    for i in range(4):
        store.store(f"memory {i}", source_agent="a", now=T0 + i)
    with pytest.raises(ValueError, match="field 'k' must be an int >= 0"):
        store.search("memory", k=k, now=T0 + 10, min_similarity=-1.0, touch=False)


def test_search_k_counts_rows_exactly():
    store = MemoryStore(embedder=TwoDim())
    for i in range(4):
        store.store(f"memory {i}", source_agent="a", now=T0 + i)
    for k in (0, 1, 3, 4, 10):
        hits = store.search("memory", k=k, now=T0 + 10, min_similarity=-1.0, touch=False)
        assert hits.height == min(k, 4)


def test_row_lookups_refuse_negative_and_out_of_range_rows(store):
    a = store.store("only row", source_agent="a", now=T0)
    assert store.record_at(0).id == a.id
    assert store.ids_of([0]) == [a.id]
    for bad in (-1, 1):
        with pytest.raises(IndexError):
            store.record_at(bad)
        with pytest.raises(IndexError):
            store.ids_of(np.array([0, bad]))
    with pytest.raises(TypeError):
        store.record_at(0.0)
    assert store.vectors.get(-1) is None


@pytest.mark.parametrize(
    "kwargs", [{"max_observed_by": 0}, {"max_observed_by": -1}, {"max_text_chars": 2.5}]
)
def test_store_limits_must_be_positive_ints(kwargs):
    with pytest.raises(MemoryInputError, match=next(iter(kwargs))):
        MemoryStore(**kwargs)


def test_chroma_query_refuses_a_negative_k():
    from memlab.memory.vectors import ChromaIndex

    index = ChromaIndex(None)
    index.upsert(["a", "b"], np.eye(2, dtype=np.float32), [{"x": 1}, {"x": 2}])
    assert [mid for mid, _ in index.query(np.array([1.0, 0.0]), 1)] == ["a"]
    assert index.query(np.array([1.0, 0.0]), 0) == []
    with pytest.raises(ValueError, match="'k'"):
        index.query(np.array([1.0, 0.0]), -1)


@pytest.mark.parametrize(
    ("kwargs", "error", "field"),
    [
        ({"text": ""}, MemoryInputError, "'text'"),
        ({"text": "   "}, MemoryInputError, "'text'"),
        ({"text": 42}, TypeError, "'text'"),
        ({"text": "x" * 20_001}, MemoryInputError, "'text'"),
        ({"text": "bad \udcff byte"}, MemoryInputError, "UTF-8"),
        ({"type": "memo"}, MemoryInputError, "'type'"),
        ({"importance": "urgent"}, MemoryInputError, "'importance'"),
        ({"category": "misc"}, MemoryInputError, "'category'"),
        ({"knowledge_category": "sports"}, MemoryInputError, "'knowledge_category'"),
        ({"now": "yesterday"}, ValueError, "'now'"),
        ({"valid_from": "2026-13-45"}, ValueError, "'valid_from'"),
        ({"metadata": ["x"]}, TypeError, "'metadata'"),
        ({"confidence": 1.5}, MemoryInputError, "'confidence'"),
        ({"client_id": 3}, TypeError, "'client_id'"),
        ({"embedding": [float("nan"), 1.0]}, MemoryInputError, "'embedding'"),
    ],
)
def test_bad_input_names_the_field_and_stores_nothing(store, kwargs, error, field):
    args = {"text": "fine text", "type": "event", "source_agent": "a", "now": T0, **kwargs}
    with pytest.raises(error, match=field):
        store.store(args.pop("text"), args.pop("type"), **args)
    assert len(store) == 0


def test_unknown_id(store):
    with pytest.raises(UnknownMemoryError):
        store.get("nope")


def test_credentials_never_reach_sqlite(store):
    r = store.store(
        "Prod DB is postgres://app:hunter2secret@db.internal:5432/main", "fact",
        source_agent="a", key="db", now=T0,
    )
    assert r.redactions == 1
    assert "hunter2secret" not in store.get(r.id).text
    dump = "\n".join(store._db.iterdump())
    assert "hunter2secret" not in dump


def test_relate_counts_strength(store):
    assert store.relate("acme-corp", "uses", "Next.js", now=T0) == 1.0
    assert store.relate("acme-corp", "uses", "nextjs", now=T0) == 2.0
    with pytest.raises(MemoryInputError, match="'relation'"):
        store.relate("a", "likes", "b")


def test_query_entities_can_match_known_agent_names(store):
    store.store("I went to a support group yesterday", source_agent="Caroline", now=T0)
    store.store("Painting again", source_agent="Melanie", now=T0)
    caroline = store.graph.find("Caroline", "agent")
    assert store.query_entities("What did Caroline do?") == []
    assert store.query_entities("What did caroline do?", known_types=("agent",)) == [caroline]
    assert store.query_entities("Carolines", known_types=("agent",)) == []


def test_mask_known_names_removes_names_and_possessives(store):
    store.store("I went to a support group yesterday", source_agent="Caroline", now=T0)
    store.store("Painting again", source_agent="Melanie", now=T0)
    agents = ("agent",)
    assert (
        store.mask_known_names("What did Caroline's mother give Melanie?", known_types=agents)
        == "What did mother give?"
    )
    assert store.mask_known_names("Did caroline and MELANIE' kids meet?", known_types=agents) == (
        "Did and kids meet?"
    )
    assert store.mask_known_names("Carolines and Caroline-like", known_types=agents) == (
        "Carolines and Caroline-like"
    )
    assert store.mask_known_names("Caroline?", known_types=agents) == "Caroline?"
    assert store.mask_known_names("What did Caroline do?", known_types=("client",)) == (
        "What did Caroline do?"
    )


def test_every_stored_field_is_scrubbed(store):
    res = store.store(
        "deploy notes",
        "fact",
        source_agent="agent token=abc123XYZ",
        key="db password=hunter22",
        metadata={"note": "api_key=k99887766", "nested": [{"secret=zz9988aa": 1}]},
        now=0,
    )
    rec = store.get(res.id)
    assert rec.source_agent == "agent token=[REDACTED:token]"
    assert rec.key == "db password=[REDACTED:password]"
    assert rec.metadata == {
        "note": "api_key=[REDACTED:api_key]",
        "nested": [{"secret=[REDACTED:token]": 1}],
    }
    assert res.redactions == 4
    status = store.store(
        "status of the link",
        "status",
        subject="vpn password: Tr0ub4dor&3",
        status_value="up, token=ab12cd34ef",
        now=1,
    )
    rec = store.get(status.id)
    assert rec.subject == "vpn password: [REDACTED:password]"
    assert rec.status_value == "up, token=[REDACTED:token]"
    payloads = " ".join(p for (p,) in store._db.execute("SELECT payload FROM memories"))
    for secret in ("abc123XYZ", "hunter22", "k99887766", "zz9988aa", "Tr0ub4dor", "ab12cd34ef"):
        assert secret not in payloads


def test_reasons_relations_and_errors_are_scrubbed(store):
    a = store.store("first version", "fact", key="k", now=0)
    b = store.store("second memory", "event", now=0)
    store.forget(b.id, "leaked password=hunter22", now=1)
    assert store.get(b.id).forgotten_reason == "leaked password=[REDACTED:password]"
    new = store.correct(a.id, "fixed version", "typo, token=ab12cd34ef", now=2)
    assert store.get(new.id).metadata["correction_reason"] == "typo, token=[REDACTED:token]"
    store.relate("svc password=hunter22", "uses", "PostgreSQL")
    names = [store.graph.entity(i).name for i in range(store.graph.n_entities)]
    assert "svc password=[REDACTED:password]" in names
    assert not any("hunter22" in n for n in names)
    with pytest.raises(MemoryInputError) as info:
        store.store("x", "password=hunter22")
    assert "hunter22" not in str(info.value)
    assert "[REDACTED:password]" in str(info.value)
    with pytest.raises(UnknownMemoryError) as info2:
        store.get("token=ab12cd34ef")
    assert "ab12cd34ef" not in str(info2.value)


def test_metadata_nesting_is_bounded(store):
    deep: dict = {}
    cur = deep
    for _ in range(40):
        cur["x"] = {}
        cur = cur["x"]
    with pytest.raises(MemoryInputError, match="deeper than 32"):
        store.store("deep", metadata=deep)
    assert len(store) == 0


def test_id_sort_keys_follow_the_ids_order_as_the_store_grows(store):
    # Keys are extended batch by batch (merged into the sorted ids, not re-sorted); after each
    # batch they must order the rows exactly as sorting the id strings does.
    written = 0
    for batch in (1, 4, 9, 2, 17):
        for i in range(batch):
            store.store(f"note number {written + i}", source_agent="a", now=T0 + written + i)
        written += batch
        ids = store.ids
        keys = store.id_sort_keys(np.arange(len(ids)))
        assert sorted(range(len(ids)), key=lambda r: keys[r]) == sorted(
            range(len(ids)), key=lambda r: ids[r]
        )
        assert sorted(keys.tolist()) == list(range(len(ids)))


def test_an_id_does_not_depend_on_memories_the_writer_cannot_read():
    def hera_id(atlas_private: int, other_tenant: int = 0) -> str:
        s = MemoryStore()
        for i in range(atlas_private):
            s.store(f"atlas note {i}", "event", source_agent="atlas", scope="agent:atlas",
                    now=T0 + i)
        for i in range(other_tenant):  # another client's agent called hera
            s.store(f"globex note {i}", "event", source_agent="hera", scope="agent:hera",
                    client_id="globex", now=T0 + 50 + i)
        return s.store("Hera's note", "event", source_agent="hera", scope="agent:hera",
                       now=T0 + 100).id

    assert hera_id(3) == hera_id(0) == hera_id(17) == hera_id(0, other_tenant=4)


def test_an_id_counts_no_memories_at_all():
    # promoted to team, an id is read by others: it must not tell how many memories its
    # writer's scope held before it (forgotten ones included)
    def promoted_id(earlier: int) -> str:
        s = MemoryStore()
        for i in range(earlier):
            rec = s.store(f"draft {i}", "event", source_agent="hera", scope="agent:hera",
                          now=T0 + i)
            if i % 2:
                s.forget(rec.id, "stale", now=T0 + i)
        mem = s.store("Ship on Friday", "fact", source_agent="hera", scope="agent:hera",
                      now=T0 + 100)
        s.promote(mem.id, now=T0 + 101)
        return mem.id

    assert promoted_id(0) == promoted_id(5) == promoted_id(12)


def test_the_same_text_at_the_same_instant_in_two_scopes_gets_two_ids():
    s = MemoryStore()
    a = s.store("Same words", "event", source_agent="atlas", scope="agent:atlas", now=T0)
    b = s.store("Same words", "event", source_agent="hera", scope="agent:hera", now=T0)
    assert a.id != b.id and len(s) == 2
    assert [s.get(a.id).scope, s.get(b.id).scope] == ["agent:atlas", "agent:hera"]
