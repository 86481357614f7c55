"""Dataset format v1: a recorded write log of agent memories plus timed queries.

A dataset is a directory holding three files:

``dataset.toml``
    ``name``, ``version``, ``description``, ``license``, ``source`` (strings; more keys allowed)
    and an optional ``[replay]`` table: the dataset's replay defaults (``ttl_days``, ``expire``,
    ``touch_k``, ``depth``, ``conflict_policy`` …, and ``[replay.consolidation]``), which every
    command uses unless told otherwise (:class:`memlab.eval.replay.ReplayConfig`).
    An optional ``[evaluation]`` table declares the evaluation protocol: ``folds`` (k of the
    cross-fit of learned stages) and ``group_by`` (``query`` or ``client``: what stays in one
    fold) (:class:`memlab.eval.protocol.EvalProtocol`).
``memories.jsonl``
    The write log in time order, one operation per line. A *store* line has ``id`` (unique),
    ``ts`` (ISO 8601 UTC), ``text``, ``type`` (event|fact|decision|status) and any payload field
    of the reference memory model (docs/design.md §D0.2): ``source_agent``, ``client_id``, ``key``,
    ``subject``, ``status_value``, ``importance``, ``category``, ``knowledge_category``,
    ``valid_from``, ``metadata``, ``confidence`` (in [0, 1]), ``authority`` (docs/design.md §D3.8:
    human, verified_agent, unverified_agent or inferred) and ``scope`` (the namespace inside
    the client: ``team`` (default), ``agent:{name}`` or ``project:{name}``). ``op`` is
    ``"store"`` by default; ``"forget"`` lines carry ``target`` and ``reason``; ``"relate"``
    lines carry ``from``, ``relation`` and ``to`` (entity names; relation one of the typed
    relations of design §D0.2), optional ``scope`` and ``client_id`` (where the relation is
    written, ``team`` of ``global`` by default: an agent sees relations of the scopes it reads
    in its client and ``global``) and optional ``properties`` (an object, kept in the log
    only);
    ``"correct"`` lines carry ``id`` (the new memory), ``target``, ``text``, ``reason`` and
    optional ``source_agent``; ``"promote"`` lines carry ``target`` (moved to ``team``);
    ``"consolidate"`` lines run one consolidation cycle (no merger) over ``client_id``'s
    memories, optionally only ``scope`` and only those created at or after ``since``. Every line
    has a ``ts``; non-store lines may have an ``id``. A store whose text deduplicates onto an
    earlier record maps its id onto that record when the log is replayed.
``queries.jsonl``
    ``qid``, ``ts`` (the store is replayed up to that moment), ``text``, optional ``client_id``
    (absent = every client), optional ``at_time`` (what was valid then), ``relevant`` (memory id
    → graded relevance ≥ 1; may be empty), optional ``stale`` (ids that must not be returned),
    ``tags`` and optional ``answer``. The reader may be an agent: optional ``agent`` (its name;
    absent = a human, who reads every namespace) and ``projects`` (the projects it is assigned
    to). Optional ``include_superseded`` (boolean) shows inactive history; optional ``served``
    lists the ids a live server returned, best first (recordings, :mod:`memlab.serve`).
``judgments.jsonl`` (optional)
    One relevance judgment a line: ``qid``, ``mem_id``, ``grade`` (0, 1 or 2), ``source``
    (``agent`` or ``human``), ``judge`` (a name), ``ts`` (ISO 8601 UTC) and optional ``note``.

In memory, timestamps are float seconds since the epoch (:func:`memlab.timeutil.parse_ts`);
they are written back as ISO 8601 with millisecond precision. Writing is deterministic (fixed key
order, ``ensure_ascii=False``, ``\\n`` line ends) and atomic (a temporary directory beside the
target is renamed into place).

A directory :func:`write_dataset` writes carries the marker of :mod:`memlab.io`
(``.memlab-output.json``, kind ``dataset``) listing the files it wrote with their SHA-256. A
later write into the same directory replaces a file only when memlab can tell it wrote that
file and nobody changed it since: the marker lists it with the digest it still has, or (a
dataset written before the marker) it is one of the three dataset files exactly as memlab
writes them (it reads back and serialises to the same bytes), or it already holds the very
bytes about to be written. Any other file the new dataset would overwrite (a README.md of the
user's, a hand-edited dataset.toml, an importer's own source file) makes the write refuse,
naming it, with nothing written. Files the new dataset does not write are never touched.
"""

