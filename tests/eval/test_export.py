import json
import sys
from pathlib import Path

import ir_measures
import polars as pl
import pytest
from ir_measures import RR, nDCG

from memlab.cli import main
from memlab.embed import HashingEmbedder
from memlab.eval.experiment import ExperimentResult, run_experiment
from memlab.eval.export import export_run, latex_table, trec_run_lines

if str(Path(__file__).parent) not in sys.path:  # --import-mode=importlib: helpers by path
    sys.path.insert(0, str(Path(__file__).parent))
from _marked_dirs import marked as _marked  # noqa: E402

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
    with pytest.raises(ValueError, match="metrics.json: invalid JSON"):
        ExperimentResult.load(trimmed)


def test_cli_export_of_a_directory_that_is_not_a_run_is_one_line(tmp_path, capsys):
    assert main(["export", str(tmp_path)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err == [f"memlab: error: {tmp_path}: not a memlab run (no metrics.json)"]


# ---------------------------------------------------------------- what a TREC file cannot hold


def _copy_run(run_dir: Path, to: Path) -> Path:
    import shutil

    shutil.copytree(run_dir, to, ignore=shutil.ignore_patterns("export"))
    return to


def _rewrite(file: Path, column: str, old: str, new: str) -> None:
    frame = pl.read_parquet(file)
    frame.with_columns(pl.col(column).replace(old, new)).write_parquet(file)


@pytest.mark.parametrize(
    ("table", "column", "new", "what", "target"),
    [
        ("rankings.parquet", "mem_id", "h 14", "memory id 'h 14'", "runs/bm25.trec"),
        ("rankings.parquet", "qid", "hq\n01", "query id 'hq\\n01'", "runs/bm25.trec"),
        ("qrels.parquet", "mem_id", "h\t14", "memory id 'h\\t14'", "qrels.trec"),
        ("qrels.parquet", "qid", "hq\x1f01", "query id 'hq\\x1f01'", "qrels.trec"),
        ("rankings.parquet", "mem_id", "h\u200314", "memory id 'h\\u200314'", "runs/bm25.trec"),
    ],
    ids=["space", "newline", "tab", "unit-separator", "em-space"],
)
def test_export_refuses_an_id_a_trec_file_cannot_hold(run_dir, tmp_path, capsys, table, column,
                                                      new, what, target):
    run = _copy_run(run_dir, tmp_path / "run")
    old = "hq01" if column == "qid" else "h14"
    _rewrite(run / table, column, old, new)
    before = sorted(p.name for p in run.iterdir())
    assert main(["export", str(run)]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"memlab: error: {run / 'export' / target}: {what} (in {run / table}) "
                          "holds "), err
    assert "which a TREC file cannot hold" in err and err.count("\n") == 1
    assert sorted(p.name for p in run.iterdir()) == before  # nothing exported


def test_export_refuses_a_pipeline_name_that_is_not_a_file_name(run_dir, tmp_path, capsys):
    run = _copy_run(run_dir, tmp_path / "run")
    metrics = json.loads((run / "metrics.json").read_text())
    metrics["../../escaped"] = metrics.pop("dense")
    (run / "metrics.json").write_text(json.dumps(metrics))
    _rewrite(run / "rankings.parquet", "pipeline", "dense", "../../escaped")
    assert main(["export", str(run)]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"memlab: error: {run / 'metrics.json'}: pipeline name '../../escaped' "
                          "is not a plain file name")
    assert not (tmp_path / "escaped.trec").exists() and not (run / "export").exists()


def test_a_dataset_with_such_ids_evaluates_but_does_not_export(tmp_path, capsys):
    import shutil

    ds = tmp_path / "ds"
    shutil.copytree(HANDMADE, ds)
    for name in ("memories.jsonl", "queries.jsonl"):
        text = (ds / name).read_text().replace('"h14"', '"h 14"').replace('"hq01"', '"hq 01"')
        (ds / name).write_text(text)
    assert main(["eval", str(ds), "--pipelines", "bm25", "--embedder", "hashing", "--no-cache",
                 "--quiet", "--executor", "serial", "--out", str(tmp_path / "run")]) == 0
    capsys.readouterr()
    assert main(["export", str(tmp_path / "run")]) == 2
    err = capsys.readouterr().err
    assert "id 'h 14'" in err or "id 'hq 01'" in err
    assert not (tmp_path / "run" / "export").exists()


# ---------------------------------------------------------------- unreadable run files


@pytest.mark.parametrize(
    ("file", "content", "message"),
    [
        ("manifest.json", "[" * 100_000 + "]" * 100_000,
         "manifest.json: invalid JSON: nested too deeply to read"),
        ("metrics.json", "[" * 100_000 + "]" * 100_000,
         "metrics.json: invalid JSON: nested too deeply to read"),
        ("manifest.json", '{"dataset": "x"}',
         "manifest.json: field 'dataset': must be an object, got string"),
        ("manifest.json", '{"tests": [1]}',
         "manifest.json: field 'tests': must be a list of strings, got an item of type integer"),
        ("manifest.json", '{"alpha": "5%"}', "manifest.json: field 'alpha': must be a number"),
        ("metrics.json", '{"bm25": {"MRR": "high"}}',
         "metrics.json: field 'bm25.MRR': must be a number, got string"),
        ("metrics.json", "{}", "metrics.json: names no pipeline"),
    ],
    ids=["deep-manifest", "deep-metrics", "dataset-string", "tests-items", "alpha", "metric",
         "no-pipeline"],
)
def test_export_and_compare_name_the_run_file_at_fault(run_dir, tmp_path, capsys, file, content,
                                                       message):
    run = _copy_run(run_dir, tmp_path / "run")
    (run / file).write_text(content)
    for argv in (["export", str(run)], ["compare", str(run_dir), str(run)]):
        assert main(argv) == 2, argv
        err = capsys.readouterr().err
        assert err.startswith(f"memlab: error: {run / message}"), (argv, err)
        assert err.count("\n") == 1
    assert not (run / "export").exists()


def test_a_table_without_its_columns_is_named(run_dir, tmp_path, capsys):
    run = _copy_run(run_dir, tmp_path / "run")
    pl.read_parquet(run / "rankings.parquet").drop("mem_id").write_parquet(
        run / "rankings.parquet")
    assert main(["export", str(run)]) == 2
    assert capsys.readouterr().err == (
        f"memlab: error: {run / 'rankings.parquet'}: missing column 'mem_id'\n"
    )


@pytest.mark.parametrize("kind", ["compare", "result"])
def test_export_refuses_a_comparison_directory_old_or_new(run_dir, tmp_path, kind):
    # "result": what `memlab compare --out` marked before comparisons had a kind of their own
    out = _marked(tmp_path / "cmp", kind, {"comparison.csv": "a\n", "per_query.csv": "b\n"})
    with pytest.raises(ValueError) as info:
        export_run(run_dir, out)
    assert str(info.value) == (
        f"output directory {out}: is a memlab compare directory, not an export; an export "
        "replaces only an export: give a new or empty directory"
    )
    assert sorted(p.name for p in out.iterdir()) == [
        ".memlab-output.json", "comparison.csv", "per_query.csv"]
    assert (out / "comparison.csv").read_text() == "a\n"


def test_export_replaces_an_export_marked_with_the_old_shared_kind(run_dir, tmp_path):
    old = {"aggregate.csv": "old\n", "comparison.tex": "old\n", "per_query.csv": "old\n"}
    out = _marked(tmp_path / "exp", "result", old)
    (out / "notes.md").write_text("mine")
    written, _ = export_run(run_dir, out)
    assert written == out.resolve()
    assert (out / "aggregate.csv").read_text() != "old\n"
    assert (out / "notes.md").read_text() == "mine"
    marker = json.loads((out / ".memlab-output.json").read_text())
    assert marker["memlab"] == "export"


def test_qrels_follow_merges_per_pipeline_and_export_them_so(run_dir, tmp_path):
    from types import SimpleNamespace

    from memlab.datasets.format import Query
    from memlab.eval.experiment import scored_qrels

    ds = SimpleNamespace(queries=[Query(0, "q1", 100.0, "x"),
                                  Query(0, "q2", 100.0, "x", at_time=10.0)])
    qrels = pl.DataFrame({"qid": ["q1", "q2"], "mem_id": ["a", "a"], "relevance": [1, 2]})

    class Merged:  # 'a' merged into 'F' at time 50 (a ReplayResult's merges and resolve)
        merges = {"a": (50.0, "F")}

        def resolve(self, mid, at):
            return "F" if mid == "a" and at >= 50.0 else mid

    class Unmerged:
        merges: dict = {}

    alike = scored_qrels(qrels, ds, {"bm25": Merged(), "dense": Merged()})
    # q2 asks about time 10, before the merge: still 'a'
    assert alike.rows() == [("q1", "F", 1), ("q2", "a", 2)]
    differ = scored_qrels(qrels, ds, {"bm25": Merged(), "dense": Unmerged()})
    assert differ.rows() == [("bm25", "q1", "F", 1), ("bm25", "q2", "a", 2),
                             ("dense", "q1", "a", 1), ("dense", "q2", "a", 2)]
    run = _copy_run(run_dir, tmp_path / "run")
    pl.concat([
        pl.read_parquet(run / "qrels.parquet").select(pl.lit(n).alias("pipeline"), pl.all())
        for n in ("bm25", "dense", "rrf")
    ]).write_parquet(run / "qrels.parquet")
    out, notes = export_run(run)
    assert notes == [] and not (out / "qrels.trec").exists()
    assert sorted(p.name for p in (out / "qrels").iterdir()) == [
        "bm25.trec", "dense.trec", "rrf.trec"]
    single, _ = export_run(run_dir, out=tmp_path / "single")
    assert (out / "qrels" / "bm25.trec").read_text() == (single / "qrels.trec").read_text()
