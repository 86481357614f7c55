import os
import signal
import subprocess
import sys
import textwrap
import time

import numpy as np
import pytest

from memlab.memory.store import MemoryStore

T0 = 1_767_225_600.0


def unit(i, dim=8):
    v = np.zeros(dim, dtype=np.float32)
    v[i % dim] = 1.0
    v[(i + 3) % dim] = 0.5
    return v / np.linalg.norm(v)


def test_persisted_store_reopens_with_everything(tmp_path):
    with MemoryStore(tmp_path / "s") as store:
        a = store.store("Acme runs PostgreSQL", "fact", source_agent="a", key="db",
                        client_id="acme", now=T0, embedding=unit(0))
        b = store.store("Acme runs MySQL", "fact", source_agent="a", key="db",
                        client_id="acme", now=T0 + 10, embedding=unit(1))
        store.store("Acme runs MySQL", "fact", source_agent="b", key="db",
                    client_id="acme", now=T0 + 11, embedding=unit(1))
        store.relate("acme", "uses", "MySQL", now=T0 + 12)
        store.touch([b.id], now=T0 + 20)
        edges_before = store.graph.edges_frame().sort("src", "dst", "relation")
    with MemoryStore(tmp_path / "s") as again:
        assert len(again) == 2
        assert again.get(a.id).superseded_by == b.id
        assert again.get(b.id).observed_by == ["a", "b"]
        assert again.get(b.id).access_count == 1
        assert again.visible_mask().tolist() == [False, True]
        np.testing.assert_allclose(again.vectors.matrix[1], unit(1), atol=1e-6)
        assert again.graph.edges_frame().sort("src", "dst", "relation").equals(edges_before)
        assert again.check() == []
        # dedup state survives: the same text by the same agent is not written again
        assert again.store("Acme runs MySQL", "fact", source_agent="a", key="db",
                           client_id="acme", now=T0 + 30).action == "deduplicated"


def test_check_reports_disagreement_and_reopen_repairs(tmp_path):
    with MemoryStore(tmp_path / "s") as store:
        a = store.store("one", source_agent="a", now=T0, embedding=unit(0))
        store.store("two", source_agent="a", now=T0, embedding=unit(1))
        store._chroma.delete([a.id])
        store._chroma.upsert(["ghost"], unit(2)[None, :], [{"client_id": "global"}])
    with MemoryStore(tmp_path / "s", repair=False) as broken:
        assert broken.check() == [
            f"memory {a.id}: in SQLite, missing from chromadb",
            "memory ghost: in chromadb, missing from SQLite",
        ]
    with MemoryStore(tmp_path / "s") as repaired:
        # the missing vector is re-sent; the ghost is kept but quarantined, never deleted
        assert repaired.check() == [
            "memory ghost: in chromadb, missing from SQLite (quarantined: hidden from searches)"
        ]
        assert repaired._chroma.get(["ghost"])["metadatas"][0] == {
            "client_id": "global", "orphan": True, "active": False, "forgotten": True
        }
        assert repaired.drop_orphans() == ["ghost"]
        assert repaired.check() == []


def test_cli_store_check(tmp_path, capsys):
    from memlab.cli import main

    with MemoryStore(tmp_path / "s") as store:
        store.store("one", source_agent="a", now=T0, embedding=unit(0))
    assert main(["store", "check", str(tmp_path / "s")]) == 0
    assert capsys.readouterr().out.strip() == "1 memories, 0 problem(s)"
    assert main(["store", "check", str(tmp_path / "nothing")]) == 2


def test_purge_forgotten_erases_after_the_undo_window(tmp_path, capsys):
    """Design §D3.7 for a live store: a memory forgotten 30 days ago or more is purged; one
    forgotten since stays restorable; ``--dry-run`` lists without changing anything."""
    from memlab.cli import main
    from memlab.memory.records import MemoryInputError

    day = 86_400.0
    with MemoryStore(tmp_path / "s") as store:
        old = store.store("Card 4242 for Acme", source_agent="a", now=T0, embedding=unit(0)).id
        new = store.store("Globex moved", source_agent="a", now=T0, embedding=unit(1)).id
        kept = store.store("Kept note", source_agent="a", now=T0, embedding=unit(2)).id
        store.forget(old, "asked to", now=T0 + day)
        store.forget(new, "asked to", now=T0 + 20 * day)
        assert store.purge_forgotten(now=T0 + 31 * day, dry_run=True) == [old]
        assert store.get(old).text == "Card 4242 for Acme"  # a dry run changes nothing
        with pytest.raises(MemoryInputError, match="retention_days"):
            store.purge_forgotten(retention_days=-1.0, now=T0)
    now = "2026-02-01T00:00:00Z"  # T0 + 31 days
    assert main(["store", "purge", str(tmp_path / "s"), "--now", now, "--dry-run"]) == 0
    assert capsys.readouterr().out.splitlines() == [
        old, "would purge 1 forgotten memories (forgotten 30+ days ago)",
    ]
    assert main(["store", "purge", str(tmp_path / "s"), "--now", now]) == 0
    assert capsys.readouterr().out.splitlines() == [
        old, "purged 1 forgotten memories (forgotten 30+ days ago)",
    ]
    with MemoryStore(tmp_path / "s") as again:
        assert again.get(old).text == "" and again.get(old).purged_at is not None
        assert again.get(new).text == "Globex moved"  # still in its undo window
        again.restore(new, now=T0 + 32 * day)
        assert again.get(kept).active
        assert again.purge_forgotten(now=T0 + 400 * day) == []  # nothing forgotten is left
        assert again.check() == []
    assert main(["store", "purge", str(tmp_path / "nothing")]) == 2


