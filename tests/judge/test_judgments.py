import json
import re

import pytest

from memlab.judge.judgments import (
    Judgment,
    append_judgment,
    judge,
    qrels_from_judgments,
    read_judgments,
)


def test_judgments_append_and_read_back(tmp_path):
    judge(tmp_path, "q1", "m1", 2, judge="ann", now="2026-03-06T12:00:00Z", note="exact")
    judge(tmp_path, "q1", "m2", 0, judge="ann", now="2026-03-06T12:01:00Z")
    lines = (tmp_path / "judgments.jsonl").read_text().splitlines()
    assert json.loads(lines[0]) == {
        "qid": "q1", "mem_id": "m1", "grade": 2, "source": "human", "judge": "ann",
        "ts": "2026-03-06T12:00:00.000Z", "note": "exact",
    }
    got = read_judgments(tmp_path)
    assert [(j.mem_id, j.grade, j.line) for j in got] == [("m1", 2, 1), ("m2", 0, 2)]


def test_a_complete_last_line_without_its_newline_is_kept(tmp_path):
    file = tmp_path / "judgments.jsonl"
    hand = ('{"qid":"q1","mem_id":"m1","grade":1,"source":"human","judge":"bob",'
            '"ts":"2026-03-06T11:00:00Z"}')
    file.write_text(hand)  # written by hand: the editor left no final newline
    judge(tmp_path, "q1", "m3", 2, judge="ann", now="2026-03-06T12:02:00Z")
    assert file.read_text().splitlines()[0] == hand
    assert [j.mem_id for j in read_judgments(tmp_path)] == ["m1", "m3"]


def test_judgments_are_not_appended_through_a_link_or_into_a_directory(tmp_path):
    (tmp_path / "elsewhere.jsonl").write_text("")
    (tmp_path / "judgments.jsonl").symlink_to("elsewhere.jsonl")
    with pytest.raises(ValueError, match="judgments.jsonl: is a symbolic link"):
        judge(tmp_path, "q1", "m3", 2, judge="ann", now="2026-03-06T12:02:00Z")
    assert (tmp_path / "elsewhere.jsonl").read_text() == ""
    other = tmp_path / "d"
    (other / "judgments.jsonl").mkdir(parents=True)
    with pytest.raises(ValueError, match="judgments.jsonl: is not a regular file"):
        judge(other, "q1", "m3", 2, judge="ann", now="2026-03-06T12:02:00Z")


def test_a_torn_last_line_is_ignored_then_cut_before_the_next_append(tmp_path):
    judge(tmp_path, "q1", "m1", 1, judge="ann", now="2026-03-06T12:00:00Z")
    file = tmp_path / "judgments.jsonl"
    with open(file, "ab") as fh:
        fh.write(b'{"qid":"q1","mem_id":"m2","gra')  # a crash in the middle of a write
    assert [j.mem_id for j in read_judgments(tmp_path)] == ["m1"]
    judge(tmp_path, "q1", "m3", 2, judge="ann", now="2026-03-06T12:02:00Z")
    assert [j.mem_id for j in read_judgments(tmp_path)] == ["m1", "m3"]
    assert file.read_text().count("\n") == 2


@pytest.mark.parametrize(
    ("line", "message"),
    [
        ('{"qid":"q","mem_id":"m","grade":3,"source":"human","judge":"a","ts":"2026-01-01T00:00:00Z"}',
         "judgments.jsonl:2: field 'grade'"),
        ('{"qid":"q","mem_id":"m","grade":1,"source":"llm","judge":"a","ts":"2026-01-01T00:00:00Z"}',
         "judgments.jsonl:2: field 'source'"),
        ('{"qid":"q","mem_id":"m","grade":1,"source":"human","judge":"a","ts":"yesterday"}',
         "judgments.jsonl:2: field 'ts'"),
        ('{"qid":"q","grade":1,"source":"human","judge":"a","ts":"2026-01-01T00:00:00Z"}',
         "judgments.jsonl:2: field 'mem_id'"),
        ("not json", "judgments.jsonl:2: not a JSON line"),
        ("[" * 100_000 + "]" * 100_000,
         "judgments.jsonl:2: not a JSON line: nested too deeply to read"),
        ('{"qid":' + "9" * 5000 + "}", "judgments.jsonl:2: not a JSON line: Exceeds the limit"),
    ],
    ids=["grade", "source", "ts", "mem_id", "not-json", "deep", "huge-int"],
)
def test_bad_lines_name_file_line_and_field(tmp_path, line, message):
    judge(tmp_path, "q1", "m1", 1, judge="ann", now="2026-03-06T12:00:00Z")
    with open(tmp_path / "judgments.jsonl", "a") as fh:
        fh.write(line + "\n")
    with pytest.raises(ValueError, match=message):
        read_judgments(tmp_path)


def test_qrels_keep_sources_apart_and_aggregate_judges():
    ts = "2026-03-06T12:00:00.000Z"
    js = [
        Judgment("q1", "m1", 2, "human", "ann", ts),
        Judgment("q1", "m1", 1, "human", "bob", ts),
        Judgment("q1", "m1", 1, "human", "cy", ts),
        Judgment("q1", "m2", 0, "human", "ann", ts),
        Judgment("q1", "m2", 2, "human", "bob", ts),
        Judgment("q1", "m2", 1, "human", "ann", ts),  # ann revises m2: 0 -> 1
        Judgment("q1", "m3", 1, "agent", "claude-code", ts),
    ]
    human = qrels_from_judgments(js)
    # m1: grades 2, 1, 1 -> majority 1; m2: ann 1, bob 2 -> tie, the lower grade
    assert human.rows() == [("q1", "m1", 1), ("q1", "m2", 1)]
    mean = qrels_from_judgments(js, aggregate="mean")
    assert mean.rows() == [("q1", "m1", round((2 + 1 + 1) / 3)), ("q1", "m2", 2)]  # 1.5 up
    assert qrels_from_judgments(js, source="agent").rows() == [("q1", "m3", 1)]
    assert qrels_from_judgments(js, source="all", aggregate="max").height == 3
    with pytest.raises(ValueError, match="unknown aggregation 'median'"):
        qrels_from_judgments(js, aggregate="median")
    with pytest.raises(ValueError, match="unknown qrels source"):
        qrels_from_judgments(js, source="llm")


def test_append_refuses_a_bad_judgment(tmp_path):
    with pytest.raises(ValueError, match="field 'grade'"):
        append_judgment(tmp_path, Judgment("q", "m", 5, "human", "a", "2026-01-01T00:00:00Z"))
    assert not (tmp_path / "judgments.jsonl").exists()


@pytest.mark.parametrize(("field", "value", "message"), [
    ("judge", "alice\nbob", "field 'judge': holds U+000A (a name is one line of text)"),
    ("qid", "q1\x1b[31m", "field 'qid': holds U+001B (a name is one line of text)"),
    ("judge", "al\udcffice", "field 'judge': holds U+DCFF (a name is one line of text)"),
    ("note", "caf\udce9", "field 'note': holds bytes that are not UTF-8 text"),
])
def test_names_are_one_line_and_text_is_utf8(tmp_path, field, value, message):
    args = {"qid": "q1", "judge": "alice", "note": None, field: value}
    with pytest.raises(ValueError, match=f"^judgment: {re.escape(message)}$"):
        judge(tmp_path, args["qid"], "m1", 1, judge=args["judge"], note=args["note"],
              now="2026-01-01T00:00:00Z")
    assert not (tmp_path / "judgments.jsonl").exists()
