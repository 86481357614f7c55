"""Per-stage query latency on synthetic stores of 10k and 100k memories.

Builds seeded stores through ``MemoryStore.store`` in batches of 2,000 (random unit vectors of
dimension 384 given as ``embedding=``, texts of 6-16 words drawn from a Zipf-distributed
vocabulary of 5,000 words, four clients, about a tenth of the facts superseded by key), then
prints p50/p95 wall time per query of:

* ``dense`` exact (10k, 100k) and chroma (10k; HNSW filled during the writes), with the
  chroma backend's recall@10 against the exact one;
* ``bm25`` with both engines (10k) and the sparse engine (100k), index fitted before timing;
* ``rrf`` fusing two 100-candidate lists, ``lifecycle`` on the fused list (100k);
* the hybrid pipeline ``dense + bm25 → rrf → lifecycle`` (100k; plus ``graph`` as a third
  branch when the graph stage is registered).

Query vectors are precomputed (embedding is excluded); queries are scoped to one client, as a
replayed agent's would be. Target on a 2-core machine: hybrid p50 < 20 ms at 100k.

Usage::

    .venv/bin/python bench/bench_stages.py [--sizes 10000 100000] [--queries 200] [--seed 0]
        [--blas-threads 1] [--only hybrid --sizes 1000000 --ann-threads 0]
"""

from __future__ import annotations

import argparse
import os
import time
from collections.abc import Callable
from functools import partial

import numpy as np
import polars as pl

from memlab.embed.hashing import HashingEmbedder
from memlab.memory.store import MemoryStore
from memlab.memory.vectors import AnnIndex
from memlab.pipeline import Parallel, Pipeline
from memlab.stages import STAGES
from memlab.stages.base import QueryContext, candidates_from_rows, empty_candidates
from memlab.stages.bm25 import BM25
from memlab.stages.dense import _ANN, Dense
from memlab.stages.lifecycle import Lifecycle
from memlab.stages.maxp import MaxP
from memlab.stages.rrf import RRF

DIM = 384
T0 = 1_767_225_600.0  # 2026-01-01T00:00:00Z
CLIENTS = ("acme", "globex", "initech", "global")
TYPES = ("event", "fact", "decision", "status")


def vocabulary(n: int, rng: np.random.Generator) -> list[str]:
    letters = np.array(list("abcdefghijklmnopqrstuvwxyz"))
    words: set[str] = set()
    while len(words) < n:
        words.add("".join(rng.choice(letters, rng.integers(3, 10))))
    return sorted(words)


def zipf_words(vocab: list[str], k: int, rng: np.random.Generator) -> list[str]:
    ranks = np.minimum(rng.zipf(1.3, k), len(vocab)) - 1
    return [vocab[r] for r in ranks]


def build_store(
    n: int, seed: int, *, chroma: bool = False, batch: int = 2_000
) -> tuple[MemoryStore, list[str], float]:
    """A store of ``n`` memories written in batches; returns it, its vocabulary and writes/s."""
    rng = np.random.default_rng(seed)
    vocab = vocabulary(5_000, rng)
    vecs = rng.standard_normal((n, DIM)).astype(np.float32)
    vecs /= np.linalg.norm(vecs, axis=1, keepdims=True)
    store = MemoryStore(chroma=chroma)
    start = time.perf_counter()
    for lo in range(0, n, batch):
        with store.batch():
            for i in range(lo, min(lo + batch, n)):
                t = TYPES[i % 4]
                store.store(
                    " ".join(zipf_words(vocab, int(rng.integers(6, 17)), rng)) + f" n{i}",
                    t,
                    source_agent="bench",
                    client_id=CLIENTS[i % len(CLIENTS)],
                    key=f"k{int(rng.integers(0, n // 4 * 9 // 10 + 1))}" if t == "fact" else None,
                    subject=f"s{i}" if t == "status" else None,
                    now=T0 + i,
                    embedding=vecs[i],
                )
    if chroma:
        store.chroma_index()  # wait for the last upsert
    return store, vocab, n / (time.perf_counter() - start)


