"""Registry of importers that turn public benchmarks into format-v1 datasets.

An importer is a class registered by name with :func:`register_importer`; its ``__init__`` takes
only keyword arguments (the tunable choices of the conversion) and its :meth:`Importer.run`
converts a source into a dataset directory and returns an :class:`ImportReport`. New benchmarks
plug in by decorating their own class; nothing else changes.
"""

from __future__ import annotations

import codecs
import json
import math
import os
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

from memlab.datasets.format import Dataset, MemoryOp, Query, write_dataset
from memlab.numeric import is_finite_number
from memlab.registry import Registry
from memlab.timeutil import parse_ts


@dataclass(slots=True)
class ImportReport:
    """What an import did, including the source defects it repaired or could not.

    Attributes:
        importer: Registered importer name.
        source: Source path.
        out: Output directory.
        counts: Totals, e.g. ``conversations``, ``sessions``, ``turns``, ``questions``,
            ``repaired``, ``unrecoverable``, ``no_evidence``.
        per_category: Questions per category name.
        repaired: One entry per repaired source item (``qid``, ``raw``, ``fixed``).
        unrecoverable: One entry per item that could not be used (``qid``, ``raw``, ``reason``,
            ``question``).
        unmapped: Source records an importer of agent-memory files could not map (``where``:
            ``file:line``, ``reason``).
        notes: Decisions the import made that a reader must know (e.g. where timestamps came
            from).
        no_evidence: Questions left without any relevant memory (``qid``, ``question``).
        dataset: The dataset as written.
    """

    importer: str
    source: str
    out: str
    counts: dict[str, int] = field(default_factory=dict)
    per_category: dict[str, int] = field(default_factory=dict)
    repaired: list[dict[str, Any]] = field(default_factory=list)
    unrecoverable: list[dict[str, Any]] = field(default_factory=list)
    no_evidence: list[dict[str, Any]] = field(default_factory=list)
    dataset: Dataset | None = None
    unmapped: list[dict[str, Any]] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)

    def summary(self) -> str:
        """A human-readable multi-line summary."""
        lines = [f"{self.importer}: {self.source} -> {self.out}"]
        lines += [f"  {name}: {value}" for name, value in self.counts.items()]
        if self.per_category:
            cats = ", ".join(f"{name} {n}" for name, n in self.per_category.items())
            lines.append(f"  per category: {cats}")
        for item in self.repaired:
            lines.append(f"  repaired {item['qid']}: {item['raw']!r} -> {item['fixed']}")
        for item in self.unrecoverable:
            lines.append(
                f"  unrecoverable {item['qid']}: {item['raw']!r} ({item['reason']}) "
                f"- {item['question']}"
            )
        for item in self.no_evidence:
            lines.append(f"  no evidence {item['qid']}: {item['question']}")
        lines += [f"  note: {note}" for note in self.notes]
        for item in self.unmapped:
            lines.append(f"  not mapped {item['where']}: {item['reason']}")
        return "\n".join(lines)


class Importer(Protocol):
    """What a registered importer provides."""

    def run(self, src: str | os.PathLike[str], out: str | os.PathLike[str]) -> ImportReport:
        """Convert ``src`` into a dataset directory ``out``."""
        ...


class BuildingImporter:
    """Base of the importers that build the whole dataset in memory, then write it at once.

    A subclass writes :meth:`build`; :meth:`run` writes its dataset atomically.
    """

    def build(self, src: str | os.PathLike[str]) -> tuple[Dataset, ImportReport]:
        """The converted dataset and the import's report (override)."""
        raise NotImplementedError

    def run(self, src: str | os.PathLike[str], out: str | os.PathLike[str]) -> ImportReport:
        """Import ``src`` and write the dataset to ``out`` atomically."""
        dataset, report = self.build(src)
        report.dataset = write_imported(dataset, out)
        report.out = str(out)
        return report


def time_ordered_dataset(
    meta: dict[str, Any],
    stores: list[tuple[float, int, MemoryOp]],
    queries: list[tuple[float, int, Query]],
) -> Dataset:
    """A dataset of ``(time, sequence, item)`` triples, each list in time then sequence order."""
    stores = sorted(stores, key=lambda item: (item[0], item[1]))
    queries = sorted(queries, key=lambda item: (item[0], item[1]))
    return Dataset(None, meta, [s[2] for s in stores], [q[2] for q in queries])


_LINE_BREAK = re.compile(r"\r\n|\r|\n")
_BYTE_LINE_BREAK = re.compile(rb"\r\n|\r|\n")


