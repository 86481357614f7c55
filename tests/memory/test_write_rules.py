"""Lifecycle writes (promote, retire, save, correct) apply the rules of a write: what a write
refuses, they refuse too, before anything changes, and no row they write keeps the store from
opening again."""

from __future__ import annotations

from typing import Any

import pytest

from memlab.memory.records import DecisionImmutableError, MemoryInputError
from memlab.memory.store import MemoryStore

from .conftest import memory_state, sql_state

T0 = 1_767_225_600.0


def test_promote_refuses_a_decision_as_a_write_does() -> None:
    s = MemoryStore()
    team = s.store("We chose PostgreSQL for billing", "decision", key="db", now=T0).id
    mine = s.store(
        "We chose Redis for caching", "decision", key="db", scope="agent:atlas", now=T0 + 1
    ).id
    keyless = s.store("We ship on Fridays", "decision", scope="project:apollo", now=T0 + 2).id
    # a write of the same decision into the team scope is refused ...
    with pytest.raises(DecisionImmutableError, match="decisions are immutable"):
        s.store("We chose Redis for caching", "decision", key="db", now=T0 + 3)
    before = memory_state(s), sql_state(s)
    # ... and so is moving it there, with or without a key
    for mid in (mine, keyless):
        for supersede in (True, False):
            with pytest.raises(DecisionImmutableError, match=f"decision {mid} is immutable"):
                s.promote(mid, now=T0 + 4, supersede=supersede)
    assert (memory_state(s), sql_state(s)) == before
    assert [(s.get(m).id, s.get(m).scope, s.get(m).active) for m in (team, mine, keyless)] == [
        (team, "team", True),
        (mine, "agent:atlas", True),
        (keyless, "project:apollo", True),
    ]
    # what a write accepts, promote still does
    fact = s.store("Acme uses Remix", "fact", key="stack", scope="agent:atlas", now=T0 + 5).id
    assert s.promote(fact, now=T0 + 6).action == "promoted"


# (updates, the error's type, what its message says)
BAD_UPDATES: list[tuple[dict[str, Any], type[Exception], str]] = [
    ({"importance": "urgent"}, MemoryInputError, "field 'importance': 'urgent' is not one of"),
    ({"authority": "root"}, MemoryInputError, "field 'authority'"),
    ({"category": "misc"}, MemoryInputError, "field 'category'"),
    ({"knowledge_category": None}, TypeError, "field 'knowledge_category' must be a string"),
    ({"confidence": 1.5}, MemoryInputError, r"field 'confidence' must lie in \[0, 1\]"),
    ({"confidence": True}, TypeError, "field 'confidence' must be a number"),
    ({"observation_count": 0}, MemoryInputError, "field 'observation_count' is 0"),
    ({"observed_by": "atlas"}, MemoryInputError, "field 'observed_by' is a string"),
    ({"entities": [{"name": " ", "type": "tech"}]}, MemoryInputError, "field 'entities'"),
    ({"metadata": ["a"]}, TypeError, "field 'metadata' must be an object"),
    ({"metadata": {"x": float("nan")}}, MemoryInputError, "field 'metadata' holds nan"),
    ({"key": " "}, MemoryInputError, "field 'key' must not be empty"),
    ({"subject": "seo\ud800"}, MemoryInputError, "field 'subject' holds a lone surrogate"),
    (
        {"superseded_by": "no-such-memory"},
        MemoryInputError,
        "field 'superseded_by': 'no-such-memory' is not a memory of the store",
    ),
    ({"supersedes": ""}, MemoryInputError, "field 'supersedes' must not be empty"),
    ({"archived_at": "yesterday"}, ValueError, "field 'archived_at' is not an ISO 8601"),
    ({"purged_at": "2026-01-01T00:00:00"}, ValueError, "field 'purged_at'.*has no time zone"),
    ({"archived_at": float("inf")}, ValueError, "field 'archived_at': inf is outside years"),
    ({"scope": "agent:atlas"}, MemoryInputError, "payload field.*scope cannot be changed"),
]


@pytest.mark.parametrize(("updates", "error", "message"), BAD_UPDATES)
def test_retire_refuses_what_a_write_refuses_and_the_store_still_opens(
    tmp_path, updates: dict[str, Any], error: type[Exception], message: str
) -> None:
    with MemoryStore(tmp_path, chroma=False) as s:
        mid = s.store("Globex SEO audit in progress", "status", subject="seo", now=T0).id
        s.store("Acme runs PostgreSQL", "fact", key="db", now=T0 + 1)
        before = memory_state(s), sql_state(s)
        with pytest.raises(error, match=message):
            s.retire(mid, "expired", now=T0 + 2, **updates)
        assert (memory_state(s), sql_state(s)) == before
    with MemoryStore(tmp_path, chroma=False) as again:
        assert again.get(mid).active and again.check() == []


