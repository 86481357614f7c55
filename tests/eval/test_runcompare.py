import re
import sys
from pathlib import Path

import polars as pl
import pytest

from memlab.cli import main
from memlab.eval.experiment import ExperimentResult
from memlab.eval.runcompare import compare_runs

if str(Path(__file__).parent) not in sys.path:  # --import-mode=importlib: helpers by path
    sys.path.insert(0, str(Path(__file__).parent))
from _marked_dirs import marked as _marked  # noqa: E402


def fake_run(
    path: Path, values: dict[str, list[float]], qids=None, metric: str = "R_all@10"
) -> Path:
    path.mkdir()
    qids = qids or [f"q{i}" for i in range(len(next(iter(values.values()))))]
    rows = [
        {"pipeline": p, "qid": q, "metric": metric, "value": v}
        for p, vs in values.items()
        for q, v in zip(qids, vs, strict=True)
    ]
    pl.DataFrame(rows).write_parquet(path / "per_query.parquet")
    pl.DataFrame(
        {"qid": qids, "tags": [["even"] if i % 2 == 0 else ["odd"] for i in range(len(qids))]}
    ).write_parquet(path / "queries.parquet")
    metrics = {p: {metric: sum(vs) / len(vs)} for p, vs in values.items()}
    import json

    (path / "metrics.json").write_text(json.dumps(metrics))
    (path / "manifest.json").write_text(json.dumps({"baseline": list(values)[0]}))
    return path


def test_pairs_pipelines_by_name_and_counts_wins_and_losses(tmp_path):
    a = fake_run(tmp_path / "a", {"rrf": [1, 0, 0, 1, 0, 0]})
    b = fake_run(tmp_path / "b", {"rrf": [1, 1, 1, 0, 0, 0]})
    res = compare_runs(a, b, tests=("t",), n_resamples=100)
    assert res.pairs == [("rrf", "rrf")]
    row = res.comparison.row(0, named=True)
    assert (row["baseline"], row["pipeline"], row["metric"]) == ("A:rrf", "B:rrf", "R_all@10")
    assert (row["wins"], row["losses"], row["ties"]) == (2, 1, 3)
    assert row["mean"] - row["baseline_mean"] == pytest.approx(3 / 6 - 2 / 6)
    # per-query table: largest change first, ties last
    assert res.per_query["outcome"].to_list()[:3] == ["win", "win", "loss"]
    assert set(res.tag_comparison["tag"]) == {"even", "odd"}
    assert res.notes == []


def test_a_change_of_population_is_reported_not_silent(tmp_path):
    a = fake_run(tmp_path / "a", {"rrf": [1, 0, 1]}, qids=["q0", "q1", "q2"])
    b = fake_run(tmp_path / "b", {"rrf": [1, 1]}, qids=["q0", "q1"])
    res = compare_runs(a, b, tests=("t",))
    assert res.comparison["n"].to_list() == [2]
    assert res.notes == [
        "R_all@10: A:rrf scored 3 queries, B:rrf 2; compared on the 2 scored in both"
    ]


def test_without_shared_names_every_b_pipeline_meets_as_baseline(tmp_path):
    a = fake_run(tmp_path / "a", {"bm25": [0, 1], "dense": [1, 1]})
    b = fake_run(tmp_path / "b", {"new": [1, 1]})
    res = compare_runs(a, b, tests=("t",))
    assert res.pairs == [("bm25", "new")]
    with pytest.raises(ValueError, match="not in both runs"):
        compare_runs(a, b, pipelines=["dense"])


def test_cli_compare_prints_tables_and_writes_csv(tmp_path, capsys):
    a = fake_run(tmp_path / "a", {"rrf": [1, 0, 0, 1]})
    b = fake_run(tmp_path / "b", {"rrf": [1, 1, 1, 0]})
    assert main(["compare", str(a), str(b), "--tests", "t", "--out", str(tmp_path / "c")]) == 0
    out = capsys.readouterr().out
    assert "| A:rrf | B:rrf | R_all@10 |" in out
    assert pl.read_csv(tmp_path / "c" / "comparison.csv").height == 1
    assert ExperimentResult.load(a).missing == [
        "rankings.parquet", "comparison.parquet", "per_tag.parquet",
        "comparison_by_tag.parquet", "timings.parquet", "qrels.parquet",
    ]


