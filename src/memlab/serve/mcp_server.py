"""The MCP server: every memlab tool over stdio or Streamable HTTP.

Built on the official MCP Python SDK's ``MCPServer`` (FastMCP in SDK 1.x). Each tool is a thin
function over :class:`~memlab.serve.service.MemoryService`; its input schema comes from the
function's annotations (types, enums, bounds) and rejects unknown arguments
(``additionalProperties: false``) and arguments of another JSON type (validated strictly: no
``true`` for an integer or a number, no ``"yes"`` or ``1`` for a boolean, no ``"5"`` for an
integer), as the HTTP ingest does. A call the service refuses comes back as a tool error whose
text names the field at fault.

Over Streamable HTTP the app runs with :func:`memlab.serve.net.serve_app` (bounded connections,
a header timeout, ``SIGTERM`` handled as ``SIGINT``) and, given a token, behind
:func:`memlab.serve.net.bearer_guard`; without a token, any process that can reach the port
acts as the server's principal. Over stdio, ``SIGINT`` and ``SIGTERM`` alike cancel the
server (:class:`memlab.serve.net.StopSignals`) and :func:`run` returns the signal, so the
caller closes the service; a host that closes stdin or stdout stops it too. A line of stdin
that is not JSON gets JSON-RPC's Parse error (-32700), and JSON that is not a message (a batch,
a scalar, an object without ``"jsonrpc": "2.0"``, a line longer than :data:`MAX_LINE_BYTES`)
its Invalid Request (-32600), where the SDK answered nothing; the server goes on serving. A
blank line is skipped.

Reference designs' parameters (the translation is :mod:`memlab.serve.compat`). Seed 003 §4:
``forget`` and ``promote`` take ``memory_id`` or ``id``, ``relate`` ``from_entity``/``from``
and ``to_entity``/``to`` (exactly one of each pair); ``memory_type`` takes ``semantic``,
``episodic``, ``procedural``, ``decision`` (stored as ``fact``, ``event``, ``preference``,
``decision``; filtered as :data:`memlab.serve.compat.SEED003_FILTERS` says). Design §D4.5 /
seed 004: ``store_memory`` (returns ``collection``; ``source``, ``related_ids``,
``last_verified_at`` kept in metadata; ``supersedes`` through ``correct``), ``search_memory``
(``collections``, ``source``, ``score_threshold`` filters), ``list_memories`` (``collection``,
``source`` filters), ``delete_memory`` and ``correct_memory`` (``collection``: the memory must
be in it). Refused with a tool error naming the argument, never ignored: ``status`` other than
``active``, ``episode_id`` and ``valid_until`` on ``store_memory``; ``mode``, ``use_recency``,
``use_mmr`` other than the seed's defaults (the configured pipeline ranks);
``correct_memory``'s ``memory_type``, ``tags``, ``source`` other than the old memory's and
``confidence`` other than 1.0 (what ``correct`` writes); ``capture_episode``'s ``source`` and
``related_ids``.

Resources: ``memory://{scope}/{entity}`` — the entity, its relations and its memories in one
scope, as JSON.
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
import queue
import re
import sqlite3
import sys
import threading
from collections.abc import Callable, Generator, Iterator
from contextlib import contextmanager, suppress
from dataclasses import dataclass
from typing import Annotated, Any, Literal

from pydantic import Field

from memlab.memory.integrity import sqlite_detail
from memlab.serve import compat
from memlab.serve.net import Limits, StopSignals, bearer_guard, serve_app
from memlab.serve.service import MemoryService, ServiceError, tool_type

log = logging.getLogger("memlab.serve")

MemoryTypeArg = Literal[
    "event", "fact", "decision", "status", "rule", "preference", "summary",
    "semantic", "episodic", "procedural",
]
CollectionArg = Literal["coding", "workspace"]
Source = Annotated[str | None, Field(default=None, min_length=1, max_length=200)]
OptName = Annotated[str | None, Field(default=None, min_length=1, max_length=200)]
Ids = Annotated[list[Annotated[str, Field(min_length=1, max_length=200)]] | None,
                Field(default=None, max_length=100)]
RelationArg = Literal["contact_of", "same_owner", "uses", "works_on", "competitor_of"]
ImportanceArg = Literal["critical", "high", "medium", "low"]
Text = Annotated[str, Field(min_length=1, max_length=20_000)]
Name = Annotated[str, Field(min_length=1, max_length=200)]
ScopeArg = Annotated[
    str | None,
    Field(
        default=None,
        pattern=r"^(team|agent:[A-Za-z0-9][A-Za-z0-9_.@/-]*|project:[A-Za-z0-9][A-Za-z0-9_.@/-]*)$",
        description="team, agent:NAME or project:NAME",
    ),
]
Tags = Annotated[list[Annotated[str, Field(min_length=1, max_length=100)]] | None,
                 Field(default=None, max_length=50)]
Unit = Annotated[float, Field(ge=0.0, le=1.0)]
Timestamp = Annotated[
    str | None,
    Field(default=None, max_length=64,
          description="ISO 8601 with a time zone: Z (UTC) or an offset such as +02:00"),
]


def build_server(service: MemoryService, *, name: str = "memlab") -> Any:
    """An ``MCPServer`` exposing ``service``'s tools and the ``memory://`` resource."""
    from mcp.server.mcpserver import MCPServer
    from mcp.server.mcpserver.exceptions import ResourceError, ToolError

    server = MCPServer(
        name,
        instructions=(
            "Team memory. recall before answering; store what is durable, non-obvious and "
            "actionable; give feedback on what recall served."
        ),
        log_level="WARNING",
    )

    def call(fn: Callable[..., Any], *args: Any, _fields: dict[str, str] | None = None,
             _name: str | None = None, **kwargs: Any) -> Any:
        """``fn(*args, **kwargs)``; an error it raises becomes a tool error (``_fields``: the
        service's field names to write as the names the caller used; ``_name``: the call's
        name in the log, default ``fn``'s)."""
        try:
            return fn(*args, **kwargs)
        except (ServiceError, TypeError, ValueError, KeyError) as exc:
            raise ToolError(compat.renamed_fields(str(exc), _fields or {})) from None
        except (OSError, sqlite3.Error) as exc:
            # A full or read-only disk under the recording or the store: the call's unit rolled
            # back (store and recording alike); the client is told why in one line, as the
            # ingest endpoint tells it, and the server goes on serving.
            what = resource_failure(exc)
            log.warning("%s: the call failed and nothing of it was written (%s)",
                        _name or fn.__name__, what)
            raise ToolError(f"the call failed and nothing of it was written ({what})") from None

    # ------------------------------------------------------------------ write
    @server.tool(description="Store a memory (scrubbed, deduplicated, superseding by key).")
    def store(
        content: Text,
        memory_type: MemoryTypeArg = "fact",
        scope: ScopeArg = None,
        tags: Tags = None,
        confidence: Unit = 1.0,
        key: Annotated[str | None, Field(default=None, min_length=1, max_length=500)] = None,
        subject: Annotated[str | None, Field(default=None, min_length=1, max_length=500)] = None,
        status_value: Annotated[str | None, Field(default=None, max_length=500)] = None,
        importance: ImportanceArg | None = None,
        valid_from: Timestamp = None,
    ) -> dict[str, Any]:
        return call(
            service.store_memory, content, compat.stored_type(memory_type), scope=scope, tags=tags,
            confidence=confidence, key=key, subject=subject, status_value=status_value,
            importance=importance, valid_from=valid_from,
        )

    @server.tool(description="Record an immutable decision with its rationale.")
    def store_decision(
        decision: Text,
        rationale: Annotated[str | None, Field(default=None, max_length=20_000)] = None,
        alternatives: Tags = None,
        participants: Tags = None,
        scope: ScopeArg = None,
    ) -> dict[str, Any]:
        return call(service.store_decision, decision, rationale, alternatives, participants,
                    scope=scope)

    @server.tool(description="Relate two entities with a typed relation (from/from_entity, "
                             "to/to_entity).")
    def relate(
        relation: RelationArg,
        from_: Annotated[OptName, Field(alias="from")] = None,
        to: OptName = None,
        properties: dict[str, Any] | None = None,
        from_entity: OptName = None,
        to_entity: OptName = None,
    ) -> dict[str, Any]:
        def run() -> dict[str, Any]:
            src_name, src = compat.one_of({"from": from_, "from_entity": from_entity})
            dst_name, dst = compat.one_of({"to": to, "to_entity": to_entity})
            return call(service.relate, src, relation, dst, properties,
                        _fields={"from": src_name, "to": dst_name})
        return call(run)

    @server.tool(description="Create or update an entity (properties) and its relations.")
    def store_entity(
        name: Name,
        type: Annotated[str, Field(min_length=1, max_length=64)] = "concept",  # noqa: A002
        properties: dict[str, Any] | None = None,
        relations: Annotated[list[dict[str, Any]] | None, Field(default=None,
                                                                max_length=50)] = None,
        scope: ScopeArg = None,
    ) -> dict[str, Any]:
        return call(service.store_entity, name, type, properties, relations, scope=scope)

    # ------------------------------------------------------------------ read
    @server.tool(description="Recall memories for a query with the configured memlab pipeline.")
    def recall(
        query: Annotated[str, Field(min_length=1, max_length=4000)],
        scope: ScopeArg = None,
        memory_type: MemoryTypeArg | None = None,
        tags: Tags = None,
        limit: Annotated[int, Field(ge=1, le=100)] = 10,
        min_confidence: Annotated[float | None, Field(default=None, ge=0.0, le=1.0)] = None,
        at_time: Timestamp = None,
        include_superseded: bool = False,
        format: Literal["bullets", "json", "xml"] = "json",  # noqa: A002
        token_budget: Annotated[int | None, Field(default=None, ge=1)] = None,
    ) -> dict[str, Any]:
        return call(
            compat.recall_filtered, service, query, scope=scope, memory_type=memory_type,
            tags=tags, limit=limit, min_confidence=min_confidence, at_time=at_time,
            include_superseded=include_superseded, format=format, token_budget=token_budget,
        )

    @server.tool(description="Judge what a recall served: useful ids (1) and not useful (0).")
    def feedback(
        recall_id: Name,
        useful_ids: Tags = None,
        not_useful_ids: Tags = None,
        note: Annotated[str | None, Field(default=None, max_length=2000)] = None,
    ) -> dict[str, Any]:
        return call(service.feedback, recall_id, useful_ids, not_useful_ids, note)

    @server.tool(description="An entity, its relations up to depth hops and its memories.")
    def get_entity(name: Name, depth: Annotated[int, Field(ge=0, le=3)] = 1) -> dict[str, Any]:
        return call(service.get_entity, name, depth)

    @server.tool(description="A shortest path between two entities in the entity graph.")
    def trace(
        from_: Annotated[Name, Field(alias="from")],
        to: Name,
        max_depth: Annotated[int, Field(ge=1, le=6)] = 3,
    ) -> dict[str, Any]:
        return call(service.trace, from_, to, max_depth)

    @server.tool(description="Decisions about a topic, newest first.")
    def get_decisions(
        topic: Annotated[str | None, Field(default=None, max_length=500)] = None,
        since: Timestamp = None,
        status: Literal["active", "superseded", "all"] = "active",
        limit: Annotated[int, Field(ge=1, le=100)] = 20,
    ) -> dict[str, Any]:
        return call(service.get_decisions, topic, since, status, limit)

    @server.tool(description="Browse memories in write order (paginated; filters: memory_type, "
                             "scope, collection, source).")
    def list_memories(
        offset: Annotated[int, Field(ge=0)] = 0,
        limit: Annotated[int, Field(ge=1, le=100)] = 20,
        memory_type: MemoryTypeArg | None = None,
        scope: ScopeArg = None,
        include_inactive: bool = False,
        collection: CollectionArg | None = None,
        source: Source = None,
    ) -> dict[str, Any]:
        return call(compat.list_filtered, service, offset=offset, limit=limit,
                    memory_type=memory_type, scope=scope, include_inactive=include_inactive,
                    collection=collection, source=source)

    # ------------------------------------------------------------------ lifecycle
    @server.tool(description="Soft-delete a memory (id or memory_id; decisions are immutable).")
    def forget(
        reason: Annotated[str, Field(min_length=1, max_length=2000)],
        id: OptName = None,  # noqa: A002
        memory_id: OptName = None,
    ) -> dict[str, Any]:
        def run() -> dict[str, Any]:
            name, value = compat.one_of({"id": id, "memory_id": memory_id})
            return call(service.forget, value, reason, _fields={"id": name})
        return call(run)

    @server.tool(description="Replace a memory with corrected content (linked both ways).")
    def supersede(
        old_id: Name, new_content: Text,
        reason: Annotated[str, Field(min_length=1, max_length=2000)],
    ) -> dict[str, Any]:
        return call(service.correct, old_id, new_content, reason)

    @server.tool(description="Correct a memory (same as supersede).")
    def correct(
        old_id: Name, new_content: Text,
        reason: Annotated[str, Field(min_length=1, max_length=2000)],
    ) -> dict[str, Any]:
        return call(service.correct, old_id, new_content, reason)

    @server.tool(description="Move a memory (id or memory_id) from an agent or project scope to "
                             "the team scope.")
    def promote(id: OptName = None, memory_id: OptName = None) -> dict[str, Any]:  # noqa: A002
        def run() -> dict[str, Any]:
            name, value = compat.one_of({"id": id, "memory_id": memory_id})
            return call(service.promote, value, _fields={"id": name})
        return call(run)

    @server.tool(description="Run one consolidation cycle over a scope.")
    def consolidate(scope: ScopeArg = None, since: Timestamp = None) -> dict[str, Any]:
        return call(service.consolidate, scope, since)

    @server.tool(description="Store an episode summary and 1-10 durable observations.")
    def capture_episode(
        summary: Text,
        observations: Annotated[list[dict[str, Any]], Field(min_length=1, max_length=10)],
        episode_id: Annotated[str | None, Field(default=None, max_length=200)] = None,
        scope: ScopeArg = None,
        source: Source = None,
        related_ids: Ids = None,
    ) -> dict[str, Any]:
        call(compat.check_episode_options, source, related_ids)
        return call(service.capture_episode, summary,
                    compat.translated_observations(observations), episode_id, scope=scope)

    # ------------------------------------------------------------------ docs/design.md §D4.5 names
    @server.tool(description="Design §D4.5 store_memory: store with a source and memory_type; "
                             "returns its id and collection.")
    def store_memory(
        content: Text,
        memory_type: MemoryTypeArg,
        source: Source = None,
        tags: Tags = None,
        confidence: Unit = 1.0,
        scope: ScopeArg = None,
        status: Literal["active", "superseded", "deprecated"] = "active",
        episode_id: OptName = None,
        related_ids: Ids = None,
        supersedes: OptName = None,
        valid_until: Timestamp = None,
        last_verified_at: Timestamp = None,
    ) -> dict[str, Any]:
        def run() -> dict[str, Any]:
            compat.check_store_options(status, episode_id, valid_until)
            if supersedes is not None:
                out = compat.store_superseding(
                    service, supersedes, content, memory_type, tags=tags, source=source,
                    confidence=confidence, scope=scope, related_ids=related_ids,
                    last_verified_at=last_verified_at)
            else:
                meta = compat.store_metadata(source=source, related_ids=related_ids,
                                             last_verified_at=last_verified_at)
                out = service.store_memory(content, compat.stored_type(memory_type),
                                           scope=scope, tags=tags, confidence=confidence,
                                           metadata=meta)
            return out | {"collection": compat.collection_of(out["memory_type"])}
        return call(run, _name="store_memory")

    @server.tool(description="Design §D4.5 search_memory: recall with limit and filters "
                             "(collections, source, score_threshold, memory_type, tags).")
    def search_memory(
        query: Annotated[str, Field(min_length=1, max_length=4000)],
        limit: Annotated[int, Field(ge=1, le=20)] = 5,
        memory_type: MemoryTypeArg | None = None,
        tags: Tags = None,
        include_inactive: bool = False,
        collections: Annotated[list[CollectionArg] | None,
                               Field(default=None, min_length=1, max_length=2)] = None,
        score_threshold: Annotated[float | None, Field(default=None, ge=0.0, le=1.0)] = None,
        source: Source = None,
        mode: Literal["vector", "keyword", "hybrid"] = "hybrid",
        use_recency: bool = True,
        use_mmr: bool = True,
    ) -> dict[str, Any]:
        def run() -> dict[str, Any]:
            compat.check_ranking(service, mode, use_recency, use_mmr)
            return compat.recall_filtered(
                service, query, limit=limit, memory_type=memory_type, tags=tags,
                include_superseded=include_inactive, collections=collections, source=source,
                score_threshold=score_threshold, annotate=True)
        return call(run, _name="search_memory")

    @server.tool(description="Design §D4.5 delete_memory: forget a memory (of collection, "
                             "when given).")
    def delete_memory(id: Name, collection: CollectionArg | None = None) -> dict[str, Any]:  # noqa: A002,E501
        def run() -> dict[str, Any]:
            with service.lock:
                compat.check_collection(service, id, collection)
                return service.forget(id, "deleted")
        return call(run, _name="delete_memory")

    @server.tool(description="Design §D4.5 correct_memory: supersede with corrected content.")
    def correct_memory(
        id: Name,  # noqa: A002
        corrected_content: Text,
        correction_reason: Annotated[str, Field(min_length=1, max_length=2000)],
        collection: CollectionArg | None = None,
        source: Source = None,
        memory_type: MemoryTypeArg | None = None,
        tags: Tags = None,
        confidence: Annotated[float | None, Field(default=None, ge=0.0, le=1.0)] = None,
    ) -> dict[str, Any]:
        def run() -> dict[str, Any]:
            rec, out = compat.correct_checked(
                service, id, corrected_content, correction_reason, collection=collection,
                source=source, memory_type=memory_type, tags=tags, confidence=confidence)
            return out | {"collection": compat.collection_of(tool_type(rec))}
        return call(run, _name="correct_memory",
                    _fields={"old_id": "id", "new_content": "corrected_content",
                             "reason": "correction_reason"})

    # ------------------------------------------------------------------ resources
    @server.resource(
        "memory://{scope}/{entity}",
        description="An entity and its memories in one scope (team, agent:NAME, project:NAME).",
        mime_type="application/json",
    )
    def memory_resource(scope: str, entity: str) -> str:
        try:
            return json.dumps(service.resource(scope, entity), ensure_ascii=False)
        except (ServiceError, TypeError, ValueError) as exc:
            raise ResourceError(str(exc)) from None
        except (OSError, sqlite3.Error) as exc:
            raise ResourceError(f"the read failed ({resource_failure(exc)})") from None

    _forbid_extra(server)
    return server


