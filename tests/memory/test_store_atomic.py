"""Every write is all or nothing across the in-memory index and SQLite.

The sweep tests fail each write statement of each mutating method in turn (a full disk) and
check that a failed call leaves the store exactly as it was, in memory and in SQLite, and that
the next acknowledged write commits and the store reopens.
"""

import sqlite3

import numpy as np
import pytest

from memlab.memory.consolidate import Consolidator
from memlab.memory.records import MemoryInputError, StoreWriteError
from memlab.memory.store import MemoryStore

from .conftest import FaultyConnection, memory_state, sql_state, state

T0 = 1_767_225_600.0
DAY = 86_400.0


def unit(i, dim=8):
    v = np.zeros(dim, dtype=np.float32)
    v[i % dim] = 1.0
    v[(i + 3) % dim] = 0.5
    return v / np.linalg.norm(v)


def seed(store):
    """A small store with every kind of memory, entities and a typed relation."""
    ids = {}
    ids["db"] = store.store("Acme runs PostgreSQL for billing", "fact", key="db",
                            client_id="acme", source_agent="a", now=T0, embedding=unit(0)).id
    ids["ev"] = store.store("Deployed the Acme storefront with Next.js", source_agent="a",
                            client_id="acme", importance="low", now=T0 + 1,
                            embedding=unit(1)).id
    ids["st"] = store.store("Globex SEO audit in progress", "status", subject="seo",
                            client_id="globex", source_agent="b", now=T0 + 2,
                            embedding=unit(2)).id
    ids["dec"] = store.store("We chose Redis for caching", "decision", key="cache",
                             source_agent="a", now=T0 + 3, embedding=unit(3)).id
    store.relate("acme", "uses", "PostgreSQL", now=T0 + 4)
    return ids


def reopened_state(path):
    """The in-memory state a fresh open builds from SQLite."""
    with MemoryStore(path, read_only=True, chroma=False) as again:
        return memory_state(again)


OPS = {
    "store-new": lambda s, ids: s.store(
        "Initech moved its API to Kubernetes and Redis", client_id="initech",
        source_agent="c", now=T0 + 10, embedding=unit(4)),
    "store-supersede": lambda s, ids: s.store(
        "Acme runs MySQL for billing", "fact", key="db", client_id="acme",
        source_agent="a", now=T0 + 10, embedding=unit(5)),
    "store-corroborate": lambda s, ids: s.store(
        "Acme runs PostgreSQL for billing", "fact", key="db", client_id="acme",
        source_agent="z", now=T0 + 10, embedding=unit(0)),
    "relate": lambda s, ids: s.relate("Globex", "competitor_of", "Initech", now=T0 + 10),
    "forget": lambda s, ids: s.forget(ids["ev"], "asked to", now=T0 + 10),
    "correct": lambda s, ids: s.correct(
        ids["db"], "Acme runs CockroachDB for billing", "typo", now=T0 + 10,
        embedding=unit(6)),
    "retire": lambda s, ids: s.retire(ids["st"], "expired", now=T0 + 10, expired_at=T0 + 10),
    "save": lambda s, ids: (
        setattr(s.get(ids["ev"]), "knowledge_category", "technical"),
        s.save(ids["ev"], "reclassified", now=T0 + 10),
    ),
    "touch": lambda s, ids: s.touch([ids["db"], ids["st"]], now=T0 + 10),
    "persist_relations": lambda s, ids: (
        s.graph.hebbian_update([[0, 1]], learning_rate=1.0, decay=0.5, floor=0.0),
        s.persist_relations(),
    ),
    "batch": lambda s, ids: _batch(s),
    "consolidate": lambda s, ids: Consolidator(event_ttl_days=1.0).run(s, now=T0 + 40 * DAY),
    "merged-fact": lambda s, ids: Consolidator().store_merged_fact(
        s, "Acme and Globex both audit SEO yearly", [ids["db"], ids["st"]],
        client_id="acme", now=T0 + 10, embedding=unit(7)),
}


def _batch(s):
    with s.batch():
        s.store("First of a batch about Stripe", source_agent="a", now=T0 + 10,
                embedding=unit(4))
        s.relate("Stripe", "uses", "Redis")
        s.store("Second of a batch about Stripe", source_agent="a", now=T0 + 11,
                embedding=unit(5))


