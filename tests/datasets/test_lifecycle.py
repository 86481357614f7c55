"""The shipped agent-lifecycle dataset: reproducible, valid, and built as its tags promise."""

from __future__ import annotations

from collections import Counter
from pathlib import Path

from memlab.datasets.format import load_dataset
from memlab.datasets.lifecycle import generate_lifecycle_dataset
from memlab.eval.replay import ReplayConfig

SHIPPED = Path(__file__).resolve().parents[2] / "datasets" / "agent-lifecycle"
FILES = ("dataset.toml", "memories.jsonl", "queries.jsonl", "README.md")


def test_regenerates_byte_for_byte(tmp_path):
    generate_lifecycle_dataset(7, tmp_path / "out")
    for name in FILES:
        assert (tmp_path / "out" / name).read_bytes() == (SHIPPED / name).read_bytes(), name


def test_scenarios_and_declared_replay_defaults():
    ds = load_dataset(SHIPPED)
    assert Counter(q.tags[0] for q in ds.queries) == {
        "authority": 8, "recency": 8, "multi": 4, "merge": 4, "long_gap": 4
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
    assert (cfg.conflict_policy, cfg.consolidation.interval_hours) == ("authority", 6.0)
