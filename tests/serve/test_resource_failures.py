"""A full or read-only disk under a live server: the call in flight fails with one line saying
why (no traceback, to the client or on stderr), nothing of it is written, and the server goes
on serving."""

from __future__ import annotations

import errno
import json
import logging
from pathlib import Path
from typing import Any

import anyio
import pytest
from starlette.testclient import TestClient

from memlab.embed import HashingEmbedder
from memlab.memory.store import MemoryStore
from memlab.pipeline import load_pipeline
from memlab.serve.http import build_app
from memlab.serve.recording import Recorder
from memlab.serve.service import MemoryService

mcp = pytest.importorskip("mcp")
from mcp import Client  # noqa: E402

TOKEN = "test-token-0123"
AUTH = {"Authorization": f"Bearer {TOKEN}"}
FAILED = "the call failed and nothing of it was written (OSError: No space left on device)"


def _full(lines: Any) -> dict[str, int]:
    raise OSError(errno.ENOSPC, "No space left on device")


def test_a_tool_whose_recording_cannot_be_appended_says_why_in_one_line(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    from memlab.serve.mcp_server import build_server

    store = MemoryStore(embedder=HashingEmbedder(dim=64))
    recorder = Recorder(tmp_path / "rec")
    service = MemoryService(store, load_pipeline("bm25"), recorder=recorder,
                            clock=lambda: 1.77e9)
    server = build_server(service)
    append_all = recorder.append_all

    async def main() -> None:
        with anyio.fail_after(60):
            async with Client(server) as client:
                first = await client.call_tool("store", {"content": "first note"})
                assert not first.is_error
                kept = first.structured_content["id"]
                recorder.append_all = _full  # type: ignore[method-assign]
                calls = [
                    ("store", {"content": "second note"}),
                    ("forget", {"id": kept, "reason": "obsolete"}),
                    ("correct", {"old_id": kept, "new_content": "first note, fixed",
                                 "reason": "typo"}),
                    ("relate", {"from": "Falcon", "relation": "uses", "to": "Postgres"}),
                    ("capture_episode", {"summary": "standup",
                                         "observations": [{"content": "ship on Friday"}]}),
                ]
                for tool, args in calls:
                    res = await client.call_tool(tool, args)
                    assert res.is_error
                    assert [c.text for c in res.content] == [
                        f"Error executing tool {tool}: {FAILED}"
                    ]
                recorder.append_all = append_all  # type: ignore[method-assign]
                third = await client.call_tool("store", {"content": "third note"})
                assert not third.is_error

    with caplog.at_level(logging.WARNING, logger="memlab.serve"):
        anyio.run(main)
    assert [store.get(i).text for i in store.ids] == ["first note", "third note"]
    assert store.get(store.ids[0]).active is True
    assert store.graph.find_all("Falcon") == []  # the relation was not written
    assert store.graph.find_all("Postgres") == []
    failures = [r for r in caplog.records if "nothing of it was written" in r.getMessage()]
    assert [r.getMessage() for r in failures] == [
        f"{name}: {FAILED}"
        for name in ("store_memory", "forget", "correct", "relate", "capture_episode")
    ]
    assert all(r.exc_info is None for r in failures)
    lines = (tmp_path / "rec" / "memories.jsonl").read_text().splitlines()
    assert [json.loads(line)["text"] for line in lines] == ["first note", "third note"]
    service.close()


def test_an_ingest_group_that_cannot_be_recorded_logs_one_line(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    store = MemoryStore(embedder=HashingEmbedder(dim=64))
    recorder = Recorder(tmp_path / "rec")
    recorder.append_all = _full  # type: ignore[method-assign]
    service = MemoryService(store, load_pipeline("bm25"), recorder=recorder, clock=lambda: 1.77e9)
    client = TestClient(build_app(service, token=TOKEN))
    with caplog.at_level(logging.WARNING, logger="memlab.serve"):
        res = client.post("/memories", json=[{"content": "a"}], headers=AUTH)
    assert res.status_code == 500
    assert res.json() == {"error": "the batch was not stored: the group commit failed "
                                   "(OSError); nothing of it was written"}
    records = [r for r in caplog.records if r.name == "memlab.serve"]
    assert [(r.levelname, r.getMessage(), r.exc_info) for r in records] == [
        ("WARNING", "bulk ingest: a group commit failed (OSError: [Errno 28] No space left on "
                    "device); nothing of it was written", None)
    ]
    assert len(store) == 0