def test_cli_compare_of_a_missing_run_is_one_line(tmp_path, capsys):
    assert main(["compare", str(tmp_path / "nope"), str(tmp_path)]) == 2
    assert capsys.readouterr().err.startswith("memlab: error: ")


def test_a_run_with_old_metric_names_meets_one_with_the_new(tmp_path):
    # runs recorded before Success@k had its name carry R_any@k
    a = fake_run(tmp_path / "a", {"rrf": [1, 0, 0, 1]}, metric="R_any@10")
    b = fake_run(tmp_path / "b", {"rrf": [1, 1, 0, 1]}, metric="Success@10")
    res = compare_runs(a, b, metrics=["R_any@10"], tests=("t",))
    row = res.comparison.row(0, named=True)
    assert (row["metric"], row["wins"], row["losses"]) == ("Success@10", 1, 0)
    assert res.metric == "Success@10"


def test_runs_scored_under_different_protocols_are_named_in_a_note(tmp_path):
    import json

    a = fake_run(tmp_path / "a", {"rrf": [1, 0, 1]})
    b = fake_run(tmp_path / "b", {"rrf": [1, 1, 0]})
    old = {"baseline": "rrf", "seed": 0, "held_out_split": {"test_fraction": 0.5},
           "dataset": {"queries": 6, "evaluated_queries": 3}}
    (a / "manifest.json").write_text(json.dumps(old))
    new = {"baseline": "rrf", "protocol": {"queries": 3, "description": "3 queries; cross-fit"}}
    (b / "manifest.json").write_text(json.dumps(new))
    res = compare_runs(a, b, tests=("t",))
    assert res.protocols == (
        "3 of 6 queries (a held-out split: test fraction 0.5, seed 0; learned stages fitted on "
        "the other queries)",
        "3 queries; cross-fit",
    )
    assert res.notes == [f"the runs' protocols differ: A: {res.protocols[0]}; B: 3 queries; "
                         "cross-fit"]


EXPORT_FILES = {"aggregate.csv": "x\n", "comparison.tex": "x\n", "comparison.csv": "x\n"}


@pytest.mark.parametrize(
    ("kind", "files", "shown"),
    [
        ("export", EXPORT_FILES, "export"),
        ("result", EXPORT_FILES, "export"),  # an export from before exports had their kind
        ("experiment", {"metrics.json": "{}"}, "experiment"),
        ("sweep", {"sweep.json": "{}"}, "sweep"),
        ("dataset", {"memories.jsonl": ""}, "dataset"),
    ],
)
def test_a_comparison_refuses_a_directory_of_another_kind(tmp_path, kind, files, shown):
    from memlab.eval.runcompare import check_compare_dir, write_comparison

    a = fake_run(tmp_path / "a", {"rrf": [1, 0, 0, 1]})
    b = fake_run(tmp_path / "b", {"rrf": [1, 1, 1, 0]})
    res = compare_runs(a, b, tests=("t",))
    out = _marked(tmp_path / "o", kind, files)
    message = (
        f"--out {out}: is a memlab {shown} directory, which only a result of its own kind "
        "replaces (this writes: compare); give a new or empty directory"
    )
    with pytest.raises(ValueError) as info:
        check_compare_dir(out)
    assert str(info.value) == message
    with pytest.raises(ValueError) as info:
        write_comparison(res, out)
    assert str(info.value) == message
    assert sorted(p.name for p in out.iterdir()) == sorted([".memlab-output.json", *files])


