"""A store reopened after another process wrote to it, a damaged chromadb index, ``store check``
that writes nothing and reads consistently beside writers, rows memlab could not have written,
and store errors that never quote memory text."""

import hashlib
import json
import logging
import os
import random
import shutil
import sqlite3
import subprocess
import sys
import textwrap

import numpy as np
import pytest

from memlab.cli import main
from memlab.memory.integrity import (
    FIELD_RULES,
    _sound_at_a_glance,
    payload_problems,
    sqlite_detail,
)
from memlab.memory.records import (
    StoreCorruptError,
    StoreError,
    StoreLockedError,
)
from memlab.memory.store import MemoryStore
from memlab.memory.vectors import ChromaIndex

T0 = 1_767_225_600.0
TEXT = "Memory number {} about Acme and PostgreSQL"


def unit(i, dim=8):
    v = np.zeros(dim, dtype=np.float32)
    v[i % dim] = 1.0
    v[(i + 3) % dim] = 0.5
    return v / np.linalg.norm(v)


def make_store(path, n=6, **kwargs):
    with MemoryStore(path, **kwargs) as store:
        ids = [
            store.store(TEXT.format(i), "fact" if i % 2 else "event", key=f"k{i}" if i % 2
                        else None, source_agent="a", client_id="acme", now=T0 + i,
                        embedding=unit(i), metadata={"n": i}).id
            for i in range(n)
        ]
    return ids


def tree(path):
    """Every file and directory under ``path``: size, mtime and content hash."""
    out = {}
    for root, dirs, files in os.walk(path):
        for name in dirs + files:
            p = os.path.join(root, name)
            st = os.stat(p)
            digest = None
            if os.path.isfile(p):
                with open(p, "rb") as fh:
                    digest = hashlib.sha256(fh.read()).hexdigest()
            out[os.path.relpath(p, path)] = (st.st_size, st.st_mtime_ns, digest)
    return out


def run(capsys, argv):
    code = main([str(a) for a in argv])
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def sql(path, *statements):
    db = sqlite3.connect(path / "memlab.sqlite3")
    for statement in statements:
        db.execute(statement)
    db.commit()
    db.close()


def child(code):
    subprocess.run([sys.executable, "-c", textwrap.dedent(code)], check=True)


# ------------------------------------------------------------------ 1: reopening


WRITE_20 = """
    import numpy as np
    from memlab.memory.store import MemoryStore
    with MemoryStore({path!r}) as store:
        for i in range(20):
            v = np.zeros(8, dtype=np.float32); v[i % 8] = 1.0
            store.store(f"memory {{i}} of process B", source_agent="b", now={t0} + 100 + i,
                        embedding=v)
"""


def test_a_process_reopens_a_store_after_another_process_wrote_to_it(tmp_path):
    path = tmp_path / "s"
    with MemoryStore(path) as store:
        store.store("first memory of process A", source_agent="a", now=T0, embedding=unit(0))
    child(WRITE_20.format(path=str(path), t0=T0))
    with MemoryStore(path) as store:  # chromadb's cached system of the first open is gone
        assert len(store) == 21
        assert store.check() == []
        assert len(store._chroma.ids()) == 21


def test_closing_a_store_stops_chromadbs_system_for_its_directory(tmp_path):
    from chromadb.api.shared_system_client import SharedSystemClient

    path = tmp_path / "s"
    store = MemoryStore(path)
    store.store("one", source_agent="a", now=T0, embedding=unit(0))
    assert str(path / "chroma") in SharedSystemClient._identifier_to_system
    store.close()
    assert str(path / "chroma") not in SharedSystemClient._identifier_to_system
    assert str(path / "chroma") not in SharedSystemClient._identifier_to_refcount


