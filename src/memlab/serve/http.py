"""HTTP bulk ingest (docs/design.md §D4.5): ``POST /memories`` with a Bearer token, ``GET /health``
(counts only with the token).

A Starlette app served by uvicorn. The request body is a JSON array of memories or an object
``{"memories": [...]}``; each item has ``content`` and optional ``memory_type``, ``scope``,
``tags``, ``confidence``, ``key``, ``subject``, ``status_value``, ``importance``,
``valid_from``, ``metadata`` and ``agent``. Every item goes through the same write path as the
``store`` tool (:meth:`MemoryService.store_many`: scrubbing, dedup, supersession, recording).

Responses (JSON): ``200`` when every item is stored, ``207`` when some fail (per-item results in
``results``, in request order), ``422`` when the body is not a batch of objects (a body the
JSON parser cannot read at all, e.g. nested too deeply, included) or every item fails, ``401``
without the right token, ``413`` when the body or the batch is too large.

``500`` (a JSON error naming no more than the failure's type) when the batch's group commit
could not be committed or recorded; an item that fails for any other reason fails alone.

The token decides the principal: the server is started for one agent (``--agent``, its
projects with ``--project``) or for a human (``--human``). An item's ``agent`` must then be
that agent; under a human token it names the writing agent and, without a ``scope``, the item
goes into that agent's scope. Tokens are compared in constant time (:func:`hmac.compare_digest`).

:func:`serve` runs the app with :func:`memlab.serve.net.serve_app`: bounded connections, a
header timeout, and ``SIGTERM`` handled as ``SIGINT``.
"""

from __future__ import annotations

import json
import logging
from typing import Any

from starlette.applications import Starlette
from starlette.concurrency import run_in_threadpool
from starlette.requests import Request
from starlette.responses import JSONResponse
from starlette.routing import Route

from memlab.memory.records import StoreError
from memlab.serve.net import Limits, bearer_ok, serve_app
from memlab.serve.service import MemoryService

log = logging.getLogger("memlab.serve")


def _error(status: int, message: str, **extra: Any) -> JSONResponse:
    return JSONResponse({"error": message, **extra}, status_code=status)


def _parse_body(body: bytes) -> Any:
    """The request body as JSON.

    Raises:
        ValueError: Whatever makes the body unparsable — bad UTF-8, bad JSON, nesting deeper
            than the parser can follow (``RecursionError``), a number too long to convert, or
            anything else :func:`json.loads` raises — so that it is answered 422, never 500.
    """
    try:
        return json.loads(body)
    except RecursionError:
        raise ValueError("nested too deeply") from None
    except ValueError as exc:  # JSONDecodeError, UnicodeDecodeError, a 5000-digit integer
        raise ValueError(str(exc)) from None
    except Exception as exc:  # any other parser failure is the body's fault too
        raise ValueError(f"{type(exc).__name__}: {exc}") from None


def build_app(
    service: MemoryService,
    *,
    token: str,
    max_request_bytes: int = 8 * 1024 * 1024,
    max_batch: int = 1000,
) -> Starlette:
    """The ingest app.

    Args:
        service: The memory service every item is written through.
        token: The Bearer token clients must send (non-empty).
        max_request_bytes: Largest request body accepted (413 above).
        max_batch: Most items per request (413 above).
    """
    if not isinstance(token, str) or not token.strip():
        raise ValueError("an ingest token is required: the server refuses to start without one")
    expected = f"Bearer {token}".encode()

    def authorised(request: Request) -> bool:
        return bearer_ok(request.scope, expected)

    async def memories(request: Request) -> JSONResponse:
        if not authorised(request):
            return _error(401, "missing or wrong Bearer token")
        length = request.headers.get("content-length")
        if length is not None and (not length.isdigit() or int(length) > max_request_bytes):
            return _error(413, f"request body larger than {max_request_bytes} bytes")
        body = bytearray()
        async for chunk in request.stream():
            body += chunk
            if len(body) > max_request_bytes:
                return _error(413, f"request body larger than {max_request_bytes} bytes")
        try:
            payload = _parse_body(bytes(body))
        except ValueError as exc:
            return _error(422, f"body is not JSON: {exc}")
        items = payload.get("memories") if isinstance(payload, dict) else payload
        if isinstance(payload, dict) and set(payload) - {"memories"}:
            return _error(422, "body object may only hold 'memories'")
        if not isinstance(items, list):
            return _error(422, "body must be a JSON array of memories or {\"memories\": [...]}")
        if not items:
            return _error(422, "the batch is empty")
        if len(items) > max_batch:
            return _error(413, f"batch of {len(items)} items; at most {max_batch} per request")
        try:
            results = await run_in_threadpool(service.store_many, items)
        except Exception as exc:  # noqa: BLE001 - the group's commit or append failed
            if isinstance(exc, (OSError, StoreError)):  # a full or read-only disk: one line
                log.warning("bulk ingest: a group commit failed (%s: %s); nothing of it was "
                            "written", type(exc).__name__, exc)
            else:
                log.exception("bulk ingest: a group commit failed")
            return _error(500, f"the batch was not stored: the group commit failed "
                               f"({type(exc).__name__}); nothing of it was written")
        failed = sum(1 for r in results if not r["ok"])
        summary = {"stored": len(results) - failed, "failed": failed, "results": results}
        if failed == 0:
            return JSONResponse(summary, status_code=200)
        if failed == len(results):
            return JSONResponse({"error": "every item failed", **summary}, status_code=422)
        return JSONResponse(summary, status_code=207)

    async def health(request: Request) -> JSONResponse:
        # Anyone may ask whether the server is up; only a client with the token is told counts.
        if not authorised(request):
            return JSONResponse({"status": "ok"})
        return JSONResponse(await run_in_threadpool(service.health))

    return Starlette(
        routes=[
            Route("/memories", memories, methods=["POST"]),
            Route("/health", health, methods=["GET"]),
        ]
    )


def serve(
    app: Starlette, *, host: str = "127.0.0.1", port: int = 8080, limits: Limits | None = None
) -> int | None:
    """Run ``app`` until ``SIGINT`` or ``SIGTERM``; the signal that stopped it (see
    :func:`memlab.serve.net.serve_app`)."""
    return serve_app(app, host=host, port=port, limits=limits)