def source_lines(text: str) -> list[str]:
    """The lines of a source text, split where an editor splits them (``\\n``, ``\\r\\n``,
    ``\\r``), so that ``file:line`` in a message is the line an editor shows.

    Unlike :meth:`str.splitlines`, a U+2028, U+0085 or form feed stays inside its line: JSON
    allows the first two raw inside a string, and splitting there would cut a record in two.
    """
    lines = _LINE_BREAK.split(text)
    if lines and lines[-1] == "":
        lines.pop()
    return lines


def line_of(text: str, index: int) -> int:
    """The 1-based line (as :func:`source_lines` counts) of character ``index`` of ``text``."""
    return len(_LINE_BREAK.findall(text, 0, index)) + 1


def read_source_text(file: Path, *, nul_ok: bool = False) -> str:
    """The text of a source file, UTF-8 with or without a byte order mark (the BOM is dropped).

    Args:
        file: The source file.
        nul_ok: Accept NUL characters (a line-oriented reader that reports the line itself).

    Raises:
        ValueError: ``"<file>:<line>: not UTF-8 text (byte N)"``, ``"<file>:<line>: holds a NUL
            character ..."`` (a binary or UTF-16 file), or naming the file when it cannot be
            read.
    """
    try:
        data = file.read_bytes()
    except OSError as exc:
        raise ValueError(f"{file}: cannot be read ({exc.strerror or exc})") from None
    bom = len(codecs.BOM_UTF8) if data.startswith(codecs.BOM_UTF8) else 0
    try:
        text = data.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        at = bom + exc.start  # the decoder counts from after the BOM
        line = len(_BYTE_LINE_BREAK.findall(data, 0, at)) + 1
        raise ValueError(f"{file}:{line}: not UTF-8 text (byte {at})") from None
    if not nul_ok and "\x00" in text:
        line = line_of(text, text.index("\x00"))
        raise ValueError(
            f"{file}:{line}: holds a NUL character, which no text file does (a binary or "
            "UTF-16 file?)"
        )
    return text


def _no_constant(name: str) -> Any:
    raise ValueError(f"{name} is not a JSON value")


def _loads(text: str) -> Any:
    """``json.loads`` refusing ``NaN`` and ``Infinity`` (not JSON, though Python reads them)."""
    return json.loads(text, parse_constant=_no_constant)


def _json_reason(exc: BaseException) -> str:
    if isinstance(exc, json.JSONDecodeError):
        return exc.msg
    if isinstance(exc, RecursionError):
        return "nested too deeply to read"
    text = str(exc)
    if "integer string conversion" in text:  # a number of more than 4300 digits
        return "a number with too many digits to read"
    return text


def parse_json(text: str) -> Any:
    """``json.loads(text)``, every parse failure a ``ValueError`` with a one-line reason.

    ``NaN`` and ``Infinity`` are refused (they are not JSON).

    Raises:
        ValueError: ``"invalid JSON: <reason>"`` (nesting too deep for the parser, and numbers
            too long for it, included).
    """
    try:
        return _loads(text)
    except (ValueError, RecursionError) as exc:
        raise ValueError(f"invalid JSON: {_json_reason(exc)}") from None


def read_json_file(file: Path) -> Any:
    """A whole JSON source file (UTF-8, with or without a byte order mark), parsed.

    Raises:
        ValueError: ``"<file>: not a readable JSON file (<reason>)"`` when it cannot be read,
            is not UTF-8 or not JSON (nesting too deep for the parser, numbers too long for it,
            ``NaN`` and ``Infinity`` included); ``"<file>:<line>: not UTF-8 text"`` when it
            is not UTF-8.
    """
    text = read_source_text(file, nul_ok=True)  # a NUL is a JSON syntax error, reported below
    try:
        return _loads(text)
    except json.JSONDecodeError as exc:
        raise ValueError(f"{file}: not a readable JSON file ({exc})") from None
    except (ValueError, RecursionError) as exc:
        raise ValueError(f"{file}: not a readable JSON file ({_json_reason(exc)})") from None