@pytest.mark.parametrize("abort", [False, True], ids=["statement", "transaction"])
@pytest.mark.parametrize("name", sorted(OPS))
def test_every_failed_write_statement_leaves_the_store_unchanged(tmp_path, name, abort):
    path = tmp_path / "s"
    with MemoryStore(path, chroma=False) as store:
        ids = seed(store)
        real = store._db
        failures = 0
        for fail_at in range(1, 200):
            before = state(store)
            store._db = FaultyConnection(real, fail_at, abort=abort)
            try:
                OPS[name](store, ids)
            except StoreWriteError as exc:
                failures += 1
                assert str(path / "memlab.sqlite3") in str(exc)
                assert "database or disk is full" in str(exc)
                store._db = real
                assert not real.in_transaction
                assert state(store) == before, f"{name}: write {fail_at} left a trace"
                continue
            finally:
                store._db = real
            break
        else:
            pytest.fail(f"{name} never succeeded")
        assert failures >= 1
        assert memory_state(store) == reopened_state(path)
        # the next acknowledged write commits without a gap
        store.store("An acknowledged write after the failures", source_agent="a",
                    now=T0 + 50 * DAY, embedding=unit(3))
        after = memory_state(store)
    assert reopened_state(path) == after


BAD_STORES = {
    "embedding-length": dict(embedding=np.ones(3, dtype=np.float32)),
    "embedding-nan": dict(embedding=np.full(8, np.nan, dtype=np.float32)),
    "embedding-empty": dict(embedding=[]),
    "now-nan": dict(now=float("nan")),
    "now-inf": dict(now=float("inf")),
    "valid_from-nan": dict(valid_from=float("nan")),
    "now-garbage": dict(now="yesterday"),
    "metadata-object": dict(metadata={"x": object()}),
    "metadata-nan": dict(metadata={"x": float("nan")}),
}


@pytest.mark.parametrize("name", sorted(BAD_STORES))
def test_bad_store_input_changes_nothing_and_the_next_write_commits(tmp_path, name):
    path = tmp_path / "s"
    with MemoryStore(path, chroma=False) as store:
        seed(store)
        before = state(store)
        kwargs = {"now": T0 + 10, "embedding": unit(4), **BAD_STORES[name]}
        with pytest.raises((ValueError, TypeError)):
            store.store("Globex renewed the hosting contract", source_agent="a", **kwargs)
        assert state(store) == before
        store.store("Globex renewed the hosting contract", source_agent="a", now=T0 + 11,
                    embedding=unit(4))
        after = memory_state(store)
    assert reopened_state(path) == after  # no "memories table has a gap"


def test_embedder_of_the_wrong_dimension_changes_nothing(tmp_path):
    class Short:
        def embed(self, texts):
            return np.ones((len(texts), 3), dtype=np.float32)

    with MemoryStore(tmp_path / "s", chroma=False) as store:
        seed(store)
        before = state(store)
        store.embedder = Short()
        with pytest.raises(MemoryInputError, match="expected dimension 8, got 3"):
            store.store("Globex renewed the hosting contract", source_agent="a", now=T0 + 10)
        assert state(store) == before


BAD_CALLS = {
    "relate-same-entity": lambda s, ids: s.relate("Redis", "uses", "redis"),
    "relate-same-new-entity": lambda s, ids: s.relate("Zorblax", "uses", "zorblax"),
    "relate-bad-type": lambda s, ids: s.relate("Zorblax", "uses", "Quux", to_type=3),
    "correct-empty": lambda s, ids: s.correct(ids["db"], "   ", "typo", now=T0 + 10),
    "correct-bad-embedding": lambda s, ids: s.correct(
        ids["db"], "Acme runs MySQL", "typo", now=T0 + 10, embedding=np.ones(3)),
    "correct-now-nan": lambda s, ids: s.correct(
        ids["db"], "Acme runs MySQL", "typo", now=float("nan")),
    "forget-now-nan": lambda s, ids: s.forget(ids["ev"], "asked", now=float("nan")),
    "retire-bad-time": lambda s, ids: s.retire(ids["ev"], "expired", expired_at="soon"),
    "retire-fixed-field": lambda s, ids: s.retire(ids["ev"], "expired", id="other"),
    "retire-unserialisable": lambda s, ids: s.retire(ids["ev"], "x", metadata={"a": object()}),
    "save-unknown": lambda s, ids: s.save("nope", "x"),
    "touch-one-unknown": lambda s, ids: s.touch([ids["db"], "nope"], now=T0 + 10),
    "touch-string": lambda s, ids: s.touch(ids["db"], now=T0 + 10),
}


