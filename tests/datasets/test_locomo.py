"""LoCoMo importer: a tiny hand-written fixture with exact output, and the real data if present."""

from __future__ import annotations

import io
import json
from pathlib import Path

import pytest

from memlab.datasets.format import load_dataset
from memlab.datasets.importers import run_importer
from memlab.datasets.locomo import (
    LocomoImporter,
    main_import_locomo,
    parse_locomo_datetime,
    repair_evidence,
)
from memlab.datasets.validate import validate_dataset
from memlab.timeutil import parse_ts

TINY = Path(__file__).resolve().parents[1] / "fixtures" / "locomo_tiny"
LOCOMO = Path("/work/shared/datasets/locomo10")


@pytest.mark.parametrize(
    ("text", "iso"),
    [
        ("1:56 pm on 8 May, 2023", "2023-05-08T13:56:00Z"),
        ("10:05 am on 12 June, 2023", "2023-06-12T10:05:00Z"),
        ("12:09 am on 13 September, 2023", "2023-09-13T00:09:00Z"),
        ("12:30 pm on 1 October, 2023", "2023-10-01T12:30:00Z"),
        ("9:00 AM on 3 Jan, 2024", "2024-01-03T09:00:00Z"),
    ],
)
def test_parse_locomo_datetime(text: str, iso: str) -> None:
    assert parse_locomo_datetime(text) == parse_ts(iso)


@pytest.mark.parametrize(
    "text", ["8 May 2023", "13:56 pm on 8 May, 2023", "1:56 pm on 31 Feb, 2023"]
)
def test_parse_locomo_datetime_rejects(text: str) -> None:
    with pytest.raises(ValueError, match="x.json"):
        parse_locomo_datetime(text, where="x.json")


TURNS = {"D1:1", "D1:3", "D2:1", "D30:5", "D11:26"}


@pytest.mark.parametrize(
    ("raw", "ids", "changed", "bad"),
    [
        ("D1:1", ["D1:1"], False, []),
        ("D1:1; D2:1", ["D1:1", "D2:1"], True, []),
        ("D1:1 D1:3,D2:1", ["D1:1", "D1:3", "D2:1"], True, []),
        ("D30:05", ["D30:5"], True, []),
        ("D:11:26", ["D11:26"], True, []),
        ("D", [], False, [("D", "malformed id")]),
        ("D9:9", [], False, [("D9:9", "names no turn")]),
        ("D1:1; D", ["D1:1"], True, [("D", "malformed id")]),
        ("D1:1 D1:1", ["D1:1"], True, []),
        ("", [], False, [("", "empty")]),
        (7, [], False, [("7", "not a string")]),
    ],
)
def test_repair_evidence(raw: object, ids: list[str], changed: bool, bad: list) -> None:
    assert repair_evidence(raw, TURNS) == (ids, changed, bad)


def _mem(mid: str, ts: str, text: str, speaker: str, session: int) -> dict:
    conv, dia = mid.split(":", 1)
    return {
        "id": mid,
        "ts": ts,
        "type": "event",
        "text": text,
        "source_agent": speaker,
        "client_id": conv,
        "metadata": {"dia_id": dia, "session": session},
    }


