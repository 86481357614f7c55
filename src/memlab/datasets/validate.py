"""Check a dataset directory against format v1 and report every problem found.

The checker never raises on bad input: each problem becomes a :class:`Problem` naming the file,
line and field at fault, e.g. ``memories.jsonl:12: field 'ts': goes backwards ...``. It covers
missing files, bytes that are not UTF-8, unparsable TOML or JSON, lines that are not objects,
missing, unknown or mistyped fields, unknown types, ops and relations, empty text, duplicate ids
and qids, timestamps that do not parse or go backwards, relevant and stale ids that do not exist
or are written after the query, grades that are not integers in ``[1, MAX_GRADE]``, numbers too
large to convert (a 400-digit ``confidence`` or ``touch_k``), and forget targets that are
unknown, written later or decisions (which are immutable); the same for the targets of correct
and promote lines. An optional ``judgments.jsonl`` is checked line by line (known qid, grade 0-2,
source, judge, ts).
"""

from __future__ import annotations

import functools
import hashlib
import json
import math
import os
import re
import sys
import tomllib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TextIO

from memlab.datasets.format import (
    DATASET_FILES,
    JUDGMENT_SOURCES,
    JUDGMENTS_FILE,
    MEMORIES_FILE,
    META_FILE,
    META_KEYS,
    OPS,
    PAYLOAD_FIELDS,
    QUERIES_FILE,
    WRITABLE_RELATIONS,
    MemoryOp,
    Query,
)
from memlab.memory.records import (
    AUTHORITY_LEVELS,
    CATEGORIES,
    IMPORTANCE_LEVELS,
    KNOWLEDGE_CATEGORIES,
    MAX_JSON_DEPTH,
    MEMORY_TYPES,
    json_problem,
)
from memlab.memory.scopes import check_name, check_scope
from memlab.timeutil import parse_ts, to_iso

_ENUM_FIELDS: dict[str, tuple[str, ...]] = {
    "importance": IMPORTANCE_LEVELS,
    "category": CATEGORIES,
    "knowledge_category": KNOWLEDGE_CATEGORIES,
    "authority": AUTHORITY_LEVELS,
}
_STRING_FIELDS = ("source_agent", "client_id", "key", "subject", "status_value")
_COMMON_KEYS = ("op", "id", "ts")
_OP_KEYS: dict[str, tuple[str, ...]] = {
    "store": ("text", "type", *PAYLOAD_FIELDS),
    "forget": ("target", "reason"),
    "relate": ("from", "relation", "to", "client_id", "scope", "properties"),
    "correct": ("target", "text", "reason", "source_agent"),
    "promote": ("target",),
    "consolidate": ("client_id", "scope", "since"),
}
#: Ops whose ``id`` is a memory (a store, or the new memory of a correction).
_MEMORY_OPS = ("store", "correct")
#: Ops whose ``target`` must be an earlier memory that is not a decision.
_TARGET_OPS = ("forget", "correct", "promote")
_QUERY_KEYS = (
    "qid", "ts", "text", "client_id", "agent", "projects", "at_time", "include_superseded",
    "relevant", "stale", "tags", "answer", "served",
)
_JUDGMENT_KEYS = ("qid", "mem_id", "grade", "source", "judge", "ts", "note")
MAX_GRADE = 1_000_000
"""The largest relevance grade of ``queries.jsonl`` (grades are small integers: 1, 2, 3 on the
usual scales; the bound keeps every grade a 32-bit integer, as trec_eval and the metric frames
read it, and bounds an ir_measures ``rel`` threshold)."""


@dataclass(frozen=True, slots=True)
class Problem:
    """One thing wrong with a dataset.

    Attributes:
        file: File name inside the dataset directory (or the directory itself).
        line: 1-based line number, or ``None`` for file-level problems.
        field: Field at fault, or ``None``.
        message: What is wrong.
    """

    file: str
    line: int | None
    field: str | None
    message: str

    def __str__(self) -> str:
        where = self.file if self.line is None else f"{self.file}:{self.line}"
        if self.field is not None:
            return f"{where}: field '{self.field}': {self.message}"
        return f"{where}: {self.message}"


@dataclass(slots=True)
class ReadResult:
    """Everything :func:`read_dataset` learnt about a directory.

    Attributes:
        problems: Every problem, in file then line order.
        unreadable: The subset that kept a file or line from being read at all.
        meta: Contents of ``dataset.toml`` (empty when unreadable).
        ops: Operations whose line could be read.
        queries: Queries whose line could be read.
        digests: SHA-256 of each file that exists.
    """

    problems: list[Problem] = field(default_factory=list)
    unreadable: list[Problem] = field(default_factory=list)
    meta: dict[str, Any] = field(default_factory=dict)
    ops: list[MemoryOp] = field(default_factory=list)
    queries: list[Query] = field(default_factory=list)
    digests: dict[str, str] = field(default_factory=dict)


