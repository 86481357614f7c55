"""The entity graph: entities, entity-memory links, typed relationships, spreading activation.

Reference design: docs/design.md §D0.9 (entity linking, relationships with a strength counter, graph
search by BFS spreading activation) and design §D2.6 (nightly Hebbian upkeep of co-occurrence
weights: co-activated edges strengthen, every co-occurrence edge decays).

Storage is incremental and plain Python (lists and dicts), so adding an entity, a link or an
edge is O(1). Exports (``scipy.sparse`` adjacency, ``igraph.Graph``) are built on demand and
cached until the graph next changes (a version counter).

Edges. ``co_occurrence`` is undirected: one edge per unordered pair, stored with the lower index
first. Typed relations (``uses``, ``works_on``, ``contact_of``, ``same_owner``,
``competitor_of``) are directed (``acme-corp -> Next.js`` differs from ``Next.js -> acme-corp``)
and keep their own strength per direction, but spreading activation traverses every edge in
both directions: "what uses Next.js?" should reach acme-corp as surely as "what does acme-corp
use?" reaches Next.js. Several relations may join the same pair; each is its own edge.

Spreading activation (docs/design.md §D0.9, ``GRAPH_SEARCH_DECAY`` 0.8, ``CAUSAL_BOOST`` 2.0,
``MAX_DEPTH`` 2, stop below 0.1, ``strengthFactor = min(strength / 5, 1.0)``)::

    a(v) = max over edges (u, v) of  a(u) * hop_decay * boost(rel) * min(strength / 5, 1)

with ``boost = causal_boost`` for typed relations and 1 for co-occurrence. Nodes are expanded
level by level; a node reached again keeps the larger activation and is expanded again only
when its activation rose. Activations are not capped at 1: a typed edge at full strength
carries ``0.8 * 2.0 = 1.6`` times its parent, as in the reference formula. Because that factor
exceeds 1, activation could echo back and grow, so seeds keep their initial activation and an
edge is never walked back to the node that gave a node its current activation. Within the
default two hops this leaves exactly the best-path activation; deeper searches may still let a
longer cycle (three or more hops) raise a node.

Example:
    >>> from memlab.memory.entities import Entity
    >>> g = EntityGraph()
    >>> a = g.add_entity(Entity("acme-corp", "client"))
    >>> b = g.add_entity(Entity("Next.js", "technology"))
    >>> g.add_relation(a, b, "uses")
    1.0
    >>> g.spread_activation([a])
    {0: 1.0, 1: 0.32000000000000006}
"""

from __future__ import annotations

import operator
from collections.abc import Iterable, Mapping, Sequence
from typing import Any, Literal, overload

import igraph
import numpy as np
import polars as pl
import scipy.sparse as sp

from memlab.memory.entities import Entity, EntityMention
from memlab.memory.records import ENTITY_ROLES, RELATION_TYPES
from memlab.numeric import is_finite_number, shown_number

_CO = RELATION_TYPES.index("co_occurrence")
_REL_CODE = {name: i for i, name in enumerate(RELATION_TYPES)}
_WEIGHTS = ("strength", "binary")


_ROLE_CODE = {role: i for i, role in enumerate(ENTITY_ROLES)}
_ROLE_NAMES = np.asarray(ENTITY_ROLES, dtype=object)


def _key(name: str) -> str:
    return " ".join(name.split()).lower()


def _number(
    value: object, field: str, *, low: float | None = None, positive: bool = False
) -> float:
    """Validate a finite real number (optionally ``>= low`` or ``> 0``) and return it as float."""
    if not is_finite_number(value):
        raise ValueError(
            f"graph.py: field '{field}' must be a finite number, got {shown_number(value)}"
        )
    if low is not None and value < low:
        raise ValueError(f"graph.py: field '{field}' must be >= {low}, got {value!r}")
    if positive and value <= 0:
        raise ValueError(f"graph.py: field '{field}' must be > 0, got {value!r}")
    return float(value)


