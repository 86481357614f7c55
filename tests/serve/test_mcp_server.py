"""The MCP server driven by the SDK's own client, over stdio and over Streamable HTTP.

Each transport starts ``memlab serve mcp`` as a subprocess (as an MCP host would), calls every
tool, sends a bad argument to each, and checks that another agent's private memory stays out
of reach. Every subprocess has a timeout and is stopped by the test.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import anyio
import pytest

from memlab.datasets.validate import validate_dataset
from memlab.embed import HashingEmbedder
from memlab.memory.store import MemoryStore

mcp = pytest.importorskip("mcp")
from mcp import Client  # noqa: E402
from mcp.client.stdio import StdioServerParameters  # noqa: E402

MEMLAB = ("-c", "import sys; from memlab.cli import main; sys.exit(main())")
if str(Path(__file__).parent) not in sys.path:  # --import-mode=importlib: helpers by path
    sys.path.insert(0, str(Path(__file__).parent))
from _server_env import server_env as _env  # noqa: E402

TOOLS = {
    "store", "store_decision", "relate", "store_entity", "recall", "feedback", "get_entity",
    "trace", "get_decisions", "list_memories", "forget", "supersede", "correct", "promote",
    "consolidate", "capture_episode", "store_memory", "search_memory", "delete_memory",
    "correct_memory",
}
BAD: list[tuple[str, dict[str, Any], str]] = [
    ("store", {"content": ""}, "content"),
    ("store_decision", {"decision": "x", "alternatives": "MySQL"}, "alternatives"),
    ("relate", {"from": "a", "relation": "likes", "to": "b"}, "relation"),
    ("store_entity", {"name": "x", "relations": [{"to": "y"}]}, "relations[0]"),
    ("recall", {"query": "x", "limit": 0}, "limit"),
    ("feedback", {"recall_id": "r-none", "useful_ids": ["x"]}, "unknown recall"),
    ("get_entity", {"name": "x", "depth": 9}, "depth"),
    ("trace", {"from": "a", "to": "b", "max_depth": 0}, "max_depth"),
    ("get_decisions", {"status": "reverted"}, "status"),
    ("list_memories", {"limit": 1000}, "limit"),
    ("forget", {"id": "nope", "reason": "x"}, "unknown memory id"),
    ("supersede", {"old_id": "nope", "new_content": "y", "reason": "x"}, "unknown memory id"),
    ("correct", {"old_id": "x", "new_content": "", "reason": "x"}, "new_content"),
    ("promote", {"id": "nope"}, "unknown memory id"),
    ("consolidate", {"scope": "agent:hera"}, "may not read"),
    ("capture_episode", {"summary": "x", "observations": []}, "observations"),
    ("store_memory", {"content": "x", "memory_type": "note"}, "memory_type"),
    ("search_memory", {"query": "x", "limit": 50}, "limit"),
    ("delete_memory", {"id": "nope"}, "unknown memory id"),
    ("correct_memory", {"id": "x", "corrected_content": "y"}, "correction_reason"),
    ("store", {"content": "x", "colour": "red"}, "colour"),
]


def _args(store: Path, rec: Path) -> list[str]:
    return [
        *MEMLAB, "serve", "mcp", str(store), "--pipeline", "rrf",
        "--agent", "atlas", "--project", "apollo", "--client", "acme",
        "--embedder", "hashing", "--no-cache", "--no-chroma",
        "--record", str(rec), "--clock", "2026-03-01T10:00:00Z",
    ]


def _seed_private(store_dir: Path) -> str:
    """Another agent's private memory, written before the server starts."""
    with MemoryStore(store_dir, embedder=HashingEmbedder(), chroma=False) as store:
        return store.store(
            "Hera keeps the payroll password rotation schedule", "fact",
            client_id="acme", scope="agent:hera", now="2026-02-01T00:00:00Z",
        ).id


def _data(result: Any) -> dict[str, Any]:
    assert not result.is_error, result.content[0].text
    return json.loads(result.content[0].text)


