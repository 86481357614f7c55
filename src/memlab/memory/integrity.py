"""What a stored row must look like: the checks ``memlab store check`` runs on ``memlab.sqlite3``.

SQLite's own ``PRAGMA quick_check`` finds damaged pages; this module finds rows that SQLite
reads back fine but that memlab could never have written: a payload that is not a JSON object
(or nested too deeply to read), a field of the wrong type or out of its range (``text`` null,
``confidence`` NaN, ``entities`` a string, ``metadata`` a list), a column that contradicts its
payload (``id``, ``active``), a vector of the wrong size, a link to a row or entity that does
not exist. Each problem names the table, the row and the field.

Messages never quote stored text: a value is described by its kind (``a string``, ``a list``),
and only numbers, booleans and null are shown as they are. That holds for every error the
store raises (:class:`~memlab.memory.records.StoreError`): SQLite's own messages go through
:func:`sqlite_detail`, which drops the undecodable text Python's sqlite3 quotes.
"""

from __future__ import annotations

import hashlib
import json
import math
from collections.abc import Callable
from typing import Any

from memlab.memory.records import (
    AUTHORITY_LEVELS,
    CATEGORIES,
    ENTITY_ROLES,
    IMPORTANCE_LEVELS,
    KNOWLEDGE_CATEGORIES,
    MAX_JSON_DEPTH,
    MEMORY_TYPES,
    RELATION_TYPES,
    json_problem,
)
from memlab.memory.scopes import check_scope
from memlab.timeutil import TS_MAX, TS_MIN

REQUIRED_FIELDS = ("id", "text", "type", "source_agent")
"""Payload fields a record cannot be built without (the others have defaults)."""


