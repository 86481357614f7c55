"""Serving memlab's HTTP apps (ingest, MCP over Streamable HTTP) with uvicorn, bounded.

uvicorn bounds neither how long a client may take to send a request's headers nor how many
connections it holds open, so 1,100 connections that never finish their headers exhaust the
process's file descriptors (``EMFILE``): a memlab server then stalls, or dies when the event
loop's error report itself needs a descriptor. :func:`serve_app` runs an app with:

* a connection limit (:attr:`Limits.max_connections`): a connection beyond it is answered
  ``503`` and closed at once, before anything of it is read, so the process never holds more
  than that many client sockets (each runs at most one request at a time);
* a header timeout (:attr:`Limits.header_timeout`): a connection that has not sent a whole
  request line and headers this many seconds after it opened (or after its previous response)
  is answered ``408`` and closed, so a client that sends nothing, or sends its headers a byte
  at a time, holds its slot for that long at most;
* uvicorn's keep-alive timeout (:attr:`Limits.keep_alive`): an idle connection between two
  requests is closed after it;
* an ``EMFILE`` that still happens (another part of the process holding descriptors) pauses
  accepting for a moment, as asyncio and uvloop do, and asyncio's report of it is one line on
  stderr that needs no descriptor of its own (the MCP SDK's rich logging handler rendered a
  traceback, read source files to do so, failed with ``EMFILE`` too, and that stopped the
  loop);
* ``SIGINT`` and ``SIGTERM`` alike stop it gracefully (open requests get
  :data:`GRACE_SECONDS` to finish) and :func:`serve_app` *returns* the signal, so that the
  caller closes the memory service (flushing chromadb, checkpointing SQLite, releasing the
  recording) before the process ends. uvicorn itself re-raises the signal once it has stopped,
  and ``SIGTERM``'s default action then ends the process before any ``finally`` runs.
* a second ``SIGINT`` or ``SIGTERM`` while it stops ends the process at once
  (:func:`force_stop`: one line on stderr, exit status 128 + the signal), as a second Ctrl-C
  stops uvicorn: what was acknowledged is committed, and the store's next open recovers
  what closing it would have done (SQLite's log, chromadb's backlog; the locks go with the
  process).

:func:`bearer_guard` puts a Bearer token in front of an ASGI app (compared in constant time),
as the ingest server checks its token. :class:`StopSignals` makes ``SIGINT`` and ``SIGTERM``
cancel a server running on an event loop (the MCP stdio transport) instead of raising inside
it, and a second one end the process at once.
"""

from __future__ import annotations

import asyncio
import errno
import hmac
import json
import logging
import os
import signal
import sys
import threading
import time
from collections.abc import Awaitable, Callable, Generator, MutableMapping
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any, NoReturn

log = logging.getLogger("memlab.serve")

#: Seconds open requests get to finish once a signal asks the server to stop.
GRACE_SECONDS = 5


class Terminated(KeyboardInterrupt):
    """``SIGTERM`` in the main thread while :func:`sigterm_unwinds` holds: it unwinds the
    server as ``SIGINT``'s ``KeyboardInterrupt`` does, so ``finally`` clauses close what the
    server opened."""


