"""Time the tuning app's work: loading, the defaults, and one evaluation per parameter change.

Runs :class:`memlab.explore.tuning.TuningSession` exactly as ``notebooks/tuning.py`` does: the
shipped dataset, MiniLM behind the disk cache (``--fast``: the hashing embedder), the pipeline
picked (default ``hybrid``), the app's metrics. Each change sets one constant (the first value
that differs from the default) and times :meth:`TuningSession.evaluate`, the call the app makes
per change. Target: under 3 s per change. ``--check`` also replays every change from scratch
(a fresh replayer, no cache: what ``memlab eval`` does) and fails unless the scores are equal.
CPU time counts every thread of the process (polars' and BLAS's pools too): on a loaded machine
set ``POLARS_MAX_THREADS=1 OPENBLAS_NUM_THREADS=1`` to keep their spinning out of it.

    python bench/bench_tuning.py [--pipeline hybrid] [--fast] [--check] [--changes a__b=1,…]
"""

from __future__ import annotations

import argparse
import os
import time
from contextlib import contextmanager

from memlab.eval.experiment import score_rankings
from memlab.explore import session
from memlab.explore import tuning as tune
from memlab.pipeline import load_pipeline

TARGET_SECONDS = 3.0


@contextmanager
def timed(into: list[float]):
    """Append (wall seconds, CPU seconds of this process) of the block to ``into``."""
    w, c = time.perf_counter(), time.process_time()
    yield
    into.extend([time.perf_counter() - w, time.process_time() - c])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--pipeline", default="hybrid")
    ap.add_argument("--fast", action="store_true", help="hashing embedder")
    ap.add_argument("--changes", default="", help="comma list of stage__param=value")
    ap.add_argument("--check", action="store_true",
                    help="compare every change with a fresh replay (memlab eval's scores)")
    args = ap.parse_args()
    load: list[float] = []
    with timed(load):
        dataset, _ = session.open_dataset()
        replayer = session.make_replayer(dataset, session.notebook_embedder(args.fast))
        replayer.prepare()
        pipeline = load_pipeline(args.pipeline)
        sess = tune.TuningSession(replayer, pipeline, tune.app_metrics())
    base: list[float] = []
    with timed(base):
        sess.baseline()
    print(f"pipeline {pipeline.name}, {len(sess.queries)} queries, {len(sess.specs)} constants")
    print(f"load (dataset, embedder, embeddings): {load[0]:6.2f} s wall {load[1]:6.2f} s CPU")
    print(f"defaults evaluated (first replay):   {base[0]:6.2f} s wall {base[1]:6.2f} s CPU")
    if args.changes:
        changes = [dict([kv.split("=", 1)]) for kv in args.changes.split(",")]
    else:
        changes = []
        for spec in sess.specs:
            value = spec.default + spec.step * (10 if not spec.integer else 5)
            value = min(value, spec.high)
            changes.append({spec.name: value})
    walls: list[float] = []
    cpus: list[float] = []
    fresh = None
    if args.check:
        fresh = session.make_replayer(dataset, replayer.embedder)
        fresh.prepare()
    for change in changes:
        params = tune.changed_params(sess.specs, change)
        took: list[float] = []
        with timed(took):
            sess.evaluate(params)
        walls.append(took[0])
        cpus.append(took[1])
        reuse = "-" if sess.last_reuse_ is None else f"{sess.last_reuse_:.0%}"
        same = ""
        if fresh is not None:
            res = fresh.run(sess.configured(params))
            want = score_rankings(dataset, res, sess.metrics, exclude_tags=sess.exclude_tags,
                                  qids={q.qid for q in sess.queries})
            if not sess.evaluate(params).equals(want):
                raise SystemExit(f"change {params}: scores differ from a fresh replay")
            same = ", equal to a fresh replay"
        print(f"change {tune.describe_params(params):38s} {took[0]:6.2f} s wall "
              f"{took[1]:6.2f} s CPU, retriever and fusion outputs reused {reuse}{same}")
    if walls:
        walls.sort()
        cpus.sort()
        print(f"per change: median {walls[len(walls) // 2]:.2f} s wall "
              f"{cpus[len(cpus) // 2]:.2f} s CPU, slowest {walls[-1]:.2f} s wall "
              f"{cpus[-1]:.2f} s CPU (target < {TARGET_SECONDS:.0f} s)")
    print(f"load average {os.getloadavg()[0]:.2f}")


if __name__ == "__main__":
    main()