async def _scenario(client: Client, hidden: str) -> None:
    tools = {t.name for t in (await client.list_tools()).tools}
    assert tools == TOOLS
    schema = next(t for t in (await client.list_tools()).tools if t.name == "store").input_schema
    assert schema["additionalProperties"] is False

    call = client.call_tool
    mine = _data(await call("store", {"content": "Acme payroll runs on Gusto", "key": "payroll",
                                      "tags": ["hr"]}))
    assert mine["scope"] == "agent:atlas" and mine["action"] == "created"
    proj = _data(await call("store", {"content": "Apollo ships on Fridays", "memory_type": "rule",
                                      "scope": "project:apollo"}))
    dec = _data(await call("store_decision", {"decision": "Use Postgres for payroll",
                                              "rationale": "mature",
                                              "alternatives": ["MySQL"]}))
    _data(await call("relate", {"from": "Acme", "relation": "uses", "to": "Gusto"}))
    _data(await call("store_entity", {"name": "Gusto", "type": "tool",
                                      "properties": {"kind": "payroll"}}))
    got = _data(await call("recall", {"query": "payroll", "limit": 10}))
    assert hidden not in got["ids"] and mine["id"] in got["ids"]
    assert _data(await call("recall", {"query": "payroll", "format": "bullets"}))["text"]
    fb = _data(await call("feedback", {"recall_id": got["recall_id"],
                                       "useful_ids": [mine["id"]], "note": "right"}))
    assert fb == {"recall_id": got["recall_id"], "judged": 1, "recorded": True}
    ent = _data(await call("get_entity", {"name": "Acme", "depth": 1}))
    assert any(r["relation"] == "uses" for r in ent["relations"])
    assert _data(await call("trace", {"from": "Acme", "to": "Gusto"}))["found"] is True
    decs = _data(await call("get_decisions", {"topic": "postgres"}))["decisions"]
    assert [d["id"] for d in decs] == [dec["id"]]
    listed = _data(await call("list_memories", {"limit": 100}))
    assert hidden not in [m["id"] for m in listed["memories"]]
    fixed = _data(await call("supersede", {"old_id": proj["id"], "new_content":
                                           "Apollo ships on Thursdays", "reason": "moved"}))
    again = _data(await call("correct", {"old_id": fixed["id"], "new_content":
                                         "Apollo ships on Wednesdays", "reason": "moved again"}))
    assert _data(await call("promote", {"id": mine["id"]}))["scope"] == "team"
    ep = _data(await call("capture_episode", {"summary": "Debugged payroll export",
                                              "observations": [{"content": "Export needs UTF-8"}]}))
    assert len(ep["observation_ids"]) == 1
    assert _data(await call("consolidate", {}))["processed"] >= 1
    s4 = _data(await call("store_memory", {"content": "Never commit .env files",
                                           "memory_type": "rule", "source": "agent/claude"}))
    assert _data(await call("search_memory", {"query": "commit env files"}))["ids"][0] == s4["id"]
    _data(await call("correct_memory", {"id": s4["id"], "corrected_content":
                                        "Never commit .env or .pem files",
                                        "correction_reason": "broader"}))
    _data(await call("forget", {"id": again["id"], "reason": "obsolete"}))
    _data(await call("delete_memory", {"id": ep["summary_id"]}))
    res = await client.read_resource("memory://team/Acme")
    assert json.loads(res.contents[0].text)["entity"]["name"].lower() == "acme"

    for tool, args, needle in BAD:
        result = await call(tool, args)
        assert result.is_error, tool
        assert needle in result.content[0].text, (tool, result.content[0].text)
    # the namespace violation: another agent's private memory is unknown to this agent
    for tool, args in (("forget", {"id": hidden, "reason": "x"}), ("promote", {"id": hidden}),
                       ("supersede", {"old_id": hidden, "new_content": "y", "reason": "x"})):
        result = await call(tool, args)
        assert result.is_error and "unknown memory id" in result.content[0].text
    result = await call("recall", {"query": "payroll", "scope": "agent:hera"})
    assert result.is_error and "may not read 'agent:hera'" in result.content[0].text


