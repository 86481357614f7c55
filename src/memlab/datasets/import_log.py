"""Importer of a generic JSONL or CSV chat / event log, with a column mapping.

``mapping`` names the source column of each memory field, ``"text=message,ts=time,
client_id=user"``: ``text`` and ``ts`` are required; ``type``, ``client_id``, ``source_agent``,
``key``, ``subject`` and ``id`` are optional (``type`` defaults to ``default_type``). A record
whose text is empty or whose timestamp is missing or unparsable is reported as not mapped with
its ``file:line`` (never dated by a guess); source columns no field maps are listed in the
report. Records are sorted by time (ties: file order).

The file is UTF-8, with or without a byte order mark. A CSV row with more fields than the header,
a malformed CSV, or a JSONL ``id`` used twice is an error naming ``file:line``; so is an import in
which no record maps to a memory (nothing is written: an empty dataset is never published).
"""

from __future__ import annotations

import csv
import io
import os
from pathlib import Path
from typing import Any

from memlab.datasets.format import MemoryOp, write_dataset
from memlab.datasets.importers import (
    ImportReport,
    parse_json,
    read_source_text,
    register_importer,
    require_memories,
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
        out[name] = column
    for need in ("text", "ts"):
        if need not in out:
            raise ValueError(f"log: field 'mapping': map {need}=<column>")
    return out


def _records(file: Path) -> list[tuple[int, Any]]:
    """``(line, record)`` of every record; a record that does not parse is a ``ValueError``.

    Raises:
        ValueError: Naming ``file:line`` for a CSV row longer than its header or a malformed
            CSV, and naming the file when it is not UTF-8.
    """
    text = read_source_text(file)  # utf-8-sig: a BOM would rename the first column
    if file.suffix.lower() == ".csv":
        reader = csv.DictReader(io.StringIO(text, newline=""))
        out: list[tuple[int, Any]] = []
        try:
            for row in reader:
                if None in row:  # DictReader's restkey: fields beyond the header
                    raise ValueError(
                        f"{file}:{reader.line_num}: the row has "
                        f"{len(reader.fieldnames or []) + len(row[None])} fields but the "
                        f"header has {len(reader.fieldnames or [])}"
                    )
                out.append((reader.line_num, row))
        except csv.Error as exc:
            line = reader.reader.line_num  # DictReader.line_num lags behind on an error
            raise ValueError(f"{file}:{line}: not a readable CSV row ({exc})") from None
        return out
    rows: list[tuple[int, Any]] = []
    for number, raw in enumerate(text.splitlines(), start=1):
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

    def run(self, src: str | os.PathLike[str], out: str | os.PathLike[str]) -> ImportReport:
        file = Path(src)
        if not file.is_file():
            raise ValueError(f"{file}: no such log file")
        report = ImportReport("log", str(file), str(out))
        found: list[tuple[float, int, MemoryOp]] = []
        seen_columns: set[str] = set()
        id_lines: dict[str, int] = {}
        m = self.mapping
        for number, row in _records(file):
            where = f"{file.name}:{number}"
            if isinstance(row, ValueError) or not isinstance(row, dict):
                report.unmapped.append({"where": where, "reason": str(row) if isinstance(
                    row, ValueError) else "not an object"})
                continue
            seen_columns |= set(row)
            text, ts = row.get(m["text"]), row.get(m["ts"])
            if not isinstance(text, str) or not text.strip():
                report.unmapped.append({"where": where, "reason": f"column {m['text']!r} "
                                        "(text) is missing or empty"})
                continue
            if ts in (None, ""):
                report.unmapped.append({"where": where, "reason": f"column {m['ts']!r} (ts) is "
                                        "missing: no timestamp is guessed"})
                continue
            try:
                when = parse_ts(str(ts), field="ts")
            except ValueError:
                report.unmapped.append({"where": where, "reason": f"column {m['ts']!r} (ts): "
                                        f"{ts!r} is not ISO 8601"})
                continue
            mtype = row.get(m["type"]) if "type" in m else self.default_type
            if mtype not in MEMORY_TYPES:
                report.unmapped.append({"where": where, "reason": f"column {m['type']!r} "
                                        f"(type): {mtype!r} is not a memory type"})
                continue
            extra = {
                f: str(row[m[f]]) for f in ("client_id", "source_agent", "key", "subject")
                if f in m and row.get(m[f]) not in (None, "")
            }
            ident = str(row[m["id"]]) if "id" in m and row.get(m["id"]) else f"L{number}"
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
            report.notes.append(f"columns not mapped: {', '.join(unused)}")
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
        report.dataset = write_dataset((meta, [t[2] for t in found], []), out)
        return report