from __future__ import annotations

import hashlib
import json
import math
import os
import re
import shutil
import tempfile
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import polars as pl

from memlab.io import (
    OUTPUT_MARKER,
    marker_digests,
    read_marker,
    replace_directory,
)
from memlab.memory.records import RELATION_TYPES
from memlab.memory.scopes import Principal
from memlab.timeutil import coerce_ts, to_iso

if TYPE_CHECKING:
    from memlab.datasets.validate import Problem

FORMAT_VERSION = 1
META_FILE = "dataset.toml"
MEMORIES_FILE = "memories.jsonl"
QUERIES_FILE = "queries.jsonl"
JUDGMENTS_FILE = "judgments.jsonl"
DATASET_FILES: tuple[str, ...] = (META_FILE, MEMORIES_FILE, QUERIES_FILE)
META_KEYS: tuple[str, ...] = ("name", "version", "description", "license", "source")
OPS: tuple[str, ...] = ("store", "forget", "relate", "correct", "promote", "consolidate")
JUDGMENT_SOURCES: tuple[str, ...] = ("agent", "human")
#: Payload fields a store line may carry, in the order they are written.
PAYLOAD_FIELDS: tuple[str, ...] = (
    "source_agent",
    "client_id",
    "key",
    "subject",
    "status_value",
    "importance",
    "category",
    "knowledge_category",
    "valid_from",
    "metadata",
    "confidence",
    "scope",
    "authority",
)
#: Relations a ``relate`` line may name (co-occurrence is derived, never written).
WRITABLE_RELATIONS: tuple[str, ...] = tuple(r for r in RELATION_TYPES if r != "co_occurrence")


class DatasetError(ValueError):
    """A dataset directory that does not satisfy format v1.

    Attributes:
        problems: Every :class:`~memlab.datasets.validate.Problem` found.
    """

    def __init__(self, path: str | os.PathLike[str], problems: list[Problem]) -> None:
        self.path = str(path)
        self.problems = list(problems)
        shown = "\n  ".join(str(p) for p in self.problems[:20])
        more = len(self.problems) - 20
        tail = f"\n  ... and {more} more" if more > 0 else ""
        super().__init__(f"{self.path}: {len(self.problems)} problem(s)\n  {shown}{tail}")

    def __reduce__(self) -> tuple[Any, ...]:
        # Rebuilt from its own arguments (pickle's default, ``cls(*args)``, would pass the
        # message as ``path``): a worker's DatasetError reaches the parent as itself.
        return (type(self), (self.path, self.problems))


def _sorted_json(value: Any) -> Any:
    """Recursively order mapping keys so that arbitrary metadata serialises stably."""
    if isinstance(value, Mapping):
        return {str(k): _sorted_json(value[k]) for k in sorted(value, key=str)}
    if isinstance(value, (list, tuple)):
        return [_sorted_json(v) for v in value]
    return value


def _dumps(obj: Mapping[str, Any]) -> str:
    return json.dumps(obj, ensure_ascii=False, separators=(",", ":"), allow_nan=False)