def _type_name(value: Any) -> str:
    if value is None:
        return "null"
    return {
        bool: "boolean",
        int: "integer",
        float: "number",
        str: "string",
        list: "array",
        dict: "object",
    }.get(type(value), type(value).__name__)


class _LineChecker:
    """Collects the problems of one JSON line."""

    def __init__(self, file: str, line: int, obj: dict[str, Any]) -> None:
        self.file = file
        self.line = line
        self.obj = obj
        self.problems: list[Problem] = []

    def add(self, fld: str | None, message: str) -> None:
        self.problems.append(Problem(self.file, self.line, fld, message))

    def _present(self, name: str, *, required: bool) -> bool:
        """Whether the field has a value; a required field without one is a problem."""
        if name not in self.obj or self.obj[name] is None:
            if required:
                self.add(name, "missing")
            return False
        return True

    def string(self, name: str, *, required: bool, nonempty: bool = True) -> str | None:
        if not self._present(name, required=required):
            return None
        value = self.obj[name]
        if not isinstance(value, str):
            self.add(name, f"must be a string, got {_type_name(value)}")
            return None
        if nonempty and not value.strip():
            self.add(name, "must not be empty")
            return None
        return value

    def timestamp(self, name: str, *, required: bool) -> float | None:
        if not self._present(name, required=required):
            return None
        value = self.obj[name]
        if not isinstance(value, str):
            self.add(name, f"must be an ISO 8601 string, got {_type_name(value)}")
            return None
        try:
            return parse_ts(value, field=name)
        except ValueError as exc:
            detail = str(exc)
            for head in (f"field '{name}': ", f"field '{name}' is "):
                detail = detail.removeprefix(head)
            self.add(name, detail)
            return None

    def enum(self, name: str, allowed: tuple[str, ...], *, required: bool, what: str) -> str | None:
        value = self.string(name, required=required)
        if value is not None and value not in allowed:
            self.add(name, f"unknown {what} {value!r}; expected one of {', '.join(allowed)}")
            return None
        return value

    def scope(self, name: str) -> str | None:
        value = self.string(name, required=False)
        if value is None:
            return None
        try:
            return check_scope(value, name)
        except ValueError as exc:
            self.add(name, str(exc).split(": ", 1)[-1])
            return None

    def unit_number(self, name: str) -> float | None:
        if not self._present(name, required=False):
            return None
        value = self.obj[name]
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            self.add(name, f"must be a number, got {_type_name(value)}")
            return None
        if not 0.0 <= value <= 1.0:  # compared exactly: a huge int is not converted
            self.add(name, f"must lie in [0, 1], got {_short(value)}")
            return None
        return float(value)

    def unknown_keys(self, allowed: tuple[str, ...], what: str) -> None:
        for key in self.obj:
            if key not in allowed:
                self.add(key, f"unknown field for {what}")


def _short(value: Any, limit: int = 40) -> str:
    """``repr(value)`` cut to ``limit`` characters (a 400-digit number is not echoed whole)."""
    text = repr(value)
    if len(text) <= limit:
        return text
    return f"{text[: limit - 10]}... ({len(text)} characters)"


def _refuse_constant(name: str) -> Any:
    raise ValueError(f"{name} is not a JSON number")


def _finite_float(text: str) -> float:
    value = float(text)
    if not math.isfinite(value):
        raise ValueError(f"{text} is out of range for a number")
    return value


