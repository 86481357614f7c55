"""HTTP bulk ingest: status codes, limits, the token, and the write path."""

from __future__ import annotations

import json
import signal
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import httpx
import pytest
from starlette.testclient import TestClient

from memlab.datasets.validate import validate_dataset
from memlab.embed import HashingEmbedder
from memlab.memory.scopes import Principal
from memlab.memory.store import MemoryStore
from memlab.pipeline import load_pipeline
from memlab.serve.http import build_app
from memlab.serve.recording import Recorder
from memlab.serve.service import MemoryService

TOKEN = "test-token-0123"
AUTH = {"Authorization": f"Bearer {TOKEN}"}
MEMLAB = ("-c", "import sys; from memlab.cli import main; sys.exit(main())")
if str(Path(__file__).parent) not in sys.path:  # --import-mode=importlib: helpers by path
    sys.path.insert(0, str(Path(__file__).parent))
from _server_env import server_env as _env  # noqa: E402


def _client(tmp_path: Path, principal: Principal | None = None, **limits: int) -> TestClient:
    store = MemoryStore(embedder=HashingEmbedder(dim=64))
    service = MemoryService(store, load_pipeline("bm25"), principal=principal,
                            recorder=Recorder(tmp_path / "rec"), clock=lambda: 1.77e9)
    return TestClient(build_app(service, token=TOKEN, **limits))


def test_status_codes(tmp_path: Path) -> None:
    client = _client(tmp_path, max_batch=3, max_request_bytes=2000)
    assert client.get("/health", headers=AUTH).json() == {
        "status": "ok", "memories": 0, "chroma_backlog": 0}
    ok = client.post("/memories", json=[{"content": "a"}, {"content": "b"}], headers=AUTH)
    assert ok.status_code == 200
    assert [r["action"] for r in ok.json()["results"]] == ["created", "created"]
    mixed = client.post("/memories", json={"memories": [{"content": "c"}, {"content": ""}]},
                        headers=AUTH)
    assert mixed.status_code == 207
    assert mixed.json()["stored"] == 1 and mixed.json()["failed"] == 1
    assert mixed.json()["results"][1] == {
        "index": 1, "ok": False, "error": "field 'content' must not be empty"
    }
    allbad = client.post("/memories", json=[{"content": 1}], headers=AUTH)
    assert allbad.status_code == 422 and allbad.json()["error"] == "every item failed"
    assert client.post("/memories", json=[{"content": "a"}]).status_code == 401
    wrong = client.post("/memories", json=[{"content": "a"}],
                        headers={"Authorization": "Bearer nope"})
    assert wrong.status_code == 401 and wrong.json() == {"error": "missing or wrong Bearer token"}
    assert client.post("/memories", json=[{"content": "x"}] * 4, headers=AUTH).status_code == 413
    big = client.post("/memories", json=[{"content": "x" * 3000}], headers=AUTH)
    assert big.status_code == 413
    bad = client.post("/memories", content=b"{not json", headers=AUTH)
    assert bad.status_code == 422 and bad.json()["error"].startswith("body is not JSON")
    assert client.post("/memories", json=[], headers=AUTH).status_code == 422
    assert client.post("/memories", json={"x": 1}, headers=AUTH).status_code == 422
    assert client.get("/health", headers=AUTH).json() == {
        "status": "ok", "memories": 3, "chroma_backlog": 0}
    assert client.get("/health").json() == {"status": "ok"}  # no token: no counts
    assert validate_dataset(tmp_path / "rec") == []


@pytest.mark.parametrize(
    ("body", "why"),
    [
        (b"[" * 100_000 + b"]" * 100_000, "body is not JSON: nested too deeply"),
        (b'{"memories":' + b"[" * 5000 + b"]" * 5000 + b"}", "body is not JSON: nested too deeply"),
        (b"[" + b"9" * 5000 + b"]", "body is not JSON: Exceeds the limit (4300 digits)"),
        (b'["\xff"]', "body is not JSON: 'utf-8' codec can't decode byte 0xff"),
    ],
)
def test_any_unparsable_body_is_422_never_500(tmp_path: Path, body: bytes, why: str) -> None:
    client = _client(tmp_path)  # raises the server's exception instead of a 500, if any
    res = client.post("/memories", content=body, headers=AUTH)
    assert res.status_code == 422
    assert res.json()["error"].startswith(why)
    assert client.get("/health", headers=AUTH).json()["memories"] == 0


