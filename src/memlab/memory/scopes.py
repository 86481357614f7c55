"""Namespaces inside a client (docs/design.md §D3.5): who may read which memories.

Every memory lives in one *scope* of its client (the tenant):

==================  ==========================================================
scope               who reads it
==================  ==========================================================
``team``            every principal of the client (the default scope)
``agent:{name}``    the agent ``name`` only (its private memory)
``project:{name}``  the agents assigned to project ``name``
==================  ==========================================================

A *principal* is who reads: ``None`` is a human, who reads every scope; a :class:`Principal`
is an agent with its project assignments. An agent writes its own ``agent:`` scope by default,
a project it is assigned to or ``team`` when it asks; ``promote`` moves a memory to ``team``.
The rule is enforced where rows are chosen (:meth:`MemoryStore.visible_mask`), so every stage
and every tool obeys it.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass

from memlab.memory.records import GLOBAL_CLIENT

TEAM = "team"
SCOPE_KINDS: tuple[str, ...] = ("agent", "project")
# Matched with ``fullmatch``: ``$`` (and ``match``) would accept a name followed by a newline.
_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.@/-]{0,127}")


def check_name(value: object, field: str) -> str:
    """An agent or project name: 1-128 characters ``[A-Za-z0-9_.@/-]``, starting alphanumeric."""
    if not isinstance(value, str):
        raise TypeError(f"field '{field}' must be a string, got {type(value).__name__}")
    if _NAME.fullmatch(value) is None:
        if "\n" in value or "\r" in value:
            raise ValueError(
                f"field '{field}': {value!r} is not a valid name (it holds a line break)"
            )
        raise ValueError(
            f"field '{field}': {value!r} is not a valid name (letters, digits and _ . @ / -, "
            "starting with a letter or digit, at most 128 characters)"
        )
    return value


def check_scope(value: object, field: str = "scope") -> str:
    """Validate a scope string (``team``, ``agent:{name}`` or ``project:{name}``)."""
    if not isinstance(value, str):
        raise TypeError(f"field '{field}' must be a string, got {type(value).__name__}")
    if value == TEAM:
        return value
    kind, sep, name = value.partition(":")
    if not sep or kind not in SCOPE_KINDS:
        raise ValueError(
            f"field '{field}': {value!r} is not a scope; expected 'team', 'agent:NAME' or "
            "'project:NAME'"
        )
    check_name(name, field)
    return value


def agent_scope(name: str) -> str:
    """The private scope of agent ``name``."""
    return f"agent:{check_name(name, 'agent')}"


def project_scope(name: str) -> str:
    """The scope of project ``name``."""
    return f"project:{check_name(name, 'project')}"


@dataclass(frozen=True, slots=True)
class Principal:
    """An agent reading or writing memories.

    Attributes:
        agent: The agent's name.
        projects: Projects the agent is assigned to (sorted, unique).
    """

    agent: str
    projects: tuple[str, ...] = ()

    @classmethod
    def of(cls, agent: str, projects: Iterable[str] = ()) -> Principal:
        """A checked principal (names validated, projects sorted and unique)."""
        check_name(agent, "agent")
        projs = tuple(sorted({check_name(p, "projects") for p in projects}))
        return cls(agent, projs)

    @property
    def own_scope(self) -> str:
        """Where the agent writes by default: ``agent:{name}``."""
        return f"agent:{self.agent}"

    def readable_scopes(self) -> tuple[str, ...]:
        """``team``, the agent's own scope and its projects' scopes."""
        return (TEAM, self.own_scope, *(f"project:{p}" for p in self.projects))

    def can_read(self, scope: str) -> bool:
        """Whether a memory of ``scope`` is visible to this agent."""
        return scope in self.readable_scopes()

    def writable_scopes(self) -> tuple[str, ...]:
        """The agent's own scope and its projects' scopes: where it writes, and whose memories
        it may forget, correct, promote or consolidate. ``team`` is read-only to an agent: a
        memory reaches it through ``promote``, and only a human changes it there."""
        return (self.own_scope, *(f"project:{p}" for p in self.projects))

    def can_write(self, scope: str) -> bool:
        """Whether the agent may write into ``scope`` or change a memory of it."""
        return scope in self.writable_scopes()


def can_read(principal: Principal | None, scope: str) -> bool:
    """Whether ``principal`` (``None`` = a human, who reads everything) may read ``scope``."""
    return principal is None or principal.can_read(scope)


def relation_scope_key(client_id: str, scope: str) -> str:
    """How the graph keys a typed relation's strength written in ``scope`` of ``client_id``:
    the scope itself for the ``global`` client (as relations without a client always were),
    else ``client|scope`` (a scope name holds no ``|``)."""
    return scope if client_id == GLOBAL_CLIENT else f"{client_id}|{scope}"


def split_relation_scope(key: str) -> tuple[str, str]:
    """``(client_id, scope)`` of a :func:`relation_scope_key`."""
    client, sep, scope = key.rpartition("|")
    return (client, scope) if sep else (GLOBAL_CLIENT, key)


def reads_relation(principal: Principal | None, client_id: str | None, key: str) -> bool:
    """Whether ``principal`` (``None``: a human, who reads every scope) asking in
    ``client_id`` (``None``: any client) sees what was written under ``key``
    (:func:`relation_scope_key`): a scope it reads, of that client or ``global``."""
    client, scope = split_relation_scope(key)
    if client_id is not None and client not in (client_id, GLOBAL_CLIENT):
        return False
    return principal is None or principal.can_read(scope)


def seen_strength(
    scopes: dict[str, float], total: float, principal: Principal | None, client_id: str | None
) -> float:
    """The strength of a typed relation that ``principal`` asking in ``client_id`` sees: the
    sum of what was written under the keys it reads (:func:`reads_relation`), from
    ``scopes`` (key → strength written there). A relation written before relations had scopes
    (no keys) counts as ``team``'s of ``global``: ``total`` for whoever reads ``team``."""
    if not scopes:
        return total if principal is None or principal.can_read(TEAM) else 0.0
    return float(sum(w for key, w in scopes.items() if reads_relation(principal, client_id, key)))
