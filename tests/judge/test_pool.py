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


def test_read_pool_keeps_unicode_line_separators_inside_their_line(tmp_path):
    # write_pool uses ensure_ascii=False: a U+2028, U+2029 or U+0085 in an id sits raw in its
    # line, where str.splitlines would cut it; line numbers of later lines are unchanged
    qid = "q\u2028one\u2029two\x85three"
    row = {"qid": qid, "mem_id": "m\u2028\x85", "position": 1, "runs": ["a/b\u2029"],
           "best_rank": 1}
    line = json.dumps(row, ensure_ascii=False, separators=(",", ":"))
    path = tmp_path / "p.jsonl"
    path.write_text(line + "\r\n\n" + '{"qid": "q"}\n', encoding="utf-8")
    with pytest.raises(ValueError, match="p.jsonl:3: not a pool line"):
        read_pool(path)
    path.write_text(line + "\n", encoding="utf-8")
    assert read_pool(path).rows(named=True) == [row]


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


# ---------------------------------------------------------------- --out and unreadable runs


def _pool_cli(tmp_path, out, *extra):
    from memlab.cli import main

    ds = tmp_path / "rec"
    if not ds.exists():
        shutil.copytree(RECORDING, ds)
        _run(tmp_path / "a", {"bm25": {"r1": ["m01", "m06"]}}, ds)
    return main(["judge", "pool", str(tmp_path / "a"), "--dataset", str(ds), "--out", str(out),
                 *extra])


def _entries(root: Path) -> dict[str, object]:
    return {
        p.name: (f"-> {p.readlink()}" if p.is_symlink() else
                 sorted(c.name for c in p.iterdir()) if p.is_dir() else p.read_bytes())
        for p in sorted(root.iterdir())
    }


@pytest.mark.parametrize(
    ("make", "message"),
    [
        (lambda d: (d / "out").write_text("my thesis chapter\n"),
         "exists and is not a judging queue memlab wrote"),
        (lambda d: ((d / "thesis.txt").write_text("mine\n"), (d / "out").symlink_to("thesis.txt")),
         "is a symbolic link (to thesis.txt)"),
        (lambda d: (d / "out").symlink_to("nowhere.jsonl"), "is a symbolic link (to nowhere"),
        (lambda d: ((d / "out").mkdir(), (d / "out" / "x").write_text("x")), "is a directory"),
        (lambda d: (d / "out").mkdir(), "is a directory"),
        (lambda d: (d / "out").write_text('{"qid":"r1","mem_id":"m01"}\n'),
         "exists and is not a judging queue"),
    ],
    ids=["user-file", "symlink", "dangling-symlink", "directory", "empty-directory",
         "other-jsonl"],
)
def test_pool_out_refuses_what_memlab_did_not_write_before_pooling(tmp_path, capsys, make,
                                                                   message):
    work = tmp_path / "w"
    work.mkdir()
    make(work)
    before = _entries(work)
    assert _pool_cli(tmp_path, work / "out") == 2
    err = capsys.readouterr()
    assert err.err == f"memlab: error: --out {work / 'out'}: {message}" + err.err.split(message)[1]
    assert err.err.count("\n") == 1 and "pooled" not in err.out
    assert _entries(work) == before  # untouched, and no temporary file left


def test_pool_out_below_a_file_is_refused(tmp_path, capsys):
    (tmp_path / "f").write_text("x")
    assert _pool_cli(tmp_path, tmp_path / "f" / "pool.jsonl") == 2
    assert "is a file, not a directory" in capsys.readouterr().err


def test_pool_out_replaces_an_earlier_queue_or_an_empty_file(tmp_path, capsys):
    out = tmp_path / "pool.jsonl"
    out.write_text("")
    assert _pool_cli(tmp_path, out) == 0
    first = out.read_text()
    assert first.startswith('{"qid":"r1","mem_id":"m0')
    assert _pool_cli(tmp_path, out, "--depth", "1") == 0  # an earlier queue: replaced
    assert out.read_text() != first
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a", "pool.jsonl", "rec"]
    capsys.readouterr()


