"""Tests for memlab.stages.dense."""

from __future__ import annotations

import itertools
from pathlib import Path

import numpy as np
import pytest

from memlab.stages.base import CANDIDATE_SCHEMA, QueryContext, check_frame, empty_candidates
from memlab.stages.dense import Dense, top_rows
from memlab.timeutil import SECONDS_PER_DAY


def _expected(store, text: str, visible: np.ndarray) -> list[tuple[str, float]]:
    """Cosines in float64 (the stored float32 vectors' exact products, summed in float64)."""
    q = np.asarray(store.embedder.embed([text])[0], dtype=np.float64)
    q /= np.linalg.norm(q)
    sims = store.vectors.matrix.astype(np.float64) @ q
    pairs = [(store.record_at(i).id, float(sims[i])) for i in np.flatnonzero(visible)]
    return sorted(pairs, key=lambda p: (-p[1], p[0]))


def _in_rank_order(ids: list[str], scores: list[float]) -> bool:
    """Scores never rise down the list; equal scores are in ``mem_id`` order."""
    pairs = list(zip(scores, ids, strict=True))
    return all(a > b or (a == b and x < y) for (a, x), (b, y) in itertools.pairwise(pairs))


def test_exact_ranks_every_visible_memory_by_cosine(store, make_ctx) -> None:
    ctx = make_ctx("Acme website hosting")
    out = Dense(top_k=None).transform(empty_candidates(), ctx)
    check_frame(out, "dense")
    want = dict(_expected(store, "Acme website hosting", ctx.visible_mask()))
    ids, scores = out["mem_id"].to_list(), out["dense_score"].to_list()
    assert sorted(ids) == sorted(want)
    assert _in_rank_order(ids, scores)
    # float32 products: within rounding of the exact cosines (ties within it fall either way)
    np.testing.assert_allclose(scores, [want[m] for m in ids], atol=1e-6)
    assert out["score"].to_list() == out["dense_score"].to_list()
    assert out["rank"].to_list() == list(range(1, len(want) + 1))
    assert list(out.columns) == [*CANDIDATE_SCHEMA, "row", "dense_score"]
    assert "acme-stack-1" not in out["mem_id"].to_list()  # superseded


def test_top_k_keeps_the_best(make_ctx) -> None:
    ctx = make_ctx("Globex blog posts")
    full = Dense(top_k=None).transform(empty_candidates(), ctx)
    top = Dense(top_k=3).transform(empty_candidates(), ctx)
    assert top["mem_id"].to_list() == full["mem_id"].to_list()[:3]


def test_scope_time_and_history_filters(store, make_ctx, t0) -> None:
    scoped = Dense(top_k=None).transform(empty_candidates(), make_ctx("website", client_id="acme"))
    clients = {store.get(m).client_id for m in scoped["mem_id"]}
    assert clients == {"acme", "global"}

    early = Dense(top_k=None).transform(
        empty_candidates(), make_ctx("website", now=t0 + 3 * SECONDS_PER_DAY)
    )
    # acme-stack-1 was written by then but is superseded in this store's current state
    assert sorted(early["mem_id"]) == ["acme-db", "acme-deploy"]

    then = Dense(top_k=None).transform(
        empty_candidates(), make_ctx("website", at_time=t0 + 10 * SECONDS_PER_DAY)
    )
    assert "acme-stack-1" in then["mem_id"].to_list()
    assert "acme-stack-2" not in then["mem_id"].to_list()

    history = Dense(top_k=None).transform(
        empty_candidates(), make_ctx("website", include_superseded=True)
    )
    assert {"acme-stack-1", "acme-stack-2"} <= set(history["mem_id"])


def test_min_similarity_cuts_the_list(make_ctx) -> None:
    ctx = make_ctx("Acme website hosting")
    full = Dense(top_k=None).transform(empty_candidates(), ctx)
    cut = Dense(top_k=None, min_similarity=0.3).transform(empty_candidates(), ctx)
    assert cut["mem_id"].to_list() == full.filter(full["dense_score"] >= 0.3)["mem_id"].to_list()
    assert 0 < cut.height < full.height


def test_query_vector_overrides_the_text(store, make_ctx) -> None:
    ctx = make_ctx("unrelated words entirely")
    ctx.query_vector = store.vectors.get(store.idx("globex-seo"))
    out = Dense(top_k=1).transform(empty_candidates(), ctx)
    assert out["mem_id"].to_list() == ["globex-seo"]
    assert out["dense_score"][0] == pytest.approx(1.0, abs=1e-6)


