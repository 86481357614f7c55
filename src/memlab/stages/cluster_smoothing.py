"""Cluster smoothing: a memory's score includes the evidence of its session and its entities.

Cluster-based retrieval scores a document together with the cluster it belongs to (Liu & Croft,
"Cluster-Based Retrieval Using Language Models", SIGIR 2004; Kurland & Lee, "Corpus Structure,
Language Models, and Ad Hoc Information Retrieval", SIGIR 2004): a document in a cluster that
matches the query as a whole is more likely relevant than its own text shows. Agent memories
come with two natural clusters: the **session** it was written in (a client's stream of writes
without a pause longer than ``max_gap_seconds``, as in the ``neighbors`` stage) and the
**entities** it mentions (links of the store's entity graph whose role is in ``roles``).

Over the head of the list (the ``top_n`` leading candidates, the pseudo-relevant set), with
``s̃`` the incoming score min-max scaled to [0, 1] over the head::

    session(d) = mean_{d' ∈ head, session(d') = session(d), d' ≠ d} s̃(d')        (0 if none)
    entity(d)  = mean_{e ∈ E(d)} mean_{d' ∈ head ∩ M(e), d' ≠ d} s̃(d')           (0 if none)
    score'(d)  = s̃(d) + session_weight · session(d) + entity_weight · entity(d)

where ``E(d)`` are the entities linked to ``d`` and ``M(e)`` the memories linked to ``e`` (an
entity linked to no other head memory is left out of ``E(d)``'s mean). Candidates below the head
keep their incoming order, below it. memlab's adaptation of cluster interpolation (there with
language-model probabilities) to fused retrieval scores. Defaults: ``session_weight = 0.5``, the
value chosen on each half of LoCoMo's conversations when the other half is held out
(``eval/locomo_cv.py``); ``entity_weight = 0``, because the entity term could not be tuned there:
4% of LoCoMo's turns carry an entity the extractor finds (a multi-word name), and no weight
changed a ranking measurably.
"""

from __future__ import annotations

from typing import Any, ClassVar

import numpy as np
import polars as pl
import scipy.sparse as sp

from memlab.memory.records import ENTITY_ROLES
from memlab.stages.base import (
    HeadReranker,
    QueryContext,
    register_stage,
    score_column,
)
from memlab.stages.constraints import Integral, Interval, Options, Real, SequenceOf
from memlab.stages.graph import cached, check_roles, memory_incidence


def minmax(x: np.ndarray) -> np.ndarray:
    """``(x - min) / (max - min)``; all 1 when ``x`` is constant."""
    if len(x) == 0:
        return x.astype(np.float64)
    span = float(x.max() - x.min())
    return np.ones(len(x)) if span == 0 else (x - x.min()) / span


def session_ids(ctx: QueryContext, max_gap_seconds: float) -> np.ndarray:
    """A session id for every store row: a client's writes in time order, cut at every pause
    longer than ``max_gap_seconds`` (cached until the store gains a row).

    For an agent (the query's principal) only the memories of the namespaces it reads make
    sessions (the others get -1): another agent's private write in a pause would otherwise
    join two of its sessions, and show through their scores."""
    store = ctx.store
    principal = ctx.principal

    def build() -> np.ndarray:
        n = len(store)
        client = store.column("client")
        created = store.column("created_at")
        order = np.lexsort((np.arange(n), created, client))
        if principal is not None:
            order = order[store.readable_mask(principal)[order]]
        new = np.ones(len(order), dtype=bool)
        if len(order) > 1:
            a, b = order[:-1], order[1:]
            new[1:] = (client[a] != client[b]) | (created[b] - created[a] > max_gap_seconds)
        ids = np.full(n, -1, dtype=np.int64)
        ids[order] = np.cumsum(new) - 1
        return ids

    key = ("sessions", float(max_gap_seconds), principal)
    stamp = (len(store), None if principal is None else store.scope_version)
    return cached(ctx, key, store, stamp, build)


