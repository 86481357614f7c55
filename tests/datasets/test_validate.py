"""validate_dataset: one bad input per problem class, with the exact Problem expected."""

from __future__ import annotations

import io
import json
from pathlib import Path
from typing import Any

import pytest

from memlab.datasets.format import MemoryOp, load_dataset
from memlab.datasets.validate import Problem, main_validate, read_dataset, validate_dataset

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures"

META = (
    'name = "tiny"\n'
    'version = "1"\n'
    'description = "validator test"\n'
    'license = "Apache-2.0"\n'
    'source = "tests"\n'
)


def base_memories() -> list[Any]:
    return [
        {
            "id": "m1",
            "ts": "2025-01-01T00:00:00Z",
            "type": "fact",
            "text": "Alpha uses Redis.",
            "key": "alpha-cache",
        },
        {"id": "m2", "ts": "2025-01-02T00:00:00Z", "type": "event", "text": "Beta deployed."},
        {"id": "m3", "ts": "2025-01-02T12:00:00Z", "type": "event", "text": "Gamma noted."},
        {"ts": "2025-01-03T00:00:00Z", "op": "forget", "target": "m2", "reason": "wrong"},
        {
            "ts": "2025-01-04T00:00:00Z",
            "op": "relate",
            "from": "Alpha",
            "relation": "uses",
            "to": "Redis",
        },
    ]


def base_queries() -> list[Any]:
    return [
        {
            "qid": "q1",
            "ts": "2025-01-05T00:00:00Z",
            "text": "What cache does Alpha use?",
            "relevant": {"m1": 2},
            "stale": ["m2"],
            "tags": ["supersession"],
        },
        {
            "qid": "q2",
            "ts": "2025-01-06T00:00:00Z",
            "text": "Anything else?",
            "relevant": {},
            "tags": ["no-evidence"],
        },
    ]


def _encode(lines: list[Any]) -> bytes:
    out = b""
    for line in lines:
        if isinstance(line, bytes):
            out += line + b"\n"
        elif isinstance(line, str):
            out += line.encode("utf-8") + b"\n"
        else:
            out += json.dumps(line).encode("utf-8") + b"\n"
    return out


def make(
    tmp_path: Path,
    *,
    memories: list[Any] | None = None,
    queries: list[Any] | None = None,
    meta: str | bytes | None = META,
) -> Path:
    root = tmp_path / "ds"
    root.mkdir()
    if meta is not None:
        (root / "dataset.toml").write_bytes(meta.encode() if isinstance(meta, str) else meta)
    mem = base_memories() if memories is None else memories
    qry = base_queries() if queries is None else queries
    (root / "memories.jsonl").write_bytes(_encode(mem))
    (root / "queries.jsonl").write_bytes(_encode(qry))
    return root


def with_memory(index: int, **changes: Any) -> list[Any]:
    lines = base_memories()
    lines[index] = {**lines[index], **changes}
    return lines


def with_query(index: int, **changes: Any) -> list[Any]:
    lines = base_queries()
    lines[index] = {**lines[index], **changes}
    return lines


M = "memories.jsonl"
Q = "queries.jsonl"


def test_base_dataset_is_valid(tmp_path: Path) -> None:
    assert validate_dataset(make(tmp_path)) == []


def test_handmade_fixture_is_valid() -> None:
    assert validate_dataset(FIXTURES / "handmade") == []


def test_problem_str() -> None:
    assert str(Problem(M, 12, "ts", "bad")) == "memories.jsonl:12: field 'ts': bad"
    assert str(Problem(M, 12, None, "bad")) == "memories.jsonl:12: bad"
    assert str(Problem(M, None, "ts", "bad")) == "memories.jsonl: field 'ts': bad"
    assert str(Problem(M, None, None, "missing file")) == "memories.jsonl: missing file"


@pytest.mark.parametrize("name", ["dataset.toml", "memories.jsonl", "queries.jsonl"])
def test_missing_file(tmp_path: Path, name: str) -> None:
    root = make(tmp_path)
    (root / name).unlink()
    assert validate_dataset(root) == [Problem(name, None, None, "missing file")]


