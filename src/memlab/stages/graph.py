"""Graph retrieval by BFS spreading activation over the entity graph (docs/design.md §D0.9).

The query's entities (fast-path extraction, :meth:`MemoryStore.query_entities`) are the seeds,
each with activation 1.0. Activation spreads breadth first through entity relationships::

    a(v) = max over edges (u, v) of  a(u) * hop_decay * boost(rel) * min(strength / 5, 1)

with ``boost = causal_boost`` for typed relations (``uses``, ``works_on`` …) and 1 for
``co_occurrence``, for at most ``max_depth`` hops, dropping activations below
``min_activation`` (see :meth:`EntityGraph.spread_activation`). A memory's score is the sum of
the activations of the entities linked to it through a link whose role is in ``roles``
("memories linked to multiple activated entities score higher"). Design §D0.9 defaults:
``GRAPH_SEARCH_DECAY = 0.8``, ``CAUSAL_BOOST = 2.0``, ``MAX_DEPTH = 2``, stop below 0.1,
``strengthFactor = min(strength / 5, 1.0)``.

The module also holds the role-filtered entity-memory incidence matrix shared by the graph-based
stages (``lif``, ``crag``).
"""

from __future__ import annotations

import weakref
from collections.abc import Callable, Hashable, Sequence
from typing import TYPE_CHECKING, Any, ClassVar, TypeVar

import numpy as np
import polars as pl
import scipy.sparse as sp

from memlab.memory.records import ENTITY_ROLES
from memlab.memory.scopes import seen_strength
from memlab.stages.base import (
    QueryContext,
    Stage,
    candidates_from_rows,
    concat_ranges,
    empty_candidates,
    register_stage,
    score_column,
)
from memlab.stages.constraints import Integral, Interval, Options, Predicate, Real, SequenceOf

if TYPE_CHECKING:
    from memlab.memory.graph import EntityGraph
    from memlab.memory.store import MemoryStore

T = TypeVar("T")


def cached(
    ctx: QueryContext,
    key: tuple[Any, ...],
    owner: object,
    stamp: Hashable,
    build: Callable[[], T],
) -> T:
    """``build()`` once per ``key`` and ``stamp`` in the experiment cache, tied to ``owner``.

    One entry per ``key`` and owner: a new ``stamp`` (e.g. the store's size) replaces the old
    value instead of piling up beside it. The value is kept with ``owner`` and reused only while
    ``owner`` is the same object, so a recycled ``id()`` never returns another store's data.
    """
    full = ("memlab.stages.graph", *key, id(owner))
    hit = ctx.cache.get(full)
    if hit is not None and hit[0] is owner and hit[1] == stamp:
        return hit[2]
    value = build()
    ctx.cache[full] = (owner, stamp, value)
    return value


def check_roles(roles: Sequence[str], where: str) -> tuple[str, ...]:
    """Validate a tuple of link roles (``about``, ``source``, ``mentioned``)."""
    if isinstance(roles, str) or not isinstance(roles, (tuple, list)):
        raise TypeError(f"{where}: field 'roles' must be a tuple of roles, got {roles!r}")
    for role in roles:
        if role not in ENTITY_ROLES:
            raise ValueError(
                f"{where}: field 'roles' holds {role!r}; roles are {', '.join(ENTITY_ROLES)}"
            )
    return tuple(roles)


def _role_mask(roles: Sequence[str]) -> np.ndarray:
    """Which role codes (positions in ``ENTITY_ROLES``) are among ``roles``."""
    allowed = np.zeros(len(ENTITY_ROLES), dtype=bool)
    allowed[[ENTITY_ROLES.index(r) for r in roles]] = True
    return allowed


