import hashlib
from pathlib import Path

import polars as pl
import pytest

from memlab.datasets.format import Dataset, Query, load_dataset
from memlab.embed import HashingEmbedder
from memlab.eval.experiment import run_experiment
from memlab.eval.protocol import CrossFitted, EvalProtocol, describe_run, run_query_count
from memlab.stages.base import QueryContext, Stage

HANDMADE = Path(__file__).resolve().parents[1] / "fixtures" / "handmade"
CRAG = str(Path(__file__).parent / "crag_pipeline.toml")


def queries(spec: dict[str, str | None]) -> list[Query]:
    return [
        Query(line=0, qid=q, ts=float(i), text=q, client_id=c)
        for i, (q, c) in enumerate(spec.items())
    ]


def test_folds_are_dealt_round_robin_in_hash_order_whatever_the_query_order():
    qs = queries({f"q{i}": None for i in range(7)})
    proto = EvalProtocol(folds=3, seed=4)
    fold_of = proto.assign(qs)
    order = sorted(
        (f"q{i}" for i in range(7)), key=lambda k: hashlib.sha256(f"4:{k}".encode()).digest()
    )
    assert fold_of == {qid: i % 3 for i, qid in enumerate(order)}
    assert proto.assign(list(reversed(qs))) == fold_of
    sizes = sorted(list(fold_of.values()).count(f) for f in range(3))
    assert sizes == [2, 2, 3]  # 7 queries over 3 folds: 7 = 2 + 2 + 3
    assert EvalProtocol(folds=3, seed=5).assign(qs) != fold_of


def test_grouping_by_client_keeps_a_client_in_one_fold():
    qs = queries({"a1": "A", "a2": "A", "b1": "B", "c1": "C", "c2": "C", "c3": "C"})
    fold_of = EvalProtocol(folds=3, group_by="client").assign(qs)
    assert fold_of["a1"] == fold_of["a2"]
    assert fold_of["c1"] == fold_of["c2"] == fold_of["c3"]
    assert sorted({fold_of["a1"], fold_of["b1"], fold_of["c1"]}) == [0, 1, 2]
    with pytest.raises(ValueError, match="4 folds need at least 4 groups, but the queries form 3"):
        EvalProtocol(folds=4, group_by="client").check_groups(qs)


def test_protocol_comes_from_dataset_toml_and_the_overrides():
    ds = Dataset(None, {"name": "x", "evaluation": {"folds": 3, "group_by": "client"}}, [], [])
    proto = EvalProtocol.from_dataset(ds, seed=2)
    assert (proto.folds, proto.group_by, proto.seed) == (3, "client", 2)
    assert dict(proto.source) == {"folds": "dataset", "group_by": "dataset"}
    over = EvalProtocol.from_dataset(ds, folds=10)
    assert (over.folds, over.group_by) == (10, "client")
    assert dict(over.source) == {"folds": "override", "group_by": "dataset"}
    plain = EvalProtocol.from_dataset(Dataset(None, {"name": "y"}, [], []))
    assert (plain.folds, plain.group_by, plain.source) == (5, "query", ())


@pytest.mark.parametrize(
    ("table", "message"),
    [
        ({"folds": 1}, "dataset.toml \\[evaluation\\]: field 'folds' must be at least 2, got 1"),
        ({"folds": "5"}, "field 'folds' must be an integer"),
        ({"group_by": "tenant"}, "field 'group_by' must be one of query, client"),
        ({"k": 5}, "unknown field 'k'; known: folds, group_by"),
    ],
)
def test_a_bad_evaluation_table_names_the_field(table, message):
    ds = Dataset(None, {"name": "x", "evaluation": table}, [], [])
    with pytest.raises((TypeError, ValueError), match=message):
        EvalProtocol.from_dataset(ds)


class Memo(Stage):
    """A learned stage that remembers the queries it was fitted on and tags its output."""

    def __init__(self, tag: str = "") -> None:
        self.tag = tag

    @property
    def requires_fit(self) -> bool:
        return True

    def fit(self, store, **kwargs):
        self.seen_ = sorted(q.qid for q in kwargs["queries"])
        self.relevant_ = sorted(kwargs["relevant"])
        self.candidates_ = sorted(kwargs["candidates"])
        return self

    def transform(self, frame, ctx):
        return frame.with_columns(pl.lit(",".join(self.seen_)).alias("mem_id"))


def ctx(qid: str) -> QueryContext:
    return QueryContext(qid=qid, text=qid, store=None, now=0.0)


