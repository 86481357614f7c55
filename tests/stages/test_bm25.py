"""Tests for memlab.stages.bm25 and its engines in memlab.index.bm25."""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pytest

from memlab.index.bm25 import (
    RankBM25Engine,
    SparseBM25Engine,
    TokenizedCorpus,
    get_bm25_engine,
)
from memlab.memory.store import MemoryStore
from memlab.stages.base import QueryContext, check_frame, empty_candidates
from memlab.stages.bm25 import BM25

LOCOMO = Path("/work/shared/datasets/locomo10/26.json")


def _ranking(scores: np.ndarray) -> list[int]:
    return np.lexsort((np.arange(len(scores)), -scores)).tolist()


def _tiny_store(texts: list[str], now: float) -> MemoryStore:
    store = MemoryStore()
    for i, text in enumerate(texts):
        store.store(text, "event", source_agent="tester", now=now - 10 + i, id=f"d{i}")
    return store


@pytest.mark.parametrize("engine", ["sparse", "rank_bm25"])
def test_hand_computed_scores(engine: str, now: float) -> None:
    store = _tiny_store(["the cat sat", "the dog sat down", "a bird"], now)
    ctx = QueryContext(qid="q", text="cat sat", store=store, now=now)
    out = BM25(engine=engine).transform(empty_candidates(), ctx)
    check_frame(out, "bm25")
    # N = 3, avgdl = (3 + 4 + 2) / 3 = 3; "cat" is in 1 document, "sat" in 2.
    idf_cat = math.log(3 - 1 + 0.5) - math.log(1 + 0.5)  # log(5/3) > 0
    idf_sat = math.log(3 - 2 + 0.5) - math.log(2 + 0.5)  # log(3/5) < 0: floored
    # vocabulary: the, sat (df 2: log 3/5 each) and cat, dog, down, a, bird (df 1: log 5/3)
    average_idf = (2 * idf_sat + 5 * idf_cat) / 7
    eps = 0.25 * average_idf
    d0 = idf_cat * (1 * 2.5 / (1 + 1.5 * (1 - 0.75 + 0.75 * 3 / 3))) + eps * (
        1 * 2.5 / (1 + 1.5 * (1 - 0.75 + 0.75 * 3 / 3))
    )
    d1 = eps * (1 * 2.5 / (1 + 1.5 * (1 - 0.75 + 0.75 * 4 / 3)))
    assert idf_sat < 0
    assert out["mem_id"].to_list() == ["d0", "d1"]  # d2 scores 0: not a candidate
    assert out["bm25_score"].to_list() == pytest.approx([d0, d1], rel=1e-12)
    assert out["score"].to_list() == out["bm25_score"].to_list()


@pytest.mark.parametrize("engine", ["sparse", "rank_bm25"])
@pytest.mark.parametrize("texts", [["the cat sat"], ["the cat sat", "the cat sat down"]])
def test_a_corpus_whose_mean_idf_is_negative_floors_at_epsilon(engine, texts, now) -> None:
    """One memory: every term's idf is log(0.5 / 1.5) < 0, and so is the mean, so rank_bm25's
    floor (0.25 × mean) would leave "cat sat" scoring the memory below zero; it is floored at
    epsilon (0.25) instead. Two memories sharing every term of the first: the same."""
    store = _tiny_store(texts, now)
    ctx = QueryContext(qid="q", text="cat sat", store=store, now=now)
    out = BM25(engine=engine).transform(empty_candidates(), ctx)
    avgdl = sum(len(t.split()) for t in texts) / len(texts)
    tf_part = [1 * 2.5 / (1 + 1.5 * (1 - 0.75 + 0.75 * len(t.split()) / avgdl)) for t in texts]
    want = [0.25 * p + 0.25 * p for p in tf_part]  # "cat" and "sat", each idf 0.25
    assert out["mem_id"].to_list() == [f"d{i}" for i in range(len(texts))]
    assert out["bm25_score"].to_list() == pytest.approx(want, rel=1e-12)


