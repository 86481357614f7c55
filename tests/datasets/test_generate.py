"""The shipped agent-memories dataset: reproducible, valid, and built as its tags promise."""

from __future__ import annotations

import re
from collections import Counter
from pathlib import Path

import pytest

from memlab.datasets.format import Dataset, MemoryOp, load_dataset
from memlab.datasets.generate import (
    CLIENT_PROFILES,
    MULTI_HOP,
    PARAPHRASE,
    PRIMARY_TAGS,
    AgentMemorySimulator,
    generate_dataset,
)
from memlab.datasets.validate import validate_dataset
from memlab.timeutil import SECONDS_PER_DAY

SHIPPED = Path(__file__).resolve().parents[2] / "datasets" / "agent-memories"
FILES = ("dataset.toml", "memories.jsonl", "queries.jsonl", "README.md")
STOP = frozenset(
    """a an the and or but if then so of to in on at by for with from as is are was were be been
    do does did what why how when where who which can can't our we us their they them its it
    this that these those up off over into out any some more most much not no get s""".split()
)


@pytest.fixture(scope="module")
def shipped() -> Dataset:
    return load_dataset(SHIPPED)


@pytest.fixture(scope="module")
def stores(shipped: Dataset) -> dict[str, MemoryOp]:
    return {op.id: op for op in shipped.ops if op.op == "store"}


def words(text: str) -> set[str]:
    return {w for w in re.findall(r"[a-z0-9]+", text.lower()) if w not in STOP}


def by_tag(ds: Dataset, tag: str) -> list:
    return [q for q in ds.queries if q.tags[0] == tag]


def test_regenerating_seed_7_reproduces_the_committed_bytes(tmp_path: Path) -> None:
    generate_dataset(7, tmp_path / "agent-memories")
    for name in FILES:
        assert (tmp_path / "agent-memories" / name).read_bytes() == (SHIPPED / name).read_bytes()


def test_shipped_dataset_is_valid_and_small() -> None:
    assert validate_dataset(SHIPPED) == []
    assert sum(p.stat().st_size for p in SHIPPED.iterdir()) < 3_000_000


def test_sizes_and_tags(shipped: Dataset) -> None:
    assert len(shipped.stores()) >= 2000
    assert len(shipped.queries) >= 300
    primary = Counter(q.tags[0] for q in shipped.queries)
    assert set(primary) == set(PRIMARY_TAGS)
    assert min(primary.values()) >= 25
    for q in shipped.queries:
        assert sum(t in PRIMARY_TAGS for t in q.tags) == 1
    ops = Counter(op.op for op in shipped.ops)
    assert ops["forget"] > 0 and ops["relate"] > 0
    assert {op.fields["source_agent"] for op in shipped.stores()} == {
        "claude-code", "support-bot", "ops-agent", "sales-agent", "consolidation-engine",
    }  # fmt: skip
    clients = Counter(op.fields["client_id"] for op in shipped.stores())
    assert len(clients) == 7 and "global" in clients


def test_queries_are_interleaved_over_the_timeline(shipped: Dataset) -> None:
    start = shipped.ops[0].ts
    months = Counter(int((q.ts - start) / (30.5 * SECONDS_PER_DAY)) for q in shipped.queries)
    assert all(months[m] >= 5 for m in range(6))


def test_relevant_events_do_not_expire_before_their_query(
    shipped: Dataset, stores: dict[str, MemoryOp]
) -> None:
    for q in shipped.queries:
        if q.tags[0] == "ttl":
            continue
        for mid in q.relevant:
            mem = stores[mid]
            if mem.type == "event" and mem.fields.get("importance", "medium") in ("low", "medium"):
                assert q.ts - mem.ts < 28 * SECONDS_PER_DAY, q.qid


def test_no_accidental_duplicates(shipped: Dataset) -> None:
    seen = Counter((op.fields["client_id"], op.type, op.text) for op in shipped.stores())
    dedup_texts = set()
    for q in by_tag(shipped, "dedup"):
        first = next(op for op in shipped.stores() if op.id in q.relevant)
        dedup_texts.add((first.fields["client_id"], first.type, first.text))
    assert {k for k, n in seen.items() if n > 1} == dedup_texts


def test_paraphrase_table_shares_no_words_and_decoys_do() -> None:
    assert len(PARAPHRASE) >= 32
    for _, memory, query, decoy, _, _ in PARAPHRASE:
        assert words(query) & words(memory) == set(), query
        assert len(words(query) & words(decoy)) >= 2, query


