"""The transport-independent memory service behind ``memlab serve``.

:class:`MemoryService` owns one store, one pipeline, one principal (who the server serves), an
optional :class:`~memlab.serve.recording.Recorder` and a clock. Every MCP tool and every HTTP
ingest item is one of its methods; arguments are checked here (``ServiceError`` names the field
at fault), so every transport rejects bad input the same way.

Memory types. Design §D0.1's ``event``, ``fact``, ``decision`` and ``status`` are the model;
design §D4.1's types map onto it so that its agents' calls work unchanged:

============  ===========================================================================
§D4.1 type    stored as
============  ===========================================================================
rule          ``fact``, ``importance="critical"``, ``category="procedural"`` (a hard
              constraint: correctable, superseded by ``key``; like a decision it does not
              decay: decay reads a memory's kind, :func:`~memlab.memory.records.kind_of`)
preference    ``fact``, ``category="procedural"`` (a soft convention)
summary       ``fact``, ``category="episodic"`` (a distilled discussion; decays, never
              expires)
============  ===========================================================================

The §D4.1 type is kept in ``metadata.memory_type`` and reported back as ``memory_type``;
``recall(memory_type="rule")`` filters on it. Tags live in ``metadata.tags``.

Namespaces (:mod:`memlab.memory.scopes`). An agent reads ``team``, its own ``agent:`` scope and
its projects; it writes its own scope by default, or a project it is assigned to; ``team`` only
through ``promote``. A human principal (``principal=None``) reads and writes every scope. A
memory the principal may not read is reported as unknown, never as forbidden. Reads go through
the store's visibility mask with the principal, so the pipeline's stages enforce it too.

Replay consistency. A recall runs exactly what a replay of the recording runs: event TTL expiry
at the call's time, the configured pipeline on a :class:`~memlab.stages.base.QueryContext`
with the client, principal, ``at_time`` and ``include_superseded``, then the top ``touch_k`` of
the pipeline's ranking count as accesses. ``scope``, ``memory_type``, ``tags``,
``min_confidence``, ``limit`` and ``token_budget`` filter that ranking afterwards, so the ids
served are the replayed ranking with those filters applied. The clock is quantised to
milliseconds and strictly increasing, so recorded timestamps order the calls as they happened.

Recording fidelity. A write's recording line holds exactly what the store holds: it is built
from the record the store wrote (a deduplicated write's fields are scrubbed by the store's own
scrubber), timestamps are written with four-digit years (:func:`iso_ms`), and every line is
checked against the dataset validator's rules before its call commits
(:meth:`MemoryService._check_line`): a call the recording could not replay is refused, with
nothing written. Names, keys, subjects, episode ids and scopes that hold a credential are
refused (:meth:`MemoryService._no_credential`): the store would keep them scrubbed, so two
secrets would name one entity. Text that shows nothing (control characters, terminal escapes)
is refused wherever text is taken.

Bulk ingest. One item's failure, whatever it is, is that item's error: its write is undone by
a savepoint and the group commit of the other callers' batches goes on.
"""

from __future__ import annotations

import hashlib
import json
import logging
import math
import re
import threading
import time
import unicodedata
import uuid
from collections import deque
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any
from xml.sax.saxutils import escape, quoteattr

import numpy as np

from memlab.datasets.format import MEMORIES_FILE, QUERIES_FILE
from memlab.datasets.validate import _check_memory_line
from memlab.memory.consolidate import consolidate_scope, expire_events
from memlab.memory.records import (
    GLOBAL_CLIENT,
    IMPORTANCE_LEVELS,
    MEMORY_TYPES,
    RELATION_TYPES,
    MemoryRecord,
    UnknownMemoryError,
    json_problem,
)
from memlab.memory.scopes import TEAM, Principal, check_name, check_scope, seen_strength
from memlab.memory.scrub import scrub
from memlab.memory.sqlite_io import RECORDING_MARK
from memlab.memory.store import MemoryStore, WriteResult
from memlab.numeric import shown_number
from memlab.pipeline import Pipeline
from memlab.serve.recording import _dumps
from memlab.stages.base import QueryContext
from memlab.timeutil import coerce_ts
from memlab.tokens import count_tokens

logger = logging.getLogger("memlab.serve")

#: Design §D4.1's memory types and how they are stored (type, payload defaults).
SEED004_TYPES: dict[str, tuple[str, dict[str, str]]] = {
    "rule": ("fact", {"importance": "critical", "category": "procedural"}),
    "preference": ("fact", {"category": "procedural"}),
    "summary": ("fact", {"category": "episodic"}),
}
TOOL_MEMORY_TYPES: tuple[str, ...] = (*MEMORY_TYPES, *SEED004_TYPES)
FORMATS: tuple[str, ...] = ("bullets", "json", "xml")
WRITABLE_RELATIONS: tuple[str, ...] = tuple(r for r in RELATION_TYPES if r != "co_occurrence")
DECISION_STATUSES: tuple[str, ...] = ("active", "superseded", "all")
#: Metadata keys the service and the lifecycle write and read themselves: a caller's
#: ``metadata`` may not set them (``tags`` and ``memory_type`` have their own arguments).
RESERVED_METADATA: frozenset[str] = frozenset({
    "tags", "memory_type", "entity", "decision", "episode_id", "conflicts_with", "contradicts",
    "clarification_question", "clarification_surfaced",
})


class ServiceError(ValueError):
    """A call the service refuses; the message names the field at fault."""


def scrub_text(text: str) -> str:
    """``text`` scrubbed by the default scrubber (the service itself scrubs with its store's
    scrubber, so that what it records is what the store holds)."""
    return scrub(text)[0]


_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)


def iso_ms(ts: float | None) -> str | None:
    """Epoch seconds as a recording writes them: ISO 8601 in UTC, whole milliseconds, ``Z``, a
    four-digit year (``0999-06-01T00:00:00.000Z``; years 1-999 included, which
    :func:`memlab.timeutil.to_iso` writes as ``999-…``, a text no ISO 8601 parser reads).
    Computed in integer milliseconds, so parsing it back gives exactly the service's float."""
    if ts is None:
        return None
    dt = _EPOCH + timedelta(milliseconds=round(ts * 1000.0))
    return (
        f"{dt.year:04d}-{dt.month:02d}-{dt.day:02d}T{dt.hour:02d}:{dt.minute:02d}:"
        f"{dt.second:02d}.{dt.microsecond // 1000:03d}Z"
    )


#: Terminal escape sequences (CSI, OSC, DCS/SOS/PM/APC, two-character ESC sequences, 8-bit CSI).
_ESCAPES = re.compile(
    r"\x1b(?:\[[0-?]*[ -/]*[@-~]|\][^\x07\x1b]*(?:\x07|\x1b\\)?|[PX^_][^\x1b]*(?:\x1b\\)?"
    r"|[ -/]*[0-~])?|\x9b[0-?]*[ -/]*[@-~]"
)
#: Unicode categories that show nothing: control, format, separators, unassigned.
_INVISIBLE = frozenset({"Cc", "Cf", "Cn", "Zs", "Zl", "Zp"})


def _visible(value: str) -> bool:
    """Whether ``value`` shows something once terminal escape sequences, control and format
    characters and white space are taken out (``"\\x00"``, ``"\\x1b[31m"``: nothing)."""
    if "\x1b" in value or "\x9b" in value:
        value = _ESCAPES.sub("", value)
    return any(unicodedata.category(c) not in _INVISIBLE for c in value)


def _entity_key(name: str) -> str:
    """How the graph compares entity names (white space collapsed, any case)."""
    return " ".join(name.split()).lower()


def _strict_name(value: Any, name: str) -> str:
    """An agent or project name (:func:`~memlab.memory.scopes.check_name`)."""
    try:
        check_name(value, name)
    except (TypeError, ValueError) as exc:
        raise ServiceError(str(exc)) from None
    return value


# ---------------------------------------------------------------------- argument checks
def _text(value: Any, name: str, *, max_chars: int = 20_000, optional: bool = False) -> str | None:
    if value is None and optional:
        return None
    if not isinstance(value, str):
        raise ServiceError(f"field '{name}' must be a string, got {type(value).__name__}")
    if not value.strip():
        raise ServiceError(f"field '{name}' must not be empty")
    if len(value) > max_chars:
        raise ServiceError(f"field '{name}' is longer than {max_chars} characters")
    found = json_problem(value)
    if found is not None:  # a lone surrogate: not text, and no file can hold it
        raise ServiceError(f"field '{name}' {found[1]}")
    if not _visible(value):
        raise ServiceError(
            f"field '{name}' holds no visible text (only control characters, format "
            "characters or terminal escape sequences)"
        )
    return value


def _meta_str(value: Any) -> str | None:
    """A string read back from a memory's metadata (``None`` when it is not one: metadata from
    elsewhere, e.g. a dataset, is not checked by this service)."""
    return value if isinstance(value, str) else None


def tool_type(rec: MemoryRecord) -> str:
    """A memory's type as the tools report it: the §D4.1 type it was stored with
    (``metadata.memory_type``), else its own type."""
    return _meta_str(rec.metadata.get("memory_type")) or rec.type


def _meta_strs(value: Any) -> list[str]:
    """The strings of a list read back from a memory's metadata (others are left out)."""
    return [v for v in value if isinstance(v, str)] if isinstance(value, list) else []