def mean_of_others(groups: sp.csr_matrix, values: np.ndarray) -> np.ndarray:
    """For every item, the mean over its groups of the mean value of the group's other items.

    Args:
        groups: ``(n_groups, n)`` 0/1 membership.
        values: ``(n,)`` item values.

    Returns:
        ``(n,)``: groups with no other item are left out of an item's mean; 0 when none is left.
    """
    size = np.asarray(groups.sum(axis=1)).ravel()
    total = groups @ values
    others = size - 1
    ok = (others > 0).astype(np.float64)
    inv = np.divide(ok, others, out=np.zeros_like(ok), where=others > 0)
    member_t = groups.T.tocsr()
    n_groups = member_t @ ok  # groups with another member, per item
    summed = member_t @ (total * inv) - values * (member_t @ inv)
    return np.divide(summed, n_groups, out=np.zeros_like(summed), where=n_groups > 0)


@register_stage("cluster_smoothing")
class ClusterSmoothing(HeadReranker):
    """Add the mean evidence of each head candidate's session and entities to its score.

    Args:
        top_n: How many leading candidates form the head (the evidence and the re-scored set).
        session_weight: Weight of the session's evidence (0 switches it off).
        entity_weight: Weight of the entities' evidence (0 switches it off).
        max_gap_seconds: A longer pause between two writes of a client starts a new session.
        roles: Entity links that make a memory part of an entity's cluster.

    Output columns: ``session_evidence``, ``entity_evidence`` (null below the head).
    """

    _parameter_constraints: ClassVar[dict[str, list[Any]]] = {
        "top_n": [Interval(Integral, 1, None, closed="left")],
        "session_weight": [Interval(Real, 0, None, closed="left")],
        "entity_weight": [Interval(Real, 0, None, closed="left")],
        "max_gap_seconds": [Interval(Real, 0, None, closed="left")],
        "roles": [SequenceOf(Options(str, ENTITY_ROLES))],
    }

    columns = (
        score_column("session_evidence", "mean scaled score of the session's other candidates"),
        score_column("entity_evidence", "mean scaled score of the entities' other candidates"),
    )
    embeds_other_texts = False  # embeds no text but the query

    def __init__(
        self,
        top_n: int = 50,
        session_weight: float = 0.5,
        entity_weight: float = 0.0,
        max_gap_seconds: float = 3600.0,
        roles: tuple[str, ...] = ("mentioned",),
    ) -> None:
        self.top_n = top_n
        self.session_weight = session_weight
        self.entity_weight = entity_weight
        self.max_gap_seconds = max_gap_seconds
        self.roles = roles

    def evidence(self, rows: np.ndarray, scaled: np.ndarray,
                 ctx: QueryContext) -> tuple[np.ndarray, np.ndarray]:
        """Session and entity evidence of the head rows ``rows`` with scaled scores ``scaled``."""
        n = len(rows)
        session = np.zeros(n)
        if self.session_weight > 0:
            _, local = np.unique(session_ids(ctx, self.max_gap_seconds)[rows], return_inverse=True)
            groups = sp.csr_matrix(
                (np.ones(n), (local.ravel(), np.arange(n))), shape=(int(local.max()) + 1, n)
            )
            session = mean_of_others(groups, scaled)
        entity = np.zeros(n)
        if self.entity_weight > 0:
            roles = check_roles(self.roles, "cluster_smoothing")
            inc, _ = memory_incidence(ctx, roles)
            head = inc[:, rows]
            used = np.flatnonzero(np.asarray(head.sum(axis=1)).ravel() > 0)
            if len(used):
                entity = mean_of_others(head[used].tocsr(), scaled)
        return session, entity

    def rescore(
        self, frame: pl.DataFrame, rows: np.ndarray, head_scores: np.ndarray, ctx: QueryContext
    ) -> tuple[np.ndarray, dict[str, np.ndarray]]:
        scaled = minmax(head_scores)
        session, entity = self.evidence(rows, scaled, ctx)
        new = scaled + self.session_weight * session + self.entity_weight * entity
        return new, {"session_evidence": session, "entity_evidence": entity}