def _read_lines(
    path: Path, name: str, result: ReadResult
) -> list[tuple[int, dict[str, Any]]] | None:
    """Decode and parse a JSONL file; problems go into ``result``. ``None`` if it is missing."""
    file = path / name
    if not file.is_file():
        what = "not a file" if file.exists() or file.is_symlink() else "missing file"
        problem = Problem(name, None, None, what)
        result.problems.append(problem)
        result.unreadable.append(problem)
        return None
    data = file.read_bytes()
    result.digests[name] = hashlib.sha256(data).hexdigest()
    pieces = data.split(b"\n")
    if pieces and pieces[-1] == b"":
        pieces.pop()
    out: list[tuple[int, dict[str, Any]]] = []
    for number, raw in enumerate(pieces, start=1):
        bad: Problem | None = None
        try:
            text = raw.decode("utf-8")
        except UnicodeDecodeError as exc:
            byte = raw[exc.start]
            bad = Problem(
                name, number, None, f"not valid UTF-8 (byte 0x{byte:02x} at column {exc.start + 1})"
            )
        else:
            if not text.strip():
                continue
            duplicates: list[str] = []

            def pairs(items: list[tuple[str, Any]], dup: list[str] = duplicates) -> dict[str, Any]:
                seen: dict[str, Any] = {}
                for key, value in items:
                    if key in seen:
                        dup.append(key)
                    seen[key] = value
                return seen

            try:
                obj = json.loads(
                    text,
                    object_pairs_hook=pairs,
                    parse_constant=_refuse_constant,
                    parse_float=_finite_float,
                )
            except json.JSONDecodeError as exc:
                bad = Problem(name, number, None, f"invalid JSON: {exc.msg} (column {exc.colno})")
            except ValueError as exc:  # NaN, Infinity, 1e999, an int of 5000 digits
                why = str(exc)
                if "integer string conversion" in why:
                    why = "a number has more than 4300 digits"
                bad = Problem(name, number, None, f"invalid JSON: {why}")
            except RecursionError:
                bad = Problem(
                    name, number, None, f"invalid JSON: nested deeper than {MAX_JSON_DEPTH} levels"
                )
            else:
                if not isinstance(obj, dict):
                    bad = Problem(
                        name, number, None, f"expected a JSON object, got {_type_name(obj)}"
                    )
                elif (found := json_problem(obj)) is not None:
                    bad = Problem(name, number, found[0], found[1])
                else:
                    for key in duplicates:
                        problem = Problem(name, number, key, "duplicate key in object")
                        result.problems.append(problem)
                        result.unreadable.append(problem)
                    out.append((number, obj))
        if bad is not None:
            result.problems.append(bad)
            result.unreadable.append(bad)
    return out


def _toml_line(text: str, key: str) -> int | None:
    match = re.search(rf"^[ \t]*\"?{re.escape(key)}\"?[ \t]*=", text, flags=re.MULTILINE)
    return None if match is None else text.count("\n", 0, match.start()) + 1


def _table_line(text: str, name: str) -> int | None:
    """The line of ``dataset.toml`` where table ``name`` starts (its ``[name`` header, else its
    ``name = …`` key)."""
    at = text.find(f"[{name}")
    return text.count("\n", 0, at) + 1 if at >= 0 else _toml_line(text, name)


def _deep_toml_line(text: str, limit: int = MAX_JSON_DEPTH) -> int | None:
    """The line of TOML ``text`` where arrays and inline tables first nest deeper than
    ``limit`` (brackets inside strings and comments do not count; ``None``: nowhere)."""
    depth, line, quote, comment, escaped = 0, 1, "", False, False
    for char in text:
        if char == "\n":
            line, comment, quote = line + 1, False, ""  # a one-line string ends with its line
        elif comment:
            continue
        elif quote:
            if escaped:
                escaped = False
            elif char == "\\" and quote == '"':
                escaped = True
            elif char == quote:
                quote = ""
        elif char in "\"'":
            quote = char
        elif char == "#":
            comment = True
        elif char in "[{":
            depth += 1
            if depth > limit:
                return line
        elif char in "]}":
            depth = max(depth - 1, 0)
    return None


def _check_meta(path: Path, result: ReadResult) -> None:
    file = path / META_FILE
    problems: list[Problem] = []
    if not file.is_file():
        problems.append(Problem(META_FILE, None, None, "missing file"))
        result.problems += problems
        result.unreadable += problems
        return
    data = file.read_bytes()
    result.digests[META_FILE] = hashlib.sha256(data).hexdigest()
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        line = data.count(b"\n", 0, exc.start) + 1
        byte = data[exc.start]
        problems.append(Problem(META_FILE, line, None, f"not valid UTF-8 (byte 0x{byte:02x})"))
        result.problems += problems
        result.unreadable += problems
        return
    try:
        meta = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        match = re.search(r"at line (\d+)", str(exc))
        line = int(match.group(1)) if match else None
        problems.append(Problem(META_FILE, line, None, f"invalid TOML: {exc}"))
        result.problems += problems
        result.unreadable += problems
        return
    except RecursionError:  # the parser recurses once per nested array or inline table
        problems.append(Problem(META_FILE, _deep_toml_line(text), None,
                                "invalid TOML: nested too deeply to read"))
        result.problems += problems
        result.unreadable += problems
        return
    for key in META_KEYS:
        line = _toml_line(text, key)
        if key not in meta:
            problems.append(Problem(META_FILE, None, key, "missing"))
        elif not isinstance(meta[key], str):
            problems.append(
                Problem(META_FILE, line, key, f"must be a string, got {_type_name(meta[key])}")
            )
        elif not meta[key].strip():
            problems.append(Problem(META_FILE, line, key, "must not be empty"))
    if "replay" in meta:
        from memlab.eval.replay import ReplayConfig

        try:
            ReplayConfig.from_mapping(meta["replay"], where="[replay]")
        except (TypeError, ValueError, OverflowError) as exc:
            problems.append(Problem(META_FILE, _table_line(text, "replay"), "replay", str(exc)))
    if "evaluation" in meta:
        from memlab.eval.protocol import EvalProtocol

        try:
            EvalProtocol.from_mapping(meta["evaluation"], where="[evaluation]")
        except (TypeError, ValueError, OverflowError) as exc:
            problems.append(
                Problem(META_FILE, _table_line(text, "evaluation"), "evaluation", str(exc))
            )
    result.problems += problems
    result.meta = meta


