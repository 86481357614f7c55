"""``memlab serve mcp`` and ``memlab serve http``.

::

    memlab serve mcp STORE_DIR --pipeline rrf --agent atlas [--project apollo] [--record DIR]
        [--transport stdio|http] [--host 127.0.0.1] [--port 8000]
        [--token-env MEMLAB_MCP_TOKEN | --token-file F]   # http: a Bearer token (optional)
    memlab serve http STORE_DIR --human [--token-env MEMLAB_INGEST_TOKEN | --token-file F]
        [--record DIR] [--port 8080] [--max-batch 1000] [--max-request-bytes 8388608]
        [--chroma-idle 1]   # new vectors go to chromadb after 1 s without calls (0: each commit)
    # both HTTP servers: [--max-connections 100] [--header-timeout 10] [--keep-alive 5]

``SIGINT`` and ``SIGTERM`` stop every transport the same way: the server stops taking calls,
the memory service is closed (chromadb flushed, SQLite checkpointed, the recording's lock
released), and the process exits 130 or 143. A second signal while it stops (open requests
finishing, the service closing) ends the process at once with one line on stderr
(:func:`memlab.serve.net.force_stop`).
"""

from __future__ import annotations

import argparse
import os
import signal
import sys
import threading
from pathlib import Path
from typing import Any


def _service(args: argparse.Namespace) -> Any:
    from memlab.cli import CLIError, _embedder
    from memlab.memory.scopes import Principal
    from memlab.memory.store import MemoryStore
    from memlab.pipeline import load_pipeline
    from memlab.serve.recording import Recorder
    from memlab.serve.service import MemoryService
    from memlab.timeutil import parse_ts

    if args.human and args.agent:
        raise CLIError("give --agent NAME or --human, not both")
    if not args.human and not args.agent:
        raise CLIError("say who the server serves: --agent NAME (with --project P) or --human")
    if args.human and args.project:
        raise CLIError("--project assigns projects to an agent; a human reads every project")
    principal = None if args.human else Principal.of(args.agent, args.project or ())
    pipeline = load_pipeline(args.pipeline)
    clock = None
    if args.clock is not None:
        fixed = parse_ts(args.clock, field="--clock")
        clock = lambda: fixed  # noqa: E731 - a fixed clock; the service makes it advance 1 ms a call
    store_dir = Path(args.store_dir)
    if store_dir.exists() and not store_dir.is_dir():
        raise CLIError(f"{store_dir}: not a directory")
    if args.chroma_idle < 0:
        raise CLIError("--chroma-idle must be >= 0")
    if args.record:
        _check_record_dir(Path(args.record), store_dir)
    embedder = _embedder(args.embedder, not args.no_cache)
    recorder = None
    store = None
    try:
        # The store first: a store another server holds refuses the start before a new
        # recording directory is made.
        store = MemoryStore(
            store_dir,
            embedder=embedder,
            chroma=False if args.no_chroma else None,
            chroma_sync="deferred" if args.chroma_idle > 0 else "commit",
        )
        recorder = Recorder(args.record) if args.record else None
        kwargs: dict[str, Any] = {}
        if clock is not None:
            kwargs["clock"] = clock
        return MemoryService(
            store,
            pipeline,
            principal=principal,
            client_id=args.client,
            recorder=recorder,
            touch_k=args.touch_k,
            ttl_days=args.ttl_days,
            expire=not args.no_expire,
            chroma_idle=args.chroma_idle if args.chroma_idle > 0 and not args.no_chroma else None,
            **kwargs,
        )
    except BaseException:
        # nothing serves: release the recording's lock and the store's
        if store is not None:
            store.close()
        if recorder is not None:
            recorder.close()
        raise


def _check_record_dir(record: Path, store_dir: Path) -> None:
    """Refuse a recording directory that is the store directory, inside it, or around it.

    Raises:
        CLIError: The two directories overlap (symlinks resolved).
    """
    from memlab.cli import CLIError

    rec, store = record.resolve(), store_dir.resolve()
    if rec == store:
        raise CLIError(
            f"--record {record}: is the store directory {store_dir}; record into a directory "
            "outside the store"
        )
    if store in rec.parents:
        raise CLIError(
            f"--record {record}: is inside the store directory {store_dir}; record into a "
            "directory outside the store"
        )
    if rec in store.parents:
        raise CLIError(
            f"store directory {store_dir}: is inside the recording --record {record}; keep the "
            "store outside the recording"
        )