def test_is_pool_file_recognises_only_what_write_pool_writes(tmp_path):
    from memlab.judge.pool import Pool, is_pool_file

    cands = pl.DataFrame(
        [("q1", "m1", 1, ["a/x"], 1), ("q1", "m2", 2, ["a/x", "served"], 3)],
        schema={"qid": pl.String, "mem_id": pl.String, "position": pl.Int64,
                "runs": pl.List(pl.String), "best_rank": pl.Int64}, orient="row",
    )
    path = write_pool(Pool(cands, ["a/x"], 10), tmp_path / "p.jsonl")
    assert is_pool_file(path)
    text = path.read_text()
    for bad in (text.replace('"position":2', '"position":3'),  # positions 1, 2, 3 …
                text.rstrip("\n"),  # every line ends in a newline
                text.replace('"runs":["a/x"]', '"runs":"a/x"'),
                text + "my notes\n",
                '{"mem_id":"m1","qid":"q1","position":1,"runs":[],"best_rank":1}\n'):
        path.write_text(bad)
        assert not is_pool_file(path), bad


@pytest.mark.parametrize(
    ("corrupt", "message"),
    [
        (lambda f: f.write_bytes(b""), "rankings.parquet: not a readable parquet file ("),
        (lambda f: f.write_bytes(f.read_bytes()[: len(f.read_bytes()) // 2]),
         "rankings.parquet: not a readable parquet file ("),
        (lambda f: f.write_bytes(b"PAR1" + b"\x00" * 64 + b"PAR1"),
         "rankings.parquet: not a readable parquet file ("),
        (lambda f: pl.DataFrame({"pipeline": ["x"], "qid": ["r1"], "rank": ["1"],
                                 "mem_id": ["m"]}).write_parquet(f),
         "rankings.parquet: column 'rank': must be an integer, got String"),
    ],
    ids=["empty", "truncated", "garbage", "wrong-type"],
)
def test_an_unreadable_rankings_file_is_one_line_naming_it(tmp_path, capsys, corrupt, message):
    ds = tmp_path / "rec"
    shutil.copytree(RECORDING, ds)
    run = _run(tmp_path / "a", {"bm25": {"r1": ["m01", "m06"]}}, ds)
    corrupt(run / "rankings.parquet")
    assert _pool_cli(tmp_path, tmp_path / "p.jsonl") == 2
    err = capsys.readouterr().err
    assert err.startswith(f"memlab: error: {run / message}"), err
    assert "Traceback" not in err and not (tmp_path / "p.jsonl").exists()


@pytest.mark.parametrize(
    ("manifest", "message"),
    [
        ('{"dataset": "x"}', "manifest.json: field 'dataset': must be an object"),
        ('{"dataset": {"path": 3}}', "manifest.json: field 'dataset.path': must be a string"),
        ("[" * 100_000 + "]" * 100_000, "manifest.json: invalid JSON: nested too deeply"),
        ("[]", "manifest.json: expected a JSON object"),
    ],
    ids=["dataset-string", "path-number", "deep", "array"],
)
def test_a_bad_manifest_is_one_line_naming_it(tmp_path, manifest, message):
    ds = tmp_path / "rec"
    shutil.copytree(RECORDING, ds)
    run = _run(tmp_path / "a", {"bm25": {"r1": ["m01"]}}, ds)
    (run / "manifest.json").write_text(manifest)
    with pytest.raises(ValueError) as info:
        pool_runs([run])
    assert str(info.value).startswith(f"{run / message}")


def test_a_deep_query_line_is_one_line_naming_it(tmp_path):
    ds = tmp_path / "rec"
    shutil.copytree(RECORDING, ds)
    run = _run(tmp_path / "a", {"bm25": {"r1": ["m01"]}}, ds)
    with open(ds / "queries.jsonl", "a") as fh:
        fh.write("[" * 100_000 + "]" * 100_000 + "\n")
    n = (ds / "queries.jsonl").read_text().count("\n")
    with pytest.raises(ValueError) as info:
        pool_runs([run], dataset=ds)
    assert str(info.value) == f"{ds / 'queries.jsonl'}:{n}: invalid JSON: nested too deeply to read"
