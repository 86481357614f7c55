import json
from pathlib import Path

import polars as pl
import pytest

from memlab.embed import HashingEmbedder
from memlab.eval.sweep import grid_points, parse_grid, run_sweep

HANDMADE = Path(__file__).resolve().parents[1] / "fixtures" / "handmade"


def test_parse_grid_reads_types():
    assert parse_grid(["rrf__k=10,30", "lifecycle__decay_factor=0.95,0.98", "x__on=true,none"]) == {
        "rrf__k": [10, 30],
        "lifecycle__decay_factor": [0.95, 0.98],
        "x__on": [True, None],
    }


def test_parse_grid_reads_bracketed_tuples():
    assert parse_grid(["combsum__weights=[0.7,0.3],[0.5, 0.5]", "a__b=[1,[2,x]],3"]) == {
        "combsum__weights": [(0.7, 0.3), (0.5, 0.5)],
        "a__b": [(1, (2, "x")), 3],
    }


@pytest.mark.parametrize(
    "expr",
    [
        "rrf_k=10", "rrf__k", "rrf__k=", "rrf__k=,", "=1,2",
        "c__w=[0.7,0.3", "c__w=0.7]", "c__w=a[1]",
    ],
)
def test_parse_grid_rejects_bad_expressions(expr):
    with pytest.raises(ValueError, match="bad grid expression"):
        parse_grid([expr])


def test_grid_points_is_the_product_in_order():
    assert grid_points({"a__x": [1, 2], "b__y": ["u", "v"]}) == [
        {"a__x": 1, "b__y": "u"}, {"a__x": 1, "b__y": "v"},
        {"a__x": 2, "b__y": "u"}, {"a__x": 2, "b__y": "v"},
    ]


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