def test_not_a_directory(tmp_path: Path) -> None:
    path = tmp_path / "file.txt"
    path.write_text("x")
    assert validate_dataset(path) == [Problem(str(path), None, None, "not a directory")]


def test_unparsable_toml(tmp_path: Path) -> None:
    root = make(tmp_path, meta='name = "x"\nversion = \n')
    [problem] = validate_dataset(root)
    assert (problem.file, problem.line, problem.field) == ("dataset.toml", 2, None)
    assert problem.message.startswith("invalid TOML: ")


def test_toml_not_utf8(tmp_path: Path) -> None:
    root = make(tmp_path, meta=META.encode() + b'extra = "caf\xe9"\n')
    assert validate_dataset(root) == [
        Problem("dataset.toml", 6, None, "not valid UTF-8 (byte 0xe9)")
    ]


def test_toml_missing_and_mistyped_keys(tmp_path: Path) -> None:
    meta = 'name = "x"\nversion = 1\ndescription = ""\nsource = "s"\n'
    root = make(tmp_path, meta=meta)
    assert validate_dataset(root) == [
        Problem("dataset.toml", 2, "version", "must be a string, got integer"),
        Problem("dataset.toml", 3, "description", "must not be empty"),
        Problem("dataset.toml", None, "license", "missing"),
    ]


def test_invalid_json_line(tmp_path: Path) -> None:
    lines = base_memories()
    lines[2] = '{"id": "m3", '
    root = make(tmp_path, memories=lines)
    [problem] = validate_dataset(root)
    assert (problem.file, problem.line, problem.field) == (M, 3, None)
    assert problem.message.startswith("invalid JSON: ")


def test_non_object_line(tmp_path: Path) -> None:
    lines = base_memories()
    lines[2] = "[1, 2]"
    root = make(tmp_path, memories=lines)
    assert validate_dataset(root) == [Problem(M, 3, None, "expected a JSON object, got array")]


def test_non_utf8_line(tmp_path: Path) -> None:
    lines = base_memories()
    raw = b'{"id":"m3","ts":"2025-01-02T12:00:00Z","type":"event","text":"caf\xe9"}'
    lines[2] = raw
    root = make(tmp_path, memories=lines)
    column = raw.index(b"\xe9") + 1
    assert validate_dataset(root) == [
        Problem(M, 3, None, f"not valid UTF-8 (byte 0xe9 at column {column})")
    ]


def test_duplicate_key_in_object(tmp_path: Path) -> None:
    lines = base_memories()
    lines[2] = (
        '{"id":"m3","id":"m3","ts":"2025-01-02T12:00:00Z","type":"event","text":"Gamma noted."}'
    )
    root = make(tmp_path, memories=lines)
    assert validate_dataset(root) == [Problem(M, 3, "id", "duplicate key in object")]


@pytest.mark.parametrize(
    ("field", "expected"),
    [
        ("type", "missing"),
        ("text", "missing"),
        ("ts", "missing"),
        ("id", "missing"),
    ],
)
def test_missing_store_field(tmp_path: Path, field: str, expected: str) -> None:
    lines = base_memories()
    del lines[2][field]
    root = make(tmp_path, memories=lines)
    assert validate_dataset(root) == [Problem(M, 3, field, expected)]