def contexts(
    store: MemoryStore, vocab: list[str], n: int, seed: int
) -> list[QueryContext]:
    rng = np.random.default_rng(seed + 1)
    now = T0 + len(store) + 60.0
    out = []
    for i in range(n):
        q = rng.standard_normal(DIM).astype(np.float32)
        out.append(
            QueryContext(
                qid=f"q{i}",
                text=" ".join(zipf_words(vocab, int(rng.integers(3, 8)), rng)),
                store=store,
                now=now,
                client_id=CLIENTS[i % 3],
                query_vector=q / np.linalg.norm(q),
            )
        )
    return out


def timed(fn: Callable[[QueryContext], object], ctxs: list[QueryContext]) -> np.ndarray:
    """Wall milliseconds per query; the process CPU milliseconds are kept in ``CPU_MS``."""
    fn(ctxs[0])  # warm up (first-use builds, caches)
    out = np.empty(len(ctxs))
    cpu = np.empty(len(ctxs))
    for i, ctx in enumerate(ctxs):
        start, start_cpu = time.perf_counter(), time.process_time()
        fn(ctx)
        cpu[i] = time.process_time() - start_cpu
        out[i] = time.perf_counter() - start
    CPU_MS[:] = [cpu * 1e3]
    return out * 1e3


CPU_MS: list[np.ndarray] = []
"""CPU milliseconds per query of the last :func:`timed` call (read by :func:`report`)."""


def recall_at(store: MemoryStore, ctxs: list[QueryContext], k: int) -> float:
    """Mean share of the exact top ``k`` that the chroma backend also returns."""
    exact, approx = Dense(top_k=k), Dense(top_k=k, backend="chroma")
    hits = [
        len(
            set(exact.transform(empty_candidates(), c)["mem_id"])
            & set(approx.transform(empty_candidates(), c)["mem_id"])
        )
        / k
        for c in ctxs
    ]
    return float(np.mean(hits))


def report(name: str, ms: np.ndarray) -> None:
    cpu = f"   (CPU p50 {np.percentile(CPU_MS[0], 50):8.3f} ms)" if CPU_MS else ""
    print(f"  {name:<34} p50 {np.percentile(ms, 50):8.3f} ms   p95 {np.percentile(ms, 95):8.3f} ms"
          + cpu)


def stage_fn(stage, frame: pl.DataFrame | None = None) -> Callable[[QueryContext], object]:
    start = empty_candidates() if frame is None else frame
    return lambda ctx: stage.transform(start, ctx)


def hybrid(with_graph: bool) -> Pipeline:
    branches = [("dense", Dense(top_k=100)), ("bm25", BM25(top_k=100))]
    if with_graph:
        branches.append(("graph", STAGES["graph"]()))
    return Pipeline(
        steps=[
            ("retrieve", Parallel(branches=branches, fuse=("rrf", RRF()))),
            ("lifecycle", Lifecycle()),
        ],
        name="hybrid+graph" if with_graph else "hybrid",
    )


# ------------------------------------------------------------ stages against numpy references
REFERENCE_STAGES = ("rrf", "combsum", "neighbors", "lifecycle", "mmr", "entropy_gate")


def _ref_union(rows_lists: list[np.ndarray]) -> tuple[np.ndarray, np.ndarray]:
    return np.unique(np.concatenate(rows_lists), return_inverse=True)


def _ref_order(store: MemoryStore, rows: np.ndarray, score: np.ndarray) -> np.ndarray:
    return np.lexsort((store.id_sort_keys(rows), -score))


def ref_rrf(frames: list[pl.DataFrame], ctx: QueryContext, k: float = 60.0):
    rows_lists = [f["row"].to_numpy() for f in frames]
    union, inverse = _ref_union(rows_lists)
    ranks = np.concatenate([f["rank"].to_numpy() for f in frames])
    score = np.bincount(inverse, weights=1.0 / (k + ranks), minlength=len(union))
    order = _ref_order(ctx.store, union, score)
    return union[order], score[order]