def test_paraphrase_queries(shipped: Dataset, stores: dict[str, MemoryOp]) -> None:
    pairs = {q_text: memory for _, memory, q_text, _, _, _ in PARAPHRASE}
    for q in by_tag(shipped, "paraphrase"):
        [mid] = q.relevant
        assert stores[mid].text == pairs[q.text]


def test_exact_id_queries(shipped: Dataset, stores: dict[str, MemoryOp]) -> None:
    forgotten = {op.target for op in shipped.ops if op.op == "forget"}
    ident = re.compile(r"(?:INC|INV|ERR|ORD|PO|BLD|CVE)-[\d-]+|\$\d+,\d+")
    for q in by_tag(shipped, "exact-id"):
        [mid] = q.relevant
        [token] = ident.findall(q.text)
        target = stores[mid]
        holders = [op.id for op in shipped.stores() if token in op.text and op.id not in forgotten]
        assert holders == [mid]
        family = [
            op
            for op in shipped.stores()
            if op.id != mid
            and op.fields["client_id"] == target.fields["client_id"]
            and op.ts < q.ts
            and len(words(op.text) & words(target.text)) / len(words(op.text) | words(target.text))
            >= 0.5
        ]
        assert len(family) >= 7, q.qid
        if "forget" in q.tags:
            [wrong] = q.stale
            assert token in stores[wrong].text and wrong in forgotten


def test_multi_hop_queries(shipped: Dataset, stores: dict[str, MemoryOp]) -> None:
    relates = [op for op in shipped.ops if op.op == "relate"]
    seen = 0
    for q in by_tag(shipped, "multi-hop"):
        [mid] = q.relevant
        text = stores[mid].text
        client = next(c for c in CLIENT_PROFILES if c.id == q.client_id)
        slots = client.slots()
        matches = [
            (slots[a], slots[b], relation)
            for _, relation, a, b, _, _, _ in MULTI_HOP
            if slots[a] in q.text and slots[b] in text
        ]
        assert len(matches) == 1, q.qid
        a, b, relation = matches[0]
        assert a not in text and b not in q.text
        via_relate = any(
            (r.from_entity, r.relation, r.to_entity) == (a, relation, b) and r.ts < q.ts
            for r in relates
        )
        via_memory = any(
            a in op.text and b in op.text and op.ts < q.ts and op.id != mid
            for op in shipped.stores()
        )
        mode = next(t for t in q.tags if t.startswith("via:"))
        assert (via_relate, via_memory) == {
            "via:relate": (True, False),
            "via:co-occurrence": (False, True),
            "via:both": (True, True),
        }[mode]
        seen += 1
    assert seen >= 25


def _chain(shipped: Dataset, q_ts: float, client: str, field: str, value: str) -> list[MemoryOp]:
    return [
        op
        for op in shipped.stores()
        if op.fields["client_id"] == client and op.fields.get(field) == value and op.ts <= q_ts
    ]


def test_supersession_queries(shipped: Dataset, stores: dict[str, MemoryOp]) -> None:
    for q in by_tag(shipped, "supersession"):
        [mid] = q.relevant
        current = stores[mid]
        chain = _chain(shipped, q.ts, q.client_id, "key", current.fields["key"])
        assert chain[-1].id == mid and current.type == "fact"
        assert list(q.stale) == [op.id for op in chain[:-1]] and q.stale


def test_status_queries(shipped: Dataset, stores: dict[str, MemoryOp]) -> None:
    forgotten = {op.target for op in shipped.ops if op.op == "forget"}
    for q in by_tag(shipped, "status"):
        [mid] = q.relevant
        latest = stores[mid]
        chain = _chain(shipped, q.ts, q.client_id, "subject", latest.fields["subject"])
        assert chain[-1].id == mid and latest.type == "status"
        assert sorted(q.stale) == sorted(op.id for op in chain[:-1])
        assert q.answer == latest.fields["status_value"]
        assert ("forget" in q.tags) == any(s in forgotten for s in q.stale)


def test_temporal_queries(shipped: Dataset, stores: dict[str, MemoryOp]) -> None:
    for q in by_tag(shipped, "temporal"):
        [mid] = q.relevant
        valid = stores[mid]
        field = "subject" if valid.type == "status" else "key"
        chain = _chain(shipped, q.ts, q.client_id, field, valid.fields[field])
        ids = [op.id for op in chain]
        i = ids.index(mid)
        assert i < len(chain) - 1
        assert valid.ts <= q.at_time < chain[i + 1].ts
        assert sorted(q.stale) == sorted(ids[:i] + ids[i + 1 :])