def test_retire_takes_what_a_write_takes_in_the_form_a_write_stores() -> None:
    s = MemoryStore()
    mid = s.store("Globex SEO audit in progress", "status", subject="seo", now=T0).id
    other = s.store("Globex SEO audit done", "status", subject="seo-2", now=T0 + 1).id
    password = "hunter2-" + "Xk9#qLm2"
    rec = s.retire(
        mid,
        "merged",
        now=T0 + 2,
        superseded_by=other,
        archived_at="2026-01-02T00:00:00Z",
        confidence=1,
        forgotten_reason=f"password: {password}",
    )
    assert (rec.superseded_by, rec.archived_at, rec.confidence) == (other, T0 + 86_400.0, 1.0)
    assert type(rec.confidence) is float
    assert password not in rec.forgotten_reason and "[REDACTED" in rec.forgotten_reason


def _set(name: str, value: Any):
    def edit(rec: Any, ids: dict[str, str]) -> None:
        setattr(rec, name, value(ids) if callable(value) else value)

    return edit


# in-place edits a caller of ``save`` could make, and the field the error names
BAD_EDITS = [
    (_set("confidence", 1.5), "confidence"),
    (_set("importance", "urgent"), "importance"),
    (_set("metadata", {"x": float("nan")}), "metadata"),
    (_set("entities", [{"name": "", "type": "tech"}]), "entities"),
    (_set("supersedes", "no-such-memory"), "supersedes"),
    (_set("observed_by", ["a", 3]), "observed_by"),
    (_set("key", "db\ud800"), "key"),
    (_set("type", "fact"), "id, client_id, type or scope"),
    (_set("client_id", "globex"), "id, client_id, type or scope"),
    (_set("scope", "agent:atlas"), "id, client_id, type or scope"),
]


@pytest.mark.parametrize(("edit", "field"), BAD_EDITS)
def test_save_refuses_a_record_the_store_could_not_read_back(tmp_path, edit, field) -> None:
    with MemoryStore(tmp_path, chroma=False) as s:
        ids = {"ev": s.store("Deployed the Acme storefront", now=T0).id}
        before = memory_state(s), sql_state(s)
        edit(s.get(ids["ev"]), ids)
        with pytest.raises(MemoryInputError) as info:
            s.save(ids["ev"], "edited", now=T0 + 1)
        assert str(info.value).startswith(f"memory {ids['ev']}: payload field '{field}' ")
        assert str(info.value).endswith("; nothing was changed")
        assert (memory_state(s), sql_state(s)) == before  # the edit was rolled back
    with MemoryStore(tmp_path, chroma=False) as again:
        assert again.check() == []
        assert again.history(ids["ev"])["change"].to_list() == ["created"]


@pytest.mark.parametrize("mtype", ["fact", "status", "event"])
def test_correct_refuses_a_text_another_active_memory_holds(mtype: str) -> None:
    s = MemoryStore()
    fields = {"fact": {"key": "db"}, "status": {"subject": "db"}, "event": {}}[mtype]
    other = {"fact": {"key": "db3"}, "status": {"subject": "db3"}, "event": {}}[mtype]
    old = s.store("Acme runs PostgreSQL", mtype, now=T0, **fields).id
    first = s.store("Globex runs Oracle", mtype, now=T0 + 1, **other).id
    holder = s.store("Globex runs Oracle 19c", mtype, now=T0 + 2, **other).id
    lineage = s.get(holder).supersedes
    before = memory_state(s), sql_state(s)
    with pytest.raises(
        MemoryInputError,
        match=(
            f"memory {old} cannot be corrected to the text of memory {holder}, active in the same "
            f"scope: forget {old} instead"
        ),
    ):
        s.correct(old, "Globex runs Oracle 19c", "wrong client", now=T0 + 3)
    assert (memory_state(s), sql_state(s)) == before
    assert s.get(old).active and s.get(holder).supersedes == lineage
    assert lineage == (first if mtype != "event" else None)
    # correcting a memory to its own text, or to a text held in another scope, still works
    res = s.correct(old, "Acme runs PostgreSQL", "re-checked", now=T0 + 4)
    assert (res.action, res.superseded) == ("created", old)


@pytest.mark.parametrize(
    "name", ["key", "subject", "status_value", "source_agent", "client_id", "id"]
)
def test_a_string_field_that_is_not_text_is_refused_naming_it(name: str) -> None:
    s = MemoryStore()
    with pytest.raises(MemoryInputError, match=f"field '{name}' holds a lone surrogate"):
        s.store("Globex SEO audit in progress", "status", now=T0, **{name: "x\ud800"})
    assert len(s) == 0


class _BlankEntities:
    """An entity extractor whose mentions have a blank name or type."""

    def __init__(self, name: str, kind: str) -> None:
        self.name, self.kind = name, kind

    def extract(self, text: str, **kwargs: Any) -> list[Any]:
        from memlab.memory.entities import Entity, EntityMention

        return [EntityMention(Entity(self.name, self.kind), "mentioned")]

    def resolve(self, name: str) -> None:
        return None

    def extract_query_entities(self, text: str) -> list[Any]:
        return []


