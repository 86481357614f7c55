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


def test_recorded_nli_answers_replay_offline_and_decide_by_their_first_word():
    from memlab.explore.session import project_root
    from memlab.generate import RecordedGenerator, scan_records
    from memlab.memory.conflicts import DEFAULT_NLI_PROMPT, GeneratorNLIDetector

    root = project_root()
    pairs = load_pairs(root / "datasets" / "contradictions" / "pairs.jsonl")
    path = root / "eval" / "generations" / "contradictions-nli.jsonl"
    records, _ = scan_records(path)
    assert {(r["model"], r["params"]["max_new_tokens"]) for r in records} == {("smollm2", 4)}
    answers = {r["prompt"]: r["text"] for r in records}
    covered = [p for p in pairs if DEFAULT_NLI_PROMPT.format(a=p["a"], b=p["b"]) in answers]
    score, rows = score_detector(GeneratorNLIDetector(RecordedGenerator(path)), covered)
    said_yes = [
        answers[DEFAULT_NLI_PROMPT.format(a=p["a"], b=p["b"])].lower().startswith("yes")
        for p in covered
    ]
    assert [r["predicted"] for r in rows] == said_yes
    assert (len(covered), sum(p["contradicts"] for p in covered)) == (50, 25)
    # SmolLM2-135M says "yes" to every contradiction and to all but 4 of the 25 others.
    assert (score.tp, score.fp, score.fn, score.tn) == (25, 25 - 4, 0, 4)
    assert sum(said_yes) == 50 - 4


@pytest.mark.parametrize(
    ("line", "message"),
    [
        ("[" * 100_000 + "]" * 100_000, "p.jsonl:1: invalid JSON: nested too deeply to read"),
        ('["a", "b"]', "p.jsonl:1: expected a JSON object, got list"),
        ("{", "p.jsonl:1: invalid JSON: Expecting property name enclosed in double quotes"),
    ],
    ids=["deep", "array", "broken"],
)
def test_an_unreadable_line_is_named(tmp_path, line, message):
    path = tmp_path / "p.jsonl"
    path.write_text(line + "\n")
    with pytest.raises(ValueError) as info:
        load_pairs(path)
    assert str(info.value).startswith(f"{tmp_path}/{message}")


def test_unicode_line_separators_stay_inside_their_line(tmp_path):
    # U+2028, U+2029 and U+0085 raw in a string (ensure_ascii=False): str.splitlines would cut
    # the line there; line numbers of later lines are unchanged
    path = tmp_path / "p.jsonl"
    a = "the freeze\u2028ends\u2029on\x85friday"
    row = {"a": a, "b": "the freeze ends monday", "contradicts": True}
    path.write_text(
        json.dumps(row, ensure_ascii=False) + "\r\n\n" + '{"a": "x", "b": "y"}\n',
        encoding="utf-8",
    )
    with pytest.raises(ValueError, match="p.jsonl:3: field 'contradicts' must be a bool"):
        load_pairs(path)
    path.write_text(json.dumps(row, ensure_ascii=False) + "\n", encoding="utf-8")
    assert load_pairs(path) == [row]
