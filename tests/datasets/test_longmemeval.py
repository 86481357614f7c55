"""LongMemEval importer on a hand-written fixture in the published layout, at both granularities.

Fixture ``longmemeval_mini.json``: three instances. ``q-dog`` (single-session-user): sessions
``s_pasta`` (2 turns) and ``s_dog`` (2 turns, the first ``has_answer``). ``q-trips``
(multi-session): ``s_lisbon``, ``s_pasta``, ``s_oslo``, 2 turns each, evidence in the first turn
of ``s_lisbon`` and of ``s_oslo``. ``q-cat_abs``: an abstention question over ``s_dog`` alone,
no ``has_answer`` and no answer session. ``s_pasta`` and ``s_dog`` recur across instances.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from memlab.datasets.format import load_dataset
from memlab.datasets.importers import run_importer
from memlab.datasets.longmemeval import LongMemEvalImporter, parse_longmemeval_date
from memlab.datasets.validate import validate_dataset
from memlab.embed import HashingEmbedder
from memlab.eval.experiment import run_experiment
from memlab.timeutil import parse_ts

MINI = Path(__file__).resolve().parents[1] / "fixtures" / "longmemeval" / "longmemeval_mini.json"


def test_parse_date() -> None:
    assert parse_longmemeval_date("2023/05/30 (Tue) 23:40") == parse_ts("2023-05-30T23:40:00Z")
    assert parse_longmemeval_date("2023/5/3 08:01") == parse_ts("2023-05-03T08:01:00Z")
    with pytest.raises(ValueError, match="field 'question_date'"):
        parse_longmemeval_date("May 30, 2023", where="x.json: field 'question_date'")
    with pytest.raises(ValueError, match="not a valid date"):
        parse_longmemeval_date("2023/02/30 (Thu) 10:00")


def test_turn_granularity(tmp_path: Path) -> None:
    report = run_importer("longmemeval", MINI, tmp_path / "lme")
    assert report.counts == {"questions": 3, "sessions": 6, "turns": 12, "abstention": 1,
                             "no_evidence": 1}
    assert report.per_category == {"multi-session": 1, "single-session-user": 2}
    ds = load_dataset(tmp_path / "lme")
    assert validate_dataset(tmp_path / "lme") == []
    assert len(ds.ops) == 12  # 4 + 6 + 2 turns: a recurring session is stored per question
    ids = {op.id for op in ds.ops}
    assert "q-dog:s_pasta:0" in ids and "q-trips:s_pasta:0" in ids
    by_qid = {q.qid: q for q in ds.queries}
    assert by_qid["q-dog"].relevant == {"q-dog:s_dog:0": 1}
    assert by_qid["q-trips"].relevant == {"q-trips:s_lisbon:0": 1, "q-trips:s_oslo:0": 1}
    assert by_qid["q-cat_abs"].relevant == {}
    assert by_qid["q-cat_abs"].tags == ("single-session-user", "abstention", "no-evidence")
    assert by_qid["q-trips"].tags == ("multi-session",)
    assert by_qid["q-dog"].client_id == "q-dog"
    assert by_qid["q-dog"].ts == parse_ts("2023-05-30T23:40:00Z")
    assert by_qid["q-dog"].answer == "golden retriever"
    dog = next(op for op in ds.ops if op.id == "q-dog:s_dog:1")
    assert dog.ts == parse_ts("2023-05-21T10:05:00Z") + 1.0  # second turn: one step later
    assert dog.text == "assistant: Max sounds lovely! Retrievers love to swim."
    assert dog.fields["client_id"] == "q-dog"
    assert ds.meta["replay"] == {"expire": False, "touch_k": 0}


def test_session_granularity(tmp_path: Path) -> None:
    LongMemEvalImporter(granularity="session").run(MINI, tmp_path / "lme")
    ds = load_dataset(tmp_path / "lme")
    assert len(ds.ops) == 6  # 2 + 3 + 1 sessions
    by_qid = {q.qid: q for q in ds.queries}
    assert by_qid["q-trips"].relevant == {"q-trips:s_lisbon": 1, "q-trips:s_oslo": 1}
    assert by_qid["q-dog"].relevant == {"q-dog:s_dog": 1}
    dog = next(op for op in ds.ops if op.id == "q-dog:s_dog")
    assert dog.text == ("user: My dog is a golden retriever named Max.\n"
                        "assistant: Max sounds lovely! Retrievers love to swim.")


@pytest.mark.parametrize(
    ("granularity", "r_all_at_1", "r_all_at_2"),
    [
        # q-dog: "dog" and "breed"... only the evidence turn shares "dog" with the question, so
        # it ranks first; q-trips needs both of its two evidence units: never in a top 1.
        ("turn", (1 + 0) / 2, (1 + 1) / 2),
        ("session", (1 + 0) / 2, (1 + 1) / 2),
    ],
)
def test_metrics_at_both_granularities(tmp_path: Path, granularity: str, r_all_at_1: float,
                                       r_all_at_2: float) -> None:
    LongMemEvalImporter(granularity=granularity).run(MINI, tmp_path / "lme")
    ds = load_dataset(tmp_path / "lme")
    res = run_experiment(ds, ["bm25"], embedder=HashingEmbedder(dim=64), progress=False,
                         write_report=False, metrics=["R_all@1", "R_all@2"])
    assert res.metrics["bm25"]["R_all@1"] == pytest.approx(r_all_at_1)
    assert res.metrics["bm25"]["R_all@2"] == pytest.approx(r_all_at_2)


@pytest.mark.parametrize(
    ("mutate", "message"),
    [
        (lambda d: d[0].pop("question_id"), "field 'question_id'"),
        (lambda d: d[0]["haystack_dates"].pop(), "differ in length"),
        (lambda d: d[1].update(question_date="yesterday"), r"\(q-trips\): field 'question_date'"),
        (lambda d: d[0]["haystack_sessions"][1][0].pop("content"),
         r"haystack_sessions\[1\]\[0\]: field 'content'"),
        (lambda d: d.append(dict(d[0])), "duplicate 'q-dog'"),
    ],
)
def test_layout_errors_name_the_field(tmp_path: Path, mutate, message: str) -> None:
    data = json.loads(MINI.read_text())
    mutate(data)
    src = tmp_path / "bad.json"
    src.write_text(json.dumps(data))
    with pytest.raises(ValueError, match=message):
        LongMemEvalImporter().build(src)


def test_unknown_granularity_names_field() -> None:
    with pytest.raises(ValueError, match="'granularity'"):
        LongMemEvalImporter(granularity="word").build(MINI)