def resource_failure(exc: OSError | sqlite3.Error) -> str:
    """A failure of the disk or of SQLite in one line: its type and reason, and the file an
    ``OSError`` names (never data SQLite may quote)."""
    if isinstance(exc, sqlite3.Error):
        return f"{type(exc).__name__}: {sqlite_detail(exc)}"
    where = f" ({exc.filename})" if exc.filename else ""
    return f"{type(exc).__name__}: {exc.strerror or exc}{where}"


def _forbid_extra(server: Any) -> None:
    """Make every tool reject unknown arguments (and say so in its input schema) and
    arguments of another JSON type (strict validation).

    Also: the SDK calls a tool with its arguments' wire names, so a parameter spelled ``from``
    on the wire (``from_`` in Python) is renamed on the way in.
    """
    for tool in server._tool_manager.list_tools():
        _one_line_argument_errors(tool)
        model = tool.fn_metadata.arg_model
        model.model_config["extra"] = "forbid"
        model.model_config["strict"] = True  # no coercion: true is not 1, "yes" not True
        model.model_rebuild(force=True)
        tool.parameters["additionalProperties"] = False
        if "from" in tool.parameters.get("properties", {}):
            tool.fn = _renamed(tool.fn, {"from": "from_"})


def argument_problems(exc: Any, limit: int = 40) -> str:
    """A pydantic validation error of a tool's arguments as one line naming each argument:
    ``argument 'limit' must be a valid integer, got '5' (str); unknown argument 'bogus'``
    (no documentation links, no model names; values cut to ``limit`` characters)."""
    parts = []
    for err in exc.errors(include_url=False):
        name = ".".join(str(p) for p in err.get("loc", ())) or "(arguments)"
        kind = err.get("type", "")
        if kind == "missing":
            parts.append(f"argument '{name}' is required")
        elif kind == "extra_forbidden":
            parts.append(f"unknown argument '{name}'")
        else:
            value = err.get("input")
            text = repr(value)
            if len(text) > limit:
                text = text[: limit - 3] + "..."
            msg = str(err.get("msg", "is not valid"))
            msg = msg[0].lower() + msg[1:] if msg else "is not valid"
            msg = msg.replace("input should be", "must be", 1)
            parts.append(f"argument '{name}' {msg}, got {text} ({type(value).__name__})")
    return "; ".join(parts) if parts else "invalid arguments"