@pytest.mark.parametrize("engine", ["sparse", "rank_bm25"])
def test_in_two_memories_a_term_only_one_holds_weighs_as_much_as_a_shared_one(engine, now):
    """Two memories: "cat" and "sat" are in one of them (idf log(1.5) - log(1.5) = 0), "the" in
    both (idf < 0, and so is the mean): all three weigh epsilon (0.25), so the memory holding
    both query terms ranks first, not the shorter one holding only "the"."""
    store = _tiny_store(["the cat sat", "the dog"], now)
    ctx = QueryContext(qid="q", text="the cat", store=store, now=now)
    out = BM25(engine=engine).transform(empty_candidates(), ctx)
    # avgdl = 2.5; one occurrence: 2.5 / (1 + 1.5 * (0.25 + 0.75 * |d| / 2.5))
    d0 = 0.25 * 2.5 / 2.725 + 0.25 * 2.5 / 2.725  # "the" and "cat" in "the cat sat"
    d1 = 0.25 * 2.5 / 2.275  # "the" in "the dog"
    assert out["mem_id"].to_list() == ["d0", "d1"]
    assert out["bm25_score"].to_list() == pytest.approx([d0, d1], rel=1e-12)


def test_repeated_query_token_counts_twice(now: float) -> None:
    store = _tiny_store(["the cat sat", "the dog sat down", "a bird"], now)
    once = BM25().transform(empty_candidates(), QueryContext("q", "cat", store, now))
    twice = BM25().transform(empty_candidates(), QueryContext("q", "cat cat", store, now))
    assert twice["bm25_score"][0] == pytest.approx(2 * once["bm25_score"][0], rel=1e-12)


def test_engines_agree_on_the_fixture(store, make_ctx) -> None:
    queries = [
        "Acme website hosting",
        "Globex blog posts per week",
        "billing service PostgreSQL",
        "the team meeting",
        "website website migration",
        "nothing matches zzz",
    ]
    for text in queries:
        for client in (None, "acme"):
            ctx = make_ctx(text, client_id=client)
            a = BM25(top_k=None, engine="sparse").transform(empty_candidates(), ctx)
            b = BM25(top_k=None, engine="rank_bm25").transform(empty_candidates(), ctx)
            assert a["mem_id"].to_list() == b["mem_id"].to_list()
            assert np.allclose(a["bm25_score"], b["bm25_score"], rtol=1e-9, atol=1e-9)
            assert a.equals(b)


def test_engines_agree_on_a_locomo_conversation() -> None:
    if not LOCOMO.is_file():
        pytest.skip(f"{LOCOMO} is not available")
    conv = json.loads(LOCOMO.read_text(encoding="utf-8"))
    docs = [
        turn["text"]
        for key, value in conv.items()
        if key.startswith("session_") and isinstance(value, list)
        for turn in value
    ]
    questions = [qa["question"] for qa in conv["qa"]]
    assert len(docs) > 100 and len(questions) > 50
    corpus = TokenizedCorpus()
    corpus.extend(docs)
    sparse = SparseBM25Engine().fit(corpus)
    ref = RankBM25Engine().fit(corpus)
    for q in questions:
        tokens = corpus.tokenize(q)
        a, b = sparse.get_scores(tokens), ref.get_scores(tokens)
        assert np.allclose(a, b, rtol=1e-9, atol=1e-9), q
        assert _ranking(a) == _ranking(b), q


def test_top_kernel_gives_the_same_floats_and_cut_as_numpy() -> None:
    if not LOCOMO.is_file():
        pytest.skip(f"{LOCOMO} is not available")
    conv = json.loads(LOCOMO.read_text(encoding="utf-8"))
    docs = [
        turn["text"]
        for key, value in conv.items()
        if key.startswith("session_") and isinstance(value, list)
        for turn in value
    ]
    corpus = TokenizedCorpus()
    corpus.extend(docs)
    jit = SparseBM25Engine(jit_min_docs=0).fit(corpus)  # always the numba kernel
    ref = RankBM25Engine().fit(corpus)
    n = corpus.n_docs
    rows = np.arange(n, dtype=np.int64) * 2 + 1  # documents sit at odd store rows
    visible = np.ones(2 * n + 1, dtype=bool)
    visible[rows[::3]] = False  # every third document is hidden
    for qa in conv["qa"]:
        tokens = corpus.tokenize(qa["question"]) + ["never-seen-token"]
        full = jit.get_scores(tokens)
        for k, vis in ((None, None), (10, None), (10, visible), (1, visible)):
            shown = np.ones(n, dtype=bool) if vis is None else vis[rows]
            mask = (full > 0) & shown
            expected = np.flatnonzero(mask)
            if k is not None and len(expected) > k:
                kth = np.sort(full[expected])[::-1][k - 1]
                expected = expected[full[expected] >= kth]
            got, scores = jit.top(tokens, k, rows if vis is not None else None, vis)
            order = np.argsort(got)
            assert got[order].tolist() == expected.tolist()
            assert scores[order].tolist() == full[expected].tolist()  # bit for bit
            ref_docs, ref_scores = ref.top(tokens, k, rows if vis is not None else None, vis)
            assert sorted(ref_docs.tolist()) == expected.tolist()
            assert np.allclose(np.sort(ref_scores), np.sort(full[expected]), rtol=1e-9)
    # the per-thread buffers are left all-zero between queries
    assert not jit.buffers_.score.any() and not jit.buffers_.seen.any()


