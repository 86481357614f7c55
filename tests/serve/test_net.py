"""The HTTP servers' bounds and shutdown: connection limit, header timeout, surviving EMFILE,
the MCP transport's Bearer token, and SIGTERM closing the store as SIGINT does.

Every server binds 127.0.0.1 on a free port, runs as a subprocess with a timeout, and is
stopped by the test.
"""

from __future__ import annotations

import json
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import httpx
import pytest
from starlette.applications import Starlette
from starlette.responses import JSONResponse
from starlette.routing import Route
from starlette.testclient import TestClient

from memlab.cli import main
from memlab.datasets.validate import validate_dataset
from memlab.serve.net import Limits, StopSignals, _loop_errors, bearer_guard
from memlab.serve.recording import Recorder

if str(Path(__file__).parent) not in sys.path:  # --import-mode=importlib: helpers by path
    sys.path.insert(0, str(Path(__file__).parent))
from _server_env import server_env as _env  # noqa: E402
from _signal_landing import signal_landing  # noqa: E402

MEMLAB = ("-c", "import sys; from memlab.cli import main; sys.exit(main())")
TOKEN = "test-token-0123"
MCP_ACCEPT = {"Accept": "application/json, text/event-stream",
              "Content-Type": "application/json"}
INITIALIZE = {"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": {
    "protocolVersion": "2025-06-18", "capabilities": {},
    "clientInfo": {"name": "test", "version": "0"}}}


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _listening(proc: subprocess.Popen[bytes], port: int, timeout: float = 90.0) -> None:
    deadline = time.monotonic() + timeout
    while True:
        assert proc.poll() is None, "server exited"
        try:
            socket.create_connection(("127.0.0.1", port), timeout=1).close()
            return
        except OSError:
            assert time.monotonic() < deadline, "server did not listen"
            time.sleep(0.1)


@contextmanager
def _server(args: list[str], tmp_path: Path, **popen: Any) -> Iterator[subprocess.Popen[bytes]]:
    """``memlab ARGS`` as a subprocess (stderr to ``tmp_path/err``), killed if still running
    when the block ends."""
    err = open(tmp_path / "err", "wb")  # noqa: SIM115 - closed below
    proc = subprocess.Popen([sys.executable, *MEMLAB, *args], env=_env(),
                            stdout=popen.pop("stdout", subprocess.DEVNULL), stderr=err, **popen)
    try:
        yield proc
    finally:
        if proc.poll() is None:
            proc.kill()
        proc.wait(timeout=30)
        err.close()


def _stopped(proc: subprocess.Popen[bytes], sig: int, tmp_path: Path) -> str:
    proc.send_signal(sig)
    proc.wait(timeout=60)
    return (tmp_path / "err").read_text()


def _read_all(sock: socket.socket, timeout: float) -> bytes:
    """Everything the server sends until it closes the connection (``timeout`` at most)."""
    sock.settimeout(timeout)
    out = b""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            chunk = sock.recv(65536)
        except TimeoutError:
            break
        except ConnectionResetError:
            break
        if not chunk:
            break
        out += chunk
    return out


