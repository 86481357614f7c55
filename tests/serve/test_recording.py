"""Recordings: reopening never deletes what memlab did not write, one recorder per directory."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from memlab.cli import main
from memlab.datasets.validate import validate_dataset
from memlab.serve.recording import LOCK_NAME, Recorder, RecordingLockedError

STORE = {"op": "store", "id": "m1", "ts": "2026-03-01T10:00:00Z", "text": "acme runs on Node 20",
         "type": "fact"}
STORE2 = {"op": "store", "id": "m2", "ts": "2026-03-01T10:00:01Z",
          "text": "café ✓ naïve — the billing db is postgres", "type": "fact"}
QUERY = {"qid": "r1", "ts": "2026-03-01T10:00:02Z", "text": "what does acme run on",
         "relevant": {}, "served": ["m1"], "tags": ["live"]}


def _compact(obj: dict) -> bytes:
    return json.dumps(obj, ensure_ascii=False, separators=(",", ":")).encode("utf-8")


def _recording(path: Path) -> dict[str, bytes]:
    """A recording with two writes and one recall; its files' bytes."""
    rec = Recorder(path)
    rec.memories([STORE, STORE2])
    rec.query(QUERY)
    rec.close()
    return {name: (path / name).read_bytes() for name in ("memories.jsonl", "queries.jsonl")}


def _snapshot(path: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in sorted(path.iterdir()) if p.is_file()}


def test_a_last_line_without_newline_is_kept_and_terminated(tmp_path: Path) -> None:
    """An editor saved the files without a final newline: no record is lost."""
    rec_dir = tmp_path / "rec"
    full = _recording(rec_dir)
    for name, data in full.items():
        (rec_dir / name).write_bytes(data.rstrip(b"\n"))
    rec = Recorder(rec_dir)
    assert rec.last_ts == pytest.approx(1772359202.0)  # read from the unterminated query line
    assert {n: (rec_dir / n).read_bytes() for n in full} == full
    rec.memories([{**STORE, "id": "m3", "ts": "2026-03-01T10:00:03Z"}])
    rec.close()
    lines = (rec_dir / "memories.jsonl").read_bytes().split(b"\n")
    assert [json.loads(x)["id"] for x in lines[:-1]] == ["m1", "m2", "m3"] and lines[-1] == b""
    assert validate_dataset(rec_dir) == []


def test_a_blank_unterminated_tail_is_kept(tmp_path: Path) -> None:
    rec_dir = tmp_path / "rec"
    full = _recording(rec_dir)
    (rec_dir / "memories.jsonl").write_bytes(full["memories.jsonl"] + b"  ")
    Recorder(rec_dir).close()
    assert (rec_dir / "memories.jsonl").read_bytes() == full["memories.jsonl"] + b"  \n"
    assert validate_dataset(rec_dir) == []


@pytest.mark.parametrize(
    "cut",
    [1, 2, 7, 20, 40, 55, 58, -3, -2],
)
def test_memlabs_own_torn_append_is_cut(tmp_path: Path, cut: int) -> None:
    """A crash mid-append leaves a prefix of a compact line (cut anywhere, even inside a
    multi-byte character): only that prefix goes."""
    rec_dir = tmp_path / "rec"
    full = _recording(rec_dir)
    line = _compact({**STORE2, "id": "m9"}) + b"\n"
    torn = line[:cut]
    assert torn and not torn.endswith(b"\n")
    (rec_dir / "memories.jsonl").write_bytes(full["memories.jsonl"] + torn)
    Recorder(rec_dir).close()
    assert (rec_dir / "memories.jsonl").read_bytes() == full["memories.jsonl"]
    assert (rec_dir / ".memories.jsonl.uncommitted").read_bytes() == torn + b"\n"  # kept


def test_a_torn_multibyte_character_is_cut(tmp_path: Path) -> None:
    rec_dir = tmp_path / "rec"
    full = _recording(rec_dir)
    line = _compact({**STORE2, "id": "m9"})
    at = line.index("é".encode()) + 1  # between the two bytes of 'é'
    (rec_dir / "memories.jsonl").write_bytes(full["memories.jsonl"] + line[:at])
    Recorder(rec_dir).close()
    assert (rec_dir / "memories.jsonl").read_bytes() == full["memories.jsonl"]