def _choice(value: Any, name: str, choices: Sequence[str]) -> str:
    if not isinstance(value, str) or value not in choices:
        raise ServiceError(f"field '{name}': {value!r} is not one of {', '.join(choices)}")
    return value


def _int(value: Any, name: str, low: int, high: int) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise ServiceError(f"field '{name}' must be an integer, got {type(value).__name__}")
    if not low <= value <= high:
        raise ServiceError(f"field '{name}' must lie in [{low}, {high}], got {value}")
    return value


def _unit(value: Any, name: str) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise ServiceError(f"field '{name}' must be a number, got {type(value).__name__}")
    if not 0 <= value <= 1:  # exact for an int of any size
        raise ServiceError(f"field '{name}' must lie in [0, 1], got {shown_number(value)}")
    return float(value)


def _strings(value: Any, name: str, *, max_items: int = 50) -> list[str]:
    if value is None:
        return []
    if not isinstance(value, (list, tuple)) or not all(
        isinstance(v, str) and v.strip() for v in value
    ):
        raise ServiceError(f"field '{name}' must be an array of non-empty strings")
    if len(value) > max_items:
        raise ServiceError(f"field '{name}' holds more than {max_items} items")
    for i, v in enumerate(value):
        _text(v, f"{name}[{i}]")
    return list(dict.fromkeys(value))


def _ts(value: Any, name: str) -> float | None:
    """A timestamp argument, quantised to the millisecond a recording keeps."""
    if value is None:
        return None
    if isinstance(value, str) and len(value) > 64:
        raise ServiceError(
            f"field '{name}' is longer than 64 characters; expected an ISO 8601 timestamp "
            "such as 2026-03-01T10:00:00Z"
        )
    try:
        t = coerce_ts(value, field=name)
    except (TypeError, ValueError) as exc:
        raise ServiceError(str(exc)) from None
    return _quantise(t)


def _quantise(t: float | None) -> float | None:
    return None if t is None else int(np.floor(t * 1000.0 + 1e-6)) / 1000.0


@dataclass
class _Ticket:
    """One :meth:`MemoryService.store_many` call waiting for its group commit."""

    items: Sequence[Any]
    results: list[dict[str, Any]] | None = None
    error: BaseException | None = None
    done: threading.Event = field(default_factory=threading.Event)


@dataclass
class _Served:
    """What one recall served (kept for ``feedback``)."""

    ids: tuple[str, ...]
    judged: set[str] = field(default_factory=set)


