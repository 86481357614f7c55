"""Precision and recall of the contradiction detectors on datasets/contradictions/pairs.jsonl.

    python eval/contradictions.py                        # lexical rules + recorded NLI answers
    python eval/contradictions.py --record               # first record missing NLI answers
                                                         # with the local SmolLM2 model

The NLI judgement (:class:`~memlab.memory.conflicts.GeneratorNLIDetector`) is replayed from
``eval/generations/contradictions-nli.jsonl`` (SmolLM2-135M-Instruct, greedy, 4 new tokens), so
it runs offline. Detectors reported: ``lexical``; ``nli`` (A-then-B prompt, the detector's
default); ``nli-symmetric`` (both orders must say yes) and ``lexical+nli`` (either flags), when
their answers are recorded. No constant is fitted on this set: every detector runs with its
defaults, and the combination is a fixed OR, so the numbers are not tuned on the labels.
"""

from __future__ import annotations

import argparse
from pathlib import Path

from memlab.eval.contradictions import load_pairs, score_detector
from memlab.generate import RecordedGenerator
from memlab.generate.base import GeneratorError
from memlab.memory.conflicts import GeneratorNLIDetector, LexicalDetector, Verdict

RECORDING = "eval/generations/contradictions-nli.jsonl"


class EitherDetector:
    """Flags a pair when any of its detectors does (a fixed OR, nothing fitted)."""

    def __init__(self, detectors: tuple) -> None:
        self.detectors = detectors

    def judge(self, a: str, b: str) -> Verdict:
        """The first flagging detector's verdict, else the last one's."""
        verdict = Verdict(False, "none")
        for det in self.detectors:
            verdict = det.judge(a, b)
            if verdict.contradicts:
                return verdict
        return verdict


def record(pairs: list[dict], path: str) -> None:
    """Record the SmolLM2 answers to both prompt orders of every pair (resumable)."""
    from memlab.generate import make_generator, record_generations

    det = GeneratorNLIDetector(None, symmetric=True)
    both = [det.prompts(p["a"], p["b"]) for p in pairs]
    prompts = [first for first, _ in both] + [second for _, second in both]
    record_generations(prompts, make_generator("smollm2"), path,
                       max_new_tokens=det.max_new_tokens)


def recorded(detector: GeneratorNLIDetector, pairs: list[dict]) -> list[dict]:
    """The pairs whose every answer ``detector`` needs is in its recording."""
    out = []
    for p in pairs:
        try:
            detector.judge(p["a"], p["b"])
        except GeneratorError:
            continue
        out.append(p)
    return out


def report(name: str, detector: object, pairs: list[dict]) -> None:
    """Print one detector's precision, recall and flags per kind."""
    score, rows = score_detector(detector, pairs)
    print(f"{name}: precision {score.precision:.3f} recall {score.recall:.3f} "
          f"(tp {score.tp}, fp {score.fp}, fn {score.fn}, tn {score.tn})")
    for kind in sorted({r["kind"] for r in rows}):
        sel = [r for r in rows if r["kind"] == kind]
        print(f"  {kind:<11} {sum(r['predicted'] for r in sel)}/{len(sel)} flagged")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--pairs", default="datasets/contradictions/pairs.jsonl")
    parser.add_argument("--generations", default=RECORDING)
    parser.add_argument("--record", action="store_true",
                        help="record missing answers with the local SmolLM2 model first")
    args = parser.parse_args()
    pairs = load_pairs(Path(args.pairs))
    if args.record:
        record(pairs, args.generations)
    lexical = LexicalDetector()
    print(f"{len(pairs)} pairs, {sum(p['contradicts'] for p in pairs)} contradictions")
    report("lexical", lexical, pairs)
    if not Path(args.generations).exists():
        return
    gen = RecordedGenerator(args.generations, model_id="smollm2")
    for name, det in (("nli", GeneratorNLIDetector(gen)),
                      ("nli-symmetric", GeneratorNLIDetector(gen, symmetric=True))):
        subset = recorded(det, pairs)
        if not subset:
            continue
        if len(subset) < len(pairs):
            print(f"-- {name}: answers recorded for {len(subset)} of {len(pairs)} pairs; "
                  "scores on those pairs only")
            report("lexical (same pairs)", lexical, subset)
        report(name, det, subset)
        report(f"lexical+{name}", EitherDetector((lexical, det)), subset)


if __name__ == "__main__":
    main()
