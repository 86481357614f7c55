"""``memlab serve mcp`` over stdio, spoken to line by line as an MCP host does: malformed
lines get JSON-RPC's error answers and the server goes on serving; a signal, or a host that
stops reading or closes stdout, stops it cleanly with its store and recording closed.

Every server is a subprocess with bounded waits, stopped by the test (killed if it is still
running at the end).
"""

from __future__ import annotations

import json
import os
import select
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest

from memlab.cli import main
from memlab.datasets.validate import validate_dataset
from memlab.serve.mcp_server import MAX_LINE_BYTES
from memlab.serve.recording import Recorder

MEMLAB = ("-c", "import sys; from memlab.cli import main; sys.exit(main())")
if str(Path(__file__).parent) not in sys.path:  # --import-mode=importlib: helpers by path
    sys.path.insert(0, str(Path(__file__).parent))
from _server_env import server_env as _env  # noqa: E402

INITIALIZE = {
    "jsonrpc": "2.0",
    "id": 0,
    "method": "initialize",
    "params": {
        "protocolVersion": "2025-06-18",
        "capabilities": {},
        "clientInfo": {"name": "test", "version": "0"},
    },
}
TOOLS_LIST = b'{"jsonrpc": "2.0", "id": 99, "method": "tools/list"}'


class Host:
    """An MCP host's end of the pipes to a ``memlab serve mcp`` subprocess."""

    def __init__(self, proc: subprocess.Popen[bytes], err: Path) -> None:
        self.proc = proc
        self.err = err

    def send(self, *lines: bytes) -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.write(b"".join(line + b"\n" for line in lines))
        self.proc.stdin.flush()

    def reply(self, timeout: float = 60.0) -> dict[str, Any]:
        """The next line of stdout, as JSON (waiting ``timeout`` seconds at most)."""
        assert self.proc.stdout is not None
        ready, _, _ = select.select([self.proc.stdout], [], [], timeout)
        assert ready, f"no reply within {timeout} s"
        line = self.proc.stdout.readline()
        assert line.endswith(b"\n"), line
        return json.loads(line)

    def stderr(self) -> str:
        return self.err.read_text()


@contextmanager
def _host(tmp_path: Path, *options: str) -> Iterator[Host]:
    """A server on ``tmp_path/store`` past the MCP handshake (stdin lines 1 and 2); killed if
    still running when the block ends."""
    err = open(tmp_path / "err", "wb")  # noqa: SIM115 - closed below
    args = [str(tmp_path / "store"), "--human", "--embedder", "hashing", "--no-cache", *options]
    proc = subprocess.Popen(
        [sys.executable, *MEMLAB, "serve", "mcp", *args],
        env=_env(),
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=err,
    )
    try:
        host = Host(proc, tmp_path / "err")
        host.send(json.dumps(INITIALIZE).encode())
        assert host.reply()["result"]["serverInfo"]["name"] == "memlab"
        host.send(b'{"jsonrpc": "2.0", "method": "notifications/initialized"}')
        yield host
    finally:
        if proc.poll() is None:
            proc.kill()
        proc.wait(timeout=30)
        for pipe in (proc.stdin, proc.stdout):
            if pipe is not None and not pipe.closed:
                try:
                    pipe.close()
                except BrokenPipeError:
                    pass
        err.close()


def _error(code: int, message: str, request_id: int | str | None = None) -> dict[str, Any]:
    return {"jsonrpc": "2.0", "id": request_id, "error": {"code": code, "message": message}}


def _assert_tools_list(reply: dict[str, Any]) -> None:
    assert reply["id"] == 99, reply
    names = {tool["name"] for tool in reply["result"]["tools"]}
    assert len(names) == 20 and {"store", "recall", "forget"} <= names


def _closed_cleanly(host: Host) -> None:
    """End of stdin: the server exits 0, having printed nothing."""
    assert host.proc.stdin is not None and host.proc.stdout is not None
    host.proc.stdin.close()
    assert host.proc.wait(timeout=60) == 0, host.stderr()
    assert host.proc.stdout.read() == b""
    assert host.stderr() == ""


