"""Importer of a folder of agent memory notes in Markdown, as coding agents keep them.

Every ``*.md`` file under the folder (sorted by path) is read. A file may open with front
matter between ``---`` lines holding ``key: value`` pairs; ``date`` (ISO 8601) dates its
memories, ``client`` scopes them, ``type`` sets their memory type. Each bullet (``-``, ``*``,
``+``) is one memory; a section (a ``#`` heading and its paragraph) without bullets is one
memory ``"<heading>: <paragraph>"``. A file without a ``date`` is dated by its modification
time only when ``dates="mtime"`` is given, and the report says so; otherwise its memories are
reported as not mapped (a timestamp is never guessed silently).

Each file is UTF-8, with or without a byte order mark: text that is not UTF-8, a NUL character
and a file name that is not UTF-8 are errors naming the file (and line). A file whose ``date``
does not parse or has no time zone, whose ``type`` is unknown, whose ``client`` is empty or
whose front matter is never closed is reported as not mapped with its ``file:line``; an import
that maps no memory is an error and writes nothing.
"""

from __future__ import annotations

import os
import re
from pathlib import Path

from memlab.datasets.format import MemoryOp
from memlab.datasets.importers import (
    ImportReport,
    encoding_problem,
    read_source_text,
    register_importer,
    require_memories,
    require_utf8_path,
    shown,
    source_lines,
    ts_problem,
    write_imported,
)
from memlab.memory.records import MEMORY_TYPES
from memlab.timeutil import parse_ts, to_iso

# The text is stripped after the match: a lazy group followed by ``\s*$`` backtracks
# quadratically on a line with a long run of inner spaces.
_BULLET = re.compile(r"^\s*[-*+]\s+(?P<text>.*)$")
_HEADING = re.compile(r"^#{1,6}\s+(?P<title>.*)$")


def _front_matter(lines: list[str]) -> tuple[dict[str, tuple[str, int]], int] | None:
    """``{key: (value, line)}`` and the index of the first body line; ``None`` when the front
    matter opened on the first line is never closed."""
    if not lines or lines[0].strip() != "---":
        return {}, 0
    meta: dict[str, tuple[str, int]] = {}
    for i in range(1, len(lines)):
        if lines[i].strip() == "---":
            return meta, i + 1
        key, sep, value = lines[i].partition(":")
        if sep:
            meta[key.strip().lower()] = (value.strip().strip("'\""), i + 1)
    return None


@register_importer("markdown")
class MarkdownNotesImporter:
    """Convert a folder of Markdown memory notes into a dataset.

    Args:
        dates: ``"front-matter"`` (files without a ``date`` are not mapped) or ``"mtime"``
            (such files are dated by their modification time, reported per file).
        type: Memory type of notes whose front matter names none.
        source_agent: Recorded writer.
    """

    def __init__(
        self, *, dates: str = "front-matter", type: str = "fact", source_agent: str = "notes"
    ) -> None:
        if dates not in ("front-matter", "mtime"):
            raise ValueError(f"markdown: field 'dates' must be front-matter or mtime: {dates!r}")
        if type not in MEMORY_TYPES:
            raise ValueError(f"markdown: field 'type' must be one of {MEMORY_TYPES}: {type!r}")
        self.dates = dates
        self.type = type
        self.source_agent = source_agent

    def _items(self, body: list[tuple[int, str]]) -> list[tuple[int, str]]:
        items: list[tuple[int, str]] = []
        heading: tuple[int, str] | None = None
        para: list[str] = []
        bullets = False

        def flush() -> None:
            if heading is not None and para and not bullets:
                items.append((heading[0], f"{heading[1]}: {' '.join(para)}"))

        for number, line in body:
            h = _HEADING.match(line)
            b = _BULLET.match(line)
            if h:
                flush()
                title = h["title"].strip()
                heading, para, bullets = ((number, title) if title else None), [], False
            elif b:
                bullets = True
                if b["text"].strip():  # an empty bullet holds no memory
                    items.append((number, b["text"].strip()))
            elif line.strip():
                para.append(line.strip())
        flush()
        return sorted(items)

    def run(self, src: str | os.PathLike[str], out: str | os.PathLike[str]) -> ImportReport:
        root = Path(src)
        if not root.is_dir():
            raise ValueError(f"{root}: not a directory of Markdown notes")
        report = ImportReport("markdown", str(root), str(out))
        found: list[tuple[float, str, int, MemoryOp]] = []
        require_utf8_path(root)
        files = sorted(p for p in root.rglob("*.md") if p.is_file())
        for file in files:
            rel = file.relative_to(root).as_posix()
            if encoding_problem(rel) is not None:  # the memory ids are made of it
                raise ValueError(f"{file}: the file name is not UTF-8; rename it")
            lines = source_lines(read_source_text(file))  # a BOM would hide the front matter
            front = _front_matter(lines)
            if front is None:
                report.unmapped.append({"where": f"{rel}:1", "reason": "the front matter opened "
                                        "here is never closed (no second '---' line)"})
                continue
            meta, start = front
            body = list(enumerate(lines, start=1))[start:]
            items = self._items(body)
            if "date" in meta:
                value, line = meta["date"]
                problem = ts_problem(value)
                if problem is not None:
                    report.unmapped.append({"where": f"{rel}:{line}",
                                            "reason": f"field 'date': {problem}"})
                    continue
                when = parse_ts(value, field="date")
            elif self.dates == "mtime":
                when = file.stat().st_mtime
                report.notes.append(f"{rel}: no date; dated by its modification time "
                                    f"{to_iso(when)}")
            else:
                for number, _ in items:
                    report.unmapped.append({
                        "where": f"{rel}:{number}",
                        "reason": "the file has no date in its front matter (dates=mtime "
                        "would use the file time)",
                    })
                continue
            mtype = meta.get("type", (self.type, 0))[0]
            if mtype not in MEMORY_TYPES:
                report.unmapped.append({"where": f"{rel}:{meta['type'][1]}",
                                        "reason": f"field 'type': unknown type {shown(mtype)}"})
                continue
            client = meta.get("client", (None, 0))[0]
            if client is not None and not client:
                report.unmapped.append({"where": f"{rel}:{meta['client'][1]}",
                                        "reason": "field 'client' is empty"})
                continue
            for number, text in items:
                op = MemoryOp.store(
                    f"{rel}:{number}", when, text, mtype, client_id=client,
                    source_agent=self.source_agent, metadata={"file": rel, "line": number},
                    origin=(str(file), number),
                )
                found.append((when, rel, number, op))
        require_memories(report, len(found))
        found.sort(key=lambda t: (t[0], t[1], t[2]))
        report.counts = {
            "files": len(files), "memories": len(found), "not_mapped": len(report.unmapped),
        }
        meta_toml = {
            "name": root.name,
            "version": "1",
            "description": f"Markdown memory notes imported from {root.name}",
            "license": "unknown (the source's)",
            "source": "agent memory notes (Markdown)",
        }
        report.dataset = write_imported((meta_toml, [t[3] for t in found], []), out)
        return report