@pytest.mark.parametrize("name", sorted(BAD_CALLS))
def test_bad_calls_change_nothing(tmp_path, name):
    with MemoryStore(tmp_path / "s", chroma=False) as store:
        ids = seed(store)
        before = state(store)
        with pytest.raises((ValueError, TypeError, KeyError)):
            BAD_CALLS[name](store, ids)
        assert state(store) == before


def test_exception_inside_a_batch_rolls_back_memory_and_sqlite(tmp_path):
    path = tmp_path / "s"
    with MemoryStore(path, chroma=False) as store:
        seed(store)
        before = state(store)
        with pytest.raises(RuntimeError, match="boom"), store.batch():
            store.store("Batched write one about Stripe", source_agent="a", now=T0 + 10,
                        embedding=unit(4))
            store.relate("Stripe", "uses", "Kubernetes")
            store.forget(store.ids[0], "obsolete", now=T0 + 10)
            raise RuntimeError("boom")
        assert state(store) == before
        r = store.store("Acknowledged after the failed batch", source_agent="a",
                        now=T0 + 12, embedding=unit(5))
        after = memory_state(store)
    assert reopened_state(path) == after
    assert r.id in after["index"]


def test_a_failed_write_inside_a_batch_is_undone_alone(tmp_path):
    path = tmp_path / "s"
    with MemoryStore(path, chroma=False) as store:
        seed(store)
        real = store._db
        with store.batch():
            a = store.store("Kept write one", source_agent="a", now=T0 + 10, embedding=unit(4))
            store._db = FaultyConnection(real, 2)  # fails inside the next store()
            with pytest.raises(StoreWriteError):
                store.store("Lost write about Stripe", source_agent="a", now=T0 + 11,
                            embedding=unit(5))
            store._db = real
            assert "Lost write about Stripe" not in store.texts
            b = store.store("Kept write two", source_agent="a", now=T0 + 12, embedding=unit(6))
        after = memory_state(store)
    assert reopened_state(path) == after
    assert a.id in after["index"] and b.id in after["index"]
    assert len(after["records"]) == 6


def test_a_batch_whose_transaction_sqlite_aborted_refuses_more_writes(tmp_path):
    with MemoryStore(tmp_path / "s", chroma=False) as store:
        seed(store)
        before = state(store)
        real = store._db
        with pytest.raises(StoreWriteError, match="rolled back"), store.batch():
            store.store("Write one", source_agent="a", now=T0 + 10, embedding=unit(4))
            store._db = FaultyConnection(real, 1, abort=True)
            with pytest.raises(StoreWriteError, match="disk is full"):
                store.store("Write two", source_agent="a", now=T0 + 11, embedding=unit(5))
            store._db = real
            with pytest.raises(StoreWriteError, match="enclosing batch was rolled back"):
                store.store("Write three", source_agent="a", now=T0 + 12, embedding=unit(6))
        assert state(store) == before
        store.store("Write four", source_agent="a", now=T0 + 13, embedding=unit(6))


def test_failed_writes_never_reach_chromadb(tmp_path):
    path = tmp_path / "s"
    with MemoryStore(path) as store:
        seed(store)
        real = store._db
        store._db = FaultyConnection(real, 3)
        with pytest.raises(StoreWriteError):
            store.store("Never acknowledged", source_agent="a", now=T0 + 10, embedding=unit(4))
        store._db = real
        with pytest.raises(RuntimeError), store.batch():
            store.store("Rolled back too", source_agent="a", now=T0 + 11, embedding=unit(5))
            store.chroma_index()  # a flush inside a batch sends nothing
            raise RuntimeError
        assert store.check() == []
        assert sorted(store._chroma.ids()) == sorted(store.ids)


