"""Benchmark of the entity graph (and of the write-path text stages feeding it).

Builds a seeded random graph with ``--edges`` edges over ``--entities`` entities (80 %
co-occurrence, 20 % typed relations, strengths 1-10), links every entity to a few memories,
then prints p50/p95 wall time of:

* ``spread_activation`` from 3 random seeds (seed-000 defaults: decay 0.8, boost 2.0, depth 2);
* ``memory_activation`` of that result;
* ``adjacency()`` construction (cache cleared before each call);
* ``to_igraph()`` construction;

and the throughput (texts/s) of ``EntityExtractor.extract`` and ``scrub`` on short texts.

Usage::

    .venv/bin/python bench/bench_graph.py [--edges 100000] [--entities 20000] [--seed 0]
"""

from __future__ import annotations

import argparse
import time

import numpy as np

from memlab.memory.entities import Entity, EntityExtractor
from memlab.memory.graph import EntityGraph
from memlab.memory.records import RELATION_TYPES
from memlab.memory.scrub import scrub

_TEXT_PARTS = (
    "Migrated acme.com from nextjs to Next.js on Vercel with postgres",
    'Caroline Smith reviewed the "Content Strategy" deck with Acme Corp',
    "Fixed Login Page after the Monday Meeting; Background Color unchanged",
    "Decided to keep the token bucket limiter for the API gateway",
    "I went to a support group yesterday and it was so powerful",
    "deploy with DATABASE_URL=postgres://app:pw@db/x and k8s",
)


def build_graph(n_entities: int, n_edges: int, seed: int) -> EntityGraph:
    """A random graph with exactly ``n_edges`` distinct edges (seeded)."""
    rng = np.random.default_rng(seed)
    g = EntityGraph()
    for i in range(n_entities):
        g.add_entity(Entity(f"entity-{i}", "concept"))
    typed = [r for r in RELATION_TYPES if r != "co_occurrence"]
    while g.n_edges < n_edges:
        batch = n_edges - g.n_edges
        src = rng.integers(0, n_entities, batch)
        dst = rng.integers(0, n_entities, batch)
        is_typed = rng.random(batch) < 0.2
        rel = rng.integers(0, len(typed), batch)
        strength = rng.integers(1, 11, batch)
        for s, d, t, r, w in zip(src, dst, is_typed, rel, strength, strict=True):
            if s != d:
                g.add_relation(int(s), int(d), typed[r] if t else "co_occurrence", float(w))
    for i in range(n_entities):
        for m in rng.integers(0, n_entities * 2, 3):
            g.link(i, int(m), "mentioned")
    return g


def percentiles(samples: list[float]) -> str:
    ms = np.asarray(samples) * 1e3
    return f"p50 {np.percentile(ms, 50):8.3f} ms   p95 {np.percentile(ms, 95):8.3f} ms"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--edges", type=int, default=100_000)
    parser.add_argument("--entities", type=int, default=20_000)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--reps", type=int, default=200)
    parser.add_argument("--export-reps", type=int, default=20)
    parser.add_argument("--texts", type=int, default=20_000)
    args = parser.parse_args()

    t0 = time.perf_counter()
    g = build_graph(args.entities, args.edges, args.seed)
    print(
        f"graph: {g.n_entities} entities, {g.n_edges} edges, "
        f"built in {time.perf_counter() - t0:.2f} s (seed {args.seed})"
    )

    rng = np.random.default_rng(args.seed + 1)
    spread, mem, sizes = [], [], []
    for _ in range(args.reps):
        seeds = [int(x) for x in rng.integers(0, g.n_entities, 3)]
        t = time.perf_counter()
        act = g.spread_activation(seeds)
        spread.append(time.perf_counter() - t)
        t = time.perf_counter()
        g.memory_activation(act)
        mem.append(time.perf_counter() - t)
        sizes.append(len(act))
    print(f"spread_activation   {percentiles(spread)}   (mean {np.mean(sizes):.0f} nodes)")
    print(f"memory_activation   {percentiles(mem)}")

    adj, ig = [], []
    for _ in range(args.export_reps):
        g.clear_cache()
        t = time.perf_counter()
        g.adjacency()
        adj.append(time.perf_counter() - t)
        t = time.perf_counter()
        g.to_igraph()
        ig.append(time.perf_counter() - t)
    print(f"adjacency()         {percentiles(adj)}")
    print(f"to_igraph()         {percentiles(ig)}")

    texts = [f"{_TEXT_PARTS[i % len(_TEXT_PARTS)]} #{i}" for i in range(args.texts)]
    extractor = EntityExtractor()
    extractor.extract("warm up")
    t = time.perf_counter()
    for text in texts:
        extractor.extract(text, client_id="acme-corp", source_agent="ops-agent")
    dt = time.perf_counter() - t
    print(f"extract             {len(texts) / dt:10.0f} texts/s")
    t = time.perf_counter()
    for text in texts:
        scrub(text)
    dt = time.perf_counter() - t
    print(f"scrub               {len(texts) / dt:10.0f} texts/s")


if __name__ == "__main__":
    main()
