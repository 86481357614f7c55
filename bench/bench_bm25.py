"""BM25 query latency: memlab's sparse engine beside bm25s (numba backend), same run, same tokens.

Corpus: ``N`` short synthetic documents (6-16 words drawn from a Zipf(1.3) distribution over a
seeded vocabulary of 20,000 words, plus one unique token each), tokenised once by memlab's
:class:`~memlab.index.bm25.TokenizedCorpus`; bm25s indexes the very same token lists. Queries:
3-7 words from the same distribution. For each size it prints p50/p95 wall time per query of

* ``memlab``: ``SparseBM25Engine.top(tokens, 10, rows, visible)`` (the numba kernel above
  ``jit_min_docs``: posting lists summed, visibility checked, heap cut at the 10th score) then a
  sort of the ≥ 10 survivors — what the ``bm25`` stage does before building its frame, with an
  all-true visibility mask (a mask of hidden rows only removes documents);
* ``bm25s numba``: ``bm25s.BM25(method="robertson", backend="numba").retrieve(k=10)``, one
  query per call, one thread (robertson is rank_bm25's Okapi idf without its negative-idf floor,
  and its term frequency part omits the constant ``k1 + 1``: rankings agree except where the floor
  matters);

and the ratio memlab / bm25s (goal: ≤ 1.5). Scores: memlab's kernel is checked bit for bit
against its scipy path (``get_scores``) on every timed query, and against ``rank_bm25`` (the
reference, ``rtol 1e-9``) on ``--check`` queries at sizes up to 100k (rank_bm25 holds a dict per
document; at 1M it needs several GB and minutes per query batch). The top-10 overlap with bm25s
is printed too.

Usage::

    .venv/bin/python bench/bench_bm25.py [--sizes 100000 1000000] [--queries 300]
        [--repeat 2] [--check 30] [--seed 0]
"""

from __future__ import annotations

import argparse
import os
import time

import numpy as np

from memlab.index.bm25 import RankBM25Engine, SparseBM25Engine, TokenizedCorpus

VOCAB = 20_000


def vocabulary(n: int, rng: np.random.Generator) -> list[str]:
    letters = np.array(list("abcdefghijklmnopqrstuvwxyz"))
    words: set[str] = set()
    while len(words) < n:
        words.add("".join(rng.choice(letters, rng.integers(3, 10))))
    return sorted(words)


def zipf_text(vocab: list[str], k: int, rng: np.random.Generator) -> str:
    ranks = np.minimum(rng.zipf(1.3, k), len(vocab)) - 1
    return " ".join(vocab[r] for r in ranks)


def top10(docs: np.ndarray, scores: np.ndarray, k: int = 10) -> np.ndarray:
    if len(docs) > k:
        part = np.argpartition(-scores, k - 1)[:k]
        docs, scores = docs[part], scores[part]
    return docs[np.lexsort((docs, -scores))]


def load() -> str:
    return ", ".join(f"{x:.2f}" for x in os.getloadavg())


def percentiles(ms: np.ndarray) -> str:
    return f"p50 {np.percentile(ms, 50):7.3f} ms  p95 {np.percentile(ms, 95):7.3f} ms"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sizes", type=int, nargs="+", default=[100_000, 1_000_000])
    parser.add_argument("--queries", type=int, default=300)
    parser.add_argument("--repeat", type=int, default=2)
    parser.add_argument("--check", type=int, default=30)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()

    import bm25s

    print(f"{os.cpu_count()} CPUs, load average {load()}")
    rng = np.random.default_rng(args.seed)
    vocab = vocabulary(VOCAB, rng)
    for n in args.sizes:
        rng = np.random.default_rng(args.seed + n)
        texts = [zipf_text(vocab, int(rng.integers(6, 17)), rng) + f" u{i}" for i in range(n)]
        queries = [zipf_text(vocab, int(rng.integers(3, 8)), rng) for _ in range(args.queries)]
        corpus = TokenizedCorpus()
        start = time.perf_counter()
        corpus.extend(texts)
        engine = SparseBM25Engine().fit(corpus)
        fit_memlab = time.perf_counter() - start
        qtokens = [corpus.tokenize(q) for q in queries]
        rows = np.arange(n, dtype=np.int64)
        visible = np.ones(n, dtype=bool)

        start = time.perf_counter()
        retriever = bm25s.BM25(method="robertson", backend="numba")
        retriever.index(corpus.tokens_, show_progress=False)
        fit_bm25s = time.perf_counter() - start
        print(
            f"\n{n:,} documents ({corpus.n_tokens_:,} tokens, {len(corpus.vocab_):,} terms); "
            f"fit memlab {fit_memlab:.1f} s (tokenising included), bm25s {fit_bm25s:.1f} s"
        )

        # scores: kernel bit for bit against the scipy path; rank_bm25 up to 100k
        overlap = []
        for tokens in qtokens:
            docs, scores = engine.top(tokens, None, rows, visible)
            full = engine.get_scores(tokens)
            expected = np.flatnonzero(full > 0)
            order = np.argsort(docs)
            if docs[order].tolist() != expected.tolist() or (
                scores[order].tolist() != full[expected].tolist()
            ):
                raise SystemExit(f"kernel scores differ from get_scores on {tokens}")
            mine = top10(*engine.top(tokens, 10, rows, visible))
            theirs = retriever.retrieve(
                [tokens], k=10, show_progress=False, n_threads=1
            ).documents[0]
            overlap.append(len(set(mine.tolist()) & set(np.asarray(theirs).tolist())) / 10)
        print(f"  kernel == get_scores bit for bit on {len(qtokens)} queries")
        print(f"  top-10 overlap with bm25s (robertson, no idf floor): {np.mean(overlap):.3f}")
        if n <= 100_000 and args.check:
            ref = RankBM25Engine().fit(corpus)
            for tokens in qtokens[: args.check]:
                a, b = engine.get_scores(tokens), ref.get_scores(tokens)
                if not np.allclose(a, b, rtol=1e-9, atol=1e-9):
                    raise SystemExit(f"scores differ from rank_bm25 on {tokens}")
            print(f"  scores == rank_bm25 (rtol 1e-9) on {args.check} queries")
            del ref

        def run_memlab(tokens: list[str], engine=engine, rows=rows, visible=visible) -> object:
            return top10(*engine.top(tokens, 10, rows, visible))

        def run_bm25s(tokens: list[str], retriever=retriever) -> object:
            return retriever.retrieve([tokens], k=10, show_progress=False, n_threads=1)

        for rep in range(args.repeat):
            times = {}
            for name, fn in (("memlab", run_memlab), ("bm25s numba", run_bm25s)):
                fn(qtokens[0])
                ms = np.empty(len(qtokens))
                for i, tokens in enumerate(qtokens):
                    t = time.perf_counter()
                    fn(tokens)
                    ms[i] = (time.perf_counter() - t) * 1e3
                times[name] = ms
            print(f"  run {rep + 1} (load {load()})")
            for name, ms in times.items():
                print(f"    {name:<12} {percentiles(ms)}")
            ratio = np.percentile(times["memlab"], 50) / np.percentile(times["bm25s numba"], 50)
            print(f"    memlab / bm25s p50: {ratio:.2f} (goal <= 1.5)")
        del run_memlab, run_bm25s, engine, retriever, corpus, texts


if __name__ == "__main__":
    main()
