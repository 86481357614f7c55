import json
from pathlib import Path

import polars as pl
import pytest

from memlab.datasets.format import load_dataset
from memlab.embed import HashingEmbedder
from memlab.eval.experiment import split_queries
from memlab.eval.sweep import run_sweep

HANDMADE = Path(__file__).resolve().parents[1] / "fixtures" / "handmade"


def test_sweep_clones_each_point_and_picks_on_train(tmp_path):
    res = run_sweep(
        HANDMADE, "hybrid", {"rrf__k": [1, 60], "lifecycle__boost_weight": [0.0]},
        embedder=HashingEmbedder(dim=64), out=tmp_path / "s", progress=False,
    )
    assert res.results.columns[:2] == ["param_rrf__k", "param_lifecycle__boost_weight"]
    assert res.results.height == 2
    best_train = max(res.results["R_all@10_train"].to_list())
    assert res.best_train == best_train
    row = res.results.filter(
        pl.col("param_rrf__k") == res.best_params["rrf__k"]
    ).row(0, named=True)
    assert res.best_test == row["R_all@10_test"]
    summary = json.loads((tmp_path / "s" / "sweep.json").read_text())
    assert summary["best_params"] == res.best_params
    assert (tmp_path / "s" / "sweep_rrf__k.png").exists()


def test_sweep_over_tuples_split_by_client(tmp_path):
    weights = [(0.35, 0.35, 0.15, 2.0), (0.7, 0.0, 0.3, 0.3)]
    res = run_sweep(
        HANDMADE, "conversational", {"combsum__weights": weights}, split_by="client", seed=2,
        embedder=HashingEmbedder(dim=64), out=tmp_path / "s", progress=False,
    )
    assert res.results["param_combsum__weights"].to_list() == [
        "[0.35, 0.35, 0.15, 2.0]", "[0.7, 0.0, 0.3, 0.3]",
    ]
    assert res.best_params["combsum__weights"] in weights
    assert (res.split_by, res.n_train + res.n_test) == ("client", 10)
    summary = json.loads((tmp_path / "s" / "sweep.json").read_text())
    assert summary["split_by"] == "client"
    assert summary["best_params"]["combsum__weights"] == list(res.best_params["combsum__weights"])
    assert "Queries split by client (seed 2)" in (tmp_path / "s" / "report.md").read_text()
    # seed 0 puts both of the fixture's clients on the train side: no held-out queries
    with pytest.raises(ValueError, match="split by client with seed 0 leaves no held-out"):
        run_sweep(HANDMADE, "conversational", {"combsum__weights": weights}, split_by="client",
                  embedder=HashingEmbedder(dim=8), out=tmp_path / "t", progress=False)
    assert not (tmp_path / "t").exists()


def test_unknown_parameter_fails_before_any_work(tmp_path):
    with pytest.raises(ValueError, match="no parameter 'kk'"):
        run_sweep(HANDMADE, "hybrid", {"rrf__kk": [1]}, embedder=HashingEmbedder(dim=8),
                  out=tmp_path / "s")
    assert not (tmp_path / "s").exists()


def _files(d):
    return {p.name: p.read_bytes() for p in sorted(d.iterdir()) if p.name != "manifest.json"}


def test_parallel_sweep_is_byte_identical_to_serial(tmp_path):
    grid = {"rrf__k": [1, 10, 60], "lifecycle__boost_weight": [0.0, 0.3]}
    kw = dict(embedder=HashingEmbedder(dim=64), progress=False, repeats=3, n_resamples=200)
    serial = run_sweep(HANDMADE, "hybrid", grid, executor="serial", out=tmp_path / "s", **kw)
    par = run_sweep(HANDMADE, "hybrid", grid, executor="joblib", n_jobs=2,
                    out=tmp_path / "p", **kw)
    assert serial.results.equals(par.results)
    assert _files(tmp_path / "s").keys() >= {
        "results.parquet", "per_query.parquet", "repeats.parquet", "tests.parquet",
        "sweep.json", "report.md", "heatmap_rrf__k_lifecycle__boost_weight.png",
    }
    s_files, p_files = _files(tmp_path / "s"), _files(tmp_path / "p")
    # the parallel run's charts are rendered on a worker, during its paired tests
    chart = "heatmap_rrf__k_lifecycle__boost_weight"
    for name in ("results.parquet", "per_query.parquet", "sweep.json", "report.md",
                 f"{chart}.png", f"{chart}.svg"):
        assert s_files[name] == p_files[name], name
    man = json.loads((tmp_path / "p" / "manifest.json").read_text())
    assert (man["executor"], man["repeats"], man["dataset"]["name"]) == (
        "JoblibExecutor", 3, "handmade",
    )
    # 6 points × 10 queries × every metric; the defaults (k=60, boost 0.3) are a grid point
    pq = serial.per_query
    assert sorted(set(pq["point"].to_list())) == [0, 1, 2, 3, 4, 5]


