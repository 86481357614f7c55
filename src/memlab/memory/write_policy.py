"""The store's write policy: validation, scrubbing, dedup, supersession and lifecycle moves.

:class:`WritePolicy` is the part of :class:`~memlab.memory.store.MemoryStore` that runs the
write path of design §D0.3 (validate, scrub, content hash, tenant-scoped dedup and corroboration,
supersession of facts by key and statuses by subject; decisions are immutable) and the
lifecycle writes built on it (retire, forget, restore, purge, correct, promote, touch).
"""

from __future__ import annotations

import hashlib
import json
import logging
import math
import time
import uuid
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

import numpy as np
import orjson

from memlab.memory.integrity import (
    FIELD_RULES,
    content_hash,
    derived_problems,
    payload_problems,
)
from memlab.memory.records import (
    AUTHORITY_LEVELS,
    CATEGORIES,
    GLOBAL_CLIENT,
    IMPORTANCE_LEVELS,
    KNOWLEDGE_CATEGORIES,
    MEMORY_TYPES,
    TIME_FIELDS,
    DecisionImmutableError,
    MemoryInputError,
    MemoryRecord,
    check_json_value,
)
from memlab.memory.scopes import TEAM, check_scope
from memlab.memory.scrub import Scrubber, same_scrubber, scrub_message
from memlab.memory.sqlite_io import _RECORD_FIELDS, _RECORD_VALUES, VECTOR_DIM_KEY, _encode
from memlab.numeric import is_finite_number, shown_number
from memlab.timeutil import coerce_ts

log = logging.getLogger("memlab.store")

_CHOICE_FIELDS: dict[str, tuple[tuple[str, ...], bool]] = {
    "importance": (IMPORTANCE_LEVELS, False),
    "authority": (AUTHORITY_LEVELS, False),
    "knowledge_category": (KNOWLEDGE_CATEGORIES, False),
    "category": (CATEGORIES, True),
}
_SCRUBBED_FIELDS = ("source_agent", "key", "subject", "status_value", "forgotten_reason")
_LINK_FIELDS = ("supersedes", "superseded_by")


@dataclass(frozen=True, slots=True)
class WriteResult:
    """What a store call did.

    Attributes:
        id: The id of the memory the text now lives in (the existing one on dedup).
        action: ``"created"``, ``"deduplicated"`` (same agent, no write) or ``"corroborated"``.
        superseded: The id this write superseded, if any.
        redactions: How many credentials were scrubbed from the text.
    """

    id: str
    action: str
    superseded: str | None = None
    redactions: int = 0


def entities_key(entities: Any) -> int:
    """A digest of a payload's ``entities`` (a list of ``{"name", "type"}`` objects, checked by
    the integrity rules first), for this process: what :meth:`WritePolicy._derived_problems`
    compares with the row's. A hash rather than a copy: a store keeps one per row."""
    return hash(tuple(
        tuple(sorted(e.items())) if isinstance(e, dict) else (("", repr(e)),)
        for e in entities or ()
    ))


def _check_choice(value: Any, name: str, choices: Sequence[str], *, optional: bool) -> None:
    if value is None and optional:
        return
    if not isinstance(value, str):
        raise TypeError(f"field '{name}' must be a string, got {type(value).__name__}")
    if value not in choices:
        raise MemoryInputError(
            scrub_message(f"field '{name}': {value!r} is not one of {', '.join(choices)}")
        )


def _check_time(value: Any, name: str) -> float:
    """A finite timestamp (epoch seconds or ISO 8601), ``now`` when ``value`` is None."""
    if value is None:
        return time.time()
    t = coerce_ts(value, field=name)
    if t is None or not math.isfinite(t):
        raise MemoryInputError(f"field '{name}' must be a finite timestamp, got {value!r}")
    return t


def _check_k(k: Any, name: str = "k") -> int:
    """A count of results: an int >= 0 (a negative one would slice from the end)."""
    if isinstance(k, bool) or not isinstance(k, (int, np.integer)):
        raise MemoryInputError(f"field '{name}' must be an int >= 0, got {k!r}")
    if k < 0:
        raise MemoryInputError(f"field '{name}' must be an int >= 0, got {k}")
    return int(k)


def _check_str(value: Any, name: str, *, optional: bool, empty: bool = False) -> None:
    """A string (``None`` when ``optional``), not blank unless ``empty``, that is Unicode text
    (no lone surrogate, which SQLite could not store)."""
    if value is None and optional:
        return
    if not isinstance(value, str):
        raise TypeError(f"field '{name}' must be a string, got {type(value).__name__}")
    if not empty and not value.strip():
        raise MemoryInputError(f"field '{name}' must not be empty")
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:
        raise MemoryInputError(
            f"field '{name}' holds a lone surrogate (\\ud800-\\udfff), which is not text"
        ) from None