def test_a_parser_failure_of_any_type_is_422(tmp_path: Path, monkeypatch) -> None:
    import memlab.serve.http as http

    def broken(body: bytes) -> None:
        raise MemoryError("out of memory while parsing")

    monkeypatch.setattr(http, "json", SimpleNamespace(loads=broken))
    res = _client(tmp_path).post("/memories", content=b"[]", headers=AUTH)
    assert res.status_code == 422
    assert res.json() == {"error": "body is not JSON: MemoryError: out of memory while parsing"}


def test_the_token_decides_the_principal(tmp_path: Path) -> None:
    client = _client(tmp_path, principal=Principal.of("atlas"))
    res = client.post("/memories", json=[{"content": "mine", "agent": "atlas"},
                                         {"content": "theirs", "agent": "hera"},
                                         {"content": "team", "scope": "team"}], headers=AUTH)
    assert res.status_code == 207
    out = res.json()["results"]
    assert out[0]["scope"] == "agent:atlas"
    assert "not the token's agent 'atlas'" in out[1]["error"]
    assert "promote" in out[2]["error"]


def test_an_agents_health_counts_only_what_it_reads(tmp_path: Path) -> None:
    store = MemoryStore(embedder=HashingEmbedder(dim=64))
    for i in range(5):  # hera's private memories, in the same store
        store.store(f"hera note {i}", "event", scope="agent:hera", now=1.0 + i,
                    source_agent="hera")
    service = MemoryService(store, load_pipeline("bm25"), principal=Principal.of("atlas"),
                            recorder=Recorder(tmp_path / "rec"), clock=lambda: 1.77e9)
    client = TestClient(build_app(service, token=TOKEN))
    client.post("/memories", json=[{"content": "mine"}], headers=AUTH)
    assert client.get("/health", headers=AUTH).json() == {"status": "ok", "memories": 1}
    assert client.get("/health").json() == {"status": "ok"}


def test_same_write_path_as_store(tmp_path: Path) -> None:
    client = _client(tmp_path)
    res = client.post("/memories", json=[
        {"content": "Acme runs on Next.js", "key": "stack"},
        {"content": "Acme runs on Remix", "key": "stack"},
        {"content": "Acme runs on Remix", "key": "stack"},
        {"content": "deploy with password=hunter2 please", "memory_type": "event"},
    ], headers=AUTH).json()["results"]
    assert res[1]["superseded"] == res[0]["id"]
    assert res[2]["action"] == "deduplicated" and res[2]["id"] == res[1]["id"]
    assert res[3]["redactions"] == 1
    text = (tmp_path / "rec" / "memories.jsonl").read_text()
    assert "hunter2" not in text and "password=[REDACTED:password]" in text


def test_build_app_refuses_an_empty_token(tmp_path: Path) -> None:
    store = MemoryStore(embedder=HashingEmbedder(dim=64))
    service = MemoryService(store, load_pipeline("bm25"))
    with pytest.raises(ValueError, match="refuses to start"):
        build_app(service, token=" ")