def test_cross_fitted_copies_never_see_their_fold_and_answer_its_queries():
    folds = {"q1": 0, "q2": 1, "q3": 0, "q4": 2}
    stage = CrossFitted(Memo(), folds)
    contexts = [ctx(q) for q in folds]
    stage.fit(None, queries=contexts, relevant={q: {"m"} for q in folds},
              candidates={q: pl.DataFrame() for q in folds})
    seen = [c.seen_ for c in stage.fitted_]
    assert seen == [["q2", "q4"], ["q1", "q3", "q4"], ["q1", "q2", "q3"]]
    assert [c.relevant_ for c in stage.fitted_] == [c.seen_ for c in stage.fitted_]
    assert [c.candidates_ for c in stage.fitted_] == [c.seen_ for c in stage.fitted_]
    assert not hasattr(stage.stage, "seen_")  # the template stays unfitted
    frame = pl.DataFrame({"qid": ["q3"], "mem_id": ["x"], "score": [1.0], "rank": [1]})
    assert stage.transform(frame, ctx("q3"))["mem_id"].to_list() == ["q2,q4"]
    assert stage.transform(frame, ctx("q4"))["mem_id"].to_list() == ["q1,q2,q3"]
    # a query outside every fold was seen by no copy: fold 0's copy answers
    assert stage.transform(frame, ctx("free text"))["mem_id"].to_list() == ["q2,q4"]
    with pytest.raises(ValueError, match="not fitted"):
        CrossFitted(Memo(), folds).transform(frame, ctx("q1"))


def run(pipelines, **kw):
    return run_experiment(
        HANDMADE, pipelines, embedder=HashingEmbedder(dim=64), progress=False,
        n_resamples=200, **kw,
    )


def test_the_population_does_not_depend_on_which_pipelines_share_the_run():
    alone = run(["rrf"])
    together = run(["rrf", CRAG])
    n = len(load_dataset(HANDMADE).queries)
    assert n == 10
    for res in (alone, together):
        assert res.queries.height == n
        assert res.manifest["protocol"]["queries"] == n
        assert res.manifest["dataset"]["evaluated_queries"] == n
    assert together.metrics["rrf"] == alone.metrics["rrf"]
    left = alone.per_query.sort("qid", "metric")
    right = together.per_query.filter(pl.col("pipeline") == "rrf").sort("qid", "metric")
    assert left.equals(right)
    # the learned pipeline is scored on every query too, out of fold
    crag = together.per_query.filter(pl.col("pipeline") == "crag")
    assert set(crag["qid"]) == set(left["qid"])
    assert alone.manifest["protocol"]["description"] == (
        "10 queries; learned stages cross-fitted over 5 folds (by query, seed 0)"
    )
    assert together.manifest["protocol"]["description"] == (
        alone.manifest["protocol"]["description"]
    )
    assert together.manifest["protocol"]["cross_fitted"] == ["crag"]
    assert alone.manifest["protocol"]["cross_fitted"] == []


def test_cross_fit_options_reach_the_manifest_and_too_many_folds_fail_early():
    res = run(["rrf", CRAG], folds=2, seed=1)
    assert res.manifest["protocol"]["description"] == (
        "10 queries; learned stages cross-fitted over 2 folds (by query, seed 1)"
    )
    with pytest.raises(ValueError, match="11 folds need at least 11 groups"):
        run(["rrf", CRAG], folds=11)


def test_describe_run_reads_old_and_new_manifests():
    new = {"protocol": {"queries": 320, "description": "320 queries; learned stages cross-fitted "
                        "over 5 folds (by query, seed 0)"}}
    assert describe_run(new).startswith("320 queries; learned")
    assert run_query_count(new) == 320
    old = {"dataset": {"queries": 320, "evaluated_queries": 159}, "seed": 0,
           "held_out_split": {"test_fraction": 0.5, "n_test": 159}}
    assert describe_run(old) == (
        "159 of 320 queries (a held-out split: test fraction 0.5, seed 0; learned stages "
        "fitted on the other queries)"
    )
    assert run_query_count(old) == 159
    assert describe_run({"dataset": {"queries": 9, "evaluated_queries": 9}}) == (
        "9 queries; no learned stage"
    )
    assert describe_run({}) == "protocol unknown (the manifest does not record it)"
    assert run_query_count({}) is None


def test_every_table_of_a_run_names_the_query_count_and_the_protocol(tmp_path, capsys):
    from memlab.cli import main
    from memlab.eval.export import export_run

    out = tmp_path / "run"
    run(["bm25", "rrf"], out=out)
    line = "10 queries; learned stages cross-fitted over 5 folds (by query, seed 0)"
    report = (out / "report.md").read_text()
    # the answer, the aggregate table, the paired comparison and the per-tag table
    assert report.count(line) == 4
    assert f"Every table below: {line} (tags left out" in (out / "appendix.md").read_text()
    exported, _ = export_run(out)
    agg = pl.read_csv(exported / "aggregate.csv")
    assert set(agg["protocol"]) == {line}
    assert agg.filter((pl.col("pipeline") == "rrf") & (pl.col("metric") == "MRR"))["n"][0] == 10
    assert set(pl.read_csv(exported / "comparison.csv")["protocol"]) == {line}
    assert f"handmade, {line}." in (exported / "comparison.tex").read_text()
    assert main(["compare", str(out), str(out), "--tests", "t", "--n-resamples", "10"]) == 0
    printed = capsys.readouterr().out
    assert f"A: {line}." in printed and f"B: {line}." in printed