@dataclass(slots=True)
class _Written:
    """What the query checks need to know about an id in the write log."""

    line: int
    op: str
    ts: float | None
    type: str | None = None


def _check_memory_line(
    number: int, obj: dict[str, Any]
) -> tuple[_LineChecker, str | None, str | None, float | None, MemoryOp | None]:
    chk = _LineChecker(MEMORIES_FILE, number, obj)
    kind: str | None = "store"
    if "op" in obj:
        kind = chk.enum("op", OPS, required=True, what="op")
    ident = chk.string("id", required=kind in _MEMORY_OPS)
    ts = chk.timestamp("ts", required=True)
    if kind is None:
        return chk, None, ident, ts, None
    chk.unknown_keys(_COMMON_KEYS + _OP_KEYS[kind], f"a {kind} line")
    if kind == "store":
        text = chk.string("text", required=True)
        mtype = chk.enum("type", MEMORY_TYPES, required=True, what="memory type")
        fields: dict[str, Any] = {}
        for name in _STRING_FIELDS:
            value = chk.string(name, required=False)
            if value is not None:
                fields[name] = value
        for name, allowed in _ENUM_FIELDS.items():
            value = chk.enum(name, allowed, required=False, what=name.replace("_", " "))
            if value is not None:
                fields[name] = value
        valid_from = chk.timestamp("valid_from", required=False)
        if valid_from is not None:
            fields["valid_from"] = valid_from
        metadata = obj.get("metadata")
        if metadata is not None and not isinstance(metadata, dict):
            chk.add("metadata", f"must be an object, got {_type_name(metadata)}")
        elif metadata is not None:
            fields["metadata"] = metadata
        confidence = chk.unit_number("confidence")
        if confidence is not None:
            fields["confidence"] = confidence
        scope = chk.scope("scope")
        if scope is not None:
            fields["scope"] = scope
        fields = {k: fields[k] for k in PAYLOAD_FIELDS if k in fields}
        built = None
        if not chk.problems and ts is not None and text is not None and mtype is not None:
            built = MemoryOp(number, "store", ident, ts, text, mtype, fields)
        return chk, kind, ident, ts, built
    if kind == "correct":
        target = chk.string("target", required=True)
        text = chk.string("text", required=True)
        reason = chk.string("reason", required=True)
        agent = chk.string("source_agent", required=False)
        built = None
        if not chk.problems and None not in (ts, target, text, reason):
            extra = {} if agent is None else {"source_agent": agent}
            built = MemoryOp(
                number, "correct", ident, ts, text=text, target=target, reason=reason, fields=extra
            )
        return chk, kind, ident, ts, built
    if kind == "promote":
        target = chk.string("target", required=True)
        built = None
        if not chk.problems and ts is not None and target is not None:
            built = MemoryOp(number, "promote", ident, ts, target=target)
        return chk, kind, ident, ts, built
    if kind == "consolidate":
        extra: dict[str, Any] = {}
        client = chk.string("client_id", required=False)
        if client is not None:
            extra["client_id"] = client
        scope = chk.scope("scope")
        if scope is not None:
            extra["scope"] = scope
        since = chk.timestamp("since", required=False)
        if since is not None:
            extra["since"] = since
        built = None
        if not chk.problems and ts is not None:
            built = MemoryOp(number, "consolidate", ident, ts, fields=extra)
        return chk, kind, ident, ts, built
    if kind == "forget":
        target = chk.string("target", required=True)
        reason = chk.string("reason", required=False, nonempty=False)
        built = None
        if not chk.problems and ts is not None and target is not None:
            built = MemoryOp(number, "forget", ident, ts, target=target, reason=reason)
        return chk, kind, ident, ts, built
    src = chk.string("from", required=True)
    if obj.get("relation") == "co_occurrence":
        chk.add(
            "relation",
            "co_occurrence is derived from memories, not written; expected one of "
            + ", ".join(WRITABLE_RELATIONS),
        )
        relation = None
    else:
        relation = chk.enum("relation", WRITABLE_RELATIONS, required=True, what="relation")
    dst = chk.string("to", required=True)
    client = chk.string("client_id", required=False)
    scope = chk.scope("scope")
    properties = obj.get("properties")
    if properties is not None and not isinstance(properties, dict):
        chk.add("properties", f"must be an object, got {_type_name(properties)}")
    built = None
    if not chk.problems and ts is not None and None not in (src, relation, dst):
        built = MemoryOp.relate(ts, src, relation, dst, id=ident, line=number, scope=scope,
                                client_id=client, properties=properties or None)
    return chk, kind, ident, ts, built