def _one_line_argument_errors(tool: Any) -> None:
    """Report ``tool``'s invalid arguments in one line (:func:`argument_problems`) instead of
    pydantic's several lines with a documentation link; every other error is unchanged."""
    from mcp.server.mcpserver.exceptions import ToolError
    from pydantic import ValidationError

    run = tool.run

    async def checked(*args: Any, **kwargs: Any) -> Any:
        try:
            return await run(*args, **kwargs)
        except ToolError as exc:
            if isinstance(exc.__cause__, ValidationError):
                problems = argument_problems(exc.__cause__)
                raise ToolError(f"Error executing tool {tool.name}: {problems}") from None
            raise

    object.__setattr__(tool, "run", checked)  # a pydantic model: no plain assignment


def _renamed(fn: Callable[..., Any], names: dict[str, str]) -> Callable[..., Any]:
    def call(**kwargs: Any) -> Any:
        return fn(**{names.get(k, k): v for k, v in kwargs.items()})

    return call


def run(
    service: MemoryService,
    *,
    transport: str = "stdio",
    host: str = "127.0.0.1",
    port: int = 8000,
    limits: Limits | None = None,
    token: str | None = None,
) -> int | None:
    """Serve until stopped (stdio: until the host closes stdin or stdout, or a signal) and
    return the signal that stopped the server (``SIGINT`` or ``SIGTERM``; ``None``: none).
    The caller closes ``service`` afterwards.

    Args:
        limits: Connection limit and timeouts of the HTTP transport.
        token: Bearer token the HTTP transport requires (``None``: none, any local process
            may call the tools as the server's principal).

    Raises:
        ValueError: A token for the stdio transport.
    """
    server = build_server(service)
    if transport == "stdio":
        if token is not None:
            raise ValueError("a token guards the HTTP transport; stdio has no network to guard")
        import anyio

        with StopSignals() as stop:
            anyio.run(_run_stdio, server, stop)
        return stop.received
    try:  # the SDK logs through rich, whose handler imports this on its first traceback:
        import rich.traceback  # noqa: F401 - imported now, not while descriptors run out
    except ImportError:  # pragma: no cover - rich comes with the SDK
        pass
    app = server.streamable_http_app(host=host)
    if token is not None:
        app = bearer_guard(app, token)
    return serve_app(app, host=host, port=port, limits=limits)