def memory_incidence(
    ctx: QueryContext, roles: Sequence[str]
) -> tuple[sp.csr_matrix, sp.csr_matrix]:
    """The entity × memory incidence of links whose role is in ``roles``, and its transpose.

    Entry ``[e, m]`` is 1.0 when entity ``e`` is linked to memory row ``m`` with one of
    ``roles``. Built from :meth:`EntityGraph.link_arrays` and cached in ``ctx.cache`` until the
    store gains a row or the graph changes (links are written with new rows; accesses and
    supersessions, which bump the store's version, leave them as they are).

    Returns:
        ``(entity_by_memory, memory_by_entity)``, both CSR.
    """
    store = ctx.store
    graph = store.graph
    roles = tuple(sorted(set(roles)))
    stamp = (len(store), graph.version, graph.n_entities)

    def build() -> tuple[sp.csr_matrix, sp.csr_matrix]:
        ent, mem, code = graph.link_arrays()
        shape = (graph.n_entities, len(store))
        keep = _role_mask(roles)[code] & (mem < shape[1])
        ent, mem = ent[keep], mem[keep]
        inc = sp.csr_matrix((np.ones(len(ent), dtype=np.float64), (ent, mem)), shape=shape)
        inc.sum_duplicates()
        inc.data[:] = 1.0
        return inc, inc.T.tocsr()

    return cached(ctx, ("incidence", roles), store, stamp, build)


class _SortedLinks:
    """A graph's entity-memory links sorted by memory row, then entity (the order in which the
    incidence's sparse product sums a memory's entities), extended as links are added."""

    def __init__(self) -> None:
        self.n_log = 0
        self.mem = np.zeros(0, dtype=np.int64)
        self.ent = np.zeros(0, dtype=np.int64)
        self.role = np.zeros(0, dtype=np.int64)

    def update(self, graph: EntityGraph) -> None:
        """Take the links made since the last update (distinct pairs: nothing was unlinked)."""
        ent, mem, role = graph.link_arrays(start=self.n_log)
        if len(ent) == 0:
            return
        if self.n_log == 0 or mem.min() > self.mem[-1]:  # links of new memories: appended
            keep = (self.mem, self.ent, self.role)
        else:  # a link to an earlier memory: sort them all again
            ent, mem, role = graph.link_arrays()
            keep = (self.mem[:0], self.ent[:0], self.role[:0])
        order = np.lexsort((ent, mem))
        self.mem = np.concatenate([keep[0], mem[order]])
        self.ent = np.concatenate([keep[1], ent[order]])
        self.role = np.concatenate([keep[2], role[order]])
        self.n_log = len(self.mem)


_SORTED_LINKS: weakref.WeakKeyDictionary[EntityGraph, _SortedLinks] = (
    weakref.WeakKeyDictionary()
)


def memory_activation(
    ctx: QueryContext, roles: Sequence[str], activation: dict[int, float] | np.ndarray
) -> np.ndarray:
    """Per store row, the summed activation of its entities linked with a role in ``roles``:
    ``incidence.T @ activation`` (:func:`memory_incidence`), the same sums in the same order,
    computed from the links sorted once and extended as the store grows, instead of a sparse
    matrix rebuilt at every store size. ``activation``: entity index → value, or one value
    per entity."""
    store = ctx.store
    graph = store.graph
    n = len(store)
    if isinstance(activation, np.ndarray):
        vec = np.asarray(activation, dtype=np.float64)
    else:
        vec = np.zeros(graph.n_entities, dtype=np.float64)
        vec[np.fromiter(activation.keys(), dtype=np.int64)] = np.fromiter(
            activation.values(), dtype=np.float64
        )
    if graph.has_unlinked:
        inc, _ = memory_incidence(ctx, roles)
        return np.asarray(inc.T @ vec, dtype=np.float64).reshape(-1)
    links = _sorted_links(graph)
    weights = vec[links.ent]
    keep = _role_mask(roles)[links.role] & (links.mem < n) & (weights != 0.0)
    return np.bincount(links.mem[keep], weights=weights[keep], minlength=n)[:n]


