"""Session diversification of a LoCoMo run's top 10: does spreading it over sessions help?

Usage: python eval/locomo_session_diversity.py [RUN_DIR] [--pipeline NAME] [--head N]
    [--lambdas 1.0 0.9 ...] [--similarity session|content] [--dataset DIR]

A multi-hop answer is spread over several sessions of a conversation, while a ranking's top 10
tends to come from one. This re-ranks the head of each question's ranking (``--head``, default
50) by Maximal Marginal Relevance (:func:`memlab.stages.mmr.mmr_select`, Carbonell & Goldstein
1998) with a binary similarity: 1 between two turns of the same session (LoCoMo's ``D<n>`` in
the turn id), 0 otherwise. With ``λ`` = 1 the ranking is unchanged; lower ``λ`` penalises a
turn whose session already has a turn above it. With ``--similarity content`` the similarity is
instead the cosine of the turns' all-MiniLM-L6-v2 vectors (texts read from ``--dataset``, default
``.cache/locomo``; vectors from the on-disk embedding cache): a turn that repeats one above it is
penalised, whatever its session. It prints R_all@10 over the answerable questions and by
category, for each ``λ``.

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


def diversified_top(mem_ids: list[str], scores: np.ndarray, lambda_: float, k: int = 10,
                    vectors: dict[str, np.ndarray] | None = None) -> list[str]:
    """The top ``k`` of a head chosen by MMR with same-session similarity, or with the cosine
    of the turns' ``vectors`` (unit length, by turn id) when given."""
    lo, hi = float(scores.min()), float(scores.max())
    relevance = (scores - lo) / (hi - lo) if hi > lo else np.ones_like(scores)
    if vectors is None:
        sessions = session_of(mem_ids)
        similar = (sessions[:, None] == sessions[None, :]).astype(np.float64)
    else:
        head = np.stack([vectors[m] for m in mem_ids]).astype(np.float64)
        similar = head @ head.T
    chosen, _ = mmr_select(relevance, similar, lambda_, k)
    return [mem_ids[i] for i in chosen]


def turn_vectors(dataset: Path) -> dict[str, np.ndarray]:
    """Unit all-MiniLM-L6-v2 vectors of the dataset's memory texts, by memory id."""
    from memlab.datasets.format import load_dataset
    from memlab.embed import named_embedder

    ds = load_dataset(dataset)
    stored = [op for op in ds.ops if op.op == "store"]
    vecs = np.asarray(named_embedder("minilm").embed([op.text for op in stored]), np.float64)
    vecs /= np.maximum(np.linalg.norm(vecs, axis=1, keepdims=True), 1e-12)
    return {op.id: v for op, v in zip(stored, vecs, strict=True)}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("run", nargs="?", default=".cache/locomo-run")
    ap.add_argument("--pipeline", default="conversational")
    ap.add_argument("--head", type=int, default=50)
    ap.add_argument("--lambdas", type=float, nargs="*",
                    default=[1.0, 0.95, 0.9, 0.85, 0.8, 0.7, 0.6])
    ap.add_argument("--similarity", choices=("session", "content"), default="session")
    ap.add_argument("--dataset", default=".cache/locomo")
    args = ap.parse_args()
    vectors = turn_vectors(Path(args.dataset)) if args.similarity == "content" else None
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
    print(f"{args.pipeline}, head {args.head}, {args.similarity} similarity, {len(asked)} "
          f"answerable questions")
    print("λ      all    " + "  ".join(f"{c:>11}" for c in cats))
    for lam in args.lambdas:
        hit = {q: relevant[q] <= set(diversified_top(*heads[q], lam, vectors=vectors))
               for q in asked}
        by = [np.mean([hit[q] for q in asked if category[q] == c]) for c in cats]
        print(f"{lam:<5}  {np.mean(list(hit.values())):.4f} "
              + "  ".join(f"{v:>11.3f}" for v in by))


if __name__ == "__main__":
    main()
