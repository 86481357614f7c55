import json
from pathlib import Path

import optuna.distributions as od
import polars as pl
import pytest

from memlab.cli import main
from memlab.embed import HashingEmbedder
from memlab.eval.tune import parse_space, run_tune

HANDMADE = Path(__file__).resolve().parents[1] / "fixtures" / "handmade"


def test_parse_space_reads_the_three_kinds():
    space = parse_space(
        ["rrf__k=int:1:200:log", "lifecycle__decay_factor=float:0.9:1.0", "bm25__s=cat:store,scope"]
    )
    assert space["rrf__k"] == od.IntDistribution(1, 200, log=True)
    assert space["lifecycle__decay_factor"] == od.FloatDistribution(0.9, 1.0)
    assert space["bm25__s"] == od.CategoricalDistribution(["store", "scope"])


@pytest.mark.parametrize(
    "expr", ["rrf__k", "rrf_k=int:1:2", "rrf__k=int:1", "rrf__k=int:a:b", "rrf__k=bool:1:2",
             "rrf__k=int:1:2:lin", "x__y=cat:"],
)
def test_parse_space_rejects_bad_expressions(expr):
    with pytest.raises(ValueError, match="bad space expression"):
        parse_space([expr])


def test_tune_writes_study_and_continues_it(tmp_path):
    space = parse_space(["rrf__k=int:1:100:log"])
    kw = dict(embedder=HashingEmbedder(dim=64), progress=False, n_resamples=200)
    res = run_tune(HANDMADE, "rrf", space, trials=4, out=tmp_path / "t", **kw)
    names = {p.name for p in (tmp_path / "t").iterdir()}
    assert {"study.db", "tune.json", "manifest.json", "best.toml", "trials.parquet",
            "history.png", "history.svg"} <= names
    assert res.trials.height == 4
    assert 1 <= res.best_params["rrf__k"] <= 100
    summary = json.loads((tmp_path / "t" / "tune.json").read_text())
    assert summary["best_params"] == res.best_params
    assert res.tests["pipeline"].to_list() == ["best"]
    assert res.tests["delta"][0] == pytest.approx(res.best_test - res.defaults_test)
    assert f"k = {res.best_params['rrf__k']}" in (tmp_path / "t" / "best.toml").read_text()
    # a second call on the same storage adds trials to the same study
    again = run_tune(HANDMADE, "rrf", space, trials=2, out=tmp_path / "t", **kw)
    assert again.trials.height == 6
    assert pl.read_parquet(tmp_path / "t" / "trials.parquet").height == 6


def test_tune_cli_bad_space_is_one_message(tmp_path, capsys):
    code = main(["tune", str(HANDMADE), "--pipeline", "rrf", "--space", "rrf__k=int:x:2",
                 "--out", str(tmp_path / "o")])
    assert code == 2
    assert capsys.readouterr().err.startswith("memlab: error: bad space expression")
    assert not (tmp_path / "o").exists()