def _close(service: Any, *, stopping: bool = False) -> None:
    """Close the service with ``SIGINT`` and ``SIGTERM`` held back: a signal that comes
    meanwhile is only noted, and acted on (``KeyboardInterrupt``,
    :class:`~memlab.serve.net.Terminated`) once the store and the recording are closed. A
    signal whose handler raises while the holding handlers are being put in place or taken
    away (the old ones then being in force) skips neither the closing nor the putting back:
    it is raised once both are done.

    A signal that comes while the service closes because of an earlier one (``stopping``: a
    signal stopped the server), or a second one while it closes, ends the process at once
    (:func:`~memlab.serve.net.force_stop`)."""
    from memlab.serve.net import Terminated, force_stop, restore_handlers

    got: list[int] = []

    def hold(signum: int, frame: Any) -> None:
        if stopping or got:
            force_stop(signum)
        got.append(signum)

    before: dict[int, Any] = {}
    try:
        if threading.current_thread() is threading.main_thread():
            for sig in (signal.SIGINT, signal.SIGTERM):
                before[sig] = signal.getsignal(sig)
                signal.signal(sig, hold)
    finally:
        try:
            service.close()
        finally:
            restore_handlers(before)
    if got:
        raise Terminated if got[0] == signal.SIGTERM else KeyboardInterrupt


def _stopped(sig: int | None) -> int:
    """The exit status after a server stopped on a signal and its service was closed: as the
    command line ends on that signal (``SIGTERM``: 143, ``SIGINT``: 130)."""
    if sig == signal.SIGTERM:
        print("memlab: terminated", file=sys.stderr)
        return 128 + signal.SIGTERM
    if sig == signal.SIGINT:
        print("memlab: interrupted", file=sys.stderr)
        return 130
    return 0


def _serving(run: Any) -> int:
    """``run()`` (start, serve, close) with ``SIGTERM`` unwinding it as ``SIGINT`` does; a
    ``SIGTERM`` that stopped it ends as the command line ends on one (exit 143)."""
    from memlab.serve.net import Terminated, sigterm_unwinds

    try:
        with sigterm_unwinds():
            return int(run())
    except Terminated:
        print("memlab: terminated", file=sys.stderr)
        return 128 + signal.SIGTERM


#: File descriptors kept for the store, chromadb, the recording and Python itself, beyond
#: one per client connection.
FD_RESERVE = 128


def _limits(args: argparse.Namespace) -> Any:
    """The connection limit and timeouts of ``args``, within the open-file limit (the soft
    limit is raised toward the hard one when it is too low).

    Raises:
        CLIError: A value is out of range, or the open-file limit cannot hold the
            connections.
    """
    from memlab.cli import CLIError
    from memlab.serve.net import Limits

    if args.max_connections < 1:
        raise CLIError("--max-connections must be an integer >= 1")
    for option, value in (("--header-timeout", args.header_timeout),
                          ("--keep-alive", args.keep_alive)):
        if not 0 < value < float("inf"):  # also NaN
            raise CLIError(f"{option} must be > 0 (seconds)")
    limits = Limits(args.max_connections, args.header_timeout, args.keep_alive)
    try:
        import resource
    except ImportError:  # pragma: no cover - not on POSIX
        return limits
    want = limits.max_connections + FD_RESERVE
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft != resource.RLIM_INFINITY and soft < want:
        new = want if hard == resource.RLIM_INFINITY else min(hard, want)
        try:
            resource.setrlimit(resource.RLIMIT_NOFILE, (new, hard))
            soft = new
        except (ValueError, OSError):
            pass
    if soft != resource.RLIM_INFINITY and soft < want:
        raise CLIError(
            f"--max-connections {limits.max_connections}: the open-file limit is {soft} "
            f"(hard limit {hard}); it must hold the connections and {FD_RESERVE} more for the "
            "store — lower --max-connections or raise the limit (ulimit -n)"
        )
    return limits


def cmd_serve_mcp(args: argparse.Namespace) -> int:
    from memlab.serve.mcp_server import run

    limits = _limits(args) if args.transport == "http" else None
    token = _mcp_token(args)

    def serve() -> int:
        service = _service(args)
        try:
            if args.transport == "http" and token is None:
                who = f"agent {args.agent!r}" if args.agent else "a human (every scope)"
                print(
                    f"memlab: warning: no token (${args.token_env} or --token-file): any "
                    f"process that can reach http://{args.host}:{args.port}/mcp can call every "
                    f"tool as {who} of client {args.client!r}",
                    file=sys.stderr,
                )
            stopped = run(service, transport=args.transport, host=args.host, port=args.port,
                          limits=limits, token=token)
        except BaseException as exc:
            _close(service, stopping=isinstance(exc, KeyboardInterrupt))
            raise
        _close(service, stopping=stopped is not None)
        return _stopped(stopped)

    return _serving(serve)


def _token(args: argparse.Namespace, *, required: bool = True) -> str | None:
    from memlab.cli import CLIError

    if args.token_file:
        path = Path(args.token_file)
        if not path.is_file():
            raise CLIError(f"{path}: no such token file")
        token = path.read_text(encoding="utf-8").strip()
        where = str(path)
    else:
        token = os.environ.get(args.token_env, "").strip()
        where = f"${args.token_env}"
    if not token and required:
        raise CLIError(
            f"no ingest token in {where}: the server refuses to start without one "
            "(--token-env NAME or --token-file PATH)"
        )
    if not token and args.token_file:
        raise CLIError(f"no token in {where}: give a file holding one, or no --token-file")
    return token or None


