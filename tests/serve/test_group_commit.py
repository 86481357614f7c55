"""Group commit of concurrent ``store_many`` calls, and the idle chromadb flush of the service."""

from __future__ import annotations

import json
import re
import threading
import time
from pathlib import Path
from typing import Any

import pytest

from memlab.embed import HashingEmbedder
from memlab.memory.store import MemoryStore
from memlab.pipeline import load_pipeline
from memlab.serve.recording import Recorder
from memlab.serve.service import MemoryService, ServiceError


class CountingRecorder(Recorder):
    """A recorder that counts the write lines of its durable appends."""

    def __init__(self, path: Path, *, fail: bool = False) -> None:
        super().__init__(path)
        self.appends: list[int] = []
        self.fail = fail

    def append_all(self, lines: Any) -> dict[str, int]:
        if self.fail:
            raise OSError(28, "No space left on device")
        self.appends.append(len(lines.get("memories.jsonl", [])))
        return super().append_all(lines)


def _items(call: int, n: int) -> list[dict[str, Any]]:
    return [{"content": f"call {call} note {i}", "memory_type": "event"} for i in range(n)]


def _queued_calls(
    svc: MemoryService, calls: list[list[dict[str, Any]]]
) -> tuple[list[Any], list[threading.Thread]]:
    """Start one thread per call while the test holds the service lock, so that every call is
    queued before any is written; return the per-call outcomes and the threads."""
    outcomes: list[Any] = [None] * len(calls)

    def run(i: int) -> None:
        try:
            outcomes[i] = svc.store_many(calls[i])
        except BaseException as exc:  # noqa: BLE001 - the test inspects it
            outcomes[i] = exc

    threads = [threading.Thread(target=run, args=(i,)) for i in range(len(calls))]
    with svc.lock:
        for t in threads:
            t.start()
        deadline = time.monotonic() + 30
        while len(svc._queue) < len(calls):
            assert time.monotonic() < deadline, "calls did not queue"
            time.sleep(0.005)
    for t in threads:
        t.join(timeout=60)
    return outcomes, threads


def test_waiting_calls_share_one_transaction_and_one_durable_append(tmp_path: Path) -> None:
    store = MemoryStore(tmp_path / "store", embedder=HashingEmbedder(dim=64), chroma=False)
    rec = CountingRecorder(tmp_path / "rec")
    svc = MemoryService(store, load_pipeline("bm25"), recorder=rec, clock=lambda: 1.77e9)
    commits = []
    real_exec = store._exec

    def counting_exec(sql: str, params: Any = ()) -> Any:
        if sql == "COMMIT":
            commits.append(sql)
        return real_exec(sql, params)

    store._exec = counting_exec  # type: ignore[method-assign]
    calls = [_items(c, 3) for c in range(4)]
    calls[2][1] = {"content": ""}  # one bad item fails alone
    outcomes, _ = _queued_calls(svc, calls)
    assert len(commits) == 1
    assert rec.appends == [4 * 3 - 1]
    for c, out in enumerate(outcomes):
        assert [r["index"] for r in out] == [0, 1, 2]
        assert [r["ok"] for r in out] == ([True, False, True] if c == 2 else [True] * 3)
    assert outcomes[2][1]["error"] == "field 'content' must not be empty"
    acked = {r["id"] for out in outcomes for r in out if r["ok"]}
    svc.close()
    # acknowledged = committed and recorded: both survive a reopen
    with MemoryStore(tmp_path / "store", chroma=False) as again:
        assert set(again.ids) == acked
    lines = (tmp_path / "rec" / "memories.jsonl").read_text().splitlines()
    assert {json.loads(x)["id"] for x in lines} == acked


