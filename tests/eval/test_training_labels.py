"""Learned stages are fitted on the labels the run scores with (inline and judged)."""

from __future__ import annotations

import json
from pathlib import Path

from memlab.datasets.format import load_dataset
from memlab.embed import HashingEmbedder
from memlab.eval.experiment import run_experiment, training_labels
from memlab.eval.replay import Replayer

META = 'name = "judged"\nversion = "1"\ndescription = "test"\nlicense = "CC0"\nsource = "hand"\n'
TOPICS = ["invoices", "tokens", "deploys", "backups", "alerts", "billing", "search", "login"]


def _judged_dataset(root: Path) -> Path:
    """Eight queries, none with inline ``relevant``; each judged by a human: its memory 2,
    the distractor 0; query ``q0`` also has an agent's grade."""
    root.mkdir()
    (root / "dataset.toml").write_text(META)
    memories, queries, judgments = [], [], []
    for i, topic in enumerate(TOPICS):
        memories.append({"id": f"m{i}", "ts": "2026-05-01T00:00:00Z", "type": "fact",
                         "text": f"Note {i}: the {topic} service is owned by team {i}.",
                         "client_id": "t"})
        queries.append({"qid": f"q{i}", "ts": "2026-06-01T00:00:00Z",
                        "text": f"who owns {topic}", "client_id": "t", "relevant": {},
                        "tags": []})
        judgments.append({"qid": f"q{i}", "mem_id": f"m{i}", "grade": 2, "source": "human",
                          "judge": "ann", "ts": "2026-06-02T00:00:00Z"})
        judgments.append({"qid": f"q{i}", "mem_id": f"m{(i + 1) % 8}", "grade": 0,
                          "source": "human", "judge": "ann", "ts": "2026-06-02T00:00:00Z"})
    judgments.append({"qid": "q0", "mem_id": "m5", "grade": 1, "source": "agent",
                      "judge": "bot", "ts": "2026-06-02T00:00:00Z"})
    for name, rows in (("memories", memories), ("queries", queries),
                       ("judgments", judgments)):
        (root / f"{name}.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    return root


def test_training_labels_are_the_runs_qrels(tmp_path: Path) -> None:
    ds = load_dataset(_judged_dataset(tmp_path / "d"))
    replayer = Replayer(ds, embedder=HashingEmbedder(dim=32), progress=False)
    assert training_labels(replayer) == {f"q{i}": [f"m{i}"] for i in range(8)}
    replayer.qrels_source = "agent"  # the agent's feedback alone
    assert training_labels(replayer) == {"q0": ["m5"]}


def test_a_learned_pipeline_trains_on_a_dataset_judged_in_judgments_jsonl(tmp_path: Path) -> None:
    ds = load_dataset(_judged_dataset(tmp_path / "d"))
    res = run_experiment(ds, ["conversational-ltr"], embedder=HashingEmbedder(dim=32),
                         folds=2, executor="serial", progress=False)
    # fitted on the judged labels (there are no others), then scored with them: the client's
    # eight memories all fit in the top 10
    assert res.metrics["conversational-ltr"]["R_all@10"] == 1.0
