"""Latency of the LIF stage on a random entity graph (target: p50 < 10 ms at 100k edges).

A store of ``--memories`` memories, each linked (role ``mentioned``) to three random entities of a
random graph with ``--entities`` entities and ``--edges`` distinct co-occurrence edges of
strength 1–5 (seeded). The incoming frame holds 100 random candidates with descending scores.
Reports the first (cold: adjacency, synapses and incidence are built) and the p50/p90 of the
warm calls of ``LIF.simulate`` and ``LIF.transform`` with default parameters.

Usage::

    python bench/bench_lif.py [--edges 100000] [--entities 10000] [--memories 5000]
                              [--repeat 50] [--seed 0] [--out result.json]
"""

from __future__ import annotations

import argparse
import json
import os
import time
from pathlib import Path

import numpy as np
import polars as pl

from memlab.memory.entities import Entity
from memlab.memory.store import MemoryStore
from memlab.stages.base import QueryContext
from memlab.stages.graph import memory_incidence
from memlab.stages.lif import LIF


def build(n_entities: int, n_edges: int, n_memories: int, seed: int) -> MemoryStore:
    """The random store described in the module docstring."""
    rng = np.random.default_rng(seed)
    store = MemoryStore()
    with store.batch():
        for i in range(n_memories):
            store.store(f"note number {i}", "event", source_agent="bench", now=float(i), id=f"m{i}")
    graph = store.graph
    base = graph.n_entities
    for i in range(n_entities):
        graph.add_entity(Entity(f"entity {i}", "concept"))
    seen: set[tuple[int, int]] = set()
    while len(seen) < n_edges:
        a, b = rng.integers(0, n_entities, size=(2, n_edges), dtype=np.int64)
        for x, y in zip(a.tolist(), b.tolist(), strict=True):
            if x == y:
                continue
            key = (min(x, y), max(x, y))
            if key in seen:
                continue
            seen.add(key)
            if len(seen) >= n_edges:
                break
    strengths = rng.integers(1, 6, size=len(seen))
    for (x, y), s in zip(sorted(seen), strengths.tolist(), strict=True):
        graph.add_relation(base + x, base + y, "co_occurrence", increment=float(s))
    for m in range(n_memories):
        for e in rng.choice(n_entities, size=3, replace=False).tolist():
            graph.link(base + e, m, "mentioned")
    return store


def _ms(samples: list[float]) -> dict[str, float]:
    arr = np.asarray(samples) * 1000.0
    return {"p50_ms": float(np.percentile(arr, 50)), "p90_ms": float(np.percentile(arr, 90))}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--edges", type=int, default=100_000)
    parser.add_argument("--entities", type=int, default=10_000)
    parser.add_argument("--memories", type=int, default=5_000)
    parser.add_argument("--repeat", type=int, default=50)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--out", type=Path, default=None)
    args = parser.parse_args()

    t = time.perf_counter()
    store = build(args.entities, args.edges, args.memories, args.seed)
    build_s = time.perf_counter() - t
    rng = np.random.default_rng(args.seed + 1)
    picked = rng.choice(args.memories, size=100, replace=False)
    frame = pl.DataFrame(
        {
            "qid": ["q"] * 100,
            "mem_id": [f"m{i}" for i in picked.tolist()],
            "score": np.linspace(1.0, 0.01, 100),
            "rank": np.arange(1, 101, dtype=np.int64),
        },
        schema={"qid": pl.String, "mem_id": pl.String, "score": pl.Float64, "rank": pl.Int64},
    )
    cache: dict[object, object] = {}

    def ctx() -> QueryContext:
        return QueryContext(qid="q", text="", store=store, now=float(args.memories), cache=cache)

    lif = LIF()
    t = time.perf_counter()
    out = lif.transform(frame, ctx())
    cold = time.perf_counter() - t
    trace = ctx()
    lif.transform(frame, trace)
    fired = len(trace.trace["lif"]["fired"])

    _, inc_t = memory_incidence(ctx(), lif.roles)
    current = np.asarray(inc_t[[store.idx(m) for m in frame["mem_id"][:5]]].sum(axis=0)).ravel()
    sim, tra = [], []
    for _ in range(args.repeat):
        t = time.perf_counter()
        lif.simulate(store.graph, current)
        sim.append(time.perf_counter() - t)
        t = time.perf_counter()
        lif.transform(frame, ctx())
        tra.append(time.perf_counter() - t)

    result = {
        "entities": store.graph.n_entities,
        "edges": store.graph.n_edges,
        "memories": len(store),
        "build_s": build_s,
        "cold_transform_ms": cold * 1000.0,
        "simulate": _ms(sim),
        "transform": _ms(tra),
        "fired_entities": fired,
        "output_rows": out.height,
    }
    text = json.dumps(result, indent=2)
    print(text)
    if args.out is not None:
        tmp = args.out.with_name(f".{args.out.name}.tmp{os.getpid()}")
        tmp.write_text(text + "\n", encoding="utf-8")
        os.replace(tmp, args.out)


if __name__ == "__main__":
    main()
