import json
from pathlib import Path

import ir_measures
import polars as pl
import pytest
from ir_measures import RR, nDCG

from memlab.cli import main
from memlab.embed import HashingEmbedder
from memlab.eval.experiment import ExperimentResult, run_experiment
from memlab.eval.export import export_run, latex_table, trec_run_lines

HANDMADE = Path(__file__).resolve().parents[1] / "fixtures" / "handmade"


@pytest.fixture(scope="module")
def run_dir(tmp_path_factory):
    out = tmp_path_factory.mktemp("runs") / "run"
    run_experiment(
        HANDMADE, ["bm25", "dense", "rrf"], embedder=HashingEmbedder(dim=64), out=out,
        progress=False, n_resamples=200,
    )
    return out


def test_trec_scores_strictly_decrease_with_rank_even_when_memlab_scores_tie():
    rankings = pl.DataFrame(
        {"qid": ["q1", "q1", "q1", "q2"], "rank": [1, 2, 3, 1],
         "mem_id": ["z", "a", "m", "b"], "score": [0.5, 0.5, 0.5, 1.0]}
    )
    assert trec_run_lines(rankings, "run") == [
        "q1 Q0 z 1 3 run", "q1 Q0 a 2 2 run", "q1 Q0 m 3 1 run", "q2 Q0 b 1 1 run",
    ]


def test_exported_run_and_qrels_reproduce_memlabs_metrics_in_trec_eval(run_dir):
    out, notes = export_run(run_dir)
    assert notes == []
    assert out == (run_dir / "export").resolve()
    qrels = list(ir_measures.read_trec_qrels(str(out / "qrels.trec")))
    per_query = pl.read_parquet(run_dir / "per_query.parquet")
    for name in ("bm25", "dense", "rrf"):
        run = list(ir_measures.read_trec_run(str(out / "runs" / f"{name}.trec")))
        got = {(m.query_id, str(m.measure)): m.value
               for m in ir_measures.iter_calc([nDCG @ 10, RR], qrels, run)}
        mine = per_query.filter(
            (pl.col("pipeline") == name) & pl.col("metric").is_in(["nDCG@10", "MRR"])
        )
        assert mine.height == 20
        for qid, metric, value in mine.select("qid", "metric", "value").iter_rows():
            key = (qid, "nDCG@10" if metric == "nDCG@10" else "RR")
            assert got.get(key, 0.0) == pytest.approx(value, abs=1e-12)


def test_export_writes_csv_tables_and_a_latex_table(run_dir, tmp_path):
    out, _ = export_run(run_dir, tmp_path / "x")
    agg = pl.read_csv(out / "aggregate.csv")
    metrics = json.loads((run_dir / "metrics.json").read_text())
    row = agg.filter((pl.col("pipeline") == "dense") & (pl.col("metric") == "nDCG@10"))
    assert row["value"][0] == metrics["dense"]["nDCG@10"]
    assert pl.read_csv(out / "per_query.csv").height == pl.read_parquet(
        run_dir / "per_query.parquet"
    ).height
    tex = (out / "comparison.tex").read_text()
    assert tex.startswith("\\begin{table}") and "\\toprule" in tex
    assert "R\\_all@10" in tex and "bm25 (baseline)" in tex


def test_latex_marks_significance_in_the_direction_of_the_metric():
    comparison = pl.DataFrame(
        {"pipeline": ["b", "b", "b"], "metric": ["nDCG@10", "tokens@10", "MRR"],
         "delta": [0.1, 5.0, 0.2], "p_t_adj": [0.01, 0.01, 0.2]}
    )
    res = ExperimentResult(
        metrics={"a": {"nDCG@10": 0.5, "tokens@10": 10.0, "MRR": 0.4},
                 "b": {"nDCG@10": 0.6, "tokens@10": 15.0, "MRR": 0.6}},
        per_query=pl.DataFrame(), rankings=pl.DataFrame(), comparison=comparison,
        per_tag=pl.DataFrame(), tag_comparison=pl.DataFrame(), timings=pl.DataFrame(),
        manifest={"baseline": "a", "tests": ["t"], "alpha": 0.05,
                  "metrics": ["nDCG@10", "tokens@10", "MRR"]},
    )
    tex = latex_table(res)
    b_row = next(line for line in tex.splitlines() if line.startswith("b &"))
    # better on nDCG (dagger), worse on tokens (more tokens: double dagger), MRR not significant
    assert b_row == "b & $\\textbf{0.600}^{\\dagger}$ & $15.000^{\\ddagger}$ & \\textbf{0.600} \\\\"


def test_load_reads_what_was_written_and_names_missing_files(run_dir, tmp_path):
    res = ExperimentResult.load(run_dir)
    assert res.missing == []
    assert res.pipelines == ["bm25", "dense", "rrf"] and res.baseline == "bm25"
    assert res.qrels.columns == ["qid", "mem_id", "relevance"]
    assert res.queries.height == 10
    trimmed = tmp_path / "trimmed"
    trimmed.mkdir()
    (trimmed / "metrics.json").write_text((run_dir / "metrics.json").read_text())
    partial = ExperimentResult.load(trimmed)
    assert "per_query.parquet" in partial.missing and "manifest.json" in partial.missing
    assert partial.per_query.height == 0
    (trimmed / "metrics.json").write_text("{")
    with pytest.raises(ValueError, match="metrics.json: not readable JSON"):
        ExperimentResult.load(trimmed)


def test_cli_export_of_a_directory_that_is_not_a_run_is_one_line(tmp_path, capsys):
    assert main(["export", str(tmp_path)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err == [f"memlab: error: {tmp_path}: not a memlab run (no metrics.json)"]
