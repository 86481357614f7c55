"""Write-path throughput: memories per second, in memory and persisted (embeddings given).

Usage: python bench/bench_write.py [N]

Targets on a 2-core machine: ≥ 5,000/s in memory, ≥ 1,000/s persisted (batches of 500).
"""

from __future__ import annotations

import random
import sys
import tempfile
import time

import numpy as np

from memlab.memory.store import MemoryStore

WORDS = (
    "deploy billing api PostgreSQL Redis Kubernetes invoice customer outage latency cache "
    "release migration schema dashboard alert token budget review contract renewal Stripe "
    "Next.js onboarding sprint ticket incident rollback feature flag metrics"
).split()
TYPES = ("event", "fact", "decision", "status")


def make_ops(n: int, seed: int = 0) -> list[dict]:
    rng = random.Random(seed)
    vecs = np.random.default_rng(seed).standard_normal((n, 384)).astype(np.float32)
    ops = []
    for i in range(n):
        t = TYPES[i % 4]
        ops.append(
            {
                "text": f"{' '.join(rng.choices(WORDS, k=12))} #{i}",
                "type": t,
                "source_agent": rng.choice(["claude-code", "ops-agent", "support-bot"]),
                "client_id": rng.choice(["acme", "globex", "initech", "global"]),
                "key": f"k{rng.randrange(n // 10 + 1)}" if t == "fact" else None,
                "subject": f"s{rng.randrange(n // 10 + 1)}" if t == "status" else None,
                "now": 1_767_225_600.0 + i,
                "embedding": vecs[i],
            }
        )
    return ops


def run(store: MemoryStore, ops: list[dict], batch: int) -> float:
    start = time.perf_counter()
    for s in range(0, len(ops), batch):
        with store.batch():
            for op in ops[s : s + batch]:
                op = dict(op)
                store.store(op.pop("text"), op.pop("type"), **op)
    return len(ops) / (time.perf_counter() - start)


def main() -> None:
    n = int(sys.argv[1]) if len(sys.argv) > 1 else 20_000
    ops = make_ops(n)
    rate_mem = run(MemoryStore(), ops, batch=500)
    print(f"in memory : {rate_mem:,.0f} memories/s ({n} writes, batches of 500)")
    with tempfile.TemporaryDirectory() as tmp:
        store = MemoryStore(tmp)
        rate_disk = run(store, ops, batch=500)
        store.close()
    print(f"persisted : {rate_disk:,.0f} memories/s (SQLite WAL + chromadb, batches of 500)")


if __name__ == "__main__":
    main()