@dataclass(frozen=True, slots=True)
class MemoryOp:
    """One line of ``memories.jsonl``.

    Attributes:
        line: 1-based line number in the file it was read from (0 when built in code).
        op: ``"store"``, ``"forget"`` or ``"relate"``.
        id: The dataset's own id (required for stores, optional otherwise).
        ts: When the operation happened, epoch seconds UTC.
        text: Memory content (stores).
        type: Memory type (stores).
        fields: Payload fields of a store (``valid_from`` held as epoch seconds).
        target: Id forgotten by a forget line.
        reason: Why it was forgotten.
        from_entity: Source entity name of a relate line.
        relation: Relation type of a relate line.
        to_entity: Target entity name of a relate line.
        properties: Properties of a relate line (kept in the log only).
        origin: Where an importer read it (``("chat.csv", 3)``: the source file and line, or
            ``("conv.json: session_1[4]", None)`` for a place in a JSON file), so
            that a problem :func:`write_dataset` finds names the source; never written.

    A correct line has ``id`` (the new memory), ``target``, ``text``, ``reason`` and
    ``fields={"source_agent": …}``; a promote line has ``target``; a consolidate line keeps
    ``client_id``, ``scope`` and ``since`` (epoch seconds) in ``fields``.
    """

    line: int
    op: str
    id: str | None
    ts: float
    text: str | None = None
    type: str | None = None
    fields: dict[str, Any] = field(default_factory=dict)
    target: str | None = None
    reason: str | None = None
    from_entity: str | None = None
    relation: str | None = None
    to_entity: str | None = None
    properties: dict[str, Any] | None = None
    origin: tuple[str, int | None] | None = field(default=None, compare=False)

    @classmethod
    def store(
        cls, id: str, ts: float | str, text: str, type: str, *, line: int = 0,
        origin: tuple[str, int | None] | None = None, **fields: Any
    ) -> MemoryOp:
        """Build a store operation; ``fields`` are payload fields (``None`` values dropped);
        ``origin``: where an importer read it."""
        unknown = sorted(set(fields) - set(PAYLOAD_FIELDS))
        if unknown:
            raise TypeError(f"unknown payload field(s) {unknown}; expected {list(PAYLOAD_FIELDS)}")
        kept = {k: fields[k] for k in PAYLOAD_FIELDS if fields.get(k) is not None}
        if "valid_from" in kept:
            kept["valid_from"] = coerce_ts(kept["valid_from"], field="valid_from")
        return cls(line, "store", id, float(coerce_ts(ts)), text, type, kept, origin=origin)

    @classmethod
    def forget(
        cls,
        ts: float | str,
        target: str,
        reason: str | None = None,
        *,
        id: str | None = None,
        line: int = 0,
    ) -> MemoryOp:
        """Build a forget operation."""
        return cls(line, "forget", id, float(coerce_ts(ts)), target=target, reason=reason)

    @classmethod
    def relate(
        cls,
        ts: float | str,
        from_entity: str,
        relation: str,
        to_entity: str,
        *,
        id: str | None = None,
        line: int = 0,
        scope: str | None = None,
        client_id: str | None = None,
        properties: dict[str, Any] | None = None,
    ) -> MemoryOp:
        """Build a relate operation between two entity names (``scope``: where it is
        written, ``None``: ``team``; ``client_id``: of which client, ``None``: ``global``;
        ``properties``: kept in the log only)."""
        fields = {k: v for k, v in (("client_id", client_id), ("scope", scope)) if v is not None}
        return cls(
            line,
            "relate",
            id,
            float(coerce_ts(ts)),
            fields=fields,
            from_entity=from_entity,
            relation=relation,
            to_entity=to_entity,
            properties=properties,
        )

    def to_json(self) -> dict[str, Any]:
        """The line as a JSON object in the canonical key order."""
        out: dict[str, Any] = {}
        if self.id is not None:
            out["id"] = self.id
        out["ts"] = to_iso(self.ts)
        if self.op == "store":
            out["type"] = self.type
            out["text"] = self.text
            for name in PAYLOAD_FIELDS:
                value = self.fields.get(name)
                if value is None:
                    continue
                if name == "valid_from":
                    value = to_iso(value)
                elif name == "metadata":
                    value = _sorted_json(value)
                out[name] = value
        elif self.op == "forget":
            out["op"] = "forget"
            out["target"] = self.target
            if self.reason is not None:
                out["reason"] = self.reason
        elif self.op == "relate":
            out["op"] = self.op
            out["from"] = self.from_entity
            out["relation"] = self.relation
            out["to"] = self.to_entity
            if self.fields.get("client_id") is not None:
                out["client_id"] = self.fields["client_id"]
            if self.fields.get("scope") is not None:
                out["scope"] = self.fields["scope"]
            if self.properties:
                out["properties"] = _sorted_json(self.properties)
        elif self.op == "correct":
            out["op"] = self.op
            out["target"] = self.target
            out["text"] = self.text
            out["reason"] = self.reason
            if self.fields.get("source_agent") is not None:
                out["source_agent"] = self.fields["source_agent"]
        elif self.op == "promote":
            out["op"] = self.op
            out["target"] = self.target
        else:
            out["op"] = self.op
            for name in ("client_id", "scope"):
                if self.fields.get(name) is not None:
                    out[name] = self.fields[name]
            if self.fields.get("since") is not None:
                out["since"] = to_iso(self.fields["since"])
        return out