def test_scanning_the_counts_gives_the_floats_of_the_contribution_matrix() -> None:
    rng = np.random.default_rng(7)
    words = [f"w{i}" for i in range(60)]
    docs = [" ".join(rng.choice(words, size=rng.integers(1, 25))) for _ in range(300)]
    docs[0:0], docs[150:150], docs[-1:-1] = ["!!"], ["", "..."], ["?"]  # documents without terms
    corpus = TokenizedCorpus()
    corpus.extend(docs)
    built = SparseBM25Engine(scan_queries=0).fit(corpus)
    assert built.weights_ is not None
    scan = SparseBM25Engine(scan_queries=10**9).fit(corpus)
    for _ in range(50):
        # repeated tokens and a token outside the vocabulary included
        tokens = [*rng.choice(words, size=rng.integers(1, 8)).tolist(), "w3", "w3", "unseen"]
        assert scan.get_scores(tokens).tolist() == built.get_scores(tokens).tolist()
        a_docs, a_scores = scan.top(tokens, 10)
        b_docs, b_scores = built.top(tokens, 10)
        assert sorted(zip(a_docs.tolist(), a_scores.tolist(), strict=True)) == sorted(
            zip(b_docs.tolist(), b_scores.tolist(), strict=True)
        )
    assert scan.weights_ is None and scan.scanned_ == 100


def test_the_contribution_matrix_is_built_after_scan_queries() -> None:
    corpus = TokenizedCorpus()
    corpus.extend(["the cat sat", "the dog sat down", "a bird"])
    engine = SparseBM25Engine(scan_queries=2).fit(corpus)
    first = [engine.get_scores(["sat", "dog"]).tolist() for _ in range(2)]
    assert engine.weights_ is None
    third = engine.get_scores(["sat", "dog"]).tolist()
    assert engine.weights_ is not None and first == [third, third]
    big = SparseBM25Engine(scan_max_entries=5).fit(corpus)  # 9 entries: built at the fit
    assert big.weights_ is not None and big.weights_.shape == (3, 7)


def test_kernel_dense_and_sparse_paths_keep_the_numpy_cut() -> None:
    from memlab.index.bm25 import select_top

    rng = np.random.default_rng(3)
    docs = [" ".join(["common", *rng.choice(["a", "b", "c", "d"], size=rng.integers(0, 6))])
            + (f" rare{i % 7}" if i % 5 == 0 else "") for i in range(400)]
    corpus = TokenizedCorpus()
    corpus.extend(docs)
    jit = SparseBM25Engine(jit_min_docs=0).fit(corpus)
    ref = SparseBM25Engine(scan_queries=0).fit(corpus)
    rows = np.arange(400, dtype=np.int64)[::-1].copy()  # document d sits at row 399 - d
    hidden = np.ones(400, dtype=bool)
    hidden[::3] = False
    # "common a" posts to every document (dense path), "rare3" to a few (sparse path)
    for tokens in (["common", "a"], ["rare3"], ["rare3", "b", "rare3"], ["zzz"]):
        for k in (None, 1, 5, 50):
            for visible in (None, hidden):
                got = jit.top(tokens, k, rows if visible is not None else None, visible)
                want = select_top(ref.get_scores(tokens), k,
                                  rows if visible is not None else None, visible)
                assert sorted(zip(*map(np.ndarray.tolist, got), strict=True)) == sorted(
                    zip(*map(np.ndarray.tolist, want), strict=True)
                ), (tokens, k)
    assert not jit.buffers_.score.any() and not jit.buffers_.seen.any()