def test_repeats_tests_and_edge_warning(tmp_path):
    grid = {"rrf__k": [1, 10]}
    res = run_sweep(HANDMADE, "rrf", grid, embedder=HashingEmbedder(dim=64), progress=False,
                    repeats=4, executor="serial", n_resamples=200, out=tmp_path / "s")
    assert res.repeats["seed"].to_list() == [0, 1, 2, 3]
    # each split's held-out score of the point it chose, averaged
    tests = res.repeats["test"].to_list()
    assert res.chosen_test[0] == round(sum(tests) / 4, 6)
    # both points score 1.0 on train: "best" is the first by grid order, so no edge warning
    # (the optimum lies nowhere in particular), but one saying the grid does not move it
    assert res.warnings == [
        "every grid point scores R_all@10 1.0000 on the train queries: the grid does not move "
        "it on this dataset"
    ]
    # rrf's default k=60 is not in the grid: it is replayed as point -1 and tested against
    assert -1 in set(res.per_query["point"].to_list())
    assert res.tests["against"].to_list() == ["defaults", "runner-up"]
    row = res.tests.row(0, named=True)
    assert json.loads(row["against_params"]) == {"rrf__k": 60}
    assert row["delta"] == pytest.approx(row["best_mean"] - row["other_mean"])
    _, held_out = split_queries(load_dataset(HANDMADE).queries, test_fraction=0.5, seed=0)
    assert row["n"] == len(held_out) == res.n_test  # paired on every held-out query
    assert (tmp_path / "s" / "sweep_rrf__k.png").exists()


def test_edge_warnings_and_direction():
    from memlab.eval.sweep import edge_warnings, higher_is_better

    grid = {"a__k": [1, 10, 60], "b__w": [(1, 2), (3, 4)], "c__x": [0.5]}
    assert edge_warnings(grid, {"a__k": 10, "b__w": (1, 2), "c__x": 0.5}) == []
    [w] = edge_warnings(grid, {"a__k": 1, "b__w": (1, 2), "c__x": 0.5})
    assert w.startswith("best a__k=1 is the smallest value of the grid (1 … 60)")
    assert higher_is_better("R_all@10") and higher_is_better("MRR")
    assert not higher_is_better("stale@10") and not higher_is_better("tokens@10")


def test_bootstrap_interval_brackets_the_mean():
    import numpy as np

    from memlab.eval.sweep import bootstrap_interval

    assert bootstrap_interval(np.array([1.0, 1.0, 1.0])) == (1.0, 1.0)
    lo, hi = bootstrap_interval(np.array([0.0, 1.0] * 50), seed=3)
    assert lo < 0.5 < hi and hi - lo < 0.3


def test_sweep_on_a_cost_picks_the_cheapest_point(tmp_path):
    # tokens@10 is lower-is-better: top_k=1 returns one memory per query, top_k=20 up to ten
    res = run_sweep(
        HANDMADE, "bm25", {"bm25__top_k": [20, 1]}, metric="tokens@10",
        embedder=HashingEmbedder(dim=8), out=tmp_path / "s", progress=False,
    )
    costs = dict(zip(res.results["param_bm25__top_k"], res.results["tokens@10_train"],
                     strict=True))
    assert costs[1] < costs[20]
    assert res.best_params == {"bm25__top_k": 1}
    assert res.best_train == costs[1]
    assert "lower is better" in (tmp_path / "s" / "report.md").read_text()


def test_sweep_objective_may_be_an_alias_or_an_ir_measures_name(tmp_path):
    # R_any@3 is read as Success@3; NumRet (an ir_measures count of returned memories) is
    # lower-is-better, so top_k=1 is chosen over top_k=20
    res = run_sweep(
        HANDMADE, "bm25", {"bm25__top_k": [20, 1]}, metric="R_any@3", metrics=["NumRet"],
        embedder=HashingEmbedder(dim=8), out=tmp_path / "a", progress=False, repeats=1,
    )
    assert res.metric == "Success@3"
    assert "Success@3_train" in res.results.columns
    cost = run_sweep(
        HANDMADE, "bm25", {"bm25__top_k": [20, 1]}, metric="NumRet",
        embedder=HashingEmbedder(dim=8), out=tmp_path / "n", progress=False, repeats=1,
    )
    assert cost.metric == "NumRet"
    assert cost.best_params == {"bm25__top_k": 1}


def test_only_stages_that_embed_other_texts_make_a_sweep_probe_first():
    from memlab.eval.sweep import embeds_other_texts
    from memlab.pipeline import load_pipeline
    from memlab.stages.dense import Dense
    from memlab.stages.maxp import MaxP

    # the query vector and the store's vectors only: every point can go to the workers
    assert embeds_other_texts([load_pipeline("hybrid"), load_pipeline("bm25")]) is False
    # MaxP's sentences and masked query texts must be recorded by a first point here
    assert embeds_other_texts([load_pipeline("hybrid"), load_pipeline("conversational")])
    assert Dense().embeds_other_texts is False
    assert Dense(mask_entity_types=["agent"]).embeds_other_texts is True
    assert Dense(embedder="test-hash32-a").embeds_other_texts is True
    assert MaxP().embeds_other_texts is True
