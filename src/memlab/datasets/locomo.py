"""Import LoCoMo (Maharana et al., "Evaluating Very Long-Term Conversational Memory of LLM
Agents", ACL 2024) into dataset format v1.

Source layout: one JSON file per conversation holding ``speaker_a``/``speaker_b``,
``session_N`` turn lists with ``session_N_date_time`` (``"1:56 pm on 8 May, 2023"``) and ``qa``.
Files shaped like the original ``locomo10.json`` entries (``sample_id``, ``conversation``,
``qa``) are read as well.

Conversion:

* every turn becomes an ``event`` memory with id ``"<conv>:<dia_id>"``, ``ts`` = its session's
  date-time (read as UTC) plus ``turn_step_seconds`` per turn, ``source_agent`` = speaker,
  ``client_id`` = the conversation, image captions appended to the text;
* every question becomes a query scoped to its conversation, asked ``query_delay_seconds`` after
  the conversation's last turn; ``relevant`` = its evidence turns (grade 1); tags
  ``["cat:N", "<category name>"]`` (1 multi-hop, 2 temporal, 3 open-domain, 4 single-hop,
  5 adversarial); ``answer`` = ``answer`` or else ``adversarial_answer``, as a string.

Malformed evidence is repaired where the intent is clear (several ids in one string, zero-padded
turn numbers, a stray colon after ``D``) and reported otherwise; a question left without evidence
keeps ``relevant = {}`` and gets the tag ``no-evidence``. The data is licensed CC BY-NC 4.0.

Everything else that is not in that shape is an error naming the file, the place in it and the
field, and nothing is written: a file that is not a JSON object, holds no ``session_N`` list of
turns, or has a ``sample_id`` another file has; a ``sample_id``, ``dia_id``, ``speaker``,
``text``, ``blip_caption`` or ``question`` that is not a string (a number, list, object, boolean
or ``null``) or holds a character UTF-8 cannot encode (a lone surrogate from a ``\\ud800``
escape); an answer that is neither such a string nor a number; a ``category`` that is neither
an integer nor a string; and a source with no turn at all (an empty dataset is never
published).
"""

from __future__ import annotations

import os
import re
import sys
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, TextIO

from memlab.datasets.format import Dataset, MemoryOp, Query
from memlab.datasets.importers import (
    BuildingImporter,
    ImportReport,
    check_seconds,
    check_template,
    describe,
    encoding_problem,
    read_json_file,
    register_importer,
    require_text,
    require_utf8_path,
    run_importer,
    shown,
    time_ordered_dataset,
)
from memlab.numeric import is_finite_number

CATEGORY_NAMES: dict[int, str] = {
    1: "multi-hop",
    2: "temporal",
    3: "open-domain",
    4: "single-hop",
    5: "adversarial",
}
_MONTHS = {
    name: i
    for i, names in enumerate(
        [
            ("january", "jan"),
            ("february", "feb"),
            ("march", "mar"),
            ("april", "apr"),
            ("may",),
            ("june", "jun"),
            ("july", "jul"),
            ("august", "aug"),
            ("september", "sep", "sept"),
            ("october", "oct"),
            ("november", "nov"),
            ("december", "dec"),
        ],
        start=1,
    )
    for name in names
}
_DATE_TIME = re.compile(
    r"^\s*(\d{1,2}):(\d{2})\s*([ap])\.?m\.?\s+on\s+(\d{1,2})\s+([A-Za-z]+)\.?,?\s+(\d{4})\s*$",
    re.IGNORECASE,
)
_SESSION = re.compile(r"^session_([0-9]{1,9})$")
_EVIDENCE = re.compile(r"^D:?([0-9]{1,9}):([0-9]{1,9})$")  # longer numbers name no turn
_SPLIT = re.compile(r"[;,\s]+")


def parse_locomo_datetime(text: str, *, where: str = "") -> float:
    """Parse LoCoMo's ``"1:56 pm on 8 May, 2023"`` as UTC epoch seconds.

    Args:
        text: The session date-time string.
        where: Location used in the error message.

    Raises:
        ValueError: If it does not have that shape.
    """
    prefix = f"{where}: " if where else ""
    if not isinstance(text, str):
        raise ValueError(f"{prefix}must be a string like '1:56 pm on 8 May, 2023', got "
                         f"{describe(text)}")
    match = _DATE_TIME.match(text)
    if match is None or match.group(5).lower() not in _MONTHS:
        raise ValueError(f"{prefix}not a LoCoMo date-time like '1:56 pm on 8 May, 2023': "
                         f"{shown(text)}")
    hour, minute = int(match.group(1)), int(match.group(2))
    if not 1 <= hour <= 12:
        raise ValueError(f"{prefix}hour out of range in {text!r}")
    hour = hour % 12 + (12 if match.group(3).lower() == "p" else 0)
    month = _MONTHS[match.group(5).lower()]
    try:
        dt = datetime(int(match.group(6)), month, int(match.group(4)), hour, minute, tzinfo=UTC)
    except ValueError as exc:
        raise ValueError(f"{prefix}{exc} in {text!r}") from None
    return dt.timestamp()


