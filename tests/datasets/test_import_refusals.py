"""What every importer refuses, and how it names it: malformed CSV rows, values of the wrong
JSON type, text UTF-8 cannot encode, sources with nothing to import (the red team's
reproducers, then what fuzzing every importer found)."""

from __future__ import annotations

import json
import os
import time
from pathlib import Path

import pytest

from memlab.cli import main
from memlab.datasets.format import DatasetError, MemoryOp, load_dataset
from memlab.datasets.importers import run_importer, write_imported

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures"
TINY = FIXTURES / "locomo_tiny"
MINI = FIXTURES / "longmemeval" / "longmemeval_mini.json"
TS = "2026-01-01T00:00:00Z"
GOOD_CSV = ("time,message,user\n2026-01-01T00:00:00Z,hello Acme,acme\n"
            "2026-01-02T00:00:00Z,Globex uses Stripe,globex\n")
MAPPING = "text=message,ts=time,client_id=user"


def _write(path: Path, text: str) -> Path:
    path.write_bytes(text.encode("utf-8", "surrogatepass"))
    return path


def _jsonl(path: Path, *records: object) -> Path:
    return _write(path, "".join((r if isinstance(r, str) else json.dumps(r)) + "\n"
                                for r in records))


def _refused(name: str, src: Path, out: Path, **options: str) -> str:
    """The one-line error of an import that must write nothing."""
    with pytest.raises(ValueError) as info:
        run_importer(name, src, out, **options)
    assert not out.exists()
    return str(info.value)


# ---------------------------------------------------------------- 1. malformed CSV rows
def test_a_csv_quote_never_closed_names_the_row_and_its_column(tmp_path):
    log = _write(tmp_path / "chat.csv", GOOD_CSV + '2026-01-03T00:00:00Z,"never closed,y\n')
    assert _refused("log", log, tmp_path / "o", mapping=MAPPING) == (
        f"{log}:4: column 'message': its quoted text is never closed (it would run to the end "
        "of the file)"
    )


def test_a_csv_row_shorter_than_its_header_is_an_error(tmp_path):
    log = _write(tmp_path / "chat.csv", GOOD_CSV + "2026-01-03T00:00:00Z,no user column\n")
    assert _refused("log", log, tmp_path / "o", mapping=MAPPING) == (
        f"{log}:4: the row has 2 fields but the header has 3"
    )


def test_text_after_a_closing_csv_quote_is_an_error(tmp_path):
    log = _write(tmp_path / "chat.csv", GOOD_CSV + '2026-01-03T00:00:00Z,"quoted"tail,y\n')
    assert _refused("log", log, tmp_path / "o", mapping=MAPPING) == (
        f"""{log}:4: not a readable CSV row (',' expected after '"')"""
    )


def test_a_csv_header_must_name_each_mapped_column_once(tmp_path):
    log = _write(tmp_path / "a.csv", "time,message\n2026-01-01T00:00:00Z,hi\n")
    assert _refused("log", log, tmp_path / "o", mapping=MAPPING) == (
        f"{log}:1: column 'user' (client_id) is not in the header (its columns: 'time', "
        "'message')"
    )
    log = _write(tmp_path / "b.csv", "\ntime,time,message,user\n2026-01-01T00:00:00Z,x,hi,a\n")
    assert _refused("log", log, tmp_path / "o", mapping=MAPPING) == (
        f"{log}:2: column 'time' (ts) appears 2 times in the header: which one is meant is "
        "not known"
    )


def test_a_csv_row_is_named_by_its_first_line(tmp_path):
    log = _write(tmp_path / "chat.csv", 'time,message,user\n2026-01-01T00:00:00Z,"two\nlines",a'
                 "\r\n\r\nyesterday,late,b\n2026-01-02T00:00:00Z,fine,\n")
    rep = run_importer("log", log, tmp_path / "o", mapping=MAPPING)
    assert rep.unmapped == [{"where": "chat.csv:5", "reason": "column 'time' (ts): 'yesterday' "
                             "is not ISO 8601"}]
    stores = load_dataset(tmp_path / "o").stores()
    assert [(s.id, s.text, s.fields.get("client_id")) for s in stores] == [
        ("L2", "two\nlines", "a"), ("L6", "fine", None),
    ]