def _sorted_links(graph: EntityGraph) -> _SortedLinks:
    links = _SORTED_LINKS.get(graph)
    if links is None:
        links = _SORTED_LINKS[graph] = _SortedLinks()
    links.update(graph)
    return links


def entity_currents(
    ctx: QueryContext, roles: Sequence[str], rows: np.ndarray, weights: np.ndarray
) -> np.ndarray:
    """Per entity, the summed ``weights`` of the memory ``rows`` it is linked to with a role in
    ``roles``: ``incidence[:, rows] @ weights`` (:func:`memory_incidence`), the same sums in
    the same order (row by row, as the sparse product adds them), read from the links sorted
    by memory instead of a sparse matrix rebuilt at every store size."""
    store = ctx.store
    graph = store.graph
    rows = np.asarray(rows, dtype=np.int64)
    weights = np.asarray(weights, dtype=np.float64)
    out = np.zeros(graph.n_entities, dtype=np.float64)
    if graph.has_unlinked:
        _, inc_t = memory_incidence(ctx, roles)
        return out + inc_t[rows].T @ weights
    links = _sorted_links(graph)
    lo = np.searchsorted(links.mem, rows, side="left")
    counts = np.searchsorted(links.mem, rows, side="right") - lo
    at, _ = concat_ranges(lo, counts)  # the links of rows[0], then of rows[1], …
    keep = _role_mask(roles)[links.role[at]]
    at = at[keep]
    np.add.at(out, links.ent[at], np.repeat(weights, counts)[keep])
    return out


def visible_graph(ctx: QueryContext) -> EntityGraph:
    """The entity graph the query's reader may spread activation over: the store's whole graph
    for a human (no principal), and for an agent the view of what it may read
    (:meth:`EntityGraph.restricted`): co-occurrences counted over the memories of the
    namespaces it reads in the query's client (and ``global``), and each typed relation with
    the strength written in those namespaces of that client (one written before relations had
    scopes counts as ``team``'s), as ``get_entity`` tells it. Otherwise other agents' private
    memories and relations would move its graph rankings, and so show through them. Cached
    until the store gains a row, the graph changes or a memory changes namespace."""
    store = ctx.store
    principal = ctx.principal
    if principal is None:
        return store.graph
    graph = store.graph
    stamp = (len(store), graph.version, store.scope_version)

    def strength(src: int, dst: int, relation: str, total: float) -> float:
        return seen_strength(graph.relation_scopes(src, dst, relation), total, principal,
                             ctx.client_id)

    def build() -> EntityGraph:
        return graph.restricted(store.readable_mask(principal, client_id=ctx.client_id),
                                strength)

    return cached(ctx, ("visible-graph", principal, ctx.client_id), store, stamp, build)


def entity_names(store: MemoryStore, idxs: Sequence[int]) -> dict[int, str]:
    """``{entity index: name}`` for notebooks and traces."""
    keys = [int(i) for i in idxs]
    return dict(zip(keys, store.graph.names(keys), strict=True))


