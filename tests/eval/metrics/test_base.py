"""Tests of memlab.eval.metrics.base: names, registry, input checks, populations, a reference."""

from __future__ import annotations

import math
import pkgutil
import random
import sys
from pathlib import Path

import polars as pl
import pytest

import memlab.eval.metrics as metrics_package
from memlab.eval.metrics import (
    METRIC_ALIASES,
    METRICS,
    MetricSpec,
    aggregate,
    evaluate,
    parse_metric,
    register_metric,
)
from memlab.registry import Registry

if str(Path(__file__).parent) not in sys.path:  # --import-mode=importlib: helpers by path
    sys.path.insert(0, str(Path(__file__).parent))
from _frames import (  # noqa: E402
    HAND_QRELS,
    HAND_RANKINGS,
    MEMORIES,
    RANK_SCHEMA,
    make_qrels,
    make_rankings,
    values,
)


@pytest.fixture
def hand() -> pl.DataFrame:
    metrics = [
        "nDCG@3",
        "nDCG",
        "MRR",
        "MRR@2",
        "MAP",
        "MAP@3",
        "R_all@1",
        "R_all@3",
        "R_all@4",
        "Success@1",
        "Success@3",
        "Recall@1",
        "Recall@3",
    ]
    return evaluate(make_rankings(HAND_RANKINGS), make_qrels(HAND_QRELS), metrics)








def test_hand_aggregate_counts_unranked_query(hand: pl.DataFrame) -> None:
    means = aggregate(hand)
    assert means["MRR"] == pytest.approx((1 / 1 + 1 / 3 + 0.0) / 3)
    assert means["R_all@3"] == pytest.approx((1 + 0 + 0) / 3)
    assert list(means) == sorted(means)


def test_output_shape_and_order(hand: pl.DataFrame) -> None:
    assert hand.schema == pl.Schema({"qid": pl.String, "metric": pl.String, "value": pl.Float64})
    assert hand.equals(hand.sort("metric", "qid"))
    # q4 has rankings but no qrels: no relevance rows at all.
    assert "q4" not in hand.get_column("qid").to_list()
    assert hand.height == 13 * 3


def test_input_row_order_does_not_matter() -> None:
    rankings = make_rankings(HAND_RANKINGS)
    qrels = make_qrels(HAND_QRELS)
    metrics = ["nDCG@3", "MAP", "R_all@3", "MRR@2"]
    straight = evaluate(rankings, qrels, metrics)
    shuffled = evaluate(
        rankings.sample(fraction=1.0, shuffle=True, seed=7),
        qrels.sample(fraction=1.0, shuffle=True, seed=8),
        list(reversed(metrics)),
    )
    assert straight.equals(shuffled)


# --------------------------------------------------------------------------- reference


def ref_ndcg(ranking: list[str], rels: dict[str, int], k: int | None) -> float:
    top = ranking if k is None else ranking[:k]
    ideal = sorted(rels.values(), reverse=True)
    ideal = ideal if k is None else ideal[:k]
    dcg = sum(rels.get(doc, 0) / math.log2(i + 2) for i, doc in enumerate(top))
    idcg = sum(gain / math.log2(i + 2) for i, gain in enumerate(ideal))
    return dcg / idcg


def ref_rr(ranking: list[str], rels: dict[str, int], k: int | None) -> float:
    top = ranking if k is None else ranking[:k]
    return next((1 / (i + 1) for i, doc in enumerate(top) if doc in rels), 0.0)


def ref_ap(ranking: list[str], rels: dict[str, int], k: int | None) -> float:
    top = ranking if k is None else ranking[:k]
    hits, total = 0, 0.0
    for i, doc in enumerate(top):
        if doc in rels:
            hits += 1
            total += hits / (i + 1)
    return total / len(rels)


def ref_frac(ranking: list[str], rels: dict[str, int], k: int) -> float:
    return len(set(ranking[:k]) & set(rels)) / len(rels)


def ref_any(ranking: list[str], rels: dict[str, int], k: int) -> float:
    return float(bool(set(ranking[:k]) & set(rels)))


def ref_all(ranking: list[str], rels: dict[str, int], k: int) -> float:
    return float(set(rels) <= set(ranking[:k]))


REFERENCE = {
    "nDCG": ref_ndcg,
    "MRR": ref_rr,
    "MAP": ref_ap,
    "Recall": ref_frac,
    "Success": ref_any,
    "R_all": ref_all,
}