# ----------------------------------------------------------------------------- malformed lines
PADDED = b'{"jsonrpc": "2.0", "id": 7, "method": "tools/list"}'
TOO_LONG = f"Invalid Request: stdin line 4 is longer than {MAX_LINE_BYTES} bytes"


@pytest.mark.parametrize(
    ("lines", "expected"),
    [
        pytest.param(  # a parse error: truncated JSON
            [b'{"jsonrpc": "2.0", "id": 7, "method": "tools/list"'],
            [
                _error(
                    -32700,
                    "Parse error: stdin line 3 is not JSON: EOF while parsing an "
                    "object at column 50",
                )
            ],
            id="not-json",
        ),
        pytest.param(  # NaN is no JSON (the SDK took it for a number)
            [
                b'{"jsonrpc": "2.0", "id": 7, "method": "tools/call", "params": {"name": '
                b'"recall", "arguments": {"query": "x", "min_confidence": NaN}}}'
            ],
            [_error(-32700, "Parse error: stdin line 3 is not JSON: expected value at column 128")],
            id="nan",
        ),
        pytest.param(  # Latin-1, not UTF-8 (the SDK stored "caf\ufffd")
            [
                b'{"jsonrpc": "2.0", "id": 7, "method": "tools/call", "params": {"name": '
                b'"store", "arguments": {"content": "caf\xe9"}}}'
            ],
            [_error(-32700, "Parse error: stdin line 3 is not UTF-8 (byte 110)")],
            id="invalid-utf8",
        ),
        pytest.param(
            [b"[" * 300 + b"]" * 300],
            [
                _error(
                    -32700,
                    "Parse error: stdin line 3 is not JSON: recursion limit exceeded at column 202",
                )
            ],
            id="nested-too-deeply",
        ),
        pytest.param(
            [b'[{"jsonrpc": "2.0", "id": 7, "method": "tools/list"}]'],
            [
                _error(
                    -32600,
                    "Invalid Request: stdin line 3 is a JSON array (a batch); MCP "
                    "takes one message object per line",
                )
            ],
            id="batch",
        ),
        pytest.param(
            [b"42"],
            [
                _error(
                    -32600,
                    "Invalid Request: stdin line 3 is a JSON number, not a JSON-RPC message object",
                )
            ],
            id="scalar",
        ),
        pytest.param(
            [b'{"id": 7, "method": "tools/list"}'],
            [_error(-32600, 'Invalid Request: stdin line 3: field "jsonrpc" must be "2.0"', 7)],
            id="no-jsonrpc",
        ),
        pytest.param(  # the SDK took it for a notification, which is never answered
            [b'{"jsonrpc": "2.0", "id": null, "method": "tools/list"}'],
            [
                _error(
                    -32600,
                    'Invalid Request: stdin line 3: field "id" must be a string or an integer',
                )
            ],
            id="null-id",
        ),
        pytest.param(
            [b'{"jsonrpc": "2.0", "id": "r-7", "method": "tools/list", "params": [1]}'],
            [
                _error(
                    -32600, 'Invalid Request: stdin line 3: field "params" must be an object', "r-7"
                )
            ],
            id="params-not-an-object",
        ),
        pytest.param(  # a malformed response: answered with id null, never the request's
            [b'{"jsonrpc": "2.0", "id": 7, "error": {"code": 1}}'],
            [
                _error(
                    -32600,
                    "Invalid Request: stdin line 3: not a valid JSON-RPC request, "
                    "notification or response",
                )
            ],
            id="malformed-response",
        ),
        pytest.param(  # blank lines frame nothing and get no answer, but they are counted
            [b"", b" \t\r", b"null"],
            [
                _error(
                    -32600,
                    "Invalid Request: stdin line 5 is a JSON null, not a JSON-RPC message object",
                )
            ],
            id="blank-lines",
        ),
        pytest.param(  # exactly the limit is served; one byte more is refused, unread
            [
                PADDED + b" " * (MAX_LINE_BYTES - len(PADDED)),
                PADDED + b" " * (MAX_LINE_BYTES + 1 - len(PADDED)),
            ],
            ["tools", _error(-32600, TOO_LONG)],
            id="too-long",
        ),
    ],
)
def test_a_malformed_line_gets_its_json_rpc_error_and_the_server_goes_on(
    tmp_path: Path, lines: list[bytes], expected: list[Any]
) -> None:
    with _host(tmp_path, "--no-chroma") as host:
        host.send(*lines, TOOLS_LIST)
        got = [host.reply() for _ in expected]
        # errors for refused lines are written as the lines are read, in stdin order; a
        # request the server takes is answered when it is done, so before or after them
        tools = [g for g in got if "result" in g]
        assert len(tools) == expected.count("tools")
        assert all(t["id"] == 7 and len(t["result"]["tools"]) == 20 for t in tools)
        assert [g for g in got if "result" not in g] == [w for w in expected if w != "tools"]
        _assert_tools_list(host.reply())
        _closed_cleanly(host)