def ref_combsum(frames: list[pl.DataFrame], ctx: QueryContext, weights=(1.0, 1.0)):
    rows_lists = [f["row"].to_numpy() for f in frames]
    union, inverse = _ref_union(rows_lists)
    total = np.zeros(len(union))
    start = 0
    for w, f in zip(weights, frames, strict=True):
        raw = np.zeros(len(union))
        raw[inverse[start : start + f.height]] = f["score"].to_numpy()
        start += f.height
        std = raw.std()
        total += w * (np.zeros_like(raw) if std == 0 else (raw - raw.mean()) / std)
    order = _ref_order(ctx.store, union, total)
    return union[order], total[order]


def ref_neighbors(frame: pl.DataFrame, ctx: QueryContext, links, weight: float = 0.3):
    prev, nxt = links  # window 1; the links are fitted state, computed once per store
    rows = frame["row"].to_numpy()
    n = len(ctx.store)
    score = np.zeros(n)
    score[rows] = frame["score"].to_numpy()
    near = np.unique(np.concatenate([rows, prev[rows], nxt[rows]]))
    near = near[near >= 0]
    inherited = np.where(prev[near] >= 0, score[prev[near]], 0.0) + np.where(
        nxt[near] >= 0, score[nxt[near]], 0.0
    )
    present = np.zeros(n, dtype=bool)
    present[rows] = True
    keep = present[near] | ctx.visible_mask()[near]
    near, inherited = near[keep], inherited[keep]
    final = score[near] * present[near] + weight * inherited
    order = _ref_order(ctx.store, near, final)
    return near[order], final[order]


def ref_lifecycle(frame: pl.DataFrame, ctx: QueryContext, decay=0.98, boost=0.3, floor=0.3):
    store = ctx.store
    rows = frame["row"].to_numpy()
    dense = frame["dense_score"].to_numpy()
    keep = ctx.visible_mask()[rows] & ~(dense < floor)
    rows = rows[keep]
    last = store.column("last_accessed_at")[rows]
    days = (ctx.now - np.where(np.isnan(last), store.column("created_at")[rows], last)) / 86400.0
    conf = store.column("confidence")[rows]
    decays = np.isin(store.column("type")[rows], ("fact", "status"))
    eff = np.where(decays, conf * np.power(decay, np.maximum(days, 0.0)), conf)
    factor = eff * (1.0 + boost * np.log2(store.column("access_count")[rows] + 1.0))
    score = frame["score"].to_numpy()[keep] * factor
    order = _ref_order(store, rows, score)
    return rows[order], score[order]


def ref_mmr(frame: pl.DataFrame, ctx: QueryContext, lambda_: float = 0.7):
    rows = frame["row"].to_numpy()
    store = ctx.store
    v = (store.vectors.matrix[rows] * store.vectors.present[rows, None]).astype(np.float64)
    v /= np.linalg.norm(v, axis=1, keepdims=True)
    sim = v @ v.T
    s = frame["score"].to_numpy()
    rel = (s - s.min()) / (s.max() - s.min())
    n = len(rows)
    chosen = np.empty(n, dtype=np.int64)
    penalty = np.zeros(n)
    taken = np.zeros(n, dtype=bool)
    for step in range(n):
        mmr = lambda_ * rel - (1.0 - lambda_) * penalty
        mmr[taken] = -np.inf
        i = int(np.argmax(mmr))
        chosen[step], taken[i] = i, True
        penalty = sim[:, i] if step == 0 else np.maximum(penalty, sim[:, i])
    return rows[chosen]