def test_ttl_queries(shipped: Dataset, stores: dict[str, MemoryOp]) -> None:
    for q in by_tag(shipped, "ttl"):
        [mid] = q.relevant
        [old] = q.stale
        event, keep = stores[old], stores[mid]
        assert event.type == "event" and event.fields["importance"] in ("low", "medium")
        assert q.ts - event.ts > 30 * SECONDS_PER_DAY
        assert keep.type in ("fact", "decision") and keep.fields["importance"] == "high"
        assert keep.fields["client_id"] == event.fields["client_id"] == q.client_id


def test_dedup_queries(shipped: Dataset, stores: dict[str, MemoryOp]) -> None:
    for q in by_tag(shipped, "dedup"):
        [mid] = q.relevant
        first = stores[mid]
        same = [
            op
            for op in shipped.stores()
            if (op.text, op.type, op.fields["client_id"])
            == (first.text, first.type, first.fields["client_id"])
        ]
        assert same[0].id == mid and len(same) >= 2 and all(op.ts < q.ts for op in same)
        agents = [op.fields["source_agent"] for op in same[1:]]
        origin = first.fields["source_agent"]
        pattern = next(t for t in q.tags if t.startswith("dup:"))
        assert (
            pattern
            == {
                (True, False): "dup:same-agent",
                (False, True): "dup:cross-agent",
                (True, True): "dup:both",
            }[(origin in agents, any(a != origin for a in agents))]
        )


def test_scope_queries(shipped: Dataset, stores: dict[str, MemoryOp]) -> None:
    for q in by_tag(shipped, "scope"):
        [mid] = q.relevant
        assert stores[mid].fields["client_id"] == q.client_id
        others = {stores[s].fields["client_id"] for s in q.stale}
        assert others == {c.id for c in CLIENT_PROFILES[:6]} - {q.client_id}
        suffix = stores[mid].fields["key"].removeprefix(q.client_id)
        assert all(stores[s].fields["key"].endswith(suffix) for s in q.stale)
        client = next(c for c in CLIENT_PROFILES if c.id == q.client_id)
        assert client.id not in q.text and client.display not in q.text


def test_credential_queries(shipped: Dataset, stores: dict[str, MemoryOp]) -> None:
    secret = re.compile(
        r"(?:password[=:] ?|api_key=|Bearer |webhook_secret=|://[a-z_]+:)([A-Za-z0-9]{16,})"
    )
    for q in by_tag(shipped, "credential"):
        [mid] = q.relevant
        [value] = secret.findall(stores[mid].text)
        assert value not in q.answer and value not in q.text
        assert stores[mid].fields["metadata"]["contains_secret"] == q.tags[2].removeprefix(
            "secret:"
        )


def test_forgotten_memories_are_stale_later(shipped: Dataset) -> None:
    forgotten = {op.target: op.ts for op in shipped.ops if op.op == "forget"}
    tagged = [q for q in shipped.queries if "forget" in q.tags]
    assert len(tagged) >= 5
    for q in tagged:
        assert any(s in forgotten and forgotten[s] < q.ts for s in q.stale)


def test_small_configuration_is_valid_and_seeded(tmp_path: Path) -> None:
    kw = {"n_clients": 2, "queries_per_tag": 3, "n_memories": 250}
    a = generate_dataset(11, tmp_path / "a", **kw)
    b = generate_dataset(11, tmp_path / "b", **kw)
    c = generate_dataset(12, tmp_path / "c", **kw)
    assert validate_dataset(tmp_path / "a") == []
    assert a.sha256() == b.sha256() != c.sha256()
    assert len(a.stores()) == 250
    assert Counter(q.tags[0] for q in a.queries) == dict.fromkeys(PRIMARY_TAGS, 3)


@pytest.mark.parametrize(
    ("kw", "message"),
    [
        ({"n_clients": 0}, "n_clients"),
        ({"n_clients": 1, "queries_per_tag": 20}, "queries_per_tag=20"),
        ({"max_query_lag_days": 29.0}, "max_query_lag_days"),
        ({"months": 3}, "timeline"),
    ],
)
def test_impossible_parameters(kw: dict, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        AgentMemorySimulator(**kw).simulate(1)