def test_a_chromadb_failure_never_fails_an_acknowledged_write(tmp_path, caplog):
    path = tmp_path / "s"
    with MemoryStore(path) as store:
        seed(store)
        chroma = store._chroma

        def broken(*args, **kwargs):
            raise RuntimeError("chroma is down")

        upsert = chroma.upsert
        chroma.upsert = broken
        r = store.store("Written while chromadb fails", source_agent="a", now=T0 + 10,
                        embedding=unit(4))
        store.store("And another one", source_agent="a", now=T0 + 11, embedding=unit(5))
        assert "chromadb update failed" in caplog.text
        chroma.upsert = upsert
    with MemoryStore(path) as again:
        assert r.id in again
        assert again.check() == []


def test_sqlite_error_is_translated_without_memory_text(tmp_path):
    secret_text = "Jean's home address is 12 Rue Secrète"
    with MemoryStore(tmp_path / "s", chroma=False) as store:
        store._db.execute("PRAGMA query_only = ON")  # a read-only database file
        with pytest.raises(StoreWriteError) as info:
            store.store(secret_text, source_agent="a", now=T0, embedding=unit(0))
        message = str(info.value)
        assert message.startswith(str(tmp_path / "s" / "memlab.sqlite3"))
        assert "readonly" in message
        assert "Rue" not in message and "Jean" not in message
        assert len(store) == 0
        store._db.execute("PRAGMA query_only = OFF")
        store.store(secret_text, source_agent="a", now=T0, embedding=unit(0))
        assert len(store) == 1


def test_integrity_error_inside_a_write_rolls_back(tmp_path):
    exc = sqlite3.IntegrityError("UNIQUE constraint failed: entities.idx")
    with MemoryStore(tmp_path / "s", chroma=False) as store:
        seed(store)
        before = state(store)
        store._db = FaultyConnection(store._db, 2, exc)
        with pytest.raises(StoreWriteError, match="UNIQUE constraint failed"):
            store.relate("Zorblax", "uses", "Quux")
        store._db = store._db.db
        assert state(store) == before


# --------------------------------------------------------------------------- random sequences
from hypothesis import HealthCheck, given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

WORDS = ("Acme", "Globex", "PostgreSQL", "Redis", "Next.js", "billing", "audit", "deploy")
OP = st.one_of(
    st.tuples(st.just("store"), st.sampled_from(("event", "fact", "status", "decision")),
              st.integers(0, 7), st.integers(0, 7), st.sampled_from("ab"),
              st.integers(0, 2)),
    st.tuples(st.just("relate"), st.integers(0, 7), st.integers(0, 7)),
    st.tuples(st.just("forget"), st.integers(0, 30)),
    st.tuples(st.just("correct"), st.integers(0, 30), st.integers(0, 7)),
    st.tuples(st.just("touch"), st.integers(0, 30)),
    st.tuples(st.just("batch"), st.integers(0, 7), st.booleans()),
    st.tuples(st.just("restore"), st.integers(0, 30)),
    st.tuples(st.just("purge"), st.integers(0, 30)),
)


