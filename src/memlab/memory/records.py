"""The memory record: every payload field of the reference memory model (docs/design.md §D0.2).

Four types, each with its own lifecycle:

========  =====================  ==========  =======  =====================
type      behaviour              expires?    decays?  supersedes?
========  =====================  ==========  =======  =====================
event     append-only log entry  yes (TTL)   no       no
fact      upsertable knowledge   no          yes      yes, by ``key``
decision  immutable record       no          no       never (raises)
status    current-state tracker  no          yes      yes, by ``subject``
========  =====================  ==========  =======  =====================
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any, Literal

from memlab.timeutil import to_iso

MemoryType = Literal["event", "fact", "decision", "status"]
MEMORY_TYPES: tuple[str, ...] = ("event", "fact", "decision", "status")
#: Design §D4.1's memory types that memlab stores as facts, the §D4.1 type kept in
#: ``metadata.memory_type`` (``memlab serve``'s ``store_memory``). A memory's *kind*
#: (:func:`kind_of`) is that type when it has one, else its own type: what decay reads.
DESIGN_TYPES: tuple[str, ...] = ("rule", "preference", "summary")
MEMORY_KINDS: tuple[str, ...] = (*MEMORY_TYPES, *DESIGN_TYPES)
#: Kinds whose confidence decays: design §D0.5's facts and statuses, and §D4.3's kinds that
#: "receive recency weighting" (preference, summary); a ``rule``, like a ``decision``, does not.
DECAYING_KINDS: tuple[str, ...] = ("fact", "status", "preference", "summary")
#: Kinds whose recency is always 1 (design §D4.3: "rule and decision do not decay").
NON_DECAYING_KINDS: tuple[str, ...] = ("decision", "rule")
IMPORTANCE_LEVELS: tuple[str, ...] = ("critical", "high", "medium", "low")
AUTHORITY_LEVELS: tuple[str, ...] = ("human", "verified_agent", "unverified_agent", "inferred")
"""Source authority, highest first (design §D3.8: human > verified_agent > unverified_agent >
inferred)."""
CATEGORIES: tuple[str, ...] = ("semantic", "episodic", "procedural")
KNOWLEDGE_CATEGORIES: tuple[str, ...] = (
    "brand",
    "strategy",
    "meeting",
    "content",
    "technical",
    "relationship",
    "general",
)
ENTITY_ROLES: tuple[str, ...] = ("about", "source", "mentioned")
RELATION_TYPES: tuple[str, ...] = (
    "contact_of",
    "same_owner",
    "uses",
    "works_on",
    "competitor_of",
    "co_occurrence",
)
GLOBAL_CLIENT = "global"


MAX_JSON_DEPTH = 32
"""Deepest nesting of arrays and objects in a stored value (a dataset line is level 1)."""


class MemoryInputError(ValueError):
    """Base class of memlab's input errors (a ValueError)."""


def _not_text(text: str) -> bool:
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return True
    return False


def json_problem(value: Any, *, depth: int = 1) -> tuple[str | None, str] | None:
    """What keeps ``value`` from being stored as JSON text: ``(top-level key, message)``.

    Finds nesting deeper than :data:`MAX_JSON_DEPTH` (``value`` itself is level ``depth``),
    strings and keys with lone surrogates (``"\\ud800"``: not Unicode text), floats that
    are NaN or infinite, non-string keys and values of other types. The key names the
    top-level entry of a mapping that holds the fault (``None`` for ``value`` itself).
    Iterative, so a value nested thousands of levels deep is reported, not a RecursionError.
    """
    stack: list[tuple[Any, int, str | None]] = [(value, depth, None)]
    while stack:
        item, level, top = stack.pop()
        if item is None or isinstance(item, (bool, int)):
            continue
        if isinstance(item, float):
            if item != item or item in (float("inf"), float("-inf")):
                return top, f"holds {item!r}, which JSON cannot represent"
            continue
        if isinstance(item, str):
            if _not_text(item):
                return top, "holds a lone surrogate (\\ud800-\\udfff), which is not text"
            continue
        if not isinstance(item, (dict, list, tuple)):
            return top, f"holds a {type(item).__name__}, which is not a JSON value"
        if level > MAX_JSON_DEPTH:
            return top, f"nested deeper than {MAX_JSON_DEPTH} levels"
        entries = item.items() if isinstance(item, dict) else enumerate(item)
        for key, sub in entries:
            where = top if top is not None else (str(key) if isinstance(item, dict) else None)
            if isinstance(item, dict):
                if not isinstance(key, str):
                    return where, f"has a key of type {type(key).__name__}, not a string"
                if _not_text(key):
                    return top, "a key holds a lone surrogate (\\ud800-\\udfff), which is not text"
            stack.append((sub, level + 1, where))
    return None


