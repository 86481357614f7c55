"""Import LongMemEval (Wu et al., "LongMemEval: Benchmarking Chat Assistants on Long-Term
Interactive Memory", ICLR 2025) into dataset format v1.

Source layout (the published ``longmemeval_s.json`` / ``longmemeval_m.json`` /
``longmemeval_oracle.json``): one JSON list of question instances, each with ``question_id``,
``question_type``, ``question``, ``answer``, ``question_date`` (``"2023/05/30 (Tue) 23:40"``),
``haystack_session_ids``, ``haystack_dates`` and ``haystack_sessions`` (parallel lists; a session
is a list of turns ``{role, content, has_answer?}``) and ``answer_session_ids``. A question id
ending in ``_abs`` is an abstention question (no evidence exists).

Every instance has its own haystack, so every instance is its own scope: its memories carry
``client_id`` = the question id and its query is scoped to it. ``granularity`` picks the
retrieval unit, as the paper's retrieval study does (its §5, "value granularity"):

* ``"turn"`` -- one ``event`` memory per turn, id ``"<question_id>:<session_id>:<turn index>"``,
  text ``"<role>: <content>"``; relevant = the turns marked ``has_answer`` (turn-level recall);
* ``"session"`` -- one memory per session, id ``"<question_id>:<session_id>"``, its turns joined
  by newlines; relevant = ``answer_session_ids`` (session-level recall).

A session's turns are written at its ``haystack_dates`` entry plus ``turn_step_seconds`` per turn
(dates read as UTC); the query is asked at ``question_date`` (or ``query_delay_seconds`` after
the last turn when that is later). Tags: the ``question_type``, then ``abstention`` for ``_abs``
questions and ``no-evidence`` for any question left without a relevant memory. The data is
licensed MIT.

Anything else is an error naming the file, the instance (index and question id) and the field,
and nothing is written: an id, type, question, role, content or session id that is not a string
(a number, list, object, boolean or ``null``) or holds a character UTF-8 cannot encode (a lone
surrogate from a ``\\ud800`` escape); an answer that is neither such a string nor a number; a
``has_answer`` that is not a boolean; a session id given twice in one instance; an empty list of
instances, or haystacks without a single turn (an empty dataset is never published).
"""

from __future__ import annotations

import os
import re
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from memlab.datasets.format import Dataset, MemoryOp, Query
from memlab.datasets.importers import (
    BuildingImporter,
    ImportReport,
    check_seconds,
    check_template,
    describe,
    read_json_file,
    register_importer,
    require_text,
    require_utf8_path,
    shown,
    time_ordered_dataset,
)
from memlab.numeric import is_finite_number

__all__ = ["LongMemEvalImporter", "parse_longmemeval_date"]

_DATE = re.compile(
    r"^\s*(\d{4})/(\d{1,2})/(\d{1,2})\s*(?:\([A-Za-z]{3}\))?\s*(\d{1,2}):(\d{2})\s*$"
)
_GRANULARITIES = ("turn", "session")


def parse_longmemeval_date(text: Any, *, where: str = "") -> float:
    """``"2023/05/30 (Tue) 23:40"`` → epoch seconds (UTC).

    Raises:
        ValueError: If ``text`` is not in that layout (the message starts with ``where``).
    """
    if not isinstance(text, str):
        raise ValueError(f"{where}: expected a date like '2023/05/30 (Tue) 23:40', got "
                         f"{describe(text)}")
    m = _DATE.match(text)
    if m is None:
        raise ValueError(f"{where}: expected a date like '2023/05/30 (Tue) 23:40', got "
                         f"{shown(text)}")
    y, mo, d, h, mi = (int(g) for g in m.groups())
    try:
        return datetime(y, mo, d, h, mi, tzinfo=UTC).timestamp()
    except ValueError as exc:
        raise ValueError(f"{where}: {text!r} is not a valid date ({exc})") from None


def _field(item: dict[str, Any], name: str, kind: type | tuple[type, ...], where: str) -> Any:
    value = item.get(name)
    if not isinstance(value, kind) or isinstance(value, bool):
        raise ValueError(f"{where}: field '{name}' missing or not a {_kind_name(kind)}")
    return value


def _new_id(mid: str, seen: set[str], where: str) -> str:
    """``mid``, once: two memories of one id (ids are joined with ``:``, so ``a:b`` + ``c``
    and ``a`` + ``b:c`` meet) are an error naming the second."""
    if mid in seen:
        raise ValueError(f"{where}: memory id {mid!r} is made twice (a question or session id "
                         "with ':' in it?)")
    seen.add(mid)
    return mid


