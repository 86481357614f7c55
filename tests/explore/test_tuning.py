"""The tunable pipeline, its evaluation and the curves against a baseline."""

from __future__ import annotations

import sys
from pathlib import Path

import polars as pl
import pytest

from memlab.datasets.format import Dataset, MemoryOp, Query
from memlab.embed import HashingEmbedder
from memlab.explore import session
from memlab.explore import tuning as tune
from memlab.pipeline import Pipeline
from memlab.stages.base import QueryContext, Stage, empty_candidates
from memlab.stages.bm25 import BM25
from memlab.stages.dense import Dense
from memlab.stages.graph import Graph

if str(Path(__file__).parent) not in sys.path:  # --import-mode=importlib: helpers by path
    sys.path.insert(0, str(Path(__file__).parent))
from _explore_fixtures import DAY, T0, Drop, small_dataset  # noqa: E402


def test_tuning_pipeline_defaults_are_the_seed_constants():
    params = tune.tuning_pipeline().get_params()
    assert [n for n, _ in tune.tuning_pipeline().steps] == [
        "retrieve", "lifecycle", "mmr", "entropy_gate"
    ]
    assert (params["rrf__k"], params["lifecycle__decay_factor"], params["lifecycle__boost_weight"],
            params["mmr__lambda_"], params["entropy_gate__token_budget"]) == (
        60.0, 0.98, 0.3, 0.7, 2000
    )


def test_tuning_pipeline_passes_every_constant_through():
    pipe = tune.tuning_pipeline(rrf_k=10.0, decay_factor=0.9, boost_weight=0.5, mmr_lambda=0.2,
                                token_budget=300, retrieve_k=7, mmr_candidates=4, name="x")
    p = pipe.get_params()
    assert pipe.name == "x"
    assert (p["rrf__k"], p["lifecycle__decay_factor"], p["lifecycle__boost_weight"],
            p["mmr__lambda_"], p["mmr__top_k"], p["entropy_gate__token_budget"],
            p["dense__top_k"], p["bm25__top_k"], p["graph__top_k"]) == (
        10.0, 0.9, 0.5, 0.2, 4, 300, 7, 7, 7
    )


def test_app_metrics_hold_the_curves_and_the_summary_once():
    got = tune.app_metrics()
    families = ("R_all", "Success", "nDCG")
    assert got[: 3 * 8] == [f"{f}@{k}" for f in families for k in (1, 2, 3, 5, 7, 10, 15, 20)]
    # R_all@10, Success@10 and nDCG@10 are curve points already: only the rest follow.
    assert got[3 * 8 :] == ["MRR", "stale@10", "leak@10", "dup@10", "tokens@10"]


def test_cutoff_metrics_family_by_family():
    assert tune.cutoff_metrics(("R_all", "nDCG"), (1, 5)) == [
        "R_all@1", "R_all@5", "nDCG@1", "nDCG@5"
    ]


def _pq(values: dict[str, dict[str, float]]) -> pl.DataFrame:
    rows = [(qid, m, v) for m, per in values.items() for qid, v in per.items()]
    return pl.DataFrame(rows, schema={"qid": pl.String, "metric": pl.String,
                                      "value": pl.Float64}, orient="row")


def test_metric_curves_average_over_queries_and_keep_the_families():
    a = _pq({"R_all@1": {"q1": 1.0, "q2": 0.0}, "R_all@2": {"q1": 1.0, "q2": 1.0},
             "MRR": {"q1": 1.0, "q2": 0.5}, "tokens@10": {"q1": 30.0, "q2": 10.0}})
    b = _pq({"R_all@1": {"q1": 0.0, "q2": 0.0}, "R_all@2": {"q1": 1.0, "q2": 0.0}})
    curves = tune.metric_curves({"tuned": a, "baseline": b}, families=("R_all",))
    assert curves.rows() == [
        ("tuned", "R_all", 1, (1.0 + 0.0) / 2),
        ("tuned", "R_all", 2, (1.0 + 1.0) / 2),
        ("baseline", "R_all", 1, 0.0),
        ("baseline", "R_all", 2, (1.0 + 0.0) / 2),
    ]
    with_tokens = tune.metric_curves({"tuned": a}, families=("R_all", "tokens"))
    assert with_tokens.filter(pl.col("family") == "tokens").rows() == [
        ("tuned", "tokens", 10, (30.0 + 10.0) / 2)
    ]


