"""Array stages beside a plain numpy reference of the same computation, on 1,000 candidates.

For each of ``rrf``, ``combsum``, ``neighbors``, ``lifecycle``, ``mmr`` and ``entropy_gate`` the
stage runs on candidate frames (``rrf``/``combsum``: three lists of 1,000 candidates each from a
seeded synthetic store, :func:`bench_stages.build_store`; the others: the 1,000 best of their
RRF fusion), and a numpy function written here computes the same thing from the frames' arrays
(store rows, ranks, scores) and returns the ranked rows. The numpy references break ties with a
precomputed rank of every memory id (an integer sort key), the stages with the ids themselves.
Each line prints both medians and their ratio, and checks that both rank the same rows.
polars runs on one thread (``POLARS_MAX_THREADS=1`` unless set): on 1,000 rows its thread pool
costs more than it gains, the more so on a shared 2-core machine.

Usage::

    .venv/bin/python bench/bench_fusion.py [--memories 20000] [--candidates 1000] [--reps 50]
"""

from __future__ import annotations

import argparse
import math
import os

os.environ.setdefault("POLARS_MAX_THREADS", "1")  # before polars loads: steadier on 2 shared cores
import sys
import time
from collections import Counter
from collections.abc import Callable
from pathlib import Path

import numpy as np
import polars as pl

sys.path.insert(0, str(Path(__file__).parent))
from bench_stages import build_store, contexts  # noqa: E402

from memlab.memory.lifecycle import days_since, lifecycle_factor  # noqa: E402
from memlab.stages.base import QueryContext, candidates_from_rows  # noqa: E402
from memlab.stages.combsum import CombSUM  # noqa: E402
from memlab.stages.entropy_gate import EntropyGate, _jaccard_matrix  # noqa: E402
from memlab.stages.features import word_tokens  # noqa: E402
from memlab.stages.lifecycle import Lifecycle  # noqa: E402
from memlab.stages.mmr import MMR  # noqa: E402
from memlab.stages.neighbors import Neighbors  # noqa: E402
from memlab.stages.rrf import RRF  # noqa: E402


def median_ms(fn: Callable[[], object], reps: int) -> float:
    fn()
    out = []
    for _ in range(reps):
        start = time.perf_counter()
        fn()
        out.append(time.perf_counter() - start)
    return float(np.median(out)) * 1e3


def arrays(frame: pl.DataFrame) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    return frame["row"].to_numpy(), frame["rank"].to_numpy(), frame["score"].to_numpy()


def rank_rows(rows: np.ndarray, score: np.ndarray, id_rank: np.ndarray) -> np.ndarray:
    return rows[np.lexsort((id_rank[rows], -score))]


# ------------------------------------------------------------------------- references
def rrf_ref(frames, id_rank, k=60.0):
    parts = [arrays(f) for f in frames]
    rows = np.concatenate([p[0] for p in parts])
    contrib = np.concatenate([1.0 / (k + p[1]) for p in parts])
    union, inv = np.unique(rows, return_inverse=True)
    return rank_rows(union, np.bincount(inv, contrib), id_rank)


def combsum_ref(frames, id_rank, weights=(1.0, 1.0, 1.0)):
    parts = [arrays(f) for f in frames]
    union, inv = np.unique(np.concatenate([p[0] for p in parts]), return_inverse=True)
    total = np.zeros(len(union))
    start = 0
    for w, (r, _, s) in zip(weights, parts, strict=True):
        raw = np.zeros(len(union))
        raw[inv[start : start + len(r)]] = s
        start += len(r)
        total += w * (raw - raw.mean()) / raw.std()
    return rank_rows(union, total, id_rank)


def neighbors_ref(frame, id_rank, links, visible, weight=0.3):
    rows, _, s = arrays(frame)
    prev, nxt = links
    score = np.zeros(len(prev))
    score[rows] = s
    near = np.unique(np.concatenate([rows, prev[rows], nxt[rows]]))
    near = near[near >= 0]
    inherited = np.zeros(len(prev))
    for link in (prev, nxt):
        hop = link[near]
        ok = hop >= 0
        inherited[near[ok]] += score[hop[ok]]
    new = np.setdiff1d(near[visible[near]], rows)
    out = np.concatenate([rows, new])
    return rank_rows(out, score[out] + weight * inherited[out], id_rank)


def lifecycle_ref(frame, id_rank, store, ctx):
    rows, _, s = arrays(frame)
    keep = ctx.visible_mask()[rows]
    dense = frame["dense_score"].to_numpy()
    other = np.isnan(frame["bm25_score"].to_numpy()) & np.isnan(frame["graph_score"].to_numpy())
    keep &= ~(~np.isnan(dense) & (dense < 0.3) & other)
    rows, s = rows[keep], s[keep]
    factor = lifecycle_factor(
        store.column("type")[rows], store.column("confidence")[rows],
        days_since(ctx.now, store.column("last_accessed_at")[rows],
                   store.column("created_at")[rows]),
        store.column("access_count")[rows], decay_factor=0.98, boost_weight=0.3,
        decaying_types=("fact", "status"),
    )
    return rank_rows(rows, s * factor, id_rank)