# ----------------------------------------------------------------------------- SIGTERM
@pytest.mark.parametrize(
    ("kind", "sig"),
    [("http", signal.SIGTERM), ("mcp-http", signal.SIGTERM), ("mcp-stdio", signal.SIGTERM),
     ("mcp-stdio", signal.SIGINT)],
)
def test_sigterm_closes_the_store_and_the_recording_as_sigint_does(
    tmp_path: Path, kind: str, sig: int
) -> None:
    """chromadb is sent its backlog (idle flush off: only closing sends it), SQLite's WAL is
    checkpointed away, the recording's lock is released; the exit status is the signal's."""
    store, rec, port = tmp_path / "store", tmp_path / "rec", _free_port()
    common = [str(store), "--human", "--embedder", "hashing", "--no-cache", "--record", str(rec),
              "--chroma-idle", "1000", "--port", str(port)]
    (tmp_path / "token").write_text(TOKEN)
    if kind == "http":
        args = ["serve", "http", *common, "--token-file", str(tmp_path / "token")]
    elif kind == "mcp-http":
        args = ["serve", "mcp", *common, "--transport", "http"]
    else:
        args = ["serve", "mcp", *common]
    stdio = {"stdin": subprocess.PIPE, "stdout": subprocess.PIPE} if kind == "mcp-stdio" else {}
    with _server(args, tmp_path, **stdio) as proc:
        if kind == "http":
            _listening(proc, port)
            res = httpx.post(f"http://127.0.0.1:{port}/memories", timeout=60,
                             headers={"Authorization": f"Bearer {TOKEN}"},
                             json=[{"content": f"note {i}"} for i in range(20)])
            assert res.status_code == 200
        elif kind == "mcp-http":
            _listening(proc, port)
            with httpx.Client(base_url=f"http://127.0.0.1:{port}", timeout=60) as http:
                init = http.post("/mcp", headers=MCP_ACCEPT, json=INITIALIZE)
                session = {**MCP_ACCEPT, "mcp-session-id": init.headers["mcp-session-id"]}
                http.post("/mcp", headers=session, json={
                    "jsonrpc": "2.0", "method": "notifications/initialized"})
                for i in range(5):
                    res = http.post("/mcp", headers=session, json={
                        "jsonrpc": "2.0", "id": i + 1, "method": "tools/call",
                        "params": {"name": "store", "arguments": {"content": f"note {i}"}}})
                    assert res.status_code == 200 and '"isError":false' in res.text
        else:
            assert proc.stdin is not None and proc.stdout is not None

            def send(obj: dict[str, Any]) -> None:
                proc.stdin.write((json.dumps(obj) + "\n").encode())  # type: ignore[union-attr]
                proc.stdin.flush()  # type: ignore[union-attr]

            send(INITIALIZE)
            proc.stdout.readline()
            send({"jsonrpc": "2.0", "method": "notifications/initialized"})
            for i in range(5):
                send({"jsonrpc": "2.0", "id": i + 1, "method": "tools/call",
                      "params": {"name": "store", "arguments": {"content": f"note {i}"}}})
                assert b'"isError":false' in proc.stdout.readline()
            # the host keeps stdin open and sends nothing more: the server must stop anyway
        err = _stopped(proc, sig, tmp_path)
    assert proc.returncode == (143 if sig == signal.SIGTERM else 130), err
    assert err.rstrip().endswith("memlab: terminated" if sig == signal.SIGTERM
                                 else "memlab: interrupted"), err
    assert "Traceback" not in err
    assert not (store / "memlab.sqlite3-wal").exists()  # closed: checkpointed
    assert main(["store", "check", str(store)]) == 0  # chromadb holds every memory
    Recorder(rec, lock_timeout=0).close()  # the recording's lock was released
    assert validate_dataset(rec) == []


# ----------------------------------------------------------------------------- limits
def test_connections_beyond_the_limit_get_503_and_slow_headers_408(tmp_path: Path) -> None:
    port = _free_port()
    (tmp_path / "token").write_text(TOKEN)
    args = ["serve", "http", str(tmp_path / "store"), "--human", "--embedder", "hashing",
            "--no-cache", "--no-chroma", "--token-file", str(tmp_path / "token"),
            "--port", str(port), "--max-connections", "6", "--header-timeout", "1.5"]
    with _server(args, tmp_path) as proc:
        _listening(proc, port)
        time.sleep(0.5)  # the probe's connection is closed on the server's side too
        slow = []
        for _ in range(6):  # they never finish their headers
            sock = socket.create_connection(("127.0.0.1", port), timeout=5)
            sock.sendall(b"GET /health HTTP/1.1\r\nHost: x\r\n")
            slow.append(sock)
        time.sleep(0.3)
        started = time.monotonic()
        extra = [socket.create_connection(("127.0.0.1", port), timeout=5) for _ in range(4)]
        for sock in extra:  # answered at once, before anything is read
            got = _read_all(sock, 5)
            assert got.startswith(b"HTTP/1.1 503 Service Unavailable\r\n"), got
            assert got.endswith(b'{"error": "too many connections; try again in a moment"}')
            sock.close()
        assert time.monotonic() - started < 1.0
        # one of them trickles a header byte every 0.2 s: the timeout is for the whole head
        trickle = slow[0]
        for _ in range(4):
            trickle.sendall(b"X")
            time.sleep(0.2)
        for sock in slow:  # 1.5 s after they opened: 408, closed
            got = _read_all(sock, 5)
            assert got.startswith(b"HTTP/1.1 408 Request Timeout\r\n"), got
            assert got.endswith(b'{"error": "request headers not received in time"}')
            sock.close()
        assert time.monotonic() - started < 4.0
        res = httpx.get(f"http://127.0.0.1:{port}/health", timeout=10)
        assert res.status_code == 200 and res.json() == {"status": "ok"}
        # a request that does finish its headers is never cut by the timeout
        res = httpx.post(f"http://127.0.0.1:{port}/memories", timeout=30,
                         headers={"Authorization": f"Bearer {TOKEN}"},
                         json=[{"content": "after the flood"}])
        assert res.status_code == 200
        assert proc.poll() is None
        _stopped(proc, signal.SIGTERM, tmp_path)
    assert proc.returncode == 143