def test_summary_table_means_and_differences():
    a = _pq({"MRR": {"q1": 1.0, "q2": 0.5}, "R_all@10": {"q1": 1.0, "q2": 1.0}})
    b = _pq({"MRR": {"q1": 0.5, "q2": 0.5}, "R_all@10": {"q1": 1.0, "q2": 0.0}})
    table = tune.summary_table({"baseline": b, "tuned": a}, baseline="baseline")
    assert table.columns == ["metric", "baseline", "tuned", "Δ tuned"]
    assert table.rows() == [
        ("MRR", 0.5, 0.75, 0.75 - 0.5),
        ("R_all@10", 0.5, 1.0, 1.0 - 0.5),
    ]
    with pytest.raises(ValueError, match="baseline 'nope'"):
        tune.summary_table({"tuned": a}, baseline="nope")


def test_tag_means_per_primary_tag():
    qs = [Query(0, "q1", T0, "a", tags=("x", "client:c")), Query(0, "q2", T0, "b", tags=("y",)),
          Query(0, "q3", T0, "c", tags=("x",))]
    a = _pq({"R_all@10": {"q1": 1.0, "q2": 0.0, "q3": 0.0}})
    b = _pq({"R_all@10": {"q1": 1.0, "q2": 1.0, "q3": 1.0}})
    table = tune.tag_means({"baseline": b, "tuned": a}, qs, "R_all@10")
    assert table.rows() == [
        ("baseline", "x", 1.0, 2),
        ("tuned", "x", (1.0 + 0.0) / 2, 2),
        ("baseline", "y", 1.0, 1),
        ("tuned", "y", 0.0, 1),
    ]


def _keyword_dataset() -> Dataset:
    ops = [
        MemoryOp.store("m1", T0, "the boiler was serviced", "event", client_id="acme",
                       source_agent="a"),
        MemoryOp.store("m2", T0 + DAY, "invoice is overdue", "event", client_id="acme",
                       source_agent="a"),
        MemoryOp.store("m3", T0 + DAY, "coffee machine broke", "event", client_id="acme",
                       source_agent="a"),
    ]
    queries = [
        Query(0, "q1", T0 + 2 * DAY, "overdue invoice", client_id="acme", relevant={"m2": 1},
              tags=("exact-id",)),
        Query(0, "q2", T0 + 2 * DAY, "boiler", client_id="acme", relevant={"m3": 1},
              tags=("adversarial",)),
    ]
    return Dataset(None, {"name": "kw"}, ops, queries)


def _session(ds: Dataset, pipeline: Pipeline, metrics: list[str], **kw) -> tune.TuningSession:
    return tune.TuningSession(session.make_replayer(ds, HashingEmbedder(dim=16)), pipeline,
                              metrics, **kw)


def test_session_scores_each_query_and_drops_excluded_tags():
    ds = _keyword_dataset()
    sess = _session(ds, Pipeline([("bm25", BM25())]), ["R_all@1", "tokens@1"])
    pq = sess.baseline()
    # q2 is adversarial: left out of the relevance metric, kept in the memory metric.
    assert pq.filter(pl.col("metric") == "R_all@1").rows() == [("q1", "R_all@1", 1.0)]
    tokens = dict(pq.filter(pl.col("metric") == "tokens@1").select("qid", "value").rows())
    # q1's top hit is "invoice is overdue" (3 tokens), q2's "the boiler was serviced" (4).
    assert tokens == {"q1": 3.0, "q2": 4.0}
    assert sess.evaluate({}) is pq  # kept per parameter set


def test_session_on_a_subset_of_queries():
    ds = _keyword_dataset()
    sess = _session(ds, Pipeline([("bm25", BM25())]), ["R_all@1"], queries=ds.queries[1:],
                    exclude_tags=())
    # Not excluded now; q2 wants m3 but BM25 ranks m1 first.
    assert sess.baseline().rows() == [("q2", "R_all@1", 0.0)]