def test_a_nul_character_in_a_csv_or_markdown_file_names_its_line(tmp_path):
    log = _write(tmp_path / "chat.csv", GOOD_CSV.replace("Globex", "Glo\x00bex"))
    assert _refused("log", log, tmp_path / "o", mapping=MAPPING) == (
        f"{log}:3: holds a NUL character, which no text file does (a binary or UTF-16 file?)"
    )
    notes = tmp_path / "notes"
    notes.mkdir()
    md = _write(notes / "a.md", f"---\ndate: {TS}\n---\n- a\n- b\x00c\n")
    assert _refused("markdown", notes, tmp_path / "o") == (
        f"{md}:5: holds a NUL character, which no text file does (a binary or UTF-16 file?)"
    )


def test_text_that_is_not_utf8_names_its_line(tmp_path):
    notes = tmp_path / "notes"
    notes.mkdir()
    (notes / "a.md").write_bytes(b"\xef\xbb\xbf---\r\ndate: 2026-01-01T00:00:00Z\r\n---\r\n- caf"
                                 b"\xe9\r\n")
    assert _refused("markdown", notes, tmp_path / "o") == (
        f"{notes / 'a.md'}:4: not UTF-8 text (byte 46)"
    )


# ---------------------------------------------------------------- 2. values of the wrong type
@pytest.mark.parametrize(
    ("column", "value", "reason"),
    [
        ("user", [1], "column 'user' (client_id) must be a string, got a list [1]"),
        ("user", 7, "column 'user' (client_id) must be a string, got a number 7"),
        ("user", {"a": 1},
         """column 'user' (client_id) must be a string, got an object {"a": 1}"""),
        ("user", True, "column 'user' (client_id) must be a string, got a boolean (true)"),
        ("user", None, "column 'user' (client_id) is null: leave the column out of the record "
                       "for no value"),
        ("user", "  ", "column 'user' (client_id) is empty"),
        ("message", {"a": 1},
         """column 'message' (text) must be a string, got an object {"a": 1}"""),
        ("time", 1767225600, "column 'time' (ts) must be an ISO 8601 string, got a number "
                             "1767225600"),
        ("time", "2026-01-03", "column 'time' (ts): '2026-01-03' has no time zone; add Z (UTC) "
                               "or an offset such as +02:00"),
        ("id", 5, "column 'id' (id) must be a string, got a number 5"),
        ("kind", ["event"], """column 'kind' (type) must be a string, got a list ["event"]"""),
        ("who", False, "column 'who' (source_agent) must be a string, got a boolean (false)"),
    ],
)
def test_a_jsonl_value_of_the_wrong_type_is_refused_with_its_line_and_column(
    tmp_path, column, value, reason
):
    good = {"time": TS, "message": "hello", "user": "acme", "id": "m1", "kind": "event",
            "who": "bot"}
    log = _jsonl(tmp_path / "l.jsonl", good, {**good, "id": "m2", column: value})
    rep = run_importer("log", log, tmp_path / "o",
                       mapping=MAPPING + ",id=id,type=kind,source_agent=who")
    assert rep.unmapped == [{"where": "l.jsonl:2", "reason": reason}]
    assert [s.id for s in load_dataset(tmp_path / "o").stores()] == ["m1"]


def test_an_optional_column_left_out_of_a_jsonl_record_is_no_value(tmp_path):
    log = _jsonl(tmp_path / "l.jsonl", {"time": TS, "message": "hello"})
    rep = run_importer("log", log, tmp_path / "o", mapping=MAPPING)
    assert rep.unmapped == []
    assert rep.notes == ["mapped columns in no record: 'user' (client_id)"]
    assert "client_id" not in load_dataset(tmp_path / "o").stores()[0].fields


def test_jsonl_refuses_nan_infinity_and_numbers_too_long_to_read(tmp_path):
    log = _jsonl(tmp_path / "l.jsonl", {"time": TS, "message": "ok"},
                 '{"time": NaN, "message": "m"}',
                 f'{{"time": "{TS}", "message": "m", "user": {"9" * 5000}}}',
                 f'{{"time": "{TS}", "message": 1e309}}')
    rep = run_importer("log", log, tmp_path / "o", mapping=MAPPING)
    assert rep.unmapped == [
        {"where": "l.jsonl:2", "reason": "invalid JSON: NaN is not a JSON value"},
        {"where": "l.jsonl:3", "reason": "invalid JSON: a number with too many digits to read"},
        {"where": "l.jsonl:4", "reason": "column 'message' (text) must be a string, got a "
                                         "number too large to hold"},
    ]


