"""One consolidation cycle over a persisted store of N memories (hashing embedder, no model).

Usage: python bench/bench_consolidate.py [N ...]   (default: 10000 40000)

Each store is written in batches of 50 (as the live server's group commit does), then one
:class:`~memlab.memory.consolidate.Consolidator` cycle runs over every memory: reclassification
and a rewritten row with its version for each memory, Hebbian upkeep, event expiry, all in one
transaction. Prints write CPU per memory and the cycle's wall and CPU seconds. The cycle's
cost should grow about linearly in N.
"""

from __future__ import annotations

import random
import sys
import tempfile
import time
from pathlib import Path

from memlab.embed.hashing import HashingEmbedder
from memlab.memory.consolidate import Consolidator
from memlab.memory.store import MemoryStore

WORDS = (
    "alpha beta gamma delta deploy server redis cache postgres api key user login build test "
    "release bug fix docs team sprint Alice Bob Redis Kubernetes"
).split()
T0 = 1.7e9


def run(n: int, root: Path) -> None:
    rng = random.Random(0)
    store = MemoryStore(root / f"store-{n}", embedder=HashingEmbedder())
    cpu = time.process_time()
    for lo in range(0, n, 50):
        with store.batch():
            for i in range(lo, min(lo + 50, n)):
                text = " ".join(rng.choice(WORDS) for _ in range(12)) + f" item {i}"
                fact = i % 3 == 0
                store.store(text, "fact" if fact else "event", key=f"k{i % 500}" if fact else None,
                            client_id=f"c{i % 20}", now=T0 + 60 * i)
    write = (time.process_time() - cpu) / n * 1e3
    wall, cpu = time.perf_counter(), time.process_time()
    report = Consolidator().run(store, now=T0 + 400 * 86_400)
    wall, cpu = time.perf_counter() - wall, time.process_time() - cpu
    store.close()
    print(f"{n:,} memories: write {write:.2f} ms CPU per memory; one consolidation cycle "
          f"({report.processed:,} processed, {len(report.expired):,} expired) {wall:.1f} s wall, "
          f"{cpu:.1f} s CPU", flush=True)


def main() -> None:
    sizes = [int(a) for a in sys.argv[1:]] or [10_000, 40_000]
    with tempfile.TemporaryDirectory() as tmp:
        for n in sizes:
            run(n, Path(tmp))


if __name__ == "__main__":
    main()