def test_session_scores_like_eval_and_reuses_the_retrievers():
    from memlab.eval.experiment import score_rankings
    from memlab.stages.lifecycle import Lifecycle

    ds = small_dataset()
    pipe = Pipeline([("bm25", BM25()), ("lifecycle", Lifecycle())], name="p")
    sess = _session(ds, pipe, ["R_all@1", "MRR"], exclude_tags=())
    sess.baseline()
    assert sess.last_reuse_ == 0.0  # two queries, one cached stage: nothing to reuse yet
    params = {"lifecycle__decay_factor": 0.5, "lifecycle__boost_weight": 0.0}
    got = sess.evaluate(params)
    assert sess.last_reuse_ == 1.0  # BM25's outputs were reused for both queries
    plain = sess.replayer.run(pipe.clone().set_params(**params))
    assert got.equals(score_rankings(ds, plain, ["R_all@1", "MRR"]))
    assert sess.pipeline.get_params()["lifecycle__decay_factor"] == 0.98  # defaults untouched


class _Rewrite(Stage):
    """A cacheable stage that sets the query vector (as HyDE does) and passes its input on."""

    cacheable = True

    def __init__(self, scale: float = 2.0) -> None:
        self.scale = scale

    def transform(self, frame: pl.DataFrame, ctx: QueryContext) -> pl.DataFrame:
        ctx.query_vector = ctx.vector() * self.scale
        return frame


def test_memo_keyed_on_the_visible_rows_restores_the_query_vector():
    ds = small_dataset()
    state = session.replay_to_query(session.make_replayer(ds, HashingEmbedder(dim=16)), "q2")
    cache: dict = {}
    memo = tune.Memo(_Rewrite(), cache)
    first = memo.transform(empty_candidates(), state.ctx)
    vec = state.ctx.query_vector
    assert vec is not None and len(cache) == 1
    state.ctx.query_vector = None
    assert memo.transform(empty_candidates(), state.ctx) is first
    assert state.ctx.query_vector is vec
    assert (memo.calls_, memo.hits_) == (2, 1)
    tune.Memo(_Rewrite(scale=3.0), cache).transform(empty_candidates(), state.ctx)
    assert len(cache) == 2  # other parameters, other entry


def test_memo_fuse_reuses_a_fusion_of_the_same_lists():
    from memlab.stages.rrf import RRF

    ds = _expiring_dataset()
    state = session.replay_to_query(session.make_replayer(ds, HashingEmbedder(dim=16)), "q1")
    ctx = state.ctx
    lists = [BM25(top_k=3).transform(empty_candidates(), ctx),
             Dense(top_k=3).transform(empty_candidates(), ctx)]
    memo = tune.MemoFuse(RRF(k=1.0), {})
    first = memo.fuse(lists, ctx)
    assert first.equals(RRF(k=1.0).fuse(lists, ctx))
    assert memo.fuse(lists, ctx) is first
    shorter = [lists[0].head(1), lists[1]]
    assert memo.fuse(shorter, ctx).equals(RRF(k=1.0).fuse(shorter, ctx))
    assert (memo.calls_, memo.hits_) == (3, 1)


def _expiring_dataset() -> Dataset:
    """Two old events about Bob's boiler among four facts; whichever event nobody retrieved by
    day 40 has expired (TTL 30 days)."""
    ops = [
        MemoryOp.store("e1", T0, "Heroku support serviced the boiler", "event", client_id="acme",
                       source_agent="a"),
        MemoryOp.store("e2", T0, "Heroku support found the boiler pressure low", "event",
                       client_id="acme", source_agent="a"),
    ] + [
        MemoryOp.store(f"f{i}", T0, text, "fact", key=f"k{i}", client_id="acme",
                       source_agent="a")
        for i, text in enumerate(["Invoices go out on Mondays", "The shop runs on Heroku",
                                  "Stripe handles billing", "Coffee beans come from Lima"])
    ]
    queries = [
        Query(0, "q1", T0 + DAY, "Heroku boiler", client_id="acme", relevant={"e1": 1},
              tags=("x",)),
        Query(0, "q2", T0 + 40 * DAY, "Heroku boiler", client_id="acme", relevant={"e1": 1},
              tags=("x",)),
    ]
    return Dataset(None, {"name": "expiring"}, ops, queries)


@pytest.mark.parametrize("stage", [Dense(top_k=2), BM25(top_k=1), Graph(top_k=2)],
                         ids=["dense", "bm25", "graph"])