@pytest.mark.parametrize(
    ("changes", "field", "message"),
    [
        ({"text": 5}, "text", "must be a string, got integer"),
        ({"ts": 17}, "ts", "must be an ISO 8601 string, got integer"),
        ({"metadata": []}, "metadata", "must be an object, got array"),
        ({"source_agent": True}, "source_agent", "must be a string, got boolean"),
        ({"valid_from": "soon"}, "valid_from", "not an ISO 8601 timestamp: 'soon'"),
        ({"text": "   "}, "text", "must not be empty"),
        ({"colour": "red"}, "colour", "unknown field for a store line"),
        (
            {"type": "note"},
            "type",
            "unknown memory type 'note'; expected one of event, fact, decision, status",
        ),
        (
            {"importance": "urgent"},
            "importance",
            "unknown importance 'urgent'; expected one of critical, high, medium, low",
        ),
        (
            {"category": "misc"},
            "category",
            "unknown category 'misc'; expected one of semantic, episodic, procedural",
        ),
        (
            {"knowledge_category": "gossip"},
            "knowledge_category",
            "unknown knowledge category 'gossip'; expected one of brand, strategy, meeting, "
            "content, technical, relationship, general",
        ),
        (
            {"op": "delete"},
            "op",
            "unknown op 'delete'; expected one of store, forget, relate, correct, promote, "
            "consolidate",
        ),
        ({"ts": "yesterday"}, "ts", "not an ISO 8601 timestamp: 'yesterday'"),
        ({"id": "m1"}, "id", "duplicate id 'm1' (first on line 1)"),
        (
            {"ts": "2024-12-31T00:00:00Z"},
            "ts",
            "goes backwards: 2024-12-31T00:00:00.000Z is before 2025-01-02T00:00:00.000Z on line 2",
        ),
    ],
)
def test_store_line_problem(
    tmp_path: Path, changes: dict[str, Any], field: str, message: str
) -> None:
    root = make(tmp_path, memories=with_memory(2, **changes))
    assert validate_dataset(root) == [Problem(M, 3, field, message)]


@pytest.mark.parametrize(
    ("changes", "field", "message"),
    [
        (
            {"relation": "likes"},
            "relation",
            "unknown relation 'likes'; expected one of contact_of, same_owner, uses, works_on, "
            "competitor_of",
        ),
        (
            {"relation": "co_occurrence"},
            "relation",
            "co_occurrence is derived from memories, not written; expected one of contact_of, "
            "same_owner, uses, works_on, competitor_of",
        ),
        ({"to": ""}, "to", "must not be empty"),
        ({"text": "x"}, "text", "unknown field for a relate line"),
        (
            {"scope": "everyone"},
            "scope",
            "'everyone' is not a scope; expected 'team', 'agent:NAME' or 'project:NAME'",
        ),
    ],
)
def test_relate_line_problem(
    tmp_path: Path, changes: dict[str, Any], field: str, message: str
) -> None:
    root = make(tmp_path, memories=with_memory(4, **changes))
    assert validate_dataset(root) == [Problem(M, 5, field, message)]


def test_relate_line_scope_is_read_and_written_back(tmp_path: Path) -> None:
    root = make(tmp_path, memories=with_memory(4, scope="agent:atlas"))
    assert validate_dataset(root) == []
    [op] = [op for op in load_dataset(root).ops if op.op == "relate"]
    assert op.fields == {"scope": "agent:atlas"}
    assert op.to_json()["scope"] == "agent:atlas"
    assert "scope" not in MemoryOp.relate(0, "a", "uses", "b").to_json()
    assert MemoryOp.relate(0, "a", "uses", "b", scope="team").to_json()["scope"] == "team"


def test_relate_missing_from(tmp_path: Path) -> None:
    lines = base_memories()
    del lines[4]["from"]
    root = make(tmp_path, memories=lines)
    assert validate_dataset(root) == [Problem(M, 5, "from", "missing")]


def test_forget_unknown_target(tmp_path: Path) -> None:
    queries = with_query(0, stale=[])
    root = make(tmp_path, memories=with_memory(3, target="m9"), queries=queries)
    assert validate_dataset(root) == [Problem(M, 4, "target", "unknown id 'm9'")]


def test_forget_target_written_later(tmp_path: Path) -> None:
    lines = with_memory(3, target="m4")
    lines.append({"id": "m4", "ts": "2025-01-04T06:00:00Z", "type": "event", "text": "Late."})
    root = make(tmp_path, memories=lines)
    assert validate_dataset(root) == [Problem(M, 4, "target", "id 'm4' is written later (line 6)")]


def test_forget_target_not_a_store(tmp_path: Path) -> None:
    lines = base_memories()
    lines[4]["id"] = "r1"
    lines.append({"ts": "2025-01-04T01:00:00Z", "op": "forget", "target": "r1"})
    root = make(tmp_path, memories=lines)
    assert validate_dataset(root) == [Problem(M, 6, "target", "id 'r1' (line 5) is not a store")]