async def _run_stdio(server: Any, stop: StopSignals) -> None:
    """The SDK's stdio transport over :class:`_StdinLines` and :class:`_StdoutLines`, until
    stdin ends, the host closes stdout, or ``stop`` gets a signal (which cancels it)."""
    import anyio
    from mcp.server.stdio import stdio_server

    low = server._lowlevel_server
    with _claimed_stdio() as (in_fd, out_fd), anyio.CancelScope() as scope:
        stop.arm(asyncio.get_running_loop(), scope.cancel)

        def host_gone() -> None:
            print("memlab: warning: the host closed stdout; the server stops", file=sys.stderr)
            scope.cancel()

        out = _StdoutLines(out_fd, on_closed=host_gone)
        try:
            lines = _StdinLines(in_fd, out)
            async with stdio_server(stdin=lines, stdout=out) as (read_stream, write_stream):  # type: ignore[arg-type]
                await low.run(read_stream, write_stream, low.create_initialization_options())
        finally:
            stop.disarm()
            out.close()


#: Longest line (bytes, its newline not counted) the stdio transport takes: a longer one is
#: answered with an Invalid Request error and skipped without being held in memory.
MAX_LINE_BYTES = 8 * 1024 * 1024

#: Seconds a stdio server whose input has ended still waits for the answers to the requests
#: it read (the SDK cancels whatever is running once its input ends).
EOF_GRACE_SECONDS = 60.0