def test_memo_of_a_separable_retriever_follows_visibility(stage):
    ds = _expiring_dataset()
    state = session.replay_to_query(session.make_replayer(ds, HashingEmbedder(dim=16)), "q1")
    ctx = state.ctx
    cache: dict = {}
    memo = tune.Memo(stage, cache)
    direct = stage.clone().transform(empty_candidates(), ctx)
    assert direct.height >= 1
    assert memo.transform(empty_candidates(), ctx).equals(direct)
    # Hide the top hit: same store size, other visible rows, same cache entry.
    top = direct["mem_id"][0]
    ctx.store.retire(top, "expired", now=ctx.now)
    hidden = stage.clone().transform(empty_candidates(), ctx)
    assert top not in hidden["mem_id"].to_list()
    got = memo.transform(empty_candidates(), ctx)
    if hidden.height:
        assert got.equals(hidden)
    outputs = [k for k in cache if k[0] != "fingerprint"]  # digests of cached frames aside
    assert len(outputs) == 1 + (hidden.height == 0)  # an empty result runs the stage itself
    # top_k is not part of the key: a wider cut reuses the ranking of every row.
    wider = tune.Memo(stage.clone().set_params(top_k=None), cache)
    out = wider.transform(empty_candidates(), ctx)
    assert out.equals(stage.clone().set_params(top_k=None).transform(empty_candidates(), ctx))
    assert wider.hits_ == (1 if hidden.height else 0)


def test_a_change_that_changes_visibility_scores_like_a_fresh_replay():
    from memlab.eval.experiment import run_experiment, score_rankings

    ds = _expiring_dataset()
    pipe = Pipeline([("bm25", BM25()), ("drop", Drop(mem_id="e1"))], name="p")
    replayer = session.make_replayer(ds, HashingEmbedder(dim=16), ttl_days=30.0, touch_k=1)
    sess = tune.TuningSession(replayer, pipe, ["R_all@1"], exclude_tags=())
    base = sess.baseline()
    # Defaults: q1 touches e2, so e1 has expired by q2; changed: q1 touches e1, e2 expires.
    got = sess.evaluate({"drop__mem_id": "e2"})
    assert sess.last_reuse_ == 1.0  # q2's BM25 ranking is the cached one, filtered
    assert dict(base.select("qid", "value").rows()) == {"q1": 0.0, "q2": 0.0}
    assert dict(got.select("qid", "value").rows()) == {"q1": 1.0, "q2": 1.0}
    fresh = session.make_replayer(ds, HashingEmbedder(dim=16), ttl_days=30.0, touch_k=1)
    plain = fresh.run(pipe.clone().set_params(drop__mem_id="e2"))
    assert got.equals(score_rankings(ds, plain, ["R_all@1"]))
    # and what `memlab eval` reports for the pipeline with that constant
    exp = run_experiment(ds, [pipe.clone().set_params(drop__mem_id="e2")], metrics=["R_all@1"],
                         embedder=HashingEmbedder(dim=16), exclude_tags=(), tests=("t",),
                         replay=replayer.config, progress=False, write_report=False)
    assert got.equals(exp.per_query.select("qid", "metric", "value").sort("metric", "qid"))


def test_memoized_wraps_cacheable_stages_only():
    from memlab.stages.lifecycle import Lifecycle

    memo = tune.memoized(tune.tuning_pipeline(), {})
    kinds = {n: type(s).__name__ for n, s in memo.named_stages()}
    assert kinds == {"retrieve": "Parallel", "dense": "Memo", "bm25": "Memo", "graph": "Memo",
                     "rrf": "MemoFuse", "lifecycle": "Lifecycle", "mmr": "Memo",
                     "entropy_gate": "EntropyGate"}
    assert isinstance(Lifecycle(), type(memo.stage("lifecycle")))