def test_forget_target_is_a_decision(tmp_path: Path) -> None:
    lines = with_memory(2, type="decision")
    lines.append({"ts": "2025-01-04T01:00:00Z", "op": "forget", "target": "m3"})
    root = make(tmp_path, memories=lines)
    assert validate_dataset(root) == [
        Problem(M, 6, "target", "id 'm3' (line 3) is a decision: decisions are immutable")
    ]


def test_forget_missing_target(tmp_path: Path) -> None:
    lines = base_memories()
    del lines[3]["target"]
    root = make(tmp_path, memories=lines)
    assert validate_dataset(root) == [Problem(M, 4, "target", "missing")]


def test_query_relevant_unknown(tmp_path: Path) -> None:
    root = make(tmp_path, queries=with_query(0, relevant={"m9": 1}))
    assert validate_dataset(root) == [
        Problem(Q, 1, "relevant", "id 'm9' does not exist in memories.jsonl")
    ]


def test_query_stale_unknown(tmp_path: Path) -> None:
    root = make(tmp_path, queries=with_query(0, stale=["m9"]))
    assert validate_dataset(root) == [
        Problem(Q, 1, "stale", "id 'm9' does not exist in memories.jsonl")
    ]


def test_query_references_written_after_ts(tmp_path: Path) -> None:
    lines = base_memories()
    lines.append({"id": "m4", "ts": "2025-02-01T00:00:00Z", "type": "event", "text": "Later."})
    root = make(tmp_path, memories=lines, queries=with_query(0, relevant={"m4": 1}, stale=["m4"]))
    late = "id 'm4' is written at 2025-02-01T00:00:00.000Z (line 6), after the query's ts "
    late += "2025-01-05T00:00:00.000Z"
    assert validate_dataset(root) == [
        Problem(Q, 1, "relevant", late),
        Problem(Q, 1, "stale", late),
        Problem(Q, 1, "stale", "id 'm4' is also relevant"),
    ]


def test_query_reference_to_relate_line(tmp_path: Path) -> None:
    lines = base_memories()
    lines[4]["id"] = "r1"
    root = make(tmp_path, memories=lines, queries=with_query(0, relevant={"r1": 1}))
    assert validate_dataset(root) == [Problem(Q, 1, "relevant", "id 'r1' (line 5) is not a store")]


def test_query_relevant_forgotten_before(tmp_path: Path) -> None:
    root = make(tmp_path, queries=with_query(0, relevant={"m2": 1}, stale=[]))
    assert validate_dataset(root) == [
        Problem(Q, 1, "relevant", "id 'm2' is forgotten (line 4) before the query")
    ]


@pytest.mark.parametrize("grade", [0, -1, 1.5, True, "1"])
def test_query_bad_grade(tmp_path: Path, grade: Any) -> None:
    root = make(tmp_path, queries=with_query(0, relevant={"m1": grade}))
    assert validate_dataset(root) == [
        Problem(Q, 1, "relevant", f"grade of 'm1' must be an integer >= 1, got {grade!r}")
    ]


@pytest.mark.parametrize(
    ("changes", "field", "message"),
    [
        ({"qid": 7}, "qid", "must be a string, got integer"),
        ({"text": ""}, "text", "must not be empty"),
        ({"relevant": ["m1"]}, "relevant", "must be an object, got array"),
        ({"stale": "m2"}, "stale", "must be an array of strings"),
        ({"tags": "supersession"}, "tags", "must be an array of non-empty strings"),
        ({"client_id": 3}, "client_id", "must be a string, got integer"),
        ({"answer": 42}, "answer", "must be a string, got integer"),
        ({"at_time": "then"}, "at_time", "not an ISO 8601 timestamp: 'then'"),
        (
            {"at_time": "2025-01-07T00:00:00Z"},
            "at_time",
            "2025-01-07T00:00:00.000Z is after the query's ts 2025-01-05T00:00:00.000Z",
        ),
        ({"extra": 1}, "extra", "unknown field for a query"),
    ],
)
def test_query_line_problem(
    tmp_path: Path, changes: dict[str, Any], field: str, message: str
) -> None:
    root = make(tmp_path, queries=with_query(0, **changes))
    assert validate_dataset(root) == [Problem(Q, 1, field, message)]