def test_store_commands_refuse_a_store_a_live_server_records(tmp_path, capsys):
    from memlab.cli import main

    day = 86_400.0
    with MemoryStore(tmp_path / "s") as store:
        old = store.store("Card 4242 for Acme", source_agent="a", now=T0, embedding=unit(0)).id
        store.forget(old, "asked to", now=T0 + day)
        assert store.recordings() == []
        store.set_meta(f"recording:{tmp_path / 'rec'}", "{}")  # as a server marks its recording
        assert store.recordings() == [str(tmp_path / "rec")]
    now = "2026-02-01T00:00:00Z"  # T0 + 31 days
    for command in (["purge", "--now", now], ["consolidate", "--embedder", "hashing"]):
        argv = ["store", command[0], str(tmp_path / "s"), *command[1:]]
        assert main(argv) == 2
        err = capsys.readouterr().err
        assert f"a live server records this store's writes in {tmp_path / 'rec'}" in err
        assert f"pass --unrecorded to {command[0]} anyway" in err
    with MemoryStore(tmp_path / "s") as store:
        assert store.get(old).text == "Card 4242 for Acme"  # refused: nothing changed
    assert main(["store", "purge", str(tmp_path / "s"), "--now", now, "--dry-run"]) == 0
    assert main(["store", "purge", str(tmp_path / "s"), "--now", now, "--unrecorded"]) == 0
    assert capsys.readouterr().out.splitlines()[-1] == (
        "purged 1 forgotten memories (forgotten 30+ days ago)"
    )


def test_consolidate_refuses_an_embedder_of_another_dimension_before_a_generator(
    tmp_path, capsys
):
    from memlab.cli import main
    from memlab.embed import HashingEmbedder

    with MemoryStore(tmp_path / "s") as store:
        store.store("Acme runs on Postgres", "fact", key="db", source_agent="a", now=T0,
                    embedding=unit(0))
    dim = HashingEmbedder().dim
    # the generator is never loaded: the check comes first
    assert main(["store", "consolidate", str(tmp_path / "s"), "--embedder", "hashing",
                 "--generator", "no-such-generator"]) == 2
    assert (
        f"the store's vectors have dimension 8, --embedder hashing gives {dim}: consolidate "
        "with the embedder that wrote the store"
    ) in capsys.readouterr().err


WRITER = textwrap.dedent(
    """
    import sys
    import numpy as np
    from memlab.memory.store import MemoryStore

    path, batch = sys.argv[1], int(sys.argv[2])
    store = MemoryStore(path)
    i = 0
    while True:
        with store.batch():
            for _ in range(batch):
                v = np.zeros(8, dtype=np.float32); v[i % 8] = 1.0; v[(i + 3) % 8] = 0.5
                store.store(f"memory number {i} about topic {i % 7}", source_agent="w",
                            now=1767225600.0 + i, embedding=v, id=f"m{i:06d}")
                i += 1
        print(f"ACK {i}", flush=True)
    """
)


def test_killed_writer_loses_no_acknowledged_write(tmp_path):
    path = tmp_path / "crash"
    script = tmp_path / "writer.py"
    script.write_text(WRITER)
    env = {**os.environ, "ANONYMIZED_TELEMETRY": "False"}
    proc = subprocess.Popen(
        [sys.executable, str(script), str(path), "25"],
        stdout=subprocess.PIPE, text=True, env=env,
    )
    acked = 0
    deadline = time.monotonic() + 120
    assert proc.stdout is not None
    while acked < 200 and time.monotonic() < deadline:
        line = proc.stdout.readline()
        if not line:
            break
        if line.startswith("ACK "):
            acked = int(line.split()[1])
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    assert acked >= 200, "the writer did not get far enough"
    with MemoryStore(path) as store:
        n = len(store)
        assert n >= acked
        assert n % 25 == 0  # a batch is all or nothing
        for i in range(acked):
            assert f"m{i:06d}" in store
        assert store.check() == []