def _mcp_token(args: argparse.Namespace) -> str | None:
    """The MCP server's Bearer token: read as the ingest server reads its own (a file, or an
    environment variable), but optional; stdio takes none."""
    from memlab.cli import CLIError

    if args.transport == "stdio":
        if args.token_file:
            raise CLIError("--token-file guards --transport http; stdio has no network to guard")
        return None
    return _token(args, required=False)


def cmd_serve_http(args: argparse.Namespace) -> int:
    from memlab.cli import CLIError
    from memlab.serve.http import build_app, serve

    token = _token(args)
    if args.max_batch < 1 or args.max_request_bytes < 1:
        raise CLIError("--max-batch and --max-request-bytes must be positive")
    limits = _limits(args)

    def run() -> int:
        service = _service(args)
        try:
            app = build_app(
                service, token=token, max_request_bytes=args.max_request_bytes,
                max_batch=args.max_batch,
            )
            stopped = serve(app, host=args.host, port=args.port, limits=limits)
        except BaseException as exc:
            _close(service, stopping=isinstance(exc, KeyboardInterrupt))
            raise
        _close(service, stopping=stopped is not None)
        return _stopped(stopped)

    return _serving(run)


def add_commands(sub: Any) -> None:
    """Register ``serve mcp`` and ``serve http`` under the ``memlab`` parser's subcommands."""
    from memlab.cli import EMBEDDER_HELP  # the help every command shares

    top = sub.add_parser("serve", help="live servers: MCP tools, HTTP bulk ingest")
    serve = top.add_subparsers(dest="serve_command", required=True)

    def common(p: argparse.ArgumentParser, port: int) -> None:
        p.add_argument("store_dir", help="store directory (created when missing)")
        p.add_argument("--pipeline", default="rrf", help="pipeline name or TOML (default rrf)")
        p.add_argument("--agent", help="serve this agent (reads team, its scope, its projects)")
        p.add_argument("--project", action="append", help="a project of the agent (repeatable)")
        p.add_argument("--human", action="store_true", help="serve a human (reads every scope)")
        p.add_argument("--client", default="global", help="tenant client id (default global)")
        p.add_argument("--record", help="append every write and recall to this dataset dir")
        p.add_argument("--embedder", default="minilm", help=EMBEDDER_HELP)
        p.add_argument("--no-cache", action="store_true", help="do not use the embedding cache")
        p.add_argument("--no-chroma", action="store_true", help="no chromadb index beside SQLite")
        p.add_argument("--chroma-idle", type=float, default=1.0,
                       help="send new vectors to chromadb once the server has been idle this "
                       "many seconds (default 1; 0 = after every commit)")
        p.add_argument("--touch-k", type=int, default=10, help="recall hits counted as accesses")
        p.add_argument("--ttl-days", type=float, default=30.0, help="event TTL")
        p.add_argument("--no-expire", action="store_true", help="no event TTL expiry")
        p.add_argument("--clock", help="fixed clock (ISO 8601; each call advances it 1 ms)")
        p.add_argument("--host", default="127.0.0.1", help="bind address (default 127.0.0.1)")
        p.add_argument("--port", type=int, default=port, help=f"port (default {port})")

    def limits(p: argparse.ArgumentParser) -> None:
        p.add_argument("--max-connections", type=int, default=100,
                       help="HTTP: most open client connections; one more is answered 503 "
                       "(default 100)")
        p.add_argument("--header-timeout", type=float, default=10.0,
                       help="HTTP: seconds a connection has to send a request's headers "
                       "(default 10; then 408 and closed)")
        p.add_argument("--keep-alive", type=float, default=5.0,
                       help="HTTP: seconds an idle connection stays open (default 5)")

    p = serve.add_parser("mcp", help="MCP server over stdio or Streamable HTTP")
    common(p, 8000)
    p.add_argument("--transport", choices=("stdio", "http"), default="stdio")
    p.add_argument("--token-env", default="MEMLAB_MCP_TOKEN",
                   help="--transport http: environment variable holding a Bearer token "
                   "(default MEMLAB_MCP_TOKEN; unset: no token, any local process may call)")
    p.add_argument("--token-file", help="--transport http: file holding the Bearer token")
    limits(p)
    p.set_defaults(func=cmd_serve_mcp)

    p = serve.add_parser("http", help="HTTP bulk ingest with a Bearer token")
    common(p, 8080)
    p.add_argument("--token-env", default="MEMLAB_INGEST_TOKEN",
                   help="environment variable holding the token (default MEMLAB_INGEST_TOKEN)")
    p.add_argument("--token-file", help="file holding the token (instead of the environment)")
    limits(p)
    p.add_argument("--max-batch", type=int, default=1000, help="most items per request")
    p.add_argument("--max-request-bytes", type=int, default=8 * 1024 * 1024,
                   help="largest request body")
    p.set_defaults(func=cmd_serve_http)