def _id_key(value: object) -> tuple[str, object] | None:
    """A JSON-RPC id as a set key (``1`` and ``"1"`` are different ids), or ``None``."""
    if isinstance(value, bool) or not isinstance(value, (int, str)):
        return None
    return (type(value).__name__, value)


def _request_key(
    line: str,
) -> tuple[tuple[str, object] | None, tuple[str, object] | None]:
    """The id of a request line (a message with a ``method`` and an ``id``), and the id a
    ``notifications/cancelled`` line cancels; ``None`` for either that is not there."""
    try:
        message = json.loads(line)
    except ValueError:
        return None, None
    if not isinstance(message, dict) or "method" not in message:
        return None, None
    cancelled = None
    params = message.get("params")
    if message["method"] == "notifications/cancelled" and isinstance(params, dict):
        cancelled = _id_key(params.get("requestId"))
    return _id_key(message.get("id")), cancelled


def _response_key(line: str) -> tuple[str, object] | None:
    """The id a response line answers (a message with ``result`` or ``error``), else
    ``None``."""
    try:
        message = json.loads(line)
    except ValueError:
        return None
    if not isinstance(message, dict) or not ("result" in message or "error" in message):
        return None
    return _id_key(message.get("id"))


#: JSON-RPC 2.0's error codes for a line that is not JSON, and for JSON that is not a message.
PARSE_ERROR = -32700
INVALID_REQUEST = -32600


