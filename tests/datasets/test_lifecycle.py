"""The shipped agent-lifecycle dataset: reproducible, valid, and built as its tags promise."""

from __future__ import annotations

from collections import Counter
from pathlib import Path

from memlab.datasets.format import load_dataset
from memlab.datasets.lifecycle import generate_lifecycle_dataset
from memlab.embed import HashingEmbedder
from memlab.eval.replay import ReplayConfig, Replayer
from memlab.memory.scopes import Principal
from memlab.pipeline import Pipeline
from memlab.stages.dense import Dense

SHIPPED = Path(__file__).resolve().parents[2] / "datasets" / "agent-lifecycle"
FILES = ("dataset.toml", "memories.jsonl", "queries.jsonl", "README.md")


def test_regenerates_byte_for_byte(tmp_path):
    generate_lifecycle_dataset(7, tmp_path / "out")
    for name in FILES:
        assert (tmp_path / "out" / name).read_bytes() == (SHIPPED / name).read_bytes(), name


def test_scenarios_and_declared_replay_defaults():
    ds = load_dataset(SHIPPED)
    assert Counter(q.tags[0] for q in ds.queries) == {
        "authority": 8, "recency": 8, "multi": 4, "merge": 4, "long_gap": 4, "scope": 4
    }
    assert all(len(q.relevant) == 3 for q in ds.queries if q.tags[0] == "multi")
    stores = {op.id: op for op in ds.ops if op.op == "store"}
    for q in ds.queries:
        if q.tags[0] == "authority":
            [good], [bad] = list(q.relevant), list(q.stale)
            assert stores[good].fields["authority"] == "human"
            assert stores[bad].fields["authority"] == "inferred"
            assert stores[bad].fields["metadata"]["contradicts"] == good
            assert stores[good].fields.get("key") is None
        if q.tags[0] == "long_gap":
            [mid] = list(q.relevant)
            assert q.ts - stores[mid].ts > 230 * 86_400
    cfg = ReplayConfig.from_dataset(ds)
    assert (cfg.conflict_policy, cfg.consolidation.interval_hours, cfg.forget_retention_days) == (
        "authority", 6.0, 30.0)


def test_namespaces_are_the_scope_field_and_agents_can_read_their_answers():
    ds = load_dataset(SHIPPED)
    stores = {op.id: op for op in ds.ops if op.op == "store"}
    assert all("scope" not in op.fields.get("metadata", {}) for op in stores.values())
    kinds = Counter((op.fields.get("scope") or "team").split(":")[0] for op in stores.values())
    assert set(kinds) == {"team", "agent", "project"} and min(kinds.values()) >= 20
    asked = [q for q in ds.queries if q.agent is not None]
    assert {q.tags[0] for q in asked} == {"multi", "merge", "long_gap", "scope"}
    for q in asked:
        reader = q.principal()
        assert isinstance(reader, Principal) and reader.projects == (f"{q.client_id}-web",)
        assert all(reader.can_read(stores[m].fields.get("scope", "team")) for m in q.relevant)
        if q.tags[0] == "scope":
            [hidden] = q.stale
            assert not reader.can_read(stores[hidden].fields["scope"])
    multi = [q for q in asked if q.tags[0] == "multi"]
    assert all(
        sorted(stores[m].fields["scope"].split(":")[0] for m in q.relevant)
        == ["agent", "project", "team"]
        for q in multi
    )


def test_forgotten_memories_are_purged_30_days_later_on_the_replay_clock():
    ds = load_dataset(SHIPPED)
    forgets = {op.target: op.ts for op in ds.ops if op.op == "forget"}
    assert len(forgets) == 8
    last = max(q.ts for q in ds.queries)
    due = sorted((ts + 30 * 86_400, mid) for mid, ts in forgets.items() if ts + 30 * 86_400 <= last)
    cfg = ReplayConfig.from_dataset(ds).with_params(
        consolidation__interval_hours=None, conflict_policy=None
    )
    res = Replayer(ds, embedder=HashingEmbedder(dim=64), progress=False, config=cfg).run(
        Pipeline([("dense", Dense())], name="dense")
    )
    assert len(due) == 8 and res.purged == due
    assert all(res.store.get(mid).text == "" for _, mid in due)
