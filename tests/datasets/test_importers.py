"""The importer registry."""

from __future__ import annotations

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