@contextmanager
def _claimed_stdio() -> Generator[tuple[int | None, int | None], None, None]:
    """Private duplicates of fd 0 and fd 1 for the protocol (``None``: that descriptor was
    closed when the process started, see :func:`_is_wire`), with fd 0 pointed at the null
    device and fd 1 at stderr meanwhile, as the SDK's own transport does, so that a library's
    or a child's stray read or print never touches the wire; both are put back afterwards.
    The duplicates stay open: a thread may still be blocked reading or writing one, and a
    closed descriptor's number would be reused."""
    claimed: list[tuple[int, int]] = []
    private: list[int | None] = []
    try:
        for fd, stream, divert in (
            (0, sys.__stdin__, _null_input),
            (1, sys.__stdout__, _stderr_output),
        ):
            dup = _private_dup(fd) if _is_wire(stream, fd) else None
            private.append(dup)
            if dup is None:
                continue
            if fd == 1:
                with suppress(Exception):  # what Python buffered goes out before fd 1 moves
                    sys.stdout.flush()
            try:
                target = divert()
                try:
                    os.dup2(target, fd)
                finally:
                    os.close(target)
            except OSError:  # not diverted: the wire stays where it was
                continue
            claimed.append((fd, dup))
        yield private[0], private[1]
    finally:
        for fd, dup in reversed(claimed):
            with suppress(OSError):
                os.dup2(dup, fd)


def _is_wire(stream: Any, fd: int) -> bool:
    """Whether descriptor ``fd`` is the host's pipe: Python found it open at start-up (the
    standard ``stream`` it made is on it). A descriptor closed at start-up may have been
    reused since by whatever opened a file (the store, a library's event loop), which must
    never be written to, read from or moved."""
    try:
        return stream is not None and stream.fileno() == fd
    except (AttributeError, OSError, ValueError):
        return False


def _private_dup(fd: int) -> int | None:
    """A close-on-exec duplicate of ``fd`` numbered 3 or more (``None``: ``fd`` is closed)."""
    try:
        import fcntl
    except ImportError:  # pragma: no cover - not on POSIX
        try:
            return os.dup(fd)
        except OSError:
            return None
    try:
        return fcntl.fcntl(fd, fcntl.F_DUPFD_CLOEXEC, 3)
    except OSError:
        return None


def _null_input() -> int:
    return os.open(os.devnull, os.O_RDONLY)


def _stderr_output() -> int:
    try:
        return os.dup(2)
    except OSError:
        return os.open(os.devnull, os.O_WRONLY)


@dataclass(frozen=True)
class _Reply:
    """A JSON-RPC error response (one line of JSON) to write in place of a line of stdin."""

    text: str


def _error(code: int, message: str, request_id: int | str | None = None) -> _Reply:
    error = {"jsonrpc": "2.0", "id": request_id, "error": {"code": code, "message": message}}
    return _Reply(json.dumps(error, separators=(",", ":")))


def _is_id(value: object) -> bool:
    """Whether ``value`` is an MCP request id: a string or an integer (never null)."""
    return isinstance(value, str) or (isinstance(value, int) and not isinstance(value, bool))


_JSON_TYPES = {str: "string", int: "number", float: "number", bool: "boolean", type(None): "null"}


