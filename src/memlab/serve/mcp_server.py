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
acts as the server's principal. Over stdio, ``SIGTERM`` unwinds as ``SIGINT`` does, so the
caller closes the service. Design §D4.5's tool names (``store_memory``, ``search_memory``,
``delete_memory``, ``correct_memory``) are registered too, so its agents' calls work unchanged.

Resources: ``memory://{scope}/{entity}`` — the entity, its relations and its memories in one
scope, as JSON.
"""

from __future__ import annotations

import asyncio
import json
import os
import sys
import threading
from collections.abc import Callable
from typing import Annotated, Any, Literal

from pydantic import Field

from memlab.serve.net import Limits, bearer_guard, serve_app, sigterm_unwinds
from memlab.serve.service import MemoryService, ServiceError

MemoryTypeArg = Literal[
    "event", "fact", "decision", "status", "rule", "preference", "summary"
]
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

    def call(fn: Callable[..., dict[str, Any]], *args: Any, **kwargs: Any) -> dict[str, Any]:
        try:
            return fn(*args, **kwargs)
        except (ServiceError, TypeError, ValueError, KeyError) as exc:
            raise ToolError(str(exc)) from None

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
            service.store_memory, content, memory_type, scope=scope, tags=tags,
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

    @server.tool(description="Relate two entities with a typed relation.")
    def relate(
        from_: Annotated[Name, Field(alias="from")],
        relation: RelationArg,
        to: Name,
        properties: dict[str, Any] | None = None,
    ) -> dict[str, Any]:
        return call(service.relate, from_, relation, to, properties)

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
            service.recall, query, scope=scope, memory_type=memory_type, tags=tags, limit=limit,
            min_confidence=min_confidence, at_time=at_time,
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

    @server.tool(description="Browse memories in write order (paginated).")
    def list_memories(
        offset: Annotated[int, Field(ge=0)] = 0,
        limit: Annotated[int, Field(ge=1, le=100)] = 20,
        memory_type: MemoryTypeArg | None = None,
        scope: ScopeArg = None,
        include_inactive: bool = False,
    ) -> dict[str, Any]:
        return call(service.list_memories, offset=offset, limit=limit, memory_type=memory_type,
                    scope=scope, include_inactive=include_inactive)

    # ------------------------------------------------------------------ lifecycle
    @server.tool(description="Soft-delete a memory (decisions are immutable).")
    def forget(id: Name, reason: Annotated[str, Field(min_length=1, max_length=2000)]) -> dict[str, Any]:  # noqa: A002,E501
        return call(service.forget, id, reason)

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

    @server.tool(description="Move a memory from an agent or project scope to the team scope.")
    def promote(id: Name) -> dict[str, Any]:  # noqa: A002
        return call(service.promote, id)

    @server.tool(description="Run one consolidation cycle over a scope.")
    def consolidate(scope: ScopeArg = None, since: Timestamp = None) -> dict[str, Any]:
        return call(service.consolidate, scope, since)

    @server.tool(description="Store an episode summary and 1-10 durable observations.")
    def capture_episode(
        summary: Text,
        observations: Annotated[list[dict[str, Any]], Field(min_length=1, max_length=10)],
        episode_id: Annotated[str | None, Field(default=None, max_length=200)] = None,
        scope: ScopeArg = None,
    ) -> dict[str, Any]:
        return call(service.capture_episode, summary, observations, episode_id, scope=scope)

    # ------------------------------------------------------------------ docs/design.md §D4.5 names
    @server.tool(description="Design §D4.5 store_memory: store with a source and memory_type.")
    def store_memory(
        content: Text,
        memory_type: MemoryTypeArg,
        source: Annotated[str | None, Field(default=None, max_length=200)] = None,
        tags: Tags = None,
        confidence: Unit = 1.0,
        scope: ScopeArg = None,
    ) -> dict[str, Any]:
        meta = None if source is None else {"source": source}
        return call(service.store_memory, content, memory_type, scope=scope, tags=tags,
                    confidence=confidence, metadata=meta)

    @server.tool(description="Design §D4.5 search_memory: recall with limit and filters.")
    def search_memory(
        query: Annotated[str, Field(min_length=1, max_length=4000)],
        limit: Annotated[int, Field(ge=1, le=20)] = 5,
        memory_type: MemoryTypeArg | None = None,
        tags: Tags = None,
        include_inactive: bool = False,
    ) -> dict[str, Any]:
        return call(service.recall, query, limit=limit, memory_type=memory_type, tags=tags,
                    include_superseded=include_inactive)

    @server.tool(description="Design §D4.5 delete_memory: forget a memory.")
    def delete_memory(id: Name) -> dict[str, Any]:  # noqa: A002
        return call(service.forget, id, "deleted")

    @server.tool(description="Design §D4.5 correct_memory: supersede with corrected content.")
    def correct_memory(
        id: Name,  # noqa: A002
        corrected_content: Text,
        correction_reason: Annotated[str, Field(min_length=1, max_length=2000)],
    ) -> dict[str, Any]:
        return call(service.correct, id, corrected_content, correction_reason)

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

    _forbid_extra(server)
    return server


def _forbid_extra(server: Any) -> None:
    """Make every tool reject unknown arguments (and say so in its input schema) and
    arguments of another JSON type (strict validation).

    Also: the SDK calls a tool with its arguments' wire names, so a parameter spelled ``from``
    on the wire (``from_`` in Python) is renamed on the way in.
    """
    for tool in server._tool_manager.list_tools():
        model = tool.fn_metadata.arg_model
        model.model_config["extra"] = "forbid"
        model.model_config["strict"] = True  # no coercion: true is not 1, "yes" not True
        model.model_rebuild(force=True)
        tool.parameters["additionalProperties"] = False
        if "from" in tool.parameters.get("properties", {}):
            tool.fn = _renamed(tool.fn, {"from": "from_"})


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
    """Serve until stopped (stdio: until the host closes stdin, or a signal). Over HTTP,
    returns the signal that stopped the server (``None``: none); over stdio, ``SIGTERM``
    raises :class:`memlab.serve.net.Terminated` as ``SIGINT`` raises
    :class:`KeyboardInterrupt`.
    Either way the caller closes ``service`` afterwards.

    Args:
        limits: Connection limit and timeouts of the HTTP transport.
        token: Bearer token the HTTP transport requires (``None``: none, any local process
            may call the tools as the server's principal).
    """
    server = build_server(service)
    if transport == "stdio":
        if token is not None:
            raise ValueError("a token guards the HTTP transport; stdio has no network to guard")
        import anyio

        with sigterm_unwinds():
            anyio.run(_run_stdio, server)
        return None
    try:  # the SDK logs through rich, whose handler imports this on its first traceback:
        import rich.traceback  # noqa: F401 - imported now, not while descriptors run out
    except ImportError:  # pragma: no cover - rich comes with the SDK
        pass
    app = server.streamable_http_app(host=host)
    if token is not None:
        app = bearer_guard(app, token)
    return serve_app(app, host=host, port=port, limits=limits)


async def _run_stdio(server: Any) -> None:
    """The SDK's stdio transport, reading stdin with :class:`_StdinLines`."""
    from mcp.server.stdio import stdio_server

    low = server._lowlevel_server
    async with stdio_server(stdin=_StdinLines()) as (read_stream, write_stream):  # type: ignore[arg-type]
        await low.run(read_stream, write_stream, low.create_initialization_options())


class _StdinLines:
    """stdin's lines (text), for the SDK's stdio transport.

    The SDK reads stdin in a worker thread that cannot be cancelled: a server asked to stop
    (``SIGINT``, ``SIGTERM``) while its host keeps stdin open and sends nothing waited for a
    line that never came, and never closed its store. Here a daemon thread reads a duplicate
    of fd 0 and hands each line to the event loop, and waiting for the next line is
    cancelled like any other wait; the thread, blocked in a read, ends with the process.
    """

    def __init__(self) -> None:
        self._queue: asyncio.Queue[str | None] | None = None

    def __aiter__(self) -> _StdinLines:
        return self

    async def __anext__(self) -> str:
        if self._queue is None:
            self._queue = asyncio.Queue()
            loop = asyncio.get_running_loop()
            fd = os.dup(sys.stdin.fileno())
            threading.Thread(target=self._pump, args=(loop, fd, self._queue), daemon=True,
                             name="memlab-stdin").start()
        line = await self._queue.get()
        if line is None:
            raise StopAsyncIteration
        return line

    @staticmethod
    def _pump(loop: asyncio.AbstractEventLoop, fd: int, queue: asyncio.Queue[str | None]) -> None:
        def put(item: str | None) -> bool:
            try:
                loop.call_soon_threadsafe(queue.put_nowait, item)
            except RuntimeError:  # the loop is closed: nobody reads any more
                return False
            return True

        try:
            with os.fdopen(fd, "rb") as stdin:
                for raw in stdin:
                    if not put(raw.decode("utf-8", errors="replace")):
                        return
        except (OSError, ValueError):
            pass
        put(None)
