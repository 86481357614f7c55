"""Valid but degenerate datasets through sweeps, tuning and reports: no query with a relevant
memory, a single query, every grid point tied. Each builds its dataset in ``tmp_path``."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from memlab.embed import HashingEmbedder
from memlab.eval.experiment import run_experiment
from memlab.eval.report import render_specs, sanitize_spec
from memlab.eval.sweep import run_sweep
from memlab.eval.tune import parse_space, run_tune

META = 'name = "{name}"\nversion = "1"\ndescription = "d"\nlicense = "CC0"\nsource = "hand"\n'


def _dataset(root: Path, name: str, memories: list[dict], queries: list[dict]) -> Path:
    root.mkdir(parents=True)
    (root / "dataset.toml").write_text(META.format(name=name), encoding="utf-8")
    for file, rows in (("memories.jsonl", memories), ("queries.jsonl", queries)):
        (root / file).write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    return root


def _no_relevant(root: Path) -> Path:
    """Two memories, four queries, none with a relevant memory (one has a stale list)."""
    memories = [
        {"id": "z1", "ts": "2026-01-01T00:00:00Z", "type": "fact", "text": "Something."},
        {"id": "z2", "ts": "2026-01-01T00:00:00Z", "type": "fact", "text": "Another thing."},
    ]
    queries = [
        {"qid": f"n{i}", "ts": "2026-01-02T00:00:00Z", "text": "something", "relevant": {},
         "tags": []}
        for i in range(4)
    ]
    queries[0]["stale"] = ["z1"]
    return _dataset(root, "no-relevant", memories, queries)


def _single(root: Path) -> Path:
    memories = [{"id": "a", "ts": "2030-01-01T00:00:00Z", "type": "fact",
                 "text": "The only memory.", "client_id": "solo"}]
    # no word in common with the memory: BM25 finds nothing, dense ranks every memory
    queries = [{"qid": "only", "ts": "2030-01-02T00:00:00Z", "text": "sole record",
                "client_id": "solo", "relevant": {"a": 1}, "tags": []}]
    return _dataset(root, "single", memories, queries)


def test_a_non_finite_number_in_a_chart_spec_becomes_null_and_renders() -> None:
    spec = {
        "$schema": "https://vega.github.io/schema/vega-lite/v5.json",
        "data": {"values": [{"x": 1, "y": float("nan")}, {"x": 2, "y": float("inf")},
                            {"x": 3, "y": 0.5}]},
        "mark": "point",
        "encoding": {"x": {"field": "x", "type": "quantitative"},
                     "y": {"field": "y", "type": "quantitative"}},
    }
    clean = sanitize_spec(json.dumps(spec))
    assert json.loads(clean)["data"]["values"] == [
        {"x": 1, "y": None}, {"x": 2, "y": None}, {"x": 3, "y": 0.5},
    ]
    svg, png = render_specs({"c": json.dumps(spec)})["c"]
    assert svg.startswith("<svg") and png[:4] == b"\x89PNG"


def test_a_sweep_whose_metric_scores_no_train_query_is_refused_in_one_line(tmp_path) -> None:
    ds = _no_relevant(tmp_path / "ds")
    with pytest.raises(ValueError) as info:
        run_sweep(ds, "bm25", {"bm25__k1": [1.2, 1.5]}, repeats=1,
                  embedder=HashingEmbedder(dim=16), out=tmp_path / "s", progress=False,
                  executor="serial")
    assert str(info.value) == (
        "sweep: R_all@10 scores none of the 3 train queries of the split by query with seed 0 "
        "(none is in its population: relevance metrics need a relevant memory, stale@k a "
        "'stale' list); choose another --metric, --seed or --repeats"
    )
    assert not (tmp_path / "s").exists()


def test_a_sweep_on_a_sparse_metric_writes_its_charts_and_says_the_points_tie(tmp_path) -> None:
    # tokens@10 scores every query; every point returns the same memory for "something":
    # "Something." (2 tokens)
    ds = _no_relevant(tmp_path / "ds")
    res = run_sweep(ds, "bm25", {"bm25__k1": [1.2, 1.5]}, metric="tokens@10", repeats=2,
                    embedder=HashingEmbedder(dim=16), out=tmp_path / "s", progress=False,
                    executor="serial")
    assert res.warnings[0] == (
        "every grid point scores tokens@10 2.0000 on the train queries: the grid does not "
        "move it on this dataset"
    )
    assert not any("smallest value of the grid" in w for w in res.warnings)
    assert (tmp_path / "s" / "sweep_bm25__k1.png").exists()


def test_tuning_on_a_metric_that_scores_no_train_query_is_one_error_and_no_study(
    tmp_path,
) -> None:
    ds = _no_relevant(tmp_path / "ds")
    with pytest.raises(ValueError) as info:
        run_tune(ds, "bm25", parse_space(["bm25__k1=float:0.5:2.0"]), trials=3,
                 embedder=HashingEmbedder(dim=16), out=tmp_path / "t", progress=False)
    assert str(info.value) == (
        "tune: R_all@10 scores none of the 3 train queries of the split by query with seed 0 "
        "(none is in its population: relevance metrics need a relevant memory, stale@k a "
        "'stale' list); choose another --metric or --seed"
    )
    assert not (tmp_path / "t").exists()


def test_the_report_of_a_run_without_relevant_memories_heads_and_compares_one_metric(
    tmp_path,
) -> None:
    ds = _no_relevant(tmp_path / "ds")
    run_experiment(ds, ["bm25", "dense"], embedder=HashingEmbedder(dim=16),
                   out=tmp_path / "run", progress=False, executor="serial")
    report = (tmp_path / "run" / "report.md").read_text(encoding="utf-8")
    assert "- **Headline (stale@10)**" in report
    assert "## Paired comparison with the baseline on stale@10" in report
    assert "R_all@10" not in report
    assert not (tmp_path / "run" / "metrics.png").exists()  # no relevance metric scored


def test_the_answer_of_a_single_query_run_gives_no_p_value_rather_than_nan(tmp_path) -> None:
    ds = _single(tmp_path / "ds")
    run_experiment(ds, ["bm25", "dense"], embedder=HashingEmbedder(dim=16),
                   out=tmp_path / "run", progress=False, executor="serial")
    report = (tmp_path / "run" / "report.md").read_text(encoding="utf-8")
    headline = next(line for line in report.splitlines() if line.startswith("- **Headline"))
    assert headline == (
        "- **Headline (R_all@10)**: Best R_all@10: **`dense`** at 1.0000, +1.0000 against the "
        "baseline `bm25` over 1 paired queries (wins 1 / losses 0; no t-test p-value on 1 "
        "paired queries: not significant)."
    )
    assert "p = nan" not in report
