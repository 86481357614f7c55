"""The write log applied to a store: one function shared by the replay and the validator.

:func:`apply_op` is how :class:`~memlab.eval.replay.Replayer` writes each operation of a
dataset; :func:`write_problems` applies the whole log to a scratch store with the same function,
so everything the store refuses during an evaluation (a text over the size limit, a second
decision with the key of an active one, a value SQLite cannot hold …) is reported by
``memlab datasets validate`` too, with the file, the line and the store's message.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from memlab.datasets.format import MEMORIES_FILE, MemoryOp
from memlab.memory.records import GLOBAL_CLIENT
from memlab.memory.scopes import TEAM

if TYPE_CHECKING:
    from memlab.datasets.validate import Problem
    from memlab.memory.entities import Entity, EntityMention
    from memlab.memory.store import MemoryStore

#: What a store may raise on input it refuses (anything else is a bug, not bad input).
INPUT_ERRORS: tuple[type[BaseException], ...] = (
    TypeError,
    ValueError,
    KeyError,
    OverflowError,
    RecursionError,
)


def _message(exc: BaseException) -> str:
    if isinstance(exc, KeyError) and exc.args:
        return str(exc.args[0])
    if isinstance(exc, RecursionError):
        return "a value is nested too deeply"
    return str(exc)


def apply_op(
    store: MemoryStore,
    op: MemoryOp,
    id_map: dict[str, str],
    *,
    embedding: Any | None = None,
    event_ttl_days: float = 30.0,
) -> Any | None:
    """Apply one operation of the write log to ``store``.

    Args:
        store: The store.
        op: A store, forget, relate, correct, promote or consolidate operation.
        id_map: Dataset id → store id, updated by stores (a deduplicated write maps onto the
            earlier record) and read by forgets.
        embedding: Vector of the scrubbed text of a store (``None``: the store's embedder, if
            any).
        event_ttl_days: The TTL of a consolidate line's cleanup (the replay's ``ttl_days``).

    Returns:
        The store's write result of a store or correct operation (``None`` for the others).

    Raises:
        ValueError: ``memories.jsonl:LINE: <what the store refused>``.
    """
    res = None
    try:
        if op.op == "store":
            res = store.store(
                op.text, op.type, now=op.ts, embedding=embedding, id=op.id, **op.fields
            )
            id_map[str(op.id)] = res.id
        elif op.op == "forget":
            store.forget(id_map.get(str(op.target), str(op.target)), op.reason or "forgotten",
                         now=op.ts)
        elif op.op == "relate":
            store.relate(op.from_entity, op.relation, op.to_entity, now=op.ts,
                         scope=op.fields.get("scope", TEAM),
                         client_id=op.fields.get("client_id", GLOBAL_CLIENT))
        elif op.op == "correct":
            res = store.correct(
                id_map.get(str(op.target), str(op.target)),
                op.text,
                op.reason,
                now=op.ts,
                source_agent=op.fields.get("source_agent"),
                embedding=embedding,
                id=op.id,
            )
            id_map[str(op.id)] = res.id
        elif op.op == "promote":
            store.promote(id_map.get(str(op.target), str(op.target)), now=op.ts)
        elif op.op == "consolidate":
            from memlab.memory.consolidate import consolidate_scope

            consolidate_scope(store, now=op.ts, event_ttl_days=event_ttl_days, **op.fields)
        else:
            raise ValueError(f"unknown op {op.op!r}")
    except INPUT_ERRORS as exc:
        raise ValueError(f"{MEMORIES_FILE}:{op.line}: {_message(exc)}") from None
    return res


class _NoEntities:
    """An extractor that finds nothing: entity extraction refuses no input, and skipping it
    makes the check several times faster."""

    def extract(self, text: str, **kwargs: Any) -> list[EntityMention]:
        return []

    def resolve(self, name: str) -> Entity | None:
        return None

    def extract_query_entities(self, text: str) -> list[Entity]:
        return []


def write_problems(ops: Sequence[MemoryOp], skip_ids: set[str] | None = None) -> list[Problem]:
    """Apply the write log to a scratch store and report every operation it refuses.

    Args:
        ops: The operations that could be read, in file order.
        skip_ids: Dataset ids whose store line has problems of its own; forgets of them are
            not tried again.

    Returns:
        One problem per refused operation (file, line and the store's message).
    """
    from memlab.datasets.validate import Problem
    from memlab.memory.store import MemoryStore

    store = MemoryStore(chroma=False, extractor=_NoEntities(),  # type: ignore[arg-type]
                        defer_sqlite=True)
    id_map: dict[str, str] = {}
    skip = set(skip_ids or ())
    problems: list[Problem] = []
    store_log = logging.getLogger("memlab.store")
    was_disabled = store_log.disabled
    store_log.disabled = True  # the replay warns (keyless facts); a check need not repeat it
    try:
        for op in ops:
            if op.op in ("forget", "correct", "promote") and (
                op.target in skip or op.target not in id_map
            ):
                continue  # the target's own line (or the reference check) reports it
            try:
                apply_op(store, op, id_map)
            except ValueError as exc:
                text = str(exc).removeprefix(f"{MEMORIES_FILE}:{op.line}: ")
                problems.append(Problem(MEMORIES_FILE, op.line, None, text))
                if op.op in ("store", "correct") and op.id is not None:
                    skip.add(op.id)
    finally:
        store_log.disabled = was_disabled
        store.close()
    return problems
