import json
import shutil
from pathlib import Path

import polars as pl
import pytest

from memlab.judge.pool import pool_runs, read_pool, write_pool

RECORDING = Path(__file__).resolve().parents[1] / "fixtures" / "recording"


def _run(path: Path, lists: dict[str, dict[str, list[str]]], dataset: Path) -> Path:
    rows = [
        (pipeline, qid, rank, mem_id, 1.0 / rank)
        for pipeline, per_query in lists.items()
        for qid, ids in per_query.items()
        for rank, mem_id in enumerate(ids, start=1)
    ]
    path.mkdir(parents=True)
    pl.DataFrame(
        rows, schema=["pipeline", "qid", "rank", "mem_id", "score"], orient="row"
    ).write_parquet(path / "rankings.parquet")
    (path / "manifest.json").write_text(json.dumps({"dataset": {"path": str(dataset)}}))
    return path


def test_pool_unions_the_top_k_of_every_run_once_per_query(tmp_path):
    ds = tmp_path / "rec"
    shutil.copytree(RECORDING, ds)
    a = _run(tmp_path / "a", {"bm25": {"r1": ["m01", "m06", "m02"], "r3": ["m05"]},
                              "dense": {"r1": ["m08", "m01", "m12"]}}, ds)
    b = _run(tmp_path / "b", {"rrf": {"r1": ["m12", "m09"]}}, ds)
    pool = pool_runs([a, b], depth=2)
    assert pool.runs == ["a/bm25", "a/dense", "b/rrf", "served"]
    cands = pool.candidates
    # queries in the recording's order, each one's candidates together
    assert cands.get_column("qid").to_list()[:6] == ["r1"] * 5 + ["r2"]
    r1 = {row["mem_id"]: row for row in cands.filter(pl.col("qid") == "r1").iter_rows(named=True)}
    # depth 2: bm25 m01 m06, dense m08 m01, rrf m12 m09, served m08 m01
    assert set(r1) == {"m01", "m06", "m08", "m12", "m09"}
    assert r1["m01"]["runs"] == ["a/bm25", "a/dense", "served"]
    assert r1["m01"]["best_rank"] == 1 and r1["m09"]["best_rank"] == 2
    assert cands.get_column("position").to_list() == list(range(1, cands.height + 1))
    assert cands.filter(pl.col("qid") == "r3").get_column("mem_id").sort().to_list() == [
        "m05", "m10",
    ]
    out = write_pool(pool, tmp_path / "pool.jsonl")
    assert read_pool(out).equals(cands)
    assert pool_runs([a, b], depth=2).candidates.equals(cands)  # deterministic
    assert pool_runs([a, b], depth=2, served=False).runs == ["a/bm25", "a/dense", "b/rrf"]


def test_pool_rejects_bad_input(tmp_path):
    with pytest.raises(ValueError, match="not a run directory"):
        pool_runs([tmp_path])
    with pytest.raises(ValueError, match="field 'depth'"):
        pool_runs([tmp_path], depth=0)
    (tmp_path / "p.jsonl").write_text('{"qid": "q"}\n')
    with pytest.raises(ValueError, match="p.jsonl:1: not a pool line"):
        read_pool(tmp_path / "p.jsonl")


def test_judge_add_on_the_command_line(tmp_path, capsys):
    from memlab.cli import main
    from memlab.judge.judgments import read_judgments

    ds = tmp_path / "rec"
    shutil.copytree(RECORDING, ds)
    assert main(["judge", "add", str(ds), "r1", "m08", "2", "--judge", "ann"]) == 0
    assert [(j.qid, j.mem_id, j.grade) for j in read_judgments(ds)] == [("r1", "m08", 2)]
    assert main(["judge", "add", str(ds), "r9", "m08", "2", "--judge", "ann"]) == 2
    assert "no query 'r9'" in capsys.readouterr().err
    assert main(["judge", "add", str(ds), "r1", "m99", "1", "--judge", "ann"]) == 2
    assert len(read_judgments(ds)) == 1
