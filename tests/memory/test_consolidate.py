import numpy as np
import pytest

from memlab.memory.consolidate import Consolidator, expire_events
from memlab.memory.store import MemoryStore

DAY = 86_400.0
T0 = 1_767_225_600.0


def test_event_ttl_cleanup_follows_seed_rules():
    store = MemoryStore()
    old_low = store.store("Ran the nightly job", source_agent="a", importance="low", now=T0)
    old_high = store.store("Outage postmortem", source_agent="a", importance="high", now=T0)
    old_read = store.store("Rotated the logs", source_agent="a", now=T0)
    young = store.store("Cleared the cache", source_agent="a", now=T0 + 20 * DAY)
    fact = store.store("Cache TTL is 5 min", "fact", source_agent="a", key="ttl", now=T0)
    store.touch([old_read.id], now=T0 + DAY)
    expired = expire_events(store, now=T0 + 31 * DAY)
    assert expired == [old_low.id]
    assert store.get(old_low.id).expired_at == T0 + 31 * DAY
    assert not store.get(old_low.id).active
    for kept in (old_high, old_read, young, fact):
        assert store.get(kept.id).active
    assert expire_events(store, now=T0 + 31 * DAY, event_ttl_days=10) == [young.id]


def test_reclassifies_general_only_and_marks_consolidated():
    store = MemoryStore()
    a = store.store("Migrated the database server to PostgreSQL", source_agent="a", now=T0)
    b = store.store("Brand voice guideline: friendly", source_agent="a",
                    knowledge_category="strategy", now=T0)
    c = store.store("Lunch was nice", source_agent="a", now=T0)
    report = Consolidator().run(store, now=T0 + DAY)
    assert report.reclassified == {a.id: "technical"}
    assert store.get(b.id).knowledge_category == "strategy"
    assert store.get(c.id).knowledge_category == "general"
    assert all(store.get(m.id).consolidated for m in (a, b, c))
    assert report.processed == 3


def test_hebbian_upkeep_strengthens_co_occurring_and_decays_the_rest():
    store = MemoryStore()
    store.store("Redis and Kubernetes in prod", source_agent="a", now=T0)
    r = store.graph.find("Redis")
    k = store.graph.find("Kubernetes")
    ag = store.graph.find("a")
    assert store.graph.strength(r, k, "co_occurrence") == 1.0
    Consolidator(hebbian_rate=1.0, hebbian_decay=0.5).run(store, now=T0 + DAY)
    # co-activated this cycle: (1 + 1) then decayed by 0.5 — or decayed then boosted;
    # the graph documents the order; both edges here were co-activated, so they agree.
    after = store.graph.strength(r, k, "co_occurrence")
    assert after == store.graph.strength(ag, r, "co_occurrence")
    Consolidator(hebbian_rate=1.0, hebbian_decay=0.5).run(store, now=T0 + 2 * DAY)
    assert store.graph.strength(r, k, "co_occurrence") == pytest.approx(after * 0.5)
    with MemoryStore() as _:
        pass


def test_merged_fact_goes_through_exact_and_semantic_dedup():
    store = MemoryStore()
    v = np.array([1.0, 0.0, 0.0], dtype=np.float32)
    near = np.array([0.95, np.sqrt(1 - 0.95**2), 0.0], dtype=np.float32)
    far = np.array([0.0, 1.0, 0.0], dtype=np.float32)
    s1 = store.store("Acme pays net 30", source_agent="a", client_id="acme", now=T0, embedding=v)
    cons = Consolidator()
    assert cons.store_merged_fact(store, "Acme pays net 30", [s1.id], client_id="acme",
                                  now=T0 + 1, embedding=far) is None
    assert cons.store_merged_fact(store, "Acme pays in 30 days", [s1.id], client_id="acme",
                                  now=T0 + 1, embedding=near) is None
    res = cons.store_merged_fact(store, "Acme invoices are due in 30 days", [s1.id],
                                 client_id="acme", now=T0 + 2, embedding=far)
    assert res is not None
    merged = store.get(res.id)
    assert (merged.type, merged.source_agent) == ("fact", "consolidation-engine")
    assert store.get(s1.id).superseded_by == res.id
    assert not store.get(s1.id).active