def test_mask_entity_types_embeds_the_query_without_the_names(store, make_ctx) -> None:
    assert store.graph.find("tester", "agent") is not None
    masked = Dense(top_k=None, mask_entity_types=("agent",)).transform(
        empty_candidates(), make_ctx("What did tester's team host on the Acme website?")
    )
    plain = Dense(top_k=None).transform(
        empty_candidates(), make_ctx("What did team host on the Acme website?")
    )
    named = Dense(top_k=None).transform(
        empty_candidates(), make_ctx("What did tester's team host on the Acme website?")
    )
    assert masked.equals(plain)
    assert not np.allclose(masked["dense_score"].to_numpy(), named["dense_score"].to_numpy())
    hyde = make_ctx("What did tester's team host?")
    hyde.query_vector = store.embedder.embed(["Globex blog posts"])[0]
    out = Dense(top_k=None, mask_entity_types=("agent",)).transform(empty_candidates(), hyde)
    assert out["mem_id"][0] == "globex-blog"


def test_top_rows_includes_ties_at_the_cut() -> None:
    scores = np.array([0.5, 0.9, 0.5, 0.1, 0.5])
    mask = np.array([True, True, True, True, False])
    assert top_rows(scores, mask, 2).tolist() == [0, 1, 2]
    assert top_rows(scores, mask, None).tolist() == [0, 1, 2, 3]
    assert top_rows(scores, mask, 0).tolist() == []


def test_ties_are_broken_by_mem_id(make_ctx) -> None:
    ctx = make_ctx("Acme website hosting")
    ctx.query_vector = np.zeros(64, dtype=np.float32)  # every cosine is 0
    out = Dense(top_k=3).transform(empty_candidates(), ctx)
    assert out["mem_id"].to_list() == sorted(ctx.store.ids_of(np.flatnonzero(ctx.visible_mask())))[
        :3
    ]


def test_exact_and_chroma_backends_agree(tmp_path: Path, store_factory, now) -> None:
    store = store_factory(tmp_path)
    for text, client in [
        ("Acme website hosting", None),
        ("Globex blog posts", None),
        ("billing service database", "acme"),
        ("where are memories stored", "globex"),
    ]:
        ctx = QueryContext(
            qid="q", text=text, store=store, now=now, client_id=client, embedder=store.embedder
        )
        full = Dense(top_k=None).transform(empty_candidates(), ctx)["dense_score"].to_numpy()
        # the largest k <= 5 with a clear gap at the cut (an approximate index may break exact
        # ties either way)
        k = max(i for i in range(1, 6) if full[i - 1] > full[i] + 1e-4)
        assert k >= 3
        exact = Dense(top_k=k).transform(empty_candidates(), ctx)
        approx = Dense(top_k=k, backend="chroma").transform(empty_candidates(), ctx)
        check_frame(approx, "dense chroma")
        assert approx["mem_id"].to_list() == exact["mem_id"].to_list()
        np.testing.assert_allclose(approx["dense_score"], exact["dense_score"], atol=1e-5)


def test_unknown_backend_is_rejected(make_ctx) -> None:
    with pytest.raises(ValueError, match="Dense: parameter 'backend' must be a str among"):
        Dense(backend="faiss")


def test_empty_store_gives_no_candidates(now) -> None:
    from memlab.memory.store import MemoryStore

    ctx = QueryContext(qid="q", text="x", store=MemoryStore(), now=now)
    out = Dense().transform(empty_candidates(), ctx)
    assert out.height == 0
    check_frame(out, "dense")


def _random_store(n: int, now: float, seed: int = 0):
    from memlab.memory.store import MemoryStore

    rng = np.random.default_rng(seed)
    vecs = rng.standard_normal((n, 32)).astype(np.float32)
    store = MemoryStore()
    clients = ("acme", "globex", "initech", "global")
    with store.batch():
        for i in range(n):
            store.store(
                f"memory {i}",
                "fact",
                source_agent="tester",
                client_id=clients[i % 4],
                key=f"k{i // 2}" if i % 10 < 2 else None,  # every tenth memory superseded
                now=now - n + i,
                id=f"m{i:04d}",
                embedding=vecs[i],
            )
    return store, rng