def describe(value: Any) -> str:
    """A JSON value's kind and a short rendering, for messages (``"a list [1]"``, ``"null"``)."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return f"a boolean ({'true' if value else 'false'})"
    if isinstance(value, int) and value.bit_length() > 128:
        return "a number too long to show"
    if isinstance(value, float) and not math.isfinite(value):
        return "a number too large to hold"
    kind = ("a number" if isinstance(value, (int, float)) else "a list" if isinstance(
        value, list) else "an object" if isinstance(value, dict) else "a string" if isinstance(
        value, str) else f"a {type(value).__name__}")
    try:
        shown = json.dumps(value, ensure_ascii=True)
    except (ValueError, TypeError, RecursionError):
        return kind
    return f"{kind} {shown if len(shown) <= 40 else shown[:37] + '...'}"


def shown(text: str, limit: int = 60) -> str:
    """``repr(text)``, cut to about ``limit`` characters (a value quoted in a one-line message)."""
    if len(text) <= limit:
        return repr(text)
    return repr(text[:limit]) + f"... ({len(text)} characters)"


def ts_problem(value: str) -> str | None:
    """Why ``value`` is not an ISO 8601 timestamp with a time zone, or ``None``."""
    try:
        parse_ts(value, field="ts")
    except ValueError as exc:
        message = str(exc)
        if "has no time zone" in message:
            return f"{shown(value)} has no time zone; add Z (UTC) or an offset such as +02:00"
        if "outside years" in message:
            return f"{shown(value)} is outside years 1 to 9999 in UTC"
        return f"{shown(value)} is not ISO 8601"
    return None


def encoding_problem(text: str) -> str | None:
    """Why ``text`` cannot be written as UTF-8 (a lone surrogate, which a JSON ``\\ud800``
    escape or a file name that is not UTF-8 can put in a string), or ``None``."""
    try:
        text.encode("utf-8")
    except UnicodeEncodeError as exc:
        return (f"holds {text[exc.start]!r} at character {exc.start + 1}, a lone surrogate "
                "UTF-8 cannot encode")
    return None


def text_problem(value: Any, *, empty_ok: bool = False) -> str | None:
    """Why ``value`` cannot be a text field of a dataset (not a string, empty, not encodable),
    as a predicate of the field (``"must be a string, got a list [1]"``), or ``None``."""
    if value is None:
        return "is missing or null"
    if not isinstance(value, str):
        return f"must be a string, got {describe(value)}"
    if not empty_ok and not value.strip():
        return "is empty"
    return encoding_problem(value)


def require_text(value: Any, where: str, field: str, *, empty_ok: bool = False) -> str:
    """``value`` if it can be a text field, else ``ValueError("<where>: field '<field>' ...")``.
    """
    problem = text_problem(value, empty_ok=empty_ok)
    if problem is not None:
        raise ValueError(f"{where}: field '{field}' {problem}")
    return value


def require_utf8_path(path: Path) -> None:
    """Refuse a source path that is not UTF-8 (its name would reach the dataset or the report).

    Raises:
        ValueError: Naming the path.
    """
    problem = encoding_problem(str(path))
    if problem is not None:
        raise ValueError(f"{path}: the path is not UTF-8 ({problem}); rename it")


def _unencodable(value: Any, path: str) -> tuple[str, str] | None:
    """``(field path, problem)`` of the first string in ``value`` UTF-8 cannot encode."""
    if isinstance(value, str):
        problem = encoding_problem(value)
        return None if problem is None else (path, problem)
    if isinstance(value, Mapping):
        for key, item in value.items():
            found = _unencodable(str(key), f"{path} key") or _unencodable(
                item, f"{path}.{key}" if path else str(key))
            if found:
                return found
    elif isinstance(value, (list, tuple)):
        for i, item in enumerate(value):
            found = _unencodable(item, f"{path}[{i}]")
            if found:
                return found
    return None


def write_imported(
    parts: Dataset | tuple[Mapping[str, Any], Sequence[MemoryOp], Sequence[Query]],
    out: str | os.PathLike[str],
) -> Dataset:
    """:func:`write_dataset`, a text UTF-8 cannot encode named at its source.

    Each importer refuses such text where it reads it; this is the net under those checks: the
    memory's source ``file:line`` (:attr:`MemoryOp.origin`), else its id, or the query's id.

    Raises:
        ValueError: ``"<where>: field '<field>' holds '\\ud800' ..."``; nothing is written.
    """
    try:
        return write_dataset(parts, out)
    except UnicodeEncodeError:
        if isinstance(parts, Dataset):
            meta, ops, queries = parts.meta, parts.ops, parts.queries
        else:
            meta, ops, queries = parts
        items: list[tuple[str, Any]] = [("dataset.toml", dict(meta))]
        for op in ops:
            where = (f"{op.origin[0]}:{op.origin[1]}" if op.origin
                     else f"memory {op.id!r}" if op.id else "a memory")
            items.append((where, op.to_json()))
        items += [(f"query {q.qid!r}", q.to_json()) for q in queries]
        for where, value in items:
            found = _unencodable(value, "")
            if found:
                raise ValueError(f"{where}: field '{found[0]}' {found[1]}; nothing was "
                                 "written") from None
        raise


def require_memories(report: ImportReport, n_memories: int, n_records: int = 0) -> None:
    """Refuse an import of an agent-memory file that maps no memory at all.

    Such an import would publish an empty dataset and exit 0 (e.g. a column mapping that
    matches nothing); it is an error naming the source and the first record not mapped (or,
    all records mapped but none holding a memory, their number ``n_records``).

    Raises:
        ValueError: When ``n_memories`` is 0.
    """
    if n_memories:
        return
    if report.unmapped:
        first = report.unmapped[0]
        raise ValueError(
            f"{report.source}: no record could be mapped to a memory "
            f"({len(report.unmapped)} not mapped; first {first['where']}: {first['reason']}); "
            "nothing was written"
        )
    if n_records:
        raise ValueError(f"{report.source}: none of its {n_records} record(s) holds a memory; "
                         "nothing was written")
    raise ValueError(f"{report.source}: no records to import; nothing was written")


IMPORTERS: Registry[Callable[..., Importer]] = Registry("importer")
"""Importer classes by name."""

register_importer = IMPORTERS.register
"""Class decorator adding an importer to :data:`IMPORTERS` under ``name`` (``ValueError`` if the
name is already registered to a different class)."""


def run_importer(
    importer: str, src: str | os.PathLike[str], out: str | os.PathLike[str], /, **kw: Any
) -> ImportReport:
    """Build the importer named ``importer`` with keyword arguments ``kw`` (its options,
    ``name`` among them) and run it.

    Raises:
        ValueError: If no importer of that name is registered (the message lists known ones).
    """
    return IMPORTERS.lookup(importer)(**kw).run(src, out)


_TRUE, _FALSE = ("true", "yes", "on", "1"), ("false", "no", "off", "0")


def importer_options(importer: str, raw: Mapping[str, str]) -> dict[str, Any]:
    """Command-line options (``--option key=value``, values as text) as the keyword arguments
    of the importer named ``importer``: each key one of its parameters, each value converted to
    the parameter's type (``float``, ``int``, ``bool``; text otherwise).

    Raises:
        ValueError: Naming the option: not a parameter of the importer (its options are
            listed), or a value that is not of the parameter's type.
    """
    import inspect
    import typing

    cls = IMPORTERS.lookup(importer)
    params = [
        p for p in inspect.signature(cls.__init__).parameters.values()
        if p.name != "self" and p.kind is p.KEYWORD_ONLY
    ]
    names = [p.name for p in params]
    hints = typing.get_type_hints(cls.__init__)
    out: dict[str, Any] = {}
    for key, text in raw.items():
        if key not in names:
            raise ValueError(
                f"importer {importer!r}: no option {key!r}; its options: {', '.join(names)}"
            )
        hint = hints.get(key, str)
        kinds = [a for a in typing.get_args(hint) if a is not type(None)] or [hint]
        value: Any = text
        if float in kinds:
            try:
                value = float(text)
            except ValueError:
                value = None
            if value is None or not math.isfinite(value):
                raise ValueError(f"--option {key}={text!r}: must be a finite number")
        elif int in kinds:
            try:
                value = int(text)
            except ValueError:
                raise ValueError(f"--option {key}={text!r}: must be an integer") from None
        elif bool in kinds:
            if text.strip().lower() not in _TRUE + _FALSE:
                raise ValueError(f"--option {key}={text!r}: must be true or false")
            value = text.strip().lower() in _TRUE
        out[key] = value
    return out


def check_template(template: Any, owner: str, field: str, names: Sequence[str]) -> str:
    """``template`` if it is a ``str.format`` template of the placeholders ``names`` (each may
    be left out), else a ``ValueError`` naming the importer's field and its placeholders."""
    known = ", ".join("{" + n + "}" for n in names)
    if not isinstance(template, str):
        raise ValueError(f"{owner}: field '{field}' must be a string, got "
                         f"{type(template).__name__}")
    try:
        template.format(**{n: "" for n in names})
    except (KeyError, IndexError, ValueError, AttributeError, TypeError) as exc:
        raise ValueError(
            f"{owner}: field '{field}': {template!r} is not a template of {known} "
            f"({type(exc).__name__}: {exc})"
        ) from None
    return template


def check_seconds(value: Any, owner: str, field: str) -> float:
    """A finite number of seconds >= 0 (an importer's time step), else a ``ValueError`` naming
    the importer's field."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise ValueError(f"{owner}: field '{field}' must be a number of seconds, got "
                         f"{type(value).__name__}")
    if not is_finite_number(value) or value < 0:
        raise ValueError(f"{owner}: field '{field}' must be a finite number >= 0")
    return float(value)