def mmr_ref(frame, store, lambda_=0.7):
    rows, _, s = arrays(frame)
    v = store.vectors.matrix[rows].astype(np.float64)
    v /= np.linalg.norm(v, axis=1, keepdims=True)
    sim = v @ v.T
    rel = (s - s.min()) / (s.max() - s.min())
    chosen = np.zeros(len(rows), dtype=np.int64)
    available = np.ones(len(rows), dtype=bool)
    penalty = np.zeros(len(rows))
    for step in range(len(rows)):
        m = lambda_ * rel - (1 - lambda_) * penalty
        m[~available] = -np.inf
        i = int(np.argmax(m))
        chosen[step], available[i] = i, False
        penalty = np.maximum(penalty, sim[:, i]) if step else sim[:, i]
    return rows[chosen]


def entropy_ref(frame, store, budget=2000):
    rows = frame["row"].to_numpy()
    toks = [word_tokens(store.record_at(int(r)).text) for r in rows]
    ent = np.zeros(len(rows))
    for i, t in enumerate(toks):
        n = len(t)
        ent[i] = -sum(c / n * math.log2(c / n) for c in Counter(t).values()) if n else 0.0
    cost = np.array([math.ceil(round(len(t) * 1.3, 9)) for t in toks])
    lower = np.tril(_jaccard_matrix(toks), k=-1)
    alive = ent >= 0.0
    norm = ent / ent[alive].max()
    while cost[alive].sum() > budget:
        red = np.where(alive[None, :], lower, 0.0).max(axis=1)
        pri = norm - red
        live = np.flatnonzero(alive)
        best = pri[live].min()
        alive[int(live[pri[live] == best].max())] = False
    return rows[alive]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--memories", type=int, default=20_000)
    parser.add_argument("--candidates", type=int, default=1_000)
    parser.add_argument("--reps", type=int, default=50)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    load = ", ".join(f"{x:.2f}" for x in os.getloadavg())
    print(f"{os.cpu_count()} CPUs, load average {load}")
    store, vocab, _ = build_store(args.memories, args.seed)
    ctx: QueryContext = contexts(store, vocab, 1, args.seed)[0]
    ids = np.asarray(store.ids)
    id_rank = np.empty(len(ids), dtype=np.int64)
    id_rank[np.argsort(ids, kind="stable")] = np.arange(len(ids))
    rng = np.random.default_rng(args.seed)
    visible = np.flatnonzero(ctx.visible_mask())
    names = ("dense_score", "bm25_score", "graph_score")
    frames = []
    for name in names:
        rows = rng.choice(visible, args.candidates, replace=False)
        frames.append(candidates_from_rows(ctx, rows, rng.random(len(rows)), name))
    fused = RRF(top_k=args.candidates).fuse(frames, ctx)
    print(f"{len(store)} memories; {len(frames)} lists x {args.candidates} candidates "
          f"(union {RRF().fuse(frames, ctx).height}); re-rankers get {fused.height}\n")
    print(f"  {'stage':<14}{'memlab ms':>11}{'numpy ms':>11}{'ratio':>8}  same ranking")

    neighbors = Neighbors()
    links = neighbors.links(ctx)
    cases = [
        ("rrf", lambda: RRF().fuse(frames, ctx), lambda: rrf_ref(frames, id_rank)),
        ("combsum", lambda: CombSUM().fuse(frames, ctx), lambda: combsum_ref(frames, id_rank)),
        ("neighbors", lambda: neighbors.transform(fused, ctx),
         lambda: neighbors_ref(fused, id_rank, links, ctx.visible_mask())),
        ("lifecycle", lambda: Lifecycle().transform(fused, ctx),
         lambda: lifecycle_ref(fused, id_rank, store, ctx)),
        ("mmr", lambda: MMR().transform(fused, ctx), lambda: mmr_ref(fused, store)),
        ("entropy_gate", lambda: EntropyGate().transform(fused, ctx),
         lambda: entropy_ref(fused, store)),
    ]
    for name, stage, ref in cases:
        ours = stage()
        same = np.array_equal(ours["row"].to_numpy(), ref())
        reps = args.reps if name not in ("mmr", "entropy_gate") else max(3, args.reps // 10)
        a, b = median_ms(stage, reps), median_ms(ref, reps)
        print(f"  {name:<14}{a:>11.3f}{b:>11.3f}{a / b:>8.2f}  {same}")


if __name__ == "__main__":
    main()
