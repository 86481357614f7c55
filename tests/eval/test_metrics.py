"""Tests of memlab.eval.metrics: hand-computed values, a plain-python reference, populations."""

from __future__ import annotations

import math
import random

import polars as pl
import pytest

from memlab.eval.metrics import MetricSpec, aggregate, evaluate, parse_metric, register_metric

RANK_SCHEMA = {"qid": pl.String, "rank": pl.Int64, "mem_id": pl.String, "score": pl.Float64}


def make_rankings(lists: dict[str, list[str]]) -> pl.DataFrame:
    rows = [
        (qid, rank, mem_id, 1.0 / rank)
        for qid, mem_ids in lists.items()
        for rank, mem_id in enumerate(mem_ids, start=1)
    ]
    return pl.DataFrame(rows, schema=RANK_SCHEMA, orient="row")


def make_qrels(judged: dict[str, dict[str, int]]) -> pl.DataFrame:
    rows = [(qid, mem_id, rel) for qid, rels in judged.items() for mem_id, rel in rels.items()]
    return pl.DataFrame(
        rows, schema={"qid": pl.String, "mem_id": pl.String, "relevance": pl.Int64}, orient="row"
    )


def values(per_query: pl.DataFrame, metric: str) -> dict[str, float]:
    return dict(per_query.filter(pl.col("metric") == metric).select("qid", "value").iter_rows())


# q1: graded, both relevant found; q2: relevant ones deep; q3: no ranking; q4: no qrels.
HAND_RANKINGS = {"q1": ["a", "x", "b"], "q2": ["x", "y", "d", "c"], "q4": ["a"]}
HAND_QRELS = {"q1": {"a": 2, "b": 1}, "q2": {"c": 1, "d": 3}, "q3": {"e": 1}}


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
        "R_any@1",
        "R_any@3",
        "R_frac@1",
        "R_frac@3",
    ]
    return evaluate(make_rankings(HAND_RANKINGS), make_qrels(HAND_QRELS), metrics)


def test_hand_ndcg(hand: pl.DataFrame) -> None:
    got = values(hand, "nDCG@3")
    assert got["q1"] == pytest.approx(
        (2 / math.log2(2) + 1 / math.log2(4)) / (2 / math.log2(2) + 1 / math.log2(3)), abs=1e-12
    )
    assert got["q2"] == pytest.approx(
        (3 / math.log2(4)) / (3 / math.log2(2) + 1 / math.log2(3)), abs=1e-12
    )
    assert got["q3"] == 0.0
    full = values(hand, "nDCG")
    assert full["q2"] == pytest.approx(
        (3 / math.log2(4) + 1 / math.log2(5)) / (3 / math.log2(2) + 1 / math.log2(3)), abs=1e-12
    )


def test_hand_rank_metrics(hand: pl.DataFrame) -> None:
    assert values(hand, "MRR") == pytest.approx({"q1": 1 / 1, "q2": 1 / 3, "q3": 0.0})
    assert values(hand, "MRR@2") == pytest.approx({"q1": 1 / 1, "q2": 0.0, "q3": 0.0})
    assert values(hand, "MAP") == pytest.approx(
        {"q1": (1 / 1 + 2 / 3) / 2, "q2": (1 / 3 + 2 / 4) / 2, "q3": 0.0}
    )
    assert values(hand, "MAP@3") == pytest.approx(
        {"q1": (1 / 1 + 2 / 3) / 2, "q2": (1 / 3) / 2, "q3": 0.0}
    )


def test_hand_recall_family(hand: pl.DataFrame) -> None:
    assert values(hand, "R_all@1") == {"q1": 0.0, "q2": 0.0, "q3": 0.0}
    assert values(hand, "R_all@3") == {"q1": 1.0, "q2": 0.0, "q3": 0.0}
    assert values(hand, "R_all@4") == {"q1": 1.0, "q2": 1.0, "q3": 0.0}
    assert values(hand, "R_any@1") == {"q1": 1.0, "q2": 0.0, "q3": 0.0}
    assert values(hand, "R_any@3") == {"q1": 1.0, "q2": 1.0, "q3": 0.0}
    assert values(hand, "R_frac@1") == pytest.approx({"q1": 1 / 2, "q2": 0 / 2, "q3": 0 / 1})
    assert values(hand, "R_frac@3") == pytest.approx({"q1": 2 / 2, "q2": 1 / 2, "q3": 0 / 1})


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
    "R_frac": ref_frac,
    "R_any": ref_any,
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