def repair_evidence(raw: Any, turn_ids: set[str]) -> tuple[list[str], bool, list[tuple[str, str]]]:
    """Normalise one evidence entry.

    Several ids in one string are split on ``;``, ``,`` and whitespace; ``D30:05`` becomes
    ``D30:5``; ``D:11:26`` becomes ``D11:26``.

    Args:
        raw: The entry as found in ``evidence``.
        turn_ids: The conversation's ``dia_id`` values.

    Returns:
        ``(ids, changed, bad)``: the valid turn ids, whether the text had to be rewritten, and
        ``(piece, reason)`` for each piece that names no turn or cannot be read.
    """
    if not isinstance(raw, str):
        return [], False, [(repr(raw), "not a string")]
    pieces = [p for p in _SPLIT.split(raw.strip()) if p]
    if not pieces:
        return [], False, [(raw, "empty")]
    ids: list[str] = []
    bad: list[tuple[str, str]] = []
    changed = pieces != [raw]
    for piece in pieces:
        match = _EVIDENCE.match(piece)
        if match is None:
            bad.append((piece, "malformed id"))
            continue
        canon = f"D{int(match.group(1))}:{int(match.group(2))}"
        changed = changed or canon != piece
        if canon not in turn_ids:
            bad.append((piece, "names no turn"))
        elif canon not in ids:
            ids.append(canon)
    return ids, changed, bad


def _answer(item: dict[str, Any], name: str, where: str) -> str | None:
    """The answer text of a question (a number is written as text), ``None`` when absent.

    Raises:
        ValueError: Naming the field when it is neither a string nor a finite number.
    """
    value = item.get(name)
    if value is None:
        return None
    if is_finite_number(value):
        return str(value)
    return require_text(value, where, name, empty_ok=True)


def _conversation_files(src: Path) -> list[Path]:
    files = [p for p in src.glob("*.json") if p.is_file()]

    def key(p: Path) -> tuple[int, int, str]:
        plain = p.stem.isascii() and p.stem.isdigit() and len(p.stem) <= 18
        return (0, int(p.stem), p.name) if plain else (1, 0, p.name)

    return sorted(files, key=key)