@dataclass(frozen=True, slots=True)
class Query:
    """One line of ``queries.jsonl``.

    Attributes:
        line: 1-based line number (0 when built in code).
        qid: Unique query id.
        ts: When the query is asked (epoch seconds UTC); the log is replayed up to this moment.
        text: The query text.
        client_id: Client scope, or ``None`` for every client.
        at_time: Ask what was valid at this moment (epoch seconds) instead of now.
        relevant: Memory id → graded relevance (int ≥ 1); may be empty.
        stale: Ids that must not be returned.
        tags: Primary tag first, then secondary tags.
        answer: Reference answer, if any.
        agent: The agent asking (``None`` = a human, who reads every namespace).
        projects: Projects the agent is assigned to.
        include_superseded: Show inactive history too.
        served: Ids a live server returned for this query, best first (recordings).
    """

    line: int
    qid: str
    ts: float
    text: str
    client_id: str | None = None
    at_time: float | None = None
    relevant: dict[str, int] = field(default_factory=dict)
    stale: tuple[str, ...] = ()
    tags: tuple[str, ...] = ()
    answer: str | None = None
    agent: str | None = None
    projects: tuple[str, ...] = ()
    include_superseded: bool = False
    served: tuple[str, ...] | None = None

    @property
    def seen_at(self) -> float:
        """The moment whose memories the query sees: ``at_time`` when it asks about one, else
        ``ts`` (where a relevant memory merged later is looked up, for one)."""
        return self.ts if self.at_time is None else self.at_time

    def principal(self) -> Principal | None:
        """The reader as a :class:`~memlab.memory.scopes.Principal` (``None`` = a human)."""
        if self.agent is None:
            return None
        return Principal.of(self.agent, self.projects)

    def to_json(self) -> dict[str, Any]:
        """The line as a JSON object in the canonical key order."""
        out: dict[str, Any] = {"qid": self.qid, "ts": to_iso(self.ts)}
        if self.client_id is not None:
            out["client_id"] = self.client_id
        if self.agent is not None:
            out["agent"] = self.agent
        if self.projects:
            out["projects"] = list(self.projects)
        if self.at_time is not None:
            out["at_time"] = to_iso(self.at_time)
        if self.include_superseded:
            out["include_superseded"] = True
        out["text"] = self.text
        out["relevant"] = dict(self.relevant)
        if self.stale:
            out["stale"] = list(self.stale)
        out["tags"] = list(self.tags)
        if self.answer is not None:
            out["answer"] = self.answer
        if self.served is not None:
            out["served"] = list(self.served)
        return out


_BARE_KEY = re.compile(r"^[A-Za-z0-9_-]+$")