def test_given_order_wins_over_scores_and_ids() -> None:
    # Equal scores: trec_eval alone would put "b" first (ties broken by id); the given ranks
    # put "a" first, so the relevant "b" is at position 2.
    rankings = pl.DataFrame(
        {"qid": ["q", "q"], "rank": [1, 2], "mem_id": ["a", "b"], "score": [0.3, 0.3]}
    )
    qrels = make_qrels({"q": {"b": 1}})
    assert values(evaluate(rankings, qrels, ["MRR", "R_any@1"]), "MRR") == {"q": 1 / 2}
    # Scores increasing with rank are ignored too; gaps in rank keep the order.
    gapped = pl.DataFrame(
        {"qid": ["q", "q", "q"], "rank": [9, 2, 5], "mem_id": ["b", "c", "a"], "score": [3.0, 1, 2]}
    )
    assert values(evaluate(gapped, qrels, ["MRR"]), "MRR") == {"q": 1 / 3}
    assert values(evaluate(gapped, qrels, ["R_any@2"]), "R_any@2") == {"q": 0.0}


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


def test_stale_exact() -> None:
    rankings = make_rankings({"q1": ["a", "x"], "q2": ["x"], "q3": ["a", "b", "z"]})
    queries = pl.DataFrame(
        {
            "qid": ["q1", "q2", "q3", "q4"],
            "client_id": [None, None, None, None],
            "stale": [["x"], [], ["z", "y"], None],
            "tags": [[], [], [], []],
        },
        schema_overrides={"client_id": pl.String, "stale": pl.List(pl.String)},
    )
    got = evaluate(rankings, None, ["stale@1", "stale@2", "stale@3"], queries=queries)
    assert values(got, "stale@1") == {"q1": 0.0, "q3": 0.0}
    assert values(got, "stale@2") == {"q1": 1.0, "q3": 0.0}
    assert values(got, "stale@3") == {"q1": 1.0, "q3": 1.0}


MEMORIES = pl.DataFrame(
    {
        "mem_id": ["m1", "m2", "m3", "m4"],
        "client_id": ["A", "B", "global", None],
        "content_hash": ["h1", "h2", "h3", "h4"],
        "tokens": [10, 5, 7, 1],
    },
    schema_overrides={"client_id": pl.String},
)


def test_leak_exact() -> None:
    rankings = make_rankings({"q1": ["m1", "m3", "m2"], "q2": ["m2"], "q4": ["m4", "m3"]})
    queries = pl.DataFrame(
        {"qid": ["q1", "q2", "q3", "q4"], "client_id": ["A", None, "B", "A"]},
    )
    got = evaluate(rankings, None, ["leak@2", "leak@3"], queries=queries, memories=MEMORIES)
    # q2 is unscoped (no row); q3 has no ranking; m4 (null client) counts as global.
    assert values(got, "leak@2") == {"q1": 0.0, "q3": 0.0, "q4": 0.0}
    assert values(got, "leak@3") == {"q1": 1.0, "q3": 0.0, "q4": 0.0}


def test_scope_violation_counts_unreadable_memories() -> None:
    memories = pl.DataFrame(
        {
            "mem_id": ["t", "a", "h", "p", "z", "n"],
            "scope": ["team", "agent:atlas", "agent:hera", "project:apollo", "project:zeus",
                      None],
        }
    )
    rankings = make_rankings(
        {"q1": ["t", "h", "z", "a"], "q2": ["p", "z", "n"], "q3": ["h", "z"]}
    )
    queries = pl.DataFrame(
        {
            "qid": ["q1", "q2", "q3", "q4"],
            "agent": ["atlas", "atlas", None, "hera"],
            "projects": [[], ["apollo"], [], []],
        }
    )
    got = evaluate(rankings, None, ["scope_violation@2", "scope_violation@4"], queries=queries,
                   memories=memories)
    # q1: hera's and zeus's memories; q2: zeus only (apollo is assigned, null = team);
    # q3 is a human (no row); q4 has no ranking.
    assert values(got, "scope_violation@2") == {"q1": 1.0, "q2": 1.0, "q4": 0.0}
    assert values(got, "scope_violation@4") == {"q1": 2.0, "q2": 1.0, "q4": 0.0}


def test_dup_exact() -> None:
    memories = pl.DataFrame(
        {
            "mem_id": ["h1", "h2", "u", "t1", "t2", "e1", "e2"],
            "content_hash": ["h", "h", "u", "p", "q", "", None],
            "text": ["x1", "x2", "uniq", "same", "same", "one", "two"],
        }
    )
    rankings = make_rankings({"q1": ["h1", "u", "h2"], "q2": ["t1", "t2"], "q3": ["e1", "e2"]})
    queries = pl.DataFrame({"qid": ["q1", "q2", "q3", "q4"]})
    got = evaluate(rankings, None, ["dup@2", "dup@3"], queries=queries, memories=memories)
    assert values(got, "dup@2") == {"q1": 0.0, "q2": 1.0, "q3": 0.0, "q4": 0.0}
    assert values(got, "dup@3") == {"q1": 1.0, "q2": 1.0, "q3": 0.0, "q4": 0.0}


def test_tokens_from_memories_or_rankings() -> None:
    rankings = make_rankings({"q1": ["m1", "m2", "m3"], "q2": ["m4"]})
    got = evaluate(rankings, None, ["tokens@2", "tokens@3"], memories=MEMORIES)
    assert values(got, "tokens@2") == {"q1": 10.0 + 5.0, "q2": 1.0}
    assert values(got, "tokens@3") == {"q1": 10.0 + 5.0 + 7.0, "q2": 1.0}
    own = rankings.with_columns(tokens=pl.Series([2, 3, 4, 8]))
    assert values(evaluate(own, None, ["tokens@2"]), "tokens@2") == {"q1": 2.0 + 3.0, "q2": 8.0}


