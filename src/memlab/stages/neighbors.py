"""Conversational neighbours: a memory inherits part of the score of the memories written
just before and after it by the same client.

Agents write memories in streams — the turns of a conversation, the steps of a task — and the
memory that answers a question often sits next to the one that matches it (the answer after
the question, the detail after the announcement). For each candidate ``d``::

    neighbor_score(d) = Σ_{n ∈ N(d)} score(n)
    score'(d)         = score(d) + weight · neighbor_score(d)

where ``N(d)`` are the ``window`` memories on each side of ``d`` in the client's write order,
each written within ``max_gap_seconds`` of the next (a pause ends the stream), and ``score(n)``
is ``n``'s incoming score (0 when ``n`` is not a candidate). With ``add_missing`` a visible
neighbour that was not a candidate enters with its inherited score alone. For an agent the
write order holds only the memories of the namespaces it reads. memlab's own stage.
"""

from __future__ import annotations

import weakref
from typing import Any, ClassVar

import numpy as np
import polars as pl

from memlab.fastframe import f64_series, i64_series
from memlab.stages.base import (
    ROW_COLUMN,
    QueryContext,
    Stage,
    constant_column,
    frame_rows,
    rank_order,
    register_stage,
    score_column,
)
from memlab.stages.constraints import Integral, Interval, Real


@register_stage("neighbors")
class Neighbors(Stage):
    """Smooth scores along each client's write order.

    Args:
        weight: Share of a neighbour's score a memory inherits.
        window: Neighbours on each side.
        max_gap_seconds: Two memories further apart in time are not neighbours.
        add_missing: Bring in visible neighbours that were not candidates.
        top_k: Keep this many candidates (``None`` = all).

    Attributes:
        links_: ``(prev, next)`` row arrays (-1 = none) for the store it last saw.
    """

    _parameter_constraints: ClassVar[dict[str, list[Any]]] = {
        "weight": [Interval(Real, 0, None, closed="left")],
        "window": [Interval(Integral, 0, None, closed="left")],
        "max_gap_seconds": [Interval(Real, 0, None, closed="left")],
        "add_missing": [bool],
        "top_k": [Interval(Integral, 1, None, closed="left"), None],
    }

    columns = (score_column("neighbor_score", "score inherited from write-order neighbours"),)
    embeds_other_texts = False  # embeds no text but the query

    def __init__(
        self,
        weight: float = 0.3,
        window: int = 1,
        max_gap_seconds: float = 3600.0,
        add_missing: bool = True,
        top_k: int | None = None,
    ) -> None:
        self.weight = weight
        self.window = window
        self.max_gap_seconds = max_gap_seconds
        self.add_missing = add_missing
        self.top_k = top_k

    def links(self, ctx: QueryContext) -> tuple[np.ndarray, np.ndarray]:
        """Previous and next row of every store row in its client's stream (-1 = none).

        For an agent (the query's principal) the stream holds only the memories of the
        namespaces it reads: another agent's private memory written between two of its own
        neither separates them nor shows through their scores."""
        store = ctx.store
        principal = ctx.principal
        key: tuple[object, ...] = (len(store), self.max_gap_seconds)
        if principal is not None:
            key = (*key, principal, store.scope_version)
        ref = getattr(self, "store_", None)
        if ref is not None and ref() is store and getattr(self, "links_key_", None) == key:
            return self.links_
        n = len(store)
        client = store.column("client")
        created = store.column("created_at")
        order = np.lexsort((np.arange(n), created, client))
        if principal is not None:
            order = order[store.readable_mask(principal)[order]]
        prev = np.full(n, -1, dtype=np.int64)
        nxt = np.full(n, -1, dtype=np.int64)
        if len(order) > 1:
            a, b = order[:-1], order[1:]
            ok = (client[a] == client[b]) & (created[b] - created[a] <= self.max_gap_seconds)
            prev[b[ok]] = a[ok]
            nxt[a[ok]] = b[ok]
        self.links_ = (prev, nxt)
        self.links_key_ = key
        self.store_ = weakref.ref(store)
        return self.links_

    def transform(self, frame: pl.DataFrame, ctx: QueryContext) -> pl.DataFrame:
        if frame.height == 0 or self.weight == 0:
            return frame
        store = ctx.store
        prev, nxt = self.links(ctx)
        n = len(store)
        score = np.zeros(n, dtype=np.float64)
        present = np.zeros(n, dtype=bool)
        rows = frame_rows(frame, ctx)
        score[rows] = frame["score"].to_numpy()
        present[rows] = True
        # Only the candidates and their neighbours can inherit: walk from the candidates
        # outwards and add each hop's score to the memory it was reached from.
        inherited = np.zeros(n, dtype=np.float64)
        is_near = present.copy()
        for links in (prev, nxt):
            src = rows
            for _ in range(self.window):
                src = links[src]
                src = src[src >= 0]
                is_near[src] = True
        near = np.flatnonzero(is_near)  # ascending, each once (np.unique's order)
        for links in (prev, nxt):
            hop = near
            for _ in range(self.window):
                hop = np.where(hop >= 0, links[np.maximum(hop, 0)], -1)
                has = hop >= 0
                inherited[near[has]] += score[hop[has]] * present[hop[has]]
        targets = present.copy()
        if self.add_missing:
            reach = np.zeros(n, dtype=bool)
            for links in (prev, nxt):
                hop = rows.copy()
                for _ in range(self.window):
                    hop = hop[hop >= 0]
                    hop = links[hop]
                    reach[hop[hop >= 0]] = True
            targets |= reach & ctx.visible_mask()
        new_rows = np.flatnonzero(targets & ~present)
        # Candidates, then the neighbours added, ranked on arrays; the output is one gather of
        # the input (an added neighbour's index is past its end: nulls), new columns set.
        every = np.concatenate([rows, new_rows])
        final = np.concatenate([score[rows] + self.weight * inherited[rows],
                                self.weight * inherited[new_rows]])
        order = rank_order(store, every, final, self.top_k)
        out = frame.gather(pl.Series(order), null_on_oob=True)  # added rows: past the end
        ranked = every[order]
        m = len(order)
        for col in (
            constant_column("qid", ctx.qid, m),
            store.ids_at(ranked),
            f64_series("score", final[order]),
            i64_series("rank", np.arange(1, m + 1, dtype=np.int64)),
            i64_series(ROW_COLUMN, ranked),
            f64_series("neighbor_score", inherited[ranked]),
        ):
            if col.name in out.columns:
                out.replace_column(out.get_column_index(col.name), col)
            else:
                out.insert_column(out.width, col)
        return out
