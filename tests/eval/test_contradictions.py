import json

import pytest

from memlab.eval.contradictions import load_pairs, score_detector
from memlab.memory.conflicts import LexicalDetector, Verdict


class Always:
    def judge(self, a, b):
        return Verdict(True, "always")


def test_score_counts(tmp_path):
    path = tmp_path / "p.jsonl"
    rows = [
        {"a": "x is on", "b": "x is off", "contradicts": True},
        {"a": "y", "b": "z", "contradicts": False},
        {"a": "u", "b": "v", "contradicts": False},
    ]
    path.write_text("\n".join(json.dumps(r) for r in rows) + "\n")
    score, verdicts = score_detector(Always(), load_pairs(path))
    assert (score.tp, score.fp, score.fn, score.tn) == (1, 2, 0, 0)
    assert score.precision == 1 / 3 and score.recall == 1.0
    assert [v["predicted"] for v in verdicts] == [True, True, True]


def test_bad_line_is_named(tmp_path):
    path = tmp_path / "p.jsonl"
    path.write_text('{"a": "x", "b": "y", "contradicts": "yes"}\n')
    with pytest.raises(ValueError, match="p.jsonl:1: field 'contradicts' must be a bool"):
        load_pairs(path)


def test_shipped_set_is_balanced_and_the_lexical_rules_never_fire_on_compatible_pairs():
    from memlab.explore.session import project_root

    pairs = load_pairs(project_root() / "datasets" / "contradictions" / "pairs.jsonl")
    assert (len(pairs), sum(p["contradicts"] for p in pairs)) == (50, 25)
    score, rows = score_detector(LexicalDetector(), pairs)
    assert [r["id"] for r in rows if r["predicted"] and not r["label"]] == []
    assert {r["kind"] for r in rows if r["predicted"]} == {"antonym", "negation", "value"}
