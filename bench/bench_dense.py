"""Dense search at scale: usearch HNSW (``backend="usearch"``) beside exact search, same run.

Vectors: the real all-MiniLM-L6-v2 vectors of the 5,882 LoCoMo turns (memlab's importer and
embedder; the shared embedding cache makes this warm), queries: the 1,986 LoCoMo questions.
At a size ``N`` beyond 5,882 the corpus is the real vectors tiled with Gaussian perturbation
(``sigma`` per coordinate, renormalised), so it keeps the real vectors' clustering.

For each size it prints, with the load average:

* build time of the usearch graph (:class:`memlab.memory.vectors.AnnIndex`);
* recall@10 of the graph against exact search (unfiltered), and of the ``usearch`` backend's
  over-fetch-and-re-check path under a visibility mask keeping ``--visible`` of the rows;
* p50/p95 per query of exact search (float32 matmul + argpartition + mask) and of the usearch
  path (graph search of ``1.5 × top_k / visible share`` neighbours, mask re-check, exact
  re-scoring of the survivors), top 100.

Usage::

    .venv/bin/python bench/bench_dense.py [--sizes 5882 100000 1000000] [--queries 300]
        [--visible 0.3] [--sigma 0.05] [--repeat 2] [--blas-threads 1]
"""

from __future__ import annotations

import argparse
import os
import time
from functools import partial

import numpy as np

from memlab.datasets.locomo import LocomoImporter
from memlab.embed import default_embedder
from memlab.memory.vectors import AnnIndex, ExactIndex
from memlab.stages.dense import ANN_OVERFETCH, top_rows

LOCOMO = "/work/shared/datasets/locomo10"


def load() -> str:
    return ", ".join(f"{x:.2f}" for x in os.getloadavg())


def corpus(real: np.ndarray, n: int, sigma: float, rng: np.random.Generator) -> np.ndarray:
    if n <= len(real):
        return real[:n].copy()
    out = np.empty((n, real.shape[1]), dtype=np.float32)
    for lo in range(0, n, 50_000):
        hi = min(lo + 50_000, n)
        base = real[np.arange(lo, hi) % len(real)]
        noisy = base + sigma * rng.standard_normal(base.shape, dtype=np.float32)
        out[lo:hi] = noisy / np.linalg.norm(noisy, axis=1, keepdims=True)
    return out


def exact_top(matrix: np.ndarray, q: np.ndarray, mask: np.ndarray, k: int) -> np.ndarray:
    sims = (matrix @ q).astype(np.float64)
    rows = top_rows(sims, mask, k)
    return rows[np.argsort(-sims[rows], kind="stable")][:k]


def ann_top(
    index: AnnIndex, matrix: np.ndarray, q: np.ndarray, mask: np.ndarray, share: float, k: int
) -> np.ndarray:
    fetch = int(ANN_OVERFETCH * k / share) + 1
    while True:
        rows = index.search(q, fetch)
        rows = rows[mask[rows]]
        if len(rows) >= k or fetch >= len(index):
            break
        fetch *= 4
    sims = (matrix[rows] @ q).astype(np.float64)
    return rows[np.argsort(-sims, kind="stable")][:k]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sizes", type=int, nargs="+", default=[5_882, 100_000, 1_000_000])
    parser.add_argument("--queries", type=int, default=300)
    parser.add_argument("--visible", type=float, default=0.3)
    parser.add_argument("--sigma", type=float, default=0.05)
    parser.add_argument("--repeat", type=int, default=2)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--blas-threads", type=int, default=1)
    args = parser.parse_args()
    from threadpoolctl import threadpool_limits

    threadpool_limits(args.blas_threads, user_api="blas")  # steadier on a busy machine
    print(f"{os.cpu_count()} CPUs, load average {load()}")
    dataset, _ = LocomoImporter().build(LOCOMO)
    embedder = default_embedder()
    real = np.asarray(embedder.embed(dataset.memories_frame()["text"].to_list()), np.float32)
    questions = [q.text for q in dataset.queries]
    rng = np.random.default_rng(args.seed)
    pick = rng.choice(len(questions), size=min(args.queries, len(questions)), replace=False)
    queries = np.asarray(embedder.embed([questions[i] for i in pick]), np.float32)
    queries /= np.linalg.norm(queries, axis=1, keepdims=True)
    print(f"{len(real):,} LoCoMo turn vectors, {len(queries)} question vectors (MiniLM, dim 384)")

    for n in args.sizes:
        matrix = corpus(real, n, args.sigma, rng)
        exact = ExactIndex(dim=matrix.shape[1])
        exact._matrix, exact._present, exact._n = matrix, np.ones(n, dtype=bool), n
        start = time.perf_counter()
        index = AnnIndex().sync(exact)
        build = time.perf_counter() - start
        mask = rng.random(n) < args.visible
        share = float(mask.mean())
        every = np.ones(n, dtype=bool)
        kind = "real" if n <= len(real) else f"real tiled + N(0, {args.sigma}^2) noise"
        print(f"\n{n:,} vectors ({kind}); usearch build {build:.1f} s (load {load()})")

        hits = hits_masked = 0
        for q in queries:
            want = exact_top(matrix, q, every, 10)
            hits += len(np.intersect1d(want, ann_top(index, matrix, q, every, 1.0, 10)))
            want = exact_top(matrix, q, mask, 10)
            hits_masked += len(np.intersect1d(want, ann_top(index, matrix, q, mask, share, 10)))
        print(f"  recall@10 unfiltered {hits / (10 * len(queries)):.3f}, "
              f"with {share:.0%} visible (over-fetch + re-check) "
              f"{hits_masked / (10 * len(queries)):.3f}")

        for rep in range(args.repeat):
            times = {}
            for name, fn in (
                ("exact", partial(exact_top, matrix, mask=mask, k=100)),
                ("usearch", partial(ann_top, index, matrix, mask=mask, share=share, k=100)),
            ):
                fn(queries[0])
                ms = np.empty(len(queries))
                for i, q in enumerate(queries):
                    t = time.perf_counter()
                    fn(q)
                    ms[i] = (time.perf_counter() - t) * 1e3
                times[name] = ms
            print(f"  run {rep + 1} (load {load()}), top 100 under the mask:")
            for name, ms in times.items():
                print(f"    {name:<8} p50 {np.percentile(ms, 50):8.3f} ms  "
                      f"p95 {np.percentile(ms, 95):8.3f} ms")
        del index, matrix, exact


if __name__ == "__main__":
    main()