def _apply(store, op, clock):
    kind = op[0]
    ids = store.ids
    if kind == "store":
        _, type_, a, b, agent, dim = op
        store.store(f"{WORDS[a]} and {WORDS[b]} note", type_, source_agent=agent,
                    key=f"k{a}" if type_ in ("fact", "decision") else None,
                    subject=f"s{b}" if type_ == "status" else None,
                    now=clock, embedding=unit(a + b, dim=8 + dim))
    elif kind == "relate":
        store.relate(WORDS[op[1]], "uses", WORDS[op[2]])
    elif kind == "forget" and ids:
        store.forget(ids[op[1] % len(ids)], "asked", now=clock)
    elif kind == "correct" and ids:
        store.correct(ids[op[1] % len(ids)], f"corrected {WORDS[op[2]]}", "fix", now=clock,
                      embedding=unit(op[2]))
    elif kind == "touch" and ids:
        store.touch([ids[op[1] % len(ids)]], now=clock)
    elif kind == "restore" and ids:
        store.restore(ids[op[1] % len(ids)], now=clock)
    elif kind == "purge" and ids:
        store.purge(ids[op[1] % len(ids)], now=clock)
    elif kind == "batch":
        with store.batch():
            store.store(f"batched {WORDS[op[1]]}", source_agent="a", now=clock,
                        embedding=unit(op[1]))
            store.relate(WORDS[op[1]], "works_on", "Zeta")
            if op[2]:
                raise RuntimeError("inside the batch")


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(ops=st.lists(st.tuples(OP, st.integers(0, 6)), min_size=1, max_size=12))
def test_random_writes_with_random_faults_keep_memory_equal_to_sqlite(ops):
    store = MemoryStore(chroma=False)
    real = store._db
    for step, (op, fail_at) in enumerate(ops):
        before = state(store)
        store._db = FaultyConnection(real, fail_at) if fail_at else real
        try:
            _apply(store, op, T0 + step)
        except (ValueError, TypeError, RuntimeError):
            store._db = real
            assert state(store) == before, (op, fail_at)
        finally:
            store._db = real
        assert not real.in_transaction
        _check_slots(store, op)
        now = memory_state(store)
        store._reload()  # the state a reopen builds from SQLite
        assert memory_state(store) == now, op


def _check_slots(store, op):
    """One active fact per key and one active status per subject (in a client's namespace),
    and every slot held by the active memory it names."""
    seen = set()
    for rec in store._records:
        if not rec.active:
            continue
        for kind, name in (("fact", rec.key), ("status", rec.subject)):
            if rec.type == kind and name is not None:
                slot = (kind, rec.client_id, rec.scope, name)
                assert slot not in seen, (op, slot)
                seen.add(slot)
    for table in (store._dedup, store._by_key, store._by_subject):
        for slot, idx in table.items():
            rec = store._records[idx]
            assert rec.active and slot[:2] == (rec.client_id, rec.scope), (op, slot)


# --------------------------------------------------------------------------- deferred SQLite
@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(ops=st.lists(st.tuples(OP, st.integers(0, 6)), min_size=1, max_size=12))
def test_a_store_deferring_sqlite_behaves_as_one_that_does_not(ops):
    """Step for step, a store that queues its SQLite writes holds what a store that runs them
    holds — after failed batches too — and SQLite, once read, agrees with both."""
    plain, deferred = MemoryStore(chroma=False), MemoryStore(chroma=False, defer_sqlite=True)
    for step, (op, _) in enumerate(ops):
        outcomes = []
        for store in (plain, deferred):
            try:
                _apply(store, op, T0 + step)
                outcomes.append(None)
            except (ValueError, TypeError, RuntimeError) as exc:
                outcomes.append(type(exc))
        assert outcomes[0] == outcomes[1], op
        assert memory_state(deferred) == memory_state(plain), op
    deferred._exec("SELECT 1")  # a read applies the queue
    assert deferred._deferred == []
    assert sql_state(deferred) == sql_state(plain)
    for mid in plain.ids:
        assert deferred.history(mid).equals(plain.history(mid))
    now = memory_state(deferred)
    deferred._reload()
    assert memory_state(deferred) == now


def test_a_deferred_read_inside_a_batch_sees_its_writes_and_keeps_them_pending():
    store = MemoryStore(chroma=False, defer_sqlite=True)
    first = store.store("Acme runs PostgreSQL", now=T0, embedding=unit(0)).id
    with pytest.raises(RuntimeError), store.batch():
        second = store.store("Globex runs Redis", now=T0 + 1, embedding=unit(1)).id
        assert store.history(second)["change"].to_list() == ["created"]  # read in the batch
        assert len(store._deferred) > 0  # still pending: the batch may fail
        raise RuntimeError("the batch fails after the read")
    assert store.ids == [first]
    assert store._exec("SELECT count(*) FROM memories").fetchall() == [(1,)]
    assert store.history(first)["change"].to_list() == ["created"]


def test_defer_sqlite_is_for_stores_in_memory(tmp_path):
    with pytest.raises(MemoryInputError, match="defer_sqlite=True is for a store in memory"):
        MemoryStore(tmp_path / "s", defer_sqlite=True)