def check_json_value(value: Any, field: str) -> None:
    """Raise :class:`MemoryInputError` naming ``field`` if ``value`` cannot be stored as JSON."""
    found = json_problem(value, depth=2)  # a payload field sits inside the record
    if found is not None:
        raise MemoryInputError(f"field '{field}' {found[1]}")


class DecisionImmutableError(MemoryInputError):
    """Raised when code tries to change, correct or supersede a decision."""


class UnknownMemoryError(KeyError):
    """Raised when a memory id is not in the store."""


class StoreError(MemoryInputError):
    """The store on disk cannot be used as asked; the message names the file at fault.

    A ValueError (through :class:`MemoryInputError`), so the command line reports it as one line
    with exit status 2. Messages never quote memory text.
    """


class StoreCorruptError(StoreError):
    """``memlab.sqlite3`` is empty, unreadable or not a memlab store (nothing was changed)."""


class StoreLockedError(StoreError):
    """Another process holds the store directory's write lock."""


class StoreWriteError(StoreError):
    """A write failed (read-only file or store, full disk, I/O error); it was rolled back."""


TIME_FIELDS = (
    "created_at",
    "last_accessed_at",
    "superseded_at",
    "valid_from",
    "valid_to",
    "expired_at",
    "archived_at",
    "purged_at",
)
"""The record's timestamps (epoch seconds in memory, ISO 8601 in payloads)."""


@dataclass(slots=True)
class MemoryRecord:
    """One memory with the full payload of docs/design.md §D0.2.

    Times are float seconds since the epoch (UTC); :meth:`to_payload` renders them as ISO 8601.
    ``scope`` is the namespace inside the client (:mod:`memlab.memory.scopes`): ``team``,
    ``agent:{name}`` or ``project:{name}``.
    """

    id: str
    text: str
    type: str
    source_agent: str
    client_id: str = GLOBAL_CLIENT
    observed_by: list[str] = field(default_factory=list)
    observation_count: int = 1
    category: str | None = None
    importance: str = "medium"
    knowledge_category: str = "general"
    content_hash: str = ""
    created_at: float = 0.0
    last_accessed_at: float | None = None
    access_count: int = 0
    confidence: float = 1.0
    active: bool = True
    consolidated: bool = False
    supersedes: str | None = None
    superseded_by: str | None = None
    superseded_at: float | None = None
    key: str | None = None
    subject: str | None = None
    status_value: str | None = None
    valid_from: float | None = None
    valid_to: float | None = None
    entities: list[dict[str, str]] = field(default_factory=list)
    metadata: dict[str, Any] = field(default_factory=dict)
    expired_at: float | None = None
    forgotten_reason: str | None = None
    scope: str = "team"
    authority: str = "unverified_agent"
    archived_at: float | None = None
    purged_at: float | None = None

    def to_payload(self) -> dict[str, Any]:
        """The record as the design's JSON payload (timestamps as ISO 8601 strings)."""
        out = asdict(self)
        for name in TIME_FIELDS:
            out[name] = to_iso(out[name])
        return out


def kind_of(rec: MemoryRecord) -> str:
    """A memory's kind: its design §D4.1 type (:data:`DESIGN_TYPES`) when it is a fact that
    carries one in ``metadata.memory_type``, else its type."""
    given = rec.metadata.get("memory_type") if rec.type == "fact" else None
    return given if isinstance(given, str) and given in DESIGN_TYPES else rec.type