@pytest.mark.parametrize(
    ("line", "reason"),
    [
        ({"type": "entity", "name": 5, "entityType": "org", "observations": ["x"]},
         "field 'name' must be a string, got a number 5"),
        ({"type": "entity", "name": "B", "entityType": None, "observations": ["x"]},
         "field 'entityType' is missing or null"),
        ({"type": "entity", "name": "B", "entityType": "org", "observations": "x"},
         """field 'observations' must be a list of strings, got a string "x\""""),
        ({"type": "entity", "name": "B", "entityType": "org", "observations": ["ok", {"a": 1}]},
         """field 'observations' item 2 must be a string, got an object {"a": 1}"""),
        ({"type": "relation", "from": ["A"], "to": "B", "relationType": "uses"},
         """field 'from' must be a string, got a list ["A"]"""),
        ({"type": "relation", "from": "A", "to": "B", "relationType": 3},
         "field 'relationType' must be a string, got a number 3"),
        ({"type": ["entity"], "name": "B"}, """field 'type' must be a string, got a list \
["entity"]"""),
        ([1, 2], "not a JSON object: a list [1, 2]"),
    ],
)
def test_an_mcp_line_of_the_wrong_type_is_refused_with_its_line_and_field(tmp_path, line,
                                                                         reason):
    good = {"type": "entity", "name": "A", "entityType": "org", "observations": ["uses B"]}
    mcp = _jsonl(tmp_path / "m.jsonl", good, line)
    rep = run_importer("mcp-memory", mcp, tmp_path / "o", ts=TS)
    assert rep.unmapped == [{"where": "m.jsonl:2", "reason": reason}]


def _locomo(tmp_path: Path, mutate) -> Path:
    src = tmp_path / "src"
    src.mkdir(exist_ok=True)
    data = json.loads((TINY / "1.json").read_text())
    mutate(data)
    _write(src / "1.json", json.dumps(data))
    return src


@pytest.mark.parametrize(
    ("mutate", "message"),
    [
        (lambda d: d.update(sample_id=5), "field 'sample_id' must be a string, got a number 5"),
        (lambda d: d["session_1"][0].update(text=5),
         "session_1[0]: field 'text' must be a string, got a number 5"),
        (lambda d: d["session_1"][1].update(speaker=["Ben"]),
         """session_1[1]: field 'speaker' must be a string, got a list ["Ben"]"""),
        (lambda d: d["session_2"][0].update(dia_id=None),
         "session_2[0]: field 'dia_id' is missing or null"),
        (lambda d: d["session_1"][2].update(blip_caption={"a": 1}),
         """session_1[2]: field 'blip_caption' must be a string, got an object {"a": 1}"""),
        (lambda d: d["qa"][0].update(question=None), "qa[0]: field 'question' is missing or null"),
        (lambda d: d["qa"][3].update(answer=["Miso"]),
         """qa[3]: field 'answer' must be a string, got a list ["Miso"]"""),
        (lambda d: d["qa"][2].pop("category"),
         "qa[2]: field 'category' must be an integer (1 to 5), got null"),
        (lambda d: d.update(session_2="x"),
         """field 'session_2' must be a list of turns, got a string "x\""""),
        (lambda d: d.update(session_2_date_time=7),
         "field 'session_2_date_time': must be a string like '1:56 pm on 8 May, 2023', got a "
         "number 7"),
    ],
)
def test_a_locomo_value_of_the_wrong_type_names_file_place_and_field(tmp_path, mutate,
                                                                     message):
    src = _locomo(tmp_path, mutate)
    assert _refused("locomo", src, tmp_path / "o") == f"{src / '1.json'}: {message}"


@pytest.mark.parametrize(
    ("mutate", "message"),
    [
        (lambda d: d[0]["haystack_session_ids"].__setitem__(0, 17),
         "[0] (q-dog): field 'haystack_session_ids[0]' must be a string, got a number 17"),
        (lambda d: d[0]["haystack_sessions"][1][0].update(has_answer="yes"),
         """[0] (q-dog): haystack_sessions[1][0]: field 'has_answer' must be true or false, got a \
string "yes\""""),
        (lambda d: d[1].update(answer={"a": 1}),
         """[1] (q-trips): field 'answer' must be a string, got an object {"a": 1}"""),
        (lambda d: d[0].update(answer_session_ids="s_dog"),
         """[0] (q-dog): field 'answer_session_ids' must be a list of strings, got a string \
"s_dog\""""),
        (lambda d: d[0].update(answer_session_ids=None),
         "[0] (q-dog): field 'answer_session_ids' must be a list of strings, got null"),
        (lambda d: d[0]["haystack_sessions"][0][1].update(role=None),
         "[0] (q-dog): haystack_sessions[0][1]: field 'role' is missing or null"),
        (lambda d: d[0]["haystack_session_ids"].__setitem__(1, "s_pasta"),
         "[0] (q-dog): field 'haystack_session_ids': 's_pasta' is there twice (its memory ids "
         "would repeat)"),
    ],
)
def test_a_longmemeval_value_of_the_wrong_type_names_file_place_and_field(tmp_path, mutate,
                                                                         message):
    data = json.loads(MINI.read_text())
    mutate(data)
    src = _write(tmp_path / "lme.json", json.dumps(data))
    assert _refused("longmemeval", src, tmp_path / "o") == f"{src}: {message}"