def _screen(raw: bytes, number: int) -> str | _Reply | None:
    """What to do with line ``number`` of stdin (``raw``, without its newline): the text to
    hand to the SDK, a JSON-RPC error to answer instead, or ``None`` to skip it (a blank
    line, which frames nothing).

    The SDK drops a line it cannot parse or validate without a word (logged at debug level),
    and takes a request whose ``id`` is null, a float or a boolean for a notification, which
    gets no answer either. JSON-RPC 2.0 wants an answer: Parse error (-32700, ``id`` null)
    for a line that is not UTF-8 JSON (``NaN`` and ``Infinity`` are not JSON), and Invalid
    Request (-32600) for JSON that is not a message (a batch, a scalar, an object without
    ``"jsonrpc": "2.0"``, a ``method`` or an ``id`` of the wrong type). Its ``id`` is the
    request's when that is a valid one, else null; a malformed response (no ``method``) is
    answered with ``id`` null, so that it is never taken for the answer to a request of the
    client's own. Each error's message names the line of stdin.
    """
    import pydantic_core
    from mcp_types import jsonrpc_message_adapter

    if not raw.strip(b" \t\r\n"):
        return None
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        return _error(
            PARSE_ERROR, f"Parse error: stdin line {number} is not UTF-8 (byte {exc.start + 1})"
        )
    try:
        message = pydantic_core.from_json(raw, allow_inf_nan=False)
    except ValueError as exc:
        where = re.sub(r" at line \d+ column (\d+)$", r" at column \1", str(exc))
        return _error(PARSE_ERROR, f"Parse error: stdin line {number} is not JSON: {where}")
    if isinstance(message, list):
        return _error(
            INVALID_REQUEST,
            f"Invalid Request: stdin line {number} is a JSON array "
            "(a batch); MCP takes one message object per line",
        )
    if not isinstance(message, dict):
        return _error(
            INVALID_REQUEST,
            f"Invalid Request: stdin line {number} is a JSON "
            f"{_JSON_TYPES[type(message)]}, not a JSON-RPC message object",
        )
    problem = _problem(message)
    if problem is None:
        try:
            jsonrpc_message_adapter.validate_json(text, by_name=False)
        except pydantic_core.ValidationError:
            problem = "not a valid JSON-RPC request, notification or response"
    if problem is None:
        return text
    request_id = message.get("id")
    if "method" not in message or not _is_id(request_id):
        request_id = None
    return _error(INVALID_REQUEST, f"Invalid Request: stdin line {number}: {problem}", request_id)


def _problem(message: dict[str, Any]) -> str | None:
    """What makes ``message`` no JSON-RPC message, in words (``None``: nothing seen)."""
    if message.get("jsonrpc") != "2.0":
        return 'field "jsonrpc" must be "2.0"'
    if "id" in message and not _is_id(message["id"]):
        return 'field "id" must be a string or an integer'
    if "method" in message:
        if not isinstance(message["method"], str):
            return 'field "method" must be a string'
        params = message.get("params")
        if params is not None and not isinstance(params, dict):
            return 'field "params" must be an object'
        return None
    if "id" not in message or ("result" in message) == ("error" in message):
        return (
            'no "method" (a request or a notification), nor an "id" with a "result" or '
            'an "error" (a response)'
        )
    return None


def _lines(fd: int, limit: int = MAX_LINE_BYTES) -> Iterator[tuple[int, bytes | None]]:
    """``(number, line)`` for each line read from ``fd`` until end of file or a read error,
    numbered from 1, without its newline; a line longer than ``limit`` bytes comes as
    ``None``, and is never held in memory whole (what goes beyond the limit is dropped as it
    is read). A last line without a newline counts."""
    buffer = bytearray()
    too_long = False
    number = 0
    while True:
        try:
            chunk = os.read(fd, 65536)
        except OSError:
            chunk = b""
        if not chunk:
            if buffer or too_long:
                yield number + 1, None if too_long else bytes(buffer)
            return
        start = 0
        while True:
            end = chunk.find(b"\n", start)
            piece = chunk[start:] if end < 0 else chunk[start:end]
            if not too_long:
                if len(buffer) + len(piece) > limit:
                    too_long = True
                    buffer.clear()
                else:
                    buffer += piece
            if end < 0:
                break
            number += 1
            yield number, None if too_long else bytes(buffer)
            buffer.clear()
            too_long = False
            start = end + 1


