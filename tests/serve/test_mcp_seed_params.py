"""The reference designs' tool parameters on the MCP server (seed 003 §4, seed 004's "MCP
Tools Reference"): each is either honoured, with its effect checked exactly, or refused with a
one-line tool error naming it. Driven by the SDK's in-process client."""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable
from typing import Any

import anyio
import numpy as np
import pytest

from memlab.embed import HashingEmbedder
from memlab.memory.store import MemoryStore

mcp = pytest.importorskip("mcp")
from mcp import Client  # noqa: E402

Call = Callable[[str, dict[str, Any]], Awaitable[Any]]


def _run(scenario: Callable[[Call, Call, Any], Awaitable[None]]) -> None:
    """Run ``scenario(ok, error, service)`` against a fresh server (a human principal)."""
    from memlab.pipeline import load_pipeline
    from memlab.serve.mcp_server import build_server
    from memlab.serve.service import MemoryService

    store = MemoryStore(embedder=HashingEmbedder(dim=64))
    service = MemoryService(store, load_pipeline("bm25"), clock=lambda: 1.77e9)
    server = build_server(service)

    async def main() -> None:
        with anyio.fail_after(60):
            async with Client(server) as client:
                async def ok(tool: str, args: dict[str, Any]) -> Any:
                    res = await client.call_tool(tool, args)
                    assert not res.is_error, res.content[0].text
                    return json.loads(res.content[0].text)

                async def error(tool: str, args: dict[str, Any]) -> str:
                    res = await client.call_tool(tool, args)
                    assert res.is_error, (tool, args)
                    text = res.content[0].text
                    prefix = f"Error executing tool {tool}: "
                    assert text.startswith(prefix) and "\n" not in text, text
                    return text.removeprefix(prefix)

                await scenario(ok, error, service)

    anyio.run(main)


# ----------------------------------------------------------------------------- seed 003
def test_seed003_aliases_forget_promote_relate() -> None:
    async def scenario(ok: Call, error: Call, service: Any) -> None:
        a = await ok("store", {"content": "Atlas drafts the weekly report",
                               "scope": "agent:atlas", "memory_type": "semantic"})
        assert await ok("promote", {"memory_id": a["id"]}) == {
            "id": a["id"], "scope": "team", "superseded": None}
        b = await ok("store", {"content": "Old wiki lives on Confluence"})
        assert await ok("forget", {"memory_id": b["id"], "reason": "stale"}) == {
            "id": b["id"], "forgotten": True}
        assert await error("forget", {"memory_id": b["id"], "reason": "again"}) == (
            f"field 'memory_id': unknown memory id {b['id']!r}")
        assert await error("forget", {"id": b["id"], "reason": "again"}) == (
            f"field 'id': unknown memory id {b['id']!r}")
        assert await error("forget", {"reason": "r"}) == "argument 'id' or 'memory_id' is required"
        assert await error("forget", {"id": "x", "memory_id": "x", "reason": "r"}) == (
            "arguments 'id' and 'memory_id' name the same parameter: give one of them")
        assert await error("promote", {"memory_id": "nope"}) == (
            "field 'memory_id': unknown memory id 'nope'")
        assert await error("promote", {}) == "argument 'id' or 'memory_id' is required"
        assert await ok("relate", {"from_entity": "Acme", "relation": "uses",
                                   "to_entity": "Next.js"}) == {
            "from": "Acme", "relation": "uses", "to": "Next.js", "strength": 1.0}
        assert await ok("relate", {"from": "Acme", "relation": "uses", "to": "Vercel"}) == {
            "from": "Acme", "relation": "uses", "to": "Vercel", "strength": 1.0}
        assert await error("relate", {"from_entity": "Acme", "relation": "uses",
                                      "to_entity": "acme"}) == (
            "field 'to_entity': 'Acme' and 'acme' name the same entity")
        assert await error("relate", {"from": "A", "from_entity": "A", "relation": "uses",
                                      "to": "B"}) == (
            "arguments 'from' and 'from_entity' name the same parameter: give one of them")
        assert await error("relate", {"relation": "uses", "to": "B"}) == (
            "argument 'from' or 'from_entity' is required")
        assert await error("relate", {"from": "A", "relation": "uses", "to": "B",
                                      "target": "C"}) == "unknown argument 'target'"

    _run(scenario)


