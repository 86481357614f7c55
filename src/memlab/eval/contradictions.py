"""Precision and recall of contradiction detectors on a labelled set of memory pairs.

The labelled set is JSON lines ``{"id", "a", "b", "contradicts": bool, "kind"}``; the shipped
one is ``datasets/contradictions/pairs.jsonl`` (written by hand: negations, antonyms, changed
values and paraphrased contradictions, against compatible, refining and unrelated pairs).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from memlab.memory.conflicts import ContradictionDetector


@dataclass(frozen=True)
class DetectionScore:
    """Counts and rates of one detector on one labelled set."""

    tp: int
    fp: int
    fn: int
    tn: int

    @property
    def precision(self) -> float:
        """``tp / (tp + fp)`` (0 when nothing was flagged)."""
        return self.tp / (self.tp + self.fp) if self.tp + self.fp else 0.0

    @property
    def recall(self) -> float:
        """``tp / (tp + fn)``."""
        return self.tp / (self.tp + self.fn) if self.tp + self.fn else 0.0


def load_pairs(path: str | Path) -> list[dict[str, Any]]:
    """Read a labelled set; ``ValueError`` names the file and line at fault (a line that is
    not UTF-8, not JSON, nested too deeply to read, not an object, or lacks a field)."""
    from memlab.datasets.importers import source_lines
    from memlab.io import decode_utf8, loads_json, read_bytes

    pairs = []
    text = decode_utf8(read_bytes(path), str(path))
    # not str.splitlines: a U+2028 or U+0085 held raw in a text stays in its line
    for n, line in enumerate(source_lines(text), start=1):
        if not line.strip():
            continue
        obj = loads_json(line, f"{path}:{n}")
        if not isinstance(obj, dict):
            raise ValueError(f"{path}:{n}: expected a JSON object, got {type(obj).__name__}")
        for key, kind in (("a", str), ("b", str), ("contradicts", bool)):
            if not isinstance(obj.get(key), kind):
                raise ValueError(f"{path}:{n}: field '{key}' must be a {kind.__name__}")
        pairs.append(obj)
    return pairs


def score_detector(
    detector: ContradictionDetector, pairs: Sequence[dict[str, Any]]
) -> tuple[DetectionScore, list[dict[str, Any]]]:
    """The detector's score and its verdict per pair (``id, kind, label, predicted, rule``)."""
    tp = fp = fn = tn = 0
    rows = []
    for p in pairs:
        verdict = detector.judge(p["a"], p["b"])
        label = bool(p["contradicts"])
        tp += label and verdict.contradicts
        fp += (not label) and verdict.contradicts
        fn += label and not verdict.contradicts
        tn += (not label) and not verdict.contradicts
        rows.append(
            {"id": p.get("id"), "kind": p.get("kind"), "label": label,
             "predicted": verdict.contradicts, "rule": verdict.rule}
        )
    return DetectionScore(tp, fp, fn, tn), rows
