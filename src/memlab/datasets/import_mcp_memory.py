"""Importer of the knowledge graph written by the reference MCP memory server
(``@modelcontextprotocol/server-memory``): a JSONL file of ``{"type": "entity", "name",
"entityType", "observations": [...]}`` and ``{"type": "relation", "from", "to",
"relationType"}`` lines.

Each observation becomes a ``fact`` memory ``"<entity>: <observation>"`` with the entity as
``subject`` and ``{"entity", "entityType"}`` as metadata; a relation whose type is one of
memlab's writable relations becomes a ``relate`` line, any other is reported as not mapped.
The file carries no timestamps: ``ts`` must be given, either an ISO 8601 time or ``"mtime"``
(the file's modification time), and the report says which was used. The graph has no queries:
``queries.jsonl`` is empty until queries are recorded or written.

The file is UTF-8, with or without a byte order mark (text that is not UTF-8 is an error naming
``file:line``). A line that is not a JSON object (not JSON, ``NaN``, nested too deeply to
read), an entity or relation whose ``name``, ``entityType``, ``from``, ``to`` or
``relationType`` is not a string (a number, list, object, boolean or ``null``) or holds a
character UTF-8 cannot encode (a lone surrogate from a ``\\ud800`` escape), and an observation
that is not such a string, are reported as not mapped with their ``file:line`` and field; an
entity name used on two lines is an error naming both lines (its memory ids would repeat), and
so is a file from which no memory is mapped (an empty dataset is never published).
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from memlab.datasets.format import WRITABLE_RELATIONS, MemoryOp
from memlab.datasets.importers import (
    ImportReport,
    describe,
    parse_json,
    read_source_text,
    register_importer,
    require_memories,
    require_utf8_path,
    shown,
    source_lines,
    text_problem,
    write_imported,
)
from memlab.timeutil import parse_ts, to_iso


def resolve_ts(ts: str | None, file: Path, what: str) -> tuple[float, str]:
    """The one timestamp of a source without timestamps: an ISO time or ``"mtime"``.

    Raises:
        ValueError: When ``ts`` is not given (never guessed) or does not parse.
    """
    if ts is None:
        raise ValueError(
            f"{file}: {what} carries no timestamps; give ts=ISO-8601 or ts=mtime "
            "(the file's modification time): memlab does not guess one"
        )
    if ts == "mtime":
        when = file.stat().st_mtime
        return when, f"every timestamp is the file's modification time {to_iso(when)}"
    when = parse_ts(ts, field="ts")
    return when, f"every timestamp is the given ts {to_iso(when)}"


def _entity_refusal(obj: dict[str, Any]) -> str | None:
    """Why an entity line cannot be mapped (naming the field), or ``None``."""
    name, observations = obj.get("name"), obj.get("observations")
    if name is None or name == "":
        return "field 'name' is missing or empty: an entity without a name"
    problem = text_problem(name)
    if problem is not None:
        return f"field 'name' {problem}"
    if "entityType" in obj:
        problem = text_problem(obj["entityType"], empty_ok=True)
        if problem is not None:
            return f"field 'entityType' {problem}"
    if not isinstance(observations, list):
        return f"field 'observations' must be a list of strings, got {describe(observations)}"
    return None


def _relation_refusal(obj: dict[str, Any]) -> str | None:
    """Why a relation line cannot be mapped (naming the field), or ``None``."""
    for field in ("from", "to", "relationType"):
        problem = text_problem(obj.get(field))
        if problem is not None:
            return f"field '{field}' {problem}"
    rel = obj["relationType"]
    if rel not in WRITABLE_RELATIONS:
        return (f"relation {shown(rel)} has no memlab equivalent "
                f"(known: {', '.join(WRITABLE_RELATIONS)})")
    return None


@register_importer("mcp-memory")
class MCPMemoryImporter:
    """Convert a server-memory ``memory.jsonl`` into a dataset.

    Args:
        ts: ``"mtime"`` or an ISO 8601 time for every memory (required: the file has none).
        client_id: Client the memories belong to (default: none, visible to every client).
        source_agent: Recorded writer of the memories.
    """

    def __init__(
        self, *, ts: str | None = None, client_id: str | None = None,
        source_agent: str = "mcp-memory",
    ) -> None:
        self.ts = ts
        self.client_id = client_id
        self.source_agent = source_agent

    def run(self, src: str | os.PathLike[str], out: str | os.PathLike[str]) -> ImportReport:
        file = Path(src)
        if not file.is_file():
            raise ValueError(f"{file}: no such file (expected the server's memory.jsonl)")
        require_utf8_path(file)
        when, note = resolve_ts(self.ts, file, "the MCP memory graph")
        report = ImportReport("mcp-memory", str(file), str(out), notes=[note])
        stores: list[MemoryOp] = []
        relates: list[MemoryOp] = []
        counts = {"entities": 0, "observations": 0, "relations": 0}
        entity_lines: dict[str, int] = {}
        # A NUL is a JSON syntax error: its line is reported as not mapped.
        for number, raw in enumerate(source_lines(read_source_text(file, nul_ok=True)), start=1):
            if not raw.strip():
                continue
            where = f"{file.name}:{number}"
            try:
                obj: Any = parse_json(raw)
            except ValueError as exc:
                report.unmapped.append({"where": where, "reason": str(exc)})
                continue
            if not isinstance(obj, dict):
                report.unmapped.append({"where": where,
                                        "reason": f"not a JSON object: {describe(obj)}"})
                continue
            kind = obj.get("type")
            if kind == "entity":
                reason = _entity_refusal(obj)
                if reason is not None:
                    report.unmapped.append({"where": where, "reason": reason})
                    continue
                name, observations = obj["name"], obj["observations"]
                if name in entity_lines:  # its memory ids NAME#i would repeat
                    raise ValueError(
                        f"{file}:{number}: field 'name': entity {name!r} is already defined "
                        f"on line "
                        f"{entity_lines[name]}"
                    )
                entity_lines[name] = number
                counts["entities"] += 1
                for i, text in enumerate(observations, start=1):
                    problem = text_problem(text)
                    if problem is not None:
                        report.unmapped.append(
                            {"where": where, "reason": f"field 'observations' item {i} {problem}"}
                        )
                        continue
                    counts["observations"] += 1
                    stores.append(
                        MemoryOp.store(
                            f"{name}#{i}", when, f"{name}: {text}", "fact",
                            subject=name, client_id=self.client_id,
                            source_agent=self.source_agent,
                            metadata={"entity": name, "entityType": obj.get("entityType")},
                            origin=(str(file), number),
                        )
                    )
            elif kind == "relation":
                reason = _relation_refusal(obj)
                if reason is not None:
                    report.unmapped.append({"where": where, "reason": reason})
                    continue
                counts["relations"] += 1
                relates.append(MemoryOp.relate(when, obj["from"], obj["relationType"], obj["to"]))
            elif kind is None:
                report.unmapped.append({"where": where, "reason": "field 'type' is missing or "
                                        "null: neither an entity nor a relation"})
            elif isinstance(kind, str):
                report.unmapped.append({"where": where,
                                        "reason": f"unknown line type {shown(kind)}"})
            else:
                report.unmapped.append({"where": where, "reason": "field 'type' must be a "
                                        f"string, got {describe(kind)}"})
        require_memories(report, len(stores), counts["entities"] + counts["relations"])
        report.counts = counts | {"not_mapped": len(report.unmapped)}
        meta = {
            "name": file.stem,
            "version": "1",
            "description": f"MCP memory graph imported from {file.name}",
            "license": "unknown (the source's)",
            "source": "@modelcontextprotocol/server-memory",
        }
        report.dataset = write_imported((meta, stores + relates, []), out)
        return report