@pytest.mark.parametrize(
    "tail",
    [
        b"\x8f\x00random bytes",  # not UTF-8
        b"garbage appended by hand",
        b'{"op": "store", "id": "m9"',  # a hand-written line cut short: memlab writes no spaces
        b'{"op":"store"}}',  # trailing garbage after an object
        b'{"op":"store","id":m9',  # not JSON at any length
        b"\x00\x00\x00\x00",
        b"[1, 2",
    ],
)
def test_a_tail_memlab_did_not_write_is_refused_and_kept(tmp_path: Path, tail: bytes) -> None:
    rec_dir = tmp_path / "rec"
    full = _recording(rec_dir)
    (rec_dir / "memories.jsonl").write_bytes(full["memories.jsonl"] + tail)
    before = _snapshot(rec_dir)
    with pytest.raises(ValueError, match=r"memories\.jsonl:3: the last line has no newline"):
        Recorder(rec_dir, lock_timeout=0)
    assert _snapshot(rec_dir) == before
    # the refusal released the lock: fixing the file lets the next recorder in at once
    (rec_dir / "memories.jsonl").write_bytes(full["memories.jsonl"])
    Recorder(rec_dir, lock_timeout=0).close()


@pytest.mark.parametrize(
    ("line", "why"),
    [
        (b"{not json", "invalid JSON"),
        (b"[1, 2]", "expected a JSON object, got list"),
        (b'{"ts": NaN}', "invalid JSON: NaN is not JSON"),
        (b"\xff\xfe{}", "not valid UTF-8"),
        (b"[" * 100_000 + b"]" * 100_000, "invalid JSON"),
    ],
)
def test_a_line_that_is_not_a_json_object_is_refused(
    tmp_path: Path, line: bytes, why: str
) -> None:
    rec_dir = tmp_path / "rec"
    full = _recording(rec_dir)
    first, rest = full["memories.jsonl"].split(b"\n", 1)
    (rec_dir / "memories.jsonl").write_bytes(first + b"\n" + line + b"\n" + rest)
    before = _snapshot(rec_dir)
    with pytest.raises(ValueError, match=rf"memories\.jsonl:2: {why}") as err:
        Recorder(rec_dir)
    assert "fix or remove this line" in str(err.value)
    assert _snapshot(rec_dir) == before


def test_an_unparsable_dataset_toml_is_refused(tmp_path: Path) -> None:
    rec_dir = tmp_path / "rec"
    _recording(rec_dir)
    (rec_dir / "dataset.toml").write_text('name = "live\nversion = ')
    before = _snapshot(rec_dir)
    with pytest.raises(ValueError, match=r"dataset\.toml: invalid TOML"):
        Recorder(rec_dir)
    (rec_dir / "dataset.toml").write_bytes(b"name = '\xff'\n")
    with pytest.raises(ValueError, match=r"dataset\.toml: not valid UTF-8"):
        Recorder(rec_dir)
    before["dataset.toml"] = b"name = '\xff'\n"
    assert _snapshot(rec_dir) == before


def test_a_foreign_directory_gets_no_lock_file(tmp_path: Path) -> None:
    (tmp_path / "notes.txt").write_text("mine")
    with pytest.raises(ValueError, match="not empty and holds no dataset.toml"):
        Recorder(tmp_path)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["notes.txt"]


def test_one_recorder_per_directory(tmp_path: Path) -> None:
    rec_dir = tmp_path / "rec"
    first = Recorder(rec_dir)
    assert (rec_dir / LOCK_NAME).is_file()
    started = time.monotonic()
    with pytest.raises(RecordingLockedError, match=rf"{rec_dir}: the recording is in use"):
        Recorder(rec_dir, lock_timeout=0.2)
    assert time.monotonic() - started < 2
    first.memories([STORE])
    first.close()
    first.close()  # twice is harmless
    second = Recorder(rec_dir, lock_timeout=0)
    second.memories([STORE2])
    second.close()
    assert validate_dataset(rec_dir) == []
    ids = [json.loads(x)["id"] for x in (rec_dir / "memories.jsonl").read_text().splitlines()]
    assert ids == ["m1", "m2"]