def _toml_value(value: Any, key: str) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int):
        return str(value)
    if isinstance(value, float):
        if not math.isfinite(value):
            raise ValueError(f"{META_FILE}: field '{key}': non-finite float {value!r}")
        return repr(value)
    if isinstance(value, str):
        return json.dumps(value, ensure_ascii=False).replace("\x7f", "\\u007F")
    if isinstance(value, (list, tuple)):
        return "[" + ", ".join(_toml_value(v, key) for v in value) + "]"
    raise TypeError(f"{META_FILE}: field '{key}': cannot write {type(value).__name__} as TOML")


def _toml_key(key: str) -> str:
    return key if _BARE_KEY.fullmatch(key) else json.dumps(key, ensure_ascii=False)


def _toml_table(prefix: str, table: Mapping[str, Any]) -> list[str]:
    """``[prefix]`` with its scalar keys sorted, then its sub-tables (nested ``[a.b]``)."""
    lines = ["", f"[{prefix}]"]
    for key in sorted(k for k in table if not isinstance(table[k], Mapping)):
        lines.append(f"{_toml_key(key)} = {_toml_value(table[key], f'{prefix}.{key}')}")
    for key in sorted(k for k in table if isinstance(table[k], Mapping)):
        lines += _toml_table(f"{prefix}.{_toml_key(key)}", table[key])
    return lines


def dumps_meta(meta: Mapping[str, Any]) -> str:
    """Render ``dataset.toml``: the five standard keys first, then the rest sorted, then the
    tables (such as ``[replay]``, the dataset's replay defaults) sorted by name."""
    scalars = [k for k in meta if not isinstance(meta[k], Mapping)]
    order = [k for k in META_KEYS if k in scalars] + sorted(
        k for k in scalars if k not in META_KEYS
    )
    lines = []
    for key in order:
        lines.append(f"{_toml_key(key)} = {_toml_value(meta[key], key)}")
    for key in sorted(k for k in meta if isinstance(meta[k], Mapping)):
        lines += _toml_table(_toml_key(key), meta[key])
    return "\n".join(lines) + "\n"


@dataclass(slots=True)
class Dataset:
    """A dataset held in memory.

    Attributes:
        path: Directory it was read from or written to (``None`` when built in code).
        meta: Contents of ``dataset.toml``.
        ops: The write log in time order.
        queries: The queries in time order.
        digests: SHA-256 of each file's bytes as read or written (empty when built in code).
    """

    path: Path | None
    meta: dict[str, Any]
    ops: list[MemoryOp]
    queries: list[Query]
    digests: dict[str, str] = field(default_factory=dict)

    def serialize(self) -> dict[str, bytes]:
        """The canonical bytes of each of the three files."""
        mem = "".join(_dumps(op.to_json()) + "\n" for op in self.ops)
        qry = "".join(_dumps(q.to_json()) + "\n" for q in self.queries)
        return {
            META_FILE: dumps_meta(self.meta).encode("utf-8"),
            MEMORIES_FILE: mem.encode("utf-8"),
            QUERIES_FILE: qry.encode("utf-8"),
        }

    def sha256(self) -> dict[str, str]:
        """Filename → hex SHA-256: of the bytes read/written, else of the canonical bytes."""
        if self.digests:
            return dict(self.digests)
        return {name: hashlib.sha256(data).hexdigest() for name, data in self.serialize().items()}

    def stores(self) -> list[MemoryOp]:
        """The store operations only."""
        return [op for op in self.ops if op.op == "store"]

    def memories_frame(self) -> pl.DataFrame:
        """One row per operation; timestamps as float epoch seconds, metadata as JSON text."""
        rows = []
        for op in self.ops:
            f = op.fields
            meta = f.get("metadata")
            rows.append(
                {
                    "line": op.line,
                    "op": op.op,
                    "id": op.id,
                    "ts": op.ts,
                    "type": op.type,
                    "text": op.text,
                    **{k: f.get(k) for k in PAYLOAD_FIELDS[:8]},
                    "valid_from": f.get("valid_from"),
                    "metadata": None if meta is None else _dumps(_sorted_json(meta)),
                    "target": op.target,
                    "reason": op.reason,
                    "from_entity": op.from_entity,
                    "relation": op.relation,
                    "to_entity": op.to_entity,
                }
            )
        schema: dict[str, Any] = {"line": pl.Int64, "op": pl.String, "id": pl.String}
        schema |= {"ts": pl.Float64, "type": pl.String, "text": pl.String}
        schema |= {k: pl.String for k in PAYLOAD_FIELDS[:8]}
        schema |= {"valid_from": pl.Float64, "metadata": pl.String}
        schema |= {k: pl.String for k in ("target", "reason", "from_entity", "relation")}
        schema |= {"to_entity": pl.String}
        return pl.DataFrame(rows, schema=schema, orient="row")

    def queries_frame(self) -> pl.DataFrame:
        """One row per query; ``relevant`` as a list of ``{id, grade}`` structs."""
        rows = [
            {
                "line": q.line,
                "qid": q.qid,
                "ts": q.ts,
                "text": q.text,
                "client_id": q.client_id,
                "at_time": q.at_time,
                "relevant": [{"id": k, "grade": v} for k, v in q.relevant.items()],
                "stale": list(q.stale),
                "tags": list(q.tags),
                "answer": q.answer,
            }
            for q in self.queries
        ]
        schema = {
            "line": pl.Int64,
            "qid": pl.String,
            "ts": pl.Float64,
            "text": pl.String,
            "client_id": pl.String,
            "at_time": pl.Float64,
            "relevant": pl.List(pl.Struct({"id": pl.String, "grade": pl.Int64})),
            "stale": pl.List(pl.String),
            "tags": pl.List(pl.String),
            "answer": pl.String,
        }
        return pl.DataFrame(rows, schema=schema, orient="row")


