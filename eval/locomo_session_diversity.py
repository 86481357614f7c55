"""Session diversification of a LoCoMo run's top 10: does spreading it over sessions help?

Usage: python eval/locomo_session_diversity.py [RUN_DIR] [--pipeline NAME] [--head N]
    [--lambdas 1.0 0.9 ...]

A multi-hop answer is spread over several sessions of a conversation, while a ranking's top 10
tends to come from one. This re-ranks the head of each question's ranking (``--head``, default
50) by Maximal Marginal Relevance (:func:`memlab.stages.mmr.mmr_select`, Carbonell & Goldstein
1998) with a binary similarity: 1 between two turns of the same session (LoCoMo's ``D<n>`` in
the turn id), 0 otherwise. With ``λ`` = 1 the ranking is unchanged; lower ``λ`` penalises a
turn whose session already has a turn above it. It prints R_all@10 over the answerable questions
and by category, for each ``λ``.

It reads what ``memlab eval`` wrote (``rankings.parquet``, ``qrels.parquet``,
``queries.parquet``); the default is ``make locomo``'s run (``.cache/locomo-run``). It is an
exploratory check over all ten conversations, nothing chosen from it is reported as held out.
"""

from __future__ import annotations

import argparse
from pathlib import Path

import numpy as np
import polars as pl

from memlab.stages.mmr import mmr_select

EXCLUDED = "adversarial"


def session_of(mem_ids: list[str]) -> np.ndarray:
    """The session of each LoCoMo turn id (``conv-26:D3:7`` → ``conv-26:D3``) as integer codes."""
    keys = [m.rsplit(":", 1)[0] for m in mem_ids]
    return np.unique(np.asarray(keys), return_inverse=True)[1]


def diversified_top(mem_ids: list[str], scores: np.ndarray, lambda_: float, k: int = 10
                    ) -> list[str]:
    """The top ``k`` of a head chosen by MMR with same-session similarity."""
    lo, hi = float(scores.min()), float(scores.max())
    relevance = (scores - lo) / (hi - lo) if hi > lo else np.ones_like(scores)
    sessions = session_of(mem_ids)
    same = (sessions[:, None] == sessions[None, :]).astype(np.float64)
    chosen, _ = mmr_select(relevance, same, lambda_, k)
    return [mem_ids[i] for i in chosen]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("run", nargs="?", default=".cache/locomo-run")
    ap.add_argument("--pipeline", default="conversational")
    ap.add_argument("--head", type=int, default=50)
    ap.add_argument("--lambdas", type=float, nargs="*",
                    default=[1.0, 0.95, 0.9, 0.85, 0.8, 0.7, 0.6])
    args = ap.parse_args()
    run = Path(args.run)
    rankings = (
        pl.read_parquet(run / "rankings.parquet")
        .filter(pl.col("pipeline") == args.pipeline, pl.col("rank") <= args.head)
        .sort("qid", "rank")
    )
    if rankings.is_empty():
        raise SystemExit(f"{run}: no rankings of pipeline {args.pipeline!r}")
    qrels = pl.read_parquet(run / "qrels.parquet").group_by("qid").agg("mem_id")
    relevant = {q: set(ms) for q, ms in qrels.iter_rows()}
    queries = pl.read_parquet(run / "queries.parquet")
    category = {
        q: next((t for t in tags if not t.startswith("cat:")), "?")
        for q, tags in zip(queries["qid"], queries["tags"], strict=True)
    }
    heads = {
        qid: (g["mem_id"].to_list(), g["score"].to_numpy())
        for (qid,), g in rankings.group_by("qid", maintain_order=True)
    }
    asked = [q for q in heads if q in relevant and category.get(q) != EXCLUDED]
    cats = sorted({category[q] for q in asked})
    print(f"{args.pipeline}, head {args.head}, {len(asked)} answerable questions")
    print("λ      all    " + "  ".join(f"{c:>11}" for c in cats))
    for lam in args.lambdas:
        hit = {q: relevant[q] <= set(diversified_top(*heads[q], lam)) for q in asked}
        by = [np.mean([hit[q] for q in asked if category[q] == c]) for c in cats]
        print(f"{lam:<5}  {np.mean(list(hit.values())):.4f} "
              + "  ".join(f"{v:>11.3f}" for v in by))


if __name__ == "__main__":
    main()