# ----------------------------------------------------------------------------- stopping
def _assert_closed(tmp_path: Path) -> None:
    """The store was closed (WAL checkpointed away, chromadb sent every memory) and so was
    the recording (its lock released)."""
    store, rec = tmp_path / "store", tmp_path / "rec"
    assert not (store / "memlab.sqlite3-wal").exists()
    assert main(["store", "check", str(store)]) == 0
    Recorder(rec, lock_timeout=0).close()
    assert validate_dataset(rec) == []


STORING = ("--record", "REC", "--chroma-idle", "1000")  # only closing sends chromadb's backlog


def _storing(tmp_path: Path) -> list[str]:
    return [str(tmp_path / "rec") if o == "REC" else o for o in STORING]


def _store_call(request_id: int, **arguments: str) -> bytes:
    """The line of a ``tools/call`` of the ``store`` tool."""
    return json.dumps({"jsonrpc": "2.0", "id": request_id, "method": "tools/call",
                       "params": {"name": "store", "arguments": arguments}}).encode()


@pytest.mark.parametrize(
    ("sig", "status", "last"),
    [(signal.SIGTERM, 143, "memlab: terminated"), (signal.SIGINT, 130, "memlab: interrupted")],
)
def test_a_signal_while_calls_are_in_flight_closes_everything(
    tmp_path: Path, sig: int, status: int, last: str
) -> None:
    """The signal lands while the server is busy (not waiting for input): it used to raise
    inside a task of the SDK's task group (SIGTERM) or leave its tasks writing to closed
    streams (SIGINT), print a traceback and, now and then, hang at exit."""
    with _host(tmp_path, *_storing(tmp_path)) as host:
        host.send(*(_store_call(i + 1, content=f"note {i}") for i in range(40)))
        assert host.reply()["result"]["isError"] is False
        host.proc.send_signal(sig)
        out, _ = host.proc.communicate(timeout=60)
        err = host.stderr()
    assert host.proc.returncode == status, err
    assert err.rstrip().endswith(last) and "Traceback" not in err, err
    for line in out.splitlines():  # every reply written is whole
        assert json.loads(line)["result"]["isError"] is False
    _assert_closed(tmp_path)


def _blocked_writing(pid: int) -> bool:
    """Whether a thread of process ``pid`` waits in the kernel to write into a full pipe."""
    for task in Path(f"/proc/{pid}/task").iterdir():
        try:
            if "pipe_write" in (task / "wchan").read_text():
                return True
        except OSError:  # the thread ended meanwhile
            pass
    return False