def test_agrees_with_plain_python_reference() -> None:
    rnd = random.Random(20240611)
    pool = [f"m{i:02d}" for i in range(14)]
    lists: dict[str, list[str]] = {}
    judged: dict[str, dict[str, int]] = {}
    for i in range(40):
        qid = f"q{i:02d}"
        ranking = rnd.sample(pool, rnd.randint(0, 10))
        if ranking:
            lists[qid] = ranking
        if i % 9 != 0:
            judged[qid] = {m: rnd.randint(1, 3) for m in rnd.sample(pool, rnd.randint(1, 5))}
    rankings = make_rankings(lists)
    # Scores that contradict the ranks: only the rank order may count.
    rankings = rankings.with_columns(score=pl.lit(0.5)).sample(fraction=1.0, shuffle=True, seed=1)
    names = [f"{fam}@{k}" for fam in REFERENCE for k in (1, 3, 5, 10)] + ["nDCG", "MRR", "MAP"]
    got = evaluate(rankings, make_qrels(judged), names)
    assert got.height == len(names) * len(judged)
    for name in names:
        spec = parse_metric(name)
        expected = {
            qid: REFERENCE[spec.family](lists.get(qid, []), rels, spec.k)
            for qid, rels in judged.items()
        }
        assert values(got, name) == pytest.approx(expected, abs=1e-12), name




# --------------------------------------------------------------------------- populations


def test_exclusions_and_empty_rankings() -> None:
    rankings = make_rankings({"q1": ["a"], "q2": ["b"], "q9": ["z"]})
    # q2 is judged but not relevant (relevance 0), q3 has no ranking, q9 no qrels.
    qrels = make_qrels({"q1": {"a": 1}, "q2": {"b": 0}, "q3": {"c": 2}})
    got = evaluate(rankings, qrels, ["R_all@1", "nDCG@5", "MAP"])
    for metric in ("R_all@1", "nDCG@5", "MAP"):
        assert values(got, metric) == {"q1": 1.0, "q3": 0.0}


def test_no_rankings_at_all_scores_zero() -> None:
    empty = pl.DataFrame(schema=RANK_SCHEMA)
    got = evaluate(empty, make_qrels({"q1": {"a": 1}, "q2": {"b": 3}}), ["nDCG@3", "R_all@3"])
    assert got.get_column("value").to_list() == [0.0, 0.0, 0.0, 0.0]
    assert aggregate(got) == {"R_all@3": 0.0, "nDCG@3": 0.0}














# --------------------------------------------------------------------------- errors


@pytest.mark.parametrize("name", ["foo@3", "recall@5", "ndcg@5", "nDCG@x", "", "R_all@"])
def test_unknown_metric_lists_families(name: str) -> None:
    with pytest.raises(ValueError, match=r"known families: archived@k, bpref, cMAP\[@k\], cnDCG"):
        parse_metric(name)