def _check_memories(
    lines: list[tuple[int, dict[str, Any]]], result: ReadResult
) -> tuple[dict[str, _Written], dict[str, tuple[int, float | None]]]:
    """Per-line and cross-line checks of the write log; returns ids and forgets by target."""
    written: dict[str, _Written] = {}
    forgotten: dict[str, tuple[int, float | None]] = {}
    pending_forgets: list[tuple[_LineChecker, str, float | None, str]] = []
    previous: tuple[int, float] | None = None
    for number, obj in lines:
        chk, kind, ident, ts, built = _check_memory_line(number, obj)
        result.unreadable += chk.problems
        if ts is not None:
            if previous is not None and ts < previous[1]:
                chk.add(
                    "ts",
                    f"goes backwards: {to_iso(ts)} is before {to_iso(previous[1])} "
                    f"on line {previous[0]}",
                )
            previous = (number, ts)
        if ident is not None:
            if ident in written:
                chk.add("id", f"duplicate id {ident!r} (first on line {written[ident].line})")
            else:
                mtype = obj.get("type") if isinstance(obj.get("type"), str) else None
                if kind == "correct":
                    target = obj.get("target")
                    found = written.get(target) if isinstance(target, str) else None
                    mtype = None if found is None else found.type
                written[ident] = _Written(number, kind or "?", ts, mtype)
        if kind in _TARGET_OPS and isinstance(obj.get("target"), str) and obj["target"].strip():
            pending_forgets.append((chk, obj["target"], ts, kind))
        result.problems += chk.problems
        if built is not None:
            result.ops.append(built)
    for chk, target, ts, kind in pending_forgets:
        found = written.get(target)
        if found is None:
            message = f"unknown id {target!r}"
        elif found.op not in _MEMORY_OPS:
            message = f"id {target!r} (line {found.line}) is not a store"
        elif found.type == "decision":
            message = f"id {target!r} (line {found.line}) is a decision: decisions are immutable"
        elif found.line > chk.line:
            message = f"id {target!r} is written later (line {found.line})"
        else:
            message = ""
            if kind == "forget":
                forgotten.setdefault(target, (chk.line, ts))
        if message:
            problem = Problem(MEMORIES_FILE, chk.line, "target", message)
            result.problems.append(problem)
    return written, forgotten


WRITE_CHECK_CACHE_MIN_OPS = 1_000
"""Write logs of at least this many operations keep the verdict of their write check in the
cache (:func:`_check_writes`); smaller ones are checked in well under a second."""


def _check_writes(root: Path, result: ReadResult, written: dict[str, _Written]) -> None:
    """Apply the readable, problem-free operations to a scratch store, as the replay will.

    The verdict (the problems found, usually none) depends only on ``memories.jsonl`` and on
    memlab's code: for a large log it is kept under ``$MEMLAB_CACHE_DIR/write-checks`` (the
    embedding cache's root), keyed by a digest of both, so a warm run reads it instead of
    writing every memory once more. Any change to the file or to memlab's source is a new key.
    """
    from memlab.datasets.writes import write_problems

    bad_lines = {p.line for p in result.problems if p.file == MEMORIES_FILE}
    ops = [op for op in result.ops if op.line not in bad_lines]
    skip = {ident for ident, w in written.items() if w.line in bad_lines}
    entry = None
    if len(ops) >= WRITE_CHECK_CACHE_MIN_OPS:
        entry = _write_check_entry(root / MEMORIES_FILE, bad_lines)
        cached = _read_write_check(entry)
        if cached is not None:
            result.problems += cached
            return
    problems = write_problems(ops, skip_ids=skip)
    if entry is not None:
        _save_write_check(entry, problems)
    result.problems += problems