def test_seed003_memory_types_store_and_filter() -> None:
    async def scenario(ok: Call, error: Call, service: Any) -> None:
        stored = {}
        for seed, text in (("semantic", "Deploys use blue green slots"),
                           ("episodic", "We met Jean about deploys"),
                           ("procedural", "To deploy run make release"),
                           ("decision", "Deploys go through the release train")):
            out = await ok("store", {"content": text, "memory_type": seed})
            stored[seed] = out
        assert {k: v["memory_type"] for k, v in stored.items()} == {
            "semantic": "fact", "episodic": "event", "procedural": "preference",
            "decision": "decision"}
        rec = service.store.get(stored["procedural"]["id"])
        assert (rec.type, rec.category) == ("fact", "procedural")
        rule = await ok("store", {"content": "Deploys never on Friday", "memory_type": "rule"})
        status = await ok("store", {"content": "Deploy pipeline is green", "memory_type": "status",
                                    "subject": "pipeline", "status_value": "green"})
        expected = {
            "semantic": [stored["semantic"]["id"]],
            "episodic": {stored["episodic"]["id"], status["id"]},
            "procedural": {stored["procedural"]["id"], rule["id"]},
            "decision": [stored["decision"]["id"]],
        }
        for seed, ids in expected.items():
            got = await ok("recall", {"query": "deploys deploy pipeline", "memory_type": seed})
            assert (set(got["ids"]) if isinstance(ids, set) else got["ids"]) == ids, seed
            listed = await ok("list_memories", {"memory_type": seed})
            assert listed["total"] == len(ids)
            assert {m["id"] for m in listed["memories"]} == set(ids)
        # the memlab name still filters as the service does (a rule and a preference are facts)
        got = await ok("recall", {"query": "deploys deploy", "memory_type": "fact"})
        assert set(got["ids"]) == {stored["semantic"]["id"], stored["procedural"]["id"],
                                   rule["id"]}
        bullets = await ok("recall", {"query": "deploys", "memory_type": "episodic",
                                      "format": "bullets"})
        assert bullets["text"] == (
            f"- [event] We met Jean about deploys (id {stored['episodic']['id']})")
        ep = await ok("capture_episode", {"summary": "Release retro", "observations": [
            {"content": "Releases need a changelog", "memory_type": "procedural"}]})
        assert service.describe(service.store.get(ep["observation_ids"][0]))["memory_type"] == (
            "preference")
        assert "memory_type" in await error("store", {"content": "x", "memory_type": "note"})

    _run(scenario)


# ----------------------------------------------------------------------------- seed 004
def test_store_memory_returns_collection_and_keeps_metadata() -> None:
    async def scenario(ok: Call, error: Call, service: Any) -> None:
        out = await ok("store_memory", {
            "content": "CI fails above complexity 15", "source": "agent/claude-code",
            "memory_type": "rule", "tags": ["ci"], "status": "active",
            "related_ids": ["m-1", "m-1", "m-2"], "last_verified_at": "2026-03-01T12:00:00+02:00",
        })
        assert out == {"id": out["id"], "action": "created", "superseded": None,
                       "redactions": 0, "scope": "team", "memory_type": "rule",
                       "collection": "coding"}
        assert service.store.get(out["id"]).metadata == {
            "source": "agent/claude-code", "related_ids": ["m-1", "m-2"],
            "last_verified_at": "2026-03-01T10:00:00.000Z", "tags": ["ci"],
            "memory_type": "rule"}
        for mtype, coll in (("decision", "coding"), ("preference", "coding"),
                            ("fact", "workspace"), ("summary", "workspace"), ("event", None),
                            ("semantic", "workspace"), ("procedural", "coding")):
            res = await ok("store_memory", {"content": f"A {mtype} memory", "memory_type": mtype})
            assert res["collection"] == coll, mtype
        assert await error("store_memory", {"content": "x", "memory_type": "rule",
                                            "status": "deprecated"}) == (
            "argument 'status': a memory is stored 'active' (got 'deprecated'); supersede one "
            "with 'supersedes' or correct_memory, retire one with delete_memory")
        assert await error("store_memory", {"content": "x", "memory_type": "rule",
                                            "episode_id": "ep-1"}) == (
            "argument 'episode_id': memlab sets a memory's episode itself: store an episode "
            "and its observations with capture_episode")
        assert await error("store_memory", {"content": "x", "memory_type": "fact",
                                            "valid_until": "2026-06-01T00:00:00Z"}) == (
            "argument 'valid_until': memlab cannot set a validity end when storing (a memory "
            "stays valid until it is superseded or deleted); leave it out")
        assert (await error("store_memory", {"content": "x", "memory_type": "fact",
                                             "last_verified_at": "yesterday"})).startswith(
            "argument 'last_verified_at': ")
        assert await error("store_memory", {"content": "x", "memory_type": "fact",
                                            "status": "gone"}) == (
            "argument 'status' must be 'active', 'superseded' or 'deprecated', got 'gone' (str)")

    _run(scenario)


