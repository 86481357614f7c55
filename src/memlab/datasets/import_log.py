"""Importer of a generic JSONL or CSV chat / event log, with a column mapping.

``mapping`` names the source column of each memory field, ``"text=message,ts=time,
client_id=user"``: ``text`` and ``ts`` are required; ``type``, ``client_id``, ``source_agent``,
``key``, ``subject`` and ``id`` are optional (``type`` defaults to ``default_type``). A record
is reported as not mapped with its ``file:line`` and the column at fault (never dated by a
guess, never mapped in part) when its text is empty, its timestamp missing, unparsable or
without a time zone, or a mapped value is not a string (a JSON number, list, object, boolean or
``null`` where a string is expected; an optional column left out of a JSONL record, or an empty
CSV cell, is no value) or holds a character UTF-8 cannot encode (a lone surrogate
from a ``\\ud800`` escape); a JSONL line that is not a JSON object (``NaN`` and ``Infinity`` are
not JSON) likewise. Source columns no field maps are listed in the report. Records are sorted
by time (ties: file order).

The file is UTF-8, with or without a byte order mark. Text that is not UTF-8, a CSV with a NUL
character, a CSV row with more or fewer fields than the header, a quoted CSV field never
closed, any other malformed CSV row, a CSV header that lacks a mapped column or names it twice,
and a JSONL ``id`` used twice are errors naming ``file:line``; so is an import in which no
record maps to a memory (nothing is written: an empty dataset is never published).
"""

from __future__ import annotations

import csv
import io
import os
from pathlib import Path
from typing import Any

from memlab.datasets.format import MemoryOp
from memlab.datasets.importers import (
    ImportReport,
    describe,
    encoding_problem,
    parse_json,
    read_source_text,
    register_importer,
    require_memories,
    require_utf8_path,
    shown,
    source_lines,
    text_problem,
    ts_problem,
    write_imported,
)
from memlab.memory.records import MEMORY_TYPES
from memlab.timeutil import parse_ts

FIELDS = ("text", "ts", "type", "client_id", "source_agent", "key", "subject", "id")


def parse_mapping(text: str) -> dict[str, str]:
    """``"text=message,ts=time"`` → ``{"text": "message", "ts": "time"}``.

    Raises:
        ValueError: On a malformed pair, an unknown field, or a missing ``text`` or ``ts``.
    """
    out: dict[str, str] = {}
    for pair in text.split(","):
        name, sep, column = pair.partition("=")
        name, column = name.strip(), column.strip()
        if not sep or not name or not column:
            raise ValueError(f"log: field 'mapping': write field=column, got {pair!r}")
        if name not in FIELDS:
            raise ValueError(
                f"log: field 'mapping': unknown field {name!r}; known: {', '.join(FIELDS)}"
            )
        if name in out:
            raise ValueError(
                f"log: field 'mapping': {name!r} is mapped twice ({out[name]!r} and {column!r})"
            )
        out[name] = column
    for need in ("text", "ts"):
        if need not in out:
            raise ValueError(f"log: field 'mapping': map {need}=<column>")
    return out


def _csv_records(file: Path, text: str, mapping: dict[str, str]) -> list[tuple[int, Any]]:
    """``(line, row)`` of every CSV row, ``line`` being the line the row starts on.

    Raises:
        ValueError: ``file:line`` of a malformed row: a quoted field never closed, text after
            a closing quote, a field over the size limit, a row with more or fewer fields than
            the header; of a header naming a mapped column twice or not at all.
    """
    reader = csv.reader(io.StringIO(text, newline=""), strict=True)
    header: list[str] | None = None
    header_line = 0
    out: list[tuple[int, Any]] = []
    while True:
        start = reader.line_num + 1
        try:
            row = next(reader)
        except StopIteration:
            break
        except csv.Error as exc:
            raise ValueError(_csv_error(file, text, start, header, exc)) from None
        if not row or (len(row) == 1 and not row[0].strip()):
            continue  # a blank line
        if header is None:
            header, header_line = row, start
            _check_header(file, header_line, header, mapping)
            continue
        if len(row) != len(header):
            raise ValueError(f"{file}:{start}: the row has {len(row)} fields but the header "
                             f"has {len(header)}")
        out.append((start, dict(zip(header, row, strict=True))))
    return out


def _check_header(file: Path, line: int, header: list[str], mapping: dict[str, str]) -> None:
    for field, column in mapping.items():
        n = header.count(column)
        if n == 0:
            columns = ", ".join(repr(c) for c in header)
            raise ValueError(f"{file}:{line}: column {column!r} ({field}) is not in the header "
                             f"(its columns: {columns})")
        if n > 1:
            raise ValueError(f"{file}:{line}: column {column!r} ({field}) appears {n} times in "
                             "the header: which one is meant is not known")


def _csv_error(file: Path, text: str, start: int, header: list[str] | None,
               exc: csv.Error) -> str:
    """The message of a CSV row the strict reader refused (the row starts on line ``start``)."""
    if "unexpected end of data" not in str(exc):
        return f"{file}:{start}: not a readable CSV row ({exc})"
    # A quote opened and never closed: the lenient reader shows which field it opened.
    rest = "".join(io.StringIO(text, newline="").readlines()[start - 1:])
    fields = next(csv.reader(io.StringIO(rest, newline="")), [])
    index = max(len(fields) - 1, 0)
    column = (f"column {header[index]!r}" if header is not None and index < len(header)
              else f"field {index + 1}")
    return (f"{file}:{start}: {column}: its quoted text is never closed (it would run to the "
            "end of the file)")