EXPECTED_MEMORIES = [
    _mem("conv-1:D1:1", "2023-05-08T13:56:00.000Z", "Ana: Hi Ben, I adopted a cat.", "Ana", 1),
    _mem("conv-1:D1:2", "2023-05-08T13:56:01.000Z", "Ben: Nice! What is its name?", "Ben", 1),
    _mem(
        "conv-1:D1:3",
        "2023-05-08T13:56:02.000Z",
        "Ana: Her name is Miso. [shares a photo: a photo of a grey cat on a sofa]",
        "Ana",
        1,
    ),
    _mem("conv-1:D2:1", "2023-06-12T10:05:00.000Z", "Ben: I started learning guitar.", "Ben", 2),
    _mem("conv-1:D2:2", "2023-06-12T10:05:01.000Z", "Ana: Which songs?", "Ana", 2),
    _mem("conv-1:D2:3", "2023-06-12T10:05:02.000Z", "Ben: Mostly old blues.", "Ben", 2),
    _mem("conv-2:D1:1", "2023-09-13T00:09:00.000Z", "Cleo: I moved to Lisbon.", "Cleo", 1),
    _mem("conv-2:D1:2", "2023-09-13T00:09:01.000Z", "Dev: How is the weather?", "Dev", 1),
    _mem("conv-2:D2:1", "2023-10-01T12:30:00.000Z", "Cleo: Sunny every day.", "Cleo", 2),
    _mem(
        "conv-2:D2:2",
        "2023-10-01T12:30:01.000Z",
        "Dev: I visited Porto. [shares a photo: a photo of a bridge over a river]",
        "Dev",
        2,
    ),
]


def _q(qid: str, ts: str, text: str, relevant: dict, tags: list, answer: str) -> dict:
    return {
        "qid": qid,
        "ts": ts,
        "client_id": qid.split(":")[0],
        "text": text,
        "relevant": relevant,
        "tags": tags,
        "answer": answer,
    }


T1 = "2023-06-12T10:05:03.000Z"
T2 = "2023-10-01T12:30:02.000Z"
EXPECTED_QUERIES = [
    _q("conv-1:q1", T1, "What pet and hobby came up?",
       {"conv-1:D1:1": 1, "conv-1:D2:1": 1}, ["cat:1", "multi-hop"], "a cat and guitar"),
    _q("conv-1:q2", T1, "When did Ana adopt the cat?",
       {"conv-1:D1:1": 1}, ["cat:2", "temporal"], "2023"),
    _q("conv-1:q3", T1, "Would Ben enjoy a blues concert?",
       {}, ["cat:3", "open-domain", "no-evidence"], "Likely yes"),
    _q("conv-1:q4", T1, "What is the cat called?",
       {"conv-1:D1:3": 1}, ["cat:4", "single-hop"], "Miso"),
    _q("conv-1:q5", T1, "What is Ben's dog called?",
       {"conv-1:D2:1": 1}, ["cat:5", "adversarial"], "Rex"),
    _q("conv-2:q1", T2, "Where did Cleo move?",
       {"conv-2:D1:1": 1, "conv-2:D2:1": 1}, ["cat:4", "single-hop"], "Lisbon"),
    _q("conv-2:q2", T2, "Which cities came up?",
       {"conv-2:D1:1": 1, "conv-2:D2:2": 1}, ["cat:1", "multi-hop"], "Lisbon, Porto"),
    _q("conv-2:q3", T2, "When did Dev visit Porto?",
       {}, ["cat:2", "temporal", "no-evidence"], "October 2023"),
    _q("conv-2:q4", T2, "Did Cleo move to Madrid?",
       {"conv-2:D1:1": 1}, ["cat:5", "adversarial"], "No"),
]  # fmt: skip


def _lines(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines()]


def test_tiny_fixture_exact_output(tmp_path: Path) -> None:
    out = tmp_path / "tiny"
    run_importer("locomo", TINY, out)
    assert _lines(out / "memories.jsonl") == EXPECTED_MEMORIES
    assert _lines(out / "queries.jsonl") == EXPECTED_QUERIES
    assert validate_dataset(out) == []
    meta = load_dataset(out).meta
    assert meta["name"] == "locomo_tiny"
    assert meta["license"] == "CC BY-NC 4.0"
    assert "Maharana et al." in meta["source"]