_EMFILE_SERVER = """
import logging, resource, sys
from rich.logging import RichHandler
from starlette.applications import Starlette
from starlette.responses import JSONResponse
from starlette.routing import Route
from memlab.serve.net import Limits, serve_app

# as the MCP SDK sets up logging: a rich handler that renders tracebacks (it opened source
# files to do so, and an EMFILE there stopped the event loop)
logging.basicConfig(handlers=[RichHandler(rich_tracebacks=True)], level=logging.WARNING)
resource.setrlimit(resource.RLIMIT_NOFILE, (96, 96))

async def ok(request):
    return JSONResponse({"status": "ok"})

app = Starlette(routes=[Route("/health", ok)])
sig = serve_app(app, host="127.0.0.1", port=int(sys.argv[1]), loop=sys.argv[2],
                limits=Limits(max_connections=1000, header_timeout=2.0))
print("stopped by", sig, flush=True)
"""


@pytest.mark.parametrize("loop", ["auto", "asyncio"])
def test_the_server_survives_running_out_of_file_descriptors(tmp_path: Path, loop: str) -> None:
    port = _free_port()
    err = open(tmp_path / "err", "wb")  # noqa: SIM115 - closed below
    proc = subprocess.Popen([sys.executable, "-c", _EMFILE_SERVER, str(port), loop], env=_env(),
                            stdout=subprocess.PIPE, stderr=err)
    socks: list[socket.socket] = []
    try:
        _listening(proc, port)
        for _ in range(200):  # twice the descriptors the server may hold
            try:
                sock = socket.create_connection(("127.0.0.1", port), timeout=2)
                sock.sendall(b"GET /health HTTP/1.1\r\nHost: x\r\n")
                socks.append(sock)
            except OSError:
                break
        time.sleep(1.0)
        assert proc.poll() is None, (tmp_path / "err").read_text()
        for sock in socks:
            sock.close()
        socks = []
        deadline = time.monotonic() + 20
        while True:  # the server takes connections again once descriptors are free
            try:
                res = httpx.get(f"http://127.0.0.1:{port}/health", timeout=2)
                if res.status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            assert proc.poll() is None, (tmp_path / "err").read_text()
            assert time.monotonic() < deadline, "the server never answered again"
            time.sleep(0.2)
        proc.send_signal(signal.SIGTERM)
        out, _ = proc.communicate(timeout=30)
    finally:
        for sock in socks:
            sock.close()
        if proc.poll() is None:
            proc.kill()
            proc.wait(timeout=10)
        err.close()
    # (the rich handler writes its log lines to stdout: one line per loop error, no traceback)
    assert proc.returncode == 0 and out.decode().splitlines()[-1] == "stopped by 15"
    err_text = (tmp_path / "err").read_text()
    assert "Traceback" not in err_text + out.decode()
    if loop == "asyncio":  # uvloop copes with EMFILE inside libuv, and reports nothing
        assert err_text.count("memlab: warning: out of file descriptors") == 1, err_text


