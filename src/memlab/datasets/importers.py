"""Registry of importers that turn public benchmarks into format-v1 datasets.

An importer is a class registered by name with :func:`register_importer`; its ``__init__`` takes
only keyword arguments (the tunable choices of the conversion) and its :meth:`Importer.run`
converts a source into a dataset directory and returns an :class:`ImportReport`. New benchmarks
plug in by decorating their own class; nothing else changes.
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

from memlab.datasets.format import Dataset, MemoryOp, Query, write_dataset
from memlab.registry import Registry


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
        report.dataset = write_dataset(dataset, out)
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


def read_source_text(file: Path) -> str:
    """The text of a source file, UTF-8 with or without a byte order mark (the BOM is dropped).

    Raises:
        ValueError: Naming the file when it cannot be read or is not UTF-8.
    """
    try:
        return file.read_text(encoding="utf-8-sig")
    except UnicodeDecodeError as exc:
        raise ValueError(f"{file}: not UTF-8 text (byte {exc.start})") from None
    except OSError as exc:
        raise ValueError(f"{file}: cannot be read ({exc.strerror or exc})") from None


def parse_json(text: str) -> Any:
    """``json.loads(text)``, every parse failure a ``ValueError`` with a one-line reason.

    Raises:
        ValueError: ``"invalid JSON: <reason>"`` (nesting too deep for the parser included).
    """
    try:
        return json.loads(text)
    except json.JSONDecodeError as exc:
        raise ValueError(f"invalid JSON: {exc.msg}") from None
    except RecursionError:
        raise ValueError("invalid JSON: nested too deeply to read") from None


def read_json_file(file: Path) -> Any:
    """A whole JSON source file (UTF-8, with or without a byte order mark), parsed.

    Raises:
        ValueError: ``"<file>: not a readable JSON file (<reason>)"`` when it cannot be read,
            is not UTF-8 or not JSON (nesting too deep for the parser included).
    """
    try:
        return json.loads(file.read_text(encoding="utf-8-sig"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise ValueError(f"{file}: not a readable JSON file ({exc})") from None
    except RecursionError:
        raise ValueError(f"{file}: not a readable JSON file (nested too deeply to read)") from None


def require_memories(report: ImportReport, n_memories: int) -> None:
    """Refuse an import of an agent-memory file that maps no memory at all.

    Such an import would publish an empty dataset and exit 0 (e.g. a column mapping that
    matches nothing); it is an error naming the source and the first record not mapped.

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
    raise ValueError(f"{report.source}: no records to import; nothing was written")


IMPORTERS: Registry[Callable[..., Importer]] = Registry("importer")
"""Importer classes by name."""

register_importer = IMPORTERS.register
"""Class decorator adding an importer to :data:`IMPORTERS` under ``name`` (``ValueError`` if the
name is already registered to a different class)."""


def run_importer(
    name: str, src: str | os.PathLike[str], out: str | os.PathLike[str], **kw: Any
) -> ImportReport:
    """Build the importer ``name`` with keyword arguments ``kw`` and run it.

    Raises:
        ValueError: If no importer of that name is registered (the message lists known ones).
    """
    return IMPORTERS.lookup(name)(**kw).run(src, out)
