"""The store's entity indexing: entities of each memory, their links and relations.

:class:`EntityIndexing` is the part of :class:`~memlab.memory.store.MemoryStore` that enters
the entities extracted from a memory into the :class:`~memlab.memory.graph.EntityGraph` and
SQLite (links, co-occurrence), records typed relations, and finds the entities a query names.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Any

from memlab.memory.entities import Entity, EntityMention
from memlab.memory.records import (
    GLOBAL_CLIENT,
    RELATION_TYPES,
    MemoryInputError,
)
from memlab.memory.scopes import TEAM, check_scope, relation_scope_key
from memlab.memory.scrub import scrub_message
from memlab.memory.write_policy import _check_choice, _check_str, _check_time


class EntityIndexing:
    """Entity graph writes and lookups of :class:`~memlab.memory.store.MemoryStore` (a mixin;
    the store owns ``graph``, ``extractor`` and ``_known_patterns``)."""

    def _index_entities(self, idx: int, mentions: Sequence[EntityMention]) -> None:
        ent_idxs: list[int] = []
        links = []
        for m in mentions:
            e = self._entity_idx(m.entity)
            self.graph.link(e, idx, m.role)
            links.append((e, idx, m.role))
            if e not in ent_idxs:
                ent_idxs.append(e)
        self._exec_many(
            "INSERT OR IGNORE INTO entity_memory_links (entity_idx, memory_idx, role)"
            " VALUES (?, ?, ?)",
            links,
        )
        if len(ent_idxs) > 1:
            self.graph.co_occur(ent_idxs)
            pairs = [(a, b) for i, a in enumerate(ent_idxs) for b in ent_idxs[i + 1 :]]
            self._save_relations(pairs, "co_occurrence")

    def _entity_idx(self, entity: Entity) -> int:
        n_before = self.graph.n_entities
        e = self.graph.add_entity(entity)
        if self.graph.n_entities > n_before:
            stored = self.graph.entity(e)
            # A plain INSERT: an index taken by another entity is an error, never overwritten.
            self._exec(
                "INSERT INTO entities (idx, name, type) VALUES (?, ?, ?)",
                (e, stored.name, stored.type),
            )
        return e

    def _save_relations(self, pairs: Sequence[tuple[int, int]], relation: str) -> None:
        rows = []
        for a, b in pairs:
            src, dst = (min(a, b), max(a, b)) if relation == "co_occurrence" else (a, b)
            rows.append((src, dst, relation, float(self.graph.strength(src, dst, relation))))
        self._exec_many(
            "INSERT INTO entity_relationships (src, dst, relation, strength) VALUES (?, ?, ?, ?)"
            " ON CONFLICT (src, dst, relation) DO UPDATE SET strength = excluded.strength",
            rows,
        )

    def relate(
        self,
        from_entity: str,
        relation: str,
        to_entity: str,
        *,
        from_type: str = "concept",
        to_type: str = "concept",
        now: float | str | None = None,
        scope: str = TEAM,
        client_id: str = GLOBAL_CLIENT,
    ) -> float:
        """Record a typed relationship between two entities; returns its new strength.

        Names resolve through the alias cache and the graph (an unknown name becomes a new
        entity of ``from_type`` / ``to_type``). ``scope`` is the namespace it is written in
        (``team``, ``agent:{name}``, ``project:{name}``) of ``client_id``: an agent sees a
        relation written in a scope it reads of its client (or ``global``), with the strength
        written there (:meth:`~memlab.memory.graph.EntityGraph.relation_scopes`, keyed by
        :func:`~memlab.memory.scopes.relation_scope_key`). The strength returned is
        the graph's, summed over scopes, which retrieval stages use (:meth:`relate_edge` also
        tells the two entities).

        Raises:
            MemoryInputError: A bad relation or name, or both names naming one entity (nothing
                is written).
        """
        return self._relate(from_entity, relation, to_entity, from_type, to_type, now, scope,
                            client_id)[2]

    def relate_edge(
        self, from_entity: str, relation: str, to_entity: str, **options: Any
    ) -> tuple[int, int, float]:
        """:meth:`relate` (the same arguments), returning ``(source, target, strength)``: the
        graph indices of the two entities and the relation's new strength (the strength per
        scope is :meth:`~memlab.memory.graph.EntityGraph.relation_scopes`).

        Raises:
            MemoryInputError: As :meth:`relate`.
            TypeError: An option :meth:`relate` does not take.
        """
        defaults = {"from_type": "concept", "to_type": "concept", "now": None, "scope": TEAM,
                    "client_id": GLOBAL_CLIENT}
        unknown = sorted(set(options) - set(defaults))
        if unknown:
            raise TypeError(f"relate_edge() got unexpected option(s) {unknown}")
        opts = {**defaults, **options}
        return self._relate(from_entity, relation, to_entity, *(opts[k] for k in defaults))

    def _relate(self, from_entity: str, relation: str, to_entity: str, from_type: str,
                to_type: str, now: float | str | None, scope: str,
                client_id: str = GLOBAL_CLIENT) -> tuple[int, int, float]:
        _check_choice(relation, "relation", RELATION_TYPES, optional=False)
        _check_str(from_entity, "from", optional=False)
        _check_str(to_entity, "to", optional=False)
        from_entity = self.scrubber.scrub(from_entity)[0]
        to_entity = self.scrubber.scrub(to_entity)[0]
        _check_str(from_type, "from_type", optional=False)
        _check_str(to_type, "to_type", optional=False)
        check_scope(scope)
        _check_str(client_id, "client_id", optional=False)
        if now is not None:
            _check_time(now, "now")
        found_a, ent_a = self._lookup_entity(from_entity, from_type)
        found_b, ent_b = self._lookup_entity(to_entity, to_type)
        same = (
            found_a == found_b
            if found_a is not None or found_b is not None
            else (" ".join(ent_a.name.split()).lower(), ent_a.type)
            == (" ".join(ent_b.name.split()).lower(), ent_b.type)
        )
        if same:
            raise MemoryInputError(
                scrub_message(
                    f"field 'to': {from_entity!r} and {to_entity!r} name the same entity"
                )
            )
        with self._transaction():
            a = found_a if found_a is not None else self._entity_idx(ent_a)
            b = found_b if found_b is not None else self._entity_idx(ent_b)
            strength = self.graph.add_relation(a, b, relation)
            self._save_relations([(a, b)], relation)
            key = relation_scope_key(client_id, scope)
            in_scope = self.graph.add_relation_scope(a, b, relation, key)
            self._exec(
                "INSERT INTO relation_scopes (src, dst, relation, scope, strength)"
                " VALUES (?, ?, ?, ?, ?) ON CONFLICT (src, dst, relation, scope)"
                " DO UPDATE SET strength = excluded.strength",
                (a, b, relation, key, in_scope),
            )
            self.version += 1
        return a, b, float(strength)

    def _lookup_entity(self, name: str, type_: str) -> tuple[int | None, Entity]:
        """A named entity and its graph index (``None`` when new): known name, alias, or the
        type extraction gives it. Changes nothing.

        ``acme.com`` becomes a ``domain`` and ``Postgres`` the ``technology`` PostgreSQL, so a
        relation written before any memory mentions them joins the same nodes extraction will.
        """
        alias = self.extractor.resolve(name)
        if alias is not None:
            return self.graph.find(alias.name, alias.type), alias
        for ent in self.extractor.extract_query_entities(name):
            if ent.name.lower() == name.strip().lower():
                return self.graph.find(ent.name, ent.type), ent
        found = self.graph.find(name)
        if found is not None:
            return found, self.graph.entity(found)
        return None, Entity(name, type_)

    def _resolve_entity(self, name: str, type_: str) -> int:
        """Graph index of a named entity (see :meth:`_lookup_entity`), created when new."""
        found, entity = self._lookup_entity(name, type_)
        return found if found is not None else self._entity_idx(entity)

    def persist_relations(self) -> None:
        """Rewrite the relationship table from the graph (after a Hebbian update)."""
        with self._transaction():
            self._exec("DELETE FROM entity_relationships")
            self._exec_many(
                "INSERT INTO entity_relationships (src, dst, relation, strength)"
                " VALUES (?, ?, ?, ?)",
                self.graph.edge_rows(),
            )

    def query_entities(self, text: str, *, known_types: Sequence[str] = ()) -> list[int]:
        """Graph indices of the entities named in a query.

        Fast-path extraction finds the design's patterns (technologies, domains, quoted and
        capitalised names). ``known_types`` adds a dictionary match against the names of the
        graph's entities of those types (e.g. ``("agent",)``: a question naming "Caroline"
        finds the agent entity of Caroline's memories, which a single capitalised word alone
        would not), as docs/design.md §D0.8 extends its dictionaries from the entity table.
        """
        out: list[int] = []
        for ent in self.extractor.extract_query_entities(text):
            found = self.graph.find(ent.name, ent.type)
            if found is None:
                found = self.graph.find(ent.name)
            if found is not None and found not in out:
                out.append(found)
        if known_types:
            for idx in self._known_name_matches(text, tuple(known_types)):
                if idx not in out:
                    out.append(idx)
        return out

    def mask_known_names(self, text: str, *, known_types: Sequence[str]) -> str:
        """``text`` without the names of the graph's entities of ``known_types``.

        Each name (matched as :meth:`query_entities` matches it, case-insensitively, with a
        possessive ``'s`` or ``'`` after it) is removed and the spaces are collapsed: "What
        did Caroline's mother give Melanie?" becomes "What did mother give?". A text left with
        no words is returned unchanged.
        """
        pattern, _ = self._known_name_pattern(tuple(known_types))
        if pattern is None:
            return text
        masked = re.sub(r"\s+([?!.,;:])", r"\1", " ".join(pattern.sub(" ", text).split()))
        return masked if masked.strip("?!.,;: ") else text

    def _known_name_pattern(
        self, types: tuple[str, ...]
    ) -> tuple[re.Pattern[str] | None, dict[str, int]]:
        """A regex matching the names of the entities of ``types`` (``None`` when there are
        none), with a name-to-index map; rebuilt when the graph gains entities."""
        key = (types, self.graph.n_entities)
        cached = self._known_patterns.get(types)
        if cached is None or cached[0] != key:
            names: dict[str, int] = {}
            for idx in range(self.graph.n_entities):
                ent = self.graph.entity(idx)
                if ent.type in types and len(ent.name) >= 3:
                    names.setdefault(ent.name.lower(), idx)
            pattern = None
            if names:
                alternation = "|".join(
                    re.escape(n) for n in sorted(names, key=lambda n: (-len(n), n))
                )
                pattern = re.compile(
                    rf"(?<![\w-])({alternation})(?:'s|’s|'|’)?(?![\w-])", re.IGNORECASE
                )
            cached = (key, pattern, names)
            self._known_patterns[types] = cached
        return cached[1], cached[2]

    def _known_name_matches(self, text: str, types: tuple[str, ...]) -> list[int]:
        pattern, names = self._known_name_pattern(types)
        if pattern is None:
            return []
        return [names[m.group(1).lower()] for m in pattern.finditer(text)]