@register_importer("locomo")
class LocomoImporter(BuildingImporter):
    """LoCoMo → format v1 (Maharana et al., ACL 2024; data licensed CC BY-NC 4.0).

    Args:
        name: Dataset name; defaults to the source directory's name.
        version: Dataset version written to ``dataset.toml``.
        turn_step_seconds: Seconds added per turn inside a session so time order holds.
        query_delay_seconds: Queries are asked this long after a conversation's last turn.
        caption_template: Appended to a turn's text when it shares an image
            (``{caption}`` = the BLIP caption).
        turn_template: The memory text of a turn (``{speaker}``, ``{text}``). The default keeps
            who said it, as an agent's memory of a conversation would ("Caroline: I went to a
            support group"); ``"{text}"`` keeps the bare utterance.
        client_prefix: Conversation id = prefix + file stem (when the file has no
            ``sample_id``).
    """

    def __init__(
        self,
        *,
        name: str | None = None,
        version: str = "1",
        turn_step_seconds: float = 1.0,
        query_delay_seconds: float = 1.0,
        caption_template: str = " [shares a photo: {caption}]",
        turn_template: str = "{speaker}: {text}",
        client_prefix: str = "conv-",
    ) -> None:
        self.name = name
        self.version = version
        self.turn_step_seconds = turn_step_seconds
        self.query_delay_seconds = query_delay_seconds
        self.caption_template = caption_template
        self.turn_template = turn_template
        self.client_prefix = client_prefix

    def _turn_text(self, turn: dict[str, Any]) -> str:
        text = turn.get("text")
        text = text.strip() if isinstance(text, str) else ""
        caption = turn.get("blip_caption")
        if isinstance(caption, str) and caption.strip():
            text = (text + self.caption_template.format(caption=caption.strip())).strip()
        speaker = turn.get("speaker")
        if not text or not isinstance(speaker, str) or not speaker.strip():
            return text
        return self.turn_template.format(speaker=speaker.strip(), text=text)

    def build(self, src: str | os.PathLike[str]) -> tuple[Dataset, ImportReport]:
        """Read a LoCoMo directory into a dataset (not written) and its report.

        Raises:
            ValueError: If the directory holds no conversation, or a file lacks its structure
                (the message names the file and field).
        """
        owner = "locomo.py: LocomoImporter"
        check_template(self.turn_template, owner, "turn_template", ("speaker", "text"))
        check_template(self.caption_template, owner, "caption_template", ("caption",))
        for name in ("turn_step_seconds", "query_delay_seconds"):
            check_seconds(getattr(self, name), owner, name)
        root = Path(src)
        if root.is_file():
            raise ValueError(f"{root}: a file; give the directory that holds the LoCoMo "
                             "conversation files (*.json, one conversation each)")
        require_utf8_path(root)
        files = _conversation_files(root) if root.is_dir() else []
        if not files:
            raise ValueError(f"{root}: no LoCoMo conversation files (*.json)")
        report = ImportReport("locomo", str(root), "")
        stores: list[tuple[float, int, MemoryOp]] = []
        queries: list[tuple[float, int, Query]] = []
        per_category: dict[int, int] = {}
        counts = dict.fromkeys(
            ("conversations", "sessions", "turns", "questions", "skipped_turns"), 0
        )
        seq = 0
        from memlab.progress import track

        conv_files: dict[str, Path] = {}
        for file in track(files, f"reading {src}", unit="files"):
            data = read_json_file(file)
            if not isinstance(data, dict):
                raise ValueError(f"{file}: expected a JSON object per conversation, got "
                                 f"{describe(data)}")
            conv = data.get("conversation", data)
            if not isinstance(conv, dict):
                raise ValueError(f"{file}: field 'conversation' must be an object, got "
                                 f"{describe(conv)}")
            if "sample_id" in data:
                cid = require_text(data["sample_id"], str(file), "sample_id")
            else:
                cid = self.client_prefix + file.stem
                if encoding_problem(cid) is not None:
                    raise ValueError(f"{file}: the file name is not UTF-8 and the file has no "
                                     "'sample_id' to name the conversation; rename it")
            if cid in conv_files:  # its memory ids would repeat
                raise ValueError(f"{file}: conversation {cid!r} is also the conversation of "
                                 f"{conv_files[cid]} (field 'sample_id' or the file name)")
            conv_files[cid] = file
            sessions = []
            for key, value in conv.items():
                if (m := _SESSION.fullmatch(key)) is None:
                    continue
                if not isinstance(value, list):
                    raise ValueError(f"{file}: field '{key}' must be a list of turns, got "
                                     f"{describe(value)}")
                sessions.append((int(m.group(1)), key))
            sessions.sort()
            if not sessions:
                raise ValueError(
                    f"{file}: no conversation: "
                    + ("field 'conversation' holds" if "conversation" in data else
                       "no field 'conversation' and the object holds")
                    + " no 'session_N' list of turns"
                )
            counts["conversations"] += 1
            turn_ids: set[str] = set()
            last_ts: float | None = None
            for number, session in sessions:
                field = f"{session}_date_time"
                if field not in conv:
                    raise ValueError(f"{file}: field '{field}' missing")
                start = parse_locomo_datetime(conv[field], where=f"{file}: field '{field}'")
                counts["sessions"] += 1
                for index, turn in enumerate(conv[session]):
                    where = f"{file}: {session}[{index}]"
                    if not isinstance(turn, dict):
                        raise ValueError(f"{where}: expected a JSON object, got "
                                         f"{describe(turn)}")
                    dia = require_text(turn.get("dia_id"), where, "dia_id")
                    if dia in turn_ids:
                        raise ValueError(f"{where}: field 'dia_id': duplicate {dia!r}")
                    for name in ("speaker", "text", "blip_caption"):  # each may be left out
                        if name in turn:
                            require_text(turn[name], where, name, empty_ok=True)
                    turn_ids.add(dia)
                    ts = start + index * self.turn_step_seconds
                    text = self._turn_text(turn)
                    counts["turns"] += 1
                    if not text:
                        counts["skipped_turns"] += 1
                        turn_ids.discard(dia)
                        continue
                    speaker = turn.get("speaker")
                    speaker = speaker.strip() if isinstance(speaker, str) else None
                    op = MemoryOp.store(
                        f"{cid}:{dia}",
                        ts,
                        text,
                        "event",
                        source_agent=speaker or None,
                        client_id=cid,
                        metadata={"dia_id": dia, "session": number},
                        origin=(where, None),
                    )
                    stores.append((ts, seq, op))
                    seq += 1
                    last_ts = ts if last_ts is None else max(last_ts, ts)
            qa = data.get("qa", conv.get("qa", []))
            if not isinstance(qa, list):
                raise ValueError(f"{file}: field 'qa' must be a list, got {describe(qa)}")
            asked = (last_ts if last_ts is not None else 0.0) + self.query_delay_seconds
            for j, item in enumerate(qa, start=1):
                qid = f"{cid}:q{j}"
                qwhere = f"{file}: qa[{j - 1}]"
                if not isinstance(item, dict):
                    raise ValueError(f"{qwhere}: expected a JSON object, got {describe(item)}")
                question = require_text(item.get("question"), qwhere, "question")
                counts["questions"] += 1
                category = item.get("category")
                if isinstance(category, str):
                    require_text(category, qwhere, "category")
                elif isinstance(category, bool) or not isinstance(category, int):
                    raise ValueError(f"{qwhere}: field 'category' must be an integer (1 to 5), "
                                     f"got {describe(category)}")
                per_category[category] = per_category.get(category, 0) + 1
                tags = [f"cat:{category}"]
                if category in CATEGORY_NAMES:
                    tags.append(CATEGORY_NAMES[category])
                relevant: dict[str, int] = {}
                evidence = item.get("evidence", [])
                if not isinstance(evidence, list):
                    evidence = [evidence]
                for raw in evidence:
                    ids, changed, bad = repair_evidence(raw, turn_ids)
                    if changed:
                        report.repaired.append({"qid": qid, "raw": raw, "fixed": ids})
                    for piece, reason in bad:
                        report.unrecoverable.append(
                            {"qid": qid, "raw": piece, "reason": reason, "question": question}
                        )
                    for dia in ids:
                        relevant.setdefault(f"{cid}:{dia}", 1)
                if not relevant:
                    tags.append("no-evidence")
                    report.no_evidence.append({"qid": qid, "question": question})
                answer = _answer(item, "answer", qwhere)
                if answer is None:
                    answer = _answer(item, "adversarial_answer", qwhere)
                query = Query(0, qid, asked, question, cid, None, relevant, (), tuple(tags), answer)
                queries.append((asked, seq, query))
                seq += 1
        if not stores:
            raise ValueError(f"{root}: no turn with text in {len(files)} conversation file(s); "
                             "nothing was written (an empty dataset is never published)")
        report.counts = {
            **counts,
            "repaired": len(report.repaired),
            "unrecoverable": len(report.unrecoverable),
            "no_evidence": len(report.no_evidence),
        }

        def cat_key(c: Any) -> tuple[int, str]:
            return (c, "") if isinstance(c, int) else (10**9, str(c))

        report.per_category = {
            CATEGORY_NAMES.get(c, f"category-{c}"): per_category[c]
            for c in sorted(per_category, key=cat_key)
        }
        meta = {
            "name": self.name or root.resolve().name,
            "version": self.version,
            "description": (
                f"LoCoMo: {counts['conversations']} long conversations imported as format v1 "
                "(one event per turn, one query per question, scoped to its conversation)."
            ),
            "license": "CC BY-NC 4.0",
            "source": (
                "Maharana et al., 'Evaluating Very Long-Term Conversational Memory of LLM "
                "Agents', ACL 2024, https://github.com/snap-research/locomo"
            ),
            # Turns are events: under the 30-day TTL they would expire between sessions, and
            # one conversation's questions must not change what the next one finds.
            "replay": {"expire": False, "touch_k": 0},
            # A learned stage is cross-fitted by conversation: it never answers questions
            # about a conversation it was trained on.
            "evaluation": {"group_by": "client"},
        }
        dataset = time_ordered_dataset(meta, stores, queries)
        report.dataset = dataset
        return dataset, report


def main_import_locomo(
    src: str | os.PathLike[str], out: str | os.PathLike[str], *, stream: TextIO | None = None
) -> int:
    """Command-line entry of ``memlab datasets import-locomo SRC OUT``; prints the report."""
    report = run_importer("locomo", src, out)
    print(report.summary(), file=sys.stdout if stream is None else stream)
    return 0