def test_usearch_backend_returns_visible_rows_with_exact_scores(now) -> None:
    from memlab.stages.dense import ann_index

    store, rng = _random_store(600, now)
    hits = 0
    for i in range(20):
        q = rng.standard_normal(32).astype(np.float32)
        client = (None, "acme", "globex")[i % 3]
        ctx = QueryContext(qid="q", text="x", store=store, now=now, client_id=client)
        ctx.query_vector = q
        exact = Dense(top_k=10, backend="exact").transform(empty_candidates(), ctx)
        approx = Dense(top_k=10, backend="usearch").transform(empty_candidates(), ctx)
        check_frame(approx, "dense usearch")
        visible = ctx.visible_mask()
        assert approx.height == 10
        assert all(visible[r] for r in approx["row"].to_list())  # filtering is exact
        want = store.vectors.matrix[approx["row"].to_numpy()] @ (q / np.linalg.norm(q))
        np.testing.assert_allclose(approx["dense_score"], want, atol=1e-6)  # exact cosines
        hits += len(set(approx["mem_id"]) & set(exact["mem_id"]))
    assert hits >= 0.9 * 20 * 10  # recall@10 (600 vectors: near-exhaustive search)
    assert len(ann_index(store.vectors)) == len(store)


def test_auto_backend_switches_at_ann_min_rows(now) -> None:
    from memlab.stages import dense as dense_module

    store, rng = _random_store(500, now, seed=1)
    ctx = QueryContext(qid="q", text="x", store=store, now=now)
    ctx.query_vector = rng.standard_normal(32).astype(np.float32)
    Dense(top_k=5).transform(empty_candidates(), ctx)  # 500 < 200,000: exact
    assert store.vectors not in dense_module._ANN
    # the count is of the memories a query sees: acme's (and global's) are half the store's
    acme = QueryContext(qid="q", text="x", store=store, now=now, client_id="acme")
    acme.query_vector = ctx.query_vector
    seen_acme, seen_all = (int(c.visible_mask().sum()) for c in (acme, ctx))
    assert seen_acme < 300 <= seen_all
    Dense(top_k=5, ann_min_rows=300).transform(empty_candidates(), acme)
    assert store.vectors not in dense_module._ANN  # exact for a tenant below the bound
    out = Dense(top_k=5, ann_min_rows=300).transform(empty_candidates(), ctx)
    assert store.vectors in dense_module._ANN
    exact = Dense(top_k=5, backend="exact").transform(empty_candidates(), ctx)
    assert len(set(out["mem_id"]) & set(exact["mem_id"])) >= 4



def test_fit_builds_the_usearch_graph_only_when_queries_will_use_it(now) -> None:
    from memlab.stages import dense as dense_module

    store, _ = _random_store(300, now, seed=2)
    Dense().fit(store)  # auto, 300 < 200,000: exact search, nothing to build
    assert store.vectors not in dense_module._ANN
    Dense(ann_min_rows=300).fit(store)
    assert len(dense_module._ANN[store.vectors]) == 300


# --------------------------------------------------------------------- a stage's own embedder


def test_own_embedder_ranks_visible_memories_by_its_own_cosine(store, make_ctx) -> None:
    from memlab.embed.hashing import HashingEmbedder

    other = HashingEmbedder(dim=32, seed=1)
    ctx = make_ctx("Acme website hosting", client_id="acme")
    ctx.embedders = {"test-hash32-a": other}
    out = Dense(top_k=None, embedder="test-hash32-a").transform(empty_candidates(), ctx)
    check_frame(out, "dense")
    q = other.embed(["Acme website hosting"])[0]
    q = q / np.linalg.norm(q)
    want = []
    for i in np.flatnonzero(ctx.visible_mask()):
        rec = store.record_at(i)
        v = other.embed([rec.text])[0]
        want.append((rec.id, float(v / np.linalg.norm(v) @ q)))
    want.sort(key=lambda p: (-p[1], p[0]))
    assert out["mem_id"].to_list() == [m for m, _ in want]
    np.testing.assert_allclose(out["dense_score"].to_numpy(), [s for _, s in want], atol=1e-6)
    ids = set(out["mem_id"])
    assert "acme-stack-1" not in ids and not ids & {"globex-cms", "globex-seo"}  # filters hold
    # the store's vectors (64-d) were not used: another model, another order or other scores
    store_out = Dense(top_k=None).transform(empty_candidates(), make_ctx(
        "Acme website hosting", client_id="acme"))
    assert not np.allclose(store_out["dense_score"].to_numpy(), out["dense_score"].to_numpy())