def describe(value: Any) -> str:
    """A value as a message may show it: numbers, booleans and null as they are, anything else
    by its kind only (a stored string may be memory text)."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (int, float)):
        text = repr(value)
        return text if len(text) <= 40 else f"a {len(text)}-digit number"
    if isinstance(value, str):
        return "a string"
    if isinstance(value, list):
        return "a list"
    if isinstance(value, dict):
        return "an object"
    return f"a {type(value).__name__}"


def sqlite_detail(exc: BaseException) -> str:
    """The first line of an SQLite (or OS) error, without any data it quotes.

    Python's sqlite3 quotes the undecodable value in ``Could not decode to UTF-8 column 'payload'
    with text '…'``: that text is a stored memory, so it is cut off.
    """
    text = exc.strerror if isinstance(exc, OSError) and exc.strerror else str(exc)
    text = text.splitlines()[0] if text else type(exc).__name__
    cut = text.find(" with text ")
    if cut >= 0:
        text = text[:cut]
    return text[:200]


def _not_text(value: str) -> bool:
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:
        return True
    return False


_INT_LIMIT = 2**53  # an int beyond it is no timestamp, confidence or count memlab writes


def _is_number(value: Any) -> bool:
    """A finite JSON number that fits a float64 and an int64 column."""
    kind = type(value)
    if kind is float:
        return math.isfinite(value)
    return kind is int and -_INT_LIMIT < value < _INT_LIMIT


def _string(optional: bool = False, nonempty: bool = False) -> Callable[[Any], str | None]:
    def rule(value: Any) -> str | None:
        if value is None and optional:
            return None
        if type(value) is not str:
            return f"is {describe(value)}, not a string" + (" or null" if optional else "")
        if nonempty and not value.strip():
            return "is an empty string"
        if _not_text(value):
            return "holds a lone surrogate (\\ud800-\\udfff), which is not text"
        return None

    return rule


def _choice(choices: tuple[str, ...], optional: bool = False) -> Callable[[Any], str | None]:
    def rule(value: Any) -> str | None:
        if value is None and optional:
            return None
        if type(value) is not str or value not in choices:
            kind = "a string" if type(value) is str else describe(value)
            return f"is {kind} not among {', '.join(choices)}"
        return None

    return rule


def _is_time(value: Any) -> bool:
    """Epoch seconds memlab writes: a finite number in years 1 to 9999 (UTC)."""
    return _is_number(value) and TS_MIN <= value <= TS_MAX


def _time(optional: bool) -> Callable[[Any], str | None]:
    def rule(value: Any) -> str | None:
        if value is None and optional:
            return None
        if not _is_time(value):
            tail = " or null" if optional else ""
            return f"is {describe(value)}, not a timestamp in years 1 to 9999{tail}"
        return None

    return rule


def content_hash(text: str) -> str:
    """First 16 hex characters of SHA-256 of ``text`` (the design's ``content_hash``)."""
    return hashlib.sha256(text.encode("utf-8")).hexdigest()[:16]


def derived_problems(data: dict[str, Any]) -> list[tuple[str, str]]:
    """Where a payload (whose fields each pass :data:`FIELD_RULES`) contradicts itself: a
    field the store computes from another no longer holds what it computed, or a lifecycle
    field is set where no lifecycle move sets it. Each as ``(field, what is wrong)``.

    ``text`` hashes to ``content_hash`` (a purged memory's text is empty; the hash names what
    was there), ``observation_count`` counts ``observed_by``, ``superseded_by`` names another
    memory, and ``purged_at`` is set only on an inactive memory whose text is erased.
    """
    out: list[tuple[str, str]] = []
    text, purged = data.get("text"), data.get("purged_at")
    if not (text == "" and purged is not None) and content_hash(text) != data.get(
        "content_hash"
    ):
        out.append((
            "text",
            "does not match content_hash: a text cannot be changed in place (correct writes a "
            "corrected memory)",
        ))
    observed = data.get("observed_by")
    count = data.get("observation_count", 1)
    if observed is not None and count != len(observed):
        out.append((
            "observation_count",
            f"must count the agents of observed_by ({len(observed)}), got {count!r}",
        ))
    if data.get("superseded_by") is not None and data.get("superseded_by") == data.get("id"):
        out.append(("superseded_by", "names the memory itself"))
    if purged is not None and (data.get("active", True) or text != ""):
        out.append(("purged_at", "is set on a memory that is active or still holds its text"))
    return out


def _count(low: int) -> Callable[[Any], str | None]:
    def rule(value: Any) -> str | None:
        if type(value) is not int or not low <= value < _INT_LIMIT:
            return f"is {describe(value)}, not an integer >= {low}"
        return None

    return rule


def _flag(value: Any) -> str | None:
    return None if type(value) is bool else f"is {describe(value)}, not true or false"


def _confidence(value: Any) -> str | None:
    if not _is_number(value) or not 0.0 <= value <= 1.0:  # NaN fails the comparison
        return f"is {describe(value)}, not a number in [0, 1]"
    return None


def _strings(value: Any) -> str | None:
    if type(value) is not list:
        return f"is {describe(value)}, not a list of strings"
    for item in value:
        if type(item) is not str:
            return f"holds {describe(item)}, not only strings"
        if _not_text(item):
            return "holds a lone surrogate (\\ud800-\\udfff), which is not text"
    return None


def _entities(value: Any) -> str | None:
    if type(value) is not list:
        return f"is {describe(value)}, not a list of entities"
    for item in value:
        if type(item) is not dict:
            return f"holds {describe(item)}, not an entity object"
        for key in ("name", "type"):
            got = item.get(key)
            if type(got) is not str or not got.strip():
                return f"holds an entity whose '{key}' is {describe(got)}, not a string"
            if _not_text(got):
                return "holds a lone surrogate (\\ud800-\\udfff), which is not text"
    return None


def _metadata(value: Any) -> str | None:
    if type(value) is not dict:
        return f"is {describe(value)}, not an object"
    if value:
        found = json_problem(value, depth=2)  # a payload field sits inside the record
        if found is not None:
            return found[1]
    return None


def _scope(value: Any) -> str | None:
    if type(value) is not str:
        return f"is {describe(value)}, not a scope string"
    try:
        check_scope(value)
    except (TypeError, ValueError):
        return "is not a scope (team, agent:NAME or project:NAME)"
    return None


FIELD_RULES: dict[str, Callable[[Any], str | None]] = {
    "id": _string(nonempty=True),
    "text": _string(),
    "type": _choice(MEMORY_TYPES),
    "source_agent": _string(),
    "client_id": _string(nonempty=True),
    "observed_by": _strings,
    "observation_count": _count(1),
    "category": _choice(CATEGORIES, optional=True),
    "importance": _choice(IMPORTANCE_LEVELS),
    "knowledge_category": _choice(KNOWLEDGE_CATEGORIES),
    "content_hash": _string(),
    "created_at": _time(optional=False),
    "last_accessed_at": _time(optional=True),
    "access_count": _count(0),
    "confidence": _confidence,
    "active": _flag,
    "consolidated": _flag,
    "supersedes": _string(optional=True, nonempty=True),
    "superseded_by": _string(optional=True, nonempty=True),
    "superseded_at": _time(optional=True),
    "key": _string(optional=True),
    "subject": _string(optional=True),
    "status_value": _string(optional=True),
    "valid_from": _time(optional=True),
    "valid_to": _time(optional=True),
    "entities": _entities,
    "metadata": _metadata,
    "expired_at": _time(optional=True),
    "forgotten_reason": _string(optional=True),
    "scope": _scope,
    "authority": _choice(AUTHORITY_LEVELS),
    "archived_at": _time(optional=True),
    "purged_at": _time(optional=True),
}
"""One rule per :class:`~memlab.memory.records.MemoryRecord` field: ``None`` when the value is
one memlab writes, else what is wrong with it."""


def parse_payload(raw: Any) -> tuple[dict[str, Any] | None, str | None]:
    """A stored payload read back: ``(fields, None)``, or ``(None, what is wrong)``.

    ``raw`` is the payload column as bytes (read ``CAST(payload AS BLOB)``, so that text that
    is not UTF-8 is reported here, for its row, instead of failing the whole query).
    """
    if isinstance(raw, str):
        raw = raw.encode("utf-8", "surrogatepass")
    if not isinstance(raw, bytes):
        return None, f"is {describe(raw)}, not JSON text"
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        return None, f"is not valid UTF-8 (byte {exc.start})"
    try:
        data = json.loads(text)
    except json.JSONDecodeError as exc:  # .msg and .pos only: str(exc) is fine, but no text
        return None, f"is not JSON ({exc.msg} at character {exc.pos})"
    except RecursionError:
        return None, "is nested too deeply to read (thousands of levels)"
    except ValueError:  # an integer of more digits than Python converts
        return None, "holds a number too long to read"
    if type(data) is not dict:
        return None, f"is {describe(data)}, not a JSON object"
    return data, None


def payload_problems(
    data: dict[str, Any], *, surrogates: bool = True
) -> list[tuple[str, str]]:
    """``(field, what is wrong)`` for every field of a parsed payload memlab would not write
    (fields it does not know are ignored, as the store ignores them).

    ``surrogates=False`` says the JSON text held no escaped surrogate, so that no string can hold
    a lone one: a payload that passes :func:`_sound_at_a_glance` is then accepted without the
    field-by-field rules (what loading a store spends most of its checking time on).
    """
    if not surrogates and _sound_at_a_glance(data):
        return []
    out = [(name, "is missing") for name in REQUIRED_FIELDS if name not in data]
    for name, value in data.items():
        rule = FIELD_RULES.get(name)
        if rule is not None:
            what = rule(value)
            if what is not None:
                out.append((name, what))
    return out


_MISSING = object()
_TYPES = frozenset(MEMORY_TYPES)
_IMPORTANCE = frozenset(IMPORTANCE_LEVELS)
_KNOWLEDGE = frozenset(KNOWLEDGE_CATEGORIES)
_AUTHORITY = frozenset(AUTHORITY_LEVELS)
_CATEGORY = frozenset(CATEGORIES)
_OPTIONAL_TEXT = ("key", "subject", "status_value", "forgotten_reason")
_OPTIONAL_IDS = ("supersedes", "superseded_by")
_OPTIONAL_TIMES = ("last_accessed_at", "superseded_at", "valid_from", "valid_to",
                   "expired_at", "archived_at", "purged_at")


def _among(value: Any, choices: frozenset[str]) -> bool:
    return type(value) is str and value in choices


def _sound_at_a_glance(d: dict[str, Any]) -> bool:
    """True only if every rule of :data:`FIELD_RULES` accepts ``d`` (which holds no lone
    surrogate): the common case, in straight-line code. False means "look field by field",
    not "wrong"."""
    g = d.get
    v = g("id")
    if type(v) is not str or not v.strip():
        return False
    if type(g("text")) is not str or type(g("source_agent")) is not str:
        return False
    if not _among(g("type"), _TYPES):
        return False
    v = g("client_id", "global")
    if type(v) is not str or not v.strip():
        return False
    v = g("observed_by", _MISSING)
    if v is not _MISSING and (type(v) is not list or any(type(x) is not str for x in v)):
        return False
    v = g("observation_count", 1)
    if type(v) is not int or not 1 <= v < _INT_LIMIT:
        return False
    v = g("access_count", 0)
    if type(v) is not int or not 0 <= v < _INT_LIMIT:
        return False
    v = g("category")
    if v is not None and not _among(v, _CATEGORY):
        return False
    if not _among(g("importance", "medium"), _IMPORTANCE):
        return False
    if not _among(g("knowledge_category", "general"), _KNOWLEDGE):
        return False
    if not _among(g("authority", "unverified_agent"), _AUTHORITY) or g("scope", "team") != "team":
        return False
    if type(g("content_hash", "")) is not str:
        return False
    if type(g("active", True)) is not bool or type(g("consolidated", False)) is not bool:
        return False
    v = g("confidence", 1.0)
    if type(v) not in (int, float) or not 0.0 <= v <= 1.0:
        return False
    if not _is_time(g("created_at", 0.0)):
        return False
    for name in _OPTIONAL_TIMES:
        v = g(name)
        if v is not None and not _is_time(v):
            return False
    for name in _OPTIONAL_TEXT:
        v = g(name)
        if v is not None and type(v) is not str:
            return False
    for name in _OPTIONAL_IDS:
        v = g(name)
        if v is not None and (type(v) is not str or not v.strip()):
            return False
    v = g("entities", _MISSING)
    if v is not _MISSING:
        if type(v) is not list:
            return False
        for e in v:
            if type(e) is not dict:
                return False
            name, kind = e.get("name"), e.get("type")
            if type(name) is not str or type(kind) is not str:
                return False
            if not name.strip() or not kind.strip():
                return False
    v = g("metadata", _MISSING)
    if v is not _MISSING:
        if type(v) is not dict:
            return False
        for item in v.values():
            kind = type(item)
            if kind is float:
                if not math.isfinite(item):
                    return False
            elif kind not in (str, int, bool, type(None)):
                if kind is list and all(type(x) in (str, int, bool) for x in item):
                    continue  # a list of plain values (tags): nothing deeper to look at
                # nested: what the metadata rule asks (depth, NaN, keys, types inside)
                return json_problem(v, depth=2) is None
    return True


def entity_row_problem(name: Any, type_: Any) -> str | None:
    """What is wrong with a row of the ``entities`` table (``None``: nothing)."""
    for field, value in (("name", name), ("type", type_)):
        if not isinstance(value, bytes):
            return f"column '{field}' is {describe(value)}, not text"
        try:
            decoded = value.decode("utf-8")
        except UnicodeDecodeError:
            return f"column '{field}' is not valid UTF-8"
        if not decoded.strip():
            return f"column '{field}' is empty"
    return None


def link_problem(entity_idx: Any, memory_idx: Any, role: Any, *, n_entities: int,
                 n_rows: int) -> str | None:
    """What is wrong with a row of ``entity_memory_links`` (``None``: nothing)."""
    if type(entity_idx) is not int or not 0 <= entity_idx < n_entities:
        return (f"entity_idx {describe(entity_idx)} is not an entity "
                f"(the store has {n_entities})")
    if type(memory_idx) is not int or not 0 <= memory_idx < n_rows:
        return f"memory_idx {describe(memory_idx)} is not a row of memories (it has {n_rows})"
    if role not in ENTITY_ROLES:
        return f"role is {describe(role)} not among {', '.join(ENTITY_ROLES)}"
    return None


def relation_problem(src: Any, dst: Any, relation: Any, strength: Any, *,
                     n_entities: int, scope: Any = None, scoped: bool = False) -> str | None:
    """What is wrong with a row of ``entity_relationships`` (or, ``scoped``, of
    ``relation_scopes``); ``None``: nothing."""
    for field, value in (("src", src), ("dst", dst)):
        if type(value) is not int or not 0 <= value < n_entities:
            return f"{field} {describe(value)} is not an entity (the store has {n_entities})"
    if src == dst:
        return f"src and dst are the same entity ({src})"
    if relation not in RELATION_TYPES:
        kind = "a string" if type(relation) is str else describe(relation)
        return f"relation is {kind} not among {', '.join(RELATION_TYPES)}"
    if not _is_number(strength) or strength < 0:
        return f"strength is {describe(strength)}, not a finite number >= 0"
    if scoped:
        # relation_scope_key: the scope, or "client|scope" for a client other than global
        client, sep, name = scope.rpartition("|") if type(scope) is str else ("", "", scope)
        if _scope(name) is not None or (sep and not client.strip()):
            return "scope is not a scope key (SCOPE or CLIENT|SCOPE)"
    return None


__all__ = [
    "FIELD_RULES",
    "MAX_JSON_DEPTH",
    "REQUIRED_FIELDS",
    "describe",
    "entity_row_problem",
    "link_problem",
    "parse_payload",
    "payload_problems",
    "relation_problem",
    "sqlite_detail",
]
