"""Ablation of the ``conversational`` pipeline on LoCoMo: what each of its parts is worth.

Usage: python eval/ablations/locomo_conversational.py [LOCOMO_IMPORT] [OUT_DIR]

Each variant is the shipped pipeline with one part switched off through ``set_params`` (a
CombSUM weight of 0 removes a branch from the fusion exactly); ``previous`` is the pipeline as
shipped before MaxP, query masking and per-scope BM25 statistics. Every variant is compared with
the shipped pipeline (paired tests, Holm), overall and per question category. The import is the
one ``make locomo`` writes (``.cache/locomo``); LoCoMo replays with ``--no-expire --touch-k 0``.
"""

from __future__ import annotations

import sys
from pathlib import Path

import polars as pl

from memlab.eval.experiment import run_experiment
from memlab.eval.replay import ReplayConfig
from memlab.pipeline import Pipeline, load_pipeline

VARIANTS: dict[str, dict[str, object]] = {
    "no_maxp": {"combsum__weights": (0.7, 0.0, 0.15, 2.0)},
    "no_query_mask": {"dense__mask_entity_types": (), "maxp__mask_entity_types": ()},
    "store_bm25_statistics": {"bm25__statistics": "store"},
    "speaker_weight_0.3": {"combsum__weights": (0.35, 0.35, 0.15, 0.3)},
    "no_neighbors": {"neighbors__weight": 0.0},
    "previous": {
        "combsum__weights": (0.7, 0.0, 0.3, 0.3),
        "dense__mask_entity_types": (),
        "maxp__mask_entity_types": (),
        "bm25__statistics": "store",
        "neighbors__weight": 0.3,
    },
}


def variants() -> list[Pipeline]:
    """The shipped pipeline first, then one clone per variant."""
    shipped = load_pipeline("conversational")
    out = [shipped]
    for name, params in VARIANTS.items():
        pipe = shipped.clone().set_params(**params)
        pipe.name = name
        out.append(pipe)
    return out


def main() -> None:
    data = Path(sys.argv[1]) if len(sys.argv) > 1 else Path(".cache/locomo")
    out = Path(sys.argv[2]) if len(sys.argv) > 2 else Path(".cache/locomo-ablation")
    res = run_experiment(
        data,
        variants(),
        baseline="conversational",
        metrics=["R_all@10", "MRR"],
        replay=ReplayConfig(expire=False, touch_k=0),  # also the import's declared defaults
        out=out,
        progress=False,
    )
    overall = pl.DataFrame(
        [
            {"pipeline": name, "R_all@10": m["R_all@10"], "MRR": m["MRR"]}
            for name, m in res.metrics.items()
        ]
    )
    by_tag = (
        res.per_tag.filter(pl.col("metric") == "R_all@10")
        .filter(pl.col("tag").is_in(["multi-hop", "temporal", "open-domain", "single-hop"]))
        .pivot(on="tag", index="pipeline", values="mean")
    )
    wins = res.comparison.filter(pl.col("metric") == "R_all@10").select(
        "pipeline", "wins", "losses", "p_t_adj"
    )
    table = overall.join(by_tag, on="pipeline").join(wins, on="pipeline", how="left")
    with pl.Config(tbl_rows=20, tbl_cols=20, tbl_width_chars=200, float_precision=3):
        print(table)
    print(f"wrote {res.out}")


if __name__ == "__main__":
    main()
