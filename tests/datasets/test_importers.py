"""The importer registry."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from memlab.datasets.format import MemoryOp, Query, write_dataset
from memlab.datasets.importers import (
    IMPORTERS,
    ImportReport,
    register_importer,
    run_importer,
)
from memlab.datasets.locomo import LocomoImporter


def test_locomo_is_registered() -> None:
    assert IMPORTERS["locomo"] is LocomoImporter


def test_unknown_importer_lists_known_ones(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match=r"unknown importer 'nope'; known importers: .*locomo"):
        run_importer("nope", tmp_path, tmp_path / "out")


def test_duplicate_name_is_refused() -> None:
    with pytest.raises(ValueError, match="importer 'locomo' is already registered"):
        register_importer("locomo")(type("Other", (), {}))


def test_new_importer_plugs_in_by_decorator(tmp_path: Path) -> None:
    @register_importer("one-line")
    class OneLine:
        def __init__(self, *, text: str = "hello") -> None:
            self.text = text

        def run(self, src: Path, out: Path) -> ImportReport:
            meta = {"name": "o", "version": "1", "description": "d", "license": "l", "source": "s"}
            op = MemoryOp.store("m1", 0.0, self.text, "event")
            q = Query(0, "q1", 1.0, "what?", relevant={"m1": 1}, tags=("single-hop",))
            ds = write_dataset((meta, [op], [q]), out)
            return ImportReport("one-line", str(src), str(out), counts={"turns": 1}, dataset=ds)

    try:
        report = run_importer("one-line", tmp_path, tmp_path / "out", text="bonjour")
        assert report.counts == {"turns": 1}
        assert report.dataset is not None
        assert report.dataset.ops[0].text == "bonjour"
    finally:
        del IMPORTERS["one-line"]


def test_report_summary() -> None:
    report = ImportReport(
        "x",
        "src",
        "out",
        counts={"questions": 2, "repaired": 1},
        per_category={"single-hop": 2},
        repaired=[{"qid": "c:q1", "raw": "D1:01", "fixed": ["D1:1"]}],
        unrecoverable=[{"qid": "c:q2", "raw": "D", "reason": "malformed id", "question": "Why?"}],
        no_evidence=[{"qid": "c:q2", "question": "Why?"}],
    )
    assert report.summary() == (
        "x: src -> out\n"
        "  questions: 2\n"
        "  repaired: 1\n"
        "  per category: single-hop 2\n"
        "  repaired c:q1: 'D1:01' -> ['D1:1']\n"
        "  unrecoverable c:q2: 'D' (malformed id) - Why?\n"
        "  no evidence c:q2: Why?"
    )


def test_longmemeval_deeply_nested_json_names_the_file(tmp_path: Path) -> None:
    src = tmp_path / "lme.json"
    src.write_text("[" * 100_000 + "]" * 100_000)
    with pytest.raises(ValueError) as info:
        run_importer("longmemeval", src, tmp_path / "out")
    assert str(info.value) == f"{src}: not a readable JSON file (nested too deeply to read)"
    assert not (tmp_path / "out").exists()


def test_importer_options_are_typed_by_the_importers_parameters() -> None:
    from memlab.datasets.importers import importer_options

    assert importer_options("locomo", {"query_delay_seconds": "5", "name": "mine",
                                       "turn_template": "{text}"}) == {
        "query_delay_seconds": 5.0, "name": "mine", "turn_template": "{text}"}
    for raw, message in (
        ({"turn_step_seconds": "two"}, "--option turn_step_seconds='two': must be a finite number"),
        ({"turn_step_seconds": "nan"}, "--option turn_step_seconds='nan': must be a finite number"),
        ({"speed": "1"}, "importer 'locomo': no option 'speed'; its options: name, version, "
                         "turn_step_seconds, query_delay_seconds, caption_template, "
                         "turn_template, client_prefix"),
    ):
        with pytest.raises(ValueError, match=f"^{re.escape(message)}$"):
            importer_options("locomo", raw)


def test_an_option_called_name_reaches_the_importer(tmp_path: Path) -> None:
    src = tmp_path / "loc"
    src.mkdir()
    (src / "1.json").write_text(json.dumps({
        "sample_id": "c1",
        "conversation": {"speaker_a": "A", "speaker_b": "B",
                         "session_1_date_time": "1:56 pm on 8 May, 2023",
                         "session_1": [{"speaker": "A", "dia_id": "D1:1", "text": "a cat"}]},
        "qa": [{"question": "cat?", "answer": "Tom", "evidence": ["D1:1"], "category": 4}],
    }))
    report = run_importer("locomo", src, tmp_path / "out", name="mine", query_delay_seconds=5.0)
    assert report.dataset.meta["name"] == "mine"


@pytest.mark.parametrize(("options", "message"), [
    ({"turn_template": "{0}"}, "field 'turn_template': '{0}' is not a template of {speaker}, "
                               "{text} (IndexError: "),
    ({"turn_template": "{who}"}, "field 'turn_template': '{who}' is not a template of "
                                 "{speaker}, {text} (KeyError: 'who')"),
    ({"caption_template": "{}"}, "field 'caption_template': '{}' is not a template of "
                                 "{caption} (IndexError: "),
    ({"query_delay_seconds": -1.0}, "field 'query_delay_seconds' must be a finite number >= 0"),
    ({"turn_step_seconds": "2"}, "field 'turn_step_seconds' must be a number of seconds, got "
                                 "str"),
])
def test_locomo_options_are_checked(tmp_path: Path, options: dict, message: str) -> None:
    with pytest.raises(ValueError, match=re.escape("locomo.py: LocomoImporter: " + message)):
        LocomoImporter(**options).build(tmp_path)


def test_log_mapping_names_a_field_once() -> None:
    from memlab.datasets.import_log import parse_mapping

    with pytest.raises(ValueError, match=re.escape(
            "log: field 'mapping': 'text' is mapped twice ('message' and 'user')")):
        parse_mapping("text=message,ts=time,text=user")