class _StdinLines:
    """stdin's messages (text lines), for the SDK's stdio transport.

    The SDK reads stdin in a worker thread that cannot be cancelled: a server asked to stop
    (``SIGINT``, ``SIGTERM``) while its host keeps stdin open and sends nothing waited for a
    line that never came, and never closed its store. Here a daemon thread reads the protocol's
    duplicate of fd 0 a line at a time (at most one line ahead of the server), screens each
    with :func:`_screen` and hands it to the event loop, and waiting for the next line is
    cancelled like any other wait; the thread, blocked in a read, ends with the process. A
    line :func:`_screen` refuses is answered through ``out`` and never reaches the SDK, and so
    is a line longer than :data:`MAX_LINE_BYTES`.
    """

    def __init__(
        self,
        fd: int | None,
        out: _StdoutLines,
        limit: int = MAX_LINE_BYTES,
        eof_grace: float = EOF_GRACE_SECONDS,
    ) -> None:
        self._fd = fd
        self._out = out
        self._eof_grace = eof_grace
        self._limit = limit
        self._items: queue.Queue[str | _Reply | None] = queue.Queue(maxsize=1)
        self._ready: asyncio.Event | None = None
        self._ended = False

    def __aiter__(self) -> _StdinLines:
        return self

    async def __anext__(self) -> str:
        ready = self._ready
        if ready is None and self._fd is not None:
            ready = self._ready = asyncio.Event()
            threading.Thread(
                target=self._pump,
                daemon=True,
                name="memlab-stdin",
                args=(self._fd, asyncio.get_running_loop(), ready),
            ).start()
        while not self._ended and ready is not None:
            try:
                item = self._items.get_nowait()
            except queue.Empty:
                ready.clear()
                await ready.wait()  # the pump sets it after each item it queues
                continue
            if item is None:
                self._ended = True
                # the SDK cancels what is still running once its input ends: a host that
                # sends its requests and closes stdin gets their answers first
                with suppress(TimeoutError):
                    await asyncio.wait_for(self._out.answered(), self._eof_grace)
            elif isinstance(item, _Reply):
                await self._out.write(item.text + "\n")
            else:
                key, cancelled = _request_key(item)
                if key is not None:
                    self._out.unanswered.add(key)
                if cancelled is not None:  # a cancelled request is not answered (MCP)
                    self._out.unanswered.discard(cancelled)
                return item
        raise StopAsyncIteration

    def _pump(self, fd: int, loop: asyncio.AbstractEventLoop, ready: asyncio.Event) -> None:
        for number, raw in _lines(fd, self._limit):
            if raw is None:
                item: str | _Reply | None = _error(
                    INVALID_REQUEST,
                    f"Invalid Request: stdin line {number} is longer than {self._limit} bytes",
                )
            else:
                item = _screen(raw, number)
                if item is None:
                    continue
            if not self._hand(loop, ready, item):
                return
        self._hand(loop, ready, None)

    def _hand(
        self, loop: asyncio.AbstractEventLoop, ready: asyncio.Event, item: str | _Reply | None
    ) -> bool:
        """Queue ``item`` (waiting for the server to take the one before) and wake the loop;
        ``False``: the loop is closed, nobody reads any more."""
        self._items.put(item)
        try:
            loop.call_soon_threadsafe(ready.set)
        except RuntimeError:
            return False
        return True


class _StdoutLines:
    """stdout for the SDK's stdio transport: each :meth:`write` is a whole line, written by a
    daemon thread to the protocol's duplicate of fd 1.

    The SDK writes through a worker thread that cancellation waits for: a host that stopped
    reading stdout left a write blocked for good, and a signal then never stopped the server
    (nor did the process end, the worker thread not being a daemon). Here waiting for a write
    is cancelled like any other wait. A host that closed its end of the pipe (``EPIPE``; any
    write error) is gone: ``on_closed`` is called once, in the event loop, and later lines are
    dropped, where the SDK's writer raised into its task group and printed a traceback.
    Characters UTF-8 cannot encode (lone surrogates, only ever inside a JSON string) are
    written as their JSON escapes.
    """

    def __init__(self, fd: int | None, on_closed: Callable[[], None]) -> None:
        self._fd = fd
        self._on_closed = on_closed
        self._jobs: queue.SimpleQueue[
            tuple[bytes, asyncio.AbstractEventLoop, asyncio.Future[None]] | None
        ] = queue.SimpleQueue()
        self._thread: threading.Thread | None = None
        self._broken = fd is None
        self._told = False
        self.unanswered: set[tuple[str, object]] = set()
        """Requests read and not yet answered (``(type, id)``; :class:`_StdinLines` adds them,
        a response written removes its own)."""
        self._answered: asyncio.Event | None = None

    async def answered(self) -> None:
        """Return once every request in :attr:`unanswered` has its response written (or
        the host is gone)."""
        while self.unanswered and not self._broken:
            self._answered = asyncio.Event()
            await self._answered.wait()

    async def write(self, text: str) -> None:
        """Write ``text`` (a whole line); returns once it is written, or dropped."""
        try:
            await self._write(text)
        finally:
            key = _response_key(text)
            if key is not None and key in self.unanswered:
                self.unanswered.discard(key)
                if not self.unanswered and self._answered is not None:
                    self._answered.set()

    async def _write(self, text: str) -> None:
        loop = asyncio.get_running_loop()
        if self._broken:
            self._closed()
            return
        if self._thread is None:
            self._thread = threading.Thread(
                target=self._drain, args=(self._fd,), daemon=True, name="memlab-stdout"
            )
            self._thread.start()
        done: asyncio.Future[None] = loop.create_future()
        self._jobs.put((text.encode("utf-8", errors="backslashreplace"), loop, done))
        await done

    async def flush(self) -> None:
        """Nothing to do: :meth:`write` returns once its line is written."""

    def close(self) -> None:
        """End the writing thread once what it was given is written (or it is blocked for
        good: it is a daemon)."""
        self._jobs.put(None)

    def _closed(self) -> None:
        if not self._told:
            self._told = True
            self._on_closed()

    def _settle(self, done: asyncio.Future[None]) -> None:
        if self._broken:
            self._closed()
        if not done.done():  # (a cancelled write's future is done)
            done.set_result(None)

    def _drain(self, fd: int) -> None:
        while (job := self._jobs.get()) is not None:
            data, loop, done = job
            if not self._broken:
                try:
                    view = memoryview(data)
                    while view:
                        view = view[os.write(fd, view) :]
                except OSError:  # EPIPE: the host closed its end; EBADF, EIO: gone too
                    self._broken = True
            try:
                loop.call_soon_threadsafe(self._settle, done)
            except RuntimeError:  # the loop is closed: nobody waits any more
                return
