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
        [--blas-threads 1]
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
from memlab.pipeline import Parallel, Pipeline
from memlab.stages import STAGES
from memlab.stages.base import QueryContext, empty_candidates
from memlab.stages.bm25 import BM25
from memlab.stages.dense import Dense
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
    fn(ctxs[0])  # warm up (first-use builds, caches)
    out = np.empty(len(ctxs))
    for i, ctx in enumerate(ctxs):
        start = time.perf_counter()
        fn(ctx)
        out[i] = time.perf_counter() - start
    return out * 1e3


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
    print(f"  {name:<34} p50 {np.percentile(ms, 50):8.3f} ms   p95 {np.percentile(ms, 95):8.3f} ms")


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
    args = parser.parse_args()
    if args.blas_threads is not None:
        from threadpoolctl import threadpool_limits

        threadpool_limits(args.blas_threads, user_api="blas")

    load = ", ".join(f"{x:.2f}" for x in os.getloadavg())
    print(f"{os.cpu_count()} CPUs, load average {load} (other work on the machine skews timings)")
    for n in args.sizes:
        small = n <= 10_000
        store, vocab, rate = build_store(n, args.seed, chroma=small)
        active = int(store.visible_mask().sum())
        where = "with chromadb" if small else "without chromadb"
        print(f"\n{n} memories ({active} active), written {where} at {rate:,.0f}/s")
        ctxs = contexts(store, vocab, args.queries, args.seed)

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

        for with_graph in (False, True) if "graph" in STAGES else (False,):
            pipe = hybrid(with_graph)
            pipe.fit(store)
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


if __name__ == "__main__":
    main()