def _write_check_entry(memories: Path, bad_lines: set[int | None]) -> Path | None:
    """The cache file of the write check of ``memories`` (``None`` if it cannot be read)."""
    from memlab.embed.cache import default_cache_dir

    try:
        data = memories.read_bytes()
        root = default_cache_dir()  # Path.home() raises RuntimeError where there is no home
        source = source_digest()
    except (OSError, RuntimeError):
        return None  # no cache: the check runs
    digest = hashlib.sha256(source.encode())
    digest.update(data)
    digest.update(repr(sorted(line for line in bad_lines if line is not None)).encode())
    return root / "write-checks" / f"{digest.hexdigest()[:32]}.json"


def source_digest() -> str:
    """A digest of every source file of the installed memlab and of what its results depend on
    besides: the interpreter (its ``re`` and ``unicodedata``) and the detect-secrets release
    whose plugins the scrubber runs.

    Caches of results that depend only on their input and on memlab's code (a write check's
    verdict, a replay's scrubbed texts) are keyed by it: any change to the code, the
    interpreter or detect-secrets is a new key.
    """
    import sys
    import unicodedata
    from importlib import metadata

    try:
        plugins = metadata.version("detect-secrets")
    except metadata.PackageNotFoundError:
        plugins = "absent"
    environment = f"{sys.version}\0unicode {unicodedata.unidata_version}\0detect-secrets {plugins}"
    return hashlib.sha256(f"{_files_digest()}\0{environment}".encode()).hexdigest()


@functools.cache
def _files_digest() -> str:
    """A digest of every source file of the installed memlab (computed once per process)."""
    package = Path(__file__).resolve().parent.parent
    digest = hashlib.sha256()
    for path in sorted(package.rglob("*.py")):
        digest.update(str(path.relative_to(package)).encode() + b"\0")
        digest.update(path.read_bytes())
    return digest.hexdigest()


def _read_write_check(entry: Path | None) -> list[Problem] | None:
    """The problems kept in ``entry``, or ``None`` when there is no usable entry."""
    if entry is None:
        return None
    try:
        rows = json.loads(entry.read_text(encoding="utf-8"))["problems"]
        return [Problem(str(f), None if line is None else int(line),
                        None if name is None else str(name), str(message))
                for f, line, name, message in rows]
    except (OSError, ValueError, KeyError, TypeError, RecursionError):
        return None  # missing, unreadable or not ours: check again


def _save_write_check(entry: Path | None, problems: list[Problem]) -> None:
    """Keep the verdict (atomically; a cache that cannot be written is left alone)."""
    from memlab.io import atomic_write_text

    if entry is None:
        return
    rows = [[p.file, p.line, p.field, p.message] for p in problems]
    try:
        atomic_write_text(entry, json.dumps({"problems": rows}, ensure_ascii=False))
    except OSError:
        pass


def _check_reference(
    chk: _LineChecker,
    name: str,
    ident: str,
    ts: float | None,
    written: dict[str, _Written] | None,
    forgotten: dict[str, tuple[int, float | None]],
) -> None:
    if written is None:
        return
    found = written.get(ident)
    if found is None:
        chk.add(name, f"id {ident!r} does not exist in {MEMORIES_FILE}")
    elif found.op not in _MEMORY_OPS:
        chk.add(name, f"id {ident!r} (line {found.line}) is not a store")
    elif ts is not None and found.ts is not None and found.ts > ts:
        chk.add(
            name,
            f"id {ident!r} is written at {to_iso(found.ts)} (line {found.line}), "
            f"after the query's ts {to_iso(ts)}",
        )
    elif name == "relevant" and ident in forgotten and ts is not None:
        line, when = forgotten[ident]
        if when is not None and when <= ts:
            chk.add(name, f"id {ident!r} is forgotten (line {line}) before the query")


