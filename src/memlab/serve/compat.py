"""Reference designs' tool parameters on memlab's MCP tools (seed 003 §4, seed 004 / design §D4.5).

The MCP tools in :mod:`memlab.serve.mcp_server` are thin; what a reference design's parameter
means in memlab's model is decided here, in plain functions over
:class:`~memlab.serve.service.MemoryService` (which is not changed: every write goes through
its public methods, so scoping, scrubbing, recording and replay are exactly those of memlab's
own tools). A parameter that would change results and cannot be honoured is refused with a
one-line error naming it, never ignored.

Memory types. Seed 003's types are stored as memlab types (:data:`SEED003_TYPES`), and as a
filter (``recall``, ``search_memory``, ``list_memories``) each matches the memories whose type
(:meth:`MemoryService.describe`'s ``memory_type``) is in :data:`SEED003_FILTERS`:

============  ==========================  ===============================================
seed 003      stored as                   matched by the filter
============  ==========================  ===============================================
semantic      ``fact``                    ``fact``
episodic      ``event``                   ``event``, ``status``, ``summary``
procedural    ``preference`` (a ``fact``  ``rule``, ``preference`` (both are stored with
              with ``category=            ``category="procedural"``)
              "procedural"``)
decision      ``decision``                ``decision``
============  ==========================  ===============================================

Collections (seed 004, design §D4.1): ``coding`` holds ``rule``, ``decision`` and
``preference``; ``workspace`` holds ``fact`` and ``summary``; an ``event`` or a ``status`` is
in neither (its ``collection`` is ``None``).

Source: ``store_memory``'s ``source`` is kept in ``metadata.source`` (as the store keeps every
string: scrubbed); ``source`` filters match it exactly.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any

import numpy as np

from memlab.memory.records import MemoryRecord, UnknownMemoryError
from memlab.serve.service import MemoryService, ServiceError, iso_ms, tool_type
from memlab.timeutil import coerce_ts

#: Seed 003 §3.2's memory types and the memlab type each is stored as.
SEED003_TYPES: dict[str, str] = {
    "semantic": "fact",
    "episodic": "event",
    "procedural": "preference",
    "decision": "decision",
}
#: The memlab / §D4.1 types (``describe()["memory_type"]``) a seed 003 type filters on.
SEED003_FILTERS: dict[str, frozenset[str]] = {
    "semantic": frozenset({"fact"}),
    "episodic": frozenset({"event", "status", "summary"}),
    "procedural": frozenset({"rule", "preference"}),
    "decision": frozenset({"decision"}),
}
#: Seed 004's collections and the §D4.1 types each holds.
COLLECTIONS: dict[str, frozenset[str]] = {
    "coding": frozenset({"rule", "decision", "preference"}),
    "workspace": frozenset({"fact", "summary"}),
}
#: The page size in which :func:`list_filtered` reads the service's list.
RECALL_MAX = 100
#: The confidence of the memory :meth:`MemoryService.correct` writes (the store's default:
#: a correction does not carry the old memory's confidence over).
CORRECTED_CONFIDENCE = 1.0
#: The ranking options seed 004's ``search_memory`` takes, with the only value accepted: the
#: server ranks with its one configured pipeline.
SEED_RANKING_DEFAULTS: dict[str, Any] = {"mode": "hybrid", "use_recency": True, "use_mmr": True}


def refuse(name: str, message: str) -> ServiceError:
    """The error refusing argument ``name`` (one line: ``argument 'name': message``)."""
    return ServiceError(f"argument '{name}': {message}")


def one_of(values: Mapping[str, Any]) -> tuple[str, Any]:
    """The one argument given among aliases of the same parameter.

    Args:
        values: The aliases (memlab's name first) and what the caller gave for each
            (``None``: not given), e.g. ``{"id": None, "memory_id": "m1"}``.

    Returns:
        ``(name, value)`` of the alias given.

    Raises:
        ServiceError: None of them or more than one was given.
    """
    given = [(k, v) for k, v in values.items() if v is not None]
    names = " or ".join(f"'{k}'" for k in values)
    if not given:
        raise ServiceError(f"argument {names} is required")
    if len(given) > 1:
        both = " and ".join(f"'{k}'" for k, _ in given)
        raise ServiceError(f"arguments {both} name the same parameter: give one of them")
    return given[0]


def renamed_fields(message: str, names: Mapping[str, str]) -> str:
    """``message`` with each ``field 'old'`` the service names written as the caller's
    ``field 'new'`` (``names`` maps old to new)."""
    for old, new in names.items():
        if old != new:
            message = message.replace(f"field '{old}'", f"field '{new}'")
    return message


# ---------------------------------------------------------------------- memory types
def stored_type(memory_type: str) -> str:
    """The memory type to give the service for ``memory_type`` (a seed 003 type is mapped by
    :data:`SEED003_TYPES`; memlab's and §D4.1's pass unchanged)."""
    return SEED003_TYPES.get(memory_type, memory_type)


def type_filter(memory_type: str | None) -> tuple[str | None, frozenset[str] | None]:
    """Split a ``memory_type`` filter into what the service filters and what is filtered here.

    Returns:
        ``(service_type, local_types)``: a seed 003 type is filtered here on
        :data:`SEED003_FILTERS` (the service gets ``None``); any other goes to the service.
    """
    if memory_type in SEED003_FILTERS:
        return None, SEED003_FILTERS[memory_type]
    return memory_type, None


def translated_observations(observations: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """``capture_episode``'s observations with a seed 003 ``memory_type`` mapped
    (:func:`stored_type`); anything else is left for the service to check."""
    out = []
    for obs in observations:
        obs = dict(obs)
        if isinstance(obs.get("memory_type"), str):
            obs["memory_type"] = stored_type(obs["memory_type"])
        out.append(obs)
    return out


def collection_of(memory_type: str | None) -> str | None:
    """The seed 004 collection of a memory of §D4.1 type ``memory_type`` (``None``: an
    ``event`` or ``status``, in neither)."""
    for name, types in COLLECTIONS.items():
        if memory_type in types:
            return name
    return None


# ---------------------------------------------------------------------- records
def readable_record(service: MemoryService, memory_id: str, name: str) -> MemoryRecord:
    """The record of memory ``memory_id`` if the service's principal may see it (as the
    service's own lifecycle tools decide: of its client or ``global``, in a scope it reads,
    not forgotten); otherwise the service's unknown-memory error, naming field ``name``.

    Raises:
        ServiceError: ``field 'name': unknown memory id '...'``.
    """
    unknown = ServiceError(f"field '{name}': unknown memory id {memory_id!r}")
    store = service.store
    with service.lock:
        try:
            idx = store.idx(memory_id)
        except UnknownMemoryError:
            raise unknown from None
        rec = store.record_at(idx)
        visible = store.visible_mask(
            client_id=service.client_id, include_superseded=True, principal=service.principal
        )
        if rec.forgotten_reason is not None or not visible[idx]:
            raise unknown
    return rec


def source_of(rec: MemoryRecord) -> str | None:
    """The source a memory was stored with (``metadata.source``; ``None``: none)."""
    value = rec.metadata.get("source")
    return value if isinstance(value, str) else None


def check_collection(
    service: MemoryService, memory_id: str, collection: str | None, name: str = "id"
) -> MemoryRecord:
    """The readable record of ``memory_id`` (:func:`readable_record`), which must be in
    ``collection`` when one is given: a memory of another collection is unknown there, and
    refused with the same error as an unknown memory."""
    rec = readable_record(service, memory_id, name)
    if collection is not None and collection_of(tool_type(rec)) != collection:
        raise ServiceError(f"field '{name}': unknown memory id {memory_id!r}")
    return rec


def scrubbed(service: MemoryService, text: str) -> str:
    """``text`` as the service's store keeps it (its scrubber)."""
    return service.store.scrubber.scrub(text)[0]