def test_tiny_fixture_report(tmp_path: Path) -> None:
    report = run_importer("locomo", TINY, tmp_path / "tiny")
    assert report.counts == {
        "conversations": 2,
        "sessions": 4,
        "turns": 10,
        "questions": 9,
        "skipped_turns": 0,
        "repaired": 4,
        "unrecoverable": 2,
        "no_evidence": 2,
    }
    assert report.per_category == {
        "multi-hop": 2,
        "temporal": 2,
        "open-domain": 1,
        "single-hop": 2,
        "adversarial": 2,
    }
    assert report.repaired == [
        {"qid": "conv-1:q1", "raw": "D1:1; D2:1", "fixed": ["D1:1", "D2:1"]},
        {"qid": "conv-1:q2", "raw": "D1:01", "fixed": ["D1:1"]},
        {"qid": "conv-1:q4", "raw": "D:1:3", "fixed": ["D1:3"]},
        {"qid": "conv-2:q1", "raw": "D1:1 D2:1", "fixed": ["D1:1", "D2:1"]},
    ]
    assert report.unrecoverable == [
        {"qid": "conv-2:q2", "raw": "D", "reason": "malformed id",
         "question": "Which cities came up?"},
        {"qid": "conv-2:q3", "raw": "D9:9", "reason": "names no turn",
         "question": "When did Dev visit Porto?"},
    ]  # fmt: skip
    assert report.no_evidence == [
        {"qid": "conv-1:q3", "question": "Would Ben enjoy a blues concert?"},
        {"qid": "conv-2:q3", "question": "When did Dev visit Porto?"},
    ]
    assert report.out == str(tmp_path / "tiny")


def test_importer_parameters(tmp_path: Path) -> None:
    importer = LocomoImporter(
        name="tiny",
        turn_step_seconds=60.0,
        query_delay_seconds=3600.0,
        caption_template=" <{caption}>",
        turn_template="{text} ({speaker})",
    )
    dataset, _ = importer.build(TINY)
    third = dataset.ops[2]
    assert third.text == "Her name is Miso. <a photo of a grey cat on a sofa> (Ana)"
    assert third.ts == parse_ts("2023-05-08T13:58:00Z")
    assert dataset.queries[0].ts == parse_ts("2023-06-12T10:07:00Z") + 3600.0
    assert dataset.meta["name"] == "tiny"


def test_main_import_prints_report(tmp_path: Path) -> None:
    out = io.StringIO()
    assert main_import_locomo(TINY, tmp_path / "o", stream=out) == 0
    assert out.getvalue().startswith(f"locomo: {TINY} -> {tmp_path / 'o'}\n  conversations: 2\n")


def test_empty_source_is_an_error(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="no LoCoMo conversation files"):
        run_importer("locomo", tmp_path, tmp_path / "out")


def test_missing_session_date_names_file_and_field(tmp_path: Path) -> None:
    src = tmp_path / "src"
    src.mkdir()
    data = json.loads((TINY / "2.json").read_text())
    del data["session_2_date_time"]
    (src / "2.json").write_text(json.dumps(data))
    with pytest.raises(ValueError, match=r"2\.json: field 'session_2_date_time' missing"):
        run_importer("locomo", src, tmp_path / "out")
    assert not (tmp_path / "out").exists()


@pytest.mark.slow
@pytest.mark.skipif(not LOCOMO.is_dir(), reason="LoCoMo is not available at /work/shared")
def test_real_locomo_totals(tmp_path: Path) -> None:
    out = tmp_path / "locomo10"
    report = run_importer("locomo", LOCOMO, out)
    assert report.counts == {
        "conversations": 10,
        "sessions": 272,
        "turns": 5882,
        "questions": 1986,
        "skipped_turns": 0,
        "repaired": 6,
        "unrecoverable": 3,
        "no_evidence": 4,
    }
    assert report.per_category == {
        "multi-hop": 282,
        "temporal": 321,
        "open-domain": 96,
        "single-hop": 841,
        "adversarial": 446,
    }
    assert sorted((u["raw"], u["reason"]) for u in report.unrecoverable) == [
        ("D", "malformed id"),
        ("D10:19", "names no turn"),
        ("D4:36", "names no turn"),
    ]
    assert validate_dataset(out) == []
    ds = load_dataset(out)
    assert len(ds.ops) == 5882
    assert len(ds.queries) == 1986
    assert sum("no-evidence" in q.tags for q in ds.queries) == 4
    assert {q.client_id for q in ds.queries} == {op.fields["client_id"] for op in ds.ops}