def test_top_keeps_every_tie_at_the_cut() -> None:
    corpus = TokenizedCorpus()
    corpus.extend(["cat", "cat", "cat", "dog", "bird"])
    for engine in (SparseBM25Engine(jit_min_docs=0), SparseBM25Engine(), RankBM25Engine()):
        docs, scores = engine.fit(corpus).top(["cat"], 1)
        assert sorted(docs.tolist()) == [0, 1, 2]  # three equal scores at the cut of 1
        assert len(set(scores.tolist())) == 1


def test_stage_on_the_kernel_matches_the_reference(store, make_ctx) -> None:
    for text in ("Acme website hosting", "billing service PostgreSQL", "nothing zzz"):
        for client in (None, "acme"):
            ctx = make_ctx(text, client_id=client)
            stage = BM25(top_k=3)
            stage.fit(ctx.store)
            for index in stage.indexes_.values():
                index.engine.jit_min_docs = 0
            a = stage.transform(empty_candidates(), ctx)
            b = BM25(top_k=3, engine="rank_bm25").transform(empty_candidates(), ctx)
            assert a["mem_id"].to_list() == b["mem_id"].to_list()
            assert np.allclose(a["bm25_score"], b["bm25_score"], rtol=1e-9, atol=1e-9)


def test_visibility_masks_the_shared_index(store, make_ctx) -> None:
    # the superseded fact shares the index (its words count in idf) but is not returned
    out = BM25(top_k=None).transform(empty_candidates(), make_ctx("Next.js website"))
    assert "acme-stack-1" not in out["mem_id"].to_list()
    assert "acme-stack-2" in out["mem_id"].to_list()
    hist = BM25(top_k=None).transform(
        empty_candidates(), make_ctx("Next.js website", include_superseded=True)
    )
    assert {"acme-stack-1", "acme-stack-2"} <= set(hist["mem_id"])
    scoped = BM25(top_k=None).transform(empty_candidates(), make_ctx("Globex", client_id="acme"))
    assert scoped.height == 0


def test_top_k(make_ctx) -> None:
    full = BM25(top_k=None).transform(empty_candidates(), make_ctx("Acme website the"))
    top = BM25(top_k=2).transform(empty_candidates(), make_ctx("Acme website the"))
    assert full.height > 2
    assert top["mem_id"].to_list() == full["mem_id"].to_list()[:2]


def test_index_is_refitted_only_for_new_rows(store, make_ctx, now) -> None:
    stage = BM25(top_k=None)
    stage.transform(empty_candidates(), make_ctx("Acme website"))
    index, corpus = stage.index_, stage.corpus_
    assert corpus.n_docs == len(store)

    store.touch(["acme-contact"], now=now)  # a new version, no new text
    stage.transform(empty_candidates(), make_ctx("Acme website"))
    assert stage.index_ is index
    assert stage.index_version_ == store.version

    store.store("The Acme website now uses Tailwind", "event", client_id="acme", now=now - 1)
    grown = stage.transform(empty_candidates(), make_ctx("Acme website"))
    assert stage.index_ is not index
    assert stage.corpus_ is corpus and corpus.n_docs == len(store)
    fresh = BM25(top_k=None).transform(empty_candidates(), make_ctx("Acme website"))
    assert grown.equals(fresh)


def test_changing_parameters_refits(make_ctx) -> None:
    stage = BM25(top_k=None)
    before = stage.transform(empty_candidates(), make_ctx("Acme website"))
    stage.set_params(k1=0.9, b=0.4)
    after = stage.transform(empty_candidates(), make_ctx("Acme website"))
    ref = BM25(top_k=None, k1=0.9, b=0.4, engine="rank_bm25").transform(
        empty_candidates(), make_ctx("Acme website")
    )
    assert not np.allclose(before["bm25_score"], after["bm25_score"])
    assert np.allclose(after["bm25_score"], ref["bm25_score"], rtol=1e-9, atol=1e-9)