@pytest.mark.parametrize(
    ("name", "message"),
    [("R_all", "needs a cutoff"), ("stale", "needs a cutoff"), ("MRR@0", "must be >= 1")],
)
def test_bad_cutoff(name: str, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        parse_metric(name)


def test_parse_metric() -> None:
    assert parse_metric("MRR") == MetricSpec("MRR", None)
    assert parse_metric("MAP@010") == MetricSpec("MAP", 10)
    assert parse_metric("MAP@010").name == "MAP@10"


def test_register_metric_refuses_existing_family() -> None:
    with pytest.raises(ValueError, match="already registered"):
        register_metric("nDCG")(lambda data, spec: data.rankings)
    with pytest.raises(ValueError, match="'R_any' is already registered"):
        register_metric("Brand_new", aliases=("R_any",))(lambda data, spec: data.rankings)
    assert "Brand_new" not in METRICS


def test_every_module_of_the_package_registers_its_family() -> None:
    # one module per family, filled through the generic Registry as memlab.stages is
    package = Path(metrics_package.__file__).parent
    modules = {m.name for m in pkgutil.iter_modules([str(package)])} - {"base"}
    owners = {family.function.__module__.rsplit(".", 1)[1] for family in METRICS.values()}
    assert owners == modules
    assert isinstance(METRICS, Registry)
    assert dict(METRIC_ALIASES) == {"R_any": "Success", "R_frac": "Recall"}


def test_evaluate_rejects_bad_input() -> None:
    qrels = make_qrels({"q": {"a": 1}})
    repeated = make_rankings({"q": ["a", "b"]}).with_columns(mem_id=pl.lit("a"))
    with pytest.raises(ValueError, match=r"rankings: row 1, fields \['qid', 'mem_id'\]"):
        evaluate(repeated, qrels, ["MRR"])
    zero_rank = make_rankings({"q": ["a"]}).with_columns(rank=pl.lit(0))
    with pytest.raises(ValueError, match=r"rankings: row 0, field 'rank'"):
        evaluate(zero_rank, qrels, ["MRR"])
    int_qid = make_rankings({"q": ["a"]}).with_columns(qid=pl.lit(1))
    with pytest.raises(TypeError, match=r"rankings: field 'qid'"):
        evaluate(int_qid, qrels, ["MRR"])
    with pytest.raises(ValueError, match="needs queries"):
        evaluate(make_rankings({"q": ["a"]}), qrels, ["stale@3"])
    with pytest.raises(ValueError, match=r"rankings: row 1, field 'mem_id': 'zz' is not in"):
        evaluate(make_rankings({"q": ["m1", "zz"]}), None, ["dup@2"], memories=MEMORIES)
    with pytest.raises(ValueError, match="needs qrels"):
        evaluate(make_rankings({"q": ["a"]}), None, ["nDCG@3"])
    with pytest.raises(TypeError, match="sequence of metric names"):
        evaluate(make_rankings({"q": ["a"]}), qrels, "MRR")


# --------------------------------------------------------------------------- metadata


def test_families_state_their_direction_and_kind():
    from memlab.eval.metrics import higher_is_better, metric_family

    assert [higher_is_better(m) for m in ("tokens@10", "stale@10", "leak@5", "dup@10")] == [
        False, False, False, False,
    ]
    assert all(higher_is_better(m) for m in ("R_all@10", "nDCG", "MRR", "bpref", "judged@10"))
    assert higher_is_better("not_registered@3") is True
    assert not any(higher_is_better(f"{m}@10") for m in ("scope_violation", "conflict", "archived"))
    assert (metric_family("tokens@10").kind, metric_family("stale@3").kind) == ("cost", "exposure")
    assert (metric_family("judged@10").kind, metric_family("cnDCG@10").kind) == (
        "judgment", "relevance",
    )


def test_register_metric_checks_direction_and_kind():
    with pytest.raises(ValueError, match="field 'kind'"):
        register_metric("zz_kind", kind="speed")
    with pytest.raises(TypeError, match="higher_is_better"):
        register_metric("zz_dir", higher_is_better="no")


# --------------------------------------------------------------------------- unjudged memories














def test_trec_eval_measures_asked_together_equal_each_asked_alone() -> None:
    # evaluate() hands trec_eval every declared measure of a cut in one pass; the values must
    # be those of one pass per measure.
    names = ["nDCG@3", "nDCG", "MRR", "MRR@2", "MAP", "MAP@3", "Success@1", "Success@3",
             "Recall@1", "Recall@3", "R_all@3"]
    rankings, qrels = make_rankings(HAND_RANKINGS), make_qrels(HAND_QRELS)
    together = evaluate(rankings, qrels, names)
    alone = pl.concat([evaluate(rankings, qrels, [name]) for name in names]).sort("metric", "qid")
    assert together.equals(alone)
    assert [METRICS[f].trec is not None for f in ("nDCG", "MRR", "MAP", "Success", "Recall",
                                                 "R_all")] == [True] * 5 + [False]


def test_trec_eval_reads_each_query_whatever_the_order_of_the_ranking_rows() -> None:
    # rows of two queries interleaved and out of rank order: trec_eval's run holds each query's
    # ranked ids with scores -position (q1: m3 at 1, m1 at 2; q2: m2 at 1, m4 at 2)
    rankings = pl.DataFrame(
        {"qid": ["q2", "q1", "q1", "q2"], "rank": [2, 2, 1, 1], "mem_id": ["m4", "m1", "m3", "m2"]},
        schema={"qid": pl.String, "rank": pl.Int64, "mem_id": pl.String},
    )
    qrels = pl.DataFrame(
        {"qid": ["q1", "q2"], "mem_id": ["m1", "m2"], "relevance": [1, 1]},
        schema={"qid": pl.String, "mem_id": pl.String, "relevance": pl.Int64},
    )
    out = evaluate(rankings, qrels, ["MRR", "nDCG@10"])
    mrr = dict(out.filter(pl.col("metric") == "MRR").select("qid", "value").iter_rows())
    ndcg = dict(out.filter(pl.col("metric") == "nDCG@10").select("qid", "value").iter_rows())
    assert mrr == {"q1": 1 / 2, "q2": 1 / 1}
    assert ndcg["q1"] == pytest.approx((1 / math.log2(3)) / (1 / math.log2(2)))
    assert ndcg["q2"] == 1.0
