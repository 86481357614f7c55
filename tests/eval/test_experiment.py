import json
from pathlib import Path

import polars as pl
import pytest

from memlab.embed import HashingEmbedder
from memlab.eval.experiment import run_experiment, split_queries
from memlab.pipeline import load_pipeline

HANDMADE = Path(__file__).resolve().parents[1] / "fixtures" / "handmade"
FILES = {
    "manifest.json", "metrics.json", "per_query.parquet", "rankings.parquet",
    "comparison.parquet", "comparison_by_tag.parquet", "per_tag.parquet", "timings.parquet",
    "qrels.parquet", "queries.parquet", "report.md", "appendix.md",
    "metrics.png", "metrics.svg", "tags.png", "tags.svg", ".memlab-output.json",
}


def run(out, **kw):
    kw.setdefault("pipelines", ["bm25", "dense", "hybrid"])
    return run_experiment(
        HANDMADE, embedder=HashingEmbedder(dim=64), out=out, progress=False,
        n_resamples=200, **kw,
    )


def test_writes_the_output_contract_and_is_deterministic(tmp_path):
    res = run(tmp_path / "a")
    assert {p.name for p in (tmp_path / "a").iterdir()} == FILES
    again = run(tmp_path / "b")
    a = (tmp_path / "a" / "metrics.json").read_bytes()
    assert a == (tmp_path / "b" / "metrics.json").read_bytes()
    metrics = json.loads(a)
    assert list(metrics) == ["bm25", "dense", "hybrid"]
    assert metrics == res.metrics == again.metrics
    rk = pl.read_parquet(tmp_path / "a" / "rankings.parquet")
    assert rk.columns == ["pipeline", "qid", "rank", "mem_id", "score"]
    pq = pl.read_parquet(tmp_path / "a" / "per_query.parquet")
    assert pq.columns == ["pipeline", "qid", "metric", "value"]
    # per-query values average to the aggregate
    mean = pq.filter((pl.col("pipeline") == "bm25") & (pl.col("metric") == "R_all@10"))
    assert metrics["bm25"]["R_all@10"] == round(mean["value"].mean(), 6)
    man = json.loads((tmp_path / "a" / "manifest.json").read_text())
    assert man["dataset"]["name"] == "handmade"
    assert set(man["dataset"]["sha256"]) == {"dataset.toml", "memories.jsonl", "queries.jsonl"}
    assert man["pipelines"]["hybrid"] == load_pipeline("hybrid").to_config()
    assert man["baseline"] == "bm25" and man["seed"] == 0
    comp = pl.read_parquet(tmp_path / "a" / "comparison.parquet")
    assert sorted(set(comp["pipeline"])) == ["dense", "hybrid"]


def test_bm25_answers_the_exact_id_query_of_the_handmade_fixture(tmp_path):
    res = run(None, pipelines=["bm25"])
    top = res.rankings.filter(pl.col("qid") == "hq04").sort("rank")["mem_id"].to_list()
    assert top[0] == "h07"
    assert res.out is None


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"pipelines": ["nope"]}, "unknown pipeline 'nope'"),
        ({"metrics": ["R_all@10", "Recall@x"]}, "Recall@x"),
        ({"baseline": "dense", "pipelines": ["bm25"]}, "baseline 'dense'"),
        ({"correction": "magic"}, "unknown correction"),
    ],
)
def test_bad_input_leaves_no_output_directory(tmp_path, kwargs, message):
    with pytest.raises(ValueError, match=message):
        run(tmp_path / "out", **kwargs)
    assert not (tmp_path / "out").exists()
    assert list(tmp_path.iterdir()) == []


def test_invalid_dataset_leaves_no_output(tmp_path):
    bad = tmp_path / "bad"
    bad.mkdir()
    (bad / "dataset.toml").write_text('name = "bad"\n')
    (bad / "memories.jsonl").write_text('{"id": "a"}\n')
    (bad / "queries.jsonl").write_text("")
    with pytest.raises(ValueError):
        run_experiment(bad, ["bm25"], embedder=HashingEmbedder(dim=8), out=tmp_path / "o")
    assert not (tmp_path / "o").exists()


def test_learned_stages_are_cross_fitted_and_every_query_is_scored(tmp_path):
    res = run(None, pipelines=["bm25", str(Path(__file__).parent / "crag_pipeline.toml")])
    assert res.manifest["protocol"]["folds"] == 5
    assert res.manifest["protocol"]["cross_fitted"] == ["crag"]
    assert "held_out_split" not in res.manifest
    assert set(res.per_query["qid"]) == {q.qid for q in res_queries()}


def res_queries():
    from memlab.datasets.format import load_dataset

    return load_dataset(HANDMADE).queries


def test_split_is_stable_and_seeded():
    qs = res_queries()
    a = split_queries(qs, seed=3)
    b = split_queries(list(reversed(qs)), seed=3)
    assert {q.qid for q in a[1]} == {q.qid for q in b[1]}
    assert len(a[0]) + len(a[1]) == len(qs)
    with pytest.raises(ValueError, match="test_fraction"):
        split_queries(qs, test_fraction=1.0)


def test_split_by_client_keeps_each_client_on_one_side():
    import hashlib

    qs = res_queries()
    for seed in range(6):
        train, test = split_queries(qs, seed=seed, by="client")
        for q in qs:
            h = hashlib.sha256(f"{seed}:{q.client_id}".encode()).digest()
            held_out = int.from_bytes(h[:8], "big") / 2**64 < 0.5
            assert (q in test) == held_out and (q in train) != held_out
    with pytest.raises(ValueError, match="split by must be one of query, client"):
        split_queries(qs, by="tenant")


def test_replay_cost_counts_stages_times_replays() -> None:
    from memlab.eval.experiment import replay_cost

    assert replay_cost(load_pipeline("bm25")) == 1
    # hybrid's named steps: the parallel step, its dense, bm25 and graph, rrf, lifecycle
    assert replay_cost(load_pipeline("hybrid")) == 6
    # dense and a learned CRAG: two stages, replayed twice (the prefix to fit CRAG, then all)
    crag = load_pipeline(str(Path(__file__).parent / "crag_pipeline.toml"))
    assert replay_cost(crag) == 2 * 2


class _Warming:
    """An executor that records what its workers were asked to import."""

    def __init__(self) -> None:
        self.calls: list[tuple[tuple[str, ...], int | None]] = []

    def warm(self, modules, tasks=None) -> None:
        self.calls.append((tuple(modules), tasks))


def test_workers_of_a_run_that_draws_charts_import_the_chart_library_while_they_warm() -> None:
    from memlab.eval.executor import WORKER_MODULES
    from memlab.eval.experiment import warm_workers

    ex = _Warming()
    pipes = [load_pipeline("bm25")]
    warm_workers(ex, pipes, 3)
    warm_workers(ex, pipes, 3, charts=True)
    assert ex.calls == [(WORKER_MODULES, 3), ((*WORKER_MODULES, "altair"), 3)]