@pytest.mark.parametrize("field", ["qid", "ts", "text", "relevant", "tags"])
def test_query_missing_field(tmp_path: Path, field: str) -> None:
    queries = base_queries()
    del queries[1][field]
    root = make(tmp_path, queries=queries)
    assert validate_dataset(root) == [Problem(Q, 2, field, "missing")]


def test_duplicate_qid(tmp_path: Path) -> None:
    root = make(tmp_path, queries=with_query(1, qid="q1"))
    assert validate_dataset(root) == [Problem(Q, 2, "qid", "duplicate qid 'q1' (first on line 1)")]


def test_query_ts_backwards(tmp_path: Path) -> None:
    root = make(tmp_path, queries=with_query(1, ts="2025-01-04T12:00:00Z"))
    assert validate_dataset(root) == [
        Problem(
            Q,
            2,
            "ts",
            "goes backwards: 2025-01-04T12:00:00.000Z is before 2025-01-05T00:00:00.000Z on line 1",
        )
    ]


def test_blank_lines_are_ignored(tmp_path: Path) -> None:
    lines = base_memories()
    lines.insert(2, "   ")
    root = make(tmp_path, memories=lines)
    assert validate_dataset(root) == []


def test_many_problems_are_all_reported(tmp_path: Path) -> None:
    memories = base_memories()
    memories[0]["type"] = "note"  # line 1
    memories[1]["text"] = ""  # line 2
    memories[2] = "not json"  # line 3
    memories[3]["target"] = "m9"  # line 4
    memories[4]["ts"] = "2024-01-01T00:00:00Z"  # line 5 goes backwards
    memories.append({"id": "m2", "ts": "2025-01-04T00:00:00Z", "type": "event", "text": "x"})
    queries = base_queries()
    queries[0]["relevant"] = {"m1": 0, "zz": 1}
    queries[1]["qid"] = "q1"
    queries[1]["tags"] = None
    root = make(tmp_path, memories=memories, queries=queries, meta='name = "x"\n')
    problems = validate_dataset(root)
    assert [(p.file, p.line, p.field) for p in problems] == [
        ("dataset.toml", None, "version"),
        ("dataset.toml", None, "description"),
        ("dataset.toml", None, "license"),
        ("dataset.toml", None, "source"),
        (M, 1, "type"),
        (M, 2, "text"),
        (M, 3, None),
        (M, 4, "target"),
        (M, 5, "ts"),
        (M, 6, "id"),
        (Q, 1, "relevant"),
        (Q, 1, "relevant"),
        (Q, 2, "tags"),
        (Q, 2, "qid"),
    ]
    assert str(problems[5]) == "memories.jsonl:2: field 'text': must not be empty"
    assert str(problems[9]) == "memories.jsonl:6: field 'id': duplicate id 'm2' (first on line 2)"
    assert problems[10].message == "grade of 'm1' must be an integer >= 1, got 0"
    assert problems[11].message == "id 'zz' does not exist in memories.jsonl"


def test_read_dataset_separates_unreadable_lines(tmp_path: Path) -> None:
    lines = with_memory(2, ts="2024-12-31T00:00:00Z")
    lines.append("[]")
    root = make(tmp_path, memories=lines)
    result = read_dataset(root)
    assert [(p.line, p.field) for p in result.problems] == [(3, "ts"), (6, None)]
    assert [(p.line, p.field) for p in result.unreadable] == [(6, None)]
    assert [op.line for op in result.ops] == [1, 2, 3, 4, 5]


def test_main_validate_ok(tmp_path: Path) -> None:
    root = make(tmp_path)
    out = io.StringIO()
    assert main_validate(root, out=out) == 0
    assert out.getvalue() == f"{root}: ok (5 operations, 2 queries)\n"


def test_main_validate_reports_problems(tmp_path: Path) -> None:
    root = make(tmp_path, memories=with_memory(2, type="note"))
    out = io.StringIO()
    assert main_validate(root, out=out) == 1
    assert out.getvalue() == (
        "memories.jsonl:3: field 'type': unknown memory type 'note'; expected one of event, "
        f"fact, decision, status\n{root}: 1 problem(s)\n"
    )