def ref_entropy_gate(frame: pl.DataFrame, ctx: QueryContext, features, budget: int = 2000):
    """The gate's eviction on per-memory text features computed once per store row (word
    sets as a sparse 0/1 matrix, entropies, token counts), redundancy updated incrementally."""
    words, entropy_all, cost_all = features
    rows = frame["row"].to_numpy()
    seen = ctx.visible_mask()[rows]
    rows = rows[seen]
    x = words[rows]
    inter = (x @ x.T).toarray()
    size = np.asarray(x.sum(axis=1)).ravel()
    union = size[:, None] + size[None, :] - inter
    lower = np.tril(np.divide(inter, union, out=np.zeros_like(inter), where=union > 0), k=-1)
    entropy, cost = entropy_all[rows], cost_all[rows]
    s = frame["score"].to_numpy()[seen]
    rel = (s - s.min()) / (s.max() - s.min())
    alive = np.ones(len(rows), dtype=bool)
    red = lower.max(axis=1)
    norm = entropy / entropy.max()
    total = int(cost.sum())
    evicted: list[int] = []
    while total > budget:
        prio = rel + norm - red
        live = np.flatnonzero(alive)
        v = int(live[prio[live] == prio[live].min()].max())
        alive[v] = False
        evicted.append(v)
        total -= int(cost[v])
        hit = np.flatnonzero(alive & (lower[:, v] == red) & (red > 0))
        if len(hit):
            red[hit] = np.where(alive[None, :], lower[hit], 0.0).max(axis=1)
    return rows[alive]


def text_features(store: MemoryStore):
    """Word-set matrix, entropies and token counts of every memory (the reference's input)."""
    import scipy.sparse as sp

    from memlab.stages.entropy_gate import shannon_entropy
    from memlab.stages.features import word_tokens
    from memlab.tokens import count_tokens

    vocab: dict[str, int] = {}
    indptr, indices, entropy, cost = [0], [], [], []
    for text in store.texts:
        toks = word_tokens(text)
        ids = sorted({vocab.setdefault(t, len(vocab)) for t in toks})
        indices.extend(ids)
        indptr.append(len(indices))
        entropy.append(shannon_entropy(toks))
        cost.append(count_tokens(text))
    words = sp.csr_matrix(
        (np.ones(len(indices)), indices, indptr), shape=(len(store), max(len(vocab), 1))
    )
    return words, np.asarray(entropy), np.asarray(cost, dtype=np.int64)


def interleaved(
    a: Callable[[], object], b: Callable[[], object], repeats: int
) -> tuple[tuple[float, float], tuple[float, float]]:
    """Median wall and CPU (process) milliseconds of ``repeats`` calls of ``a`` and of ``b``
    after a warm-up call of each, their calls alternating (a, b, a, b, …) so that both see the
    same machine: the ratio is not skewed by load that comes and goes."""
    a(), b()
    times: list[list[float]] = [[], [], [], []]
    for _ in range(repeats):
        for i, fn in enumerate((a, b)):
            start, start_cpu = time.perf_counter(), time.process_time()
            fn()
            times[2 * i + 1].append(time.process_time() - start_cpu)
            times[2 * i].append(time.perf_counter() - start)
    wall_a, cpu_a, wall_b, cpu_b = (float(np.median(t)) * 1e3 for t in times)
    return (wall_a, cpu_a), (wall_b, cpu_b)