def _check_queries(
    lines: list[tuple[int, dict[str, Any]]],
    result: ReadResult,
    written: dict[str, _Written] | None,
    forgotten: dict[str, tuple[int, float | None]],
) -> None:
    seen: dict[str, int] = {}
    previous: tuple[int, float] | None = None
    for number, obj in lines:
        chk = _LineChecker(QUERIES_FILE, number, obj)
        chk.unknown_keys(_QUERY_KEYS, "a query")
        qid = chk.string("qid", required=True)
        ts = chk.timestamp("ts", required=True)
        text = chk.string("text", required=True)
        client_id = chk.string("client_id", required=False)
        at_time = chk.timestamp("at_time", required=False)
        answer = chk.string("answer", required=False, nonempty=False)
        agent = chk.string("agent", required=False)
        if agent is not None:
            try:
                check_name(agent, "agent")
            except ValueError as exc:
                chk.add("agent", str(exc).split(": ", 1)[-1])
                agent = None
        projects: list[str] | None = []
        if obj.get("projects") is not None:
            value = obj["projects"]
            if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
                chk.add("projects", "must be an array of strings")
                projects = None
            else:
                for v in value:
                    try:
                        check_name(v, "projects")
                    except ValueError as exc:
                        chk.add("projects", str(exc).split(": ", 1)[-1])
                        projects = None
                        break
                else:
                    projects = list(value)
                if projects and agent is None and "agent" not in obj:
                    chk.add("projects", "given without 'agent' (a human reads every project)")
        include_superseded = obj.get("include_superseded", False)
        if not isinstance(include_superseded, bool):
            kind_name = _type_name(include_superseded)
            chk.add("include_superseded", f"must be a boolean, got {kind_name}")
            include_superseded = False
        served: list[str] | None = None
        if obj.get("served") is not None:
            value = obj["served"]
            if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
                chk.add("served", "must be an array of strings")
            else:
                served = list(value)
        relevant: dict[str, int] | None = None
        if "relevant" not in obj:
            chk.add("relevant", "missing")
        elif not isinstance(obj["relevant"], dict):
            chk.add("relevant", f"must be an object, got {_type_name(obj['relevant'])}")
        else:
            relevant = {}
            for key, grade in obj["relevant"].items():
                if isinstance(grade, bool) or not isinstance(grade, int) or grade < 1:
                    chk.add(
                        "relevant", f"grade of {key!r} must be an integer >= 1, got {_short(grade)}"
                    )
                    relevant = None
                elif grade > MAX_GRADE:
                    chk.add(
                        "relevant",
                        f"grade of {key!r} must be at most {MAX_GRADE}, got {_short(grade)}",
                    )
                    relevant = None
                elif relevant is not None:
                    relevant[key] = grade
        stale: list[str] | None = []
        if obj.get("stale") is not None:
            value = obj["stale"]
            if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
                chk.add("stale", "must be an array of strings")
                stale = None
            else:
                stale = list(value)
        tags: list[str] | None = None
        if "tags" not in obj:
            chk.add("tags", "missing")
        elif not isinstance(obj["tags"], list) or not all(
            isinstance(t, str) and t.strip() for t in obj["tags"]
        ):
            chk.add("tags", "must be an array of non-empty strings")
        else:
            tags = list(obj["tags"])
        line_problems = list(chk.problems)
        result.unreadable += line_problems
        # cross-line checks
        if qid is not None:
            if qid in seen:
                chk.add("qid", f"duplicate qid {qid!r} (first on line {seen[qid]})")
            else:
                seen[qid] = number
        if ts is not None:
            if previous is not None and ts < previous[1]:
                chk.add(
                    "ts",
                    f"goes backwards: {to_iso(ts)} is before {to_iso(previous[1])} "
                    f"on line {previous[0]}",
                )
            previous = (number, ts)
        if ts is not None and at_time is not None and at_time > ts:
            chk.add("at_time", f"{to_iso(at_time)} is after the query's ts {to_iso(ts)}")
        if isinstance(obj.get("relevant"), dict):
            for key in obj["relevant"]:
                _check_reference(chk, "relevant", key, ts, written, forgotten)
        for key in stale or []:
            _check_reference(chk, "stale", key, ts, written, forgotten)
            if isinstance(obj.get("relevant"), dict) and key in obj["relevant"]:
                chk.add("stale", f"id {key!r} is also relevant")
        result.problems += chk.problems
        if not line_problems and None not in (qid, ts, text, relevant, stale, tags, projects):
            result.queries.append(
                Query(
                    number,
                    qid,
                    ts,
                    text,
                    client_id,
                    at_time,
                    relevant,
                    tuple(stale),
                    tuple(tags),
                    answer,
                    agent,
                    tuple(sorted(set(projects or []))),
                    include_superseded,
                    None if served is None else tuple(served),
                )
            )