def test_store_memory_supersedes() -> None:
    async def scenario(ok: Call, error: Call, service: Any) -> None:
        old = await ok("store_memory", {"content": "Deploys run on Fridays",
                                        "memory_type": "fact", "source": "slack/ops",
                                        "tags": ["deploy"]})
        new = await ok("store_memory", {"content": "Deploys run on Thursdays",
                                        "memory_type": "fact", "source": "slack/ops",
                                        "tags": ["deploy"], "supersedes": old["id"]})
        assert new == {"id": new["id"], "action": "created", "superseded": old["id"],
                       "redactions": 0, "scope": "team", "memory_type": "fact",
                       "collection": "workspace"}
        assert service.store.get(old["id"]).superseded_by == new["id"]
        assert service.store.get(new["id"]).metadata["source"] == "slack/ops"
        assert await error("store_memory", {"content": "x", "memory_type": "rule",
                                            "supersedes": new["id"]}) == (
            f"argument 'supersedes': memory {new['id']!r} is a 'fact': a memory replaces one "
            "of its own type (got memory_type 'rule')")
        assert await error("store_memory", {"content": "x", "memory_type": "fact",
                                            "source": "slack/dev",
                                            "supersedes": new["id"]}) == (
            "argument 'source': a correction keeps the old memory's source ('slack/ops'): "
            "give that or leave it out, got 'slack/dev'")
        assert await error("store_memory", {"content": "x", "memory_type": "fact",
                                            "confidence": 0.5, "supersedes": new["id"]}) == (
            "argument 'confidence': a correction is written with confidence 1.0 (memlab's "
            "correct sets no other): give that or leave it out, got 0.5")
        assert await error("store_memory", {"content": "x", "memory_type": "fact",
                                            "supersedes": "nope"}) == (
            "field 'supersedes': unknown memory id 'nope'")
        assert len(service.store) == 2  # nothing written by the refusals

    _run(scenario)


def test_delete_and_correct_memory_collection_and_options() -> None:
    async def scenario(ok: Call, error: Call, service: Any) -> None:
        rule = await ok("store_memory", {"content": "CI fails above complexity 15",
                                         "memory_type": "rule", "source": "agent/claude-code",
                                         "tags": ["ci"]})
        rid = rule["id"]
        unknown = f"field 'id': unknown memory id {rid!r}"
        assert await error("delete_memory", {"id": rid, "collection": "workspace"}) == unknown
        assert await error("correct_memory", {"id": rid, "collection": "workspace",
                                              "corrected_content": "x",
                                              "correction_reason": "y"}) == unknown
        for args, message in (
            ({"confidence": 0.9}, "argument 'confidence': a correction is written with "
             "confidence 1.0 (memlab's correct sets no other): give that or leave it out, "
             "got 0.9"),
            ({"tags": ["lint"]}, "argument 'tags': a correction keeps the old memory's tags "
             "(['ci']): give that or leave it out, got ['lint']"),
            ({"memory_type": "preference"}, "argument 'memory_type': a correction keeps the "
             "old memory's type ('rule'): give that or leave it out, got 'preference'"),
            ({"source": "slack/x"}, "argument 'source': a correction keeps the old memory's "
             "source ('agent/claude-code'): give that or leave it out, got 'slack/x'"),
        ):
            assert await error("correct_memory", {"id": rid, "corrected_content": "x",
                                                  "correction_reason": "y", **args}) == message
        fixed = await ok("correct_memory", {
            "id": rid, "collection": "coding", "corrected_content": "CI fails above complexity 12",
            "correction_reason": "lowered", "source": "agent/claude-code", "memory_type": "rule",
            "tags": ["ci"], "confidence": 1.0})
        assert fixed == {"id": fixed["id"], "superseded": rid, "redactions": 0,
                         "collection": "coding"}
        got = service.describe(service.store.get(fixed["id"]))
        assert (got["memory_type"], got["tags"], got["confidence"]) == ("rule", ["ci"], 1.0)
        assert service.store.get(fixed["id"]).metadata["source"] == "agent/claude-code"
        assert await error("correct_memory", {"id": fixed["id"], "corrected_content": "x",
                                              "correction_reason": "\x00"}) == (
            "field 'correction_reason' holds no visible text (only control characters, format "
            "characters or terminal escape sequences)")
        fact = await ok("store_memory", {"content": "Staging is on eu-west-1",
                                         "memory_type": "fact"})
        assert await error("delete_memory", {"id": fact["id"], "collection": "coding"}) == (
            f"field 'id': unknown memory id {fact['id']!r}")
        assert await ok("delete_memory", {"id": fact["id"], "collection": "workspace"}) == {
            "id": fact["id"], "forgotten": True}
        assert await error("delete_memory", {"id": "x", "collection": "misc"}) == (
            "argument 'collection' must be 'coding' or 'workspace', got 'misc' (str)")

    _run(scenario)