def reference_table(n: int, candidates: int, repeats: int, seed: int) -> None:
    """Each of :data:`REFERENCE_STAGES` on ``candidates`` candidates beside a numpy
    reference of the same computation on the same input, and their ratio (goal ≤ 3)."""
    from memlab.stages.combsum import CombSUM
    from memlab.stages.entropy_gate import EntropyGate
    from memlab.stages.mmr import MMR
    from memlab.stages.neighbors import Neighbors

    store, _, _ = build_store(n, seed)
    rng = np.random.default_rng(seed + 2)
    ctx = QueryContext(qid="q", text="", store=store, now=T0 + n + 60.0, client_id=None)
    visible = np.flatnonzero(ctx.visible_mask())

    def frame(rows: np.ndarray, column: str) -> pl.DataFrame:
        scores = rng.random(len(rows))
        return candidates_from_rows(ctx, rows, scores, column)

    a = rng.choice(visible, candidates, replace=False)
    b = np.concatenate([a[: candidates // 2], rng.choice(visible, candidates // 2)])
    b = np.unique(b)[:candidates]
    lists = [frame(a, "dense_score"), frame(b, "bm25_score")]
    one = frame(a, "dense_score")
    one = one.with_columns(pl.Series("dense_score", rng.random(one.height) * 0.5 + 0.25))
    neighbors = Neighbors()
    links = neighbors.links(ctx)
    features = text_features(store)
    gate = EntropyGate()
    # Stages are built once, as a pipeline builds them: the timings are of the per-query work.
    rrf, combsum, lifecycle, mmr = RRF(), CombSUM(), Lifecycle(), MMR()
    cases = {
        "rrf": (lambda: rrf.fuse(lists, ctx), lambda: ref_rrf(lists, ctx)),
        "combsum": (lambda: combsum.fuse(lists, ctx), lambda: ref_combsum(lists, ctx)),
        "neighbors": (lambda: neighbors.transform(one, ctx),
                      lambda: ref_neighbors(one, ctx, links)),
        "lifecycle": (lambda: lifecycle.transform(one, ctx), lambda: ref_lifecycle(one, ctx)),
        "mmr": (lambda: mmr.transform(one, ctx), lambda: ref_mmr(one, ctx)),
        "entropy_gate": (lambda: gate.transform(one, ctx),
                         lambda: ref_entropy_gate(one, ctx, features)),
    }
    # the references compute what the stages compute: same rows in the same order
    same = {
        "rrf": np.array_equal(cases["rrf"][0]()["row"].to_numpy(), ref_rrf(lists, ctx)[0]),
        "combsum": np.array_equal(cases["combsum"][0]()["row"].to_numpy(),
                                  ref_combsum(lists, ctx)[0]),
        "neighbors": np.array_equal(cases["neighbors"][0]()["row"].to_numpy(),
                                    ref_neighbors(one, ctx, links)[0]),
        "lifecycle": np.array_equal(cases["lifecycle"][0]()["row"].to_numpy(),
                                    ref_lifecycle(one, ctx)[0]),
        "mmr": np.array_equal(cases["mmr"][0]()["row"].to_numpy(), ref_mmr(one, ctx)),
        "entropy_gate": np.array_equal(cases["entropy_gate"][0]()["row"].to_numpy(),
                                       ref_entropy_gate(one, ctx, features)),
    }
    print(f"\nstages on {candidates} candidates ({n} memories) beside a numpy reference of the "
          f"same computation (median of {repeats}, calls alternating, CPU time of the process, "
          "wall in brackets; goal: ratio ≤ 3)")
    print(f"  {'stage':<14}{'stage ms':>18}{'numpy ms':>18}{'ratio':>7}  same output")
    for name, (stage_call, ref_call) in cases.items():
        (wall_s, cpu_s), (wall_r, cpu_r) = interleaved(stage_call, ref_call, repeats)
        print(f"  {name:<14}{cpu_s:9.3f} [{wall_s:7.3f}]{cpu_r:9.3f} [{wall_r:7.3f}]"
              f"{cpu_s / cpu_r:7.2f}  {same[name]}")


def hybrid_report(store: MemoryStore, ctxs: list[QueryContext]) -> None:
    """p50/p95 of the hybrid pipelines (dense backend ``auto``: usearch from 200k memories),
    each timed on its second pass over the queries."""
    for with_graph in (False, True) if "graph" in STAGES else (False,):
        pipe = hybrid(with_graph)
        start = time.perf_counter()
        pipe.fit(store)
        print(f"  ({pipe.name} fitted in {time.perf_counter() - start:.1f} s)", flush=True)
        for c in ctxs:  # an untimed pass first: at 1M the first pass pays for page faults
            pipe.run(c)
        for c in ctxs:
            c.trace.clear()
        report(f"pipeline {pipe.name}", timed(lambda c, p=pipe: p.run(c), ctxs))
        steps = {}
        for c in ctxs[1:]:
            for name, secs in c.trace["timings"].items():
                steps.setdefault(name, []).append(secs * 1e3)
        print(
            "    median per stage: "
            + ", ".join(f"{k} {np.median(v):.2f} ms" for k, v in steps.items())
        )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sizes", type=int, nargs="+", default=[10_000, 100_000])
    parser.add_argument("--queries", type=int, default=200)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument(
        "--blas-threads",
        type=int,
        default=None,
        help="cap BLAS threads (1 gives steadier timings on a machine busy with other work)",
    )
    parser.add_argument(
        "--only",
        choices=("all", "latency", "reference", "hybrid"),
        default="all",
        help="latency: the per-stage and pipeline latencies; reference: the six array stages "
        "beside numpy references; hybrid: only the hybrid pipelines (for 1M memories)",
    )
    parser.add_argument(
        "--ann-threads",
        type=int,
        default=1,
        help="threads adding vectors to the usearch graph (the stage's default, 1, adds them "
        "in row order; 0 = every core, faster, in an order that varies between runs; query "
        "latency is measured the same way)",
    )
    parser.add_argument("--candidates", type=int, default=1_000)
    parser.add_argument("--reference-size", type=int, default=10_000)
    parser.add_argument("--repeats", type=int, default=30)
    args = parser.parse_args()
    if args.blas_threads is not None:
        from threadpoolctl import threadpool_limits

        threadpool_limits(args.blas_threads, user_api="blas")

    load = ", ".join(f"{x:.2f}" for x in os.getloadavg())
    print(f"{os.cpu_count()} CPUs, load average {load} (other work on the machine skews timings)")
    if args.only in ("all", "reference"):
        reference_table(args.reference_size, args.candidates, args.repeats, args.seed)
    for n in args.sizes if args.only != "reference" else ():
        small = n <= 10_000
        store, vocab, rate = build_store(n, args.seed, chroma=small)
        active = int(store.visible_mask().sum())
        where = "with chromadb" if small else "without chromadb"
        print(f"\n{n} memories ({active} active), written {where} at {rate:,.0f}/s "
              f"(load average {', '.join(f'{x:.2f}' for x in os.getloadavg())})", flush=True)
        ctxs = contexts(store, vocab, args.queries, args.seed)
        if args.ann_threads != 1:
            _ANN[store.vectors] = AnnIndex(threads=args.ann_threads)
        if args.only == "hybrid":
            hybrid_report(store, ctxs)
            continue

        if small:
            report("dense chroma (top 100)", timed(stage_fn(Dense(backend="chroma")), ctxs))
            print(f"  (chroma recall@10 against exact: {recall_at(store, ctxs, 10):.3f})")
        report("dense exact (top 100)", timed(stage_fn(Dense(top_k=100)), ctxs))

        engines = ["sparse", "rank_bm25"] if small else ["sparse"]
        for engine in engines:
            stage = BM25(top_k=100, engine=engine)
            start = time.perf_counter()
            stage.fit(store)
            fit = time.perf_counter() - start
            reps = ctxs if engine == "sparse" else ctxs[: max(10, len(ctxs) // 10)]
            report(f"bm25 {engine} (top 100)", timed(stage_fn(stage), reps))
            print(f"  (bm25 {engine} index fitted in {fit * 1e3:.0f} ms)")
        scoped = BM25(top_k=100, statistics="scope")
        report("bm25 sparse, per-scope statistics", timed(stage_fn(scoped), ctxs))
        maxp = MaxP(top_k=100)
        start = time.perf_counter()
        maxp.fit(store, embedder=HashingEmbedder(dim=DIM))
        fit = time.perf_counter() - start
        report("maxp (top 100)", timed(stage_fn(maxp), ctxs))
        print(
            f"  ({len(maxp.passages_)} sentences embedded in {fit:.1f} s by the hashing embedder)"
        )
        if not small:
            refit = BM25(top_k=100)
            refit.fit(store)
            start = time.perf_counter()
            refit.set_params(k1=1.2).fit(store)
            secs = time.perf_counter() - start
            print(f"  (bm25 sparse refit after set_params, no new text: {secs * 1e3:.0f} ms)")

        lists = [
            Dense(top_k=100).transform(empty_candidates(), ctxs[0]),
            BM25(top_k=100).fit(store).transform(empty_candidates(), ctxs[0]),
        ]
        report("rrf (2 x 100 candidates)", timed(partial(RRF().fuse, lists), ctxs))
        fused = RRF().fuse(lists, ctxs[0])
        report(f"lifecycle ({fused.height} candidates)", timed(stage_fn(Lifecycle(), fused), ctxs))

        hybrid_report(store, ctxs)

if __name__ == "__main__":
    main()