def test_a_group_takes_at_most_group_items_and_never_splits_a_call(tmp_path: Path) -> None:
    store = MemoryStore(embedder=HashingEmbedder(dim=64))
    rec = CountingRecorder(tmp_path / "rec")
    svc = MemoryService(store, load_pipeline("bm25"), recorder=rec, group_items=5,
                        clock=lambda: 1.77e9)
    outcomes, _ = _queued_calls(svc, [_items(0, 3), _items(1, 3), _items(2, 7)])
    assert [len(out) for out in outcomes] == [3, 3, 7]
    # 3 + 3 > 5: each call is its own group; a call larger than the bound is never split
    assert sorted(rec.appends) == [3, 3, 7]
    assert len(store) == 13


def test_a_failed_append_fails_every_call_of_the_group(tmp_path: Path) -> None:
    store = MemoryStore(embedder=HashingEmbedder(dim=64))
    rec = CountingRecorder(tmp_path / "rec", fail=True)
    svc = MemoryService(store, load_pipeline("bm25"), recorder=rec, clock=lambda: 1.77e9)
    outcomes, _ = _queued_calls(svc, [_items(0, 2), _items(1, 2)])
    assert [type(out) for out in outcomes] == [OSError, OSError]
    assert rec.appends == []
    # the append comes before the commit: the group's writes were rolled back
    assert len(store) == 0
    assert (tmp_path / "rec" / "memories.jsonl").read_bytes() == b""


def test_group_items_and_chroma_idle_are_checked() -> None:
    store = MemoryStore(embedder=HashingEmbedder(dim=64))
    with pytest.raises(ServiceError, match="field 'group_items'"):
        MemoryService(store, load_pipeline("bm25"), group_items=0)
    with pytest.raises(ServiceError, match="field 'chroma_idle'"):
        MemoryService(store, load_pipeline("bm25"), chroma_idle=0)
    with pytest.raises(ServiceError, match="field 'chroma_max_backlog'"):
        MemoryService(store, load_pipeline("bm25"), chroma_max_backlog=0)


def test_the_idle_service_sends_pending_vectors_to_chromadb(tmp_path: Path) -> None:
    store = MemoryStore(tmp_path / "store", embedder=HashingEmbedder(dim=64),
                        chroma_sync="deferred")
    svc = MemoryService(store, load_pipeline("bm25"), chroma_idle=0.05, clock=lambda: 1.77e9)
    out = svc.store_many(_items(0, 4))
    ids = sorted(r["id"] for r in out)
    deadline = time.monotonic() + 60
    while svc.health()["chroma_backlog"]:
        assert time.monotonic() < deadline, "chromadb never caught up"
        time.sleep(0.02)
    with svc.lock:
        store.flush_chroma(wait=True)  # collect the finished upsert
        assert sorted(store._chroma.ids()) == ids
    svc.close()
    svc.close()  # idempotent


def test_a_busy_service_sends_chromadb_a_full_backlog(tmp_path: Path) -> None:
    store = MemoryStore(tmp_path / "store", embedder=HashingEmbedder(dim=64),
                        chroma_sync="deferred")
    svc = MemoryService(store, load_pipeline("bm25"), chroma_idle=3600.0, chroma_max_backlog=3,
                        clock=lambda: 1.77e9)
    svc.store_many(_items(0, 2))
    time.sleep(0.05)
    assert svc.health()["chroma_backlog"] == 2  # below the bound and never idle: kept
    svc.store_many(_items(1, 2))
    deadline = time.monotonic() + 60
    while store._chroma.count() < 4:
        assert time.monotonic() < deadline, "the full backlog was never sent"
        time.sleep(0.02)
    svc.close()