def load_dataset(path: str | os.PathLike[str], *, validate: bool = True) -> Dataset:
    """Read a dataset directory.

    Args:
        path: The directory.
        validate: Check every rule of format v1 (ordering, references, duplicates). When false,
            only lines that cannot be read at all make it fail.

    Returns:
        The dataset, with ``digests`` of the bytes read.

    Raises:
        DatasetError: Listing every problem found.
    """
    from memlab.datasets.validate import read_dataset  # validate builds on this module

    result = read_dataset(path)
    problems = result.problems if validate else result.unreadable
    if problems:
        raise DatasetError(path, problems)
    return Dataset(Path(path), result.meta, result.ops, result.queries, result.digests)


def _coerce_parts(ds_or_parts: Any) -> Dataset:
    if isinstance(ds_or_parts, Dataset):
        return ds_or_parts
    if isinstance(ds_or_parts, Mapping):
        meta, ops, queries = ds_or_parts["meta"], ds_or_parts["ops"], ds_or_parts["queries"]
    elif isinstance(ds_or_parts, tuple) and len(ds_or_parts) == 3:
        meta, ops, queries = ds_or_parts
    else:
        raise TypeError(
            "write_dataset expects a Dataset, a (meta, ops, queries) tuple or a mapping with "
            f"those keys, got {type(ds_or_parts).__name__}"
        )
    return Dataset(None, dict(meta), list(ops), list(queries))


def _at_origin(problem: Any, ops: Sequence[MemoryOp]) -> Any:
    """``problem`` of a written ``memories.jsonl`` line, moved to the source line an importer
    read it from (:attr:`MemoryOp.origin`), the written line kept in the message."""
    from memlab.datasets.validate import Problem

    line = problem.line
    if problem.file != MEMORIES_FILE or line is None or not 1 <= line <= len(ops):
        return problem
    origin = ops[line - 1].origin
    if origin is None:
        return problem
    return Problem(origin[0], origin[1], problem.field,
                   f"{problem.message} (written as {MEMORIES_FILE}:{line})")


DATASET_KIND = "dataset"
"""The kind of memlab output a dataset directory is (its marker's ``memlab`` field)."""