def test_a_cycle_over_one_scope_leaves_the_shared_graph_alone():
    from memlab.embed import HashingEmbedder
    from memlab.memory.consolidate import consolidate_scope
    from memlab.memory.store import MemoryStore

    store = MemoryStore(embedder=HashingEmbedder(dim=32))
    store.store("Acme uses Postgres for billing", "fact", key="acme-db", now=1.7e9)
    store.store("Hera notes Acme pays late", "fact", key="late", scope="agent:hera", now=1.7e9)
    before = store.graph.edge_rows()
    assert any(rel == "co_occurrence" for _, _, rel, _ in before)
    for i in range(30):  # an agent consolidating its own scope, again and again
        consolidate_scope(store, now=1.7e9 + 60 * (i + 1), scope="agent:hera")
    assert store.graph.edge_rows() == before
    # a cycle over every scope decays co-occurrence by the consolidator's 0.98, and the team
    # memory it processes co-activates its two entities (learning rate 1.0)
    consolidate_scope(store, now=1.7e9 + 3600)
    assert [w for _, _, r, w in store.graph.edge_rows() if r == "co_occurrence"] == [
        1.0 * 0.98 + 1.0
    ]


def test_a_cycle_over_one_client_leaves_the_shared_graph_alone():
    from memlab.embed import HashingEmbedder
    from memlab.memory.consolidate import consolidate_scope
    from memlab.memory.store import MemoryStore

    store = MemoryStore(embedder=HashingEmbedder(dim=32))
    store.store("Acme uses Postgres for billing", "fact", client_id="acme", now=1.7e9)
    store.store("Globex uses Postgres for billing", "fact", client_id="globex", now=1.7e9)
    before = store.graph.edge_rows()
    report = consolidate_scope(store, now=1.7e9 + 60, client_id="acme")  # a human of acme
    assert report.processed == 1
    assert store.graph.edge_rows() == before  # globex's edges (shared entities) untouched


class _MergeAll:
    """A merger that joins every batch it is given into one fact (what scope it sees is the
    test's question)."""

    def __init__(self) -> None:
        self.batches: list[list[str]] = []

    def merge(self, texts):
        self.batches.append(list(texts))
        return [(" + ".join(texts), list(range(len(texts))))] if len(texts) > 1 else []


def test_memories_merge_only_within_their_client_and_scope():
    from memlab.embed import HashingEmbedder

    store = MemoryStore(embedder=HashingEmbedder(dim=64))
    for i, scope in enumerate(["agent:hera", "agent:hera", "agent:atlas", "team"]):
        store.store(f"billing note {i}", "fact", source_agent="x", scope=scope, client_id="acme",
                    now=T0 + i)
    store.store("billing note 9", "fact", source_agent="x", scope="agent:hera",
                client_id="globex", now=T0 + 9)
    merger = _MergeAll()
    report = Consolidator(merger=merger).run(store, now=T0 + DAY)
    # one batch per (client, scope), sorted: (acme, agent:atlas), (acme, agent:hera), (acme,
    # team), (globex, agent:hera); only hera's two acme notes can merge
    assert merger.batches == [["billing note 2"], ["billing note 0", "billing note 1"],
                              ["billing note 3"], ["billing note 9"]]
    (merged,) = report.merged
    assert (store.get(merged).scope, store.get(merged).client_id) == ("agent:hera", "acme")
    assert store.get(merged).text == "billing note 0 + billing note 1"


def test_classify_counts_distinct_word_bounded_keywords_and_keeps_the_first_on_ties():
    rules = {
        "ops": ["deploy", "server", "c++"],
        "people": ("team", "hire"),
        "money": ("budget",),
    }
    c = Consolidator(category_keywords=rules)
    # two distinct "ops" words (a repeated word counts once) against one "people" word
    assert c.classify("Deploy the server, then deploy again; the team waits") == "ops"
    # "deployment" and "servers" are not the words "deploy" and "server"
    assert c.classify("The deployment servers need the team to hire") == "people"
    # one hit each: the first category in the rules' order wins
    assert c.classify("The budget for the server") == "ops"
    assert c.classify("A budget for the team") == "people"
    # keywords are matched literally (regex characters escaped), case-insensitively
    assert c.classify("Rewrote it in C++ last week") == "ops"
    assert c.classify("Rewrote it in C last week") is None
    assert c.classify("Nothing relevant here") is None
    # the same keywords under another instance give the same answers (rules compiled once)
    assert Consolidator(category_keywords=dict(rules)).classify("BUDGET review") == "money"
    # keywords given in capitals match as well
    assert Consolidator(category_keywords={"db": ("PostgreSQL",)}).classify("on postgresql") == "db"