def test_tokenizer_parameters(now: float) -> None:
    corpus = TokenizedCorpus()
    assert corpus.tokenize("Next.js, Vercel & PostgreSQL-15") == [
        "next", "js", "vercel", "postgresql", "15",
    ]
    cased = TokenizedCorpus(token_pattern=r"[A-Za-z]+", lowercase=False)
    assert cased.tokenize("Next.js v15") == ["Next", "js", "v"]
    store = _tiny_store(["Acme Corp", "acme corp", "other words"], now)
    out = BM25(lowercase=False).transform(empty_candidates(), QueryContext("q", "Acme", store, now))
    assert out["mem_id"].to_list() == ["d0"]


def test_unknown_engine_is_rejected(make_ctx) -> None:
    with pytest.raises(ValueError, match="BM25: parameter 'engine' must be a str among .*'lucene'"):
        BM25(engine="lucene")
    assert get_bm25_engine("sparse") is SparseBM25Engine


def test_empty_corpus_and_empty_store(now: float) -> None:
    corpus = TokenizedCorpus()
    corpus.extend(["...", "!!"])
    for engine in (SparseBM25Engine(), RankBM25Engine()):
        assert engine.fit(corpus).get_scores(["a"]).tolist() == [0.0, 0.0]
    out = BM25().transform(empty_candidates(), QueryContext("q", "x", MemoryStore(), now))
    assert out.height == 0
    check_frame(out, "bm25")


def test_a_stale_sparse_engine_ignores_terms_added_after_its_fit() -> None:
    corpus = TokenizedCorpus()
    corpus.extend(["the cat sat", "the dog sat down", "a bird"])
    engine = SparseBM25Engine().fit(corpus)
    corpus.extend(["a new zebra"])
    assert engine.get_scores(["zebra"]).tolist() == [0.0, 0.0, 0.0]
    refit = SparseBM25Engine().fit(corpus).get_scores(["zebra"])
    assert refit.tolist()[:3] == [0.0, 0.0, 0.0] and refit[3] > 0


def test_query_stopwords_drop_function_words(make_ctx):
    from memlab.index.stopwords import get_stopwords
    from memlab.stages.bm25 import BM25

    ctx = make_ctx("what is the Acme website")
    plain = BM25(top_k=None).transform(None, ctx)
    stop = BM25(top_k=None, query_stopwords="english").transform(None, ctx)
    assert set(stop["mem_id"]) <= set(plain["mem_id"])
    assert "the" in get_stopwords("english")
    with pytest.raises(ValueError, match="known lists: english"):
        get_stopwords("klingon")
    only_stop = BM25(top_k=None, query_stopwords="english").transform(None, make_ctx("what is the"))
    assert only_stop.height == 0


def _two_client_store(now: float, *, with_other: bool = True) -> MemoryStore:
    store = MemoryStore()
    rows = [("a0", "a", "cat sat"), ("a1", "a", "dog sat"), ("a2", "a", "bird flew")]
    if with_other:
        rows += [("b0", "b", "cat cat"), ("b1", "b", "cat bird"), ("b2", "b", "cat fish")]
    for i, (mid, client, text) in enumerate(rows):
        store.store(text, "event", client_id=client, source_agent="t", now=now - 10 + i, id=mid)
    return store


def test_scope_statistics_are_the_clients_own(now: float) -> None:
    mixed = _two_client_store(now)
    alone = _two_client_store(now, with_other=False)
    ctx = QueryContext("q", "cat", mixed, now, client_id="a")
    scoped = BM25(statistics="scope").transform(empty_candidates(), ctx)
    # client a: N = 3, "cat" in 1 document, |d0| = avgdl = 2, so tf part = 2.5 / (1 + 1.5)
    assert scoped["mem_id"].to_list() == ["a0"]
    assert scoped["bm25_score"].to_list() == pytest.approx(
        [(math.log(3 - 1 + 0.5) - math.log(1 + 0.5)) * 2.5 / (1 + 1.5)], rel=1e-12
    )
    reference = BM25().transform(empty_candidates(), QueryContext("q", "cat", alone, now))
    assert scoped["bm25_score"].to_list() == reference["bm25_score"].to_list()
    # one store-wide index: "cat" is in 4 of 6 documents, its idf is negative and floored
    shared = BM25().transform(empty_candidates(), ctx)
    assert shared["mem_id"].to_list() == ["a0"]
    assert shared["bm25_score"][0] != pytest.approx(scoped["bm25_score"][0])


