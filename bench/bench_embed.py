"""Embedding throughput with a cold and a warm on-disk cache.

Usage::

    python bench/bench_embed.py 5000                    # all-MiniLM-L6-v2
    python bench/bench_embed.py 20000 --embedder hashing --dim 384   # cache overhead only

Prints the model load time, then texts/s for a cold cache (every text embedded and written)
and a warm cache (a fresh ``CachedEmbedder`` reading every vector back from disk).
"""

from __future__ import annotations

import argparse
import random
import tempfile
import time
from pathlib import Path

from memlab.embed import CachedEmbedder, make_embedder

_WORDS = (
    "user prefers green tea meeting moved friday project deadline budget approved release "
    "server outage fixed customer asked refund invoice sent travel booked berlin flight hotel "
    "doctor appointment tuesday gym running knee injury recipe pasta garden tomatoes birthday "
    "party sister concert tickets laptop battery replaced contract signed team hired designer"
).split()


def make_texts(n: int, seed: int = 0) -> list[str]:
    """Return ``n`` distinct synthetic memory-like sentences (deterministic for ``seed``)."""
    rng = random.Random(seed)
    return [f"{' '.join(rng.choices(_WORDS, k=rng.randint(6, 18)))} #{i}" for i in range(n)]


def _rate(n: int, seconds: float) -> str:
    return f"{n} texts in {seconds:.2f} s = {n / seconds:,.0f} texts/s"


def run(n: int, embedder_name: str, dim: int, batch_size: int, cache_dir: Path) -> None:
    """Run the benchmark and print the results."""
    params = {"dim": dim} if embedder_name == "hashing" else {"batch_size": batch_size}
    embedder = make_embedder(embedder_name, **params)
    texts = make_texts(n)

    start = time.perf_counter()
    embedder.embed(["warm-up"])
    print(f"model       {embedder.model_id}: load + first call {time.perf_counter() - start:.2f} s")

    cold = CachedEmbedder(embedder, cache_dir)
    start = time.perf_counter()
    cold.embed(texts)
    seconds = time.perf_counter() - start
    print(f"cold cache  {_rate(n, seconds)} (misses={cold.misses_}, hits={cold.hits_})")

    warm = CachedEmbedder(embedder, cache_dir)
    start = time.perf_counter()
    warm.embed(texts)
    seconds = time.perf_counter() - start
    print(f"warm cache  {_rate(n, seconds)} (misses={warm.misses_}, hits={warm.hits_})")
    size = sum(p.stat().st_size for p in cold.db_path.parent.glob("*"))
    print(f"on disk     {size / 1e6:.1f} MB in {cold.db_path.parent}")


def main() -> None:
    """Parse arguments and run."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("n", type=int, nargs="?", default=2000, help="number of texts")
    parser.add_argument("--embedder", default="minilm", help="registered embedder name")
    parser.add_argument("--dim", type=int, default=384, help="dimension for 'hashing'")
    parser.add_argument("--batch-size", type=int, default=64, help="batch size for 'minilm'")
    parser.add_argument("--cache-dir", type=Path, default=None, help="default: a temp dir")
    args = parser.parse_args()
    if args.cache_dir is not None:
        run(args.n, args.embedder, args.dim, args.batch_size, args.cache_dir)
        return
    with tempfile.TemporaryDirectory(prefix="memlab-bench-") as tmp:
        run(args.n, args.embedder, args.dim, args.batch_size, Path(tmp))


if __name__ == "__main__":
    main()