def test_loop_errors_are_one_line_each_and_never_raise(
    capsys: pytest.CaptureFixture[str], caplog: pytest.LogCaptureFixture,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    import memlab.serve.net as net

    monkeypatch.setattr(net, "_last_emfile", [float("-inf")])
    monkeypatch.setattr(net, "_last_errors", {})
    emfile = {"message": "socket.accept() out of system resource",
              "exception": OSError(24, "Too many open files")}
    closed = {"message": "Exception in callback BaseSelectorEventLoop._start_serving()",
              "exception": ValueError("Invalid file descriptor: -1")}
    with caplog.at_level("ERROR", logger="memlab.serve"):
        for _ in range(3):  # once, not once per failed accept
            _loop_errors(None, emfile)  # type: ignore[arg-type]
            _loop_errors(None, closed)  # type: ignore[arg-type]
    assert capsys.readouterr().err == (
        "memlab: warning: out of file descriptors (Too many open files): new connections "
        "wait; lower --max-connections or raise the open-file limit\n")
    assert [(r.getMessage(), r.exc_info) for r in caplog.records] == [
        ("event loop: Exception in callback BaseSelectorEventLoop._start_serving() "
         "(ValueError: Invalid file descriptor: -1)", None)]

    def broken_emit(*args: Any, **kwargs: Any) -> None:
        raise OSError(24, "Too many open files")

    monkeypatch.setattr(net.log, "error", broken_emit)  # a report that fails is dropped
    _loop_errors(None, {"message": "x", "exception": KeyError("y")})  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("option", "value", "message"),
    [("--max-connections", "0", "--max-connections must be an integer >= 1"),
     ("--header-timeout", "0", "--header-timeout must be > 0 (seconds)"),
     ("--header-timeout", "inf", "--header-timeout must be > 0 (seconds)"),
     ("--keep-alive", "-1", "--keep-alive must be > 0 (seconds)")],
)
def test_limits_are_checked(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], option: str, value: str, message: str
) -> None:
    code = main(["serve", "mcp", str(tmp_path / "store"), "--human", "--transport", "http",
                 "--embedder", "hashing", "--no-cache", "--no-chroma", option, value])
    assert code == 2
    assert capsys.readouterr().err.strip() == f"memlab: error: {message}"
    assert not (tmp_path / "store").exists()


def test_limits_refuse_bad_values() -> None:
    for kwargs in ({"max_connections": True}, {"header_timeout": 0}, {"keep_alive": "5"},
                   {"header_timeout": float("nan")}):
        with pytest.raises(ValueError, match="must be"):
            Limits(**kwargs)


# ----------------------------------------------------------------------------- MCP token
def test_the_mcp_http_transport_takes_a_bearer_token(tmp_path: Path) -> None:
    port = _free_port()
    (tmp_path / "token").write_text(TOKEN + "\n")
    args = ["serve", "mcp", str(tmp_path / "store"), "--agent", "atlas", "--embedder",
            "hashing", "--no-cache", "--no-chroma", "--transport", "http", "--port", str(port),
            "--token-file", str(tmp_path / "token")]
    with _server(args, tmp_path) as proc:
        _listening(proc, port)
        url = f"http://127.0.0.1:{port}/mcp"
        for headers in ({}, {"Authorization": "Bearer nope"},
                        {"Authorization": f"bearer {TOKEN}"}):
            res = httpx.post(url, headers={**MCP_ACCEPT, **headers}, json=INITIALIZE,
                             timeout=30)
            assert res.status_code == 401
            assert res.json() == {"error": "missing or wrong Bearer token"}
            assert res.headers["www-authenticate"] == "Bearer"
        res = httpx.post(url, headers={**MCP_ACCEPT, "Authorization": f"Bearer {TOKEN}"},
                         json=INITIALIZE, timeout=30)
        assert res.status_code == 200 and '"serverInfo"' in res.text
        err = _stopped(proc, signal.SIGTERM, tmp_path)
    assert "no token" not in err