@contextmanager
def sigterm_unwinds() -> Generator[None, None, None]:
    """Make ``SIGTERM`` raise :class:`Terminated` in the main thread for the block (elsewhere:
    nothing changes). Its default action would end the process at once, leaving SQLite's
    WAL, chromadb's backlog and the recording's lock behind; an HTTP server's own handlers
    (:func:`serve_app`) take over while it serves."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def terminate(signum: int, frame: Any) -> None:
        raise Terminated

    before = signal.signal(signal.SIGTERM, terminate)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, before)


def force_stop(signum: int) -> NoReturn:
    """End the process at once on a second ``SIGINT``/``SIGTERM`` while a server stops.

    One line on stderr (written with :func:`os.write`: a signal handler may interrupt a
    ``print`` in progress) and ``os._exit(128 + signum)`` (130, 143): open requests are not
    waited for, the memory service is not closed. Every write the server acknowledged is
    committed (SQLite, the recording's complete lines); the store's next open checkpoints
    SQLite's log and re-sends chromadb what it missed, and the locks end with the process.
    """
    word = "terminated" if signum == signal.SIGTERM else "interrupted"
    line = (f"memlab: {word} again: stopped at once, without waiting for open requests or "
            "closing the store (its next open recovers it)\n")
    try:
        os.write(2, line.encode())
    except OSError:  # no stderr: the status says it
        pass
    os._exit(128 + signum)


class StopSignals:
    """``SIGINT`` and ``SIGTERM`` as a request to stop a server that runs an event loop.

    A handler that raises (``KeyboardInterrupt``, :class:`Terminated`) raises at whatever
    bytecode the main thread is running. Inside an event loop that is, now and then, the middle
    of a task's step (an anyio cancel scope's exit, a memory stream's receive) rather than the
    wait for I/O: the task group then unwinds with a ``RuntimeError`` or logs the exception as
    a traceback. While this context manager holds (main thread only; elsewhere nothing
    changes), the two signals raise nothing: the first one is kept in :attr:`received` and
    hands the callback given to :meth:`arm` to the event loop (a thread-safe call, as asyncio's
    own ``SIGINT`` handling does), where it cancels the server as any cancellation does. A
    signal before :meth:`arm` is acted on by :meth:`arm`. A second signal (the server is
    stopping already, and may be waiting for work that does not end) ends the process at once
    (:func:`force_stop`). On exit the handlers before it are put back.

    Attributes:
        received: The first signal received while it held (``None``: none).
    """

    def __init__(self) -> None:
        self.received: int | None = None
        self._request: Callable[[], None] | None = None
        self._before: dict[int, Any] = {}

    def __enter__(self) -> StopSignals:
        if threading.current_thread() is threading.main_thread():
            try:
                for sig in (signal.SIGINT, signal.SIGTERM):
                    self._before[sig] = signal.getsignal(sig)
                    signal.signal(sig, self._on_signal)
            except BaseException:  # the old SIGTERM handler raised meanwhile: all back
                self.__exit__()
                raise
        return self

    def __exit__(self, *exc_info: object) -> None:
        self._request = None
        before, self._before = self._before, {}
        restore_handlers(before)

    def _on_signal(self, signum: int, frame: Any) -> None:
        if self.received is not None:
            force_stop(signum)
        self.received = signum
        request = self._request
        if request is not None:
            request()

    def arm(self, loop: asyncio.AbstractEventLoop, stop: Callable[[], None]) -> None:
        """Call ``stop`` in ``loop`` on the first signal (at once if one came already)."""

        def request() -> None:
            try:
                loop.call_soon_threadsafe(stop)
            except RuntimeError:  # the loop is closed: the server stopped already
                pass

        self._request = request
        if self.received is not None:
            request()

    def arm_handler(self, stop: Callable[[], None]) -> None:
        """Call ``stop`` from the signal handler itself on the first signal (at once if one
        came already): for a ``stop`` that only sets flags a running loop polls (uvicorn's
        ``should_exit``)."""
        self._request = stop
        if self.received is not None:
            stop()

    def disarm(self) -> None:
        """Stop calling the callback of :meth:`arm` (a signal is still kept)."""
        self._request = None


def restore_handlers(handlers: dict[int, Any]) -> None:
    """Put the signal ``handlers`` back, each one even if a signal raised from one put back
    before it (``SIGINT``'s ``KeyboardInterrupt``), so that none is left in place."""
    if handlers:
        (sig, handler), *rest = handlers.items()
        try:
            signal.signal(sig, handler)
        finally:
            restore_handlers(dict(rest))


def _canned(status: str, message: str) -> bytes:
    """A whole HTTP/1.1 response that closes the connection, with a JSON error body."""
    body = json.dumps({"error": message}).encode()
    head = (f"HTTP/1.1 {status}\r\ncontent-type: application/json\r\nconnection: close\r\n"
            f"content-length: {len(body)}\r\n\r\n")
    return head.encode() + body


_BUSY = _canned("503 Service Unavailable", "too many connections; try again in a moment")
_TIMEOUT = _canned("408 Request Timeout", "request headers not received in time")

_ASGI = Callable[[MutableMapping[str, Any], Callable[..., Awaitable[Any]],
                  Callable[..., Awaitable[Any]]], Awaitable[None]]


@dataclass(frozen=True)
class Limits:
    """How much of the process one client may hold (see the module docstring).

    Attributes:
        max_connections: Most open client connections; a new one beyond is answered 503.
        header_timeout: Seconds a connection has to send a request line and its headers.
        keep_alive: Seconds an idle connection is kept open between two requests.
    """

    max_connections: int = 100
    header_timeout: float = 10.0
    keep_alive: float = 5.0

    def __post_init__(self) -> None:
        n = self.max_connections
        if isinstance(n, bool) or not isinstance(n, int) or n < 1:
            raise ValueError(f"field 'max_connections' must be an int >= 1, got {n!r}")
        for name in ("header_timeout", "keep_alive"):
            value = getattr(self, name)
            if (isinstance(value, bool) or not isinstance(value, (int, float))
                    or not 0 < value < float("inf")):
                raise ValueError(f"field '{name}' must be a finite number > 0, got {value!r}")


def bearer_guard(app: _ASGI, token: str) -> _ASGI:
    """``app`` behind a Bearer token: an HTTP request without ``Authorization: Bearer
    <token>`` (compared in constant time, as the ingest server compares it) is answered 401
    before ``app`` sees it (a websocket is closed unaccepted). Lifespan events pass through.

    Raises:
        ValueError: ``token`` is empty.
    """
    if not isinstance(token, str) or not token.strip():
        raise ValueError("a Bearer token must not be empty")
    expected = f"Bearer {token}".encode()
    body = json.dumps({"error": "missing or wrong Bearer token"}).encode()

    async def guarded(scope: MutableMapping[str, Any], receive: Any, send: Any) -> None:
        if scope.get("type") == "lifespan" or bearer_ok(scope, expected):
            await app(scope, receive, send)
            return
        if scope.get("type") != "http":  # a websocket: refused before it is accepted
            await send({"type": "websocket.close", "code": 1008})
            return
        await send({"type": "http.response.start", "status": 401, "headers": [
            (b"content-type", b"application/json"),
            (b"content-length", str(len(body)).encode()),
            (b"www-authenticate", b"Bearer"),
        ]})
        await send({"type": "http.response.body", "body": body})

    return guarded


def bearer_ok(scope: MutableMapping[str, Any], expected: bytes) -> bool:
    """Whether the request's first ``Authorization`` header is exactly ``expected``
    (constant-time comparison)."""
    got = b""
    for name, value in scope.get("headers") or ():
        if name.lower() == b"authorization":
            got = bytes(value)
            break
    return hmac.compare_digest(got, expected)


def _protocol_class(limits: Limits) -> type[asyncio.Protocol]:
    """uvicorn's HTTP protocol (httptools if installed, else h11) with the connection limit
    and the header timeout of ``limits``."""
    try:
        from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol as Base
    except ImportError:  # pragma: no cover - httptools is optional for uvicorn
        from uvicorn.protocols.http.h11_impl import H11Protocol as Base  # type: ignore[assignment]

    class BoundedProtocol(Base):  # type: ignore[misc,valid-type]
        _header_timer: asyncio.TimerHandle | None = None

        def connection_made(self, transport: Any) -> None:
            super().connection_made(transport)
            if len(self.connections) > limits.max_connections:
                transport.write(_BUSY)
                transport.close()
                return
            self._arm()

        def _busy(self) -> bool:
            """A request of this connection has its headers and is not answered yet."""
            cycle = self.cycle
            return cycle is not None and not cycle.response_complete

        def _arm(self) -> None:
            if self._header_timer is None:
                self._header_timer = self.loop.call_later(limits.header_timeout, self._expire)

        def _disarm(self) -> None:
            if self._header_timer is not None:
                self._header_timer.cancel()
                self._header_timer = None

        def _expire(self) -> None:
            self._header_timer = None
            if self._busy() or self.transport is None or self.transport.is_closing():
                return
            self.transport.write(_TIMEOUT)
            self.transport.close()

        def data_received(self, data: bytes) -> None:
            if not self._busy():
                self._arm()  # a (next) request has begun: its headers are on the clock
            super().data_received(data)
            if self._busy():
                self._disarm()  # its headers are in: the app has it

        def on_response_complete(self) -> None:
            super().on_response_complete()
            self._disarm()  # idle again: the keep-alive timeout takes over

        def connection_lost(self, exc: Exception | None) -> None:
            self._disarm()
            super().connection_lost(exc)

    return BoundedProtocol


_last_emfile = [float("-inf")]
_last_errors: dict[tuple[str, str], float] = {}


def _loop_errors(loop: asyncio.AbstractEventLoop, context: dict[str, Any]) -> None:
    """The event loop's error report, one line each and never a traceback (a rich traceback
    opens and highlights source files: under ``EMFILE`` that failed and stopped the loop, and
    after one, asyncio's dozens of retried accepts each took a second to render at shutdown).

    Out of file descriptors is one line on stderr, written without logging (whose handlers
    may need a descriptor), at most one every 10 s; any other error is one ``memlab.serve``
    log line, at most one every 10 s for the same message. Whatever the report itself raises
    is dropped: it can never stop the loop."""
    exc = context.get("exception")
    try:
        now = time.monotonic()
        if isinstance(exc, OSError) and exc.errno in (errno.EMFILE, errno.ENFILE):
            if now - _last_emfile[0] >= 10.0:
                _last_emfile[0] = now
                print(f"memlab: warning: out of file descriptors ({exc.strerror}): new "
                      "connections wait; lower --max-connections or raise the open-file limit",
                      file=sys.stderr, flush=True)
            return
        message = str(context.get("message") or "error")
        kind = "" if exc is None else f"{type(exc).__name__}: {exc}"
        key = (message, kind)
        if now - _last_errors.get(key, float("-inf")) >= 10.0:
            if len(_last_errors) > 1000:
                _last_errors.clear()
            _last_errors[key] = now
            log.error("event loop: %s%s", message, f" ({kind})" if kind else "")
    except Exception:  # noqa: BLE001 - an error report must not become an error
        pass


def serve_app(
    app: Any, *, host: str, port: int, limits: Limits | None = None, loop: str = "auto"
) -> int | None:
    """Serve ``app`` until ``SIGINT`` or ``SIGTERM``; returns the signal that stopped it
    (``None``: it stopped otherwise). The caller then closes what the app used. ``loop`` is
    uvicorn's event loop (``auto``: uvloop when installed, else ``asyncio``).

    Raises:
        SystemExit: uvicorn could not start (e.g. the port is taken; it logs why).
    """
    import uvicorn

    limits = limits or Limits()
    config = uvicorn.Config(
        app,
        host=host,
        port=port,
        log_level="warning",
        access_log=False,
        loop=loop,  # type: ignore[arg-type]
        http=_protocol_class(limits),
        timeout_keep_alive=limits.keep_alive,  # type: ignore[arg-type] - a float works
        timeout_graceful_shutdown=GRACE_SECONDS,
    )
    server = _server(config)
    # The handlers hold from before the loop starts until it is closed (asyncio.run's own
    # cleanup waits for the requests' tasks): the first signal stops the server gracefully,
    # a second one ends the process at once.
    with StopSignals() as stop:
        stop.arm_handler(lambda: server.handle_exit(stop.received or signal.SIGINT, None))
        server.run()
    return stop.received


def _server(config: Any) -> Any:
    """A uvicorn server whose signals :func:`serve_app` handles (:class:`StopSignals`; uvicorn
    neither installs handlers nor re-raises the signal), reporting loop errors with
    :func:`_loop_errors`."""
    import uvicorn

    class Server(uvicorn.Server):
        @contextmanager
        def capture_signals(self) -> Generator[None, None, None]:
            yield

        async def startup(self, sockets: Any = None) -> None:
            asyncio.get_running_loop().set_exception_handler(_loop_errors)
            await super().startup(sockets=sockets)

    return Server(config)