def test_stdio(tmp_path: Path) -> None:
    hidden = _seed_private(tmp_path / "store")
    params = StdioServerParameters(
        command=sys.executable, args=_args(tmp_path / "store", tmp_path / "rec"), env=_env()
    )

    async def main() -> None:
        with anyio.fail_after(120):
            async with Client(params) as client:
                await _scenario(client, hidden)

    anyio.run(main)
    assert validate_dataset(tmp_path / "rec") == []


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def test_streamable_http(tmp_path: Path) -> None:
    hidden = _seed_private(tmp_path / "store")
    port = _free_port()
    cmd = [sys.executable, *_args(tmp_path / "store", tmp_path / "rec"),
           "--transport", "http", "--port", str(port)]
    proc = subprocess.Popen(cmd, env=_env(), stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 60
        while True:
            assert proc.poll() is None, "server exited"
            try:
                socket.create_connection(("127.0.0.1", port), timeout=1).close()
                break
            except OSError:
                assert time.monotonic() < deadline, "server did not listen"
                time.sleep(0.2)

        async def main() -> None:
            with anyio.fail_after(120):
                async with Client(f"http://127.0.0.1:{port}/mcp") as client:
                    await _scenario(client, hidden)

        anyio.run(main)
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(timeout=10)
    assert validate_dataset(tmp_path / "rec") == []


@pytest.mark.parametrize(
    ("tool", "args", "message"),
    [
        ("recall", {"query": "x", "limit": True},
         "argument 'limit' must be a valid integer, got True (bool)"),
        ("recall", {"query": "x", "limit": "5"},
         "argument 'limit' must be a valid integer, got '5' (str)"),
        ("recall", {"query": "x", "include_superseded": 1},
         "argument 'include_superseded' must be a valid boolean, got 1 (int)"),
        ("list_memories", {"include_inactive": "yes"},
         "argument 'include_inactive' must be a valid boolean, got 'yes' (str)"),
        ("list_memories", {"offset": True},
         "argument 'offset' must be a valid integer, got True (bool)"),
        ("store", {"content": "coerced", "confidence": True},
         "argument 'confidence' must be a valid number, got True (bool)"),
        ("get_entity", {"name": "x", "depth": False},
         "argument 'depth' must be a valid integer, got False (bool)"),
        ("store", {"content": 7}, "argument 'content' must be a valid string, got 7 (int)"),
        ("store", {"content": "x" * 50, "bogus": 1}, "unknown argument 'bogus'"),
        ("store", {}, "argument 'content' is required"),
        ("forget", {"memory": "m1", "reason": "r"}, "unknown argument 'memory'"),
        ("store", {"content": ["a" * 60]},
         "argument 'content' must be a valid string, got ['" + "a" * 35 + "... (list)"),
    ],
)
def test_arguments_of_another_json_type_are_refused(
    tool: str, args: dict[str, Any], message: str
) -> None:
    """In one line naming each argument (no pydantic model name, no documentation link)."""
    from memlab.pipeline import load_pipeline
    from memlab.serve.mcp_server import build_server
    from memlab.serve.service import MemoryService

    store = MemoryStore(embedder=HashingEmbedder(dim=64))
    server = build_server(MemoryService(store, load_pipeline("bm25"), clock=lambda: 1.77e9))

    async def main() -> None:
        with anyio.fail_after(60):
            async with Client(server) as client:
                result = await client.call_tool(tool, args)
                assert result.is_error
                assert result.content[0].text == f"Error executing tool {tool}: {message}"
                # the right types pass (an integer is a number too)
                ok = await client.call_tool("store", {"content": "typed", "confidence": 1})
                assert not ok.is_error, ok.content[0].text
                ok = await client.call_tool("recall", {"query": "typed", "limit": 5,
                                                       "include_superseded": True})
                assert not ok.is_error, ok.content[0].text

    anyio.run(main)
    assert [store.get(i).text for i in store.ids] == ["typed"]


# ----------------------------------------------------------------------------- stdio lines
@pytest.mark.parametrize(
    ("raw", "expected"),
    [
        # messages pass unchanged (a request, a notification, a response, an error response)
        (b'{"jsonrpc":"2.0","id":1,"method":"tools/list"}', "same"),
        (b'{"jsonrpc":"2.0","id":"a-1","method":"tools/list","params":null} \r', "same"),
        (b'{"jsonrpc":"2.0","method":"notifications/initialized"}', "same"),
        (b'{"jsonrpc":"2.0","id":3,"result":{}}', "same"),
        (b'{"jsonrpc":"2.0","id":3,"error":{"code":-1,"message":"no"}}', "same"),
        (b" \t\r", None),  # a blank line: skipped
        (
            b"{",
            (
                -32700,
                "Parse error: stdin line 4 is not JSON: EOF while parsing an object at column 1",
                None,
            ),
        ),
        (
            b'{"jsonrpc":"2.0","id":1,"method":"x","params":{"a":Infinity}}',
            (-32700, "Parse error: stdin line 4 is not JSON: expected value at column 52", None),
        ),
        (
            b'{"jsonrpc":"2.0","id":1,"method":"x","params":{"a":"\\ud800"}}',
            (
                -32700,
                "Parse error: stdin line 4 is not JSON: unexpected end of hex escape at column 59",
                None,
            ),
        ),
        (b'"\xc3"', (-32700, "Parse error: stdin line 4 is not UTF-8 (byte 2)", None)),
        (
            b"[]",
            (
                -32600,
                "Invalid Request: stdin line 4 is a JSON array (a batch); MCP takes "
                "one message object per line",
                None,
            ),
        ),
        (
            b"true",
            (
                -32600,
                "Invalid Request: stdin line 4 is a JSON boolean, not a JSON-RPC message object",
                None,
            ),
        ),
        (
            b'"tools/list"',
            (
                -32600,
                "Invalid Request: stdin line 4 is a JSON string, not a JSON-RPC message object",
                None,
            ),
        ),
        (
            b'{"jsonrpc":"1.0","id":5,"method":"tools/list"}',
            (-32600, 'Invalid Request: stdin line 4: field "jsonrpc" must be "2.0"', 5),
        ),
        # the SDK took these three for notifications, which are never answered
        (
            b'{"jsonrpc":"2.0","id":1.0,"method":"tools/list"}',
            (
                -32600,
                'Invalid Request: stdin line 4: field "id" must be a string or an integer',
                None,
            ),
        ),
        (
            b'{"jsonrpc":"2.0","id":true,"method":"tools/list"}',
            (
                -32600,
                'Invalid Request: stdin line 4: field "id" must be a string or an integer',
                None,
            ),
        ),
        (
            b'{"jsonrpc":"2.0","id":{},"method":"tools/list"}',
            (
                -32600,
                'Invalid Request: stdin line 4: field "id" must be a string or an integer',
                None,
            ),
        ),
        (
            b'{"jsonrpc":"2.0","id":"q","method":["tools/list"]}',
            (-32600, 'Invalid Request: stdin line 4: field "method" must be a string', "q"),
        ),
        (
            b'{"jsonrpc":"2.0","method":"x","params":"bar"}',
            (-32600, 'Invalid Request: stdin line 4: field "params" must be an object', None),
        ),
        (
            b'{"jsonrpc":"2.0","id":9}',
            (
                -32600,
                'Invalid Request: stdin line 4: no "method" (a request or a notification), '
                'nor an "id" with a "result" or an "error" (a response)',
                None,
            ),
        ),
        (
            b'{"jsonrpc":"2.0","id":9,"result":{},"error":{"code":1,"message":"x"}}',
            (
                -32600,
                'Invalid Request: stdin line 4: no "method" (a request or a notification), '
                'nor an "id" with a "result" or an "error" (a response)',
                None,
            ),
        ),
    ],
)
def test_screen_answers_what_is_not_a_message(raw: bytes, expected: Any) -> None:
    from memlab.serve.mcp_server import _Reply, _screen

    got = _screen(raw, 4)
    if expected == "same":
        assert got == raw.decode()
    elif expected is None:
        assert got is None
    else:
        code, message, request_id = expected
        assert isinstance(got, _Reply)
        assert json.loads(got.text) == {
            "jsonrpc": "2.0",
            "id": request_id,
            "error": {"code": code, "message": message},
        }
        assert "\n" not in got.text


def test_lines_are_split_numbered_and_bounded() -> None:
    """Lines across reads, a line over the limit dropped as it is read (never held whole), a
    line exactly at the limit kept, a last line without its newline."""
    import threading

    from memlab.serve.mcp_server import _lines

    limit = 100_000  # more than one read of 65,536 bytes
    data = (
        b"one\n"
        + b"x" * (limit + 1)
        + b"\n\n"
        + b"y" * limit
        + b"\n"
        + b"z" * (3 * limit)
        + b"\ntail"
    )
    read_fd, write_fd = os.pipe()

    def feed() -> None:
        with os.fdopen(write_fd, "wb") as pipe:
            pipe.write(data)

    writer = threading.Thread(target=feed)
    writer.start()
    try:
        got = list(_lines(read_fd, limit))
    finally:
        writer.join(timeout=30)
        os.close(read_fd)
    assert got == [(1, b"one"), (2, None), (3, b""), (4, b"y" * limit), (5, None), (6, b"tail")]