# ---------------------------------------------------------------------- namespaces and recordings
def _live_memories() -> list[Any]:
    return [
        *base_memories(),
        {"id": "m5", "ts": "2025-01-04T01:00:00Z", "type": "fact", "text": "Private.",
         "scope": "agent:atlas", "confidence": 0.5},
        {"id": "m6", "ts": "2025-01-04T02:00:00Z", "op": "correct", "target": "m1",
         "text": "Alpha uses Memcached.", "reason": "migrated", "source_agent": "atlas"},
        {"ts": "2025-01-04T03:00:00Z", "op": "promote", "target": "m5"},
        {"ts": "2025-01-04T04:00:00Z", "op": "consolidate", "client_id": "acme",
         "scope": "team", "since": "2025-01-01T00:00:00Z"},
    ]


def test_recording_lines_are_valid(tmp_path: Path) -> None:
    queries = with_query(1, agent="atlas", projects=["apollo"], include_superseded=True,
                         served=["m6", "m5"], relevant={"m6": 1})
    root = make(tmp_path, memories=_live_memories(), queries=queries)
    (root / "judgments.jsonl").write_text(json.dumps(
        {"qid": "q2", "mem_id": "m6", "grade": 1, "source": "agent", "judge": "atlas",
         "ts": "2025-01-06T00:00:01Z", "note": "useful"}) + "\n")
    assert validate_dataset(root) == []
    result = read_dataset(root)
    assert [op.op for op in result.ops][-4:] == ["store", "correct", "promote", "consolidate"]
    q = result.queries[1]
    assert (q.agent, q.projects, q.include_superseded, q.served) == (
        "atlas", ("apollo",), True, ("m6", "m5")
    )
    assert q.principal().readable_scopes() == ("team", "agent:atlas", "project:apollo")


def test_recording_line_problems(tmp_path: Path) -> None:
    memories = _live_memories()
    memories[5]["scope"] = "everyone"
    memories[5]["confidence"] = 2
    memories[6]["target"] = "m9"
    memories[7]["target"] = "m1"  # m1 is in the team scope already: the write check says so
    queries = with_query(1, projects="apollo", served=[1], include_superseded="yes")
    root = make(tmp_path, memories=memories, queries=queries)
    (root / "judgments.jsonl").write_text(
        json.dumps({"qid": "q7", "mem_id": "m1", "grade": 3, "source": "bot", "judge": "x",
                    "ts": "2025-01-06T00:00:01Z", "extra": 1}) + "\n"
    )
    problems = [str(p) for p in validate_dataset(root)]
    assert problems == [
        "memories.jsonl:6: field 'confidence': must lie in [0, 1], got 2",
        "memories.jsonl:6: field 'scope': 'everyone' is not a scope; expected 'team', "
        "'agent:NAME' or 'project:NAME'",
        "memories.jsonl:7: field 'target': unknown id 'm9'",
        "memories.jsonl:8: memory m1 is already in the team scope",
        "queries.jsonl:2: field 'projects': must be an array of strings",
        "queries.jsonl:2: field 'include_superseded': must be a boolean, got string",
        "queries.jsonl:2: field 'served': must be an array of strings",
        "judgments.jsonl:1: field 'extra': unknown field for a judgment",
        "judgments.jsonl:1: field 'source': unknown judgment source 'bot'; expected one of "
        "agent, human",
        "judgments.jsonl:1: field 'grade': must be an integer 0, 1 or 2, got 3",
        "judgments.jsonl:1: field 'qid': 'q7' is not a qid of queries.jsonl",
    ]


def test_evaluation_table_is_checked_with_its_line(tmp_path: Path) -> None:
    assert validate_dataset(make(tmp_path, meta=META + '\n[evaluation]\nfolds = 3\n')) == []
    (tmp_path / "b").mkdir()
    bad = make(tmp_path / "b", meta=META + '\n[evaluation]\nfolds = 1\n')
    line = (META + "\n").count("\n") + 1
    assert validate_dataset(bad) == [
        Problem("dataset.toml", line, "evaluation",
                "[evaluation]: field 'folds' must be at least 2, got 1")
    ]