def _records(file: Path, mapping: dict[str, str]) -> list[tuple[int, Any]]:
    """``(line, record)`` of every record; a JSONL line that does not parse is a ``ValueError``
    in place of its record.

    Raises:
        ValueError: Naming ``file:line`` for a malformed CSV (see :func:`_csv_records`), for
            text that is not UTF-8 and for a NUL character in a CSV.
    """
    csv_file = file.suffix.lower() == ".csv"
    # utf-8-sig: a BOM would rename the first column. A JSONL line with a NUL is reported as
    # not JSON with its line.
    text = read_source_text(file, nul_ok=not csv_file)
    if csv_file:
        return _csv_records(file, text, mapping)
    rows: list[tuple[int, Any]] = []
    for number, raw in enumerate(source_lines(text), start=1):
        if raw.strip():
            try:
                rows.append((number, parse_json(raw)))
            except ValueError as exc:
                rows.append((number, exc))
    return rows


@register_importer("log")
class LogImporter:
    """Convert a JSONL or CSV log into a dataset.

    Args:
        mapping: ``field=column`` pairs (see the module docstring); required.
        default_type: Memory type of records without a mapped ``type``.
    """

    def __init__(self, *, mapping: str | None = None, default_type: str = "event") -> None:
        if mapping is None:
            raise ValueError("log: give a column mapping, e.g. mapping=text=message,ts=time")
        self.mapping = parse_mapping(mapping)
        if default_type not in MEMORY_TYPES:
            raise ValueError(f"log: field 'default_type' must be one of {MEMORY_TYPES}")
        self.default_type = default_type

    def _refusal(self, row: dict[str, Any]) -> str | None:
        """Why a record cannot be a memory (naming the column and the field), or ``None``."""
        m = self.mapping
        text, ts = row.get(m["text"]), row.get(m["ts"])
        if text is None or text == "":
            return f"column {m['text']!r} (text) is missing or empty"
        problem = text_problem(text)
        if problem is not None:
            return f"column {m['text']!r} (text) {problem}"
        if ts is None or ts == "":
            return f"column {m['ts']!r} (ts) is missing: no timestamp is guessed"
        if not isinstance(ts, str):
            return f"column {m['ts']!r} (ts) must be an ISO 8601 string, got {describe(ts)}"
        reason = ts_problem(ts)
        if reason is not None:
            return f"column {m['ts']!r} (ts): {reason}"
        if "type" in m:
            mtype = row.get(m["type"])
            if mtype is None:
                return f"column {m['type']!r} (type) is missing"
            if not isinstance(mtype, str):
                return f"column {m['type']!r} (type) must be a string, got {describe(mtype)}"
            if mtype not in MEMORY_TYPES:
                return f"column {m['type']!r} (type): {shown(mtype)} is not a memory type"
        for field in ("client_id", "source_agent", "key", "subject", "id"):
            if field not in m or m[field] not in row or row[m[field]] == "":
                continue  # an optional field left out (or a CSV cell left empty)
            value = row[m[field]]
            if value is None:  # left out would mean no value; null may mean anything
                return (f"column {m[field]!r} ({field}) is null: leave the column out of the "
                        "record for no value")
            problem = text_problem(value)
            if problem is not None:
                return f"column {m[field]!r} ({field}) {problem}"
        return None

    def run(self, src: str | os.PathLike[str], out: str | os.PathLike[str]) -> ImportReport:
        file = Path(src)
        if not file.is_file():
            raise ValueError(f"{file}: no such log file")
        require_utf8_path(file)
        report = ImportReport("log", str(file), str(out))
        found: list[tuple[float, int, MemoryOp]] = []
        seen_columns: set[str] = set()
        id_lines: dict[str, int] = {}
        m = self.mapping
        for number, row in _records(file, m):
            where = f"{file.name}:{number}"
            if isinstance(row, ValueError) or not isinstance(row, dict):
                reason = str(row) if isinstance(row, ValueError) else (
                    f"not a JSON object: {describe(row)}")
                report.unmapped.append({"where": where, "reason": reason})
                continue
            seen_columns |= set(row)
            reason = self._refusal(row)
            if reason is not None:
                report.unmapped.append({"where": where, "reason": reason})
                continue
            text, when = row[m["text"]], parse_ts(row[m["ts"]], field="ts")
            mtype = row[m["type"]] if "type" in m else self.default_type
            extra = {
                f: row[m[f]] for f in ("client_id", "source_agent", "key", "subject")
                if f in m and row.get(m[f], "") != ""
            }
            ident = row[m["id"]] if "id" in m and row.get(m["id"], "") != "" else f"L{number}"
            if ident in id_lines:  # checked here, so the error names the source line
                raise ValueError(
                    f"{file}:{number}: column {m.get('id', 'id')!r} (id): {ident!r} is "
                    f"already the id of line {id_lines[ident]}"
                )
            id_lines[ident] = number
            found.append((when, number, MemoryOp.store(ident, when, text, mtype,
                                                       origin=(str(file), number), **extra)))
        unused = sorted(seen_columns - set(m.values()))
        if unused:
            shown = (c if encoding_problem(c) is None else ascii(c) for c in unused)
            report.notes.append(f"columns not mapped: {', '.join(shown)}")
        if found:
            absent = [f"{c!r} ({f})" for f, c in m.items() if c not in seen_columns]
            if absent:
                report.notes.append(f"mapped columns in no record: {', '.join(absent)}")
        require_memories(report, len(found))
        found.sort(key=lambda t: (t[0], t[1]))
        report.counts = {"records": len(found) + len(report.unmapped), "memories": len(found),
                         "not_mapped": len(report.unmapped)}
        meta = {
            "name": file.stem,
            "version": "1",
            "description": f"log imported from {file.name}",
            "license": "unknown (the source's)",
            "source": "chat or event log",
        }
        report.dataset = write_imported((meta, [t[2] for t in found], []), out)
        return report
