"""Precision and recall of the contradiction detectors on datasets/contradictions/pairs.jsonl.

    python eval/contradictions.py                      # the lexical rule set
    python eval/contradictions.py --generator smollm2  # also the NLI judgement (local model)
"""

from __future__ import annotations

import argparse
from pathlib import Path

from memlab.eval.contradictions import load_pairs, score_detector
from memlab.memory.conflicts import GeneratorNLIDetector, LexicalDetector


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--pairs", default="datasets/contradictions/pairs.jsonl")
    parser.add_argument("--generator", default=None)
    args = parser.parse_args()
    pairs = load_pairs(Path(args.pairs))
    detectors = {"lexical": LexicalDetector()}
    if args.generator:
        from memlab.generate import make_generator

        detectors["nli"] = GeneratorNLIDetector(make_generator(args.generator))
    print(f"{len(pairs)} pairs, {sum(p['contradicts'] for p in pairs)} contradictions")
    for name, det in detectors.items():
        score, rows = score_detector(det, pairs)
        print(f"{name}: precision {score.precision:.3f} recall {score.recall:.3f} "
              f"(tp {score.tp}, fp {score.fp}, fn {score.fn}, tn {score.tn})")
        kinds = sorted({r["kind"] for r in rows})
        for kind in kinds:
            sel = [r for r in rows if r["kind"] == kind]
            hit = sum(r["predicted"] for r in sel)
            print(f"  {kind:<11} {hit}/{len(sel)} flagged")


if __name__ == "__main__":
    main()
