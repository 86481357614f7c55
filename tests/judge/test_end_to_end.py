"""A researcher's afternoon on a small recording: three pipelines' runs, a pool, two judges,
and a report with condensed nDCG@10, bpref, judged@10, agreement and paired tests."""

import json
import shutil
from pathlib import Path

import polars as pl

from memlab.cli import main
from memlab.judge.judgments import judge, read_judgments
from memlab.judge.pool import read_pool

RECORDING = Path(__file__).resolve().parents[1] / "fixtures" / "recording"
# what a careful judge would say about the recording's memories, per query
TRUTH = {
    "r1": {"m08": 2, "m01": 1},
    "r2": {"m04": 2, "m11": 2},
    "r3": {"m10": 2, "m05": 1},
    "r4": {"m02": 2},
    "r5": {"m07": 2},
    "r6": {"m09": 2},
}


def _eval(ds: Path, out: Path, *extra: str) -> dict:
    code = main(["eval", str(ds), "--pipelines", "bm25,dense,rrf", "--embedder", "hashing",
                 "--no-cache", "--quiet", "--out", str(out), *extra])
    assert code == 0
    return json.loads((out / "metrics.json").read_text())


def test_record_pool_judge_report(tmp_path, capsys):
    ds = tmp_path / "recording"
    shutil.copytree(RECORDING, ds)
    runs = [tmp_path / "runs" / name for name in ("bm25", "dense", "rrf")]
    for run, name in zip(runs, ("bm25", "dense", "rrf"), strict=True):
        assert main(["eval", str(ds), "--pipelines", name, "--embedder", "hashing",
                     "--no-cache", "--quiet", "--out", str(run)]) == 0
    pool_file = tmp_path / "pool.jsonl"
    assert main(["judge", "pool", *map(str, runs), "--depth", "10", "--out", str(pool_file)]) == 0
    pool = read_pool(pool_file)
    assert set(pool.get_column("qid")) == set(TRUTH)
    assert pool.select("qid", "mem_id").is_unique().all()
    # two judges work through the queue with the app's own call; bob skips the last query
    for name in ("ann", "bob"):
        for row in pool.iter_rows(named=True):
            if name == "bob" and row["qid"] == "r6":
                continue
            grade = TRUTH[row["qid"]].get(row["mem_id"], 0)
            if name == "bob" and row["mem_id"] == "m01":
                grade = 0  # bob disagrees once
            judge(ds, row["qid"], row["mem_id"], grade, judge=name, now="2026-03-07T09:00:00Z")
    assert len(read_judgments(ds)) == 2 * pool.height - pool.filter(pl.col("qid") == "r6").height
    metrics = _eval(ds, tmp_path / "report", "--baseline", "bm25")
    for name in ("bm25", "dense", "rrf"):
        assert {"cnDCG@10", "bpref", "judged@10", "nDCG@10"} <= set(metrics[name])
    # every memory in the pool is judged: the top 10 of each pooled run is fully judged. bm25
    # answers r4 ("where is acme deployed") through "acme": over the agent's statistics (the 7
    # memories it reads in acme and global, 6 naming acme) its idf is negative and floored at
    # epsilon × the mean idf, so it scores; over the whole store (6 of 12) it was exactly 0.
    assert (metrics["dense"]["judged@10"], metrics["rrf"]["judged@10"]) == (1.0, 1.0)
    assert metrics["bm25"]["judged@10"] == 1.0
    report = (tmp_path / "report" / "report.md").read_text()
    assert "## Judgments" in report and "by ann, bob" in report
    assert "Cohen's kappa" in report and "| ann | bob |" in report
    assert "## Paired comparison with the baseline" in report
    appendix = (tmp_path / "report" / "appendix.md").read_text()  # every metric's tests
    assert "| dense | cnDCG@10 |" in appendix and "| rrf | bpref |" in appendix
    assert "Warning" not in report
    manifest = json.loads((tmp_path / "report" / "manifest.json").read_text())
    assert manifest["judgments"]["judges"] == ["ann", "bob"]
    assert manifest["judgments"]["agreement"][0]["n"] == pool.height - pool.filter(
        pl.col("qid") == "r6"
    ).height
    # agent feedback alone: a single useful mark on r4
    judge(ds, "r4", "m02", 1, judge="claude-code", source="agent", now="2026-03-07T10:00:00Z")
    agent = _eval(ds, tmp_path / "agent", "--qrels-source", "agent", "--metrics", "nDCG@10")
    # the recording's queries name agents, so the namespace check comes along (and holds)
    assert set(agent["bm25"]) == {"nDCG@10", "scope_violation@10"}
    assert agent["bm25"]["scope_violation@10"] == 0
    per_query = pl.read_parquet(tmp_path / "agent" / "per_query.parquet")
    ndcg = per_query.filter(pl.col("metric") == "nDCG@10")
    assert ndcg.get_column("qid").unique().to_list() == ["r4"]


def test_low_judged_at_10_warns(tmp_path):
    ds = tmp_path / "recording"
    shutil.copytree(RECORDING, ds)
    judge(ds, "r1", "m08", 2, judge="ann", now="2026-03-07T09:00:00Z")
    _eval(ds, tmp_path / "report")
    report = (tmp_path / "report" / "report.md").read_text()
    assert "**Warning:** judged@10 is below 0.8" in report