def test_the_mcp_http_transport_without_a_token_says_who_anyone_acts_as(
    tmp_path: Path,
) -> None:
    port = _free_port()
    args = ["serve", "mcp", str(tmp_path / "store"), "--agent", "atlas", "--client", "acme",
            "--embedder", "hashing", "--no-cache", "--no-chroma", "--transport", "http",
            "--port", str(port)]
    with _server(args, tmp_path) as proc:
        _listening(proc, port)
        res = httpx.post(f"http://127.0.0.1:{port}/mcp", headers=MCP_ACCEPT, json=INITIALIZE,
                         timeout=30)
        assert res.status_code == 200
        err = _stopped(proc, signal.SIGTERM, tmp_path)
    assert err.startswith(
        "memlab: warning: no token ($MEMLAB_MCP_TOKEN or --token-file): any process that can "
        f"reach http://127.0.0.1:{port}/mcp can call every tool as agent 'atlas' of client "
        "'acme'\n")


def test_a_token_file_for_stdio_is_refused(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    (tmp_path / "token").write_text(TOKEN)
    code = main(["serve", "mcp", str(tmp_path / "store"), "--human", "--embedder", "hashing",
                 "--no-cache", "--no-chroma", "--token-file", str(tmp_path / "token")])
    assert code == 2
    assert capsys.readouterr().err.strip() == (
        "memlab: error: --token-file guards --transport http; stdio has no network to guard")


def test_bearer_guard_compares_the_whole_header() -> None:
    async def hello(request: Any) -> JSONResponse:
        return JSONResponse({"hello": "world"})

    client = TestClient(bearer_guard(Starlette(routes=[Route("/", hello)]), TOKEN))
    assert client.get("/", headers={"Authorization": f"Bearer {TOKEN}"}).json() == {
        "hello": "world"}
    for value in ("", f"Bearer {TOKEN} ", f"Bearer {TOKEN}x", f"Basic {TOKEN}", TOKEN):
        res = client.get("/", headers={"Authorization": value} if value else {})
        assert res.status_code == 401 and res.json() == {"error": "missing or wrong Bearer token"}
    with pytest.raises(ValueError, match="must not be empty"):
        bearer_guard(Starlette(), " ")


# ----------------------------------------------------------------------------- StopSignals
def test_stop_signals_cancel_through_the_loop_and_never_raise() -> None:
    """A signal while the loop runs calls the stop callback in the loop; one before ``arm``
    is acted on by ``arm``; the old handlers come back. (A second signal ends the process:
    see the subprocess tests below.)"""
    import asyncio

    before = {sig: signal.getsignal(sig) for sig in (signal.SIGINT, signal.SIGTERM)}
    calls: list[str] = []

    async def serve(stop: StopSignals, name: str) -> None:
        loop = asyncio.get_running_loop()
        stopped = asyncio.Event()

        def cancel() -> None:
            calls.append(name)
            stopped.set()

        stop.arm(loop, cancel)
        if stop.received is None:
            signal.raise_signal(signal.SIGTERM)  # raises nothing here
        await asyncio.wait_for(stopped.wait(), 10)
        stop.disarm()

    with StopSignals() as stop:
        asyncio.run(serve(stop, "during"))
        assert stop.received == signal.SIGTERM
    with StopSignals() as early:
        signal.raise_signal(signal.SIGINT)  # before the loop: kept
        asyncio.run(serve(early, "early"))
        assert early.received == signal.SIGINT
    assert calls == ["during", "early"]
    assert {sig: signal.getsignal(sig) for sig in before} == before


@pytest.mark.parametrize("at_call", [1, 2, 3])  # install SIGINT, SIGTERM; put SIGINT back
def test_stop_signals_put_every_handler_back_when_a_signal_raises_while_swapping(
    monkeypatch: pytest.MonkeyPatch, at_call: int
) -> None:
    """An old handler that raises (SIGTERM's ``Terminated``, SIGINT's ``KeyboardInterrupt``)
    while ``StopSignals`` puts its handlers in place or puts the old ones back leaves none of
    its own behind."""
    from memlab.serve.net import Terminated

    before = {sig: signal.getsignal(sig) for sig in (signal.SIGINT, signal.SIGTERM)}
    monkeypatch.setattr(signal, "signal", signal_landing(at_call))
    with pytest.raises(Terminated):
        with StopSignals():
            pass
    monkeypatch.undo()
    assert {sig: signal.getsignal(sig) for sig in before} == before


# ----------------------------------------------------------------------------- a second signal
FORCED = ("memlab: {} again: stopped at once, without waiting for open requests or closing "
          "the store (its next open recovers it)")


@pytest.mark.parametrize(("first", "second"), [(signal.SIGTERM, signal.SIGTERM),
                                               (signal.SIGINT, signal.SIGTERM),
                                               (signal.SIGTERM, signal.SIGINT)])
def test_a_second_signal_stops_an_http_server_at_once(
    tmp_path: Path, first: int, second: int
) -> None:
    """The first signal waits for a request still being sent (up to the grace period); a
    second one ends the process at once, with one line and the second signal's status, and
    the store opens again with every acknowledged write."""
    store, port = tmp_path / "store", _free_port()
    (tmp_path / "token").write_text(TOKEN)
    args = ["serve", "http", str(store), "--human", "--embedder", "hashing", "--no-cache",
            "--no-chroma", "--port", str(port), "--token-file", str(tmp_path / "token")]
    with _server(args, tmp_path) as proc:
        _listening(proc, port)
        res = httpx.post(f"http://127.0.0.1:{port}/memories", timeout=60,
                         headers={"Authorization": f"Bearer {TOKEN}"},
                         json=[{"content": "kept note"}])
        assert res.status_code == 200
        with socket.create_connection(("127.0.0.1", port), timeout=10) as slow:
            slow.sendall(b"POST /memories HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer "
                         + TOKEN.encode() + b"\r\nContent-Type: application/json\r\n"
                         b"Content-Length: 1000\r\n\r\n[")
            time.sleep(0.5)
            proc.send_signal(first)
            time.sleep(1.0)
            assert proc.poll() is None  # gracefully waiting for the request
            sent = time.monotonic()
            proc.send_signal(second)
            proc.wait(timeout=30)
            took = time.monotonic() - sent
    err = (tmp_path / "err").read_text()
    word = "terminated" if second == signal.SIGTERM else "interrupted"
    assert proc.returncode == 128 + second, err
    assert err.splitlines()[-1] == FORCED.format(word), err
    assert "Traceback" not in err
    assert took < 2.5, took  # not the rest of the grace period
    assert main(["store", "check", str(store)]) == 0


_BUSY_LOOP = """
import asyncio, sys, time
import anyio
from memlab.serve.net import StopSignals

async def serve(stop):
    with anyio.CancelScope() as scope:
        stop.arm(asyncio.get_running_loop(), scope.cancel)
        print("ready", flush=True)
        for _ in range(600):  # a call that holds the loop: the cancel waits for it
            time.sleep(0.1)
        await anyio.sleep(0)

with StopSignals() as stop:
    anyio.run(serve, stop)
print("stopped by", stop.received, flush=True)
"""


@pytest.mark.parametrize("second", [signal.SIGINT, signal.SIGTERM])
def test_a_second_signal_ends_a_loop_whose_cancellation_waits(tmp_path: Path, second: int) -> None:
    """What the MCP stdio transport runs under: the first signal cancels, and the cancellation
    waits for a call that holds the loop; the second ends the process at once."""
    err = open(tmp_path / "err", "wb")  # noqa: SIM115 - closed below
    proc = subprocess.Popen([sys.executable, "-c", _BUSY_LOOP], env=_env(),
                            stdout=subprocess.PIPE, stderr=err)
    try:
        assert proc.stdout is not None and proc.stdout.readline() == b"ready\n"
        proc.send_signal(signal.SIGINT)
        time.sleep(1.0)
        assert proc.poll() is None  # the cancellation waits for the call
        proc.send_signal(second)
        out, _ = proc.communicate(timeout=10)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(timeout=10)
        err.close()
    text = (tmp_path / "err").read_text()
    word = "terminated" if second == signal.SIGTERM else "interrupted"
    assert (proc.returncode, out, text) == (128 + second, b"", FORCED.format(word) + "\n")