def iso_timestamp(value: str, name: str) -> str:
    """An ISO 8601 timestamp with a time zone, normalised to UTC with milliseconds and ``Z``.

    Raises:
        ServiceError: ``value`` is not such a timestamp.
    """
    try:
        t = coerce_ts(value, field=name)
    except (TypeError, ValueError) as exc:
        raise refuse(name, str(exc)) from None
    return str(iso_ms(t))  # as a recording writes times (four-digit years included)


# ---------------------------------------------------------------------- search
def check_ranking(service: MemoryService, mode: str, use_recency: bool, use_mmr: bool) -> None:
    """Accept seed 004's ranking options only at their defaults (``hybrid``, ``true``,
    ``true``): the server ranks with its one configured pipeline, which decides ranking.

    Raises:
        ServiceError: naming the first option given another value, and the pipeline.
    """
    given = {"mode": mode, "use_recency": use_recency, "use_mmr": use_mmr}
    for name, default in SEED_RANKING_DEFAULTS.items():
        if given[name] != default:
            raise refuse(
                name,
                f"this server ranks with its configured pipeline {service.pipeline.name!r}, "
                f"which decides ranking; only {_shown(default)} (the default) is accepted, "
                f"got {_shown(given[name])}",
            )


def _shown(value: Any) -> str:
    return "true" if value is True else "false" if value is False else repr(value)