def _answer(value: Any, where: str) -> str | None:
    """The answer text (a number written as text), ``None`` when absent.

    Raises:
        ValueError: Naming the field when it is neither a string nor a finite number.
    """
    if value is None:
        return None
    if is_finite_number(value):
        return str(value)
    return require_text(value, where, "answer", empty_ok=True)


def _kind_name(kind: type | tuple[type, ...]) -> str:
    kinds = kind if isinstance(kind, tuple) else (kind,)
    return " or ".join(k.__name__ for k in kinds)


@register_importer("longmemeval")
class LongMemEvalImporter(BuildingImporter):
    """LongMemEval → format v1 (Wu et al., ICLR 2025; data licensed MIT).

    Args:
        name: Dataset name; defaults to the source file's stem.
        version: Dataset version written to ``dataset.toml``.
        granularity: ``"turn"`` (one memory per turn) or ``"session"`` (one per session).
        turn_step_seconds: Seconds added per turn inside a session so time order holds.
        query_delay_seconds: Least delay of a query after its haystack's last turn.
        turn_template: The text of a turn (``{role}``, ``{content}``).
    """

    def __init__(
        self,
        *,
        name: str | None = None,
        version: str = "1",
        granularity: str = "turn",
        turn_step_seconds: float = 1.0,
        query_delay_seconds: float = 1.0,
        turn_template: str = "{role}: {content}",
    ) -> None:
        self.name = name
        self.version = version
        self.granularity = granularity
        self.turn_step_seconds = turn_step_seconds
        self.query_delay_seconds = query_delay_seconds
        self.turn_template = turn_template

    def build(self, src: str | os.PathLike[str]) -> tuple[Dataset, ImportReport]:
        """Read a LongMemEval JSON file into a dataset (not written) and its report.

        Raises:
            ValueError: If the file is not a list of question instances in the published
                layout (the message names the file, the instance and the field).
        """
        if self.granularity not in _GRANULARITIES:
            raise ValueError(f"longmemeval.py: LongMemEvalImporter field 'granularity' must be "
                             f"one of {_GRANULARITIES}, got {self.granularity!r}")
        owner = "longmemeval.py: LongMemEvalImporter"
        check_template(self.turn_template, owner, "turn_template", ("role", "content"))
        for name in ("turn_step_seconds", "query_delay_seconds"):
            check_seconds(getattr(self, name), owner, name)
        path = Path(src)
        if path.is_dir():
            found = sorted(path.glob("*.json"))
            if len(found) != 1:
                raise ValueError(f"{path}: expected one LongMemEval *.json file, found "
                                 f"{len(found)}; name the file")
            path = found[0]
        require_utf8_path(path)
        data = read_json_file(path)
        if not isinstance(data, list):
            raise ValueError(f"{path}: expected a JSON list of question instances, got "
                             f"{describe(data)}")
        if not data:
            raise ValueError(f"{path}: no question instances (an empty list); nothing was "
                             "written")
        report = ImportReport("longmemeval", str(path), "")
        stores: list[tuple[float, int, MemoryOp]] = []
        queries: list[tuple[float, int, Query]] = []
        per_type: dict[str, int] = {}
        counts = dict.fromkeys(("questions", "sessions", "turns", "abstention"), 0)
        seen_qids: set[str] = set()
        memory_ids: set[str] = set()
        seq = 0
        for n, item in enumerate(data):
            where = f"{path}: [{n}]"
            if not isinstance(item, dict):
                raise ValueError(f"{where}: expected a JSON object, got {describe(item)}")
            qid = require_text(item.get("question_id"), where, "question_id")
            where = f"{path}: [{n}] ({qid})"
            if qid in seen_qids:
                raise ValueError(f"{where}: field 'question_id': duplicate {qid!r}")
            seen_qids.add(qid)
            qtype = require_text(item.get("question_type"), where, "question_type")
            question = require_text(item.get("question"), where, "question")
            asked = parse_longmemeval_date(item.get("question_date"),
                                           where=f"{where}: field 'question_date'")
            sids = _field(item, "haystack_session_ids", list, where)
            dates = _field(item, "haystack_dates", list, where)
            sessions = _field(item, "haystack_sessions", list, where)
            if not len(sids) == len(dates) == len(sessions):
                raise ValueError(
                    f"{where}: fields 'haystack_session_ids', 'haystack_dates' and "
                    f"'haystack_sessions' differ in length ({len(sids)}, {len(dates)}, "
                    f"{len(sessions)})"
                )
            for j, sid in enumerate(sids):
                require_text(sid, where, f"haystack_session_ids[{j}]")
            if len(set(sids)) != len(sids):
                twice = next(sid for k, sid in enumerate(sids) if sid in sids[:k])
                raise ValueError(f"{where}: field 'haystack_session_ids': {twice!r} is there "
                                 "twice (its memory ids would repeat)")
            answer_sids = item.get("answer_session_ids", [])
            if not isinstance(answer_sids, list):
                raise ValueError(f"{where}: field 'answer_session_ids' must be a list of "
                                 f"strings, got {describe(answer_sids)}")
            for j, sid in enumerate(answer_sids):
                require_text(sid, where, f"answer_session_ids[{j}]")
            relevant: dict[str, int] = {}
            last = None
            for j, (sid, date, turns) in enumerate(zip(sids, dates, sessions, strict=True)):
                swhere = f"{where}: haystack_sessions[{j}]"
                start = parse_longmemeval_date(date, where=f"{where}: haystack_dates[{j}]")
                if not isinstance(turns, list):
                    raise ValueError(f"{swhere}: expected a list of turns, got "
                                     f"{describe(turns)}")
                counts["sessions"] += 1
                texts: list[str] = []
                for t, turn in enumerate(turns):
                    twhere = f"{swhere}[{t}]"
                    if not isinstance(turn, dict):
                        raise ValueError(f"{twhere}: expected a JSON object, got "
                                         f"{describe(turn)}")
                    role = require_text(turn.get("role"), twhere, "role")
                    content = require_text(turn.get("content"), twhere, "content", empty_ok=True)
                    has_answer = turn.get("has_answer", False)
                    if not isinstance(has_answer, bool):
                        raise ValueError(f"{twhere}: field 'has_answer' must be true or false, "
                                         f"got {describe(has_answer)}")
                    text = self.turn_template.format(role=role, content=content.strip())
                    texts.append(text)
                    counts["turns"] += 1
                    if self.granularity != "turn":
                        continue
                    ts = start + t * self.turn_step_seconds
                    mid = _new_id(f"{qid}:{sid}:{t}", memory_ids, twhere)
                    op = MemoryOp.store(mid, ts, text, "event", source_agent=role,
                                        client_id=qid,
                                        metadata={"session_id": str(sid), "turn": t},
                                        origin=(twhere, None))
                    stores.append((ts, seq, op))
                    seq += 1
                    last = ts if last is None else max(last, ts)
                    if has_answer:
                        relevant[mid] = 1
                if self.granularity == "session" and texts:
                    mid = _new_id(f"{qid}:{sid}", memory_ids, swhere)
                    op = MemoryOp.store(mid, start, "\n".join(texts), "event", client_id=qid,
                                        metadata={"session_id": str(sid)},
                                        origin=(swhere, None))
                    stores.append((start, seq, op))
                    seq += 1
                    last = start if last is None else max(last, start)
                    if sid in answer_sids:
                        relevant[mid] = 1
            if last is not None:
                asked = max(asked, last + self.query_delay_seconds)
            tags = [qtype]
            per_type[qtype] = per_type.get(qtype, 0) + 1
            counts["questions"] += 1
            if qid.endswith("_abs"):
                tags.append("abstention")
                counts["abstention"] += 1
            if not relevant:
                tags.append("no-evidence")
                report.no_evidence.append({"qid": qid, "question": question})
            answer = _answer(item.get("answer"), where)
            queries.append((asked, seq, Query(
                0, qid, asked, question, qid, None, relevant, (), tuple(tags), answer,
            )))
            seq += 1
        if not stores:
            raise ValueError(f"{path}: no turn in the haystacks of {len(data)} question(s); "
                             "nothing was written (an empty dataset is never published)")
        report.counts = {**counts, "no_evidence": len(report.no_evidence)}
        report.per_category = dict(sorted(per_type.items()))
        report.notes.append(
            f"granularity = {self.granularity}: relevant = "
            + ("turns with has_answer" if self.granularity == "turn" else "answer_session_ids")
        )
        meta = {
            "name": self.name or path.stem,
            "version": self.version,
            "description": (
                f"LongMemEval: {counts['questions']} questions, each over its own haystack of "
                f"chat sessions, one memory per {self.granularity}, each question its own scope."
            ),
            "license": "MIT",
            "source": (
                "Wu et al., 'LongMemEval: Benchmarking Chat Assistants on Long-Term Interactive "
                "Memory', ICLR 2025, https://github.com/xiaowu0162/LongMemEval"
            ),
            # Turns are events of chats months apart: no TTL expiry, no access feedback.
            "replay": {"expire": False, "touch_k": 0},
        }
        dataset = time_ordered_dataset(meta, stores, queries)
        report.dataset = dataset
        return dataset, report