class EntityGraph:
    """Entities, their links to memories, and weighted relationships between them.

    Memory indices (``mem_idx``) are non-negative ints handed in by the store; the graph does not
    interpret them.
    """

    def __init__(self) -> None:
        self._entities: list[Entity] = []
        self._index: dict[tuple[str, str], int] = {}
        self._by_name: dict[str, list[int]] = {}
        self._ent_mems: list[dict[int, str]] = []
        self._mem_ents: dict[int, dict[int, str]] = {}
        # Every link in the order made (entity, memory, role code), for array exports; exact
        # until a memory is unlinked (then exports read the dicts).
        self._log = np.zeros((64, 3), dtype=np.int64)
        self._n_log = 0
        self._unlinked = False
        self._eid: dict[tuple[int, int, int], int] = {}
        self._src: list[int] = []
        self._dst: list[int] = []
        self._rel: list[int] = []
        self._str: list[float] = []
        self._nbr: list[dict[int, int]] = []
        self._version = 0
        self._cache: dict[Any, Any] = {}
        # The scopes each typed relation was written in, with the strength written in each
        # (what a principal may see of it).
        self._rel_scopes: dict[tuple[int, int, str], dict[str, float]] = {}

    # ------------------------------------------------------------------ basics
    @property
    def n_entities(self) -> int:
        """Number of entities."""
        return len(self._entities)

    @property
    def n_edges(self) -> int:
        """Number of edges (a co-occurrence pair counts once)."""
        return len(self._src)

    @property
    def version(self) -> int:
        """Counter bumped whenever entities, edges or entity-memory links change."""
        return self._version

    def _touch(self) -> None:
        self._version += 1
        self._cache.clear()

    def clear_cache(self) -> None:
        """Drop cached exports (adjacency matrices, igraph); they are rebuilt on next use."""
        self._cache.clear()

    def _check_entity(self, idx: object, field: str) -> int:
        try:
            i = operator.index(idx)  # type: ignore[arg-type]
        except TypeError:
            raise TypeError(
                f"graph.py: field '{field}' must be an int entity index, got {type(idx).__name__}"
            ) from None
        if not 0 <= i < len(self._entities):
            raise ValueError(
                f"graph.py: field '{field}' = {i} is not an entity index "
                f"(graph has {len(self._entities)} entities)"
            )
        return i

    @staticmethod
    def _check_mem(mem_idx: object) -> int:
        try:
            m = operator.index(mem_idx)  # type: ignore[arg-type]
        except TypeError:
            raise TypeError(
                f"graph.py: field 'mem_idx' must be an int, got {type(mem_idx).__name__}"
            ) from None
        if m < 0:
            raise ValueError(f"graph.py: field 'mem_idx' must be >= 0, got {m}")
        return m

    @staticmethod
    def _check_relation(relation: object) -> int:
        if not isinstance(relation, str):
            raise TypeError(
                f"graph.py: field 'relation' must be a str, got {type(relation).__name__}"
            )
        code = _REL_CODE.get(relation)
        if code is None:
            raise ValueError(
                f"graph.py: field 'relation' must be one of {RELATION_TYPES}, got {relation!r}"
            )
        return code

    def add_entity(self, entity: Entity) -> int:
        """Index of ``entity``, creating it if new (key: lower-cased name and type)."""
        if not isinstance(entity, Entity):
            raise TypeError(
                f"graph.py: field 'entity' must be an Entity, got {type(entity).__name__}"
            )
        name = _key(entity.name)
        if not name:
            raise ValueError("graph.py: field 'entity.name' must not be blank")
        key = (name, entity.type)
        idx = self._index.get(key)
        if idx is None:
            idx = len(self._entities)
            self._index[key] = idx
            self._by_name.setdefault(name, []).append(idx)
            self._entities.append(entity)
            self._ent_mems.append({})
            self._nbr.append({})
            self._touch()
        return idx

    def find(self, name: str, type: str | None = None) -> int | None:  # noqa: A002
        """Index of the entity called ``name`` (any case); with ``type=None`` the first one."""
        key = _key(name)
        if type is not None:
            return self._index.get((key, type))
        hits = self._by_name.get(key)
        return hits[0] if hits else None

    def find_all(self, name: str) -> list[int]:
        """Indices of every entity called ``name`` (any case, any type), oldest first."""
        return list(self._by_name.get(_key(name), ()))

    def names(self, idxs: Sequence[int]) -> list[str]:
        """The names of the entities at ``idxs`` (each ``0 <= idx < n_entities``)."""
        ents = self._entities
        n = len(ents)
        out = []
        for i in idxs:
            i = int(i)
            if not 0 <= i < n:
                raise IndexError(f"graph.py: entity index {i} is not in 0..{n - 1}")
            out.append(ents[i].name)
        return out

    def entity(self, idx: int) -> Entity:
        """The entity at index ``idx``."""
        return self._entities[self._check_entity(idx, "idx")]

    # ------------------------------------------------------------------ memory links
    def link(self, entity_idx: int, mem_idx: int, role: str) -> None:
        """Link an entity to a memory with ``role`` (about/source/mentioned); first role wins."""
        e = self._check_entity(entity_idx, "entity_idx")
        m = self._check_mem(mem_idx)
        if role not in ENTITY_ROLES:
            raise ValueError(f"graph.py: field 'role' must be one of {ENTITY_ROLES}, got {role!r}")
        if m not in self._ent_mems[e]:
            self._ent_mems[e][m] = role
            self._mem_ents.setdefault(m, {})[e] = role
            if self._n_log == len(self._log):
                self._log = np.concatenate([self._log, np.zeros_like(self._log)])
            self._log[self._n_log] = (e, m, _ROLE_CODE[role])
            self._n_log += 1
            self._version += 1

    def unlink_memory(self, mem_idx: int) -> int:
        """Remove every link of one memory (edges are kept); returns how many were removed."""
        m = self._check_mem(mem_idx)
        ents = self._mem_ents.pop(m, {})
        for e in ents:
            del self._ent_mems[e][m]
        if ents:
            self._version += 1
            self._unlinked = True
        return len(ents)

    def memories_of(self, entity_idx: int) -> list[int]:
        """Memories linked to an entity, in link order."""
        return list(self._ent_mems[self._check_entity(entity_idx, "entity_idx")])

    def entities_of(self, mem_idx: int) -> list[int]:
        """Entities linked to a memory, in link order (empty for an unknown memory)."""
        return list(self._mem_ents.get(self._check_mem(mem_idx), ()))

    def add_memory(self, mem_idx: int, mentions: Sequence[EntityMention]) -> list[int]:
        """Seed-000 linking: find-or-create each entity, link it, co-occur all pairs.

        Returns:
            The entity indices, in mention order (deduplicated).
        """
        idxs: list[int] = []
        for mention in mentions:
            if not isinstance(mention, EntityMention):
                raise TypeError(
                    "graph.py: field 'mentions' must hold EntityMention, "
                    f"got {type(mention).__name__}"
                )
            e = self.add_entity(mention.entity)
            self.link(e, mem_idx, mention.role)
            if e not in idxs:
                idxs.append(e)
        self.co_occur(idxs)
        return idxs

    # ------------------------------------------------------------------ relations
    def _edge_key(self, src: int, dst: int, code: int) -> tuple[int, int, int]:
        if code == _CO and dst < src:
            return (dst, src, code)
        return (src, dst, code)

    def _bump(self, key: tuple[int, int, int], increment: float) -> float:
        eid = self._eid.get(key)
        if eid is None:
            eid = len(self._src)
            src, dst, code = key
            self._eid[key] = eid
            self._src.append(src)
            self._dst.append(dst)
            self._rel.append(code)
            self._str.append(increment)
            self._nbr[src][eid] = dst
            self._nbr[dst][eid] = src
            return increment
        self._str[eid] += increment
        return self._str[eid]

    def add_relation(self, src: int, dst: int, relation: str, increment: float = 1.0) -> float:
        """Create or strengthen a relation; returns its new strength.

        Args:
            src: Source entity index.
            dst: Target entity index (must differ from ``src``).
            relation: One of ``RELATION_TYPES``.
            increment: Added to the strength counter (seed: +1 per observation).
        """
        s = self._check_entity(src, "src")
        d = self._check_entity(dst, "dst")
        code = self._check_relation(relation)
        if s == d:
            raise ValueError(f"graph.py: fields 'src' and 'dst' are the same entity ({s})")
        out = self._bump(self._edge_key(s, d, code), _number(increment, "increment"))
        self._touch()
        return out

    def co_occur(self, entity_idxs: Iterable[int], increment: float = 1.0) -> int:
        """Strengthen ``co_occurrence`` between all pairs; returns the number of pairs."""
        idxs = list(dict.fromkeys(self._check_entity(e, "entity_idxs") for e in entity_idxs))
        inc = _number(increment, "increment")
        n = 0
        for i, a in enumerate(idxs):
            for b in idxs[i + 1 :]:
                self._bump(self._edge_key(a, b, _CO), inc)
                n += 1
        if n:
            self._touch()
        return n

    def strength(self, src: int, dst: int, relation: str) -> float:
        """Strength of a relation (0.0 when absent; co-occurrence is symmetric)."""
        s = self._check_entity(src, "src")
        d = self._check_entity(dst, "dst")
        eid = self._eid.get(self._edge_key(s, d, self._check_relation(relation)))
        return 0.0 if eid is None else self._str[eid]

    def add_relation_scope(
        self, src: int, dst: int, relation: str, scope: str, increment: float = 1.0
    ) -> float:
        """Note that the typed relation ``src -relation-> dst`` was written in ``scope``
        (``increment`` more); its strength in that scope."""
        scopes = self._rel_scopes.setdefault((int(src), int(dst), relation), {})
        scopes[scope] = scopes.get(scope, 0.0) + float(increment)
        return scopes[scope]

    def relation_scopes(self, src: int, dst: int, relation: str) -> dict[str, float]:
        """The scopes the typed relation ``src -relation-> dst`` was written in, each with its
        strength there (empty for a relation written before relations had scopes, and for
        co-occurrence). The graph's own strength (:meth:`strength`) is their sum."""
        return dict(self._rel_scopes.get((int(src), int(dst), relation), {}))

    def neighbours(self, idx: int) -> list[tuple[int, str, float]]:
        """``(other entity, relation, strength)`` for every edge touching ``idx``."""
        i = self._check_entity(idx, "idx")
        return [(v, RELATION_TYPES[self._rel[e]], self._str[e]) for e, v in self._nbr[i].items()]

    # ------------------------------------------------------------------ retrieval
    @overload
    def spread_activation(
        self,
        seeds: Iterable[int] | Mapping[int, float],
        *,
        hop_decay: float = ...,
        causal_boost: float = ...,
        max_depth: int = ...,
        min_activation: float = ...,
        strength_saturation: float = ...,
        trace: Literal[False] = ...,
    ) -> dict[int, float]: ...

    @overload
    def spread_activation(
        self,
        seeds: Iterable[int] | Mapping[int, float],
        *,
        hop_decay: float = ...,
        causal_boost: float = ...,
        max_depth: int = ...,
        min_activation: float = ...,
        strength_saturation: float = ...,
        trace: Literal[True],
    ) -> tuple[dict[int, float], list[dict[int, float]]]: ...

    def spread_activation(
        self,
        seeds: Iterable[int] | Mapping[int, float],
        *,
        hop_decay: float = 0.8,
        causal_boost: float = 2.0,
        max_depth: int = 2,
        min_activation: float = 0.1,
        strength_saturation: float = 5.0,
        trace: bool = False,
    ) -> dict[int, float] | tuple[dict[int, float], list[dict[int, float]]]:
        """BFS spreading activation from seed entities (docs/design.md §D0.9 graph search).

        Args:
            seeds: Seed entity indices (activation 1.0 each) or a mapping index -> activation.
            hop_decay: Multiplier per hop (design §D0.9: ``GRAPH_SEARCH_DECAY`` = 0.8).
            causal_boost: Multiplier for typed relations (design §D0.9: ``CAUSAL_BOOST`` = 2.0).
            max_depth: Maximum number of hops (design §D0.9: ``MAX_DEPTH`` = 2).
            min_activation: Activations below this are not propagated or returned (design: 0.1).
            strength_saturation: Strength at which an edge carries fully (design §D0.9: 5).
            trace: Also return, per depth, the nodes set or raised at that depth.

        Returns:
            Entity index -> activation, in the order the entities were first reached (seeds
            first); with ``trace=True`` also the per-depth list (depth 0 = seeds).
        """
        hop_decay = _number(hop_decay, "hop_decay", low=0.0)
        boost = _number(causal_boost, "causal_boost", low=0.0)
        min_activation = _number(min_activation, "min_activation", low=0.0)
        sat = _number(strength_saturation, "strength_saturation", positive=True)
        if isinstance(max_depth, bool) or not isinstance(max_depth, int) or max_depth < 0:
            raise ValueError(f"graph.py: field 'max_depth' must be an int >= 0, got {max_depth!r}")

        act: dict[int, float] = {}
        if isinstance(seeds, Mapping):
            for s, a in seeds.items():
                i = self._check_entity(s, "seeds")
                a = _number(a, f"seeds[{i}]")
                act[i] = max(a, act.get(i, a))
        else:
            for s in seeds:
                act[self._check_entity(s, "seeds")] = 1.0
        seeded = set(act)
        parent: dict[int, int] = {}
        frontier = dict(act)
        levels = [dict(frontier)]
        nbr, strengths, rels = self._nbr, self._str, self._rel
        for _ in range(max_depth):
            if not frontier:
                break
            nxt: dict[int, float] = {}
            for u, a_u in frontier.items():
                base = a_u * hop_decay
                back = parent.get(u, -1)
                for eid, v in nbr[u].items():
                    if v == back or v in seeded:
                        continue
                    f = strengths[eid] / sat
                    if f > 1.0:
                        f = 1.0
                    val = base * f if rels[eid] == _CO else base * f * boost
                    if val < min_activation or val <= act.get(v, 0.0):
                        continue
                    act[v] = val
                    nxt[v] = val
                    parent[v] = u
            frontier = nxt
            levels.append(nxt)
        if trace:
            return act, levels
        return act

    def memory_activation(self, entity_activation: Mapping[int, float]) -> dict[int, float]:
        """Sum, per memory, the activations of its linked entities (docs/design.md §D0.9).

        Returns:
            Memory index -> summed activation, sorted by score descending then memory index.
        """
        out: dict[int, float] = {}
        for e, a in entity_activation.items():
            for m in self._ent_mems[self._check_entity(e, "entity_activation")]:
                out[m] = out.get(m, 0.0) + a
        return dict(sorted(out.items(), key=lambda kv: (-kv[1], kv[0])))

    # ------------------------------------------------------------------ upkeep
    def hebbian_update(
        self,
        co_activated: Sequence[Sequence[int]],
        *,
        learning_rate: float = 1.0,
        decay: float = 0.98,
        floor: float = 0.0,
    ) -> int:
        """Nightly Hebbian upkeep of co-occurrence edges (docs/design.md §D2.6).

        Every co-occurrence edge decays multiplicatively, then each pair of entities inside a
        group of ``co_activated`` gains ``learning_rate`` (once per group it shares), creating
        the edge if needed; finally co-occurrence edges with strength below ``floor`` are
        dropped. So a co-activated edge ends at ``s * decay + learning_rate`` and a dormant one
        at ``s * decay``. Typed relations are left unchanged.

        Args:
            co_activated: Groups of entity indices activated together (e.g. per memory).
            learning_rate: Strength added per co-activation.
            decay: Multiplicative decay of every co-occurrence edge (design §D2.6 nightly decay).
            floor: Co-occurrence edges with strength below this are removed.

        Returns:
            Number of edges dropped.
        """
        learning_rate = _number(learning_rate, "learning_rate")
        decay = _number(decay, "decay", low=0.0)
        floor = _number(floor, "floor")
        if decay > 1:
            raise ValueError(f"graph.py: field 'decay' must be in [0, 1], got {decay!r}")
        groups = [
            list(dict.fromkeys(self._check_entity(e, "co_activated") for e in group))
            for group in co_activated
        ]
        strengths, rels = self._str, self._rel
        for eid in range(len(strengths)):
            if rels[eid] == _CO:
                strengths[eid] *= decay
        for group in groups:
            for i, a in enumerate(group):
                for b in group[i + 1 :]:
                    self._bump(self._edge_key(a, b, _CO), learning_rate)
        keep = [eid for eid in range(len(strengths)) if rels[eid] != _CO or strengths[eid] >= floor]
        dropped = len(strengths) - len(keep)
        if dropped:
            self._rebuild_edges(keep)
        self._touch()
        return dropped

    def _rebuild_edges(self, keep: list[int]) -> None:
        self._set_edges([self._src[e] for e in keep], [self._dst[e] for e in keep],
                        [self._rel[e] for e in keep], [self._str[e] for e in keep])

    def _set_edges(self, src: list[int], dst: list[int], rel: list[int],
                   strength: list[float]) -> None:
        """Replace every edge by these, in this order, with their lookup and neighbour
        tables."""
        self._src, self._dst, self._rel, self._str = src, dst, rel, strength
        self._eid = {(s, d, r): i for i, (s, d, r) in enumerate(zip(src, dst, rel, strict=True))}
        self._nbr = [{} for _ in self._entities]
        for i, (s, d) in enumerate(zip(src, dst, strict=True)):
            self._nbr[s][i] = d
            self._nbr[d][i] = s

    # ------------------------------------------------------------------ exports
    def adjacency(self, weight: str = "strength", *, typed_weight: float = 1.0) -> sp.csr_matrix:
        """Symmetric ``n_entities x n_entities`` adjacency matrix, cached until the graph changes.

        Args:
            weight: ``"strength"`` (edge strength) or ``"binary"`` (1 per edge).
            typed_weight: Multiplier for typed relations (co-occurrence weighs 1).

        Returns:
            CSR matrix; parallel edges between a pair are summed. Treat it as read-only: the
            same object is returned until the graph changes.
        """
        if weight not in _WEIGHTS:
            raise ValueError(f"graph.py: field 'weight' must be one of {_WEIGHTS}, got {weight!r}")
        typed_weight = _number(typed_weight, "typed_weight")
        key = ("adjacency", weight, typed_weight)
        cached = self._cache.get(key)
        if cached is not None:
            return cached
        n = len(self._entities)
        src = np.asarray(self._src, dtype=np.int64)
        dst = np.asarray(self._dst, dtype=np.int64)
        if weight == "strength":
            w = np.asarray(self._str, dtype=np.float64)
        else:
            w = np.ones(len(src), dtype=np.float64)
        typed = np.asarray(self._rel, dtype=np.int64) != _CO
        w = np.where(typed, w * typed_weight, w)
        mat = sp.csr_matrix(
            (np.concatenate([w, w]), (np.concatenate([src, dst]), np.concatenate([dst, src]))),
            shape=(n, n),
        )
        mat.sum_duplicates()
        mat.eliminate_zeros()
        mat.sort_indices()
        self._cache[key] = mat
        return mat

    def to_igraph(self) -> igraph.Graph:
        """The graph as a directed ``igraph.Graph``, cached until the graph changes.

        Vertex attributes ``name`` and ``type``; edge attributes ``relation``, ``strength`` and
        ``directed`` (``False`` for co-occurrence, stored lower index -> higher index). Treat it
        as read-only.
        """
        cached = self._cache.get("igraph")
        if cached is not None:
            return cached
        g = igraph.Graph(
            n=len(self._entities),
            edges=list(zip(self._src, self._dst, strict=True)),
            directed=True,
        )
        g.vs["name"] = [e.name for e in self._entities]
        g.vs["type"] = [e.type for e in self._entities]
        g.es["relation"] = [RELATION_TYPES[r] for r in self._rel]
        g.es["strength"] = list(self._str)
        g.es["directed"] = [r != _CO for r in self._rel]
        self._cache["igraph"] = g
        return g

    def edge_rows(self) -> list[tuple[int, int, str, float]]:
        """``(src, dst, relation, strength)`` of every edge, in edge order: the rows of
        :meth:`edges_frame`'s four columns, without building the frame (the store rewrites its
        relationship table from them after every Hebbian update)."""
        names = RELATION_TYPES
        return [
            (int(s), int(d), names[r], float(w))
            for s, d, r, w in zip(self._src, self._dst, self._rel, self._str, strict=True)
        ]

    def edges_frame(self) -> pl.DataFrame:
        """One row per edge: src, dst, src_name, dst_name, relation, strength, directed."""
        names = [e.name for e in self._entities]
        return pl.DataFrame(
            {
                "src": self._src,
                "dst": self._dst,
                "src_name": [names[s] for s in self._src],
                "dst_name": [names[d] for d in self._dst],
                "relation": [RELATION_TYPES[r] for r in self._rel],
                "strength": self._str,
                "directed": [r != _CO for r in self._rel],
            },
            schema={
                "src": pl.Int64,
                "dst": pl.Int64,
                "src_name": pl.String,
                "dst_name": pl.String,
                "relation": pl.String,
                "strength": pl.Float64,
                "directed": pl.Boolean,
            },
        )

    def entities_frame(self) -> pl.DataFrame:
        """One row per entity: idx, name, type, degree (edges touching it), n_memories."""
        return pl.DataFrame(
            {
                "idx": list(range(len(self._entities))),
                "name": [e.name for e in self._entities],
                "type": [e.type for e in self._entities],
                "degree": [len(n) for n in self._nbr],
                "n_memories": [len(m) for m in self._ent_mems],
            },
            schema={
                "idx": pl.Int64,
                "name": pl.String,
                "type": pl.String,
                "degree": pl.Int64,
                "n_memories": pl.Int64,
            },
        )

    def links_frame(self) -> pl.DataFrame:
        """One row per entity-memory link: entity_idx, mem_idx, role (by entity, then in the
        order the entity's links were made)."""
        ent, mem, role = self.link_arrays()
        order = np.argsort(ent, kind="stable")
        return pl.DataFrame(
            {"entity_idx": ent[order], "mem_idx": mem[order], "role": _ROLE_NAMES[role[order]]},
            schema={"entity_idx": pl.Int64, "mem_idx": pl.Int64, "role": pl.String},
        )

    def restricted(
        self,
        readable_memories: np.ndarray,
        relation_strength: Any,
    ) -> EntityGraph:
        """A read-only view of this graph with the edges one reader may see (an agent that
        reads some namespaces only): the same entities and links, and

        * one ``co_occurrence`` edge per pair of entities named together in a memory of
          ``readable_memories`` (a boolean mask over memory indices), of strength the number
          of such memories (the counts the edges were made of; Hebbian upkeep is the shared
          graph's and not in the view);
        * each typed relation with strength ``relation_strength(src, dst, relation,
          strength)`` (what the reader may see of it; dropped when 0).

        Spreading activation and :meth:`adjacency` of the view then read only those edges. It
        shares the entity and link tables with this graph: never write to it.
        """
        readable = np.asarray(readable_memories, dtype=bool)
        ent, mem, _ = self.link_arrays()
        keep = mem < len(readable)
        keep[keep] = readable[mem[keep]]
        n_ent = len(self._entities)
        inc = sp.csr_matrix(
            (np.ones(int(keep.sum()), dtype=np.float64), (ent[keep], mem[keep])),
            shape=(n_ent, len(readable)),
        )
        inc.sum_duplicates()
        inc.data[:] = 1.0  # an entity named twice in a memory (two roles) counts once
        pairs = sp.triu(inc @ inc.T, k=1).tocoo()  # [a, b]: memories naming both, a < b
        order = np.lexsort((pairs.col, pairs.row))
        src = pairs.row[order].astype(np.int64).tolist()
        dst = pairs.col[order].astype(np.int64).tolist()
        strengths = pairs.data[order].astype(np.float64).tolist()
        rels = [_CO] * len(src)
        for s_, d_, r_, w_ in zip(self._src, self._dst, self._rel, self._str, strict=True):
            if r_ == _CO:
                continue
            seen = float(relation_strength(s_, d_, RELATION_TYPES[r_], w_))
            if seen > 0:
                src.append(s_)
                dst.append(d_)
                rels.append(r_)
                strengths.append(seen)
        view = EntityGraph.__new__(EntityGraph)
        view.__dict__.update(self.__dict__)  # entities and links: shared, read only
        view._rel_scopes = {}
        view._cache = {}
        view._set_edges(src, dst, rels, strengths)
        return view

    @property
    def has_unlinked(self) -> bool:
        """Whether a memory was unlinked (links are then no longer in the order made)."""
        return self._unlinked

    def link_arrays(self, start: int = 0) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Every entity-memory link as three aligned ``int64`` arrays: entity index, memory
        index and role (its position in :data:`~memlab.memory.records.ENTITY_ROLES`), in the
        order the links were made (by entity after a memory was unlinked); from the
        ``start``-th link on (a reader that has the first ``start`` asks for the rest)."""
        if self._unlinked:
            rows = [(e, m, _ROLE_CODE[r]) for e, mems in enumerate(self._ent_mems)
                    for m, r in mems.items()]
            log = np.asarray(rows, dtype=np.int64).reshape(-1, 3)[start:]
        else:
            log = self._log[start : self._n_log]
        return log[:, 0].copy(), log[:, 1].copy(), log[:, 2].copy()