def test_list_memories_collection_and_source() -> None:
    async def scenario(ok: Call, error: Call, service: Any) -> None:
        ids = {}
        for i, (mtype, source) in enumerate((
            ("rule", "slack/eng"), ("fact", "slack/eng"), ("decision", None),
            ("summary", "slack/ops"), ("event", "slack/eng"), ("preference", "slack/eng"),
        )):
            args = {"content": f"memory number {i} of type {mtype}", "memory_type": mtype}
            if source is not None:
                args["source"] = source
            ids[mtype] = (await ok("store_memory", args))["id"]
        coding = await ok("list_memories", {"collection": "coding"})
        assert coding["total"] == 3
        assert [m["id"] for m in coding["memories"]] == [ids["rule"], ids["decision"],
                                                         ids["preference"]]
        assert [m["collection"] for m in coding["memories"]] == ["coding"] * 3
        assert [m["source"] for m in coding["memories"]] == ["slack/eng", None, "slack/eng"]
        work = await ok("list_memories", {"collection": "workspace", "source": "slack/eng"})
        assert (work["total"], [m["id"] for m in work["memories"]]) == (1, [ids["fact"]])
        page = await ok("list_memories", {"source": "slack/eng", "offset": 1, "limit": 2})
        assert page["total"] == 4 and page["offset"] == 1
        assert [m["id"] for m in page["memories"]] == [ids["fact"], ids["event"]]
        every = await ok("list_memories", {})
        assert every["total"] == 6
        assert [m["collection"] for m in every["memories"]] == [
            "coding", "workspace", "coding", "workspace", None, "coding"]

    _run(scenario)


def test_list_memories_filters_over_more_than_one_service_page() -> None:
    async def scenario(ok: Call, error: Call, service: Any) -> None:
        for i in range(130):
            await ok("store_memory", {"content": f"note {i} about builds",
                                      "memory_type": "fact" if i % 2 else "rule"})
        got = await ok("list_memories", {"collection": "workspace", "limit": 100})
        assert got["total"] == 65 and len(got["memories"]) == 65
        assert got["memories"][-1]["text"] == "note 129 about builds"

    _run(scenario)