def test_numeric_answers_are_still_written_as_text(tmp_path):
    data = json.loads(MINI.read_text())
    data[0]["answer"] = 3
    src = _write(tmp_path / "lme.json", json.dumps(data))
    run_importer("longmemeval", src, tmp_path / "o")
    assert {q.qid: q.answer for q in load_dataset(tmp_path / "o").queries}["q-dog"] == "3"


# ---------------------------------------------------------------- 3. nothing to import
def test_a_locomo_file_without_a_conversation_is_an_error(tmp_path, capsys):
    src = tmp_path / "src"
    src.mkdir()
    _write(src / "conv.json", '{"sample_id":"c1"}')
    assert _refused("locomo", src, tmp_path / "o") == (
        f"{src / 'conv.json'}: no conversation: no field 'conversation' and the object holds "
        "no 'session_N' list of turns"
    )
    assert main(["datasets", "import-locomo", str(src), str(tmp_path / "o")]) == 2
    assert "no conversation" in capsys.readouterr().err
    assert not (tmp_path / "o").exists()
    _write(src / "conv.json", '{"sample_id":"c1","conversation":{"speaker_a":"A"},"qa":[]}')
    assert _refused("locomo", src, tmp_path / "o") == (
        f"{src / 'conv.json'}: no conversation: field 'conversation' holds no 'session_N' list "
        "of turns"
    )
    _write(src / "conv.json", '{"sample_id":"c1","conversation":"x","qa":[]}')
    assert _refused("locomo", src, tmp_path / "o") == (
        f"""{src / 'conv.json'}: field 'conversation' must be an object, got a string "x\""""
    )


def test_locomo_sessions_without_a_turn_publish_nothing(tmp_path):
    src = tmp_path / "src"
    src.mkdir()
    _write(src / "1.json", json.dumps({"session_1": [{"dia_id": "D1:1", "text": " "}],
                                       "session_1_date_time": "1:56 pm on 8 May, 2023"}))
    assert _refused("locomo", src, tmp_path / "o") == (
        f"{src}: no turn with text in 1 conversation file(s); nothing was written (an empty "
        "dataset is never published)"
    )


def test_locomo_is_a_directory_and_each_conversation_is_imported_once(tmp_path):
    assert _refused("locomo", TINY / "1.json", tmp_path / "o") == (
        f"{TINY / '1.json'}: a file; give the directory that holds the LoCoMo conversation "
        "files (*.json, one conversation each)"
    )
    src = tmp_path / "src"
    src.mkdir()
    for name in ("1.json", "2.json"):
        data = json.loads((TINY / name).read_text())
        data["sample_id"] = "same"
        _write(src / name, json.dumps(data))
    assert _refused("locomo", src, tmp_path / "o") == (
        f"{src / '2.json'}: conversation 'same' is also the conversation of {src / '1.json'} "
        "(field 'sample_id' or the file name)"
    )


def test_longmemeval_without_instances_or_turns_publishes_nothing(tmp_path):
    src = _write(tmp_path / "lme.json", "[]")
    assert _refused("longmemeval", src, tmp_path / "o") == (
        f"{src}: no question instances (an empty list); nothing was written"
    )
    item = json.loads(MINI.read_text())[0]
    item.update(haystack_session_ids=[], haystack_dates=[], haystack_sessions=[])
    _write(src, json.dumps([item]))
    assert _refused("longmemeval", src, tmp_path / "o") == (
        f"{src}: no turn in the haystacks of 1 question(s); nothing was written (an empty "
        "dataset is never published)"
    )