class DatasetOutputError(FileExistsError):
    """A directory :func:`write_dataset` refuses to write into (one line, names it)."""


def check_dataset_out(out_dir: str | os.PathLike[str], *, what: str = "") -> Path:
    """Refuse a dataset output directory before any work.

    Accepted: a missing or empty directory, or one holding a dataset (a ``dataset.toml``, or
    the marker of a dataset memlab wrote). Refused: a symbolic link, a file, a path below a
    file, the working directory or one of its parents, a directory holding something else
    (another memlab result included). Which files may then be replaced is decided when the
    new files are known (:func:`write_dataset`).

    Args:
        out_dir: The directory.
        what: How the message names it (``"OUT"``; default: just the path).

    Returns:
        ``out_dir`` as a path.

    Raises:
        DatasetOutputError: Naming the directory and what is wrong.
    """
    out = Path(out_dir)
    label = f"{what} {out_dir}" if what else f"{out_dir}"
    if not str(out_dir).strip():
        raise DatasetOutputError(f"{label!r}: is empty; give a directory")
    for parent in out.absolute().parents:
        if parent.exists() and not parent.is_dir():
            raise DatasetOutputError(f"{label}: {parent} is a file, not a directory")
    if out.is_symlink():
        raise DatasetOutputError(
            f"{label}: is a symbolic link (to {os.readlink(out)}); give the directory it points "
            "to, or a new directory"
        )
    if out.exists() and not out.is_dir():
        raise DatasetOutputError(f"{label}: exists and is not a directory")
    if not out.exists():
        return out
    if out.resolve() in (Path.cwd().resolve(), *Path.cwd().resolve().parents):
        raise DatasetOutputError(f"{label}: is the working directory or one of its parents")
    marker = read_marker(out)
    if marker is not None and marker["memlab"] != DATASET_KIND:
        raise DatasetOutputError(
            f"{label}: is a memlab {marker['memlab']} result, not a dataset; give a new directory"
        )
    if any(out.iterdir()) and marker is None and not (out / META_FILE).is_file():
        raise DatasetOutputError(f"{label}: exists, is not empty and holds no {META_FILE}")
    return out


def _sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def _as_written(out: Path) -> dict[str, bytes]:
    """The dataset files of ``out`` that read back and serialise to their own bytes (what
    memlab's writer makes of them: a dataset written by memlab before the marker)."""
    from memlab.datasets.validate import read_dataset

    try:
        result = read_dataset(out)
    except (OSError, ValueError, RecursionError):
        return {}
    if result.unreadable:
        return {}
    return Dataset(out, result.meta, result.ops, result.queries).serialize()


def _replaceable(out: Path, files: Mapping[str, bytes]) -> tuple[set[str], dict[str, str]]:
    """Which files of ``out`` the new ``files`` may replace, and the earlier files of memlab's
    that stay (name → digest) and stay claimed.

    Raises:
        DatasetOutputError: Naming each file in the way (see the module docstring).
    """
    marker = read_marker(out) if out.is_dir() else None
    listed = marker.get("entries") if marker is not None else None
    listed = {str(n) for n in listed} if isinstance(listed, list) else set()

    def unchanged(name: str, data: bytes) -> bool:
        digests = marker_digests(marker, name)
        return name in listed and (digests is None or _sha256(data) in digests)

    replace: set[str] = set()
    in_the_way: list[str] = []
    written: dict[str, bytes] | None = None
    for name, new in files.items():
        path = out / name
        if not os.path.lexists(path):
            continue
        if path.is_symlink() or not path.is_file():
            in_the_way.append(name)
            continue
        current = path.read_bytes()
        if current == new or (marker is not None and unchanged(name, current)):
            replace.add(name)
            continue
        if marker is None and name in DATASET_FILES:
            written = _as_written(out) if written is None else written
            if written.get(name) == current:
                replace.add(name)
                continue
        in_the_way.append(name)
    if in_the_way:
        why = "changed since memlab wrote it" if marker is not None else "memlab did not write"
        raise DatasetOutputError(
            f"{out}: holds {', '.join(sorted(in_the_way))}, which {why} (or which is not a "
            "plain file) and which the new dataset would overwrite; move it away first "
            "(nothing was written)"
        )
    kept: dict[str, str] = {}
    for name in sorted(listed - set(files) - {OUTPUT_MARKER}):
        path = out / name
        if path.is_file() and not path.is_symlink():
            data = path.read_bytes()
            if unchanged(name, data):
                kept[name] = _sha256(data)
    return replace, kept