def test_a_named_embedder_is_loaded_behind_the_disk_cache(store, make_ctx, tmp_path,
                                                          monkeypatch) -> None:
    """``hashing`` with its defaults is the fixture store's model: the stage's own vectors
    rank exactly as the store's do, and the vectors land in the cache directory."""
    monkeypatch.setenv("MEMLAB_CACHE_DIR", str(tmp_path))
    ctx = make_ctx("Globex blog posts")
    own = Dense(top_k=None, embedder="hashing").transform(empty_candidates(), ctx)
    base = Dense(top_k=None).transform(empty_candidates(), make_ctx("Globex blog posts"))
    assert own["mem_id"].to_list() == base["mem_id"].to_list()
    np.testing.assert_allclose(own["dense_score"], base["dense_score"], atol=1e-6)
    assert list(tmp_path.glob("hashing*/default.sqlite3"))


def test_own_vectors_grow_with_the_store_and_forget_a_purged_text(store, make_ctx) -> None:
    from memlab.embed.hashing import HashingEmbedder

    stage = Dense(top_k=None, embedder="test-hash32-a")
    ctx = make_ctx("Thursday meeting")
    ctx.embedders = {"test-hash32-a": HashingEmbedder(dim=32, seed=1)}
    stage.transform(empty_candidates(), ctx)
    assert stage.vectors_.n_rows_ == len(store) == 13
    store.store("Thursday offsite meeting booked", "event", source_agent="t", now=ctx.now,
                id="late")
    out = stage.transform(empty_candidates(), ctx)
    assert stage.vectors_.n_rows_ == 14 and "late" in out["mem_id"].to_list()
    store.forget("late", "test", now=ctx.now)
    store.purge("late", now=ctx.now)
    out = stage.transform(empty_candidates(), ctx)
    assert "late" not in out["mem_id"].to_list()
    assert stage.vectors_.content_version_ == store.content_version


def test_own_embedder_ignores_a_hyde_vector_and_refuses_store_backends(store, make_ctx) -> None:
    from memlab.embed.hashing import HashingEmbedder

    ctx = make_ctx("Globex blog posts")
    ctx.embedders = {"hashing": HashingEmbedder(dim=32, seed=3)}
    plain = Dense(top_k=3, embedder="hashing").transform(empty_candidates(), ctx)
    ctx.query_vector = store.vectors.get(store.idx("acme-deploy"))  # HyDE's space, not its own
    again = Dense(top_k=3, embedder="hashing").transform(empty_candidates(), ctx)
    assert again["mem_id"].to_list() == plain["mem_id"].to_list()
    with pytest.raises(ValueError, match="searches exactly"):
        Dense(backend="chroma", embedder="hashing").transform(empty_candidates(), ctx)
    for bad in (" ", "no-such-model", "path:"):
        with pytest.raises(ValueError, match="registered embedder name"):
            Dense(embedder=bad).transform(empty_candidates(), ctx)
    with pytest.raises(ValueError, match="registered embedder name"):
        Dense(query_embedder="no-such-model").transform(empty_candidates(), ctx)


def test_an_asymmetric_stage_embeds_the_query_with_its_query_embedder(store, make_ctx) -> None:
    from memlab.embed.hashing import HashingEmbedder

    mem, qry = HashingEmbedder(dim=32, seed=1), HashingEmbedder(dim=32, seed=2)
    ctx = make_ctx("Acme billing service")
    ctx.embedders = {"test-hash32-a": mem, "test-hash32-b": qry}
    out = Dense(top_k=None, embedder="test-hash32-a", query_embedder="test-hash32-b").transform(
        empty_candidates(), ctx)
    q = qry.embed(["Acme billing service"])[0]
    want = sorted(
        ((store.record_at(i).id, float(mem.embed([store.record_at(i).text])[0] @ q))
         for i in np.flatnonzero(ctx.visible_mask())),
        key=lambda p: (-p[1], p[0]),
    )
    assert out["mem_id"].to_list() == [m for m, _ in want]
    np.testing.assert_allclose(out["dense_score"].to_numpy(), [s for _, s in want], atol=1e-6)