@register_stage("graph")
class Graph(Stage):
    """Retrieve memories by spreading activation from the query's entities (docs/design.md §D0.9).

    A retriever: the incoming candidates are ignored. The BFS trace is written to
    ``ctx.trace["graph"]``: ``seeds`` (entity indices), ``levels`` (per depth, the entities set
    or raised at that depth with their activation), ``activation`` (every activated entity),
    ``names`` (their names) and ``n_memories`` (visible memories reached).

    Args:
        top_k: Keep the best ``top_k`` memories (``None`` = all reached).
        hop_decay: Activation multiplier per hop (design §D0.9: ``GRAPH_SEARCH_DECAY`` = 0.8).
        causal_boost: Extra multiplier on typed relations (design §D0.9: ``CAUSAL_BOOST`` = 2.0).
        max_depth: Maximum number of hops (design §D0.9: ``MAX_DEPTH`` = 2).
        min_activation: Activations below this are dropped (design default 0.1).
        strength_saturation: Edge strength at which an edge carries fully (design §D0.9: 5).
        roles: Links that carry entity activation to a memory (seed: all three roles).
        known_types: Entity types also matched by name in the query (e.g. ``("agent",)``: a
            question that names a speaker seeds that speaker's entity); docs/design.md §D0.9 matches
            extracted names only, which is the default ``()``.
    """

    cacheable = True

    _parameter_constraints: ClassVar[dict[str, list[Any]]] = {
        "top_k": [Interval(Integral, 1, None, closed="left"), None],
        "hop_decay": [Interval(Real, 0, 1, closed="both")],
        "causal_boost": [Interval(Real, 0, None, closed="left")],
        "max_depth": [Interval(Integral, 0, None, closed="left")],
        "min_activation": [Interval(Real, 0, None, closed="left")],
        "strength_saturation": [Interval(Real, 0, None, closed="neither")],
        "roles": [SequenceOf(Options(str, ENTITY_ROLES))],
        "known_types": [SequenceOf(Predicate(str, str.strip, "a non-empty str"))],
    }

    columns = (score_column("graph_score", "spreading activation from the query's entities"),)
    embeds_other_texts = False  # embeds no text but the query

    def __init__(
        self,
        top_k: int | None = 100,
        hop_decay: float = 0.8,
        causal_boost: float = 2.0,
        max_depth: int = 2,
        min_activation: float = 0.1,
        strength_saturation: float = 5.0,
        roles: tuple[str, ...] = ("about", "source", "mentioned"),
        known_types: tuple[str, ...] = (),
    ) -> None:
        self.top_k = top_k
        self.hop_decay = hop_decay
        self.causal_boost = causal_boost
        self.max_depth = max_depth
        self.min_activation = min_activation
        self.strength_saturation = strength_saturation
        self.roles = roles
        self.known_types = known_types

    def activate(self, ctx: QueryContext) -> tuple[np.ndarray, dict[str, Any]]:
        """Memory activation (one float per store row, 0 where not reached) and the BFS trace.

        Visibility is not applied here; :meth:`transform` applies it.
        """
        if self.top_k is not None and (
            isinstance(self.top_k, bool) or not isinstance(self.top_k, int) or self.top_k < 1
        ):
            raise ValueError(f"graph.py: Graph field 'top_k' must be an int >= 1 or None, "
                             f"got {self.top_k!r}")
        roles = check_roles(self.roles, "graph.py: Graph")
        store = ctx.store
        seeds = store.query_entities(ctx.text, known_types=self.known_types)
        mem_act = np.zeros(len(store), dtype=np.float64)
        trace: dict[str, Any] = {"seeds": list(seeds), "levels": [], "activation": {},
                                 "names": {}, "n_memories": 0}
        if not seeds:
            return mem_act, trace
        act, levels = visible_graph(ctx).spread_activation(
            seeds,
            hop_decay=self.hop_decay,
            causal_boost=self.causal_boost,
            max_depth=self.max_depth,
            min_activation=self.min_activation,
            strength_saturation=self.strength_saturation,
            trace=True,
        )
        trace["levels"] = [dict(level) for level in levels]
        trace["activation"] = dict(act)
        trace["names"] = entity_names(store, list(act))
        if act:
            mem_act = memory_activation(ctx, roles, act)
        return mem_act, trace

    def transform(self, frame: pl.DataFrame, ctx: QueryContext) -> pl.DataFrame:
        mem_act, trace = self.activate(ctx)
        rows = np.flatnonzero(ctx.visible_mask() & (mem_act > 0.0))
        trace["n_memories"] = int(len(rows))
        ctx.trace["graph"] = trace
        if len(rows) == 0:
            return empty_candidates({"graph_score": pl.Float64()})
        return candidates_from_rows(ctx, rows, mem_act[rows], "graph_score", top_k=self.top_k)