def write_dataset(
    ds_or_parts: Dataset | tuple[Mapping[str, Any], Iterable[MemoryOp], Iterable[Query]],
    out_dir: str | os.PathLike[str],
    *,
    extra_files: Mapping[str, str | bytes] | None = None,
    validate: bool = True,
) -> Dataset:
    """Write a dataset atomically and return it as read back.

    The files are written into a temporary directory beside ``out_dir``, checked, then renamed
    into place, so ``out_dir`` is either the old dataset or the complete new one. An existing
    ``out_dir`` is written into only if it is empty or is itself a dataset directory, and a file
    in it is replaced only when memlab can tell it wrote it (see the module docstring); the
    directory's marker then lists every file memlab wrote there, with its SHA-256.

    Args:
        ds_or_parts: A :class:`Dataset`, a ``(meta, ops, queries)`` tuple or a mapping with keys
            ``meta``, ``ops`` and ``queries``.
        out_dir: Target directory.
        extra_files: Further files to place in the directory (e.g. ``README.md``).
        validate: Refuse to publish a directory that fails :func:`validate_dataset`.

    Returns:
        The dataset loaded from ``out_dir``.

    Raises:
        DatasetError: If ``validate`` and the written files have problems (nothing is published).
        DatasetOutputError: (a :class:`FileExistsError`) If ``out_dir`` is refused
            (:func:`check_dataset_out`), or holds a file the new dataset would overwrite that
            memlab cannot tell it wrote (nothing is written).
    """
    from memlab.datasets.validate import read_dataset
    from memlab.io import _marker_text

    ds = _coerce_parts(ds_or_parts)
    out = check_dataset_out(out_dir)
    files = ds.serialize()
    for name, content in (extra_files or {}).items():
        if name in files or "/" in name or "\\" in name or name.startswith("."):
            raise ValueError(f"extra file name {name!r} is reserved or not a plain file name")
        files[name] = content.encode("utf-8") if isinstance(content, str) else bytes(content)
    _replaceable(out, files)  # refuse before anything is written
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{out.name}.tmp-", dir=out.parent))
    try:
        os.chmod(tmp, 0o755)
        for name, data in files.items():
            with open(tmp / name, "wb") as fh:
                fh.write(data)
                fh.flush()
                os.fsync(fh.fileno())
        result = read_dataset(tmp)
        problems = result.problems if validate else result.unreadable
        if problems:
            raise DatasetError(out, [_at_origin(p, ds.ops) for p in problems])
        # Files memlab did not write (recorded generations, notes) are carried over; of
        # memlab's, only those the new dataset rewrites are replaced (the rest stay claimed).
        out = check_dataset_out(out_dir)  # it may have changed while the files were written
        replace, kept = _replaceable(out, files)
        digests = dict(sorted(({n: _sha256(d) for n, d in files.items()} | kept).items()))
        (tmp / OUTPUT_MARKER).write_text(
            _marker_text(DATASET_KIND, list(digests), sha256=digests), encoding="utf-8"
        )
        owned = replace | ({OUTPUT_MARKER} if read_marker(out) is not None else set())
        replace_directory(tmp, out, owned=owned.__contains__)
    finally:
        if tmp.exists():
            shutil.rmtree(tmp)
    return Dataset(out, result.meta, result.ops, result.queries, result.digests)