def test_cli_refuses_to_start_without_a_token(tmp_path: Path) -> None:
    proc = subprocess.run(
        [sys.executable, *MEMLAB, "serve", "http", str(tmp_path / "s"), "--human",
         "--embedder", "hashing"],
        env=_env(), capture_output=True, text=True, timeout=120,
    )
    assert proc.returncode == 2
    assert proc.stderr.strip().endswith(
        "the server refuses to start without one (--token-env NAME or --token-file PATH)"
    )


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def test_sigkill_mid_stream_keeps_every_acknowledged_call(tmp_path: Path) -> None:
    port = _free_port()
    token_file = tmp_path / "token"
    token_file.write_text(TOKEN + "\n")
    rec = tmp_path / "rec"
    proc = subprocess.Popen(
        [sys.executable, *MEMLAB, "serve", "http", str(tmp_path / "store"),
         "--human", "--embedder", "hashing", "--no-cache", "--no-chroma", "--record", str(rec),
         "--token-file", str(token_file), "--port", str(port)],
        env=_env(), stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )
    acked: list[str] = []
    stop = threading.Event()
    url = f"http://127.0.0.1:{port}"

    def writer(w: int) -> None:
        with httpx.Client(base_url=url, headers=AUTH, timeout=30) as http:
            for b in range(10_000):
                if stop.is_set():
                    return
                try:
                    r = http.post("/memories", json=[{"content": f"note {w}-{b}-{i}",
                                                      "memory_type": "event"} for i in range(20)])
                except httpx.HTTPError:
                    return
                acked.extend(x["id"] for x in r.json()["results"] if x["ok"])

    try:
        deadline = time.monotonic() + 60
        while True:
            assert proc.poll() is None, "server exited"
            try:
                if httpx.get(f"{url}/health", timeout=1).status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            assert time.monotonic() < deadline, "server did not start"
            time.sleep(0.2)
        # concurrent writers: their calls are group-committed
        threads = [threading.Thread(target=writer, args=(w,)) for w in range(3)]
        for thread in threads:
            thread.start()
        while len(acked) < 200 and all(t.is_alive() for t in threads):
            time.sleep(0.05)
        proc.send_signal(signal.SIGKILL)
        proc.wait(timeout=30)
        stop.set()
        for thread in threads:
            thread.join(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(timeout=10)
    assert len(acked) >= 200
    lines = (rec / "memories.jsonl").read_bytes().split(b"\n")
    parsed = [json.loads(x) for x in lines[:-1]]  # every complete line parses
    assert set(acked) <= {x["id"] for x in parsed}
    Recorder(rec).close()  # reopening cuts a torn tail
    assert validate_dataset(rec) == []
    with MemoryStore(tmp_path / "store", chroma=False) as store:
        assert set(acked) <= set(store.ids)


def test_deep_metadata_is_an_item_error_not_a_500(tmp_path: Path) -> None:
    client = _client(tmp_path)  # the TestClient raises what the server raises, if anything
    body = ('[{"content":"nested","metadata":' + '{"a":' * 600 + "1" + "}" * 600
            + '},{"content":"valid"}]')
    res = client.post("/memories", content=body.encode(), headers=AUTH)
    assert res.status_code == 207
    assert res.json()["results"][0] == {
        "index": 0, "ok": False, "error": "field 'metadata' nested deeper than 32 levels"}
    assert res.json()["results"][1]["ok"] is True
    assert client.get("/health", headers=AUTH).json()["memories"] == 1


def test_a_failed_group_commit_is_a_json_500_without_a_traceback(tmp_path: Path) -> None:
    store = MemoryStore(embedder=HashingEmbedder(dim=64))
    recorder = Recorder(tmp_path / "rec")

    def full(lines: Any) -> dict[str, int]:
        raise OSError(28, "No space left on device")

    recorder.append_all = full  # type: ignore[method-assign]
    service = MemoryService(store, load_pipeline("bm25"), recorder=recorder, clock=lambda: 1.77e9)
    client = TestClient(build_app(service, token=TOKEN))
    res = client.post("/memories", json=[{"content": "a"}], headers=AUTH)
    assert res.status_code == 500
    assert res.json() == {"error": "the batch was not stored: the group commit failed "
                                   "(OSError); nothing of it was written"}
    assert client.get("/health", headers=AUTH).json()["memories"] == 0


def test_an_item_whose_names_are_not_text_fails_alone(tmp_path: Path) -> None:
    client = _client(tmp_path)
    res = client.post("/memories", json=[
        {"content": "\u0000"},
        {"content": "ok", "scope": "project:ghp_1111A1b2C3d4E5f6G7h8I9j0K1l2M3n4O5p6"},
        {"content": "ok", "memory_type": "status", "subject": "ci", "status_value": " "},
        {"content": "ok", "valid_from": "0999-12-31T23:59:59Z"},
    ], headers=AUTH)
    assert res.status_code == 207
    errors = [r.get("error") for r in res.json()["results"]]
    assert errors[0].startswith("field 'content' holds no visible text")
    assert errors[1].startswith("field 'scope' holds what looks like a credential")
    assert errors[2] == "field 'status_value' must not be empty"
    assert errors[3] is None
    lines = (tmp_path / "rec" / "memories.jsonl").read_text().splitlines()
    assert json.loads(lines[0])["valid_from"] == "0999-12-31T23:59:59.000Z"
    assert validate_dataset(tmp_path / "rec") == []
