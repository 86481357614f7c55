"""LoCoMo at full size: cold embedding time and a warm-cache evaluation of ``hybrid``.

Usage: python bench/bench_locomo.py [LOCOMO_DIR] [PIPELINE]

Imports LoCoMo (read by path, into a temporary directory), embeds its 5,882 turns and 1,986
questions with all-MiniLM-L6-v2 into an empty cache (cold), then runs the full evaluation of
the pipeline twice: the first run also embeds whatever else the pipeline's stages ask for
(MaxP's sentences), the second finds everything in the cache (warm). Targets on 2 cores: cold
embedding < 3 min, warm evaluation of ``hybrid`` < 60 s.
"""

from __future__ import annotations

import sys
import tempfile
import time
from pathlib import Path

from memlab.datasets.importers import run_importer
from memlab.embed import CachedEmbedder, MiniLMEmbedder
from memlab.eval.experiment import run_experiment
from memlab.eval.replay import Replayer


def main() -> None:
    src = Path(sys.argv[1]) if len(sys.argv) > 1 else Path("../shared/datasets/locomo10")
    pipeline = sys.argv[2] if len(sys.argv) > 2 else "hybrid"
    with tempfile.TemporaryDirectory() as tmp:
        data = Path(tmp) / "locomo"
        run_importer("locomo", src, data)
        from memlab.datasets.format import load_dataset

        ds = load_dataset(data)
        embedder = CachedEmbedder(MiniLMEmbedder(), Path(tmp) / "cache")
        start = time.perf_counter()
        Replayer(ds, embedder=embedder, progress=False).prepare()
        cold = time.perf_counter() - start
        n_mem, n_q = len(ds.ops), len(ds.queries)
        print(f"cold embedding: {cold:.1f} s for {n_mem} memories + {n_q} queries")
        for label in ("first", "warm"):
            start = time.perf_counter()
            res = run_experiment(
                ds, [pipeline], embedder=embedder, progress=False, write_report=False,
            )  # the import's dataset.toml declares expire = false, touch_k = 0
            print(f"{label} evaluation of {pipeline}: {time.perf_counter() - start:.1f} s wall")
        print(res.metrics[pipeline])


if __name__ == "__main__":
    main()