class WritePolicy:
    """Write path and lifecycle writes of :class:`~memlab.memory.store.MemoryStore` (a mixin;
    the store owns ``_dedup``, ``_by_key``, ``_by_subject`` and the scrubber and embedder)."""

    def prepare_text(self, text: str) -> tuple[str, int]:
        """Validate and scrub ``text`` exactly as :meth:`store` will: (scrubbed text, redactions).

        Replays call this to embed the scrubbed text ahead of the writes.
        """
        if not isinstance(text, str):
            raise TypeError(f"field 'text' must be a string, got {type(text).__name__}")
        if not text.strip():
            raise MemoryInputError("field 'text' must not be empty")
        if len(text) > self.max_text_chars:
            raise MemoryInputError(
                f"field 'text' is {len(text)} characters long; the limit is {self.max_text_chars}"
            )
        try:
            text.encode("utf-8")
        except UnicodeEncodeError:
            raise MemoryInputError("field 'text' is not valid UTF-8") from None
        scrubbed, redactions = self.scrubber.scrub(text)
        # The limit holds for what is stored (and recorded, and replayed), which a redaction
        # can make longer than what was given ("pw=abc" -> "pw=[REDACTED:password]").
        if len(scrubbed) > self.max_text_chars:
            raise MemoryInputError(
                f"field 'text' is {len(scrubbed)} characters long once its credentials are "
                f"redacted; the limit is {self.max_text_chars}"
            )
        return scrubbed, redactions

    def adopt_scrubs(
        self,
        scrubs: Mapping[str, tuple[str, int]],
        scrubber: Scrubber,
        strings: Mapping[str, tuple[str, int]] | None = None,
    ) -> bool:
        """Take the scrubbing of texts that were scrubbed elsewhere, for every later write.

        A replay scrubs each memory text once, in the process that prepares it (to embed the
        scrubbed text), and hands the results to each replay's store: a later :meth:`store`
        of one of these texts takes its scrubbed text and redaction count from ``scrubs``
        instead of scrubbing it again. They are adopted only when ``scrubber`` (the one that
        made them, with :meth:`prepare_text`) is of this store's scrubber's class with equal
        parameters (:func:`~memlab.memory.scrub.same_scrubber`), so that a write stores what
        this store's own scrubbing would have stored. Validation still runs on every write.

        Args:
            scrubs: Text → (scrubbed text, redactions), as :meth:`prepare_text` returns them.
            scrubber: The scrubber that made them.
            strings: The log's other strings (agents, keys, subjects, status values, and the
                keys and strings of metadata) → ``scrubber.scrub``'s result: a write's fields
                and metadata take them instead of being scrubbed again.

        Returns:
            Whether they were adopted.
        """
        if not same_scrubber(scrubber, self.scrubber):
            return False
        self._adopted_scrubs = dict(scrubs)
        self._adopted_strings = dict(strings or {})
        return True

    def _scrub_text(self, text: Any) -> tuple[str, int]:
        """:meth:`prepare_text`, or the adopted scrubbing of ``text`` (after the same checks)."""
        adopted = self._adopted_scrubs.get(text) if isinstance(text, str) else None
        # an adopted text passed the other checks where it was scrubbed; the limit is this store's
        if adopted is None or max(len(text), len(adopted[0])) > self.max_text_chars:
            return self.prepare_text(text)
        return adopted

    @contextmanager
    def prepared(self, texts: Sequence[Any]) -> Iterator[None]:
        """Scrub and embed the texts of the writes about to come once, for the whole block.

        Each text is validated and scrubbed as :meth:`store` does it, and the scrubbed texts
        are embedded with one call of the embedder (it takes lists). Inside the block,
        :meth:`store` of one of these texts takes its scrubbing and vector from here instead of
        one scrub and one embedder call per write; everything else (dedup, supersession, the
        checks of the other fields) runs per write as always. A text that fails validation is
        left out (its :meth:`store` raises as without the block); if the batched embedder call
        fails, each write embeds its own text.

        Args:
            texts: The texts of the coming :meth:`store` calls (anything else is ignored).
        """
        prepared: dict[str, tuple[str, int, np.ndarray | None]] = {}
        for text in texts:
            if not isinstance(text, str) or text in prepared:
                continue
            try:
                scrubbed, redactions = self._scrub_text(text)
            except (TypeError, ValueError):
                continue
            prepared[text] = (scrubbed, redactions, None)
        if self.embedder is not None and prepared:
            try:
                vectors = self.embedder.embed([p[0] for p in prepared.values()])
            except Exception:  # each write then embeds (and fails) on its own
                vectors = None
            if vectors is not None and len(vectors) == len(prepared):
                for text, vector in zip(list(prepared), vectors, strict=True):
                    prepared[text] = (*prepared[text][:2], vector)
        outer = self._prepared, self._field_scrubs
        self._prepared = prepared
        self._field_scrubs = {}
        try:
            yield
        finally:
            self._prepared, self._field_scrubs = outer

    def _scrub_fields(self, values: tuple[str | None, ...]) -> tuple[tuple[str | None, ...], int]:
        """Scrub short string fields (``None`` stays); inside :meth:`prepared` each distinct
        string is scrubbed once for the block (the writing agent's name recurs in every item)."""
        if not self._prepared and not self._adopted_scrubs:
            return self.scrubber.scrub_value(values)
        out: list[str | None] = []
        total = 0
        for value in values:
            if value is None:
                out.append(None)
                continue
            done = self._adopted_strings.get(value) or self._field_scrubs.get(value)
            if done is None:
                done = self._field_scrubs[value] = self.scrubber.scrub(value)
            out.append(done[0])
            total += done[1]
        return tuple(out), total

    def _warn_once(self, message: str) -> None:
        """Log ``message`` as a warning the first time this store meets it (a replayed log
        of keyless facts would otherwise repeat it at every write); nothing when the store's
        ``warn_writes`` is off (a replay)."""
        if not self.warn_writes:
            return
        said: set[str] = self.__dict__.setdefault("_warned", set())
        if message not in said:
            said.add(message)
            log.warning("%s (said once per store)", message)

    def store(
        self,
        text: str,
        type: str = "event",
        *,
        source_agent: str = "unknown",
        client_id: str = GLOBAL_CLIENT,
        key: str | None = None,
        subject: str | None = None,
        status_value: str | None = None,
        importance: str = "medium",
        category: str | None = None,
        knowledge_category: str = "general",
        valid_from: float | str | None = None,
        metadata: dict[str, Any] | None = None,
        confidence: float = 1.0,
        authority: str = "unverified_agent",
        now: float | str | None = None,
        embedding: np.ndarray | Sequence[float] | None = None,
        id: str | None = None,
        scope: str = TEAM,
    ) -> WriteResult:
        """Store one memory through the full write path (see the module docstring).

        Args:
            text: Memory content; credentials are scrubbed before anything else sees it.
            type: ``event``, ``fact``, ``decision`` or ``status``.
            source_agent: The agent writing.
            client_id: Tenant scope (``"global"`` is system-wide).
            key: Facts: upsert key (a new fact with the key of an active fact supersedes it).
            subject: Statuses: what the status is about (supersedes by subject).
            status_value: Statuses: the value.
            importance: ``critical``, ``high``, ``medium`` or ``low``.
            category: ``semantic``, ``episodic``, ``procedural`` or ``None``.
            knowledge_category: One of the design's knowledge categories.
            valid_from: Facts/statuses: when it became true (default: ``now``).
            metadata: Arbitrary JSON-serialisable metadata.
            confidence: Base confidence in [0, 1].
            authority: Source authority (docs/design.md §D3.8): ``human``, ``verified_agent``,
                ``unverified_agent`` or ``inferred``.
            now: The write time (default: wall clock).
            embedding: Vector of the *scrubbed* text; computed with the embedder when ``None``.
            id: Memory id to use (default: a deterministic UUID).
            scope: Namespace inside the client (``team``, ``agent:{name}``,
                ``project:{name}``); dedup and supersession act within one scope.

        Returns:
            A :class:`WriteResult`.

        Raises:
            TypeError, MemoryInputError: On bad input (nothing is stored).
            DecisionImmutableError: On a decision whose key names an active decision.
        """
        ahead = self._prepared.get(text) if isinstance(text, str) else None
        scrubbed, redactions = ahead[:2] if ahead is not None else self._scrub_text(text)
        _check_choice(type, "type", MEMORY_TYPES, optional=False)
        _check_str(source_agent, "source_agent", optional=False)
        _check_str(client_id, "client_id", optional=False)
        try:
            check_scope(scope)
        except ValueError as exc:
            raise MemoryInputError(str(exc)) from None
        _check_str(key, "key", optional=True)
        _check_str(subject, "subject", optional=True)
        _check_str(status_value, "status_value", optional=True, empty=True)
        _check_choice(importance, "importance", IMPORTANCE_LEVELS, optional=False)
        _check_choice(authority, "authority", AUTHORITY_LEVELS, optional=False)
        _check_choice(category, "category", CATEGORIES, optional=True)
        _check_choice(
            knowledge_category, "knowledge_category", KNOWLEDGE_CATEGORIES, optional=False
        )
        if metadata is not None and not isinstance(metadata, dict):
            kind = metadata.__class__.__name__
            raise TypeError(f"field 'metadata' must be an object, got {kind}")
        check_json_value(metadata, "metadata")  # NaN, deep nesting, lone surrogates
        if metadata:
            try:
                json.dumps(metadata, allow_nan=False)
            except (TypeError, ValueError) as exc:
                raise MemoryInputError(
                    f"field 'metadata' is not JSON-serialisable ({exc})"
                ) from None
        if isinstance(confidence, bool) or not isinstance(confidence, (int, float)):
            raise TypeError("field 'confidence' must be a number")
        if not 0 <= confidence <= 1:  # exact for an int of any size
            raise MemoryInputError(
                f"field 'confidence' must lie in [0, 1], got {shown_number(confidence)}"
            )
        if id is not None:
            _check_str(id, "id", optional=False)
            if id in self._index:
                raise MemoryInputError(scrub_message(f"field 'id': {id!r} is already in the store"))
        t_now = _check_time(now, "now")
        t_valid = None if valid_from is None else _check_time(valid_from, "valid_from")
        vector = None if embedding is None else self._check_vector(embedding, "embedding")
        # Every stored string field is scrubbed, not only the text.
        (source_agent, key, subject, status_value), n_fields = self._scrub_fields(
            (source_agent, key, subject, status_value)
        )
        try:
            metadata, n_meta = self.scrubber.scrub_value(
                metadata, field="metadata", known=self._adopted_strings
            )
        except ValueError as exc:
            raise MemoryInputError(str(exc)) from None
        redactions += n_fields + n_meta
        h = content_hash(scrubbed)

        existing = self._dedup.get((client_id, scope, type, h))
        if existing is not None:
            return self._corroborate(existing, source_agent, t_now, redactions)

        old_idx: int | None = None
        if type == "fact":
            if key is None:
                self._warn_once("fact stored without a key: it can never be superseded")
            else:
                old_idx = self._by_key.get((client_id, scope, key))
        elif type == "status":
            if subject is None:
                self._warn_once("status stored without a subject: it can never be superseded")
            else:
                old_idx = self._by_subject.get((client_id, scope, subject))
        elif type == "decision" and key is not None:
            for rec in self._records:  # within the client and scope, as dedup and supersession
                if (
                    rec.type == "decision"
                    and rec.active
                    and rec.key == key
                    and rec.client_id == client_id
                    and rec.scope == scope
                ):
                    raise DecisionImmutableError(
                        f"decision {rec.id} has key {key!r}: decisions are immutable and "
                        "can never be superseded; store a new decision with another key"
                    )

        if vector is None and self.embedder is not None:
            raw = ahead[2] if ahead is not None and ahead[2] is not None else None
            if raw is None:
                raw = self.embedder.embed([scrubbed])[0]
            vector = self._check_vector(raw, "embedding (from the embedder)")

        mem_id = id if id is not None else self._new_id(h, client_id, type, t_now, scope)
        mentions = self.extractor.extract(
            scrubbed,
            client_id=None if client_id == GLOBAL_CLIENT else client_id,
            source_agent=source_agent,
        )
        entities = [m.entity.to_dict() for m in mentions]
        wrong = FIELD_RULES["entities"](entities) if entities else None
        if wrong is not None:  # an extractor's output, checked as the store's loader will
            raise MemoryInputError(f"field 'entities' (from the entity extractor) {wrong}")
        rec = MemoryRecord(
            id=mem_id,
            text=scrubbed,
            type=type,
            source_agent=source_agent,
            client_id=client_id,
            observed_by=[source_agent],
            observation_count=1,
            category=category,
            importance=importance,
            knowledge_category=knowledge_category,
            content_hash=h,
            created_at=t_now,
            confidence=float(confidence),
            authority=authority,
            supersedes=None if old_idx is None else self._records[old_idx].id,
            key=key,
            subject=subject,
            status_value=status_value,
            valid_from=t_valid if t_valid is not None else t_now,
            entities=entities,
            metadata=dict(metadata) if metadata else {},
            scope=scope,
        )
        with self._transaction():
            idx = self._append(rec, vector)
            superseded = None
            if old_idx is not None:
                superseded = self._supersede(old_idx, idx, t_now)
            self._index_entities(idx, mentions)
        return WriteResult(mem_id, "created", superseded, redactions)

    def _check_vector(self, embedding: Any, name: str) -> np.ndarray:
        """A finite 1-D float32 vector of the index's dimension (checked before any write)."""
        try:
            vector = np.asarray(embedding, dtype=np.float32).reshape(-1)
        except (TypeError, ValueError):
            raise MemoryInputError(f"field '{name}' must be a vector of numbers") from None
        if vector.shape[0] == 0:
            raise MemoryInputError(f"field '{name}' is empty")
        if not np.all(np.isfinite(vector)):
            raise MemoryInputError(f"field '{name}' holds a non-finite value")
        dim = self.vectors.dim
        if dim is not None and vector.shape[0] != dim:
            raise MemoryInputError(
                f"field '{name}': expected dimension {dim}, got {vector.shape[0]}"
            )
        return vector

    def _new_id(self, h: str, client_id: str, type_: str, t_now: float, scope: str) -> str:
        """A new memory's id: a hash of its text, client, scope, type and time, re-hashed with a
        suffix in the rare case the id is taken (the same text at the same instant in the same
        scope, its first copy forgotten). Nothing in it counts other memories, so an id tells
        its readers nothing of memories they cannot read, even once promoted to ``team``.
        Deterministic: a replay gives the same ids."""
        seed = f"{h}|{client_id}|{scope}|{type_}|{t_now!r}"
        mem_id = str(uuid.UUID(bytes=hashlib.sha256(seed.encode()).digest()[:16], version=4))
        again = 0
        while mem_id in self._index:
            again += 1
            digest = hashlib.sha256(f"{seed}|{again}".encode()).digest()
            mem_id = str(uuid.UUID(bytes=digest[:16], version=4))
        return mem_id

    def _checked_payload(self, rec: MemoryRecord, idx: int, *, edited: bool = False) -> str:
        """The payload of the record at row ``idx`` as JSON text, for :meth:`_save` (every
        rewrite of a row: lifecycle moves, ``save`` after in-place edits, ``touch``), after
        checking that it is one the store reads back (:mod:`~memlab.memory.integrity`'s rules
        for every field, links to memories of the store, and the id, client, type and scope
        its row was indexed under) and that the fields the store derives still hold what it
        derived (:meth:`_derived_problems`): what no write may leave behind, or the store would
        refuse to open or hold a text its write path never saw.

        Args:
            edited: The row is rewritten after a caller's in-place edits (``save``,
                ``touch``): the fields only the store's own lifecycle moves change must also
                be as the store last wrote them (:meth:`_lifecycle_problems`).

        Raises:
            MemoryInputError: Naming the memory and the field (the unit of writes then rolls
                back: nothing was changed).
        """
        data = dict(zip(_RECORD_FIELDS, _RECORD_VALUES(rec), strict=True))
        try:
            text: str | None = orjson.dumps(data).decode()
        except TypeError:  # a lone surrogate, or an integer past 64 bits: look field by field
            text = None
        problems = payload_problems(data, surrogates=text is None)
        for name in _LINK_FIELDS:
            target = data[name]
            if (
                type(target) is str
                and target not in self._index
                and target not in self._damaged_ids
            ):
                problems.append((name, "names no memory in the store"))
        c = self._cols
        if not problems and (
            self._index.get(rec.id) != idx
            or c.type[idx] != rec.type
            or c.client[idx] != self._clients.get(rec.client_id, -1)
            or c.scope[idx] != self._scopes.get(rec.scope, -1)
        ):
            moved = "id, client_id, type or scope"
            problems.append((moved, "cannot be changed in place (promote moves a scope)"))
        if not problems:
            problems = self._derived_problems(rec, idx)
        if not problems and edited:
            problems = self._lifecycle_problems(rec, idx)
        if problems:
            name, what = problems[0]
            raise MemoryInputError(
                f"memory {self._records[idx].id}: payload field '{name}' {what}; nothing was "
                "changed"
            )
        return text if text is not None else _encode(data)

    def _derived_problems(self, rec: MemoryRecord, idx: int) -> list[tuple[str, str]]:
        """Where a field the store computes no longer holds what it computed (a caller's
        in-place edit): ``content_hash`` is the hash the row was written with (its SQLite
        column; the loader refuses a row whose payload differs), ``text`` hashes to it (an
        edited text would skip scrubbing, dedup and the entity graph: :meth:`correct` writes a
        new text; a purged memory's text is empty), ``observation_count`` counts
        ``observed_by``, ``entities`` are those the row was written with (the extractor's, from
        which the entity graph's links were made; a purge empties them)."""
        if rec.content_hash != self._row_hashes[idx]:
            return [(
                "content_hash",
                "is computed by the store from the text and cannot be changed",
            )]
        found = derived_problems({
            "id": rec.id, "text": rec.text, "content_hash": rec.content_hash,
            "purged_at": rec.purged_at, "active": rec.active, "observed_by": rec.observed_by,
            "observation_count": rec.observation_count, "superseded_by": rec.superseded_by,
        })
        if found:
            return found[:1]
        if entities_key(rec.entities) != self._row_entities[idx]:
            return [(
                "entities",
                "are found in the text by the store's entity extractor and cannot be changed "
                "in place (the entity graph was linked from them)",
            )]
        return []

    def _lifecycle_problems(self, rec: MemoryRecord, idx: int) -> list[tuple[str, str]]:
        """Where a caller's in-place edit changed a field only the store's lifecycle moves
        change (compared with the row's columns, which hold what the store last wrote):
        ``active`` (forget, restore, retire, promote), ``created_at`` and ``valid_from``
        (fixed at the write), ``valid_to`` (supersession, retire), ``forgotten_reason``
        (forget, restore), ``access_count`` and ``last_accessed_at`` (touch). Editing them in
        place would leave the dedup and supersession lookups pointing elsewhere."""
        c = self._cols

        def same(value: float | None, column: np.ndarray, none: float) -> bool:
            stored = float(column[idx])
            if value is None:
                return stored == none or (none != none and stored != stored)
            return float(value) == stored

        checks = (
            ("active", bool(c.active[idx]) == rec.active),
            ("created_at", same(rec.created_at, c.created_at, math.nan)),
            ("valid_from", same(rec.valid_from, c.valid_from, math.nan)),
            ("valid_to", same(rec.valid_to, c.valid_to, math.inf)),
            ("forgotten_reason", bool(c.forgotten[idx]) == (rec.forgotten_reason is not None)),
            ("access_count", int(c.access_count[idx]) == rec.access_count),
            ("last_accessed_at", same(rec.last_accessed_at, c.last_accessed_at, math.nan)),
        )
        for name, ok in checks:
            if not ok:
                return [(name, "cannot be changed in place (the store's lifecycle moves it)")]
        return []

    def _append(self, rec: MemoryRecord, vector: np.ndarray | None) -> int:
        """Write a new row (the caller holds the transaction)."""
        idx = self._index_in_memory(rec, vector)
        self._row_hashes.append(rec.content_hash)
        self._row_entities.append(entities_key(rec.entities))
        blob = None if vector is None else self.vectors.get(idx).tobytes()
        if blob is not None and not self.__dict__.get("_dim_recorded", False):
            # The store's dimension, recorded with its first vector: the loader judges every
            # vector by it (the most common width cannot tell when all were cut alike).
            if self.meta(VECTOR_DIM_KEY) is None:
                self.set_meta(VECTOR_DIM_KEY, str(len(blob) // 4))
            self._dim_recorded = True
        payload = self._payload(rec)  # every field checked by ``store`` on its way here
        self._exec(
            "INSERT INTO memories (idx, id, client_id, type, content_hash, active, payload, vector)"
            " VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
            (
                idx,
                rec.id,
                rec.client_id,
                rec.type,
                rec.content_hash,
                int(rec.active),
                payload,
                blob,
            ),
        )
        self._version(rec, "created", rec.created_at, payload)
        if vector is not None:
            self._chroma_pending[rec.id] = idx
        self.version += 1
        return idx

    def _save(
        self, idx: int, change: str | None, at: float, *, edited: bool = False
    ) -> None:
        """Write a changed record back to SQLite (and the columns), logging a version
        (``edited``: after a caller's in-place edits; see :meth:`_checked_payload`)."""
        rec = self._records[idx]
        payload = self._checked_payload(rec, idx, edited=edited)
        self._sync_columns(idx)
        self._exec(
            "UPDATE memories SET active = ?, payload = ? WHERE idx = ?",
            (int(rec.active), payload, idx),
        )
        if change is not None:
            self._version(rec, change, at, payload)
            if self.vectors.present[idx]:
                self._chroma_pending[rec.id] = idx
        self.version += 1

    def _deactivate(self, idx: int) -> None:
        rec = self._records[idx]
        rec.active = False
        cs = (rec.client_id, rec.scope)
        if self._dedup.get((*cs, rec.type, rec.content_hash)) == idx:
            del self._dedup[(*cs, rec.type, rec.content_hash)]
        if rec.key is not None and self._by_key.get((*cs, rec.key)) == idx:
            del self._by_key[(*cs, rec.key)]
        if rec.subject is not None and self._by_subject.get((*cs, rec.subject)) == idx:
            del self._by_subject[(*cs, rec.subject)]

    def _supersede(self, old_idx: int, new_idx: int, t_now: float) -> str:
        old, new = self._records[old_idx], self._records[new_idx]
        if old.type == "decision":
            raise DecisionImmutableError(f"decision {old.id} can never be superseded")
        self._deactivate(old_idx)
        old.superseded_by = new.id
        old.superseded_at = t_now
        # The old version was true until the new one became true (never after, so no instant
        # has two versions of one key; never before it began, so its interval is not negative).
        old.valid_to = max(new.valid_from, old.valid_from)
        new.supersedes = old.id
        self._save(old_idx, "superseded", t_now)
        return old.id

    def _corroborate(self, idx: int, agent: str, t_now: float, redactions: int) -> WriteResult:
        rec = self._records[idx]
        if agent in rec.observed_by:
            return WriteResult(rec.id, "deduplicated", None, redactions)
        if len(rec.observed_by) < self.max_observed_by:
            with self._transaction():
                rec.observed_by.append(agent)
                rec.observation_count = len(rec.observed_by)
                self._save(idx, "corroborated", t_now)
        return WriteResult(rec.id, "corroborated", None, redactions)

    def retire(
        self, memory_id: str, change: str, *, now: float | str | None = None, **updates: Any
    ) -> MemoryRecord:
        """Deactivate a memory, set payload fields (``expired_at=…``), and log the change.

        Lifecycle jobs (TTL expiry, merges) use this; it refuses decisions. Each update is
        checked (and its strings scrubbed) as a write checks that field
        (:meth:`_check_updates`), before anything changes.
        """
        idx = self.idx(memory_id)
        rec = self._records[idx]
        if rec.type == "decision":
            raise DecisionImmutableError(f"decision {memory_id} is immutable")
        _check_str(change, "change", optional=False)
        updates = self._check_updates(updates)
        t_now = _check_time(now, "now")
        with self._transaction():
            self._deactivate(idx)
            for name, value in updates.items():
                setattr(rec, name, value)
            self._save(idx, change, t_now)
        return rec

    _FIXED_FIELDS = frozenset(
        (
            "id",
            "text",
            "type",
            "client_id",
            "content_hash",
            "created_at",
            "valid_from",
            "active",
            "scope",
        )
    )

    def _check_updates(self, updates: dict[str, Any]) -> dict[str, Any]:
        """Validate payload updates with the rules a write applies to the same fields, before
        anything changes: times become epoch seconds, choices are among their values, strings
        are text (and scrubbed, as every stored string), ``supersedes``/``superseded_by`` name
        memories of the store, and whatever else the store's loader checks
        (:data:`~memlab.memory.integrity.FIELD_RULES`) holds. ``scope`` moves only through
        :meth:`promote`.
        """
        unknown = sorted(set(updates) - set(_RECORD_FIELDS))
        if unknown:
            raise TypeError(f"unknown payload field(s): {', '.join(unknown)}")
        fixed = sorted(set(updates) & self._FIXED_FIELDS)
        if fixed:
            raise MemoryInputError(f"payload field(s) {', '.join(fixed)} cannot be changed")
        out: dict[str, Any] = {}
        for name, value in updates.items():
            if name in TIME_FIELDS:
                value = None if value is None else _check_time(value, name)
            elif name in _CHOICE_FIELDS:
                choices, optional = _CHOICE_FIELDS[name]
                _check_choice(value, name, choices, optional=optional)
            elif name in _SCRUBBED_FIELDS:
                required = name == "source_agent"
                blank_ok = name in ("status_value", "forgotten_reason")
                _check_str(value, name, optional=not required, empty=blank_ok)
                if value is not None:
                    value = self.scrubber.scrub(value)[0]
            elif name in _LINK_FIELDS:
                _check_str(value, name, optional=True)
                if value is not None and value not in self._index:
                    raise MemoryInputError(
                        scrub_message(f"field '{name}': {value!r} is not a memory of the store")
                    )
            elif name == "confidence":
                if isinstance(value, bool) or not isinstance(value, (int, float)):
                    raise TypeError("field 'confidence' must be a number")
                if not 0 <= value <= 1:  # exact for an int of any size
                    raise MemoryInputError(
                        f"field 'confidence' must lie in [0, 1], got {shown_number(value)}"
                    )
                value = float(value)
            elif name == "metadata":
                if not isinstance(value, dict):
                    kind = value.__class__.__name__
                    raise TypeError(f"field 'metadata' must be an object, got {kind}")
                check_json_value(value, "metadata")
                try:
                    value = self.scrubber.scrub_value(value, field="metadata")[0]
                except ValueError as exc:
                    raise MemoryInputError(str(exc)) from None
            what = FIELD_RULES[name](value)
            if what is not None:
                raise MemoryInputError(f"field '{name}' {what}")
            out[name] = value
        return out

    def save(self, memory_id: str, change: str, *, now: float | str | None = None) -> None:
        """Persist in-place edits of a record's descriptive fields and log a version.

        For fields that do not move it through the lifecycle (``knowledge_category``,
        ``consolidated``, ``metadata``, ``confidence``, ``archived_at``); lifecycle moves go
        through :meth:`retire` (and :meth:`forget`, :meth:`restore`, :meth:`promote`,
        :meth:`correct`). A field the store derives (``content_hash``, the ``text`` it hashes,
        ``observation_count``) or only its lifecycle moves change (``active``, ``created_at``,
        ``valid_from``, ``valid_to``, ``forgotten_reason``, ``access_count``,
        ``last_accessed_at``) edited in place is refused with a
        :class:`~memlab.memory.records.MemoryInputError` naming it, and the record is put back
        as the store last wrote it.
        """
        idx = self.idx(memory_id)
        _check_str(change, "change", optional=False)
        t_now = _check_time(now, "now")
        with self._transaction():
            self._save(idx, change, t_now, edited=True)

    def forget(self, memory_id: str, reason: str, *, now: float | str | None = None) -> None:
        """Soft-delete a memory (design §D3.7 ``forget``): inactive, reason kept, never returned."""
        idx = self.idx(memory_id)
        rec = self._records[idx]
        _check_str(reason, "reason", optional=False)
        reason = self.scrubber.scrub(reason)[0]
        if rec.type == "decision":
            raise DecisionImmutableError(
                f"decision {memory_id} is immutable (an audit trail) and cannot be forgotten"
            )
        t_now = _check_time(now, "now")
        self.retire(
            memory_id,
            "forgotten",
            now=t_now,
            forgotten_reason=reason,
            expired_at=t_now,
            valid_to=rec.valid_to if rec.valid_to is not None else t_now,
        )

    def restore(self, memory_id: str, *, now: float | str | None = None) -> MemoryRecord:
        """Undo a ``forget`` (docs/design.md §D3.7: soft deletes are kept for undo until purged).

        Raises:
            MemoryInputError: If the memory was not forgotten, was purged, or a memory written
                since holds its dedup, key or subject slot.
        """
        idx = self.idx(memory_id)
        rec = self._records[idx]
        if rec.forgotten_reason is None:
            raise MemoryInputError(f"memory {memory_id} is not forgotten")
        if rec.purged_at is not None:
            raise MemoryInputError(f"memory {memory_id} was purged and cannot be restored")
        # The slots as the write path keys them: client and namespace first (_deactivate).
        cs = (rec.client_id, rec.scope)
        slots = [(self._dedup, (*cs, rec.type, rec.content_hash))]
        if rec.type == "fact" and rec.key is not None:
            slots.append((self._by_key, (*cs, rec.key)))
        if rec.type == "status" and rec.subject is not None:
            slots.append((self._by_subject, (*cs, rec.subject)))
        for table, slot in slots:
            if slot in table:
                other = self._records[table[slot]].id
                raise MemoryInputError(f"memory {memory_id} cannot be restored: {other} holds it")
        t_now = _check_time(now, "now")
        with self.batch():
            rec.active = True
            rec.forgotten_reason = None
            rec.expired_at = None
            rec.valid_to = None
            for table, slot in slots:
                table[slot] = idx
            self._save(idx, "restored", t_now)
        return rec

    def purge(self, memory_id: str, *, now: float | str | None = None) -> MemoryRecord:
        """Erase a forgotten memory's content for good (design §D3.7: purged after the undo window).

        The row stays (ids and row numbers are stable) with an empty text, no entities, no
        metadata and no vector; the payloads of its earlier versions are erased too, its links
        to entities are removed, and ``content_version`` is bumped (indexes grown from the
        texts rebuild without it).
        """
        idx = self.idx(memory_id)
        rec = self._records[idx]
        if rec.forgotten_reason is None:
            raise MemoryInputError(f"memory {memory_id} is not forgotten; forget it first")
        t_now = _check_time(now, "now")
        with self.batch():
            rec.text = ""
            rec.entities = []
            self._row_entities[idx] = entities_key([])
            self.content_version += 1
            if self.graph.unlink_memory(idx):
                self._exec("DELETE FROM entity_memory_links WHERE memory_idx = ?", (idx,))
            rec.metadata = {}
            rec.purged_at = t_now
            self.vectors.set(idx, None)
            self._exec("UPDATE memories SET vector = NULL WHERE idx = ?", (idx,))
            self._exec("UPDATE versions SET payload = '{}' WHERE memory_id = ?", (memory_id,))
            # chromadb drops the vector after the commit, as it receives every write (an
            # upsert still in flight lands first); a purge never waits for chromadb, nor
            # fails with it. What it has not dropped when the process dies, or when it
            # fails, the next open drops (:meth:`_reconcile`).
            self._chroma_pending.pop(memory_id, None)
            self._chroma_purged[memory_id] = idx
            self._save(idx, "purged", t_now)
        return rec

    def purge_forgotten(
        self,
        *,
        retention_days: float = 30.0,
        now: float | str | None = None,
        dry_run: bool = False,
    ) -> list[str]:
        """Purge every memory forgotten at least ``retention_days`` before ``now`` (design §D3.7:
        soft deletes are kept for undo, then purged); returns their ids, in row order.

        Args:
            retention_days: The undo window, in days (>= 0).
            now: The clock (default: wall clock).
            dry_run: Only list what would be purged.
        """
        if (
            isinstance(retention_days, bool)
            or not is_finite_number(retention_days)
            or retention_days < 0
        ):
            raise MemoryInputError(
                "field 'retention_days' must be a finite number >= 0, got "
                f"{shown_number(retention_days)}"
            )
        t_now = _check_time(now, "now")
        cutoff = t_now - float(retention_days) * 86400.0
        due = [
            rec.id
            for rec in self._records
            if rec.forgotten_reason is not None
            and rec.purged_at is None
            and rec.expired_at is not None
            and rec.expired_at <= cutoff
        ]
        if not dry_run and due:
            with self.batch():  # all or none
                for mid in due:
                    self.purge(mid, now=t_now)
        return due

    def correct(
        self,
        memory_id: str,
        new_text: str,
        reason: str,
        *,
        now: float | str | None = None,
        source_agent: str | None = None,
        embedding: np.ndarray | Sequence[float] | None = None,
        id: str | None = None,
    ) -> WriteResult:
        """Supersede a memory with corrected text (design §D4.4 ``correct_memory``), linked both
        ways.

        The correction keeps the old memory's client, scope and payload fields; ``id`` names the
        new memory (default: a deterministic UUID). A corrected text that another active memory
        of the same client, scope and type holds is refused: the write would deduplicate onto
        that memory and rewrite its lineage (forget the old memory instead).
        """
        idx = self.idx(memory_id)
        old = self._records[idx]
        _check_str(reason, "reason", optional=False)
        reason = self.scrubber.scrub(reason)[0]
        if old.type == "decision":
            raise DecisionImmutableError(
                f"decision {memory_id} is immutable and cannot be corrected; "
                "record a new decision instead"
            )
        if not old.active:
            raise MemoryInputError(f"memory {memory_id} is not active and cannot be corrected")
        if source_agent is not None:
            _check_str(source_agent, "source_agent", optional=False)
        t_now = _check_time(now, "now")
        scrubbed = self._scrub_text(new_text)[0]  # validated before the old one is deactivated
        holder = self._dedup.get((old.client_id, old.scope, old.type, content_hash(scrubbed)))
        if holder is not None and holder != idx:
            # The write would deduplicate onto that memory, rewriting its own lineage.
            raise MemoryInputError(
                f"memory {memory_id} cannot be corrected to the text of memory "
                f"{self._records[holder].id}, active in the same scope: forget {memory_id} "
                "instead"
            )
        if embedding is not None:
            embedding = self._check_vector(embedding, "embedding")
        with self._transaction():
            self._deactivate(idx)
            result = self.store(
                new_text,
                old.type,
                source_agent=source_agent or old.source_agent,
                client_id=old.client_id,
                key=old.key,
                subject=old.subject,
                status_value=old.status_value,
                importance=old.importance,
                category=old.category,
                knowledge_category=old.knowledge_category,
                metadata={**old.metadata, "correction_reason": reason},
                now=t_now,
                embedding=embedding,
                id=id,
                scope=old.scope,
            )
            new_idx = self._index[result.id]
            old.superseded_by = result.id
            old.superseded_at = t_now
            old.valid_to = t_now
            self._records[new_idx].supersedes = old.id
            self._save(idx, "corrected", t_now)
            self._save(new_idx, None, t_now)
        return WriteResult(result.id, "created", old.id, result.redactions)

    def promote(
        self, memory_id: str, *, now: float | str | None = None, supersede: bool = True
    ) -> WriteResult:
        """Move a memory to the ``team`` scope (docs/design.md §D3.5 ``promote``).

        An active team fact with the same key (a status with the same subject) is superseded by
        the promoted memory; with ``supersede=False`` (an agent promoting: team memories are
        not its to change) such a promotion is refused instead, naming the team memory.
        Promoting text that the team scope already holds is refused: the team copy is named in
        the error. A decision is refused (:class:`DecisionImmutableError`), as a write refuses
        to supersede or change one; the row promoted is checked as every written row is.
        """
        idx = self.idx(memory_id)
        rec = self._records[idx]
        if rec.type == "decision":
            raise DecisionImmutableError(
                f"decision {memory_id} is immutable and stays in the scope it was recorded in "
                "(a write never moves or supersedes a decision); record it in the team scope "
                "instead"
            )
        if rec.scope == TEAM:
            raise MemoryInputError(f"memory {memory_id} is already in the team scope")
        if not rec.active:
            raise MemoryInputError(f"memory {memory_id} is not active and cannot be promoted")
        dup = self._dedup.get((rec.client_id, TEAM, rec.type, rec.content_hash))
        if dup is not None:
            raise MemoryInputError(
                f"memory {memory_id}: the team scope already holds this text as "
                f"{self._records[dup].id}"
            )
        t_now = _check_time(now, "now")
        old_idx = None
        if rec.type == "fact" and rec.key is not None:
            old_idx = self._by_key.get((rec.client_id, TEAM, rec.key))
        elif rec.type == "status" and rec.subject is not None:
            old_idx = self._by_subject.get((rec.client_id, TEAM, rec.subject))
        if not supersede and old_idx is not None and old_idx != idx:
            what = f"key {rec.key!r}" if rec.type == "fact" else f"subject {rec.subject!r}"
            raise MemoryInputError(
                f"memory {memory_id}: the team scope holds {what} as {self._records[old_idx].id}; "
                "promoting would supersede it, and only a human changes team memories"
            )
        with self.batch():
            self._deactivate(idx)
            rec.scope = TEAM
            rec.active = True
            self._cols.scope[idx] = self._scopes.setdefault(TEAM, len(self._scopes))
            self._register_active(idx)
            superseded = None
            if old_idx is not None and old_idx != idx:
                superseded = self._supersede(old_idx, idx, t_now)
            self._save(idx, "promoted", t_now)
        self.scope_version += 1
        return WriteResult(rec.id, "promoted", superseded, 0)

    def touch(self, memory_ids: Sequence[str], *, now: float | str | None = None) -> None:
        """Count a search hit for each id: ``access_count += 1``, ``last_accessed_at = now``.

        Each row written is checked as :meth:`save` checks one (a caller's in-place edit of a
        record it then touches is refused, naming the field, and put back).
        """
        if isinstance(memory_ids, str):
            raise TypeError("field 'memory_ids' must be a list of ids, got a string")
        t_now = _check_time(now, "now")
        rows = [self.idx(mid) for mid in memory_ids]
        with self._transaction():
            last = dict.fromkeys(rows)
            for idx in last:  # before the counts move: the rest is as the store wrote it
                problems = self._lifecycle_problems(self._records[idx], idx)
                if problems:
                    name, what = problems[0]
                    raise MemoryInputError(
                        f"memory {self._records[idx].id}: payload field '{name}' {what}; "
                        "nothing was changed"
                    )
            for idx in rows:
                rec = self._records[idx]
                rec.access_count += 1
                rec.last_accessed_at = t_now
            # One statement for all of them (a row touched twice is written once, as it ends).
            payloads = [(i, self._checked_payload(self._records[i], i)) for i in last]
            for idx in last:
                self._sync_columns(idx)
            self._exec_many(
                "UPDATE memories SET active = ?, payload = ? WHERE idx = ?",
                [(int(self._records[i].active), text, i) for i, text in payloads],
            )
            self.version += len(rows)

    def _register_active(self, idx: int) -> None:
        """Enter an active record in the dedup and supersession lookups (per client and scope)."""
        rec = self._records[idx]
        cs = (rec.client_id, rec.scope)
        self._dedup[(*cs, rec.type, rec.content_hash)] = idx
        if rec.type == "fact" and rec.key is not None:
            self._by_key[(*cs, rec.key)] = idx
        if rec.type == "status" and rec.subject is not None:
            self._by_subject[(*cs, rec.subject)] = idx