def test_a_comparison_replaces_a_comparison_old_or_new_and_keeps_other_files(tmp_path):
    import hashlib
    import json

    from memlab.eval.runcompare import write_comparison

    a = fake_run(tmp_path / "a", {"rrf": [1, 0, 0, 1]})
    b = fake_run(tmp_path / "b", {"rrf": [1, 1, 1, 0]})
    res = compare_runs(a, b, tests=("t",))
    out = _marked(tmp_path / "o", "result", {"comparison.csv": "old\n", "per_query.csv": "old\n"})
    (out / "notes.md").write_text("mine")
    assert write_comparison(res, out) == out.resolve()
    assert pl.read_csv(out / "comparison.csv").height == 1
    assert (out / "notes.md").read_text() == "mine"
    marker = json.loads((out / ".memlab-output.json").read_text())
    names = ["comparison.csv", "comparison_by_tag.csv", "per_query.csv"]
    assert marker == {"memlab": "compare", "entries": names, "sha256": {
        n: hashlib.sha256((out / n).read_bytes()).hexdigest() for n in names}}
    write_comparison(res, out)  # and again, over its own kind
    assert pl.read_csv(out / "per_query.csv").height == 4
    # a run compared (here without the manifest of a run memlab wrote) is refused too
    with pytest.raises(ValueError, match=r"^--out .*/a: exists, is not empty and is not a memlab "):
        write_comparison(res, a)


def test_cli_compare_refuses_an_export_directory_before_comparing(tmp_path, capsys):
    a = fake_run(tmp_path / "a", {"rrf": [1, 0, 0, 1]})
    b = fake_run(tmp_path / "b", {"rrf": [1, 1, 1, 0]})
    out = _marked(tmp_path / "o", "export", EXPORT_FILES)
    assert main(["compare", str(a), str(b), "--tests", "t", "--out", str(out)]) == 2
    captured = capsys.readouterr()
    assert captured.out == ""  # refused before any table was printed
    assert captured.err == (
        f"memlab: error: --out {out}: is a memlab export directory, which only a result of its "
        "own kind replaces (this writes: compare); give a new or empty directory\n"
    )
    assert (out / "aggregate.csv").read_text() == "x\n"
    assert main(["compare", str(a), str(b), "--tests", "t", "--out", str(tmp_path / "c")]) == 0
    marker = (tmp_path / "c" / ".memlab-output.json").read_text()
    assert '"memlab": "compare"' in marker


def _with_dataset(run: Path, name: str, **digests: str) -> Path:
    import json

    manifest = json.loads((run / "manifest.json").read_text())
    manifest["dataset"] = {"name": name, "sha256": digests}
    (run / "manifest.json").write_text(json.dumps(manifest))
    return run


def test_runs_on_other_queries_are_refused_and_other_data_is_noted(tmp_path):
    a = _with_dataset(fake_run(tmp_path / "a", {"rrf": [1, 0, 1]}), "d",
                      **{"queries.jsonl": "q1", "memories.jsonl": "m1"})
    b = _with_dataset(fake_run(tmp_path / "b", {"rrf": [1, 1, 1]}), "e",
                      **{"queries.jsonl": "q2", "memories.jsonl": "m1"})
    with pytest.raises(ValueError, match=re.escape(
            "the runs were evaluated on different queries (A: d, B: e: their queries.jsonl "
            "differ); a paired comparison needs the same queries")):
        compare_runs(a, b, tests=("t",))
    c = _with_dataset(fake_run(tmp_path / "c", {"rrf": [1, 1, 1]}), "d",
                      **{"queries.jsonl": "q1", "memories.jsonl": "m2"})
    assert compare_runs(a, c, tests=("t",)).notes == [
        "the runs' datasets differ in memories.jsonl (A: d, B: d)"
    ]


def test_runs_without_a_shared_metric_or_the_asked_one_are_one_message(tmp_path):
    a = fake_run(tmp_path / "a", {"rrf": [1, 0, 1]}, metric="MRR")
    b = fake_run(tmp_path / "b", {"rrf": [1, 1, 1]}, metric="nDCG@10")
    with pytest.raises(ValueError, match=re.escape(
            "A:rrf and B:rrf share no metric (A: MRR; B: nDCG@10)")):
        compare_runs(a, b, tests=("t",))
    c = fake_run(tmp_path / "c", {"rrf": [0, 0, 1]}, metric="MRR")
    with pytest.raises(ValueError, match=re.escape(
            "--metric R_all@10: not scored in both runs for rrf (compared: MRR)")):
        compare_runs(a, c, tests=("t",), metric="R_all@10")