def test_deeply_nested_json_names_the_file(tmp_path: Path) -> None:
    src = tmp_path / "src"
    src.mkdir()
    (src / "1.json").write_text('{"conversation": ' + "[" * 100_000 + "]" * 100_000 + "}")
    with pytest.raises(ValueError) as info:
        run_importer("locomo", src, tmp_path / "out")
    assert str(info.value) == (
        f"{src / '1.json'}: not a readable JSON file (nested too deeply to read)"
    )
    assert not (tmp_path / "out").exists()


def test_a_utf8_bom_is_dropped(tmp_path: Path) -> None:
    src = tmp_path / "src"
    src.mkdir()
    for name in ("1.json", "2.json"):
        (src / name).write_bytes(b"\xef\xbb\xbf" + (TINY / name).read_bytes())
    with_bom = run_importer("locomo", src, tmp_path / "bom")
    plain = run_importer("locomo", TINY, tmp_path / "plain")
    assert with_bom.counts == plain.counts
    assert (tmp_path / "bom" / "memories.jsonl").read_text() == (
        tmp_path / "plain" / "memories.jsonl"
    ).read_text()


def _one_turn(src: Path, name: str = "1.json", session: str = "session_1",
              turn: dict | None = None, evidence: str = "D1:1") -> None:
    src.mkdir(exist_ok=True)
    (src / name).write_text(json.dumps({
        "sample_id": "c1",
        "conversation": {"speaker_a": "A", "speaker_b": "B",
                         f"{session}_date_time": "1:56 pm on 8 May, 2023",
                         session: [turn or {"speaker": "A", "dia_id": "D1:1", "text": "a cat"}]},
        "qa": [{"question": "cat?", "answer": "Tom", "evidence": [evidence], "category": 4}],
    }))


def test_odd_session_keys_file_names_and_ids_are_read_or_named(tmp_path: Path) -> None:
    _one_turn(tmp_path / "a", session="session_01")  # read under its own key
    ds = run_importer("locomo", tmp_path / "a", tmp_path / "out_a").dataset
    assert [(op.id, op.fields["metadata"]["session"]) for op in ds.ops] == [("c1:D1:1", 1)]
    _one_turn(tmp_path / "b", session="session_\u0661")  # an Arabic-Indic one: not a session
    with pytest.raises(ValueError, match="no 'session_N' list of turns"):
        run_importer("locomo", tmp_path / "b", tmp_path / "out_b")
    _one_turn(tmp_path / "c", name="\u00b2.json", evidence="D1:" + "9" * 5000)
    report = run_importer("locomo", tmp_path / "c", tmp_path / "out_c")
    assert [u["reason"] for u in report.unrecoverable] == ["malformed id"]


def test_a_blank_speaker_is_no_agent_and_a_long_turn_names_its_place(tmp_path: Path) -> None:
    _one_turn(tmp_path / "a", turn={"speaker": "  ", "dia_id": "D1:1", "text": "a cat"})
    ds = run_importer("locomo", tmp_path / "a", tmp_path / "out_a").dataset
    assert [op.text for op in ds.ops] == ["a cat"]
    assert "source_agent" not in ds.ops[0].fields
    _one_turn(tmp_path / "b", turn={"speaker": "A", "dia_id": "D1:1", "text": "x" * 25_000})
    with pytest.raises(ValueError) as err:
        run_importer("locomo", tmp_path / "b", tmp_path / "out_b")
    assert f"{tmp_path / 'b' / '1.json'}: session_1[0]: field 'text' is 25003 characters long" \
        in "\n".join(str(p) for p in err.value.problems)