def test_a_chromadb_client_left_open_in_the_process_does_not_serve_stale_caches(tmp_path):
    path = tmp_path / "s"
    make_store(path, n=1)
    left = ChromaIndex(path / "chroma", create=False)  # never closed, as a dropped store's
    assert len(left.ids()) == 1
    child(WRITE_20.format(path=str(path), t0=T0))
    with MemoryStore(path) as store:
        assert len(store) == 21
        assert store.check() == []


# ------------------------------------------------------------------ 2: a damaged index


def _truncate(f):
    f.write_bytes(f.read_bytes()[: len(f.read_bytes()) * 3 // 10])


def _flip(f):  # the red team's damage: 30 bit flips past the header
    data = bytearray(f.read_bytes())
    rng = random.Random(0)
    for _ in range(30):
        i = rng.randrange(100, len(data))
        data[i] ^= 1 << rng.randrange(8)
    f.write_bytes(bytes(data))


def _bad_log(f):  # opens, then fails reading: "Failed to pull logs from the log store"
    db = sqlite3.connect(f)
    db.execute("UPDATE embeddings_queue SET vector = X'0102'")
    db.commit()
    db.close()


CHROMA_DAMAGE = {
    "truncated": (_truncate, "InternalError: error returned from database: (code: 11) "
                             "database disk image is malformed"),
    "bit-flips": (_flip, "InternalError: "),
    "bad-log": (_bad_log, "InvalidArgumentError: Error executing plan: Error sending backfill "
                          "request to compactor: Failed to pull logs from the log store"),
    "empty": (lambda f: f.write_bytes(b""), "chroma.sqlite3 is empty (0 bytes)"),
    "not-a-directory": (None, "not a directory"),
}


def _damage(path, name):
    fn, _ = CHROMA_DAMAGE[name]
    if fn is None:
        shutil.rmtree(path / "chroma")
        (path / "chroma").write_text("not an index")
    else:
        fn(path / "chroma" / "chroma.sqlite3")


@pytest.mark.parametrize("name", sorted(CHROMA_DAMAGE))
def test_a_damaged_chromadb_index_is_moved_aside_and_rebuilt_from_sqlite(
    tmp_path, capsys, caplog, name
):
    path = tmp_path / "s"
    ids = make_store(path)
    _damage(path, name)
    damaged = tree(path / "chroma") if (path / "chroma").is_dir() else None
    reason = CHROMA_DAMAGE[name][1]
    before = tree(path)
    # check: one problem naming the directory and what to do; nothing written
    code, out, err = run(capsys, ["store", "check", path])
    assert (code, err) == (1, "")
    lines = out.splitlines()
    assert len(lines) == 2 and lines[1] == "6 memories, 1 problem(s)"
    assert lines[0].startswith(f"{path / 'chroma'}: the chromadb index ")
    assert reason in lines[0]
    assert lines[0].endswith("; opening the store for writing rebuilds it from SQLite (moving "
                             "it aside, not deleting it)")
    assert tree(path) == before
    # a writable open moves it aside (kept byte for byte) and rebuilds it from SQLite
    with caplog.at_level(logging.WARNING, logger="memlab.store"), MemoryStore(path) as store:
        assert sorted(store._chroma.ids()) == sorted(ids)
        assert store.check() == []
    moved = [p.name for p in path.iterdir() if p.name.startswith("chroma.damaged-")]
    assert len(moved) == 1
    assert len(caplog.records) == 1
    message = caplog.records[0].getMessage()
    assert message.startswith(f"{path / 'chroma'}: the chromadb index is damaged (")
    assert reason in message
    assert message.endswith(
        f"; moved it to {moved[0]} (kept, not deleted) and rebuilt it from SQLite"
    )
    if name in ("empty",):  # found before chromadb opened it: kept byte for byte
        assert tree(path / moved[0]) == damaged
    elif damaged is not None:  # chromadb opened it first: every file kept
        assert set(tree(path / moved[0])) == set(damaged)
    else:
        assert (path / moved[0]).read_text() == "not an index"
    code, out, _ = run(capsys, ["store", "check", path])
    assert (code, out) == (0, "6 memories, 0 problem(s)\n")


def test_a_damaged_index_with_repair_off_is_one_error_and_nothing_changes(tmp_path):
    path = tmp_path / "s"
    make_store(path)
    _damage(path, "empty")
    before = tree(path)
    with pytest.raises(StoreError) as info:
        MemoryStore(path, repair=False)
    assert str(info.value) == (
        f"{path / 'chroma'}: the chromadb index cannot be opened (chroma.sqlite3 is empty "
        "(0 bytes)); nothing was changed (open the store with repair=True to move it aside and "
        "rebuild it from SQLite)"
    )
    assert {k: v for k, v in tree(path).items() if k != "memlab.lock"} == {
        k: v for k, v in before.items() if k != "memlab.lock"
    }


def test_the_cli_commands_rebuild_a_damaged_index_instead_of_a_traceback(
    tmp_path, capsys, caplog
):
    path = tmp_path / "s"
    ids = make_store(path)
    _damage(path, "bad-log")
    with caplog.at_level(logging.WARNING, logger="memlab.store"):
        code, out, err = run(capsys, ["store", "purge", path, "--now", "2030-01-01T00:00:00Z"])
    assert (code, out, err) == (0, "purged 0 forgotten memories (forgotten 30+ days ago)\n", "")
    assert len(caplog.records) == 1
    assert "Failed to pull logs from the log store" in caplog.records[0].getMessage()
    index = ChromaIndex(path / "chroma", create=False)
    assert sorted(index.ids()) == sorted(ids)
    index.close()


# ------------------------------------------------------------------ 3: check writes nothing


def test_store_check_writes_nothing_where_chromadb_would_compact_its_log(tmp_path):
    """chromadb compacts its log into the vector segment whenever a process opens the
    directory afresh (it rewrote ``chroma.sqlite3`` and ``length.bin``): check runs as the
    user runs it, in a process of its own."""
    path = tmp_path / "s"
    ids = make_store(path, n=40)
    with MemoryStore(path) as store:
        for mid in ids[1:20:4]:
            store.forget(mid, "obsolete", now=T0 + 100)
    before = tree(path)
    done = subprocess.run([sys.executable, "-m", "memlab.cli", "store", "check", str(path)],
                          capture_output=True, text=True, check=False)
    assert (done.returncode, done.stdout, done.stderr) == (0, "40 memories, 0 problem(s)\n", "")
    assert tree(path) == before


def test_store_check_of_an_empty_chroma_sqlite_creates_no_database(tmp_path, capsys):
    path = tmp_path / "s"
    make_store(path)
    (path / "chroma" / "chroma.sqlite3").write_bytes(b"")
    before = tree(path)
    code, out, _ = run(capsys, ["store", "check", path])
    assert code == 1
    assert out.splitlines()[0] == (
        f"{path / 'chroma'}: the chromadb index is damaged (chroma.sqlite3 is empty (0 bytes)); "
        "opening the store for writing rebuilds it from SQLite (moving it aside, not deleting it)"
    )
    assert tree(path) == before
    assert (path / "chroma" / "chroma.sqlite3").stat().st_size == 0


CHECKPOINTING_WRITER = """
    import numpy as np
    from memlab.memory.store import MemoryStore
    with MemoryStore({path!r}, chroma=False) as store:  # its close checkpoints into the file
        with store.batch():
            for i in range(1500):
                v = np.zeros(8, dtype=np.float32); v[i % 8] = 1.0
                store.store(f"later {{i}} " + "x" * 300, source_agent="b", now={t0} + 99 + i,
                            embedding=v)
"""


def test_a_writer_that_checkpoints_under_a_read_only_store_is_not_read_as_a_torn_file(tmp_path):
    """Reads used to go through one ``immutable=1`` connection: a writer that opened, wrote
    and checkpointed into ``memlab.sqlite3`` meanwhile made them see a torn database
    ("database disk image is malformed"). Every read is now a snapshot of its own."""
    path = tmp_path / "s"
    make_store(path, chroma=False)
    reader = MemoryStore(path, read_only=True)
    assert len(reader) == 6
    child(CHECKPOINTING_WRITER.format(path=str(path), t0=T0))
    assert not (path / "memlab.sqlite3-wal").exists()  # checkpointed and closed
    assert reader.check() == []
    assert len(reader) == 1506  # the snapshot check read
    assert reader.history(reader.ids[-1])["change"].to_list() == ["created"]
    reader.close()


def test_a_writer_waits_while_a_read_only_snapshot_reads_a_store_nobody_writes(tmp_path):
    path = tmp_path / "s"
    make_store(path, chroma=False)
    reader = MemoryStore(path, read_only=True)
    with reader._snapshot() as writer:
        assert writer is False
        with pytest.raises(StoreLockedError):
            MemoryStore(path, chroma=False, lock_timeout=0.2)
    with MemoryStore(path, chroma=False, lock_timeout=0.2) as store:
        assert len(store) == 6
    reader.close()
    assert sorted(p.name for p in path.iterdir()) == ["memlab.lock", "memlab.sqlite3"]


def test_a_writer_in_a_store_without_a_lock_file_makes_the_snapshot_read_again(tmp_path):
    """Without ``memlab.lock`` there is nothing to hold shared; a writer that opens, writes
    and closes during an ``immutable=1`` read cannot delete its log (the read lock on SQLite's
    shared-lock bytes stops its checkpoint), so the snapshot sees it and reads again."""
    path = tmp_path / "s"
    make_store(path, chroma=False)
    (path / "memlab.lock").unlink()
    reader = MemoryStore(path, read_only=True)
    calls = []

    def body():
        calls.append(len(calls))
        if len(calls) == 1:  # the writer checkpoints into the file while it is read
            child(CHECKPOINTING_WRITER.format(path=str(path), t0=T0))
        return reader._exec("SELECT count(*) FROM memories")[0][0]

    assert reader._read(body) == 1506  # not a torn read, not "malformed"
    assert calls == [0, 1]
    reader.close()


def test_check_beside_a_live_writer_reports_chromadbs_lag_as_notes(tmp_path, capsys):
    path = tmp_path / "s"
    make_store(path)
    with MemoryStore(path, chroma_sync="deferred") as writer:
        late = writer.store("not sent to chromadb yet", source_agent="a", now=T0 + 50,
                            embedding=unit(5)).id
        code, out, err = run(capsys, ["store", "check", path])
        assert (code, err) == (0, "")
        assert out.splitlines() == [
            f"note: {path / 'chroma'}: a writer has the store open, so chromadb may not hold "
            "its newest writes yet; 1 difference(s) not counted as problems:",
            f"note:   memory {late}: in SQLite, missing from chromadb",
            "7 memories, 0 problem(s)",
        ]
    code, out, _ = run(capsys, ["store", "check", path])  # the writer's close sent it
    assert (code, out) == (0, "7 memories, 0 problem(s)\n")


def test_a_log_without_its_index_is_refused_without_creating_one(tmp_path, capsys):
    path = tmp_path / "s"
    make_store(path, chroma=False)
    with MemoryStore(path, chroma=False) as writer:  # its log, as a killed writer leaves it
        writer.store("one more", source_agent="a", now=T0 + 50, embedding=unit(7))
        log = (path / "memlab.sqlite3-wal").read_bytes()
    (path / "memlab.sqlite3-wal").write_bytes(log)
    code, _, err = run(capsys, ["store", "check", path])
    assert code == 2
    assert err == (
        f"memlab: error: {path / 'memlab.sqlite3-wal'}: a write-ahead log without its index "
        "(memlab.sqlite3-shm); reading it would create that file, so nothing was read: open "
        "the store for writing once (that replays the log), then check again\n"
    )
    assert not (path / "memlab.sqlite3-shm").exists()


# ------------------------------------------------------------------ 4, 6: damaged rows


ROW = "memlab.sqlite3 row 3: payload field "
MUTATIONS = {
    "text-null": (["UPDATE memories SET payload = json_set(payload, '$.text', NULL) WHERE idx = 3"],
                  [ROW + "'text' is null, not a string"]),
    "text-int": (["UPDATE memories SET payload = json_set(payload, '$.text', 42) WHERE idx = 3"],
                 [ROW + "'text' is 42, not a string"]),
    "confidence-nan": (["UPDATE memories SET payload = replace(payload, '\"confidence\":1.0', "
                        "'\"confidence\":NaN') WHERE idx = 3"],
                       [ROW + "'confidence' is nan, not a number in [0, 1]"]),
    "confidence-huge": (["UPDATE memories SET payload = replace(payload, '\"confidence\":1.0', "
                         "'\"confidence\":1e999') WHERE idx = 3"],
                        [ROW + "'confidence' is inf, not a number in [0, 1]"]),
    "entities-string": (["UPDATE memories SET payload = json_set(payload, '$.entities', 'abc') "
                         "WHERE idx = 3"],
                        [ROW + "'entities' is a string, not a list of entities"]),
    "metadata-list": (["UPDATE memories SET payload = json_set(payload, '$.metadata', "
                       "json('[1]')) WHERE idx = 3"],
                      [ROW + "'metadata' is a list, not an object"]),
    "created-text": (["UPDATE memories SET payload = json_set(payload, '$.created_at', "
                      "'Acme secret plans') WHERE idx = 3"],
                     [ROW + "'created_at' is a string, not a timestamp in years 1 to 9999"]),
    "link-missing-row": (["INSERT INTO entity_memory_links VALUES (0, 99999, 'about')"],
                         ["memlab.sqlite3 entity_memory_links row {rowid}: memory_idx 99999 "
                          "is not a row of memories (it has 6)"]),
    "active-column": (["UPDATE memories SET active = 1 - active WHERE idx = 3"],
                      ["memlab.sqlite3 row 3: column 'active' is 0 but payload field 'active' "
                       "is true"]),
    "id-column": (["UPDATE memories SET id = 'other-id' WHERE idx = 3"],
                  ["memlab.sqlite3 row 3: column 'id' differs from payload field 'id'"]),
    "deep-metadata": (["UPDATE memories SET payload = replace(payload, '\"metadata\":{\"n\":3}', "
                       "'\"metadata\":" + "[" * 5000 + "]" * 5000 + "') WHERE idx = 3"],
                      ["memlab.sqlite3 row 3: payload is nested too deeply to read (thousands of "
                       "levels)"]),
    "nested-metadata": (["UPDATE memories SET payload = replace(payload, '\"metadata\":{\"n\":3}',"
                         " '\"metadata\":{\"n\":" + "[" * 40 + "]" * 40 + "}') WHERE idx = 3"],
                        [ROW + "'metadata' nested deeper than 32 levels"]),
    "supersedes-nothing": (["UPDATE memories SET payload = json_set(payload, '$.supersedes', "
                            "'no-such-id') WHERE idx = 3"],
                           [ROW + "'supersedes' names no memory in the store"]),
    # fields that contradict one another, each valid alone
    "text-edited": (["UPDATE memories SET payload = json_set(payload, '$.text', 'edited') "
                     "WHERE idx = 3"],
                    [ROW + "'text' does not match content_hash: a text cannot be changed in "
                     "place (correct writes a corrected memory)"]),
    "observations-miscounted": (["UPDATE memories SET payload = json_set(payload, "
                                 "'$.observation_count', 5) WHERE idx = 3"],
                                [ROW + "'observation_count' must count the agents of "
                                 "observed_by (1), got 5"]),
    "created-year-0": (["UPDATE memories SET payload = json_set(payload, '$.created_at', "
                        "-1e12) WHERE idx = 3"],
                       [ROW + "'created_at' is -1000000000000.0, not a timestamp in years 1 to "
                        "9999"]),
    "superseded-by-itself": (["UPDATE memories SET payload = json_set(payload, "
                              "'$.superseded_by', json_extract(payload, '$.id')) WHERE idx = 3"],
                             [ROW + "'superseded_by' names the memory itself"]),
    "purged-but-active": (["UPDATE memories SET payload = json_set(payload, '$.purged_at', "
                           f"{T0 + 9}) WHERE idx = 3"],
                          [ROW + "'purged_at' is set on a memory that is active or still holds "
                           "its text"]),
    "two-active-keys": (["UPDATE memories SET payload = json_set(payload, '$.key', 'k1') "
                         "WHERE idx = 3"],
                        [ROW + "'key' is also the key of active row 1 in its client and scope "
                         "(a new fact supersedes the active one: only one is active)"]),
}


@pytest.mark.parametrize("name", sorted(MUTATIONS))
def test_check_lists_each_damaged_row_and_writers_refuse_it(tmp_path, capsys, name):
    path = tmp_path / "s"
    ids = make_store(path)
    statements, want = MUTATIONS[name]
    sql(path, *statements)
    db = sqlite3.connect(path / "memlab.sqlite3")
    rowid = db.execute("SELECT max(rowid) FROM entity_memory_links").fetchone()[0]
    db.close()
    want = [w.format(rowid=rowid) for w in want]
    before = tree(path)
    code, out, err = run(capsys, ["store", "check", path])
    assert (code, err) == (1, "")
    assert out.splitlines() == [*want, f"6 memories, {len(want)} problem(s)"]
    refusal = (
        f"memlab: error: {path / 'memlab.sqlite3'}: {len(want)} damaged row(s), first "
        f"{want[0]}; nothing was changed (memlab store check {path} lists them; restore the "
        "file from a backup)\n"
    )
    for argv in (["store", "purge", path, "--now", "2030-01-01T00:00:00Z"],
                 ["store", "purge", path, "--dry-run", "--now", "2030-01-01T00:00:00Z"],
                 ["store", "consolidate", path, "--embedder", "hashing", "--no-cache"]):
        code, out, err = run(capsys, argv)
        assert (code, out, err) == (2, "", refusal), argv
    assert {k: v for k, v in tree(path).items() if k != "memlab.lock"} == {
        k: v for k, v in before.items() if k != "memlab.lock"
    }
    with MemoryStore(path, read_only=True) as reader:  # the other rows read as they were
        assert reader.get(ids[0]).text == TEXT.format(0)
        assert reader.check() == want


def test_the_quick_check_of_a_payload_agrees_with_its_rules():
    """``_sound_at_a_glance`` (the fast path of loading) never accepts what a rule rejects."""
    with MemoryStore() as store:
        rec = store.get(store.store("a fact", "fact", key="k", source_agent="a", now=T0,
                                    metadata={"tags": ["a"], "n": 1}).id)
    base = json.loads(store._payload(rec))
    values = [None, True, False, 0, -1, 1, 2, 1.5, 2**70, 10**400, -(2**53), float("nan"),
              float("inf"), 1e308, "", " ", "x", ["team"], {"fact": 1},
              "team", "agent:bot", "fact", "medium", "general", "human", "semantic", [], ["a"],
              [1], [None], {}, {"a": 1}, {"name": "Acme", "type": "client"},
              [{"name": "Acme", "type": "client"}], [{"name": "", "type": "client"}],
              [{"name": "Acme"}], {"deep": json.loads("[" * 33 + "1" + "]" * 33)},
              {"x": float("nan")}, {"x": [1, 2.5]}]
    assert _sound_at_a_glance(base) and payload_problems(base) == []
    for name in FIELD_RULES:
        for value in [*values, "__missing__"]:
            data = dict(base)
            if value == "__missing__":
                data.pop(name)
            else:
                data[name] = value
            slow = payload_problems(data)
            assert payload_problems(data, surrogates=False) == slow, (name, value)
            if _sound_at_a_glance(data):
                assert slow == [], (name, value)


# ------------------------------------------------------------------ 5: no memory text


def test_sqlite_detail_drops_the_text_sqlite3_quotes():
    exc = sqlite3.OperationalError(
        "Could not decode to UTF-8 column 'payload' with text '{\"text\":\"Acme uses Stripe'"
    )
    assert sqlite_detail(exc) == "Could not decode to UTF-8 column 'payload'"


def test_no_store_error_quotes_memory_text(tmp_path, capsys):
    path = tmp_path / "s"
    make_store(path)
    # not UTF-8: the payload of row 2, and a version's payload (read by history)
    db = sqlite3.connect(path / "memlab.sqlite3")
    (payload,) = db.execute("SELECT payload FROM memories WHERE idx = 2").fetchone()
    raw = payload.encode().replace(b"Memory number", b"Memory \xff number")
    db.execute("UPDATE memories SET payload = CAST(? AS TEXT) WHERE idx = 2", (raw,))
    db.commit()
    db.close()
    code, out, err = run(capsys, ["store", "check", path])
    assert code == 1 and err == ""
    assert out.splitlines()[0].startswith("memlab.sqlite3 row 2: payload is not valid UTF-8")
    with pytest.raises(StoreCorruptError) as info:
        MemoryStore(path)
    assert "Memory" not in str(info.value) and "Acme" not in str(info.value)
    # a version that is not UTF-8: history() is one error, without the text
    sql(path, "UPDATE memories SET payload = (SELECT payload FROM versions WHERE seq = 3) "
              "WHERE idx = 2")
    db = sqlite3.connect(path / "memlab.sqlite3")
    (payload,) = db.execute("SELECT payload FROM versions WHERE seq = 1").fetchone()
    db.execute("UPDATE versions SET payload = CAST(? AS TEXT) WHERE seq = 1",
               (payload.encode().replace(b"Acme", b"Ac\xffme"),))
    db.commit()
    db.close()
    with MemoryStore(path, read_only=True) as reader, pytest.raises(StoreCorruptError) as info:
        reader.history(reader.ids[0])
    assert str(info.value) == (
        f"{path / 'memlab.sqlite3'}: the database holds text that is not UTF-8 (Could not "
        "decode to UTF-8 column 'payload')"
    )


@pytest.mark.parametrize("seed", range(6))
def test_bit_flips_in_memlab_sqlite3_never_put_memory_text_in_a_message(tmp_path, capsys, seed):
    path = tmp_path / "s"
    make_store(path, n=60, chroma=False)
    db_file = path / "memlab.sqlite3"
    data = bytearray(db_file.read_bytes())
    rng = random.Random(seed)
    for _ in range(20):
        i = rng.randrange(100, len(data))
        data[i] ^= 1 << rng.randrange(8)
    db_file.write_bytes(bytes(data))
    for argv in (["store", "check", path],
                 ["store", "purge", path, "--dry-run"],
                 ["store", "consolidate", path, "--embedder", "hashing", "--no-cache"]):
        code, out, err = run(capsys, argv)
        assert code in (0, 1, 2), argv
        assert "Traceback" not in err
        for fragment in ("Memory number", "about Acme", "PostgreSQL"):
            assert fragment not in out + err, (argv, out + err)


def test_a_store_memlab_wrote_in_every_way_reopens_sound(tmp_path):
    """No false alarm: relations in client scopes, supersession, forgetting, purging,
    corrections, promotion and metadata of every JSON kind reopen writable with no problem."""
    path = tmp_path / "s"
    with MemoryStore(path) as store:
        a = store.store("Acme runs PostgreSQL", "fact", key="db", client_id="acme",
                        source_agent="a", now=T0, embedding=unit(0), scope="agent:bot",
                        metadata={"n": 2**70, "r": 1e-5, "tags": ["x"], "deep": {"a": [1, None]}})
        c = store.store("Acme runs MySQL", "fact", key="db", client_id="acme",
                        source_agent="a", now=T0 + 1, embedding=unit(1), scope="agent:bot")
        b = store.store("Ran the nightly job", source_agent="a", now=T0 + 2, embedding=unit(2))
        store.store("Status is green", "status", subject="ci", status_value="green",
                    source_agent="a", now=T0 + 3, embedding=unit(3))
        store.store("We chose Kafka", "decision", key="bus", source_agent="a", now=T0 + 4,
                    embedding=unit(4))
        store.relate("Acme", "uses", "Stripe", client_id="acme", scope="agent:bot", now=T0 + 5)
        store.relate("Initech", "works_on", "Nightfall", now=T0 + 5)
        store.forget(b.id, "obsolete", now=T0 + 6)
        store.purge(b.id, now=T0 + 7)
        fixed = store.correct(c.id, "Acme runs MySQL 8", "more precise", now=T0 + 8,
                              embedding=unit(5))
        store.promote(fixed.id, now=T0 + 9)
        store.touch([fixed.id, a.id], now=T0 + 10)
    from memlab.memory.consolidate import Consolidator

    with MemoryStore(path) as store:
        Consolidator(event_ttl_days=0).run(store, now=T0 + 86400 * 40)
    with MemoryStore(path) as store:
        assert store._row_problems == []
        assert store.check() == []
    with MemoryStore(path, read_only=True) as store:
        assert store.check() == []


def test_relation_scope_keys_are_a_scope_or_a_client_and_a_scope():
    from memlab.memory.integrity import relation_problem

    for key in ("team", "agent:bot", "acme|team", "acme|project:x"):
        assert relation_problem(0, 1, "uses", 1.0, n_entities=2, scope=key, scoped=True) is None
    for key in ("nonsense", "acme|", "|team", "acme|agent:", 7, None):
        assert relation_problem(0, 1, "uses", 1.0, n_entities=2, scope=key, scoped=True) == (
            "scope is not a scope key (SCOPE or CLIENT|SCOPE)"
        )


def test_a_relation_strength_is_a_finite_number_at_least_zero():
    from memlab.memory.integrity import relation_problem

    assert relation_problem(0, 1, "uses", 0.0, n_entities=2) is None
    assert relation_problem(0, 1, "uses", 2.5, n_entities=2) is None
    for bad, shown in ((-1.0, "-1.0"), (float("nan"), "nan"), (float("inf"), "inf")):
        assert relation_problem(0, 1, "uses", bad, n_entities=2) == (
            f"strength is {shown}, not a finite number >= 0"
        )


def test_vectors_are_judged_by_the_dimension_recorded_with_the_first(tmp_path, capsys):
    import sqlite3

    path = tmp_path / "s"
    make_store(path, chroma=False)
    db = sqlite3.connect(path / "memlab.sqlite3")
    assert db.execute("SELECT value FROM meta WHERE key = 'vector_dim'").fetchall() == [
        (str(len(unit(0))),)
    ]
    with db:  # every vector cut alike: the most common width would call them sound
        db.execute("UPDATE memories SET vector = substr(vector, 1, 16)")
    db.close()
    code, out, _ = run(capsys, ["store", "check", path])
    assert code == 1
    dim = len(unit(0))
    assert out.splitlines()[:2] == [
        f"memlab.sqlite3 row {i}: column 'vector' is 16 bytes, not a float32 vector of the "
        f"store's dimension {dim}" for i in range(2)
    ]
    assert out.splitlines()[-1] == "6 memories, 6 problem(s)"
    db = sqlite3.connect(path / "memlab.sqlite3")
    with db:
        db.execute("UPDATE meta SET value = 'many' WHERE key = 'vector_dim'")
    db.close()
    code, out, _ = run(capsys, ["store", "check", path])
    assert "memlab.sqlite3: meta 'vector_dim' is 'many', not a vector dimension" in out