def query_vector(service: MemoryService, query: str) -> np.ndarray:
    """The unit vector of ``query`` (scrubbed, as a recall embeds it) by the store's embedder.

    Raises:
        ServiceError: the store has no embedder (argument ``score_threshold``).
    """
    embedder = service.store.embedder
    if embedder is None:
        raise refuse("score_threshold", "this server's store has no embedder, so no "
                     "similarity can be computed; leave it out")
    vec = np.asarray(embedder.embed([scrubbed(service, query)])[0], dtype=np.float64)
    norm = float(np.linalg.norm(vec))
    return vec / norm if norm > 0 else vec


def similarity(service: MemoryService, rec: MemoryRecord, qvec: np.ndarray) -> float | None:
    """Cosine similarity of a memory's stored (unit) vector with ``qvec`` (``None``: the
    memory has no vector)."""
    store = service.store
    vec = store.vectors.get(store.idx(rec.id))
    if vec is None:
        return None
    return float(np.dot(vec.astype(np.float64), qvec))


def recall_filtered(
    service: MemoryService,
    query: str,
    *,
    limit: int,
    memory_type: str | None = None,
    collections: Sequence[str] | None = None,
    source: str | None = None,
    score_threshold: float | None = None,
    format: str = "json",  # noqa: A002
    token_budget: int | None = None,
    annotate: bool = False,
    **service_args: Any,
) -> dict[str, Any]:
    """The service's recall with the filters it does not know applied to its ranking.

    The service serves its pipeline's ranking filtered by ``scope``, a memlab or §D4.1
    ``memory_type``, ``tags``, ``min_confidence`` (``service_args``); a seed 003
    ``memory_type`` (:func:`type_filter`), ``collections``, ``source`` (exact, on
    ``metadata.source``) and ``score_threshold`` (cosine similarity of the query's and the
    memory's vectors, kept when ``>=``) are handed to it as one more filter (its ``keep``),
    applied before ``limit`` and ``token_budget``, so the ids it records as served are the
    ones returned.

    Args:
        annotate: Add ``collection`` and ``source`` to each memory (and ``vector_score`` when
            ``score_threshold`` is given), as seed 004's ``search_memory`` returns them
            (its answer is then JSON).

    Returns:
        The service's answer: ``{recall_id, ids, memories | text}``.
    """
    service_type, local_types = type_filter(memory_type)
    wanted = set(collections) if collections else None
    qvec = None if score_threshold is None else query_vector(service, query)
    src = None if source is None else scrubbed(service, source)
    sims: dict[str, float] = {}

    def keep(rec: MemoryRecord) -> bool:
        mtype = tool_type(rec)
        if local_types is not None and mtype not in local_types:
            return False
        if wanted is not None and collection_of(mtype) not in wanted:
            return False
        if src is not None and source_of(rec) != src:
            return False
        if qvec is not None:
            sim = similarity(service, rec, qvec)
            if sim is None or sim < float(score_threshold):  # type: ignore[arg-type]
                return False
            sims[rec.id] = sim
        return True

    local = local_types is not None or wanted is not None or src is not None or qvec is not None
    res = service.recall(query, limit=limit, memory_type=service_type,
                         format="json" if annotate else format, token_budget=token_budget,
                         keep=keep if local else None, **service_args)
    if annotate:
        res["memories"] = [
            m | {"collection": collection_of(m["memory_type"]),
                 "source": source_of(service.store.get(m["id"]))}
            | ({"vector_score": sims[m["id"]]} if m["id"] in sims else {})
            for m in res["memories"]
        ]
    return res