def test_tunable_params_read_the_constants_and_their_declared_ranges():
    from memlab.stages.lifecycle import Lifecycle

    specs = tune.tunable_params(Pipeline([("bm25", BM25(top_k=10)), ("lc", Lifecycle())]))
    got = {s.name: (s.default, s.low, s.high, s.step, s.integer) for s in specs}
    assert got == {
        "bm25__top_k": (10, 1, 4 * 10, 1, True),  # [1, inf): four times the default
        "bm25__k1": (1.5, 0.0, 4 * 1.5, 0.01, False),
        "bm25__b": (0.75, 0.0, 1.0, 0.01, False),
        "bm25__epsilon": (0.25, 0.0, 1.0, 0.01, False),
        "lc__decay_factor": (0.98, 0.0, 1.0, 0.01, False),
        "lc__boost_weight": (0.3, 0.0, 1.0 * 1.2, 0.01, False),  # max(4 × 0.3, 0 + 1)
        "lc__min_similarity": (0.3, -1.0, 1.0, 0.01, False),
    }


def test_changed_params_cast_and_drop_the_defaults():
    specs = tune.tunable_params(Pipeline([("bm25", BM25(top_k=10))]))
    assert tune.changed_params(specs, {"bm25__top_k": 12.0, "bm25__b": 0.75, "x": 1}) == {
        "bm25__top_k": 12
    }
    with pytest.raises(ValueError, match="'bm25__k1'"):
        tune.changed_params(specs, {"bm25__k1": "fast"})


def test_comparison_splits_and_tests_against_the_defaults():
    from memlab.eval.experiment import split_queries
    from memlab.eval.stats import paired_test

    ds = _keyword_dataset()
    sess = _session(ds, Pipeline([("bm25", BM25())]), ["R_all@1"], exclude_tags=(),
                    test_fraction=0.5, seed=3)
    train, test = split_queries(ds.queries, test_fraction=0.5, seed=3)
    assert (sess.train, sess.test) == (train, test)
    # defaults: q1 1.0, q2 0.0; tuned: q1 0.0, q2 1.0
    tuned = _pq({"R_all@1": {"q1": 0.0, "q2": 1.0}})
    table = sess.comparison(tuned, ["R_all@1"])
    base = {"q1": 1.0, "q2": 0.0}
    rows = []
    for split, qs in (("train", train), ("held-out", test)):
        ids = sorted(q.qid for q in qs)
        if not ids:
            rows.append((split, "R_all@1", 0, None, None, None, None))
            continue
        b = [base[i] for i in ids]
        t = [1.0 - base[i] for i in ids]
        p = paired_test(t, b)
        rows.append((split, "R_all@1", len(ids), sum(b) / len(b), sum(t) / len(t),
                     sum(t) / len(t) - sum(b) / len(b), None if p != p else p))
    assert table.rows() == rows


def test_save_writes_a_configuration_that_loads(tmp_path):
    from memlab.pipeline import load_pipeline

    sess = _session(_keyword_dataset(), Pipeline([("bm25", BM25())], name="kw"), ["R_all@1"])
    out = sess.save({"bm25__k1": 0.9}, tmp_path / "kw-tuned.toml", name="kw-tuned")
    back = load_pipeline(out)
    assert (back.name, back.get_params()["bm25__k1"]) == ("kw-tuned", 0.9)
    assert sess.pipeline.get_params()["bm25__k1"] == 1.5


def test_describe_params():
    assert tune.describe_params({"rrf_k": 60.0, "decay": 0.98123456, "budget": 200}) == (
        "rrf_k = 60, decay = 0.9812, budget = 200"
    )


def test_charts_build():
    curves = tune.metric_curves({"tuned": _pq({"R_all@1": {"q": 1.0}}),
                                 "baseline": _pq({"R_all@1": {"q": 0.0}})})
    spec = tune.curve_chart(curves).to_dict()
    assert spec["facet"]["column"]["field"] == "family"
    assert spec["spec"]["encoding"]["strokeDash"]["condition"]["test"] == (
        "(datum.config === 'baseline')"
    )


def test_memo_gives_back_the_same_frame_for_the_same_visible_rows():
    ds = _expiring_dataset()
    state = session.replay_to_query(session.make_replayer(ds, HashingEmbedder(dim=16)), "q1")
    cache: dict = {}
    memo = tune.Memo(BM25(top_k=2), cache)
    first = memo.transform(empty_candidates(), state.ctx)
    again = memo.transform(empty_candidates(), state.ctx)
    assert again is first and memo.hits_ == 1
    # Its digest is remembered, and equals that of an equal frame computed afresh.
    assert tune._fingerprint(first, cache) == tune._fingerprint(first.clone(), {})
    assert cache[("fingerprint", id(first))][1] is not None