def test_an_mcp_graph_without_observations_publishes_nothing(tmp_path):
    mcp = _jsonl(tmp_path / "m.jsonl",
                 {"type": "entity", "name": "A", "entityType": "org", "observations": []},
                 {"type": "relation", "from": "A", "to": "B", "relationType": "uses"})
    assert _refused("mcp-memory", mcp, tmp_path / "o", ts=TS) == (
        f"{mcp}: none of its 2 record(s) holds a memory; nothing was written"
    )


def test_a_longmemeval_number_too_long_to_read_names_the_file(tmp_path):
    src = _write(tmp_path / "lme.json", "[" + "9" * 5000 + "]")
    assert _refused("longmemeval", src, tmp_path / "o") == (
        f"{src}: not a readable JSON file (a number with too many digits to read)"
    )


# ---------------------------------------------------------------- 4. text UTF-8 cannot encode
SURROGATE = "holds '\\ud800' at character 1, a lone surrogate UTF-8 cannot encode"


def test_a_lone_surrogate_in_a_log_names_file_line_and_column(tmp_path, capsys):
    log = _jsonl(tmp_path / "chat.jsonl", {"time": TS, "message": "hello", "user": "a"},
                 '{"time":"2026-01-03T00:00:00Z","message":"\\ud800","user":"a"}')
    assert main(["datasets", "import", "log", str(log), str(tmp_path / "o"),
                 "--option", f"mapping={MAPPING}"]) == 0
    assert f"not mapped chat.jsonl:2: column 'message' (text) {SURROGATE}" in (
        capsys.readouterr().out
    )
    only = _jsonl(tmp_path / "only.jsonl",
                  '{"time":"2026-01-03T00:00:00Z","message":"x","user":"\\ud800"}')
    assert main(["datasets", "import", "log", str(only), str(tmp_path / "o2"),
                 "--option", f"mapping={MAPPING}"]) == 2
    assert capsys.readouterr().err == (
        f"memlab: error: {only}: no record could be mapped to a memory (1 not mapped; first "
        f"only.jsonl:1: column 'user' (client_id) {SURROGATE}); nothing was written\n"
    )
    assert not (tmp_path / "o2").exists()


def test_a_lone_surrogate_in_an_mcp_graph_names_file_line_and_field(tmp_path):
    mcp = _jsonl(tmp_path / "m.jsonl",
                 {"type": "entity", "name": "A", "entityType": "org", "observations": ["x"]},
                 '{"type":"entity","name":"\\ud800","entityType":"org","observations":["x"]}',
                 '{"type":"entity","name":"B","entityType":"org","observations":["\\ud800"]}')
    rep = run_importer("mcp-memory", mcp, tmp_path / "o", ts=TS)
    assert rep.unmapped == [
        {"where": "m.jsonl:2", "reason": f"field 'name' {SURROGATE}"},
        {"where": "m.jsonl:3", "reason": f"field 'observations' item 1 {SURROGATE}"},
    ]


def test_a_lone_surrogate_in_locomo_or_longmemeval_names_file_place_and_field(tmp_path):
    src = tmp_path / "src"
    src.mkdir()
    _write(src / "1.json", (TINY / "1.json").read_text().replace('"Hi Ben, I adopted a cat."',
                                                                 '"\\ud800"'))
    assert _refused("locomo", src, tmp_path / "o") == (
        f"{src / '1.json'}: session_1[0]: field 'text' {SURROGATE}"
    )
    lme = _write(tmp_path / "lme.json", MINI.read_text().replace(
        "My dog is a golden retriever named Max.", "\\ud800"))
    assert _refused("longmemeval", lme, tmp_path / "o") == (
        f"{lme}: [0] (q-dog): haystack_sessions[1][0]: field 'content' {SURROGATE}"
    )


def _ascii_refused(name: str, src: Path, out: Path, **options: str) -> str:
    """:func:`_refused` for a source whose path holds surrogates, as ASCII: a report holding
    them would stop pytest-xdist from sending it back (``strings must be utf-8 encodable``)."""
    try:
        run_importer(name, src, out, **options)
    except ValueError as exc:
        assert not out.exists()
        return ascii(str(exc))
    except Exception as exc:
        pytest.fail(f"{type(exc).__name__}: {ascii(str(exc))}", pytrace=False)
    pytest.fail("nothing was refused", pytrace=False)


