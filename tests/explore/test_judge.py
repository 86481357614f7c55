import json
import shutil

import polars as pl
import pytest

from memlab.explore.judge import RECORDING, JudgeSession, check_pool, pool_lines
from memlab.judge.judgments import read_judgments


def test_a_judge_works_through_the_served_queue_and_resumes(tmp_path):
    ds = tmp_path / "rec"
    shutil.copytree(RECORDING, ds)
    s = JudgeSession(ds, judge="ann")
    assert s.progress() == (0, 3 + 2 + 3 + 1 + 2 + 1)  # the served lists of r1..r6
    first = s.current()
    assert (first["qid"], first["mem_id"], first["runs"]) == ("r1", "m08", ["served"])
    view = s.query_view("r1")
    assert (view["client"], view["projects"], view["agent"]) == ("acme", "acme-web",
                                                                 "claude-code")
    hist = s.history("m08")  # m01 and m08 share the key acme-stack
    assert hist.select("mem_id", "by", "judged").rows() == [
        ("m01", "claude-code", ""), ("m08", "claude-code", "this one"),
    ]
    s.grade(2)
    s.skip()  # m01 left for later
    assert s.current()["mem_id"] == "m06"
    s.grade(0)
    # a new session (a crash, a restart) resumes after what is on disk; skips are forgotten
    again = JudgeSession(ds, judge="ann")
    assert again.progress() == (2, 12)
    assert again.current()["mem_id"] == "m01"
    assert [(j.mem_id, j.grade, j.judge) for j in read_judgments(ds)] == [
        ("m08", 2, "ann"), ("m06", 0, "ann"),
    ]
    assert JudgeSession(ds, judge="bob").current()["mem_id"] == "m08"


def test_a_query_text_holding_unicode_line_separators_opens(tmp_path):
    # JSONL is written with ensure_ascii=False: U+2028, U+2029 and U+0085 sit raw in a line,
    # and str.splitlines would cut the line there
    ds = tmp_path / "rec"
    shutil.copytree(RECORDING, ds)
    text = "deploy\u2028freeze\u2029ends\x85friday"
    queries = ds / "queries.jsonl"
    lines = queries.read_text(encoding="utf-8").split("\n")
    first = json.loads(lines[0])
    first["text"] = text
    lines[0] = json.dumps(first, ensure_ascii=False, separators=(",", ":"))
    queries.write_text("\n".join(lines), encoding="utf-8")
    assert text in queries.read_text(encoding="utf-8")  # raw, not escaped
    s = JudgeSession(ds, judge="ann")
    assert s.query_view("r1")["text"] == text
    assert s.progress() == (0, 12)


def _pool_line(qid: str, mem_id: str, position: int) -> str:
    return json.dumps({"qid": qid, "mem_id": mem_id, "position": position, "runs": ["a"],
                       "best_rank": 1})


def test_a_pool_naming_a_query_or_memory_outside_the_dataset_is_refused(tmp_path):
    ds = tmp_path / "rec"
    shutil.copytree(RECORDING, ds)
    pool = tmp_path / "pool.jsonl"
    pool.write_text(_pool_line("r1", "m01", 1) + "\n\n" + _pool_line("zz", "m01", 2) + "\n",
                    encoding="utf-8")
    with pytest.raises(ValueError) as err:
        JudgeSession(ds, pool=pool)
    assert str(err.value) == f"{pool}:3: query 'zz' is not in the dataset"
    pool.write_text(_pool_line("r1", "m99", 1) + "\n", encoding="utf-8")
    with pytest.raises(ValueError) as err:
        JudgeSession(ds, pool=pool)
    assert str(err.value) == f"{pool}:1: memory 'm99' is not in the dataset"
    pool.write_text(_pool_line("r2", "m04", 1) + "\n", encoding="utf-8")
    assert JudgeSession(ds, pool=pool).current()["mem_id"] == "m04"


def test_check_pool_without_line_numbers_names_the_source():
    queue = pl.DataFrame({"qid": ["q1", "q1"], "mem_id": ["m1", "m2"]})
    check_pool(queue, {"q1"}, {"m1", "m2"}, source="served")
    with pytest.raises(ValueError) as err:
        check_pool(queue, {"q1"}, {"m1"}, source="served lists")
    assert str(err.value) == "served lists: memory 'm2' is not in the dataset"
    with pytest.raises(ValueError) as err:
        check_pool(queue, {"q1"}, {"m1"}, source="p.jsonl", lines={("q1", "m2"): 7})
    assert str(err.value) == "p.jsonl:7: memory 'm2' is not in the dataset"


def test_pool_lines_maps_each_pair_to_its_first_line(tmp_path):
    pool = tmp_path / "pool.jsonl"
    pool.write_text("\n".join([_pool_line("q1", "m1", 1), "{bad", "",
                               _pool_line("q2", "m1", 2), _pool_line("q1", "m1", 3)]),
                    encoding="utf-8")
    assert pool_lines(pool) == {("q1", "m1"): 1, ("q2", "m1"): 4}