# --------------------------------------------------------------------------- errors


@pytest.mark.parametrize("name", ["foo@3", "recall@5", "ndcg@5", "nDCG@x", "", "R_all@"])
def test_unknown_metric_lists_families(name: str) -> None:
    with pytest.raises(ValueError, match=r"known families: R_all@k, R_any@k, R_frac@k, nDCG"):
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
        register_metric("nDCG")(lambda data, k: data.rankings)


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

# q1 ranks a (rel 1), x (unjudged), n (judged 0), b (rel 2), y (unjudged);
# q2 is judged (z: 0) without any relevant memory; q3 is unjudged.
INC_RANKINGS = {"q1": ["a", "x", "n", "b", "y"], "q2": ["z", "w"], "q3": ["a"]}
INC_QRELS = {"q1": {"a": 1, "n": 0, "b": 2, "c": 1}, "q2": {"z": 0}}


@pytest.fixture
def incomplete() -> pl.DataFrame:
    metrics = ["judged@2", "judged@4", "judged@10", "bpref", "cnDCG@3", "cnDCG", "cMAP",
               "nDCG@3"]
    return evaluate(make_rankings(INC_RANKINGS), make_qrels(INC_QRELS), metrics)


def test_judged_at_k_is_the_judged_share_of_the_top_k(incomplete):
    # q1 top 2: a judged, x not; top 4: a, n, b judged; top 10 is the 5 ranked (ir_measures
    # divides by the ranking's length when shorter than k); q2: z judged, w not.
    assert values(incomplete, "judged@2") == {"q1": 1 / 2, "q2": 1 / 2}
    assert values(incomplete, "judged@4") == {"q1": 3 / 4, "q2": 1 / 2}
    assert values(incomplete, "judged@10") == {"q1": 3 / 5, "q2": 1 / 2}


def test_bpref_ignores_unjudged_memories(incomplete):
    # R = 3 (a, b, c), N = 1 (n): a has no judged non-relevant above it, b has n above it,
    # c is not retrieved: (1 + (1 - 1/min(3, 1)) + 0) / 3.
    assert values(incomplete, "bpref") == pytest.approx({"q1": (1 + 0 + 0) / 3})


def test_condensed_ndcg_and_map_drop_unjudged_before_scoring(incomplete):
    from math import log2

    # condensed list of q1: a (1), n (0), b (2); ideal: 2, 1, 1 (b, a, c)
    dcg3 = 1 / log2(2) + 0 / log2(3) + 2 / log2(4)
    idcg3 = 2 / log2(2) + 1 / log2(3) + 1 / log2(4)
    assert values(incomplete, "cnDCG@3") == pytest.approx({"q1": dcg3 / idcg3})
    assert values(incomplete, "cnDCG") == pytest.approx({"q1": dcg3 / idcg3})
    # the standard nDCG@3 sees a, x, n: only a gains
    assert values(incomplete, "nDCG@3") == pytest.approx({"q1": (1 / log2(2)) / idcg3})
    # AP' of q1: a at 1 (1/1), b at 3 (2/3), c missing; divided by R = 3
    assert values(incomplete, "cMAP") == pytest.approx({"q1": (1 + 2 / 3) / 3})


def test_judged_needs_qrels():
    with pytest.raises(ValueError, match="metric 'judged' needs qrels"):
        evaluate(make_rankings({"q": ["a"]}), None, ["judged@10"])


def test_conflict_and_archived_at_k():
    rankings = pl.DataFrame(
        {"qid": ["a", "a", "a", "b"], "rank": [1, 2, 3, 1], "mem_id": ["x", "y", "z", "x"]}
    )
    memories = pl.DataFrame(
        {"mem_id": ["x", "y", "z"], "contradicts": [["z"], [], ["x"]]},
        schema={"mem_id": pl.String, "contradicts": pl.List(pl.String)},
    )
    queries = pl.DataFrame(
        {"qid": ["a", "b"], "archived": [["z"], []]},
        schema={"qid": pl.String, "archived": pl.List(pl.String)},
    )
    out = evaluate(
        rankings, None, ["conflict@2", "conflict@3", "archived@2", "archived@3"],
        queries=queries, memories=memories,
    )
    got = {(r["metric"], r["qid"]): r["value"] for r in out.to_dicts()}
    assert got == {
        ("conflict@2", "a"): 0.0, ("conflict@2", "b"): 0.0,
        ("conflict@3", "a"): 1.0, ("conflict@3", "b"): 0.0,
        ("archived@2", "a"): 0.0, ("archived@2", "b"): 0.0,
        ("archived@3", "a"): 1.0, ("archived@3", "b"): 0.0,
    }