def test_search_memory_filters_threshold_and_ranking_options() -> None:
    async def scenario(ok: Call, error: Call, service: Any) -> None:
        ids = {}
        for mtype, text, source in (
            ("rule", "Deploy only after the deploy checklist passes", "slack/eng"),
            ("fact", "Deploy target is the eu-west-1 cluster", "slack/ops"),
            ("summary", "Deploy retro: the rollback took ten minutes", "slack/eng"),
            ("decision", "Deploy with ArgoCD rather than Jenkins", None),
        ):
            args = {"content": text, "memory_type": mtype}
            if source:
                args["source"] = source
            ids[mtype] = (await ok("store_memory", args))["id"]
        base = await ok("search_memory", {"query": "deploy", "limit": 20})
        assert set(base["ids"]) == set(ids.values())
        assert {m["id"]: m["collection"] for m in base["memories"]} == {
            ids["rule"]: "coding", ids["fact"]: "workspace", ids["summary"]: "workspace",
            ids["decision"]: "coding"}
        got = await ok("search_memory", {"query": "deploy", "collections": ["workspace"]})
        assert got["ids"] == [i for i in base["ids"] if i in (ids["fact"], ids["summary"])]
        got = await ok("search_memory", {"query": "deploy", "collections": ["coding"],
                                         "source": "slack/eng"})
        assert got["ids"] == [ids["rule"]]
        assert [m["source"] for m in got["memories"]] == ["slack/eng"]
        got = await ok("search_memory", {"query": "deploy", "collections": ["coding",
                                                                           "workspace"],
                                         "limit": 1})
        assert got["ids"] == base["ids"][:1]
        # score_threshold: the cosine of the query's and each memory's vector, kept when >=
        store = service.store
        q = store.embedder.embed(["deploy"])[0]
        q = q / np.linalg.norm(q)
        sims = {i: float(np.dot(store.vectors.get(store.idx(i)).astype(np.float64), q))
                for i in ids.values()}
        cut = sorted(sims.values())[1]
        got = await ok("search_memory", {"query": "deploy", "score_threshold": cut})
        assert set(got["ids"]) == {i for i, s in sims.items() if s >= cut}
        assert len(got["ids"]) == 3
        assert all(m["vector_score"] == pytest.approx(sims[m["id"]], abs=1e-6)
                   for m in got["memories"])
        assert (await ok("search_memory", {"query": "deploy", "score_threshold": 1.0}))[
            "ids"] == []
        # the seed's ranking defaults pass; any other value is refused, naming the pipeline
        same = await ok("search_memory", {"query": "deploy", "limit": 20, "mode": "hybrid",
                                          "use_recency": True, "use_mmr": True})
        assert same["ids"] == base["ids"]
        for name, value, shown in (("mode", "vector", "'vector'"),
                                   ("mode", "keyword", "'keyword'"),
                                   ("use_recency", False, "false"), ("use_mmr", False, "false")):
            default = "'hybrid'" if name == "mode" else "true"
            assert await error("search_memory", {"query": "deploy", name: value}) == (
                f"argument '{name}': this server ranks with its configured pipeline 'bm25', "
                f"which decides ranking; only {default} (the default) is accepted, got {shown}")
        assert await error("search_memory", {"query": "deploy", "score_threshold": 1.5}) == (
            "argument 'score_threshold' must be less than or equal to 1, got 1.5 (float)")
        bad = await error("search_memory", {"query": "deploy", "collections": ["archive"]})
        assert bad == ("argument 'collections.0' must be 'coding' or 'workspace', got 'archive' "
                       "(str)")

    _run(scenario)


def test_search_memory_filter_still_serves_up_to_limit() -> None:
    """A filter applied after the service's recall asks it for more: 5 workspace memories are
    served although 30 coding memories rank above them."""
    async def scenario(ok: Call, error: Call, service: Any) -> None:
        for i in range(30):
            await ok("store_memory", {"content": f"Build rule {i}: builds builds builds",
                                      "memory_type": "rule"})
        facts = [(await ok("store_memory", {"content": f"Build fact {i}: builds",
                                            "memory_type": "fact"}))["id"] for i in range(6)]
        got = await ok("search_memory", {"query": "builds", "collections": ["workspace"],
                                         "limit": 5})
        assert len(got["ids"]) == 5 and set(got["ids"]) <= set(facts)
        # the service filtered before its limit: what it remembers as served (feedback, the
        # recording's "served") is what the caller was given
        assert service._served[got["recall_id"]].ids == tuple(got["ids"])

    _run(scenario)


def test_capture_episode_refuses_what_it_cannot_record() -> None:
    async def scenario(ok: Call, error: Call, service: Any) -> None:
        obs = [{"content": "Export needs UTF-8"}]
        assert await error("capture_episode", {"summary": "s", "observations": obs,
                                               "episode_id": "ep-1",
                                               "source": "agent/claude-code"}) == (
            "argument 'source': capture_episode cannot record a source (its memories hold "
            "only their episode); leave it out, or store with store_memory")
        assert await error("capture_episode", {"summary": "s", "observations": obs,
                                               "related_ids": ["m-1"]}) == (
            "argument 'related_ids': capture_episode cannot record related memories (its "
            "memories hold only their episode); leave it out, or store with store_memory")
        assert len(service.store) == 0
        out = await ok("capture_episode", {"summary": "s", "observations": obs,
                                           "episode_id": "ep-1"})
        assert out["episode_id"] == "ep-1" and len(out["observation_ids"]) == 1

    _run(scenario)