def test_the_recording_stays_in_commit_order_under_concurrent_calls(tmp_path: Path) -> None:
    store = MemoryStore(embedder=HashingEmbedder(dim=64))
    svc = MemoryService(store, load_pipeline("bm25"), recorder=Recorder(tmp_path / "rec"),
                        clock=lambda: 1.77e9)

    def bulk(w: int) -> None:
        for b in range(5):
            svc.store_many(_items(100 * w + b, 3))

    def single() -> None:
        for i in range(10):
            svc.store_memory(f"single note {i}", "event")  # records while holding the lock

    threads = [threading.Thread(target=bulk, args=(w,)) for w in range(6)]
    threads.append(threading.Thread(target=single))
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=120)
    lines = [json.loads(x) for x in (tmp_path / "rec" / "memories.jsonl").read_text().splitlines()]
    assert len(lines) == 6 * 5 * 3 + 10
    stamps = [x["ts"] for x in lines]  # whole, strictly increasing milliseconds per call
    assert stamps == sorted(stamps) and len(set(stamps)) == len(stamps)


def _nested(depth: int) -> dict[str, Any]:
    value: dict[str, Any] = {"leaf": 1}
    for _ in range(depth - 1):
        value = {"a": value}
    return value


@pytest.mark.parametrize("depth", [33, 400, 900])
def test_deeply_nested_metadata_fails_its_item_alone(tmp_path: Path, depth: int) -> None:
    """Checked before anything recurses into it: an item error, never a RecursionError that
    fails the group commit of every other caller's batch."""
    store = MemoryStore(tmp_path / "store", embedder=HashingEmbedder(dim=64), chroma=False)
    rec = CountingRecorder(tmp_path / "rec")
    svc = MemoryService(store, load_pipeline("bm25"), recorder=rec, clock=lambda: 1.77e9)
    deep = {"content": "deep", "metadata": _nested(depth)}
    calls = [_items(0, 3), [deep, {"content": "after the deep one"}], [deep], _items(3, 2)]
    outcomes, _ = _queued_calls(svc, calls)
    message = "field 'metadata' nested deeper than 32 levels"
    assert [[r["ok"] for r in out] for out in outcomes] == [
        [True] * 3, [False, True], [False], [True] * 2]
    assert outcomes[1][0]["error"] == outcomes[2][0]["error"] == message
    assert rec.appends == [6]  # one group, one append: the other batches were committed
    with pytest.raises(ServiceError, match=re.escape(message)):
        svc.store_memory("deep", metadata=_nested(depth))
    with pytest.raises(ServiceError, match=re.escape("field 'properties.a' nested deeper")):
        svc.relate("Billing", "uses", "Postgres", properties=_nested(depth))
    svc.close()
    lines = (tmp_path / "rec" / "memories.jsonl").read_text().splitlines()
    assert len(lines) == 6 and len(store) == 6


def test_an_item_that_fails_unexpectedly_fails_alone_and_leaves_nothing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    store = MemoryStore(tmp_path / "store", embedder=HashingEmbedder(dim=64), chroma=False)
    rec = CountingRecorder(tmp_path / "rec")
    svc = MemoryService(store, load_pipeline("bm25"), recorder=rec, clock=lambda: 1.77e9)
    real = svc._store_line

    def explode(res: Any, *args: Any) -> dict[str, Any]:
        if store.get(res.id).text == "explodes after its write":  # written, then this fails
            raise RuntimeError("/internal/path/service.py line 42")
        return real(res, *args)

    monkeypatch.setattr(svc, "_store_line", explode)
    calls = [_items(0, 2), [{"content": "explodes after its write"}, {"content": "fine"}]]
    outcomes, _ = _queued_calls(svc, calls)
    assert outcomes[1][0] == {"index": 0, "ok": False, "error":
                              "the item was not stored: internal error (RuntimeError)"}
    assert [r["ok"] for r in outcomes[0]] + [outcomes[1][1]["ok"]] == [True, True, True]
    assert rec.appends == [3]
    svc.close()
    with MemoryStore(tmp_path / "store", chroma=False) as again:
        texts = sorted(again.get(i).text for i in again.ids)
    assert texts == ["call 0 note 0", "call 0 note 1", "fine"]  # the failed write was undone
    lines = (tmp_path / "rec" / "memories.jsonl").read_text().splitlines()
    assert sorted(json.loads(x)["text"] for x in lines) == texts