class MemoryService:
    """Every memlab tool over one store, for one principal.

    Args:
        store: The memory store (the service is its only writer).
        pipeline: The retrieval pipeline ``recall`` runs.
        principal: The agent served, or ``None`` for a human principal (reads every scope).
        client_id: The tenant of every call (``"global"`` = system-wide).
        source_agent: ``source_agent`` of the memories written (default: the agent's name, or
            ``"human"``).
        recorder: Appends every write and recall (``None``: nothing is recorded).
        clock: Wall clock in epoch seconds (tests inject a fixed one).
        touch_k: Top hits of each recall counted as accesses (as the replay's ``touch_k``).
        ttl_days: Event TTL applied before each recall (as the replay's TTL).
        expire: Apply the TTL before each recall (as the replay's ``expire``).
        depth: How much of the pipeline's ranking a recall serves from, its filters applied
            within it (as the replay's ``depth``, the ranking it keeps). These four settings
            go into the recording's ``[replay]`` table (:meth:`Recorder.settle_replay`), which
            its replay takes as defaults; a recording made with other settings is refused.
        judge: Name written into the judgments of ``feedback`` (default: the agent's name, or
            ``"human"``).
        max_served: How many recall ids ``feedback`` remembers.
        group_items: Most items one group commit of :meth:`store_many` takes (calls waiting at
            the same time share one transaction and one durable append; a call is never split).
        chroma_idle: Seconds without a call after which the service hands the store's pending
            vectors to chromadb (:meth:`MemoryStore.flush_chroma`, in the background) — for a
            store opened with ``chroma_sync="deferred"``. ``None``: never (the store's own
            ``chroma_sync`` decides).
        chroma_max_backlog: With ``chroma_idle``: pending vectors that are handed to chromadb
            even while calls keep coming (bounds the backlog of a server that is never idle).
    """

    def __init__(
        self,
        store: MemoryStore,
        pipeline: Pipeline,
        *,
        principal: Principal | None = None,
        client_id: str = GLOBAL_CLIENT,
        source_agent: str | None = None,
        recorder: Any | None = None,
        clock: Callable[[], float] = time.time,
        touch_k: int = 10,
        ttl_days: float = 30.0,
        expire: bool = True,
        depth: int = 100,
        judge: str | None = None,
        max_served: int = 10_000,
        group_items: int = 2000,
        chroma_idle: float | None = None,
        chroma_max_backlog: int = 50_000,
    ) -> None:
        for stage in _stages(pipeline):
            if stage.requires_fit or stage.needs_generator:
                raise ServiceError(
                    f"pipeline {pipeline.name!r}: stage {type(stage).__name__} needs "
                    "training queries or a generator; serve a pipeline without it"
                )
        check_name(client_id, "client_id")
        if isinstance(group_items, bool) or not isinstance(group_items, int) or group_items < 1:
            raise ServiceError(f"field 'group_items' must be an int >= 1, got {group_items!r}")
        if chroma_idle is not None and (
            isinstance(chroma_idle, bool)
            or not isinstance(chroma_idle, (int, float))
            or not chroma_idle > 0
        ):
            raise ServiceError(f"field 'chroma_idle' must be a number > 0, got {chroma_idle!r}")
        if (
            isinstance(chroma_max_backlog, bool)
            or not isinstance(chroma_max_backlog, int)
            or chroma_max_backlog < 1
        ):
            raise ServiceError(
                f"field 'chroma_max_backlog' must be an int >= 1, got {chroma_max_backlog!r}"
            )
        self.store = store
        self.pipeline = pipeline
        self.principal = principal
        self.client_id = client_id
        default_name = principal.agent if principal is not None else "human"
        self.source_agent = source_agent or default_name
        self.judge = judge or default_name
        # The names every call writes or records: valid, and never a credential (the store
        # would keep one scrubbed where the recording, and the scopes, keep it as given).
        _strict_name(client_id, "client_id")
        self._no_credential(client_id, "client_id")
        if principal is not None:
            for i, name in enumerate((principal.agent, *principal.projects)):
                where = "agent" if i == 0 else "projects"
                _strict_name(name, where)
                self._no_credential(name, where)
        _text(self.source_agent, "source_agent", max_chars=200)
        self._no_credential(self.source_agent, "source_agent")
        _text(self.judge, "judge", max_chars=200)
        self._no_credential(self.judge, "judge")
        self.recorder = recorder
        self.clock = clock
        self.touch_k = touch_k
        self.ttl_days = ttl_days
        self.expire = expire
        self.depth = depth
        self.max_served = max_served
        self.lock = threading.RLock()
        self.cache: dict[Any, Any] = {}
        self._served: dict[str, _Served] = {}
        self._served_order: deque[str] = deque()
        last = getattr(recorder, "last_ts", None)
        # None, not a time: any millisecond (before 1970 included) can be the first call's
        self._last_ms: int | None = None if last is None else round(last * 1000.0)
        self.pending_judgments: list[dict[str, Any]] = []
        self.group_items = group_items
        self.chroma_idle = chroma_idle
        self.chroma_max_backlog = chroma_max_backlog
        self._queue: deque[_Ticket] = deque()
        self._queue_lock = threading.Lock()
        # The recording lines of the write unit under way (see _unit), by file.
        self._pending: dict[str, list[dict[str, Any]]] | None = None
        self._stack: ExitStack | None = None  # the unit under way (see _unit, _begin)
        self._begun = False  # whether its transaction has begun
        self._mark_key = ""
        settings = {"ttl_days": ttl_days, "expire": expire, "touch_k": touch_k, "depth": depth}
        from memlab.eval.replay import ReplayConfig

        try:
            ReplayConfig.from_mapping(settings, where="the server's settings").check(
                "the server's settings"
            )
        except (TypeError, ValueError) as exc:
            raise ServiceError(str(exc)) from None
        if recorder is not None:
            recorder.settle_replay(settings)  # what a replay of the recording takes
            self._reconcile_recording(recorder)
        self._last_call = time.monotonic()
        self._closed = threading.Event()
        self._idle_thread: threading.Thread | None = None
        if chroma_idle is not None:
            self._idle_thread = threading.Thread(
                target=self._idle_loop, name="memlab-chroma-idle", daemon=True
            )
            self._idle_thread.start()

    def close(self) -> None:
        """Stop the idle flusher, close the store (it flushes chromadb) and the recording
        (idempotent; a call under way holds the lock, and ends first)."""
        if self._closed.is_set():
            return
        self._closed.set()
        if self._idle_thread is not None:
            self._idle_thread.join()
        with self.lock:
            try:
                self.store.close()
            finally:
                if self.recorder is not None:
                    self.recorder.close()

    def _idle_loop(self) -> None:
        """Hand pending vectors to chromadb once no call came for ``chroma_idle`` seconds, or
        once ``chroma_max_backlog`` of them are waiting."""
        idle = float(self.chroma_idle or 1.0)
        while not self._closed.wait(min(idle / 4.0, 0.25)):
            backlog = self.store.chroma_backlog
            if not backlog or (
                time.monotonic() - self._last_call < idle and backlog < self.chroma_max_backlog
            ):
                continue
            with self.lock:
                if not self._closed.is_set():
                    self.store.flush_chroma()

    # ------------------------------------------------------------------ helpers
    def now(self) -> float:
        """The call's time: the clock in whole milliseconds, strictly after the previous call."""
        with self.lock:
            ms = math.floor(self.clock() * 1000.0)
            if self._last_ms is not None:
                ms = max(ms, self._last_ms + 1)
            self._last_ms = ms
            self._last_call = time.monotonic()
            return ms / 1000.0

    # ------------------------------------------------------------------ argument checks
    def _scrub(self, text: str) -> str:
        """``text`` as the store keeps it (its scrubber)."""
        return self.store.scrubber.scrub(text)[0]

    def _no_credential(self, value: str, name: str, *, fields: str | None = None) -> None:
        """Refuse a name, key or id that holds a credential.

        The store keeps such a value scrubbed (``Vendor [REDACTED:github_token] corp``), so
        two different secrets would name one entity, key or subject; and a scope or an agent
        name is kept as given. A value the scrubber leaves alone passes. ``fields`` names the
        caller's fields when ``value`` is built from several (``fields 'name' and 'type'``)."""
        scrubbed, found = self.store.scrubber.scrub(value)
        if found:
            kinds = sorted(set(re.findall(r"\[REDACTED:([a-z0-9_]+)\]", scrubbed)))
            shown = scrubbed if len(scrubbed) <= 120 else scrubbed[:117] + "..."
            who = f"{fields} hold" if fields else f"field '{name}' holds"
            raise ServiceError(
                f"{who} what looks like a credential ({', '.join(kinds)}): it "
                f"names or keys something, and scrubbed it would read {shown!r}, as any other "
                "secret would; give it without the secret"
            )

    def _fits(self, text: str, fields: str) -> None:
        """Refuse a memory text built from several of the caller's ``fields`` that is longer
        than the store takes, naming those fields (the text is no field of the call)."""
        limit = self.store.max_text_chars
        if len(text) > limit:
            raise ServiceError(
                f"{fields} make a text of {len(text)} characters, longer than the {limit} a "
                "memory holds"
            )

    def _ident(
        self, value: Any, name: str, *, max_chars: int = 200, optional: bool = False
    ) -> str | None:
        """A name, key, subject or id: visible text (:func:`_text`) without a credential."""
        value = _text(value, name, max_chars=max_chars, optional=optional)
        if value is not None:
            self._no_credential(value, name)
        return value

    def _scope_arg(self, value: Any, name: str = "scope") -> str | None:
        if value is None:
            return None
        try:
            check_scope(value, name)
        except (TypeError, ValueError) as exc:
            raise ServiceError(str(exc)) from None
        if value != TEAM:
            _strict_name(value.partition(":")[2], name)
            self._no_credential(value, name)
        return value

    def _properties(self, value: Any, name: str) -> dict[str, Any]:
        """Relation or entity properties: an object of JSON values (no NaN, no infinity, no
        lone surrogate, not nested too deep: checked before anything recurses into it),
        scrubbed by the store's scrubber (keys too); checked before anything is written."""
        if value is None:
            return {}
        if not isinstance(value, Mapping):
            raise ServiceError(f"field '{name}' must be an object, got {type(value).__name__}")
        found = json_problem(dict(value), depth=2)
        if found is not None:
            key, message = found
            raise ServiceError(f"field '{name}{'' if key is None else '.' + key}' {message}")
        try:
            return dict(self.store.scrubber.scrub_value(dict(value), field=name)[0])
        except (TypeError, ValueError, RecursionError) as exc:
            raise ServiceError(f"field '{name}': {exc}") from None

    def _check_line(self, line: Mapping[str, Any]) -> None:
        """Refuse a call whose ``memories.jsonl`` line the dataset validator would refuse
        (or JSON could not hold): the recording must replay exactly."""
        try:
            _dumps(line)
        except (TypeError, ValueError, RecursionError) as exc:
            raise ServiceError(f"the call cannot be recorded: {exc}") from None
        problems = _check_memory_line(0, dict(line))[0].problems
        if problems:
            p = problems[0]
            where = "" if p.field is None else f"field '{p.field}': "
            raise ServiceError(
                f"{where}{p.message} (the recording could not be replayed; nothing was written)"
            )

    def _visible(self, *, include_superseded: bool = False) -> np.ndarray:
        return self.store.visible_mask(
            client_id=self.client_id,
            include_superseded=include_superseded,
            principal=self.principal,
        )

    def _readable_id(self, memory_id: str) -> bool:
        """Whether the memory ``memory_id`` exists and the principal reads it
        (:meth:`_readable`)."""
        try:
            return self._readable(self.store.get(memory_id))
        except UnknownMemoryError:
            return False

    def _readable(self, rec: MemoryRecord) -> bool:
        """Whether ``rec`` is of this server's client (or ``global``) and the principal reads
        its namespace (a human: every one), whatever the memory's state."""
        if rec.client_id not in (self.client_id, GLOBAL_CLIENT):
            return False
        return self.principal is None or self.principal.can_read(rec.scope)

    def _record_of(self, memory_id: Any, name: str = "id", *, change: bool = False) -> MemoryRecord:
        """The record of a memory the principal may see (else: unknown, as if absent); with
        ``change``, one it may also change (forget, correct, promote): an agent changes the
        memories of its own scope and its projects', never ``team``'s."""
        _text(memory_id, name, max_chars=200)
        try:
            idx = self.store.idx(memory_id)
        except UnknownMemoryError:
            raise ServiceError(f"field '{name}': unknown memory id {memory_id!r}") from None
        rec = self.store.record_at(idx)
        if rec.forgotten_reason is not None or not self._visible(include_superseded=True)[idx]:
            raise ServiceError(f"field '{name}': unknown memory id {memory_id!r}")
        if change and rec.client_id != self.client_id:
            raise ServiceError(
                f"field '{name}': memory {rec.id!r} belongs to client {rec.client_id!r}: this "
                f"server changes only memories of its client {self.client_id!r} (a memory of "
                "'global', shared by every client, is changed by a server of 'global')"
            )
        if change and self.principal is not None and not self.principal.can_write(rec.scope):
            raise ServiceError(
                f"field '{name}': agent {self.principal.agent!r} may not change memory "
                f"{rec.id!r} of scope {rec.scope!r} (an agent changes its own scope's and its "
                "projects' memories; team memories are changed by a human)"
            )
        recorded = getattr(self.recorder, "has_memory", None)
        if change and recorded is not None and not recorded(rec.id):
            raise ServiceError(
                f"field '{name}': memory {rec.id!r} is not in the recording "
                f"{self.recorder.path} (it was written before the recording began): a replay of "
                "the recording could not change it, so this server does not"
            )
        return rec

    def _write_scope(self, scope: Any) -> str:
        scope = self._scope_arg(scope)
        if self.principal is None:
            return scope or TEAM
        if scope is None:
            return self.principal.own_scope
        if scope == TEAM:
            raise ServiceError(
                "field 'scope': an agent writes its own scope or its projects'; move a memory "
                "to 'team' with promote"
            )
        if not self.principal.can_write(scope):
            who = self.principal.agent
            raise ServiceError(f"field 'scope': agent {who!r} may not write {scope!r}")
        return scope

    def _read_scope(self, scope: Any) -> str | None:
        scope = self._scope_arg(scope)
        if scope is not None and self.principal is not None and not self.principal.can_read(scope):
            who = self.principal.agent
            raise ServiceError(f"field 'scope': agent {who!r} may not read {scope!r}")
        return scope

    def _reconcile_recording(self, rec: Any) -> None:
        """Bring the recording back to the calls the store committed (at start-up).

        Each write unit appends its lines before its SQLite commit and records, in the same
        transaction, how long the recording's files then are (:meth:`_unit`). A server killed
        between the append and the commit leaves lines of writes the store never made past
        that mark: they are cut here, and kept in ``.FILE.uncommitted`` beside it (a warning
        says how many bytes).
        A recording shorter than the mark was cut or replaced by someone else: refused. A
        recording this store has no mark for must be empty (the store then starts it): one that
        holds lines was written by another store (or moved here from another path), and
        continuing it would make a log whose replay holds writes this store never made."""
        self._mark_key = f"{RECORDING_MARK}{Path(rec.path).resolve()}"
        sizes = rec.sizes()
        stored = self.store.meta(self._mark_key)
        if stored is None:
            held = sorted(f for f, n in sizes.items() if n > 0)
            if held:
                raise ValueError(
                    f"{Path(rec.path) / held[0]}: the recording holds calls that the store "
                    f"{self.store.path or '(in memory)'} did not make (another store wrote it, "
                    "or it was moved here): serve the store that wrote it, or record into a "
                    "new directory"
                )
            self.store.set_meta(self._mark_key, json.dumps(sizes, sort_keys=True))
            return
        marks = {str(k): int(v) for k, v in json.loads(stored).items()}
        for fname, mark in sorted(marks.items()):
            size = sizes.get(fname, 0)
            if size < mark:
                raise ValueError(
                    f"{Path(rec.path) / fname}: {size} bytes, but the store "
                    f"{self.store.path or '(in memory)'} committed calls recorded up to byte "
                    f"{mark}: the recording was cut or replaced; restore it, or record into a "
                    "new directory"
                )
        extra = {f: sizes[f] - m for f, m in marks.items() if sizes.get(f, 0) > m}
        if extra:
            rec.cut_to(marks, keep=True)
            logger.warning(
                "%s: cut %s (kept in .FILE.uncommitted): lines appended by a call whose writes "
                "the store never committed (the server stopped between the two)",
                rec.path, ", ".join(f"{n} bytes of {f}" for f, n in sorted(extra.items())),
            )

    @contextmanager
    def _unit(self) -> Iterator[None]:
        """One call's writes to the store and its lines in the recording, all or nothing
        (caller holds the lock; a unit inside a unit joins it).

        The store's writes run in one transaction (:meth:`MemoryStore.batch`); the lines the
        call records (:meth:`_record`, and a recall's query line) are appended and made
        durable before the commit, and the lengths of the recording's files go into the
        store's ``meta`` table in the same transaction. So a commit is never missing from the
        recording: if the commit fails, the appended lines are cut again; if the process dies
        between append and commit, the next start cuts them (:meth:`_reconcile_recording`).
        A killed server loses at most the calls in flight, from both alike.

        The transaction begins with the call's first write (:meth:`_begin`, which every write
        calls first): a call refused before it writes anything leaves SQLite untouched, where
        a rolled-back transaction makes the store rebuild its whole in-memory state (half a
        second at 20,000 memories, with the lock held against every other client)."""
        if self._pending is not None:
            yield
            return
        self._pending = {MEMORIES_FILE: [], QUERIES_FILE: []}
        rec = self.recorder
        marks: dict[str, int] | None = None
        version = self.store.version
        try:
            with ExitStack() as stack:
                self._stack, self._begun = stack, False
                yield
                pending = {f: lines for f, lines in self._pending.items() if lines}
                if rec is not None and pending:
                    self._begin()
                    marks = rec.sizes()
                    ends = rec.append_all(pending)
                    self.store.set_meta(self._mark_key, json.dumps(ends, sort_keys=True))
                if not self._begun and self.store.version != version:
                    raise RuntimeError("a write of this call ran outside its unit's transaction")
        except BaseException:
            if marks is not None and rec is not None:
                rec.cut_to(marks)  # this unit's lines: its writes did not commit
            raise
        finally:
            self._pending = None
            self._stack, self._begun = None, False

    def _begin(self) -> None:
        """Begin the unit's transaction, if it has not begun (before the call's first write)."""
        stack = self._stack
        if stack is None:
            raise RuntimeError("a write must run inside a write unit")
        if not self._begun:
            stack.enter_context(self.store.batch())
            self._begun = True

    def _record(
        self, lines: list[dict[str, Any]], fname: str = MEMORIES_FILE, *, checked: bool = False
    ) -> None:
        """Lines for the recording, appended when the call's unit commits (:meth:`_unit`);
        a write line the dataset validator would refuse fails the call (:meth:`_check_line`;
        ``checked``: the lines were checked already)."""
        if self._pending is None:
            raise RuntimeError("a recorded write must run inside a write unit")
        if fname == MEMORIES_FILE and not checked:
            for line in lines:
                self._check_line(line)
        self._pending[fname].extend(lines)

    def describe(self, rec: MemoryRecord, score: float | None = None) -> dict[str, Any]:
        """A memory as the tools return it; a ``supersedes``/``superseded_by`` link to a memory
        the principal cannot read is left out (a promotion can carry one into ``team``)."""
        out: dict[str, Any] = {
            "id": rec.id,
            "text": rec.text,
            "memory_type": tool_type(rec),
            "type": rec.type,
            "scope": rec.scope,
            "client_id": rec.client_id,
            "source_agent": rec.source_agent,
            "confidence": rec.confidence,
            "importance": rec.importance,
            "tags": _meta_strs(rec.metadata.get("tags")),
            "created_at": iso_ms(rec.created_at),
            "active": rec.active,
        }
        for name in ("key", "subject", "status_value"):
            if getattr(rec, name) is not None:
                out[name] = getattr(rec, name)
        for name in ("supersedes", "superseded_by"):
            linked = getattr(rec, name)
            if linked is not None and self._readable_id(linked):
                out[name] = linked
        if rec.valid_from is not None:
            out["valid_from"] = iso_ms(rec.valid_from)
        if score is not None:
            out["score"] = float(score)
        return out

    # ------------------------------------------------------------------ writes
    def store_memory(
        self,
        content: Any,
        memory_type: Any = "fact",
        *,
        scope: Any = None,
        tags: Any = None,
        confidence: Any = 1.0,
        key: Any = None,
        subject: Any = None,
        status_value: Any = None,
        importance: Any = None,
        valid_from: Any = None,
        metadata: Any = None,
        source_agent: Any = None,
        _record: bool = True,
        _own_meta: bool = False,
    ) -> dict[str, Any]:
        """``store``: one memory through the store's full write path.

        Returns ``{id, action, superseded, redactions, scope, memory_type}``; ``action`` is
        ``created``, ``deduplicated`` or ``corroborated``.
        """
        with self.lock, self._unit():
            return self._store_locked(
                content, memory_type, scope=scope, tags=tags, confidence=confidence, key=key,
                subject=subject, status_value=status_value, importance=importance,
                valid_from=valid_from, metadata=metadata, source_agent=source_agent,
                now=self.now(), record=_record, own_meta=_own_meta,
            )[0]

    def _store_locked(
        self,
        content: Any,
        memory_type: Any,
        *,
        now: float,
        record: bool,
        scope: Any = None,
        tags: Any = None,
        confidence: Any = 1.0,
        key: Any = None,
        subject: Any = None,
        status_value: Any = None,
        importance: Any = None,
        valid_from: Any = None,
        metadata: Any = None,
        source_agent: Any = None,
        category: str | None = None,
        own_meta: bool = False,
    ) -> tuple[dict[str, Any], dict[str, Any]]:
        """One store (caller holds the lock); its answer and recording line. ``own_meta``: the
        metadata is the service's own (a decision's, an entity's, an episode's), which may set
        :data:`RESERVED_METADATA` keys; a caller's may not."""
        content = _text(content, "content", max_chars=self.store.max_text_chars)
        memory_type = _choice(memory_type, "memory_type", TOOL_MEMORY_TYPES)
        mtype, defaults = SEED004_TYPES.get(memory_type, (memory_type, {}))
        target_scope = self._write_scope(scope)
        tag_list = _strings(tags, "tags")
        conf = _unit(confidence, "confidence")
        key = self._ident(key, "key", max_chars=500, optional=True)
        subject = self._ident(subject, "subject", max_chars=500, optional=True)
        status_value = _text(status_value, "status_value", max_chars=500, optional=True)
        if importance is not None:
            _choice(importance, "importance", IMPORTANCE_LEVELS)
        t_valid = _ts(valid_from, "valid_from")
        if metadata is not None and not isinstance(metadata, Mapping):
            raise ServiceError(f"field 'metadata' must be an object, got {type(metadata).__name__}")
        meta: dict[str, Any] = dict(metadata or {})
        # Checked before anything recurses into it (scrubbing included): a value nested
        # hundreds of levels deep is refused here, never a RecursionError.
        found = json_problem(meta, depth=2)
        if found is not None:
            raise ServiceError(f"field 'metadata' {found[1]}")
        if meta and not own_meta:
            taken = sorted(k for k in meta if k in RESERVED_METADATA)
            if taken:
                raise ServiceError(
                    f"field 'metadata.{taken[0]}' is set by memlab, not by a caller"
                    + (f" (give it as '{taken[0]}')" if taken[0] in ("tags", "memory_type")
                       else "")
                )
        agent = source_agent if source_agent is not None else self.source_agent
        _text(agent, "source_agent", max_chars=200)
        if tag_list:
            meta["tags"] = tag_list
        if memory_type != mtype:
            meta["memory_type"] = memory_type
        # Given as they came: the store scrubs every string (metadata keys included), and the
        # recording line is built from what it then holds (:meth:`_store_line`).
        fields: dict[str, Any] = {
            "source_agent": agent,
            "client_id": self.client_id,
            "key": key,
            "subject": subject,
            "status_value": status_value,
            "importance": importance or defaults.get("importance", "medium"),
            "category": category or defaults.get("category"),
            "valid_from": t_valid,
            "metadata": meta or None,
            "confidence": conf,
            "scope": target_scope,
        }
        fields = {k: v for k, v in fields.items() if v is not None}
        try:
            # A savepoint: whatever fails after the write (its line, the line's check) undoes
            # the write alone, so the store never holds a write its recording lacks.
            self._begin()
            with self.store.batch():
                res = self.store.store(content, mtype, now=now, **fields)
                line = self._store_line(res, now, mtype, fields)
                self._check_line(line)
        except ServiceError:
            raise
        except (TypeError, ValueError) as exc:
            raise ServiceError(str(exc)) from None
        if record:
            self._record([line], checked=True)
        # The memory the answer names: a deduplicated write's is the earlier one, whose type
        # (a rule, say, where a fact of the same text was asked for) the answer reports.
        stored = self.store.get(res.id)
        out = {
            "id": res.id,
            "action": res.action,
            "superseded": res.superseded,
            "redactions": res.redactions,
            "scope": stored.scope,
            "memory_type": tool_type(stored),
        }
        return out, line

    _SCRUBBED_FIELDS = ("source_agent", "key", "subject", "status_value")

    def _store_line(
        self, res: WriteResult, now: float, mtype: str, fields: dict[str, Any]
    ) -> dict[str, Any]:
        """The recording line of a store: exactly what the store holds (dataset id = store id;
        a deduplicated write gets a fresh id that a replay maps onto the same record).

        A created memory's fields are read back from its record; a deduplicated write made
        no record, and its fields are scrubbed by the store's scrubber as the store scrubbed
        them (text and strings with :meth:`~memlab.memory.scrub.Scrubber.scrub`, metadata,
        keys included, with :meth:`~memlab.memory.scrub.Scrubber.scrub_value`)."""
        rec = self.store.get(res.id)
        if res.action == "created":
            ident = res.id
            stored = {name: getattr(rec, name) for name in fields}
        else:
            seed = f"{res.id}|{now!r}|{uuid.uuid4().hex}".encode()
            ident = f"{res.id}~{hashlib.sha256(seed).hexdigest()[:12]}"
            scrubber = self.store.scrubber
            stored = dict(fields)
            for name in self._SCRUBBED_FIELDS:
                if name in stored:
                    stored[name] = scrubber.scrub(stored[name])[0]
            if "metadata" in stored:
                stored["metadata"] = scrubber.scrub_value(stored["metadata"], field="metadata")[0]
        line: dict[str, Any] = {"id": ident, "ts": iso_ms(now), "type": mtype, "text": rec.text}
        for name, value in stored.items():
            line[name] = iso_ms(value) if name == "valid_from" else value
        return line

    def store_many(self, items: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
        """Bulk ingest: each item through :meth:`store_memory`'s path. Returns one result per
        item: ``{index, ok, ...}``.

        Group commit: calls that arrive while another is being written wait in a queue; the
        next one to get the lock writes the waiting calls together (up to ``group_items``
        items) in one transaction with a savepoint per item (a failing item is undone alone),
        scrubs and embeds their texts once (:meth:`MemoryStore.prepared`) and appends their
        lines to the recording with one durable append before the commit (:meth:`_unit`).
        Each call returns once its items are recorded and committed; if the append or the
        commit fails, every call of the group raises.
        """
        ticket = _Ticket(items)
        with self._queue_lock:
            self._queue.append(ticket)
        group: list[_Ticket] = []
        with self.lock:
            with self._queue_lock:
                size = 0
                while self._queue and (not group or size + len(self._queue[0].items)
                                       <= self.group_items):
                    group.append(self._queue.popleft())
                    size += len(group[-1].items)
            if group:
                try:
                    with self._unit():
                        self._record(self._store_group(group), checked=True)
                except BaseException as exc:
                    for t in group:
                        t.error = exc
                finally:
                    for t in group:
                        t.done.set()
        ticket.done.wait()
        if ticket.error is not None:
            raise ticket.error
        assert ticket.results is not None
        return ticket.results

    _ITEM_FIELDS = frozenset({
        "content", "memory_type", "scope", "tags", "confidence", "key", "subject",
        "status_value", "importance", "valid_from", "metadata", "agent",
    })

    def _store_group(self, group: Sequence[_Ticket]) -> list[dict[str, Any]]:
        """Write the items of a group of calls in one transaction; set each call's results;
        return the recording lines (caller holds the lock). Whatever one item raises is that
        item's error (:meth:`_store_items`): only the group's commit, or its append to the
        recording, can fail the group."""
        lines: list[dict[str, Any]] = []
        texts = [
            item.get("content") for t in group for item in t.items if isinstance(item, Mapping)
        ]
        self._begin()
        with self.store.batch(), ExitStack() as stack:
            try:
                stack.enter_context(self.store.prepared(texts))
            except Exception:  # noqa: BLE001 - then each write scrubs and embeds its own text
                logger.exception("bulk ingest: preparing a group's texts failed; writing each "
                                 "item on its own")
            for t in group:
                t.results = self._store_items(t.items, lines)
        return lines

    def _store_items(
        self, items: Sequence[Any], lines: list[dict[str, Any]]
    ) -> list[dict[str, Any]]:
        """Each item in a savepoint of its own: an item that fails, however, is undone alone
        and answered with its error; the others go on."""
        results: list[dict[str, Any]] = []
        for i, item in enumerate(items):
            try:
                out, line = self._store_item(item)  # its write and line: all or nothing
            except (ServiceError, TypeError, ValueError, KeyError) as exc:
                error = exc.args[0] if isinstance(exc, KeyError) and exc.args else exc
                results.append({"index": i, "ok": False, "error": str(error)})
                continue
            except Exception as exc:  # noqa: BLE001 - one item never fails the others
                logger.exception("bulk ingest: item %d failed", i)
                results.append({"index": i, "ok": False, "error":
                                f"the item was not stored: internal error ({type(exc).__name__})"})
                continue
            lines.append(line)
            results.append({"index": i, "ok": True, **out})
        return results

    def _store_item(self, item: Any) -> tuple[dict[str, Any], dict[str, Any]]:
        """One bulk item through :meth:`_store_locked` (caller holds the lock)."""
        allowed = self._ITEM_FIELDS
        if not isinstance(item, Mapping):
            raise ServiceError(f"item must be an object, got {type(item).__name__}")
        unknown = sorted(map(str, set(item) - allowed))
        if unknown:
            shown = ", ".join(repr(u[:100]) for u in unknown[:10])
            raise ServiceError(
                f"unknown field(s) {shown}; expected {', '.join(sorted(allowed))}"
            )
        agent = item.get("agent")
        if agent is not None:
            _strict_name(agent, "agent")
            self._no_credential(agent, "agent")
            if self.principal is not None and agent != self.principal.agent:
                raise ServiceError(
                    f"field 'agent': {agent!r} is not the token's agent "
                    f"{self.principal.agent!r}"
                )
        scope = item.get("scope")
        if scope is None and agent is not None and self.principal is None:
            scope = f"agent:{agent}"
        args = {k: v for k, v in item.items() if k not in ("agent", "scope")}
        return self._store_locked(
            args.pop("content", None),
            args.pop("memory_type", "fact"),
            now=self.now(),
            record=False,
            scope=scope,
            source_agent=agent,
            **args,
        )

    def store_decision(
        self,
        decision: Any,
        rationale: Any = None,
        alternatives: Any = None,
        participants: Any = None,
        *,
        scope: Any = None,
        tags: Any = None,
        key: Any = None,
    ) -> dict[str, Any]:
        """``store_decision``: an immutable decision record (docs/design.md §D3.3)."""
        decision = _text(decision, "decision")
        rationale = _text(rationale, "rationale", optional=True)
        alts = _strings(alternatives, "alternatives")
        people = _strings(participants, "participants")
        # The text is built from parts so that its fields are kept in the metadata exactly as
        # the text's scrubbing redacts them: a secret recognised only in context (a password
        # after "db password ... Rationale:") never stays in clear in a field of its own.
        parts: list[str] = [decision.strip()]
        fields: list[tuple[str, int | None, int]] = []  # (name, item, index into parts)
        if rationale:
            lead = rationale[: len(rationale) - len(rationale.lstrip())]
            parts += [" Rationale: ", rationale.strip()]
            fields.append(("rationale", None, len(parts) - 1))
        for name, items, label in (("alternatives", alts, " Alternatives considered: "),
                                   ("participants", people, " Participants: ")):
            if items:
                parts.append(label)
                for i, item in enumerate(items):
                    if i:
                        parts.append(", ")
                    parts.append(item)
                    fields.append((name, i, len(parts) - 1))
                parts.append(".")
        text = "".join(parts)
        self._fits(text, "fields 'decision', 'rationale', 'alternatives' and 'participants'")
        redacted, _ = self.store.scrubber.scrub_parts(parts)
        kept: dict[str, Any] = {"rationale": rationale, "alternatives": list(alts),
                                "participants": list(people)}
        for name, item, at in fields:
            if item is None:  # the rationale, with the spaces the text strips kept
                kept[name] = lead + redacted[at] + rationale[len(lead) + len(parts[at]):]
            else:
                kept[name][item] = redacted[at]
        meta = {"decision": kept}
        return self.store_memory(
            text, "decision", scope=scope, tags=tags, key=key, importance="high", metadata=meta,
            _own_meta=True,
        )

    def relate(
        self, from_entity: Any, relation: Any, to_entity: Any, properties: Any = None
    ) -> dict[str, Any]:
        """``relate``: a typed relation between two entities, written in the principal's scope
        (an agent: its own; a human: ``team``) of this server's client, so that only
        principals who read that scope of that client see it (properties are kept in the
        recording; the graph keeps the relation's strength)."""
        with self.lock, self._unit():
            out, line = self._relate_locked(
                from_entity, relation, to_entity, properties, scope=None, now=self.now()
            )
            self._record([line])
        return out

    def _relate_locked(
        self, from_entity: Any, relation: Any, to_entity: Any, properties: Any, *,
        scope: Any, now: float, where: str = "",
    ) -> tuple[dict[str, Any], dict[str, Any]]:
        """Check every argument, then write the relation (caller holds the lock); its answer
        and recording line. ``where`` prefixes the field names of errors (``relations[0].``)."""
        src = self._ident(from_entity, f"{where}from")
        rel = _choice(relation, f"{where}relation", WRITABLE_RELATIONS)
        dst = self._ident(to_entity, f"{where}to")
        if _entity_key(src) == _entity_key(dst):
            raise ServiceError(f"field '{where}to': {src!r} and {dst!r} name the same entity")
        target_scope = self._write_scope(scope)
        props = self._properties(properties, f"{where}properties")
        self._begin()
        try:
            a, b, _ = self.store.relate_edge(src, rel, dst, now=now, scope=target_scope,
                                             client_id=self.client_id)
        except (TypeError, ValueError) as exc:
            message, field = str(exc), "field '"
            if where and message.startswith(field):  # the field as the caller sent it
                message = field + where + message.removeprefix(field)
            raise ServiceError(message) from None
        strength = self._visible_strength(a, b, rel)  # a human: the graph's; an agent: its own
        # The names hold no credential (_ident), so the store keeps them as given.
        line: dict[str, Any] = {
            "ts": iso_ms(now), "op": "relate", "from": src, "relation": rel, "to": dst,
            "scope": target_scope,
        }
        if self.client_id != GLOBAL_CLIENT:
            line["client_id"] = self.client_id
        if props:
            line["properties"] = props
        return {"from": src, "relation": rel, "to": dst, "strength": strength}, line

    def store_entity(
        self, name: Any, type: Any = "concept", properties: Any = None, relations: Any = None,
        *, scope: Any = None,
    ) -> dict[str, Any]:
        """``store_entity``: an entity as a fact keyed ``entity:{type}:{name}`` (a new version
        supersedes the old), plus its relations, all or nothing: a refused relation leaves no
        fact behind."""
        name = self._ident(name, "name")
        etype = self._ident(type, "type", max_chars=64)
        props = self._properties(properties, "properties")
        rels = relations or []
        if not isinstance(rels, (list, tuple)):
            raise ServiceError("field 'relations' must be an array of {relation, to} objects")
        for i, r in enumerate(rels):
            if not isinstance(r, Mapping) or set(r) - {"relation", "to", "properties"}:
                raise ServiceError(
                    f"field 'relations[{i}]' must be an object with 'relation', 'to' and "
                    "optional 'properties'"
                )
            _choice(r.get("relation"), f"relations[{i}].relation", WRITABLE_RELATIONS)
            to = self._ident(r.get("to"), f"relations[{i}].to")
            if _entity_key(to) == _entity_key(name):
                raise ServiceError(
                    f"field 'relations[{i}].to': {name!r} and {to!r} name the same entity"
                )
            self._properties(r.get("properties"), f"relations[{i}].properties")
        text = f"{name} is a {etype}."
        if props:
            text += " " + "; ".join(f"{k}: {v}" for k, v in sorted(props.items())) + "."
        self._fits(text, "fields 'name', 'type' and 'properties'")
        key = f"entity:{etype}:{name}"
        self._no_credential(key, "key", fields="fields 'name' and 'type' (the entity's key)")
        meta = {"entity": {"name": name, "type": etype, "properties": props}}
        with self.lock:
            now = self.now()
            with self._unit():
                out, line = self._store_locked(
                    text, "fact", now=now, record=False, scope=scope,
                    key=key, metadata=meta, own_meta=True,
                )
                lines = [line]
                out["relations"] = []
                for i, r in enumerate(rels):
                    answer, rel_line = self._relate_locked(
                        name, r.get("relation"), r.get("to"), r.get("properties"),
                        scope=scope, now=now, where=f"relations[{i}].",
                    )
                    out["relations"].append(answer)
                    lines.append(rel_line)
                self._record(lines)
        return out

    # ------------------------------------------------------------------ lifecycle
    def forget(self, memory_id: Any, reason: Any) -> dict[str, Any]:
        """``forget``: soft-delete a memory (never returned again; decisions refuse)."""
        reason = _text(reason, "reason", max_chars=2000)
        with self.lock, self._unit():
            rec = self._record_of(memory_id, change=True)
            now = self.now()
            self._begin()
            try:
                self.store.forget(rec.id, reason, now=now)
            except (TypeError, ValueError) as exc:
                raise ServiceError(str(exc)) from None
            stored = self.store.get(rec.id).forgotten_reason  # as the store keeps it: scrubbed
            self._record(
                [{"ts": iso_ms(now), "op": "forget", "target": rec.id,
                  "reason": stored if stored is not None else self._scrub(reason)}]
            )
        return {"id": rec.id, "forgotten": True}

    def correct(self, old_id: Any, new_content: Any, reason: Any) -> dict[str, Any]:
        """``supersede`` / ``correct``: replace a memory with corrected text, linked both ways."""
        new_content = _text(new_content, "new_content", max_chars=self.store.max_text_chars)
        reason = _text(reason, "reason", max_chars=2000)
        with self.lock, self._unit():
            rec = self._record_of(old_id, "old_id", change=True)
            now = self.now()
            self._begin()
            try:
                res = self.store.correct(
                    rec.id, new_content, reason, now=now, source_agent=self.source_agent,
                )
            except (TypeError, ValueError) as exc:
                raise ServiceError(str(exc)) from None
            new = self.store.get(res.id)  # the line holds what the store holds: scrubbed
            stored_reason = _meta_str(new.metadata.get("correction_reason"))
            self._record(
                [{"id": res.id, "ts": iso_ms(now), "op": "correct", "target": rec.id,
                  "text": new.text,
                  "reason": stored_reason if stored_reason is not None else self._scrub(reason),
                  "source_agent": new.source_agent}]
            )
        return {"id": res.id, "superseded": rec.id, "redactions": res.redactions}

    def promote(self, memory_id: Any) -> dict[str, Any]:
        """``promote``: move a memory the principal can read to the ``team`` scope."""
        with self.lock, self._unit():
            rec = self._record_of(memory_id, change=True)
            if rec.type == "decision":
                raise ServiceError(
                    f"field 'id': memory {rec.id!r} is a decision: decisions are immutable and "
                    "stay where they were recorded (a replay refuses to move one); record it "
                    "in the team scope instead"
                )
            now = self.now()
            self._begin()
            try:
                res = self.store.promote(rec.id, now=now, supersede=self.principal is None)
            except (TypeError, ValueError) as exc:
                raise ServiceError(str(exc)) from None
            self._record([{"ts": iso_ms(now), "op": "promote", "target": rec.id}])
        return {"id": res.id, "scope": TEAM, "superseded": res.superseded}

    def consolidate(self, scope: Any = None, since: Any = None) -> dict[str, Any]:
        """``consolidate``: one consolidation cycle (no LLM merges) over a scope (an agent:
        its own scope by default), memories created at or after ``since``."""
        scope = self._read_scope(scope)
        if self.principal is not None:
            if scope is None:
                scope = self.principal.own_scope
            elif not self.principal.can_write(scope):
                raise ServiceError(
                    f"field 'scope': agent {self.principal.agent!r} may not consolidate "
                    f"{scope!r}: an agent consolidates its own scope or its projects'"
                )
        t_since = _ts(since, "since")
        with self.lock, self._unit():
            now = self.now()
            self._begin()
            report = consolidate_scope(
                self.store, now=now, client_id=self.client_id, scope=scope, since=t_since,
                event_ttl_days=self.ttl_days,
            )
            line: dict[str, Any] = {"ts": iso_ms(now), "op": "consolidate",
                                    "client_id": self.client_id}
            if scope is not None:
                line["scope"] = scope
            if t_since is not None:
                line["since"] = iso_ms(t_since)
            self._record([line])
        # The TTL cleanup a cycle runs retires old events store-wide (as every recall's does);
        # the caller is told of the ones it may read only.
        expired = [self.store.get(mid) for mid in report.expired]
        return {
            "processed": report.processed,
            "reclassified": len(report.reclassified),
            "expired": sum(1 for rec in expired if self._readable(rec)),
        }

    def capture_episode(
        self, summary: Any, observations: Any, episode_id: Any = None, *, scope: Any = None,
    ) -> dict[str, Any]:
        """``capture_episode`` (design §D4.4): an episode summary (an ``event``) plus 1-10 durable
        observations, each stored as a memory tagged with the episode; all or nothing: a
        refused observation leaves nothing behind, and its error names it
        (``observations[1].memory_type``)."""
        summary = _text(summary, "summary")
        if not isinstance(observations, (list, tuple)) or not 1 <= len(observations) <= 10:
            raise ServiceError("field 'observations' must be an array of 1 to 10 objects")
        episode = self._ident(episode_id, "episode_id", optional=True)
        episode = episode or f"ep-{uuid.uuid4().hex[:12]}"
        allowed = {"content", "memory_type", "tags", "confidence"}
        for i, obs in enumerate(observations):
            if not isinstance(obs, Mapping) or set(obs) - allowed or "content" not in obs:
                raise ServiceError(
                    f"field 'observations[{i}]' must be an object with 'content' and optional "
                    "'memory_type', 'tags', 'confidence'"
                )
        meta = {"episode_id": episode}
        with self.lock:
            with self._unit():
                first, line = self._store_locked(
                    summary, "event", now=self.now(), record=False, scope=scope, metadata=meta,
                    own_meta=True,
                )
                lines = [line]
                ids = []
                for i, obs in enumerate(observations):
                    try:
                        res, line = self._store_locked(
                            obs["content"],
                            obs.get("memory_type", "fact"),
                            now=self.now(),
                            record=False,
                            scope=scope,
                            tags=obs.get("tags"),
                            confidence=obs.get("confidence", 1.0),
                            metadata=meta,
                            own_meta=True,
                        )
                    except ServiceError as exc:
                        raise ServiceError(
                            str(exc).replace("field '", f"field 'observations[{i}].", 1)
                        ) from None
                    ids.append(res["id"])
                    lines.append(line)
                self._record(lines)
        return {"episode_id": episode, "summary_id": first["id"], "observation_ids": ids}

    # ------------------------------------------------------------------ reads
    def recall(
        self,
        query: Any,
        *,
        scope: Any = None,
        memory_type: Any = None,
        tags: Any = None,
        limit: Any = 10,
        min_confidence: Any = None,
        at_time: Any = None,
        include_superseded: Any = False,
        format: Any = "json",
        token_budget: Any = None,
        keep: Callable[[MemoryRecord], bool] | None = None,
    ) -> dict[str, Any]:
        """``recall``: run the configured pipeline and serve its ranking, filtered.

        ``keep`` is one more filter, from the tool layer (:mod:`memlab.serve.compat`: a
        reference design's collections, sources, similarity threshold), applied with the
        others before ``limit`` and ``token_budget``: the ids recorded as served, and those
        ``feedback`` accepts, are always the ones the caller was given.

        Returns ``{recall_id, ids, memories | text}``; ``recall_id`` names the recall for
        ``feedback`` and is the ``qid`` of the recorded query.
        """
        text = self._scrub(_text(query, "query", max_chars=4000))
        scope = self._read_scope(scope)
        mtype = None if memory_type is None else _choice(memory_type, "memory_type",
                                                           TOOL_MEMORY_TYPES)
        tag_list = [self._scrub(t) for t in _strings(tags, "tags")]  # as the store keeps tags
        limit = _int(limit, "limit", 1, 100)
        min_conf = None if min_confidence is None else _unit(min_confidence, "min_confidence")
        if not isinstance(include_superseded, bool):
            raise ServiceError("field 'include_superseded' must be a boolean")
        fmt = _choice(format, "format", FORMATS)
        budget = None if token_budget is None else _int(token_budget, "token_budget", 1, 10**6)
        t_at = _ts(at_time, "at_time")
        with self.lock, self._unit():
            now = self.now()
            if t_at is not None and t_at > now:
                raise ServiceError(f"field 'at_time': {iso_ms(t_at)} is in the future")
            self._begin()
            if self.expire:
                expire_events(self.store, now=now, event_ttl_days=self.ttl_days)
            recall_id = f"r-{uuid.uuid4().hex}"
            if len(self.cache) > self.max_served:
                self.cache.clear()  # query embeddings: bounded, recomputed when needed
            ctx = QueryContext(
                qid=recall_id,
                text=text,
                store=self.store,
                now=now,
                client_id=self.client_id,
                at_time=t_at,
                include_superseded=include_superseded,
                embedder=self.store.embedder,
                cache=self.cache,
                principal=self.principal,
            )
            # The ranking a replay keeps (its depth): the filters below serve from it alone
            frame = self.pipeline.run(ctx).head(self.depth)
            ranked = frame["mem_id"].to_list()
            scores = frame["score"].to_list()
            if self.touch_k > 0 and ranked:
                self.store.touch(ranked[: self.touch_k], now=now)
            served: list[tuple[MemoryRecord, float]] = []
            used = 0
            for mid, score in zip(ranked, scores, strict=True):
                rec = self.store.get(mid)
                if scope is not None and rec.scope != scope:
                    continue
                if mtype is not None and mtype not in (rec.type, rec.metadata.get("memory_type")):
                    continue
                if tag_list and not set(tag_list) <= set(_meta_strs(rec.metadata.get("tags"))):
                    continue
                if min_conf is not None and rec.confidence < min_conf:
                    continue
                if keep is not None and not keep(rec):
                    continue
                if budget is not None:
                    cost = count_tokens(rec.text)
                    if used + cost > budget:
                        break
                    used += cost
                served.append((rec, score))
                if len(served) >= limit:
                    break
            ids = [rec.id for rec, _ in served]
            # Described inside the unit: a memory that cannot be described undoes the call
            # (its accesses and its query line), rather than recording ids never served.
            described = [self.describe(rec, score) for rec, score in served]
            self._remember(recall_id, ids)
            if self.recorder is not None:
                line: dict[str, Any] = {"qid": recall_id, "ts": iso_ms(now),
                                        "client_id": self.client_id}
                if self.principal is not None:
                    line["agent"] = self.principal.agent
                    if self.principal.projects:
                        line["projects"] = list(self.principal.projects)
                if t_at is not None:
                    line["at_time"] = iso_ms(t_at)
                if include_superseded:
                    line["include_superseded"] = True
                line.update({"text": text, "relevant": {}, "tags": ["live"], "served": ids})
                self._record([line], QUERIES_FILE)
        out: dict[str, Any] = {"recall_id": recall_id, "ids": ids}
        if fmt == "json":
            out["memories"] = described
        elif fmt == "bullets":
            out["text"] = "\n".join(
                f"- [{m['memory_type']}] {m['text']} (id {m['id']})" for m in described
            )
        else:
            out["text"] = _xml(described)
        return out

    def _remember(self, recall_id: str, ids: Sequence[str]) -> None:
        self._served[recall_id] = _Served(tuple(ids))
        self._served_order.append(recall_id)
        while len(self._served_order) > self.max_served:
            self._served.pop(self._served_order.popleft(), None)

    def feedback(
        self, recall_id: Any, useful_ids: Any = None, not_useful_ids: Any = None, note: Any = None,
    ) -> dict[str, Any]:
        """``feedback``: judge the memories a recall served (useful → grade 1, not useful → 0).

        Judgments go to ``judgments.jsonl`` of the recording (source ``agent`` for an agent,
        ``human`` for a human principal).
        """
        _text(recall_id, "recall_id", max_chars=200)
        useful = _strings(useful_ids, "useful_ids", max_items=100)
        useless = _strings(not_useful_ids, "not_useful_ids", max_items=100)
        note = _text(note, "note", max_chars=2000, optional=True)
        if not useful and not useless:
            raise ServiceError("give at least one id in 'useful_ids' or 'not_useful_ids'")
        both = sorted(set(useful) & set(useless))
        if both:
            raise ServiceError(f"ids {both} are in both 'useful_ids' and 'not_useful_ids'")
        with self.lock:
            served = self._served.get(recall_id)
            if served is None:
                raise ServiceError(f"field 'recall_id': unknown recall {recall_id!r}")
            for name, ids in (("useful_ids", useful), ("not_useful_ids", useless)):
                for mid in ids:
                    if mid not in served.ids:
                        self._record_of(mid, name)  # a visible memory, even if not served
            now = self.now()
            source = "agent" if self.principal is not None else "human"
            lines = []
            for ids, grade in ((useful, 1), (useless, 0)):
                for mid in ids:
                    line: dict[str, Any] = {"qid": recall_id, "mem_id": mid, "grade": grade,
                                            "source": source, "judge": self.judge,
                                            "ts": iso_ms(now)}
                    if note is not None:
                        line["note"] = self._scrub(note)
                    lines.append(line)
                    served.judged.add(mid)
            if self.recorder is not None:
                self.recorder.judgments(lines)
            else:
                self.pending_judgments.extend(lines)
        return {"recall_id": recall_id, "judged": len(lines),
                "recorded": self.recorder is not None}

    def list_memories(
        self,
        *,
        offset: Any = 0,
        limit: Any = 20,
        memory_type: Any = None,
        scope: Any = None,
        include_inactive: Any = False,
    ) -> dict[str, Any]:
        """``list_memories``: the visible memories in write order, paginated."""
        offset = _int(offset, "offset", 0, 10**9)
        limit = _int(limit, "limit", 1, 100)
        mtype = None if memory_type is None else _choice(memory_type, "memory_type",
                                                           TOOL_MEMORY_TYPES)
        scope = self._read_scope(scope)
        if not isinstance(include_inactive, bool):
            raise ServiceError("field 'include_inactive' must be a boolean")
        with self.lock:
            rows = np.flatnonzero(self._visible(include_superseded=include_inactive))
            recs = [self.store.record_at(int(i)) for i in rows]
            recs = [
                r for r in recs
                if (scope is None or r.scope == scope)
                and (mtype is None or mtype in (r.type, r.metadata.get("memory_type")))
            ]
            page = recs[offset : offset + limit]
            return {
                "total": len(recs),
                "offset": offset,
                "memories": [self.describe(r) for r in page],
            }

    def get_decisions(
        self, topic: Any = None, since: Any = None, status: Any = "active", limit: Any = 20,
    ) -> dict[str, Any]:
        """``get_decisions``: decisions (newest first) whose text mentions every word of
        ``topic``, created at or after ``since``."""
        topic = _text(topic, "topic", max_chars=500, optional=True)
        t_since = _ts(since, "since")
        status = _choice(status, "status", DECISION_STATUSES)
        limit = _int(limit, "limit", 1, 100)
        words = [w.lower() for w in (topic or "").split()]
        with self.lock:
            rows = np.flatnonzero(
                self._visible(include_superseded=True) & (self.store.column("type") == "decision")
            )
            found = []
            for i in rows[::-1]:
                rec = self.store.record_at(int(i))
                if status == "active" and not rec.active:
                    continue
                if status == "superseded" and rec.active:
                    continue
                if t_since is not None and rec.created_at < t_since:
                    continue
                if words and not all(w in rec.text.lower() for w in words):
                    continue
                found.append(self.describe(rec) | {"decision": rec.metadata.get("decision")})
                if len(found) >= limit:
                    break
        return {"decisions": found}

    # ------------------------------------------------------------------ the entity graph
    def _entity_rows_visible(self, entity: int, visible: np.ndarray) -> list[int]:
        return [m for m in self.store.graph.memories_of(entity) if visible[m]]

    def _edges(
        self, entity: int, visible: np.ndarray
    ) -> list[tuple[int, str, float, int, int]]:
        """Edges of ``entity`` the principal may see, as ``(other, relation, strength, source,
        target)``: each direction of a typed relation written in a scope it reads of this
        client, with the strength written there (:meth:`_visible_strength`), and
        co-occurrences backed by a memory it can read, of strength the number of such memories
        (the shared graph's own strength also counts other tenants' memories)."""
        graph = self.store.graph
        out: dict[tuple[int, str, int, int], float] = {}
        mine = set(self._entity_rows_visible(entity, visible))
        for other, rel, _ in graph.neighbours(entity):
            if rel == "co_occurrence":
                shared = mine & set(self._entity_rows_visible(other, visible))
                if shared:
                    out[(other, rel, entity, other)] = float(len(shared))
                continue
            for src, dst in ((entity, other), (other, entity)):
                w = self._visible_strength(src, dst, rel)
                if w > 0:
                    out[(other, rel, src, dst)] = w
        return sorted(
            ((o, r, w, a, b) for (o, r, a, b), w in out.items()),
            key=lambda e: (graph.entity(e[0]).name, e[1], e[3] != entity),
        )

    def _visible_strength(self, src: int, dst: int, rel: str) -> float:
        """The strength of the typed relation ``src -rel-> dst`` that the principal may see:
        what was written in the scopes it reads (a human: every scope) of this client and
        ``global`` (0: none; a relation from a store made before relations had scopes counts as
        ``team``'s of ``global``). So neither the relation nor how often other agents or
        tenants wrote it shows through."""
        graph = self.store.graph
        total = float(graph.strength(src, dst, rel))
        if total <= 0:
            return total
        return seen_strength(graph.relation_scopes(src, dst, rel), total, self.principal,
                             self.client_id)

    def _find_entity(self, name: Any, field_name: str, visible: np.ndarray) -> int:
        """The first entity called ``name`` (of any type; else its alias's) that the principal
        sees through a memory or a relation: an entity of the same name that only memories it
        cannot read made never hides the one it sees."""
        _text(name, field_name, max_chars=200)
        graph = self.store.graph
        candidates = graph.find_all(name)
        if not candidates:
            resolved = self.store.extractor.resolve(name)
            if resolved is not None:
                found = graph.find(resolved.name, resolved.type)
                candidates = [] if found is None else [found]
        for idx in candidates:
            if self._entity_rows_visible(idx, visible) or self._edges(idx, visible):
                return idx
        raise ServiceError(f"field '{field_name}': unknown entity {name!r}")

    def get_entity(
        self, name: Any, depth: Any = 1, *, scope: Any = None, field_name: str = "name"
    ) -> dict[str, Any]:
        """``get_entity``: an entity, its relations up to ``depth`` hops and the memories
        about it that the principal may read (``scope`` narrows them). An entity that only
        ``store_entity`` wrote (no relation, no memory naming it) is its profile alone."""
        depth = _int(depth, "depth", 0, 3)
        scope = self._read_scope(scope)
        with self.lock:
            visible = self._visible()
            try:
                start = self._find_entity(name, field_name, visible)
            except ServiceError:
                facts = [r for r in self._entity_facts(str(name), visible)
                         if scope is None or r.scope == scope]
                if not facts:
                    raise
                latest = facts[-1].metadata["entity"]
                return {
                    "entity": {"name": str(latest.get("name")), "type": str(latest.get("type"))},
                    "profile": [self.describe(r) for r in facts],
                    "relations": [],
                    "memories": [],
                }
            graph = self.store.graph
            seen = {start}
            frontier = [start]
            relations = []
            for _ in range(depth):
                nxt = []
                for e in frontier:
                    for other, rel, strength, src, dst in self._edges(e, visible):
                        a, b = graph.entity(src).name, graph.entity(dst).name
                        relations.append({"from": a, "relation": rel, "to": b,
                                          "strength": strength})
                        if other not in seen:
                            seen.add(other)
                            nxt.append(other)
                frontier = nxt
            ent = graph.entity(start)
            recs = [self.store.record_at(m) for m in self._entity_rows_visible(start, visible)]
            recs = [r for r in recs if scope is None or r.scope == scope]
            profile = [
                self.describe(r) for r in self._entity_facts(ent.name, visible)
                if scope is None or r.scope == scope
            ]
        unique = {(r["from"], r["relation"], r["to"]): r for r in relations}
        return {
            "entity": {"name": ent.name, "type": ent.type},
            "profile": profile,
            "relations": sorted(unique.values(), key=lambda r: (r["from"], r["relation"],
                                                                  r["to"])),
            "memories": [self.describe(r) for r in recs[-50:]],
        }

    def _entity_facts(self, name: str, visible: np.ndarray) -> list[MemoryRecord]:
        out = []
        for i in np.flatnonzero(visible):
            rec = self.store.record_at(int(i))
            ent = rec.metadata.get("entity")
            if isinstance(ent, Mapping) and str(ent.get("name", "")).lower() == name.lower():
                out.append(rec)
        return out

    def trace(self, from_entity: Any, to_entity: Any, max_depth: Any = 3) -> dict[str, Any]:
        """``trace``: a shortest path between two entities over the edges the principal may
        see (breadth first, at most ``max_depth`` hops)."""
        max_depth = _int(max_depth, "max_depth", 1, 6)
        with self.lock:
            visible = self._visible()
            a = self._find_entity(from_entity, "from", visible)
            b = self._find_entity(to_entity, "to", visible)
            graph = self.store.graph
            parent: dict[int, tuple[int, str, int] | None] = {a: None}
            frontier = [a]
            for _ in range(max_depth):
                if b in parent:
                    break
                nxt = []
                for e in frontier:
                    for other, rel, _, src, _ in self._edges(e, visible):
                        if other not in parent:
                            parent[other] = (e, rel, src)
                            nxt.append(other)
                frontier = nxt
            if b not in parent:
                return {"found": False, "path": []}
            steps = []
            node = b
            while parent[node] is not None:
                prev, rel, src = parent[node]  # type: ignore[misc]
                steps.append({"from": graph.entity(prev).name, "relation": rel,
                              "to": graph.entity(node).name, "reverse": src != prev})
                node = prev
        return {"found": True, "path": steps[::-1]}

    def resource(self, scope: str, entity: str) -> dict[str, Any]:
        """``memory://{scope}/{entity}``: the entity and its memories in one scope."""
        return self.get_entity(entity, 1, scope=scope, field_name="entity")

    def health(self) -> dict[str, Any]:
        """Counts for an authorised ``GET /health``: the memories the principal may read in
        this client and ``global`` (a human: every scope), and for a human the committed
        vectors of those memories chromadb does not hold yet
        (``chroma_backlog``; chromadb is an index that catches up, never the truth). An agent
        is told nothing of the memories it cannot read, not even how many there are."""
        with self.lock:
            readable = self.store.readable_mask(self.principal, client_id=self.client_id)
            if self.principal is not None:
                return {"status": "ok", "memories": int(readable.sum())}
            backlog = self.store.chroma_backlog_rows()
            return {"status": "ok", "memories": int(readable.sum()),
                    "chroma_backlog": int(readable[backlog[backlog < len(readable)]].sum())}


def _xml(memories: Iterable[Mapping[str, Any]]) -> str:
    parts = ["<memories>"]
    for m in memories:
        attrs = " ".join(
            f"{k}={quoteattr(str(m[k]))}"
            for k in ("id", "memory_type", "scope", "created_at", "score")
            if m.get(k) is not None
        )
        parts.append(f"  <memory {attrs}>{escape(m['text'])}</memory>")
    parts.append("</memories>")
    return "\n".join(parts)


def _stages(pipeline: Pipeline) -> list[Any]:
    from memlab.pipeline import Parallel

    out = []
    for _, stage in pipeline.named_stages():
        if not isinstance(stage, (Pipeline, Parallel)):
            out.append(stage)
    return out