def test_a_source_file_name_that_is_not_utf8_is_refused(tmp_path):
    notes = tmp_path / "notes"
    notes.mkdir()
    bad = os.fsdecode(b"b\xff.md")
    _write(notes / bad, f"---\ndate: {TS}\n---\n- x\n")
    assert _ascii_refused("markdown", notes, tmp_path / "o") == ascii(
        f"{notes / bad}: the file name is not UTF-8; rename it"
    )
    log = _write(tmp_path / os.fsdecode(b"c\xff.csv"), GOOD_CSV)
    at = len(str(tmp_path)) + 3  # the character after "/c"
    assert _ascii_refused("log", log, tmp_path / "o", mapping=MAPPING) == ascii(
        f"{log}: the path is not UTF-8 (holds '\\udcff' at character {at}, a lone surrogate "
        "UTF-8 cannot encode); rename it"
    )


def test_text_that_slips_past_the_checks_is_named_at_its_source(tmp_path):
    meta = {"name": "n", "version": "1", "description": "d", "license": "l", "source": "s"}
    ops = [MemoryOp.store("m1", 0.0, "fine", "fact", origin=("notes.md", 3)),
           MemoryOp.store("m2", 1.0, "bad \udc80", "fact", origin=("notes.md", 4))]
    with pytest.raises(ValueError) as info:
        write_imported((meta, ops, []), tmp_path / "o")
    assert str(info.value) == ("notes.md:4: field 'text' holds '\\udc80' at character 5, a lone "
                               "surrogate UTF-8 cannot encode; nothing was written")
    assert not (tmp_path / "o").exists()


# ---------------------------------------------------------------- found by fuzzing
def test_a_jsonl_string_with_a_line_separator_stays_one_record(tmp_path):
    log = _jsonl(tmp_path / "l.jsonl", '{"time":"2026-01-01T00:00:00Z","message":"a\u2028b\x85c"}',
                 '{"time":"2026-01-02T00:00:00Z","message":"second"}')
    rep = run_importer("log", log, tmp_path / "o", mapping="text=message,ts=time")
    assert rep.unmapped == []
    assert [(s.id, s.text) for s in load_dataset(tmp_path / "o").stores()] == [
        ("L1", "a\u2028b\x85c"), ("L2", "second")]


def test_markdown_reports_front_matter_it_cannot_use(tmp_path):
    notes = tmp_path / "notes"
    notes.mkdir()
    _write(notes / "a.md", f"---\ndate: {TS}\n---\n- kept\n")
    _write(notes / "b.md", "---\ndate: 2026-01-02T00:00:00Z\n- the closing line is missing\n")
    _write(notes / "c.md", "---\ndate: 2026-01-02\n---\n- x\n")
    _write(notes / "d.md", f"---\ndate: {TS}\nclient:\n---\n- x\n")
    (notes / "dir.md").mkdir()  # a directory whose name ends in .md is not a note
    rep = run_importer("markdown", notes, tmp_path / "o")
    assert rep.unmapped == [
        {"where": "b.md:1", "reason": "the front matter opened here is never closed (no second "
                                      "'---' line)"},
        {"where": "c.md:2", "reason": "field 'date': '2026-01-02' has no time zone; add Z (UTC) "
                                      "or an offset such as +02:00"},
        {"where": "d.md:3", "reason": "field 'client' is empty"},
    ]
    assert [s.text for s in load_dataset(tmp_path / "o").stores()] == ["kept"]


def test_markdown_lines_with_long_runs_of_spaces_are_read_in_linear_time(tmp_path):
    notes = tmp_path / "notes"
    notes.mkdir()
    gap = " " * 100_000  # the old pattern backtracked quadratically here (~30 s)
    _write(notes / "a.md", f"---\ndate: {TS}\n---\n# T{gap}x\npara\n- a{gap}b  \n-   \n"
           "- short \n")
    started = time.perf_counter()
    with pytest.raises(DatasetError) as info:  # the long bullet is over the size limit
        run_importer("markdown", notes, tmp_path / "o")
    assert time.perf_counter() - started < 10
    assert [(p.line, p.message) for p in info.value.problems] == [
        (6, "field 'text' is 100002 characters long; the limit is 20000 (written as "
            "memories.jsonl:1)"),
    ]
    _write(notes / "a.md", f"---\ndate: {TS}\n---\n# T{' ' * 9_000}x\npara\n")
    rep = run_importer("markdown", notes, tmp_path / "o")
    assert [s.text for s in load_dataset(tmp_path / "o").stores()] == ["T" + " " * 9_000
                                                                       + "x: para"]
    assert rep.counts == {"files": 1, "memories": 1, "not_mapped": 0}