def _check_judgments(
    lines: list[tuple[int, dict[str, Any]]], result: ReadResult, qids: set[str]
) -> None:
    """Per-line checks of ``judgments.jsonl`` (qid known, grade 0-2, source, judge, ts)."""
    for number, obj in lines:
        chk = _LineChecker(JUDGMENTS_FILE, number, obj)
        chk.unknown_keys(_JUDGMENT_KEYS, "a judgment")
        qid = chk.string("qid", required=True)
        chk.string("mem_id", required=True)
        chk.enum("source", JUDGMENT_SOURCES, required=True, what="judgment source")
        chk.string("judge", required=True)
        chk.timestamp("ts", required=True)
        chk.string("note", required=False, nonempty=False)
        if "grade" not in obj:
            chk.add("grade", "missing")
        else:
            grade = obj["grade"]
            if isinstance(grade, bool) or not isinstance(grade, int) or not 0 <= grade <= 2:
                chk.add("grade", f"must be an integer 0, 1 or 2, got {_short(grade)}")
        if qid is not None and qid not in qids:
            chk.add("qid", f"{qid!r} is not a qid of {QUERIES_FILE}")
        result.problems += chk.problems


def _check_cycle_count(root: Path, result: ReadResult) -> None:
    """A ``[replay]`` consolidation interval that would run more cycles than a replay allows
    over the dataset's span (:func:`memlab.eval.replay.check_cycle_count`) is a problem of
    ``dataset.toml``'s ``[replay]`` table (a bad table is reported by :func:`_check_meta`)."""
    table = result.meta.get("replay")
    if not isinstance(table, dict) or not result.queries:
        return
    from memlab.eval.replay import ReplayConfig, check_cycle_count

    try:
        config = ReplayConfig.from_mapping(table, where="[replay]")
    except (TypeError, ValueError, OverflowError):
        return  # the table itself is bad: _check_meta said so
    try:
        first = result.ops[0].ts if result.ops else None
        check_cycle_count(config, first, max(q.ts for q in result.queries), where="[replay]")
    except ValueError as exc:
        text = (root / META_FILE).read_text(encoding="utf-8")
        result.problems.append(Problem(META_FILE, _table_line(text, "replay"), "replay",
                                       str(exc)))


def read_dataset(path: str | os.PathLike[str]) -> ReadResult:
    """Read and check a dataset directory without raising on bad input.

    Args:
        path: The dataset directory.

    Returns:
        The problems found together with whatever could be read.
    """
    root = Path(path)
    result = ReadResult()
    if not root.is_dir():
        problem = Problem(str(root), None, None, "not a directory")
        result.problems.append(problem)
        result.unreadable.append(problem)
        return result
    _check_meta(root, result)
    mem_lines = _read_lines(root, MEMORIES_FILE, result)
    written: dict[str, _Written] | None = None
    forgotten: dict[str, tuple[int, float | None]] = {}
    if mem_lines is not None:
        written, forgotten = _check_memories(mem_lines, result)
        _check_writes(root, result, written)
    query_lines = _read_lines(root, QUERIES_FILE, result)
    if query_lines is not None:
        _check_queries(query_lines, result, written, forgotten)
    if (root / JUDGMENTS_FILE).exists() or (root / JUDGMENTS_FILE).is_symlink():
        judgment_lines = _read_lines(root, JUDGMENTS_FILE, result)
        qids = {str(obj.get("qid")) for _, obj in query_lines or []}
        _check_judgments(judgment_lines or [], result, qids)
    _check_cycle_count(root, result)
    order = {name: i for i, name in enumerate((*DATASET_FILES, JUDGMENTS_FILE))}

    def key(p: Problem) -> tuple[int, int]:
        # dataset.toml keeps its key order; the JSONL files are sorted by line
        return order.get(p.file, -1), (p.line or 0) if p.file != META_FILE else 0

    result.problems.sort(key=key)
    result.unreadable.sort(key=key)
    return result


def validate_dataset(path: str | os.PathLike[str]) -> list[Problem]:
    """Every problem of a dataset directory (an empty list when it satisfies format v1)."""
    return read_dataset(path).problems


def main_validate(path: str | os.PathLike[str], *, out: TextIO | None = None) -> int:
    """Command-line entry of ``memlab datasets validate DIR``.

    Prints each problem, then a summary line.

    Returns:
        0 when the dataset is valid, 1 otherwise.
    """
    stream = sys.stdout if out is None else out
    result = read_dataset(path)
    for problem in result.problems:
        print(problem, file=stream)
    if result.problems:
        print(f"{path}: {len(result.problems)} problem(s)", file=stream)
        return 1
    print(f"{path}: ok ({len(result.ops)} operations, {len(result.queries)} queries)", file=stream)
    if not result.queries:
        print(
            f"{path}: warning: {QUERIES_FILE} holds no queries: memlab eval has nothing to "
            "evaluate",
            file=stream,
        )
    return 0
