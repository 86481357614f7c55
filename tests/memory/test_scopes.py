"""Namespaces: scope checks, principals, the store's visibility mask and promotion."""

from __future__ import annotations

import numpy as np
import pytest

from memlab.embed import HashingEmbedder
from memlab.memory.integrity import FIELD_RULES
from memlab.memory.records import MemoryInputError
from memlab.memory.scopes import (
    Principal,
    agent_scope,
    can_read,
    check_name,
    check_scope,
    project_scope,
)
from memlab.memory.store import MemoryStore


def test_check_scope() -> None:
    assert check_scope("team") == "team"
    assert check_scope("agent:atlas") == "agent:atlas"
    assert check_scope("project:apollo-2") == "project:apollo-2"
    for bad in ("agents:x", "agent:", "project", "Team", "agent: x"):
        with pytest.raises(ValueError, match="field 'scope'"):
            check_scope(bad)
    with pytest.raises(TypeError, match="must be a string"):
        check_scope(3)


def test_a_trailing_newline_is_no_part_of_a_valid_name() -> None:
    """A pattern ending in ``$`` matches before a final newline: every check refuses it."""
    long_name = "a" * 128
    assert check_name(long_name, "agent") == long_name
    for name in ("alice\n", "apollo-2\n", long_name + "\n", "a\n\n", "alice\nbob"):
        with pytest.raises(ValueError) as info:
            check_name(name, "agent")
        assert str(info.value) == (
            f"field 'agent': {name!r} is not a valid name (it holds a line break)"
        )
        for scope in (f"agent:{name}", f"project:{name}"):
            with pytest.raises(ValueError, match="field 'scope'"):
                check_scope(scope)
            assert FIELD_RULES["scope"](scope) == (
                "is not a scope (team, agent:NAME or project:NAME)"
            )
        with pytest.raises(ValueError, match="field 'agent'"):
            Principal.of(name)
        with pytest.raises(ValueError, match="field 'projects'"):
            Principal.of("atlas", ["zeus", name])
        with pytest.raises(ValueError, match="field 'agent'"):
            agent_scope(name)
        with pytest.raises(ValueError, match="field 'project'"):
            project_scope(name)
    store = MemoryStore()
    for scope in ("agent:alice\n", "project:apollo\n", "team\n"):
        with pytest.raises(MemoryInputError, match="field 'scope'"):
            store.store("a note", "event", scope=scope, now=1.0)
    assert len(store) == 0


def test_principal_reads() -> None:
    p = Principal.of("atlas", ["zeus", "apollo", "zeus"])
    assert p.projects == ("apollo", "zeus")
    assert p.readable_scopes() == ("team", "agent:atlas", "project:apollo", "project:zeus")
    assert p.can_read("project:zeus") and not p.can_read("agent:hera")
    assert can_read(None, "agent:hera")


@pytest.fixture
def store() -> MemoryStore:
    s = MemoryStore(embedder=HashingEmbedder(dim=32))
    for i, scope in enumerate(("team", "agent:atlas", "agent:hera", "project:apollo")):
        s.store(f"note {scope}", "event", client_id="acme", scope=scope, now=100.0 + i, id=scope)
    return s


def test_visible_mask_applies_the_principal(store: MemoryStore) -> None:
    atlas = Principal.of("atlas", ["apollo"])
    mask = store.visible_mask(client_id="acme", principal=atlas)
    assert store.ids_of(np.flatnonzero(mask)) == ["team", "agent:atlas", "project:apollo"]
    hera = store.visible_mask(principal=Principal.of("hera"))
    assert store.ids_of(np.flatnonzero(hera)) == ["team", "agent:hera"]
    assert store.visible_mask().sum() == 4  # a human reads every scope
    # a principal whose scopes the store has never seen reads the team only
    assert store.ids_of(np.flatnonzero(store.visible_mask(principal=Principal.of("new")))) == [
        "team"
    ]
    where = store.chroma_where(principal=atlas)
    assert {"scope": {"$in": ["team", "agent:atlas", "project:apollo"]}} in where["$and"]


def test_dedup_and_supersession_stay_inside_a_scope() -> None:
    s = MemoryStore(embedder=HashingEmbedder(dim=32))
    a = s.store("Acme uses Next.js", "fact", key="stack", scope="agent:atlas", now=1.0)
    b = s.store("Acme uses Next.js", "fact", key="stack", scope="agent:hera", now=2.0)
    assert a.action == b.action == "created" and a.id != b.id
    c = s.store("Acme uses Remix", "fact", key="stack", scope="agent:hera", now=3.0)
    assert c.superseded == b.id and s.get(a.id).active
    with pytest.raises(MemoryInputError, match="not a scope"):
        s.store("x", "event", scope="everyone")


def test_promote_moves_to_team_and_supersedes_the_team_version() -> None:
    s = MemoryStore(embedder=HashingEmbedder(dim=32))
    team = s.store("Acme uses Next.js", "fact", key="stack", now=1.0)
    mine = s.store("Acme uses Remix", "fact", key="stack", scope="agent:atlas", now=2.0)
    res = s.promote(mine.id, now=3.0)
    assert (res.id, res.action, res.superseded) == (mine.id, "promoted", team.id)
    assert s.get(mine.id).scope == "team" and not s.get(team.id).active
    assert s.history(mine.id)["change"].to_list() == ["created", "promoted"]
    with pytest.raises(MemoryInputError, match="already in the team scope"):
        s.promote(mine.id)
    dup = s.store("Acme uses Remix", "fact", key="stack", scope="agent:hera", now=4.0)
    with pytest.raises(MemoryInputError, match=f"already holds this text as {mine.id}"):
        s.promote(dup.id)


def test_scope_persists(tmp_path) -> None:
    with MemoryStore(tmp_path, embedder=HashingEmbedder(dim=32), chroma=False) as s:
        mid = s.store("private", "event", scope="agent:atlas", now=1.0).id
    with MemoryStore(tmp_path, embedder=HashingEmbedder(dim=32), chroma=False) as s:
        assert s.get(mid).scope == "agent:atlas"
        assert s.visible_mask(principal=Principal.of("hera")).sum() == 0
