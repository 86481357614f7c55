"""Which conflict policy and which decay model win on datasets/agent-lifecycle, with paired tests.

    python eval/lifecycle.py [DATASET] [OUT]   # datasets/agent-lifecycle, reports/lifecycle

Part 1 replays ``dense`` under each conflict policy (the dataset's consolidation defaults in
force) and compares every policy with ``authority`` (design §D3.8) on the same queries. Part 2
runs ``dense`` followed by each decay model under the dataset's defaults, compared with plain
``dense``. Both write ``summary.md`` and the per-query tables into OUT.
"""

from __future__ import annotations

import sys
from pathlib import Path

import polars as pl

from memlab.datasets.format import load_dataset
from memlab.embed import default_embedder
from memlab.eval.experiment import run_experiment, score_rankings
from memlab.eval.metrics import aggregate
from memlab.eval.replay import ReplayConfig, Replayer
from memlab.eval.report import markdown_table
from memlab.eval.stats import compare
from memlab.io import atomic_write_text
from memlab.pipeline import Pipeline
from memlab.stages.decay_score import DecayScore
from memlab.stages.dense import Dense
from memlab.stages.importance_score import ImportanceScore
from memlab.stages.lifecycle import Lifecycle
from memlab.stages.recency_blend import RecencyBlend

POLICIES = ("authority", "supersede", "reject", "keep_both", "recency_weight", "none")
METRICS = ["R_all@10", "R_all@3", "MRR", "stale@3", "conflict@3", "archived@3", "scope_violation@3"]


def decay_pipelines() -> list[Pipeline]:
    out = [Pipeline([("dense", Dense())], name="dense")]
    for name, stage in (
        ("seed000_lifecycle", Lifecycle()),
        ("seed003_decay_score", DecayScore()),
        ("seed001_importance", ImportanceScore()),
        ("seed004_recency_blend", RecencyBlend()),
    ):
        out.append(Pipeline([("dense", Dense()), ("decay", stage)], name=name))
    return out


def main() -> None:
    data = Path(sys.argv[1]) if len(sys.argv) > 1 else Path("datasets/agent-lifecycle")
    out = Path(sys.argv[2]) if len(sys.argv) > 2 else Path("reports/lifecycle")
    ds = load_dataset(data)
    embedder = default_embedder()
    base = ReplayConfig.from_dataset(ds)
    parts = []
    rows = []
    for policy in POLICIES:
        cfg = base.with_params(conflict_policy=None if policy == "none" else policy)
        rep = Replayer(ds, embedder=embedder, config=cfg, progress=False)
        res = rep.run(Pipeline([("dense", Dense())], name="dense"))
        pq = score_rankings(ds, res, METRICS).with_columns(pipeline=pl.lit(policy))
        parts.append(pq)
        rows.append({"policy": policy, **{m: round(v, 3) for m, v in aggregate(pq).items()},
                     "resolved": len(res.conflicts), "cycles": len(res.consolidation)})
    per_query = pl.concat(parts).select("pipeline", "qid", "metric", "value")
    policy_cmp = compare(per_query, baseline="authority", metrics=["R_all@3", "stale@3",
                                                                    "conflict@3"],
                         tests=("t", "wilcoxon", "permutation"), seed=0)
    decay = run_experiment(ds, decay_pipelines(), baseline="dense", metrics=METRICS,
                           embedder=embedder, progress=False, write_report=False,
                           out=out / "decay")
    decay_rows = [{"pipeline": n, **{m: round(v, 3) for m, v in ms.items()}}
                  for n, ms in decay.metrics.items()]
    text = "\n".join([
        f"# Lifecycle on {ds.meta.get('name')}",
        "",
        f"Replay: {base.to_dict()}",
        "",
        "## Conflict policies (pipeline `dense`)",
        "",
        markdown_table(pl.DataFrame(rows)),
        "",
        "Paired tests against `authority`:",
        "",
        markdown_table(policy_cmp),
        "",
        "## Decay models (after `dense`)",
        "",
        markdown_table(pl.DataFrame(decay_rows)),
        "",
        "Paired tests against `dense`:",
        "",
        markdown_table(decay.comparison),
        "",
    ])
    out.mkdir(parents=True, exist_ok=True)
    per_query.write_parquet(out / "policies_per_query.parquet")
    atomic_write_text(out / "summary.md", text)
    print(text)


if __name__ == "__main__":
    main()