def test_payloads_read_back_equal_including_what_orjson_refuses(tmp_path):
    """Payloads are written by orjson, or by the standard library for what orjson refuses
    (an integer past 64 bits); every record reopens field for field as it was."""
    with MemoryStore(tmp_path / "s", chroma=False) as store:
        plain = store.store("Zoë deploys to eu-west-1 at 0.5 ms p50", "fact", key="deploy",
                            metadata={"ratio": 1e-05, "big": 1e16, "nested": {"a": [1, None]}},
                            now=T0 + 0.125, confidence=0.3, embedding=unit(0))
        huge = store.store("a counter past 64 bits", metadata={"n": 2**70}, now=T0,
                           embedding=unit(1))
        store.touch([plain.id], now=T0 + 7.25)
        before = [store.get(i).to_payload() for i in (plain.id, huge.id)]
        history = store.history(huge.id)["payload"].to_list()
    assert '"n": 1180591620717411303424' in history[0]  # the standard library's layout
    with MemoryStore(tmp_path / "s", chroma=False) as again:
        assert [again.get(i).to_payload() for i in (plain.id, huge.id)] == before
        assert again.get(huge.id).metadata["n"] == 2**70
        assert again.get(plain.id).metadata["ratio"] == 1e-05
        assert again.get(plain.id).last_accessed_at == T0 + 7.25


def test_a_purge_unlinks_the_memorys_entities_for_good(tmp_path):
    """A purge erases the text and the entity links, in memory and on disk, and bumps
    ``content_version`` (the signal indexes grown from the texts rebuild on)."""
    with MemoryStore(tmp_path / "s") as store:
        gone = store.store("Acme migrated billing to Stripe", "event", source_agent="a",
                           client_id="acme", now=T0, embedding=unit(0))
        kept = store.store("Globex chose Stripe too", "event", source_agent="a",
                           client_id="globex", now=T0 + 1, embedding=unit(1))
        row_gone, row_kept = store.idx(gone.id), store.idx(kept.id)
        assert store.graph.entities_of(row_gone)  # linked when written
        kept_links = store.graph.entities_of(row_kept)
        before = store.content_version
        store.forget(gone.id, "asked to", now=T0 + 2)
        assert store.content_version == before  # forgetting keeps the text (undo window)
        store.purge(gone.id, now=T0 + 3)
        assert store.content_version == before + 1
        assert store.get(gone.id).text == ""
        assert not store.vectors.present[row_gone]
        assert not store.vectors.matrix[row_gone].any()  # no trace of the vector in memory
        assert store.graph.entities_of(row_gone) == []
        assert store.graph.entities_of(row_kept) == kept_links
        assert store.check() == []
    with MemoryStore(tmp_path / "s") as again:
        assert again.graph.entities_of(row_gone) == []
        assert again.graph.entities_of(row_kept) == kept_links
        assert again.check() == []


def test_vectors_read_back_bit_for_bit_after_a_reopen_and_a_rollback(tmp_path):
    # Stored vectors are the index's unit vectors: reading them back must not normalise them
    # again (float32 bits would move, and scores that tie in a replay would stop tying).
    from memlab.embed import HashingEmbedder
    from memlab.memory.records import MemoryInputError

    texts = [f"note {i} about deploys, billing and the {i % 7} runbook" for i in range(60)]
    with MemoryStore(tmp_path / "s", embedder=HashingEmbedder(dim=64), chroma=False) as store:
        for i, text in enumerate(texts):
            store.store(text, "event", now=1.7e9 + i)
        first = store.vectors.matrix.copy()
        with pytest.raises(MemoryInputError):
            store.relate("billing", "uses", "Billing")  # refused: rolled back, reloaded
        store._reload()
        assert store.vectors.matrix.tobytes() == first.tobytes()
    with MemoryStore(tmp_path / "s", embedder=HashingEmbedder(dim=64), chroma=False) as again:
        assert again.vectors.matrix.tobytes() == first.tobytes()
    # and they are what one normalisation of the embedder's vectors gives, as in a replay
    raw = HashingEmbedder(dim=64).embed(texts).astype(np.float32)
    once = raw / np.linalg.norm(raw, axis=1, keepdims=True)
    assert first.tobytes() == once.astype(np.float32).tobytes()