def test_the_lock_holds_across_processes(tmp_path: Path) -> None:
    rec_dir = tmp_path / "rec"
    held = Recorder(rec_dir)
    code = (
        "import sys\n"
        "from memlab.serve.recording import Recorder, RecordingLockedError\n"
        "try:\n"
        "    Recorder(sys.argv[1], lock_timeout=0.1)\n"
        "except RecordingLockedError as exc:\n"
        "    print(exc)\n"
        "    sys.exit(3)\n"
    )
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[2] / "src")}
    try:
        out = subprocess.run([sys.executable, "-c", code, str(rec_dir)], env=env,
                             capture_output=True, text=True, timeout=60)
    finally:
        held.close()
    assert out.returncode == 3, out.stderr
    assert out.stdout.startswith(f"{rec_dir}: the recording is in use by another server")


@pytest.mark.parametrize("where", ["same", "inside", "around", "symlink"])
def test_cli_refuses_a_recording_overlapping_the_store(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], where: str
) -> None:
    store = tmp_path / "store"
    record = {
        "same": store,
        "inside": store / "rec",
        "around": tmp_path,
        "symlink": tmp_path / "link",
    }[where]
    if where == "symlink":
        store.mkdir()
        record.symlink_to(store)
    before = sorted(p.name for p in tmp_path.rglob("*"))
    code = main(["serve", "mcp", str(store), "--agent", "atlas", "--record", str(record),
                 "--embedder", "hashing", "--no-cache", "--no-chroma"])
    err = capsys.readouterr().err
    assert code == 2
    assert err.startswith("memlab: error: ") and "Traceback" not in err
    if where == "around":
        assert f"store directory {store}: is inside the recording --record {record}" in err
    elif where == "inside":
        assert f"--record {record}: is inside the store directory {store}" in err
    else:
        assert f"--record {record}: is the store directory {store}" in err
    assert sorted(p.name for p in tmp_path.rglob("*")) == before  # nothing was created


def test_a_hand_typed_line_cut_short_is_moved_aside_never_deleted(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """A user appends a judgment by hand and forgets the closing brace and the newline: it
    looks like memlab's own torn append, so it leaves the file, into a sidecar."""
    rec_dir = tmp_path / "rec"
    _recording(rec_dir)
    judged = _compact({"qid": "r1", "mem_id": "m1", "grade": 1, "source": "agent",
                       "judge": "atlas", "ts": "2026-03-01T10:00:03Z"}) + b"\n"
    typed = (b'{"qid":"r1","mem_id":"m2","grade":2,"source":"human","judge":"ann",'
             b'"ts":"2026-11-25T00:00:00Z","note":"my careful note about why')
    (rec_dir / "judgments.jsonl").write_bytes(judged + typed)
    with caplog.at_level("WARNING", logger="memlab.serve"):
        Recorder(rec_dir).close()
    assert (rec_dir / "judgments.jsonl").read_bytes() == judged
    assert (rec_dir / ".judgments.jsonl.uncommitted").read_bytes() == typed + b"\n"
    assert (f"judgments.jsonl:2: moved a torn last line ({len(typed)} bytes, left by a crash "
            f"mid-write or an unfinished edit) to {rec_dir / '.judgments.jsonl.uncommitted'}"
            ) in caplog.text
    # a second torn line later is appended to the sidecar, after the first
    (rec_dir / "judgments.jsonl").write_bytes(judged + b'{"qid":"r1"')
    Recorder(rec_dir).close()
    assert (rec_dir / ".judgments.jsonl.uncommitted").read_bytes() == (
        typed + b"\n" + b'{"qid":"r1"\n')
    assert validate_dataset(rec_dir) == []
