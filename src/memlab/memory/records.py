"""The memory record: every payload field of the reference memory model (seed 000).

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
DECAYING_TYPES: tuple[str, ...] = ("fact", "status")
IMPORTANCE_LEVELS: tuple[str, ...] = ("critical", "high", "medium", "low")
AUTHORITY_LEVELS: tuple[str, ...] = ("human", "verified_agent", "unverified_agent", "inferred")
"""Source authority, highest first (seed 003 §6.4: human > verified_agent > unverified_agent >
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


class MemoryInputError(ValueError):
    """Base class of memlab's input errors (a ValueError)."""


class DecisionImmutableError(MemoryInputError):
    """Raised when code tries to change, correct or supersede a decision."""


class UnknownMemoryError(KeyError):
    """Raised when a memory id is not in the store."""


@dataclass(slots=True)
class MemoryRecord:
    """One memory with the full payload of seed 000.

    Times are float seconds since the epoch (UTC); :meth:`to_payload` renders them as ISO 8601.
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
    authority: str = "unverified_agent"
    archived_at: float | None = None
    purged_at: float | None = None

    def to_payload(self) -> dict[str, Any]:
        """The record as the seed's JSON payload (timestamps as ISO 8601 strings)."""
        out = asdict(self)
        for name in (
            "created_at",
            "last_accessed_at",
            "superseded_at",
            "valid_from",
            "valid_to",
            "expired_at",
            "archived_at",
            "purged_at",
        ):
            out[name] = to_iso(out[name])
        return out
