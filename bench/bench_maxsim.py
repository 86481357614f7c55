"""CPU cost of the late-interaction scoring of one query (``memlab.stages.maxsim``).

The array part of the ``maxsim`` stage on synthetic unit token vectors shaped like LoCoMo:
``--head`` candidates of ``--doc-tokens`` tokens each (LoCoMo turns average 35 MiniLM word
pieces), a query of ``--query-tokens`` tokens, 384 dimensions, float16 storage gathered to
float32 as the stage does. Reports CPU milliseconds per query (``time.process_time``) and wall
milliseconds, with the BLAS thread pool as it is and pinned to one thread (``threadpoolctl``):
on a shared 2-core machine the pool's spinning threads cost several times the arithmetic.
The query's own token encoding (one MiniLM forward, as ``dense`` pays for its vector) is not
included. Prints JSON.

Usage::

    python bench/bench_maxsim.py [--head 50] [--doc-tokens 35] [--query-tokens 12]
                                 [--repeat 300] [--seed 0]
"""

from __future__ import annotations

import argparse
import json
import os
import time

import numpy as np
from threadpoolctl import threadpool_limits

from memlab.stages.maxsim import segment_maxsim


def unit(x: np.ndarray) -> np.ndarray:
    """Rows scaled to unit length."""
    return x / np.linalg.norm(x, axis=1, keepdims=True)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--head", type=int, default=50)
    ap.add_argument("--doc-tokens", type=int, default=35)
    ap.add_argument("--query-tokens", type=int, default=12)
    ap.add_argument("--rows", type=int, default=5882)
    ap.add_argument("--repeat", type=int, default=300)
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args()
    rng = np.random.default_rng(args.seed)
    tokens = unit(rng.standard_normal((args.rows * args.doc_tokens, 384))).astype(np.float16)
    starts = np.arange(args.rows) * args.doc_tokens
    lengths = np.full(args.rows, args.doc_tokens)
    query = unit(rng.standard_normal((args.query_tokens, 384))).astype(np.float32)
    heads = [rng.choice(args.rows, args.head, replace=False) for _ in range(args.repeat)]

    def one(rows: np.ndarray) -> np.ndarray:
        lens = lengths[rows]
        seg = np.concatenate([[0], np.cumsum(lens)[:-1]]).astype(np.int64)
        idx = np.repeat(starts[rows] - seg, lens) + np.arange(int(lens.sum()))
        return segment_maxsim(query, tokens[idx].astype(np.float32), seg)

    out: dict[str, object] = {"head": args.head, "doc_tokens": args.doc_tokens,
                              "query_tokens": args.query_tokens,
                              "loadavg": os.getloadavg()[0]}
    for label, limit in (("default_threads", None), ("one_thread", 1)):
        with threadpool_limits(limit):
            one(heads[0])
            cpu, wall = time.process_time(), time.perf_counter()
            for rows in heads:
                one(rows)
            out[f"{label}_cpu_ms"] = round((time.process_time() - cpu) / args.repeat * 1e3, 3)
            out[f"{label}_wall_ms"] = round((time.perf_counter() - wall) / args.repeat * 1e3, 3)
    print(json.dumps(out, indent=2))


if __name__ == "__main__":
    main()