# ---------------------------------------------------------------------- list
def list_filtered(
    service: MemoryService,
    *,
    offset: int,
    limit: int,
    memory_type: str | None = None,
    collection: str | None = None,
    source: str | None = None,
    **service_args: Any,
) -> dict[str, Any]:
    """The service's ``list_memories`` with a seed 003 ``memory_type``, a ``collection`` and
    a ``source`` (exact, on ``metadata.source``) filtering it; ``offset``, ``limit`` and
    ``total`` count the memories those filters keep. Each memory gets its ``collection`` and
    ``source``."""
    service_type, local_types = type_filter(memory_type)
    src = None if source is None else scrubbed(service, source)
    local = local_types is not None or collection is not None or src is not None
    with service.lock:
        if not local:
            res = service.list_memories(offset=offset, limit=limit, memory_type=service_type,
                                        **service_args)
            return res | {"memories": _annotated(service, res["memories"])}
        found: list[dict[str, Any]] = []
        at = 0
        while True:
            page = service.list_memories(offset=at, limit=RECALL_MAX, memory_type=service_type,
                                         **service_args)
            for m in _annotated(service, page["memories"]):
                if local_types is not None and m["memory_type"] not in local_types:
                    continue
                if collection is not None and m["collection"] != collection:
                    continue
                if src is not None and m["source"] != src:
                    continue
                found.append(m)
            at += RECALL_MAX
            if at >= page["total"]:
                break
    return {"total": len(found), "offset": offset, "memories": found[offset : offset + limit]}


def _annotated(service: MemoryService, memories: Iterable[dict[str, Any]]) -> list[dict[str, Any]]:
    return [
        m | {"collection": collection_of(m["memory_type"]),
             "source": source_of(service.store.get(m["id"]))}
        for m in memories
    ]


# ---------------------------------------------------------------------- writes
def store_metadata(
    *,
    source: str | None,
    related_ids: Sequence[str] | None,
    last_verified_at: str | None,
) -> dict[str, Any] | None:
    """``store_memory``'s metadata: ``source``, ``related_ids`` (as given) and
    ``last_verified_at`` (normalised: :func:`iso_timestamp`); none of them is a key the
    service reserves."""
    meta: dict[str, Any] = {}
    if source is not None:
        meta["source"] = source
    if related_ids:
        meta["related_ids"] = list(dict.fromkeys(related_ids))
    if last_verified_at is not None:
        meta["last_verified_at"] = iso_timestamp(last_verified_at, "last_verified_at")
    return meta or None


def check_store_options(status: str, episode_id: str | None, valid_until: str | None) -> None:
    """Refuse seed 004 ``store_memory`` options memlab cannot honour at write.

    Raises:
        ServiceError: ``status`` other than ``active``; any ``episode_id`` (the key is
            memlab's own, set by ``capture_episode``); any ``valid_until`` (memlab sets no
            validity end when storing).
    """
    if status != "active":
        raise refuse("status", f"a memory is stored 'active' (got {status!r}); supersede one "
                     "with 'supersedes' or correct_memory, retire one with delete_memory")
    if episode_id is not None:
        raise refuse("episode_id", "memlab sets a memory's episode itself: store an episode "
                     "and its observations with capture_episode")
    if valid_until is not None:
        raise refuse("valid_until", "memlab cannot set a validity end when storing (a memory "
                     "stays valid until it is superseded or deleted); leave it out")


def check_episode_options(source: str | None, related_ids: Sequence[str] | None) -> None:
    """Refuse seed 004 ``capture_episode`` options memlab's ``capture_episode`` cannot record:
    it stores no caller metadata (its memories' metadata is memlab's own ``episode_id``).

    Raises:
        ServiceError: any ``source`` or ``related_ids``.
    """
    if source is not None:
        raise refuse("source", "capture_episode cannot record a source (its memories hold "
                     "only their episode); leave it out, or store with store_memory")
    if related_ids is not None:
        raise refuse("related_ids", "capture_episode cannot record related memories (its "
                     "memories hold only their episode); leave it out, or store with "
                     "store_memory")