def test_scope_statistics_include_global_memories(now: float) -> None:
    store = _two_client_store(now)
    store.store("cat nap", "event", client_id="global", source_agent="t", now=now - 1, id="g0")
    stage = BM25(statistics="scope", top_k=None)
    out = stage.transform(empty_candidates(), QueryContext("q", "nap", store, now, client_id="a"))
    assert out["mem_id"].to_list() == ["g0"]
    assert stage.indexes_["a"].rows.tolist() == [0, 1, 2, 6]
    assert stage.corpus_.n_docs == 4


def test_scope_indexes_refit_only_their_own_scope(now: float) -> None:
    store = _two_client_store(now)
    stage = BM25(statistics="scope")
    for client in ("a", "b"):
        stage.transform(empty_candidates(), QueryContext("q", "cat", store, now, client_id=client))
    engine_a, engine_b = stage.indexes_["a"].engine, stage.indexes_["b"].engine
    store.store("cat toy", "event", client_id="b", source_agent="t", now=now - 1, id="b3")
    for client in ("a", "b"):
        stage.transform(empty_candidates(), QueryContext("q", "cat", store, now, client_id=client))
    assert stage.indexes_["a"].engine is engine_a
    assert stage.indexes_["b"].engine is not engine_b
    assert stage.indexes_["b"].rows.tolist() == [3, 4, 5, 6]
    unscoped = stage.transform(empty_candidates(), QueryContext("q", "cat", store, now))
    assert set(unscoped["mem_id"]) == {"a0", "b0", "b1", "b2", "b3"}
    assert stage.indexes_[None].rows.tolist() == list(range(7))


def test_fit_builds_the_index_of_one_scope(now: float) -> None:
    store = _two_client_store(now)
    stage = BM25(statistics="scope").fit(store, client_id="b")
    assert list(stage.indexes_) == ["b"] and stage.indexes_["b"].rows.tolist() == [3, 4, 5]
    assert list(BM25().fit(store, client_id="b").indexes_) == [None]


def test_unknown_statistics_is_rejected(now: float) -> None:
    store = _two_client_store(now)
    with pytest.raises(ValueError, match="bm25: statistics must be one of store, scope"):
        stage = BM25()
        stage.statistics = "tenant"  # bypasses the declared constraint; transform checks again
        stage.transform(empty_candidates(), QueryContext("q", "x", store, now))
    with pytest.raises(ValueError, match=r"'statistics' must be a str among \{'scope', 'store'\}"):
        BM25(statistics="tenant")


def test_a_purged_text_leaves_the_statistics(now: float) -> None:
    """A purge erases a memory's text in place: the index rebuilds, and the erased terms no
    longer count in idf or the average length (the scores are those of a fresh index)."""
    store = _tiny_store(["the cat sat", "the dog sat down", "a bird"], now)
    stage = BM25(top_k=None)
    ctx = QueryContext(qid="q", text="cat sat", store=store, now=now)
    stage.transform(empty_candidates(), ctx)
    store.forget("d0", "asked to", now=now)
    store.purge("d0", now=now)
    out = stage.transform(empty_candidates(), ctx)
    # Documents now: "" (0 tokens), "the dog sat down" (4), "a bird" (2): N = 3, avgdl = 2;
    # "sat" in 1 document: idf = log(3 - 1 + 0.5) - log(1 + 0.5) = log(5/3); "cat" is gone.
    idf_sat = math.log(2.5) - math.log(1.5)
    d1 = idf_sat * (1 * 2.5 / (1 + 1.5 * (1 - 0.75 + 0.75 * 4 / 2)))
    assert out["mem_id"].to_list() == ["d1"]  # d0 is forgotten: not visible
    assert out["bm25_score"].to_list() == pytest.approx([d1], rel=1e-12)
    fresh = BM25(top_k=None).transform(empty_candidates(), ctx)
    assert out.equals(fresh)