@pytest.mark.skipif(not Path("/proc/self/wchan").exists(), reason="Linux's /proc")
def test_sigterm_stops_a_server_whose_host_reads_no_stdout(tmp_path: Path) -> None:
    """A write blocked on a full pipe used to hold the server (and the process) for good."""
    with _host(tmp_path, *_storing(tmp_path)) as host:
        host.send(_store_call(1, content="kept"))
        assert host.reply()["result"]["isError"] is False
        host.send(*[TOOLS_LIST] * 10)  # 160 kB of answers for a 64 kB pipe
        deadline = time.monotonic() + 60
        while not _blocked_writing(host.proc.pid):  # until the pipe is full
            assert host.proc.poll() is None and time.monotonic() < deadline, host.stderr()
            time.sleep(0.05)
        host.proc.send_signal(signal.SIGTERM)
        try:
            status = host.proc.wait(timeout=60)
        except subprocess.TimeoutExpired:
            pytest.fail("the server did not stop")
        err = host.stderr()
    assert status == 143, err
    assert err.rstrip().endswith("memlab: terminated") and "Traceback" not in err, err
    _assert_closed(tmp_path)


def test_a_host_that_closes_stdout_stops_the_server(tmp_path: Path) -> None:
    """The write's EPIPE used to escape the SDK's task group as a traceback (exit 1)."""
    with _host(tmp_path, *_storing(tmp_path)) as host:
        host.send(_store_call(1, content="kept", key="k"))
        assert host.reply()["result"]["isError"] is False
        assert host.proc.stdout is not None
        host.proc.stdout.close()
        host.send(TOOLS_LIST)
        status = host.proc.wait(timeout=60)
        err = host.stderr()
    assert status == 0, err
    assert err == "memlab: warning: the host closed stdout; the server stops\n"
    _assert_closed(tmp_path)


@pytest.mark.parametrize(
    ("closed", "expected_err"),
    [(0, ""), (1, "memlab: warning: the host closed stdout; the server stops\n")],
)
def test_a_standard_descriptor_closed_at_start_stops_the_server_quietly(
    tmp_path: Path, closed: int, expected_err: str
) -> None:
    """A descriptor closed at start-up is no pipe to the host: no stdin is end of input, no
    stdout a host gone. Whatever reused its number (the store's files, a library's event
    loop) is left alone. The SDK's transport raised ``AttributeError`` on ``sys.stdin`` or
    ``sys.stdout`` being ``None``."""
    err = open(tmp_path / "err", "wb")  # noqa: SIM115 - closed below
    args = [
        str(tmp_path / "store"),
        "--human",
        "--embedder",
        "hashing",
        "--no-cache",
        "--no-chroma",
    ]
    proc = subprocess.Popen(
        [sys.executable, *MEMLAB, "serve", "mcp", *args],
        env=_env(),
        stdin=subprocess.PIPE if closed else None,
        stderr=err,
        preexec_fn=lambda: os.close(closed),  # in the child only
    )
    try:
        if closed == 1:
            assert proc.stdin is not None
            proc.stdin.write(json.dumps(INITIALIZE).encode() + b"\n")
            proc.stdin.flush()
        status = proc.wait(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(timeout=30)
        if proc.stdin is not None:
            try:
                proc.stdin.close()
            except BrokenPipeError:
                pass
        err.close()
    assert status == 0
    assert (tmp_path / "err").read_text() == expected_err
    assert main(["store", "check", str(tmp_path / "store")]) == 0


def test_a_host_that_closes_stdin_after_its_requests_gets_every_answer(tmp_path: Path) -> None:
    calls = [
        {
            "jsonrpc": "2.0",
            "id": i,
            "method": "tools/call",
            "params": {
                "name": "store",
                "arguments": {"content": f"deploy step {i} ran", "memory_type": "event"},
            },
        }
        for i in range(1, 6)
    ]
    with _host(tmp_path) as host:
        assert host.proc.stdin is not None and host.proc.stdout is not None
        host.send(*(json.dumps(c).encode() for c in calls), TOOLS_LIST)
        host.proc.stdin.close()  # the host has nothing more to say, and waits for answers
        assert host.proc.wait(timeout=60) == 0, host.stderr()
        replies = [json.loads(line) for line in host.proc.stdout.read().splitlines()]
        assert sorted(r["id"] for r in replies) == [1, 2, 3, 4, 5, 99]
        for r in replies:
            if r["id"] != 99:
                assert r["result"]["isError"] is False, r
        _assert_tools_list(next(r for r in replies if r["id"] == 99))
        assert host.stderr() == ""