def check_kept(name: str, given: Any, kept: Any, what: str) -> None:
    """Refuse ``given`` for argument ``name`` unless it is ``None`` or equals ``kept``, what
    a correction keeps (``what`` says it in words).

    Raises:
        ServiceError: naming ``name`` and the value a correction keeps.
    """
    if given is not None and given != kept:
        raise refuse(name, f"a correction keeps {what} ({_shown(kept)}): give that or leave "
                     f"it out, got {_shown(given)}")


def check_correction(
    service: MemoryService,
    rec: MemoryRecord,
    *,
    memory_type: str | None = None,
    tags: Sequence[str] | None = None,
    source: str | None = None,
    confidence: float | None = None,
    scope: str | None = None,
    related_ids: Sequence[str] | None = None,
    last_verified_at: str | None = None,
) -> None:
    """Refuse what :meth:`MemoryService.correct` cannot honour: it keeps the old memory's
    type, tags, source, scope and other metadata, and writes confidence
    :data:`CORRECTED_CONFIDENCE`. Each argument passes when left out or equal to that.

    Raises:
        ServiceError: naming the first argument that differs.
    """
    if memory_type is not None:
        check_kept("memory_type", stored_type(memory_type), tool_type(rec),
                   "the old memory's type")
    if tags is not None:
        old = service.describe(rec)["tags"]
        given = [scrubbed(service, t) for t in dict.fromkeys(tags)]
        if set(given) != set(old):
            check_kept("tags", given, old, "the old memory's tags")
    check_kept("source", None if source is None else scrubbed(service, source),
               source_of(rec), "the old memory's source")
    if confidence is not None and float(confidence) != CORRECTED_CONFIDENCE:
        raise refuse("confidence", "a correction is written with confidence "
                     f"{CORRECTED_CONFIDENCE} (memlab's correct sets no other): give that or "
                     f"leave it out, got {confidence}")
    check_kept("scope", scope, rec.scope, "the old memory's scope")
    if related_ids is not None:
        check_kept("related_ids", list(dict.fromkeys(related_ids)),
                   rec.metadata.get("related_ids"), "the old memory's related_ids")
    if last_verified_at is not None:
        check_kept("last_verified_at", iso_timestamp(last_verified_at, "last_verified_at"),
                   rec.metadata.get("last_verified_at"), "the old memory's last_verified_at")


def correct_checked(
    service: MemoryService,
    memory_id: str,
    content: str,
    reason: str,
    *,
    name: str = "id",
    collection: str | None = None,
    **options: Any,
) -> tuple[MemoryRecord, dict[str, Any]]:
    """:meth:`MemoryService.correct` of a memory of ``collection`` (when given), refusing
    options it cannot honour (:func:`check_correction`); under the service's lock, so the
    memory checked is the one corrected.

    Returns:
        The old record and the service's answer ``{id, superseded, redactions}``.
    """
    with service.lock:
        rec = check_collection(service, memory_id, collection, name)
        check_correction(service, rec, **options)
        return rec, service.correct(memory_id, content, reason)


def store_superseding(
    service: MemoryService,
    old_id: str,
    content: str,
    memory_type: str,
    **options: Any,
) -> dict[str, Any]:
    """``store_memory`` with ``supersedes``: the new memory replaces ``old_id`` through
    :meth:`MemoryService.correct` (linked both ways, as ``correct_memory``), which needs the
    two memories' types to agree and keeps the old memory's scope, tags and source.

    Returns:
        ``store_memory``'s answer: ``{id, action, superseded, redactions, scope,
        memory_type}``.
    """
    with service.lock:
        rec = readable_record(service, old_id, "supersedes")
        old_type = tool_type(rec)
        if stored_type(memory_type) != old_type:
            raise refuse("supersedes", f"memory {old_id!r} is a {old_type!r}: a memory "
                         f"replaces one of its own type (got memory_type {memory_type!r})")
        check_correction(service, rec, **options)
        try:
            res = service.correct(old_id, content, "superseded by a new memory (store_memory)")
        except ServiceError as exc:
            raise ServiceError(renamed_fields(str(exc), {"old_id": "supersedes",
                                                         "new_content": "content"})) from None
    return {"id": res["id"], "action": "created", "superseded": res["superseded"],
            "redactions": res["redactions"], "scope": rec.scope, "memory_type": old_type}