@pytest.mark.parametrize(("name", "kind"), [("", "tech"), ("Redis", " "), ("  ", "")])
def test_entities_the_loader_would_refuse_are_not_written(tmp_path, name: str, kind: str) -> None:
    with MemoryStore(tmp_path, chroma=False, extractor=_BlankEntities(name, kind)) as s:
        with pytest.raises(MemoryInputError, match="field 'entities' .from the entity extractor"):
            s.store("Acme caches sessions in Redis", now=T0)
        assert len(s) == 0
    with MemoryStore(tmp_path, chroma=False) as again:
        assert len(again) == 0 and again.check() == []


def _retext(text: str):
    def edit(rec: Any, ids: dict[str, str]) -> None:
        from memlab.memory.store import content_hash

        rec.text, rec.content_hash = text, content_hash(text)

    return edit


_ENTITIES = (
    "'entities' are found in the text by the store's entity extractor and cannot be changed "
    "in place (the entity graph was linked from them)"
)

# in-place edits of fields the store derives or only its lifecycle moves, and the message
DERIVED_EDITS = [
    (_set("content_hash", "0" * 16),
     "'content_hash' is computed by the store from the text and cannot be changed"),
    # a new text with the hash of that text: still not the hash the row was written with
    (_retext("password=hunter2-very-secret"),
     "'content_hash' is computed by the store from the text and cannot be changed"),
    (_set("text", "password=hunter2-very-secret"),
     "'text' does not match content_hash: a text cannot be changed in place (correct writes "
     "a corrected memory)"),
    (_set("observation_count", 3),
     "'observation_count' must count the agents of observed_by (1), got 3"),
    (_set("observed_by", ["a", "b"]),
     "'observation_count' must count the agents of observed_by (2), got 1"),
    (_set("entities", []), _ENTITIES),
    (_set("entities", [{"name": "a", "type": "agent"}, {"name": "PostgreSQL", "type": "technology"},
                       {"name": "Oracle", "type": "technology"}]), _ENTITIES),
    (_set("entities", [{"name": "a", "type": "agent"}, {"name": "PostgreSQL", "type": "concept"}]),
     _ENTITIES),
    (_set("active", False), "'active' cannot be changed in place (the store's lifecycle moves it)"),
    (_set("created_at", T0 - 5.0),
     "'created_at' cannot be changed in place (the store's lifecycle moves it)"),
    (_set("valid_from", T0 + 9.0),
     "'valid_from' cannot be changed in place (the store's lifecycle moves it)"),
    (_set("valid_to", T0 + 9.0),
     "'valid_to' cannot be changed in place (the store's lifecycle moves it)"),
    (_set("forgotten_reason", "hidden"),
     "'forgotten_reason' cannot be changed in place (the store's lifecycle moves it)"),
    (_set("access_count", 7),
     "'access_count' cannot be changed in place (the store's lifecycle moves it)"),
    (_set("last_accessed_at", T0 + 3.0),
     "'last_accessed_at' cannot be changed in place (the store's lifecycle moves it)"),
]


@pytest.mark.parametrize("via", ["save", "touch"])
@pytest.mark.parametrize(("edit", "message"), DERIVED_EDITS)
def test_a_field_the_store_derives_edited_in_place_is_refused_and_put_back(
    tmp_path, edit, message, via
) -> None:
    with MemoryStore(tmp_path, chroma=False) as s:
        mid = s.store("Acme runs PostgreSQL for billing", "fact", key="db", source_agent="a",
                      now=T0).id
        before = memory_state(s), sql_state(s)
        edit(s.get(mid), {})
        with pytest.raises(MemoryInputError) as info:
            if via == "save":
                s.save(mid, "edited", now=T0 + 1)
            else:
                s.touch([mid], now=T0 + 1)
        assert str(info.value) == f"memory {mid}: payload field {message}; nothing was changed"
        assert (memory_state(s), sql_state(s)) == before  # the edit was put back
        # the store still dedups onto the memory, and a legitimate edit still saves
        assert s.store("Acme runs PostgreSQL for billing", "fact", key="db", source_agent="a",
                       now=T0 + 2).action == "deduplicated"
        s.get(mid).knowledge_category = "technical"
        s.save(mid, "reclassified", now=T0 + 3)
        s.touch([mid], now=T0 + 4)
    with MemoryStore(tmp_path, chroma=False) as again:  # it opens: nothing bricked it
        assert again.check() == []
        assert again.get(mid).knowledge_category == "technical"
        assert again.get(mid).access_count == 1
        assert again.history(mid)["change"].to_list() == ["created", "reclassified"]


def test_a_purged_memory_keeps_saving_with_its_erased_text() -> None:
    s = MemoryStore()
    mid = s.store("Acme runs PostgreSQL for billing", now=T0).id
    s.forget(mid, "asked to", now=T0 + 1)
    s.purge(mid, now=T0 + 2)
    s.get(mid).metadata = {"note": "kept"}
    s.save(mid, "annotated", now=T0 + 3)
    assert (s.get(mid).text, s.get(mid).metadata) == ("", {"note": "kept"})