def test_write_check_verdicts_are_kept_per_file_and_source(tmp_path: Path, monkeypatch) -> None:
    """A large write log's check is kept in the cache: read again, the same problems come back
    without writing the log once more; a changed file is checked anew."""
    from memlab.datasets import validate, writes

    monkeypatch.setenv("MEMLAB_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.setattr(validate, "WRITE_CHECK_CACHE_MIN_OPS", 1)
    calls = []
    real = writes.write_problems
    monkeypatch.setattr(writes, "write_problems",
                        lambda ops, skip_ids=None: calls.append(len(ops)) or real(ops, skip_ids))
    memories = _live_memories()
    memories[7]["target"] = "m1"  # refused by the store (already in the team scope)
    root = make(tmp_path, memories=memories)
    refused = "memories.jsonl:8: memory m1 is already in the team scope"
    first = [str(p) for p in validate_dataset(root)]
    assert refused in first and len(calls) == 1
    assert len(list((tmp_path / "cache" / "write-checks").glob("*.json"))) == 1
    assert [str(p) for p in validate_dataset(root)] == first and len(calls) == 1  # kept
    memories[7]["target"] = "m3"
    (root / "memories.jsonl").write_bytes(_encode(memories))
    assert refused not in [str(p) for p in validate_dataset(root)] and len(calls) == 2
    # an entry that is not ours is ignored and checked again
    for entry in (tmp_path / "cache" / "write-checks").glob("*.json"):
        entry.write_text("{not json")
    assert refused not in [str(p) for p in validate_dataset(root)] and len(calls) == 3


def test_small_write_logs_are_checked_every_time(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.setenv("MEMLAB_CACHE_DIR", str(tmp_path / "cache"))
    root = make(tmp_path)
    assert validate_dataset(root) == [] and validate_dataset(root) == []
    assert not (tmp_path / "cache").exists()


def test_no_cache_directory_means_the_write_check_runs(tmp_path: Path, monkeypatch) -> None:
    from memlab.datasets import validate
    from memlab.embed import cache

    def no_home() -> Path:
        raise RuntimeError("Could not determine home directory.")

    monkeypatch.setattr(validate, "WRITE_CHECK_CACHE_MIN_OPS", 1)
    monkeypatch.setattr(cache, "default_cache_dir", no_home)
    memories = _live_memories()
    memories[7]["target"] = "m1"
    root = make(tmp_path, memories=memories)
    assert "memories.jsonl:8: memory m1 is already in the team scope" in [
        str(p) for p in validate_dataset(root)
    ]


# --------------------------------------------------------------------------- number bounds


def test_confidence_too_large_for_a_float_is_a_located_problem(tmp_path: Path) -> None:
    root = make(tmp_path, memories=with_memory(1, confidence=10**400))
    problems = validate_dataset(root)
    assert len(problems) == 1
    assert (problems[0].file, problems[0].line, problems[0].field) == (M, 2, "confidence")
    assert problems[0].message == (
        "must lie in [0, 1], got " + "1" + "0" * 29 + "... (401 characters)"
    )


@pytest.mark.parametrize(
    ("table", "expected"),
    [
        ("[replay]\ntouch_k = " + "9" * 400,
         "[replay]: field 'touch_k' must be at most 1000000, got an integer of 400 digits"),
        ("[replay]\ndepth = " + "9" * 400,
         "[replay]: field 'depth' must be at most 1000000, got an integer of 400 digits"),
        ("[replay]\nttl_days = " + "9" * 400,
         "[replay]: field 'ttl_days' is too large, got an integer of 400 digits"),
        ("[replay.consolidation]\nhebbian_rate = " + "9" * 400,
         "[replay] [consolidation]: field 'hebbian_rate' is too large, got an integer of 400 "
         "digits"),
        ("[replay.consolidation]\ninterval_hours = 1e-12",
         "[replay] [consolidation]: field 'interval_hours' must be 0 (no cycles) or at least "
         "0.000277777778 (one second), got 1e-12"),
        ("[replay]\nclock_origin = -1e300",
         "[replay]: field 'clock_origin' must be at least -62135596800.0, got -1e+300"),
    ],
)
def test_replay_table_number_out_of_range_is_a_located_problem(
    tmp_path: Path, table: str, expected: str
) -> None:
    root = make(tmp_path, meta=META + "\n" + table + "\n")
    problems = validate_dataset(root)
    assert problems == [Problem("dataset.toml", 7, "replay", expected)]


def test_more_consolidation_cycles_than_a_replay_allows_is_a_located_problem(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from memlab.eval import replay

    # One cycle a second from the first write (2025-01-01T00:00Z) to the last query
    # (2025-01-06T00:00Z): 5 × 86,400 = 432,000 cycles, above a bound of 400,000.
    monkeypatch.setattr(replay, "MAX_CYCLES", 400_000)
    table = "[replay.consolidation]\ninterval_hours = 0.0002777777777777778"
    root = make(tmp_path, meta=META + "\n" + table + "\n")
    assert validate_dataset(root) == [Problem(
        "dataset.toml", 7, "replay",
        "[replay] [consolidation]: field 'interval_hours' = 0.0002777777777777778 would run "
        "432,000 cycles over the 5.0 simulated days replayed (at most 400,000): use a longer "
        "interval",
    )]
    monkeypatch.setattr(replay, "MAX_CYCLES", 432_000)  # exactly at the bound: accepted
    assert validate_dataset(root) == []


def test_other_problems_are_still_listed_next_to_a_huge_number(tmp_path: Path) -> None:
    memories = with_memory(1, confidence=10**400)
    memories[2] = {**memories[2], "type": "nope"}
    root = make(tmp_path, memories=memories, meta=META + "\n[replay]\ntouch_k = " + "9" * 400)
    assert [(p.file, p.line, p.field) for p in validate_dataset(root)] == [
        ("dataset.toml", 7, "replay"), (M, 2, "confidence"), (M, 3, "type"),
    ]


def test_grade_above_the_maximum_is_refused(tmp_path: Path) -> None:
    from memlab.datasets.validate import MAX_GRADE

    assert MAX_GRADE == 1_000_000
    root = make(tmp_path, queries=with_query(0, relevant={"m1": 10**30}))
    assert validate_dataset(root) == [
        Problem(Q, 1, "relevant",
                "grade of 'm1' must be at most 1000000, got 1000000000000000000000000000000")
    ]
    # eval reads the dataset through the same checks: it refuses it too
    with pytest.raises(ValueError, match="must be at most 1000000"):
        load_dataset(root)
    (tmp_path / "ok").mkdir()
    ok = make(tmp_path / "ok", queries=with_query(0, relevant={"m1": MAX_GRADE}))
    assert validate_dataset(ok) == []


def test_empty_queries_file_is_valid_with_a_warning(tmp_path: Path) -> None:
    root = make(tmp_path, queries=[])
    out = io.StringIO()
    assert main_validate(root, out=out) == 0
    assert out.getvalue().splitlines() == [
        f"{root}: ok (5 operations, 0 queries)",
        f"{root}: warning: queries.jsonl holds no queries: memlab eval has nothing to evaluate",
    ]


def test_a_judgments_file_that_is_not_a_file_is_a_problem(tmp_path: Path) -> None:
    root = make(tmp_path)
    (root / "judgments.jsonl").mkdir()
    assert validate_dataset(root) == [Problem("judgments.jsonl", None, None, "not a file")]
    (root / "judgments.jsonl").rmdir()
    (root / "queries.jsonl").unlink()
    (root / "queries.jsonl").mkdir()
    assert validate_dataset(root) == [Problem("queries.jsonl", None, None, "not a file")]


def test_folds_beyond_the_maximum_are_a_located_problem(tmp_path: Path) -> None:
    meta = META + "\n[evaluation]\nfolds = " + "9" * 400 + "\n"
    [problem] = validate_dataset(make(tmp_path, meta=meta))
    assert (problem.file, problem.field) == ("dataset.toml", "evaluation")
    assert problem.message == (
        "[evaluation]: field 'folds' must be at most 10000, got an integer of 400 digits"
    )
